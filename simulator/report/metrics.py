"""Serving metrics, computed after the run from per-request token timestamps.

Definitions (DESIGN.md):

- TTFT = first output token time - arrival; scheduling delay = first scheduled - arrival;
- TBT = every gap between consecutive output tokens of a request, stalls and
  preemptions included; the first token is not a TBT sample (that is TTFT). P99 TBT is
  taken over all gaps of all requests;
- TPOT = (completion - first token) / (output tokens - 1), for requests with more than
  one output token; E2E = completion - arrival;
- SLO attainment (TTFT and every gap), the summary's ``goodput_fraction`` (``goodput_rps``: those
  requests per second; the keys keep their old names for their readers) = share of all requests
  (rejected ones count as misses) whose TTFT <= ``ttft_slo_s`` and whose largest TBT gap <=
  ``tbt_slo_s``. Not DistServe's goodput, which judges TPOT (capacity's ``--criterion goodput``,
  ``plan``), nor vLLM's request goodput (``--goodput``, :mod:`simulator.report.benchmark`); one gap
  over the limit misses the request here, however short the rest.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.engine.kvcache import vllm_reported_kv_tokens
from simulator.engine.tbt import QUANTILES, expand, merged, nan_stats
from simulator.engine.tbt import quantile_stats as weighted_quantile_stats
from simulator.report.benchmark import (
    measured_gaps,
    measured_gaps_by_replica,
    measured_requests,
    measured_window,
    warmup_count,
)
from simulator.workload.request import Request, RequestColumns

if TYPE_CHECKING:
    import pandas as pd

    from simulator.engine.cluster import RunResult


# A rejection reason names the request's own size, then the run's limit: the kind of a reason
# keeps the limit and drops the request's number, so reasons group into a few counted kinds.
_REASON_KINDS = (
    (re.compile(r"^prompt\+output = [\d,]+ tokens exceeds (.*)$"), r"prompt+output exceeds \1"),
    (re.compile(r"^prompt [\d,]+ tokens exceeds (.*)$"), r"prompt exceeds \1"),
    (re.compile(r"^needs [\d,]+ KV tokens but the cache holds (.*)$"), r"needs more KV tokens than the cache holds (\1)"),
)


_WHERE = re.compile(r"^([a-z]+ pool: )")  # a disaggregated run's reason names the pool that refused it first


def rejection_kind(reason: str) -> str:
    """The reason without the request's own figures (any other digits read as N)."""
    where = _WHERE.match(reason)
    prefix, rest = (where.group(1), reason[where.end():]) if where else ("", reason)
    for pattern, kind in _REASON_KINDS:
        if pattern.match(rest):
            return prefix + pattern.sub(kind, rest)
    return re.sub(r"\d[\d,.]*", "N", reason)


