"""The roofline's "today" calibration: its efficiency constants fitted to AIConfigurator's kernel tables.

The 2023 calibration (:mod:`simulator.calibrate.fit_calibration`) was fitted to Vidur's and
LLMServingSim's 2023-24 profiles. This module fits the same constants, in the same formulas
(:class:`~simulator.costmodel.roofline.RooflineCostModel`, :mod:`simulator.costmodel.moe`), to
the per-op timings of today's vLLM, SGLang and TensorRT-LLM kernels in
``../shared/data/profiles/aiconfigurator`` (read its README), one set per GPU generation:

- **generations** (:data:`GENERATIONS`): Ampere (a100_sxm), Hopper (h100_sxm, h200_sxm),
  Blackwell (b200_sxm, b300_sxm, gb200, gb300), workstation (Ada l40s and Blackwell
  rtx_pro_6000_server: PCIe parts without NVLink). The efficiencies are fractions of each GPU's
  own spec-sheet peaks, so one set serves every GPU of a generation.
- **rows**: per system x backend x family x dtype, the kernel source the table model prices
  (:func:`~simulator.costmodel.aic.tables.pick_source`; bf16 KV for attention), up to
  ``max_rows`` seeded rows, so each group weighs about the same and no backend dominates.
- **stages**, each a robust least-squares fit (Cauchy loss on ``log(predicted / measured)``, :data:`LOSS`) of a few
  constants with the earlier stages' held fixed: (1) bf16 GEMMs: ``gemm_compute_eff``, ``gemm_half_tokens``, ``gemm_memory_eff``, ``kernel_floor_s``;
  then each low-precision class of GEMM kernels (``GEMM_CLASS``: fp8 and FP8-block, fp4, int4)
  its own ``compute_eff``, ``half_tokens``, ``memory_eff``, ``floor_s`` (``gemm_formats``);
  (2) attention, prefill and decode: ``attn_prefill_compute_eff`` with its ramp
  ``attn_prefill_half_keys`` (efficiency ``eff * q / (q + half)`` at ``q`` keys per query: short
  prompts do not fill the tensor cores), ``attn_floor_s`` (an attention kernel's smallest time, about
  8 us today against a GEMM's 3-6 us), ``attn_decode_memory_eff``, ``attn_decode_per_seq_s``, then
  MLA's own ``mla_compute_eff`` (its prefill and absorbed decode, the rest held); (3) the
  engines' custom all-reduce: ``allreduce_bus_eff``, ``allreduce_latency_s``; (4) fused MoE (the routed
  experts at the table's ``moe_tp x moe_ep`` split): the expert constants of
  :class:`~simulator.costmodel.moe.ExpertCalibration` and ``expert_permute_s`` (a cost per hidden element
  of every token entering the layer, whatever the EP split: without it, an EP rank's kernel at many
  tokens is priced 2-5x too fast and the fit drags the expert efficiency down to ~0.13 to compensate).
- **element-wise ops** have no tables: they take the table model's own treatment (AIConfigurator's
  ``bytes / (mem_bw x 0.8)``), and residual adds ride on the fused add-norm of a compiled engine
  (an efficiency of 1.2 makes the roofline's norm + residual traffic, ``4 + 6`` hidden-size bytes
  per token, cost what the table model's fused ``2 x 4`` costs at 0.8).
- CPU overheads and the send/recv latency are not kernel constants: "today" keeps the GPU's 2023 ones.

**Held out**: for a generation of several systems, each system is predicted by constants fitted
to the others (leave one GPU out); Ampere has one system, so its rows are split in two by a hash of
their keys and each half is predicted by constants fitted to the other (leave grid points out).

    python -m simulator.calibrate.roofline_from_tables            # fit, print held-out errors
    python -m simulator.calibrate.roofline_from_tables --write    # and write calibration.py's TODAY block
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from simulator.costmodel.aic import tables as T
from simulator.costmodel.calibration import GEMM_CLASS

GENERATIONS: dict[str, tuple[str, ...]] = {
    "ampere": ("a100_sxm",),
    "hopper": ("h100_sxm", "h200_sxm"),
    "blackwell": ("b200_sxm", "b300_sxm", "gb200", "gb300"),
    "workstation": ("l40s", "rtx_pro_6000_server"),
}
# AIConfigurator system -> catalog GPU whose spec sheet the roofline divides by.
CATALOG_GPU = {"a100_sxm": "a100-80gb", "l40s": "l40s", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200",
               "gb200": "gb200", "b300_sxm": "b300", "gb300": "gb300", "rtx_pro_6000_server": "rtx-pro-6000"}
# Table dtype -> the roofline's --dtype (tables' dtypes the roofline cannot represent are skipped).
DTYPES = {"bfloat16": "bf16", "fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "int4_wo": "int4",
          "w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "mxfp4"}
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
    (("attn_prefill", "attn_decode"),
     ("attn_prefill_compute_eff", "attn_prefill_half_keys", "attn_floor_s", "attn_decode_memory_eff",
      "attn_decode_per_seq_s")),
    (("mla_prefill", "mla_decode"), ("mla_compute_eff",)),
    (("allreduce",), ("allreduce_bus_eff", "allreduce_latency_s")),
    (("moe",), ("expert_compute_eff", "expert_half_tokens", "expert_memory_eff", "expert_router_overhead_s",
                "expert_permute_s")),
)
INITIAL = {"gemm_compute_eff": 0.7, "gemm_half_tokens": 100.0, "gemm_memory_eff": 0.7, "kernel_floor_s": 3e-6,
           "attn_prefill_compute_eff": 0.4, "attn_prefill_half_keys": 64.0, "attn_floor_s": 8e-6,
           "mla_compute_eff": 0.4, "attn_decode_memory_eff": 0.6, "attn_decode_per_seq_s": 2e-7,
           "allreduce_bus_eff": 0.5, "allreduce_latency_s": 1e-5, "expert_compute_eff": 0.6,
           "expert_half_tokens": 100.0, "expert_memory_eff": 0.6, "expert_router_overhead_s": 5e-6, "expert_permute_s": 1e-11}
BOUNDS = {"gemm_half_tokens": (0.1, 1e5), "kernel_floor_s": (1e-8, 1e-4), "attn_prefill_half_keys": (1e-3, 1e6),
          "attn_floor_s": (1e-8, 1e-4), "attn_decode_per_seq_s": (1e-10, 1e-4),
          "allreduce_latency_s": (1e-7, 1e-3), "expert_half_tokens": (0.1, 1e5), "expert_router_overhead_s": (1e-9, 1e-3), "expert_permute_s": (1e-16, 1e-8)}
EFF_BOUNDS = (0.01, 3.0)
# Element-wise constants: the table model's treatment (see the module docstring), not fitted.
ELEMENTWISE = {"elementwise_memory_eff": 0.8, "residual_add_memory_eff": 1.2, "embedding_memory_eff": 0.8}
MAX_ROWS = 2000
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
    out: dict[str, Any] = {"bw": g.hbm_bytes_per_s, "bf16": g.bf16_flops}
    if family == "gemm":
        m, n, k = f["m"], f["n"], f["k"]
        out.update(m=m, flops=2.0 * m * k * n, bytes=k * n * r.weight_bytes + m * k * db + m * n * db,
                   peak=r.gemm_peak_flops, knee=(r.weight_bytes / db) if r.weight_only else 1.0,
                   prefix=_gemm_prefix(GEMM_CLASS[r.dtype]))
    elif family in ("attn_prefill", "attn_decode"):
        b, heads, kvh, hd = f["batch_size"], f["num_heads"], f["num_key_value_heads"], f["head_dim"]
        s = f["isl"] + (f["step"] if family == "attn_decode" else 0.0)
        kvb = 2 * kvh * hd * db
        if family == "attn_prefill":
            out.update(flops=4.0 * heads * hd * (b * s * (s + 1) / 2), bytes=b * s * kvb + 2 * b * s * heads * hd * db,
                       keys=(s + 1) / 2)
        else:
            out.update(b=b, bytes=b * s * kvb + 2 * b * heads * hd * db)
    elif family in ("mla_prefill", "mla_decode"):
        m = r.model_spec
        b, heads = f["batch_size"], f["num_heads"]
        s = f["isl"] + (f["step"] if family == "mla_decode" else 0.0)
        kvb = m.kv_bytes_per_token_per_gpu_layer(db, 1)
        kv = b * s
        if family == "mla_prefill":
            qk = m.qk_nope_head_dim + m.qk_rope_head_dim
            flops = (2.0 * heads * (qk + m.v_head_dim) * (b * s * (s + 1) / 2)
                     + 2.0 * kv * m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim))
            out.update(flops=flops, bytes=kv * kvb + 2 * kv * heads * qk * db, keys=(s + 1) / 2)
        else:
            out.update(b=b, flops=2.0 * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * kv,
                       bytes=kv * kvb + 2 * b * heads * (m.kv_lora_rank + m.qk_rope_head_dim) * db)
    elif family == "moe":
        from simulator.costmodel.moe import expected_experts_touched

        t, h, inter, topk, e = f["num_tokens"], f["hidden_size"], f["inter_size"], f["topk"], f["num_experts"]
        mtp, mep = f["moe_tp_size"], f["moe_ep_size"]
        f_local = inter / mtp
        touched = np.asarray(expected_experts_touched(t, e, topk), dtype=np.float64) / mep  # arrays of E and k
        per_expert = np.where(touched > 0, t * topk / mep / np.where(touched > 0, touched, 1.0), 0.0)
        out.update(touched=touched, per_expert=per_expert, flops=2.0 * per_expert * h * 3 * f_local, token_hidden=t * h,
                   bytes=3 * h * f_local * r.weight_bytes + per_expert * (2 * h + 3 * f_local) * db, peak=r.gemm_peak_flops)
    elif family == "allreduce":
        from dataclasses import replace

        from simulator.costmodel.roofline import RooflineCostModel

        tp = f["num_gpus"]
        link = np.empty_like(tp)
        for n in np.unique(tp):
            rf = RooflineCostModel(replace(_replica(system, "bfloat16", "llama-3.1-70b"), tp=int(n)), table_tokens=1)
            link[tp == n] = rf.tp_link_bytes_per_s
        out.update(volume=2.0 * (tp - 1) / tp * f["message_size"] * db, link=link)
    return out


def predict(family: str, t: dict[str, Any], c: dict[str, float]) -> np.ndarray:
    """The roofline's seconds for rows with terms ``t`` under constants ``c`` (RooflineCalibration
    field names, plus ``expert_*`` for MoE): the same formulas as the runtime model."""
    floor = c["kernel_floor_s"]
    if family == "gemm":  # the dtype class's curve where the constants have one (RooflineCalibration.gemm_constants)
        p = t["prefix"] if f"{t['prefix']}compute_eff" in c else "gemm_"
        eff = c[f"{p}compute_eff"] * t["m"] / (t["m"] + c[f"{p}half_tokens"] * t["knee"])
        gemm_floor = floor if p == "gemm_" else c[f"{p}floor_s"]
        return np.maximum(t["flops"] / (t["peak"] * eff), t["bytes"] / (t["bw"] * c[f"{p}memory_eff"])) + gemm_floor
    attn_floor = c["kernel_floor_s"] if c.get("attn_floor_s") is None else c["attn_floor_s"]
    mla_eff = c["attn_prefill_compute_eff"] if c.get("mla_compute_eff") is None else c["mla_compute_eff"]
    if family in ("attn_prefill", "mla_prefill"):
        eff = mla_eff if family == "mla_prefill" else c["attn_prefill_compute_eff"]
        if c.get("attn_prefill_half_keys") and family == "attn_prefill":  # RooflineCalibration.prefill_compute_eff
            eff = eff * t["keys"] / (t["keys"] + c["attn_prefill_half_keys"])
        return np.maximum(t["flops"] / (t["bf16"] * eff), t["bytes"] / (t["bw"] * c["gemm_memory_eff"])) + attn_floor
    if family == "attn_decode":
        return t["bytes"] / (t["bw"] * c["attn_decode_memory_eff"]) + t["b"] * c["attn_decode_per_seq_s"] + attn_floor
    if family == "mla_decode":
        return (np.maximum(t["flops"] / (t["bf16"] * mla_eff), t["bytes"] / (t["bw"] * c["attn_decode_memory_eff"]))
                + t["b"] * c["attn_decode_per_seq_s"] + attn_floor)
    if family == "allreduce":
        return t["volume"] / (t["link"] * c["allreduce_bus_eff"]) + c["allreduce_latency_s"]
    if family == "moe":
        pe = t["per_expert"]
        eff = c["expert_compute_eff"] * pe / (pe + c["expert_half_tokens"])
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(pe > 0, t["flops"] / (t["peak"] * eff), 0.0)
        memory = t["bytes"] / (t["bw"] * c["expert_memory_eff"])
        return (t["touched"] * np.maximum(compute, memory) + 2 * floor + c["expert_router_overhead_s"]
                + t["token_hidden"] * c.get("expert_permute_s", 0.0))
    raise ValueError(family)


def _gemm_prefix(cls: str) -> str:
    """Constants-dict prefix of a GEMM class's curve: ``gemm_`` for bf16 (the base fields), else ``gemm_<cls>_``."""
    return "gemm_" if cls == "bf16" else f"gemm_{cls}_"


