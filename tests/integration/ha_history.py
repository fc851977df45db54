"""A workload against a server group, recorded from the clients' side, and a checker of
the history it leaves (tests/integration/test_ha.py).

Each worker knows every server's URL. It moves to the next one on a connection error, a
timeout or a 503, and retries an acquire with the lease id it proposed, so a retry is
idempotent. It records what it was answered, with the monotonic times it sent and received.

Every worker's operations go through the history checker (history.py; to_ops() turns the
events recorded here into its operations): per resource, with the fencing token as the
order of grants, no grant while earlier leases surely hold its place (exclusive leases,
semaphores, shared leases, sets), no token reused or going back, and every answered change
in the final reads. Besides:
  * durability: after the run, every lease a client still holds (answered, unreleased and
    not run out) is held, with its fencing token, in the group's answer;
  * fencing tokens across the group (check_tokens): no token is handed out to two leases,
    and a grant answered before another was sent has the smaller token, whatever the
    resources (tokens come from one counter);
  * the ledger (ledger_worker, check_ledger): long leases on resources of their own, each
    answered acquire and release is a change that must still be there after the run;
  * places (place_worker): semaphores of 3 and read/write resources;
  * sets (set_worker): two of three resources of one hash tag in either order, waiting at
    times, renewed and released one resource at a time or all at once;
  * the events feed (EventsReader, check_events): no index shown twice with different
    events, no grant shown that no client was answered and the group did not keep, and no
    answered grant missing without a `truncated: true` read after it.

Workers follow `Mutexd-Served-By` to the active, as the clients do, and send metadata near
the limits (32 levels deep, 4 KB, numbers at JSON's edges) on some acquires.

For a change found lost, explain_lost() says which blob of the container holds it (or
none) and what the owner blob names, so a failure shows where the change went.
"""

import datetime
import http.client
import json
import re
import random
import threading
import time
import urllib.parse
import uuid
import zlib

import history as lease_model


class GroupClient:
    """A client of several servers: the next URL on no answer or 503."""

    def __init__(self, urls, timeout=5.0, aliases=None):
        """aliases: advertised URL -> the URL to use for it (a server reached by its peers
        through a proxy): where a `Mutexd-Served-By` answer points."""
        self.urls = list(urls)
        self.aliases = dict(aliases or {})
        self.i = random.randrange(len(self.urls))
        self.timeout = timeout
        self.conn = None
        self.failed = 0  # requests that no server answered in time
        self.sent = 0  # times the last request was sent (more than once: it was retried)

    def _connect(self):
        host, port = self.urls[self.i].rsplit("/", 1)[-1].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)

    def _next(self):
        if self.conn:
            self.conn.close()
        self.conn = None
        self.i = (self.i + 1) % len(self.urls)

    def request(self, method, path, body=None, deadline=None):
        """(status, json) from the first server that answers something else than 503,
        or (None, None) when none did before `deadline`."""
        data = json.dumps(body).encode() if body is not None else None
        hdrs = {"Host": "127.0.0.1"}
        if data is not None:
            hdrs["Content-Type"] = "application/json"
        deadline = deadline or time.monotonic() + 30
        self.sent = 0
        while time.monotonic() < deadline:
            try:
                self.sent += 1
                if self.conn is None:
                    self._connect()
                self.conn.timeout = max(0.2, min(self.timeout, deadline - time.monotonic()))
                if self.conn.sock is not None:
                    self.conn.sock.settimeout(self.conn.timeout)
                self.conn.request(method, path, body=data, headers=hdrs)
                r = self.conn.getresponse()
                raw = r.read()
                if r.status == 503:
                    self._next()
                    time.sleep(0.05)
                    continue
                self._follow(r.getheader("Mutexd-Served-By"))
                return r.status, (json.loads(raw) if raw else None)
            except (OSError, http.client.HTTPException):
                self._next()
                time.sleep(0.02)
        self.failed += 1
        return None, None

    def _follow(self, served_by):
        """Goes straight to the active next time, as the clients do."""
        url = self.aliases.get(served_by, served_by)
        if url in self.urls and self.urls.index(url) != self.i:
            if self.conn:
                self.conn.close()
            self.conn = None
            self.i = self.urls.index(url)

    def close(self):
        if self.conn:
            self.conn.close()


