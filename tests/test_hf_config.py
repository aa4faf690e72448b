"""Hugging Face config.json models and GPU files: round trips, one-line errors, runs on them.

The fixtures in tests/data/hf_configs/ are the published config.json files of one model per
family (trimmed of nothing the reader needs); each must rebuild its catalog entry's shape.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.config.catalog import MODELS, get_gpu, get_model
from simulator.config.errors import ConfigError
from simulator.config.hf_config import model_from_hf_dict
from simulator.config.run_config import ReplicaConfig, RunConfig, WorkloadConfig
from simulator.engine.kvcache import plan_memory
from simulator.simulation import simulate

FIXTURES = Path(__file__).parent / "data" / "hf_configs"
FAMILIES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
SHAPE_FIELDS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "head_dim", "vocab_size", "tied_embeddings",
                "num_experts", "num_experts_per_tok", "expert_ffn_size", "num_shared_experts", "num_dense_layers",
                "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "num_params",
                "num_active_params", "sliding_window", "num_sliding_layers")


def test_one_fixture_per_family():
    types = set()
    for name in FAMILIES:
        cfg = json.loads((FIXTURES / name / "config.json").read_text())
        types.add(cfg.get("text_config", cfg).get("model_type", cfg["model_type"]))
    assert {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gpt_oss", "llama4_text",
            "deepseek_v3"} <= types


@pytest.mark.parametrize("name", FAMILIES)
def test_config_json_round_trip_matches_the_catalog(name):
    folder = FIXTURES / name
    from_folder = get_model(str(folder))
    from_file = get_model(str(folder / "config.json"))
    catalog = MODELS[name]
    for field in SHAPE_FIELDS:
        assert getattr(from_folder, field) == getattr(catalog, field), field
        assert getattr(from_file, field) == getattr(catalog, field), field
    assert from_folder.name == str(folder)  # the path is the name, so a saved config reproduces the run


def test_family_specific_fields():
    gpt = get_model(str(FIXTURES / "gpt-oss-20b"))
    assert (gpt.sliding_window, gpt.num_sliding_layers) == (128, 12)
    scout = get_model(str(FIXTURES / "llama-4-scout"))
    assert (scout.sliding_window, scout.num_sliding_layers, scout.num_shared_experts) == (8192, 36, 1)
    mistral = get_model(str(FIXTURES / "mistral-7b-v0.1"))
    assert (mistral.sliding_window, mistral.num_sliding_layers) == (4096, 32)
    qwen = get_model(str(FIXTURES / "qwen2.5-7b"))
    assert qwen.num_sliding_layers == 0  # use_sliding_window: false
    ds = get_model(str(FIXTURES / "deepseek-v3"))
    assert ds.is_mla and ds.kv_bytes_per_token_per_layer(2) == (512 + 64) * 2


def test_a_run_on_a_config_json_model_reproduces_from_its_config(tmp_path: Path):
    path = str(FIXTURES / "mixtral-8x7b")
    cfg = RunConfig(replica=ReplicaConfig(path, "h100-sxm", tp=2),
                    workload=WorkloadConfig(num_requests=12, qps=4.0))
    again = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    a, b = simulate(cfg), simulate(again)
    assert [r.completed_at for r in a.requests] == [r.completed_at for r in b.requests]
    assert all(r.completed_at is not None for r in a.requests)
    # Same shape as the catalog entry, so the same results.
    catalog = simulate(RunConfig(replica=ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=2),
                                 workload=WorkloadConfig(num_requests=12, qps=4.0)))
    assert [r.completed_at for r in a.requests] == [r.completed_at for r in catalog.requests]


def _base() -> dict:
    return json.loads((FIXTURES / "qwen3-30b-a3b" / "config.json").read_text())


@pytest.mark.parametrize(("change", "field"), [
    ({"attention_type": "linear"}, "model.attention_type"),
    ({"model_type": "mamba"}, "model.model_type"),
    ({"hidden_size": None}, "model.hidden_size"),
    ({"num_hidden_layers": "48"}, "model.num_hidden_layers"),
    ({"hidden_act": "relu2"}, "model.hidden_act"),
    ({"mlp_only_layers": [0, 1]}, "model.mlp_only_layers"),
    ({"decoder_sparse_step": 2}, "model.decoder_sparse_step"),
    ({"num_experts_per_tok": 200}, "model.num_experts_per_tok"),
    ({"layer_types": ["full_attention"] * 47 + ["mamba"]}, "model.layer_types"),
    ({"layer_types": ["sliding_attention"] * 46 + ["full_attention", None]}, "model.layer_types"),
    ({"layer_types": [{"a": 1}, "sliding_attention"] + ["full_attention"] * 46}, "model.layer_types"),  # a TypeError once
    ({"moe_layers": list(range(47))}, "model.moe_layers"),  # 47 MoE layers, but every layer is one
    ({"moe_layers": [0, 0] + list(range(2, 48))}, "model.moe_layers"),
    # a linear-attention layer needs its state's shape
    ({"layer_types": ["full_attention"] * 47 + ["linear_attention"]}, "model.linear_num_key_heads"),
    # a hybrid needs at least one full-attention layer
    ({"layer_types": ["linear_attention"] * 48, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
      "linear_key_head_dim": 128, "linear_value_head_dim": 128}, "model.num_linear_layers"),
])
def test_bad_configs_name_the_field(change, field):
    cfg = {**_base(), **change}
    with pytest.raises(ConfigError) as err:
        model_from_hf_dict(cfg, "x")
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_fields_of_real_configs_that_change_nothing_are_read():
    # Llama-4's configs from transformers 4.51 list their MoE layers; Qwen2.5's carry use_mrope: false.
    # Both were refused as unknown fields.
    scout = json.loads((FIXTURES / "llama-4-scout" / "config.json").read_text())
    scout["text_config"]["moe_layers"] = list(range(48))
    assert model_from_hf_dict(scout, "x").num_dense_layers == 0
    maverick = {**scout, "text_config": {**scout["text_config"], "interleave_moe_layer_step": 2,
                                          "moe_layers": list(range(1, 48, 2))}}
    assert model_from_hf_dict(maverick, "x").num_dense_layers == 24
    qwen = json.loads((FIXTURES / "qwen2.5-7b" / "config.json").read_text())
    assert model_from_hf_dict({**qwen, "use_mrope": False}, "x") == model_from_hf_dict(qwen, "x")


@pytest.mark.parametrize(("family", "change", "key"), [
    ("llama-3.1-8b", {"num_key_value_heads": 6}, "model.num_key_value_heads"),  # named num_kv_heads once
    ("deepseek-v3", {"first_k_dense_replace": 70}, "model.first_k_dense_replace"),  # num_dense_layers once
])
def test_the_specs_own_checks_name_the_configs_field_and_file(family, change, key):
    cfg = {**json.loads((FIXTURES / family / "config.json").read_text()), **change}
    with pytest.raises(ConfigError) as err:
        model_from_hf_dict(cfg, "x", where="my/config.json")
    assert err.value.field == key and "my/config.json" in str(err.value) and "\n" not in str(err.value)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("content", "needle"), [
    ("{not json", "not valid JSON"),
    ('{"model_type": "llama", "hidden_size": 64, "rope_magic": 3}', "model.rope_magic"),
])
def test_bad_config_file_on_the_cli_is_one_line(tmp_path: Path, content: str, needle: str):
    path = tmp_path / "config.json"
    path.write_text(content)
    proc = _cli("run", "--no-progress", "--model", str(path))
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


def test_gpu_from_a_toml_file(tmp_path: Path):
    path = tmp_path / "my-gpu.toml"
    path.write_text('name = "my-gpu"\nbf16_tflops = 500\nfp8_tflops = 1000\nhbm_gb_per_s = 4000\nmemory_gb = 96\n'
                    'nvlink_gb_per_s = 450\nnvlink_switch = true\nsource = "vendor sheet"\n')
    gpu = get_gpu(str(path))
    assert gpu.bf16_flops == 500e12 and gpu.fp8_flops == 1000e12 and gpu.memory_bytes == 96e9
    replica = ReplicaConfig("llama-3.1-8b", str(path), tp=2)
    assert replica.gpu == str(path)
    assert plan_memory(replica, 512, 128).num_kv_tokens > 0
    bad = tmp_path / "bad.json"
    bad.write_text('{"bf16_tflops": 500, "hbm_gb_per_s": 4000, "memory_gb": 96, "tensor_cores": 4}')
    with pytest.raises(ConfigError, match=r"gpu\.tensor_cores"):
        get_gpu(str(bad))
    missing = tmp_path / "missing.json"
    missing.write_text('{"bf16_tflops": 500, "memory_gb": 96}')
    with pytest.raises(ConfigError, match=r"gpu\.hbm_gb_per_s"):
        get_gpu(str(missing))


def test_unknown_hf_id_is_a_catalog_miss_and_a_missing_file_names_the_path(tmp_path: Path):
    with pytest.raises(ConfigError, match="unknown model"):
        get_model("some-org/some-model")
    with pytest.raises(ConfigError, match="no config file"):
        get_model(str(tmp_path / "nowhere" / "config.json"))


def test_a_config_without_max_position_embeddings_gets_vllms_assumed_context(tmp_path: Path) -> None:
    # vLLM assumes 2,048 tokens (_get_and_verify_max_len) and takes a --max-model-len as given; 4,096 was read here.
    cfg = {k: v for k, v in _base().items() if k != "max_position_embeddings"}
    spec = model_from_hf_dict(cfg, "x")
    assert spec.max_model_len == 2048 and spec.max_model_len_assumed
    assert not model_from_hf_dict(_base(), "x").max_model_len_assumed
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert ReplicaConfig(model=str(path), max_model_len=8192).effective_max_model_len == 8192  # not refused
    path.write_text(json.dumps({**cfg, "max_position_embeddings": 4096}))  # a trained context is a limit
    with pytest.raises(ConfigError, match="beyond"):
        ReplicaConfig(model=str(path), max_model_len=8192)


@pytest.mark.parametrize(("rope", "context", "expected"), [
    ({"type": "linear", "factor": 2.0}, 4096, 8192),
    ({"rope_type": "dynamic", "factor": 4}, 4096, 16384),
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 32768, 131072),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 131072, 131072),
    ({"rope_type": "longrope", "factor": 32.0}, 131072, 131072),
    ({"rope_type": "default"}, 40960, 40960),
])
def test_rope_scaling_stretches_the_context_as_vllm_reads_it(rope: dict, context: int, expected: int) -> None:
    cfg = {**_base(), "max_position_embeddings": context, "rope_scaling": rope}
    assert model_from_hf_dict(cfg, "x").max_model_len == expected


@pytest.mark.parametrize("rope", [{"type": "linear", "factor": -2}, {"rope_type": "yarn", "factor": 4.0}, "yarn"])
def test_a_bad_rope_scaling_is_refused_in_one_line(rope: object) -> None:
    with pytest.raises(ConfigError) as err:
        model_from_hf_dict({**_base(), "rope_scaling": rope}, "x")
    assert err.value.field == "model.rope_scaling" and "\n" not in str(err.value)


def test_kimi_k2_and_its_k25_wrapper_read_as_deepseek_v3s_architecture():
    """Kimi-K2's config.json names model_type kimi_k2 (DeepseekV3ForCausalLM), Kimi-K2.5's kimi_k25 around its text
    model: both were refused as unsupported. Kimi's shape (64 heads, 384 experts, one dense layer) is the catalog's."""
    ds = json.loads((FIXTURES / "deepseek-v3" / "config.json").read_text())
    kimi = {**ds, "model_type": "kimi_k2", "num_attention_heads": 64, "num_key_value_heads": 64,
            "n_routed_experts": 384, "first_k_dense_replace": 1, "vocab_size": 163840}
    wrapped = {"model_type": "kimi_k25", "architectures": ["KimiK25ForConditionalGeneration"], "text_config": kimi,
               "vision_config": {"patch_size": 14}}
    catalog = MODELS["kimi-k2.5"]
    for spec in (model_from_hf_dict(kimi, "k2"), model_from_hf_dict(wrapped, "k25")):
        for field in SHAPE_FIELDS:
            assert getattr(spec, field) == getattr(catalog, field), field


def test_a_quantized_checkpoints_exclusion_list_and_wrapper_are_read():
    """Kimi-K2.5's config.json gives its INT4 quantization_config beside its text_config (it was dropped: read as
    unquantized) and keeps self_attn, shared_experts and the dense MLP at 16 bits in its ignore list (read as 4-bit
    everywhere); a pack-quantized config of 8 bits is no int4."""
    ds = {k: v for k, v in json.loads((FIXTURES / "deepseek-v3" / "config.json").read_text()).items()
          if k != "quantization_config"}
    kimi = {**ds, "model_type": "kimi_k2", "num_attention_heads": 64, "num_key_value_heads": 64,
            "n_routed_experts": 384, "first_k_dense_replace": 1, "vocab_size": 163840}
    quant = {"quant_method": "compressed-tensors", "format": "pack-quantized",
             "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32}}},
             "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*", r"re:.*mlp\.(gate|up|gate_up|down)_proj.*"]}
    spec = model_from_hf_dict({"model_type": "kimi_k25", "text_config": kimi, "quantization_config": quant}, "k25")
    catalog = MODELS["kimi-k2.5"]
    for field in ("checkpoint_quant", "int4_group_size", "quant_16bit_shared_experts", "quant_16bit_mlp_layers"):
        assert getattr(spec, field) == getattr(catalog, field), field
    named = {**quant, "ignore": ["lm_head", "model.layers.0.mlp.down_proj", "model.layers.2.mlp.experts.0.up_proj"]}
    spec = model_from_hf_dict({**kimi, "quantization_config": named}, "k2")
    assert spec.quant_16bit_mlp_layers == (0,) and not spec.quant_16bit_shared_experts
    eight = {**quant, "config_groups": {"group_0": {"weights": {"num_bits": 8, "group_size": 64}}}}
    assert model_from_hf_dict({**kimi, "quantization_config": eight}, "k8").checkpoint_quant == "int8"


@pytest.mark.parametrize(("names", "dense", "kept"), [
    # Qwen's FP8 lists: attention norms and the shared expert's scalar gate are no projections kept at 16 bits
    (["lm_head", "model.layers.0.self_attn.q_norm", "model.layers.0.mlp.shared_expert_gate"], 3, {}),
    (["lm_head", "re:.*mlp.gate$"], 3, {}),  # llm-compressor's router exclusion: no dense MLP
    (["vision_model.model.layers.0.self_attn.q_proj", "vision_model.model.layers.0.mlp.fc1"], 3, {}),  # not the text's
    (["model.layers.0.mlp.down_proj", "model.layers.125.mlp.up_proj", "model.layers.3.self_attn.q_proj"], 126,
     {"quant_16bit_attention": True, "quant_16bit_mlp_layers": (0, 125)}),  # Meta's FP8 405B
    (["model.layers.*.self_attn", "model.layers.*.mlp.router", "lm_head"], 3, {"quant_16bit_attention": True}),
    (["*.mlp.shared_expert.*"], 3, {"quant_16bit_shared_experts": True}),
    (["language_model.model.layers.2.feed_forward"], 4, {"quant_16bit_mlp_layers": (2,)}),  # Llama-4's dense MLP name
])
def test_an_exclusion_list_keeps_projections_not_norms_gates_or_another_towers(names, dense, kept):  # noqa: ANN001
    from simulator.config.hf_config import checkpoint_quant, kept_16bit

    assert kept_16bit({"ignore": names}, range(dense), 1) == kept
    assert checkpoint_quant({"quant_method": "fbgemm_fp8"}) == "fp8"  # (Meta's FP8 405B: its list is read)
