# The blob client (persistence/blob.c) and its tests. Included from the root CMakeLists.txt
# after mx_unit_test() is defined.

add_library(mx_blob STATIC persistence/blob.c)
target_link_libraries(mx_blob PUBLIC mx_common PkgConfig::CURL PkgConfig::CRYPTO)

# Pure tests: connection strings, encoding, signing against fixed vectors, the listing parser.
mx_unit_test(blob SOURCES tests/unit/test_blob.c LIBS mx_blob LABELS "unit")

# Against a real Azurite: scripts/with-azurite.sh starts a fresh one on a free port for each
# case, exports MUTEXD_TEST_BLOB_CONNECTION_STRING, runs the case and always stops it. The
# first run installs the pinned Azurite with npm ci (tests/azurite), hence the timeout.
add_executable(test_blob_azurite tests/unit/test_blob_azurite.c)
target_link_libraries(test_blob_azurite PRIVATE mx_blob PkgConfig::CMOCKA)
file(READ tests/unit/test_blob_azurite.c blob_azurite_text)
string(REGEX MATCHALL "cmocka_unit_test[a-z_]*\\([A-Za-z0-9_]+" blob_azurite_calls
             "${blob_azurite_text}")
foreach(call ${blob_azurite_calls})
  string(REGEX REPLACE ".*\\(" "" case "${call}")
  add_test(NAME blob_azurite.${case}
           COMMAND ${CMAKE_SOURCE_DIR}/scripts/with-azurite.sh $<TARGET_FILE:test_blob_azurite>
                   ${case})
  set_tests_properties(blob_azurite.${case} PROPERTIES TIMEOUT 300 LABELS "azurite")
endforeach()
