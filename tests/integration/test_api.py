"""The HTTP contract (docs/api.md), endpoint by endpoint, against a real server."""

import math
import re
import socket
import subprocess
import threading
import time
import uuid

import pytest

from harness import BIN, Client, Server, raw_request, recv_to_close, status_of

UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
LEASE_FIELDS = {"resource", "lease_id", "owner", "fencing_token", "ttl_ms", "expires_in_ms",
                "acquired_at", "renewed_at", "metadata", "limit", "shared"}


def check_lease_body(r, resource, owner, ttl_ms):
    assert r.status == 200, r
    b = r.json
    assert set(b) == LEASE_FIELDS
    assert b["resource"] == resource
    assert UUID_RE.match(b["lease_id"])
    assert b["owner"] == owner
    assert isinstance(b["fencing_token"], int) and b["fencing_token"] > 0
    assert b["ttl_ms"] == ttl_ms
    assert 0 < b["expires_in_ms"] <= ttl_ms
    assert TIME_RE.match(b["acquired_at"]) and TIME_RE.match(b["renewed_at"])
    assert r.header("content-type").startswith("application/json")
    return b


def check_error(r, status, code, field=None):
    assert r.status == status, r
    assert r.code == code, r
    err = r.json["error"]
    assert isinstance(err["message"], str) and err["message"]
    if field is not None:
        assert err.get("field") == field, r
    else:
        assert "field" not in err, r
    return err


# ---- every JSON answer -----------------------------------------------------------------

def test_every_json_answer_ends_with_a_newline(server):
    # (request line, JSON body or None for none, status): a shell prompt after curl
    # starts on a line of its own, and Content-Length counts the newline.
    for request_line, body, status in [
            ("POST /v1/resources/nl/acquire", b'{"owner":"a"}', 200),
            ("POST /v1/resources/nl/acquire", b'{"owner":"b"}', 409),
            ("POST /v1/resources/nl/acquire", b"", 400),       # no body: missing_field
            ("POST /v1/resources/nl/acquire", None, 415),      # no content type
            ("GET /v1/resources/nl", None, 200),
            ("GET /v1/resources?prefix=n", None, 200),
            ("GET /v1/nothing", None, 404),
            ("GET /healthz", None, 200),
            ("GET /readyz", None, 200)]:
        headers = "Host: 127.0.0.1\r\nConnection: close\r\n"
        if body is not None:
            headers += "Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        elif request_line.startswith("POST"):
            body = b"{}"
            headers += "Content-Length: 2\r\n"
        raw = raw_request(server.host, server.port, ("%s HTTP/1.1\r\n%s\r\n" % (
            request_line, headers)).encode() + (body or b""))
        assert status_of(raw) == status, (request_line, raw)
        head, _, answer = raw.partition(b"\r\n\r\n")
        assert b"application/json" in head, raw
        length = re.search(rb"(?im)^content-length: *(\d+)", head)
        assert length and int(length.group(1)) == len(answer), raw
        assert answer.endswith(b"}\n") and answer.count(b"\n") == 1, raw


# ---- acquire --------------------------------------------------------------------------

def test_acquire_grants_a_free_resource(client):
    r = client.acquire("jobs/nightly-report", owner="host-a:51635", ttl_ms=5000,
                       metadata={"addr": "10.0.0.7:9000", "n": [1, 2]})
    b = check_lease_body(r, "jobs/nightly-report", "host-a:51635", 5000)
    assert b["metadata"] == {"addr": "10.0.0.7:9000", "n": [1, 2]}
    assert b["acquired_at"] == b["renewed_at"]


def test_metadata_is_kept_as_written(server, client):
    """Numbers beyond a double's precision and their notation come back as sent (white
    space between tokens aside)."""
    body = ('{"owner":"o","metadata":{"id": 9007199254740993, "big":123456789012345678901,'
            '"f":1.10,"e":1e2,"s":"a  b","n":[1, 2.50]}}')
    want = '{"id":9007199254740993,"big":123456789012345678901,"f":1.10,"e":1e2,"s":"a  b","n":[1,2.50]}'
    r = client.post("md-exact", "acquire", body)
    assert r.status == 200 and want in r.body, r.body
    assert want in client.get("md-exact").body
    assert want in client.request("GET", "/v1/resources?prefix=md-").body


