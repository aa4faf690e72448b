"""Metrics of disaggregated runs, and the SLO attainment both kinds of run share.

Computed after the run from the request frame (:func:`simulator.report.metrics.request_frame`),
the iteration records and the handoff log (:class:`simulator.engine.disagg.HandoffLog`):

- TTFT split: ``queue`` (arrival -> first scheduled on a prefill replica), ``prefill``
  (first scheduled -> the first token computed, which the prefill replica emits, so recompute
  after a prefill-pool preemption lands here) and ``delivery`` (-> the client gets it: the
  handoff and the decode worker's first step where that worker delivers it, ``first_token_at
  decode``; 0 where the prefill worker does); the handoff: ``backpressure`` (prompt done ->
  decode blocks reserved), ``stack`` (the engine's handoff latency: router hop and connector
  handshake), ``link_queue`` (-> link free), ``transfer`` (on the link) and ``handoff_gap``
  (first -> second token computed: these plus waiting for and running the first decode step);
- ``decode_tbt``: gaps between tokens the decode pool produced (every gap but the first
  of each request), so a prefill stall in the decode pool would show there;
- per pool: busy fraction (compute time / span) and KV occupancy (``kv_blocks_used /
  num_blocks`` as iterations saw it: mean weighted by iteration time, and max; blocks
  parked for a transfer count as used);
- link: bytes moved, transfers, utilisation (time on the link / span: the busiest link's
  with per-worker links, and ``link_utilization_by_link`` each link's where there are several);
- SLO attainment (DistServe's, :func:`slo_attainment`): share of *all* requests (rejected ones miss) with TTFT <=
  ``ttft_slo_s`` and TPOT <= ``tpot_slo_s`` (a one-token request has no TPOT and meets it). ``disagg split`` and
  ``compare`` judge layouts by it; a run's summary has its own, stricter SLO attainment (TTFT and every gap), which
  serves both kinds of run, so :func:`disagg_summary` does not add a second figure under the same name.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from simulator.report.benchmark import measured_mask, measured_requests, send_order, warmup_count
from simulator.report.metrics import quantile_stats, within_slo

if TYPE_CHECKING:
    from simulator.engine.cluster import RunResult


def slo_attainment(requests: pd.DataFrame, ttft_slo_s: float, tpot_slo_s: float) -> float:
    """Fraction of requests finished with TTFT <= ``ttft_slo_s`` and TPOT <= ``tpot_slo_s``."""
    if len(requests) == 0:
        return math.nan
    ok = within_slo((requests["status"] == "finished").to_numpy(), requests["ttft_s"].to_numpy(),
                    requests["tpot_s"].to_numpy(), ttft_slo_s, tpot_slo_s)
    return float(ok.mean())


def decode_tbt_samples(result: RunResult, num_warmup: int = 0) -> np.ndarray:
    """Gaps between consecutive tokens after each request's second token began (tokens 2..n), of the requests
    sent after the first ``num_warmup`` that the decode pool served (a mixed replica's gaps carry its prefills)."""
    mixed = result.disagg.handoff.mixed if result.disagg is not None else None
    reqs = result.requests
    measured = measured_mask(np.fromiter((r.request_id for r in reqs), dtype=np.int64, count=len(reqs)), num_warmup,
                             send_order(result))
    gaps = [np.diff(np.frombuffer(r.token_times, dtype=np.float64)[1:]) for r, keep in zip(reqs, measured, strict=True)
            if keep and len(r.token_times) > 2 and (mixed is None or not mixed[r.request_id])]
    return np.concatenate(gaps) if gaps else np.empty(0)


def handoff_frame(result: RunResult, requests: pd.DataFrame) -> pd.DataFrame:
    """One row per request: the TTFT split and the handoff timeline."""
    assert result.disagg is not None
    log = result.disagg.handoff
    df = log.frame()
    # token_times keep where each token was computed: the first on the prefill replica, whichever worker
    # delivered it to the client (RunConfig.first_token_at; first_token_at is the delivery).
    first = np.array([r.token_times[0] if len(r.token_times) else np.nan for r in result.requests])
    second = np.array([r.token_times[1] if len(r.token_times) > 1 else np.nan for r in result.requests])
    df["queue_s"] = requests["first_scheduled_at"].to_numpy() - requests["arrival_at"].to_numpy()
    df["prefill_s"] = first - requests["first_scheduled_at"].to_numpy()
    df["delivery_s"] = requests["first_token_at"].to_numpy() - first  # > 0 where the decode worker delivers it
    df["backpressure_s"] = df["decode_reserved_at"] - df["prefill_done_at"]
    df["stack_s"] = df["handoff_done_at"] - df["decode_reserved_at"]  # the engine's handoff latency
    df["link_queue_s"] = df["transfer_start_at"] - df["handoff_done_at"]
    df["transfer_s"] = df["transfer_end_at"] - df["transfer_start_at"]
    df["seat_wait_s"] = df["decode_seated_at"] - df["transfer_end_at"]  # landed, waiting for a decode seat
    df["handoff_gap_s"] = second - first
    return df


def disagg_summary(result: RunResult, requests: pd.DataFrame) -> dict[str, Any]:
    """Pool-aware headline numbers of a disaggregated run (see the module docstring)."""
    info = result.disagg
    assert info is not None
    handoff = handoff_frame(result, requests)
    start = float(requests["arrival_at"].min()) if len(requests) else 0.0
    span = max(result.sim_end_at - start, 1e-12)
    # The warm-up requests (--num-warmup) leave the per-request figures, as every other figure of the run;
    # what the pools and links were busy with (utilization, occupancy) stays the whole run's.
    num_warmup = warmup_count(result)
    if num_warmup:
        measured = measured_requests(result, requests["request_id"].to_numpy())
        handoff, requests = handoff[measured], requests[measured]
    out: dict[str, Any] = {"layout": info.layout, "num_gpus": info.num_gpus}
    transferred = handoff[~np.isnan(handoff["transfer_end_at"])]
    for col in ("queue_s", "prefill_s", "delivery_s", "backpressure_s", "stack_s", "link_queue_s", "transfer_s",
                "seat_wait_s", "handoff_gap_s"):
        source = handoff if col in ("queue_s", "prefill_s", "delivery_s") else transferred
        out.update(quantile_stats(source[col].to_numpy(dtype=np.float64), col))
    out.update(quantile_stats(decode_tbt_samples(result, num_warmup), "decode_tbt_s"))
    out["num_transfers"] = int(len(transferred))
    out["num_mixed"] = int(handoff["mixed"].sum())
    out["transfer_bytes"] = float(transferred["kv_bytes"].sum())
    out["link_utilization"] = info.link_busy_s / span  # the busiest link's
    if info.links_busy_s is not None and len(info.links_busy_s) > 1:
        out["link_utilization_by_link"] = {name: busy / span for name, busy in info.links_busy_s.items()}
    pools = np.array(info.pools)
    iters = result.iteration_frame()
    num_blocks = np.array(info.num_blocks, dtype=np.float64)
    for pool in ("prefill", "decode", "mixed"):
        ids = np.flatnonzero(pools == pool)
        if len(ids) == 0:
            continue
        out[f"{pool}_busy_fraction"] = float(np.mean([result.replica_busy_s[i] / span for i in ids]))
        mine = iters[iters["replica_id"].isin(ids)]
        if len(mine):
            occ = mine["kv_blocks_used"].to_numpy() / num_blocks[mine["replica_id"].to_numpy()]
            w = mine["duration_s"].to_numpy()
            out[f"{pool}_kv_occupancy_mean"] = float((occ * w).sum() / w.sum()) if w.sum() > 0 else math.nan
            out[f"{pool}_kv_occupancy_max"] = float(occ.max())
    return out
