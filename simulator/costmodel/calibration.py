"""Efficiency constants of the roofline cost model, in one place.

The roofline prices an op as ``max(flops / (peak * eff_c), bytes / (bw * eff_m)) + floor``.
Peak and bandwidth come from the GPU's spec sheet (:mod:`simulator.catalog`); the
factors below say how much of it real kernels reach. Compute efficiency of a GEMM
rises with the number of tokens (rows) until the tensor cores are saturated:
``eff_c(T) = gemm_compute_eff * T / (T + gemm_half_tokens)``.

``DEFAULT`` holds hand-set values typical of cuBLAS/FlashAttention on A100/H100 class
parts. ``BY_GPU`` overrides them per GPU where measured profiles were used to fit
them; each entry names its source. ``simulate calibrate`` (issue 4) regenerates it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RooflineCalibration:
    """Efficiency factors and fixed latencies for one GPU. Times in seconds."""

    gemm_compute_eff: float = 0.80  # asymptotic fraction of dense bf16 peak for large GEMMs
    gemm_half_tokens: float = 48.0  # tokens at which a GEMM reaches half its asymptotic efficiency
    gemm_memory_eff: float = 0.80  # fraction of HBM bandwidth when a GEMM is weight-read bound
    attn_prefill_compute_eff: float = 0.55  # FlashAttention forward, fraction of peak
    attn_decode_memory_eff: float = 0.60  # paged decode attention, fraction of HBM bandwidth
    attn_decode_per_seq_s: float = 0.4e-6  # per-sequence cost of a decode kernel (block tables, splits)
    elementwise_memory_eff: float = 0.55  # norms, activations, rotary, residual adds
    kernel_floor_s: float = 4e-6  # smallest time any kernel takes (launch + tail)
    allreduce_latency_s: float = 12e-6  # NCCL all-reduce fixed cost per call
    allreduce_bus_eff: float = 0.75  # fraction of link bandwidth a ring all-reduce reaches
    send_recv_latency_s: float = 15e-6
    cpu_overhead_s: float = 1.5e-3  # per iteration: scheduling, input prep, sampling launch
    cpu_overhead_per_seq_s: float = 25e-6  # per request in the batch
    source: str = "hand-set defaults"


DEFAULT = RooflineCalibration()

# Per-GPU overrides; filled from measured profiles by the calibration step.
BY_GPU: dict[str, RooflineCalibration] = {
    "a40": replace(DEFAULT, gemm_compute_eff=0.75, source="hand-set defaults"),
}


def calibration_for(gpu_name: str) -> RooflineCalibration:
    return BY_GPU.get(gpu_name, DEFAULT)
