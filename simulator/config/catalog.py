"""Model and GPU catalogs: named tables with exact lookup.

A :class:`ModelSpec` holds what the cost model and the KV cache need to know about a
decoder-only transformer (layer count, widths, GQA, MLP shape, vocabulary, context
length). A :class:`GPUSpec` holds a spec-sheet view of an accelerator (dense bf16
peak, HBM bandwidth and size, NVLink and PCIe bandwidth per direction).

Lookup is exact (case-insensitive) on the short lowercase name, on a Hugging Face id
given as an alias, or on such an id's repository name alone; anything else is a :class:`~simulator.config.errors.ConfigError` listing the known
names. Figures come from the models' Hugging Face ``config.json`` files and the
vendors' datasheets (dense, i.e. without structured sparsity).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from simulator.config.errors import ConfigError
from simulator.config.hf_config import is_path_like, load_gpu_file, load_hf_model
from simulator.config.specs import GB, TFLOPS, GiB, GPUSpec, ModelSpec

__all__ = ["GB", "GPUS", "MODELS", "TFLOPS", "GPUSpec", "GiB", "ModelSpec", "get_gpu", "get_model"]


_MODELS_2025: tuple[ModelSpec, ...] = (
    ModelSpec("llama-3.1-8b", "meta-llama/Llama-3.1-8B", 32, 4096, 32, 8, 14336, 128256, 131072,
              aliases=("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Meta-Llama-3.1-8B"),
              source="meta-llama/Llama-3.1-8B config.json"),
    ModelSpec("llama-3.1-70b", "meta-llama/Llama-3.1-70B", 80, 8192, 64, 8, 28672, 128256, 131072,
              aliases=("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Meta-Llama-3.1-70B"),
              source="meta-llama/Llama-3.1-70B config.json"),
    # Llama 3.3 70B has 3.1 70B's shape but is another model (other weights, other results): its own entry.
    ModelSpec("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", 80, 8192, 64, 8, 28672, 128256, 131072,
              source="meta-llama/Llama-3.3-70B-Instruct config.json"),
    ModelSpec("llama-3.2-3b", "meta-llama/Llama-3.2-3B", 28, 3072, 24, 8, 8192, 128256, 131072,
              tied_embeddings=True, aliases=("meta-llama/Llama-3.2-3B-Instruct",),
              source="meta-llama/Llama-3.2-3B-Instruct config.json (tie_word_embeddings: true)"),
    ModelSpec("llama-3.1-405b", "meta-llama/Llama-3.1-405B", 126, 16384, 128, 8, 53248, 128256, 131072,
              aliases=("meta-llama/Llama-3.1-405B-Instruct",), source="meta-llama/Llama-3.1-405B config.json"),
    # Meta's own FP8 checkpoint (fbgemm_fp8, rowwise scales) quantises the FFNs but for the first and last layers'
    # and keeps self-attention at BF16 (Llama 3 paper, section 6.2; its config.json's modules_to_not_convert): 487 GB
    # of weights where FP8 everywhere would be 410, 56.7 GiB a GPU at TP8 against the 57.75 GiB vLLM logged loading
    # it (vLLM issue 6746). Its own entry, so that --dtype fp8 prices that checkpoint; the plain entry with --dtype
    # fp8 is one that quantises every layer (as vLLM's --quantization fp8 does a BF16 checkpoint).
    ModelSpec("llama-3.1-405b-fp8", "meta-llama/Llama-3.1-405B-Instruct-FP8", 126, 16384, 128, 8, 53248, 128256,
              131072, checkpoint_quant="fp8", quant_16bit_attention=True, quant_16bit_mlp_layers=(0, 125),
              source="meta-llama/Llama-3.1-405B config.json; meta-llama/Llama-3.1-405B-Instruct-FP8 config.json "
                     "quantization_config (modules_to_not_convert: every self_attn, layers 0 and 125's mlp, lm_head)"),
    ModelSpec("qwen2.5-7b", "Qwen/Qwen2.5-7B", 28, 3584, 28, 4, 18944, 152064, 131072,
              aliases=("Qwen/Qwen2.5-7B-Instruct",), source="Qwen/Qwen2.5-7B config.json"),
    ModelSpec("qwen2.5-72b", "Qwen/Qwen2.5-72B", 80, 8192, 64, 8, 29568, 152064, 131072,
              aliases=("Qwen/Qwen2.5-72B-Instruct",), source="Qwen/Qwen2.5-72B config.json"),
    ModelSpec("qwen3-8b", "Qwen/Qwen3-8B", 36, 4096, 32, 8, 12288, 151936, 40960, explicit_head_dim=128,
              aliases=("Qwen/Qwen3-8B-Base",), source="Qwen/Qwen3-8B config.json"),
    ModelSpec("qwen3-32b", "Qwen/Qwen3-32B", 64, 5120, 64, 8, 25600, 151936, 40960, explicit_head_dim=128,
              source="Qwen/Qwen3-32B config.json"),
    ModelSpec("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 48, 2048, 32, 4, 6144, 151936, 40960, explicit_head_dim=128,
              num_experts=128, num_experts_per_tok=8, expert_ffn_size=768, source="Qwen/Qwen3-30B-A3B config.json"),
    ModelSpec("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", 94, 4096, 64, 4, 12288, 151936, 40960, explicit_head_dim=128,
              num_experts=128, num_experts_per_tok=8, expert_ffn_size=1536, source="Qwen/Qwen3-235B-A22B config.json"),
    # The 2507 updates: the same shapes, other weights, and a native context of 262,144 (their config.json's
    # max_position_embeddings), where the first release's is 40,960.
    ModelSpec("qwen3-30b-a3b-2507", "Qwen/Qwen3-30B-A3B-Instruct-2507", 48, 2048, 32, 4, 6144, 151936, 262144,
              explicit_head_dim=128, num_experts=128, num_experts_per_tok=8, expert_ffn_size=768,
              aliases=("Qwen/Qwen3-30B-A3B-Thinking-2507",), source="Qwen/Qwen3-30B-A3B-Instruct-2507 config.json"),
    ModelSpec("qwen3-235b-a22b-2507", "Qwen/Qwen3-235B-A22B-Instruct-2507", 94, 4096, 64, 4, 12288, 151936, 262144,
              explicit_head_dim=128, num_experts=128, num_experts_per_tok=8, expert_ffn_size=1536,
              aliases=("Qwen/Qwen3-235B-A22B-Thinking-2507",), source="Qwen/Qwen3-235B-A22B-Instruct-2507 config.json"),
    ModelSpec("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768,
              num_experts=8, num_experts_per_tok=2, expert_ffn_size=14336,
              aliases=("mistralai/Mixtral-8x7B-Instruct-v0.1",), source="mistralai/Mixtral-8x7B-v0.1 config.json"),
    ModelSpec("deepseek-v3", "deepseek-ai/DeepSeek-V3", 61, 7168, 128, 128, 18432, 129280, 163840,
              num_experts=256, num_experts_per_tok=8, expert_ffn_size=2048, num_shared_experts=1,
              num_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
              v_head_dim=128, aliases=("deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3-0324", "deepseek-r1"),
              num_mtp_layers=1,
              source="deepseek-ai/DeepSeek-V3 config.json (the 14B multi-token-prediction module serves only as "
                     "the mtp drafter)"),
    # DeepSeek Sparse Attention (index_*): DeepSeek-V3's shape with a lightning indexer of 64 heads of 128 picking
    # 2,048 keys a query (deepseek-ai/DeepSeek-V3.2-Exp inference/model.py ModelArgs at 6d8cb70; AIConfigurator's
    # sdk/operations/dsa.py DSA_MODEL_DIMS the same).
    ModelSpec("deepseek-v3.2", "deepseek-ai/DeepSeek-V3.2", 61, 7168, 128, 128, 18432, 129280, 163840,
              num_experts=256, num_experts_per_tok=8, expert_ffn_size=2048, num_shared_experts=1,
              num_dense_layers=3, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
              v_head_dim=128, index_topk=2048, index_num_heads=64, index_head_dim=128, num_mtp_layers=1,
              aliases=("deepseek-ai/DeepSeek-V3.2-Exp",),
              source="deepseek-ai/DeepSeek-V3.2-Exp config.json / inference/model.py (DeepSeek-V3 with DSA)"),
    # GLM-5 (glm_moe_dsa): MLA at 64 heads (qk 192 + 64 rope, v 256), DSA with a 32-head indexer, 3 dense layers
    # then 256 experts top-8 and one shared (transformers' GlmMoeDsaConfig; ai-dynamo/aiconfigurator
    # src/aiconfigurator/model_configs/zai-org--GLM-5-FP8_config.json at 691ec90, which omits the index_* keys).
    ModelSpec("glm-5", "zai-org/GLM-5", 78, 6144, 64, 64, 12288, 154880, 202752,
              num_experts=256, num_experts_per_tok=8, expert_ffn_size=2048, num_shared_experts=1,
              num_dense_layers=3, q_lora_rank=2048, kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64,
              v_head_dim=256, index_topk=2048, index_num_heads=32, index_head_dim=128, num_mtp_layers=1,
              aliases=("zhipuai/GLM-5", "zai-org/GLM-5-FP8"),
              source="zai-org/GLM-5 config.json (GlmMoeDsaConfig; via AIConfigurator's model_configs)"),
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
    # Kimi-K2.5: DeepSeek-V3's text architecture (MLA, 1 dense layer then MoE with 1 shared expert)
    # at 64 heads and 384 routed experts. Shape from its config.json text_config as AIConfigurator
    # keeps it: ai-dynamo/aiconfigurator src/aiconfigurator/model_configs/moonshotai--Kimi-K2.5_config.json
    # (61 layers, hidden 7168, 64 heads, intermediate 18432, vocab 163840, 262144 positions, 384 experts
    # top-8 of width 2048, n_shared_experts 1, first_k_dense_replace 1, q_lora 1536, kv_lora 512,
    # qk_nope 128, qk_rope 64, v 128, tie_word_embeddings false). The MoonViT vision tower (text rows
    # never run it) is left out.
    ModelSpec("kimi-k2.5", "moonshotai/Kimi-K2.5", 61, 7168, 64, 64, 18432, 163840, 262144,
              num_experts=384, num_experts_per_tok=8, expert_ffn_size=2048, num_shared_experts=1,
              num_dense_layers=1, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
              v_head_dim=128, checkpoint_quant="int4", int4_group_size=32, quant_16bit_mlp_layers=(0,),
              quant_16bit_shared_experts=True,
              source="moonshotai/Kimi-K2.5 config.json text_config (via ai-dynamo/aiconfigurator "
                     "src/aiconfigurator/model_configs/moonshotai--Kimi-K2.5_config.json); language model only. Its "
                     "checkpoint is INT4 (compressed-tensors pack-quantized, group_size 32, the routed experts only: "
                     "self_attn, shared_experts and the dense layer's mlp are in its ignore list, as Kimi-K2-Thinking's)"),
    # MiniMax-M2.5: full softmax attention on every layer (attn_type_list all 1), GQA 48/8 with
    # head_dim 128 (not hidden / heads = 64), 256 routed experts top-8 of width 1536 on all 62 layers,
    # no shared expert (shared_intermediate_size 0), vocab 200064, 196608 positions, untied
    # embeddings. Source: the MiniMax-M2 series config.json (MiniMaxM2ForCausalLM; MiniMax-AI/
    # MiniMax-M2.5 docs/transformers_deploy_guide.md: M2, M2.1 and M2.5 differ only in the model name),
    # as published for MiniMax-M2.1 (HF QuixiAI/MiniMax-M2.1-bf16 config.json) and for M2.5's derived
    # configs (HF tiny-random/minimax-m2.5 config.json: 256 experts, top-8, vocab 200064, 196608
    # positions); the M2.5 repository's own config.json was not readable here. Partial RoPE (64 of
    # 128 dims) and QK-norm cost next to nothing and are not modelled; the 3 MTP modules serve only as the mtp drafter.
    ModelSpec("minimax-m2.5", "MiniMaxAI/MiniMax-M2.5", 62, 3072, 48, 8, 1536, 200064, 196608,
              explicit_head_dim=128, num_experts=256, num_experts_per_tok=8, expert_ffn_size=1536, num_mtp_layers=3,
              source="MiniMax-M2 series config.json (MiniMaxM2ForCausalLM), see the comment above"),
    # Hybrids: three of every four layers are Gated DeltaNet linear attention (full_attention_interval 4),
    # the fourth gated full attention (q_proj also emits an output gate); every layer's MLP is a MoE with
    # one shared expert. The MTP module (mtp_num_hidden_layers) serves only as the mtp drafter; Qwen3.5's
    # vision tower is not served.
    ModelSpec("qwen3-next-80b-a3b", "Qwen/Qwen3-Next-80B-A3B-Instruct", 48, 2048, 16, 2, 5120, 151936, 262144,
              explicit_head_dim=256, num_experts=512, num_experts_per_tok=10, expert_ffn_size=512,
              num_shared_experts=1, shared_expert_ffn_size=512, num_linear_layers=36, linear_num_key_heads=16,
              linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128, attn_output_gate=True,
              num_mtp_layers=1, aliases=("Qwen/Qwen3-Next-80B-A3B-Thinking",),
              source="Qwen/Qwen3-Next-80B-A3B-Thinking config.json (as AIConfigurator keeps it)"),
    ModelSpec("qwen3.5-397b-a17b", "Qwen/Qwen3.5-397B-A17B", 60, 4096, 32, 2, 1024, 248320, 262144,
              explicit_head_dim=256, num_experts=512, num_experts_per_tok=10, expert_ffn_size=1024,
              num_shared_experts=1, shared_expert_ffn_size=1024, num_linear_layers=45, linear_num_key_heads=16,
              linear_num_value_heads=64, linear_key_head_dim=128, linear_value_head_dim=128, attn_output_gate=True,
              num_mtp_layers=1, linear_state_dtype_bytes=4.0,
              aliases=("Qwen/Qwen3.5-397B-A17B-FP8", "nvidia/Qwen3.5-397B-A17B-NVFP4"),
              source="Qwen/Qwen3.5-397B-A17B config.json text_config (as AIConfigurator keeps it); the recurrent "
                     "state at float32, the Qwen3.5 configs' mamba_ssm_dtype (AIConfigurator's copy drops the "
                     "field), as vLLM and TensorRT-LLM read it and SGLang keeps it by default"),
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
    # v0.2 attends over its whole 32K context; v0.1 (same shape) over a 4096-token window in every layer
    # (its config.json's sliding_window): one entry priced both until v0.1 got its own.
    ModelSpec("mistral-7b", "mistralai/Mistral-7B-Instruct-v0.2", 32, 4096, 32, 8, 14336, 32000, 32768,
              source="mistralai/Mistral-7B-Instruct-v0.2 config.json"),
    ModelSpec("mistral-7b-v0.1", "mistralai/Mistral-7B-v0.1", 32, 4096, 32, 8, 14336, 32000, 32768,
              aliases=("mistralai/Mistral-7B-Instruct-v0.1",), sliding_window=4096, num_sliding_layers=32,
              source="mistralai/Mistral-7B-v0.1 config.json"),
    # v0.3: v0.1's shape with a 32768-token vocabulary.
    ModelSpec("mistral-7b-v0.3", "mistralai/Mistral-7B-v0.3", 32, 4096, 32, 8, 14336, 32768, 32768,
              aliases=("mistralai/Mistral-7B-Instruct-v0.3",), source="mistralai/Mistral-7B-Instruct-v0.3 config.json"),
    # LLaMA-1's 33B ("llama-30b" on the Hub): Vicuna-33B-v1.3 is a fine-tune of it (Spec-Bench's largest target).
    ModelSpec("llama-33b", "huggyllama/llama-30b", 60, 6656, 52, 52, 17920, 32000, 2048,
              aliases=("lmsys/vicuna-33b-v1.3", "vicuna-33b"),
              source="LLaMA-30B config.json (hidden 6656, 60 layers, 52 heads, FFN 17920, 2,048 positions); "
                     "lmsys/vicuna-33b-v1.3 keeps the shape"),
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

# Figures checked against NVIDIA AIConfigurator's system files (ai-dynamo/aiconfigurator at 095f58a,
# aic-core/src/aiconfigurator_core/systems/<system>.yaml, copied under
# ../shared/data/profiles/aiconfigurator/systems/): gpu.mem_capacity, mem_bw, *_tc_flops (dense),
# node.intra_node_bw and pcie_bw (per direction). Memory there is what nvidia-smi reports (MiB),
# which is what an engine's gpu_memory_utilization multiplies.
MiB = 1024**2
_AIC = "AIConfigurator systems/"
_GPUS: tuple[GPUSpec, ...] = (
    GPUSpec("a100-40gb", 312 * TFLOPS, 1555 * GB, 40 * GiB, 300 * GB, 32 * GB, aliases=("a100-sxm4-40gb",)),
    GPUSpec("a100-80gb", 312 * TFLOPS, 2039 * GB, 80 * GiB, 300 * GB, 32 * GB, aliases=("a100", "a100-sxm4-80gb"),
            source=f"{_AIC}a100_sxm.yaml: 312 TF BF16, no FP8, 80 GiB, 2.039 TB/s, NVLink 300 GB/s, PCIe4 32 GB/s"),
    GPUSpec("a40", 149.7 * TFLOPS, 696 * GB, 48 * GiB, 56.25 * GB, 32 * GB),
    # GeForce GA102: FP16/BF16 tensor cores run at half rate with FP32 accumulation (what PyTorch's half
    # matmuls use), 71 TF dense; 142 TF only with FP16 accumulation. No NVLink switch (a 2-card bridge at most).
    GPUSpec("rtx-3090", 71 * TFLOPS, 936 * GB, 24 * GiB, 0.0, 32 * GB, aliases=("geforce-rtx-3090",),
            source="NVIDIA Ampere GA102 whitepaper (GeForce RTX 3090): 71 TF FP16/BF16 tensor with FP32 accumulate "
                   "dense, 24 GB GDDR6X, 936 GB/s, PCIe4 x16"),
    # 46068 MiB (was 48 GiB, the marketing figure: ECC leaves nvidia-smi 46068 MiB); 362 TF BF16 kept
    # (the file's 362.05 differs by 0.01%).
    GPUSpec("l40s", 362 * TFLOPS, 864 * GB, 46068 * MiB, 0.0, 32 * GB, fp8_flops=733 * TFLOPS,
            source=f"{_AIC}l40s.yaml: 362 TF BF16, 733 TF FP8 dense, 46068 MiB GDDR6, 864 GB/s, PCIe4 32 GB/s"),
    # FP8 1979 TF (datasheet: 3958 sparse / 2) where the file rounds to 1978.
    GPUSpec("h100-sxm", 989 * TFLOPS, 3350 * GB, 80 * GiB, 450 * GB, 64 * GB, aliases=("h100", "h100-sxm5-80gb"),
            fp8_flops=1979 * TFLOPS, nvlink_switch=True,
            source=f"{_AIC}h100_sxm.yaml: 989 TF BF16, 1979 TF FP8 dense, 80 GiB, 3.35 TB/s, NVLink 450 GB/s"),
    GPUSpec("h100-pcie", 756 * TFLOPS, 2000 * GB, 80 * GiB, 300 * GB, 64 * GB, fp8_flops=1513 * TFLOPS),
    # 141 GiB (was 141 GB, 7% less than nvidia-smi's 143771 MiB).
    GPUSpec("h200", 989 * TFLOPS, 4800 * GB, 141 * GiB, 450 * GB, 64 * GB, aliases=("h200-sxm",),
            fp8_flops=1979 * TFLOPS, nvlink_switch=True,
            source=f"{_AIC}h200_sxm.yaml: 989 TF BF16, 1979 TF FP8 dense, 141 GiB HBM3e, 4.8 TB/s, NVLink 450 GB/s"),
    # Newer parts: dense (non-sparse) peaks; NVLink and Infinity Fabric per direction (half the
    # bidirectional figure the datasheets print).
    # B200: 180 GiB (was 180 GB), 7.7 TB/s (was 8, the early spec), PCIe6 128 GB/s (was 64) as the file has them.
    GPUSpec("b200", 2250 * TFLOPS, 7700 * GB, 180 * GiB, 900 * GB, 128 * GB, aliases=("b200-sxm", "hgx-b200"),
            fp8_flops=4500 * TFLOPS, fp4_flops=9000 * TFLOPS,
            nvlink_switch=True,
            source=f"{_AIC}b200_sxm.yaml: 2.25 PF BF16, 4.5 PF FP8, 9 PF FP4 dense, 180 GiB HBM3e, 7.7 TB/s, NVLink5 "
                   "900 GB/s, PCIe6 128 GB/s; NVIDIA HGX B200 spec table"),
    # GB200: 189471 MiB (was 186 GB = 13.4 TB / 72).
    GPUSpec("gb200", 2500 * TFLOPS, 8000 * GB, 189471 * MiB, 900 * GB, 64 * GB, aliases=("gb200-nvl72",),
            fp8_flops=5000 * TFLOPS, fp4_flops=10000 * TFLOPS,
            nvlink_switch=True, nvlink_domain_gpus=72,
            source=f"{_AIC}gb200.yaml: 2.5 PF BF16, 5 PF FP8, 10 PF FP4 dense, 189471 MiB HBM3e, 8 TB/s, NVLink5 "
                   "900 GB/s across the 72-GPU rack; NVIDIA GB200 NVL72 spec table"),
    GPUSpec("b300", 2250 * TFLOPS, 7750 * GB, 275040 * MiB, 900 * GB, 128 * GB, aliases=("b300-sxm", "hgx-b300"),
            fp8_flops=4500 * TFLOPS, fp4_flops=14000 * TFLOPS,
            nvlink_switch=True,
            source=f"{_AIC}b300_sxm.yaml: 2.25 PF BF16, 4.5 PF FP8, 14 PF FP4 dense, 275040 MiB HBM3e, 7.75 TB/s "
                   "(62 TB/s / 8), NVLink5 900 GB/s, PCIe6 128 GB/s"),
    GPUSpec("gb300", 2500 * TFLOPS, 8000 * GB, 284208 * MiB, 900 * GB, 64 * GB, aliases=("gb300-nvl72",),
            fp8_flops=5000 * TFLOPS, fp4_flops=15000 * TFLOPS,
            nvlink_switch=True, nvlink_domain_gpus=72,
            source=f"{_AIC}gb300.yaml: 2.5 PF BF16, 5 PF FP8, 15 PF FP4 dense, 284208 MiB HBM3e, 8 TB/s, NVLink5 "
                   "900 GB/s across the 72-GPU rack"),
    # RTX PRO 6000 Blackwell Server Edition: no NVLink; GPUs talk over PCIe5 x16. Peaks at the
    # 2430 MHz boost clock the file scales them to.
    GPUSpec("rtx-pro-6000", 467.800534963698 * TFLOPS, 1792 * GB, 97887 * MiB, 0.0, 64 * GB,
            aliases=("rtx-pro-6000-server", "rtx-pro-6000-blackwell"),
            fp8_flops=935.601069927397 * TFLOPS, fp4_flops=1871.202139854795 * TFLOPS,
            source=f"{_AIC}rtx_pro_6000_server.yaml: 467.8 TF BF16, 935.6 TF FP8, 1871.2 TF FP4 dense at 2430 MHz, "
                   "97887 MiB GDDR7, 1.792 TB/s, PCIe5 x16 64 GB/s"),
    GPUSpec("mi300x", 1307.4 * TFLOPS, 5300 * GB, 196288 * MiB, 448 * GB, 64 * GB, aliases=("amd-mi300x",),
            fp8_flops=2614.9 * TFLOPS,
            nvlink_switch=True, mesh_links=7,
            source="AMD Instinct MI300X datasheet: 1307.4 TF BF16 and 2614.9 TF FP8 dense, 192 GB HBM3 (196,288 "
                   "MiB as a MI300X reports its global memory), 5.3 TB/s, "
                   "Infinity Fabric 896 GB/s aggregate peer bandwidth over 7 links of 128 GB/s (64 GB/s a direction) "
                   "to the other 7 GPUs of its server, PCIe Gen5 x16"),
    GPUSpec("h20", 148 * TFLOPS, 4000 * GB, 97871 * MiB, 450 * GB, 64 * GB, aliases=("h20-sxm",), fp8_flops=296 * TFLOPS,
            nvlink_switch=True,
            source="NVIDIA H20 product brief: 148 TF BF16 and 296 TF FP8 dense, 96 GB HBM3 (97,871 MiB as nvidia-smi reports "
                   "it), 4.0 TB/s, NVLink 900 GB/s"),
    GPUSpec("l4", 121 * TFLOPS, 300 * GB, 23034 * MiB, 0.0, 32 * GB, fp8_flops=242.5 * TFLOPS,
            source="NVIDIA L4 datasheet: 242 TF BF16 and 485 TF FP8 with sparsity (half dense), 24 GB GDDR6 (23,034 "
                   "MiB as nvidia-smi reports it, ECC on), 300 GB/s, PCIe Gen4 x16"),
    # Workstation and GeForce parts vLLM is often benchmarked on: PCIe cards without an NVLink switch. Dense
    # tensor peaks with FP32 accumulation (what BF16 and FP8 GEMMs use): GeForce parts run it at half the rate
    # of FP16 accumulation, professional ones (RTX 6000 Ada, RTX A6000, L40) at full rate. Memory as nvidia-smi
    # reports it, which vLLM's --gpu-memory-utilization multiplies (ECC off on workstation cards, on on the L40: their
    # defaults); the 24 GB as sold of a 4090 is 22.4 GiB, 7% less than its 24,564 MiB.
    GPUSpec("rtx-4090", 165.2 * TFLOPS, 1008 * GB, 24564 * MiB, 0.0, 32 * GB, aliases=("geforce-rtx-4090",),
            fp8_flops=330.3 * TFLOPS,
            source="NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 165.2 TF FP16/BF16 and 330.3 TF "
                   "FP8 tensor with FP32 accumulate, dense; 24 GB GDDR6X, 1008 GB/s; PCIe4 x16"),
    GPUSpec("rtx-5090", 209.5 * TFLOPS, 1792 * GB, 32607 * MiB, 0.0, 64 * GB, aliases=("geforce-rtx-5090",),
            fp8_flops=419 * TFLOPS, fp4_flops=1676 * TFLOPS,
            source="NVIDIA GeForce RTX 5090 (GB202) specifications: 209.5 TF FP16/BF16 and 419 TF FP8 tensor with FP32 "
                   "accumulate, dense (838 TF FP16 with sparsity, halved twice); FP4 1676 TF dense (the 3352 'AI "
                   "TOPS' with sparsity, halved); 32 GB GDDR7, 1792 GB/s; PCIe5 x16"),
    GPUSpec("rtx-6000-ada", 364.2 * TFLOPS, 960 * GB, 49140 * MiB, 0.0, 32 * GB, aliases=("rtx-6000-ada-generation",),
            fp8_flops=728.5 * TFLOPS,
            source="NVIDIA RTX 6000 Ada Generation datasheet: 1457 TF FP8 tensor with sparsity (728.5 dense), 364.2 "
                   "TF FP16/BF16 dense; 48 GB GDDR6 with ECC, 960 GB/s; PCIe4 x16"),
    GPUSpec("rtx-a6000", 154.8 * TFLOPS, 768 * GB, 49140 * MiB, 56.25 * GB, 32 * GB, aliases=("a6000",),
            source="NVIDIA RTX A6000 datasheet: 309.7 TF tensor with sparsity (154.8 dense FP16/BF16); 48 GB GDDR6, "
                   "768 GB/s; a 2-card NVLink bridge at 112.5 GB/s both ways; PCIe4 x16"),
    GPUSpec("l40", 181.05 * TFLOPS, 864 * GB, 46068 * MiB, 0.0, 32 * GB, fp8_flops=362.1 * TFLOPS,
            source="NVIDIA L40 datasheet: 181.05 TF BF16 and 362.1 TF FP8 tensor dense (362.1 / 724 with sparsity); "
                   "48 GB GDDR6 with ECC, 864 GB/s; PCIe4 x16"),
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


def _repo_names(specs: tuple[ModelSpec, ...], taken: dict) -> dict:
    """Hugging Face ids without their organisation ("Llama-3.3-70B-Instruct" for
    "meta-llama/Llama-3.3-70B-Instruct"), as vLLM users often type them; a repository name
    that two organisations share is left out (it would be a guess)."""
    owners: dict[str, set] = {}
    for spec in specs:
        for key in (spec.hf_id, *spec.aliases):
            if "/" in key:
                owners.setdefault(key.split("/", 1)[1].lower(), set()).add(spec.name)
    return {repo: next(s for s in specs if s.name == next(iter(names)))
            for repo, names in owners.items() if len(names) == 1 and repo not in taken}


MODELS: dict[str, ModelSpec] = {m.name: m for m in _MODELS}
GPUS: dict[str, GPUSpec] = {g.name: g for g in _GPUS}
_MODEL_KEYS = _index(_MODELS)
_MODEL_KEYS.update(_repo_names(_MODELS, _MODEL_KEYS))
_GPU_KEYS = _index(_GPUS)


def _nearest(name: str, keys: Mapping[str, ModelSpec | GPUSpec]) -> str:
    """" (did you mean X?)" where one catalog name or alias (``keys``) is ``name`` but for its separators and case
    (``llama3.1-70b``, ``h200sxm``) or close to it by spelling with the same numbered words (``qwen3-32``; never
    ``llama-3.1-7b`` for llama-3.1-70b nor ``h100-80gb`` for a100-80gb, others), X the canonical name; else ""."""
    import difflib

    def squeeze(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    same = [k for k in keys if squeeze(k) == squeeze(name)]
    close = same or [k for k in difflib.get_close_matches(name.lower(), list(keys), n=3, cutoff=0.8)
                     if re.findall(r"[a-z]*\d+", k) == re.findall(r"[a-z]*\d+", name.lower())]
    return f" (did you mean {keys[close[0]].name}?)" if close else ""


def get_model(name: str) -> ModelSpec:
    """Exact lookup by short name or Hugging Face id (case-insensitive); a path to a Hugging Face
    ``config.json`` (or its folder) is read by :mod:`simulator.config.hf_config`."""
    try:
        return _MODEL_KEYS[name.lower()]
    except KeyError:
        if is_path_like(name):
            return load_hf_model(name)
        raise ConfigError("model", f"unknown model {name!r}{_nearest(name, _MODEL_KEYS)}",
                          f"known: {', '.join(MODELS)} (`simulate models` lists them); or pass the path of the "
                          "model's Hugging Face config.json") from None


def get_gpu(name: str) -> GPUSpec:
    """Exact lookup by short name or alias (case-insensitive); a path to a TOML/JSON GPU table is
    read by :func:`simulator.config.hf_config.load_gpu_file`."""
    try:
        return _GPU_KEYS[name.lower()]
    except KeyError:
        if is_path_like(name):
            return load_gpu_file(name)
        raise ConfigError("gpu", f"unknown GPU {name!r}{_nearest(name, _GPU_KEYS)}",
                          f"known: {', '.join(GPUS)}; `simulate gpus` lists them") from None
