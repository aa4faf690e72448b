"""``simulate plan``: the cheapest deployment that meets the SLO for this load.

A thin typer command over :func:`simulator.planning.plan.plan`; the run options (model,
workload, ``--qps`` as the load, engine, scheduler, ``--max-model-len``, ...) set what every
layout shares.
"""

# No ``from __future__ import annotations``: typer reads the annotations (see cli/capacity.py).

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.cli.app import app, fail
from simulator.cli.app import console as app_console
from simulator.cli.options import (
    WORKERS_METAVAR,
    default_option,
    given_run_flags,
    parse_ints,
    parse_workers,
    run_options,
)
from simulator.cli.planner_options import planner_options
from simulator.cli.tables import print_table
from simulator.config.disagg_layout import FALLBACK_POOL_SCHEDULER
from simulator.config.errors import ConfigError, WorkerDied
from simulator.config.options import given_flag, option_value
from simulator.config.run_config import RunConfig
from simulator.config.schedulers import POOL_SCHEDULERS
from simulator.planning.options import plan_slo
from simulator.util.paths import TMP_PREFIX, check_out_dir
from simulator.util.progress import StepProgress
from simulator.util.text import comma_list

# What plan --out holds (its resume state, tables and figures): a folder holding anything else is another's
PLAN_FILES = ("plan.json", "layouts.csv", "trials.csv", "plan.csv", "answer.json", "answer_config.json", "frontier.png",
              "frontier.svg", "mix", f"{TMP_PREFIX}*")  # (the last: a file being replaced when a run was killed)
SPACE_PANEL = "Search space"
COST_PANEL = "Cost and limits"
# The search-space flags a layout may not read (simulator.planning.plan.unread_space_options) default
# to None, so a value given is told from the default (which always applies); these are the defaults.
BUDGETS, SEQS, ATTENTION_DPS, RATIOS = "512,2048", "128,256", "1,2", "1:1,1:2,2:1"
# ... and, where neither --budgets nor --seqs is given, each shape also at its engine's own budget and cap
ENGINE_PAIR = "each shape also at the engine's own budget and max_num_seqs on its GPU unless --budgets or --seqs is given"


def _given_names(text: str | None, flag: str, example: str) -> tuple[str, ...]:
    """:func:`comma_list` of an option whose absence means a default: given, it must name something
    (an empty ``--gpus ""`` would otherwise search the default, every GPU, without a word)."""
    names = comma_list(text)
    if text is not None and not names:
        raise ConfigError(flag, f"names nothing ({text!r})", f"pass e.g. {flag} {example}, or drop {flag} for the default")
    return names


def _gpu_names(text: str | None) -> tuple[str, ...]:
    """``--gpus``, each a catalog GPU: refused before the plan's header is printed (and its search begins)."""
    from simulator.config.catalog import get_gpu

    names = _given_names(text, "--gpus", "h100-sxm,a100-80gb")
    for name in names:
        try:
            get_gpu(name)
        except ConfigError as err:
            raise ConfigError("--gpus", err.problem, err.fix) from None
    return names