# Metadata near the limits: 32 levels deep, about 4 KB, numbers at JSON's edges.
METADATA = [
    None,
    {"addr": "10.0.0.1:80"},
    json.loads('{"d":' * 31 + "[]" + "}" * 31),
    {"pad": "x" * 3900, "n": [9007199254740993, -0, 1e-3, 2.5e+10]},
]


def metadata(rnd):
    return METADATA[rnd.choice([0, 0, 0, 1, 2, 3])]


class History:
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []  # dicts: worker, op, resource, lease_id, status, token, send, recv

    def add(self, **e):
        with self.lock:
            self.events.append(e)


def worker(urls, history, resources, stop, wid, ttl_ms=4000, seed=None, aliases=None):
    rnd = random.Random(seed)
    c = GroupClient(urls, aliases=aliases)
    held = {}  # resource -> (lease_id, token, valid_until)
    try:
        while not stop.is_set():
            # Mostly work with what it holds, as a real holder does.
            res = rnd.choice(sorted(held)) if held and rnd.random() < 0.7 else rnd.choice(resources)
            path = "/v1/resources/%s/" % res
            now = time.monotonic()
            mine = held.get(res)
            if mine and mine[2] <= now:
                held.pop(res)
                mine = None
            if mine and rnd.random() < 0.6:
                op, body = "renew", {"lease_id": mine[0]}
                deadline = mine[2]  # no attempt that can only end after the lease
            elif mine:
                op, body = "release", {"lease_id": mine[0]}
                deadline = now + 10
            else:
                wait = rnd.choice([0, 0, 1000])
                op = "acquire"
                body = {"owner": "w%d" % wid, "ttl_ms": ttl_ms, "wait_ms": wait,
                        "lease_id": str(uuid.uuid4())}
                md = metadata(rnd)
                if md is not None:
                    body["metadata"] = md
                deadline = now + 10 + wait / 1000
            send = time.monotonic()
            st, js = c.request("POST", path + op, body, deadline=deadline)
            recv = time.monotonic()
            lease = body.get("lease_id")
            tok = js.get("fencing_token") if st == 200 and js else None
            history.add(worker=wid, op=op, resource=res, lease_id=lease, status=st, token=tok,
                        send=send, recv=recv, ttl=ttl_ms, budget=deadline - send)
            if st == 200 and op in ("acquire", "renew"):
                held[res] = (lease, tok, send + ttl_ms / 1000)
            elif op == "release" or (op == "renew" and st == 409):
                held.pop(res, None)
            time.sleep(rnd.random() * 0.02)
    finally:
        c.close()
    return held


def run_load(urls, resources, stop, n=32, ttl_ms=4000, aliases=None):
    history = History()
    finals = [None] * n
    threads = []
    for i in range(n):
        def body(i=i):
            finals[i] = worker(urls, history, resources, stop, i, ttl_ms, seed=i,
                               aliases=aliases)
        t = threading.Thread(target=body, daemon=True)
        t.start()
        threads.append(t)
    return history, threads, finals


# Semaphores of 3 and read/write resources (place_worker).
PLACES = {"sem0": 3, "sem1": 3, "rw0": None, "rw1": None}


