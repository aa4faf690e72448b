"""Today's catalog models against their published parameter counts, and the new GPUs.

Each figure below is the model owner's published count (billions), with its source. The
spec's total (all experts) and active (per token) counts must be within 2%. Where a source
counts active parameters without the input embedding (OpenAI's gpt-oss card), the test does too.
"""

from __future__ import annotations

import pytest

from simulator.config.catalog import GPUS, MODELS, get_gpu, get_model

# name: (total B, active B or None, active counts the input embedding, source)
PUBLISHED = {
    "llama-3.1-8b": (8.03, None, True, "HF meta-llama/Llama-3.1-8B model page, 8.03B params"),
    "llama-3.1-70b": (70.6, None, True, "HF meta-llama/Llama-3.1-70B model page, 70.6B params"),
    "llama-3.1-405b": (405.0, None, True, "Meta Llama 3.1 model card: 405B"),
    "qwen2.5-7b": (7.61, None, True, "Qwen2.5-7B model card: Number of Parameters 7.61B"),
    "qwen2.5-72b": (72.7, None, True, "Qwen2.5-72B model card: Number of Parameters 72.7B"),
    "qwen3-32b": (32.8, None, True, "Qwen3-32B model card: Number of Parameters 32.8B"),
    "qwen3-30b-a3b": (30.5, 3.3, True, "Qwen3-30B-A3B model card: 30.5B total, 3.3B activated"),
    "qwen3-235b-a22b": (235.0, 22.0, True, "Qwen3-235B-A22B model card: 235B total, 22B activated"),
    "mixtral-8x7b": (46.7, 12.9, True, "Mistral AI, 'Mixtral of experts' (2023-12-11): 46.7B total, 12.9B per token"),
    "deepseek-v3": (671.0, 37.0, True, "DeepSeek-V3 Technical Report (arXiv:2412.19437): 671B total, 37B activated"),
    "gpt-oss-20b": (20.91, 3.61, False, "OpenAI gpt-oss model card (2025), Table 1: 20.91B total, 3.61B active"),
    "gpt-oss-120b": (116.83, 5.13, False, "OpenAI gpt-oss model card (2025), Table 1: 116.83B total, 5.13B active"),
    "llama-4-scout": (109.0, 17.0, True, "Meta Llama 4 model card: Scout 17B active, 109B total"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_match_published(name):
    total_b, active_b, with_embedding, _source = PUBLISHED[name]
    m = MODELS[name]
    assert m.num_params / 1e9 == pytest.approx(total_b, rel=0.02)
    active = m.num_active_params - (0 if with_embedding else m.embedding_params)
    if active_b is None:
        assert m.num_active_params == m.num_params  # dense
    else:
        assert active / 1e9 == pytest.approx(active_b, rel=0.02)
        assert m.num_active_params < m.num_params


def test_llama_31_names_resolve_to_the_128k_entries():
    assert get_model("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert get_model("llama-3.1-70b").max_model_len == 131072
    assert get_model("meta-llama/Meta-Llama-3-8B").max_model_len == 8192  # Llama-3 stays at 8K


def test_mixtral_expert_arithmetic_by_hand():
    m = MODELS["mixtral-8x7b"]
    attention = 4096 * (4096 + 2 * 1024) + 4096 * 4096
    expert = 3 * 4096 * 14336
    layer = attention + 8 * expert + 4096 * 8 + 2 * 4096  # all experts, router, norms
    assert m.num_params == 32 * layer + 2 * 32000 * 4096
    assert m.num_active_params == m.num_params - 32 * 6 * expert


@pytest.mark.parametrize("name", ["b200", "gb200", "mi300x", "h20", "l4"])
def test_new_gpus_have_fp8_peaks_and_sources(name):
    g = GPUS[name]
    assert g.fp8_flops == pytest.approx(2 * g.bf16_flops, rel=0.01)  # dense FP8 = 2x dense BF16 on these parts
    assert g.source and g.memory_bytes > 20e9
    assert get_gpu(name) is g


def test_fp8_peaks_only_where_the_part_has_fp8():
    assert GPUS["a100-80gb"].fp8_flops == 0 and GPUS["a40"].fp8_flops == 0
    assert GPUS["h100-sxm"].fp8_flops == pytest.approx(1979e12)
