"""Import Vidur-format profiling CSVs into the tidy schema (:mod:`profiler.schema`).

Vidur (microsoft/vidur, ``data/profiling/``) stores per-op latencies in **milliseconds**
(``time_stats.<op>.{min,max,mean,median,std}``); the tidy table holds **seconds**. Only
medians are imported (Vidur keeps no percentiles, so ``p20_s``/``p80_s``/``repeats``
are NA). Files are recognised by their columns, not their names. Vidur files repeat
some points (e.g. 2048 and 4096 tokens in ``mlp.csv``); every measurement is kept as
its own row, so imported tables may hold several rows per key.

``mlp.csv`` (one row per ``num_tokens`` x ``num_tensor_parallel_workers``; shapes in
``n_head``, ``n_kv_head``, ``n_embd``, ``n_expanded_embd``, ``vocab_size``,
``use_gated_mlp``) maps Vidur's ops to ours, per layer as the roofline prices them:

=============================================  ===============  =========
Vidur op                                       our op           num_calls
=============================================  ===============  =========
``emb``                                        ``embedding``    1
``input_layernorm`` + ``post_attention_layernorm``  ``norms`` (summed)  2 (1 if only one)
``attn_pre_proj``                              ``qkv_proj``     1
``attn_rope``                                  ``rotary``       1
``attn_post_proj``                             ``attn_out_proj``  1
``mlp_up_proj`` (gate and up fused)            ``mlp_up_gate``  1
``mlp_act``                                    ``mlp_act``      1
``mlp_down_proj``                              ``mlp_down``     1
``add`` (one residual add, x2 per layer)       ``residual_add`` 2
=============================================  ===============  =========

``attention.csv`` (``is_prefill``, ``batch_size``, ``prefill_chunk_size``,
``kv_cache_size``; heads are the model's, sharded by ``num_tensor_parallel_workers``):
prefill rows -> ``attn_prefill`` with ``chunk_size = prefill_chunk_size`` and
``kv_context = kv_cache_size`` (tokens cached before the chunk); decode rows ->
``attn_decode`` with ``context_len = kv_cache_size`` per sequence (uniform batches).
Only the attention kernel (``attn_prefill``/``attn_decode``) is imported, not Vidur's
separate input/output reshapes. ``backend`` keeps Vidur's ``attention_backend``.

``all_reduce.csv`` / ``send_recv.csv`` (``size`` in bytes, ``num_workers``,
``devices_per_node``) -> ``all_reduce`` / ``send_recv`` with ``message_bytes = size``
and ``world_size = num_workers``; ``topology`` records the folder and devices per node.
By default only single-node rows are kept (``devices_per_node >= num_workers``: the TP
and intra-node PP case); ``all_topologies=True`` keeps the cross-node rows too.

Model and GPU come from Vidur's folder layout (``compute/<gpu>/<org>/<model>/``,
``network/<gpu>_<topology>/``, ``<anything>/<gpu>/attention.csv``) unless given. An
attention file names no model; it is matched to the catalog by its shape only when one
model fits. dtype is ``float16`` (Vidur profiles fp16). Achieved FLOP/s and bytes/s come
from :mod:`profiler.work`, and ``suspect`` compares them with the catalog GPU's peaks.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.schema import (
    ALL_REDUCE,
    ATTN_DECODE,
    ATTN_OUT_PROJ,
    ATTN_PREFILL,
    COMM_OPS,
    EMBEDDING,
    MLP_ACT,
    MLP_DOWN,
    MLP_UP_GATE,
    NORMS,
    QKV_PROJ,
    RESIDUAL_ADD,
    ROTARY,
    SEND_RECV,
    conform,
    with_achieved,
)
from profiler.shapes import ShardedShapes
from profiler.work import comm_work, decode_work, prefill_work, token_op_work
from simulator.config.catalog import MODELS, GPUSpec, ModelSpec, get_gpu, get_model
from simulator.config.errors import ConfigError
from simulator.config.hf_config import is_path_like

MS = 1e-3
VIDUR_DTYPE = "float16"
VIDUR_DTYPE_BYTES = 2

# Vidur mlp.csv op -> (our op, how many of these kernels one layer runs).
MLP_OP_MAP: dict[str, tuple[str, int]] = {
    "emb": (EMBEDDING, 1),
    "input_layernorm": (NORMS, 1),
    "post_attention_layernorm": (NORMS, 1),
    "attn_pre_proj": (QKV_PROJ, 1),
    "attn_rope": (ROTARY, 1),
    "attn_post_proj": (ATTN_OUT_PROJ, 1),
    "mlp_up_proj": (MLP_UP_GATE, 1),
    "mlp_act": (MLP_ACT, 1),
    "mlp_down_proj": (MLP_DOWN, 1),
    "add": (RESIDUAL_ADD, 2),
}
NETWORK_OPS = (ALL_REDUCE, SEND_RECV)


def _bad(path: Path, problem: str, fix: str | None = None) -> ConfigError:
    return ConfigError("vidur", f"{path}: {problem}", fix)


# The shape and size keys of Vidur's CSVs: whole numbers >= 0 (timings may be blank where an op was not run).
_INTEGER_KEYS = ("num_tokens", "n_head", "n_q_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size",
                 "num_tensor_parallel_workers", "block_size", "max_model_len", "batch_size", "prefill_chunk_size",
                 "kv_cache_size", "rank", "num_workers", "size", "devices_per_node", "max_devices_per_node")


def _check_keys(df: pd.DataFrame, path: Path) -> None:
    """Rows there, every key cell a whole number >= 0, every timing a number or blank, ``is_prefill`` a
    boolean; else one error naming line and column."""
    if not len(df):
        raise _bad(path, "no rows below the header", "pass a profile with measurements")
    for col in (c for c in _INTEGER_KEYS if c in df.columns):
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(values) | (values < 0) | (values != np.floor(values))
        if bad.any():
            i = int(np.argmax(bad))
            raise _bad(path, f"line {i + 2}, column {col}: {str(df[col].iloc[i])!r} is not a whole number >= 0",
                       "fix or delete that row")
    for col in (c for c in df.columns if str(c).startswith("time_stats.")):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = ((values.isna() & df[col].notna()) | np.isinf(values)).to_numpy()  # (inf was read as a blank, unsaid)
        if str(col).endswith(".median"):  # a negative time is no kernel's (it was written, marked suspect); Vidur
            bad = bad | (values < 0).to_numpy()  # times its reshapes at 0.0, which stay
        if bad.any():  # blank is fine (an op a row did not run); text is not
            i = int(np.argmax(bad))
            raise _bad(path, f"line {i + 2}, column {col}: {str(df[col].iloc[i])!r} is not a time in ms"
                       + (" >= 0" if str(col).endswith(".median") else ""), "fix or delete that row")
    none = (pd.to_numeric(df["num_tokens"], errors="coerce") < 1).to_numpy() if "num_tokens" in df.columns else None
    if none is not None and none.any():
        i = int(np.argmax(none))
        raise _bad(path, f"line {i + 2}, column num_tokens: {str(df['num_tokens'].iloc[i])!r} tokens time no kernel",
                   "fix or delete that row")
    if "is_prefill" in df.columns:
        flags = df["is_prefill"].astype(str).str.strip().str.lower()
        bad = ~flags.isin(("true", "false", "1", "0"))
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise _bad(path, f"line {i + 2}, column is_prefill: {df['is_prefill'].iloc[i]!r} is not True or False",
                       "fix or delete that row")


def _gpu_from_path(path: Path) -> tuple[str | None, GPUSpec | None]:
    """(folder name, catalog GPU) from Vidur's layout; (None, None) where it says nothing."""
    parts = path.resolve().parts
    folder = None
    if "compute" in parts and parts.index("compute") + 1 < len(parts) - 1:
        folder = parts[parts.index("compute") + 1]
    elif "network" in parts and parts.index("network") + 1 < len(parts) - 1:
        folder = parts[parts.index("network") + 1]
    elif len(parts) >= 2:
        # Outside compute/ or network/: where Vidur's layout puts the GPU, <gpu>/<org>/<model>/<table>.csv (a copy of
        # its compute/ folder without the root) or <gpu>_<topology>/<table>.csv, else the file's own folder (no GPU's)
        for part in (parts[-4] if len(parts) >= 4 else None, parts[-2]):
            if part is not None and (found := _catalog_gpu(part)) is not None:
                return part, found
        folder = parts[-2]
    if folder is None:
        return None, None
    return folder, _catalog_gpu(folder)


