"""Engine-model commands: ``simulate engines``, ``calibrate-engine`` and ``validate``.

Each command parses options and calls a plain function in
:mod:`simulator.calibrate.engine_fit` or :mod:`simulator.calibrate.validation`.
"""

# No ``from __future__ import annotations`` here: typer reads every command's annotations at each
# start; evaluated once at import they cost less than strings it evaluates again every time.

import json
from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.app import app, fail, said_then_written
from simulator.cli.options import escape_markup, given_run_flags, run_options
from simulator.cli.tables import print_table
from simulator.config.errors import ConfigError
from simulator.config.run_config import DEFAULT_ENGINE, RunConfig
from simulator.report.titles import VALIDATION_TITLE
from simulator.util.jsonio import jsonable
from simulator.util.paths import (
    atomic_file,
    atomic_update,
    check_in_dir,
    check_in_file,
    check_out_file,
    check_report_dir,
)


@app.command()
def engines() -> None:
    """The engine presets: their terms, where they were measured and how they were fitted."""
    from rich.console import Console
    from rich.table import Table

    from simulator.costmodel.engine_model import ENGINES, tp_lookup

    table = Table("engine", "async", "CUDA graphs", "CPU/step ms", "CPU/req us", "CPU/prompt token us", "CPU/prompt chunk/layer us",
                  "collective +us (tp 2/4/8)", "prefill floor ms/layer", "P/D handoff ms", "fitted with",
                  title=f"engine presets (default: {DEFAULT_ENGINE})", title_justify="left")
    for name, e in ENGINES.items():
        coll = "/".join(f"{tp_lookup(e.collective_extra_s, t) * 1e6:.0f}" for t in (2, 4, 8))
        floor = (f"{e.prefill_floor_per_layer_s * 1e3:.2f}"
                 + (f" (> {e.prefill_floor_above_tokens} tok)" if e.prefill_floor_above_tokens else "")
                 if e.prefill_floor_per_layer_s else "-")
        fitted_with = " ".join(f"--{flag} {v}" for flag, v in (("scheduler", e.scheduler), ("kernels", e.kernels)) if v)
        table.add_row(name, "yes" if e.overlap_cpu else "no", "yes" if e.cuda_graphs else "no",
                      f"{e.cpu_iteration_s * 1e3:.2f}", f"{e.cpu_per_seq_s * 1e6:.0f}",
                      f"{e.cpu_per_prefill_token_s * 1e6:.1f}",
                      (f"{e.cpu_per_prefill_seq_layer_s * 1e6:.1f}" + (f" (<= {e.prefill_seq_layer_max_chunks} chunks)"
                                                                           if e.prefill_seq_layer_max_chunks else "")
                       if e.cpu_per_prefill_seq_layer_s else "-"), coll, floor,
                      f"{e.handoff_s * 1e3:.0f}" if e.handoff_s else "-", fitted_with or "-")
    console = Console()
    print_table(console, table)
    for name, e in ENGINES.items():
        console.print(f"[bold]{name}[/bold]: {e.source}. Fitted: {e.fitted}.")


# Run options a --rows fit does not read: it replays each row as a closed loop of its own on one aggregated
# replica (simulator.calibrate.silicon_fit.user_row_config): option -> the rows' column that sets it instead
# (None: nothing does; a row is one aggregated replica at a concurrency, with no rate, trace or pools).
ROWS_SET: dict[str, str | None] = {
    "model": "model", "gpu": "gpu", "tp": "tp", "pp": "pp", "ep": "ep", "enable_expert_parallel": "ep",
    "attention_dp": "attention_dp", "kernels": "kernels", "scheduler": "backend", "max_num_seqs": "concurrency",
    "workload": "isl and osl", "trace": "isl and osl", "prompt_tokens": "isl", "prompt_tokens_max": "isl",
    "output_tokens": "osl", "output_tokens_max": "osl", "concurrency": "concurrency", "num_requests": "num_prompts",
    "num_warmup": "concurrency", "warmup_mode": "client", "arrival": "concurrency", "qps": "concurrency",
    "cv": "concurrency", "burstiness": "concurrency", "normalize_arrivals": None, "time_scale": None,
    "replicas": None, "router": None, "prefill_pool": None, "decode_pool": None, "mixed_pool": None, "kv_link": None, "kv_link_scope": None, "first_token_at": None}

