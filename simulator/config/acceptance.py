"""Speculative-decoding acceptance lengths from the data folder, as per-position rates.

``../shared/data/validation/speculative/`` (see its README) holds, per target model, drafting
method and dataset, the mean acceptance length (AL: tokens per verify step, bonus token
included) (and, for a few settings, measured speedups against load: :mod:`simulator.calibrate.speculative_data`
reads those). This module reads the ALs with
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
``--acceptance-data`` uses it. It sits in the config layer because option parsing resolves that
flag into the rates a :class:`~simulator.config.run_config.RunConfig` stores.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config.errors import ConfigError
from simulator.config.shared_data import SHARED_DATA
from simulator.config.speculative import SpeculativeConfig, al_iid, parse_rates, vllm_json_fields

DATA_DIR = SHARED_DATA / "validation" / "speculative"


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


# Option name (RunConfig.replace's ``speculative__<name>``) -> the command-line flag that sets it.
SPECULATIVE_FLAGS = {"vllm_json": "--speculative-config", "num_speculative_tokens": "--num-speculative-tokens",
                     "acceptance_rate": "--acceptance-rate", "acceptance_rates": "--acceptance-rates",
                     "acceptance_data": "--acceptance-data", "disable_by_batch_size": "--spec-disable-batch-size",
                     "reduce_k_batch_size": "--spec-reduce-k-batch-size"}
_OFF = ("off", "none", "null", "")
# An AL curve's method (its first word, lowercased) -> the run methods whose drafts it measures (others unchecked).
_CURVE_DRAFTERS = {"mtp": ("mtp",), "eagle3": ("eagle3", "eagle")}


def speculative_from_options(current: SpeculativeConfig | None, options: dict[str, Any]) -> SpeculativeConfig | None:
    """The run's :class:`SpeculativeConfig` after the speculative options (``SPECULATIVE_FLAGS``)
    are applied to ``current`` (a ``--config`` base's, or None).

    ``--speculative-config`` (vLLM's JSON, or ``off``) sets the drafter; without it the other
    flags change ``current``'s, and there must be one. At most one acceptance form is given
    (``--acceptance-rate`` i.i.d., ``--acceptance-rates`` per position, ``--acceptance-data
    MODEL:METHOD`` from the data folder's AL curves); without any, the JSON's or ``current``'s
    rates stay (equal rates, i.e. i.i.d., follow a changed k)."""
    bad = sorted(set(options) - set(SPECULATIVE_FLAGS))
    if bad:
        raise ConfigError(f"speculative.{bad[0]}", "unknown option", f"known: {', '.join(SPECULATIVE_FLAGS)}")
    given = {k: v for k, v in options.items() if v is not None}
    text = given.pop("vllm_json", None)
    if text is not None and str(text).strip().lower() in _OFF:
        if given:
            raise ConfigError(SPECULATIVE_FLAGS[sorted(given)[0]], "given with --speculative-config off",
                              "drop it, or give --speculative-config a JSON object")
        return None
    if text is not None:
        fields = vllm_json_fields(str(text))
    elif current is not None:
        fields = current.to_dict()
        fields["acceptance_rates"] = tuple(fields["acceptance_rates"])
    elif given:
        flag = SPECULATIVE_FLAGS[sorted(given)[0]]
        raise ConfigError(flag, "needs --speculative-config (which drafter)",
                          """add e.g. --speculative-config '{"method": "eagle3", "num_speculative_tokens": 3}'""")
    else:
        return current
    if "num_speculative_tokens" in given:
        fields["num_speculative_tokens"] = given["num_speculative_tokens"]
    for name in ("disable_by_batch_size", "reduce_k_batch_size"):
        if name in given:
            fields[name] = given[name]
    forms = [n for n in ("acceptance_rate", "acceptance_rates", "acceptance_data") if n in given]
    if len(forms) > 1:
        raise ConfigError(SPECULATIVE_FLAGS[forms[1]], f"given with {SPECULATIVE_FLAGS[forms[0]]}",
                          "give one of --acceptance-rate, --acceptance-rates and --acceptance-data")
    k = fields["num_speculative_tokens"]
    if forms == ["acceptance_rate"]:
        rate = given["acceptance_rate"]
        fields["acceptance_rates"] = (float(rate),)
        fields["acceptance_source"] = f"--acceptance-rate {rate:g} (i.i.d.)"
    elif forms == ["acceptance_rates"]:
        raw = given["acceptance_rates"]
        fields["acceptance_rates"] = parse_rates(raw) if isinstance(raw, str) else tuple(float(r) for r in raw)
        fields["acceptance_source"] = "--acceptance-rates (per position)"
    elif forms == ["acceptance_data"]:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ConfigError("--num-speculative-tokens", f"must be an integer >= 1, got {k!r}")
        curve = find_curve(str(given["acceptance_data"]))
        drafter = _CURVE_DRAFTERS.get(curve.method.split(" ")[0].lower())
        if drafter is not None and fields["method"] not in drafter:
            raise ConfigError("--acceptance-data", f"{curve.name} is the acceptance of {curve.method} drafts, but the run "
                              f"drafts with {fields['method']}", f"pick a curve of {fields['method']} drafts, or --speculative-config "
                              f"method {drafter[0]}")
        fields["acceptance_rates"], fields["acceptance_source"] = acceptance_from_data(str(given["acceptance_data"]), k)
    else:
        rates = fields["acceptance_rates"]
        if len(rates) > 1 and len(set(rates)) == 1:  # i.i.d.: one rate, repeated to the (new) k
            fields["acceptance_rates"] = rates[:1]
    try:
        return SpeculativeConfig(**fields)
    except ConfigError as err:  # the flag typed, not the config's field (--acceptance-rate 1.2 named
        # speculative.acceptance_rates; an audit); a field the JSON or a --config gave keeps its name
        name = err.field.removeprefix("speculative.")
        option = forms[0] if name == "acceptance_rates" and forms else name
        if option in given and option in SPECULATIVE_FLAGS:
            raise ConfigError(SPECULATIVE_FLAGS[option], err.problem, err.fix) from None
        raise
