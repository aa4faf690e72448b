"""Model shapes as one GPU of a tensor-parallel group sees them.

A model comes from the catalog (:func:`simulator.config.catalog.get_model`) or from a Hugging
Face style ``config.json`` given by path. :class:`ShardedShapes` then derives the GEMM
and attention shapes a TP rank really runs (Megatron sharding, as vLLM does it):

* QKV projection ``[T, h] x [h, (heads/tp + 2 * kv_heads_per_rank) * head_dim]`` with
  ``kv_heads_per_rank = max(1, kv_heads / tp)`` (KV heads are replicated when
  ``tp > kv_heads``);
* attention output ``[T, heads/tp * head_dim] x [.., h]``;
* MLP up/gate ``[T, h] x [h, (2 if gated else 1) * ffn/tp]``, down ``[T, ffn/tp] x [.., h]``;
* embedding and LM head vocab-parallel: ``ceil(vocab / tp)`` rows per rank.

``tp`` must divide the attention heads and the FFN width, and KV heads must divide by
``tp`` or ``tp`` by them; anything else is a :class:`~simulator.config.errors.ConfigError`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from simulator.config.catalog import ModelSpec, get_model
from simulator.config.errors import ConfigError
from simulator.config.specs import tp_shard_problem

# HF ``model_type`` values whose MLP is a plain two-matrix GeLU block with LayerNorm.
_UNGATED_MODEL_TYPES = {"phi", "gpt2", "gpt_neox", "gptj", "falcon", "opt", "bloom", "gpt_bigcode", "starcoder2"}
_PARALLEL_BLOCK_MODEL_TYPES = {"phi", "falcon", "gptj"}


def load_model(name_or_path: str) -> ModelSpec:
    """A catalog model by name / HF id, or a ``config.json`` (file or folder) by path."""
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" or path.is_file():
        return model_from_hf_config(path)
    return get_model(name_or_path)


def model_from_hf_config(path: str | Path) -> ModelSpec:
    """Parse the fields servesim needs from a Hugging Face ``config.json``."""
    path = Path(path)
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError("model", f"no such config file {path}", "pass a catalog name or an HF config.json") from None
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError("model", f"cannot parse {path} as JSON: {err}") from None
    if not isinstance(cfg, dict):
        raise ConfigError("model", f"{path} is not a JSON object")

    def pick(*keys: str, default: int | None = None) -> int:
        for key in keys:
            if cfg.get(key) is not None:
                return int(cfg[key])
        if default is None:
            raise ConfigError("model", f"{path} has none of {list(keys)}", "pass an HF-style config.json")
        return default

    hidden = pick("hidden_size", "n_embd", "d_model")
    heads = pick("num_attention_heads", "n_head")
    kv_heads = pick("num_key_value_heads", "num_kv_heads", "n_head_kv", default=heads)
    if cfg.get("multi_query") and "num_kv_heads" not in cfg and "n_head_kv" not in cfg:
        kv_heads = 1
    model_type = str(cfg.get("model_type", "")).lower()
    gated = model_type not in _UNGATED_MODEL_TYPES
    ffn = pick("intermediate_size", "ffn_hidden_size", "n_inner", "ffn_dim", default=4 * hidden)
    act = str(cfg.get("hidden_act", cfg.get("activation_function", "silu"))).lower()
    name = str(cfg.get("_name_or_path") or path.parent.name or path.stem)
    return ModelSpec(
        name=name,
        hf_id=name,
        num_layers=pick("num_hidden_layers", "n_layer", "num_layers"),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        ffn_size=ffn,
        vocab_size=pick("vocab_size"),
        max_model_len=pick("max_position_embeddings", "n_positions", "max_sequence_length", default=4096),
        gated_mlp=gated,
        activation="gelu" if "gelu" in act else "silu",
        norm="layernorm" if not gated else "rmsnorm",
        parallel_attn_mlp=model_type in _PARALLEL_BLOCK_MODEL_TYPES or bool(cfg.get("parallel_attn", False)),
        rotary=model_type not in {"gpt2", "opt", "bloom", "gpt_bigcode"},
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )


@dataclass(frozen=True)
class ShardedShapes:
    """Per-rank shapes of ``model`` under tensor parallelism ``tp``."""

    model: ModelSpec
    tp: int

    def __post_init__(self) -> None:
        m, tp = self.model, self.tp
        if tp <= 0:
            raise ConfigError("tp", f"must be positive, got {tp}")
        shard = tp_shard_problem(m, tp)  # the simulator's rule (simulator.config.specs)
        if shard is not None:
            raise ConfigError("tp", *shard)
        if m.ffn_size % tp:
            raise ConfigError("tp", f"tp={tp} does not divide {m.name}'s FFN width {m.ffn_size}")

    @property
    def hidden(self) -> int:
        return self.model.hidden_size

    @property
    def head_dim(self) -> int:
        return self.model.head_dim

    @property
    def heads(self) -> int:
        return self.model.num_heads // self.tp

    @property
    def kv_heads(self) -> int:
        return max(1, self.model.num_kv_heads // self.tp)

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def qkv_width(self) -> int:
        return (self.heads + 2 * self.kv_heads) * self.head_dim

    @property
    def ffn(self) -> int:
        return self.model.ffn_size // self.tp

    @property
    def up_width(self) -> int:
        return (2 if self.model.gated_mlp else 1) * self.ffn

    @property
    def vocab(self) -> int:
        return math.ceil(self.model.vocab_size / self.tp)

    @property
    def num_norms(self) -> int:
        return 1 if self.model.parallel_attn_mlp else 2

    def linear_shape(self, op: str) -> tuple[int, int]:
        """``(K, N)`` of the weight of a linear op: ``[T, K] x [K, N]``."""
        shapes = {
            "qkv_proj": (self.hidden, self.qkv_width),
            "attn_out_proj": (self.q_width, self.hidden),
            "mlp_up_gate": (self.hidden, self.up_width),
            "mlp_down": (self.ffn, self.hidden),
            "lm_head": (self.hidden, self.vocab),
        }
        return shapes[op]
