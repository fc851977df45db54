"""A history of lease operations as the clients saw them, and a checker of it against a
model of timed leases (docs/ha.md, "The history checker"). Standard library only.

A history is a list of operations, each a dict (one JSON object a line in a file):

    client     who sent it (a worker's name)
    kind       "acquire", "renew", "release", "break" or "read"
    resources  the names it is about (a set: several, with one lease_id)
    lease_id, owner, ttl_ms, limit (default 1), shared (default false): as sent
    send       when it was sent, time.monotonic() of the client's machine (seconds)
    recv       when it was answered, or when its client gave up on it
    status     the HTTP status, or None: no answer (a timeout, a connection error). A 5xx
               counts as no answer too: the request may or may not have been carried out
    tokens     {resource: fencing_token} of an answered acquire or renew
    holders    {resource: [{"token", "owner", "shared"}...], "limit": {resource: n}} of an
               answered read (GET /v1/resources/{name})

The model, per resource, with the fencing token as the order of the grants: a lease holds
a place from its grant until it is released, broken or expired; the holder's client counts
on it until the send time of its last answered acquire or renew plus the TTL, less the
allowance for the server's clock running fast (a fiftieth of the TTL, 1 s at most:
docs/ha.md, "Assumptions"). What the checker rejects:

  * overlap: a grant while earlier leases surely hold the places it needs: an exclusive
    lease beside any other, a semaphore past its limit, a writer beside a reader (or a
    reader beside a writer), a limit other than the one in force;
  * tokens: a token given to two leases, a lease's token changing, a grant answered
    before another was sent with a token not below the other's;
  * sets: a set answered 200 without a lease on each of its resources;
  * reads: an answered grant surely still held but not listed (lost), a lease listed after
    its release was answered (a lost release), an exclusive holder listed after a later
    token of its resource was answered, more holders than the limit, a holder nobody was
    granted and that no unanswered acquire can explain;
  * a renewal answered `lease_lost` while the lease was surely held.

Unanswered operations may have happened or not. A release or a break without an answer is
taken as done at its send time, which can only shorten what a lease surely holds, and as not
done where a later read still lists the lease; a renewal or a retried acquire without an
answer can only lengthen a lease, so not counting it is the choice that allows the most.
What needs a search is the holders a read lists that no client was answered: each must be
the grant of a distinct unanswered acquire of its resource, sent before the read was
answered and before every later token of the resource was answered (its window): the
checker finds such an assignment by augmenting paths (bipartite matching) over the
unanswered acquires inside each token's window, or reports the tokens it cannot explain.

    python3 tests/integration/history.py HISTORY.jsonl   # checks a saved history
"""

import json
import sys
import threading
import time

def margin_s(ttl_ms):
    """The allowance of docs/ha.md: a fiftieth of the TTL, 1 s at most (seconds)."""
    return min(ttl_ms / 50.0, 1000.0) / 1000.0


def answered(op):
    return op.get("status") is not None and op["status"] < 500


# ---- recording -------------------------------------------------------------------------


class Recorder:
    """Thread-safe: begin() before a request is sent, end() with its answer (or none)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ops = []

    def begin(self, client, kind, resources, **fields):
        op = dict(client=client, kind=kind, resources=list(resources), status=None,
                  recv=None, **fields)
        op["send"] = time.monotonic()
        return op

    def end(self, op, status=None, body=None):
        """status None: no answer. body: the JSON answer."""
        op["recv"] = time.monotonic()
        op["status"] = status
        if status == 200 and isinstance(body, dict):
            if op["kind"] in ("acquire", "renew"):
                op["tokens"] = tokens_of(body)
            elif op["kind"] == "read":
                op["holders"], op["limit"] = holders_of(body)
        with self.lock:
            self.ops.append(op)
        return op

    def add(self, op):
        with self.lock:
            self.ops.append(op)

    def save(self, path):
        with open(path, "w") as f:
            for op in sorted(self.ops, key=lambda o: o["send"]):
                f.write(json.dumps(op, sort_keys=True) + "\n")


def tokens_of(body):
    """{resource: fencing_token} of a lease body or a set's {"leases": [...]}."""
    leases = body.get("leases") if "leases" in body else [body]
    return {l["resource"]: l["fencing_token"] for l in leases or []
            if isinstance(l, dict) and "fencing_token" in l}


