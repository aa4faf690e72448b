"""Engine overheads: what a real serving engine adds around the kernels.

A kernel cost model (roofline or learned) prices the GPU work of an iteration. A real
engine's iteration is longer: CPU work that grows with the batch (scheduling, building
inputs, sampling, processing outputs), the RPC that ships each step to the TP workers, a
latency floor on every collective that the kernel tables do not show (NCCL from Python,
worker skew), kernel-launch latency where the engine runs without CUDA graphs, and, in the
measurements at hand, large prefills running slower per token than the kernels predict.
This module names those terms per engine, as a layer *on top of* any kernel cost model:

    cpu   = cpu_iteration_s + cpu_per_seq_s * seqs + cpu_per_prefill_token_s * prefill_tokens
            + cpu_per_prefill_seq_layer_s * min(prefills, prefill_seq_layer_max_chunks) * layers
            + [tp > 1] (rpc_s(tp) + rpc_per_seq_s * seqs)
    gpu   = kernels + collectives * collective_extra_s(tp)
            + prefill_excess_token_s * max(0, prefill_tokens - prefill_excess_threshold_tokens)
    gpu   = max(gpu, launch)      where the engine has no CUDA graphs (launch-bound steps)
    gpu   = max(gpu, prefill_floor_per_layer_s * layers)   a step with > prefill_floor_above_tokens prompt tokens
    time  = cpu + gpu             synchronous engine (vLLM v0, sarathi-serve)
    time  = max(cpu, gpu)         async scheduling (CPU work of step n+1 hides under step n)

and, for disaggregated deployments only, ``handoff_s`` per request between the prefill's end and its
KV transfer (:class:`~simulator.engine.disagg.DisaggCluster`): the serving stack's second hop and the
KV connector's handshake, which no kernel or link shows.

``seqs`` counts the requests in the batch (prefill chunks plus decodes), ``prefills`` the prompt chunks among
them (a speculative verify is none) and ``layers`` the model's: what a prompt chunk costs beyond the kernel tables
and beyond a decode's scheduling, found to grow with the model's depth on vLLM's measured rows (its blocks and
prefix hashes, attention metadata, the kernels of a varlen prefill outside the tables' timed shapes: the rows
cannot tell which; a fitted preset charges it for no more chunks than a step of its rows held,
``prefill_seq_layer_max_chunks``), ``collectives`` the
TP collectives of one forward pass (two all-reduces a layer, one for parallel attention/MLP
blocks, plus the LM head's vocab gather). The prefill floor is the least a step carrying
prompt tokens takes: today's engines capture decode steps in CUDA graphs but run prefill
steps outside them (SGLang's extend batches and TensorRT-LLM's context phase always; vLLM's
mixed steps above its capture sizes, 512 tokens by default, which ``prefill_floor_above_tokens``
stands for, counting prompt tokens only), so a small prefill is bound by launch and host work
per layer; as fitted on measured rows it also holds whatever else a prefill step costs that
the kernel tables do not show. ``collective_extra_s`` is what the engine's
collectives cost *beyond* the kernel model's per-call latency, so it may be negative for an
engine with a faster collective (vLLM's custom all-reduce); a collective never costs less
than nothing. Every term is a constant of the preset: the hot loop does a handful of
multiply-adds on precomputed numbers, never a fit.

Presets live in :data:`ENGINES`, each with the data it was measured on and how it was fitted;
``simulate calibrate-engine`` writes the same fields to a JSON artifact that ``--engine``
accepts wherever a preset name is accepted.
"""

from __future__ import annotations

import json
import math
import sys
from bisect import bisect_right
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from itertools import accumulate
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.errors import ConfigError
from simulator.config.json_types import check_json_types, loads_once
from simulator.config.run_config import (
    DEFAULT_ENGINE,
    ENGINE_PRESETS,
    KERNEL_TABLES,
    ReplicaConfig,
    check_override_has_value,
    split_engine_spec,
)
from simulator.config.schedulers import SCHEDULER_NAMES
from simulator.costmodel.base import BatchShape, CostModel, stretch_forms
from simulator.costmodel.calibration import KERNEL_BACKENDS, POOLED
from simulator.costmodel.moe import uses_moe_collectives

ARTIFACT_FORMAT = "servesim-engine"
ARTIFACT_VERSION = 1
KERNELS_PER_LAYER = 14  # eager decoder layer: 2 norms, 4 GEMMs, rotary, cache write, attention, act, 2 adds, 2 collectives

TPTable = tuple[tuple[int, float], ...]
# EngineCostModel._decode_layers: (layers(kv_sum, kv_sq_sum, m), pre, post, excess, cpu) of n decodes.
DecodeSeries = tuple[Callable[[int, int, int], "list[float] | np.ndarray"], float, float, float, float]


def tp_lookup(table: TPTable, tp: int) -> float:
    """Value of a ``((tp, value), ...)`` table at ``tp``: exact where listed, linear in
    log2(tp) between listed degrees, the nearest listed degree outside them; 0 at tp=1
    and for an empty table (a single GPU has no collectives and no TP workers)."""
    if tp <= 1 or not table:
        return 0.0
    points = sorted(table)
    for t, v in points:
        if t == tp:
            return v
    if tp < points[0][0]:
        return points[0][1]
    if tp > points[-1][0]:
        return points[-1][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:], strict=False):
        if t0 < tp < t1:
            w = (math.log2(tp) - math.log2(t0)) / (math.log2(t1) - math.log2(t0))
            return v0 + w * (v1 - v0)
    return points[-1][1]  # unreachable: tp lies in some interval


# The most any time term of an engine may be (s): a step, a request's share of it or a handoff of an hour or more is
# a unit slip (1e300 ran to "4 finished" at TTFTs of 1e300 s).
MAX_TERM_S = 3600.0