# Of those, the ones the rows' benchmark client sets (--client and the client columns): how it drew the lengths,
# how many requests it sent and how it warmed up.
CLIENT_SET = frozenset({"workload", "prompt_tokens", "output_tokens", "num_requests", "num_warmup", "warmup_mode"})


def _rows_label(values: Any) -> str:
    """An artifact's model or GPU label for a --rows fit: the rows' own (each distinct one, in order)."""
    return ", ".join(dict.fromkeys(str(v) for v in values))


def _same_file(a: Path, b: Path) -> bool:
    """Whether paths ``a`` and ``b`` name one file (a link, a relative path or another spelling of it)."""
    try:
        return Path(a).samefile(b)
    except OSError:  # one of them does not exist (yet): compare where they point
        return Path(a).resolve() == Path(b).resolve()


def _fmt(report: dict[str, Any]) -> str:
    return ", ".join(f"{k} {100 * v:.1f}%" if isinstance(v, float) else f"{k} {v}" for k, v in report.items())


# The held-out errors a fit's report gives that say how it does on a typical row or request: an iteration table's
# median, benchmark rows' TTFT and TPOT medians, a bench file's median TTFT and ITL.
HELD_OUT_MEDIANS = ("median_ape", "ttft_median", "tpot_median", "ttft_p50", "itl_p50")


