"""A randomized run against a server group: a nemesis chooses among the faults a group must
survive while clients load it, then the history check (ha_history.py).

Faults: SIGKILL of the active (it comes back), SIGTERM of the active (it comes back),
SIGSTOP/SIGCONT of the active, the blob store cut off from one server, the active cut off
from the other servers (its probes and forwards; the clients still reach it), one failed
blob request (503 or a reset on the Nth request of a kind), a slow blob store for one
server, a step of one server's wall clock while it runs (libfaketime's timestamp file),
slow seals (one server's seals of a journal held 2-5 s, with a SIGKILL or SIGTERM of the
active for a takeover to meet them, or standing until the next one), the other servers'
probes of the active cut while its forwards and clients pass (2-20 s), and, partitioned,
every claim of one server for a partition's owner lease answered 503 or 409 for a few
seconds (the placement must stop giving it partitions it cannot take); and, chosen at the
start, snapshot rolls every few hundred changes and one server's clock off by a few
seconds.

The load (ha_group.Load), on servers of 8 threads: exclusive leases with metadata near the
limits, the ledger, semaphores and read/write resources, sets of two resources in either
order (waiting, released one resource at a time), and a reader of the events feed checked
for skips and phantoms; every client follows `Mutexd-Served-By` to the active. Every
client's operations, and a read of every resource at the end, go through the history
checker (history.py).

Seeded: the same seed makes the same choices (the timing of the servers still differs). The
seed is printed at the start and with the result.

    python3 tests/integration/ha_nemesis.py --seconds 1800 [--seed N]
    (MUTEXD_BIN chooses the binary, as for the tests)

With --partitions N the group is partitioned: "the active" a fault picks is a server that
owns partitions, chosen at random, and the group has settled when every live server shows
the same map with every partition owned by a live server; a SIGTERM is a leave and the
server's return a join, each moving partitions by handover.

test_ha_nemesis.py runs it for a few minutes in `make test`, once with one partition and
once with eight; tests/soak/ha_nemesis.sh for 30 (its third argument: the partitions).
"""

import argparse
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from azure import Azurite  # noqa: E402
from ha_group import FAKETIME_ENV, FAKETIME_LIB, SLOW, Load, ProxiedGroup  # noqa: E402
from harness import remove_own_tmp, use_own_tmp  # noqa: E402

# Requests a single failure may hit: (name, rule).
ONE_FAILURES = [
    ("append", dict(method="PUT", query=r"comp=appendblock")),
    ("journal create", dict(method="PUT", path=r"/journal/\d+/\d+$",
                            header=("x-ms-blob-type", "AppendBlob"))),
    ("owner metadata", dict(method="PUT", path=r"/owner$", query=r"comp=metadata")),
    ("snapshot put", dict(method="PUT", path=r"/snapshots/")),
    ("owner lease", dict(method="PUT", path=r"/owner$", query=r"comp=lease")),
    ("owner read", dict(method="HEAD", path=r"/owner$")),
    ("journal read", dict(method="GET", path=r"/journal/")),
    ("listing", dict(method="GET", query=r"comp=list")),
    ("seal", dict(method="PUT", query=r"comp=seal")),
]


