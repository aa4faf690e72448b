"""``simulate run``: one simulation, a summary table, and tidy output files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from simulator.cli.app import app, console
from simulator.cli.options import run_options
from simulator.config import RunConfig
from simulator.output import FORMATS, jsonable

if TYPE_CHECKING:  # the engine (numpy, SimPy) and rich load when a run starts, not for --help
    from rich.console import Console

    from simulator.engine import RunResult


def run_simulation(config: RunConfig, out: Path | None = None, fmt: str = "parquet", progress: bool = False,
                   ttft_slo_s: float = 2.0, tbt_slo_s: float = 0.2) -> tuple[RunResult, dict[str, Any]]:
    """Simulate ``config``; write outputs to ``out`` if given; return the result and summary."""
    from simulator.engine import simulate
    from simulator.metrics import request_columns, summarize

    result = simulate(config, progress=progress)
    disagg = "disagg" in result.extra  # disaggregated prefill/decode: pool, handoff and link metrics
    if out is not None or disagg:  # pandas only when tables are written or pool metrics need them
        from simulator.metrics import request_frame

        requests = request_frame(result)
        summary = summarize(result, requests, ttft_slo_s=ttft_slo_s, tbt_slo_s=tbt_slo_s)
        if disagg:
            from simulator.disagg_metrics import disagg_summary, handoff_frame

            summary["disagg"] = disagg_summary(result, requests, ttft_slo_s, tbt_slo_s)
        if out is not None:
            from simulator.output import write_run, write_table

            write_run(result, out, fmt, summary, requests)
            if disagg:
                write_table(handoff_frame(result, requests), Path(out) / "handoff", fmt)
    else:
        summary = summarize(result, request_columns(result), ttft_slo_s=ttft_slo_s, tbt_slo_s=tbt_slo_s)
    return result, summary


def _ms(value: float) -> str:
    return "-" if value != value else f"{value * 1e3:,.1f}"  # NaN check without math


def print_summary(config: RunConfig, summary: dict[str, Any], wall_s: float, console: Console) -> None:
    from rich.table import Table

    r, s = config.replica, config.scheduler
    title = f"{r.model} on {r.num_gpus}x {r.gpu} (tp={r.tp}, pp={r.pp}) x{config.num_replicas} replica(s) · {s.name}"
    if config.is_disaggregated:
        title = f"{r.model} disaggregated: prefill {config.prefill_pool} + decode {config.decode_pool} over {config.kv_link}"
    table = Table("metric (ms)", "p50", "p90", "p99", "max", title=title, title_justify="left")
    for key, label in (("ttft_s", "TTFT"), ("tbt_s", "TBT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"),
                       ("sched_delay_s", "scheduling delay")):
        table.add_row(label, *(_ms(summary[f"{key}_{q}"]) for q in ("p50", "p90", "p99", "max")))
    console.print(f"workload: {summary['workload']}")
    console.print(table)
    console.print(
        f"requests: {summary['num_finished']} finished, {summary['num_rejected']} rejected, "
        f"{summary['num_preemptions']} preemptions · throughput {summary['throughput_rps']:.2f} req/s, "
        f"{summary['output_tokens_per_s']:,.0f} output tok/s · goodput {summary['goodput_fraction']:.1%} "
        f"(TTFT<={summary['ttft_slo_s']}s, TBT<={summary['tbt_slo_s']}s) · KV cache {summary['kv_cache_tokens']:,} "
        f"tokens · {summary['num_iterations']:,} iterations in {wall_s:.2f}s wall")
    if "disagg" in summary:
        d = summary["disagg"]
        console.print(
            f"disaggregated {d['layout']} ({d['num_gpus']} GPUs): TTFT = queue p50 {_ms(d['queue_s_p50'])} + prefill "
            f"p50 {_ms(d['prefill_s_p50'])} ms; handoff p50/p99: backpressure {_ms(d['backpressure_s_p50'])}/"
            f"{_ms(d['backpressure_s_p99'])}, link queue {_ms(d['link_queue_s_p50'])}/{_ms(d['link_queue_s_p99'])}, "
            f"transfer {_ms(d['transfer_s_p50'])}/{_ms(d['transfer_s_p99'])} ms; decode TBT p99 "
            f"{_ms(d['decode_tbt_s_p99'])} max {_ms(d['decode_tbt_s_max'])} ms · {d['num_transfers']} transfers, "
            f"{d['transfer_bytes'] / 1e9:.2f} GB, link busy {d['link_utilization']:.1%} · busy prefill "
            f"{d['prefill_busy_fraction']:.0%} decode {d['decode_busy_fraction']:.0%} · KV occupancy mean prefill "
            f"{d.get('prefill_kv_occupancy_mean', float('nan')):.0%} decode {d.get('decode_kv_occupancy_mean', float('nan')):.0%}"
            f" · SLO attainment {d['slo_attainment']:.1%} (TTFT<={d['ttft_slo_s']}s, TPOT<={d['tpot_slo_s']}s)")
    if "stage_busy_fraction" in summary:
        for replica_id, busy in enumerate(summary["stage_busy_fraction"]):
            stages = ", ".join(f"{b:.0%}" for b in busy)
            console.print(f"pipeline replica {replica_id}: stage busy {stages}; "
                          f"bubble fraction sum {sum(1 - b for b in busy):.2f}")


@app.command()
@run_options
def run(
    config: RunConfig,
    out: Annotated[Path | None, typer.Option(help="Folder for requests/iterations tables, summary.json, config.json.")] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"Table format: {', '.join(FORMATS)}.")] = "parquet",
    ttft_slo: Annotated[float, typer.Option(help="TTFT SLO (s) for goodput.")] = 2.0,
    tbt_slo: Annotated[float, typer.Option(help="TBT SLO (s) for goodput.")] = 0.2,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON instead of a table.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Simulate one configuration and print TTFT/TBT/TPOT quantiles (defaults: Llama-2-7B, A100-80GB, sarathi, ShareGPT)."""
    result, summary = run_simulation(config, out, fmt, progress=progress and not json_out,
                                     ttft_slo_s=ttft_slo, tbt_slo_s=tbt_slo)
    if json_out:
        typer.echo(json.dumps(jsonable(summary), indent=2, sort_keys=True))
        return
    out_console = console()
    print_summary(config, summary, result.wall_s, out_console)
    if out is not None:
        out_console.print(f"wrote {out}/ (requests, iterations, summary.json, config.json)")
