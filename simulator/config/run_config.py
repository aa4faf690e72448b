"""Run configuration: small frozen dataclasses, validated on construction.

A run is fully described by one :class:`RunConfig` (replica layout, scheduler knobs,
workload, cost model, cluster shape, seed). Configs are never mutated: derived values
(the effective token budget, the KV capacity) are computed from them by the code that
needs them. ``RunConfig.to_dict()`` is what ``config.json`` holds and
``RunConfig.from_dict()`` reads it back, so any run can be reproduced from its output.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.config.catalog import MODELS, GPUSpec, ModelSpec, get_gpu, get_model
from simulator.config.disagg_layout import (
    FALLBACK_POOL_SCHEDULER,
    DisaggLayout,
    check_link_name,
    prefix_cache_schedulers,
)
from simulator.config.errors import ConfigError
from simulator.config.inputs import INPUTS_KEY
from simulator.config.json_types import check_json_types
from simulator.config.limits import (  # the bounds (re-exported: callers import them from here too)
    CV_RANGE,
    MAX_BALANCE_ITERS,
    MAX_BLOCK_SIZE,
    MAX_CPU_KV_GIB,
    MAX_QPS,
    MAX_REPLICAS,
    MAX_REPLICAS_WHY,
    MAX_TOKENS,
    MIN_QPS,
    TIME_SCALE_RANGE,
)
from simulator.config.precision import (
    EXPERT_ONLY_FORMATS,
    KV_CACHE_FORMATS,
    WEIGHT_FORMATS,
    WeightFormat,
    canonical_kv_format,
    canonical_weight_format,
    kv_bytes_per_element,
)
from simulator.config.schedulers import (
    BATCH_WAIT_SCHEDULERS,
    CHUNKING_SCHEDULERS,
    DP_PADDINGS,
    MEMORY_BASES,
    PREFIX_CACHE_POLICIES,
    SCHEDULER_NAMES,
    SCHEDULERS,
)
from simulator.config.specs import redundant_experts_to_fit, tp_shard_problem
from simulator.config.speculative import SpeculativeConfig, check_drafter
from simulator.config.topology import build_topology

ARRIVALS = ("poisson", "gamma", "fixed", "burst", "trace")
OVER_LENGTH = ("drop", "clip")  # what a trace row longer than max_total_tokens becomes
WARMUP_MODES = ("steady", "drain")  # a closed loop's warm-up: inline, or a phase drained before the measured one
# How a session trace's turns are sent (WorkloadConfig.session_replay; simulator.workload.prefix_traces): at their
# recorded times (open), or each after the turn it waited for ends plus its recorded think time (closed).
SESSION_REPLAYS = ("open", "closed")
# Fields added after results were stored (sweep points, planned layouts): at these values result_key leaves them
# out, so a stored point's key stays what it was and its sweep resumes instead of running every point again.
LATER_FIELD_DEFAULTS: dict[tuple[str, str], Any] = {("workload", "session_replay"): "open",
                                                    ("replica", "moe_kernel"): "auto"}
# Fields whose default became None (the engine's own) after results were stored, with the value they held then: where
# every scheduler of a run plans its KV cache on the total basis (vLLM's rule, whose defaults these were), result_key
# writes that value for None, so a stored vLLM-family point's key stays what it was; an SGLang or TensorRT-LLM run's
# key changes with the cache its engine's rule now plans (SchedulerConfig.memory_fraction).
FORMER_DEFAULTS_ON_TOTAL: dict[tuple[str, str], Any] = {("replica", "gpu_memory_utilization"): 0.9,
                                                        ("replica", "memory_fraction_of"): "total"}
# How a benchmark client reads --random-range-ratio r: vllm bench serve draws each length in
# [len*(1-r), len*(1+r)] (r < 1; 0 is fixed); SGLang's bench_serving, and the older vLLM
# benchmark_serving.py copies such as InferenceX's, in [len*r, len] (r <= 1; 1 is fixed, their 0 is [1, len]).
RANGE_STYLES = ("vllm", "sglang")
ROUTERS = ("round_robin", "least_outstanding", "random", "prefix_aware", "session")  # simulator.engine.routers
# The engine preset a run gets unless it names one (simulator.costmodel.engine_model.ENGINES): today's vLLM,
# fitted on AIConfigurator's silicon rows of vLLM 0.11-0.18. The 2023 presets (vllm-2023-splitwise,
# sarathi-2023-vidur) stay for the paper reproductions, which name theirs.
DEFAULT_ENGINE = "vllm-2026"
# The preset names, here so a config validates without importing the cost models (numpy);
# engine_model asserts its ENGINES table has exactly these keys.
ENGINE_PRESETS = ("ideal", "handset", "vllm-2023-splitwise", "sarathi-2023-vidur", "vllm-v1", "vllm-2026", "sglang-2026",
                  "trtllm-2026")


def split_engine_spec(spec: str) -> tuple[str, str]:
    """``vllm-2026:handoff_s=0.02,cpu_iteration_s=0.001`` -> (``vllm-2026``, ``handoff_s=0.02,...``): a preset or
    artifact and its term overrides ('' where none; a Windows drive's ``C:`` has no ``=`` after it)."""
    base, sep, overrides = spec.rpartition(":")
    return (base, overrides) if sep and "=" in overrides else (spec, "")


def check_override_separators(spec: str, is_base: Callable[[str], bool]) -> None:
    """Refuse ``vllm-2026:a=1:b=2``, overrides joined by colons: split_engine_spec takes all but the last for the
    preset's name, which then is neither a preset nor an artifact (said so, with no word of the separator)."""
    first, colon, rest = spec.partition(":")
    if colon and ":" in rest and "=" in rest and is_base(first) and not is_base(spec):
        raise ConfigError("engine", f"{spec!r}: overrides are separated by commas, not colons",
                          f"e.g. {first}:{rest.replace(':', ',')}")


def check_override_has_value(spec: str, is_base: Callable[[str], bool]) -> None:
    """Refuse ``vllm-2026:cpu_iteration_s``, an override given without its ``=value`` (split_engine_spec reads it as
    no override at all, and the whole spec as a path): where what precedes the colon ``is_base`` (a preset or an
    artifact) and the whole spec is not, say the value is missing (it said "neither a preset nor an artifact")."""
    head, colon, tail = spec.rpartition(":")
    if colon and "=" not in tail and not is_base(spec) and is_base(head):
        raise ConfigError("engine", f"{spec!r}: the override {tail!r} has no value",
                          f"give NAME=VALUE after the colon, e.g. {head}:handoff_s=0.02")


# config.json's section of what `simulate run` reported the run with (its summary's SLOs, its views, the tables'
# format): none changes the simulation, and `simulate run --config` takes them back where not given again, so the
# folder it writes is the first one's (RunConfig.from_dict skips it; simulator.cli.run reads it).
REPORT_KEY = "report"


def engine_override_terms(spec: str) -> list[str]:
    """The term names an engine spec overrides, in order (checked by the cost model on load)."""
    overrides = split_engine_spec(spec)[1]
    return [item.partition("=")[0].strip() for item in overrides.split(",")] if overrides else []


# Weight dtypes and their bytes per parameter, scales included (simulator.config.precision): int4 is
# group-wise (128) with one bf16 scale per group; nvfp4/mxfp4 carry a scale per 16/32 values.
WEIGHT_DTYPE_BYTES = {name: f.bytes_per_weight for name, f in WEIGHT_FORMATS.items()}
KV_CACHE_DTYPES = KV_CACHE_FORMATS
# Kernel prices: the calibrated roofline, or an engine backend's measured kernel tables
# (NVIDIA AIConfigurator's database, simulator.costmodel.aic); named here so a config validates
# without importing the cost models.
KERNEL_TABLES = ("roofline", "vllm", "sglang", "trtllm")
# Roofline efficiency constants (simulator.costmodel.calibration): today (the default: fitted per GPU generation
# to AIConfigurator's kernel tables) or 2023 (Vidur/LLMServingSim profiles, the paper reproductions').
ROOFLINE_CALIBRATIONS = ("2023", "today")
MEMORY_FRACTION_OF = MEMORY_BASES  # ReplicaConfig.memory_fraction_of: total, static, free
# The memory fraction of the total and free bases unless --gpu-memory-utilization gives one: vLLM's
# --gpu-memory-utilization, TensorRT-LLM's free_gpu_memory_fraction (SGLang's static one is computed:
# sglang_mem_fraction_static).
DEFAULT_MEMORY_FRACTION = 0.9
# Each basis in words, after its fraction ("0.835 of memory for weights and KV cache"): run headers, error fixes.
MEMORY_BASIS_WORDS = {"total": "of total memory", "static": "of memory, SGLang's static share for weights and KV cache",
                      "free": "of the memory weights and activations leave, TensorRT-LLM's free fraction"}
# Disaggregated serving: who delivers the client's first token (RunConfig.first_token_at).
FIRST_TOKEN_AT = ("decode", "prefill")
# Disaggregated serving: what --kv-link describes (RunConfig.kv_link_scope; simulator.engine.disagg).
# "per-worker": each prefill worker's egress and each decode worker's ingress (its own NICs), transfers
# from different workers in parallel; "shared": one link, FIFO, that every transfer queues on.
KV_LINK_SCOPES = ("per-worker", "shared")


def _positive(section: str, name: str, value: float | int | None, *, allow_none: bool = False,
              flag: str | None = None) -> None:
    """``flag``: the command-line option that sets the field, where it is not ``--<name>``; ``section`` empty: a
    field of RunConfig itself (``num_replicas``), named as a config file and the CLI's flag map (cli.app.as_flag) have it."""
    if value is None and allow_none:
        return
    if value is None or (isinstance(value, float) and math.isnan(value)) or value <= 0:
        raise ConfigError(f"{section}.{name}" if section else name, f"must be positive, got {value}",
                          f"pass {flag or '--' + name.replace('_', '-')} > 0")


@dataclass(frozen=True)
class ReplicaConfig:
    """One model replica: a model on ``tp * pp`` GPUs of one kind, or, with attention data
    parallelism, ``attention_dp`` ranks of ``tp`` GPUs each (DeepSeek-style DP attention: every
    rank has its own batch, scheduler and KV cache; the MoE layers are sharded over all
    ``tp * attention_dp`` GPUs as ``moe_tp x moe_ep``; vLLM's ``--data-parallel-size N
    --enable-expert-parallel``, SGLang's ``--enable-dp-attention``). The engine runs each rank as
    a replica of its own behind the router (``RunConfig.num_ranks``); each rank's cost model
    prices the MoE layers for the tokens of all ranks, as if every rank carried its batch size
    (the ranks step together through each MoE layer's all-to-all).
    """

    model: str = "llama-2-7b"
    gpu: str = "a100-80gb"
    tp: int = 1
    pp: int = 1
    # The KV cache's memory fraction, and what it is a fraction of (MEMORY_FRACTION_OF): "total" (vLLM's
    # --gpu-memory-utilization: weights, activations and KV cache share that much of the GPU), "static" (SGLang's
    # --mem-fraction-static: weights and KV pool share it) or "free" (TensorRT-LLM's free_gpu_memory_fraction: the
    # KV cache gets that much of what weights and activations leave). None: the scheduler's engine's own
    # (SchedulerConfig.memory_fraction: vLLM's 0.9 of total, SGLang's computed static fraction, TensorRT-LLM's 0.9
    # of free).
    gpu_memory_utilization: float | None = None
    memory_fraction_of: str | None = None
    # KV block (page) in tokens; None: the engine's, 16, or for a hybrid model under vLLM's schedulers as many as
    # hold a linear-attention layer's state, as vLLM sets it (simulator.engine.kvcache.engine_block_size).
    block_size: int | None = None
    max_model_len: int | None = None  # default: the model's own context length
    dtype_bytes: int = 2  # the activations' width (bf16/fp16); weights: dtype, KV cache: kv_cache_dtype
    num_nodes: int = 1
    inter_node_link: str = "ethernet-100g"  # one NIC per node; '<nic>-x<N>': N NICs per node (topology)
    intra_node_link: str | None = None  # default: NVLink where the GPU has it, else PCIe
    allow_tp_across_nodes: bool = False
    # Numerics and experts (defaults: bf16 everything, no expert parallelism).
    # weights: bf16, fp16, fp8 / fp8-block (W8A8 where the GPU has FP8 tensor cores), nvfp4 (W4A4 on Blackwell's
    # FP4 tensor cores, else weight-only), mxfp4 (the engine's MXFP4 MoE kernel: mxfp4-w4a16 or mxfp4-w4a8), int4
    # (weight-only): simulator.config.precision
    dtype: str = "bf16"
    kv_cache_dtype: str = "auto"  # auto (= the activation dtype, dtype_bytes), bf16, fp16 or fp8
    ep: int = 1  # expert-parallel degree: experts split over ep GPUs of the MoE group (ep divides tp * attention_dp)
    moe_imbalance: float = 1.0  # busiest expert's (EP rank's) load over the mean; >= 1
    num_gpu_blocks: int | None = None  # KV blocks per replica, overriding the memory plan (vLLM's num_gpu_blocks_override)
    kernels: str = "roofline"  # kernel prices: roofline, or the vllm / sglang / trtllm kernel tables of the GPU
    # The MoE kernel those tables price: auto (the one the engine runs by default as deployed, another collector's
    # rows where its own collector did not time it: simulator.costmodel.aic.tables.LANE_DONORS), or a kernel source
    # of the run's own tables, named whole or by a part only it has (TensorRT-LLM's moe_config backend DEEPGEMM:
    # deepgemm; CUTLASS: cutlass; SGLang's --moe-runner-backend triton: triton).
    moe_kernel: str = "auto"
    attention_dp: int = 1  # attention data-parallel ranks (each tp GPUs, its own batch and KV cache)
    # The roofline's constants (ROOFLINE_CALIBRATIONS): today's kernels, fitted per GPU generation (a GPU of no
    # measured generation, e.g. MI300X or a GPU file, keeps the 2023 constants and the run header says so);
    # 2023 for the paper reproductions, which pin it.
    roofline_calibration: str = "today"
    # Extra copies of hot experts placed over the EP ranks for load balance (SGLang's --ep-num-redundant-experts,
    # vLLM's EPLB num_redundant_experts): every EP rank holds (num_experts + redundant_experts) / ep experts.
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        # Canonicalise names so an HF id and the short name give identical configs.
        object.__setattr__(self, "model", get_model(self.model).name)
        object.__setattr__(self, "gpu", get_gpu(self.gpu).name)
        object.__setattr__(self, "dtype", canonical_weight_format(self.dtype))  # fp8_block -> fp8-block, w4a16 -> int4
        object.__setattr__(self, "kv_cache_dtype", canonical_kv_format(self.kv_cache_dtype))  # fp8_e4m3 -> fp8
        _positive("replica", "tp", self.tp)
        _positive("replica", "pp", self.pp)
        _positive("replica", "block_size", self.block_size, allow_none=True)
        if self.block_size is not None and self.block_size > MAX_BLOCK_SIZE:
            raise ConfigError("replica.block_size", f"a KV block of {self.block_size:,} tokens is beyond any "
                              f"engine's (at most {MAX_BLOCK_SIZE:,})", "pass --block-size with a page size in tokens, e.g. 16")
        _positive("replica", "num_nodes", self.num_nodes, flag="--nodes")
        _positive("replica", "max_model_len", self.max_model_len, allow_none=True)
        _positive("replica", "num_gpu_blocks", self.num_gpu_blocks, allow_none=True)
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ConfigError("replica.gpu_memory_utilization", f"must be in (0, 1], got {self.gpu_memory_utilization}",
                              "a fraction of the GPU's memory, e.g. 0.9, vLLM's default (or leave it out: the engine's)")
        if self.memory_fraction_of is not None and self.memory_fraction_of not in MEMORY_FRACTION_OF:
            raise ConfigError("replica.memory_fraction_of", f"unknown basis {self.memory_fraction_of!r}",
                              f"use one of {', '.join(MEMORY_FRACTION_OF)} (or leave it out: the engine's)")
        if self.dtype_bytes != 2:  # the activations' width; weights and KV have their own fields
            raise ConfigError("replica.dtype_bytes", f"must be 2 (bf16/fp16 activations), got {self.dtype_bytes}",
                              "set the weights' format with dtype and the KV cache's with kv_cache_dtype")
        spec = self.model_spec
        if self.max_model_len is not None and self.max_model_len > spec.max_model_len and not spec.max_model_len_assumed:
            # vLLM refuses it too (without VLLM_ALLOW_LONG_MAX_MODEL_LEN): positions past the trained context
            # are not a deployment, and a longer limit would quietly admit prompts the model cannot serve.
            # (A config.json naming no length gives no trained context: vLLM then takes --max-model-len as given.)
            raise ConfigError("replica.max_model_len", f"{self.max_model_len:,} is beyond {spec.name}'s context of "
                              f"{spec.max_model_len:,} tokens", f"pass --max-model-len <= {spec.max_model_len:,}, or "
                              "a long-context variant of the model (simulate models) or its config.json")
        shard = tp_shard_problem(spec, self.tp)
        if shard is not None:
            raise ConfigError("replica.tp", *shard)
        if spec.is_sparse_attention and not get_gpu(self.gpu).fp8_flops:
            # (its indexer's DeepGEMM FP8 kernels; vLLM's and SGLang's DSA backends run on Hopper and Blackwell only)
            raise ConfigError("replica.gpu", f"{spec.name}'s sparse attention runs FP8 indexer kernels, and "
                              f"{self.gpu} has no FP8 tensor cores", "pick a Hopper or Blackwell GPU (simulate gpus)")
        if self.dtype not in WEIGHT_FORMATS:
            raise ConfigError("replica.dtype", f"unknown weight dtype {self.dtype!r}", f"use one of {', '.join(WEIGHT_FORMATS)}")
        if self.kernels not in KERNEL_TABLES:
            raise ConfigError("replica.kernels", f"unknown kernel prices {self.kernels!r}",
                              f"use one of {', '.join(KERNEL_TABLES)}")
        object.__setattr__(self, "moe_kernel", str(self.moe_kernel).strip().lower())
        if self.moe_kernel != "auto":
            if not self.moe_kernel:
                raise ConfigError("replica.moe_kernel", "is empty", "name a MoE kernel of the tables (e.g. deepgemm), "
                                  "or auto (the engine's default)")
            if not spec.is_moe:
                raise ConfigError("replica.moe_kernel", f"{spec.name} is a dense model: it runs no MoE kernel",
                                  "drop --moe-kernel, or pick a MoE --model")
            if self.kernels == "roofline":
                raise ConfigError("replica.moe_kernel", f"{self.moe_kernel!r} names a measured kernel of the tables, "
                                  "and the roofline prices from no table", "add --kernels vllm|sglang|trtllm, or drop "
                                  "--moe-kernel (a pool's moe=)")
        object.__setattr__(self, "roofline_calibration", str(self.roofline_calibration))  # a JSON 2023 is the year
        if self.roofline_calibration not in ROOFLINE_CALIBRATIONS:
            raise ConfigError("replica.roofline_calibration", f"unknown calibration {self.roofline_calibration!r}",
                              f"use one of {', '.join(ROOFLINE_CALIBRATIONS)}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ConfigError("replica.kv_cache_dtype", f"unknown KV cache dtype {self.kv_cache_dtype!r}",
                              f"use one of {', '.join(KV_CACHE_DTYPES)}")
        _positive("replica", "ep", self.ep)
        if self.ep > 1 and not spec.is_moe:
            raise ConfigError("replica.ep", f"ep={self.ep} but {spec.name} has no experts", "drop --ep for a dense model")
        _positive("replica", "attention_dp", self.attention_dp)
        if self.attention_dp > 1 and not spec.is_moe:
            raise ConfigError("replica.attention_dp", f"attention data parallelism shards MoE layers over the ranks, "
                              f"but {spec.name} has no experts", "for a dense model use --replicas N instead")
        if self.attention_dp > 1 and self.pp > 1:
            raise ConfigError("replica.attention_dp", "attention data parallelism with pipeline parallelism is not "
                              "modelled", "use --pp 1 with --attention-dp")
        if self.redundant_experts < 0 or (self.redundant_experts and self.ep == 1):
            raise ConfigError("replica.redundant_experts", f"redundant expert copies are spread over EP ranks, got "
                              f"{self.redundant_experts} with ep={self.ep}",
                              "give --redundant-experts N >= 0 with --ep > 1")
        group = self.tp * self.attention_dp
        slots = spec.num_experts + self.redundant_experts
        if self.ep > 1 and not group % self.ep and slots % self.ep:
            fit = redundant_experts_to_fit(spec.num_experts, self.redundant_experts, self.ep)
            raise ConfigError("replica.ep", f"ep={self.ep} must divide {spec.name}'s {spec.num_experts} experts"
                              + (f" and {self.redundant_experts} redundant copies" if self.redundant_experts else ""),
                              f"use an ep that divides {slots}, or place {fit} redundant "
                              "experts (--redundant-experts, SGLang's --ep-num-redundant-experts)")
        if self.ep > 1 and group % self.ep:
            if self.attention_dp == 1:
                raise ConfigError("replica.ep", f"ep={self.ep} must divide tp={self.tp}",
                                  "use --ep equal to --tp or one of its divisors, "
                                  "or add --attention-dp N for EP across data-parallel ranks")
            raise ConfigError("replica.ep", f"ep={self.ep} must divide tp x attention_dp = {group} GPUs",
                              f"use --ep {group} (vLLM's --enable-expert-parallel) or one of its divisors")
        # The busiest expert takes at most every token: its load over the mean is at most the expert count.
        most = max(spec.num_experts, 1)
        if self.moe_imbalance != 1.0 and not spec.is_moe:
            raise ConfigError("replica.moe_imbalance", f"{spec.name} is a dense model: it routes no tokens to "
                              f"experts, so an imbalance of {self.moe_imbalance:g} would do nothing",
                              "drop --moe-imbalance, or pick a MoE --model")
        if not 1.0 <= self.moe_imbalance <= most:
            raise ConfigError("replica.moe_imbalance", f"must be in [1, {most}] (busiest over mean load; {spec.name} "
                              f"has {spec.num_experts} experts), got {self.moe_imbalance}",
                              "pass --moe-imbalance between 1 (balanced) and the expert count")
        if self.pp > spec.num_layers:
            raise ConfigError("replica.pp", f"pp={self.pp} exceeds {spec.name}'s {spec.num_layers} layers",
                              f"use --pp <= {spec.num_layers}")
        # Layout: TP x PP GPUs on num_nodes nodes, TP groups inside nodes, known link names.
        build_topology(self.gpu_spec, self.tp, self.pp, self.num_nodes, self.intra_node_link,
                       self.inter_node_link, self.allow_tp_across_nodes, self.attention_dp)

    @property
    def model_spec(self) -> ModelSpec:
        return get_model(self.model)

    @property
    def gpu_spec(self) -> GPUSpec:
        return get_gpu(self.gpu)

    @property
    def num_gpus(self) -> int:
        """GPUs the replica occupies: ``tp * pp``, times the attention-DP ranks."""
        return self.tp * self.pp * self.attention_dp

    @property
    def moe_ep(self) -> int:
        """Expert-parallel degree of the MoE layers (experts split over this many GPUs)."""
        return self.ep

    @property
    def moe_tp(self) -> int:
        """Tensor-parallel degree of each expert: the MoE group's ``tp * attention_dp`` GPUs over ``ep``."""
        return self.tp * self.attention_dp // self.ep

    @property
    def weight_format(self) -> WeightFormat:
        return WEIGHT_FORMATS[self.dtype]

    @property
    def weight_bytes(self) -> float:
        """Bytes per weight of the transformer layers (embeddings and LM head stay at ``dtype_bytes``)."""
        group = self.model_spec.int4_group_size if self.runs_checkpoint_format else 0
        if group:  # the checkpoint's own INT4 group (a bf16 scale each; ModelSpec.int4_group_size)
            return 0.5 + 2.0 / group
        return WEIGHT_DTYPE_BYTES[self.dtype] if self.dtype not in ("bf16", "fp16") else float(self.dtype_bytes)

    @property
    def experts_only_quantized(self) -> bool:
        """A 4-bit checkpoint of an MoE model: its routed experts (and shared experts, dense MLPs) at ``dtype``,
        attention projections and the router gate at 16 bits (:data:`~simulator.config.precision.EXPERT_ONLY_FORMATS`)."""
        return self.dtype in EXPERT_ONLY_FORMATS and self.model_spec.is_moe

    @property
    def runs_checkpoint_format(self) -> bool:
        """The run's ``dtype`` is the format the model's checkpoint names (``ModelSpec.checkpoint_quant``): what
        that checkpoint keeps at 16 bits stays so (another ``dtype`` is some other checkpoint of the shape)."""
        return self.dtype == self.model_spec.checkpoint_quant

    @property
    def attention_16bit(self) -> bool:
        """Attention projections at ``dtype_bytes`` whatever ``dtype`` says, in memory and in their GEMMs: a 4-bit
        MoE checkpoint's, or a checkpoint's that keeps them so (``ModelSpec.quant_16bit_attention``,
        Meta's FP8 Llama-3.1-405B) where ``dtype`` is its format."""
        return self.experts_only_quantized or (self.runs_checkpoint_format and self.model_spec.quant_16bit_attention)

    @property
    def mlp_16bit_layers(self) -> tuple[int, ...]:
        """Layers whose dense MLP the run's checkpoint keeps at ``dtype_bytes`` (``ModelSpec.quant_16bit_mlp_layers``,
        where ``dtype`` is its format; else none). Memory only: the cost models price every layer as the mean one."""
        return self.model_spec.quant_16bit_mlp_layers if self.runs_checkpoint_format else ()

    @property
    def shared_experts_16bit(self) -> bool:
        """The run's checkpoint keeps its shared experts at ``dtype_bytes`` (``ModelSpec.quant_16bit_shared_experts``,
        where ``dtype`` is its format). Memory only, as :attr:`mlp_16bit_layers`."""
        return self.runs_checkpoint_format and self.model_spec.quant_16bit_shared_experts

    @property
    def params_16bit_per_layer(self) -> float:
        """Weights of a layer (the mean over layers) held at ``dtype_bytes`` whatever ``dtype`` says and sharded over
        TP: the softmax-attention projections (:attr:`attention_16bit`), else 0. (The MLPs of :attr:`mlp_16bit_layers`
        are counted where their layers are, and the router gate, 16-bit and whole on every GPU in every checkpoint,
        apart: :meth:`layer_weights_bytes`.)"""
        if not self.attention_16bit:
            return 0.0
        m = self.model_spec
        return m.num_kv_layers * m.attention_params / m.num_layers

    def layer_weights_bytes(self, num_layers: int | float, first_layer: int | None = None) -> float:
        """Bytes on one GPU of ``num_layers`` mean layers (``ModelSpec.params_per_layer``): routed experts, and
        EPLB's redundant copies of them, sharded over the whole MoE group (``tp x attention_dp`` GPUs), the rest
        over ``tp``; a 4-bit MoE checkpoint's attention projections at ``dtype_bytes``, as a checkpoint's that keeps
        its attention so. The router gate is whole on every GPU at ``dtype_bytes`` in every checkpoint (vLLM's and
        SGLang's gates are replicated, unquantised linears; FP8 and 4-bit checkpoints keep them at 16 bits). The
        memory plan's layers and an MTP/EAGLE drafter's layer alike. The dense MLPs a checkpoint keeps at 16 bits
        (:attr:`mlp_16bit_layers`) are counted in the layers ``first_layer`` onwards (a pipeline stage's), or,
        without it, as their mean share of ``num_layers``, and so are the dense and MoE layers' MLPs
        (``ModelSpec.num_dense_layers_in``); shared experts it keeps so (:attr:`shared_experts_16bit`)
        as their mean share. DSA's indexer is whole on every TP rank, as MLA's down-projections are
        (``ModelSpec.replicated_attention_params``)."""
        m, tp, wb, dp = self.model_spec, self.tp, self.weight_bytes, self.attention_dp
        # Routed experts' share of a layer (mean over layers): sharded over the whole MoE group.
        experts_per_layer = m.num_moe_layers * m.num_experts * m.expert_params / m.num_layers
        # Redundant copies of experts (EPLB) on top, spread over every GPU of the MoE group like the rest.
        redundant_per_layer = m.num_moe_layers * self.redundant_experts * m.expert_params / m.num_layers
        # A 4-bit MoE checkpoint keeps its attention projections at 16 bits (0 otherwise).
        p16 = self.params_16bit_per_layer
        router = m.hidden_size * m.num_experts  # one MoE layer's gate
        router_per_layer = m.num_moe_layers * router / m.num_layers
        rest = m.params_per_layer - p16 - router_per_layer
        if dp == 1:
            w = num_layers * rest / tp * wb
        else:
            w = num_layers * ((rest - experts_per_layer) / tp + experts_per_layer / (tp * dp)) * wb
        if p16:
            w += num_layers * p16 / tp * self.dtype_bytes
        w += num_layers * router_per_layer * self.dtype_bytes
        kept = self.mlp_16bit_layers
        if kept:  # each such MLP at dtype_bytes where the mean layer has it at wb
            held = (len(kept) * num_layers / m.num_layers if first_layer is None
                    else sum(first_layer <= i < first_layer + num_layers for i in kept))
            w += held * m.mlp_params(m.ffn_size) / tp * (self.dtype_bytes - wb)
        if self.shared_experts_16bit:  # sharded by TP like a dense MLP
            shared_per_layer = m.num_moe_layers * m.shared_expert_params / m.num_layers
            w += num_layers * shared_per_layer / tp * (self.dtype_bytes - wb)
        if m.replicated_attention_params and tp > 1:  # whole on every TP rank: the rest of them beside the share
            replicated_bytes = self.dtype_bytes if p16 else wb
            w += (num_layers * m.num_kv_layers / m.num_layers * m.replicated_attention_params * (1 - 1 / tp)
                  * replicated_bytes)
        w += num_layers * redundant_per_layer / (tp * dp) * wb
        if first_layer is not None and m.num_moe_layers and m.num_dense_layers:
            # A stage holds its own layers' MLPs (DeepSeek's dense ones are its first layers, so its first stage holds
            # more of them than the mean share and the rest fewer; Llama-4 Maverick's alternate:
            # ModelSpec.moe_layer_step).
            held_dense = m.num_dense_layers_in(first_layer, round(num_layers))
            dense_mlp = m.mlp_params(m.ffn_size) / tp * wb  # (a 16-bit one's extra is counted with kept above)
            moe_mlp = ((m.num_experts + self.redundant_experts) * m.expert_params / (tp * dp) * wb
                       + router * self.dtype_bytes
                       + m.shared_expert_params / tp * (self.dtype_bytes if self.shared_experts_16bit else wb))
            w += (held_dense - num_layers * m.num_dense_layers / m.num_layers) * (dense_mlp - moe_mlp)
        return w

    @property
    def kv_cache_bytes(self) -> float:
        """Bytes per cached K or V element."""
        return kv_bytes_per_element(self.kv_cache_dtype, self.dtype_bytes)

    @property
    def effective_max_model_len(self) -> int:
        return self.max_model_len or self.model_spec.max_model_len


def _large_vllm_gpu(gpu: GPUSpec | None) -> bool:
    """vLLM's rule for its larger batch defaults (EngineArgs.get_batch_defaults): 70 GiB of memory or
    more, and not an A100 (large budgets lowered A100 throughput, vLLM PR 17885)."""
    return gpu is not None and gpu.memory_bytes >= 70 * 2**30 and not gpu.name.startswith("a100")


def _sglang_chunk(gpu: GPUSpec | None) -> int:
    """SGLang's default --chunked-prefill-size by GPU memory (ServerArgs._handle_gpu_memory_settings):
    2048 under 35 GiB, 4096 under 60, 8192 under 160 (H100, H200), 16384 above (B200, B300);
    4096 where the memory is unknown, as SGLang falls back."""
    if gpu is None:
        return 4096
    gib = gpu.memory_bytes / 2**30
    return 2048 if gib < 35 else 4096 if gib < 60 else 8192 if gib < 160 else 16384


def _sglang_cuda_graph_max_bs(gpu: GPUSpec, tp: int) -> int:
    """SGLang's default --cuda-graph-max-bs by GPU memory and its ``tp_size`` (ServerArgs._handle_gpu_memory_settings):
    8 under 20 GiB; 24 (80 at TP >= 4) under 35; 32 (160) under 60; 256 (512) under 160 (H100, H200); 512 above."""
    gib = gpu.memory_bytes / 2**30
    if gib < 20:
        return 8
    if gib >= 160:
        return 512
    small, large = (24, 80) if gib < 35 else (32, 160) if gib < 60 else (256, 512)
    return small if tp < 4 else large


def sglang_mem_fraction_static(gpu: GPUSpec, tp: int, pp: int, attention_dp: int, chunk: int) -> float:
    """SGLang's default --mem-fraction-static (0.5.3 on, ServerArgs._handle_gpu_memory_settings): the GPU's memory
    less a reserve for what lives outside the static weights-and-KV share, over the memory, rounded to 3 decimals.
    The reserve, in MiB: 512 (attention metadata) + 1.5 per token of the prefill chunk (at least 2048; activations)
    + 2 per CUDA-graph batch slot (--cuda-graph-max-bs, :func:`_sglang_cuda_graph_max_bs`) + 1024 per 8 GPUs of TP x PP;
    with DP attention 3 more per slot per rank (4.5 above 300 slots); at least 10 GiB on a GPU above 60 GiB. SGLang's
    ``tp_size`` is every GPU of an attention-DP replica (``tp x attention_dp``), and ``chunk`` its
    --chunked-prefill-size before it is divided over the ranks. (Left out: speculative decoding's 2-6 GiB and
    piecewise CUDA graphs', which differ between releases, and a multimodal model's cut.)"""
    sglang_tp = tp * attention_dp
    slots = _sglang_cuda_graph_max_bs(gpu, sglang_tp)
    gpu_mib = gpu.memory_bytes / 2**20
    reserved = 512 + max(chunk, 2048) * 1.5 + slots * 2 + sglang_tp * pp / 8 * 1024
    if attention_dp > 1:
        reserved += slots * attention_dp * (4.5 if slots > 300 else 3)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduler policy and its knobs, named as vLLM names them.

    ``chunk_size`` is Sarathi-Serve's token budget tau (prefill chunks plus decodes per
    iteration). For ``sarathi``/``vllm-v1``/``sglang`` ``max_num_batched_tokens`` is the same
    budget; give one or the other. For ``vllm`` it caps the prompt tokens of one prefill batch, and must hold
    the context (:meth:`refuse_budget_below_context`).
    The default policy is today's vLLM's (V1: mixed batches under one budget, prefix caching on).
    ``max_num_seqs`` None is the policy's own default (:meth:`seq_limit`).
    """

    name: str = "vllm-v1"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    chunk_size: int | None = None
    watermark: float = 0.01
    # Automatic prefix caching (simulator.engine.prefix_cache): None is the engine's default, on
    # for vllm-v1 (vLLM V1 enables it by default) and off for the others; the policy names whose
    # rule (PREFIX_CACHE_POLICIES). Off, runs are exactly those without the feature.
    prefix_caching: bool | None = None
    prefix_cache_policy: str | None = None  # None: the engine's own (radix-lru for sglang, else vllm-lru)
    # CPU tier of the prefix cache: GiB of host memory per replica keeping the blocks evicted from
    # the GPUs (vLLM's offloading connector, LMCache), loaded over the GPU's host link on a hit;
    # 0 is none (the default).
    cpu_kv_gib: float = 0.0
    # SGLang's --scheduler-recv-interval: while busy, its scheduler takes new requests only every
    # this many iterations (1: every one, SGLang's default); sglang only.
    recv_interval: int = 1
    # TensorRT-LLM's attention-DP balance (attention_dp_config: enable_balance, timeout_iters,
    # batching_wait_iters; simulator.engine.dp_group.PromptBalance): an attention-DP replica holds new
    # prompts until every rank has one, at most this many iterations; 0 is off (the engines' default).
    dp_balance_timeout_iters: int = 0
    # ... and once every rank has one while every rank decodes, this many iterations more.
    dp_balance_batching_wait_iters: int = 0
    # TensorRT-LLM's batch waiting (batch_wait_timeout_iters, batch_wait_max_tokens_ratio;
    # simulator.engine.batch_wait): a replica without attention DP holds the new prompts of a step that
    # also decodes until the step's tokens reach ratio x the token budget, at most this many such steps;
    # 0 is off (the engine's default). Both or neither: either alone makes the engine stop waiting at once.
    batch_wait_timeout_iters: int = 0
    batch_wait_max_tokens_ratio: float = 0.0
    # What the MoE layers of an attention-DP step carry (schedulers.DP_PADDINGS): None is the engine's own
    # (SchedulerEntry.dp_padding: vLLM V1 pads every rank to the largest while each runs in a CUDA graph; SGLang and
    # TensorRT-LLM route the ranks' own tokens in a step that carries a prompt). Read only by an attention-DP replica
    # of a MoE model.
    dp_padding: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.name, str) and self.name.lower() in SCHEDULER_NAMES:  # any case, as --gpu and --model
            object.__setattr__(self, "name", self.name.lower())
        if self.name not in SCHEDULER_NAMES:
            raise ConfigError("scheduler", f"unknown scheduler {self.name!r}", f"known: {', '.join(SCHEDULER_NAMES)}")
        _positive("scheduler", "max_num_seqs", self.max_num_seqs, allow_none=True)
        _positive("scheduler", "max_num_batched_tokens", self.max_num_batched_tokens, allow_none=True)
        _positive("scheduler", "chunk_size", self.chunk_size, allow_none=True)
        for name in ("max_num_batched_tokens", "chunk_size"):  # else the run blames the GPU's memory (activations)
            value = getattr(self, name)
            if value is not None and value > MAX_TOKENS:
                raise ConfigError(f"scheduler.{name}", f"a budget of {value:,} tokens an iteration is beyond any "
                                  f"model's context (at most {MAX_TOKENS:,})", f"pass --{name.replace('_', '-')} with a token budget, "
                                  "e.g. 8192")
        _positive("scheduler", "recv_interval", self.recv_interval, flag="--scheduler-recv-interval")
        if self.recv_interval != 1 and self.name != "sglang":
            raise ConfigError("scheduler.recv_interval", f"only the sglang scheduler polls for requests, not {self.name}",
                              "drop --scheduler-recv-interval, or use --scheduler sglang")
        for name in ("dp_balance_timeout_iters", "dp_balance_batching_wait_iters"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BALANCE_ITERS:
                raise ConfigError(f"scheduler.{name}", f"must be an integer in [0, {MAX_BALANCE_ITERS}], got {value!r}",
                                  f"pass --{name.replace('_', '-')} N (TensorRT-LLM's recipes: timeout 60, batching 0)")
        if self.dp_balance_batching_wait_iters and not self.dp_balance_timeout_iters:
            raise ConfigError("scheduler.dp_balance_batching_wait_iters", "waits within the attention-DP balance, "
                              "which is off", "add --dp-balance-timeout-iters N, or drop --dp-balance-batching-wait-iters")
        if self.dp_balance_timeout_iters and self.name == "sglang":
            raise ConfigError("scheduler.dp_balance_timeout_iters", "is TensorRT-LLM's attention-DP balance; SGLang "
                              "schedules its DP ranks its own way", "drop --dp-balance-timeout-iters, or use another "
                              "--scheduler (trtllm, vllm-v1)")
        if self.dp_padding is not None and self.dp_padding not in DP_PADDINGS:
            raise ConfigError("scheduler.dp_padding", f"unknown attention-DP padding {self.dp_padding!r}",
                              f"pass --dp-padding with one of {', '.join(DP_PADDINGS)}")
        self._check_batch_wait()
        if not 0 <= self.watermark < 1:
            raise ConfigError("scheduler.watermark", f"must be in [0, 1), got {self.watermark}")
        if self.prefix_caching not in (None, True, False):
            raise ConfigError("scheduler.prefix_caching", f"must be true, false or null, got {self.prefix_caching!r}",
                              "pass --prefix-caching or --no-prefix-caching")
        if self.prefix_cache_policy is not None and self.prefix_cache_policy not in PREFIX_CACHE_POLICIES:
            raise ConfigError("scheduler.prefix_cache_policy", f"unknown policy {self.prefix_cache_policy!r}",
                              f"use one of {', '.join(PREFIX_CACHE_POLICIES)}")
        if isinstance(self.cpu_kv_gib, bool) or not isinstance(self.cpu_kv_gib, int | float) or \
                not math.isfinite(self.cpu_kv_gib) or self.cpu_kv_gib < 0:
            raise ConfigError("scheduler.cpu_kv_gib", f"must be a number of GiB >= 0, got {self.cpu_kv_gib!r}")
        if self.cpu_kv_gib > MAX_CPU_KV_GIB:
            raise ConfigError("scheduler.cpu_kv_gib", f"must be at most {MAX_CPU_KV_GIB:,.0f} GiB (1 PiB) of host "
                              f"memory per replica, got {self.cpu_kv_gib:g}", "pass --cpu-kv-gib with the host "
                              "memory a replica keeps KV blocks in, e.g. 512")
        # Whether a CPU tier has a prefix cache to keep is the run's to say (RunConfig._check_cpu_tier): a
        # disaggregated run's pools may cache under schedulers of their own (sched=) where this one does not.
        if (self.name in CHUNKING_SCHEDULERS and self.chunk_size and self.max_num_batched_tokens
                and self.chunk_size != self.max_num_batched_tokens):
            raise ConfigError("scheduler.chunk_size", f"{self.name} has one token budget but chunk_size={self.chunk_size} "
                              f"and max_num_batched_tokens={self.max_num_batched_tokens}", "give only one")

    @property
    def prefix_cache(self) -> str | None:
        """The prefix cache policy the replicas run, or None when caching is off."""
        # On by default where the engine has it on (vLLM v1's prefix caching, SGLang's radix cache).
        default = SCHEDULERS[self.name].prefix_cache
        on = default is not None if self.prefix_caching is None else self.prefix_caching
        if not on:
            return None
        return self.prefix_cache_policy or default or "vllm-lru"

    def seq_limit(self, gpu: GPUSpec | None = None, num_kv_tokens: int | None = None,
                  max_model_len: int | None = None) -> int:
        """Requests one iteration may carry: ``max_num_seqs`` where given, else the engine's default.
        vLLM V1's API server: 1024 on GPUs of 70 GiB or more but the A100, else 256
        (EngineArgs.get_batch_defaults). SGLang: ``num_kv_tokens / max_model_len * 512`` held in
        [2048, 4096] (its model runner's max_num_reqs; 2048 before the KV cache is sized). TensorRT-LLM:
        2048 (``trtllm-serve``'s max_batch_size, BuildConfig's; its 128 is the largest CUDA-graph batch,
        not a cap on what it schedules). The 2023-era policies keep 128, the batch cap the paper
        reproductions (and Vidur) were made with."""
        if self.max_num_seqs is not None:
            return self.max_num_seqs
        if self.name == "vllm-v1":
            return 1024 if _large_vllm_gpu(gpu) else 256
        if self.name == "sglang":
            if not num_kv_tokens or not max_model_len:
                return 2048
            return min(max(int(num_kv_tokens / max_model_len * 512), 2048), 4096)
        if self.name == "trtllm":
            return 2048
        return 128

    def dp_padding_rule(self) -> str:
        """What the MoE layers of this policy's attention-DP steps carry: ``--dp-padding`` where given, else its
        engine's (``SchedulerEntry.dp_padding``)."""
        return self.dp_padding or SCHEDULERS[self.name].dp_padding

    def memory_basis(self, replica: ReplicaConfig) -> str:
        """What ``replica``'s KV memory fraction is a fraction of: ``--memory-fraction-of`` where given, else this
        policy's engine's (``SchedulerEntry.memory_basis``)."""
        return replica.memory_fraction_of or SCHEDULERS[self.name].memory_basis

    def memory_fraction(self, replica: ReplicaConfig) -> tuple[float, str]:
        """The memory fraction ``replica``'s KV cache is planned with, and its basis (``MEMORY_FRACTION_OF``;
        :func:`~simulator.engine.kvcache.plan_memory`): ``--gpu-memory-utilization`` and ``--memory-fraction-of``
        where given, else this policy's engine's (``SchedulerEntry.memory_basis``): vLLM's 0.9 of total memory,
        SGLang's static fraction (:func:`sglang_mem_fraction_static`, from its chunk: ``--chunk-size`` or
        ``--max-num-batched-tokens``, else its default for the GPU), TensorRT-LLM's 0.9 of free memory. A basis
        given without a fraction takes that basis's default (static: SGLang's computed one)."""
        basis = self.memory_basis(replica)
        if replica.gpu_memory_utilization is not None:
            return replica.gpu_memory_utilization, basis
        if basis != "static":
            return DEFAULT_MEMORY_FRACTION, basis
        gpu = replica.gpu_spec
        chunk = self.chunk_size or self.max_num_batched_tokens or _sglang_chunk(gpu)
        fraction = sglang_mem_fraction_static(gpu, replica.tp, replica.pp, replica.attention_dp, chunk)
        if fraction <= 0:
            raise ConfigError("replica.gpu_memory_utilization", f"SGLang's default --mem-fraction-static for "
                              f"{replica.gpu} ({gpu.memory_bytes / 2**30:g} GiB) is {fraction:g}: its reserve for "
                              "activations and CUDA graphs fills the GPU", "pass --gpu-memory-utilization F "
                              "(SGLang's --mem-fraction-static), or a smaller --chunk-size")
        return fraction, basis

    def reserved_logits_seqs(self, gpu: GPUSpec | None = None) -> int:
        """Sequences whose logits the memory plan reserves (:func:`~simulator.engine.kvcache.activation_reserve_bytes`):
        vLLM's profiling run samples ``max_num_seqs`` dummy sequences, so its cap (:meth:`seq_limit`); TensorRT-LLM
        sizes its cache after a forward of ``max_num_tokens`` dummy context tokens, not of its 2048-request batch
        cap, so without a given ``max_num_seqs`` the plan keeps the 128 it reserved before that cap was its
        default (a 2048-sequence reserve would cost Llama-3.1-8B on an L4 28% of its cache)."""
        if self.max_num_seqs is None and self.name == "trtllm":
            return 128
        return self.seq_limit(gpu)

    def _check_batch_wait(self) -> None:
        timeout, ratio = self.batch_wait_timeout_iters, self.batch_wait_max_tokens_ratio
        if isinstance(timeout, bool) or not isinstance(timeout, int) or not 0 <= timeout <= MAX_BALANCE_ITERS:
            raise ConfigError("scheduler.batch_wait_timeout_iters", f"must be an integer in [0, {MAX_BALANCE_ITERS}], "
                              f"got {timeout!r}", "pass --batch-wait-timeout-iters N (InferenceX's TensorRT-LLM "
                              "recipe: 40)")
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise ConfigError("scheduler.batch_wait_max_tokens_ratio", f"must be a fraction of the token budget in "
                              f"[0, 1], got {ratio!r}", "pass --batch-wait-max-tokens-ratio R (InferenceX's "
                              "TensorRT-LLM recipe: 0.8)")
        if bool(timeout) != bool(ratio):
            given, missing = (("timeout_iters", "max_tokens_ratio") if timeout else ("max_tokens_ratio", "timeout_iters"))
            raise ConfigError(f"scheduler.batch_wait_{given}", f"holds prompts only beside --batch-wait-{missing.replace('_', '-')}"
                              " (TensorRT-LLM stops waiting at once with either at 0)",
                              "give --batch-wait-timeout-iters N and --batch-wait-max-tokens-ratio R together, "
                              "or neither")
        if timeout and self.name not in BATCH_WAIT_SCHEDULERS:
            # (orca mixes whole prompts with decodes, but under no budget whose share batch waiting judges)
            raise ConfigError("scheduler.batch_wait_timeout_iters", "holds back the new prompts of a budgeted step "
                              f"that mixes prompts and decodes, which {self.name} never runs", "drop "
                              "--batch-wait-timeout-iters and "
                              f"--batch-wait-max-tokens-ratio, or use --scheduler {' or '.join(BATCH_WAIT_SCHEDULERS)}")

    def refuse_budget_below_context(self, max_model_len: int, budget_flag: str = "--max-num-batched-tokens") -> None:
        """vLLM V0 without chunked prefill (``vllm``) runs a whole prompt in one step, so it refuses at start a
        budget below its context (its SchedulerConfig: "max_num_batched_tokens ... is smaller than max_model_len"),
        rather than rejecting every longer request; ``budget_flag``: what set the budget (a pool's ``budget=``)."""
        budget = self.max_num_batched_tokens
        if self.name != "vllm" or not budget or budget >= max_model_len:
            return
        sep = "" if budget_flag.endswith("=") else " "
        raise ConfigError("scheduler.max_num_batched_tokens", f"{budget:,} tokens is below max_model_len "
                          f"{max_model_len:,}: --scheduler vllm (vLLM V0 without chunked prefill) runs a whole prompt "
                          "in one step, and vLLM refuses a budget below the context it serves", f"pass --max-model-len "
                          f"{budget} or less, {budget_flag}{sep}{max_model_len} or more, or a "
                          "chunking scheduler (vllm-v1)")

    def token_budget(self, max_model_len: int, gpu: GPUSpec | None = None, attention_dp: int = 1) -> int:
        """Tokens one iteration of one replica (one attention-DP rank) may carry under this policy
        (prompt tokens for vllm). ``gpu``: the replica's GPU, where a policy's default depends on it
        (vLLM V1's API server: 8192 on GPUs of 70 GiB or more but the A100, else 2048, and 2048 where
        the GPU is not given; SGLang's by memory, :func:`_sglang_chunk`). ``attention_dp``: the
        replica's attention-DP ranks; SGLang divides its ``--chunked-prefill-size`` over them (its
        server_args, "to avoid MoE kernel issues": every rank's tokens enter each MoE layer at once),
        while vLLM and TensorRT-LLM take their budgets per rank."""
        if self.name == "sarathi":
            return self.chunk_size or self.max_num_batched_tokens or 512
        if self.name == "vllm-v1":
            return self.chunk_size or self.max_num_batched_tokens or (8192 if _large_vllm_gpu(gpu) else 2048)
        if self.name == "sglang":
            return max(1, (self.chunk_size or self.max_num_batched_tokens or _sglang_chunk(gpu)) // attention_dp)
        if self.name == "trtllm":  # max_num_tokens, trtllm-serve's default
            return self.max_num_batched_tokens or 8192
        # vLLM v0 without chunked prefill requires the budget to hold a whole prompt.
        return self.max_num_batched_tokens or max(max_model_len, 2048)


@dataclass(frozen=True)
class WorkloadConfig:
    """Where requests come from: a length source and an arrival process.

    ``name`` is a built-in length source (``sharegpt``, ``arxiv``, ``fixed``, ``uniform``)
    unless ``trace`` names a file (Vidur/Sarathi CSV, Azure CSV or JSONL). ``arrival``
    is ``poisson`` (rate ``qps``), ``gamma`` (rate ``qps``, coefficient of variation
    ``cv``), ``fixed`` (constant gaps ``1/qps``), ``burst`` (all at t=0) or ``trace``
    (the file's own timestamps, divided by ``time_scale``).
    """

    name: str = "sharegpt"
    trace: str | None = None
    arrival: str = "poisson"
    qps: float = 1.0
    cv: float = 1.0
    num_requests: int = 256
    prompt_tokens: int = 512
    output_tokens: int = 128
    prompt_tokens_max: int | None = None  # uniform: draw in [prompt_tokens, prompt_tokens_max]
    output_tokens_max: int | None = None
    max_total_tokens: int | None = None  # drop longer requests from the source, as the papers filter
    time_scale: float = 1.0
    over_length: str = "drop"  # trace rows over max_total_tokens: drop them, or clip them as Vidur does
    # Closed loop (simulator.engine.closed_loop): at most `concurrency` requests in flight, the next
    # sent when one ends (vLLM's --max-concurrency; with burst arrivals, its --request-rate inf).
    concurrency: int | None = None
    num_warmup: int = 0  # the first requests sent, left out of the figures (vLLM's --num-warmups)
    range_ratio: float = 0.0  # fixed/random lengths banded as range_style's client reads it
    range_style: str = "vllm"  # "vllm": [len*(1-r), len*(1+r)]; "sglang": [len*r, len] (RANGE_STYLES)
    # Fixed lengths drawn from a normal distribution of this standard deviation (tokens), rounded and
    # at least 1: AIPerf's and genai-perf's --isl-stddev / --osl-stddev (0: every request exactly).
    prompt_tokens_stddev: float = 0.0
    output_tokens_stddev: float = 0.0
    # How the warm-up precedes the measured requests in a closed loop (simulator.engine.closed_loop):
    # "steady" = the first num_warmup requests of the same loop; "drain" = a phase of its own, run to
    # completion, then every user sends at once (AIPerf --warmup-request-count, vllm bench --num-warmups).
    warmup_mode: str = "steady"
    # Poisson/gamma arrivals rescaled so the last lands at num_requests / qps, as vllm bench serve does (its
    # get_request closes the 1-2% gap a sum of random gaps leaves, so every seed runs the same duration).
    normalize_arrivals: bool = False
    # A session trace's replay (SESSION_REPLAYS): "open" sends every turn at its recorded time, which holds the
    # original server's response times, so a slower simulated server gets a turn before the answer it builds on;
    # "closed" sends a session's first turn at its recorded time and each later turn when the turn it waited for
    # ends, plus its recorded think_time (simulator.engine.sessions).
    session_replay: str = "open"

    def __post_init__(self) -> None:
        if self.normalize_arrivals not in (True, False):
            raise ConfigError("workload.normalize_arrivals", f"must be true or false, got {self.normalize_arrivals!r}")
        if self.arrival not in ARRIVALS:
            raise ConfigError("workload.arrival", f"unknown arrival process {self.arrival!r}", f"known: {', '.join(ARRIVALS)}")
        if self.arrival in ("poisson", "gamma", "fixed"):
            _positive("workload", "qps", self.qps)
            if not self.qps <= MAX_QPS:  # inf, or a rate no server sees; NaN was refused above
                raise ConfigError("workload.qps", f"must be a finite rate of at most {MAX_QPS:g} requests/s, got "
                                  f"{self.qps:g}", "pass --qps N, or --arrival burst for every request at t=0")
            if self.qps < MIN_QPS:
                raise ConfigError("workload.qps", f"must be at least {MIN_QPS:g} requests/s (one every "
                                  f"{1 / MIN_QPS / 60:.0f} minutes), got {self.qps:g}", f"pass --qps {MIN_QPS:g} or more")
        _positive("workload", "cv", self.cv)
        if not CV_RANGE[0] <= self.cv <= CV_RANGE[1]:
            raise ConfigError("workload.cv", f"must be in [{CV_RANGE[0]:g}, {CV_RANGE[1]:g}], got {self.cv:g}",
                              "pass --cv 1 for Poisson-like gaps, above 1 for bursts")
        _positive("workload", "num_requests", self.num_requests)
        _positive("workload", "prompt_tokens", self.prompt_tokens)
        _positive("workload", "output_tokens", self.output_tokens)
        _positive("workload", "time_scale", self.time_scale)
        if not TIME_SCALE_RANGE[0] <= self.time_scale <= TIME_SCALE_RANGE[1]:
            raise ConfigError("workload.time_scale", f"must be in [{TIME_SCALE_RANGE[0]:g}, {TIME_SCALE_RANGE[1]:g}], "
                              f"got {self.time_scale:g}", "pass --time-scale 2 to replay the trace twice as fast")
        _positive("workload", "max_total_tokens", self.max_total_tokens, allow_none=True)
        for name in ("prompt_tokens", "output_tokens", "prompt_tokens_max", "output_tokens_max", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and value > MAX_TOKENS:
                raise ConfigError(f"workload.{name}", f"{value:,} tokens is beyond any model's context (at most "
                                  f"{MAX_TOKENS:,})", f"pass --{name.replace('_', '-')} with a length in tokens")
        if self.trace is not None and not str(self.trace).strip():
            # Path("") is the working folder, which would be read as a folder of Weka sessions
            raise ConfigError("workload.trace", "empty path", "pass --trace PATH to a trace file, or drop --trace")
        for lo, hi in (("prompt_tokens", "prompt_tokens_max"), ("output_tokens", "output_tokens_max")):
            # only the uniform workload reads them (elsewhere the run options refuse them as doing nothing)
            if self.name == "uniform" and getattr(self, hi) is not None and getattr(self, hi) < getattr(self, lo):
                raise ConfigError(f"workload.{hi}", f"{getattr(self, hi)} is below {lo}={getattr(self, lo)}",
                                  f"pass --{hi.replace('_', '-')} of at least --{lo.replace('_', '-')}")
        if self.arrival == "trace" and self.trace is None:
            raise ConfigError("workload.arrival", "'trace' arrivals need a trace file", "pass --trace PATH or another --arrival")
        if self.over_length not in OVER_LENGTH:
            raise ConfigError("workload.over_length", f"unknown value {self.over_length!r}", f"use one of {', '.join(OVER_LENGTH)}")
        if self.over_length == "clip" and (self.trace is None or self.max_total_tokens is None):
            raise ConfigError("workload.over_length", "'clip' shortens trace rows longer than max_total_tokens, so it "
                              "needs both", "pass --trace PATH and --max-total-tokens N (Vidur's default is 4096)")
        _positive("workload", "concurrency", self.concurrency, allow_none=True)
        if not 0 <= self.num_warmup < self.num_requests:
            raise ConfigError("workload.num_warmup", f"must be in [0, num_requests={self.num_requests}), got "
                              f"{self.num_warmup}", "pass --num-warmup below --num-requests")
        if self.session_replay not in SESSION_REPLAYS:
            raise ConfigError("workload.session_replay", f"unknown replay {self.session_replay!r}",
                              f"use one of {', '.join(SESSION_REPLAYS)}")
        if self.session_replay == "closed":
            if self.trace is None or self.arrival != "trace":
                raise ConfigError("workload.session_replay", "closed replays a session trace's turns from their "
                                  "recorded times and think times" + (", but no trace is given" if self.trace is None
                                  else f", but --arrival is {self.arrival} (rows sampled at other arrivals)"),
                                  "pass --trace with Claude Code session files and --arrival trace, or drop "
                                  "--session-replay")
            if self.concurrency is not None:
                raise ConfigError("workload.concurrency", "--session-replay closed sends each session's turns as "
                                  "its earlier ones end (one user per session) already",
                                  "drop --concurrency, or --session-replay")
        if self.warmup_mode not in WARMUP_MODES:
            raise ConfigError("workload.warmup_mode", f"unknown value {self.warmup_mode!r}",
                              f"use one of {', '.join(WARMUP_MODES)}")
        if self.warmup_mode == "drain" and (self.concurrency is None or self.num_warmup == 0):
            raise ConfigError("workload.warmup_mode", "'drain' separates a closed loop's warm-up phase from its "
                              "measured phase, so it needs both", "give a concurrency and num_warmup > 0, or "
                              "warmup_mode 'steady'")
        if self.range_style not in RANGE_STYLES:
            raise ConfigError("workload.range_style", f"unknown value {self.range_style!r}",
                              f"use one of {', '.join(RANGE_STYLES)} (whose client's --random-range-ratio you mean)")
        if self.range_style == "vllm" and not 0 <= self.range_ratio < 1:
            raise ConfigError("workload.range_ratio", f"must be in [0, 1), got {self.range_ratio}",
                              "e.g. --random-range-ratio 0.1 for lengths within 10% of --prompt-tokens/--output-tokens; "
                              "--range-style sglang reads r as the low end's fraction ([len*r, len])")
        if self.range_style == "sglang" and not 0 <= self.range_ratio <= 1:
            raise ConfigError("workload.range_ratio", f"must be in [0, 1] under range_style 'sglang', got "
                              f"{self.range_ratio}", "e.g. --random-range-ratio 0.8 for lengths in [0.8 len, len]")
        for name in ("prompt_tokens_stddev", "output_tokens_stddev"):
            value = getattr(self, name)
            flag = "--isl-stddev" if name.startswith("prompt") else "--osl-stddev"
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(f"workload.{name}", f"must be a finite number of tokens >= 0, got {value}",
                                  f"pass {flag} 0 for exact lengths")
            if value > 0 and self.name not in ("fixed", "random"):
                raise ConfigError(f"workload.{name}", f"spreads fixed lengths, but the workload is {self._lengths}",
                                  f"drop {flag} (a trace's lengths are its own)" if self.trace
                                  else f"pass --workload fixed, or drop {flag}")
            if value > 0 and self.is_banded:
                raise ConfigError(f"workload.{name}", "a normal spread and a --random-range-ratio band are two "
                                  "clients' ways of varying lengths", f"pass one of {flag} and --random-range-ratio")
        if self.is_banded and self.name not in ("fixed", "random"):
            raise ConfigError("workload.range_ratio", f"bands fixed lengths, but the workload is {self._lengths}",
                              "drop the band (--range-ratio, --range-style): a trace's lengths are its own" if self.trace
                              else "pass --workload fixed (or --dataset-name random), or drop --random-range-ratio and "
                              "--range-style")

    @property
    def _lengths(self) -> str:
        """Where this workload's lengths come from, for a message: the trace's file, else the named workload."""
        return f"the trace {self.trace}" if self.trace else repr(self.name)

    @property
    def is_banded(self) -> bool:
        """Whether ``range_ratio`` draws lengths in a band (vllm: r > 0; sglang: r < 1)."""
        return self.range_ratio > 0 if self.range_style == "vllm" else self.range_ratio < 1

    @property
    def is_spread(self) -> bool:
        """Whether fixed lengths are drawn around their value (``*_tokens_stddev`` > 0)."""
        return self.prompt_tokens_stddev > 0 or self.output_tokens_stddev > 0

    @property
    def exact_lengths(self) -> bool:
        """Every request is ``prompt_tokens`` + ``output_tokens`` long (fixed or random lengths, no band, no spread)."""
        return self.trace is None and self.name in ("fixed", "random") and not self.is_banded and not self.is_spread


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's results. Same config and seed, same outputs."""

    replica: ReplicaConfig = field(default_factory=ReplicaConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    cost_model: str = "roofline"  # "roofline" or the path of a fitted cost-model artifact
    engine: str = DEFAULT_ENGINE  # engine overheads: a preset name or a calibrate-engine artifact
    num_replicas: int = 1
    router: str = "round_robin"
    seed: int = 0
    # Advance stretches of like iterations (decode-only, or a long prompt's chunks beside steady
    # decodes) in one step (simulator.fast.skipping); results are identical
    # either way, so this only trades speed for a step-by-step loop when debugging.
    fast_forward: bool = True
    # Disaggregated prefill/decode (simulator.config.disagg_layout): pools as '2x(tp=2,gpu=h100-sxm)',
    # each with its own tp, pp, attention DP and EP ('1x(tp=1,dp=8,ep=8)').
    prefill_pool: str | None = None
    decode_pool: str | None = None
    mixed_pool: str | None = None
    kv_link: str = "infiniband-200g"
    # Disaggregated: whether kv_link is each worker's own (KV_LINK_SCOPES: "per-worker", the NICs of
    # every prefill and decode worker, as xPyD deployments have) or one link all transfers share.
    kv_link_scope: str = "per-worker"
    # Disaggregated: where the client's first token is delivered (FIRST_TOKEN_AT). "decode": by the
    # decode worker, with its first step after the KV handoff (Dynamo, vLLM/SGLang with NIXL-style
    # connectors stream every token from the decode worker); "prefill": by the prefill worker when
    # the prompt's last chunk ends (TTFT excludes the handoff).
    first_token_at: str = "decode"
    # Speculative decoding (simulator.config.speculative; the engine's simulator.engine.speculative):
    # None runs plain decodes, bit for bit as before the field existed.
    speculative: SpeculativeConfig | None = None

    def __post_init__(self) -> None:
        if self.speculative is not None and not isinstance(self.speculative, SpeculativeConfig):
            raise ConfigError("speculative", f"must be a SpeculativeConfig or None, got {type(self.speculative).__name__}",
                              "build it with SpeculativeConfig(...) or --speculative-config")
        if (self.speculative is not None and self.speculative.method == "mtp"
                and self.replica.model_spec.num_mtp_layers == 0):
            with_mtp = ", ".join(m.name for m in MODELS.values() if m.num_mtp_layers)
            raise ConfigError("speculative.method", f"mtp drafts with the checkpoint's multi-token-prediction module, "
                              f"and {self.replica.model} ships none", f"use eagle3, draft_model or ngram, or a model "
                              f"with MTP ({with_mtp})")
        if self.speculative is not None:
            check_drafter(self.speculative, self.replica.model_spec)
        if self.speculative is not None and self.scheduler.prefix_caching is not False:
            # A speculating replica's KV cache is a plain block manager (engine.speculative): say so in
            # the config (and so in the header and config.json) rather than run without it silently.
            if self.scheduler.prefix_caching:
                raise ConfigError("scheduler.prefix_caching", "prefix caching with speculative decoding is not "
                                  "modelled yet", "drop --prefix-caching, or speculation")
            # On by a scheduler's default (vllm-v1, sglang): the run's, or a pool's own sched= (the pools' replicas
            # speculate or hold the drafter, with a plain block manager too: engine.disagg._pool_scheduler).
            if self._caches_by_default():
                object.__setattr__(self, "scheduler", dataclasses.replace(self.scheduler, prefix_caching=False))
        _positive("", "num_replicas", self.num_replicas, flag="--replicas")
        if self.num_replicas > MAX_REPLICAS:
            raise ConfigError("num_replicas", f"must be at most {MAX_REPLICAS:,} ({MAX_REPLICAS_WHY}), got "
                              f"{self.num_replicas:,}", f"pass --replicas {MAX_REPLICAS:,} or fewer")
        sched = self.scheduler
        if sched.name in ("vllm", "vllm-v1") and (sched.max_num_batched_tokens or sched.chunk_size) \
                and not self.is_disaggregated:
            # vLLM refuses a budget below its sequence cap (SchedulerConfig: max_num_batched_tokens >= max_num_seqs):
            # a step carries a token a sequence at least, so the cap above the budget does nothing.
            budget = sched.token_budget(self.replica.effective_max_model_len, self.replica.gpu_spec)
            seqs = sched.seq_limit(self.replica.gpu_spec)
            if budget < seqs:
                field = "scheduler.max_num_batched_tokens" if sched.max_num_batched_tokens else "scheduler.chunk_size"
                raise ConfigError(field, f"{budget:,} tokens is below max_num_seqs "
                                  f"{seqs:,}{'' if sched.max_num_seqs else ' (the default)'}: a step carries a token a "
                                  "sequence, so no more than the budget ever run (vLLM refuses it)",
                                  f"pass --max-num-seqs {budget} or fewer, or a budget of at least {seqs}")
        if not self.is_disaggregated:  # (a disaggregated run's pools are checked each: disagg_layout.layout_of)
            sched.refuse_budget_below_context(self.replica.effective_max_model_len)
        if self.scheduler.batch_wait_timeout_iters:
            if self.replica.attention_dp > 1 or self.is_disaggregated:
                raise ConfigError("scheduler.batch_wait_timeout_iters", "TensorRT-LLM applies batch waiting only to a "
                                  "replica without attention DP, whose steps mix prompts and decodes" +
                                  (" (a disaggregated run's prefill and decode pools never mix them" +
                                   ("; batch waiting in its --mixed-pool is not modelled)" if self.mixed_pool else ")")
                                   if self.is_disaggregated else ""),
                                  "drop --batch-wait-timeout-iters and --batch-wait-max-tokens-ratio" +
                                  ("" if self.is_disaggregated else ", or use --dp-balance-timeout-iters for the "
                                   "attention-DP balance"))
            # A step is held only while it decodes (a token at least) and its tokens stay under ratio x budget.
            ratio = self.scheduler.batch_wait_max_tokens_ratio
            budget = self.scheduler.token_budget(self.replica.effective_max_model_len, self.replica.gpu_spec)
            if ratio * budget <= 1:
                raise ConfigError("scheduler.batch_wait_max_tokens_ratio", f"{ratio:g} of the {budget:,}-token budget "
                                  "is at most one token, which every step that decodes reaches, so batch waiting "
                                  "would never hold a prompt", "pass --batch-wait-max-tokens-ratio R with R x the "
                                  "budget above one token (InferenceX's TensorRT-LLM recipe: 0.8), or drop both "
                                  "--batch-wait flags")
        if self.prefill_pool is None and self.decode_pool is None and self.mixed_pool is None:
            self._check_cpu_tier(None)
        if self.scheduler.cpu_kv_gib and self.replica.pp > 1 and not self.is_disaggregated:
            raise ConfigError("scheduler.cpu_kv_gib", "a CPU KV tier is modelled for one-stage replicas only",
                              "drop --cpu-kv-gib, or use --pp 1")
        if self.prefill_pool is not None or self.decode_pool is not None or self.mixed_pool is not None:
            from simulator.config.disagg_layout import canonical_pool, layout_of

            for name in ("prefill_pool", "decode_pool", "mixed_pool"):
                object.__setattr__(self, name, canonical_pool(getattr(self, name), name))
            # validates every pool and the link (pools take the run's attention DP unless they set dp)
            layout = layout_of(self)
            self._check_cpu_tier(layout)
            # The prefill pool caches prefixes as its sched= or the run's engine would (disagg_layout.pool_prefix_cache),
            # a mixed pool as its scheduler does (sched=, else the run's); the decode pool takes its blocks over by count.
            # A CPU tier is modelled on one-stage replicas only: on each pool that caches.
            if self.scheduler.cpu_kv_gib:
                staged = [f"--{name.replace('_', '-')}" for name, replica, sched in (
                    ("prefill_pool", layout.prefill_replica, layout.prefill_scheduler),
                    ("mixed_pool", layout.mixed_replica, layout.mixed_scheduler))
                    if replica is not None and sched is not None and sched.prefix_cache is not None and replica.pp > 1]
                if staged:
                    raise ConfigError("scheduler.cpu_kv_gib", f"a CPU KV tier is modelled for one-stage replicas only, "
                                      f"and {' and '.join(staged)} set pp > 1", "drop --cpu-kv-gib, or pp= from the pool")
        if isinstance(self.first_token_at, str):  # (Prefill was refused for its case, where GPU and link names are not)
            object.__setattr__(self, "first_token_at", self.first_token_at.strip().lower())
        if self.first_token_at not in FIRST_TOKEN_AT:
            raise ConfigError("first_token_at", f"unknown delivery point {self.first_token_at!r}",
                              f"use one of {', '.join(FIRST_TOKEN_AT)}")
        if self.is_disaggregated and self.workload.session_replay == "closed":  # (simulate refuses such tables too)
            raise ConfigError("workload.session_replay", "closed-loop sessions in disaggregated pools are not modelled",
                              "drop --session-replay for the recorded times, or drop the pools")
        check_link_name(self.kv_link)  # in every run: a config file's typo must not wait for pools
        if self.kv_link_scope not in KV_LINK_SCOPES:
            raise ConfigError("kv_link_scope", f"unknown KV link scope {self.kv_link_scope!r}",
                              f"use one of {', '.join(KV_LINK_SCOPES)}")
        if self.router not in ROUTERS:
            raise ConfigError("router", f"unknown router {self.router!r}", f"known: {', '.join(ROUTERS)}")
        if self.seed < 0:
            raise ConfigError("seed", f"must be >= 0, got {self.seed}")
        # A preset or an artifact (parsed on load), either with ':term=value,...' overrides (checked on load).
        check_override_separators(self.engine, lambda name: name in ENGINE_PRESETS or Path(name).is_file())
        base, _ = split_engine_spec(self.engine)
        check_override_has_value(base, lambda name: name in ENGINE_PRESETS or Path(name).is_file())
        if base not in ENGINE_PRESETS and not Path(base).is_file():
            raise ConfigError("engine", f"{base!r} is neither a preset nor an engine artifact",
                              f"presets: {', '.join(ENGINE_PRESETS)}; or the JSON written by `simulate calibrate-engine`; "
                              "either may end in :term=value overrides, e.g. vllm-2026:handoff_s=0.02")

    def _check_cpu_tier(self, layout: DisaggLayout | None) -> None:
        """Refuse ``--cpu-kv-gib`` where no replica keeps a prefix cache for the tier to hold the evictions of: an
        aggregated run's scheduler caches nothing, or no pool of a disaggregated run (``layout``) does (the prefill
        pool caches where its ``sched=`` or the run's engine would, a mixed pool where its scheduler does: the pools
        decide, so the check waits for them rather than reading ``--scheduler`` alone)."""
        if not self.scheduler.cpu_kv_gib:
            return
        if layout is None:
            if self.scheduler.prefix_cache is not None:
                return
            where = "prefix caching is off"
        elif any(s is not None and s.prefix_cache is not None for s in (layout.prefill_scheduler, layout.mixed_scheduler)):
            return
        elif self.scheduler.prefix_caching is False:  # (turned off for every pool)
            where = "prefix caching is off"
        else:
            pools = [f"{layout.prefill_scheduler.name} in the prefill pool"]
            if layout.mixed_scheduler is not None:
                pools.append(f"{layout.mixed_scheduler.name} in the mixed pool")
            where = (f"no pool keeps one ({' and '.join(pools)} under --scheduler {self.scheduler.name}; the decode "
                     "pool never does)")
        if self.speculative is not None and self._caches_by_default():
            # (the rewrite in __post_init__ turned caching off, and --prefix-caching is refused beside speculation)
            raise ConfigError("scheduler.cpu_kv_gib", "a CPU tier keeps the prefix cache's evicted blocks, and "
                              "speculative decoding turns prefix caching off (a speculating replica keeps a plain KV "
                              "cache)", "drop --cpu-kv-gib, or speculation")
        raise ConfigError("scheduler.cpu_kv_gib", f"a CPU tier keeps the prefix cache's evicted blocks, but {where}",
                          "pass --prefix-caching, or drop --cpu-kv-gib")

    @property
    def is_disaggregated(self) -> bool:
        return self.prefill_pool is not None

    @property
    def num_ranks(self) -> int:
        """Schedulers the engine runs behind the router, each with its own KV cache: one per replica,
        or one per attention-DP rank of each replica."""
        return self.num_replicas * self.replica.attention_dp

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def result_key(self, **context: Any) -> str:
        """16 hex digits naming everything this config's results depend on (every field but
        ``fast_forward``, which changes speed, never results) and ``context``, the other inputs of
        a search (its SLO, mode, options): the resume key of sweep points and planned layouts."""
        resolved = self.to_dict()
        resolved.pop("fast_forward", None)
        for (section, name), default in LATER_FIELD_DEFAULTS.items():
            if resolved[section].get(name) == default:
                del resolved[section][name]
        if self._plans_on_total_memory():
            for (section, name), former in FORMER_DEFAULTS_ON_TOTAL.items():
                if resolved[section].get(name) is None:
                    resolved[section][name] = former
        # The rule in effect, not the flag typed: "sum" or "graphs" where it is read and in force (results stored
        # before the rule existed lacked it), nothing otherwise ("max", typed or the engine's, is what every earlier
        # result ran).
        resolved["scheduler"].pop("dp_padding", None)
        if rules := self._dp_token_routing():
            resolved["scheduler"]["dp_padding"] = ",".join(rules)
        from simulator.config.inputs import fingerprints

        # The files it reads, by content (a trace edited in place is another run); none: the key results had before
        if files := fingerprints(self):
            context = {**context, "inputs": files}
        # A pool without sched= runs --scheduler's pool scheduler; results stored before it did ran vllm's, keyed alike
        if (pools := self._unnamed_pool_scheduler()) not in (None, FALLBACK_POOL_SCHEDULER):
            context = {**context, "pool_scheduler": pools}
        blob = json.dumps({**context, "config": resolved}, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def _unnamed_pool_scheduler(self) -> str | None:
        """The scheduler the prefill or decode pool runs where one sets no ``sched=`` (None: aggregated, or both set
        theirs): :func:`~simulator.config.disagg_layout.default_pool_scheduler` of ``--scheduler``."""
        if not self.is_disaggregated or self.decode_pool is None:
            return None
        from simulator.config.disagg_layout import default_pool_scheduler, parse_pool

        if all(parse_pool(text, field).sched is not None
               for text, field in ((self.prefill_pool, "prefill_pool"), (self.decode_pool, "decode_pool"))):
            return None
        return default_pool_scheduler(self.scheduler.name)

    def scheduler_replicas(self) -> list[tuple[SchedulerConfig, ReplicaConfig]]:
        """The run's replicas as they are built, each with the scheduler that runs it: the run's own, or a
        disaggregated run's pools' (:meth:`~simulator.config.disagg_layout.DisaggLayout.pools`)."""
        if not self.is_disaggregated:
            return [(self.scheduler, self.replica)]
        from simulator.config.disagg_layout import layout_of

        return layout_of(self).pools()

    def _dp_token_routing(self) -> list[str]:
        """The padding rules other than ``max`` under which the run's attention-DP replicas of a MoE model step
        (:meth:`SchedulerConfig.dp_padding_rule`), sorted; empty where none does."""
        if not self.replica.model_spec.is_moe:
            return []
        return sorted({s.dp_padding_rule() for s, r in self.scheduler_replicas() if r.attention_dp > 1} - {"max"})

    def _plans_on_total_memory(self) -> bool:
        """Every scheduler of the run (a disaggregated run's pools' too) plans its KV cache on the total basis."""
        return all(s.memory_basis(self.replica) == "total" for s, _ in self.scheduler_replicas())

    def _caches_by_default(self) -> bool:
        """Some scheduler whose engine's default decides a replica's prefix cache (the run's, a pool's ``sched=``:
        :func:`~simulator.config.disagg_layout.prefix_cache_schedulers`) caches by default."""
        return any(SCHEDULERS[name].prefix_cache is not None for name in prefix_cache_schedulers(self).values())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        sections = {"replica": ReplicaConfig, "scheduler": SchedulerConfig, "workload": WorkloadConfig}
        kwargs: dict[str, Any] = {}
        known = {f.name for f in dataclasses.fields(cls)}
        for key, value in data.items():
            if key in (REPORT_KEY, INPUTS_KEY):  # how `simulate run` reported the run (its SLOs, views) and the files
                continue  # it read: read by the reproduction (simulator.cli.run), not fields
            if key not in known:
                raise ConfigError(f"config.{key}", "unknown key", f"known: {', '.join(sorted(known))}")
            if key in sections and not isinstance(value, dict):
                raise ConfigError(f"config.{key}", f"must be an object, got {value!r}", "use the config.json a run wrote")
            check_json_types(f"config.{key}." if key in sections else "config.", sections.get(key, cls),
                              value if key in sections else {key: value})
            if key == "speculative":
                if value is not None and not isinstance(value, dict):
                    raise ConfigError("config.speculative", f"must be an object or null, got {value!r}",
                                      "use the config.json a run wrote")
                if value is not None:
                    check_json_types("config.speculative.", SpeculativeConfig, value)
                kwargs[key] = None if value is None else SpeculativeConfig.from_dict(value)
            elif key in sections:
                sub_known = {f.name for f in dataclasses.fields(sections[key])}
                bad = set(value) - sub_known
                if bad:
                    raise ConfigError(f"config.{key}.{sorted(bad)[0]}", "unknown key", f"known: {', '.join(sorted(sub_known))}")
                kwargs[key] = sections[key](**value)
            else:
                kwargs[key] = value
        return cls(**kwargs)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with top-level fields or ``section__field`` entries changed."""
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            if "__" in key:
                section, name = key.split("__", 1)
                nested.setdefault(section, {})[name] = value
            else:
                top[key] = value
        for section, values in nested.items():
            if section == "speculative":  # options, not fields: --speculative-config and its flags
                from simulator.config.acceptance import speculative_from_options

                top[section] = speculative_from_options(self.speculative, values)
            else:
                top[section] = dataclasses.replace(getattr(self, section), **values)
        return dataclasses.replace(self, **top)
