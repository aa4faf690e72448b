"""The roofline's "today" calibration: its efficiency constants fitted to AIConfigurator's kernel tables.

The 2023 calibration (:mod:`simulator.calibrate.fit_calibration`) was fitted to Vidur's and
LLMServingSim's 2023-24 profiles. This module fits the same kind of constants, in the runtime's
formulas (:class:`~simulator.costmodel.roofline.RooflineCostModel`, :mod:`simulator.costmodel.moe`),
to the per-op timings of today's vLLM, SGLang and TensorRT-LLM kernels in
``../shared/data/profiles/aiconfigurator`` (read its README), per GPU generation and engine backend:

- **generations** (:data:`GENERATIONS`, the issue's four architectures): Ampere (a100_sxm), Hopper
  (h100_sxm, h200_sxm), Blackwell (b200_sxm, b300_sxm, gb200, gb300 and the PCIe workstation part
  rtx_pro_6000_server), Ada (l40s). The efficiencies are fractions of each GPU's own spec-sheet
  peaks, so one set serves every GPU of a generation. (Until this revision Ada and the RTX PRO 6000
  were one "workstation" pair, each predicting the other across two architectures.)
- **backends** (:func:`fit_backends`): one set fitted to every backend's rows (``"all"``, a run that
  names no backend), then per backend a refit starting from it (their kernels differ by more than
  the fit's error: TensorRT-LLM's FP8 GEMMs are 1.5-1.9x vLLM's on Blackwell at decode sizes); a backend's stage with under
  :data:`MIN_FIT_ROWS` rows keeps the pooled constants. A run picks its backend's constants by
  ``--kernels`` (the tables' gaps), else its engine preset (:func:`~simulator.costmodel.calibration.roofline_backend`).
- **rows**: per system x backend x family x dtype, the kernel source the table model prices
  (:func:`~simulator.costmodel.aic.tables.read_priced_rows`: its own source, or another collector's rows of the
  same kernel where ``tables.LANE_DONORS`` names the lane; bf16 KV for attention), up to
  ``max_rows`` seeded rows, so each group weighs about the same.
- **stages**, each a robust least-squares fit (Cauchy loss on ``log(predicted / measured)``, :data:`LOSS`) of a few
  constants with the earlier stages' held fixed: (1) bf16 GEMMs: ``gemm_compute_eff``, ``gemm_half_tokens``,
  ``gemm_memory_eff``, ``kernel_floor_s``; then each low-precision lane (``GEMM_CLASS``: fp8, fp8_block, fp4,
  mxfp4 (w4a16 kernels), mxfp4_w4a8 (MXFP8 activations), int4) its own ``compute_eff``, ``half_tokens``, ``memory_eff``, ``floor_s`` and ``act_elem_s``
  (``gemm_formats``; the activation-quantisation kernel before an FP8/FP4 GEMM: a launch plus a cost per
  ``m x k`` activation element, without which small-``n x k`` GEMMs at many tokens are priced 20-40% fast);
  (2) attention, prefill and decode: ``attn_prefill_compute_eff`` with its ramp
  ``attn_prefill_half_keys`` (efficiency ``eff * q / (q + half)`` at ``q`` keys per query: short
  prompts do not fill the tensor cores), ``attn_prefill_per_head_s`` (per sequence and query head:
  256 prompts of 16 tokens take ~140 us on B200, 3x what their FLOPs and bytes say), ``attn_floor_s``
  (an attention kernel's smallest time, about 8 us today against a GEMM's 3-6 us), ``attn_decode_memory_eff``,
  ``attn_decode_per_seq_s``, decode's costs per (sequence, KV head) and per (sequence, query head)
  (``attn_decode_per_kv_head_s``, ``attn_decode_per_head_s``: a decode kernel's work items and reductions) and
  its own floor ``attn_decode_floor_s`` (sharing prefill's floor cost each family 2-3 points), in one of two
  forms (:data:`FORMS`; each fitted, the lower loss kept): the work items summed with the KV reads, or
  overlapping them (``attn_decode_overlap``: the larger of the two, then the floor; Ampere's and Blackwell's
  kernels take the second, most of Hopper's the first; decode's held-out median of group medians was 0.157
  summed everywhere, 0.130 overlapped everywhere, 0.130 chosen per fit); then MLA's own
  constants, none shared with GQA attention (sharing decode's per-sequence cost and floor was what kept MLA
  decode at 0.19 held out): prefill (non-absorbed) ``mla_compute_eff`` for the causal pairs with its ramp
  ``mla_prefill_half_keys``, ``mla_up_compute_eff`` for the context's kv_b up-projection, ``mla_prefill_per_head_s``
  and ``mla_prefill_floor_s``; decode (absorbed) ``mla_decode_compute_eff``, ``mla_decode_memory_eff`` (the
  latent cache), ``mla_decode_per_seq_s``, ``mla_decode_per_head_s`` and ``mla_decode_floor_s``; (3) the engines' custom all-reduce: ``allreduce_bus_eff``, ``allreduce_latency_s``; (4) fused MoE
  (the routed experts at the table's ``moe_tp x moe_ep`` split): the expert constants of
  :class:`~simulator.costmodel.moe.ExpertCalibration` and ``expert_permute_s`` (a cost per hidden element
  of every routed copy of a token entering the layer, tokens x top-k, whatever the EP split: without it, an EP
  rank's kernel at many tokens is priced 2-5x too fast; per token alone, models of top-k 1-4 came out
  20-30% slow and of top-k 16-22 25% fast above 4K tokens), the gated activation between the two GEMMs
  priced as the runtime prices it (``moe_act``: an element-wise kernel; the tables time it inside the fused
  op, and a fit without it left the runtime charging it twice) and the tables' routings (:data:`ROUTINGS`: the constants are the runtime's
  power_law_1.01, the other two related to it by a fitted EP-rank load), then each low-precision lane its own five (``expert_formats``; the
  runtime puts a replica's lane into the ``expert_*`` fields, :meth:`RooflineCalibration.for_weights`).
- **element-wise ops** have no tables: they take the table model's own treatment (AIConfigurator's
  ``bytes / (mem_bw x 0.8)``), and residual adds ride on the fused add-norm of a compiled engine
  (an efficiency of 1.2 makes the roofline's norm + residual traffic, ``4 + 6`` hidden-size bytes
  per token, cost what the table model's fused ``2 x 4`` costs at 0.8).
- CPU overheads and the send/recv latency are not kernel constants: "today" keeps the GPU's 2023 ones.

**Held out**: for a generation of several systems, each system is predicted by constants fitted
to the others (leave one GPU out, per backend and pooled); Ampere and Ada have one system each, so
their rows are split in two by a hash of their keys and each half is predicted by constants fitted
to the other (leave grid points out).

    python -m simulator.calibrate.roofline_from_tables            # fit, print held-out errors
    python -m simulator.calibrate.roofline_from_tables --write    # and write them (simulator/data/roofline_today.json)
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from simulator.costmodel.aic import tables as T
from simulator.costmodel.calibration import GEMM_CLASS, LANE_FALLBACK

GENERATIONS: dict[str, tuple[str, ...]] = {
    "ampere": ("a100_sxm",),
    "hopper": ("h100_sxm", "h200_sxm"),
    "blackwell": ("b200_sxm", "b300_sxm", "gb200", "gb300", "rtx_pro_6000_server"),
    "ada": ("l40s",),
}
# AIConfigurator system -> catalog GPU whose spec sheet the roofline divides by.
CATALOG_GPU = {"a100_sxm": "a100-80gb", "l40s": "l40s", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200",
               "gb200": "gb200", "b300_sxm": "b300", "gb300": "gb300", "rtx_pro_6000_server": "rtx-pro-6000"}
# Table dtype -> the roofline's --dtype (tables' dtypes the roofline cannot represent are skipped).
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "int4_wo": "int4",
          "w4a16_mxfp4": "mxfp4-w4a16", "w4a8_mxfp4_mxfp8": "mxfp4-w4a8"}
FAMILIES: dict[str, str] = {  # family -> table
    "gemm": "gemm", "attn_prefill": "context_attention", "attn_decode": "generation_attention",
    "mla_prefill": "context_mla", "mla_decode": "generation_mla", "moe": "moe", "allreduce": "custom_allreduce",
}
KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attn_prefill": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"),
    "attn_decode": ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim"),
    "mla_prefill": ("batch_size", "isl", "num_heads"),
    "mla_decode": ("batch_size", "isl", "step", "num_heads"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution"),
    "allreduce": ("message_size", "num_gpus"),
}
# Stages: (families pooled, constants fitted, initial values, bounds).
STAGES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("gemm",), ("gemm_compute_eff", "gemm_half_tokens", "gemm_memory_eff", "kernel_floor_s")),
    (("attn_prefill",), ("attn_prefill_compute_eff", "attn_prefill_half_keys", "attn_floor_s", "attn_prefill_per_head_s")),
    (("attn_decode",), ("attn_decode_memory_eff", "attn_decode_per_seq_s", "attn_decode_per_kv_head_s",
                        "attn_decode_per_head_s", "attn_decode_floor_s")),
    (("mla_prefill",), ("mla_compute_eff", "mla_prefill_half_keys", "mla_prefill_per_head_s", "mla_up_compute_eff",
                        "mla_prefill_floor_s")),
    (("mla_decode",), ("mla_decode_compute_eff", "mla_decode_memory_eff", "mla_decode_per_seq_s", "mla_decode_per_head_s",
                       "mla_decode_floor_s")),
    (("allreduce",), ("allreduce_bus_eff", "allreduce_latency_s", "allreduce_gpu_latency_s")),
    (("moe",), ("expert_compute_eff", "expert_half_tokens", "expert_memory_eff", "expert_router_overhead_s",
                "expert_permute_s", "expert_balanced_ep_exp", "expert_skewed_ep_exp")),
)
INITIAL = {"gemm_compute_eff": 0.7, "gemm_half_tokens": 100.0, "gemm_memory_eff": 0.7, "kernel_floor_s": 3e-6,
           "attn_prefill_compute_eff": 0.4, "attn_prefill_half_keys": 64.0, "attn_floor_s": 8e-6,
           "mla_compute_eff": 0.4, "attn_decode_memory_eff": 0.6, "attn_decode_per_seq_s": 2e-7, "attn_prefill_per_head_s": 1e-8,
           "allreduce_bus_eff": 0.5, "allreduce_latency_s": 1e-5, "allreduce_gpu_latency_s": 1e-6, "expert_compute_eff": 0.6,
           "expert_half_tokens": 100.0, "expert_memory_eff": 0.6, "gemm_act_elem_s": 1e-12, "expert_router_overhead_s": 5e-6, "expert_permute_s": 1e-11,
           "attn_decode_per_kv_head_s": 1e-8, "attn_decode_per_head_s": 1e-9, "attn_decode_floor_s": 8e-6,
           "mla_prefill_half_keys": 64.0, "mla_prefill_per_head_s": 1e-8, "mla_up_compute_eff": 0.5, "mla_prefill_floor_s": 8e-6,
           "mla_decode_compute_eff": 0.4, "mla_decode_memory_eff": 0.6, "mla_decode_per_seq_s": 2e-7,
           "mla_decode_per_head_s": 1e-8, "mla_decode_floor_s": 8e-6, "attn_decode_overlap": False,
           "expert_balanced_ep_exp": 0.1, "expert_skewed_ep_exp": 0.05}
# Stages fitted in each of two forms, the one of the lower loss kept: (flag, its values). Decode attention's
# work items summed with its KV reads or overlapping them (RooflineCalibration.attn_decode_overlap).
FORMS = {"attn_decode": ("attn_decode_overlap", (False, True))}
BOUNDS = {"gemm_half_tokens": (0.1, 1e5), "kernel_floor_s": (1e-8, 1e-4), "attn_prefill_half_keys": (1e-3, 1e6),
          "attn_floor_s": (1e-8, 1e-4), "attn_decode_per_seq_s": (1e-10, 1e-4), "attn_prefill_per_head_s": (1e-13, 1e-5), "gemm_act_elem_s": (1e-18, 1e-8),
          "allreduce_latency_s": (1e-7, 1e-3), "allreduce_gpu_latency_s": (1e-10, 1e-4), "expert_half_tokens": (0.1, 1e5), "expert_router_overhead_s": (1e-9, 1e-3), "expert_permute_s": (1e-16, 1e-8),
          "attn_decode_per_kv_head_s": (1e-13, 1e-5), "attn_decode_per_head_s": (1e-13, 1e-5), "attn_decode_floor_s": (1e-8, 1e-4),
          "mla_prefill_half_keys": (1e-3, 1e6), "mla_prefill_per_head_s": (1e-13, 1e-5), "mla_prefill_floor_s": (1e-8, 1e-4),
          "mla_decode_per_seq_s": (1e-10, 1e-4), "mla_decode_per_head_s": (1e-13, 1e-5), "mla_decode_floor_s": (1e-8, 1e-4),
          "expert_balanced_ep_exp": (1e-4, 2.0), "expert_skewed_ep_exp": (1e-4, 2.0)}
EFF_BOUNDS = (0.01, 3.0)
# Element-wise constants: the table model's treatment (see the module docstring), not fitted.
ELEMENTWISE = {"elementwise_memory_eff": 0.8, "residual_add_memory_eff": 1.2, "embedding_memory_eff": 0.8}
MAX_ROWS = 2000
# A refinement's stage (a backend's fit from the pooled constants) with fewer rows keeps the pooled constants.
MIN_FIT_ROWS = 60
# Robust loss on log(predicted / measured) per stage: Cauchy fits the bulk of a grid and lets its
# outliers (kernel-selection steps, a backend's slow kernel) go (held-out medians 1-4 points lower than
# soft-L1's on Hopper and Blackwell); the all-reduce's few rows per group fit better with soft-L1.
LOSS = {"allreduce": ("soft_l1", 0.1)}


@dataclass
class Group:
    """Measured rows of one system x backend x family x dtype, with the roofline's physical terms."""

    system: str
    backend: str
    family: str
    dtype: str
    source: str
    keys: dict[str, np.ndarray]
    measured_s: np.ndarray
    terms: dict[str, np.ndarray]

    def subset(self, mask: np.ndarray) -> Group:
        return Group(self.system, self.backend, self.family, self.dtype, self.source,
                     {k: v[mask] for k, v in self.keys.items()}, self.measured_s[mask],
                     {k: (v[mask] if np.ndim(v) else v) for k, v in self.terms.items()})


