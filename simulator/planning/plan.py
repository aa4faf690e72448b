"""The planner's question: the cheapest deployment that meets the SLO for this load.

Given a run config (model, traffic, engine, scheduler), a load (requests/s), DistServe's SLO
(at least ``attainment`` of requests with TTFT <= ``ttft_s`` and TPOT <= ``tpot_s``) and a
search space, :func:`plan` answers with the cheapest fleet in $/hour.

1. **Layouts** (:func:`enumerate_layouts`): per GPU type, precision, TP x PP (x EP and
   attention DP for MoE models), aggregated or disaggregated (a *unit* of ``num_prefill``
   prefill replicas and ``num_decode`` decode replicas, each pool its own TP, both running the
   plan's scheduler where its engine deploys disaggregated pools, else vllm:
   :func:`~simulator.config.disagg_layout.default_pool_scheduler`), and the
   engine knobs (token budget, ``max_num_seqs``). Dropped before any simulation: layouts that
   do not fit (:func:`simulator.engine.replica.memory_shortfall`, the one memory check, through
   :func:`simulator.planning.split.fits`), pipeline layouts where a TP-only layout of as many
   GPUs fits (dominated: the same GPUs, a pipeline bubble and no memory gain needed), GPUs
   with no price.
2. **Bound** (:func:`capacity_bound`): an upper bound on a unit's request rate from the
   cost model alone. Decode steps produce at most ``B / t(B)`` tokens a second with ``B``
   requests in the batch (``t`` the priced iteration over 2-token caches, non-decreasing in
   ``B``: so over ``[b_i, b_{i+1}]`` at most ``b_{i+1} / t(b_i)``), and every request that
   meets the SLO needs ``output - 1`` of them before its TPOT limit runs out (a trial is
   finite: :func:`capacity_bound`); a disaggregated unit is bounded by its prefill pool too (the trial's
   shortest prompts that must meet the SLO, packed into full token budgets and priced iteration by
   iteration, times a 1.5 margin: a real schedule packs no fuller, yet per-sequence costs make this
   an estimate with room, not a proof; where the pool caches prefixes and the prompts name their
   blocks, only the tokens no cache can spare, :func:`uncached_prompt_tokens`). So each layout's fleet has a *lower bound*
   on its cost, ``ceil(load / bound) x GPUs x price``.
3. **Branch and bound**: layouts in order of that lower bound; each is searched for its
   per-unit capacity (:func:`simulator.planning.capacity.find_capacity`, criterion goodput)
   unless its lower bound exceeds the cheapest fleet found so far (it cannot win), or the
   limits (``max_gpus``, ``max_usd_per_hour``) rule it out. The fleet of a searched layout
   is ``ceil(load / capacity)`` units. The answer is the one an exhaustive grid of
   capacity searches would give (tested), with fewer searches.
4. **Verify**: the cheapest fleet is simulated whole behind its router at the load, long enough for its
   steady state whatever the searches' trials were (:func:`verify_num_requests`); if it
   misses the SLO it grows (a unit at least, faster after each miss and to what its own
   throughput says the load needs) and is verified again, and once a size passes the fewest
   units between is bisected (:meth:`Candidate.units_after`); if that makes it dearer than
   another candidate, the search goes on with the new incumbent. Rounds that run out first
   give no answer, and say so (:meth:`PlanResult.why_no_answer`).

5. **For the reader**: each GPU type and mode with no layout searched in full gets its few
   best (by bound) searched afterwards, so the frontier plot (tokens/s per GPU against
   tokens/s per user) shows every group; :func:`mix_note` prices the traffic's short and long
   halves apart on each GPU type (is a mix of GPU types cheaper?); the answer's launch
   command comes from :func:`simulator.planning.launch.launch_command`.

Every searched layout is appended to ``OUT/layouts.csv`` and its trials to ``OUT/trials.csv`` as soon
as every search submitted before it has been (in submission order: the same files whatever finished first); a rerun with the same plan (``OUT/plan.json`` holds its identity)
skips the layouts already there, so an interrupted plan resumes (a layout an earlier run cut as
unable to win is searched again unless this run's own incumbent still rules it out: the search
space and limits are not part of the identity). Searches run in-process, in local worker
processes or on Ray.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from simulator import simulation
from simulator.config.catalog import GPUS, get_gpu, get_model
from simulator.config.disagg_layout import default_pool_scheduler, parse_link, pool_prefix_cache
from simulator.config.errors import ConfigError
from simulator.config.limits import MAX_QPS
from simulator.config.precision import canonical_weight_format
from simulator.config.prices import GPUPrice, gpu_power_w, price_of
from simulator.config.resources import check_run_fits
from simulator.config.run_config import WEIGHT_DTYPE_BYTES, RunConfig
from simulator.config.schedulers import CHUNKING_SCHEDULERS, POOL_SCHEDULERS
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape
from simulator.planning.capacity import SearchSettings, find_capacity, judged_requests, run_trial
from simulator.planning.launch import LAUNCH_ENGINES, launch_command
from simulator.planning.options import (  # declared with the planner options
    CAPACITY_DEFAULT_NUM_REQUESTS,
    PLAN_REL_TOL,
    PlanSLO,
    connect_ray,
)
from simulator.planning.split import engine_seq_limit, fits
from simulator.report.benchmark import measured_window, output_throughput_per_user
from simulator.report.metrics import DISAGG_WAITS
from simulator.util.figures import or_skipped
from simulator.util.paths import atomic_file
from simulator.util.text import percent
from simulator.workload.request import Status

MODES = ("agg", "disagg")
CHUNKING = CHUNKING_SCHEDULERS  # schedulers whose token budget is a prompt chunk size
PREFILL_MARGIN = 1.5  # the prefill pool's bound is the rate of its shortest prompts packed into full budgets, times this
SHORT_TRIAL_TTFTS = 10  # trials whose arrivals span fewer TTFT limits than this are flagged as too short
CEILING_LOADS = 4.0  # a layout's search tries a unit at up to this many times the load (search_ceiling) ...
MIN_CEILING_QPS = 1000.0  # ... and at least this many req/s (the ceiling plans had, for small loads alike)
MIN_MISSES_JUDGED = 10  # a verification allowing fewer late requests than this is said to be a thin verdict
VERIFY_TTFTS = 20  # a verification's arrivals span at least this many TTFT limits (verify_num_requests) ...
VERIFY_MAX_SPAN_S = 600.0  # ... as far as ten minutes of them ...
VERIFY_MAX_SPAN_REQUESTS = 100_000  # ... and this many requests (10,000 req/s at a 30 s TTFT asked 6 million)


@dataclass(frozen=True)
class SearchSpace:
    """What the planner may choose. Empty ``gpus``: every priced catalog GPU that holds the model.
    ``engine_defaults``: each parallel shape also at the engine's own token budget and sequence cap on its
    GPU (what a launch without those flags runs: vLLM V1's 8192 tokens and 1024 sequences on an H100, SGLang's
    chunk by memory), beside the ``budgets`` x ``max_num_seqs`` grid."""

    gpus: tuple[str, ...] = ()
    modes: tuple[str, ...] = MODES
    tps: tuple[int, ...] = (1, 2, 4, 8)
    pps: tuple[int, ...] = (1,)
    dtypes: tuple[str, ...] = ()  # empty: the base config's
    budgets: tuple[int, ...] = (512, 2048)  # token budget (chunk size) of chunking schedulers
    max_num_seqs: tuple[int, ...] = (128, 256)
    attention_dps: tuple[int, ...] = (1, 2)  # MoE models only
    ratios: tuple[tuple[int, int], ...] = ((1, 1), (1, 2), (2, 1))  # disaggregated units: prefill:decode replicas
    max_gpus_per_replica: int = 8  # one node
    engine_defaults: bool = True

    def __post_init__(self) -> None:
        if not self.modes:  # else "no layout fits", which sends the user after the wrong option
            raise ConfigError("--modes", "no mode given", f"use {' and/or '.join(MODES)}")
        for mode in self.modes:
            if mode not in MODES:
                raise ConfigError("--modes", f"unknown mode {mode!r}", f"use {' and/or '.join(MODES)}")
        for dtype in self.dtypes:
            if canonical_weight_format(dtype) not in WEIGHT_DTYPE_BYTES:
                raise ConfigError("--dtypes", f"unknown weight dtype {dtype!r}", f"use {', '.join(WEIGHT_DTYPE_BYTES)}")
        for name in ("tps", "pps", "budgets", "max_num_seqs", "attention_dps"):
            if not getattr(self, name) or any(v < 1 for v in getattr(self, name)):
                raise ConfigError(f"--{name.replace('_', '-')}", "must list positive integers")
        # A replica of the plan stays in one node: a degree that never fits one was dropped unsaid, and the search
        # then said no layout fits, asking for more --tps (--tps 16 for Llama-3.1-70B on H100s; a planner audit).
        most = self.max_gpus_per_replica
        for name, over, beside in (("--tps", [tp for tp in self.tps if tp > most], ""),
                                   ("--pps", [pp for pp in self.pps if pp * min(self.tps) > most],
                                    f" beside the least --tps, {min(self.tps)}")):
            if over:
                raise ConfigError(name, f"{', '.join(map(str, over))}{beside}: a replica of the plan holds at most {most} "
                                  f"GPUs (one node: tp x pp x attention-dp)", f"give degrees whose replicas fit {most} "
                                  "GPUs; a replica across nodes can be run with `simulate run --tp N --pp M --nodes K`")
        # A value given twice would search its layouts twice (every row and trial doubled), not more of the space.
        flags = {"max_num_seqs": "--seqs"}
        for name, canonical in (("gpus", lambda n: get_gpu(n).name), ("modes", str), ("dtypes", canonical_weight_format),
                                ("tps", int), ("pps", int), ("budgets", int), ("max_num_seqs", int),
                                ("attention_dps", int), ("ratios", tuple)):
            seen: dict[Any, Any] = {}
            for value in getattr(self, name):
                key = canonical(value)
                if key in seen:
                    shown = ":".join(map(str, value)) if name == "ratios" else value
                    again = "" if seen[key] == value else f" (as {seen[key]})"
                    raise ConfigError(flags.get(name, f"--{name.replace('_', '-')}"),
                                      f"{shown} is given twice{again}, so its layouts would be searched twice",
                                      "name each value once")
                seen[key] = value
        # each format by its catalog name, as a run's --dtype is (`fp4` is nvfp4: the launch command looks it up)
        object.__setattr__(self, "dtypes", tuple(canonical_weight_format(d) for d in self.dtypes))


@dataclass(frozen=True)
class Limits:
    """The fleet may use at most ``max_gpus`` GPUs and cost at most ``max_usd_per_hour``."""

    max_gpus: int | None = None
    max_usd_per_hour: float | None = None

    def exceeded(self, gpus: int, usd_per_hour: float) -> str:
        """Which limit a fleet of ``gpus`` GPUs at ``usd_per_hour`` breaks, as its flag says it ('' if none)."""
        if self.max_gpus is not None and gpus > self.max_gpus:
            return f"--max-gpus {self.max_gpus}"
        if self.max_usd_per_hour is not None and usd_per_hour > self.max_usd_per_hour + 1e-9:
            return f"--max-cost {self.max_usd_per_hour:g}"
        return ""

    def __post_init__(self) -> None:
        # A limit no fleet meets (0, negative) ends a long search with no answer; NaN would bound nothing.
        if self.max_gpus is not None and self.max_gpus < 1:
            raise ConfigError("--max-gpus", f"must be at least 1, got {self.max_gpus}", "drop it for no limit")
        if self.max_usd_per_hour is not None and not (math.isfinite(self.max_usd_per_hour) and self.max_usd_per_hour > 0):
            raise ConfigError("--max-cost", f"must be a positive number of USD an hour, got {self.max_usd_per_hour}",
                              "drop it for no limit")


@dataclass(frozen=True)
class Layout:
    """One unit of deployment: an aggregated replica, or a disaggregated unit of
    ``num_prefill`` prefill replicas (TP ``prefill_tp``) and ``num_decode`` decode replicas
    (TP ``tp``). ``budget``: the token budget (None: the scheduler's own)."""

    gpu: str
    mode: str
    dtype: str
    tp: int
    pp: int = 1
    ep: int = 1
    attention_dp: int = 1
    budget: int | None = None
    max_num_seqs: int = 128
    prefill_tp: int = 0
    num_prefill: int = 0
    num_decode: int = 0

    @property
    def num_gpus(self) -> int:
        if self.mode == "disagg":
            return self.num_prefill * self.prefill_tp * self.pp + self.num_decode * self.tp * self.pp
        return self.tp * self.pp * self.attention_dp

    @property
    def key(self) -> str:
        """A readable identity: ``h100-sxm agg bf16 tp4 pp1 b2048 s256``."""
        parts = [self.gpu, self.mode, self.dtype]
        if self.mode == "disagg":
            parts.append(f"P{self.num_prefill}xtp{self.prefill_tp} D{self.num_decode}xtp{self.tp}")
        else:
            parts.append(f"tp{self.tp}")
        parts += [f"pp{self.pp}"] if self.pp > 1 else []
        parts += [f"ep{self.ep}"] if self.ep > 1 else []
        parts += [f"dp{self.attention_dp}"] if self.attention_dp > 1 else []
        parts += [f"b{self.budget}"] if self.budget else []
        parts.append(f"s{self.max_num_seqs}")
        return " ".join(parts)

    def config(self, base: RunConfig, units: int = 1) -> RunConfig:
        """The run config of ``units`` units of this layout (a fleet; one unit for its capacity)."""
        common: dict[str, Any] = {"replica__gpu": self.gpu, "replica__dtype": self.dtype, "replica__pp": self.pp,
                                  "scheduler__max_num_seqs": self.max_num_seqs}
        if self.mode == "agg":
            budget = {}
            if self.budget is not None:
                budget = ({"scheduler__chunk_size": self.budget} if base.scheduler.name in CHUNKING
                          else {"scheduler__max_num_batched_tokens": self.budget})
            return base.replace(prefill_pool=None, decode_pool=None, mixed_pool=None, num_replicas=units,
                                replica__tp=self.tp, replica__ep=self.ep, replica__attention_dp=self.attention_dp,
                                **common, **budget)
        budget = f",budget={self.budget}" if self.budget else ""
        link = base.kv_link
        if units > 1 and base.kv_link_scope == "shared":
            # Each unit brings its own NIC: the fleet's one (FIFO) KV link has the units' bandwidth together.
            # (Per-worker links need nothing: each of the fleet's workers has its own.) An approximation that runs each
            # transfer units times faster than its unit's link would: a fleet of links per unit is not modelled (each
            # prefill worker's share of its unit's link choked the decode workers' ingress where a unit has more
            # prefill workers than decode workers, and failed fleets a unit's capacity said would pass).
            one = parse_link(base.kv_link, self.gpu)
            if math.isfinite(one.bytes_per_s):
                link = f"{units * one.bytes_per_s / 1e9:.9g}GB/s@{one.latency_s * 1e6:.9g}us"
        # Both pools run the plan's scheduler where its engine deploys disaggregated pools (default_pool_scheduler), so
        # its memory rules, budget and prefix cache are the engine's the launch command starts; said in the pools.
        sched = f",sched={self.scheduler(base)}"
        return base.replace(kv_link=link,
                            prefill_pool=f"{units * self.num_prefill}x(tp={self.prefill_tp}{budget}{sched})",
                            decode_pool=f"{units * self.num_decode}x(tp={self.tp},seqs={self.max_num_seqs}{sched})",
                            mixed_pool=None, num_replicas=1, replica__tp=self.tp, **common)

    def scheduler(self, base: RunConfig) -> str:
        """The scheduler this layout's replicas run under ``base``: the run's, a disaggregated layout's pools
        :func:`~simulator.config.disagg_layout.default_pool_scheduler`'s."""
        return default_pool_scheduler(base.scheduler.name) if self.mode == "disagg" else base.scheduler.name

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layout:
        kinds = {f.name: f.type for f in fields(cls)}
        out: dict[str, Any] = {}
        for name in kinds:
            value = data.get(name)
            if name in ("gpu", "mode", "dtype"):
                out[name] = str(value)
            elif name == "budget":
                out[name] = None if value in (None, "", "None") or (isinstance(value, float) and math.isnan(value)) \
                    else int(float(value))  # type: ignore[arg-type]
            else:
                out[name] = int(float(value))  # type: ignore[arg-type]
        return cls(**out)


# ---------------------------------------------------------------------------------------------
# The search space


def candidate_gpus(base: RunConfig, space: SearchSpace, prices: dict[str, GPUPrice] | None) -> tuple[list[str], list[str]]:
    """The GPUs to search and, for the others considered, why not (no price, cannot hold the model)."""
    names = [get_gpu(g).name for g in space.gpus] if space.gpus else [g for g in GPUS if g != "cpu"]
    keep, unpriced = [], []
    for name in dict.fromkeys(names):
        if price_of(name, prices).usd_per_gpu_hour is None:
            unpriced.append(name)
            continue
        keep.append(name)
    # One line for them all (a line each crowded the answer: 12 of the catalog's GPUs have no list price)
    notes = [f"no price, not searched: {', '.join(unpriced)} (give --price GPU=USD)"] if unpriced else []
    return keep, notes


def enumerate_layouts(base: RunConfig, space: SearchSpace, gpus: Sequence[str]) -> tuple[list[Layout], list[str]]:
    """Every layout of the space that fits in memory, dominated pipeline layouts left out;
    and notes on what was dropped (counts per reason)."""
    model = get_model(base.replica.model)
    moe = bool(getattr(model, "num_experts", 0))
    dtypes = space.dtypes or (base.replica.dtype,)
    chunking = base.scheduler.name in CHUNKING
    budgets: tuple[int | None, ...] = space.budgets if chunking else (None,)

    def knobs(probe: Layout) -> list[tuple[int | None, int]]:
        """The (token budget, sequence cap) pairs the shape of ``probe`` (its knobs aside) is searched at: the grid,
        and with ``engine_defaults`` the engine's own pair on its GPU where the grid lacks it (a disaggregated
        layout's pools keep their own budget: its budget is None; the cap is its decode pool's)."""
        grid = [(b, s) for s in space.max_num_seqs for b in (budgets if probe.mode == "agg" else (None,))]
        if space.engine_defaults:
            budget = (base.scheduler.token_budget(base.replica.effective_max_model_len, get_gpu(probe.gpu))
                      if probe.mode == "agg" and chunking else None)
            try:
                seqs = engine_seq_limit(replace(probe, budget=budget).config(base))
            except ConfigError:  # (a shape the config refuses: counted as invalid with the grid's layouts)
                return grid
            if (budget, seqs) not in grid:
                grid.append((budget, seqs))
        return grid
    dropped = {"memory": 0, "invalid": 0, "pipeline dominated": 0}
    invalid_example: list[str] = []  # why the layouts the config refuses are refused (the first one)
    out: list[Layout] = []
    fit_cache: dict[tuple, bool | None] = {}  # None: refused by the config

    def fits_layout(layout: Layout) -> bool:
        """Whether it fits in memory; a layout the config refuses is counted as invalid, the rest as memory."""
        # Memory depends on the GPU, precision, parallel shape and max_num_seqs (not on the budget).
        key = (layout.gpu, layout.mode, layout.dtype, layout.tp, layout.pp, layout.ep, layout.attention_dp,
               layout.max_num_seqs, layout.prefill_tp, layout.num_prefill, layout.num_decode)
        if key not in fit_cache:
            try:
                fit_cache[key] = fits(layout.config(base))
            except ConfigError as err:
                fit_cache[key] = None
                invalid_example.append(str(err))
        ok = fit_cache[key]
        if not ok:
            dropped["invalid" if ok is None else "memory"] += 1
        return bool(ok)

    for gpu in gpus:
        for dtype in dtypes:
            agg_tp_only_sizes: set[int] = set()
            shapes: list[tuple[int, int, int, int]] = []  # tp, pp, ep, attention_dp
            for pp in sorted(space.pps):
                for tp in space.tps:
                    for adp in (space.attention_dps if moe else (1,)):
                        if tp * pp * adp > space.max_gpus_per_replica:
                            continue
                        for ep in sorted({1, tp * adp}) if moe else (1,):
                            shapes.append((tp, pp, ep, adp))
            if "agg" in space.modes:
                for tp, pp, ep, adp in shapes:
                    if pp > 1 and tp * pp * adp in agg_tp_only_sizes:
                        dropped["pipeline dominated"] += 1
                        continue
                    for budget, seqs in knobs(Layout(gpu, "agg", dtype, tp, pp, ep, adp)):
                        layout = Layout(gpu, "agg", dtype, tp, pp, ep, adp, budget, seqs)
                        if not fits_layout(layout):
                            continue
                        if pp == 1:
                            agg_tp_only_sizes.add(tp * adp)
                        out.append(layout)
            if "disagg" in space.modes:
                tps = [tp for tp, pp, ep, adp in shapes if pp == 1 and ep == 1 and adp == 1]
                for tp_p in tps:
                    for tp_d in tps:
                        for n_p, n_d in space.ratios:
                            # Pools keep their scheduler's own token budget (its engine's default, or a
                            # --max-num-batched-tokens of the run's where they run --scheduler), not --budgets.
                            for _, seqs in knobs(Layout(gpu, "disagg", dtype, tp_d, 1, 1, 1, None, 1, tp_p, n_p, n_d)):
                                layout = Layout(gpu, "disagg", dtype, tp_d, 1, 1, 1, None, seqs, tp_p, n_p, n_d)
                                if not fits_layout(layout):
                                    continue
                                out.append(layout)
    notes = [f"{n} layouts dropped: {why}" + (f" (e.g. {invalid_example[0]})" if why == "invalid" else "")
             for why, n in dropped.items() if n]
    return out, notes


def unread_space_options(base: RunConfig, modes: Sequence[str]) -> dict[str, tuple[str, str]]:
    """The search-space flags that :func:`enumerate_layouts` would not read for ``base`` and
    ``modes``: flag -> (why, fix). A flag given there would do nothing (or, searched at one value
    only, leave no layout), so the command refuses it rather than show a search it did not make."""
    out: dict[str, tuple[str, str]] = {}
    if "disagg" not in modes:
        out["--ratios"] = ("it sets the prefill:decode replicas of disaggregated layouts, and --modes "
                           f"{','.join(modes)} searches none", "add disagg to --modes, or drop --ratios")
    if not base.replica.model_spec.is_moe:  # as enumerate_layouts: attention DP is searched for MoE models
        out["--attention-dps"] = (f"attention DP is searched for MoE models only, and {base.replica.model} has no "
                                  "experts", "drop --attention-dps for a dense model")
    elif "agg" not in modes:
        out["--attention-dps"] = ("disaggregated pools are searched at attention DP 1 only, and --modes disagg "
                                  "searches no aggregated layout", "add agg to --modes, or drop --attention-dps")
    if base.scheduler.name not in CHUNKING:
        out["--budgets"] = (f"only a chunking scheduler ({', '.join(CHUNKING)}) has a token budget the planner "
                            f"searches, and --scheduler is {base.scheduler.name}",
                            f"drop --budgets, or use --scheduler {' or '.join(CHUNKING)}")
    elif "agg" not in modes:
        out["--budgets"] = ("disaggregated pools keep their own token budget, and --modes disagg searches no "
                            "aggregated layout", "add agg to --modes, or drop --budgets")
    if "agg" not in modes:  # (enumerate_layouts lays out pools of TP replicas)
        out["--pps"] = ("disaggregated pools are searched at pipeline parallelism 1 only, and --modes disagg searches "
                        "no aggregated layout", "add agg to --modes, or drop --pps")
    return out


def unread_run_options(base: RunConfig, space: SearchSpace, verify: bool = True) -> dict[str, tuple[str, str]]:
    """Run options whose reader is a layout shape the planner chooses (attention DP, an aggregated
    replica), where no layout of ``space`` has that shape: option name -> (why, fix). The run options'
    own check leaves these to the plan (its layouts, not the base config, have the DP ranks), so a
    value given here would otherwise do nothing. A ``why`` that names ``{flag}`` is the whole problem (it says
    itself what the flag fails to do); ``{flag}`` in either stands for the flag as given. ``verify``: the answer's
    fleet is simulated whole (behind the run's router)."""
    out: dict[str, tuple[str, str]] = {}
    dp_layouts = base.replica.model_spec.is_moe and "agg" in space.modes and max(space.attention_dps) > 1
    routed = "disagg" in space.modes and any(p > 1 for p, _ in space.ratios)  # a unit's prefill workers
    if not (verify or routed or dp_layouts):  # (a unit of one replica, one rank, and no fleet simulated whole)
        out["router"] = ("every unit the plan searches is one replica (or one prefill worker) and --no-verify "
                         "simulates no fleet, so nothing is routed", "drop {flag}, or drop --no-verify")
    if max(space.tps) == 1 and max(space.pps) == 1 and not dp_layouts:  # (within a replica only)
        out["intra_node_link"] = ("every layout the plan searches is one GPU a replica (--tps 1, --pps 1), whose "
                                  "layers exchange nothing over the node's links", "drop {flag}, or search --tps 2 "
                                  "or more")
    if not dp_layouts:
        why = (f"attention DP is searched for MoE models only, and {base.replica.model} has no experts"
               if not base.replica.model_spec.is_moe else
               "disaggregated pools are searched at attention DP 1 only, and --modes disagg searches no aggregated "
               "layout" if "agg" not in space.modes else "--attention-dps searches attention DP 1 only")
        for name in ("dp_balance_timeout_iters", "dp_balance_batching_wait_iters"):
            out[name] = (f"no layout of the plan has attention-DP ranks to balance ({why})",
                         "drop {flag}, or search --attention-dps 1,2 with agg in --modes for a MoE model")
        out["dp_padding"] = (f"no layout of the plan has attention-DP ranks whose MoE layers it pads ({why})",
                             "drop {flag}, or search --attention-dps 1,2 with agg in --modes for a MoE model")
    if "disagg" not in space.modes:  # (the pools' KV handoff and first-token point: no such layout searched)
        for name in ("kv_link", "kv_link_scope", "first_token_at"):
            out[name] = ("it applies to disaggregated layouts (their KV handoff, where the first token is "
                         f"delivered), and --modes {','.join(space.modes)} searches none",
                         "add disagg to --modes, or drop {flag}")
    if "agg" not in space.modes or base.speculative is not None:  # (their steps take the plain loop: simulation)
        out["fast_forward"] = ("--modes disagg searches only disaggregated pools, which step one iteration at a time"
                               if "agg" not in space.modes else "speculating layouts step one iteration at a time",
                               "drop {flag}")
    if "agg" not in space.modes:
        for name in ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio"):
            out[name] = ("--modes disagg searches only disaggregated pools, which never run a step that mixes prompts "
                         "and decodes, the steps batch waiting holds", "add agg to --modes, or drop {flag}")
        # The pools run --scheduler where its engine deploys disaggregated pools (default_pool_scheduler), else vllm: a
        # research policy named there schedules no layout (its pools run vllm, as under --scheduler vllm).
        pools = default_pool_scheduler(base.scheduler.name)
        if pools != base.scheduler.name:  # (the flag still changes the pools, to vllm's: "would do nothing" is untrue)
            out["scheduler"] = (f"--modes disagg searches only disaggregated pools, which run {pools} under --scheduler "
                                f"{base.scheduler.name} (a plan's pools run its --scheduler where that engine deploys "
                                f"disaggregated pools: {', '.join(POOL_SCHEDULERS)}), so {{flag}} {base.scheduler.name} "
                                "schedules no layout",
                                f"add agg to --modes, or pass --scheduler {' or '.join(POOL_SCHEDULERS)}, or drop {{flag}}")
        # The prefix-cache flags reach every layout's prefill pool (its capacity searches and verify runs), which
        # caches as the pools' engine would (disagg_layout.pool_prefix_cache; capacity_bound prices the tokens no
        # cache spares); the base config's check judged them as a run's. --no-prefix-caching is read only where a
        # prefill pool would cache without it.
        if base.scheduler.prefix_caching is False and pool_prefix_cache(
                replace(base.scheduler, prefix_caching=None), pools) is None:
            out["prefix_caching"] = ("--modes disagg searches only disaggregated pools, and no prefill pool caches "
                                     f"prefixes by default ({pools} under --scheduler {base.scheduler.name}; a decode "
                                     "pool never does)", "add agg to --modes, or drop {flag}")
    return out


# ---------------------------------------------------------------------------------------------
# The bound


@dataclass(frozen=True)
class Lengths:
    """The traffic of one trial, from the run's own request table: mean lengths (tokens), the
    last arrival at unit rate (a trial at ``q`` req/s ends its arrivals at ``unit_span / q``:
    the trials scale one draw, see :mod:`simulator.planning.capacity`), and the least prompt
    and decode tokens any ``k`` of its requests hold (``least_*[k]``). Where the requests name
    their prompts' blocks (a trace with block hashes), ``block_ids`` holds each one's ids as the
    engine reads them (``Request.block_hashes``, table order) and ``prompts`` its prompt tokens,
    for :meth:`least_uncached_prompt`."""

    mean_prompt: float
    mean_output: float
    unit_span: float
    least_prompt: np.ndarray
    least_decode: np.ndarray
    max_output: int
    block_ids: tuple[Any, ...] | None = None
    hash_block_size: int = 0
    prompts: np.ndarray | None = None
    # least_uncached_prompt by engine block size (the bound asks once per layout; the requests' names once a size)
    _uncached: dict[int, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, config: RunConfig) -> Lengths:
        from simulator.engine.cluster import make_requests, prepare_table

        table, _, _ = prepare_table(config, None, None)
        prompt = np.asarray(table.num_prompt_tokens, dtype=np.float64)
        output = np.asarray(table.num_output_tokens, dtype=np.float64)
        qps = config.workload.qps
        named: dict[str, Any] = {}
        if getattr(table, "block_hashes", None) is not None:
            # The ids the engine names each request's blocks by (a session's turn may carry its successor's ids).
            requests = make_requests(table)
            named = {"block_ids": tuple(req.block_hashes for req in requests), "hash_block_size": table.hash_block_size,
                     "prompts": np.asarray(table.num_prompt_tokens, dtype=np.int64)}
        return cls(float(prompt.mean()), float(output.mean()), float(np.max(table.arrival_at)) * qps,
                   np.concatenate([[0.0], np.cumsum(np.sort(prompt))]),
                   np.concatenate([[0.0], np.cumsum(np.sort(output - 1.0))]), int(output.max()), **named)

    @property
    def num_requests(self) -> int:
        return len(self.least_prompt) - 1

    def least_uncached_prompt(self, block_size: int) -> np.ndarray:
        """Like ``least_prompt``, over the prompt tokens no prefix cache of ``block_size``-token blocks can spare:
        ``[k]``, the least that any ``k`` requests leave to compute whatever their order, workers and caches
        (:func:`uncached_prompt_tokens`). Only where the requests name blocks (``block_ids``)."""
        if block_size not in self._uncached:
            assert self.block_ids is not None and self.prompts is not None
            tokens = uncached_prompt_tokens(self.block_ids, self.hash_block_size, self.prompts, block_size)
            self._uncached[block_size] = np.concatenate([[0.0], np.cumsum(np.sort(tokens))])
        return self._uncached[block_size]


def uncached_prompt_tokens(block_ids: Sequence[Any], hash_block_size: int, prompts: np.ndarray,
                           block_size: int) -> np.ndarray:
    """Per request (table order): its prompt tokens in no full block it names (never cached), plus a
    ``block_size`` for each block name it is the first request (in table order) to name.

    A lower bound on prefill work that holds for any set ``S`` of requests, in any order, on any number of
    workers, with any cache size, eviction rule or CPU tier: every block name of a prompt in ``S`` is computed at
    least once (a hit, or a CPU tier's load, is a block some prompt computed before), each computation is of one
    name, and the unnamed tokens are computed by their own request; charging each name to the first request that
    names it charges it once, so the work done for ``S`` is at least the sum over ``S``. (It is what an unbounded
    cache serving the requests one by one in table order would leave, where a trace's ids name prefixes, as
    Mooncake's do; it may count fewer, never more: the last token a hit always leaves and a chain broken by a
    miss are not counted.) Names as the engine gives them (:func:`~simulator.engine.prefix_cache.block_names`)."""
    from simulator.engine.prefix_cache import block_names

    seen: set[int] = set()
    out = np.zeros(len(prompts), dtype=np.float64)
    for i, (ids, prompt) in enumerate(zip(block_ids, prompts.tolist(), strict=True)):
        names = block_names(ids, hash_block_size, prompt, block_size) if ids is not None and len(ids) else []
        new = set(names) - seen
        out[i] = prompt - block_size * len(names) + block_size * len(new)
        seen.update(new)
    return out


def _prefill_tokens_per_s(cost, prompts: np.ndarray, budget: int) -> float:  # noqa: ANN001
    """Prompt tokens a second with ``prompts`` packed in order into iterations of at most ``budget`` tokens (a
    prompt that does not fit goes on as a chunk over what it computed), each priced over empty caches. Priced
    as the trial's own prompts: one prompt as long as the budget attends over far more (a 131,072-token budget
    priced a fifth of the rate real batches reach)."""
    total_s = 0.0
    batch: list[tuple[int, int]] = []
    room = budget
    for length in prompts.astype(np.int64).tolist():
        done = 0
        while done < length:
            take = min(length - done, room)
            batch.append((take, done))
            done += take
            room -= take
            if room == 0:
                total_s += cost.iteration_time(BatchShape.from_requests(prefills=batch))
                batch, room = [], budget
    if batch:
        total_s += cost.iteration_time(BatchShape.from_requests(prefills=batch))
    return float(prompts.sum()) / total_s if total_s > 0 else math.inf


def _decode_tokens_per_s(cost, max_batch: int) -> float:  # noqa: ANN001
    """An upper bound on decode tokens a second with at most ``max_batch`` requests a batch
    (:mod:`module docstring <simulator.planning.plan>`, step 2)."""
    sizes = sorted({1, *[2**k for k in range(1, 20) if 2**k < max_batch], max_batch})
    times = [cost.iteration_time(BatchShape.from_requests(decodes=[2] * b)) for b in sizes]
    best = sizes[0] / times[0]
    for i in range(len(sizes) - 1):
        best = max(best, sizes[i + 1] / times[i])
    return best


def _finite_rate(tokens_needed: float, tokens_per_s: float, unit_span: float, slack_s: float) -> float:
    """The highest rate at which a trial can pass if ``tokens_needed`` must be processed at
    ``tokens_per_s`` at most, between the first arrival and ``slack_s`` after the last
    (``unit_span / q``): ``tokens_needed <= tokens_per_s (unit_span / q + slack_s)``."""
    room = tokens_needed / tokens_per_s - slack_s
    return unit_span / room if room > 0 else math.inf


def capacity_bound(layout: Layout, base: RunConfig, lengths: Lengths, slo: PlanSLO) -> float:
    """An upper bound on the load (req/s) at which one unit passes a trial, from the cost
    model; inf where none is derived (pipelines, attention DP, speculative decoding).

    A trial is finite, so the bound is a finite trial's, not a steady state's: the requests
    that must meet the SLO (``ceil(attainment x n)`` of the ``n`` measured; at best those with the fewest tokens)
    must have their decode tokens produced by the last of them finishes (at most ``ttft_s +
    tpot_s x max output`` after the last arrival), and in a disaggregated unit their prompts
    prefilled by ``ttft_s`` after it."""
    if layout.pp > 1 or layout.attention_dp > 1 or base.speculative is not None:
        return math.inf
    config = layout.config(base)
    # The measured requests that must meet it (a warm-up is judged by no trial); at best the ones with the fewest
    # tokens of all, warm-up or not, so the bound stays a bound.
    must = math.ceil(slo.attainment * (lengths.num_requests - base.workload.num_warmup) - 1e-9)
    decode_slack_s = slo.ttft_s + slo.tpot_s * lengths.max_output
    if layout.mode == "agg":
        # Decode tokens only: a prefix cache spares prompt tokens, never an output's, so the bound holds with
        # prefix caching on as off.
        cost = load_cost_model(config.cost_model, config.replica, config.engine)
        return _finite_rate(lengths.least_decode[must], _decode_tokens_per_s(cost, layout.max_num_seqs),
                            lengths.unit_span, decode_slack_s)
    from simulator.config.disagg_layout import layout_of

    pools = layout_of(config)
    assert pools is not None
    decode_cost = load_cost_model(config.cost_model, pools.decode_replica, config.engine)
    decode_rate = layout.num_decode * _decode_tokens_per_s(decode_cost, layout.max_num_seqs)
    decode = _finite_rate(lengths.least_decode[must], decode_rate, lengths.unit_span, decode_slack_s)
    prefill_cost = load_cost_model(config.cost_model, pools.prefill_replica, config.engine)
    budget = pools.prefill_scheduler.token_budget(pools.prefill_replica.effective_max_model_len,
                                                  pools.prefill_replica.gpu_spec, pools.prefill_replica.attention_dp)
    least = lengths.least_prompt
    if pools.prefill_scheduler.prefix_cache is not None and lengths.block_ids is not None:
        # The prefill pool caches prefixes and the prompts name blocks: a prompt computes only what no cache
        # holds, so pricing every prompt token would put the bound below the layout's capacity (and prune a layout
        # that could win). Priced instead at the tokens no cache can spare (Lengths.least_uncached_prompt: a lower
        # bound on the work of any `must` requests, whatever their order, workers and cache), each request's as a
        # prompt of its own over an empty cache (its cached prefix, attended over, costs a real step more).
        from simulator.engine.kvcache import engine_block_size

        least = lengths.least_uncached_prompt(engine_block_size(pools.prefill_replica, pools.prefill_scheduler.name))
    prompts = np.diff(least)[:must]  # the shortest prompts that must meet the SLO, ascending
    prefill_rate = PREFILL_MARGIN * layout.num_prefill * _prefill_tokens_per_s(prefill_cost, prompts, budget)
    prefill = _finite_rate(least[must], prefill_rate, lengths.unit_span, slo.ttft_s)
    return min(decode, prefill)


# ---------------------------------------------------------------------------------------------
# Searching one layout (a pure function of its arguments: runs in any process)


def search_ceiling(load_qps: float) -> float:
    """The most req/s a layout's search tries one unit at: :data:`CEILING_LOADS` times the load, and never
    below :data:`MIN_CEILING_QPS`. A unit that still passes there carries the whole load alone (its fleet is
    one unit whatever more it could carry), so the ceiling only bounds the headroom shown, and its row says
    the capacity is a lower bound; a fixed 1,000 req/s had capped a unit below loads above it in silence."""
    return min(MAX_QPS, max(MIN_CEILING_QPS, CEILING_LOADS * load_qps))


def search_settings(bound_qps: float, load_qps: float, rel_tol: float) -> SearchSettings:
    """The capacity search of a layout: from the load (or half the bound, if lower), to ``rel_tol``, up to
    :func:`search_ceiling`."""
    start = min(load_qps, bound_qps / 2) if math.isfinite(bound_qps) else load_qps
    ceiling = search_ceiling(load_qps)
    return SearchSettings(rel_tol=rel_tol, qps_start=min(max(start, 0.02), ceiling), min_qps=0.01, max_qps=ceiling)


def measure(config: RunConfig, qps: float, slo: PlanSLO) -> dict[str, float]:
    """One run of ``config`` at ``qps``: goodput judged as a capacity trial judges it
    (:func:`~simulator.planning.capacity.judged_requests`: the warm-up left out; finished, TTFT and
    TPOT within the SLO; a one-token output meets TPOT), the latency tails, throughput and per-user
    speed over the same requests, and the ranks' busy fraction."""
    result = simulation.simulate(config.replace(workload__qps=qps), record_iterations=False)
    cols, good = judged_requests(result, slo.capacity_slo())
    finished = cols["status"] == Status.FINISHED.value
    tpot = cols["tpot_s"]
    ttft_f, tpot_f = cols["ttft_s"][finished], tpot[finished]
    tpot_f = tpot_f[~np.isnan(tpot_f)]
    # The load's window as every throughput figure takes it (vllm bench's duration: from the load's start, refusals
    # in). The columns hold the measured requests already, which the window's own warm-up mask keeps whole.
    start, end = measured_window(result, cols)
    span = end - start if finished.any() else math.nan
    out_tokens = float(cols["num_output_tokens"][finished].sum())
    busy = np.asarray(result.replica_busy_s, dtype=np.float64)
    # The GPUs' mean busy fraction (what their power follows): each rank weighs its GPUs, so a disaggregated layout's
    # 4-GPU prefill rank and 2-GPU decode rank are not one each (J/tok took the ranks' plain mean; a planner audit).
    weights = np.ones(len(busy))
    if result.disagg is not None and len(result.disagg.pools) == len(busy):
        from simulator.config.disagg_layout import layout_of

        layout = layout_of(result.config)
        pools = {"prefill": layout.prefill_replica, "decode": layout.decode_replica, "mixed": layout.mixed_replica}
        weights = np.array([pools[p].tp * pools[p].pp for p in result.disagg.pools], dtype=np.float64)
    return {
        "goodput": float(good.mean()) if len(good) else 0.0,
        "ttft_s_p99": float(np.percentile(ttft_f, 99)) if len(ttft_f) else math.nan,
        "tpot_s_p99": float(np.percentile(tpot_f, 99)) if len(tpot_f) else math.nan,
        "tpot_s_p50": float(np.percentile(tpot_f, 50)) if len(tpot_f) else math.nan,
        "output_tokens_per_s": out_tokens / span if span and span > 0 else math.nan,
        "throughput_rps": float(finished.sum()) / span if span and span > 0 else math.nan,
        # simulate run's figure (mean 1/TPOT, AIPerf's), under the name plan's tables have always given it; it was
        # 1 / median TPOT before plan.json recorded PER_USER_DEFINITION (an older folder's rows read as unknown)
        "tokens_per_s_per_user": output_throughput_per_user(tpot_f),
        "busy_fraction": (float(np.average(busy, weights=weights) / result.sim_end_at)
                          if len(busy) and result.sim_end_at > 0 else math.nan),
        "num_rejected": int((cols["status"] == Status.REJECTED.value).sum()),
    }


def search_layout(layout_dict: dict[str, Any], base_dict: dict[str, Any], slo_dict: dict[str, Any],
                  bound_qps: float, load_qps: float, rel_tol: float, need_qps: float | None = None) -> dict[str, Any]:
    """A layout's per-unit capacity (goodput criterion) and its figures at that load; never
    raises: an error is returned as ``status = "error"``.

    ``need_qps``: the least per-unit capacity at which this layout could match the cheapest
    fleet so far. One trial there first: if it fails, the layout cannot win (capacity below
    it, pass or fail being monotone in the load, as the bisection assumes) and is not searched
    further (``status = "below"``, ``below_qps``); if it passes, the search is the one an
    exhaustive grid runs (the same start, the same trials)."""
    start = time.perf_counter()
    layout = Layout.from_dict(layout_dict)
    slo = PlanSLO(**slo_dict)
    row: dict[str, Any] = {"key": layout.key, **layout.to_dict(), "num_gpus": layout.num_gpus,
                           "bound_qps": bound_qps, "status": "ok", "error": ""}
    trials: list[dict[str, Any]] = []
    try:
        base = RunConfig.from_dict(base_dict)
        row["scheduler"] = layout.scheduler(base)  # (a disaggregated layout's pools': default_pool_scheduler)
        config = layout.config(base)
        if need_qps is not None:
            first = run_trial(config, need_qps, slo.capacity_slo())
            trials.append({"key": layout.key, "qps": need_qps, "passed": first.passed, "goodput": first.goodput_fraction,
                           "ttft_s_p99": first.ttft_s_p99, "reason": f"(could it win?) {first.reason}"})
            if not first.passed:
                row.update(status="below", capacity_qps=0.0, below_qps=need_qps,
                           reason=f"cannot win: fails at {need_qps:.3g} req/s per unit ({first.reason})")
                row["wall_s"] = time.perf_counter() - start
                return {"row": row, "trials": trials}
        settings = search_settings(bound_qps, load_qps, rel_tol)
        report = find_capacity(config, slo.capacity_slo(), settings)
        capacity = report.capacity_qps
        seed = report.seeds[0]
        row["capacity_qps"] = capacity
        # Still passing at the ceiling (or below trials too short to judge): the unit carries at least this much.
        row["capacity_is_lower_bound"] = seed.at_least
        row["reason"] = seed.reason
        if seed.at_least and not seed.too_short and capacity >= settings.max_qps:  # (plan has no --max-qps to raise)
            row["reason"] = (f"carries at least {capacity:.4g} req/s a unit, the search's ceiling ({CEILING_LOADS:g}x "
                             f"the load, {MIN_CEILING_QPS:,.0f} at least): one unit carries the load")
        trials += [{"key": layout.key, "qps": t.qps, "passed": t.passed, "goodput": t.goodput_fraction,
                   "ttft_s_p99": t.ttft_s_p99, "reason": t.reason} for t in report.seeds[0].trials]
        figures = measure(config, capacity, slo) if capacity > 0 else {}
        row.update({f"at_capacity_{k}": v for k, v in figures.items()})
    except Exception as exc:  # noqa: BLE001 - a failing layout is recorded and the plan goes on
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        row.update(status="error", error=f"{type(exc).__name__}: {message}", capacity_qps=0.0, reason="")
    row["wall_s"] = time.perf_counter() - start
    return {"row": row, "trials": trials}


# ---------------------------------------------------------------------------------------------
# Fleets


@dataclass
class Candidate:
    """A layout with its bound, and once searched its capacity and fleet."""

    layout: Layout
    bound_qps: float
    price: GPUPrice
    row: dict[str, Any] | None = None
    extra_units: int = 0  # units verification added
    verified: dict[str, Any] | None = None  # the last verification's figures (of units() when it passed)
    pruned: str = ""
    verifications: dict[int, dict[str, Any]] = field(default_factory=dict)  # every verification's, by units

    def units_after(self, load_qps: float) -> int | None:
        """The fleet to verify next after the verifications so far, or None once they settle it: the fewest
        units that passed, one above the most that missed (or the first tried, which passed).

        After a miss and no pass yet, at least one unit more, at least twice the units added so far (a fleet far
        short of the load grows in a few rounds, not one unit a round: six rounds left 9 units of a fleet that
        needed more), and at least what the missed fleet's own throughput says the load needs (a saturated
        fleet serves what its units can, so the load needs ``units x load / served`` of them); once one passed,
        the middle of the fewest that passed and the most that missed (pass or miss is monotone in units)."""
        base = self.units_for(load_qps, self.capacity_qps)
        # (Fewer units than the per-unit capacity asks for are never tried: a first fleet that passes settles it.)
        missed = max((u for u, v in self.verifications.items() if not v["passed"]), default=base - 1)
        passed = min((u for u, v in self.verifications.items() if v["passed"]), default=None)
        if passed is not None:
            return None if passed - missed <= 1 else (missed + passed) // 2
        served = self.verifications[missed]["throughput_rps"]
        needed = math.ceil(missed * load_qps / served * (1 - 1e-12)) if served > 0 else 0  # (NaN: none served)
        return max(missed + 1, base + 2 * (missed - base), needed)

    @property
    def capacity_qps(self) -> float:
        return float(self.row.get("capacity_qps", 0.0)) if self.row else 0.0

    @property
    def capacity_is_lower_bound(self) -> bool:
        """The search still passed at its ceiling, or below trials too short to judge: the unit carries at least
        :attr:`capacity_qps` (its headroom is at least what the table shows)."""
        return bool(self.row) and self.row.get("capacity_is_lower_bound") is True

    def units_for(self, load_qps: float, capacity_qps: float) -> int:
        return math.ceil(load_qps / capacity_qps * (1 - 1e-12)) if capacity_qps > 0 else 0

    @property
    def usd_per_gpu_hour(self) -> float:
        assert self.price.usd_per_gpu_hour is not None
        return self.price.usd_per_gpu_hour

    def need_qps(self, load_qps: float, incumbent_usd: float) -> float | None:
        """The least per-unit capacity that matches ``incumbent_usd`` (None: no incumbent yet)."""
        if not math.isfinite(incumbent_usd):
            return None
        max_units = math.floor(incumbent_usd / (self.layout.num_gpus * self.usd_per_gpu_hour) + 1e-9)
        return load_qps / max_units if max_units >= 1 else None

    def lower_bound_usd(self, load_qps: float) -> float:
        if not math.isfinite(self.bound_qps):
            return self.layout.num_gpus * self.usd_per_gpu_hour  # at least one unit
        return self.units_for(load_qps, self.bound_qps) * self.layout.num_gpus * self.usd_per_gpu_hour

    def units(self, load_qps: float) -> int:
        return self.units_for(load_qps, self.capacity_qps) + self.extra_units

    def usd_per_hour(self, load_qps: float) -> float:
        return self.units(load_qps) * self.layout.num_gpus * self.usd_per_gpu_hour

    def feasible(self) -> bool:
        return self.row is not None and self.row.get("status") == "ok" and self.capacity_qps > 0

    def rank_key(self, load_qps: float) -> tuple:
        # Cheapest first; then fewer GPUs, more headroom, and the key (a total order: deterministic).
        units = self.units(load_qps)
        headroom = units * self.capacity_qps / load_qps
        return (round(self.usd_per_hour(load_qps), 9), units * self.layout.num_gpus, -headroom, self.layout.key)


def within(c: Candidate, load_qps: float, limits: Limits, lower: bool = False) -> bool:
    """Whether the candidate's fleet keeps to ``limits``; ``lower``: whether the least fleet
    its bound allows could (a layout failing that is never searched)."""
    least = c.units_for(load_qps, c.bound_qps) if math.isfinite(c.bound_qps) else 1
    units = least if lower else c.units(load_qps)
    gpus = units * c.layout.num_gpus
    usd = c.lower_bound_usd(load_qps) if lower else c.usd_per_hour(load_qps)
    return not limits.exceeded(gpus, usd)


# ---------------------------------------------------------------------------------------------
# Runners: search layouts in order, as many at once as there are workers


class Runner:
    """Searches layouts: ``submit(args)`` returns a handle, ``wait()`` the finished ones' (handle, result)."""

    def __init__(self, workers: int = 1, ray_address: str | None = None) -> None:
        self.workers, self.ray_address = max(1, workers), ray_address
        self._pool = None
        self._pending: dict[Any, Any] = {}
        self._ray = None
        self._remote = None

    def __enter__(self) -> Runner:
        if self.ray_address:
            try:
                import ray
            except ImportError:
                raise ConfigError("--ray-address", "Ray is not installed", "drop --ray-address to use local processes") from None
            from simulator.util.interrupts import signals_blocked

            self._ray = ray
            self._started_ray = not ray.is_initialized()
            if self._started_ray:
                with signals_blocked():
                    if self.ray_address == "local":
                        ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
                    else:
                        connect_ray(ray, self.ray_address)
            self._remote = ray.remote(num_cpus=1)(search_layout)
        elif self.workers > 1:
            from simulator.util.interrupts import WorkerPool

            self._pool = WorkerPool(self.workers)
            self._pool.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._pool is not None:
            self._pool.__exit__(*exc)
        if self._ray is not None:
            for ref in self._pending:
                self._ray.cancel(ref, force=True)
            if self._started_ray:
                self._ray.shutdown()

    @property
    def free(self) -> int:
        return self.workers - len(self._pending)

    def submit(self, tag: Any, args: tuple) -> None:
        if self._remote is not None:
            self._pending[self._remote.remote(*args)] = tag
        elif self._pool is not None:
            self._pending[self._pool.submit(search_layout, *args)] = tag
        else:
            self._pending[object()] = (tag, search_layout(*args))

    def wait(self) -> list[tuple[Any, dict[str, Any]]]:
        if not self._pending:
            return []
        if self._remote is not None:
            ready, _ = self._ray.wait(list(self._pending), num_returns=1)
            return [(self._pending.pop(r), self._ray.get(r)) for r in ready]
        if self._pool is not None:
            from concurrent.futures import FIRST_COMPLETED, wait

            done, _ = wait(list(self._pending), return_when=FIRST_COMPLETED)
            return [(self._pending.pop(f), f.result()) for f in done]
        key = next(iter(self._pending))
        return [self._pending.pop(key)]


# ---------------------------------------------------------------------------------------------
# Files: every searched layout written at once


LAYOUT_COLUMNS = ("key", *(f.name for f in fields(Layout)), "scheduler", "num_gpus", "bound_qps", "status", "error",
                  "capacity_qps", "capacity_is_lower_bound", "below_qps",
                  "reason", "at_capacity_goodput", "at_capacity_ttft_s_p99", "at_capacity_tpot_s_p99",
                  "at_capacity_tpot_s_p50", "at_capacity_output_tokens_per_s", "at_capacity_tokens_per_s_per_user",
                  "at_capacity_busy_fraction", "at_capacity_num_rejected", "wall_s")
TRIAL_COLUMNS = ("key", "qps", "passed", "goodput", "ttft_s_p99", "reason")


def _append(path: Path, columns: Sequence[str], rows: Iterable[dict[str, Any]]) -> None:
    header = None
    try:
        if path.exists():  # a resumed folder keeps its own header (one written before a column was added lacks it)
            with path.open(newline="", encoding="utf-8", errors="replace") as f:  # (read back as UTF-8: _read_done)
                header = next(csv.reader(f), None)
        f = path.open("a", newline="", encoding="utf-8")
    except OSError as exc:  # (a file made read-only inside a writable folder: a PermissionError traceback)
        raise ConfigError("--out", f"cannot write {path} ({exc.strerror or type(exc).__name__})",
                          "make the plan folder's files writable, or pass a new folder") from None
    names = list(header or columns)
    with f:
        writer = csv.DictWriter(f, fieldnames=names, extrasaction="ignore")
        if not header:
            writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in names})
        f.flush()


