"""Prefix caching: block names from trace hashes, hits, sharing, LRU eviction, the fast paths'
direct allocations, and the Mooncake traces' hit rates against the data README and an
independent LRU written here."""

from __future__ import annotations

import functools
import json
from collections import OrderedDict

import numpy as np
import pytest
from helpers import record_stretches

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig
from simulator.engine.prefix_cache import PrefixCachingBlockManager, RadixBlockManager, block_names
from simulator.report.metrics import request_frame
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable
from simulator.workload.prefix_traces import ideal_hit_blocks
from simulator.workload.prefix_traces import read_mooncake as _read_mooncake
from simulator.workload.prefix_traces import read_weka_sessions as _read_weka_sessions
from simulator.workload.request import Request

BS = 16


# The traces are read once per test session (the tests only slice them): the conversation trace
# and the Weka folder were read three and four times, a large part of this file's time.
read_mooncake = functools.cache(_read_mooncake)
read_weka_sessions = functools.cache(_read_weka_sessions)


def make_req(rid: int, prompt: int, hashes, hash_bs: int = 512, output: int = 4) -> Request:  # noqa: ANN001
    req = Request(rid, 0.0, prompt, output)
    req.block_hashes = None if hashes is None else np.asarray(hashes, dtype=np.int64)
    req.hash_block_size = hash_bs
    return req


def run_prompt(mgr: PrefixCachingBlockManager, req: Request, free: bool = True, check: bool = True) -> int:
    """Admit ``req``, compute its prompt, free it; return the tokens it found cached."""
    assert mgr.can_admit(req.num_prompt_tokens, req)
    mgr.admit(req, req.num_prompt_tokens)
    hit = req.num_computed
    req.num_computed = req.num_prompt_tokens
    if free:
        mgr.free(req)
    if check:
        mgr.check()
    return hit


# -- names ---------------------------------------------------------------------------------------
def test_block_names_map_trace_blocks_onto_engine_blocks():
    # 2 trace blocks of 512 (the last partial: 700 tokens): engine blocks of 16 ending within 700.
    names = block_names([7, 9], 512, 700, 16)
    assert len(names) == 700 // 16  # 43 full engine blocks; the 44th (tokens 688..703) is partial
    assert names[0] == 7 * 512 + 16 and names[31] == 7 * 512 + 512  # block 31 ends the first trace block
    assert names[32] == 9 * 512 + 16
    # Same first trace block, different second: the first 32 names agree, the rest differ.
    other = block_names([7, 8], 512, 1024, 16)
    assert other[:32] == names[:32] and not set(other[32:]) & set(names[32:])
    # Weka-style floor hashes: tokens past the last full trace block carry no name.
    assert len(block_names([1, 2], 64, 150, 16)) == 128 // 16
    # Engine blocks larger than the trace's: named by the trace block holding their last token.
    assert block_names([3, 4, 5], 512, 1536, 1024) == [4 * 512 + 512]
    assert block_names([], 512, 100, 16) == []


# -- hits, sharing, the last token -------------------------------------------------------------
def test_mooncake_ids_far_apart_never_name_one_block(tmp_path):
    # Ids 5 and 5 + 2**55 once named the same engine blocks (id * hash_block_size wrapped in int64):
    # two requests sharing nothing hit each other's cache.
    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [5, 7]},
             {"timestamp": 10, "input_length": 1024, "output_length": 4, "hash_ids": [5 + 2**55, 9]},
             {"timestamp": 20, "input_length": 1024, "output_length": 4, "hash_ids": [5, 11]}]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines))
    tr = _read_mooncake(str(path))
    names = [set(block_names(h, tr.hash_block_size, 1024, 16)) for h in tr.block_hashes]
    assert not names[0] & names[1] and len(names[0] & names[2]) == 512 // 16  # the real shared block still shared


