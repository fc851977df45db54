#!/usr/bin/env bash
# The bash completion of mutexctl (packaging/completion/mutexctl), sourced into a bash with
# no bash-completion package, asked as bash asks it (COMP_LINE, COMP_POINT, COMP_WORDS,
# COMP_CWORD), against mutexctl's own --help: every command of `mutexctl --help` is
# completed, and after each command exactly its options (`mutexctl COMMAND --help`) and the
# global ones; a few cases by hand (a prefix, an option's value, a URL with ':' before the
# command, run's program); and resource names from a real server (build/mutexd), a name
# with ':' in it among them.
#
#   tests/meta/completion.sh   (MUTEXD_BIN, MUTEXCTL_BIN: default build/mutexd and
#                               build/clients/c/mutexctl)
set -euo pipefail
cd "$(dirname "$0")/../.."
MUTEXD_BIN=${MUTEXD_BIN:-build/mutexd}
MUTEXCTL_BIN=${MUTEXCTL_BIN:-build/clients/c/mutexctl}
CTL=$(cd "$(dirname "$MUTEXCTL_BIN")" && pwd)/$(basename "$MUTEXCTL_BIN")

WORK=$(mktemp -d)
server_pid=""
cleanup() {
    [ -z "$server_pid" ] || { kill "$server_pid" 2>/dev/null && wait "$server_pid" || true; }
    rm -rf "$WORK"
}
trap cleanup EXIT
failures=0
fail() {
    echo "completion: FAILED: $*" >&2
    failures=$((failures + 1))
}

unset MUTEXD_URL MUTEXD_TOKEN MUTEXD_CA_FILE
# The completion asks the server of the line, else MUTEXD_URL: a port nobody listens on.
export MUTEXD_URL=http://127.0.0.1:9
# shellcheck source=/dev/null
. packaging/completion/mutexctl
[ "$(complete -p mutexctl)" = "complete -F _mutexctl mutexctl" ] ||
    fail "no 'complete -F _mutexctl mutexctl' after sourcing"

# complete LINE: what bash gets for LINE with the cursor at its end, sorted, one per line.
# The line's first word is mutexctl as built here, so that resource names come from it.
complete_line() {
    COMP_LINE="$CTL ${1#mutexctl }"
    COMP_POINT=${#COMP_LINE}
    # bash's own split: at blanks and at COMP_WORDBREAKS (':' and '=' among them).
    local split
    split=$(printf '%s' "$COMP_LINE" | sed -E 's/([:=])/ \1 /g')
    read -ra COMP_WORDS <<<"$split"
    [[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _mutexctl mutexctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    printf '%s\n' "${COMPREPLY[@]}" | sed '/^$/d' | sort
}

# expect LINE WORDS...: the completions of LINE are exactly WORDS.
expect() {
    local line=$1 want got
    shift
    want=$(printf '%s\n' "$@" | sed '/^$/d' | sort)
    got=$(complete_line "$line")
    [ "$got" = "$want" ] || fail "'$line<TAB>': got [$(echo $got)], want [$(echo $want)]"
}

# ---- against --help ------------------------------------------------------------------------
help=$("$CTL" --help)
commands=$(printf '%s\n' "$help" | sed -n '/^Commands:/,/^Options of every command/p' |
    sed -n 's/^  \([a-z][a-z]*\) .*/\1/p' | sort -u)
globals=$(printf '%s\n' "$help" | sed -n '/^Options of every command/,/^$/p' |
    grep -o -- '--[a-z][a-z-]*' | sort -u)
[ -n "$commands" ] && [ -n "$globals" ] || fail "cannot read the commands of mutexctl --help"
# status's alias: "status RESOURCE ... get is the same".
expect "mutexctl " $commands get
for c in $commands get; do
    own=$("$CTL" "$c" --help | { grep -o -- '^  --[a-z][a-z-]*' || true; } | sed 's/^ *//' | sort -u)
    extra=""
    [ "$c" = run ] && extra=--
    # shellcheck disable=SC2086 # words
    expect "mutexctl $c --" $own $globals $extra
done

# ---- by hand -------------------------------------------------------------------------------
expect "mutexctl ac" acquire
expect "mutexctl re" release renew
expect "mutexctl --json wh" whoami
expect "mutexctl --url http://127.0.0.1:1,http://127.0.0.1:2 st" status
expect "mutexctl --timeout 2s acquire jobs/a --sh" --shared
expect "mutexctl acquire jobs/a --json --ow" --owner
expect "mutexctl acquire jobs/a --ttl " # a duration: nothing to offer
expect "mutexctl token " hash
expect "mutexctl token hash --scopes read,w" read,write # "," splits no word in bash
expect "mutexctl token hash --scopes a" admin
expect "mutexctl run jobs/a --wait 1s -- mutexct" "$(compgen -c -- mutexct | sort -u)"
expect "mutexctl run jobs/a -- echo --sh" # the program's own words: files, never options
mkdir -p "$WORK/files"
: >"$WORK/files/lease-1"
: >"$WORK/files/lease-2"
expect "mutexctl check --lease-file $WORK/files/lea" "$WORK/files/lease-1" "$WORK/files/lease-2"
expect "mutexctl status " # no server on MUTEXD_URL: nothing, and quickly

# ---- resource names from a server ----------------------------------------------------------
"$MUTEXD_BIN" --listen 127.0.0.1:0 --data-dir "$WORK/data" 2>"$WORK/log" &
server_pid=$!
for _ in $(seq 100); do
    grep -q 'msg="started"' "$WORK/log" && break
    sleep 0.1
done
addr=$(sed -n 's/.*msg="started".* address=\([^ ]*\).*/\1/p' "$WORK/log")
[ -n "$addr" ] || { cat "$WORK/log" >&2; fail "the server did not start"; exit 1; }
url=http://$addr
for r in jobs/alpha jobs/beta other/x db:main; do
    "$CTL" --url "$url" acquire "$r" --ttl 60s >/dev/null
done
expect "mutexctl --url $url status jobs/" jobs/alpha jobs/beta
expect "mutexctl --url $url renew " db:main jobs/alpha jobs/beta other/x
expect "mutexctl --url $url release jobs/alpha " # the second argument is a lease id
expect "mutexctl --url $url status db:m" main    # bash holds "db:" as words of its own
MUTEXCTL_COMPLETE_RESOURCES=0 expect "mutexctl --url $url status jobs/"
MUTEXD_URL=$url expect "mutexctl break o" other/x

if [ "$failures" -ne 0 ]; then
    echo "completion: $failures case(s) failed" >&2
    exit 1
fi
echo "completion: $(echo $commands get | wc -w) commands and their options as mutexctl --help says, and names from a server"
