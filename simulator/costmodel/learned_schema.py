"""The learned cost model's artifact schema: the fitted curves and coefficient tables.

``simulate fit`` (:mod:`simulator.calibrate.fit`) fits these with scikit-learn and writes
them as plain JSON; :mod:`simulator.costmodel.learned` reads them back and evaluates them
with numpy alone, so loading an artifact for a run imports no scikit-learn, pandas or scipy.
Bump :data:`FORMAT_VERSION` when the JSON changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

FORMAT_VERSION = 1
# The ops an artifact has a curve for: fitted against tokens, tokens per expert, or message bytes.
TOKEN_FAMILY_OPS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_act", "mlp_down", "norms", "rotary",
                    "residual_add", "embedding", "lm_head")
MOE_FAMILY_OPS = ("moe_gate", "moe_expert_up", "moe_expert_down", "moe_expert_act")  # per expert vs its tokens
COLLECTIVE_OPS = ("all_reduce", "send_recv")
CURVE_OPS = TOKEN_FAMILY_OPS + MOE_FAMILY_OPS + COLLECTIVE_OPS


@dataclass(frozen=True)
class Curve:
    """A non-decreasing piecewise-linear function given by knots, with the extrapolation rule.

    Below the first knot the curve is flat (at 0 it is 0: no work, no time); above the last
    knot it continues linearly with the slope of the top quarter of the fitted range,
    ``(f(x_max) - f(0.75 x_max)) / (0.25 x_max)``: large batches of these ops are
    throughput-bound, so time grows linearly, and a quarter of the range averages out the
    tile-quantisation wiggles a last segment alone would carry.
    """

    knots: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        k, v = self.knots, self.values
        if k.ndim != 1 or k.shape != v.shape or not len(k):
            raise ValueError(f"{len(k)} knots and {len(v)} values (one value a knot, at least one)")
        if not (np.isfinite(k).all() and np.isfinite(v).all()):
            raise ValueError("knots and values must be finite")
        if (np.diff(k) <= 0).any() or k[0] <= 0:
            raise ValueError("knots must be positive and increasing")
        if (v < 0).any() or (np.diff(v) < 0).any():
            raise ValueError("values must be seconds >= 0, non-decreasing (as fit writes them)")

    @property
    def x_max(self) -> float:
        return float(self.knots[-1])

    @property
    def slope(self) -> float:
        x0 = 0.75 * self.x_max
        if x0 <= self.knots[0]:
            return 0.0
        return max(0.0, (float(self.values[-1]) - float(np.interp(x0, self.knots, self.values))) / (self.x_max - x0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        y = np.interp(x, self.knots, self.values)
        y = np.where(x > self.x_max, self.values[-1] + self.slope * (x - self.x_max), y)
        return np.where(x > 0, y, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"knots": self.knots.tolist(), "values": self.values.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Curve:
        return cls(np.asarray(data["knots"], dtype=np.float64), np.asarray(data["values"], dtype=np.float64))


@dataclass(frozen=True)
class DecodeModel:
    """``t(n, k_rms) = a[n] + b[n] * k_rms`` for ``n`` decodes; tables indexed by ``n``.

    Beyond the largest fitted batch the coefficients continue linearly with the slope of
    the top quarter of the fitted batch range (more sequences, proportionally more work).
    """

    a: np.ndarray  # a[n] for n = 0..max_batch, seconds
    b: np.ndarray  # b[n], seconds per token of RMS context
    max_batch: int
    max_context: float

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.a.shape != (self.max_batch + 1,) or self.b.shape != self.a.shape:
            raise ValueError(f"a and b need max_batch + 1 = {self.max_batch + 1} entries, got {len(self.a)} and {len(self.b)}")
        if not (np.isfinite(self.a).all() and np.isfinite(self.b).all() and math.isfinite(self.max_context)):
            raise ValueError("a, b and max_context must be finite")

    def coefficients(self, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = np.asarray(n, dtype=np.float64)
        m = self.max_batch
        lo = max(1, int(0.75 * m))
        sa = (self.a[m] - self.a[lo]) / max(m - lo, 1)
        sb = (self.b[m] - self.b[lo]) / max(m - lo, 1)
        idx = np.clip(n, 0, m).astype(int)
        extra = np.maximum(n - m, 0)
        return self.a[idx] + max(sa, 0.0) * extra, self.b[idx] + max(sb, 0.0) * extra

    def predict(self, n: np.ndarray, k_rms: np.ndarray) -> np.ndarray:
        a, b = self.coefficients(n)
        return np.where(np.asarray(n) > 0, a + b * np.asarray(k_rms, dtype=np.float64), 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"a": self.a.tolist(), "b": self.b.tolist(), "max_batch": self.max_batch,
                "max_context": self.max_context}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DecodeModel:
        return cls(np.asarray(data["a"], dtype=np.float64), np.asarray(data["b"], dtype=np.float64),
                   int(data["max_batch"]), float(data["max_context"]))


@dataclass(frozen=True)
class PrefillModel:
    """``t = intercept + sum(coef[f] * shape.f)`` over BatchShape prefill sums, coefficients >= 0."""

    intercept: float
    coef: dict[str, float]
    max_chunk: float
    max_kv: float

    def __post_init__(self) -> None:
        if not all(math.isfinite(x) for x in (self.intercept, self.max_chunk, self.max_kv, *self.coef.values())):
            raise ValueError("intercept, coefficients and ranges must be finite")
        if any(c < 0 for c in self.coef.values()):
            raise ValueError("coefficients must be >= 0 (as fit writes them)")

    def predict(self, feats: dict[str, np.ndarray]) -> np.ndarray:
        t = self.intercept + sum(c * np.asarray(feats[f], dtype=np.float64) for f, c in self.coef.items())
        return np.where(np.asarray(feats["num_prefill_tokens"]) > 0, t, 0.0)

    def to_json(self) -> dict[str, Any]:
        return {"intercept": self.intercept, "coef": self.coef, "max_chunk": self.max_chunk, "max_kv": self.max_kv}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PrefillModel:
        return cls(float(data["intercept"]), {k: float(v) for k, v in data["coef"].items()},
                   float(data["max_chunk"]), float(data["max_kv"]))
