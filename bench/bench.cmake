# Benchmark tools, included from the root CMakeLists.txt; run on demand, never by ctest.
#
# loadgen: closed-loop load on N keep-alive connections against mutexd, Redis or etcd on
# loopback (one thread, epoll, hand-written HTTP/1.1 and RESP). bench/compare.sh runs it
# against all three; `loadgen --help` lists the scenarios and options.
add_executable(loadgen ${CMAKE_CURRENT_LIST_DIR}/loadgen.c ${CMAKE_CURRENT_LIST_DIR}/lg_wire.c
                       ${CMAKE_CURRENT_LIST_DIR}/lg_hist.c)

# commit_bench: the store's commit of a hand-off, an acquire and a release against the
# disk's own fdatasync, alternating on one thread; what SQLite adds to a durable change.
add_executable(commit_bench ${CMAKE_CURRENT_LIST_DIR}/commit_bench.c)
target_link_libraries(commit_bench PRIVATE mx_store)
