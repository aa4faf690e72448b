"""Prefix caching on a disaggregated run's prefill pool (engine.disagg, config.disagg_layout.pool_prefix_cache):
a prompt's cached prefix is not computed again, the handoff still carries the whole prompt's KV, the prompt's
blocks go back to the prefill worker's cache after the transfer, and the decode pool keeps no cache."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from simulator.config.disagg_layout import kv_bytes_per_token, layout_of
from simulator.config.errors import ConfigError
from simulator.config.options import build_config, router_unread
from simulator.config.run_config import RunConfig
from simulator.config.speculative import SpeculativeConfig
from simulator.engine.kvcache import BlockManager
from simulator.engine.prefix_cache import PrefixCachingBlockManager, RadixBlockManager
from simulator.report.metrics import prefix_cache_summary, request_frame, summarize
from simulator.simulation import simulate
from tests.test_disagg import balanced_run

HASH_BS = 64


def shared_prefix_table(n: int = 40, hashed: bool = True, groups: int = 4, gap_s: float = 0.05):  # noqa: ANN201
    """``n`` prompts of 1,024 tokens in ``groups`` families sharing their first 768 tokens (12 of 16 hash ids),
    16 output tokens each, one every ``gap_s`` seconds; without hashes where not ``hashed``."""
    prompts, hashes = [], []
    for i in range(n):
        family = i % groups
        ids = [family * 1000 + k for k in range(12)] + [100_000 + i * 16 + k for k in range(4)]
        prompts.append(1024)
        hashes.append(np.asarray(ids, dtype=np.int64))
    tab = SimpleNamespace(arrival_at=[i * gap_s for i in range(n)], num_prompt_tokens=prompts,
                          num_output_tokens=[16] * n, source="test")
    if hashed:
        tab.block_hashes = tuple(hashes)
        tab.hash_block_size = HASH_BS
    return tab


def pools(**kw) -> RunConfig:  # noqa: ANN003
    return RunConfig().replace(prefill_pool="2x(tp=1)", decode_pool="1x(tp=1)", kv_link="infiniband-200g",
                               replica__max_model_len=2048, **kw)


def prefill_tokens(result) -> int:  # noqa: ANN001
    """Prompt tokens the prefill pool's iterations computed."""
    iters = result.iteration_frame()
    prefill = np.flatnonzero(np.array(result.disagg.pools) == "prefill")
    return int(iters.loc[iters["replica_id"].isin(prefill), "num_prefill_tokens"].sum())


def test_the_prefill_pool_caches_by_default_where_the_run_s_engine_does() -> None:
    """vllm-v1 (the default --scheduler) caches by default: the prefill pool does, with its policy; the decode pool
    never; --no-prefix-caching, a --scheduler that caches nothing by default and speculation turn it off."""
    layout = layout_of(pools())
    assert layout.prefill_scheduler.prefix_cache == "vllm-lru"
    assert layout.decode_scheduler.prefix_cache is None
    assert layout_of(pools(scheduler__name="sglang")).prefill_scheduler.prefix_cache == "radix-lru"
    assert layout_of(pools(scheduler__prefix_cache_policy="radix-lru")).prefill_scheduler.prefix_cache == "radix-lru"
    assert layout_of(pools(scheduler__prefix_caching=False)).prefill_scheduler.prefix_cache is None
    assert layout_of(pools(scheduler__name="vllm")).prefill_scheduler.prefix_cache is None
    assert layout_of(pools(scheduler__name="vllm", scheduler__prefix_caching=True)).prefill_scheduler.prefix_cache \
        == "vllm-lru"
    # a pool's own sched= that caches by default (SGLang's radix cache)
    assert layout_of(pools(scheduler__name="vllm").replace(prefill_pool="2x(tp=1,sched=sglang)")) \
        .prefill_scheduler.prefix_cache == "radix-lru"
    spec = RunConfig().replace(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)",
                               speculative=SpeculativeConfig("ngram", 3, acceptance_rates=(0.5,)))
    assert layout_of(spec).prefill_scheduler.prefix_cache is None  # as the aggregated path: speculation turns it off


def test_replicas_build_a_prefix_cache_on_the_prefill_pool_only() -> None:
    import simpy

    from simulator.engine.disagg import DisaggCluster
    from simulator.engine.records import Recorder

    for config, kind in ((pools(), PrefixCachingBlockManager), (pools(scheduler__prefix_cache_policy="radix-lru"),
                                                                RadixBlockManager)):
        cluster = DisaggCluster(simpy.Environment(), config, layout_of(config), Recorder(), np.random.default_rng(0), 1)
        assert all(type(r.scheduler.blocks) is kind for r in cluster.prefill)
        assert all(type(r.scheduler.blocks) is BlockManager for r in cluster.decode)
    off = pools(scheduler__prefix_caching=False)
    cluster = DisaggCluster(simpy.Environment(), off, layout_of(off), Recorder(), np.random.default_rng(0), 1)
    assert all(type(r.scheduler.blocks) is BlockManager for r in cluster.replicas)


