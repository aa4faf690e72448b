"""Model and GPU catalogs: named tables with exact lookup.

A :class:`ModelSpec` holds what the cost model and the KV cache need to know about a
decoder-only transformer (layer count, widths, GQA, MLP shape, vocabulary, context
length). A :class:`GPUSpec` holds a spec-sheet view of an accelerator (dense bf16
peak, HBM bandwidth and size, NVLink and PCIe bandwidth per direction).

Lookup is exact on the short lowercase name or on a Hugging Face id given as an
alias; anything else is a :class:`~simulator.config.errors.ConfigError` listing the known
names. Figures come from the models' Hugging Face ``config.json`` files and the
vendors' datasheets (dense, i.e. without structured sparsity).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simulator.config.errors import ConfigError

GB = 1e9
GiB = 1024**3
TFLOPS = 1e12


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
    # Multi-head latent attention (DeepSeek-V2/V3; 0: standard attention). The KV cache keeps one
    # compressed latent of ``kv_lora_rank + qk_rope_head_dim`` per token per layer, shared by all heads.
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Sliding-window attention on ``num_sliding_layers`` of the layers (0: full attention everywhere).
    sliding_window: int = 0
    num_sliding_layers: int = 0
    source: str = ""  # where the shape (and its published parameter count) comes from

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
        if not 0 <= self.num_dense_layers <= self.num_layers:
            raise ConfigError("model.num_dense_layers", f"must be in 0..{self.num_layers}, got {self.num_dense_layers}")
        if self.kv_lora_rank and (self.qk_rope_head_dim <= 0 or self.qk_nope_head_dim <= 0 or self.v_head_dim <= 0):
            raise ConfigError("model.kv_lora_rank", "MLA needs positive qk_rope_head_dim, qk_nope_head_dim and v_head_dim")
        if not 0 <= self.num_sliding_layers <= self.num_layers or (self.num_sliding_layers and self.sliding_window <= 0):
            raise ConfigError("model.num_sliding_layers", f"{self.num_sliding_layers} sliding layers with window "
                              f"{self.sliding_window} for {self.num_layers} layers")

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
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

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
            return q + kv + self.num_heads * self.v_head_dim * h
        return h * (self.q_size + 2 * self.kv_size) + self.q_size * h

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
        dense = self.attention_params + self.mlp_params(self.ffn_size) + norms
        if not self.is_moe:
            return dense
        moe = self.attention_params + self.moe_layer_params + norms
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
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * dtype_bytes
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
    nvlink_switch: bool = False  # every GPU pair at full link speed in its usual server (NVSwitch, MI300X mesh)

    def __post_init__(self) -> None:
        if self.fp8_flops < 0:
            raise ConfigError("gpu.fp8_flops", f"must be >= 0, got {self.fp8_flops}")
        for name in ("bf16_flops", "hbm_bytes_per_s", "memory_bytes", "pcie_bytes_per_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"gpu.{name}", f"must be positive, got {getattr(self, name)}")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where compute and memory time are equal."""
        return self.bf16_flops / self.hbm_bytes_per_s


