"""The run options every simulation entry point shares, declared once, and config loading.

``RUN_OPTIONS`` maps an option name (as the CLI and sweep files spell it) to the
:class:`~simulator.config.run_config.RunConfig` field it sets, its type and its help. The CLI dresses
these as typer options (:mod:`simulator.cli.options`); sweeps and plots use them directly,
so planning code never imports the CLI.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Collection
from pathlib import Path
from typing import Any

from simulator.config.catalog import GPUS
from simulator.config.disagg_layout import (
    SPLIT_POOL_SCHEDULER,
    DisaggLayout,
    default_pool_scheduler,
    layout_of,
    parse_pool,
    pool_prefix_cache,
)
from simulator.config.errors import ConfigError
from simulator.config.json_types import loads_once
from simulator.config.run_config import CV_RANGE, ReplicaConfig, RunConfig, SchedulerConfig, engine_override_terms
from simulator.config.schedulers import BUDGETED_SCHEDULERS, CHUNKING_SCHEDULERS, SCHEDULERS, UNBUDGETED_SCHEDULERS

# vLLM's names (`vllm serve`, `vllm bench serve`) for options of RUN_OPTIONS below: the CLI takes either
# spelling; sweep files and build_config take them too (resolve_aliases).
OPTION_ALIASES: dict[str, tuple[str, ...]] = {
    "tp": ("tensor_parallel_size",), "pp": ("pipeline_parallel_size",), "attention_dp": ("data_parallel_size",),
    "qps": ("request_rate",), "num_requests": ("num_prompts",), "concurrency": ("max_concurrency",),
    "num_warmup": ("num_warmups",), "workload": ("dataset_name",), "prompt_tokens": ("random_input_len", "input_len"),
    "output_tokens": ("random_output_len", "output_len"), "range_ratio": ("random_range_ratio",),
    "prompt_tokens_stddev": ("isl_stddev", "synthetic_input_tokens_stddev"),
    "output_tokens_stddev": ("osl_stddev",),
    "dtype": ("quantization",),
}
# vLLM's options that set more than one field (resolve_aliases): name -> (type, help).
DERIVED_OPTIONS: dict[str, tuple[type, str]] = {
    "burstiness": (float, "vLLM's burstiness: gamma-distributed gaps with shape B (cv = 1/sqrt(B); 1 is Poisson)."),
    "enable_expert_parallel": (bool, "vLLM's --enable-expert-parallel: experts over every GPU of the MoE group "
                               "(--ep = --tp x --attention-dp)."),
}

# option name -> (RunConfig field path, type, help); sweep files use the same names.
RUN_OPTIONS: dict[str, tuple[str, type, str]] = {
    "model": ("replica__model", str, "Model: a catalog name (llama-2-7b, mixtral-8x7b, deepseek-v3, ...), HF id, or a config.json path."),
    "gpu": ("replica__gpu", str, f"GPU: {', '.join(GPUS)} (`simulate gpus`), or a .toml/.json file."),
    "tp": ("replica__tp", int, "Tensor-parallel degree."),
    "pp": ("replica__pp", int, "Pipeline-parallel degree."),
    "nodes": ("replica__num_nodes", int, "Nodes a replica spans (PP stages across nodes)."),
    "inter_node_link": ("replica__inter_node_link", str, "Link between nodes: one NIC per node (ethernet-100g, "
                        "infiniband-400g, ...), or N NICs per 8-GPU node with -x<N> (infiniband-400g-x8: one 400G "
                        "NIC per GPU, DGX/HGX H100). NVL72 racks (gb200, gb300) talk over NVLink inside the rack."),
    "intra_node_link": ("replica__intra_node_link", str, "Link inside a node (default: NVLink if present, else PCIe)."),
    "allow_tp_across_nodes": ("replica__allow_tp_across_nodes", bool, "Let a TP group span nodes."),
    "max_model_len": ("replica__max_model_len", int, "Context limit (default: the model's)."),
    "gpu_memory_utilization": ("replica__gpu_memory_utilization", float, "Fraction of GPU memory for the KV cache's "
                               "plan, on --memory-fraction-of's basis (default: the engine's: vLLM's 0.9 of total; "
                               "--scheduler sglang: SGLang's --mem-fraction-static default, from the GPU's memory, "
                               "the chunk size and TP x PP, 0.836 on one H100; --scheduler trtllm: 0.9 of free)."),
    "memory_fraction_of": ("replica__memory_fraction_of", str, "What --gpu-memory-utilization is a fraction of "
                           "(default: the engine's): total (vLLM's --gpu-memory-utilization: weights, activations and "
                           "KV cache), static (SGLang's --mem-fraction-static, the default under --scheduler sglang: "
                           "weights and KV pool; activations and CUDA graphs in the rest) or free, the memory weights "
                           "and activations leave, all of it KV cache (TensorRT-LLM's free_gpu_memory_fraction, the "
                           "default under --scheduler trtllm)."),
    "block_size": ("replica__block_size", int, "KV cache block size in tokens (default 16; --scheduler trtllm: 32, "
                   "TensorRT-LLM's tokens_per_block; a hybrid model under --scheduler vllm or vllm-v1: vLLM's, as "
                   "many as hold one linear-attention layer's state)."),
    "dtype": ("replica__dtype", str, "Weight dtype: bf16, fp16, fp8, fp8-block (FP8 tensor cores where the GPU has "
              "them), nvfp4 (or fp4; FP4 tensor cores on Blackwell, else weight-only), mxfp4 (gpt-oss's experts, as deployed "
              "engines run them: mxfp4-w4a8 on datacenter Blackwell, else mxfp4-w4a16; or name one), "
              "int4 (weight-only); "
              "on a MoE model the 4-bit formats quantise the experts (attention and router stay 16-bit)."),
    "kv_cache_dtype": ("replica__kv_cache_dtype", str, "KV cache dtype: auto (activation dtype), bf16, fp16, fp8."),
    "ep": ("replica__ep", int, "Expert-parallel degree for MoE models (divides --tp x --attention-dp)."),
    "attention_dp": ("replica__attention_dp", int, "Attention data-parallel ranks per replica, each --tp GPUs with its "
                     "own batch and KV cache, MoE layers over all of them (vLLM --data-parallel-size, SGLang "
                     "--enable-dp-attention)."),
    "redundant_experts": ("replica__redundant_experts", int, "Redundant expert copies spread over the EP ranks for "
                          "load balance (SGLang --ep-num-redundant-experts, vLLM EPLB num_redundant_experts): --ep "
                          "divides the experts plus these; each rank holds that many more weights. Memory only: the balance "
                          "they buy is --moe-imbalance's to say (the busiest rank's load over the mean)."),
    "moe_imbalance": ("replica__moe_imbalance", float, "MoE load imbalance: busiest expert/EP rank over the mean (>= 1)."),
    "num_gpu_blocks": ("replica__num_gpu_blocks", int, "KV cache blocks per replica (per attention-DP rank: each "
                       "has its own cache), overriding the memory plan (vLLM's --num-gpu-blocks-override)."),
    "scheduler": ("scheduler__name", str, "vllm, orca, fastertransformer, sarathi, vllm-v1, sglang or trtllm (each engine's "
                  "own policy)."),
    "max_num_seqs": ("scheduler__max_num_seqs", int, "Max requests in a batch."),
    "scheduler_recv_interval": ("scheduler__recv_interval", int, "sglang: new requests are taken every this many "
                                "iterations while the engine is busy (SGLang's --scheduler-recv-interval; 1 = every one)."),
    "dp_balance_timeout_iters": ("scheduler__dp_balance_timeout_iters", int, "Attention DP: hold new prompts until "
                                 "every rank has one, at most this many iterations (TensorRT-LLM's attention_dp_config "
                                 "enable_balance with timeout_iters; 0 = off, the default)."),
    "dp_balance_batching_wait_iters": ("scheduler__dp_balance_batching_wait_iters", int, "Attention DP balance: once "
                                       "every rank has a prompt while all decode, hold them this many iterations more "
                                       "(TensorRT-LLM's batching_wait_iters; default 0)."),
    "dp_padding": ("scheduler__dp_padding", str, "Attention DP with a MoE model: what a step's MoE layers carry "
                   "(default: the engine's): max, every rank padded to the largest rank's tokens (the vllm "
                   "scheduler's default); sum, a step that carries a prompt routes the ranks' own tokens only, "
                   "decode-only steps padded to the largest rank (SGLang's SUM_LEN, TensorRT-LLM's context steps: the "
                   "sglang and trtllm schedulers' default); or graphs, padded while every rank's step fits a captured "
                   "CUDA graph (min(2 x max seqs x (1 + drafts), 512, budget) tokens), else the ranks' own tokens (vLLM V1's "
                   "since early 2026, the vllm-v1 scheduler's default)."),
    "batch_wait_timeout_iters": ("scheduler__batch_wait_timeout_iters", int, "Hold the new prompts of a step that "
                                 "also decodes until the step's tokens reach --batch-wait-max-tokens-ratio of the "
                                 "budget, at most this many such steps (TensorRT-LLM's batch_wait_timeout_iters; "
                                 "not with attention DP; 0 = off, the default)."),
    "batch_wait_max_tokens_ratio": ("scheduler__batch_wait_max_tokens_ratio", float, "Batch waiting: a step's "
                                    "prompts go once its tokens reach this fraction of the token budget "
                                    "(TensorRT-LLM's batch_wait_max_tokens_ratio; give with --batch-wait-timeout-iters)."),
    "max_num_batched_tokens": ("scheduler__max_num_batched_tokens", int, "Token budget per iteration."),
    "chunk_size": ("scheduler__chunk_size", int, "Sarathi token budget (tau)."),
    "prefix_caching": ("scheduler__prefix_caching", bool, "Automatic prefix caching of KV blocks named by a trace's "
                       "block hashes (default: on where the engine keeps it on: " + ", ".join(
                           name for name, entry in SCHEDULERS.items() if entry.prefix_cache) + "; off for the others). "
                       "A disaggregated run: its prefill pool's (on where the run's scheduler or the pool's sched= caches by "
                       "default) and a mixed pool's; a decode pool keeps none."),
    "prefix_cache_policy": ("scheduler__prefix_cache_policy", str, "Prefix cache eviction: vllm-lru (vLLM V1: least "
                            "recently freed block) or radix-lru (SGLang: least recently used leaf); default: the "
                            "scheduler's engine's (radix-lru for sglang, else vllm-lru). The two evict the same "
                            "blocks (a request frees its blocks last-first, so the least recently freed is a leaf)."),
    "cpu_kv_gib": ("scheduler__cpu_kv_gib", float, "Prefix cache CPU tier: GiB of host memory per replica (per "
                   "attention-DP rank) keeping "
                   "blocks evicted from the GPUs; a hit there is loaded over PCIe before the prefill (0: none)."),
    "workload": ("workload__name", str, "Built-in workload: sharegpt, arxiv, long-context (32K-128K prompts), fixed, random (vllm bench's name for "
                 "fixed lengths, banded by --range-ratio), uniform."),
    "trace": ("workload__trace", str, "Trace file (Vidur/Sarathi CSV, Azure CSV, JSONL, Mooncake JSONL with hash_ids), "
              "or Claude Code session files (a trace_NNNN.json or their folder: weka_claude_code/sessions). With "
              "--arrival trace, sessions replay as --session-replay says: open (the default) sends every turn at its "
              "recorded time, which holds the original server's response times, so a slower simulated server gets "
              "a turn before the answer it builds on; closed sends each session's first turn at its recorded time "
              "and each later one when the turn it waited for ends, plus its recorded think_time."),
    "arrival": ("workload__arrival", str, "poisson, gamma, fixed, burst or trace."),
    "qps": ("workload__qps", float, "Mean request rate (requests/s)."),
    "cv": ("workload__cv", float, "Coefficient of variation of gaps (gamma arrivals)."),
    "num_requests": ("workload__num_requests", int, "Requests to simulate (--arrival trace: every row of the "
                     "trace unless given)."),
    "prompt_tokens": ("workload__prompt_tokens", int, "Prompt length (fixed) or lower bound (uniform) (default: 512; "
                      "1024 for --workload random, vllm bench's --random-input-len default)."),
    "output_tokens": ("workload__output_tokens", int, "Output length (fixed) or lower bound (uniform)."),
    "prompt_tokens_max": ("workload__prompt_tokens_max", int, "Upper bound of prompt length (uniform)."),
    "output_tokens_max": ("workload__output_tokens_max", int, "Upper bound of output length (uniform)."),
    "max_total_tokens": ("workload__max_total_tokens", int, "Drop source requests longer than this."),
    "time_scale": ("workload__time_scale", float, "Divide trace timestamps by this (trace arrivals)."),
    "normalize_arrivals": ("workload__normalize_arrivals", bool, "Rescale Poisson or gamma arrivals so the last "
                           "lands at --num-requests / --qps, as vllm bench serve does (every seed the same "
                           "duration)."),
    "session_replay": ("workload__session_replay", str, "Claude Code sessions (--trace, --arrival trace): open "
                       "(every turn at its recorded time) or closed (each later turn sent its recorded think_time "
                       "after the turn it waited for ends; a sub-agent's first turn the recorded gap after the turn "
                       "that started it)."),
    "over_length": ("workload__over_length", str, "Trace rows over --max-total-tokens: drop, or clip (shorten prompt "
                    "and output in proportion, as Vidur does)."),
    "concurrency": ("workload__concurrency", int, "Closed loop: N users, each sending its next request when its last "
                    "ends (vLLM's --max-concurrency with --request-rate inf; with --qps, a cap on requests in flight)."),
    "num_warmup": ("workload__num_warmup", int, "The first requests sent, left out of every figure (warm-up); they are part "
                   "of --num-requests (vLLM's --num-warmups sends its warm-ups besides --num-prompts: give their sum). "
                   "Given as vLLM's --num-warmups in a closed loop, the warm-up drains first (--warmup-mode drain), as "
                   "vllm bench serve runs it."),
    "warmup_mode": ("workload__warmup_mode", str, "Closed loop: steady (the warm-up is the loop's first requests) or "
                    "drain (a phase of its own, run to completion, then every user sends at once, as AIPerf and "
                    "vllm bench serve run it). By default steady, drain where the warm-up is given as vLLM's "
                    "--num-warmups (a --config file's mode stands)."),
    "range_ratio": ("workload__range_ratio", float, "Fixed lengths banded: each drawn uniformly in [len x (1-r), "
                    "len x (1+r)], as vllm bench's random dataset (--range-style sglang: in [len x r, len])."),
    "prompt_tokens_stddev": ("workload__prompt_tokens_stddev", float, "Fixed prompt lengths drawn from a normal "
                             "distribution of this standard deviation in tokens, rounded (AIPerf's --isl-stddev)."),
    "output_tokens_stddev": ("workload__output_tokens_stddev", float, "Fixed output lengths drawn from a normal "
                             "distribution of this standard deviation in tokens, rounded (AIPerf's --osl-stddev)."),
    "range_style": ("workload__range_style", str, "Whose --random-range-ratio: vllm (vllm bench serve: [len x (1-r), "
                    "len x (1+r)]) or sglang (SGLang's bench_serving, InferenceX's benchmark_serving.py: [len x r, "
                    "len]; r 1 is fixed, 0 is [1, len])."),
    "cost_model": ("cost_model", str, "'roofline' or a cost-model artifact from `simulate fit`."),
    "kernels": ("replica__kernels", str, "Kernel prices: roofline (calibrated), or the GPU's measured vllm, sglang or "
                "trtllm kernel tables (NVIDIA AIConfigurator's database in ../shared/data)."),
    "moe_kernel": ("replica__moe_kernel", str, "The MoE kernel the --kernels tables price: auto (the engine's default "
                   "as deployed), or a kernel of those tables, whole or by a part only it has: deepgemm (TensorRT-LLM's "
                   "moe_config backend DEEPGEMM), cutedsl, cutlass, triton, ...; a kernel the engines share "
                   "(DeepGEMM's, FlashInfer's) from another backend's tables of the GPU, and the same die's tables "
                   "(B200's for GB200) where the GPU's lack it"),
    "roofline_calibration": ("replica__roofline_calibration", str, "Roofline constants: today (the default: fitted per GPU "
                             "generation to AIConfigurator's tables of vLLM/SGLang/TensorRT-LLM kernels; a GPU of "
                             "no measured generation keeps 2023's) or 2023 (Vidur/LLMServingSim profiles; the paper "
                             "reproductions')."),
    "engine": ("engine", str, "Engine overheads: a preset (vllm-2026, the default: today's vLLM; sglang-2026 "
               "and trtllm-2026, which run the --scheduler and --kernels they were fitted with where those are not "
               "given and the run reads them (not beside --config; a disaggregated run's pools that set sched= keep "
               "it): sglang and sglang's tables, trtllm's tables; vllm-v1; the 2023 vllm-2023-splitwise and "
               "sarathi-2023-vidur of the paper reproductions; ideal, handset) or an artifact from "
               "`simulate calibrate-engine`."),
    "replicas": ("num_replicas", int, "Replicas behind the router."),
    "router": ("router", str, "round_robin, least_outstanding (fewest waiting + running requests; a tie goes to "
               "the lowest replica index), random, prefix_aware (longest cached prefix unless overloaded) or session "
               "(a session stays on its replica); both fall back to least_outstanding. Disaggregated: it picks the "
               "prefill worker (a decode worker is the least loaded with free blocks for the request)."),
    "seed": ("seed", int, "Random seed."),
    "fast_forward": ("fast_forward", bool, "Skip stretches of like iterations (decodes only, or a long prompt's chunks beside them) in one step (same results; off = step by step)."),
    "prefill_pool": ("prefill_pool", str, "Disaggregated: prefill pool, e.g. '2x(tp=2,gpu=h100-sxm)' or '2x(tp=1,dp=8,ep=8)' (keys tp, pp, dp = attention DP, ep, redundant = redundant expert copies, nodes, gpu, moe = the pool's --moe-kernel, sched (default: the run scheduler where its engine deploys disaggregated pools, else vllm), budget, seqs)."),
    "decode_pool": ("decode_pool", str, "Disaggregated: decode pool, e.g. '1x(tp=4,gpu=a100-80gb)' or '1x(tp=1,dp=16,ep=16,nodes=2)'."),
    "mixed_pool": ("mixed_pool", str, "Disaggregated: Splitwise mixed pool (aggregated replicas for overflow)."),
    "kv_link": ("kv_link", str, "Disaggregated: KV link (infiniband-200g, 25GB/s@10us in bytes, 200Gb/s in bits, infinite): one worker's "
                "NICs (a node's -x<N> NICs: the worker's share, one a GPU, at least one), or the one shared link with "
                "--kv-link-scope shared (a node's N NICs together); priced at the slower of the two pools' GPUs."),
    "kv_link_scope": ("kv_link_scope", str, "Disaggregated: per-worker (each prefill worker's egress is a --kv-link, "
                      "each decode worker's ingress takes its GPUs // a prefill worker's GPUs transfers at once; "
                      "transfers of different prefill workers run in parallel; default) or shared (one --kv-link, "
                      "FIFO, for every transfer)."),
    "first_token_at": ("first_token_at", str, "Disaggregated: who delivers the client's first token: decode (the "
                       "decode worker, after the KV handoff, as Dynamo/NIXL deployments; default) or prefill."),
    # Speculative decoding (simulator.config.acceptance.speculative_from_options combines these into one
    # SpeculativeConfig; the other flags need --speculative-config, or a --config that speculates).
    "speculative_config": ("speculative__vllm_json", str, "Speculative decoding: vLLM's --speculative-config JSON, "
                           'e.g. \'{"method": "eagle3", "num_speculative_tokens": 3}\' (method draft_model with "model", '
                           'eagle, eagle3, mtp, medusa or ngram; "parallel_drafting": true drafts in one pass), or off. Give the '
                           "acceptance too (next options)."),
    "num_speculative_tokens": ("speculative__num_speculative_tokens", int, "Speculative decoding: draft tokens per step "
                               "(k), over the JSON's."),
    "acceptance_rate": ("speculative__acceptance_rate", float, "Speculative decoding: one acceptance rate for every "
                        "draft position (i.i.d.; mean tokens per step (1 - a^(k+1)) / (1 - a))."),
    "acceptance_rates": ("speculative__acceptance_rates", str, "Speculative decoding: per-position acceptance rates "
                         "r1,r2,... (draft j accepted given drafts before it were), e.g. 0.8,0.7,0.6."),
    "acceptance_data": ("speculative__acceptance_data", str, "Speculative decoding: per-position rates from the data "
                        "folder's acceptance-length curves, MODEL:METHOD[:THINKING], e.g. qwen3.5:mtp."),
    "spec_disable_batch_size": ("speculative__disable_by_batch_size", int, "Speculative decoding, adaptive: nobody "
                                "speculates in a step with this many running requests or more (vLLM's "
                                "disable_by_batch_size, at least 2)."),
    "spec_reduce_k_batch_size": ("speculative__reduce_k_batch_size", int, "Speculative decoding, adaptive: above this "
                                 "many running requests k shrinks to max(1, k x this // running)."),
}


def load_config_file(path: Path, field: str = "--config") -> RunConfig:
    """The RunConfig a run's ``config.json`` holds; ``field`` names the option (or command)
    that passed it, in errors."""
    path = Path(path)
    if path.is_dir():
        inside = path / "config.json"
        raise ConfigError(field, f"{path} is a folder", f"pass {inside}" if inside.is_file() else
                          "pass the config.json a run wrote (simulate run --out FOLDER writes FOLDER/config.json)")
    try:
        data = loads_once(path.read_text(encoding="utf-8-sig"), str(path))
    except FileNotFoundError:
        raise ConfigError(field, f"{path} does not exist", "pass the config.json a run wrote") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(field, f"{path} is not valid JSON ({exc})", "pass the config.json a run wrote") from None
    if not isinstance(data, dict):
        raise ConfigError(field, f"{path} must hold a JSON object", "pass the config.json a run wrote")
    if "num_finished" in data and not {"replica", "scheduler"} & set(data):
        # (a run's summary.json, beside its config.json: its first key that is no field was blamed as unknown)
        beside = path.with_name("config.json")
        raise ConfigError(field, f"{path} is a run's summary (it holds num_finished and neither of a config's replica "
                          "and scheduler)", f"pass {beside}" if beside.is_file() and beside != path else
                          "pass the config.json a run wrote")
    try:
        return RunConfig.from_dict(data)
    except ConfigError as err:
        # The file's value, named by the file and its key: a field error named after the flag that sets it blamed
        # the flag typed beside the file (--config q.json --qps 2: "--qps: must be positive, got -1").
        raise ConfigError(f"{field} {path}", f"{err.field}: {err.problem}",
                          f"correct {err.field} in the file" + (f"; {err.fix}" if err.fix else "")) from None


# vllm bench serve's --random-input-len default (vllm.benchmarks.datasets): `--workload random`'s prompt length.
VLLM_RANDOM_INPUT_LEN = 1024


def default_random_input_len(options: dict[str, Any]) -> None:
    """``random`` is vllm bench's dataset (--dataset-name random), whose prompts default to its --random-input-len,
    1024 tokens, not the 512 of ``fixed`` here: a run or sweep point naming it without a prompt length (nor a
    trace) gets vLLM's. (Its --random-output-len default, 128, is the output default here too.) ``options``: by
    option name, changed in place."""
    if options.get("workload") == "random" and options.get("prompt_tokens") is None and options.get("trace") is None:
        options["prompt_tokens"] = VLLM_RANDOM_INPUT_LEN
# Length options, and the length sources that read each (the others draw lengths from a dataset or a trace).
LENGTH_OPTIONS = {"prompt_tokens": ("fixed", "random", "uniform"), "output_tokens": ("fixed", "random", "uniform"),
                  "prompt_tokens_max": ("uniform",), "output_tokens_max": ("uniform",),
                  "range_ratio": ("fixed", "random"), "range_style": ("fixed", "random"),
                  "prompt_tokens_stddev": ("fixed", "random"), "output_tokens_stddev": ("fixed", "random")}


def is_workload_option(name: str) -> bool:
    """Whether run option ``name`` sets the workload (its requests, lengths or arrivals): what a command that
    brings its own requests or batch (``calibrate-engine --bench``, ``tau`` given the whole batch) does not read."""
    return name in RUN_OPTIONS and RUN_OPTIONS[name][0].startswith("workload__")


def inert_options(config: RunConfig, users_search: bool = False, max_users: int | None = None) -> dict[str, tuple[str, str]]:
    """Options that ``config`` would not read: option name -> (why, fix), ``{flag}`` in the fix
    standing for the option's flag. ``users_search``: ``config`` starts a search of the most users (``capacity
    --users``), whose concurrency is only its first trial's, up to ``max_users`` where given."""
    out: dict[str, tuple[str, str]] = {}
    r, w, s = config.replica, config.workload, config.scheduler
    if s.name not in CHUNKING_SCHEDULERS:
        out["chunk_size"] = (f"{s.name} does not split prompts into chunks",
                             f"drop {{flag}}, or use --scheduler {' or '.join(CHUNKING_SCHEDULERS)}")
    if s.name in UNBUDGETED_SCHEDULERS:
        out["max_num_batched_tokens"] = (f"{s.name} batches whole prompts under no token budget",
                                         f"drop {{flag}}, or use --scheduler {' or '.join(BUDGETED_SCHEDULERS)}")
    if w.trace is not None:  # (a --config file's trace: both flags given are refused before this)
        out["workload"] = (f"--trace {w.trace} gives the requests", "drop {flag}, or drop the trace")
    for name, readers in LENGTH_OPTIONS.items():
        if w.trace is not None:
            out[name] = (f"--trace {w.trace} gives the request lengths",
                         f"drop {{flag}}, or drop --trace for --workload {readers[0]}")
        elif w.name not in readers:
            out[name] = (f"the {w.name} workload draws its own lengths",
                         f"drop {{flag}}, or use --workload {' or '.join(readers)}")
    if s.name != "sglang":
        out["scheduler_recv_interval"] = (f"only the sglang scheduler polls for new requests, not {s.name}",
                                          "drop {flag}, or use --scheduler sglang")
    if w.concurrency is None or w.num_warmup == 0:
        out["warmup_mode"] = ("the warm-up mode is a closed loop's (--concurrency) with --num-warmup requests",
                              "add --concurrency N and --num-warmup M, or drop {flag}")
    if w.exact_lengths and w.prompt_tokens + w.output_tokens <= r.effective_max_model_len:
        # (a limit below them is refused: workload._check_total; above the context it replaces the run's own cap)
        out["max_total_tokens"] = (f"every request of the {w.name} workload is {w.prompt_tokens:,} + {w.output_tokens:,} "
                                   "tokens, so no limit that lets them run drops any",
                                   "drop {flag}, or give the lengths a band (--random-range-ratio) or a spread")
    if w.trace is None or w.max_total_tokens is None:
        out["over_length"] = ("it says what becomes of trace rows longer than --max-total-tokens",
                              "add --trace and --max-total-tokens, or drop {flag}")
    if not r.model_spec.is_moe:
        out["moe_imbalance"] = (f"{r.model} has no experts", "drop {flag} for a dense model")
    layout = layout_of(config) if config.is_disaggregated else None
    if layout is not None:
        out.update(_pool_cache_inert_options(config, layout))
    elif s.prefix_cache is None:
        out["prefix_cache_policy"] = ("prefix caching is off" + _spec_off(config), _cache_on(config, "or drop {flag}"))
        # --no-prefix-caching where the run would cache nothing without it
        if s.prefix_caching is False and SCHEDULERS[s.name].prefix_cache is None:
            out["prefix_caching"] = (f"--scheduler {s.name} caches no prefixes by default", "drop {flag}")
        elif s.prefix_caching is False and config.speculative is not None:
            out["prefix_caching"] = ("speculative decoding turns prefix caching off", "drop {flag}")
    out.update(_adaptive_speculation_inert(config, users_search, max_users))
    if config.is_disaggregated:  # (simulation: the pools run the plain loop)
        out["fast_forward"] = ("disaggregated pools step one iteration at a time (no event skipping)", "drop {flag}")
    elif config.speculative is not None:  # (simulation: several tokens a step, so the plain loop)
        out["fast_forward"] = ("a speculating run steps one iteration at a time (no event skipping)", "drop {flag}")
    if not config.is_disaggregated:
        for name in ("kv_link", "kv_link_scope", "first_token_at"):
            out[name] = ("the run is not disaggregated", "add --prefill-pool and --decode-pool, or drop {flag}")
    if w.arrival != "gamma":
        out["cv"] = (f"--arrival is {w.arrival}, not gamma", "pass --arrival gamma, or drop {flag}")
    elif w.cv == 1:  # a gamma of shape 1 is the exponential: numpy draws the very gaps of --arrival poisson
        out["arrival"] = ("gamma gaps of cv 1 are Poisson's exponential ones, bit for bit",
                          "give a --cv other than 1, or use --arrival poisson")
    if w.trace is None and w.name == "uniform" and w.prompt_tokens_max in (None, w.prompt_tokens) \
            and w.output_tokens_max in (None, w.output_tokens):  # (no range to draw from: fixed lengths)
        out["workload"] = (f"uniform lengths in [{w.prompt_tokens}, {w.prompt_tokens}] and [{w.output_tokens}, "
                           f"{w.output_tokens}] are --workload fixed's, bit for bit",
                           "give --prompt-tokens-max or --output-tokens-max, or use --workload fixed")
    if w.arrival != "trace":
        out["time_scale"] = (f"--arrival is {w.arrival}: the trace's timestamps are not replayed",
                             "pass --arrival trace, or drop {flag}")
        # (a trace without sessions is known from its file: simulator.cli.options.check_trace_given)
        out["session_replay"] = ("it says how a session trace's turns are replayed, and " +
                                 ("no --trace is given" if w.trace is None else f"--arrival is {w.arrival}, not trace"),
                                 "pass --trace with Claude Code sessions and --arrival trace, or drop {flag}")
    # A capped open loop (--concurrency with --qps) draws its Poisson or gamma gaps and holds each send until a
    # user frees up: the rescale moves its sends (vllm bench serve rescales under --max-concurrency too). A true
    # closed loop's arrival is burst.
    if w.arrival not in ("poisson", "gamma"):
        closed = w.concurrency is not None and w.arrival == "burst"
        why = "a closed loop sends as requests end" if closed else f"--arrival is {w.arrival}"
        out["normalize_arrivals"] = (f"{why}: no random gaps to rescale",
                                     ("add --qps R for a capped open loop with Poisson gaps" if closed
                                      else "pass --arrival poisson or gamma") + ", or drop {flag}")
    if layout is None:
        out.update(_link_inert_options(r))
    else:  # a pool's replicas have layouts of their own: a link flag does nothing where it does nothing to any
        replicas = [layout.prefill_replica, layout.decode_replica, layout.mixed_replica]
        each = [_link_inert_options(p) for p in replicas if p is not None]
        for name in set.intersection(*(set(e) for e in each)):
            why, fix = each[0][name]
            fix = fix.replace("--tp or --pp", "tp= to a pool").replace("--nodes N", "nodes=N to a pool")
            out[name] = (f"in every pool: {why}", fix)
    if w.trace is None:  # a built-in workload draws lengths only: no KV blocks to share, no sessions
        why = (f"the {w.name} workload names no prompt blocks (only a trace with block hashes shares prefixes)",
               "pass a --trace with hash_ids (e.g. Mooncake's), or drop {flag}")
        for name in ("prefix_cache_policy", "cpu_kv_gib", "prefix_caching"):  # (on or off, the same run)
            out.setdefault(name, why)
        # (a trace's blocks and sessions are known from its file only: simulator.workload.prefix_traces.check_router)
        unread = router_unread(config, hashes=False, sessions=False, source=f"the {w.name} workload")
        if unread is not None:
            out["router"] = unread
    if config.num_replicas == 1 and r.attention_dp == 1 and not config.is_disaggregated:
        out["router"] = ("one replica takes every request", "add --replicas N, or drop {flag}")
    if layout is not None:
        for name, why in _pool_inert_options(config).items():
            out.setdefault(name, why)
        if layout.num_prefill_workers == 1:  # one prefill worker
            # The router picks a prefill worker; a decode worker is picked by free blocks and load, a mixed one by load.
            out["router"] = ("the router picks a prefill worker, and the prefill pool is one, which takes every request",
                             "give the prefill pool more replicas ('2x(tp=1)'), or drop {flag}")
            # (tests/test_kv_links.py: one prefill worker runs bit for bit the same under either scope; a mixed
            # pool's requests are served whole where they land and never cross a KV link)
            out["kv_link_scope"] = ("one prefill worker sends every transfer: its egress is the one link either way",
                                    "give the prefill pool more workers ('2x(tp=1)'), or drop {flag}")
        elif math.isinf(layout.link.bytes_per_s) and layout.link.latency_s == 0:
            # (a transfer holds its link for no time at all: none ever waits for another, shared or not)
            out["kv_link_scope"] = ("--kv-link infinite moves every transfer in no time: none ever waits for "
                                    "another, on one shared link or on each worker's own",
                                    "give --kv-link a bandwidth (e.g. infiniband-200g or 25GB/s@10us), or drop {flag}")
    if not _has_dp_ranks(config):
        for name in ("dp_balance_timeout_iters", "dp_balance_batching_wait_iters"):
            out[name] = (("the balance holds new prompts while every attention-DP rank decodes: a prefill pool's "
                          "ranks never all decode, so only a decode pool's (its preempted requests' recomputed "
                          "prompts) or a mixed pool's ranks could be held, and neither has attention DP",
                          "add dp=N to --decode-pool or --mixed-pool, or drop {flag}") if layout is not None else
                         ("no replica has attention-DP ranks to balance", "add --attention-dp N, or drop {flag}"))
    if not _has_moe_dp_ranks(config):
        out["dp_padding"] = ("it says what the MoE layers of an attention-DP step carry, and no replica of the run "
                             "has attention-DP ranks of a MoE model", "add --attention-dp N with a MoE model (or dp=N "
                             "to a pool), or drop {flag}")
    if not draws_at_random(config):
        sent = (f"sent as {w.concurrency} users free up" if w.concurrency is not None
                else "all at t=0" if w.arrival == "burst" else f"at {w.arrival} arrivals")
        source = (f"--trace {w.trace} replays its first rows at their own timestamps" if w.trace is not None
                  else f"fixed lengths {sent}")
        out["seed"] = (f"nothing in this run is drawn at random ({source}; no --router random, no speculation)",
                       "drop {flag} (it varies drawn lengths, sampled trace rows, Poisson or gamma gaps, "
                       "--router random and speculation)")
    if w.arrival in ("burst", "trace"):  # (closed loops send on completions: their arrival is burst too)
        out["qps"] = (f"--arrival {w.arrival} sends requests "
                      + ("all at t=0" if w.arrival == "burst" else "at the trace's own timestamps")
                      + (f" (here as {w.concurrency} users free up)" if w.concurrency is not None else ""),
                      "pass --arrival poisson (or gamma/fixed) for a rate, or drop {flag}")
    return out