def calibrate_engine_command(config: RunConfig, out: Path, table: Path | None = None, bench: Path | None = None,
                             holdout: float = 0.25, seed: int = 0, name: str | None = None,
                             max_evals: int = 40, quiet: bool = True, rows: Path | None = None,
                             given: Collection[str] = (), client: str | None = None,
                             write: bool = True) -> dict[str, Any]:
    """Fit engine terms to an iteration table, a vLLM bench result or aggregate benchmark rows
    (a CSV: backend, model, gpu, isl, osl, concurrency, ttft_ms, tpot_ms [, tp, pp, attention_dp,
    ep, dtype, client columns]) and write the artifact. ``given``: the run options given as flags (beyond
    those ``config`` holds other than the defaults), refused where the fit does not read them.
    ``client``: the benchmark client that measured the rows (``NAME[,key=value,...]``), default vllm-bench.
    ``write`` False: the artifact is left to :func:`write_engine_result` (the command says the fit first, so a
    write that fails at the end does not take it along)."""
    if sum(x is not None for x in (table, bench, rows)) != 1:
        raise ConfigError("calibrate-engine", "give exactly one of --table, --bench and --rows")
    if seed < 0:  # (numpy's generators take none below 0)
        raise ConfigError("--fit-seed", f"must be >= 0, got {seed}", "pass --fit-seed 0 or more")
    if client is not None and rows is None:  # a table's steps and a bench file's requests are the client's own
        raise ConfigError("--client", "names the client that measured --rows; a --table or --bench fit reads its "
                          "own requests", "drop --client")
    if not 0 < holdout < 1:
        raise ConfigError("--holdout", f"must be in (0, 1), got {holdout}", "e.g. --holdout 0.2")
    if bench is not None and max_evals < 1:
        raise ConfigError("--max-evals", f"must be >= 1, got {max_evals}", "e.g. --max-evals 40")
    if bench is None and max_evals != 40:  # only the bench fit simulates; the others are least squares
        raise ConfigError("--max-evals", "bounds the simulations of a --bench fit, which this is not", "drop --max-evals")
    if bench is not None:  # the result names its requests, arrivals and client cap; the run's flags the engine
        from simulator.config.options import is_workload_option

        # (and --seed where nothing draws: a replay of recorded requests draws no lengths or arrivals, so only a
        # speculating run's acceptances and a random router read it; two seeds wrote the same artifact)
        seeded = config.speculative is not None or (config.num_replicas > 1 and config.router == "random")
        unread = [name for name in sorted(given)
                  if (is_workload_option(name) and name != "concurrency") or (name == "seed" and not seeded)]
        if unread:
            flag = "--" + unread[0].replace("_", "-")
            raise ConfigError(flag, "a --bench fit replays the benchmark's own requests (their lengths, its rate, "
                              f"burstiness and submit times), so {flag} would do nothing", f"drop {flag}")
    if table is not None or rows is not None:
        from simulator.config.options import config_overrides

        # The flags given first, so the error names one typed (--burstiness, not the --arrival it set).
        options = [*sorted(given), *sorted(set(config_overrides(config)) - set(given))]
    if table is not None:  # a table fit reads the model, GPU, cost model and starting engine; the table the rest
        unread = [name for name in options if name not in ("model", "gpu", "cost_model", "engine")]
        if unread:
            flag = "--" + unread[0].replace("_", "-")
            raise ConfigError(flag, f"a --table fit prices the table's own steps (its tp, batches and contexts) with "
                              f"--model, --gpu, --cost-model and --engine only, so {flag} would do nothing",
                              f"drop {flag}")
    if rows is not None:  # the rows name their own model, GPU, layout, backend, lengths and concurrency
        # (the first row's model and GPU are the options' defaults here, cli.options.rows_base: no flag gave them)
        unread = [name for name in options if name in ROWS_SET and (name in given or name not in ("model", "gpu"))]
        if unread:
            flag, column = "--" + unread[0].replace("_", "-"), ROWS_SET[unread[0]]
            raise ConfigError(flag, "a --rows fit replays each row as a closed loop of its own model, GPU, layout, "
                              f"backend, lengths and concurrency on one aggregated replica, so {flag} would do nothing",
                              f"drop {flag}" + (f"; the rows' {column} column sets it per row" if column else "")
                              + ("; --client says how the benchmark drew lengths and sent requests"
                                 if unread[0] in CLIENT_SET else ""))
    # Every path is checked before the fit (a bench fit runs dozens of simulations).
    check_out_file(out, "--out")
    if table is not None:
        check_in_file(table, "--table", "pass the iteration table CSV")
    if bench is not None:
        check_in_file(bench, "--bench", "pass the JSON `vllm bench serve --save-result --save-detailed` wrote")
    if rows is not None:
        check_in_file(rows, "--rows", "pass a CSV of benchmark rows (backend, model, gpu, isl, osl, concurrency, "
                      "ttft_ms, tpot_ms)")
    for flag, given_path in (("--table", table), ("--bench", bench), ("--rows", rows)):
        # The artifact is written over --out: where that is the measurement itself, it was lost in silence.
        if given_path is not None and _same_file(out, given_path):
            raise ConfigError("--out", f"{out} is the {flag} file: writing the artifact would overwrite the measurement",
                              "pass another --out path")
    from rich.console import Console

    from simulator.calibrate import engine_fit

    console = Console(stderr=True, quiet=quiet)
    label = name or Path(out).stem
    replica = config.replica
    if rows is not None:
        from simulator.calibrate import silicon_fit

        file_client = silicon_fit.parse_client(client or silicon_fit.DEFAULT_ROW_CLIENT)
        df = silicon_fit.read_user_rows(rows, file_client)
        with console.status("calibrating") as status:
            distinct = len(df) - len(silicon_fit.repeated_rows(df))
            fitted = silicon_fit.calibrate_rows(df, config, label, f"benchmark rows {rows} ({distinct} distinct rows)",
                                                holdout, seed, config.scheduler.max_num_batched_tokens,
                                                progress=lambda msg: status.update(f"calibrating: {msg}"),
                                                client=file_client)
        result = {"engine": fitted.engine, "report": fitted.report}
        # The rows name their models and GPUs (the run's --model and --gpu, unread, are the defaults).
        labels = {"model": _rows_label(fitted.predictions["model"]), "gpu": _rows_label(fitted.predictions["gpu"])}
    elif table is not None:
        labels = {"model": replica.model, "gpu": replica.gpu}
        df = engine_fit.read_iteration_table(table)
        result = engine_fit.calibrate_table(df, replica.model, replica.gpu, config.cost_model, config.engine,
                                            holdout, seed, name=label, source=f"iteration table {table}")
    else:
        labels = {"model": replica.model, "gpu": replica.gpu}
        run = engine_fit.read_bench(bench, replica.effective_max_model_len, replica.model)
        with console.status("calibrating") as status:
            result = engine_fit.calibrate_bench(run, config, config.engine, holdout, seed, max_evals,
                                                progress=lambda msg: status.update(f"calibrating: {msg}"))
        from simulator.costmodel.calibration import roofline_backend
        from simulator.costmodel.engine_model import load_engine

        result["engine"] = result["engine"].with_terms(
            # the roofline constants its simulations ran over (the starting preset's), not its new name's
            roofline_prices=roofline_backend(replica.kernels, load_engine(config.engine)),
            name=label, source=f"vllm bench serve result {bench} ({replica.model}, {replica.gpu}, tp={replica.tp}, "
                               f"scheduler {config.scheduler.name})",
            fitted=(f"{result['report']['base_engine']}'s terms, kept: " if result["report"]["kept_base_engine"]
                    else "")
            + "a grid, then a bounded Brent search, over the CPU time a step (the base engine's other terms kept) "
              "matching TTFT and ITL quantiles "
              f"on {result['report']['requests'] - result['report']['holdout_requests']} training requests"
            + (" fitted them no better" if result["report"]["kept_base_engine"] else ""))
    # A fit that still misses its held-out rows by more than `simulate fit` warns of: said, not written in silence
    # (a table at half the kernels' time fitted every term to 0 at 92% held out; a bench file's TTFTs in ms and ITLs
    # in s fitted 75 ms a step at 500% ITL error; a calibration audit).
    from simulator.cli.costmodel import POOR_FIT_APE

    after = result["report"].get("holdout_after") or {}
    poor = {k: v for k, v in after.items() if k in HELD_OUT_MEDIANS and isinstance(v, float) and v > POOR_FIT_APE}
    if poor:
        result["report"].setdefault("warnings", []).append(
            "held-out " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in poor.items()) + f" after the fit (above "
            f"{100 * POOR_FIT_APE:.0f}%): the engine's terms do not describe these measurements over "
            f"{config.cost_model}'s kernels; check their units, model, GPU and layout before using the artifact")
    result["artifact"] = {**labels, "cost_model": config.cost_model, "report": jsonable(result["report"])}
    if write:
        write_engine_result(result, out)
    return result


