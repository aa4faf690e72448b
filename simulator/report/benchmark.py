"""A run's figures as serving benchmarks report them (``vllm bench serve``, AIPerf).

Definitions (per request, over the *measured* requests: those sent after the first
``num_warmup`` and not refused):

- TTFT = first token - send time (client side: queueing inside the server included);
- TPOT = (E2E - TTFT) / (output tokens - 1), requests with more than one output token;
- ITL = every gap between consecutive chunks a request streams, pooled over requests: tokens one
  step emits together (a speculating step's accepted run) arrive as one chunk, as in vLLM's
  benchmark, where our TBT (``simulator.report.metrics``) counts a zero gap for each of them: the
  per-step and the per-token views;
- E2EL = completion - send time;
- duration = from the start of the measured load (time 0 for a generated one: vLLM's clock starts
  before the first request's delay; the first measured send after a warm-up or in a trace) to the
  last measured request's return, a failed one's included (vLLM's runs until every request came
  back): a refused request returns when refused (its last recorded time: its send for a prompt
  the replica refuses); request,
  output-token and total-token (input + output) throughput are totals over it;
- peak output token throughput = the most tokens the finished requests streamed in one 1-second
  bucket counted from their first send, each streamed chunk one token (vLLM's ``max_output_tokens_per_s``);
- request goodput = requests meeting every given SLO (``--goodput ttft:300 tpot:50``, in ms,
  as vLLM: a request meets an SLO when its value is <= the bound) per second of duration;
- output tokens/s per GPU = output throughput / GPUs of the deployment, and per user = the
  mean over requests of 1 / TPOT (:func:`output_throughput_per_user`: AIPerf's output token throughput
  per user, averaged; ``simulate plan``'s tokens/s per user is the same figure): the two axes of a
  serving Pareto chart. (InferenceX plots 1000 / TPOT in ms of a percentile, and SGLang's per-user figure is
  output tokens / E2E: figures of their own, under their own names where shown.)

Means, medians, standard deviations and percentiles are numpy's (``np.percentile``'s
``linear`` method), as vLLM computes them; ITL's come from the run's gap logs without
expanding them (:func:`simulator.engine.tbt.percentiles`, bit-identical to the expanded call),
or from the requests' token times when warm-up requests must be left out.

:func:`benchmark_metrics` returns a dict keyed as ``vllm bench serve``'s result JSON
(``mean_ttft_ms``, ``p99_itl_ms``, ``request_throughput`` ...), plus our own keys for what it
does not report; :func:`format_vllm` prints it as vLLM's result block; :func:`save_result`
writes the JSON that ``--save-result`` promises, so scripts written for vLLM's files read ours.
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.config.errors import ConfigError
from simulator.engine.tbt import itl_views, merged, percentiles
from simulator.util.paths import check_out_file
from simulator.util.text import comma_list
from simulator.workload.request import RequestColumns

if TYPE_CHECKING:
    from simulator.engine.cluster import RunResult

GOODPUT_METRICS = ("ttft", "tpot", "e2el")  # the SLO names vLLM accepts
DEFAULT_PERCENTILES = (99.0,)
METRICS = (("ttft", "TTFT", "Time to First Token"),
           ("tpot", "TPOT", "Time per Output Token (excl. 1st token)"),
           ("itl", "ITL", "Inter-token Latency"),
           ("e2el", "E2EL", "End-to-end Latency"))


MIN_GOODPUT_BOUND_MS = 1.0  # a goodput bound below this no LLM request meets (a token, a first token, a request)


def parse_goodput(pairs: Sequence[str] | str | None) -> dict[str, float]:
    """``--goodput`` pairs (``ttft:300 tpot:50``, milliseconds; space- or comma-separated, in
    one argument or several) as ``{"ttft": 300.0, ...}``; a bad pair is one clear error."""
    if pairs is None:
        return {}
    text = " ".join([pairs] if isinstance(pairs, str) else pairs)
    out: dict[str, float] = {}
    if not text.split():  # `--goodput` with no pairs after it: no SLO, so the flag would do nothing
        raise ConfigError("--goodput", "no NAME:MILLISECONDS pairs given", "e.g. --goodput 'ttft:300 tpot:50'")
    for pair in text.replace(",", " ").split():
        name, sep, value = pair.partition(":")
        try:
            bound = float(value) if sep else math.nan
        except ValueError:
            bound = math.nan
        if name not in GOODPUT_METRICS or not bound >= 0 or math.isinf(bound):
            raise ConfigError("--goodput", f"expected NAME:MILLISECONDS with NAME one of {', '.join(GOODPUT_METRICS)} "
                              f"and a non-negative bound, got {pair!r}", "e.g. --goodput 'ttft:300 tpot:50'")
        if bound < MIN_GOODPUT_BOUND_MS:  # (0.05 meant 50 ms: a goodput of 0 at any load, said as a figure)
            fix = f"for {bound:g} s pass {name}:{bound * 1000:g}" if bound > 0 else f"give a bound, e.g. {name}:50"
            raise ConfigError("--goodput", f"{pair} bounds {name} at {bound:g} ms (bounds are milliseconds, as vLLM's "
                              f"--goodput), which no request meets", fix)
        if name in out:  # vLLM keeps the last; two bounds for one metric is a typo, not a wish
            raise ConfigError("--goodput", f"{name} given twice ({out[name]:g} and {bound:g} ms)", "give each metric once")
        out[name] = bound
    return out


def parse_percentiles(text: str | None) -> tuple[float, ...]:
    """``--metric-percentiles`` as vLLM spells it (``"50,90,99"``); default P99."""
    if text is None:
        return DEFAULT_PERCENTILES
    try:
        values = tuple(float(p) for p in comma_list(text))
    except ValueError:
        values = ()
    if not values or any(not 0 <= p <= 100 for p in values):
        raise ConfigError("--metric-percentiles", f"expected comma-separated percentiles in [0, 100], got {text!r}",
                          "e.g. --metric-percentiles 50,90,99")
    return values


def _word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def _stats(values: np.ndarray, name: str, qs: Sequence[float]) -> dict[str, float]:
    """mean/median/std/percentiles of a sample in ms, keyed as vLLM keys them (0 when empty, as vLLM)."""
    ms = values * 1000 if len(values) else np.zeros(1)
    out = {f"mean_{name}_ms": float(np.mean(ms)), f"median_{name}_ms": float(np.median(ms)),
           f"std_{name}_ms": float(np.std(ms))}
    for p, v in zip(qs, np.percentile(ms, list(qs)), strict=True):
        out[f"p{_word(p)}_{name}_ms"] = float(v)
    return out


def _weighted_stats(values: np.ndarray, counts: np.ndarray, name: str, qs: Sequence[float]) -> dict[str, float]:
    """:func:`_stats` of ``values`` repeated ``counts`` times (sorted distinct values), unexpanded."""
    n = int(counts.sum()) if len(counts) else 0
    if n == 0:
        return _stats(np.zeros(0), name, qs)
    ms = values * 1000
    weights = counts.astype(np.float64)
    mean = float(np.sum(ms * weights) / n)  # (np.sum, not BLAS's np.dot: the same bits whatever the thread count)
    out = {f"mean_{name}_ms": mean, f"median_{name}_ms": percentiles(ms, counts, [50.0])[0],
           f"std_{name}_ms": float(math.sqrt(max(float(np.sum((ms - mean) ** 2 * weights)) / n, 0.0)))}
    for p, v in zip(qs, percentiles(ms, counts, qs), strict=True):
        out[f"p{_word(p)}_{name}_ms"] = v
    return out


def returned_at(cols: dict[str, np.ndarray]) -> np.ndarray:
    """When each request came back to its client: a finished one on completion, a refused one when refused (the
    latest time it has: its send, for a prompt the replica refused on arrival); NaN for one still in flight."""
    refused = np.fmax(np.fmax(cols["arrival_at"], cols["first_scheduled_at"]), cols["first_token_at"])
    status = cols["status"]
    return np.where(status == "finished", cols["completed_at"], np.where(status == "rejected", refused, np.nan))


def send_order(result: RunResult) -> np.ndarray | None:
    """The request ids in the order the run sent them, where that is not id order and the run recorded it
    (closed-loop sessions: a turn is sent as its predecessor ends, so a later session's turn can go before an
    earlier one's); None where requests are sent in id order (open loop, and --concurrency's users, who take
    the next request in line)."""
    return result.extra.get("send_order")


def warmup_count(result: RunResult) -> int:
    """How many of the run's first requests sent are a warm-up, left out of every figure (``--num-warmup``)."""
    return int(getattr(result.config.workload, "num_warmup", 0) or 0)