def _ratios(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for item in comma_list(text):
        try:
            p, d = item.split(":")
            out.append((int(p), int(d)))
        except ValueError:
            raise ConfigError("--ratios", f"{item!r} is not P:D", "e.g. 1:1,1:2,2:1") from None
        if min(out[-1]) < 1:  # a pool of no replicas: every such layout would be dropped as invalid
            raise ConfigError("--ratios", f"{item!r} leaves a pool without replicas", "give P and D of at least 1")
    return tuple(out)


@app.command()
@default_option("num_requests", 512)
@run_options
@planner_options("plan")
def plan(
    ctx: typer.Context,
    config: RunConfig,
    planner: dict[str, Any],
    gpus: Annotated[str | None, typer.Option(help="Candidate GPUs, comma-separated (default: every priced catalog GPU that holds the model).", rich_help_panel=SPACE_PANEL)] = None,
    modes: Annotated[str, typer.Option(help=f"agg, disagg or both (disaggregated pools run --scheduler where its engine deploys them: {', '.join(POOL_SCHEDULERS)}; else {FALLBACK_POOL_SCHEDULER}).", rich_help_panel=SPACE_PANEL)] = "agg,disagg",
    tps: Annotated[str, typer.Option(help="Tensor-parallel degrees.", rich_help_panel=SPACE_PANEL)] = "1,2,4,8",
    pps: Annotated[str, typer.Option(help="Pipeline-parallel degrees (a pipeline is kept only where no TP layout of as many GPUs fits).", rich_help_panel=SPACE_PANEL)] = "1",
    dtypes: Annotated[str | None, typer.Option(help="Weight precisions allowed (default: --dtype).", rich_help_panel=SPACE_PANEL)] = None,
    budgets: Annotated[str | None, typer.Option(help=f"Token budgets (chunk sizes) of a chunking scheduler (default: {BUDGETS}; {ENGINE_PAIR}).", rich_help_panel=SPACE_PANEL)] = None,
    seqs: Annotated[str | None, typer.Option(help=f"max_num_seqs values (default: {SEQS}; {ENGINE_PAIR}).", rich_help_panel=SPACE_PANEL)] = None,
    attention_dps: Annotated[str | None, typer.Option(help=f"Attention DP ranks (MoE models; default: {ATTENTION_DPS}).", rich_help_panel=SPACE_PANEL)] = None,
    ratios: Annotated[str | None, typer.Option(help=f"Disaggregated units, prefill:decode replicas (default: {RATIOS}).", rich_help_panel=SPACE_PANEL)] = None,
    price: Annotated[list[str] | None, typer.Option(help="GPU=USD per GPU-hour, over the built-in table (repeatable).", rich_help_panel=COST_PANEL)] = None,
    prices: Annotated[Path | None, typer.Option(help="Prices file: CSV gpu,usd_per_gpu_hour[,max_w] or TOML/JSON {gpu = usd}.", rich_help_panel=COST_PANEL)] = None,
    max_gpus: Annotated[int | None, typer.Option(help="The fleet may use at most this many GPUs.", rich_help_panel=COST_PANEL)] = None,
    max_cost: Annotated[float | None, typer.Option(help="The fleet may cost at most this many USD an hour.", rich_help_panel=COST_PANEL)] = None,
    verify: Annotated[bool, typer.Option(help="Simulate the chosen fleet whole at the load (adding a unit while it misses).")] = True,
    workers: Annotated[str, typer.Option(metavar=WORKERS_METAVAR, help="Layouts searched at once in local processes; auto: one per available CPU.")] = "1",
    ray_address: Annotated[str | None, typer.Option(help="Search on Ray: a cluster address, or 'local' to start one with --workers CPUs.")] = None,
    launch: Annotated[str | None, typer.Option(help="Launch command for vllm, sglang or trtllm (default: the --kernels backend's, else the --engine preset's, else vllm).")] = None,
    mix: Annotated[bool, typer.Option(help="Also price short and long requests (split at the median length) on their own GPU types: is a mix cheaper? (a capacity search per half for the 2 cheapest layouts of each GPU type).")] = False,
    top: Annotated[int, typer.Option(help="Rows of the ranked table printed.")] = 12,
    out: Annotated[Path, typer.Option(help="Folder: layouts.csv and trials.csv (as the search goes; a rerun resumes), plan.csv, answer.json, answer_config.json (the run that verified the answer: simulate run --config), frontier.png.")] = Path("plan-out"),
) -> None:
    """The cheapest fleet (GPU type, layout, engine knobs, replicas) that serves --qps within the SLO, with its cost, energy and launch command."""
    check_out_dir(out, "--out", replaceable=PLAN_FILES)  # a plan folder is resumed; another command's is refused
    from simulator.config.disagg_layout import default_pool_scheduler
    from simulator.config.prices import load_price_file, parse_price_flags
    from simulator.planning.capacity import check_searchable
    from simulator.planning.launch import LAUNCH_ENGINES, default_launch, launch_command
    from simulator.planning.plan import Limits, SearchSpace, unread_run_options, unread_space_options
    from simulator.planning.plan import plan as run_plan

    check_searchable(config)  # each layout's capacity search varies --qps: refuse rate-less arrivals before 1,000 searches do
    table = load_price_file(prices) if prices is not None else {}
    from_file = set(table)
    table = parse_price_flags(price, table)
    slo = plan_slo(planner)
    for note in slo.unit_notes():  # said before the search, on stderr
        typer.echo(f"note: {note}", err=True)
    rel_tol = planner["rel_tol"]
    if not 0 < rel_tol < 1:  # else every layout's search fails on it, one by one
        raise ConfigError("--rel-tol", f"must be in (0, 1), got {rel_tol}", "e.g. --rel-tol 0.05")
    if top < 0:
        raise ConfigError("--top", f"must be >= 0, got {top}", "e.g. --top 12")
    w = config.workload
    if mix and w.exact_lengths:
        # (it failed after the whole search, on an empty long half)
        raise ConfigError("--mix", f"splits the traffic at the median length, and the {w.name} workload gives every "
                          "request the same lengths: there is no long half to price", "drop --mix, or vary the lengths "
                          "(--random-range-ratio, --isl-stddev, a dataset or a trace)")
    limits = Limits(max_gpus, max_cost)
    space = SearchSpace(gpus=_gpu_names(gpus), modes=comma_list(modes), tps=parse_ints(tps, "--tps"), pps=parse_ints(pps, "--pps"),
                        dtypes=_given_names(dtypes, "--dtypes", "bf16,fp8"), budgets=parse_ints(BUDGETS if budgets is None else budgets, "--budgets"),
                        max_num_seqs=parse_ints(SEQS if seqs is None else seqs, "--seqs"), engine_defaults=budgets is None and seqs is None,
                        attention_dps=parse_ints(attention_dps or ATTENTION_DPS, "--attention-dps"),
                        ratios=_ratios(ratios or RATIOS))
    if space.gpus:  # a --price of a GPU the plan does not search prices nothing (a --prices file is a whole table)
        from simulator.config.catalog import get_gpu

        searched = {get_gpu(name).name for name in space.gpus}
        for item in price or []:
            name = get_gpu(item.split("=", 1)[0].strip()).name
            if name not in searched:
                raise ConfigError("--price", f"{item} prices {name}, and --gpus {gpus} does not search it, so the "
                                  "--price would do nothing", f"add {name} to --gpus, or drop --price {item}")
        if prices is not None and not from_file & searched:  # (one it prices is enough: the file is a whole table)
            raise ConfigError("--prices", f"{prices} prices {', '.join(sorted(from_file))}, none of which --gpus {gpus} "
                              "searches, so the file would do nothing", "add one of them to --gpus, or drop --prices")
    given = {"--budgets": budgets, "--attention-dps": attention_dps, "--ratios": ratios,
             "--pps": pps if max(space.pps) > 1 else None}  # (pp 1 is searched in every mode)
    for flag, (why, fix) in unread_space_options(config, space.modes).items():
        if given[flag] is not None:  # a default the layouts do not read is fine; a value given is not
            raise ConfigError(flag, f"{why}, so {flag} would do nothing", fix)
    from simulator.config.options import engine_terms_unread

    typed = given_run_flags(ctx)  # (a --config file's values are not the command line's to drop)
    if "dtype" in typed and dtypes is not None:  # (every layout takes --dtypes' formats: the base's went unread)
        raise ConfigError("--dtype", f"--dtypes {dtypes} gives the weight formats searched, so --dtype "
                          f"{config.replica.dtype} would do nothing", "drop --dtype (--dtypes names the formats)")
    if "engine" in typed:  # the terms no layout of the search reads (a run's own check judges one layout)
        search = (max(space.tps), max(space.pps), tuple(space.modes))
        for term, (why, fix) in engine_terms_unread(config, search).items():
            raise ConfigError("--engine", f"{term} {why}, so it would do nothing", f"{fix}, or drop {term}")
    for name, (why, fix) in unread_run_options(config, space, verify).items():
        if name in typed:
            flag = given_flag(name, option_value(config, name))
            problem = why.replace("{flag}", flag) if "{flag}" in why else f"{why}, so {flag} would do nothing"
            raise ConfigError(flag, problem, fix.replace("{flag}", flag))
    if launch not in (None, *LAUNCH_ENGINES):
        raise ConfigError("--launch", f"unknown engine {launch!r}", f"use {', '.join(LAUNCH_ENGINES)}")
    from simulator.config.resources import auto_workers

    num_workers = parse_workers(workers, lambda: auto_workers(64, config.workload.num_requests),
                                remote=ray_address not in (None, "local"))  # (a cluster's tasks: its CPUs bound them)
    console = app_console()
    pools = default_pool_scheduler(config.scheduler.name)
    pools_text = f" (disaggregated pools: {pools})" if "disagg" in space.modes and pools != config.scheduler.name else ""
    console.print(f"plan: {config.replica.model}, {config.workload.name if not config.workload.trace else config.workload.trace} "
                  f"at {config.workload.qps:g} req/s; SLO: {slo.describe()}; engine {config.engine}, scheduler "
                  f"{config.scheduler.name}{pools_text}, kernels {config.replica.kernels} -> {out}/", highlight=False)
    try:
        with StepProgress("plan") as steps:
            result = run_plan(config, config.workload.qps, slo, space, table, limits, rel_tol=rel_tol,
                              workers=num_workers, ray_address=ray_address, out=out, verify_fleet=verify,
                              on_progress=lambda message, done, total: steps.update(message, done or None, total or None))
    except KeyboardInterrupt:
        fail(f"interrupted: the layouts searched so far are in {out}/layouts.csv; run the same command to resume",
             code=130)
    except WorkerDied as err:
        fail(f"{err}; the layouts searched so far are in {out}/layouts.csv; run the same command with fewer "
             "--workers to resume", code=1)
    print_plan(result, top, console)
    if result.answer is None:
        console.print(f"[bold]{result.why_no_answer()}[/bold]", highlight=False)
        _say_write_error(result, out)
        raise typer.Exit(1)
    engine = launch or default_launch(config)
    a = result.answer
    console.print(f"[bold]answer: {a.units(result.load_qps)} x ({a.layout.key}) = "
                  f"{a.units(result.load_qps) * a.layout.num_gpus} {a.layout.gpu} GPUs, "
                  f"${a.usd_per_hour(result.load_qps):,.2f}/hour[/bold] (price: {a.price.price_source or 'given'})",
                  highlight=False)
    priced = {c.layout.gpu: c.price for c in result.ranked()}
    if len({p.price_list for p in priced.values()}) > 1:  # said: a ranking across price lists is only as fair as they are
        console.print("note: the ranked GPUs' prices come from different lists: " + "; ".join(
            f"{gpu} ${p.usd_per_gpu_hour:g}/GPU-hour ({p.price_source or 'given'})" for gpu, p in priced.items())
            + " (--price GPU=USD sets one)", highlight=False)
    units = a.units(result.load_qps)
    console.print(f"launch ({engine}), one per unit, {units} unit{'s' if units != 1 else ''} behind a load balancer:",
                  highlight=False)
    if launch is not None and launch != default_launch(config):  # said: another engine than the one simulated
        console.print(f"note: the fleet was simulated as {default_launch(config)} (engine {config.engine}, scheduler "
                      f"{config.scheduler.name}, kernels {config.replica.kernels}); {launch} schedules and sizes its "
                      f"memory its own way, so this command may not hold the SLO (--engine {launch}-2026 --kernels {launch} "
                      "simulate it)", highlight=False)
    for line in launch_command(a, config, engine):
        typer.echo(f"  {line}")
    _say_write_error(result, out)  # (before --mix's search, which would write beside the files that failed)
    if mix:
        import pandas as pd

        from simulator.planning.plan import mix_note

        note = mix_note(result, out / "mix", rel_tol=rel_tol)
        if note is not None:
            pd.DataFrame(note.rows).to_csv(out / "mix" / "mix.csv", index=False)
            console.print(f"mix: {note.describe()} (short/long split at the median prompt + output length; "
                          f"{out}/mix/mix.csv)", highlight=False)
    figure = ", frontier.png" if out / "frontier.png" in result.written else ""
    if out / "answer_config.json" in result.written:
        console.print(f"reproduce the verification: simulate run --config {out}/answer_config.json", highlight=False)
    console.print(f"wrote {out}/plan.csv, layouts.csv, trials.csv, answer.json{figure}; {result.num_searched} "
                  f"layouts searched, {result.num_resumed} resumed, "
                  f"{sum(1 for c in result.candidates if c.pruned)} pruned of {len(result.candidates)}"
                  + (f", {below} cut after a trial showed they cannot win (in layouts.csv, not in the table)"
                     if (below := sum(1 for c in result.candidates if (c.row or {}).get("status") == "below")) else "")
                  + f", {result.wall_s:.0f}s", highlight=False)


def _say_write_error(result, out: Path) -> None:  # noqa: ANN001 - a PlanResult
    """The plan is shown; its last files could not all be written (a full disk, a folder made read-only): one line."""
    err = result.write_error
    if err is not None:
        fail(f"{err.filename or out}: {err.strerror or err}: plan.csv and answer.json were not both written; the plan "
             "above stands (free space or permissions there, then the same command resumes from layouts.csv)", code=1)


def _f(value: float, fmt: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def print_plan(result, top: int, console) -> None:  # noqa: ANN001
    from rich import box
    from rich.table import Table

    df = result.table()
    table = Table("#", "layout (one unit)", "units", "GPUs", "$/hour", "$/Mtok\noutput", "headroom", "verified\ngoodput",
                  "tok/s\nper GPU", "tok/s\nper user", "J/tok", title=f"cheapest fleets for {result.load_qps:g} req/s: "
                  f"{result.slo.describe()}", title_justify="left", box=box.SIMPLE_HEAD,
                  caption="headroom: units x per-unit capacity over the load, - 1 (>=: the unit's capacity is a lower "
                          "bound, its search still passing at its ceiling; <: a bound from a fleet's missed verification, "
                          "which the search's shorter trials overstated). $/Mtok: USD per million output tokens at the "
                          "load. tok/s per GPU: output tok/s at the load over the fleet's GPUs (the frontier plot's is at each unit's capacity). tok/s per user: output tok/s per user, the mean over requests of 1/TPOT "
                          "(AIPerf's; simulate run's), at per-unit capacity. J/tok: GPU board power (idle to max by each GPU's busy time) per output token.",
                  caption_justify="left")
    for row in df.head(top).itertuples():
        verified = "-" if not row.verified else f"{_f(100 * row.verified_goodput, '.1f')}% {row.verified}"
        if row.verified and row.verified_units != row.units:  # a missed fleet, shown with the units tried next
            verified += f" at {row.verified_units}"
        over_gpus = "*" if row.over_limit.startswith("--max-gpus") else ""
        over_usd = "*" if row.over_limit.startswith("--max-cost") else ""
        table.add_row(str(row.rank), row.layout, str(row.units), f"{row.gpus}{over_gpus}", f"{row.usd_per_hour:,.2f}{over_usd}",
                      _f(row.usd_per_mtok, ".3f"),
                      f"{'<' if row.headroom_is_upper_bound else '>=' if row.capacity_is_lower_bound else ''}"
                      f"{100 * row.headroom:+.0f}%", verified,
                      _f(row.tokens_per_s_per_gpu, ",.0f"), _f(row.tokens_per_s_per_user, ".1f"),
                      _f(row.j_per_output_token, ".2f"))
    print_table(console, table)
    shown = df.head(top)
    if len(shown) and shown["over_limit"].astype(bool).any():  # (no row can carry the load: no columns)
        limits = ", ".join(dict.fromkeys(x for x in shown["over_limit"] if x))
        console.print(f"*: the fleet exceeds {limits}", highlight=False)
    for note in result.notes:
        console.print(f"note: {note}", highlight=False)
