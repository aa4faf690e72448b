"""Engine presets fitted on end-to-end benchmark rows (closed-loop TTFT/TPOT), with cross-validation.

A benchmark row (AIConfigurator's silicon sample, or a user's own CSV: backend, model, GPU,
layout, ISL, OSL, concurrency, measured TTFT and TPOT) is a closed-loop run. The engine terms
this module fits are those of :class:`~simulator.costmodel.engine_model.EngineModel`, over the
measured kernels of the row's backend (``--kernels vllm|sglang|trtllm``):

    cpu  = cpu_iteration_s + cpu_per_seq_s * seqs + cpu_per_prefill_token_s * prefill_tokens
           + cpu_per_prefill_seq_layer_s * min(prefills, max_chunks) * layers
    gpu  = kernels + collectives * collective_extra_s
    gpu  = max(gpu, prefill_floor_per_layer_s * layers)   where the step carries > floor_above_tokens prompt tokens
    step = max(cpu, gpu)   with async scheduling (overlap_cpu), else cpu + gpu

Five or six free numbers a backend (scheduler/input-preparation CPU time per step and per request, per
prompt token and per prompt chunk and layer, the per-collective extra, the prefill step's floor per layer; overlap chosen by
fit cost). ``floor_above_tokens`` is not fitted: it is the engine's CUDA-graph bound
(:data:`FLOOR_ABOVE_TOKENS`, which also says which backends get a floor); nor is ``max_chunks``, the most prompt
chunks a step of the fitted rows held (:func:`most_chunks`): the term per chunk is charged for no more.

**Why a fit can be cheap (the replay).** Under a closed loop with fixed lengths a new request
arrives exactly when another finishes, so the engine is never idle and which requests share
which step depends only on the order of events, never on how long a step takes (the scheduler
has no clock). One simulation per row with the kernels alone (engine ``ideal``) therefore fixes
the sequence of steps (their shapes and kernel times) and, for every measured request, the steps
at which it arrived, got its first token and finished. Any engine terms then give the new step
times by a few vector operations, their cumulative sums the new timeline, and from it the mean
TTFT and TPOT the simulator would report with those terms: :func:`replay` (checked against a
full simulation by the tests and by the validation script). Runs with more than one replica
(attention-DP ranks, disaggregated pools) are not replayed; they are simulated.

Disaggregated deployments add one term, fitted on their simulated rows: the serving stack's
handoff latency per request (``EngineModel.handoff_s``, :func:`fit_handoff`), a backend's own where it has
enough rows (:func:`fit_handoffs`).

Cross-validation: leave one GPU out and leave one model out (:func:`cross_validate`), per
backend; the folds refit everything but the discrete overlap choice, which is itself chosen
by the training folds' error.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibrate.silicon import AIPERF_CLIENT, INFERENCEX_CLIENT
from simulator.config.errors import ConfigError
from simulator.costmodel.engine_model import EngineModel

# The free terms, in the order of the parameter vector, with their bounds (seconds).
TERMS = ("cpu_iteration_s", "cpu_per_seq_s", "cpu_per_prefill_token_s", "collective_extra_s",
         "prefill_floor_per_layer_s", "cpu_per_prefill_seq_layer_s")
FLOOR = TERMS.index("prefill_floor_per_layer_s")
LOWER = np.array([0.0, 0.0, 0.0, -30e-6, 0.0, 0.0])
UPPER = np.array([50e-3, 2e-3, 20e-6, 2e-3, 10e-3, 2e-3])
# The floor starts where it binds on most steps that carry a prompt: a floor below every step's
# time has no gradient, so a fit started there would never move it.
START = np.array([1e-3, 10e-6, 0.1e-6, 0.0, 1e-3, 1e-4])
X_SCALE = np.array([1e-3, 1e-5, 1e-7, 1e-5, 1e-4, 1e-4])
# The backends whose prefill floor is fitted, and the prompt tokens a step may carry and still run
# in their CUDA graphs: SGLang runs every extend batch and TensorRT-LLM every context phase outside
# them. vLLM is fitted without one: it captures mixed steps up to 512 tokens and compiles the rest
# (torch.compile), and a floor fitted on its rows (0.85 ms a layer above 512 prompt tokens) moved the
# held-out errors by under a point while pricing small fast models' prefill steps too slow.
FLOOR_ABOVE_TOKENS = {"sglang": 0, "trtllm": 0}
# The backends whose time per prompt chunk and layer is fitted (``fit(prefill_seq=True)``): vLLM's. On its 506
# replayed rows (scratch fits over this module's traces, fit and folds; the report at the commit that took it within
# 0.2 points: gpt-oss-120b 11.9% per layer)
# a time per prompt chunk moved leave-one-GPU-out TTFT 17.8% -> 15.3%, TPOT 9.0% -> 8.0%, at 10.3 ms a chunk: what
# vLLM's large models there (36-80 layers) show, which priced a small model's short prompt twice as slow (Llama-3.1-8B,
# 128 tokens: TTFT 12 -> 22 ms) where no row measures one. Per layer (0.187 ms a layer, 4.1 us a prompt token beside
# it) it did as well (15.4%, 7.7%) and held the shallow models out better (leave one model out: gpt-oss-120b's 36
# layers TTFT 18.2% per chunk, 11.7% per layer; all models 15.9% / 14.7%). On SGLang's rows a per-chunk time fitted to
# 0 (its prefill floor stands for a prompt step's fixed cost) and on TensorRT-LLM's it traded TPOT for TTFT.
PREFILL_SEQ_BACKENDS: tuple[str, ...] = ("vllm",)

# A user's benchmark CSV: required and optional columns (layout columns as the silicon sample names them).
MAX_ROW_USERS = 65_536  # a benchmark row's users, at most (the silicon rows reach 3,072)
USER_REQUIRED = ("backend", "model", "gpu", "isl", "osl", "concurrency", "ttft_ms", "tpot_ms")
# The client columns (:func:`row_client`): which benchmark client measured the row and how it drew its lengths.
CLIENT_COLUMNS = ("client", "range_ratio", "isl_stddev", "osl_stddev", "num_prompts")
USER_OPTIONAL = ("tp", "pp", "attention_dp", "ep", "dtype", "kernels", "mode", "backend_version", *CLIENT_COLUMNS)


@dataclass
class Trace:
    """One row's kernels-only closed-loop run, reduced to what :func:`replay` needs."""

    kernel_s: np.ndarray  # per step: the kernels' time (engine "ideal")
    seqs: np.ndarray  # per step: requests in the batch (prefill chunks + decodes)
    prefill_tokens: np.ndarray  # per step
    num_collectives: int
    min_collective_extra_s: float  # a collective never costs less than nothing (EngineCostModel's clamp)
    arrive_step: np.ndarray  # per measured request: the step whose end it arrived at (-1: at t=0)
    first_step: np.ndarray  # per measured request: the step that produced its first token
    done_step: np.ndarray  # per measured request: the step that produced its last token
    num_output_tokens: np.ndarray
    kernel_ttft_ms: float = math.nan  # the kernels-only figures, for the report
    kernel_tpot_ms: float = math.nan
    num_layers: int = -1  # the model's (the prefill floor is per layer); -1: a trace cached before the field
    num_prefills: np.ndarray | None = None  # per step: prompt chunks (None: a trace cached before the field)