def measured_mask(request_id: np.ndarray, num_warmup: int, order: np.ndarray | None = None) -> np.ndarray:
    """Which of these requests are measured: every one but the first ``num_warmup`` sent (``--num-warmup``), the
    first ids unless ``order`` (:func:`send_order`) says in which order they were sent. A run's figures take its
    own warm-up and order: :func:`measured_requests`."""
    request_id = np.asarray(request_id)
    if order is None or not num_warmup:
        return request_id >= num_warmup
    return ~np.isin(request_id, order[:num_warmup])


def measured_requests(result: RunResult, request_id: np.ndarray) -> np.ndarray:
    """Which of these requests of ``result`` are measured, as every figure of the run judges them: all but the
    first :func:`warmup_count` sent, in the run's :func:`send_order`."""
    return measured_mask(request_id, warmup_count(result), send_order(result))


def measured_window(result: RunResult, cols: dict[str, np.ndarray]) -> tuple[float, float]:
    """The measured load's (start, end), as ``vllm bench serve`` times its duration: from the benchmark's start to
    the last measured request's return (a refused one's included). Its start is the instant the load began, before
    the first request's own delay (vLLM sleeps ``delay_ts[0]`` before the first send): time 0 for a generated
    load; the first measured send after a warm-up (a drained one releases every user at once) and for a trace
    (its timestamps are the trace's, not a benchmark's). ``cols``: the run's requests (or some of them)."""
    measured = measured_requests(result, cols["request_id"])
    sent = cols["arrival_at"][measured]
    if not len(sent):
        return 0.0, 0.0
    start = 0.0 if not warmup_count(result) and result.config.workload.arrival != "trace" else float(sent.min())
    ends = returned_at(cols)[measured]
    ends = ends[~np.isnan(ends)]
    return start, float(ends.max()) if len(ends) else start


