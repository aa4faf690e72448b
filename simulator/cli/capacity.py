"""``simulate capacity``, ``simulate tau``, ``simulate sweep`` and ``simulate plot``: capacity planning.

Thin typer commands over :mod:`simulator.planning.capacity`, :mod:`simulator.planning.tau`,
:mod:`simulator.planning.sweep` and :mod:`simulator.report.plots`.
"""

# No ``from __future__ import annotations`` here: typer reads every command's annotations at each
# start; evaluated once at import they cost less than strings it evaluates again every time.

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from simulator.cli.app import app, fail, said_then_written
from simulator.cli.app import console as app_console
from simulator.cli.options import (
    WORKERS_METAVAR,
    default_help,
    default_option,
    given_run_flags,
    parse_workers,
    run_options,
)
from simulator.cli.planner_options import planner_options
from simulator.cli.tables import print_table
from simulator.config.errors import ConfigError, WorkerDied
from simulator.config.run_config import RunConfig
from simulator.config.speculative import unmodelled_line
from simulator.planning.options import (
    CAPACITY_DEFAULT_NUM_REQUESTS,
    MAX_TOKEN_LIMIT_S,
    SEARCH_PANEL,
    refuse_unread_planner_options,
    slo_and_settings,
)
from simulator.util.jsonio import jsonable
from simulator.util.paths import atomic_dir, check_in_dir, check_in_file, check_out_dir, check_out_file
from simulator.util.progress import StepProgress
from simulator.util.text import count

if TYPE_CHECKING:  # rich loads when a table is printed, not when the CLI is imported
    from rich.console import Console


# Trials a search may run ahead of need: the one it needs and the one after either verdict.
# Deeper, each further trial is needed with probability 1/4 or less (bisection halves), so
# more processes would mostly burn CPU on a shared machine for little wall time.
AHEAD_PER_SEED = 3


def capacity_auto_workers(num_seeds: int, requests_per_trial: int) -> int:
    """``--workers auto`` for a capacity search: one process per available CPU, at most
    :data:`AHEAD_PER_SEED` a seed, and no more than memory holds at one trial each."""
    from simulator.config.resources import auto_workers

    return auto_workers(AHEAD_PER_SEED * max(1, num_seeds), requests_per_trial)


def _s(value: float, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}g}"


def _tok_s(value: float) -> str:
    """Tokens a second, or "-" where no trial passed (capacity 0: no figure at capacity)."""
    return "-" if value is None or math.isnan(value) else f"{value:,.0f}"


MIN_REQUESTS_PER_USER = 10  # below this many a user at a users capacity, the answer says the first wave weighs in
CAPACITY_FILES = ("capacity.json", "trials.csv")  # what capacity --out holds (an earlier one is replaced whole)
# What sweep --out holds: its record, point files, results table and `plot sweep`'s figures (written beside them)
SWEEP_FILES = ("sweep.json", "points", "results.csv", "results.parquet", "*.png", "*.svg")


