"""Reading NVIDIA AIConfigurator's per-op kernel database (``../shared/data/profiles/aiconfigurator``).

The database (see that folder's README) holds, per system (GPU), op family, backend and
version, parquet tables of measured per-call latencies (**milliseconds**, one GPU):
``systems/data/<system>/<family>/<backend>/<version>/<table>.parquet``. This module

- maps a catalog GPU to its system (:data:`SYSTEMS`) and finds the one version folder a
  family has for a backend (the subset keeps one; where a folder declares ``reuse.yaml`` the
  donor version's rows join it, newest first on equal keys);
- reads a table with pyarrow, only the columns asked for and only the rows a filter keeps,
  cached per process (:func:`read_table`), so a run reads a few megabytes once;
- picks, per table and dtype, the one kernel implementation priced (:func:`choose_source`:
  the source with the most rows, i.e. the one the collector swept; deterministic; for the
  custom all-reduce the CUDA-graph variant, which a serving step replays), or, for the few
  lanes whose figures the kernel does not bear out or that time another kernel than the engine
  launches (:data:`LANE_DONORS`), another collector's rows of the same system or of the same die
  in another package (B200 and GB200, B300 and GB300) (:func:`read_priced_rows`);
- turns a system's tables into one tidy frame (:func:`tidy_tables`) for
  ``simulate import-aiconfigurator``.

Nothing here prices anything; :mod:`simulator.costmodel.aic.model` does. Times stay in
milliseconds in this module and become seconds in the model.
"""

from __future__ import annotations

import contextlib
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.config.catalog import get_gpu
from simulator.config.errors import ConfigError
from simulator.config.run_config import KERNEL_TABLES
from simulator.config.shared_data import SHARED_DATA

BACKENDS = ("vllm", "sglang", "trtllm")
KERNEL_CHOICES = ("roofline", *BACKENDS)
assert KERNEL_CHOICES == KERNEL_TABLES, "config.KERNEL_TABLES must list the backends"
DEFAULT_ROOT = SHARED_DATA / "profiles" / "aiconfigurator"

# Catalog GPU name -> AIConfigurator system. Names the catalog may not have yet (B300, GB300,
# RTX PRO 6000) are listed so they work as soon as the catalog has them.
SYSTEMS: dict[str, str] = {
    "a100-80gb": "a100_sxm", "l40s": "l40s", "h100-sxm": "h100_sxm",
    "h200": "h200_sxm", "b200": "b200_sxm", "gb200": "gb200", "b300": "b300_sxm", "gb300": "gb300",
    "rtx-pro-6000": "rtx_pro_6000_server", "rtx-pro-6000-server": "rtx_pro_6000_server",
}
# Catalog GPUs whose sibling the database measured, not they: the sibling's tables would price them with its
# memory bandwidth (a100_sxm is the 80 GB card, 2.04 TB/s against the 40 GB's 1.56: a memory-bound decode step
# about a quarter too fast), so they are refused, naming the sibling.
MEASURED_SIBLING: dict[str, str] = {"a100-40gb": "a100-80gb"}

# (family folder, table file stem) of every table the cost model reads.
TABLES: dict[str, tuple[str, str]] = {
    "gemm": ("gemm", "gemm_perf"),
    "context_attention": ("attention", "context_attention_perf"),
    "generation_attention": ("attention", "generation_attention_perf"),
    "context_mla": ("mla", "context_mla_perf"),
    "generation_mla": ("mla", "generation_mla_perf"),
    "mla_bmm": ("mla_bmm", "mla_bmm_perf"),
    "moe": ("moe", "moe_perf"),
    "custom_allreduce": ("comm", "custom_allreduce_perf"),
}
# The dtype column of each table.
DTYPE_COLUMN: dict[str, str] = {
    "gemm": "gemm_dtype", "context_attention": "attn_dtype", "generation_attention": "attn_dtype",
    "context_mla": "mla_dtype", "generation_mla": "mla_dtype", "mla_bmm": "bmm_dtype", "moe": "moe_dtype",
    "custom_allreduce": "allreduce_dtype", "nccl": "nccl_dtype",
}


def data_root(root: str | Path | None = None) -> Path:
    """The database folder (``systems/`` inside); a ConfigError naming the fix when absent."""
    path = Path(root) if root is not None else DEFAULT_ROOT
    if not (path / "systems" / "data").is_dir():
        raise ConfigError("kernels", f"AIConfigurator tables not found under {path}",
                          "put the database at ../shared/data/profiles/aiconfigurator or use --kernels roofline")
    return path


def system_for(gpu: str) -> str:
    """The AIConfigurator system measured for a catalog GPU, or a ConfigError listing those that have one."""
    if gpu in MEASURED_SIBLING:
        raise ConfigError("kernels", f"the AIConfigurator tables were measured on the {MEASURED_SIBLING[gpu]}, not the "
                          f"{gpu} (slower memory)", f"use --kernels roofline, or --gpu {MEASURED_SIBLING[gpu]}")
    try:
        return SYSTEMS[gpu]
    except KeyError:
        raise ConfigError("kernels", f"no AIConfigurator tables for GPU {gpu!r}",
                          f"use --kernels roofline, or a GPU with tables: {', '.join(sorted(SYSTEMS))}") from None


def _version_key(version: str) -> tuple:
    """Sort key for versions like 0.5.14, 1.3.0rc20, 2.27.3 (numeric parts numerically)."""
    return tuple(int(p) if p.isdigit() else p for p in re.findall(r"\d+|[a-z]+", version))


@dataclass(frozen=True)
class TableRef:
    """Where one table's rows come from: the version folders read (newest first) and the label."""

    system: str
    backend: str
    table: str
    paths: tuple[Path, ...]
    versions: tuple[str, ...]

    @property
    def version(self) -> str:
        """The primary version, with any donor in parentheses (``1.3.0rc23 (+1.3.0rc20)``)."""
        head, *rest = self.versions
        return head + (f" (+{', '.join(rest)})" if rest else "")


