"""The checks of tests/compose/containers.sh, on the topology it has brought up with
`docker compose up -d` (the `docker` command being podman, which must be on PATH with the
same CONTAINERS_CONF; COMPOSE_PROJECT_NAME and MUTEXD_HOST_PORT as the script set them).

The leader is read from the server, not from the workers' output: the holder of the
workers' resource has the owner "<hostname>:<pid>", and the hostname is a container's.
Prints each check and its timing; exits 1 at the first that fails."""

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROJECT = os.environ["COMPOSE_PROJECT_NAME"]
PORT = int(os.environ.get("MUTEXD_HOST_PORT", "8080"))
HEALTHY_WITHIN_S = 180


class Failed(Exception):
    pass


def say(text):
    print("containers: %s" % text, flush=True)


def docker(*args, check=True, stdin=None):
    out = subprocess.run(["podman", *args], capture_output=True, text=True, check=False,
                         input=stdin)
    if check and out.returncode != 0:
        raise Failed("docker %s: %s" % (" ".join(args), out.stderr.strip()))
    return out.stdout


def containers(service=None):
    """The project's containers (inspect documents), optionally of one service."""
    flt = ["--filter", "label=com.docker.compose.project=%s" % PROJECT]
    if service:
        flt += ["--filter", "label=com.docker.compose.service=%s" % service]
    ids = docker("ps", "-aq", *flt).split()
    return json.loads(docker("inspect", *ids)) if ids else []


def service_of(c):
    return c["Config"]["Labels"]["com.docker.compose.service"]


def name_of(c):
    return c["Name"].lstrip("/")


def env_of(c):
    return dict(e.split("=", 1) for e in c["Config"]["Env"])


def resource_state(resource):
    url = "http://127.0.0.1:%d/v1/resources/%s" % (PORT, resource)
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)


def worker_hostnames():
    """{hostname: container name} of the workers, asked of the engine once (the handovers
    then ask only the server, so that their timing is the server's and the workers')."""
    cs = containers("worker")
    for c in cs:
        # What the README says: the host name is the ID that `docker ps` shows.
        if c["Config"]["Hostname"] != c["Id"][:12]:
            raise Failed("%s: host name %r, ID %s" % (name_of(c), c["Config"]["Hostname"], c["Id"]))
    return {c["Config"]["Hostname"]: name_of(c) for c in cs}


def holder(resource, hostnames):
    """(container name, fencing token) of the lease's holder, or None when it is free or
    the server cannot be asked right now."""
    try:
        st = resource_state(resource)
    except (OSError, urllib.error.URLError, ValueError):
        return None
    h = st.get("holder")
    if st.get("state") != "held" or not h:
        return None
    hostname = h["owner"].rsplit(":", 1)[0]
    if hostname not in hostnames:
        raise Failed("the holder %r is none of the worker containers %s" % (h["owner"], hostnames))
    return hostnames[hostname], h["fencing_token"]


def wait_healthy(up_started):
    deadline = time.time() + HEALTHY_WITHIN_S
    while True:
        cs = containers()
        status = {}
        for c in cs:
            health = c["State"].get("Health") or c["State"].get("Healthcheck") or {}
            has_check = bool((c["Config"].get("Healthcheck") or {}).get("Test"))
            status[name_of(c)] = (service_of(c), c["State"]["Status"],
                                  health.get("Status") if has_check else None)
        checked = [s for s in status.values() if s[2] is not None]
        if {s[0] for s in checked} == {"azurite", "mutexd"} and all(
                s[2] == "healthy" for s in checked) and all(
                s[1] == "running" for s in status.values()):
            break
        if any(s[2] == "unhealthy" for s in checked):
            raise Failed("unhealthy: %s" % status)
        if time.time() > deadline:
            raise Failed("not all healthy within %d s: %s" % (HEALTHY_WITHIN_S, status))
        time.sleep(0.5)
    workers = [n for n, s in status.items() if s[0] == "worker"]
    if len(workers) != 3:
        raise Failed("expected 3 running workers, saw %s" % workers)
    say("up to healthy: %.1f s (%s)" % (time.time() - up_started, ", ".join(
        "%s %s" % (n, s[2] or s[1]) for n, s in sorted(status.items()))))


