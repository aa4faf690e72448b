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
calibrated roofline comes to the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

# Weight format (simulator.config.precision) -> the class of GEMM kernels one efficiency curve describes.
GEMM_CLASS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8-block": "fp8", "nvfp4": "fp4", "mxfp4": "fp4",
              "int4": "int4"}


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
    send_recv_latency_s: float = 15e-6
    cpu_overhead_s: float = 1.5e-3  # per iteration: scheduling, input prep, sampling launch
    cpu_overhead_per_seq_s: float = 25e-6  # per request in the batch
    # Terms only the "today" calibration sets (None / 0: absent, and the 2023 prices bit for bit).
    attn_floor_s: float | None = None  # smallest attention kernel (None: kernel_floor_s)
    attn_prefill_half_keys: float = 0.0  # keys per query at which prefill attention reaches half its efficiency
    mla_compute_eff: float | None = None  # MLA attention's fraction of the bf16 peak (None: attn_prefill_compute_eff)
    expert_compute_eff: float | None = None  # MoE expert constants (simulator.costmodel.moe.ExpertCalibration);
    expert_half_tokens: float | None = None  # None: the GPU's fitted 2023 ones, else its dense-GEMM calibration
    expert_memory_eff: float | None = None
    expert_router_overhead_s: float | None = None
    # Seconds per hidden element of every token entering a MoE layer (routing, permutation, an EP rank's
    # scan of all tokens for its experts' share): what fused MoE kernels spend beyond the expert GEMMs.
    expert_permute_s: float = 0.0
    # GEMM curves of low-precision kernels: (class, compute_eff, half_tokens, memory_eff, floor_s) per class
    # of GEMM_CLASS other than bf16 (the floor: e.g. an activation-quantisation kernel before an FP8 GEMM);
    # a class not listed uses the gemm_* fields and kernel_floor_s (as 2023 does for all).
    gemm_formats: tuple[tuple[str, float, float, float, float], ...] = ()
    source: str = "hand-set defaults"

    @property
    def attn_floor(self) -> float:
        """Fixed cost of one attention kernel."""
        return self.kernel_floor_s if self.attn_floor_s is None else self.attn_floor_s

    def gemm_constants(self, weight_format: str) -> tuple[float, float, float, float]:
        """(compute_eff, half_tokens, memory_eff, floor_s) of GEMMs with ``--dtype`` ``weight_format`` weights."""
        cls = GEMM_CLASS.get(weight_format, "bf16")
        for name, *curve in self.gemm_formats:
            if name == cls:
                return tuple(curve)  # type: ignore[return-value]
        return self.gemm_compute_eff, self.gemm_half_tokens, self.gemm_memory_eff, self.kernel_floor_s

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
# one set per GPU generation (simulator.calibrate.roofline_from_tables documents the fit and its held-out
# error); CPU overheads and send/recv latency stay the GPU's 2023 ones.
# BEGIN TODAY (written by `python -m simulator.calibrate.roofline_from_tables --write`)
TODAY: dict[str, dict[str, Any]] = {
    'ampere': {
        'gemm_compute_eff': 0.806,
        'gemm_half_tokens': 99.9,
        'gemm_memory_eff': 0.748,
        'kernel_floor_s': 5.77e-06,
        'attn_prefill_compute_eff': 0.491,
        'attn_prefill_half_keys': 284.0,
        'attn_floor_s': 1.39e-05,
        'mla_compute_eff': 0.535,
        'attn_decode_memory_eff': 0.627,
        'attn_decode_per_seq_s': 4.9e-08,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.596,
        'allreduce_latency_s': 5.5e-06,
        'expert_compute_eff': 0.307,
        'expert_half_tokens': 14.2,
        'expert_memory_eff': 0.892,
        'expert_router_overhead_s': 4.27e-05,
        'expert_permute_s': 4.49e-11,
        'gemm_formats': (('int4', 0.797, 125.0, 0.945, 1.97e-05),),
        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel tables of a100_sxm',
    },
    'hopper': {
        'gemm_compute_eff': 0.79,
        'gemm_half_tokens': 73.6,
        'gemm_memory_eff': 0.808,
        'kernel_floor_s': 2.79e-06,
        'attn_prefill_compute_eff': 0.592,
        'attn_prefill_half_keys': 555.0,
        'attn_floor_s': 1.14e-05,
        'mla_compute_eff': 0.222,
        'attn_decode_memory_eff': 0.891,
        'attn_decode_per_seq_s': 3.45e-08,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.667,
        'allreduce_latency_s': 4.21e-06,
        'expert_compute_eff': 0.325,
        'expert_half_tokens': 49.8,
        'expert_memory_eff': 0.877,
        'expert_router_overhead_s': 2.63e-05,
        'expert_permute_s': 1.89e-11,
        'gemm_formats': (('fp8', 0.564, 61.3, 0.833, 1.25e-05),),
        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel tables of h100_sxm, h200_sxm',
    },
    'blackwell': {
        'gemm_compute_eff': 0.722,
        'gemm_half_tokens': 146.0,
        'gemm_memory_eff': 0.743,
        'kernel_floor_s': 2.17e-06,
        'attn_prefill_compute_eff': 0.661,
        'attn_prefill_half_keys': 1060.0,
        'attn_floor_s': 1.05e-05,
        'mla_compute_eff': 0.469,
        'attn_decode_memory_eff': 0.938,
        'attn_decode_per_seq_s': 1.31e-08,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.552,
        'allreduce_latency_s': 6.27e-06,
        'expert_compute_eff': 0.233,
        'expert_half_tokens': 39.9,
        'expert_memory_eff': 0.785,
        'expert_router_overhead_s': 2.33e-05,
        'expert_permute_s': 4.31e-12,
        'gemm_formats': (('fp8', 0.508, 167.0, 0.373, 5.93e-06), ('fp4', 0.307, 21.3, 0.568, 7.26e-06)),
        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel tables of b200_sxm, b300_sxm, gb200, gb300',
    },
    'workstation': {
        'gemm_compute_eff': 0.631,
        'gemm_half_tokens': 67.0,
        'gemm_memory_eff': 0.808,
        'kernel_floor_s': 2.11e-06,
        'attn_prefill_compute_eff': 0.442,
        'attn_prefill_half_keys': 125.0,
        'attn_floor_s': 8.6e-06,
        'mla_compute_eff': 0.363,
        'attn_decode_memory_eff': 0.844,
        'attn_decode_per_seq_s': 8.76e-09,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.358,
        'allreduce_latency_s': 1.35e-05,
        'expert_compute_eff': 0.346,
        'expert_half_tokens': 27.2,
        'expert_memory_eff': 0.796,
        'expert_router_overhead_s': 2.77e-05,
        'expert_permute_s': 1.18e-11,
        'gemm_formats': (('fp8', 0.464, 39.7, 0.787, 1.18e-05), ('fp4', 0.651, 112.0, 0.728, 6.74e-06)),
        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel tables of l40s, rtx_pro_6000_server',
    },
}
# END TODAY