def _pool_cache_inert_options(config: RunConfig, layout: DisaggLayout) -> dict[str, tuple[str, str]]:
    """The prefix-cache flags that no pool of a disaggregated ``config`` reads: the prefill pool caches where the
    run's engine would (:func:`~simulator.config.disagg_layout.pool_prefix_cache`), a mixed pool as its own
    scheduler does (``sched=``, else the run's), the decode pool never (it takes a prompt's blocks over the link by count)."""
    s = config.scheduler
    caching = [pool for pool, sched in (("prefill", layout.prefill_scheduler), ("mixed", layout.mixed_scheduler))
               if sched is not None and sched.prefix_cache is not None]
    out: dict[str, tuple[str, str]] = {}
    if not caching:
        off = "prefix caching is off in the prefill" + (" and mixed pools" if layout.mixed is not None else " pool") \
              + " (the decode pool keeps no prefix cache)"
        out["prefix_cache_policy"] = (off + _spec_off(config), _cache_on(config, "or drop {flag}"))
        # --no-prefix-caching does something only where a pool would cache without it.
        unset = dataclasses.replace(s, prefix_caching=None)
        would = pool_prefix_cache(unset, layout.prefill_scheduler.name) is not None or (
            layout.mixed_scheduler is not None and dataclasses.replace(layout.mixed_scheduler, prefix_caching=None)
            .prefix_cache is not None)
        if not would:
            out["prefix_caching"] = (f"no pool of the run caches prefixes by default ({layout.prefill_scheduler.name} "
                                     f"in the prefill pool under --scheduler {s.name}; the decode pool never does)",
                                     "drop {flag}")
    return out


