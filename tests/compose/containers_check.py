"""The checks of tests/compose/containers.sh, on the topology it has brought up with
`docker compose up -d` (the `docker` command being podman, which must be on PATH with the
same CONTAINERS_CONF; COMPOSE_PROJECT_NAME as the script set it). The servers' ports on
this machine are read from the engine.

The compose file's group is partitioned: the three servers split the partitions, and any
of them answers about any resource (it forwards to the partition's owner). The functions
for a group of one partition (one active, standbys) serve tests/deploy/kube_check.py.

The leader is read from a server, not from the workers' output: the holder of the
workers' resource has the owner "<hostname>:<pid>", and the hostname is a container's.
Any server of the group answers: the checks ask one that runs. Prints each check and its
timing; exits 1 at the first that fails."""

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from ha_history import partition_of  # noqa: E402  (docs/api.md, "Partitions")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROJECT = os.environ["COMPOSE_PROJECT_NAME"]
HEALTHY_WITHIN_S = 180
SERVERS = ("mutexd-a", "mutexd-b", "mutexd-c")
# One worker in each client language, electing one leader among them (the .NET one left
# out where containers.sh could make no .NET image: it says so).
WORKERS = tuple(w for w in ("worker-python", "worker-node", "worker-go", "worker-java",
                            "worker-dotnet")
                if w not in os.environ.get("CONTAINERS_WORKERS_LEFT_OUT", "").split())
# `docker kill` of the active server (or of a partition's owner): the partitions it served
# are served by another server within this (a takeover after SIGKILL takes 3-6 s).
TAKEOVER_WITHIN_S = 10.0
# `docker start` of the killed server: the shares are even again within this (a server
# joining takes its share once it has been live for 3 s, a few partitions at a time).
REBALANCED_WITHIN_S = 60.0
SAMPLE_S = 0.2
# Sampling goes on this long after the leader's first renewal through the new active.
AFTER_S = 3.0


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


def workers():
    """The workers' containers (inspect documents)."""
    return [c for service in WORKERS for c in containers(service)]


def language(name):
    """The language of the worker container `name`: python, node, go, java or dotnet."""
    for c in workers():
        if name_of(c) == name:
            return service_of(c).split("-", 1)[1]
    return "?"


def name_of(c):
    return c["Name"].lstrip("/")


def env_of(c):
    return dict(e.split("=", 1) for e in c["Config"]["Env"])


def servers():
    """{service: {"name", "url" (the advertised one), "port" (on this machine)}}."""
    out = {}
    for service in SERVERS:
        (c,) = containers(service)
        (binding,) = c["HostConfig"]["PortBindings"]["8080/tcp"]
        out[service] = {"service": service, "name": name_of(c),
                        "url": env_of(c)["MUTEXD_ADVERTISE_URL"],
                        "port": int(binding["HostPort"])}
    return out


def stamp(text):
    """Seconds since the epoch of an RFC 3339 time the server wrote, as "...Z"."""
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def get(port, path, timeout=5.0, headers=False):
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path))
    # The servers' bearer token, where they ask for one (the workers' MUTEXD_TOKEN).
    if os.environ.get("MUTEXD_TOKEN"):
        req.add_header("Authorization", "Bearer " + os.environ["MUTEXD_TOKEN"])
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return (json.load(r), r.headers) if headers else json.load(r)


def resource_state(resource, port, timeout=5.0):
    return get(port, "/v1/resources/%s" % resource, timeout)


def worker_hostnames():
    """{hostname: container name} of the workers, asked of the engine once (the handovers
    then ask only the server, so that their timing is the server's and the workers')."""
    cs = workers()
    for c in cs:
        # What docs/tutorial.md says: the host name is the ID that `docker ps` shows.
        if c["Config"]["Hostname"] != c["Id"][:12]:
            raise Failed("%s: host name %r, ID %s" % (name_of(c), c["Config"]["Hostname"], c["Id"]))
    return {c["Config"]["Hostname"]: name_of(c) for c in cs}


def sample(resource, hostnames, port, timeout=5.0):
    """The holder as (container name, fencing token, renewed_at); "free"; or None when the
    server cannot be asked right now."""
    try:
        st = resource_state(resource, port, timeout)
    except (OSError, urllib.error.URLError, ValueError):
        return None
    h = st.get("holder")
    if st.get("state") != "held" or not h:
        return "free"
    hostname = h["owner"].rsplit(":", 1)[0]
    if hostname not in hostnames:
        raise Failed("the holder %r is none of the worker containers %s" % (h["owner"], hostnames))
    return hostnames[hostname], h["fencing_token"], h["renewed_at"]