def test_second_identical_prompt_hits_all_but_the_last_token():
    mgr = PrefixCachingBlockManager(1000, BS, watermark=0.0)
    prompt = 100 * BS + 1  # 100 full blocks and a 1-token tail
    assert run_prompt(mgr, make_req(0, prompt, [1, 2, 3, 4])) == 0
    b = make_req(1, prompt, [1, 2, 3, 4])
    assert run_prompt(mgr, b) == 100 * BS  # one token left to compute
    # A prompt of whole blocks recomputes its last block (vLLM: hit capped at num_tokens - 1).
    mgr2 = PrefixCachingBlockManager(1000, BS, watermark=0.0)
    run_prompt(mgr2, make_req(0, 64 * BS, [1, 2]))
    assert run_prompt(mgr2, make_req(1, 64 * BS, [1, 2])) == 63 * BS


@pytest.mark.parametrize("cls", [PrefixCachingBlockManager, RadixBlockManager])
def test_a_wholly_cached_prompt_of_whole_blocks_keeps_the_cached_copy_of_its_last_block(cls):
    """A prompt of k*bs tokens, all cached, recomputes its last block (the last token runs): in a block of its own,
    as vLLM's block pool keeps duplicate copies of a name. The cached copy, not hit for the cap alone, stays a hit
    for a longer prompt admitted beside it and stays cached if the recomputing request is preempted; replacing it
    with the recomputing request's uncomputed block cut the longer prompt's hit by a block and lost the copy."""
    mgr = cls(100, BS, watermark=0.0)
    run_prompt(mgr, make_req(0, 4 * BS, [1, 2, 3, 4], hash_bs=BS))  # 4 blocks computed and cached
    assert mgr.num_cached_blocks == 4
    same = make_req(1, 4 * BS, [1, 2, 3, 4], hash_bs=BS)
    mgr.admit(same, 4 * BS)
    assert same.num_computed == 3 * BS and same.num_blocks == 4  # its last block runs again
    longer = make_req(2, 5 * BS, [1, 2, 3, 4, 5], hash_bs=BS)
    mgr.admit(longer, 5 * BS)
    assert longer.num_computed == 4 * BS  # the cached copy of block 4 is a hit
    mgr.free(longer)
    longer.num_computed = 0
    mgr.free(same)  # preempted before its chunk ran
    same.num_computed = 0
    mgr.check()
    assert mgr.num_cached_blocks == 4 and mgr.num_free_blocks == 100
    assert mgr.cached_prefix_tokens(make_req(3, 5 * BS, [1, 2, 3, 4, 5], hash_bs=BS)) == 4 * BS


def test_shared_blocks_are_counted_once_and_freed_when_the_last_holder_goes():
    mgr = PrefixCachingBlockManager(200, BS, watermark=0.0)
    a = make_req(0, 1024, [1, 2])  # 64 blocks
    run_prompt(mgr, a, free=False)
    assert mgr.num_free_blocks == 136
    b = make_req(1, 1024 + 512, [1, 2, 3])  # shares 64 blocks, 32 new
    mgr.admit(b, b.num_prompt_tokens)
    assert b.num_computed == 1024 and b.num_blocks == 96
    assert mgr.num_free_blocks == 200 - 64 - 32  # shared blocks are not allocated twice
    mgr.free(a)
    assert mgr.num_free_blocks == 200 - 96  # still held by b
    b.num_computed = b.num_prompt_tokens
    mgr.free(b)
    assert mgr.num_free_blocks == 200 and mgr.num_evictable_blocks == 96
    mgr.check()


def test_uncomputed_blocks_are_not_hits_and_a_preempted_prompt_keeps_only_what_it_computed():
    mgr = PrefixCachingBlockManager(400, BS, watermark=0.0)
    a = make_req(0, 2048, [1, 2, 3, 4])
    mgr.admit(a, 2048)
    a.num_computed = 512 + 100  # its first chunk ran: one trace block and a bit
    b = make_req(1, 2048, [1, 2, 3, 4])
    assert mgr.cached_prefix_tokens(b) == 512 + 96  # the computed full blocks only
    mgr.free(a)  # preempted before its prompt finished
    mgr.check()
    assert mgr.num_evictable_blocks == (512 + 96) // BS and mgr.num_free_blocks == 400
    mgr.admit(b, 2048)
    assert b.num_computed == 512 + 96


