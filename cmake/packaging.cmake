# What `make install` lays out beside the programs and the C client. Included at the end of
# the top CMakeLists.txt, after the targets it installs.
#
# The files themselves are in packaging/: the systemd unit (systemd/), the example
# environment file (default/), the man pages (man/), mutexctl's bash completion
# (completion/), and the mutexd user for systemd-sysusers (sysusers/).
#
# Where each goes, for PREFIX=/usr (the package's prefix) and PREFIX=/usr/local (the default):
#
#   sbin/mutexd, bin/mutexctl            the server (only a build without the fault seams),
#                                        and the tool
#   share/man/man8/mutexd.8              the man pages
#   share/man/man1/mutexctl.1
#   share/bash-completion/completions/mutexctl
#   /lib/systemd/system/mutexd.service   with PREFIX=/usr, where Debian 12's packages put
#                                        units; else PREFIX/lib/systemd/system, which systemd
#                                        also reads for /usr/local. MUTEXD_SYSTEMD_UNITDIR
#                                        sets another folder.
#   lib/sysusers.d/mutexd.conf           the mutexd system user, for systemd-sysusers
#   share/doc/mutexd/examples/mutexd.default
#                                        the example environment file; `make install` never
#                                        writes to /etc, so it never overwrites settings.
#
include(GNUInstallDirs)

set(MUTEXD_PACKAGING_DIR ${CMAKE_SOURCE_DIR}/packaging)

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

foreach(page ${mutexd_man_pages})
  string(REGEX MATCH "\\.([18])$" _ ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${CMAKE_MATCH_1})
endforeach()

install(FILES ${MUTEXD_PACKAGING_DIR}/completion/mutexctl
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)

if(NOT MUTEXD_FAULT_INJECTION)
  install(FILES ${MUTEXD_PACKAGING_DIR}/systemd/mutexd.service
          DESTINATION ${MUTEXD_SYSTEMD_UNITDIR})
  # systemd-sysusers reads PREFIX/lib/sysusers.d for /usr and /usr/local alike (not libdir:
  # it is not an architecture's folder).
  install(FILES ${MUTEXD_PACKAGING_DIR}/sysusers/mutexd.conf DESTINATION lib/sysusers.d)
  install(FILES ${MUTEXD_PACKAGING_DIR}/default/mutexd
          DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples RENAME mutexd.default)
endif()