def holder(resource, hostnames, port):
    """(container name, fencing token) of the lease's holder, or None when it is free or
    the server cannot be asked right now."""
    h = sample(resource, hostnames, port)
    return h[:2] if isinstance(h, tuple) else None


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
        if {s[0] for s in checked} == {"azurite", *SERVERS} and all(
                s[2] == "healthy" for s in checked) and all(
                s[1] == "running" for s in status.values()):
            break
        if any(s[2] == "unhealthy" for s in checked):
            raise Failed("unhealthy: %s" % status)
        if time.time() > deadline:
            raise Failed("not all healthy within %d s: %s" % (HEALTHY_WITHIN_S, status))
        time.sleep(0.5)
    running = sorted(s[0] for s in status.values() if s[0] in WORKERS and s[1] == "running")
    if running != sorted(WORKERS):
        raise Failed("expected one running worker of each of %s, saw %s" % (WORKERS, running))
    say("up to healthy: %.1f s (%s)" % (time.time() - up_started, ", ".join(
        "%s %s" % (n, s[2] or s[1]) for n, s in sorted(status.items()))))


def group(srv, within_s=30.0):
    """The active and the standby, once every server agrees on which is active and
    lists the other: ({service...} of the active, of the standby). With more than two
    servers, the standby is the first of group_view's."""
    active, standbys = group_view(srv, within_s)
    return active, standbys[0]


def group_view(srv, within_s=30.0):
    """The active and the standbys, once every server agrees on which is active and
    lists every other: ({service...} of the active, [{service...} of each standby])."""
    deadline = time.time() + within_s
    by_url = {s["url"]: s for s in srv.values()}
    seen = {}
    while True:
        seen = {}
        for s in srv.values():
            try:
                seen[s["service"]] = get(s["port"], "/v1/servers")
            except (OSError, urllib.error.URLError, ValueError) as exc:
                seen[s["service"]] = str(exc)
        views = list(seen.values())
        if all(isinstance(v, dict) and v.get("active") for v in views):
            actives = {v["active"]["url"] for v in views}
            roles = {v["self"]["url"]: v["self"]["role"] for v in views}
            # A restarted server may be listed twice for a while (its heartbeat before
            # and after): what counts is that each server sees both.
            listed = [{x["url"] for x in v.get("servers", [])} for v in views]
            if (len(actives) == 1 and actives <= set(by_url) and
                    sorted(roles.values()) == ["active"] + ["standby"] * (len(by_url) - 1) and
                    all(lst == set(by_url) for lst in listed)):
                (url,) = actives
                if roles[url] == "active":
                    return by_url[url], [by_url[u] for u in sorted(set(by_url) - {url})]
        if time.time() > deadline:
            raise Failed("the servers do not agree on an active within %.0f s: %s" % (
                within_s, seen))
        time.sleep(0.3)


def one_leader(resource, hostnames, port, watch_s=6.0):
    """Exactly one worker holds the lease, and keeps it (renewing) while the others run."""
    deadline = time.time() + 30
    while holder(resource, hostnames, port) is None:
        if time.time() > deadline:
            raise Failed("no worker took the lease within 30 s")
        time.sleep(0.2)
    first = holder(resource, hostnames, port)
    renewed = {resource_state(resource, port)["holder"]["renewed_at"]}
    end = time.time() + watch_s
    while time.time() < end:
        h = holder(resource, hostnames, port)
        if h != first:
            raise Failed("the leader changed from %s to %s with nothing stopped" % (first, h))
        renewed.add(resource_state(resource, port)["holder"]["renewed_at"])
        time.sleep(0.3)
    if len(renewed) < 2:
        raise Failed("the leader %s did not renew its lease in %.0f s" % (first[0], watch_s))
    running = [name_of(c) for c in workers() if c["State"]["Status"] == "running"]
    if len(running) != len(WORKERS) or first[0] not in running:
        raise Failed("the leader %s is not one of the running workers %s" % (first[0], running))
    say("one leader among %d languages: %s, in %s (fencing token %d), renewing; %s wait" % (
        len(WORKERS), first[0], language(first[0]), first[1], ", ".join(
            "%s (%s)" % (n, language(n)) for n in sorted(running) if n != first[0])))
    return first


