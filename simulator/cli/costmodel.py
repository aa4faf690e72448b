"""Cost-model commands: ``simulate fit``, ``predict``, ``calibrate`` and ``fidelity``.

Each command parses options and calls a plain function (:func:`fit_command`,
:func:`predict`, ...) that tests call directly.
"""

# No ``from __future__ import annotations`` here: typer reads every command's annotations at each
# start; evaluated once at import they cost less than strings it evaluates again every time.

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from simulator.cli.app import app, fail, said_then_written
from simulator.cli.app import console as app_console
from simulator.cli.tables import print_table
from simulator.config.errors import ConfigError
from simulator.config.run_config import DEFAULT_ENGINE, KERNEL_TABLES, ReplicaConfig
from simulator.report.titles import FIDELITY_TITLE, PROFILE_FIDELITY_TITLE
from simulator.util.paths import (
    atomic_file,
    check_in_dir,
    check_out_file,
    check_profile_tables,
    check_report_dir,
)
from simulator.util.progress import StepProgress
from simulator.util.text import comma_list

TABLE_BACKENDS = tuple(k for k in KERNEL_TABLES if k != "roofline")  # --kernels' measured backends

if TYPE_CHECKING:  # numpy and the cost models load when a command runs, not for --help
    from simulator.costmodel import BatchShape, CostModel


# -- fit -----------------------------------------------------------------------------------------------------
# A fitted op whose held-out median error is above this is warned of (`simulate fit`).
POOR_FIT_APE = 0.25


def fit_command(profiles: list[Path], out: Path, model: str | None = None, gpu: str | None = None,
                tp: int | None = None, holdout: float = 0.2, seed: int = 0, quiet: bool = True,
                ops: list[str] | None = None, write: bool = True) -> dict[str, Any]:
    """Read ``profiles``, fit (``ops``: only those families or ops), write the artifact to ``out`` (``write`` False:
    left to :func:`write_fit`, after the command says the fit); return it."""
    check_out_file(out, "--out")  # every path before the fit (and before scikit-learn loads)
    profiles = check_profile_tables(profiles)
    from rich.console import Console

    from profiler.runner import resolve_ops
    from simulator.calibrate.fit import fit_tables
    from simulator.calibrate.fit_data import read_profiles

    wanted = resolve_ops(tuple(ops)) if ops else None
    console = Console(stderr=True, quiet=quiet)
    for path in profiles:  # a profile cut short (Ctrl-C, a crash) or with failed points is fitted as it stands, but said
        meta_path = path.parent / "metadata.json"  # (check_profile_tables gives each folder's table file)
        try:
            meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        except (OSError, ValueError):
            meta = {}  # (a folder's metadata is the profiler's: one it cannot read is not this check's)
        if isinstance(meta, dict) and meta.get("complete") is False:
            failed = meta.get("failed_points") or []
            console.print(f"note: {path} is an unfinished profile (metadata.json: complete false); " + (
                f"{len(failed)} point(s) failed there (out of memory, or a kernel the device cannot run), which a rerun "
                "tries again" if failed else "rerun its `simulate profile` command to finish it"))
    table = read_profiles(profiles, device=gpu, model=model)
    if wanted is not None:
        left = sorted(set(table["op"].dropna()) - set(wanted))
        table = table[table["op"].isin(wanted)]
        if table.empty:
            raise ConfigError("--ops", f"the profiles hold none of {', '.join(wanted)}",
                              "name ops or families the tables measured, or drop --ops")
        if left:
            console.print(f"left to the roofline by --ops: {', '.join(left)}")
    with console.status("fitting") as status:
        artifact = fit_tables(table, model=model, gpu=gpu, tp=tp, holdout=holdout, seed=seed,
                              sources=[str(p) for p in profiles], progress=lambda op: status.update(f"fitting {op}"))
    dropped = artifact["suspect_rows_dropped"]
    if dropped:  # not fitted, and said: the profiler's own verdict on those timings
        console.print(f"left out {sum(dropped.values())} row(s) the profiler marked suspect (faster than the device's "
                      f"peak, or not positive): {', '.join(f'{op} {n}' for op, n in dropped.items())}")
    if write:
        write_fit(artifact, out)
    return artifact