# Catalog GPU -> the generation whose "today" constants price it (efficiencies are fractions of each
# GPU's own spec-sheet peaks). Ada and the Blackwell workstation part share one set (PCIe, no NVLink).
GENERATION: dict[str, str] = {
    "a100-80gb": "ampere", "a100-40gb": "ampere", "a40": "ampere",
    "h100-sxm": "hopper", "h100-pcie": "hopper", "h200": "hopper", "h20": "hopper",
    "b200": "blackwell", "b300": "blackwell", "gb200": "blackwell", "gb300": "blackwell",
    "l40s": "workstation", "l4": "workstation", "rtx-pro-6000": "workstation",
}
CALIBRATIONS = ("2023", "today")  # config.run_config.ROOFLINE_CALIBRATIONS names the same


def calibration_for(gpu_name: str, which: str = "2023") -> RooflineCalibration:
    """The roofline calibration of a GPU: ``2023`` (Vidur/LLMServingSim profiles; the paper
    reproductions') or ``today`` (its generation's fit to AIConfigurator's kernel tables)."""
    if which == "2023":
        return BY_GPU.get(gpu_name, DEFAULT)
    from simulator.config.errors import ConfigError

    if which != "today":
        raise ConfigError("replica.roofline_calibration", f"unknown calibration {which!r}",
                          f"use one of {', '.join(CALIBRATIONS)}")
    generation = GENERATION.get(gpu_name)
    if generation not in TODAY:
        have = sorted(g for g, gen in GENERATION.items() if gen in TODAY)
        raise ConfigError("replica.roofline_calibration", f"no 'today' calibration for GPU {gpu_name!r}",
                          f"use --roofline-calibration 2023, or a GPU of a measured generation: {', '.join(have)}")
    return replace(BY_GPU.get(gpu_name, DEFAULT), **TODAY[generation])