def constants_of(cal: Any) -> dict[str, float]:
    """A RooflineCalibration's constants as :func:`predict` reads them (expert constants: the
    calibration's own, else its dense-GEMM ones and the 2023 router cost, as moe.expert_calibration)."""
    from simulator.costmodel.moe import _H100_EXPERTS

    c = {f.name: getattr(cal, f.name) for f in fields(cal) if f.name not in ("source", "gemm_formats")}
    for cls, compute_eff, half_tokens, memory_eff, floor_s in cal.gemm_formats:
        p = _gemm_prefix(cls)
        c.update({f"{p}compute_eff": compute_eff, f"{p}half_tokens": half_tokens, f"{p}memory_eff": memory_eff,
                  f"{p}floor_s": floor_s})
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
        src, d = T.read_source_rows(ref, dtype, cols, extra)
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
    if name.endswith(("half_tokens", "floor_s")) and name not in BOUNDS:
        return BOUNDS["gemm_half_tokens" if name.endswith("half_tokens") else "kernel_floor_s"]
    return BOUNDS.get(name, EFF_BOUNDS)


def fit(groups: list[Group], base: dict[str, float] | None = None) -> dict[str, float]:
    """Constants fitted to ``groups`` stage by stage (:data:`STAGES`); a stage whose families have no
    rows keeps ``base``'s values (default: :data:`INITIAL`)."""
    from scipy.optimize import least_squares

    c = dict(INITIAL if base is None else base)
    c.update(ELEMENTWISE)
    stages = list(STAGES)
    low = sorted({g.terms["prefix"] for g in groups if g.family == "gemm"} - {"gemm_"})
    for p in low:  # each low-precision class's own curve, after bf16's (its floor held)
        stages.insert(1, (("gemm", p), (f"{p}compute_eff", f"{p}half_tokens", f"{p}memory_eff", f"{p}floor_s")))
    for families, names in stages:
        if families[0] == "gemm":  # a GEMM class: its rows only
            prefix = families[1] if len(families) > 1 else "gemm_"
            used = [g for g in groups if g.family == "gemm" and g.terms["prefix"] == prefix]
        else:
            used = [g for g in groups if g.family in families]
        if not used:
            continue
        if families[0] == "gemm" and len(families) > 1:  # a class's curve starts from bf16's
            for n in names:
                base = "kernel_floor_s" if n.endswith("floor_s") else "gemm_" + n[len(families[1]):]
                c.setdefault(n, c[base])
        lo = np.log([_bounds(n)[0] for n in names])
        hi = np.log([_bounds(n)[1] for n in names])
        x0 = np.clip(np.log([c[n] for n in names]), lo + 1e-9, hi - 1e-9)

        def residuals(x: np.ndarray, used: list[Group] = used, names: tuple[str, ...] = names) -> np.ndarray:
            trial = {**c, **dict(zip(names, np.exp(x), strict=True))}
            return np.concatenate([np.log(predict(g.family, g.terms, trial) / g.measured_s) for g in used])

        loss, scale = LOSS.get(families[0], ("cauchy", 0.02))
        res = least_squares(residuals, x0, bounds=(lo, hi), loss=loss, f_scale=scale, x_scale=1.0)
        c.update(dict(zip(names, np.exp(res.x).tolist(), strict=True)))
    return c


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