def _catalog_gpu(folder: str) -> GPUSpec | None:
    """The catalog GPU a Vidur folder names (``a100``, ``h100_pairwise_nvlink``), by name only (never a file)."""
    name = folder.split("_")[0]
    if is_path_like(name):  # (get_gpu would read a GPU table of that name from the working folder)
        return None
    try:
        return get_gpu(name)
    except ConfigError:
        return None


def _model_from_path(path: Path) -> ModelSpec | None:
    parts = path.resolve().parts
    if "compute" in parts:
        i = parts.index("compute")
        if len(parts) > i + 4:
            try:
                return get_model(f"{parts[i + 2]}/{parts[i + 3]}")
            except ConfigError:
                return None
    return None


def _shape_model(name: str, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, gated: bool) -> ModelSpec:
    return ModelSpec(name=name or "vidur-shape", hf_id=name or "vidur-shape", num_layers=1, hidden_size=hidden,
                     num_heads=heads, num_kv_heads=kv_heads, ffn_size=ffn, vocab_size=vocab, max_model_len=1 << 20,
                     gated_mlp=gated)


def _require(df: pd.DataFrame, path: Path, cols: Iterable[str]) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise _bad(path, f"missing Vidur column(s) {', '.join(missing)}", "pass an unmodified Vidur profiling CSV")


