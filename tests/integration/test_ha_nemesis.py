"""The randomized run (ha_nemesis.py) for a few minutes: a seeded nemesis kills, stops,
cuts off and slows the servers of a group under load, then the history check. The seed is
MUTEXD_NEMESIS_SEED when set, else random; it is printed, and named in the failure."""

import os

import pytest

from azure import Azurite
from ha_nemesis import run


@pytest.mark.heavy
def test_a_randomized_run_keeps_every_promise():
    seed = os.environ.get("MUTEXD_NEMESIS_SEED")
    seconds = float(os.environ.get("MUTEXD_NEMESIS_SECONDS", "120"))
    az = Azurite()
    try:
        seed, bad, faults = run(int(seed) if seed else None, seconds, az=az,
                                out=lambda s: print(s, flush=True))
    finally:
        az.stop()
    assert not bad, "nemesis seed %d (MUTEXD_NEMESIS_SEED=%d to run it again): %d faults\n%s" % (
        seed, seed, len(faults), "\n".join(bad[:60]))
