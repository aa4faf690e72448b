"""Numeric formats of today's deployments: weight formats, KV-cache formats, and the peak a GEMM runs at.

A weight format (``--dtype``) fixes three things the simulator prices:

- **bytes per weight**, scales included: what the memory plan reserves and what a GEMM streams
  from HBM. Per-tensor FP8 carries one scale per tensor (1 B); block FP8 (DeepSeek-V3's
  checkpoint format) one fp32 scale per 128 x 128 block (``1 + 4 / 16384`` B); NVFP4 one FP8 (E4M3)
  scale per 16 values (``0.5 + 1 / 16`` B); MXFP4 one E8M0 scale per 32 values (``0.5 + 1 / 32`` B);
  INT4 weight-only (GPTQ/AWQ, w4a16) one bf16 scale per group of 128 (``0.5 + 2 / 128`` B).
- **the tensor cores its GEMMs use** (``compute``): ``fp8`` and ``fp8-block`` run W8A8 on FP8 tensor
  cores; ``nvfp4`` runs W4A4 on FP4 tensor cores (Blackwell); ``int4`` is weight-only (the weights
  are dequantised to bf16 in the kernel, activations stay 16-bit). ``mxfp4`` (gpt-oss's experts)
  is what the engine's MXFP4 MoE kernel makes of it, which no engine runs as W4A4: ``mxfp4-w4a8``
  (MXFP8 activations on FP8 tensor cores: FlashInfer's TensorRT-LLM MXFP4 x MXFP8 kernel on datacenter
  Blackwell, which TensorRT-LLM's TRTLLM MoE backend runs by default (its gpt-oss deployment guide),
  SGLang by default (``--flashinfer-mxfp4-moe-precision default``; ``bf16`` is the other choice) and vLLM
  where deployed with ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``, as gpt-oss recipes for B200 set it;
  TensorRT-LLM on the RTX PRO 6000 too) or ``mxfp4-w4a16`` (bf16 activations, the 4-bit weights
  dequantised in the kernel: every engine before Blackwell, vLLM and SGLang on the RTX PRO 6000).
  :func:`kernel_format` resolves ``mxfp4`` for a run's engine backend and GPU; the two explicit
  spellings choose the kernel.
- **where the GPU lacks those tensor cores** the format is priced as *weight-only*: the weights
  are stored and streamed at their own bytes, the math runs at the bf16 peak. This is what the
  engines do: vLLM serves FP8 checkpoints on Ampere and NVFP4/MXFP4 checkpoints on Hopper and
  Ampere with its Marlin weight-only kernels (gpt-oss's MXFP4 on an H100 is the common case), so
  such a run is not refused; the run's header says "weight-only".

KV-cache formats (``--kv-cache-dtype``): ``auto`` stores K and V at the activation dtype
(``dtype_bytes``, 2 for bf16/fp16), as vLLM's ``auto`` does; ``fp8`` (and vLLM's spellings
``fp8_e4m3``, ``fp8_e5m2``) stores one byte per element (per-tensor scales, negligible).

**4-bit checkpoints of MoE models quantise the routed experts only** (:data:`EXPERT_ONLY_FORMATS`):
the attention projections and the router gate stay at 16 bits, as the published ones ship them
(gpt-oss's MXFP4 experts, Kimi-K2's INT4 experts, NVIDIA's NVFP4 DeepSeek-R1 and MiniMax-M2.5
checkpoints, whose ModelOpt exclusion lists name ``self_attn`` and the MoE ``gate``; DeepSeek-R1-0528-FP4
v2 quantises the attention output too, which this rule prices at 16 bits). Shared experts and dense
layers' MLPs are priced at the format, but for a catalog checkpoint that keeps them at 16 bits where ``--dtype`` is
its format (Kimi-K2.5's INT4: its shared experts and layer 0's MLP, in memory; its scales every 32 weights,
``ModelSpec.int4_group_size``, in memory and GEMMs). A dense
model's 4-bit checkpoint quantises every linear layer of its decoder, as a dense model's FP8 one does, but for a catalog
entry of a checkpoint that keeps more at 16 bits where ``--dtype`` is its format (``ModelSpec.quant_16bit_attention``,
``quant_16bit_mlp_layers``: Meta's FP8 Llama-3.1-405B keeps self-attention and layers 0 and 125's MLPs at BF16, Llama 3
paper section 6.2; the attention is priced at 16 bits in memory and GEMMs, those two MLPs in memory). **Every quantized checkpoint keeps its
LM head (and embeddings) and MoE router gate at 16 bits** (``lm_head`` is in every FP8/FP4 exclusion list; engines
build the gate unquantised and whole on every GPU): memory plans them so and the cost models price them so
(``gemm16``).

Attention math stays at the bf16 peak for every format (FP8-KV decode kernels dequantise in
registers; decode attention is memory-bound, so the KV bytes are what changes its time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from simulator.config.specs import GPUSpec


@dataclass(frozen=True)
class WeightFormat:
    """One ``--dtype``: bytes per weight (scales included) and the tensor cores its GEMMs use."""

    name: str
    bytes_per_weight: float  # bf16/fp16: ReplicaConfig.weight_bytes uses the activation dtype's bytes
    compute: Literal["bf16", "fp8", "fp4"]  # tensor-core family where the GPU has it; else weight-only
    weight_only: bool  # activations stay 16-bit whatever the GPU (int4's w4a16)
    description: str

    def has_tensor_cores(self, gpu: GPUSpec) -> bool:
        """Whether ``gpu`` has the tensor cores this format's GEMMs want (always for bf16/fp16/int4)."""
        if self.compute == "fp4":
            return gpu.fp4_flops > 0
        if self.compute == "fp8":
            return gpu.fp8_flops > 0
        return True

    def peak_flops(self, gpu: GPUSpec) -> float:
        """Dense tensor-core peak this format's GEMMs run at on ``gpu``."""
        if self.compute == "fp4" and gpu.fp4_flops > 0:
            return gpu.fp4_flops
        if self.compute == "fp8" and gpu.fp8_flops > 0:
            return gpu.fp8_flops
        return gpu.bf16_flops

    def runs_weight_only(self, gpu: GPUSpec) -> bool:
        """Weights dequantised to 16 bits in the kernel: int4 anywhere, a low-precision format on a
        GPU without its tensor cores (fp8 before Hopper/Ada, FP4 before Blackwell)."""
        return self.weight_only or not self.has_tensor_cores(gpu)

    def describe(self, gpu: GPUSpec) -> str:
        """``nvfp4`` or ``nvfp4 (weight-only on h100-sxm: no FP4 tensor cores)`` for a run header."""
        if not self.has_tensor_cores(gpu):
            return f"{self.name} (weight-only on {gpu.name}: no {self.compute.upper()} tensor cores)"
        return self.name


