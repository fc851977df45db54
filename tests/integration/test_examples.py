"""The leader-election workers of clients/examples, three of each kind (Python, Node.js, Go,
and the shell script on mutexctl run) against one server: exactly one leads at any moment, and
when the leader is killed with SIGKILL another leads within the TTL plus one second."""

import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from harness import ROOT, Server

pytestmark = pytest.mark.examples

TTL_MS = 3000
RETRY_S = 0.5
HOST = re.escape(socket.gethostname())
# Each line names the process and its host; the leader's carry the fencing token.
LEADER = re.compile(r"^\[\d\d:\d\d:\d\d\] This process \((\d+)\) is currently the leader\. "
                    r"Host " + HOST + r", fencing token (\d+)\.$")
WAITING = re.compile(r"^\[\d\d:\d\d:\d\d\] This process \((\d+)\) could not acquire lease\. "
                     r"Retrying in [\d.]+ seconds\. Host " + HOST + r"\.$")


def mutexctl():
    for d in ("build/clients/c", "build"):
        p = os.path.join(ROOT, d, "mutexctl")
        if os.path.exists(p):
            return p
    return shutil.which("mutexctl")


def go_leader():
    """The Go example worker, built (as its Dockerfile builds it: Debian's Go, nothing
    downloaded) into build/examples once per test session."""
    out = os.path.join(ROOT, "build", "examples", "mutexd-leader")
    if not getattr(go_leader, "built", False):
        cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or
                             os.path.join(os.path.expanduser("~"), ".cache"), "mutexd-go")
        env = dict(os.environ, CGO_ENABLED="0", GOPROXY="off", GOFLAGS="",
                   GOCACHE=os.environ.get("GOCACHE") or os.path.join(cache, "build"),
                   GOPATH=os.environ.get("GOPATH") or os.path.join(cache, "gopath"))
        subprocess.run(["go", "build", "-trimpath", "-o", out, "."], check=True, env=env,
                       cwd=os.path.join(ROOT, "clients", "examples", "go", "leader"))
        go_leader.built = True
    return out


class Worker:
    def __init__(self, kind, cmd, env):
        self.kind = kind
        # Its own process group: killing the worker kills everything it runs, as when its
        # container dies.
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lead_times = []  # monotonic times of its leader lines, as received
        self.tokens = []  # the fencing token of each of its leader lines
        self.pids = set()  # the PIDs its lines name
        self.wait_lines = 0
        self.other = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            m = LEADER.match(line) or WAITING.match(line)
            if m:
                self.pids.add(int(m.group(1)))
            if LEADER.match(line):
                self.tokens.append(int(LEADER.match(line).group(2)))
                self.lead_times.append(time.monotonic())
            elif WAITING.match(line):
                self.wait_lines += 1
            else:
                self.other.append(line)

    def led_since(self, t):
        return any(x >= t for x in self.lead_times)

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def __repr__(self):
        return "<%s worker %d>" % (self.kind, self.proc.pid)


def leaders_since(workers, t):
    return [w for w in workers if w.led_since(t)]


def test_three_workers_of_each_kind_elect_one_leader_and_take_over(tmp_path):
    ctl = mutexctl()
    assert ctl, "mutexctl is not built"
    with Server(args=["--min-ttl-ms", "500"]) as s:
        env = dict(os.environ, MUTEXD_URL="http://%s:%d" % (s.host, s.port),
                   MUTEXD_RESOURCE="leader-election/demo", MUTEXD_TTL_MS=str(TTL_MS),
                   MUTEXD_RETRY_S=str(RETRY_S), MUTEXCTL=ctl,
                   PYTHONPATH=os.path.join(ROOT, "clients", "python"))
        kinds = {
            "python": ["/usr/bin/python3", "-u", os.path.join(ROOT, "clients/examples/python/leader.py")],
            "node": ["node", os.path.join(ROOT, "clients/examples/node/leader.mjs")],
            "go": [go_leader()],
            "shell": ["bash", os.path.join(ROOT, "clients/examples/shell/leader.sh")],
        }
        workers = [Worker(k, cmd, env) for k, cmd in kinds.items() for _ in range(3)]
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not leaders_since(workers, 0):
                time.sleep(0.1)
            assert leaders_since(workers, 0), [w.other for w in workers]

            # Three rounds: kill the leader, and see another take over. So that every kind
            # is the leader once, the workers of kinds already tested are paused (SIGSTOP)
            # while the next leader is chosen.
            killed = []
            for round_ in range(len(kinds)):
                # Exactly one leads: over two seconds, one worker printed leader lines and
                # every other running one is waiting.
                t = time.monotonic()
                time.sleep(2.2)
                now = [w for w in leaders_since(workers, t) if w not in killed]
                assert len(now) == 1, (round_, now)
                leader = now[0]
                assert leader.kind not in {w.kind for w in killed}
                for w in workers:
                    if w is not leader and w not in killed:
                        assert w.wait_lines > 0, (w, w.other)
                tested = {w.kind for w in killed} | {leader.kind}
                paused = [w for w in workers if w not in killed and w is not leader and
                          w.kind in tested and tested != set(kinds)]
                for w in paused:
                    os.killpg(w.proc.pid, signal.SIGSTOP)
                # Kill it; another must lead within the TTL plus one second.
                leader.kill()
                killed.append(leader)
                t_kill = time.monotonic()
                deadline = t_kill + TTL_MS / 1000 + 1
                nxt = []
                while time.monotonic() < deadline:
                    nxt = [w for w in leaders_since(workers, t_kill) if w not in killed]
                    if nxt:
                        break
                    time.sleep(0.05)
                for w in paused:
                    os.killpg(w.proc.pid, signal.SIGCONT)
                assert nxt, "no takeover within %.1f s of killing %r" % (TTL_MS / 1000 + 1, leader)
                took = min(x for x in nxt[0].lead_times if x >= t_kill) - t_kill
                print("round %d: killed %r, %r led after %.2f s" % (round_, leader, nxt[0], took))
                # Never two at once: the killed leader's last line came before the next one's
                # first (the old lease had to run out first).
                assert max(leader.lead_times) < min(x for x in nxt[0].lead_times if x >= t_kill)

            assert {w.kind for w in killed} == set(kinds), killed
            # The rest stop cleanly on SIGTERM (they release and exit 0).
            for w in workers:
                if w not in killed:
                    os.killpg(w.proc.pid, signal.SIGTERM)
            for w in workers:
                if w not in killed:
                    assert w.proc.wait(15) == 0, (w, w.other)
        finally:
            for w in workers:
                if w.proc.poll() is None:
                    w.kill()
        c = s.client()
        g = c.get("leader-election/demo").json
        pids = {w.proc.pid: w.kind for w in workers}
        assert g["state"] == "free", (g, pids)  # every worker released on its way out
        c.close()
