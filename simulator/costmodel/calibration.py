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
    source: str = "hand-set defaults"


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


def calibration_for(gpu_name: str) -> RooflineCalibration:
    return BY_GPU.get(gpu_name, DEFAULT)
