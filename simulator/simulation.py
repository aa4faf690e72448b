"""The one entry point: :func:`simulate` turns a run config into a :class:`RunResult`.

It composes the layers below: the workload's requests, the engine's cluster of replicas
(:mod:`simulator.engine`), and the speed machinery that wraps the engine's loop
(:mod:`simulator.fast`: event skipping, replicas run apart or in worker processes) when
``config.fast_forward`` is on, which changes no result. Disaggregated configs run their two
pools (:mod:`simulator.engine.disagg`). A run that speculates (``config.speculative``) runs the
plain step-by-step loop whatever ``fast_forward`` says: lockstep decodes, event skipping and
partitioned runs assume one token per decode step (:mod:`simulator.engine.speculative`); its
counters and both views of the inter-token gaps are in ``extra["speculative"]``. Metrics are computed afterwards from the result
(:mod:`simulator.report.metrics`), never inside event handlers.

Randomness: one ``numpy.random.Generator`` seeded from ``config.seed`` is split into
independent streams (workload, router), so the same config gives the same results
bit for bit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import simpy

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.engine.closed_loop import ClosedLoopClient, make_recorder
from simulator.engine.cluster import (
    Cluster,
    ReplicaTotals,
    RunResult,
    StopRun,
    checked_columns,
    make_requests,
    prepare_table,
    reporter_of,
    rng_streams,
    run_to_end,
    summed_by_op,
)
from simulator.engine.records import Recorder, TallyRecorder
from simulator.engine.sessions import SessionClient
from simulator.fast import partitioned as partitioned_runs
from simulator.fast.lockstep import lockstep_class
from simulator.fast.replica import SkippingReplica
from simulator.util.collector import fewer_collections
from simulator.util.progress import RunProgress
from simulator.workload.request import Request

__all__ = ["RunResult", "StopRun", "simulate"]


def _may_lockstep(config: RunConfig, watch: Any) -> bool:
    """Whether decodes may run in lockstep cohorts (``fast.lockstep``). A cohort leaves its running
    requests' counters stale until settled, so not under a watch that reads them (see
    ``ArrivalWatch.reads_only_timestamps``), and not under speculation, whose steps emit several
    tokens a request (the plain loop, PLAIN_LOOP_NOTE)."""
    return config.fast_forward and config.speculative is None and \
        (watch is None or getattr(watch, "reads_only_timestamps", False))


def _closed_sessions(config: RunConfig, table: Any) -> bool:
    """Whether the run's sessions are closed loop (each turn sent after its predecessor ends, a think later:
    :mod:`simulator.engine.sessions`): a table with think times, or one the config draws with them
    (``--session-replay closed``)."""
    if table is None:
        return config.workload.session_replay == "closed"
    return getattr(table, "think_s", None) is not None


def _has_block_hashes(config: RunConfig, table: Any) -> bool:
    """Whether the run's requests name their prompts' blocks: the table given, else the config's trace (its
    format, from the first line: :func:`simulator.workload.prefix_traces.prefix_trace_format`)."""
    if table is not None:
        return getattr(table, "block_hashes", None) is not None
    if config.workload.trace is None:
        return False
    from simulator.workload.prefix_traces import prefix_trace_format

    return prefix_trace_format(config.workload.trace) is not None


def worker_problem(config: RunConfig, table: Any = None, watch: Any = None) -> tuple[str, str] | None:
    """Why the replicas of this run cannot be simulated in worker processes (``workers`` > 1), and the fix, or None
    where they can. The one rule both :func:`simulate`'s refusal of ``--workers N`` and ``--workers auto`` (one
    process where this names a problem) read, so auto never picks a count the run then refuses."""
    if watch is not None:
        why = "a watch reads the joint run"
    elif config.workload.concurrency is not None or _closed_sessions(config, table):
        why = "closed-loop arrivals land at completions anywhere in the cluster"
    else:
        why = partitioned_runs.apart_problem(config)
    if why is not None:  # (the first condition this run misses: a list of every condition read as met)
        return f"this run's replicas cannot run in parallel: {why}", "drop --workers for this run"
    if _has_block_hashes(config, table):  # (it ran in one process, unsaid)
        return ("worker processes take token counts only, not a trace's prefix block hashes",
                "drop --workers for this trace (the run is the same in one process)")
    return None


@fewer_collections()  # CPython's cyclic collector runs less often meanwhile: the same results, less time
def simulate(config: RunConfig, table=None, progress: bool | RunProgress = False,  # noqa: ANN001
             watch: Callable[[simpy.Environment, list[Request]], Any] | None = None,
             token_times: bool = False, workers: int = 1, record_iterations: bool = True) -> RunResult:
    """Run one simulation. ``table`` (a RequestTable) overrides the config's workload.
    ``token_times`` keeps every token's timestamp on its request (8 bytes a token; metrics
    do not need them). ``record_iterations=False`` leaves the iteration and stage tables
    empty (``extra["iterations"]`` says so) for a run judged by its requests alone. ``workers`` > 1 runs the replicas of a partitioned cluster (see
    :func:`simulator.fast.partitioned.run_partitioned`) in that many processes: the same results, sooner on more cores.

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
    # Closed loop (--concurrency): the next send is the next completion anywhere, unknown in
    # advance, so its replicas never run apart (simulator.engine.closed_loop).
    # Closed-loop sessions (a table with think times, simulator.engine.sessions) likewise.
    if config.replica.kernels != "roofline":  # a GPU without tables says so before its memory plan is judged
        from simulator.costmodel.aic.tables import system_for

        system_for(config.replica.gpu)
    sessions = _closed_sessions(config, table)
    if sessions and config.workload.concurrency is not None:
        raise ConfigError("--concurrency", "session traffic is closed loop already (one user per session)",
                          "drop --concurrency, or make the sessions open loop")
    if sessions and config.is_disaggregated:
        raise ConfigError("workload", "closed-loop sessions in disaggregated pools are not modelled",
                          "use open-loop sessions, or drop the pools")
    closed = config.workload.concurrency is not None or sessions
    partitionable = watch is None and not closed and partitioned_runs.runs_apart(config)
    if workers > 1:
        problem = worker_problem(config, table, watch)
        if problem is not None:
            raise ConfigError("--workers", *problem)
    # Warm-up requests are left out of the figures: ITL then comes from the others' token times.
    token_times = token_times or config.workload.num_warmup > 0
    # A closed loop's sends land at completions anywhere in a cluster: event skipping then stops
    # at the next event of any kind, as under a watch (a stretch also ends at its first finish,
    # where a send can happen; the same results either way, tests/test_closed_loop.py).
    watched = watch is not None or closed
    if config.is_disaggregated:  # two pools and a KV link: simulator.engine.disagg
        from simulator.engine.disagg import simulate_disaggregated

        # Lockstep decodes in the decode pools (each pool's pipelining is its own to rule out).
        return simulate_disaggregated(config, table, progress, watch, lockstep_class if _may_lockstep(config, watch) else None)
    wall_start = time.perf_counter()
    reporter = reporter_of(progress)
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
    client = ClosedLoopClient.of(config.workload)
    if sessions:
        assert objects is not None  # never partitioned
        client = SessionClient(objects, table.session_id, table.think_s, table.after)
    recorder = make_recorder(recorder_class, client, on_progress=reporter.update if reporter else None,
                             report_every=max(1, num_requests // 200))
    own_reporter = reporter is not progress
    stopped: str | None = None
    partitioned = None
    if partitionable:
        if objects is None:
            partitioned = partitioned_runs.run_partitioned_in_workers(config, arrival, prompt, output, recorder, router_rng,
                                                     token_times, workers)
        else:
            partitioned = partitioned_runs.run_partitioned(config, objects, recorder, router_rng)
        if partitioned is None:  # an arrival tied with a replica event: run jointly from scratch
            recorder = recorder_class(on_progress=reporter.update if reporter else None,
                                      report_every=max(1, num_requests // 200))
            router_rng = rng_streams(config.seed)[1]  # the router's stream, from its start
            objects = None  # the partitioned run changed them
        elif reporter is not None and own_reporter:
            reporter.close()
    requests: Sequence[Request]
    speculative = None
    if partitioned is not None:
        totals, memory, sim_end_at, requests = partitioned
    else:
        requests = make_requests(table, token_times) if objects is None else objects
        env = simpy.Environment()
        # Speculation emits several tokens per step: the plain loop (PLAIN_LOOP_NOTE).
        plain = config.speculative is not None
        lockstep = _may_lockstep(config, watch) and config.replica.pp == 1  # not under pipelining either
        cluster = Cluster(env, config, recorder, router_rng, watched=watched, lockstep=lockstep_class if lockstep else None,
                          watch_settles=hasattr(watch, "watch_settle"), skipping=None if plain else SkippingReplica)
        stopped = run_to_end(env, requests, cluster, watch, reporter, own_reporter, client)
        if plain:
            from simulator.engine.speculative import speculation_extra

            speculative = speculation_extra(config.speculative, [r.scheduler for r in cluster.replicas])
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
               "cost_model_extrapolations_by_op": summed_by_op([t.extrapolations_by_op for t in totals]),
               **({"stopped": stopped} if stopped is not None else {}),
               # Closed-loop sessions send as earlier turns end, not in id order: the warm-up is the first
               # sent (simulator.report.benchmark.measured_requests).
               **({"send_order": np.asarray(client.sent_ids, dtype=np.int64)} if isinstance(client, SessionClient)
                  else {}),
               **({"speculative": speculative} if speculative is not None else {}),
               **({} if record_iterations else {"iterations": "not recorded"})},
    )
