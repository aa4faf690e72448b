"""Engine behaviour: generation stalls, invariants, a closed-form queue, determinism."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import ConstantCostModel, run_requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel import BatchShape, RooflineCostModel
from simulator.engine.schedulers import SCHEDULERS
from simulator.engine.tbt import expand, merged, same_gaps
from simulator.report.metrics import request_frame, summarize, tbt_samples
from simulator.simulation import simulate

MISTRAL = ReplicaConfig("mistral-7b", "a100-80gb")


def max_gap(req) -> float:
    return req.max_tbt_s


# -- the paper's central phenomenon -------------------------------------------------------------
def stall_scenario(name: str, **kw):
    # Eight requests decode steadily; a 4000-token prompt arrives at t = 1 s.
    specs = [(0.0, 128, 400) for _ in range(8)] + [(1.0, 4000, 4)]
    return run_requests(name, specs, replica=MISTRAL, max_model_len=8192, num_blocks=20_000, **kw)


def test_vllm_stalls_running_decodes_for_a_whole_prefill():
    reqs, rec, _ = stall_scenario("vllm")
    prefill_only = RooflineCostModel(MISTRAL).iteration_time(BatchShape.from_requests([(4000, 0)]))
    for req in reqs[:8]:
        # The long prompt's prefill-only iteration sits inside one TBT gap of every decode.
        assert max_gap(req) >= prefill_only
    assert prefill_only > 0.2


def test_sarathi_bounds_every_gap_by_one_budget_iteration():
    reqs, rec, _ = stall_scenario("sarathi", chunk_size=512)
    longest_iteration = max(it[2] for it in rec.iterations)
    budget_iteration = RooflineCostModel(MISTRAL).iteration_time(
        BatchShape.from_requests([(504, 3500)], [4500] * 8))  # a full budget at the largest context
    assert longest_iteration <= budget_iteration
    for req in reqs[:8]:
        assert max_gap(req) <= budget_iteration + 1e-12
    assert all(it[3] + it[4] <= 512 for it in rec.iterations)


def test_orca_sits_between_vllm_and_sarathi():
    worst = {name: max(max_gap(r) for r in stall_scenario(name, **kw)[0][:8])
             for name, kw in (("vllm", {}), ("orca", {}), ("sarathi", {"chunk_size": 512}))}
    assert worst["sarathi"] < worst["orca"] < worst["vllm"]
    assert worst["orca"] > 3 * worst["sarathi"]


# -- invariants under random workloads --------------------------------------------------------------
request_specs = st.lists(
    st.tuples(st.floats(0, 5, allow_nan=False), st.integers(1, 300), st.integers(1, 60)), min_size=1, max_size=25)


@settings(max_examples=int(os.environ.get("SERVESIM_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=request_specs, name=st.sampled_from(sorted(SCHEDULERS)), num_blocks=st.integers(24, 80),
       budget=st.integers(16, 600))
def test_invariants_hold_for_random_workloads(specs, name, num_blocks, budget):
    specs = sorted(specs)
    kw = {"chunk_size": budget} if name == "sarathi" else {}
    reqs, rec, sched = run_requests(name, specs, num_blocks=num_blocks, max_model_len=384, **kw)
    for req in reqs:
        if req.reject_reason is not None:  # reported, with a reason
            assert req.status.value == "rejected" and not req.token_times
            continue
        assert req.status.value == "finished" and req.completed_at is not None
        assert req.num_generated == req.num_output_tokens == len(req.token_times)
        times = np.frombuffer(req.token_times)
        assert (np.diff(times) >= 0).all() and times[0] >= req.arrival_at
        # The per-request figures kept without token times agree with the times.
        assert (req.first_token_at, req.last_token_at) == (times[0], times[-1])
        assert req.max_tbt_s == (np.diff(times).max() if len(times) > 1 else 0.0)
        assert req.first_scheduled_at >= req.arrival_at
    rejected = [r for r in reqs if r.reject_reason]
    assert all(r.num_prompt_tokens + r.num_output_tokens > 384 for r in rejected)
    # The replica's run-length gap log holds exactly the gaps of the token times.
    values, counts, exact = merged([sched.gaps])
    every_gap = np.sort(np.concatenate([np.diff(np.frombuffer(r.token_times)) for r in reqs] + [np.empty(0)]))
    assert exact and np.array_equal(expand(values, counts), every_gap)
    # KV blocks all returned; time never goes back; every scheduled token was requested.
    assert sched.blocks.num_free_blocks == num_blocks and not sched.running and not sched.waiting
    starts = [it[1] for it in rec.iterations]
    assert starts == sorted(starts)
    # Tokens: each output token comes from a decode or from a prefill that completes; a
    # preemption can turn at most one decode into a (recomputing) prefill.
    served = [r for r in reqs if r.reject_reason is None]
    num_out = sum(r.num_output_tokens for r in served)
    num_preempt = sum(r.num_preemptions for r in served)
    decode_tokens = sum(it[4] for it in rec.iterations)
    assert num_out - len(served) - num_preempt <= decode_tokens <= num_out - len(served)
    prefill_tokens = sum(it[3] for it in rec.iterations)
    assert prefill_tokens >= sum(r.num_prompt_tokens for r in served)
    if num_preempt == 0:
        assert prefill_tokens == sum(r.num_prompt_tokens for r in served)
        assert decode_tokens == num_out - len(served)


def test_token_conservation_without_preemption():
    specs = [(0.01 * i, 50 + 7 * i, 5 + i) for i in range(30)]
    reqs, rec, _ = run_requests("sarathi", specs, chunk_size=64)
    assert sum(it[3] for it in rec.iterations) == sum(p for _, p, _ in specs)  # every prompt token prefilled once
    assert sum(it[4] for it in rec.iterations) == sum(o - 1 for _, _, o in specs)  # one decode per later token


# -- closed form: M/D/1 --------------------------------------------------------------------------------
def test_md1_mean_wait_matches_closed_form():
    service_s, rate = 0.01, 70.0  # utilisation 0.7
    rho = rate * service_s
    rng = np.random.default_rng(7)
    n = 40_000
    arrivals = np.cumsum(rng.exponential(1 / rate, n))
    specs = [(float(a), 1, 1) for a in arrivals]  # one iteration each
    reqs, _, _ = run_requests("sarathi", specs, cost=ConstantCostModel(MISTRAL, service_s), max_num_seqs=1)
    waits = np.array([r.first_scheduled_at - r.arrival_at for r in reqs[1000:]])
    expected = rho * service_s / (2 * (1 - rho))  # Pollaczek-Khinchine for deterministic service
    # Batch means give an honest standard error for the autocorrelated waits.
    means = waits[: len(waits) // 20 * 20].reshape(20, -1).mean(axis=1)
    stderr = means.std(ddof=1) / math.sqrt(len(means))
    assert abs(waits.mean() - expected) < 4 * stderr + 0.02 * expected
    # Sojourn time = wait + one deterministic service.
    assert abs(np.mean([r.completed_at - r.arrival_at for r in reqs]) - (expected + service_s)) < 0.1 * expected + 4 * stderr


# -- full runs ---------------------------------------------------------------------------------------------
def small_config(**kw) -> RunConfig:
    return RunConfig(workload=WorkloadConfig(num_requests=60, qps=4.0), **kw)


def test_simulate_is_deterministic():
    a, b = simulate(small_config(seed=3)), simulate(small_config(seed=3))
    ta, tb = tbt_samples(a), tbt_samples(b)
    assert np.array_equal(ta, tb) and len(ta) > 100
    assert request_frame(a).equals(request_frame(b))
    c = simulate(small_config(seed=4))
    assert not np.array_equal(tbt_samples(c), ta)


@pytest.mark.parametrize("pp", [1, 2])
def test_a_run_without_iteration_records_is_the_same_run(pp: int) -> None:
    """``record_iterations=False`` (capacity trials) keeps no iteration or stage rows and says so;
    requests, gaps and busy times are those of the recorded run."""
    config = small_config(seed=3).replace(replica__pp=pp)
    full, bare = simulate(config), simulate(config, record_iterations=False)
    assert len(full.iterations) > 100 and (pp == 1 or full.stages)
    assert len(bare.iterations) == 0 and not bare.stages and bare.extra["iterations"] == "not recorded"
    assert request_frame(full).equals(request_frame(bare))
    assert same_gaps(full.tbt, bare.tbt) and full.replica_busy_s == bare.replica_busy_s
    assert full.stage_busy_s == bare.stage_busy_s and full.sim_end_at == bare.sim_end_at
    assert "iterations" not in full.extra


def test_summary_metrics_are_consistent():
    result = simulate(small_config())
    df = request_frame(result)
    s = summarize(result, df)
    assert s["num_finished"] + s["num_rejected"] == 60
    assert s["num_tbt_samples"] == int((df.loc[df.status == "finished", "num_output_tokens"] - 1).sum())
    assert s["ttft_s_p50"] <= s["ttft_s_p99"] <= s["ttft_s_max"]
    fin = df[df.status == "finished"]
    assert (fin["ttft_s"] >= fin["sched_delay_s"]).all()
    assert np.allclose(fin["e2e_s"], fin["completed_at"] - fin["arrival_at"])
    # per-request max TBT agrees with the gaps themselves
    r = next(r for r in result.requests if r.num_output_tokens > 2)
    assert df.loc[r.request_id, "max_tbt_s"] == pytest.approx(max_gap(r))


def test_requests_that_cannot_fit_are_reported_not_dropped():
    table = SimpleNamespace(arrival_at=np.array([0.0, 0.1]), num_prompt_tokens=np.array([100, 5000]),
                            num_output_tokens=np.array([10, 10]), source="hand")
    result = simulate(RunConfig(scheduler=SchedulerConfig("sarathi")), table)
    df = request_frame(result)
    assert list(df.status) == ["finished", "rejected"]
    assert "max_model_len 4096" in df.reject_reason[1]


def test_model_that_does_not_fit_is_refused():
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="does not fit"):
        simulate(RunConfig(replica=ReplicaConfig("llama-2-70b", "a100-80gb", tp=1)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2), st.integers(0, 2)), min_size=1, max_size=50))
def test_iteration_rows_sort_as_lexsort_does(rows):
    """The end-time order of the iteration table (stable sort, checked ties) is lexsort's,
    ties in end, replica and start included."""
    from simulator.engine.cluster import _end_order

    start, duration, replica = (np.array(c) for c in zip(*rows, strict=True))
    start, duration = start.astype(np.float64), duration.astype(np.float64)
    assert np.array_equal(_end_order(start, duration, replica), np.lexsort((start, replica, start + duration)))
