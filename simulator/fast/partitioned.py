"""Partitioned runs: the replicas of a cluster simulated one at a time, or in worker processes.

Behind a router that reads no replica state (round robin, random), replicas never
interact: each one's trajectory depends only on the requests routed to it. So each can
run alone in its own SimPy environment, skipping to its own next arrival rather than the
cluster's, and several can run in parallel processes. The results are the joint run's,
bit for bit, except where an arrival lands exactly on an event of its replica: then
:func:`run_partitioned` returns None and the caller runs the cluster jointly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import simpy

from simulator.config.run_config import RunConfig
from simulator.engine import cluster
from simulator.engine.cluster import ReplicaTotals, check_all_done
from simulator.engine.kvcache import MemoryPlan
from simulator.engine.records import Recorder, TallyRecorder
from simulator.engine.routers import ROUTERS, STATE_FREE_ROUTERS
from simulator.fast.lockstep import lockstep_class
from simulator.fast.replica import SkippingReplica
from simulator.util.collector import fewer_collections
from simulator.workload.request import Request, RequestColumns, run_field_columns


def runs_apart(config: RunConfig) -> bool:
    """Whether the replicas of ``config`` run one by one (:func:`run_partitioned`), and so in
    worker processes when asked: more than one, behind a router that reads no replica state,
    PP 1, no attention DP (its ranks step together: :mod:`simulator.engine.dp_group`), event skipping
    on, not disaggregated, not speculating (a speculating run takes the plain loop:
    :mod:`simulator.engine.speculative`), and no watch process: see :func:`simulate`."""
    return apart_problem(config) is None


def apart_problem(config: RunConfig) -> str | None:
    """Why the replicas of ``config`` do not run apart (:func:`runs_apart`), in words, or None where they do."""
    if config.is_disaggregated:
        return "a disaggregated run's pools hand requests to each other"
    if config.speculative is not None:
        return "a speculating run takes the plain step-by-step loop"
    if not config.fast_forward:
        return "event skipping is off (--no-fast-forward)"
    if config.num_ranks <= 1:
        return "there is one replica"
    if config.replica.pp != 1:
        return "pipeline-parallel replicas (--pp > 1) run jointly"
    if config.replica.attention_dp != 1:
        return "attention-DP ranks step together"
    if config.router not in STATE_FREE_ROUTERS:
        return f"--router {config.router} reads the replicas' state (use round_robin or random)"
    return None


class _Tie(Exception):  # noqa: N818 - a signal, not an error
    """An arrival coincides with an event of its replica, or its replica's clock cannot land on the
    joint run's arrival time: only the joint run orders and stamps it right."""


def _delay_to(now: float, at: float) -> float:
    """The delay ``d`` with ``now + d == at`` exactly (SimPy schedules at ``now + delay``); raises
    :class:`_Tie` where no float does (``at`` falls between two sums ``now + d``: the replica's own
    clock would stamp the request an ulp off the joint run's)."""
    d = at - now
    while now + d < at:
        d = math.nextafter(d, math.inf)
    while now + d > at:
        d = math.nextafter(d, -math.inf)
    if now + d != at:
        raise _Tie
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
    router, zeros = ROUTERS[config.router], [0] * config.num_ranks
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
    routed: list[list[tuple[float, Request]]] = [[] for _ in range(config.num_ranks)]
    for at, replica_id, req in zip(submit_at, replica_of, requests, strict=True):
        routed[replica_id].append((at, req))
    try:
        runs = [_run_replica(config, replica_id, mine, recorder) for replica_id, mine in enumerate(routed)]
    except _Tie:
        return None
    check_all_done(requests)
    return [t for t, _, _ in runs], runs[0][1], max(end_at for _, _, end_at in runs), requests


def _run_replica(config: RunConfig, replica_id: int, mine: list[tuple[float, Request]],
                 recorder: Recorder) -> tuple[ReplicaTotals, MemoryPlan, float]:
    """One replica of a partitioned cluster, alone, from its requests' submit times; raises
    :class:`_Tie` where only the joint run can order an arrival and an event."""
    env = simpy.Environment()
    scheduler, memory, cost = cluster.replica_parts(config, lockstep=lockstep_class)
    replica = SkippingReplica(env, replica_id, scheduler, cost, recorder, env.peek)
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
        with fewer_collections():  # as simulate() in the parent
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

    num_requests, n = len(arrival), config.num_ranks
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
    # either way (WorkerPool terminates them on any exception: Ctrl-C, SIGTERM or a failure; a tie is no
    # exception: it leaves the block normally, below).
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
            if out is None:  # a tie: the other replicas' runs are not wanted
                # Those not started are cancelled; those running finish (milliseconds to seconds) and the pool
                # shuts down as usual. Terminating a worker while it writes its result into the pool's pipe
                # leaves the parent's reader on half a message for good (a hang that ignored SIGTERM).
                for future in futures:
                    if future is not None:
                        future.cancel()
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


def _own_arrivals(env: simpy.Environment, arrivals: list[tuple[float, Request]], replica: SkippingReplica):  # noqa: ANN202
    for at, req in arrivals:
        if at > env.now:
            yield env.timeout(_delay_to(env.now, at))
        if env.peek() == at or replica.resumed_at == at:
            raise _Tie
        req.arrival_at = at
        replica.submit(req)
