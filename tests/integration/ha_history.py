"""A workload against a server group, recorded from the clients' side, and a checker of
the history it leaves (tests/integration/test_ha.py).

Each worker knows every server's URL. It moves to the next one on a connection error, a
timeout or a 503, and retries an acquire with the lease id it proposed, so a retry is
idempotent. It records what it was answered, with the monotonic times it sent and received.

The checker verifies, per resource:
  * fencing tokens: a grant received before another was sent has the smaller token;
  * no overlap: a grant to another lease is never answered before the previous holder's
    lease could have run out, as its client saw it (the send time of its last answered
    acquire or renew plus the TTL), or before that holder sent its release;
  * durability: after the run, every lease a client still holds (answered, unreleased and
    not run out) is held, with its fencing token, in the group's answer.
"""

import http.client
import json
import random
import threading
import time
import uuid


class GroupClient:
    """A client of several servers: the next URL on no answer or 503."""

    def __init__(self, urls, timeout=5.0):
        self.urls = list(urls)
        self.i = random.randrange(len(self.urls))
        self.timeout = timeout
        self.conn = None
        self.failed = 0  # requests that no server answered in time

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
        while time.monotonic() < deadline:
            try:
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
                return r.status, (json.loads(raw) if raw else None)
            except (OSError, http.client.HTTPException):
                self._next()
                time.sleep(0.02)
        self.failed += 1
        return None, None

    def close(self):
        if self.conn:
            self.conn.close()


class History:
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []  # dicts: worker, op, resource, lease_id, status, token, send, recv

    def add(self, **e):
        with self.lock:
            self.events.append(e)


def worker(urls, history, resources, stop, wid, ttl_ms=4000, seed=None):
    rnd = random.Random(seed)
    c = GroupClient(urls)
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
                deadline = now + 10 + wait / 1000
            send = time.monotonic()
            st, js = c.request("POST", path + op, body, deadline=deadline)
            recv = time.monotonic()
            lease = body.get("lease_id")
            tok = js.get("fencing_token") if st == 200 and js else None
            history.add(worker=wid, op=op, resource=res, lease_id=lease, status=st, token=tok,
                        send=send, recv=recv, ttl=ttl_ms)
            if st == 200 and op in ("acquire", "renew"):
                held[res] = (lease, tok, send + ttl_ms / 1000)
            elif op == "release" or (op == "renew" and st == 409):
                held.pop(res, None)
            time.sleep(rnd.random() * 0.02)
    finally:
        c.close()
    return held


def run_load(urls, resources, stop, n=32, ttl_ms=4000):
    history = History()
    finals = [None] * n
    threads = []
    for i in range(n):
        def body(i=i):
            finals[i] = worker(urls, history, resources, stop, i, ttl_ms, seed=i)
        t = threading.Thread(target=body, daemon=True)
        t.start()
        threads.append(t)
    return history, threads, finals


def check(history, group_get=None, finals=None):
    """Returns a list of violations (empty: the history is consistent)."""
    bad = []
    by_res = {}
    for e in history.events:
        by_res.setdefault(e["resource"], []).append(e)
    for res, evs in by_res.items():
        grants = {}  # lease_id -> first acquire 200
        ends = {}  # lease_id -> the time its holder may believe it held it until
        for e in sorted(evs, key=lambda e: e["recv"]):
            lid = e["lease_id"]
            if e["status"] == 200 and e["op"] == "acquire":
                if lid not in grants:
                    grants[lid] = e
                ends[lid] = max(ends.get(lid, 0), e["send"] + e["ttl"] / 1000)
            elif e["status"] == 200 and e["op"] == "renew":
                ends[lid] = max(ends.get(lid, 0), e["send"] + e["ttl"] / 1000)
        for e in evs:
            # A holder gives its lease up when it sends the release, whatever it hears back.
            if e["op"] == "release" and e["lease_id"] in ends:
                ends[e["lease_id"]] = min(ends[e["lease_id"]], e["send"])
        order = sorted(grants.values(), key=lambda e: e["token"])
        for a, b in zip(order, order[1:]):
            if a["token"] == b["token"]:
                bad.append("%s: two leases with token %d" % (res, a["token"]))
        for a in order:
            for b in order:
                if a is b:
                    continue
                if a["recv"] < b["send"] and a["token"] >= b["token"]:
                    bad.append("%s: token %d granted before %d but not smaller" %
                               (res, a["token"], b["token"]))
                if a["token"] < b["token"] and b["recv"] < ends[a["lease_id"]] - 0.001:
                    bad.append("%s: lease %s (token %d) granted %.3f s before the previous "
                               "holder's (token %d) could have run out" %
                               (res, b["lease_id"], b["token"],
                                ends[a["lease_id"]] - b["recv"], a["token"]))
    if group_get and finals:
        now = time.monotonic()
        for held in finals:
            for res, (lid, tok, until) in (held or {}).items():
                if until - now < 1.0:
                    continue  # may run out while we look
                st, js = group_get(res)
                if st != 200 or js["state"] != "held" or js["holder"]["fencing_token"] != tok:
                    bad.append("%s: held by token %d as its client saw it, but the group "
                               "answers %s %s" % (res, tok, st, js))
    return bad
