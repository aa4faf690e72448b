"""Efficiency constants of the roofline cost model, in one place.

The roofline prices an op as ``max(flops / (peak * eff_c), bytes / (bw * eff_m)) + floor``.
Peak and bandwidth come from the GPU's spec sheet (:mod:`simulator.config.catalog`); the
factors below say how much of it real kernels reach. Compute efficiency of a GEMM
rises with the number of tokens (rows) until the tensor cores are saturated:
``eff_c(T) = gemm_compute_eff * T / (T + gemm_half_tokens)``.

``DEFAULT`` holds hand-set values typical of cuBLAS/FlashAttention on A100/H100 class
parts; GPUs missing from ``BY_GPU`` (L40S) use them. ``BY_GPU`` holds constants fitted
to the public measured profiles in ``../shared/data/profiles`` (Vidur's A100/A40/H100
``mlp.csv`` linear-layer tables, its A100 attention table and NCCL tables): each entry
names its tables in ``source``. The block between the BEGIN/END markers is written by
``simulate calibrate --write`` (:mod:`simulator.calibrate.fit_calibration`, which
documents the fit); do not edit it by hand. ``results/fidelity/`` reports how close the
calibrated roofline comes to the measurements. ``TODAY`` (``--roofline-calibration today``) is
read from ``simulator/data/roofline_today.json``, which its fit writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

# Weight format (simulator.config.precision) -> the lane of kernels one efficiency curve describes (GEMMs
# and MoE experts); a lane a calibration has no curve for takes LANE_FALLBACK's, else the bf16 one.
# MXFP4 has a lane per activation format (precision.kernel_format resolves a run's ``mxfp4``): ``mxfp4`` holds the
# w4a16 kernels (weight-only, falling back to int4's curve), ``mxfp4_w4a8`` the MXFP8-activation ones (fp8's).
GEMM_CLASS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8-block": "fp8_block", "nvfp4": "fp4", "mxfp4": "mxfp4",
              "mxfp4-w4a16": "mxfp4", "mxfp4-w4a8": "mxfp4_w4a8", "int4": "int4"}
LANE_FALLBACK = {"fp8_block": "fp8", "mxfp4": "int4", "mxfp4_w4a8": "fp8"}


@dataclass(frozen=True)
class RooflineCalibration:
    """Efficiency factors and fixed latencies for one GPU. Times in seconds."""

    gemm_compute_eff: float = 0.80  # asymptotic fraction of dense bf16 peak for large GEMMs
    gemm_half_tokens: float = 48.0  # tokens at which a GEMM reaches half its asymptotic efficiency
    gemm_memory_eff: float = 0.80  # fraction of HBM bandwidth when a GEMM is weight-read bound
    attn_prefill_compute_eff: float = 0.55  # FlashAttention forward, fraction of peak
    attn_decode_memory_eff: float = 0.60  # paged decode attention, fraction of HBM bandwidth
    attn_decode_per_seq_s: float = 0.4e-6  # per-sequence cost of a decode kernel (block tables, splits)
    elementwise_memory_eff: float = 0.55  # norms, activations, rotary
    residual_add_memory_eff: float = 0.55  # residual adds (plain streaming adds reach more than norms do)
    embedding_memory_eff: float = 0.55  # embedding gather (vocab-parallel: masking and gather, below streaming)
    kernel_floor_s: float = 4e-6  # smallest time any kernel takes (launch + tail)
    allreduce_latency_s: float = 12e-6  # NCCL all-reduce fixed cost per call
    allreduce_bus_eff: float = 0.75  # fraction of link bandwidth a ring all-reduce reaches
    allreduce_gpu_latency_s: float = 0.0  # fixed cost per GPU of the TP group beyond two ("today" only)
    # Fixed cost of one NCCL send/recv between GPUs of a node (a pipeline hop), fitted to small messages of a
    # measured send_recv table; None: the intra-node link's own constant (simulator.config.topology).
    send_recv_latency_s: float | None = None
    cpu_overhead_s: float = 1.5e-3  # per iteration: scheduling, input prep, sampling launch
    cpu_overhead_per_seq_s: float = 25e-6  # per request in the batch
    # Terms only the "today" calibration sets (None / 0: absent, and the 2023 prices bit for bit).
    attn_floor_s: float | None = None  # smallest attention kernel (None: kernel_floor_s)
    attn_prefill_half_keys: float = 0.0  # keys per query at which prefill attention reaches half its efficiency
    # Per sequence and query head of a prefill attention kernel (its per-(sequence, head) tiles and their
    # scheduling: a batch of many short prompts costs far more than its FLOPs), seconds.
    attn_prefill_per_head_s: float = 0.0
    mla_compute_eff: float | None = None  # MLA attention's fraction of the bf16 peak (None: attn_prefill_compute_eff)
    # Decode attention's own fixed cost and its costs per (sequence, KV head) and per (sequence, query head): a
    # decode kernel's work items are (sequence, KV head) tiles with their split-KV partials and per-query-head
    # reductions; for a model these fold into one per-sequence constant (RooflineCostModel.decode_seq_s), so the
    # decode closed forms keep their shape. None / 0: the 2023 form (attn_floor, attn_decode_per_seq_s only).
    attn_decode_floor_s: float | None = None
    attn_decode_per_kv_head_s: float = 0.0
    attn_decode_per_head_s: float = 0.0
    # Whether a decode kernel's work items overlap its KV reads: the larger of the KV read time and the
    # per-sequence costs, then the floor; False: their sum (every 2023 calibration, bit for bit). The 'today' fit
    # chooses per generation and backend (roofline_from_tables.FORMS): Ampere's and Blackwell's kernels overlap,
    # most of Hopper's sum.
    attn_decode_overlap: bool = False
    # MLA's own prefill and decode constants ("today"; simulator.costmodel.moe). Prefill (non-absorbed):
    # ``mla_up_compute_eff`` set switches to the two-part form: the attention pairs at ``mla_compute_eff``
    # ramped by keys per query (``mla_prefill_half_keys``), the kv_b up-projection of the context at its own
    # efficiency, a cost per (sequence, head) and its own floor. Decode (absorbed): ``mla_decode_memory_eff``
    # set switches to MLA's own compute and latent-bandwidth efficiencies, per-sequence and per-(sequence, head)
    # costs and floor (instead of sharing GQA decode's). None / 0: the 2023 form.
    mla_up_compute_eff: float | None = None
    mla_prefill_half_keys: float = 0.0
    mla_prefill_per_head_s: float = 0.0
    mla_prefill_floor_s: float | None = None
    mla_decode_compute_eff: float | None = None
    mla_decode_memory_eff: float | None = None
    mla_decode_per_seq_s: float = 0.0
    mla_decode_per_head_s: float = 0.0
    mla_decode_floor_s: float | None = None
    expert_compute_eff: float | None = None  # MoE expert constants (simulator.costmodel.moe.ExpertCalibration);
    expert_half_tokens: float | None = None  # None: the GPU's fitted 2023 ones, else its dense-GEMM calibration
    expert_memory_eff: float | None = None
    expert_router_overhead_s: float | None = None
    # Seconds per hidden element of every routed copy of a token entering a MoE layer (tokens x top-k: the
    # permutation into expert order and the weighted un-permutation, which an EP rank runs over all tokens for
    # its experts' share): what fused MoE kernels spend beyond the expert GEMMs and the activation.
    expert_permute_s: float = 0.0
    # GEMM curves of low-precision kernels: (class, compute_eff, half_tokens, memory_eff, floor_s, act_elem_s) per
    # class of GEMM_CLASS other than bf16; floor_s + act_elem_s * m * k: the activation-quantisation kernel before
    # an FP8/FP4 GEMM (a launch, then the m x k activations read and written); a class not listed uses the
    # gemm_* fields, kernel_floor_s and no activation term (as 2023 does for all).
    gemm_formats: tuple[tuple[str, float, float, float, float, float], ...] = ()
    # MoE expert constants of low-precision lanes: (lane, compute_eff, half_tokens, memory_eff, router_overhead_s,
    # permute_s); calibration_for puts a replica's lane into the expert_* fields (a lane not listed keeps them).
    expert_formats: tuple[tuple[str, float, float, float, float, float], ...] = ()
    # All-reduce constants of a TP ring over another kind of link: (kind, bus_eff, latency_s, gpu_latency_s);
    # "pcie": a PCIe part's ring (its latency grows with the GPUs, its bandwidth falls with them).
    allreduce_links: tuple[tuple[str, float, float, float], ...] = ()
    source: str = "hand-set defaults"

    @property
    def attn_floor(self) -> float:
        """Fixed cost of one attention kernel."""
        return self.kernel_floor_s if self.attn_floor_s is None else self.attn_floor_s

    def for_weights(self, weight_format: str) -> RooflineCalibration:
        """This calibration with the ``expert_*`` fields of ``weight_format``'s lane (expert_formats; its
        LANE_FALLBACK's where it has none); itself where it has neither (every 2023 calibration)."""
        cls = GEMM_CLASS.get(weight_format, "bf16")
        lanes = {name: curve for name, *curve in self.expert_formats}
        found = lanes.get(cls) or lanes.get(LANE_FALLBACK.get(cls, ""))
        if not found:
            return self
        names = ("expert_compute_eff", "expert_half_tokens", "expert_memory_eff", "expert_router_overhead_s",
                 "expert_permute_s")
        return replace(self, **dict(zip(names, found, strict=True)))

    def for_link(self, kind: str) -> RooflineCalibration:
        """This calibration with the all-reduce constants of a TP ring over ``kind`` links (allreduce_links);
        itself where it has none for the kind (every 2023 calibration)."""
        for name, *curve in self.allreduce_links:
            if name == kind:
                return replace(self, allreduce_bus_eff=curve[0], allreduce_latency_s=curve[1],
                               allreduce_gpu_latency_s=curve[2])
        return self

    def gemm_constants(self, weight_format: str) -> tuple[float, float, float, float, float]:
        """(compute_eff, half_tokens, memory_eff, floor_s, act_elem_s) of GEMMs with ``--dtype`` ``weight_format``
        weights."""
        cls = GEMM_CLASS.get(weight_format, "bf16")
        curves = {name: tuple(curve) for name, *curve in self.gemm_formats}
        found = curves.get(cls) or curves.get(LANE_FALLBACK.get(cls, ""))
        if found:
            return found  # type: ignore[return-value]
        return self.gemm_compute_eff, self.gemm_half_tokens, self.gemm_memory_eff, self.kernel_floor_s, 0.0

    @property
    def mla_eff(self) -> float:
        """MLA attention's fraction of the bf16 peak."""
        return self.attn_prefill_compute_eff if self.mla_compute_eff is None else self.mla_compute_eff

    def prefill_compute_eff(self, pairs: float, num_tokens: float, mla: bool = False) -> float:
        """Prefill attention's fraction of the bf16 peak: ``attn_prefill_compute_eff`` ramped by the mean
        keys per query where the calibration has a ramp (the 2023 one has none); MLA: ``mla_eff``, no ramp
        (its prefill FLOPs include the context's up-projection, which does not shrink with short prompts)."""
        if mla:
            return self.mla_eff
        eff = self.attn_prefill_compute_eff
        if self.attn_prefill_half_keys and num_tokens > 0:
            keys = pairs / num_tokens
            return eff * keys / (keys + self.attn_prefill_half_keys)
        return eff