def heldout_constants(generation: str, groups: list[Group]) -> dict[tuple[str, int], dict[str, float]]:
    """Constants each held-out part is predicted with: ``(system, -1)`` fitted to the generation's
    other systems, or, for a one-system generation, ``(system, half)`` fitted to the other half."""
    systems = GENERATIONS[generation]
    out = {}
    if len(systems) > 1:
        for s in systems:
            out[(s, -1)] = fit([g for g in groups if g.system != s])
    else:
        for half in (0, 1):
            train = [g.subset(_half(g) != bool(half)) for g in groups]
            out[(systems[0], half)] = fit([g for g in train if len(g.measured_s)])
    return out


def heldout_errors(generation: str, groups: list[Group],
                   folds: dict[tuple[str, int], dict[str, float]]) -> list[dict[str, Any]]:
    rows = []
    for g in groups:
        if (g.system, -1) in folds:
            pred = predict(g.family, g.terms, folds[(g.system, -1)])
        else:
            mask = _half(g)
            pred = np.where(mask, predict(g.family, g.terms, folds[(g.system, 0)]),
                            predict(g.family, g.terms, folds[(g.system, 1)]))
        err = np.abs(pred / g.measured_s - 1.0)
        rows.append({"gpu": g.system, "backend": g.backend, "family": g.family, "dtype": g.dtype, "points": len(err),
                     "today_median_err": float(np.median(err)), "today_p95_err": float(np.quantile(err, 0.95))})
    return rows