@pytest.mark.parametrize("policy", ["vllm-lru", "radix-lru"])
def test_cached_prefixes_are_not_computed_again_and_the_whole_prompt_is_transferred(policy: str) -> None:
    """Over prompts sharing prefixes: fewer prefill tokens computed and a lower mean TTFT with caching on, every
    request finishes, each transfer carries the whole prompt's KV either way, and blocks balance throughout
    (shared blocks counted once) and at the end (every block free or evictable)."""
    tab = shared_prefix_table()
    on = balanced_run(pools(scheduler__prefix_cache_policy=policy), tab)
    off = balanced_run(pools(scheduler__prefix_caching=False), tab)
    for result in (on, off):
        assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in result.requests)
        assert result.disagg.final_free_blocks == result.disagg.num_blocks
        per_token = kv_bytes_per_token(layout_of(result.config).prefill_replica)
        np.testing.assert_array_equal(result.disagg.handoff.kv_bytes, np.full(len(tab.arrival_at), 1024 * per_token))
    assert prefill_tokens(off) == 1024 * len(tab.arrival_at)
    saved = sum(r.num_cached_tokens for r in on.requests)
    assert saved > 0 and prefill_tokens(on) == 1024 * len(tab.arrival_at) - saved
    ttft = {name: request_frame(r)["ttft_s"].mean() for name, r in (("on", on), ("off", off))}
    assert ttft["on"] < ttft["off"]
    pc = prefix_cache_summary(on)
    assert pc["pool"] == "prefill" and pc["policy"] == policy and pc["prefill_tokens_saved"] == saved
    assert pc["hit_rate"] == pytest.approx(saved / (1024 * len(tab.arrival_at)))
    assert "prefix_caching" not in summarize(off)


def test_a_workload_without_block_hashes_runs_as_without_the_cache() -> None:
    """No prompt names a block: the prefill pool's cache never hits, and the run is the uncached run's, bit for bit."""
    tab = shared_prefix_table(hashed=False)
    on, off = (request_frame(simulate(pools(scheduler__prefix_caching=flag), tab)) for flag in (None, False))
    assert on.equals(off)


def test_same_seed_same_results() -> None:
    tab = shared_prefix_table()
    a, b = (request_frame(simulate(pools(), tab)) for _ in range(2))
    assert a.equals(b)


def test_prefix_aware_routes_the_prefill_workers_by_their_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """prefix_aware reads the prefill workers' caches (it had been handed none, and ran as least outstanding): a
    family's prompts after its first go where its prefix is cached, and hit there."""
    import simulator.engine.disagg as disagg

    seen = []
    original = disagg.route

    def spy(name, outstanding, step, rng, req, caches, memo):  # noqa: ANN001, ANN202
        seen.append([c.cached_prefix_tokens(req) for c in caches])
        return original(name, outstanding, step, rng, req, caches, memo)

    monkeypatch.setattr(disagg, "route", spy)
    tab = shared_prefix_table(n=24, groups=2, gap_s=0.2)
    result = simulate(pools(router="prefix_aware"), tab)
    assert len(seen) == 24 and all(len(hits) == 2 for hits in seen)
    worker = result.disagg.handoff.prefill_replica_id
    for i, hits in enumerate(seen[2:], start=2):  # each family's prefix is cached by its first request
        assert max(hits) == 768 and hits[worker[i]] == 768
    assert all(r.completed_at is not None for r in result.requests)


# -- the flags --------------------------------------------------------------------------------------------------

DIS = {"prefill_pool": "2x(tp=1)", "decode_pool": "1x(tp=1)", "num_requests": 30}


@pytest.fixture
def mooncake(shared_data) -> str:  # noqa: ANN001
    return str(shared_data / "traces" / "mooncake" / "conversation_trace.jsonl")


@pytest.mark.parametrize("flag", [{"prefix_cache_policy": "radix-lru"}, {"prefix_caching": False},
                                  {"prefix_caching": True}, {"cpu_kv_gib": 4}, {"router": "prefix_aware"}])
