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
import time

import pytest

from azure import Azurite
from ha_group import SLOW, groups  # noqa: F401

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
