#!/usr/bin/env bash
# Starts mutexd the way its installed systemd unit does, without systemd: the unit's
# ExecStart= line, as its User= (and Group=), with the variables of its Environment= lines
# and of its EnvironmentFile= files (a leading "-": the file may be missing), in the
# foreground (exec). Extra VAR=VALUE arguments come last, so they win (a free port for
# MUTEXD_LISTEN, which also replaces the address of a --listen in ExecStart=). The folders
# of StateDirectory= and RuntimeDirectory= are made as systemd makes them, owned by the
# user, with the unit's mode (else systemd's 0755); one that exists is only given to the
# user.
#
#   unit_exec.sh UNIT_FILE [VAR=VALUE...]
#
# What it reads of the unit is what a service of this kind uses; it fails on what it does
# not understand rather than run something else than systemd would.
set -euo pipefail

unit=${1:?usage: unit_exec.sh UNIT_FILE [VAR=VALUE...]}
shift

# The [Service] section's settings, one "Key=value" a line (continuation lines joined).
settings=$(sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' "$unit" |
    awk '/^\[/ { s = ($0 == "[Service]") } s && /^[A-Za-z]+=/')
get() { printf '%s\n' "$settings" | sed -n "s/^$1=//p"; }

fail() {
    echo "unit_exec: $*" >&2
    exit 1
}

execstart=$(get ExecStart)
[ -n "$execstart" ] || fail "no ExecStart= in $unit"
[ "$(printf '%s\n' "$execstart" | wc -l)" -eq 1 ] || fail "more than one ExecStart= in $unit"
# Prefixes: "-" (failure ignored), "@", ":", "+", "!", "!!": none changes the command here
# but "@" (argv[0] apart), which a unit of this kind has no use for.
case $execstart in
@*) fail "ExecStart=@ is not handled" ;;
esac
execstart=${execstart##[-:+!]}
execstart=${execstart##[-:+!]}
# The specifiers a system service may use for its folders; %% last.
execstart=$(printf '%s' "$execstart" | sed -e 's|%S|/var/lib|g; s|%t|/run|g; s|%C|/var/cache|g;
    s|%L|/var/log|g; s|%E|/etc|g; s|%n|mutexd.service|g; s|%N|mutexd|g; s|%%|%|g')
case $execstart in
*%*) fail "ExecStart= has a specifier this script does not know: $execstart" ;;
esac

user=$(get User)
[ -n "$user" ] || fail "no User= in $unit: the server would run as root"
group=$(get Group)
[ -n "$group" ] || group=$(id -gn "$user")

env=()
while IFS= read -r line; do
    # Environment="A=1" B=2: systemd's quoting, enough of it for KEY=VALUE words.
    eval "words=($line)"
    env+=("${words[@]}")
done < <(get Environment)
while IFS= read -r file; do
    optional=false
    case $file in -*) optional=true file=${file#-} ;; esac
    if [ ! -e "$file" ]; then
        $optional || fail "EnvironmentFile=$file is missing"
        continue
    fi
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line#"${line%%[![:space:]]*}"}
        case $line in '' | '#'* | ';'*) continue ;; esac
        key=${line%%=*}
        value=${line#*=}
        [[ $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || fail "$file: not KEY=VALUE: $line"
        # A value in double or single quotes is the text between them.
        if [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]]; then value=${BASH_REMATCH[1]}; fi
        env+=("$key=$value")
    done <"$file"
done < <(get EnvironmentFile)
env+=("$@")
# A --listen in ExecStart= would win over MUTEXD_LISTEN (a flag wins over its variable): a
# MUTEXD_LISTEN given here replaces its address.
for arg in "$@"; do
    case $arg in
    MUTEXD_LISTEN=*)
        execstart=$(printf '%s' "$execstart" |
            sed -E "s/(^|[[:space:]])--listen([=[:space:]]+)[^[:space:]]+/\1--listen\2${arg#*=}/")
        ;;
    esac
done

directory() { # path, mode
    if [ -d "$1" ]; then
        chown "$user:$group" "$1"
    else
        install -d -m "${2:-0755}" -o "$user" -g "$group" "$1"
    fi
}
for dir in $(get StateDirectory); do directory "/var/lib/$dir" "$(get StateDirectoryMode)"; done
for dir in $(get RuntimeDirectory); do directory "/run/$dir" "$(get RuntimeDirectoryMode)"; done
wd=$(get WorkingDirectory)
wd=${wd#-}
wd=$(printf '%s' "$wd" | sed -e 's|%S|/var/lib|g; s|%t|/run|g')
[ -z "$wd" ] || [ "$wd" = "~" ] || cd "$wd"

echo "unit_exec: as $user:$group: ${env[*]} $execstart" >&2
# systemd expands $VAR and ${VAR} in ExecStart= from the unit's environment: so does bash -c,
# given that environment.
exec setpriv --reuid "$user" --regid "$group" --init-groups \
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${env[@]}" \
    bash -c "exec $execstart"