@app.command()
@default_option("num_requests", CAPACITY_DEFAULT_NUM_REQUESTS)
@run_options
@planner_options("capacity", after={"workers": "seeds"})
def capacity(
    ctx: typer.Context,
    config: RunConfig,
    planner: dict[str, Any],
    workers: Annotated[str, typer.Option(metavar=WORKERS_METAVAR, help="Processes: seeds run in parallel; with fewer seeds than processes (one, say), each search also runs the trials it may need next ahead (the same result). auto: one per available CPU, at most 3 a seed and what memory holds.", rich_help_panel=SEARCH_PANEL)] = "auto",
    out: Annotated[Path | None, typer.Option(help="Folder for capacity.json and trials.csv.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON (with capacity_qps, or capacity_users with --users).")] = False,
) -> None:
    """Largest Poisson QPS (or with --users the most closed-loop users) meeting the SLO (P99 TBT <= --tbt-slo, P50 scheduling delay <= 2 s; or DistServe's goodput with --criterion goodput), by bisection over 2048-request trials."""
    if out is not None:  # checked before any trial (and import): a bad --out must not cost a search
        check_out_dir(out, "--out", replaceable=CAPACITY_FILES)
    from simulator.planning.capacity import check_searchable, find_capacity, format_load, seed_unread

    run_flags = given_run_flags(ctx)  # (a value equal to the default, given, does nothing as much as another)
    typed = _typed(ctx, planner)
    refuse_unread_planner_options(config, planner, typed, run_flags)
    if ("ttft_slo" in typed and not typed & {"goodput_ttft_slo", "min_goodput"}
            and planner.get("criterion") != "goodput"):
        # One TTFT limit where one is given and goodput is only reported: goodput's own (2 s by default) judged the
        # requests against another, so a trial passing --ttft-slo 30 printed 11% goodput beside it. (Where goodput
        # is judged, --min-goodput or --criterion goodput, its limit stays its own.)
        planner = {**planner, "goodput_ttft_slo": planner["ttft_slo"]}
    slo, settings = slo_and_settings(planner)
    # said before the search, on stderr (a --json answer is stdout alone); of the limits typed
    for note in slo.unit_notes(typed):
        typer.echo(f"note: {note}", err=True)
    check_searchable(config, settings.users, offer_users=True, given=run_flags, max_users=settings.max_users)
    if settings.users:
        from simulator.config.options import check_users_search_speculation

        check_users_search_speculation(config, settings.max_users, run_flags)
    seeds = planner["seeds"]
    # (the run options' own check judged the config before --users makes each trial a closed loop; a sweep's
    # --seeds holds at its points that draw)
    if (unread := seed_unread(config, settings.users)) is not None:
        if seeds > 1:
            raise ConfigError("--seeds", f"{unread[0]}, so each of the {seeds} seeds would search the very same "
                              "trials", unread[1].replace("{flag}", "--seeds"))
        if "seed" in run_flags:
            raise ConfigError("--seed", f"{unread[0]}, so --seed would do nothing", unread[1].replace("{flag}", "--seed"))
    config = _users_drain_warmups(ctx, config, settings)
    num_workers = parse_workers(workers, lambda: capacity_auto_workers(seeds, config.workload.num_requests))
    num_trials = 0

    def on_trial(t) -> None:  # noqa: ANN001
        nonlocal num_trials
        num_trials += 1
        verdict = "passes" if t.passed else f"fails ({t.reason})"
        steps.update(f"trial {num_trials} (seed {t.seed}): {format_load(t.qps, settings.users)} {verdict}", num_trials)

    seeds_done: list[str] = []  # (said if the search is stopped: a seed's answer is not lost with the rest)

    def on_seed_done(seed) -> None:  # noqa: ANN001
        seeds_done.append(f"seed {seed.seed}: {format_load(seed.capacity_qps, settings.users)}")
        steps.update(f"seed {seed.seed} done: capacity {format_load(seed.capacity_qps, settings.users)}")

    # Progress on stderr, one step per trial (per seed when seeds run in parallel); --json stays quiet.
    try:
        with StepProgress("capacity", quiet=json_out) as steps:
            report = find_capacity(config, slo, settings, num_seeds=seeds, workers=num_workers,
                                   on_seed_done=on_seed_done, on_trial=on_trial)
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM with --workers, whose workers are stopped)
        finished = f" (finished: {'; '.join(seeds_done)})" if seeds_done else ""
        fail(f"interrupted: the search was stopped and nothing was written{finished}", code=130)
    data = report.to_dict()
    # Said before it is written: a write that fails at the end (a full disk) does not take the answer with it
    spec_note = unmodelled_line(config.speculative)
    if json_out:
        typer.echo(json.dumps(jsonable(data), indent=2, sort_keys=True))
        if spec_note:  # (stdout holds the JSON alone)
            typer.echo(spec_note, err=True)
        if (note := default_tbt_decided(report, typed)) is not None:
            typer.echo(f"note: {note}", err=True)
        for line in answer_notes(report):
            typer.echo(line, err=True)
    else:
        print_capacity(report, app_console())
        if (note := default_tbt_decided(report, typed)) is not None:
            app_console().print(f"note: {note}", highlight=False)
        if spec_note:
            app_console().print(spec_note, markup=False, highlight=False)
    if out is not None:
        with said_then_written(out, "capacity"), atomic_dir(out) as folder:  # out ends up whole or as it was
            (folder / "capacity.json").write_text(json.dumps(jsonable(data), indent=2, sort_keys=True))
            report.trials_frame().to_csv(folder / "trials.csv", index=False)
        if not json_out:
            app_console().print(f"wrote {out}/ (capacity.json, trials.csv)")
    if report.capacity_qps == 0:  # no load met the SLO: no answer, as plan's (exit 1), its why said above
        raise typer.Exit(1)


def _sweep_unit_notes(points: list[Any]) -> list[str]:
    """Each SLO limit of a sweep's points far beyond any serving SLO (planning.options.limit_notes), once, by its key
    (a file's tpot_slo = 50 is 50 seconds a token, as capacity's --tpot-slo 50 is)."""
    from simulator.planning.options import LIMIT_KINDS, limit_notes

    notes = (limit_notes({k: p.options.get(k) for k in LIMIT_KINDS}, as_flags=False) for p in points)
    return list(dict.fromkeys(note for point_notes in notes for note in point_notes))


def default_tbt_decided(report: Any, typed: set[str] | frozenset[str]) -> str | None:  # noqa: ANN401
    """Where a user set a TPOT or TTFT limit but not --tbt-slo, and the TBT limit's default alone broke a seed's
    lowest failing load: what decided the capacity was a limit nobody asked for (a read-only audit took a vLLM
    answer of 1.59 req/s for its TPOT limit's; the default P99 TBT <= 0.2 s had set it, 2.6 without it)."""
    slo = report.slo
    if slo.criterion != "tbt" or "tbt_slo" in typed or (slo.tpot_s is None and slo.ttft_s is None):
        return None
    tbt_alone = f"P{slo.tbt_quantile:g} TBT "
    found = None
    for seed in report.seeds:
        above = [t for t in seed.trials if not t.passed and t.qps > seed.capacity_qps]
        lowest = min(above, key=lambda t: t.qps) if above else None
        if lowest is not None and lowest.reason.startswith(tbt_alone) and ";" not in lowest.reason:
            # (a trial stopped early on TBT judged nothing else: the limits given may have failed there too)
            found = "may have decided" if lowest.stopped_early else "decided"
            if not lowest.stopped_early:
                break
    if found is None:
        return None
    why = ("the lowest failing load failed on it, not on those" if found == "decided" else
           "the lowest failing load was stopped on it before the others were judged (--no-tbt-early-exit judges them)")
    return (f"the TBT limit's default {found} the capacity (P{slo.tbt_quantile:g} TBT <= {slo.tbt_s:g} s, judged "
            f"beside the limits given): {why}; --tbt-slo sets another (e.g. --tbt-slo {MAX_TOKEN_LIMIT_S:g} to judge "
            "the limits given alone)")