# -- the roofline's formulas at table shapes ------------------------------------------------------------
def _replica(system: str, dtype: str, model: str = "llama-3.1-8b", tp: int = 1) -> Any:
    from simulator.config.run_config import ReplicaConfig

    return ReplicaConfig(model=model, gpu=CATALOG_GPU[system], tp=tp, dtype=DTYPES[dtype])


def terms_for(system: str, family: str, dtype: str, keys: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The roofline's calibration-free quantities of each row (FLOPs, bytes, peaks, bandwidths), or
    None where the roofline cannot represent the group (a dtype the GPU cannot run)."""
    from simulator.config.errors import ConfigError

    f = {k: np.asarray(v, dtype=np.float64) for k, v in keys.items() if k != "distribution"}
    try:
        r = _replica(system, dtype if family in ("gemm", "moe") else "bfloat16",
                     model="deepseek-v3" if family.startswith("mla") else "llama-3.1-8b")
    except ConfigError:
        return None
    g = r.gpu_spec
    db = float(r.dtype_bytes)
    # The tables' dtypes map to explicit kernel formats (DTYPES), so the format's own peak is the kernel's
    # (a run's plain mxfp4 is resolved by precision.kernel_format first).
    peak, weight_only = r.weight_format.peak_flops(g), r.weight_format.runs_weight_only(g)
    out: dict[str, Any] = {"bw": g.hbm_bytes_per_s, "bf16": g.bf16_flops}
    if family == "gemm":
        m, n, k = f["m"], f["n"], f["k"]
        out.update(m=m, flops=2.0 * m * k * n, bytes=k * n * r.weight_bytes + m * k * db + m * n * db,
                   peak=peak, knee=(r.weight_bytes / db) if weight_only else 1.0, act=m * k,
                   prefix=_gemm_prefix(GEMM_CLASS[r.dtype]))
    elif family in ("attn_prefill", "attn_decode"):
        b, heads, kvh, hd = f["batch_size"], f["num_heads"], f["num_key_value_heads"], f["head_dim"]
        s = f["isl"] + (f["step"] if family == "attn_decode" else 0.0)
        kvb = 2 * kvh * hd * db
        if family == "attn_prefill":
            out.update(flops=4.0 * heads * hd * (b * s * (s + 1) / 2), bytes=b * s * kvb + 2 * b * s * heads * hd * db,
                       keys=(s + 1) / 2, seq_heads=b * heads)
        else:
            out.update(b=b, bytes=b * s * kvb + 2 * b * heads * hd * db, seq_kv_heads=b * kvh, seq_heads=b * heads)
    elif family in ("mla_prefill", "mla_decode"):
        m = r.model_spec
        b, heads = f["batch_size"], f["num_heads"]
        s = f["isl"] + (f["step"] if family == "mla_decode" else 0.0)
        kvb = m.kv_bytes_per_token_per_gpu_layer(db, 1)
        kv = b * s
        if family == "mla_prefill":
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            pair_flops = 2.0 * heads * (qk + m.v_head_dim) * (b * s * (s + 1) / 2)
            up_flops = 2.0 * kv * m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
            out.update(flops=pair_flops + up_flops, pair_flops=pair_flops, up_flops=up_flops,
                       bytes=kv * kvb + 2 * kv * heads * qk * db, keys=(s + 1) / 2, seq_heads=b * heads)
        else:
            out.update(b=b, flops=2.0 * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * kv,
                       bytes=kv * kvb + 2 * b * heads * (m.kv_lora_rank + m.qk_rope_head_dim) * db, seq_heads=b * heads)
    elif family == "moe":
        from simulator.costmodel.moe import expected_experts_touched

        t, h, inter, topk, e = f["num_tokens"], f["hidden_size"], f["inter_size"], f["topk"], f["num_experts"]
        mtp, mep = f["moe_tp_size"], f["moe_ep_size"]
        f_local = inter / mtp
        route = routing_codes(keys.get("distribution"), len(t))
        touched = np.asarray(expected_experts_touched(t, e, topk), dtype=np.float64)  # arrays of E and k
        # "balanced" rows give every expert an equal share: a batch touches min(E, n x k) distinct experts
        touched = np.where(route == BALANCED, np.minimum(e, t * topk), touched) / mep
        per_expert = np.where(touched > 0, t * topk / mep / np.where(touched > 0, touched, 1.0), 0.0)
        # token_hidden: the hidden elements of every routed copy of a token (t x top-k), which the kernels'
        # permutation and un-permutation move whatever the EP split; act_bytes: the gated activation between
        # the two expert GEMMs (moe.moe_token_ops' moe_act, an element-wise kernel over this rank's copies)
        out.update(touched=touched, per_expert=per_expert, flops=2.0 * per_expert * h * 3 * f_local,
                   token_hidden=t * topk * h, act_bytes=t * topk / mep * 3 * f_local * db,
                   bytes=3 * h * f_local * r.weight_bytes + per_expert * (2 * h + 3 * f_local) * db, peak=peak,
                   prefix=_expert_prefix(GEMM_CLASS[r.dtype]), route=route, mep=mep,
                   weight_bytes=3 * h * f_local * r.weight_bytes, token_bytes=(2 * h + 3 * f_local) * db)
    elif family == "allreduce":
        from dataclasses import replace

        from simulator.costmodel.roofline import RooflineCostModel

        tp = f["num_gpus"]
        link = np.empty_like(tp)
        kinds = set()
        for n in np.unique(tp):
            rf = RooflineCostModel(replace(_replica(system, "bfloat16", "llama-3.1-70b"), tp=int(n)), table_tokens=1)
            link[tp == n] = rf.tp_link_bytes_per_s
            kinds.add(rf.tp_link_kind)
        # PCIe rings (no NVLink) have their own constants (allreduce_links); a group is one system's, one kind
        prefix = "allreduce_pcie_" if kinds == {"pcie"} else "allreduce_"
        out.update(volume=2.0 * (tp - 1) / tp * f["message_size"] * db, link=link, gpus=tp, prefix=prefix)
    return out


# The MoE tables' routings (their ``distribution`` key). The runtime prices MoE at AIConfigurator's default
# routing, power_law_1.01 (``aic.model.MOE_ROUTING``; ``--moe-imbalance`` 1), so the fitted expert constants are
# that routing's; the other two enter the fit with an EP rank's load relative to it, ``ep ** -a`` (balanced: every
# expert an equal share, min(E, n x k) touched) and ``ep ** b`` (power_law_1.2), ``a`` and ``b`` fitted with the
# expert constants (fit-only: they describe the tables, not a run). Pooled as one routing, the EP ranks' rows
# at thousands of tokens came out 15-38% slow for balanced routing and 10-34% fast for power_law_1.2.
ROUTINGS = {"balanced": 0, "power_law_1.01": 1, "power_law_1.2": 2}
BALANCED, REFERENCE, SKEWED = 0, 1, 2


def routing_codes(distribution: Any, n: int) -> np.ndarray:
    """Each row's :data:`ROUTINGS` code (rows without a ``distribution``: the runtime's reference routing)."""
    if distribution is None:
        return np.full(n, REFERENCE)
    return np.array([ROUTINGS.get(str(d), REFERENCE) for d in np.asarray(distribution)], dtype=np.int64)


def predict(family: str, t: dict[str, Any], c: dict[str, float]) -> np.ndarray:
    """The roofline's seconds for rows with terms ``t`` under constants ``c`` (RooflineCalibration
    field names, plus ``expert_*`` for MoE): the same formulas as the runtime model."""
    floor = c["kernel_floor_s"]
    if family == "gemm":  # the dtype class's curve where the constants have one (RooflineCalibration.gemm_constants)
        p = _lane(t["prefix"], c, "gemm_")
        eff = c[f"{p}compute_eff"] * t["m"] / (t["m"] + c[f"{p}half_tokens"] * t["knee"])
        gemm_floor = floor if p == "gemm_" else c[f"{p}floor_s"] + t["act"] * c.get(f"{p}act_elem_s", 0.0)
        return np.maximum(t["flops"] / (t["peak"] * eff), t["bytes"] / (t["bw"] * c[f"{p}memory_eff"])) + gemm_floor
    attn_floor = c["kernel_floor_s"] if c.get("attn_floor_s") is None else c["attn_floor_s"]
    mla_eff = c["attn_prefill_compute_eff"] if c.get("mla_compute_eff") is None else c["mla_compute_eff"]
    if family == "mla_prefill" and c.get("mla_up_compute_eff") is not None:  # moe.mla_attention_prefill's two parts
        eff = mla_eff * (t["keys"] / (t["keys"] + c["mla_prefill_half_keys"]) if c.get("mla_prefill_half_keys") else 1.0)
        compute = t["pair_flops"] / (t["bf16"] * eff) + t["up_flops"] / (t["bf16"] * c["mla_up_compute_eff"])
        floor = attn_floor if c.get("mla_prefill_floor_s") is None else c["mla_prefill_floor_s"]
        return (np.maximum(compute, t["bytes"] / (t["bw"] * c["gemm_memory_eff"])) + floor
                + t["seq_heads"] * c.get("mla_prefill_per_head_s", 0.0))
    if family == "mla_decode" and c.get("mla_decode_memory_eff") is not None:  # moe.mla_attention_decode's own
        eff = mla_eff if c.get("mla_decode_compute_eff") is None else c["mla_decode_compute_eff"]
        floor = attn_floor if c.get("mla_decode_floor_s") is None else c["mla_decode_floor_s"]
        return (np.maximum(t["flops"] / (t["bf16"] * eff), t["bytes"] / (t["bw"] * c["mla_decode_memory_eff"]))
                + t["b"] * c.get("mla_decode_per_seq_s", 0.0) + t["seq_heads"] * c.get("mla_decode_per_head_s", 0.0)
                + floor)
    if family in ("attn_prefill", "mla_prefill"):
        eff = mla_eff if family == "mla_prefill" else c["attn_prefill_compute_eff"]
        if c.get("attn_prefill_half_keys") and family == "attn_prefill":  # RooflineCalibration.prefill_compute_eff
            eff = eff * t["keys"] / (t["keys"] + c["attn_prefill_half_keys"])
        per_head = t["seq_heads"] * c.get("attn_prefill_per_head_s", 0.0) if family == "attn_prefill" else 0.0
        return (np.maximum(t["flops"] / (t["bf16"] * eff), t["bytes"] / (t["bw"] * c["gemm_memory_eff"])) + attn_floor
                + per_head)
    if family == "attn_decode":  # RooflineCostModel.decode_seq_s, attn_decode_floor and decode_overlap
        floor = attn_floor if c.get("attn_decode_floor_s") is None else c["attn_decode_floor_s"]
        read = t["bytes"] / (t["bw"] * c["attn_decode_memory_eff"])
        items = (t["b"] * c["attn_decode_per_seq_s"] + t["seq_kv_heads"] * c.get("attn_decode_per_kv_head_s", 0.0)
                 + t["seq_heads"] * c.get("attn_decode_per_head_s", 0.0))
        return (np.maximum(read, items) if c.get("attn_decode_overlap") else read + items) + floor
    if family == "mla_decode":
        return (np.maximum(t["flops"] / (t["bf16"] * mla_eff), t["bytes"] / (t["bw"] * c["attn_decode_memory_eff"]))
                + t["b"] * c["attn_decode_per_seq_s"] + attn_floor)
    if family == "allreduce":  # the link kind's constants where the constants have them (allreduce_links)
        p = _lane(t.get("prefix", "allreduce_"), c, "allreduce_", "bus_eff")
        return (t["volume"] / (t["link"] * c[f"{p}bus_eff"]) + c[f"{p}latency_s"]
                + (t["gpus"] - 2) * c.get(f"{p}gpu_latency_s", 0.0))
    if family == "moe":  # the dtype lane's expert constants where the constants have them (expert_formats)
        p = _lane(t.get("prefix", "expert_"), c, "expert_")
        pe = t["per_expert"]
        if "route" in t and c.get("expert_balanced_ep_exp") is not None:  # the tables' other routings (ROUTINGS)
            load = np.where(t["route"] == BALANCED, t["mep"] ** -c["expert_balanced_ep_exp"],
                            np.where(t["route"] == SKEWED, t["mep"] ** c["expert_skewed_ep_exp"], 1.0))
            pe = pe * load
            t = {**t, "flops": t["flops"] * load, "bytes": t["weight_bytes"] + pe * t["token_bytes"]}
        eff = c[f"{p}compute_eff"] * pe / (pe + c[f"{p}half_tokens"])
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(pe > 0, t["flops"] / (t["peak"] * eff), 0.0)
        memory = t["bytes"] / (t["bw"] * c[f"{p}memory_eff"])
        act = t["act_bytes"] / (t["bw"] * ELEMENTWISE["elementwise_memory_eff"]) + floor
        return (t["touched"] * np.maximum(compute, memory) + 2 * floor + c[f"{p}router_overhead_s"]
                + t["token_hidden"] * c.get(f"{p}permute_s", 0.0) + act)
    raise ValueError(family)


def _lane(prefix: str, c: dict[str, float], bf16: str, probe: str = "compute_eff") -> str:
    """The prefix of the constants pricing a lane: its own, else its LANE_FALLBACK's, else bf16's."""
    if f"{prefix}{probe}" in c:
        return prefix
    for lane, fallback in LANE_FALLBACK.items():
        if prefix.endswith(f"_{lane}_") and f"{bf16}{fallback}_compute_eff" in c:
            return f"{bf16}{fallback}_"
    return bf16


def _gemm_prefix(cls: str) -> str:
    """Constants-dict prefix of a GEMM class's curve: ``gemm_`` for bf16 (the base fields), else ``gemm_<cls>_``."""
    return "gemm_" if cls == "bf16" else f"gemm_{cls}_"