def _ms(df: pd.DataFrame, op: str) -> np.ndarray:
    return pd.to_numeric(df[f"time_stats.{op}.median"], errors="coerce").to_numpy(dtype=float) * MS


def _check_model_shape(path: Path, i: int, model: ModelSpec, hidden: int, heads: int, kv_heads: int,
                       ffn: int | None = None) -> None:
    """A row's shape must be the named model's (``--model``, or the model of Vidur's folder layout): else its
    times would be filed under a model they were not measured for. (Vidur pads the vocabulary: not compared.)"""
    want = (model.hidden_size, model.num_heads, model.num_kv_heads)
    got = (hidden, heads, kv_heads)
    if ffn is not None and not model.is_moe:
        want, got = (*want, model.ffn_size), (*got, ffn)
    if got != want:
        names = "hidden/heads/KV heads" + ("/FFN" if len(want) == 4 else "")
        raise _bad(path, f"row {i} profiles {names} {'/'.join(map(str, got))}, not {model.name}'s "
                   f"{'/'.join(map(str, want))}", "pass the model the file profiles with --model, or drop --model")


def _read_mlp(df: pd.DataFrame, path: Path, model: ModelSpec | None) -> tuple[list[dict], int]:
    _require(df, path, ("num_tokens", "num_tensor_parallel_workers", "n_head", "n_kv_head", "n_embd",
                        "n_expanded_embd", "vocab_size"))
    present = [op for op in MLP_OP_MAP if f"time_stats.{op}.median" in df.columns]
    if not present:
        raise _bad(path, "no time_stats.<op>.median column of a known op", f"known: {', '.join(MLP_OP_MAP)}")
    ms = {op: _ms(df, op) for op in present}
    rows: list[dict] = []
    num_blank = 0
    name = model.name if model else ""
    for i, rec in enumerate(df.to_dict("records")):
        if model is not None:
            _check_model_shape(path, i, model, int(rec["n_embd"]), int(rec["n_head"]), int(rec["n_kv_head"]),
                               int(rec["n_expanded_embd"]))
        tp = int(rec["num_tensor_parallel_workers"])
        gated = str(rec.get("use_gated_mlp", True)).lower() in ("true", "1")
        # Vidur's n_expanded_embd is the full FFN width (before TP); heads are the model's.
        spec = _shape_model(name, int(rec["n_embd"]), int(rec["n_head"]), int(rec["n_kv_head"]),
                            int(rec["n_expanded_embd"]), int(rec["vocab_size"]), gated)
        try:
            shapes = ShardedShapes(spec, tp)
        except ConfigError as err:
            raise _bad(path, f"row {i}: {err}") from None
        tokens = int(rec["num_tokens"])
        by_op: dict[str, tuple[float, int]] = {}
        blank = False
        for vop in present:
            op, calls = MLP_OP_MAP[vop]
            t = ms[vop][i] * calls
            if not np.isfinite(t):
                blank = True
                continue
            prev_t, prev_calls = by_op.get(op, (0.0, 0))
            by_op[op] = (prev_t + t, prev_calls + calls)
        # a row with any kernel untimed is counted (its other kernels kept): a blank column dropped an op unsaid
        num_blank += blank
        for op, (t, calls) in by_op.items():
            w = token_op_work(op, tokens, shapes, VIDUR_DTYPE_BYTES)
            # Scale per-layer work by the kernels Vidur actually timed (e.g. one norm for phi-2).
            scale = calls / w.num_calls
            rows.append({"op": op, "num_tokens": tokens, "tp": tp, "num_calls": calls, "median_s": t,
                         "flops": w.flops * scale, "bytes": w.bytes * scale, "backend": "torch"})
    return rows, num_blank


