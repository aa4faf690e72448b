"""Speculative decoding: config, acceptance draws, token/KV accounting, pricing, acceptance data."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import simpy

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, SchedulerConfig
from simulator.config.speculative import (
    SpeculativeConfig,
    al_iid,
    al_of_rates,
    from_vllm_json,
    parse_rates,
    to_vllm_json,
)
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape
from simulator.costmodel.speculative import SpecBatchShape, SpeculativeCostModel, drafter_memory
from simulator.engine.kvcache import BlockManager
from simulator.engine.records import Recorder
from simulator.engine.replica import Replica
from simulator.engine.schedulers import SCHEDULERS
from simulator.engine.schedulers.base import insert_fcfs
from simulator.engine.speculative import make_speculative, per_step_gaps, speculation_rng
from simulator.workload.request import Request, Status
from tests.helpers import ConstantCostModel, submit_all

REPLICA = ReplicaConfig("mistral-7b", "a100-80gb")


def run(spec: SpeculativeConfig | None, specs: list[tuple[float, int, int]], *, scheduler: str = "sarathi",
        num_blocks: int = 4096, cost=None, seed: int = 0, **sched_kwargs):  # noqa: ANN001, ANN202
    env = simpy.Environment()
    recorder = Recorder()
    config = SchedulerConfig(scheduler, **sched_kwargs)
    sched = SCHEDULERS[scheduler](config, BlockManager(num_blocks, 16, config.watermark), 4096)
    if spec is not None:
        sched = make_speculative(sched, spec, speculation_rng(seed, 0))
    replica = Replica(env, 0, sched, cost or ConstantCostModel(REPLICA, 0.01), recorder)
    requests = [Request(i, a, p, o, token_times=True) for i, (a, p, o) in enumerate(specs)]
    submit_all(env, replica, requests)
    return requests, recorder, sched


# -- config -------------------------------------------------------------------------------------------------------
def test_config_validates_and_repeats_an_iid_rate() -> None:
    c = SpeculativeConfig("eagle3", 4, acceptance_rates=(0.7,))
    assert c.acceptance_rates == (0.7,) * 4
    assert c.mean_acceptance_length == pytest.approx(al_iid(0.7, 4))
    for bad in ({"method": "medusa2"}, {"num_speculative_tokens": 0}, {"acceptance_rates": ()},
                {"acceptance_rates": (0.5, 0.4)}, {"acceptance_rates": (1.5,)}, {"method": "draft_model"},
                {"disable_by_batch_size": 0}):
        kwargs = {"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": (0.6,)} | bad
        with pytest.raises(ConfigError) as err:
            SpeculativeConfig(**kwargs)
        assert "speculative." in str(err.value) and "\n" not in str(err.value)


def test_vllm_json_form() -> None:
    c = from_vllm_json('{"method": "eagle3", "num_speculative_tokens": 3, "model": "yuhuili/EAGLE3-LLaMA3.1-8B"}',
                       acceptance_rates=(0.8, 0.7, 0.6))
    assert (c.method, c.k, c.acceptance_rates) == ("eagle3", 3, (0.8, 0.7, 0.6))
    assert from_vllm_json('{"model": "[ngram]", "num_speculative_tokens": 4, "acceptance_rate": 0.5}').method == "ngram"
    d = from_vllm_json('{"model": "qwama-0.5b", "num_speculative_tokens": 4, "disable_by_batch_size": 8}', (0.6,))
    assert (d.method, d.draft_model, d.disable_by_batch_size) == ("draft_model", "qwama-0.5b", 8)
    assert from_vllm_json('{"method": "deepseek_mtp", "num_speculative_tokens": 1}', (0.8,)).method == "mtp"
    for bad in ("{", "[1]", '{"method": "x", "num_speculative_tokens": 2}', '{"method": "ngram"}',
                '{"method": "ngram", "num_speculative_tokens": 2, "foo": 1}'):
        with pytest.raises(ConfigError):
            from_vllm_json(bad, (0.5,))
    assert parse_rates("0.8, 0.7,0.6") == (0.8, 0.7, 0.6)
    with pytest.raises(ConfigError):
        parse_rates("0.8,x")
    assert SpeculativeConfig.from_dict(d.to_dict()) == d


def test_vllm_keys_without_effect_are_named() -> None:
    """A pasted vLLM config's keys that change nothing here are kept and named, not dropped silently."""
    c = from_vllm_json('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5, '
                       '"prompt_lookup_min": 2}', (0.5,))
    assert c.unmodelled_keys == ("prompt_lookup_max", "prompt_lookup_min")
    assert "prompt_lookup_max" in c.unmodelled_note() and "acceptance rates" in c.unmodelled_note()
    assert c == from_vllm_json('{"method": "ngram", "num_speculative_tokens": 4}', (0.5,))  # same run
    assert from_vllm_json('{"method": "ngram", "num_speculative_tokens": 4}', (0.5,)).unmodelled_note() == ""
    d = from_vllm_json('{"model": "qwama-0.5b", "num_speculative_tokens": 4, "quantization": "fp8"}', (0.6,))
    assert d.unmodelled_keys == ("quantization",) and "--dtype" in d.unmodelled_note()
    assert SpeculativeConfig.from_dict(d.to_dict()).unmodelled_keys == ("quantization",)
    with pytest.raises(ConfigError, match="quantization: ngram .* has no draft model to quantize"):
        from_vllm_json('{"method": "ngram", "num_speculative_tokens": 4, "quantization": "fp8"}', (0.5,))
    with pytest.raises(ConfigError, match="unmodelled_keys"):
        SpeculativeConfig("ngram", 4, acceptance_rates=(0.5,), unmodelled_keys=("foo",))


