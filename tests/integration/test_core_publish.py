"""/metrics on every server of a group while the container changes hands: a standby that
takes over starts its core (the store, the mirror, the actors, the alarms) on the main
thread while HTTP threads render /metrics from it. Under the ThreadSanitizer build (the
make test stage "integration tests under TSan") a race between the two makes the server
exit non-zero, which fails the test when the servers are stopped; in every build the pages
must stay whole."""

import threading
import time

import pytest

from azure import Azurite
from ha_group import SLOW, groups  # noqa: F401
from harness import Client


@pytest.fixture(scope="module")
def azurite():
    a = Azurite()
    yield a
    a.stop()


def test_metrics_during_repeated_takeovers_are_whole(groups):  # noqa: F811
    g = groups(n=3, extra=["--failover-after-ms", "1000"]).start()
    stop = threading.Event()
    pages, broken = [0], []

    def scrape(i):
        while not stop.is_set():
            s = g.servers[i]
            try:
                c = Client(s.host, s.port, timeout=5, retry=False)
                r = c.request("GET", "/metrics")
                c.close()
            except (OSError, AttributeError, TypeError):
                time.sleep(0.02)  # restarting
                continue
            if r.status == 200:
                pages[0] += 1
                if "mutexd_http_requests_total" not in r.body:
                    broken.append(r.body[-200:])

    threads = [threading.Thread(target=scrape, args=(i,)) for i in range(3) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            races = [l for s in g.servers + g.retired for l in s.lines if "ThreadSanitizer" in l]
            assert not races, "\n".join(races[:5]) + "\n" + g.logs(n=60)
            active = g.active(timeout=30 * SLOW)
            active.kill()
            new = g.active(timeout=30 * SLOW)
            assert new is not active
            g.restart(active)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert pages[0] > 50, pages
    assert not broken, broken[:2]
