"""The checks of tests/deploy/kube.sh on the pods it played from the Kubernetes manifests
(three servers of the StatefulSet's template, Azurite, four workers), through the
container stage's own assertions (tests/compose/containers_check.py), each pod's
container found by the labels kube_pods.py gave it:
  - every server ready (/readyz 200) and the group formed: one active, two standbys, each
    listing the three advertised URLs under the headless Service's names;
  - one leader among the four workers, renewing;
  - the servers run as uid 10001, not root, on a read-only root filesystem, and refuse a
    request without the token of the Secret;
  - `podman kill` of the active server's container: a standby is active within 10 s, the
    leader keeps its lease and fencing token at every answer, and renews through the new
    active within its TTL;
  - `podman start` of the killed one: it rejoins as a standby;
  - the group's blobs are in Azurite.

    COMPOSE_PROJECT_NAME=... MUTEXD_TOKEN=... kube_check.py --ports P0,P1,P2"""

import argparse
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compose"))
import containers_check as cc  # noqa: E402

SERVERS = ("mutexd-0", "mutexd-1", "mutexd-2")
# The workers kube_pods.py plays (the compose file has a Java one beside them too).
WORKERS = tuple(w for w in ("worker-python", "worker-node", "worker-go", "worker-dotnet")
                if w not in os.environ.get("CONTAINERS_WORKERS_LEFT_OUT", "").split())
READY_WITHIN_S = 120


def say(text):
    print("kube: %s" % text, flush=True)


def servers_of(ports):
    """containers_check.servers() for the played pods: the port is the one kube_pods.py
    published, the URL the one the pod advertises."""
    def servers():
        out = {}
        for service, port in zip(SERVERS, ports):
            (c,) = cc.containers(service)
            out[service] = {"service": service, "name": cc.name_of(c),
                            "url": cc.env_of(c)["MUTEXD_ADVERTISE_URL"], "port": port}
        return out
    return servers


def wait_ready(srv, t0):
    deadline = time.time() + READY_WITHIN_S
    while True:
        status = {}
        for s in srv.values():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % s["port"], timeout=2) as r:
                    status[s["service"]] = r.status
            except urllib.error.HTTPError as e:
                status[s["service"]] = e.code
            except OSError as e:
                status[s["service"]] = str(e)
        if all(v == 200 for v in status.values()):
            say("every server ready (/readyz 200) %.1f s after the pods were played" % (time.time() - t0))
            return
        if time.time() > deadline:
            raise cc.Failed("not every server is ready within %d s: %s" % (READY_WITHIN_S, status))
        time.sleep(0.5)


def hardened(srv):
    for s in srv.values():
        (c,) = cc.containers(s["service"])
        if not c["HostConfig"].get("ReadonlyRootfs"):
            raise cc.Failed("%s: the root filesystem is writable" % s["name"])
        out = cc.docker("exec", s["name"], "sh", "-c", "touch /probe 2>&1; echo $?", check=False)
        if out.strip().endswith("0"):
            raise cc.Failed("%s: could write to its root filesystem" % s["name"])
        try:
            urllib.request.urlopen("http://127.0.0.1:%d/v1/servers" % s["port"], timeout=5)
            raise cc.Failed("%s answered /v1/servers without a token" % s["name"])
        except urllib.error.HTTPError as e:
            if e.code != 401:
                raise cc.Failed("%s answered %d without a token, not 401" % (s["name"], e.code))
    say("the servers' root filesystems are read-only; without the Secret's token: 401")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", required=True)
    ap.add_argument("--played", type=float, required=True)
    args = ap.parse_args()
    ports = [int(p) for p in args.ports.split(",")]
    cc.SERVERS = SERVERS
    cc.WORKERS = WORKERS
    cc.servers = servers_of(ports)
    passed = 0
    try:
        srv = cc.servers()
        wait_ready(srv, args.played)
        passed += 1
        urls = sorted(s["url"] for s in srv.values())
        active, standbys = cc.group_view(srv)
        say("a group: %s active, %s standbys; URLs %s" % (
            active["service"], ", ".join(s["service"] for s in standbys), ", ".join(urls)))
        passed += 1
        wenv = cc.env_of(cc.workers()[0])
        resource = wenv["MUTEXD_RESOURCE"]
        # A pod's host name is its name, the worker's owner "<host name>:<pid>".
        hostnames = {c["Config"]["Hostname"]: cc.name_of(c) for c in cc.workers()}
        leader = cc.one_leader(resource, hostnames, active["port"])
        passed += 1
        cc.servers_not_root()
        hardened(srv)
        passed += 1
        killed, survivor = cc.kill_active_server(resource, hostnames, leader, srv)
        passed += 1
        cc.restart_server(srv, killed)
        passed += 1
        cc.leases_reach_azurite()
        passed += 1
    except cc.Failed as exc:
        print("kube: FAILED: %s" % exc, file=sys.stderr, flush=True)
        return 1
    say("%d passed, 0 failed" % passed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