@pytest.mark.parametrize(("lookup", "key"), [
    ('"prompt_lookup_max": -1, "prompt_lookup_min": 5', "prompt_lookup_max"),  # vLLM: each must be > 0
    ('"prompt_lookup_min": 0', "prompt_lookup_min"),
    ('"prompt_lookup_max": 2, "prompt_lookup_min": 5', "prompt_lookup_min"),  # vLLM: min <= max
    ('"prompt_lookup_min": 2.5', "prompt_lookup_min"),
])
def test_ngram_lookup_ranges_vllm_refuses_are_refused(lookup: str, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        from_vllm_json(f'{{"method": "ngram", "num_speculative_tokens": 4, {lookup}}}', (0.5,))
    assert err.value.field == f"--speculative-config.{key}" and "\n" not in str(err.value)
    # one given stands for both (vLLM copies it), and another method has no lookup to set
    assert from_vllm_json('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}', (0.5,))
    with pytest.raises(ConfigError, match="would do nothing"):
        from_vllm_json('{"method": "eagle3", "model": "x", "num_speculative_tokens": 4, "prompt_lookup_min": 3}',
                       (0.5,))


def test_the_header_names_the_keys_given_that_are_not_modelled() -> None:
    from simulator.cli.run import run_title
    from simulator.config.run_config import RunConfig

    spec = from_vllm_json('{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 5}', (0.5,))
    title = run_title(RunConfig().replace(speculative=spec, scheduler__prefix_caching=False), {})
    assert "not modelled: prompt_lookup_max" in title


def test_adaptive_k() -> None:
    """vLLM turns speculation off at running_queue_size >= disable_by_batch_size (it was off only above it, 32
    running requests still speculating here); a disable_by_batch_size of 1 (every step off) is refused, as vLLM
    does, and a reduction that only batches already off would reach."""
    c = SpeculativeConfig("ngram", 4, acceptance_rates=(0.5,), disable_by_batch_size=32, reduce_k_batch_size=8)
    assert [c.k_for(n) for n in (1, 8, 9, 16, 31, 32, 33)] == [4, 4, 3, 2, 1, 0, 0]
    with pytest.raises(ConfigError, match="disable_by_batch_size: must be an integer >= 2, got 1"):
        SpeculativeConfig("ngram", 4, acceptance_rates=(0.5,), disable_by_batch_size=1)
    with pytest.raises(ConfigError, match="7 leaves no batch to shrink k in"):
        SpeculativeConfig("ngram", 4, acceptance_rates=(0.5,), disable_by_batch_size=8, reduce_k_batch_size=7)
    assert SpeculativeConfig("ngram", 4, acceptance_rates=(0.5,), disable_by_batch_size=8, reduce_k_batch_size=6)


# -- acceptance in the loop ----------------------------------------------------------------------------------------
def test_mean_emitted_per_step_matches_closed_form() -> None:
    """i.i.d. acceptance: the mean of 1 + a over verify steps is AL = (1 - a^(k+1)) / (1 - a)
    within sampling error (4 standard errors), and the accepted-draft histogram follows the
    truncated geometric law (chi-square)."""
    rate, k = 0.6, 4
    spec = SpeculativeConfig("ngram", k, acceptance_rates=(rate,))
    # Long outputs so the cap at the remaining output touches few steps; accepted counts are uncapped.
    _, _, sched = run(spec, [(0.0, 64, 2000)] * 8)
    stats = sched.speculation.stats
    p = [(1 - rate) * rate**j for j in range(k)] + [rate**k]
    mean = sum((1 + j) * pj for j, pj in enumerate(p))
    var = sum((1 + j - mean) ** 2 * pj for j, pj in enumerate(p))
    assert mean == pytest.approx(al_iid(rate, k))
    n = stats.num_verify_steps
    assert n > 2000
    assert abs(stats.mean_acceptance_length - mean) < 4 * math.sqrt(var / n)
    observed = np.array(stats.accepted_hist, dtype=float)
    expected = n * np.array(p)
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 20.5  # 4 degrees of freedom: p ~ 0.0004


def test_per_position_rates_in_the_loop() -> None:
    rates = (0.9, 0.6, 0.3)
    _, _, sched = run(SpeculativeConfig("eagle3", 3, acceptance_rates=rates), [(0.0, 64, 1500)] * 8)
    s = sched.speculation.stats
    reach = [sum(s.accepted_hist[j:]) / s.num_verify_steps for j in range(4)]  # P(a >= j)
    for j in range(1, 4):
        assert reach[j] == pytest.approx(math.prod(rates[:j]), abs=0.03)
    assert s.mean_acceptance_length == pytest.approx(al_of_rates(rates), abs=0.05)


def test_tokens_kv_and_gaps_accounting() -> None:
    spec = SpeculativeConfig("ngram", 3, acceptance_rates=(0.7,))
    specs = [(0.01 * i, 40 + 13 * i, 1 + 7 * i) for i in range(12)]
    requests, recorder, sched = run(spec, specs, chunk_size=64, num_blocks=400)
    for req in requests:
        assert req.num_generated == req.num_output_tokens == len(req.token_times)
        assert list(req.token_times) == sorted(req.token_times)
        assert req.num_computed == req.num_prompt_tokens + req.num_output_tokens - 1
    assert sched.blocks.num_free_blocks == sched.blocks.num_blocks  # rejected slots and finishers all freed
    # Verify tokens count against the token budget.
    for row in recorder.iterations:
        assert row[3] + row[4] <= 64
    # Per-token gaps: one per token after the first; per-step view drops the intra-step zeros.
    stats = sched.speculation.stats
    num_gaps = sum(r.num_output_tokens - 1 for r in requests)
    assert len(sched.gaps) == num_gaps
    steps = per_step_gaps(sched.gaps, stats.num_intra_step_zeros)
    assert len(steps) == num_gaps - stats.num_intra_step_zeros
    assert stats.num_intra_step_zeros > 0 and min(steps.values) > 0
    # Several tokens arrive together: some token times repeat.
    assert any(len(set(r.token_times)) < len(r.token_times) for r in requests)


def test_same_seed_same_run_and_seed_matters() -> None:
    spec = SpeculativeConfig("ngram", 3, acceptance_rates=(0.6,))
    specs = [(0.0, 100, 200)] * 4
    a = [list(r.token_times) for r in run(spec, specs, seed=3)[0]]
    b = [list(r.token_times) for r in run(spec, specs, seed=3)[0]]
    c = [list(r.token_times) for r in run(spec, specs, seed=4)[0]]
    assert a == b and a != c


def test_adaptive_off_step_is_the_plain_step() -> None:
    """With speculation disabled from two running requests, a batch of several is the plain run."""
    specs = [(0.0, 50, 30)] * 6
    spec = SpeculativeConfig("ngram", 3, acceptance_rates=(0.9,), disable_by_batch_size=2)
    plain = run(None, specs)
    specd = run(spec, specs)
    assert [list(r.token_times) for r in plain[0]] == [list(r.token_times) for r in specd[0]]
    assert specd[2].speculation.stats.num_verify_steps == 0


@pytest.mark.parametrize("scheduler", ["vllm", "orca", "vllm-v1"])
def test_other_policies_speculate(scheduler: str) -> None:
    spec = SpeculativeConfig("ngram", 2, acceptance_rates=(0.8,))
    requests, _, sched = run(spec, [(0.0, 30, 40)] * 5, scheduler=scheduler)
    assert all(r.num_generated == 40 for r in requests)
    assert sched.speculation.stats.num_verify_steps > 0


def _sglang_decodes(spec: SpeculativeConfig, computed: int, free_blocks: int) -> tuple:  # noqa: ANN001
    """A speculating SGLang scheduler with four decodes, each ``computed`` tokens cached, in blocks that hold them,
    ``free_blocks`` left, and a waiting prompt too long to admit. Request 0 arrived first but was admitted last
    (re-admitted after a retraction), request 1 has the fewest output tokens, request 3 arrived last."""
    blocks = BlockManager(64, 16, 0.0)
    sched = make_speculative(SCHEDULERS["sglang"](SchedulerConfig("sglang"), blocks, 4096), spec, speculation_rng(0, 0))
    generated = {0: 20, 1: 16, 2: 17, 3: 18}
    for rid, seq in ((1, 1), (2, 2), (3, 3), (0, 4)):
        req = Request(rid, float(rid), computed + 1 - generated[rid], 100)
        req.num_generated, req.num_computed, req.status, req.admitted_seq = generated[rid], computed, Status.RUNNING, seq
        blocks.reserve(req, computed)
        insert_fcfs(sched.running, req)
    blocks.reserve(Request(99, 0.0, 1, 1), 16 * (blocks.num_free_blocks - free_blocks))  # the rest held elsewhere
    late = Request(9, 9.0, 16 * (free_blocks + 1), 10)
    sched.add_request(late)
    return sched, late


@pytest.mark.parametrize(("k", "computed", "free_blocks"), [
    (4, 45, 3),  # each verify needs a block (45 + 1 + 4 > 48) where its last one is not full: 4 > 3 free
    (20, 47, 5),  # each needs two (47 + 1 + 20 = 68 tokens, 5 blocks of 3): 8 > 5 free, though 5 >= 4 running
])
def test_sglang_retracts_for_the_verifys_blocks_from_the_back_of_the_batch(k: int, computed: int,
                                                                        free_blocks: int) -> None:
    # A verify writes 1 + k slots: SGLang's memory check counts them and, speculating, retracts from the back of the
    # running batch (the latest admitted; retract_decode leaves it unsorted with speculation) to the back of the
    # queue. Counting only the decodes whose last block is full let the verifies' growth preempt vLLM's victim (the
    # newest arrival) to the front of the queue.
    sched, late = _sglang_decodes(SpeculativeConfig("ngram", k, acceptance_rates=(0.7,)), computed, free_blocks)
    first = sched.running[0]
    assert first.request_id == 0 and first.admitted_seq == 4
    batch = sched.schedule()
    assert batch.preempted == [first] and list(sched.waiting) == [late, first]
    assert [r.request_id for r in batch.requests] == [1, 2, 3] and batch.num_tokens == [1 + k] * 3
    assert all(r.num_blocks * 16 >= r.num_computed + 1 + k for r in batch.requests)


def test_sglang_retraction_counts_the_adaptive_k_that_grows_as_the_batch_shrinks() -> None:
    # k = 48 // running: 12 drafts each at four running (a block more each: 4 > 2 free), 16 at three (2 blocks each:
    # 6 > 5 free after the first retraction), 24 at two. Keeping the first count (3 blocks at three running) left
    # the third verify to preempt vLLM's victim to the front of the queue.
    spec = SpeculativeConfig("ngram", 48, acceptance_rates=(0.7,), reduce_k_batch_size=1)
    sched, late = _sglang_decodes(spec, 48, 2)
    batch = sched.schedule()
    assert [r.request_id for r in batch.preempted] == [0, 3] and [r.request_id for r in sched.waiting] == [9, 0, 3]
    assert [r.request_id for r in batch.requests] == [1, 2] and batch.num_tokens == [1 + 24] * 2


# -- pricing -------------------------------------------------------------------------------------------------------
def _costs(method: str, model: str | None = None):  # noqa: ANN202
    from simulator.costmodel.engine_model import ENGINES
    from simulator.costmodel.speculative import synchronous_unless_async_drafter

    replica = ReplicaConfig("llama-3-70b", "h100", tp=4)
    # The target as vLLM runs it beside this drafter: async scheduling with EAGLE/MTP drafters only.
    target = load_cost_model("roofline", replica, synchronous_unless_async_drafter(ENGINES["vllm-v1"], method))
    # A draft model on one GPU, as the vLLM 2024 blog's Qwama-0.5B (whose 14 heads TP 4 would not divide).
    spec = SpeculativeConfig(method, 4, model, acceptance_rates=(0.7,), draft_tp=1 if model else None)
    return target, SpeculativeCostModel(target, spec)


def test_plain_shapes_cost_the_target_and_the_drafters_prompt_pass() -> None:
    """A step of decodes alone costs what the target says; a prompt chunk also runs through the drafter (a draft
    model's forward, an EAGLE head's layer), in a step that verifies nothing too: the draft model builds its own
    KV of the prompt (it was charged only in steps that also verified, never under the vllm policy's prefill-only
    steps); n-gram drafts from the text, at no cost."""
    target, spec_cost = _costs("draft_model", "qwama-0.5b")
    decodes = BatchShape.from_requests([], [1000, 2000])
    assert spec_cost.iteration_time(decodes) == target.iteration_time(decodes)
    assert spec_cost.iteration_time(SpecBatchShape.of(decodes)) == target.iteration_time(decodes)
    mixed = BatchShape.from_requests([(2000, 0)], [1000, 2000])
    from simulator.costmodel.speculative import prompt_chunks

    drafter = spec_cost._draft_pass(prompt_chunks(mixed))
    assert drafter > 0 and spec_cost.iteration_time(mixed) == target.iteration_time(mixed) + drafter
    assert spec_cost.iteration_time(SpecBatchShape.of(mixed)) == spec_cost.iteration_time(mixed)
    eagle_target, eagle = _costs("eagle3")
    assert eagle.iteration_time(mixed) > eagle_target.iteration_time(mixed)
    ngram_target, ngram = _costs("ngram")
    assert ngram.iteration_time(mixed) == ngram_target.iteration_time(mixed)


@pytest.mark.parametrize("engine", ["vllm-2026", "sglang-2026", "trtllm-2026", "vllm-2023-splitwise"])
def test_a_verify_steps_breakdown_adds_up_to_its_time(engine: str) -> None:
    """Each part of a step's breakdown is what it adds to the step: the engine's per-prompt-token CPU charged a
    verify's query rows as prompt tokens in the breakdown (cpu_time leaves them out), 18.3 ms of parts for a
    15.8 ms step of 64 verifies at 1,000 tokens of context."""
    # (engines with a per-prompt-token CPU term)
    target = load_cost_model("roofline", ReplicaConfig("llama-3.1-8b", "h100-sxm"), engine)
    cost = SpeculativeCostModel(target, SpeculativeConfig("eagle3", 4, acceptance_rates=(0.7,)))
    verifies = SpecBatchShape()
    for _ in range(64):
        verifies.add_verify(4, 999)
    mixed = SpecBatchShape.of(BatchShape.from_requests([(2000, 0)], [500] * 8))
    for _ in range(16):
        mixed.add_verify(2, 3000)
    for shape in (verifies, mixed):
        assert sum(cost.breakdown(shape).values()) == pytest.approx(cost.iteration_time(shape), rel=1e-9)


def test_verify_pricing_and_crossover() -> None:
    """Verifying k+1 tokens is nearly free at batch 1 (weight-bound) and costs about k+1 decodes
    when the step is compute-bound: the cost ratio of a verify step to a plain step grows with
    the batch, past the mean acceptance length (where speculation stops paying)."""
    target, cost = _costs("ngram")
    ratios = []
    for n in (1, 8, 64, 256, 512):
        plain = BatchShape.from_requests([], [1000] * n)
        verify = SpecBatchShape()
        for _ in range(n):
            verify.add_verify(4, 999)
        ratios.append(cost.iteration_time(verify) / target.iteration_time(plain))
    assert ratios == sorted(ratios)
    assert ratios[0] < 1.2
    assert ratios[-1] > al_iid(0.6, 4)  # a 0.6-rate drafter loses here


def test_drafter_costs() -> None:
    verify = SpecBatchShape()
    for _ in range(8):
        verify.add_verify(4, 999)
    times = {}
    for method, model in (("ngram", None), ("eagle3", None), ("draft_model", "qwama-0.5b"), ("draft_model", "llama-3-8b")):
        _, cost = _costs(method, model)
        times[method, model] = cost.draft_time(verify)
    assert times["ngram", None] == 0.0
    assert 0 < times["eagle3", None] < times["draft_model", "llama-3-8b"]
    assert times["draft_model", "qwama-0.5b"] < times["draft_model", "llama-3-8b"]
    replica = ReplicaConfig("llama-3-70b", "h100", tp=4)
    w, kv = drafter_memory(replica, SpeculativeConfig("draft_model", 4, "qwama-0.5b", acceptance_rates=(0.7,), draft_tp=1))
    assert 0.5e9 < w < 1.5e9 and kv > 0  # ~0.5B params in bf16 on the draft's one GPU


@pytest.mark.parametrize(("method", "width_first", "width_later"), [("mtp", 2, 2), ("eagle", 2, 2), ("eagle3", 3, 0)])
def test_an_mtp_or_eagle_pass_runs_its_input_projection(method: str, width_first: int, width_later: int) -> None:
    """An MTP module's eh_proj and an EAGLE head's fc fold the token's embedding and the target's hidden state into
    one (2 hidden -> hidden) every pass; EAGLE-3's fc folds three of the target's layers once a step (its later
    passes read the head's own hidden state). Whole on every GPU at 16 bits: the target's gemm16 of the full width."""
    target, cost = _costs(method)
    verify = SpecBatchShape()
    for _ in range(6):
        verify.add_verify(4, 999)
    kernels, h = cost.kernels, cost.model.hidden_size
    expected = 0.0
    for j in range(4):
        d = cost._pass_shape(verify, j)
        width = width_first if j == 0 else width_later
        proj = float(kernels.gemm16(np.array([6.0]), width * h, h)[0]) if width else 0.0
        expected += kernels.pre_time(d) + proj + kernels.layer_time(d) + kernels.post_time(d) + cost.pass_cpu_s
    assert cost.draft_time(verify) == pytest.approx(expected, rel=1e-12)
    assert float(kernels.gemm16(np.array([6.0]), 2 * h, h)[0]) > 0
    w, _ = drafter_memory(target.replica, cost.spec)
    assert w == pytest.approx(target.replica.layer_weights_bytes(1, 79) + width_first * h * h * 2, rel=1e-12)


def test_an_mla_draft_model_keeps_its_down_projections_whole_on_every_rank() -> None:
    """A draft model is laid out as a target is (its weights at 16 bits): an MLA draft's down-projections to its
    latents are whole on every TP rank (vLLM's fused_qkv_a_proj; the memory plan's ``layer_weights_bytes``), not an
    eighth of them each, as is its router gate."""
    from simulator.config.catalog import get_model
    from simulator.costmodel.speculative import draft_replica

    m = get_model("deepseek-v3")
    replica = ReplicaConfig("deepseek-v3", "h100-sxm", tp=8)
    spec = SpeculativeConfig("draft_model", 3, "deepseek-v3", acceptance_rates=(0.7,))
    assert draft_replica(replica, spec).tp == 8
    sharded = (m.num_layers * m.params_per_layer + 2 * m.embedding_params) / 8 * 2
    whole = (m.num_layers * m.replicated_attention_params + m.num_moe_layers * m.hidden_size * m.num_experts) \
        * (1 - 1 / 8) * 2
    assert m.replicated_attention_params > 0
    assert drafter_memory(replica, spec)[0] == pytest.approx(sharded + whole)


def test_an_unset_draft_tp_is_the_targets() -> None:
    """vLLM sets an unset draft_tensor_parallel_size to the target's TP (only mlp_speculator gets 1): a 3B draft
    beside a TP-4 70B target was priced on one GPU (its passes at TP 1, its weights whole on every GPU: TPOT
    12.19 ms and 168,224 KV tokens where TP 4 gives 10.39 ms and 342,656). A given 1 is kept, a draft whose heads
    the target's TP does not divide is one line, and the unset value round-trips as unset."""
    from simulator.costmodel.speculative import draft_replica

    replica = ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4)
    base = '{"method": "draft_model", "model": "llama-3.2-3b", "num_speculative_tokens": 3'
    unset, four, one = (from_vllm_json(base + extra + "}", (0.7,)) for extra in
                        ("", ', "draft_tensor_parallel_size": 4', ', "draft_tensor_parallel_size": 1'))
    assert unset.draft_tp is None and draft_replica(replica, unset).tp == 4 and draft_replica(replica, one).tp == 1
    assert drafter_memory(replica, unset) == drafter_memory(replica, four)
    assert drafter_memory(replica, unset)[0] < drafter_memory(replica, one)[0] / 3
    verify = SpecBatchShape()
    for _ in range(4):
        verify.add_verify(3, 600)
    target = load_cost_model("roofline", replica, "vllm-v1")
    times = [SpeculativeCostModel(target, s).draft_time(verify) for s in (unset, four, one)]
    assert times[0] == times[1] < times[2]
    assert "draft_tensor_parallel_size" not in to_vllm_json(unset)
    assert from_vllm_json(to_vllm_json(unset)).draft_tp is None and from_vllm_json(to_vllm_json(one)).draft_tp == 1
    assert SpeculativeConfig.from_dict(unset.to_dict()) == unset
    qwama = from_vllm_json('{"method": "draft_model", "model": "qwama-0.5b", "num_speculative_tokens": 3}', (0.7,))
    with pytest.raises(ConfigError, match="unset takes the target's tp=4, which does not divide qwama-0.5b's 14 heads"):
        draft_replica(replica, qwama)


