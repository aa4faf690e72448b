"""Capacity search: the largest Poisson request rate a configuration serves within its SLO.

Definition (DESIGN.md, after Sarathi-Serve): the capacity of a configuration is the
largest QPS at which

- the ``tbt_quantile`` (default P99) of *all* time-between-tokens gaps is <= ``tbt_s``, and
- the ``sched_delay_quantile`` (default P50) of the scheduling delay is <= ``sched_delay_s``
  (2 s: a system whose queue grows without bound fails this however fast it decodes; in a
  disaggregated deployment both waits count, for a prefill worker and for a decode seat:
  :func:`scheduling_delays`);

optionally also a TTFT quantile limit, a TPOT quantile limit (over the requests' own TPOT:
"P99 TPOT <= 50 ms") and a goodput criterion (the share of requests whose
TTFT <= ``goodput_ttft_s`` and whose largest TBT gap <= ``tbt_s``, DistServe-style, must be
>= ``min_goodput``). Quantiles are over finished requests, as :mod:`simulator.report.metrics`
computes them; rejected requests only count (as misses) in goodput.

``criterion="goodput"`` searches on DistServe's (OSDI'24) definition instead: the largest
QPS at which at least ``min_goodput`` (default 90%) of all requests meet both the TTFT SLO
``goodput_ttft_s`` and the TPOT SLO ``goodput_tpot_s`` (default: ``tbt_s``); the TBT and
scheduling-delay limits are then reported, not judged. Every trial reports its goodput either
way, so the default answer shows it at capacity too.

Search: one *trial* simulates ``num_requests`` (2048 by default at the CLI) Poisson arrivals
at a QPS and checks the SLO. Trials are bracketed by doubling/halving from a start QPS, then
bisected until the bracket's relative gap ``(fail - pass) / fail`` is <= ``rel_tol``
(2.5%); the capacity is the largest passing QPS. Every trial of one seed uses the same
request lengths and the same unit-rate arrival draws scaled by 1/QPS (the workload draws
lengths first, then arrivals), so trials differ only in load: common random numbers keep
the pass/fail boundary sharp. One 2048-request trial is still noisy; ``num_seeds > 1``
repeats the whole search with seeds ``seed, seed+1, ...`` and reports the spread.

Sustained (:func:`sustained`): capacity is the largest rate the server sustains, so a rate trial that meets
the SLO still fails when the run itself is overloaded (its queue still growing at the last arrival, the
last quarter waiting past the SLO's wait limit: a longer trial fails), and is too short to judge, neither
pass nor failure, when its arrivals span less than that limit (a queue the server cannot drain has no time
to show). A search whose answer lies below such trials reports it as a lower bound set by the trial length.

Users instead of a rate (``SearchSettings.users``): each trial is a closed loop of ``N`` users, each
sending its next request when its last one ends (``workload.concurrency``, no rate), judged on the same
SLO; ``N`` is a whole number and the bisection ends at neighbours (or the relative gap), so the answer
is the most users that pass. The first trial's ``N`` is the config's concurrency (16 where it has none).

Early exit: a trial certain to fail is stopped (via the engine's ``watch`` hook) as soon as
that is certain, with the verdict running it to the end would give, only cheaper: when
enough requests have waited longer than the scheduling-delay limit, or when enough TBT gaps
above the TBT limit are already in the replicas' gap logs for the TBT quantile to exceed it
however the run goes on (the run can make at most ``sum(output tokens - 1)`` gaps). Checks
run at arrival instants only, so a watch never extends a run. A stopped trial reports no
latency figures (NaN), only why it stopped.

Zero capacity: if the limit judged is below a true lower bound on it, no load can meet it,
and the search says so without running trials (:func:`impossible_reason`): for the TBT
quantile, the cheapest possible iteration (one decode, no prefill); for DistServe's TPOT, the
cheapest iteration a token, where every request's floor above the limit leaves too few to
reach ``min_goodput``. With speculative decoding a step also pays for its drafter but emits up
to ``k + 1`` tokens at once (per-token gaps of 0 between them), so the TPOT floor is the
cheapest step over the most tokens it emits and a TBT quantile has a floor only above the
``k / (k + 1)`` share zero gaps can take (:class:`StepFloor`, :func:`zero_gap_factor`). If
trials fail down to ``min_qps``, capacity is 0 with the last failure's reason.
"""

from __future__ import annotations

import math
import time
from array import array
from collections.abc import Callable, Collection, Iterator
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simulator import simulation
from simulator.config.errors import ConfigError
from simulator.config.limits import MAX_SEEDS
from simulator.config.run_config import RunConfig, WorkloadConfig
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape
from simulator.engine.tbt import GapLog, percentiles
from simulator.planning.options import SLO, SearchSettings  # declared with the planner options
from simulator.planning.search import NEVER, Limits, Outcome, Verdict, largest_passing
from simulator.report.benchmark import measured_gaps
from simulator.report.metrics import (
    measured_columns,
    overload_summary,
    queue_delays,
    request_columns,
    within_slo,
)
from simulator.workload.request import Request, Status

if TYPE_CHECKING:  # pandas loads for tables, not for a search
    import pandas as pd

    from simulator.engine.cluster import RunResult

RATE_ARRIVALS = ("poisson", "gamma", "fixed")
DEFAULT_FIRST_USERS = 16  # a users search's first trial where the config names no concurrency


@dataclass(frozen=True)
class Trial:
    """One simulated load level and its verdict. Latencies in seconds (NaN when unknown).
    ``qps`` is the load: the Poisson rate, or in a users search (``SearchSettings.users``) the
    closed loop's users (a whole number; the tables name the column ``users`` then)."""

    seed: int
    qps: float
    passed: bool
    reason: str  # why it failed; "" when it passed
    tbt_s_q: float  # the SLO's TBT quantile
    sched_delay_s_q: float  # the SLO's scheduling-delay quantile
    tbt_s_p99: float
    ttft_s_p50: float
    ttft_s_p99: float
    tpot_s_q: float  # the SLO's TPOT quantile (P99 without a TPOT limit), over requests with a TPOT
    tpot_s_p50: float
    tpot_s_p99: float
    goodput_fraction: float
    num_finished: int
    num_rejected: int
    stopped_early: bool
    wall_s: float
    arrival_span_s: float = math.nan  # the measured requests' first to last arrival (NaN: a users search's)
    # It met the SLO, but its arrivals span less than the shortest wait limit it judges: a rate the server
    # cannot sustain passes such a trial, so it counts as no pass (:func:`run_trial`); ``passed`` is False.
    too_short: bool = False
    reject_reason: str = ""  # one rejected request's reason ("" when none was): refused by size, at any load
    # Output tokens a second over the measured load (vllm bench serve's output throughput); NaN: stopped early
    output_tok_s: float = math.nan

    @property
    def all_rejected(self) -> bool:
        """Every request judged was refused on arrival (run_trial's 'every request was rejected'): by its own size
        against the config (a prompt over the token budget, a request over max_model_len or the KV cache), the
        same at any load, so no lower load can pass."""
        return not self.stopped_early and self.num_finished == 0 and self.num_rejected > 0

    @property
    def verdict(self) -> Verdict:
        """The search's verdict (:mod:`simulator.planning.search`): a failure no load can turn is NEVER."""
        return NEVER if self.all_rejected else self.passed


@dataclass
class SeedResult:
    """The search for one seed: its trials in the order run, and the answer."""

    seed: int
    capacity_qps: float
    reason: str  # how the search ended (converged, capacity 0 because ..., max trials, ...)
    trials: list[Trial] = field(default_factory=list)
    not_found: bool = False  # the trials ran out before any passed: the capacity is below the lowest tried, not 0
    at_least: bool = False  # no trial failed (the ceiling or the trials ran out): the capacity is at least this
    too_short: bool = False  # the rate above the answer was too short a trial to judge: the capacity is at least this
    # The answer is settled: bracketed to rel_tol, or 0 for certain. False where the search stopped short of
    # that (max_trials, the ceiling, trials too short): its capacity is a bracket's end or a lower bound.
    converged: bool = True

    @property
    def at_capacity(self) -> Trial | None:
        passing = [t for t in self.trials if t.passed and t.qps == self.capacity_qps]
        return passing[-1] if passing else None