def test_acquire_defaults(client):
    b = check_lease_body(client.acquire("d", owner="o"), "d", "o", 15000)
    assert b["metadata"] is None


def test_acquire_conflict_names_holder_and_retry_after(client):
    a = client.acquire("c", owner="a", ttl_ms=2500).json
    r = client.acquire("c", owner="b")
    err = check_error(r, 409, "lease_held")
    assert err["holder"]["owner"] == "a"
    assert err["holder"]["fencing_token"] == a["fencing_token"]
    assert 0 < err["holder"]["expires_in_ms"] <= 2500
    assert r.header("retry-after") == str(math.ceil(err["holder"]["expires_in_ms"] / 1000))
    assert "lease_id" not in err["holder"]


def test_acquire_same_lease_id_is_idempotent(client):
    lid = str(uuid.uuid4()).upper()
    a = client.acquire("i", owner="a", ttl_ms=4000, lease_id=lid).json
    assert a["lease_id"] == lid.lower()
    time.sleep(0.2)
    b = client.acquire("i", owner="a", ttl_ms=9000, lease_id=lid, metadata={"v": 2}).json
    assert b["lease_id"] == a["lease_id"]
    assert b["fencing_token"] == a["fencing_token"]
    assert b["ttl_ms"] == 9000 and b["expires_in_ms"] > 8000
    assert b["metadata"] == {"v": 2}
    assert b["acquired_at"] == a["acquired_at"]


def test_acquire_same_lease_id_after_expiry_gets_it_back(client):
    lid = str(uuid.uuid4())
    a = client.acquire("ie", owner="a", ttl_ms=1000, lease_id=lid).json
    time.sleep(1.2)
    assert client.get("ie").json["state"] == "free"
    b = client.acquire("ie", owner="a", ttl_ms=1000, lease_id=lid)
    assert b.status == 200 and b.json["fencing_token"] == a["fencing_token"]


def test_acquire_waits_and_is_granted_on_release(server, client):
    a = client.acquire("w", owner="a", ttl_ms=10000).json
    result = {}

    def waiter():
        c = server.client()
        t0 = time.monotonic()
        result["r"] = c.acquire("w", owner="b", wait_ms=10000)
        result["t"] = time.monotonic() - t0
        c.close()

    t = threading.Thread(target=waiter)
    t.start()
    deadline = time.time() + 5
    while client.get("w").json["waiters"] != 1 and time.time() < deadline:
        time.sleep(0.02)
    assert client.get("w").json["waiters"] == 1
    time.sleep(0.3)
    assert client.release("w", a["lease_id"]).status == 200
    t.join(10)
    r = result["r"]
    assert r.status == 200 and r.json["owner"] == "b"
    assert r.json["fencing_token"] > a["fencing_token"]
    assert 0.3 <= result["t"] < 5


def test_acquire_wait_times_out_with_lease_held(client):
    client.acquire("wt", owner="a", ttl_ms=10000)
    t0 = time.monotonic()
    r = client.acquire("wt", owner="b", wait_ms=700)
    took = time.monotonic() - t0
    err = check_error(r, 409, "lease_held")
    assert err["holder"]["owner"] == "a"
    assert r.header("retry-after")
    assert 0.7 <= took < 3


