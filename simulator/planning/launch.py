"""What a person acts on: the launch command of a planned deployment, per engine.

:func:`launch_command` writes one unit of a :class:`~simulator.planning.plan.Candidate` as vLLM,
SGLang or TensorRT-LLM would be started for it (its parallelism, token budget, batch cap, context
length, quantization, and the MoE kernel the plan priced where an engine needs telling), with a
disaggregated unit's prefill and decode servers; :func:`default_launch` picks the engine that fits
the run (its kernels' backend, else its engine preset's).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from simulator.config.catalog import get_gpu, get_model
from simulator.config.disagg_layout import layout_of
from simulator.config.precision import MXFP4_FORMATS, MXFP8_MOE_GPUS, kernel_format
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig
from simulator.config.schedulers import CHUNKING_SCHEDULERS
from simulator.config.speculative import SpeculativeConfig
from simulator.engine.kvcache import NON_TORCH_RESERVE_BYTES, build_kv_cache, engine_block_size

if TYPE_CHECKING:
    from simulator.planning.plan import Candidate, Layout


def launch_command(c: Candidate, base: RunConfig, engine: str = "vllm") -> list[str]:
    """The launch command(s) of the candidate's engine, one unit (run ``units`` of them behind a router)."""
    lay = c.layout
    model = get_model(base.replica.model)
    name = getattr(model, "hf_id", base.replica.model)
    max_len = base.replica.effective_max_model_len
    quant = "mxfp4" if lay.dtype in MXFP4_FORMATS else {"fp8": "fp8", "fp8-block": "fp8", "nvfp4": "modelopt_fp4",
                                                         "int4": "awq"}.get(lay.dtype)
    # The MXFP4 MoE kernel the plan priced (precision.kernel_format: the format itself for any other dtype), where an
    # engine needs telling: vLLM runs the MXFP8-activation one only when asked; SGLang runs it by default on
    # datacenter Blackwell, bf16 when asked; TensorRT-LLM's default MoE backend on Blackwell runs MXFP8 only.
    gpu = get_gpu(lay.gpu)

    def kernel(backend: str) -> str:
        return kernel_format(lay.dtype, backend, gpu)

    # Each server's token budget as the plan priced it: the layout's, else one the run gave its scheduler (a
    # scheduler that does not chunk has no layout budget, yet --max-num-batched-tokens still bounds its steps).
    config = lay.config(base)
    pools = layout_of(config)
    schedulers = ({None: config.scheduler} if pools is None else
                  {role: pools.prefill_scheduler for role in ("prefill", "context")}
                  | {role: pools.decode_scheduler for role in ("decode", "generation")})
    replicas = ({None: config.replica} if pools is None else
                {role: pools.prefill_replica for role in ("prefill", "context")}
                | {role: pools.decode_replica for role in ("decode", "generation")})

    def budget(role: str | None) -> int | None:
        return _priced_budget(schedulers[role])

    def fraction(role: str | None, engine: str) -> float:
        return launch_memory_fraction(replicas[role], schedulers[role], engine)

    def moe(role: str | None, engine: str) -> tuple[str | None, str | None]:
        """(the engine's MoE backend value for the kernel --moe-kernel priced, a note where it has none)."""
        named = priced_moe_kernel(replicas[role])
        if named is None:
            return None, None
        value = moe_backend_of(engine, named)
        return value, (None if value else f"priced with the tables' {named} MoE kernel, which this command does not "
                       "select: set the engine's MoE backend to it")

    def vllm(tp: int, role: str | None) -> str:
        parts = ["VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1"] if kernel("vllm") == "mxfp4-w4a8" else []
        parts += [f"vllm serve {name}", f"--tensor-parallel-size {tp}"]
        parts += [f"--pipeline-parallel-size {lay.pp}"] if lay.pp > 1 else []
        parts += [f"--data-parallel-size {lay.attention_dp}"] if lay.attention_dp > 1 else []
        parts += ["--enable-expert-parallel"] if lay.ep > 1 else []
        parts += [f"--max-num-batched-tokens {budget(role)}"] if budget(role) else []
        parts += [f"--max-num-seqs {lay.max_num_seqs}", f"--max-model-len {max_len}"]
        parts += [f"--quantization {quant}"] if quant else []
        parts += _memory_flags(base, "vllm", fraction(role, "vllm"))
        if base.speculative is not None:
            parts.append(f"--speculative-config '{json.dumps(_vllm_speculative(base.speculative))}'")
        if role is not None:
            parts.append("--kv-transfer-config '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}'")
        note = moe(role, "vllm")[1]
        return " ".join(parts) + (f"  # {note}" if note else "")

    def sglang(tp: int, role: str | None) -> str:
        # SGLang's --tp is the whole group's GPU count and its attention-DP ranks split it (--tp 8 --dp 8
        # --enable-dp-attention on 8 GPUs; tp must be divisible by dp), so a layout's tp per rank times its ranks;
        # its --ep-size splits that same group, as the layout's ep does (1, or every GPU of the group).
        parts = [f"python -m sglang.launch_server --model-path {name}", f"--tp {tp * lay.attention_dp}"]
        parts += [f"--pp-size {lay.pp}"] if lay.pp > 1 else []
        parts += [f"--enable-dp-attention --dp {lay.attention_dp}"] if lay.attention_dp > 1 else []
        parts += [f"--ep-size {lay.ep}"] if lay.ep > 1 else []
        if budget(role):  # a chunk size, or a cap on a prefill batch's whole prompts (a policy that does not chunk)
            chunks = schedulers[role].name in CHUNKING_SCHEDULERS
            parts.append(f"--{'chunked-prefill-size' if chunks else 'max-prefill-tokens'} {budget(role)}")
        parts += [f"--max-running-requests {lay.max_num_seqs}", f"--context-length {max_len}"]
        parts += [f"--quantization {quant}"] if quant else []
        if kernel("sglang") == "mxfp4-w4a16" and gpu.name in MXFP8_MOE_GPUS:
            parts.append("--flashinfer-mxfp4-moe-precision bf16")
        parts += _memory_flags(base, "sglang", fraction(role, "sglang"))
        runner, note = moe(role, "sglang")
        notes = [note] if note else []
        if runner == "deep_gemm" and lay.ep <= 1:  # its DeepGEMM runner takes DeepEP's dispatch, over EP ranks
            runner = None
            notes.append("priced with DeepGEMM's MoE kernel, which SGLang runs only with expert parallelism over "
                         "DeepEP (--ep-size > 1 --moe-a2a-backend deepep): at ep 1 it picks its own")
        parts += [f"--moe-runner-backend {runner}"] if runner else []
        parts += ["--moe-a2a-backend deepep"] if runner == "deep_gemm" else []
        if base.speculative is not None:
            flags, note = _sglang_speculative(base.speculative)
            parts += flags
            notes += [note] if note else []
        parts += [f"--disaggregation-mode {role}"] if role else []
        return " ".join(parts) + ("  # " + "; ".join(notes) if notes else "")

    def trtllm(tp: int, role: str | None) -> str:
        # TensorRT-LLM's attention-DP ranks are ranks of its TP world, each with its own attention and KV
        # cache; the MoE layers run over the world as moe_tp x ep (ep_size). Its quantization comes
        # from the checkpoint (a ModelOpt one), and its scheduler knobs from the extra options file.
        parts = [f"trtllm-serve {name} --backend pytorch", f"--tp_size {tp * lay.attention_dp}"]
        parts += [f"--pp_size {lay.pp}"] if lay.pp > 1 else []
        parts += [f"--ep_size {lay.ep}"] if lay.ep > 1 else []
        parts += [f"--max_num_tokens {budget(role)}"] if budget(role) else []
        parts += [f"--max_batch_size {lay.max_num_seqs}", f"--max_seq_len {max_len}"]
        backend, note = moe(role, "trtllm")
        notes = [note] if note else []
        extra = trtllm_extra_options(lay, base.scheduler, role) | _trtllm_memory_options(base, fraction(role, "trtllm"))
        if backend:
            extra["moe_config"] = {"backend": backend}
        if base.speculative is not None:
            extra["speculative_config"] = _trtllm_speculative(base.speculative)
            if base.speculative.parallel_drafting:
                notes.append("the plan priced parallel drafting (one drafter pass a step), which this "
                             "speculative_config does not ask for")
        if extra:
            parts.append(f"--extra_llm_api_options {role or 'extra'}.yml")
            notes.append(f"{role or 'extra'}.yml: {json.dumps(extra)}")
        if quant:
            notes.append(f"a {lay.dtype} checkpoint (TensorRT-LLM reads its quantization from it)")
        if kernel("trtllm") == "mxfp4-w4a16" and gpu.fp4_flops > 0:
            notes.append("priced with MXFP4 experts at bf16 activations, which TensorRT-LLM's default MoE backend "
                         "on Blackwell does not run (it takes MXFP8 activations)")
        return " ".join(parts) + ("  # " + "; ".join(notes) if notes else "")

    make = {"sglang": sglang, "trtllm": trtllm}.get(engine, vllm)
    if lay.mode == "agg":
        return [make(lay.tp, None)]
    if engine == "trtllm":
        return [f"# {lay.num_prefill}x context server: " + make(lay.prefill_tp, "context"),
                f"# {lay.num_decode}x generation server: " + make(lay.tp, "generation"),
                "# behind trtllm-serve disaggregated -c (its context_servers and generation_servers), or Dynamo"]
    return [f"# {lay.num_prefill}x prefill: " + make(lay.prefill_tp, "prefill"),
            f"# {lay.num_decode}x decode: " + make(lay.tp, "decode")]


