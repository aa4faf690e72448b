"""``simulate disagg split`` and ``simulate disagg compare``: planning disaggregated serving.

Thin typer commands over :mod:`simulator.planning.split`: goodput per GPU (DistServe) of
every prefill/decode split of a GPU count, and, for ``compare``, aggregated vllm and
sarathi (best tau) on the same GPUs beside them, with a table, CSVs and (``compare``) a
plot. Layouts the branch and bound searched only coarsely are listed apart, as bounds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.app import app, console, fail, said_then_written
from simulator.cli.options import (
    WORKERS_METAVAR,
    default_option,
    given_run_flags,
    help_note,
    parse_ints,
    parse_workers,
    run_options,
)
from simulator.cli.tables import print_table
from simulator.config.errors import ConfigError
from simulator.config.limits import MAX_QPS, MIN_QPS
from simulator.config.run_config import RunConfig
from simulator.report.output import jsonable
from simulator.util.figures import or_skipped
from simulator.util.paths import atomic_dir, check_out_dir
from simulator.util.progress import StepProgress
from simulator.util.text import count

disagg_app = typer.Typer(help="Disaggregated prefill/decode planning: split search and comparison with chunked prefills.",
                         no_args_is_help=True)
app.add_typer(disagg_app, name="disagg")

GPUS = Annotated[int, typer.Option(help="GPUs every layout uses (exactly).")]
TTFT = Annotated[float, typer.Option(help="TTFT SLO (s).")]
TPOT = Annotated[float, typer.Option(help="TPOT SLO (s).")]
ATTAIN = Annotated[float, typer.Option(help="Share of requests that must meet both SLOs (DistServe: 0.9).")]
TPS = Annotated[str, typer.Option(help="Comma-separated TP degrees to consider.")]
QPS0 = Annotated[float, typer.Option(help="First trial's QPS of each search.")]
WORKERS = Annotated[str, typer.Option(metavar=WORKERS_METAVAR, help="Processes. One searches layouts by branch and "
                                      "bound (a layout below its family's best so far bisected coarsely, listed as "
                                      "bounds, about 2.5x faster); more search every layout in full, each in its own "
                                      "process: rates agree to the search's 5% tolerance, not bit for bit, and the "
                                      "best of layouts that close may differ. auto: one per available CPU, at most one "
                                      "a layout and what memory holds.")]
OUT = Annotated[Path | None, typer.Option(help="Folder for results.csv, trials.csv and summary.json.")]
OUT_PLOT = Annotated[Path | None, typer.Option(help="Folder for results.csv, trials.csv, summary.json and the plot "
                                                    "(comparison.png/.svg).")]
# What --out holds (an earlier one is replaced whole).
SPLIT_FILES = ("results.csv", "trials.csv", "summary.json", "comparison.png", "comparison.svg")


# What split and compare accept of a run option only in part (the rest is refused: config.options.SET_BY_COMMAND,
# planning.capacity.check_searchable); the options they never accept are left out of their --help.
HELP_NOTES = {
    "arrival": "Here poisson, gamma or fixed only: the search varies their rate.",
    "scheduler": "Here vllm only, the pools' scheduler: it lets them keep --max-num-batched-tokens.",
    "max_num_batched_tokens": "Here the pools' token budget, with --scheduler vllm only.",
}

# The most GPUs a split search lays out: it runs one goodput search per split, about --gpus of them for each
# pair of --tps (1,024 GPUs: ~10,000 searches); a typo of 1e5 spent minutes listing splits before the first.
MAX_SPLIT_GPUS = 1024


def _workers(text: str, config: RunConfig, num_layouts: int) -> int:
    """``--workers N|auto`` (auto: a process per CPU, at most one a layout, each holding one trial's requests)."""
    from simulator.config.resources import auto_workers

    return parse_workers(text, lambda: auto_workers(max(1, num_layouts), config.workload.num_requests))


def _check_search(config: RunConfig, gpus: int) -> None:
    """Refuse, before any search, what the goodput searches cannot run: arrivals without a rate to
    vary (--qps inf, --concurrency, a trace's clock: each trial would be the same, its goodput meaningless),
    and a GPU count of no layout or of more than :data:`MAX_SPLIT_GPUS`."""
    from simulator.planning.capacity import check_searchable

    if not 1 <= gpus <= MAX_SPLIT_GPUS:
        raise ConfigError("--gpus", f"must be in [1, {MAX_SPLIT_GPUS:,}], got {gpus:,}",
                          "e.g. --gpus 8 (every layout uses exactly that many)")
    check_searchable(config)


DEFAULT_TPS = "1,2,4,8"


def _tps(config: RunConfig, text: str) -> tuple[int, ...]:
    """``--tps``: each degree given must be one the model shards at (else every layout of it was dropped and the
    search blamed memory: 'no layout of 8 GPUs at --tps 3 holds llama-2-7b in memory'); of the default degrees,
    those it does not shard at are left out (TP 8 of a 28-head model)."""
    from simulator.config.specs import tp_shard_problem

    tps = parse_ints(text, "--tps")
    problems = {tp: tp_shard_problem(config.replica.model_spec, tp) for tp in tps}
    if text == DEFAULT_TPS:
        return tuple(tp for tp in tps if problems[tp] is None)
    for tp, problem in problems.items():
        if problem is not None:
            why, fix = problem
            raise ConfigError("--tps", why, f"drop {tp} from --tps" + (f"; {fix}" if fix else ""))
    return tps


def widest(dropped: list[str]) -> str:
    """Of the layouts refused (``"P 1x(tp=2) + D 1x(tp=2): why"``), the one whose workers are widest: the nearest to
    fitting, whose reason is the one to lift (TP1's weights, the first refused, are not what stops TP2 when its KV
    cache cannot hold the context)."""
    import re

    def width(line: str) -> tuple[int, int]:
        tps = [int(t) for t in re.findall(r"tp=(\d+)", line.split(":")[0])]
        return (min(tps, default=0), sum(tps))

    return max(dropped, key=width)  # (ties: the first)


def _no_layout(config: RunConfig, gpus: int, tps: list[int], split_only: bool, dropped: list[str]) -> ConfigError:
    """Why no layout of ``gpus`` GPUs is searched: too few GPUs for a worker of each kind, or none holds the model
    (``dropped``: the splits refused, with why)."""
    per_tp = config.replica.pp * config.replica.attention_dp  # a replica's GPUs per TP rank
    least = (2 if split_only else 1) * min(tps) * per_tp
    if gpus < least:
        layout = f"tp={min(tps)}" + (f" x pp={config.replica.pp}" if config.replica.pp > 1 else "") + (
            f" x dp={config.replica.attention_dp}" if config.replica.attention_dp > 1 else "")
        who = "a prefill and a decode worker" if split_only else "one replica"
        return ConfigError("--gpus", f"{who} of at least {layout} need {least} GPUs, and --gpus is {gpus}",
                           f"raise --gpus to {least} or more" + (", or allow --tps 1" if min(tps) > 1 else ""))
    first = f" (the widest: {widest(dropped)})" if dropped else ""
    if dropped and all("nvlink" in line.lower() for line in dropped):  # (refused by the link, not by memory)
        return ConfigError("--kv-link", f"no layout of {gpus} GPUs at --tps {','.join(map(str, tps))} can run its "
                           f"handoff over nvlink{first}", "give the NICs between the nodes (e.g. --kv-link "
                           "infiniband-400g-x8), or smaller --tps or --gpus")
    return ConfigError("--gpus", f"no layout of {gpus} GPUs at --tps {','.join(map(str, tps))} holds "
                       f"{config.replica.model} in memory{first}", "raise --gpus, allow larger --tps, or lower "
                       "--max-model-len")


def _refuse_unread(ctx: typer.Context, command: str, candidates: list[tuple[str, RunConfig]]) -> None:
    """Refuse a pool option given that no layout of the search reads (:func:`simulator.config.options.inert_options`):
    the command lays out the pools, so the options' own check leaves these to it (``DECIDED_BY_COMMAND``), and one
    that does nothing in every layout (``--router`` where each has one prefill worker) would show a search it did
    not make. One that some layout reads is kept (as a sweep keeps one that some point reads). The prefix-cache flags
    too (:data:`~simulator.config.options.PREFIX_CACHE_OPTIONS`): the base config judged them as a run's, and a
    layout's pools may still leave one unread (--no-prefix-caching where no prefill pool caches by default)."""
    from simulator.config.options import (
        DECIDED_BY_COMMAND,
        PREFIX_CACHE_OPTIONS,
        given_flag,
        inert_options,
        option_value,
    )

    # (--[no-]fast-forward too: the base config is not disaggregated, so its own check keeps it)
    decided = (DECIDED_BY_COMMAND[command] or frozenset()) | PREFIX_CACHE_OPTIONS | {"fast_forward"}
    typed = sorted(name for name in given_run_flags(ctx) if name in decided)
    if not typed or not candidates:  # (no layout at all: the search says why)
        return
    inert = [inert_options(config) for _, config in candidates]
    for name in typed:
        if all(name in off for off in inert):
            whys = list(dict.fromkeys(off[name][0] for off in inert))
            flag = given_flag(name, option_value(candidates[0][1], name))
            raise ConfigError(flag, f"no layout of the search reads it ({'; '.join(whys[:2])}"
                              f"{'; ...' if len(whys) > 2 else ''}), so {flag} would do nothing", f"drop {flag}")


def _say_units(ttft_slo: float, tpot_slo: float) -> None:
    """Limits far beyond any serving SLO said before the search, on stderr (planning.options.limit_notes)."""
    from simulator.planning.options import limit_notes

    for note in limit_notes({"tpot_slo": tpot_slo, "ttft_slo": ttft_slo}):
        typer.echo(f"note: {note}", err=True)


def _search(candidates, slo, qps_start: float, workers: int, no_layout: ConfigError):  # noqa: ANN001, ANN202
    from simulator.planning.split import search_all

    if not candidates:
        raise no_layout
    if not (math.isfinite(qps_start) and MIN_QPS <= qps_start <= MAX_QPS):  # (the search's first rate: --qps is not read)
        raise ConfigError("--qps-start", f"must be a rate in [{MIN_QPS:g}, {MAX_QPS:g}] requests/s, got {qps_start}",
                          "e.g. --qps-start 1")
    num_done = 0

    def on_done(result) -> None:  # noqa: ANN001
        nonlocal num_done
        num_done += 1
        steps.update(f"{result.label}: {'at least ' if result.at_least else ''}{result.rate_qps:.3g} req/s", num_done,
                     len(candidates))

    try:
        with StepProgress("goodput searches") as steps:
            return search_all(candidates, slo, qps_start, workers, on_done=on_done)
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM with --workers, whose workers are stopped)
        fail("interrupted: the searches were stopped and nothing was written", code=130)


