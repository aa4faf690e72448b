"""``simulate disagg split`` and ``simulate disagg compare``: planning disaggregated serving.

Thin typer commands over :mod:`simulator.planning.split`: goodput per GPU (DistServe) of
every prefill/decode split of a GPU count, and, for ``compare``, aggregated vllm and
sarathi (best tau) on the same GPUs beside them, with a table, CSVs and a plot.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from simulator.cli.app import app, console, fail
from simulator.cli.capacity import default_option
from simulator.cli.options import run_options
from simulator.cli.tables import print_table
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.report.output import jsonable
from simulator.util.progress import StepProgress

disagg_app = typer.Typer(help="Disaggregated prefill/decode planning: split search and comparison with chunked prefills.",
                         no_args_is_help=True)
app.add_typer(disagg_app, name="disagg")

GPUS = Annotated[int, typer.Option(help="GPUs every layout uses (exactly).")]
TTFT = Annotated[float, typer.Option(help="TTFT SLO (s).")]
TPOT = Annotated[float, typer.Option(help="TPOT SLO (s).")]
ATTAIN = Annotated[float, typer.Option(help="Share of requests that must meet both SLOs (DistServe: 0.9).")]
TPS = Annotated[str, typer.Option(help="Comma-separated TP degrees to consider.")]
QPS0 = Annotated[float, typer.Option(help="First trial's QPS of each search.")]
WORKERS = Annotated[int, typer.Option(help="Processes (results do not depend on it).")]
OUT = Annotated[Path | None, typer.Option(help="Folder for results.csv, trials.csv, summary.json and the plot.")]


def _ints(text: str, field: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ConfigError(field, f"expected comma-separated integers, got {text!r}", "e.g. 1,2,4,8") from None
    if not values or min(values) <= 0:
        raise ConfigError(field, f"expected positive integers, got {text!r}", "e.g. 1,2,4,8")
    return values


def _search(candidates, slo, qps_start: float, workers: int):  # noqa: ANN001, ANN202
    from simulator.planning.split import search_all

    if not candidates:
        raise ConfigError("gpus", "no layout of that many GPUs fits the model", "raise --gpus or allow larger --tps")
    num_done = 0

    def on_done(result) -> None:  # noqa: ANN001
        nonlocal num_done
        num_done += 1
        steps.update(f"{result.label}: {result.rate_qps:.3g} req/s", num_done, len(candidates))

    try:
        with StepProgress("goodput searches") as steps:
            return search_all(candidates, slo, qps_start, workers, on_done=on_done)
    except KeyboardInterrupt:  # Ctrl-C (or SIGTERM with --workers, whose workers are stopped)
        fail("interrupted: the searches were stopped and nothing was written", code=130)


def _report(config: RunConfig, results, slo, out: Path | None, title: str, plot: bool) -> None:  # noqa: ANN001
    from rich.table import Table

    from simulator.planning.split import results_frame, slo_dict, trials_frame

    df = results_frame(results).sort_values("goodput_per_gpu", ascending=False, kind="stable")
    table = Table("layout", "GPUs", "goodput (req/s)", "per GPU", "trials", title=f"{title} · {slo.describe()}",
                  title_justify="left")
    for row in df.itertuples():
        table.add_row(row.label, str(row.num_gpus), f"{row.rate_qps:.3g}", f"{row.goodput_per_gpu:.3g}", str(row.num_trials))
    out_console = console()
    out_console.print(f"{config.replica.model} on {config.replica.gpu} · workload {config.workload.name}, "
                      f"{config.workload.num_requests} requests per trial · KV link {config.kv_link}")
    print_table(out_console, table)
    best = df.iloc[0]
    out_console.print(f"[bold]best: {best['label']} at {best['goodput_per_gpu']:.3g} req/s per GPU[/bold]")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        df.to_csv(out / "results.csv", index=False)
        trials_frame(results).to_csv(out / "trials.csv", index=False)
        summary = {"slo": slo_dict(slo), "best": best.to_dict(), "config": config.to_dict()}
        (out / "summary.json").write_text(json.dumps(jsonable(summary), indent=2, sort_keys=True, default=str) + "\n")
        written = ["results.csv", "trials.csv", "summary.json"]
        if plot:
            from simulator.planning.split import comparison_plot

            written += [p.name for p in comparison_plot(df, trials_frame(results), slo, out / "comparison", title)]
        out_console.print(f"wrote {out}/ ({', '.join(written)})")


@disagg_app.command()
@default_option("num_requests", 400)
@run_options
def split(config: RunConfig, gpus: GPUS = 8, ttft_slo: TTFT = 2.0, tpot_slo: TPOT = 0.1, attainment: ATTAIN = 0.9,
          tps: TPS = "1,2,4,8", qps_start: QPS0 = 1.0, workers: WORKERS = 1, out: OUT = None) -> None:
    """Goodput per GPU of every prefill/decode split of --gpus GPUs (DistServe's measure); the best first."""
    from simulator.planning.split import GoodputSLO, split_candidates

    slo = GoodputSLO(ttft_slo, tpot_slo, attainment)
    candidates = [("disagg", c) for c in split_candidates(config, gpus, _ints(tps, "tps"))]
    results = _search(candidates, slo, qps_start, workers)
    _report(config, results, slo, out, f"prefill/decode splits of {gpus} GPUs", plot=False)


@disagg_app.command()
@default_option("num_requests", 400)
@run_options
def compare(config: RunConfig, gpus: GPUS = 8, ttft_slo: TTFT = 2.0, tpot_slo: TPOT = 0.1, attainment: ATTAIN = 0.9,
            tps: TPS = "1,2,4,8", taus: Annotated[str, typer.Option(help="Sarathi token budgets to try.")] = "256,512,1024,2048",
            qps_start: QPS0 = 1.0, workers: WORKERS = 1, out: OUT = None) -> None:
    """Aggregated vllm and sarathi (best tau) beside the disaggregated splits on the same GPUs, SLOs and workload."""
    from simulator.planning.split import GoodputSLO, aggregated_candidates, split_candidates

    slo = GoodputSLO(ttft_slo, tpot_slo, attainment)
    tp_list = _ints(tps, "tps")
    candidates = aggregated_candidates(config, gpus, tp_list, _ints(taus, "taus"))
    candidates += [("disagg", c) for c in split_candidates(config, gpus, tp_list)]
    results = _search(candidates, slo, qps_start, workers)
    _report(config, results, slo, out, f"aggregated vs disaggregated on {gpus} GPUs", plot=True)