# Today's common models (shapes from each model's Hugging Face config.json; the published
# parameter counts they are tested against are cited in tests/test_catalog_2025.py).
_MODELS_2025: tuple[ModelSpec, ...] = (
    ModelSpec("llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, 131072,
              aliases=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B"),
              source="meta-llama/Llama-3.1-8B config.json"),
    ModelSpec("llama-3.1-70b", "meta-llama/Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256, 131072,
              aliases=("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B",
                       "meta-llama/Llama-3.3-70B-Instruct"),
              source="meta-llama/Llama-3.1-70B config.json"),
    ModelSpec("llama-3.1-405b", "meta-llama/Llama-3.1-405B", 126, 16384, 128, 8, 53248, 128256, 131072,
              aliases=("meta-llama/Llama-3.1-405B-Instruct", "meta-llama/Llama-3.1-405B-Instruct-FP8"),
              source="meta-llama/Llama-3.1-405B config.json"),
    ModelSpec("qwen2.5-7b", "Qwen/Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, 131072,
              aliases=("Qwen/Qwen2.5-7B-Instruct",), source="Qwen/Qwen2.5-7B config.json"),
    ModelSpec("qwen2.5-72b", "Qwen/Qwen2.5-72B", 80, 8192, 64, 8, 29568, 152064, 131072,
              aliases=("Qwen/Qwen2.5-72B-Instruct",), source="Qwen/Qwen2.5-72B config.json"),
    ModelSpec("qwen3-32b", "Qwen/Qwen3-32B", 64, 5120, 64, 8, 25600, 151936, 40960, explicit_head_dim=128,
              source="Qwen/Qwen3-32B config.json"),
    ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 2048, 32, 4, 6144, 151936, 40960, explicit_head_dim=128,
              num_experts=128, num_experts_per_tok=8, expert_ffn_size=768,
              aliases=("Qwen/Qwen3-30B-A3B-Instruct-2507",), source="Qwen/Qwen3-30B-A3B config.json"),
    ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 94, 4096, 64, 4, 12288, 151936, 40960, explicit_head_dim=128,
              num_experts=128, num_experts_per_tok=8, expert_ffn_size=1536,
              aliases=("Qwen/Qwen3-235B-A22B-Instruct-2507",), source="Qwen/Qwen3-235B-A22B config.json"),
    ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768,
              num_experts=8, num_experts_per_tok=2, expert_ffn_size=14336,
              aliases=("mistralai/Mixtral-8x7B-Instruct-v0.1",), source="mistralai/Mixtral-8x7B-v0.1 config.json"),
    ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", 61, 7168, 128, 128, 18432, 129280, 163840,
              num_experts=256, num_experts_per_tok=8, expert_ffn_size=2048, num_shared_experts=1,
              num_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
              v_head_dim=128, aliases=("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3-0324", "deepseek-r1"),
              source="deepseek-ai/DeepSeek-V3 config.json (the 14B multi-token-prediction module is not served)"),
    # GPT-OSS: every other layer attends over a 128-token sliding window (layer_types).
    ModelSpec("gpt-oss-20b", "openai/gpt-oss-20b", 24, 2880, 64, 8, 2880, 201088, 131072, explicit_head_dim=64,
              num_experts=32, num_experts_per_tok=4, expert_ffn_size=2880, sliding_window=128, num_sliding_layers=12,
              source="openai/gpt-oss-20b config.json"),
    ModelSpec("gpt-oss-120b", "openai/gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 131072, explicit_head_dim=64,
              num_experts=128, num_experts_per_tok=4, expert_ffn_size=2880, sliding_window=128, num_sliding_layers=18,
              source="openai/gpt-oss-120b config.json"),
    # Llama-4 Scout: chunked local attention (8192) on 3 of 4 layers, priced as a sliding window;
    # max_model_len is a 128K serving default (the config allows 10M positions).
    ModelSpec("llama-4-scout", "meta-llama/Llama-4-Scout-17B-16E", 48, 5120, 40, 8, 16384, 202048, 131072,
              explicit_head_dim=128, num_experts=16, num_experts_per_tok=1, expert_ffn_size=8192,
              num_shared_experts=1, sliding_window=8192, num_sliding_layers=36,
              aliases=("meta-llama/Llama-4-Scout-17B-16E-Instruct",),
              source="meta-llama/Llama-4-Scout-17B-16E config.json text_config"),
)

