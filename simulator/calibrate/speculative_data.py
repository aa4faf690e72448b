"""Speculative-decoding acceptance and speedup measurements, read from the data folder.

``../shared/data/validation/speculative/`` (see its README) holds, per target model, drafting
method and dataset, the mean acceptance length (AL: tokens per verify step, bonus token
included) and, for a few settings, measured speedups against load. This module reads it with
the standard library (small CSVs, read once) and turns ALs into the per-position conditional
rates a :class:`~simulator.config.speculative.SpeculativeConfig` holds:

- an AL curve over ``k = 1..K`` (InferenceX, measured with real drafts) gives the rates:
  ``AL(j) - AL(j-1) = P(a >= j) = r_1 * ... * r_j``, so ``r_j = P_j / P_{j-1}`` (the
  increments fitted non-increasing first, :func:`rates_from_al_curve`: a measured curve that
  dips is noise, and a probability of reaching position ``j`` cannot grow with ``j``);
- one AL at one ``k`` (Spec-Bench, blog tables) gives one i.i.d. rate, solving
  ``AL = (1 - a^(k+1)) / (1 - a)`` by bisection.

:func:`acceptance_from_data` resolves a name ``MODEL:METHOD[:THINKING]`` (case-insensitive
substrings of the golden-AL rows) to rates for a chosen ``k``; the CLI's
``--acceptance-data`` uses it.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from simulator.config.errors import ConfigError
from simulator.config.speculative import al_iid

DATA_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "validation" / "speculative"


def data_dir(path: str | Path | None = None) -> Path:
    d = Path(path) if path else DATA_DIR
    if not d.is_dir():
        raise ConfigError("data", f"speculative data folder {d} not found",
                          "pass the path of ../shared/data/validation/speculative")
    return d


def read_rows(name: str, path: str | Path | None = None) -> list[dict[str, str]]:
    """One CSV of the folder as a list of dicts (strings as stored)."""
    with open(data_dir(path) / name, newline="") as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class AcceptanceCurve:
    """Mean AL by draft length for one model/method/thinking mode (InferenceX golden AL)."""

    model: str
    method: str
    thinking_mode: str
    al_by_k: tuple[tuple[int, float], ...]  # (k, AL), k ascending
    source: str

    @property
    def name(self) -> str:
        return f"{self.model}:{self.method}:{self.thinking_mode}"

    def rates(self, k: int) -> tuple[float, ...]:
        """Per-position conditional rates ``r_1..r_k`` reproducing the curve (k within it)."""
        return rates_from_al_curve(dict(self.al_by_k), k)


def golden_curves(path: str | Path | None = None) -> list[AcceptanceCurve]:
    """Every (model, method, thinking mode) AL curve of ``inferencex_golden_al.csv``."""
    groups: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    sources: dict[tuple[str, str, str], str] = {}
    for row in read_rows("inferencex_golden_al.csv", path):
        key = (row["model"], row["method"], row["thinking_mode"])
        groups.setdefault(key, []).append((int(row["num_speculative_tokens"]), float(row["mean_acceptance_length"])))
        sources[key] = row["source_path"]
    return [AcceptanceCurve(m, meth, t, tuple(sorted(v)), f"InferenceX {sources[(m, meth, t)]}")
            for (m, meth, t), v in groups.items()]


def rates_from_al_curve(al_by_k: dict[int, float], k: int) -> tuple[float, ...]:
    """Per-position rates from ``{k: AL(k)}`` over ``1..K`` (``AL(0) = 1``), for ``k <= K``.

    The increments ``d_j = AL(j) - AL(j-1)`` estimate ``P(a >= j)``, which cannot grow with
    ``j``; measured curves dip and recover (noise of 80 prompts), so the increments over the
    whole curve are fitted by the closest non-increasing sequence (pool-adjacent-violators,
    least squares: each pooled run keeps its sum, so AL at the run's ends is reproduced), then
    clipped to [0, 1]. A curve that never dips is reproduced exactly."""
    top = max(al_by_k)
    if k > top or any(j not in al_by_k for j in range(1, top + 1)):
        raise ConfigError("speculative.acceptance", f"the AL curve covers k=1..{top}, not k={k}",
                          f"use num_speculative_tokens <= {top}")
    d = [al_by_k[j] - (al_by_k[j - 1] if j > 1 else 1.0) for j in range(1, top + 1)]
    blocks: list[list[float]] = []  # [sum, count] runs, means non-increasing
    for x in d:
        blocks.append([x, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    reach = [min(1.0, max(0.0, s / c)) for s, c in blocks for _ in range(int(c))]
    rates, before = [], 1.0
    for p in reach[:k]:
        rates.append(p / before if before > 0 else 0.0)
        before = p
    return tuple(rates)


def iid_rate(al: float, k: int) -> float:
    """The i.i.d. acceptance rate ``a`` with ``(1 - a^(k+1)) / (1 - a) == al`` (``1 <= al <= k+1``)."""
    if not 1.0 <= al <= k + 1:
        raise ConfigError("speculative.acceptance", f"AL {al} is outside [1, k+1] for k={k}", "use a larger k")
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if al_iid(mid, k) < al:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def find_curve(name: str, path: str | Path | None = None) -> AcceptanceCurve:
    """The golden-AL curve named ``MODEL:METHOD[:THINKING]`` (case-insensitive substrings; the
    thinking mode defaults to thinking_on where both exist). One-line error if none or several match."""
    parts = [p.strip().lower() for p in name.split(":")]
    if len(parts) < 2 or not all(parts[:2]):
        raise ConfigError("--acceptance-data", f"{name!r} is not MODEL:METHOD[:THINKING]", "e.g. qwen3.5:mtp or kimi-k2.5:eagle3:thinking_off")
    curves = golden_curves(path)
    hits = [c for c in curves if parts[0] in c.model.lower() and parts[1] in c.method.lower()
            and (len(parts) < 3 or parts[2] in c.thinking_mode.lower())]
    if len(hits) > 1 and len(parts) < 3:
        on = [c for c in hits if c.thinking_mode == "thinking_on"]
        hits = on or hits
    if len(hits) > 1:  # prefer the plainest method name (e.g. 'EAGLE3' over 'EAGLE3 (GQA draft)')
        shortest = min(len(c.method) for c in hits)
        hits = [c for c in hits if len(c.method) == shortest]
    if len(hits) != 1:
        known = "; ".join(sorted({c.name for c in curves}))
        raise ConfigError("--acceptance-data", f"{name!r} matches {len(hits)} AL curves", f"known: {known}")
    return hits[0]


def acceptance_from_data(name: str, k: int, path: str | Path | None = None) -> tuple[tuple[float, ...], str]:
    """Per-position rates for ``k`` drafts from the named AL curve, and their source line."""
    curve = find_curve(name, path)
    return curve.rates(k), f"{curve.name} ({curve.source}), per-position rates from AL(1..{k})"


def measurements(path: str | Path | None = None) -> list[dict[str, str]]:
    """Every row of ``spec_decode_measurements.csv``."""
    return read_rows("spec_decode_measurements.csv", path)


def spec_bench(path: str | Path | None = None) -> list[dict[str, str]]:
    """Every row of ``spec_bench_leaderboard.csv`` (batch 1)."""
    return read_rows("spec_bench_leaderboard.csv", path)