def test_too_many_waiters():
    with Server(args=["--max-waiters", "2"]) as s:
        c = s.client()
        c.acquire("q", owner="a", ttl_ms=5000)
        waiters = []
        for i in range(2):
            sock = socket.create_connection((s.host, s.port))
            body = b'{"owner":"w","wait_ms":3000}'
            sock.sendall(b"POST /v1/resources/q/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
            waiters.append(sock)
        deadline = time.time() + 5
        while c.get("q").json["waiters"] < 2 and time.time() < deadline:
            time.sleep(0.02)
        r = c.acquire("q", owner="third", wait_ms=3000)
        check_error(r, 429, "too_many_waiters")
        for sock in waiters:
            sock.close()
        c.close()


# ---- renew, release, break ----------------------------------------------------------

def test_renew_keeps_token_and_defaults_to_own_ttl(client):
    a = client.acquire("r", owner="a", ttl_ms=3000).json
    time.sleep(0.3)
    r = client.renew("r", a["lease_id"])
    b = check_lease_body(r, "r", "a", 3000)
    assert b["fencing_token"] == a["fencing_token"]
    assert b["expires_in_ms"] > 2900
    assert b["renewed_at"] > a["renewed_at"]
    r = client.renew("r", a["lease_id"], ttl_ms=7000, metadata={"x": 1})
    assert r.json["ttl_ms"] == 7000 and r.json["metadata"] == {"x": 1}


def test_renew_after_expiry_until_another_grant(client):
    a = client.acquire("re", owner="a", ttl_ms=1000).json
    time.sleep(1.2)
    r = client.renew("re", a["lease_id"], ttl_ms=1000)
    assert r.status == 200 and r.json["fencing_token"] == a["fencing_token"]
    time.sleep(1.2)
    b = client.acquire("re", owner="b").json
    check_error(client.renew("re", a["lease_id"]), 409, "lease_lost")
    check_error(client.release("re", a["lease_id"]), 409, "lease_lost")
    assert client.get("re").json["holder"]["fencing_token"] == b["fencing_token"]


def test_renew_unknown_lease_is_lost(client):
    client.acquire("ru", owner="a")
    check_error(client.renew("ru", str(uuid.uuid4())), 409, "lease_lost")
    check_error(client.renew("never-used", str(uuid.uuid4())), 409, "lease_lost")


def test_release(client):
    a = client.acquire("rl", owner="a").json
    r = client.release("rl", a["lease_id"])
    assert r.status == 200 and r.json == {"resource": "rl", "released": True}
    check_error(client.release("rl", a["lease_id"]), 409, "lease_lost")
    check_error(client.renew("rl", a["lease_id"]), 409, "lease_lost")
    assert client.get("rl").json["state"] == "free"


def test_release_with_wrong_lease_keeps_holder(client):
    a = client.acquire("rw", owner="a").json
    check_error(client.release("rw", str(uuid.uuid4())), 409, "lease_lost")
    g = client.get("rw").json
    assert g["state"] == "held" and g["holder"]["fencing_token"] == a["fencing_token"]


def test_release_after_expiry(client):
    a = client.acquire("rx", owner="a", ttl_ms=1000).json
    time.sleep(1.2)
    assert client.release("rx", a["lease_id"]).json == {"resource": "rx", "released": True}


def test_break(server, client):
    r = client.brk("b")
    assert r.status == 200 and r.json == {"resource": "b", "broken": False}
    a = client.acquire("b", owner="a").json
    r = client.brk("b", reason="stuck holder")
    assert r.json == {"resource": "b", "broken": True}
    check_error(client.renew("b", a["lease_id"]), 409, "lease_lost")
    assert client.get("b").json["state"] == "free"
    assert client.post("b", "break").status == 200  # no body at all
    assert any("break requested" in line for line in server.lines)


def test_break_grants_next_waiter(server, client):
    client.acquire("bw", owner="a", ttl_ms=30000)
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "r", server.client().acquire("bw", owner="b", wait_ms=10000)))
    t.start()
    while client.get("bw").json["waiters"] != 1:
        time.sleep(0.02)
    client.brk("bw")
    t.join(10)
    assert out["r"].status == 200 and out["r"].json["owner"] == "b"


# ---- GET, watch, list -----------------------------------------------------------------