DEFAULT = RooflineCalibration()

# BEGIN CALIBRATED (written by `simulate calibrate`)
BY_GPU: dict[str, RooflineCalibration] = {
    'a100-80gb': replace(
        DEFAULT,
        gemm_compute_eff=0.739,
        gemm_half_tokens=102.0,
        gemm_memory_eff=0.71,
        attn_prefill_compute_eff=0.235,
        attn_decode_memory_eff=0.745,
        attn_decode_per_seq_s=1.71e-07,
        elementwise_memory_eff=0.446,
        residual_add_memory_eff=0.972,
        embedding_memory_eff=0.153,
        kernel_floor_s=2.21e-06,
        allreduce_latency_s=4.68e-05,
        allreduce_bus_eff=0.558,
        send_recv_latency_s=9e-06,
        source='fitted by `simulate calibrate` to Vidur a100 mlp.csv (8 models, all TP); Vidur a100 attention.csv (llama-2-70b tp2); NCCL all_reduce a100_dgx; NCCL send_recv a100_dgx',
    ),
    'a40': replace(
        DEFAULT,
        gemm_compute_eff=0.791,
        gemm_half_tokens=123.0,
        gemm_memory_eff=0.719,
        attn_prefill_compute_eff=0.235,
        attn_decode_memory_eff=0.745,
        attn_decode_per_seq_s=1.71e-07,
        elementwise_memory_eff=0.738,
        residual_add_memory_eff=0.866,
        embedding_memory_eff=0.503,
        kernel_floor_s=1.48e-06,
        send_recv_latency_s=4e-06,
        source='fitted by `simulate calibrate` to Vidur a40 mlp.csv (6 models, all TP); NCCL send_recv a40_pairwise_nvlink; attention constants from a100-80gb',
    ),
    'h100-sxm': replace(
        DEFAULT,
        gemm_compute_eff=0.752,
        gemm_half_tokens=230.0,
        gemm_memory_eff=0.779,
        attn_prefill_compute_eff=0.235,
        attn_decode_memory_eff=0.745,
        attn_decode_per_seq_s=1.71e-07,
        elementwise_memory_eff=0.511,
        residual_add_memory_eff=1.0,
        embedding_memory_eff=0.184,
        kernel_floor_s=1.94e-06,
        allreduce_latency_s=2.97e-05,
        allreduce_bus_eff=0.784,
        send_recv_latency_s=5.5e-06,
        source='fitted by `simulate calibrate` to Vidur h100 mlp.csv (6 models, all TP); NCCL all_reduce h100_dgx; NCCL send_recv h100_dgx; attention constants from a100-80gb',
    ),
}
BY_GPU['a100-40gb'] = replace(BY_GPU['a100-80gb'], source='a100-80gb constants (same architecture): fitted by `simulate calibrate` to Vidur a100 mlp.csv (8 models, all TP); Vidur a100 attention.csv (llama-2-70b tp2); NCCL all_reduce a100_dgx; NCCL send_recv a100_dgx')
BY_GPU['h100-pcie'] = replace(BY_GPU['h100-sxm'], source='h100-sxm constants (same architecture): fitted by `simulate calibrate` to Vidur h100 mlp.csv (6 models, all TP); NCCL all_reduce h100_dgx; NCCL send_recv h100_dgx; attention constants from a100-80gb')
BY_GPU['h200'] = replace(BY_GPU['h100-sxm'], source='h100-sxm constants (same architecture): fitted by `simulate calibrate` to Vidur h100 mlp.csv (6 models, all TP); NCCL all_reduce h100_dgx; NCCL send_recv h100_dgx; attention constants from a100-80gb')
# END CALIBRATED


