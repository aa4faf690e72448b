"""Hybrid linear attention (Gated DeltaNet: Qwen3-Next, Qwen3.5) in a kernel model's per-layer means.

A hybrid model mixes tokens with a Gated DeltaNet in ``num_linear_layers`` of its layers and with
(gated) softmax attention in the others. Both kernel models price a *mean layer*, so each op is the
layer-weighted mean of the two kinds, as for sliding-window layers and dense/MoE MLPs:

- **projections**: a linear layer's input projection (queries and keys of ``linear_num_key_heads``,
  values and the output gate of ``linear_num_value_heads``, and the per-head decay and write
  strength) and its output projection, as GEMMs beside the attention layers' QKV/output GEMMs;
- **short convolution and gated norm**: element-wise passes over the convolution's channels and
  the value width;
- **the recurrence** (:func:`linear_attention_time`), per layer: every sequence's state (its value
  heads' key x value matrices and the convolution's last inputs) is read and written once a step,
  its new tokens read and written once, and the chunked delta rule does about ``4 dk dv`` plus
  ``2 c (dk + dv)`` multiply-adds a token and value head (``c``: the mean new tokens a sequence,
  at most the 64-token chunk). Priced as a roofline with the calibration's attention efficiencies:
  no kernel table here measures it (AIConfigurator's ``linear_attention`` tables are not in the
  shared subset), so a table-priced run says so and prices it this way.

Nothing here changes a model without linear layers: callers test ``linear_fraction`` first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CHUNK_TOKENS = 64  # the chunked delta rule's chunk (FLA's kernels, as vLLM and SGLang run them)


def linear_geometry(km: Any) -> None:
    """Per-GPU shapes of a hybrid's linear layers, set on kernel model ``km`` (heads sharded by TP)."""
    m, tp = km.model, km.replica.tp
    km.linear_fraction = m.num_linear_layers / m.num_layers
    if not km.linear_fraction:
        return
    km.lin_k_heads = max(1, m.linear_num_key_heads // tp)
    km.lin_v_heads = max(1, m.linear_num_value_heads // tp)
    km.lin_key = km.lin_k_heads * m.linear_key_head_dim
    km.lin_value = km.lin_v_heads * m.linear_value_head_dim
    km.lin_state_bytes = m.linear_state_bytes_per_gpu_layer(km.dtype_bytes, tp)


def hybrid_token_ops(km: Any, tokens: np.ndarray, ops: dict[str, np.ndarray]) -> None:
    """Mix a hybrid's linear layers into ``ops`` (a mean layer's token ops, updated in place)."""
    f = km.linear_fraction
    m, db = km.model, km.dtype_bytes
    h, nv = m.hidden_size, km.lin_v_heads
    conv = 2 * km.lin_key + km.lin_value
    lin_in = km.gemm(tokens, h, conv + km.lin_value + 2 * nv)  # q, k, v, the output gate z, decay a, strength b
    lin_out = km.gemm(tokens, km.lin_value, h)
    ops["qkv_proj"] = (1.0 - f) * ops["qkv_proj"] + f * lin_in
    ops["attn_out_proj"] = (1.0 - f) * ops["attn_out_proj"] + f * lin_out
    # Rotary runs in the attention layers only.
    ops["rotary"] = (1.0 - f) * ops["rotary"]
    # The causal short convolution (read and write its channels) and the gated RMSNorm (read the
    # output and the gate, write the result).
    ops["linear_attn_conv"] = f * km.elementwise(tokens, 2 * conv * db)
    ops["linear_attn_gate_norm"] = f * km.elementwise(tokens, 3 * km.lin_value * db)


def linear_attention_time(km: Any, num_tokens: float, num_seqs: float) -> float:
    """One linear layer's recurrence over ``num_tokens`` new tokens of ``num_seqs`` sequences."""
    if num_seqs <= 0:
        return 0.0
    m, c, g, db = km.model, km.cal, km.gpu, km.dtype_bytes
    dk, dv, hv = m.linear_key_head_dim, m.linear_value_head_dim, km.lin_v_heads
    chunk = min(float(CHUNK_TOKENS), num_tokens / num_seqs)
    flops = 2.0 * num_tokens * hv * (4.0 * dk * dv + 2.0 * chunk * (dk + dv))
    nbytes = (2.0 * num_seqs * km.lin_state_bytes
              + num_tokens * (2 * km.lin_key + 2 * km.lin_value + 2 * hv) * db)
    return (max(flops / (g.bf16_flops * c.attn_prefill_compute_eff), nbytes / (g.hbm_bytes_per_s * c.attn_decode_memory_eff))
            + km.attn_floor)
