"""AIConfigurator's silicon sample: end-to-end benchmark rows of today's engines, as run configs.

``../shared/data/validation/aiconfigurator/silicon_train.csv`` holds one row per benchmark
point of TensorRT-LLM, SGLang or vLLM (aggregated or disaggregated) on H100/B200/B300/GB200/
GB300: the engine's layout, nominal input/output lengths, the client's concurrency and the
measured TTFT and TPOT (its README says what is and is not known about how they were taken).

This module reads it the way its README asks (:func:`read_silicon`):

- rows marked ``wip=True`` in their source are dropped (work in progress);
- aggregated rows whose layout the later dumps recorded scaled by its own expert-parallel width
  (:func:`_single_node_layout`: a ``tp4 ep4`` engine of 4 GPUs written as 16, ``tp8 ep8`` as 64, on
  systems whose nodes hold 8) are read as the engine their id and the first dump record;
- disaggregated rows of the dated dumps, which give each pool's per-worker TP but not its workers, DP
  attention or EP (and a few GB200 points filed as one aggregated engine over all their GPUs), take
  the deployment InferenceX's benchmark matrix names at that point (:func:`recipe_layout`, from
  ``simulator/data/inferencex_disagg_recipes.csv``) where exactly one recipe fits and it runs without MTP
  (or, asked for, with MTP at an acceptance the caller states: the matrix gives its draft length only);
- rows exported by more than one dump (the same (TTFT, TPOT) pair to 0.01 ms, :func:`measurement_key`: the
  same measurement, sometimes with another id, model alias or layout encoding, its figures rounded to
  0.01 ms by the gap-analysis export or a last digit apart between dumps) are kept once: the most
  informative copy (most layout fields given, then the db-dump, then the first in file order),
  with ``num_copies`` saying how many there were;

and turns each row into a closed-loop :class:`~simulator.config.run_config.RunConfig`
(:func:`row_config`): the client's concurrency as ``workload.concurrency``, fixed lengths at
the nominal ISL/OSL, a warm-up of one request per user left out of the figures, and the
engine's layout (attention DP and expert parallelism included; a disaggregated row's pools each
with their own, where they differ or use attention DP) and the system's network between nodes
(:data:`SYSTEM_NETWORKS`: one NIC per GPU, NVLink across a GB200/GB300 rack). What the simulator cannot
express (a model outside the catalog, a disaggregated row without workers and no recipe, ...) raises
:class:`Unexpressible` with the reason, so a validation report lists every row it skipped.

Choices stated (not in the data): each backend's default policy (:data:`BACKEND_SCHEDULERS`:
``vllm-v1`` for vLLM and TensorRT-LLM, SGLang's prefill-first ``sglang``), with
``max_num_batched_tokens`` 8192 (vLLM V1's API-server default on H100-class GPUs) and
``max_num_seqs`` at least the engine's batch; the KV cache sized by the backend's engine's rule
(:data:`BACKEND_ENGINES`: vLLM's 0.9 of total memory, SGLang's static fraction, TensorRT-LLM's 0.9 of free memory in
32-token blocks); the KV cache is FP8 when
the GEMMs are FP8/FP4 (as AIConfigurator infers it from the checkpoint), else the activation
dtype. Engine preset and kernels are the caller's (the run's defaults unless given).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.config.errors import ConfigError
from simulator.config.topology import MAX_GPUS_PER_NODE

if TYPE_CHECKING:
    import pandas as pd

    from simulator.config.run_config import RunConfig

SILICON_CSV = Path("validation") / "aiconfigurator" / "silicon_train.csv"

# AIConfigurator system -> our GPU name (tried in the catalog; a missing one makes its rows unexpressible).
SYSTEMS = {"h100_sxm": "h100-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200", "gb300": "gb300"}
# AIConfigurator system -> the network between its nodes (--inter-node-link), from the system files'
# `node:` sections (../shared/data/profiles/aiconfigurator/systems/<system>.yaml): inter_node_bw per GPU
# (H100: 50 GB/s, one 400 Gb/s CX7 per GPU; B200/B300: 100 GB/s, one 800 Gb/s CX8 per GPU) as one NIC per
# GPU of an 8-GPU node; GB200/GB300 (num_gpus_per_rack 72: NVLink across the rack, the GPU spec's
# nvlink_domain_gpus) between racks: inter_rack_bw 100 GB/s per GPU. Inside a rack, and inside a node,
# the GPUs talk over NVLink, so the rack's 4-GPU trays need no node size of their own.
SYSTEM_NETWORKS = {"h100_sxm": "infiniband-400g-x8", "b200_sxm": "infiniband-800g-x8",
                   "b300_sxm": "infiniband-800g-x8", "gb200": "infiniband-800g-x8", "gb300": "infiniband-800g-x8"}
# AIConfigurator GEMM lane -> our weight format (--dtype); blank = bf16.
GEMM_FORMATS = {"fp8": "fp8", "fp8_block": "fp8-block", "nvfp4": "nvfp4", "int4_wo": "int4", "": "bf16"}
# Rows whose label names another format than the checkpoint the engines load (the data README: gpt-oss-120b is
# labelled nvfp4, its checkpoint is MXFP4): model -> {label's --dtype: the checkpoint's}. MXFP4 then runs as each
# backend's MXFP4 MoE kernel runs it (simulator.config.precision.kernel_format), not as NVFP4's W4A4.
NATIVE_FORMATS = {"gpt-oss-120b": {"nvfp4": "mxfp4"}}
DEFAULT_BUDGET = 8192
# Each backend's scheduling policy as deployed by default: vLLM V1 mixes prefill chunks and
# decodes under one budget; SGLang runs prefill batches first and never mixes them with decodes
# (no --enable-mixed-chunk); TensorRT-LLM's in-flight batching puts context and generation
# requests in one step under max_num_tokens (closest here: vllm-v1's mixed batches).
BACKEND_SCHEDULERS = {"vllm": "vllm-v1", "sglang": "sglang", "trtllm": "vllm-v1"}
# Each backend's engine as it sizes its KV cache (its scheduler preset's memory basis and block:
# SchedulerEntry.memory_basis, block_size), whichever policy runs its batches: TensorRT-LLM's rows run vLLM V1's
# policy with TensorRT-LLM's cache, 0.9 of the memory weights and activations leave, in 32-token blocks.
BACKEND_ENGINES = {"vllm": "vllm-v1", "sglang": "sglang", "trtllm": "trtllm"}
DEFAULT_MAX_NUM_SEQS = 256
# A disaggregated prefill pool's batch cap: the prompts of a step are held by the budget long before
# it; pinned at the value the committed reports ran with (it sizes the logits' activation reserve).
PREFILL_MAX_NUM_SEQS = 128

_SOURCE_KEY = re.compile(r"(?:^|;)\s*([a-z_]+)=([^;]*)")


class Unexpressible(Exception):  # noqa: N818 - a verdict on a row, with its reason
    """A benchmark row the simulator cannot run as measured; the message says why."""


def data_path(data_root: Path) -> Path:
    return Path(data_root) / SILICON_CSV


def source_fields(source: str) -> dict[str, str]:
    """``key=value`` entries of ``silicon_data_source`` (``silicon_concurrency``, ``wip`` ...)."""
    return {m.group(1): m.group(2).strip() for m in _SOURCE_KEY.finditer(str(source))}


def source_family(source: str) -> str:
    """Which of the README's five provenance families a row comes from."""
    text = str(source)
    if text.startswith("db-dump"):
        return "db-dump"
    if "gtl_job_id" in text or "gtl_task_id" in text:
        return "gtl"
    if "gap-analysis" in text:
        return "gap-analysis"
    if "source_file=" in text:
        return "dated-dump"
    return "other"


