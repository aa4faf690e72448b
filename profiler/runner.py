"""A profile run: validate, sweep the grid, write a resumable tidy table.

:class:`ProfileConfig` describes a run (model, TP degrees, device, op families, grid
size, dtype, output folder) and is validated on construction, without torch.
:func:`run_profile` executes it:

1. refuse a CUDA run without CUDA, and an output folder holding another model's (or
   another device's) table;
2. build the grid (:mod:`profiler.grid`), drop the points already in
   ``<out>/profile.csv`` (resume), time the rest: compute ops in this process,
   communication ops in spawned process groups, one group per world size;
3. write the table atomically (temporary file, then rename) every :data:`FLUSH_EVERY_S`
   seconds (longer where one write takes over a tenth of that) and when the run ends or is interrupted, so a killed
   run loses at most the last few points. ``metadata.json`` says ``"complete": false``
   until every point of the grid is in the table; it describes this run (``config``), and a resumed table's
   earlier runs under other settings (another ``--dtype``, ``--tp`` or ``--ops``) in ``earlier_configs``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.grid import Point, build_points
from profiler.ops import op_dtype
from profiler.schema import (
    ALL_OPS,
    ATTN_DECODE,
    COMM_OPS,
    FAMILY_OF_OP,
    METADATA_FILE,
    OP_FAMILIES,
    SCHEMA,
    TABLE_FILE,
    conform,
    empty_table,
    key_of,
    read_table,
    with_achieved,
)
from profiler.shapes import ShardedShapes
from profiler.timing import L2_FLUSH_MODES
from profiler.work import comm_work
from simulator.config.catalog import ModelSpec, get_model
from simulator.config.errors import ConfigError
from simulator.config.hf_config import is_path_like

FLUSH_EVERY_S = 2.0
# Piped or redirected (no terminal for the live bar), progress is a plain line this often (RunProgress).
PLAIN_PROGRESS_EVERY_S = 15.0
DEVICES = ("cpu", "cuda")
DTYPES = ("bfloat16", "float16", "float32", "fp8")  # fp8: FP8 linear layers, everything else bf16
DEFAULT_MAX_TOKENS = {"cuda": 16384, "cpu": 2048}
QUICK_MAX_TOKENS = 64
# Without --dtype: bf16 on CUDA; fp32 on CPU, where most cores emulate bf16 matmuls (4-5x slower
# than fp32 on the project's CI machine: lm_head of tiny-llama-1b at 256 tokens, 2.3 s vs 0.46 s).
DEFAULT_DTYPE = {"cuda": "bfloat16", "cpu": "float32"}
MAX_CPU_WORLD_SIZE = 8
# CPU threads a profile may ask torch for: far past any machine's cores (each thread takes memory of its own).
MAX_THREADS = 1024
# The largest --max-tokens: tau's largest budget (simulator.planning.tau); past it the grid's tensors are
# more than any GPU holds, and a typo of 1e20 spent minutes before failing.
MAX_PROFILE_TOKENS = 1 << 20


def resolve_ops(ops: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """Expand family names (linear, attention, elementwise, comm) and op names, in schema order."""
    if not ops:
        return ALL_OPS
    wanted: set[str] = set()
    for item in ops:
        for name in (x.strip().lower() for x in item.split(",")):
            if not name:
                continue
            if name in OP_FAMILIES:
                wanted.update(OP_FAMILIES[name])
            elif name in FAMILY_OF_OP:
                wanted.add(name)
            else:
                raise ConfigError("ops", f"unknown op or op family {name!r}",
                                  f"families: {', '.join(OP_FAMILIES)}; ops: {', '.join(ALL_OPS)}")
    if not wanted:  # --ops "" or ",": not every op, which is what leaving --ops out asks for
        raise ConfigError("--ops", f"names no op ({', '.join(map(repr, ops))})",
                          f"pass families ({', '.join(OP_FAMILIES)}) or op names, or drop --ops for every op")
    return tuple(op for op in ALL_OPS if op in wanted)


@dataclass(frozen=True)
class ProfileConfig:
    """One profiling run. Validated on construction (torch is not needed for that)."""

    model: str
    out: Path
    tp: tuple[int, ...] = (1,)
    device: str = "cpu"
    ops: tuple[str, ...] = field(default=ALL_OPS)
    max_tokens: int | None = None  # default: DEFAULT_MAX_TOKENS[device], QUICK_MAX_TOKENS with quick
    quick: bool = False
    dtype: str | None = None  # default: DEFAULT_DTYPE[device]
    world_sizes: tuple[int, ...] | None = None  # comm; default: 2 on CPU, 2/4/8 GPUs that exist on CUDA
    num_threads: int | None = None  # CPU threads; default: the CPUs this process may use
    seed: int = 0
    cuda_graphs: bool = False
    l2_flush: str | None = None  # CUDA: read (default) or write; see profiler.timing

    def __post_init__(self) -> None:
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "ops", resolve_ops(self.ops))
        object.__setattr__(self, "tp", tuple(int(t) for t in self.tp))
        if self.device not in DEVICES:
            raise ConfigError("device", f"unknown device {self.device!r}", "use --device cpu or --device cuda")
        if self.dtype is None:
            object.__setattr__(self, "dtype", DEFAULT_DTYPE[self.device])
        if self.dtype not in DTYPES:
            raise ConfigError("dtype", f"unknown dtype {self.dtype!r}", f"use one of {', '.join(DTYPES)}")
        if not self.tp:
            raise ConfigError("tp", "no TP degree given", "pass --tp 1 (repeat --tp for several)")
        if is_path_like(self.model) and Path(self.model).exists():
            # (the table names its model: a relative config.json was read from elsewhere as no file; an audit)
            object.__setattr__(self, "model", str(Path(self.model).resolve()))
        spec = self.model_spec  # raises for an unknown model
        if spec.is_hybrid:
            raise ConfigError("model", f"{spec.name} is a hybrid: {spec.num_linear_layers} of its {spec.num_layers} "
                              "layers are Gated DeltaNet, which the profiler has no kernels for",
                              "price it with --cost-model roofline or --kernels vllm|sglang|trtllm")
        if spec.is_sparse_attention:
            raise ConfigError("model", f"{spec.name} attends sparsely (DeepSeek Sparse Attention: an indexer picks "
                              f"{spec.index_topk} keys a query), which the profiler has no kernels for",
                              "price it with --cost-model roofline or --kernels vllm|sglang|trtllm")
        for tp in self.tp:
            ShardedShapes(spec, tp)  # raises when tp does not divide the heads
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ConfigError("max_tokens", f"must be positive, got {self.max_tokens}", "pass --max-tokens > 0")
        if self.max_tokens is not None and self.max_tokens > MAX_PROFILE_TOKENS:
            raise ConfigError("--max-tokens", f"must be at most {MAX_PROFILE_TOKENS:,}, got {self.max_tokens:,}",
                              f"pass --max-tokens {MAX_PROFILE_TOKENS:,} or fewer (the default is 16,384 on CUDA)")
        if self.world_sizes is not None:
            bad = [w for w in self.world_sizes if w < 2]
            if bad:
                raise ConfigError("world_sizes", f"world sizes must be >= 2, got {bad}")
            if self.device == "cpu" and max(self.world_sizes, default=0) > MAX_CPU_WORLD_SIZE:
                raise ConfigError("--world-size", f"at most {MAX_CPU_WORLD_SIZE} CPU processes, got "
                                  f"{max(self.world_sizes)}", f"pass --world-size {MAX_CPU_WORLD_SIZE} or fewer")
        if self.num_threads is not None and self.num_threads <= 0:
            raise ConfigError("--threads", f"must be positive, got {self.num_threads}", "e.g. --threads 1")
        if (self.tp != (1,) and set(self.ops) <= set(COMM_OPS)
                and (self.device == "cpu" or self.world_sizes is not None)):
            # (the groups are --world-size's, or on CPU two processes: --tp adds a group size only on CUDA without it)
            raise ConfigError("--tp", "the communication ops are timed over --world-size process groups, not per TP "
                              "shard, so --tp would do nothing", "drop --tp, or add compute ops to --ops")
        if self.num_threads is not None and self.num_threads > MAX_THREADS:  # torch allocates per thread: 1e5 ran out
            raise ConfigError("--threads", f"must be at most {MAX_THREADS:,}, got {self.num_threads:,}",
                              f"pass --threads {os.cpu_count() or 1} (this machine's CPUs) or fewer")
        # Options the run would not read: the CPU timer has no graphs, and only comm ops form process groups.
        if self.cuda_graphs and self.device != "cuda":
            raise ConfigError("--cuda-graphs", f"CUDA graphs replay on a GPU, so --cuda-graphs would do nothing on "
                              f"--device {self.device}", "use --device cuda, or drop --cuda-graphs")
        if self.l2_flush is not None and self.device != "cuda":
            raise ConfigError("--l2-flush", f"only the CUDA timer flushes L2, so --l2-flush would do nothing on "
                              f"--device {self.device}", "use --device cuda, or drop --l2-flush")
        if self.l2_flush is not None and self.l2_flush not in L2_FLUSH_MODES:
            raise ConfigError("--l2-flush", f"unknown mode {self.l2_flush!r}", f"use one of {', '.join(L2_FLUSH_MODES)}")
        if self.seed < 0:  # (numpy's generators take none below 0)
            raise ConfigError("--seed", f"must be >= 0, got {self.seed}", "pass --seed 0 or more")
        if self.seed != 0 and ATTN_DECODE not in self.ops:  # (the seed draws decode batches' mixed lengths only)
            raise ConfigError("--seed", f"draws the mixed lengths of the decode-attention batches, and --ops has no "
                              f"{ATTN_DECODE}, so --seed would do nothing", f"add {ATTN_DECODE} to --ops, or drop --seed")
        if self.world_sizes is not None and not set(self.ops) & set(COMM_OPS):
            raise ConfigError("--world-size", "only the comm ops run in process groups, and --ops has none, so "
                              "--world-size would do nothing", "add comm to --ops, or drop --world-size")

    @property
    def model_spec(self) -> ModelSpec:
        return get_model(self.model)  # catalog entry or config.json, by the simulator's one reader

    @property
    def effective_max_tokens(self) -> int:
        if self.max_tokens is not None:
            return self.max_tokens
        return QUICK_MAX_TOKENS if self.quick else DEFAULT_MAX_TOKENS[self.device]

    @property
    def effective_l2_flush(self) -> str:
        return self.l2_flush or "read"

    @property
    def effective_num_threads(self) -> int:
        if self.num_threads is not None:
            return self.num_threads
        try:
            return len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - non-Linux
            return os.cpu_count() or 1

    def to_dict(self) -> dict:
        return {"model": self.model_spec.name, "model_arg": self.model, "out": str(self.out), "tp": list(self.tp),
                "device": self.device, "ops": list(self.ops), "max_tokens": self.effective_max_tokens,
                "quick": self.quick, "dtype": self.dtype,
                "world_sizes": list(self.world_sizes) if self.world_sizes is not None else None,
                "num_threads": self.effective_num_threads, "seed": self.seed, "cuda_graphs": self.cuda_graphs,
                "l2_flush": self.effective_l2_flush if self.device == "cuda" else None}


# -- storage --------------------------------------------------------------------------------
def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Write via a temporary sibling and rename, so readers never see a torn file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_table(df: pd.DataFrame, path: Path) -> None:
    write_atomic(path, lambda tmp: conform(df).to_csv(tmp, index=False))


def write_metadata(meta: dict, path: Path) -> None:
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n"))


def device_label(info) -> str:  # noqa: ANN001 - DeviceInfo, imported lazily
    """The ``device`` column: the catalog GPU where known (what cost models key on)."""
    if info.device == "cpu":
        return "cpu"
    return info.catalog_gpu or info.name.lower()


def _check_out_folder(out: Path, model_name: str | None, device: str | None) -> tuple[pd.DataFrame, dict]:
    """Existing rows and metadata of ``out``; refuse a folder holding another model or device.

    ``None`` skips a check (model-independent rows, e.g. imported collectives).
    """
    if out.exists() and not out.is_dir():
        raise ConfigError("out", f"{out} is a file, not a folder", "pass a folder for --out")
    table_path, meta_path = out / TABLE_FILE, out / METADATA_FILE
    meta: dict = {}
    if meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, json.JSONDecodeError):
            raise ConfigError("out", f"{meta_path} is not valid JSON", "remove it or choose another --out") from None
    table = read_table(table_path) if table_path.exists() else empty_table()
    models = set(table["model"].dropna().unique())
    if meta.get("model"):
        models.add(meta["model"])
    def same_file(recorded: str) -> bool:  # (earlier versions recorded a relative config.json as typed)
        return (model_name is not None and is_path_like(recorded) and Path(recorded).exists()
                and Path(recorded).resolve() == Path(model_name).resolve())

    others = sorted(m for m in models if m != model_name and not same_file(str(m)))
    if model_name is not None and others:
        raise ConfigError("out", f"{out} holds a profile of {', '.join(others)}, not {model_name}",
                          "choose another --out folder (one model per folder)")
    devices = set(table["device"].dropna().unique())
    if meta.get("device"):
        devices.add(meta["device"])
    if device is not None and devices - {device}:
        raise ConfigError("out", f"{out} holds a {', '.join(sorted(devices))} profile, not {device}",
                          "choose another --out folder (one device per folder)")
    return table, meta


def check_resume_settings(cfg: ProfileConfig, old_cfg: dict) -> None:
    """Refuse to resume a table measured under other timing settings: --quick (no warm-up, at most 10 repeats)
    or --cuda-graphs (replayed graphs, without most launch overhead) time the same kernels differently, and the
    resumed table, its metadata rewritten with the new settings, would mix the two unsaid. ``old_cfg``: the
    folder's ``metadata.json`` config; a setting it lacks is not checked."""
    for key, now, flag in (("quick", cfg.quick, "--quick"), ("cuda_graphs", cfg.cuda_graphs, "--cuda-graphs")):
        if key in old_cfg and bool(old_cfg[key]) != now:
            then = flag if old_cfg[key] else f"no {flag}"
            raise ConfigError(flag, f"{cfg.out} was measured with {then}, this run has {flag if now else f'no {flag}'}: "
                              "one table would mix two timing settings",
                              f"{'pass' if old_cfg[key] else 'drop'} {flag} to resume it, or choose another --out")