def place_worker(urls, history, stop, wid, ttl_ms=3000, seed=None, aliases=None):
    """Takes places of semaphores (limit 3) and read/write resources (shared or not, at
    random), renews or releases them, and records each answer with its kind."""
    rnd = random.Random(seed)
    c = GroupClient(urls, aliases=aliases)
    held = {}  # resource -> (lease_id, valid_until)
    try:
        while not stop.is_set():
            res = rnd.choice(sorted(PLACES))
            limit = PLACES[res] or 1
            shared = PLACES[res] is None and rnd.random() < 0.7
            now = time.monotonic()
            mine = held.get(res)
            if mine and mine[1] <= now:
                held.pop(res)
                mine = None
            if mine:
                op = rnd.choice(["renew", "release"])
                body = {"lease_id": mine[0]}
                deadline = mine[1] if op == "renew" else now + 10
                shared = mine[2]
            else:
                op = "acquire"
                wait = rnd.choice([0, 500])
                body = {"owner": "p%d" % wid, "ttl_ms": ttl_ms, "wait_ms": wait,
                        "lease_id": str(uuid.uuid4())}
                if PLACES[res]:
                    body["limit"] = limit
                elif shared:
                    body["shared"] = True
                deadline = now + 10 + wait / 1000
            send = time.monotonic()
            st, js = c.request("POST", "/v1/resources/%s/%s" % (res, op), body,
                               deadline=deadline)
            recv = time.monotonic()
            tok = js.get("fencing_token") if st == 200 and js else None
            history.add(worker="p%d" % wid, op=op, resource=res, lease_id=body["lease_id"],
                        status=st, token=tok, send=send, recv=recv, ttl=ttl_ms, limit=limit,
                        shared=shared)
            if st == 200 and op in ("acquire", "renew"):
                held[res] = (body["lease_id"], send + ttl_ms / 1000, shared)
            elif op == "release" or (op == "renew" and st == 409):
                held.pop(res, None)
            time.sleep(rnd.random() * 0.05)
    finally:
        c.close()


def run_places(urls, stop, history, n=4, aliases=None):
    threads = []
    for i in range(n):
        t = threading.Thread(target=place_worker, args=(urls, history, stop, i),
                             kwargs={"seed": 1000 + i, "aliases": aliases}, daemon=True)
        t.start()
        threads.append(t)
    return threads


def check_places(history):
    """The history checker on the semaphores and read/write resources. Returns
    violations."""
    return model_violations(history.events, only=PLACES)


SETS = ["{set}a", "{set}b", "{set}c"]  # one hash tag: one partition