def plan_identity(base: RunConfig, load_qps: float, slo: PlanSLO, rel_tol: float) -> str:
    """What a searched layout's result depends on besides the layout (its resume key). The pools' scheduler where
    it is not the one every plan's pools ran before they ran the plan's engine (FALLBACK_POOL_SCHEDULER): a folder
    whose disaggregated rows ran vllm pools under this --scheduler is another plan, never resumed into this one."""
    from simulator.config.disagg_layout import FALLBACK_POOL_SCHEDULER

    pools = default_pool_scheduler(base.scheduler.name)
    context = {"pool_scheduler": pools} if pools != FALLBACK_POOL_SCHEDULER else {}
    return base.result_key(load_qps=load_qps, slo=asdict(slo), rel_tol=rel_tol, **context)


# What layouts.csv's at_capacity_tokens_per_s_per_user holds, recorded in plan.json as "per_user": the run's
# output tok/s per user (report.benchmark.output_throughput_per_user). A folder without it was written when the
# column held 1 / median TPOT.
PER_USER_DEFINITION = "mean 1/TPOT"


def _read_done(out: Path, identity: str, reads_files: bool = False) -> tuple[dict[str, dict[str, Any]], bool, bool]:
    """The layouts an earlier run of this plan searched (by key), from ``out`` (its plan.json read once), whether
    those rows hold tokens/s per user as :data:`PER_USER_DEFINITION` (plan.json says so; True where there are no
    rows), and whether its disaggregated rows were judged without a wait they now have (plan.json's "disagg_waits"
    is not :data:`~simulator.report.metrics.DISAGG_WAITS`): those are left out, to be searched again (never two
    verdicts in one table; :func:`_drop_stale_disagg`). A folder written before the per-user definition was recorded
    gives its rows' tokens/s per user as unknown (NaN): another figure (1 / median TPOT), which a resumed table would
    otherwise rank and plot beside this one unsaid."""
    info = out / "plan.json"
    try:
        data = json.loads(info.read_text()) if info.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        data = None
    if not isinstance(data, dict):  # none, or not a plan's record ([], a number): unreadable as one
        held = [name for name in ("layouts.csv", "trials.csv") if (out / name).is_file()]
        if held:  # rows of a plan nothing says is this one: never appended to
            raise ConfigError("--out", f"{out} holds a plan's {' and '.join(held)} but no readable plan.json saying "
                              "which plan its rows are", "pass a new --out folder, or delete that one")
        return {}, True, False
    current = data.get("per_user") == PER_USER_DEFINITION
    stale = data.get("disagg_waits") != DISAGG_WAITS
    if data.get("identity") != identity:
        why = ["other model, traffic, SLO or search settings", "disaggregated pools run under another scheduler"]
        if reads_files:
            why += ["other contents of the files it reads (a --trace edited since)",
                    "a plan written before servesim keyed plans by those contents"]
        raise ConfigError("--out", f"{out} holds another plan ({', '.join(why[:-1])}, or {why[-1]})",
                          "pass a new --out folder, or delete that one")
    path = out / "layouts.csv"
    if not path.is_file():
        return {}, True, stale
    done = {}
    text_columns = ("key", "gpu", "mode", "dtype", "scheduler", "status", "error", "reason")

    def edited(line: int, what: str) -> ConfigError:  # (the plan writes every row whole: this is no row of its)
        return ConfigError("--out", f"{path} line {line} {what}, so the plan cannot resume from it",
                           "pass a new --out folder, or delete that one")

    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader, rows, line = csv.DictReader(f), [], 2
            for row in reader:  # (a row starts on the line after the last one ended: a reason may hold a newline)
                rows.append((line, row))
                line = reader.line_num + 1
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError("--out", f"{path} is not a plan's layouts table ({type(exc).__name__})",
                          "pass a new --out folder, or delete that one") from None
    for line, row in rows:
        if None in row or None in row.values():
            raise edited(line, "has " + ("more" if None in row else "fewer") + " cells than the header")
        if not row.get("key") or "status" not in row:
            raise edited(line, "has no key or status")
        parsed: dict[str, Any] = {}
        for k, v in row.items():
            if k in text_columns:
                parsed[k] = v
            elif k == "capacity_is_lower_bound":
                parsed[k] = v == "True"
            else:
                try:
                    parsed[k] = float(v) if v not in ("", "None") else math.nan
                except ValueError:
                    raise edited(line, f"has {k} {v!r}, not a number") from None
        if not current:
            parsed["at_capacity_tokens_per_s_per_user"] = math.nan
        if parsed.get("mode") == "disagg" and stale:
            continue  # judged without a wait it now has: searched again (_drop_stale_disagg takes it out of the file)
        if parsed.get("status") in ("ok", "below"):
            done[parsed["key"]] = parsed
    return done, current or not done, stale


