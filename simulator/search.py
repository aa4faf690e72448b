"""The largest load that passes: bracket by doubling or halving, then bisect.

Both planners search this way: ``simulate capacity`` (:func:`simulator.capacity.search_seed`,
a trial passes when it meets the SLO) and the disaggregation planner's goodput search
(:func:`simulator.disagg_plan.goodput_search`, when enough requests meet theirs). Pass or
fail is assumed monotone in the load.

The search, from a first load ``start``:

1. bracket: halve from a failure until a load passes (giving up below ``min_qps``), or
   double from a pass until a load fails (giving up above ``max_qps``);
2. bisect the bracket ``[passed, failed]`` until ``(failed - passed) / failed <= rel_tol``.

No trial runs once ``max_trials`` have (the caller's earlier trials count, see
``num_tried``). The next load follows from the verdicts so far alone (:func:`next_load`),
so two runs with the same verdicts try the same loads in the same order, and a runner
may start the loads the search could need next before it needs them
(:func:`largest_passing_ahead`): the same search, with trials in parallel.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal, TypeVar

Stop = Literal["converged", "none_passes", "max_qps", "max_trials"]
T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """How far and how finely to search (loads in QPS)."""

    rel_tol: float
    min_qps: float
    max_qps: float
    max_trials: int


@dataclass(frozen=True)
class Outcome:
    """``passed_qps``: the largest load that passed (None if none did); ``failed_qps``: the
    smallest load above it that failed (None if none did); ``stop``: why the search ended,
    ``num_trials``: trials it ran, those before it (``num_tried``) included."""

    passed_qps: float | None
    failed_qps: float | None
    stop: Stop
    num_trials: int


@dataclass(frozen=True)
class State:
    """The verdicts so far: the largest pass, the smallest failure above it, trials run."""

    passed_qps: float | None
    failed_qps: float | None
    num_trials: int

    def after(self, qps: float, passed: bool) -> State:
        if passed:
            return State(qps, self.failed_qps, self.num_trials + 1)
        return State(self.passed_qps, qps, self.num_trials + 1)


def next_load(state: State, start_qps: float, limits: Limits) -> float | Outcome:
    """The load to try next from ``state``, or how the search ends there."""
    p, f, n = state.passed_qps, state.failed_qps, state.num_trials
    if p is None and f is None:
        return start_qps
    if p is None:
        assert f is not None
        if f / 2 < limits.min_qps:
            return Outcome(None, f, "none_passes", n)
        return Outcome(None, f, "max_trials", n) if n >= limits.max_trials else f / 2
    if f is None:
        if p * 2 > limits.max_qps:
            return Outcome(p, None, "max_qps", n)
        return Outcome(p, None, "max_trials", n) if n >= limits.max_trials else p * 2
    if (f - p) / f <= limits.rel_tol:
        return Outcome(p, f, "converged", n)
    return Outcome(p, f, "max_trials", n) if n >= limits.max_trials else (p + f) / 2


def _initial(passed_qps: float | None, failed_qps: float | None, num_tried: int) -> State:
    if passed_qps is not None and failed_qps is not None and not passed_qps < failed_qps:
        raise ValueError(f"largest_passing: passed {passed_qps} must be below failed {failed_qps}")
    return State(passed_qps, failed_qps, num_tried)


def largest_passing(passes: Callable[[float], bool], start_qps: float, limits: Limits, *,
                    passed_qps: float | None = None, failed_qps: float | None = None, num_tried: int = 0) -> Outcome:
    """Search from ``start_qps`` (the first load tried), or from verdicts the caller already
    has: a load that passed (``passed_qps``) or failed (``failed_qps``, above any pass), and
    ``num_tried`` trials already run towards ``max_trials``; then ``start_qps`` is not tried."""
    state = _initial(passed_qps, failed_qps, num_tried)
    while True:
        load = next_load(state, start_qps, limits)
        if isinstance(load, Outcome):
            return load
        state = state.after(load, passes(load))


def loads_ahead(state: State, start_qps: float, limits: Limits, count: int) -> list[float]:
    """The next ``count`` loads the search may try from ``state``: the one it tries next,
    then those after each verdict, breadth first (a pass's follow-up before a failure's:
    failing trials tend to stop early, passing ones run to the end)."""
    out: list[float] = []
    queue = deque([state])
    while queue and len(out) < count:
        s = queue.popleft()
        load = next_load(s, start_qps, limits)
        if isinstance(load, Outcome):
            continue
        if load not in out:
            out.append(load)
        queue.extend((s.after(load, True), s.after(load, False)))
    return out


def largest_passing_ahead(start: Callable[[float], Future[T]], passes: Callable[[T], bool], start_qps: float,
                          limits: Limits, width: int,
                          on_result: Callable[[T], None] | None = None) -> tuple[Outcome, list[T]]:
    """:func:`largest_passing` with up to ``width`` trials in flight: ``start(load)`` starts a
    trial and returns its future, ``passes(result)`` is its verdict. Besides the trial the
    search needs, the trials it may need next (:func:`loads_ahead`) run ahead. Returns the
    outcome and the results of the trials the search used, in its order (``on_result`` sees
    each as it is used): the same loads, results and outcome as the serial search. Trials
    run ahead and then not needed are cancelled if not started, else left to finish unread."""
    state = _initial(None, None, 0)
    running: dict[float, Future[T]] = {}
    used: list[T] = []
    while True:
        load = next_load(state, start_qps, limits)
        if isinstance(load, Outcome):
            for future in running.values():
                future.cancel()
            return load, used
        ahead = loads_ahead(state, start_qps, limits, width)
        for other in [q for q in running if q not in ahead]:  # no longer reachable
            running.pop(other).cancel()
        for q in ahead:
            if q not in running and sum(not f.done() for f in running.values()) < width:
                running[q] = start(q)
        result = running.pop(load).result()
        used.append(result)
        if on_result is not None:
            on_result(result)
        state = state.after(load, passes(result))