@pytest.mark.parametrize(("method", "model"), [("eagle3", None), ("draft_model", "qwama-0.5b")])
def test_the_drafter_runs_on_the_last_pipeline_stage(method: str, model: str | None) -> None:
    """Under PP the drafter runs on the last stage (vLLM V1 builds its proposer on the last PP rank only), for its
    pass over a prompt as for its drafts: stage_time added the drafter only to steps that verify, so a 2000-token
    prompt's TTFT at --pp 2 was the plain run's (63.80 ms; at PP 1 EAGLE-3 adds 1.6 ms, a Qwama draft 4.3 ms).
    The drafter's weights and KV come off the last stage's memory alone."""
    from simulator.costmodel.speculative import speculative_memory_plan
    from simulator.engine.kvcache import plan_memory

    replica = ReplicaConfig("llama-3.1-8b", "h100-sxm", pp=2)
    target = load_cost_model("roofline", replica, "vllm-v1")
    spec = SpeculativeConfig(method, 3, model, acceptance_rates=(0.7,))
    cost = SpeculativeCostModel(target, spec)
    verify = SpecBatchShape()
    verify.add_verify(3, 999)
    for shape in (BatchShape.from_requests([(2000, 0)], []), verify):
        drafter = cost.draft_time(shape)  # (cost.target: the target with verifies through its decode kernel)
        assert drafter > 0 and cost.stage_time(shape, 0) == cost.target.stage_time(shape, 0)
        assert cost.stage_time(shape, 1) == pytest.approx(cost.target.stage_time(shape, 1) + drafter, rel=1e-12)
    plan = plan_memory(replica, 8192, 256)
    weights, kv = drafter_memory(replica, spec)
    held = speculative_memory_plan(plan, replica, spec)
    assert held.kv_budget_bytes == (plan.kv_budget_bytes[0], plan.kv_budget_bytes[1] - weights)
    assert held.kv_bytes_per_token == (plan.kv_bytes_per_token[0], plan.kv_bytes_per_token[1] + kv)