@dataclass
class Params:
    """One backend's fitted terms (see the module docstring)."""

    overlap_cpu: bool
    values: np.ndarray = field(default_factory=lambda: START.copy())
    floor_above_tokens: int = 0  # EngineModel.prefill_floor_above_tokens (not fitted)
    # EngineModel.prefill_seq_layer_max_chunks: not fitted, the most prompt chunks a step of the fit's rows held
    max_chunks: int | None = None

    def __post_init__(self) -> None:
        self.values = np.asarray(self.values, dtype=float)
        if self.values.ndim == 1 and 4 <= len(self.values) < len(TERMS):  # the first terms given: the rest at 0
            self.values = np.append(self.values, np.zeros(len(TERMS) - len(self.values)))
        if self.values.shape != (len(TERMS),):
            raise ConfigError("engine terms", f"{len(self.values)} values for {len(TERMS)} terms", ", ".join(TERMS))

    def engine(self, name: str, source: str, fitted: str) -> EngineModel:
        a, b, p, c, f, q = (float(v) for v in self.values)
        return EngineModel(name=name, source=source, fitted=fitted, overlap_cpu=self.overlap_cpu,
                           cpu_iteration_s=a, cpu_per_seq_s=b, cpu_per_prefill_token_s=p, cpu_per_prefill_seq_layer_s=q,
                           collective_extra_s=tuple((t, c) for t in (2, 4, 8, 16, 32, 64, 72)),
                           prefill_floor_per_layer_s=f, prefill_floor_above_tokens=self.floor_above_tokens,
                           prefill_seq_layer_max_chunks=self.max_chunks if q else None)

    @classmethod
    def from_engine(cls, e: EngineModel) -> Params:
        c = e.collective_extra_s[0][1] if e.collective_extra_s else 0.0
        return cls(e.overlap_cpu, np.array([e.cpu_iteration_s, e.cpu_per_seq_s, e.cpu_per_prefill_token_s, c,
                                            e.prefill_floor_per_layer_s, e.cpu_per_prefill_seq_layer_s]),
                   e.prefill_floor_above_tokens, e.prefill_seq_layer_max_chunks)


# -- traces ---------------------------------------------------------------------------------------------------------
def trace_of(config: Any) -> Trace | None:
    """Simulate ``config`` with the kernels alone and keep its steps and the measured requests'
    step indices; None where the run is not one replica's back-to-back steps (not replayable)."""
    from simulator.costmodel.engine_model import kernel_collective_latency_s, num_collectives
    from simulator.report.benchmark import measured_requests
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    config = config.replace(engine="ideal")
    result = simulate(config, record_iterations=True)
    cols = result.iterations.columns()
    if len(set(np.asarray(cols["replica_id"]).tolist())) > 1 or config.is_disaggregated:
        return None
    start = np.asarray(cols["started_at"], dtype=float)
    dur = np.asarray(cols["duration_s"], dtype=float)
    end = start + dur
    if len(end) > 1 and not np.allclose(start[1:], end[:-1], rtol=0, atol=1e-9 * max(1.0, end[-1])):
        return None  # idle gaps: the step sequence could depend on the step times
    req = request_columns(result)
    keep = measured_requests(result, req["request_id"]) & np.isfinite(req["completed_at"])
    if not keep.any():
        return None

    def step_of(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(end, t - 1e-12 * max(1.0, end[-1]), side="left")
        return np.minimum(i, len(end) - 1)

    arrive = np.asarray(req["arrival_at"])[keep]
    arrive_step = np.where(arrive <= 0, -1, step_of(arrive))
    from simulator.costmodel import load_cost_model

    kernels = load_cost_model(config.cost_model, config.replica, "ideal")
    return Trace(kernel_s=dur, seqs=np.asarray(cols["num_decodes"], dtype=np.int32) + np.asarray(cols["num_prefills"],
                                                                                                dtype=np.int32),
                 prefill_tokens=np.asarray(cols["num_prefill_tokens"], dtype=np.int32),
                 num_collectives=num_collectives(config.replica),
                 min_collective_extra_s=-kernel_collective_latency_s(getattr(kernels, "kernels", kernels)),
                 arrive_step=arrive_step, first_step=step_of(np.asarray(req["first_token_at"])[keep]),
                 done_step=step_of(np.asarray(req["completed_at"])[keep]),
                 num_output_tokens=np.asarray(req["num_output_tokens"])[keep],
                 kernel_ttft_ms=float(np.mean(req["ttft_s"][keep])) * 1e3,
                 kernel_tpot_ms=float(np.nanmean(req["tpot_s"][keep])) * 1e3,
                 num_layers=config.replica.model_spec.num_layers,
                 num_prefills=np.asarray(cols["num_prefills"], dtype=np.int32))


def replay(trace: Trace, params: Params) -> tuple[float, float]:
    """Mean TTFT and TPOT (ms) the simulator gives the traced run under ``params``'s terms."""
    a, b, p, c, f, q = params.values
    c = max(c, trace.min_collective_extra_s)
    gpu = trace.kernel_s + trace.num_collectives * c
    if f > 0:  # the prefill floor (EngineCostModel._floor), on the steps that carry prompt tokens
        if trace.num_layers < 1:
            raise ConfigError("trace", "a trace cached before num_layers cannot price a prefill floor", "rebuild the cache")
        gpu = np.where(trace.prefill_tokens > params.floor_above_tokens, np.maximum(gpu, f * trace.num_layers), gpu)
    cpu = a + b * trace.seqs + p * trace.prefill_tokens
    if q:
        if trace.num_prefills is None or trace.num_layers < 1:
            raise ConfigError("trace", "a trace cached before num_prefills and num_layers cannot price a term per prompt "
                              "chunk and layer", "rebuild the cache")
        chunks = trace.num_prefills if params.max_chunks is None else np.minimum(trace.num_prefills, params.max_chunks)
        cpu = cpu + q * trace.num_layers * chunks
    step = np.maximum(gpu, cpu) if params.overlap_cpu else gpu + cpu
    end = np.cumsum(step)
    arrived = np.where(trace.arrive_step < 0, 0.0, end[np.maximum(trace.arrive_step, 0)])
    first, done = end[trace.first_step], end[trace.done_step]
    tpot = (done - first) / np.maximum(trace.num_output_tokens - 1, 1)
    return float(np.mean(first - arrived)) * 1e3, float(np.mean(tpot)) * 1e3


def cache_key(config: Any) -> str:
    """A kernels-only trace's key: every field of the run but its engine terms (the trace replaces
    them by the ``ideal`` engine), so two configs that could simulate differently never share a trace
    (a recipe's batch waiting, attention-DP balance or speculation included; the key once named a
    list of fields, and a field left off it read back another config's trace)."""
    return hashlib.sha256(repr(config.replace(engine="ideal")).encode()).hexdigest()[:20]


class TraceCache:
    """Kernels-only traces by run config, in memory and (optionally) in one pickle file."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.items: dict[str, Trace | None] = {}
        if self.path is not None and self.path.is_file():
            try:
                self.items = pickle.loads(self.path.read_bytes())
            except Exception:  # noqa: BLE001 - a stale or broken cache is rebuilt
                self.items = {}
            # traces cached before a field they now need are rebuilt
            self.items = {k: t for k, t in self.items.items()
                          if t is None or ("num_layers" in vars(t) and getattr(t, "num_prefills", None) is not None)}

    def get(self, config: Any) -> Trace | None:
        key = cache_key(config)
        if key not in self.items:
            self.items[key] = trace_of(config)
        return self.items[key]

    def save(self) -> None:
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.items))
            tmp.replace(self.path)


# -- fitting --------------------------------------------------------------------------------------------------------
COLLECTIVE = TERMS.index("collective_extra_s")
PREFILL_SEQ = TERMS.index("cpu_per_prefill_seq_layer_s")


def _free(floor_above_tokens: int | None, collectives: bool = True, prefill_seq: bool = False) -> np.ndarray:
    """The positions of :data:`TERMS` a fit moves: all of them, but the prefill floor where none is fitted (None), the
    time per prompt chunk and layer where it is not (:data:`PREFILL_SEQ_BACKENDS`) and the collective extra where no step has a
    collective (``collectives`` False: TP 1 rows, which cannot identify it; a term without a gradient wandered to a
    bound of its search)."""
    return np.array([i for i in range(len(TERMS)) if not (i == FLOOR and floor_above_tokens is None)
                     and not (i == PREFILL_SEQ and not prefill_seq) and not (i == COLLECTIVE and not collectives)])


def _full(free_values: np.ndarray, free: np.ndarray) -> np.ndarray:
    """A fit's free values (at :func:`_free`'s positions) as every term's, the ones it does not move at 0."""
    values = np.zeros(len(TERMS))
    values[free] = free_values
    return values


