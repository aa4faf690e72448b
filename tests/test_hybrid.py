"""Hybrid linear attention (Gated DeltaNet beside full attention: Qwen3-Next, Qwen3.5).

The spec (shapes and parameter counts from config.json), the memory plan (per-token KV in the
full-attention layers only, a recurrent state per running sequence charged in blocks), the block
accounting (state taken at admission, returned on finish or preemption), the pricing (the
recurrence does not grow with the context) and the fast paths (exact for a hybrid too).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from helpers import run_requests

from simulator.config.catalog import get_model
from simulator.config.errors import ConfigError
from simulator.config.hf_config import model_from_hf_dict
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel import RooflineCostModel
from simulator.costmodel.base import BatchShape
from simulator.engine.kvcache import BlockManager, plan_memory
from simulator.engine.schedulers import SCHEDULERS
from simulator.report.metrics import request_frame
from simulator.simulation import simulate
from simulator.workload.request import Request

QWEN3_NEXT = {  # Qwen/Qwen3-Next-80B-A3B config.json (the shape fields; it has no layer_types)
    "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "decoder_sparse_step": 1,
    "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5120, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
    "linear_num_value_heads": 32, "linear_value_head_dim": 128, "max_position_embeddings": 262144,
    "mlp_only_layers": [], "moe_intermediate_size": 512, "norm_topk_prob": True, "num_attention_heads": 16,
    "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48, "num_key_value_heads": 2,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936,
}


def test_qwen3_next_config_gives_the_catalog_shape():
    m = model_from_hf_dict(QWEN3_NEXT, "qwen3-next")
    c = get_model("qwen3-next-80b-a3b")
    assert m.num_linear_layers == c.num_linear_layers == 36 and m.num_kv_layers == 12
    assert m.attn_output_gate and m.num_shared_experts == 1
    assert m.num_params == c.num_params and m.num_active_params == c.num_active_params


@pytest.mark.parametrize(("name", "total_b", "active_b", "with_embeddings"),
                         [("qwen3-next-80b-a3b", 80, 3, False), ("qwen3.5-397b-a17b", 397, 17, True)])
def test_parameter_counts_match_the_published_names(name, total_b, active_b, with_embeddings):
    """The names count active weights without the embeddings and LM head (Qwen3-Next) or with them (Qwen3.5)."""
    m = get_model(name)
    assert abs(m.num_params / 1e9 - total_b) / total_b < 0.02
    active = m.num_active_params - (0 if with_embeddings else 2 * m.embedding_params)
    assert abs(active / 1e9 - active_b) / active_b < 0.1


def test_memory_plan_keeps_kv_for_the_full_attention_layers_and_state_in_blocks():
    replica = ReplicaConfig("qwen3.5-397b-a17b", "b200", tp=8, dtype="fp8")
    m = replica.model_spec
    plan = plan_memory(replica, 8192, 256)
    kv_layer = m.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, 8)
    assert plan.kv_bytes_per_token[0] == pytest.approx(m.num_kv_layers * kv_layer)  # 15 of 60 layers
    # 8 of 64 value heads a GPU: 8 x 128 x 128 state (float32: Qwen3.5's mamba_ssm_dtype) + (2 x 2 + 8) x 128
    # x 3 conv inputs (bf16), 45 layers
    state = 45 * (8 * 128 * 128 * 4 + 12 * 128 * 3 * 2)
    assert plan.num_state_blocks == math.ceil(round(state / (15 * kv_layer)) / plan.block_size)
    assert plan.num_state_blocks > 0 and plan.as_dict()["num_state_blocks_per_seq"] == plan.num_state_blocks
    dense = plan_memory(ReplicaConfig("qwen3-235b-a22b", "b200", tp=8, dtype="fp8"), 8192, 256)
    assert dense.num_state_blocks == 0


def test_a_pipeline_stage_holds_its_own_full_attention_layers_not_the_mean():
    # 15 full-attention layers in 60, one in four: 15-layer stages hold 3 or 4 of them, never the mean 3.75; the
    # fullest stage sets the cache (the mean read 6.7% more tokens than the stages hold).
    replica = ReplicaConfig("qwen3.5-397b-a17b", "h200", tp=8, pp=4, num_nodes=4, dtype="fp8")
    m = replica.model_spec
    plan = plan_memory(replica, 8192, 256)
    kv_layer = m.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, 8)
    assert plan.kv_bytes_per_token == pytest.approx((4 * kv_layer,) * 4)
    assert plan.num_kv_tokens <= min(b / (4 * kv_layer) for b in plan.kv_budget_bytes)
    one = plan_memory(ReplicaConfig("qwen3.5-397b-a17b", "h200", tp=8, dtype="fp8"), 8192, 256)
    assert one.kv_bytes_per_token[0] == pytest.approx(15 * kv_layer)  # one stage: all 15, as before


def test_block_manager_charges_state_per_running_sequence():
    blocks = BlockManager(100, 16, watermark=0.0, state_blocks=10)
    a, b = Request(0, 0.0, 40, 8), Request(1, 0.0, 40, 8)
    assert blocks.can_admit(40 + 16 * 87)  # 88 blocks of tokens + 10 of state: 98 of 100
    assert not blocks.can_admit(40 + 16 * 88)
    blocks.admit(a, 40)
    assert (a.num_blocks, a.num_state_blocks, blocks.num_free_blocks) == (3, 10, 87)
    blocks.admit(b, 40)
    blocks.try_grow(b, 60)  # growing tokens never takes more state
    assert (b.num_blocks, b.num_state_blocks, blocks.num_free_blocks) == (4, 10, 73)
    blocks.free(a)
    assert blocks.num_free_blocks == 86 and a.num_state_blocks == 0
    blocks.free(b)
    assert blocks.num_free_blocks == blocks.num_blocks
    assert blocks.num_usable_blocks == 90  # one new request's tokens: all but its state


def _run(model: str, fast: bool = True, kernels: str = "roofline", gpu_blocks: int | None = None,
         num_requests: int = 60) -> object:
    # 16-token blocks, as these cases were sized (vllm-v1 would page this hybrid in vLLM's larger ones unasked)
    replica = ReplicaConfig(model, "h100", tp=4, dtype="fp8", kernels=kernels, max_model_len=4096,
                            num_gpu_blocks=gpu_blocks, block_size=16)
    return simulate(RunConfig(replica=replica, scheduler=SchedulerConfig("vllm-v1", max_num_batched_tokens=2048),
                              workload=WorkloadConfig(num_requests=num_requests, qps=8.0), seed=3,
                              fast_forward=fast))


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_every_policy_returns_every_block_with_state_charged(name):
    """Every policy under a tight cache whose sequences each hold 6 blocks of state: each request
    finishes (or is refused with a reason) and every block, state included, comes back."""
    specs = [(0.01 * i, 40 + 37 * (i % 5), 10 + 7 * (i % 4)) for i in range(30)]
    kw = {"chunk_size": 64} if name == "sarathi" else {}
    reqs, _, sched = run_requests(name, specs, num_blocks=60, max_model_len=256, state_blocks=6, **kw)
    for req in reqs:
        assert req.reject_reason is not None or (req.completed_at is not None and req.num_generated == req.num_output_tokens)
        assert req.num_state_blocks == 0 and req.num_blocks == 0
    assert sum(r.completed_at is not None for r in reqs) >= len(reqs) // 2  # served, not refused wholesale
    assert sched.blocks.num_free_blocks == 60 and not sched.running and not sched.waiting


def test_a_tight_cache_preempts_and_every_request_completes():
    """With the state charged, a cache of few blocks holds fewer sequences: preemptions return
    their state's blocks too, and every request completes."""
    result = _run("qwen3-next-80b-a3b", gpu_blocks=1200, num_requests=80)
    frame = request_frame(result)
    assert frame["num_preemptions"].sum() > 0
    assert all(r.completed_at is not None for r in result.requests)


