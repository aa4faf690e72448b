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

from simulator.config.errors import ConfigError
from simulator.config.hf_config import is_path_like, load_gpu_file, load_hf_model
from simulator.config.specs import GB, TFLOPS, GiB, GPUSpec, ModelSpec

__all__ = ["GB", "GPUS", "MODELS", "TFLOPS", "GPUSpec", "GiB", "ModelSpec", "get_gpu", "get_model"]


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
        if is_path_like(name):
            return load_gpu_file(name)
        raise ConfigError("gpu", f"unknown GPU {name!r}",
                          f"known: {', '.join(GPUS)}; `simulate gpus` lists them") from None