def test_get_free_and_held(client):
    g = client.get("never/used/before").json
    assert g["resource"] == "never/used/before"
    assert g["state"] == "free" and g["holder"] is None and g["waiters"] == 0
    assert g["limit"] == 1 and g["holders"] == []
    assert isinstance(g["index"], int)
    a = client.acquire("g", owner="a", ttl_ms=5000, metadata={"k": "v"}).json
    g = client.get("g").json
    assert set(g) == {"resource", "state", "index", "limit", "holder", "holders", "waiters"}
    assert g["state"] == "held" and g["limit"] == 1
    h = g["holder"]
    assert set(h) == {"owner", "fencing_token", "ttl_ms", "expires_in_ms", "acquired_at",
                      "renewed_at", "metadata", "shared"}
    assert g["holders"] == [h] and h["shared"] is False
    assert h["owner"] == "a" and h["fencing_token"] == a["fencing_token"]
    assert h["metadata"] == {"k": "v"}
    assert a["lease_id"] not in client.get("g").body  # never shown


def test_index_increases_on_every_change(client):
    seen = [client.get("ix").json["index"]]
    a = client.acquire("ix", owner="a", ttl_ms=1000).json
    seen.append(client.get("ix").json["index"])
    client.renew("ix", a["lease_id"], ttl_ms=1000)
    seen.append(client.get("ix").json["index"])
    time.sleep(1.2)  # expiry
    seen.append(client.get("ix").json["index"])
    b = client.acquire("ix", owner="b").json
    seen.append(client.get("ix").json["index"])
    client.brk("ix")
    seen.append(client.get("ix").json["index"])
    c = client.acquire("ix", owner="c").json
    client.release("ix", c["lease_id"])
    seen.append(client.get("ix").json["index"])
    assert all(x < y for x, y in zip(seen, seen[1:])), seen
    assert b["fencing_token"] < c["fencing_token"]


def test_watch_returns_on_change(server, client):
    idx = client.get("wch").json["index"]
    out = {}

    def watch():
        c = server.client()
        t0 = time.monotonic()
        out["r"] = c.get("wch", "?index=%d&wait_ms=10000" % idx)
        out["t"] = time.monotonic() - t0

    t = threading.Thread(target=watch)
    t.start()
    time.sleep(0.5)
    client.acquire("wch", owner="leader", metadata={"addr": "x"})
    t.join(10)
    g = out["r"].json
    assert out["r"].status == 200 and g["state"] == "held"
    assert g["holder"]["owner"] == "leader" and g["index"] > idx
    assert 0.4 < out["t"] < 5


def test_watch_times_out_unchanged(client):
    g = client.get("wct").json
    t0 = time.monotonic()
    r = client.get("wct", "?index=%d&wait_ms=600" % g["index"])
    assert 0.6 <= time.monotonic() - t0 < 3
    assert r.status == 200 and r.json["index"] == g["index"]


def test_watch_with_other_index_answers_at_once(client):
    g = client.get("wci").json
    t0 = time.monotonic()
    r = client.get("wci", "?index=%d&wait_ms=5000" % (g["index"] + 12345))
    assert time.monotonic() - t0 < 1 and r.status == 200


def test_watch_and_get_query_errors(client):
    check_error(client.get("x", "?index=abc"), 400, "invalid_field", "index")
    check_error(client.get("x", "?index=1&wait_ms=-1"), 400, "invalid_wait", "wait_ms")
    check_error(client.get("x", "?index=1&wait_ms=300001"), 400, "invalid_wait", "wait_ms")
    check_error(client.get("x", "?wait=5"), 400, "unknown_field", "wait")