@dataclass
class CapacityReport:
    """Capacity over one or more seeds; ``capacity_qps`` is their mean."""

    config: RunConfig
    slo: SLO
    settings: SearchSettings
    seeds: list[SeedResult]
    wall_s: float = 0.0

    @property
    def capacities(self) -> np.ndarray:
        return np.array([s.capacity_qps for s in self.seeds], dtype=np.float64)

    @property
    def capacity_qps(self) -> float:
        return float(self.capacities.mean())

    @property
    def capacity_qps_std(self) -> float:
        return float(self.capacities.std(ddof=1)) if len(self.seeds) > 1 else 0.0

    @property
    def unit(self) -> str:
        """What the search varied: ``qps`` (the Poisson rate) or ``users`` (the closed loop's)."""
        return "users" if self.settings.users else "qps"

    def trials_frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = [asdict(t) for s in self.seeds for t in s.trials]
        columns = [f.name for f in Trial.__dataclass_fields__.values()]
        return pd.DataFrame(rows, columns=columns).rename(columns={"qps": self.unit})

    def _trial_dict(self, trial: Trial) -> dict[str, Any]:
        """A trial as the JSON writes it: its load named by :attr:`unit`."""
        return {(self.unit if k == "qps" else k): v for k, v in asdict(trial).items()}

    def at_capacity_mean(self, key: str) -> float:
        values = [getattr(s.at_capacity, key) for s in self.seeds if s.at_capacity is not None]
        return float(np.mean(values)) if values else math.nan

    def summary(self, include_wall: bool = True) -> dict[str, Any]:
        """Flat headline numbers (what ``--json`` prints, one sweep row)."""
        caps = self.capacities
        unit = self.unit  # a users search's keys say users: capacity_users, ...
        out: dict[str, Any] = {
            f"capacity_{unit}": self.capacity_qps,
            f"capacity_{unit}_std": self.capacity_qps_std,
            f"capacity_{unit}_min": float(caps.min()),
            f"capacity_{unit}_max": float(caps.max()),
            # No trial failed (the search's ceiling or its trials ran out first): the capacity is a lower bound.
            # One censored seed makes the mean over seeds a lower bound too: it counts the seed at its bound.
            "capacity_is_lower_bound": any(s.at_least for s in self.seeds),
            "num_seeds_lower_bound": sum(s.at_least for s in self.seeds),
            # Every seed's answer settled (bracketed to rel_tol, or 0 for certain); False where one stopped at
            # max_trials with a wider bracket, or is a lower bound.
            "capacity_converged": all(s.converged for s in self.seeds),
            # A seed's trials ran out before any passed: its 0 is no capacity found, not a capacity of 0 (and
            # the mean over seeds counts it as 0).
            "capacity_not_found": any(s.not_found for s in self.seeds),
            # Trials above a seed's answer were too short to judge (their arrivals span less than the SLO's wait
            # limit, :func:`sustained`): its answer is a lower bound set by --num-requests, not by the server.
            "capacity_limited_by_trial_length": any(s.too_short for s in self.seeds),
            "num_seeds": len(self.seeds),
            "num_trials": sum(len(s.trials) for s in self.seeds),
            "tbt_s_q_at_capacity": self.at_capacity_mean("tbt_s_q"),
            "tbt_s_p99_at_capacity": self.at_capacity_mean("tbt_s_p99"),
            "ttft_s_p50_at_capacity": self.at_capacity_mean("ttft_s_p50"),
            "ttft_s_p99_at_capacity": self.at_capacity_mean("ttft_s_p99"),
            "tpot_s_q_at_capacity": self.at_capacity_mean("tpot_s_q"),
            "tpot_s_p50_at_capacity": self.at_capacity_mean("tpot_s_p50"),
            "tpot_s_p99_at_capacity": self.at_capacity_mean("tpot_s_p99"),
            "sched_delay_s_q_at_capacity": self.at_capacity_mean("sched_delay_s_q"),
            "goodput_fraction_at_capacity": self.at_capacity_mean("goodput_fraction"),
            "output_tok_s_at_capacity": self.at_capacity_mean("output_tok_s"),
            "reason": "; ".join(sorted({s.reason for s in self.seeds})),
            "slo": self.slo.describe(),
        }
        if include_wall:
            out["wall_s"] = self.wall_s
        return out

    def to_dict(self) -> dict[str, Any]:
        out = self.summary()
        out["slo_settings"] = asdict(self.slo)
        out["search_settings"] = asdict(self.settings)
        out["per_seed"] = [{"seed": s.seed, f"capacity_{self.unit}": s.capacity_qps, "reason": s.reason,
                            "at_capacity": self._trial_dict(s.at_capacity) if s.at_capacity else None}
                           for s in self.seeds]
        out["trials"] = [self._trial_dict(t) for s in self.seeds for t in s.trials]
        out["config"] = self.config.to_dict()
        return out


# ---------------------------------------------------------------------------------------------
# One trial


def certain_fail_count(num_values: int, quantile: float) -> int:
    """How many of at most ``num_values`` values must exceed a limit for their quantile to
    exceed it for sure.

    ``np.percentile`` (linear) at ``q`` over ``m`` values interpolates between the sorted
    values at ``floor(p)`` and ``ceil(p)``, ``p = (m - 1) q / 100``; it exceeds the limit if
    both do (the interpolation never falls below the lower one), i.e. if at least
    ``m - floor(p)`` values exceed it. That count never decreases with ``m``, so an upper
    bound on ``m`` is safe: the number of submitted requests for scheduling delay, even if
    some are rejected (and so left out of the finished set); the most gaps the requests
    can make for TBT (:func:`simulator.engine.tbt.percentiles` is ``np.percentile`` exactly).
    """
    return num_values - math.floor((num_values - 1) * quantile / 100.0)