def set_worker(urls, history, stop, wid, ttl_ms=3000, seed=None, aliases=None, race=None):
    """Acquires sets of two of SETS, in a random order (so that two sets often name a
    resource they share in opposite orders), waiting at times; then renews and releases
    them one resource at a time, with pauses, or releases all at once. One event a
    resource, those of one acquire sharing an `op_id` (to_ops() joins them again).

    race: (barrier, names): a pair of workers that send their sets at the same moment (the
    barrier), in opposite orders (names), waiting, and release the first named, then after
    a pause the second."""
    rnd = random.Random(seed)
    c = GroupClient(urls, aliases=aliases)
    me = "s%d" % wid
    n = 0

    def add(op, res, lid, st, tok, send, recv, op_id=None):
        history.add(worker=me, op=op, resource=res, lease_id=lid, status=st, token=tok,
                    send=send, recv=recv, ttl=ttl_ms, op_id=op_id)

    try:
        while not stop.is_set():
            names = rnd.sample(SETS, 2)
            wait = rnd.choice([0, 500, 1500])
            if race:
                try:
                    race[0].wait(timeout=5)
                except threading.BrokenBarrierError:
                    race[0].reset()
                    continue
                names, wait = list(race[1]), 2000
            lid = str(uuid.uuid4())
            send = time.monotonic()
            st, js = c.request("POST", "/v1/acquire",
                               {"resources": names, "owner": me, "ttl_ms": ttl_ms,
                                "wait_ms": wait, "lease_id": lid},
                               deadline=send + 10 + wait / 1000)
            recv = time.monotonic()
            toks = lease_model.tokens_of(js) if st == 200 and js else {}
            n += 1
            for r in names:
                add("acquire", r, lid, st, toks.get(r), send, recv, op_id="%s-%d" % (me, n))
            if st != 200:
                time.sleep(rnd.random() * 0.05)
                continue
            until = {r: send + ttl_ms * 0.98 / 1000 for r in names}
            if race:
                for r in names:
                    time.sleep(rnd.uniform(0.02, 0.2))
                    send = time.monotonic()
                    st, _ = c.request("POST", "/v1/resources/%s/release"
                                      % urllib.parse.quote(r, safe=""), {"lease_id": lid},
                                      deadline=send + 5)
                    add("release", r, lid, st, None, send, time.monotonic())
                until.clear()
            while until and not stop.is_set():
                now = time.monotonic()
                for r in [r for r, u in until.items() if u <= now + 0.05]:
                    until.pop(r)  # run out: forgotten
                if not until:
                    break
                r = rnd.choice(sorted(until))
                act = rnd.choice(["renew", "renew", "release", "hold", "all"])
                if act == "all" and len(until) < 2:
                    act = "release"  # a batch names 2 resources at least
                if act == "hold":
                    time.sleep(rnd.uniform(0, 0.3))
                    continue
                send = time.monotonic()
                if act == "all":
                    held = sorted(until)
                    st, js = c.request("POST", "/v1/release",
                                       {"resources": held, "lease_id": lid},
                                       deadline=send + 10)
                    recv = time.monotonic()
                    gone = set((js or {}).get("error", {}).get("resources") or []) \
                        if st == 409 else set()
                    for x in held:
                        add("release", x, lid, 409 if x in gone else st, None, send, recv)
                    until.clear()
                    continue
                path = "/v1/resources/%s/%s" % (urllib.parse.quote(r, safe=""), act)
                st, js = c.request("POST", path, {"lease_id": lid},
                                   deadline=min(until[r], send + 10) if act == "renew"
                                   else send + 10)
                recv = time.monotonic()
                tok = js.get("fencing_token") if st == 200 and js else None
                add(act, r, lid, st, tok, send, recv)
                if act == "release" or st == 409:
                    until.pop(r, None)
                elif st == 200:
                    until[r] = send + ttl_ms * 0.98 / 1000
                time.sleep(rnd.uniform(0, 0.1))
            for r in sorted(until):  # stopped: what it still holds, one by one
                send = time.monotonic()
                st, _ = c.request("POST", "/v1/resources/%s/release"
                                  % urllib.parse.quote(r, safe=""), {"lease_id": lid},
                                  deadline=send + 5)
                add("release", r, lid, st, None, send, time.monotonic())
    finally:
        c.close()


def run_sets(urls, stop, history, n=3, aliases=None, racers=True):
    """n set workers at random, and (racers) a pair racing in opposite orders."""
    threads = []
    barrier = threading.Barrier(2)
    kws = [{"seed": 2000 + i} for i in range(n)]
    if racers:
        kws += [{"seed": 3000, "race": (barrier, SETS[1::-1])},
                {"seed": 3001, "race": (barrier, SETS[:2])}]
    for i, kw in enumerate(kws):
        t = threading.Thread(target=set_worker, args=(urls, history, stop, i),
                             kwargs=dict(kw, aliases=aliases), daemon=True)
        t.start()
        threads.append(t)
    return threads


def owner_of(worker):
    """The owner a worker sends (worker() numbers its workers)."""
    return "w%d" % worker if isinstance(worker, int) else str(worker)


def to_ops(events):
    """The recorded events as the history checker's operations (history.py): one an
    event, but those of one set acquire (one `op_id`) joined into one."""
    ops, sets = [], {}
    for e in sorted(events, key=lambda e: e["send"]):
        res = e["resource"]
        oid = e.get("op_id")
        if oid is not None and oid in sets:
            op = sets[oid]
            op["resources"].append(res)
            if e.get("token") is not None:
                op["tokens"][res] = e["token"]
            continue
        op = dict(client=str(e["worker"]), kind=e["op"], resources=[res],
                  lease_id=e["lease_id"], owner=owner_of(e["worker"]), ttl_ms=e.get("ttl"),
                  limit=e.get("limit") or 1, shared=bool(e.get("shared")), send=e["send"],
                  recv=e["recv"], status=e["status"],
                  tokens={res: e["token"]} if e.get("token") is not None else {})
        if oid is not None:
            sets[oid] = op
        ops.append(op)
    return ops


