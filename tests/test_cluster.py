"""Clusters: replicas behind a global router, per-replica and cluster-wide metrics."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.engine.routers import ROUTERS, STATE_FREE_ROUTERS, least_outstanding, random, round_robin
from simulator.report.metrics import replica_frame, request_columns, request_frame, run_span, summarize
from simulator.simulation import simulate

STEADY = WorkloadConfig("fixed", prompt_tokens=256, output_tokens=64, arrival="fixed", qps=8.0, num_requests=400)


def _cluster(router: str, workload: WorkloadConfig = STEADY, num_replicas: int = 4, **replica) -> RunConfig:
    return RunConfig(replica=ReplicaConfig("llama-2-7b", "a100-80gb", **replica), workload=workload,
                     num_replicas=num_replicas, router=router, seed=1)


def _spreads(monkeypatch, config: RunConfig) -> list[int]:
    """max - min of per-replica outstanding counts right after each routing decision."""
    spreads: list[int] = []
    policy = ROUTERS[config.router]

    def recording(outstanding, step, rng):
        i = policy(outstanding, step, rng)
        after = list(outstanding)
        after[i] += 1
        spreads.append(max(after) - min(after))
        return i

    monkeypatch.setitem(ROUTERS, config.router, recording)  # (the table simulator.engine.routers.route reads)
    # The joint run: a state-free router's cluster otherwise runs replica by replica, never
    # asking for the counts this records.
    simulate(config.replace(fast_forward=False))
    return spreads


@pytest.mark.parametrize("num_requests", [400, 402])
def test_round_robin_balances_counts_exactly(num_requests):
    config = _cluster("round_robin", WorkloadConfig("sharegpt", qps=6.0, num_requests=num_requests))
    counts = np.bincount(request_frame(simulate(config))["replica_id"], minlength=4)
    base, extra = divmod(num_requests, 4)
    assert counts.tolist() == [base + (1 if i < extra else 0) for i in range(4)]


def test_least_outstanding_keeps_counts_within_one_under_steady_load(monkeypatch):
    spreads = _spreads(monkeypatch, _cluster("least_outstanding"))
    assert len(spreads) == STEADY.num_requests
    assert max(spreads) <= 1
    # The property is the router's doing: random routing of the same load drifts apart.
    assert max(_spreads(monkeypatch, _cluster("random"))) > 1


def test_least_outstanding_balances_better_than_random_on_a_bursty_workload(monkeypatch):
    workload = WorkloadConfig("sharegpt", arrival="poisson", qps=8.0, num_requests=400)
    lor = np.mean(_spreads(monkeypatch, _cluster("least_outstanding", workload)))
    rnd = np.mean(_spreads(monkeypatch, _cluster("random", workload)))
    assert lor < 0.5 * rnd


def test_state_free_routers_ignore_the_replica_counts():
    """What lets engine.run_partitioned route a cluster before simulating it."""
    for name in STATE_FREE_ROUTERS:
        counts = np.random.default_rng(1).integers(0, 50, size=(200, 5))
        a, b = np.random.default_rng(3), np.random.default_rng(3)
        assert [ROUTERS[name](list(c), step, a) for step, c in enumerate(counts)] == \
               [ROUTERS[name]([0] * 5, step, b) for step in range(len(counts))]
    assert "least_outstanding" not in STATE_FREE_ROUTERS


def test_router_functions_are_pure_policies():
    rng = np.random.default_rng(0)
    assert [round_robin([0, 0, 0], step, rng) for step in range(5)] == [0, 1, 2, 0, 1]
    assert least_outstanding([3, 1, 2, 1], 0, rng) == 1  # fewest, ties to the lowest index
    draws = [random([0] * 4, 0, np.random.default_rng(7)) for _ in range(3)]
    assert len(set(draws)) == 1  # same generator state, same choice
    counts = np.bincount([random([0] * 4, 0, rng) for _ in range(4000)], minlength=4)
    assert counts.min() > 900


def test_cluster_runs_are_deterministic_and_each_replica_has_its_own_cache():
    config = _cluster("random", WorkloadConfig("sharegpt", qps=6.0, num_requests=200))
    a, b = simulate(config), simulate(config)
    assert a.iterations == b.iterations
    assert [r.replica_id for r in a.requests] == [r.replica_id for r in b.requests]
    # Every replica served work.
    frame = a.iteration_frame()
    assert set(frame["replica_id"]) == {0, 1, 2, 3}


def test_per_replica_metrics_add_up_to_the_cluster():
    config = _cluster("least_outstanding", WorkloadConfig("sharegpt", qps=6.0, num_requests=200))
    result = simulate(config)
    summary = summarize(result)
    per = replica_frame(result)
    assert len(summary["per_replica"]) == 4 and per["replica_id"].tolist() == [0, 1, 2, 3]
    assert per["num_requests"].sum() == summary["num_requests"] == 200
    assert per["num_finished"].sum() == summary["num_finished"]
    assert per["throughput_rps"].sum() == pytest.approx(summary["throughput_rps"])
    assert per["busy_fraction"].tolist() == pytest.approx(summary["replica_busy_fraction"])
    # The cluster's P99 TBT lies within the replicas' range.
    assert per["tbt_s_p99"].min() <= summary["tbt_s_p99"] <= per["tbt_s_p99"].max() + 1e-12


def test_a_cluster_of_pipelined_replicas_reports_bubbles_per_replica():
    config = RunConfig(replica=ReplicaConfig("llama-2-70b", "a40", tp=4, pp=2), scheduler=SchedulerConfig("sarathi"),
                       workload=WorkloadConfig("sharegpt", qps=1.0, num_requests=80), num_replicas=2,
                       router="least_outstanding")
    result = simulate(config)
    summary = summarize(result)
    assert len(summary["stage_bubble_fraction"]) == 2 and all(len(r) == 2 for r in summary["stage_bubble_fraction"])
    assert {r[0] for r in result.stages} == {0, 1}
    per = replica_frame(result)
    span = run_span(result, request_columns(result))  # the whole run's, what the busy time is over
    expected = [1 - sum(b) / 2 / span for b in result.stage_busy_s]
    assert per["bubble_fraction_mean"].tolist() == pytest.approx(expected)