def test_list_in_name_order_with_paging(client):
    names = ["lst/%02d" % i for i in range(25)]
    for n in reversed(names):
        assert client.acquire(n, owner="o-" + n).status == 200
    client.acquire("other/x", owner="o")
    freed = client.acquire("lst/zz", owner="o").json
    client.release("lst/zz", freed["lease_id"])

    got, cursor, pages = [], None, 0
    while True:
        q = "/v1/resources?prefix=lst/&limit=10" + ("&cursor=" + cursor if cursor else "")
        r = client.request("GET", q)
        assert r.status == 200, r
        pages += 1
        for item in r.json["resources"]:
            assert item["state"] == "held" and item["holder"]["owner"] == "o-" + item["resource"]
            assert "lease_id" not in item["holder"]
            got.append(item["resource"])
        cursor = r.json["next_cursor"]
        if cursor is None:
            break
        assert pages < 10
    assert got == names
    assert pages == 3
    r = client.request("GET", "/v1/resources")
    assert "other/x" in [x["resource"] for x in r.json["resources"]]
    assert "lst/zz" not in [x["resource"] for x in r.json["resources"]]


def test_exactly_full_last_page_has_no_next_cursor(client):
    for i in range(3):
        client.acquire("full/%d" % i, owner="o")
    r = client.request("GET", "/v1/resources?prefix=full/&limit=3").json
    assert len(r["resources"]) == 3 and r["next_cursor"] is None
    r = client.request("GET", "/v1/resources?prefix=full/&limit=2").json
    assert len(r["resources"]) == 2 and r["next_cursor"] == "full/1"


def test_list_errors(client):
    check_error(client.request("GET", "/v1/resources?limit=0"), 400, "invalid_field", "limit")
    check_error(client.request("GET", "/v1/resources?limit=1001"), 400, "invalid_field", "limit")
    check_error(client.request("GET", "/v1/resources?limit=x"), 400, "invalid_field", "limit")
    assert client.request("GET", "/v1/resources?limit=1000").status == 200
    check_error(client.request("GET", "/v1/resources?bogus=1"), 400, "unknown_field", "bogus")


# ---- operations -----------------------------------------------------------------------

def test_health_ready_metrics(client):
    r = client.request("GET", "/healthz")
    assert r.status == 200 and r.json == {"status": "ok"}
    r = client.request("GET", "/readyz")
    assert r.status == 200 and r.json["status"] == "ready"
    client.acquire("m", owner="a")
    client.acquire("m", owner="b")
    r = client.request("GET", "/metrics")
    assert r.status == 200 and r.header("content-type").startswith("text/plain")
    text = r.body
    for name in ["mutexd_http_requests_total", "mutexd_http_request_duration_seconds_bucket",
                 "mutexd_leases_held", "mutexd_waiters", "mutexd_grants_total",
                 "mutexd_expiries_total", "mutexd_expiry_lateness_seconds_bucket",
                 "mutexd_actors_active",
                 "mutexd_store_commit_batch_size_bucket", "mutexd_store_commit_seconds_bucket",
                 "mutexd_store_errors_total"]:
        assert re.search(r"^%s[ {]" % name, text, re.M), name
    assert re.search(r'^mutexd_http_requests_total\{route="acquire",code="409"\} 1$', text, re.M)
    assert re.search(r"^mutexd_leases_held 1$", text, re.M)
    for line in text.splitlines():
        assert line.startswith("#") or line.startswith("mutexd_"), line


def test_metrics_count_every_open_connection(server, client):
    """mutexd_http_connections counts the connections of every HTTP thread, not only
    those of the thread that answers /metrics."""
    def count():
        m = re.search(r"^mutexd_http_connections (\d+)$", client.request("GET", "/metrics").body,
                      re.M)
        return int(m.group(1))

    base = count()
    socks = [socket.create_connection((server.host, server.port)) for _ in range(40)]
    try:
        deadline = time.monotonic() + 5
        while count() < base + 40 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert count() == base + 40
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 5
    while count() > base and time.monotonic() < deadline:
        time.sleep(0.05)
    assert count() == base


def test_head_has_no_body(client):
    r = client.request("HEAD", "/healthz")
    assert r.status == 200 and r.body == ""
    assert client.request("GET", "/healthz").status == 200  # the connection still works


# ---- errors and limits --------------------------------------------------------------

