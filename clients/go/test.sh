#!/usr/bin/env bash
# The Go client's checks: gofmt (must list nothing), go vet, go test, and go test -race on
# the lock's background renewal; for the client (clients/go) and for the example worker
# (clients/examples/go/leader). Standard library only: nothing is downloaded (GOPROXY=off).
#
#   MUTEXD_BIN=build/mutexd clients/go/test.sh
#
# Needs Go 1.19 or later (Debian: golang-go) and gcc (go test -race needs cgo). The tests
# start real servers (MUTEXD_BIN, else build/mutexd; a missing binary fails them) and, for
# the server-group test, Azurite (scripts/azurite.sh installs it with npm in tests/azurite).
# Go's build cache goes to ${XDG_CACHE_HOME:-$HOME/.cache}/mutexd-go, outside the checkout.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
die() {
    echo "clients/go/test.sh: $*" >&2
    exit 1
}
command -v go >/dev/null || die "go is not installed (Debian: apt-get install golang-go)"
command -v gofmt >/dev/null || die "gofmt is not installed (Debian: apt-get install golang-go)"

bin=${MUTEXD_BIN:-$root/build/mutexd}
case $bin in
/*) ;;
*) bin=$PWD/$bin ;;
esac
[ -x "$bin" ] || die "no mutexd binary at $bin (run make build, or set MUTEXD_BIN)"
export MUTEXD_BIN=$bin

cache=${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mutexd-go
unset GOFLAGS
export GOPROXY=off GO111MODULE=on GOCACHE=${GOCACHE:-$cache/build} GOPATH=${GOPATH:-$cache/gopath}

for dir in clients/go clients/examples/go/leader; do
    cd "$root/$dir"
    echo "== $dir: gofmt, go vet, go test" >&2
    unformatted=$(gofmt -l .)
    [ -z "$unformatted" ] || die "not formatted by gofmt, in $dir: $unformatted"
    go vet ./...
    go test -count=1 -timeout 5m ./...
done

cd "$root/clients/go"
echo "== clients/go: go test -race, the lock's background renewal" >&2
go test -count=1 -timeout 5m -race \
    -run '^Test(Lock|Done|ALeasePast|ALeaseLost|EveryCheck|Renewals|NoGoroutine|HandOver|ALossCancels|TheLeaderIsCancelled)' .
