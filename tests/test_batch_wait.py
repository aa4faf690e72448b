"""TensorRT-LLM's batch waiting (simulator.engine.batch_wait): the new prompts of a step that also
decodes wait until the step's tokens reach a share of the budget or the wait times out; the rule
alone on hand-made queues, then in runs (held steps, fast paths, refusals)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_run, cache_a_prefix_beside_decodes, hashed_request, record_stretches

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.engine.batch_wait import BatchWait
from simulator.engine.kvcache import BlockManager
from simulator.engine.schedulers import SCHEDULERS
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable
from simulator.workload.request import Request

DENSE = dict(model="llama-3.1-8b", gpu="h100-sxm")


def _scheduler(budget: int = 1000, timeout: int = 3, ratio: float = 0.5, max_num_seqs: int = 8):  # noqa: ANN202
    config = SchedulerConfig("vllm-v1", max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
                             batch_wait_timeout_iters=timeout, batch_wait_max_tokens_ratio=ratio)
    return SCHEDULERS["vllm-v1"](config, BlockManager(10_000, 16), 8192)


def _request(rid: int, prompt: int, generated: int = 0) -> Request:
    req = Request(request_id=rid, arrival_at=0.0, num_prompt_tokens=prompt, num_output_tokens=100)
    req.num_generated = generated
    req.num_computed = prompt + generated - 1 if generated else 0
    return req


def test_a_small_prompt_beside_decodes_waits_out_the_timeout() -> None:
    s = _scheduler(timeout=3)
    wait = BatchWait.of(s)
    s.running = [_request(0, 50, generated=5)]
    s.waiting.append(_request(1, 100))  # 1 + 100 tokens < 0.5 x 1000
    assert [wait.holds(s) for _ in range(5)] == [True, True, True, False, True]  # released on the 4th, then anew


def test_prompts_reaching_the_share_of_the_budget_go_at_once() -> None:
    s = _scheduler(timeout=3)
    wait = BatchWait.of(s)
    s.running = [_request(0, 50, generated=5)]
    s.waiting.extend([_request(1, 300), _request(2, 250)])  # 1 + 300 + 250 >= 500
    assert not wait.holds(s)
    assert wait.num_waited == 0
    # Slots count: with one slot free only the first prompt counts, and the step waits.
    s.max_num_seqs = 2
    assert wait.holds(s)


@pytest.mark.parametrize(("name", "held"), [("trtllm", True), ("vllm-v1", False)])
def test_a_whole_prompt_past_the_budget_is_not_counted_where_prompts_run_whole(name, held) -> None:  # noqa: ANN001
    """TensorRT-LLM counts the context requests its micro-batch scheduler picked, which stops at the first that
    does not fit max_num_tokens: beside 100 decodes, two 5,000-token prompts under an 8,192 budget schedule one,
    5,100 tokens, under 0.8 x 8,192, so the step is held (it was released, the second prompt counted). A policy
    that chunks schedules a chunk of the second up to the budget: released."""
    config = SchedulerConfig(name, max_num_batched_tokens=8192, max_num_seqs=256, batch_wait_timeout_iters=40,
                             batch_wait_max_tokens_ratio=0.8)
    s = SCHEDULERS[name](config, BlockManager(100_000, 16), 32_768)
    wait = BatchWait.of(s)
    s.running = [_request(i, 50, generated=5) for i in range(100)]
    s.waiting.extend([_request(100, 5000), _request(101, 5000)])
    assert wait.holds(s) is held


def test_nothing_waits_or_counts_without_decodes_or_without_a_prompt() -> None:
    s = _scheduler(timeout=3)
    wait = BatchWait.of(s)
    s.waiting.append(_request(1, 100))
    assert not wait.holds(s) and wait.num_waited == 0  # no decodes: no dead wait
    s.running, s.waiting = [_request(0, 50, generated=5)], type(s.waiting)()
    assert not wait.holds(s) and wait.num_waited == 0  # no prompt
    s.running.append(_request(2, 80))  # a prompt under way counts as scheduled context
    assert wait.holds(s) and wait.num_waited == 1


def test_off_without_a_timeout() -> None:
    assert BatchWait.of(SCHEDULERS["vllm-v1"](SchedulerConfig("vllm-v1"), BlockManager(100, 16), 4096)) is None


# -- in runs ----------------------------------------------------------------------------------------------------------
def _config(timeout: int = 0, ratio: float = 0.0, scheduler: str = "vllm-v1", **workload) -> RunConfig:
    wl = WorkloadConfig(**{"name": "fixed", "num_requests": 2, "qps": 1.0, "prompt_tokens": 64,
                           "output_tokens": 8, **workload})
    return RunConfig(replica=ReplicaConfig(**DENSE), workload=wl, scheduler=SchedulerConfig(
        scheduler, batch_wait_timeout_iters=timeout, batch_wait_max_tokens_ratio=ratio))


def _table(arrival, prompt, output) -> RequestTable:  # noqa: ANN001
    return RequestTable(np.asarray(arrival, float), np.asarray(prompt, np.int64), np.asarray(output, np.int64), "test")


def test_a_prompt_arriving_beside_a_decode_starts_after_the_timeouts_steps() -> None:
    # Request 0 decodes 400 tokens alone; request 1 arrives meanwhile: with a timeout of 7 it is held
    # in the 7 steps that begin after it arrives and starts in the 8th.
    table = _table([0.0, 0.5], [64, 64], [400, 8])
    plain = simulate(_config(), table)
    held = simulate(_config(7, 0.8), table)
    for result in (plain, held):
        assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in result.requests)
    starts = sorted(set(held.iteration_frame().started_at.tolist()))
    after = [at for at in starts if at >= 0.5]
    assert held.requests[1].first_scheduled_at == after[7]
    assert plain.requests[1].first_scheduled_at == after[0]
    assert held.requests[0].first_token_at == plain.requests[0].first_token_at


def test_batch_waiting_lengthens_ttft_and_groups_prefills_in_a_closed_loop() -> None:
    wl = dict(name="sharegpt", num_requests=300, concurrency=48)
    plain = simulate(_config(**wl))
    held = simulate(_config(40, 0.8, **wl))
    frame = lambda result: result.iteration_frame()  # noqa: E731
    mixed = lambda f: int(((f.num_prefill_tokens > 0) & (f.num_decodes > 0)).sum())  # noqa: E731
    assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in held.requests)
    ttft = lambda result: np.mean([r.first_token_at - r.arrival_at for r in result.requests])  # noqa: E731
    assert ttft(held) > 1.2 * ttft(plain)
    assert mixed(frame(held)) < 0.9 * mixed(frame(plain))  # fewer steps stall decodes with a prefill (294 -> 239)


@pytest.mark.parametrize("scheduler", ["vllm-v1", "sarathi", "trtllm"])
def test_runs_with_batch_waiting_are_the_same_with_fast_paths_on_and_off(scheduler: str, monkeypatch) -> None:  # noqa: ANN001
    stretches = record_stretches(monkeypatch)
    for concurrency, qps in ((None, 6.0), (24, 1.0)):
        config = _config(12, 0.6, scheduler, name="sharegpt", num_requests=120, qps=qps, concurrency=concurrency)
        assert_same_run(config.replace(seed=4))
    assert stretches  # stretches of decodes still skipped where no prompt waited


def test_refusals() -> None:
    with pytest.raises(ConfigError, match="batch_wait_max_tokens_ratio"):
        SchedulerConfig("vllm-v1", batch_wait_max_tokens_ratio=0.8)  # without a timeout: never waits
    with pytest.raises(ConfigError, match="batch_wait_timeout_iters"):
        SchedulerConfig("vllm-v1", batch_wait_timeout_iters=40)  # without a ratio: never waits
    with pytest.raises(ConfigError, match="sglang never runs"):
        SchedulerConfig("sglang", batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.8)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        SchedulerConfig("trtllm", batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=1.5)
    on = SchedulerConfig("trtllm", batch_wait_timeout_iters=40, batch_wait_max_tokens_ratio=0.8)
    with pytest.raises(ConfigError, match="without attention DP"):
        RunConfig(replica=ReplicaConfig(model="qwen3-30b-a3b", gpu="h100-sxm", attention_dp=2, ep=2), scheduler=on)
    with pytest.raises(ConfigError, match=r"disaggregated run's prefill and decode pools never mix them\)"):
        RunConfig(replica=ReplicaConfig(**DENSE), scheduler=on, prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)")
    with pytest.raises(ConfigError, match="batch waiting in its --mixed-pool is not modelled"):
        RunConfig(replica=ReplicaConfig(**DENSE), scheduler=on, prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)",
                  mixed_pool="1x(tp=1)")


@pytest.mark.parametrize("scheduler", ["sarathi", "trtllm"])
def test_fast_paths_agree_where_decodes_leave_no_room_for_the_waiting(scheduler: str, monkeypatch) -> None:  # noqa: ANN001
    # Decodes fill a small budget (sarathi) or leave too little for a whole prompt (trtllm) while
    # prompts wait: steady batches that the rule is still asked about at every step (SkippingReplica
    # steps them one by one while batch waiting is on and a prompt waits).
    stretches = record_stretches(monkeypatch)
    wl = WorkloadConfig("sharegpt", num_requests=150, concurrency=40)
    config = RunConfig(replica=ReplicaConfig(**DENSE), workload=wl, seed=6, scheduler=SchedulerConfig(
        scheduler, max_num_batched_tokens=48 if scheduler == "sarathi" else 600, batch_wait_timeout_iters=5,
        batch_wait_max_tokens_ratio=0.9))
    assert_same_run(config)
    assert stretches


def test_a_cached_prefix_fits_the_budget_as_trtllm_schedules_it() -> None:
    """The fit test takes the reuse-adjusted tokens the trtllm policy schedules (8,000 of 8,016 cached beside 201
    decodes fits 8,192), while the threshold counts the whole prompt (8,217 >= 0.8 x 8,192): released."""
    from simulator.engine.prefix_cache import PrefixCachingBlockManager

    config = SchedulerConfig("trtllm", max_num_batched_tokens=8192, max_num_seqs=512, batch_wait_timeout_iters=40,
                             batch_wait_max_tokens_ratio=0.8, prefix_caching=True, watermark=0.0)
    s = SCHEDULERS["trtllm"](config, PrefixCachingBlockManager(20_000, 16, 0.0), 32_768)
    cache_a_prefix_beside_decodes(s)
    s.add_request(hashed_request(999, 8016))
    assert not BatchWait.of(s).holds(s)
