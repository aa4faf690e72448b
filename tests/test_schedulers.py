"""Batch composition rules of each policy, driven with hand-made queues (no SimPy)."""

from __future__ import annotations

import pytest
from helpers import cache_a_prefix_beside_decodes, hashed_request

from simulator.config.errors import ConfigError
from simulator.config.run_config import SchedulerConfig
from simulator.engine.kvcache import BlockManager
from simulator.engine.schedulers import SCHEDULERS
from simulator.fast.lockstep import lockstep_class
from simulator.fast.steady import sarathi_chunk_steady
from simulator.workload.request import Request, Status


def make(name: str, num_blocks: int = 1000, max_model_len: int = 4096, **kw):
    cfg = SchedulerConfig(name, watermark=0.0, **kw)
    return SCHEDULERS[name](cfg, BlockManager(num_blocks, 16, cfg.watermark), max_model_len)


def decoding(sched, rid: int, prompt: int, generated: int, output: int = 1000) -> Request:
    """A running request in decode: its prompt and all but the last generated token are cached."""
    req = Request(rid, 0.0, prompt, output, token_times=True)
    req.num_generated = generated
    req.num_computed = prompt + generated - 1
    req.status = Status.RUNNING
    sched.blocks.reserve(req, req.num_computed)
    sched._admission_counter += 1
    req.admitted_seq = sched._admission_counter
    sched.running.append(req)
    return req


def waiting(sched, rid: int, prompt: int, output: int = 10) -> Request:
    req = Request(rid, 0.0, prompt, output, token_times=True)
    sched.add_request(req)
    return req


def entries(batch) -> list[tuple[int, int]]:
    return [(r.request_id, n) for r, n in zip(batch.requests, batch.num_tokens, strict=True)]


def finish_batch(sched, batch, now: float = 1.0):
    return sched.complete(batch, now)


# -- vllm ------------------------------------------------------------------------------------
def test_every_registered_policy_resolves_and_unknown_names_are_refused():
    """The config layer names each policy by its import path; the engine's dict resolves every one."""
    from simulator.config.schedulers import SCHEDULERS as ENTRIES
    from simulator.engine.schedulers import _resolve

    assert _resolve(ENTRIES["vllm-v1"].policy) is SCHEDULERS["sarathi"]  # two names, one policy class
    with pytest.raises(TypeError, match="not a Scheduler subclass"):  # a path to anything else is refused
        _resolve("simulator.engine.schedulers.base:Batch")
    with pytest.raises(ConfigError, match="scheduler"):
        SchedulerConfig("no-such-policy")
    with pytest.raises(ConfigError, match="module:Class"):
        type(ENTRIES["vllm"])("simulator.engine.schedulers.vllm.VLLMScheduler")


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_registry_facts_match_what_the_policy_does(name):
    """What the config layer says of a policy (it chunks prompts; a token budget bounds its steps) is
    what the policy does with a budget of 256 tokens: a 1,000-token prompt alone, then two of 200."""
    from simulator.config.schedulers import SCHEDULERS as ENTRIES

    entry = ENTRIES[name]
    sched = make(name, max_num_batched_tokens=256, max_model_len=2048)
    waiting(sched, 0, 1000)
    batch = sched.schedule()
    took = dict(entries(batch)).get(0, 0) if batch is not None else 0
    assert (took == 256) == entry.chunks_prompts, (name, took)

    sched = make(name, max_num_batched_tokens=256, max_model_len=2048)
    waiting(sched, 0, 200)
    waiting(sched, 1, 200)
    batch = sched.schedule()
    assert batch is not None
    assert (sum(batch.num_tokens) <= 256) == entry.token_budget, (name, entries(batch))


def test_vllm_prefill_only_iteration_stalls_decodes():
    s = make("vllm")
    decoding(s, 0, 100, 5)
    decoding(s, 1, 100, 5)
    waiting(s, 2, 300)
    batch = s.schedule()
    assert entries(batch) == [(2, 300)]  # decodes paused
    assert batch.shape.num_decodes == 0 and batch.shape.num_prefill_tokens == 300
    finish_batch(s, batch)
    nxt = s.schedule()
    assert entries(nxt) == [(0, 1), (1, 1), (2, 1)]