# The benchmark client each provenance family most likely ran (the rows do not record it; README
# "Measurement semantics" items 1-3). InferenceX's benchmark DB (db-dump, and the dated dumps of the
# same DB): its benchmark_serving.py with --random-range-ratio 0.8, read as [0.8 len, len] (the
# older vLLM/SGLang reading, --range-style sglang), --num-prompts 10 x concurrency and warm-ups run
# as a phase of their own; the others: AIPerf as AIConfigurator's own generated benchmark runs it,
# exact --isl/--osl, --num-requests 20 x concurrency, --warmup-request-count as a phase of its own.
INFERENCEX_FAMILIES = ("db-dump", "dated-dump")
INFERENCEX_CLIENT = {"range_ratio": 0.8, "range_style": "sglang", "warmup_mode": "drain", "requests_per_user": 10}
AIPERF_CLIENT = {"range_ratio": 0.0, "range_style": "vllm", "warmup_mode": "drain", "requests_per_user": 20}
# The token budget of the AIPerf family's aggregated vLLM and TensorRT-LLM rows (AIConfigurator's gap analyses
# and its Dynamo runs). The rows do not record it: AIConfigurator's generated deployments set it from the
# configuration it picked (its build_config.max_num_tokens -> TensorRT-LLM's max_num_tokens, vLLM's
# --max-num-batched-tokens, SGLang's --chunked-prefill-size), else the engine's default applies (8192 for vLLM's
# OpenAI server on an 80 GB GPU). At 8192 the simulated users of an exact-length closed loop at 1,024 prompt
# tokens move in one wave a step, which the measurements rule out (8 users of Qwen3-32B in bf16 on four H100s
# measure a 126 ms TTFT: one 8,192-token step would need more than the GPUs' peak FLOP/s), and TPOT at short
# outputs comes out short (no prompt is ever prefilled beside the decodes). Read at 2048, the two engines' rows
# fit better, in-sample and leaving a GPU out (which hardly tests it: nearly all are H100 rows); SGLang's fit worse
# at 2048 and keep the harness's 8192 (the silicon report's README, "the token budget of AIConfigurator's own runs").
AIPERF_BUDGETS = {"vllm": 2048, "trtllm": 2048}


def _is_inferencex(row: Any) -> bool:
    return source_family(getattr(row, "silicon_data_source", "")) in INFERENCEX_FAMILIES


def benchmark_client(row: Any, aiperf_spread: tuple[float, float] | None = None,
                     aiperf_budget: int | None = None) -> dict[str, Any]:
    """:func:`row_config` keywords for the client ``row``'s provenance family most likely ran
    (:data:`INFERENCEX_CLIENT` or :data:`AIPERF_CLIENT`). For a sensitivity study of the latter's
    rows (their exact lengths lock simulated users into waves: the silicon report's README):
    ``aiperf_spread``, prompt and output lengths spread by these standard deviations in tokens, as
    ``--isl-stddev`` and ``--osl-stddev`` would; ``aiperf_budget``, another token budget than
    :data:`AIPERF_BUDGETS`' (a backend it does not name, and a disaggregated row: the harness's)."""
    if _is_inferencex(row):
        return dict(INFERENCEX_CLIENT)
    client: dict[str, Any] = dict(AIPERF_CLIENT)
    if aiperf_spread is not None:
        client["prompt_stddev"], client["output_stddev"] = aiperf_spread
    budget = aiperf_budget
    if budget is None and str(getattr(row, "mode", "")) == "agg":
        budget = AIPERF_BUDGETS.get(str(getattr(row, "backend", "")))
    if budget is not None:
        client["budget"] = budget
    return client


# InferenceX's TensorRT-LLM recipes' attention_dp_config timeout_iters (batching_wait_iters 0).
TRTLLM_DP_BALANCE_TIMEOUT_ITERS = 60
# InferenceX's TensorRT-LLM DeepSeek-R1 FP8 B200 recipe's batch waiting (its DELAY_BATCHING: at 1K/1K from
# 64 users): batch_wait_timeout_iters, batch_wait_max_tokens_ratio.
TRTLLM_BATCH_WAIT = (40, 0.8)
# Its TensorRT-LLM Llama-3.3-70B B200 recipes (FP8 and FP4) wait for batches at 1K/1K below TP8 ("will improve
# the performance", their comment says): 20 iterations, ratio 0.9. The rows bear it out: measured TTFT at 4
# users is 180-380 ms at TP1-TP4 against 62-67 ms at TP8 and 58-79 ms at 1K/8K, and less its prefill about 20
# of the row's own TPOTs. (Their max_num_tokens differ, 16384 for FP8 and max_seq_len for FP4, in the scripts
# read, which predate the rows: the harness's budget for both.)
TRTLLM_LLAMA_BATCH_WAIT = (20, 0.9)
# InferenceX's TensorRT-LLM DeepSeek-R1 FP8 B200 deployments that set moe_config backend DEEPGEMM, not the engine's
# TRTLLM default: its single-node script (benchmarks/dsr1_fp8_b200_trt.sh) from this many users at 1K/1K and 1K/8K
# (where it also turns the batch waiting off); its disaggregated 1K/1K recipes (ishandhanani/srt-slurm,
# recipes/trtllm/b200-fp8/1k1k, branch sa-submission-q1-2026) on every prefill worker (TP8, EP8, DP attention) and
# on decode workers with DP attention (their TP8 decode workers without it keep TRTLLM); its 8K/1K recipes keep
# TRTLLM on both.
TRTLLM_DEEPGEMM_USERS = 256
# InferenceX's SGLang DeepSeek-R1 FP8 disaggregated recipes on these systems (srt-slurm recipes/gb200-fp8, gb300-fp8:
# mid-curve, max-tpt, ultra-tpt) run every worker with expert parallelism over DeepEP (--moe-a2a-backend deepep:
# normal mode on the prefill workers, low_latency on the decode workers), whose block-FP8 experts run DeepGEMM's
# grouped GEMMs (SGLang's DeepEP MoE; no --moe-runner-backend set); their low-latency recipes (TP4/TP8 without EP)
# run FlashInfer's TensorRT-LLM MoE, the default. SGLang's collectors timed no DeepGEMM MoE: TensorRT-LLM's
# GB200/GB300 rows price it (TableCostModel: --moe-kernel from another backend's tables).
SGLANG_DEEPEP_SYSTEMS = ("gb200", "gb300")
# ... and the expert-parallel splits TensorRT-LLM's collectors timed DeepGEMM's MoE at (powers of two): a recipe's
# EP 24 or 48 decode workers keep the default's rows.
DEEPGEMM_TIMED_EP = (2, 4, 8, 16, 32, 64, 128, 256)
# Their NVFP4 recipes' wide-EP decode workers (mid-curve, max-tpt: DEP32 and DEP48 over DeepEP's low-latency mode)
# run FlashInfer's CuteDSL MoE (--moe-runner-backend flashinfer_cutedsl); the low-latency recipes' TP4 decode workers
# and every prefill worker keep FlashInfer's TensorRT-LLM MoE, the default (the 1K-input recipes' DEP4 prefill
# workers run FlashInfer's CUTLASS MoE, which no GB200/GB300 table times at DeepSeek's shape). SGLang's collectors
# timed CuteDSL on B200 and B300, the same dies (TableCostModel: --moe-kernel from the sibling's tables), at these
# EP splits (the powers of two, as DeepGEMM's): the EP 48 workers keep the default's rows.
CUTEDSL_TIMED_EP = DEEPGEMM_TIMED_EP
# InferenceX's TensorRT-LLM DeepSeek-R1 NVFP4 disaggregated recipes on B200 and GB200 (srt-slurm recipes/trtllm/
# b200-fp4 and gb200-fp4, as InferenceX keeps them under benchmarks/multi_node/srt-slurm-recipes/dsr1/trtllm) run
# their prefill workers (TP4, EP4, DP attention) with moe_config backend TRTLLM: TensorRT-LLM's TRTLLM-Gen fused MoE,
# which AIConfigurator's collector times as moe_torch_flow_min_latency ("trtllm gen"; AIConfigurator prices it only up
# to 128 tokens, where TensorRT-LLM's own choice runs it, and the engine's default here does the same). Their
# max_num_tokens (per attention-DP rank: two 8K prompts a step, eight to sixteen 1K ones) is the prefill pool's budget:
# system -> ISL -> tokens. B300/GB300 tables time no TRTLLM-Gen MoE: their workers keep the default's rows.
TRTLLM_GEN_PREFILL: dict[str, dict[int, int]] = {"b200_sxm": {1024: 10240, 8192: 16896},
                                                 "gb200": {1024: 16384, 8192: 16640}}