def find_table(system: str, backend: str, table: str, root: str | Path | None = None) -> TableRef | None:
    """The version folder(s) holding ``table`` for ``backend`` on ``system``; None where the subset has none."""
    family, stem = TABLES.get(table, ("comm", "nccl_perf"))
    base = data_root(root) / "systems" / "data" / system / family / backend
    if not base.is_dir():
        return None
    versions = sorted((d.name for d in base.iterdir() if (d / f"{stem}.parquet").is_file()), key=_version_key,
                      reverse=True)
    if not versions:
        return None
    head = versions[0]
    chosen = [head]
    reuse = base / head / "reuse.yaml"
    if reuse.is_file():  # a declared donor (AIC's cross-version reuse), read after the head's own rows
        text = reuse.read_text()
        for tbl, donor in re.findall(r"table:\s*(\S+)\s*\n\s*from_version:\s*(\S+)", text):
            if tbl == stem and donor in versions and donor not in chosen:
                chosen.append(donor)
    return TableRef(system, backend, table, tuple(base / v / f"{stem}.parquet" for v in chosen), tuple(chosen))


def system_file(system: str, root: str | Path | None = None) -> Path:
    """``systems/<system>.yaml``: the system's hardware file (it may be absent: a partial copy of the database)."""
    return data_root(root) / "systems" / f"{system}.yaml"


def system_spec(system: str, root: str | Path | None = None) -> dict[str, float]:
    """The few numbers of ``systems/<system>.yaml`` the model uses (read without a YAML library):
    ``mem_bw`` (B/s), ``mem_bw_empirical_scaling_factor``, ``mem_empirical_constant_latency`` (s)."""
    path = system_file(system, root)
    if not path.is_file():
        raise ConfigError("kernels", f"{path} is missing (the GPU's hardware constants the tables are priced with)",
                          "restore the database folder from ../shared/data/profiles/aiconfigurator")
    text = path.read_text()
    out: dict[str, float] = {}
    for key in ("mem_bw", "mem_bw_empirical_scaling_factor", "mem_empirical_constant_latency"):
        found = re.search(rf"^\s+{key}:\s*([0-9.eE+-]+)", text, re.MULTILINE)
        if found:
            out[key] = float(found.group(1))
    return out


@functools.lru_cache(maxsize=128)
def _column(path: Path, column: str) -> Any:
    """One column of one parquet file as a numpy array (None if the file lacks it), cached per
    process. ``ParquetFile.read`` decodes only that column; pyarrow's dataset layer (which a
    filtered ``read_table`` goes through) would import pandas, half a second of a run's start."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.ParquetFile(path).schema_arrow
    except (OSError, pa.ArrowException) as err:  # a truncated or foreign file (ArrowInvalid: no parquet magic)
        raise ConfigError("kernels", f"{path}: not a readable parquet table ({type(err).__name__})",
                          "restore the file from the shared data folder") from None
    if column not in names.names:
        if column == "latency":  # every table's measured column: without it the file prices nothing
            raise ConfigError("kernels", f"{path}: has no latency column", "restore the file from the shared data folder")
        return None
    field = names.field(column)
    if column == "latency" and not (pa.types.is_floating(field.type) or pa.types.is_integer(field.type)):
        raise ConfigError("kernels", f"{path}: its latency column holds {field.type}, not numbers",
                          "restore the file from the shared data folder")
    if pa.types.is_string(field.type) or pa.types.is_large_string(field.type):
        # Strings read as a dictionary: pyarrow's string -> numpy conversion would import pandas and
        # its dictionary encoding pyarrow.compute (most of a second of a run's start between them).
        data = pq.ParquetFile(path, read_dictionary=[column]).read(columns=[column]).column(0).combine_chunks()
        if data.null_count:
            return np.array(data.to_pylist(), dtype=object)
        return np.array(data.dictionary.to_pylist(), dtype=object)[data.indices.to_numpy()]
    values = pq.ParquetFile(path).read(columns=[column]).column(0).combine_chunks().to_numpy(zero_copy_only=False)
    if column == "latency":  # the measured column: positive finite milliseconds, or the file prices wrong
        bad = ~(np.isfinite(values) & (values > 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise ConfigError("kernels", f"{path}: row {i}'s latency is {values[i].item()!r}, not a positive finite "
                              "time", "restore the file from the shared data folder")
    return values


def _mask(path: Path, filters: tuple[tuple[str, str, Any], ...]) -> Any:
    """Rows of ``path`` passing every ``(column, "==", value)`` filter (a column the file lacks passes)."""
    import numpy as np

    mask = None
    for column, op, value in filters:
        if op != "==":
            raise ValueError(f"only '==' filters are supported, got {op!r}")
        values = _column(path, column)
        if values is None:
            continue
        hit = values == value
        mask = hit if mask is None else mask & hit
    if mask is None:
        latency = _column(path, "latency")
        mask = np.ones(len(latency), dtype=bool)
    return mask


def read_table(ref: TableRef, columns: tuple[str, ...], filters: tuple[tuple[str, str, Any], ...] = ()) -> dict[str, Any]:
    """Columns of ``ref``'s rows passing ``filters`` (``(column, "==", value)`` triples), as numpy
    arrays; a column a file lacks comes back as None. Rows of later (donor) versions are kept only
    where the head version has no row with the same key (every requested column but latency)."""
    import numpy as np

    parts = []
    for path in ref.paths:
        keep = _mask(path, filters)
        parts.append({c: (v[keep] if (v := _column(path, c)) is not None else None) for c in columns})
    out = parts[0]
    if len(parts) > 1:
        keys = [c for c in columns if c != "latency" and out[c] is not None]
        seen = set(zip(*(out[c].tolist() for c in keys), strict=True)) if keys else set()
        for part in parts[1:]:
            fresh = np.array([k not in seen for k in zip(*(part[c].tolist() for c in keys), strict=True)], dtype=bool)
            for c in columns:
                if out[c] is not None and part[c] is not None:
                    out[c] = np.concatenate([out[c], part[c][fresh]])
    first = next((v for v in out.values() if v is not None), None)
    out["_rows"] = np.int64(0 if first is None else len(first))
    return out


def choose_source(table: str, sources: Any) -> str | None:
    """The kernel implementation priced among rows whose ``kernel_source`` column is ``sources``:
    the one with the most rows (the one the collector swept over the whole grid; ties by name);
    for the custom all-reduce the CUDA-graph variant, which a serving step replays. None if empty."""
    import numpy as np

    if sources is None or len(sources) == 0:
        return None
    names, counts = np.unique(sources.astype(str), return_counts=True)
    if table == "custom_allreduce":
        graph = [n for n in names.tolist() if "graph" in n.lower()]
        if graph:
            return graph[0]
    return min(zip((-counts).tolist(), names.tolist(), strict=True))[1]  # most rows; ties by name


def pick_source(ref: TableRef, dtype: str, extra: tuple[tuple[str, str, Any], ...] = ()) -> str | None:
    """:func:`choose_source` among ``ref``'s rows of ``dtype`` (and ``extra`` filters)."""
    col = DTYPE_COLUMN[ref.table]
    data = read_table(ref, ("kernel_source", col), ((col, "==", dtype), *extra))
    return choose_source(ref.table, data["kernel_source"])