@pytest.mark.parametrize("gpu_blocks", [None, 1200])
def test_fast_paths_are_exact_for_a_hybrid(gpu_blocks):
    a = request_frame(_run("qwen3-next-80b-a3b", fast=True, gpu_blocks=gpu_blocks))
    b = request_frame(_run("qwen3-next-80b-a3b", fast=False, gpu_blocks=gpu_blocks))
    assert a.equals(b)


def test_fast_paths_are_exact_for_a_hybrid_on_kernel_tables(aic):
    a = request_frame(_run("qwen3-next-80b-a3b", fast=True, kernels="vllm"))
    b = request_frame(_run("qwen3-next-80b-a3b", fast=False, kernels="vllm"))
    assert a.equals(b)


def test_the_recurrence_does_not_grow_with_the_context():
    """Decode attention of a hybrid grows with the KV read by its full-attention layers only: a
    (1 - linear share) of the slope of a model whose every layer attends."""
    km = RooflineCostModel(ReplicaConfig("qwen3.5-397b-a17b", "b200", tp=8, dtype="fp8"))
    assert km.linear_fraction == 0.75

    def decode(context: int) -> float:
        return km.attention_decode(BatchShape.decode_only(32, 32 * context, 32 * context**2, context))

    hybrid_growth = decode(65536) - decode(1024)
    full_growth = km._attention_decode(32 * 65536, 32) - km._attention_decode(32 * 1024, 32)
    assert hybrid_growth == pytest.approx(0.25 * full_growth, rel=1e-9)
    ops = km.token_ops([256])
    assert ops["linear_attn_conv"][0] > 0 and ops["linear_attn_gate_norm"][0] > 0