def one_leader(resource, hostnames, watch_s=6.0):
    """Exactly one worker holds the lease, and keeps it (renewing) while the others run."""
    deadline = time.time() + 30
    while holder(resource, hostnames) is None:
        if time.time() > deadline:
            raise Failed("no worker took the lease within 30 s")
        time.sleep(0.2)
    first = holder(resource, hostnames)
    renewed = {resource_state(resource)["holder"]["renewed_at"]}
    end = time.time() + watch_s
    while time.time() < end:
        h = holder(resource, hostnames)
        if h != first:
            raise Failed("the leader changed from %s to %s with nothing stopped" % (first, h))
        renewed.add(resource_state(resource)["holder"]["renewed_at"])
        time.sleep(0.3)
    if len(renewed) < 2:
        raise Failed("the leader %s did not renew its lease in %.0f s" % (first[0], watch_s))
    running = [name_of(c) for c in containers("worker") if c["State"]["Status"] == "running"]
    if len(running) != 3 or first[0] not in running:
        raise Failed("the leader %s is not one of three running workers %s" % (first[0], running))
    say("one leader: %s (fencing token %d), renewing; %s wait" % (
        first[0], first[1], ", ".join(n for n in sorted(running) if n != first[0])))
    return first


def handover(resource, hostnames, old, command, limit_s):
    """Runs `docker <command> <old's container>`; the time until another worker holds the
    lease, which must be under limit_s."""
    name, token = old
    t0 = time.time()
    proc = subprocess.Popen(["podman", command, name], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    while True:
        h = holder(resource, hostnames)
        if h is not None and h[0] != name:
            took = time.time() - t0
            break
        if time.time() - t0 > limit_s + 5:
            proc.wait()
            raise Failed("docker %s %s: no other leader after %.1f s" % (
                command, name, time.time() - t0))
        time.sleep(0.05)
    err = proc.communicate()[1]
    if proc.returncode != 0:
        raise Failed("docker %s %s: %s" % (command, name, err.strip()))
    if h[1] <= token:
        raise Failed("the new leader's fencing token %d is not above %d" % (h[1], token))
    say("docker %s %s: %s leads after %.2f s (fencing token %d; limit %.1f s)" % (
        command, name, h[0], took, h[1], limit_s))
    if took >= limit_s:
        raise Failed("docker %s: the handover took %.2f s, the limit is %.1f s" % (
            command, took, limit_s))
    return h


def server_not_root():
    (m,) = containers("mutexd")
    pid = m["State"]["Pid"]
    uid = None
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("Uid:"):
                uid = [int(x) for x in line.split()[1:]]
    if uid is None or 0 in uid:
        raise Failed("the server (pid %d on this machine) runs with uids %s" % (pid, uid))
    comm = open("/proc/%d/comm" % pid).read().strip()
    if comm != "mutexd":
        raise Failed("the mutexd container's process is %r" % comm)
    user = docker("exec", name_of(m), "id", "-un").strip()
    say("the server runs as uid %d (%s), not root" % (uid[0], user))


def leases_reach_azurite():
    (m,) = containers("mutexd")
    (a,) = containers("azurite")
    env = env_of(m)
    script = open(os.path.join(ROOT, "tests", "compose", "list-blobs.js")).read()
    deadline = time.time() + 20
    while True:
        out = subprocess.run(["podman", "exec", "-i", name_of(a), "node", "-",
                              env["MUTEXD_BLOB_CONNECTION_STRING"],
                              env["MUTEXD_BLOB_CONTAINER"]],
                             input=script, capture_output=True, text=True)
        blobs = out.stdout.split()
        journal = [b for b in blobs if b.startswith("journal/")]
        if out.returncode == 0 and "owner" in blobs and journal:
            break
        if time.time() > deadline:
            raise Failed("Azurite's container %r holds %s (%s)" % (
                env["MUTEXD_BLOB_CONTAINER"], blobs, out.stderr.strip()))
        time.sleep(0.5)
    say("Azurite's container %r holds %d blobs: %s" % (
        env["MUTEXD_BLOB_CONTAINER"], len(blobs), ", ".join(blobs[:6])))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--up-started", type=float, required=True)
    args = ap.parse_args()
    try:
        wait_healthy(args.up_started)
        (w,) = containers("worker")[:1]
        wenv = env_of(w)
        resource = wenv["MUTEXD_RESOURCE"]
        ttl_s = int(wenv["MUTEXD_TTL_MS"]) / 1000.0
        hostnames = worker_hostnames()
        leader = one_leader(resource, hostnames)
        server_not_root()
        leader = handover(resource, hostnames, leader, "kill", ttl_s + 2)
        handover(resource, hostnames, leader, "stop", 2.0)
        leases_reach_azurite()
    except Failed as exc:
        print("containers: FAILED: %s" % exc, file=sys.stderr, flush=True)
        return 1
    say("6 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
