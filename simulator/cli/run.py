"""``simulate run``: one simulation, a summary table, and tidy output files."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from simulator.cli.app import app, console, fail
from simulator.cli.options import WORKERS_METAVAR, parse_workers, run_options
from simulator.cli.tables import print_table
from simulator.config.errors import ConfigError
from simulator.config.resources import auto_workers, check_run_fits
from simulator.config.run_config import DEFAULT_MEMORY_FRACTION, MEMORY_BASIS_WORDS, RunConfig, SchedulerConfig
from simulator.config.schedulers import SCHEDULERS as SCHEDULER_ENTRIES
from simulator.config.speculative import unmodelled_line
from simulator.report.output import FORMATS, check_format, check_out_dir, jsonable, write_run
from simulator.util.progress import RunProgress
from simulator.util.text import count

if TYPE_CHECKING:  # the engine (numpy, SimPy) loads when a run starts, rich when a table is printed
    from rich.console import Console

    from simulator.engine.cluster import RunResult


# The SLOs of the summary's SLO attainment (goodput_fraction) where the run names none: TTFT and every gap.
TTFT_SLO_S = 2.0
TBT_SLO_S = 0.2


def simulate(config: RunConfig, **kwargs: Any) -> RunResult:
    """:func:`simulator.engine.cluster.simulate`, imported on the first run (not for ``--help``)."""
    from simulator.simulation import simulate as engine_simulate

    return engine_simulate(config, **kwargs)


def run_auto_workers(config: RunConfig) -> int:
    """``--workers auto`` for a run: one process per available CPU, at most one a replica, where
    the run takes worker processes; else 1, where :func:`simulator.simulation.worker_problem` names why
    not (replicas that do not run apart, a closed loop, a trace's block hashes): the rule that refuses
    ``--workers N`` there, so auto never asks for what the run refuses."""
    from simulator.simulation import worker_problem

    if worker_problem(config) is not None:
        return 1
    return auto_workers(config.num_ranks, -(-config.workload.num_requests // config.num_ranks))


def run_simulation(config: RunConfig, out: Path | None = None, fmt: str = "parquet", progress: bool = False,
                   ttft_slo_s: float = TTFT_SLO_S, tbt_slo_s: float = TBT_SLO_S) -> tuple[RunResult, dict[str, Any]]:
    """Simulate ``config``; write outputs to ``out`` if given; return the result and summary."""
    result, summary, requests = _simulate_and_summarize(config, progress, ttft_slo_s, tbt_slo_s)
    if out is not None:
        _write(result, out, fmt, summary, requests)
    return result, summary


def _write(result: RunResult, out: Path, fmt: str, summary: dict[str, Any], requests: Any,
           report: dict[str, Any] | None = None) -> list[str]:
    """Write the run into a folder beside ``out`` and rename it into place: ``out`` ends up a
    complete run or as it was (an error or Ctrl-C while writing removes the partial folder).
    The names of what it wrote, in order."""
    from simulator.util.paths import atomic_dir

    with atomic_dir(out) as folder:
        paths = write_run(result, folder, fmt, summary, requests, report)
        if result.disagg is not None:  # disaggregated prefill/decode: one row per KV handoff
            from simulator.report.disagg_metrics import handoff_frame
            from simulator.report.output import write_table

            paths["handoff"] = write_table(handoff_frame(result, requests), folder / "handoff", fmt)
    order = ("requests", "iterations", "stages", "handoff", "summary", "config")
    return [paths[k].name if k in ("summary", "config") else k for k in order if k in paths]


def _simulate_and_summarize(config: RunConfig, progress: bool | RunProgress, ttft_slo_s: float,
                            tbt_slo_s: float, workers: int = 1,
                            token_times: bool = False) -> tuple[RunResult, dict[str, Any], Any]:
    """The run, its summary, and its requests: numpy columns (tables are written from them
    in chunks), or a pandas frame where the disaggregated pools' metrics need one."""
    from simulator.report.metrics import request_columns, request_frame, summarize

    result = simulate(config, progress=progress, workers=workers, token_times=token_times)
    if isinstance(progress, RunProgress):
        progress.phase(f"computing metrics of {count(len(result.requests), 'request')}", len(result.requests))
    requests = request_frame(result) if result.disagg is not None else request_columns(result)
    summary = summarize(result, requests, ttft_slo_s=ttft_slo_s, tbt_slo_s=tbt_slo_s)
    if "speculative" in result.extra:  # counters and per-token / per-step ITL (simulator.engine.speculative)
        from simulator.report.benchmark import measured_itl_views

        # the ITL views over the measured requests, as every other figure (the engine's logs hold the warm-up's)
        summary["speculative"] = {**result.extra["speculative"],
                                  **measured_itl_views(result)}
        if config.speculative is not None and config.speculative.unmodelled_keys:  # (given, read, changing nothing)
            from simulator.config.speculative import UNMODELLED_KEYS

            summary["speculative"]["not_modelled"] = {k: UNMODELLED_KEYS[k] for k in config.speculative.unmodelled_keys}
    if result.disagg is not None:  # disaggregated prefill/decode: pool, handoff and link metrics
        from simulator.report.disagg_metrics import disagg_summary

        summary["disagg"] = disagg_summary(result, requests)
    return result, summary, requests


def _ms(value: float) -> str:
    return "-" if value != value else f"{value * 1e3:,.1f}"  # NaN check without math


def _pct(value: float, digits: int = 1) -> str:
    """A share as a percentage; '-' where there is nothing to share (no prompt admitted: NaN)."""
    return "-" if value != value else f"{value:.{digits}%}"


def _dtype(r: Any, engine: str) -> str:
    """The header's dtype: "weight-only" where the GPU lacks its tensor cores; mxfp4 with the kernel pricing it."""
    from simulator.config.precision import describe_format
    from simulator.costmodel.calibration import roofline_backend

    return describe_format(r.dtype, roofline_backend(r.kernels, engine), r.gpu_spec)


def _experts_only(r: Any) -> str:
    """Said in the title: a 4-bit MoE checkpoint's attention and router are 16-bit (ReplicaConfig.experts_only_quantized),
    as what a checkpoint keeps so (ReplicaConfig.attention_16bit, mlp_16bit_layers: Meta's FP8 Llama-3.1-405B)."""
    kept = ["attention"] if r.attention_16bit else []
    if r.mlp_16bit_layers:
        kept.append(f"layer {' and '.join(map(str, r.mlp_16bit_layers))}'s MLPs")
    if r.shared_experts_16bit:
        kept.append("shared experts")
    group = r.model_spec.int4_group_size if r.runs_checkpoint_format else 0
    scales = f", a scale every {group} weights" if group else ""
    if r.experts_only_quantized:
        return f" (experts{scales}; {', '.join(['attention and router', *kept[1:]])} 16-bit)"
    return f" (the checkpoint's {' and '.join(kept)} 16-bit)" if kept else ""


def _intake(s: SchedulerConfig) -> str:
    """How the policy takes new prompts, where a knob changes it (said in the run's title)."""
    out = ""
    if s.recv_interval != 1:
        out += f", requests taken every {s.recv_interval} iterations"
    if s.dp_balance_timeout_iters:
        out += f", attention-DP balance {s.dp_balance_timeout_iters}/{s.dp_balance_batching_wait_iters} iterations"
    if s.batch_wait_timeout_iters:
        out += (f", batch waiting <= {s.batch_wait_timeout_iters} iterations or "
                f"{s.batch_wait_max_tokens_ratio:g} of the budget")
    return out


def _wait_words(config: RunConfig) -> str:
    """What the overload verdict judged (report.metrics.queue_delays): the scheduling delay, and in a disaggregated
    run also each request's waits after its prompt (the table's scheduling delay is the first wait alone)."""
    if config.is_disaggregated:
        return ("the queue wait (scheduling delay plus the waits after the prompt for decode blocks, the KV link and a "
                "decode seat)")
    return "scheduling delay"


def _context_reserve_note(config: RunConfig, summary: dict[str, Any]) -> str | None:
    """Where the policy reserves the whole context for each request (Orca, FasterTransformer) and the KV cache then
    holds fewer requests than its sequence cap: said, with the flag that sets the reserve (Llama-3.1-8B on an H100
    at its 131,072-token context holds 2, and a run at 2 req/s queued for a minute with no word why)."""
    r, s = config.replica, config.scheduler
    if config.is_disaggregated or not SCHEDULER_ENTRIES[s.name].reserves_context:
        return None
    max_len = r.effective_max_model_len
    held = summary["kv_cache_tokens"] // max_len
    cap = s.seq_limit(r.gpu_spec, summary["kv_cache_tokens"], max_len)
    if held >= cap:
        return None
    if r.max_model_len is not None:  # the user's reserve: said, no fix offered
        return (f"note: {s.name} reserves --max-model-len ({max_len:,} tokens) for each request at admission, so the KV "
                f"cache holds {held:,} at once (its cap {cap:,})")
    return (f"note: {s.name} reserves the whole context ({max_len:,} tokens) for each request at admission, so the KV "
            f"cache holds {held:,} at once (its cap {cap:,}); --max-model-len sets the reserve (e.g. the workload's "
            "longest request)")


def header_lines(config: RunConfig, summary: dict[str, Any]) -> tuple[str, str]:
    """A run's two header lines, every view's: what ran (:func:`run_title`), then its load and pricing."""
    title = run_title(config, summary)
    pricing = _pricing_note(config)  # (loading a kernel table may print its notes: before the title, as ever)
    return title, f"workload: {summary['workload']}{_loop_note(config)} · {pricing}"


def print_summary(config: RunConfig, summary: dict[str, Any], wall_s: float, console: Console) -> None:
    """A run's answer on the terminal: what ran (title), its load and pricing, the latency table,
    the totals, then a line for each feature the run used."""
    from rich.table import Table

    for line in header_lines(config, summary):
        console.print(line, highlight=False)
    table = Table("metric (ms)", "p50", "p90", "p99", "max")
    for key, label in (("ttft_s", "TTFT"), ("tbt_s", "TBT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"),
                       ("sched_delay_s", "scheduling delay")):
        table.add_row(label, *(_ms(summary[f"{key}_{q}"]) for q in ("p50", "p90", "p99", "max")))
    print_table(console, table)
    window = summary.get("window_tokens_per_seq", 0)
    held = [f"its sliding layers' window {window:,}"] if window else []
    if summary.get("state_tokens_per_seq", 0) > window:
        held.insert(0, f"its recurrent state {summary['state_tokens_per_seq'] - window:,}")
    state = f" (beside its tokens, a sequence holds {' and '.join(held)})" if held else ""
    if summary.get("kv_cache_tokens_by_memory", math.inf) < summary["kv_cache_tokens"]:  # said, not silent
        state += (f" (set by --num-gpu-blocks: more than the {summary['kv_cache_tokens_by_memory']:,} the memory plan "
                  f"gives at --gpu-memory-utilization {config.scheduler.memory_fraction(config.replica)[0]:g})")
    dp = config.replica.attention_dp
    # Each attention-DP rank has a cache of its own (vLLM and SGLang size each so): the figure is one rank's.
    per_rank = f" per attention-DP rank (x{dp})" if dp > 1 and not config.is_disaggregated else ""
    # The figure is the whole pool in full-attention tokens; vLLM logs it over its layer groups (gpt-oss: half).
    kind = ""
    if "kv_cache_tokens_vllm" in summary:
        kind = (f" of full attention, the whole pool (vLLM's \"GPU KV cache size\" {summary['kv_cache_tokens_vllm']:,}: "
                "the pool over its layer groups)")
    console.print(
        f"requests: {summary['num_finished']:,} finished, {summary['num_rejected']:,} rejected, "
        f"{count(summary['num_preemptions'], 'preemption')} · throughput {summary['throughput_rps']:.2f} req/s, "
        # Named by its rule: as "goodput" it read as one figure with --goodput's vLLM request goodput (its bounds met,
        # per second) on the same screen, and with capacity's and plan's DistServe goodput (TTFT and TPOT).
        f"{summary['output_tokens_per_s']:,.0f} output tok/s · SLO attainment (TTFT<={summary['ttft_slo_s']}s and every "
        f"gap<={summary['tbt_slo_s']}s) {summary['goodput_fraction']:.1%} · KV cache {summary['kv_cache_tokens']:,} "
        f"tokens{kind}{per_rank}{state} · {summary['num_iterations']:,} iterations in {wall_s:.2f}s wall")
    if "prefix_caching" in summary:
        pc = summary["prefix_caching"]
        where = f" ({pc['pool']} pool)" if "pool" in pc else ""
        console.print(f"prefix cache{where}: {_pct(pc['hit_rate'])} of prompt tokens found cached at admission · "
                      f"{pc['prefill_tokens_saved']:,} of {pc['prompt_tokens']:,} prefill tokens saved"
                      + (f" ({_pct(pc['gpu_hit_rate'])} in GPU memory, {_pct(pc['cpu_hit_rate'])} loaded from the CPU tier)"
                         if "cpu_hit_rate" in pc else ""), highlight=False)
    if "disagg" in summary:
        console.print(_disagg_line(summary["disagg"]))
    if "speculative" in summary:
        console.print(_speculative_line(config, summary["speculative"]), highlight=False)
    if (note := _context_reserve_note(config, summary)) is not None:
        console.print(note, highlight=False)
    if summary.get("rejected_by_reason"):
        console.print("rejected: " + "; ".join(f"{n:,} {kind}" for kind, n in summary["rejected_by_reason"].items()))
    if summary.get("overloaded"):
        closed = config.workload.concurrency is not None and config.workload.arrival == "burst"
        console.print(
            f"[bold]load exceeds capacity:[/bold] {_wait_words(config)} rose from "
            f"{summary['sched_delay_s_p50_first_quarter']:.3g} s "
            f"(P50, first quarter of arrivals) to {summary['sched_delay_s_p50_last_quarter']:.3g} s (last quarter) and "
            f"{count(summary['num_waiting_at_last_arrival'], 'request')} "
            f"{'was' if summary['num_waiting_at_last_arrival'] == 1 else 'were'} still queued at the last arrival, so "
            + ("the engine cannot take its users at once (a closed loop's queue holds at most its users, who wait "
               "their turn); " if closed else "latencies grow with the run's length; ") + _overload_fix(config))
    if "stage_busy_fraction" in summary:
        for replica_id, busy in enumerate(summary["stage_busy_fraction"]):
            stages = ", ".join(f"{b:.0%}" for b in busy)
            console.print(f"pipeline replica {replica_id}: stage busy {stages}; "
                          f"bubble fraction sum {sum(1 - b for b in busy):.2f}")


def kv_users_note(config: RunConfig, summary: dict[str, Any], requests: Any) -> str | None:  # noqa: ANN401
    """Said where a closed loop's users outnumber the contexts one engine's KV cache holds (their requests at full
    length): the others wait for blocks or are preempted, which the TTFT shows and nothing else said (DeepSeek-R1 FP8
    on 8 B200s, 256 users of 8K/1K: TTFT p50 46 s, 44 preemptions, the cache holding ~160 users). One replica of
    one rank only (a router spreads several's users unevenly); None otherwise."""
    w, m = config.workload, config.replica.model_spec
    tokens = summary.get("kv_cache_tokens")
    if (w.concurrency is None or config.is_disaggregated or config.num_ranks != 1 or not tokens or requests is None
            or "num_prompt_tokens" not in requests or m.is_hybrid or m.num_sliding_layers):
        return None  # (a hybrid's state, a window's KV: a request does not hold its context's tokens; not said)
    import numpy as np  # (late: the CLI starts without it)

    context = float(np.mean(np.asarray(requests["num_prompt_tokens"]) + np.asarray(requests["num_output_tokens"])))
    if not context or tokens / context >= w.concurrency:
        return None
    r = config.replica
    fix = ("more --num-gpu-blocks or fewer users" if r.num_gpu_blocks is not None else
           "more GPUs or fewer users" if r.kv_cache_bytes < r.dtype_bytes or r.kv_cache_dtype == "fp8" else
           "--kv-cache-dtype fp8, more GPUs or fewer users")
    return (f"note: the KV cache holds {tokens:,} tokens, about {tokens / context:,.0f} of the {w.concurrency:,} "
            f"users' contexts (a request's {context:,.0f} tokens at its end): the others wait for blocks or are "
            f"preempted ({summary.get('num_preemptions', 0):,} preemptions), which their TTFT shows ({fix} hold "
            "them all)")


def extrapolation_warning(summary: dict[str, Any]) -> str | None:
    """The line saying the cost model priced lookups past what it measured (a learned model's or kernel
    tables' linear continuation): a documented guess, never a silent one. None where there were none."""
    num = summary.get("cost_model_extrapolations", 0)
    if not num:
        return None
    by_op = summary.get("cost_model_extrapolations_by_op") or {}
    ops = f" ({', '.join(f'{op} {n:,}' for op, n in by_op.items())})" if by_op else ""
    return f"warning: {num:,} cost-model lookup(s) outside the profiled range were extrapolated{ops}"


def _overload_fix(config: RunConfig) -> str:
    """What lowers an overloaded run's load: a replayed trace has no --qps, and capacity searches a rate."""
    if config.workload.arrival == "trace":
        return ("replay the trace slower with --time-scale below 1 (0.5 halves its rate), or serve it with more "
                "--replicas")
    if config.workload.concurrency is not None and config.workload.arrival == "burst":  # (a closed loop has no rate)
        return "lower --concurrency or find the most users it serves with `simulate capacity --users` (same options)"
    return "lower --qps or find the sustainable rate with `simulate capacity` (same options)"


def pool_schedulers(config: RunConfig, layout: Any) -> str:  # noqa: ANN401 - a DisaggLayout
    """Which policy each pool runs (a pool's sched=, else disagg_layout.default_pool_scheduler's), said: the pools ran
    vLLM V0's whole prompts beside a run whose --scheduler (vllm-v1 by default) was never theirs, and nothing said so;
    V0 is said as such where a pool runs it under another --scheduler (a research policy's pools)."""
    names = {"prefill": layout.prefill_scheduler.name, "decode": layout.decode_scheduler.name}
    said = (f"pools run {names['prefill']}" if names["prefill"] == names["decode"] else
            f"prefill pool runs {names['prefill']}, decode pool {names['decode']}")
    mixed = layout.mixed_scheduler.name if layout.mixed_scheduler is not None else None
    if "vllm" in (*names.values(), mixed) and config.scheduler.name != "vllm":
        said += " (vLLM V0: whole prompts, no token budget; a pool's sched=vllm-v1 runs V1's chunked prefill)"
    if mixed is not None:  # (the mixed pool runs --scheduler, or its own sched=)
        said += f"; mixed pool {mixed}"
    return said


def engine_words(config: RunConfig) -> str:
    """``engine NAME``, with the least a step carrying prompt tokens takes where the engine has a prefill floor
    (SGLang's and TensorRT-LLM's fitted presets): on a short prompt it is the whole step, and the decodes batched or
    waiting behind it wait as long, so a TBT or TPOT limit meets it first."""
    from simulator.costmodel.engine_model import load_engine

    engine = load_engine(config.engine)
    per_layer = getattr(engine, "prefill_floor_per_layer_s", 0.0)
    if not per_layer:
        return f"engine {config.engine}"
    layers = config.replica.model_spec.num_layers
    above = getattr(engine, "prefill_floor_above_tokens", 0)
    which = f"more than {above:,} prompt tokens" if above else "prompt tokens"
    return (f"engine {config.engine} (a step carrying {which} takes >= {per_layer * layers * 1e3:.0f} ms: its prefill "
            f"floor, {per_layer * 1e3:.2f} ms x {layers} layers)")


def _router(config: RunConfig) -> str:
    """The title's router, where it has a choice to make (two runs that differ in it alone must not read the same):
    among the replicas (their attention-DP ranks), or in a disaggregated run among the prefill workers."""
    if config.is_disaggregated:
        from simulator.config.disagg_layout import layout_of

        layout = layout_of(config)
        workers = layout.num_prefill_workers
        return f" · prefill workers by {config.router}" if workers > 1 else ""
    return f" behind {config.router}" if config.num_ranks > 1 else ""


def _kv_memory(config: RunConfig) -> str:
    """The KV cache's memory fraction and its basis (``SchedulerConfig.memory_fraction``), and the engine's block,
    where they are not vLLM's defaults (0.9 of total memory, 16-token blocks): said, not silent, as SGLang's
    and TensorRT-LLM's engines size their caches their own ways."""
    r, s = config.replica, config.scheduler
    fraction, basis = s.memory_fraction(r)
    out = "" if (fraction, basis) == (DEFAULT_MEMORY_FRACTION, "total") else (
        f" · KV cache memory {fraction:g} {MEMORY_BASIS_WORDS[basis]}")
    if r.num_gpu_blocks is not None:  # (the fraction then sizes nothing: vLLM's num_gpu_blocks_override wins)
        from simulator.engine.kvcache import engine_block_size  # (a hybrid's pages hold its state: vLLM's rule)

        size = engine_block_size(r, s.name)
        return (f" · KV cache {r.num_gpu_blocks:,} blocks of {size} tokens (--num-gpu-blocks, over the memory "
                "plan)")
    block = SCHEDULER_ENTRIES[s.name].block_size
    if r.block_size is None and block != SCHEDULER_ENTRIES["vllm"].block_size:
        out += f"{',' if out else ' · KV cache in'} {block}-token blocks"
    return out


def run_title(config: RunConfig, summary: dict[str, Any]) -> str:
    """Everything that makes two runs differ, on one line (a pipe gets it whole; a terminal wraps it
    between words): model, GPUs and layout, the policy's effective knobs, engine, dtype, and the
    features the run used; where the engine preset was fitted under another policy or other kernel
    prices, a note says so."""
    r, s = config.replica, config.scheduler
    kv = f", KV cache {r.kv_cache_dtype}" if r.kv_cache_dtype != "auto" else ""
    # dp: attention data-parallel ranks; dtype says "weight-only" where the GPU lacks its tensor cores.
    # The policy's effective knobs, where they follow the GPU (and SGLang's batch cap its KV cache); a
    # disaggregated run's title names its pools instead.
    knobs = ""
    if not config.is_disaggregated:
        max_len = r.effective_max_model_len
        per_rank = " a rank" if r.attention_dp > 1 else ""
        budget = (f"{s.token_budget(max_len, r.gpu_spec, r.attention_dp):,}-token budget{per_rank}, "
                  if SCHEDULER_ENTRIES[s.name].token_budget else "")  # (Orca's, FasterTransformer's steps have none)
        knobs = (f" ({budget}<= {s.seq_limit(r.gpu_spec, summary.get('kv_cache_tokens'), max_len):,} seqs, "
                 f"context {max_len:,}{_intake(s)}")  # (--max-model-len: read, though no request may come near it)
        if r.attention_dp > 1 and r.model_spec.is_moe:  # what its MoE layers carry (DPGroup.routes_own_tokens)
            knobs += {"sum": ", prompt steps' MoE on the ranks' own tokens",
                      "graphs": ", MoE padded to the largest rank under CUDA graphs, else the ranks' own tokens",
                      }.get(s.dp_padding_rule(), ", MoE padded to the largest rank")
        knobs += ")" + _kv_memory(config)
    spare = f" +{r.redundant_experts} redundant experts" if r.redundant_experts else ""
    title = (f"{r.model} on {r.num_gpus}x {r.gpu} (tp={r.tp}, pp={r.pp}, dp={r.attention_dp}, ep={r.ep}{spare}) · "
             f"{count(config.num_replicas, 'replica')}{_router(config)} · {s.name}{knobs} · {engine_words(config)} · "
             f"dtype {_dtype(r, config.engine)}{_experts_only(r)}{kv}")
    from simulator.costmodel.engine_model import load_engine

    preset = load_engine(config.engine)  # a preset, one with terms overridden, or an artifact's terms (the run read it)
    unlike: list[str] = []  # how this run differs from what its engine terms were fitted under
    if config.is_disaggregated:
        from simulator.config.disagg_layout import layout_of, link_words  # late: keeps the CLI's import light

        layout = layout_of(config)
        title = (f"{r.model} disaggregated: {layout.describe()} ({link_words(config)}){_router(config)} · "
                 f"{pool_schedulers(config, layout)} · {engine_words(config)} · "
                 f"dtype {_dtype(r, config.engine)}{_experts_only(r)}{kv}")
        # Said, not silent: the pools run the plain loop whatever --fast-forward says.
        title += " · pools step one iteration at a time (no event skipping for disaggregated pools)"
    from simulator.engine.schedulers import SCHEDULERS

    fitted_with = getattr(preset, "scheduler", None)
    if fitted_with is not None and config.is_disaggregated:  # (a pool's sched= may run another policy: said)
        others = sorted({sc.name for sc, _ in layout.pools() if SCHEDULERS[sc.name] is not SCHEDULERS[fitted_with]})
        if others:
            unlike.append(f"--scheduler {fitted_with} (a pool here runs {', '.join(others)})")
    elif fitted_with is not None and SCHEDULERS[fitted_with] is not SCHEDULERS[s.name]:  # said, not silent
        unlike.append(f"--scheduler {fitted_with}")
    fitted_over = getattr(preset, "kernels", None)
    if fitted_over is not None and fitted_over != r.kernels:
        unlike.append(f"--kernels {fitted_over}")
    unlike += _artifact_unlike(config)
    calibration = getattr(preset, "roofline_calibration", None)  # (its terms sit on those prices: ~10% apart)
    if (calibration is not None and calibration != r.roofline_calibration and config.cost_model == "roofline"
            and (fitted_over or "roofline") == r.kernels == "roofline"):
        unlike.append(f"--roofline-calibration {calibration}")
    if unlike:
        title += f" · note: {config.engine} was fitted with {' and '.join(unlike)}"
    if r.model_spec.max_model_len_assumed and r.max_model_len is None:  # said, not silent (vLLM warns)
        title += (f" · note: the model's config.json names no max_position_embeddings: a context of "
                  f"{r.model_spec.max_model_len:,} tokens assumed, as vLLM does (--max-model-len gives it)")
    quant = r.model_spec.checkpoint_quant  # a config.json's quantization_config (said, not read)
    if quant and quant != r.dtype:
        from simulator.config.catalog import MODELS

        if MODELS.get(r.model_spec.name) is r.model_spec:  # a catalog entry: its published checkpoint, no file read
            title += (f" · note: {r.model}'s published checkpoint is {quant}; the run prices --dtype {r.dtype} "
                      "(another checkpoint of its shape)")
        else:
            title += f" · note: the checkpoint's config.json is quantized ({quant}); the run prices --dtype {r.dtype}"
    if config.speculative is not None:
        sp = config.speculative
        drafter = f" ({sp.draft_model})" if sp.draft_model else ""
        if (known := sp.known_head) is not None:  # a known head: its own shape
            head = known.spec
            drafter = (f" ({head.hf_id}: {head.num_layers} layer{'s' if head.num_layers > 1 else ''} of hidden "
                       f"{head.hidden_size:,}, draft vocabulary {head.vocab_size:,}: {head.source})")
        elif sp.draft_model and sp.method != "draft_model":  # a head's checkpoint: named, priced from the target's shape
            drafter = (f" ({sp.draft_model}: named, not read; priced as "
                       + ("k residual blocks and LM heads" if sp.method == "medusa" else "one layer of the target")
                       + ")")
        tree = f" (a token tree of {sp.num_verify_tokens} nodes)" if sp.token_tree else ""
        if sp.parallel_drafting:
            tree += " drafted in parallel (one drafter pass a step)"
        title += (f" · speculative {sp.method}{drafter} k={sp.k}{tree}, expected AL {sp.mean_acceptance_length:.2f} · "
                  "loop step by step (no lockstep or event skipping with speculation)")
        if note := unmodelled_line(sp):  # which keys given were read but not modelled, before the figures
            title += f" · {note}"
    title += _hybrid_block_note(config)
    if "prefix_caching" in summary:  # on (simulator.engine.prefix_cache); said when turned off by hand
        pc = summary["prefix_caching"]
        where = f" in the {pc['pool']} pool" if "pool" in pc else ""
        title += f" · prefix caching: on{where}, {pc['policy']}, {pc['num_blocks']:,} blocks"
        if "cpu_kv_gib" in pc:
            title += f" + CPU tier {pc['cpu_kv_gib']:g} GiB"
    elif s.prefix_caching is False:
        title += " · prefix caching: off"
    return title


def _hybrid_block_note(config: RunConfig) -> str:
    """Said in the title: a hybrid model's KV blocks under vLLM's schedulers, vLLM's rule where --block-size is
    unset (simulator.engine.kvcache.engine_block_size), or that vLLM would raise a smaller one given (it does)."""
    from simulator.engine.kvcache import vllm_hybrid_block_size

    pairs = [(config.replica, config.scheduler)]
    if config.is_disaggregated:  # the pools' own layouts and policies
        from simulator.config.disagg_layout import layout_of

        layout = layout_of(config)
        pairs = [(layout.prefill_replica, layout.prefill_scheduler), (layout.decode_replica, layout.decode_scheduler)]
        if layout.mixed_replica is not None:
            pairs.append((layout.mixed_replica, layout.mixed_scheduler))
    notes: list[str] = []
    for replica, sched in pairs:
        if not (replica.model_spec.is_hybrid and SCHEDULER_ENTRIES[sched.name].hybrid_page):
            continue
        vllm = vllm_hybrid_block_size(replica)
        if replica.block_size is None:
            note = (f"KV blocks of {vllm:,} tokens (vLLM's for a hybrid under {sched.name}: an attention page holds a "
                    "linear layer's state; --block-size sets another)")
        elif replica.block_size < vllm:
            note = f"note: vLLM raises a hybrid's --block-size {replica.block_size} to {vllm:,} at tp={replica.tp}"
        else:
            continue
        if note not in notes:
            notes.append(note)
    return "".join(f" · {note}" for note in notes)


def _pricing_note(config: RunConfig) -> str:
    """The cost model: which measured tables priced the run (the model the run loaded, cached) and
    the ops the roofline priced beside them, the roofline's calibration, and a trace whose timestamps
    the arrivals do not use."""
    replicas = [config.replica]
    if config.is_disaggregated:  # the pools' replicas (a pool may name another GPU than the run's)
        from simulator.config.disagg_layout import layout_of

        layout = layout_of(config)
        replicas = [layout.prefill_replica, layout.decode_replica] + (
            [layout.mixed_replica] if layout.mixed_replica is not None else [])
    replicas = list({(rep.gpu, rep.kernels, rep.moe_kernel): rep for rep in replicas}.values())
    from simulator.costmodel import load_engine
    from simulator.costmodel.calibration import describe

    engine = load_engine(config.engine)
    kernels = f"cost model: {config.cost_model}"
    tables = [rep for rep in replicas if rep.kernels != "roofline"]
    if tables:
        from simulator.costmodel.aic.model import table_cost_model

        # The tables price the run (config.cost_model is the roofline by default, which a kernels flag replaces);
        # the roofline only the ops each describe() names.
        kernels = ("cost model: kernel tables · kernels: "
                   + "; ".join(table_cost_model(rep, rep.kernels).describe() for rep in tables))
    if config.cost_model != "roofline":  # a fitted artifact learns some ops; the roofline prices the rest: said
        from simulator.costmodel.learned import learned_ops_of, read_artifact, roofline_ops_of

        art = read_artifact(config.cost_model)  # (what it holds, as the model prices it: not its own list)
        left = roofline_ops_of(learned_ops_of(art), config.replica.tp)
        if art.get("gemm_dtype") == "float32":  # (a CPU profile's: its kernels price the run's 16-bit weights)
            kernels += " · learned from float32 kernels (the profile's --dtype), pricing the run's 16-bit weights"
        if left:
            kernels += f" · roofline for: {', '.join(left)}"
    kernels += " · roofline calibration: " + "; ".join(
        dict.fromkeys(describe(rep.roofline_calibration, rep.gpu, rep.kernels, engine) for rep in replicas))
    w = config.workload
    if w.trace is not None and w.arrival != "trace":  # the trace's timestamps are not used: say so
        arrivals = {"poisson": "Poisson", "gamma": "gamma", "fixed": "fixed-rate", "burst": "burst"}[w.arrival]
        kernels += (f" · {arrivals} arrivals over the trace's lengths (--arrival trace replays its timestamps)")
    return kernels


def _loop_note(config: RunConfig) -> str:
    """Under a concurrency cap the arrivals are only the first sends: who sends next; and a warm-up left out."""
    w = config.workload
    if w.concurrency is None:  # (an open loop's warm-up: its first requests sent, left out of every figure below)
        return f" · the first {w.num_warmup:,} requests a warm-up left out" if w.num_warmup else ""
    warm = f", the first {w.num_warmup:,} requests a warm-up left out ({w.warmup_mode})" if w.num_warmup else ""
    if w.exact_lengths and w.arrival == "burst":  # said: equal requests sent together stay together, wave after wave
        warm += (" · note: every request the same length, so the users move in lock-stepped waves (their figures "
                 "alike); --random-range-ratio 0.8 --range-style sglang draws InferenceX's [0.8 len, len] band")
    return (f" · closed loop: {w.concurrency:,} users, each sending its next request when its last ends{warm}"
            if w.arrival == "burst" else f" · at most {w.concurrency:,} requests in flight (a request waits for "
            f"one to end, vLLM's --max-concurrency){warm}")


def _disagg_line(d: dict[str, Any]) -> str:
    """A disaggregated run's TTFT split, handoff tails, transfers and pool busy fractions (its SLO attainment is the
    summary line's, as any run's)."""
    return (
        f"disaggregated {d['layout']} ({d['num_gpus']} GPUs): TTFT = queue p50 {_ms(d['queue_s_p50'])} + prefill "
        f"p50 {_ms(d['prefill_s_p50'])}"
        + (f" + handoff to the decode worker's first step p50 {_ms(d['delivery_s_p50'])}"
           if d["delivery_s_p50"] > 0 else "")
        + f" ms; handoff p50/p99: backpressure {_ms(d['backpressure_s_p50'])}/"
        f"{_ms(d['backpressure_s_p99'])}, "
        + (f"stack {_ms(d['stack_s_p50'])}/{_ms(d['stack_s_p99'])}, " if d["stack_s_p99"] > 0 else "")
        + f"link queue {_ms(d['link_queue_s_p50'])}/{_ms(d['link_queue_s_p99'])}, "
        f"transfer {_ms(d['transfer_s_p50'])}/{_ms(d['transfer_s_p99'])}"
        + (f", decode seat {_ms(d['seat_wait_s_p50'])}/{_ms(d['seat_wait_s_p99'])}" if d["seat_wait_s_p99"] > 0 else "")
        + f" ms; decode TBT p99 "
        f"{_ms(d['decode_tbt_s_p99'])} max {_ms(d['decode_tbt_s_max'])} ms · {count(d['num_transfers'], 'transfer')}, "
        f"{d['transfer_bytes'] / 1e9:.2f} GB, {'busiest ' if 'link_utilization_by_link' in d else ''}link busy "
        f"{d['link_utilization']:.1%} · busy prefill "
        f"{d['prefill_busy_fraction']:.0%} decode {d['decode_busy_fraction']:.0%} · KV occupancy mean prefill "
        f"{_pct(d.get('prefill_kv_occupancy_mean', float('nan')), 0)} "
        f"decode {_pct(d.get('decode_kv_occupancy_mean', float('nan')), 0)}"
        + (f" · the mixed pool took {count(d['num_mixed'], 'request')} (busy {d['mixed_busy_fraction']:.0%}; it takes "
           "one only while every prefill worker has a queue, so its own knobs moved nothing)" if d.get("num_mixed") == 0
           and "mixed_busy_fraction" in d else f" · the mixed pool took {count(d['num_mixed'], 'request')} (busy "
           f"{d['mixed_busy_fraction']:.0%})" if "mixed_busy_fraction" in d else ""))


def _speculative_line(config: RunConfig, sp: dict[str, Any]) -> str:
    """A speculating run's verify steps, acceptance (measured against expected) and ITL both ways."""
    assert config.speculative is not None
    return (
        f"speculative decoding: {sp['num_verify_steps']:,} verify steps, {sp['num_drafted']:,} draft tokens proposed, "
        f"{sp['num_accepted']:,} accepted ({sp['draft_acceptance_rate']:.1%}) · mean acceptance length "
        f"{sp['mean_acceptance_length']:.3f} tokens/step (expected {sp['expected_acceptance_length']:.3f}) · ITL per "
        f"token p50/p99 {_ms(sp['itl_per_token_s_p50'])}/{_ms(sp['itl_per_token_s_p99'])} ms, per step "
        f"{_ms(sp['itl_per_step_s_p50'])}/{_ms(sp['itl_per_step_s_p99'])} ms (a step's accepted tokens arrive "
        f"together: 0 between them) · acceptance: {sp['acceptance_source']}")


class BenchOptions:
    """``run``'s benchmark options (``--goodput``, ``--metrics``, ``--save-result``,
    ``--metric-percentiles``), checked before the run; figures from :mod:`simulator.report.benchmark`."""

    VIEWS = ("default", "vllm")

    def __init__(self, goodput_ms: dict[str, float], view: str, save_result: Path | None,
                 percentiles: tuple[float, ...]) -> None:
        self.goodput_ms, self.view, self.save_result, self.percentiles = goodput_ms, view, save_result, percentiles
        self.save_error: str | None = None  # why --save-result's JSON could not be written (said after the summary)

    @classmethod
    def parse(cls, goodput: str | None, view: str, save_result: Path | None, percentiles: str | None,
              json_out: bool = False) -> BenchOptions:
        from simulator.config.errors import ConfigError
        from simulator.report.benchmark import check_result_path, parse_goodput, parse_percentiles

        if view not in cls.VIEWS:
            raise ConfigError("--metrics", f"unknown view {view!r}", f"use one of {', '.join(cls.VIEWS)}")
        if save_result is not None:
            check_result_path(save_result)
        goodput_ms = parse_goodput(goodput)
        # The percentiles show in vllm's view, the result JSON, and --json's benchmark block (there
        # with --goodput); anywhere else the flag would change nothing, which a user cannot tell.
        if percentiles is not None and view != "vllm" and save_result is None and not (json_out and goodput_ms):
            raise ConfigError("--metric-percentiles", "only --metrics vllm and --save-result report them, so "
                              "--metric-percentiles would do nothing",
                              "add --metrics vllm or --save-result, or drop --metric-percentiles")
        return cls(goodput_ms, view, save_result, parse_percentiles(percentiles))

    @property
    def wanted(self) -> bool:
        return bool(self.goodput_ms) or self.view == "vllm" or self.save_result is not None

    @property
    def keeps_token_times(self) -> bool:
        """Whether the run keeps every token's time (8 bytes a token): the JSON's itls and vLLM's peak output
        token throughput, in its block and its JSON, are counted from them."""
        return self.view == "vllm" or self.save_result is not None

    def report(self, result: RunResult, requests: Any) -> dict[str, Any]:
        """The figures (and the JSON file, if asked); per-request lists stay out of the summary."""
        from simulator.report.benchmark import benchmark_metrics, load_settings, result_json, save_result
        from simulator.report.metrics import request_columns

        cols = requests if isinstance(requests, dict) else request_columns(result)
        figures = benchmark_metrics(result, cols, self.goodput_ms, self.percentiles)
        if self.save_result is not None:
            try:
                save_result(self.save_result, result_json(result, figures, cols))
            except OSError as exc:  # (writable when the run began: a full disk, a folder made read-only since)
                self.save_error = (f"--save-result: could not write {self.save_result} ({exc.strerror or exc}); the "
                                   "summary is above")
        return {**load_settings(result), **figures}

    def print_vllm(self, config: RunConfig, summary: dict[str, Any], out: Console) -> None:
        """vLLM's result block under the run's own two header lines (what ran, its effective knobs, dtype, prefix
        cache and pricing: the default view's, so the two views of one run name the same deployment)."""
        from simulator.report.benchmark import format_vllm

        for line in header_lines(config, summary):
            out.print(line, markup=False, highlight=False)
        out.print(format_vllm(summary["benchmark"], summary["benchmark"], self.percentiles), markup=False,
                  highlight=False)

    def print_goodput(self, summary: dict[str, Any], out: Console) -> None:
        b = summary.get("benchmark")
        if b is None or b.get("request_goodput") is None:
            return
        slos = " and ".join(f"{k}<={v:g} ms" for k, v in self.goodput_ms.items())
        # vLLM's own name and rule (every --goodput bound met), said as such beside the summary's SLO attainment
        out.print(f"vLLM request goodput ({slos}) {b['request_goodput']:.2f} req/s of {b['request_throughput']:.2f}",
                  markup=False)


# config.json's report section (REPORT_KEY): the run options that shape what is reported, not what is simulated,
# by their key there -> (the command's parameter, its flag, the JSON type it takes).
REPORT_OPTIONS: dict[str, tuple[str, str, tuple[type, ...]]] = {
    "format": ("fmt", "--format", (str,)), "ttft_slo_s": ("ttft_slo", "--ttft-slo", (int, float)),
    "tbt_slo_s": ("tbt_slo", "--tbt-slo", (int, float)), "goodput": ("goodput", "--goodput", (str,)),
    "metrics": ("metrics", "--metrics", (str,)), "metric_percentiles": ("metric_percentiles", "--metric-percentiles", (str,)),
}


def file_report_options(ctx: typer.Context) -> dict[str, Any]:
    """What a ``--config`` file's report section sets of the options not given on this command line (a reproduction
    writes the first run's summary.json, goodput at its SLOs included), by parameter name; {} without one."""
    from simulator.config.run_config import REPORT_KEY

    path = ctx.params.get("config_file")
    if path is None:
        return {}
    report = _config_file(path).get(REPORT_KEY)
    if report is None:
        return {}
    where = f"--config {path}"
    if not isinstance(report, dict):
        raise ConfigError(where, f"{REPORT_KEY}: must be an object, got {report!r}", "use the config.json a run wrote")
    out = {}
    for key, value in report.items():
        if key not in REPORT_OPTIONS:
            raise ConfigError(where, f"{REPORT_KEY}.{key}: unknown key", f"known: {', '.join(REPORT_OPTIONS)}")
        name, flag, types = REPORT_OPTIONS[key]
        if value is not None and (isinstance(value, bool) or not isinstance(value, types)):
            raise ConfigError(where, f"{REPORT_KEY}.{key}: must be {'a number' if float in types else 'a string'} "
                              f"(what {flag} takes), got {value!r}", f"correct {REPORT_KEY}.{key} in the file")
        source = ctx.get_parameter_source(name)
        if source is None or source.name not in ("COMMANDLINE", "ENVIRONMENT"):  # (typer's click: by name)
            out[name] = value
    return out


@contextlib.contextmanager
def _from_file(ctx: typer.Context, from_file: dict[str, Any]) -> Iterator[None]:
    """Re-raise a refusal of a report option whose value came from the ``--config`` file (``from_file``, by parameter
    name) as the file's: the flag it names was never typed."""
    try:
        yield
    except ConfigError as err:
        from simulator.config.run_config import REPORT_KEY

        key = next((k for k, (name, flag, _) in REPORT_OPTIONS.items() if flag == err.field and name in from_file), None)
        if key is None:
            raise
        raise ConfigError(f"--config {ctx.params.get('config_file')}", f"{REPORT_KEY}.{key}: {err.problem}",
                          f"{err.fix + ', or ' if err.fix else ''}correct {REPORT_KEY}.{key} in the file") from None


def changed_file_inputs(ctx: typer.Context, config: RunConfig) -> list[str]:
    """The files a ``--config`` file's run read that read otherwise now (simulator.config.inputs), one line each;
    [] without one."""
    from simulator.config.inputs import INPUTS_KEY, changed_inputs

    path = ctx.params.get("config_file")
    return [] if path is None else changed_inputs(config, _config_file(path).get(INPUTS_KEY))


def _config_file(path: Path | str) -> dict[str, Any]:
    """A ``--config`` file's object, for the sections beside its fields (the config was built from it already, so it
    reads as JSON)."""
    from simulator.config.json_types import loads_once

    return loads_once(Path(path).read_text(encoding="utf-8-sig"), str(path))


@app.command()
@run_options
def run(
    ctx: typer.Context,
    config: RunConfig,
    out: Annotated[Path | None, typer.Option(help="Folder for requests/iterations tables, summary.json, config.json.")] = None,
    fmt: Annotated[str | None, typer.Option("--format", help=f"Table format with --out: {', '.join(FORMATS)} "
                                             "(default parquet).")] = None,
    ttft_slo: Annotated[float, typer.Option(help="TTFT SLO (s) of the summary's SLO attainment (goodput_fraction: "
                                            "TTFT and every gap within their SLOs).")] = TTFT_SLO_S,
    tbt_slo: Annotated[float, typer.Option(help="SLO (s) every gap between tokens must meet for the summary's SLO "
                                           "attainment (goodput_fraction).")] = TBT_SLO_S,
    json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON instead of a table.")] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    workers: Annotated[str, typer.Option(metavar=WORKERS_METAVAR, help="Processes for the replicas of a cluster "
                                               "behind a state-free router (round_robin, random): same results, sooner "
                                               "from a few thousand requests. auto: one per available CPU, at most one "
                                               "a replica; 1 where the run cannot use more (replicas that cannot run "
                                               "apart, a closed loop, a trace's block hashes).")] = "1",
    goodput: Annotated[str | None, typer.Option(metavar="NAME:MS ...", help="vLLM's goodput SLOs in ms, e.g. "
                                                "'ttft:300 tpot:50' (ttft, tpot, e2el): request goodput counts the "
                                                "requests meeting all of them, per second.")] = None,
    metrics: Annotated[str, typer.Option(help="Result view: default, or vllm (vllm bench serve's result block: "
                                               "means, medians and P99 of TTFT, TPOT, ITL, E2EL; throughputs).")] = "default",
    save_result: Annotated[Path | None, typer.Option(help="Write vllm bench serve's result JSON (its keys, warm-up "
                                                          "left out) to this file.")] = None,
    metric_percentiles: Annotated[str | None, typer.Option(help="Percentiles for --metrics vllm and --save-result, "
                                                                 "e.g. 50,90,99 (default 99).")] = None,
) -> None:
    """Simulate one configuration and print TTFT/TBT/TPOT quantiles (defaults: Llama-2-7B, A100-80GB, vLLM V1 scheduling, engine vllm-2026, ShareGPT)."""
    from_file = file_report_options(ctx)  # a --config's own SLOs, views and format, where not given again
    fmt = from_file.get("fmt", fmt) if out is not None else fmt
    ttft_slo = from_file.get("ttft_slo", ttft_slo)
    tbt_slo = from_file.get("tbt_slo", tbt_slo)
    goodput = from_file.get("goodput", goodput)
    metrics = from_file.get("metrics", metrics)
    metric_percentiles = from_file.get("metric_percentiles", metric_percentiles)
    # Every option is checked before the run: a bad --format or --out must not cost a simulation.
    if fmt is not None and out is None:
        raise ConfigError("--format", "sets the format of the tables --out writes, but no --out was given",
                          "add --out DIR, or drop --format")
    fmt = fmt or "parquet"
    with _from_file(ctx, from_file):  # (a bad value of the --config's report section is the file's, not a flag's)
        check_format(fmt)
        for flag, seconds in (("--ttft-slo", ttft_slo), ("--tbt-slo", tbt_slo)):
            if not (math.isfinite(seconds) and seconds > 0):  # else every request misses it: goodput 0% that looks measured
                raise ConfigError(flag, f"must be a positive number of seconds, got {seconds}", f"e.g. {flag} 0.2")
        bench = BenchOptions.parse(goodput, metrics, save_result, metric_percentiles, json_out)
    if bench.view == "vllm" and not json_out and out is None:  # vllm's block shows no goodput at these SLOs
        for flag, seconds, default in (("--ttft-slo", ttft_slo, TTFT_SLO_S), ("--tbt-slo", tbt_slo, TBT_SLO_S)):
            if seconds != default and flag[2:].replace("-", "_") not in from_file:  # (a --config's: not typed)
                raise ConfigError(flag, "--metrics vllm prints vllm bench serve's result block, which has no SLO "
                                  f"attainment at this SLO, so {flag} would do nothing",
                                  "give vLLM's SLOs with --goodput 'ttft:MS tpot:MS', add --json or --out for the "
                                  f"summary's SLO attainment, or drop {flag}")
    if out is not None:
        check_out_dir(out)
    check_run_fits(config.workload.num_requests)  # refuse, with the figure, a run that cannot fit in memory
    changed = changed_file_inputs(ctx, config)  # a reproduction over files edited since: said after the figures
    num_workers = parse_workers(workers, lambda: run_auto_workers(config))
    reporter = RunProgress() if progress and not json_out else None
    write_error = None
    try:
        try:
            result, summary, requests = _simulate_and_summarize(config, reporter or False, ttft_slo, tbt_slo, num_workers,
                                                               token_times=bench.keeps_token_times)
        except KeyboardInterrupt:  # Ctrl-C (or SIGTERM to a run with --workers, whose workers are stopped)
            fail("interrupted: the run was stopped and nothing was written", code=130)
        if bench.wanted:  # vllm bench serve's figures (warm-up left out), and its JSON; in the folder's summary too
            summary["benchmark"] = bench.report(result, requests)
        if out is not None:
            if reporter is not None:
                reporter.phase(f"writing tables to {out}", len(result.requests))
            try:
                report = {"format": fmt, "ttft_slo_s": ttft_slo, "tbt_slo_s": tbt_slo, "goodput": goodput,
                          "metrics": metrics, "metric_percentiles": metric_percentiles}
                written = _write(result, out, fmt, summary, requests, report)
            except KeyboardInterrupt:  # the partial folder is gone; out is as it was
                fail(f"interrupted: nothing written to {out}", code=130)
            except OSError as exc:  # the folder was writable before the run; keep the results on screen
                write_error = (f"--out: could not write the results to {out} ({exc.strerror or exc}); "
                               "the summary is above")
    finally:
        if reporter is not None:
            reporter.close()
    changed_lines = [f"warning: --config {ctx.params.get('config_file')}: {line}: this run is not the one it "
                     "reproduces" for line in changed]
    spec_note = unmodelled_line(config.speculative)
    if json_out:
        typer.echo(json.dumps(jsonable(summary), indent=2, sort_keys=True))
        for line in ([spec_note] if spec_note else []) + changed_lines:  # (stdout holds the JSON alone)
            typer.echo(line, err=True)
    else:
        out_console = console()
        if bench.view == "vllm":  # (no run header: its note here)
            bench.print_vllm(config, summary, out_console)
            if spec_note:
                out_console.print(spec_note, markup=False, highlight=False)
        else:
            print_summary(config, summary, result.wall_s, out_console)
            bench.print_goodput(summary, out_console)
        warning = extrapolation_warning(summary)  # in either view: the summary's figures lean on it
        if warning is not None:
            out_console.print(f"[yellow]{warning}[/yellow]", highlight=False)
        if (note := kv_users_note(config, summary, requests)) is not None:
            out_console.print(note, highlight=False)
        for line in changed_lines:
            out_console.print(line, markup=False, highlight=False)
        if bench.save_result is not None and bench.save_error is None:
            out_console.print(f"wrote {bench.save_result} (vllm bench serve's result JSON)", markup=False)
        if out is not None and write_error is None:
            out_console.print(f"wrote {out}/ ({', '.join(written)})")
    errors = [e for e in (write_error, bench.save_error) if e is not None]
    for error in errors:
        typer.echo(f"error: {error}", err=True)
    if errors:
        raise typer.Exit(1)


