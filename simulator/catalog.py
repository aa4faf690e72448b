"""Model and GPU catalogs: named tables with exact lookup.

A :class:`ModelSpec` holds what the cost model and the KV cache need to know about a
decoder-only transformer (layer count, widths, GQA, MLP shape, vocabulary, context
length). A :class:`GPUSpec` holds a spec-sheet view of an accelerator (dense bf16
peak, HBM bandwidth and size, NVLink and PCIe bandwidth per direction).

Lookup is exact on the short lowercase name or on a Hugging Face id given as an
alias; anything else is a :class:`~simulator.errors.ConfigError` listing the known
names. Figures come from the models' Hugging Face ``config.json`` files and the
vendors' datasheets (dense, i.e. without structured sparsity).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from simulator.errors import ConfigError

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

    def __post_init__(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_size", "vocab_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"model.{name}", f"must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_heads:
            raise ConfigError("model.num_heads", f"{self.num_heads} does not divide hidden size {self.hidden_size}")
        if self.num_heads % self.num_kv_heads:
            raise ConfigError("model.num_kv_heads", f"{self.num_kv_heads} does not divide {self.num_heads} heads")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def q_size(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        attn = self.hidden_size * (self.q_size + 2 * self.kv_size) + self.q_size * self.hidden_size
        mlp = (3 if self.gated_mlp else 2) * self.hidden_size * self.ffn_size
        norms = 2 * self.hidden_size
        return attn + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        lm_head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.num_layers * self.params_per_layer + self.embedding_params + lm_head

    def kv_bytes_per_token_per_layer(self, dtype_bytes: int = 2) -> int:
        """K and V for one token in one layer, all KV heads (before TP sharding)."""
        return 2 * self.num_kv_heads * self.head_dim * dtype_bytes


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

    def __post_init__(self) -> None:
        for name in ("bf16_flops", "hbm_bytes_per_s", "memory_bytes", "pcie_bytes_per_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"gpu.{name}", f"must be positive, got {getattr(self, name)}")

    @property
    def ridge_flops_per_byte(self) -> float:
        """Arithmetic intensity where compute and memory time are equal."""
        return self.bf16_flops / self.hbm_bytes_per_s


_MODELS: tuple[ModelSpec, ...] = (
    ModelSpec("llama-2-7b", "meta-llama/Llama-2-7b-hf", 32, 4096, 32, 32, 11008, 32000, 4096,
              aliases=("meta-llama/Llama-2-7b-chat-hf",)),
    ModelSpec("llama-2-13b", "meta-llama/Llama-2-13b-hf", 40, 5120, 40, 40, 13824, 32000, 4096,
              aliases=("meta-llama/Llama-2-13b-chat-hf",)),
    ModelSpec("llama-2-70b", "meta-llama/Llama-2-70b-hf", 80, 8192, 64, 8, 28672, 32000, 4096,
              aliases=("meta-llama/Llama-2-70b-chat-hf",)),
    ModelSpec("llama-3-8b", "meta-llama/Meta-Llama-3-8B", 32, 4096, 32, 8, 14336, 128256, 8192,
              aliases=("meta-llama/Meta-Llama-3-8B-Instruct", "meta-llama/Llama-3.1-8B",
                       "meta-llama/Llama-3.1-8B-Instruct")),
    ModelSpec("llama-3-70b", "meta-llama/Meta-Llama-3-70B", 80, 8192, 64, 8, 28672, 128256, 8192,
              aliases=("meta-llama/Meta-Llama-3-70B-Instruct", "meta-llama/Llama-3.1-70B",
                       "meta-llama/Llama-3.1-70B-Instruct")),
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
    # Small models for CPU profiling and tests.
    ModelSpec("tiny-llama-1b", "TinyLlama/TinyLlama-1.1B-Chat-v1.0", 22, 2048, 32, 4, 5632, 32000, 2048),
)

_GPUS: tuple[GPUSpec, ...] = (
    GPUSpec("a100-40gb", 312 * TFLOPS, 1555 * GB, 40 * GiB, 300 * GB, 32 * GB, aliases=("a100-sxm4-40gb",)),
    GPUSpec("a100-80gb", 312 * TFLOPS, 2039 * GB, 80 * GiB, 300 * GB, 32 * GB, aliases=("a100", "a100-sxm4-80gb")),
    GPUSpec("a40", 149.7 * TFLOPS, 696 * GB, 48 * GiB, 56.25 * GB, 32 * GB),
    GPUSpec("l40s", 362 * TFLOPS, 864 * GB, 48 * GiB, 0.0, 32 * GB),
    GPUSpec("h100-sxm", 989 * TFLOPS, 3350 * GB, 80 * GiB, 450 * GB, 64 * GB, aliases=("h100", "h100-sxm5-80gb")),
    GPUSpec("h100-pcie", 756 * TFLOPS, 2000 * GB, 80 * GiB, 300 * GB, 64 * GB),
    GPUSpec("h200", 989 * TFLOPS, 4800 * GB, 141 * GB, 450 * GB, 64 * GB, aliases=("h200-sxm",)),
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
    """Exact lookup by short name or Hugging Face id (case-insensitive)."""
    try:
        return _MODEL_KEYS[name.lower()]
    except KeyError:
        raise ConfigError("model", f"unknown model {name!r}",
                          f"known: {', '.join(MODELS)}; `simulate models` lists them") from None


def get_gpu(name: str) -> GPUSpec:
    """Exact lookup by short name or alias (case-insensitive)."""
    try:
        return _GPU_KEYS[name.lower()]
    except KeyError:
        raise ConfigError("gpu", f"unknown GPU {name!r}",
                          f"known: {', '.join(GPUS)}; `simulate gpus` lists them") from None