def router_unread(config: RunConfig, hashes: bool, sessions: bool, source: str) -> tuple[str, str] | None:
    """Why ``config.router`` would have nothing to route by, and the fix (``{flag}`` standing for the option's flag),
    or None: ``prefix_aware`` where no replica keeps a prefix cache of the workload's blocks, ``session`` where the
    workload names no sessions; either then sends every request to the least outstanding replica, a run labelled
    with a router it never ran. ``hashes``/``sessions``: whether the run's requests name their prompts' blocks and
    their sessions, which ``source`` (the workload, in words) says; a trace's are read from its file
    (:func:`simulator.workload.prefix_traces.check_router`). None too where the router has no choice to make (one
    replica, one prefill worker: :func:`inert_options` says so of a ``--router`` given)."""
    router = config.router
    if router not in ("prefix_aware", "session"):
        return None
    if config.is_disaggregated:
        layout = layout_of(config)
        if layout.num_prefill_workers == 1:
            return None
    elif config.num_ranks == 1:
        return None
    # In a disaggregated run the router picks the prefill worker; a decode worker is picked by free blocks and load.
    least = f"every request would go to the least outstanding {'prefill worker' if config.is_disaggregated else 'replica'}"
    if router == "prefix_aware" and config.is_disaggregated and layout.prefill_scheduler.prefix_cache is None:
        # (it reads the prefill workers' caches; the decode pool keeps none.) --router session keeps a session on one
        # prefill worker: a fix only where the workload has sessions.
        return (f"prefix caching is off in the prefill pool{_spec_off(config)}, so prefix_aware has no cache to read "
                f"({least})", _cache_on(config, "use --router session or least_outstanding, or drop {flag}" if sessions
                                        else "use --router least_outstanding, or drop {flag}"))
    if router == "prefix_aware" and not hashes:
        return (f"prefix_aware routes by cached prefix, but {source} names no prompt blocks (only Mooncake JSONL and "
                f"Weka session traces do; {least})", "use a trace with hash_ids, or another --router")
    if router == "prefix_aware" and not config.is_disaggregated and config.scheduler.prefix_cache is None:
        off = f", {config.scheduler.name}'s default" if config.scheduler.prefix_caching is None else ""
        return (f"prefix_aware routes to the replica that has the longest prefix cached, but prefix caching is off{off}"
                f"{_spec_off(config)} ({least})", _cache_on(config, "or use --router least_outstanding"))
    if router == "session" and not sessions:
        return (f"session keeps each session on one replica, but {source} names no sessions (only Weka session traces "
                f"do; {least})", "use a trace with sessions, or another --router")
    return None


