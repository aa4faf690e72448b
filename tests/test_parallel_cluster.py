"""Replicas of a partitioned cluster in worker processes: the same run as the serial loop."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import assert_a_signal_stops_workers, record_outcomes
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.engine.cluster import RunResult
from simulator.engine.tbt import same_gaps
from simulator.fast import partitioned as partitioned_runs
from simulator.report.metrics import request_frame
from simulator.simulation import simulate
from simulator.util.interrupts import WorkerPool
from simulator.workload.generate import RequestTable


def _assert_same(a: RunResult, b: RunResult) -> None:
    assert request_frame(a).equals(request_frame(b))
    assert a.iteration_frame().equals(b.iteration_frame())
    assert a.iterations == b.iterations  # raw record order too: merged in replica order
    def times(r):  # noqa: ANN001, ANN202
        return None if r.token_times is None else bytes(r.token_times)

    assert [times(r) for r in a.requests] == [times(r) for r in b.requests]
    assert same_gaps(a.tbt, b.tbt) and [g.exact for g in a.tbt] == [g.exact for g in b.tbt]
    assert a.replica_busy_s == b.replica_busy_s and a.stage_busy_s == b.stage_busy_s
    assert a.sim_end_at == b.sim_end_at and a.extra == b.extra and a.memory == b.memory


@pytest.mark.parametrize("router", ["round_robin", "random"])
def test_workers_give_the_serial_run(router: str) -> None:
    config = RunConfig(replica=ReplicaConfig("mistral-7b", "a100-80gb"), scheduler=SchedulerConfig("sarathi", chunk_size=512),
                       workload=WorkloadConfig("sharegpt", arrival="poisson", qps=6.0, num_requests=240),
                       num_replicas=3, router=router, seed=5)
    serial = simulate(config, token_times=True)
    parallel = simulate(config, token_times=True, workers=2)
    _assert_same(parallel, serial)
    assert len({r.replica_id for r in parallel.requests}) == 3


def test_workers_record_no_iterations_when_asked() -> None:
    config = RunConfig(workload=WorkloadConfig("sharegpt", arrival="poisson", qps=4.0, num_requests=120),
                       num_replicas=2, seed=1)
    serial = simulate(config, record_iterations=False)
    parallel = simulate(config, workers=2, record_iterations=False)
    _assert_same(parallel, serial)
    assert len(parallel.iterations) == 0 and parallel.extra["iterations"] == "not recorded"


def test_rejections_come_back_from_workers_in_replica_order() -> None:
    """A request no replica can hold is rejected inside its worker; the parent's request and its
    recorder see it as the serial loop would."""
    prompts = np.array([100, 9000, 120, 9500, 80, 60])  # 9000+ tokens exceed llama-2-7b's 4096 context
    table = RequestTable(np.arange(6) * 0.5, prompts, np.full(6, 20), source="hand")
    config = RunConfig(num_replicas=2)
    serial = simulate(config, table)
    parallel = simulate(config, table, workers=2)
    _assert_same(parallel, serial)
    assert [r.request_id for r in parallel.requests if r.reject_reason] == [1, 3]


def test_run_cli_workers_option() -> None:
    runner = CliRunner()
    base = ["run", "--replicas", "2", "--num-requests", "60", "--qps", "4", "--json", "--no-progress"]
    one = runner.invoke(app, base)
    two = runner.invoke(app, [*base, "--workers", "2"])
    assert one.exit_code == 0 and two.exit_code == 0, two.output
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    drop = {k for k in a if "wall" in k}
    assert {k: v for k, v in a.items() if k not in drop} == {k: v for k, v in b.items() if k not in drop}
    bad = runner.invoke(app, [*base, "--workers", "0"])
    assert isinstance(bad.exception, ConfigError) and str(bad.exception).startswith("--workers:")  # main(): one line


def test_run_cli_workers_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: one process per CPU up to the replicas where they run apart, one process elsewhere."""
    import simulator.config.resources
    from simulator.cli.run import run_auto_workers

    monkeypatch.setattr(simulator.config.resources, "available_cpus", lambda: 3)
    cluster = RunConfig(num_replicas=2)
    assert run_auto_workers(cluster) == 2 and run_auto_workers(cluster.replace(num_replicas=8)) == 3
    for joint in (RunConfig(), cluster.replace(router="least_outstanding"), cluster.replace(fast_forward=False)):
        assert run_auto_workers(joint) == 1  # no error, unlike an explicit --workers 2
    runner = CliRunner()
    base = ["run", "--replicas", "2", "--num-requests", "60", "--qps", "4", "--json", "--no-progress"]
    auto, one = runner.invoke(app, [*base, "--workers", "auto"]), runner.invoke(app, base)
    assert auto.exit_code == 0 and one.exit_code == 0, auto.output
    a, b = json.loads(auto.stdout), json.loads(one.stdout)
    assert {k: v for k, v in a.items() if "wall" not in k} == {k: v for k, v in b.items() if "wall" not in k}
    joint = runner.invoke(app, ["run", "--num-requests", "20", "--workers", "auto", "--no-progress", "--json"])
    assert joint.exit_code == 0, joint.output