_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("llama-2-7b", "meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008, 32000, 4096,
              aliases=("meta-llama/Llama-2-7b-chat-hf",)),
    ModelSpec("llama-2-13b", "meta-llama/Llama-2-13b-hf", 40, 5120, 40, 40, 13824, 32000, 4096,
              aliases=("meta-llama/Llama-2-13b-chat-hf",)),
    ModelSpec("llama-2-70b", "meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672, 32000, 4096,
              aliases=("meta-llama/Llama-2-70b-chat-hf",)),
    ModelSpec("llama-3-8b", "meta-llama/Meta-Llama-3-8B", 32, 4096, 32, 8, 14336, 128256, 8192,
              aliases=("meta-llama/Meta-Llama-3-8B-Instruct",)),
    ModelSpec("llama-3-70b", "meta-llama/Meta-Llama-3-70B", 80, 8192, 64, 8, 28672, 128256, 8192,
              aliases=("meta-llama/Meta-Llama-3-70B-Instruct",)),
    ModelSpec("mistral-7b", "mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768,
              aliases=("mistralai/Mistral-7B-Instruct-v0.2",)),
    ModelSpec("yi-34b", "01-ai/Yi-34B", 60, 7168, 56, 8, 20480, 64000, 4096),
    ModelSpec("yi-34b-200k", "01-ai/Yi-34B-200K", 60, 7168, 56, 8, 20480, 64000, 200000),
    ModelSpec("codellama-34b", "codellama/CodeLlama-34b-hf", 48, 8192, 64, 8, 22016, 32000, 16384,
              aliases=("codellama/CodeLlama-34b-Instruct-hf",)),
    ModelSpec("qwen-72b", "Qwen/Qwen-72B", 80, 8192, 64, 64, 24576, 152064, 32768),
    ModelSpec("internlm-20b", "internlm/internlm-20b", 60, 5120, 40, 40, 13824, 103168, 4096),
    ModelSpec("phi-2", "microsoft/phi-2", 32, 2560, 32, 32, 10240, 51200, 2048, gated_mlp=False,
              activation="gelu", norm="layernorm", parallel_attn_mlp=True, rotary=True),
    ModelSpec("falcon-180b", "tiiuae/falcon-180B", 80, 14848, 232, 8, 59392, 65024, 2048, gated_mlp=False,
              activation="gelu", norm="layernorm", parallel_attn_mlp=True, tied_embeddings=True),
    *_MODELS_2025,
    # Small models for CPU profiling and tests.
    ModelSpec("tiny-llama-1b", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", 22, 2048, 32, 4, 5632, 32000, 2048),
)