def _has_dp_ranks(config: RunConfig) -> bool:
    """Whether some replica of the run has attention-DP ranks whose prompts the balance could hold (TensorRT-LLM's
    attention_dp_config: :class:`simulator.engine.dp_group.PromptBalance`): an aggregated run's, or a disaggregated
    run's mixed or decode pool's. A prefill pool's ranks never all decode (a rank with a prompt has no decode, so the
    balance lets prompts go at once); a decode pool's ranks take a preempted request's prompt back to recompute it,
    and the balance holds that."""
    if not config.is_disaggregated:
        return config.replica.attention_dp > 1
    layout = layout_of(config)
    return any(r is not None and r.attention_dp > 1 for r in (layout.mixed_replica, layout.decode_replica))


def _spec_off(config: RunConfig) -> str:
    """Why prefix caching is off, where speculative decoding turned it off (RunConfig: a speculating replica keeps a
    plain KV cache), as a clause; '' otherwise."""
    return " (speculative decoding turns it off)" if config.speculative is not None else ""


def _cache_on(config: RunConfig, rest: str) -> str:
    """A fix that turns prefix caching on, then ``rest``: ``--prefix-caching``, which is refused beside speculation
    (dropping the speculation is the fix there)."""
    return f"{'drop the speculation' if config.speculative is not None else 'pass --prefix-caching'}, {rest}"