def rejections_by_kind(requests: pd.DataFrame | dict[str, np.ndarray]) -> dict[str, int]:
    """How many requests were rejected for each kind of reason, most frequent first."""
    cols = _as_columns(requests)
    reasons = cols["reject_reason"][cols["status"] == "rejected"]
    counts: dict[str, int] = {}
    for reason in reasons:
        kind = str(rejection_kind(reason))
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def tbt_distribution(result: RunResult, replica_id: int | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
    """Every TBT gap (of one replica, or of all) as sorted distinct values, their counts, and
    whether they are exact (see :mod:`simulator.engine.tbt`)."""
    logs = result.tbt  # one GapLog per replica (simulate and simulate_disaggregated fill it)
    return merged(logs if replica_id is None else logs[replica_id:replica_id + 1])


def tbt_samples(result: RunResult) -> np.ndarray:
    """Every time-between-tokens gap of every measured request (the warm-up's left out, as every figure), sorted
    (for plots and small runs: this expands the run-length log to 8 bytes a gap)."""
    values, counts, _ = measured_gaps(result)
    return expand(values, counts)


def request_columns(result: RunResult) -> dict[str, np.ndarray]:
    """One entry per request, finished or rejected: its timeline and latencies as numpy
    columns (the columns of :func:`request_frame`, without pandas)."""
    reqs = result.requests
    # Replicas run in worker processes give their requests as columns already.
    cols = _from_request_columns(reqs.columns) if isinstance(reqs, RequestColumns) else _from_requests(reqs)
    cols["ttft_s"] = cols["first_token_at"] - cols["arrival_at"]
    cols["sched_delay_s"] = cols["first_scheduled_at"] - cols["arrival_at"]
    cols["e2e_s"] = cols["completed_at"] - cols["arrival_at"]
    out = cols["num_output_tokens"]
    denom = np.where(out > 1, out - 1, np.nan)
    cols["tpot_s"] = (cols["completed_at"] - cols["first_token_at"]) / denom
    cols["max_tbt_s"] = cols.pop("max_tbt_s")  # the last column
    return cols


def _from_request_columns(fields: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    max_tbt = fields["max_tbt_s"].copy()
    max_tbt[fields["num_generated"] < 2] = np.nan
    reasons = fields["reject_reason"]
    cols = {name: fields[name].copy() for name in ("request_id", "replica_id", "arrival_at", "num_prompt_tokens",
                                                   "num_output_tokens", "first_scheduled_at", "first_token_at",
                                                   "completed_at", "num_preemptions")}  # the caller's to change
    cols["status"] = np.array([s.value for s in fields["status"].tolist()], dtype=object)
    cols["reject_reason"] = np.where(reasons == None, "", reasons).astype(object)  # noqa: E711 - elementwise
    cols["max_tbt_s"] = max_tbt
    return cols


def _from_requests(reqs: Sequence[Request]) -> dict[str, np.ndarray]:
    n = len(reqs)
    generated = np.fromiter((r.num_generated for r in reqs), dtype=np.int64, count=n)
    max_tbt = np.fromiter((r.max_tbt_s for r in reqs), dtype=np.float64, count=n)
    max_tbt[generated < 2] = np.nan
    cols: dict[str, np.ndarray] = {
        "request_id": np.fromiter((r.request_id for r in reqs), dtype=np.int64, count=n),
        "replica_id": np.fromiter((r.replica_id for r in reqs), dtype=np.int64, count=n),
        "arrival_at": np.fromiter((r.arrival_at for r in reqs), dtype=np.float64, count=n),
        "num_prompt_tokens": np.fromiter((r.num_prompt_tokens for r in reqs), dtype=np.int64, count=n),
        "num_output_tokens": np.fromiter((r.num_output_tokens for r in reqs), dtype=np.int64, count=n),
        "first_scheduled_at": np.array([np.nan if r.first_scheduled_at is None else r.first_scheduled_at for r in reqs],
                                       dtype=np.float64),
        "first_token_at": np.array([np.nan if r.first_token_at is None else r.first_token_at for r in reqs],
                                   dtype=np.float64),
        "completed_at": np.array([np.nan if r.completed_at is None else r.completed_at for r in reqs],
                                 dtype=np.float64),
        "num_preemptions": np.fromiter((r.num_preemptions for r in reqs), dtype=np.int64, count=n),
        "status": np.array([r.status.value for r in reqs], dtype=object),
        "reject_reason": np.array([r.reject_reason or "" for r in reqs], dtype=object),
        "max_tbt_s": max_tbt,
    }
    return cols


def request_frame(result: RunResult) -> pd.DataFrame:
    """One row per request, finished or rejected, with its timeline and latencies."""
    import pandas as pd

    return pd.DataFrame(request_columns(result))


def within_slo(finished: np.ndarray, ttft_s: np.ndarray, second_s: np.ndarray, ttft_slo_s: float,
               second_slo_s: float) -> np.ndarray:
    """Per request: finished, TTFT <= ``ttft_slo_s`` and its second figure <= ``second_slo_s``. A one-token output
    has none (NaN) and meets that limit: it made no one wait for a second token. The rule of every SLO share here,
    by what it is given: TPOT, DistServe's goodput (capacity's ``--criterion goodput``, ``plan``); the largest TBT
    gap, the stricter SLO attainment (TTFT and every gap) of a run's summary and capacity's default."""
    second = np.asarray(second_s, dtype=np.float64)
    return (np.asarray(finished, dtype=bool) & (np.asarray(ttft_s, dtype=np.float64) <= ttft_slo_s)
            & (np.where(np.isnan(second), 0.0, second) <= second_slo_s))


def quantile_stats(values: np.ndarray, prefix: str) -> dict[str, float]:
    """P50/P90/P99, mean and max of ``values`` (NaNs left out) as ``{prefix}_p50`` ...; NaN when empty."""
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return nan_stats(prefix)
    out: dict[str, float] = {}
    for q, v in zip(QUANTILES, np.percentile(values, QUANTILES), strict=True):
        out[f"{prefix}_p{q}"] = float(v)
    out[f"{prefix}_mean"] = float(values.mean())
    out[f"{prefix}_max"] = float(values.max())
    return out


def _as_columns(requests: pd.DataFrame | dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if isinstance(requests, dict):
        return requests
    return {name: requests[name].to_numpy() for name in requests.columns}


def measured_columns(result: RunResult, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``cols`` (``result``'s requests) without its warm-up, as every figure is judged
    (:func:`~simulator.report.benchmark.measured_requests`)."""
    if not warmup_count(result):
        return cols
    keep = measured_requests(result, cols["request_id"])
    return {name: values[keep] for name, values in cols.items()}


def run_span(result: RunResult, cols: dict[str, np.ndarray]) -> float:
    """The whole run's span, warm-up included (from its first send to its end): what the GPUs' busy time is over."""
    return max(result.sim_end_at - float(cols["arrival_at"].min()), 1e-12) if len(cols["arrival_at"]) else 1e-12


def summarize(result: RunResult, requests: pd.DataFrame | dict[str, np.ndarray] | None = None,
              ttft_slo_s: float = 2.0, tbt_slo_s: float = 0.2) -> dict[str, Any]:
    """Headline numbers of a run: latency quantiles, throughput, goodput, utilisation.
    ``requests``: :func:`request_frame` or :func:`request_columns` of the run, if already built."""
    cols = _as_columns(request_columns(result) if requests is None else requests)
    # What the GPUs were busy with is the whole run's, warm-up included (as disagg_summary's pools): over the
    # measured requests' span alone, a warm-up's compute put busy fractions above 1 (27x at 63 warm-up requests).
    busy_span = run_span(result, cols)
    # Throughput is over the measured requests' window (vllm bench's duration): a warm-up's tail is none of it.
    start, end = measured_window(result, cols)
    cols = measured_columns(result, cols)  # the warm-up requests leave every other figure
    status = cols["status"]
    done = status == "finished"
    # their gaps too, from the others' token times (simulate keeps them for such runs)
    tbt_values, tbt_counts, tbt_exact = measured_gaps(result)
    n = len(status)
    out: dict[str, Any] = {
        "num_requests": int(n),
        "num_finished": int(done.sum()),
        "num_rejected": int((status == "rejected").sum()),
        "rejected_by_reason": rejections_by_kind(cols),
        "num_preemptions": int(cols["num_preemptions"].sum()),
        "num_iterations": len(result.iterations),
        "num_tbt_samples": int(tbt_counts.sum()),
        "tbt_exact": tbt_exact,
        "num_warmup": warmup_count(result),
        "concurrency": result.config.workload.concurrency,
    }
    out.update(quantile_stats(cols["ttft_s"][done], "ttft_s"))
    out.update(weighted_quantile_stats(tbt_values, tbt_counts, "tbt_s"))
    out.update(quantile_stats(cols["tpot_s"][done], "tpot_s"))
    out.update(quantile_stats(cols["e2e_s"][done], "e2e_s"))
    out.update(quantile_stats(cols["sched_delay_s"][done], "sched_delay_s"))
    span = max(end - start, 1e-12)
    out["duration_s"] = span
    out["throughput_rps"] = int(done.sum()) / span
    out["output_tokens_per_s"] = float(cols["num_output_tokens"][done].sum()) / span
    out["prefill_tokens_per_s"] = float(cols["num_prompt_tokens"][done].sum()) / span
    max_tbt = cols["max_tbt_s"]
    good = within_slo(done, cols["ttft_s"], max_tbt, ttft_slo_s, tbt_slo_s)
    out["ttft_slo_s"] = ttft_slo_s
    out["tbt_slo_s"] = tbt_slo_s
    out["goodput_fraction"] = float(good.mean()) if n else math.nan
    out["goodput_rps"] = float(good.sum()) / span
    out["replica_busy_fraction"] = [b / busy_span for b in result.replica_busy_s]
    if any(len(stages) > 1 for stages in result.stage_busy_s):
        out.update(bubble_summary(result, busy_span))
    if len(result.replica_busy_s) > 1:
        out["per_replica"] = replica_rows(result, cols, span, busy_span)
    delays, left = queue_delays(result, cols)
    out.update(overload_summary({**cols, "sched_delay_s": delays, "left_queue_at": left}))
    out["kv_cache_tokens"] = result.memory.num_kv_tokens  # the whole pool in full-attention tokens
    reported = vllm_reported_kv_tokens(result.config.replica, result.memory)
    if reported != result.memory.num_kv_tokens:  # layers of more than one kind (gpt-oss, hybrids): vLLM's log differs
        out["kv_cache_tokens_vllm"] = reported
    if result.memory.num_memory_tokens is not None:  # --num-gpu-blocks set it: what the memory would hold, beside
        out["kv_cache_tokens_by_memory"] = result.memory.num_memory_tokens
    if result.memory.num_state_blocks:  # each running sequence's recurrent state and window, in blocks' tokens
        out["state_tokens_per_seq"] = result.memory.num_state_blocks * result.memory.block_size
        if result.memory.num_window_blocks:
            out["window_tokens_per_seq"] = result.memory.num_window_blocks * result.memory.block_size
    if _summarised_cache(result) is not None:
        out["prefix_caching"] = prefix_cache_summary(result)
    out["cost_model_extrapolations"] = result.extra.get("cost_model_extrapolations", 0)
    if out["cost_model_extrapolations"]:  # which ops (absent where none: the summary of most runs is unchanged)
        out["cost_model_extrapolations_by_op"] = result.extra.get("cost_model_extrapolations_by_op", {})
    out["workload"] = result.workload_source
    return out


def _summarised_cache(result: RunResult) -> tuple[str, int, float, str | None] | None:
    """The prefix cache the summary reports: ``(policy, blocks a replica, CPU tier GiB, pool)`` of an aggregated run's
    replicas, or of a disaggregated run's prefill pool (the pool whose replicas cache prompts: a decode worker takes
    a prompt's blocks over the link by count; a mixed pool's hits count in the same figures); None where none
    caches (the prefill pool's cache off, a mixed pool's too)."""
    config = result.config
    if not config.is_disaggregated:
        s = config.scheduler
        return (s.prefix_cache, result.memory.num_blocks, s.cpu_kv_gib, None) if s.prefix_cache is not None else None
    from simulator.config.disagg_layout import layout_of

    layout = layout_of(config)
    assert layout is not None and result.disagg is not None
    for pool, sched in (("prefill", layout.prefill_scheduler), ("mixed", layout.mixed_scheduler)):
        if sched is not None and sched.prefix_cache is not None:
            return sched.prefix_cache, result.disagg.num_blocks[result.disagg.pools.index(pool)], sched.cpu_kv_gib, pool
    return None


def prefix_cache_summary(result: RunResult) -> dict[str, Any]:
    """Prefix caching (simulator.engine.prefix_cache): the policy, the cache's blocks per replica,
    and over the measured requests that were admitted, the share of their prompt tokens found cached at
    their first admission (``hit_rate``) and the prefill tokens that saved. With a CPU tier
    (``cpu_kv_gib``), the hits split by tier: ``gpu_hit_rate`` and ``cpu_hit_rate`` (loaded from host
    memory) add up to ``hit_rate``. A disaggregated run's: its prefill pool's cache (``pool`` names it), a
    request's first admission being on its prefill worker (or a mixed replica, which caches too where it runs)."""
    reqs = result.requests
    if isinstance(reqs, RequestColumns):
        cols = reqs.columns
        cached, prompt = cols["num_cached_tokens"], cols["num_prompt_tokens"]
        host = cols["num_host_cached_tokens"]
        admitted, ids = cols["admitted_seq"] >= 0, cols["request_id"]
    else:
        cached = np.fromiter((r.num_cached_tokens for r in reqs), dtype=np.int64, count=len(reqs))
        host = np.fromiter((r.num_host_cached_tokens for r in reqs), dtype=np.int64, count=len(reqs))
        prompt = np.fromiter((r.num_prompt_tokens for r in reqs), dtype=np.int64, count=len(reqs))
        admitted = np.fromiter((r.admitted_seq >= 0 for r in reqs), dtype=bool, count=len(reqs))
        ids = np.fromiter((r.request_id for r in reqs), dtype=np.int64, count=len(reqs))
    # The warm-up requests leave these figures too (they met a cold cache: the hit rate read low): the first sent,
    # as every other figure judges them (closed-loop sessions do not send in id order).
    admitted = admitted & measured_requests(result, ids)
    saved, queried = int(cached[admitted].sum()), int(prompt[admitted].sum())
    cache = _summarised_cache(result)
    assert cache is not None
    policy, num_blocks, cpu_kv_gib, pool = cache
    out = {"policy": policy, "num_blocks": num_blocks,
           "hit_rate": saved / queried if queried else math.nan, "prefill_tokens_saved": saved,
           "prompt_tokens": queried}
    if pool is not None:
        out["pool"] = pool
    if cpu_kv_gib:
        loaded = int(host[admitted].sum())
        out.update({"cpu_kv_gib": cpu_kv_gib,
                    "gpu_hit_rate": (saved - loaded) / queried if queried else math.nan,
                    "cpu_hit_rate": loaded / queried if queried else math.nan, "tokens_loaded_from_cpu": loaded})
    return out


# A run is overloaded when scheduling delay in the last quarter of arrivals exceeds the capacity
# criterion's bound (P50 scheduling delay <= 2 s, DESIGN.md) and has at least doubled since the
# first quarter, with requests still queued when the last one arrives: the queue was growing.
OVERLOAD_SCHED_DELAY_S = 2.0
OVERLOAD_GROWTH = 2.0


# What queue_delays counts as a disaggregated request's waits: recorded beside results judged by it (a plan's
# plan.json, a capacity sweep's disaggregated point keys) so those judged before the KV link's wait counted are
# searched again, never resumed beside them.
DISAGG_WAITS = "scheduling, decode blocks, KV link, decode seat"


def queue_delays(result: RunResult, cols: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Each request's waits in queues and when it left its last one: the wait for its first scheduled step, and, in
    a disaggregated deployment, also its waits after its prompt: for decode blocks (backpressure: the prefill worker
    holds the KV), for the KV link (transfers queue FIFO behind the link's), and, its KV landed, for a decode seat
    while ``max_num_seqs`` requests run there. A decode pool or a link that cannot keep up queues requests at one of
    those, not in the prefill queue: the first wait alone passed rates whose TTFTs were half a minute (a 1 GB/s link
    serving 1.5 req/s of 2K-token 70B prompts passed 4 req/s, TTFT median 86 s), and without the seat wait 45 QPS
    passed on a 16-seat decode worker that serves ~8. The handoff latency and the transfer itself are no wait: they
    do not grow with the load. A request still in a queue (or never scheduled) has NaN for when it left it."""
    delay, left = cols["sched_delay_s"], cols["first_scheduled_at"].astype(np.float64)
    if result.disagg is None:
        return delay, left
    log = result.disagg.handoff
    ids = cols["request_id"]
    # NaN: served by a mixed replica (no handoff), or a run stopped before the step
    waits = [(log.decode_reserved_at - log.prefill_done_at)[ids], (log.transfer_start_at - log.handoff_done_at)[ids],
             (log.decode_seated_at - log.transfer_end_at)[ids]]
    handed = ~log.mixed[ids] & np.isfinite(log.prefill_done_at[ids])  # its prompt done on a prefill worker
    left = np.where(handed, log.decode_seated_at[ids], left)
    return delay + sum(np.nan_to_num(w, nan=0.0) for w in waits), left


def overload_summary(requests: pd.DataFrame | dict[str, np.ndarray], limit_s: float = OVERLOAD_SCHED_DELAY_S,
                     quantile: float = 50.0) -> dict[str, Any]:
    """Whether arrivals outpaced service: ``overloaded`` plus the figures that decided it. A capacity trial
    judges it by its SLO's own wait limit and quantile (``limit_s``, ``quantile``: the keys name it, P50 here).
    ``sched_delay_s`` is the wait judged and ``left_queue_at`` (default ``first_scheduled_at``) when a request left
    its last queue (:func:`queue_delays`: a disaggregated request's waits after its prompt too)."""
    cols = _as_columns(requests)
    served = cols["status"] != "rejected"
    order = np.argsort(cols["arrival_at"][served], kind="stable")
    out: dict[str, Any] = {"overloaded": False}
    if len(order) < 8:
        return out
    delay = cols["sched_delay_s"][served][order]
    quarter = max(1, len(order) // 4)
    first, last = (float(np.nanpercentile(d, quantile)) for d in (delay[:quarter], delay[-quarter:]))
    last_arrival = float(cols["arrival_at"][served][order][-1])
    scheduled = cols.get("left_queue_at", cols["first_scheduled_at"])[served][order].astype(np.float64)
    waiting = int(((scheduled > last_arrival) | np.isnan(scheduled)).sum())
    out.update({f"sched_delay_s_p{quantile:g}_first_quarter": first, f"sched_delay_s_p{quantile:g}_last_quarter": last,
                "num_waiting_at_last_arrival": waiting})
    out["overloaded"] = bool(last > limit_s and last > OVERLOAD_GROWTH * first and waiting > 0)
    return out


def bubble_summary(result: RunResult, span: float) -> dict[str, Any]:
    """Pipeline bubbles: per stage, busy = compute time / span of the run and
    bubble = 1 - busy (idle while work waits upstream, on the wire, or for requests in
    flight); ``bubble_fraction_sum`` sums over every stage of every replica."""
    busy = [[b / span for b in stages] for stages in result.stage_busy_s]
    bubble = [[1.0 - b for b in row] for row in busy]
    flat = [b for row in bubble for b in row]
    return {
        "stage_busy_fraction": busy,
        "stage_bubble_fraction": bubble,
        "bubble_fraction_sum": float(sum(flat)),
        "bubble_fraction_mean": float(sum(flat) / len(flat)),
    }


def replica_frame(result: RunResult, requests: pd.DataFrame | None = None, span: float | None = None) -> pd.DataFrame:
    """One row per replica of a cluster (:func:`replica_rows`), as a pandas frame."""
    import pandas as pd

    cols = request_columns(result) if requests is None else _as_columns(requests)
    return pd.DataFrame(replica_rows(result, cols, span))


def replica_rows(result: RunResult, cols: dict[str, np.ndarray], span: float | None = None,
                 busy_span: float | None = None) -> list[dict[str, Any]]:
    """One row per replica of a cluster: request counts, throughput, TTFT/TBT quantiles, busy
    and (with pipeline parallelism) mean bubble fraction. Same definitions as :func:`summarize`.
    ``cols``: :func:`request_columns` of the run; ``busy_span`` by default the whole run's (warm-up included)."""
    if span is None:
        start, end = measured_window(result, cols)
        span = max(end - start, 1e-12)
    if busy_span is None:  # the whole run's, warm-up included, as summarize's
        busy_span = run_span(result, cols)
    measured = None
    if warmup_count(result):  # the warm-up requests' gaps leave each replica's TBT too, as they leave the run's
        measured = measured_gaps_by_replica(result, request_columns(result)["replica_id"])
        cols = measured_columns(result, cols)  # (idempotent: the summary's are measured)
    replica_id, status = cols["replica_id"], cols["status"]
    finished, rejected = status == "finished", status == "rejected"
    # Each TBT gap belongs to the replica whose iteration produced the token that ends it.
    rows = []
    for rid in range(len(result.replica_busy_s)):
        mine = replica_id == rid
        done = mine & finished
        num_done = int(done.sum())
        row: dict[str, Any] = {
            "replica_id": rid,
            "num_requests": int(mine.sum()),
            "num_finished": num_done,
            "num_rejected": int((mine & rejected).sum()),
            "throughput_rps": num_done / span,
            "output_tokens_per_s": float(cols["num_output_tokens"][done].sum()) / span,
            "busy_fraction": result.replica_busy_s[rid] / busy_span,
        }
        ttft = quantile_stats(cols["ttft_s"][done], "ttft_s")
        values, counts, _ = measured[rid] if measured is not None else tbt_distribution(result, rid)
        tbt = weighted_quantile_stats(values, counts, "tbt_s")
        row.update({k: ttft[k] for k in ("ttft_s_p50", "ttft_s_p99")})
        row.update({k: tbt[k] for k in ("tbt_s_p50", "tbt_s_p99")})
        if result.stage_busy_s and len(result.stage_busy_s[rid]) > 1:
            stages = result.stage_busy_s[rid]
            row["bubble_fraction_mean"] = 1.0 - sum(stages) / len(stages) / busy_span
        rows.append(row)
    return rows