def test_the_prefix_cache_flags_apply_to_the_prefill_pool(flag: dict, mooncake: str) -> None:
    config = build_config(**DIS, trace=mooncake, **flag)
    layout = layout_of(config)
    if flag.get("prefix_caching") is False:
        assert layout.prefill_scheduler.prefix_cache is None
    else:
        assert layout.prefill_scheduler.prefix_cache == flag.get("prefix_cache_policy", "vllm-lru")
        assert layout.prefill_scheduler.cpu_kv_gib == flag.get("cpu_kv_gib", 0)
    assert layout.decode_scheduler.prefix_cache is None and layout.decode_scheduler.cpu_kv_gib == 0


def test_the_prefix_cache_flags_are_refused_where_no_pool_caches(mooncake: str) -> None:
    """--scheduler vllm caches nothing by default (nor the pools' vllm): the policy has nothing to rule, and
    --no-prefix-caching turns off what is off; --router prefix_aware has no cache to read."""
    for flag, needle in (({"prefix_cache_policy": "radix-lru"}, "prefix caching is off in the prefill pool"),
                         ({"prefix_caching": False}, "no pool of the run caches prefixes by default")):
        with pytest.raises(ConfigError) as err:
            build_config(**DIS, trace=mooncake, scheduler="vllm", max_num_batched_tokens=8192, **flag)
        assert needle in str(err.value) and "\n" not in str(err.value)
    # (a trace's hashes are read from its file: check_router asks router_unread)
    routed = build_config(**DIS, trace=mooncake, scheduler="vllm", max_num_batched_tokens=8192, router="prefix_aware")
    why, fix = router_unread(routed, hashes=True, sessions=False, source="the trace")
    assert "prefix caching is off in the prefill pool" in why and "pass --prefix-caching" in fix
    assert router_unread(routed.replace(scheduler__prefix_caching=True), hashes=True, sessions=False,
                         source="the trace") is None
    build_config(**DIS, trace=mooncake, scheduler="vllm", max_num_batched_tokens=8192, prefix_caching=True)
    # --scheduler is read where it changes whether the prefill pool caches (over a trace)
    build_config(**DIS, trace=mooncake, scheduler="vllm")
    build_config(**DIS, trace=mooncake, scheduler="sglang")  # (radix-lru in the prefill pool)
    with pytest.raises(ConfigError, match="--scheduler"):  # no blocks to cache: the pools' own schedulers
        build_config(**{**DIS, "prefill_pool": "2x(tp=1,sched=vllm)", "decode_pool": "1x(tp=1,sched=vllm)"},
                     workload="sharegpt", scheduler="sglang")
    # (pools without sched= run --scheduler's: it is read there, sglang in both pools)
    layout = layout_of(build_config(**DIS, workload="sharegpt", scheduler="sglang"))
    assert layout.prefill_scheduler.name == layout.decode_scheduler.name == "sglang"


def test_a_cpu_tier_is_refused_on_a_pipelined_prefill_pool(mooncake: str) -> None:
    with pytest.raises(ConfigError, match="one-stage replicas only"):
        build_config(**{**DIS, "prefill_pool": "1x(tp=1,pp=2)"}, trace=mooncake, cpu_kv_gib=4)


# -- a pool's own sched= and the run's --scheduler: the pools decide whether (and what) they cache ----------------

SGLANG_POOLS = ["--prefill-pool", "1x(tp=1,sched=sglang)", "--decode-pool", "1x(tp=1)",
                "--scheduler", "vllm", "--max-num-batched-tokens", "8192"]  # (vllm caches nothing by default)


@pytest.fixture
def evicting_trace(tmp_path) -> str:  # noqa: ANN001
    """A Mooncake JSONL of four 2,048-token prompts (512-token hash blocks), the last the first's again after two
    others have pushed it out of a 300-block GPU cache (``--num-gpu-blocks 300``)."""
    import json

    path = tmp_path / "hashed.jsonl"
    rows = [(0, [0, 1, 2, 3]), (5000, [10, 11, 12, 13]), (10000, [20, 21, 22, 23]), (15000, [0, 1, 2, 3])]
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 2048, "output_length": 4, "hash_ids": ids})
                            + "\n" for t, ids in rows))
    return str(path)


def _cli(*args: str):  # noqa: ANN202
    from typer.testing import CliRunner

    from simulator.cli.app import app

    return CliRunner().invoke(app, ["run", *args, "--no-progress"])