def model_violations(events, only=None, skip=(), reads=()):
    """The history checker on the events of the resources of `only` (all if None) but those
    of `skip`, with the read operations `reads`: violations as lines."""
    evs = [e for e in events if (only is None or e["resource"] in only)
           and e["resource"] not in skip]
    rep = lease_model.check(to_ops(evs) + list(reads))
    return ["%s: %s" % v for v in rep.violations]


def recorded(get, rec):
    """A group_get() whose reads go into the Recorder `rec` (history.py) as operations."""
    def read(res):
        op = rec.begin("final", "read", [res])
        st, js = get(res)
        rec.end(op, st, js)
        return st, js
    return read


class EventsReader:
    """Follows GET /v1/events?after=<next> on the group, as a tool watching the feed does,
    keeping every event and every read (its start, its `after`, `truncated`)."""

    def __init__(self, urls, stop, aliases=None):
        self.c = GroupClient(urls, timeout=3.0, aliases=aliases)
        self.stop = stop
        self.events, self.reads = [], []
        self.next = 0
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def read_once(self, wait_ms=300):
        started = time.monotonic()
        st, body = self.c.request("GET", "/v1/events?after=%s&limit=1000&wait_ms=%d"
                                  % (self.next, wait_ms), deadline=started + 10)
        if st != 200 or not body:
            return 0
        self.reads.append((started, self.next, body["truncated"], len(body["events"])))
        self.events += body["events"]
        self.next = body["next"]
        return len(body["events"])

    def run(self):
        while not self.stop.is_set():
            self.read_once()

    def finish(self):
        self.t.join(30)
        while self.read_once(wait_ms=0):
            pass


def wall(at):
    """An RFC 3339 `*_at` of the server's as seconds since the epoch."""
    return datetime.datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def check_events(reader, history):
    """The feed as the reader saw it: an index is never shown as two different events (a
    new active handing out an index a reader was already shown); every grant shown was
    answered to a client or lives on in the feed (a later event of its token): none that
    never happened; and every grant answered to a client was shown, unless a read after it
    said `truncated: true`. On a partitioned group an index belongs to its partition: the
    pair is the key. Returns violations."""
    bad = []
    by_index = {}
    for e in reader.events:
        prev = by_index.setdefault((e.get("partition"), e["index"]), e)
        if prev != e:
            bad.append("index %d shown as two events: %r and %r" % (e["index"], prev, e))
    answered = {}
    for e in history.events:
        if e["op"] == "acquire" and e["status"] == 200 and e["token"] is not None:
            answered.setdefault(e["token"], e)
    by_token = {}
    for e in reader.events:
        by_token.setdefault(e["fencing_token"], []).append(e)
    # A grant whose client got no answer may have been made: only resources where every
    # acquire was answered, and grants old enough to have run out (or been released) since.
    unsure = {e["resource"] for e in history.events
              if e["op"] == "acquire" and (e["status"] is None or e["status"] >= 500)}
    settled = time.time() - 20
    phantoms = [e for e in reader.events if e["type"] == "granted"
                and e["resource"] not in unsure and wall(e["at"]) < settled
                and e["fencing_token"] not in answered and len(by_token[e["fencing_token"]]) == 1]
    # The last grants of the run may not have run out yet: only those well before the end.
    last = reader.reads[-1][0] if reader.reads else 0
    truncated_at = [r[0] for r in reader.reads if r[2]]
    for e in phantoms[:10]:
        bad.append("grant shown that no client was answered and that nothing followed: %r"
                   % (e,))
    missing = []
    for tok, a in answered.items():
        if tok in by_token or a["recv"] > last - 1:
            continue
        if any(t >= a["send"] for t in truncated_at):
            continue
        missing.append(a)
    for a in missing[:10]:
        bad.append("%s: grant answered (token %d) but never shown, with no truncated read "
                   "after it" % (a["resource"], a["token"]))
    if missing:
        bad.append("%d answered grants missing from the events feed" % len(missing))
    return bad