def kill_active_server(resource, hostnames, leader, srv):
    """`docker kill` of the active server's container. Through a standby (the other server,
    in a group of two), sampled every SAMPLE_S: it, or another standby, is active within
    TAKEOVER_WITHIN_S, the lease stays the leader's with its fencing token at every answer
    (no other worker leads, it is never free), and the leader renews it through the new
    active within the lease's TTL after that (then AFTER_S more of samples)."""
    active, standby = group(srv)
    ttl_s = leader_ttl_s()
    before = sample(resource, hostnames, standby["port"])
    if not isinstance(before, tuple) or before[:2] != leader:
        raise Failed("through %s, the holder is %s, not the leader %s" % (
            standby["service"], before, leader))
    say("%s (%s) is active, %s its standby; docker kill %s" % (
        active["service"], active["url"], standby["service"], active["name"]))
    t0 = time.time()
    docker("kill", active["name"])
    took = renewed = since = None
    successor = standby
    answers = unanswered = 0
    while True:
        now = time.time() - t0
        if renewed is not None and now > renewed + AFTER_S:
            break
        if took is None:  # /v1/servers is answered by the server asked, never held
            try:
                view = get(standby["port"], "/v1/servers", timeout=2.0)
                # This standby, or with more than two servers any other, taking over.
                new = view["active"]["url"] if view["active"] else None
                if new is not None and new != active["url"] and (
                        new != standby["url"] or view["self"]["role"] == "active"):
                    took = time.time() - t0
                    since = stamp(view["active"]["since"])
                    successor = next(s for s in srv.values() if s["url"] == new)
            except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError,
                    StopIteration):
                pass
            if took is None and now > TAKEOVER_WITHIN_S:
                raise Failed("no standby is active %.0f s after docker kill %s" % (
                    TAKEOVER_WITHIN_S, active["name"]))
        # A standby holds requests while no server is active: such a sample goes
        # unanswered, and the next is sent.
        h = sample(resource, hostnames, standby["port"], timeout=1.0)
        if h is None:
            unanswered += 1
        else:
            answers += 1
            if h == "free" or h[:2] != leader:
                raise Failed("%.2f s after docker kill %s, the holder is %s, not %s" % (
                    time.time() - t0, active["name"], h, leader))
        if took is None or renewed is not None:
            pass
        elif isinstance(h, tuple) and stamp(h[2]) >= since:
            # Renewed by the new active (the server's clock is this machine's).
            renewed = time.time() - t0
        elif now > took + ttl_s:
            raise Failed("the leader %s did not renew through %s within %.0f s of its takeover" % (
                leader[0], successor["service"], ttl_s))
        time.sleep(SAMPLE_S)
    state = containers(active["service"])[0]["State"]["Status"]
    if state == "running":
        raise Failed("%s still runs after docker kill" % active["name"])
    say("docker kill %s: %s active after %.2f s (limit %.0f s); %s still leads with fencing "
        "token %d, renewed after %.2f s; %d samples answered, %d unanswered, no other holder" % (
            active["service"], successor["service"], took, TAKEOVER_WITHIN_S, leader[0],
            leader[1], renewed, answers, unanswered))
    return active, standby


def restart_server(srv, killed):
    """`docker start` of the killed server: it joins the group again as a standby."""
    t0 = time.time()
    docker("start", killed["name"])
    active, standbys = group_view(srv)
    if killed["service"] not in [s["service"] for s in standbys]:
        raise Failed("%s rejoined as %s's active" % (killed["service"], active["service"]))
    say("docker start %s: a standby of %s again after %.1f s" % (
        killed["service"], active["service"], time.time() - t0))


