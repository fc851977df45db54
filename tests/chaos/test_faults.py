"""I/O faults in the store: a commit that fails gets its requests 503, the state in memory
falls back to what is durable, /readyz says why, and the server recovers by itself when
the disk does. Through the fault seam (MUTEXD_FAULT_COMMIT fails chosen commits' fsync)
and through a real full filesystem (a small tmpfs)."""

import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from harness import Server


def wait_ready(c, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = c.request("GET", "/readyz")
        if r.status == 200:
            return True
        time.sleep(0.05)
    return False


def metric(c, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), c.request("GET", "/metrics").body, re.M)
    return int(m.group(1)) if m else None


def test_failed_commits_answer_503_and_roll_back(tmp_path):
    # Commits 3 and 4 fail (each write request below is one commit).
    data = str(tmp_path / "data")
    with Server(data_dir=data, env={"MUTEXD_FAULT_COMMIT": "3:2"}) as s:
        c = s.client()
        a = c.acquire("f1", owner="a", ttl_ms=60000).json          # commit 1
        b = c.acquire("f2", owner="b", ttl_ms=60000).json          # commit 2
        r = c.release("f1", a["lease_id"])                          # commit 3: fails
        assert r.status == 503 and r.code == "unavailable", r
        assert r.header("retry-after")
        assert "commit" in r.json["error"]["reason"]
        ready = c.request("GET", "/readyz")
        assert ready.status == 503 and "store commit failed" in ready.json["reason"], ready
        # Not released: memory went back to what is durable.
        g = c.get("f1").json
        assert g["state"] == "held" and g["holder"]["fencing_token"] == a["fencing_token"]
        r = c.acquire("f3", owner="c", ttl_ms=60000)                # commit 4: fails
        assert r.status == 503, r
        assert c.get("f3").json["state"] == "free"
        assert wait_ready(c)  # commit 5 (a probe, or the next write) succeeds
        assert c.release("f1", a["lease_id"]).status == 200
        n = c.acquire("f3", owner="c").json
        assert n["fencing_token"] > b["fencing_token"]
        assert metric(c, "mutexd_store_errors_total") == 2
        c.close()
    # What was acknowledged survived; nothing that was answered 503 did.
    with Server(data_dir=data) as s2:
        c = s2.client()
        assert c.get("f1").json["state"] == "free"
        assert c.get("f2").json["holder"]["fencing_token"] == b["fencing_token"]
        assert c.get("f3").json["holder"]["fencing_token"] == n["fencing_token"]
        c.close()


def test_server_recovers_without_traffic():
    with Server(env={"MUTEXD_FAULT_COMMIT": "1"}) as s:
        c = s.client()
        assert c.acquire("x", owner="o").status == 503
        assert c.request("GET", "/readyz").status == 503
        assert wait_ready(c, timeout=5)  # the writer's own probe found the disk back
        assert c.acquire("x", owner="o").status == 200
        c.close()


def test_waiter_granted_in_a_failed_commit_is_answered_503():
    with Server(env={"MUTEXD_FAULT_COMMIT": "2"}) as s:
        import threading
        c = s.client()
        a = c.acquire("w", owner="a", ttl_ms=60000).json  # commit 1
        out = {}

        def waiter():
            w = s.client()
            out["r"] = w.acquire("w", owner="b", wait_ms=10000)
            w.close()

        t = threading.Thread(target=waiter)
        t.start()
        while c.get("w").json["waiters"] != 1:
            time.sleep(0.01)
        assert c.release("w", a["lease_id"]).status == 503  # commit 2: release + grant fail
        t.join(10)
        assert out["r"].status == 503  # the waiter is not told it holds a lease
        g = c.get("w").json
        assert g["state"] == "held" and g["holder"]["owner"] == "a"
        c.close()


def can_mount():
    if os.geteuid() != 0:
        return False
    d = tempfile.mkdtemp()
    ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d],
                        capture_output=True).returncode == 0
    if ok:
        subprocess.run(["umount", d])
    os.rmdir(d)
    return ok


@pytest.mark.skipif(not can_mount(), reason="mounting a tmpfs needs root and CAP_SYS_ADMIN")
def test_full_filesystem():
    mnt = tempfile.mkdtemp(prefix="mutexd-tinyfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt], check=True)
    try:
        data = os.path.join(mnt, "data")
        with Server(data_dir=data) as s:
            c = s.client()
            kept = [c.acquire("keep/%d" % i, owner="o", ttl_ms=600000).json for i in range(20)]
            # Fill the filesystem.
            with open(os.path.join(mnt, "filler"), "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            # Writes grow the log until it cannot: then 503, and nothing half-done.
            failed = None
            for i in range(5000):
                r = c.acquire("fill/%d" % i, owner="o" * 200, ttl_ms=600000,
                              metadata={"pad": "x" * 3000})
                if r.status == 503:
                    failed = i
                    break
                assert r.status == 200, r
            assert failed is not None, "the disk never filled up"
            assert c.get("fill/%d" % failed).json["state"] == "free"
            ready = c.request("GET", "/readyz")
            assert ready.status == 503 and "full" in ready.json["reason"], ready
            assert c.request("GET", "/healthz").status == 200  # still serving reads
            assert c.get("keep/0").json["state"] == "held"
            os.unlink(os.path.join(mnt, "filler"))
            assert wait_ready(c, timeout=10)
            r = c.acquire("fill/%d" % failed, owner="o")
            assert r.status == 200, r
            for k in kept[:5]:
                assert c.renew(k["resource"], k["lease_id"]).status == 200
            c.close()
    finally:
        subprocess.run(["umount", "-l", mnt])
        shutil.rmtree(mnt, ignore_errors=True)
