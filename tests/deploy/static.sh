#!/usr/bin/env bash
# The operator's kit, checked without a cluster (deploy/):
#   - deploy/kubernetes: `kubectl kustomize` renders the base and the two overlays, and
#     every object rendered, and every object file as written, passes check.mjs (the
#     Kubernetes schemas of the npm package kubernetes-models, strictly: a field the schema
#     does not name fails; and the kit's own rules); check.mjs --self-test shows that
#     misspelled fields and the other mistakes it lists fail;
#   - deploy/prometheus: `promtool check rules`, `promtool test rules` (each alert fired and
#     not fired), and the same tests against copies of the rules with a threshold changed,
#     which must fail;
#   - deploy/grafana/mutexd.json: valid JSON, every panel query naming mutexd_ metrics
#     (whether they exist is checked against a live scrape by tests/deploy/scrape.py).
# kubectl is not a Debian 12 package: where it is missing, the rendering (and only it) is
# skipped, with a message; the object files as written are checked all the same.
#
#   tests/deploy/static.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

note() { printf 'deploy: %s\n' "$*"; }
fail() { printf 'deploy: FAILED: %s\n' "$*" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mutexd-deploy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

command -v node >/dev/null || fail "node is not installed (scripts/deps.sh check installs it)"
command -v promtool >/dev/null || fail "promtool is not installed (Debian's prometheus; scripts/deps.sh test)"
scripts/npm-deps.sh tests/deploy

# ---- Kubernetes ---------------------------------------------------------------------------
k8s=deploy/kubernetes
# The object files as written: every YAML file but the kustomizations and the patches.
mapfile -t files < <(find "$k8s" -name '*.yaml' ! -name kustomization.yaml ! -name '*-patch.yaml' | sort)
node tests/deploy/check.mjs "${files[@]}" >"$WORK/files.txt" ||
    { cat "$WORK/files.txt"; fail "the object files of $k8s, as written, are not all valid"; }
note "as written: $(tail -n 1 "$WORK/files.txt")"
if command -v kubectl >/dev/null; then
    pkg=$(dpkg -S "$(readlink -f "$(command -v kubectl)")" 2>/dev/null | cut -d: -f1 || true)
    note "kubectl $(kubectl version --client 2>/dev/null | sed -n 's/^Client Version: //p')${pkg:+, from the package $(dpkg-query -W -f='${Package} ${Version} of ${Maintainer}' "$pkg")} (not a Debian 12 package)"
    for dir in base azurite volume-claim; do
        kubectl kustomize "$k8s/$dir" >"$WORK/$dir.yaml" || fail "kubectl kustomize $k8s/$dir"
        node tests/deploy/check.mjs "$WORK/$dir.yaml" | sed "s|$WORK/|rendered |" ||
            fail "the objects of $k8s/$dir, rendered, are not all valid"
    done
    node tests/deploy/check.mjs --self-test "$WORK/azurite.yaml" | grep '^self-test' ||
        fail "check.mjs let a mistake through"
    [ "$(grep -c '^kind: StatefulSet' "$WORK/azurite.yaml")" = 1 ] || fail "no StatefulSet rendered"
else
    note "SKIPPED: the kustomize rendering: kubectl is not installed, and no Debian 12 package"
    note "provides it (it comes from the Kubernetes project's own apt repository)"
    node tests/deploy/check.mjs --self-test "$k8s/base/statefulset.yaml" | grep '^self-test' ||
        fail "check.mjs let a mistake through"
fi

# ---- Prometheus ---------------------------------------------------------------------------
prom=deploy/prometheus
promtool check rules "$prom/mutexd-alerts.yml"
promtool test rules "$prom/tests/mutexd-alerts.test.yml"
# The unit tests must notice a rule that changed: each copy below must fail them.
mutate() { # description, sed expression
    mkdir -p "$WORK/prom/tests"
    sed "$2" "$prom/mutexd-alerts.yml" >"$WORK/prom/mutexd-alerts.yml"
    cmp -s "$prom/mutexd-alerts.yml" "$WORK/prom/mutexd-alerts.yml" && fail "mutation '$1' changed nothing"
    cp "$prom/tests/mutexd-alerts.test.yml" "$WORK/prom/tests/"
    if promtool test rules "$WORK/prom/tests/mutexd-alerts.test.yml" >/dev/null 2>&1; then
        fail "promtool test rules passes with $1"
    fi
    note "promtool test rules fails, as it must, with $1"
}
mutate "no active server alerting at once" '/alert: MutexdNoActiveServer/,/for:/s/for: 1m/for: 0m/'
mutate "a mirror-lag threshold of 60 s" 's/mutexd_mirror_lag_seconds > 30/mutexd_mirror_lag_seconds > 60/'
mutate "late renewals counted without the lost ones" 's/rate(mutexd_renewals_total\[10m\]) + rate(mutexd_renewals_lost_total\[10m\])/rate(mutexd_renewals_total[10m]) * 10/'

# ---- Grafana ------------------------------------------------------------------------------
/usr/bin/python3 - deploy/grafana/mutexd.json <<'PY'
import json, re, sys
dash = json.load(open(sys.argv[1]))
exprs = []
def walk(panels):
    for p in panels:
        for t in p.get("targets", []):
            exprs.append((p["title"], t.get("expr", "")))
        walk(p.get("panels", []))
walk(dash["panels"])
bad = [t for t, e in exprs if not re.search(r"\bmutexd_[a-z0-9_]+", e)]
if not exprs or bad:
    sys.exit("deploy: FAILED: dashboard panels without a mutexd_ query: %s" % (bad or "all"))
ids = [p["id"] for p in dash["panels"]]
if len(ids) != len(set(ids)):
    sys.exit("deploy: FAILED: dashboard panel ids repeat")
print("deploy: the dashboard: %d panels, %d queries" % (len(dash["panels"]), len(exprs)))
PY
note "passed"