def _drop_stale_disagg(out: Path) -> None:
    """Take the disaggregated rows out of ``out``'s layouts.csv and trials.csv, judged without a wait they now have
    (:func:`_read_done`), before plan.json is rewritten with the marker: a resume killed before it searched them again
    must not read them back as current, nor show old trials beside new ones. Each file is replaced whole."""
    for name, is_disagg in (("layouts.csv", lambda row: row.get("mode") == "disagg"),
                            ("trials.csv", lambda row: " disagg " in f" {row.get('key', '')} ")):
        path = out / name
        if not path.is_file():
            continue
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header, rows = reader.fieldnames or [], list(reader)
        kept = [row for row in rows if not is_disagg(row)]
        if len(kept) == len(rows):
            continue
        with atomic_file(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, header)
            writer.writeheader()
            writer.writerows(kept)


# ---------------------------------------------------------------------------------------------
# The plan


@dataclass
class PlanResult:
    base: RunConfig
    load_qps: float
    slo: PlanSLO
    lengths: Lengths
    candidates: list[Candidate]
    notes: list[str] = field(default_factory=list)
    best: Candidate | None = None  # the cheapest by per-unit capacity, before verification
    answer: Candidate | None = None  # the verified answer (None: none meets the SLO within the limits)
    limits: Limits = field(default_factory=Limits)
    num_searched: int = 0
    num_resumed: int = 0
    wall_s: float = 0.0
    num_verified: int = 0  # fleets simulated whole
    unconverged: Candidate | None = None  # the cheapest, whose verifications the rounds ran out before settling
    written: list[Path] = field(default_factory=list)  # the files write_outputs wrote (a figure may be skipped)
    write_error: OSError | None = None  # why write_outputs failed (a full disk): the caller says so after the plan

    def why_no_answer(self) -> str:
        """Why no fleet is the answer, from the cheapest layout's side of it."""
        if self.unconverged is not None:
            c = self.unconverged
            missed = max((u for u, v in c.verifications.items() if not v["passed"]), default=None)
            passed = min((u for u, v in c.verifications.items() if v["passed"]), default=None)
            tried = (f"missed the SLO with {missed} units (goodput {c.verifications[missed]['goodput']:.1%})"
                     if missed is not None else "")
            met = f"{' and ' if tried else ''}met it with {passed}" if passed is not None else ""
            return (f"verification did not converge after {self.num_verified} rounds: the cheapest layout, "
                    f"{c.layout.key}, {tried}{met}, against the {c.units_for(self.load_qps, c.capacity_qps)} its "
                    "per-unit capacity asks for (see the notes)")
        ranked = self.ranked()
        if not ranked:
            if any(c.pruned == "limits" for c in self.candidates):
                limits = " and ".join(x for x in (self.limits.exceeded(10**9, 0.0), self.limits.exceeded(0, math.inf)) if x)
                return f"no layout meets the SLO within {limits}: the least fleet each layout could be exceeds it"
            searched = [c for c in self.candidates if c.row is not None and c.row.get("reason")]
            why = f" (e.g. {searched[0].layout.key}: {searched[0].row['reason']})" if searched else ""
            return f"no layout meets the SLO at this load within the limits{why}"
        c = ranked[0]
        units = c.units(self.load_qps)
        over = self.limits.exceeded(units * c.layout.num_gpus, c.usd_per_hour(self.load_qps))
        if not over:
            return "no layout meets the SLO at this load within the limits"
        v = c.verified
        missed = (f"; {v['units']} units missed the SLO (goodput {v['goodput']:.1%})"
                  if v is not None and not v["passed"] and v["units"] < units else "")
        return (f"no layout meets the SLO within {over}: the cheapest, {c.layout.key}, needs {units} units "
                f"({units * c.layout.num_gpus} GPUs, ${c.usd_per_hour(self.load_qps):,.2f}/h){missed}")

    def ranked(self) -> list[Candidate]:
        feasible = [c for c in self.candidates if c.feasible()]
        return sorted(feasible, key=lambda c: c.rank_key(self.load_qps))

    def table(self):  # noqa: ANN201 - a pandas frame
        """The ranked table: one row per searched layout that can carry the load."""
        import pandas as pd

        rows = []
        mean_out = self.lengths.mean_output
        for rank, c in enumerate(self.ranked(), start=1):
            units = c.units(self.load_qps)
            gpus = units * c.layout.num_gpus
            usd = c.usd_per_hour(self.load_qps)
            out_tok_s = self.load_qps * mean_out
            row = c.row or {}
            figures = c.verified or {}
            busy = figures.get("busy_fraction", row.get("at_capacity_busy_fraction", math.nan))
            # The search's short trials overstate a unit's capacity (verify_num_requests); where the fleet's
            # verification missed at V units, a unit carries under load / V, so U units' headroom is under U / V - 1
            # (a row showed +131% beside "42% missed at 1"; a planner audit).
            headroom = units * c.capacity_qps / self.load_qps - 1
            capped = bool(c.verified is not None and not c.verified["passed"] and figures.get("units")
                          and headroom > units / figures["units"] - 1)
            if capped:
                headroom = units / figures["units"] - 1
            watts = gpus * gpu_power_w(c.price, busy) if c.price.max_w and not math.isnan(busy) else math.nan
            rows.append({
                "rank": rank, "layout": c.layout.key, "gpu": c.layout.gpu, "mode": c.layout.mode,
                "gpus_per_unit": c.layout.num_gpus, "units": units, "gpus": gpus, "usd_per_hour": usd,
                "usd_per_mtok": usd / (out_tok_s * 3600) * 1e6,
                "capacity_qps_per_unit": c.capacity_qps, "headroom": headroom,
                "capacity_is_lower_bound": c.capacity_is_lower_bound,  # the headroom is at least the figure
                "headroom_is_upper_bound": capped,  # a missed verification's bound: the headroom is below the figure
                "tokens_per_s_per_gpu": out_tok_s / gpus,
                "tokens_per_s_per_user": row.get("at_capacity_tokens_per_s_per_user", math.nan),
                "j_per_output_token": watts / out_tok_s if out_tok_s else math.nan,
                "over_limit": self.limits.exceeded(gpus, usd),
                "verified": "" if c.verified is None else ("met" if c.verified["passed"] else "missed"),
                "verified_units": figures.get("units", 0),  # a missed fleet is shown with one unit more
                "verified_goodput": figures.get("goodput", math.nan),
                "verified_ttft_s_p99": figures.get("ttft_s_p99", math.nan),
                "verified_tpot_s_p99": figures.get("tpot_s_p99", math.nan),
                "extra_units": c.extra_units,
            })
        return pd.DataFrame(rows)