def test_vllm_admission_respects_token_budget_and_max_num_seqs():
    s = make("vllm", max_num_batched_tokens=1000, max_num_seqs=3)
    waiting(s, 0, 400)
    waiting(s, 1, 400)
    waiting(s, 2, 400)  # would exceed 1000 tokens
    assert entries(s.schedule()) == [(0, 400), (1, 400)]
    s2 = make("vllm", max_num_seqs=2)
    for i in range(3):
        waiting(s2, i, 10)
    assert [r.request_id for r in s2.schedule().requests] == [0, 1]


def test_vllm_admission_respects_blocks():
    s = make("vllm", num_blocks=20)  # 320 tokens
    waiting(s, 0, 200)
    waiting(s, 1, 200)
    assert entries(s.schedule()) == [(0, 200)]
    assert s.blocks.num_free_blocks == 20 - 13


def test_vllm_preempts_newest_when_blocks_run_out():
    s = make("vllm", num_blocks=3)  # 48 tokens
    old = decoding(s, 0, 16, 1)  # holds 16 tokens (1 block), needs a 2nd block to decode
    new = decoding(s, 1, 32, 1)  # holds 32 tokens (2 blocks), needs a 3rd
    assert s.blocks.num_free_blocks == 0
    batch = s.schedule()
    assert entries(batch) == [(0, 1)]
    assert batch.preempted == [new]
    assert s.waiting[0] is new and new.num_computed == 0 and new.num_blocks == 0 and new.num_preemptions == 1
    assert old.num_blocks == 2


# -- sarathi ------------------------------------------------------------------------------------
def test_sarathi_decodes_first_then_chunks_under_budget():
    s = make("sarathi", chunk_size=512)
    decoding(s, 0, 100, 3)
    decoding(s, 1, 100, 3)
    waiting(s, 2, 1000)
    waiting(s, 3, 1000)
    batch = s.schedule()
    # two decodes, then a 510-token chunk of request 2; request 3 gets nothing (budget used)
    assert entries(batch) == [(0, 1), (1, 1), (2, 510)]
    assert batch.shape.num_tokens == 512
    finish_batch(s, batch)
    batch = s.schedule()
    # continuing partial prefill before any new admission
    assert entries(batch) == [(0, 1), (1, 1), (2, 490), (3, 20)]


def prefilling(sched, rid: int, prompt: int, computed: int) -> Request:
    """A running request part-way through its prompt (the whole prompt reserved, as at admission)."""
    req = Request(rid, 0.0, prompt, 50)
    req.num_computed = computed
    req.status = Status.RUNNING
    sched.blocks.reserve(req, prompt)
    sched.running.append(req)
    return req


@pytest.mark.parametrize(("left", "ahead", "expected"), [
    (1000, None, 510),  # two decodes leave 510 of the 512-token budget
    (511, None, 510),  # one token more than the chunk: not its last
    (510, None, None),  # its last chunk (that iteration may admit): not steady
    (1000, "tail", None),  # a prompt's 1-token tail: an entry of its own (its first token)
    (1000, "in_flight", None),
])
def test_sarathi_chunk_steady_names_the_prompt_chunked_beside_decodes(left: int, ahead: str | None,
                                                                      expected: int | None) -> None:
    cfg = SchedulerConfig("sarathi", watermark=0.0, chunk_size=512)
    s = lockstep_class(SCHEDULERS["sarathi"])(cfg, BlockManager(1000, 16, cfg.watermark), 4096)
    decoding(s, 0, 100, 5)
    if ahead == "tail":
        prefilling(s, 1, 300, 299)
    else:
        decoding(s, 1, 100, 5).in_flight = ahead == "in_flight"
    p = prefilling(s, 2, 2000, 2000 - left)
    waiting(s, 3, 50)  # waits behind the full budget
    assert sarathi_chunk_steady(s) is None  # the cohort is not active before the first schedule()
    s.cohort.activate(s.running)
    assert sarathi_chunk_steady(s) == (None if expected is None else (p, expected))
    if ahead == "in_flight":
        return
    batch = s.schedule()
    if ahead == "tail":
        assert entries(batch) == [(1, 1), (2, 510)]  # an entry besides the chunk: not a steady batch
    elif expected is not None:
        assert entries(batch) == [(2, expected)] and batch.num_lockstep == 2 and not batch.admitted


