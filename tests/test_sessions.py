"""Session traffic and cache-aware routing: the prefix-aware and session routers, the
conversation and agent generators (growing history, shared hashes, think times), closed-loop
sessions in the engine, per-session figures, determinism and the fast paths."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import record_stretches

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig
from simulator.engine.kvcache import BlockManager
from simulator.engine.prefix_cache import PrefixCachingBlockManager
from simulator.engine.routers import (
    LOAD_SLACK_ABS,
    REQUEST_ROUTERS,
    ROUTERS,
    STATE_FREE_ROUTERS,
    prefix_aware,
    session_affinity,
)
from simulator.report.metrics import request_frame
from simulator.report.sessions import session_columns, session_summary, ttft_split
from simulator.simulation import simulate
from simulator.workload.request import Request
from simulator.workload.sessions import SessionTraffic, agents, conversations, generate_sessions

BS = 16
RNG = np.random.default_rng(0)


def _req(rid: int, prompt: int, hashes, session: int = -1) -> Request:  # noqa: ANN001
    req = Request(rid, 0.0, prompt, 4)
    req.block_hashes = np.asarray(hashes, dtype=np.int64)
    req.hash_block_size = 64
    req.session_id = session
    return req


def _cached(mgr: PrefixCachingBlockManager, req: Request) -> None:
    mgr.admit(req, req.num_prompt_tokens)
    req.num_computed = req.num_prompt_tokens
    mgr.free(req)


# -- routers -------------------------------------------------------------------------------------
def test_prefix_aware_picks_the_replica_holding_the_prefix_unless_it_is_overloaded():
    caches = [PrefixCachingBlockManager(1000, BS, 0.0) for _ in range(3)]
    _cached(caches[2], _req(0, 64 * 8, range(8)))  # replica 2 holds 8 blocks of the prefix
    _cached(caches[1], _req(1, 64 * 6, range(6)))  # replica 1 only 6
    q = _req(2, 64 * 10 + 5, range(10))
    assert prefix_aware([0, 0, 5], 0, RNG, req=q, caches=caches) == 2  # longest prefix wins over load
    assert prefix_aware([0, 0, LOAD_SLACK_ABS + 1], 0, RNG, req=q, caches=caches) == 1  # 2 overloaded: next best
    assert prefix_aware([0, LOAD_SLACK_ABS + 1, LOAD_SLACK_ABS + 1], 0, RNG, req=q, caches=caches) == 0
    # A cached prefix under half the prompt does not claim it: the least loaded gets it.
    long_q = _req(4, 64 * 20, range(20))  # replica 2's 512 tokens are 40 % of it
    assert prefix_aware([3, 1, 0], 0, RNG, req=long_q, caches=caches) == 2
    assert prefix_aware([0, 1, 3], 0, RNG, req=long_q, caches=caches) == 0
    assert prefix_aware([0, 1, 3], 0, RNG, req=long_q, caches=caches, cache_threshold=0.25) == 2
    # Overload is relative too: 57 against a least loaded 40 is not (57 < 1.5 * 40).
    assert prefix_aware([40, 40, 40 + LOAD_SLACK_ABS + 1], 0, RNG, req=q, caches=caches) == 2
    # Nothing cached anywhere: the fewest outstanding, then the lowest index.
    other = _req(3, 64 * 10, range(100, 110))
    assert prefix_aware([3, 1, 1], 0, RNG, req=other, caches=caches) == 1
    # No cache to read (caching off: plain block managers) or no request: least outstanding.
    plain = [BlockManager(100, BS, 0.0) for _ in range(3)]
    assert prefix_aware([2, 0, 1], 0, RNG, req=q, caches=plain) == 1
    assert prefix_aware([2, 0, 1], 0, RNG) == ROUTERS["least_outstanding"]([2, 0, 1], 0, RNG)


def test_session_affinity_keeps_a_session_on_its_replica_and_falls_back_to_load():
    memo: dict = {}
    a, b = _req(0, 100, [1], session=7), _req(1, 100, [2], session=8)
    assert session_affinity([3, 0, 2], 0, RNG, req=a, memo=memo) == 1  # new session: least loaded
    assert session_affinity([3, 5, 0], 1, RNG, req=a, memo=memo) == 1  # stays, though 2 is idle now
    assert session_affinity([3, 5, 0], 2, RNG, req=b, memo=memo) == 2
    # Its replica overloaded: the session moves to the least loaded and stays there.
    assert session_affinity([0, LOAD_SLACK_ABS + 1, 4], 3, RNG, req=a, memo=memo) == 0
    assert session_affinity([9, 0, 4], 4, RNG, req=a, memo=memo) == 0
    # No session: least outstanding.
    assert session_affinity([3, 0, 2], 5, RNG, req=_req(2, 100, [3]), memo=memo) == 1


def test_cache_routers_are_request_routers_and_never_state_free():
    assert {"prefix_aware", "session"} <= REQUEST_ROUTERS <= set(ROUTERS)
    assert not REQUEST_ROUTERS & STATE_FREE_ROUTERS
    assert RunConfig(replica=ReplicaConfig("llama-3.1-8b", "h100-sxm"), router="prefix_aware").router == "prefix_aware"


# -- generators ----------------------------------------------------------------------------------
def _by_session(table) -> dict[int, list[int]]:  # noqa: ANN001
    out: dict[int, list[int]] = {}
    for i, s in enumerate(table.session_id.tolist()):
        out.setdefault(s, []).append(i)
    return out


@pytest.mark.parametrize("traffic", [conversations(40, session_rate=1.0), agents(6, mean_turns=10.0)])
def test_history_grows_and_hashes_are_shared(traffic):
    table = generate_sessions(traffic, np.random.default_rng(3))
    sessions = _by_session(table)
    assert len(sessions) == traffic.num_sessions and max(len(v) for v in sessions.values()) > 1
    prompts, outs, hashes = table.num_prompt_tokens, table.num_output_tokens, table.block_hashes
    bs = table.hash_block_size
    for rows in sessions.values():
        for prev, cur in zip(rows, rows[1:], strict=False):
            # The whole history is resent: previous prompt, its answer, and some new tokens.
            assert prompts[cur] > prompts[prev] + outs[prev]
            assert len(hashes[prev]) == prompts[prev] // bs and len(hashes[cur]) == prompts[cur] // bs
            assert np.array_equal(hashes[cur][:len(hashes[prev])], hashes[prev])
    # The shared prefix's full blocks carry the same ids in every session; the rest are the session's own.
    num_shared = traffic.shared_prefix_tokens // bs
    firsts = [rows[0] for rows in sessions.values()]
    assert len({tuple(hashes[i][:num_shared]) for i in firsts}) == 1
    own = [set(hashes[rows[-1]][num_shared:].tolist()) for rows in sessions.values()]
    assert sum(len(s) for s in own) == len(set().union(*own))
    assert (prompts <= traffic.max_prompt_tokens).all()


def test_think_times_closed_and_open():
    closed = generate_sessions(conversations(30, think_mean_s=5.0), np.random.default_rng(4))
    opened = generate_sessions(conversations(30, think_mean_s=5.0, closed=False), np.random.default_rng(4))
    assert opened.think_s is None
    # Same draws either way; open arrivals are spaced by the think times the closed table holds.
    assert np.array_equal(closed.arrival_at, opened.arrival_at)
    thinks = []
    for rows in _by_session(closed).values():
        assert math.isnan(closed.think_s[rows[0]])
        for prev, cur in zip(rows, rows[1:], strict=False):
            assert closed.think_s[cur] >= 0
            assert opened.arrival_at[cur] == pytest.approx(opened.arrival_at[prev] + closed.think_s[cur])
            thinks.append(closed.think_s[cur])
    assert 3.0 < np.mean(thinks) < 7.5  # exponential, mean 5 s
    assert np.all(np.diff(closed.arrival_at) >= 0)


def test_generator_is_deterministic_and_validates():
    a = generate_sessions(agents(5), np.random.default_rng(9))
    b = generate_sessions(agents(5), np.random.default_rng(9))
    assert np.array_equal(a.num_prompt_tokens, b.num_prompt_tokens) and np.array_equal(a.arrival_at, b.arrival_at)
    assert all(np.array_equal(x, y) for x, y in zip(a.block_hashes, b.block_hashes, strict=True))
    with pytest.raises(ConfigError, match="sessions.mean_turns"):
        SessionTraffic(mean_turns=0.5)
    with pytest.raises(ConfigError, match="sessions.kind"):
        SessionTraffic(kind="podcast")


# -- in the engine -------------------------------------------------------------------------------
def _config(router: str = "round_robin", replicas: int = 1, **kw) -> RunConfig:  # noqa: ANN003
    return RunConfig(replica=ReplicaConfig("llama-3.1-8b", "h100-sxm", max_model_len=65_536),
                     scheduler=SchedulerConfig("vllm-v1"), num_replicas=replicas, router=router, **kw)


def test_closed_sessions_send_the_next_turn_a_think_after_the_answer():
    table = generate_sessions(conversations(20, session_rate=4.0, think_mean_s=2.0), np.random.default_rng(5))
    run = simulate(_config(), table)
    reqs = run.requests
    for rows in _by_session(table).values():
        assert reqs[rows[0]].arrival_at == table.arrival_at[rows[0]]
        for prev, cur in zip(rows, rows[1:], strict=False):
            assert reqs[cur].arrival_at == pytest.approx(reqs[prev].completed_at + table.think_s[cur], abs=1e-9)
            assert reqs[cur].arrival_at >= reqs[prev].completed_at  # one request per session in flight
    spans = session_columns(run)
    assert len(spans["session_id"]) == 20 and np.all(spans["span_s"] > 0)
    assert session_summary(run)["num_sessions"] == 20
    split = ttft_split(run)
    assert split["ttft_s_mean"] == pytest.approx(split["ttft_queue_s_mean"] + split["ttft_prefill_s_mean"])
    frame = request_frame(run)
    assert split["ttft_s_p50"] == pytest.approx(frame["ttft_s"].median())
    with pytest.raises(ConfigError, match="concurrency"):
        simulate(_config().replace(workload__concurrency=4), table)


def test_cache_aware_routers_raise_the_hit_rate_and_runs_are_deterministic():
    traffic = conversations(60, session_rate=4.0, think_mean_s=3.0)
    table = generate_sessions(traffic, np.random.default_rng(6))
    hit = {}
    for router in ("round_robin", "prefix_aware", "session"):
        run = simulate(_config(router, replicas=4), table)
        hit[router] = sum(r.num_cached_tokens for r in run.requests) / int(table.num_prompt_tokens.sum())
        if router == "prefix_aware":
            again = simulate(_config(router, replicas=4), table)
            assert request_frame(run).equals(request_frame(again))
    assert hit["prefix_aware"] > hit["round_robin"] + 0.1
    assert hit["session"] > hit["round_robin"] + 0.1


@pytest.mark.parametrize("router,closed", [("prefix_aware", True), ("session", False), ("least_outstanding", True)])
def test_fast_paths_are_exact_with_sessions_and_cache_routers(router, closed, monkeypatch):
    """Lockstep decodes and event skipping on and off give the same run, in a cache small
    enough to evict, with sends at completions (closed) and routers that read the caches."""
    stretches = record_stretches(monkeypatch)
    evicted: list[int] = []
    real_evict = PrefixCachingBlockManager._evict

    def evict(self, num: int) -> None:  # noqa: ANN001
        evicted.append(num)
        real_evict(self, num)
    monkeypatch.setattr(PrefixCachingBlockManager, "_evict", evict)
    traffic = agents(8, mean_turns=8.0, session_rate=2.0, think_mean_s=0.5, closed=closed, max_prompt_tokens=32_768)
    table = generate_sessions(traffic, np.random.default_rng(7))
    config = _config(router, replicas=2).replace(replica__num_gpu_blocks=2_500, replica__max_model_len=32_768)
    on = simulate(config, table, token_times=True)
    assert sum(stretches) > 500  # the fast paths ran
    off = simulate(config.replace(fast_forward=False), table, token_times=True)
    assert request_frame(on).equals(request_frame(off))
    assert on.iteration_frame().equals(off.iteration_frame())
    hits = [r.num_cached_tokens for r in on.requests]
    assert hits == [r.num_cached_tokens for r in off.requests]
    assert sum(hits) > 0 and sum(evicted) > 100  # hits, and a cache small enough to evict


def test_sampled_rows_of_a_session_trace_keep_each_sessions_turns_in_order():
    """With synthetic arrivals a hashed trace's rows are sampled: a turn sent before its predecessor finds none of
    that turn cached (its prompt holds the predecessor's answer). Each session's turns take its slots in order;
    rows without a session keep the sampled order."""
    from simulator.config.run_config import WorkloadConfig
    from simulator.workload.generate import prefix_trace_table
    from simulator.workload.prefix_traces import PrefixTrace

    n = 60
    session = np.where(np.arange(n) % 4 == 3, -1, np.arange(n) % 3)  # three sessions, every 4th row none
    trace = PrefixTrace(arrival_s=np.arange(n, dtype=float), num_prompt_tokens=np.arange(1, n + 1) * 16,
                        num_output_tokens=np.full(n, 8), block_hashes=tuple(np.arange(k + 1) for k in range(n)),
                        hash_block_size=16, session_id=session, fmt="test")
    table = prefix_trace_table(WorkloadConfig(trace="t.jsonl", num_requests=40, arrival="poisson", qps=2.0), trace,
                               np.random.default_rng(3))
    rows = np.asarray(table.num_prompt_tokens) // 16 - 1  # the trace row each request came from
    sessions = np.asarray(table.session_id)
    assert len(set(rows.tolist())) == 40  # sampled without replacement
    for s in (0, 1, 2):
        mine = rows[sessions == s]
        assert len(mine) > 1 and np.all(np.diff(mine) > 0)
    loose = rows[sessions < 0]
    assert not np.all(np.diff(loose) > 0)  # rows without a session stay in their sampled (random) order


@pytest.mark.parametrize("policy", ["vllm-lru", "radix-lru"])
def test_a_turn_finds_the_previous_answer_cached_as_vllm_and_sglang_cache_output_blocks(policy):
    """A turn resends the last prompt and its answer: it hits every full block of them the last turn computed
    (its last output token is never fed back), through the hash blocks that cover them. Only prompt blocks were
    cached before: each turn recomputed the previous answer."""
    table = generate_sessions(conversations(12, session_rate=2.0, think_mean_s=1.0), np.random.default_rng(8))
    config = _config().replace(scheduler__prefix_cache_policy=policy, replica__num_gpu_blocks=200_000)
    run = simulate(config, table)
    reqs, bs, hbs = run.requests, run.memory.block_size, table.hash_block_size
    num_turns = 0
    for rows in _by_session(table).values():
        for prev, cur in zip(rows, rows[1:], strict=False):
            p, o = int(table.num_prompt_tokens[prev]), int(table.num_output_tokens[prev])
            named = (p + o) // hbs * hbs  # the next turn's ids cover this far
            expected = min(min(p + o - 1, named) // bs, (int(table.num_prompt_tokens[cur]) - 1) // bs) * bs
            assert reqs[cur].num_cached_tokens == expected, (prev, cur)
            num_turns += expected > p  # the answer among the hits (where it completes a hash block)
    assert num_turns > 5


@pytest.mark.parametrize("policy", ["vllm-lru", "radix-lru"])
def test_cached_answers_keep_the_pools_invariants_in_a_cache_that_evicts(policy, monkeypatch):
    managers: list[PrefixCachingBlockManager] = []
    real_free = PrefixCachingBlockManager.free

    def free(self, req) -> None:  # noqa: ANN001
        real_free(self, req)
        self.check()
        if self not in managers:
            managers.append(self)

    monkeypatch.setattr(PrefixCachingBlockManager, "free", free)
    table = generate_sessions(conversations(30, session_rate=8.0, think_mean_s=0.5), np.random.default_rng(9))
    run = simulate(_config().replace(scheduler__prefix_cache_policy=policy, replica__num_gpu_blocks=2500,
                                     replica__max_model_len=32_768), table)
    assert all(r.status.value == "finished" for r in run.requests)
    assert managers and all(m.num_free_blocks == m.num_blocks for m in managers)
    assert sum(m.num_evicted_blocks for m in managers) > 0


def test_ids_carry_on_only_where_the_next_turn_resends_the_answer():
    from simulator.workload.prefix_traces import continued_hashes

    ids = [np.arange(4), np.arange(10), np.array([0, 1, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]), np.arange(30),
           np.arange(5), np.arange(3)]
    sessions = np.array([0, 0, 0, 1, 1, 2])
    prompts = np.array([256, 640, 768, 1920, 320, 200])
    outputs = np.array([300, 100, 50, 200, 10, 50])
    out = continued_hashes(ids, sessions, prompts, outputs, 64)
    assert out[0][1] == 512 and np.array_equal(out[0][0], np.arange(8))  # (256 + 300) // 64 blocks of row 1's ids
    assert out[1][1] == 0  # row 2 branches off at block 2: not a resend (a sub-agent, a rewritten history)
    assert out[2][1] == 0 and out[5][1] == 0  # the last of its session; a session of one
    assert out[3][1] == 0  # row 4's prompt (320) does not hold row 3's prompt and answer (a compacted history)
    assert np.array_equal(out[1][0], ids[1]) and np.array_equal(out[3][0], ids[3])