def ranked_sections(df):  # noqa: ANN001, ANN201 - pandas frames
    """The results split in two, each best first: rows whose rate was bisected to the full
    precision (ranked), and rows bisected only coarsely below a better layout of their family
    (their rate a lower bound, the true one below the rate that failed): never ranked beside
    exact rates, since the bound may sit well under the rate."""
    df = df.sort_values("goodput_per_gpu", ascending=False, kind="stable")
    coarse = df["coarse"].astype(bool)
    return df[~coarse], df[coarse]


def _report(config: RunConfig, results, slo, out: Path | None, title: str, plot: bool) -> None:  # noqa: ANN001
    from rich.table import Table

    from simulator.planning.split import results_frame, slo_dict, trials_frame

    df = results_frame(results).sort_values("goodput_per_gpu", ascending=False, kind="stable")
    ranked, bounds = ranked_sections(df)
    table = Table("layout", "GPUs", "goodput (req/s)", "per GPU", "trials", title=f"{title} · {slo.describe()}",
                  title_justify="left")
    for row in ranked.itertuples():
        least = "at least " if row.at_least else ""  # a lower bound: no trial above it failed, or was long enough
        table.add_row(row.label, str(row.num_gpus), f"{least}{row.rate_qps:.3g}", f"{least}{row.goodput_per_gpu:.3g}",
                      str(row.num_trials))
    from simulator.config.disagg_layout import parse_link
    from simulator.engine.cluster import prepare_table  # late: the trials' own table (a --trace's rows, its source)

    link = parse_link(config.kv_link, config.replica.gpu).name  # in its canonical unit (100gbps: 100Gb/s), as run says
    requests, source, _ = prepare_table(config, None, None)
    source = source.replace(f" {config.workload.qps:g} qps", " at each trial's rate")  # (the search varies it)
    out_console = console()
    from simulator.config.disagg_layout import link_words

    # what shapes the splits' figures and is said nowhere else (results.csv holds none of it)
    extras = [f"router {config.router}" if config.router != type(config)().router else "",
              f"CPU KV tier {config.scheduler.cpu_kv_gib:g} GiB" if config.scheduler.cpu_kv_gib else "",
              f"block size {config.replica.block_size}" if config.replica.block_size is not None else ""]
    out_console.print(f"{config.replica.model} on {config.replica.gpu} · engine {config.engine} · kernels "
                      f"{config.replica.kernels} · workload {source}, "
                      f"{count(len(requests.arrival_at), 'request')} per trial · KV link {link} "
                      f"({link_words(config)})" + "".join(f" · {e}" for e in extras if e),
                      highlight=False)
    print_table(out_console, table)
    if len(bounds):
        # Bounds, not ranks: each layout missed its family's best rate, so it was bisected only coarsely.
        below = Table("layout", "GPUs", "goodput (req/s)", "per GPU", "trials",
                      title="bounds only, not ranked (each fails at its family's best rate, so it was searched "
                            "coarsely: its goodput lies between the two figures)", title_justify="left")
        for row in bounds.itertuples():
            upper = f"< {row.failed_qps:.3g}" if row.failed_qps == row.failed_qps and row.failed_qps else "< ?"
            below.add_row(row.label, str(row.num_gpus), f">= {row.rate_qps:.3g}, {upper}",
                          f">= {row.goodput_per_gpu:.3g}", str(row.num_trials))
        print_table(out_console, below)
    short = df[df["limited_by_trial_length"].astype(bool)]
    if len(short):  # as `simulate capacity` says it: the answer is set by the trials' length, not the layout
        others = f" ({count(len(short) - 1, 'other layout')} likewise)" if len(short) > 1 else ""
        out_console.print(f"{short.iloc[0]['label']}: {short.iloc[0]['reason']}{others}", highlight=False)
    best = ranked.iloc[0] if len(ranked) else df.iloc[0]
    no_answer = False
    if not best["rate_qps"]:  # said, not a 'best' at 0 req/s: no layout met the SLO, or no trial could tell
        verdict = ("no rate found: no trial was long enough to judge" if best["limited_by_trial_length"]
                   else "none meets the SLO at any rate searched")
        out_console.print(f"[bold]{verdict}[/bold] ({best['label']}: {best['reason']})", highlight=False)
        no_answer = True
    else:
        out_console.print(f"[bold]best: {best['label']} at {'least ' if best['at_least'] else ''}"
                          f"{best['goodput_per_gpu']:.3g} req/s per GPU[/bold]")
    from simulator.planning.options import CAPACITY_DEFAULT_NUM_REQUESTS

    if 2 * len(requests.arrival_at) <= CAPACITY_DEFAULT_NUM_REQUESTS and best["rate_qps"]:  # (half or fewer)
        # (Llama-3.1-70B FP8 on 4 H100s: the best layout's 1.30 req/s a GPU at 400 requests is 1.01 at 2,048)
        out_console.print(f"note: {len(requests.arrival_at):,}-request trials, where simulate capacity runs "
                          f"{CAPACITY_DEFAULT_NUM_REQUESTS:,}: a short trial's queue has less time to grow, so these "
                          f"rates lean high, and so may the margins between layouts (--num-requests "
                          f"{CAPACITY_DEFAULT_NUM_REQUESTS} for rates to compare with capacity's, about "
                          f"{CAPACITY_DEFAULT_NUM_REQUESTS / len(requests.arrival_at):.0f}x longer)",
                          highlight=False)
    if out is not None:
        written = ["results.csv", "trials.csv", "summary.json"]
        with said_then_written(out, "table"), atomic_dir(out) as folder:  # out ends up whole or as it was
            df.to_csv(folder / "results.csv", index=False)
            trials_frame(results).to_csv(folder / "trials.csv", index=False)
            summary = {"slo": slo_dict(slo), "best": best.to_dict(), "config": config.to_dict()}
            (folder / "summary.json").write_text(
                json.dumps(jsonable(summary), indent=2, sort_keys=True, default=str) + "\n")
            if plot:
                notes: list[str] = []  # (the tables are kept: a figure matplotlib cannot draw is skipped, said)
                with or_skipped("comparison.png", notes):
                    from simulator.planning.split import comparison_plot

                    written += [p.name for p in comparison_plot(df, trials_frame(results), slo,
                                                                folder / "comparison", title)]
                for note in notes:
                    out_console.print(f"note: {note}", highlight=False)
        out_console.print(f"wrote {out}/ ({', '.join(written)})")
    if no_answer:  # no layout met the SLO: no answer, as plan's (exit 1), after the tables are written
        raise typer.Exit(1)