def _residuals(values: np.ndarray, overlap: bool, traces: list[Trace], ttft: np.ndarray, tpot: np.ndarray,
               ttft_weight: float, floor_above_tokens: int | None, free: np.ndarray,
               max_chunks: int | None = None) -> np.ndarray:
    params = Params(overlap, _full(values, free), floor_above_tokens or 0, max_chunks)
    pred = np.array([replay(t, params) for t in traces])
    return np.concatenate([ttft_weight * np.log(pred[:, 0] / ttft), np.log(pred[:, 1] / tpot)])


def fit(traces: list[Trace], ttft_ms: np.ndarray, tpot_ms: np.ndarray, overlap: bool | None = None,
        ttft_weight: float = 0.5, start: Params | None = None, floor_above_tokens: int | None = 0,
        prefill_seq: bool = False) -> Params:
    """Least squares of log(predicted / measured) TTFT and TPOT (soft-L1 loss: a few odd rows do
    not pull the rest), bounded terms. ``overlap`` None: both tried, the lower cost kept.
    ``floor_above_tokens``: the prefill floor's bound (not fitted; see :data:`FLOOR_ABOVE_TOKENS`),
    or None to fit no floor; ``prefill_seq``: fit the time per prompt chunk and layer (:data:`PREFILL_SEQ_BACKENDS`)."""
    from scipy.optimize import least_squares

    ttft_ms, tpot_ms = np.asarray(ttft_ms, float), np.asarray(tpot_ms, float)
    if not traces:
        raise ConfigError("rows", "no replayable rows to fit", "give aggregated closed-loop rows")
    # (without a floor, or without a collective in any step, that term's value stays 0)
    free = _free(floor_above_tokens, any(t.num_collectives for t in traces), prefill_seq)
    # the term per prompt chunk is charged for at most the chunks a step of these rows held: beyond them it is
    # an extrapolation the rows do not support (a step of 512 short prompts)
    max_chunks = most_chunks(traces) if prefill_seq else None
    best: tuple[float, Params] | None = None
    for ov in ((True, False) if overlap is None else (overlap,)):
        x0 = np.clip(start.values if start is not None else START, LOWER, UPPER)[free]
        sol = least_squares(_residuals, x0, bounds=(LOWER[free], UPPER[free]), loss="soft_l1", f_scale=0.1,
                            args=(ov, traces, ttft_ms, tpot_ms, ttft_weight, floor_above_tokens, free, max_chunks),
                            x_scale=X_SCALE[free], max_nfev=200)
        if best is None or sol.cost < best[0]:
            best = (float(sol.cost), Params(ov, _full(sol.x, free), floor_above_tokens or 0, max_chunks))
    assert best is not None
    return best[1]


def most_chunks(traces: list[Trace]) -> int | None:
    """The most prompt chunks one step of ``traces`` carries (None: no trace records them, or none carries one)."""
    most = max((int(t.num_prefills.max()) for t in traces if t.num_prefills is not None and len(t.num_prefills)),
               default=0)
    return most or None


def floor_binds(traces: list[Trace], params: Params) -> bool:
    """Whether ``params``'s prefill floor lengthens any step of ``traces`` (as :func:`replay` prices it)."""
    c, f = params.values[3], params.values[FLOOR]
    if f <= 0:
        return False
    for t in traces:
        gpu = t.kernel_s + t.num_collectives * max(c, t.min_collective_extra_s)
        if np.any((t.prefill_tokens > params.floor_above_tokens) & (f * t.num_layers > gpu)):
            return True
    return False


def without_unbound_floor(params: Params, traces: list[Trace]) -> Params:
    """``params`` with its prefill floor at 0 where it binds on no step of the ``traces`` it was fitted on: such a
    floor has no gradient there, so the fit leaves it at its start (:data:`START`), a value the rows never saw,
    which priced a short prompt's step of other rows 4x too slow; 0 is all the rows say. Else ``params``."""
    if params.values[FLOOR] <= 0 or floor_binds(traces, params):
        return params
    values = params.values.copy()
    values[FLOOR] = 0.0
    return Params(params.overlap_cpu, values, params.floor_above_tokens, params.max_chunks)


def predict(traces: list[Trace], params: Params) -> np.ndarray:
    return np.array([replay(t, params) for t in traces]).reshape(-1, 2)


def fold_params(rows: Any, traces: list[Trace], group: str, held_values: Iterable[Any] | None = None,
                overlap: bool | None = None, min_train: int = 8, floor_above_tokens: int | None = 0,
                prefill_seq: bool = False) -> dict[Any, Params]:
    """For each held-out ``group`` value (``gpu`` or ``model``; by default those of ``rows``,
    or ``held_values``), the terms fitted on the rows without it; absent where fewer than
    ``min_train`` rows remain."""
    values = np.asarray(rows[group])
    ttft, tpot = np.asarray(rows["measured_ttft_ms"], float), np.asarray(rows["measured_tpot_ms"], float)
    out: dict[Any, Params] = {}
    for held in sorted(set(values.tolist()) if held_values is None else set(held_values)):
        train = values != held
        if train.sum() < min_train:
            continue
        out[held] = fit([t for t, k in zip(traces, train, strict=True) if k], ttft[train], tpot[train], overlap,
                        floor_above_tokens=floor_above_tokens, prefill_seq=prefill_seq)
    return out