def max_in_flight(sent_at: np.ndarray, ended_at: np.ndarray) -> int:
    """The most requests in flight at once, each over ``[sent, ended)`` (an end before a
    start at the same instant: the slot is free again)."""
    if len(sent_at) == 0:
        return 0
    times = np.concatenate([ended_at, sent_at])
    deltas = np.concatenate([-np.ones(len(ended_at), dtype=np.int64), np.ones(len(sent_at), dtype=np.int64)])
    order = np.lexsort((deltas, times))  # by time, ends (-1) first
    return int(np.cumsum(deltas[order]).max())


def peak_output_tokens_per_s(result: RunResult, cols: dict[str, np.ndarray], done: np.ndarray) -> float | None:
    """vLLM's ``max_output_tokens_per_s`` ("Peak output token throughput") over the requests ``done`` marks (the
    measured finished ones), as its calculate_metrics counts it: each request's token times are its first token
    and then one per streamed chunk (first token + the cumulative ITLs it saves: a speculating step's run of
    tokens is one), counted in 1-second buckets from the first of those requests' sends; the fullest bucket.
    Post-run, from the token times the run kept; None where it kept none (a run asked for neither vLLM's block
    nor its JSON, nor with a warm-up to leave out)."""
    times = _token_times(result)
    if times is None:
        return None
    rows = np.flatnonzero(done)
    if not len(rows):
        return 0.0  # (vLLM's value when no request succeeded)
    first = cols["first_token_at"]
    origin = float(cols["arrival_at"][rows].min())
    stamps = []
    for i in rows.tolist():
        gaps = client_gaps(times[i], first[i])
        # Summed as vLLM rebuilds them from the saved ttft and itls, so the file's own lists give the same figure.
        stamps.append(first[i] + np.concatenate(([0.0], np.cumsum(gaps[gaps > 0]))))
    buckets = np.floor(np.concatenate(stamps) - origin).astype(np.int64)
    return float(np.bincount(buckets[buckets >= 0]).max())