# The same SGLang recipes' --chunked-prefill-size on their prefill workers (the whole DP group's: SGLang splits it
# over its attention-DP ranks, so the harness's DEFAULT_BUDGET gave a DP8 prefill rank 1,024 tokens, one prompt a
# step) and their --mem-fraction-static (the decode workers', which hold the load; the prefill workers' is within
# 0.1 of it; the run's fraction, both pools take it): (system, gemm lane) -> (chunk tokens, memory fraction, only a
# prefill pool with DP attention and EP: a wide-EP recipe's). B200: every recipe's workers (the 8K/1K FP4 recipe of
# seven prefill workers chunks 65,536: PREFILL_CHUNK_7P); GB200/GB300: their wide-EP recipes (the low-latency TP
# recipes chunk 8,192 to 32,768 by ISL, and a layout no recipe read has keeps the harness's).
SGLANG_PREFILL_RECIPES: dict[tuple[str, str], tuple[int, float, bool]] = {
    ("b200_sxm", "fp8"): (32768, 0.85, False), ("b200_sxm", "nvfp4"): (32768, 0.85, False),
    ("gb200", "fp8"): (131072, 0.82, True), ("gb300", "fp8"): (131072, 0.82, True),
    ("gb200", "nvfp4"): (65536, 0.83, True), ("gb300", "nvfp4"): (65536, 0.83, True),
}
PREFILL_CHUNK_7P = 65536


def recipe_changes(row: Any) -> dict[str, Any]:
    """:meth:`RunConfig.replace` changes for the server flags ``row``'s deployment recipe most
    likely set where they change the schedule. InferenceX's SGLang launch scripts (the published
    DeepSeek-R1 B200 one) poll for new requests every 10 iterations below concurrency 16 and every
    30 at or above (``--scheduler-recv-interval``); taken for every InferenceX SGLang row, since the
    rows do not name their recipe. InferenceX's TensorRT-LLM single-node launch scripts (the
    DeepSeek-R1 ones) turn on the attention-DP balance with DP attention (``attention_dp_config``:
    ``enable_balance: true, timeout_iters: 60, batching_wait_iters: 0``); taken for every InferenceX
    TensorRT-LLM aggregated row with DP attention (:class:`~simulator.engine.dp_group.PromptBalance`;
    a disaggregated pool's ranks never hold a prompt: a prefill pool's have no decodes, a decode
    pool's no prompts). Their DeepSeek-R1 FP8 B200 script also sets batch waiting at 1K/1K at 64-255 users
    (``batch_wait_timeout_iters: 40, batch_wait_max_tokens_ratio: 0.8``), which the engine applies
    without DP attention (:class:`~simulator.engine.batch_wait.BatchWait`); taken for those rows (the
    script's max_num_tokens, the larger of 8192 and users + ISL rounded up, is the harness's budget of
    8192 there), and so do its Llama-3.3-70B B200 scripts at 1K/1K below TP8 (:data:`TRTLLM_LLAMA_BATCH_WAIT`).
    Nothing for the other rows."""
    backend = str(getattr(row, "backend", ""))
    if not _is_inferencex(row):
        return {}
    if backend == "sglang":
        concurrency = _int(row.concurrency) or 1
        return {"scheduler__recv_interval": 30 if concurrency >= 16 else 10}
    if backend != "trtllm" or str(getattr(row, "mode", "")) != "agg":
        return {}
    if (_int(getattr(row, "attention_dp_size", 1)) or 1) > 1:
        return {"scheduler__dp_balance_timeout_iters": TRTLLM_DP_BALANCE_TIMEOUT_ITERS}
    model, one_k_one_k = str(row.model_path).lower(), _int(row.isl) == 1024 and _int(row.osl) == 1024
    wait = None
    if (one_k_one_k and str(row.system) == "b200_sxm" and "llama-3" in model and "70b" in model
            and (_int(getattr(row, "tp_size", None)) or 8) < 8):
        wait = TRTLLM_LLAMA_BATCH_WAIT
    elif (one_k_one_k and str(row.system) == "b200_sxm" and "deepseek" in model
          and str(getattr(row, "gemm_quant_mode", "")) == "fp8"
          and 64 <= (_int(row.concurrency) or 0) < TRTLLM_DEEPGEMM_USERS):  # (from there it runs DeepGEMM, unwaited)
        wait = TRTLLM_BATCH_WAIT
    if wait is None:
        return {}
    timeout, ratio = wait
    return {"scheduler__batch_wait_timeout_iters": timeout, "scheduler__batch_wait_max_tokens_ratio": ratio}


def recipe_moe_kernels(row: Any) -> tuple[str | None, str | None]:
    """The ``--moe-kernel`` of ``row``'s deployment where its recipe runs another MoE kernel than the engine's
    default: (the aggregated engine's or the prefill workers', the decode workers'); None: the default's. Only
    InferenceX's DeepSeek-R1 rows set one: FP8, TensorRT-LLM's on B200 (:data:`TRTLLM_DEEPGEMM_USERS`) and SGLang's
    disaggregated wide-EP workers on GB200 and GB300 (:data:`SGLANG_DEEPEP_SYSTEMS`); FP4, SGLang's wide-EP decode
    workers there (:data:`CUTEDSL_TIMED_EP`) and TensorRT-LLM's DP-attention prefill workers on B200 and GB200
    (:data:`TRTLLM_GEN_PREFILL`)."""
    lane = str(getattr(row, "gemm_quant_mode", ""))
    if not _is_inferencex(row) or "deepseek" not in str(row.model_path).lower() or lane not in ("fp8", "nvfp4"):
        return None, None
    backend = str(getattr(row, "backend", ""))
    if _trtllm_gen_prefill(row):  # (an NVFP4 row)
        return "min_latency", None
    if lane == "nvfp4":  # SGLang's wide-EP decode workers on GB200/GB300: FlashInfer's CuteDSL experts over DeepEP
        wide = (backend == "sglang" and str(row.system) in SGLANG_DEEPEP_SYSTEMS and row.mode == "disagg"
                and (_int(getattr(row, "decode_moe_ep_size", 1)) or 1) in CUTEDSL_TIMED_EP)
        return None, ("cutedsl" if wide else None)
    if backend == "sglang" and str(row.system) in SGLANG_DEEPEP_SYSTEMS and row.mode == "disagg":
        prefill, decode = ("deepgemm" if (_int(getattr(row, f"{pool}_moe_ep_size", 1)) or 1) in DEEPGEMM_TIMED_EP
                           else None for pool in ("prefill", "decode"))
        return prefill, decode
    if backend != "trtllm" or str(row.system) != "b200_sxm" or _int(row.isl) != 1024:
        return None, None
    if row.mode == "agg":
        many = _int(row.osl) in (1024, 8192) and (_int(row.concurrency) or 0) >= TRTLLM_DEEPGEMM_USERS
        return ("deepgemm" if many else None), None
    if _int(row.osl) != 1024:
        return None, None
    decode_dp = (_int(getattr(row, "decode_attention_dp_size", 1)) or 1) > 1
    return "deepgemm", ("deepgemm" if decode_dp else None)


def _trtllm_gen_prefill(row: Any) -> bool:
    """Whether ``row`` is a TensorRT-LLM DeepSeek NVFP4 disaggregated deployment of InferenceX's whose prefill
    workers (DP attention with EP) run the TRTLLM-Gen MoE under a recipe's max_num_tokens (:data:`TRTLLM_GEN_PREFILL`)."""
    return (str(getattr(row, "backend", "")) == "trtllm" and row.mode == "disagg" and _is_inferencex(row)
            and "deepseek" in str(row.model_path).lower() and str(getattr(row, "gemm_quant_mode", "")) == "nvfp4"
            and _int(row.isl) in TRTLLM_GEN_PREFILL.get(str(row.system), {})
            and (_int(getattr(row, "prefill_attention_dp_size", 1)) or 1) > 1
            and (_int(getattr(row, "prefill_moe_ep_size", 1)) or 1) > 1)


def trtllm_prefill_budget(row: Any) -> int | None:
    """The prefill workers' max_num_tokens of ``row``'s TensorRT-LLM recipe (:data:`TRTLLM_GEN_PREFILL`); None: the
    harness's budget."""
    return TRTLLM_GEN_PREFILL[str(row.system)][_int(row.isl)] if _trtllm_gen_prefill(row) else None


def sglang_prefill_recipe(row: Any) -> tuple[int, float] | None:
    """(the prefill workers' chunked-prefill size, the memory fraction) of an InferenceX SGLang DeepSeek-R1
    disaggregated row's recipe (:data:`SGLANG_PREFILL_RECIPES`); None: the harness's own."""
    if (str(getattr(row, "backend", "")) != "sglang" or row.mode != "disagg" or not _is_inferencex(row)
            or "deepseek" not in str(row.model_path).lower()):
        return None
    lane = str(getattr(row, "gemm_quant_mode", ""))
    recipe = SGLANG_PREFILL_RECIPES.get((str(row.system), lane))
    if recipe is None:
        return None
    chunk, fraction, wide_only = recipe
    wide = ((_int(getattr(row, "prefill_attention_dp_size", 1)) or 1) > 1
            and (_int(getattr(row, "prefill_moe_ep_size", 1)) or 1) > 1)  # DP attention with EP: a wide-EP recipe's
    if wide_only and not wide:
        return None
    if (str(row.system), lane, _int(row.isl), _int(getattr(row, "prefill_num_workers", 1))) == ("b200_sxm", "nvfp4",
                                                                                                 8192, 7):
        chunk = PREFILL_CHUNK_7P
    return chunk, fraction