# name -> format. bf16/fp16 bytes follow the activation dtype (``ReplicaConfig.dtype_bytes``).
WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("bf16", 2.0, "bf16", False, "bfloat16"),
    WeightFormat("fp16", 2.0, "bf16", False, "float16"),
    WeightFormat("fp8", 1.0, "fp8", False, "FP8 E4M3, one scale per tensor (W8A8)"),
    WeightFormat("fp8-block", 1.0 + 4.0 / (128 * 128), "fp8", False,
                 "FP8 E4M3, one fp32 scale per 128x128 block (DeepSeek-V3's checkpoints; W8A8)"),
    WeightFormat("nvfp4", 0.5 + 1.0 / 16, "fp4", False, "NVFP4: E2M1, one E4M3 scale per 16 values (W4A4)"),
    WeightFormat("mxfp4", 0.5 + 1.0 / 32, "bf16", True,
                 "MXFP4: E2M1, one E8M0 scale per 32 values (gpt-oss), run as the engine's MXFP4 MoE kernel runs it"),
    WeightFormat("mxfp4-w4a16", 0.5 + 1.0 / 32, "bf16", True, "MXFP4 weights, bf16 activations (w4a16_mxfp4)"),
    WeightFormat("mxfp4-w4a8", 0.5 + 1.0 / 32, "fp8", False, "MXFP4 weights, MXFP8 activations (w4a8_mxfp4_mxfp8)"),
    WeightFormat("int4", 0.5 + 2.0 / 128, "bf16", True, "INT4 weight-only, one bf16 scale per 128 (GPTQ/AWQ, w4a16)"),
)}
# Other spellings engines and checkpoints use -> the canonical name above.
# "fp4" is NVIDIA's FP4 as AIConfigurator and TensorRT-LLM label it (NVFP4; gpt-oss's MXFP4 is named apart).
WEIGHT_FORMAT_ALIASES = {"fp8_block": "fp8-block", "fp8-blockwise": "fp8-block", "w4a16": "int4",
                         "int4-wo": "int4", "int4_wo": "int4", "float16": "fp16", "bfloat16": "bf16", "fp4": "nvfp4"}

