"""The tidy profile table: one measurement per row, the contract with the cost models.

Every producer (``simulate profile``, the Vidur importer) writes this schema and every
consumer (the learned cost model, notebooks) reads it. It is pandas-only (no torch), so
it can be imported anywhere. Change it only by *adding* columns; never rename or reuse.

Row semantics
-------------
* ``median_s``/``p20_s``/``p80_s`` are **seconds** on one GPU (or CPU) of a TP group,
  for the op as one layer runs it: ``norms`` covers every norm of a layer (2, or 1 for
  models with parallel attention/MLP blocks), ``residual_add`` both residual adds
  (``num_calls`` says how many kernel calls the time covers). ``repeats`` is the number
  of timed repetitions; imported rows without percentiles carry NaN there.
* Linear and elementwise ops (:data:`TOKEN_OPS`, plus ``embedding`` and ``lm_head``)
  are indexed by ``num_tokens`` and ``tp`` (shapes sharded as a TP rank runs them).
* ``attn_prefill``: ``batch_size`` sequences, each a query chunk of ``chunk_size``
  tokens over ``kv_context`` tokens already cached (causal, bottom-right aligned), so
  each attends ``context_len = kv_context + chunk_size`` keys; ``num_tokens`` =
  ``batch_size * chunk_size``.
* ``attn_decode``: ``batch_size`` sequences with one query token each; per-sequence KV
  lengths may differ (mixed batches): ``context_len`` is their mean (rounded),
  ``context_len_max`` the largest, ``kv_tokens`` the exact sum and ``kv_sq_sum`` the sum
  of squares (the same features as :class:`simulator.costmodel.base.BatchShape`);
  ``num_tokens`` = ``batch_size``, ``chunk_size`` = 1, ``kv_context`` = ``context_len``.
* ``all_reduce``/``all_gather``/``send_recv``: ``message_bytes`` is the tensor each rank
  holds after the op (all-reduce: in = out; all-gather: the gathered output; send/recv:
  the tensor sent), ``world_size`` the process-group size; ``num_tokens`` is
  ``message_bytes / (hidden_size * dtype bytes)`` where a model defines it, else NA.
* ``flops``/``bytes`` are the useful work of the op (padding excluded);
  ``achieved_*_per_s`` = work / ``median_s``. ``suspect`` is True when either exceeds
  the device's peak (a timing bug, or a kernel that did not run), or the time is not
  positive.
* ``source`` is ``"servesim"`` for our own measurements or ``"vidur:<file>"`` for
  imported ones; ``backend`` names the kernel library (``sdpa``, ``flash_attn``,
  ``gloo``, ``nccl``, ``torch``, or the imported file's backend); ``topology`` the
  communication set-up (e.g. ``localhost``, ``a100_dgx:devices_per_node=1``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.config.errors import ConfigError

# -- op names --------------------------------------------------------------------------
# Per-layer ops priced by token count; identical to simulator.costmodel.roofline.TOKEN_OPS
# minus tp_all_reduce (which the cost model derives from the all_reduce rows).
QKV_PROJ = "qkv_proj"
ATTN_OUT_PROJ = "attn_out_proj"
MLP_UP_GATE = "mlp_up_gate"
MLP_ACT = "mlp_act"
MLP_DOWN = "mlp_down"
NORMS = "norms"
ROTARY = "rotary"
RESIDUAL_ADD = "residual_add"
EMBEDDING = "embedding"
LM_HEAD = "lm_head"
ATTN_PREFILL = "attn_prefill"
ATTN_DECODE = "attn_decode"
ALL_REDUCE = "all_reduce"
ALL_GATHER = "all_gather"
SEND_RECV = "send_recv"

LINEAR_OPS = (QKV_PROJ, ATTN_OUT_PROJ, MLP_UP_GATE, MLP_DOWN, LM_HEAD)
ELEMENTWISE_OPS = (NORMS, MLP_ACT, ROTARY, RESIDUAL_ADD, EMBEDDING)
ATTENTION_OPS = (ATTN_PREFILL, ATTN_DECODE)
COMM_OPS = (ALL_REDUCE, ALL_GATHER, SEND_RECV)
OP_FAMILIES: dict[str, tuple[str, ...]] = {
    "linear": LINEAR_OPS,
    "elementwise": ELEMENTWISE_OPS,
    "attention": ATTENTION_OPS,
    "comm": COMM_OPS,
}
ALL_OPS = LINEAR_OPS + ELEMENTWISE_OPS + ATTENTION_OPS + COMM_OPS
FAMILY_OF_OP = {op: family for family, ops in OP_FAMILIES.items() for op in ops}

# -- columns ---------------------------------------------------------------------------
# name -> pandas dtype. Int64/boolean/string are nullable: NA where a column does not
# apply to an op (e.g. message_bytes for a GEMM).
SCHEMA: dict[str, str] = {
    "model": "string",
    "op": "string",
    "num_tokens": "Int64",
    "batch_size": "Int64",
    "context_len": "Int64",
    "context_len_max": "Int64",
    "chunk_size": "Int64",
    "kv_context": "Int64",
    "kv_tokens": "Int64",
    "kv_sq_sum": "Int64",
    "message_bytes": "Int64",
    "world_size": "Int64",
    "tp": "Int64",
    "dtype": "string",
    "device": "string",  # catalog GPU name ("h200", "a100-80gb"), else the lowercased device name, or "cpu"
    "device_name": "string",  # as the device reports it: "NVIDIA H200", the CPU model; "a100" for imports
    "backend": "string",
    "topology": "string",
    "num_calls": "Int64",
    "median_s": "float64",
    "p20_s": "float64",
    "p80_s": "float64",
    "repeats": "Int64",
    "launch_overhead_s": "float64",  # eager minus CUDA-graph time, where graphs were used
    "flops": "float64",
    "bytes": "float64",
    "achieved_flops_per_s": "float64",
    "achieved_bytes_per_s": "float64",
    "suspect": "boolean",
    "source": "string",
}
COLUMNS: tuple[str, ...] = tuple(SCHEMA)

# Columns that identify a measurement point: a resumed run skips rows whose key is
# already in the table (our own runs hold one row per key; imported tables may repeat
# a key where the source measured a point twice).
KEY_COLUMNS: tuple[str, ...] = ("model", "op", "num_tokens", "batch_size", "context_len", "context_len_max",
                                "chunk_size", "kv_context", "kv_tokens", "message_bytes", "world_size", "tp",
                                "dtype", "device", "backend", "topology")

TABLE_FILE = "profile.csv"
METADATA_FILE = "metadata.json"


def empty_table() -> pd.DataFrame:
    return conform(pd.DataFrame(columns=list(COLUMNS)))


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Return ``df`` with exactly :data:`COLUMNS`, in order, with the schema's dtypes.

    Missing columns are added as NA; unknown columns are an error (a producer bug).
    """
    extra = [c for c in df.columns if c not in SCHEMA]
    if extra:
        raise ValueError(f"columns not in profiler.schema.COLUMNS: {extra}")
    out = pd.DataFrame(index=df.index)
    for name, dtype in SCHEMA.items():
        col = df[name] if name in df.columns else pd.Series(pd.NA, index=df.index, dtype="object")
        if dtype == "Int64":
            col = pd.to_numeric(col, errors="raise").round().astype("Int64") if len(col) else col.astype("Int64")
        elif dtype == "float64":
            col = pd.to_numeric(col, errors="raise").astype("float64")
        elif dtype == "boolean":
            col = col.map(_to_bool, na_action="ignore").astype("boolean")
        else:
            col = col.astype("string")
        out[name] = col
    return out.reset_index(drop=True)