def read_source_rows(ref: TableRef, dtype: str, columns: tuple[str, ...],
                     extra: tuple[tuple[str, str, Any], ...] = (), source: str | None = None,
                     ) -> tuple[str | None, dict[str, Any]]:
    """One read: ``columns`` of the rows of ``dtype`` (and ``extra``) of ``source`` (None: the source
    :func:`choose_source` picks among them); (None, {}) where there are none."""
    col = DTYPE_COLUMN[ref.table]
    data = read_table(ref, ("kernel_source", *columns), ((col, "==", dtype), *extra))
    src = choose_source(ref.table, data["kernel_source"])
    if source is not None:
        names = data["kernel_source"]
        src = source if names is not None and (names.astype(str) == source).any() else None
    if src is None:
        return None, {}
    keep = data["kernel_source"] == src
    return src, {c: (data[c][keep] if data[c] is not None else None) for c in columns}


@dataclass(frozen=True)
class LaneDonor:
    """A lane of one backend's tables (``table`` rows of ``dtype``, or of kernel ``source``, on ``systems``;
    None: any) whose figures the kernel it names does not bear out, or that times another kernel than the
    engine runs, priced instead by ``donor``'s rows of the same system, or of its sibling in ``siblings``
    (``(system, donor's system)`` pairs: the same GPU die in another package), from its ``donor_source`` rows
    or the source :func:`choose_source` picks among them; a lane with ``siblings`` and no ``systems`` covers the
    systems it has a sibling for. ``fills_gaps``: also a shape the lane has no rows for; ``only_gaps``: only those
    (the lane's own rows of other shapes stay its own). ``where``: only the lane's rows with these column values (the
    condition of the engine's rule that selects the donor's kernel, e.g. ``(("moe_ep_size", 1),)``): the donor's rows
    of those values stand in for them, the lane's other rows stay its own; a caller pricing one split names it
    (``at``), and a split ``where`` excludes is the lane's own."""

    table: str
    backend: str
    donor: str
    why: str
    dtype: str | None = None
    source: str | None = None
    systems: frozenset[str] | None = None
    donor_source: str | None = None
    siblings: tuple[tuple[str, str], ...] = ()
    fills_gaps: bool = False
    only_gaps: bool = False
    where: tuple[tuple[str, Any], ...] = ()

    def covers(self, ref: TableRef, dtype: str, source: str | None, at: dict[str, Any] | None = None) -> bool:
        """Whether this lane prices ``ref``'s ``dtype`` rows whose chosen kernel is ``source`` (None: none), at the
        split ``at`` (column -> value; None or a column it does not name: any) where the lane has a ``where``."""
        if at and any(c in at and at[c] != v for c, v in self.where):
            return False
        if source is None:
            kernel = self.fills_gaps or self.only_gaps
        else:
            kernel = not self.only_gaps and (self.source is None or source == self.source)
        systems = self.systems if self.systems is not None or not self.siblings else dict(self.siblings)
        return (kernel and ref.table == self.table and ref.backend == self.backend
                and (self.dtype is None or dtype == self.dtype)
                and (systems is None or ref.system in systems))

    def donor_system(self, system: str) -> str:
        return dict(self.siblings).get(system, system)


# The same die in another package: (system, its sibling), for lanes one collector timed only on the sibling.
SAME_DIE: tuple[tuple[str, str], ...] = (("b200_sxm", "gb200"), ("b300_sxm", "gb300"))