def holders_of(body):
    """({resource: [holder...]}, {resource: limit}) of a GET /v1/resources/{name} answer."""
    res = body.get("resource")
    hs = body.get("holders")
    if hs is None:
        hs = [body["holder"]] if body.get("holder") else []
    return ({res: [{"token": h["fencing_token"], "owner": h.get("owner"),
                    "shared": bool(h.get("shared"))} for h in hs]},
            {res: body.get("limit", 1)})


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


# ---- the model -------------------------------------------------------------------------


class Lease:
    """One lease on one resource as the history shows it."""

    def __init__(self, res, lid):
        self.res, self.lid = res, lid
        self.token = None
        self.grant = None  # its first answered acquire
        self.owner, self.ttl_ms, self.limit, self.shared = None, None, 1, False
        self.exts = []  # (send, recv, ttl_ms) of each answered acquire and renew
        self.end_sent = None  # the first release or break sent that may end it
        self.end_why = None
        self.released = None  # recv of the first release answered 200
        self.lost = None  # recv of the first release or renew answered 409
        self.lost_renew = None  # the renewal answered 409, if any
        self.segs = []  # [lo, hi]: when it is surely held; lo None: from its grant

    def build(self):
        """Where the lease surely holds its place. A renewal answered before the place
        could have run out extends it; one answered later starts again at its answer (the
        lease may have run out between, and a semaphore filled that gap)."""
        segs = []
        for send, recv, ttl in sorted(self.exts):
            hi = send + (ttl - margin_s(ttl) * 1000) / 1000.0
            if segs and recv < segs[-1][1]:
                segs[-1][1] = max(segs[-1][1], hi)
            elif segs:
                segs.append([recv, hi])
            else:
                segs.append([None, hi])
        if self.end_sent is not None:
            segs = [[lo, min(hi, self.end_sent)] for lo, hi in segs]
            segs = [s for s in segs if s[0] is None or s[0] < s[1]]
        self.segs = segs

    def until(self):
        return max((hi for _, hi in self.segs), default=float("-inf"))

    def held_through(self, a, b, after_grant):
        """Surely held over all of [a, b]: in its first segment when the instant is known
        to come after its grant (`after_grant`: by token order, or being after its answer),
        or inside a later segment."""
        for lo, hi in self.segs:
            if lo is None:
                if after_grant and b < hi:
                    return True
            elif lo <= a and b < hi:
                return True
        return False


class Report:
    def __init__(self, t0):
        self.t0 = t0
        self.violations = []  # (kind, text)
        self.stats = {}
        self.by_lid = {}  # lease_id -> its operations, for the explanations

    def add(self, kind, text):
        self.violations.append((kind, text))

    @property
    def ok(self):
        return not self.violations

    def kinds(self):
        return sorted({k for k, _ in self.violations})

    def text(self, limit=20):
        if self.ok:
            return "history consistent: %s" % self.summary()
        out = ["history NOT consistent (%d violations: %s); %s" % (
            len(self.violations), ", ".join(self.kinds()), self.summary())]
        out += ["  %s: %s" % v for v in self.violations[:limit]]
        if len(self.violations) > limit:
            out.append("  ... and %d more" % (len(self.violations) - limit))
        return "\n".join(out)

    def summary(self):
        return ", ".join("%s %s" % (v, k) for k, v in sorted(self.stats.items()))


def _t(rep, t):
    return "%.3f" % (t - rep.t0) if t is not None else "-"


def _who(l):
    return "token %s (lease %s, owner %s%s)" % (
        l.token, (l.lid or "?")[:8], l.owner,
        ", shared" if l.shared else ", limit %d" % l.limit if l.limit != 1 else "")


def _ops_text(rep, lid, limit=8):
    """A lease's operations, on every resource of it: kind, resources, times, answer."""
    ops = rep.by_lid.get(lid, [])
    out = ["%s %s %s-%s %s" % (o["kind"], "+".join(o["resources"]), _t(rep, o["send"]),
                               _t(rep, o.get("recv")), o.get("status") or "no answer")
           for o in ops[:limit]]
    if len(ops) > limit:
        out.append("... %d more" % (len(ops) - limit))
    return "; ".join(out)