def test_a_cpu_tier_is_read_where_a_pool_s_own_scheduler_caches(evicting_trace: str) -> None:
    """--scheduler vllm caches nothing by default, but the prefill pool's sched=sglang does (its radix cache):
    --cpu-kv-gib had been refused by the run's scheduler alone ("prefix caching is off"). The pool's cache keeps its
    evictions in the tier now: the repeated prompt is found there, saving prefill tokens and TTFT."""
    import json

    args = [*SGLANG_POOLS, "--trace", evicting_trace, "--arrival", "trace", "--num-gpu-blocks", "300", "--json"]
    plain, tiered = _cli(*args), _cli(*args, "--cpu-kv-gib", "4")
    assert plain.exit_code == 0, plain.output
    assert tiered.exit_code == 0, tiered.output
    without, with_tier = json.loads(plain.output), json.loads(tiered.output)
    pc = with_tier["prefix_caching"]
    assert pc["pool"] == "prefill" and pc["policy"] == "radix-lru" and pc["cpu_kv_gib"] == 4
    assert pc["tokens_loaded_from_cpu"] > 0
    assert pc["prefill_tokens_saved"] > without["prefix_caching"]["prefill_tokens_saved"]
    assert with_tier["ttft_s_mean"] < without["ttft_s_mean"]


def test_a_cpu_tier_goes_to_the_pools_that_cache_and_is_refused_where_none_does() -> None:
    """The pools decide: a mixed pool whose sched= caches takes the tier under a --scheduler that does not; a mixed
    pool that caches nothing no longer refuses a tier the prefill pool reads (it keeps none itself); where no pool
    caches, the tier is refused, naming the pools' schedulers (or speculation, which turns caching off)."""
    base = pools(scheduler__name="vllm", scheduler__max_num_batched_tokens=8192)
    mixed = layout_of(base.replace(mixed_pool="1x(tp=1,sched=sglang)", scheduler__cpu_kv_gib=4.0))
    assert mixed.prefill_scheduler.prefix_cache is None and mixed.prefill_scheduler.cpu_kv_gib == 0
    assert mixed.mixed_scheduler.prefix_cache == "radix-lru" and mixed.mixed_scheduler.cpu_kv_gib == 4
    plain_mixed = layout_of(pools(mixed_pool="1x(tp=1,sched=vllm)", scheduler__cpu_kv_gib=4.0))
    assert plain_mixed.prefill_scheduler.prefix_cache == "vllm-lru" and plain_mixed.prefill_scheduler.cpu_kv_gib == 4
    assert plain_mixed.mixed_scheduler.prefix_cache is None and plain_mixed.mixed_scheduler.cpu_kv_gib == 0
    with pytest.raises(ConfigError) as err:
        base.replace(scheduler__cpu_kv_gib=4.0)
    assert err.value.field == "scheduler.cpu_kv_gib" and "vllm in the prefill pool under --scheduler vllm" in str(err.value)
    with pytest.raises(ConfigError, match="speculative decoding turns prefix caching off"):
        base.replace(prefill_pool="2x(tp=1,sched=sglang)", scheduler__cpu_kv_gib=4.0,
                     speculative=SpeculativeConfig("ngram", 3, acceptance_rates=(0.5,)))


def test_speculation_turns_off_the_cache_a_pool_s_own_scheduler_would_keep(evicting_trace: str) -> None:
    """A speculating run's prefill (and mixed) replicas hold the drafter with a plain block manager: no prefix cache,
    whatever the pool's sched=. The config said so only where --scheduler cached by default, so under --scheduler
    vllm with sched=sglang the header and summary reported a radix cache (with a 0% hit rate) that no replica kept."""
    import simpy

    from simulator.engine.disagg import DisaggCluster
    from simulator.engine.records import Recorder

    spec = SpeculativeConfig("ngram", 3, acceptance_rates=(0.5,))
    for extra in ({"prefill_pool": "2x(tp=1,sched=sglang)"}, {"mixed_pool": "1x(tp=1,sched=sglang)"}):
        config = pools(scheduler__name="vllm", scheduler__max_num_batched_tokens=8192, speculative=spec).replace(**extra)
        assert config.scheduler.prefix_caching is False  # said in the config (config.json, the result key)
        layout = layout_of(config)
        assert layout.prefill_scheduler.prefix_cache is None
        assert layout.mixed_scheduler is None or layout.mixed_scheduler.prefix_cache is None
        cluster = DisaggCluster(simpy.Environment(), config, layout, Recorder(), np.random.default_rng(0), 1)
        assert all(type(r.scheduler.blocks) is BlockManager for r in cluster.replicas)  # what the replicas keep
    # Where nothing would cache, the config is left as given (its result key unchanged).
    assert pools(scheduler__name="vllm", speculative=spec).scheduler.prefix_caching is None
    res = _cli(*SGLANG_POOLS, "--trace", evicting_trace, "--arrival", "trace",
               "--speculative-config", '{"method":"ngram","num_speculative_tokens":3}', "--acceptance-rate", "0.5")
    assert res.exit_code == 0, res.output
    assert "prefix caching: off" in res.output and "prefix cache (prefill pool)" not in res.output
