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
``num_tried``). The loads tried depend only on the verdicts, so two runs with the same
verdicts try the same loads, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Stop = Literal["converged", "none_passes", "max_qps", "max_trials"]


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


def largest_passing(passes: Callable[[float], bool], start_qps: float, limits: Limits, *,
                    passed_qps: float | None = None, failed_qps: float | None = None, num_tried: int = 0) -> Outcome:
    """Search from ``start_qps`` (the first load tried), or from verdicts the caller already
    has: a load that passed (``passed_qps``) or failed (``failed_qps``, above any pass), and
    ``num_tried`` trials already run towards ``max_trials``; then ``start_qps`` is not tried."""
    if passed_qps is not None and failed_qps is not None and not passed_qps < failed_qps:
        raise ValueError(f"largest_passing: passed {passed_qps} must be below failed {failed_qps}")
    n = num_tried
    passed, failed = passed_qps, failed_qps

    def run(qps: float) -> None:
        nonlocal n, passed, failed
        n += 1
        if passes(qps):
            passed = qps
        else:
            failed = qps

    if passed is None and failed is None:
        run(start_qps)
    while passed is None:  # invariant: failed is set
        assert failed is not None
        if failed / 2 < limits.min_qps:
            return Outcome(None, failed, "none_passes", n)
        if n >= limits.max_trials:
            return Outcome(None, failed, "max_trials", n)
        run(failed / 2)
    while failed is None:
        if passed * 2 > limits.max_qps:
            return Outcome(passed, None, "max_qps", n)
        if n >= limits.max_trials:
            return Outcome(passed, None, "max_trials", n)
        run(passed * 2)
    while (failed - passed) / failed > limits.rel_tol:  # invariant: passed < failed
        if n >= limits.max_trials:
            return Outcome(passed, failed, "max_trials", n)
        run((passed + failed) / 2)
    return Outcome(passed, failed, "converged", n)