@pytest.mark.parametrize(("model", "gpu", "tp", "dtype"), [("deepseek-v3", "gb200", 4, "int4"),  # MLA
                                                          ("llama-3-70b", "h100", 4, "bf16")])  # GQA
def test_verify_attention_is_the_decode_kernel(model: str, gpu: str, tp: int, dtype: str) -> None:
    """A verify's attention is the engines' decode kernel with 1 + k queries: each sequence's KV
    read once, so it costs about a decode's attention over the same contexts (the math of the
    extra queries on top), not a prefill chunk's (for MLA the non-absorbed form: the whole
    context up-projected per verify, several times the decode). A prompt chunk in the same step
    keeps its own prefill attention."""
    replica = ReplicaConfig(model, gpu, tp=tp, dtype=dtype)
    target = load_cost_model("roofline", replica, "vllm-v1")
    cost = SpeculativeCostModel(target, SpeculativeConfig("eagle3", 3, acceptance_rates=(0.7,)))
    n, context = 16, 1500
    verify = SpecBatchShape()
    for _ in range(n):
        verify.add_verify(3, context)
    plain = BatchShape.decode_only(n, n * (context + 4), n * (context + 4) ** 2, context + 4)
    got = cost.breakdown(verify)
    attn = got["attn_decode"] + got["attn_prefill"]
    decode_attn = target.breakdown(plain)["attn_decode"]
    assert got["attn_prefill"] == 0.0
    assert decode_attn <= attn < 1.5 * decode_attn
    # the GEMMs see every query row
    assert verify.num_prefill_tokens + verify.num_decodes == n * 4 and verify.num_logits == n * 4
    mixed = SpecBatchShape.of(BatchShape.from_requests([(512, 0)]))
    for _ in range(n):
        mixed.add_verify(3, context)
    chunk = BatchShape.from_requests([(512, 0)])
    assert cost.breakdown(mixed)["attn_prefill"] == target.breakdown(chunk)["attn_prefill"]


def test_drafter_pass_cpu_follows_the_engine() -> None:
    """A draft model's pass costs its kernels, plus the engine's fixed per-step CPU where the
    engine runs it synchronously (once a pass), nothing where the engine hides its CPU (vllm-v1: vLLM's async
    scheduling takes a draft model's passes since vllm-project/vllm#48341)."""
    from simulator.costmodel.engine_model import ENGINES

    replica = ReplicaConfig("llama-3-70b", "h100", tp=4)
    spec = SpeculativeConfig("draft_model", 4, "qwama-0.5b", acceptance_rates=(0.7,), draft_tp=1)
    verify = SpecBatchShape()
    for _ in range(32):
        verify.add_verify(4, 999)
    times = {}
    engines = {"vllm-v1": "vllm-v1", "vllm-2023-splitwise": "vllm-2023-splitwise",
               "sync": ENGINES["vllm-v1"].with_terms(overlap_cpu=False)}
    for engine, model in engines.items():
        cost = SpeculativeCostModel(load_cost_model("roofline", replica, model), spec)
        d = cost.draft
        assert d is not None
        kernels = sum(d.pre_time(s) + d.model.num_layers * d.layer_time(s) + d.post_time(s) for s in
                      (BatchShape.decode_only(32, 32 * (1000 + j), 32 * (1000 + j) ** 2, 1000 + j) for j in range(4)))
        times[engine] = cost.draft_time(verify), kernels
    t, kernels = times["vllm-v1"]
    assert t == pytest.approx(kernels, rel=1e-12) and t < 6e-3  # ~1 ms a pass of a 0.5B model
    t, kernels = times["sync"]
    assert t == pytest.approx(kernels + 4 * 1.0e-3, rel=1e-9)
    t, kernels = times["vllm-2023-splitwise"]
    assert t == pytest.approx(kernels + 4 * ENGINES["vllm-2023-splitwise"].cpu_iteration_s, rel=1e-9)


def test_medusa_heads_are_one_pass() -> None:
    """Medusa's heads predict positions 1..k at once: one drafter pass a step (one pass's CPU),
    k residual blocks and LM heads; EAGLE's head runs k sequential passes."""
    assert from_vllm_json('{"method": "medusa", "num_speculative_tokens": 3}', (0.6,)).method == "medusa"
    replica = ReplicaConfig("llama-2-7b", "a100-80gb")
    verify = SpecBatchShape()
    verify.add_verify(6, 300)
    out = {}
    for method in ("medusa", "eagle"):
        cost = SpeculativeCostModel(load_cost_model("roofline", replica, "handset"),
                                    SpeculativeConfig(method, 6, acceptance_rates=(0.6,)))
        out[method] = cost.draft_time(verify), cost.pass_cpu_s
    (medusa, cpu), (eagle, _) = out["medusa"], out["eagle"]
    assert cpu == 1.5e-3
    assert cpu < medusa < 2 * cpu and eagle > 6 * cpu
    w, kv = drafter_memory(replica, SpeculativeConfig("medusa", 5, acceptance_rates=(0.6,)))
    assert kv == 0.0 and 5 * 4096 * 32000 * 2 < w < 5 * 4096 * 40000 * 2


def test_one_graph_drafter_pays_no_cpu_a_pass() -> None:
    """An engine that launches its MTP/EAGLE drafting loop as one graph inside the step (TensorRT-LLM's "one
    model" drafters: ``drafter_in_graph``) adds no CPU a pass; its draft model still pays the step's CPU a pass,
    and the same synchronous terms without the flag pay it for every method."""
    from simulator.costmodel.engine_model import ENGINES

    replica = ReplicaConfig("llama-3.1-8b", "h100-sxm")
    assert ENGINES["trtllm-2026"].drafter_in_graph and not ENGINES["trtllm-2026"].overlap_cpu
    # a known CPU a step (the preset's fitted one may be 0): the mechanism, not the fit, is under test
    trt = ENGINES["trtllm-2026"].with_terms(cpu_iteration_s=1e-3)
    plain = trt.with_terms(drafter_in_graph=False)
    verify = SpecBatchShape()
    for _ in range(4):  # four requests verifying three drafts each
        verify.add_verify(3, 500)
    got = {}
    for name, engine in (("trt", trt), ("plain", plain)):
        for method in ("mtp", "eagle3", "draft_model"):
            spec = SpeculativeConfig(method, 3, acceptance_rates=(0.7,),
                                     **({"draft_model": "qwama-0.5b"} if method == "draft_model" else {}))
            cost = SpeculativeCostModel(load_cost_model("roofline", replica, engine), spec)
            got[name, method] = cost.pass_cpu_s, cost.draft_time(verify)
    assert got["trt", "mtp"][0] == got["trt", "eagle3"][0] == 0.0
    assert got["trt", "draft_model"][0] == got["plain", "mtp"][0] == trt.cpu_iteration_s
    # three passes, each the step's CPU more without the flag
    assert got["plain", "mtp"][1] - got["trt", "mtp"][1] == pytest.approx(3 * trt.cpu_iteration_s, rel=1e-9)


# -- acceptance data -----------------------------------------------------------------------------------------------
def test_rates_from_al_curve_reproduce_the_curve(shared_data) -> None:  # noqa: ANN001
    from simulator.calibrate.speculative_data import find_curve, golden_curves, iid_rate

    path = shared_data / "validation" / "speculative"
    curves = golden_curves(path)
    assert len(curves) >= 10
    exact = 0
    for curve in curves:
        al = dict(curve.al_by_k)
        rates = curve.rates(max(al))
        assert all(0.0 <= r <= 1.0 for r in rates)
        fitted = {k: al_of_rates(rates[:k]) for k in al}
        # A curve whose increments never grow is reproduced exactly; others within their noise.
        steps = [al[k] - al.get(k - 1, 1.0) for k in sorted(al)]
        if all(a >= b >= 0 for a, b in zip(steps, steps[1:], strict=False)):
            exact += 1
            assert all(fitted[k] == pytest.approx(al[k], abs=1e-9) for k in al)
        assert max(abs(fitted[k] - al[k]) for k in al) < 0.35
    assert exact >= 1
    qwen = find_curve("qwen3.5:mtp", path)
    assert qwen.thinking_mode == "thinking_on"
    r = qwen.rates(8)
    assert r[0] > r[-1]  # acceptance falls with position
    assert iid_rate(al_iid(0.73, 5), 5) == pytest.approx(0.73, abs=1e-9)
    with pytest.raises(ConfigError):
        find_curve("nope:mtp", path)


# -- through simulate(), the options and the CLI --------------------------------------------------------------------
def _tables(result):  # noqa: ANN001, ANN202 - every request column and iteration column, as lists
    from simulator.report.metrics import request_columns

    reqs = {k: np.asarray(v).tolist() for k, v in request_columns(result).items()}
    its = {k: v.tolist() for k, v in next(result.iteration_chunks(1 << 30)).items()}
    return reqs, its