def predict_heldout(system: str, family: str, dtype: str, frame: Any,
                    folds: dict[tuple[str, int], dict[str, float]]) -> np.ndarray:
    """The held-out recalibrated roofline's seconds for rows of a pandas ``frame`` holding the
    table's keys (attention: ``length`` for ``isl + step``), as :func:`heldout_errors` predicts."""
    keys = {k: frame[k].to_numpy() for k in KEYS[family] if k in frame}
    if family.startswith(("attn", "mla")):
        keys["isl"] = frame["length"].to_numpy()
        keys["step"] = np.zeros(len(frame))
    if family in ("gemm", "moe") and dtype not in DTYPES or not len(frame):
        return np.full(len(frame), np.nan)
    t = terms_for(system, family, dtype, keys)
    if t is None:
        return np.full(len(frame), np.nan)
    if (system, -1) in folds:
        return predict(family, t, folds[(system, -1)])
    g = Group(system, "", family, dtype, "", keys, np.ones(len(frame)), t)
    return np.where(_half(g), predict(family, t, folds[(system, 0)]), predict(family, t, folds[(system, 1)]))


# -- writing calibration.py ------------------------------------------------------------------------------
BEGIN, END = "# BEGIN TODAY (written by `python -m simulator.calibrate.roofline_from_tables --write`)", "# END TODAY"
WRITTEN = ("gemm_compute_eff", "gemm_half_tokens", "gemm_memory_eff", "kernel_floor_s", "attn_prefill_compute_eff",
           "attn_prefill_half_keys", "attn_floor_s", "mla_compute_eff",
           "attn_decode_memory_eff", "attn_decode_per_seq_s", "elementwise_memory_eff", "residual_add_memory_eff",
           "embedding_memory_eff", "allreduce_bus_eff", "allreduce_latency_s", "expert_compute_eff",
           "expert_half_tokens", "expert_memory_eff", "expert_router_overhead_s", "expert_permute_s")


