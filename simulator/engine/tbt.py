"""Time-between-tokens gaps kept as weighted runs, so memory grows with iterations, not tokens.

Every decode of one iteration ends at the same ``now``, and a request that also decoded in
the iteration before has the same previous token time as every other such request: the
batch's gaps are nearly all one value. A :class:`GapLog` stores each iteration's gaps
run-length encoded in batch order (``values[i]`` repeated ``counts[i]`` times), which is
exact and costs 16 bytes per run, about one run per iteration, where a timestamp per token
cost 8 bytes per token (a 1M-request ShareGPT run makes ~250M tokens and ~7M iterations).

Quantiles are exact: :func:`quantile_stats` finds the order statistics in the cumulative
counts and interpolates with numpy's ``linear`` method, float op for float op, so P50/P90/P99
equal ``np.percentile`` of the expanded gaps bit for bit (tested). The mean is
``sum(value * count) / n``, which may differ from a plain mean of the expanded gaps in the
last bits.

Bounded memory for pathological runs: past :data:`MAX_RUNS` runs a log merges equal values
(still exact); if more than half of ``MAX_RUNS`` distinct values remain, it becomes a
log-bucketed sketch (DDSketch's mapping: every value is replaced by its bucket's
representative, within :data:`RELATIVE_ERROR` = 0.5% of it), and stays one. Logs merge by
concatenation (:func:`merged`), sketched or not; ``exact`` says whether quantiles are exact.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from typing import Any

import numpy as np

MAX_RUNS = 1 << 22  # 4M runs: 64 MiB a log before it merges equal values
RELATIVE_ERROR = 0.005
_GAMMA = (1 + RELATIVE_ERROR) / (1 - RELATIVE_ERROR)
_LOG_GAMMA = math.log(_GAMMA)
QUANTILES = (50, 90, 99)


class GapLog:
    """Gaps of one replica: ``values[i]`` occurred ``counts[i]`` times (runs in record order;
    how a run of iterations splits into runs is the recorder's business, see :func:`same_gaps`).

    Contract: ``add`` is the hot-path entry (two array appends); everything else runs after the
    simulation. Gaps are non-negative floats.
    """

    __slots__ = ("values", "counts", "exact", "max_runs")

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        self.values = array("d")
        self.counts = array("q")
        self.exact = True
        self.max_runs = max_runs

    def add(self, value: float, count: int) -> None:
        self.values.append(value)
        self.counts.append(count)
        if len(self.values) >= self.max_runs:
            self.compact()

    def extend_runs(self, values: list[float], count: int) -> None:
        """One run of ``count`` gaps for each of ``values`` (a decode stretch: every
        iteration's decodes share its gap). The counts are repeated in C, not per run."""
        self.values.fromlist(values)
        self.counts.extend(array("q", (count,)) * len(values))
        if len(self.values) >= self.max_runs:
            self.compact()

    def __len__(self) -> int:
        """Number of gaps (not runs)."""
        return int(sum(self.counts))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GapLog):
            return NotImplemented
        return (self.values, self.counts, self.exact) == (other.values, other.counts, other.exact)

    __hash__ = None  # type: ignore[assignment] - mutable

    def __repr__(self) -> str:
        return f"GapLog({len(self.values)} runs, {len(self)} gaps{'' if self.exact else ', sketched'})"

    def remove(self, gaps: np.ndarray) -> None:
        """Take one occurrence of each of ``gaps`` (values added before, exactly) out of the log,
        which becomes canonical; in a sketched log, their buckets'. Raises ValueError on a gap the
        log does not hold."""
        if not len(gaps):
            return
        taken = np.asarray(gaps, dtype=np.float64)
        rv, rc = canonical(taken if self.exact else sketch_values(taken), np.ones(len(taken), dtype=np.int64))
        self.canonicalise()
        values = np.frombuffer(self.values, dtype=np.float64)
        counts = np.frombuffer(self.counts, dtype=np.int64).copy()
        at = np.searchsorted(values, rv)
        if (at >= len(values)).any() or (values[np.minimum(at, len(values) - 1)] != rv).any() or (counts[at] < rc).any():
            raise ValueError("GapLog.remove: a gap the log does not hold")  # invariant: callers remove what was added
        counts[at] -= rc
        keep = counts > 0
        self.values, self.counts = array("d", values[keep].tobytes()), array("q", counts[keep].tobytes())

    def canonicalise(self) -> None:
        """Keep the log as sorted distinct values with their counts: the same gaps, in the
        form :func:`merged` combines fastest (a worker does this before sending a log back)."""
        values, counts = canonical(np.frombuffer(self.values, dtype=np.float64),
                                   np.frombuffer(self.counts, dtype=np.int64))
        self.values, self.counts = array("d", values.tobytes()), array("q", counts.tobytes())

    def compact(self) -> None:
        """Merge equal values; if still too many, bucket them (the log becomes a sketch)."""
        self.canonicalise()
        if len(self.values) > self.max_runs // 2:
            values, counts = canonical(sketch_values(np.frombuffer(self.values, dtype=np.float64)),
                                       np.frombuffer(self.counts, dtype=np.int64))
            self.values, self.counts = array("d", values.tobytes()), array("q", counts.tobytes())
            self.exact = False


def sketch_values(values: np.ndarray) -> np.ndarray:
    """Each positive value replaced by its log bucket's representative (relative error <=
    RELATIVE_ERROR); zeros stay zero. Idempotent: a representative maps to itself's bucket."""
    out = np.zeros_like(values)
    pos = values > 0
    index = np.ceil(np.log(values[pos]) / _LOG_GAMMA)
    out[pos] = 2.0 * np.exp(index * _LOG_GAMMA) / (_GAMMA + 1.0)
    return out


def canonical(values: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and their total counts (zero counts dropped).

    A stable sort is faster than ``np.unique``'s quicksort on input made of sorted runs,
    which is what merging canonical logs gives it (:func:`merged`): 0.65 s against 1.07 s
    for 16M values in 16 runs.
    """
    if len(values) == 0:
        return np.empty(0), np.empty(0, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    if (values[1:] > values[:-1]).all() and (counts > 0).all():  # canonical already (a worker's log)
        return values, counts
    order = np.argsort(values, kind="stable")
    values, counts = values[order], counts[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    unique, totals = values[starts], np.add.reduceat(counts, starts)
    keep = totals > 0
    return unique[keep], totals[keep]


def merged(logs: Iterable[GapLog]) -> tuple[np.ndarray, np.ndarray, bool]:
    """All logs' gaps as sorted distinct values with counts, and whether they are exact."""
    logs = list(logs)
    if not logs:
        return np.empty(0), np.empty(0, dtype=np.int64), True
    values = np.concatenate([np.frombuffer(g.values, dtype=np.float64) for g in logs])
    counts = np.concatenate([np.frombuffer(g.counts, dtype=np.int64) for g in logs])
    exact = all(g.exact for g in logs)
    if not exact:  # a sketched log's buckets absorb the others' raw values
        values = sketch_values(values)
    v, c = canonical(values, counts)
    return v, c, exact


def same_gaps(a: Iterable[GapLog], b: Iterable[GapLog]) -> bool:
    """Whether two sets of logs hold the same gaps (as a multiset: the runs' order and split
    are not part of a log's contract; every statistic is computed from the multiset)."""
    va, ca, ea = merged(a)
    vb, cb, eb = merged(b)
    return ea == eb and np.array_equal(va, vb) and np.array_equal(ca, cb)


def expand(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Every gap as one array (sorted when ``values`` is): for plots and small runs."""
    return np.repeat(values, counts)


def percentiles(values: np.ndarray, counts: np.ndarray, qs: Iterable[float]) -> list[float]:
    """``np.percentile(expand(values, counts), qs)`` (method ``linear``) without expanding.

    ``values`` sorted and distinct with positive ``counts`` (as :func:`canonical` gives). The
    virtual index, its floor, the weight and the interpolation are numpy's own float ops, so
    the result is bit-identical to the expanded call.
    """
    n = int(counts.sum())
    q = np.true_divide(np.asarray(list(qs), dtype=np.float64), 100)
    h = (n - 1) * q
    lo = np.floor(h)
    gamma = h - lo
    lo_i = lo.astype(np.int64)
    hi_i = np.minimum(lo_i + 1, n - 1)
    ends = np.cumsum(counts)  # order statistic k sits in run searchsorted(ends, k, "right")
    a = values[np.searchsorted(ends, lo_i, side="right")]
    b = values[np.searchsorted(ends, hi_i, side="right")]
    diff = b - a
    out = a + diff * gamma
    np.subtract(b, diff * (1 - gamma), out=out, where=gamma >= 0.5)
    return [float(x) for x in out]


def nan_stats(prefix: str) -> dict[str, float]:
    """The quantile-stats keys of an empty sample, all NaN."""
    return {**{f"{prefix}_p{q}": math.nan for q in QUANTILES}, f"{prefix}_mean": math.nan, f"{prefix}_max": math.nan}


def quantile_stats(values: np.ndarray, counts: np.ndarray, prefix: str) -> dict[str, float]:
    """P50/P90/P99, mean and max of the weighted gaps as ``{prefix}_p50`` ...; NaN when empty
    (the same keys as :func:`simulator.report.metrics.quantile_stats`)."""
    n = int(counts.sum()) if len(counts) else 0
    if n == 0:
        return nan_stats(prefix)
    out: dict[str, float] = {}
    for q, v in zip(QUANTILES, percentiles(values, counts, QUANTILES), strict=True):
        out[f"{prefix}_p{q}"] = v
    # np.sum's pairwise sum, not np.dot: BLAS splits a long dot by its thread count, so one run's mean moved in its
    # last digit between a Ray worker (one thread) and a local process (bit for bit is the contract)
    out[f"{prefix}_mean"] = float(np.sum(values * counts.astype(np.float64)) / n)
    out[f"{prefix}_max"] = float(values[counts > 0].max())
    return out


def itl_views(per_token: tuple[np.ndarray, np.ndarray], per_step: tuple[np.ndarray, np.ndarray]) -> dict[str, Any]:
    """A speculating run's two ITL views, each ``(values, counts)``, as its summary keys them: quantiles of
    ``itl_per_token_s`` and ``itl_per_step_s`` and the count of each view's gaps."""
    out: dict[str, Any] = {}
    for name, (values, counts) in (("itl_per_token_s", per_token), ("itl_per_step_s", per_step)):
        out.update(quantile_stats(values, counts, name))
        out[f"num_{name.removesuffix('_s')}_gaps"] = int(counts.sum()) if len(counts) else 0
    return out
