"""Profile tables for fitting: read measured kernel timings into one tidy table.

A *tidy profile table* has one measurement per row, times in seconds:

==============  ==========================================================================
column          meaning
==============  ==========================================================================
op              our op name: the roofline's token ops (``qkv_proj`` ... ``tp_all_reduce``)
                plus ``embedding``, ``lm_head``, ``attn_prefill``, ``attn_decode``,
                ``all_reduce``, ``send_recv``
num_tokens      tokens in the batch (token ops; chunk sum for prefill; batch for decode)
batch_size      sequences in the kernel call (attention)
chunk_size      prefill chunk length per sequence (attn_prefill)
kv_context      KV tokens already cached *before* the chunk (attn_prefill)
context_len     KV length read per sequence, the new token included (attn_decode)
message_bytes   payload of a collective (all_reduce, send_recv)
world_size      ranks taking part in a collective
tp              tensor-parallel degree the kernel shapes were sharded for
device, model   GPU (catalog name) and model (catalog name, or "" where a table only
                fixes a shape, as attention tables do: see hidden_size/num_heads/num_kv_heads)
median_s        median time of the op, seconds; ``p20_s``/``p80_s`` where known
==============  ==========================================================================

Readers, chosen by the file's columns:

- **tidy** tables (:mod:`profiler.schema`; what ``simulate profile`` and
  ``simulate import-vidur`` write) are read as they are;
- Vidur ``mlp.csv`` and network files go through the profiler's importer
  (:mod:`profiler.vidur_import`), the project's one reading of them, where that package is
  importable; the fallback readers below map them identically. Attention tables are read
  here, because LLMServingSim's share Vidur's columns with different meanings and the
  fit checks their head shape;
- **Vidur** ``mlp.csv`` (``time_stats.<op>.median`` in ms vs ``num_tokens`` and TP), mapped
  to our op names: ``attn_pre_proj`` -> ``qkv_proj``, ``attn_post_proj`` ->
  ``attn_out_proj``, ``mlp_up_proj`` (gate and up fused) -> ``mlp_up_gate``, ``mlp_down_proj``
  -> ``mlp_down``, ``attn_rope`` -> ``rotary``, ``emb`` -> ``embedding``; the two layer norms
  are summed into ``norms`` and the one residual ``add`` kernel counts twice in
  ``residual_add`` (a layer does two adds), matching the roofline's per-layer ops;
- **Vidur/LLMServingSim** ``attention.csv`` (ms; ``is_prefill``, ``batch_size``,
  ``prefill_chunk_size``, ``kv_cache_size``). Vidur's prefill ``kv_cache_size`` is the
  context before the chunk; LLMServingSim's includes the chunk (it is never below it), and
  its decode ``kv_cache_size`` is the batch's *total* KV tokens (time is flat in batch size
  at a fixed value, and reading it per sequence would exceed HBM bandwidth), so per-sequence
  context = ``kv_cache_size / batch_size`` there;
- **Vidur network** ``all_reduce.csv``/``send_recv.csv`` (ms vs ``size`` bytes), single-node
  rows only (``devices_per_node == num_workers``; send/recv: both ranks on one node);
- **LLMServingSim** ``layers.csv`` (``latency(ns)`` per layer op vs ``input`` tokens);
  ``attn`` rows are prefill attention with no cached context; ``lm_head`` includes the
  final norm. MoE tables: ``gate`` -> ``moe_gate``, one expert's ``expert.w1`` + ``expert.w3``
  -> ``moe_expert_up``, ``expert.w2`` -> ``moe_expert_down``, ``act_fn`` -> ``moe_expert_act``
  (``num_tokens`` = the tokens routed to that expert).

Model and device come from the file's path (Vidur's ``compute/<gpu>/<org>/<model>/``
layout) unless given. Anything malformed raises a one-line :class:`ConfigError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.config.catalog import get_gpu, get_model
from simulator.config.errors import ConfigError

TIDY_COLUMNS = ("op", "num_tokens", "batch_size", "chunk_size", "kv_context", "context_len", "message_bytes",
                "world_size", "tp", "device", "model", "median_s", "p20_s", "p80_s", "source")
SHAPE_COLUMNS = ("hidden_size", "num_heads", "num_kv_heads")
KNOWN_OPS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_act", "mlp_down", "norms", "rotary", "residual_add",
             "tp_all_reduce", "embedding", "lm_head", "attn_prefill", "attn_decode", "all_reduce", "all_gather", "send_recv",
             "moe_gate", "moe_expert_up", "moe_expert_down", "moe_expert_act")
# Columns each op needs besides op/median_s.
REQUIRED_BY_OP = {
    "attn_prefill": ("batch_size", "chunk_size", "kv_context"),
    "attn_decode": ("batch_size", "context_len"),
    "all_reduce": ("message_bytes", "world_size"),
    "all_gather": ("message_bytes", "world_size"),
    "send_recv": ("message_bytes", "world_size"),
}
# Count columns and the least each may be (a prefill's prior context may be none); blank is left to REQUIRED_BY_OP.
COUNT_COLUMNS = {"num_tokens": 1, "batch_size": 1, "chunk_size": 1, "kv_context": 0, "context_len": 0,
                 "message_bytes": 1, "world_size": 1, "tp": 1}
MEAN_COLUMNS = ("context_len",)  # a decode batch's mean context: LLMServingSim's rows carry fractions (0.97, 10.67)
MAX_COUNT = 1e15  # beyond any batch, context or message a kernel was timed at (1e20 tokens was fitted)
# On an A100-class GPU a kernel slower than this is not a kernel: the table's unit is wrong (ms or
# ns read as s). Slower devices get a proportionally higher limit (a CPU is slow, not wrong):
# see plausible_limit_s.
MAX_PLAUSIBLE_S = 1.0
_REFERENCE_FLOPS = 312e12  # A100 dense bf16, the device MAX_PLAUSIBLE_S is stated for


def plausible_limit_s(device: str) -> float:
    """The slowest believable kernel time on ``device`` (catalog name; blank or unknown: a GPU's).

    ``MAX_PLAUSIBLE_S`` scaled by how much slower than an A100 the device's peak is, never
    below it: 1 s on an A100 or H100, 312 s on the catalog's ``cpu`` (1 TFLOP/s peak).
    """
    try:
        flops = get_gpu(device).bf16_flops if device else _REFERENCE_FLOPS
    except ConfigError:
        flops = _REFERENCE_FLOPS
    return MAX_PLAUSIBLE_S * max(1.0, _REFERENCE_FLOPS / flops)

_VIDUR_MLP_OPS = {  # Vidur column -> (our op, multiplicity)
    "attn_pre_proj": ("qkv_proj", 1.0), "attn_post_proj": ("attn_out_proj", 1.0),
    "mlp_up_proj": ("mlp_up_gate", 1.0), "mlp_act": ("mlp_act", 1.0), "mlp_down_proj": ("mlp_down", 1.0),
    "attn_rope": ("rotary", 1.0), "add": ("residual_add", 2.0), "emb": ("embedding", 1.0),
    "input_layernorm": ("norms", 1.0), "post_attention_layernorm": ("norms", 1.0),
}
_LSS_LAYER_OPS = {  # LLMServingSim layer_name -> our op (summed where several map to one)
    "embedding": "embedding", "input_layernorm": "norms", "post_layernorm": "norms",
    "q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "rope": "rotary", "attn": "attn_prefill",
    "o_proj": "attn_out_proj", "gate_proj": "mlp_up_gate", "up_proj": "mlp_up_gate", "act_fn": "mlp_act",
    "down_proj": "mlp_down", "final_layernorm": "lm_head", "lm_head": "lm_head",
    # MoE tables (Mixtral): the router, and one whole expert's GEMMs for the tokens routed to it.
    "gate": "moe_gate", "expert.w1": "moe_expert_up", "expert.w3": "moe_expert_up", "expert.w2": "moe_expert_down",
}
MS, NS = 1e-3, 1e-9


def _bad(path: Path | str, problem: str, fix: str | None = None) -> ConfigError:
    return ConfigError("profile", f"{path}: {problem}", fix)


def _catalog_gpu(name: str) -> str:
    try:
        return get_gpu(name).name
    except ConfigError:
        return name.lower()


def _catalog_model(name: str) -> str:
    try:
        return get_model(name).name
    except ConfigError:
        return name


def _guess_from_path(path: Path) -> tuple[str, str]:
    """(device, model) from a Vidur/LLMServingSim path; '' where the path does not say."""
    parts = list(path.parts)
    device = model = ""
    for anchor in ("compute", "llmservingsim"):
        if anchor in parts:
            i = parts.index(anchor)
            if len(parts) > i + 3:
                device = _catalog_gpu(parts[i + 1])
                model = _catalog_model(f"{parts[i + 2]}/{parts[i + 3]}")
    if "network" in parts:
        i = parts.index("network")
        if len(parts) > i + 1:
            device = _catalog_gpu(parts[i + 1].split("_")[0])
    if "legacy_2024-05" in parts:
        i = parts.index("legacy_2024-05")
        device = _catalog_gpu(parts[i + 1])
    return device, model


def _frame(rows: dict[str, object], n: int) -> pd.DataFrame:
    out = pd.DataFrame({c: rows.get(c, np.nan) for c in TIDY_COLUMNS}, index=range(n))
    for c in SHAPE_COLUMNS:
        if c in rows:
            out[c] = rows[c]
    return out


def _vidur_mlp(df: pd.DataFrame, path: Path, device: str, model: str) -> pd.DataFrame:
    frames = []
    tp = df["num_tensor_parallel_workers"].to_numpy()
    tokens = df["num_tokens"].to_numpy()
    by_op: dict[str, np.ndarray] = {}
    for col, (op, mult) in _VIDUR_MLP_OPS.items():
        name = f"time_stats.{col}.median"
        if name in df:
            by_op[op] = by_op.get(op, 0.0) + mult * df[name].to_numpy(dtype=float) * MS
    for op, med in by_op.items():
        frames.append(_frame({"op": op, "num_tokens": tokens, "tp": tp, "median_s": med, "device": device,
                              "model": model, "source": str(path)}, len(df)))
    return pd.concat(frames, ignore_index=True)


def _attention(df: pd.DataFrame, path: Path, device: str, model: str) -> pd.DataFrame:
    llmservingsim = "llmservingsim" in str(path).lower() or "profile_method" not in df
    tp = df["num_tensor_parallel_workers"].to_numpy()
    shape = {"hidden_size": df["n_embd"].to_numpy(), "num_heads": df["n_q_head"].to_numpy(),
             "num_kv_heads": df["n_kv_head"].to_numpy()}
    is_prefill = df["is_prefill"].astype(str).str.lower().isin(("true", "1")).to_numpy()
    frames = []
    p = df[is_prefill]
    if len(p):
        chunk = p["prefill_chunk_size"].to_numpy(dtype=float)
        kv = p["kv_cache_size"].to_numpy(dtype=float)
        kv_before = kv - chunk if llmservingsim else kv
        batch = p["batch_size"].to_numpy(dtype=float)
        frames.append(_frame({"op": "attn_prefill", "num_tokens": batch * chunk, "batch_size": batch,
                              "chunk_size": chunk, "kv_context": kv_before, "tp": tp[is_prefill],
                              "median_s": p["time_stats.attn_prefill.median"].to_numpy(dtype=float) * MS,
                              "device": device, "model": model, "source": str(path),
                              **{k: v[is_prefill] for k, v in shape.items()}}, len(p)))
    d = df[~is_prefill]
    if len(d):
        batch = d["batch_size"].to_numpy(dtype=float)
        kv = d["kv_cache_size"].to_numpy(dtype=float)
        context = kv / batch if llmservingsim else kv
        frames.append(_frame({"op": "attn_decode", "num_tokens": batch, "batch_size": batch, "context_len": context,
                              "tp": tp[~is_prefill],
                              "median_s": d["time_stats.attn_decode.median"].to_numpy(dtype=float) * MS,
                              "device": device, "model": model, "source": str(path),
                              **{k: v[~is_prefill] for k, v in shape.items()}}, len(d)))
    out = pd.concat(frames, ignore_index=True)
    return out[np.isfinite(out["median_s"].to_numpy(dtype=float))]


def _vidur_network(df: pd.DataFrame, path: Path, device: str, op: str) -> pd.DataFrame:
    world = df["num_workers"].to_numpy()
    per_node = df["devices_per_node"].to_numpy()
    keep = per_node == world  # single node: the TP case
    df = df[keep]
    return _frame({"op": op, "message_bytes": df["size"].to_numpy(dtype=float),
                   "world_size": df["num_workers"].to_numpy(), "tp": df["num_workers"].to_numpy(),
                   "median_s": df[f"time_stats.{op}.median"].to_numpy(dtype=float) * MS,
                   "device": device, "model": "", "source": str(path)}, len(df))


def _lss_layers(df: pd.DataFrame, path: Path, device: str, model: str) -> pd.DataFrame:
    df = df[df["kv_cache"] == 0].copy()
    unknown = sorted(set(df["layer_name"]) - set(_LSS_LAYER_OPS))
    df = df[df["layer_name"].isin(_LSS_LAYER_OPS)]
    df["op"] = df["layer_name"].map(_LSS_LAYER_OPS)
    if (df["op"] == "moe_expert_up").any():  # in a MoE table act_fn runs on one expert's tokens
        df.loc[df["layer_name"] == "act_fn", "op"] = "moe_expert_act"
    g = df.groupby(["op", "input", "tp_size"], as_index=False)["latency(ns)"].sum()
    out = _frame({"op": g["op"].to_numpy(), "num_tokens": g["input"].to_numpy(dtype=float),
                  "tp": g["tp_size"].to_numpy(), "median_s": g["latency(ns)"].to_numpy(dtype=float) * NS,
                  "device": device, "model": model, "source": str(path)}, len(g))
    pre = out["op"] == "attn_prefill"  # attention over the prompt itself, nothing cached
    out.loc[pre, "batch_size"] = 1.0
    out.loc[pre, "chunk_size"] = out.loc[pre, "num_tokens"]
    out.loc[pre, "kv_context"] = 0.0
    del unknown  # MoE/other layers we do not model are ignored by design
    return out


def _tidy_columns() -> frozenset[str]:
    """The columns a tidy table may hold: the fit's, the shape ones, a time unit and the profiler's schema."""
    try:
        from profiler.schema import COLUMNS
    except ImportError:  # pragma: no cover - the simulator runs without the profiler
        COLUMNS = ()  # noqa: N806
    return frozenset((*TIDY_COLUMNS, *SHAPE_COLUMNS, "unit", "dtype", *COLUMNS))


def _tidy(df: pd.DataFrame, path: Path, device: str, model: str) -> pd.DataFrame:
    unknown = [str(c) for c in df.columns if c not in _tidy_columns()]
    if unknown:  # a misspelt one was read as absent: a "gpu" column's GPU, a "tp_size" column's TP, not used
        raise _bad(path, f"unknown column(s) {', '.join(unknown)}",
                   "name the GPU `device` and the TP degree `tp` (the columns of profiler.schema), or drop them")
    if "unit" in df and df["unit"].nunique() > 1:
        raise _bad(path, f"mixed time units {sorted(df['unit'].unique())}", "convert every row to seconds")
    if "unit" in df and str(df["unit"].iloc[0]).lower() not in ("s", "sec", "seconds"):
        raise _bad(path, f"times are in {df['unit'].iloc[0]!r}", "tidy tables hold seconds in median_s")
    out = df.copy()
    for c in TIDY_COLUMNS:
        if c not in out:
            out[c] = np.nan
    if "dtype" in out and out.groupby("op")["dtype"].nunique().max() > 1:
        # One dtype per op: an FP8 profile's linear layers are fp8 beside bf16 element-wise ops and attention
        mixed = out.groupby("op")["dtype"].nunique()
        raise _bad(path, f"{', '.join(mixed[mixed > 1].index)} measured in more than one dtype "
                   f"{sorted(map(str, out['dtype'].dropna().unique()))}", "profile one dtype per op and table")
    # (astype(object) first: an all-empty column is float, which a future pandas will not fill with text)
    out["device"] = out["device"].astype(object).fillna(device).astype(str).map(lambda s: _catalog_gpu(s) if s else s)
    out["model"] = out["model"].astype(object).fillna(model).astype(str).map(lambda s: _catalog_model(s) if s else s)
    out["source"] = str(path)
    return out


def read_profile(path: str | Path, *, device: str | None = None, model: str | None = None) -> pd.DataFrame:
    """Read one profile file (tidy CSV/parquet, Vidur or LLMServingSim CSV) into a tidy table."""
    path = Path(path)
    if not path.exists():
        raise _bad(path, "no such file", "pass an existing profile CSV or parquet")
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any parse failure is the user's file
        raise _bad(path, f"cannot be read as a table ({type(exc).__name__})") from None
    if not len(df):  # (a header alone was read as a profile that names no model, or covers tp [])
        raise _bad(path, "has no rows below its header", "pass a profile with measurements")
    guessed_device, guessed_model = _guess_from_path(path)
    device = _catalog_gpu(device) if device else guessed_device
    model = _catalog_model(model) if model else guessed_model
    cols = set(df.columns)
    importer = _vidur_importer()
    if {"op", "median_s"} <= cols:
        out = _tidy(df, path, device, model)
    elif importer is not None and any(c.startswith("time_stats.") for c in cols) and (
            "collective" in cols or ("num_tokens" in cols and "is_prefill" not in cols)):
        # The profiler's importer is the project's one reading of Vidur mlp/network files.
        out = _tidy(importer(path, model=model or None, gpu=device or None), path, device, model)
    elif "num_tokens" in cols and any(c.startswith("time_stats.") for c in cols):
        _require(df, path, ("num_tensor_parallel_workers", "time_stats.mlp_up_proj.median"))
        out = _vidur_mlp(df, path, device, model)
    elif "is_prefill" in cols:
        _require(df, path, ("batch_size", "prefill_chunk_size", "kv_cache_size", "num_tensor_parallel_workers",
                            "n_embd", "n_q_head", "n_kv_head"))
        out = _attention(df, path, device, model)
    elif "collective" in cols:
        _require(df, path, ("size", "num_workers", "devices_per_node"))
        op = str(df["collective"].iloc[0])
        if op not in ("all_reduce", "send_recv") or df["collective"].nunique() > 1:
            raise _bad(path, f"unsupported collective(s) {sorted(map(str, df['collective'].unique()))}")
        _require(df, path, (f"time_stats.{op}.median",))
        out = _vidur_network(df, path, device, op)
    elif {"layer_name", "input", "latency(ns)"} <= cols:
        _require(df, path, ("kv_cache", "tp_size"))
        out = _lss_layers(df, path, device, model)
    else:
        raise _bad(path, "unrecognised columns (not tidy, Vidur or LLMServingSim)",
                   "a tidy table needs at least op and median_s")
    for c in ("model", "device"):
        out[c] = out[c].astype(object).where(out[c].notna(), "").astype(str)
    validate(out, path)
    return out.reset_index(drop=True)


def _vidur_importer():  # noqa: ANN202 - a function or None
    """``profiler.vidur_import.import_vidur_file`` where the profiler package is installed."""
    try:
        from profiler.vidur_import import import_vidur_file
    except ImportError:  # pragma: no cover - the simulator runs without the profiler
        return None
    return import_vidur_file


def _require(df: pd.DataFrame, path: Path, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in df]
    if missing:
        raise _bad(path, f"missing column(s) {', '.join(missing)}")


def validate(table: pd.DataFrame, where: Path | str = "profile") -> None:
    """Refuse tables that cannot be fitted: missing columns, unknown ops, bad or implausible times."""
    _require(table, Path(str(where)), ("op", "median_s"))
    unknown = sorted(set(map(str, table["op"])) - set(KNOWN_OPS))
    if unknown:
        raise _bad(where, f"unknown op(s) {', '.join(unknown[:5])}", f"known: {', '.join(KNOWN_OPS)}")
    for op, cols in REQUIRED_BY_OP.items():
        rows = table[table["op"] == op]
        for c in cols:
            if len(rows) and (c not in rows or rows[c].isna().any()):
                raise _bad(where, f"{op} rows need column {c}")
    token_rows = table[~table["op"].isin(REQUIRED_BY_OP)]
    if len(token_rows) and ("num_tokens" not in token_rows or token_rows["num_tokens"].isna().any()):
        raise _bad(where, "token-op rows need column num_tokens")
    for column, least in COUNT_COLUMNS.items():  # (a 0 or fractional count reached the fit as log(0), or was fitted)
        if column not in table:
            continue
        values = pd.to_numeric(table[column], errors="coerce").to_numpy(dtype=float)
        given = ~np.isnan(values) | table[column].notna().to_numpy()
        whole = (values == np.floor(values)) | (column in MEAN_COLUMNS)
        bad = given & ~(np.isfinite(values) & (values >= least) & whole & (values <= MAX_COUNT))
        if bad.any():
            i = int(np.argmax(bad))
            value = table[column].iloc[i:i + 1].tolist()[0]  # (a Python value: no np.int64(...) in the line)
            kind = "a number" if column in MEAN_COLUMNS else "a whole number"
            raise _bad(where, f"data row {i + 1} ({table['op'].iloc[i]}): {column} is {value!r}, not {kind} "
                       f"in [{least}, {MAX_COUNT:.0e}]", "fix or delete that row")
    t = pd.to_numeric(table["median_s"], errors="coerce").to_numpy(dtype=float)
    if not np.isfinite(t).all() or (t <= 0).any():
        raise _bad(where, "median_s must be positive and finite in every row")
    devices = (table["device"].astype(object).where(table["device"].notna(), "").astype(str).to_numpy()
               if "device" in table else np.full(len(t), "", dtype=object))
    limits = {d: plausible_limit_s(d) for d in set(devices)}
    over = t > np.array([limits[d] for d in devices], dtype=float)
    if over.any():
        i = int(np.argmax(np.where(over, t, -np.inf)))
        on = f" on {devices[i]}" if devices[i] else ""
        raise _bad(where, f"a kernel time of {t[i]:.3g} s is implausible{on} (limit {limits[devices[i]]:.3g} s)",
                   "median_s is in seconds; were milliseconds or nanoseconds read as seconds?")


def read_profiles(paths: Iterable[str | Path], *, device: str | None = None, model: str | None = None) -> pd.DataFrame:
    """Read and concatenate several profiles; they must agree on device and model."""
    frames = [read_profile(p, device=device, model=model) for p in paths]
    if not frames:
        raise ConfigError("profile", "no profile given", "pass --profile PATH (repeatable)")
    table = pd.concat(frames, ignore_index=True)
    devices = sorted({d for d in table["device"].astype(str) if d and d != "nan"})
    if len(devices) > 1:
        raise ConfigError("profile", f"tables from different GPUs: {', '.join(devices)}", "fit one GPU at a time")
    models = sorted({m for m in table["model"].astype(str) if m and m != "nan"})
    if len(models) > 1:
        raise ConfigError("profile", f"tables from different models: {', '.join(models)}", "fit one model at a time")
    return table