def verify_num_requests(base: RunConfig, load_qps: float, slo: PlanSLO, requests_per_unit: int, units: int) -> int:
    """Requests a fleet's verification sends: the search's trials', ``requests_per_unit`` a unit, a capacity
    search's trial (``simulate capacity``'s default) and :data:`VERIFY_TTFTS` TTFT limits of arrivals (at most
    :data:`VERIFY_MAX_SPAN_S` of them), whichever is most. The searches' short trials overstate a unit's capacity (their queues have no time to grow: 512 requests
    put a B200 unit at 13.6 req/s where 2,048 pass 12.75 and fail 13), and the verdict is what catches it, at the
    steady state a deployment runs in, not in its first seconds."""
    # (the span at most VERIFY_MAX_SPAN_S of arrivals: a --ttft-slo of 2,000 s asked 200,000 requests of 5 req/s)
    span = min(math.ceil(min(VERIFY_TTFTS * slo.ttft_s, VERIFY_MAX_SPAN_S) * load_qps), VERIFY_MAX_SPAN_REQUESTS)
    return max(base.workload.num_requests, requests_per_unit * units, CAPACITY_DEFAULT_NUM_REQUESTS, span)


def fleet_run(layout: Layout, base: RunConfig, units: int, num_requests: int, load_qps: float) -> RunConfig:
    """The run that verifies ``units`` units of ``layout``: the whole fleet behind its router, ``num_requests``
    requests at ``load_qps``."""
    return layout.config(base, units=units).replace(workload__num_requests=num_requests, workload__qps=load_qps)