def today_block(fitted: dict[str, dict[str, float]]) -> str:
    lines = [BEGIN, "TODAY: dict[str, dict[str, Any]] = {"]
    for gen, c in fitted.items():
        lines.append(f"    {gen!r}: {{")
        for name in WRITTEN:
            lines.append(f"        {name!r}: {float(f'{c[name]:.3g}')!r},")
        formats = tuple((cls, *(float(f"{c[_gemm_prefix(cls) + k]:.3g}") for k in ("compute_eff", "half_tokens",
                                                                                     "memory_eff", "floor_s")))
                        for cls in ("fp8", "fp4", "int4") if _gemm_prefix(cls) + "compute_eff" in c)
        lines.append(f"        'gemm_formats': {formats!r},")
        systems = ", ".join(GENERATIONS[gen])
        lines.append(f"        'source': 'fitted by roofline_from_tables to AIConfigurator vllm/sglang/trtllm kernel "
                     f"tables of {systems}',")
        lines.append("    },")
    lines += ["}", END]
    return "\n".join(lines)


def write_calibration(fitted: dict[str, dict[str, float]], path: Path | None = None) -> None:
    path = path or Path(__file__).resolve().parents[1] / "costmodel" / "calibration.py"
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise RuntimeError(f"{path} has no TODAY block")
    path.write_text(pattern.sub(lambda _: today_block(fitted), text))


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the fitted constants into costmodel/calibration.py")
    parser.add_argument("--generation", action="append", choices=list(GENERATIONS))
    parser.add_argument("--max-rows", type=int, default=MAX_ROWS)
    args = parser.parse_args(argv)
    fitted, rows = {}, []
    for gen in args.generation or list(GENERATIONS):
        groups = load_generation(gen, max_rows=args.max_rows, progress=True)
        fitted[gen] = fit(groups)
        rows += heldout_errors(gen, groups, heldout_constants(gen, groups))
        print(gen, {k: float(f"{v:.3g}") for k, v in fitted[gen].items() if k in WRITTEN}, file=sys.stderr)
    frame = pd.DataFrame(rows)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(frame.to_string(index=False, float_format="%.3f"))
        print(frame.groupby("family")[["today_median_err", "today_p95_err"]].median().to_string(float_format="%.3f"))
    if args.write:
        write_calibration(fitted)


if __name__ == "__main__":
    main()