# -- the run --------------------------------------------------------------------------------
@dataclass
class RunSummary:
    table: pd.DataFrame
    measured: int
    skipped: int
    failed: list[str]
    elapsed_s: float
    out: Path


def _skeleton(point: Point, cfg: ProfileConfig, model_name: str, device: str, topology: str | None) -> dict:
    row: dict = {name: None for name in SCHEMA}
    row.update(point.shape_columns())
    row.update(model=model_name, op=point.op, dtype=op_dtype(point.op, cfg.dtype), device=device, backend=point.backend,
               topology=topology if point.op in COMM_OPS else None, source="servesim")
    return row


def run_profile(cfg: ProfileConfig, *, progress: bool = True,
                on_point: Callable[[int, dict], None] | None = None) -> RunSummary:
    """Run ``cfg``; see the module docstring. ``on_point(i, row)`` is called after each point."""
    try:
        import torch
    except ImportError:
        raise ConfigError("profile", "torch is not installed",
                          "install the profile extra: pip install 'servesim[profile]'") from None
    from profiler import comm
    from profiler import device as devmod
    from profiler.ops import DTYPE_BYTES, available_attention_backends, make_case
    from profiler.timing import BenchSettings, bench

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", "CUDA requested but torch finds no CUDA device",
                          "use --device cpu, or install a CUDA build of torch on a GPU machine")
    spec = cfg.model_spec
    started = time.perf_counter()
    cfg.out.mkdir(parents=True, exist_ok=True)
    threads = cfg.effective_num_threads
    torch.set_num_threads(threads)
    info = devmod.detect(cfg.device, threads)
    label = device_label(info)
    existing, old_meta = _check_out_folder(cfg.out, spec.name, label)
    old_cfg = old_meta.get("config") or {}
    if len(existing) and isinstance(old_cfg, dict):
        check_resume_settings(cfg, old_cfg)
    if len(existing) and cfg.device == "cpu" and isinstance(old_cfg, dict):  # a resumed CPU table: its threads
        # time its kernels (other threads reused the old timings as if new; a dtype keys its own rows)
        for key, now, flag in (("num_threads", cfg.effective_num_threads, "--threads"),):
            if key in old_cfg and old_cfg[key] != now:
                raise ConfigError(flag, f"{cfg.out} was measured with {flag} {old_cfg[key]}, not {now}: one table "
                                  "would mix two settings", f"pass {flag} {old_cfg[key]} to resume it, or choose "
                                  "another --out")
    if cfg.device == "cuda" and len(existing) and old_meta.get("bench"):
        # Tables measured before the flush modes existed zeroed the buffer: "write".
        old_flush = old_meta["bench"].get("l2_flush", "write")
        if old_flush != cfg.effective_l2_flush:
            raise ConfigError("--l2-flush", f"{cfg.out} was measured with --l2-flush {old_flush}, not "
                              f"{cfg.effective_l2_flush}: one table would mix two cache states",
                              f"pass --l2-flush {old_flush} to resume it, or choose another --out")
    world_sizes = cfg.world_sizes
    notes: list[str] = []
    if world_sizes is None:
        if cfg.device == "cpu":
            world_sizes = (2,)
        else:
            world_sizes = tuple(sorted({w for w in (2, 4, 8, *cfg.tp) if 2 <= w <= info.count}))
    if cfg.device == "cuda":
        too_big = [w for w in world_sizes if w > info.count]
        if too_big:
            raise ConfigError("world_sizes", f"{too_big} exceed the {info.count} visible GPUs",
                              "pass --world-size no larger than the GPU count")
    if not world_sizes and any(op in COMM_OPS for op in cfg.ops):
        notes.append(f"communication skipped: {info.count} GPU(s) visible, a group needs 2")

    shapes_by_tp = {tp: ShardedShapes(spec, tp) for tp in cfg.tp}
    attention_backends = available_attention_backends(cfg.device)
    points = build_points(cfg.ops, shapes_by_tp, world_sizes, cfg.effective_max_tokens, DTYPE_BYTES[cfg.dtype],
                          np.random.default_rng(cfg.seed), cfg.quick, tuple(attention_backends),
                          comm.comm_backend(cfg.device))
    topology = "localhost" if cfg.device == "cpu" else f"single-node:{info.count}x{info.name}"
    done = {key_of(r) for r in existing.to_dict("records")}
    todo = [(p, _skeleton(p, cfg, spec.name, label, topology)) for p in points]
    todo = [(p, row) for p, row in todo if key_of(row) not in done]
    skipped = len(points) - len(todo)

    settings = BenchSettings.quick() if cfg.quick else BenchSettings()
    settings = BenchSettings(**{**settings.__dict__, "cuda_graphs": cfg.cuda_graphs,
                                "l2_flush": cfg.effective_l2_flush})
    # A resumed table keeps the rows of the runs before this one (another --dtype, --tp or --ops keys rows of its
    # own): their configs stay on record beside this run's, which "config" describes.
    config = cfg.to_dict()

    def same(a: dict, b: dict) -> bool:  # (the folder spelled another way, relative or absolute, is no other run)
        return {k: v for k, v in a.items() if k != "out"} == {k: v for k, v in b.items() if k != "out"}

    earlier = [c for c in (old_meta.get("earlier_configs") or []) if isinstance(c, dict)] if len(existing) else []
    if len(existing) and isinstance(old_cfg, dict) and old_cfg and not any(same(old_cfg, c) for c in [config, *earlier]):
        earlier.append(old_cfg)
    meta = {
        "model": spec.name,
        "device": label,
        "config": config,
        "earlier_configs": [c for c in earlier if not same(c, config)],
        "world_sizes": list(world_sizes),
        # (only the CUDA timer flushes L2: a CPU table's settings say none, as its config does)
        "bench": {**settings.__dict__, "l2_flush": settings.l2_flush if cfg.device == "cuda" else None},
        "environment": devmod.environment(info, threads, attention_backends),
        "num_points": len(points),
        "complete": False,
        "notes": notes,
        "failed_points": [],
        "schema_columns": list(SCHEMA),
    }
    table_path, meta_path = cfg.out / TABLE_FILE, cfg.out / METADATA_FILE
    write_metadata(meta, meta_path)

    new_rows: list[dict] = []
    failed: list[str] = []
    last_flush = time.perf_counter()
    flush_cost_s = 0.0  # how long the last flush took: flushing stays under ~10% of the run

    def flush() -> None:
        nonlocal last_flush, flush_cost_s
        began = time.perf_counter()
        table = existing if not new_rows else pd.concat([existing, _finish(new_rows, info)], ignore_index=True)
        write_table(table, table_path)
        meta["failed_points"] = failed
        meta["elapsed_s"] = round(time.perf_counter() - started, 3)
        write_metadata(meta, meta_path)
        last_flush = time.perf_counter()
        flush_cost_s = last_flush - began

    def record(row: dict) -> None:
        new_rows.append(row)
        if on_point is not None:
            on_point(len(new_rows), row)
        if time.perf_counter() - last_flush > max(FLUSH_EVERY_S, 10 * flush_cost_s):
            flush()

    from simulator.util.progress import RunProgress

    # A live bar with an ETA on a terminal; piped or redirected, a plain line every PLAIN_PROGRESS_EVERY_S.
    reporter = RunProgress(every_s=PLAIN_PROGRESS_EVERY_S) if progress else None
    num_done = 0

    def advance(n: int = 1) -> None:
        nonlocal num_done
        num_done += n
        if reporter is not None:
            reporter.update(num_done)

    completed = False
    try:
        if reporter is not None:
            reporter.start("profiling", len(todo))
        compute = [(p, r) for p, r in todo if p.op not in COMM_OPS]
        weights: dict = {}  # the last linear weight, reused by the next point of the same shape
        for point, row in compute:
            case = None
            try:
                case = make_case(point, shapes_by_tp[point.tp], cfg.dtype, cfg.device, point.backend, weights)
                timing = bench(case.fn, device=cfg.device, settings=settings)
            except torch.OutOfMemoryError:
                failed.append(f"{point.op} {point.shape_columns()}: out of memory")
                del case
                weights.clear()
                if cfg.device == "cuda":
                    torch.cuda.empty_cache()
                advance()
                continue
            except RuntimeError as exc:  # a kernel this device or build cannot run (FP8 before Ada, say)
                failed.append(f"{point.op} {point.shape_columns()}: {(str(exc).splitlines() or [''])[0][:200]}")
                del case
                advance()
                continue
            row = {**row, "median_s": timing.median_s, "p20_s": timing.p20_s, "p80_s": timing.p80_s,
                   "repeats": timing.repeats, "launch_overhead_s": timing.launch_overhead_s,
                   "flops": case.flops, "bytes": case.bytes, "num_calls": case.num_calls}
            del case
            record(row)
            advance()
        for ws in world_sizes:
            group = [(p, r) for p, r in todo if p.op in COMM_OPS and p.world_size == ws]
            if not group:
                continue
            results = comm.measure_comm([p for p, _ in group], ws, cfg.device, cfg.dtype, settings)
            for res in results:
                point, row = group[res["index"]]
                w = comm_work(point.op, point.message_bytes, ws)
                record({**row, "median_s": res["median_s"], "p20_s": res["p20_s"], "p80_s": res["p80_s"],
                        "repeats": res["repeats"], "flops": w.flops, "bytes": w.bytes, "num_calls": 1})
            advance(len(group))
        completed = True
    finally:
        if reporter is not None:
            reporter.close()
        meta["complete"] = completed and not failed
        flush()
    table = read_table(table_path)
    return RunSummary(table, len(new_rows), skipped, failed, time.perf_counter() - started, cfg.out)


def _finish(rows: list[dict], info) -> pd.DataFrame:  # noqa: ANN001 - DeviceInfo, imported lazily
    df = pd.DataFrame(rows)
    df["device_name"] = info.name
    df = with_achieved(df)
    t = df["median_s"].astype("float64")
    # Comm rows are held to the link's ceiling (where known), compute rows to HBM/compute.
    is_comm = df["op"].isin(COMM_OPS)
    # FP8 tensor cores run at twice the bf16 rate on every GPU that has them
    peak_flops = np.where(df["dtype"] == "fp8", 2.0, 1.0) * info.peak_flops_per_s
    over = ~is_comm & ((df["achieved_flops_per_s"] > peak_flops)
                       | (df["achieved_bytes_per_s"] > info.peak_bytes_per_s))
    if info.peak_link_bytes_per_s:
        over |= is_comm & (df["achieved_bytes_per_s"] > info.peak_link_bytes_per_s)
    df["suspect"] = (over | ~(t > 0)).astype(bool)
    return conform(df)
