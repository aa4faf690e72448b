"""Interpolation in measured grids, built once at load.

Kernel latency is close to a power law in each size (flat where launch-bound, linear where
bandwidth- or compute-bound), so between two measured sizes it is interpolated linearly in
log(size) -> log(latency) (:func:`loglog`): exact at the grid points (up to one rounding of
exp/log), a straight line on a log-log plot between them. Past the measured range a value is
the edge measurement times the roofline's ratio (:func:`anchored`): the roofline says how the
cost grows, the table says where it starts, and the two meet without a jump.

:class:`Grid2D` holds a latency surface over two sizes (batch x length); cells the collectors
skipped (large batch x long context, out of GPU memory) are filled from the last measured cell
of their row by the roofline's ratio, and flagged so the model can count extrapolations.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable

import numpy as np


def loglog(xg: np.ndarray, yg: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Piecewise power law through ``(xg, yg)`` (``xg`` strictly increasing, all positive),
    at ``x`` clamped to ``[xg[0], xg[-1]]``. One point: that value everywhere."""
    xg = np.asarray(xg, dtype=np.float64)
    yg = np.asarray(yg, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    if len(xg) == 1:
        return np.full(x.shape, yg[0])
    lxg, lyg = np.log(xg), np.log(yg)
    lx = np.log(np.clip(x, xg[0], xg[-1]))
    j = np.clip(np.searchsorted(lxg, lx, side="right") - 1, 0, len(xg) - 2)
    w = (lx - lxg[j]) / (lxg[j + 1] - lxg[j])
    out = np.exp(lyg[j] + w * (lyg[j + 1] - lyg[j]))
    # Exactly the measurement at a grid point (exp(log(y)) may be off by an ulp).
    hit = lx == lxg[j]
    out[hit] = yg[j[hit]]
    hit = lx == lxg[j + 1]
    out[hit] = yg[j[hit] + 1]
    return out


def isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in log space (least squares, pool adjacent
    violators): measured latencies dip where a library switches tiling, and the cost-model
    contract wants prices that never fall as a size grows. Values already in order are returned
    unchanged (bit for bit); a dip and its neighbours become their geometric mean."""
    y = np.asarray(y, dtype=np.float64)
    ly = np.log(y)
    sums: list[float] = []
    counts: list[int] = []
    for v in ly.tolist():
        sums.append(v)
        counts.append(1)
        while len(sums) > 1 and sums[-2] / counts[-2] > sums[-1] / counts[-1]:
            s, c = sums.pop(), counts.pop()
            sums[-1] += s
            counts[-1] += c
    out = y.copy()
    i = 0
    for s, c in zip(sums, counts, strict=True):
        if c > 1:
            out[i:i + c] = math.exp(s / c)
        i += c
    return out


def loglog_scalar(lxg: list[float], lyg: list[float], yg: list[float], x: float) -> float:
    """:func:`loglog` for one value, on precomputed logs (pure Python: the per-iteration path)."""
    n = len(lxg)
    if n == 1:
        return yg[0]
    lx = math.log(x) if x > 0 else lxg[0]
    if lx <= lxg[0]:
        return yg[0]
    if lx >= lxg[-1]:
        return yg[-1]
    j = bisect_right(lxg, lx) - 1
    if lx == lxg[j]:
        return yg[j]
    w = (lx - lxg[j]) / (lxg[j + 1] - lxg[j])
    return math.exp(lyg[j] + w * (lyg[j + 1] - lyg[j]))


def anchored(edge_value: np.ndarray | float, roofline_at_x: np.ndarray | float,
             roofline_at_edge: np.ndarray | float) -> np.ndarray:
    """Extrapolation past a grid: the edge measurement scaled by the roofline's growth."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(np.asarray(roofline_at_edge) > 0,
                         np.asarray(roofline_at_x, dtype=np.float64) / np.asarray(roofline_at_edge), 1.0)
    return np.asarray(edge_value, dtype=np.float64) * ratio


