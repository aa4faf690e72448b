"""Session and prefix figures of a finished run: TTFT split into queue and prefill, per-session latency.

TTFT split (every served request): *queue* is ``first_scheduled_at - arrival_at`` (waiting for
admission: a slot, KV blocks, the token budget); *prefill* is ``first_token_at -
first_scheduled_at`` (the prompt's uncached tokens running, in one chunk or several, with the
iterations between chunks). The two add up to TTFT exactly. A cached prefix shortens the
prefill part; a router that piles requests on one replica lengthens the queue part.

Per session (requests sharing a ``session_id`` >= 0, conversation or agent traffic): its number
of requests, its span from the first request's send to the last one's completion (for closed-loop
sessions this includes think times, so it is what a user waits in all), the sum and the mean of
its requests' TTFT and E2E, and the share of its prompt tokens found cached.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.report.metrics import quantile_stats, request_columns

if TYPE_CHECKING:

    from simulator.engine.cluster import RunResult


def ttft_split(result: RunResult) -> dict[str, float]:
    """P50/P90/P99, mean and max of TTFT, its queue part and its prefill part (seconds)."""
    cols = request_columns(result)
    served = ~np.isnan(cols["first_token_at"])
    queue = (cols["first_scheduled_at"] - cols["arrival_at"])[served]
    prefill = (cols["first_token_at"] - cols["first_scheduled_at"])[served]
    return {**quantile_stats(queue + prefill, "ttft_s"), **quantile_stats(queue, "ttft_queue_s"),
            **quantile_stats(prefill, "ttft_prefill_s")}


def _session_ids(result: RunResult) -> np.ndarray:
    reqs = result.requests
    return np.fromiter((getattr(r, "session_id", -1) for r in reqs), dtype=np.int64, count=len(reqs))


def session_columns(result: RunResult) -> dict[str, np.ndarray]:
    """One entry per session (sorted by id): ``session_id, num_requests, started_at, ended_at,
    span_s, ttft_sum_s, ttft_mean_s, e2e_sum_s, cached_share``. Sessions with a request not
    served (refused, or a run stopped early) have NaN ``ended_at``/``span_s``."""
    cols = request_columns(result)
    sessions = _session_ids(result)
    keep = sessions >= 0
    if not keep.any():
        return {name: np.zeros(0) for name in ("session_id", "num_requests", "started_at", "ended_at", "span_s",
                                               "ttft_sum_s", "ttft_mean_s", "e2e_sum_s", "cached_share")}
    ids, inverse, counts = np.unique(sessions[keep], return_inverse=True, return_counts=True)
    n = len(ids)
    arrival = cols["arrival_at"][keep]
    completed = cols["completed_at"][keep]
    ttft = (cols["first_token_at"] - cols["arrival_at"])[keep]
    e2e = (cols["completed_at"] - cols["arrival_at"])[keep]
    cached = np.fromiter((r.num_cached_tokens for r in result.requests), dtype=np.float64,
                         count=len(result.requests))[keep]
    prompt = cols["num_prompt_tokens"][keep].astype(np.float64)
    started = np.full(n, np.inf)
    np.minimum.at(started, inverse, arrival)
    ended = np.full(n, -np.inf)
    np.maximum.at(ended, inverse, np.where(np.isnan(completed), np.inf, completed))
    ended[np.isinf(ended)] = np.nan  # a request of the session never completed
    ttft_sum = np.bincount(inverse, weights=np.nan_to_num(ttft, nan=0.0), minlength=n)
    served = np.bincount(inverse, weights=(~np.isnan(ttft)).astype(np.float64), minlength=n)
    e2e_sum = np.bincount(inverse, weights=np.nan_to_num(e2e, nan=0.0), minlength=n)
    cached_share = np.bincount(inverse, weights=cached, minlength=n) / np.bincount(inverse, weights=prompt, minlength=n)
    return {"session_id": ids, "num_requests": counts, "started_at": started, "ended_at": ended,
            "span_s": ended - started, "ttft_sum_s": ttft_sum,
            "ttft_mean_s": np.where(served > 0, ttft_sum / np.maximum(served, 1), np.nan),
            "e2e_sum_s": e2e_sum, "cached_share": cached_share}


def session_summary(result: RunResult) -> dict[str, Any]:
    """Quantiles over sessions of their span, their summed TTFT and their mean TTFT; empty
    when the run has no sessions."""
    cols = session_columns(result)
    if not len(cols["session_id"]):
        return {}
    return {"num_sessions": len(cols["session_id"]), **quantile_stats(cols["span_s"], "session_span_s"),
            **quantile_stats(cols["ttft_sum_s"], "session_ttft_sum_s"),
            **quantile_stats(cols["ttft_mean_s"], "session_ttft_mean_s")}
