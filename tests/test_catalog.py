"""Catalog lookups and the KV capacity formula."""

from __future__ import annotations

import pytest

from simulator.config.catalog import GPUS, MODELS, get_gpu, get_model
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, SchedulerConfig


def test_exact_lookup_and_aliases():
    assert get_model("meta-llama/Llama-2-7b-hf").name == "llama-2-7b"
    assert get_model("LLAMA-2-7B").name == "llama-2-7b"
    assert get_gpu("h100").name == "h100-sxm"
    with pytest.raises(ConfigError, match="known: "):
        get_model("llama-2")  # no prefix matching


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_shapes_are_consistent(name):
    m = MODELS[name]
    assert m.head_dim * m.num_heads == m.hidden_size or m.explicit_head_dim == m.head_dim
    assert m.num_heads % m.num_kv_heads == 0


def test_parameter_counts_match_published_sizes():
    expected_b = {"llama-2-7b": 6.7, "llama-2-13b": 13.0, "llama-2-70b": 69.0, "mistral-7b": 7.2, "yi-34b": 34.4,
                  "falcon-180b": 179.5, "llama-3-8b": 8.0, "codellama-34b": 33.7}
    for name, billions in expected_b.items():
        assert MODELS[name].num_params / 1e9 == pytest.approx(billions, rel=0.03), name


def test_gpu_ridge_points():
    assert GPUS["a100-80gb"].ridge_flops_per_byte == pytest.approx(153, rel=0.01)
    assert GPUS["h100-sxm"].ridge_flops_per_byte == pytest.approx(295, rel=0.01)


def test_config_validation_messages():
    with pytest.raises(ConfigError, match="replica.tp"):
        ReplicaConfig("yi-34b", tp=3)
    with pytest.raises(ConfigError, match="give only one"):
        SchedulerConfig("sarathi", chunk_size=512, max_num_batched_tokens=1024)
    assert SchedulerConfig("vllm").token_budget(4096) == 4096
    assert SchedulerConfig("sarathi").token_budget(4096) == 512


def test_a_max_model_len_beyond_the_models_context_is_refused() -> None:
    """vLLM refuses it (without VLLM_ALLOW_LONG_MAX_MODEL_LEN): yi-34b's context is 4,096 tokens, and
    a 16k limit is its 200K variant's (same shapes), not a quiet stretch of the 4k model."""
    with pytest.raises(ConfigError, match=r"replica.max_model_len: 16,384 is beyond yi-34b's context of 4,096"):
        ReplicaConfig("yi-34b", tp=2, max_model_len=16384)
    assert ReplicaConfig("yi-34b", tp=2, max_model_len=4096).effective_max_model_len == 4096
    assert ReplicaConfig("yi-34b-200k", tp=2, max_model_len=16384).effective_max_model_len == 16384


def test_the_qwen3_2507_updates_are_their_own_entries_with_their_262k_context() -> None:
    """Qwen3's 2507 updates keep the first release's shapes and give a native context of 262,144 (their
    config.json), where the first release's is 40,960: as aliases of it they refused a 131,072-token limit."""
    for first, update in (("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B-Instruct-2507"),
                          ("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B-Thinking-2507")):
        m = get_model(update)
        assert m.name == f"{first}-2507" and m.max_model_len == 262144 and MODELS[first].max_model_len == 40960
        assert m.num_params == MODELS[first].num_params and m.num_active_params == MODELS[first].num_active_params
    assert ReplicaConfig("qwen3-30b-a3b-2507", "h100", max_model_len=131072).effective_max_model_len == 131072
