"""Where the newest features meet the group: what a client may put in a request must never
stop a takeover, and every answer the server gives must be JSON any client reads.

- Metadata is at most 32 levels deep: the journal and snapshot lines hold it three levels
  deeper, and cJSON reads no line over 1000; once, metadata 998 deep was answered 200 and
  then stopped every takeover ("line N cannot be decoded").
- Numbers are RFC 8259's: cJSON reads `01`, `1.`, `-.5` and `1.e3` through strtod, and the
  server kept the client's own text of the metadata and echoed it, so every answer showing
  such a lease (the acquire's own, GET, lists) was invalid JSON.
"""

import json
import threading
import time

import pytest

from azure import Azurite
from ha_group import SLOW, Load, groups  # noqa: F401
from ha_history import EventsReader, GroupClient

NOT_JSON = ["01", "1.", "-.5", "1.e3"]


@pytest.fixture(scope="module")
def azurite():
    a = Azurite()
    yield a
    a.stop()


def nested(levels):
    """{"k":{"k":...[]...}} nested `levels` deep."""
    return json.loads('{"k":' * (levels - 1) + "[]" + "}" * (levels - 1))


def deep_body(levels, ttl_ms=15000):
    """An acquire whose metadata nests `levels` deep in arrays, 2 bytes a level: 998 levels
    are about 2 KB, under the size limit."""
    return '{"owner":"o","ttl_ms":%d,"metadata":{"a":%s1%s}}' % (
        ttl_ms, "[" * (levels - 1), "]" * (levels - 1))


def raw_acquire(c, resource, body):
    return c.request("POST", "/v1/resources/%s/acquire" % resource, body.encode(),
                     {"Content-Type": "application/json"})


def test_metadata_deeper_than_32_levels_is_refused(client):
    r = client.acquire("edges/deep", metadata=nested(32))
    assert r.status == 200, r
    assert r.json["metadata"] == nested(32)
    r = raw_acquire(client, "edges/deep-arrays", deep_body(32))
    assert r.status == 200, r
    for levels in (33, 998):
        r = raw_acquire(client, "edges/deeper", deep_body(levels))
        assert r.status == 400 and r.code == "invalid_field", r
        assert r.json["error"]["field"] == "metadata", r
    assert client.get("edges/deeper").json["state"] == "free"


def test_numbers_that_are_not_json_are_refused_and_nothing_is_stored(client):
    for i, n in enumerate(NOT_JSON):
        r = raw_acquire(client, "edges/n%d" % i, '{"owner":"o","metadata":{"n":%s}}' % n)
        assert r.status == 400 and r.code == "invalid_json", (n, r)
        r = raw_acquire(client, "edges/n%d" % i, '{"owner":"o","ttl_ms":%s}' % n)
        assert r.status == 400 and r.code == "invalid_json", (n, r)
    # Numbers at JSON's edges are kept as sent, and every answer showing them is JSON.
    text = '{"big":9007199254740993,"neg":-0,"e":1E-3,"f":2.5e+10,"s":"01 1. -.5"}'
    r = raw_acquire(client, "edges/ok", '{"owner":"o","metadata":%s}' % text)
    assert r.status == 200, r
    bodies = [r.body, client.get("edges/ok").body,
              client.request("GET", "/v1/resources?prefix=edges/").body,
              client.request("GET", "/v1/resources").body]
    for b in bodies:
        json.loads(b)  # raises on anything that is not JSON
        assert text in b, b
    assert "edges/n0" not in bodies[3]


@pytest.mark.heavy
def test_the_deepest_metadata_allowed_does_not_stop_a_takeover(groups):  # noqa: F811
    """Metadata 998 deep is refused (it was answered 200, and then no standby could read
    the journal); metadata 32 deep in the journal: SIGKILL of the active, and a standby
    takes over with the lease and its metadata."""
    g = groups(n=3, extra=["--failover-after-ms", "1000"]).start()
    active = g.active()
    c = active.client()
    r = raw_acquire(c, "edges/group-deeper", deep_body(998, ttl_ms=60000))
    assert r.status == 400 and r.code == "invalid_field", r
    r = c.acquire("edges/group-deep", ttl_ms=60000, metadata=nested(32))
    assert r.status == 200, r
    token = r.json["fencing_token"]
    active.kill()
    started = time.monotonic()
    new = g.active(timeout=20 * SLOW)
    assert new is not active
    assert time.monotonic() - started < 20 * SLOW
    got = new.client().get("edges/group-deep").json
    assert got["state"] == "held", got
    assert got["holder"]["fencing_token"] == token, got
    assert got["holder"]["metadata"] == nested(32), got
    assert not any("cannot be decoded" in l for s in g.servers for l in s.lines)