def write_fit(artifact: dict[str, Any], out: Path) -> None:
    """Write :func:`fit_command`'s artifact to ``out`` (whole, or ``out`` as it was)."""
    from simulator.calibrate.fit import save_artifact

    with atomic_file(out) as tmp:
        save_artifact(artifact, tmp)


@app.command()
def fit(
    profile: Annotated[list[Path], typer.Option("--profile", help="profile table (tidy, Vidur or LLMServingSim CSV) or a "
                                                                  "`simulate profile` folder; repeatable")],
    out: Annotated[Path, typer.Option(help="artifact path to write (JSON)")],
    model: Annotated[str | None, typer.Option(help="model, if the tables do not say")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU, if the tables do not say")] = None,
    tp: Annotated[int | None, typer.Option(help="TP degree to fit (tables may hold several)")] = None,
    holdout: Annotated[float, typer.Option(help="fraction of each op's rows held out to choose and score its model "
                                                "family (the report's error); the artifact is then refitted on all rows")] = 0.2,
    seed: Annotated[int, typer.Option(help="seed of the hold-out split and CV folds")] = 0,
    ops: Annotated[list[str] | None, typer.Option(
        help="learn only these op families (linear, attention, elementwise, comm) or ops, comma-separated or "
             "repeated; the rest are priced by the roofline (e.g. linear,attention: a torch profile's unfused "
             "element-wise ops left to the roofline's fused ones)")] = None,
) -> None:
    """Fit a learned cost model to profile tables (or `simulate profile` folders) and write a versioned artifact."""
    from rich.table import Table

    artifact = fit_command(profile, out, model, gpu, tp, holdout, seed, quiet=False, ops=ops, write=False)
    table = Table("op", "family", "train", "held out", "median APE", "P95 APE",
                  title=f"{artifact['model']} on {artifact['gpu']}, tp={artifact['tp']}", title_justify="left")
    for r in artifact["report"]:
        med, p95 = r["holdout_median_ape"], r["holdout_p95_ape"]
        table.add_row(r["op"], r["family"], str(r["num_train"]), str(r["num_holdout"]),
                      "-" if med is None else f"{100 * med:.1f}%", "-" if p95 is None else f"{100 * p95:.1f}%")
    console = app_console()
    print_table(console, table)
    console.print(f"roofline fallback for: {', '.join(artifact['roofline_ops']) or 'nothing'}")
    poor = {r["op"]: r["holdout_median_ape"] for r in artifact["report"]
            if r["holdout_median_ape"] is not None and r["holdout_median_ape"] > POOR_FIT_APE}
    if poor:  # a curve this far off its own held-out rows prices a run as badly: said, not left in a table cell
        why = " (a quick grid's few batch sizes cannot shape decode attention)" if "attn_decode" in poor else ""
        console.print(f"warning: held-out median error above {POOR_FIT_APE:.0%}: "
                      f"{', '.join(f'{op} {100 * e:.0f}%' for op, e in poor.items())}; profile more sizes of these "
                      f"ops{why}, or leave them to the roofline with --ops")
    # Written after it is said: a write that fails at the end (a full disk) does not take the fit with it
    with said_then_written(out, "fit"):
        write_fit(artifact, out)
    console.print(f"wrote {out} (pass it to --cost-model)")


# -- predict -------------------------------------------------------------------------------------------------
# The most requests one described batch may hold (tau's largest budget, simulator.planning.tau): one
# token each at least; a count past it would be expanded into a list of that length before any other check.
MAX_BATCH_REQUESTS = 1 << 20


def _expand(values: list[int], n: int, name: str) -> list[int]:
    if len(values) == n:
        return values
    if len(values) == 1:
        return values * n
    raise ConfigError(name, f"got {len(values)} values for {n} requests", "give one value or one per request")


def build_shape(prefill: list[int], prefill_context: list[int], decode: int, context: list[int]) -> "BatchShape":
    """A batch of prefill chunks (each over its cached context) and ``decode`` decodes.

    ``prefill_context`` gives each chunk's already-cached tokens (default 0); ``context``
    gives the decodes' KV lengths: one value for all, or one per decode.
    """
    from simulator.costmodel import BatchShape

    if any(p <= 0 for p in prefill):
        raise ConfigError("--prefill", "chunk sizes must be positive", "pass --prefill N with N > 0")
    if decode < 0:
        raise ConfigError("--decode", f"must be >= 0, got {decode}")
    if decode > MAX_BATCH_REQUESTS:
        raise ConfigError("--decode", f"{decode:,} decodes are more than one batch holds (at most "
                          f"{MAX_BATCH_REQUESTS:,}, a token each)", f"pass --decode {MAX_BATCH_REQUESTS:,} or fewer")
    if not prefill and decode == 0:
        raise ConfigError("batch", "the batch is empty", "pass --prefill N and/or --decode N")
    pctx = _expand(prefill_context or [0], len(prefill), "--prefill-context") if prefill else []
    if any(c < 0 for c in pctx):
        raise ConfigError("--prefill-context", "must be >= 0")
    if decode and not context:  # before _expand, whose "0 values for N requests" would not say what is missing
        raise ConfigError("--context", "decodes need their KV length", "pass --context N (one, or one per decode)")
    if context and not decode:
        raise ConfigError("--context", "gives the decodes' KV lengths, and the batch has no decodes, so it would do "
                          "nothing", "add --decode N, or give a chunk's cached tokens with --prefill-context")
    if prefill_context and not prefill:
        raise ConfigError("--prefill-context", "gives the prompt chunks' cached tokens, and the batch has no chunk, so it "
                          "would do nothing", "add --prefill N, or drop --prefill-context")
    dctx = _expand(context or [], decode, "--context") if decode else []
    if any(c <= 0 for c in dctx):
        raise ConfigError("--context", "KV lengths must be positive")
    return BatchShape.from_requests(list(zip(prefill, pctx, strict=True)), dctx)


def _check_batch_fits(replica: ReplicaConfig, shape: "BatchShape") -> None:
    """A batch the replica could run (:func:`~simulator.engine.kvcache.batch_fit_problem`), else a price
    for a batch no engine would run, and a slow one to make."""
    from simulator.engine.kvcache import batch_fit_problem

    problem = batch_fit_problem(replica, shape)
    if problem is not None:
        limit = replica.effective_max_model_len
        field, fix = {"prefill": ("--prefill", f"keep chunk + --prefill-context <= {limit}"),
                      "decode": ("--context", f"pass --context <= {limit}"),
                      "kv": ("batch", "shrink --prefill/--decode/--context, or raise --tp")}[problem[0]]
        raise ConfigError(field, problem[1], fix)


def predict(replica: ReplicaConfig, shape: "BatchShape", cost_model: str = "roofline",
            engine: str | None = None) -> dict[str, Any]:
    """Iteration time and per-op breakdown of one batch (``engine=None``: kernels and the
    kernel model's own CPU constant, as before engine models)."""
    from simulator.costmodel import load_cost_model

    cm: CostModel = load_cost_model(cost_model, replica, engine)
    mark = cm.extrapolation_mark()
    breakdown = cm.breakdown(shape)
    if mark is not None:  # the breakdown prices the lookups iteration_time counts: each is counted once
        cm.rollback_extrapolations(mark)
    total = cm.iteration_time(shape)
    kernels = getattr(cm, "kernels", cm)  # under an engine model, the kernel model it wraps
    tables = kernels.describe() if replica.kernels != "roofline" else None
    return {"model": replica.model, "gpu": replica.gpu, "tp": replica.tp, "pp": replica.pp,
            "attention_dp": replica.attention_dp, "ep": replica.ep, "dtype": replica.dtype,
            "kv_cache_dtype": replica.kv_cache_dtype, "cost_model": cm.name, "engine": getattr(getattr(cm, "engine", None), "name", None),
            "kernels": replica.kernels, "moe_kernel": replica.moe_kernel, "tables": tables,
            "table_notes": list(dict.fromkeys(getattr(kernels, "notes", []))) if tables else [],
            # families the tables lack rows for, priced by the roofline instead (empty without --kernels)
            "roofline_ops": list(dict.fromkeys([*getattr(kernels, "roofline_ops", []),
                                                *getattr(kernels, "ROOFLINE_ALWAYS", ())])) if tables else [],
            # the breakdown's ops those families price: "roofline", or "tables + roofline" for a share of the layers
            "roofline_priced": {op: by for op, by in kernels.roofline_breakdown_ops().items() if op in breakdown}
            if tables else {},
            "num_tokens": shape.num_tokens, "num_prefills": shape.num_prefills,
            "num_decodes": shape.num_decodes, "iteration_time_s": total, "breakdown_s": breakdown,
            "learned_ops": getattr(cm, "learned_ops", []),
            "num_extrapolations": getattr(cm, "num_extrapolations", 0)}


def _split_ints(values: list[str] | None, name: str) -> list[int]:
    out: list[int] = []
    for v in values or []:
        if "," in str(v) and not all(part.strip() for part in str(v).split(",")):  # ("8,": a slip, not one chunk)
            raise ConfigError(f"--{name}", f"{v!r} has an empty item", f"pass --{name} 512 or --{name} 512,1024")
        for part in comma_list(str(v)):
            try:
                out.append(int(part))
            except ValueError:
                raise ConfigError(f"--{name}", f"{part!r} is not an integer", f"pass --{name} 512 or --{name} 512,1024") from None
    return out


@app.command(name="predict")
def predict_cmd(
    model: Annotated[str, typer.Option(help="catalog model")] = "llama-2-7b",
    gpu: Annotated[str, typer.Option(help="catalog GPU")] = "a100-80gb",
    tp: Annotated[int, typer.Option(help="tensor-parallel degree")] = 1,
    pp: Annotated[int, typer.Option(help="pipeline-parallel degree: 1 only (one batch takes the same time at any; "
                                         "simulate run --pp N shows a pipeline)")] = 1,
    prefill: Annotated[list[str] | None, typer.Option(help="prefill chunk tokens; repeatable or comma list")] = None,
    prefill_context: Annotated[list[str] | None, typer.Option(help="tokens cached before each chunk")] = None,
    decode: Annotated[int, typer.Option(help="number of decodes")] = 0,
    context: Annotated[list[str] | None, typer.Option(help="decode KV length(s): one, or one per decode")] = None,
    cost_model: Annotated[str, typer.Option("--cost-model", help="'roofline' or an artifact path")] = "roofline",
    engine: Annotated[str, typer.Option(help="engine overheads: a preset or a calibrate-engine artifact")] = DEFAULT_ENGINE,
    as_json: Annotated[bool, typer.Option("--json", help="print a JSON object")] = False,
    ep: Annotated[int, typer.Option(help="expert-parallel degree (MoE models)")] = 1,
    dtype: Annotated[str, typer.Option(help="weight dtype: bf16, fp16, fp8, fp8-block, nvfp4, mxfp4 (-w4a16, -w4a8), int4 (as run's --dtype)")] = "bf16",
    kv_cache_dtype: Annotated[str, typer.Option(help="KV cache dtype: auto, bf16, fp16, fp8")] = "auto",
    kernels: Annotated[str | None, typer.Option(help="kernel prices: roofline, or the GPU's measured vllm, sglang or "
                                                     "trtllm kernel tables (as run's --kernels; default: the --engine "
                                                     "preset's where the GPU has them, else roofline)")] = None,
    moe_kernel: Annotated[str, typer.Option(help="the MoE kernel those tables price: auto (the engine's default), or "
                                                 "one of the tables' kernels, e.g. deepgemm (as run's)")] = "auto",
    attention_dp: Annotated[int, typer.Option(help="attention data-parallel ranks; the batch described is one rank's, "
                                                   "and every rank's tokens enter the MoE layers (as run's)")] = 1,
    moe_imbalance: Annotated[float, typer.Option(help="MoE load imbalance: busiest expert over the mean (>= 1)")] = 1.0,
    roofline_calibration: Annotated[str, typer.Option(help="roofline constants: today or 2023 (as run's)")] = "today",
) -> None:
    """Predict one iteration's time and per-op breakdown for a described batch."""
    if pp > 1:  # the cost model's breakdown and iteration time are the PP=1 view (CostModel.breakdown)
        raise ConfigError("--pp", "predict prices one batch through every layer back to back, the same time at any "
                          "pipeline degree (a pipeline gains by running other micro-batches in its other stages, "
                          "which one batch does not show), so --pp would do nothing but change the title",
                          "drop --pp: the stages add up to the --pp 1 time plus the hops between them; "
                          "simulate run --pp N shows a pipeline")
    if kernels is None:  # as run's --engine: the tables its preset was fitted over, where the GPU has them
        from simulator.costmodel.engine_model import implied_options

        kernels = implied_options({"engine": engine, "gpu": gpu, "cost_model": cost_model}).get("kernels", "roofline")
    replica = ReplicaConfig(model=model, gpu=gpu, tp=tp, pp=pp, ep=ep, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
                            kernels=kernels, moe_kernel=moe_kernel, attention_dp=attention_dp,
                            moe_imbalance=moe_imbalance, roofline_calibration=roofline_calibration)
    from simulator.config.options import engine_terms_unread
    from simulator.config.run_config import RunConfig

    # (a term predict's one aggregated, non-speculating PP-1 step never reads changed the label alone)
    for term, (why, _) in engine_terms_unread(RunConfig(replica=replica, engine=engine)).items():
        raise ConfigError("--engine", f"{term} {why.replace('the run', 'the batch predicted')}, so it would do "
                          "nothing", f"drop {term}")
    shape = build_shape(_split_ints(prefill, "prefill"), _split_ints(prefill_context, "prefill-context"), decode,
                        _split_ints(context, "context"))
    _check_batch_fits(replica, shape)
    result = predict(replica, shape, cost_model, engine)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    total = result["iteration_time_s"]
    layout = f"tp={tp} pp={pp}" + (f" attention_dp={attention_dp}" if attention_dp > 1 else "") + (
        f" ep={ep}" if ep > 1 else "") + f" · dtype {result['dtype']}, KV cache {result['kv_cache_dtype']}"
    table = Table("op", "ms", "share", "from",
                  title=f"{model} on {gpu} {layout} · {shape.num_prefills} prefill(s), "
                        f"{shape.num_decodes} decode(s), {shape.num_tokens} tokens · {result['cost_model']}",
                  title_justify="left")
    learned = set(result["learned_ops"])
    learned |= {"tp_all_reduce"} if "all_reduce" in learned else set()
    learned |= {"lm_head_sampling"} if "lm_head" in learned else set()
    by_roofline = result["roofline_priced"]  # ops, not roofline_ops' families (gemm prices qkv_proj, mlp_down, ...)
    for op, t in result["breakdown_s"].items():
        source = ("engine" if op.startswith("engine_") else "learned" if op in learned
                  else by_roofline.get(op, "tables") if result["tables"] else "roofline")
        table.add_row(op, f"{t * 1e3:.3f}", f"{100 * t / total:.1f}%" if total else "-", source)
    table.add_row("iteration", f"{total * 1e3:.3f}", "100%", "", style="bold")
    console = Console()
    print_table(console, table)
    if result["tables"]:  # which measured tables priced it, as run's header says (the notes print at load)
        console.print(f"kernels: {result['tables']}", highlight=False)
    if result["num_extrapolations"]:
        console.print(f"[yellow]warning: {result['num_extrapolations']} lookup(s) outside the profiled range "
                      "were extrapolated[/yellow]")


# -- calibrate and fidelity -------------------------------------------------------------------------------------
def _check_profiles(data: Path) -> None:
    """A profiles folder that exists and holds some table (a fit to none would be the defaults)."""
    check_in_dir(data, "--data", "pass the profiles folder (../shared/data/profiles)")
    if not any(data.rglob("*.csv")):
        raise ConfigError("--data", f"no profile tables (CSV) under {data}", "pass the profiles folder (../shared/data/profiles)")


@app.command()
def calibrate(
    data: Annotated[Path | None, typer.Option(help="profiles folder (default ../shared/data/profiles)")] = None,
    write: Annotated[bool, typer.Option(help="rewrite the calibrated block of simulator/costmodel/calibration.py")] = False,
) -> None:
    """Fit the roofline's efficiency constants to the public measured profiles."""
    if data is not None:  # paths first: a wrong one answers before the heavy imports
        _check_profiles(data)
    from rich.console import Console

    from simulator.calibrate.fit_calibration import calibrate_all, render, write_calibration
    from simulator.costmodel import calibration as calibration_module

    console = Console(stderr=True)
    with StepProgress("calibrate") as steps:
        cals = calibrate_all(data, progress=lambda gpu, done, total: steps.update(f"fitting {gpu}", done, total))
    block = render(cals)
    if write:
        write_calibration(cals, calibration_module.__file__)
        console.print(f"wrote {len(cals)} GPUs to {calibration_module.__file__}")
    else:
        typer.echo(block)


# (the report's files are written once every point is scored: a stop before then leaves the folder as it was)
_FIDELITY_INTERRUPTED = ("interrupted: {out}'s fidelity.csv, figures and README.md are rewritten in that order once "
                         "every point is scored: a stop before then leaves them as they were, one after it some new and "
                         "some old; run it again")


def _say_written(out: Path, num_rows: int, notes: list[str]) -> None:
    """The report written, and a note for figures matplotlib could not draw (left out of it)."""
    from rich.console import Console

    console = Console(stderr=True)
    for note in notes:
        console.print(f"note: {note}", highlight=False)
    console.print(f"wrote {out}/fidelity.csv ({num_rows} rows), {'' if notes else 'plots and '}README.md")


@app.command()
def fidelity(
    out: Annotated[Path | None, typer.Option(
        help="report folder (default results/fidelity; with --profile, ./fidelity_profile)")] = None,
    data: Annotated[Path | None, typer.Option(help="profiles folder (default ../shared/data/profiles)")] = None,
    profile: Annotated[list[Path] | None, typer.Option(
        help="a `simulate profile` folder or table to score every cost model against instead (repeatable)")] = None,
    kernels: Annotated[str, typer.Option(
        help="with --profile: the backends whose kernel tables are scored (comma-separated; the first also picks "
             "the roofline's today constants)")] = ",".join(TABLE_BACKENDS),
) -> None:
    """Held-out error of the learned model and the calibrated roofline vs measured profiles.

    With --profile: what every cost model (learned, roofline today and 2023, the kernel tables) charges
    for the shapes your own `simulate profile` run measured, against what the kernels took.
    """
    # Paths first (a wrong one answers before the heavy imports); a report folder is regenerated in place.
    if profile:
        if data is not None:
            raise ConfigError("--data", "names the public profiles, which --profile replaces, so it would do nothing",
                              "drop --data or --profile")
        backends = comma_list(kernels)
        if len(set(backends)) < len(backends):  # (its columns would be scored twice)
            raise ConfigError("--kernels", f"names a backend twice ({kernels!r})", "name each once")
        bad = [b for b in backends if b not in TABLE_BACKENDS]
        if bad or not backends:
            raise ConfigError("--kernels", f"unknown backend(s) {', '.join(bad)}" if bad else "no backend given",
                              f"pass some of {','.join(TABLE_BACKENDS)}, comma-separated")
        out = out or Path("fidelity_profile")
        check_report_dir(out, PROFILE_FIDELITY_TITLE)
        check_profile_tables(profile)
        from rich.console import Console

        from simulator.calibrate import profile_fidelity as pf

        tables = pf.tables_available()
        if not tables:
            Console(stderr=True).print("note: AIConfigurator's kernel tables are not under ../shared/data/profiles/aiconfigurator: "
                            "the tables columns are left out")
        command = "simulate fidelity " + " ".join(f"--profile {p}" for p in profile) + f" --out {out}"
        notes: list[str] = []
        remarks: list[str] = []
        try:
            with StepProgress("fidelity") as steps:
                summary = pf.write_report(list(profile), out, backends, tables, command, progress=steps.update,
                                          notes=notes, remarks=remarks)
        except KeyboardInterrupt:
            fail(_FIDELITY_INTERRUPTED.format(out=out), code=130)
        for remark in remarks:
            Console(stderr=True).print(f"note: {remark}", highlight=False)
        _say_written(out, len(summary), notes)
        return
    if kernels != ",".join(TABLE_BACKENDS):
        raise ConfigError("--kernels", "picks the tables scored against a --profile, so without one it would do "
                          "nothing", "add --profile, or drop --kernels")
    out = out or Path("results/fidelity")
    check_report_dir(out, FIDELITY_TITLE)
    if data is not None:
        _check_profiles(data)
    from simulator.calibrate.fit_fidelity import write_report

    notes: list[str] = []
    try:
        with StepProgress("fidelity") as steps:
            summary = write_report(out, data, progress=steps.update, notes=notes)
    except KeyboardInterrupt:
        fail(_FIDELITY_INTERRUPTED.format(out=out), code=130)
    _say_written(out, len(summary), notes)
