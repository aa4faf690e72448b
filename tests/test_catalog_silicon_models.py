"""The silicon sample's newer models in the catalog: published parameter counts, and the sample's ids.

Kimi-K2.5 and MiniMax-M2.5 (AIConfigurator's silicon rows, issue 28) are in the catalog with their
shapes from their config.json (sources beside the entries in simulator/config/catalog.py). Their
owners publish rounded totals, so the tolerances here are a few percent, not the 2% of
tests/test_catalog_2025.py; the figures below say which rounding they carry.
"""

from __future__ import annotations

import pytest

from simulator.config.catalog import get_model

# name: (total B, active B, active counts the input embedding, tolerance, source)
PUBLISHED = {
    # The K2 family's model summary (MoonshotAI/Kimi-K2 README, "Model Summary": 1T total, 32B
    # activated, 61 layers of which 1 dense); K2.5 is K2-Base continued, the same text model.
    # Ours: 1.026T / 32.9B (the published figures are rounded to 1T and 32B).
    "kimi-k2.5": (1000.0, 32.0, True, 0.03, "MoonshotAI/Kimi-K2 README: 1T total, 32B activated"),
    # MiniMax's model pages: 229B (HF model size) total, "10B active" (sgl-project docs
    # basic_usage/minimax_m2.md: "230 billion total parameters with 10 billion active"); ours
    # 228.7B / 10.4B without the input embedding (10B is rounded).
    "minimax-m2.5": (229.0, 10.0, False, 0.05, "HF MiniMaxAI/MiniMax-M2.5: 229B; MiniMax-M2 series: 10B active"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    total_b, active_b, with_embedding, rel, _source = PUBLISHED[name]
    m = get_model(name)
    assert m.num_params / 1e9 == pytest.approx(total_b, rel=rel)
    active = m.num_active_params - (0 if with_embedding else m.embedding_params)
    assert active / 1e9 == pytest.approx(active_b, rel=rel)


def test_kimi_is_deepseek_v3_shaped_with_more_experts_and_fewer_heads():
    kimi, dsv3 = get_model("kimi-k2.5"), get_model("deepseek-v3")
    assert kimi.is_mla and kimi.is_moe
    # The MLA latent per token per layer (what the KV cache keeps) is DeepSeek-V3's.
    assert kimi.kv_bytes_per_token_per_layer(1) == dsv3.kv_bytes_per_token_per_layer(1) == 512 + 64
    assert (kimi.num_heads, kimi.num_experts, kimi.num_dense_layers) == (64, 384, 1)
    assert (dsv3.num_heads, dsv3.num_experts, dsv3.num_dense_layers) == (128, 256, 3)


def test_minimax_is_full_attention_gqa_moe():
    m = get_model("minimax-m2.5")
    assert not m.is_mla and m.sliding_window == 0 and m.num_shared_experts == 0
    assert m.head_dim == 128 and m.head_dim != m.hidden_size // m.num_heads  # explicit head_dim
    assert m.kv_bytes_per_token_per_layer(2) == 2 * 8 * 128 * 2  # K and V, 8 KV heads, bf16
    assert m.num_moe_layers == m.num_layers == 62


@pytest.mark.parametrize(("model_path", "name"), [("moonshotai/Kimi-K2.5", "kimi-k2.5"),
                                                  ("MiniMaxAI/MiniMax-M2.5", "minimax-m2.5"),
                                                  ("zhipuai/GLM-5", "glm-5"), ("zai-org/GLM-5", "glm-5")])
def test_the_samples_model_path_maps_to_the_entry(model_path, name):
    """(GLM-5's rows were refused for its DeepSeek Sparse Attention until ModelSpec.index_topk modelled it.)"""
    from simulator.calibrate.silicon import _model

    assert get_model(model_path).name == name
    assert _model(model_path) == name


def test_a_model_outside_the_catalog_stays_out_with_a_reason():
    from simulator.calibrate.silicon import Unexpressible, _model

    with pytest.raises(Unexpressible, match="model acme/Unknown-7B is not in the catalog"):
        _model("acme/Unknown-7B")


def test_the_hybrid_in_the_sample_maps_to_its_entry():
    from simulator.calibrate.silicon import _model

    assert _model("Qwen/Qwen3.5-397B-A17B") == "qwen3.5-397b-a17b"


def test_weights_fit_the_samples_smallest_layouts():
    """Memory sanity: the smallest layouts the sample runs each model on hold its weights in the
    row's format (Kimi-K2.5 NVFP4 on 4 B200, MiniMax-M2.5 FP8 on one B300 and NVFP4 on one B200)."""
    from simulator.config.run_config import RunConfig
    from simulator.config.specs import GiB
    from simulator.engine.kvcache import plan_memory

    for model, gpu, tp, dtype, low_gib, high_gib in [("kimi-k2.5", "b200", 4, "nvfp4", 120, 160),
                                                     ("minimax-m2.5", "b300", 1, "fp8", 200, 230),
                                                     ("minimax-m2.5", "b200", 1, "nvfp4", 110, 135)]:
        config = RunConfig().replace(replica__model=model, replica__gpu=gpu, replica__tp=tp, replica__dtype=dtype,
                                     replica__kv_cache_dtype="fp8", replica__max_model_len=9216)
        plan = plan_memory(config.replica, 8192, 256)
        assert low_gib < max(plan.weights_bytes) / GiB < high_gib
        assert plan.num_kv_tokens > 9216  # room for at least one long request's KV