def check(history, group_get=None, finals=None):
    """The history checker on the resources but the places, and the durability of what
    the clients still hold (`finals`, read with `group_get`). Returns a list of
    violations (empty: the history is consistent)."""
    bad = model_violations(history.events, skip=PLACES)
    return bad + check_held(group_get, finals)


def check_held(group_get, finals):
    """Every lease a client still holds, well before its end, held with its token in the
    group's answer. Returns violations."""
    bad = []
    if group_get and finals:
        began = time.monotonic()
        for held in finals:
            for res, (lid, tok, until) in (held or {}).items():
                # Each lease against its own look: a look that took long (a server still
                # settling) must not count the leases looked at after it as lost.
                sent = time.monotonic()
                if until - sent < 1.0:
                    if until - began >= 1.0:
                        print("%s: not looked at, %.3f s after the looks began, %.3f s "
                              "before its lease's end" % (res, sent - began, until - sent))
                    continue  # may run out while we look
                st, js = group_get(res)
                answered = time.monotonic()
                if answered > until - 0.05:
                    # The answer may come from after the lease's end.
                    print("%s: looked at %.3f s before its lease's end, answered in %.3f s: "
                          "not counted (%s %s)" % (res, until - sent, answered - sent, st, js))
                    continue
                if st != 200 or js["state"] != "held" or js["holder"]["fencing_token"] != tok:
                    bad.append("%s: held by token %d as its client saw it, but the group "
                               "answers %s %s (asked %.3f s before the lease's end, answered "
                               "in %.3f s)" % (res, tok, st, js, until - sent, answered - sent))
    return bad


def check_tokens(history, partitioned=False):
    """Fencing tokens across every resource: a token belongs to one lease, and a grant
    answered before another grant was sent has the smaller token (on a partitioned group,
    among the grants of one partition: its tokens end in its number, token % 256). Returns
    violations."""
    bad = []
    grants = {}  # (lease_id, resource) -> its first answered acquire
    for e in history.events:
        if e["op"] == "acquire" and e["status"] == 200 and e["token"] is not None:
            k = (e["lease_id"], e["resource"])
            if k not in grants or e["recv"] < grants[k]["recv"]:
                grants[k] = e
    by_token = {}
    for e in grants.values():
        by_token.setdefault(e["token"], []).append(e)
    twice = {t: es for t, es in by_token.items() if len(es) > 1}
    for t, es in sorted(twice.items())[:20]:
        bad.append("token %d handed out %d times: %s" % (
            t, len(es), ", ".join("%s/%s" % (e["resource"], e["lease_id"][:8]) for e in es)))
    if twice:
        bad.append("%d fencing tokens handed out more than once" % len(twice))
    # Sweep: grants by the time they were answered; for each grant, the largest token
    # answered before it was sent must be smaller than its own.
    sets = {}
    for e in grants.values():
        sets.setdefault(e["token"] % 256 if partitioned else 0, []).append(e)
    back = []
    for part in sets.values():
        by_recv = sorted(part, key=lambda e: e["recv"])
        by_send = sorted(part, key=lambda e: e["send"])
        i, top, top_e = 0, 0, None
        for b in by_send:
            while i < len(by_recv) and by_recv[i]["recv"] < b["send"]:
                if by_recv[i]["token"] > top:
                    top, top_e = by_recv[i]["token"], by_recv[i]
                i += 1
            if top_e is not None and b["token"] <= top and top_e is not b:
                back.append((b, top_e))
    for b, a in back[:10]:
        bad.append("%s: token %d granted after %s's token %d was answered (tokens went back)"
                   % (b["resource"], b["token"], a["resource"], a["token"]))
    if back:
        bad.append("%d grants got a token not above one answered before they were sent; "
                   "the lowest: %d" % (len(back), min(b["token"] for b, _ in back)))
    return bad


