"""One Hugging Face reader for the profiler and the simulator: same config.json, same shapes.

The profiler reads ``--model`` through :func:`simulator.config.catalog.get_model`, i.e. the
simulator's strict reader (:mod:`simulator.config.hf_config`). These tests parse the published
configs in tests/data/hf_configs/ (and a tiny one) both ways and check that the spec is the same
and that the per-rank GEMMs the profiler times add up to the weights the simulator prices; and
that what the strict reader refuses the profiler refuses with the very same line. No torch needed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profiler.runner import ProfileConfig
from profiler.shapes import ShardedShapes
from simulator.config.catalog import get_model
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.config.specs import tp_shard_problem

FIXTURES = Path(__file__).parent / "data" / "hf_configs"
FAMILIES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
TINY = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 512, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 1024,
        "hidden_act": "silu", "_name_or_path": "tiny-test"}
# A Qwen3-style dense config whose head_dim is not hidden / heads (the profiler's old parser read 64).
WIDE_HEADS = {**TINY, "model_type": "qwen3", "head_dim": 128, "_name_or_path": "wide-heads"}


def _configs(tmp_path: Path) -> list[str]:
    paths = [str(FIXTURES / name) for name in FAMILIES]
    for name, cfg in (("tiny", TINY), ("wide-heads", WIDE_HEADS)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(cfg))
        paths.append(str(path))
    return paths


def test_profiler_and_simulator_read_a_config_json_into_the_same_shapes(tmp_path: Path) -> None:
    checked = 0
    for path in _configs(tmp_path):
        profiled = ProfileConfig(model=path, out=tmp_path / "out").model_spec
        simulated = ReplicaConfig(path, "h100-sxm").model_spec
        assert profiled == simulated, path
        assert get_model(profiled.name) == simulated  # the name a profile table records resolves back
        for tp in (1, 2, 4, 8):
            if tp_shard_problem(simulated, tp) is not None or simulated.ffn_size % tp:
                continue
            s = ShardedShapes(profiled, tp)
            (h, qkv), (q, h2) = s.linear_shape("qkv_proj"), s.linear_shape("attn_out_proj")
            assert h == h2 == simulated.hidden_size and q * tp == simulated.q_size, (path, tp)
            if not simulated.is_mla and simulated.num_kv_heads % tp == 0:
                # The projections one rank runs, times tp, are one layer's attention weights as priced.
                assert (h * qkv + q * h) * tp == simulated.attention_params, (path, tp)
            (h, up), (ffn, h2) = s.linear_shape("mlp_up_gate"), s.linear_shape("mlp_down")
            assert (h * up + ffn * h2) * tp == simulated.mlp_params(simulated.ffn_size), (path, tp)
            checked += 1
    assert checked >= 3 * (len(FAMILIES) + 2)


def test_explicit_head_dim_is_what_the_profiler_times(tmp_path: Path) -> None:
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(WIDE_HEADS))
    s = ShardedShapes(ProfileConfig(model=str(path), out=tmp_path / "out").model_spec, 2)
    assert s.head_dim == 128
    assert s.linear_shape("qkv_proj") == (256, (2 + 2 * 1) * 128)
    assert s.linear_shape("attn_out_proj") == (2 * 128, 256)
    qwen3 = ShardedShapes(ProfileConfig(model=str(FIXTURES / "qwen3-32b"), out=tmp_path / "out").model_spec, 8)
    assert qwen3.linear_shape("qkv_proj") == (5120, (8 + 2 * 1) * 128)  # 64 heads, 8 KV heads, head_dim 128


@pytest.mark.parametrize("cfg, field", [
    # Families the old profiler parser guessed at (ungated GeLU, aliases like n_embd): refused, as the simulator does.
    ({"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "vocab_size": 1000}, "model.n_embd"),
    ({"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024,
      "num_hidden_layers": 2, "vocab_size": 1000}, "model.model_type"),
    # No model_type: no longer assumed to be a gated Llama.
    ({k: v for k, v in TINY.items() if k != "model_type"}, "model.model_type"),
    # No FFN width: no longer 4 x hidden.
    ({k: v for k, v in TINY.items() if k != "intermediate_size"}, "model.intermediate_size"),
    # A number as a string: no longer coerced.
    ({**TINY, "hidden_size": "256"}, "model.hidden_size"),
    # An activation outside the known ones: no longer silently SiLU.
    ({**TINY, "hidden_act": "relu"}, "model.hidden_act"),
    # A field that may change the architecture: refused, not ignored.
    ({**TINY, "parallel_attn": True}, "model.parallel_attn"),
])
def test_what_the_simulator_refuses_the_profiler_refuses_alike(tmp_path: Path, cfg: dict, field: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as simulated:
        ReplicaConfig(str(path), "h100-sxm")
    with pytest.raises(ConfigError) as profiled:
        ProfileConfig(model=str(path), out=tmp_path / "out")
    assert str(profiled.value) == str(simulated.value)
    assert str(profiled.value).startswith(field) and "\n" not in str(profiled.value)