def cross_validate(rows: Any, traces: list[Trace], group: str, overlap: bool | None = None,
                   min_train: int = 8, folds: dict[Any, Params] | None = None,
                   floor_above_tokens: int | None = 0, prefill_seq: bool = False) -> np.ndarray:
    """Held-out predictions (n x 2: TTFT, TPOT ms) per row, each from a fit without its
    ``group`` value (``gpu`` or ``model``); NaN where too few rows remain to train on."""
    out = np.full((len(traces), 2), np.nan)
    values = np.asarray(rows[group])
    folds = (fold_params(rows, traces, group, None, overlap, min_train, floor_above_tokens, prefill_seq)
             if folds is None else folds)
    for held, params in folds.items():
        test = values == held
        if test.any():
            out[test] = predict([t for t, k in zip(traces, test, strict=True) if k], params)
    return out


# Candidate handoff latencies (s) of disaggregated deployments: 0 to 400 ms by 5 ms.
HANDOFF_GRID_S = np.arange(0.0, 0.4001, 0.005)


def fit_handoff(base_ttft_ms: Any, measured_ttft_ms: Any) -> float:
    """The serving stack's handoff latency (``EngineModel.handoff_s``, s) of disaggregated rows: the
    constant that, added to each row's TTFT simulated without one, minimises the median absolute log
    error (a grid search; the closed loop moves a little when the delay is simulated, so a report
    simulates the rows again with it). No usable row: 0."""
    base, meas = np.asarray(base_ttft_ms, dtype=float), np.asarray(measured_ttft_ms, dtype=float)
    ok = np.isfinite(base) & np.isfinite(meas) & (meas > 0) & (base > 0)
    if not ok.any():
        return 0.0
    cost = [np.median(np.abs(np.log((base[ok] + 1e3 * h) / meas[ok]))) for h in HANDOFF_GRID_S]
    return float(HANDOFF_GRID_S[int(np.argmin(cost))])


# A backend's disaggregated rows fit a handoff latency of their own from this many on (its serving stack's: Dynamo
# with NIXL for TensorRT-LLM, SGLang's bootstrap server and transfer engine, vLLM's NIXL connector); fewer take the
# one fitted on every backend's rows.
MIN_OWN_HANDOFF_ROWS = 20


def fit_handoffs(base_ttft_ms: Any, measured_ttft_ms: Any, backends: Any,
                 min_rows: int = MIN_OWN_HANDOFF_ROWS) -> tuple[dict[str, float], float]:
    """The handoff latency (s) of each backend with at least ``min_rows`` usable rows, :func:`fit_handoff` on its own
    rows (a backend with fewer is absent: the pooled one is its); and the pooled one, fitted on every row. Unusable
    rows (no simulated or measured TTFT) count for neither."""
    base, meas = np.asarray(base_ttft_ms, dtype=float), np.asarray(measured_ttft_ms, dtype=float)
    names = np.asarray(backends).astype(str)
    usable = np.isfinite(base) & np.isfinite(meas) & (meas > 0) & (base > 0)
    own = {b: usable & (names == b) for b in sorted(set(names.tolist()))}
    return ({b: fit_handoff(base[m], meas[m]) for b, m in own.items() if m.sum() >= min_rows},
            fit_handoff(base[usable], meas[usable]))


def abs_err(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0)


def error_row(pred: np.ndarray, rows: Any) -> dict[str, float]:
    """Median and P90 absolute relative error of TTFT and TPOT, over rows with a prediction."""
    e_ttft = abs_err(pred[:, 0], rows["measured_ttft_ms"])
    e_tpot = abs_err(pred[:, 1], rows["measured_tpot_ms"])
    ok = np.isfinite(e_ttft) & np.isfinite(e_tpot)
    if not ok.any():
        return {"num_rows": 0, "ttft_median": math.nan, "ttft_p90": math.nan, "tpot_median": math.nan,
                "tpot_p90": math.nan}
    return {"num_rows": int(ok.sum()), "ttft_median": float(np.median(e_ttft[ok])),
            "ttft_p90": float(np.quantile(e_ttft[ok], 0.9)), "tpot_median": float(np.median(e_tpot[ok])),
            "tpot_p90": float(np.quantile(e_tpot[ok], 0.9))}


# -- the benchmark client of a user's rows -------------------------------------------------------------------------
# How the client that measured a row drew its requests, which the rows do not record (--client, or a row's client
# column, says): it sets the replay's lengths, request count and start. Exact lengths lock a closed loop's users into
# waves (every prefill in one step: README, "Benchmarks as vllm bench serve runs them"), so a row measured with
# banded lengths and replayed exact came out with its TTFT several times too high. vllm bench serve's random dataset
# sends exact lengths unless --random-range-ratio r draws them in [len x (1-r), len x (1+r)], 1000 prompts unless
# --num-prompts, every user at once from the start; InferenceX's and AIPerf's clients as the silicon report reads
# them (silicon.INFERENCEX_CLIENT: [0.8 len, len], 10 requests a user; silicon.AIPERF_CLIENT: exact lengths, or
# spread by --isl-stddev / --osl-stddev, 20 requests a user). Each client's measured requests start together after
# its warm-up (warmup_mode drain).
VLLM_BENCH_CLIENT = {"range_ratio": 0.0, "range_style": "vllm", "warmup_mode": "drain", "num_prompts": 1000}
ROW_CLIENTS: dict[str, dict[str, Any]] = {"vllm-bench": VLLM_BENCH_CLIENT, "inferencex": INFERENCEX_CLIENT,
                                          "aiperf": AIPERF_CLIENT}
DEFAULT_ROW_CLIENT = "vllm-bench"
# A row's measured requests replayed, at most: a client's count beyond it is capped (and said), as a row of 64
# users at 10,000 prompts would simulate for minutes for a mean its first 4,096 requests already give.
MAX_ROW_REQUESTS = 4096


@dataclass(frozen=True)
class RowClient:
    """One row's benchmark client as :func:`user_row_config` replays it (WorkloadConfig's fields)."""

    name: str
    range_ratio: float
    range_style: str
    prompt_stddev: float
    output_stddev: float
    warmup_mode: str
    num_prompts: int | None  # the measured requests; None: requests_per_user a user
    requests_per_user: int = 0

    def num_requests(self, concurrency: int) -> int:
        """The measured requests the client sent at ``concurrency`` users."""
        return self.num_prompts if self.num_prompts is not None else self.requests_per_user * concurrency

    def describe(self) -> str:
        if self.prompt_stddev or self.output_stddev:
            lengths = f"lengths spread by {self.prompt_stddev:g} / {self.output_stddev:g} tokens"
        elif self.range_style == "sglang" and self.range_ratio < 1:
            lengths = f"lengths in [{self.range_ratio:g} len, len]"
        elif self.range_style == "vllm" and self.range_ratio > 0:
            lengths = f"lengths in [{1 - self.range_ratio:g} len, {1 + self.range_ratio:g} len]"
        else:
            lengths = "exact lengths"
        sent = f"{self.num_prompts} prompts" if self.num_prompts is not None else f"{self.requests_per_user} a user"
        return f"{self.name}: {lengths}, {sent}"