def test_evictions_are_least_recent_first_and_a_hit_takes_a_block_back():
    mgr = PrefixCachingBlockManager(8, BS, watermark=0.0)
    r1, r2 = make_req(0, 4 * BS, [1], 64), make_req(1, 4 * BS, [2], 64)
    run_prompt(mgr, r1)
    run_prompt(mgr, r2)
    assert mgr.num_evictable_blocks == 8  # both prompts cached, nothing empty
    # Touch r1's prefix again: r2's blocks are now the least recent.
    assert run_prompt(mgr, make_req(2, 4 * BS, [1], 64)) == 3 * BS
    assert run_prompt(mgr, make_req(3, 2 * BS, [9], 32)) == 0  # 2 new blocks: evicts r2's last two (freed first)
    assert mgr.cached_prefix_tokens(make_req(4, 4 * BS + 1, [2], 64)) == 2 * BS
    assert mgr.cached_prefix_tokens(make_req(5, 4 * BS + 1, [1], 64)) == 4 * BS


def test_direct_allocations_evict_lazily_as_if_at_once():
    """The cohort and event skipping lower num_free_blocks without calling the manager."""
    def scenario(lazy: bool) -> list[int]:
        mgr = PrefixCachingBlockManager(64, BS, watermark=0.0)
        for i in range(8):
            run_prompt(mgr, make_req(i, 8 * BS, [100 + i], 128))
        hold = make_req(50, 3 * BS, None)
        mgr.admit(hold, 3 * BS)
        for _ in range(5):  # decode growth: one block at a time
            if lazy:
                mgr.num_free_blocks -= 1
                hold.num_blocks += 1
            else:
                assert mgr.try_grow(hold, (hold.num_blocks + 1) * BS)
                mgr.check()
        return [mgr.cached_prefix_tokens(make_req(60 + i, 8 * BS + 1, [100 + i], 128)) for i in range(8)]

    assert scenario(True) == scenario(False)
    # 3 + 5 allocations evict the oldest prompt's 8 blocks (its last block first), nothing else.
    assert scenario(True) == [0] + [8 * BS] * 7


def test_admission_counts_only_hits_on_blocks_others_hold():
    mgr = PrefixCachingBlockManager(100, BS, watermark=0.0)
    a = make_req(0, 60 * BS, [1], 60 * BS)
    run_prompt(mgr, a, free=False)
    b = make_req(1, 60 * BS + 1, [1], 60 * BS)  # 61 blocks, 60 of them held by a
    assert mgr.num_free_blocks == 40
    assert mgr.can_admit(b.num_prompt_tokens, b)  # needs one new block
    assert not mgr.can_admit(b.num_prompt_tokens)  # without the request: 61 > 40
    mgr.free(a)  # a's blocks are evictable now: a hit on them leaves the free pool
    c = make_req(2, 60 * BS + 1, [1], 60 * BS)
    assert mgr.can_admit(c.num_prompt_tokens, c)
    mgr.admit(c, c.num_prompt_tokens)
    assert c.num_computed == 60 * BS and mgr.num_free_blocks == 39


class _CountingDict(dict):
    """Counts every key read and every item an iteration yields."""

    reads = 0

    def get(self, key, default=None):  # noqa: ANN001, ANN201
        _CountingDict.reads += 1
        return super().get(key, default)

    def __getitem__(self, key):  # noqa: ANN001, ANN204
        _CountingDict.reads += 1
        return super().__getitem__(key)

    def __contains__(self, key):  # noqa: ANN001, ANN204
        _CountingDict.reads += 1
        return super().__contains__(key)

    def __iter__(self):  # noqa: ANN204
        for key in super().__iter__():
            _CountingDict.reads += 1
            yield key

    def items(self):  # noqa: ANN201
        _CountingDict.reads += len(self)
        return super().items()

    def values(self):  # noqa: ANN201
        _CountingDict.reads += len(self)
        return super().values()


