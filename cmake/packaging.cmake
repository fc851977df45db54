# What `make install` lays out beside the programs and the C client, and the Debian package
# that `make deb` makes of the same install (CPack, DEB generator). Included at the end of
# the top CMakeLists.txt, after the targets it installs.
#
# The files themselves are in packaging/: the systemd unit (systemd/), the example
# environment file (default/), the man pages (man/), mutexctl's bash completion
# (completion/), the mutexd user for systemd-sysusers (sysusers/), and the Debian maintainer
# scripts, conffiles list, copyright, changelog and lintian overrides (debian/).
#
# Where each goes, for PREFIX=/usr (the package's prefix) and PREFIX=/usr/local (the default):
#
#   sbin/mutexd, bin/mutexctl            the server (only a build without the fault seams),
#                                        and the tool
#   share/man/man8/mutexd.8              the man pages (gzipped in the package)
#   share/man/man1/mutexctl.1
#   share/bash-completion/completions/mutexctl
#   /lib/systemd/system/mutexd.service   with PREFIX=/usr, where Debian 12's packages put
#                                        units; else PREFIX/lib/systemd/system, which systemd
#                                        also reads for /usr/local. MUTEXD_SYSTEMD_UNITDIR
#                                        sets another folder.
#   lib/sysusers.d/mutexd.conf           the mutexd system user, for systemd-sysusers
#   share/doc/mutexd/examples/mutexd.default
#                                        the example environment file; `make install` never
#                                        writes to /etc, so it never overwrites settings. The
#                                        package installs it as /etc/default/mutexd instead, a
#                                        conffile, which dpkg keeps when it was edited.
#
# MUTEXD_DEB=ON (make deb) lays the install out as the package ships it: the environment file
# in SYSCONFDIR/default (/etc/default for /usr), the man pages and the Debian changelog
# gzipped (-9n: no name, no time, so the same sources give the same package), the copyright
# file and the lintian overrides. The package is a native one (built from this repository,
# not from an upstream tarball: its version is VERSION's, without a Debian revision), so its
# changelog is share/doc/mutexd/changelog.gz.

include(GNUInstallDirs)

option(MUTEXD_DEB "Lay the install out as the Debian package (make deb) ships it" OFF)

set(MUTEXD_PACKAGING_DIR ${CMAKE_SOURCE_DIR}/packaging)
# A source tree without packaging/ (the Dockerfile's build stage copies only what it
# compiles) installs the programs and the C client alone.
if(NOT EXISTS ${MUTEXD_PACKAGING_DIR}/systemd/mutexd.service)
  if(MUTEXD_DEB)
    message(FATAL_ERROR "MUTEXD_DEB needs packaging/, which this source tree lacks")
  endif()
  return()
endif()

if(NOT MUTEXD_SYSTEMD_UNITDIR)
  if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
    set(MUTEXD_SYSTEMD_UNITDIR /lib/systemd/system)
  else()
    set(MUTEXD_SYSTEMD_UNITDIR lib/systemd/system)
  endif()
endif()

# mutexctl's man page and completion go with mutexctl, which every build installs; the
# server's files only with the server, which only a build without the fault seams installs.
set(mutexd_man_pages ${MUTEXD_PACKAGING_DIR}/man/mutexctl.1)
if(NOT MUTEXD_FAULT_INJECTION)
  list(APPEND mutexd_man_pages ${MUTEXD_PACKAGING_DIR}/man/mutexd.8)
endif()

if(MUTEXD_DEB)
  # gzip -9n at build time, into the build folder; what the package ships.
  set(gz_dir ${CMAKE_BINARY_DIR}/packaging)
  set(gz_files "")
  foreach(src ${mutexd_man_pages} ${MUTEXD_PACKAGING_DIR}/debian/changelog)
    get_filename_component(name ${src} NAME)
    add_custom_command(
      OUTPUT ${gz_dir}/${name}.gz
      COMMAND ${CMAKE_COMMAND} -E make_directory ${gz_dir}
      COMMAND sh -c "gzip -9nc \"$0\" >\"$1\"" ${src} ${gz_dir}/${name}.gz
      DEPENDS ${src}
      VERBATIM)
    list(APPEND gz_files ${gz_dir}/${name}.gz)
  endforeach()
  add_custom_target(mutexd_gzipped ALL DEPENDS ${gz_files})
  set(man_files ${gz_files})
  list(FILTER man_files INCLUDE REGEX "\\.[18]\\.gz$")
else()
  set(man_files ${mutexd_man_pages})
endif()
foreach(page ${man_files})
  string(REGEX MATCH "\\.([18])(\\.gz)?$" _ ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${CMAKE_MATCH_1})
endforeach()

install(FILES ${MUTEXD_PACKAGING_DIR}/completion/mutexctl
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)

