#!/usr/bin/env python3
"""Leader election with mutexd: run several copies of this script; exactly one of them
leads at a time, and when it stops (or dies) another takes over.

The leader prints a line every second; the others print that they could not acquire the
lease and when they will try again. Each line names the process (its PID, and the host
name, which tells containers apart: in each container the worker is PID 1), and the leader's
lines carry its fencing token. The leader checks that its lease still holds (on the clock,
not only as the last renewal saw it) right before each of its actions. SIGTERM or Ctrl-C releases the lease (so that
another process takes over at once) and exits 0.

Configuration, by environment:

    MUTEXD_URL        the server, or several comma-separated (default http://127.0.0.1:8080)
    MUTEXD_RESOURCE   the resource to lead (default leader-election/demo)
    MUTEXD_TTL_MS     the lease's TTL in ms (default 15000); renewed every third of it
    MUTEXD_RETRY_S    seconds between two tries of a follower (default 5)
    MUTEXD_TOKEN      a bearer token, if the server asks for one
    MUTEXD_CA_FILE    a CA file to verify an https:// server with
"""

import os
import signal
import socket
import sys
import threading
import time

try:
    import mutexd
except ImportError:  # run from a checkout: use the package beside this example
    HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
    import mutexd

BEAT_S = 1.0
HOST = socket.gethostname()


def say(text, detail=""):
    print("[%s] This process (%d) %s Host %s%s." % (
        time.strftime("%H:%M:%S"), os.getpid(), text, HOST, detail), flush=True)


def lead(stop_event):
    """The leader's job: runs until stop_event is set (lease lost, or shutting down)."""
    # is_set() compares the clock with the lease's deadline: a leader paused past it
    # (SIGSTOP, a frozen VM) stops here instead of acting once more.
    while not stop_event.is_set():
        # Here a real leader would do its work, passing stop_event.fencing_token to the
        # storage it writes to.
        say("is currently the leader.", ", fencing token %d" % stop_event.fencing_token)
        # wait() returns True as soon as it must stop.
        if stop_event.wait(BEAT_S):
            break
    if stop_event.lease.lost.is_set():
        say("lost the lease (%s)." % stop_event.lease.error)


def standby(error, retry_s):
    say("could not acquire lease. Retrying in %g seconds." % retry_s)
    if not isinstance(error, mutexd.LeaseHeld):
        print("  (%s)" % error, file=sys.stderr, flush=True)


def main():
    url = os.environ.get("MUTEXD_URL", "http://127.0.0.1:8080")
    resource = os.environ.get("MUTEXD_RESOURCE", "leader-election/demo")
    ttl = int(os.environ.get("MUTEXD_TTL_MS", "15000")) / 1000.0
    retry = float(os.environ.get("MUTEXD_RETRY_S", "5"))
    token = os.environ.get("MUTEXD_TOKEN") or None
    ca_file = os.environ.get("MUTEXD_CA_FILE") or None

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    with mutexd.Client(url, token=token, ca_file=ca_file) as client:
        try:
            client.run_when_leader(resource, lead, ttl=ttl, retry_interval=retry,
                                   stop=stop, on_standby=standby)
        except mutexd.MutexdError as exc:
            print("error: %s" % exc, file=sys.stderr, flush=True)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