def _expert_prefix(cls: str) -> str:
    """Constants-dict prefix of a dtype lane's MoE expert constants: ``expert_`` for bf16, else ``expert_<cls>_``."""
    return "expert_" if cls == "bf16" else f"expert_{cls}_"


def constants_of(cal: Any) -> dict[str, float]:
    """A RooflineCalibration's constants as :func:`predict` reads them (expert constants: the
    calibration's own, else its dense-GEMM ones and the 2023 router cost, as moe.expert_calibration)."""
    from simulator.costmodel.moe import _H100_EXPERTS

    skip = ("source", "gemm_formats", "expert_formats", "allreduce_links")
    c = {f.name: getattr(cal, f.name) for f in fields(cal) if f.name not in skip}
    for cls, *curve in cal.gemm_formats:
        c.update({_gemm_prefix(cls) + k: v for k, v in zip(LANE_FIELDS["gemm"], curve, strict=True)})
    for cls, *curve in cal.expert_formats:
        c.update({_expert_prefix(cls) + k: v for k, v in zip(LANE_FIELDS["moe"], curve, strict=True)})
    for kind, *curve in cal.allreduce_links:
        c.update({f"allreduce_{kind}_" + k: v for k, v in zip(LANE_FIELDS["allreduce"], curve, strict=True)})
    if c.get("expert_compute_eff") is None:
        c.update(expert_compute_eff=cal.gemm_compute_eff, expert_half_tokens=cal.gemm_half_tokens,
                 expert_memory_eff=cal.gemm_memory_eff, expert_router_overhead_s=_H100_EXPERTS.router_overhead_s)
    return c


