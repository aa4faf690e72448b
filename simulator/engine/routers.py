"""Global routers: which replica gets the next request.

A router is a pure function of a view of the replicas (their outstanding request
counts), a per-run counter and the run's random generator; it returns a replica
index. Adding one is one function and one line in :data:`ROUTERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Router = Callable[[Sequence[int], int, np.random.Generator], int]


def round_robin(outstanding: Sequence[int], step: int, rng: np.random.Generator) -> int:
    """Replica ``step mod n``: counts are balanced exactly."""
    return step % len(outstanding)


def least_outstanding(outstanding: Sequence[int], step: int, rng: np.random.Generator) -> int:
    """The replica with the fewest waiting+running requests; ties go to the lowest index."""
    best, best_count = 0, outstanding[0]
    for i in range(1, len(outstanding)):
        if outstanding[i] < best_count:
            best, best_count = i, outstanding[i]
    return best


def random(outstanding: Sequence[int], step: int, rng: np.random.Generator) -> int:
    """Uniformly random replica (drawn from the run's seeded generator)."""
    return int(rng.integers(len(outstanding)))


# Routers whose choice reads no replica state (only the counter and the generator): with them
# replicas never interact, so a cluster can be simulated one replica at a time
# (simulator.engine.cluster.run_partitioned). tests/test_routers checks they ignore ``outstanding``.
STATE_FREE_ROUTERS = frozenset({"round_robin", "random"})

ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
    "random": random,
}