# A --moe-kernel name (a part of the tables' kernel source) -> the value of each engine's MoE backend option that runs
# that kernel (TensorRT-LLM's moe_config backend, SGLang's --moe-runner-backend), the first part it holds; vLLM picks
# its MoE kernel itself (its MoE oracle), so a plan priced with a named kernel says so beside its command instead.
MOE_BACKENDS: dict[str, tuple[tuple[str, str], ...]] = {
    "trtllm": (("deepgemm", "DEEPGEMM"), ("cutedsl", "CUTEDSL"), ("cutlass", "CUTLASS"), ("trtllm", "TRTLLM")),
    "sglang": (("deepgemm", "deep_gemm"), ("cutedsl", "flashinfer_cutedsl"), ("cutlass", "flashinfer_cutlass"),
               ("trtllm", "flashinfer_trtllm"), ("triton", "triton")),
}


def priced_moe_kernel(replica: ReplicaConfig) -> str | None:
    """The MoE kernel a replica's ``--moe-kernel`` priced, as its tables name it (a part of a name resolved to the
    whole: ``deep`` -> ``deepgemm``); None for ``auto``, the engine's own choice. The tables are read (once per
    process) only where a kernel is named; a name they refuse stays as given (the run says why)."""
    if replica.moe_kernel == "auto":
        return None
    if replica.kernels == "roofline":
        return replica.moe_kernel
    from simulator.config.errors import ConfigError
    from simulator.costmodel.aic.model import table_cost_model

    try:
        return table_cost_model(replica, replica.kernels).named_moe_source or replica.moe_kernel
    except ConfigError:
        return replica.moe_kernel