# InferenceX's disaggregated recipes (results/validation/silicon/inferencex_recipes.py writes it from snapshots
# of its benchmark matrix): the workers each point of the matrix ran.
RECIPES_PATH = Path(__file__).resolve().parents[1] / "data" / "inferencex_disagg_recipes.csv"
# silicon system -> the matrix's runner prefix; model path (lower case) -> its model-prefix.
_RECIPE_SYSTEMS = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
                   "gb300": "gb300"}
_RECIPE_MODELS = {"deepseek-ai/deepseek-r1": "dsr1", "deepseek-ai/deepseek-v3": "dsr1", "openai/gpt-oss-120b": "gptoss"}
# InferenceX's aggregated points (the same script writes it): the container image each matrix entry ran a point
# with, and whether that entry runs MTP. The matrix runs many DeepSeek-R1 points twice (``<key>`` and ``<key>-mtp``),
# and the dumps' aggregated rows record the image but not the speculation.
AGG_IMAGES_PATH = RECIPES_PATH.with_name("inferencex_agg_images.csv")
_RECIPE_LAYOUT = ("prefill_num_workers", "prefill_tp", "prefill_ep", "prefill_dp_attn", "decode_num_workers",
                  "decode_tp", "decode_ep", "decode_dp_attn")


def read_recipes(path: Path = RECIPES_PATH) -> pd.DataFrame:
    """The recipe table (one line per distinct recipe at a matrix point), or an empty frame."""
    import pandas as pd

    return pd.read_csv(path) if Path(path).is_file() else pd.DataFrame(columns=["backend", *_RECIPE_LAYOUT])


def _recipe_candidates(row: Any, recipes: pd.DataFrame) -> pd.DataFrame:
    """The recipes at ``row``'s matrix point that agree with what the row records of its layout: the
    per-worker TP of each pool (the dated dumps keep it), or, for a row filed as aggregated, its GPUs in all
    (the 2026-04-06 dump files some disaggregated GB200 points as one ``tp = every GPU`` engine)."""
    model = _RECIPE_MODELS.get(str(row.model_path).lower())
    system = _RECIPE_SYSTEMS.get(str(row.system))
    concurrency = _int(row.concurrency)
    if model is None or system is None or concurrency is None or recipes.empty:
        return recipes.iloc[0:0]
    at = recipes[(recipes["backend"] == row.backend) & (recipes["system"] == system) & (recipes["model"] == model)
                 & (recipes["precision"] == row.precision) & (recipes["isl"] == _int(row.isl))
                 & (recipes["osl"] == _int(row.osl)) & (recipes["concurrency"] == concurrency)]
    if row.mode == "disagg":
        return at[(at["prefill_tp"] == _int(row.prefill_tp_size)) & (at["decode_tp"] == _int(row.decode_tp_size))]
    total = at["prefill_num_workers"] * at["prefill_tp"] + at["decode_num_workers"] * at["decode_tp"]
    return at[total == _recorded_gpus(row)]


def recipe_layout(row: Any, recipes: pd.DataFrame, *, with_mtp: bool = False) -> tuple[dict[str, Any] | None, str]:
    """The layout fields InferenceX's recipe gives a row the dated dumps recorded without worker counts
    (a disaggregated row, or one filed as an aggregated engine over more GPUs than its model's heads
    divide), with a note saying so; or None and why none is taken.

    Taken only where exactly one layout of the recipe table fits the row (:func:`_recipe_candidates`), it
    runs without speculation, and each worker is a real engine (the SGLang GB200 matrix entries give
    ``tp: 1, ep: 1`` and leave the layout to the recipe file). DP attention over a worker's ``tp`` GPUs is
    ``attention_dp = tp`` of one GPU each, experts over ``ep`` of them (the db-dump's encoding).

    ``with_mtp``: also take a recipe that runs MTP at every recipe of its point (not a point run both
    with and without) and names its draft length; ``mtp_drafts`` then says how many drafts a step, and
    the row runs only with an acceptance its caller states (:func:`row_config`'s ``mtp_acceptance``: the
    matrix does not record what InferenceX's random prompts accept)."""
    found = _recipe_candidates(row, recipes)
    point = (f"{row.backend} {row.system} {row.precision} {_int(row.isl)}/{_int(row.osl)} at "
             f"{_int(row.concurrency)} users")
    if found.empty:
        return None, f"no InferenceX recipe at {point} in the snapshots read ({RECIPES_PATH.name})"
    layouts = found.drop_duplicates(list(_RECIPE_LAYOUT))
    if len(layouts) > 1:
        return None, f"{len(layouts)} InferenceX recipes at {point} fit what the row records"
    drafts = 0
    if (found["spec"] != "none").any():
        both = (found["spec"] == "none").any()
        ks = found["num_speculative_tokens"].dropna().astype(int).unique()
        if not with_mtp or both or len(ks) != 1 or ks[0] < 1:
            why = (" and the matrix does not give its draft length" if with_mtp and not both and len(ks) != 1
                   else "")
            return None, (f"InferenceX's recipe at {point} runs {'with and without ' if both else ''}MTP, whose "
                          f"acceptance on its random prompts is not recorded{why}")
        drafts = int(ks[0])
    r = layouts.iloc[0]
    fields: dict[str, Any] = {"mode": "disagg", "mtp_drafts": drafts}
    pools = []
    for role in ("prefill", "decode"):
        tp, ep, dp_attn = int(r[f"{role}_tp"]), int(r[f"{role}_ep"]), bool(r[f"{role}_dp_attn"])
        if tp * ep == 1 and _RECIPE_MODELS.get(str(row.model_path).lower()) == "dsr1":  # 671B on one GPU
            return None, f"InferenceX's matrix gives {point} as tp 1, ep 1 workers (the layout is in its recipe file)"
        if tp % ep:
            return None, f"InferenceX's recipe at {point} has {role} ep {ep} not dividing tp {tp}"
        workers = int(r[f"{role}_num_workers"])
        fields.update({f"{role}_num_workers": workers, f"{role}_tp_size": 1 if dp_attn else tp, f"{role}_pp_size": 1,
                       f"{role}_attention_dp_size": tp if dp_attn else 1, f"{role}_moe_tp_size": tp // ep,
                       f"{role}_moe_ep_size": ep})
        pools.append(f"{role} {workers}x {'dep' if dp_attn else 'tp'}{tp}{f' ep{ep}' if ep > 1 else ''}")
    mtp = f", MTP {drafts} drafts" if drafts else ""
    return fields, f"InferenceX recipe ({r['snapshot'].split()[0]}): {', '.join(pools)}{mtp}"


def _row_image(row: Any) -> str:
    """The container image a row's source records, as name:tag (without the host it is pulled from); "" if none."""
    image = source_fields(str(getattr(row, "silicon_data_source", ""))).get("image", "").split(" ")[0]
    return image.replace("#", "/").rsplit("/", 1)[-1]