def _held_text(rep, l):
    last = max(l.exts)
    ttl = last[2]
    s = "granted (answered %s), held until at least %s (its last acquire/renew sent %s + " \
        "TTL %d ms - %d ms allowance" % (
            _t(rep, l.grant["recv"]), _t(rep, l.until()), _t(rep, last[0]), ttl,
            margin_s(ttl) * 1000)
    if l.end_sent is not None:
        s += "; %s sent %s" % (l.end_why, _t(rep, l.end_sent))
    else:
        s += "; no release or break sent"
    return s + ")"


def check(ops, global_tokens=True):
    """Checks a history (a list of operation dicts, above). Returns a Report."""
    ops = sorted(ops, key=lambda o: o["send"])
    rep = Report(ops[0]["send"] if ops else 0.0)
    leases = {}  # (resource, lease_id) -> Lease
    pending = {}  # resource -> unanswered acquires naming it
    reads = []
    breaks = []

    def lease(res, op):
        l = leases.get((res, op.get("lease_id")))
        if l is None:
            l = leases[(res, op.get("lease_id"))] = Lease(res, op.get("lease_id"))
        return l

    n_unanswered = 0
    for op in ops:
        kind = op["kind"]
        st = op.get("status")
        if not answered(op):
            n_unanswered += 1
        if kind == "read":
            if st == 200:
                reads.append(op)
            continue
        if kind == "break":
            breaks.append(op)
            continue
        if op.get("lease_id"):
            rep.by_lid.setdefault(op["lease_id"], []).append(op)
        for res in op["resources"]:
            if kind == "acquire":
                if st == 200:
                    tok = (op.get("tokens") or {}).get(res)
                    if tok is None:
                        rep.add("half a set", "%s answered 200 to %s's acquire of %s (lease "
                                "%s) without a lease on %s" % (
                                    _t(rep, op["recv"]), op["client"],
                                    "+".join(op["resources"]), op.get("lease_id"), res))
                        continue
                    l = lease(res, op)
                    if l.token is None:
                        l.token, l.grant = tok, op
                        l.owner, l.ttl_ms = op.get("owner"), (op.get("ttl_ms") or 15000)
                        l.limit, l.shared = op.get("limit") or 1, bool(op.get("shared"))
                    elif l.token != tok:
                        rep.add("token changed", "%s: lease %s had token %d, its acquire "
                                "answered %s gives %d" % (res, l.lid, l.token,
                                                         _t(rep, op["recv"]), tok))
                    l.exts.append((op["send"], op["recv"], (op.get("ttl_ms") or 15000)))
                elif not answered(op):
                    known = leases.get((res, op.get("lease_id")))
                    if known is None or known.token is None:
                        pending.setdefault(res, []).append(op)
            elif kind == "renew":
                l = leases.get((res, op.get("lease_id")))
                if l is None or l.token is None:
                    continue
                if st == 200:
                    tok = (op.get("tokens") or {}).get(res)
                    if tok is not None and tok != l.token:
                        rep.add("token changed", "%s: lease %s had token %d, its renewal "
                                "answered %s gives %d" % (res, l.lid, l.token,
                                                         _t(rep, op["recv"]), tok))
                    l.exts.append((op["send"], op["recv"], op.get("ttl_ms") or l.ttl_ms))
                elif st == 409:
                    l.lost = min(l.lost or op["recv"], op["recv"])
                    l.lost_renew = l.lost_renew or op
            elif kind == "release":
                l = leases.get((res, op.get("lease_id")))
                if l is None:
                    l = lease(res, op)  # a release of a lease whose acquire had no answer
                if l.end_sent is None or op["send"] < l.end_sent:
                    l.end_sent, l.end_why = op["send"], "release"
                if st == 200:
                    l.released = min(l.released or op["recv"], op["recv"])
                elif st == 409:
                    l.lost = min(l.lost or op["recv"], op["recv"])

    by_res = {}
    for l in leases.values():
        if l.token is not None:
            by_res.setdefault(l.res, []).append(l)
    # A break ends every lease of its resource granted before it was answered (or the one it
    # names): at its send, or at the lease's own send if that came later.
    for b in breaks:
        for res in b["resources"]:
            for l in by_res.get(res, []):
                if b.get("lease_id") and b["lease_id"] != l.lid:
                    continue
                if answered(b) and l.grant["send"] > b["recv"]:
                    continue
                t = max(b["send"], l.grant["send"])
                if l.end_sent is None or t < l.end_sent:
                    l.end_sent, l.end_why = t, "break"
    for l in leases.values():
        l.build()

    _check_renewals(rep, leases)
    for res, ls in sorted(by_res.items()):
        ls.sort(key=lambda l: l.token)
        _check_overlap(rep, res, ls)
        _check_order(rep, res, ls)
    _check_unique(rep, by_res, global_tokens)
    _check_reads(rep, reads, leases, by_res, pending)

    rep.stats = {
        "operations": len(ops), "unanswered": n_unanswered,
        "grants": sum(len(v) for v in by_res.values()), "resources": len(by_res),
        "reads": len(reads)}
    return rep