# The lanes the cost model and the roofline's fit price from another collector's rows, each measured here
# beside the same format's kernel on the same GPU (ratios: medians over every shared shape at decode sizes,
# m or tokens <= 256, against the lane's own table's bf16 rows or another collector's rows of the same kernel).
# An FP8 kernel reads half a bf16 one's weight bytes; no kernel a serving engine ships runs it slower than bf16
# at decode sizes, let alone several times slower.
LANE_DONORS: tuple[LaneDonor, ...] = (
    LaneDonor("gemm", "vllm", "sglang", dtype="fp8_block", systems=frozenset({"h100_sxm", "h200_sxm", "gb200", "gb300"}),
              why="vLLM's block-FP8 GEMM lane of its 0.18/0.24 collectors runs at 6.9-7.6x its own bf16 GEMM on "
                  "H100/H200 and 46-50x on GB200/GB300, SGLang's block-FP8 (DeepGEMM) rows of the same GPUs at "
                  "0.9-2.2x theirs, and vLLM's 0.19 lane on B200/B300 at 2.1-2.2x"),
    LaneDonor("gemm", "vllm", "trtllm", dtype="fp8_block", systems=frozenset({"l40s", "rtx_pro_6000_server"}),
              why="vLLM's block-FP8 GEMM lane of its 0.24 collector runs at 18.5x (Triton, L40S) and 86x (CUTLASS, "
                  "RTX PRO 6000) its own bf16 GEMM, TensorRT-LLM's block-FP8 rows of the same GPUs at 0.8x and 1.3x "
                  "theirs (no SGLang block-FP8 rows there)"),
    LaneDonor("gemm", "trtllm", "vllm", dtype="fp8",
              systems=frozenset({"h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300"}),
              why="TensorRT-LLM's per-tensor FP8 GEMM lane (its collector times Linear.forward on bf16 activations, "
                  "the quantisation in the timed call) runs at a median 1.4-1.9x vLLM's and SGLang's FP8 rows of the "
                  "same GPU and shape at m <= 256 on Hopper and datacenter Blackwell (a ~14 us floor against 5-7 us), "
                  "where the three collectors' bf16 rows agree within 3%; its Llama-3.1-70B engine on B200 measures "
                  "0.70-0.93x vLLM's time a token at the same 29 points (median 0.88x)"),
    LaneDonor("gemm", "trtllm", "vllm", dtype="nvfp4", systems=frozenset({"b200_sxm", "b300_sxm", "gb200", "gb300"}),
              why="TensorRT-LLM's NVFP4 GEMM lane runs at a median 1.2-1.5x vLLM's NVFP4 rows (1.4-1.9x SGLang's) of "
                  "the same datacenter Blackwell GPU and shape at m <= 256, where the bf16 rows agree within 3%; its "
                  "Llama-3.1-70B engine on B200 measures 0.74-1.02x vLLM's time a token at the same 32 points "
                  "(median 0.93x)"),
    LaneDonor("moe", "vllm", "trtllm", dtype="fp8", systems=frozenset({"h100_sxm"}),
              why="vLLM's H100 FP8 MoE lane (FlashInfer's CUTLASS experts) runs at 2.2x its own bf16 MoE rows of the "
                  "same expert shapes, where every other backend's and GPU's FP8 MoE lane runs at 0.57-0.77x its "
                  "bf16 one, vLLM's own H200 lane (Triton) included, at 1.0x TensorRT-LLM's CUTLASS rows there"),
    # The engines' MoE runner on B200 and B300 is FlashInfer's TensorRT-LLM MoE (InferenceX's launch scripts:
    # SGLang's `--moe-runner-backend flashinfer_trtllm` for Qwen3.5 and DeepSeek-R1 in bf16, FP8 and FP4;
    # TensorRT-LLM's DeepSeek-R1 FP8 `moe_config: backend: TRTLLM`), which only the GB200/GB300 collectors
    # (SGLang 0.5.14) timed; those are the same dies (B200, B300), whose tables agree within 5% where both time
    # one kernel (TensorRT-LLM's CUTLASS and DeepGEMM MoE rows, SGLang's Triton rows).
    *(LaneDonor("moe", "sglang", "sglang", dtype=dt, donor_source="sglang_flashinfer_trtllm_moe", fills_gaps=True,
                siblings=SAME_DIE,
                why="SGLang's launch scripts there run --moe-runner-backend flashinfer_trtllm, which its B200 (0.5.9) "
                    "and B300 (0.5.10) collectors did not time (Triton for bf16 and block-FP8 experts, at a median "
                    "1.6-1.8x and 1.2-1.5x the FlashInfer rows at <= 256 tokens; CuteDSL for NVFP4, 1.2x); the "
                    "GB200/GB300 collectors timed it on the same die")
      for dt in ("bfloat16", "fp8_block", "nvfp4", "w4a16_mxfp4", "w4a8_mxfp4_mxfp8")),
    LaneDonor("moe", "trtllm", "sglang", dtype="fp8_block", source="deepgemm", donor_source="sglang_flashinfer_trtllm_moe",
              siblings=SAME_DIE,
              why="TensorRT-LLM's DeepSeek-R1 FP8 launch scripts there run moe_config backend TRTLLM (DeepGEMM only "
                  "at 1K/1K and 1K/8K from 256 users: --moe-kernel deepgemm), its TensorRT-LLM-generated block-FP8 MoE kernels, which its collector "
                  "did not time (DeepGEMM: a median 1.2x FlashInfer's TensorRT-LLM rows at <= 256 tokens, 0.8x "
                  "above); SGLang's GB200/GB300 collectors timed them through FlashInfer on the same die"),
    # vLLM serves gpt-oss's MXFP4 experts on datacenter Blackwell with FlashInfer's TensorRT-LLM MXFP4 kernels (its 0.24
    # collectors name them: GptOssMxfp4MoE at bf16 activations, Mxfp4MoE at MXFP8 ones), which its 0.19 B200 collector
    # did not time and no B300 collector timed at all; its 0.24 GB200/GB300 collectors timed the bf16 one at gpt-oss's
    # expert shapes (the MXFP8 one at other models' shapes only) on the same dies.
    LaneDonor("moe", "vllm", "vllm", dtype="w4a16_mxfp4", source="vllm_mxfp4_moe", fills_gaps=True, siblings=SAME_DIE,
              donor_source="vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
              why="vLLM's 0.19 B200 MXFP4 lane (vllm_mxfp4_moe) times gpt-oss's experts at a median 10.8x (at <= 256 "
                  "tokens, every split; gpt-oss-120b's at 16 tokens on one GPU 3.6x) the FlashInfer TensorRT-LLM MXFP4 "
                  "kernel that vLLM 0.24 runs for gpt-oss and times on GB200, the same die"),
    # vLLM's MoE oracle tries FlashInfer's TensorRT-LLM experts first, then its CUTLASS ones, then Triton, and takes the
    # first that supports the shape; its 0.24 GB200/GB300 collectors time what it took per shape, its 0.19 B200/B300
    # collectors Triton's for every shape (`vllm_fused_moe`). Per shape the sibling's 0.24 rows are used where they
    # exist (whichever kernel 0.24 took there), the lane's own Triton rows where not.
    *(LaneDonor("moe", "vllm", "vllm", dtype=dt, source="vllm_fused_moe", fills_gaps=True, siblings=SAME_DIE,
                why="vLLM's 0.19 B200/B300 collectors timed its Triton experts, which today's vLLM runs on datacenter "
                    "Blackwell only where FlashInfer's kernels do not take the shape: a median 1.4-1.5x the FlashInfer "
                    "TensorRT-LLM rows vLLM 0.24 timed on GB200/GB300, the same die, at <= 256 tokens and 1.8-2.1x "
                    "above 4K (those rows within 2% of SGLang's of that kernel there)")
      for dt in ("bfloat16", "fp8", "fp8_block")),
    LaneDonor("moe", "vllm", "sglang", dtype="w4a8_mxfp4_mxfp8", only_gaps=True, siblings=SAME_DIE,
              systems=frozenset({"b200_sxm", "b300_sxm", "gb200", "gb300"}), donor_source="sglang_flashinfer_trtllm_moe",
              why="no vLLM collector timed the MXFP4 x MXFP8 kernel that gpt-oss deployments there run "
                  "(VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: FlashInfer's TensorRT-LLM MoE) at its expert shapes; SGLang's "
                  "GB200/GB300 collectors timed that FlashInfer kernel on the same dies"),
    LaneDonor("moe", "vllm", "sglang", source="vllm_marlin_int4_moe", donor_source="sglang_marlin_moe",
              why="the same Marlin MoE kernel: this older vLLM lane (0.18/0.19 tables: H200, B200, B300) times it 2-3x "
                  "slower than SGLang's rows of the same GPU and expert shape (median 1.96-2.24x), while vLLM's newer "
                  "lane (0.24, H100) is within 5% of SGLang's"),
    # SGLang serves gpt-oss's MXFP4 experts with the OpenAI triton_kernels MoE (`--moe-runner-backend triton_kernel`)
    # wherever neither FlashInfer's MXFP4 kernels (SM100/SM120) nor AITER (ROCm) apply and ep_size is 1: its server
    # args' GPT-OSS rule (ServerArgs._handle_model_specific_adjustments, now arg_groups/model_overrides/gpt_oss.py's
    # _gpt_oss_overrides), which also refuses that backend at ep_size > 1. The kernel vLLM 0.24 runs for gpt-oss on
    # Hopper (OAITritonMxfp4ExpertsMonolithic) and timed on H100; SGLang's H100 collector timed its Triton fused MoE
    # instead. At ep_size > 1 SGLang runs that Triton MoE: those rows stay its own. (H200's SGLang 0.5.9 table has no
    # MXFP4 rows.)
    LaneDonor("moe", "sglang", "vllm", dtype="w4a16_mxfp4", source="sglang_fused_moe_triton",
              systems=frozenset({"h100_sxm"}), where=(("moe_ep_size", 1),),
              donor_source="vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
              why="SGLang's GPT-OSS rule runs the triton_kernels MXFP4 MoE on Hopper at ep_size 1, the kernel vLLM's "
                  "oaitritonmxfp4 rows time; SGLang's H100 MXFP4 lane (its Triton fused MoE) times gpt-oss's experts "
                  "at a median 2.9-3.1x those rows at moe_tp 1 and 1.9x over moe_tp 1-32 (<= 256 tokens, moe_ep 1), "
                  "2.6x TensorRT-LLM's"),
)


