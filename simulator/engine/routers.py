"""Global routers: which replica gets the next request.

A router is a pure function of a view of the replicas (their outstanding request
counts), a per-run counter and the run's random generator; it returns a replica
index. Adding one is one function and one line in :data:`ROUTERS`.

Routers in :data:`REQUEST_ROUTERS` also read the request and the replicas' KV caches
(prefix-aware) or a per-run table of sessions (session affinity); they are never state free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simulator.workload.request import Request

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


# -- routers that read the request (and the replicas' caches) ------------------------------------
# They get two more keyword arguments: ``req`` (the request being routed; None: route by load
# alone) and ``caches`` (each replica's KV block manager, read only: a prefix-caching one answers
# ``cached_prefix_tokens(req)``), and ``memo``, a dict the caller keeps for the run (session
# affinity's table). Without them they fall back to least outstanding, so any caller of the plain
# signature (the disaggregated pools, where prefix caching is refused) still gets a valid choice.

# A replica counts as overloaded, and loses its cache or session claim, when it holds more than
# both LOAD_SLACK_ABS requests and LOAD_SLACK_REL times the least loaded replica's count: the
# shape of SGLang's cache-aware router's balance check (absolute and relative thresholds); the
# values are ours, not SGLang's defaults.
LOAD_SLACK_ABS = 16
LOAD_SLACK_REL = 1.5
# A cached prefix claims the request only when it covers at least this share of the prompt
# (SGLang's cache threshold, same shape; our value): a short shared system prompt, cached
# everywhere, must not pile every new session onto one replica.
CACHE_THRESHOLD = 0.5


def _overloaded(count: int, least: int, slack_abs: int, slack_rel: float) -> bool:
    return count - least > slack_abs and count > slack_rel * least


def prefix_aware(outstanding: Sequence[int], step: int, rng: np.random.Generator, *, req: Request | None = None,
                 caches: Sequence[object] = (), memo: dict | None = None, slack_abs: int = LOAD_SLACK_ABS,
                 slack_rel: float = LOAD_SLACK_REL, cache_threshold: float = CACHE_THRESHOLD) -> int:
    """The replica whose KV cache holds the longest prefix of ``req``'s prompt, among the
    replicas that are not overloaded (see :data:`LOAD_SLACK_ABS`), if that prefix covers at
    least ``cache_threshold`` of the prompt; otherwise, and among equal prefixes, the fewest
    outstanding (then the lowest index).

    The score is each replica's own cache as a lookup at admission would find it now (llm-d's
    precise prefix-cache scorer, which follows the engines' KV events), not a router-side
    guess: a prefix still being computed elsewhere is not a hit yet. Cost: one prefix walk per
    replica, O(hit blocks) each, never a scan of a cache.
    """
    least = min(outstanding)
    best, best_hit, best_count = -1, -1, 0
    for i, count in enumerate(outstanding):
        if _overloaded(count, least, slack_abs, slack_rel):
            continue
        lookup = getattr(caches[i], "cached_prefix_tokens", None) if req is not None and caches else None
        hit = lookup(req) if lookup is not None else 0
        if hit > best_hit or (hit == best_hit and count < best_count):
            best, best_hit, best_count = i, hit, count
    if req is not None and best_hit < cache_threshold * req.num_prompt_tokens:
        return least_outstanding(outstanding, step, rng)
    return best


def session_affinity(outstanding: Sequence[int], step: int, rng: np.random.Generator, *, req: Request | None = None,
                     caches: Sequence[object] = (), memo: dict | None = None, slack_abs: int = LOAD_SLACK_ABS,
                     slack_rel: float = LOAD_SLACK_REL) -> int:
    """Every request of a session on the replica that served its previous one (a sticky
    session: llm-d's session-affinity scorer, a gateway's cookie); a session's first request,
    a request without a session (``session_id`` -1) and one whose replica is overloaded go to
    the fewest outstanding, and the session then stays where it went."""
    session = -1 if req is None else req.session_id
    if session >= 0 and memo is not None:
        home = memo.get(session)
        if home is not None and not _overloaded(outstanding[home], min(outstanding), slack_abs, slack_rel):
            return home
        choice = least_outstanding(outstanding, step, rng)
        memo[session] = choice
        return choice
    return least_outstanding(outstanding, step, rng)


# Routers that take ``req``, ``caches`` and ``memo`` (simulator.engine.cluster.Cluster.submit).
REQUEST_ROUTERS = frozenset({"prefix_aware", "session"})
# Those of them that read the replicas' KV caches: when they route, every cache must be the step-by-step
# loop's, so no skipped stretch may run across an arrival (simulator.engine.cluster.Cluster).
CACHE_ROUTERS = frozenset({"prefix_aware"})

ROUTERS: dict[str, Router] = {
    "round_robin": round_robin,
    "least_outstanding": least_outstanding,
    "random": random,
    "prefix_aware": prefix_aware,
    "session": session_affinity,
}


def route(name: str, outstanding: Sequence[int], step: int, rng: np.random.Generator, req: Request,
          caches: Sequence[object], memo: dict) -> int:
    """The replica router ``name`` sends ``req`` to: a router of :data:`REQUEST_ROUTERS` also gets the
    request, the replicas' caches (read only) and ``memo``, the run's table of its own; the others the
    queue lengths alone."""
    router = ROUTERS[name]
    if name in REQUEST_ROUTERS:
        return router(outstanding, step, rng, req=req, caches=caches, memo=memo)
    return router(outstanding, step, rng)