def verify(candidate: Candidate, base: RunConfig, load_qps: float, slo: PlanSLO, requests_per_unit: int) -> dict[str, Any]:
    """Simulate the candidate's whole fleet behind its router at ``load_qps`` and judge it."""
    units = candidate.units(load_qps)
    num_requests = verify_num_requests(base, load_qps, slo, requests_per_unit, units)
    check_run_fits(num_requests)  # (a fleet's requests: --num-requests 256 a unit of a thousand-unit fleet)
    figures = measure(fleet_run(candidate.layout, base, units, num_requests, load_qps), load_qps, slo)
    figures["passed"] = figures["goodput"] >= slo.attainment
    figures["units"] = units
    figures["num_requests"] = num_requests
    return figures


def plan(base: RunConfig, load_qps: float, slo: PlanSLO, space: SearchSpace = SearchSpace(),  # noqa: B008, PLR0913
         prices: dict[str, GPUPrice] | None = None, limits: Limits = Limits(), rel_tol: float = PLAN_REL_TOL,  # noqa: B008
         workers: int = 1, ray_address: str | None = None, out: Path | None = None, verify_fleet: bool = True,
         prune: bool = True, max_verify_rounds: int = 12, verify_requests_per_unit: int = 256,
         frontier_per_group: int = 3,
         on_progress: Callable[[str, int, int], None] | None = None) -> PlanResult:
    """The cheapest fleet meeting ``slo`` at ``load_qps`` (module docstring). ``prune=False``
    searches every layout (an exhaustive grid). ``frontier_per_group``: for each GPU type and
    mode with no layout searched in full, that many of its layouts (by bound) are searched
    afterwards, so the frontier plot shows every group; they join the table, never the answer's
    choice (the answer is fixed by then)."""
    start = time.perf_counter()
    if not (math.isfinite(load_qps) and load_qps > 0):
        raise ConfigError("--qps", f"the load must be a positive request rate, got {load_qps}", "e.g. --qps 40")
    if base.is_disaggregated:
        raise ConfigError("--prefill-pool", "the planner chooses the pools itself", "drop --prefill-pool/--decode-pool")
    gpus, notes = candidate_gpus(base, space, prices)
    if not gpus:
        raise ConfigError("--gpus", "no candidate GPU has a price", "give prices with --price GPU=USD or --prices FILE")
    layouts, dropped = enumerate_layouts(base, space, gpus)
    notes += dropped
    lengths = Lengths.of(base)
    candidates = [Candidate(lay, capacity_bound(lay, base, lengths, slo), price_of(lay.gpu, prices)) for lay in layouts]
    if not candidates:
        raise ConfigError("--gpus", f"no layout of {base.replica.model} fits on {', '.join(gpus)}"
                          + (f"; {'; '.join(dropped)}" if dropped else ""),
                          "allow more GPUs per replica (--tps), a smaller --max-model-len or another precision")
    for c in candidates:  # limits rule a layout out before any search if even its bound breaks them
        if not within(c, load_qps, limits, lower=True):
            c.pruned = "limits"
    result = PlanResult(base, load_qps, slo, lengths, candidates, notes, limits=limits)
    identity = plan_identity(base, load_qps, slo, rel_tol)
    done: dict[str, dict[str, Any]] = {}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        from simulator.config.inputs import input_files

        done, current, stale = _read_done(out, identity, bool(input_files(base)))
        if stale:
            _drop_stale_disagg(out)
        # The rows appended here hold the current per-user figure; a folder with older rows stays unmarked (its
        # figures all read as unknown on a later resume: never two definitions in one column).
        marker = {"per_user": PER_USER_DEFINITION} if current else {}
        # Replaced whole (a full disk or a kill mid-write must not leave it empty: the folder's rows would then be
        # refused as no plan's, every layout searched so far lost)
        with atomic_file(out / "plan.json") as tmp:
            tmp.write_text(json.dumps({"identity": identity, "load_qps": load_qps, "slo": asdict(slo),
                                       "rel_tol": rel_tol, "config": base.to_dict(),
                                       "pool_scheduler": default_pool_scheduler(base.scheduler.name),
                                       "disagg_waits": DISAGG_WAITS, **marker}, indent=1))
    base_dict, slo_dict = base.to_dict(), asdict(slo)
    order = sorted(candidates, key=lambda c: (c.lower_bound_usd(load_qps), c.layout.key))
    for c in order:
        if c.layout.key in done:
            c.row = done[c.layout.key]
            result.num_resumed += 1

    def incumbent(known: Callable[[Candidate], bool] = lambda c: True) -> float:
        fleets = [c.usd_per_hour(load_qps) for c in candidates
                  if c.feasible() and within(c, load_qps, limits) and known(c)]
        return min(fleets, default=math.inf)

    def search_round(runner: Runner, label: str = "") -> None:
        queue = [c for c in order if c.row is None and not c.pruned]
        total = len(queue)
        finished = 0
        spent = 0.0
        # Same plan, same files, whatever the timing: the n-th search of a round is judged (pruned, or told the least
        # capacity that could win) against the fleets of the searches numbered below n - lag only, every one of which
        # has finished before it starts (with one worker, lag 0: all before it, the sequential search); a search that
        # finished sooner is not seen early. lag 2(N - 1), not N - 1: a free worker waits on the oldest search in
        # flight less often (a replay of a plan's search times: +13% wall at 4 workers, +42% at 16 with N - 1), for
        # a little pruning. Results are written in submission order. (Another --workers may cut other layouts short;
        # the answer is the same.)
        index: dict[int, int] = {}  # id(candidate) -> its submission number this round
        results: dict[int, dict[str, Any]] = {}  # submission number -> its search's record, until written
        num_submitted = num_written = 0
        lag = 2 * (runner.workers - 1)

        def known_before(n: int) -> Callable[[Candidate], bool]:
            return lambda c: id(c) not in index or index[id(c)] < n - lag

        def write(numbers: Iterable[int]) -> None:
            for n in numbers:
                record = results.pop(n)
                if out is not None:
                    _append(out / "layouts.csv", LAYOUT_COLUMNS, [record["row"]])
                    _append(out / "trials.csv", TRIAL_COLUMNS, record["trials"])

        try:
            while queue or runner._pending:
                # (the searches a submission is judged by have all finished: every number below num_written has)
                while queue and runner.free > 0 and num_written >= num_submitted - lag:
                    c = queue.pop(0)
                    best = incumbent(known_before(num_submitted))
                    if prune and c.lower_bound_usd(load_qps) > best + 1e-9:
                        c.pruned = "bound"
                        total -= 1
                        continue
                    need = c.need_qps(load_qps, best) if prune else None
                    index[id(c)] = num_submitted
                    num_submitted += 1
                    runner.submit(c, (c.layout.to_dict(), base_dict, slo_dict, c.bound_qps, load_qps, rel_tol, need))
                for c, record in runner.wait():
                    c.row = record["row"]
                    c.pruned = ""
                    finished += 1
                    result.num_searched += 1
                    spent = time.perf_counter() - start
                    results[index[id(c)]] = record
                    while num_written in results:  # (in submission order: the files read alike whatever finished first)
                        write([num_written])
                        num_written += 1
                    if on_progress is not None:
                        left = total - finished
                        eta = spent / finished * left / max(1, runner.workers) if finished else math.nan
                        best = incumbent()
                        row = c.row
                        what = (f"cannot win (fails at {float(row['below_qps']):.3g} req/s per unit)"
                                if row.get("status") == "below" else f"error: {row.get('error')}"
                                if row.get("status") == "error" else f"{c.capacity_qps:.3g} req/s per unit")
                        incumbent_text = f"; best ${best:,.2f}/h" if math.isfinite(best) else ""
                        on_progress(f"{label}{c.layout.key}: {what}{incumbent_text}; ETA {eta:.0f}s at most "
                                    "(the rest may be pruned)", finished, total)
        except BaseException:
            # (interrupted: what finished is kept, in number order, for a resume to read; the disk that stopped it
            # does not replace the first error)
            with contextlib.suppress(OSError):
                write(sorted(results))
            raise

    with Runner(workers, ray_address) as runner:
        for round_index in range(max_verify_rounds + 1):
            best_now = incumbent()
            for c in candidates:
                if c.pruned == "bound":
                    c.pruned = ""  # reconsidered against the incumbent of this round
                if c.row is not None and c.row.get("status") == "below":
                    # A cut is a fact about the layout (it fails at below_qps) judged against an incumbent; it
                    # holds only while this run's incumbent needs at least below_qps of it. A resumed plan's
                    # cut may have been made against a fleet outside this run's space or limits: with no
                    # incumbent here (or no pruning) nothing justifies it, and left cut it would hide a layout
                    # that carries the load (the answer is fixed before the frontier fill searches it).
                    if not prune or not math.isfinite(best_now):
                        c.row = None
                        continue
                    need = c.need_qps(load_qps, best_now)
                    # None: not even one unit matches the incumbent; the bound prunes it.
                    if need is not None and need < float(c.row["below_qps"]) - 1e-12:
                        c.row = None  # the incumbent got dearer: it might win now
            # A later round's count starts again: it searches what the verified fleet reopened.
            search_round(runner, f"round {round_index + 1}, reopened by the verification: " if round_index else "")
            ranked = [c for c in result.ranked() if within(c, load_qps, limits)]
            if result.best is None:
                result.best = ranked[0] if ranked else None
            if not ranked or not verify_fleet:
                result.answer = ranked[0] if ranked else None
                break
            top = ranked[0]
            units = top.units(load_qps)
            if units not in top.verifications:
                top.verifications[units] = verify(top, base, load_qps, slo, verify_requests_per_unit)
                result.num_verified += 1
                if on_progress is not None:
                    v = top.verifications[units]
                    on_progress(f"verified {units}x {top.layout.key} at {load_qps:g} req/s: goodput {v['goodput']:.2%} "
                                f"({'met' if v['passed'] else 'missed'})", 0, 0)
            top.verified = top.verifications[units]
            following = top.units_after(load_qps)
            if following is None:
                if top.verified["passed"]:  # settled: the fewest units that met the SLO, and it is the cheapest
                    result.answer = top
                    break
                # Settled by a miss just below the fewest that passed (the bisection's last try): that fleet is
                # the one, verified already; ranked again next round, as it is dearer than the size that missed.
                following = min(u for u, v in top.verifications.items() if v["passed"])
            # The next fleet to verify, next round if it is still the cheapest.
            top.extra_units = following - top.units_for(load_qps, top.capacity_qps)
        else:  # the rounds ran out before the cheapest fleet's verifications settled (a break ends every other way)
            result.unconverged = ranked[0]
        if frontier_per_group > 0:  # each GPU type and mode on the frontier plot, even those that cannot win
            fill = []
            for group in dict.fromkeys((c.layout.gpu, c.layout.mode) for c in order):
                members = [c for c in order if (c.layout.gpu, c.layout.mode) == group]
                if not any(c.feasible() for c in members):
                    shapes: dict[tuple, Candidate] = {}  # the first (by bound) of each parallel shape
                    for c in members:
                        lay = c.layout
                        shape = (lay.tp, lay.pp, lay.ep, lay.attention_dp, lay.prefill_tp, lay.num_prefill, lay.num_decode)
                        if c.pruned != "limits" and shape not in shapes:
                            shapes[shape] = c
                    # A layout searched in full already (capacity 0, or an error) would only be searched again:
                    # its row is its answer (and a second row in layouts.csv and trials.csv).
                    fill += [c for c in list(shapes.values())[:frontier_per_group]
                             if c.row is None or c.row.get("status") == "below"]
            for c in fill:
                c.row, c.pruned = None, ""
            saved_prune, prune = prune, False  # searched in full: a capacity, not a verdict
            search_round(runner, "frontier: ")
            prune = saved_prune
    # The answer, or the cheapest layout where there is none: a plan that gives no answer because its trials are
    # too short (a verification that never settles) needs the note most.
    shown = result.answer or next((c for c in result.ranked() if within(c, load_qps, limits)), None)
    if shown is not None:
        # A finite trial cannot tell rates apart once its arrivals take less time than a few TTFT
        # limits: the queue a too-high rate builds has no time to grow past the SLO.
        span_s = lengths.unit_span / shown.capacity_qps
        if span_s < SHORT_TRIAL_TTFTS * slo.ttft_s:
            whose = "the answer's" if shown is result.answer else f"the cheapest layout's ({shown.layout.key})"
            result.notes.append(f"{whose} capacity trials send {lengths.num_requests} requests in {span_s:.1f}s, "
                                f"under {SHORT_TRIAL_TTFTS}x the TTFT limit: its capacity may be overstated; raise "
                                "--num-requests")
    if result.answer is not None:
        v = result.answer.verified
        if v is not None and (1 - slo.attainment) * v["num_requests"] < MIN_MISSES_JUDGED:
            # The verdict turns on a handful of requests: another seed may pass or fail it.
            result.notes.append(f"the answer's fleet was verified on {v['num_requests']:,} requests, of which "
                                f"{(1 - slo.attainment) * v['num_requests']:.0f} may miss the SLO at "
                                f"{percent(slo.attainment)}: a handful of requests decides it; raise --num-requests for a "
                                "firmer verdict")
        a = result.answer
        if (verify_fleet and a.layout.mode == "disagg" and a.units(load_qps) > 1 and base.kv_link_scope == "shared"
                and math.isfinite(parse_link(base.kv_link, a.layout.gpu).bytes_per_s)):
            # (Layout.config: the fleet's one link runs each transfer units times faster than a unit's own would)
            result.notes.append(f"--kv-link-scope shared: the answer's fleet of {a.units(load_qps)} units was checked "
                                f"on one KV link with the units' bandwidth together, which runs each transfer "
                                f"{a.units(load_qps)}x faster than a unit's own link would (optimistic where a unit's "
                                "link saturates); --kv-link-scope per-worker gives each worker its own")
    result.wall_s = time.perf_counter() - start
    if out is not None:
        try:
            result.written = write_outputs(result, out)
        except OSError as err:  # (the plan is made: its caller shows it, then says what could not be written)
            result.write_error = err
    return result


