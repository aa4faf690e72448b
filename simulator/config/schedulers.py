"""The scheduling policies a run may name: one plain dict, :data:`SCHEDULERS`.

A policy lives in the engine (``simulator/engine/schedulers/``), above this layer, yet the configs
must validate a name, and say which flags a policy reads, before any engine is built. So the
dict names each policy's class by its import path (as vLLM's ``SchedulerConfig.scheduler_cls``
does) with the few facts the configs need; :mod:`simulator.engine.schedulers` resolves the paths.
Adding a policy: its module in ``simulator/engine/schedulers/`` and one line here.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.config.errors import ConfigError

# Prefix cache rules (simulator.engine.prefix_cache): vLLM V1's LRU of freed blocks, SGLang's LRU of radix leaves.
PREFIX_CACHE_POLICIES = ("vllm-lru", "radix-lru")
# What a KV cache's memory fraction (--gpu-memory-utilization) is a fraction of (ReplicaConfig.memory_fraction_of,
# simulator.engine.kvcache.plan_memory): "total", vLLM's --gpu-memory-utilization (weights, activations and KV cache
# share that much of the GPU); "static", SGLang's --mem-fraction-static (weights and KV pool share it, activations and
# CUDA graphs live in the rest); "free", TensorRT-LLM's free_gpu_memory_fraction (the KV cache gets that much of what
# weights and activations leave).
MEMORY_BASES = ("total", "static", "free")
# What the MoE layers of an attention-DP step carry (SchedulerEntry.dp_padding, --dp-padding;
# simulator.engine.dp_group): "max", every rank padded to the largest rank's tokens; "sum", the ranks' own tokens
# in a step that carries a prompt (decode-only steps padded as under "max"); "graphs", padded as under "max" while
# every rank's step fits its largest captured CUDA graph, the ranks' own tokens once one does not.
DP_PADDINGS = ("max", "sum", "graphs")


@dataclass(frozen=True)
class SchedulerEntry:
    """One policy: where its class is, and what a config must know of it.

    ``policy``: ``"module:Class"``, a :class:`~simulator.engine.schedulers.base.Scheduler` subclass.
    ``chunks_prompts``: its token budget is a prompt chunk size (``--chunk-size`` reads it).
    ``token_budget``: a per-iteration token budget bounds its steps (``--max-num-batched-tokens``
    reads it; Orca's whole prompts and FasterTransformer's whole batches have none).
    ``batch_wait``: its steps mix prompts with decodes, which batch waiting can hold.
    ``prefix_cache``: the prefix-cache policy the engine runs by default (vLLM V1's block hashes,
    SGLang's radix tree); None where the engine caches no prefixes unless asked.
    ``hybrid_page``: its engine (vLLM) pages a hybrid model's attention and linear-attention state from one pool,
    so a block unset by ``--block-size`` is as many tokens as hold a linear layer's state
    (:func:`simulator.engine.kvcache.engine_block_size`).
    ``memory_basis``: what its engine's memory fraction is a fraction of (:data:`MEMORY_BASES`), unless
    ``--memory-fraction-of`` says; its default fraction follows (:meth:`SchedulerConfig.memory_fraction`).
    ``block_size``: its engine's KV page in tokens, unless ``--block-size`` says (vLLM's 16; TensorRT-LLM's
    tokens_per_block 32).
    ``dp_padding``: what the MoE layers of its engine's attention-DP steps carry (:data:`DP_PADDINGS`), unless
    ``--dp-padding`` says: ``max``, every rank padded to the largest rank's tokens; ``sum``, a step that carries a
    prompt routes the ranks' own tokens only (SGLang's ``SUM_LEN`` gather whenever a rank extends, TensorRT-LLM's
    padded rows skipped by its MoE), its decode-only steps still padded to the largest rank (both engines' CUDA
    graphs and ``MAX_LEN`` gathers); ``graphs``, vLLM V1's: the ranks agree each step on a CUDA-graph mode (the
    least of theirs) and pad to the largest rank only under a graph, so a step in which some rank runs more tokens
    than its largest captured graph (``min(2 x max_num_seqs x (1 + drafts), 512, budget)``) routes the ranks' own
    tokens (vLLM's ``coordinate_batch_across_dp`` since early 2026; releases before it padded every step while CUDA
    graphs were on, ``max``), whether or not it carries a prompt.
    ``serves_pools``: its engine's disaggregated deployments run this policy in their prefill and decode workers
    (vLLM's NIXL-connected workers, which only its V1 engine runs; SGLang's PD disaggregation; TensorRT-LLM's context
    and generation servers), so a disaggregated run's pools without ``sched=`` and a plan's disaggregated layouts run
    it in both pools (:func:`simulator.config.disagg_layout.default_pool_scheduler`); under any other policy the pools
    run ``vllm`` (``FALLBACK_POOL_SCHEDULER``)."""

    policy: str
    chunks_prompts: bool = False
    token_budget: bool = True
    batch_wait: bool = False
    prefix_cache: str | None = None
    hybrid_page: bool = False
    memory_basis: str = "total"
    block_size: int = 16
    dp_padding: str = "max"
    serves_pools: bool = False
    reserves_context: bool = False

    def __post_init__(self) -> None:
        module, _, cls = self.policy.partition(":")
        if not module or not cls:
            raise ConfigError("scheduler.policy", f"{self.policy!r} is not 'module:Class'",
                              "name the policy's class as simulator.engine.schedulers.<module>:<Class>")
        if self.chunks_prompts and not self.token_budget:
            raise ConfigError("scheduler.policy", f"{self.policy} chunks prompts under no token budget",
                              "a chunking policy's chunk size is its token budget: set token_budget")
        if self.prefix_cache is not None and self.prefix_cache not in PREFIX_CACHE_POLICIES:
            raise ConfigError("scheduler.prefix_cache", f"unknown prefix-cache policy {self.prefix_cache!r}",
                              f"use one of {', '.join(PREFIX_CACHE_POLICIES)}, or None")
        if self.memory_basis not in MEMORY_BASES:
            raise ConfigError("scheduler.memory_basis", f"unknown memory basis {self.memory_basis!r}",
                              f"use one of {', '.join(MEMORY_BASES)}")
        if self.dp_padding not in DP_PADDINGS:
            raise ConfigError("scheduler.dp_padding", f"unknown attention-DP padding {self.dp_padding!r}",
                              f"use one of {', '.join(DP_PADDINGS)}")
        if self.block_size <= 0:
            raise ConfigError("scheduler.block_size", f"must be positive, got {self.block_size}",
                              "give the engine's KV page in tokens, e.g. 16")


_POLICIES = "simulator.engine.schedulers"
SCHEDULERS: dict[str, SchedulerEntry] = {
    # (V0; the pools' scheduler under a research policy and disagg split/compare's: DistServe's prefill and decode
    # instances, disagg_layout.FALLBACK_POOL_SCHEDULER and SPLIT_POOL_SCHEDULER)
    "vllm": SchedulerEntry(f"{_POLICIES}.vllm:VLLMScheduler", hybrid_page=True, serves_pools=True),
    "orca": SchedulerEntry(f"{_POLICIES}.orca:OrcaScheduler", token_budget=False, reserves_context=True),
    "fastertransformer": SchedulerEntry(f"{_POLICIES}.fastertransformer:FasterTransformerScheduler",
                                        token_budget=False, reserves_context=True),
    "sarathi": SchedulerEntry(f"{_POLICIES}.sarathi:SarathiScheduler", chunks_prompts=True, batch_wait=True),
    # Sarathi's policy under vLLM's default budget (SchedulerConfig.token_budget).
    "vllm-v1": SchedulerEntry(f"{_POLICIES}.sarathi:SarathiScheduler", chunks_prompts=True, batch_wait=True,
                              prefix_cache="vllm-lru", hybrid_page=True, dp_padding="graphs", serves_pools=True),
    # SGLang sizes its pool by --mem-fraction-static (weights and KV pool). Its page is 1 token by default; the
    # simulator keeps 16-token blocks (at most 15 tokens a request apart, and a radix cache named per token
    # would cost 16 times the lookups).
    "sglang": SchedulerEntry(f"{_POLICIES}.sglang:SGLangScheduler", chunks_prompts=True, prefix_cache="radix-lru",
                             memory_basis="static", dp_padding="sum", serves_pools=True),
    # TensorRT-LLM reuses KV blocks across requests by default (KvCacheConfig.enable_block_reuse); its
    # KvCacheConfig sizes the cache by free_gpu_memory_fraction (0.9) in blocks of tokens_per_block (32).
    "trtllm": SchedulerEntry(f"{_POLICIES}.trtllm:TRTLLMScheduler", batch_wait=True, prefix_cache="vllm-lru",
                             memory_basis="free", block_size=32, dp_padding="sum", serves_pools=True),
}

SCHEDULER_NAMES = tuple(SCHEDULERS)
CHUNKING_SCHEDULERS = tuple(name for name, e in SCHEDULERS.items() if e.chunks_prompts)
BUDGETED_SCHEDULERS = tuple(name for name, e in SCHEDULERS.items() if e.token_budget)
UNBUDGETED_SCHEDULERS = tuple(name for name, e in SCHEDULERS.items() if not e.token_budget)
BATCH_WAIT_SCHEDULERS = tuple(name for name, e in SCHEDULERS.items() if e.batch_wait)
POOL_SCHEDULERS = tuple(name for name, e in SCHEDULERS.items() if e.serves_pools)