def test_a_state_dtype_in_the_config_sizes_the_state():
    """vLLM keeps the recurrent state at the config's mamba_ssm_dtype where it names one (else
    the model's dtype); the convolution's inputs stay at the model's dtype."""
    plain = model_from_hf_dict(QWEN3_NEXT, "a")
    fp32 = model_from_hf_dict({**QWEN3_NEXT, "mamba_ssm_dtype": "float32"}, "b")
    conv = (2 * 16 * 128 + 32 * 128) * 3 * 2  # one GPU's (tp 1) convolution inputs, bf16
    assert plain.linear_state_bytes_per_gpu_layer(2, 1) == 32 * 128 * 128 * 2 + conv
    assert fp32.linear_state_bytes_per_gpu_layer(2, 1) == 32 * 128 * 128 * 4 + conv
    with pytest.raises(ConfigError) as err:
        model_from_hf_dict({**QWEN3_NEXT, "mamba_ssm_dtype": "int3"}, "c")
    assert err.value.field == "model.mamba_ssm_dtype"


def test_qwen3_5_keeps_its_state_at_float32():
    """Qwen3.5's configs name mamba_ssm_dtype float32 (AIConfigurator's copy of the 397B's drops it): the
    catalog's state is twice a bf16 state, so a decode step reads and writes twice the bytes a sequence."""
    m = get_model("qwen3.5-397b-a17b")
    bf16 = model_from_hf_dict({**QWEN3_NEXT, "num_hidden_layers": 60, "linear_num_value_heads": 64}, "bf16-state")
    conv = (2 * 2 * 128 + 8 * 128) * 3 * 2  # tp 8: 2 key heads, 8 value heads a GPU
    assert m.linear_state_bytes_per_gpu_layer(2, 8) == 8 * 128 * 128 * 4 + conv
    assert bf16.linear_state_bytes_per_gpu_layer(2, 8) == 8 * 128 * 128 * 2 + conv
    km = RooflineCostModel(ReplicaConfig("qwen3.5-397b-a17b", "b200", tp=8, dtype="fp8"))
    assert km.lin_state_bytes == m.linear_state_bytes_per_gpu_layer(2, 8)


def test_speculation_keeps_a_state_per_verified_position():
    """Speculating k tokens, a hybrid holds k + 1 states a sequence (vLLM's num_speculative_blocks:
    a rejected draft rolls back to the accepted position's state), and the run completes."""
    from simulator.config.speculative import SpeculativeConfig
    from simulator.costmodel.speculative import speculative_memory_plan

    replica = ReplicaConfig("qwen3.5-397b-a17b", "b200", tp=8, dtype="fp8")
    plan = plan_memory(replica, 8192, 256)
    spec = SpeculativeConfig(method="mtp", num_speculative_tokens=3, acceptance_rates=(0.8, 0.7, 0.6))
    assert speculative_memory_plan(plan, replica, spec).num_state_blocks == 4 * plan.num_state_blocks
    result = simulate(RunConfig(replica=replica, workload=WorkloadConfig(num_requests=20, qps=4.0),
                                speculative=spec))
    assert all(r.completed_at is not None for r in result.requests)