def _has_moe_dp_ranks(config: RunConfig) -> bool:
    """Whether some replica of the run has attention-DP ranks of a MoE model (what ``--dp-padding`` prices)."""
    return config.replica.model_spec.is_moe and any(r.attention_dp > 1 for _, r in config.scheduler_replicas())


def draws_at_random(config: RunConfig) -> bool:
    """Whether the run reads its seed: the streams split from it draw request lengths (a built-in
    or banded workload), trace rows (sampled for synthetic arrivals), Poisson or gamma gaps, a random
    router's picks and speculation's acceptances (simulator.engine.cluster.rng_streams, speculation_rng)."""
    w = config.workload
    if config.speculative is not None or config.router == "random" or w.arrival in ("poisson", "gamma"):
        return True
    if w.trace is not None:
        return w.arrival != "trace"  # replayed at its timestamps: its first rows, in order
    return not (w.name in ("fixed", "random") and not w.is_banded and not w.is_spread)


# Run options that a disaggregated pool's key overrides: option name -> pool key (simulator.config.disagg_layout).
POOL_OVERRIDES = {"tp": "tp", "pp": "pp", "attention_dp": "dp", "ep": "ep", "redundant_experts": "redundant",
                  "nodes": "nodes", "gpu": "gpu", "moe_kernel": "moe", "max_num_seqs": "seqs"}


def _link_inert_options(r: ReplicaConfig) -> dict[str, tuple[str, str]]:
    """The link options that change nothing for a replica laid out as ``r``."""
    out: dict[str, tuple[str, str]] = {}
    if r.num_nodes == 1:
        for name in ("inter_node_link", "allow_tp_across_nodes"):
            out[name] = ("the replica is on one node", "add --nodes N, or drop {flag}")
    else:
        from simulator.config.topology import topology_for

        topo = topology_for(r)
        if not topo.uses_inter_node_link:
            out["inter_node_link"] = (f"the replica's {r.num_nodes} nodes are one NVLink domain of {r.gpu}: "
                                      "nothing it does crosses the inter-node link",
                                      "drop {flag}, or spread the replica over more GPUs than the domain")
        if not topo.tp_ring_crosses_nodes:
            out["allow_tp_across_nodes"] = (f"each tp={r.tp} group already fits "
                                            + ("its NVLink domain" if topo.tp_in_nvlink_domain else "a node"),
                                            "drop {flag}")
        if r.tp == 1 and r.attention_dp == 1 and r.intra_node_link is not None:
            # Without TP or DP only the PP hops could read it (a TP ring, even of one GPU a node, reads its
            # efficiency): it does nothing where they cross the same links as with the GPU's own (one GPU a node
            # outside an NVLink domain: every hop on the inter-node link).
            default = topology_for(dataclasses.replace(r, intra_node_link=None))
            if topo.hop_links == default.hop_links and r.pp == r.num_nodes and topo.uses_inter_node_link:
                out["intra_node_link"] = (f"each of the replica's {r.num_nodes} nodes holds one of its GPUs and "
                                          "every pipeline hop crosses nodes: nothing it does uses a link inside a node",
                                          "drop {flag}, or put more GPUs on a node")
    if r.tp * r.pp * r.attention_dp == 1:
        out["intra_node_link"] = ("the replica is one GPU: nothing it does crosses a link",
                                  "add --tp or --pp, or drop {flag}")
    return out


def _pool_inert_options(config: RunConfig) -> dict[str, tuple[str, str]]:
    """The replica and budget options that no pool of a disaggregated ``config`` takes: each pool
    sets that key itself, or (budgets) sets ``budget`` or runs another scheduler than ``--scheduler``
    (whose budget knobs it then drops: :meth:`PoolSpec.scheduler_config`)."""
    # flag -> (pool, the scheduler it runs unless it sets sched): the mixed pool runs the run's own.
    pools_run = default_pool_scheduler(config.scheduler.name)
    pools = {"--prefill-pool": (parse_pool(config.prefill_pool, "prefill_pool"), pools_run),
             "--decode-pool": (parse_pool(config.decode_pool, "decode_pool"), pools_run)}
    if config.mixed_pool is not None:
        pools["--mixed-pool"] = (parse_pool(config.mixed_pool, "mixed_pool"), config.scheduler.name)
    named = " and ".join(pools)
    out: dict[str, tuple[str, str]] = {}
    for name, key in POOL_OVERRIDES.items():
        if all(getattr(pool, key) is not None for pool, _ in pools.values()):
            out[name] = (f"{named} each set {key}= themselves", f"drop {{flag}}, or leave {key}= out of a pool")
    # Redundant experts belong to an EP layout: a pool that sets its own ep= places none unless it says so.
    if "redundant_experts" not in out and all(pool.ep is not None or pool.redundant is not None
                                              for pool, _ in pools.values()):
        out["redundant_experts"] = (f"{named} each set ep= or redundant= themselves (a pool's own ep= places no "
                                    "redundant experts unless it sets redundant=)", "give the pools redundant=N, or drop {flag}")
    prefill_sched = pools["--prefill-pool"][0].sched or pools_run
    # (a pool without sched= runs --scheduler's: default_pool_scheduler; a mixed pool --scheduler itself)
    if (all(pool.sched is not None for pool, _ in pools.values())
            and config.scheduler.chunk_size is None and config.scheduler.max_num_batched_tokens is None
            and config.scheduler.recv_interval == 1
            and (config.workload.trace is None or pool_prefix_cache(config.scheduler, prefill_sched)
                 == pool_prefix_cache(config.scheduler, prefill_sched, SchedulerConfig().name))):
        # Every pool runs its own sched=; --scheduler only says whose budget knobs (and SGLang's intake interval,
        # which only --scheduler sglang takes) they keep, and, over a trace (whose prompts may name blocks), whether
        # and how the prefill pool caches prefixes by default (disagg_layout.pool_prefix_cache).
        out["scheduler"] = (f"{named} each set sched= themselves",
                            "leave sched= out of a pool (it then runs --scheduler's), or drop {flag}")
    if all(pool.budget is not None or (pool.sched or default) != config.scheduler.name for pool, default in pools.values()):
        # Each pool as it is: its own budget=, or another scheduler than the one whose budget the flag is.
        parts = [f"{flag} sets budget=" if pool.budget is not None
                 else f"{flag} runs {pool.sched or default or config.scheduler.name}"
                 for flag, (pool, default) in pools.items()]
        if any(pool.budget is None for pool, _ in pools.values()):
            parts[-1] += f", not --scheduler {config.scheduler.name} whose budget it is"
        for name in ("chunk_size", "max_num_batched_tokens"):
            out[name] = ("; ".join(parts), "give the pools budget=N, or drop {flag}")
    return out


# Options a command may read beyond its base config: it builds disaggregated pools or replica
# counts itself (disagg split/compare, plan), or runs a grid of configs that may make any option
# apply (sweep: None, every option).
POOL_OPTIONS = frozenset({"kv_link", "kv_link_scope", "first_token_at", "router",
                          # the layouts they build span GPUs and nodes
                          "intra_node_link", "inter_node_link", "allow_tp_across_nodes"})
# plan chooses each layout's attention DP (--attention-dps), so whether the DP balance is read is its to say
# (simulator.planning.plan.unread_run_options).
DECIDED_BY_COMMAND: dict[str, frozenset[str] | None] = {
    "split": POOL_OPTIONS, "compare": POOL_OPTIONS,
    # (plan searches max_num_seqs itself: an adaptive speculation threshold is judged against the seqs it tries)
    "plan": POOL_OPTIONS | {"dp_balance_timeout_iters", "dp_balance_batching_wait_iters", "dp_padding",
                            "spec_disable_batch_size", "spec_reduce_k_batch_size"},
    "sweep": None}


# Options that a command sets itself in every config it builds from the base, so a value given would do
# nothing: command -> {option name: what sets it}. disagg split/compare lay out pools of one TP each
# (--tps) that run vllm (SPLIT_POOL_SCHEDULER, written as each pool's sched=; simulator.planning.split),
# and compare's aggregated arms run vllm and sarathi at --tps and --taus; --scheduler vllm still says
# whose budget the pools keep (PoolSpec.scheduler_config).
# disagg split and compare's goodput trials judge every request (planning.split.attainment_at): a warm-up is not
# left out of them. capacity and plan leave it out of every trial and of plan's fleet verification alike, as a run
# does (planning.capacity.judged_requests), so they take it.
_SEARCH_SETS = {"num_warmup": "its goodput trials judge every request (they leave no warm-up out)",
                "warmup_mode": "its goodput trials judge every request (they leave no warm-up out)"}