_GPUS: tuple[GPUSpec, ...] = (
    GPUSpec("a100-40gb", 312 * TFLOPS, 1555 * GB, 40 * GiB, 300 * GB, 32 * GB, aliases=("a100-sxm4-40gb",)),
    GPUSpec("a100-80gb", 312 * TFLOPS, 2039 * GB, 80 * GiB, 300 * GB, 32 * GB, aliases=("a100", "a100-sxm4-80gb")),
    GPUSpec("a40", 149.7 * TFLOPS, 696 * GB, 48 * GiB, 56.25 * GB, 32 * GB),
    GPUSpec("l40s", 362 * TFLOPS, 864 * GB, 48 * GiB, 0.0, 32 * GB, fp8_flops=733 * TFLOPS),
    GPUSpec("h100-sxm", 989 * TFLOPS, 3350 * GB, 80 * GiB, 450 * GB, 64 * GB, aliases=("h100", "h100-sxm5-80gb"),
            fp8_flops=1979 * TFLOPS),
    GPUSpec("h100-pcie", 756 * TFLOPS, 2000 * GB, 80 * GiB, 300 * GB, 64 * GB, fp8_flops=1513 * TFLOPS),
    GPUSpec("h200", 989 * TFLOPS, 4800 * GB, 141 * GB, 450 * GB, 64 * GB, aliases=("h200-sxm",),
            fp8_flops=1979 * TFLOPS),
    # Newer parts: dense (non-sparse) peaks; NVLink and Infinity Fabric per direction (half the
    # bidirectional figure the datasheets print).
    GPUSpec("b200", 2250 * TFLOPS, 8000 * GB, 180 * GB, 900 * GB, 64 * GB, aliases=("b200-sxm", "hgx-b200"),
            fp8_flops=4500 * TFLOPS,
            nvlink_switch=True,
            source="NVIDIA DGX B200 datasheet (72/144 PFLOPS FP8 train/infer for 8 GPUs, 1440 GB HBM3e, 64 TB/s) "
                   "and HGX B200 spec table: per GPU 2.25 PF BF16 and 4.5 PF FP8 dense, 8 TB/s, NVLink5 1.8 TB/s"),
    GPUSpec("gb200", 2500 * TFLOPS, 8000 * GB, 186 * GB, 900 * GB, 64 * GB, aliases=("gb200-nvl72",),
            fp8_flops=5000 * TFLOPS,
            nvlink_switch=True,
            source="NVIDIA GB200 NVL72 spec table, per GPU (1/72): 2.5 PF BF16 and 5 PF FP8 dense, 186 GB HBM3e "
                   "(13.4 TB / 72), 8 TB/s, NVLink5 1.8 TB/s"),
    GPUSpec("mi300x", 1307.4 * TFLOPS, 5300 * GB, 192 * GB, 448 * GB, 64 * GB, aliases=("amd-mi300x",),
            fp8_flops=2614.9 * TFLOPS,
            nvlink_switch=True,
            source="AMD Instinct MI300X datasheet: 1307.4 TF BF16 and 2614.9 TF FP8 dense, 192 GB HBM3, 5.3 TB/s, "
                   "Infinity Fabric 896 GB/s aggregate peer bandwidth, PCIe Gen5 x16"),
    GPUSpec("h20", 148 * TFLOPS, 4000 * GB, 96 * GB, 450 * GB, 64 * GB, aliases=("h20-sxm",), fp8_flops=296 * TFLOPS,
            nvlink_switch=True,
            source="NVIDIA H20 product brief: 148 TF BF16 and 296 TF FP8 dense, 96 GB HBM3, 4.0 TB/s, NVLink 900 GB/s"),
    GPUSpec("l4", 121 * TFLOPS, 300 * GB, 24 * GB, 0.0, 32 * GB, fp8_flops=242.5 * TFLOPS,
            source="NVIDIA L4 datasheet: 242 TF BF16 and 485 TF FP8 with sparsity (half dense), 24 GB GDDR6, "
                   "300 GB/s, PCIe Gen4 x16"),
    # A generic host CPU, so the profile -> fit -> simulate path runs (and is tested) without a GPU.
    GPUSpec("cpu", 1 * TFLOPS, 50 * GB, 16 * GiB, 0.0, 16 * GB),
)


def _index(specs: tuple) -> dict:
    table: dict = {}
    for spec in specs:
        keys = [spec.name, *spec.aliases]
        if isinstance(spec, ModelSpec):
            keys.append(spec.hf_id)
        for key in keys:
            assert key.lower() not in table, f"duplicate catalog key {key}"
            table[key.lower()] = spec
    return table


MODELS: dict[str, ModelSpec] = {m.name: m for m in _MODELS}
GPUS: dict[str, GPUSpec] = {g.name: g for g in _GPUS}
_MODEL_KEYS = _index(_MODELS)
_GPU_KEYS = _index(_GPUS)


def get_model(name: str) -> ModelSpec:
    """Exact lookup by short name or Hugging Face id (case-insensitive); a path to a Hugging Face
    ``config.json`` (or its folder) is read by :mod:`simulator.config.hf_config`."""
    try:
        return _MODEL_KEYS[name.lower()]
    except KeyError:
        from simulator.config.hf_config import is_path_like, load_hf_model  # late: hf_config imports this module

        if is_path_like(name):
            return load_hf_model(name)
        raise ConfigError("model", f"unknown model {name!r}",
                          f"known: {', '.join(MODELS)}; `simulate models` lists them") from None


def get_gpu(name: str) -> GPUSpec:
    """Exact lookup by short name or alias (case-insensitive); a path to a TOML/JSON GPU table is
    read by :func:`simulator.config.hf_config.load_gpu_file`."""
    try:
        return _GPU_KEYS[name.lower()]
    except KeyError:
        from simulator.config.hf_config import is_path_like, load_gpu_file

        if is_path_like(name):
            return load_gpu_file(name)
        raise ConfigError("gpu", f"unknown GPU {name!r}",
                          f"known: {', '.join(GPUS)}; `simulate gpus` lists them") from None