@pytest.mark.parametrize("cls", [PrefixCachingBlockManager, RadixBlockManager])
def test_lookup_cost_scales_with_the_requests_blocks_not_the_cache(cls):
    reads = {}
    for num_cached in (50, 5000):
        mgr = cls(num_cached * 8 + 1000, BS, watermark=0.0)
        mgr._cache = _CountingDict()
        for i in range(num_cached):
            run_prompt(mgr, make_req(i, 8 * BS, [10 + i], 128), check=False)
        assert mgr.num_cached_blocks == 8 * num_cached
        q = make_req(10**6, 20 * BS, [10, 99999], 128)  # hits 7 blocks of request 0, then misses
        _CountingDict.reads = 0
        mgr.can_admit(q.num_prompt_tokens, q)
        mgr.admit(q, q.num_prompt_tokens)
        reads[num_cached] = _CountingDict.reads
    assert reads[50] == reads[5000] <= 3 * 20


# -- radix (SGLang) ----------------------------------------------------------------------------
def test_radix_evicts_leaves_so_a_shared_prefix_outlives_its_branches():
    mgr = RadixBlockManager(10, BS, watermark=0.0)
    # Two prompts share their first 2 blocks (trace block 1 = 2 engine blocks), then branch.
    run_prompt(mgr, make_req(0, 4 * BS, [1, 2], 2 * BS))
    run_prompt(mgr, make_req(1, 4 * BS, [1, 3], 2 * BS))  # hits 2, adds 2
    assert mgr.num_cached_blocks == 6
    run_prompt(mgr, make_req(2, 8 * BS, [7, 8, 9, 10], 2 * BS))  # needs 8: 4 empty + 4 evicted
    mgr.check()
    # The four oldest leaves went (branch [1,2]'s two blocks, then branch [1,3]'s): the shared root stays.
    assert mgr.cached_prefix_tokens(make_req(4, 2 * BS + 1, [1], 2 * BS)) == 2 * BS
    assert mgr.cached_prefix_tokens(make_req(3, 4 * BS + 1, [1, 3], 2 * BS)) == 2 * BS


def _random_stream(seed: int) -> tuple[int, list[tuple[int, int, list[int], bool, float]]]:
    """A cache size and requests over a random prefix tree: (id, prompt tokens, hash ids, computed
    before it is freed, a draw deciding when running requests are freed)."""
    rng = np.random.default_rng(seed)
    children: dict[tuple[int, ...], list[tuple[int, ...]]] = {(): []}
    ids: dict[tuple[int, ...], int] = {}
    stream = []
    for rid in range(40):
        node: tuple[int, ...] = ()
        path = []
        for _ in range(int(rng.integers(1, 6))):
            if children[node] and rng.random() < 0.7:
                node = children[node][int(rng.integers(len(children[node])))]
            else:
                child = (*node, len(ids))
                children[node].append(child)
                children[child] = []
                ids[child] = len(ids)
                node = child
            path.append(ids[node])
        stream.append((rid, len(path) * 64 - int(rng.integers(0, 31)), path, bool(rng.random() < 0.8),
                       float(rng.random())))
    return int(rng.integers(8, 41)), stream


def _replay(mgr: PrefixCachingBlockManager, stream: list, seed: int) -> list[int | None]:
    """Each request's hit tokens (None: not admitted), requests freed in a seeded random order,
    some while others still compute blocks they share, some freed before computing their prompt."""
    rng = np.random.default_rng(seed)
    running: list[Request] = []
    hits: list[int | None] = []
    for rid, prompt, path, computed, draw in stream:
        req = make_req(rid, prompt, path, 64)
        while running and (draw < 0.5 or not mgr.can_admit(prompt, req)):
            mgr.free(running.pop(int(rng.integers(len(running)))))
            draw = float(rng.random())
        if not mgr.can_admit(prompt, req):
            hits.append(None)
            continue
        mgr.admit(req, prompt)
        hits.append(req.num_computed)
        if computed:
            req.num_computed = prompt
        running.append(req)
        mgr.check()
    return hits