def _infer_attention_model(hidden: int, heads: int, kv_heads: int) -> ModelSpec | None:
    fits = [m for m in MODELS.values()
            if (m.hidden_size, m.num_heads, m.num_kv_heads) == (hidden, heads, kv_heads)]
    return fits[0] if len(fits) == 1 else None


def _read_attention(df: pd.DataFrame, path: Path, model: ModelSpec | None) -> tuple[list[dict], int]:
    _require(df, path, ("is_prefill", "batch_size", "prefill_chunk_size", "kv_cache_size",
                        "num_tensor_parallel_workers", "n_embd", "n_q_head", "n_kv_head"))
    prefill_ms = _ms(df, "attn_prefill") if "time_stats.attn_prefill.median" in df else np.full(len(df), np.nan)
    decode_ms = _ms(df, "attn_decode") if "time_stats.attn_decode.median" in df else np.full(len(df), np.nan)
    rows: list[dict] = []
    num_blank = 0
    shapes_cache: dict[tuple, ShardedShapes] = {}
    for i, rec in enumerate(df.to_dict("records")):
        key = (int(rec["n_embd"]), int(rec["n_q_head"]), int(rec["n_kv_head"]), int(rec["num_tensor_parallel_workers"]))
        if key not in shapes_cache:
            hidden, heads, kv_heads, tp = key
            if model is not None:
                _check_model_shape(path, i, model, hidden, heads, kv_heads)
            found = model if model is not None else _infer_attention_model(hidden, heads, kv_heads)
            if found is None or (found.hidden_size, found.num_heads, found.num_kv_heads) != (hidden, heads, kv_heads) \
                    or found.ffn_size % tp:
                # Only the attention shape matters here; the FFN width is a placeholder tp divides.
                found = _shape_model("", hidden, heads, kv_heads, tp * hidden, 32000, True)
            try:
                shapes_cache[key] = ShardedShapes(found, tp)
            except ConfigError as err:
                raise _bad(path, f"row {i}: {err}") from None
        shapes = shapes_cache[key]
        model_name = shapes.model.name if shapes.model.name in MODELS else ""
        batch, kv = int(rec["batch_size"]), int(rec["kv_cache_size"])
        backend = str(rec.get("attention_backend", "vidur")).replace("AttentionBackend.", "").lower()
        base = {"model": model_name, "tp": shapes.tp, "batch_size": batch, "backend": backend, "num_calls": 1}
        if str(rec["is_prefill"]).lower() in ("true", "1"):
            t = prefill_ms[i]
            if not np.isfinite(t):
                num_blank += 1
                continue
            chunk = int(rec["prefill_chunk_size"])
            ctx = kv + chunk
            w = prefill_work(batch, chunk, kv, shapes, VIDUR_DTYPE_BYTES)
            rows.append({**base, "op": ATTN_PREFILL, "num_tokens": batch * chunk, "chunk_size": chunk,
                         "kv_context": kv, "context_len": ctx, "context_len_max": ctx, "kv_tokens": batch * ctx,
                         "kv_sq_sum": batch * ctx * ctx, "median_s": t, "flops": w.flops, "bytes": w.bytes})
        else:
            t = decode_ms[i]
            if not np.isfinite(t):
                num_blank += 1
                continue
            w = decode_work([kv] * batch, shapes, VIDUR_DTYPE_BYTES)
            rows.append({**base, "op": ATTN_DECODE, "num_tokens": batch, "chunk_size": 1, "kv_context": kv,
                         "context_len": kv, "context_len_max": kv, "kv_tokens": batch * kv,
                         "kv_sq_sum": batch * kv * kv, "median_s": t, "flops": w.flops, "bytes": w.bytes})
    return rows, num_blank


