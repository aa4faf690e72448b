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
    # Terms only the "today" calibration sets (None / 0: absent, and the 2023 prices bit for bit).
    attn_floor_s: float | None = None  # smallest attention kernel (None: kernel_floor_s)
    attn_prefill_half_keys: float = 0.0  # keys per query at which prefill attention reaches half its efficiency
    expert_compute_eff: float | None = None  # MoE expert constants (simulator.costmodel.moe.ExpertCalibration);
    expert_half_tokens: float | None = None  # None: the GPU's fitted 2023 ones, else its dense-GEMM calibration
    expert_memory_eff: float | None = None
    expert_router_overhead_s: float | None = None
    source: str = "hand-set defaults"

    @property
    def attn_floor(self) -> float:
        """Fixed cost of one attention kernel."""
        return self.kernel_floor_s if self.attn_floor_s is None else self.attn_floor_s

    def prefill_compute_eff(self, pairs: float, num_tokens: float) -> float:
        """Prefill attention's fraction of the bf16 peak: ``attn_prefill_compute_eff``, ramped by the
        mean keys per query where the calibration has a ramp (the 2023 one has none)."""
        if self.attn_prefill_half_keys and num_tokens > 0:
            keys = pairs / num_tokens
            return self.attn_prefill_compute_eff * keys / (keys + self.attn_prefill_half_keys)
        return self.attn_prefill_compute_eff


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
TODAY: dict[str, dict[str, float | str]] = {
    'ampere': {
        'gemm_compute_eff': 0.749,
        'gemm_half_tokens': 94.4,
        'gemm_memory_eff': 0.732,
        'kernel_floor_s': 6.05e-06,
        'attn_prefill_compute_eff': 0.492,
        'attn_prefill_half_keys': 139.0,
        'attn_floor_s': 1.59e-05,
        'attn_decode_memory_eff': 0.416,
        'attn_decode_per_seq_s': 6.66e-08,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.596,
        'allreduce_latency_s': 5.5e-06,
        'expert_compute_eff': 0.149,
        'expert_half_tokens': 7.33,
        'expert_memory_eff': 0.741,
        'expert_router_overhead_s': 5.94e-05,
        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel tables of a100_sxm',
    },
    'hopper': {
        'gemm_compute_eff': 0.586,
        'gemm_half_tokens': 82.4,
        'gemm_memory_eff': 0.722,
        'kernel_floor_s': 6.34e-06,
        'attn_prefill_compute_eff': 0.409,
        'attn_prefill_half_keys': 13.1,
        'attn_floor_s': 1.28e-05,
        'attn_decode_memory_eff': 0.862,
        'attn_decode_per_seq_s': 3.78e-08,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.667,
        'allreduce_latency_s': 4.21e-06,
        'expert_compute_eff': 0.133,
        'expert_half_tokens': 20.7,
        'expert_memory_eff': 0.859,
        'expert_router_overhead_s': 3.74e-05,
        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel tables of h100_sxm, h200_sxm',
    },
    'blackwell': {
        'gemm_compute_eff': 0.486,
        'gemm_half_tokens': 4.6,
        'gemm_memory_eff': 0.512,
        'kernel_floor_s': 7.24e-06,
        'attn_prefill_compute_eff': 0.455,
        'attn_prefill_half_keys': 56.3,
        'attn_floor_s': 1.16e-05,
        'attn_decode_memory_eff': 0.841,
        'attn_decode_per_seq_s': 2.04e-08,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.552,
        'allreduce_latency_s': 6.27e-06,
        'expert_compute_eff': 0.0898,
        'expert_half_tokens': 20.8,
        'expert_memory_eff': 0.776,
        'expert_router_overhead_s': 2.08e-05,
        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel tables of b200_sxm, b300_sxm, gb200, gb300',
    },
    'workstation': {
        'gemm_compute_eff': 0.575,
        'gemm_half_tokens': 58.9,
        'gemm_memory_eff': 0.757,
        'kernel_floor_s': 6.69e-06,
        'attn_prefill_compute_eff': 0.396,
        'attn_prefill_half_keys': 5.45,
        'attn_floor_s': 9.82e-06,
        'attn_decode_memory_eff': 0.816,
        'attn_decode_per_seq_s': 1.29e-08,
        'elementwise_memory_eff': 0.8,
        'residual_add_memory_eff': 1.2,
        'embedding_memory_eff': 0.8,
        'allreduce_bus_eff': 0.358,
        'allreduce_latency_s': 1.35e-05,
        'expert_compute_eff': 0.144,
        'expert_half_tokens': 8.89,
        'expert_memory_eff': 0.786,
        'expert_router_overhead_s': 2.68e-05,
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