KV_CACHE_FORMATS = ("auto", "bf16", "fp16", "fp8")
KV_CACHE_ALIASES = {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "fp8-e4m3": "fp8", "fp8-e5m2": "fp8"}


def canonical_weight_format(name: str) -> str:
    """The catalog name of a ``--dtype`` spelling (unknown names pass through for the caller to refuse)."""
    key = name.lower()
    return WEIGHT_FORMAT_ALIASES.get(key, key)


def canonical_kv_format(name: str) -> str:
    key = name.lower()
    return KV_CACHE_ALIASES.get(key, key)


def kv_bytes_per_element(kv_cache_dtype: str, dtype_bytes: int) -> float:
    """Bytes of one cached K or V element: the activation dtype for auto/bf16/fp16, 1 for fp8."""
    return 1.0 if kv_cache_dtype == "fp8" else float(dtype_bytes)


# Formats whose MoE checkpoints quantise the routed experts and leave attention and the router at 16 bits.
EXPERT_ONLY_FORMATS = frozenset({"nvfp4", "mxfp4", "mxfp4-w4a16", "mxfp4-w4a8", "int4"})
MXFP4_FORMATS = frozenset({"mxfp4", "mxfp4-w4a16", "mxfp4-w4a8"})


# Datacenter Blackwell (sm_100/sm_103): where FlashInfer's TensorRT-LLM MXFP4 x MXFP8 MoE kernel runs (not sm_120).
MXFP8_MOE_GPUS = frozenset({"b200", "b300", "gb200", "gb300"})


def kernel_format(name: str, backend: str, gpu: GPUSpec) -> str:
    """The format a run's GEMMs and experts are priced in: ``name`` itself, except ``mxfp4``, which becomes
    the kernel ``backend`` (vllm, sglang, trtllm, or ``all`` for none named) runs MXFP4 experts with on ``gpu``:
    ``mxfp4-w4a8`` on datacenter Blackwell (:data:`MXFP8_MOE_GPUS`) and for TensorRT-LLM on any GPU with FP4
    tensor cores, else ``mxfp4-w4a16``."""
    if name != "mxfp4":
        return name
    mxfp8 = gpu.name in MXFP8_MOE_GPUS or (backend == "trtllm" and gpu.fp4_flops > 0)
    return "mxfp4-w4a8" if mxfp8 else "mxfp4-w4a16"


def describe_format(name: str, backend: str, gpu: GPUSpec) -> str:
    """A run header's dtype: ``WeightFormat.describe``, and for ``mxfp4`` the kernel that prices it."""
    resolved = kernel_format(name, backend, gpu)
    if resolved != name:
        whose = "no backend named" if backend == "all" else backend
        return f"{name} (as {resolved}: {whose}'s MXFP4 MoE kernel on {gpu.name})"
    return WEIGHT_FORMATS[name].describe(gpu)