# Batch waiting holds the prompts of steps that mix prompts and decodes, which no disaggregated pool runs (the
# run refuses it there) and neither do compare's vllm arms: every layout of split and compare would be refused.
_NO_MIXED_STEPS = ("disaggregated pools never run a step that mixes prompts and decodes, the steps batch waiting "
                   "holds, nor do compare's vllm arms")
_BATCH_WAIT_SETS = {"batch_wait_timeout_iters": _NO_MIXED_STEPS, "batch_wait_max_tokens_ratio": _NO_MIXED_STEPS}
# What else split and compare never read, each refused before by a check whose fix sent the user to an option they
# refuse too: their search varies an open loop's rate (planning.capacity.check_searchable: no closed loop, no
# --arrival trace, so no trace clock to scale or sessions to replay); no pool or arm runs sglang, the one scheduler
# that polls for requests (--scheduler sglang is refused); and none splits prompts under --chunk-size (the pools and
# vllm arms run vllm, which does not chunk; compare's sarathi arms take --taus).
_RATE_SEARCH = "its goodput search varies the request rate of open-loop arrivals"
_UNREAD_SETS = {"concurrency": f"{_RATE_SEARCH}, and a closed loop has none",
                "time_scale": f"{_RATE_SEARCH}, never a trace's timestamps",
                "session_replay": f"{_RATE_SEARCH}, never a trace's sessions",
                "scheduler_recv_interval": "its pools run vllm and compare's arms vllm and sarathi, never sglang, "
                                           "the one scheduler that polls for requests",
                "chunk_size": "its pools run vllm, which does not split prompts into chunks, and compare's sarathi "
                              "arms take theirs from --taus"}
# The prefix-cache flags: split and compare pass them to every layout (each prefill pool caches as a run's would:
# disagg_layout.pool_prefix_cache, their pools running vllm, so they cache where the base config does) and compare
# to its aggregated arms too; each is judged on the base config as a run's, and then on every layout
# (simulator.cli.disagg._refuse_unread: --no-prefix-caching where no pool caches by default does nothing).
PREFIX_CACHE_OPTIONS = frozenset({"prefix_caching", "prefix_cache_policy", "cpu_kv_gib"})
_SPLIT_SETS = {"prefill_pool": "its own pools", "decode_pool": "its own pools", "mixed_pool": "its own pools",
               "tp": "from --tps", "replicas": "from the split of --gpus", "qps": "its goodput search over rates",
               **_BATCH_WAIT_SETS, **_SEARCH_SETS, **_UNREAD_SETS}
# What split and compare never read (refused as doing nothing), beside what they set in every layout.
_SPLIT_UNREAD = frozenset({*_SEARCH_SETS, *_BATCH_WAIT_SETS, *_UNREAD_SETS, "qps"})
# plan chooses each layout's GPU, parallelism, batch cap and unit count (simulator.planning.plan.Layout.config).
_PLAN_SETS = {"gpu": "from --gpus", "tp": "from --tps", "pp": "from --pps", "attention_dp": "from --attention-dps",
              "ep": "with --attention-dps", "max_num_seqs": "from --seqs", "replicas": "its unit counts",
              # (at 0: a layout's EP is chosen with its attention DP, and the base config, EP 1, could hold no copies)
              "redundant_experts": "at 0: each layout's EP is its own, and none places redundant experts"}
# tau prices one hybrid iteration from the workload's lengths (2,048 sampled) on one replica, and chooses the
# budget itself (simulator.planning.tau): the arrival process, the run's size and the cluster are not read.
_TAU_SETS = {name: "it prices one iteration from the workload's lengths" for name in (
    "concurrency", "qps", "arrival", "cv", "normalize_arrivals", "time_scale", "num_warmup", "warmup_mode",
    "num_requests", "replicas", "router", "fast_forward", "prefill_pool", "decode_pool", "mixed_pool", "kv_link",
    "kv_link_scope", "first_token_at")} | {
    name: "it prices one iteration from the workload's lengths, with no prefix cache"
    for name in ("prefix_caching", "prefix_cache_policy", "cpu_kv_gib")} | {"chunk_size": "it chooses the budget", "max_num_batched_tokens": "it chooses the budget",
                          "scheduler_recv_interval": "it prices one iteration (no intake to poll)",
                          "dp_balance_timeout_iters": "it prices one iteration (no ranks to balance)",
                          "dp_balance_batching_wait_iters": "it prices one iteration (no ranks to balance)",
                          "dp_padding": "it prices one iteration of one rank (no group to pad)",
                          "batch_wait_timeout_iters": "it prices one iteration (no prompts to hold)",
                          "batch_wait_max_tokens_ratio": "it prices one iteration (no prompts to hold)"} | {
    name: "it prices a plain hybrid iteration (no draft, no verify)" for name in (
        "speculative_config", "num_speculative_tokens", "acceptance_rate", "acceptance_rates", "acceptance_data",
        "spec_disable_batch_size", "spec_reduce_k_batch_size")}
# capacity judges its trials without a warm-up's requests (planning.capacity.run_trial), as a run reports
SET_BY_COMMAND: dict[str, dict[str, str]] = {"split": _SPLIT_SETS, "compare": _SPLIT_SETS, "plan": _PLAN_SETS,
                                             "tau": _TAU_SETS, "capacity": {}}


def given_flag(name: str, value: Any) -> str:
    """The flag that gave option ``name`` ``value``: a bool option's ``--no-`` form where it was turned off."""
    return f"--{'no-' if value is False else ''}{name.replace('_', '-')}"


def option_value(config: RunConfig, name: str) -> Any:  # noqa: ANN401 - any option's type
    """The value run option ``name`` holds in ``config`` (None for speculation's, which one JSON carries)."""
    value: Any = config
    for part in RUN_OPTIONS[name][0].split("__"):
        value = getattr(value, part, None)
    return value


def _set_by_command(options: dict[str, Any], command: str, scheduler: str, typed_as: dict[str, str] | None = None) -> None:
    """Refuse an option that ``command`` sets itself (:data:`SET_BY_COMMAND`) for a run of ``scheduler``;
    ``typed_as``: the flag that gave an option another option became (vLLM's ``--burstiness``: ``--arrival``, ``--cv``)."""
    sets = dict(SET_BY_COMMAND.get(command, {}))
    if command == "plan" and scheduler in CHUNKING_SCHEDULERS:  # its --budgets are a chunking scheduler's budget
        sets["chunk_size"] = sets["max_num_batched_tokens"] = "from --budgets"
    if command in ("split", "compare") and options.get("scheduler") not in (None, SPLIT_POOL_SCHEDULER):
        sets["scheduler"] = f"pools run {SPLIT_POOL_SCHEDULER}; compare's aggregated arms vllm and sarathi"
    if command in ("split", "compare") and options.get("scheduler") != SPLIT_POOL_SCHEDULER:
        # the pools keep no other scheduler's budget
        sets["max_num_batched_tokens"] = (
            f"pools run {SPLIT_POOL_SCHEDULER}, which keeps a budget only with --scheduler {SPLIT_POOL_SCHEDULER}")
    for name, setter in sets.items():
        if options.get(name) is not None:
            flag = (typed_as or {}).get(name) or given_flag(name, options[name])
            where = command if command in ("plan", "capacity", "tau") else f"disagg {command}"
            if command == "tau" or (command in ("split", "compare") and name in _SPLIT_UNREAD):
                raise ConfigError(flag, f"{where} does not read it ({setter}), so {flag} would do nothing",
                                  f"drop {flag}")
            raise ConfigError(flag, f"{where} sets it in every layout it searches ({setter}), so {flag} would "
                                    "do nothing",
                              f"drop {flag}")


def check_given(config: RunConfig, options: dict[str, Any], command: str = "run") -> None:
    """Refuse options that were given but would do nothing in ``config`` (a silently ignored
    flag makes two runs that look different the same); ``command`` names what will read the
    config (:data:`DECIDED_BY_COMMAND`: what it decides itself is not refused; :data:`SET_BY_COMMAND`:
    what it sets in every config it builds is)."""
    if options.get("workload") is not None and options.get("trace") is not None:
        raise ConfigError("--workload", f"--trace {options['trace']} gives the request lengths, so --workload "
                          f"{options['workload']} would do nothing", "pass one of --workload and --trace")
    _set_by_command(options, command, config.scheduler.name)
    if command in ("plan", "split", "compare") and config.workload.concurrency is not None \
            and options.get("concurrency") is None:  # (a --config file's closed loop: --qps was blamed)
        raise ConfigError("--config", f"its run is a closed loop of {config.workload.concurrency} users "
                          f"(workload.concurrency), and {command} searches the request rate, which a closed loop has "
                          "none of", "pass the config of an open-loop run (simulate run --qps N --out DIR writes one)")
    if command in ("split", "compare") and config.workload.num_warmup and options.get("num_warmup") is None:
        # (the flag is refused above; a --config file's warm-up would have been judged with the rest, unsaid)
        raise ConfigError("--config", f"its run leaves a warm-up of {config.workload.num_warmup:,} requests out "
                          f"(workload.num_warmup), and disagg {command}'s goodput trials judge every request",
                          "pass the config of a run without --num-warmup, or set workload.num_warmup to 0 in it")
    decided = DECIDED_BY_COMMAND.get(command, frozenset())
    if decided is None:
        return
    # (a capacity search's concurrency is a users search's first trial: a rate search refuses one)
    for name, (why, fix) in inert_options(config, users_search=command == "capacity").items():
        if options.get(name) is not None and name not in decided:
            flag = given_flag(name, options[name])
            raise ConfigError(flag, f"{why}, so {flag} would do nothing", fix.replace("{flag}", flag))
    if command in ("run", "capacity", "tau") and options.get("engine") is not None:  # (plan, split, compare: pools)
        check_engine_terms_read(config, "--engine", one_step=command == "tau")


