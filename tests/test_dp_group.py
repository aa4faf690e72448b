"""Attention-DP ranks step together (simulator.engine.dp_group): every rank's iteration starts with
the group's and lasts the slowest rank's, as the engines' MoE collectives force them to; a group
skips stretches of such steps (simulator.fast.dp_group) with the same results."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_run, record_stretches

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape
from simulator.engine.schedulers import SCHEDULERS
from simulator.planning.capacity import OverloadWatch
from simulator.report.metrics import request_frame
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable

MOE = dict(model="qwen3-30b-a3b", gpu="h100-sxm", tp=1, ep=2)


def _table(arrival, prompt, output) -> RequestTable:  # noqa: ANN001
    return RequestTable(np.asarray(arrival, float), np.asarray(prompt, np.int64), np.asarray(output, np.int64), "test")


def _config() -> RunConfig:
    """Two DP ranks behind round robin (the table's requests alternate between them)."""
    return RunConfig(replica=ReplicaConfig(**MOE, attention_dp=2), router="round_robin",
                     workload=WorkloadConfig(name="fixed", num_requests=2, qps=1.0, prompt_tokens=16,
                                             output_tokens=4))


def _steps(result) -> dict[float, list[tuple[int, float]]]:  # noqa: ANN001
    """Iterations by start time: (rank, duration) of each rank that ran a batch then."""
    frame = result.iteration_frame()
    steps: dict[float, list[tuple[int, float]]] = {}
    for rid, at, dur in zip(frame.replica_id, frame.started_at, frame.duration_s, strict=True):
        steps.setdefault(at, []).append((int(rid), float(dur)))
    return steps


def test_a_rank_that_prefills_holds_up_the_other_ranks_decodes() -> None:
    # Round robin: the decode (request 0, a short prompt and 40 tokens) on rank 0, then a long
    # prompt on rank 1 while it decodes. Rank 0's decode steps beside that prefill last as long as
    # the prefill step, and the group's steps never overlap.
    config = _config()
    table = _table([0.0, 0.05], [16, 8000], [40, 1])
    result = simulate(config, table)
    assert all(r.completed_at is not None for r in result.requests)
    steps = _steps(result)
    starts = sorted(steps)
    ends = [at + max(d for _, d in steps[at]) for at in starts]
    assert all(ends[i] <= starts[i + 1] + 1e-12 for i in range(len(starts) - 1))  # one step at a time
    assert all(len({d for _, d in rows}) == 1 for rows in steps.values())  # ranks of a step: one duration
    shared = [rows for rows in steps.values() if len(rows) == 2]
    assert shared, "the two ranks never ran a step together"
    cost = load_cost_model(config.cost_model, config.replica, config.engine)
    decode_alone = cost.iteration_time(BatchShape(num_decodes=1, decode_kv_tokens=60, decode_max_kv=60, num_logits=1))
    # The decode beside the 8,000-token prefill took the prefill's time, far more than a decode alone.
    assert max(d for rows in shared for _, d in rows) > 20 * decode_alone


def test_lockstep_raises_the_decoding_ranks_tpot_against_a_rank_alone() -> None:
    # The same decode with and without a long-prompt neighbour on the other rank.
    alone = simulate(_config(), _table([0.0], [16], [40])).requests[0]
    beside = simulate(_config(), _table([0.0, 0.05], [16, 8000], [40, 1])).requests[0]
    tpot = lambda r: (r.completed_at - r.first_token_at) / (r.num_output_tokens - 1)  # noqa: E731
    assert tpot(beside) > 1.2 * tpot(alone)


@pytest.mark.parametrize("concurrency", [None, 6])
def test_dp_runs_are_the_same_with_fast_paths_on_and_off_and_lose_nothing(concurrency) -> None:  # noqa: ANN001
    wl = WorkloadConfig(name="sharegpt", num_requests=60, qps=8.0, concurrency=concurrency)
    base = RunConfig(replica=ReplicaConfig(**MOE, attention_dp=2), workload=wl, seed=3)
    fast, plain = simulate(base), simulate(base.replace(fast_forward=False))
    cols = ("arrival_at", "first_token_at", "completed_at", "replica_id", "num_generated")
    for name in cols:
        assert [getattr(r, name) for r in fast.requests] == [getattr(r, name) for r in plain.requests], name
    assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in fast.requests)
    steps = _steps(fast)
    assert all(len({d for _, d in rows}) == 1 for rows in steps.values())


def test_disaggregated_dp_pools_step_their_ranks_together() -> None:
    config = RunConfig(replica=ReplicaConfig(**MOE, attention_dp=2),
                       workload=WorkloadConfig(name="sharegpt", num_requests=40, qps=6.0), seed=1)
    config = config.replace(prefill_pool="1x(tp=1,dp=2,ep=2)", decode_pool="1x(tp=1,dp=2,ep=2)")
    result = simulate(config)
    assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in result.requests)
    frame = result.iteration_frame()
    for ranks in ((0, 1), (2, 3)):  # the prefill replica's ranks, then the decode replica's
        pool = frame[frame.replica_id.isin(ranks)]
        durations = pool.groupby("started_at").duration_s.nunique()
        assert (durations == 1).all()
        assert (pool.groupby("started_at").replica_id.nunique() == 2).any()  # both ranks ran together


# -- event skipping over a group (simulator.fast.dp_group) ---------------------------------------------------------
@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_a_groups_skipped_stretches_are_its_steps_to_the_bit(scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Four ranks at a light load (ranks idle, ranks decoding alone, long prompts on one rank beside
    # another's decodes), then a tight cache (preemptions): skipping on and off give the same tables.
    stretches = record_stretches(monkeypatch)
    for qps, blocks in ((2.0, None), (12.0, 400)):
        replica = ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4, num_gpu_blocks=blocks, max_model_len=4096)
        config = RunConfig(replica=replica, scheduler=SchedulerConfig(scheduler),
                           workload=WorkloadConfig("sharegpt", num_requests=80, qps=qps), seed=5)
        assert_same_run(config)
    assert stretches  # the groups did skip


@pytest.mark.parametrize("concurrency", [None, 12])
def test_a_group_skips_with_measured_kernels_and_closed_loops(aic, concurrency, monkeypatch) -> None:  # noqa: ANN001
    # Kernel tables count extrapolations per priced step: a stretch cut to the group's shortest
    # counts only the steps it applies (RunResult.extra compares them).
    stretches = record_stretches(monkeypatch)
    config = RunConfig(replica=ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4, kernels="vllm"),
                       workload=WorkloadConfig("sharegpt", num_requests=60, qps=3.0, concurrency=concurrency), seed=2)
    assert_same_run(config)
    assert stretches


def test_a_group_in_a_capacity_trial_ends_as_it_does_stepping() -> None:
    # A watch reads the ranks at its wake-ups: the group's stretches end before them.
    config = RunConfig(replica=ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4),
                       workload=WorkloadConfig("sharegpt", num_requests=150, qps=40.0), seed=3)
    runs = [simulate(config.replace(fast_forward=fast), watch=OverloadWatch(2.0, 30.0, tbt_s=0.05, tbt_quantile=99.0),
                     token_times=True) for fast in (True, False)]
    on, off = runs
    assert on.extra == off.extra
    assert request_frame(on).equals(request_frame(off))
    assert on.iteration_frame().equals(off.iteration_frame())