def test_sarathi_admits_only_if_whole_prompt_fits():
    s = make("sarathi", chunk_size=512, num_blocks=50)  # 800 tokens
    waiting(s, 0, 600)
    waiting(s, 1, 300)  # 600+300 > 800: not admitted even though the budget has room
    batch = s.schedule()
    assert entries(batch) == [(0, 512)]
    finish_batch(s, batch)
    assert entries(s.schedule()) == [(0, 88)]


def test_sarathi_prefill_chunk_produces_first_token_only_at_prompt_end():
    s = make("sarathi", chunk_size=256)
    req = waiting(s, 0, 600, output=3)
    t = 0.0
    for expected in (256, 256, 88):
        batch = s.schedule()
        assert entries(batch) == [(0, expected)]
        t += 1
        finish_batch(s, batch, t)
    assert list(req.token_times) == [3.0]
    assert entries(s.schedule()) == [(0, 1)]


def test_sarathi_preemption_victim_is_newest_and_requeued_first():
    s = make("sarathi", chunk_size=512, num_blocks=2)
    a = decoding(s, 0, 16, 1)  # needs a 2nd block
    b = decoding(s, 1, 8, 1)  # newest, 1 block
    batch = s.schedule()
    assert batch.preempted == [b]
    assert entries(batch) == [(0, 1)]
    assert s.waiting[0] is b and a.num_blocks == 2


def test_vllm_v1_is_sarathi_with_vllm_budget():
    s = make("vllm-v1")
    assert type(s) is type(make("sarathi"))
    assert s.token_budget == 2048  # no GPU given: vLLM's small default


def test_vllm_v1_budget_default_follows_the_gpu_as_vllm_does():
    from simulator.config.catalog import get_gpu
    from simulator.config.run_config import ReplicaConfig
    from simulator.engine.replica import build_pool_scheduler

    cfg = SchedulerConfig("vllm-v1")
    assert cfg.token_budget(4096, get_gpu("h100-sxm")) == cfg.token_budget(4096, get_gpu("b200")) == 8192
    assert cfg.token_budget(4096, get_gpu("a100-80gb")) == cfg.token_budget(4096, get_gpu("l40s")) == 2048
    assert SchedulerConfig("vllm-v1", max_num_batched_tokens=1024).token_budget(4096, get_gpu("h100-sxm")) == 1024
    sched, _ = build_pool_scheduler(ReplicaConfig("llama-3.1-8b", "h100-sxm", max_model_len=8192), cfg)
    assert sched.token_budget == 8192  # what a run's replica schedules with
    assert sched.max_num_seqs == 1024


def test_max_num_seqs_default_is_the_engines():
    from simulator.config.catalog import get_gpu
    from simulator.config.run_config import ReplicaConfig
    from simulator.engine.replica import build_pool_scheduler

    h100, a100 = get_gpu("h100-sxm"), get_gpu("a100-80gb")
    v1 = SchedulerConfig("vllm-v1")  # vLLM's API server: 1024 on 70 GiB or more but the A100, else 256
    assert (v1.seq_limit(h100), v1.seq_limit(a100), v1.seq_limit(None)) == (1024, 256, 256)
    assert SchedulerConfig("vllm-v1", max_num_seqs=64).seq_limit(h100) == 64
    # SGLang: KV tokens / context length * 512, held in [2048, 4096]
    sgl = SchedulerConfig("sglang")
    assert sgl.seq_limit(h100, 10_000, 8192) == 2048 and sgl.seq_limit(h100, 50_000, 8192) == 3125
    assert sgl.seq_limit(h100, 100_000, 8192) == 4096 and sgl.seq_limit(h100) == 2048  # 6250 held at 4096
    assert SchedulerConfig("sarathi").seq_limit(h100) == SchedulerConfig("vllm").seq_limit(h100) == 128
    replica = ReplicaConfig("llama-3.1-8b", "h100-sxm", max_model_len=8192)
    sched, plan = build_pool_scheduler(replica, sgl)
    assert plan.num_kv_tokens / 8192 * 512 > 4096  # a large cache: the scheduler is given it, not 2048
    assert sched.max_num_seqs == 4096