def ledger_worker(urls, history, stop, wid, ttl_ms=3600000, release_every=3, pause=0.02):
    """Acquires resources of its own (`ledger-<wid>-<n>`), each once, with a long TTL, and
    releases every `release_every`th one again: each answered change is recorded and must be
    there after the run (check_ledger)."""
    c = GroupClient(urls)
    n = 0
    try:
        while not stop.is_set():
            res = "ledger-%d-%d" % (wid, n)
            n += 1
            lid = str(uuid.uuid4())
            send = time.monotonic()
            st, js = c.request("POST", "/v1/resources/%s/acquire" % res,
                               {"owner": "ledger%d" % wid, "ttl_ms": ttl_ms, "lease_id": lid},
                               deadline=send + 10)
            tok = js.get("fencing_token") if st == 200 and js else None
            history.add(worker="ledger%d" % wid, op="acquire", resource=res, lease_id=lid,
                        status=st, token=tok, send=send, recv=time.monotonic(), ttl=ttl_ms)
            if st == 200 and n % release_every == 0:
                send = time.monotonic()
                st2, _ = c.request("POST", "/v1/resources/%s/release" % res, {"lease_id": lid},
                                   deadline=send + 10)
                history.add(worker="ledger%d" % wid, op="release", resource=res, lease_id=lid,
                            status=st2, token=tok, send=send, recv=time.monotonic(),
                            ttl=ttl_ms, sent=c.sent)
            time.sleep(pause)
    finally:
        c.close()


def run_ledger(urls, stop, history, n=2, pause=0.02):
    threads = []
    for i in range(n):
        t = threading.Thread(target=ledger_worker, args=(urls, history, stop, i),
                             kwargs={"pause": pause}, daemon=True)
        t.start()
        threads.append(t)
    return threads


def ledger_expectations(history):
    """resource -> what must be there: ("held", lease_id, token), ("free", lease_id, token),
    or ("gone", lease_id, token, answer): a release sent once found the lease it had been
    granted gone. Only resources whose every change was answered: a change without an
    answer may or may not have been made, and a release sent again after a failover may
    find its own first attempt made (it is answered 409 then)."""
    want, unsure = {}, set()
    for e in sorted(history.events, key=lambda e: e["send"]):
        if not str(e["worker"]).startswith("ledger"):
            continue
        if e["status"] is None or e["status"] >= 500:
            unsure.add(e["resource"])
        elif e["status"] == 200 and e["op"] == "acquire":
            want[e["resource"]] = ("held", e["lease_id"], e["token"])
        elif e["status"] == 200 and e["op"] == "release":
            want[e["resource"]] = ("free", e["lease_id"], e["token"])
        elif e["op"] == "release" and e.get("sent", 1) > 1:
            unsure.add(e["resource"])
        elif e["op"] == "release" and e["resource"] in want:
            want[e["resource"]] = ("gone", e["lease_id"], e["token"], e["status"])
    return {r: w for r, w in want.items() if r not in unsure}


def check_ledger(history, group_get):
    """Returns (violations, lost) where lost lists (resource, expected, answer)."""
    lost = []
    for res, w in sorted(ledger_expectations(history).items()):
        state, lid, tok = w[:3]
        if state == "gone":
            lost.append((res, ("held", lid, tok), (w[3], "to its holder's release")))
            continue
        st, js = group_get(res)
        if st != 200 or not js:
            lost.append((res, (state, lid, tok), (st, js)))
            continue
        holder = js.get("holder") or {}
        if state == "held" and (js.get("state") != "held" or holder.get("fencing_token") != tok):
            lost.append((res, (state, lid, tok), (st, js)))
        if state == "free" and js.get("state") == "held" and holder.get("fencing_token") == tok:
            lost.append((res, (state, lid, tok), (st, js)))
    bad = ["%s: answered %s (lease %s, token %s) but the group answers %s %s"
           % (res, "acquire" if w[0] == "held" else "release", w[1][:8], w[2], a[0], a[1])
           for res, w, a in lost[:20]]
    if lost:
        bad.append("%d ledger resources lost an answered change (of %d)" %
                   (len(lost), len(ledger_expectations(history))))
    return bad, lost


