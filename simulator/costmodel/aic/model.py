"""Kernel cost model priced from AIConfigurator's measured kernel tables (``--kernels vllm|sglang|trtllm``).

Same interface and contract as :class:`~simulator.costmodel.roofline.RooflineCostModel` (a
:class:`~simulator.costmodel.base.TabulatedCostModel`), for one GPU's system and one engine
backend's tables (:mod:`simulator.costmodel.aic.tables`). Every op of an iteration comes from a
measurement where the tables have one:

- **GEMMs** (QKV, output, gate/up, down, router, shared experts, LM head, MLA projections) by
  ``(m, n, k, dtype)``: for each weight shape the four nearest measured ``(n, k)`` shapes are
  blended log-log, giving a latency curve over ``m`` (tokens) that is interpolated log-log;
- **prefill attention** by (batch, prompt length, heads, KV heads, head dim, KV dtype): a
  batch of chunks is priced as ``num_prefills`` sequences of the length whose causal
  query-key pairs equal the batch's (``isl (isl + 1) / 2 = pairs / num_prefills``);
- **decode attention** by (batch, KV length, ...): for ``n`` decodes, the measured latencies
  at ``n`` (log-interpolated between batch sizes) over KV lengths become a piecewise-linear
  function of the batch's total KV tokens (built once per ``n``, a bisect per iteration);
- sliding-window layers (gpt-oss) from the window kernel's own rows where the tables have them,
  else each query's keys capped at the window on the full-attention rows;
- **MLA** (DeepSeek) attention cores from the ``context_mla`` / ``generation_mla`` tables;
- a hybrid's **Gated DeltaNet** layers (Qwen3-Next, Qwen3.5): their projections from the GEMM
  tables, their recurrence by the roofline (:mod:`simulator.costmodel.linear_attention`; the
  shared subset has no ``linear_attention`` tables, and the header says so);
- **fused MoE** by (tokens, hidden, intermediate, top-k, experts, moe_tp, moe_ep, dtype,
  routing distribution: :data:`MOE_ROUTING`, AIConfigurator's default), the measured kernel including
  routing, activation and permutation; for
  TensorRT-LLM's NVFP4 experts at most :data:`MOE_LOW_LATENCY_TOKENS` tokens a step (the whole MoE
  group's), its min-latency kernel, as the engine switches to it and AIConfigurator prices it (the
  tables' other NVFP4 kernel, CUTLASS, has the most rows and is 2-5x slower there); B300/GB300 tables
  lack it, so their CUTLASS rows are scaled by the ratio B200/GB200 measured;
- **TP all-reduce** from the engine's own custom all-reduce table (CUDA-graph variant where
  measured) by message size.

Element-wise ops follow the backend: a fused residual-add + RMSNorm twice a layer and the
gated activation everywhere; rotary a separate kernel in vLLM and SGLang, fused into the
attention kernel in TensorRT-LLM. They have no tables; they are priced as AIConfigurator
prices them, ``bytes / (mem_bw * 0.8) + 3 us`` with the system file's constants.

**Past the grid** (more tokens than measured, longer contexts, shapes outside the measured
``n``/``k``), a value is the edge measurement scaled by the roofline's growth
(:func:`~simulator.costmodel.aic.interp.anchored`); iterations that needed that are counted in
``num_extrapolations`` (per op in ``extrapolations_by_op``) as for a learned model. Where a
table has no rows at all for the run (a dtype, MLA for a backend, a TP degree), the op is
priced by the roofline and one line says so (``notes``, printed once per process).

Everything is precomputed at load onto the token grid of :class:`TabulatedCostModel` and onto
per-batch-size curves; the per-iteration path does list lookups, a bisect and a few
multiply-adds, never pandas.
"""

from __future__ import annotations

import copy
import functools
import math
import sys
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.errors import ConfigError
from simulator.config.precision import MXFP4_FORMATS, kernel_format
from simulator.config.run_config import ReplicaConfig
from simulator.config.specs import GPUSpec
from simulator.costmodel.aic import tables as T
from simulator.costmodel.aic.interp import Grid2D, anchored, isotonic, loglog, loglog_scalar
from simulator.costmodel.base import BatchShape, TabulatedCostModel
from simulator.costmodel.calibration import GENERATION
from simulator.costmodel.linear_attention import hybrid_token_ops, linear_attention_time, linear_geometry
from simulator.costmodel.moe import mla_projections, moe_token_ops, uses_moe_collectives
from simulator.costmodel.roofline import RooflineCostModel

# Run dtypes (ReplicaConfig.dtype / kv_cache_dtype) -> the tables' dtype names. Unknown names
# pass through unchanged, so a precision added to the run config finds its rows by its own name.
# MXFP4 checkpoints (gpt-oss) quantize the experts only: their dense layers' GEMMs run in bf16.
GEMM_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "int4": "int4_wo", "fp8-block": "fp8_block",
               "fp8_block": "fp8_block", "nvfp4": "nvfp4", "mxfp4": "bfloat16", "mxfp4-w4a16": "bfloat16",
               "mxfp4-w4a8": "bfloat16"}
# MoE kernels to try, in order: FP8 MoE checkpoints (DeepSeek, Qwen3-FP8) are block-scaled where a
# backend has no per-tensor kernel. MXFP4 (gpt-oss) runs the kernel precision.kernel_format names for the
# backend and GPU (w4a8 on datacenter Blackwell, else w4a16), then the other where the tables lack it;
# the explicit mxfp4-w4a16 / mxfp4-w4a8 take their own rows only.
MOE_DTYPES = {"bf16": ("bfloat16",), "fp16": ("bfloat16",), "fp8": ("fp8", "fp8_block"), "int4": ("int4_wo",),
              "fp8-block": ("fp8_block",), "fp8_block": ("fp8_block",), "nvfp4": ("nvfp4",),
              "mxfp4-w4a16": ("w4a16_mxfp4",), "mxfp4-w4a8": ("w4a8_mxfp4_mxfp8",),
              "mxfp4": ("w4a16_mxfp4", "w4a8_mxfp4_mxfp8")}


def moe_candidates(dtype: str, backend: str, gpu: GPUSpec) -> tuple[str, ...]:
    """The MoE tables' dtypes a run's ``--dtype`` is priced by, in the order tried."""
    if dtype != "mxfp4":
        return MOE_DTYPES.get(dtype, (dtype,))
    first = MOE_DTYPES[kernel_format(dtype, backend, gpu)]
    return first + tuple(d for d in MOE_DTYPES[dtype] if d not in first)


# TensorRT-LLM's NVFP4 fused MoE runs its min-latency kernel up to this many tokens a step (the whole
# MoE group's, attention-DP ranks gathered), as AIConfigurator's TensorRT-LLM path selects it.
MOE_LOW_LATENCY_TOKENS = 128
MOE_LOW_LATENCY_SOURCE = "moe_torch_flow_min_latency"
# Systems whose tables lack that kernel -> the same generation's system that measured it beside CUTLASS.
MOE_LOW_LATENCY_DONORS = {"b300_sxm": "b200_sxm", "gb300": "gb200"}
# The MoE tables' routing distribution a run is priced by (``moe_imbalance`` 1): AIConfigurator's own default.
MOE_ROUTING = "power_law_1.01"
# The MoE kernels the engines share (one library, run by several), which --moe-kernel may take from another backend's
# tables of the GPU where the run's backend's collector did not time them: DeepGEMM's grouped GEMMs, FlashInfer's.
SHARED_MOE_KERNELS = ("deepgemm", "flashinfer")
# Each system's sibling on the same die (tables.SAME_DIE, both ways): a --moe-kernel none of its own tables time is
# looked for there (SGLang's collectors timed FlashInfer's CuteDSL NVFP4 MoE on B200 and B300, not GB200 and GB300).
SIBLING_DIE = {a: b for pair in T.SAME_DIE for a, b in (pair, pair[::-1])}
# Lanes of one backend's tables priced by another collector's rows of the same kernel: tables.LANE_DONORS.
KV_DTYPES = {"auto": "bfloat16", "bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8"}
# Element-wise kernels each backend runs per layer (besides the fused add + norm and activation).
SEPARATE_ROTARY = {"vllm": True, "sglang": True, "trtllm": False}
# Where a backend has no MLA core tables (vLLM: whole-module rows only, 2-3x its parts at batch 1), the
# backend whose tables measured the kernel it runs. On Blackwell vLLM's default MLA backend is FlashInfer's,
# which calls TensorRT-LLM's generated MLA kernels (SGLang's Blackwell tables name the same kernel source,
# ``trtllm_mla``). Hopper has no donor: vLLM runs FlashMLA there, which no table here measured.
MLA_DONORS: dict[tuple[str, str], tuple[str, str]] = {
    ("vllm", "blackwell"): ("trtllm", "vLLM runs TensorRT-LLM's MLA kernels through FlashInfer on Blackwell")}
MS = 1e-3  # the tables' milliseconds -> seconds

