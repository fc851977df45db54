"""The blob mirror against a real Azurite: content, restore, outages, a second server."""

import datetime
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

from azure import Azurite
from harness import BIN, Server


@pytest.fixture(scope="module")
def azurite():
    a = Azurite()
    yield a
    a.stop()


def container():
    return "c" + uuid.uuid4().hex[:20]


def mirror_args(az, name, mode="async", *extra):
    return ["--blob-connection-string", az.connection_string, "--blob-container", name,
            "--mirror", mode] + list(extra)


def readyz(c):
    return c.request("GET", "/readyz")


def wait_caught_up(c, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = readyz(c).json.get("mirror", {})
        if m.get("lag_changes") == 0:
            return True
        time.sleep(0.1)
    return False


LEASE_KEYS = ("owner", "token", "ttl_ms", "acquired_at", "renewed_at", "deadline", "held",
              "shared", "metadata")


def lease_of(line):
    return {k: line.get(k, False if k == "shared" else None) for k in LEASE_KEYS}


def container_rows(az, name):
    """Rebuilds the resources from the container alone: the newest snapshot, then its
    generation's journal after it, as a restore must. A resource is {"index", "limit",
    "leases": {lease_id: lease}}."""
    snaps = sorted(n for n in az.list(name, "snapshots/"))
    assert snaps, "no snapshot in the container"
    snap = snaps[-1]
    gen, seq = re.match(r"snapshots/(\d{10})-(\d{20})\.jsonl$", snap).groups()
    lines = az.get(name, snap).decode().splitlines()
    header = json.loads(lines[0])
    assert header["op"] == "snapshot" and header["seq"] == int(seq)
    assert header["format"] == 2, header
    rows = {}
    for line in lines[1:]:
        r = json.loads(line)
        assert r["op"] == "row", r
        rows[r["resource"]] = {"index": r["index"], "limit": r["limit"],
                               "leases": {l["lease_id"]: lease_of(l) for l in r["leases"]}}
    last = int(seq)
    journals = sorted(n for n in az.list(name, "journal/%s/" % gen))
    for j in journals:
        for line in az.get(name, j).decode().splitlines():
            r = json.loads(line)
            if r["op"] not in ("set", "del") or r["seq"] <= last:
                continue
            assert r["seq"] == last + 1, "the journal skips from %d to %d" % (last, r["seq"])
            last = r["seq"]
            if r["op"] == "del":
                rows.pop(r["resource"], None)
                continue
            row = rows.setdefault(r["resource"], {"leases": {}})
            row["index"], row["limit"] = r["index"], r["limit"]
            for lid in r["del"]:
                row["leases"].pop(lid, None)
            for l in r["put"]:
                row["leases"][l["lease_id"]] = lease_of(l)
    return rows, last, snaps, journals


def store_rows(data_dir):
    """The rows and the last commit, read in one transaction (the server keeps writing)."""
    db = sqlite3.connect("file:%s/mutexd.db?mode=ro" % data_dir, uri=True,
                         isolation_level=None)
    db.execute("BEGIN")
    rows = {}
    for res, idx, lim in db.execute("SELECT resource, idx, lim FROM resources"):
        rows[res] = {"index": idx, "limit": lim, "leases": {}}
    for (res, lid, owner, token, ttl, acq, ren, dl, held, shared, md) in db.execute(
            "SELECT resource, lease_id, owner, token, ttl_ms, acquired_at, renewed_at, "
            "deadline, held, shared, metadata FROM holders"):
        rows[res]["leases"][str(uuid.UUID(bytes=lid))] = {
            "owner": owner, "token": token, "ttl_ms": ttl, "acquired_at": acq,
            "renewed_at": ren, "deadline": dl, "held": bool(held), "shared": bool(shared),
            "metadata": json.loads(md) if md else None}
    seq = db.execute("SELECT value FROM meta WHERE key='commit_seq'").fetchone()[0]
    db.execute("COMMIT")
    db.close()
    return rows, seq


def assert_same(container_side, store_side):
    assert set(container_side) == set(store_side)
    for res, s in store_side.items():
        c = container_side[res]
        for k, v in s.items():
            assert c[k] == v, (res, k, c[k], v)


def load(server, resources, changes, threads=8, stop=None):
    """Acquires, renews and releases at random; returns how many changes were answered 2xx."""
    done = [0]
    lock = threading.Lock()

    def worker(i):
        rng = random.Random(i)
        c = server.client()
        held = {}
        while True:
            with lock:
                if done[0] >= changes or (stop and stop.is_set()):
                    break
            res = "load/%04d" % rng.randrange(resources)
            if res in held:
                if rng.random() < 0.5:
                    r = c.renew(res, held[res])
                else:
                    r = c.release(res, held.pop(res))
            else:
                # Long TTLs: nothing expires while a test compares the store with the
                # container.
                r = c.acquire(res, owner="w%d" % i, ttl_ms=rng.choice([120000, 300000]),
                              metadata={"n": rng.randrange(1000), "who": "w%d \"q\"" % i})
                if r.status == 200:
                    held[res] = r.json["lease_id"]
            if r.status == 200:
                with lock:
                    done[0] += 1
            elif r.status != 409:
                raise AssertionError(r)
        c.close()

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    return done[0]


def test_mirror_equals_store_after_10000_changes_on_1000_resources(azurite):
    name = container()
    data = tempfile.mkdtemp(prefix="mutexd-mirror-")
    try:
        with Server(data_dir=data, args=mirror_args(azurite, name, "async",
                                                    "--snapshot-every-changes", "3000")) as s:
            c = s.client()
            n = load(s, 1000, 10000)
            assert n >= 10000
            assert wait_caught_up(c)
            rows, seq = store_rows(data)
            cont, last, snaps, journals = container_rows(azurite, name)
            assert last == seq, (last, seq)
            assert_same(cont, rows)
            assert len(rows) > 100
            # Snapshots were taken along the way and the journal they cover was deleted.
            assert int(re.search(r"-(\d{20})", snaps[-1]).group(1)) > 0
            assert len(snaps) <= 2 and len(journals) <= 3, (snaps, journals)
            m = c.request("GET", "/metrics").body
            assert re.search(r"^mutexd_mirror_snapshots_total ([4-9]|\d\d)", m, re.M), m
            c.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_restore_on_a_wiped_disk(azurite, mode):
    name = container()
    data = tempfile.mkdtemp(prefix="mutexd-restore-")
    try:
        with Server(data_dir=data, args=mirror_args(azurite, name, mode)) as s:
            c = s.client()
            leases = [c.acquire("keep/%d" % i, owner="o%d" % i, ttl_ms=60000,
                                metadata={"i": i}).json for i in range(20)]
            exact = '{"id":9007199254740993,"f":1.10}'
            c.post("exact", "acquire", '{"owner":"x","ttl_ms":60000,"metadata":%s}' % exact)
            gone = c.acquire("gone", owner="x", ttl_ms=60000).json
            c.release("gone", gone["lease_id"])
            top = max(l["fencing_token"] for l in leases + [gone])
            c.close()
        stopped_at = time.monotonic()
        shutil.rmtree(data)  # the disk is lost

        with Server(data_dir=data, args=mirror_args(azurite, name, mode,
                                                    "--restore-grace-ms", "3000")) as s:
            c = s.client()
            elapsed_ms = (time.monotonic() - stopped_at) * 1000
            for l in leases:
                g = c.get(l["resource"]).json
                assert g["state"] == "held", g
                h = g["holder"]
                assert h["fencing_token"] == l["fencing_token"] and h["owner"] == l["owner"]
                assert h["metadata"] == l["metadata"]
                # Its deadline was written on another clock: the lease gets its TTL again
                # from the restore, never less than it had left, plus a spread by token of
                # at most 2 s.
                assert 60000 - elapsed_ms - 200 <= h["expires_in_ms"] <= 62000, (h, elapsed_ms)
            assert c.get("gone").json["state"] == "free"
            assert exact in c.get("exact").body  # as written, through blob storage
            rn = c.renew(leases[0]["resource"], leases[0]["lease_id"])
            r = c.acquire("new", owner="n")
            if mode == "async":
                # The mirror may have missed the last breaks and grants: during the grace
                # nothing is granted, and no holder renews a lease that may be another's.
                assert rn.status == 503 and rn.code == "unavailable", rn
                assert r.status == 503 and r.code == "unavailable", r
                assert 1 <= int(r.header("retry-after")) <= 3
                assert "grace" in readyz(c).json["reason"]
                time.sleep(3.1)
                rn = c.renew(leases[0]["resource"], leases[0]["lease_id"])
                r = c.acquire("new", owner="n")
            # The holders still hold: renew works (after the grace from an async mirror).
            assert rn.status == 200, rn
            assert rn.json["fencing_token"] == leases[0]["fencing_token"]
            assert r.status == 200, r
            assert readyz(c).status == 200
            # No token is handed out twice: the new one is above every reservation.
            assert r.json["fencing_token"] > top
            c.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_async_keeps_answering_through_a_blob_outage_and_catches_up(azurite):
    name = container()
    data = tempfile.mkdtemp(prefix="mutexd-outage-")
    try:
        with Server(data_dir=data, args=mirror_args(azurite, name, "async")) as s:
            c = s.client()
            stop = threading.Event()
            result = {}
            t = threading.Thread(target=lambda: result.setdefault("n", load(s, 200, 10 ** 9,
                                                                            threads=4, stop=stop)))
            t.start()
            time.sleep(1)
            azurite.pause()
            try:
                t0 = time.monotonic()
                time.sleep(10)
                lag = readyz(c).json["mirror"]
                assert readyz(c).status == 200  # async: still ready, the lag shows
                assert lag["lag_changes"] > 100 and lag["lag_ms"] > 5000, lag
            finally:
                azurite.resume()
            time.sleep(1)
            stop.set()
            t.join(60)
            assert result["n"] > 1000  # writes went on during the outage
            assert wait_caught_up(c, timeout=60)
            assert readyz(c).status == 200  # still the container's owner, not fenced
            assert "mutexd_mirror_changes_dropped_total 0" in c.request("GET", "/metrics").body
            rows, seq = store_rows(data)
            cont, last, _, _ = container_rows(azurite, name)
            assert last == seq
            assert_same(cont, rows)
            c.close()
    finally:
        azurite.resume()
        shutil.rmtree(data, ignore_errors=True)


def test_async_queue_keeps_its_bound_through_an_outage_and_loses_nothing(azurite):
    """Through a long outage an async mirror queues at most its bound; what does not fit
    is left to the next snapshot, and nothing is appended past the gap meanwhile: once the
    blob store is back, the container holds every change."""
    name = container()
    data = tempfile.mkdtemp(prefix="mutexd-bound-")
    try:
        with Server(data_dir=data, args=mirror_args(azurite, name, "async"),
                    env={"MUTEXD_FAULT_MIRROR_QUEUE_MAX": "50"}) as s:
            c = s.client()
            assert c.acquire("before", owner="x").status == 200
            assert wait_caught_up(c)
            azurite.pause()
            try:
                for i in range(300):
                    assert c.acquire("during/%d" % i, owner="x", ttl_ms=60000).status == 200
                lag = readyz(c).json["mirror"]
                assert lag["lag_changes"] <= 50, lag
                body = c.request("GET", "/metrics").body
                left = re.search(r"^mutexd_mirror_changes_left_to_snapshot_total (\d+)$", body,
                                 re.M)
                assert left and int(left.group(1)) >= 250, left
            finally:
                azurite.resume()
            assert c.acquire("after", owner="x").status == 200
            assert wait_caught_up(c, timeout=60)
            rows, seq = store_rows(data)
            cont, last, _, _ = container_rows(azurite, name)
            assert last == seq
            assert_same(cont, rows)
            assert len([r for r in rows if r.startswith("during/")]) == 300
            c.close()
    finally:
        azurite.resume()
        shutil.rmtree(data, ignore_errors=True)


def test_sync_refuses_writes_during_a_blob_outage(azurite):
    name = container()
    data = tempfile.mkdtemp(prefix="mutexd-sync-")
    try:
        with Server(data_dir=data, args=mirror_args(azurite, name, "sync")) as s:
            c = s.client(timeout=60)
            a = c.acquire("s", owner="a", ttl_ms=60000).json
            azurite.pause()
            try:
                # The first writes find out (within the sync timeout); then the gate is shut.
                # Several at once, so that some answers land in a commit batch after their
                # record's: each must still wait for the blob, and none may be answered 200.
                answers = [None] * 16

                def write(i):
                    ci = s.client(timeout=60)
                    answers[i] = ci.acquire("s2-%d" % i, owner="b", ttl_ms=60000).status
                    ci.close()
                threads = [threading.Thread(target=write, args=(i,)) for i in range(16)]
                for t in threads:
                    t.start()
                r = c.acquire("s2", owner="b", ttl_ms=60000)
                for t in threads:
                    t.join()
                assert r.status == 503, r
                assert answers == [503] * 16, answers
                t0 = time.monotonic()
                r = c.acquire("s3", owner="b")
                assert r.status == 503 and "unreachable" in r.json["error"]["reason"], r
                assert time.monotonic() - t0 < 1
                assert c.renew("s", a["lease_id"]).status == 503
                assert c.get("s").status == 200  # reads go on
                rz = readyz(c)
                assert rz.status == 503 and "unreachable" in rz.json["reason"]
            finally:
                azurite.resume()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and c.acquire("s3", owner="b").status != 200:
                time.sleep(0.2)
            assert c.get("s3").json["state"] == "held"
            assert readyz(c).status == 200
            rows, seq = store_rows(data)
            cont, last, _, _ = container_rows(azurite, name)
            assert last == seq
            assert_same(cont, rows)
            c.close()
    finally:
        azurite.resume()
        shutil.rmtree(data, ignore_errors=True)


def test_sync_crash_during_a_blob_outage_loses_no_answered_change(azurite):
    """Writers run; Azurite freezes; the server is killed with SIGKILL and its disk lost
    while Azurite is still frozen. Whatever was not appended before the freeze is gone,
    so a server rebuilt from the container must still hold every lease answered 200."""
    name = container()
    data = tempfile.mkdtemp(prefix="mutexd-sync-crash-")
    granted, lock, stop = [], threading.Lock(), threading.Event()
    try:
        s = Server(data_dir=data, args=mirror_args(azurite, name, "sync")).start()

        def record(c, resource, owner):
            """One acquire; a lease answered 200 goes into `granted`. False once the
            server is gone (killed mid-request)."""
            try:
                r = c.acquire(resource, owner=owner, ttl_ms=120000)
            except Exception:
                return False
            if r.status == 200:
                with lock:
                    granted.append(r.json)
            return True

        def writer(k):
            c, i = s.client(timeout=30), 0
            while not stop.is_set() and record(c, "w%d/%d" % (k, i), "w%d" % k):
                i += 1
        threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        azurite.pause()
        # Answers in flight meet the freeze; then, the writers all waiting on it, a burst
        # of new changes at once reaches an idle store.
        time.sleep(0.1)
        burst = [threading.Thread(target=record,
                                  args=(s.client(timeout=30), "burst/%d" % k, "b"))
                 for k in range(16)]
        for t in burst:
            t.start()
        time.sleep(random.uniform(0.2, 0.5))
        with lock:
            before_kill = len(granted)
        s.kill()
        stop.set()
        for t in threads + burst:
            t.join(30)
        shutil.rmtree(data)  # the disk is lost
        azurite.resume()
        assert before_kill >= 20, before_kill  # the load did run
        azurite.break_lease(name, "owner")  # the dead server's lease on the container

        with Server(data_dir=data, args=mirror_args(azurite, name, "sync")) as s2:
            c = s2.client()
            missing = []
            for g in granted:
                r = c.get(g["resource"])
                assert r.status == 200, r
                if (r.json.get("holder") or {}).get("fencing_token") != g["fencing_token"]:
                    missing.append(g["resource"])
            assert not missing, "%d of %d answered leases lost: %s" % (
                len(missing), len(granted), missing[:5])
            c.close()
    finally:
        stop.set()
        azurite.resume()
        shutil.rmtree(data, ignore_errors=True)


def test_sync_answers_do_not_wait_for_a_change_whose_commit_failed(azurite):
    """A change whose local commit failed is in neither the store nor the mirror: the
    answers that follow on that resource have nothing to wait for."""
    name = container()
    with Server(args=mirror_args(azurite, name, "sync"),
                env={"MUTEXD_FAULT_COMMIT": "1"}) as s:
        c = s.client()
        assert c.acquire("x", owner="o").status == 503  # commit 1 fails
        r = c.get("x")
        assert r.status == 200 and r.json["state"] == "free", r
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and c.acquire("x", owner="o").status != 200:
            time.sleep(0.1)
        r = c.get("x")
        assert r.status == 200 and r.json["holder"]["owner"] == "o", r
        assert wait_caught_up(c)
        c.close()
    _, last, _, _ = container_rows(azurite, name)
    assert last >= 1


def run_second_server(azurite, name, takeover_ms):
    """Runs a second server on the container `name` until it exits; its result."""
    other = tempfile.mkdtemp(prefix="mutexd-second-")
    try:
        return subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", other] +
                              mirror_args(azurite, name, "async",
                                          "--mirror-takeover-ms", str(takeover_ms)),
                              capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(other, ignore_errors=True)


def test_a_second_server_on_the_container_is_refused(azurite):
    name = container()
    with Server(args=mirror_args(azurite, name)) as a:
        c = a.client()
        c.acquire("x", owner="a")
        out = run_second_server(azurite, name, 2000)
        assert out.returncode == 1
        assert "owned by another mutexd" in out.stderr
        assert c.acquire("y", owner="a").status == 200  # the first one goes on
        assert wait_caught_up(c)
        c.close()
    cont, _, _, journals = container_rows(azurite, name)
    assert set(cont) == {"x", "y"}
    assert len({j.split("/")[1] for j in journals}) == 1  # one writer's generation


def test_the_takeover_wait_is_the_one_given_not_whole_seconds(azurite):
    """A server that finds the container's owner lease held waits --mirror-takeover-ms for
    it, no longer: its retries once a second must not carry it past the deadline (a
    server group's standby waits 1 ms, and stayed out of the group a whole second)."""
    name = container()
    with Server(args=mirror_args(azurite, name)) as a:
        out = run_second_server(azurite, name, 1500)
        assert out.returncode == 1
        assert "owned by another mutexd" in out.stderr
        stamps = {}
        for line in out.stderr.splitlines():
            m = re.match(r"ts=(\S+)Z ", line)
            if m and ("waiting for it to lapse" in line or "owned by another mutexd" in line):
                t = datetime.datetime.fromisoformat(m.group(1))
                stamps.setdefault("wait" if "lapse" in line else "gave_up", t)
        waited = (stamps["gave_up"] - stamps["wait"]).total_seconds()
        # From the first refusal to giving up: the 1.5 s, less the first try's round trip.
        assert 1.3 <= waited < 1.8, (waited, out.stderr)
        assert a.client().acquire("y", owner="a").status == 200  # the owner goes on


def test_a_server_whose_container_was_taken_is_fenced(azurite):
    name = container()
    with Server(args=mirror_args(azurite, name)) as a:
        ca = a.client()
        ca.acquire("before", owner="a", ttl_ms=60000)
        assert wait_caught_up(ca)
        # An operator breaks the owner lease and starts another server on the container.
        azurite.break_lease(name, "owner")
        with Server(args=mirror_args(azurite, name, "async", "--restore-grace-ms", "0")) as b:
            cb = b.client()
            assert cb.get("before").json["state"] == "held"  # restored from a's mirror
            assert cb.acquire("after", owner="b").status == 200
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and readyz(ca).status == 200:
                time.sleep(0.2)
            r = readyz(ca)
            assert r.status == 503 and "another server" in r.json["reason"], r
            r = ca.acquire("late", owner="a")
            assert r.status == 503, r  # a no longer writes anything
            assert wait_caught_up(cb)
            cont, _, _, journals = container_rows(azurite, name)
            assert set(cont) == {"before", "after"}
            cb.close()
        ca.close()


def test_a_stale_data_dir_does_not_overwrite_the_container(azurite):
    name = container()
    first = tempfile.mkdtemp(prefix="mutexd-stale-")
    second = tempfile.mkdtemp(prefix="mutexd-newer-")
    try:
        with Server(data_dir=first, args=mirror_args(azurite, name)) as s:
            s.client().acquire("one", owner="a")
        with Server(data_dir=second, args=mirror_args(azurite, name, "async",
                                                      "--restore-grace-ms", "0")) as s:
            s.client().acquire("two", owner="b")  # generation 2, restored from the first
        out = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", first] +
                             mirror_args(azurite, name), capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 1
        assert "newer than this data directory" in out.stderr
        cont, _, _, _ = container_rows(azurite, name)
        assert set(cont) == {"one", "two"}
    finally:
        shutil.rmtree(first, ignore_errors=True)
        shutil.rmtree(second, ignore_errors=True)


def test_mirror_options_are_checked():
    out = subprocess.run([BIN, "--mirror", "sync"], capture_output=True, text=True,
                         env={k: v for k, v in os.environ.items()
                              if "CONNECTION_STRING" not in k})
    assert out.returncode == 2 and "needs --blob-connection-string" in out.stderr
    out = subprocess.run([BIN, "--mirror", "sometimes"], capture_output=True, text=True)
    assert out.returncode == 2


def test_standard_azure_variable_turns_on_an_async_mirror(azurite):
    name = container()
    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
           "MUTEXD_BLOB_CONTAINER": name}
    with Server(env=env) as s:
        c = s.client()
        c.acquire("via-env", owner="o")
        assert readyz(c).json["mirror"]["mode"] == "async"
        assert wait_caught_up(c)
        c.close()
    cont, _, _, _ = container_rows(azurite, name)
    assert "via-env" in cont