# -- sglang ------------------------------------------------------------------------------------
def test_sglang_prefill_batch_stalls_decodes_and_chunks_the_last_prompt():
    s = make("sglang", chunk_size=1000)
    decoding(s, 0, 100, 5)
    decoding(s, 1, 100, 5)
    waiting(s, 2, 700)
    waiting(s, 3, 900)
    waiting(s, 4, 50)
    batch = s.schedule()
    assert entries(batch) == [(2, 700), (3, 300)]  # decodes wait; the last prompt takes what is left
    assert batch.shape.num_decodes == 0 and s.chunked is batch.requests[1]
    finish_batch(s, batch)
    batch = s.schedule()
    assert entries(batch) == [(3, 600), (4, 50)]  # the chunked prompt first, then admission resumes
    assert s.chunked is None
    finish_batch(s, batch)
    assert entries(s.schedule()) == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]  # no prompt left: a decode batch


def test_sglang_chunks_a_prompt_longer_than_the_budget_over_prefill_only_iterations():
    s = make("sglang", chunk_size=512)
    decoding(s, 0, 100, 5)
    req = waiting(s, 1, 1300, output=3)
    sizes = []
    while not req.num_generated:
        batch = s.schedule()
        assert batch.shape.num_decodes == 0  # the running decode waits for the whole prompt
        sizes += [n for r, n in zip(batch.requests, batch.num_tokens, strict=True) if r is req]
        finish_batch(s, batch)
    assert sizes == [512, 512, 276] and req.first_token_at is not None
    assert entries(s.schedule()) == [(0, 1), (1, 1)]


def test_sglang_decodes_when_the_head_cannot_be_admitted():
    s = make("sglang", num_blocks=20, max_num_seqs=8)
    decoding(s, 0, 100, 5)
    waiting(s, 1, 400)  # 25 blocks: more than the cache holds now
    assert entries(s.schedule()) == [(0, 1)]
    t = make("sglang", max_num_seqs=1)
    decoding(t, 0, 100, 5)
    waiting(t, 1, 10)
    assert entries(t.schedule()) == [(0, 1)]  # max_num_seqs reached


def test_sglang_refuses_a_prompt_whose_predicted_usage_exceeds_the_cache():
    # SGLang's PrefillAdder: the running request's 3,999 tokens to come count at new_token_ratio 0.7 (2,799 tokens)
    # against the 99 free blocks' 1,584: the waiting prompt's 4 blocks fit, its predicted usage does not.
    s = make("sglang", num_blocks=100)
    decoding(s, 0, 16, 1, output=4000)
    w = waiting(s, 1, 64, output=64)
    assert s.blocks.can_admit(64, w) and s.new_token_ratio == 0.7
    batch = s.schedule()
    assert entries(batch) == [(0, 1)] and list(s.waiting) == [w]
    assert s.batch_is_full and s.admission_blocked  # no prefill is tried until the running batch shrinks


def test_sglang_an_empty_running_batch_is_never_full():
    # A disaggregated prefill pool: a prompt refused while the pool's blocks held KV parked for a transfer (nothing
    # running) marked the batch full, and with nothing left to shrink the running batch it stayed full after the
    # transfer freed the blocks: the pool's waiting requests stalled (a RuntimeError at --scheduler-recv-interval 3).
    s = make("sglang", num_blocks=20)
    parked = Request(99, 0.0, 300, 10)
    s.blocks.reserve(parked, 300)  # 19 of the 20 blocks
    w = waiting(s, 1, 64)
    assert not s.schedule() and s.batch_is_full and not s.running
    s.blocks.free(parked)  # the transfer is done
    assert entries(s.schedule()) == [(1, 64)] and list(s.running) == [w]


def _decode_steps(s, num_steps: int, t: float = 1.0) -> float:
    for _ in range(num_steps):
        batch = s.schedule()
        assert batch.shape.num_decodes == len(batch) and not batch.admitted and not batch.preempted
        finish_batch(s, batch, t)
        t += 0.01
    return t


def test_sglang_admits_once_the_ratio_has_decayed():
    # The same running request (600 tokens decoded, 3,399 to come, 39 blocks held) and the same free blocks: at
    # the starting ratio the prompt is refused; after 600 decode steps the ratio is at its floor (0.7 x 0.14) and
    # the same prompt is admitted.
    fresh = make("sglang", num_blocks=100)
    decoding(fresh, 0, 16, 601, output=4000)
    waiting(fresh, 1, 64, output=64)
    assert entries(fresh.schedule()) == [(0, 1)]
    decayed = make("sglang", num_blocks=100)
    r = decoding(decayed, 0, 16, 1, output=4000)
    _decode_steps(decayed, 600)  # nobody waits: no prefill is tried, the ratio decays at every step
    assert r.num_generated == 601 and r.num_blocks == 39 and decayed.blocks.num_free_blocks == 61
    assert decayed.new_token_ratio == pytest.approx(0.7 * 0.14)
    w = waiting(decayed, 1, 64, output=64)
    batch = decayed.schedule()
    assert entries(batch) == [(1, 64)] and batch.admitted == [w]