# ---------------------------------------------------------------------------------------------
# A mix of GPU types for short and long requests (Melange's question, in its simplest form)


@dataclass
class MixNote:
    """The cheapest split of the traffic at its median total length, each half on its own GPU type."""

    short_gpu: str
    long_gpu: str
    short_usd: float
    long_usd: float
    single_usd: float  # the plan's answer
    split_same_usd: float  # the cheapest split with one GPU type for both halves
    rows: list[dict[str, Any]]

    @property
    def mixed_usd(self) -> float:
        return self.short_usd + self.long_usd

    def describe(self) -> str:
        mixed, single = self.mixed_usd, self.single_usd
        if self.short_gpu == self.long_gpu or mixed >= single - 1e-9:
            return (f"no mix of GPU types is cheaper: short and long requests apart cost at best ${mixed:,.2f}/h "
                    f"({self.short_gpu} + {self.long_gpu}) against ${single:,.2f}/h for the answer")
        return (f"a mix is cheaper: short requests on {self.short_gpu} (${self.short_usd:,.2f}/h) and long ones on "
                f"{self.long_gpu} (${self.long_usd:,.2f}/h) cost ${mixed:,.2f}/h, {1 - mixed / single:.0%} below the "
                f"answer's ${single:,.2f}/h (one GPU type for both halves apart: ${self.split_same_usd:,.2f}/h)")