def _token_times(result: RunResult) -> list[Any] | None:
    """Each request's token times (arrays), or None where the run did not keep them."""
    reqs = result.requests
    if isinstance(reqs, RequestColumns):
        column = reqs.columns.get("token_times")
        return None if column is None else list(column)
    times = [r.token_times for r in reqs]
    return None if any(t is None for t in times) else times


def _first_token_ats(result: RunResult) -> np.ndarray:
    """Each request's client-side first token time (NaN where it had none)."""
    reqs = result.requests
    if isinstance(reqs, RequestColumns):
        return np.asarray(reqs.columns["first_token_at"], dtype=np.float64)
    return np.array([np.nan if r.first_token_at is None else r.first_token_at for r in reqs], dtype=np.float64)


def client_gaps(times: Any, first_token_at: float) -> np.ndarray:
    """A request's inter-token gaps as its client sees them. ``times`` are where the engine computed each token;
    a disaggregated request whose decode worker delivers the first token (``first_token_at`` later than its first
    computed token) streams the tokens computed before then together with it, so the gaps start there (the
    handoff is no time between tokens: :func:`simulator.engine.disagg.deliver_first_token_on_decode`)."""
    t = np.frombuffer(times, dtype=np.float64)
    if len(t) > 1 and t[0] < first_token_at:
        t = t[t >= first_token_at]
    return np.diff(t)


def measured_gaps(result: RunResult) -> tuple[np.ndarray, np.ndarray, bool]:
    """Every inter-token gap of the measured requests (:func:`measured_requests`), as sorted
    distinct values and counts, and whether that is exact: from the requests' token times, or,
    where the run kept none, the replicas' gap logs with the warm-up gaps in (False). Without a
    warm-up, the gap logs (:func:`simulator.report.metrics.tbt_distribution`)."""
    return measured_gaps_by_replica(result)[0]


def measured_gaps_by_replica(result: RunResult, replica_of: np.ndarray | None = None
                             ) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """:func:`measured_gaps` per replica (``replica_of``: each request's replica, in run order), in one pass
    over the requests; without ``replica_of``, one entry for the whole run."""
    num = len(result.tbt) if replica_of is not None else 1
    num_warmup = warmup_count(result)

    def logs(k: int) -> list:
        return result.tbt[k:k + 1] if replica_of is not None else result.tbt

    times = _token_times(result) if num_warmup else None
    if times is None:  # every gap in the logs: exact without a warm-up, else the warm-up's gaps are in (False)
        out = []
        for k in range(num):
            values, counts, exact = merged(logs(k))
            out.append((values, counts, exact and not num_warmup))
        return out
    first = _first_token_ats(result)
    measured = measured_requests(result, np.arange(len(times)))
    gaps: list[list[np.ndarray]] = [[] for _ in range(num)]
    for i, t in enumerate(times):
        if measured[i] and len(t) > 1:
            gaps[int(replica_of[i]) if replica_of is not None else 0].append(client_gaps(t, first[i]))
    out = []
    for bucket in gaps:
        if not bucket:
            out.append((np.zeros(0), np.zeros(0, dtype=np.int64), True))
            continue
        values, counts = np.unique(np.concatenate(bucket), return_counts=True)
        out.append((values, counts, True))
    return out


def measured_itl_views(result: RunResult) -> dict[str, Any]:
    """A speculating run's two ITL views (:func:`simulator.engine.speculative.speculation_extra`: per token, the
    tokens of one verify step 0 apart, and per step, those zeros left out) over the measured requests; empty
    without a warm-up or where the run kept no token times (the engine's views, warm-up in, stand)."""
    values, counts, exact = measured_gaps(result)
    if not warmup_count(result) or not exact:
        return {}
    step = values > 0
    return itl_views((values, counts), (values[step], counts[step]))