def shares(srv, within_s=30.0, balanced=True):
    """The partition map, once every server of srv agrees on it, every partition has one
    of them as its owner, and each lists exactly those it owns in its entry of `servers`
    and (balanced) owns floor or ceil of N / servers of them:
    {partition: (service, generation, since)}, `since` as
    the owner itself says it (another server may not know it). A server that has just died
    is still listed (its heartbeat) for 10 s: only srv's entries count."""
    deadline = time.time() + within_s
    by_url = {s["url"]: s["service"] for s in srv.values()}
    while True:
        maps, sinces, why = [], {}, None
        for s in srv.values():
            try:
                v = get(s["port"], "/v1/servers", timeout=2.0)
            except (OSError, urllib.error.URLError, ValueError) as exc:
                why = "%s: %s" % (s["service"], exc)
                break
            parts = v.get("partitions") or {}
            n = parts.get("count") or 0
            m = {o["partition"]: (by_url.get(o["url"]), o["generation"])
                 for o in parts.get("owners", [])}
            sinces[s["service"]] = {o["partition"]: o.get("since") for o in parts.get("owners", [])}
            listed = {by_url.get(e["url"]): sorted(e.get("partitions") or [])
                      for e in v.get("servers", [])}
            own = {t: sorted(p for p, o in m.items() if o[0] == t) for t in by_url.values()}
            if n < 2 or sorted(m) != list(range(n)) or any(o[0] is None for o in m.values()):
                why = "%s: the map %s" % (s["service"], parts)
            elif any(listed.get(t) != own[t] or balanced and len(own[t]) not in (
                    n // len(srv), -(-n // len(srv))) for t in own):
                why = "%s: the shares %s, listed %s" % (s["service"], own, listed)
            if why:
                break
            maps.append(m)
        if why is None and all(m == maps[0] for m in maps):
            return {p: (o, g, sinces[o][p]) for p, (o, g) in maps[0].items()}
        if time.time() > deadline:
            raise Failed("the servers %s do not agree on a map with a share each within %.0f s: %s" % (
                ", ".join(sorted(by_url.values())), within_s, why or "different maps"))
        time.sleep(0.3)


def describe_shares(pmap):
    owners = sorted({o[0] for o in pmap.values()})
    return ", ".join("%s owns %d" % (t, sum(1 for o in pmap.values() if o[0] == t)) for t in owners)


def served_by_owner(resource, srv, pmap):
    """Asked of every server, the resource is answered as in its partition, by that
    partition's owner (Mutexd-Partition, Mutexd-Served-By): the partition's service."""
    p = partition_of(resource, len(pmap))
    owner = pmap[p][0]
    by_url = {s["url"]: s["service"] for s in srv.values()}
    for s in srv.values():
        _, h = get(s["port"], "/v1/resources/%s" % resource, headers=True)
        got = (h.get("Mutexd-Partition"), by_url.get(h.get("Mutexd-Served-By")))
        if got != (str(p), owner):
            raise Failed("asked of %s, %s is answered as partition %s served by %s, not %d by %s" % (
                s["service"], resource, got[0], h.get("Mutexd-Served-By"), p, owner))
    say("%s is in partition %d, served by its owner %s whichever of %d servers is asked" % (
        resource, p, owner, len(srv)))
    return srv[owner]


def kill_owner(resource, hostnames, leader, srv, pmap):
    """`docker kill` of the container of the server that owns the resource's partition.
    Through another server, sampled every SAMPLE_S: its partitions are served by the
    others within TAKEOVER_WITHIN_S, and only its: every other partition keeps its owner
    and generation; the lease is the leader's at every answer (its fencing token, or a
    higher one had it to take the lease again; no other worker ever holds it), and the
    leader renews it through the partition's new owner within the lease's TTL after that
    (then AFTER_S more of samples). Returns (the killed server, the map after)."""
    p = partition_of(resource, len(pmap))
    killed = srv[pmap[p][0]]
    survivors = {k: s for k, s in srv.items() if k != killed["service"]}
    asked = next(iter(survivors.values()))
    ttl_s = leader_ttl_s()
    before = sample(resource, hostnames, asked["port"])
    if not isinstance(before, tuple) or before[:2] != leader:
        raise Failed("through %s, the holder is %s, not the leader %s" % (
            asked["service"], before, leader))
    mine = sorted(q for q, o in pmap.items() if o[0] == killed["service"])
    say("%s owns partitions %s, %d among them; docker kill %s" % (
        killed["service"], ",".join(map(str, mine)), p, killed["name"]))
    t0 = time.time()
    docker("kill", killed["name"])
    took = renewed = after = None
    token = leader[1]
    answers = unanswered = free = 0
    while True:
        now = time.time() - t0
        if renewed is not None and now > renewed + AFTER_S:
            break
        if took is None:
            try:
                after = shares(survivors, within_s=0)
                took = time.time() - t0
            except Failed:
                if now > TAKEOVER_WITHIN_S:
                    raise Failed("%s's partitions are not served by %s %.0f s after docker kill: %s" % (
                        killed["service"], " and ".join(survivors), TAKEOVER_WITHIN_S,
                        sys.exc_info()[1]))
        # While the partition has no owner, the server asked holds the request: such a
        # sample goes unanswered, and the next is sent.
        h = sample(resource, hostnames, asked["port"], timeout=1.0)
        if h is None:
            unanswered += 1
        elif h == "free":
            free += 1
        else:
            answers += 1
            if h[0] != leader[0] or h[1] < token:
                raise Failed("%.2f s after docker kill %s, the holder is %s, not %s (token %d or above)" % (
                    time.time() - t0, killed["name"], h[:2], leader[0], token))
            token = h[1]
        if took is None or renewed is not None:
            pass
        elif isinstance(h, tuple) and stamp(h[2]) >= stamp(after[p][2]):
            # Renewed by the partition's new owner (the servers' clock is this machine's).
            renewed = time.time() - t0
        elif now > took + ttl_s:
            raise Failed("the leader %s did not renew through partition %d's new owner %s "
                         "within %.0f s of the takeover" % (leader[0], p, after[p][0], ttl_s))
        time.sleep(SAMPLE_S)
    moved = {q: (pmap[q][0], after[q][0]) for q in pmap if pmap[q][:2] != after[q][:2]}
    if sorted(moved) != mine:
        raise Failed("docker kill %s moved partitions %s, not its own %s" % (
            killed["service"], moved, mine))
    if containers(killed["service"])[0]["State"]["Status"] == "running":
        raise Failed("%s still runs after docker kill" % killed["name"])
    say("docker kill %s: its %d partitions served by the others after %.2f s (limit %.0f s; "
        "%s), the %d others kept their owners; %s still leads, %s, renewed through %s after "
        "%.2f s; %d samples answered, %d unanswered, %d free, no other holder" % (
            killed["service"], len(mine), took, TAKEOVER_WITHIN_S, describe_shares(after),
            len(pmap) - len(mine), leader[0],
            "with fencing token %d" % token if token == leader[1] else
            "again, with the higher fencing token %d (was %d)" % (token, leader[1]),
            after[p][0], renewed, answers, unanswered, free))
    return killed, after, (leader[0], token)


def restart_owner(resource, srv, killed, pmap):
    """`docker start` of the killed server: it joins the group again (every server lists
    it, it agrees on the map, and it answers about the resource as its partition's owner
    does), takes its share back (the others count it as gone for 15 s after they gave it
    up), and no partition moves to any other server."""
    t0 = time.time()
    docker("start", killed["name"])
    after = shares(srv, REBALANCED_WITHIN_S, balanced=True)
    moved = {q: (pmap[q][0], after[q][0]) for q in pmap if pmap[q][0] != after[q][0]}
    if any(new != killed["service"] for _, new in moved.values()):
        raise Failed("docker start %s moved partitions to others: %s" % (killed["service"], moved))
    p = partition_of(resource, len(pmap))
    _, h = get(killed["port"], "/v1/resources/%s" % resource, headers=True)
    if h.get("Mutexd-Served-By") != srv[after[p][0]]["url"]:
        raise Failed("the restarted %s answers %s as served by %s, not by %s" % (
            killed["service"], resource, h.get("Mutexd-Served-By"), after[p][0]))
    say("docker start %s: it owns its share again after %.1f s, and forwards to the owners "
        "of the others (%s)" % (killed["service"], time.time() - t0, describe_shares(after)))
    return after


_ttl_s = []


def leader_ttl_s():
    if not _ttl_s:
        _ttl_s.append(int(env_of(workers()[0])["MUTEXD_TTL_MS"]) / 1000.0)
    return _ttl_s[0]


def handover(resource, hostnames, port, old, command, limit_s):
    """Runs `docker <command> <old's container>`; the time until another worker holds the
    lease, which must be under limit_s."""
    name, token = old
    t0 = time.time()
    proc = subprocess.Popen(["podman", command, name], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    while True:
        h = holder(resource, hostnames, port)
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
    if language(h[0]) == language(name):
        raise Failed("the new leader %s is in %s, as the old one" % (h[0], language(name)))
    say("docker %s %s (%s): %s, in %s, leads after %.2f s (fencing token %d; limit %.1f s)" % (
        command, name, language(name), h[0], language(h[0]), took, h[1], limit_s))
    if took >= limit_s:
        raise Failed("docker %s: the handover took %.2f s, the limit is %.1f s" % (
            command, took, limit_s))
    return h


def servers_not_root():
    for service in SERVERS:
        (m,) = containers(service)
        pid = m["State"]["Pid"]
        uid = None
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("Uid:"):
                    uid = [int(x) for x in line.split()[1:]]
        if uid is None or 0 in uid:
            raise Failed("%s (pid %d on this machine) runs with uids %s" % (service, pid, uid))
        comm = open("/proc/%d/comm" % pid).read().strip()
        if comm != "mutexd":
            raise Failed("the %s container's process is %r" % (service, comm))
        user = docker("exec", name_of(m), "id", "-un").strip()
        say("%s runs as uid %d (%s), not root" % (service, uid[0], user))


def leases_reach_azurite(partitions=1):
    """The group's blobs: the owner blob, a journal, and the servers' heartbeats; in a
    partitioned group, the `group` blob and each partition's owner blob and a journal
    (under `p/<ppp>/`), and a heartbeat of every server."""
    envs = [env_of(containers(s)[0]) for s in SERVERS]
    (a,) = containers("azurite")
    env = envs[0]
    if any(e["MUTEXD_BLOB_CONTAINER"] != env["MUTEXD_BLOB_CONTAINER"] for e in envs):
        raise Failed("the servers use different blob containers")
    script = open(os.path.join(ROOT, "tests", "compose", "list-blobs.js")).read()
    deadline = time.time() + 20
    while True:
        out = subprocess.run(["podman", "exec", "-i", name_of(a), "node", "-",
                              env["MUTEXD_BLOB_CONNECTION_STRING"],
                              env["MUTEXD_BLOB_CONTAINER"]],
                             input=script, capture_output=True, text=True)
        blobs = out.stdout.split()
        journal = [b for b in blobs if b.startswith("journal/")]
        beats = [b for b in blobs if b.startswith("servers/")]
        if partitions > 1:
            owners = ["p/%03d/owner" % p for p in range(partitions)]
            journal = [b for b in blobs if b.startswith("p/") and "/journal/" in b]
            found = "group" in blobs and all(o in blobs for o in owners) and journal and \
                len(beats) >= len(SERVERS)
        else:
            found = "owner" in blobs and journal and len(beats) >= 2
        if out.returncode == 0 and found:
            break
        if time.time() > deadline:
            raise Failed("Azurite's container %r holds %s (%s)" % (
                env["MUTEXD_BLOB_CONTAINER"], blobs, out.stderr.strip()))
        time.sleep(0.5)
    say("Azurite's container %r holds %d blobs: %s, ..., %d journal blobs, %d heartbeats" % (
        env["MUTEXD_BLOB_CONTAINER"], len(blobs), ", ".join(b for b in blobs[:6]),
        len(journal), len(beats)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--up-started", type=float, required=True)
    args = ap.parse_args()
    passed = 0
    try:
        wait_healthy(args.up_started)
        passed += 1
        srv = servers()
        wenvs = [env_of(w) for w in workers()]
        wenv = wenvs[0]
        if any(e.get(k) != wenv.get(k) for e in wenvs for k in (
                "MUTEXD_URL", "MUTEXD_RESOURCE", "MUTEXD_TTL_MS", "MUTEXD_RETRY_S")):
            raise Failed("the workers are not configured alike: %s" % wenvs)
        urls = wenv["MUTEXD_URL"].split(",")
        if sorted(urls) != sorted(s["url"] for s in srv.values()):
            raise Failed("the workers' MUTEXD_URL %r is not every server's" % wenv["MUTEXD_URL"])
        resource = wenv["MUTEXD_RESOURCE"]
        ttl_s = int(wenv["MUTEXD_TTL_MS"]) / 1000.0
        hostnames = worker_hostnames()
        pmap = shares(srv)
        say("a partitioned group: %d partitions, %s" % (len(pmap), describe_shares(pmap)))
        passed += 1
        leader = one_leader(resource, hostnames, srv[SERVERS[0]]["port"])
        passed += 1
        served_by_owner(resource, srv, pmap)
        passed += 1
        servers_not_root()
        passed += 1
        killed, pmap, leader = kill_owner(resource, hostnames, leader, srv, pmap)
        passed += 1
        restart_owner(resource, srv, killed, pmap)
        passed += 1
        # The workers' handovers, asked of the restarted server (it forwards what it does
        # not own).
        port = killed["port"]
        leader = handover(resource, hostnames, port, leader, "kill", ttl_s + 2)
        passed += 1
        handover(resource, hostnames, port, leader, "stop", 2.0)
        passed += 1
        leases_reach_azurite(len(pmap))
        passed += 1
    except Failed as exc:
        print("containers: FAILED: %s" % exc, file=sys.stderr, flush=True)
        return 1
    say("%d passed, 0 failed" % passed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