def mix_note(result: PlanResult, folder: Path, per_gpu: int = 2, rel_tol: float = PLAN_REL_TOL) -> MixNote | None:
    """Split the plan's traffic at the median prompt + output length into a short and a long
    half (each half the load's share, Poisson, its own rows as a trace), search the capacity of
    the ``per_gpu`` cheapest searched layouts of each GPU type on each half, and price the
    cheapest pair. Routing by length is assumed free."""
    from simulator.engine.cluster import prepare_table

    answer = result.answer
    if answer is None:
        return None
    base, load = result.base, result.load_qps
    table, _, _ = prepare_table(base, None, None)
    prompt = np.asarray(table.num_prompt_tokens)
    output = np.asarray(table.num_output_tokens)
    total = prompt + output
    short = total <= np.median(total)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    halves = {}
    for name, mask in (("short", short), ("long", ~short)):
        path = folder / f"{name}.csv"
        lines = ["num_prefill_tokens,num_decode_tokens", *(f"{p},{o}" for p, o in zip(prompt[mask], output[mask],
                                                                                        strict=True))]
        path.write_text("\n".join(lines) + "\n")
        config = base.replace(workload__trace=str(path), workload__arrival="poisson")
        halves[name] = (config, load * float(mask.mean()))
    rows = []
    best: dict[tuple[str, str], float] = {}
    for gpu in dict.fromkeys(c.layout.gpu for c in result.ranked()):
        for c in [c for c in result.ranked() if c.layout.gpu == gpu][:per_gpu]:
            for name, (config, share) in halves.items():
                bound = math.inf  # the half's own lengths: no bound needed, the search is short
                report = find_capacity(c.layout.config(config), result.slo.capacity_slo(),
                                       search_settings(bound, share, rel_tol))
                capacity = report.capacity_qps
                units = math.ceil(share / capacity * (1 - 1e-12)) if capacity > 0 else 0
                usd = units * c.layout.num_gpus * c.usd_per_gpu_hour if units else math.inf
                rows.append({"half": name, "load_qps": share, "layout": c.layout.key, "gpu": gpu,
                             "capacity_qps": capacity, "units": units, "usd_per_hour": usd})
                best[(name, gpu)] = min(best.get((name, gpu), math.inf), usd)
    gpus = sorted({g for _, g in best})
    pairs = [(best[("short", a)] + best[("long", b)], a, b) for a in gpus for b in gpus]
    _, short_gpu, long_gpu = min(pairs)
    same = min(best[("short", g)] + best[("long", g)] for g in gpus)
    return MixNote(short_gpu, long_gpu, best[("short", short_gpu)], best[("long", long_gpu)],
                   answer.usd_per_hour(load), same, rows)


