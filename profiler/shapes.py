"""Model shapes as one GPU of a tensor-parallel group sees them.

A model is whatever :func:`simulator.config.catalog.get_model` returns for ``--model``: a catalog
entry, or a Hugging Face ``config.json`` (file or folder) read by the simulator's own strict reader,
:mod:`simulator.config.hf_config`. There is no second parser here, so a config the simulator
refuses is refused here too, and a profiled shape is the shape the simulator prices (spec name
included: the path as given, which ``simulate fit`` resolves back to the same spec).
:class:`ShardedShapes` then derives the GEMM and attention shapes a TP rank really runs (Megatron
sharding, as vLLM does it):

* QKV projection ``[T, h] x [h, (heads/tp + 2 * kv_heads_per_rank) * head_dim]`` with
  ``kv_heads_per_rank = max(1, kv_heads / tp)`` (KV heads are replicated when
  ``tp > kv_heads``);
* attention output ``[T, heads/tp * head_dim] x [.., h]``;
* MLP up/gate ``[T, h] x [h, (2 if gated else 1) * ffn/tp]``, down ``[T, ffn/tp] x [.., h]``;
* embedding and LM head vocab-parallel: ``ceil(vocab / tp)`` rows per rank.

The heads rule is the simulator's own (:func:`simulator.config.specs.tp_shard_problem`): ``tp``
must divide the attention heads, and KV heads must divide by ``tp`` or ``tp`` by them. The
profiler adds one condition of its own, because it allocates real tensors: ``tp`` must divide the
FFN width (no catalog model at a TP the heads rule allows breaks it). Anything else is a
:class:`~simulator.config.errors.ConfigError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.catalog import ModelSpec
from simulator.config.errors import ConfigError
from simulator.config.specs import tp_shard_problem


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