def output_throughput_per_user(tpot_s: np.ndarray) -> float:
    """Output tokens/s per user: the mean over requests of 1 / TPOT (seconds), requests with a TPOT above 0 (one
    with a single output token has none; two delivered at once, 0). AIPerf's ``output_token_throughput_per_user``
    (1 / its per-request inter-token latency, our TPOT), averaged over requests as its summary's headline; the
    one definition of "tokens/s per user" here (``simulate run``'s and ``simulate plan``'s). NaN where no request
    has a TPOT above 0."""
    tpot_s = np.asarray(tpot_s, dtype=np.float64)
    tpot_s = tpot_s[tpot_s > 0]  # (NaN compares False: left out too)
    return float(np.mean(1.0 / tpot_s)) if len(tpot_s) else math.nan


def num_gpus(result: RunResult) -> int:
    """GPUs of the deployment the run simulated (both pools of a disaggregated one)."""
    if result.disagg is not None:
        return result.disagg.num_gpus
    return result.config.replica.num_gpus * result.config.num_replicas


def benchmark_metrics(result: RunResult, cols: dict[str, np.ndarray], goodput_ms: dict[str, float] | None = None,
                      percentiles_: Sequence[float] = DEFAULT_PERCENTILES) -> dict[str, Any]:
    """The run's benchmark figures (module docstring), keyed as ``vllm bench serve``'s JSON.
    ``cols``: :func:`simulator.report.metrics.request_columns` of the run."""
    num_warmup = warmup_count(result)
    status = cols["status"]
    measured = measured_requests(result, cols["request_id"])
    done = measured & (status == "finished")
    failed = measured & (status == "rejected")
    start, end = measured_window(result, cols)
    duration = max(end - start, 1e-12)
    out_tokens = cols["num_output_tokens"][done]
    in_tokens = cols["num_prompt_tokens"][done]
    ttft, e2el = cols["ttft_s"][done], cols["e2e_s"][done]
    tpot_all = np.where(out_tokens > 1, cols["tpot_s"][done], 0.0)  # vLLM: 0 for one-token outputs (goodput)
    tpot = cols["tpot_s"][done][out_tokens > 1]
    gpus = num_gpus(result)
    completed = int(done.sum())
    total_output = int(out_tokens.sum())
    out: dict[str, Any] = {
        "duration": duration,
        "completed": completed,
        "failed": int(failed.sum()),
        "total_input_tokens": int(in_tokens.sum()),
        "total_output_tokens": total_output,
        "request_throughput": completed / duration,
        "request_goodput": None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (int(in_tokens.sum()) + total_output) / duration,
    }
    if goodput_ms:
        good = np.ones(completed, dtype=bool)
        for name, values in (("ttft", ttft), ("tpot", tpot_all), ("e2el", e2el)):
            if name in goodput_ms:
                good &= goodput_ms[name] / 1000 >= values
        out["request_goodput"] = int(good.sum()) / duration
    returned = done | failed
    out["max_output_tokens_per_s"] = peak_output_tokens_per_s(result, cols, done)
    out["max_concurrent_requests"] = max_in_flight(cols["arrival_at"][returned], returned_at(cols)[returned])
    out.update(_stats(ttft, "ttft", percentiles_))
    out.update(_stats(tpot, "tpot", percentiles_))
    values, counts, itl_measured = measured_gaps(result)
    itl_measured = itl_measured or num_warmup == 0
    chunk = values > 0  # tokens one step emits together (a speculating step's) stream as one chunk: no ITL between
    out.update(_weighted_stats(values[chunk], counts[chunk], "itl", percentiles_))
    out.update(_stats(e2el, "e2el", percentiles_))
    # Ours (vLLM has no key for them): the Pareto axes, the deployment and the load.
    out["num_gpus"] = gpus
    out["output_throughput_per_gpu"] = total_output / duration / gpus
    # InferenceX's tput_per_gpu (the x axis of its throughput-per-GPU charts): input and output tokens, every GPU
    out["total_token_throughput_per_gpu"] = out["total_token_throughput"] / gpus
    out["output_throughput_per_user"] = output_throughput_per_user(tpot)
    out["num_warmup"] = num_warmup
    out["itl_excludes_warmup"] = itl_measured
    if goodput_ms:  # vLLM writes no SLOs; ours only where --goodput gave them. The name ends in no "ms": scripts
        # written for vLLM's files (InferenceX's process_result) float() every key ending in "ms", and a dict fails.
        out["goodput_config"] = dict(goodput_ms)  # metric -> bound in ms, as --goodput takes them (vLLM's dict)
    return out