# ---------------------------------------------------------------------------------------------
# What a person acts on


def frontier(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The Pareto frontier of (per-user, per-GPU) points, both larger-is-better, by per-user speed."""
    best: list[tuple[float, float]] = []
    for x, y in sorted((p for p in points if all(map(math.isfinite, p))), key=lambda p: (-p[0], -p[1])):
        if not best or y > best[-1][1]:
            best.append((x, y))
    return sorted(best)


def frontier_figure(result: PlanResult):  # noqa: ANN201
    """Tokens/s per GPU against tokens/s per user at each layout's capacity, the frontier of
    each GPU type and mode drawn, the answer starred."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 5))
    ax = fig.subplots()
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for c in result.candidates:
        if not c.feasible() or c.row is None:
            continue
        per_user = float(c.row.get("at_capacity_tokens_per_s_per_user", math.nan))
        per_gpu = c.capacity_qps * result.lengths.mean_output / c.layout.num_gpus
        groups.setdefault((c.layout.gpu, c.layout.mode), []).append((per_user, per_gpu))
    for i, ((gpu, mode), pts) in enumerate(sorted(groups.items())):
        color = f"C{sorted({g for g, _ in groups}).index(gpu)}"
        style = "-" if mode == "agg" else "--"
        ax.scatter(*zip(*pts, strict=True), s=10, color=color, alpha=0.3)
        front = frontier(pts)
        if front:
            ax.plot(*zip(*front, strict=True), style, marker="o", ms=4, color=color, label=f"{gpu} {mode}", zorder=3 + i)
    if result.answer is not None and result.answer.row is not None:
        r = result.answer.row
        ax.scatter([r.get("at_capacity_tokens_per_s_per_user")],
                   [result.answer.capacity_qps * result.lengths.mean_output / result.answer.layout.num_gpus],
                   marker="*", s=220, color="k", zorder=10, label=f"answer: {result.answer.layout.key}")
    ax.axvline(1.0 / result.slo.tpot_s, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("output tokens/s per user (mean 1/TPOT) at the layout's capacity")
    ax.set_ylabel("output tokens/s per GPU at capacity (capacity x mean output / GPUs)")
    ax.set_title(f"{result.base.replica.model}: {result.slo.describe()}", fontsize=9)
    if ax.get_legend_handles_labels()[0]:  # (no frontier and no answer: a legend of nothing warns on stderr)
        ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def answer_config(result: PlanResult) -> RunConfig | None:
    """The run that verified the answer's fleet (its units, its request count, the load): ``simulate run --config``
    of it reproduces the verification's TTFT and TPOT; None where no fleet was verified."""
    a = result.answer
    if a is None or a.verified is None:
        return None
    v = a.verified
    return fleet_run(a.layout, result.base, int(v["units"]), int(v["num_requests"]), result.load_qps)


def write_outputs(result: PlanResult, out: Path) -> list[Path]:
    """``plan.csv`` (the ranked table), ``answer.json``, ``answer_config.json`` (the run that verified the answer),
    ``frontier.png``; layouts.csv and trials.csv are written as the search goes."""
    out = Path(out)
    table = result.table()
    table.to_csv(out / "plan.csv", index=False)
    written = [out / "plan.csv", out / "answer.json"]
    verified_run = answer_config(result)
    if verified_run is not None:
        (out / "answer_config.json").write_text(json.dumps(verified_run.to_dict(), indent=1, default=str))
        written.append(out / "answer_config.json")
    else:  # (an earlier plan's in this folder is not this one's)
        (out / "answer_config.json").unlink(missing_ok=True)
    answer = None
    if result.answer is not None:
        a = result.answer
        answer = {"layout": a.layout.to_dict(), "key": a.layout.key, "scheduler": a.layout.scheduler(result.base),
                  "units": a.units(result.load_qps),
                  "usd_per_hour": a.usd_per_hour(result.load_qps), "verified": a.verified,
                  "price": asdict(a.price),
                  **{f"launch_{engine}": launch_command(a, result.base, engine) for engine in LAUNCH_ENGINES}}
    (out / "answer.json").write_text(json.dumps({
        "load_qps": result.load_qps, "slo": asdict(result.slo), "answer": answer, "notes": result.notes,
        "num_searched": result.num_searched, "num_resumed": result.num_resumed,
        "num_pruned": sum(1 for c in result.candidates if c.pruned), "num_layouts": len(result.candidates),
        "mean_prompt_tokens": result.lengths.mean_prompt, "mean_output_tokens": result.lengths.mean_output},
        indent=1, default=str))
    with or_skipped("frontier.png", result.notes):
        from simulator.report.plots import save

        written += save(frontier_figure(result), out / "frontier")
    return written