@dataclass(frozen=True)
class EngineModel:
    """One engine's overhead terms (seconds). Contract: every time term is finite; all but
    ``collective_extra_s`` are >= 0; ``source`` names the data, ``fitted`` the method."""

    name: str
    source: str
    fitted: str
    overlap_cpu: bool = False  # async scheduling: CPU work hides under GPU work
    # ... with pipeline parallelism too (vLLM's async scheduling runs with PP since vllm-project/vllm#32359,
    # January 2026; before it its PP steps were synchronous)
    overlap_pipeline: bool = False
    # ... with any drafter (vLLM's async scheduling runs with EAGLE, MTP and draft-model drafters: CPU n-gram and
    # Medusa speculation run synchronously)
    overlap_any_drafter: bool = False
    cpu_iteration_s: float = 0.0  # per step: schedule, prepare inputs, sampler launch, process outputs
    cpu_per_seq_s: float = 0.0  # per request in the batch (block tables, sampling params, detokenize)
    cpu_per_prefill_token_s: float = 0.0  # per prompt token (token lists, positions, slot mapping)
    cpu_per_prefill_seq_layer_s: float = 0.0  # per prompt chunk in the step and model layer (see the module docstring)
    # ... for at most this many prompt chunks of a step (None: every chunk). A fitted preset takes the most chunks a
    # step held in its rows: beyond them the data says nothing, and the term extrapolated linearly priced 512 short
    # prompts in one step 14x slower than one prompt of their tokens.
    prefill_seq_layer_max_chunks: int | None = None
    rpc_s: TPTable = ()  # per step, shipping the step to TP workers, by TP degree
    rpc_per_seq_s: float = 0.0  # per request in the batch, when tp > 1
    collective_extra_s: TPTable = ()  # per collective beyond the kernel model's latency, by TP degree
    prefill_excess_token_s: float = 0.0  # per prompt token beyond the threshold in one step
    prefill_excess_threshold_tokens: int = 2048
    cuda_graphs: bool = True  # False: a step is at least kernels * launch_per_kernel_s
    launch_per_kernel_s: float = 0.0
    prefill_floor_per_layer_s: float = 0.0  # a step with prompt tokens takes at least this x num_layers (GPU side)
    prefill_floor_above_tokens: int = 0  # ... when it carries more prompt tokens than this (below: in CUDA graphs)
    # Disaggregated runs only: per request, from the prefill's end to its KV transfer starting (the router's or
    # proxy's second hop, the KV connector's handshake, the decode worker admitting it); no link is held meanwhile.
    handoff_s: float = 0.0
    scheduler: str | None = None  # the scheduling policy its fit ran (a run with another policy is told)
    kernels: str | None = None  # the kernel prices its terms were fitted over, where only those were checked (told)
    roofline_calibration: str | None = None  # the roofline constants its terms were fitted over, where it matters (told)
    # Whose 'today' roofline constants priced its fit (vllm, sglang, trtllm, or all: every backend's pooled); a
    # run over the roofline uses them. None: its name's first word says (the presets). A fitted artifact records
    # it, so its name (the --out file's) does not change the kernel prices under it.
    roofline_prices: str | None = None
    # Speculative runs: an MTP/EAGLE-3 drafter's k passes launch inside the step as one CUDA graph (TensorRT-LLM's
    # "one model" drafters), so they add no CPU a pass (a draft model and n-gram still run from the executor)
    drafter_in_graph: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("rpc_s", "collective_extra_s"):
                object.__setattr__(self, f.name, tuple(sorted((int(t), float(v)) for t, v in value)))
                for t, v in getattr(self, f.name):
                    if t < 1 or not math.isfinite(v) or (f.name == "rpc_s" and v < 0) or abs(v) > MAX_TERM_S:
                        raise ConfigError(f"engine.{f.name}", f"bad entry tp={t}: {v}", "use tp >= 1 and finite seconds")
                tps = [t for t, _ in getattr(self, f.name)]
                if len(set(tps)) < len(tps):  # (the lookup took the first after sorting: the smaller, unsaid)
                    twice = next(t for t in tps if tps.count(t) > 1)
                    raise ConfigError(f"engine.{f.name}", f"tp={twice} is given twice", "give each TP degree once")
            elif (isinstance(value, int | float) and not isinstance(value, bool)  # ints too: -1.0 is -1 in JSON
                  and (not math.isfinite(value) or value < 0)):
                raise ConfigError(f"engine.{f.name}", f"must be finite and >= 0, got {value}")
            elif f.name.endswith("_s") and isinstance(value, int | float) and value > MAX_TERM_S:
                raise ConfigError(f"engine.{f.name}", f"{value:g} s is more than an hour", "give it in seconds")
        if self.prefill_seq_layer_max_chunks is not None and (
                isinstance(self.prefill_seq_layer_max_chunks, bool) or not isinstance(self.prefill_seq_layer_max_chunks, int)
                or self.prefill_seq_layer_max_chunks < 1):
            raise ConfigError("engine.prefill_seq_layer_max_chunks",
                              f"must be a whole number >= 1, got {self.prefill_seq_layer_max_chunks!r}",
                              "give the most prompt chunks a step is charged for, or null for every chunk")
        if self.kernels is not None and self.kernels not in KERNEL_TABLES:
            raise ConfigError("engine.kernels", f"unknown kernel prices {self.kernels!r}", f"known: {', '.join(KERNEL_TABLES)}")
        if self.roofline_prices is not None and self.roofline_prices not in (*KERNEL_BACKENDS, POOLED):
            raise ConfigError("engine.roofline_prices", f"unknown roofline constants {self.roofline_prices!r}",
                              f"known: {', '.join((*KERNEL_BACKENDS, POOLED))}")
        if self.scheduler is not None and self.scheduler not in SCHEDULER_NAMES:
            raise ConfigError("engine.scheduler", f"unknown scheduler {self.scheduler!r}", f"known: {', '.join(SCHEDULER_NAMES)}")

    def with_terms(self, **terms: Any) -> EngineModel:
        return replace(self, **terms)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rpc_s"] = [list(p) for p in self.rpc_s]
        out["collective_extra_s"] = [list(p) for p in self.collective_extra_s]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EngineModel:
        known = {f.name for f in fields(cls)}
        data = _renamed_terms(data)
        bad = set(data) - known
        if bad:
            raise ConfigError("engine", f"unknown engine term {sorted(bad)[0]!r}", f"known: {', '.join(sorted(known))}")
        check_json_types("engine.", cls, data, "use the JSON `simulate calibrate-engine` wrote")
        for name in ("name", "source", "fitted"):
            if name not in data:
                raise ConfigError(f"engine.{name}", "missing", "use the JSON `simulate calibrate-engine` wrote")
        data = dict(data)
        for key in ("rpc_s", "collective_extra_s"):
            data[key] = tuple((int(t), float(v)) for t, v in data.get(key, ()))
        return cls(**data)


# Terms renamed with a change of unit: an artifact (every term written, at 0 where unused) or override naming the old
# one is read where it is 0 and refused, with the conversion, where not.
RENAMED_TERMS = {"cpu_per_prefill_seq_s": ("cpu_per_prefill_seq_layer_s", "a time per prompt chunk, now per prompt chunk "
                                           "and model layer: divide it by the model's layers")}