def _check_mix_fits(config: RunConfig, mix: Any, given: frozenset[str] = frozenset()) -> None:  # noqa: ANN401
    """A hybrid batch (a planning.tau.DecodeMix) the replica could hold, its decodes and a chunk after
    ``chunk_context`` tokens (:func:`~simulator.engine.kvcache.batch_fit_problem`, which ``predict`` refuses by too),
    else tau would price batches no engine runs. ``given``: the batch flags typed; a figure drawn from the workload is
    blamed on it, not on a flag nobody gave."""
    from simulator.engine.kvcache import batch_fit_problem
    from simulator.planning.tau import hybrid_shape

    problem = batch_fit_problem(config.replica, hybrid_shape(mix, mix.num_decodes + 1),  # a one-token chunk
                                config.scheduler)
    if problem is not None:
        limit = config.replica.effective_max_model_len
        flag, fix = {"prefill": ("--chunk-context", f"pass --chunk-context below {limit}"),
                     "decode": ("--decode-context", f"pass --decode-context <= {limit}"),
                     "kv": ("--num-decodes", "lower --num-decodes or --decode-context, or add GPUs (--tp)")}[problem[0]]
        if problem[0] == "kv" and "num_decodes" not in given and "decode_context" in given:
            flag, fix = "--decode-context", "lower --decode-context, or give --num-decodes, or add GPUs (--tp)"
        if flag.removeprefix("--").replace("-", "_") not in given:  # (drawn from the workload: its mean figures)
            raise ConfigError("workload", f"{problem[1]} (the workload's batch: {mix.num_decodes:,} decodes x "
                              f"{mix.decode_context:,} tokens, a chunk after {mix.chunk_context:,})",
                              f"give the batch with {flag} (and the other batch flags), or add GPUs (--tp)")
        raise ConfigError(flag, problem[1], fix)


def _typed_on_command_line(ctx: typer.Context, name: str) -> bool:
    return getattr(ctx.get_parameter_source(name), "name", None) in ("COMMANDLINE", "ENVIRONMENT")


def _users_drain_warmups(ctx: typer.Context, config: RunConfig, settings: Any) -> RunConfig:
    """A users search's trials are closed loops: vLLM's ``--num-warmups`` (or ``--warmup-mode drain``) drains each
    one's warm-up first, as ``run --concurrency N --num-warmups M`` does, where the config names no concurrency (its
    first trial's users then, as the search reads it). It ran beside the measured requests (an audit: P99 TBT
    0.1647 s against 0.1636 with --concurrency 16 typed, the same first trial), and --warmup-mode was refused."""
    from simulator.planning.capacity import DEFAULT_FIRST_USERS

    w = config.workload
    if not settings.users or w.concurrency is not None:
        return config
    typed = ctx.params.get("warmup_mode") if _typed_on_command_line(ctx, "warmup_mode") else None
    mode = typed or ("drain" if _typed_on_command_line(ctx, "num_warmups") else None)
    if typed is not None and not w.num_warmup:  # (run_options left it to this command: said here)
        raise ConfigError("--warmup-mode", f"{typed!r} is the warm-up's, and no warm-up is given",
                          "add --num-warmup M, or drop --warmup-mode")
    if mode != "drain" or not w.num_warmup:
        return config
    return config.replace(workload__concurrency=min(DEFAULT_FIRST_USERS, settings.max_users),
                          workload__arrival="burst", workload__warmup_mode="drain")


