#!/usr/bin/env bash
# The server group's randomized run for 30 minutes (tests/integration/ha_nemesis.py): a
# seeded nemesis kills, stops, cuts off and slows the servers of a group under load, then
# checks the clients' history. On demand, not part of `make test`.
#
#   tests/soak/ha_nemesis.sh [--seconds N] [--seed N]
#
# MUTEXD_BIN chooses the binary (default build/mutexd); MUTEXD_NEMESIS_SEED the seed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export MUTEXD_BIN=${MUTEXD_BIN:-$root/build/mutexd}
[ -x "$MUTEXD_BIN" ] || { echo "ha_nemesis.sh: no $MUTEXD_BIN (make build)" >&2; exit 1; }
"$root/scripts/azurite.sh" install >/dev/null
exec /usr/bin/python3 "$root/tests/integration/ha_nemesis.py" --seconds 1800 "$@"