if(NOT MUTEXD_FAULT_INJECTION)
  # The unit names the server as /usr/sbin/mutexd; installed under another prefix, it names
  # the one installed there (under /usr, the unit is installed as it is written).
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${MUTEXD_PACKAGING_DIR}/systemd/mutexd.service)
  file(READ ${MUTEXD_PACKAGING_DIR}/systemd/mutexd.service unit_text)
  string(REPLACE "/usr/sbin/mutexd" "${CMAKE_INSTALL_FULL_SBINDIR}/mutexd" unit_text
                 "${unit_text}")
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/packaging/mutexd.service CONTENT "${unit_text}")
  install(FILES ${CMAKE_BINARY_DIR}/packaging/mutexd.service
          DESTINATION ${MUTEXD_SYSTEMD_UNITDIR})
  # systemd-sysusers reads PREFIX/lib/sysusers.d for /usr and /usr/local alike (not libdir:
  # it is not an architecture's folder).
  install(FILES ${MUTEXD_PACKAGING_DIR}/sysusers/mutexd.conf DESTINATION lib/sysusers.d)
  if(MUTEXD_DEB)
    # Readable by root alone: the settings may come to hold the blob storage connection
    # string (the service manager reads the file before it starts the server).
    install(FILES ${MUTEXD_PACKAGING_DIR}/default/mutexd
            DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/default
            PERMISSIONS OWNER_READ OWNER_WRITE)
    install(FILES ${MUTEXD_PACKAGING_DIR}/debian/copyright ${gz_dir}/changelog.gz
            DESTINATION ${CMAKE_INSTALL_DOCDIR})
    install(FILES ${MUTEXD_PACKAGING_DIR}/debian/mutexd.lintian-overrides
            DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides RENAME mutexd)
  else()
    install(FILES ${MUTEXD_PACKAGING_DIR}/default/mutexd
            DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples RENAME mutexd.default)
  endif()
endif()

if(NOT MUTEXD_DEB)
  return()
endif()
if(MUTEXD_FAULT_INJECTION OR MUTEXD_TESTS)
  message(FATAL_ERROR "MUTEXD_DEB packages the shipped server: configure with "
                      "-DMUTEXD_FAULT_INJECTION=OFF -DMUTEXD_TESTS=OFF")
endif()
# GNUInstallDirs picks Debian's folders (lib/<multiarch>, /etc) for the prefix /usr alone.
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(FATAL_ERROR "MUTEXD_DEB needs -DCMAKE_INSTALL_PREFIX=/usr")
endif()

# The package's version is VERSION's; the changelog's newest entry must say the same.
file(STRINGS ${MUTEXD_PACKAGING_DIR}/debian/changelog changelog_top LIMIT_COUNT 1)
if(NOT changelog_top MATCHES "^mutexd \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "packaging/debian/changelog starts with '${changelog_top}', but "
                      "VERSION says ${PROJECT_VERSION}")
endif()

set(MUTEXD_DEB_MAINTAINER "The mutexd authors <maintainers@mutexd.example>"
    CACHE STRING "The Debian package's Maintainer field")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME mutexd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${MUTEXD_DEB_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "lease server for leader election and guarded resources")
# Each line of the long description is a line of the control file: under 80 columns.
# CPack puts the summary above it, as the synopsis.
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
  "mutexd grants timed, exclusive leases on named resources over HTTP/JSON, so\n"
  "that of many identical workers exactly one holds a resource at a time: leader\n"
  "election, or any shared resource only one worker may touch. Every grant\n"
  "carries a fencing token larger than every grant before it; an answered change\n"
  "is on disk (SQLite) before the answer. Shared leases and counting semaphores,\n"
  "waiting in line, watches, and a group of servers on Azure Blob Storage.\n"
  ".\n"
  "This package has the server, run by its systemd unit as the mutexd user, the\n"
  "mutexctl tool, and libmutexd, the C client library.")
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/mutexd/mutexd")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
# Depends: what dpkg-shlibdeps finds the binaries link (libc6, libmicrohttpd12, libcurl4,
# ...), plus adduser, which postinst runs.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
# A unit whose ExecReload runs kill(1) needs procps, which has it on Debian 12 and which a
# minimal system (a container's) lacks: `systemctl reload` would fail with 203/EXEC.
file(STRINGS ${MUTEXD_PACKAGING_DIR}/systemd/mutexd.service reload_kill
     REGEX "^ExecReload=[-@:+!]*(/usr)?(/bin/)?kill ")
if(reload_kill)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", procps")
endif()
# The shlibs file for libmutexd.so.1 (CPack), and the trigger that runs ldconfig after
# the install and the removal of a shared library (triggers, ours).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# A program built against this version runs with any later one of the same SONAME.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_STRIP_FILES ON)
set(CPACK_PRE_BUILD_SCRIPTS ${CMAKE_SOURCE_DIR}/cmake/deb_prebuild.cmake)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${MUTEXD_PACKAGING_DIR}/debian/conffiles ${MUTEXD_PACKAGING_DIR}/debian/postinst
    ${MUTEXD_PACKAGING_DIR}/debian/prerm ${MUTEXD_PACKAGING_DIR}/debian/postrm
    ${MUTEXD_PACKAGING_DIR}/debian/triggers)
include(CPack)