def agg_spec_refusal(row: Any, points: pd.DataFrame) -> str:
    """Why an aggregated InferenceX row is not run as a plain (non-speculative) engine, or "".

    InferenceX's matrix (``points``: :data:`AGG_IMAGES_PATH`) runs many points both with and without MTP, as
    two entries, usually on two images, and the dumps record the row's image but not whether it ran MTP. At
    a point the matrix runs with MTP, a row runs only where its image is one the matrix ran the point with
    without MTP alone, or where it records no image (the db-dump's rows); it is the MTP run where its image ran
    the point only with MTP (or the matrix ran the point no other way), and undecided where its image ran the
    point both ways or no snapshot names its image there. Checked on the rows (``tests/test_silicon_recipes.py``):
    at the 8 points where one row's image says MTP and another row's says not (TensorRT-LLM, DeepSeek-R1, B200),
    the MTP-image row has the lower TPOT at every one, by 1.3-2.3x; and each of the 27 image-less rows beside
    an MTP-image row of the same point and recorded layout is the slower of the two (1.15-2.3x)."""
    if getattr(row, "mode", "") != "agg" or not _is_inferencex(row) or points.empty:
        return ""
    model = _RECIPE_MODELS.get(str(row.model_path).lower())
    system = _RECIPE_SYSTEMS.get(str(row.system))
    concurrency = _int(row.concurrency)
    if model is None or system is None or concurrency is None:
        return ""
    at = points[(points["backend"] == row.backend) & (points["system"] == system) & (points["model"] == model)
                & (points["precision"] == row.precision) & (points["isl"] == _int(row.isl))
                & (points["osl"] == _int(row.osl)) & (points["concurrency"] == concurrency)]
    specs = set(at["spec"].astype(str))
    if "mtp" not in specs:
        return ""
    point = f"{row.backend} {row.system} {row.precision} {_int(row.isl)}/{_int(row.osl)} at {concurrency} users"
    image = _row_image(row)
    mine = set(at.loc[at["image"] == image, "spec"].astype(str))
    unknown = "whose acceptance on its random prompts is not recorded"
    if mine == {"none"} or (not image and specs != {"mtp"}):
        return ""
    if specs == {"mtp"}:
        return f"InferenceX's matrix runs {point} only with MTP, {unknown}"
    if mine == {"mtp"}:
        return (f"InferenceX's matrix runs {point} with MTP on the row's image ({image}) and without it on another: "
                f"the row is its MTP run, {unknown}")
    said = f"on the row's image ({image})" if mine else f"and no snapshot read names the row's image ({image}) there"
    return f"InferenceX's matrix runs {point} with and without MTP {said}: which the row ran is not recorded"


_LAYOUT_FIELDS = ("batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
                  "prefill_num_workers", "prefill_tp_size", "prefill_pp_size", "prefill_attention_dp_size",
                  "decode_num_workers", "decode_tp_size", "decode_pp_size", "decode_attention_dp_size")


