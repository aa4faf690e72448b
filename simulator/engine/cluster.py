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
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.costmodel import CostModel, load_cost_model
from simulator.engine.kvcache import MemoryPlan
from simulator.engine.records import FRAME_COLUMNS, STAGE_COLUMNS, IterationLog, Recorder, TallyRecorder
from simulator.engine.replica import Replica, build_scheduler, with_mixin
from simulator.engine.routers import ROUTERS, STATE_FREE_ROUTERS
from simulator.engine.tbt import GapLog
from simulator.util.progress import RunProgress
from simulator.workload.request import Request, RequestColumns, run_field_columns


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
        if self.config.num_replicas > 1 and n:
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
    """Replicas behind a router. Routing decisions use a dedicated random stream."""

    def __init__(self, env: simpy.Environment, config: RunConfig, recorder: Recorder, rng: np.random.Generator,
                 watched: bool = False, lockstep: bool = False, watch_settles: bool = False) -> None:
        self.env = env
        self.router = ROUTERS[config.router]
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
        if config.fast_forward:
            horizon = env.peek if config.num_replicas == 1 or watched else self._next_arrival_at
        # A stretch may straddle the event at its horizon (keep the iterations that start before
        # it) when that event is an arrival, or, for a lone replica, the wake-up of a watch that
        # settles the replica first (Replica.settle: the state is then the step-by-step loop's).
        # Among several replicas the horizon may be another replica's iteration: never straddled.
        straddle = not watched or (watch_settles and config.num_replicas == 1)
        for replica_id in range(config.num_replicas):
            scheduler, plan = build_scheduler(config, lockstep)
            cost = load_cost_model(config.cost_model, config.replica, config.engine)
            self.memory = plan
            self.cost_models.append(cost)
            self.replicas.append(make_replica(env, replica_id, scheduler, cost, recorder, config, horizon))
            self.replicas[-1].horizon_is_arrival = straddle

    def _next_arrival_at(self) -> float:
        return self.next_arrival_at

    def submit(self, req: Request) -> None:
        if len(self.replicas) == 1:
            self.replicas[0].submit(req)
            return
        outstanding = [r.num_outstanding for r in self.replicas]
        index = self.router(outstanding, self._step, self.rng)
        self._step += 1
        self.replicas[index].submit(req)


def make_replica(env: simpy.Environment, replica_id: int, scheduler, cost: CostModel, recorder: Recorder,
                 config: RunConfig, horizon: Callable[[], float] | None = None, mixin: type | None = None) -> Replica:
    """The replica mechanism for a layout: the PP=1 loop, or stage processes for PP>1, with
    ``mixin``'s methods over either's (the disaggregated pools' parking).
    ``horizon`` enables event skipping (PP=1 only; see :mod:`simulator.fast.skipping`)."""
    if config.replica.pp > 1:
        try:
            from simulator.engine.pipeline import PipelinedReplica
        except ImportError:
            raise ConfigError("replica.pp", "pipeline parallelism is not available in this build",
                              "use --pp 1") from None
        cls: type = PipelinedReplica if mixin is None else with_mixin(mixin, PipelinedReplica)
        return cls(env, replica_id, scheduler, cost, recorder, config)
    cls = Replica if mixin is None else with_mixin(mixin, Replica)
    return cls(env, replica_id, scheduler, cost, recorder, horizon)


def _arrivals(env: simpy.Environment, requests: list[Request], cluster: Cluster):  # noqa: ANN202
    for req in requests:
        gap = req.arrival_at - env.now
        if gap > 0:
            cluster.next_arrival_at = env.now + gap  # the time SimPy will wake us, to the last bit
            yield env.timeout(gap)
        # now + (t - now) may differ from t in the last bit: take the clock's value so every
        # timestamp of a request comes from the same clock (first_scheduled_at >= arrival_at).
        req.arrival_at = env.now
        cluster.submit(req)
    cluster.next_arrival_at = math.inf


