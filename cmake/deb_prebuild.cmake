# Run by CPack (CPACK_PRE_BUILD_SCRIPTS) on the package's staged tree, before it is packed.
# What lintian reports otherwise:
#
# - the folders are made 0755: the install made them with the umask of whoever runs make
#   deb (CMake's default folder permissions pass through it), and a package of 0700 folders
#   would hide its files from everyone but root;
# - what dh_strip strips and CPack's strip leaves: the .comment and .note sections of the
#   programs and the shared library, and the debugging symbols of the static library (all
#   symbols would be its link table).
file(GLOB_RECURSE folders LIST_DIRECTORIES true "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*")
foreach(f ${folders})
  if(IS_DIRECTORY "${f}" AND NOT IS_SYMLINK "${f}")
    file(CHMOD "${f}" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ
                                            GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  endif()
endforeach()

file(GLOB_RECURSE staged LIST_DIRECTORIES false "${CPACK_TEMPORARY_INSTALL_DIRECTORY}/*")
foreach(f ${staged})
  if(IS_SYMLINK "${f}")
    continue()
  endif()
  if(f MATCHES "/s?bin/[^/]+$" OR f MATCHES "\\.so(\\.[0-9]+)*$")
    set(args --remove-section=.comment --remove-section=.note)
  elseif(f MATCHES "\\.a$")
    set(args --strip-debug --remove-section=.comment --remove-section=.note
             --enable-deterministic-archives)
  else()
    continue()
  endif()
  execute_process(COMMAND strip ${args} "${f}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "strip ${args} ${f} failed")
  endif()
endforeach()