_printed: set[str] = set()


def _note_once(line: str) -> None:
    """A table gap, on stderr once per process (no traceback: the run goes on, priced by the roofline)."""
    if line not in _printed:
        _printed.add(line)
        print(f"note: {line}", file=sys.stderr)


class TableCostModel(TabulatedCostModel):
    """Kernel model from one system's AIConfigurator tables for one backend (see the module docstring)."""

    STRETCH_FORMS = frozenset({"decode-curve", "chunk-terms"})
    # While :meth:`_reads_scaled_gemm` probes an op: per GEMM priced, whether its curve was scaled by the roofline
    # from another measured shape (shared by the 16-bit twin, whose own GEMMs count too); None otherwise.
    _gemm_log: list[bool] | None = None
    # Ops always priced by the roofline. The database's comm/nccl/<version>/nccl_perf tables do hold alltoall rows
    # (and all_gather, reduce_scatter); they are not used yet: pricing from them would move the silicon report's
    # attention-DP rows (results/validation/silicon).
    ROOFLINE_ALWAYS = ("ep_all_to_all",)

    def __init__(self, replica: ReplicaConfig, backend: str, root: str | Path | None = None,
                 table_tokens: int = 16384, quiet: bool = False) -> None:
        super().__init__(replica)
        if backend not in T.BACKENDS:
            raise ConfigError("kernels", f"unknown kernel tables {backend!r}", f"use one of {', '.join(T.KERNEL_CHOICES)}")
        if replica.dtype in MXFP4_FORMATS and not replica.model_spec.is_moe:
            # The tables' MXFP4 rows are MoE kernels (gpt-oss quantises its experts only): pricing a dense
            # model's GEMMs at bfloat16 beside a 4-bit memory plan would quietly mix two precisions.
            raise ConfigError("replica.dtype", f"the {backend} tables hold MXFP4 rows for MoE experts only and "
                              f"{replica.model} is dense", "use --dtype nvfp4 or int4, or --kernels roofline")
        self.backend = backend
        self.root = root
        self.system = T.system_for(replica.gpu)
        T.data_root(root)
        self.name = f"tables:{backend}"
        # The roofline prices what no table measures, with this backend's constants and kernels (its MXFP4 format)
        # whatever replica.kernels says (the report builds table models over a plain replica).
        self.rf = rf = RooflineCostModel(replica, table_tokens=1, engine=backend)
        # What the shared MoE/MLA helpers read from a kernel model (the roofline's geometry).
        for attr in ("dtype_bytes", "heads_per_gpu", "kv_heads_per_gpu", "q_per_gpu", "kv_per_gpu", "ffn_per_gpu",
                     "kv_bytes_per_token", "weight_bytes", "dense_fraction", "sliding_fraction", "sliding_window",
                     "mla", "topology", "tp_link_bytes_per_s", "gemm_peak_flops", "gemm_knee_scale"):
            setattr(self, attr, getattr(rf, attr))
        linear_geometry(self)
        self.notes: list[str] = []
        self.roofline_ops: list[str] = []
        self.versions: dict[str, str] = {}
        self.borrowed: dict[str, str] = {}  # op family -> the other collector's tables whose rows price it
        self.num_extrapolations = 0
        self.extrapolations_by_op: dict[str, int] = {}
        spec = T.system_spec(self.system, root)
        self._ew_bw = spec.get("mem_bw", self.gpu.hbm_bytes_per_s) * spec.get("mem_bw_empirical_scaling_factor", 0.8)
        self._ew_floor = spec.get("mem_empirical_constant_latency", 3e-6)
        self._gemm_dtype = GEMM_DTYPES.get(replica.dtype, replica.dtype)
        self._kv_dtype = KV_DTYPES.get(replica.kv_cache_dtype, replica.kv_cache_dtype)
        self._gemm_curves: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._decode_curves: dict[int, tuple[list[float], list[float], list[float], float]] = {}
        self._prefill_rows: dict[int, tuple[list[float], list[float], list[float], float, float]] = {}
        self._load_gemm()
        self._load_attn_gemm()
        self._load_attention()
        self._load_moe()
        self._load_allreduce()
        if self.linear_fraction:
            self._lack("linear_attn", f"no linear_attention rows (the shared subset keeps none) for "
                       f"{replica.model_spec.num_linear_layers} Gated DeltaNet layers")
        self.source = T.describe(replica.gpu, backend, root)
        # A GEMM whose (n, k) no table measured (wider than the tables' 65,536, e.g. a TP1 Llama-3 LM head's
        # 128,256 columns) is a measured shape scaled by the roofline at every token count: the iterations
        # that price it extrapolate, as past the measured tokens.
        self._wide_lm_head = self._reads_scaled_gemm(self.lm_head_time)
        # Largest token count every token op was measured at: past it (at any count, where a token op's GEMM
        # shape was not measured), an iteration extrapolates.
        self._max_tokens = (0.0 if self._reads_scaled_gemm(self.token_ops)
                            else min(self._gemm_max_m, self._moe_max_tokens, self._ar_max_tokens))
        self.cal = replace(rf.cal, allreduce_latency_s=self._ar_latency_s,
                           source=f"{rf.cal.source}; all-reduce latency from the {backend} tables")
        self._build_tables(table_tokens + 1)
        # Whether a prompt's successive chunks have prefill_attention_list's plain-float form: prefill
        # attention from the tables' grid (else the roofline's, for which it has none here).
        self.chunk_terms_ok = self._prefill_grid is not None and not self.linear_fraction
        if not quiet:
            for line in self.notes:
                _note_once(line)

    # -- bookkeeping -------------------------------------------------------------------------------------
    def _lack(self, op: str, what: str) -> None:
        self.roofline_ops.append(op)
        self.notes.append(f"{self.backend} tables of {self.system} have {what}: {op} priced by the roofline")

    def _count(self, op: str, k: int = 1) -> None:
        if self._quiet or k <= 0:
            return
        self.num_extrapolations += k
        self.extrapolations_by_op[op] = self.extrapolations_by_op.get(op, 0) + k

    # -- GEMM --------------------------------------------------------------------------------------------
    def _load_gemm(self) -> None:
        self._gemm_index: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._gemm_scaled: set[tuple[int, int]] = set()  # (k, n) curves scaled from another shape (gemm_curve)
        self._gemm_max_m = math.inf
        ref = T.find_table(self.system, self.backend, "gemm", self.root)
        src, d, read, notes = (T.read_priced_rows(ref, self._gemm_dtype, ("m", "n", "k", "latency"), root=self.root)
                               if ref is not None else (None, {}, None, ()))
        if src is None or read is None:
            have = ", ".join(T.dtypes_of(ref)) if ref is not None else "none"
            self._lack("gemm", f"no GEMM rows for dtype {self._gemm_dtype} (have: {have})")
            return
        self.notes.extend(notes)
        self._priced_by("gemm", read)
        self.gemm_source = src
        mm, nn, kk, lat = d["m"].astype(np.int64), d["n"].astype(np.int64), d["k"].astype(np.int64), d["latency"]
        order = np.lexsort((mm, kk, nn))
        mm, nn, kk, lat = mm[order], nn[order], kk[order], lat[order]
        bounds = np.flatnonzero((np.diff(nn) != 0) | (np.diff(kk) != 0)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(mm)], strict=True):
            ms, idx = np.unique(mm[lo:hi], return_index=True)  # one row per m (first wins on duplicates)
            self._gemm_index[int(nn[lo]), int(kk[lo])] = (ms.astype(np.float64), lat[lo:hi][idx] * MS)
        self._gemm_n = np.array(sorted({n for n, _ in self._gemm_index}), dtype=np.float64)
        self._gemm_k = np.array(sorted({k for _, k in self._gemm_index}), dtype=np.float64)
        self._gemm_max_m = float(min(v[0][-1] for v in self._gemm_index.values()))

    def _load_attn_gemm(self) -> None:
        """``gemm16``: the GEMMs a quantized checkpoint keeps at 16 bits, on the bfloat16 rows (the
        roofline's 16-bit GEMM past them): its LM head and MoE router gate always (FP8 and FP4 checkpoints leave
        ``lm_head`` and the gate unquantized), and ``attn_gemm``, the attention projections, where a 4-bit MoE
        checkpoint, or one that keeps its attention at 16 bits, has them so (``ReplicaConfig.attention_16bit``;
        else :meth:`gemm` itself).
        At bfloat16 both are :meth:`gemm`."""
        self.attn_gemm = self.gemm16 = self.gemm
        # Which priced by the bfloat16 rows (the twin below), for roofline_breakdown_ops: the LM head and router gate,
        # the attention.
        self._head_16 = self._attn_16 = False
        if self._gemm_dtype == "bfloat16":
            return
        twin = copy.copy(self)  # the same tables but the GEMM index, read at bfloat16
        twin.rf = copy.copy(self.rf)
        twin.rf.gemm = twin.rf.gemm16  # its roofline fallback and extrapolation anchor: 16-bit too
        twin._gemm_dtype, twin._gemm_curves = "bfloat16", {}
        twin.notes, twin.roofline_ops, twin.versions, twin.borrowed = [], [], {}, {}
        twin._load_gemm()
        if "gemm" not in self.versions and "gemm" in twin.versions:  # the table prices the 16-bit GEMMs only: said
            self.versions["gemm"] = twin.versions["gemm"]
            if "gemm" in twin.borrowed:
                self.borrowed["gemm"] = twin.borrowed["gemm"]
        if not twin._gemm_index:
            self._lack("gemm16", "no bfloat16 GEMM rows for the LM head and router gate (and a 4-bit MoE "
                       "checkpoint's attention projections) that the checkpoint keeps at 16 bits")
        self.gemm16 = twin.gemm
        self._head_16 = True
        if self.replica.attention_16bit:
            self.attn_gemm = twin.gemm
            self._attn_16 = True

    def gemm_curve(self, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Latency (s) over measured ``m`` of ``[m, k] @ [k, n]``: log-log blend of the nearest
        measured ``(n, k)``; shapes outside the measured ``n``/``k`` range scaled by the roofline."""
        key = (int(k), int(n))
        found = self._gemm_curves.get(key)
        if found is not None:
            return found
        ns, ks = self._gemm_n, self._gemm_k
        nc, kc = float(np.clip(n, ns[0], ns[-1])), float(np.clip(k, ks[0], ks[-1]))

        def bracket(grid: np.ndarray, x: float) -> tuple[float, float, float]:
            i = int(np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(grid) - 1))
            if grid[i] == x or i == len(grid) - 1:
                return float(grid[i]), float(grid[i]), 0.0
            return float(grid[i]), float(grid[i + 1]), (math.log(x) - math.log(grid[i])) / (math.log(grid[i + 1]) - math.log(grid[i]))

        n0, n1, wn = bracket(ns, nc)
        k0, k1, wk = bracket(ks, kc)
        corners = [(n0, k0), (n0, k1), (n1, k0), (n1, k1)]
        if any((int(a), int(b)) not in self._gemm_index for a, b in corners):  # a hole: the nearest measured shape
            near = min(self._gemm_index, key=lambda p: (math.log(p[0] / nc)) ** 2 + (math.log(p[1] / kc)) ** 2)
            nc, kc = float(near[0]), float(near[1])
            n0 = n1 = nc
            k0 = k1 = kc
            wn = wk = 0.0
        ms = self._gemm_index[int(n0), int(k0)][0]
        curves = {c: loglog(*self._gemm_index[int(c[0]), int(c[1])], ms) for c in set(corners if wn or wk else [(n0, k0)])}
        if wn == 0.0 and wk == 0.0:
            ts = curves[n0, k0]
        else:
            lg = {c: np.log(v) for c, v in curves.items()}
            low = lg[n0, k0] + wk * (lg[n0, k1] - lg[n0, k0])
            high = lg[n1, k0] + wk * (lg[n1, k1] - lg[n1, k0])
            ts = np.exp(low + wn * (high - low))
        if (nc, kc) != (float(n), float(k)):
            ts = anchored(ts, self.rf.gemm(ms, k, n), self.rf.gemm(ms, int(kc), int(nc)))
            self._gemm_scaled.add(key)
        ts = isotonic(ts)  # weakly increasing in m (a library's tiling switches aside)
        self._gemm_curves[key] = (ms, ts)
        return ms, ts

    def _reads_scaled_gemm(self, op: Callable[[np.ndarray], object]) -> bool:
        """Whether ``op`` (:meth:`token_ops`, :meth:`lm_head_time`) of one token prices a GEMM from a curve
        :meth:`gemm_curve` scaled by the roofline from another measured shape (this model's or its 16-bit twin's)."""
        owners = {id(g.__self__): g.__self__ for g in (self.gemm, self.attn_gemm, self.gemm16)}.values()
        log: list[bool] = []
        for owner in owners:
            owner._gemm_log = log
        try:
            op(np.ones(1))
        finally:
            for owner in owners:
                del owner._gemm_log  # back to the class's None
        return any(log)

    def gemm(self, tokens: np.ndarray, k: int, n: int) -> np.ndarray:
        """Time of ``[tokens, k] @ [k, n]`` (the roofline's signature), from the tables."""
        t = np.asarray(tokens, dtype=np.float64)
        if not self._gemm_index or n <= 0 or k <= 0:
            return self.rf.gemm(t, k, n)
        ms, ts = self.gemm_curve(k, n)
        if self._gemm_log is not None:
            self._gemm_log.append((int(k), int(n)) in self._gemm_scaled)
        out = loglog(ms, ts, np.maximum(t, 1.0))
        over = t > ms[-1]
        if over.any():
            out[over] = anchored(ts[-1], self.rf.gemm(t[over], k, n), self.rf.gemm(ms[-1:], k, n))
        return np.where(t > 0, out, 0.0)

    # -- element-wise (no tables: AIConfigurator's analytic form) ---------------------------------------------
    def elementwise(self, tokens: np.ndarray, bytes_per_token: float, kernels: int = 1,
                    eff: float | None = None) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.float64)
        return np.where(t > 0, t * bytes_per_token / self._ew_bw + kernels * self._ew_floor, 0.0)

    # -- all-reduce --------------------------------------------------------------------------------------
    def _load_allreduce(self) -> None:
        self._ar = None
        self._ar_max_tokens = math.inf
        self._ar_latency_s = self.rf.cal.allreduce_latency_s
        tp = self.replica.tp
        if tp == 1:
            return
        if self.rf.topology.tp_ring_crosses_nodes:  # a custom all-reduce runs inside a node (NVLink/IPC peers)
            self._lack("tp_all_reduce", f"no all-reduce across nodes (a tp={tp} group spans them)")
            return
        ref = T.find_table(self.system, self.backend, "custom_allreduce", self.root)
        if ref is None:
            self._lack("tp_all_reduce", "no custom all-reduce table")
            return
        src, d = T.read_source_rows(ref, "bfloat16", ("message_size", "latency"), (("num_gpus", "==", tp),))
        if src is None:
            self._lack("tp_all_reduce", f"no all-reduce rows for {tp} GPUs")
            return
        msg, idx = np.unique(d["message_size"].astype(np.float64), return_index=True)
        lat = d["latency"][idx] * MS
        self._ar = (msg, isotonic(lat))
        self.allreduce_source = src
        self._priced_by("comm", ref)
        self._ar_max_tokens = float(msg[-1] / self.model.hidden_size)
        self._ar_latency_s = float(lat[0])

    def collective_latency_s(self) -> float:
        """The latency each TP all-reduce is charged: the measured table's smallest message, else the roofline's."""
        return self._ar_latency_s if self._ar is not None else self.rf.collective_latency_s()

    def all_reduce(self, tokens: np.ndarray) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.float64)
        if self.replica.tp == 1:
            return np.zeros_like(t)
        if self._ar is None:
            return self.rf.all_reduce(t)
        msg, lat = self._ar
        elems = t * self.model.hidden_size
        out = loglog(msg, lat, np.maximum(elems, 1.0))
        over = elems > msg[-1]
        if over.any():
            edge_tokens = np.array([msg[-1] / self.model.hidden_size])
            out[over] = anchored(lat[-1], self.rf.all_reduce(t[over]), self.rf.all_reduce(edge_tokens))
        return np.where(t > 0, out, 0.0)

    # -- MoE ---------------------------------------------------------------------------------------------
    def _load_moe(self) -> None:
        self._moe = None
        self.moe_source: str | None = None  # the kernel and dtype of the rows pricing the experts (None: the roofline)
        self.moe_dtype: str | None = None
        self._moe_low: tuple[np.ndarray, np.ndarray] | None = None
        self._moe_token_scale = 1
        self._moe_max_tokens = math.inf
        self._rf_even: RooflineCostModel | None = None  # the roofline at --moe-imbalance 1 (_moe_experts)
        self._moe_named: str | None = None  # the kernel --moe-kernel named, where it did
        m, r = self.model, self.replica
        if not m.is_moe:
            return
        ref = T.find_table(self.system, self.backend, "moe", self.root)
        candidates = moe_candidates(r.dtype, self.backend, self.gpu)
        dtype = candidates[0]
        if ref is None:
            self._lack("moe_experts", "no MoE table")
            return
        # The MoE group: tp GPUs, or tp x attention_dp with attention data parallelism (whose ranks'
        # tokens all enter each MoE layer: AIC's num_tokens is per-rank tokens x attention_dp).
        self._moe_token_scale = getattr(r, "attention_dp", 1)
        moe_tp, moe_ep = getattr(r, "moe_tp", r.tp // r.ep), getattr(r, "moe_ep", r.ep)
        shape = (("hidden_size", "==", m.hidden_size), ("inter_size", "==", m.expert_ffn_size),
                 ("topk", "==", m.num_experts_per_tok), ("num_experts", "==", m.num_experts))
        # Routing as AIConfigurator prices it by default (its ModelConfig's workload_distribution "power_law":
        # the power_law_1.01 rows); the "balanced" rows (every expert given an equal share, so a decode batch
        # touches n x top-k distinct experts) price small batches as if a real router never repeated an expert.
        # On the silicon rows the power-law rows fit better (results/validation/silicon/HISTORY.md: vLLM's
        # held-out TPOT 11.7% -> 9.4%). --moe-imbalance above 1 scales these rows by the roofline's own
        # imbalance effect (_moe_experts): the tables' power_law_1.2 rows record no imbalance a flag could name.
        dist = MOE_ROUTING
        cols = ("num_tokens", "moe_tp_size", "moe_ep_size", "distribution", "latency")
        src, d, notes = None, {}, ()
        own_ref = ref
        at = {"moe_tp_size": moe_tp, "moe_ep_size": moe_ep}
        named = self._named_moe_kernel(ref, candidates, shape, at)
        for candidate in (candidates if named is None else named[:1]):
            src, d, read, notes = T.read_priced_rows(ref if named is None else named[2], candidate, cols, shape,
                                                     self.root, at=at, source=None if named is None else named[1])
            if named is not None and named[2].system != self.system:
                notes = (f"{self.backend} tables of {self.system}: {candidate} moe priced by {named[2].system} "
                         f"{named[2].backend} {named[2].version}'s {src} rows (--moe-kernel {r.moe_kernel}: the "
                         f"same die, whose {named[2].backend} collector timed it and this system's did not)",)
            elif named is not None and named[2] is not ref:
                notes = (f"{self.backend} tables of {self.system}: {candidate} moe priced by {named[2].backend} "
                         f"{named[2].version}'s {src} rows (--moe-kernel {r.moe_kernel}: a kernel the engines "
                         f"share, which the {self.backend} collector did not time)",)
            if src is not None:
                ref = read
                if candidate != dtype:
                    self.notes.append(f"{self.backend} tables of {self.system} have no {dtype} MoE rows for "
                                      f"{m.name}: its experts priced by the {candidate} kernel")
                dtype = candidate
                break
        if src is None:
            have = T.read_table(ref, ("moe_dtype",), shape)["moe_dtype"]
            have = ", ".join(sorted(set(have.astype(str).tolist()))) if have is not None and len(have) else "none"
            self._lack("moe_experts", f"no MoE rows for {m.name}'s expert shape in dtype {dtype} (that shape has: {have})")
            return

        def split(rows: dict[str, Any]) -> dict[str, Any]:
            keep = ((rows["moe_tp_size"] == moe_tp) & (rows["moe_ep_size"] == moe_ep)
                    & (rows["distribution"].astype(str) == dist))
            return {"num_tokens": rows["num_tokens"][keep], "latency": rows["latency"][keep]}

        d = split(d)
        if len(d["latency"]) < 2 and named is None:
            # The kernel priced (a lane donor's, or the one the collector swept widest) was not timed at this split:
            # its kernel does not take the slice (FlashInfer's TensorRT-LLM bf16 experts want a multiple of 128
            # columns) or the engine runs another kernel there (vLLM's block-FP8 experts on H100: FlashInfer CUTLASS
            # under EP, Triton at EP 1, and the collector times what the engine picks). The lane's own kernel that
            # was timed at the split prices it: the one swept widest where it was, else the one with the most rows
            # there (ties by name).
            widest = T.pick_source(own_ref, dtype, shape)
            best: tuple[int, str, dict[str, Any]] | None = None
            for name in T.kernel_sources(own_ref, dtype, shape):
                if ref is own_ref and name == src:
                    continue  # the rows just found wanting
                # (as the lane's rows are read: warm-in-L2 rows held to the kernel's sustained bandwidth)
                own_src, own, _, _ = T.read_priced_rows(own_ref, dtype, cols, shape, self.root, at=at, source=name)
                n = len((own := split(own))["latency"]) if own_src is not None else 0
                if n >= 2 and (best is None or name == widest or (n > best[0] and best[1] != widest)):
                    best = (n, name, own)
            if best is not None:
                why = ("the lane's donor has none there" if ref is not own_ref
                       else f"its {src} rows, the kernel timed over the most shapes, have none there: the engine runs "
                            f"another kernel at this layout")
                src, d, ref = best[1], best[2], own_ref
                notes = (f"{self.backend} tables of {self.system}: {dtype} MoE at moe_tp={moe_tp} x moe_ep={moe_ep} "
                         f"priced by its own {src} rows ({why})",)
        self.notes.extend(notes)
        if len(d["latency"]) < 2 and named is not None:
            raise ConfigError("replica.moe_kernel", f"{ref.backend} tables of {ref.system} time {src} for "
                              f"{m.name}'s experts, but not at moe_tp={moe_tp} x moe_ep={moe_ep}",
                              "use --moe-kernel auto, or a layout that kernel was timed at")
        if len(d["latency"]) < 2:
            self._lack("moe_experts", f"no MoE rows for moe_tp={moe_tp} x moe_ep={moe_ep} ({dist}, {dtype})")
            return
        toks, idx = np.unique(d["num_tokens"].astype(np.float64), return_index=True)
        self._moe = (toks, isotonic(d["latency"][idx] * MS))
        self.moe_source, self.moe_dtype = src, dtype
        self._priced_by("moe", ref)
        self._moe_max_tokens = float(toks[-1]) / self._moe_token_scale
        if named is not None:
            self.moe_source = f"{src} (--moe-kernel {r.moe_kernel})"
            self._moe_named = src
        elif self.backend == "trtllm" and dtype == "nvfp4" and src != MOE_LOW_LATENCY_SOURCE:
            self._load_moe_low(ref, src, shape, dtype, moe_tp, moe_ep, dist)

    @property
    def named_moe_source(self) -> str | None:
        """The tables' kernel source ``--moe-kernel`` resolved to (a part of a name, e.g. ``deep``, to the kernel
        whose rows price the experts: ``deepgemm``), the default's own where the name is the kernel it prices from
        another collector's rows; None for ``auto`` or a dense model."""
        if self._moe_named is None and self.replica.moe_kernel != "auto" and self.moe_source:
            return self.moe_source.split(" (")[0]  # (the default's source, its label's version dropped)
        return self._moe_named

    def _named_moe_kernel(self, ref: T.TableRef, candidates: tuple[str, ...], shape: tuple[tuple[str, str, Any], ...],
                          at: dict[str, Any]) -> tuple[str, str, T.TableRef] | None:
        """(dtype, kernel source, table) of the rows ``--moe-kernel`` names: in the dtype the default prices (the
        first of ``candidates``, the MoE dtypes the run's format is priced by, that the backend's table ``ref`` has
        rows of), ``ref``'s own rows, else another backend's table of the same GPU (the engines share kernel
        libraries: DeepGEMM, FlashInfer's CUTLASS and TensorRT-LLM kernels, which one collector may time and another
        not), else the same tables of the same die in its other package (:data:`SIBLING_DIE`). None for ``auto``,
        or where the name is the kernel the default prices from another collector's rows (LANE_DONORS). A name is a
        source whole or a part of one (case aside); one that names none, or several in one table, is refused with the
        backend's own. A kernel named prices every step (TensorRT-LLM's NVFP4 switch to
        its min-latency kernel at small batches is the default's, not a named kernel's)."""
        name = self.replica.moe_kernel
        if name == "auto":
            return None
        # the dtype the default prices (its first candidate with rows, a lane donor's included) and its label
        priced, default = next(((c, src) for c in candidates if (src := T.read_priced_rows(
            ref, c, ("num_tokens",), shape, self.root, warm="keep", at=at)[0]) is not None), (None, None))
        dtypes = candidates if priced is None else (priced,)  # (no rows at all: the first another table has)
        sibling = SIBLING_DIE.get(self.system)

        def shared(system: str, dtype: str) -> list[tuple[T.TableRef, list[str]]]:
            """Another backend's rows on ``system``, only of the kernels the engines share (a backend's own are its)."""
            return [(t, [k for k in T.kernel_sources(t, dtype, shape) if any(x in k for x in SHARED_MOE_KERNELS)])
                    for b in T.BACKENDS
                    if b != self.backend and (t := T.find_table(system, b, "moe", self.root)) is not None]

        known: list[str] = []
        for dtype in dtypes:
            own = T.kernel_sources(ref, dtype, shape)
            lent = default if default is not None and default not in own else None  # LANE_DONORS' label
            known += [f"{s} ({dtype})" for s in own] + ([f"{lent} ({dtype}, the default)"] if lent else [])
            lent_source = lent.split(" (")[0] if lent else None
            tables = [(ref, [*own, *([lent_source] if lent_source else [])]), *shared(self.system, dtype)]
            # the same die in its other package, where a collector timed a kernel on one of them only: the backend's
            # own rows there, then the shared kernels of the others
            if sibling and (t := T.find_table(sibling, self.backend, "moe", self.root)) is not None:
                theirs = list(T.kernel_sources(t, dtype, shape))
                tables.append((t, theirs))
                known += [f"{k} ({dtype}, {sibling}'s)" for k in theirs if k not in own]
            tables += shared(sibling, dtype) if sibling else []
            for table, sources in tables:
                hits = [s for s in sources if s.lower() == name] or [s for s in sources if name in s.lower()]
                if table is ref and lent_source is not None and hits == [lent_source]:
                    return None  # the engine's default kernel, another collector's rows of it
                if len(hits) > 1:
                    raise ConfigError("replica.moe_kernel", f"{name!r} names several of the {table.backend} tables' "
                                      f"{dtype} MoE kernels on {table.system}: {', '.join(hits)}",
                                      "give one of them whole")
                if hits:
                    return dtype, hits[0], table
        where = f"{self.system} or {sibling}" if sibling else self.system
        others = [k for k in SHARED_MOE_KERNELS if k not in name]  # (not the one just refused)
        raise ConfigError("replica.moe_kernel", f"no table of {where} times a MoE kernel {name!r} for "
                          f"{self.model.name}'s experts" + (f" in {dtypes[0]}" if len(dtypes) == 1 else ""),
                          f"use auto, one of the {self.backend} tables' "
                          f"({', '.join(dict.fromkeys(known)) or 'none: no MoE rows for its expert shape'})"
                          + (f", or a kernel the engines share that another backend's tables may time at other "
                             f"shapes ({', '.join(others)})" if others else ""))

    def _load_moe_low(self, ref: T.TableRef, src: str, shape: tuple, dtype: str, moe_tp: int, moe_ep: int,
                      dist: str) -> None:
        """TensorRT-LLM's NVFP4 min-latency MoE kernel, up to :data:`MOE_LOW_LATENCY_TOKENS` tokens: this
        system's rows, or where its tables lack them (B300, GB300), its ``src`` rows scaled at each token
        count by the min-latency / ``src`` ratio its generation's donor measured (:data:`MOE_LOW_LATENCY_DONORS`)."""
        def curves(table: T.TableRef) -> dict[str, tuple[np.ndarray, np.ndarray]]:
            cols = ("kernel_source", "num_tokens", "moe_tp_size", "moe_ep_size", "distribution", "latency")
            rows = T.read_table(table, cols, (("moe_dtype", "==", dtype), *shape))
            out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
            if rows["kernel_source"] is None:
                return out
            for name in (MOE_LOW_LATENCY_SOURCE, src):
                keep = ((rows["kernel_source"].astype(str) == name) & (rows["moe_tp_size"] == moe_tp)
                        & (rows["moe_ep_size"] == moe_ep) & (rows["distribution"].astype(str) == dist))
                toks, idx = np.unique(rows["num_tokens"][keep].astype(np.float64), return_index=True)
                if len(toks) >= 2 and toks[0] <= 1.0 and toks[-1] >= MOE_LOW_LATENCY_TOKENS:
                    out[name] = (toks, isotonic(rows["latency"][keep][idx] * MS))
            return out

        label = f"{MOE_LOW_LATENCY_SOURCE} up to {MOE_LOW_LATENCY_TOKENS} tokens"
        own = curves(ref)
        if MOE_LOW_LATENCY_SOURCE in own:
            self._moe_low = own[MOE_LOW_LATENCY_SOURCE]
            self.moe_source = f"{src}, {label}"
            return
        donor_system = MOE_LOW_LATENCY_DONORS.get(self.system)
        donor_ref = T.find_table(donor_system, self.backend, "moe", self.root) if donor_system else None
        donor = curves(donor_ref) if donor_ref is not None else {}
        if len(donor) < 2:
            return
        toks, lat = self._moe
        toks = toks[toks <= MOE_LOW_LATENCY_TOKENS]
        if len(toks) < 2 or toks[-1] < MOE_LOW_LATENCY_TOKENS:
            return
        ratio = loglog(*donor[MOE_LOW_LATENCY_SOURCE], toks) / loglog(*donor[src], toks)
        self._moe_low = (toks, isotonic(lat[: len(toks)] * ratio))
        self.moe_source = f"{src}, {label} (x {donor_system}'s measured ratio)"
        self.notes.append(f"{self.backend} tables of {self.system} have no {MOE_LOW_LATENCY_SOURCE} rows: its NVFP4 "
                          f"experts up to {MOE_LOW_LATENCY_TOKENS} tokens priced by its {src} rows x {donor_system}'s "
                          "min-latency / CUTLASS ratio")

    def _moe_experts(self, t: np.ndarray, roofline_experts: np.ndarray) -> np.ndarray:
        """Per-rank tokens ``t``; the table's tokens are the whole MoE group's (x attention_dp). With
        ``--moe-imbalance`` above 1, the rows (measured at the default routing) times the roofline's price
        with the imbalance over its price without: the busiest expert's extra tokens, as the roofline
        counts them, on the measured kernel."""
        out = self._moe_table_experts(t, roofline_experts)
        if self.replica.moe_imbalance > 1.0:
            if self._rf_even is None:
                from dataclasses import replace

                self._rf_even = RooflineCostModel(replace(self.replica, moe_imbalance=1.0), self.rf.cal, table_tokens=1,
                                                  engine=self.backend, ridge_scale=self.rf.ridge_scale)
            base = moe_token_ops(self._rf_even, t)["moe_experts"]
            out = np.where(base > 0, out * roofline_experts / np.where(base > 0, base, 1.0), out)
        return out

    def _moe_table_experts(self, t: np.ndarray, roofline_experts: np.ndarray) -> np.ndarray:
        toks, lat = self._moe
        scale = self._moe_token_scale
        tt = t * scale
        out = loglog(toks, lat, np.maximum(tt, 1.0))
        over = tt > toks[-1]
        if over.any():
            edge = moe_token_ops(self.rf, toks[-1:] / scale)["moe_experts"]
            out[over] = anchored(lat[-1], roofline_experts[over], edge)
        if self._moe_low is not None:  # the min-latency kernel's steps (measured over all of them)
            small = tt <= MOE_LOW_LATENCY_TOKENS
            out[small] = loglog(*self._moe_low, np.maximum(tt[small], 1.0))
        return np.where(t > 0, out, 0.0)

    # -- attention ---------------------------------------------------------------------------------------
    def _attention_rows(self, table: str, mla: bool, window: int = 0) -> tuple[dict[str, np.ndarray] | None, str]:
        """The rows of ``table`` for this model's per-GPU attention shape (full attention, or the
        sliding-window kernel of ``window`` tokens), or (None, why not)."""
        ref = T.find_table(self.system, self.backend, table, self.root)
        donor = MLA_DONORS.get((self.backend, GENERATION.get(self.gpu.name, ""))) if mla and ref is None else None
        if donor is not None:  # the kernel this backend runs, measured under another's name
            ref = T.find_table(self.system, donor[0], table, self.root)
            if ref is not None:
                self.notes.append(f"{self.backend} tables of {self.system} have no {table} table: "
                                  f"{donor[0]}'s priced it ({donor[1]})")
        if ref is None:
            return None, f"no {table} table"
        if mla:
            flt = (("num_heads", "==", self.heads_per_gpu), ("kv_cache_dtype", "==", self._kv_dtype))
        else:
            flt = (("num_heads", "==", self.heads_per_gpu), ("num_key_value_heads", "==", self.kv_heads_per_gpu),
                   ("head_dim", "==", self.model.head_dim), ("kv_cache_dtype", "==", self._kv_dtype))
        cols = ("batch_size", "isl", "step", "window_size", "latency")
        src, d, ref, notes = T.read_priced_rows(ref, "bfloat16", cols, flt, self.root)
        if src is None:
            shape = (f"{self.heads_per_gpu} heads" if mla else
                     f"{self.heads_per_gpu} heads / {self.kv_heads_per_gpu} KV heads / head dim {self.model.head_dim}")
            return None, f"no {table} rows for {shape} with {self._kv_dtype} KV"
        if d["window_size"] is not None:
            keep = d["window_size"] == window
            d = {k: (v[keep] if isinstance(v, np.ndarray) and v.shape == keep.shape else v) for k, v in d.items()}
        elif window:
            return None, f"no {table} rows with a {window}-token window"
        if window and len(d["latency"]) < 4:
            return None, f"no {table} rows with a {window}-token window"
        self.notes.extend(notes)
        self._priced_by("mla" if mla else "attention", ref)
        return d, src

    def _grid(self, d: dict[str, np.ndarray], decode: bool) -> Grid2D:
        batch = d["batch_size"].astype(np.float64)
        length = d["isl"].astype(np.float64) + (d["step"].astype(np.float64) if decode else 0.0)
        lat = d["latency"] * MS
        rf = self.rf
        if decode:
            def roof(b: float, s: np.ndarray) -> np.ndarray:
                return np.array([rf._attention_decode(float(b) * float(x), int(round(b))) for x in np.atleast_1d(s)])
        else:
            def roof(b: float, s: np.ndarray) -> np.ndarray:
                return np.array([rf._attention_prefill(float(b) * x * (x + 1) / 2, float(b) * x, int(round(b * x)))
                                 for x in np.atleast_1d(s)])
        rows = []
        for b in np.unique(batch):
            sel = batch == b
            xs, idx = np.unique(length[sel], return_index=True)
            rows.append((xs, lat[sel][idx]))
        return Grid2D([float(b) for b in np.unique(batch)], rows, roof)

    def _load_attention(self) -> None:
        """Full-attention grids, and for sliding-window layers the window kernel's own grids
        where measured (else those layers' keys are capped at the window on the full grids)."""
        mla = self.mla
        self._decode_grid = self._prefill_grid = None
        self._window_grids: dict[str, Grid2D] = {}
        for phase in ("generation", "context"):
            table = f"{phase}_mla" if mla else f"{phase}_attention"
            d, why = self._attention_rows(table, mla)
            op = "attn_decode" if phase == "generation" else "attn_prefill"
            if d is None or len(d["latency"]) < 4:
                self._lack(op, why if d is None else f"too few {table} rows")
                continue
            grid = self._grid(d, decode=phase == "generation")
            if phase == "generation":
                self._decode_grid, self.decode_source = grid, why
            else:
                self._prefill_grid, self.prefill_source = grid, why
            if self.sliding_fraction and not mla:
                dw, _ = self._attention_rows(table, mla, window=self.sliding_window)
                if dw is not None:
                    self._window_grids[phase] = self._grid(dw, decode=phase == "generation")

    def _prefill_row(self, b: int, window: bool = False) -> tuple[list[float], list[float], list[float], float, float]:
        """Prefill attention of ``b`` sequences over the grid's prompt lengths (linear between
        measured batch sizes, :meth:`Grid2D.row`), as plain lists for the per-iteration lookup:
        (log lengths, log latencies, latencies, largest measured length, largest length)."""
        row = self._prefill_rows.get((b, window))
        if row is None:
            g = self._window_grids["context"] if window else self._prefill_grid
            vals, limit, beyond = g.row(float(b))
            vals = isotonic(vals)
            row = self._prefill_rows[b, window] = (g.lb.tolist(), np.log(vals).tolist(), vals.tolist(),
                                                   0.0 if beyond else limit, float(g.b[-1]))
        return row

    def _prefill_one(self, pairs: float, num_prefills: int, num_tokens: int, kv_tokens: float,
                     window: bool = False) -> float:
        if self._prefill_grid is None:
            return self.rf._attention_prefill(pairs, kv_tokens, num_tokens)
        # the prompt length whose causal pairs, num_prefills times, are the batch's
        isl = (math.sqrt(1.0 + 8.0 * pairs / num_prefills) - 1.0) / 2.0
        lx, ly, ys, limit, top = self._prefill_row(num_prefills, window)
        if isl > limit:
            self._count("attn_prefill")
        if isl >= top:  # past the grid: the last length scaled by the roofline
            b = num_prefills
            edge = self.rf._attention_prefill(b * top * (top + 1) / 2, b * top, int(b * top))
            return ys[-1] * self.rf._attention_prefill(pairs, num_prefills * isl, int(num_prefills * isl)) / edge
        return loglog_scalar(lx, ly, ys, isl)

    def _chunk_pairs(self, chunk: int, kv_before: int, num_iterations: int) -> tuple[list[float], list[float] | None]:
        """The causal pairs :meth:`_prefill_one` gets for a prompt's successive chunks (one a step: a
        ``chunk``-token chunk over ``kv_before`` cached tokens, then ``chunk`` more each step), summed as
        :meth:`BatchShape.add_prefill` sums them, then for sliding-window layers priced on the full rows
        (no window kernel in the tables) their pairs capped at the window (:meth:`attention_prefill`'s
        arguments), else None. Both non-decreasing step by step."""
        half = chunk * (chunk + 1) / 2
        full = [chunk * p + half for p in range(kv_before, kv_before + chunk * num_iterations, chunk)]
        if self.rf.sparse:  # DSA: every query's keys capped at index_topk, on these rows alone (attention_prefill)
            cap = chunk * self.sliding_window
            return [min(pairs, cap) for pairs in full], None
        if not self.sliding_fraction or "context" in self._window_grids:
            return full, None
        cap = chunk * self.sliding_window
        return full, [min(pairs, cap) for pairs in full]

    def _prefill_series(self, pairs_list: list[float], window: bool) -> list[float]:
        """:meth:`_prefill_one` of one sequence at each of ``pairs_list`` (grid ``window``), in its
        function calls and float operations, counting nothing."""
        lx, ly, ys, _, top = self._prefill_row(1, window)
        rf_prefill, b, edge, sqrt = self.rf._attention_prefill, 1, None, math.sqrt
        out = []
        for pairs in pairs_list:
            isl = (sqrt(1.0 + 8.0 * pairs / 1) - 1.0) / 2.0
            if isl >= top:  # past the grid: the last length scaled by the roofline
                if edge is None:
                    edge = rf_prefill(b * top * (top + 1) / 2, b * top, int(b * top))
                out.append(ys[-1] * rf_prefill(pairs, b * isl, int(b * isl)) / edge)
            else:
                out.append(loglog_scalar(lx, ly, ys, isl))
        return out

    def prefill_attention_list(self, chunk: int, kv_before: int, num_iterations: int) -> list[float] | None:
        """:meth:`attention_prefill` of a prompt's successive chunks: a ``chunk``-token chunk over
        ``kv_before`` cached tokens, then ``chunk`` more each step (as
        :meth:`~simulator.costmodel.roofline.RooflineCostModel.prefill_attention_list`). Element by
        element :meth:`_prefill_one`'s function calls and float operations for one sequence (twice
        with sliding-window layers, combined as there), so each is that step's price bit for bit;
        counts nothing (:meth:`count_chunk_stretch` does). None without a prefill grid (``chunk_terms_ok``)."""
        if not self.chunk_terms_ok:
            return None
        full, capped = self._chunk_pairs(chunk, kv_before, num_iterations)
        out = self._prefill_series(full, False)
        if self.sliding_fraction and not self.rf.sparse:  # window layers: the window kernel, or keys capped at it
            local = self._prefill_series(full, True) if capped is None else self._prefill_series(capped, False)
            frac = self.sliding_fraction
            out = [t + frac * (loc - t) for t, loc in zip(out, local, strict=True)]
        if self.rf.sparse:  # attention_prefill's indexer, over one chunk's every causal pair, keys and queries
            indexer, half = self.rf.indexer_time, chunk * (chunk + 1) / 2
            out = [t + indexer(chunk * p + half, p + chunk, chunk)
                   for t, p in zip(out, range(kv_before, kv_before + chunk * num_iterations, chunk), strict=True)]
        return out

    def count_chunk_stretch(self, num_decodes: int, kv_max: int, chunk: int, kv_before: int,
                            num_iterations: int) -> None:
        """Count the extrapolations the scalar path would over a chunk stretch
        (:meth:`CostModel.chunk_stretch_times`'s steps, which a fast path prices quietly): per step
        the token ops past the measured tokens, the chunk's prompt length past the measured lengths
        (on the window kernel's or the capped rows too, with sliding-window layers), a decode past
        the measured KV lengths, an LM head of a shape no table measured (the decodes' logits); each
        op first counted where stepping would first count it (the per-op dict keeps the same order)."""
        m, counts = num_iterations, []
        if num_decodes + chunk > self._max_tokens:
            counts.append((0, 0, "token_ops", m))
        full, capped = self._chunk_pairs(chunk, kv_before, m)
        sqrt, overs = math.sqrt, []
        series = [(full, False)]
        if self.sliding_fraction and not self.rf.sparse:
            series.append((full, True) if capped is None else (capped, False))
        for pairs_list, window in series:
            limit = self._prefill_row(1, window)[3]
            if (sqrt(1.0 + 8.0 * pairs_list[-1] / 1) - 1.0) / 2.0 > limit:  # the last step's is the longest
                overs += [i for i, pairs in enumerate(pairs_list) if (sqrt(1.0 + 8.0 * pairs / 1) - 1.0) / 2.0 > limit]
        if overs:
            counts.append((min(overs), 1, "attn_prefill", len(overs)))
        if num_decodes:
            dlimit = self._decode_curve(num_decodes)[3]
            first = m if math.isinf(dlimit) else (0 if kv_max > dlimit else min(m, int(math.floor(dlimit)) - kv_max + 1))
            if first < m:
                counts.append((first, 2, "attn_decode", m - first))
            if self._wide_lm_head:  # the decodes' logits (the chunk does not end its prompt)
                counts.append((0, 3, "lm_head", m))
        for _, _, op, k in sorted(counts):
            self._count(op, k)

    def attention_prefill(self, shape: BatchShape) -> float:
        if shape.num_prefills == 0:
            return 0.0
        if self.rf.sparse:  # DSA: every query's keys capped at index_topk (its indexer's picks), then the indexer
            w = self.sliding_window
            t = self._prefill_one(min(shape.prefill_attn_pairs, shape.num_prefill_tokens * w), shape.num_prefills,
                                  shape.num_prefill_tokens,
                                  min(shape.prefill_kv_tokens, shape.num_prefill_tokens + shape.num_prefills * w))
            return t + self.rf.indexer_time(shape.prefill_attn_pairs, shape.prefill_kv_tokens, shape.num_prefill_tokens)
        t = self._prefill_one(shape.prefill_attn_pairs, shape.num_prefills, shape.num_prefill_tokens,
                              shape.prefill_kv_tokens)
        if self.sliding_fraction:  # window layers: the window kernel, or each query's keys capped at the window
            if "context" in self._window_grids:
                local = self._prefill_one(shape.prefill_attn_pairs, shape.num_prefills, shape.num_prefill_tokens,
                                          shape.prefill_kv_tokens, window=True)
            else:
                w = self.sliding_window
                local = self._prefill_one(min(shape.prefill_attn_pairs, shape.num_prefill_tokens * w),
                                          shape.num_prefills, shape.num_prefill_tokens,
                                          min(shape.prefill_kv_tokens, shape.num_prefill_tokens + shape.num_prefills * w))
            t += self.sliding_fraction * (local - t)
        if self.linear_fraction:  # a hybrid's linear layers run their recurrence instead
            t += self.linear_fraction * (linear_attention_time(self.rf, shape.num_prefill_tokens, shape.num_prefills) - t)
        return t

    def decode_attention_curve(self, n: int) -> tuple[list[float], list[float], list[float]]:
        """Decode attention of ``n`` sequences as a piecewise-linear function of their total KV
        tokens ``x``: ``f(x) = fs[j] + (x - xs[j]) * slopes[j]`` with ``j = bisect_right(xs, x) - 1``
        (``xs[0] = 0``). The scalar path evaluates exactly this; a stretch pricer may too."""
        c = self._decode_curve(n)
        return c[0], c[1], c[2]

    def _decode_curve(self, n: int) -> tuple[list[float], list[float], list[float], float]:
        """(knots, values, slopes, limit) of ``n`` decodes' attention, built once per ``n``."""
        c = self._decode_curves.get(n)
        if c is None:
            c = self._decode_curves[n] = self._build_decode_curve(n)
        return c

    def _curve(self, grid: Grid2D | None, n: int) -> tuple[list[float], list[float], list[float], float]:
        """(knots, values, slopes, largest measured KV length) of ``n`` decodes from ``grid``
        (the roofline's own curve where None)."""
        rf = self.rf
        if grid is None:  # roofline: linear in KV tokens for plain attention; sampled otherwise
            s = np.unique(np.r_[np.geomspace(1, 1 << 21, 43).round(), 1 << 22])
            vals, limit = np.array([rf._attention_decode(float(n * x), n) for x in s]), math.inf
        else:
            s = grid.b
            vals, limit, beyond = grid.row(float(n))
            if beyond:
                limit = 0.0
        vals = isotonic(np.asarray(vals, dtype=np.float64))
        xs = [0.0, *(float(n) * s).tolist()]
        fs = [float(vals[0]), *vals.tolist()]
        # Past the last knot: the roofline's slope, scaled to meet the last value.
        edge, more = rf._attention_decode(xs[-1], n), rf._attention_decode(2 * xs[-1], n)
        last_slope = fs[-1] * (more - edge) / edge / xs[-1] if edge > 0 else 0.0
        slopes = [(fs[j + 1] - fs[j]) / (xs[j + 1] - xs[j]) if xs[j + 1] > xs[j] else 0.0 for j in range(len(xs) - 1)]
        slopes.append(last_slope)
        return xs, fs, slopes, limit

    def _build_decode_curve(self, n: int) -> tuple[list[float], list[float], list[float], float]:
        xs, fs, slopes, limit = self._window_curve(n)
        if self.linear_fraction:  # a hybrid: its linear layers' recurrence does not depend on the KV tokens
            frac, g = self.linear_fraction, linear_attention_time(self.rf, n, n)
            fs = [f + frac * (g - f) for f in fs]
            slopes = [(1.0 - frac) * slope for slope in slopes]
        if self.rf.sparse:  # DSA's indexer scores every key: a line in them (its read, RooflineCostModel.indexer_time)
            at_zero, per_key = self.rf.indexer_time(0.0, 0.0, n), self.rf.indexer_time(1.0, 1.0, n)
            fs = [f + self.rf.indexer_time(x, x, n) for f, x in zip(fs, xs, strict=True)]
            slopes = [slope + (per_key - at_zero) for slope in slopes]
            if limit >= self.sliding_window:  # the rows are read at index_topk keys a sequence at most
                limit = math.inf
        return xs, fs, slopes, limit

    def _window_curve(self, n: int) -> tuple[list[float], list[float], list[float], float]:
        """The full-attention layers' decode curve, with sliding-window layers mixed in where the model has them."""
        xs, fs, slopes, limit = self._curve(self._decode_grid, n)
        if not self.sliding_fraction:
            return xs, fs, slopes, limit

        def at(curve: tuple, x: float) -> float:
            j = bisect_right(curve[0], x) - 1
            return curve[1][j] + (x - curve[0][j]) * curve[2][j]

        # f + frac * (local - f), local the window kernel's curve where measured, else f(min(x, n w)):
        # piecewise linear on the union of both curves' knots.
        full, frac = (xs, fs, slopes), self.sliding_fraction
        if "generation" in self._window_grids:
            window = self._curve(self._window_grids["generation"], n)
            local_knots, local_last = window[0], window[2][-1]

            def local(x: float) -> float:
                return at(window, x)
        else:
            cap = float(n * self.sliding_window)
            local_knots, local_last = [cap], 0.0

            def local(x: float) -> float:
                return at(full, min(x, cap))
        knots = sorted(set(xs) | set(local_knots))
        vals = []
        for x in knots:
            f = at(full, x)
            vals.append(f + frac * (local(x) - f))
        new_slopes = [(vals[j + 1] - vals[j]) / (knots[j + 1] - knots[j]) for j in range(len(knots) - 1)]
        last = slopes[-1] if knots[-1] <= xs[-1] else at(full, knots[-1] + 1.0) - at(full, knots[-1])
        new_slopes.append(last + frac * (local_last - last))
        return knots, vals, new_slopes, limit

    def attention_decode(self, shape: BatchShape) -> float:
        n = shape.num_decodes
        if n == 0:
            return 0.0
        xs, fs, slopes, limit = self._decode_curves.get(n) or self._decode_curve(n)  # per step: no call when cached
        x = shape.decode_kv_tokens
        j = bisect_right(xs, x) - 1
        if shape.decode_max_kv > limit and not self._quiet:
            self._count("attn_decode")
        return fs[j] + (x - xs[j]) * slopes[j]

    def attention_decode_vector(self, n: int, kv_sums: np.ndarray, kv_sq_sums: np.ndarray,
                                kv_maxes: np.ndarray) -> np.ndarray:
        """:meth:`attention_decode` for many decode batches of ``n`` sequences, same float ops."""
        xs, fs, slopes = (np.asarray(v) for v in self.decode_attention_curve(n))
        j = np.searchsorted(xs, kv_sums, side="right") - 1
        return fs[j] + (kv_sums - xs[j]) * slopes[j]

    def count_stretch(self, n: int, kv_max: int, num_iterations: int) -> None:
        """Count the extrapolations the scalar path would over a decode stretch (a fast path
        prices the stretch quietly): iteration ``i`` has a sequence of ``kv_max + i`` tokens. Each
        op first counted where stepping would first count it (token ops, decode attention, LM head
        in an iteration), so the per-op dict keeps the same order."""
        limit = self._decode_curve(n)[3]
        if math.isinf(limit):  # no table edge (a sliding window caps the KV read): never an extrapolation
            first_over = num_iterations
        else:
            first_over = 0 if kv_max > limit else min(num_iterations, int(math.floor(limit)) - kv_max + 1)
        counts = [(first_over, 1, "attn_decode", num_iterations - first_over)]
        if n > self._max_tokens:
            counts.append((0, 0, "token_ops", num_iterations))
        if n and self._wide_lm_head:
            counts.append((0, 2, "lm_head", num_iterations))
        for _, _, op, k in sorted(counts):
            self._count(op, k)

    def decode_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int,
                             num_iterations: int) -> list[float]:
        if type(self) is TableCostModel and num_iterations > 1 and num_decodes > 0:
            times = self._vector_stretch(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations,
                                         self.attention_decode_vector)
            if times is not None:
                self.count_stretch(num_decodes, kv_max, num_iterations)
                return times
        return super().decode_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations)

    # -- the token-count ops -----------------------------------------------------------------------------
    def token_ops(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        m, db = self.model, self.dtype_bytes
        t = np.asarray(tokens, dtype=np.float64)
        h = m.hidden_size
        up_width = (2 if m.gated_mlp else 1) * self.ffn_per_gpu
        num_all_reduce = 1 if m.parallel_attn_mlp else 2
        num_norms = 1 if m.parallel_attn_mlp else 2
        dense = self.dense_fraction
        # As the roofline: EP (or attention-DP) layers swap the MLP all-reduce for all-to-alls (or a
        # gather and scatter), which ep_all_to_all below prices.
        if m.is_moe and uses_moe_collectives(self.replica):
            num_all_reduce -= 1.0 - dense
        if m.is_mla:
            qkv, out_proj = mla_projections(self, t)
        else:
            gate = self.q_per_gpu if m.attn_output_gate else 0  # gated attention: q_proj also emits the gate
            qkv = self.attn_gemm(t, h, self.q_per_gpu + gate + 2 * self.kv_per_gpu)
            out_proj = self.attn_gemm(t, self.q_per_gpu, h)
        zero = np.zeros_like(t)
        ops = {
            "qkv_proj": qkv,
            "attn_out_proj": out_proj,
            "mlp_up_gate": self.gemm(t, h, up_width),
            "mlp_act": self.elementwise(t, (up_width + self.ffn_per_gpu) * db),
            "mlp_down": self.gemm(t, self.ffn_per_gpu, h),
            # residual add fused into the norm: read x and the residual, write both
            "norms": self.elementwise(t, num_norms * 4 * h * db, kernels=num_norms),
            "rotary": (self.elementwise(t, 2 * (self.q_per_gpu + self.kv_per_gpu) * db)
                       if m.rotary and SEPARATE_ROTARY[self.backend] else zero),
            "residual_add": zero,
            "tp_all_reduce": num_all_reduce * self.all_reduce(t),
        }
        if m.is_moe:
            for op in ("mlp_up_gate", "mlp_act", "mlp_down"):
                ops[op] = dense * ops[op]
            rf_ops = moe_token_ops(self.rf, t)
            k = 2 if m.gated_mlp else 1
            shared_width = m.num_shared_experts * (m.shared_expert_ffn_size or m.expert_ffn_size) // self.replica.tp
            moe = {
                "moe_router": np.where(t > 0, self.gemm16(t, h, m.num_experts), 0.0),  # 16-bit in every checkpoint
                "moe_experts": self._moe_experts(t, rf_ops["moe_experts"]) if self._moe is not None
                else rf_ops["moe_experts"],
                # the fused MoE kernels measured include the activation (and routing/permutation)
                "moe_act": zero if self._moe is not None else rf_ops["moe_act"],
                "moe_shared_experts": (self.gemm(t, h, k * shared_width) + self.gemm(t, shared_width, h)
                                       + self.elementwise(t, (k + 1) * shared_width * db)) if shared_width else zero,
                "ep_all_to_all": rf_ops["ep_all_to_all"],
            }
            for op, value in moe.items():
                ops[op] = (1.0 - dense) * value
        if self.linear_fraction:  # a hybrid: its Gated DeltaNet layers' projections (from the GEMM tables)
            hybrid_token_ops(self, t, ops)
        return ops

    def layer_time(self, shape: BatchShape) -> float:
        if shape.num_prefill_tokens + shape.num_decodes > self._max_tokens and not self._quiet:
            self._count("token_ops")
        return TabulatedCostModel.layer_time(self, shape)

    def post_time(self, shape: BatchShape) -> float:
        if self._wide_lm_head and shape.num_logits:  # an LM head shape no table measured (_count: not while quiet)
            self._count("lm_head")
        return TabulatedCostModel.post_time(self, shape)

    def embedding_time(self, tokens: np.ndarray) -> np.ndarray:
        return self.elementwise(tokens, 2 * self.model.hidden_size * self.dtype_bytes)

    def lm_head_time(self, num_logits: np.ndarray) -> np.ndarray:
        m, n = self.model, np.asarray(num_logits, dtype=np.float64)
        lm_head = self.gemm16(n, m.hidden_size, m.vocab_size // self.replica.tp)
        gather = self.rf.logits_gather(n)
        norm = self.elementwise(n, 2 * m.hidden_size * self.dtype_bytes)
        return np.where(n > 0, lm_head + gather + norm, 0.0)

    def overhead_time(self, shape: BatchShape) -> float:
        return self.rf.overhead_time(shape)

    def send_recv_time(self, num_tokens: int, hop: int | None = None) -> float:
        return self.rf.send_recv_time(num_tokens, hop)

    def _priced_by(self, family: str, ref: T.TableRef) -> None:
        """Record the table whose rows price ``family``: its version, and where it is another system's or
        backend's (a lane donor, vLLM's MLA by TensorRT-LLM's), whose (``borrowed``, said in :meth:`describe`)."""
        self.versions[family] = ref.version if ref.backend == self.backend else f"{ref.backend} {ref.version}"
        if ref.system != self.system or ref.backend != self.backend:
            where = f"{ref.system} " if ref.system != self.system else ""
            self.borrowed[family] = f"{where}{ref.backend} {ref.version}"

    def roofline_breakdown_ops(self) -> dict[str, str]:
        """The :meth:`breakdown` ops the roofline prices, each ``"roofline"`` (all of it) or ``"tables + roofline"``
        (some of its layers: a hybrid's linear ones); the others are the tables'. ``roofline_ops`` names families
        (``gemm``: every GEMM the run's dtype prices; ``gemm16``: the LM head and the router gate, and a 4-bit MoE
        checkpoint's attention projections); this names the ops they price."""
        attn, head = ("gemm16" if self._attn_16 else "gemm"), ("gemm16" if self._head_16 else "gemm")
        linear = ("linear_attn",) if self.linear_fraction else ()
        priced = {  # op -> the families pricing its parts (a hybrid's linear layers: plain GEMMs, the recurrence)
            "qkv_proj": (attn, *("gemm" for _ in linear)), "attn_out_proj": (attn, *("gemm" for _ in linear)),
            "moe_router": (head,), "mlp_up_gate": ("gemm",), "mlp_down": ("gemm",), "moe_shared_experts": ("gemm",),
            "lm_head_sampling": (head,), "moe_experts": ("moe_experts",), "moe_act": ("moe_experts",),
            "attn_prefill": ("attn_prefill", *linear), "attn_decode": ("attn_decode", *linear),
            "tp_all_reduce": ("tp_all_reduce",), "ep_all_to_all": ("ep_all_to_all",)}
        by_roofline = {*self.roofline_ops, *self.ROOFLINE_ALWAYS}
        out = {}
        for op, families in priced.items():
            share = sum(f in by_roofline for f in families)
            if share:
                out[op] = "roofline" if share == len(families) else "tables + roofline"
        return out

    def describe(self) -> str:
        """One line: which tables priced this model (only the families whose rows price some op of it: no
        all-reduce table at TP1, no attention table where the MLA tables or the roofline price attention), which
        families another collector's rows priced, and what the roofline priced (for lack of rows, or always)."""
        own: dict[str, list[str]] = {}
        for family, version in self.versions.items():
            if family not in self.borrowed:
                own.setdefault(version, []).append(family)
        if len(own) == 1:
            head = f"{self.backend} {next(iter(own))} tables of {self.system} (AIConfigurator)"
        else:
            parts = "".join(f"{', ' if i else ': '}{'/'.join(fams)} {v}" for i, (v, fams) in enumerate(own.items()))
            head = f"{self.backend} tables of {self.system} (AIConfigurator){parts}"
        lent = "".join(f"; {family} by {who}'s rows" for family, who in self.borrowed.items())
        ops = list(dict.fromkeys(self.roofline_ops))
        if self.model.is_moe and uses_moe_collectives(self.replica):  # ROOFLINE_ALWAYS: ep_all_to_all is not 0
            ops += [op for op in self.ROOFLINE_ALWAYS if op not in ops]
        extra = f"; roofline only for {', '.join(ops)}" if ops else ""
        named = f"; moe kernel {self._moe_named} (--moe-kernel)" if self._moe_named else ""
        return f"{head}{lent}{named}{extra}"


@functools.lru_cache(maxsize=32)
def _loaded(replica: ReplicaConfig, backend: str) -> TableCostModel:
    return TableCostModel(replica, backend)


def table_cost_model(replica: ReplicaConfig, backend: str) -> TableCostModel:
    """A run's table model for ``replica``: the tables are read and indexed once per process per
    (replica, backend) (every attention-DP rank and every run of a sweep shares them), each call a
    copy with its own extrapolation counters. The memos it fills as it prices (curves per batch,
    the per-token tables) are pure functions of their keys, so sharing them changes no figure."""
    model = copy.copy(_loaded(replica, backend))
    model.num_extrapolations = 0
    model.extrapolations_by_op = {}
    return model
