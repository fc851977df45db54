"""The randomized run (ha_nemesis.py) for a few minutes: a seeded nemesis kills, stops,
cuts off and slows the servers of a group under load, then the history check. Once with one
partition (120 s), once with eight (90 s), where a SIGTERM is a leave and a return a join.
The seed is MUTEXD_NEMESIS_SEED when set, else random; it is printed, and named in the
failure. MUTEXD_NEMESIS_SECONDS sets the time of both."""

import os

import pytest

from azure import Azurite
from ha_nemesis import run


@pytest.mark.heavy
@pytest.mark.parametrize("partitions,default_seconds", [(1, 120), (8, 90)],
                         ids=["one-partition", "eight-partitions"])
def test_a_randomized_run_keeps_every_promise(partitions, default_seconds):
    seed = os.environ.get("MUTEXD_NEMESIS_SEED")
    seconds = float(os.environ.get("MUTEXD_NEMESIS_SECONDS", default_seconds))
    az = Azurite()
    try:
        seed, bad, faults = run(int(seed) if seed else None, seconds, az=az,
                                out=lambda s: print(s, flush=True), partitions=partitions)
    finally:
        az.stop()
    assert not bad, ("nemesis seed %d, %d partition(s) (MUTEXD_NEMESIS_SEED=%d to run it "
                     "again): %d faults\n%s" % (seed, partitions, seed, len(faults),
                                                "\n".join(bad[:60])))