def engine_terms_unread(config: RunConfig, search: tuple[int, int, tuple[str, ...]] | None = None,
                        ) -> dict[str, tuple[str, str]]:
    """The ``--engine`` override terms (``PRESET:term=value``) that ``config``'s run never reads: term -> (why, fix).
    ``search``: (the largest TP, the largest PP, the modes) of the layouts a plan searches, judged instead of the
    config's one layout. (Terms that do nothing on any run are refused where the engine loads:
    ``engine_model.check_override_effects``.)"""
    terms = engine_override_terms(config.engine) if isinstance(config.engine, str) else []
    r = config.replica
    pools = config.is_disaggregated  # (a pool may set its own tp= and pp=: judged on the aggregated replica only)
    subject = "the run" if search is None else "the plan"
    drafting = (f"is a speculating engine's term, and {subject} does not speculate", "add --speculative-config")
    if search is None:
        handoff = (not pools, ("is waited out between a disaggregated run's prefill and decode workers, and the "
                               "run is not disaggregated", "add --prefill-pool and --decode-pool"))
        pipeline = (not pools and r.pp == 1, ("keeps async scheduling under pipeline parallelism, and the run has "
                                              "none (--pp 1)", "add --pp 2 or more"))
        rpc = (not pools and r.tp == 1, ("is the RPC to a TP group's workers, and the run has none (--tp 1)",
                                         "add --tp 2 or more"))
    else:
        max_tp, max_pp, modes = search
        handoff = ("disagg" not in modes, ("is waited out between a disaggregated layout's prefill and decode "
                                           f"workers, and --modes {','.join(modes)} searches none",
                                           "add disagg to --modes"))
        pipeline = (max_pp == 1, ("keeps async scheduling under pipeline parallelism, and --pps searches none",
                                  "add a --pps degree above 1"))
        rpc = (max_tp == 1, ("is the RPC to a TP group's workers, and --tps searches only tp 1",
                             "add a --tps degree above 1"))
    unread = {"handoff_s": handoff, "overlap_pipeline": pipeline,
              "rpc_per_seq_s": rpc,  # (rpc_s, a TP table, is no override)
              "overlap_any_drafter": (config.speculative is None, drafting),
              "drafter_in_graph": (config.speculative is None, drafting)}
    return {t: unread[t][1] for t in terms if t in unread and unread[t][0]}


def _adaptive_speculation_inert(config: RunConfig, users_search: bool = False,
                                max_users: int | None = None) -> dict[str, tuple[str, str]]:
    """The adaptive speculation thresholds no step of ``config`` can reach: a step runs at most the scheduler's
    sequence cap, and at most the users (or the cap on requests in flight) of ``--concurrency``, so a threshold above
    that left every step at full k, unsaid (an audit). A disaggregated run's pools hold their own caps: not judged;
    nor a users search's concurrency, which its trials raise (``users_search``), but for its ceiling ``max_users``
    (``capacity --users --max-users``), which no trial passes."""
    spec, s, w = config.speculative, config.scheduler, config.workload
    if spec is None or config.is_disaggregated or (spec.disable_by_batch_size is None
                                                   and spec.reduce_k_batch_size is None):
        return {}
    # (SGLang's own cap grows with its KV cache up to 4,096: the most it can be, so only what no step can reach)
    cap = s.max_num_seqs or (4096 if s.name == "sglang" else s.seq_limit(config.replica.gpu_spec))
    held = f"max_num_seqs {cap:,}{'' if s.max_num_seqs else ' (the default)'}"
    if w.concurrency is not None and w.concurrency < cap and not users_search:
        cap, held = w.concurrency, f"--concurrency {w.concurrency:,}"
    if users_search and max_users is not None and max_users < cap:
        cap, held = max_users, f"--max-users {max_users:,}"
    out = {}
    if spec.disable_by_batch_size is not None and cap < spec.disable_by_batch_size:
        out["spec_disable_batch_size"] = (
            f"speculation turns off at {spec.disable_by_batch_size:,} running requests, but {held} holds every step "
            f"to {cap:,}", f"give {{flag}} at most {cap:,}, or drop it" if cap >= 2 else "drop {flag}")
    if spec.reduce_k_batch_size is not None and cap <= spec.reduce_k_batch_size:
        out["spec_reduce_k_batch_size"] = (
            f"k shrinks above {spec.reduce_k_batch_size:,} running requests, but {held} holds every step to {cap:,}",
            f"give {{flag}} below {cap:,}, or drop it" if cap >= 2 else "drop {flag}")
    return out


def check_users_search_speculation(config: RunConfig, max_users: int, given: Collection[str]) -> None:
    """Refuse an adaptive speculation threshold given (``given``: option names typed) that a users search up to
    ``max_users`` never reaches (:func:`_adaptive_speculation_inert`; the options' own check cannot know the
    ceiling, a capacity setting)."""
    for name, (why, fix) in _adaptive_speculation_inert(config, users_search=True, max_users=max_users).items():
        if name in given:
            flag = given_flag(name, option_value(config, name))
            raise ConfigError(flag, f"{why}, so {flag} would do nothing", fix.replace("{flag}", flag))


def check_engine_terms_read(config: RunConfig, field: str, one_step: bool = False) -> None:
    """Refuse the first of :func:`engine_terms_unread`, on ``field`` (the option that gave the engine). ``one_step``:
    the command prices one aggregated step (tau), whose layout no flag turns into one that reads the term."""
    for term, (why, fix) in engine_terms_unread(config).items():
        raise ConfigError(field, f"{term} {why}, so it would do nothing", f"drop {term}" if one_step
                          else f"{fix}, or drop {term}")


def closes_the_loop(values: dict[str, Any]) -> bool:
    """Whether run options ``values`` (by option name) make a concurrency N users in a closed loop: one given with no
    rate, arrival process or burstiness (``--concurrency N`` alone; a sweep point's concurrency alone)."""
    return (values.get("concurrency") is not None and values.get("qps") is None and values.get("arrival") is None
            and values.get("burstiness") is None)


# Arrival processes that space requests at a rate (a closed loop's users send as their requests end instead).
PACED_ARRIVALS = ("poisson", "gamma", "fixed")


def check_paced_arrivals(concurrency: int | None, arrival: str | None, qps: float | None, field: str = "--arrival") -> None:
    """Refuse an arrival process that spaces requests (poisson, gamma, fixed) typed beside a concurrency with no rate: it ran a
    capped open loop at the default 1 QPS, unsaid, so naming the default ``--arrival poisson`` turned a closed loop
    of N users into 1 QPS (a new-user audit). ``qps``: the rate given (typed, or a sweep point's), None where none."""
    if concurrency is not None and qps is None and arrival in PACED_ARRIVALS:
        raise ConfigError(field, f"{arrival} spaces arrivals at a rate, but no --qps is given beside "
                          f"a concurrency of {concurrency} (a closed loop sends as requests end)",
                          f"give --qps R for an open loop of at most {concurrency} requests in flight, or drop "
                          f"--arrival for a closed loop of {concurrency} users")


def alias_of(name: str) -> str:
    """The RUN_OPTIONS name that ``name`` (an option name or one of vLLM's) stands for."""
    for canonical, aliases in OPTION_ALIASES.items():
        if name in aliases and canonical in RUN_OPTIONS:
            return canonical
    return name