@pytest.mark.heavy
def test_events_through_a_kill_show_no_phantom_and_skip_nothing(groups):  # noqa: F811
    """A reader follows GET /v1/events?after=<next> while the active, its appends held
    0.3 s, is killed under load. Every event of the new active's term reaches the reader
    (its own ring read whole afterwards is the truth), and every grant the reader saw was
    answered to a client or lives on in the new term: none that never happened."""
    g = groups(n=3, extra=["--failover-after-ms", "1000", "--failover-grace-ms", "3000"])
    g.start()
    active = g.active()
    load = Load(g, n=16, ttl_ms=3000, ledgers=1)
    stop = threading.Event()
    reader = EventsReader(g.urls(), stop)
    load.wait_answered(300)
    g.proxy(active).add(action="delay", delay=0.3, method="PUT", query=r"comp=appendblock",
                        times=None)
    time.sleep(0.6)
    active.kill()
    new = g.active(timeout=20 * SLOW)
    load.wait_answered(load.answered() + 300)
    time.sleep(5)  # the unanswered leases of the old term run out on the new active
    load.stop()
    stop.set()
    reader.finish()

    c = GroupClient([new.url])
    st, truth = c.request("GET", "/v1/events?after=0&limit=1000")
    term = []
    while st == 200 and truth["events"]:
        term += truth["events"]
        st, truth = c.request("GET", "/v1/events?after=%d&limit=1000" % truth["next"])
    assert term, "the new active shows no event"
    first = term[0]["index"]
    seen = {e["index"]: e for e in reader.events}
    missed = [e for e in term if e["index"] not in seen]
    assert not missed, "%d events of the new term never reached the reader, the first %r; " \
        "reads %r" % (len(missed), missed[0], [r for r in reader.reads if r[2]][:5])
    differ = [(seen[e["index"]], e) for e in term if seen[e["index"]] != e]
    assert not differ, differ[:3]

    answered = {e["token"] for e in load.history.events
                if e["op"] == "acquire" and e["status"] == 200 and e["token"] is not None}
    later = {}
    for e in reader.events:
        later.setdefault(e["fencing_token"], []).append(e)
    phantoms = [e for e in reader.events
                if e["index"] < first and e["type"] == "granted"
                and e["fencing_token"] not in answered
                and len(later[e["fencing_token"]]) == 1]
    assert not phantoms, "%d grants shown that no client was answered and that the group " \
        "did not keep: %r" % (len(phantoms), phantoms[:5])
    load.assert_ok()


@pytest.mark.heavy
def test_the_failover_grace_counts_from_serving_not_from_reading(groups):  # noqa: F811
    """The new active's first snapshot takes 4 s (its writes to snapshots/ delayed), longer
    than the failover grace (3 s). A holder whose 2 s lease ran out while no server was
    active renews a second after the new active serves, while a contender waits: the
    renewal is answered 200 with its token, and the contender was not granted. Before, the
    leases were re-armed when read, the grace was spent before the new active served, and
    the contender was granted at once."""
    g = groups(n=3, extra=["--failover-after-ms", "1000", "--failover-grace-ms", "3000"])
    g.start()
    active = g.active()
    h = GroupClient(g.urls())
    st, lease = h.request("POST", "/v1/resources/edges/grace/acquire",
                          {"owner": "H", "ttl_ms": 2000})
    assert st == 200, lease
    for s in g.standbys(active):
        g.proxy(s).add(action="delay", delay=4.0, method="PUT", path=r"/snapshots/",
                       times=None)
    since = {s: len(s.lines) for s in g.servers}
    active.kill()
    granted = {}

    def contend():
        c = GroupClient([s.url for s in g.servers if s is not active])
        granted["r"] = c.request("POST", "/v1/resources/edges/grace/acquire",
                                 {"owner": "C", "ttl_ms": 2000, "wait_ms": 30000},
                                 deadline=time.monotonic() + 40)
        granted["at"] = time.monotonic()

    t = threading.Thread(target=contend)
    t.start()
    served_at = None
    deadline = time.monotonic() + 40 * SLOW
    while served_at is None and time.monotonic() < deadline:
        if any("serving as the active server" in l for s in g.servers for l in s.lines[since[s]:]):
            served_at = time.monotonic()
        time.sleep(0.05)
    assert served_at is not None, g.logs()
    # A holder that backs off while no server answers renews a second after the new active
    # serves: within the grace from serving, long after the grace from reading.
    time.sleep(1.0)
    st, body = h.request("POST", "/v1/resources/edges/grace/renew",
                         {"lease_id": lease["lease_id"]}, deadline=time.monotonic() + 5)
    assert st == 200 and body["fencing_token"] == lease["fencing_token"], (st, body, granted)
    assert "at" not in granted, granted
    # The holder stops: the contender gets it once the lease runs out.
    t.join(40)
    assert granted["r"][0] == 200, granted