def lost_from_violations(bad):
    """The resources named by check()'s durability violations."""
    out = []
    for line in bad:
        m = re.match(r"(\S+): held by token (\d+) as its client saw it", line)
        if m:
            out.append(m.group(1))
    return out


def partition_of(name, count):
    """docs/api.md, "Partitions": CRC-32 of the name, or of its hash tag, modulo count."""
    b = name.encode()
    i = b.find(b"{")
    if i >= 0:
        j = b.find(b"}", i + 1)
        if j > i + 1:
            b = b[i + 1:j]
    return zlib.crc32(b) % count


def explain_lost(az, container, items, limit=10, proxies=(), partitions=1):
    """For each lost change (resource, lease_id or None), the blobs of the container that
    hold it and what the owner blob names (each one's partition's, on a partitioned group);
    returns printable lines. With the servers' fault proxies (faultproxy.py), also every write
    that carried it, to a blob that may since have been deleted, and the journal the owner
    blob named then."""
    out = []
    prefixes = sorted({"p/%03d/" % partition_of(res, partitions) if partitions > 1 else ""
                       for res, _ in items[:limit]})
    try:
        for prefix in prefixes:
            st, hdrs, _ = az.request("HEAD", "%s/%sowner" % (container, prefix))
            meta = {k[len("x-ms-meta-"):]: v for k, v in hdrs.items()
                    if k.lower().startswith("x-ms-meta-")}
            out.append("%sowner blob (%s): %s" % (prefix, st, json.dumps(meta, sort_keys=True)))
        blobs = [n for n in az.list(container)
                 if any(n.startswith(p + "journal/") or n.startswith(p + "snapshots/")
                        for p in prefixes)]
        out.append("blobs: %s" % ", ".join(blobs))
        texts = {}
        for n in blobs:
            try:
                texts[n] = az.get(container, n).decode("utf-8", "replace")
            except AssertionError as e:  # deleted meanwhile
                texts[n] = ""
                out.append("cannot read %s: %s" % (n, e))
    except Exception as e:  # a diagnosis must never hide the failure it explains
        return out + ["cannot look at the container: %r" % (e,)]
    # The journal the owner blob named, in time: every metadata write that succeeded.
    names = sorted((t, journal) for p in proxies for t, blob, q, status, _, journal in
                   list(p.writes) if blob.endswith("owner") and "comp=metadata" in q and status == 200
                   and journal)
    for res, lid in items[:limit]:
        needle = lid or ('"resource":"%s"' % res)
        found = []
        for n, t in texts.items():
            for line in t.splitlines():
                if needle in line and ('"%s"' % res) in line:
                    found.append("%s: %s" % (n, line[:200]))
        out.append("lost %s (lease %s): %s" % (
            res, lid, "; ".join(found[:4]) if found else "in no journal or snapshot blob"))
        for i, p in enumerate(proxies):
            for t, blob, query, status, body, _ in list(p.writes):
                if needle.encode() in body and ('"%s"' % res).encode() in body:
                    named = "-"
                    for t2, journal in names:
                        if t2 <= t:
                            named = journal
                    out.append("    server %d wrote it to %s (%s, %s) at %.3f; the owner blob "
                               "named %s then%s" % (
                                   i, blob, query or "put", status, t, named,
                                   "" if blob == named or blob.startswith("snapshots/")
                                   else ": NOT the journal the owner blob names"))
    if len(items) > limit:
        out.append("... and %d more" % (len(items) - limit))
    return out