def test_a_disaggregated_hybrid_balances_its_blocks_and_moves_the_state():
    """Prefill and decode pools of a hybrid: blocks (state included) balance at every arrival and
    all come back; each handoff moves the prompt's KV of the full-attention layers plus the state."""
    import numpy as np
    from test_disagg import balanced_run, disagg_config, table

    from simulator.config.disagg_layout import kv_bytes_per_token, layout_of, state_bytes_per_seq
    from simulator.report.disagg_metrics import handoff_frame

    config = disagg_config("1x(tp=4)", "1x(tp=4)", max_model_len=2048,
                           replica__model="qwen3-next-80b-a3b", replica__gpu="h100", replica__dtype="fp8")
    n = 24
    rng = np.random.default_rng(1)
    tab = table(np.sort(rng.uniform(0, 3, n)), rng.integers(100, 1500, n).tolist(), rng.integers(5, 200, n).tolist())
    result = balanced_run(config, tab)
    assert all(r.completed_at is not None for r in result.requests)
    replica = layout_of(config).prefill_replica
    state = state_bytes_per_seq(replica)
    assert state > 0
    moved = handoff_frame(result, request_frame(result))["kv_bytes"].to_numpy()
    prompts = np.array([r.num_prompt_tokens for r in result.requests], dtype=np.float64)
    assert moved == pytest.approx(prompts * kv_bytes_per_token(replica) + state)


def test_profiles_and_learned_models_refuse_a_hybrid():
    """The profiler times softmax attention only, so a learned model would price every layer as
    such: both refuse a hybrid in one line, naming what prices it."""
    from profiler.runner import ProfileConfig
    from simulator.costmodel.learned import LearnedCostModel

    with pytest.raises(ConfigError, match="Gated DeltaNet"):
        ProfileConfig(model="qwen3-next-80b-a3b", out=Path("unused"), device="cpu", tp=(4,))
    replica = ReplicaConfig("qwen3-next-80b-a3b", "h100", tp=4)
    artifact = {"model": replica.model, "tp": 4, "gpu": replica.gpu, "dtype_bytes": 2}
    with pytest.raises(ConfigError, match="hybrid"):
        LearnedCostModel(replica, artifact)


def test_vllms_schedulers_page_a_hybrid_in_vllms_blocks_unless_told():
    """vLLM raises a hybrid's attention block until one layer's page holds a linear layer's state, 16 x
    ceil(state / (16 x attention KV a token)) on one GPU ("Setting attention block size to 1056 tokens" for
    Qwen3.5-397B at TP4): vllm and vllm-v1 page in it where --block-size is unset; SGLang, which keeps its
    mamba states in a pool of their own, and an explicit --block-size keep theirs; the run's title says which."""
    from simulator.cli.run import run_title
    from simulator.engine.kvcache import build_kv_cache, engine_block_size

    replica = ReplicaConfig("qwen3.5-397b-a17b", "b200", tp=4, dtype="nvfp4", max_model_len=32768)
    # at TP4: 1 KV head x 256 x K,V x 2 B = 1,024 B a token; 16 x 128 x 128 x 4 B + (2 x 4 + 16) x 128 x 3 x 2 B of
    # state, 1,042 tokens' worth: 66 x 16 = 1,056
    m = replica.model_spec
    assert m.kv_bytes_per_token_per_gpu_layer(2, 4) == 1024
    assert m.linear_state_bytes_per_gpu_layer(2, 4) == 16 * 128 * 128 * 4 + 24 * 128 * 3 * 2 == 1042 * 1024
    for name in ("vllm", "vllm-v1"):
        _, plan = build_kv_cache(replica, SchedulerConfig(name))
        assert plan.block_size == 1056 and plan.num_state_blocks == 3  # a block a group of 15 DeltaNet layers
    assert engine_block_size(ReplicaConfig(replica.model, "b200", tp=4, dtype="nvfp4", kv_cache_dtype="fp8"),
                             "vllm-v1") == 2096  # half the bytes a token: 2,084 tokens, rounded up to 16s
    assert build_kv_cache(replica, SchedulerConfig("sglang"))[1].block_size == 16
    given = ReplicaConfig(replica.model, "b200", tp=4, dtype="nvfp4", max_model_len=32768, block_size=16)
    assert build_kv_cache(given, SchedulerConfig("vllm-v1"))[1].block_size == 16
    assert engine_block_size(ReplicaConfig("llama-3.1-8b", "h100-sxm"), "vllm-v1") == 16  # not a hybrid
    workload = WorkloadConfig("fixed", prompt_tokens=2000, output_tokens=8, num_requests=4, qps=4.0)
    result = simulate(RunConfig(replica=replica, workload=workload))
    assert result.memory.block_size == 1056 and all(r.completed_at is not None for r in result.requests)
    title = run_title(RunConfig(replica=replica), {})
    assert "KV blocks of 1,056 tokens (vLLM's for a hybrid under vllm-v1" in title
    assert "vLLM raises a hybrid's --block-size 16 to 1,056" in run_title(RunConfig(replica=given), {})
    assert "KV blocks" not in run_title(RunConfig(replica=replica, scheduler=SchedulerConfig("sglang")), {})