def _check_renewals(rep, leases):
    for l in leases.values():
        op = l.lost_renew
        if op is None or l.grant is None:
            continue
        if l.end_sent is not None and l.end_sent <= op["recv"]:
            continue
        if l.held_through(op["recv"], op["recv"], op["send"] >= l.grant["recv"]):
            rep.add("lost lease", "%s: %s was answered lease_lost to a renewal (sent %s, "
                    "answered %s) while it surely held: %s" % (
                        l.res, _who(l), _t(rep, op["send"]), _t(rep, op["recv"]),
                        _held_text(rep, l)))


def _fits(b, live):
    """The leases of `live` that grant b cannot stand beside (empty: it fits)."""
    if b.shared:
        return [l for l in live if not l.shared]
    if any(l.shared for l in live):
        return [l for l in live if l.shared]
    if len(live) + 1 > b.limit:
        return live
    return [l for l in live if l.limit != b.limit]


def _check_overlap(rep, res, ls):
    """ls: the resource's leases in token order. For each grant, the earlier leases that
    surely hold throughout the time it could have been made, against its place."""
    n = len(ls)
    suffix_send = [0.0] * (n + 1)
    suffix_send[n] = float("inf")
    for i in range(n - 1, -1, -1):
        suffix_send[i] = min(suffix_send[i + 1], ls[i].grant["send"])
    active = []
    for i, b in enumerate(ls):
        # An earlier lease whose surely-held time ends before every later grant was sent
        # matters no more.
        active = [l for l in active if l.until() > suffix_send[i]]
        g = b.grant
        live = [l for l in active if l.held_through(g["send"], g["recv"], True)]
        bad = _fits(b, live)
        if bad:
            what = ("a reader beside a writer" if b.shared else
                    "a writer beside a reader" if any(l.shared for l in bad) else
                    "a semaphore over its limit %d" % b.limit if b.limit > 1 and
                    len(live) + 1 > b.limit else
                    "a limit other than the one in force" if len(live) + 1 <= b.limit else
                    "two holders")
            lines = ["%s: %s: %s granted (sent %s, answered %s) while %d earlier lease(s) "
                     "held:" % (res, what, _who(b), _t(rep, g["send"]), _t(rep, g["recv"]),
                                len(bad))]
            for l in bad[:4]:
                lines.append("    %s %s" % (_who(l), _held_text(rep, l)))
            for l in [b] + bad[:4]:
                lines.append("    lease %s: %s" % ((l.lid or "?")[:8], _ops_text(rep, l.lid)))
            rep.add(what if "semaphore" not in what else "semaphore over its limit",
                    "\n".join(lines))
        if b.until() > float("-inf"):
            active.append(b)


def _check_order(rep, res, ls):
    """A grant answered before another was sent has the smaller token."""
    by_recv = sorted(ls, key=lambda l: l.grant["recv"])
    by_send = sorted(ls, key=lambda l: l.grant["send"])
    i, top = 0, None
    for b in by_send:
        while i < len(by_recv) and by_recv[i].grant["recv"] < b.grant["send"]:
            if top is None or by_recv[i].token > top.token:
                top = by_recv[i]
            i += 1
        if top is not None and top is not b and b.token <= top.token:
            rep.add("token went back" if b.token < top.token else "token reused",
                    "%s: %s granted (sent %s) after %s was answered (%s), token not above it"
                    % (res, _who(b), _t(rep, b.grant["send"]), _who(top),
                       _t(rep, top.grant["recv"])))


def _check_unique(rep, by_res, global_tokens):
    seen = {}
    for res, ls in by_res.items():
        for l in ls:
            key = l.token if global_tokens else (res, l.token)
            other = seen.setdefault(key, l)
            if other is not l and (other.lid != l.lid or other.res != l.res):
                rep.add("token reused", "token %d given to two leases: %s on %s (answered %s)"
                        " and %s on %s (answered %s)" % (
                            l.token, _who(other), other.res, _t(rep, other.grant["recv"]),
                            _who(l), l.res, _t(rep, l.grant["recv"])))