def test_a_paused_owner_cannot_append_after_the_container_was_taken(azurite):
    """The fence is in the storage: a sync server that checked its lease and then stalled
    before its append (MUTEXD_FAULT_APPEND_PAUSE_MS) resumes after another server took the
    container. Its append is refused by the blob store, its client is not told 200, and the
    new owner never heard of the change. The new owner is itself held (by the same seam)
    after it read the container and before it deletes the old journal, so that nothing but
    the seal can refuse the late append."""
    name = container()
    b_dir = tempfile.mkdtemp(prefix="mutexd-taker-")
    with Server(args=mirror_args(azurite, name, "sync"),
                env={"MUTEXD_FAULT_APPEND_PAUSE_MS": "4000"}) as a:
        ca = a.client()
        assert ca.acquire("before", owner="a", ttl_ms=60000).status == 200
        open(os.path.join(a.data_dir, "fault-pause-append"), "w").close()
        answer = {}

        def late():
            c = a.client(timeout=60)
            answer["r"] = c.acquire("late", owner="a", ttl_ms=60000)
            c.close()

        t = threading.Thread(target=late)
        t.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any("pausing before an append" in line
                                                      for line in a.lines):
            time.sleep(0.05)
        assert any("pausing before an append" in line for line in a.lines), a.lines[-20:]
        # Meanwhile an operator breaks the owner lease and another server takes over.
        azurite.break_lease(name, "owner")
        open(os.path.join(b_dir, "fault-pause-append"), "w").close()
        with Server(data_dir=b_dir, args=mirror_args(azurite, name, "sync"),
                    env={"MUTEXD_FAULT_APPEND_PAUSE_MS": "8000"}) as b:
            t.join(timeout=60)
            r = answer["r"]
            assert r.status == 503, r  # the append was refused
            cb = b.client()
            assert cb.get("before").json["state"] == "held"
            assert cb.get("late").json["state"] != "held"
            assert cb.acquire("late", owner="b").status == 200  # nobody holds it
            assert readyz(ca).status == 503
            assert any("mirror: stopped" in line for line in a.lines), "\n".join(a.lines[-20:])
            cb.close()
        ca.close()