def test_every_response_has_a_request_id(client):
    r = client.request("GET", "/healthz", headers={"X-Request-Id": "trace-123"})
    assert r.header("x-request-id") == "trace-123"
    ids = {client.request("GET", "/nope").header("x-request-id") for _ in range(5)}
    assert len(ids) == 5 and all(ids)
    assert client.acquire("rid", owner="").header("x-request-id")
    r = client.request("GET", "/healthz", headers={"X-Request-Id": "bad id with spaces"})
    assert r.header("x-request-id") and r.header("x-request-id") != "bad id with spaces"


def test_routing_errors(client):
    check_error(client.request("GET", "/v2/resources/a"), 404, "not_found")
    check_error(client.request("GET", "/v1/resources/"), 400, "invalid_resource")
    check_error(client.post("a", "frobnicate", {}), 404, "not_found")
    r = client.request("DELETE", "/v1/resources/a")
    check_error(r, 405, "method_not_allowed")
    assert r.header("allow") == "GET, HEAD, POST"
    r = client.request("POST", "/healthz", {})
    check_error(r, 405, "method_not_allowed")
    assert r.header("allow") == "GET, HEAD"
    r = client.request("PUT", "/v1/resources", {})
    assert r.status == 405 and r.header("allow") == "GET, HEAD"


@pytest.mark.parametrize("name", ["/a", "a/", "a//b", "a/./b", "a/../b", "..", "a%20b", "a*b",
                                  "x" * 257])
def test_invalid_resource_names(client, name):
    check_error(client.post(name, "acquire", {"owner": "o"}), 400, "invalid_resource")


def test_hash_tags_are_names_percent_encoded_or_not(client):
    """`{` and `}` make hash tags (docs/api.md, "Partitions"): a name may hold them, sent
    percent-encoded as clients send them or as they are; the answers and the list show the
    name decoded."""
    r = client.acquire("%7Border-7%7D/lock", ttl_ms=60000)
    assert r.status == 200, r.body
    assert r.json["resource"] == "{order-7}/lock"
    r = client.acquire("{order-7}/stock", ttl_ms=60000)
    assert r.status == 200, r.body
    assert r.json["resource"] == "{order-7}/stock"
    assert client.get("%7Border-7%7D/lock").json["state"] == "held"
    names = [x["resource"] for x in
             client.request("GET", "/v1/resources?prefix=%7Border-7%7D/").json["resources"]]
    assert names == ["{order-7}/lock", "{order-7}/stock"]
    for bad in ["a%7Bb%00", "a{b c}"]:
        check_error(client.post(bad.replace(" ", "%20"), "acquire", {"owner": "o"}), 400,
                    "invalid_resource")


def test_resource_name_limits(client):
    name = "/".join(["seg"] * 63) + "/abcd"  # 256 bytes
    assert len(name) == 256
    assert client.acquire(name, owner="o").status == 200
    assert client.get(name).json["state"] == "held"
    assert client.acquire("A-Z_a.z~0:9@x/.../y", owner="o").status == 200


@pytest.mark.parametrize("body,code,field", [
    ('{"owner":', "invalid_json", None),
    ("[1,2]", "invalid_json", None),
    ('{"owner":"o"} trailing', "invalid_json", None),
    ('{"owner":"o","ttl":5000}', "unknown_field", "ttl"),
    ("{}", "missing_field", "owner"),
    ('{"owner":7}', "invalid_field", "owner"),
    ('{"owner":"' + "x" * 257 + '"}', "invalid_field", "owner"),
    ('{"owner":"o","metadata":"x"}', "invalid_field", "metadata"),
    ('{"owner":"o","ttl_ms":999}', "invalid_ttl", "ttl_ms"),
    ('{"owner":"o","ttl_ms":3600001}', "invalid_ttl", "ttl_ms"),
    ('{"owner":"o","ttl_ms":"5s"}', "invalid_ttl", "ttl_ms"),
    ('{"owner":"o","wait_ms":300001}', "invalid_wait", "wait_ms"),
    ('{"owner":"o","lease_id":"not-a-uuid"}', "invalid_lease_id", "lease_id"),
])
def test_acquire_body_errors(client, body, code, field):
    check_error(client.post("be", "acquire", body), 400, code, field)