def _renamed_terms(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` without a renamed term at 0 (what every artifact written before the rename holds); one set refused."""
    for old, (new, why) in RENAMED_TERMS.items():
        if old in data:
            value = data[old]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"engine.{old}", f"is {value!r}, not a number", f"write {new}, a number of seconds")
            if value != 0:
                raise ConfigError(f"engine.{old}", f"is {why}", f"write {new} (seconds a chunk and layer) instead")
            data = {k: v for k, v in data.items() if k != old}
    return data


# -- presets ------------------------------------------------------------------------------------------------------
# The 2026 presets' handoff latency, each backend's: see the comment above vllm-2026.
SILICON_HANDOFF_S = {"vllm": 0.165, "sglang": 0.220, "trtllm": 0.100}


def _handoff_fitted(backend: str) -> str:
    rows = {"vllm": 13, "sglang": 105, "trtllm": 211}[backend]
    ms = SILICON_HANDOFF_S[backend] * 1e3
    if backend == "vllm":  # under silicon_fit.MIN_OWN_HANDOFF_ROWS: the pooled fit
        return (f"; in disaggregated runs a handoff of {ms:.0f} ms a request, fitted on the 329 disaggregated silicon "
                f"rows of all three backends (its own {rows} rows, all GB200, are too few for one of its own)")
    return (f"; in disaggregated runs a handoff of {ms:.0f} ms a request, fitted on its {rows} disaggregated silicon "
            "rows (each backend's own since the report at bfc593d; one pooled constant, 85 ms, before)")

# Each preset names what it was measured on. The fitted numbers are reproduced by
# simulator.calibrate.engine_fit (tests refit them from ../shared/data and compare).
ENGINES: dict[str, EngineModel] = {
    "ideal": EngineModel(
        name="ideal",
        source="none: the kernel cost model alone",
        fitted="no overheads; use it to see what the kernels alone predict",
        overlap_cpu=True,
    ),
    "handset": EngineModel(
        name="handset",
        source="servesim's hand-set roofline constant before engine models (1.5 ms + 25 us per request)",
        fitted="not fitted; kept to compare against earlier results",
        cpu_iteration_s=1.5e-3, cpu_per_seq_s=25e-6,
    ),
    "vllm-2023-splitwise": EngineModel(
        name="vllm-2023-splitwise",
        source="Splitwise's vLLM measurements of Llama-2-70B on A100-80GB and H100-80GB (DGX/NDv5, TP 2/4/8), "
               "splitwise-sim perf_model.csv: token_time (decode steps, batches 1-64) and prompt_time "
               "(prefills of 1-64 prompts of 512, one of 2048)",
        fitted="non-negative least squares of relative error on top of the calibrated roofline, both GPUs, "
               "TP2 batch-64 rows excluded (KV cache cannot hold 64 sequences there: the source ran fewer); "
               "engine_fit.fit_splitwise_preset()",
        cpu_iteration_s=3.023e-3, cpu_per_seq_s=0.2913e-3, cpu_per_prefill_token_s=8.245e-6,
        collective_extra_s=((2, 0.0), (4, 39.09e-6), (8, 94.76e-6)),
        prefill_excess_token_s=51.61e-6, prefill_excess_threshold_tokens=2048,
        cuda_graphs=False, roofline_calibration="2023",
    ),
    "sarathi-2023-vidur": EngineModel(
        name="sarathi-2023-vidur",
        source="Vidur's legacy_2023 cpu_overheads.csv (its vLLM/Sarathi-Serve fork on A100: schedule, sampler, "
               "prepare inputs, process outputs and Ray RPC medians; Llama-2-7B/70B, CodeLlama-34B, TP 1/2/4, "
               "batches 8-64)",
        fitted="least squares per term over every row: CPU = a + b * batch; Ray RPC = c(tp) + d * batch for tp > 1; "
               "engine_fit.fit_vidur_preset()",
        cpu_iteration_s=1.25e-3, cpu_per_seq_s=0.145e-3,
        rpc_s=((2, 1.1e-3), (4, 2.53e-3)), rpc_per_seq_s=99.9e-6,
        cuda_graphs=False,
    ),
    "vllm-v1": EngineModel(
        name="vllm-v1",
        source="argued from vLLM's V1 engine source and release notes (not fitted): async scheduling "
               "(--async-scheduling: the scheduler prepares step n+1 while step n runs), persistent batch with "
               "incremental input updates, piecewise CUDA graphs for decode and mixed steps, custom one-shot "
               "all-reduce for small TP messages on NVLink, chunked prefill always on; async scheduling with "
               "pipeline parallelism (vllm-project/vllm#32359, 2026-01) and draft models (#48341, 2026-07)",
        fitted="not fitted: CPU work ~1 ms + 10 us/request (hidden under GPU time by async scheduling, which vLLM "
               "does not run beside its CPU n-gram or Medusa drafters: there it adds); no launch "
               "bound (CUDA graphs); collectives 20 us below NCCL's per-call latency (custom all-reduce ~10 us vs "
               "NCCL ~30-47 us in the calibrated roofline); no prefill excess",
        overlap_cpu=True, overlap_pipeline=True,
        cpu_iteration_s=1.0e-3, cpu_per_seq_s=10e-6,
        collective_extra_s=((2, -20e-6), (4, -20e-6), (8, -20e-6)),
    ),
    # Today's engines, fitted on AIConfigurator's silicon rows (closed-loop TTFT/TPOT) over each backend's
    # measured kernel tables (--kernels vllm|sglang|trtllm): results/validation/silicon/fit_report.py
    # (simulator.calibrate.silicon_fit). Four free terms a backend and SGLang's and TRT-LLM's prefill floor,
    # async overlap chosen by fit cost. vllm-2026 was also checked over the roofline (it is the run default:
    # results/validation/silicon/default_engine.py); sglang-2026 and trtllm-2026 only over their own tables
    # (``kernels``), so a run over other prices says so.
    # The 2026 presets' handoff latency (disaggregated runs only): each serving stack's own (TensorRT-LLM on Dynamo,
    # SGLang's bootstrap server and transfer engine, vLLM's NIXL connector), fitted on its simulated disaggregated
    # silicon rows (TRT-LLM 211, SGLang 105; H100, B200, B300, GB200, GB300) as the median-abs-log-error constant added
    # to their TTFT simulated without one (silicon_fit.fit_handoffs; results/validation/silicon/fit_report.py, which
    # also holds each GPU out: SGLang 175-245 ms, TRT-LLM 45-140 ms); vLLM's 13 rows (all GB200) are too few
    # (MIN_OWN_HANDOFF_ROWS), so it takes the one fitted on all 329 (165 ms; 140-205 ms leaving one GPU out; 140 ms
    # and SGLang's 205 before GLM-5's rows refitted sglang-2026, whose disaggregated base moved; 150 ms before vLLM's
    # preset took its time per prompt chunk and layer). In the
    # report at bfc593d, before the all-to-alls counted a token once a rank: 205, 75 and 85 ms. Until that report one
    # pooled constant served all three: 85 ms (75 ms at 81e2597, 85 ms at 5d6b194, 90 ms at cac8f5b, 95 ms at 31d497d,
    # 135 ms at code 0c78f9c).
    # At a few users the measured first token sits a constant above queueing +
    # prefill + KV transfer + one decode step (vLLM's Kimi-K2.5 rows on GB200: ~175 ms at 1K and at 8K prompts).
    "vllm-2026": EngineModel(
        name="vllm-2026",
        source="AIConfigurator silicon_train.csv, vLLM 0.11-0.19 aggregated rows (546 replayed: H100, B200, B300; "
               "Llama-3.1-70B, Qwen3-32B, gpt-oss-120b, Kimi-K2.5, MiniMax-M2.5; ISL 1K-8K, OSL 128-8K, concurrency "
               "4-512), wip rows dropped, repeated measurements once; versions not separable (each version is one GPU "
               "x model); repeated measurements found to 0.01 ms",
        fitted="soft-L1 least squares of log TTFT/TPOT ratios over closed-loop replays under the load each row's "
               "client made (fit_report.py --client benchmark: InferenceX's [0.8 len, len] band or AIPerf's exact "
               "lengths, warm-up a phase of its own, every request the client sent; --kernels vllm with the tables' "
               "gaps priced by the 'today' roofline, scheduler vllm-v1, budget 8192, 2048 for AIConfigurator's own "
               "runs: silicon.AIPERF_BUDGETS; MoE at AIConfigurator's default routing; InferenceX's vLLM rows as their "
               "scripts launched them: silicon._vllm_script_layout): median abs error TTFT 14%, "
               "TPOT 7% in-sample (kernels alone 40%, 10%), leave-one-GPU-out 15.6%, 7.8% (attention-DP engines "
               "included), leave-one-model-out 15%, 10% (before the term a prompt chunk and layer below: 17%, 9%; "
               "18%, 9.6%; 17%, 12%). Its CPU a step fits to none (0.26 ms in the report at 31d497d, whose kernel "
               "prices have moved since: the silicon README's revisions). What a prefill costs beyond the tables' "
               "kernels (input preparation, the API server's tokenizing, kernels slower in the engine than alone; the "
               "rows cannot tell these apart) is 4.1 us a prompt token and 0.188 ms a prompt chunk and model layer "
               "(15 ms a prompt for an 80-layer model, 6 ms for a 32-layer one; a fixed time a chunk, 10 ms, held "
               "the shallow models out worse: silicon_fit.PREFILL_SEQ_BACKENDS), charged for at most 11 chunks a "
               "step, the most a step of the rows held (charged for every chunk, 512 prompts of 16 tokens in one "
               "step cost 3.1 s); 10 us a prompt token alone before. "
               "A prefill floor (SGLang's and TensorRT-LLM's term) fits to zero here" + _handoff_fitted("vllm"),
        cpu_per_prefill_token_s=4.0925e-6, cpu_per_prefill_seq_layer_s=0.18757e-3, prefill_seq_layer_max_chunks=11,
        collective_extra_s=((2, 3.936e-6), (4, 3.936e-6), (8, 3.936e-6)),
        scheduler="vllm-v1", handoff_s=SILICON_HANDOFF_S["vllm"],
    ),
    "sglang-2026": EngineModel(
        name="sglang-2026",
        source="AIConfigurator silicon_train.csv, SGLang 0.5.x aggregated rows (312 replayed: H100, B200, B300; "
               "DeepSeek-V3/R1, GLM-5, Qwen3-32B, Qwen3.5-397B-A17B), wip rows dropped, repeated measurements once, "
               "rows the InferenceX matrix says ran MTP refused",
        fitted="as vllm-2026 with --kernels sglang and SGLang's own policy (--scheduler sglang: prefill batches "
               "first, never mixed with decodes; use it with this preset) and InferenceX's SGLang request intake, "
               "each layout read as the node it ran on, MoE at AIConfigurator's default routing: median abs error TTFT "
               "27%, TPOT 11% in-sample (kernels alone 46%, 13%), leave-one-GPU-out 42%, 13%, leave-one-model-out "
               "35%, 13%. Its CPU is none a step and 5.8 us a request in the batch (the two trade off along a flat "
               "direction of the fit: 0.98 ms and 5.4 us before GLM-5's 24 rows joined it, 0.83 ms and 10 us in the "
               "report at cac8f5b, none a step and 13 us before it; "
               "run with their launch scripts' chunk, memory fraction and running cap, InferenceX's rows fit none a "
               "step, 7.5 us a request and 7.9 us a prompt token, which put SGLang's EAGLE-3 speedup at batch 1 "
               "+47% over the measured where this fit was +9%: results/validation/silicon/HISTORY.md). The floor, "
               "3.3 ms a layer on "
               "every step that carries a prompt (SGLang runs extend batches outside its CUDA graphs), is far above "
               "launch latency alone: it holds what a prefill step costs that the tables do not show (at 4 users the "
               "measured TTFT is 150-200 ms at 1K prompt tokens and grows slowly to 8K). Every SGLang row is a "
               "60-78-layer model (GLM-5's 78), so whether the floor goes per layer or per step is not identified: "
               "on a 32-layer model it holds a prefill step to at least 107 ms" + _handoff_fitted("sglang"),
        cpu_iteration_s=0.0, cpu_per_seq_s=5.7615e-6, cpu_per_prefill_token_s=2.9418e-6,
        prefill_floor_per_layer_s=3.3283e-3,
        collective_extra_s=((2, 3.1978e-6), (4, 3.1978e-6), (8, 3.1978e-6)), scheduler="sglang", kernels="sglang",
        handoff_s=SILICON_HANDOFF_S["sglang"],
    ),
    "trtllm-2026": EngineModel(
        name="trtllm-2026",
        source="AIConfigurator silicon_train.csv, TensorRT-LLM 1.0-1.3 aggregated rows (505 replayed: H100, B200, "
               "GB200; DeepSeek-V3/R1, gpt-oss-120b, Llama-3.1-8B/70B, Qwen3-32B), wip rows dropped, repeated "
               "measurements once, rows the InferenceX matrix says ran MTP refused",
        fitted="as vllm-2026 with --kernels trtllm (scheduler vllm-v1: in-flight batching mixes context and "
               "generation; budget 2048 for AIConfigurator's own runs, MoE routing as vllm-2026, and the batch waiting "
               "InferenceX's recipes set: silicon.recipe_changes): median abs error TTFT 22.4%, TPOT 8% in-sample "
               "(kernels alone 41%, 8%), leave-one-GPU-out 25.7%, 8%, leave-one-model-out 24%, 9%; its CPU a step "
               "0.34 ms and -28 us a collective (4 us and -0.02 us in the report at bfc593d, before the all-to-alls "
               "of its attention-DP rows counted a token once a rank; 0.25 ms in the report at cac8f5b); the floor, "
               "0.86 ms a layer on every step "
               "with context tokens (the PyTorch flow captures "
               "generation-only batches in CUDA graphs)" + _handoff_fitted("trtllm"),
        cpu_iteration_s=0.3401e-3, cpu_per_prefill_token_s=3.809e-6, prefill_floor_per_layer_s=0.8631e-3,
        collective_extra_s=((2, -28.46e-6), (4, -28.46e-6), (8, -28.46e-6)), scheduler="vllm-v1", kernels="trtllm",
        handoff_s=SILICON_HANDOFF_S["trtllm"],
        # TensorRT-LLM's PyTorch flow runs MTP and EAGLE-3 "one model": the drafter is a submodule of the model and
        # its drafting loop launches as one CUDA graph (its speculative-decoding docs); not fitted (no fitted
        # silicon row speculates)
        drafter_in_graph=True,
    ),
}
assert tuple(ENGINES) == ENGINE_PRESETS, "config.ENGINE_PRESETS must list the presets"

assert DEFAULT_ENGINE in ENGINES  # the run config's default names a preset


def implied_options(options: Mapping[str, Any]) -> dict[str, str]:
    """What a run naming an engine takes from it where its options (by name: ``engine``, ``gpu``, the pools,
    ``cost_model``, ...; the CLI's flags, a sweep point's values) set nothing: the scheduling policy its terms were
    fitted under, where it is not the run's default, and the kernel tables they were fitted over, where the GPU has
    them here (elsewhere the roofline prices the run, and its header says the preset was fitted over tables).
    Option name -> value; {} for an engine that fixes neither, or one that does not load (the run's own check says
    why). A disaggregated run takes the scheduler where a pool sets no ``sched=`` (such a pool runs the run's
    scheduler's: :func:`~simulator.config.disagg_layout.default_pool_scheduler`) and no kernels where a pool names
    its own GPU; a run priced by another cost model than the roofline no kernels."""
    from simulator.config.catalog import get_gpu
    from simulator.config.disagg_layout import parse_pool
    from simulator.config.run_config import ReplicaConfig, SchedulerConfig
    from simulator.costmodel.aic import tables

    try:
        preset = load_engine(options["engine"])
        pools = [parse_pool(options[k], k) for k in ("prefill_pool", "decode_pool", "mixed_pool") if options.get(k)]
    except ConfigError:  # (the run's own checks say why)
        return {}
    out = {}
    # (a pool without sched= runs the run's scheduler's pools: disagg_layout.default_pool_scheduler)
    if (preset.scheduler is not None and preset.scheduler != SchedulerConfig().name
            and (not pools or any(pool.sched is None for pool in pools))):
        out["scheduler"] = preset.scheduler
    if (preset.kernels is not None and options.get("cost_model") in (None, "roofline")
            and all(pool.gpu is None for pool in pools)):
        try:
            system = tables.system_for(get_gpu(options.get("gpu") or ReplicaConfig().gpu).name)
            if tables.find_table(system, preset.kernels, "gemm") is not None:
                out["kernels"] = preset.kernels
        except ConfigError:  # a GPU without tables, or no database here: the roofline prices it (said)
            pass
    return {name: value for name, value in out.items() if options.get(name) is None}


def load_engine(spec: str | EngineModel) -> EngineModel:
    """A preset name, an :class:`EngineModel`, or the path of a ``calibrate-engine`` artifact; either
    name may carry term overrides, ``vllm-2026:handoff_s=0.02,cpu_iteration_s=0.001`` (seconds)."""
    if isinstance(spec, EngineModel):
        return spec
    base, overrides = split_engine_spec(spec)
    if overrides:
        model, terms = load_engine(base), parse_overrides(overrides)
        check_override_effects(model, terms)
        return model.with_terms(name=spec, **terms)
    if spec in ENGINES:
        return ENGINES[spec]
    path = Path(spec)
    check_override_has_value(spec, lambda name: name in ENGINES or Path(name).is_file())
    if not path.is_file():
        raise ConfigError("engine", f"{spec!r} is neither a preset nor an engine artifact",
                          f"presets: {', '.join(ENGINES)}; or the JSON written by `simulate calibrate-engine`")
    try:
        data = loads_once(path.read_text(), str(path))
    except json.JSONDecodeError as exc:
        raise ConfigError("engine", f"{path} is not readable JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
                          "give the JSON `simulate calibrate-engine` wrote") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("engine", f"{path} is not readable JSON ({type(exc).__name__})",
                          "give the JSON `simulate calibrate-engine` wrote") from None
    if not isinstance(data, dict) or data.get("format") != ARTIFACT_FORMAT:
        raise ConfigError("engine", f"{path} is not a servesim engine artifact", "pass a file written by `simulate calibrate-engine`")
    if data.get("format_version") != ARTIFACT_VERSION:
        raise ConfigError("engine", f"{path} has format_version {data.get('format_version')}, this build reads "
                          f"{ARTIFACT_VERSION}", "re-run `simulate calibrate-engine`")
    if not isinstance(data.get("engine"), dict):
        raise ConfigError("engine", f"{path} holds no 'engine' object of terms", "re-run `simulate calibrate-engine`")
    return EngineModel.from_dict(data["engine"])


# Terms an override may set: the numbers (the TP tables, flags and provenance stay the base's).
OVERRIDABLE = tuple(f.name for f in fields(EngineModel)
                    if f.name not in ("name", "source", "fitted", "rpc_s", "collective_extra_s", "scheduler", "kernels",
                                      "roofline_calibration"))


def parse_overrides(text: str) -> dict[str, Any]:
    """``handoff_s=0.02,overlap_cpu=true`` -> terms for :meth:`EngineModel.with_terms`, each checked."""
    kinds = {f.name: f.type for f in fields(EngineModel)}
    out: dict[str, Any] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if key in out:
            raise ConfigError("engine", f"{key} given twice", "give each term once")
        if key in RENAMED_TERMS:
            renamed, why = RENAMED_TERMS[key]
            raise ConfigError("engine", f"{key} is {why}", f"give {renamed}=SECONDS instead")
        if key not in OVERRIDABLE:
            raise ConfigError("engine", f"{key!r} is not a term an override may set",
                              f"one of {', '.join(OVERRIDABLE)}, e.g. --engine vllm-2026:handoff_s=0.02")
        kind = kinds[key]
        try:
            if kind in ("bool", bool):
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                out[key] = value.lower() in ("true", "1")
            elif kind in ("int", int):
                out[key] = int(value)
            elif kind in ("int | None", int | None):  # prefill_seq_layer_max_chunks: a count, or none for every chunk
                out[key] = None if value.lower() in ("none", "null") else int(value)
            elif "str" in str(kind):  # roofline_prices: whose 'today' constants price the roofline under it
                out[key] = value
            else:
                out[key] = float(value)
        except ValueError:
            words = "whole number (or none)" if kind in ("int | None", int | None) else getattr(kind, "__name__", kind)
            raise ConfigError("engine", f"{key}={value!r} is not a {words}",
                              f"e.g. {key}=0.02" if "float" in str(kind) else f"give {key} a valid value") from None
    choices = (*KERNEL_BACKENDS, POOLED)
    if "roofline_prices" in out and out["roofline_prices"] not in choices:
        raise ConfigError("engine", f"roofline_prices={out['roofline_prices']!r} is none of {', '.join(choices)}",
                          "e.g. roofline_prices=sglang")
    return out


def check_override_effects(base: EngineModel, terms: dict[str, Any]) -> None:
    """Refuse launch terms that change nothing on ``base``: a launch floor needs both CUDA graphs off and a per-kernel
    launch time (every preset has none: cuda_graphs=false alone left a step as it was)."""
    merged = replace(base, **terms)
    if ("cuda_graphs" in terms or "launch_per_kernel_s" in terms) and (merged.cuda_graphs or
                                                                       not merged.launch_per_kernel_s):
        given = " and ".join(f"{k}={str(terms[k]).lower()}" for k in ("cuda_graphs", "launch_per_kernel_s") if k in terms)
        raise ConfigError("engine", f"{given} would do nothing: a step's launch floor needs cuda_graphs=false and a "
                          "launch_per_kernel_s above 0", "give both, e.g. cuda_graphs=false,launch_per_kernel_s=4e-6")
    if "prefill_seq_layer_max_chunks" in terms and not merged.cpu_per_prefill_seq_layer_s:
        raise ConfigError("engine", "prefill_seq_layer_max_chunks would do nothing: it caps the chunks "
                          "cpu_per_prefill_seq_layer_s is charged for, and that term is 0 here",
                          "give cpu_per_prefill_seq_layer_s too, or drop prefill_seq_layer_max_chunks")


def check_engine_spec_read(spec: str, field: str = "--engine") -> None:
    """Refuse an override of ``spec`` (``PRESET:term=value``) that a simulation under it never reads: a bound or a mode
    of a term the engine does not have (its rate or floor 0, its CPU not overlapped). A fit from that engine may read
    them (``calibrate-engine`` fits the excess rate above its threshold): the simulating commands call this, not
    :func:`load_engine`. (Terms a given run's shape leaves unread: ``config.options.engine_terms_unread``.)"""
    base_spec, overrides = split_engine_spec(spec)
    if not overrides:
        return
    terms = parse_overrides(overrides)
    merged = load_engine(base_spec).with_terms(**terms)
    for given, needs, example in (("overlap_pipeline", "overlap_cpu", "overlap_cpu=true"),
                                  ("prefill_floor_above_tokens", "prefill_floor_per_layer_s",
                                   "prefill_floor_per_layer_s=1e-3"),
                                  ("prefill_excess_threshold_tokens", "prefill_excess_token_s",
                                   "prefill_excess_token_s=5e-5")):
        if given in terms and not getattr(merged, needs):
            raise ConfigError(field, f"{given}={str(terms[given]).lower()} would do nothing: {base_spec} has no "
                              f"{needs}", f"give {example} too, or drop {given}")


def artifact_fitted_on(spec: str) -> dict[str, str]:
    """What an engine artifact (``calibrate-engine``'s JSON, overrides after its name allowed) says its terms were
    fitted on: its top-level ``model``, ``gpu`` (a rows fit's: each row's, comma-separated) and ``cost_model``, where
    it gives them; empty for a preset (whose ``kernels`` and ``scheduler`` say theirs)."""
    base, _ = split_engine_spec(spec)
    if base in ENGINES or not Path(base).is_file():
        return {}
    try:
        data = json.loads(Path(base).read_text())
    except (OSError, ValueError):  # (load_engine reads it first, and says what is wrong)
        return {}
    return {key: str(data[key]) for key in ("model", "gpu", "cost_model") if isinstance(data, dict) and data.get(key)}


def save_engine_artifact(engine: EngineModel, path: Path, extra: dict[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": ARTIFACT_FORMAT, "format_version": ARTIFACT_VERSION, "engine": engine.to_dict(), **extra}
    path.write_text(json.dumps(payload, indent=2) + "\n")


def num_collectives(replica: ReplicaConfig) -> int:
    """TP collectives in one forward pass: per layer two all-reduces (one for parallel
    attention/MLP blocks), plus the LM head's vocab gather; none without TP. Under attention DP a
    MoE layer's MLP all-reduce becomes, with expert parallelism, a dispatch and a combine all-to-all
    and an all-gather, and without it an all-gather and a reduce-scatter (as the roofline prices
    them: :func:`simulator.costmodel.moe.ep_all_to_all`); EP without attention DP keeps the
    all-reduce (:func:`simulator.costmodel.moe.uses_moe_collectives`)."""
    if replica.tp <= 1:
        return 0
    m = replica.model_spec
    count = (1 if m.parallel_attn_mlp else 2) * m.num_layers + 1
    if m.is_moe and uses_moe_collectives(replica):
        count += (2 if replica.ep > 1 else 1) * m.num_moe_layers
    return count


def kernel_collective_latency_s(kernels: CostModel) -> float:
    """The per-collective latency the kernel model already charges (the roofline's calibrated
    latency, with 'today''s per-GPU part; the kernel tables' measured one; for other models, that of
    the roofline calibration of the same GPU)."""
    own = getattr(kernels, "collective_latency_s", None)
    if own is not None:
        return float(own())
    cal = getattr(kernels, "cal", None) or getattr(getattr(kernels, "roofline", None), "cal", None)
    if cal is None:
        from simulator.costmodel.calibration import calibration_for

        cal = calibration_for(kernels.replica.gpu, kernels.replica.roofline_calibration)
    return float(cal.allreduce_latency_s)


# Stretches up to this many iterations are priced in plain floats rather than numpy arrays.
# Counted in instructions numpy wins from ~32 steps (~85k a call, then ~0.3k a step, against
# ~2.6k a step); in CPU time, replaying a low-load run's stretches, 32 to 96 are within 5%.
SMALL_STRETCH = 48


class EngineCostModel(CostModel):
    """A kernel cost model plus an engine's overheads (see the module docstring).

    The kernel model's own ``overhead_time`` is replaced by the engine's terms. The terms
    that depend only on the replica are folded into constants at construction, so the
    per-iteration work is a few multiply-adds on top of the kernel model's lookups.
    """

    _stretch_ok = True  # set False on an instance whose vector form once disagreed with the scalar path
    # Stretches still to check against the scalar path, per instance (as TabulatedCostModel: a
    # changed formula shows in the first stretches; checking every one doubled their cost).
    _stretch_checks_left = 32

    def __init__(self, kernels: CostModel, engine: EngineModel) -> None:
        super().__init__(kernels.replica)
        self._decode_layers_by_n: dict[int, DecodeSeries | None] = {}  # _decode_layers, by n
        self._chunk_consts: dict[tuple[int, int], tuple[float, ...]] = {}  # _chunk_stretch's, by (n, chunk)
        self.kernels = kernels
        self.engine = engine
        self.name = f"{kernels.name} + engine {engine.name}"
        replica, e = kernels.replica, engine
        self.num_collectives = num_collectives(replica)
        # Per-collective adjustment, never below zero for the collective as a whole.
        extra = tp_lookup(e.collective_extra_s, replica.tp)
        if self.num_collectives:
            extra = max(extra, -kernel_collective_latency_s(kernels))
        self.collective_s = self.num_collectives * extra
        self.cpu_fixed_s = e.cpu_iteration_s + (tp_lookup(e.rpc_s, replica.tp) if replica.tp > 1 else 0.0)
        self.cpu_seq_s = e.cpu_per_seq_s + (e.rpc_per_seq_s if replica.tp > 1 else 0.0)
        self.launch_s = 0.0 if e.cuda_graphs else (
            e.launch_per_kernel_s * KERNELS_PER_LAYER * replica.model_spec.num_layers)
        # The floor of a step that carries more than _floor_above prompt tokens (never below the
        # launch floor of every step).
        self.prefill_floor_s = max(self.launch_s, e.prefill_floor_per_layer_s * replica.model_spec.num_layers)
        self._floor_above = e.prefill_floor_above_tokens
        self._has_prefill_floor = self.prefill_floor_s > self.launch_s
        self.overlap = e.overlap_cpu and (replica.pp == 1 or e.overlap_pipeline)
        self._excess_threshold, self._excess_s = e.prefill_excess_threshold_tokens, e.prefill_excess_token_s
        self._cpu_token_s = e.cpu_per_prefill_token_s
        self._cpu_prefill_s = e.cpu_per_prefill_seq_layer_s * replica.model_spec.num_layers
        # the chunks a step is charged for, at most (a huge int where uncapped: min() stays one call in the hot path)
        self._max_prefills = e.prefill_seq_layer_max_chunks or sys.maxsize
        self._num_layers = replica.model_spec.num_layers
        self._pre, self._layer, self._post = kernels.pre_time, kernels.layer_time, kernels.post_time
        # Re-export what other code reads from a kernel model; PP hops are the kernels' own
        # (the instance attribute keeps their signature, which the pipeline inspects for ``hop``).
        self.learned_ops = getattr(kernels, "learned_ops", [])
        self.send_recv_time = kernels.send_recv_time  # type: ignore[method-assign]
        # Kernel models that count their extrapolations (tables): once per stretch, by _vector_stretch.
        self._count_stretch = getattr(kernels, "count_stretch", None)
        # Whether the kernels' decode attention is a fitted rms form, or None where stretches are
        # priced per iteration (the forms the kernel class declares: CostModel.STRETCH_FORMS).
        forms = stretch_forms(kernels)
        self._kernels_learned = self._stretch_kernels_learned(forms)
        # _chunk_stretch's plain floats: kernels that declare them beside a closed form of decode
        # attention (terms, or the tables' curve) and whose attention has the form (chunk_terms_ok:
        # RooflineCostModel's, TableCostModel's; a learned model's chunks would be priced one by one,
        # and its extrapolations counted per iteration).
        self._chunk_decode_curve = "decode-curve" in forms and "decode-terms" not in forms
        self.fast_chunk_stretches = ("chunk-terms" in forms and bool(forms & {"decode-terms", "decode-curve"})
                                     and getattr(kernels, "chunk_terms_ok", False))
        # Kernel models that count their extrapolations (tables): once per chunk stretch, by _chunk_stretch.
        self._count_chunk_stretch = getattr(kernels, "count_chunk_stretch", None)

    @property
    def num_extrapolations(self) -> int:
        return getattr(self.kernels, "num_extrapolations", 0)

    def extrapolation_mark(self) -> tuple | None:
        return self.kernels.extrapolation_mark()

    def rollback_extrapolations(self, mark: tuple) -> None:
        self.kernels.rollback_extrapolations(mark)

    # -- engine terms ----------------------------------------------------------------------------------------
    # The per-token CPU and the prefill excess are the prompts' (fitted on steps of prompts and decodes): a
    # speculative verify's query rows are no prompt (``num_prompt_tokens`` leaves them out), as for the floor.
    def cpu_time(self, shape: BatchShape) -> float:
        return (self.cpu_fixed_s + self.cpu_seq_s * (shape.num_prefills + shape.num_decodes)
                + self._cpu_token_s * shape.num_prompt_tokens + self._cpu_prefill_s * min(shape.num_prefills, self._max_prefills))

    def prefill_excess_time(self, shape: BatchShape) -> float:
        over = shape.num_prompt_tokens - self._excess_threshold
        return self._excess_s * over if over > 0 else 0.0

    def _kernel_time(self, shape: BatchShape) -> float:
        return self._pre(shape) + self._num_layers * self._layer(shape) + self._post(shape)

    # -- the engine formula, once for one step and once for a stretch of steps ------------------------------------
    # The module docstring's formula. Both forms do the same float operations in the same order,
    # so a stretch's times are its steps' times bit for bit (an instance's first stretches are
    # checked against the scalar path: _agrees). stage_time splits the step by pipeline stage.
    def _floor_for(self, prompt_tokens: int) -> float:
        """The least GPU-side time of a step carrying ``prompt_tokens``: the prefill floor where
        they are more than the engine runs in CUDA graphs, else the launch floor."""
        return self.prefill_floor_s if prompt_tokens > self._floor_above else self.launch_s

    def _floor(self, shape: BatchShape) -> float:
        """:meth:`_floor_for` ``shape``'s prompt tokens. A speculative verify's query rows are no
        prompt (``num_prompt_tokens`` leaves them out): the engines verify in their decode graphs."""
        return self._floor_for(shape.num_prompt_tokens) if self._has_prefill_floor else self.launch_s

    def _engine_time(self, kernel_s: float, excess: float, cpu: float, floor: float) -> float:
        """Seconds the engine adds to one step whose kernels take ``kernel_s`` (the whole step's):
        the collective extras and the prefill excess ``excess`` on the GPU, the step's floor
        (:meth:`_floor`), then the CPU time ``cpu``, hidden under the GPU time (async scheduling)
        or added to it. The step takes ``kernel_s + _engine_time(...)``. The scalar form of
        :meth:`_series_times`."""
        gpu = kernel_s + self.collective_s + excess
        if gpu < floor:
            gpu = floor
        total = (gpu if gpu > cpu else cpu) if self.overlap else gpu + cpu
        return total - kernel_s

    def _series_times(self, layers: list[float] | np.ndarray, pre: float, post: float, excess: float,
                      cpu: float, launch: float) -> list[float]:
        """The times of a stretch of steps whose one layer takes ``layers[i]`` in step ``i`` and
        whose embedding ``pre``, LM head ``post``, prefill excess, CPU time and floor ``launch`` (:meth:`_floor`)
        stay the same. The
        series form of :meth:`_engine_time`: step ``i`` takes ``kern + _engine_time(kern, excess,
        cpu)`` with ``kern = pre + num_layers * layers[i] + post``, in the same float operations
        (with overlap, max(max(gpu, launch), cpu) == max(gpu, max(launch, cpu)) as max picks a value;
        without, the CPU time adds after the launch floor; IEEE addition and multiplication are
        commutative, so numpy's in-place ``x += c`` is ``c + x``; with overlap the plain floats add
        a CPU time of 0.0, which changes no positive float). A list (a prompt's chunks, a decode
        stretch up to ``SMALL_STRETCH`` steps) is priced in plain floats, an array (a longer decode
        stretch) in place in numpy, whose per-call cost the plain loop would exceed."""
        num_layers, collective = self._num_layers, self.collective_s
        if self.overlap:
            floor, add_cpu = (launch if launch > cpu else cpu), 0.0
        else:
            floor, add_cpu = launch, cpu
        if type(layers) is list:  # a loop, not a comprehension: no closure cells to build per call
            out = []
            for layer in layers:
                kern = pre + num_layers * layer + post
                g = kern + collective + excess
                out.append(kern + (((g if g > floor else floor) + add_cpu) - kern))
            return out
        kern = layers  # in place: the caller's own array
        kern *= num_layers
        kern += pre
        kern += post
        g = kern + collective
        g += excess
        np.maximum(g, floor, out=g)
        if add_cpu:
            g += add_cpu
        g -= kern
        g += kern
        return g.tolist()

    # -- CostModel interface ---------------------------------------------------------------------------------
    def layer_time(self, shape: BatchShape) -> float:
        return self.kernels.layer_time(shape)

    def pre_time(self, shape: BatchShape) -> float:
        return self.kernels.pre_time(shape)

    def post_time(self, shape: BatchShape) -> float:
        return self.kernels.post_time(shape)

    def overhead_time(self, shape: BatchShape) -> float:
        return self._engine_time(self._kernel_time(shape), self.prefill_excess_time(shape), self.cpu_time(shape),
                                 self._floor(shape))

    def iteration_time(self, shape: BatchShape) -> float:
        kernel_s = self._pre(shape) + self._num_layers * self._layer(shape) + self._post(shape)  # _kernel_time
        return kernel_s + self._engine_time(kernel_s, self.prefill_excess_time(shape), self.cpu_time(shape),
                                            self._floor(shape))

    def stage_time(self, shape: BatchShape, stage: int) -> float:
        """One pipeline stage's share of the step. The engine's GPU-side terms (collective
        extras, prefill excess, the step's floor) run with the layers, so each stage carries
        its layers' share of them; the CPU work (scheduling, input preparation, RPC) stays on
        stage 0, which the engine dispatches first, overlapped with that stage's GPU time
        or added to it as the engine does. The stages add up to :meth:`iteration_time`
        (launch floors aside; the shares round apart from :meth:`_engine_time`'s floats)."""
        layers = self.layers_per_stage[stage]
        share = layers / self._num_layers
        gpu = layers * self._layer(shape)
        if stage == 0:
            gpu += self._pre(shape)
        if stage == len(self.layers_per_stage) - 1:
            gpu += self._post(shape)
        gpu += (self.collective_s + self.prefill_excess_time(shape)) * share
        floor = self._floor(shape) * share
        if gpu < floor:
            gpu = floor
        if stage != 0:
            return gpu
        cpu = self.cpu_time(shape)
        return (gpu if gpu > cpu else cpu) if self.overlap else gpu + cpu

    # -- stretches: each step's layer from the kernels' closed forms, then _series_times -----------------------
    def decode_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int,
                             num_iterations: int) -> list[float]:
        """Through :meth:`_series_times` when the kernels declare a closed form of decode
        attention (:meth:`_vector_stretch`); else the generic path."""
        times = self._vector_stretch(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations)
        if times is None:
            return super().decode_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations)
        return times

    def chunk_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int, chunk: int,
                            kv_before: int, num_iterations: int) -> list[float]:
        """Through :meth:`_series_times` over roofline kernels (only the two attention terms
        change from one iteration to the next: :meth:`_chunk_stretch`); else the generic path."""
        times = self._chunk_stretch(num_decodes, kv_sum, kv_sq_sum, kv_max, chunk, kv_before, num_iterations)
        if times is None:
            return super().chunk_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, chunk, kv_before,
                                               num_iterations)
        return times

    def count_decode_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int,
                                   num_iterations: int) -> None:
        """Where :meth:`_vector_stretch` would price the stretch quietly and count it once (kernels that count
        extrapolations, its series for ``num_decodes`` known, its checks over), that count alone; else priced."""
        count = self._count_stretch
        if (count is not None and num_decodes > 0 and num_iterations >= 2 and self._stretch_ok
                and self._kernels_learned is not None and self._stretch_checks_left <= 0
                and self._decode_layers_by_n.get(num_decodes) is not None):
            count(num_decodes, kv_max, num_iterations)
        else:
            super().count_decode_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations)

    def count_chunk_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int, chunk: int,
                                  kv_before: int, num_iterations: int) -> None:
        """Where :meth:`_chunk_stretch` would price the stretch quietly and count it once (as above), that count
        alone; else priced."""
        count = self._count_chunk_stretch
        if count is not None and self._stretch_ok and self.fast_chunk_stretches and self._stretch_checks_left <= 0:
            count(num_decodes, kv_max, chunk, kv_before, num_iterations)
        else:
            super().count_chunk_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, chunk, kv_before,
                                              num_iterations)

    def _agrees(self, times: list[float], first: BatchShape, last: BatchShape) -> bool:
        """Whether a stretch's first and last times are the scalar path's (``first`` and ``last``
        its first and last steps); counts one of the instance's checked stretches. A disagreement
        sends the instance to the scalar path for good: it is the truth."""
        self._stretch_checks_left -= 1
        if times[0] == self.iteration_time(first) and times[-1] == self.iteration_time(last):
            return True
        self._stretch_ok = False  # never again for this instance
        return False

    def _chunk_stretch(self, n: int, kv_sum: int, kv_sq_sum: int, kv_max: int, chunk: int, kv_before: int,
                       m: int) -> list[float] | None:
        """A prompt's chunks beside ``n`` decodes: each step's layer is the token ops + prefill
        attention + decode attention (layer_time's order), in plain floats (a prompt's chunks are
        few) from the kernels' closed forms (prefill_attention_list; decode_attention_terms or the
        tables' decode_attention_curve), then :meth:`_series_times`. Kernels that count
        extrapolations (count_chunk_stretch) price it quietly, then count the stretch's once.
        None where the kernels lack the form."""
        if not self._stretch_ok or not self.fast_chunk_stretches:  # closed forms, full attention
            return None
        k = self.kernels
        count = self._count_chunk_stretch
        if count is not None:
            k._quiet = True  # the tables' extrapolations are counted once, below (the check steps too)
        try:
            prefill = k.prefill_attention_list(chunk, kv_before, m)  # has its form: fast_chunk_stretches says so
            # Everything but attention depends on the token, sequence and logit counts alone (so on
            # n and chunk: computed once per pair).
            consts = self._chunk_consts.get((n, chunk))
            if consts is None:
                first = BatchShape()
                first.add_decodes(n, kv_sum, kv_sq_sum, kv_max)
                first.add_prefill(chunk, kv_before, False)
                consts = self._chunk_consts[n, chunk] = (k.token_time(n + chunk), self._pre(first), self._post(first),
                                                         self.prefill_excess_time(first), self.cpu_time(first))
            token, pre, post, excess, cpu = consts
            if n and self._chunk_decode_curve:  # attention_decode's float ops on the tables' curve
                xs, fs, slopes = k.decode_attention_curve(n)  # type: ignore[attr-defined]
                layers = []
                for a, kv in zip(prefill, range(kv_sum, kv_sum + n * m, n)):  # noqa: B905 - m each
                    j = bisect_right(xs, kv) - 1
                    layers.append(token + a + (fs[j] + (kv - xs[j]) * slopes[j]))
            elif n:  # attention_decode's float ops (decode_attention_terms); none without decodes: 0.0
                kvb, per_token, bandwidth, per_seq, kernel_floor, overlap = k.decode_attention_terms(n)  # type: ignore[misc]
                kvs = range(kv_sum, kv_sum + n * m, n)
                if overlap:
                    attn = (max((kv * kvb + per_token) / bandwidth, per_seq) + kernel_floor for kv in kvs)
                else:
                    attn = ((kv * kvb + per_token) / bandwidth + per_seq + kernel_floor for kv in kvs)
                layers = [token + a + d for a, d in zip(prefill, attn)]  # noqa: B905 - m each
            else:
                layers = [token + a + 0.0 for a in prefill]
            # every step of the stretch carries one chunk of the prompt: one floor for them all
            times = self._series_times(layers, pre, post, excess, cpu, self._floor_for(chunk))
            if self._stretch_checks_left > 0:  # an instance's first stretches are checked; then trusted
                first, last = BatchShape(), BatchShape()
                first.add_decodes(n, kv_sum, kv_sq_sum, kv_max)
                first.add_prefill(chunk, kv_before, False)
                j = m - 1
                last.add_decodes(n, kv_sum + n * j, kv_sq_sum + 2 * j * kv_sum + n * j * j, kv_max + j)
                last.add_prefill(chunk, kv_before + j * chunk, False)
                if not self._agrees(times, first, last):
                    return None
        finally:
            if count is not None:
                k._quiet = False
        if count is not None:
            count(n, kv_max, chunk, kv_before, m)
        return times

    @staticmethod
    def _stretch_kernels_learned(forms: frozenset[str]) -> bool | None:
        """Whether the kernel class declares a fitted rms decode attention (True: a learned
        model), or a closed form of another kind (False: terms or a piecewise-linear curve);
        None where stretches are priced per iteration. No type checks: any kernel model that
        declares its forms (:attr:`CostModel.STRETCH_FORMS`) and gives their terms is priced
        fast, and the first stretches of every instance are checked against the scalar path."""
        if "decode-rms" in forms:
            return True
        if forms & {"decode-terms", "decode-curve"}:
            return False
        return None

    def _vector_stretch(self, n: int, kv_sum: int, kv_sq_sum: int, kv_max: int, num_iterations: int) -> list[float] | None:
        """Decode-only steps of ``n`` sequences: each step's layer from :meth:`_decode_layers`, then
        :meth:`_series_times`. None where the kernels' decode attention has no closed form."""
        is_learned = self._kernels_learned
        if n <= 0 or num_iterations < 2 or not self._stretch_ok or is_learned is None:
            return None
        k = self.kernels
        m = num_iterations
        k._quiet = True  # a learned model's extrapolations are counted once, below
        try:
            by_n = self._decode_layers_by_n
            if n in by_n:
                series = by_n[n]
            else:
                series = by_n[n] = self._decode_layers(n, kv_sum, kv_sq_sum, kv_max)
            if series is None:
                return None
            layers, pre, post, excess, cpu = series
            times = self._series_times(layers(kv_sum, kv_sq_sum, m), pre, post, excess, cpu, self.launch_s)
            if self._stretch_checks_left > 0:  # an instance's first stretches are checked; then trusted
                j = m - 1
                first = BatchShape.decode_only(n, kv_sum, kv_sq_sum, kv_max)
                last = BatchShape.decode_only(n, kv_sum + n * j, kv_sq_sum + 2 * kv_sum * j + n * j * j, kv_max + j)
                if not self._agrees(times, first, last):
                    return None
        finally:
            k._quiet = False
        count = self._count_stretch
        if count is not None:
            count(n, kv_max, num_iterations)
        return times

    def _decode_layers(self, n: int, kv_sum: int, kv_sq_sum: int, kv_max: int) -> DecodeSeries | None:
        """``(layers, pre, post, excess, cpu)`` of decode-only steps of ``n`` sequences, the
        arguments of :meth:`_series_times`: ``layers(kv_sum, kv_sq_sum, m)`` gives the one-layer
        seconds of ``m`` such steps, the first with those KV sums (then ``+ n`` in each, as in a
        stretch), as a list up to ``SMALL_STRETCH`` steps and an array beyond; the rest depend on
        ``n`` alone in a decode-only step, so are bound once per ``n``.

        A layer is the token ops and prefill attention (none here) + the kernels' decode attention,
        written out from the kernel model's terms (the scalar path's float ops in its order, so the
        same floats). None where the kernels' decode attention has no such form (MLA, sliding
        windows, a learned model beyond its largest batch): the stretch is then priced another way."""
        k = self.kernels
        first = BatchShape.decode_only(n, kv_sum, kv_sq_sum, kv_max)
        rest = k.token_time(n) + k.attention_prefill(first)  # the layer less its decode attention
        consts = (k.pre_time(first), k.post_time(first), self.prefill_excess_time(first), self.cpu_time(first))
        rms = k.decode_attention_rms_terms(n) if self._kernels_learned else None
        if rms is not None:  # a learned model's fit: a + b * sqrt(mean squared KV length)
            a, b = rms
            sqrt = math.sqrt

            def layers(kv_sum: int, kv_sq_sum: int, m: int) -> list[float] | np.ndarray:
                if m > SMALL_STRETCH:
                    i = np.arange(m, dtype=np.int64)
                    sq = (kv_sq_sum + 2 * kv_sum * i + n * i * i).astype(np.float64)
                    sq /= n
                    out = b * np.sqrt(sq) + a
                    out += rest
                    return out
                # Step i's squared-KV sum kv_sq_sum + 2 i kv_sum + n i^2, by exact integer steps
                # (the step from i to i + 1 is 2 kv_sum + n + 2 n i).
                step = 2 * kv_sum + n
                return [rest + (a + b * sqrt(float(sq) / n))
                        for sq in accumulate(range(step, step + 2 * n * (m - 1), 2 * n), initial=kv_sq_sum)]
            return (layers, *consts)
        curve = getattr(k, "decode_attention_curve", None)
        if curve is not None:  # kernel tables: piecewise linear in the total KV tokens (aic.model)
            xs, fs, slopes = curve(n)
            xa, fa, sa = np.asarray(xs), np.asarray(fs), np.asarray(slopes)

            def layers(kv_sum: int, kv_sq_sum: int, m: int) -> list[float] | np.ndarray:
                if m > SMALL_STRETCH:
                    kv = np.arange(kv_sum, kv_sum + n * m, n, dtype=np.int64)
                    j = np.searchsorted(xa, kv, side="right") - 1
                    out = (kv - xa[j]) * sa[j]
                    out += fa[j]
                    out += rest
                    return out
                out = []
                for kv in range(kv_sum, kv_sum + n * m, n):
                    j = bisect_right(xs, kv) - 1
                    out.append(rest + (fs[j] + (kv - xs[j]) * slopes[j]))
                return out
            return (layers, *consts)
        terms = k.decode_attention_terms(n)
        if terms is None:
            return None
        kvb, per_token, bandwidth, per_seq, kernel_floor, overlap = terms
        mix = getattr(k, "decode_linear_mix", None)
        mix = mix(n) if mix is not None else None  # a hybrid: attention_decode's t + share * (recurrence - t)
        share, lin = mix or (0.0, 0.0)

        def layers(kv_sum: int, kv_sq_sum: int, m: int) -> list[float] | np.ndarray:
            if m > SMALL_STRETCH:
                # KV bytes may be integers: the division makes the floats (as int / float does).
                out = (np.arange(kv_sum, kv_sum + n * m, n, dtype=np.int64) * kvb + per_token) / bandwidth
                if overlap:
                    np.maximum(out, per_seq, out=out)
                else:
                    out += per_seq
                out += kernel_floor
                if mix is not None:
                    out = out + share * (lin - out)
                out += rest
                return out
            kvs = range(kv_sum, kv_sum + n * m, n)
            if overlap:
                attn = (max((kv * kvb + per_token) / bandwidth, per_seq) + kernel_floor for kv in kvs)
            else:
                attn = ((kv * kvb + per_token) / bandwidth + per_seq + kernel_floor for kv in kvs)
            if mix is None:
                return [rest + a for a in attn]
            return [rest + (a + share * (lin - a)) for a in attn]
        return (layers, *consts)

    def engine_breakdown(self, shape: BatchShape) -> dict[str, float]:
        """Each engine term in seconds as it adds to the step (async: only the CPU time
        that sticks out from under the GPU time); sums to ``overhead_time``."""
        e, kernel_s = self.engine, self._kernel_time(shape)
        seqs = shape.num_prefills + shape.num_decodes
        rpc = (tp_lookup(e.rpc_s, self.replica.tp) + e.rpc_per_seq_s * seqs) if self.replica.tp > 1 else 0.0
        cpu_terms = {"engine_cpu_iteration": e.cpu_iteration_s, "engine_cpu_per_seq": e.cpu_per_seq_s * seqs,
                     # the prompts' tokens, as cpu_time charges them (a verify's query rows are none)
                     "engine_cpu_prefill_tokens": e.cpu_per_prefill_token_s * shape.num_prompt_tokens,
                     "engine_cpu_per_prefill": self._cpu_prefill_s * min(shape.num_prefills, self._max_prefills),
                     "engine_rpc_tp_workers": rpc}
        excess = self.prefill_excess_time(shape)
        gpu = kernel_s + self.collective_s + excess
        floor = self._floor(shape)
        # collective_extra_s per collective: negative where the engine's all-reduce beats the kernels' one
        out = {"engine_collective_extra": self.collective_s, "engine_prefill_excess": excess,
               "engine_launch_bound": max(0.0, floor - gpu)}  # the launch floor, or a prefill step's
        gpu = max(gpu, floor)
        cpu = sum(cpu_terms.values())
        if self.overlap:
            exposed = max(0.0, cpu - gpu)
            scale = exposed / cpu if cpu > 0 else 0.0
            out.update({k: v * scale for k, v in cpu_terms.items()})
        else:
            out.update(cpu_terms)
        return out

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        out = {k: v for k, v in self.kernels.breakdown(shape).items() if k != "cpu_overhead"}
        out.update(self.engine_breakdown(shape))
        return out