def moe_backend_of(engine: str, moe_kernel: str) -> str | None:
    """The value of ``engine``'s MoE backend option that runs the kernel ``moe_kernel`` names; None where it has none."""
    return next((value for part, value in MOE_BACKENDS.get(engine, ()) if part in moe_kernel), None)


def _priced_budget(sched: SchedulerConfig) -> int | None:
    """The token budget a server's scheduler was given (None: the engine's own default, left to it), read as
    :meth:`SchedulerConfig.token_budget` reads it: a chunking policy's chunk size first."""
    if sched.name in CHUNKING_SCHEDULERS:
        return sched.chunk_size or sched.max_num_batched_tokens
    return sched.max_num_batched_tokens


def trtllm_extra_options(lay: Layout, sched: SchedulerConfig, role: str | None) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` YAML (here as JSON, which YAML reads) of a TensorRT-LLM unit:
    attention DP with the run's balance, the run's batch waiting (a replica without attention DP,
    aggregated), a disaggregated role's KV transceiver."""
    extra: dict[str, Any] = {}
    if lay.attention_dp > 1:
        extra["enable_attention_dp"] = True
        if sched.dp_balance_timeout_iters:
            extra["attention_dp_config"] = {"enable_balance": True, "timeout_iters": sched.dp_balance_timeout_iters,
                                            "batching_wait_iters": sched.dp_balance_batching_wait_iters}
    elif sched.batch_wait_timeout_iters and role is None:
        extra["batch_wait_timeout_iters"] = sched.batch_wait_timeout_iters
        extra["batch_wait_max_tokens_ratio"] = sched.batch_wait_max_tokens_ratio
    if role is not None:
        extra["cache_transceiver_config"] = {"backend": "DEFAULT"}
    return extra


# -- what the run priced beyond the layout: the KV cache's memory, dtype and blocks, and speculation ----------------
# (each only where the run departs from the default, so a plain plan's commands stay as short as they were)
_DEFAULT_REPLICA = ReplicaConfig()
_DRAFT_HEAD = "<the draft head's checkpoint>"  # an EAGLE/Medusa head: the run names its method, not its weights


def _memory_departures(base: RunConfig) -> dict[str, Any]:
    """The KV cache settings the run priced away from the defaults: FP8 KV, the block size and a given block count
    (each engine spells them its own way, below; the memory fraction is each server's own:
    :func:`launch_memory_fraction`)."""
    r, out = base.replica, {}
    if r.kv_cache_dtype == "fp8":
        out["fp8"] = True
    if r.block_size != _DEFAULT_REPLICA.block_size:
        out["block_size"] = r.block_size
    if r.num_gpu_blocks is not None:
        out["num_blocks"] = r.num_gpu_blocks
        out["num_tokens"] = r.num_gpu_blocks * engine_block_size(r, base.scheduler.name)
    return out


# Each engine's spelling of a departure, and of its memory fraction (each of another base: launch_memory_fraction).
_MEMORY_FLAGS = {
    "vllm": {"fraction": "--gpu-memory-utilization {:g}", "fp8": "--kv-cache-dtype fp8", "block_size": "--block-size {}",
             "num_blocks": "--num-gpu-blocks-override {}"},
    "sglang": {"fraction": "--mem-fraction-static {:g}", "fp8": "--kv-cache-dtype fp8_e4m3", "block_size": "--page-size {}",
               "num_tokens": "--max-total-tokens {}"},
}
_TRTLLM_KV_KEYS = {"fraction": "free_gpu_memory_fraction", "fp8": "dtype", "block_size": "tokens_per_block",
                   "num_tokens": "max_tokens"}
VLLM_DEFAULT_FRACTION = 0.9  # vLLM's --gpu-memory-utilization: a plan's own fraction there stays unsaid


def launch_memory_fraction(replica: ReplicaConfig, sched: SchedulerConfig, engine: str) -> float:
    """The memory fraction that gives ``engine``'s server the KV cache the plan priced for ``replica`` under
    ``sched`` (:func:`~simulator.engine.kvcache.build_kv_cache`), whatever base the plan's fraction was given on. The
    engines read theirs on three bases: vLLM's ``--gpu-memory-utilization`` is weights, activations (its profiling
    run's, non-torch memory included) and KV cache over the GPU's total memory; SGLang's ``--mem-fraction-static``
    weights and KV pool over it (it measures the memory left after loading, so CUDA's context counts with the
    weights, activations not at all); TensorRT-LLM's ``free_gpu_memory_fraction`` the KV cache over what weights and
    activations leave. Copied unchanged, 0.9 of free memory as vLLM's total would give its server less KV than the
    plan's, and 0.8 of total as TensorRT-LLM's free a quarter more. Pipeline stages hold different weights under one
    fraction: the one that gives every stage the plan's tokens. Rounded down to 3 decimals, so a server never
    gets more than was planned. (A drafter's weights are left out: they come off every base's cache alike but
    TensorRT-LLM's, whose free memory they shrink by their own size times the fraction.)"""
    plan = build_kv_cache(replica, sched)[1]
    memory = replica.gpu_spec.memory_bytes
    # the cache's tokens as memory sets them (a given --num-gpu-blocks is said beside: num_blocks, num_tokens)
    tokens = min(b / t for b, t in zip(plan.kv_budget_bytes, plan.kv_bytes_per_token, strict=True))

    def stage_fraction(weights: float, per_token: float) -> float:
        kv = tokens * per_token
        if engine == "trtllm":
            return kv / (memory - weights - plan.activation_bytes)
        if engine == "sglang":
            return (weights + NON_TORCH_RESERVE_BYTES + kv) / memory
        return (weights + plan.activation_bytes + kv) / memory

    need = max(stage_fraction(w, t) for w, t in zip(plan.weights_bytes, plan.kv_bytes_per_token, strict=True))
    return math.floor(need * 1000 + 1e-6) / 1000  # (a plan's own 0.9 of total is 0.9 again, not 0.899)


def _memory_flags(base: RunConfig, engine: str, fraction: float) -> list[str]:
    """An engine's memory flags: the departures, and the fraction that gives its server the planned cache (vLLM's
    unsaid where it is vLLM's default)."""
    said = {} if engine == "vllm" and fraction == VLLM_DEFAULT_FRACTION else {"fraction": fraction}
    flags = _MEMORY_FLAGS[engine]
    return [flags[k].format(v) for k, v in (said | _memory_departures(base)).items() if k in flags]


def _trtllm_memory_options(base: RunConfig, fraction: float) -> dict[str, Any]:
    """TensorRT-LLM's kv_cache_config: always its free_gpu_memory_fraction (its own default, 0.9 of free memory,
    is not what a plan on total memory priced), and the departures."""
    kv = {_TRTLLM_KV_KEYS[k]: ("fp8" if k == "fp8" else v)
          for k, v in ({"fraction": fraction} | _memory_departures(base)).items() if k in _TRTLLM_KV_KEYS}
    return {"kv_cache_config": kv}


def _head_path(spec: SpeculativeConfig) -> str:
    """An EAGLE/Medusa head's checkpoint for a launch line: a known head's id, else a placeholder."""
    return spec.known_head.spec.hf_id if spec.known_head is not None else _DRAFT_HEAD


def _vllm_speculative(spec: SpeculativeConfig) -> dict[str, Any]:
    """vLLM's own ``--speculative-config`` keys (the simulator's acceptance keys are not vLLM's)."""
    out: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": spec.num_verify_tokens}
    if spec.method == "draft_model":
        out["model"] = spec.draft_model
    elif spec.method in ("eagle", "eagle3", "medusa"):
        out["model"] = _head_path(spec)
    if spec.parallel_drafting:
        out["parallel_drafting"] = True
    if spec.draft_tp is not None:  # unset: vLLM runs the draft at the target's TP, as the plan priced it
        out["draft_tensor_parallel_size"] = spec.draft_tp
    if spec.token_tree:
        out["speculative_token_tree"] = str(list(spec.token_tree))
    if spec.disable_by_batch_size is not None:
        out["disable_by_batch_size"] = spec.disable_by_batch_size
    return out


# SGLang's --speculative-algorithm per method (its MTP for DeepSeek runs as EAGLE over the NextN module).
_SGLANG_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM", "draft_model": "STANDALONE"}


def _sglang_speculative(spec: SpeculativeConfig) -> tuple[list[str], str]:
    algorithm = _SGLANG_ALGORITHMS.get(spec.method)
    if algorithm is None:
        return [], f"SGLang has no {spec.method} speculation: the plan priced it"
    k = spec.k
    flags = [f"--speculative-algorithm {algorithm}", f"--speculative-num-steps {k}", "--speculative-eagle-topk 1",
             f"--speculative-num-draft-tokens {k + 1}"]
    if spec.method == "draft_model":
        flags.append(f"--speculative-draft-model-path {spec.draft_model}")
    elif spec.method in ("eagle", "eagle3"):
        flags.append(f"--speculative-draft-model-path {_head_path(spec)}")
    note = (f"the plan priced a token tree of {spec.num_verify_tokens} nodes: set --speculative-eagle-topk and "
            "--speculative-num-draft-tokens to it" if spec.token_tree else "")
    if spec.parallel_drafting:
        note = "the plan priced parallel drafting (one drafter pass a step), which SGLang does not run"
    return flags, note


# TensorRT-LLM's speculative_config decoding_type per method.
_TRTLLM_DECODING = {"mtp": "MTP", "eagle": "Eagle", "eagle3": "Eagle", "ngram": "NGram", "draft_model": "DraftTarget",
                    "medusa": "Medusa"}


def _trtllm_speculative(spec: SpeculativeConfig) -> dict[str, Any]:
    if spec.method == "mtp":
        return {"decoding_type": "MTP", "num_nextn_predict_layers": spec.k}
    out: dict[str, Any] = {"decoding_type": _TRTLLM_DECODING[spec.method], "max_draft_len": spec.k}
    if spec.method == "draft_model":
        out["speculative_model_dir"] = spec.draft_model
    elif spec.method in ("eagle", "eagle3", "medusa"):
        out["speculative_model_dir"] = _head_path(spec)
    return out


LAUNCH_ENGINES = ("vllm", "sglang", "trtllm")


def default_launch(config: RunConfig) -> str:
    """The engine whose launch command fits a run: its kernels' backend, else its engine preset's."""
    if config.replica.kernels in LAUNCH_ENGINES:
        return config.replica.kernels
    family = config.engine.split("-")[0]
    return family if family in LAUNCH_ENGINES else "vllm"
