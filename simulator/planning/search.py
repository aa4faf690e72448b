"""The largest load that passes: bracket by doubling or halving, then bisect.

Both planners search this way: ``simulate capacity`` (:func:`simulator.planning.capacity.search_seed`,
a trial passes when it meets the SLO) and the disaggregation planner's goodput search
(:func:`simulator.planning.split.goodput_search`, when enough requests meet theirs). Pass or
fail is assumed monotone in the load.

The search, from a first load ``start``:

1. bracket: halve from a failure until a load passes (``min_qps`` itself is the last load tried
   below), or double from a pass until a load fails (``max_qps`` itself the last above);
2. bisect the bracket ``[passed, failed]`` until ``(failed - passed) / failed <= rel_tol``.

No trial runs once ``max_trials`` have (the caller's earlier trials count, see
``num_tried``). A verdict of :data:`NEVER` (a failure no load can turn: every request refused
whatever the rate) ends the search at once, as ``none_passes``. The next load follows from the verdicts so far alone (:func:`next_load`),
so two runs with the same verdicts try the same loads in the same order, and a runner
may start the loads the search could need next before it needs them
(:class:`SearchAhead`, :func:`run_ahead`): the same search, with trials in parallel.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

Stop = Literal["converged", "none_passes", "max_qps", "max_trials"]
T = TypeVar("T")
# A trial's verdict: passed (True), failed (False), or failed at every load alike (NEVER): halving further
# could not pass, so the search ends on it.
NEVER: Literal["never"] = "never"
Verdict = bool | Literal["never"]


@dataclass(frozen=True)
class Limits:
    """How far and how finely to search (loads in QPS, or whole users where ``integer``: then
    every load tried is a whole number, a doubling that would pass ``max_qps`` tries ``max_qps``
    itself first, and the search also ends once the bracket is one apart)."""

    rel_tol: float
    min_qps: float
    max_qps: float
    max_trials: int
    integer: bool = False


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
    """The verdicts so far: the largest pass, the smallest failure above it, trials run, and
    whether a failure holds at every load (a :data:`NEVER` verdict)."""

    passed_qps: float | None
    failed_qps: float | None
    num_trials: int
    never: bool = False

    def after(self, qps: float, verdict: Verdict) -> State:
        if verdict is NEVER:
            return State(self.passed_qps, qps, self.num_trials + 1, never=True)
        if verdict:
            return State(qps, self.failed_qps, self.num_trials + 1)
        return State(self.passed_qps, qps, self.num_trials + 1)


def next_load(state: State, start_qps: float, limits: Limits) -> float | Outcome:
    """The load to try next from ``state``, or how the search ends there."""
    p, f, n = state.passed_qps, state.failed_qps, state.num_trials
    whole = limits.integer
    if state.never:
        return Outcome(p, f, "none_passes", n)
    if p is None and f is None:
        return start_qps
    if p is None:
        assert f is not None
        half = f // 2 if whole else f / 2
        if half < limits.min_qps:
            floor = math.ceil(limits.min_qps) if whole else limits.min_qps
            if floor < f:  # the floor itself is worth a trial (else --min-qps 0.6 stops at 1 having tried none)
                return Outcome(None, f, "max_trials", n) if n >= limits.max_trials else floor
            return Outcome(None, f, "none_passes", n)
        return Outcome(None, f, "max_trials", n) if n >= limits.max_trials else half
    if f is None:
        if p < limits.max_qps < p * 2:  # the ceiling itself is worth a trial (else --max-qps 6 stops at 4)
            if n >= limits.max_trials:
                return Outcome(p, None, "max_trials", n)
            return int(limits.max_qps) if whole else limits.max_qps
        if p * 2 > limits.max_qps:
            return Outcome(p, None, "max_qps", n)
        return Outcome(p, None, "max_trials", n) if n >= limits.max_trials else p * 2
    if (f - p) / f <= limits.rel_tol or (whole and f - p <= 1):
        return Outcome(p, f, "converged", n)
    middle = (p + f) // 2 if whole else (p + f) / 2
    return Outcome(p, f, "max_trials", n) if n >= limits.max_trials else middle


def _initial(passed_qps: float | None, failed_qps: float | None, num_tried: int) -> State:
    if passed_qps is not None and failed_qps is not None and not passed_qps < failed_qps:
        raise ValueError(f"largest_passing: passed {passed_qps} must be below failed {failed_qps}")
    return State(passed_qps, failed_qps, num_tried)


def largest_passing(passes: Callable[[float], Verdict], start_qps: float, limits: Limits, *,
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


def loads_ahead(state: State, start_qps: float, limits: Limits, count: int,
                known: Mapping[float, Verdict] | None = None) -> list[float]:
    """The next ``count`` loads the search may try from ``state``: the one it tries next,
    then those after each verdict, breadth first. While bracketing, a pass's follow-up comes
    before a failure's: doubling is cheap to try, a load far above capacity fails at once.
    Once bisecting, a failure's follow-up comes first: it is the lower load, whose trial runs
    longer (a passing trial runs to the end), so starting it early saves the most. A load whose verdict is
    already ``known`` (a trial run ahead that has ended) is followed, not listed: it costs
    nothing more, so the loads past it count as near as the load it stands for."""
    known = known or {}
    out: list[float] = []
    queue = deque([state])
    while queue and len(out) < count:
        s = queue.popleft()
        load = next_load(s, start_qps, limits)
        while not isinstance(load, Outcome) and load in known:
            s = s.after(load, known[load])
            load = next_load(s, start_qps, limits)
        if isinstance(load, Outcome):
            continue
        if load not in out:
            out.append(load)
        bisecting = s.passed_qps is not None and s.failed_qps is not None
        queue.extend((s.after(load, False), s.after(load, True)) if bisecting else
                     (s.after(load, True), s.after(load, False)))
    return out


def _wait_any(futures: Collection[Future]) -> Collection[Future]:
    return wait(futures, return_when=FIRST_COMPLETED).done


class SearchAhead(Generic[T]):
    """:func:`largest_passing` with up to ``width`` trials in flight, driven by :func:`run_ahead`:
    ``start(load)`` starts a trial and returns its future, ``passes(result)`` is its verdict.
    Whenever one of its trials ends, the search takes every verdict it can use and fills the
    free places with the trials it may need next (:func:`loads_ahead`, past the verdicts already
    in), so a place freed by a trial that stopped early is not left idle until the one the
    search waits for ends. ``used``: the results of the trials the search used, in its order
    (``on_result`` sees each as it is used); ``outcome``: set once it is done; both the serial
    search's. A trial outside the bracket (no longer needed) is cancelled if it has not begun,
    else left to end unread, holding its place till then; one inside it is kept, as the search
    may still need it."""

    def __init__(self, start: Callable[[float], Future[T]], passes: Callable[[T], Verdict], start_qps: float,
                 limits: Limits, width: int, on_result: Callable[[T], None] | None = None) -> None:
        self.start, self.passes, self.start_qps, self.limits, self.width = start, passes, start_qps, limits, width
        self.on_result = on_result
        self.state = _initial(None, None, 0)
        self.in_flight: dict[float, Future[T]] = {}
        self.ended: dict[float, T] = {}  # results in, not (yet) used
        self.used: list[T] = []
        self.outcome: Outcome | None = None

    def step(self) -> None:
        """Take every verdict the search can use, then start the trials it may need next."""
        state, start_qps, limits, passes = self.state, self.start_qps, self.limits, self.passes
        load = next_load(state, start_qps, limits)
        while not isinstance(load, Outcome) and load in self.ended:
            result = self.ended.pop(load)
            self.used.append(result)
            if self.on_result is not None:
                self.on_result(result)
            state = state.after(load, passes(result))
            load = next_load(state, start_qps, limits)
        self.state = state
        in_flight = self.in_flight
        if isinstance(load, Outcome):
            self.outcome = load
            for future in in_flight.values():
                future.cancel()
            in_flight.clear()  # what has begun is left to end unread
            return
        ahead = loads_ahead(state, start_qps, limits, self.width, {q: passes(r) for q, r in self.ended.items()})
        lo, hi = state.passed_qps, state.failed_qps  # every load tried from here lies strictly between
        for q in [q for q in in_flight if (lo is not None and q <= lo) or (hi is not None and q >= hi)]:
            if in_flight[q].cancel():
                del in_flight[q]
        for q in ahead:
            if q not in in_flight and len(in_flight) < self.width:
                in_flight[q] = self.start(q)
        # The load the search needs leads ``ahead``, so it is in flight now unless every place
        # holds a trial no longer needed: then one of those ends first and frees a place.

    def deliver(self, future: Future[T]) -> None:
        """A trial of this search has ended."""
        load = next(q for q, f in self.in_flight.items() if f is future)
        del self.in_flight[load]
        self.ended[load] = future.result()


def run_ahead(searches: Sequence[SearchAhead], wait_any: Callable[[Collection[Future]], Collection[Future]] = _wait_any,
              on_outcome: Callable[[int], None] | None = None) -> None:
    """Drive ``searches`` until each has its outcome, waiting on all their trials at once (they
    may share one pool: each keeps to its own ``width``). ``on_outcome(i)`` as search ``i`` ends."""
    for i, search in enumerate(searches):
        search.step()
        if search.outcome is not None and on_outcome is not None:
            on_outcome(i)
    while True:
        owners = {future: i for i, search in enumerate(searches) if search.outcome is None
                  for future in search.in_flight.values()}
        if not owners:  # a search not done always has a trial in flight (see SearchAhead.step)
            return
        for future in wait_any(list(owners)):
            search = searches[owners[future]]
            # A trial that ended in the same batch as the one that decided its search (or one the
            # search has since dropped) has nowhere to go: it is left unread, as a trial still
            # running then would be.
            if search.outcome is not None or future not in search.in_flight.values():
                continue
            search.deliver(future)
            search.step()
            if search.outcome is not None and on_outcome is not None:
                on_outcome(owners[future])

