"""The leader-election example (clients/examples/python/leader.py), as two processes."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

from mutexd_testserver import ROOT

EXAMPLE = os.path.join(ROOT, "clients", "examples", "python", "leader.py")
HOST = re.escape(socket.gethostname())
LEADER = re.compile(r"^\[\d\d:\d\d:\d\d\] This process \((\d+)\) is currently the leader\. "
                    r"Host " + HOST + r", fencing token (\d+)\.$")
STANDBY = re.compile(
    r"^\[\d\d:\d\d:\d\d\] This process \((\d+)\) could not acquire lease\."
    r" Retrying in 0\.3 seconds\. Host " + HOST + r"\.$"
)


class Proc:
    def __init__(self, url, resource):
        env = dict(os.environ, MUTEXD_URL=url, MUTEXD_RESOURCE=resource,
                   MUTEXD_TTL_MS="1500", MUTEXD_RETRY_S="0.3")
        env.pop("MUTEXD_TOKEN", None)
        self.p = subprocess.Popen([sys.executable, EXAMPLE], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))

    def saw(self, pattern, after=0):
        return any(pattern.match(x) for x in self.lines[after:])

    def wait_for(self, pattern, timeout=5.0, after=0):
        deadline = time.monotonic() + timeout
        while not self.saw(pattern, after):
            assert time.monotonic() < deadline, "no line matching %s in:\n%s" % (
                pattern.pattern, "\n".join(self.lines))
            time.sleep(0.02)

    def term(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(10)
        self.t.join(5)
        return rc

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def test_two_workers_hand_over(server, client, name):
    a = Proc(server.url, name)
    b = None
    try:
        a.wait_for(LEADER)
        b = Proc(server.url, name)
        b.wait_for(STANDBY)
        assert all(int(m.group(1)) == a.p.pid for m in map(LEADER.match, a.lines) if m)
        token = client.get(name).holder.fencing_token
        assert all(int(m.group(2)) == token for m in map(LEADER.match, a.lines) if m)
        assert client.get(name).holder.owner.endswith(":%d" % a.p.pid)
        time.sleep(1.2)  # a keeps its beat, and its lease, past the TTL
        assert sum(1 for x in a.lines if LEADER.match(x)) >= 2
        assert not b.saw(LEADER)
        n = len(b.lines)
        assert a.term() == 0  # releases on SIGTERM
        b.wait_for(LEADER, timeout=2, after=n)
        assert client.get(name).holder.owner.endswith(":%d" % b.p.pid)
        assert b.term() == 0
        assert client.get(name).state == "free"
    finally:
        a.kill()
        if b is not None:
            b.kill()