@disagg_app.command()
@help_note(HELP_NOTES)
@default_option("num_requests", 400)
@run_options
def split(ctx: typer.Context, config: RunConfig, gpus: GPUS = 8, ttft_slo: TTFT = 2.0, tpot_slo: TPOT = 0.1, attainment: ATTAIN = 0.9,
          tps: TPS = DEFAULT_TPS, qps_start: QPS0 = 1.0, workers: WORKERS = "1", out: OUT = None) -> None:
    """Goodput per GPU of every prefill/decode split of --gpus GPUs (DistServe's measure); the best first."""
    if out is not None:  # checked before any search (and import)
        check_out_dir(out, "--out", replaceable=SPLIT_FILES)
    from simulator.planning.split import GoodputSLO, split_candidates

    slo = GoodputSLO(ttft_slo, tpot_slo, attainment)
    _say_units(ttft_slo, tpot_slo)
    _check_search(config, gpus)
    tp_list = _tps(config, tps)
    dropped: list[str] = []
    candidates = [("disagg", c) for c in split_candidates(config, gpus, tp_list, dropped)]
    _refuse_unread(ctx, "split", candidates)
    results = _search(candidates, slo, qps_start, _workers(workers, config, len(candidates)),
                      _no_layout(config, gpus, tp_list, True, dropped))
    _report(config, results, slo, out, f"prefill/decode splits of {gpus} GPUs", plot=False)