# -- rows ------------------------------------------------------------------------------------------------
def load_groups(system: str, backend: str, family: str, root: str | Path | None = None,
                max_rows: int | None = MAX_ROWS, seed: int = 0) -> list[Group]:
    """The measured rows of one system x backend x family, one :class:`Group` per dtype the roofline represents."""
    table = FAMILIES[family]
    ref = T.find_table(system, backend, table, root)
    if ref is None:
        return []
    attention = family.startswith(("attn", "mla"))
    extra: tuple = (("kv_cache_dtype", "==", "bfloat16"),) if attention else ()
    out = []
    for dtype in T.dtypes_of(ref):
        if family in ("gemm", "moe") and dtype not in DTYPES:
            continue
        if family not in ("gemm", "moe") and dtype not in ("bfloat16", "float16"):
            continue
        cols = (*KEYS[family], "latency", *(("window_size",) if attention else ()))
        src, d, _, _ = T.read_priced_rows(ref, dtype, cols, extra, root, warm="drop")  # tables.cold_cache
        if src is None:
            continue
        keep = np.ones(len(d["latency"]), dtype=bool)
        if attention and d.get("window_size") is not None:
            keep &= d["window_size"] == 0
        keep &= np.asarray(d["latency"], dtype=np.float64) > 0
        idx = np.flatnonzero(keep)
        if max_rows is not None and len(idx) > max_rows:
            idx = np.sort(np.random.default_rng(seed).choice(idx, max_rows, replace=False))
        keys = {k: d[k][idx] for k in KEYS[family] if d.get(k) is not None}
        if "step" in keys:  # a decode row's KV length, as the held-out report keys it (length, step 0)
            keys["isl"], keys["step"] = keys["isl"] + keys["step"], np.zeros_like(keys["step"])
        terms = terms_for(system, family, dtype, keys)
        if terms is None or not len(idx):
            continue
        out.append(Group(system, backend, family, dtype, src, keys, np.asarray(d["latency"], dtype=np.float64)[idx] * 1e-3,
                         terms))
    return out