def write_engine_result(result: dict[str, Any], out: Path) -> None:
    """Write :func:`calibrate_engine_command`'s fitted engine to ``out`` (whole, or ``out`` as it was)."""
    from simulator.costmodel.engine_model import save_engine_artifact

    with atomic_file(out) as tmp:
        save_engine_artifact(result["engine"], tmp, result["artifact"])


@app.command(name="calibrate-engine")
@run_options
def calibrate_engine(
    ctx: typer.Context,
    config: RunConfig,
    out: Annotated[Path, typer.Option(help="engine artifact to write (JSON); pass it to --engine")],
    table: Annotated[Path | None, typer.Option(help="iteration table CSV, one measured step a row: tp, num_prefills, "
                                                    "prefill_tokens (each prefill chunk's tokens, not the step's "
                                                    "total: give that as num_prefill_tokens), num_decodes, "
                                                    "decode_context (each decode's tokens already in the KV cache), "
                                                    "measured_s (seconds); optional prefill_context (each chunk's "
                                                    "cached tokens before it), model, gpu")] = None,
    bench: Annotated[Path | None, typer.Option(help="`vllm bench serve --save-result --save-detailed` JSON")] = None,
    rows: Annotated[Path | None, typer.Option(help="aggregate benchmark rows CSV: backend, model, gpu, isl, osl, "
                                                  "concurrency, ttft_ms, tpot_ms (each row's mean TTFT and TPOT, not "
                                                  "a median or percentile) (optional tp, pp, attention_dp, ep, "
                                                  "dtype, kernels, mode = agg, backend_version as a label, and the "
                                                  "client columns of --client); closed-loop runs at "
                                                  "each row's concurrency, at its engine's default token budget for "
                                                  "its GPU unless --max-num-batched-tokens")] = None,
    client: Annotated[str | None, typer.Option(
        help="--rows: the benchmark client that measured them, NAME[,key=value,...]: vllm-bench (the default: `vllm "
             "bench serve`'s random dataset, exact lengths unless range_ratio=r draws them from len x (1-r) to len x "
             "(1+r), num_prompts 1000), inferencex (its benchmark_serving.py: lengths from 0.8 len, or r len, to "
             "len, 10 requests a user), aiperf (exact lengths unless isl_stddev / osl_stddev spread them, "
             "20 requests a user); every user sends at once after a drained warm-up. Keys: range_ratio, "
             "isl_stddev, osl_stddev, num_prompts (the measured requests); a row's client, range_ratio, isl_stddev, "
             "osl_stddev and num_prompts columns override it. Exact lengths lock a closed loop's users into waves "
             "(TTFT far above a run whose lengths varied): name the client's band or spread")] = None,
    holdout: Annotated[float, typer.Option(help="fraction of rows/requests held out for the report")] = 0.25,
    fit_seed: Annotated[int, typer.Option(help="seed of the hold-out split and bench arrivals")] = 0,
    name: Annotated[str | None, typer.Option(help="name of the fitted engine (default: the file's stem)")] = None,
    max_evals: Annotated[int, typer.Option(help="bench fit: bounds its search after a fixed 13-point grid, which "
                                                "always runs, to at most max(5, N - 13) + 1 more simulations; 3 "
                                                "more price the kernels-only check and the report")] = 40,
) -> None:
    """Fit engine overheads on top of the kernel cost model; --engine is the starting preset."""
    from rich.console import Console

    result = calibrate_engine_command(config, out, table, bench, holdout, fit_seed, name, max_evals, quiet=False,
                                      rows=rows, given=given_run_flags(ctx), client=client, write=False)
    console = Console()
    report = result["report"]
    console.print(f"{report['kind']}: fitted {result['engine'].name}")
    if "token_budget" in report:  # the rows' replays: what each step could carry
        console.print(f"token budget: {report['token_budget']}")
    if "client" in report:  # the rows' replays: how their client drew lengths and sent requests
        console.print(f"client: {report['client']}", highlight=False)
    console.print(f"held-out error before ({report['base_engine']}): {_fmt(report['holdout_before'])}")
    console.print(f"held-out error after:  {_fmt(report['holdout_after'])}")
    for group in ("gpu", "model"):
        held = report.get(f"leave_one_{group}_out")
        if held is not None:  # a fold needs rows left once its group is out
            console.print(f"leave one {group} out:  " + (_fmt(held) if held.get("num_rows") else "no rows to judge"))
    for note in report.get("notes") or []:
        console.print(f"[yellow]note[/yellow]: {escape_markup(note)}", highlight=False)
    for warning in report.get("warnings") or []:
        console.print(f"[yellow]warning[/yellow]: {escape_markup(warning)}", highlight=False)
    skipped = report.get("skipped") or []
    if skipped:  # rows the fit could not use are said, not only kept in the artifact
        shown = "; ".join(f"line {line}: {why}" for line, why in skipped[:3])
        console.print(f"[yellow]{len(skipped)} row(s) not used[/yellow] ({shown}{'; ...' if len(skipped) > 3 else ''})",
                      highlight=False)
    if report.get("failed_requests_not_used"):  # a bench file's failed requests carry no timings: said
        console.print(f"[yellow]{report['failed_requests_not_used']} failed request(s) of the bench file not used"
                      "[/yellow] (no TTFT or token times recorded)", highlight=False)
    terms = {k: v for k, v in result["engine"].to_dict().items() if k not in ("name", "source", "fitted")}
    console.print(json.dumps(terms))
    # Written after it is said: a write that fails at the end (a full disk) does not take the fit with it
    with said_then_written(out, "fit"):
        write_engine_result(result, out)
    console.print(f"wrote {out} (pass it to --engine)")


