"""The simulation engine: requests arrive, a router sends them to replicas, replicas run.

:func:`simulate` is the one entry point: it turns a :class:`~simulator.config.run_config.RunConfig`
(and optionally a ready-made request table) into a :class:`RunResult` holding every
request's timeline and every iteration's record. Metrics are computed afterwards
from those records (:mod:`simulator.report.metrics`), never inside event handlers.

Randomness: one ``numpy.random.Generator`` seeded from ``config.seed`` is split into
independent streams (workload, router), so the same config gives the same results
bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.costmodel import CostModel, load_cost_model
from simulator.costmodel.base import extrapolation_counts
from simulator.engine.arrivals import send_at_arrival_times
from simulator.engine.closed_loop import ClosedLoopClient
from simulator.engine.dp_group import DPGroup, group_ranks
from simulator.engine.kvcache import MemoryPlan
from simulator.engine.records import FRAME_COLUMNS, STAGE_COLUMNS, IterationLog, Recorder
from simulator.engine.replica import Replica, SchedulerWrap, build_scheduler, with_mixin
from simulator.engine.routers import CACHE_ROUTERS, route
from simulator.engine.schedulers import Scheduler
from simulator.engine.tbt import GapLog
from simulator.util.progress import RunProgress
from simulator.workload.prefix_traces import continued_hashes
from simulator.workload.request import Request

if TYPE_CHECKING:
    from simulator.engine.disagg import DisaggFigures


@dataclass
class RunResult:
    """Everything a run produced. ``requests`` is in arrival order (ids 0..n-1)."""

    config: RunConfig
    requests: Sequence[Request]  # a list, or RequestColumns (replicas run in worker processes)
    iterations: IterationLog  # ITERATION_COLUMNS rows; reads as a sequence of tuples
    memory: MemoryPlan
    workload_source: str
    sim_end_at: float
    wall_s: float
    replica_busy_s: list[float]
    extra: dict[str, Any] = field(default_factory=dict)
    stages: list[tuple] = field(default_factory=list)  # STAGE_COLUMNS rows (pp > 1)
    stage_busy_s: list[list[float]] = field(default_factory=list)  # per replica, per pipeline stage
    tbt: list[GapLog] = field(default_factory=list)  # per replica: every TBT gap its iterations produced
    disagg: DisaggFigures | None = None  # the pools, the KV link and the handoffs of a disaggregated run

    def iteration_frame(self):  # noqa: ANN201 - pandas imported lazily off the hot path
        """One row per iteration (:data:`FRAME_COLUMNS`), as a pandas frame."""
        import pandas as pd

        return pd.DataFrame(next(self.iteration_chunks(max(1, len(self.iterations)))))

    def iteration_chunks(self, chunk_rows: int = 1 << 20) -> Iterator[dict[str, np.ndarray]]:
        """The iteration table (:data:`FRAME_COLUMNS`, rows in :meth:`iteration_frame`'s order)
        as column dicts of at most ``chunk_rows`` rows (one empty chunk for an empty run), so a
        large run's table is written without a whole frame in memory."""
        iterations = self.iterations
        if not isinstance(iterations, IterationLog):  # a plain list of tuples (hand-made results)
            iterations = IterationLog(iterations)
        cols = iterations.columns(copy=False)
        n = len(iterations)
        order = None
        if self.config.num_ranks > 1 and n:
            # Rows in order of end time (replica, start break ties): replicas record skipped
            # stretches at their end, and a partitioned cluster one replica after another, so
            # raw record order is not a property of the run.
            order = _end_order(cols["started_at"], cols["duration_s"], cols["replica_id"])
        for start in range(0, max(n, 1), chunk_rows):
            rows = slice(start, start + chunk_rows) if order is None else order[start:start + chunk_rows]
            chunk = {name: col[rows].astype(np.float64 if col.dtype.kind == "f" else np.int64, copy=False)
                     for name, col in cols.items()}
            chunk["num_decode_tokens"] = chunk["num_decodes"]
            chunk["batch_size"] = chunk["num_prefills"] + chunk["num_decodes"]
            yield {name: chunk[name] for name in FRAME_COLUMNS}

    def stage_frame(self):  # noqa: ANN201
        import pandas as pd

        return pd.DataFrame.from_records(self.stages, columns=list(STAGE_COLUMNS))


def _end_order(started_at: np.ndarray, duration_s: np.ndarray, replica_id: np.ndarray) -> np.ndarray:
    """Row order by (end, replica, start), ties kept in record order: ``np.lexsort``'s order.

    A stable sort by end time alone is cheaper on the usual record order (each replica's rows
    in time order, replica after replica or interleaved: 1.35 s against lexsort's 2.27 s for
    16M rows in 16 runs, check included), and it is lexsort's order
    whenever rows with equal ends come out by replica and start, which is checked in one
    pass; otherwise lexsort decides.
    """
    end = started_at + duration_s
    order = np.argsort(end, kind="stable")
    e = end[order]
    tied = np.flatnonzero(e[1:] == e[:-1])  # row tied[i] + 1 ends when row tied[i] does
    first, second = order[tied], order[tied + 1]
    r0, r1 = replica_id[first], replica_id[second]
    if not ((r1 < r0) | ((r1 == r0) & (started_at[second] < started_at[first]))).any():
        return order
    return np.lexsort((started_at, replica_id, end))


class Cluster:
    """Replicas behind a router. Routing decisions use a dedicated random stream. With attention
    data parallelism each DP rank is a replica of its own (``RunConfig.num_ranks``; its cost model
    prices the MoE layers for the whole DP group, :mod:`simulator.costmodel.moe`), and one
    replica's ranks step together (:mod:`simulator.engine.dp_group`)."""

    def __init__(self, env: simpy.Environment, config: RunConfig, recorder: Recorder, rng: np.random.Generator,
                 watched: bool = False, lockstep: SchedulerWrap | None = None, watch_settles: bool = False,
                 skipping: type | None = None) -> None:
        self.env = env
        self._router = config.router  # (simulator.engine.routers.route: what each router reads)
        self._router_memo: dict = {}
        self.rng = rng
        self.replicas: list[Replica] = []
        self.cost_models: list[CostModel] = []
        self.memory: MemoryPlan | None = None
        self._step = 0
        # When the arrivals process next submits a request (kept up to date by it; 0 until it starts).
        self.next_arrival_at = 0.0
        # Event skipping's horizon: the next event that can touch a replica. A lone replica
        # (or any replica while a watch process observes the run) stops at the next event of
        # any kind; replicas of a cluster only interact through arrivals, so each may run up
        # to the next arrival regardless of the others' iterations.
        horizon: Callable[[], float] | None = None
        if config.fast_forward and skipping is not None:
            horizon = env.peek if config.num_ranks == 1 or watched else self._next_arrival_at
        # A stretch may straddle the event at its horizon (keep the iterations that start before
        # it) when that event is an arrival, or, for a lone replica, the wake-up of a watch that
        # settles the replica first (Replica.settle: the state is then the step-by-step loop's).
        # Among several replicas the horizon may be another replica's iteration: never straddled. Nor is an
        # arrival a cache-reading router routes: a stretch applies its prompt progress and block allocations
        # at its end, so a router reading the caches mid-stretch saw other prefixes than the plain loop has.
        straddle = (not watched or (watch_settles and config.num_ranks == 1)) and config.router not in CACHE_ROUTERS
        for replica_id in range(config.num_ranks):
            scheduler, plan, cost = replica_parts(config, lockstep, replica_id)
            self.memory = plan
            self.cost_models.append(cost)
            self.replicas.append(make_replica(env, replica_id, scheduler, cost, recorder, config,
                                              horizon, skipping=skipping, straddle=straddle))
        if config.replica.attention_dp > 1:  # its ranks step together, a group per replica (engine.dp_group)
            group_class = skipping.group_class if horizon is not None and skipping is not None else DPGroup
            group_ranks(env, self.replicas, config.replica.attention_dp, group_class)
        self._caches = [r.scheduler.blocks for r in self.replicas]  # what cache-aware routers read (never replaced)

    def _next_arrival_at(self) -> float:
        return self.next_arrival_at

    def submit(self, req: Request) -> None:
        if len(self.replicas) == 1:
            self.replicas[0].submit(req)
            return
        outstanding = [r.num_outstanding for r in self.replicas]
        index = route(self._router, outstanding, self._step, self.rng, req, self._caches, self._router_memo)
        self._step += 1
        self.replicas[index].submit(req)


def replica_parts(config: RunConfig, lockstep: SchedulerWrap | None = None,
                  replica_id: int = 0) -> tuple[Scheduler, MemoryPlan, CostModel]:
    """One replica's scheduler (with its KV cache), memory plan and cost model; where the run
    speculates (``config.speculative``), the speculating scheduler (its own acceptance stream,
    by ``replica_id``; never lockstep) and the cost model with the drafter's time."""
    scheduler, plan = build_scheduler(config, lockstep, replica_id)
    if config.speculative is not None:
        from simulator.engine.speculative import speculative_cost_model

        return scheduler, plan, speculative_cost_model(config, config.speculative)
    return scheduler, plan, load_cost_model(config.cost_model, config.replica, config.engine)


def make_replica(env: simpy.Environment, replica_id: int, scheduler, cost: CostModel, recorder: Recorder,
                 config: RunConfig, horizon: Callable[[], float] | None = None, mixin: type | None = None,
                 skipping: type | None = None, straddle: bool = True) -> Replica:
    """The replica mechanism for a layout: the PP=1 loop, or stage processes for PP>1, with
    ``mixin``'s methods over either's (the disaggregated pools' parking). With ``horizon``
    and a ``skipping`` replica class (:class:`simulator.fast.replica.SkippingReplica`, PP=1
    only), the loop skips events up to ``horizon()``, straddling it where ``straddle``. With
    attention DP, a rank without a process of its own: its :class:`~simulator.engine.dp_group.DPGroup`
    steps it (:func:`group_ranks`, once all ranks are made)."""
    if config.replica.attention_dp > 1:  # PP 1 (the config refuses both); the group's loop steps it
        if horizon is not None and skipping is not None:  # its group skips (skipping.group_class)
            cls = skipping if mixin is None else with_mixin(mixin, skipping)
            return cls(env, replica_id, scheduler, cost, recorder, horizon, straddle, start=False)
        cls = Replica if mixin is None else with_mixin(mixin, Replica)
        return cls(env, replica_id, scheduler, cost, recorder, start=False)
    if config.replica.pp > 1:
        try:
            from simulator.engine.pipeline import PipelinedReplica
        except ImportError:
            raise ConfigError("replica.pp", "pipeline parallelism is not available in this build",
                              "use --pp 1") from None
        cls: type = PipelinedReplica if mixin is None else with_mixin(mixin, PipelinedReplica)
        return cls(env, replica_id, scheduler, cost, recorder, config)
    if horizon is not None and skipping is not None:
        cls = skipping if mixin is None else with_mixin(mixin, skipping)
        return cls(env, replica_id, scheduler, cost, recorder, horizon, straddle)
    cls = Replica if mixin is None else with_mixin(mixin, Replica)
    return cls(env, replica_id, scheduler, cost, recorder)


def make_requests(table, token_times: bool = False) -> list[Request]:  # noqa: ANN001 - RequestTable duck type
    arrival, prompt, output = checked_columns(table)
    requests = [Request(i, a, p, o, token_times)
                for i, (a, p, o) in enumerate(zip(arrival.tolist(), prompt.tolist(), output.tolist(), strict=False))]
    hashes = getattr(table, "block_hashes", None)
    sessions = getattr(table, "session_id", None)
    if hashes is not None:  # prefix block ids (simulator.engine.prefix_cache)
        block_size = table.hash_block_size
        # A turn's answer is named as the session's next turn resends it (sessions only; else the prompt's ids alone).
        named = (continued_hashes(hashes, sessions, prompt, output, block_size) if sessions is not None
                 else [(ids, 0) for ids in hashes])
        for req, (ids, num_named) in zip(requests, named, strict=True):
            req.block_hashes = ids
            req.hash_block_size = block_size
            req.num_named_tokens = num_named
    if sessions is not None:  # conversation or agent sessions (session affinity, per-session metrics)
        for req, session in zip(requests, sessions.tolist(), strict=True):
            req.session_id = session
    return requests


def checked_columns(table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    """A request table's arrival times and token counts, checked (one-line errors)."""
    arrival = np.asarray(table.arrival_at, dtype=np.float64)
    prompt = np.asarray(table.num_prompt_tokens, dtype=np.int64)
    output = np.asarray(table.num_output_tokens, dtype=np.int64)
    if len(arrival) == 0:
        raise ConfigError("workload", "no requests to simulate", "check the trace or --num-requests")
    if (prompt <= 0).any() or (output <= 0).any():
        raise ConfigError("workload", "prompt and output lengths must be positive")
    if (np.diff(arrival) < 0).any() or arrival[0] < 0:
        raise ConfigError("workload", "arrival times must be non-negative and non-decreasing")
    return arrival, prompt, output


class StopRun(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a ``watch`` process to end a run early; its message is the reason."""


@dataclass
class ReplicaTotals:
    """What a run keeps of one replica once it is over (picklable: it comes back from workers)."""

    busy_s: float
    stage_busy_s: list[float]
    gaps: GapLog
    num_extrapolations: int
    extrapolations_by_op: dict[str, int]

    @classmethod
    def of(cls, replica: Any, cost: CostModel) -> ReplicaTotals:
        replica.scheduler.settle()  # a run stopped early leaves requests running: true counters first
        return cls(replica.num_busy_s, list(getattr(replica, "stage_busy_s", (replica.num_busy_s,))),
                   replica.scheduler.gaps, getattr(cost, "num_extrapolations", 0), extrapolation_counts(cost))


def summed_by_op(counts: Sequence[dict[str, int]]) -> dict[str, int]:
    """Per-op counts of several replicas added up (ops in order of first appearance)."""
    out: dict[str, int] = {}
    for by_op in counts:
        for op, n in by_op.items():
            out[op] = out.get(op, 0) + n
    return out


def check_all_done(requests: list[Request]) -> None:
    """The invariant of a run not stopped early: every request completed or was rejected."""
    unfinished = [r for r in requests if r.completed_at is None and r.reject_reason is None]
    if unfinished:
        raise RuntimeError(f"{len(unfinished)} requests neither finished nor were rejected, e.g. {unfinished[0]}")


def reporter_of(progress: bool | RunProgress) -> RunProgress | None:
    """``True`` for a reporter of our own, or the RunProgress a caller keeps (and closes) for later phases."""
    return progress if isinstance(progress, RunProgress) else (RunProgress() if progress else None)


def rng_streams(seed: int) -> tuple[np.random.Generator, np.random.Generator]:
    """The run's independent workload and router streams, split from one seeded generator."""
    root = np.random.default_rng(seed)
    workload_rng, router_rng = (np.random.Generator(np.random.PCG64(s)) for s in root.bit_generator.seed_seq.spawn(2))
    return workload_rng, router_rng


def prepare_requests(config: RunConfig, table, reporter: RunProgress | None,  # noqa: ANN001
                     token_times: bool = False) -> tuple[list[Request], str, np.random.Generator]:
    """The run's requests (from ``table`` or the config's workload) and the router's stream
    (:func:`prepare_table`, as request objects)."""
    table, source, router_rng = prepare_table(config, table, reporter)
    if reporter is not None:
        reporter.phase(f"building {len(table.arrival_at):,} requests", len(table.arrival_at))
    return make_requests(table, token_times), source, router_rng


def prepare_table(config: RunConfig, table, reporter: RunProgress | None):  # noqa: ANN001, ANN201
    """The run's request table (``table``, or drawn from the config's workload), where it came
    from, and the router's stream.

    One seeded generator is split into independent workload and router streams, so an
    aggregated and a disaggregated run of the same config see the same requests.
    """
    workload_rng, router_rng = rng_streams(config.seed)
    if table is None:
        from simulator.workload.generate import generate_requests

        workload = config.workload
        filtered = workload.trace is None and workload.max_total_tokens is None
        if filtered:
            # Built-in length distributions are filtered to the model's context, as the papers
            # filter their traces; a user's trace is not, and what cannot fit is reported.
            workload = dataclasses.replace(workload, max_total_tokens=config.replica.effective_max_model_len)
        if reporter is not None:
            reporter.phase(f"generating {workload.num_requests:,} requests", workload.num_requests)
        try:
            table = generate_requests(workload, workload_rng)
        except ConfigError as err:
            if not (filtered and err.field == "workload.max_total_tokens"):
                raise
            # The limit was the replica's context, not a --max-total-tokens the user gave: say so.
            raise ConfigError("replica.max_model_len", f"{err.problem} (the {workload.name} workload is held to the "
                              "replica's context)", "raise --max-model-len (or pass --max-total-tokens for the "
                              "workload)") from None
    return table, getattr(table, "source", "request table"), router_rng


def run_to_end(env: simpy.Environment, requests: list[Request], cluster: Any,
               watch: Callable[[simpy.Environment, list[Request]], Any] | None,
               reporter: RunProgress | None, own_reporter: bool, client: ClosedLoopClient | None = None) -> str | None:
    """Start arrivals (and ``watch``) and run until no event is left; the reason a watch
    stopped the run, or ``None``. With a closed-loop ``client`` its users send the requests
    (:mod:`simulator.engine.closed_loop`; the run's recorder must tell it of completions).

    Invariant checked here: unless stopped early, every request completed or was rejected.
    """
    env.process(send_at_arrival_times(env, requests, cluster) if client is None else client.arrivals(env, requests, cluster))
    if watch is not None:
        watch_gaps = getattr(watch, "watch_gaps", None)
        # A watch that judges TBT reads the live gap logs, where they are the run's final ones
        # (a disaggregated run whose decode worker delivers the first token removes its handoff gaps after).
        if watch_gaps is not None and getattr(cluster, "gap_logs_final", True):
            watch_gaps([r.scheduler.gaps for r in cluster.replicas], requests)
        watch_sent = getattr(watch, "watch_sent", None)
        if watch_sent is not None and hasattr(client, "num_sent"):  # a closed loop: arrived = sent
            until_sent = getattr(client, "until_sent", None)  # a client that can say when request i goes out
            watch_sent(lambda: client.num_sent,
                       None if until_sent is None else (lambda index: until_sent(env, index)))
        watch_settle = getattr(watch, "watch_settle", None)
        if watch_settle is not None:  # it calls settle(now) before it reads (see Replica.settle)
            replicas = cluster.replicas

            def settle(at: float) -> None:
                for replica in replicas:
                    replica.settle(at)

            watch_settle(settle)
        env.process(watch(env, requests))
    stopped: str | None = None
    try:
        env.run()
    except StopRun as stop:
        stopped = str(stop)
        # The state at the stop is the step-by-step loop's: a skipping replica applies the part of
        # a stretch in flight that ended by now and schedules the rest's first iteration (Replica.stop).
        for replica in cluster.replicas:
            replica.stop(env.now)
    finally:
        if reporter is not None and own_reporter:
            reporter.close()
    if stopped is None:
        check_all_done(requests)
    return stopped
