"""A client of the fenced workload (test_fenced_workload.py), run as a process of its own so
that a test can stop it (SIGSTOP) while it holds its lease: it takes the lease on one
resource, then increments a counter in a guarded store (SQLite) by reading it, working a
while and writing it back, then releases the lease. Each lease operation goes into a history
(history.py), each increment the store acknowledged into a file, a line each.

The guarded store refuses an operation whose fencing token is lower than the highest it has
seen, on the read as on the write: a holder stopped past its TTL that wakes and writes
with its old token is refused, as one that wakes and reads. With --no-check it refuses
nothing (the control): such a holder writes back the value it read before it was stopped,
and the increments made meanwhile are lost.

    python3 fenced_client.py --port P --store FILE --name c0 --seconds 8 \
        --history FILE --acks FILE [--no-check]

It prints "holding <token>" when granted and "read <token> <value>" once it has read, the
moment a test stops it to make it an old holder.
"""

import argparse
import http.client
import json
import os
import sqlite3
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from history import Recorder  # noqa: E402

RESOURCE = "fenced-counter"


class Refused(Exception):
    pass


class GuardedCounter:
    """A counter in a SQLite file with the highest fencing token it has seen."""

    def __init__(self, path, check=True):
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.check = check
        self.db.execute("CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, "
                        "value INTEGER NOT NULL, top INTEGER NOT NULL)")
        self.db.execute("INSERT OR IGNORE INTO counter VALUES (1, 0, 0)")

    def _fenced(self, token, write=None):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            value, top = self.db.execute("SELECT value, top FROM counter WHERE id = 1").fetchone()
            if self.check and token < top:
                raise Refused("token %d below %d" % (token, top))
            if write is not None:
                value = write
            self.db.execute("UPDATE counter SET value = ?, top = ? WHERE id = 1",
                            (value, max(top, token)))
            self.db.execute("COMMIT")
            return value
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def read(self, token):
        return self._fenced(token)

    def write(self, token, value):
        self._fenced(token, write=value)

    def value(self):
        return self.db.execute("SELECT value FROM counter WHERE id = 1").fetchone()[0]


def request(port, path, body, timeout):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type":
                                                               "application/json"})
        r = c.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)
    except (OSError, http.client.HTTPException, ValueError):
        return None, None
    finally:
        c.close()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--store", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--history", required=True)
    ap.add_argument("--acks", required=True)
    ap.add_argument("--ttl-ms", type=int, default=1000)
    ap.add_argument("--work", type=float, default=0.25)
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args(argv)
    store = GuardedCounter(a.store, check=not a.no_check)
    rec = Recorder()
    acks = open(a.acks, "a")
    end = time.monotonic() + a.seconds
    path = "/v1/resources/%s/" % RESOURCE
    try:
        while time.monotonic() < end:
            lid = str(uuid.uuid4())
            body = {"owner": a.name, "ttl_ms": a.ttl_ms, "wait_ms": 2000, "lease_id": lid}
            op = rec.begin(a.name, "acquire", [RESOURCE], lease_id=lid, owner=a.name,
                           ttl_ms=a.ttl_ms, wait_ms=2000)
            st, js = request(a.port, path + "acquire", body, timeout=4)
            rec.end(op, st, js)
            if st != 200:
                time.sleep(0.1)
                continue
            token = js["fencing_token"]
            print("holding %d" % token, flush=True)
            try:
                v = store.read(token)
                print("read %d %d" % (token, v), flush=True)
                time.sleep(a.work)  # the work: a stop here makes an old holder
                store.write(token, v + 1)
                acks.write(json.dumps({"client": a.name, "token": token, "value": v + 1,
                                       "at": time.monotonic()}) + "\n")
                acks.flush()
            except Refused as e:
                print("refused %d: %s" % (token, e), flush=True)
            op = rec.begin(a.name, "release", [RESOURCE], lease_id=lid)
            st, js = request(a.port, path + "release", {"lease_id": lid}, timeout=4)
            rec.end(op, st, js)
    finally:
        rec.save(a.history)
        acks.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