def load_settings(result: RunResult) -> dict[str, Any]:
    """The load a run simulated, under the names ``vllm bench serve`` saves them."""
    w = result.config.workload
    concurrency = getattr(w, "concurrency", None)
    # A closed loop without --qps sends as fast as its users allow (vllm bench's infinite rate under
    # --max-concurrency); a trace has no configured rate (its timestamps are the load: null, and no line printed).
    rate: float | None = (math.inf if w.arrival == "burst" else None if w.arrival == "trace" else float(w.qps))
    burstiness = 1.0 / w.cv**2 if w.arrival == "gamma" else 1.0
    # num_prompts: the measured requests, as vLLM's (its --num-warmups are sent besides them)
    out = {"backend": "servesim", "model_id": result.config.replica.model, "num_prompts": w.num_requests - w.num_warmup,
           "request_rate": "inf" if rate is not None and math.isinf(rate) else rate, "burstiness": burstiness,
           "max_concurrency": concurrency}
    if w.num_warmup:  # (vllm bench drains its warm-ups first; a steady warm-up ran beside the measured requests)
        out.update(num_warmups=w.num_warmup, warmup_mode=w.warmup_mode)
    return out


def format_vllm(metrics: dict[str, Any], settings: dict[str, Any] | None = None,
                percentiles_: Sequence[float] = DEFAULT_PERCENTILES) -> str:
    """``metrics`` as the result block ``vllm bench serve`` prints (labels 40 wide), with our
    per-GPU and per-user lines after its throughput lines."""
    lines = [f"{' Serving Benchmark Result ':=^50}"]

    def row(label: str, value: Any, fmt: str = "") -> None:
        lines.append(f"{label:<40} {format(value, fmt):<10}".rstrip())

    row("Successful requests:", metrics["completed"])
    row("Failed requests:", metrics["failed"])
    settings = settings or {}
    if settings.get("max_concurrency") is not None:
        row("Maximum request concurrency:", settings["max_concurrency"])
    if settings.get("request_rate") not in (None, "inf"):
        row("Request rate configured (RPS):", settings["request_rate"], ".2f")
    if metrics.get("num_warmup"):
        row("Warm-up requests (excluded):", metrics["num_warmup"])
    row("Benchmark duration (s):", metrics["duration"], ".2f")
    row("Total input tokens:", metrics["total_input_tokens"])
    row("Total generated tokens:", metrics["total_output_tokens"])
    row("Request throughput (req/s):", metrics["request_throughput"], ".2f")
    if metrics.get("request_goodput") is not None:
        row("Request goodput (req/s):", metrics["request_goodput"], ".2f")
    row("Output token throughput (tok/s):", metrics["output_throughput"], ".2f")
    if metrics.get("max_output_tokens_per_s") is not None:  # (None: the run kept no token times to count)
        row("Peak output token throughput (tok/s):", metrics["max_output_tokens_per_s"], ".2f")
    row("Peak concurrent requests:", metrics["max_concurrent_requests"], ".2f")
    row("Total Token throughput (tok/s):", metrics["total_token_throughput"], ".2f")
    row(f"Output tok/s per GPU ({metrics['num_gpus']} GPUs):", metrics["output_throughput_per_gpu"], ".2f")
    if "total_token_throughput_per_gpu" in metrics:  # (a metrics dict saved before the key)
        row("Total tok/s per GPU:", metrics["total_token_throughput_per_gpu"], ".2f")
    per_user = metrics["output_throughput_per_user"]
    if math.isnan(per_user):  # no measured TPOT above 0 to invert (1-token outputs; 2 tokens delivered at once)
        row("Output tok/s per user (mean 1/TPOT):", "n/a (no request with a TPOT above 0)")
    else:
        row("Output tok/s per user (mean 1/TPOT):", per_user, ".2f")
    for key, name, header in METRICS:
        lines.append(f"{header:-^50}")
        row(f"Mean {name} (ms):", metrics[f"mean_{key}_ms"], ".2f")
        row(f"Median {name} (ms):", metrics[f"median_{key}_ms"], ".2f")
        for p in percentiles_:
            row(f"P{_word(p)} {name} (ms):", metrics[f"p{_word(p)}_{key}_ms"], ".2f")
    lines.append("=" * 50)
    if metrics.get("num_warmup") and not metrics.get("itl_excludes_warmup", True):
        lines.append("note: ITL includes the warm-up requests' gaps (the run kept no token times)")
    return "\n".join(lines)