def make_requests(table, token_times: bool = False) -> list[Request]:  # noqa: ANN001 - RequestTable duck type
    arrival, prompt, output = checked_columns(table)
    return [Request(i, a, p, o, token_times)
            for i, (a, p, o) in enumerate(zip(arrival.tolist(), prompt.tolist(), output.tolist(), strict=False))]


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


def runs_apart(config: RunConfig) -> bool:
    """Whether the replicas of ``config`` run one by one (:func:`run_partitioned`), and so in
    worker processes when asked: more than one, behind a router that reads no replica state,
    PP 1, event skipping on, not disaggregated (and no watch process: see :func:`simulate`)."""
    return (config.fast_forward and config.num_replicas > 1 and config.replica.pp == 1
            and config.router in STATE_FREE_ROUTERS and not config.is_disaggregated)


def simulate(config: RunConfig, table=None, progress: bool | RunProgress = False,  # noqa: ANN001
             watch: Callable[[simpy.Environment, list[Request]], Any] | None = None,
             token_times: bool = False, workers: int = 1, record_iterations: bool = True) -> RunResult:
    """Run one simulation. ``table`` (a RequestTable) overrides the config's workload.
    ``token_times`` keeps every token's timestamp on its request (8 bytes a token; metrics
    do not need them). ``record_iterations=False`` leaves the iteration and stage tables
    empty (``extra["iterations"]`` says so) for a run judged by its requests alone. ``workers`` > 1 runs the replicas of a partitioned cluster (see
    :func:`run_partitioned`) in that many processes: the same results, sooner on more cores.

    ``watch(env, requests)``, if given, returns a SimPy generator started beside the
    arrivals (it must not outlive them needlessly: its timeouts extend ``sim_end_at``);
    raising :class:`StopRun` from it ends the run early, leaving unfinished requests as
    they are and the reason in ``extra["stopped"]``. Capacity search uses it to abandon
    trials that are certain to fail (a run it does not stop is the same run). A watch with a
    ``watch_gaps(logs, requests)`` method gets the replicas' live TBT gap logs first (to
    read, never to write); one with ``watch_settle(settle)`` gets a ``settle(now)`` to call
    at each wake-up before it reads anything (:meth:`Replica.settle`), and a lone replica's
    stretches may then run across its wake-ups.
    """
    partitionable = watch is None and runs_apart(config)
    if workers > 1 and not partitionable:
        raise ConfigError("--workers", "only the replicas of a cluster behind a state-free router run in parallel "
                          "(more than one replica, --router round_robin or random, PP 1, event skipping on)",
                          "drop --workers for this run")
    if config.is_disaggregated:  # two pools and a KV link: simulator.engine.disagg
        from simulator.engine.disagg import simulate_disaggregated

        return simulate_disaggregated(config, table, progress, watch)
    wall_start = time.perf_counter()
    reporter = _reporter(progress)
    table, source, router_rng = prepare_table(config, table, reporter)
    arrival, prompt, output = checked_columns(table)
    num_requests = len(arrival)
    objects = None
    if not (partitionable and workers > 1):  # in worker processes each builds its own
        if reporter is not None:
            reporter.phase(f"building {num_requests:,} requests", num_requests)
        objects = make_requests(table, token_times)
    if reporter is not None:
        reporter.start("simulating", num_requests)
    recorder_class = Recorder if record_iterations else TallyRecorder
    recorder = recorder_class(on_progress=reporter.update if reporter else None, report_every=max(1, num_requests // 200))
    own_reporter = reporter is not progress
    stopped: str | None = None
    partitioned = None
    if partitionable:
        if objects is None:
            partitioned = run_partitioned_in_workers(config, arrival, prompt, output, recorder, router_rng,
                                                     token_times, workers)
        else:
            partitioned = run_partitioned(config, objects, recorder, router_rng)
        if partitioned is None:  # an arrival tied with a replica event: run jointly from scratch
            recorder = recorder_class(on_progress=reporter.update if reporter else None,
                                      report_every=max(1, num_requests // 200))
            router_rng = rng_streams(config.seed)[1]  # the router's stream, from its start
            objects = None  # the partitioned run changed them
        elif reporter is not None and own_reporter:
            reporter.close()
    requests: Sequence[Request]
    if partitioned is not None:
        totals, memory, sim_end_at, requests = partitioned
    else:
        requests = make_requests(table, token_times) if objects is None else objects
        env = simpy.Environment()
        # Lockstep decodes leave running requests' counters stale until settled: only without
        # pipelining and without a watch that reads them (see ArrivalWatch.reads_only_timestamps).
        lockstep = config.fast_forward and config.replica.pp == 1 and \
            (watch is None or getattr(watch, "reads_only_timestamps", False))
        cluster = Cluster(env, config, recorder, router_rng, watched=watch is not None, lockstep=lockstep,
                          watch_settles=hasattr(watch, "watch_settle"))
        stopped = run_to_end(env, requests, cluster, watch, reporter, own_reporter)
        memory, sim_end_at = cluster.memory, env.now
        totals = [ReplicaTotals.of(r, c) for r, c in zip(cluster.replicas, cluster.cost_models, strict=True)]
    assert memory is not None
    return RunResult(
        config=config, requests=requests, iterations=recorder.iterations, memory=memory,
        workload_source=source, sim_end_at=sim_end_at, wall_s=time.perf_counter() - wall_start,
        replica_busy_s=[t.busy_s for t in totals],
        stages=recorder.stages,
        stage_busy_s=[t.stage_busy_s for t in totals],
        tbt=[t.gaps for t in totals],
        extra={"cost_model_extrapolations": sum(t.num_extrapolations for t in totals),
               **({"stopped": stopped} if stopped is not None else {}),
               **({} if record_iterations else {"iterations": "not recorded"})},
    )


@dataclass
class ReplicaTotals:
    """What a run keeps of one replica once it is over (picklable: it comes back from workers)."""

    busy_s: float
    stage_busy_s: list[float]
    gaps: GapLog
    num_extrapolations: int

    @classmethod
    def of(cls, replica: Any, cost: CostModel) -> ReplicaTotals:
        replica.scheduler.settle()  # a run stopped early leaves requests running: true counters first
        return cls(replica.num_busy_s, list(getattr(replica, "stage_busy_s", (replica.num_busy_s,))),
                   replica.scheduler.gaps, getattr(cost, "num_extrapolations", 0))


class _Tie(Exception):  # noqa: N818 - a signal, not an error
    """An arrival coincides with an event of its replica: only the joint run orders them right."""


def _delay_to(now: float, at: float) -> float:
    """The delay ``d`` with ``now + d == at`` exactly (SimPy schedules at ``now + delay``)."""
    d = at - now
    while now + d < at:
        d = math.nextafter(d, math.inf)
    while now + d > at:
        d = math.nextafter(d, -math.inf)
    return d


def _route(config: RunConfig, arrival: list[float], router_rng: np.random.Generator) -> tuple[list[float], list[int]]:
    """Each request's submit time and replica, as the joint run's arrival process and router
    would give them: the process resumes at ``now + (arrival - now)`` after each submit, and
    sets the request's arrival time to it."""
    now, submit_at = 0.0, []
    for at in arrival:
        gap = at - now
        if gap > 0:
            now = now + gap
        submit_at.append(now)
    router, zeros = ROUTERS[config.router], [0] * config.num_replicas
    return submit_at, [router(zeros, step, router_rng) for step in range(len(arrival))]


def run_partitioned(config: RunConfig, requests: list[Request], recorder: Recorder,
                    router_rng: np.random.Generator) -> tuple | None:
    """A cluster whose router reads no replica state, simulated one replica at a time.

    Such replicas never interact: each one's trajectory depends only on the requests routed
    to it, at the times the joint run's arrival process would submit them (replayed here to
    the last bit, :func:`_route`). Each replica then runs alone in its own environment, so its
    iterations advance without events and skip decode stretches up to its own next arrival,
    not the cluster's. Same results as the joint run (tests compare whole tables), except
    where an arrival lands exactly on an event of its replica: the joint run orders such a
    tie by event creation, across replicas, so this returns None and the caller runs
    jointly. Returns (per-replica totals, memory plan, end time, requests) or None.
    """
    submit_at, replica_of = _route(config, [r.arrival_at for r in requests], router_rng)
    routed: list[list[tuple[float, Request]]] = [[] for _ in range(config.num_replicas)]
    for at, replica_id, req in zip(submit_at, replica_of, requests, strict=True):
        routed[replica_id].append((at, req))
    try:
        runs = [_run_replica(config, replica_id, mine, recorder) for replica_id, mine in enumerate(routed)]
    except _Tie:
        return None
    _check_all_done(requests)
    return [t for t, _, _ in runs], runs[0][1], max(end_at for _, _, end_at in runs), requests


def _check_all_done(requests: list[Request]) -> None:
    """The invariant of a run not stopped early: every request completed or was rejected."""
    unfinished = [r for r in requests if r.completed_at is None and r.reject_reason is None]
    if unfinished:
        raise RuntimeError(f"{len(unfinished)} requests neither finished nor were rejected, e.g. {unfinished[0]}")


def _run_replica(config: RunConfig, replica_id: int, mine: list[tuple[float, Request]],
                 recorder: Recorder) -> tuple[ReplicaTotals, MemoryPlan, float]:
    """One replica of a partitioned cluster, alone, from its requests' submit times; raises
    :class:`_Tie` where only the joint run can order an arrival and an event."""
    env = simpy.Environment()
    scheduler, memory = build_scheduler(config, lockstep=True)
    cost = load_cost_model(config.cost_model, config.replica, config.engine)
    replica = Replica(env, replica_id, scheduler, cost, recorder, env.peek)
    env.process(_own_arrivals(env, mine, replica))
    env.run()
    return ReplicaTotals.of(replica, cost), memory, env.now


def _replica_in_worker(config: RunConfig, replica_id: int, path: str, token_times: bool,
                       record_iterations: bool = True) -> tuple | None:
    """:func:`_run_replica` in a worker process, on the requests whose columns (ids, submit
    times, prompt and output tokens) are pickled at ``path``: what the parent needs back
    (records, and the requests' final fields as columns), or None on a tie."""
    import pickle

    with open(path, "rb") as f:
        ids, submit_at, prompt, output = pickle.load(f)
    # arrival_at starts as the submit time, which _own_arrivals sets it to anyway.
    mine = [(at, Request(i, at, p, o, token_times)) for i, at, p, o in
            zip(ids.tolist(), submit_at.tolist(), prompt.tolist(), output.tolist(), strict=True)]
    recorder = Recorder() if record_iterations else TallyRecorder()
    try:
        totals, memory, end_at = _run_replica(config, replica_id, mine, recorder)
    except _Tie:
        return None
    totals.gaps.canonicalise()  # sorted distinct gaps: the parent's merges of all logs cost least so
    return totals, memory, end_at, recorder.iterations, recorder.num_done, run_field_columns([r for _, r in mine])


def run_partitioned_in_workers(config: RunConfig, arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray,
                               recorder: Recorder, router_rng: np.random.Generator, token_times: bool,
                               workers: int) -> tuple | None:
    """:func:`run_partitioned` with the replicas in ``workers`` processes, from the request
    table's columns: each worker builds its replica's requests and returns their final fields
    as columns, so this process never holds a request object (the run's requests come back
    as :class:`~simulator.workload.request.RequestColumns`). Records, progress and the columns are
    merged in replica order, as the serial loop writes them. Ctrl-C stops the workers."""
    import pickle
    import tempfile

    from simulator.util.interrupts import WorkerPool

    num_requests, n = len(arrival), config.num_replicas
    submit_at, replica_of = _route(config, arrival.tolist(), router_rng)
    submit = np.array(submit_at, dtype=np.float64)
    owner = np.array(replica_of, dtype=np.int64)
    positions = [np.flatnonzero(owner == i) for i in range(n)]
    columns: dict[str, np.ndarray] = {"request_id": np.arange(num_requests, dtype=np.int64),
                                      "num_prompt_tokens": prompt, "num_output_tokens": output}
    runs = []
    # spawn, not fork: the parent may run a progress thread, and forking a threaded process can
    # deadlock. A replica's requests go to its worker through a file, not the pool's pipe: a
    # large payload blocks the pool's feeder thread on a full pipe, and stopping the workers
    # mid-read would then hang the parent for good.
    # SIGTERM, like Ctrl-C, becomes KeyboardInterrupt in the pool's block, so the workers are stopped
    # either way (WorkerPool terminates them on any exception: Ctrl-C, SIGTERM, a tie or a failure).
    with tempfile.TemporaryDirectory(prefix="servesim-replicas-") as folder, \
            WorkerPool(min(workers, n), "spawn") as pool:
        paths = []
        for i, mine in enumerate(positions):
            paths.append(f"{folder}/replica-{i}.pickle")
            with open(paths[-1], "wb") as f:
                pickle.dump((mine, submit[mine], prompt[mine], output[mine]), f, protocol=pickle.HIGHEST_PROTOCOL)
        records = not isinstance(recorder, TallyRecorder)
        futures: list[Any] = pool.submit_all(_replica_in_worker, [(config, i, path, token_times, records)
                                                                  for i, path in enumerate(paths)])
        for i, mine in enumerate(positions):  # in replica order, as each is ready
            out = futures[i].result()
            futures[i] = None  # a merged replica's records are not held twice
            if out is None:
                pool.stop()  # a tie: the other replicas' runs are not wanted
                return None
            totals, memory, end_at, iterations, num_done, fields = out
            del out
            for name, values in fields.items():
                if name not in columns:
                    columns[name] = np.empty(num_requests, dtype=values.dtype)
                columns[name][mine] = values
            recorder.iterations.extend_log(iterations)
            del iterations, fields
            recorder.count_done(num_done)
            runs.append((totals, memory, end_at))
    requests = RequestColumns(columns)
    unfinished = np.isnan(columns["completed_at"]) & (columns["reject_reason"] == None)  # noqa: E711 - elementwise
    if unfinished.any():
        first = requests[int(np.flatnonzero(unfinished)[0])]
        raise RuntimeError(f"{int(unfinished.sum())} requests neither finished nor were rejected, e.g. {first}")
    return [t for t, _, _ in runs], runs[0][1], max(end_at for _, _, end_at in runs), requests


def _own_arrivals(env: simpy.Environment, arrivals: list[tuple[float, Request]], replica: Replica):  # noqa: ANN202
    for at, req in arrivals:
        if at > env.now:
            yield env.timeout(_delay_to(env.now, at))
        if env.peek() == at or replica.resumed_at == at:
            raise _Tie
        req.arrival_at = at
        replica.submit(req)


def _reporter(progress: bool | RunProgress) -> RunProgress | None:
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
        if workload.trace is None and workload.max_total_tokens is None:
            # Built-in length distributions are filtered to the model's context, as the papers
            # filter their traces; a user's trace is not, and what cannot fit is reported.
            workload = dataclasses.replace(workload, max_total_tokens=config.replica.effective_max_model_len)
        if reporter is not None:
            reporter.phase(f"generating {workload.num_requests:,} requests", workload.num_requests)
        table = generate_requests(workload, workload_rng)
    return table, getattr(table, "source", "request table"), router_rng


def run_to_end(env: simpy.Environment, requests: list[Request], cluster: Any,
               watch: Callable[[simpy.Environment, list[Request]], Any] | None,
               reporter: RunProgress | None, own_reporter: bool) -> str | None:
    """Start arrivals (and ``watch``) and run until no event is left; the reason a watch
    stopped the run, or ``None``.

    Invariant checked here: unless stopped early, every request completed or was rejected.
    """
    env.process(_arrivals(env, requests, cluster))
    if watch is not None:
        watch_gaps = getattr(watch, "watch_gaps", None)
        if watch_gaps is not None:  # a watch that judges TBT reads the live gap logs
            watch_gaps([r.scheduler.gaps for r in cluster.replicas], requests)
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
    finally:
        if reporter is not None and own_reporter:
            reporter.close()
    if stopped is None:
        _check_all_done(requests)
    return stopped