class Grid2D:
    """Latency over (``a``, ``b``), e.g. (batch, length): log-log along ``b``, linear along ``a``
    (attention's cost is a fixed part plus a part proportional to the batch: predicting left-out
    batch sizes, linear errs less than log-log, e.g. H100 vLLM decode median 2.5% vs 4.1%,
    P95 19% vs 23%), filled holes.

    ``rows[i]`` holds the measured ``b`` values and latencies for ``a[i]``. Every row is put on
    the union of ``b`` values; a row's holes past its last measured ``b`` are filled as
    ``T[i, last] * roof(a_i, b) / roof(a_i, b_last)`` and marked unmeasured (``measured_max[i]``
    is the largest measured ``b`` of row ``i``); holes before its first measured ``b`` take the
    first value.
    """

    def __init__(self, a: list[float], rows: list[tuple[np.ndarray, np.ndarray]],
                 roof: Callable[[float, np.ndarray], np.ndarray]) -> None:
        order = np.argsort(a)
        self.a = np.asarray(a, dtype=np.float64)[order]
        rows = [rows[i] for i in order]
        self.b = np.unique(np.concatenate([r[0] for r in rows])).astype(np.float64)
        self.roof = roof
        table = np.empty((len(self.a), len(self.b)))
        self.measured_max = np.empty(len(self.a))
        for i, (bs, ts) in enumerate(rows):
            o = np.argsort(bs)
            bs, ts = np.asarray(bs, dtype=np.float64)[o], np.asarray(ts, dtype=np.float64)[o]
            inside = self.b <= bs[-1]
            vals = np.empty(len(self.b))
            ts = isotonic(ts)  # weakly increasing along b
            vals[inside] = loglog(bs, ts, self.b[inside])
            if (~inside).any():
                out_b = self.b[~inside]
                vals[~inside] = anchored(ts[-1], roof(self.a[i], out_b), roof(self.a[i], np.array([bs[-1]])))
            table[i] = vals
            self.measured_max[i] = bs[-1]
        self.t = table
        self.la, self.lb, self.lt = np.log(self.a), np.log(self.b), np.log(table)
        # Plain lists for the scalar path.
        self._a, self._la, self._lb = self.a.tolist(), self.la.tolist(), self.lb.tolist()
        self._lt = self.lt.tolist()
        self._t = table.tolist()

    def row(self, a: float) -> tuple[np.ndarray, float, bool]:
        """Latencies over ``self.b`` at ``a`` (linear between the two nearest rows;
        past the last row, that row scaled by the roofline), the largest measured ``b`` there,
        and whether ``a`` lies outside the measured rows."""
        if a >= self.a[-1]:
            vals = anchored(self.t[-1], self.roof(a, self.b), self.roof(self.a[-1], self.b)) if a > self.a[-1] else self.t[-1]
            return np.asarray(vals, dtype=np.float64), float(self.measured_max[-1]), a > self.a[-1]
        if a <= self.a[0]:
            return self.t[0].copy(), float(self.measured_max[0]), a < self.a[0]
        i = int(np.searchsorted(self.a, a, side="right")) - 1
        if a == self.a[i]:
            return self.t[i].copy(), float(self.measured_max[i]), False
        w = (a - self.a[i]) / (self.a[i + 1] - self.a[i])
        vals = self.t[i] + w * (self.t[i + 1] - self.t[i])
        return vals, float(min(self.measured_max[i], self.measured_max[i + 1])), False

    def at(self, a: float, b: float) -> tuple[float, bool]:
        """One value (pure Python, the per-iteration path) and whether it extrapolates
        (``a`` past the rows or ``b`` past the measured cells)."""
        la_list, lb_list = self._la, self._lb
        na, nb = len(la_list), len(lb_list)
        la = math.log(a) if a > 0 else la_list[0]
        lb = math.log(b) if b > 0 else lb_list[0]
        if la > la_list[-1] or lb > lb_list[-1]:  # past the grid: anchored at its edge
            ae, be = min(a, float(self.a[-1])), min(b, float(self.b[-1]))
            edge, _ = self.at(ae, be)
            return edge * float(self.roof(a, np.array([b]))[0]) / float(self.roof(ae, np.array([be]))[0]), True
        i = 0 if la <= la_list[0] else min(bisect_right(la_list, la) - 1, na - 2) if na > 1 else 0
        j = 0 if lb <= lb_list[0] else min(bisect_right(lb_list, lb) - 1, nb - 2) if nb > 1 else 0
        a_list = self._a
        wa = 0.0 if na == 1 else min(max((a - a_list[i]) / (a_list[i + 1] - a_list[i]), 0.0), 1.0)
        wb = 0.0 if nb == 1 else min(max((lb - lb_list[j]) / (lb_list[j + 1] - lb_list[j]), 0.0), 1.0)
        lt = self._lt
        if wa == 0.0 and wb == 0.0:
            value = self._t[i][j]
        else:
            i1, j1 = min(i + 1, na - 1), min(j + 1, nb - 1)
            top = self._t[i][j] if wb == 0.0 else math.exp(lt[i][j] + wb * (lt[i][j1] - lt[i][j]))
            if wa == 0.0:
                value = top
            else:
                bottom = self._t[i1][j] if wb == 0.0 else math.exp(lt[i1][j] + wb * (lt[i1][j1] - lt[i1][j]))
                value = top + wa * (bottom - top)
        limit = self.measured_max[i] if wa == 0.0 else min(self.measured_max[i], self.measured_max[min(i + 1, na - 1)])
        return value, b > limit