def kernel_sources(ref: TableRef, dtype: str, extra: tuple[tuple[str, str, Any], ...] = ()) -> list[str]:
    """The kernel sources ``ref``'s own rows of ``dtype`` (and ``extra``) time, sorted."""
    col = DTYPE_COLUMN[ref.table]
    names = read_table(ref, ("kernel_source",), ((col, "==", dtype), *extra))["kernel_source"]
    return [] if names is None else sorted(set(names.astype(str).tolist()))


def read_priced_rows(ref: TableRef, dtype: str, columns: tuple[str, ...], extra: tuple[tuple[str, str, Any], ...] = (),
                     root: str | Path | None = None, warm: str = "raise", at: dict[str, Any] | None = None,
                     source: str | None = None) -> tuple[str | None, dict[str, Any], TableRef, tuple[str, ...]]:
    """:func:`read_source_rows`, then, where :data:`LANE_DONORS` names the lane (a lane with no rows of these
    filters only where it ``fills_gaps``), the donor's rows of the same system or its sibling, dtype and filters;
    ``source``: the lane's own rows of that kernel, no donor's (a run that names the kernel its engine runs);
    rows timed warm in L2 (:func:`cold_cache`) raised to the lane's sustained bandwidth (``warm="raise"``, what a
    serving step pays), dropped (``"drop"``: not a serving measurement, for fits and held-out errors) or kept
    (``"keep"``). ``at``: the one split (column -> value) the caller prices, against a lane's ``where``; a lane
    with a ``where`` that ``at`` does not pin gives the donor's rows of it and the lane's own rows of the other
    values, under one label saying so. ``(source label, rows, the table read, one-line notes)``. A donor without
    such rows leaves the lane its own."""
    if warm not in ("raise", "drop", "keep"):
        raise ValueError(f"warm must be 'raise', 'drop' or 'keep', got {warm!r}")
    import numpy as np

    wanted = tuple(dict.fromkeys([*columns, *(STREAMED_KEYS.get(ref.table, ()) if warm != "keep" else ())]))
    src, d = read_source_rows(ref, dtype, wanted, extra, source)
    read, label, notes, own = ref, src, [], None
    lane = None if source is not None else next((x for x in LANE_DONORS if x.covers(ref, dtype, src, at)), None)
    other = find_table(lane.donor_system(ref.system), lane.donor, ref.table, root) if lane is not None else None
    if lane is not None and other is not None:
        col = DTYPE_COLUMN[ref.table]
        # a lane with a `where` the caller's split does not pin: the lane's own rows of the other values stay
        mixed = bool(lane.where) and not all(c in (at or {}) for c, _ in lane.where)
        wanted = tuple(dict.fromkeys([*wanted, *(c for c, _ in lane.where)])) if mixed else wanted
        if mixed and src is not None:
            src, d = read_source_rows(ref, dtype, wanted, extra)
        rows = read_table(other, ("kernel_source", *wanted), ((col, "==", dtype), *extra,
                                                              *((c, "==", v) for c, v in lane.where)))
        theirs = lane.donor_source or choose_source(other.table, rows["kernel_source"])
        if theirs is not None and rows["kernel_source"] is not None and (keep := rows["kernel_source"].astype(str) == theirs).any():
            where = "" if other.system == ref.system else f"{other.system} "
            cond = " and ".join(f"{c} {v}" for c, v in lane.where)
            notes.append(f"{ref.backend} tables of {ref.system}: {dtype} {ref.table} {f'at {cond} ' if cond else ''}"
                         f"priced by {where}{lane.donor} {other.version}'s {theirs} rows ({lane.why})")
            if mixed and src is not None:
                rest = ~np.logical_and.reduce([d[c] == v for c, v in lane.where])
                own = (src, {c: d[c][rest] for c in wanted})
            label = f"{theirs} ({where}{lane.donor} {other.version})"
            if own is not None:
                label = f"{theirs} ({where}{lane.donor} {other.version}) at {cond}, {src} elsewhere"
            read, src = other, theirs
            d = {c: rows[c][keep] for c in wanted}
    if src is None:
        return None, {}, ref, ()
    if warm != "keep":
        parts = [(read, src, d), *([(ref, *own)] if own is not None else [])]
        d = {}
        for table, source, part in parts:
            part, note = cold_cache(table, dtype, source, part, drop=warm == "drop")
            d = {c: _joined(d[c], part[c]) if c in d else part[c] for c in wanted}
            if note is not None:
                notes.append(f"{ref.backend} tables of {ref.system}: {note}")
    elif own is not None:
        d = {c: _joined(d[c], own[1][c]) for c in wanted}
    return label, {c: d[c] for c in columns}, read, tuple(notes)



