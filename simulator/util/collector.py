"""CPython's cyclic garbage collector while a simulation runs: fewer passes, the same answer.

A run allocates container objects by the million (batches, their entry lists, tuples, records) and keeps
many alive (requests, their blocks in a prefix cache, iteration records). CPython runs a generation-0
collection every 700 net container allocations (its default threshold) and an older generation's every
tenth of those, each walking what survived since: on a prefix-cache trace run that was a tenth of the
instructions, for almost no garbage (the loop makes few reference cycles). :func:`fewer_collections`
raises generation 0's threshold while a simulation runs and puts the old thresholds back after; when the
collector runs changes nothing the simulation computes, only how much cyclic garbage may wait for it (at
most ``GEN0_THRESHOLD`` objects' worth between passes).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

GEN0_THRESHOLD = 100_000


@contextmanager
def fewer_collections(gen0: int = GEN0_THRESHOLD) -> Iterator[None]:
    """Generation 0's collection threshold at least ``gen0`` inside the block (the older generations' as they
    were), the thresholds as they were after it (nested blocks restore their own)."""
    old = gc.get_threshold()
    gc.set_threshold(max(gen0, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