def _check_reads(rep, reads, leases, by_res, pending):
    unknown = {}  # resource -> {token: (holder, the first read listing it)}
    for r in reads:
        for res, hs in (r.get("holders") or {}).items():
            listed = {h["token"]: h for h in hs}
            limit = (r.get("limit") or {}).get(res, 1)
            ls = by_res.get(res, [])
            known = {l.token: l for l in ls}
            if len(hs) > max(limit, 1) and not all(h["shared"] for h in hs):
                rep.add("read over the limit", "%s: the read answered %s lists %d holders "
                        "(limit %d): tokens %s" % (res, _t(rep, r["recv"]), len(hs), limit,
                                                   sorted(listed)))
            for l in ls:
                tok = l.token
                if tok not in listed:
                    if (l.grant["recv"] <= r["send"]
                            and l.held_through(r["send"], r["recv"], True)):
                        rep.add("lost grant", "%s: %s not listed by the read sent %s, "
                                "answered %s, while surely held: %s" % (
                                    res, _who(l), _t(rep, r["send"]), _t(rep, r["recv"]),
                                    _held_text(rep, l)))
                    continue
                if l.released is not None and l.released <= r["send"]:
                    rep.add("lost release", "%s: %s listed by the read sent %s, after its "
                            "release was answered 200 at %s" % (
                                res, _who(l), _t(rep, r["send"]), _t(rep, l.released)))
                elif l.lost is not None and l.lost <= r["send"]:
                    rep.add("lease came back", "%s: %s listed by the read sent %s, after "
                            "the server answered lease_lost for it at %s" % (
                                res, _who(l), _t(rep, r["send"]), _t(rep, l.lost)))
            for tok, h in sorted(listed.items()):
                if limit == 1 and not h["shared"]:
                    later = [l for l in ls if l.token > tok and l.grant["recv"] <= r["send"]]
                    if later:
                        b = min(later, key=lambda l: l.token)
                        rep.add("two holders", "%s: the read sent %s lists token %d (owner "
                                "%s) as the holder, but %s was granted before (answered %s):"
                                " the older lease held beside the newer" % (
                                    res, _t(rep, r["send"]), tok, h.get("owner"), _who(b),
                                    _t(rep, b.grant["recv"])))
                if tok not in known:
                    unknown.setdefault(res, {}).setdefault(tok, (h, r))
    # The holders no client was answered: each the grant of a distinct unanswered acquire.
    for res, toks in sorted(unknown.items()):
        ls = by_res.get(res, [])
        cands = pending.get(res, [])
        edges = {}
        for tok, (h, r) in toks.items():
            later = [l.grant["recv"] for l in ls if l.token > tok]
            window_end = min(later + [r["recv"]])
            edges[tok] = [i for i, op in enumerate(cands)
                          if op["send"] < window_end
                          and (h.get("owner") is None or op.get("owner") == h.get("owner"))
                          and bool(op.get("shared")) == h["shared"]]
        match = _matching(edges)
        for tok in sorted(toks):
            if tok not in match:
                h, r = toks[tok]
                rep.add("phantom holder", "%s: the read answered %s lists token %d (owner "
                        "%s), granted to no client and explained by none of the %d "
                        "unanswered acquires of the resource in its window" % (
                            res, _t(rep, r["recv"]), tok, h.get("owner"), len(edges[tok])))


def _matching(edges):
    """A largest assignment token -> candidate, each candidate used once (Kuhn's augmenting
    paths). edges: token -> [candidate index...]."""
    owner = {}

    def augment(tok, seen):
        for c in edges[tok]:
            if c in seen:
                continue
            seen.add(c)
            if c not in owner or augment(owner[c], seen):
                owner[c] = tok
                return True
        return False

    for tok in sorted(edges, key=lambda t: len(edges[t])):
        augment(tok, set())
    return {tok: c for c, tok in owner.items()}


def main(argv):
    if len(argv) != 2:
        print("usage: history.py HISTORY.jsonl", file=sys.stderr)
        return 2
    rep = check(load(argv[1]))
    print(rep.text())
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