def test_invalid_utf8_is_rejected(client):
    r = client.post("u", "acquire", b'{"owner":"\xff\xfe"}')
    check_error(r, 400, "invalid_json")


def test_renew_release_body_errors(client):
    check_error(client.post("x", "renew", {}), 400, "missing_field", "lease_id")
    check_error(client.post("x", "release", ""), 400, "missing_field", "lease_id")
    check_error(client.post("x", "renew", {"lease_id": "zz"}), 400, "invalid_lease_id", "lease_id")
    check_error(client.post("x", "release", {"lease_id": str(uuid.uuid4()), "ttl_ms": 5}),
                400, "unknown_field", "ttl_ms")


def test_metadata_limit(client):
    ok = {"k": "x" * (4096 - len('{"k":""}'))}
    assert client.acquire("md", owner="o", metadata=ok).status == 200
    big = {"k": "x" * (4097 - len('{"k":""}'))}
    check_error(client.acquire("md2", owner="o", metadata=big), 400, "invalid_field", "metadata")


def test_body_limit(client):
    pad = " " * (65536 - len('{"owner":"o"}'))
    r = client.post("bl", "acquire", ('{"owner":"o"}' + pad).encode())
    assert r.status == 200, r  # exactly 64 KiB
    r = client.post("bl2", "acquire", ('{"owner":"o"}' + pad + " ").encode())
    check_error(r, 413, "body_too_large")