def per_request_lists(result: RunResult, cols: dict[str, np.ndarray]) -> dict[str, list]:
    """The per-request lists of vLLM's JSON over the measured requests (send order):
    ``input_lens``, ``output_lens``, ``ttfts``, ``latencies`` (0 for a refused request, as vLLM's
    for a failed one), ``start_times`` (seconds), ``errors`` ('' or the refusal's reason), and
    ``itls`` (each request's gaps; none for a refused one) where the run kept token times."""
    order = send_order(result)
    measured = np.flatnonzero(measured_requests(result, cols["request_id"]))
    if order is not None:  # in the order they were sent (ids: rows; a request never sent, last)
        sent_at = np.full(len(cols["request_id"]), len(order), dtype=np.int64)
        sent_at[order] = np.arange(len(order))
        measured = measured[np.argsort(sent_at[cols["request_id"][measured]], kind="stable")]
    ok = cols["status"][measured] == "finished"

    def seconds(name: str) -> list[float]:
        # A refused request's 0.0, as vLLM writes a failed one's (its RequestFuncOutput's defaults): a null made
        # np.mean(doc["ttfts"]) fail in scripts written for vLLM's files; ``errors`` says which ones failed.
        return np.where(ok, cols[name][measured], 0.0).tolist()

    reasons = [str(e) for e in cols["reject_reason"][measured].tolist()]
    out: dict[str, list] = {
        "input_lens": cols["num_prompt_tokens"][measured].tolist(),
        "output_lens": np.where(ok, cols["num_output_tokens"][measured], 0).tolist(),
        "ttfts": seconds("ttft_s"),
        "latencies": seconds("e2e_s"),
        "start_times": cols["arrival_at"][measured].tolist(),
        # '' for a finished request, as vLLM's; a refused one's reason, never '' (readers tell failures by it)
        "errors": [e if good else e or "refused" for e, good in zip(reasons, ok.tolist(), strict=True)],
    }
    times = _token_times(result)
    if times is not None:
        first = _first_token_ats(result)
        gaps = (client_gaps(times[i], first[i]) if good else np.zeros(0)
                for i, good in zip(measured.tolist(), ok.tolist(), strict=True))
        out["itls"] = [g[g > 0].tolist() for g in gaps]  # per streamed chunk, as vLLM's (benchmark_metrics' ITL)
    return out


def result_json(result: RunResult, metrics: dict[str, Any], cols: dict[str, np.ndarray],
                date: str | None = None) -> dict[str, Any]:
    """The document ``--save-result`` writes: vLLM's keys (settings, figures, per-request lists)."""
    doc: dict[str, Any] = {"date": date or datetime.datetime.now().strftime("%Y%m%d-%H%M%S")}
    doc.update(load_settings(result))
    doc.update(metrics)
    doc.update(per_request_lists(result, cols))
    return doc


def save_result(path: Path, document: dict[str, Any]) -> None:
    """Write ``document`` as JSON (NaN and infinity as null), whole or not at all."""
    from simulator.util.jsonio import jsonable
    from simulator.util.paths import atomic_file

    with atomic_file(path, "--save-result") as tmp:
        tmp.write_text(json.dumps(jsonable(document), indent=2) + "\n")


def check_result_path(path: Path) -> None:
    """Refuse, before any work, a ``--save-result`` path that cannot be written as a file."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError("--save-result", f"{path} is a folder", "pass a file path, e.g. result.json")
    parent = path.parent if str(path.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise ConfigError("--save-result", f"{path} is under {parent}, which is a file", "pass a file path in a folder")
    if not parent.is_dir():
        raise ConfigError("--save-result", f"folder {parent} does not exist", "create it or pass another path")
    # A folder that refuses files (read-only, /proc) would end the run in an OSError traceback when writing.
    check_out_file(path, "--save-result")