@disagg_app.command()
@help_note(HELP_NOTES)
@default_option("num_requests", 400)
@run_options
def compare(ctx: typer.Context, config: RunConfig, gpus: GPUS = 8, ttft_slo: TTFT = 2.0, tpot_slo: TPOT = 0.1, attainment: ATTAIN = 0.9,
            tps: TPS = DEFAULT_TPS, taus: Annotated[str, typer.Option(help="Sarathi token budgets to try.")] = "256,512,1024,2048",
            qps_start: QPS0 = 1.0, workers: WORKERS = "1", out: OUT_PLOT = None) -> None:
    """Aggregated vllm and sarathi (best tau) beside the disaggregated splits on the same GPUs, SLOs and workload."""
    if out is not None:  # checked before any search (and import)
        check_out_dir(out, "--out", replaceable=SPLIT_FILES)
    from simulator.planning.split import GoodputSLO, aggregated_candidates, split_candidates

    slo = GoodputSLO(ttft_slo, tpot_slo, attainment)
    _say_units(ttft_slo, tpot_slo)
    _check_search(config, gpus)
    tp_list = _tps(config, tps)
    candidates = aggregated_candidates(config, gpus, tp_list, parse_ints(taus, "--taus"))
    dropped: list[str] = []
    splits = split_candidates(config, gpus, tp_list, dropped)
    if not splits and candidates:  # said, not silent: the comparison has one side
        console().print(f"note: no disaggregated layout of {gpus} GPUs fits, so none is compared"
                            + (f" (the widest: {widest(dropped)})" if dropped else ""), highlight=False)
    candidates += [("disagg", c) for c in splits]
    _refuse_unread(ctx, "compare", candidates)
    results = _search(candidates, slo, qps_start, _workers(workers, config, len(candidates)),
                      _no_layout(config, gpus, tp_list, False, dropped))
    _report(config, results, slo, out, f"aggregated vs disaggregated on {gpus} GPUs", plot=True)