def _joined(a: Any, b: Any) -> Any:
    """Two parts' values of one column, one after the other (None where either part lacks the column)."""
    import numpy as np

    return None if a is None or b is None else np.concatenate([a, b])

# -- rows timed warm in L2 ---------------------------------------------------------------------------------------
# A collector times one kernel call over and over on the same weights (GEMM) or the same KV cache (decode
# attention), so an operand that fits in the GPU's L2 cache is read from L2 after the first call. In a serving
# step each layer's weights and KV are read once a step, with every other layer's in between: from memory. Where
# the L2 is large next to the memory bandwidth (the L40S's 96 MiB of L2 over 864 GB/s of GDDR6, the RTX PRO 6000's
# 128 MiB over 1.8 TB/s of GDDR7) the tables time 2-9% of their bf16 GEMM rows and 7-21% of their decode rows faster
# than the GDDR peak can feed their weights or KV, up to 3.5x and 4.7x it, the decode rows among them with at most
# 96 MiB and 128 MiB of KV (the L40S's MLA decode rows too: 4%, at most 72 MiB of latent cache); on H100 to GB300
# no GEMM row and at most 0.1% of decode rows beat the peak.
# Each row is held to what the same kernel sustains from memory: the fastest bytes / latency among its own rows
# that move 512 MiB or more (4x the larger of those two L2s).
SUSTAINED_FROM_BYTES = 512 * 2**20
MIN_SUSTAINED_ROWS = 20
STREAMED_KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),  # m too: read_table keeps a reused version's row by every key read
    "generation_attention": ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
                             "kv_cache_dtype", "window_size"),
    "generation_mla": ("batch_size", "isl", "step", "num_heads", "kv_cache_dtype"),
}
# A token's MLA cache in the tables' one MLA shape, DeepSeek-V3's: its compressed KV (kv_lora_rank 512) and its
# rotary key (64), one per token and layer whatever the heads.
MLA_LATENT_WIDTH = 512 + 64
# Bytes a GEMM reads per weight element by its table's dtype (scales included). Only the weights count: a step's
# activations may well be in L2 (the previous kernel just wrote them), its weights are not. A dtype not named here is
# left as measured.
WEIGHT_BYTES: dict[str, float] = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 1 / 32,
                                  "int8_wo": 1.0, "int4_wo": 0.5 + 1 / 64, "nvfp4": 0.5 + 1 / 16,
                                  "w4a16_mxfp4": 0.5 + 1 / 32, "w4a8_mxfp4_mxfp8": 0.5 + 1 / 32}


def streamed_bytes(table: str, dtype: str, d: dict[str, Any]) -> Any:
    """Bytes each row must move from memory on a cold cache (numpy array), or None where this module does not
    model the table or dtype: a GEMM's weights; a decode's K and V reads (MLA: its latent cache)."""
    import numpy as np

    if table == "gemm" and dtype in WEIGHT_BYTES and d.get("n") is not None and d.get("k") is not None:
        return np.asarray(d["n"], dtype=np.float64) * np.asarray(d["k"], dtype=np.float64) * WEIGHT_BYTES[dtype]
    if table not in ("generation_attention", "generation_mla"):
        return None
    per_token = (("num_key_value_heads", "head_dim") if table == "generation_attention" else ())
    if any(d.get(c) is None for c in ("batch_size", "isl", "step", "kv_cache_dtype", *per_token)):
        return None
    length = np.asarray(d["isl"], dtype=np.float64) + np.asarray(d["step"], dtype=np.float64)
    if d.get("window_size") is not None:  # a sliding-window kernel reads the window's keys
        window = np.asarray(d["window_size"], dtype=np.float64)
        length = np.where(window > 0, np.minimum(length, window), length)
    kv_bytes = np.where(np.char.startswith(np.asarray(d["kv_cache_dtype"]).astype(str), "fp8"), 1.0, 2.0)
    # values a token caches per layer: K and V per KV head (GQA), or MLA's one latent vector
    width = (2.0 * np.asarray(d["num_key_value_heads"], dtype=np.float64) * np.asarray(d["head_dim"], dtype=np.float64)
             if per_token else MLA_LATENT_WIDTH)
    return np.asarray(d["batch_size"], dtype=np.float64) * length * width * kv_bytes


@functools.lru_cache(maxsize=256)
def sustained_bandwidth(ref: TableRef, dtype: str, source: str, kv_dtype: str = "") -> float | None:
    """Bytes/s the ``source`` kernel's ``dtype`` rows of ``ref`` (decode attention: of ``kv_dtype`` KV) sustain
    from memory: the most :func:`streamed_bytes` / latency of any row that moves at least
    :data:`SUSTAINED_FROM_BYTES`; None where fewer than :data:`MIN_SUSTAINED_ROWS` do."""
    import numpy as np

    keys = STREAMED_KEYS.get(ref.table)
    if keys is None:
        return None
    col = DTYPE_COLUMN[ref.table]
    flt = (((col, "==", dtype), ("kv_cache_dtype", "==", kv_dtype)) if kv_dtype else ((col, "==", dtype),))
    d = read_table(ref, ("kernel_source", *keys, "latency"), flt)
    if d["kernel_source"] is None or d["latency"] is None:
        return None
    keep = d["kernel_source"].astype(str) == source
    d = {c: (v[keep] if v is not None else None) for c, v in d.items() if c != "_rows"}
    moved = streamed_bytes(ref.table, dtype, d)
    if moved is None:
        return None
    big = (moved >= SUSTAINED_FROM_BYTES) & (d["latency"] > 0)
    if int(big.sum()) < MIN_SUSTAINED_ROWS:
        return None
    sustained = float(np.max(moved[big] / (d["latency"][big] * 1e-3)))
    # Never past the GPU's own memory bandwidth (its system file's mem_bw): a lane whose large rows beat it
    # (A100 TensorRT-LLM decode attention at 3.45 TB/s, 1.7x the A100's 2.039) is timed on something other
    # than the bytes it is keyed by, and a serving step cannot move them faster than the memory does.
    root = next((p.parent for p in ref.paths[0].parents if p.name == "systems"), None) if ref.paths else None
    spec = system_spec(ref.system, root).get("mem_bw") if root is not None else None
    return min(sustained, spec) if spec else sustained