# "today": kernel constants fitted to AIConfigurator's tables of today's vLLM, SGLang and TensorRT-LLM kernels,
# per GPU generation and engine backend (and every backend pooled); simulator.calibrate.roofline_from_tables
# documents the fit and its held-out error and writes them, as data, to TODAY_PATH (`--write`). CPU overheads
# and send/recv latency stay the GPU's 2023 ones.
TODAY_PATH = Path(__file__).resolve().parents[1] / "data" / "roofline_today.json"


def _tuples(value: Any) -> Any:
    """JSON's lists as the tuples RooflineCalibration holds (frozen, hashable)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def load_today(path: Path = TODAY_PATH) -> dict[str, dict[str, dict[str, Any]]]:
    """generation -> backend (or POOLED) -> RooflineCalibration fields; empty where none is written."""
    if not path.exists():
        return {}
    raw = json.loads(path.read_text())
    return {gen: {backend: {k: _tuples(v) for k, v in fields.items()} for backend, fields in per_backend.items()}
            for gen, per_backend in raw.items()}


TODAY: dict[str, dict[str, dict[str, Any]]] = load_today()

# Catalog GPU -> the generation (architecture) whose "today" constants price it (efficiencies are fractions
# of each GPU's own spec-sheet peaks): the RTX PRO 6000 and RTX 5090 are Blackwell parts, the L40S, L40, L4,
# RTX 4090 and RTX 6000 Ada Ada ones.
GENERATION: dict[str, str] = {
    "a100-80gb": "ampere", "a100-40gb": "ampere", "a40": "ampere", "rtx-3090": "ampere", "rtx-a6000": "ampere",
    "h100-sxm": "hopper", "h100-pcie": "hopper", "h200": "hopper", "h20": "hopper",
    "b200": "blackwell", "b300": "blackwell", "gb200": "blackwell", "gb300": "blackwell", "rtx-pro-6000": "blackwell",
    "rtx-5090": "blackwell",
    "l40s": "ada", "l4": "ada", "l40": "ada", "rtx-4090": "ada", "rtx-6000-ada": "ada",
}
# The catalog GPUs each generation's "today" constants were fitted on (simulator.calibrate.roofline_from_tables'
# GENERATIONS, by catalog name; a test keeps the two the same). Another GPU of a generation is priced by constants
# fitted on these: its GEMM knee moves with its ridge point (ridge_knee_scale).
FITTED_ON: dict[str, tuple[str, ...]] = {
    "ampere": ("a100-80gb",), "hopper": ("h100-sxm", "h200"),
    "blackwell": ("b200", "b300", "gb200", "gb300", "rtx-pro-6000"), "ada": ("l40s",),
}
CALIBRATIONS = ("2023", "today")  # config.run_config.ROOFLINE_CALIBRATIONS names the same
# "today" constants are fitted per engine backend (their kernels differ by more than the fit's error) and to
# every backend's rows pooled: a run names a backend by --kernels, else by its engine preset's first word.
KERNEL_BACKENDS = ("vllm", "sglang", "trtllm")
POOLED = "all"


def roofline_backend(kernels: str = "roofline", engine: object = None) -> str:
    """Whose "today" constants price a run: ``--kernels``' backend where it names one (the tables' gaps),
    else the engine preset's (``vllm-v1`` -> vllm, ``sglang-2026`` -> sglang, ``trtllm-2026`` -> trtllm;
    an engine model by its ``name``), else :data:`POOLED` (every backend's rows: ``ideal``, ``handset``)."""
    if kernels in KERNEL_BACKENDS:
        return kernels
    recorded = getattr(engine, "roofline_prices", None)  # a fitted artifact's, whatever its name
    if recorded:
        return recorded
    name = engine if isinstance(engine, str) else getattr(engine, "name", "")
    first = str(name).split("-")[0].lower()
    return first if first in KERNEL_BACKENDS else POOLED


def today_generation(gpu_name: str) -> str | None:
    """The GPU generation whose 'today' constants price ``gpu_name``; None where none was measured
    (its runs keep the 2023 constants)."""
    generation = GENERATION.get(gpu_name)
    return generation if generation in TODAY else None


def describe(which: str, gpu_name: str, kernels: str = "roofline", engine: object = None) -> str:
    """What a run header says of the roofline's constants: ``2023``, or ``today`` with the generation
    and the backend whose fit prices the run (or that no generation was measured for the GPU)."""
    if which != "today":
        return which
    generation = today_generation(gpu_name)
    if generation is None:
        return f"today (no measured generation for {gpu_name}: its 2023 constants)"
    whose = roofline_backend(kernels, engine)
    return f"today ({generation}, {'every backend' if whose == POOLED else whose}'s kernels)"


def calibration_for(gpu_name: str, which: str = "2023", backend: str | None = None,
                    weight_format: str | None = None) -> RooflineCalibration:
    """The roofline calibration of a GPU: ``2023`` (Vidur/LLMServingSim profiles; the paper
    reproductions') or ``today`` (its generation's fit to AIConfigurator's kernel tables: ``backend``'s
    constants, :data:`POOLED` ones for None or a backend without its own; a GPU of no measured generation
    keeps its 2023 constants, :func:`today_generation`), with ``weight_format``'s
    MoE expert lane (:meth:`RooflineCalibration.for_weights`) where given."""
    if which == "2023":
        cal = BY_GPU.get(gpu_name, DEFAULT)
        return cal.for_weights(weight_format) if weight_format else cal
    from simulator.config.errors import ConfigError

    if which != "today":
        raise ConfigError("replica.roofline_calibration", f"unknown calibration {which!r}",
                          f"use one of {', '.join(CALIBRATIONS)}")
    generation = today_generation(gpu_name)
    if generation is None:  # no measured generation (MI300X, a GPU file): the 2023 constants, as the header says
        return calibration_for(gpu_name, "2023", weight_format=weight_format)
    fits = TODAY[generation]
    cal = replace(BY_GPU.get(gpu_name, DEFAULT), **fits.get(backend or POOLED, fits[POOLED]))
    return cal.for_weights(weight_format) if weight_format else cal


def ridge_knee_scale(gpu: Any, which: str) -> float:
    """How far the GEMM efficiency ramp's knee (in tokens) moves on ``gpu`` (a GPUSpec) under calibration ``which``:
    1.0 on a GPU the "today" constants were fitted on (and under 2023's, or a GPU of no measured generation); on
    another GPU of a fitted generation, its ridge point (bf16 peak over HBM bandwidth) over the fitted GPUs'
    (geometric mean). The ramp stands for the weight-streaming regime of small batches, whose extent in tokens is
    the ridge: fixed in tokens, the H100/H200 knee priced the H20 (a sixth of their FLOPs, more bandwidth) 1.6x
    slower than an H100 at batch-1 decode, and slower still at FP8."""
    if which != "today":
        return 1.0
    generation = today_generation(gpu.name)
    if generation is None or gpu.name in FITTED_ON.get(generation, (gpu.name,)):
        return 1.0
    from simulator.config.catalog import get_gpu

    ridges = [get_gpu(name).bf16_flops / get_gpu(name).hbm_bytes_per_s for name in FITTED_ON[generation]]
    reference = float(np.exp(np.mean(np.log(ridges))))
    return gpu.bf16_flops / gpu.hbm_bytes_per_s / reference
