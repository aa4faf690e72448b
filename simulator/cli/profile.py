"""``simulate profile`` and ``simulate import-vidur``: measure kernels, or bring measurements.

Thin wrappers: :func:`profiler.runner.run_profile` and
:func:`profiler.vidur_import.import_to_folder` do the work. torch is needed only by
``profile`` and is checked before anything else, with a one-line hint to install it.
"""

# No ``from __future__ import annotations`` here: typer reads every command's annotations at each
# start; evaluated once at import they cost less than strings it evaluates again every time.

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.app import app, console, fail
from simulator.config.errors import ConfigError
from simulator.util.paths import check_out_dir

# What a profile folder holds (profiler.runner's TABLE_FILE and METADATA_FILE, and the temporaries of their atomic
# writes, .profile.csv.tmp-<pid>): a new folder may hold only these; one holding its metadata.json is a profile's,
# which a rerun resumes whatever else it holds (a fidelity report inside it, as the README writes one).
PROFILE_FILES = ("profile.csv", "metadata.json", ".*.tmp-*")


def check_profile_dir(out: Path) -> None:
    """Refuse an output folder that is neither new, empty, a profile's, nor holding only a profile's files."""
    ours = (out / "metadata.json").is_file()
    check_out_dir(out, "--out", replaceable=PROFILE_FILES, existing_ok=ours)

# The plain pin resolves to the CPU build where no CUDA wheel applies, e.g. in the README's CI line;
# on a Linux machine with a GPU driver the default index serves the CUDA build instead.
TORCH_HINT = ("install the profile extra: pip install 'servesim[profile]' (CPU-only machine: "
              "pip install -e '.[profile]' torch==2.13.0, the CPU build the README and CI use)")


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@app.command()
def profile(
    model: Annotated[str, typer.Option(help="Catalog model (e.g. tiny-llama-1b, llama-3-8b) or a config.json path.")],
    tp: Annotated[list[int] | None, typer.Option(help="TP degree(s) to shard shapes for; repeat for several.")] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    ops: Annotated[list[str] | None, typer.Option(
        help="Op families (linear, attention, elementwise, comm) or op names; repeat or comma-separate.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Largest token count (default 16384 on CUDA, 2048 on CPU).")]
    = None,
    quick: Annotated[bool, typer.Option(help="Tiny grid and few repeats: a smoke test.")] = False,
    out: Annotated[Path | None, typer.Option(help="Output folder (default ./profile_<model>_<device>).")] = None,
    dtype: Annotated[str | None, typer.Option(
        help="bfloat16, float16, float32 (default: bfloat16 on CUDA, float32 on CPU, where bf16 is emulated) or "
             "fp8 (FP8 e4m3 linear layers with per-tensor scales, every other op bf16).")]
    = None,
    world_size: Annotated[list[int] | None, typer.Option(
        help="Process-group sizes for comm ops (default 2 on CPU; 2/4/8 up to the GPU count on CUDA).")] = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all this process may use).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the mixed decode-batch lengths.")] = 0,
    cuda_graphs: Annotated[bool, typer.Option(help="Replay ops as CUDA graphs; report launch overhead apart.")]
    = False,
    l2_flush: Annotated[str | None, typer.Option(
        help="CUDA: how L2 is emptied before each repetition: read (default; leaves clean lines, as a forward "
             "pass does) or write (zeroes a buffer, as Triton's do_bench; the op pays for the write-back).")]
    = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Time real linear, attention, elementwise and communication kernels into a tidy table.

    Writes <out>/profile.csv (one measurement per row, seconds) and <out>/metadata.json.
    Rerunning the same command resumes: points already in the table are skipped.
    """
    folder = out or Path(f"profile_{Path(model).stem if model.endswith('.json') else model.replace('/', '_')}_{device}")
    check_profile_dir(folder)  # rerunning resumes into the same folder
    if not torch_available():
        fail(TORCH_HINT)
    from profiler.runner import ProfileConfig, run_profile

    cfg = ProfileConfig(model=model, out=folder, tp=tuple(tp or (1,)), device=device, ops=tuple(ops or ()),
                        max_tokens=max_tokens, quick=quick, dtype=dtype,
                        world_sizes=tuple(world_size) if world_size else None, num_threads=threads, seed=seed,
                        cuda_graphs=cuda_graphs, l2_flush=l2_flush)
    try:
        summary = run_profile(cfg, progress=progress)
    except KeyboardInterrupt:
        fail(f"interrupted; measured points are saved in {folder}; rerun the same command to resume", code=130)
    table = summary.table
    suspect = int(table["suspect"].fillna(False).sum())
    flush = f", L2 flush: {cfg.effective_l2_flush}" if cfg.device == "cuda" else ""
    console().print(f"{len(table)} rows in {folder / 'profile.csv'} ({summary.measured} measured, {summary.skipped} "
                    f"already there) in {summary.elapsed_s:.1f}s; {suspect} suspect; dtype {cfg.dtype}{flush}; ops: "
                    f"{', '.join(sorted(set(table['op'].dropna())))}")
    if summary.failed:
        fail(f"{len(summary.failed)} point(s) failed (see failed_points in {folder / 'metadata.json'}); "
             "the table is marked incomplete", code=1)


@app.command("import-vidur")
def import_vidur(
    paths: Annotated[list[Path], typer.Argument(help="Vidur mlp.csv / attention.csv / all_reduce.csv / send_recv.csv "
                                                     "files, or folders searched for them.")],
    out: Annotated[Path, typer.Option(help="Output folder for profile.csv and metadata.json.")],
    model: Annotated[str | None, typer.Option(help="Model the files profile (default: from Vidur's folder layout).")]
    = None,
    gpu: Annotated[str | None, typer.Option(help="Catalog GPU (default: from Vidur's folder layout).")] = None,
    all_topologies: Annotated[bool, typer.Option(help="Keep cross-node collective rows too.")] = False,
) -> None:
    """Convert Vidur-format profiling CSVs (milliseconds) into the tidy profile table (seconds)."""
    for path in paths:  # every path before anything is read (or imported)
        if not path.exists():
            raise ConfigError("import-vidur", f"{path} does not exist", "pass Vidur CSV files or folders holding them")
    check_profile_dir(out)  # rows are merged into a profile.csv already there
    from profiler.vidur_import import import_to_folder

    skipped: list[tuple[Path, int]] = []
    imported: list = []
    table = import_to_folder(paths, out, model=model, gpu=gpu, all_topologies=all_topologies, skipped=skipped,
                             imported=imported)
    counts = table["op"].value_counts().sort_index()
    console().print(f"{len(table)} rows in {out / 'profile.csv'}: "
                    + ", ".join(f"{op} {n}" for op, n in counts.items()), markup=False)
    for path, n in skipped:  # said, not dropped silently
        console().print(f"left out {n} row{'s' if n != 1 else ''} of {path}, or a kernel of {'them' if n != 1 else 'it'}, "
                        "without a median time (a kernel Vidur did not time)", markup=False)
    new = imported[0]  # (this import's rows: a profile.csv it merged into holds others)
    suspect = int(new["suspect"].fillna(False).astype(bool).sum())
    if suspect:  # (simulate fit leaves them out; nearly all of them: times written in seconds, not Vidur's ms)
        most = 2 * suspect > len(new)
        console().print(f"{'warning: ' if most else ''}{suspect:,} of the {len(new):,} rows imported are faster than "
                        "the GPU's "
                        "peaks (marked suspect; simulate fit leaves them out)"
                        + ("; so many look like times in seconds, where Vidur writes milliseconds" if most else ""),
                        markup=False)