def memory_floor_ms(ref: TableRef, dtype: str, source: str, d: dict[str, Any]) -> tuple[Any, list[float]] | None:
    """Per row of ``d`` (rows of ``ref``'s ``source`` kernel in ``dtype``, with :data:`STREAMED_KEYS`), the time
    (ms) its :func:`streamed_bytes` take at the bandwidth the kernel sustains from memory
    (:func:`sustained_bandwidth`; 0 where there is none), and the rates used; None where the table or dtype moves
    no modelled bytes."""
    import numpy as np

    moved = streamed_bytes(ref.table, dtype, d)
    if moved is None:
        return None
    kv = d.get("kv_cache_dtype")
    kvs = np.asarray(kv).astype(str) if kv is not None and ref.table != "gemm" else None
    floor_ms = np.zeros(len(moved))
    rates = []
    for value in (np.unique(kvs).tolist() if kvs is not None else [""]):
        bw = sustained_bandwidth(ref, dtype, source, value)
        if bw is None:
            continue
        rows = kvs == value if kvs is not None else np.ones(len(moved), dtype=bool)
        floor_ms[rows] = moved[rows] / bw * 1e3
        rates.append(bw)
    return floor_ms, rates


def warm_rows(latency_ms: Any, floor_ms: Any) -> Any:
    """Rows timed faster than their memory floor (:func:`memory_floor_ms`): warm in L2. The fastest large row
    itself sets the floor, so it is not warm, rounding aside."""
    import numpy as np

    return np.asarray(latency_ms, dtype=np.float64) < floor_ms * (1.0 - 1e-9)


def cold_cache(ref: TableRef, dtype: str, source: str, d: dict[str, Any], drop: bool = False,
               ) -> tuple[dict[str, Any], str | None]:
    """``d`` (rows of ``ref``'s ``source`` kernel in ``dtype``, with :data:`STREAMED_KEYS`) with every row timed
    warm in L2 (:func:`warm_rows`) raised to its memory floor, or dropped; and a note where at least 1% of the
    rows were."""
    import numpy as np

    found = memory_floor_ms(ref, dtype, source, d)
    if found is None or not len(found[0]):
        return d, None
    floor_ms, rates = found
    lat = np.asarray(d["latency"], dtype=np.float64)
    warm = warm_rows(lat, floor_ms)
    if not warm.any():
        return d, None
    if drop:
        out = {c: (v[~warm] if isinstance(v, np.ndarray) and v.shape == warm.shape else v) for c, v in d.items()}
    else:
        out = {**d, "latency": np.where(warm, floor_ms, lat)}
    share = float(warm.mean())
    if share < 0.01:
        return out, None
    what = "dropped" if drop else "priced at that bandwidth"
    return out, (f"{share:.0%} of the {dtype} {ref.table} rows move their operands faster than the kernel sustains "
                 f"from memory, or the GPU's memory allows ({min(rates) / 1e9:,.0f} GB/s: timed resident in L2, or on "
                 f"fewer bytes than their keys say, neither of which a serving step's weights and KV are); {what}")


def dtypes_of(ref: TableRef) -> list[str]:
    """The dtypes a table has rows for."""
    import numpy as np

    col = DTYPE_COLUMN[ref.table]
    values = read_table(ref, (col,))[col]
    return [] if values is None else sorted(np.unique(values.astype(str)).tolist())


def describe(gpu: str, backend: str, root: str | Path | None = None) -> str:
    """One line naming the tables that price a run: ``vllm 0.24.0 tables of h100_sxm (AIConfigurator)``;
    where families differ in version each is named."""
    system = system_for(gpu)
    versions: dict[str, list[str]] = {}
    for table in ("gemm", "generation_attention", "moe", "custom_allreduce"):
        ref = find_table(system, backend, table, root)
        if ref is not None:
            versions.setdefault(ref.version, []).append(TABLES[table][0])
    if not versions:
        return f"{backend}: no tables of {system}"
    if len(versions) == 1:
        return f"{backend} {next(iter(versions))} tables of {system} (AIConfigurator)"
    parts = ", ".join(f"{'/'.join(dict.fromkeys(fams))} {v}" for v, fams in versions.items())
    return f"{backend} tables of {system} (AIConfigurator): {parts}"


# -- the tidy form ------------------------------------------------------------------------------------------------
TIDY_KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "context_attention": ("batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim", "kv_cache_dtype",
                          "window_size"),
    "generation_attention": ("batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
                             "kv_cache_dtype", "window_size"),
    "context_mla": ("batch_size", "isl", "num_heads", "tp_size", "kv_cache_dtype"),
    "generation_mla": ("batch_size", "isl", "step", "num_heads", "tp_size", "kv_cache_dtype"),
    "mla_bmm": ("op_name", "num_tokens", "num_heads"),
    "moe": ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
            "distribution"),
    "custom_allreduce": ("num_gpus", "message_size"),
}


def _check_export(gpu_or_system: str, backends: tuple[str, ...] | list[str], root: str | Path | None) -> str:
    """The system folder ``gpu_or_system`` names, once it and every backend are known to the database."""
    system = SYSTEMS.get(gpu_or_system, gpu_or_system)
    if gpu_or_system not in SYSTEMS and Path(gpu_or_system).name == gpu_or_system \
            and not gpu_or_system.lower().endswith((".json", ".toml")):  # a catalog alias (h100), as a run takes it
        with contextlib.suppress(ConfigError):
            system = SYSTEMS.get(get_gpu(gpu_or_system).name, system)
    # (an empty or path-like name would be the systems folder itself, or one outside it)
    if system.strip() in ("", ".", "..") or Path(system).name != system or not (data_root(root) / "systems" / "data" / system).is_dir():
        raise ConfigError("--gpu", f"no AIConfigurator system {gpu_or_system!r}",
                          f"use a catalog GPU ({', '.join(sorted(SYSTEMS))}) or a system folder name")
    for backend in backends:
        if backend not in BACKENDS:
            raise ConfigError("--backend", f"unknown backend {backend!r}", f"use one of {', '.join(BACKENDS)}")
    if not system_file(system, root).is_file():  # the export reads its memory bandwidth (warm_in_l2): say so first
        raise ConfigError("--data", f"{system_file(system, root)} is missing beside systems/data/{system}",
                          "pass the whole database folder: systems/<gpu>.yaml beside systems/data")
    return system


