"""A step of the serving server's wall clock moves no lease deadline.

A resource that rests (its actor deactivated after two idle seconds) and is loaded again
gets back the monotonic deadline it had: the store keeps deadlines on the lease clock
(common/clock.h), which is the monotonic clock within one process. The server's wall clock
is stepped through libfaketime's timestamp file (read again on every call), as NTP's step,
a resumed VM or `date -s` would step it; the monotonic clock is left alone. What is checked
is seen from the clients' side, on this machine's monotonic clock: the contender is never
granted before the holder's lease could have run out (the holder's send time plus its
TTL), and not much after either.
"""

import os
import threading
import time

import pytest

from ha_group import FAKETIME_ENV, FAKETIME_LIB
from harness import Server

TTL_MS = 5000
STEP_S = 3


def stepped_server():
    s = Server(args=["--min-ttl-ms", "1000"])
    stamp = os.path.join(s.data_dir, "faketime")
    with open(stamp, "w") as f:
        f.write("+0\n")
    s.env.update(dict(FAKETIME_ENV, FAKETIME_TIMESTAMP_FILE=stamp))
    s.env.pop("FAKETIME", None)
    return s.start(), stamp


def step(stamp, seconds):
    with open(stamp + ".new", "w") as f:
        f.write("%+d\n" % seconds)
    os.replace(stamp + ".new", stamp)


# Heavy, as the other tests that set a server's clock: libfaketime's preload cannot run
# under the sanitizer builds, whose runtime must come first.
@pytest.mark.heavy
@pytest.mark.skipif(not os.path.exists(FAKETIME_LIB), reason="libfaketime is not installed")
@pytest.mark.parametrize("direction", [+1, -1], ids=["ahead", "back"])
def test_a_wall_clock_step_moves_no_deadline(direction):
    s, stamp = stepped_server()
    try:
        holder, contender = s.client(), s.client()
        sent = time.monotonic()
        r = holder.acquire("step/a", owner="H", ttl_ms=TTL_MS)
        assert r.status == 200, r
        token = r.json["fencing_token"]
        time.sleep(1.0)
        step(stamp, direction * STEP_S)
        # Past the actor's two idle seconds: the resource is loaded again from the store.
        time.sleep(2.5)
        g = contender.get("step/a").json
        left = TTL_MS - (time.monotonic() - sent) * 1000
        assert g["state"] == "held", g
        assert left - 300 <= g["holder"]["expires_in_ms"] <= left + 300, (g, left)
        answer = {}

        def contend():
            answer["r"] = contender.acquire("step/a", owner="C", ttl_ms=TTL_MS, wait_ms=15000)
            answer["at"] = time.monotonic()

        t = threading.Thread(target=contend)
        t.start()
        t.join(20)
        r = answer["r"]
        assert r.status == 200 and r.json["fencing_token"] > token, r
        early = sent + TTL_MS / 1000.0 - answer["at"]
        assert early <= 0, "granted %.2f s before the holder's lease could end" % early
        assert -early < 1.0, "granted %.2f s after the holder's lease ended" % -early
    finally:
        s.stop()
