#!/usr/bin/python3
"""bench/expiry.py: how late a waiter gets a lease after its holder's TTL runs out.

For each of KEYS resources at once (their starts spread over one TTL), ROUNDS times: a
holder acquires with --ttl-ms and never renews or releases; a waiter then asks with wait_ms
and blocks in the server's queue. The
lateness of one hand-off, as the waiter sees it, is

    (wall-clock time the waiter's answer arrived) - (the holder's acquired_at + TTL)

the holder's deadline as the server stated it (whole milliseconds, so up to 1 ms more),
to the grant in the waiter's hands: the expiry, the grant's commit and fsync, and the
answer's way back, on the same machine's clock. Two more views beside it: a coarser upper
bound that also counts the holder's own acquire,

    (time the waiter's answer arrived) - (time the holder's acquire was sent + TTL)

and the server's own, the two leases' acquired_at apart, less the TTL. Prints one JSON
object: {"count", "p50_ms", "p99_ms", "max_ms" (from the deadline), "sent_p50_ms",
"sent_p99_ms", "sent_max_ms" (from the send), "server_p50_ms", "server_max_ms", "errors"}.

With --together every key starts at once and the hand-offs come in bursts of KEYS: the
server's own figure stays honest there, the waiter's side then mostly measures this
client's threads taking turns at one interpreter lock.

    bench/expiry.py --port 8080 [--keys 50] [--rounds 4] [--ttl-ms 1000] [--together]
"""

import argparse
import calendar
import http.client
import json
import threading
import time
import uuid


def post(conn, path, body):
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read() or b"null")


def iso_ms(t):
    """Milliseconds since the epoch of the server's "2026-01-02T03:04:05.678Z"."""
    return calendar.timegm(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) * 1000 + int(t[20:23])


def one_key(port, key, rounds, ttl_ms, start_s, out, bound, server, errors, lock):
    holder = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    waiter = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    path = "/v1/resources/" + key
    time.sleep(start_s)
    for _ in range(rounds):
        sent = time.monotonic()
        st, h = post(holder, path + "/acquire", {"owner": "holder", "ttl_ms": ttl_ms})
        if st != 200:
            with lock:
                errors.append("holder: %d %s" % (st, h))
            return
        st, w = post(waiter, path + "/acquire",
                     {"owner": "waiter", "ttl_ms": ttl_ms, "wait_ms": ttl_ms + 5000})
        got, got_wall = time.monotonic(), time.time()
        if st != 200 or w["fencing_token"] <= h["fencing_token"]:
            with lock:
                errors.append("waiter: %d %s" % (st, w))
            return
        with lock:
            out.append(got_wall * 1000.0 - (iso_ms(h["acquired_at"]) + ttl_ms))
            bound.append((got - sent) * 1000.0 - ttl_ms)
            server.append(iso_ms(w["acquired_at"]) - iso_ms(h["acquired_at"]) - ttl_ms)
        post(waiter, path + "/release", {"lease_id": w["lease_id"]})
    holder.close()
    waiter.close()


def pct(xs, p):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))], 3) if xs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--ttl-ms", type=int, default=1000)
    ap.add_argument("--together", action="store_true",
                    help="start every key at once: their hand-offs come in bursts")
    a = ap.parse_args()
    prefix = "expiry-" + uuid.uuid4().hex[:8] + "-"
    out, bound, server, errors, lock = [], [], [], [], threading.Lock()
    # The keys start spread over one TTL, so that their hand-offs come one by one, as
    # leases taken at different times run out: a burst of simultaneous answers would
    # measure this client's threads (one interpreter lock) more than the server.
    threads = [threading.Thread(target=one_key,
                                args=(a.port, prefix + str(i), a.rounds, a.ttl_ms,
                                      0 if a.together else i * a.ttl_ms / 1000.0 / a.keys,
                                      out, bound, server,
                                      errors, lock))
               for i in range(a.keys)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"count": len(out), "p50_ms": pct(out, 50), "p99_ms": pct(out, 99),
                      "max_ms": round(max(out), 3) if out else None,
                      "sent_p50_ms": pct(bound, 50), "sent_p99_ms": pct(bound, 99),
                      "sent_max_ms": round(max(bound), 3) if bound else None,
                      "server_p50_ms": pct(server, 50), "server_max_ms": max(server, default=None),
                      "errors": errors[:5]}))


if __name__ == "__main__":
    main()