def load_generation(generation: str, root: str | Path | None = None, max_rows: int | None = MAX_ROWS,
                    progress: bool = False) -> list[Group]:
    groups = []
    for system in GENERATIONS[generation]:
        for backend in T.BACKENDS:
            for family in FAMILIES:
                groups += load_groups(system, backend, family, root, max_rows)
            if progress:
                print(f"read {system} {backend}", file=sys.stderr)
    return groups


# -- the fit ---------------------------------------------------------------------------------------------
def _bounds(name: str) -> tuple[float, float]:
    if name in BOUNDS:
        return BOUNDS[name]
    for suffix, like in (("half_tokens", "gemm_half_tokens"), ("floor_s", "kernel_floor_s"), ("act_elem_s", "gemm_act_elem_s"),
                         ("gpu_latency_s", "allreduce_gpu_latency_s"), ("latency_s", "allreduce_latency_s"),
                         ("router_overhead_s", "expert_router_overhead_s"), ("permute_s", "expert_permute_s")):
        if name.endswith(suffix):
            return BOUNDS[like]
    return EFF_BOUNDS


# A dtype lane's constants: (family, the lane's fields, the base fields they start from).
LANE_FIELDS = {"gemm": ("compute_eff", "half_tokens", "memory_eff", "floor_s", "act_elem_s"),
               "moe": ("compute_eff", "half_tokens", "memory_eff", "router_overhead_s", "permute_s"),
               "allreduce": ("bus_eff", "latency_s", "gpu_latency_s")}