def test_body_over_limit_is_read_before_the_answer(server):
    """A client that writes its whole body before it reads (as most do) gets its 413, not a
    reset: the server reads a body of up to 1 MiB before it answers and closes."""
    body = b"x" * 70000
    head = (b"POST /v1/resources/bl3/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    with socket.create_connection((server.host, server.port), timeout=5) as sk:
        sk.sendall(head)
        for i in range(0, len(body), 8192):
            time.sleep(0.01)  # the answer, were it sent at the headers, is out by now
            sk.sendall(body[i:i + 8192])
        raw = recv_to_close(sk)
    assert status_of(raw) == 413 and b"body_too_large" in raw, raw[:300]
    assert b"Connection: close" in raw
    # Over 1 MiB announced: answered at once, the body unread.
    t0 = time.monotonic()
    raw = raw_request(server.host, server.port, head.replace(b"70000", b"1048577") + b"{")
    assert status_of(raw) == 413 and time.monotonic() - t0 < 1.5, raw[:300]


def test_chunked_body_over_limit(server):
    chunk = b"x" * 8192
    data = (b"POST /v1/resources/ch/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
            b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    data += b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(9)) + b"0\r\n\r\n"
    assert status_of(raw_request(server.host, server.port, data)) == 413


def test_content_types(client):
    body = b'{"owner":"o"}'
    r = client.post("ct", "acquire", body, headers={"Content-Type": "text/plain"})
    check_error(r, 415, "unsupported_media_type")
    r = client.post("ct", "acquire", body,
                    headers={"Content-Type": "application/x-www-form-urlencoded"})
    check_error(r, 415, "unsupported_media_type")
    r = client.post("ct", "acquire", body,
                    headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status == 200


def test_body_without_content_type_is_refused(server):
    # What a web page can send without the browser asking the server first.
    body = b'{"owner":"o"}'
    raw = raw_request(server.host, server.port,
                      b"POST /v1/resources/nct/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    assert status_of(raw) == 415 and b"unsupported_media_type" in raw, raw


def test_missing_body_is_the_empty_object(server):
    raw = raw_request(server.host, server.port,
                      b"POST /v1/resources/nb/acquire HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Connection: close\r\nContent-Length: 0\r\n\r\n")
    assert status_of(raw) == 400 and b"missing_field" in raw


def test_long_url_is_refused_and_server_goes_on(server, client):
    raw = raw_request(server.host, server.port,
                      b"GET /v1/resources/" + b"a" * 40000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    st = status_of(raw)
    assert st is None or 400 <= st < 500, raw[:200]
    assert client.request("GET", "/healthz").status == 200


def test_idle_connections_are_closed():
    with Server(args=["--idle-timeout-ms", "1000"]) as s:
        sock = socket.create_connection((s.host, s.port))
        sock.settimeout(5)
        t0 = time.monotonic()
        assert sock.recv(100) == b""  # closed by the server
        assert 0.9 <= time.monotonic() - t0 < 4
        sock.close()


def test_connection_limit_keeps_room_for_new_clients():
    with Server(args=["--max-connections", "20"]) as s:
        idle = []
        for _ in range(40):
            try:
                idle.append(socket.create_connection((s.host, s.port), timeout=2))
            except OSError:
                pass
        time.sleep(0.5)
        ok = 0
        for _ in range(10):
            c = Client(s.host, s.port, timeout=5)
            try:
                ok += c.request("GET", "/healthz").status == 200
            except OSError:
                pass
            c.close()
        assert ok >= 8
        for sock in idle:
            sock.close()


# ---- options --------------------------------------------------------------------------

def test_ttl_bounds_flags_and_environment():
    with Server(args=["--min-ttl-ms", "2000"], env={"MUTEXD_MAX_TTL_MS": "5000",
                                                    "MUTEXD_MIN_TTL_MS": "100"}) as s:
        c = s.client()
        check_error(c.acquire("t", ttl_ms=1999), 400, "invalid_ttl", "ttl_ms")  # flag wins
        assert c.acquire("t", ttl_ms=2000).status == 200
        check_error(c.acquire("t2", ttl_ms=5001), 400, "invalid_ttl", "ttl_ms")  # env
        assert c.acquire("t2").json["ttl_ms"] == 5000  # the default, within the bounds
        c.close()


def test_max_wait_flag():
    with Server(env={"MUTEXD_MAX_WAIT_MS": "1000"}) as s:
        c = s.client()
        check_error(c.acquire("t", wait_ms=1001), 400, "invalid_wait", "wait_ms")
        check_error(c.get("t", "?index=1&wait_ms=1001"), 400, "invalid_wait", "wait_ms")
        c.close()


def test_help_version_and_bad_options():
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for flag, env in [("--listen", "MUTEXD_LISTEN"), ("--data-dir", "MUTEXD_DATA_DIR"),
                      ("--threads", "MUTEXD_THREADS"), ("--min-ttl-ms", "MUTEXD_MIN_TTL_MS"),
                      ("--max-ttl-ms", "MUTEXD_MAX_TTL_MS"), ("--max-wait-ms", "MUTEXD_MAX_WAIT_MS"),
                      ("--max-waiters", "MUTEXD_MAX_WAITERS"), ("--log-level", "MUTEXD_LOG_LEVEL"),
                      ("--tls-cert", "MUTEXD_TLS_CERT"), ("--tls-key", "MUTEXD_TLS_KEY")]:
        assert flag in out.stdout and env in out.stdout, flag
    out = subprocess.run([BIN, "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("mutexd ")
    for args in (["--bogus"], ["--threads", "0"], ["--threads", "x"], ["--max-waiters", "-1"],
                 ["--min-ttl-ms", "5000", "--max-ttl-ms", "4000"], ["--log-level", "loud"],
                 ["--tls-cert", "x"], ["extra"]):
        out = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=10)
        assert out.returncode == 2, args
        assert out.stderr.startswith("mutexd: "), out.stderr


def test_second_server_on_same_data_dir_refuses(server):
    out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", server.data_dir],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 1
    assert "in use by another mutexd" in out.stderr


def test_sigint_stops_cleanly():
    s = Server().start()
    s.proc.send_signal(2)
    assert s.proc.wait(10) == 0
    s.stop()
