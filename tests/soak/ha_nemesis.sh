#!/usr/bin/env bash
# The server group's randomized run for 30 minutes (tests/integration/ha_nemesis.py): a
# seeded nemesis kills, stops, cuts off and slows the servers of a group under load, then
# checks the clients' history. On demand, not part of `make test`.
#
#   tests/soak/ha_nemesis.sh [SECONDS] [SEED] [PARTITIONS]
#
# The time is run in segments of at most 540 s, each on a fresh group and a fresh Azurite,
# each checked: Azurite collects the blocks it keeps in memory every 10 minutes and answers
# nothing for over a minute meanwhile, which would stop any longer run whatever the servers
# do. Segment i runs seed SEED+i. PARTITIONS (default 1) partitions the group: then a
# SIGTERM is a leave and a return a join. MUTEXD_BIN chooses the binary (default
# build/mutexd).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MUTEXD_BIN=${MUTEXD_BIN:-$root/build/mutexd}
[ -x "$MUTEXD_BIN" ] || { echo "ha_nemesis.sh: no $MUTEXD_BIN (make build)" >&2; exit 1; }
"$root/scripts/azurite.sh" install >/dev/null
total=${1:-1800}
seed=${2:-${MUTEXD_NEMESIS_SEED:-$((RANDOM * 32768 + RANDOM))}}
partitions=${3:-1}
echo "ha_nemesis.sh: $total s in segments of 540 s at most, $partitions partition(s)," \
    "seeds from $seed"
done_s=0 i=0 failed=0
while [ "$done_s" -lt "$total" ]; do
    len=$((total - done_s < 540 ? total - done_s : 540))
    if ! /usr/bin/python3 "$root/tests/integration/ha_nemesis.py" --seconds "$len" \
        --seed $((seed + i)) --partitions "$partitions"; then
        failed=$((failed + 1))
    fi
    done_s=$((done_s + len))
    i=$((i + 1))
done
echo "ha_nemesis.sh: $i segments, $done_s s, $((i - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
