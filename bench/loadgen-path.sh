# shellcheck shell=bash
# Sourced by the benchmark scripts (bash, run from the repository's root).
# loadgen_path BUILD WORK: sets LOADGEN to BUILD/loadgen, or, when that is missing or older
# than its sources, compiles loadgen into WORK and sets LOADGEN to that.
loadgen_path() {
    local f stale=0
    LOADGEN=$1/loadgen
    [[ -x $LOADGEN ]] || stale=1
    for f in bench/loadgen.c bench/lg_*.[ch]; do
        [[ $f -nt $LOADGEN ]] && stale=1
    done
    if ((stale)); then
        LOADGEN=$2/loadgen
        cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla \
            bench/loadgen.c bench/lg_wire.c bench/lg_hist.c -o "$LOADGEN"
    fi
}