def test_vllm_lru_and_radix_lru_evict_the_same_blocks():
    """A request frees its blocks last-first and holds every block before one it holds, so the least
    recently freed block is always a leaf: the two policies find the same hits, request by request."""
    num_hits = num_evicted = 0
    for seed in range(300):
        num_blocks, stream = _random_stream(seed)
        lru_mgr = PrefixCachingBlockManager(num_blocks, BS, watermark=0.0)
        lru = _replay(lru_mgr, stream, seed)
        radix = _replay(RadixBlockManager(num_blocks, BS, watermark=0.0), stream, seed)
        assert lru == radix, seed
        num_hits += sum(1 for h in lru if h)
        num_evicted += lru_mgr.num_evicted_blocks
    assert num_hits > 1000 and num_evicted > 1000  # the streams share prefixes and evict: not vacuous


# -- the traces ----------------------------------------------------------------------------------
def _reference_lru(reqs: list[tuple[int, list[int]]], capacity: int, bs: int) -> int:
    """Independent LRU at engine blocks, requests one at a time: hits = the longest resident
    prefix (capped at (L-1)//bs blocks); the request then holds its blocks (hits taken out
    of the pool, new ones from empty blocks first, else the least recent cached block); when
    it finishes its named blocks return to the pool last-first, its unnamed ones to the empty
    count. Returns the hit tokens."""
    pool: OrderedDict[int, None] = OrderedDict()  # cached, unreferenced: least recent first
    empty = capacity
    total = 0
    for prompt, names in reqs:
        limit = min(len(names), (prompt - 1) // bs)
        k = 0
        while k < limit and names[k] in pool:
            k += 1
        total += k * bs
        for name in names[:k]:
            del pool[name]
        new = -(-prompt // bs) - k
        take = min(new, empty)
        empty -= take
        for _ in range(new - take):
            pool.popitem(last=False)
        # A copy of a name past the hits: where a miss stopped the walk it is stranded and the new block replaces
        # it; where the cap did (a wholly cached prompt of whole blocks) it stays where it is and the new block
        # is anonymous.
        capped = k == (prompt - 1) // bs
        kept = set()
        for name in names[k:]:
            if name in pool:
                if capped:
                    kept.add(name)
                else:
                    del pool[name]
                    empty += 1
        # finish: named blocks back to the pool, last first; the rest (anonymous ones too) are empty again
        for name in reversed(names):
            if name not in kept:
                pool[name] = None
        empty += -(-prompt // bs) - len(names) + len(kept)
    return total


@pytest.mark.parametrize("trace,ideal_block,ideal_token", [("conversation_trace.jsonl", 0.3664, 0.3736),
                                                            ("synthetic_trace.jsonl", 0.6396, 0.6512)])
def test_mooncake_ideal_rates_match_the_data_readme(shared_data, trace, ideal_block, ideal_token):
    tr = read_mooncake(str(shared_data / "traces" / "mooncake" / trace))
    k = ideal_hit_blocks(tr.block_hashes)
    n = np.array([len(h) for h in tr.block_hashes])
    assert round(k.sum() / n.sum(), 4) == ideal_block
    tokens = np.where(k == n, tr.num_prompt_tokens, k * 512).sum()
    assert round(tokens / tr.num_prompt_tokens.sum(), 4) == ideal_token


def _manager_hit_tokens(tr, n_req: int, mgr) -> int:  # noqa: ANN001
    total = 0
    for i in range(n_req):
        req = make_req(i, int(tr.num_prompt_tokens[i]), tr.block_hashes[i], tr.hash_block_size)
        total += run_prompt(mgr, req, check=i % 1000 == 999)
    return total


def test_mooncake_hit_rate_unbounded_and_bounded(shared_data):
    """The manager alone, requests one at a time (the first 600 of the synthetic trace, 5 of
    them wholly cached)."""
    tr = read_mooncake(str(shared_data / "traces" / "mooncake" / "synthetic_trace.jsonl"))
    n_req = 600
    prompts = tr.num_prompt_tokens[:n_req]
    hashes = tr.block_hashes[:n_req]
    # Unbounded: the ideal trace-block hits mapped onto engine blocks (whole trace blocks, all
    # but the last token's block when every block hits).
    k = ideal_hit_blocks(hashes)
    n = np.array([len(h) for h in hashes])
    assert (k == n).sum() > 0  # some prompts are wholly cached: the cap matters
    expected = int(np.minimum(k * 512, (prompts - 1) // BS * BS).sum())
    big = int(sum(-(-p // BS) for p in prompts.tolist()))
    assert _manager_hit_tokens(tr, n_req, PrefixCachingBlockManager(big, BS, watermark=0.0)) == expected
    # Bounded: the independent LRU above, at 1,500 trace blocks' worth of engine blocks (a tenth
    # of what the 600 prompts name).
    cap = 1_500 * 512 // BS
    blocks = [block_names(h, 512, int(p), BS) for h, p in zip(hashes, prompts, strict=True)]
    ref = _reference_lru(list(zip(prompts.tolist(), blocks, strict=True)), cap, BS)
    mgr = PrefixCachingBlockManager(cap, BS, watermark=0.0)
    got = _manager_hit_tokens(tr, n_req, mgr)
    assert mgr.num_evicted_blocks > 0 and 0 < got < expected
    assert got == ref


def test_weka_sessions_read_with_local_ids_namespaced(shared_data):
    tr = read_weka_sessions(str(shared_data / "traces" / "weka_claude_code" / "sessions"))
    assert len(tr) == 1590 and tr.hash_block_size == 64
    k = ideal_hit_blocks(tr.block_hashes)
    assert round(k.sum() / sum(len(h) for h in tr.block_hashes), 4) == 0.9608  # the README's figure
    assert np.all(np.diff(tr.arrival_s) >= 0) and tr.session_id.max() == 27


# -- in the engine -------------------------------------------------------------------------------
def _engine_config(num_blocks: int | None, policy: str = "vllm-lru", caching: bool | None = True,
                   scheduler: str = "vllm-v1", max_model_len: int = 131_072, budget: int = 16_384) -> RunConfig:
    return RunConfig(replica=ReplicaConfig("llama-3.1-8b", "h100-sxm", max_model_len=max_model_len,
                                           num_gpu_blocks=num_blocks),
                     scheduler=SchedulerConfig(scheduler, max_num_batched_tokens=budget, prefix_caching=caching,
                                               prefix_cache_policy=policy))


def _one_at_a_time(tr, n: int, hashes: bool = True) -> RequestTable:  # noqa: ANN001
    """The first ``n`` prompts, 100 s apart, one output token each: every request finishes
    before the next arrives (the README's rule: requests one at a time, in file order)."""
    return RequestTable(np.arange(n) * 100.0, tr.num_prompt_tokens[:n], np.ones(n, dtype=np.int64), "mooncake",
                        block_hashes=tr.block_hashes[:n] if hashes else None, hash_block_size=512 if hashes else 0)


def test_engine_hit_rate_is_the_ideal_one_unbounded_and_the_reference_lru_bounded(shared_data):
    tr = read_mooncake(str(shared_data / "traces" / "mooncake" / "conversation_trace.jsonl"))
    n = 500
    table = _one_at_a_time(tr, n)
    prompts = tr.num_prompt_tokens[:n]
    run = simulate(_engine_config(2_000_000), table)
    got = np.array([r.num_cached_tokens for r in run.requests])
    expected = np.minimum(ideal_hit_blocks(tr.block_hashes[:n]) * 512, (prompts - 1) // BS * BS)
    assert np.array_equal(got, expected)  # request by request
    assert got.sum() > 0.15 * prompts.sum()  # 16.4 % for the first 500 (37 % over the whole trace)
    cap = 40_000  # 640 k tokens: about 45 of these prompts
    bounded = simulate(_engine_config(cap), table)
    names = [block_names(h, 512, int(p), BS) for h, p in zip(tr.block_hashes[:n], prompts, strict=True)]
    got = sum(r.num_cached_tokens for r in bounded.requests)
    assert got == _reference_lru(list(zip(prompts.tolist(), names, strict=True)), cap, BS)
    assert 0 < got < expected.sum()


def test_a_wholly_cached_prompt_costs_one_token_of_prefill():
    prompt = 100 * BS + 1
    table = RequestTable([0.0, 50.0], [prompt, prompt], [1, 1], "twice", block_hashes=[np.arange(4)] * 2,
                         hash_block_size=512)
    on = simulate(_engine_config(1_000, max_model_len=8192), table).iteration_frame()
    off = simulate(_engine_config(1_000, caching=False, max_model_len=8192), table).iteration_frame()
    assert on["num_prefill_tokens"].tolist() == [prompt, 1]
    assert off["num_prefill_tokens"].tolist() == [prompt, prompt]
    # The kernels: one token over a 1,600-token context (the default engine adds what a prompt chunk costs beyond
    # them, cached or not: vllm-2026's time a chunk and layer, the request's scheduling and input preparation)
    kernels_on = simulate(_engine_config(1_000, max_model_len=8192).replace(engine="ideal"), table).iteration_frame()
    kernels_off = simulate(_engine_config(1_000, caching=False, max_model_len=8192).replace(engine="ideal"),
                           table).iteration_frame()
    assert kernels_on["duration_s"].iloc[1] < kernels_off["duration_s"].iloc[1] / 5
    assert on["duration_s"].iloc[1] < off["duration_s"].iloc[1] / 2


def test_caching_off_and_caching_without_shared_prefixes_reproduce_todays_runs(shared_data):
    tr = read_mooncake(str(shared_data / "traces" / "mooncake" / "conversation_trace.jsonl"))
    arrival = tr.arrival_s[:120] / 4.0
    hashed = RequestTable(arrival, tr.num_prompt_tokens[:120], tr.num_output_tokens[:120], "m",
                          block_hashes=tr.block_hashes[:120], hash_block_size=512)
    plain = RequestTable(arrival, tr.num_prompt_tokens[:120], tr.num_output_tokens[:120], "m")
    base = simulate(_engine_config(None, caching=False), plain)
    for run in (simulate(_engine_config(None, caching=False), hashed),  # hashes, caching off
                simulate(_engine_config(None, caching=True), plain)):  # caching on, nothing named
        assert request_frame(run).equals(request_frame(base))
        assert run.iteration_frame().equals(base.iteration_frame())
    assert SchedulerConfig("vllm-v1").prefix_cache == "vllm-lru" and SchedulerConfig("sarathi").prefix_cache is None


@pytest.mark.parametrize("policy,scheduler", [("vllm-lru", "vllm-v1"), ("radix-lru", "sarathi"), ("vllm-lru", "vllm")])
def test_fast_paths_are_exact_with_caching_on(shared_data, monkeypatch, policy, scheduler):
    """Lockstep decodes and event skipping allocate by count; the cache evicts lazily: the
    same run bit for bit as the step-by-step loop, in a cache small enough to evict (150
    agent calls of 28 sessions at 20x their recorded pace, prompts cut at 30k tokens)."""
    stretches = record_stretches(monkeypatch)
    tr = read_weka_sessions(str(shared_data / "traces" / "weka_claude_code" / "sessions"))
    n = 150
    table = RequestTable(tr.arrival_s[:n] * 0.05, np.minimum(tr.num_prompt_tokens[:n], 30_000), tr.num_output_tokens[:n],
                         "w", block_hashes=tr.block_hashes[:n], hash_block_size=64)
    # (vllm runs a whole prompt a step, so its budget holds the context: vLLM V0 refuses less)
    config = _engine_config(12_000, policy=policy, scheduler=scheduler, max_model_len=32_768,
                            budget=40_000 if scheduler == "vllm" else 16_384)
    on = simulate(config, table, token_times=True)
    assert sum(stretches) > 1000  # the fast paths ran
    off = simulate(config.replace(fast_forward=False), table, token_times=True)
    assert request_frame(on).equals(request_frame(off))
    assert on.iteration_frame().equals(off.iteration_frame())
    assert [bytes(r.token_times) for r in on.requests] == [bytes(r.token_times) for r in off.requests]
    hits = [r.num_cached_tokens for r in on.requests]
    assert hits == [r.num_cached_tokens for r in off.requests] and sum(hits) > 0


def test_a_gzipped_mooncake_trace_is_read_as_mooncake_with_its_hashes(tmp_path):
    """A gzipped Mooncake trace (.jsonl.gz, as such traces are often shipped) was refused as an unknown format; it
    is the same trace as the plain file, block hashes included, and a truncated one is refused in one line."""
    import gzip
    import json

    from simulator.config.errors import ConfigError
    from simulator.workload.prefix_traces import prefix_trace_format, read_prefix_trace

    lines = [{"timestamp": 0, "input_length": 1024, "output_length": 8, "hash_ids": [1, 2]},
             {"timestamp": 250, "input_length": 1100, "output_length": 4, "hash_ids": [1, 2, 3]}]
    text = "".join(json.dumps(r) + "\n" for r in lines)
    plain, packed = tmp_path / "t.jsonl", tmp_path / "t.jsonl.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    assert prefix_trace_format(str(packed)) == "mooncake"
    a, b = read_prefix_trace(str(plain)), read_prefix_trace(str(packed))
    assert b is not None and [h.tolist() for h in b.block_hashes] == [[0, 1], [0, 1, 2]]  # renumbered from 1, 2, 3
    assert a.arrival_s.tolist() == b.arrival_s.tolist() == [0.0, 0.25]
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(text.encode())[:-12])
    with pytest.raises(ConfigError, match="cannot read"):
        _read_mooncake(str(cut))


def test_the_prefix_cache_summary_leaves_the_warmup_out():
    # The warm-up meets a cold cache: counted in, it pulled the measured hit rate down (3.6% read for 4.1%).
    from simulator.report.metrics import summarize

    prompt = 4 * 512
    table = RequestTable([0.0, 50.0, 100.0], [prompt] * 3, [2] * 3, "thrice", block_hashes=[np.arange(4)] * 3,
                         hash_block_size=512)
    config = _engine_config(1_000, max_model_len=8192).replace(workload__num_warmup=1, workload__num_requests=3)
    result = simulate(config, table)
    summary = summarize(result)["prefix_caching"]
    hits = [r.num_cached_tokens for r in result.requests]
    assert hits[0] == 0 and hits[1] == hits[2] > 0
    assert summary["prompt_tokens"] == 2 * prompt and summary["prefill_tokens_saved"] == 2 * hits[1]
    assert summary["hit_rate"] == pytest.approx(hits[1] / prompt)


def test_a_cpu_tier_too_small_for_one_block_and_workers_with_hashes_are_refused():
    # Both ran as if the flag were absent: the header named a 0.001 GiB tier that held no block, and --workers
    # ran the hashed trace in one process.
    from simulator.config.errors import ConfigError

    table = RequestTable([0.0, 1.0], [2048, 2048], [2, 2], "twice", block_hashes=[np.arange(4)] * 2,
                         hash_block_size=512)
    tiny = _engine_config(1_000, max_model_len=8192).replace(scheduler__cpu_kv_gib=0.001, workload__num_requests=2)
    with pytest.raises(ConfigError, match="holds no KV block") as err:
        simulate(tiny, table)
    assert err.value.field == "scheduler.cpu_kv_gib"
    fixed = float(err.value.fix.split("--cpu-kv-gib ")[1].split()[0])
    assert simulate(tiny.replace(scheduler__cpu_kv_gib=fixed), table).requests  # the suggested size builds a tier
    two = _engine_config(1_000, max_model_len=8192).replace(num_replicas=2, workload__num_requests=2)
    with pytest.raises(ConfigError, match="prefix block hashes"):
        simulate(two, table, workers=2)