class Nemesis:
    def __init__(self, seed, seconds, az=None, out=print, partitions=1):
        self.partitions = partitions
        self.seed = seed
        self.seconds = seconds
        self.rnd = random.Random(seed)
        self.out = out
        self.own_az = az is None
        self.az = az
        self.g = None
        self.faults = []  # (time since start, what)
        self.problems = []  # liveness problems seen during the run
        self.clocks = None  # a folder of each server's libfaketime timestamp file
        self.offsets = [0, 0, 0]  # each server's wall clock offset, seconds

    def say(self, what):
        t = time.monotonic() - self.t0
        self.faults.append((t, what))
        self.out("[%7.2f] %s" % (t, what))

    def setup(self):
        rnd = self.rnd
        if self.az is None:
            self.az = Azurite()
        extra = ["--failover-grace-ms", "3000", "--threads", "8"]
        if self.partitions > 1:
            extra += ["--partitions", str(self.partitions)]
        # A long run keeps every ledger lease (1 h TTL): its snapshots grow with it, so it
        # rolls less often, and its ledger clients go slower (self.long).
        self.long = self.seconds > 300
        roll = rnd.choice([2000, 5000, None] if self.long else [200, 300, 500, None])
        if roll:
            extra += ["--snapshot-every-changes", str(roll)]
        envs = [{}, {}, {}]
        skewed = None
        if rnd.random() < 0.5:
            skewed = rnd.randrange(3)
            self.offsets[skewed] = rnd.choice([2, 3, -2, 5])
        if os.path.exists(FAKETIME_LIB):
            # Every server reads its wall clock's offset from a file of its own, again at
            # each call: a step is a new line there.
            self.clocks = tempfile.mkdtemp(prefix="mutexd-nemesis-")
            for i in range(3):
                self.write_clock(i)
                envs[i] = dict(FAKETIME_ENV, FAKETIME_TIMESTAMP_FILE=self.clock_file(i))
        self.g = ProxiedGroup(self.az, n=3, extra=extra, envs=envs, peers=True)
        self.out("nemesis seed %d: %d s, %d partition(s), snapshot every %s changes, clock %s" % (
            self.seed, self.seconds, self.partitions, roll or "100000 (default)",
            "of server %d %+d s" % (skewed, self.offsets[skewed]) if skewed is not None
            else "the same on every server"))
        self.g.start()
        if self.partitions > 1:
            self.owner(timeout=30 * SLOW)
        else:
            self.g.active(timeout=30 * SLOW)

    def owner(self, timeout):
        """A partitioned group settled (every live server shows the same map, every
        partition owned by a live server): one of the servers that own partitions, at
        random."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            live = self.g.alive()
            urls = {s.url for s in live}
            views = [self.g.view(s, timeout=2) for s in live]
            maps = [tuple(o["url"] for o in v["partitions"]["owners"]) if v else None
                    for v in views]
            last = maps
            if maps and maps[0] and all(m == maps[0] for m in maps) and set(maps[0]) <= urls:
                url = self.rnd.choice(sorted(set(maps[0])))
                return next(s for s in live if s.url == url)
            time.sleep(0.1)
        raise AssertionError("no agreed partition map: %r" % (last,))

    def active(self, timeout=60):
        try:
            if self.partitions > 1:
                return self.owner(timeout=timeout * SLOW)
            return self.g.active(timeout=timeout * SLOW)
        except AssertionError as e:
            if self.partitions > 1 and timeout < 60:
                # Partitions may still be moving after the last fault (a server given up
                # stays left out for 15 s, then takes its share back): the fault goes on,
                # at a server chosen at random.
                self.say("the partition map is still moving")
                return None
            self.problems.append("no agreed active server %.0f s into the run: %s" % (
                time.monotonic() - self.t0, str(e)[:300]))
            self.say("no agreed active server within %d s" % timeout)
            return None

    def clock_file(self, i):
        return os.path.join(self.clocks, "clock-%d" % i)

    def write_clock(self, i):
        tmp = self.clock_file(i) + ".new"
        with open(tmp, "w") as f:
            f.write("%+d\n" % self.offsets[i])
        os.replace(tmp, self.clock_file(i))

    # ---- faults ---------------------------------------------------------------------

    def step(self):
        if not self.clocks:
            return self.rest()
        s = self.rnd.choice(self.g.alive())
        d = self.rnd.choice([-6, -3, 3, 6])
        if abs(self.offsets[s.index] + d) > 8:
            d = -d
        a = self.active(timeout=5)
        self.offsets[s.index] += d
        self.write_clock(s.index)
        self.say("step the wall clock of server %d (%s) by %+d s, to %+d s" % (
            s.index, "the active" if s is a else "a standby", d, self.offsets[s.index]))

    def partition(self, probes=False):
        """The active cut off from the other servers; with probes, only their probes of it
        (its forwards and its clients pass)."""
        a = self.active(timeout=5)
        if not a:
            return
        d = self.rnd.choice([2, 5, 10, 20] if probes else [2, 5, 10])
        p = self.g.peer(a)
        if probes:
            self.say("cut the probes of the active, server %d, for %d s (forwards pass)" % (
                a.index, d))
            p.cut_probes()
        else:
            self.say("cut the active, server %d, off from the other servers for %d s" % (
                a.index, d))
            p.cut()
        try:
            time.sleep(d)
        finally:
            p.heal()
        self.say("healed the servers' links to server %d" % a.index)

    def kill(self, a=None):
        a = self.active() if a is None else a
        if not a:
            return
        self.say("SIGKILL the active, server %d" % a.index)
        a.kill()
        self.active()
        time.sleep(self.rnd.uniform(0.5, 3))
        self.g.restart(a)
        self.say("server %d back" % a.index)

    def term(self, a=None):
        a = self.active() if a is None else a
        if not a:
            return
        self.say("SIGTERM the active, server %d" % a.index)
        a.proc.send_signal(signal.SIGTERM)
        try:
            rc = a.proc.wait(timeout=30)
        except Exception:
            self.problems.append("server %d did not stop on SIGTERM within 30 s" % a.index)
            a.kill()
            rc = None
        if rc not in (0, None):
            self.problems.append("server %d exited %s on SIGTERM" % (a.index, rc))
        a.kill()  # bookkeeping: it is gone
        self.active()
        self.g.restart(a)
        self.say("server %d back" % a.index)

    def pause(self):
        a = self.active()
        if not a:
            return
        d = self.rnd.choice([1, 2, 4, 6, 10, 20])
        self.say("SIGSTOP the active, server %d, for %d s" % (a.index, d))
        a.proc.send_signal(signal.SIGSTOP)
        try:
            time.sleep(d)
        finally:
            a.proc.send_signal(signal.SIGCONT)
        self.say("SIGCONT server %d" % a.index)

    def cut(self):
        s = self.rnd.choice(self.g.alive())
        d = self.rnd.choice([2, 5, 10, 20])
        a = self.active(timeout=5)
        self.say("cut the blob store off server %d (%s) for %d s" % (
            s.index, "the active" if s is a else "a standby", d))
        p = self.g.proxy(s)
        p.cut()
        try:
            time.sleep(d)
        finally:
            p.heal()
        self.say("healed server %d" % s.index)

    def fail_one(self):
        s = self.rnd.choice(self.g.alive())
        name, rule = self.rnd.choice(ONE_FAILURES)
        action = self.rnd.choice(["503", "503", "reset"])
        nth = self.rnd.randint(1, 20)
        a = self.active(timeout=5)
        p = self.g.proxy(s)
        r = p.add(action=action, nth=nth, **rule)
        self.say("fail the %dth %s of server %d (%s) with %s" % (
            nth, name, s.index, "the active" if s is a else "a standby", action))
        p.wait_fired(r, timeout=self.rnd.uniform(3, 10))
        p.remove(r)
        self.say("  fired %d time(s) (%d matched)" % (r.fired, r.matched))

    def slow(self):
        s = self.rnd.choice(self.g.alive())
        delay = self.rnd.choice([0.1, 0.5, 1.0, 2.0])
        d = self.rnd.choice([3, 6, 12])
        p = self.g.proxy(s)
        r = p.add(action="delay", delay=delay, times=None)
        self.say("slow blob store for server %d: %.1f s a request for %d s" % (s.index, delay, d))
        time.sleep(d)
        p.remove(r)
        self.say("  %d requests delayed" % r.fired)

    def slow_seals(self):
        """One server's seals slowed (a seal is a takeover's, of the journal it takes over),
        and the active, another server, killed or stopped meanwhile, or not: the rule
        stands for the next takeover to meet it."""
        a = self.active(timeout=5)
        others = [s for s in self.g.alive() if s is not a]
        if not others:
            return self.rest()
        s = self.rnd.choice(others)
        delay = self.rnd.choice([2.0, 3.0, 5.0])
        d = self.rnd.choice([8, 15, 30])
        then = self.rnd.choice(["kill", "term", "stand"])
        p = self.g.proxy(s)
        r = p.add(action="delay", delay=delay, times=None, **dict(ONE_FAILURES)["seal"])
        self.say("slow seals for server %d: %.0f s a seal for %d s%s" % (
            s.index, delay, d, self.meanwhile_said(then, a)))
        self.meanwhile(then, a, d, lambda: p.remove(r))
        self.say("  %d seal(s) of server %d delayed" % (r.fired, s.index))

    @staticmethod
    def meanwhile_said(then, a):
        if then == "stand" or a is None:
            return ""
        return ", and %s the active, server %d" % ("SIGKILL" if then == "kill" else "SIGTERM",
                                                 a.index)

    def meanwhile(self, then, a, d, end):
        """end() in d s (however long a takeover takes); meanwhile a SIGKILL or SIGTERM of
        the active a (then), or nothing ("stand", or no a). end() may be called twice."""
        until = time.monotonic() + d
        timer = threading.Timer(d, end)
        timer.daemon = True
        timer.start()
        try:
            if a is not None and then == "kill":
                self.kill(a)
            elif a is not None and then == "term":
                self.term(a)
            time.sleep(max(0, until - time.monotonic()))
        finally:
            timer.cancel()
            end()

    def cut_probes(self):
        self.partition(probes=True)

    def fail_claims(self):
        """Every claim of one server for a partition's owner lease refused for a while: the
        placement must not keep giving partitions to a server that cannot take them."""
        if self.partitions == 1:
            return self.rest()
        s = self.rnd.choice(self.g.alive())
        status, code = self.rnd.choice([(503, "ServerBusy"), (503, "ServerBusy"),
                                        (409, "LeaseAlreadyPresent")])
        d = self.rnd.choice([4, 8, 15])
        a = self.active(timeout=5)
        # Claims come when partitions move: the active, if another server, killed or
        # stopped meanwhile, its partitions placed anew; or not, and the next move meets it.
        then = self.rnd.choice(["kill", "term", "stand"])
        p = self.g.proxy(s)
        r = p.add(action="503", status=status, code=code, times=None,
                  header=("x-ms-lease-action", "^acquire$"),
                  **dict(ONE_FAILURES)["owner lease"])
        self.say("refuse every owner lease claim of server %d (%s) with %d for %d s%s" % (
            s.index, "the active" if s is a else "a standby", status, d,
            self.meanwhile_said(then, a if a is not s else None)))
        self.meanwhile(then, a if a is not s else None, d, lambda: p.remove(r))
        self.say("  %d claim(s) of server %d refused" % (r.fired, s.index))

    def rest(self):
        time.sleep(self.rnd.uniform(1, 4))

    # ---- the run --------------------------------------------------------------------

    def run(self):
        """Returns the violations (empty: the history is consistent)."""
        self.t0 = time.monotonic()
        self.setup()
        # A long run (tests/soak/ha_nemesis.sh runs segments of 540 s, as Azurite stalls at
        # its collection every 10 minutes) keeps its load light.
        if self.long:
            load = Load(self.g, n=4, ledgers=2, ledger_pause=0.5, places=2, events=True,
                        sets=2)
        else:
            load = Load(self.g, n=12, ledgers=4, places=4, events=True, sets=3)
        actions = [(self.kill, 3), (self.term, 1), (self.pause, 2), (self.cut, 2),
                   (self.partition, 2), (self.fail_one, 4), (self.slow, 2), (self.step, 2),
                   (self.slow_seals, 2), (self.cut_probes, 2), (self.fail_claims, 2),
                   (self.rest, 2)]
        population = [f for f, w in actions for _ in range(w)]
        end = self.t0 + self.seconds
        while time.monotonic() < end - 10:
            self.rnd.choice(population)()
            time.sleep(self.rnd.uniform(0.5, 3))
        self.say("faults over; the group settles")
        for p in self.g.proxies:
            p.clear()
            p.heal()
        for p in self.g.peers:
            p.heal()
        for s in self.g.servers:
            if s.proc and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
        self.active(timeout=60)
        dead = [s for s in self.g.servers if s.proc.poll() is not None]
        for s in dead:
            self.problems.append("server %d exited by itself (status %s):\n%s" % (
                s.index, s.proc.returncode, "\n".join(s.lines[-20:])))
        time.sleep(3)
        bad, summary = load.check()
        self.out(summary)
        if load.report:
            # The history checker's times count from the first request of the load.
            self.out("the history's times count from %.2f s into the run (the faults' times)"
                     % (load.report.t0 - self.t0))
        return self.problems + bad

    def close(self):
        if self.g:
            self.g.close()
        if self.own_az and self.az:
            self.az.stop()
        if self.clocks:
            shutil.rmtree(self.clocks, ignore_errors=True)


def run(seed=None, seconds=150, az=None, out=print, partitions=1):
    """One run; returns (seed, violations, the faults chosen)."""
    if seed is None:
        seed = random.randrange(1 << 31)
    n = Nemesis(seed, seconds, az=az, out=out, partitions=partitions)
    try:
        try:
            bad = n.run()
        except Exception:  # a harness step failed (a server did not start...): a failure
            import traceback
            bad = ["the run stopped: " + traceback.format_exc()]
            if n.g is None:
                out("nemesis seed %d FAILED:\n%s" % (seed, bad[0]))
                return seed, bad, n.faults
        if bad:
            out("nemesis seed %d FAILED:\n%s" % (seed, "\n".join(bad[:80])))
            out(n.g.logs(pattern=r"level=(warn|error)|serving as|sealed|restor|role changed"))
        else:
            out("nemesis seed %d passed: %d faults in %.0f s" % (
                seed, len(n.faults), time.monotonic() - n.t0))
        return seed, bad, n.faults
    finally:
        n.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int,
                    default=int(os.environ["MUTEXD_NEMESIS_SEED"])
                    if os.environ.get("MUTEXD_NEMESIS_SEED") else None)
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--partitions", type=int, default=1)
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    print("nemesis seed %d" % seed, flush=True)
    # The data directories of the servers it kills, Azurite's, the clock files: all in a
    # directory of the run's own, removed at the end whatever happened (as under pytest).
    use_own_tmp()
    try:
        seed, bad, _ = run(seed, args.seconds, out=lambda s: print(s, flush=True),
                           partitions=args.partitions)
    finally:
        remove_own_tmp()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