def _read_network(df: pd.DataFrame, path: Path, folder: str | None, model: ModelSpec | None,
                  all_topologies: bool) -> tuple[list[dict], int]:
    _require(df, path, ("size", "num_workers", "collective"))
    ops = sorted(set(map(str, df["collective"])))
    unknown = [op for op in ops if op not in NETWORK_OPS]
    if unknown:
        raise _bad(path, f"unsupported collective(s) {unknown}", f"supported: {', '.join(NETWORK_OPS)}")
    rows: list[dict] = []
    num_blank = 0
    per_node_col = "devices_per_node" in df.columns
    for op in ops:
        sub = df[df["collective"] == op]
        _require(sub, path, (f"time_stats.{op}.median",))
        times = _ms(sub, op)
        for t, rec in zip(times, sub.to_dict("records"), strict=True):
            world, size = int(rec["num_workers"]), int(rec["size"])
            per_node = int(rec["devices_per_node"]) if per_node_col else world
            if not all_topologies and per_node < world:
                continue
            if not np.isfinite(t):
                num_blank += 1
                continue
            w = comm_work(op, size, world)
            # The tokens whose hidden states the message holds: none (NA) for a message smaller than one token's
            # (Vidur times collectives from a few bytes up; a count of 0 is no token count, and fit refuses it).
            tokens = size // (model.hidden_size * VIDUR_DTYPE_BYTES) if model is not None else None
            tokens = tokens or None
            rows.append({"op": op, "message_bytes": size, "world_size": world, "num_tokens": tokens,
                         "median_s": t, "flops": w.flops, "bytes": w.bytes, "num_calls": 1, "backend": "nccl",
                         "topology": f"{folder or 'vidur'}:devices_per_node={per_node}",
                         "_cross_node": per_node < world})
    return rows, num_blank