def resolve_aliases(options: dict[str, Any], base: RunConfig, from_file: bool = False,
                    partial: bool = False) -> dict[str, Any]:
    """``options`` under RUN_OPTIONS names: vLLM's spellings renamed (the same option given twice,
    differently, is refused), and vLLM's derived options turned into fields, as vLLM means them:

    - ``request_rate``/``qps`` ``inf``: every request at once (``--arrival burst``);
    - ``max_concurrency``/``concurrency`` with no rate or arrival given: ``--request-rate inf``
      (vLLM's default), so a closed loop; unless ``--config`` gave the arrivals;
    - ``burstiness`` B: gamma gaps with cv = 1/sqrt(B) (vLLM's gamma of shape B), Poisson at 1; refused
      where every request is sent at once (an infinite rate, a closed loop), as it could shape nothing.
      ``partial``: the options are a sweep's base, whose grid may give the rate B shapes.
    - ``enable_expert_parallel``: ``ep`` = ``tp x attention_dp`` GPUs;
    - ``num_warmups`` in a closed loop, with no ``warmup_mode`` given here or by a ``--config`` file: the warm-up
      drains first (``warmup_mode`` drain), as vLLM runs it.
    """
    out: dict[str, Any] = {}
    for name, value in options.items():
        canonical = alias_of(name)
        if canonical in DERIVED_OPTIONS or canonical not in RUN_OPTIONS:
            out.setdefault(canonical, value)
            continue
        if value is not None and out.get(canonical) is not None and out[canonical] != value:
            raise ConfigError(f"--{canonical.replace('_', '-')}", f"given twice: {out[canonical]!r} and {value!r} "
                              f"(--{name.replace('_', '-')})", "pass one of them")
        if value is not None or canonical not in out:
            out[canonical] = value
    # Lengths given with neither a workload nor a trace (vllm bench's --random-input-len): the lengths
    # asked for, fixed (banded with --range-ratio) or uniform up to a --*-max, not the default dataset's.
    given = [name for name in LENGTH_OPTIONS if out.get(name) is not None]
    lengths_read = not from_file and out.get("trace") is None and out.get("workload") in (None, "fixed", "random")
    if lengths_read and given and set(given) <= {"range_ratio", "range_style", "prompt_tokens_stddev",
                                                 "output_tokens_stddev"} and out.get("workload") is None:
        raise ConfigError(f"--{given[0].replace('_', '-')}", "varies fixed lengths, but no lengths were given and the "
                          "default workload (sharegpt) draws its own",
                          "add --prompt-tokens and --output-tokens, or --workload fixed")
    if lengths_read and out.get("range_style") == "sglang" and out.get("range_ratio") is None:
        raise ConfigError("--range-style", "sglang's band at the default ratio 0 draws every length in [1, len] "
                          "(SGLang bench_serving's default), not the fixed lengths asked for",
                          "give --range-ratio too (1: fixed; 0.8: [0.8 len, len]; 0: [1, len])")
    if given and out.get("workload") is None and out.get("trace") is None and not from_file:
        out["workload"] = "uniform" if any(name.endswith("_max") for name in given) else "fixed"
    if lengths_read:  # (a --config file's lengths stand)
        default_random_input_len(out)
    # vllm bench serve runs its --num-warmups as a phase of their own, gathered before the measured load starts
    # (its benchmark()): given in its spelling to a closed loop, with no --warmup-mode, the warm-up is that, our
    # drain; steady kept a warm-up sent beside the measured requests (P99 TTFT 431 ms against vLLM's drained 1,129
    # at 16 users). Our own --num-warmup keeps its steady default, and a --config file's mode stands (a run's
    # config.json always writes one). An open loop has no drain: its warm-up stays the first requests sent.
    concurrency = out.get("concurrency") if out.get("concurrency") is not None else base.workload.concurrency
    if (options.get("num_warmups") and out.get("warmup_mode") is None and not from_file
            and concurrency is not None):
        out["warmup_mode"] = "drain"
    burstiness = out.pop("burstiness", None)
    expert_parallel = out.pop("enable_expert_parallel", None)
    qps = out.get("qps")
    if qps is not None and qps == float("inf"):
        if out.get("arrival") not in (None, "burst"):
            flag = "--request-rate" if options.get("request_rate") is not None else "--qps"  # (the spelling given)
            raise ConfigError(flag, f"inf sends every request at once, but --arrival is {out['arrival']}",
                              "drop one of them")
        out["qps"], out["arrival"] = None, "burst"
    elif not from_file and closes_the_loop({**out, "qps": qps, "burstiness": burstiness if partial else None}):
        out["arrival"] = "burst"  # (a sweep's burstiness waits for its grid's qps)
    # The arrivals the flags leave: theirs, else a --config file's where no gaps could follow from the flags
    # (every request at once, or a trace's times) and no rate given here replaces them.
    file_arrival = base.workload.arrival if from_file and out.get("qps") is None and not partial else None
    arrival = out.get("arrival") or (file_arrival if file_arrival in ("burst", "trace") else None)
    if burstiness == 1 and arrival == "burst":
        burstiness = None  # vLLM's default, which an infinite rate ignores
    if burstiness is not None:
        # vLLM's gamma of shape B has cv = 1/sqrt(B): the range of cv the workload takes.
        low, high = 1 / CV_RANGE[1] ** 2, 1 / CV_RANGE[0] ** 2
        if not low <= burstiness <= high:
            raise ConfigError("--burstiness", f"must be in [{low:g}, {high:g}], got {burstiness}",
                              "1 is Poisson; below 1 burstier")
        if arrival == "burst":  # vLLM ignores it at an infinite rate; here a flag never does nothing
            raise ConfigError("--burstiness", "shapes the gaps between arrivals at a finite rate, but every request "
                              "is sent at once here (--request-rate inf, or --concurrency without --qps)",
                              "give --qps too, or drop --burstiness")
        if out.get("cv") is not None:
            raise ConfigError("--burstiness", f"sets the gaps' cv (1/sqrt(B)), and --cv {out['cv']} sets it too",
                              "drop one of them")
        if arrival not in (None, "gamma") and not (arrival == "poisson" and burstiness == 1):
            raise ConfigError("--burstiness", f"{burstiness:g} shapes gamma gaps (1 is Poisson), but the arrivals "
                              f"are {arrival} (--arrival{'' if out.get('arrival') else ', from --config'})",
                              "drop one of them")
        out["arrival"] = "poisson" if burstiness == 1 else "gamma"
        out["cv"] = None if burstiness == 1 else 1.0 / burstiness**0.5
    if expert_parallel:
        from simulator.config.catalog import get_model
        from simulator.config.disagg_layout import parse_pool

        tp_run = out.get("tp") or base.replica.tp
        dp_run = out.get("attention_dp") or getattr(base.replica, "attention_dp", 1)
        for key in ("prefill_pool", "decode_pool", "mixed_pool"):
            text = out.get(key) or getattr(base, key)
            pool = parse_pool(text, key) if text else None
            # (its EP is the run's tp x dp: a pool of other tp x dp without an ep= of its own would get the wrong one)
            if pool is not None and pool.ep is None and (pool.tp or tp_run) * (pool.dp or dp_run) != tp_run * dp_run:
                raise ConfigError("--enable-expert-parallel", f"sets --ep to --tp x --attention-dp = "
                                  f"{tp_run * dp_run}, and --{key.replace('_', '-')} has "
                                  f"{(pool.tp or tp_run) * (pool.dp or dp_run)} GPUs in its MoE group",
                                  "give that pool its own ep=N, or drop --enable-expert-parallel")

        model = out.get("model") or base.replica.model
        if not get_model(model).is_moe:
            raise ConfigError("--enable-expert-parallel", f"{model} has no experts", "drop it for a dense model")
        tp = out.get("tp") or base.replica.tp
        ep = tp * (out.get("attention_dp") or getattr(base.replica, "attention_dp", 1))
        if ep == 1:  # (it ran, ep=1, as without it)
            raise ConfigError("--enable-expert-parallel", "the MoE group is one GPU: there is nothing to spread the "
                              "experts over", "add --tp or --attention-dp, or drop it")
        if out.get("ep") not in (None, ep):
            raise ConfigError("--enable-expert-parallel", f"sets --ep {ep} (every GPU of the MoE group), but --ep is "
                              f"{out['ep']}", "drop one of them")
        out["ep"] = ep
    return out


def build_config(config_file: Path | None = None, command: str = "run", base: RunConfig | None = None,
                 **options: Any) -> RunConfig:
    """A RunConfig from a base (``--config``, else ``base``, else defaults) plus the options that were
    given, for ``command`` (:func:`check_given`). ``base``: defaults the command line sets from what
    the options name (a trace replay's row count, :func:`simulator.cli.options.replay_whole`)."""
    base = load_config_file(config_file) if config_file else base or RunConfig()
    typed = {name for name, value in options.items() if value is not None}
    if options.get("enable_expert_parallel") and command in SET_BY_COMMAND and "ep" in SET_BY_COMMAND[command]:
        # (it sets --ep, which the command sets in every layout; its own check asked for --tp, refused there too)
        where = command if command == "plan" else f"disagg {command}"
        raise ConfigError("--enable-expert-parallel", f"{where} sets each layout's EP itself "
                          f"({SET_BY_COMMAND[command]['ep']}), so --enable-expert-parallel would do nothing",
                          "drop --enable-expert-parallel")
    if command == "run" and "arrival" in typed and "qps" not in typed and "request_rate" not in typed and (
            config_file is None or base.workload.arrival == "burst"):  # (a file's open loop keeps its own rate)
        check_paced_arrivals(options.get("concurrency") or options.get("max_concurrency")
                             or base.workload.concurrency, options.get("arrival"), None)
    options = resolve_aliases(options, base, from_file=config_file is not None)
    if isinstance(options.get("scheduler"), str):  # any case, as SchedulerConfig reads it (every check below sees one)
        options["scheduler"] = options["scheduler"].lower()
    # What the command sets in every config it builds is refused before the base is built: the base alone may not
    # hold the value (plan's --redundant-experts or --ep beside its EP 1, TP 1), and the base's own refusal would
    # then send the user to a fix the command refuses too (give --ep, give --tp).
    ep = options.get("ep") or 1
    if (command in ("split", "compare") and ep > 1 and (options.get("attention_dp") or base.replica.attention_dp) == 1
            and base.replica.tp % ep):
        # (the base config is built before any layout takes --tps, and EP without attention DP must divide its TP)
        raise ConfigError("--ep", f"disagg {command} sets each layout's TP from --tps, and EP without attention DP must "
                          f"divide a replica's TP, which its base config (tp {base.replica.tp}) cannot hold",
                          "add --attention-dp N for EP over data-parallel ranks, or lay the pools out yourself: "
                          "`simulate run --tp 2 --ep 2 --prefill-pool 1x --decode-pool 2x`")
    # vLLM's --burstiness becomes --arrival gamma and --cv: a refusal of those names the flag typed
    typed_as = {name: "--burstiness" for name in ("arrival", "cv") if "burstiness" in typed and name not in typed}
    _set_by_command(options, command, options.get("scheduler") or base.scheduler.name, typed_as)
    changes = {RUN_OPTIONS[k][0]: v for k, v in options.items() if v is not None}
    try:
        config = base.replace(**changes)
    except TypeError as exc:  # a field the dataclass does not have
        raise ConfigError("options", str(exc)) from None
    check_given(config, options, command)
    return config


def config_overrides(config: RunConfig, reference: RunConfig | None = None) -> dict[str, Any]:
    """Run options whose value in ``config`` differs from ``reference`` (default: RunConfig())."""
    reference = reference or RunConfig()
    mine, theirs = config.to_dict(), reference.to_dict()
    out = {}
    for name, (path, _, _) in RUN_OPTIONS.items():
        section, _, attr = path.partition("__")
        if section == "speculative":  # options, not fields: one JSON string carries the whole config below
            continue
        value, default = (mine[section][attr], theirs[section][attr]) if attr else (mine[section], theirs[section])
        if value != default:
            out[name] = value
    if config.speculative != reference.speculative:
        from simulator.config.speculative import to_vllm_json

        out["speculative_config"] = "off" if config.speculative is None else to_vllm_json(config.speculative)
    return out