def _to_bool(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def with_achieved(df: pd.DataFrame) -> pd.DataFrame:
    """Fill ``achieved_*_per_s`` from ``flops``/``bytes`` and ``median_s``."""
    df = df.copy()
    t = df["median_s"].astype("float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        df["achieved_flops_per_s"] = np.where(t > 0, df["flops"].astype("float64") / t, np.nan)
        df["achieved_bytes_per_s"] = np.where(t > 0, df["bytes"].astype("float64") / t, np.nan)
    return df


def key_of(row: dict | pd.Series) -> tuple[str, ...]:
    """A hashable, NA-safe identity of a measurement point."""
    out = []
    for name in KEY_COLUMNS:
        value = row.get(name, None)
        if value is None or (not isinstance(value, str) and pd.isna(value)):
            out.append("")
        elif SCHEMA[name] == "Int64":
            out.append(str(int(value)))
        else:
            out.append(str(value))
    return tuple(out)


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a profile table (CSV or parquet) and conform it to the schema."""
    path = Path(path)
    if not path.exists():
        raise ConfigError("profile", f"no profile table at {path}", "run `simulate profile` or `simulate import-vidur`")
    try:
        if path.suffix == ".parquet":
            df = pd.read_parquet(path)
        else:
            df = pd.read_csv(path, dtype={"model": "string", "source": "string", "topology": "string"},
                             keep_default_na=True)
    except (ValueError, OSError) as err:
        raise ConfigError("profile", f"cannot read {path}: {err}".splitlines()[0]) from None
    missing = [c for c in ("op", "median_s") if c not in df.columns]
    if missing:
        raise ConfigError("profile", f"{path} is not a profile table (missing columns {missing})",
                          "pass a table written by `simulate profile` or `simulate import-vidur`")
    return conform(df[[c for c in df.columns if c in SCHEMA]])