def _artifact_unlike(config: RunConfig) -> list[str]:
    """How the run differs from what its engine artifact was fitted on (its model, GPU and kernel cost model; a
    calibration audit found an artifact fitted over a CPU profile's learned model run over the roofline, TPOT 133 ms
    against 426, and one fitted on Llama-2-70B run on Llama-2-7B, without a word)."""
    from simulator.config.catalog import get_gpu, get_model
    from simulator.costmodel.engine_model import artifact_fitted_on

    fitted_on = artifact_fitted_on(config.engine)
    out = []

    def same_file(a: str, b: str) -> bool:
        return Path(a).is_file() and Path(b).is_file() and Path(a).resolve() == Path(b).resolve()

    cost_model = fitted_on.get("cost_model")
    if cost_model and cost_model != config.cost_model and not same_file(cost_model, config.cost_model):
        out.append(f"--cost-model {cost_model}")
    checks = [("model", config.replica.model, get_model)] + (
        [] if config.is_disaggregated else [("gpu", config.replica.gpu, get_gpu)])  # (pools may name their own)
    for key, value, lookup in checks:
        names = [n.strip() for n in fitted_on.get(key, "").split(",") if n.strip()]

        def canonical(name: str, lookup=lookup) -> str:  # noqa: ANN001 - a catalog lookup
            try:
                return lookup(name).name
            except ConfigError:
                return name

        if names and canonical(value) not in {canonical(n) for n in names}:
            out.append(f"--{key} {fitted_on[key]}")
    return out