def test_sets_of_several_resources_are_whole_after_a_restore(azurite):
    """Sets granted in one commit each, then the disk is lost: the restore from the
    container brings every set back whole, with its tokens, and hands out none again."""
    name = container()
    data = tempfile.mkdtemp(prefix="mutexd-restore-")
    try:
        with Server(data_dir=data, args=mirror_args(azurite, name, "sync")) as s:
            c = s.client()
            sets = []
            for i in range(30):
                names = ["set/%d/%s" % (i, k) for k in "abcd"]
                r = c.request("POST", "/v1/acquire", {"resources": names, "owner": "o%d" % i,
                                                      "ttl_ms": 60000, "metadata": {"i": i}})
                assert r.status == 200, r
                sets.append(r.json["leases"])
            c.close()
        shutil.rmtree(data)
        with Server(data_dir=data, args=mirror_args(azurite, name, "sync")) as s:
            c = s.client()
            for leases in sets:
                for x in leases:
                    h = c.get(x["resource"]).json["holder"]
                    assert h and h["fencing_token"] == x["fencing_token"], (x, h)
                    assert h["metadata"] == x["metadata"]
                names = [x["resource"] for x in leases]
                r = c.request("POST", "/v1/renew", {"resources": names,
                                                    "lease_id": leases[0]["lease_id"]})
                assert r.status == 200, r
            top = max(x["fencing_token"] for ls in sets for x in ls)
            r = c.request("POST", "/v1/acquire", {"resources": ["new/a", "new/b"], "owner": "n"})
            assert r.status == 200 and min(x["fencing_token"] for x in r.json["leases"]) > top, r
            c.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