SPEC_JSON = '{"method": "ngram", "num_speculative_tokens": 3}'


def _config(**changes):  # noqa: ANN003, ANN202
    from simulator.config.run_config import RunConfig, WorkloadConfig

    return RunConfig(workload=WorkloadConfig(num_requests=80, qps=3.0), seed=5).replace(**changes)


def test_speculation_off_is_the_plain_run() -> None:
    """speculative=None (the default, or --speculative-config off over a config that speculates)
    is the plain run: the step-by-step loop and event skipping/lockstep agree bit for bit on
    every request and iteration column, and nothing about speculation is reported."""
    from simulator.simulation import simulate

    plain = _config()
    assert plain.speculative is None and plain.to_dict()["speculative"] is None
    spec = plain.replace(speculative__vllm_json=SPEC_JSON, speculative__acceptance_rate=0.7)
    assert spec.speculative is not None
    # Speculation turns the scheduler's default prefix caching off in the config (it is not modelled
    # with speculation); turning speculation off again keeps it off, so on/off points compare alike.
    assert spec.replace(speculative__vllm_json="off") == plain.replace(scheduler__prefix_caching=False)
    assert spec.replace(speculative__vllm_json="off", scheduler__prefix_caching=None) == plain
    fast = simulate(plain)
    slow = simulate(plain.replace(fast_forward=False))
    assert _tables(fast) == _tables(slow)
    assert "speculative" not in fast.extra


def test_simulate_speculates_reproducibly() -> None:
    from simulator.config.run_config import RunConfig
    from simulator.simulation import simulate

    config = _config(speculative__vllm_json=SPEC_JSON, speculative__acceptance_rate=0.7)
    result = simulate(config)
    assert all(r.completed_at is not None for r in result.requests)
    sp = result.extra["speculative"]
    assert sp["num_verify_steps"] > 1000
    assert sp["num_drafted"] >= sp["num_accepted"] > 0
    assert sp["expected_acceptance_length"] == pytest.approx(al_iid(0.7, 3))
    # per-token view: one gap per token after each request's first; per-step view: the zeros out
    num_tokens = sum(r.num_output_tokens - 1 for r in result.requests)
    assert sp["num_itl_per_token_gaps"] == num_tokens
    assert sp["num_itl_per_step_gaps"] < num_tokens and sp["itl_per_step_s_p50"] > sp["itl_per_token_s_p50"]
    # fast_forward does not matter (the plain loop either way); the config's JSON round trip reproduces the run
    assert _tables(simulate(config.replace(fast_forward=False))) == _tables(result)
    again = RunConfig.from_dict(__import__("json").loads(__import__("json").dumps(config.to_dict())))
    assert again == config
    assert _tables(simulate(again)) == _tables(result)
    # a state-free router over two replicas (partitioned when plain): each replica its own stream, all finish
    two = simulate(config.replace(num_replicas=2))
    assert all(r.completed_at is not None for r in two.requests)
    assert two.extra["speculative"]["num_verify_steps"] > 0
    # speculation shortens the decode: fewer iterations and a lower TPOT than the plain run
    plain = simulate(_config())
    assert len(result.iterations) < len(plain.iterations)


def test_workers_refused_for_a_speculating_run_say_why() -> None:
    """--replicas 2 --workers 2 with speculation (or disaggregated pools) was refused with a list of conditions all
    met (two replicas, round robin, PP 1, ...): the message names the one the run misses."""
    from simulator.simulation import simulate

    config = _config(num_replicas=2, speculative__vllm_json=SPEC_JSON, speculative__acceptance_rate=0.7)
    with pytest.raises(ConfigError, match="--workers: this run's replicas cannot run in parallel: a speculating run"):
        simulate(config, workers=2)
    with pytest.raises(ConfigError, match="cannot run in parallel: a disaggregated run's pools"):
        simulate(_config(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)"), workers=2)


def test_disaggregated_decode_pool_speculates() -> None:
    from simulator.simulation import simulate

    config = _config(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)", speculative__vllm_json=SPEC_JSON,
                     speculative__acceptance_rate=0.6)
    result = simulate(config)
    assert all(r.completed_at is not None for r in result.requests)
    assert result.extra["speculative"]["num_verify_steps"] > 0
    assert result.disagg.final_free_blocks == [n for n in result.disagg.num_blocks]  # every block back


def test_a_disaggregated_prefill_pool_runs_the_drafter_over_prompts() -> None:
    """The drafter needs the prompt's KV (a draft model's own, an EAGLE/MTP layer's): a prefill replica runs its
    pass over each prompt and holds its weights and KV, and its KV goes over the link with the target's (SGLang's
    PD serving). Prefill replicas had the plain cost model and no drafter memory, and decode replicas never run a
    prompt, so the pass was priced nowhere: a 2000-token prompt's TTFT with --first-token-at prefill was 63.751 ms
    with or without a Qwama-0.5B draft (now 68.059 ms, the aggregated run's)."""
    from simulator.config.run_config import ReplicaConfig as Replica
    from simulator.simulation import simulate

    base = _config(replica=Replica("llama-3.1-8b", "h100-sxm"), prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)",
                   first_token_at="prefill", workload__name="fixed", workload__num_requests=1,
                   workload__prompt_tokens=2000, workload__output_tokens=4)
    draft = '{"method": "draft_model", "model": "qwama-0.5b", "num_speculative_tokens": 3}'
    runs = {name: simulate(base.replace(**changes)) for name, changes in (
        ("plain", {}), ("draft", {"speculative__vllm_json": draft, "speculative__acceptance_rate": 0.7}),
        ("aggregated", {"prefill_pool": None, "decode_pool": None, "speculative__vllm_json": draft,
                        "speculative__acceptance_rate": 0.7}))}
    ttft = {name: r.requests[0].first_token_at - r.requests[0].arrival_at for name, r in runs.items()}
    assert ttft["draft"] > ttft["plain"] + 3e-3 and ttft["draft"] == pytest.approx(ttft["aggregated"], rel=1e-9)
    plain, draft_run = runs["plain"].disagg, runs["draft"].disagg
    assert draft_run.num_blocks[0] < plain.num_blocks[0]  # the prefill replica holds the drafter
    assert draft_run.kv_bytes_per_token > plain.kv_bytes_per_token  # its KV travels with the target's


def test_speculative_options_combine() -> None:
    from simulator.config.options import config_overrides
    from simulator.config.run_config import RunConfig
    from simulator.planning.sweep import _point_config

    base = RunConfig()
    with pytest.raises(ConfigError, match="--num-speculative-tokens"):
        base.replace(speculative__num_speculative_tokens=4)
    c = base.replace(speculative__vllm_json=SPEC_JSON, speculative__acceptance_rate=0.6)
    assert c.speculative.acceptance_rates == (0.6,) * 3
    d = c.replace(speculative__num_speculative_tokens=5, speculative__disable_by_batch_size=16)
    assert (d.speculative.k, d.speculative.acceptance_rates, d.speculative.disable_by_batch_size) == (5, (0.6,) * 5, 16)
    e = c.replace(speculative__acceptance_rates="0.9,0.5,0.2", speculative__reduce_k_batch_size=8)
    assert e.speculative.acceptance_rates == (0.9, 0.5, 0.2)
    with pytest.raises(ConfigError, match="--acceptance-rates"):
        c.replace(speculative__acceptance_rate=0.5, speculative__acceptance_rates="0.5,0.4,0.3")
    with pytest.raises(ConfigError, match="--spec-disable-batch-size"):
        c.replace(speculative__vllm_json="off", speculative__disable_by_batch_size=4)
    # a sweep/capacity base carries the whole speculative config through one option
    for config in (c, d, e):
        overrides = config_overrides(config)
        assert _point_config(overrides, "base") == config
    assert config_overrides(base, c) == {"speculative_config": "off", "prefix_caching": None}  # back to the default


def test_acceptance_data_option(shared_data) -> None:  # noqa: ANN001
    c = _config(speculative__vllm_json='{"method": "eagle3", "num_speculative_tokens": 3}',
                speculative__acceptance_data="kimi-k2.5:eagle3")
    assert len(c.speculative.acceptance_rates) == 3 and "InferenceX" in c.speculative.acceptance_source
    assert c.speculative.acceptance_rates[0] > c.speculative.acceptance_rates[-1]