def test_sglang_does_not_retry_a_refused_prompt_until_a_request_leaves():
    # Refused at ratio 0.7, the prompt would fit the predicted room a few hundred steps later, but SGLang marks the
    # running batch full and tries no prefill until it shrinks: here when the short request finishes, step 700.
    s = make("sglang", num_blocks=200)
    decoding(s, 0, 16, 1, output=4000)
    short = decoding(s, 1, 16, 1, output=701)
    w = waiting(s, 2, 64, output=64)
    t = _decode_steps(s, 1)
    assert s.admission_blocked
    ratio = s.new_token_ratio
    t = _decode_steps(s, 698, t)
    assert s.new_token_ratio < ratio and s.admission_blocked and list(s.waiting) == [w]
    batch = s.schedule()  # the short request's last token
    assert finish_batch(s, batch, t) == [short] and not s.admission_blocked
    batch = s.schedule()
    assert batch.admitted == [w] and entries(batch) == [(2, 64)]


def test_sglang_resets_the_ratio_from_the_requests_left_after_a_retraction():
    # retract_decode: (tokens decoded + 20 a request) / (max_new_tokens summed + 1) over the requests left; the
    # running batch shrank, so the next step tries prefill again, at that ratio.
    s = make("sglang", num_blocks=40)
    decoding(s, 0, 320, 1, output=500)
    b = decoding(s, 1, 304, 1, output=500)
    w = waiting(s, 2, 200)
    s.decay_new_token_ratio(50)
    batch = s.schedule()  # w refused; the decodes need two blocks, one is free: the first is retracted
    assert len(batch.preempted) == 1 and s.running == [b]
    assert s.new_token_ratio == (1 + 20) / (500 + 1) and not s.admission_blocked
    finish_batch(s, batch)
    batch = s.schedule()  # 20 free blocks less b's 498 tokens to come at 21/501: w's 13 blocks and 10 tokens fit
    assert batch.admitted == [w]


def test_sglang_budget_is_its_chunked_prefill_size_and_radix_cache_on_by_default():
    from simulator.config.catalog import get_gpu

    assert make("sglang").token_budget == 4096  # no GPU given: SGLang's fallback
    budget = SchedulerConfig("sglang").token_budget  # by GPU memory, as SGLang's server args pick it
    assert budget(4096, get_gpu("l4")) == 2048 and budget(4096, get_gpu("l40s")) == 4096
    assert budget(4096, get_gpu("h100-sxm")) == budget(4096, get_gpu("h200")) == 8192
    assert budget(4096, get_gpu("b200")) == budget(4096, get_gpu("b300")) == 16384
    assert SchedulerConfig("sglang").prefix_cache == "radix-lru"  # SGLang's radix tree, vLLM V1's freed-block LRU
    assert SchedulerConfig("vllm-v1").prefix_cache == "vllm-lru"
    assert SchedulerConfig("sglang", prefix_cache_policy="vllm-lru").prefix_cache == "vllm-lru"
    assert SchedulerConfig("sglang", prefix_caching=False).prefix_cache is None


# -- trtllm ------------------------------------------------------------------------------------
def test_trtllm_runs_whole_prompts_beside_decodes_under_max_num_tokens():
    s = make("trtllm", max_num_batched_tokens=1000)
    decoding(s, 0, 100, 5)
    waiting(s, 1, 600)
    waiting(s, 2, 600)  # does not fit what is left of the budget: waits whole, never chunked
    batch = s.schedule()
    assert entries(batch) == [(0, 1), (1, 600)]  # 1 + 600 + 600 > 1000: request 2 is not chunked in
    finish_batch(s, batch)
    assert entries(s.schedule()) == [(0, 1), (1, 1), (2, 600)]  # 2 decodes + 600 fit the next step