def test_workers_auto_is_one_process_wherever_the_run_refuses_workers(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path) -> None:  # noqa: ANN001
    """auto asked only whether the replicas run apart: a closed loop (--concurrency) or a trace with block
    hashes behind round robin got 2 processes, which the run then refused ('--workers: ...'), though the
    option's help promises one process where the run cannot use more. Both now read simulation.worker_problem."""
    import simulator.config.resources
    from simulator.cli.run import run_auto_workers
    from simulator.simulation import worker_problem

    monkeypatch.setattr(simulator.config.resources, "available_cpus", lambda: 4)
    mooncake = tmp_path / "hashed.jsonl"
    mooncake.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 600, "output_length": 8,
                                            "hash_ids": [0, i + 1]}) + "\n" for i in range(6)))
    closed = RunConfig(num_replicas=2, workload=WorkloadConfig(num_requests=12, concurrency=4, arrival="burst"))
    hashed = RunConfig(num_replicas=2, workload=WorkloadConfig(trace=str(mooncake), arrival="trace", num_requests=6))
    for config in (closed, hashed):
        assert worker_problem(config) is not None
        assert run_auto_workers(config) == 1
        with pytest.raises(ConfigError, match="^--workers: "):  # what an explicit count gets there
            simulate(config, workers=2)
        assert request_frame(simulate(config, workers=run_auto_workers(config))).status.eq("finished").all()
    assert worker_problem(RunConfig(num_replicas=2)) is None and run_auto_workers(RunConfig(num_replicas=2)) == 2
    runner = CliRunner()  # the command of the report, as typed
    res = runner.invoke(app, ["run", "--replicas", "2", "--num-requests", "40", "--concurrency", "8", "--workers",
                              "auto", "--no-progress", "--json"])
    assert res.exit_code == 0, res.output


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process groups from /proc")
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_signal_stops_a_parallel_run_and_its_workers(how: str) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM to the run
    alone: exit 130 with one line, no traceback, no worker process left behind."""
    # The run, its two workers (and multiprocessing's resource tracker) are up: 3 processes.
    assert_a_signal_stops_workers(["run", "--replicas", "4", "--workers", "2", "--num-requests", "400000", "--qps",
                                   "400", "--no-progress", "--json"], how)


@pytest.mark.parametrize("extra", [["--replicas", "1"], ["--replicas", "2", "--router", "least_outstanding"],
                                   ["--replicas", "2", "--no-fast-forward"], ["--replicas", "2", "--pp", "2"]])
def test_workers_where_replicas_cannot_run_apart_is_refused(extra: list[str]) -> None:
    """--workers would do nothing there: one line naming the option, not a silent serial run."""
    res = CliRunner().invoke(app, ["run", "--num-requests", "20", "--workers", "2", "--no-progress", *extra])
    assert isinstance(res.exception, ConfigError), res.output  # main() prints it as one line, exit 2
    assert str(res.exception).startswith("--workers:")


def test_a_tie_in_a_worker_falls_back_to_the_joint_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request that arrives exactly when its replica's iteration ends: the worker meets the
    tie, and the run falls back to the joint run (from the table, as if never partitioned)."""
    rng = np.random.default_rng(3)
    n = 40  # even: with round robin over 2 replicas, an added 41st request goes to replica 0
    arrival = np.sort(rng.uniform(0, 20, n))
    table = RequestTable(arrival, rng.integers(50, 400, n), rng.integers(5, 60, n), source="hand")
    config = RunConfig(replica=ReplicaConfig("mistral-7b", "a100-80gb"), num_replicas=2)
    base = simulate(config, table)
    iters = base.iteration_frame()
    ends = (iters["started_at"] + iters["duration_s"])[iters["replica_id"] == 0]
    last = float(arrival[-1])
    # An iteration end after the last arrival that the arrival process reproduces to the last bit.
    tie_at = next(e for e in ends.sort_values() if e > last and last + (e - last) == e)
    tied = RequestTable(np.r_[arrival, tie_at], np.r_[table.num_prompt_tokens, 100], np.r_[table.num_output_tokens, 10],
                        source="hand")
    outcomes = record_outcomes(monkeypatch, partitioned_runs, "run_partitioned_in_workers")
    stops: list[bool] = []
    real_stop = WorkerPool.stop
    monkeypatch.setattr(WorkerPool, "stop", lambda pool: (stops.append(True), real_stop(pool))[1])
    parallel = simulate(config, tied, workers=2)
    assert outcomes == [False]  # the worker met the tie
    # and the pool was left to finish, not terminated (a worker killed mid-write could hang the parent)
    assert stops == []
    _assert_same(parallel, simulate(config, tied))  # which the serial partitioned run meets too
    stepped = simulate(config.replace(fast_forward=False), tied)
    assert request_frame(parallel).equals(request_frame(stepped))
    assert parallel.iteration_frame().equals(stepped.iteration_frame())