def _typed(ctx: typer.Context, planner: dict) -> set[str]:
    """The planner options typed on the command line, a default's value included (``--tbt-early-exit``)."""
    sources = {name: ctx.get_parameter_source(name) for name in planner}
    return {name for name, source in sources.items()
            if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")}


def _against(value: float | None, limit: float | None) -> str:
    """A trial's figure with enough digits to show which side of its limit it is on."""
    from simulator.planning.capacity import format_against

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format_against(value, limit) if limit is not None else _s(value)


def print_capacity(report, console: "Console") -> None:  # noqa: ANN001
    from rich import box
    from rich.measure import Measurement
    from rich.table import Column, Table

    from simulator.planning.capacity import format_load, load_number

    r, s, slo = report.config.replica, report.config.scheduler, report.slo
    # One definition per column, named in its header and spelled out in the caption.
    multi_seed = len(report.seeds) > 1
    tpot_q = slo.tpot_quantile  # the judged percentile where --tpot-slo holds one, else P99 (SLO refuses another)
    users = report.settings.users
    headers = [*(["seed"] if multi_seed else []), "users" if users else "QPS", "pass", f"P{slo.tbt_quantile:g}\nTBT (s)\nall gaps",
               f"P{slo.sched_delay_quantile:g}\nsched.\ndelay (s)", "P50\nTTFT (s)", "P99\nTTFT (s)",
               f"P{tpot_q:g}\nTPOT (s)",
               f"goodput\nTTFT<={slo.goodput_ttft_s:g}s\n" + (f"max TBT\n<={slo.tbt_s:g}s" if slo.goodput_tpot_s is None
                                                          else f"TPOT\n<={slo.goodput_tpot_s:g}s")]
    caption = (f"P{slo.tbt_quantile:g} TBT: percentile of every gap between consecutive output tokens of all "
               f"requests (the SLO's TBT). Scheduling delay: first scheduled - arrival"
               + (", plus the waits after the prompt for decode blocks, the KV link and a decode seat" if report.config.prefill_pool
                  else "")
               + ". TTFT: first token - "
               f"arrival. Goodput: share of all requests with TTFT <= {slo.goodput_ttft_s:g}s "
               + (f"whose own largest gap is <= {slo.tbt_s:g}s; a trial can meet the P{slo.tbt_quantile:g} TBT limit "
                  "with goodput below 100%." if slo.goodput_tpot_s is None else
                  f"whose TPOT (mean gap after the first token) is <= {slo.goodput_tpot_s:g}s.")
               + f" TPOT: a request's mean gap after its first token (P{tpot_q:g} over requests with one).")
    if any(t.too_short for seed in report.seeds for t in seed.trials):
        limit_s, _, limit_name = slo.wait_limit()
        caption += (f" pass short: met the SLO, but its arrivals span less than the {limit_s:g}s {limit_name}, too "
                    "short for a queue the server cannot drain to show: neither pass nor failure.")
    ttft_limit = slo.ttft_s if slo.ttft_quantile == 99 else None  # the column is P99
    good_limit = 100 * slo.min_goodput if slo.min_goodput else None
    judged = slo.criterion != "goodput"  # under goodput, TBT and scheduling delay are shown, not judged
    cfg = report.config
    from simulator.cli.run import engine_words, pool_schedulers
    from simulator.config.disagg_layout import layout_of, link_words

    priced = f"{engine_words(cfg)} · kernels {r.kernels}"  # (what priced the trials, as run's header names them)
    title = (f"{r.model} disaggregated: {layout_of(cfg).describe()} ({link_words(cfg)}) · "
             f"{pool_schedulers(cfg, layout_of(cfg))} · {priced} · {slo.describe()}"
             if cfg.is_disaggregated else
             f"{r.model} on {r.num_gpus}x {r.gpu} (tp={r.tp}, pp={r.pp}) · {s.name} · {priced} · {slo.describe()}")
    rows = []
    for seed in report.seeds:
        for t in seed.trials:
            good = "-" if math.isnan(t.goodput_fraction) else _against(100 * t.goodput_fraction, good_limit) + "%"
            rows.append([*([str(t.seed)] if multi_seed else []), load_number(t.qps, users),
                         "yes" if t.passed else "short" if t.too_short else "no",
                         _against(t.tbt_s_q, slo.tbt_s if judged else None),
                         _against(t.sched_delay_s_q, slo.sched_delay_s if judged else None),
                         _s(t.ttft_s_p50), _against(t.ttft_s_p99, ttft_limit),
                         _against(t.tpot_s_q, slo.tpot_s), good, t.reason])

    def build(with_note: bool) -> Table:
        # Figures never fold (they are what a reader compares); the note wraps instead.
        note = [Column("why it failed", ratio=1, min_width=16)] if with_note else []
        table = Table(*[Column(h, no_wrap=True) for h in headers], *note,
                      title=title,
                      title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE_HEAD)
        for row in rows:
            table.add_row(*(row if with_note else row[:-1]))
        return table

    # Too narrow for a note column beside the whole figures: the notes follow the table.
    figures_width = Measurement.get(console, console.options, build(with_note=False)).maximum
    notes_below = figures_width + 18 > console.width
    table = build(with_note=not notes_below)
    w = report.config.workload
    console.print(f"workload: {w.name if w.trace is None else f'trace {w.trace}'}, {count(w.num_requests, 'request')} "
                  "per trial", highlight=False)
    if table.row_count:
        print_table(console, table)
    if notes_below:
        for t in (t for seed in report.seeds for t in seed.trials if t.reason):
            console.print(f"{'seed ' + str(t.seed) + ', ' if multi_seed else ''}{format_load(t.qps, users)} failed: {t.reason}",
                          highlight=False)
    summary = report.summary()
    key = f"capacity_{report.unit}"
    # Over seeds the headline is their mean, which some seed may fail: the least is the load every seed held.
    spread = (f" (mean) ± {summary[key + '_std']:.3g} (min {summary[key + '_min']:.4g}: every seed held it; max "
              f"{summary[key + '_max']:.4g}, {len(report.seeds)} seeds)") if len(report.seeds) > 1 else ""
    # What a planner needs at the answer, whatever the criterion: tail TBT, tail TTFT and goodput.
    goodput = summary["goodput_fraction_at_capacity"]
    good = "-" if math.isnan(goodput) else f"{_against(100 * goodput, good_limit)}%"
    # The judged TBT quantile first where it is not P99 (the tail a planner reads either way).
    judged_tbt = "" if slo.tbt_quantile == 99 else (
        f"P{slo.tbt_quantile:g} TBT {_against(summary['tbt_s_q_at_capacity'], slo.tbt_s if judged else None)} s, ")
    tbt_limit = slo.tbt_s if judged and slo.tbt_quantile == 99 else None
    # Over several seeds a users capacity is their mean, not a whole number.
    shown = f"{summary[key]:.4g} {'users' if users else 'QPS'}" if len(report.seeds) > 1 else format_load(summary[key], users)
    headline = f"capacity {shown}{spread}"
    if summary["capacity_is_lower_bound"]:  # a seed's capacity is a lower bound, and so is their mean
        lower = summary["num_seeds_lower_bound"]
        some = f" ({lower} of {len(report.seeds)} seeds a lower bound)" if lower < len(report.seeds) else ""
        headline = f"capacity at least {shown}{spread}{some}"
    elif not summary["capacity_converged"]:  # stopped at --max-trials with a bracket wider than --rel-tol
        headline = f"capacity {shown}{spread}, not converged (the seed lines give the bracket; raise --max-trials)"
    if all(seed.not_found for seed in report.seeds):  # the trials ran out first
        lowest = min(t.qps for seed in report.seeds for t in seed.trials)
        headline = f"capacity not found: below {format_load(lowest, users)}"
    console.print(f"[bold]{headline}[/bold] · at capacity: {judged_tbt}P99 TBT "
                  f"{_against(summary['tbt_s_p99_at_capacity'], tbt_limit)} s, P50 TTFT "
                  f"{_s(summary['ttft_s_p50_at_capacity'])} s, P99 TTFT {_s(summary['ttft_s_p99_at_capacity'])} s, "
                  f"P{tpot_q:g} TPOT {_against(summary['tpot_s_q_at_capacity'], slo.tpot_s)} s, "
                  f"goodput {good} ({slo.good_request}), output {_tok_s(summary['output_tok_s_at_capacity'])} tok/s"
                  f" · {count(summary['num_trials'], 'trial')} in "
                  f"{report.wall_s:.1f}s")
    for seed in report.seeds:
        console.print(f"seed {seed.seed}: {seed.reason}")
    for line in answer_notes(report):
        console.print(line, highlight=False)


def answer_notes(report) -> list[str]:  # noqa: ANN001
    """The notes under a capacity answer (rejected requests, too few requests a user, lock-stepped users, a KV
    cache larger than the memory holds), each a ``note: ...`` line: printed under the table, and on stderr beside
    --json's answer (which left them out; an audit)."""
    from simulator.planning.capacity import rejection_fix

    out: list[str] = []
    summary, w, users = report.summary(), report.config.workload, report.settings.users
    key = f"capacity_{report.unit}"
    rejecting = [t for seed in report.seeds for t in seed.trials if t.num_rejected and t.num_finished]
    if rejecting:  # said, not silent: the TBT, TTFT and TPOT figures are over the finished requests only
        most = max(rejecting, key=lambda t: t.num_rejected)
        out.append(f"note: up to {most.num_rejected:,} of a trial's {w.num_requests:,} requests were rejected on "
                   f"arrival ({most.reject_reason}), at any load: they count as misses in goodput only, the other "
                   f"figures are over the finished requests ({rejection_fix(most.reject_reason)}; a trace's "
                   "--max-total-tokens leaves its longer rows out)")
    num_requests = report.config.workload.num_requests
    if users and summary[key] > 0 and num_requests < MIN_REQUESTS_PER_USER * summary[key]:
        # Every user sends its first request at once: with few requests each, that wave is much of a trial.
        out.append(f"note: {num_requests:,} requests a trial are {num_requests / summary[key]:.2g} a user at "
                   "capacity, so the first wave (every user at once) weighs in the figures; raise --num-requests "
                   f"(e.g. {MIN_REQUESTS_PER_USER * math.ceil(summary[key]):,}, {MIN_REQUESTS_PER_USER} a user, as "
                   "InferenceX runs)")
    if users and report.config.workload.exact_lengths:  # as run's title says it (simulator.cli.run._loop_note)
        out.append("note: every request the same length, so each trial's users move in lock-stepped waves (a "
                   "wave's prompts arrive together, its TTFTs queue behind one another); --random-range-ratio 0.8 "
                   "--range-style sglang draws InferenceX's [0.8 len, len] band")
    if report.config.replica.num_gpu_blocks is not None and not report.config.is_disaggregated:
        from simulator.engine.kvcache import build_kv_cache

        plan = build_kv_cache(report.config.replica, report.config.scheduler)[1]
        held = plan.num_memory_tokens
        if held is not None and plan.num_kv_tokens > held:  # said, as run's header says it: the cache was given
            out.append(f"note: --num-gpu-blocks sets a KV cache of {plan.num_kv_tokens:,} tokens, "
                       f"{plan.num_kv_tokens / max(held, 1):.3g}x the {held:,} the memory plan gives: the capacity "
                       "is that cache's, more than the GPUs hold")
    return out


def _check_tau_reads(ctx: typer.Context, config: RunConfig, num_decodes: int | None, decode_context: int | None,
                     chunk_context: int | None) -> None:
    """Refuse what tau would not read: a scheduler that never chunks a prompt (tau is a chunked-prefill
    budget), more decodes than the scheduler runs at once, and the workload's flags once the three batch
    figures are given (the workload then sizes nothing)."""
    from simulator.config.options import is_workload_option
    from simulator.config.schedulers import CHUNKING_SCHEDULERS

    s = config.scheduler
    if config.is_disaggregated:  # (a --config of a disaggregated run: the pool flags themselves are refused)
        raise ConfigError("--config", "tau prices one engine's hybrid step (prompt chunks beside decodes), and a "
                          "disaggregated config's pools never run one", "run tau on an aggregated config, or size "
                          "the pools with `simulate disagg split`")
    if s.name not in CHUNKING_SCHEDULERS:
        raise ConfigError("--scheduler", f"tau is the token budget of a step that chunks a prompt beside the decodes, "
                          f"and {s.name} never splits a prompt", f"use --scheduler {' or '.join(CHUNKING_SCHEDULERS)}")
    if num_decodes is not None:
        from simulator.engine.replica import build_scheduler

        max_seqs = build_scheduler(config)[0].max_num_seqs  # (the config's, else the engine's default)
        if num_decodes > max_seqs:
            raise ConfigError("--num-decodes", f"{num_decodes:,} decodes exceed the {max_seqs:,} sequences the "
                              "scheduler runs at once (--max-num-seqs)", "lower --num-decodes or raise --max-num-seqs")
    if num_decodes == 0 and decode_context is not None:  # (predict refuses its --context alike)
        raise ConfigError("--decode-context", "--num-decodes 0 puts no decode in the batch, so --decode-context would "
                          "do nothing", "drop --decode-context, or give --num-decodes N")
    flags = given_run_flags(ctx)
    if "seed" in flags and config.workload.exact_lengths and config.workload.trace is None:  # (as run refuses it)
        raise ConfigError("--seed", "tau reads the workload's lengths, and every request is the same length, so --seed "
                          "would do nothing", "drop --seed, or give the lengths a spread (--random-range-ratio)")
    if None in (num_decodes, decode_context, chunk_context):
        return
    for name in sorted(flags):
        if is_workload_option(name) or name == "seed":
            flag = f"--{name.replace('_', '-')}"
            raise ConfigError(flag, "--num-decodes, --decode-context and --chunk-context give the whole batch, so "
                              f"the workload sizes nothing and {flag} would do nothing",
                              f"drop {flag}, or drop one of the three to read it from the workload")


# The formats a figure is written in (report.plots.FORMATS, named here so matplotlib loads after the checks).
PLOT_FORMATS = ("png", "svg")


def _plot_stem(plot: Path) -> Path:
    """``--plot``'s path stem, each file it names checked before any work: PATH.png and PATH.svg are written, so a
    .png or .svg given is the stem's own (``--plot x.png`` wrote x.png.png), and a stem that is a folder is refused
    (a figure beside it named after it is not what was meant)."""
    stem = plot.with_suffix("") if plot.suffix.lower() in tuple(f".{fmt}" for fmt in PLOT_FORMATS) else plot
    if stem.is_dir():
        raise ConfigError("--plot", f"{stem} is a folder, and --plot takes a path stem (PATH.png and PATH.svg "
                          "are written)", f"pass e.g. --plot {stem / 'tau'}")
    for fmt in PLOT_FORMATS:
        path = stem.with_name(f"{stem.name}.{fmt}")
        if path.is_dir():
            raise ConfigError("--plot", f"{path} is a folder, and --plot {stem} writes {path}",
                              "pass another path stem, or move the folder")
        check_out_file(path, "--plot")
    return stem


@app.command()
@run_options
def tau(
    ctx: typer.Context,
    config: RunConfig,
    tbt_slo: Annotated[float, typer.Option(help="TBT SLO (s) one hybrid iteration must fit.")] = 0.2,
    num_decodes: Annotated[int | None, typer.Option(help="Decodes in the batch (default: the most the replica holds for the workload).")] = None,
    decode_context: Annotated[int | None, typer.Option(help="KV tokens per decode (default: workload mean prompt + output/2).")] = None,
    chunk_context: Annotated[int | None, typer.Option(help="Tokens of the prompt before the chunk (default: half the mean prompt).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Largest budget considered.")] = 8192,
    plot: Annotated[Path | None, typer.Option(help="Write the plot to PATH.png and PATH.svg (a .png or .svg suffix given is dropped).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Largest token budget (tau) whose predicted hybrid iteration fits the TBT SLO, and the linear layers' knee."""
    if plot is not None:
        plot = _plot_stem(plot)
    from simulator.planning.tau import choose_tau, workload_mix

    if num_decodes is not None and num_decodes > max_tokens:  # each decode is a token of the budget; 1e8 never end
        raise ConfigError("--num-decodes", f"{num_decodes:,} decodes exceed the largest budget considered "
                          f"(--max-tokens {max_tokens:,})", "lower --num-decodes or raise --max-tokens")
    _check_tau_reads(ctx, config, num_decodes, decode_context, chunk_context)
    unread = tau_unread(config)
    mix = workload_mix(config, num_decodes, decode_context, chunk_context)
    _check_mix_fits(config, mix, frozenset(name for name, value in (("num_decodes", num_decodes), (
        "decode_context", decode_context), ("chunk_context", chunk_context)) if value is not None))
    result = choose_tau(config, tbt_slo, mix, max_tokens=max_tokens)
    paths = []
    if plot is not None:
        from simulator.report.plots import tau_plot

        paths = tau_plot(result, plot)
    summary = result.summary()
    if unread:
        summary["unread_config_fields"] = unread
    if json_out:
        typer.echo(json.dumps(jsonable(summary), indent=2, sort_keys=True))
        if result.tau == 0:
            raise typer.Exit(1)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    r = config.replica
    console.print(f"{r.model} on {r.num_gpus}x {r.gpu} (tp={r.tp}, pp={r.pp}); decode batch: {mix.num_decodes} decodes "
                  f"x {mix.decode_context} KV tokens, chunk after {mix.chunk_context} prompt tokens ({mix.source})")
    table = Table("tokens/iteration", "iteration (ms)", "throughput (tok/s)", "linear layers (ms)")
    marks = sorted({64, 128, 256, 512, 1024, 2048, 4096, 8192, result.tau, result.knee_tokens} & set(result.table["num_tokens"]))
    rows = result.table.set_index("num_tokens")
    for t in marks:
        row = rows.loc[t]
        note = " (tau)" if t == result.tau else (" (knee)" if t == result.knee_tokens else "")
        table.add_row(f"{t}{note}", f"{row['iteration_s'] * 1e3:.1f}", f"{row['throughput_tokens_per_s']:,.0f}",
                      f"{row['linear_layers_s'] * 1e3:.1f}")
    print_table(console, table)
    console.print(f"[bold]tau = {result.tau}[/bold] for TBT SLO {tbt_slo:g}s ({result.reason}); "
                  f"linear-layer compute/memory knee at ~{result.knee_tokens} tokens")
    for p in paths:
        console.print(f"wrote {p}")
    if unread:
        console.print(f"note: the config's {', '.join(unread)} do nothing here: tau prices one iteration from the "
                      "workload's lengths and chooses the budget (a run's config is read for its model, GPU, layout, "
                      "engine and workload)")
    if result.tau == 0:  # no budget fits the SLO: no answer, as plan's (exit 1), its why said above
        raise typer.Exit(1)


def tau_unread(config: RunConfig) -> list[str]:
    """The fields a ``--config`` sets that tau does not read (the flags are refused before the config is built, so
    what differs from the defaults here came from the file): said in its output, not refused, so that a run's saved
    config can be priced as it is."""
    from simulator.config.options import SET_BY_COMMAND, config_overrides

    unread = SET_BY_COMMAND["tau"]
    return sorted(name for name in config_overrides(config) if name in unread)


@app.command()
@default_help("num_requests", "256 a run point, 2048 a capacity point's trials")
@run_options(as_overrides=True)
def sweep(
    ctx: typer.Context,
    config: dict[str, Any],
    file: Annotated[Path | None, typer.Argument(help="Sweep file (TOML, JSON, or YAML with PyYAML): mode, \\[base], \\[grid].")] = None,
    grid: Annotated[list[str] | None, typer.Option("--grid", help="NAME=V1,V2,... (repeatable); adds to the file's grid.")] = None,
    mode: Annotated[str | None, typer.Option(help="run or capacity (default: the file's, else run).")] = None,
    out: Annotated[Path, typer.Option(help="Sweep folder: points/<key>.json and results.csv.")] = Path("sweep-out"),
    workers: Annotated[str, typer.Option(metavar=WORKERS_METAVAR, help="Local worker processes (with --ray-address local: the CPUs of the Ray instance it starts); auto: one per available CPU, at most one a point and what memory holds.")] = "1",
    ray_address: Annotated[str | None, typer.Option(help="Run on Ray: a cluster address, or 'local' to start one.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="Results table format: csv or parquet.")] = "csv",
    retry_failed: Annotated[bool, typer.Option(help="Rerun points that failed before.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Run a grid of configurations (resumable); run options given here override the file's \\[base].

    Exits 1 if any point failed (its error is listed and kept in results.csv), 2 if the sweep is refused before it runs."""
    # Paths first, before the sweep machinery (pandas) loads: a wrong path answers at once.
    if file is not None:
        check_in_file(file, "sweep", "pass a .toml sweep file")
    check_out_dir(out, "--out", replaceable=SWEEP_FILES)  # a sweep folder is resumed; another command's is refused
    from simulator.report.output import check_format

    check_format(fmt)
    from rich.console import Console

    from simulator.config.resources import auto_workers
    from simulator.planning.sweep import (
        SweepInterrupted,
        build_spec,
        load_sweep_file,
        parse_cli_grid,
        run_sweep,
    )

    data = load_sweep_file(file) if file is not None else {}
    # The flags typed (not a --config file's values, nor what a flag implies): a grid may not silently drop them.
    flags = given_run_flags(ctx)
    spec = build_spec(data, mode=mode, base_overrides=config, grid_overrides=parse_cli_grid(grid or []),
                      imply_engine=ctx.params.get("config_file") is None,
                      given_flags=flags, vllm_warmups=getattr(ctx.get_parameter_source("num_warmups"), "name", None)
                      in ("COMMANDLINE", "ENVIRONMENT"))
    # --burstiness with a closed loop waited for the grid's rate (given_overrides): no rate anywhere would run
    # every point as gamma arrivals at the default 1 qps, where `run` refuses the same flags.
    looped = "concurrency" in spec.base or "concurrency" in spec.varied
    if "burstiness" in flags and looped and "qps" not in spec.base and "qps" not in spec.varied:
        raise ConfigError("--burstiness", "shapes the gaps between arrivals at a rate, but no point has one (with "
                          "--concurrency and no --qps every user sends at once)",
                          "give --qps, or vary qps in the grid (--grid qps=1,2)")
    from simulator.config.options import PACED_ARRIVALS, check_paced_arrivals

    # So does an arrival process that shapes gaps (typed, or a sweep file's): without a rate anywhere the points ran
    # it at the default 1 qps (a file's), or dropped a typed default --arrival poisson and ran closed loops.
    if spec.mode == "run" and looped and "qps" not in spec.base and "qps" not in spec.varied:
        paced = [p.config.workload for p in spec.points if p.config.workload.concurrency is not None
                 and p.config.workload.arrival in PACED_ARRIVALS]
        if paced or "arrival" in flags:
            w = paced[0] if paced else spec.points[0].config.workload
            check_paced_arrivals(w.concurrency, w.arrival if paced else str(ctx.params.get("arrival")), None)
    from simulator.cli.options import check_sweep_trace_options, read_sweep_traces

    read_sweep_traces([p.config for p in spec.points], spec.varied, flags)  # (paths of the points: checked as built)
    check_sweep_trace_options(spec, flags)
    for note in _sweep_unit_notes(spec.points):  # said before the points run, on stderr
        typer.echo(f"note: {note}", err=True)
    num_workers = parse_workers(workers, lambda: auto_workers(
        len(spec.points), max((p.config.workload.num_requests for p in spec.points), default=1)))
    ray_cpus = None  # (a local Ray instance takes every CPU unless --workers says how many)
    if ray_address is not None and getattr(ctx.get_parameter_source("workers"), "name", None) == "COMMANDLINE":
        if ray_address != "local":  # (the cluster's CPUs say how many points run at once)
            raise ConfigError("--workers", f"sets local processes, and --ray-address {ray_address} runs the points "
                              "on that cluster's CPUs, so --workers would do nothing",
                              "drop --workers, or drop --ray-address to run local processes")
        ray_cpus = num_workers
    console = Console()
    console.print(f"sweep: {count(len(spec.points), 'point')} ({spec.mode}), varying {', '.join(spec.varied) or 'nothing'} -> {out}/")
    for note in dict.fromkeys(unmodelled_line(p.config.speculative) for p in spec.points):
        if note:  # (the points' rows show the figures, no run header: said once)
            console.print(note, markup=False, highlight=False)
    try:
        result = run_sweep(spec, out, workers=num_workers, ray_address=ray_address, fmt=fmt, progress=progress,
                           retry_failed=retry_failed, ray_cpus=ray_cpus)
    except SweepInterrupted as stop:
        left = stop.num_total - stop.num_done
        what = f"error: {WorkerDied.MESSAGE};" if stop.worker_died else f"interrupted ({stop.signal_name}):"
        app_console(stderr=True).print(
            f"{what} {stop.num_done} of {stop.num_total} points done, kept in "
            f"{stop.out}/points/ and {stop.table_path}; {left} left. To resume, run the same command again"
            f"{' with fewer --workers' if stop.worker_died else ''}: finished points are skipped.", highlight=False)
        raise typer.Exit(1 if stop.worker_died else 130) from None
    failed_before = int((result.table["status"] == "error").sum()) - result.num_failed if "status" in result.table else 0
    console.print(f"ran {count(result.num_run, 'point')} ({result.num_failed:,} failed), {result.num_skipped:,} already done"
                  + (f" ({failed_before:,} of them failed: --retry-failed runs them again)" if failed_before > 0 else "")
                  + f"; wrote {result.table_path}")
    if result.num_failed or failed_before > 0:
        for _, row in result.table[result.table["status"] != "ok"].iterrows():
            console.print(f"  point {row['point']}: {row['error']}")
        raise typer.Exit(1)  # a script must not read a sweep with failed points as done (2: refused before it ran)


@app.command()
def plot(
    what: Annotated[str, typer.Argument(help="'sweep' (a sweep folder) or 'run' (a config.json from `simulate run --out`).")],
    path: Annotated[Path, typer.Argument(help="Sweep folder, or a run folder / config.json.")],
    out: Annotated[Path | None, typer.Option(help="Folder for the figures (default: beside the input).")] = None,
    hue: Annotated[str | None, typer.Option(help="Sweep column that colours the series (default: scheduler where the "
                                                 "table has it, else the first grid key).")] = None,
    x: Annotated[str | None, typer.Option(help="Sweep column on the x axis of a run sweep (default: qps where the "
                                               "table has it, else a grid key); a capacity sweep's bars are grouped by "
                                               "the grid keys --hue leaves.")] = None,
) -> None:
    """Figures (PNG + SVG) from a sweep's results or a reproduced run."""
    # The input and the figures' folder are checked before a sweep is read or a run re-simulated.
    if what == "sweep":
        check_in_dir(path, "sweep folder", "pass the --out folder of `simulate sweep`")
        check_out_dir(out or path, "--out", existing_ok=True)
    elif what == "run":
        if path.is_dir() and not (path / "config.json").is_file():
            raise ConfigError("plot run", f"{path} has no config.json", "pass a folder written by `simulate run --out`")
        if path.is_file() and path.name == "summary.json":  # (read as a config: 'config.concurrency: unknown key')
            raise ConfigError("plot run", f"{path} is a run's summary, not its config", "pass the run folder or its "
                              "config.json")
        # A run folder is as good as its config.json (the help says so): check the file it stands for.
        check_in_file(path / "config.json" if path.is_dir() else path, "plot run", "pass a run folder or its config.json")
        for flag, value in (("--hue", hue), ("--x", x)):
            if value is not None:  # a run's figures have no series to colour nor a column to put on x
                raise ConfigError(flag, f"plot run draws one run, so {flag} would do nothing", f"drop {flag}")
        from simulator.config.options import load_config_file  # light: the config is read before plots load

        load_config_file(path / "config.json" if path.is_dir() else path, field="plot run")
        check_out_dir(out or (path if path.is_dir() else path.parent), "--out", existing_ok=True)
    else:
        raise ConfigError("plot", f"unknown plot target {what!r}", "use 'sweep' or 'run'")
    from simulator.report import plots

    console = app_console()
    if what == "sweep":
        from simulator.planning.sweep import plot_sweep, read_sweep_folder

        info, table = read_sweep_folder(path)
        # A column named but absent would be swapped for another silently (the defaults are, when absent).
        for flag, value in (("--hue", hue), ("--x", x)):
            if value is not None and value not in table:
                keys = [n for names in info["grid"] for n in names.split(",")]
                raise ConfigError(flag, f"{value!r} is not a column of {path}'s results",
                                  f"use a column of its results.csv, e.g. a grid key: {', '.join(keys) or 'none varied'}")
        if hue is not None and hue == (x or "qps") and info["mode"] == "run":
            raise ConfigError("--hue", f"{hue} is the x axis too, so every point would be a series of its own",
                              "colour by another column (a grid key), or put another on --x")
        if x is not None and info["mode"] == "capacity":
            raise ConfigError("--x", "a capacity sweep's bars are grouped by the grid keys --hue leaves, so --x "
                              "would do nothing", "drop --x, or pick the colours with --hue")
        num_ok, num_failed, num_missing = plots.sweep_counts(table)
        if num_ok < len(table):
            console.print(f"{path}: {num_ok} of {len(table)} points finished ({num_missing} not run yet, "
                          f"{num_failed} failed); plotting the {num_ok} finished")
        written = plot_sweep(path, out or path, x=x or "qps", hue=hue or "scheduler")
    else:
        notes: list[str] = []
        written = plots.plot_run(path, out or (path if path.is_dir() else path.parent), notes)
        for line in notes:
            console.print(f"warning: {line}", markup=False)
    for p in written:
        console.print(f"wrote {p}")
