"""The semantic points behind a side-by-side run with Vidur (results/vidur-parity/), each on a
case small enough to compute by hand.

- trace rows over the length limit: Vidur clips them, we drop them unless ``over_length="clip"``;
- KV capacity: Vidur sizes its cache as whole ``max_tokens`` request slots, larger than the
  memory plan vLLM's profiling gives; ``num_gpu_blocks`` sets the count outright;
- running order: arrival order (FCFS priority), as the sarathi-serve reference and vLLM v0
  sort their running queue, so a re-admitted request's chunks and its protection from
  preemption follow its arrival;
- arrivals: ours are a true Poisson process; Vidur caps each gap at 3 mean gaps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.options import build_config
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.engine.kvcache import BlockManager, plan_memory
from simulator.engine.replica import build_scheduler
from simulator.engine.schedulers import SCHEDULERS, Batch
from simulator.workload.generate import clip_lengths, generate_requests
from simulator.workload.request import Request
from tests.helpers import ConstantCostModel, run_requests

EXAMPLES = Path(__file__).resolve().parents[1] / "traces" / "examples"


# -- over-length trace rows: clip as Vidur does ------------------------------------------------------------
@pytest.mark.parametrize(("prompt", "output", "limit", "want"), [
    # excess 404: prompt gives ceil(404 * 3000/4500) = ceil(269.3) = 270, output ceil(134.7) = 135
    (3000, 1500, 4096, (2730, 1365)),
    # excess 3906: prompt ceil(3905.02) = 3906, output ceil(0.976) = 1; ends one under the limit
    (8000, 2, 4096, (4094, 1)),
    # excess 4905: prompt ceil(4.9) = 5 would leave 0, kept at 1; output ceil(4900.1) = 4901
    (5, 5000, 100, (1, 99)),
    (100, 20, 4096, (100, 20)),  # within the limit: untouched
    (4000, 96, 4096, (4000, 96)),  # exactly at the limit: untouched
])
def test_clip_lengths_matches_hand_calculation(prompt: int, output: int, limit: int, want: tuple[int, int]) -> None:
    p, o = clip_lengths(np.array([prompt]), np.array([output]), limit)
    assert (int(p[0]), int(o[0])) == want
    assert p[0] + o[0] <= limit or (prompt + output <= limit and (p[0], o[0]) == (prompt, output))


def test_clip_keeps_every_trace_row_in_place() -> None:
    path = str(EXAMPLES / "vidur_example.csv")  # rows 4 (4096+64) and 8 (7000+200) are over 4096
    clip = generate_requests(WorkloadConfig(trace=path, arrival="trace", num_requests=8, max_total_tokens=4096,
                                            over_length="clip"), np.random.default_rng(0))
    # row 4: excess 64 -> prompt -ceil(63.02)=64, output -ceil(0.98)=1; row 8: excess 3104 -> -3018, -87
    assert list(clip.num_prompt_tokens) == [512, 1730, 96, 4032, 300, 2048, 128, 3982]
    assert list(clip.num_output_tokens) == [128, 415, 32, 63, 900, 256, 1024, 113]
    np.testing.assert_allclose(clip.arrival_at, [0.0, 0.35, 0.41, 1.20, 1.20, 2.05, 2.60, 3.10])
    assert "2 over max_total_tokens=4096 clipped" in clip.source
    drop = generate_requests(WorkloadConfig(trace=path, arrival="trace", num_requests=6, max_total_tokens=4096),
                             np.random.default_rng(0))
    # today's filter is unchanged: both long rows are dropped and the rest keep their order
    assert list(drop.num_prompt_tokens) == [512, 1730, 96, 300, 2048, 128]
    assert "2 over max_total_tokens=4096 removed" in drop.source


@pytest.mark.parametrize(("kw", "match"), [
    ({"over_length": "trim", "trace": "t.csv", "max_total_tokens": 10}, "use one of drop, clip"),
    ({"over_length": "clip", "trace": "t.csv"}, "max-total-tokens"),
    ({"over_length": "clip", "max_total_tokens": 4096}, "--trace"),
])
def test_over_length_refuses_bad_input_with_one_line(kw: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        WorkloadConfig(**kw)
    assert err.value.field == "workload.over_length" and "\n" not in str(err.value)


def test_over_length_is_a_run_option() -> None:
    cfg = build_config(trace="x.csv", max_total_tokens=4096, over_length="clip")
    assert cfg.workload.over_length == "clip"
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


# -- KV capacity ---------------------------------------------------------------------------------------------
def test_num_gpu_blocks_overrides_the_memory_plan() -> None:
    base = ReplicaConfig("llama-2-70b", "a100-80gb", tp=2)
    planned = plan_memory(base, 512, 128)
    # Vidur's count for this replica (13 slots of 4096 tokens = 3328 blocks, see the parity note) is
    # larger than what the weights and activations leave us.
    assert planned.num_blocks < 3328
    forced = plan_memory(ReplicaConfig("llama-2-70b", "a100-80gb", tp=2, num_gpu_blocks=3328), 512, 128)
    assert (forced.num_blocks, forced.num_kv_tokens) == (3328, 3328 * 16)
    cfg = build_config(model="llama-2-70b", tp=2, num_gpu_blocks=3328)
    scheduler, _ = build_scheduler(cfg)
    assert scheduler.blocks.num_blocks == 3328 and scheduler.blocks.watermark_blocks == 33  # int(0.01 * 3328)


def test_num_gpu_blocks_refuses_a_cache_smaller_than_one_request() -> None:
    with pytest.raises(ConfigError, match="max_model_len"):
        build_scheduler(build_config(model="llama-2-70b", tp=2, num_gpu_blocks=100))  # 1600 < 4096 tokens
    with pytest.raises(ConfigError, match="num_gpu_blocks"):
        ReplicaConfig(num_gpu_blocks=0)


@pytest.mark.parametrize(("num_blocks", "ttft_b"), [(200, 0.45), (100, 5.25)])
def test_kv_capacity_decides_when_the_second_prompt_starts(num_blocks: int, ttft_b: float) -> None:
    """A: t=0, 1024-token prompt, 50 outputs; B: t=0.05, 1024 tokens. Budget 512, 0.1 s iterations.

    A prefills in [0, 0.2] (two chunks of 512, no room for B). With 200 blocks B (64 blocks) is
    admitted at 0.2 beside A's decode: chunks 511, 511, 2, first token at 0.5 -> TTFT 0.45. With
    100 blocks A holds 64 and B must wait for A to finish: A's 49 decodes end at 0.2 + 4.9 = 5.1,
    B's two chunks end at 5.3 -> TTFT 5.25.
    """
    replica = ReplicaConfig("mistral-7b", "a100-80gb")
    reqs, _, _ = run_requests("sarathi", [(0.0, 1024, 50), (0.05, 1024, 10)], num_blocks=num_blocks,
                              cost=ConstantCostModel(replica, 0.1), chunk_size=512, watermark=0.0)
    a, b = reqs
    assert a.token_times[0] - a.arrival_at == pytest.approx(0.2)
    assert b.token_times[0] - b.arrival_at == pytest.approx(ttft_b)


# -- running order: FCFS priority, as sarathi-serve and vLLM v0 ---------------------------------------------------
def _sched(name: str, num_blocks: int = 1000, **kw):
    cfg = SchedulerConfig(name, watermark=0.0, **kw)
    return SCHEDULERS[name](cfg, BlockManager(num_blocks, 16, 0.0), 4096)


def test_readmitted_request_takes_its_arrival_place_in_chunk_order() -> None:
    """B (arrived at 1.0) is mid-prefill; A (arrived at 0.0, preempted earlier, as happens with
    pipelining when the newest request is in flight) is re-admitted after B. Running order is
    arrival order, so the next 64-token budget goes to A, not B."""
    s = _sched("sarathi", chunk_size=64)
    b = Request(1, 1.0, 200, 10)
    s.add_request(b)
    s._admit(Batch())
    b.num_computed = 64  # one chunk done (its whole prompt was reserved at admission)
    a = Request(0, 0.0, 200, 10)
    a.num_preemptions = 1
    s.waiting.appendleft(a)  # where _preempt re-queues a victim
    s._admit(Batch())
    assert [r.request_id for r in s.running] == [0, 1]
    nxt = s.schedule()
    assert [(r.request_id, n) for r, n in zip(nxt.requests, nxt.num_tokens, strict=True)] == [(0, 64)]


def test_preemption_victim_is_the_latest_arrival_not_the_latest_admission() -> None:
    """vLLM decodes with one block too few: the victim is B (arrived last), although A, an earlier
    arrival that had been preempted, was re-admitted after B.

    5 blocks of 16. A and B each know 32 tokens (16 prompt + 16 generated) and hold 2 blocks;
    one decode step later each knows 33 and needs a third block, and 1 is free. Arrival order
    serves A first (it takes the free block); B finds none and, being the latest arrival, is
    itself preempted. (In admission order B would have been served and A preempted.)
    """
    s = _sched("vllm", num_blocks=5)
    a, b = Request(0, 0.0, 16, 100), Request(1, 1.0, 16, 100)
    for req in (b, a):  # B admitted first, A re-admitted after it
        req.num_generated = 16
        s.waiting.append(req)
        s._admit(Batch())
        req.num_computed = 31  # decoding: all but the last generated token cached
    assert [r.request_id for r in s.running] == [0, 1] and s.blocks.num_free_blocks == 1
    s.complete(s.schedule(), 1.0)  # one decode each, no new block needed (32 tokens)
    batch = s.schedule()
    assert [r.request_id for r in batch.requests] == [0] and batch.preempted == [b]
    assert s.waiting[0] is b and b.num_computed == 0 and a.num_blocks == 3


# -- arrivals ----------------------------------------------------------------------------------------------------
def test_poisson_gaps_are_not_capped() -> None:
    """Vidur caps each exponential gap at 3/qps (mean gap (1 - e^-3)/qps = 0.950/qps); ours is a
    Poisson process: P(gap > 3/qps) = e^-3 = 4.98%."""
    table = generate_requests(WorkloadConfig(name="fixed", qps=0.4, num_requests=20_000), np.random.default_rng(5))
    gaps = np.diff(np.concatenate([[0.0], table.arrival_at]))
    assert abs((gaps > 3 / 0.4).mean() - np.exp(-3)) < 0.005
    assert gaps.mean() == pytest.approx(2.5, rel=0.03)


# -- a restarted request: TTFT is its first token ever, the gap across the restart is a TBT sample ----------------
def test_preempted_request_keeps_its_ttft_and_its_stall_counts_as_tbt() -> None:
    """vLLM, 4 blocks of 16, 0.1 s iterations; A and B: t=0, 16-token prompts, 40 outputs.

    Both prefill in [0, 0.1] (first tokens at 0.1) and decode; output g arrives at 0.1*g. At 1.7
    both know 33 tokens and need a third block with none free: B (latest arrival) is preempted.
    B cannot come back (3 blocks, 1 free) until A finishes at 0.1*40 = 4.0; its 33-token
    re-prefill ends at 4.1 with output 18 and its last output comes at 4.1 + 0.1*22 = 6.3.
    Vidur counts the same restart but drops the 4.1 - 1.7 = 2.4 s gap from its decode-token
    metric (the re-prefill's token is not a "decode" token there); we keep it, as TBT is every
    gap between a request's tokens (DESIGN.md), and TTFT stays 0.1.
    """
    replica = ReplicaConfig("mistral-7b", "a100-80gb")
    (a, b), _, _ = run_requests("vllm", [(0.0, 16, 40), (0.0, 16, 40)], num_blocks=4,
                                cost=ConstantCostModel(replica, 0.1), watermark=0.0)
    assert (a.num_preemptions, b.num_preemptions) == (0, 1)
    assert a.token_times[0] == pytest.approx(0.1) and b.token_times[0] == pytest.approx(0.1)
    assert a.completed_at == pytest.approx(4.0) and b.completed_at == pytest.approx(6.3)
    gaps = np.diff(np.asarray(b.token_times))
    assert len(gaps) == 39 and gaps.max() == pytest.approx(2.4) and int(np.argmax(gaps)) == 16
