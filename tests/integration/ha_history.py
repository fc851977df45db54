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
    not run out) is held, with its fencing token, in the group's answer;
  * fencing tokens across the group (check_tokens): no token is handed out to two leases,
    and a grant answered before another was sent has the smaller token, whatever the
    resources (tokens come from one counter);
  * the ledger (ledger_worker, check_ledger): long leases on resources of their own, each
    answered acquire and release is a change that must still be there after the run.

For a change found lost, explain_lost() says which blob of the container holds it (or
none) and what the owner blob names, so a failure shows where the change went.
"""

import http.client
import json
import re
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


def check_tokens(history):
    """Fencing tokens across every resource: a token belongs to one lease, and a grant
    answered before another grant was sent has the smaller token. Returns violations."""
    bad = []
    grants = {}  # lease_id -> its first answered acquire
    for e in history.events:
        if e["op"] == "acquire" and e["status"] == 200 and e["token"] is not None:
            if e["lease_id"] not in grants or e["recv"] < grants[e["lease_id"]]["recv"]:
                grants[e["lease_id"]] = e
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
    by_recv = sorted(grants.values(), key=lambda e: e["recv"])
    by_send = sorted(grants.values(), key=lambda e: e["send"])
    i, top, top_e, back = 0, 0, None, []
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


def explain_lost(az, container, items, limit=10, proxies=()):
    """For each lost change (resource, lease_id or None), the blobs of the container that
    hold it and what the owner blob names; returns printable lines. With the servers' fault
    proxies (faultproxy.py), also every write that carried it, to a blob that may since have
    been deleted, and the journal the owner blob named then."""
    out = []
    try:
        st, hdrs, _ = az.request("HEAD", "%s/owner" % container)
        meta = {k[len("x-ms-meta-"):]: v for k, v in hdrs.items()
                if k.lower().startswith("x-ms-meta-")}
        out.append("owner blob (%s): %s" % (st, json.dumps(meta, sort_keys=True)))
        blobs = [n for n in az.list(container)
                 if n.startswith("journal/") or n.startswith("snapshots/")]
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
                   list(p.writes) if blob == "owner" and "comp=metadata" in q and status == 200
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