@app.command()
def validate(
    out: Annotated[Path, typer.Option(help="report folder")] = Path("results/validation"),
    data: Annotated[Path | None, typer.Option(help="profiles folder (default ../shared/data/profiles)")] = None,
) -> None:
    """Predicted vs measured for every public real-engine measurement at hand (tables, plots, README)."""
    # Paths first (a wrong one answers before the heavy imports); a report folder is regenerated in place.
    check_report_dir(out, VALIDATION_TITLE)
    if data is not None:
        check_in_dir(data, "--data", "pass the profiles folder (../shared/data/profiles)")
    from rich.console import Console

    from simulator.calibrate.validation import SPLITWISE_PRESET, write_report

    console = Console(stderr=True)
    try:
        # Written beside out, then moved in: an interrupted report leaves out as it was, not half new (its other
        # files, results/validation/silicon, stay).
        with console.status("validating") as status, atomic_update(out) as folder:
            result = write_report(folder, data, progress=lambda msg: status.update(f"validating: {msg}"))
    except KeyboardInterrupt:
        fail(f"interrupted: nothing written, {out} left as it was", code=130)
    s = result["summary"]
    # The preset fitted to these 2023 rows (the run default, a 2026 engine, is not priced on them: it was filtered
    # on and the line never printed).
    both = s[(s.rows == "both GPUs") & (s.engine == SPLITWISE_PRESET)]
    for r in both.itertuples():
        console.print(f"{SPLITWISE_PRESET} {r.kind}: median {100 * r.median_abs_error:.1f}%, "
                      f"P95 {100 * r.p95_abs_error:.1f}%")
    console.print(f"wrote {out}/README.md, CSV tables and plots")