def tidy_tables(gpu_or_system: str, backend: str, root: str | Path | None = None) -> Any:
    """Every kept table of one system and backend as one long pandas frame: ``system, backend,
    version, family, table, kernel_source, dtype, latency_s`` and the table's keys (NaN where a
    key belongs to another table), and ``warm_in_l2``: a GEMM or decode row timed faster than the
    kernel sustains from memory (:func:`cold_cache`; the model prices it at that bandwidth). Reads
    everything: for export, never for a run."""
    import pandas as pd

    system = _check_export(gpu_or_system, (backend,), root)
    frames = []
    for table, keys in TIDY_KEYS.items():
        ref = find_table(system, backend, table, root)
        if ref is None:
            continue
        dcol = DTYPE_COLUMN[table]
        data = read_table(ref, ("kernel_source", dcol, *keys, "latency"))
        rows = int(data.pop("_rows"))
        _check_tidy_keys(ref, keys, data)
        frame = pd.DataFrame({k: v for k, v in data.items() if v is not None})
        frame["warm_in_l2"] = _warm_in_l2(ref, dcol, data)
        frame = frame.rename(columns={dcol: "dtype"})
        frame["latency_s"] = frame.pop("latency") * 1e-3
        frame.insert(0, "table", table)
        frame.insert(0, "family", TABLES[table][0])
        frame.insert(0, "version", ref.version)
        frame.insert(0, "backend", backend)
        frame.insert(0, "system", system)
        assert len(frame) == rows
        frames.append(frame)
    if not frames:
        raise ConfigError("backend", f"{system} has no {backend} tables in this database")
    return pd.concat(frames, ignore_index=True, sort=False)


OPTIONAL_TIDY_KEYS = frozenset({"window_size"})  # (older collectors' attention tables lack it: no sliding window)


def _check_tidy_keys(ref: TableRef, keys: tuple[str, ...], data: dict[str, Any]) -> None:
    """Refuse a table whose key columns an export would drop or carry as nonsense: a key column missing (its
    rows' shapes lost, unsaid), or a number in one that is no size (negative, NaN, infinite)."""
    import numpy as np

    for key in keys:
        values = data.get(key)
        if values is None:
            if key in OPTIONAL_TIDY_KEYS:
                continue
            raise ConfigError("--data", f"{ref.paths[0]}: the {ref.table} table lacks its key column {key}",
                              "pass the database as AIConfigurator wrote it")
        if values.dtype.kind in "iuf" and len(values) and not (np.isfinite(values) & (values >= 0)).all():
            bad = values[~(np.isfinite(values) & (values >= 0))][0]
            raise ConfigError("--data", f"{ref.paths[0]}: the {ref.table} table has {key} = {bad} (no size)",
                              "pass the database as AIConfigurator wrote it")


def _warm_in_l2(ref: TableRef, dcol: str, data: dict[str, Any]) -> Any:
    """Per row: timed warm in L2 (:func:`warm_rows`, per kernel source and dtype); False where not modelled."""
    import numpy as np

    out = np.zeros(len(data["latency"]), dtype=bool)
    if ref.table not in STREAMED_KEYS or data["kernel_source"] is None or data[dcol] is None:
        return out
    sources, dtypes = data["kernel_source"].astype(str), data[dcol].astype(str)
    for src, dt in sorted(set(zip(sources.tolist(), dtypes.tolist(), strict=True))):
        rows = (sources == src) & (dtypes == dt)
        part = {c: (v[rows] if isinstance(v, np.ndarray) else v) for c, v in data.items()}
        found = memory_floor_ms(ref, dt, src, part)
        if found is not None:
            out[rows] = warm_rows(part["latency"], found[0])
    return out


def lacking_tables(frame: Any) -> list[str]:
    """The tables of :data:`TIDY_KEYS` a backend's tidy frame holds no row of (absent from the database, or empty):
    what an export says it lacks, where a run over it would find nothing to look up."""
    held = set(frame.loc[frame["latency_s"].notna(), "table"].astype(str)) if len(frame) else set()
    return [table for table in TIDY_KEYS if table not in held]


def write_tidy(gpu_or_system: str, backends: tuple[str, ...] | list[str], out: str | Path, fmt: str = "parquet",
               root: str | Path | None = None, on_lacking: Any = None) -> list[Path]:
    """``simulate import-aiconfigurator``: one tidy file per backend, all its versions in it
    (``<system>_<backend>_<versions>.<fmt>``, the versions joined by ``-``) under ``out``, from
    :func:`tidy_tables`; returns the paths written. ``on_lacking(system, backend, tables)`` hears the tables a
    backend holds no row of (:func:`lacking_tables`), where there are any."""
    if fmt not in ("parquet", "csv"):
        raise ConfigError("--format", f"unknown format {fmt!r}", "use parquet or csv")
    _check_export(gpu_or_system, backends, root)  # before the folder is made: a refusal leaves nothing behind
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for backend in backends:
        frame = tidy_tables(gpu_or_system, backend, root)
        system = str(frame["system"].iloc[0])
        if on_lacking is not None and (lacking := lacking_tables(frame)):
            on_lacking(system, backend, lacking)
        version = "-".join(sorted(set(frame["version"].astype(str)), key=_version_key)).replace(" ", "")
        path = out / f"{system}_{backend}_{re.sub(r'[^0-9A-Za-z.+_-]', '', version)}.{fmt}"
        if fmt == "csv":
            frame.to_csv(path, index=False)
        else:
            frame.to_parquet(path, index=False)
        written.append(path)
    return written