def import_vidur_file(path: str | Path, *, model: str | None = None, gpu: str | None = None,
                      all_topologies: bool = False, skipped: list[tuple[Path, int]] | None = None) -> pd.DataFrame:
    """One Vidur CSV (``mlp.csv``, ``attention.csv``, ``all_reduce.csv``, ``send_recv.csv``) as a tidy table.
    A row without a median time (Vidur leaves it blank where a kernel was not timed) is left out; ``skipped``,
    if given, gets ``(path, count)`` for a file with such rows."""
    path = Path(path)
    if not path.is_file():
        raise _bad(path, "no such file", "pass a Vidur mlp.csv, attention.csv, all_reduce.csv or send_recv.csv")
    try:
        df = pd.read_csv(path)
    except (ValueError, OSError) as err:
        raise _bad(path, f"not a CSV file ({type(err).__name__})") from None
    cols = set(df.columns)
    kind = ("attention" if "is_prefill" in cols else "network" if "collective" in cols
            else "mlp" if "num_tokens" in cols and any(c.startswith("time_stats.") for c in cols) else None)
    if kind is None:
        raise _bad(path, "not a Vidur profile (expected mlp.csv, attention.csv, all_reduce.csv or send_recv.csv)")
    _check_keys(df, path)
    if "llmservingsim" in (part.lower() for part in path.resolve().parts):
        # (its tables share Vidur's columns, not their meaning: a prefill's kv_context counts the chunk, a decode's
        # context is the batch's total; simulate calibrate and fidelity read them as LLMServingSim wrote them)
        raise _bad(path, "is one of LLMServingSim's profiles, whose columns mean other things than Vidur's",
                   "import Vidur's own profiles; simulate calibrate and fidelity read LLMServingSim's")
    folder, spec_gpu = _gpu_from_path(path)
    if gpu is not None:
        given = get_gpu(gpu)
        # In Vidur's layout (compute/<gpu>/..., network/<gpu>_<topology>/...) a GPU the folder does not name (h100 ->
        # a40) is refused: the rows' plausibility checks read its peaks. A GPU it names is taken over the folder's
        # guess (Vidur's "a100" folder may hold an A100-40GB's profiles); elsewhere the folder is no GPU's.
        named = (folder or "").split("_")[0].lower()
        vidur_layout = {"compute", "network"} & set(path.resolve().parts)
        if spec_gpu is not None and vidur_layout and not given.name.startswith(named):
            raise ConfigError("--gpu", f"{path} is in Vidur's folder of {named} profiles ({folder}), not {gpu}'s",
                              f"drop --gpu (the folder says {spec_gpu.name}), or import a profile of {gpu}")
        spec_gpu, folder = given, folder or gpu
    if spec_gpu is None:  # (the rows were labelled with the folder's name, which no fit or check then matched)
        raise ConfigError("--gpu", f"{path}: its folder ({folder}) names no catalog GPU, as Vidur's layout "
                          "(compute/<gpu>/...) would", "pass --gpu (and --model for compute tables)")
    model_spec = get_model(model) if model else _model_from_path(path)
    if kind == "attention":
        rows, num_blank = _read_attention(df, path, model_spec)
    elif kind == "network":
        rows, num_blank = _read_network(df, path, folder, model_spec, all_topologies)
    else:
        rows, num_blank = _read_mlp(df, path, model_spec)
    if num_blank and skipped is not None:
        skipped.append((path, num_blank))
    if not rows:
        return conform(pd.DataFrame(columns=["op"]))
    out = pd.DataFrame(rows)
    if "model" not in out.columns:
        out["model"] = model_spec.name if model_spec is not None and not out["op"].isin(COMM_OPS).all() else ""
    out["model"] = out["model"].replace("", pd.NA)
    out["dtype"] = VIDUR_DTYPE
    out["device"] = spec_gpu.name if spec_gpu is not None else (folder or pd.NA)
    out["device_name"] = folder
    out["source"] = f"vidur:{path.name}"
    out = with_achieved(out)
    t = out["median_s"].astype(float)
    suspect = ~(t > 0)
    if spec_gpu is not None:
        link = spec_gpu.nvlink_bytes_per_s or spec_gpu.pcie_bytes_per_s
        comm = out["op"].isin(COMM_OPS)
        # Cross-node rows run over the network, not NVLink: only single-node rows are checked.
        single = ~out["_cross_node"].fillna(False).astype(bool) if "_cross_node" in out else True
        suspect |= ~comm & ((out["achieved_flops_per_s"] > spec_gpu.bf16_flops * 1.05)
                            | (out["achieved_bytes_per_s"] > spec_gpu.hbm_bytes_per_s * 1.05))
        suspect |= comm & single & (out["achieved_bytes_per_s"] > link * 1.05)
    out["suspect"] = suspect
    return conform(out.drop(columns=["_cross_node"], errors="ignore"))