def test_trtllm_reserves_the_whole_request_and_refuses_prompts_over_the_budget():
    s = make("trtllm", num_blocks=100, max_num_batched_tokens=4096)
    req = waiting(s, 0, 100, output=700)
    batch = s.schedule()
    assert req.num_blocks == -(-800 // 16)  # prompt and every output token, up front
    for step in range(699):
        finish_batch(s, batch, float(step))
        batch = s.schedule()
        assert not batch.preempted
    assert s.rejection_reason(Request(9, 0.0, 5000, 10)) is not None


def test_vllm_names_max_model_len_for_a_request_over_it_and_the_budget_for_one_within() -> None:
    # vLLM's server refuses prompt + max_tokens over max_model_len before its scheduler sees the request, so that
    # is the reason even where the token budget (here equal to it) is also exceeded.
    s = make("vllm", max_model_len=4096, max_num_batched_tokens=4096)
    over_context = s.rejection_reason(Request(0, 0.0, 5000, 10))
    assert over_context is not None and "max_model_len 4096" in over_context
    assert "max_num_batched_tokens" not in over_context
    within = make("vllm", max_model_len=4096, max_num_batched_tokens=2048).rejection_reason(Request(1, 0.0, 3000, 10))
    assert within is not None and "max_num_batched_tokens 2048" in within


# -- orca and fastertransformer -----------------------------------------------------------------
def test_orca_runs_decodes_and_whole_prompts_together():
    s = make("orca", max_model_len=1024)
    decoding(s, 0, 100, 2)
    waiting(s, 1, 900)
    waiting(s, 2, 50)
    batch = s.schedule()
    assert entries(batch) == [(0, 1), (1, 900), (2, 50)]  # no chunking, no budget


def test_orca_reserves_max_model_len_so_never_preempts():
    s = make("orca", num_blocks=128, max_model_len=1024)  # room for exactly 2 reservations
    for i in range(3):
        waiting(s, i, 10, output=500)
    batch = s.schedule()
    assert [r.request_id for r in batch.requests] == [0, 1]
    assert all(r.num_blocks == 64 for r in batch.requests)
    for step in range(499):
        finish_batch(s, batch, float(step))
        batch = s.schedule()
        assert not batch.preempted
    assert s.blocks.num_free_blocks + sum(r.num_blocks for r in s.running) == 128


def test_fastertransformer_admits_only_when_idle():
    s = make("fastertransformer", max_model_len=512)
    waiting(s, 0, 10, output=2)
    waiting(s, 1, 10, output=5)
    batch = s.schedule()
    assert entries(batch) == [(0, 10), (1, 10)]
    finish_batch(s, batch)
    waiting(s, 2, 10)
    batch = s.schedule()
    assert entries(batch) == [(0, 1), (1, 1)]  # request 2 waits for the whole batch
    finish_batch(s, batch)  # request 0 done
    for _ in range(3):
        batch = s.schedule()
        assert [r.request_id for r in batch.requests] == [1]
        finish_batch(s, batch)
    assert entries(s.schedule()) == [(2, 10)]


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_empty_queues_give_empty_batch(name):
    assert len(make(name).schedule()) == 0


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_in_flight_requests_are_skipped(name):
    s = make(name, max_model_len=1024)
    r = decoding(s, 0, 100, 2)
    r.in_flight = True
    assert r not in s.schedule().requests



def test_sglang_reads_new_requests_every_recv_interval_iterations_while_busy():
    s = make("sglang", recv_interval=3)
    waiting(s, 0, 50)
    assert s.inbox and not s.waiting and s.num_outstanding == 1
    batch = s.schedule()  # iteration 1, nothing running: the idle loop reads at once
    assert entries(batch) == [(0, 50)]
    finish_batch(s, batch)
    waiting(s, 1, 40)  # the engine is busy: it waits in the inbox
    batch = s.schedule()  # iteration 2: no poll
    assert entries(batch) == [(0, 1)]
    finish_batch(s, batch)
    batch = s.schedule()  # iteration 3: a poll; the prompt's prefill batch runs alone
    assert entries(batch) == [(1, 40)] and not s.inbox
    t = make("sglang")
    waiting(t, 0, 50)
    assert t.waiting and not t.inbox  # the default reads every iteration


def test_recv_interval_is_sglangs_only():
    with pytest.raises(ConfigError, match="scheduler.recv_interval"):
        SchedulerConfig("vllm-v1", recv_interval=4)
    with pytest.raises(ConfigError, match="--scheduler-recv-interval"):
        SchedulerConfig("sglang", recv_interval=0)


def test_trtllm_counts_a_cached_prefix_out_of_the_steps_budget():
    # TensorRT-LLM charges a context request its uncached tokens (_reuse_adjusted_compute): 8,000 cached of 8,016
    # beside 201 decodes fits a 16,384 budget; the whole prompt against it kept the request waiting.
    from simulator.engine.prefix_cache import PrefixCachingBlockManager

    cfg = SchedulerConfig("trtllm", watermark=0.0, prefix_caching=True, max_num_seqs=512)
    sched = SCHEDULERS["trtllm"](cfg, PrefixCachingBlockManager(20000, 16, 0.0), 16384)
    cache_a_prefix_beside_decodes(sched)  # an 8,000-token prompt computed and cached, 200 decodes beside
    late = hashed_request(999, 8016)
    sched.add_request(late)
    batch = sched.schedule()
    assert late in batch.requests and sum(batch.num_tokens) <= sched.token_budget


def test_a_vllm_budget_below_its_sequence_cap_is_refused():
    from simulator.config.run_config import RunConfig

    with pytest.raises(ConfigError, match="below max_num_seqs 256"):
        RunConfig().replace(scheduler__name="vllm-v1", scheduler__max_num_batched_tokens=64,
                            scheduler__max_num_seqs=256)
    with pytest.raises(ConfigError, match=r"\(the default\)"):  # vLLM V1's default cap on an A100: 256
        RunConfig().replace(scheduler__name="vllm-v1", scheduler__max_num_batched_tokens=64)
    assert RunConfig().replace(scheduler__name="vllm-v1", scheduler__max_num_batched_tokens=64,
                               scheduler__max_num_seqs=64).scheduler.max_num_seqs == 64


def test_sglang_retracts_the_fewest_outputs_and_longest_prompt_to_the_back_of_the_queue():
    # SGLang's retract_decode sorts by (len(output_ids), -len(origin_input_ids)) and requeues at the end: with equal
    # outputs the longer (older) prompt goes, behind the request already waiting. The base policy took the newest
    # and put it at the front, as vLLM does.
    # (Both are put in the running batch by hand: SGLang's predicted admission would not have taken the second.)
    s = make("sglang", num_blocks=40)
    a, b = decoding(s, 0, 320, 1, output=500), decoding(s, 1, 304, 1, output=500)  # 20 + 19 blocks of 40, both full
    w = waiting(s, 2, 200)
    batch = s.schedule()  # w does not fit the predicted room; both decodes need a block, one is free
    assert batch.preempted == [a] and a.num_generated == b.num_generated
    assert list(s.waiting) == [w, a] and s.running == [b] and batch.requests == [b]


def test_trtllm_defaults_are_trtllm_serves():
    # trtllm-serve schedules up to max_batch_size 2048 requests (its 128 is the largest CUDA-graph batch) and reuses
    # KV blocks across requests (KvCacheConfig.enable_block_reuse=True); the 2023-era policies keep 128.
    from simulator.config.catalog import GPUS

    trt = SchedulerConfig("trtllm")
    assert trt.seq_limit(GPUS["h100-sxm"]) == 2048
    assert trt.prefix_cache == "vllm-lru"
    assert SchedulerConfig("trtllm", prefix_caching=False).prefix_cache is None
    assert SchedulerConfig("orca").seq_limit(GPUS["h100-sxm"]) == 128
    # ... and its cap does not cost KV cache: TensorRT-LLM sizes the cache after a forward of max_num_tokens dummy
    # tokens, not of 2048 sequences' logits (Llama-3.1-8B on an L4 would lose 28% of its cache)
    from simulator.config.run_config import ReplicaConfig
    from simulator.engine.kvcache import build_kv_cache

    replica = ReplicaConfig("llama-3.1-8b", "l4", max_model_len=8192)
    default = build_kv_cache(replica, trt)[1].num_kv_tokens
    assert default == build_kv_cache(replica, SchedulerConfig("trtllm", max_num_seqs=128))[1].num_kv_tokens
    assert default > build_kv_cache(replica, SchedulerConfig("trtllm", max_num_seqs=2048))[1].num_kv_tokens