BASE_PREFIX = {"gemm": "gemm_", "moe": "expert_", "allreduce": "allreduce_"}  # a family's base (bf16) constants


def _lane_base(family: str, prefix: str, name: str) -> str:
    """The bf16 constant a lane's ``name`` starts from (a GEMM lane's floor: ``kernel_floor_s``)."""
    rest = name[len(prefix):]
    if family == "gemm":
        return {"floor_s": "kernel_floor_s", "act_elem_s": "gemm_act_elem_s"}.get(rest, "gemm_" + rest)
    return BASE_PREFIX[family] + rest


def fit(groups: list[Group], base: dict[str, float] | None = None) -> dict[str, float]:
    """Constants fitted to ``groups`` stage by stage (:data:`STAGES`, then each low-precision lane's
    GEMM and MoE constants with the bf16 ones held); a stage whose families have no rows keeps
    ``base``'s values (default: :data:`INITIAL`)."""
    from scipy.optimize import least_squares

    c = dict(INITIAL if base is None else base)
    c.update(ELEMENTWISE)
    stages: list[tuple[tuple[str, ...], tuple[str, ...]]] = list(STAGES)
    for family, bf16 in BASE_PREFIX.items():
        if family not in LANE_FIELDS:
            continue
        lanes = sorted({g.terms["prefix"] for g in groups if g.family == family} - {bf16})
        at = 1 if family == "gemm" else len(stages)
        for p in reversed(lanes):  # each low-precision lane's own curve, after bf16's
            stages.insert(at, ((family, p), tuple(p + f for f in LANE_FIELDS[family])))
    for families, names in stages:
        lane = families[0] in LANE_FIELDS and len(families) > 1
        if families[0] in LANE_FIELDS:  # a dtype lane: its rows only
            prefix = families[1] if lane else BASE_PREFIX[families[0]]
            used = [g for g in groups if g.family == families[0] and g.terms["prefix"] == prefix]
        else:
            used = [g for g in groups if g.family in families]
        if sum(len(g.measured_s) for g in used) < (MIN_FIT_ROWS if base is not None else 1):
            continue  # a refinement (a backend's) with too few rows keeps the base's constants
        if lane:  # a lane's curve starts from bf16's
            for n in names:
                c.setdefault(n, c[_lane_base(families[0], families[1], n)])
        lo = np.log([_bounds(n)[0] for n in names])
        hi = np.log([_bounds(n)[1] for n in names])
        x0 = np.clip(np.log([c[n] for n in names]), lo + 1e-9, hi - 1e-9)

        def residuals(x: np.ndarray, used: list[Group] = used, names: tuple[str, ...] = names) -> np.ndarray:
            trial = {**c, **dict(zip(names, np.exp(x), strict=True))}
            return np.concatenate([np.log(predict(g.family, g.terms, trial) / g.measured_s) for g in used])

        loss, scale = LOSS.get(families[0], ("cauchy", 0.02))
        flag, values = FORMS.get(families[0], (None, (None,)))
        best = None
        for value in values:  # a stage with a choice of form: each fitted from the same start, the lower loss kept
            if flag is not None:
                c[flag] = value
            res = least_squares(residuals, x0, bounds=(lo, hi), loss=loss, f_scale=scale, x_scale=1.0)
            if best is None or res.cost < best[0]:
                best = (res.cost, value, res.x)
        if flag is not None:
            c[flag] = best[1]
        c.update(dict(zip(names, np.exp(best[2]).tolist(), strict=True)))
    return c