class ArrivalWatch:
    """A ``simulate(watch=...)`` process that stops a trial once it is certain to fail.

    At every ``n // num_checks``-th arrival instant it counts the requests arrived so far that
    are certainly late (:meth:`is_late`, a judgement that can only stay true as time goes on)
    and raises :class:`~simulator.engine.cluster.StopRun` once ``late >= threshold(n)``. Checks run at
    arrival instants only, which the run reaches anyway, so watching never changes a run that
    is not stopped. Subclasses say what late means, and when a request's verdict is final
    (:meth:`is_settled`): a check re-judges only the requests still open, so a trial's checks
    cost about one look per request, not one per request and check.
    """

    num_checks = 64
    # is_late reads only timestamps set when they happen (arrival, first scheduled, first token,
    # completion) and status, never running requests' counters: lockstep decodes may stay on.
    reads_only_timestamps = True
    _settle: Callable[[float], None] | None = None

    _num_sent: Callable[[], int] | None = None
    _until_sent: Callable[[int], simpy.Event | None] | None = None

    def watch_sent(self, num_sent: Callable[[], int],
                   until_sent: Callable[[int], simpy.Event | None] | None = None) -> None:
        """The engine's hook in a closed loop: ``num_sent()`` requests (the first ones of the list)
        were sent; the others' ``arrival_at`` is the time they became ready, and they wait on the
        client, not on the engine (they had counted as waiting to be scheduled). ``until_sent(i)``:
        an event at the instant request ``i`` is sent (None once it is), so that a check waits
        for its request's send, not its ready time (a burst closed loop's are all 0, and every
        check had run at 0, stopping nothing)."""
        self._num_sent = num_sent
        self._until_sent = until_sent

    def watch_settle(self, settle: Callable[[float], None]) -> None:
        """The engine's hook: ``settle(now)`` brings the replicas' state to now (a stretch in
        flight applied up to it); called at each check before anything is read."""
        self._settle = settle

    def threshold(self, num_requests: int) -> int:
        raise NotImplementedError

    def is_late(self, req: Request, now_at: float) -> bool:
        raise NotImplementedError

    def is_settled(self, req: Request) -> bool:
        """Whether ``req``'s verdict (late or not) can no longer change, whatever happens next."""
        raise NotImplementedError

    def stop_message(self, late: int, num_requests: int, now_at: float) -> str:
        raise NotImplementedError

    def certain_otherwise(self, now_at: float) -> str | None:
        """A reason the trial is certain to fail other than late requests (checked at the
        same instants), or None; none by default."""
        return None

    def __call__(self, env: simpy.Environment, requests: list[Request]) -> Iterator[simpy.Event]:
        n = len(requests)
        needed = self.threshold(n)
        every = max(1, n // self.num_checks)
        # Invariant: ``late`` counts the arrived requests judged late at some check (late stays
        # late); ``open_reqs`` holds the other arrived ones whose verdict may still change; the
        # arrived requests in neither are settled on time. So ``late`` equals a full recount.
        late, num_arrived, open_reqs = 0, 0, []
        for index in range(every - 1, n, every):
            sent_event = self._until_sent(index) if self._until_sent is not None else None
            if sent_event is not None:  # a closed loop: check when the request is sent (its arrival)
                yield sent_event
            now_at = requests[index].arrival_at
            if now_at > env.now:
                yield env.timeout(now_at - env.now)
            if self._settle is not None:
                self._settle(now_at)
            sent = n if self._num_sent is None else self._num_sent()
            while num_arrived < sent and requests[num_arrived].arrival_at <= now_at:  # arrival order
                open_reqs.append(requests[num_arrived])
                num_arrived += 1
            still_open = []
            for req in open_reqs:
                if self.is_late(req, now_at):
                    late += 1
                elif not self.is_settled(req):
                    still_open.append(req)
            open_reqs = still_open
            if late >= needed:
                raise simulation.StopRun(self.stop_message(late, n, now_at))
            reason = self.certain_otherwise(now_at)
            if reason is not None:
                raise simulation.StopRun(reason)


class TTFTWatch(ArrivalWatch):
    """Stops a trial once more than ``(1 - attainment) * n`` requests have certainly missed
    the TTFT SLO (first token later than ``ttft_s`` after arrival, or still none that late):
    its goodput (or SLO attainment) is then certain to fall below ``attainment``."""

    def __init__(self, ttft_s: float, attainment: float, num_checks: int = 32) -> None:
        self.ttft_s, self.attainment, self.num_checks = ttft_s, attainment, num_checks
        self.num_late, self.num_requests = 0, 1
        # Of the late: those refused on arrival (a miss, but not a slow one: the stop message says so), one reason.
        self.num_rejected, self.reject_reason = 0, ""

    def threshold(self, num_requests: int) -> int:
        return math.floor((1.0 - self.attainment) * num_requests + 1e-9) + 1

    def is_late(self, req: Request, now_at: float) -> bool:
        if req.reject_reason is not None:  # (judged once: a late request leaves the open set)
            self.num_rejected += 1
            self.reject_reason = self.reject_reason or req.reject_reason
            return True
        if req.first_token_at is not None:
            return req.first_token_at - req.arrival_at > self.ttft_s
        return now_at - req.arrival_at > self.ttft_s

    def is_settled(self, req: Request) -> bool:
        return req.reject_reason is not None or req.first_token_at is not None

    def stop_message(self, late: int, num_requests: int, now_at: float) -> str:
        self.num_late, self.num_requests = late, num_requests  # the bound a caller may report
        if not self.num_rejected:
            return f"{late} of {num_requests} requests already missed TTFT {self.ttft_s:g}s"
        slow = late - self.num_rejected
        if not slow:
            return (f"{late} of {num_requests} requests already missed TTFT {self.ttft_s:g}s, rejected on arrival "
                    f"({self.reject_reason})")
        return (f"{late} of {num_requests} requests already missed TTFT {self.ttft_s:g}s: {slow} slow, "
                f"{self.num_rejected} rejected on arrival ({self.reject_reason})")


class GapsAbove:
    """How many TBT gaps above ``limit_s`` the replicas' live gap logs hold, counted as they
    grow: each :meth:`count` looks only at the runs appended since the last (a log that
    compacted, and so replaced its arrays, is recounted). None once any log is a sketch,
    whose bucketed values cannot be judged against the limit exactly."""

    def __init__(self, limit_s: float, logs: list[GapLog]) -> None:
        self.limit_s = limit_s
        self.logs = logs
        # Per log: the values array last seen, how many of its runs are counted, their count above.
        self._seen: list[tuple[array | None, int, int]] = [(None, 0, 0)] * len(logs)

    def count(self) -> int | None:
        total = 0
        for i, log in enumerate(self.logs):
            if not log.exact:
                return None
            values, num_seen, above = self._seen[i]
            if values is not log.values:
                num_seen, above = 0, 0
            end = len(log.values)
            if end > num_seen:
                new_values = np.frombuffer(log.values, dtype=np.float64)[num_seen:end]
                new_counts = np.frombuffer(log.counts, dtype=np.int64)[num_seen:end]
                above += int(new_counts[new_values > self.limit_s].sum())
            self._seen[i] = (log.values, end, above)
            total += above
        return total


class OverloadWatch(ArrivalWatch):
    """Stops a trial once its scheduling-delay quantile is certain to exceed the limit:
    scheduled requests count by their real delay, waiting ones by how long they have waited
    (their delay can only grow). With ``tbt_s``, also once the ``tbt_quantile`` of all TBT
    gaps is certain to exceed ``tbt_s`` (:class:`GapsAbove` against :func:`certain_fail_count`
    of the most gaps the requests can make); the engine hands it the gap logs
    (:meth:`watch_gaps`)."""

    def __init__(self, limit_s: float, quantile: float, num_checks: int = 64,
                 tbt_s: float | None = None, tbt_quantile: float = 99.0) -> None:
        self.limit_s = limit_s
        self.quantile = quantile
        self.num_checks = num_checks
        self.tbt_s = tbt_s
        self.tbt_quantile = tbt_quantile
        self._gaps: GapsAbove | None = None
        self._gaps_needed = 0
        self._max_gaps = 0

    def threshold(self, num_requests: int) -> int:
        return certain_fail_count(num_requests, self.quantile)

    def watch_gaps(self, logs: list[GapLog], requests: list[Request]) -> None:
        """The engine's hook: the replicas' gap logs (read, never written) and the requests."""
        if self.tbt_s is None:
            return
        self._max_gaps = sum(max(r.num_output_tokens - 1, 0) for r in requests)
        if self._max_gaps:
            self._gaps = GapsAbove(self.tbt_s, logs)
            self._gaps_needed = certain_fail_count(self._max_gaps, self.tbt_quantile)

    def certain_otherwise(self, now_at: float) -> str | None:
        if self._gaps is None:
            return None
        above = self._gaps.count()
        if above is None or above < self._gaps_needed:
            return None
        return (f"P{self.tbt_quantile:g} TBT certain to exceed {self.tbt_s:g}s: {above:,} gaps already above it, "
                f"of at most {self._max_gaps:,} (stopped at t={now_at:.1f}s)")

    def is_late(self, req: Request, now_at: float) -> bool:
        first = req.first_scheduled_at
        if first is not None:
            return first - req.arrival_at > self.limit_s
        return req.status is not Status.REJECTED and now_at - req.arrival_at > self.limit_s

    def is_settled(self, req: Request) -> bool:
        return req.first_scheduled_at is not None or req.status is Status.REJECTED

    def stop_message(self, late: int, num_requests: int, now_at: float) -> str:
        return (f"overloaded: {late} of {num_requests} requests already waited > {self.limit_s:g}s to be scheduled "
                f"(stopped at t={now_at:.1f}s)")


def format_against(value: float, limit: float, min_digits: int = 3) -> str:
    """``value`` with the fewest significant digits (at least ``min_digits``) that keep its
    side of ``limit`` as printed with ``:g``: 0.1004 against 0.1 is "0.1004", never "0.1",
    so a verdict like "0.1004 > 0.1" always reads true."""
    shown_limit = float(f"{limit:g}")
    text = f"{value:.{min_digits}g}"
    for digits in range(min_digits, 17):
        text = f"{value:.{digits}g}"
        shown = float(text)
        if (shown > shown_limit) == (value > limit) and (shown < shown_limit) == (value < limit):
            break
    return text


def _quantile(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if len(values) else math.nan


def scheduling_delays(result: RunResult, cols: dict[str, np.ndarray]) -> np.ndarray:
    """Each request's scheduling delay as the capacity criterion judges it: its waits in every queue on its way,
    a disaggregated request's after its prompt included (:func:`~simulator.report.metrics.queue_delays`)."""
    return queue_delays(result, cols)[0]


def trial_config(config: RunConfig, load: float, users: bool = False) -> RunConfig:
    """The run a trial at ``load`` makes of ``config``: ``load`` requests a second, or (``users``) a closed loop of
    ``load`` users, each sending its next request when its last ends, with no rate."""
    if users:
        return config.replace(workload__concurrency=int(load), workload__arrival="burst")
    return config.replace(workload__qps=load)


def seed_unread(config: RunConfig, users: bool = False) -> tuple[str, str] | None:
    """Why every seed of a search of ``config`` would run the very same trials (nothing in them is drawn at random,
    :func:`simulator.config.options.inert_options` on a trial's run: a closed loop of fixed lengths, say), and the
    fix (``{flag}`` standing for the flag); None where a trial reads its seed. The options' own check sees the
    config before ``--users`` makes its trials closed loops."""
    from simulator.config.options import draws_at_random

    trial = trial_config(config, max(config.workload.concurrency or 1, 1) if users else config.workload.qps, users)
    if draws_at_random(trial):
        return None
    # (a rate search's trials replay no trace clock, check_searchable: their lengths are fixed, their arrivals too)
    sent = "sent as --users' closed loops free up" if users else f"at {trial.workload.arrival} arrivals"
    return (f"nothing in the search's trials is drawn at random (fixed lengths {sent}; no --router random, no "
            "speculation)", "drop {flag} (a seed varies drawn lengths, sampled trace rows, Poisson or gamma gaps, "
            "--router random and speculation)")


def run_trial(config: RunConfig, qps: float, slo: SLO, early_exit: bool = True, tbt_early_exit: bool = True,
              users: bool = False) -> Trial:
    """Simulate ``config`` at ``qps`` and judge it against ``slo``, stopping as soon as it is
    certain to fail (``early_exit``; on the TBT limit too with ``tbt_early_exit``). ``users``:
    ``qps`` is a closed loop's users instead (``qps`` of them, each sending its next request when
    its last one ends, with no rate)."""
    start = time.perf_counter()
    cfg = trial_config(config, qps, users)
    if not early_exit or cfg.workload.num_warmup:  # (the watches count every request and gap: a warm-up's would end a trial)
        watch = None
    elif slo.criterion == "goodput":  # certain to miss the goodput target once too many are late for TTFT
        assert slo.min_goodput is not None
        watch = TTFTWatch(slo.goodput_ttft_s, slo.min_goodput)
    else:
        watch = OverloadWatch(slo.sched_delay_s, slo.sched_delay_quantile, tbt_s=slo.tbt_s if tbt_early_exit else None,
                              tbt_quantile=slo.tbt_quantile)
    result = simulation.simulate(cfg, watch=watch, record_iterations=False)  # a trial judges requests and gaps
    cols, good = judged_requests(result, slo)
    status = cols["status"]
    is_finished = status == Status.FINISHED.value
    num_rejected = int((status == Status.REJECTED.value).sum())
    rejected_why = str(cols["reject_reason"][status == Status.REJECTED.value][0]) if num_rejected else ""
    arrivals = cols["arrival_at"]
    span = math.nan if users or not len(arrivals) else float(arrivals.max() - arrivals.min())
    stopped = result.extra.get("stopped")
    if stopped is not None:
        nan = math.nan
        return Trial(cfg.seed, qps, False, str(stopped), nan, nan, nan, nan, nan, nan, nan, nan, nan,
                     int(is_finished.sum()), num_rejected, True, time.perf_counter() - start, span,
                     reject_reason=rejected_why)
    values, counts, _ = measured_gaps(result)
    # No TBT gaps at all (every output is one token) means the TBT limit holds vacuously.
    tbt_q, tbt_p99 = percentiles(values, counts, (slo.tbt_quantile, 99.0)) if len(values) else (0.0, 0.0)
    waits = queue_delays(result, cols)  # (once a trial: judged here and by sustained below)
    sched_q = _quantile(waits[0][is_finished], slo.sched_delay_quantile)
    ttft = cols["ttft_s"][is_finished]
    ttft_q = _quantile(ttft, slo.ttft_quantile)
    tpot = cols["tpot_s"][is_finished]  # NaN for a one-token output (no TPOT): _quantile leaves it out
    tpot_q = _quantile(tpot, slo.tpot_quantile)
    goodput = float(good.mean())
    num_finished = int(is_finished.sum())
    reasons = []
    if num_finished == 0:
        first = cols["reject_reason"][0] if len(status) else ""
        reasons.append(f"every request was rejected ({first})")
    else:
        judged = slo.criterion != "goodput"  # under goodput, TBT and scheduling delay are reported only
        if judged and tbt_q > slo.tbt_s:
            reasons.append(f"P{slo.tbt_quantile:g} TBT {format_against(tbt_q, slo.tbt_s)}s > {slo.tbt_s:g}s")
        if judged and sched_q > slo.sched_delay_s:
            reasons.append(f"P{slo.sched_delay_quantile:g} scheduling delay "
                           f"{format_against(sched_q, slo.sched_delay_s)}s > {slo.sched_delay_s:g}s")
        if slo.ttft_s is not None and ttft_q > slo.ttft_s:
            reasons.append(f"P{slo.ttft_quantile:g} TTFT {format_against(ttft_q, slo.ttft_s)}s > {slo.ttft_s:g}s")
        if slo.tpot_s is not None and tpot_q > slo.tpot_s:  # NaN (every output one token) holds vacuously
            reasons.append(f"P{slo.tpot_quantile:g} TPOT {format_against(tpot_q, slo.tpot_s)}s > {slo.tpot_s:g}s")
        if slo.min_goodput is not None and goodput < slo.min_goodput:
            reasons.append(f"goodput {format_against(100 * goodput, 100 * slo.min_goodput)}% "
                           f"< {100 * slo.min_goodput:g}%")
    too_short = False
    if not reasons and not users:  # (a closed loop's users wait for their replies: its queue cannot outgrow them)
        reasons, too_short = sustained(result, cols, slo, waits, span)
    from simulator.report.benchmark import measured_window

    begin, end = measured_window(result, cols)
    output_tok_s = float(cols["num_output_tokens"][is_finished].sum()) / (end - begin) if end > begin else math.nan
    return Trial(cfg.seed, qps, not reasons, "; ".join(reasons), tbt_q, sched_q, tbt_p99,
                 _quantile(ttft, 50.0), _quantile(ttft, 99.0), tpot_q, _quantile(tpot, 50.0), _quantile(tpot, 99.0),
                 goodput, num_finished, num_rejected, False, time.perf_counter() - start, span, too_short,
                 rejected_why, output_tok_s)


def judged_requests(result: RunResult, slo: SLO) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """A run's requests as a trial judges them, the warm-up left out as a run reports it (numpy columns: a trial
    needs no pandas), and which of them are good by ``slo``'s goodput rule (finished, TTFT within
    ``goodput_ttft_s``, and TPOT within ``goodput_tpot_s``, DistServe's, or else the largest TBT gap within
    ``tbt_s``). The one judgement of :func:`run_trial` and of the planner's fleet verification
    (:func:`simulator.planning.plan.measure`), so a fleet is held to what its units' capacity was."""
    cols = request_columns(result)
    cols = measured_columns(result, cols)
    finished = cols["status"] == Status.FINISHED.value
    if slo.goodput_tpot_s is not None:  # DistServe: TTFT and TPOT
        good = within_slo(finished, cols["ttft_s"], cols["tpot_s"], slo.goodput_ttft_s, slo.goodput_tpot_s)
    else:
        good = within_slo(finished, cols["ttft_s"], cols["max_tbt_s"], slo.goodput_ttft_s, slo.tbt_s)
    return cols, good


def sustained(result: RunResult, cols: dict[str, np.ndarray], slo: SLO,
              waits: tuple[np.ndarray, np.ndarray] | None = None, span_s: float | None = None) -> tuple[list[str], bool]:
    """Why a rate trial that met ``slo`` still shows no sustainable rate (an empty list where it does), and
    whether that is because it was too short to judge. ``cols``: the requests judged (:func:`judged_requests`);
    ``waits``: their :func:`~simulator.report.metrics.queue_delays` and ``span_s``: their first to last arrival,
    each computed here where not given. The judgement of :func:`run_trial` and of the disaggregation planner's goodput trials
    (:func:`simulator.planning.split.goodput_trial`, its SLO as :meth:`PlanSLO.capacity_slo`).

    Capacity is the largest rate the server sustains, and a finite trial at a rate above that meets the SLO
    whenever its run ends before its backlog waits past the SLO's wait limit (:meth:`SLO.wait_limit`): a
    2,048-request trial at 20,000 QPS arrives in 0.1 s, and its server, draining them at ~1,070 a second,
    kept every wait under 2 s. So a pass counts only if

    - the run's own overload verdict (:func:`simulator.report.metrics.overload_summary`, what ``simulate
      run`` prints as "load exceeds capacity"), judged at the wait limit and its percentile, clears it: no
      queue still growing at the last arrival with the last quarter's delay (P50 by default) past the limit.
      Such a queue grows on with the run, so a longer trial at this rate fails the SLO: the whole run's
      percentile passed only because the run ended. (At the default P50 and 2 s it is ``simulate run``'s
      verdict exactly.) And
    - its arrivals span at least the wait limit: a shorter trial cannot show a queue outgrowing the server
      (its backlog need not wait that long), so it is too short to judge, neither pass nor failure; the
      search's answer below it is then a lower bound (:func:`_seed_result`), not a capacity.
    """
    delays, left = waits if waits is not None else queue_delays(result, cols)
    if span_s is None:
        arrivals = cols["arrival_at"]
        span_s = float(arrivals.max() - arrivals.min()) if len(arrivals) else math.nan
    limit_s, quantile, limit_name = slo.wait_limit()
    overload = overload_summary({**cols, "sched_delay_s": delays, "left_queue_at": left}, limit_s, quantile)
    if overload["overloaded"]:
        first, last = (overload[f"sched_delay_s_p{quantile:g}_{part}_quarter"] for part in ("first", "last"))
        return [f"overloaded: the P{quantile:g} scheduling delay rose from {first:.3g}s (first quarter of arrivals) "
                f"to {format_against(last, limit_s)}s > {limit_s:g}s (last quarter) with "
                f"{overload['num_waiting_at_last_arrival']:,} requests still queued at the last arrival: arrivals "
                "outpace service"], False
    if span_s < limit_s:
        needed = math.ceil(len(cols["arrival_at"]) * limit_s / span_s) if span_s > 0 else None
        more = f" well above {needed:,} (what spans the limit at this rate)" if needed is not None else ""
        return [f"too short to judge: its {len(cols['arrival_at']):,} arrivals span {span_s:.3g}s, under the "
                f"{limit_s:g}s {limit_name}, so a rate the server cannot sustain passes it too (its backlog drains "
                f"within the limit); raise --num-requests{more}"], True
    return [], False


# ---------------------------------------------------------------------------------------------
# The search


@dataclass(frozen=True)
class StepFloor:
    """The cheapest steps that can emit a request's tokens after its first, for the pre-check.

    The cost model is (weakly) monotone in every field of a batch shape, so the step that ends
    any time-between-tokens gap lasts at least as long as the cheapest lone step that emits a
    token: a plain decode over a 2-token cache, or, where the run speculates, a verify of ``j``
    drafts (``j = 1..k``: the adaptive policies and the output cap cut ``k`` to any of them)
    over a 1-token context with the drafter's time. A speculating run takes plain steps too
    (a request's last token; an adaptive policy that turns speculation off), so both count.
    """

    plain_s: float  # a lone plain decode
    verify_s: tuple[float, ...] = ()  # verify_s[j - 1]: a lone verify of j drafts, drafter included
    max_accepted: int = 0  # the most drafts one verify can accept (0 without speculation)
    where: str = ""  # the layout, for messages

    @property
    def step_s(self) -> float:
        """The cheapest step of any kind: every non-zero gap lasts at least this long."""
        return min((self.plain_s, *self.verify_s))

    def cheapest_step(self) -> tuple[float, str]:
        """:attr:`step_s` and which step it is."""
        best, what = self.plain_s, "a lone plain decode"
        for j, t in enumerate(self.verify_s, start=1):
            if t < best:
                best, what = t, f"a lone verify of {j} draft{'s' * (j > 1)} with the drafter"
        return best, what

    def token_s(self) -> tuple[float, str]:
        """The least time a step can spend per token it emits, and the step: a plain decode
        emits one token, a verify of ``j`` drafts at most ``min(j, max_accepted) + 1``. So a
        request's TPOT, ``(last - first) / (n - 1)``, is never below it (its ``n - 1`` later
        tokens come from steps that each cost at least this a token)."""
        best, what = self.plain_s, "a lone plain decode (1 token)"
        for j, t in enumerate(self.verify_s, start=1):
            emitted = min(j, self.max_accepted) + 1
            if t / emitted < best:
                best, what = t / emitted, (f"a lone verify of {j} draft{'s' * (j > 1)}, "
                                           f"{t * 1e3:.3g} ms with the drafter, "
                                           f"emitting at most {emitted} tokens")
        return best, what

    @property
    def max_emitted(self) -> int:
        """The most tokens one step can emit."""
        return min(len(self.verify_s), self.max_accepted) + 1

    def tbt_quantile_s(self, quantile: float) -> float:
        """A lower bound on the ``quantile`` of all per-token TBT gaps of any run: the
        cheapest step times :func:`zero_gap_factor` (each verify step writes one non-zero gap
        and at most ``max_accepted`` zero gaps for the tokens it emits with it)."""
        return self.step_s * zero_gap_factor(quantile, self.max_accepted)


def zero_gap_factor(quantile: float, max_zeros_per_step: int) -> float:
    """The least ``quantile`` (percent, linear as :func:`simulator.engine.tbt.percentiles`)
    of any ``m >= 1`` gaps of which at most ``z / (z + 1)`` are 0 and the rest >= 1
    (``z = max_zeros_per_step``): 1 without zero gaps, 0 where the quantile can fall among them.

    With ``Z <= floor(z m / (z + 1))`` zeros the worst sample is ``Z`` zeros and ``m - Z`` ones;
    the quantile's virtual index ``h = (m - 1) q`` interpolates between the order statistics
    ``floor(h)`` and ``floor(h) + 1``. Once ``floor(h) >= Z`` for every larger ``m``
    (``m >= (1 + q) / (q - f)``, ``f = z / (z + 1)``) it is 1; below, a few ``m`` are checked
    exactly (a small run can put the quantile between a zero and a one). ``q <= f``: 0 (a
    long run can hold the quantile among the zeros; at ``q == f`` exactly this is conservative).
    """
    z = max_zeros_per_step
    if z <= 0:
        return 1.0
    q = float(np.true_divide(quantile, 100))
    f = z / (z + 1)
    if q <= f:
        return 0.0
    limit = math.ceil((1.0 + q) / (q - f)) + 2
    if limit > 1_000_000:  # q just above f: too many to check; 0 is still a lower bound
        return 0.0
    m = np.arange(1, limit + 1, dtype=np.int64)
    zeros = (z * m) // (z + 1)
    h = (m - 1) * q
    lo = np.floor(h)
    gamma = h - lo
    hi = np.minimum(lo + 1, m - 1)
    a = (lo >= zeros).astype(np.float64)  # the order statistics: 0 below Z, 1 from Z on
    b = (hi >= zeros).astype(np.float64)
    diff = b - a
    value = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)  # numpy's own interpolation
    return float(value.min())


def step_floor(config: RunConfig) -> StepFloor:
    """The run's :class:`StepFloor`: its decoding replica's cost model (a disaggregated run's
    decode pool: tokens after the first come from there), with the drafter where it speculates."""
    replica = config.replica
    if config.is_disaggregated:  # tokens after the first come from the decode pool
        from simulator.config.disagg_layout import layout_of

        replica = layout_of(config).decode_replica  # type: ignore[union-attr]
    where = f"{replica.model}/{replica.gpu} tp={replica.tp} pp={replica.pp}"
    cost = load_cost_model(config.cost_model, replica, config.engine)
    plain_s = float(cost.iteration_time(BatchShape.from_requests(decodes=[2])))
    spec = config.speculative
    if spec is None:
        return StepFloor(plain_s, where=where)
    from simulator.costmodel.speculative import SpecBatchShape, SpeculativeCostModel

    spec_cost = SpeculativeCostModel(cost, spec)  # the engine's pricing (engine.speculative.speculative_cost_model)
    verify_s = []
    for j in range(1, spec.k + 1):
        shape = SpecBatchShape()
        if j == spec.k and spec.num_verify_tokens > j:  # full depth verifies the whole token tree
            shape.add_verify(j, 1, spec.num_verify_tokens, spec.verify_pairs)
        else:
            shape.add_verify(j, 1)  # a 1-token prompt's first verify: the least context a verify has
        verify_s.append(float(spec_cost.iteration_time(shape)))
    # Drafts are accepted left to right: none past the first position whose rate is 0.
    max_accepted = next((i for i, r in enumerate(spec.acceptance_rates) if r <= 0.0), spec.k)
    return StepFloor(plain_s, tuple(verify_s), max_accepted, where)


def min_iteration_s(config: RunConfig) -> float:
    """The cheapest iteration that can separate two tokens: one decode over a 2-token cache,
    or where the run speculates the cheaper of that and a lone verify with its drafter
    (:class:`StepFloor`).

    The cost model is (weakly) monotone in every field of a batch shape, so every non-zero
    TBT gap lasts at least this long (a speculating run's per-token gaps include zeros too).
    """
    return step_floor(config).step_s


def impossible_reason(config: RunConfig, slo: SLO) -> str | None:
    """Why no QPS can meet ``slo`` on ``config``, when that is certain before any trial.

    The floor is a true lower bound for the criterion judged: under ``goodput`` each
    request's TPOT (:func:`tpot_floors`: the most requests that can meet the TPOT SLO must
    reach ``min_goodput``); otherwise the ``tbt_quantile`` of all per-token gaps
    (:meth:`StepFloor.tbt_quantile_s`). Without speculation both are the lone decode. With
    it a step emits up to ``k + 1`` tokens (gaps of 0 between them) and pays for its
    drafter: TPOT can fall below one step's time, and a TBT quantile at or below
    ``k / (k + 1)`` can be 0 (then nothing is refused here). A limit on a TPOT percentile
    (``tpot_s``, either criterion) is refused where every request's TPOT floor is above it.
    """
    floor = step_floor(config)
    spec = config.speculative
    what = "" if spec is None else f"speculative decoding ({spec.method}, k={spec.k}) on {floor.where}"
    if slo.tpot_s is not None and (why := _tpot_quantile_impossible(config, slo.tpot_s, floor, what)):
        return why
    if slo.criterion == "goodput":
        limit, target = slo.goodput_tpot_s, slo.min_goodput
        assert limit is not None and target is not None
        least, step = floor.token_s()
        if least <= limit:
            return None
        n_out = request_output_tokens(config)
        can = tpot_floors(config, floor, n_out) <= limit
        if float(can.mean()) >= target:  # short outputs alone could meet the goodput target
            return None
        if spec is None:
            head = (f"the TPOT SLO {limit:g}s is below the fastest possible iteration "
                    f"({format_against(least * 1e3, limit * 1e3)} ms for a lone decode on {floor.where})")
        else:
            head = (f"the TPOT SLO {limit:g}s is below the least TPOT {what} allows "
                    f"({format_against(least * 1e3, limit * 1e3)} ms a token: {step})")
        some = (f"; only {int(can.sum())} of {len(can)} requests (short outputs) can meet it, under the "
                f"{100 * target:g}% goodput target" if can.any() else "")
        return f"capacity 0: {head}{some}, so no QPS can meet it"
    limit = slo.tbt_s
    least = floor.tbt_quantile_s(slo.tbt_quantile)
    if least <= limit:
        return None
    if spec is None:
        return (f"capacity 0: the TBT SLO {limit:g}s is below the fastest possible iteration "
                f"({format_against(least * 1e3, limit * 1e3)} ms for a lone decode on {floor.where}), "
                "so no QPS can meet it")
    step_s, step = floor.cheapest_step()
    zeros = floor.max_accepted
    return (f"capacity 0: the P{slo.tbt_quantile:g} TBT SLO {limit:g}s is below the least P{slo.tbt_quantile:g} "
            f"per-token gap {what} allows ({format_against(least * 1e3, limit * 1e3)} ms: at most "
            f"{zeros}/{zeros + 1} of the gaps are the zero gaps of tokens emitted together, the rest last at "
            f"least {step}, {step_s * 1e3:.3g} ms), so no QPS can meet it")


def _tpot_quantile_impossible(config: RunConfig, limit: float, floor: StepFloor, what: str) -> str | None:
    """Why a limit on a TPOT percentile cannot be met: every request with a TPOT (more than one
    output token) has a floor above it (:func:`tpot_floors`), so any percentile of theirs is too."""
    least, step = floor.token_s()
    if least <= limit:
        return None
    n_out = request_output_tokens(config)
    floors = tpot_floors(config, floor, n_out)[n_out > 1]
    if not len(floors) or float(floors.min()) <= limit:  # short outputs may get under it
        return None
    head = (f"a lone decode on {floor.where}" if config.speculative is None
            else f"{what}: {step}")
    return (f"capacity 0: the TPOT SLO {limit:g}s is below the least TPOT any request can have "
            f"({format_against(float(floors.min()) * 1e3, limit * 1e3)} ms a token, {head}), so no QPS can meet it")


def request_output_tokens(config: RunConfig) -> np.ndarray:
    """Every trial's output lengths (trials of one seed share them: only arrivals scale)."""
    from simulator.engine.cluster import prepare_table

    table, _, _ = prepare_table(config, None, None)
    return np.asarray(table.num_output_tokens, dtype=np.int64)


def tpot_floors(config: RunConfig, floor: StepFloor, num_output_tokens: np.ndarray) -> np.ndarray:
    """A lower bound on each request's TPOT, ``(completion - first token) / (n - 1)`` (0 for
    one output token: no TPOT, which meets any limit, as :func:`run_trial` judges it).

    Its ``n - 1`` later tokens come from steps that cost at least :meth:`StepFloor.token_s`
    a token. A disaggregated run whose decode worker delivers the first token
    (``first_token_at="decode"``) stamps it with the decode worker's first step, which also
    emits up to ``k + 1`` tokens of its own (1 without speculation): only the tokens after
    that step count, so a short output can have a TPOT of 0.
    """
    n = num_output_tokens.astype(np.float64)
    per_token_s, _ = floor.token_s()
    later = n - 1.0
    if config.is_disaggregated and config.first_token_at == "decode":
        later = np.maximum(n - 1.0 - floor.max_emitted, 0.0)
    return np.where(n > 1, later * per_token_s / np.maximum(n - 1.0, 1.0), 0.0)


def check_fits(config: RunConfig) -> None:
    """Raise the run's own error where a replica of ``config`` does not hold the model (weights, activations,
    a ``max_model_len`` request), before any trial: checked ahead of :func:`impossible_reason`, whose floor
    prices a step the replica could never run, so a model that does not fit is an error (a sweep point's
    too), not a capacity of 0 blamed on the SLO."""
    if config.is_disaggregated:
        from simulator.engine.disagg import check_pools_fit

        check_pools_fit(config)
    else:
        from simulator.engine.replica import build_scheduler

        build_scheduler(config)


def check_searchable(config: RunConfig, users: bool = False, offer_users: bool = False,
                     given: Collection[str] = (), max_users: int | None = None) -> None:
    """Refuse a config the search cannot vary: a rate search needs a rate process, a users search a
    closed loop without one (its users send as fast as their requests end). ``offer_users``: the
    command can search users (``simulate capacity --users``), and a closed loop's refusal says so.
    ``given``: the run options given on the command line (a value equal to the default is given too)."""
    if users:
        concurrency = config.workload.concurrency or 0
        if max_users is not None and concurrency > max_users:  # (it was lowered to the limit, unsaid)
            flag = "--concurrency" if "concurrency" in given or offer_users else "workload.concurrency"
            raise ConfigError(flag, f"the search's first users, {concurrency:,}, are above the most it may try, "
                              f"{max_users:,} (max_users)", "lower the concurrency, or raise max_users (--max-users)")
        if config.workload.arrival not in ("burst", "poisson") or "arrival" in given or "burstiness" in given or (
                config.workload.arrival == "poisson" and ("qps" in given or config.workload.qps != WorkloadConfig().qps)):
            # (an --arrival typed is refused whatever its process: the trials send as users free up, burst or not)
            flag = ("--burstiness" if "burstiness" in given and "arrival" not in given else  # (its gamma arrivals)
                    "--qps" if "arrival" not in given and config.workload.arrival == "poisson" else "--arrival")
            raise ConfigError(flag, "--users searches a closed loop whose users send their next request as soon as "
                              f"their last ends, with no rate, so {flag} would do nothing",
                              f"drop {flag}, or drop --users to search the rate")
        if config.workload.normalize_arrivals:  # (its trials run burst arrivals: run_trial)
            raise ConfigError("--normalize-arrivals", "--users searches a closed loop whose users send as their "
                              "requests end: no random gaps to rescale, so --normalize-arrivals would do nothing",
                              "drop --normalize-arrivals, or drop --users to search the rate")
        return
    if config.workload.concurrency is not None:
        # With a rate as well, the users cap what is in flight: above the rate they sustain, the client holds
        # requests back (TTFT counts from the send, as the benchmark clients count it), the offered rate is
        # never served, and every higher rate would pass.
        why = ("capacity search varies the request rate, and " + (
            f"a closed loop of {config.workload.concurrency} users has none" if config.workload.arrival == "burst"
            else f"--concurrency {config.workload.concurrency} caps the requests in flight, so the client holds "
                 "back what that cap cannot carry and any higher rate would pass unserved"))
        fix = "drop --concurrency to search the rate"
        raise ConfigError("--concurrency", why,
                          f"add --users to search the most users instead (--concurrency starts it), or {fix}"
                          if offer_users else f"{fix}, or sweep the users with `simulate sweep --grid concurrency=...`")
    if config.workload.arrival not in RATE_ARRIVALS:
        raise ConfigError("workload.arrival", f"capacity search varies the request rate; {config.workload.arrival!r} "
                          "arrivals have none", f"use --arrival {' or '.join(RATE_ARRIVALS)}")


def _search_plan(config: RunConfig, settings: SearchSettings) -> tuple[float, Limits, tuple[bool, bool, bool]]:
    """A seed's search: its first load, its limits and :func:`run_trial`'s switches (early exits, users)."""
    switches = (settings.early_exit, settings.tbt_early_exit, settings.users)
    if settings.users:  # whole users from 1 to max_users, from the config's concurrency (check_searchable)
        first = min(max(config.workload.concurrency or DEFAULT_FIRST_USERS, 1), settings.max_users)
        return first, Limits(settings.rel_tol, 1, settings.max_users, settings.max_trials, integer=True), switches
    qps = settings.qps_start or config.workload.qps
    if not settings.min_qps <= qps <= settings.max_qps:  # (only --qps can be: --qps-start is checked with the range)
        raise ConfigError("--qps", f"the search's first rate, {qps:g} (--qps, as no --qps-start is given), is outside "
                          f"its range [{settings.min_qps:g}, {settings.max_qps:g}]",
                          "pass --qps-start inside it, or widen --min-qps/--max-qps")
    limits = Limits(settings.rel_tol, settings.min_qps, settings.max_qps, settings.max_trials)
    return qps, limits, switches


def load_number(value: float, users: bool, digits: int = 4) -> str:
    """A search's load as a number: whole users, or a rate to ``digits`` significant figures."""
    return f"{int(value):,}" if users else f"{value:.{digits}g}"


def format_load(value: float, users: bool, digits: int = 4) -> str:
    """A search's load with its unit: ``264 users`` or ``2.56 QPS``."""
    return f"{load_number(value, users, digits)} {'users' if users else 'QPS'}"


def _seed_result(config: RunConfig, slo: SLO, found: Outcome, trials: list[Trial], users: bool = False) -> SeedResult:
    """The answer of a finished search and why it ended (``users``: a users search's words)."""
    result = SeedResult(config.seed, found.passed_qps or 0.0, "", trials)
    failed = {t.qps: t for t in trials}[found.failed_qps] if found.failed_qps is not None else None
    # Settled: bracketed to rel_tol by a failure (not by a trial too short to judge), or no load passes down to
    # the floor (capacity 0). Every other end is a lower bound or a bracket wider than asked.
    result.converged = found.stop in ("converged", "none_passes") and not (failed is not None and failed.too_short)

    def load(value: float, digits: int = 3) -> str:
        return format_load(value, users, digits)

    lower, higher, ceiling = (("--concurrency", "--concurrency", "--max-users") if users
                              else ("--qps", "--qps-start", "--max-qps"))
    if failed is not None and failed.too_short:
        # The least rate above every pass was too short a trial to judge, and so is every rate above it (a
        # trial's arrivals span 1 / rate): what the passes show is a lower bound, not where the SLO breaks.
        if found.passed_qps is None:
            result.not_found = True
            result.reason = (f"not found: no trial down to {load(failed.qps)} was long enough to judge "
                             f"({failed.reason})")
        else:
            result.at_least = result.too_short = True
            result.reason = (f"at least {load(found.passed_qps, 4)}: the trials above it are too short to judge; at "
                             f"{load(failed.qps, 4)} {failed.reason.removeprefix('too short to judge: ')}")
        return result
    if found.passed_qps is None and found.stop == "max_trials":
        assert failed is not None
        result.not_found = True
        result.reason = (f"not found: stopped after {len(trials)} trials before any {'number of users' if users else 'QPS'} "
                         f"met {slo.describe()}; the capacity is below {load(failed.qps)} (raise --max-trials, or start "
                         f"lower with {lower})")
    elif found.passed_qps is None and failed is not None and failed.all_rejected:
        # Refused whatever the load: halving on to the floor (or --max-trials, then 'start lower') cannot help.
        result.reason = (f"capacity 0: {failed.reason.replace('was rejected', 'is rejected', 1)}, at any "
                         f"{'number of users' if users else 'rate'} ({rejection_fix(failed.reason)})")
    elif found.passed_qps is None:
        assert failed is not None
        result.reason = (f"capacity 0: {'no number of users down to 1' if users else f'no QPS down to {failed.qps:.3g}'} "
                         f"meets {slo.describe()} (last failure: {failed.reason})")
    elif failed is None:
        result.at_least = True
        result.reason = (f"still meets the SLO at {load(found.passed_qps)} after {len(trials)} trials, the most "
                         f"allowed (raise --max-trials, or start higher with {higher})"
                         if found.stop == "max_trials"
                         else f"still meets the SLO at {load(found.passed_qps)} (the search limit; raise {ceiling})")
    elif found.stop == "max_trials":
        result.reason = (f"stopped after {len(trials)} trials with the bracket "
                         f"[{load(found.passed_qps)}, {load(failed.qps)}]")
    else:
        result.reason = (f"converged: passes at {load(found.passed_qps, 4)}, fails at {load(failed.qps, 4)} "
                         f"({failed.reason})")
    return result


def rejection_fix(reason: str) -> str:
    """What lets the requests in, for a trial whose every request was rejected for ``reason``."""
    if "max_model_len" in reason:
        return "raise --max-model-len, or shorten the requests"
    if "KV tokens" in reason:
        return ("give the KV cache room for a request (more GPUs or --tp, a higher --gpu-memory-utilization), or "
                "shorten the requests")
    if "max_num_tokens" in reason or "max_num_batched_tokens" in reason or "token budget" in reason:
        return ("raise --max-num-batched-tokens above the longest prompt, use a scheduler that chunks prompts, or "
                "shorten them")
    return "shorten the requests, or raise the limit the reason names"


def search_seed(config: RunConfig, slo: SLO, settings: SearchSettings = SearchSettings(),  # noqa: B008
                on_trial: Callable[[Trial], None] | None = None) -> SeedResult:
    """Bisection for one seed (``config.seed``), one trial after another; ``on_trial(trial)``
    as each ends. (:func:`find_capacity` with workers runs trials ahead of need instead.)"""
    check_searchable(config, settings.users, offer_users=True, max_users=settings.max_users)
    reason = impossible_reason(config, slo)
    if reason is not None:
        return SeedResult(config.seed, 0.0, reason)
    trials: list[Trial] = []

    def used(t: Trial) -> Trial:
        trials.append(t)
        if on_trial:
            on_trial(t)
        return t

    qps, limits, exits = _search_plan(config, settings)
    found = largest_passing(lambda q: used(run_trial(config, q, slo, *exits)).verdict, qps, limits)
    return _seed_result(config, slo, found, trials, settings.users)


def _search_seeds_ahead(jobs: list[tuple[RunConfig, SLO, SearchSettings]], workers: int,
                        on_seed_done: Callable[[SeedResult], None] | None,
                        on_trial: Callable[[Trial], None] | None) -> list[SeedResult]:
    """Seeds' searches sharing ``workers`` processes, more than there are seeds (one seed, say):
    each runs the trials it may need next ahead of need in its share of them
    (:func:`simulator.planning.search.run_ahead`), so no process idles while a search waits for a
    verdict. The same trials, in the same order, and results as :func:`search_seed`'s."""
    from simulator.planning.search import SearchAhead, run_ahead
    from simulator.util.interrupts import WorkerPool

    results: list[SeedResult | None] = [None] * len(jobs)
    todo = []
    for i, (config, slo, _) in enumerate(jobs):  # find_capacity checked they are searchable
        reason = impossible_reason(config, slo)
        if reason is None:
            todo.append(i)
        else:
            results[i] = SeedResult(config.seed, 0.0, reason)
    # Ctrl-C or SIGTERM: KeyboardInterrupt here, and the trials still running are stopped.
    with WorkerPool(workers) as pool:
        searches = []
        for k, i in enumerate(todo):
            config, slo, settings = jobs[i]
            qps, limits, exits = _search_plan(config, settings)
            width = workers // len(todo) + (k < workers % len(todo))
            searches.append(SearchAhead(lambda q, c=config, s=slo, e=exits: pool.submit(run_trial, c, q, s, *e),
                                        lambda t: t.verdict, qps, limits, width, on_result=on_trial))

        def done(k: int) -> None:
            config, slo, settings = jobs[todo[k]]
            outcome = searches[k].outcome
            assert outcome is not None
            results[todo[k]] = _seed_result(config, slo, outcome, searches[k].used, settings.users)
            if on_seed_done:
                on_seed_done(results[todo[k]])

        run_ahead(searches, on_outcome=done)
        pool.stop()  # trials run ahead that no search needed
    return [r for r in results if r is not None]


def find_capacity(config: RunConfig, slo: SLO, settings: SearchSettings = SearchSettings(),  # noqa: B008
                  num_seeds: int = 1, workers: int = 1, on_seed_done=None,  # noqa: ANN001
                  on_trial: Callable[[Trial], None] | None = None) -> CapacityReport:
    """Capacity of ``config`` under ``slo`` for seeds ``config.seed .. config.seed + num_seeds - 1``.

    Seeds are independent searches; ``workers > 1`` runs them in a process pool: as many seeds
    as workers or more, a whole search per process; fewer (one seed, say), the searches share
    the processes and each runs the trials it may need next ahead of need in its share (results
    do not depend on ``workers``). ``on_seed_done(SeedResult)`` is called as each finishes, and
    ``on_trial(Trial)`` as each trial a search uses ends, unless seeds run in processes of their own.
    """
    if not 1 <= num_seeds <= MAX_SEEDS:
        raise ConfigError("--seeds", f"must be in [1, {MAX_SEEDS:,}] independent searches, got {num_seeds:,}",
                          "pass --seeds N (3-10 show the spread of the capacity)")
    if workers < 1:
        raise ConfigError("capacity.workers", f"must be >= 1, got {workers}")
    check_searchable(config, settings.users, offer_users=True, max_users=settings.max_users)
    check_fits(config)
    start = time.perf_counter()
    jobs = [(config.replace(seed=config.seed + i), slo, settings) for i in range(num_seeds)]
    results: list[SeedResult] = []
    if num_seeds < workers:
        results = _search_seeds_ahead(jobs, workers, on_seed_done, on_trial)
    elif workers == 1:
        for job in jobs:
            results.append(search_seed(*job, on_trial=on_trial))
            if on_seed_done:
                on_seed_done(results[-1])
    else:
        from simulator.util.interrupts import WorkerPool

        # Ctrl-C or SIGTERM: KeyboardInterrupt here, and the seeds still searching are stopped.
        with WorkerPool(min(workers, len(jobs))) as pool:  # (no idle processes started)
            for future in pool.submit_all(search_seed, jobs):
                results.append(future.result())
                if on_seed_done:
                    on_seed_done(results[-1])
    return CapacityReport(config, slo, settings, results, wall_s=time.perf_counter() - start)