def import_vidur(paths: Iterable[str | Path], *, model: str | None = None, gpu: str | None = None,
                 all_topologies: bool = False, skipped: list[tuple[Path, int]] | None = None) -> pd.DataFrame:
    """Several Vidur CSVs (or folders searched for them) as one tidy table."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for name in ("mlp.csv", "attention.csv", "all_reduce.csv", "send_recv.csv")
                           for f in p.rglob(name))
            if not found:
                raise _bad(p, "holds no mlp.csv, attention.csv, all_reduce.csv or send_recv.csv")
            files += found
        else:
            files.append(p)
    if not files:
        raise ConfigError("vidur", "no file given", "pass Vidur CSV files or folders")
    seen: set[Path] = set()
    for f in files:  # (a file given twice, or inside a folder also given, doubled its rows)
        if f.resolve() in seen:
            raise _bad(f, "given twice (or inside a folder also given)", "give each file once")
        seen.add(f.resolve())
    if all_topologies and not any(_is_network_file(f) for f in files):  # (only collective rows have topologies)
        raise ConfigError("--all-topologies", "keeps cross-node collective rows, and no file given is a collective's "
                          "(all_reduce.csv, send_recv.csv), so it would do nothing",
                          "drop --all-topologies, or add the network profiles")
    frames = [import_vidur_file(f, model=model, gpu=gpu, all_topologies=all_topologies, skipped=skipped)
              for f in files]
    return conform(pd.concat(frames, ignore_index=True))


def _is_network_file(path: Path) -> bool:
    """Whether a Vidur CSV holds collectives (its header names a ``collective`` column); False if unreadable (the
    import says why)."""
    try:
        return "collective" in pd.read_csv(path, nrows=0).columns
    except (ValueError, OSError):
        return False


def import_to_folder(paths: Iterable[str | Path], out: str | Path, *, model: str | None = None,
                     gpu: str | None = None, all_topologies: bool = False,
                     skipped: list[tuple[Path, int]] | None = None,
                     imported: list[pd.DataFrame] | None = None) -> pd.DataFrame:
    """Import into ``<out>/profile.csv`` (merged with rows already there, new ones win) plus metadata; the merged
    table is returned, this import's own rows appended to ``imported`` where given."""
    import datetime as dt
    import json
    import sys

    from profiler.runner import _check_out_folder, write_metadata, write_table
    from profiler.schema import KEY_COLUMNS, METADATA_FILE, TABLE_FILE, key_of

    paths = [Path(p) for p in paths]
    table = import_vidur(paths, model=model, gpu=gpu, all_topologies=all_topologies, skipped=skipped)
    if imported is not None:
        imported.append(table)
    models = sorted(set(table["model"].dropna()))
    if len(models) > 1:
        raise ConfigError("model", f"the files hold several models ({', '.join(models)})",
                          "import one model per --out folder")
    devices = sorted(set(table["device"].dropna()))
    if len(devices) > 1:
        raise ConfigError("gpu", f"the files come from several GPUs ({', '.join(devices)})",
                          "import one GPU per --out folder")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    existing, meta = _check_out_folder(out, models[0] if models else None, devices[0] if devices else None)
    new_keys = {key_of(r) for r in table[list(KEY_COLUMNS)].to_dict("records")}
    keep = [key_of(r) not in new_keys for r in existing[list(KEY_COLUMNS)].to_dict("records")]
    merged = conform(pd.concat([existing[keep], table], ignore_index=True)) if len(existing) else table
    write_table(merged, out / TABLE_FILE)
    sources = sorted(set(meta.get("sources", [])) | {str(p) for p in paths})
    meta.update({
        "model": models[0] if models else meta.get("model"),
        "device": devices[0] if devices else meta.get("device"),
        "importer": "profiler.vidur_import",
        "sources": sources,
        "units": "seconds (Vidur milliseconds x 1e-3)",
        "dtype": VIDUR_DTYPE,
        "all_topologies": all_topologies,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command_line": " ".join(sys.argv),
        "complete": True,
        "num_rows": len(merged),
    })
    write_metadata(json.loads(json.dumps(meta, default=str)), out / METADATA_FILE)
    return merged