def read_silicon(path: Path, recipes_path: Path = RECIPES_PATH, *, with_mtp: bool = False,
                 agg_images_path: Path = AGG_IMAGES_PATH) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The CSV's rows to use (wip dropped, duplicates kept once), and the dropped rows with a
    ``dropped`` reason. Adds ``concurrency`` (from the source; NaN where not recorded),
    ``family``, ``wip``, ``num_copies``, ``layout_read_as`` (a layout read otherwise than recorded:
    :func:`_single_node_layout`, :func:`recipe_layout`, :func:`engine_copies`, which also makes ``concurrency``
    one copy's users), ``workers_from_recipe`` (its deployment is
    a recipe's, not recorded), ``recipe_refusal`` (why a row without worker counts took no recipe),
    ``spec_refusal`` (why an aggregated row is taken as a speculative run: :func:`agg_spec_refusal`) and
    ``mtp_drafts`` (the MTP drafts a step its recipe runs; 0 unless ``with_mtp`` took such a recipe:
    :func:`recipe_layout`); keeps file order. Duplicates are found after the layouts are read, so a
    recipe's layout counts as given."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ConfigError("silicon", f"{path} does not exist", "pass the folder that holds validation/aiconfigurator/")
    df = pd.read_csv(path, keep_default_na=True)
    df["row"] = range(len(df))
    fields = df["silicon_data_source"].map(source_fields)
    df["concurrency"] = pd.to_numeric(fields.map(lambda f: f.get("silicon_concurrency")), errors="coerce")
    df["wip"] = fields.map(lambda f: f.get("wip", "").lower() == "true")
    df["family"] = df["silicon_data_source"].map(source_family)
    for col in ("precision", "gemm_quant_mode", "moe_quant_mode", "backend_version"):
        df[col] = df[col].fillna("").astype(str)
    df["layout_read_as"] = ""
    recorded = df[["mode", "batch_size", "attention_dp_size", "concurrency"]].copy()
    for i, row in zip(df.index, df.itertuples(), strict=True):
        script = _vllm_script_layout(row)
        fixed = script or _single_node_layout(row)
        if fixed is None:
            continue
        layout = ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
        before = "/".join(str(_int(getattr(row, c))) for c in layout)
        for col, value in fixed.items():
            df.at[i, col] = value
        why = ("" if script is None else ": InferenceX's vLLM script launches --tensor-parallel-size"
               + (" and --enable-expert-parallel" if script["moe_ep_size"] > 1 else " only"))
        df.at[i, "layout_read_as"] = (f"recorded tp/adp/moe_tp/moe_ep {before} ({_recorded_gpus(row)} GPUs), read as "
                                      + "/".join(str(fixed[c]) for c in layout) + why)
    df["recipe_refusal"] = ""
    df["workers_from_recipe"] = False
    df["mtp_drafts"] = 0
    recipes = read_recipes(recipes_path)
    for i, row in zip(df.index, df.itertuples(), strict=True):
        if not _wants_recipe(row):
            continue
        fields, note = recipe_layout(row, recipes, with_mtp=with_mtp)
        if fields is None:
            df.at[i, "recipe_refusal"] = note
            continue
        if row.mode == "agg":  # filed as one engine: its aggregated fields described the whole deployment
            note = f"filed as agg tp={_int(row.tp_size)}, read as {note}"
            for col in ("batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"):
                df.at[i, col] = math.nan
        for col, value in fields.items():
            df.at[i, col] = value
        df.at[i, "layout_read_as"] = note
        df.at[i, "workers_from_recipe"] = True
    for i, row in zip(df.index, recorded.itertuples(), strict=True):  # as recorded: batch_size is per recorded rank
        copies = 1 if df.at[i, "workers_from_recipe"] else engine_copies(row)
        if copies > 1:
            per_engine = int(row.concurrency) // copies
            said = f"{int(row.concurrency)} users over {copies} copies of the engine (batch_size {_int(row.batch_size)}"
            said += f" x attention_dp {_int(row.attention_dp_size)})" if (_int(row.attention_dp_size) or 1) > 1 else ")"
            df.at[i, "concurrency"] = per_engine
            df.at[i, "layout_read_as"] = "; ".join(x for x in (df.at[i, "layout_read_as"],
                                                                 f"{said}: one copy run with its {per_engine}") if x)
    points = pd.read_csv(agg_images_path) if Path(agg_images_path).is_file() else pd.DataFrame()
    verdicts = [agg_spec_refusal(row, points) for row in df.itertuples()]
    imaged = [bool(_row_image(row)) for row in df.itertuples()]
    # A measurement recorded twice (the same (TTFT, TPOT) pair, e.g. the db-dump's copy without its image)
    # is the same run: what one copy's image says holds for every copy, an MTP image first, then an image that
    # ran the point without MTP, then any other refusal (a copy without an image says nothing of its own).
    pair = list(MEASUREMENT_KEY)
    df[pair] = measurement_key(df)
    for idx in df.groupby(pair, sort=False, dropna=False).indices.values():
        if len(idx) < 2:
            continue
        reasons = [verdicts[i] for i in idx]
        mtp = [x for x in reasons if "is its MTP run" in x or "only with MTP" in x]
        plain = any(not verdicts[i] and imaged[i] for i in idx)
        said = mtp[0] if mtp else "" if plain else next((x for x in reasons if x), "")
        for i in idx:
            verdicts[i] = said
    df["spec_refusal"] = verdicts
    wip = df[df["wip"]].assign(dropped="wip=True in its source (work in progress)")
    rest = df[~df["wip"]].copy()
    rest["num_given"] = rest[list(_LAYOUT_FIELDS)].notna().sum(axis=1)
    rest["is_db_dump"] = rest["family"] == "db-dump"
    rest = rest.sort_values(["num_given", "is_db_dump", "row"], ascending=[False, False, True], kind="stable")
    rest["num_copies"] = rest.groupby(pair, sort=False)["row"].transform("size")
    first = ~rest.duplicated(pair, keep="first")
    kept = rest[first].sort_values("row").drop(columns=["num_given", "is_db_dump", *pair])
    copies = rest[~first].assign(dropped="duplicate: same (TTFT, TPOT) to 0.01 ms as a row kept").drop(
        columns=["num_given", "is_db_dump", *pair])
    dropped = pd.concat([wip.drop(columns=pair), copies]).sort_values("row")
    return kept.reset_index(drop=True), dropped.reset_index(drop=True)


MEASUREMENT_KEY = ("ttft_key_cms", "tpot_key_cms")


def measurement_key(df: Any) -> Any:
    """Each row's measurement as whole hundredths of a millisecond (TTFT, TPOT): two rows with the same key
    are one measurement exported twice. The gap-analysis export rounds its figures to 0.01 ms and the dated
    dumps' copies of one run can differ in the last binary digit, so equality of the raw floats misses them
    (118 copies of this file's rows did); two runs agreeing on both figures to 0.01 ms by chance are not to
    be expected (no two kept rows do)."""
    import pandas as pd

    return pd.DataFrame({"ttft_key_cms": (df["silicon_ttft_ms"] * 100).round().astype("Int64"),
                         "tpot_key_cms": (df["silicon_tpot_ms"] * 100).round().astype("Int64")}, index=df.index)


def engine_copies(row: Any) -> int:
    """How many copies of an aggregated row's engine served its users: ``concurrency / (batch_size x
    attention_dp)`` where that is a whole number above 1, else 1.

    ``batch_size`` is the users of one attention-DP rank (data README item 6: ``concurrency /
    attention_dp`` on 1,998 of its 2,023 aggregated rows). On the others (gtl jobs) the concurrency is a
    multiple of it, and the measurements rule out one engine queueing the rest: Qwen3-32B on two B200s, 416
    users of 15,000-token prompts (``batch_size`` 13), measured a 0.72 s TTFT and 13.7 ms a token, where 416
    such sequences hold about 850 GB of FP8 KV cache (64 layers x 8 KV heads x 128 x 2 bytes a token) and a
    queue behind 13 slots would wait minutes. A router that keeps the copies' loads even gives each copy
    ``batch_size`` of the closed loop's users, so one copy is simulated with them."""
    if getattr(row, "mode", "") != "agg":
        return 1
    batch, adp, users = _int(row.batch_size), _int(row.attention_dp_size, 1), _int(row.concurrency)
    if batch is None or users is None or batch < 1 or adp is None or adp < 1:
        return 1
    copies, rest = divmod(users, batch * adp)
    return copies if copies > 1 and rest == 0 else 1


def _wants_recipe(row: Any) -> bool:
    """A row the dated dumps recorded without its disaggregated deployment: a disaggregated row without
    worker counts, or an aggregated one on an NVL72 rack over more GPUs than a tray-to-tray engine (the
    2026-04-06 dump's ``tp = every GPU`` filing of disaggregated points; taken only where a recipe's GPUs
    add up to it)."""
    if row.mode == "disagg":
        return _int(row.prefill_num_workers) is None or _int(row.decode_num_workers) is None
    return (row.mode == "agg" and row.system in ("gb200", "gb300") and getattr(row, "family", "") == "dated-dump"
            and _recorded_gpus(row) > MAX_GPUS_PER_NODE)


# Systems whose engines live in one 8-GPU node (an aggregated engine larger than that is a recording slip).
_NODE_SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm")


def _recorded_gpus(row: Any) -> int:
    """GPUs of an aggregated row's engine as recorded: ``tp x attention_dp x pp``."""
    return (_int(row.tp_size, 1) or 1) * (_int(row.attention_dp_size, 1) or 1) * (_int(row.pp_size, 1) or 1)


def _single_node_layout(row: Any) -> dict[str, int] | None:
    """The layout fields of an aggregated row whose engine was recorded scaled by its expert-parallel
    width, or None for a row recorded as run.

    The same measurement (identical TTFT and TPOT) appears in the 2026-03-25 dump as ``tp=4, moe_ep=4``
    (the id's ``tp4_0_ep4_0``: one 4-GPU engine, EP over its GPUs) and in the 2026-04-06 dump and the
    db-dump as ``tp=16, moe_tp=4, moe_ep=4``; ``tp8 ep8`` with DP attention as ``adp=8, moe_ep=8`` and
    as ``adp=64, moe_tp=8, moe_ep=8``: 24 such measurement groups, every one this way round. Every
    aggregated row on an 8-GPU-node system with an engine above 8 GPUs has this form: ``G*G`` GPUs with
    ``moe_tp = moe_ep = G`` (SGLang, TensorRT-LLM), or ``tp = adp = G``, ``moe_ep = G*G`` (vLLM's rows, which
    :func:`_vllm_script_layout` reads first where it knows the row's script: none of them ran DP attention). Read
    as ``G`` GPUs with expert parallelism over all of them: ``tp=G`` without attention DP, else ``adp=G`` of one
    GPU each (the first dump's encoding of DP attention)."""
    if getattr(row, "mode", "") != "agg" or getattr(row, "system", "") not in _NODE_SYSTEMS:
        return None
    tp, adp = _int(row.tp_size, 1) or 1, _int(row.attention_dp_size, 1) or 1
    moe_tp, ep, pp = _int(row.moe_tp_size, 1) or 1, _int(row.moe_ep_size, 1) or 1, _int(row.pp_size, 1) or 1
    num_gpus = _recorded_gpus(row)
    g = math.isqrt(num_gpus)
    if num_gpus <= MAX_GPUS_PER_NODE or g * g != num_gpus or g > MAX_GPUS_PER_NODE or pp != 1:
        return None
    if moe_tp == ep == g:  # tp=G*G (or adp=G*G) with the MoE as G x G
        dp_attention = adp > 1
    elif tp == adp == g and moe_tp == 1 and ep == num_gpus:
        dp_attention = True
    else:
        return None
    return {"tp_size": 1 if dp_attention else g, "attention_dp_size": g if dp_attention else 1,
            "moe_tp_size": 1, "moe_ep_size": g}


# InferenceX's vLLM single-node scripts (benchmarks/single_node/<model>_<precision>_<gpu>.sh, through April 2026) for
# the (model, precision) pairs below start `vllm serve --tensor-parallel-size $TP`, with `--enable-expert-parallel`
# where the matrix entry's ep is above 1 ("entry": MiniMax-M2.5 FP8's scripts read EP_SIZE) or never ("never":
# Kimi-K2.5's); none of them passes --data-parallel-size (the workflow exports the entry's dp-attn as DP_ATTENTION,
# which none of them reads). Their result database counts a legacy run's GPUs as tp x ep, and the export reads GPUs /
# tp as attention-DP ranks with the experts over all of them: a tp 4, ep 4 point is filed as tp 4, attention DP 4,
# EP 16 (16 GPUs), a tp 2, ep 2 one as tp 2, attention DP 2, EP 4. (SemiAnalysisAI/InferenceX's scripts and its
# app's ETL, read for the silicon report.) MiniMax-M2.5 FP4's scripts are not here: some versions run DP attention
# where DP_ATTENTION is set (`--tensor-parallel-size=1 --data-parallel-size=$TP --enable-expert-parallel`), and a row
# does not record whether its entry set it.
VLLM_SCRIPT_EXPERT_PARALLEL = {("moonshotai/kimi-k2.5", "fp4"): "never", ("moonshotai/kimi-k2.5", "int4"): "never",
                               ("minimaxai/minimax-m2.5", "fp8"): "entry"}
# (model, precision, system, vLLM version) whose script passed --enable-expert-parallel whatever the entry's ep:
# MiniMax-M2.5 FP8's B200 script until the matrix moved it to the 0.19.0 image (minimaxm2.5_fp8_b200.sh).
VLLM_SCRIPT_ALWAYS_EP = {("minimaxai/minimax-m2.5", "fp8", "b200_sxm", "0.17.0")}


def _vllm_script_layout(row: Any) -> dict[str, int] | None:
    """The layout fields of an aggregated InferenceX vLLM row of a model whose script :data:`VLLM_SCRIPT_EXPERT_PARALLEL`
    knows, where they differ from what was filed: ``tp`` GPUs without attention DP, the experts over all of them
    (``moe_ep = tp``, vLLM's EP over its TP group) where the script passes ``--enable-expert-parallel`` (where the
    entry's ep is above 1, or at every point: :data:`VLLM_SCRIPT_ALWAYS_EP`), else tensor-parallel (``moe_tp = tp``).
    None for other rows, and for rows filed as run."""
    if getattr(row, "mode", "") != "agg" or getattr(row, "backend", "") != "vllm" or not _is_inferencex(row):
        return None
    model, precision = str(getattr(row, "model_path", "")).lower(), str(getattr(row, "precision", ""))
    expert_parallel = VLLM_SCRIPT_EXPERT_PARALLEL.get((model, precision))
    if expert_parallel is None:
        return None
    if (model, precision, getattr(row, "system", ""), str(getattr(row, "backend_version", ""))) in VLLM_SCRIPT_ALWAYS_EP:
        expert_parallel = "always"
    tp, adp = _int(row.tp_size, 1) or 1, _int(row.attention_dp_size, 1) or 1
    moe_tp, ep, pp = _int(row.moe_tp_size, 1) or 1, _int(row.moe_ep_size, 1) or 1, _int(row.pp_size, 1) or 1
    if pp != 1:
        return None
    if adp > 1:  # the export's form: adp = tp, the experts over tp x the entry's ep
        if adp != tp or moe_tp != 1 or ep % tp:
            return None
        entry_ep = ep // tp
    elif moe_tp * ep == tp:
        entry_ep = ep
    else:
        return None
    run_ep = tp if expert_parallel == "always" or (expert_parallel == "entry" and entry_ep > 1) else 1
    if adp == 1 and (moe_tp, ep) == (tp // run_ep, run_ep):
        return None
    return {"tp_size": tp, "attention_dp_size": 1, "moe_tp_size": tp // run_ep, "moe_ep_size": run_ep}


def _int(value: Any, default: int | None = None) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return default
    return int(value)


# Models of the sample whose architecture the simulator's model form cannot express (so they are
# not in the catalog), by lowercased model path: what is missing. None now: GLM-5's DeepSeek Sparse Attention
# was the last (ModelSpec.index_topk).
UNMODELLED: dict[str, str] = {}


def _model(model_path: str) -> str:
    from simulator.config.catalog import get_model

    if model_path.lower() in UNMODELLED:
        raise Unexpressible(f"model {model_path} not modelled: {UNMODELLED[model_path.lower()]}")
    try:
        return get_model(model_path).name
    except ConfigError:
        short = model_path.split("/")[-1]
        for candidate in (short.removesuffix("-NVFP4"), short.removesuffix("-NVFP4").replace("-R1", "-V3"),
                          short.removesuffix("-NVFP4").replace("-V3.1", "-V3")):
            try:
                return get_model(candidate).name
            except ConfigError:
                continue
    raise Unexpressible(f"model {model_path} is not in the catalog")


def _gpu(system: str) -> str:
    from simulator.config.catalog import get_gpu

    name = SYSTEMS.get(system)
    if name is None:
        raise Unexpressible(f"system {system} has no GPU mapping")
    try:
        return get_gpu(name).name
    except ConfigError:
        raise Unexpressible(f"GPU {name} ({system}) is not in the catalog") from None


def _dtypes(row: Any) -> tuple[str, str]:
    gemm = GEMM_FORMATS.get(row.gemm_quant_mode)
    if gemm is None:
        raise Unexpressible(f"GEMM format {row.gemm_quant_mode!r} has no --dtype")
    kv = "fp8" if gemm in ("fp8", "fp8-block", "nvfp4") else "auto"  # as AIConfigurator infers it from the label
    return NATIVE_FORMATS.get(_model(row.model_path), {}).get(gemm, gemm), kv


def _layout(row: Any, prefix: str, is_moe: bool) -> tuple[int, int, int, int]:
    """(tp, pp, attention_dp, ep) of one engine (README item 8: the MoE layers over all
    ``tp x adp x pp`` GPUs as ``moe_tp x moe_ep``); other MoE splits are refused."""
    tp, pp = _int(getattr(row, f"{prefix}tp_size")), _int(getattr(row, f"{prefix}pp_size"), 1) or 1
    adp = _int(getattr(row, f"{prefix}attention_dp_size"), 1)
    if tp is None or tp < 1:
        raise Unexpressible(f"{prefix or 'agg '}tp_size not given")
    if adp is None or adp < 1:
        raise Unexpressible(f"{prefix}attention_dp_size={adp} (odd gtl layout)")
    ep = 1
    if is_moe:
        ep = _int(getattr(row, f"{prefix}moe_ep_size"), 1) or 1
        moe_tp = _int(getattr(row, f"{prefix}moe_tp_size"), tp * adp) or 1
        if moe_tp * ep != tp * adp * pp:
            raise Unexpressible(f"MoE split moe_tp={moe_tp} x moe_ep={ep} is not the tp x adp x pp = {tp * adp * pp} GPUs")
    elif adp > 1:
        raise Unexpressible(f"attention DP (adp={adp}) on a dense model")
    return tp, pp, adp, ep


def _nodes(tp: int, num_gpus: int) -> dict[str, Any]:
    """An engine over more GPUs than a node holds spans nodes (TP inside the NVLink domain where
    it is larger than one node, as on an NVL72 rack; the config decides what the GPU allows)."""
    if num_gpus <= MAX_GPUS_PER_NODE:
        return {}
    return {"replica__num_nodes": -(-num_gpus // MAX_GPUS_PER_NODE),
            "replica__allow_tp_across_nodes": tp > MAX_GPUS_PER_NODE}


# SGLang's wide-EP deployments place redundant expert copies over their EP ranks (--ep-num-redundant-experts);
# the large-scale EP launch commands its users share place 32 (e.g. sgl-project/sglang#11848), making
# DeepSeek's 256 experts 288 slots, which EP 24, 36, 48 and 72 divide. A SGLang pool whose EP does not divide
# the experts is read with them: the rows record no count and InferenceX's recipe was not read, so this is an
# assumption, named in the row's layout.
SGLANG_REDUNDANT_EXPERTS = 32


def _redundant_experts(row: Any, ep: int, num_experts: int) -> int:
    """The redundant expert copies a pool of ``row``'s deployment most likely placed (0: none needed)."""
    if str(getattr(row, "backend", "")) == "sglang" and ep > 1 and num_experts % ep:
        return SGLANG_REDUNDANT_EXPERTS
    return 0


def _pool_layout(tp: int, pp: int, adp: int, ep: int, redundant: int = 0) -> str:
    """A disaggregated pool's layout keys: TP, PP, attention DP, EP (and redundant experts) and the nodes its
    replica fills."""
    extra = f",redundant={redundant}" if redundant else ""
    return f"tp={tp},pp={pp},dp={adp},ep={ep}{extra},nodes={-(-(tp * pp * adp) // MAX_GPUS_PER_NODE)}"


def row_config(row: Any, *, requests_per_user: int = 3, max_requests: int | None = None, budget: int = DEFAULT_BUDGET,
               range_ratio: float = 0.0, range_style: str = "vllm", prompt_stddev: float = 0.0,
               output_stddev: float = 0.0, engine: str | None = None, cost_model: str | None = None,
               kv_link: str = "infiniband-400g", warmup_mode: str = "steady",
               mtp_acceptance: str | float | None = None, extra: dict[str, Any] | None = None) -> RunConfig:
    """A closed-loop run of one silicon row (a row of :func:`read_silicon`'s frame, as
    ``itertuples`` gives it): ``concurrency`` users, one warm-up request each, then
    ``requests_per_user`` measured requests each (at most ``max_requests`` in all, warm-up
    included), lengths banded by ``range_ratio`` around ISL/OSL (0: exactly the nominal
    lengths) as ``range_style``'s client reads it (``sglang``: in [r x ISL, ISL], InferenceX's), or
    spread normally by ``prompt_stddev`` / ``output_stddev`` tokens (AIPerf's ``--isl-stddev`` /
    ``--osl-stddev``). ``warmup_mode``: ``steady`` (the warm-up is the loop's first requests) or
    ``drain`` (a phase of its own, then every user sends at once, as AIPerf and vllm bench
    run it; :mod:`simulator.engine.closed_loop`). A row whose recipe runs MTP (``mtp_drafts`` > 0:
    :func:`read_silicon`'s ``with_mtp``) runs it only with ``mtp_acceptance``, an AL curve of the data
    folder (``MODEL:METHOD[:THINKING]``, :func:`~simulator.config.acceptance.find_curve`) or one i.i.d.
    rate. ``extra``: more :meth:`RunConfig.replace` changes (e.g. kernels); where they price by the row's own
    backend's tables, a row whose recipe runs another MoE kernel than its engine's default
    (:func:`recipe_moe_kernels`) runs it (``--moe-kernel``, a pool's ``moe=``); an SGLang disaggregated row's prefill
    pool takes its recipe's chunk and the run its memory fraction (:func:`sglang_prefill_recipe`), whatever prices it.
    Raises :class:`Unexpressible` with the reason."""
    from simulator.config.catalog import get_model
    from simulator.config.run_config import RunConfig

    concurrency = _int(row.concurrency)
    if concurrency is None or concurrency < 1:
        raise Unexpressible("no concurrency recorded")
    if row.mode == "agg" and _wants_recipe(row):  # (a recipe taken would have made it disaggregated)
        refusal = getattr(row, "recipe_refusal", "") or "no recipe read"
        raise Unexpressible(f"filed as one aggregated engine of {_recorded_gpus(row)} GPUs on an NVL72 rack (a "
                            f"disaggregated deployment's GPUs, by the dump's convention): {refusal}")
    if row.mode == "agg" and getattr(row, "spec_refusal", ""):
        raise Unexpressible(row.spec_refusal)
    model = _model(row.model_path)
    gpu = _gpu(row.system)
    dtype, kv = _dtypes(row)
    is_moe = get_model(model).is_moe
    sched = BACKEND_SCHEDULERS.get(str(getattr(row, "backend", "")), "vllm-v1")  # a row without one: vLLM V1's
    engine_rules = _engine_rules(BACKEND_ENGINES.get(str(getattr(row, "backend", "")), sched), sched)
    warmup = concurrency
    total = warmup + max(requests_per_user * concurrency, 32)
    if max_requests is not None:
        total = max(min(total, max_requests), warmup + concurrency)
    changes: dict[str, Any] = {
        "replica__model": model, "replica__gpu": gpu, "replica__dtype": dtype, "replica__kv_cache_dtype": kv,
        "scheduler__name": sched, "scheduler__max_num_batched_tokens": budget,
        "workload__name": "fixed", "workload__prompt_tokens": int(row.isl), "workload__output_tokens": int(row.osl),
        "workload__arrival": "burst", "workload__num_requests": total,
        "workload__concurrency": concurrency, "workload__num_warmup": warmup, "workload__range_ratio": range_ratio,
        "workload__range_style": range_style, "workload__prompt_tokens_stddev": prompt_stddev,
        "workload__output_tokens_stddev": output_stddev,
        "workload__warmup_mode": warmup_mode,
        "replica__inter_node_link": SYSTEM_NETWORKS[row.system],  # pools take it from the replica
        **engine_rules,  # (the pools too)
    }
    # the MoE kernel the deployment's recipe runs, where the row's own engine's tables price it (the roofline times
    # no named kernel, and another engine's tables price that engine's kernels)
    own_tables = (extra or {}).get("replica__kernels") == getattr(row, "backend", None)
    moe_kernels = recipe_moe_kernels(row) if own_tables else (None, None)
    if row.mode == "agg":
        tp, pp, adp, ep = _layout(row, "", is_moe)
        batch = -(-concurrency // adp)  # per attention-DP rank (README item 6)
        changes.update({"replica__tp": tp, "replica__pp": pp, "replica__ep": ep,
                        "scheduler__max_num_seqs": max(DEFAULT_MAX_NUM_SEQS, batch)})
        if moe_kernels[0] is not None:
            changes["replica__moe_kernel"] = moe_kernels[0]
        if adp > 1:
            changes["replica__attention_dp"] = adp
        changes.update(_nodes(tp, tp * pp * adp))
    elif row.mode == "disagg":
        pw, dw = _int(row.prefill_num_workers), _int(row.decode_num_workers)
        if pw is None or dw is None:
            refusal = getattr(row, "recipe_refusal", "")
            raise Unexpressible("disaggregated row without worker counts (older dumps lack them)"
                                + (f": {refusal}" if refusal else ""))
        ptp, ppp, padp, pep = _layout(row, "prefill_", is_moe)
        dtp, dpp, dadp, dep = _layout(row, "decode_", is_moe)
        seqs = max(DEFAULT_MAX_NUM_SEQS, -(-concurrency // (dw * dadp)))
        if (padp, pep) == (dadp, dep) and dadp == 1:  # the pools take the run's EP (no attention DP)
            prefill, decode = f"tp={ptp},pp={ppp}", f"tp={dtp},pp={dpp}"
            changes.update({"replica__tp": dtp, "replica__ep": dep})
        else:  # each pool its own attention DP and EP (README item 8 per pool), on the nodes its GPUs fill
            experts = get_model(model).num_experts
            prefill = _pool_layout(ptp, ppp, padp, pep, _redundant_experts(row, pep, experts))
            decode = _pool_layout(dtp, dpp, dadp, dep, _redundant_experts(row, dep, experts))
            changes.update({"replica__tp": dtp, **_nodes(dtp, dtp)})
            if max(ptp, dtp) > MAX_GPUS_PER_NODE:
                changes["replica__allow_tp_across_nodes"] = True
        pmoe, dmoe = (f",moe={k}" if k else "" for k in moe_kernels)
        chunk = budget
        if (recipe := sglang_prefill_recipe(row)) is not None:  # its prefill workers' chunk; the run's memory fraction
            chunk = recipe[0]
            changes["replica__gpu_memory_utilization"] = recipe[1]
        elif (tokens := trtllm_prefill_budget(row)) is not None:  # its prefill workers' max_num_tokens
            chunk = tokens
        changes.update({"prefill_pool": f"{pw}x({prefill},gpu={gpu}{pmoe},sched={sched},budget={chunk},"
                                        f"seqs={PREFILL_MAX_NUM_SEQS})",
                        "decode_pool": f"{dw}x({decode},gpu={gpu}{dmoe},sched={sched},budget={budget},seqs={seqs})",
                        "kv_link": kv_link})
    else:
        raise Unexpressible(f"unknown mode {row.mode!r}")
    drafts = _int(getattr(row, "mtp_drafts", 0), 0) or 0
    if drafts:
        changes.update(mtp_changes(drafts, mtp_acceptance))
    if engine is not None:
        changes["engine"] = engine
    if cost_model is not None:
        changes["cost_model"] = cost_model
    changes.update(extra or {})
    try:
        return RunConfig().replace(**changes)
    except ConfigError as err:
        raise Unexpressible(f"refused by the config: {err}") from None
    except TypeError as err:  # a field this build does not have yet
        raise Unexpressible(f"not supported by this build: {err}") from None


def _engine_rules(engine: str, policy: str) -> dict[str, Any]:
    """The changes that run ``engine``'s rules where ``policy``'s scheduler preset has others: the KV cache as its
    engine plans it (memory basis, block) and what its attention-DP steps' MoE layers carry (``dp_padding``)."""
    from simulator.config.schedulers import SCHEDULERS

    own, runs = SCHEDULERS[engine], SCHEDULERS[policy]
    return {**({"replica__memory_fraction_of": own.memory_basis} if own.memory_basis != runs.memory_basis else {}),
            **({"replica__block_size": own.block_size} if own.block_size != runs.block_size else {}),
            **({"scheduler__dp_padding": own.dp_padding} if own.dp_padding != runs.dp_padding else {})}


def mtp_changes(drafts: int, acceptance: str | float | None) -> dict[str, Any]:
    """The :meth:`RunConfig.replace` changes of MTP with ``drafts`` drafts a step at ``acceptance`` (an AL
    curve's name or an i.i.d. rate); :class:`Unexpressible` without one, or for one that does not resolve."""
    from simulator.config.acceptance import acceptance_from_data
    from simulator.config.speculative import SpeculativeConfig

    if acceptance is None:
        raise Unexpressible(f"its recipe runs MTP with {drafts} drafts a step, whose acceptance is not recorded "
                            "(state one: mtp_acceptance)")
    try:
        if isinstance(acceptance, str):
            rates, source = acceptance_from_data(acceptance, drafts)
        else:
            rates, source = (float(acceptance),) * drafts, f"i.i.d. {float(acceptance):g} (stated)"
        spec = SpeculativeConfig(method="mtp", num_speculative_tokens=drafts, acceptance_rates=rates,
                                 acceptance_source=source)
    except ConfigError as err:
        raise Unexpressible(f"MTP acceptance {acceptance!r}: {err}") from None
    return {"speculative": spec, "scheduler__prefix_caching": False}


def simulate_row(config: Any) -> tuple[float, float] | str:
    """One row's simulated mean TTFT and TPOT (ms), or why its simulation failed: a row that fails
    is reported, not fatal. A module-level function, so a process pool can run rows side by side."""
    from simulator.report.benchmark import benchmark_metrics
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    try:
        res = simulate(config, record_iterations=False)
        m = benchmark_metrics(res, request_columns(res))
        return (m["mean_ttft_ms"], m["mean_tpot_ms"])
    except Exception as err:  # noqa: BLE001
        return f"simulation failed: {type(err).__name__}: {err}"
