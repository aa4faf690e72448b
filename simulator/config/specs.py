"""Spec records: what the simulator needs to know about a model and a GPU.

A :class:`ModelSpec` holds what the cost model and the KV cache need to know about a
decoder-only transformer (layer count, widths, GQA, MLP shape, vocabulary, context
length). A :class:`GPUSpec` holds a spec-sheet view of an accelerator (dense bf16
peak, HBM bandwidth and size, NVLink and PCIe bandwidth per direction). The named tables
are in :mod:`simulator.config.catalog`; user files are read by :mod:`simulator.config.hf_config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simulator.config.errors import ConfigError

GB = 1e9
GiB = 1024**3
TFLOPS = 1e12


# The scale bytes a DSA indexer key carries per 128 FP8 values (one fp32).
INDEX_KEY_SCALE_BYTES = 4

# The longest sliding window whose layers are charged per sequence rather than per token
# (ModelSpec.num_windowed_layers): a sequence shorter than the window is overcharged by at most this.
WINDOWED_KV_MAX_TOKENS = 1024


def is_dense_layer(index: int, num_dense_layers: int, moe_layer_step: int = 1) -> bool:
    """Whether layer ``index`` has a dense MLP: the first ``num_dense_layers`` (DeepSeek's first_k_dense_replace), or,
    with ``moe_layer_step`` n > 1, all but every n-th (Llama-4 Maverick's interleave_moe_layer_step)."""
    if moe_layer_step > 1:
        return (index + 1) % moe_layer_step != 0
    return index < num_dense_layers


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer, as the cost model and KV cache see it."""

    name: str
    hf_id: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_size: int  # width of one MLP projection (up or gate), not their sum
    vocab_size: int
    max_model_len: int
    gated_mlp: bool = True  # SwiGLU (up, gate, down) vs plain 2-matrix MLP
    activation: Literal["silu", "gelu"] = "silu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    parallel_attn_mlp: bool = False  # Falcon: attention and MLP read the same input
    rotary: bool = True
    tied_embeddings: bool = False
    aliases: tuple[str, ...] = field(default=())
    # -- later-generation features; every default describes a plain dense model --------------
    explicit_head_dim: int = 0  # HF ``head_dim`` where it differs from hidden / heads (Qwen3, GPT-OSS); 0: derived
    # Mixture of experts (0 experts: dense). Routed experts each have width ``expert_ffn_size``;
    # shared experts run for every token (width ``shared_expert_ffn_size``, 0: the expert width).
    num_experts: int = 0
    num_experts_per_tok: int = 0  # top-k
    expert_ffn_size: int = 0
    num_shared_experts: int = 0
    shared_expert_ffn_size: int = 0
    num_dense_layers: int = 0  # layers with a dense MLP of ``ffn_size`` (DeepSeek's first_k_dense_replace)
    # Where they are (:meth:`is_dense_layer`): 1, the first num_dense_layers; n > 1, all but every n-th (layer i is MoE
    # where (i + 1) % n == 0: Llama-4 Maverick's interleave_moe_layer_step).
    moe_layer_step: int = 1
    # Multi-head latent attention (DeepSeek-V2/V3; 0: standard attention). The KV cache keeps one
    # compressed latent of ``kv_lora_rank + qk_rope_head_dim`` per token per layer, shared by all heads.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5; 0: dense): on MLA, a lightning indexer of ``index_num_heads``
    # heads of ``index_head_dim`` scores every cached key for each query (FP8), and the attention proper reads only
    # the top ``index_topk`` of them. The indexer keeps its own key cache, one FP8 key of ``index_head_dim`` and a
    # scale a token and layer (:data:`INDEX_KEY_SCALE_BYTES`), beside the latent.
    index_topk: int = 0
    index_num_heads: int = 0
    index_head_dim: int = 0
    # Sliding-window attention on ``num_sliding_layers`` of the layers (0: full attention everywhere).
    sliding_window: int = 0
    num_sliding_layers: int = 0
    # Hybrid linear attention (Qwen3-Next, Qwen3.5): ``num_linear_layers`` of the layers mix tokens
    # with a Gated DeltaNet instead of softmax attention. Such a layer keeps no per-token KV but a
    # recurrent state per sequence (``linear_num_value_heads`` matrices of key x value head dims,
    # plus the short convolution's last ``linear_conv_kernel_dim - 1`` inputs); the other layers
    # are full attention (0: no linear layers).
    num_linear_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 4
    attn_output_gate: bool = False  # the full-attention q_proj also emits a sigmoid gate per query (Qwen3-Next/3.5)
    linear_state_dtype_bytes: float = 0.0  # the recurrent state's bytes an element (config mamba_ssm_dtype); 0: the model's
    # Multi-token-prediction modules the checkpoint ships (DeepSeek's num_nextn_predict_layers, Qwen's
    # mtp_num_hidden_layers, MiniMax's num_mtp_modules): speculative method ``mtp`` drafts with them (0: it cannot).
    num_mtp_layers: int = 0
    source: str = ""  # where the shape (and its published parameter count) comes from
    # The config.json names no context length: max_model_len is vLLM's assumed 2,048 (hf_config._context), which a
    # --max-model-len replaces, as vLLM lets it (a run's header says so).
    max_model_len_assumed: bool = False
    # The weights' format a checkpoint's config.json names (quantization_config, as a --dtype name where one fits,
    # else its quant_method); "" for none. Said, not read: a run's weights are its --dtype.
    checkpoint_quant: str = ""
    # What that checkpoint keeps at 16 bits beyond its LM head and embeddings (its config.json's
    # modules_to_not_convert), where the run's --dtype is checkpoint_quant: every layer's attention projections,
    # and the dense MLPs of these layers (indices). Meta's FP8 Llama-3.1-405B keeps both (its first and last).
    quant_16bit_attention: bool = False
    quant_16bit_mlp_layers: tuple[int, ...] = ()
    # ... and its shared experts (Kimi-K2's INT4 checkpoint: its ignore list names self_attn, shared_experts and
    # the dense layer's mlp).
    quant_16bit_shared_experts: bool = False
    # An INT4 checkpoint's scale group where it is not GPTQ/AWQ's 128, where the run's --dtype is int4 and
    # checkpoint_quant: Kimi-K2's quantization-aware checkpoint keeps a bf16 scale every 32 weights (0.5625 bytes a
    # weight, not 0.5156). 0: the format's 128.
    int4_group_size: int = 0

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size", "vocab_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"model.{name}", f"must be positive, got {getattr(self, name)}")
        if not self.explicit_head_dim and self.hidden_size % self.num_heads:
            raise ConfigError("model.num_heads", f"{self.num_heads} does not divide hidden size {self.hidden_size}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError("model.num_kv_heads", f"{self.num_kv_heads} does not divide {self.num_heads} heads")
        if self.num_experts:
            if not 0 < self.num_experts_per_tok <= self.num_experts:
                raise ConfigError("model.num_experts_per_tok", f"top-k {self.num_experts_per_tok} must be in "
                                  f"1..{self.num_experts} experts")
            if self.expert_ffn_size <= 0:
                raise ConfigError("model.expert_ffn_size", f"must be positive for a MoE model, got {self.expert_ffn_size}")
        if self.quant_16bit_mlp_layers and not self.checkpoint_quant or any(
                not 0 <= i < self.num_layers or not self.is_dense_layer(i)
                for i in self.quant_16bit_mlp_layers):  # (a MoE layer's experts are not one dense MLP)
            raise ConfigError("model.quant_16bit_mlp_layers", f"{self.quant_16bit_mlp_layers} must name dense-MLP "
                              f"layers of a quantized checkpoint (checkpoint_quant {self.checkpoint_quant!r})")
        if self.int4_group_size and (self.int4_group_size < 0 or self.checkpoint_quant != "int4"):
            raise ConfigError("model.int4_group_size", f"{self.int4_group_size} must be a positive group of an int4 "
                              f"checkpoint (checkpoint_quant {self.checkpoint_quant!r})")
        if self.quant_16bit_shared_experts and not (self.checkpoint_quant and self.num_shared_experts):
            raise ConfigError("model.quant_16bit_shared_experts", "needs a quantized checkpoint (checkpoint_quant) of "
                              "a model with shared experts")
        if not 0 <= self.num_dense_layers <= self.num_layers:
            raise ConfigError("model.num_dense_layers", f"must be in 0..{self.num_layers}, got {self.num_dense_layers}")
        if not 1 <= self.moe_layer_step <= self.num_layers:
            raise ConfigError("model.moe_layer_step", f"must be in 1..{self.num_layers} (every n-th layer MoE), got "
                              f"{self.moe_layer_step}", "give interleave_moe_layer_step between 1 and num_layers")
        if self.moe_layer_step > 1:
            if not self.num_experts:
                raise ConfigError("model.moe_layer_step", f"{self.moe_layer_step} places MoE layers, but the model "
                                  "has no experts", "drop moe_layer_step, or give num_experts")
            dense = self.num_layers - self.num_layers // self.moe_layer_step
            if self.num_dense_layers != dense:
                raise ConfigError("model.num_dense_layers", f"{self.num_dense_layers}, but one layer in every "
                                  f"{self.moe_layer_step} MoE (moe_layer_step) leaves {dense} of {self.num_layers} "
                                  "dense", f"give num_dense_layers {dense}")
        if self.kv_lora_rank and (self.qk_rope_head_dim <= 0 or self.qk_nope_head_dim <= 0 or self.v_head_dim <= 0):
            raise ConfigError("model.kv_lora_rank", "MLA needs positive qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
        if self.index_topk or self.index_num_heads or self.index_head_dim:
            if not self.is_mla or min(self.index_topk, self.index_num_heads, self.index_head_dim) <= 0:
                raise ConfigError("model.index_topk", f"sparse attention needs MLA and a positive index_topk, "
                                  f"index_num_heads and index_head_dim, got {self.index_topk}, "
                                  f"{self.index_num_heads}, {self.index_head_dim}")
            if self.num_sliding_layers:
                raise ConfigError("model.index_topk", "sparse attention beside sliding-window layers is not modelled")
        if not 0 <= self.num_sliding_layers <= self.num_layers or (self.num_sliding_layers and self.sliding_window <= 0):
            raise ConfigError("model.num_sliding_layers", f"{self.num_sliding_layers} sliding layers with window "
                              f"{self.sliding_window} for {self.num_layers} layers")
        if self.num_linear_layers:
            if not 0 < self.num_linear_layers < self.num_layers:
                raise ConfigError("model.num_linear_layers", f"{self.num_linear_layers} linear-attention layers of "
                                  f"{self.num_layers}: a hybrid needs at least one full-attention layer")
            for name in ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                         "linear_value_head_dim", "linear_conv_kernel_dim"):
                if getattr(self, name) <= 0:
                    raise ConfigError(f"model.{name}", f"must be positive for linear-attention layers, "
                                      f"got {getattr(self, name)}")
            if self.linear_num_value_heads % self.linear_num_key_heads:
                raise ConfigError("model.linear_num_key_heads", f"{self.linear_num_key_heads} key heads do not divide "
                                  f"{self.linear_num_value_heads} value heads")
            if self.is_mla or self.num_sliding_layers:
                raise ConfigError("model.num_linear_layers", "linear-attention layers beside MLA or sliding-window "
                                  "layers are not modelled")

    @property
    def head_dim(self) -> int:
        return self.explicit_head_dim or self.hidden_size // self.num_heads

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def is_sparse_attention(self) -> bool:
        """DeepSeek Sparse Attention: each query attends to at most ``index_topk`` keys its indexer picks."""
        return self.index_topk > 0

    @property
    def index_key_bytes(self) -> float:
        """One token's indexer key in one layer: FP8 values and a 4-byte scale per 128 of them (SGLang's and
        vLLM's DSA caches: 132 bytes at head dim 128), whatever the latent cache's dtype."""
        return self.index_head_dim + INDEX_KEY_SCALE_BYTES * -(-self.index_head_dim // 128)

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    def is_dense_layer(self, index: int) -> bool:
        """Whether layer ``index`` has a dense MLP (every layer of a dense model; see :attr:`moe_layer_step`)."""
        return is_dense_layer(index, self.num_dense_layers if self.is_moe else self.num_layers, self.moe_layer_step)

    def num_dense_layers_in(self, first: int, count: int) -> int:
        """Dense-MLP layers among layers ``first`` to ``first + count - 1`` (a pipeline stage's)."""
        if not self.is_moe:
            return count
        end = first + count
        if self.moe_layer_step > 1:  # layers step-1, 2*step-1, ... are MoE
            return count - (end // self.moe_layer_step - first // self.moe_layer_step)
        return max(0, min(self.num_dense_layers, end) - first)

    @property
    def num_kv_layers(self) -> int:
        """Layers that keep per-token KV (all but the linear-attention ones)."""
        return self.num_layers - self.num_linear_layers

    @property
    def num_windowed_layers(self) -> int:
        """Sliding-window layers whose KV a running sequence holds for its window only: vLLM V1's
        sliding-window manager frees the blocks that slide out, so such a layer holds at most
        ``sliding_window + block_size`` tokens of a sequence, however long. Charged once per
        sequence (:func:`simulator.engine.kvcache.state_blocks_per_seq`) for windows of at most
        :data:`WINDOWED_KV_MAX_TOKENS` (gpt-oss's 128); a longer window is counted like a full layer,
        as is every layer of a model with no full-attention layer (Mistral-7B-v0.1's 4096), a bound
        the other way: a sequence shorter than its window would be charged the window in each."""
        if not 0 < self.sliding_window <= WINDOWED_KV_MAX_TOKENS or self.num_sliding_layers >= self.num_kv_layers:
            return 0
        return self.num_sliding_layers

    @property
    def num_growing_kv_layers(self) -> int:
        """Layers whose KV grows with every token of a sequence (full attention, and the sliding
        layers not in :attr:`num_windowed_layers`)."""
        return self.num_kv_layers - self.num_windowed_layers

    @property
    def is_hybrid(self) -> bool:
        return self.num_linear_layers > 0

    @property
    def linear_conv_dim(self) -> int:
        """Channels of a linear-attention layer's short convolution: its queries, keys and values."""
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim + \
            self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_attention_params(self) -> int:
        """Weights of one Gated DeltaNet block: the input projection (queries, keys, values, the
        output gate and the per-head decay and write-strength inputs), the depthwise convolution,
        the per-head decay parameters, the gated norm and the output projection."""
        if not self.num_linear_layers:
            return 0
        h, nv = self.hidden_size, self.linear_num_value_heads
        value = nv * self.linear_value_head_dim
        in_proj = h * (self.linear_conv_dim + value + 2 * nv)
        return in_proj + self.linear_conv_dim * self.linear_conv_kernel_dim + 2 * nv + \
            self.linear_value_head_dim + value * h

    def linear_state_bytes_per_gpu_layer(self, dtype_bytes: float, tp: int) -> float:
        """One sequence's recurrent state in one linear-attention layer on one GPU of a TP group
        (heads sharded by TP): the value heads' key x value matrices and the convolution's last
        ``kernel - 1`` inputs, at ``dtype_bytes`` (the model's dtype, as vLLM keeps them unless the
        config's ``mamba_ssm_dtype`` sets the state's: ``linear_state_dtype_bytes``)."""
        if not self.num_linear_layers:
            return 0.0
        nk, nv = max(1, self.linear_num_key_heads // tp), max(1, self.linear_num_value_heads // tp)
        dk, dv = self.linear_key_head_dim, self.linear_value_head_dim
        conv = (2 * nk * dk + nv * dv) * (self.linear_conv_kernel_dim - 1)
        return nv * dk * dv * (self.linear_state_dtype_bytes or dtype_bytes) + conv * dtype_bytes

    @property
    def attention_params(self) -> int:
        """Weights of one attention block (projections only)."""
        h = self.hidden_size
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk) if self.q_lora_rank \
                else h * self.num_heads * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + \
                self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + self.num_heads * self.v_head_dim * h + self.indexer_params
        gate = self.q_size if self.attn_output_gate else 0
        return h * (self.q_size + gate + 2 * self.kv_size) + self.q_size * h

    @property
    def indexer_params(self) -> int:
        """DSA's indexer weights in one attention block (0 without sparse attention): its queries from the query
        latent, one key and a weight a head from the hidden state. Engines replicate them on every TP rank (vLLM's
        and SGLang's ``Indexer`` build them as replicated linears), so they are not sharded with the rest."""
        if not self.is_sparse_attention:
            return 0
        h = self.hidden_size
        return (self.q_lora_rank or h) * self.index_num_heads * self.index_head_dim + \
            h * (self.index_head_dim + self.index_num_heads)

    @property
    def replicated_attention_params(self) -> int:
        """Weights of one attention block that engines keep whole on every TP rank (0 for GQA): MLA's down-projections
        to the query and KV latents (vLLM's fused_qkv_a_proj with disable_tp, SGLang's replicated linear; the cost
        model prices them unsharded too, ``moe.mla_projections``) and DSA's indexer (:attr:`indexer_params`)."""
        if not self.is_mla:
            return 0
        return self.hidden_size * ((self.q_lora_rank or 0) + self.kv_lora_rank + self.qk_rope_head_dim) \
            + self.indexer_params

    @property
    def mixer_params(self) -> float:
        """Token-mixer weights of a layer, the mean over layers (softmax attention, or a hybrid's mix of
        it and linear attention); an int for models without linear layers."""
        if not self.num_linear_layers:
            return self.attention_params
        return (self.num_kv_layers * self.attention_params
                + self.num_linear_layers * self.linear_attention_params) / self.num_layers

    def mlp_params(self, width: int) -> int:
        return (3 if self.gated_mlp else 2) * self.hidden_size * width

    @property
    def expert_params(self) -> int:
        """One routed expert's weights."""
        return self.mlp_params(self.expert_ffn_size) if self.is_moe else 0

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer."""
        return self.num_shared_experts * self.mlp_params(self.shared_expert_ffn_size or self.expert_ffn_size)

    @property
    def moe_layer_params(self) -> int:
        """MLP side of one MoE layer: router, every routed expert, shared experts."""
        return self.hidden_size * self.num_experts + self.num_experts * self.expert_params + self.shared_expert_params

    @property
    def params_per_layer(self) -> int:
        """Weights of one layer; for a model mixing dense and MoE layers, the mean over layers
        (so ``num_layers * params_per_layer`` is every layer's weights, all experts included)."""
        norms = 2 * self.hidden_size
        dense = self.mixer_params + self.mlp_params(self.ffn_size) + norms
        if not self.is_moe:
            return round(dense)
        moe = self.mixer_params + self.moe_layer_params + norms
        return round((self.num_dense_layers * dense + self.num_moe_layers * moe) / self.num_layers)

    @property
    def num_active_params(self) -> int:
        """Weights one token reads: attention, top-k and shared experts, router, embeddings and LM head."""
        if not self.is_moe:
            return self.num_params
        inactive = self.num_moe_layers * (self.num_experts - self.num_experts_per_tok) * self.expert_params
        return self.num_params - inactive

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        lm_head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.num_layers * self.params_per_layer + self.embedding_params + lm_head

    def kv_bytes_per_token_per_layer(self, dtype_bytes: float = 2) -> float:
        """K and V for one token in one layer, all KV heads (before TP sharding); for MLA the
        compressed latent ``kv_lora_rank + qk_rope_head_dim``."""
        if self.is_mla:  # (with DSA the indexer's key too, FP8 whatever the latent's dtype)
            if self.is_sparse_attention and dtype_bytes == 1:
                # a DSA model's FP8 cache keeps the latent's scales (an fp32 per 128) and its rotary key at 16 bits:
                # vLLM's fp8_ds_mla and SGLang's NSA cache, 656 bytes at DeepSeek's widths
                latent = self.kv_lora_rank + INDEX_KEY_SCALE_BYTES * -(-self.kv_lora_rank // 128) + 2 * self.qk_rope_head_dim
                return latent + self.index_key_bytes
            return (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes + self.index_key_bytes
        return 2 * self.num_kv_heads * self.head_dim * dtype_bytes

    def kv_bytes_per_token_per_gpu_layer(self, dtype_bytes: float, tp: int) -> float:
        """One token's KV in one layer on one GPU of a TP group: KV heads are sharded (a GPU keeps
        at least one, GQA replicates heads when ``tp > kv_heads``); an MLA latent has no head axis
        and is replicated on every TP rank (as vLLM stores it)."""
        if self.is_mla:
            return self.kv_bytes_per_token_per_layer(dtype_bytes)
        return 2 * max(1, self.num_kv_heads // tp) * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class GPUSpec:
    """Spec-sheet figures of one accelerator. Bandwidths are bytes/s per direction."""

    name: str
    bf16_flops: float
    hbm_bytes_per_s: float
    memory_bytes: float
    nvlink_bytes_per_s: float  # 0 where the part has no NVLink
    pcie_bytes_per_s: float
    aliases: tuple[str, ...] = field(default=())
    fp8_flops: float = 0.0  # dense FP8 tensor-core peak; 0 where the part has no FP8 tensor cores
    source: str = ""  # the datasheet the figures come from
    nvlink_switch: bool = False  # every GPU pair linked directly in its usual server (NVSwitch, MI300X mesh)
    # A fully connected mesh (AMD Infinity Fabric): nvlink_bytes_per_s is the sum of this many peer links, one
    # to each other GPU of the server, so a group of n GPUs talks over n - 1 of them (a pair over one); 0: a
    # switch, where any group reaches the full bandwidth.
    mesh_links: int = 0
    fp4_flops: float = 0.0  # dense FP4 (NVFP4/MXFP4) tensor-core peak; 0 where the part has none (before Blackwell)
    # GPUs one NVLink fabric joins at full speed where that reaches past a server (72 in a GB200/GB300
    # NVL72 rack); 0: the server's GPUs only. An expert-parallel group this size all-to-alls over NVLink.
    nvlink_domain_gpus: int = 0

    def __post_init__(self) -> None:
        for name in ("fp8_flops", "fp4_flops", "nvlink_domain_gpus", "mesh_links"):
            if getattr(self, name) < 0:
                raise ConfigError(f"gpu.{name}", f"must be >= 0, got {getattr(self, name)}")
        for name in ("bf16_flops", "hbm_bytes_per_s", "memory_bytes", "pcie_bytes_per_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"gpu.{name}", f"must be positive, got {getattr(self, name)}")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where compute and memory time are equal."""
        return self.bf16_flops / self.hbm_bytes_per_s


# Today's common models (shapes from each model's Hugging Face config.json; the published
# parameter counts they are tested against are cited in tests/test_catalog_2025.py).


def tp_shard_problem(spec: ModelSpec, tp: int) -> tuple[str, str] | None:
    """The one tensor-parallel rule, for the simulator and the profiler alike: ``tp`` must
    divide the attention heads, and either divide the KV heads or be a multiple of them (each
    rank then holds a replica of one KV head). ``(problem, fix)`` where it breaks, else None."""
    if spec.num_heads % tp:
        divisors = [d for d in range(1, spec.num_heads + 1) if spec.num_heads % d == 0 and d <= 16]
        return (f"tp={tp} does not divide {spec.name}'s {spec.num_heads} attention heads", f"use one of {divisors}")
    if spec.num_kv_heads % tp and tp % spec.num_kv_heads:
        return (f"tp={tp} neither divides nor is a multiple of {spec.num_kv_heads} KV heads", "")
    return None


def redundant_experts_to_fit(num_experts: int, redundant: int, ep: int) -> int:
    """The fewest redundant expert copies, at least ``redundant``, that make ``num_experts`` plus them
    divide over ``ep`` ranks (what an error names as the fix; 32 for DeepSeek's 256 experts over 48)."""
    return redundant + (-(num_experts + redundant) % ep)