POOLED = "all"  # the constants of every backend's rows together: a run that names no engine backend


def fit_backends(groups: list[Group], base: dict[str, float] | None = None) -> dict[str, dict[str, float]]:
    """``{"all": constants fitted to every backend's rows, backend: constants fitted to that backend's
    rows starting from the pooled ones}`` (a family a backend has no rows for keeps the pooled values)."""
    pooled = fit(groups, base)
    out = {POOLED: pooled}
    if not PER_BACKEND:
        return out
    for backend in sorted({g.backend for g in groups}):
        out[backend] = fit([g for g in groups if g.backend == backend], pooled)
    return out


PER_BACKEND = True


def errors(groups: list[Group], constants: dict[str, float]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        err = np.abs(predict(g.family, g.terms, constants) / g.measured_s - 1.0)
        rows.append({"gpu": g.system, "backend": g.backend, "family": g.family, "dtype": g.dtype, "points": len(err),
                     "median_err": float(np.median(err)), "p95_err": float(np.quantile(err, 0.95))})
    return rows


def _half(g: Group) -> np.ndarray:
    """A deterministic split of a group's rows by a hash of their keys (grid points left out)."""
    h = np.zeros(len(g.measured_s), dtype=np.uint64)
    for k in sorted(g.keys):
        v = g.keys[k]
        v = np.unique(v.astype(str), return_inverse=True)[1] if v.dtype.kind in "OUS" else v.astype(np.float64)
        h = (h * np.uint64(1000003) + np.asarray(v * 7919, dtype=np.float64).astype(np.uint64)) % np.uint64(2**61 - 1)
    return (h * np.uint64(2654435761) >> np.uint64(7)) % np.uint64(2) == 0


Folds = dict[tuple[str, int], dict[str, dict[str, float]]]


def heldout_constants(generation: str, groups: list[Group]) -> Folds:
    """Constants each held-out part is predicted with (:func:`fit_backends`' per backend and pooled):
    ``(system, -1)`` fitted to the generation's other systems, or, for a one-system generation,
    ``(system, half)`` fitted to the other half of its grid points."""
    systems = GENERATIONS[generation]
    out = {}
    if len(systems) > 1:
        for s in systems:
            out[(s, -1)] = fit_backends([g for g in groups if g.system != s])
    else:
        for half in (0, 1):
            train = [g.subset(_half(g) != bool(half)) for g in groups]
            out[(systems[0], half)] = fit_backends([g for g in train if len(g.measured_s)])
    return out


def _fold_predict(g: Group, folds: Folds, backend: str) -> np.ndarray:
    """Held-out seconds of ``g``'s rows under ``backend``'s constants (the pooled ones where it has none)."""
    def one(fold: dict[str, dict[str, float]]) -> np.ndarray:
        return predict(g.family, g.terms, fold.get(backend, fold[POOLED]))

    if (g.system, -1) in folds:
        return one(folds[(g.system, -1)])
    return np.where(_half(g), one(folds[(g.system, 0)]), one(folds[(g.system, 1)]))


def heldout_errors(generation: str, groups: list[Group], folds: Folds) -> list[dict[str, Any]]:
    """Per group: the held-out error of its backend's constants (``today_*``) and of the pooled ones."""
    rows = []
    for g in groups:
        row = {"gpu": g.system, "backend": g.backend, "family": g.family, "dtype": g.dtype, "points": len(g.measured_s)}
        for name, backend in (("today", g.backend), ("pooled", POOLED)):
            err = np.abs(_fold_predict(g, folds, backend) / g.measured_s - 1.0)
            row.update({f"{name}_median_err": float(np.median(err)), f"{name}_p95_err": float(np.quantile(err, 0.95))})
        rows.append(row)
    return rows


def predict_heldout(system: str, family: str, dtype: str, frame: Any, folds: Folds, backend: str = POOLED) -> np.ndarray:
    """The held-out recalibrated roofline's seconds (``backend``'s constants) for rows of a pandas
    ``frame`` holding the table's keys (attention: ``length`` for ``isl + step``), as :func:`heldout_errors`."""
    keys = {k: frame[k].to_numpy() for k in KEYS[family] if k in frame}
    if family.startswith(("attn", "mla")):
        keys["isl"] = frame["length"].to_numpy()
        keys["step"] = np.zeros(len(frame))
    if family in ("gemm", "moe") and dtype not in DTYPES or not len(frame):
        return np.full(len(frame), np.nan)
    t = terms_for(system, family, dtype, keys)
    if t is None:
        return np.full(len(frame), np.nan)
    return _fold_predict(Group(system, backend, family, dtype, "", keys, np.ones(len(frame)), t), folds, backend)


# -- writing the constants -------------------------------------------------------------------------------
WRITTEN = ("gemm_compute_eff", "gemm_half_tokens", "gemm_memory_eff", "kernel_floor_s", "attn_prefill_compute_eff",
           "attn_prefill_half_keys", "attn_floor_s", "attn_prefill_per_head_s", "mla_compute_eff",
           "attn_decode_memory_eff", "attn_decode_per_seq_s", "attn_decode_per_kv_head_s", "attn_decode_per_head_s",
           "attn_decode_floor_s", "mla_up_compute_eff", "mla_prefill_half_keys", "mla_prefill_per_head_s",
           "mla_prefill_floor_s", "mla_decode_compute_eff", "mla_decode_memory_eff", "mla_decode_per_seq_s",
           "mla_decode_per_head_s", "mla_decode_floor_s", "elementwise_memory_eff", "residual_add_memory_eff",
           "embedding_memory_eff", "allreduce_bus_eff", "allreduce_latency_s", "allreduce_gpu_latency_s",
           "expert_compute_eff",
           "expert_half_tokens", "expert_memory_eff", "expert_router_overhead_s", "expert_permute_s")


LANES = ("fp8", "fp8_block", "fp4", "mxfp4", "mxfp4_w4a8", "int4")  # GEMM_CLASS values other than bf16, in writing order


def _rounded(v: float) -> float:
    return float(f"{v:.3g}")


def constants_entry(c: dict[str, float], source: str) -> dict[str, Any]:
    """A fit's constants as a TODAY entry (RooflineCalibration field names; lanes as gemm_/expert_formats)."""
    out: dict[str, Any] = {name: _rounded(c[name]) for name in WRITTEN}
    out["gemm_formats"] = tuple((cls, *(_rounded(c[_gemm_prefix(cls) + k]) for k in LANE_FIELDS["gemm"]))
                                for cls in LANES if _gemm_prefix(cls) + "compute_eff" in c)
    out["expert_formats"] = tuple((cls, *(_rounded(c[_expert_prefix(cls) + k]) for k in LANE_FIELDS["moe"]))
                                  for cls in LANES if _expert_prefix(cls) + "compute_eff" in c)
    out["allreduce_links"] = tuple((kind, *(_rounded(c[f"allreduce_{kind}_{k}"]) for k in LANE_FIELDS["allreduce"]))
                                   for kind in ("pcie",) if f"allreduce_{kind}_bus_eff" in c)
    out["attn_decode_overlap"] = bool(c.get("attn_decode_overlap", False))
    out["source"] = source
    return out


def today_data(fitted: dict[str, dict[str, dict[str, float]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """The TODAY constants: per generation, per backend (and pooled), one entry each."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for gen, per_backend in fitted.items():
        systems = ", ".join(GENERATIONS[gen])
        out[gen] = {}
        for backend, c in per_backend.items():
            whose = "vllm/sglang/trtllm (pooled)" if backend == POOLED else backend
            out[gen][backend] = constants_entry(c, f"fitted by roofline_from_tables to AIConfigurator {whose} "
                                                   f"kernel tables of {systems}")
    return out


def write_calibration(fitted: dict[str, dict[str, dict[str, float]]], path: Path | None = None) -> None:
    """Write the constants where :data:`simulator.costmodel.calibration.TODAY` reads them (JSON, one
    field a line; tuples as lists). Generations not fitted this time (``--generation``) keep the entries
    the file has, in :data:`GENERATIONS` order."""
    from simulator.costmodel.calibration import TODAY_PATH

    path = path or TODAY_PATH
    old = json.loads(path.read_text()) if path.is_file() else {}
    new = today_data(fitted)
    merged = {gen: new[gen] if gen in new else old[gen] for gen in GENERATIONS if gen in new or gen in old}
    path.write_text(json.dumps(merged, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the fitted constants to simulator/data/roofline_today.json")
    parser.add_argument("--generation", action="append", choices=list(GENERATIONS))
    parser.add_argument("--max-rows", type=int, default=MAX_ROWS)
    args = parser.parse_args(argv)
    fitted, rows = {}, []
    for gen in args.generation or list(GENERATIONS):
        groups = load_generation(gen, max_rows=args.max_rows, progress=True)
        fitted[gen] = fit_backends(groups)
        rows += heldout_errors(gen, groups, heldout_constants(gen, groups))
        print(gen, {k: _rounded(v) for k, v in fitted[gen][POOLED].items() if k in WRITTEN}, file=sys.stderr)
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(frame.to_string(index=False, float_format="%.3f"))
        print(frame[frame["points"] >= 50].groupby("family")[["today_median_err", "today_p95_err", "pooled_median_err"]]
              .median().to_string(float_format="%.3f"))
    if args.write:
        write_calibration(fitted)


if __name__ == "__main__":
    main()