def _client_number(key: str, value: Any) -> float:
    """A client column's cell as a number, or a ConfigError naming what the column takes."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    whole = key == "num_prompts"
    ok = math.isfinite(number) and (number >= 1 and number == round(number) if whole else number >= 0)
    if not ok:
        raise ConfigError(key, f"must be {'a whole number >= 1' if whole else 'a finite number >= 0'}, got {value!r}",
                          "fix the value, or leave the cell empty for the client's own")
    return int(number) if whole else number


def parse_client(spec: str) -> dict[str, Any]:
    """``--client NAME[,key=value,...]`` as client column cells (keys: :data:`CLIENT_COLUMNS`' but ``client``)."""
    name, *pairs = (part.strip() for part in str(spec).split(","))
    cells: dict[str, Any] = {"client": name}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key.strip() not in CLIENT_COLUMNS[1:]:
            raise ConfigError("--client", f"{pair!r} is not key=value with a key of {', '.join(CLIENT_COLUMNS[1:])}",
                              "e.g. --client vllm-bench,range_ratio=0.5")
        cells[key.strip()] = value.strip()
    try:
        row_client(cells)  # refused here, not on the first row
    except ConfigError as err:
        raise ConfigError("--client", f"{err.field} {err.problem}", err.fix) from None
    return cells


def _given(value: Any) -> bool:
    return value is not None and value != "" and not (isinstance(value, float) and math.isnan(value))


def row_client(cells: dict[str, Any], file_cells: dict[str, Any] | None = None) -> RowClient:
    """The client a row's client column ``cells`` name, over the file's (``--client``: :func:`parse_client`); the
    file's settings stand for a row naming no other client. Raises ConfigError (the caller names the line)."""
    file_cells = file_cells or {}
    row_name = cells.get("client")
    if _given(row_name) and row_name != file_cells.get("client", DEFAULT_ROW_CLIENT):
        file_cells = {}  # another client than the file's: none of the file's settings, which were its client's
    merged = {**file_cells, **{k: v for k, v in cells.items() if _given(v)}}
    name = str(merged.get("client") or DEFAULT_ROW_CLIENT)
    if name not in ROW_CLIENTS:
        raise ConfigError("client", f"{name!r} is not one of {', '.join(ROW_CLIENTS)}",
                          "name the client that measured the row")
    base = ROW_CLIENTS[name]
    values = {key: _client_number(key, merged[key]) for key in CLIENT_COLUMNS[1:] if _given(merged.get(key))}
    spread = [key for key in ("isl_stddev", "osl_stddev") if key in values]
    if spread and name != "aiperf":  # vllm bench serve's and InferenceX's random datasets band lengths, never spread
        raise ConfigError(spread[0], f"{name} draws no normal spread of lengths (AIPerf's --isl-stddev / --osl-stddev)",
                          "give range_ratio, or client aiperf")
    if "range_ratio" in values and name == "aiperf":
        raise ConfigError("range_ratio", "aiperf draws no band of lengths: exact, or spread by isl_stddev / osl_stddev",
                          "give isl_stddev and osl_stddev, or another client")
    ratio = float(values.get("range_ratio", base["range_ratio"]))
    if base["range_style"] == "vllm" and not ratio < 1:  # [len x (1-r), len x (1+r)] needs r < 1
        raise ConfigError("range_ratio", f"{name} draws lengths in [len x (1-r), len x (1+r)], so r must be below 1, "
                          f"got {ratio:g}", "e.g. 0.5")
    if base["range_style"] == "sglang" and not ratio <= 1:
        raise ConfigError("range_ratio", f"{name} draws lengths in [len x r, len], so r must be at most 1, got "
                          f"{ratio:g}", "e.g. 0.8")
    num_prompts = values.get("num_prompts", base.get("num_prompts"))
    return RowClient(name, ratio, base["range_style"], float(values.get("isl_stddev", 0.0)),
                     float(values.get("osl_stddev", 0.0)), base["warmup_mode"],
                     None if num_prompts is None else int(num_prompts), int(base.get("requests_per_user", 0)))


# -- rows from a user's CSV -----------------------------------------------------------------------------------------
def read_user_rows(path: Path, client: dict[str, Any] | None = None) -> Any:
    """A user's aggregate benchmark rows (:data:`USER_REQUIRED` columns, :data:`USER_OPTIONAL`
    ones where known), one line per problem refused; ``client``: the file's (``--client``,
    :func:`parse_client`), under which each row's client columns are checked."""
    import pandas as pd

    from simulator.calibrate.csv_input import read_csv_checked

    df = read_csv_checked(path, "rows", "pass a CSV of benchmark rows", USER_REQUIRED,
                          f"give {', '.join(USER_REQUIRED)} (optional: {', '.join(USER_OPTIONAL)})")
    # The measured columns: positive finite numbers, whole where they count tokens or users (a fraction was
    # truncated); the optional layout columns: whole numbers >= 1 where a cell is given (empty: 1).
    checks = [(col, col in ("isl", "osl", "concurrency"), False) for col in ("isl", "osl", "concurrency", "ttft_ms",
                                                                              "tpot_ms")]
    checks += [(col, True, True) for col in ("tp", "pp", "attention_dp", "ep") if col in df.columns]
    for col in ("backend", "model", "gpu"):  # (an empty cell read as NaN: "backend np.float64(nan) is not ...")
        empty = df[col].isna() | (df[col].astype(str).str.strip() == "")
        if empty.any():
            raise ConfigError("rows", f"{path} line {int(np.argmax(empty.to_numpy())) + 2}: {col} is empty",
                              "fill it in, or drop the line")
    for col, whole, optional in checks:
        # (true/false cells are read as booleans, which to_numeric takes for 1 and 0: each is no number)
        values = pd.to_numeric(df[col], errors="coerce")
        boolean = df[col].map(lambda v: isinstance(v, bool | np.bool_))
        if boolean.any():
            values = values.astype(float).where(~boolean)
        bad = ~((values > 0) & np.isfinite(values))  # (inf is no measurement either)
        if whole:
            bad |= values != values.round()
        if optional:
            bad &= df[col].notna()
        if bad.any():
            first = int(np.argmax(bad.to_numpy()))
            value = df[col].iloc[first:first + 1].tolist()[0]  # (a Python value: no np.float64(...) in the line)
            need = "a whole number >= 1" if optional else f"a positive finite {'whole ' if whole else ''}number"
            raise ConfigError("rows", f"{path} line {first + 2}: {col} must be {need}, got {value!r}",
                              "fix the line, or leave the cell empty for 1" if optional else "fix or drop the line")
        df[col] = values
    # Each row is replayed as a closed loop of its users, each a few requests: 10^7 users ran on past a minute
    # with no word (a row names one engine's load, not a fleet's).
    short = df["osl"] < 2  # TPOT is (E2E - TTFT) / (OSL - 1): one output token has none
    if short.any():
        first = int(np.argmax(short.to_numpy()))
        raise ConfigError("rows", f"{path} line {first + 2}: osl must be at least 2 (a row's TPOT is the time between "
                          f"its output tokens), got {df['osl'].iloc[first]:g}", "fix or drop the line")
    over = df["concurrency"] > MAX_ROW_USERS
    if over.any():
        first = int(np.argmax(over.to_numpy()))
        raise ConfigError("rows", f"{path} line {first + 2}: concurrency {df['concurrency'].iloc[first]:,.0f} is beyond "
                          f"what one row replays (at most {MAX_ROW_USERS:,})", "fix or drop the line")
    # A GPU by its catalog name, so an alias ("h100") and the name ("h100-sxm") are one GPU to the cross-validation
    # and the artifact's label (an unknown one stays as written: its rows are skipped, said why).
    from simulator.calibrate.silicon import SYSTEMS
    from simulator.config.catalog import get_gpu

    def canonical(name: Any) -> Any:
        try:
            return get_gpu(SYSTEMS.get(str(name), str(name))).name
        except ConfigError:
            return name

    df["gpu"] = [canonical(g) for g in df["gpu"]]
    unknown = [c for c in df.columns if c not in USER_REQUIRED + USER_OPTIONAL]
    if unknown:  # a misspelt optional column ("TP") was read as absent: every row at its default
        raise ConfigError("rows", f"{path}: unknown column(s) {', '.join(map(str, unknown))}",
                          f"columns are {', '.join(USER_REQUIRED)} (optional: {', '.join(USER_OPTIONAL)})")
    from simulator.calibrate.silicon import BACKEND_SCHEDULERS
    from simulator.config.precision import WEIGHT_FORMATS, canonical_weight_format
    from simulator.config.run_config import KERNEL_TABLES

    # The text columns a row's run reads: a typo was run as vLLM's scheduler (backend) or skipped with a warning
    # (kernels, dtype) where a bad tp is refused. (backend_version is a label: kept, not read.)
    known = {"backend": tuple(BACKEND_SCHEDULERS), "kernels": tuple(KERNEL_TABLES)}
    for col, names in known.items():
        if col in df.columns:
            cells = df[col].where(df[col].notna(), "" if col == "kernels" else None)
            bad = ~cells.isin(names) & ~((col == "kernels") & (cells == ""))
            if bad.any():
                first = int(np.argmax(bad.to_numpy()))
                raise ConfigError("rows", f"{path} line {first + 2}: {col} {df[col].iloc[first]!r} is not one of "
                                  f"{', '.join(names)}", "fix the line" + (", or leave it empty" if col == "kernels" else ""))
    if "dtype" in df.columns:
        for i, cell in enumerate(df["dtype"]):
            if isinstance(cell, str) and cell and canonical_weight_format(cell) not in WEIGHT_FORMATS:
                raise ConfigError("rows", f"{path} line {i + 2}: dtype {cell!r} is not one of "
                                  f"{', '.join(WEIGHT_FORMATS)}", "fix the line, or leave it empty")
    for i, cells in enumerate(df.reindex(columns=list(CLIENT_COLUMNS)).to_dict("records")):
        try:
            row_client(cells, client)
        except ConfigError as err:
            raise ConfigError("rows", f"{path} line {i + 2}: {err.field} {err.problem}", err.fix) from None
    backends = list(dict.fromkeys(df["backend"].tolist()))
    if len(backends) > 1:  # one engine's terms from another engine's rows would be fitted as one
        raise ConfigError("rows", f"{path}: rows of {len(backends)} backends ({', '.join(map(str, backends))}), and "
                          "one engine is fitted from them", "split the file by backend and fit each")
    if "mode" in df.columns and (df["mode"].fillna("agg") != "agg").any():
        raise ConfigError("rows", "only aggregated rows (mode agg) are fitted from a CSV",
                          "drop the disaggregated rows or set mode to agg")
    return df


def user_row_config(row: Any, base: Any, budget: int | None = 8192, client: RowClient | None = None,
                    max_requests: int = MAX_ROW_REQUESTS) -> Any:
    """A closed-loop run of one user row over ``base`` (a RunConfig): its model, GPU, layout,
    lengths and concurrency; the row's ``kernels`` if given, else its backend's measured kernel
    tables where the backend has them (vllm, sglang, trtllm), else the roofline. ``budget``: the
    step's token budget, or None for the row's engine's own default on its GPU (:func:`row_budget`).
    ``client``: the benchmark client that measured it (its lengths, requests and warm-up; at most
    ``max_requests`` measured), by default the one its own client columns name (:func:`row_client`)."""
    from simulator.calibrate.silicon import BACKEND_SCHEDULERS, SYSTEMS, _model
    from simulator.config.run_config import KERNEL_TABLES, SchedulerConfig

    def opt(name: str, default: Any) -> Any:
        v = getattr(row, name, default)
        return default if v is None or (isinstance(v, float) and math.isnan(v)) else v

    if client is None:
        client = row_client({key: getattr(row, key, None) for key in CLIENT_COLUMNS})
    conc = int(row.concurrency)
    # one warm-up request a user (drained before the measured ones, which every user then sends at once)
    measured = min(client.num_requests(conc), max(max_requests, conc))
    tp, pp, adp, ep = int(opt("tp", 1)), int(opt("pp", 1)), int(opt("attention_dp", 1)), int(opt("ep", 1))
    backend = str(row.backend)
    if budget is None and backend == "trtllm":
        # TensorRT-LLM's rows run vllm-v1's policy (BACKEND_SCHEDULERS), whose default budget is vLLM's; the engine
        # measured ran trtllm-serve's own default max_num_tokens.
        budget = SchedulerConfig(name="trtllm").token_budget(0)
    changes: dict[str, Any] = {
        "replica__model": _model(str(row.model)), "replica__gpu": SYSTEMS.get(str(row.gpu), str(row.gpu)), "replica__tp": tp, "replica__pp": pp,
        "replica__ep": ep, "scheduler__name": BACKEND_SCHEDULERS.get(backend, "vllm-v1"),
        "scheduler__max_num_batched_tokens": budget,  # None: the policy's default for the GPU, as `simulate run`'s
        "scheduler__max_num_seqs": max(256, -(-conc // adp)),
        "workload__name": "fixed", "workload__prompt_tokens": int(row.isl), "workload__output_tokens": int(row.osl),
        "workload__range_ratio": client.range_ratio, "workload__range_style": client.range_style,
        "workload__prompt_tokens_stddev": client.prompt_stddev, "workload__output_tokens_stddev": client.output_stddev,
        "workload__arrival": "burst", "workload__num_requests": conc + measured, "workload__concurrency": conc,
        "workload__num_warmup": conc, "workload__warmup_mode": client.warmup_mode,
        "replica__kernels": str(opt("kernels", backend if backend in KERNEL_TABLES else "roofline")),
    }
    if adp > 1:
        changes["replica__attention_dp"] = adp
    if "dtype" in row._fields and isinstance(row.dtype, str) and row.dtype:
        changes["replica__dtype"] = row.dtype
    return base.replace(**changes)


def row_budget(config: Any) -> int:
    """The token budget a row's run steps under (one attention-DP rank's), as its scheduler applies it."""
    r = config.replica
    return config.scheduler.token_budget(r.effective_max_model_len, r.gpu_spec, r.attention_dp)


def replay_gaps(engine: EngineModel, configs: Iterable[Any]) -> list[str]:
    """The terms of ``engine`` that a :func:`replay` of :meth:`Params.from_engine` leaves out or prices otherwise
    on the runs ``configs``: where any is, a figure replayed under ``engine`` is not what the simulator gives."""
    from simulator.costmodel.calibration import roofline_backend
    from simulator.costmodel.engine_model import ENGINES, num_collectives, tp_lookup

    configs = list(configs)
    tps = {c.replica.tp for c in configs}
    gaps = []
    if any(tp_lookup(engine.rpc_s, t) for t in tps):  # (0 at tp 1)
        gaps.append("rpc_s")
    if engine.rpc_per_seq_s and max(tps, default=1) > 1:
        gaps.append("rpc_per_seq_s")
    if engine.prefill_excess_token_s:
        gaps.append("prefill_excess_token_s")
    if not engine.cuda_graphs and engine.launch_per_kernel_s:
        gaps.append("cuda_graphs false (its launch floor)")
    first = Params.from_engine(engine).values[3]  # the one collective extra a replay prices every TP at
    if any(num_collectives(c.replica) and tp_lookup(engine.collective_extra_s, c.replica.tp) != first for c in configs):
        gaps.append("collective_extra_s by TP")
    cpu = (engine.cpu_iteration_s or engine.cpu_per_seq_s or engine.cpu_per_prefill_token_s
           or engine.cpu_per_prefill_seq_layer_s)  # (none: nothing to hide)
    if cpu and engine.overlap_cpu and not engine.overlap_pipeline and any(c.replica.pp > 1 for c in configs):
        gaps.append("overlap_cpu off under pipeline parallelism (overlap_pipeline false)")
    ideal = ENGINES["ideal"]  # the kernels-only replays' roofline constants (trace_of runs the ideal engine)
    if any(roofline_backend(c.replica.kernels, engine) != roofline_backend(c.replica.kernels, ideal) for c in configs):
        gaps.append(f"roofline_prices ({roofline_backend('roofline', engine)}'s roofline constants)")
    return gaps


def repeated_rows(df: Any) -> dict[int, int]:
    """Rows of ``df`` that repeat an earlier one, cell for cell: position -> the first's. A repeated row is one
    measurement: counted twice it weighs twice, and a copy of a held-out row in the training rows makes the
    held-out error no such thing."""
    first_of: dict[tuple, int] = {}
    out: dict[int, int] = {}
    for i, key in enumerate(map(tuple, df.astype(str).to_numpy())):
        if first_of.setdefault(key, i) != i:
            out[i] = first_of[key]
    return out


@dataclass
class CalibrationResult:
    engine: EngineModel
    report: dict[str, Any]
    predictions: Any  # DataFrame: per row, measured, in-sample and held-out predictions


def held_out_rows(rows: Any, holdout: float, seed: int) -> np.ndarray:
    """The rows :func:`calibrate_rows` holds out (a boolean mask, at least one): a seeded draw of ``holdout`` of them
    over the rows in a canonical order, by their cells with the columns by name, so which rows are held out turns on
    neither the order of a file's lines nor of its columns (a reversed file held out others: TTFT after 4.6% against
    28.6%; a calibration audit)."""
    cells = rows[sorted(rows.columns)].astype(str)
    canonical = np.argsort(cells.agg("|".join, axis=1).to_numpy(), kind="stable")
    test = np.zeros(len(rows), bool)
    test[canonical[np.random.default_rng(seed).permutation(len(rows))][:max(1, int(round(holdout * len(rows))))]] = True
    return test


def calibrate_rows(df: Any, base: Any, name: str, source: str, holdout: float = 0.25, seed: int = 0,
                   budget: int | None = None, progress: Callable[[str], None] | None = None,
                   cache: TraceCache | None = None, client: dict[str, Any] | None = None) -> CalibrationResult:
    """``simulate calibrate-engine --rows``: fit one preset's terms on a user's rows (one kernels-
    only simulation each), report the held-out error (a seeded split of ``holdout`` of the rows,
    and leave-one-GPU-out / leave-one-model-out where the rows span more than one) before (the
    base engine, replayed) and after. ``budget``: every row's token budget, or None for each row's
    engine's own default on its GPU (what `simulate run` steps under without --max-num-batched-tokens).
    ``client``: the file's benchmark client (``--client``: :func:`parse_client`; a row's client columns over it)."""
    from simulator.calibrate.silicon import Unexpressible
    from simulator.config.errors import ConfigError as _CE
    from simulator.costmodel.calibration import roofline_backend
    from simulator.costmodel.engine_model import ENGINES, load_engine

    cache = cache or TraceCache()
    traces, kept, skipped, configs = [], [], [], []
    prices: set[tuple[str, str]] = set()  # (kernels, roofline constants) each kept row replayed over
    budgets: dict[str, set[int]] = {}  # GPU -> the token budgets its kept rows stepped under
    repeated = repeated_rows(df)
    clients: dict[str, int] = {}  # each client's description -> its rows replayed
    capped = 0  # rows whose client sent more requests than a replay runs (MAX_ROW_REQUESTS)
    for i, row in enumerate(df.itertuples(index=False)):
        if i in repeated:
            skipped.append((i + 2, f"the same row as line {repeated[i] + 2}: one measurement, counted once"))
            continue
        try:
            measured_by = row_client({key: getattr(row, key, None) for key in CLIENT_COLUMNS}, client)
            row_config = user_row_config(row, base, budget, measured_by)
            trace = cache.get(row_config)
        except (_CE, Unexpressible) as err:
            skipped.append((i + 2, str(err)))
            continue
        if trace is None:  # (trace_of keeps no reason: the row's layout names the likely one)
            r = row_config.replica
            why = ("attention-DP ranks step side by side" if r.attention_dp > 1
                   else f"pipeline parallelism (pp {r.pp}) overlaps its micro-batches' steps" if r.pp > 1
                   else "its steps leave idle gaps")
            skipped.append((i + 2, f"not one replica's back-to-back steps, which the fit replays: {why}"))
            continue
        traces.append(trace)
        kept.append(i)
        clients[measured_by.describe()] = clients.get(measured_by.describe(), 0) + 1
        w = row_config.workload
        capped += int(measured_by.num_requests(int(row.concurrency)) > w.num_requests - w.num_warmup)
        configs.append(row_config)
        budgets.setdefault(str(row_config.replica.gpu), set()).add(row_budget(row_config))
        # the constants the kernels-only trace ran over (trace_of's ideal engine: the pooled ones on the roofline), not
        # the base engine's, which priced the artifact's runs 2-3% off its own replays
        prices.add((row_config.replica.kernels, roofline_backend(row_config.replica.kernels, ENGINES["ideal"])))
        if progress:
            progress(f"simulated {len(kept)}/{len(df)} rows")
    if len(kept) < 4:
        raise ConfigError("rows", f"only {len(kept)} usable rows"
                          + (f" (line {skipped[0][0]}: {skipped[0][1]})" if skipped else ""), "give at least 4 rows")
    rows = df.iloc[kept].reset_index(drop=True).rename(columns={"ttft_ms": "measured_ttft_ms",
                                                                 "tpot_ms": "measured_tpot_ms"})
    ttft, tpot = rows["measured_ttft_ms"].to_numpy(float), rows["measured_tpot_ms"].to_numpy(float)
    from simulator.calibrate.engine_fit import check_units

    for column, measured, kernels_only in (("ttft_ms", ttft, [t.kernel_ttft_ms for t in traces]),
                                           ("tpot_ms", tpot, [t.kernel_tpot_ms for t in traces])):
        check_units(measured, kernels_only, "rows", column, "ms")
    test = held_out_rows(rows, holdout, seed)
    train = ~test
    base_params = Params.from_engine(load_engine(base.engine))
    tr = [t for t, k in zip(traces, train, strict=True) if k]
    te = [t for t, k in zip(traces, test, strict=True) if k]
    # A prefill floor is fitted where the silicon presets fit one (FLOOR_ABOVE_TOKENS: SGLang, TensorRT-LLM),
    # above the base engine's CUDA-graph bound (not fitted); none for vLLM, whose fitted floor never bound on its
    # rows yet priced small models' prefills too slow (the artifact keeps the base engine's bound, at no floor).
    above = base_params.floor_above_tokens if str(rows["backend"].iloc[0]) in FLOOR_ABOVE_TOKENS else None
    prefill_seq = str(rows["backend"].iloc[0]) in PREFILL_SEQ_BACKENDS
    num_terms = len(_free(above, any(t.num_collectives for t in traces), prefill_seq))
    if 2 * len(tr) <= num_terms:  # each row is two measurements (TTFT, TPOT): no more than the terms fits anything
        raise ConfigError("rows", f"{len(rows)} usable rows leave {len(tr)} to fit {num_terms} terms on "
                          f"(--holdout {holdout:g} keeps {int(test.sum())} apart)", "give more rows or a smaller --holdout")
    split_fit = fit(tr, ttft[train], tpot[train], floor_above_tokens=above, prefill_seq=prefill_seq)
    notes = []
    if capped:  # the first wave (every user at once) weighs more in fewer requests
        notes.append(f"{capped} row(s) replay {MAX_ROW_REQUESTS:,} of the requests their client sent (the most a row "
                     "replays)")
    gaps = replay_gaps(load_engine(base.engine), configs)
    if gaps:  # the base engine replayed would be another engine's figure (a preset's RPC, excess, ...): simulated
        from simulator.calibrate.silicon import simulate_row

        if progress:
            progress(f"simulating the {int(test.sum())} held-out rows under {base.engine}")
        sims = [simulate_row(c) for c, k in zip(configs, test, strict=True) if k]
        before = error_row(np.array([s if isinstance(s, tuple) else (math.nan, math.nan) for s in sims]), rows[test])
        notes.append(f"held-out error before simulated: the replay cannot express {base.engine}'s {', '.join(gaps)}")
    else:
        before = error_row(predict(te, base_params), rows[test])
    # (the final fit starts where the split's ended, its floor included: a floor the split's rows left unbound may
    # bind on the held-out rows)
    final = fit(traces, ttft, tpot, start=split_fit, floor_above_tokens=above, prefill_seq=prefill_seq)
    final.floor_above_tokens = base_params.floor_above_tokens
    # Each fit's prefill floor as the rows it was fitted on identify it (the artifact's, the split's that the
    # held-out error judges, the folds' below): where it bound on none of their steps, 0.
    split_fit = without_unbound_floor(split_fit, tr)
    after = error_row(predict(te, split_fit), rows[test])
    identified = without_unbound_floor(final, traces)
    if identified is not final:
        notes.append(f"the prefill floor the fit left at {final.values[FLOOR] * 1e3:.3g} ms a layer lengthened no step of "
                     "the rows: not identified by them, written as 0")
        final = identified
    rows["pred_ttft_ms"], rows["pred_tpot_ms"] = predict(traces, final).T
    # A term at a bound of its search (not a 0 it may rest at: a term the rows do not need) is what the rows asked
    # beyond what the fit allows: said, not written in silence.
    warnings = [f"{term} ended at its search bound ({bound:.3g} s): the rows ask for more than the fit allows"
                for term, value, bound in zip(TERMS, final.values, np.where(final.values > 0, UPPER, LOWER), strict=True)
                if bound != 0 and abs(value - bound) <= 1e-4 * abs(bound)]
    report: dict[str, Any] = {"kind": "benchmark rows", "rows": len(rows), "skipped": skipped,
                              "base_engine": base.engine, "holdout_rows": int(test.sum()),
                              "client": "; ".join(f"{d} ({n} rows)" if len(clients) > 1 else d
                                                  for d, n in clients.items()),
                              "token_budget": budget if budget is not None else "engine default per GPU: " + ", ".join(
                                  f"{gpu} {'/'.join(map(str, sorted(b)))}" for gpu, b in budgets.items()),
                              "holdout_before": before, "holdout_after": after, "notes": notes,
                              "warnings": warnings}
    for group in ("gpu", "model"):
        if rows[group].nunique() > 1:
            groups = np.asarray(rows[group])
            folds = {held: without_unbound_floor(p, [t for t, g in zip(traces, groups, strict=True) if g != held])
                     for held, p in fold_params(rows, traces, group, floor_above_tokens=above,
                                                prefill_seq=prefill_seq).items()}
            cv = cross_validate(rows, traces, group, folds=folds)
            report[f"leave_one_{group}_out"] = error_row(cv, rows)
            rows[f"cv_{group}_ttft_ms"], rows[f"cv_{group}_tpot_ms"] = cv.T
    engine = final.engine(name, source, f"servesim calibrate-engine --rows: least squares (soft-L1) of log "
                          f"TTFT/TPOT ratios over {len(rows)} rows' closed-loop replays; overlap "
                          f"{'on' if final.overlap_cpu else 'off'} chosen by fit cost")
    # aggregated rows say nothing of a disaggregated handoff: the starting engine's stands. The kernel prices the
    # rows replayed over are the artifact's where they were one (a run over others is told; its roofline gaps
    # priced by the same constants), else it names none.
    from simulator.costmodel.calibration import POOLED

    (kernels, constants), one = (next(iter(prices)), True) if len(prices) == 1 else ((None, POOLED), False)
    # The policy the replays stepped under (the rows are one backend's: read_user_rows), so a run under another
    # is told, as for the presets.
    from simulator.calibrate.silicon import BACKEND_SCHEDULERS

    engine = engine.with_terms(handoff_s=load_engine(base.engine).handoff_s,
                               kernels=kernels if one and kernels != "roofline" else None, roofline_prices=constants,
                               scheduler=BACKEND_SCHEDULERS.get(str(rows["backend"].iloc[0]), "vllm-v1"))
    return CalibrationResult(engine, report, rows)

