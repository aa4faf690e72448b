"""Held-out error of the AIConfigurator table model, and of the roofline, per GPU x backend x op family.

For every measured point that has a measured neighbour on each side along one of the axes the
table model interpolates in (GEMM: ``m``, ``n``, ``k``; attention: batch and length; MoE:
tokens; all-reduce: message size), the point is left out and predicted from those two
neighbours the way :class:`~simulator.costmodel.aic.model.TableCostModel` interpolates
(log-log, except attention along the batch and decode attention along the KV length: linear, as
the model interpolates them). Neighbours are the adjacent grid values, so a held-out point sits in a gap twice as wide
as the model ever interpolates across: the figures are an upper bound on interpolation error.

The roofline column prices the same points with the calibrated
:class:`~simulator.costmodel.roofline.RooflineCostModel` of the catalog GPU (its GEMM and
attention formulas at the table's shapes), so the two errors are on identical rows.

Only the rows the model prices (:func:`~simulator.costmodel.aic.tables.read_priced_rows`: the kernel
source it picks, or another collector's rows of the same kernel where ``tables.LANE_DONORS`` names the
lane) are evaluated, per dtype; ``results/kernels/report.py`` writes the tables and plots.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.costmodel.aic import tables as T

# AIConfigurator system -> a catalog GPU for the roofline column (systems the catalog lacks: none).
CATALOG_GPU = {"a100_sxm": "a100-80gb", "l40s": "l40s", "h100_sxm": "h100-sxm", "h200_sxm": "h200", "b200_sxm": "b200",
               "gb200": "gb200", "b300_sxm": "b300", "gb300": "gb300", "rtx_pro_6000_server": "rtx-pro-6000"}

# family -> (table, dtype filter column, axes (column, interpolation) the model interpolates along,
#            the other key columns)
FAMILIES: dict[str, tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]] = {
    "gemm": ("gemm", (("m", "log"), ("n", "log"), ("k", "log")), ()),
    "attn_prefill": ("context_attention", (("batch_size", "linear"), ("length", "log")),
                     ("num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype")),
    "attn_decode": ("generation_attention", (("batch_size", "linear"), ("length", "linear")),
                    ("num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype")),
    "mla_prefill": ("context_mla", (("batch_size", "linear"), ("length", "log")), ("num_heads", "kv_cache_dtype")),
    "mla_decode": ("generation_mla", (("batch_size", "linear"), ("length", "linear")), ("num_heads", "kv_cache_dtype")),
    "moe": ("moe", (("num_tokens", "log"),),
            ("hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution")),
    "allreduce": ("custom_allreduce", (("message_size", "log"),), ("num_gpus",)),
}
MIN_ROWS = 50  # a family with fewer held-out points is listed but not judged


@dataclass(frozen=True)
class HeldOut:
    """Held-out points of one GPU x backend x family x dtype: measured and predicted seconds."""

    system: str
    backend: str
    family: str
    dtype: str
    source: str
    frame: Any  # pandas: keys, axis, measured_s, table_s, roofline_s

    def summary(self) -> dict[str, Any]:
        f = self.frame
        out: dict[str, Any] = {"gpu": self.system, "backend": self.backend, "family": self.family, "dtype": self.dtype,
                               "kernel_source": self.source, "points": len(f)}
        # roofline_today_s: the recalibrated roofline, where the report adds it (calibrate.roofline_from_tables)
        for col, name in (("table_s", "table"), ("roofline_s", "roofline"), ("roofline_today_s", "roofline_today")):
            if col not in f:
                continue
            err = (f[col] / f["measured_s"] - 1.0).abs().dropna() if len(f) else f.get(col, [])
            out[f"{name}_median_err"] = float(np.median(err)) if len(err) else float("nan")
            out[f"{name}_p90_err"] = float(np.quantile(err, 0.90)) if len(err) else float("nan")
            out[f"{name}_p95_err"] = float(np.quantile(err, 0.95)) if len(err) else float("nan")
        out["enough_rows"] = len(f) >= MIN_ROWS
        return out


def _loo(frame: Any, keys: list[str], axis: str, mode: str) -> Any:
    """Each interior point along ``axis`` (other keys fixed) predicted from its two neighbours."""
    import pandas as pd

    others = [k for k in keys if k != axis]
    f = frame.sort_values([*others, axis])
    g = f.groupby(others, sort=False, dropna=False) if others else None
    prev_x = g[axis].shift(1) if g is not None else f[axis].shift(1)
    next_x = g[axis].shift(-1) if g is not None else f[axis].shift(-1)
    prev_y = g["measured_s"].shift(1) if g is not None else f["measured_s"].shift(1)
    next_y = g["measured_s"].shift(-1) if g is not None else f["measured_s"].shift(-1)
    ok = prev_x.notna() & next_x.notna()
    x, x0, x1 = f[axis][ok].astype(float), prev_x[ok].astype(float), next_x[ok].astype(float)
    y0, y1 = prev_y[ok].astype(float), next_y[ok].astype(float)
    if mode == "log":
        w = (np.log(x) - np.log(x0)) / (np.log(x1) - np.log(x0))
        pred = np.exp(np.log(y0) + w * (np.log(y1) - np.log(y0)))
    else:
        w = (x - x0) / (x1 - x0)
        pred = y0 + w * (y1 - y0)
    out = f[ok].copy()
    out["axis"] = axis
    out["table_s"] = pred
    return pd.DataFrame(out)


def _roofline(system: str, family: str, frame: Any, dtype: str) -> np.ndarray:
    """The 2023-calibrated roofline's price of each row (NaN where the catalog lacks the GPU); the 'today'
    columns are priced apart."""
    from simulator.config.catalog import GPUS
    from simulator.config.run_config import ReplicaConfig
    from simulator.costmodel.roofline import RooflineCostModel

    gpu = CATALOG_GPU.get(system)
    if gpu not in GPUS or not len(frame):
        return np.full(len(frame), np.nan)
    rep_dtype = {"fp8": "fp8", "int4_wo": "int4"}.get(dtype, "bf16")
    model = "deepseek-v3" if family.startswith("mla") else "llama-3.1-8b"
    if family == "moe":
        model = "mixtral-8x7b"
    try:
        rf = RooflineCostModel(ReplicaConfig(model=model, gpu=gpu, tp=1, dtype=rep_dtype, roofline_calibration="2023"),
                               table_tokens=1)
    except Exception:  # noqa: BLE001 - a dtype the GPU cannot run: no roofline column
        return np.full(len(frame), np.nan)
    out = np.empty(len(frame))
    if family == "gemm":
        m, n, k = (frame[c].to_numpy(dtype=np.float64) for c in ("m", "n", "k"))
        for (kk, nn), idx in frame.groupby(["k", "n"]).indices.items():
            out[idx] = rf.gemm(m[idx], int(kk), int(nn))
        return out
    if family == "allreduce":
        from dataclasses import replace

        for gpus, idx in frame.groupby("num_gpus").indices.items():
            rf_tp = RooflineCostModel(replace(rf.replica, tp=int(gpus), model="llama-3.1-70b"), table_tokens=1)
            msg = frame["message_size"].to_numpy(dtype=np.float64)[idx]
            out[idx] = rf_tp.all_reduce(msg / rf_tp.model.hidden_size)
        return out
    if family == "moe":
        from simulator.config.catalog import ModelSpec

        for key, idx in frame.groupby(["hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                                       "moe_ep_size"]).indices.items():
            h, inter, topk, e, mtp, mep = (int(v) for v in key)
            spec = ModelSpec("heldout-moe", "-", 1, h, 8, 8, inter, 32000, 4096, num_experts=e, num_experts_per_tok=topk,
                             expert_ffn_size=inter)
            out[idx] = _moe_roofline(rf, spec, frame["num_tokens"].to_numpy(dtype=np.float64)[idx], mtp, mep)
        return out
    # attention: per-GPU heads set on the roofline instance (its formulas read these attributes)
    for key, idx in frame.groupby(["num_heads", *(["num_key_value_heads", "head_dim"] if not family.startswith("mla")
                                                  else []), "kv_cache_dtype"]).indices.items():
        heads = int(key[0])
        kv_bytes = 1.0 if key[-1] == "fp8" else 2.0
        if family.startswith("mla"):
            rf.heads_per_gpu = heads
            rf.kv_bytes_per_token = rf.model.kv_bytes_per_token_per_gpu_layer(kv_bytes, 1)
        else:
            kvh, hd = int(key[1]), int(key[2])
            rf.heads_per_gpu, rf.q_per_gpu = heads, heads * hd
            rf.kv_bytes_per_token = 2 * kvh * hd * kv_bytes
            rf.model = _with_head_dim(rf.model, hd, heads)
        b = frame["batch_size"].to_numpy(dtype=np.float64)[idx]
        s = frame["length"].to_numpy(dtype=np.float64)[idx]
        if family.endswith("decode"):
            out[idx] = [rf._attention_decode(bb * ss, int(bb)) for bb, ss in zip(b, s, strict=True)]
        else:
            out[idx] = [rf._attention_prefill(bb * ss * (ss + 1) / 2, bb * ss, int(bb * ss)) for bb, ss in zip(b, s, strict=True)]
    return out


def _with_head_dim(spec: Any, head_dim: int, heads: int) -> Any:
    from dataclasses import replace

    return replace(spec, explicit_head_dim=head_dim) if spec.head_dim != head_dim else spec


def _moe_roofline(rf: Any, spec: Any, tokens: np.ndarray, moe_tp: int, moe_ep: int) -> np.ndarray:
    """The roofline's routed-expert time of one GPU at the table's split (moe.moe_token_ops's formula)."""
    from simulator.costmodel.moe import expected_experts_touched, expert_calibration

    h, k, e = spec.hidden_size, spec.num_experts_per_tok, spec.num_experts
    f_local = spec.expert_ffn_size / moe_tp
    touched = expected_experts_touched(tokens, e, k) / moe_ep
    per_expert = np.where(touched > 0, tokens * k / moe_ep / touched, 0.0)
    ec = expert_calibration(rf)
    flops = 2.0 * per_expert * h * 3 * f_local
    wbytes = 3 * h * f_local * rf.weight_bytes
    act = per_expert * (2 * h + 3 * f_local) * rf.dtype_bytes
    eff = ec.compute_eff * per_expert / (per_expert + ec.half_tokens)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(per_expert > 0, flops / (rf.gemm_peak_flops * eff), 0.0)
    memory = (wbytes + act) / (rf.gpu.hbm_bytes_per_s * ec.memory_eff)
    return touched * np.maximum(compute, memory) + 2 * rf.cal.kernel_floor_s + ec.router_overhead_s


def heldout(system: str, backend: str, family: str, root: str | Path | None = None,
            dtypes: tuple[str, ...] | None = None, max_points: int | None = 4000, seed: int = 0) -> list[HeldOut]:
    """Held-out points of one GPU x backend x family, one :class:`HeldOut` per dtype (the
    table's dtypes, or ``dtypes``); ``max_points`` samples each (seeded) to bound the roofline's cost."""
    import pandas as pd

    table, axes, others = FAMILIES[family]
    ref = T.find_table(system, backend, table, root)
    if ref is None:
        return []
    out = []
    for dtype in dtypes or tuple(T.dtypes_of(ref)):
        extra: tuple = (("kv_cache_dtype", "==", "bfloat16"),) if family.startswith(("attn", "mla")) else ()
        cols = ["batch_size", "isl", "step", "window_size"] if family.startswith(("attn", "mla")) else []
        keys = [a for a, _ in axes if a != "length"] + list(others)
        # Rows timed warm in L2 are not serving measurements (tables.cold_cache): neither targets nor neighbours.
        src, d, _, _ = T.read_priced_rows(ref, dtype, tuple(dict.fromkeys([*cols, *keys, "latency"])), extra, root,
                                          warm="drop")
        if src is None:
            continue
        frame = pd.DataFrame({k: v for k, v in d.items() if k != "_rows" and v is not None})
        if "window_size" in frame:
            frame = frame[frame["window_size"] == 0].drop(columns="window_size")
        if family.startswith(("attn", "mla")):
            frame["length"] = frame["isl"] + (frame["step"] if family.endswith("decode") else 0)
            frame = frame.drop(columns=[c for c in ("isl", "step") if c in frame])
        frame["measured_s"] = frame.pop("latency") * 1e-3
        key_cols = [a for a, _ in axes] + list(others)
        frame = frame.drop_duplicates(key_cols)
        parts = [_loo(frame, key_cols, axis, mode) for axis, mode in axes]
        held = pd.concat(parts, ignore_index=True) if parts else frame.iloc[:0]
        if max_points is not None and len(held) > max_points:
            held = held.sample(max_points, random_state=seed).reset_index(drop=True)
        held["roofline_s"] = _roofline(system, family, held, dtype)
        out.append(HeldOut(system, backend, family, dtype, src, held))
    return out