def test_cli_run_with_speculative_config(tmp_path) -> None:  # noqa: ANN001
    import json
    import subprocess
    import sys

    from typer.testing import CliRunner

    from simulator.cli import app

    runner = CliRunner()
    args = ["run", "--num-requests", "30", "--qps", "3", "--seed", "2", "--no-progress", "--format", "csv",
            "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 2}', "--acceptance-rates", "0.8,0.5"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "speculative eagle3 k=2" in res.output and "mean acceptance length" in res.output
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["speculative"]["num_verify_steps"] > 0
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["speculative"]["acceptance_rates"] == [0.8, 0.5]
    # config.json reproduces the run bit for bit
    res = runner.invoke(app, ["run", "--config", str(tmp_path / "a" / "config.json"), "--no-progress", "--format", "csv",
                              "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    for name in ("requests.csv", "iterations.csv", "summary.json"):
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        assert a == b or name == "summary.json" and _same_but_wall(a, b), name
    # bad input: one line, exit 2
    for bad in (["--speculative-config", "{"], ["--acceptance-rate", "0.5"],
                ["--speculative-config", SPEC_JSON], ["--speculative-config", SPEC_JSON, "--acceptance-rates", "0.5,x"],
                ["--speculative-config", '{"method": "draft_model", "num_speculative_tokens": 2}', "--acceptance-rate", "0.5"]):
        proc = subprocess.run([sys.executable, "-m", "simulator", "run", "--num-requests", "5", "--no-progress", *bad],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, (bad, proc.stdout, proc.stderr)
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and not proc.stdout, proc.stderr


def _same_but_wall(a: bytes, b: bytes) -> bool:
    import json

    x, y = json.loads(a), json.loads(b)
    for d in (x, y):
        for key in [k for k in d if "wall" in k]:
            d.pop(key)
    return x == y


def test_llama3_70b_speeds_up_at_low_load_and_slows_at_high() -> None:
    """The vLLM 2024 case through simulate(): Llama-3-70B on 4xH100 with a Qwama-0.5B draft
    (k=4, Spec-Bench SpS AL 2.01 as one i.i.d. rate), engine preset vllm-v1: mean TPOT faster
    at QPS 1, output throughput lower at QPS 10 (results/speculative has the sweep)."""
    from simulator.config.acceptance import iid_rate
    from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
    from simulator.simulation import simulate

    spec = SpeculativeConfig("draft_model", 4, "qwama-0.5b", (iid_rate(2.01, 4),), draft_tp=1)  # the blog's draft TP

    def figures(qps: float, speculative: SpeculativeConfig | None) -> tuple[float, float]:
        config = RunConfig(ReplicaConfig("llama-3-70b", "h100", tp=4), SchedulerConfig("vllm", max_num_seqs=256),
                           WorkloadConfig(num_requests=300, qps=qps), engine="vllm-v1", speculative=speculative)
        done = simulate(config, record_iterations=False).requests
        tpot = np.mean([(r.completed_at - r.first_token_at) / (r.num_output_tokens - 1) for r in done
                        if r.num_output_tokens > 1])
        makespan = max(r.completed_at for r in done) - min(r.arrival_at for r in done)
        return float(tpot), sum(r.num_output_tokens for r in done) / makespan

    (tpot0, _), (tpot1, _) = figures(1.0, None), figures(1.0, spec)
    # vllm-v1 runs a draft model synchronously (async scheduling takes EAGLE/MTP only): each of the k passes pays
    # the step's CPU, so 1.18x here (1.3x and more while the preset hid it)
    assert tpot0 / tpot1 > 1.1
    (_, thr0), (_, thr1) = figures(10.0, None), figures(10.0, spec)
    assert thr1 / thr0 < 0.97


def test_speculation_says_prefix_caching_is_off() -> None:
    """A speculating replica has no prefix cache: vllm-v1's default caching is off in the config
    (so the header and config.json say what ran), and asking for both is one line."""
    from simulator.config.run_config import RunConfig

    spec = SpeculativeConfig(method="ngram", num_speculative_tokens=3, acceptance_rates=(0.6,))
    assert RunConfig(scheduler=SchedulerConfig("vllm-v1")).scheduler.prefix_cache is not None
    config = RunConfig(scheduler=SchedulerConfig("vllm-v1"), speculative=spec)
    assert config.scheduler.prefix_cache is None and config.scheduler.prefix_caching is False
    with pytest.raises(ConfigError, match="scheduler.prefix_caching"):
        RunConfig(scheduler=SchedulerConfig("vllm-v1", prefix_caching=True), speculative=spec)


def test_mtp_needs_a_model_that_ships_mtp_modules() -> None:
    """vLLM's mtp method drafts with the checkpoint's own MTP module: a model without one is refused, one with
    it (DeepSeek-V3's num_nextn_predict_layers, read from its HF config too) is taken."""
    from simulator.config.catalog import get_model
    from simulator.config.errors import ConfigError
    from simulator.config.hf_config import model_from_hf_dict
    from simulator.config.run_config import ReplicaConfig

    mtp = '{"method": "mtp", "num_speculative_tokens": 2}'
    with pytest.raises(ConfigError, match="ships none"):
        _config(speculative__vllm_json=mtp, speculative__acceptance_rate=0.7)
    c = _config(replica=ReplicaConfig(model="deepseek-v3", gpu="b200", tp=8, dtype="fp8"),
                speculative__vllm_json=mtp, speculative__acceptance_rate=0.7)
    assert c.speculative.method == "mtp"
    assert get_model("deepseek-v3").num_mtp_layers == 1 and get_model("llama-3.1-8b").num_mtp_layers == 0
    cfg = {"model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 4, "intermediate_size": 512, "vocab_size": 1000, "num_nextn_predict_layers": 1}
    assert model_from_hf_dict(cfg, "tiny").num_mtp_layers == 1
    assert model_from_hf_dict({**cfg, "num_nextn_predict_layers": 0}, "tiny").num_mtp_layers == 0


def test_a_draft_with_another_vocabulary_is_refused() -> None:
    """vLLM refuses a draft model whose vocabulary is not the target's (verify_equal_vocab_size_if_draft_model: its
    drafts are token ids the target verifies); Vicuna-68M's 32,000 tokens beside Llama-3.1-70B's 128,256 ran."""
    from simulator.config.run_config import RunConfig

    spec = SpeculativeConfig("draft_model", 3, "vicuna-68m", (0.7,))
    with pytest.raises(ConfigError, match="vicuna-68m's vocabulary of 32,000 tokens is not llama-3.1-70b's 128,256"
                       ) as err:
        RunConfig(replica=ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4), speculative=spec)
    assert "\n" not in str(err.value) and "qwama-0.5b" in str(err.value)
    assert RunConfig(replica=ReplicaConfig("llama-2-7b", "h100-sxm"), speculative=spec).speculative == spec


# -- token trees ---------------------------------------------------------------------------------------------------
TREE = "[(0,), (1,), (2,), (0, 0), (1, 0), (0, 0, 0)]"  # 6 nodes, 3 deep: 3 candidates at position 1


def test_token_tree_config() -> None:
    """vLLM's speculative_token_tree: nodes are the draft tokens (vLLM's num_speculative_tokens), the depth is k;
    it round-trips through the JSON and the config dict, and malformed trees are refused in one line."""
    c = from_vllm_json(f'{{"method": "eagle", "speculative_token_tree": "{TREE}", "acceptance_rate": 0.7}}')
    assert (c.k, c.num_verify_tokens, c.tree_widths) == (3, 6, (1, 3, 2))
    assert c.verify_pairs == 1 + 3 * 2 + 2 * 3 + 4  # root, then each node's ancestors-or-self and the root
    assert c.mean_acceptance_length == pytest.approx(al_iid(0.7, 3))  # the accepted path's rates
    assert from_vllm_json(to_vllm_json(c)) == c and SpeculativeConfig.from_dict(c.to_dict()) == c
    chain = SpeculativeConfig("eagle", 3, acceptance_rates=(0.7,))
    assert (chain.num_verify_tokens, chain.tree_widths, chain.verify_pairs) == (3, (1, 1, 1), 10)  # c (c + 1) / 2
    # A chain written as a tree is the chain's shape.
    as_tree = from_vllm_json('{"method": "eagle", "speculative_token_tree": "[(0,), (0, 0), (0, 0, 0)]"}', (0.7,))
    assert (as_tree.num_verify_tokens, as_tree.tree_widths, as_tree.verify_pairs) == (3, (1, 1, 1), 10)
    for bad in (f'{{"method": "eagle", "num_speculative_tokens": 3, "speculative_token_tree": "{TREE}"}}',  # 6 nodes
                '{"method": "eagle", "speculative_token_tree": "[(0,), (1, 0)]"}',  # (1, 0) has no parent
                '{"method": "eagle", "speculative_token_tree": "[(0,), (0,)]"}',
                '{"method": "eagle", "speculative_token_tree": "[(0,), (-1,)]"}',
                '{"method": "eagle", "speculative_token_tree": "[(0,"}',
                '{"method": "eagle", "speculative_token_tree": "[]"}'):
        with pytest.raises(ConfigError) as err:
            from_vllm_json(bad, (0.7,))
        assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="deep"):
        SpeculativeConfig("eagle", 2, acceptance_rates=(0.7,), token_tree=((0,), (0, 0), (0, 0, 0)))


def test_token_tree_in_the_loop() -> None:
    """A tree verifies all its nodes (budget, KV slots) and emits along one path: the mean emitted per step is
    the path's AL, the drafted count is the nodes, KV balances, and the verify step costs more than the chain's."""
    tree = from_vllm_json(f'{{"method": "ngram", "speculative_token_tree": "{TREE}"}}', (0.6,))
    chain = SpeculativeConfig("ngram", 3, acceptance_rates=(0.6,))
    runs = {}
    for name, spec in (("tree", tree), ("chain", chain)):
        requests, recorder, sched = run(spec, [(0.0, 64, 1500)] * 8)
        s = sched.speculation.stats
        assert all(r.num_generated == r.num_output_tokens for r in requests)
        assert sched.blocks.num_free_blocks == sched.blocks.num_blocks
        n = s.num_verify_steps
        assert abs(s.mean_acceptance_length - al_iid(0.6, 3)) < 0.05
        assert all(row[3] == 0 for row in recorder.iterations if not row[5])  # drafts are no prompt tokens
        runs[name] = (s.num_drafted / n, max(row[4] + row[9] for row in recorder.iterations if not row[5]))
    # Full steps verify 6 (tree) or 3 (chain) drafts; the request's last tokens cut to a chain.
    assert runs["tree"][0] == pytest.approx(6, abs=0.1) and runs["chain"][0] == pytest.approx(3, abs=0.05)
    assert runs["tree"][1] == 8 * 7 and runs["chain"][1] == 8 * 4  # 8 requests x (1 + drafts): the busiest prompt-free step
    target, _ = _costs("eagle")
    chain_cost = SpeculativeCostModel(target, SpeculativeConfig("eagle", 3, acceptance_rates=(0.7,)))
    tree_cost = SpeculativeCostModel(target, from_vllm_json(f'{{"method": "eagle", "speculative_token_tree": "{TREE}"}}',
                                                            (0.7,)))
    for n in (1, 64):
        a, b = SpecBatchShape(), SpecBatchShape()
        for _ in range(n):
            a.add_verify(3, 999)
            b.add_verify(3, 999, 6, tree_cost.spec.verify_pairs)
        assert (a.num_prefill_tokens, b.num_prefill_tokens) == (3 * n, 6 * n)
        assert tree_cost.iteration_time(b) > chain_cost.iteration_time(a)
        assert tree_cost.draft_time(b) > chain_cost.draft_time(a)  # the tree's wider levels are drafted too
    # A chain shape under the tree's config costs what the chain config says (same float).
    a = SpecBatchShape()
    a.add_verify(2, 500)
    assert tree_cost.iteration_time(a) == chain_cost.iteration_time(a)


def test_cli_run_with_a_token_tree(tmp_path) -> None:  # noqa: ANN001
    """A tree through the CLI: the header names it, config.json keeps it, and the saved config reruns bit for bit."""
    import json

    from typer.testing import CliRunner

    from simulator.cli import app

    runner = CliRunner()
    spec = json.dumps({"method": "eagle", "speculative_token_tree": TREE})
    args = ["run", "--num-requests", "20", "--qps", "3", "--seed", "2", "--no-progress", "--format", "csv",
            "--speculative-config", spec, "--acceptance-rate", "0.7"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    assert "speculative eagle k=3 (a token tree of 6 nodes)" in res.output
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert len(saved["speculative"]["token_tree"]) == 6
    res = runner.invoke(app, ["run", "--config", str(tmp_path / "a" / "config.json"), "--no-progress", "--format", "csv",
                              "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    for name in ("requests.csv", "iterations.csv"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


NGRAM4 = '{"method":"ngram","num_speculative_tokens":4}'


@pytest.mark.parametrize("scheduler", ["orca", "fastertransformer", "trtllm"])
def test_a_verify_keeps_what_the_policy_reserved(scheduler: str) -> None:
    """A verify gave back every block above its computed tokens, the up-front reservations of orca and
    fastertransformer (max_model_len) and trtllm (prompt and output, never evicting) included: the KV held fell
    from 384 to 39 blocks after the first decode step, and orca then ran 18 requests and preempted."""
    from simulator.config.run_config import RunConfig, WorkloadConfig
    from simulator.simulation import simulate

    workload = WorkloadConfig(name="fixed", num_requests=20, arrival="burst", prompt_tokens=200, output_tokens=200)
    base = RunConfig(workload=workload, seed=2, scheduler=SchedulerConfig(scheduler),
                     replica=ReplicaConfig(num_gpu_blocks=400, max_model_len=2048))
    runs = [next(simulate(c).iteration_chunks(1 << 30)) for c in
            (base, base.replace(speculative__vllm_json=NGRAM4, speculative__acceptance_rate=0.7))]
    plain, spec = ({k: int(its[k].max()) for k in ("batch_size", "kv_blocks_used")} for its in runs)
    assert spec == plain and int(runs[1]["num_preempted"].sum()) == 0


def test_a_chain_that_fits_is_not_refused_for_its_drafts() -> None:
    """A chain's k is cut to the output left, so it never holds more than prompt + output: two 508 + 500-token
    requests in a 1,008-token cache were refused under n-gram k=4 ('needs 1011 KV tokens')."""
    from simulator.config.run_config import RunConfig, WorkloadConfig
    from simulator.simulation import simulate

    workload = WorkloadConfig(name="fixed", prompt_tokens=508, output_tokens=500, num_requests=2, qps=1.0)
    config = RunConfig(replica=ReplicaConfig(num_gpu_blocks=63, max_model_len=1008), workload=workload, seed=1,
                       scheduler=SchedulerConfig("sarathi", watermark=0.0))
    result = simulate(config.replace(speculative__vllm_json=NGRAM4, speculative__acceptance_rate=0.7))
    assert [r.status.name for r in result.requests] == ["FINISHED", "FINISHED"]
    assert all(r.num_generated == 500 for r in result.requests)


def test_an_mtp_layer_is_sharded_as_the_targets_layers_are() -> None:
    """An MoE MTP layer's experts are spread over the MoE group's tp x attention-DP GPUs, as the target's layers'
    are: DeepSeek-V3 FP8 on H200 at --tp 1 --attention-dp 8 --ep 8 held 10.22 GiB of MTP weights a GPU (its
    experts divided by tp alone) where --tp 8 --ep 8 holds 1.28 GiB, and the KV cache fell from 458,448 tokens to
    297,472 for one MTP layer. It is the target's last layer as the plan holds it (an MoE layer, not the mean of 3
    dense and 58 MoE ones), and its eh_proj (2 hidden -> hidden), an nn.Linear in vLLM: whole, 16-bit."""
    from simulator.engine.kvcache import plan_memory

    spec = SpeculativeConfig("mtp", 1, None, (0.7,))
    dep = ReplicaConfig("deepseek-v3", "h200", dtype="fp8", tp=1, attention_dp=8, ep=8)
    tep = ReplicaConfig("deepseek-v3", "h200", dtype="fp8", tp=8, ep=8)
    w_dep, w_tep = drafter_memory(dep, spec)[0], drafter_memory(tep, spec)[0]
    assert w_tep < w_dep < 1.25 * w_tep
    m = dep.model_spec
    eh_proj = 2 * m.hidden_size * m.hidden_size * 2
    for r, w in ((dep, w_dep), (tep, w_tep)):
        assert w == pytest.approx(r.layer_weights_bytes(1, m.num_layers - 1) + eh_proj, rel=1e-12)
    # one of the 58 MoE layers (3 to 60) as a pipeline stage holding them would
    assert w_tep - eh_proj == pytest.approx(tep.layer_weights_bytes(58, 3) / 58, rel=1e-12)
    mean = (plan_memory(tep, 8192, 256).weights_bytes[0] - 2 * m.vocab_size * m.hidden_size / 8 * 2) / m.num_layers
    assert mean < w_tep - eh_proj < 1.1 * mean


def test_medusa_heads_hold_their_lm_heads_at_16_bits_as_they_are_priced() -> None:
    """A Medusa head's LM head is priced by the 16-bit GEMM, as the target's; its memory was at the checkpoint's
    weight bytes (a quarter of it under NVFP4)."""
    from simulator.config.speculative import from_vllm_json
    from simulator.costmodel.speculative import drafter_memory

    spec = from_vllm_json('{"method": "medusa", "num_speculative_tokens": 3}', (0.6,))
    fp4, bf16 = ReplicaConfig("llama-3.1-8b", "b200", dtype="nvfp4"), ReplicaConfig("llama-3.1-8b", "b200")
    m = fp4.model_spec
    lm_heads = 3 * m.hidden_size * m.vocab_size * 2
    assert drafter_memory(fp4, spec)[0] == pytest.approx(lm_heads + 3 * m.hidden_size**2 * fp4.weight_bytes)
    assert drafter_memory(bf16, spec)[0] == pytest.approx(lm_heads + 3 * m.hidden_size**2 * 2)


@pytest.mark.parametrize(("method", "model", "overlapped"), [("eagle3", None, True), ("mtp", None, True),
                                                            ("ngram", None, False), ("draft_model", "qwama-0.5b", True),
                                                            ("medusa", None, False)])
def test_vllm_v1_overlaps_eagle_mtp_and_draft_model_drafters(method, model, overlapped) -> None:  # noqa: ANN001
    """vLLM's async scheduling takes EAGLE, MTP and draft-model proposers (the last by default since
    vllm-project/vllm#48341): with CPU n-gram lookup or Medusa its steps are synchronous, the CPU added."""
    replica = ReplicaConfig("llama-3-70b", "h100", tp=4)
    target = load_cost_model("roofline", replica, "vllm-v1")
    spec = SpeculativeConfig(method, 4, model, acceptance_rates=(0.7,), draft_tp=1 if model else None)
    cost = SpeculativeCostModel(target, spec)
    decodes = BatchShape.from_requests([], [1000, 2000])
    assert (cost.iteration_time(decodes) == target.iteration_time(decodes)) is overlapped
    if not overlapped:
        assert cost.iteration_time(decodes) > target.iteration_time(decodes)
        assert cost.pass_cpu_s == target.engine.cpu_iteration_s > 0


def test_an_eagle_pass_pays_its_cpu_where_pipeline_parallelism_stops_the_overlap() -> None:
    # An engine that runs PP steps synchronously (vLLM before #32359; vllm-v1 without overlap_pipeline): the
    # target's CPU adds there, and so does each drafter pass's (it read the preset's overlap, not the one the target
    # runs with). vllm-v1 itself overlaps under PP.
    from simulator.costmodel.engine_model import ENGINES

    spec = SpeculativeConfig("eagle3", 3, acceptance_rates=(0.7,))
    engine = ENGINES["vllm-v1"].with_terms(overlap_pipeline=False)
    for pp, cpu in ((1, 0.0), (2, 1.0e-3)):
        target = load_cost_model("roofline", ReplicaConfig("llama-3.1-8b", "h100-sxm", pp=pp), engine)
        assert SpeculativeCostModel(target, spec).pass_cpu_s == cpu
        overlapped = load_cost_model("roofline", ReplicaConfig("llama-3.1-8b", "h100-sxm", pp=pp), "vllm-v1")
        assert SpeculativeCostModel(overlapped, spec).pass_cpu_s == 0.0


# -- parallel drafting and known heads (P-EAGLE) ----------------------------------------------------------------------
GPT_OSS = ReplicaConfig("gpt-oss-20b", "b200", dtype="mxfp4", kv_cache_dtype="fp8")
P_EAGLE = "amazon/GPT-OSS-20B-P-EAGLE"


def test_parallel_drafting_from_vllms_json_and_back() -> None:
    """vLLM's ``parallel_drafting`` key is read, kept through both round trips, and refused where no drafter
    proposes its drafts in one pass (n-gram, MTP, Medusa) or with a token tree (a parallel drafter proposes a chain)."""
    spec = from_vllm_json(f'{{"method": "eagle3", "model": "{P_EAGLE}", "num_speculative_tokens": 7, '
                          '"parallel_drafting": true}', (0.7,), "a rate")
    assert spec.parallel_drafting and spec.draft_model == P_EAGLE
    assert from_vllm_json(to_vllm_json(spec)) == spec
    assert SpeculativeConfig.from_dict(spec.to_dict()) == spec
    assert not from_vllm_json('{"method": "eagle3", "num_speculative_tokens": 3}', (0.7,)).parallel_drafting
    with pytest.raises(ConfigError, match="parallel_drafting.*true or false"):
        from_vllm_json('{"method": "eagle3", "num_speculative_tokens": 3, "parallel_drafting": "yes"}', (0.7,))
    for method in ("ngram", "mtp", "medusa"):
        with pytest.raises(ConfigError, match=f"{method} has no drafter that proposes its drafts in one pass"):
            SpeculativeConfig(method, 3, acceptance_rates=(0.7,), parallel_drafting=True)
    with pytest.raises(ConfigError, match="a chain of k drafts, not a token tree"):
        SpeculativeConfig("eagle", 2, "some/head", acceptance_rates=(0.7,), token_tree=((0,), (1,), (0, 0)),
                          parallel_drafting=True)


def test_a_known_head_for_another_model_or_method_is_refused() -> None:
    """A known head reads its own target's hidden states: P-EAGLE's gpt-oss-20b head beside Llama-3.1-8B or beside
    gpt-oss-120b (the same hidden size) is refused, one line naming both; beside gpt-oss-20b it runs. Named as a
    draft model it is refused as a head; parallel drafting without a named drafter is refused."""
    from simulator.config.run_config import RunConfig

    spec = SpeculativeConfig("eagle3", 7, P_EAGLE, acceptance_rates=(0.7,), parallel_drafting=True)
    for model in ("llama-3.1-8b", "gpt-oss-120b"):
        with pytest.raises(ConfigError, match=f"gpt-oss-20b's head, not {model}'s"):
            RunConfig(replica=ReplicaConfig(model, "h100"), speculative=spec)
    RunConfig(replica=GPT_OSS, speculative=spec)
    with pytest.raises(ConfigError, match='is an EAGLE head, not a draft model.*"method": "eagle3"'):
        RunConfig(replica=GPT_OSS, speculative=SpeculativeConfig("draft_model", 3, P_EAGLE, acceptance_rates=(0.7,)))
    with pytest.raises(ConfigError, match="parallel_drafting needs the drafter trained for it"):
        SpeculativeConfig("eagle3", 7, acceptance_rates=(0.7,), parallel_drafting=True)


def _peagle_costs(k: int, parallel: bool, head: str | None = P_EAGLE, n: int = 1):  # noqa: ANN202
    cost = SpeculativeCostModel(load_cost_model("roofline", GPT_OSS, "vllm-2026"),
                                SpeculativeConfig("eagle3", k, head, acceptance_rates=(0.7,), parallel_drafting=parallel))
    verify = SpecBatchShape()
    for _ in range(n):
        verify.add_verify(k, 999)
    return cost, verify


def test_parallel_drafting_is_one_pass_of_k_rows() -> None:
    """A parallel drafter runs one pass a step over k rows a request: at k = 1 that is the sequential drafter's one
    pass, to the float; at k = 7 on a batch of one it costs less than 7 sequential passes of the same head and more
    than the first of them (its 4 layers x 7 rows, its LM head over 7 positions)."""
    for n in (1, 16):
        seq, shape = _peagle_costs(1, False, n=n)
        par, _ = _peagle_costs(1, True, n=n)
        assert par.draft_time(shape) == seq.draft_time(shape)
    seq, shape = _peagle_costs(7, False)
    par, _ = _peagle_costs(7, True)
    first_pass = seq._draft_pass(seq._pass_shape(shape, 0))
    assert first_pass < par.draft_time(shape) < seq.draft_time(shape) / 2


def test_a_known_head_is_priced_and_held_as_its_own_layers() -> None:
    """A known EAGLE head is priced as its own small model (P-EAGLE: 4 llama layers, a 32,000-row LM head), not as
    one layer of its MoE target and the target's 201,088-row LM head; its memory is its layers and LM head (the
    embedding is the target's) and 4 layers' KV."""
    head, shape = _peagle_costs(3, False)
    unknown, _ = _peagle_costs(3, False, head=None)
    assert head.draft is not None and head.draft.model.num_layers == 4 and unknown.draft is None
    # 4 dense layers at one row a request read less than a 32-expert layer (4 experts a token) with a 6x wider LM head
    assert 0 < head.draft_time(shape) < unknown.draft_time(shape)
    spec = SpeculativeConfig("eagle3", 3, P_EAGLE, acceptance_rates=(0.7,))
    w, kv = drafter_memory(GPT_OSS, spec)
    h = 2880
    layer = h * 64 * 64 + 2 * h * 8 * 64 + 64 * 64 * h + 3 * h * 2880  # q, k, v, o and a 2880-wide MLP
    inputs = h * (64 + 2 * 8) * 64 + 3 * h * h  # the embedding's q, k, v inputs and the fc (EAGLE-3)
    assert layer * 4 + inputs < w / 2 - h * 32000 < (layer * 4 + inputs) * 1.01  # bf16: norms are the rest
    assert kv == 4 * 2 * 8 * 64 * 1  # 4 layers of K and V, 8 heads of 64, FP8
    # over 2 GPUs all but the fc is halved: vLLM's EAGLE-3 fc is a ReplicatedLinear, whole on each
    fc = 3 * h * h * 2
    w2, _ = drafter_memory(dataclasses.replace(GPT_OSS, tp=2), spec)
    assert w2 == pytest.approx((w - fc) / 2 + fc, rel=1e-12)
    from simulator.planning.launch import _vllm_speculative

    out = _vllm_speculative(SpeculativeConfig("eagle3", 7, P_EAGLE, acceptance_rates=(0.7,), parallel_drafting=True))
    assert out["model"] == P_EAGLE and out["parallel_drafting"] is True


def test_a_heads_wider_inputs_its_prompt_pass_and_a_parallel_draft_model() -> None:
    """An EAGLE-3 head's fc runs once a step (the first pass pays it, the later ones only the embedding's inputs);
    its prompt pass is one pass of the head over the prompt's tokens, in a step that verifies nothing too; a
    parallel draft model (PARD) runs one pass of k rows, cheaper than k passes; the title names the head and the
    parallel drafting."""
    cost, shape = _peagle_costs(3, False)
    first = cost._draft_pass(cost._pass_shape(shape, 0), first=True)
    later = cost._draft_pass(cost._pass_shape(shape, 0), first=False)
    x = np.array([1.0])
    fc = float(cost.draft.gemm(x, 3 * 2880, 2880)[0])
    assert first - later == pytest.approx(fc, rel=1e-9) and fc > 0
    from simulator.costmodel.speculative import prompt_chunks

    mixed = BatchShape.from_requests([(2000, 0)], [1000])
    assert cost.draft_time(mixed) == cost._draft_pass(prompt_chunks(mixed)) > cost._draft_pass(prompt_chunks(
        BatchShape.from_requests([(200, 0)], [1000])))
    r70 = load_cost_model("roofline", ReplicaConfig("llama-3-70b", "h100", tp=4), "vllm-2026")
    verify = SpecBatchShape()
    for _ in range(4):
        verify.add_verify(6, 999)
    seq, par = (SpeculativeCostModel(r70, SpeculativeConfig("draft_model", 6, "qwama-0.5b", acceptance_rates=(0.7,),
                                                              draft_tp=1, parallel_drafting=p)) for p in (False, True))
    assert 0 < par.draft_time(verify) < seq.draft_time(verify) / 3
    from simulator.cli.run import run_title
    from simulator.config.run_config import RunConfig

    title = run_title(RunConfig(replica=GPT_OSS, speculative=SpeculativeConfig(
        "eagle3", 7, P_EAGLE, acceptance_rates=(0.7,), parallel_drafting=True)), {})
    assert f"({P_EAGLE}: 4 layers of hidden 2,880, draft vocabulary 32,000" in title
    assert "k=7 drafted in parallel (one drafter pass a step)" in title
