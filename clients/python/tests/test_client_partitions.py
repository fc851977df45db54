"""A partitioned group (--partitions 16) of three real servers on a real Azurite: the client
sends each request about a resource straight to its partition's owner, so that no server
forwards it, and follows a partition that moves when its owner stops (SIGTERM); lists, list
watches and events span the partitions, with positions (strings) for their index and next.
And, on a stand-in, the readings of the map: at most one a second, and one that fails fails
no request."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import mutexd
from mutexd import _http
from mutexd_testserver import ROOT, MutexdServer, servers

PARTITIONS = 16
AZURITE = os.path.join(ROOT, "scripts", "azurite.sh")


class Azurite:
    """A real Azurite (scripts/azurite.sh), in memory, on a free loopback port."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="mutexd-pytest-azurite-")
        try:
            subprocess.run([AZURITE, "install"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run([AZURITE, "start", self.dir], check=True, stdout=subprocess.DEVNULL)
            with open(os.path.join(self.dir, "connection-string")) as f:
                self.connection_string = f.read().strip()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        subprocess.run([AZURITE, "stop", self.dir], check=False, stdout=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 2.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8"))


def owners(server: MutexdServer):
    """Partition -> owner URL in the server's map; None when it does not answer."""
    try:
        view = get_json(server.url + "/v1/servers")
    except OSError:
        return None
    parts = view.get("partitions")
    if not parts:
        return None
    return {o["partition"]: o["url"] for o in parts["owners"]}


def settled(group, timeout: float = 60.0):
    """Waits until every live server's map names a live owner for every partition, they
    agree, and each server owns its even share (the floor or the ceiling of 16 / servers);
    returns that map."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        live = [s for s in group if s.running()]
        urls = {s.url for s in live}
        maps = [owners(s) for s in live]
        last = maps
        m = maps[0] if maps else None
        if (m is not None and len(m) == PARTITIONS and all(x == m for x in maps)
                and all(u in urls for u in m.values())):
            share = PARTITIONS // len(live)
            if all(share <= list(m.values()).count(u) <= share + 1 for u in urls):
                return m
        time.sleep(0.1)
    raise AssertionError("the partitions did not settle: %r" % (last,))


_FORWARDED = re.compile(r"^mutexd_forwarded_requests_total(?:\{[^}]*\})? (\d+)", re.M)


def forwarded(group) -> int:
    """Requests forwarded to another server, summed over the live servers."""
    total = 0
    for s in group:
        if s.running():
            with urllib.request.urlopen(s.url + "/metrics", timeout=5) as resp:
                text = resp.read().decode("utf-8")
            total += sum(int(n) for n in _FORWARDED.findall(text))
    return total


def names_by_partition(prefix: str, per: int = 2) -> dict[int, list[str]]:
    """``per`` resource names in each partition."""
    found: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    i = 0
    while any(len(v) < per for v in found.values()):
        name = "%s/%d" % (prefix, i)
        p = mutexd.partition_of(name, PARTITIONS)
        if len(found[p]) < per:
            found[p].append(name)
        i += 1
    return found


class Sent:
    """Records every request the client sends: the URL it went to, the path, and the
    answer's headers (of an error answer too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.log: list[tuple[str, str, str, dict]] = []
        real = _http.Transport.request
        sent = self

        def request(transport, method, path, body=None, *, timeout):
            try:
                resp = real(transport, method, path, body, timeout=timeout)
            except mutexd.APIError as exc:
                sent.log.append((transport.url, method, path, dict(exc.headers)))
                raise
            except mutexd.TransportError:
                sent.log.append((transport.url, method, path, {}))
                raise
            sent.log.append((transport.url, method, path, resp.headers))
            return resp

        monkeypatch.setattr(_http.Transport, "request", request)

    def mark(self) -> int:
        return len(self.log)

    def about_resources(self, since: int):
        return [e for e in self.log[since:] if e[2].startswith("/v1/resources/")]

    def map_reads(self, since: int) -> int:
        return sum(1 for e in self.log[since:] if e[2] == "/v1/servers")

    def assert_served_where_sent(self, since: int) -> None:
        sent = self.about_resources(since)
        assert sent
        wrong = [(url, m, p, h.get("mutexd-served-by")) for url, m, p, h in sent
                 if h.get("mutexd-served-by") != url]
        assert not wrong, "answers served by another server than the one asked: %r" % wrong


def start_group() -> Iterator[list[MutexdServer]]:
    """Three servers of one partitioned group, every partition owned."""
    az = Azurite()
    try:
        container = "p" + uuid.uuid4().hex[:20]
        for start in servers():
            started = []
            for _ in range(3):
                port = free_port()
                url = "http://127.0.0.1:%d" % port
                started.append(start(
                    "--ha", "--advertise-url", url, "--mirror", "sync",
                    "--blob-connection-string", az.connection_string,
                    "--blob-container", container, "--partitions", str(PARTITIONS),
                    listen="127.0.0.1:%d" % port,
                ))
                time.sleep(0.3)
            settled(started)
            yield started
    finally:
        az.stop()


@pytest.fixture
def group() -> Iterator[list[MutexdServer]]:
    """A group of the test's own, for a test that stops one of its servers."""
    yield from start_group()


@pytest.fixture(scope="module")
def steady_group() -> Iterator[list[MutexdServer]]:
    """A group shared by the tests that stop none of its servers (each uses names of its
    own)."""
    yield from start_group()


def every_call(client: mutexd.Client, name: str) -> None:
    """Every call about one resource, on ``name``."""
    lease = client.acquire(name, owner="test", ttl=30)
    state = client.get(name)
    assert [h.fencing_token for h in state.holders] == [lease.fencing_token]
    assert client.watch(name, 0, wait=1).index == state.index  # answered at once
    again = client.renew(lease)
    assert again.fencing_token == lease.fencing_token
    assert again.fencing_token % 256 == mutexd.partition_of(name, PARTITIONS)
    client.release(lease)
    assert client.break_lease(name) is False


def test_requests_go_straight_to_the_owner(steady_group, monkeypatch):
    group = steady_group
    sent = Sent(monkeypatch)
    with mutexd.Client([s.url for s in group], timeout=10) as client:
        # The first answer about a resource shows the group is partitioned: the client
        # reads the map then.
        client.get("tests/%s/first" % uuid.uuid4().hex[:8])
        assert sent.map_reads(0) == 1
        before = forwarded(group)
        mark = sent.mark()
        names = names_by_partition("tests/%s" % uuid.uuid4().hex[:8])
        for p in range(PARTITIONS):
            for name in names[p]:
                every_call(client, name)
        with client.lock(names[0][0], ttl=3, wait=5) as held:
            assert not held.lost.is_set()
        assert forwarded(group) == before, "requests about a resource were forwarded"
        # Lists, events and whoami go as before: to a server given (which asks each
        # partition's owner for its part of a list or of the events).
        client.list_page(prefix="tests/")
        client.events_page()
        client.whoami()
        sent.assert_served_where_sent(mark)
        # Every server was asked: each owns partitions.
        assert {url for url, _, _, _ in sent.about_resources(mark)} == {s.url for s in group}
        assert sent.map_reads(mark) == 0  # no surprise, no reading again


def tags_by_owner(m, prefix: str) -> dict[str, str]:
    """A hash tag whose partition each server owns, by owner URL."""
    found: dict[str, str] = {}
    i = 0
    while len(found) < len(set(m.values())):
        tag = "%s-%d" % (prefix, i)
        found.setdefault(m[mutexd.partition_of("{%s}" % tag, PARTITIONS)], tag)
        i += 1
    return found


def test_several_resources_at_once_go_to_their_partitions_owner(steady_group, monkeypatch):
    group = steady_group
    m = settled(group)
    sent = Sent(monkeypatch)
    base = uuid.uuid4().hex[:8]
    with mutexd.Client([s.url for s in group], timeout=10) as client:
        client.get("tests/%s/first" % base)  # learns the map
        before = forwarded(group)
        start = mark = sent.mark()
        for owner, tag in tags_by_owner(m, base).items():
            names = ["{%s}/acct/alice" % tag, "{%s}/acct/bob" % tag]
            leases = client.acquire_many(names, owner="test", ttl=30)
            assert [x.resource for x in leases] == names
            assert all(x.fencing_token % 256 == mutexd.partition_of(names[0], PARTITIONS)
                       for x in leases)
            client.renew_many(leases)
            client.release_many(leases)
            with client.lock_many(names, ttl=1.5) as held:
                time.sleep(0.8)  # renewed as a set, at the owner too
                assert held.renewals >= 1 and not held.lost.is_set()
            many = [e for e in sent.log[mark:] if e[2] in ("/v1/acquire", "/v1/renew",
                                                            "/v1/release")]
            assert many and {url for url, _, _, _ in many} == {owner}
            mark = sent.mark()
        # The ordered helper over names of different partitions: each to its own owner.
        spread = ["{%s}/stock" % tag for tag in tags_by_owner(m, base + "o").values()]
        with client.lock_ordered(spread, ttl=3, wait=5) as held:
            assert held.resources == tuple(sorted(spread))
            assert not held.lost.is_set()
        assert forwarded(group) == before, "requests about resources were forwarded"
        sent.assert_served_where_sent(start)
        multi = [e for e in sent.log[start:] if e[2] in ("/v1/acquire", "/v1/renew",
                                                          "/v1/release")]
        wrong = [(u, p, h.get("mutexd-served-by")) for u, _, p, h in multi
                 if h.get("mutexd-served-by") != u]
        assert not wrong, wrong
        assert sent.map_reads(start) == 0  # no surprise
        # Names of different partitions in one request: refused, whatever the server asked.
        with pytest.raises(mutexd.InvalidRequest) as info:
            client.acquire_many(spread[:2], owner="test")
        assert info.value.field == "resources"
        assert info.value.details.get("reason") == "partitions_differ"


def test_follows_a_partition_that_moves(group, monkeypatch):
    sent = Sent(monkeypatch)
    m = settled(group)
    victim = group[1]
    moving = sorted(p for p in range(PARTITIONS) if m[p] == victim.url)
    assert moving
    names = names_by_partition("tests/%s" % uuid.uuid4().hex[:8])
    name = names[moving[0]][0]
    held_name = names[moving[-1]][1]
    with mutexd.Client([s.url for s in group], timeout=10) as client:
        lease = client.acquire(name, owner="test", ttl=30)
        lease = client.renew(lease)  # sent to the owner: the map is known
        assert sent.log[-1][0] == victim.url
        with client.lock(held_name, ttl=6, wait=5) as held:
            time.sleep(1.1)  # the map read at the start is more than a second old
            mark = sent.mark()
            started = time.monotonic()
            # The owner hands its partitions to the others and exits 0.
            victim.proc.send_signal(15)
            lease = client.renew(lease)
            assert victim.terminate() == 0
            new = settled(group)
            assert all(new[p] != victim.url for p in moving)
            lease = client.renew(lease)
            # A surprise less than a second after a reading leaves the next one due: the
            # next request about a resource makes it.
            time.sleep(1.1)
            lease = client.renew(lease)
            # At most a reading a second, whatever the surprises.
            elapsed = time.monotonic() - started
            assert 1 <= sent.map_reads(mark) <= elapsed + 1
            # The map is known again: requests go straight to the new owner.
            before = forwarded(group)
            mark = sent.mark()
            lease = client.renew(lease)
            assert sent.log[-1][0] == new[moving[0]]
            client.release(lease)
            every_call(client, name)
            for p in moving:
                every_call(client, names[p][0])  # every one of the moved partitions
            time.sleep(2.5)  # the lock renews (every 2 s): at the new owner too
            assert not held.lost.is_set()
            assert forwarded(group) == before, "requests about a resource were forwarded"
            sent.assert_served_where_sent(mark)
            assert sent.map_reads(mark) == 0
        assert not held.lost.is_set()


def later(delay, fn, *args):
    t = threading.Timer(delay, fn, args=args)
    t.start()
    return t


def test_a_list_index_and_the_events_next_are_positions(steady_group):
    prefix = "tests/%s/" % uuid.uuid4().hex[:8]
    names = names_by_partition(prefix + "n", per=1)
    with mutexd.Client([s.url for s in steady_group], timeout=10) as client:
        for p in (0, 5, 11):
            client.acquire(names[p][0], owner="test", ttl=30)
        page = client.list_page(prefix=prefix)
        assert [r.resource for r in page.resources] == sorted(names[p][0] for p in (0, 5, 11))
        assert isinstance(page.index, str) and page.index.startswith("v")
        # Passed back unchanged: a list watch from it, answered when its wait runs out.
        now = client.watch_list(prefix, page.index, 0.3)
        assert now.index == page.index and now.names() == page_names(page)
        # The list at once, on any group.
        assert client.watch_list(prefix, 0, 0).index == page.index
        assert client.watch_list(prefix, None).index == page.index
        # Another number is the server's to refuse on a partitioned group.
        with pytest.raises(mutexd.InvalidRequest):
            client.watch_list(prefix, 3, 0)
        events = client.events_page(prefix=prefix)
        assert isinstance(events.next, str) and events.next.startswith("v")
        assert [(e.type, e.partition) for e in events.events] == [
            ("granted", mutexd.partition_of(e.resource, PARTITIONS)) for e in events.events]
        assert sorted(e.resource for e in events.events) == page_names(page)
        assert client.events_page(events.next, prefix=prefix).events == []


def page_names(page):
    return [r.resource for r in page.resources]


def test_a_list_watch_wakes_on_a_change_another_server_owns(steady_group):
    m = settled(steady_group)
    asked = steady_group[0]
    prefix = "tests/%s/" % uuid.uuid4().hex[:8]
    names = names_by_partition(prefix + "n", per=1)
    elsewhere = [names[p][0] for p in range(PARTITIONS) if m[p] != asked.url]
    assert len(elsewhere) >= 2
    with mutexd.Client(asked.url, timeout=10) as watcher, \
            mutexd.Client([s.url for s in steady_group], timeout=10) as writer:
        it = watcher.watch_prefix(prefix, wait=20)
        first = next(it)
        assert first.names() == [] and isinstance(first.index, str)
        later(0.5, writer.acquire, elsewhere[0])
        started = time.monotonic()
        second = next(it)
        assert time.monotonic() - started < 10
        assert second.names() == [elsewhere[0]] and second.index != first.index
        # And from the position it gave, the next change, in another partition.
        later(0.5, writer.acquire, elsewhere[1])
        started = time.monotonic()
        third = watcher.watch_list(prefix, second.index, 20)
        assert time.monotonic() - started < 10
        assert third.names() == sorted(elsewhere[:2])
        it.close()


def test_the_events_helper_pages_through_every_partition(steady_group):
    prefix = "tests/%s/" % uuid.uuid4().hex[:8]
    names = names_by_partition(prefix + "n", per=2)
    used = [names[p][i] for p in (1, 4, 7, 9, 14) for i in range(2)]
    done = []
    with mutexd.Client([s.url for s in steady_group], timeout=10) as client:
        for name in used:
            lease = client.acquire(name, owner="test", ttl=30)
            client.release(lease)
            done += [(name, "granted"), (name, "released")]
        truncated = []
        seen = list(client.events(prefix=prefix, limit=3, on_truncated=truncated.append))
        assert not truncated
        # Every event once, oldest first: by time, then partition; a resource's in order.
        assert sorted((e.resource, e.type) for e in seen) == sorted(done)
        assert len({(e.partition, e.index) for e in seen}) == len(done)
        assert all(e.partition == mutexd.partition_of(e.resource, PARTITIONS) for e in seen)
        order = [(e.at, e.partition) for e in seen]
        assert order == sorted(order)
        for name in used:
            assert [e.type for e in seen if e.resource == name] == ["granted", "released"]
        # Followed: a change after them, in yet another partition, comes next, alone.
        it = client.events(prefix=prefix, follow=True, wait=5, limit=3)
        for _ in seen:
            next(it)
        later(0.5, client.acquire, names[12][0])
        ev = next(it)
        assert (ev.resource, ev.type, ev.partition) == (names[12][0], "granted", 12)
        it.close()


class SurprisingServer:
    """A stand-in on loopback whose every answer about a resource says it was served by
    another server of a partitioned group, and whose ``GET /v1/servers`` fails (500): each
    answer is a surprise, and each reading of the map fails."""

    def __init__(self) -> None:
        self.reads = 0
        self.answered = 0
        lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if self.path == "/v1/servers":
                    with lock:
                        outer.reads += 1
                    status, raw, extra = 500, b'{"error":{"code":"internal","message":"no"}}', {}
                else:
                    with lock:
                        outer.answered += 1
                    status, raw = 200, b'{"broken":false}'
                    extra = {"Mutexd-Served-By": "http://127.0.0.1:1", "Mutexd-Partition": "3"}
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _any

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_the_map_is_read_at_most_once_a_second_and_a_failed_reading_fails_nothing():
    server = SurprisingServer()
    errors = []
    try:
        with mutexd.Client(server.url, timeout=5) as client:
            started = time.monotonic()

            def breaker(i):
                try:
                    while time.monotonic() - started < 2.5:
                        assert client.break_lease("tests/herd/%d" % i) is False
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)

            threads = [threading.Thread(target=breaker, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
        assert not errors, errors
        assert server.answered > 50
        # Every answer was a surprise: the readings still come one a second at most.
        assert 1 <= server.reads <= elapsed + 1, (server.reads, elapsed)
    finally:
        server.close()
