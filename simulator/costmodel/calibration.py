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

# Weight format (simulator.config.precision) -> the lane of kernels one efficiency curve describes (GEMMs
# and MoE experts); a lane a calibration has no curve for takes LANE_FALLBACK's, else the bf16 one.
GEMM_CLASS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp8-block": "fp8_block", "nvfp4": "fp4", "mxfp4": "mxfp4",
              "int4": "int4"}
LANE_FALLBACK = {"fp8_block": "fp8", "mxfp4": "fp4"}


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
    send_recv_latency_s: float = 15e-6
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
    # Seconds per hidden element of every token entering a MoE layer (routing, permutation, an EP rank's
    # scan of all tokens for its experts' share): what fused MoE kernels spend beyond the expert GEMMs.
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
# one set per GPU generation (simulator.calibrate.roofline_from_tables documents the fit and its held-out
# error); CPU overheads and send/recv latency stay the GPU's 2023 ones.
# BEGIN TODAY (written by `python -m simulator.calibrate.roofline_from_tables --write`)
TODAY: dict[str, dict[str, dict[str, Any]]] = {
    'ampere': {
        'all': {
            'gemm_compute_eff': 0.806,
            'gemm_half_tokens': 99.9,
            'gemm_memory_eff': 0.748,
            'kernel_floor_s': 5.77e-06,
            'attn_prefill_compute_eff': 0.488,
            'attn_prefill_half_keys': 267.0,
            'attn_floor_s': 1.31e-05,
            'attn_prefill_per_head_s': 9.25e-09,
            'mla_compute_eff': 0.505,
            'attn_decode_memory_eff': 0.675,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 3.16e-08,
            'attn_decode_per_head_s': 1e-13,
            'attn_decode_floor_s': 1.37e-05,
            'mla_up_compute_eff': 1.23,
            'mla_prefill_half_keys': 1.23,
            'mla_prefill_per_head_s': 2.86e-08,
            'mla_prefill_floor_s': 1.49e-05,
            'mla_decode_compute_eff': 1.94,
            'mla_decode_memory_eff': 0.255,
            'mla_decode_per_seq_s': 4.11e-08,
            'mla_decode_per_head_s': 1.01e-13,
            'mla_decode_floor_s': 1.46e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.595,
            'allreduce_latency_s': 4.95e-06,
            'allreduce_gpu_latency_s': 3.02e-07,
            'expert_compute_eff': 0.351,
            'expert_half_tokens': 52.9,
            'expert_memory_eff': 0.963,
            'expert_router_overhead_s': 4.95e-05,
            'expert_permute_s': 2.35e-11,
            'gemm_formats': (('int4', 0.831, 216.0, 0.735, 1.4e-05, 1.47e-12),),
            'expert_formats': (('int4', 0.29, 13.2, 1.12, 3.54e-05, 8.8e-11),),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm (pooled) kernel tables of a100_sxm',
        },
        'sglang': {
            'gemm_compute_eff': 0.791,
            'gemm_half_tokens': 97.8,
            'gemm_memory_eff': 0.729,
            'kernel_floor_s': 6.27e-06,
            'attn_prefill_compute_eff': 0.664,
            'attn_prefill_half_keys': 131.0,
            'attn_floor_s': 1.41e-05,
            'attn_prefill_per_head_s': 3.05e-09,
            'mla_compute_eff': 0.505,
            'attn_decode_memory_eff': 0.557,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 3.02e-08,
            'attn_decode_per_head_s': 1e-13,
            'attn_decode_floor_s': 1.37e-05,
            'mla_up_compute_eff': 1.23,
            'mla_prefill_half_keys': 1.23,
            'mla_prefill_per_head_s': 2.86e-08,
            'mla_prefill_floor_s': 1.49e-05,
            'mla_decode_compute_eff': 1.94,
            'mla_decode_memory_eff': 0.255,
            'mla_decode_per_seq_s': 4.11e-08,
            'mla_decode_per_head_s': 1.01e-13,
            'mla_decode_floor_s': 1.46e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.621,
            'allreduce_latency_s': 5.21e-06,
            'allreduce_gpu_latency_s': 2.13e-07,
            'expert_compute_eff': 0.337,
            'expert_half_tokens': 75.3,
            'expert_memory_eff': 0.971,
            'expert_router_overhead_s': 3.35e-05,
            'expert_permute_s': 4.3e-11,
            'gemm_formats': (('int4', 0.831, 216.0, 0.735, 1.4e-05, 1.47e-12),),
            'expert_formats': (('int4', 0.298, 13.2, 0.804, 3.26e-05, 1.09e-10),),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator sglang kernel tables of a100_sxm',
        },
        'trtllm': {
            'gemm_compute_eff': 0.843,
            'gemm_half_tokens': 109.0,
            'gemm_memory_eff': 0.787,
            'kernel_floor_s': 5.69e-06,
            'attn_prefill_compute_eff': 0.483,
            'attn_prefill_half_keys': 265.0,
            'attn_floor_s': 1.33e-05,
            'attn_prefill_per_head_s': 1.03e-08,
            'mla_compute_eff': 0.51,
            'attn_decode_memory_eff': 0.882,
            'attn_decode_per_seq_s': 1.02e-08,
            'attn_decode_per_kv_head_s': 1.11e-08,
            'attn_decode_per_head_s': 2.07e-09,
            'attn_decode_floor_s': 1.4e-05,
            'mla_up_compute_eff': 1.22,
            'mla_prefill_half_keys': 1.28,
            'mla_prefill_per_head_s': 2.83e-08,
            'mla_prefill_floor_s': 1.49e-05,
            'mla_decode_compute_eff': 1.94,
            'mla_decode_memory_eff': 0.256,
            'mla_decode_per_seq_s': 3.15e-08,
            'mla_decode_per_head_s': 1e-13,
            'mla_decode_floor_s': 1.46e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.533,
            'allreduce_latency_s': 4.34e-06,
            'allreduce_gpu_latency_s': 5.37e-07,
            'expert_compute_eff': 0.473,
            'expert_half_tokens': 72.8,
            'expert_memory_eff': 0.955,
            'expert_router_overhead_s': 4.22e-05,
            'expert_permute_s': 2.19e-11,
            'gemm_formats': (('int4', 0.831, 216.0, 0.735, 1.4e-05, 1.47e-12),),
            'expert_formats': (('int4', 0.29, 13.2, 1.12, 3.54e-05, 8.8e-11),),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator trtllm kernel tables of a100_sxm',
        },
        'vllm': {
            'gemm_compute_eff': 0.856,
            'gemm_half_tokens': 113.0,
            'gemm_memory_eff': 0.748,
            'kernel_floor_s': 5.58e-06,
            'attn_prefill_compute_eff': 0.577,
            'attn_prefill_half_keys': 204.0,
            'attn_floor_s': 1.1e-05,
            'attn_prefill_per_head_s': 2.18e-08,
            'mla_compute_eff': 0.543,
            'attn_decode_memory_eff': 0.739,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 2.86e-08,
            'attn_decode_per_head_s': 4.37e-11,
            'attn_decode_floor_s': 1.81e-05,
            'mla_up_compute_eff': 0.218,
            'mla_prefill_half_keys': 1.1,
            'mla_prefill_per_head_s': 3.98e-08,
            'mla_prefill_floor_s': 0.0001,
            'mla_decode_compute_eff': 1.94,
            'mla_decode_memory_eff': 0.163,
            'mla_decode_per_seq_s': 1.96e-07,
            'mla_decode_per_head_s': 1.95e-08,
            'mla_decode_floor_s': 0.0001,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.601,
            'allreduce_latency_s': 5.03e-06,
            'allreduce_gpu_latency_s': 2.79e-07,
            'expert_compute_eff': 0.313,
            'expert_half_tokens': 46.1,
            'expert_memory_eff': 0.982,
            'expert_router_overhead_s': 7.02e-05,
            'expert_permute_s': 6.7e-11,
            'gemm_formats': (('int4', 0.831, 216.0, 0.735, 1.4e-05, 1.47e-12),),
            'expert_formats': (('int4', 0.29, 13.2, 1.12, 3.54e-05, 8.8e-11),),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm kernel tables of a100_sxm',
        },
    },
    'hopper': {
        'all': {
            'gemm_compute_eff': 0.79,
            'gemm_half_tokens': 73.6,
            'gemm_memory_eff': 0.808,
            'kernel_floor_s': 2.79e-06,
            'attn_prefill_compute_eff': 0.591,
            'attn_prefill_half_keys': 551.0,
            'attn_floor_s': 1.17e-05,
            'attn_prefill_per_head_s': 7.28e-11,
            'mla_compute_eff': 0.19,
            'attn_decode_memory_eff': 0.905,
            'attn_decode_per_seq_s': 8.82e-09,
            'attn_decode_per_kv_head_s': 1.63e-08,
            'attn_decode_per_head_s': 6.78e-11,
            'attn_decode_floor_s': 1.11e-05,
            'mla_up_compute_eff': 0.464,
            'mla_prefill_half_keys': 78.5,
            'mla_prefill_per_head_s': 4.01e-09,
            'mla_prefill_floor_s': 1.32e-05,
            'mla_decode_compute_eff': 0.599,
            'mla_decode_memory_eff': 0.906,
            'mla_decode_per_seq_s': 2.8e-08,
            'mla_decode_per_head_s': 3.09e-10,
            'mla_decode_floor_s': 1.27e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.666,
            'allreduce_latency_s': 3.73e-06,
            'allreduce_gpu_latency_s': 1.87e-07,
            'expert_compute_eff': 0.635,
            'expert_half_tokens': 133.0,
            'expert_memory_eff': 0.887,
            'expert_router_overhead_s': 2.57e-05,
            'expert_permute_s': 1.95e-11,
            'gemm_formats': (('fp8', 0.701, 110.0, 0.719, 6.51e-06, 2.14e-12), ('fp8_block', 0.662, 161.0, 0.789, 5.19e-06, 1.9e-12)),
            'expert_formats': (('fp8', 0.489, 107.0, 0.82, 2.23e-05, 8.22e-12), ('fp8_block', 0.319, 73.5, 0.838, 2.45e-05, 1.25e-11), ('mxfp4', 0.458, 43.1, 1.05, 6.67e-05, 2.19e-11), ('int4', 0.263, 23.6, 0.82, 4.77e-05, 3.2e-11)),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm (pooled) kernel tables of h100_sxm, h200_sxm',
        },
        'sglang': {
            'gemm_compute_eff': 0.753,
            'gemm_half_tokens': 58.1,
            'gemm_memory_eff': 0.825,
            'kernel_floor_s': 3.22e-06,
            'attn_prefill_compute_eff': 0.626,
            'attn_prefill_half_keys': 305.0,
            'attn_floor_s': 1.16e-05,
            'attn_prefill_per_head_s': 1.3e-09,
            'mla_compute_eff': 0.19,
            'attn_decode_memory_eff': 0.907,
            'attn_decode_per_seq_s': 1.21e-08,
            'attn_decode_per_kv_head_s': 1.95e-08,
            'attn_decode_per_head_s': 5.02e-12,
            'attn_decode_floor_s': 1.13e-05,
            'mla_up_compute_eff': 0.456,
            'mla_prefill_half_keys': 82.1,
            'mla_prefill_per_head_s': 3.69e-09,
            'mla_prefill_floor_s': 1.29e-05,
            'mla_decode_compute_eff': 0.549,
            'mla_decode_memory_eff': 0.895,
            'mla_decode_per_seq_s': 3.46e-08,
            'mla_decode_per_head_s': 2.27e-11,
            'mla_decode_floor_s': 1.2e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.675,
            'allreduce_latency_s': 3.6e-06,
            'allreduce_gpu_latency_s': 2.19e-07,
            'expert_compute_eff': 0.301,
            'expert_half_tokens': 89.1,
            'expert_memory_eff': 0.855,
            'expert_router_overhead_s': 3.3e-05,
            'expert_permute_s': 1.53e-11,
            'gemm_formats': (('fp8', 0.68, 196.0, 0.804, 6.36e-06, 1.6e-12), ('fp8_block', 0.668, 123.0, 0.815, 5.5e-06, 1.23e-12)),
            'expert_formats': (('fp8', 0.489, 107.0, 0.82, 2.23e-05, 8.22e-12), ('fp8_block', 0.435, 76.0, 0.844, 2.68e-05, 1.65e-11), ('mxfp4', 0.265, 92.5, 0.528, 4.12e-05, 1.02e-11), ('int4', 0.28, 27.0, 0.762, 3.61e-05, 2.85e-11)),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator sglang kernel tables of h100_sxm, h200_sxm',
        },
        'trtllm': {
            'gemm_compute_eff': 0.798,
            'gemm_half_tokens': 80.7,
            'gemm_memory_eff': 0.798,
            'kernel_floor_s': 2.78e-06,
            'attn_prefill_compute_eff': 0.558,
            'attn_prefill_half_keys': 487.0,
            'attn_floor_s': 1.58e-05,
            'attn_prefill_per_head_s': 2.38e-08,
            'mla_compute_eff': 0.602,
            'attn_decode_memory_eff': 0.753,
            'attn_decode_per_seq_s': 1.09e-08,
            'attn_decode_per_kv_head_s': 7.81e-09,
            'attn_decode_per_head_s': 1.56e-09,
            'attn_decode_floor_s': 8.54e-06,
            'mla_up_compute_eff': 0.815,
            'mla_prefill_half_keys': 3.01,
            'mla_prefill_per_head_s': 2e-08,
            'mla_prefill_floor_s': 1.53e-05,
            'mla_decode_compute_eff': 0.647,
            'mla_decode_memory_eff': 0.922,
            'mla_decode_per_seq_s': 1.5e-08,
            'mla_decode_per_head_s': 8.24e-10,
            'mla_decode_floor_s': 1.33e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.64,
            'allreduce_latency_s': 2.77e-06,
            'allreduce_gpu_latency_s': 1.48e-07,
            'expert_compute_eff': 0.633,
            'expert_half_tokens': 139.0,
            'expert_memory_eff': 0.892,
            'expert_router_overhead_s': 2.18e-05,
            'expert_permute_s': 6.39e-12,
            'gemm_formats': (('fp8', 0.733, 38.0, 0.802, 1.25e-05, 2.1e-12), ('fp8_block', 0.615, 157.0, 0.78, 5.01e-06, 1.82e-12)),
            'expert_formats': (('fp8', 0.615, 141.0, 0.844, 2.17e-05, 6.93e-12), ('fp8_block', 0.187, 42.8, 0.811, 1.93e-05, 7.17e-12), ('mxfp4', 0.433, 28.6, 1.05, 0.0001, 2.09e-11), ('int4', 0.263, 23.6, 0.82, 4.77e-05, 3.2e-11)),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator trtllm kernel tables of h100_sxm, h200_sxm',
        },
        'vllm': {
            'gemm_compute_eff': 0.814,
            'gemm_half_tokens': 42.0,
            'gemm_memory_eff': 0.813,
            'kernel_floor_s': 2.73e-06,
            'attn_prefill_compute_eff': 0.539,
            'attn_prefill_half_keys': 427.0,
            'attn_floor_s': 1.09e-05,
            'attn_prefill_per_head_s': 1.43e-09,
            'mla_compute_eff': 0.19,
            'attn_decode_memory_eff': 0.912,
            'attn_decode_per_seq_s': 9.07e-09,
            'attn_decode_per_kv_head_s': 1.65e-08,
            'attn_decode_per_head_s': 1e-13,
            'attn_decode_floor_s': 1.02e-05,
            'mla_up_compute_eff': 0.464,
            'mla_prefill_half_keys': 78.5,
            'mla_prefill_per_head_s': 4.01e-09,
            'mla_prefill_floor_s': 1.32e-05,
            'mla_decode_compute_eff': 0.599,
            'mla_decode_memory_eff': 0.906,
            'mla_decode_per_seq_s': 2.8e-08,
            'mla_decode_per_head_s': 3.09e-10,
            'mla_decode_floor_s': 1.27e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.67,
            'allreduce_latency_s': 4.47e-06,
            'allreduce_gpu_latency_s': 1.43e-07,
            'expert_compute_eff': 0.7,
            'expert_half_tokens': 141.0,
            'expert_memory_eff': 0.915,
            'expert_router_overhead_s': 3.14e-05,
            'expert_permute_s': 2.6e-11,
            'gemm_formats': (('fp8', 0.681, 141.0, 0.785, 5.66e-06, 2.6e-12), ('fp8_block', 0.726, 0.1, 2.5, 8.78e-05, 4.45e-13)),
            'expert_formats': (('fp8', 0.645, 124.0, 0.895, 3.98e-05, 2.32e-11), ('fp8_block', 0.336, 75.5, 0.897, 3.18e-05, 1.96e-11), ('mxfp4', 0.565, 58.7, 1.28, 6.37e-05, 1.24e-11), ('int4', 0.242, 16.7, 1.23, 9.82e-05, 3.67e-11)),
            'allreduce_links': (),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm kernel tables of h100_sxm, h200_sxm',
        },
    },
    'blackwell': {
        'all': {
            'gemm_compute_eff': 0.736,
            'gemm_half_tokens': 143.0,
            'gemm_memory_eff': 0.766,
            'kernel_floor_s': 2.18e-06,
            'attn_prefill_compute_eff': 0.538,
            'attn_prefill_half_keys': 238.0,
            'attn_floor_s': 1.03e-05,
            'attn_prefill_per_head_s': 1.76e-08,
            'mla_compute_eff': 0.561,
            'attn_decode_memory_eff': 0.939,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 7.67e-09,
            'attn_decode_per_head_s': 5.45e-11,
            'attn_decode_floor_s': 1.03e-05,
            'mla_up_compute_eff': 0.602,
            'mla_prefill_half_keys': 32.7,
            'mla_prefill_per_head_s': 1.59e-08,
            'mla_prefill_floor_s': 1.42e-05,
            'mla_decode_compute_eff': 0.527,
            'mla_decode_memory_eff': 0.73,
            'mla_decode_per_seq_s': 2.85e-08,
            'mla_decode_per_head_s': 1.04e-10,
            'mla_decode_floor_s': 1.06e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.55,
            'allreduce_latency_s': 5.28e-06,
            'allreduce_gpu_latency_s': 3.88e-07,
            'expert_compute_eff': 0.463,
            'expert_half_tokens': 117.0,
            'expert_memory_eff': 0.84,
            'expert_router_overhead_s': 2.18e-05,
            'expert_permute_s': 3.94e-12,
            'gemm_formats': (('fp8', 0.721, 142.0, 0.826, 1.4e-05, 1.21e-12), ('fp8_block', 0.659, 115.0, 0.554, 1.38e-05, 1.37e-12), ('fp4', 0.655, 188.0, 0.629, 7.09e-06, 9.4e-13)),
            'expert_formats': (('fp8', 0.411, 106.0, 0.826, 2.34e-05, 4.58e-12), ('fp8_block', 0.211, 61.5, 0.733, 2.73e-05, 6.06e-12), ('fp4', 0.361, 108.0, 0.803, 2.83e-05, 3.45e-12), ('mxfp4', 0.17, 55.4, 0.616, 1.82e-05, 4.57e-12), ('int4', 0.304, 36.7, 0.491, 2.94e-05, 3.78e-12)),
            'allreduce_links': (('pcie', 0.415, 4.68e-06, 3.96e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm (pooled) kernel tables of b200_sxm, b300_sxm, gb200, gb300, rtx_pro_6000_server',
        },
        'sglang': {
            'gemm_compute_eff': 0.716,
            'gemm_half_tokens': 138.0,
            'gemm_memory_eff': 0.773,
            'kernel_floor_s': 2.2e-06,
            'attn_prefill_compute_eff': 0.568,
            'attn_prefill_half_keys': 248.0,
            'attn_floor_s': 9.74e-06,
            'attn_prefill_per_head_s': 1.73e-08,
            'mla_compute_eff': 0.555,
            'attn_decode_memory_eff': 0.958,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 7.15e-09,
            'attn_decode_per_head_s': 3.96e-11,
            'attn_decode_floor_s': 1.01e-05,
            'mla_up_compute_eff': 0.555,
            'mla_prefill_half_keys': 40.0,
            'mla_prefill_per_head_s': 1.5e-08,
            'mla_prefill_floor_s': 1.41e-05,
            'mla_decode_compute_eff': 0.513,
            'mla_decode_memory_eff': 0.729,
            'mla_decode_per_seq_s': 2.91e-08,
            'mla_decode_per_head_s': 1.3e-10,
            'mla_decode_floor_s': 1.06e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.568,
            'allreduce_latency_s': 5.66e-06,
            'allreduce_gpu_latency_s': 4.24e-07,
            'expert_compute_eff': 0.534,
            'expert_half_tokens': 208.0,
            'expert_memory_eff': 0.799,
            'expert_router_overhead_s': 1.3e-05,
            'expert_permute_s': 3.75e-12,
            'gemm_formats': (('fp8', 0.65, 222.0, 0.574, 5.74e-06, 8.72e-13), ('fp8_block', 0.681, 101.0, 0.443, 1.4e-05, 1.29e-12), ('fp4', 0.662, 245.0, 0.616, 5.29e-06, 9.75e-13)),
            'expert_formats': (('fp8', 0.411, 106.0, 0.826, 2.34e-05, 4.58e-12), ('fp8_block', 0.224, 59.6, 0.805, 2.8e-05, 8.5e-12), ('fp4', 0.324, 96.1, 0.753, 1.4e-05, 3.21e-12), ('mxfp4', 0.104, 23.7, 0.575, 1.52e-05, 7.45e-12), ('int4', 0.328, 41.3, 0.497, 2.88e-05, 3.77e-12)),
            'allreduce_links': (('pcie', 0.445, 4.42e-06, 4.17e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator sglang kernel tables of b200_sxm, b300_sxm, gb200, gb300, rtx_pro_6000_server',
        },
        'trtllm': {
            'gemm_compute_eff': 0.722,
            'gemm_half_tokens': 142.0,
            'gemm_memory_eff': 0.743,
            'kernel_floor_s': 2.18e-06,
            'attn_prefill_compute_eff': 0.539,
            'attn_prefill_half_keys': 794.0,
            'attn_floor_s': 1.46e-05,
            'attn_prefill_per_head_s': 1.71e-08,
            'mla_compute_eff': 0.569,
            'attn_decode_memory_eff': 0.932,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 7.24e-09,
            'attn_decode_per_head_s': 3.63e-10,
            'attn_decode_floor_s': 1.08e-05,
            'mla_up_compute_eff': 0.621,
            'mla_prefill_half_keys': 26.5,
            'mla_prefill_per_head_s': 1.62e-08,
            'mla_prefill_floor_s': 1.46e-05,
            'mla_decode_compute_eff': 0.552,
            'mla_decode_memory_eff': 0.728,
            'mla_decode_per_seq_s': 1.82e-08,
            'mla_decode_per_head_s': 1e-13,
            'mla_decode_floor_s': 1.07e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.549,
            'allreduce_latency_s': 4.46e-06,
            'allreduce_gpu_latency_s': 2.29e-07,
            'expert_compute_eff': 0.453,
            'expert_half_tokens': 104.0,
            'expert_memory_eff': 0.843,
            'expert_router_overhead_s': 2.24e-05,
            'expert_permute_s': 4.06e-12,
            'gemm_formats': (('fp8', 0.721, 174.0, 0.748, 1.42e-05, 1.2e-12), ('fp8_block', 0.65, 86.8, 0.432, 5.58e-06, 3.73e-13), ('fp4', 0.453, 27.0, 0.593, 8.61e-06, 8.21e-13)),
            'expert_formats': (('fp8', 0.451, 117.0, 0.824, 2.33e-05, 4.94e-12), ('fp8_block', 0.211, 29.1, 0.686, 2.38e-05, 2.72e-12), ('fp4', 0.408, 94.3, 0.745, 2.98e-05, 4.29e-12), ('mxfp4', 0.201, 66.2, 0.651, 1.71e-05, 5.26e-12), ('int4', 0.304, 36.7, 0.491, 2.94e-05, 3.78e-12)),
            'allreduce_links': (('pcie', 0.381, 6.67e-06, 3.3e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator trtllm kernel tables of b200_sxm, b300_sxm, gb200, gb300, rtx_pro_6000_server',
        },
        'vllm': {
            'gemm_compute_eff': 0.772,
            'gemm_half_tokens': 152.0,
            'gemm_memory_eff': 0.777,
            'kernel_floor_s': 2.16e-06,
            'attn_prefill_compute_eff': 0.61,
            'attn_prefill_half_keys': 240.0,
            'attn_floor_s': 1.06e-05,
            'attn_prefill_per_head_s': 1.57e-08,
            'mla_compute_eff': 0.561,
            'attn_decode_memory_eff': 0.938,
            'attn_decode_per_seq_s': 1.85e-10,
            'attn_decode_per_kv_head_s': 7.54e-09,
            'attn_decode_per_head_s': 8.94e-11,
            'attn_decode_floor_s': 8.81e-06,
            'mla_up_compute_eff': 0.602,
            'mla_prefill_half_keys': 32.7,
            'mla_prefill_per_head_s': 1.59e-08,
            'mla_prefill_floor_s': 1.42e-05,
            'mla_decode_compute_eff': 0.527,
            'mla_decode_memory_eff': 0.73,
            'mla_decode_per_seq_s': 2.85e-08,
            'mla_decode_per_head_s': 1.04e-10,
            'mla_decode_floor_s': 1.06e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.527,
            'allreduce_latency_s': 6.98e-06,
            'allreduce_gpu_latency_s': 1.7e-07,
            'expert_compute_eff': 0.442,
            'expert_half_tokens': 116.0,
            'expert_memory_eff': 0.828,
            'expert_router_overhead_s': 1.43e-05,
            'expert_permute_s': 4.15e-12,
            'gemm_formats': (('fp8', 0.866, 261.0, 0.73, 5.89e-06, 2.5e-12), ('fp8_block', 0.435, 20.6, 0.517, 1.03e-05, 1.47e-12), ('fp4', 0.53, 83.6, 0.623, 7.07e-06, 3.26e-13)),
            'expert_formats': (('fp8', 0.386, 107.0, 0.802, 1.49e-05, 3.62e-12), ('fp8_block', 0.223, 80.7, 1.21, 2.93e-05, 1.18e-11), ('fp4', 0.431, 161.0, 0.864, 1.73e-05, 3.9e-12), ('mxfp4', 0.113, 25.3, 0.71, 1.88e-05, 1.33e-11), ('int4', 0.0803, 7.97, 0.612, 5.99e-05, 4.72e-11)),
            'allreduce_links': (('pcie', 0.442, 4.22e-06, 4.1e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm kernel tables of b200_sxm, b300_sxm, gb200, gb300, rtx_pro_6000_server',
        },
    },
    'ada': {
        'all': {
            'gemm_compute_eff': 0.595,
            'gemm_half_tokens': 160.0,
            'gemm_memory_eff': 0.772,
            'kernel_floor_s': 2.07e-06,
            'attn_prefill_compute_eff': 0.442,
            'attn_prefill_half_keys': 233.0,
            'attn_floor_s': 8.13e-06,
            'attn_prefill_per_head_s': 7.54e-09,
            'mla_compute_eff': 0.485,
            'attn_decode_memory_eff': 0.841,
            'attn_decode_per_seq_s': 3.71e-09,
            'attn_decode_per_kv_head_s': 1.95e-09,
            'attn_decode_per_head_s': 5.5e-10,
            'attn_decode_floor_s': 7.74e-06,
            'mla_up_compute_eff': 0.522,
            'mla_prefill_half_keys': 48.9,
            'mla_prefill_per_head_s': 6.54e-09,
            'mla_prefill_floor_s': 9.34e-06,
            'mla_decode_compute_eff': 0.146,
            'mla_decode_memory_eff': 0.786,
            'mla_decode_per_seq_s': 1.7e-08,
            'mla_decode_per_head_s': 7.14e-11,
            'mla_decode_floor_s': 1e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.5,
            'allreduce_latency_s': 1e-05,
            'allreduce_gpu_latency_s': 1e-06,
            'expert_compute_eff': 0.513,
            'expert_half_tokens': 262.0,
            'expert_memory_eff': 0.825,
            'expert_router_overhead_s': 1.3e-05,
            'expert_permute_s': 2.11e-11,
            'gemm_formats': (('fp8', 0.528, 142.0, 0.743, 6.2e-06, 3.36e-12), ('fp8_block', 0.314, 56.8, 0.775, 3.36e-06, 2.03e-12)),
            'expert_formats': (('fp8', 0.552, 293.0, 0.789, 1.24e-05, 1.17e-11), ('fp8_block', 0.835, 440.0, 1.93, 2.36e-05, 5.87e-11), ('mxfp4', 0.558, 71.9, 2.24, 1.97e-05, 4.04e-11), ('int4', 0.312, 33.6, 0.917, 2e-05, 5.35e-11)),
            'allreduce_links': (('pcie', 0.129, 5.11e-06, 3.63e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm (pooled) kernel tables of l40s',
        },
        'sglang': {
            'gemm_compute_eff': 0.541,
            'gemm_half_tokens': 122.0,
            'gemm_memory_eff': 0.748,
            'kernel_floor_s': 2.13e-06,
            'attn_prefill_compute_eff': 0.44,
            'attn_prefill_half_keys': 98.8,
            'attn_floor_s': 5.19e-06,
            'attn_prefill_per_head_s': 2.14e-10,
            'mla_compute_eff': 0.0608,
            'attn_decode_memory_eff': 0.84,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 2.53e-09,
            'attn_decode_per_head_s': 1e-13,
            'attn_decode_floor_s': 5.47e-06,
            'mla_up_compute_eff': 0.857,
            'mla_prefill_half_keys': 6.17,
            'mla_prefill_per_head_s': 1.79e-08,
            'mla_prefill_floor_s': 9.31e-06,
            'mla_decode_compute_eff': 0.143,
            'mla_decode_memory_eff': 0.843,
            'mla_decode_per_seq_s': 2.08e-07,
            'mla_decode_per_head_s': 3.69e-08,
            'mla_decode_floor_s': 1.32e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.5,
            'allreduce_latency_s': 1e-05,
            'allreduce_gpu_latency_s': 1e-06,
            'expert_compute_eff': 0.262,
            'expert_half_tokens': 153.0,
            'expert_memory_eff': 0.828,
            'expert_router_overhead_s': 1.18e-05,
            'expert_permute_s': 3.18e-11,
            'gemm_formats': (('fp8', 0.485, 111.0, 0.735, 3.68e-06, 4e-12), ('fp8_block', 0.314, 56.8, 0.775, 3.36e-06, 2.03e-12)),
            'expert_formats': (('fp8', 0.552, 293.0, 0.789, 1.24e-05, 1.17e-11), ('fp8_block', 0.835, 440.0, 1.93, 2.36e-05, 5.87e-11), ('mxfp4', 0.53, 364.0, 1.31, 5.09e-06, 3.62e-11), ('int4', 0.302, 32.7, 0.912, 1.96e-05, 5.31e-11)),
            'allreduce_links': (('pcie', 0.119, 4.86e-06, 4.12e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator sglang kernel tables of l40s',
        },
        'trtllm': {
            'gemm_compute_eff': 0.599,
            'gemm_half_tokens': 169.0,
            'gemm_memory_eff': 0.827,
            'kernel_floor_s': 2.11e-06,
            'attn_prefill_compute_eff': 0.4,
            'attn_prefill_half_keys': 207.0,
            'attn_floor_s': 8.86e-06,
            'attn_prefill_per_head_s': 7.45e-09,
            'mla_compute_eff': 0.46,
            'attn_decode_memory_eff': 0.786,
            'attn_decode_per_seq_s': 4.37e-09,
            'attn_decode_per_kv_head_s': 1.33e-09,
            'attn_decode_per_head_s': 6.02e-10,
            'attn_decode_floor_s': 7.46e-06,
            'mla_up_compute_eff': 0.596,
            'mla_prefill_half_keys': 21.5,
            'mla_prefill_per_head_s': 1.06e-08,
            'mla_prefill_floor_s': 9.19e-06,
            'mla_decode_compute_eff': 0.99,
            'mla_decode_memory_eff': 0.786,
            'mla_decode_per_seq_s': 2.23e-08,
            'mla_decode_per_head_s': 6.18e-12,
            'mla_decode_floor_s': 9.01e-06,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.5,
            'allreduce_latency_s': 1e-05,
            'allreduce_gpu_latency_s': 1e-06,
            'expert_compute_eff': 0.432,
            'expert_half_tokens': 212.0,
            'expert_memory_eff': 0.806,
            'expert_router_overhead_s': 1.3e-05,
            'expert_permute_s': 1.22e-11,
            'gemm_formats': (('fp8', 0.527, 196.0, 0.864, 1.2e-05, 2.54e-13), ('fp8_block', 0.302, 43.8, 0.783, 3.25e-06, 1.13e-12)),
            'expert_formats': (('fp8', 0.523, 255.0, 0.796, 1.18e-05, 1.16e-11), ('fp8_block', 0.835, 440.0, 1.93, 2.36e-05, 5.87e-11), ('mxfp4', 0.558, 71.9, 2.24, 1.97e-05, 4.04e-11), ('int4', 0.312, 33.6, 0.917, 2e-05, 5.35e-11)),
            'allreduce_links': (('pcie', 0.157, 6.32e-06, 3.12e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator trtllm kernel tables of l40s',
        },
        'vllm': {
            'gemm_compute_eff': 0.652,
            'gemm_half_tokens': 157.0,
            'gemm_memory_eff': 0.819,
            'kernel_floor_s': 2.05e-06,
            'attn_prefill_compute_eff': 0.509,
            'attn_prefill_half_keys': 278.0,
            'attn_floor_s': 7.95e-06,
            'attn_prefill_per_head_s': 8.25e-09,
            'mla_compute_eff': 0.485,
            'attn_decode_memory_eff': 0.83,
            'attn_decode_per_seq_s': 1e-10,
            'attn_decode_per_kv_head_s': 2.22e-08,
            'attn_decode_per_head_s': 1e-13,
            'attn_decode_floor_s': 8.86e-06,
            'mla_up_compute_eff': 0.522,
            'mla_prefill_half_keys': 48.9,
            'mla_prefill_per_head_s': 6.54e-09,
            'mla_prefill_floor_s': 9.34e-06,
            'mla_decode_compute_eff': 0.146,
            'mla_decode_memory_eff': 0.786,
            'mla_decode_per_seq_s': 1.7e-08,
            'mla_decode_per_head_s': 7.14e-11,
            'mla_decode_floor_s': 1e-05,
            'elementwise_memory_eff': 0.8,
            'residual_add_memory_eff': 1.2,
            'embedding_memory_eff': 0.8,
            'allreduce_bus_eff': 0.5,
            'allreduce_latency_s': 1e-05,
            'allreduce_gpu_latency_s': 1e-06,
            'expert_compute_eff': 0.828,
            'expert_half_tokens': 422.0,
            'expert_memory_eff': 2.39,
            'expert_router_overhead_s': 1.94e-05,
            'expert_permute_s': 5.71e-11,
            'gemm_formats': (('fp8', 0.56, 177.0, 0.722, 6.37e-06, 3.33e-12), ('fp8_block', 0.421, 48.6, 0.242, 0.0001, 2.68e-12)),
            'expert_formats': (('fp8', 0.738, 389.0, 2.76, 1.79e-05, 5.89e-11), ('fp8_block', 0.835, 440.0, 1.93, 2.36e-05, 5.87e-11), ('mxfp4', 0.672, 86.2, 1.85, 1.96e-05, 4.65e-11), ('int4', 1.04, 114.0, 3.0, 3.37e-05, 7.65e-11)),
            'allreduce_links': (('pcie', 0.121, 4.78e-06, 3.6e-06),),
            'source': 'fitted by roofline_from_tables to AIConfigurator vllm kernel tables of l40s',
        },
    },
}
# END TODAY

# Catalog GPU -> the generation (architecture) whose "today" constants price it (efficiencies are fractions
# of each GPU's own spec-sheet peaks): the RTX PRO 6000 is a Blackwell part, the L40S and L4 Ada ones.
GENERATION: dict[str, str] = {
    "a100-80gb": "ampere", "a100-40gb": "ampere", "a40": "ampere",
    "h100-sxm": "hopper", "h100-pcie": "hopper", "h200": "hopper", "h20": "hopper",
    "b200": "blackwell", "b300": "blackwell", "gb200": "blackwell", "gb300": "blackwell", "rtx-pro-6000": "blackwell",
    "l40s": "ada", "l4": "ada",
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
    name = engine if isinstance(engine, str) else getattr(engine, "name", "")
    first = str(name).split("-")[0].lower()
    return first if first in KERNEL_BACKENDS else POOLED


def calibration_for(gpu_name: str, which: str = "2023", backend: str | None = None,
                    weight_format: str | None = None) -> RooflineCalibration:
    """The roofline calibration of a GPU: ``2023`` (Vidur/LLMServingSim profiles; the paper
    reproductions') or ``today`` (its generation's fit to AIConfigurator's kernel tables: ``backend``'s
    constants, :data:`POOLED` ones for None or a backend without its own), with ``weight_format``'s
    MoE expert lane (:meth:`RooflineCalibration.for_weights`) where given."""
    if which == "2023":
        cal = BY_GPU.get(gpu_name, DEFAULT)
        return cal.for_weights(weight_format) if weight_format else cal
    from simulator.config.errors import ConfigError

    if which != "today":
        raise ConfigError("replica.roofline_calibration", f"unknown calibration {which!r}",
                          f"use one of {', '.join(CALIBRATIONS)}")
    generation = GENERATION.get(gpu_name)
    if generation not in TODAY:
        have = sorted(g for g, gen in GENERATION.items() if gen in TODAY)
        raise ConfigError("replica.roofline_calibration", f"no 'today' calibration for GPU {gpu_name!r}",
                          f"use --roofline-calibration 2023, or a GPU of a measured generation: {', '.join(have)}")
    fits = TODAY[generation]
    cal = replace(BY_GPU.get(gpu_name, DEFAULT), **fits.get(backend or POOLED, fits[POOLED]))
    return cal.for_weights(weight_format) if weight_format else cal
