"""Workloads: where requests come from.

A workload is a *length source* (how many prompt and output tokens each request has)
combined with an *arrival process* (when each request arrives). :func:`generate_requests`
turns a :class:`~simulator.config.run_config.WorkloadConfig` and a seeded ``numpy.random.Generator``
into a :class:`RequestTable` of plain arrays that the engine replays.

Length sources
    ``fixed``      every request has ``prompt_tokens`` / ``output_tokens``; with ``range_ratio``
                   r > 0, each is drawn uniformly in ``[len*(1-r), len*(1+r)]`` (``random``,
                   ``vllm bench``'s name, is the same source); with ``range_style`` ``sglang``,
                   in ``[len*r, len]`` as SGLang's ``bench_serving`` (and InferenceX's client) read r;
                   with ``prompt_tokens_stddev`` / ``output_tokens_stddev`` > 0, each is drawn from a
                   normal distribution around it, rounded (AIPerf's ``--isl-stddev``/``--osl-stddev``).
    ``uniform``    integers drawn uniformly from ``[prompt_tokens, prompt_tokens_max]`` and
                   ``[output_tokens, output_tokens_max]`` (a missing max means fixed).
    ``sharegpt``   built in, no files needed: a 2-D log-spaced histogram of the joint
                   (prompt, output) lengths of Sarathi-Serve's openchat_sharegpt4 trace
                   (reproduces its Table 2: prompt median 1730 / P90 5696, output 415 / 834).
    ``arxiv``      built in: lognormal marginals with a Gaussian copula, fitted to
                   Sarathi-Serve Table 2's arxiv-summarization statistics (prompt 7059 /
                   12985, output 208 / 371) under the trace's 16k total-length filter.
    a trace file   Vidur/Sarathi processed CSV, Azure LLM inference trace CSV, or JSONL
                   with token counts (see ``traces/README.md``); format detected from the
                   extension and the column names.

The built-ins' data live in ``simulator/data/builtin_workloads.json``, derived by
``traces/derive_builtin.py``, which names the source file and its git blob id.

Arrival processes
    ``poisson`` exponential gaps of mean ``1/qps``; ``gamma`` gamma gaps of mean ``1/qps``
    and coefficient of variation ``cv`` (shape ``1/cv**2``; cv=1 is Poisson, cv>1 burstier);
    ``fixed`` constant gaps ``1/qps``; ``burst`` everything at t=0; ``trace`` the file's own
    timestamps, shifted to start at 0 and divided by ``time_scale``. Renewal processes
    start at t=0 and the first request arrives after one gap.

Max-length filtering follows the papers: requests with ``prompt + output >
max_total_tokens`` are removed from the *source* before sampling (trace rows are
dropped; built-in, uniform and normally spread draws are resampled until enough remain), so the
sample is the source distribution conditioned on the limit. Fixed lengths over it, and a
``range_ratio`` band whose top is over it, are refused instead: a benchmark client sends them
as asked, and the server refuses the longer requests. With ``over_length="clip"`` a
trace row over the limit is instead shortened the way Vidur's trace length generator
does it (:func:`clip_lengths`), so the same trace gives the same requests in both tools. Nothing else is ever dropped: a
malformed trace row is a :class:`~simulator.config.errors.ConfigError` naming its line.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
import os
from collections.abc import Callable, Container
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.config.errors import ConfigError
from simulator.config.json_types import loads_once
from simulator.config.limits import MAX_ARRIVAL_S, MAX_TOKENS
from simulator.config.run_config import WorkloadConfig
from simulator.workload.prefix_traces import READ_ERRORS, zero_output_note

BUILTIN_NAMES = ("sharegpt", "arxiv")
LONG_CONTEXT = "long-context"  # prompts log-uniform in [32K, 128K - output], outputs uniform in [128, 1024]
LENGTH_SOURCES = ("fixed", "random", "uniform", *BUILTIN_NAMES, LONG_CONTEXT)  # random: vllm bench's name for fixed
BUILTIN_DATA = "builtin_workloads.json"

# Accepted column / key names (matched case-insensitively), in priority order.
PROMPT_KEYS = ("num_prefill_tokens", "num_prompt_tokens", "prompt_tokens", "input_toks", "input_tokens", "contexttokens")
OUTPUT_KEYS = ("num_decode_tokens", "num_output_tokens", "output_tokens", "output_toks", "generated_tokens",
               "generatedtokens")
# Timestamp keys and how to turn them into seconds: seconds, nanoseconds, or a datetime string.
TIME_KEYS = {"arrived_at": "s", "arrival_time_ns": "ns", "timestamp": "datetime"}

if TYPE_CHECKING:  # pandas loads only to export a table or to read (and report on) an unusual trace
    import pandas as pd

    from simulator.workload.prefix_traces import PrefixTrace

_FIELD = "workload.trace"
_MAX_RESAMPLE_ROUNDS = 64


# ---------------------------------------------------------------------------------------------
# The result


@dataclass(frozen=True)
class RequestTable:
    """The requests of one run, as parallel arrays (request i = index i).

    Contract: all three arrays have the same length; ``arrival_at`` is float64 seconds,
    non-decreasing and >= 0; token counts are int64 and > 0. Arrays are read-only.
    ``source`` says in words where lengths and arrivals came from. A trace that names its
    prompts' prefix blocks (:mod:`simulator.workload.prefix_traces`) adds ``block_hashes`` (one
    int64 array per request, each id covering ``hash_block_size`` tokens and all before them)
    and ``session_id`` (-1: none); otherwise they are None. Closed-loop session traffic
    (:mod:`simulator.workload.sessions`) adds ``think_s``: a session's request is sent that long
    after its previous one finished (NaN for a session's first request, sent at ``arrival_at``;
    later requests' ``arrival_at`` are then only placeholders). ``after`` (with ``think_s``) names the
    request whose end releases each one instead (its row, earlier than its own; -1 for a first request): a
    session whose requests do not wait one for the next (a Claude Code session's side calls and sub-agents).
    """

    arrival_at: np.ndarray
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray
    source: str
    block_hashes: tuple[np.ndarray, ...] | None = None
    hash_block_size: int = 0
    session_id: np.ndarray | None = None
    think_s: np.ndarray | None = None
    after: np.ndarray | None = None
    length_source: str | None = None  # what drew the lengths alone (``source`` says the arrivals too)

    def __post_init__(self) -> None:
        arrival = np.array(self.arrival_at, dtype=np.float64)
        prompt = np.array(self.num_prompt_tokens, dtype=np.int64)
        output = np.array(self.num_output_tokens, dtype=np.int64)
        if not (arrival.ndim == prompt.ndim == output.ndim == 1 and len(arrival) == len(prompt) == len(output)):
            raise ConfigError("requests", f"arrays must be 1-D and equally long, got {arrival.shape}, "
                              f"{prompt.shape}, {output.shape}")
        if len(arrival) and (not np.all(np.isfinite(arrival)) or arrival[0] < 0 or np.any(np.diff(arrival) < 0)):
            raise ConfigError("requests", "arrival_at must be finite, >= 0 and non-decreasing")
        if len(arrival) and arrival[-1] > MAX_ARRIVAL_S:
            raise ConfigError("requests", f"arrivals reach {arrival[-1]:.3g} s, past {MAX_ARRIVAL_S:g} s (~31 years), "
                              "where a timestamp no longer resolves a microsecond of latency",
                              "raise --qps, send fewer requests, or (a trace) raise --time-scale or drop its far rows")
        if np.any(prompt <= 0) or np.any(output <= 0):
            raise ConfigError("requests", "token counts must be > 0")
        for name, arr in (("arrival_at", arrival), ("num_prompt_tokens", prompt), ("num_output_tokens", output)):
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        if self.block_hashes is not None:
            if len(self.block_hashes) != len(arrival) or self.hash_block_size <= 0:
                raise ConfigError("requests", f"{len(self.block_hashes)} block hash lists for {len(arrival)} requests "
                                  f"(hash_block_size {self.hash_block_size})", "give one per request and a block size > 0")
            object.__setattr__(self, "block_hashes", tuple(self.block_hashes))
        if self.session_id is not None:
            sessions = np.array(self.session_id, dtype=np.int64)
            if sessions.shape != arrival.shape:
                raise ConfigError("requests", f"session_id has shape {sessions.shape}, arrivals {arrival.shape}")
            sessions.setflags(write=False)
            object.__setattr__(self, "session_id", sessions)
        if self.think_s is not None:
            think = np.array(self.think_s, dtype=np.float64)
            if self.session_id is None or think.shape != arrival.shape or np.any(think < 0):
                raise ConfigError("requests", "think_s needs session_id and one delay >= 0 (or NaN) per request")
            if len(think):
                # A turn waits for its session's one before it: the sends reach at most the latest recorded arrival
                # plus the longest session's thinks (a trace of many short sessions is no long one)
                _, which = np.unique(np.asarray(self.session_id), return_inverse=True)
                longest = float(np.bincount(which, weights=np.nan_to_num(think)).max())
                if longest + float(np.max(arrival)) > MAX_ARRIVAL_S:
                    raise ConfigError("requests", f"a session's think times add up to {longest:.3g} s, past "
                                      f"{MAX_ARRIVAL_S:g} s (~31 years)", "fix the sessions' think times")
            think.setflags(write=False)
            object.__setattr__(self, "think_s", think)
        if self.after is not None:
            after = np.array(self.after, dtype=np.int64)
            if (self.think_s is None or after.shape != arrival.shape
                    or np.any(after >= np.arange(len(after))) or np.any(after < -1)
                    or not np.array_equal(after < 0, np.isnan(self.think_s))):
                raise ConfigError("requests", "after needs think_s and one earlier row per request (-1 where "
                                  "think_s is NaN: a first request)")
            after.setflags(write=False)
            object.__setattr__(self, "after", after)

    def __len__(self) -> int:
        return len(self.arrival_at)

    def to_frame(self) -> pd.DataFrame:
        """One row per request: ``request_id, arrival_at, num_prompt_tokens, num_output_tokens``."""
        import pandas as pd

        return pd.DataFrame({
            "request_id": np.arange(len(self), dtype=np.int64),
            "arrival_at": self.arrival_at,
            "num_prompt_tokens": self.num_prompt_tokens,
            "num_output_tokens": self.num_output_tokens,
        })


# ---------------------------------------------------------------------------------------------
# Entry point


def generate_requests(cfg: WorkloadConfig, rng: np.random.Generator) -> RequestTable:
    """Draw ``cfg.num_requests`` requests: lengths first, then arrivals, from ``rng``.

    Same ``cfg`` and same generator state give identical arrays.
    """
    n = cfg.num_requests
    arrival_override: np.ndarray | None = None
    if cfg.trace is not None:
        from simulator.workload.prefix_traces import read_prefix_trace

        # Mooncake JSONL, Weka sessions: with block hash ids (and, replayed closed, the sessions' links)
        hashed = read_prefix_trace(cfg.trace, closed=cfg.session_replay == "closed")
        if hashed is not None:
            return prefix_trace_table(cfg, hashed, rng)
        if cfg.session_replay == "closed":
            raise _no_sessions(cfg)
        prompt, output, arrival_override, length_desc = _lengths_from_trace(cfg, rng)
    elif cfg.name in BUILTIN_NAMES:
        prompt, output, length_desc = _lengths_from_builtin(cfg, rng)
    elif cfg.name in ("fixed", "random") and cfg.is_banded:
        prompt, output, length_desc = _lengths_banded(cfg, rng)
    elif cfg.name in ("fixed", "random") and cfg.is_spread:
        prompt, output, length_desc = _lengths_spread(cfg, rng)
    elif cfg.name in ("fixed", "random"):
        _check_total("fixed", cfg.prompt_tokens + cfg.output_tokens, cfg.max_total_tokens)
        prompt = np.full(n, cfg.prompt_tokens, dtype=np.int64)
        output = np.full(n, cfg.output_tokens, dtype=np.int64)
        length_desc = f"{cfg.name} {cfg.prompt_tokens} prompt / {cfg.output_tokens} output tokens"  # as named: vllm bench's random is fixed lengths too
    elif cfg.name == "uniform":
        prompt, output, length_desc = _lengths_uniform(cfg, rng)
    elif cfg.name == LONG_CONTEXT:
        prompt, output, length_desc = _lengths_long_context(cfg, rng)
    else:
        raise ConfigError("workload.name", f"unknown workload {cfg.name!r}",
                          f"known: {', '.join(LENGTH_SOURCES)}; or pass --trace PATH")

    if cfg.arrival == "trace":
        assert arrival_override is not None  # _lengths_from_trace guarantees it for trace arrivals
        arrival = arrival_override
        scale = f" / {cfg.time_scale:g}" if cfg.time_scale != 1 else ""
        arrival_desc = f"trace timestamps{scale}"
    else:
        arrival, arrival_desc = _arrivals(cfg, n, rng)
    return RequestTable(arrival, prompt, output, f"{length_desc}, {arrival_desc}", length_source=length_desc)


def _normalized(cfg: WorkloadConfig, arrival: np.ndarray, n: int, desc: str) -> tuple[np.ndarray, str]:
    """``arrival`` rescaled so the last lands at ``n / qps`` where the config asks (vllm bench serve's rescale);
    a scale of every time by one factor, so a capacity search's trials still scale one draw by 1/qps."""
    if not cfg.normalize_arrivals or not n or arrival[-1] <= 0:
        return arrival, desc
    return arrival * ((n / cfg.qps) / arrival[-1]), f"{desc}, rescaled to end at {n / cfg.qps:g} s (vllm bench)"


def _arrivals(cfg: WorkloadConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    mean_gap = 1.0 / cfg.qps if cfg.qps else 0.0
    if cfg.arrival == "poisson":
        gaps = rng.exponential(mean_gap, n)
        return _normalized(cfg, np.cumsum(gaps), n, f"poisson {cfg.qps:g} qps")
    if cfg.arrival == "gamma":
        shape = 1.0 / cfg.cv**2  # CV of a gamma variable is 1/sqrt(shape)
        gaps = rng.gamma(shape, mean_gap / shape, n)
        return _normalized(cfg, np.cumsum(gaps), n, f"gamma {cfg.qps:g} qps cv {cfg.cv:g}")
    if cfg.arrival == "fixed":
        return np.arange(1, n + 1, dtype=np.float64) * mean_gap, f"fixed {cfg.qps:g} qps"
    if cfg.arrival == "burst":
        return np.zeros(n), "burst (all at t=0)"
    raise ConfigError("workload.arrival", f"unknown arrival process {cfg.arrival!r}")  # config validates this


# ---------------------------------------------------------------------------------------------
# Synthetic and built-in lengths


def _check_total(what: str, min_total: int, limit: int | None) -> None:
    if limit is not None and min_total > limit:
        raise ConfigError("workload.max_total_tokens", f"{what} requests have at least {min_total} tokens, "
                          f"above max_total_tokens={limit}", f"raise --max-total-tokens to >= {min_total}")


def _draw_filtered(draw: Callable[[int, np.random.Generator], tuple[np.ndarray, np.ndarray]], n: int, limit: float,
                   rng: np.random.Generator, what: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Rejection sampling: draw batches with ``draw(k, rng)`` until ``n`` pairs have total <= limit; also how
    many draws before the ``n``-th kept one were over the limit and redrawn (for the source line)."""
    prompts: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    have, drawn, kept = 0, 0, 0
    for _ in range(_MAX_RESAMPLE_ROUNDS):
        # Size the batch from the acceptance rate seen so far (a first batch of n + margin).
        rate = kept / drawn if drawn else 1.0
        if drawn >= 1_000_000 and rate < 1e-3:
            break  # a limit that keeps under 0.1% of the source is a mistake, not a workload
        k = min(int((n - have) / max(rate, 1e-3) * 1.1) + 16, 4_000_000)
        p, o = draw(k, rng)
        ok = p + o <= limit
        drawn += k
        kept += int(ok.sum())
        prompts.append(p[ok])
        outputs.append(o[ok])
        if have + int(ok.sum()) >= n:
            # this batch's draws up to its (n - have)-th kept one were used; the rest of it never was
            used = drawn - k + int(np.flatnonzero(ok)[n - have - 1]) + 1
            return np.concatenate(prompts)[:n], np.concatenate(outputs)[:n], used - n
        have += int(ok.sum())
    raise ConfigError("workload.max_total_tokens", f"max_total_tokens={limit:g} keeps only {kept} of {drawn} "
                      f"{what} draws", "raise --max-total-tokens")


def _lengths_uniform(cfg: WorkloadConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    p_lo, o_lo = cfg.prompt_tokens, cfg.output_tokens
    p_hi = cfg.prompt_tokens_max or p_lo
    o_hi = cfg.output_tokens_max or o_lo
    _check_total("uniform", p_lo + o_lo, cfg.max_total_tokens)

    def draw(k: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return g.integers(p_lo, p_hi, k, endpoint=True), g.integers(o_lo, o_hi, k, endpoint=True)

    limit = cfg.max_total_tokens if cfg.max_total_tokens is not None else math.inf
    prompt, output, _ = _draw_filtered(draw, cfg.num_requests, limit, rng, "uniform")
    desc = f"uniform prompt [{p_lo}, {p_hi}] / output [{o_lo}, {o_hi}] tokens"
    if cfg.max_total_tokens is not None:
        desc += f" (total <= {cfg.max_total_tokens})"
    return prompt.astype(np.int64), output.astype(np.int64), desc


def band(length: int, ratio: float, at_least: int = 1, style: str = "vllm") -> tuple[int, int]:
    """The integers a benchmark client draws ``length`` from under ``--random-range-ratio ratio``,
    the lower end at least ``at_least``: ``vllm bench``'s ``[floor(length * (1 - ratio)),
    ceil(length * (1 + ratio))]``, or (``style`` ``sglang``) SGLang's ``bench_serving``
    ``[int(length * ratio), length]``."""
    if style == "sglang":
        return max(int(length * ratio), at_least), max(length, at_least)
    return max(math.floor(length * (1 - ratio)), at_least), max(math.ceil(length * (1 + ratio)), at_least)


def _lengths_banded(cfg: WorkloadConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """Fixed lengths banded by ``range_ratio`` (``--random-range-ratio``, read as ``range_style``'s
    client reads it): prompt and output drawn uniformly from :func:`band` of each, prompts first,
    as both clients draw them.

    A band whose top (longest prompt + longest output) is over ``max_total_tokens`` (the model's
    context, unless given) is refused, as fixed lengths over it are: the client draws the whole band,
    and a server of that context refuses the longer requests (vLLM answers them with a 400), so a
    band redrawn under the limit (once done silently: 4000 +- 10% under 4096 gave a mean prompt of
    3,747) is not the workload the client sends."""
    p_lo, p_hi = band(cfg.prompt_tokens, cfg.range_ratio, style=cfg.range_style)
    o_lo, o_hi = band(cfg.output_tokens, cfg.range_ratio, style=cfg.range_style)
    style = "" if cfg.range_style == "vllm" else f" as {cfg.range_style} reads it"
    if cfg.max_total_tokens is not None and p_hi + o_hi > cfg.max_total_tokens:
        limit = cfg.max_total_tokens
        raise ConfigError("workload.range_ratio", f"{cfg.range_ratio:g}{style} draws prompts in [{p_lo}, {p_hi}] and "
                          f"outputs in [{o_lo}, {o_hi}], up to {p_hi + o_hi} tokens, above the {limit} a request may "
                          "hold (--max-total-tokens, else the model's context): a server refuses the longer ones "
                          "(vLLM: a 400)", f"narrow --random-range-ratio or lower --prompt-tokens/"
                          f"--output-tokens to a top of at most {limit} tokens, or raise --max-model-len")

    def draw(k: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return g.integers(p_lo, p_hi, k, endpoint=True), g.integers(o_lo, o_hi, k, endpoint=True)

    prompt, output, _ = _draw_filtered(draw, cfg.num_requests, math.inf, rng, "banded")
    desc = (f"random {cfg.prompt_tokens} prompt / {cfg.output_tokens} output tokens, range ratio "
            f"{cfg.range_ratio:g}{style} ([{p_lo}, {p_hi}] / [{o_lo}, {o_hi}])")
    return prompt.astype(np.int64), output.astype(np.int64), desc


def _lengths_spread(cfg: WorkloadConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """Fixed lengths spread as AIPerf's and genai-perf's synthetic prompts are (``--isl-stddev``,
    ``--osl-stddev``): each drawn from a normal distribution around the length, rounded to a whole
    token and at least 1; prompt and output drawn side by side, prompts first. A zero deviation
    leaves that length exact (no draw: the other length's draws are the same either way). A normal
    spread has no top to refuse, as a band over ``max_total_tokens`` is; a draw over it (one a server
    of that context would refuse) is redrawn, and the source line says how many were."""
    _check_total("spread", 2, cfg.max_total_tokens)

    def one(length: int, sd: float, k: int, g: np.random.Generator) -> np.ndarray:
        if sd <= 0:
            return np.full(k, length, dtype=np.int64)
        return np.maximum(np.rint(g.normal(length, sd, k)), 1).astype(np.int64)

    def draw(k: int, g: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        prompt = one(cfg.prompt_tokens, cfg.prompt_tokens_stddev, k, g)
        return prompt, one(cfg.output_tokens, cfg.output_tokens_stddev, k, g)

    limit = cfg.max_total_tokens if cfg.max_total_tokens is not None else math.inf
    prompt, output, redrawn = _draw_filtered(draw, cfg.num_requests, limit, rng, "spread")
    desc = (f"{cfg.name} {cfg.prompt_tokens} prompt / {cfg.output_tokens} output tokens, standard deviation "
            f"{cfg.prompt_tokens_stddev:g} / {cfg.output_tokens_stddev:g}")
    if redrawn:
        drawn = cfg.num_requests + redrawn
        desc += (f" (warning: {redrawn:,} of {drawn:,} draws ({redrawn / drawn:.1%}) were over the {limit}-token "
                 "limit and redrawn: a server of that context would refuse them)")
    return prompt, output, desc


def _lengths_long_context(cfg: WorkloadConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    """Long-context planning workload (RAG, code and document QA at 128K windows): prompt lengths
    log-uniform between 32,768 and 131,072 tokens minus the output, outputs uniform in [128, 1024];
    ``max_total_tokens`` lowers the ceiling (e.g. for a model with a shorter context)."""
    limit = min(cfg.max_total_tokens or 131072, 131072)
    lo = 32768
    _check_total(LONG_CONTEXT, lo + 128, limit)
    output = rng.integers(128, 1024, cfg.num_requests, endpoint=True)
    hi = limit - output  # >= lo + 128 - 1024 ... clip so every request fits
    prompt = np.exp(rng.uniform(np.log(lo), np.log(np.maximum(hi, lo + 1)), cfg.num_requests))
    prompt = np.minimum(np.floor(prompt), hi).astype(np.int64)
    output = np.minimum(output, limit - prompt).astype(np.int64)
    return prompt, output, f"long-context prompts log-uniform [{lo}, {limit} - output] / output [128, 1024] tokens"


@functools.cache
def builtin_data() -> dict[str, Any]:
    """The shipped built-in length distributions (``simulator/data/builtin_workloads.json``)."""
    text = resources.files("simulator").joinpath("data", BUILTIN_DATA).read_text(encoding="utf-8")
    return json.loads(text)


class _LogHistogram2D:
    """Joint (prompt, output) histogram over integer bins; sampling keeps the joint bin mass.

    Bin ``i`` of an axis holds the integers ``edges[i] .. edges[i+1]-1``. A sample picks a
    cell by its count, then each coordinate log-uniformly among that bin's integers. The
    source was filtered at ``max_total_tokens``; a draw above it is redrawn *within its cell*
    (every cell's low corner fits, since source rows lie there), so cell masses -- and with
    them the marginals' upper quantiles -- are kept rather than thinned by rejection.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.prompt_edges = np.asarray(spec["prompt_edges"], dtype=np.int64)
        self.output_edges = np.asarray(spec["output_edges"], dtype=np.int64)
        self.max_total_tokens = int(spec["max_total_tokens"])
        counts = np.asarray(spec["counts"], dtype=np.float64)
        assert counts.shape == (len(self.prompt_edges) - 1, len(self.output_edges) - 1)
        self.cdf = np.cumsum(counts.ravel()) / counts.sum()
        self.num_output_bins = counts.shape[1]
        self.min_total = int(self.prompt_edges[0] + self.output_edges[0])

    @staticmethod
    def _within(edges: np.ndarray, idx: np.ndarray, u: np.ndarray) -> np.ndarray:
        lo = edges[idx].astype(np.float64)
        hi = edges[idx + 1].astype(np.float64)
        x = np.floor(np.exp(np.log(lo) + u * (np.log(hi) - np.log(lo))))
        return np.clip(x, lo, hi - 1).astype(np.int64)  # clip guards the float round-off at hi

    def sample(self, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        cell = np.searchsorted(self.cdf, rng.random(k), side="right")
        cell = np.minimum(cell, len(self.cdf) - 1)
        pi, oi = np.divmod(cell, self.num_output_bins)
        u = rng.random((2, k))
        prompt = self._within(self.prompt_edges, pi, u[0])
        output = self._within(self.output_edges, oi, u[1])
        for _ in range(_MAX_RESAMPLE_ROUNDS):
            over = np.flatnonzero(prompt + output > self.max_total_tokens)
            if not len(over):
                break
            u = rng.random((2, len(over)))
            prompt[over] = self._within(self.prompt_edges, pi[over], u[0])
            output[over] = self._within(self.output_edges, oi[over], u[1])
        else:  # practically unreachable; the cell's low corner always fits
            over = prompt + output > self.max_total_tokens
            prompt[over] = self.prompt_edges[pi[over]]
            output[over] = self.output_edges[oi[over]]
        return prompt, output


class _LognormalCopula:
    """Lognormal marginals joined by a Gaussian copula with correlation ``rho``; rounded, >= 1."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.mu = np.array([spec["prompt"]["log_mu"], spec["output"]["log_mu"]])
        self.sigma = np.array([spec["prompt"]["log_sigma"], spec["output"]["log_sigma"]])
        self.rho = float(spec["rho"])
        self.min_total = 2

    def sample(self, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        z = rng.standard_normal((2, k))
        z1 = self.rho * z[0] + math.sqrt(1.0 - self.rho**2) * z[1]
        prompt = np.maximum(np.rint(np.exp(self.mu[0] + self.sigma[0] * z[0])), 1).astype(np.int64)
        output = np.maximum(np.rint(np.exp(self.mu[1] + self.sigma[1] * z1)), 1).astype(np.int64)
        return prompt, output


@functools.cache
def _builtin_sampler(name: str) -> tuple[Any, int, str]:
    spec = builtin_data()[name]
    sampler = _LogHistogram2D(spec) if spec["kind"] == "log_histogram_2d" else _LognormalCopula(spec)
    return sampler, int(spec["max_total_tokens"]), spec["label"]


def _lengths_from_builtin(cfg: WorkloadConfig, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, str]:
    sampler, source_limit, label = _builtin_sampler(cfg.name)
    # The source itself was filtered at source_limit total tokens; a tighter user limit applies on top.
    limit = min(source_limit, cfg.max_total_tokens or source_limit)
    _check_total(cfg.name, sampler.min_total, limit)
    prompt, output, _ = _draw_filtered(sampler.sample, cfg.num_requests, limit, rng, cfg.name)
    desc = f"{cfg.name} ({label})"
    if limit < source_limit:
        desc += f", total <= {limit}"
    return prompt, output, desc


# ---------------------------------------------------------------------------------------------
# Trace files


@dataclass(frozen=True)
class TraceData:
    """A validated trace: token counts per row and, when the file has them, arrival seconds.

    ``arrival_s`` is relative to the file's first row (non-decreasing, >= 0) or ``None``.
    """

    path: str
    fmt: str
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray
    arrival_s: np.ndarray | None
    columns: tuple[str, ...]
    note: str = ""  # what the reader changed, for the source line (rows of 0 output tokens given 1)

    def __len__(self) -> int:
        return len(self.num_prompt_tokens)


def load_trace(path: str | os.PathLike[str]) -> TraceData:
    """Read and validate a trace file (cached per path, size and modification time)."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        raise ConfigError(_FIELD, f"{path}: no such file", "check the path given to --trace") from None
    if p.is_dir():  # (a folder of any *.json file is read as sessions before this: prefix_traces)
        raise ConfigError(_FIELD, f"{path}: the folder holds no *.json (or *.json.gz) session files",
                          "pass a folder of Claude Code session files, as ../shared/data/traces/weka_claude_code/"
                          "sessions, or a CSV or JSONL trace file")
    if not p.is_file():
        raise ConfigError(_FIELD, f"{path}: not a file", "pass a CSV or JSONL trace file, or a folder of Claude "
                          "Code session files (e.g. ../shared/data/traces/weka_claude_code/sessions)")
    return _load_trace_cached(str(p.resolve()), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _load_trace_cached(path: str, _mtime_ns: int, size: int) -> TraceData:
    if size == 0:
        raise ConfigError(_FIELD, f"{path}: file is empty", "pass a trace with a header and at least one row")
    name = path.lower().removesuffix(".gz")
    if name.endswith((".jsonl", ".ndjson", ".json")):
        data = _read_jsonl(path)
    elif name.endswith(".csv"):
        data = _read_csv(path)
    else:
        raise ConfigError(_FIELD, f"{path}: unknown trace format (extension {Path(name).suffix or 'none'})",
                          "use a .csv (Vidur/Sarathi or Azure columns) or .jsonl file")
    for arr in (data.num_prompt_tokens, data.num_output_tokens, data.arrival_s):
        if arr is not None:
            arr.setflags(write=False)  # shared through the cache
    return data


def _pick(columns: list[str], keys: tuple[str, ...] | dict[str, str], path: str, what: str) -> str | None:
    """The one column among ``columns`` that matches ``keys`` (case-insensitively), or None."""
    found = [c for c in columns if c.strip().lower() in keys]
    if len(found) > 1:
        raise ConfigError(_FIELD, f"{path}: columns {found} all give {what}", "keep only one of them")
    return found[0] if found else None


def _columns_error(path: str, columns: list[str], where: str = "columns") -> ConfigError:
    shown = ", ".join(map(str, columns[:8])) + (", ..." if len(columns) > 8 else "")
    return ConfigError(_FIELD, f"{path}: unknown trace format, {where} [{shown}]",
                       "need num_prefill_tokens,num_decode_tokens[,arrived_at] (Vidur/Sarathi) or "
                       "TIMESTAMP,ContextTokens,GeneratedTokens (Azure) or JSONL input_toks/output_toks, or Mooncake's JSONL "
                       "timestamp/input_length/output_length with hash_ids (its prefix blocks)")


def _one_line(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _missing(value: object) -> bool:
    """An empty cell (None, NaN); a JSONL line's list or object is a value, not a missing one (pd.isna of a list is
    a list)."""
    import pandas as pd

    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def _validate_lengths(raw: pd.Series, col: str, lines: np.ndarray, path: str, zero_ok: bool = False) -> np.ndarray:
    """Token counts: numeric, integral, > 0 (>= 0 with ``zero_ok``: output lengths, whose 0s
    :func:`_zero_outputs_given_one` turns to 1); otherwise a ConfigError naming the line and column."""
    import pandas as pd

    values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(values)
    if bad.any():
        i = int(np.argmax(bad))
        shown = "empty or NaN value" if _missing(raw.iloc[i]) else f"{_one_line(raw.iloc[i])} is not a number"
        raise ConfigError(_FIELD, f"{path}: line {lines[i]}, column {col}: {shown}", "give a positive integer token count")
    bad = (values < 0 if zero_ok else values <= 0) | (values != np.floor(values)) | ~np.isfinite(values)
    if bad.any():
        i = int(np.argmax(bad))
        what = "an integer token count >= 0" if zero_ok else "a positive integer token count"
        raise ConfigError(_FIELD, f"{path}: line {lines[i]}, column {col}: {raw.iloc[i]!s} is not {what}",
                          "fix or delete that row")
    bad = values > MAX_TOKENS  # (past 2^63 the cast below wraps to a negative count)
    if bad.any():
        i = int(np.argmax(bad))
        raise ConfigError(_FIELD, f"{path}: line {lines[i]}, column {col}: {raw.iloc[i]!s} tokens is beyond any "
                          f"model's context (at most {MAX_TOKENS:,})", "fix or delete that row")
    return values.astype(np.int64)


def _zero_outputs_given_one(output: np.ndarray) -> tuple[np.ndarray, str]:
    """A trace's output lengths with each 0 given 1, and the source line's note saying how many: the
    Weka and Mooncake readers' rule (:func:`~simulator.workload.prefix_traces.output_tokens`), so that a
    log's few requests answered with no token (27 of Weka's 49,334 rows) do not refuse the whole file."""
    zero = output == 0
    return np.where(zero, 1, output), zero_output_note(int(zero.sum()))


def _validate_times(raw: pd.Series, col: str, unit: str, lines: np.ndarray, path: str) -> np.ndarray:
    """Arrival seconds relative to the first row; numeric/parseable, >= 0, non-decreasing."""
    import pandas as pd

    if unit == "datetime":
        try:
            stamps = pd.to_datetime(raw, format="ISO8601", errors="coerce")
        except (ValueError, TypeError):  # pandas refuses a column whose rows mix UTC offsets (or none)
            raise ConfigError(_FIELD, f"{path}: column {col}: its date-times mix time zones (some rows with a UTC "
                              "offset, some without, or different offsets)", "give every row the same form") from None
        bad = stamps.isna().to_numpy()
        if bad.any():
            i = int(np.argmax(bad))
            raise ConfigError(_FIELD, f"{path}: line {lines[i]}, column {col}: {_one_line(raw.iloc[i])} is not a "
                              "date-time", f"use ISO format like 2023-11-16 18:15:46.680590 in {col}, or name a column "
                              "of seconds arrived_at")
        seconds = (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy(dtype=np.float64)
    else:
        seconds = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(seconds)
        if bad.any():
            i = int(np.argmax(bad))
            shown = "empty or NaN value" if _missing(raw.iloc[i]) else f"{_one_line(raw.iloc[i])} is not a number"
            raise ConfigError(_FIELD, f"{path}: line {lines[i]}, column {col}: {shown}", "give a timestamp")
        if (seconds < 0).any():
            i = int(np.argmax(seconds < 0))
            raise ConfigError(_FIELD, f"{path}: line {lines[i]}, column {col}: negative timestamp {raw.iloc[i]}",
                              "timestamps must be >= 0")
        if unit == "ns":
            seconds = seconds / 1e9
    back = np.diff(seconds) < 0
    if back.any():
        i = int(np.argmax(back)) + 1
        raise ConfigError(_FIELD, f"{path}: line {lines[i]}, column {col}: timestamp {raw.iloc[i]} is earlier than "
                          f"the line before ({raw.iloc[i - 1]})", "sort the trace by arrival time")
    return seconds - seconds[0]


def _read_csv_plain(path: str) -> TraceData | None:
    """A CSV of plain positive integer lengths without a timestamp column (Vidur/Sarathi
    traces), read with the csv module: no pandas at start-up. None for anything else
    (quirks, errors, timestamps): :func:`_read_csv` then parses it and reports problems."""
    import csv

    if path.lower().endswith(".gz"):  # pandas gunzips it; opened here as text, a plain file named .gz was read
        return None  # (and a .gz that is not gzip is refused, as the JSONL reader refuses it)
    try:
        with open(path, newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            columns = next(reader, [])
            if len(set(columns)) != len(columns):
                return None
            prompt_col = _pick(columns, PROMPT_KEYS, path, "prompt lengths")
            output_col = _pick(columns, OUTPUT_KEYS, path, "output lengths")
            if prompt_col is None or output_col is None or _pick(columns, TIME_KEYS, path, "timestamps") is not None:
                return None  # decided from the header alone: the rows are not read twice
            rows = list(reader)
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    while rows and not rows[-1]:
        rows.pop()  # trailing blank lines are not rows (as in _read_csv)
    if not rows:
        return None
    width, ip, io = len(columns), columns.index(prompt_col), columns.index(output_col)
    body = rows
    if any(len(row) != width for row in body):
        return None
    total_col = _pick(columns, ("num_total_tokens",), path, "total lengths")
    it = columns.index(total_col) if total_col is not None else None
    digits = [row[ip] for row in body] + [row[io] for row in body] + ([row[it] for row in body] if it is not None else [])
    # (more than 18 digits would overflow int64: the pandas path names the row beyond MAX_TOKENS)
    if not all(v.isascii() and v.isdigit() and len(v) <= 18 for v in digits):
        return None
    values = np.array([int(v) for v in digits], dtype=np.int64)
    n = len(body)
    # (an output of 0 is read, as on the pandas path; the digits above hold no sign)
    if (values[:n] <= 0).any() or (values[2 * n:] <= 0).any() or (values > MAX_TOKENS).any():
        return None
    if it is not None and (values[2 * n:] != values[:n] + values[n:2 * n]).any():
        return None  # the pandas path names the row whose total disagrees
    fmt = "vidur-csv" if prompt_col.strip().lower() == "num_prefill_tokens" else "csv"
    output, note = _zero_outputs_given_one(values[n:2 * n])
    return TraceData(path, fmt, values[:n].copy(), output, None, tuple(columns), note)


def _csv_header(path: str) -> list[str]:
    """The header row's cells as written (pandas renames a repeated one)."""
    import csv

    opener = gzip.open if path.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", newline="", encoding="utf-8-sig") as fh:
            return next(csv.reader(fh), [])
    except READ_ERRORS as err:  # (pandas read it a moment ago: the file changed since)
        raise ConfigError(_FIELD, f"{path}: cannot read ({err or type(err).__name__})", "check the file") from None


def _read_csv(path: str) -> TraceData:
    plain = _read_csv_plain(path)
    if plain is not None:
        return plain
    import pandas as pd

    try:
        # Blank lines are kept as all-empty rows so that row i is always file line i + 2.
        frame = pd.read_csv(path, skip_blank_lines=False, dtype=str)
    except pd.errors.EmptyDataError:
        raise ConfigError(_FIELD, f"{path}: file is empty", "pass a trace with a header and at least one row") from None
    except READ_ERRORS as err:  # a .gz that is not gzip, truncated or corrupt
        raise ConfigError(_FIELD, f"{path}: cannot read ({err or type(err).__name__})", "check the file") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as err:
        detail = " ".join(str(err).split())
        raise ConfigError(_FIELD, f"{path}: not a readable CSV ({detail})", "fix the malformed line") from None
    columns = [str(c) for c in frame.columns]
    header = _csv_header(path)
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:  # (pandas renames the second one "name.1", which nothing reads)
        raise ConfigError(_FIELD, f"{path}: column {twice[0]!r} is named twice in the header", "keep one of them")
    if not isinstance(frame.index, pd.RangeIndex):  # (pandas reads a first cell the header does not name as an index)
        raise ConfigError(_FIELD, f"{path}: the rows have more cells than the header's {len(header)} columns",
                          "give every row one cell per header column")
    prompt_col = _pick(columns, PROMPT_KEYS, path, "prompt lengths")
    output_col = _pick(columns, OUTPUT_KEYS, path, "output lengths")
    time_col = _pick(columns, TIME_KEYS, path, "timestamps")
    if prompt_col is None or output_col is None:
        raise _columns_error(path, columns)
    # Trailing blank lines are not rows; blank lines in the middle are reported below.
    empty = frame.isna().all(axis=1).to_numpy()
    last = len(frame) - int(np.argmax(~empty[::-1])) if (~empty).any() else 0
    frame = frame.iloc[:last]
    if len(frame) == 0:
        raise ConfigError(_FIELD, f"{path}: no rows after the header", "add at least one request row")
    lines = np.arange(2, len(frame) + 2)
    prompt = _validate_lengths(frame[prompt_col], prompt_col, lines, path)
    output = _validate_lengths(frame[output_col], output_col, lines, path, zero_ok=True)
    total_col = _pick(columns, ("num_total_tokens",), path, "total lengths")  # (Vidur's traces carry one)
    if total_col is not None:
        total = _validate_lengths(frame[total_col], total_col, lines, path)
        bad = total != prompt + output
        if bad.any():
            i = int(np.argmax(bad))
            raise ConfigError(_FIELD, f"{path}: line {lines[i]}: {total_col} is {total[i]}, not {prompt_col} + "
                              f"{output_col} = {prompt[i] + output[i]}", "fix that row, or drop the total column")
    output, note = _zero_outputs_given_one(output)  # (after the total's check: the file's 0 adds up)
    arrival = None
    if time_col is not None:
        arrival = _validate_times(frame[time_col], time_col, TIME_KEYS[time_col.strip().lower()], lines, path)
    fmt = "azure-csv" if time_col is not None and time_col.strip().lower() == "timestamp" else (
        "vidur-csv" if prompt_col.strip().lower() == "num_prefill_tokens" else "csv")
    return TraceData(path, fmt, prompt, output, arrival, tuple(columns), note)


def _check_later_keys(record: dict[str, Any], first_keys: Container[str], path: str, lineno: int, first_line: int) -> None:
    """Refuse a key a later line gives that the reader would read but the first line lacks: the first line's keys
    pick the columns, so a timestamp (or a second length key, or hash_ids) first given there was dropped in
    silence. Other keys a line adds (a record's own notes) are no column and are left alone."""
    read = (*PROMPT_KEYS, *OUTPUT_KEYS, *TIME_KEYS, "hash_ids")
    new = next((k for k in record if k not in first_keys and k.strip().lower() in read), None)
    if new is not None:
        raise ConfigError(_FIELD, f"{path}: line {lineno} has key {new!r}, which the first line (line {first_line}) "
                          "lacks: the first line's keys name the trace's columns", "give every line the same keys")


def _read_jsonl(path: str) -> TraceData:
    opener = gzip.open if path.lower().endswith(".gz") else open
    keys: tuple[str, str, str | None] | None = None
    prompt_raw: list[Any] = []
    output_raw: list[Any] = []
    time_raw: list[Any] = []
    lines: list[int] = []
    try:
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue  # blank lines carry no request
                try:
                    record = loads_once(line, f"{path}: line {lineno}")
                except json.JSONDecodeError as err:
                    raise ConfigError(_FIELD, f"{path}: line {lineno} is not valid JSON ({err.msg})",
                                      "one JSON object per line") from None
                if not isinstance(record, dict):
                    raise ConfigError(_FIELD, f"{path}: line {lineno} is not a JSON object", "one JSON object per line")
                if keys is None:
                    names = list(record)
                    if "hash_ids" in record:  # (a line in Mooncake's form is read with them: prefix_traces)
                        raise ConfigError(_FIELD, f"{path}: line {lineno} has hash_ids, which are read only from "
                                          "Mooncake lines", "name its keys timestamp (ms), input_length, "
                                          "output_length, hash_ids, or drop hash_ids")
                    pk = _pick(names, PROMPT_KEYS, path, "prompt lengths")
                    ok = _pick(names, OUTPUT_KEYS, path, "output lengths")
                    tk = _pick(names, TIME_KEYS, path, "timestamps")
                    if pk is None or ok is None:
                        raise _columns_error(path, names, where=f"keys of line {lineno}")
                    keys = (pk, ok, tk)
                    first_line, first_keys = lineno, record.keys()
                elif record.keys() != first_keys:  # (the usual line: every key of the first, no other)
                    _check_later_keys(record, first_keys, path, lineno, first_line)
                pk, ok, tk = keys
                for key in (pk, ok, tk):
                    if key is not None and key not in record:
                        raise ConfigError(_FIELD, f"{path}: line {lineno} lacks key {key!r}",
                                          "give every line the keys of the first line")
                prompt_raw.append(record[pk])
                output_raw.append(record[ok])
                if tk is not None:
                    time_raw.append(record[tk])
                lines.append(lineno)
    except UnicodeDecodeError:
        raise ConfigError(_FIELD, f"{path}: not UTF-8 text", "pass a JSONL text file") from None
    except READ_ERRORS as err:
        raise ConfigError(_FIELD, f"{path}: cannot read ({err or type(err).__name__})", "check the file") from None
    if keys is None:
        raise ConfigError(_FIELD, f"{path}: file is empty", "pass a JSONL trace with one request per line")
    line_arr = np.asarray(lines)
    import pandas as pd

    def series(values: list[Any]) -> pd.Series:
        # bool is an int subclass in Python; a true/false token count is a mistake, not 1/0, and is
        # reported as the JSON it was (as a string is), not as an empty value.
        return pd.Series([("true" if v else "false") if isinstance(v, bool) else v for v in values], dtype=object)

    prompt = _validate_lengths(series(prompt_raw), keys[0], line_arr, path)
    output, note = _zero_outputs_given_one(_validate_lengths(series(output_raw), keys[1], line_arr, path, zero_ok=True))
    arrival = None
    if keys[2] is not None:
        arrival = _validate_times(series(time_raw), keys[2], TIME_KEYS[keys[2].strip().lower()], line_arr, path)
    return TraceData(path, "jsonl", prompt, output, arrival, tuple(k for k in keys if k is not None), note)


def clip_lengths(prompt: np.ndarray, output: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """Shorten rows longer than ``limit`` tokens as Vidur's trace length generator does.

    The excess ``e = prompt + output - limit`` is taken from prompt and output in
    proportion to their shares, each share rounded up (``ceil(e * (p / (p + o)))``, the
    same float expression Vidur evaluates, so both tools get the same integers), and each
    side keeps at least one token. Both roundings go up, so a clipped row may end one
    token under the limit. Rows within the limit are unchanged.
    """
    prompt = np.asarray(prompt, dtype=np.int64)
    output = np.asarray(output, dtype=np.int64)
    total = prompt + output
    excess = np.clip(total - limit, 0, None)
    cut_prompt = np.ceil(excess * (prompt / total)).astype(np.int64)
    cut_output = np.ceil(excess * (output / total)).astype(np.int64)
    return np.maximum(prompt - cut_prompt, 1), np.maximum(output - cut_output, 1)


def replayable_rows(cfg: WorkloadConfig) -> int:
    """How many rows of ``cfg.trace`` a replay (``--arrival trace``) can use: every row, less
    those ``max_total_tokens`` drops (clipped rows stay). What ``num_requests`` defaults to
    at the command line for a replay, so a trace replays whole unless told otherwise."""
    assert cfg.trace is not None
    from simulator.workload.prefix_traces import read_prefix_trace

    trace = read_prefix_trace(cfg.trace) or load_trace(cfg.trace)  # a hashed trace, or any other
    if cfg.max_total_tokens is None or cfg.over_length == "clip":
        return len(trace)
    return int((trace.num_prompt_tokens + trace.num_output_tokens <= cfg.max_total_tokens).sum())


def _lengths_from_trace(cfg: WorkloadConfig, rng: np.random.Generator
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, str]:
    assert cfg.trace is not None
    trace = load_trace(cfg.trace)
    name = Path(cfg.trace).name
    prompt, output, arrival = trace.num_prompt_tokens, trace.num_output_tokens, trace.arrival_s
    desc = f"trace {name} ({trace.fmt}, {len(trace)} rows{trace.note}"
    if cfg.max_total_tokens is not None and cfg.over_length == "clip":
        over = prompt + output > cfg.max_total_tokens
        if over.any():
            prompt, output = clip_lengths(prompt, output, cfg.max_total_tokens)
            desc += f", {int(over.sum())} over max_total_tokens={cfg.max_total_tokens} clipped"
    elif cfg.max_total_tokens is not None:
        keep = prompt + output <= cfg.max_total_tokens
        num_dropped = len(keep) - int(keep.sum())
        if num_dropped:
            prompt, output = prompt[keep], output[keep]
            arrival = arrival[keep] if arrival is not None else None
            desc += f", {num_dropped} over max_total_tokens={cfg.max_total_tokens} removed"
        if len(prompt) == 0:
            raise ConfigError("workload.max_total_tokens", f"no row of {name} has total tokens <= "
                              f"{cfg.max_total_tokens}", "raise --max-total-tokens")
    desc += ")"
    rows, n = len(prompt), cfg.num_requests

    if cfg.arrival == "trace":
        if arrival is None:
            raise ConfigError("workload.arrival", f"trace {name} has no timestamps (columns: "
                              f"{', '.join(trace.columns)})", "pass --arrival poisson|gamma|fixed|burst with --qps")
        if n > rows:
            raise ConfigError("workload.num_requests", f"replaying {name} needs num_requests <= its {rows} rows, "
                              f"got {n}", f"pass --num-requests {rows} or a synthetic --arrival")
        replay = (arrival[:n] - arrival[0]) / cfg.time_scale
        return prompt[:n].copy(), output[:n].copy(), replay, f"{desc}, first {n} rows replayed"

    idx = sample_rows(rows, n, rng)
    how = (f"{n} rows sampled without replacement" if n <= rows
           else f"every row once, then {n - rows} drawn again (trace has only {rows})")
    return prompt[idx], output[idx], None, f"{desc}, {how}"


def sample_rows(rows: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` row indices of a trace of ``rows``: without replacement while it has enough; past that every row
    once and the extra ones drawn with replacement, as vllm bench oversamples a dataset (it drew all ``n`` with
    replacement, leaving some rows out)."""
    if n <= rows:
        return rng.choice(rows, size=n, replace=False)
    return np.concatenate([rng.choice(rows, size=rows, replace=False), rng.integers(0, rows, size=n - rows)])


def _turns_in_order(idx: np.ndarray, session_id: np.ndarray) -> np.ndarray:
    """The sampled rows ``idx`` (in the order they take the arrival slots) with each session's rows swapped among
    that session's slots into trace order: a turn's prompt holds its predecessor's answer, so sent first it would
    find nothing of it cached (233 of 277 same-session pairs were reversed). Rows without a session stay put."""
    sess = session_id[idx]
    if not (sess >= 0).any():
        return idx
    out = idx.copy()
    slots = np.flatnonzero(sess >= 0)
    by_slot = slots[np.lexsort((slots, sess[slots]))]  # the session's slots, earliest first
    by_row = slots[np.lexsort((idx[slots], sess[slots]))]  # the session's rows, trace order
    out[by_slot] = idx[by_row]
    return out


def _no_sessions(cfg: WorkloadConfig) -> ConfigError:
    """The refusal of ``--session-replay closed`` on a trace that names no sessions."""
    return ConfigError("--session-replay", f"closed sends each session's later turns as the turns they waited for end, "
                       f"but {Path(cfg.trace or '').name} names no sessions (only Claude Code session files do)",
                       "drop --session-replay, or pass Claude Code session files as --trace")


def _closed_links(trace: PrefixTrace, idx: np.ndarray, time_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """A closed replay's ``after`` and ``think_s`` (:class:`RequestTable`) for the trace rows ``idx`` (in order): a
    row whose releasing request was left out (over ``max_total_tokens``) waits for what released that one, the two
    thinks added (the request left out took no time); one left without any is a first turn, sent at its recorded
    time. Thinks are divided by ``time_scale`` as the recorded times are."""
    assert trace.after is not None and trace.think_s is not None
    row = {int(r): k for k, r in enumerate(idx.tolist())}
    after = np.full(len(idx), -1, dtype=np.int64)
    think = np.full(len(idx), np.nan)
    for k, r in enumerate(idx.tolist()):
        a, total = int(trace.after[r]), float(trace.think_s[r])
        while a >= 0 and a not in row:
            total += float(trace.think_s[a])  # (NaN where the one left out was a first turn: a >= 0 ends then)
            a = int(trace.after[a])
        if a >= 0:
            after[k], think[k] = row[a], total / time_scale
    return after, think


def prefix_trace_table(cfg: WorkloadConfig, trace: PrefixTrace, rng: np.random.Generator) -> RequestTable:
    """The run's requests from a hashed trace, as :func:`~simulator.workload.generate.generate_requests`
    treats any trace: rows over ``max_total_tokens`` removed (clipping would cut prompts
    their hashes describe, so ``over_length="clip"`` is refused), then with ``arrival="trace"``
    the first ``num_requests`` rows at their timestamps / ``time_scale``, else ``num_requests``
    rows sampled (without replacement while the trace has enough) at synthetic arrivals."""
    name = Path(cfg.trace or "").name
    keep = np.arange(len(trace))
    desc = f"trace {name} ({trace.fmt}, {len(trace)} rows, {trace.hash_block_size}-token block hashes{trace.note}"
    if cfg.max_total_tokens is not None:
        if cfg.over_length == "clip":
            raise ConfigError("workload.over_length", f"{name} names its prompts' blocks: clipping would cut them",
                              "use --over-length drop")
        keep = np.flatnonzero(trace.num_prompt_tokens + trace.num_output_tokens <= cfg.max_total_tokens)
        if len(keep) < len(trace):
            desc += f", {len(trace) - len(keep)} over max_total_tokens={cfg.max_total_tokens} removed"
        if not len(keep):
            raise ConfigError("workload.max_total_tokens", f"no row of {name} has total tokens <= "
                              f"{cfg.max_total_tokens}", "raise --max-total-tokens")
    desc += ")"
    lengths = desc  # (what the rows are, before how they are sent)
    n, rows = cfg.num_requests, len(keep)
    after = think = None
    if cfg.session_replay == "closed" and trace.after is None:  # (Mooncake: no sessions)
        raise _no_sessions(cfg)
    if cfg.arrival == "trace":
        if n > rows:
            raise ConfigError("workload.num_requests", f"replaying {name} needs num_requests <= its {rows} rows, "
                              f"got {n}", f"pass --num-requests {rows} or a synthetic --arrival")
        idx = keep[:n]
        at = trace.arrival_s[idx]
        arrival = (at - at[0]) / cfg.time_scale
        scale = f" / {cfg.time_scale:g}" if cfg.time_scale != 1 else ""
        if cfg.session_replay == "closed":  # (the config refuses it with other arrivals)
            after, think = _closed_links(trace, idx, cfg.time_scale)
            desc += (f", first {n} rows replayed closed: each session's first turn at its trace timestamp{scale}, each "
                     f"later one its think_time{scale} after the turn it waited for ends")
        else:
            desc += f", first {n} rows replayed, trace timestamps{scale}"
    else:
        idx = _turns_in_order(keep[sample_rows(rows, n, rng)], trace.session_id)
        arrival, arrival_desc = _arrivals(cfg, n, rng)
        desc += f", {n} rows sampled, {arrival_desc}"
        if (trace.session_id[idx] >= 0).any():
            desc += " (each session's turns in its order)"
    return RequestTable(arrival, trace.num_prompt_tokens[idx], trace.num_output_tokens[idx], desc,
                        block_hashes=tuple(trace.block_hashes[i] for i in idx.tolist()),
                        hash_block_size=trace.hash_block_size, session_id=trace.session_id[idx], think_s=think,
                        after=after, length_source=lengths)