@pytest.mark.heavy
def test_many_readers_with_big_metadata_expiring_at_once_stall_no_write(groups):  # noqa: F811
    """1000 readers of one resource, each with 4000 bytes of metadata and a 1 s TTL, and a
    takeover that gives them all the same deadline: their expiry in one turn remembers
    every lease, and that change line would be 4.3 MB, past one
    append block (4 MiB), which stalled shipping and every write after it. The leases of one
    resource now carry at most 1.5 MiB: the readers past it are answered lease_held, the
    expiry ships, and a write a moment later is answered 200."""
    g = groups(n=2, extra=["--min-ttl-ms", "1000", "--max-holders", "4096",
                           "--failover-after-ms", "1000", "--failover-grace-ms", "1000"]).start()
    s = g.active()
    md = {"pad": "x" * 3990}
    statuses = []

    def readers(k):
        c = s.client()
        for _ in range(125):
            r = c.acquire("edges/readers", owner="reader-%d" % k, ttl_ms=1000, shared=True,
                          metadata=md)
            statuses.append(r.status if r.status != 409 else r.code)

    ts = [threading.Thread(target=readers, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    granted = statuses.count(200)
    assert 300 <= granted <= 400 and statuses.count("lease_held") == 1000 - granted, \
        {x: statuses.count(x) for x in set(statuses)}
    # A takeover gives every reader the same deadline again: they expire in one turn.
    s.kill()
    s = g.active(timeout=20 * SLOW)
    time.sleep(3.0)
    c = s.client()
    started = time.monotonic()
    r = c.acquire("edges/after", owner="w", ttl_ms=5000)
    assert r.status == 200 and time.monotonic() - started < 3 * SLOW, r
    assert c.get("edges/readers").json["state"] == "free"


@pytest.mark.heavy
def test_waits_opened_before_a_blob_cut_are_not_answered_from_state(groups):  # noqa: F811
    """A watch and a blocking acquire opened on the active, which is then cut off from the
    blob store: once it has not confirmed its ownership for --failover-after-ms, their
    timeouts are answered 503 ownership_unconfirmed, not from its state (a standby may have
    taken over meanwhile): before, the watch got 200 with the state and the acquire 409
    lease_held naming a holder."""
    g = groups(n=3, extra=["--failover-after-ms", "1000"]).start()
    active = g.active()
    c = active.client()
    held = c.acquire("edges/cut", owner="H", ttl_ms=30000)
    assert held.status == 200, held
    index = c.get("edges/cut").json["index"]
    out = {}

    def watch():
        out["watch"] = active.client().get("edges/cut", "?index=%d&wait_ms=4000" % index)

    def wait():
        out["wait"] = active.client().acquire("edges/cut", owner="W", ttl_ms=5000,
                                               wait_ms=4000)

    ts = [threading.Thread(target=f) for f in (watch, wait)]
    for t in ts:
        t.start()
    time.sleep(0.5)
    g.proxy(active).cut()
    for t in ts:
        t.join(30)
    for k in ("watch", "wait"):
        r = out[k]
        assert r.status == 503 and r.json["error"]["reason"] == "ownership_unconfirmed", (k, r)
    g.proxy(active).heal()
