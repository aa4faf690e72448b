"""The prefix cache's CPU tier: evicted blocks kept in host memory, found after the GPU hits,
loaded over the host link before the prefill; off by default; exact under the fast paths."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig
from simulator.engine.kvcache import plan_memory
from simulator.engine.prefix_cache import PrefixCachingBlockManager, RadixBlockManager
from simulator.engine.replica import cpu_tier
from simulator.report.metrics import request_frame, summarize
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable
from simulator.workload.request import Request
from simulator.workload.sessions import agents, generate_sessions

BS = 16


def _req(rid: int, prompt: int, hashes) -> Request:  # noqa: ANN001
    req = Request(rid, 0.0, prompt, 4)
    req.block_hashes = np.asarray(hashes, dtype=np.int64)
    req.hash_block_size = 4 * BS
    return req


def _run(mgr: PrefixCachingBlockManager, req: Request) -> int:
    mgr.admit(req, req.num_prompt_tokens)
    hit = req.num_computed
    req.num_computed = req.num_prompt_tokens
    mgr.free(req)
    mgr.check()
    return hit


@pytest.mark.parametrize("cls", [PrefixCachingBlockManager, RadixBlockManager])
def test_evicted_blocks_are_found_in_the_host_tier_and_owe_their_load(cls):
    mgr = cls(16, BS, 0.0, host_blocks=10, host_load_s=0.5)
    a = _req(0, 8 * BS + 1, [1, 2])  # 8 full blocks (2 trace blocks of 4), 9 held
    assert _run(mgr, a) == 0
    _run(mgr, _req(1, 12 * BS, [7, 8, 9]))  # 12 new blocks: 7 empty, 5 of a's evicted (to the host)
    b = _req(2, 8 * BS + 1, [1, 2])
    mgr.admit(b, b.num_prompt_tokens)
    gpu = mgr.num_hit_tokens
    assert b.num_cached_tokens == 8 * BS == b.num_computed  # the GPU's blocks, then the host's
    assert b.num_host_cached_tokens == 8 * BS - gpu and b.num_host_cached_tokens > 0
    assert mgr.take_pending_load_s() == pytest.approx(0.5 * b.num_host_cached_tokens / BS)
    assert mgr.take_pending_load_s() == 0.0  # taken once
    b.num_computed = b.num_prompt_tokens
    mgr.free(b)
    mgr.check()
    # The host keeps its most recent blocks: 10 of them once more than 10 were evicted.
    for i in range(4):
        _run(mgr, _req(10 + i, 12 * BS, [100 + 3 * i, 101 + 3 * i, 102 + 3 * i]))
    assert len(mgr._host) == 10


def test_without_a_tier_evicted_blocks_are_gone():
    mgr = PrefixCachingBlockManager(16, BS, 0.0)
    _run(mgr, _req(0, 8 * BS + 1, [1, 2]))
    _run(mgr, _req(1, 12 * BS, [7, 8, 9]))
    b = _req(2, 8 * BS + 1, [1, 2])
    assert _run(mgr, b) < 8 * BS and b.num_host_cached_tokens == 0 and mgr.pending_load_s == 0.0


def _config(num_blocks: int | None, cpu_kv_gib: float = 0.0, max_model_len: int = 32_768, **kw) -> RunConfig:  # noqa: ANN003
    return RunConfig(replica=ReplicaConfig("llama-3.1-8b", "h100-sxm", max_model_len=max_model_len,
                                           num_gpu_blocks=num_blocks),
                     scheduler=SchedulerConfig("vllm-v1", max_num_batched_tokens=8192, cpu_kv_gib=cpu_kv_gib), **kw)


def test_a_host_hit_costs_its_pcie_load_before_a_one_token_prefill():
    prompt = 400 * BS + 1  # 100 trace blocks of 64
    fill = 1_000 * BS
    table = RequestTable([0.0, 50.0, 100.0, 200.0], [prompt, fill, fill, prompt], [1, 1, 1, 1], "a, fillers, a",
                         block_hashes=[np.arange(100), np.arange(1000, 1250), np.arange(2000, 2250), np.arange(100)],
                         hash_block_size=64)
    tiered = _config(1_500, cpu_kv_gib=50.0, max_model_len=16_384)  # the second filler pushes all of a's blocks to the host
    roomy = _config(20_000, max_model_len=16_384)  # a's blocks stay on the GPU
    on = simulate(tiered, table).iteration_frame()
    gpu = simulate(roomy, table).iteration_frame()
    assert on["num_prefill_tokens"].iloc[-1] == gpu["num_prefill_tokens"].iloc[-1] == 1
    run = simulate(tiered, table)
    assert run.requests[3].num_host_cached_tokens == 400 * BS and run.requests[3].num_cached_tokens == 400 * BS
    plan = plan_memory(tiered.replica, 8192, tiered.scheduler.seq_limit(tiered.replica.gpu_spec))
    host_blocks, load_s = cpu_tier(tiered.replica, tiered.scheduler, plan)
    assert host_blocks > 1000 and load_s > 0
    # Same one-token step over the same context; the tier's also waits for 400 blocks over PCIe
    # (KV per token of Llama-3.1-8B, 128 KiB, over 64 GB/s: 32 us a 16-token block).
    assert on["duration_s"].iloc[-1] - gpu["duration_s"].iloc[-1] == pytest.approx(400 * load_s, rel=1e-9)
    assert load_s == pytest.approx(128 * 1024 * BS / 64e9, rel=0.05)
    pc = summarize(run)["prefix_caching"]
    assert pc["cpu_hit_rate"] > 0 and pc["gpu_hit_rate"] + pc["cpu_hit_rate"] == pytest.approx(pc["hit_rate"])


def test_the_tier_is_off_by_default_and_a_tier_never_used_changes_nothing():
    assert SchedulerConfig("vllm-v1").cpu_kv_gib == 0.0
    table = generate_sessions(agents(3, mean_turns=4.0, max_prompt_tokens=32_768), np.random.default_rng(1))
    base = simulate(_config(None), table)
    tier = simulate(_config(None, cpu_kv_gib=10.0), table)  # the GPU cache never evicts here
    assert request_frame(base).equals(request_frame(tier))
    assert base.iteration_frame().equals(tier.iteration_frame())
    assert "cpu_hit_rate" not in summarize(base)["prefix_caching"]


def test_fast_paths_are_exact_with_a_cpu_tier():
    traffic = agents(8, mean_turns=8.0, session_rate=2.0, think_mean_s=0.5, max_prompt_tokens=32_768)
    table = generate_sessions(traffic, np.random.default_rng(7))
    config = _config(2_500, cpu_kv_gib=20.0, num_replicas=2, router="prefix_aware")
    on = simulate(config, table, token_times=True)
    off = simulate(config.replace(fast_forward=False), table, token_times=True)
    assert request_frame(on).equals(request_frame(off))
    assert on.iteration_frame().equals(off.iteration_frame())
    loaded = [r.num_host_cached_tokens for r in on.requests]
    assert loaded == [r.num_host_cached_tokens for r in off.requests] and sum(loaded) > 0


def test_refusals():
    # (the run refuses it, not its SchedulerConfig: a disaggregated run's pools may cache under their own sched=)
    with pytest.raises(ConfigError, match="scheduler.cpu_kv_gib.*prefix caching is off"):
        RunConfig(scheduler=SchedulerConfig("sarathi", cpu_kv_gib=8.0))
    with pytest.raises(ConfigError, match="scheduler.cpu_kv_gib"):
        SchedulerConfig("vllm-v1", cpu_kv_gib=-1.0)
    with pytest.raises(ConfigError, match="scheduler.cpu_kv_gib.*one-stage"):
        RunConfig(replica=ReplicaConfig("llama-3.1-8b", "h100-sxm", pp=2),
                  scheduler=SchedulerConfig("vllm-v1", cpu_kv_gib=8.0))
