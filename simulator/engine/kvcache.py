"""Paged KV cache: memory budget and block accounting.

Capacity (DESIGN.md): per GPU, a KV budget divided by the KV bytes one token costs on that GPU, unless
``num_gpu_blocks`` gives the block count outright (vLLM's ``num_gpu_blocks_override``). The budget is the
engine's rule for its memory fraction ``f`` (``SchedulerConfig.memory_fraction``: the run's
``--gpu-memory-utilization`` and ``--memory-fraction-of``, else the scheduler's engine's): vLLM's total basis,
``memory * f - weights - activation reserve``; SGLang's static one, ``memory * f - weights - non-torch memory``
(its ``--mem-fraction-static`` holds weights and KV pool; activations and CUDA graphs live in the rest);
TensorRT-LLM's free one, ``(memory - weights - activation reserve) * f``. KV bytes per token per layer are
``2 * kv_heads * head_dim * kv_dtype_bytes``, sharded by TP (a GPU keeps at least one KV
head: GQA models replicate heads when ``tp > kv_heads``), or for multi-head latent
attention ``(kv_lora_rank + qk_rope_head_dim) * kv_dtype_bytes``, replicated on every TP
rank; multiplied by the layers of the stage the GPU serves. With pipeline parallelism the
tightest stage decides. With attention data parallelism the plan is one rank's (its ``tp``
GPUs, its own KV cache): attention, dense layers, shared experts and embeddings are sharded by
the rank's ``tp``, the routed experts over all ``tp * attention_dp`` GPUs of the MoE group.
Weights count every expert of a MoE model, at the ``--dtype`` bytes, scales included
(``--kv-cache-dtype fp8`` halves the KV bytes, so it doubles the KV tokens).

Hybrid models (Gated DeltaNet layers beside full attention) keep per-token KV only in their
full-attention layers, and a recurrent state per running sequence in the others. As vLLM V1's
hybrid allocator pages both from one pool, the state is charged to the same blocks: each running
sequence holds ``num_state_blocks`` blocks (its state's bytes over a block's KV bytes, rounded up)
from its admission until it finishes or is preempted, beside the blocks of its tokens. Unless
``--block-size`` says otherwise, vLLM's schedulers page such a model in vLLM's blocks, as many tokens as hold
one linear layer's state (:func:`engine_block_size`; Qwen3.5-397B at TP4: 1,056), the others in 16. Sliding-window
layers of a short window (gpt-oss's 128 tokens: ``ModelSpec.num_windowed_layers``) are charged the
same way: a sequence holds at most ``window + block_size`` tokens in each (vLLM V1 frees the blocks
that slide out of the window), so they take a fixed share of its blocks (``num_window_blocks``, part
of ``num_state_blocks``) and its tokens grow the other layers' KV only.

The block manager only counts blocks: which physical block holds which token does not
change any timing the simulator models. Invariant: ``num_free_blocks + sum(r.num_blocks +
r.num_state_blocks for live requests) == num_blocks`` at all times, and every block a request
holds is returned when it finishes or is preempted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.errors import ConfigError
from simulator.config.run_config import DEFAULT_MEMORY_FRACTION, ReplicaConfig, SchedulerConfig
from simulator.config.schedulers import SCHEDULERS
from simulator.costmodel.base import BatchShape, split_layers
from simulator.workload.request import Request

GiB = 1024**3
DEFAULT_BLOCK_SIZE = 16  # tokens a KV block holds unless --block-size (or the engine: SchedulerEntry.block_size) says: vLLM's
# CUDA context, cuBLAS/NCCL workspaces and allocator slack that vLLM's profiling run sees
# outside the model's own activations.
NON_TORCH_RESERVE_BYTES = 1.0 * GiB


@dataclass(frozen=True)
class MemoryPlan:
    """Per-stage memory budget of one replica (bytes are per GPU)."""

    weights_bytes: tuple[float, ...]  # per stage
    activation_bytes: float
    kv_budget_bytes: tuple[float, ...]  # per stage
    kv_bytes_per_token: tuple[float, ...]  # per stage, on one GPU
    num_kv_tokens: int  # tokens the whole replica can hold (tightest stage)
    num_blocks: int
    block_size: int
    num_state_blocks: int = 0  # blocks each running sequence holds beside its tokens' (recurrent state, window)
    num_memory_tokens: int | None = None  # where num_gpu_blocks set the cache: the tokens the memory plan holds
    num_window_blocks: int = 0  # of num_state_blocks: the windowed sliding layers' (the rest: recurrent state)
    # The memory fraction the budget was planned with, and its basis (SchedulerConfig.memory_fraction).
    memory_fraction: float = DEFAULT_MEMORY_FRACTION
    memory_basis: str = "total"

    def as_dict(self) -> dict[str, float | int | str]:
        # (the fraction and its basis where they are not vLLM's default, so a vLLM run's figures stay as they were;
        # on SGLang's static basis the activation reserve is not taken from the budget)
        basis = ({} if (self.memory_fraction, self.memory_basis) == (DEFAULT_MEMORY_FRACTION, "total")
                 else {"memory_fraction": self.memory_fraction, "memory_basis": self.memory_basis})
        return {
            "weights_gib_per_gpu": max(self.weights_bytes) / GiB,
            "activation_reserve_gib": self.activation_bytes / GiB,
            "kv_budget_gib_per_gpu": min(self.kv_budget_bytes) / GiB,
            "num_kv_tokens": self.num_kv_tokens,
            "num_kv_blocks": self.num_blocks,
            **basis,
            **({"num_state_blocks_per_seq": self.num_state_blocks} if self.num_state_blocks else {}),
        }


def activation_reserve_bytes(replica: ReplicaConfig, max_num_batched_tokens: int, max_num_seqs: int) -> float:
    """Peak activation memory of the largest batch, as vLLM's profiling run measures it:
    the widest intermediate (QKV + gated MLP) for every token, plus fp32 logits per sequence."""
    m, tp, db = replica.model_spec, replica.tp, replica.dtype_bytes
    kv_per_gpu = max(1, m.num_kv_heads // tp) * m.head_dim
    mlp_width = m.ffn_size
    if m.is_moe:  # the widest MLP a token meets: its top-k experts and the shared ones, or a dense layer
        moe_width = m.num_experts_per_tok * m.expert_ffn_size + m.num_shared_experts * (
            m.shared_expert_ffn_size or m.expert_ffn_size)
        mlp_width = max(moe_width, m.ffn_size if m.num_dense_layers else 0)
    per_token = (m.q_size // tp + 2 * kv_per_gpu + (3 if m.gated_mlp else 2) * mlp_width // tp + 4 * m.hidden_size) * db
    logits = min(max_num_seqs, max_num_batched_tokens) * m.vocab_size * 4
    return NON_TORCH_RESERVE_BYTES + max_num_batched_tokens * per_token + logits


def vllm_hybrid_block_size(replica: ReplicaConfig) -> int:
    """vLLM's attention block for a hybrid model (HybridAttentionMambaModelConfig): the fewest multiple of 16
    tokens whose attention page, one full-attention layer's KV on one GPU, holds one linear-attention layer's state
    (its mamba page), so that both page one pool; vLLM logs "Setting attention block size to N tokens"
    (Qwen3.5-397B at TP4: 1,056)."""
    m = replica.model_spec
    attention = m.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, replica.tp)
    state = m.linear_state_bytes_per_gpu_layer(replica.dtype_bytes, replica.tp)
    return DEFAULT_BLOCK_SIZE * math.ceil(state / (DEFAULT_BLOCK_SIZE * attention))


def engine_block_size(replica: ReplicaConfig, scheduler: str | None) -> int:
    """The KV block a replica's engine pages in: ``--block-size`` where given; else, for a hybrid model under a
    policy whose engine pages its attention and state from one pool (vLLM's: ``SchedulerEntry.hybrid_page``),
    :func:`vllm_hybrid_block_size`; else the engine's page (``SchedulerEntry.block_size``: 16 tokens, vLLM's
    default, and SGLang's here, which keeps its mamba states in a pool of their own; TensorRT-LLM's 32).
    ``scheduler`` None: no engine's rule, 16."""
    if replica.block_size is not None:
        return replica.block_size
    if scheduler is None:
        return DEFAULT_BLOCK_SIZE
    entry = SCHEDULERS[scheduler]
    if entry.hybrid_page and replica.model_spec.is_hybrid:
        return vllm_hybrid_block_size(replica)
    return entry.block_size


def vllm_kv_cache_groups(replica: ReplicaConfig) -> tuple[int, int]:
    """vLLM V1's KV cache groups of a model (kv_cache_utils._get_kv_cache_groups_uniform_page_size), as ``(layers a
    group, groups)``: its layers by kind (full attention, sliding window, linear attention) cut into groups of the
    smallest kind's count (of the largest's where that is under 1.25 times it). One block of the pool is one group's
    page: a block's tokens in each of a group's layers. gpt-oss: 18 full and 18 sliding layers, 2 groups of 18;
    Qwen3.5-397B: 15 full and 45 linear, 4 groups of 15; a model of one kind, 1 group of all its layers."""
    m = replica.model_spec
    kinds = [n for n in (m.num_kv_layers - m.num_sliding_layers, m.num_sliding_layers, m.num_linear_layers) if n]
    size = max(kinds) if max(kinds) < 1.25 * min(kinds) else min(kinds)
    return size, sum(-(-n // size) for n in kinds)


def vllm_reported_kv_tokens(replica: ReplicaConfig, plan: MemoryPlan) -> int:
    """The cache ``plan`` leaves as vLLM logs it ("GPU KV cache size: N tokens", _report_kv_cache_config): vLLM's
    blocks (a group's page each, :func:`vllm_kv_cache_groups`) over its groups, times a block's tokens, the tokens
    one sequence could hold were every group to grow with it. ``plan.num_kv_tokens`` is the whole pool in tokens of
    the layers that grow with every token (a hybrid's full-attention layers, gpt-oss's full ones), the same for a
    model of one kind, twice it for gpt-oss (255,120 where vLLM logs ~127,560) and four times for Qwen3.5."""
    size, groups = vllm_kv_cache_groups(replica)
    blocks = plan.num_blocks * replica.model_spec.num_growing_kv_layers // size  # the pool in vLLM's blocks
    return blocks // groups * plan.block_size


def batch_fit_problem(replica: ReplicaConfig, shape: BatchShape,
                      scheduler: SchedulerConfig | str | None = None) -> tuple[str, str] | None:
    """Why ``replica`` could not run the batch ``shape`` as one iteration, as ``(what, problem)``
    with ``what`` one of ``prefill`` (a chunk and the tokens before it beyond the model's context),
    ``decode`` (a decode's KV beyond it) or ``kv`` (the batch's KV beyond the cache the memory plan
    leaves, in ``scheduler``'s blocks and under its engine's memory rule: :func:`plan_memory`); None if it could.
    The callers (predict, tau) name their own flags."""
    limit = replica.effective_max_model_len
    if shape.prefill_max_kv > limit:
        return "prefill", (f"a chunk reaches {shape.prefill_max_kv} tokens with the tokens before it, beyond "
                           f"{replica.model}'s context of {limit}")
    if shape.decode_max_kv > limit:
        return "decode", f"a decode's KV of {shape.decode_max_kv} tokens is beyond {replica.model}'s context of {limit}"
    num_seqs = shape.num_prefills + shape.num_decodes
    plan = plan_memory(replica, max(shape.num_tokens, 1), max(num_seqs, 1), scheduler)
    # each sequence also holds its recurrent state's and its window's blocks (plan.num_state_blocks)
    kv_tokens = shape.prefill_kv_tokens + shape.decode_kv_tokens + num_seqs * plan.num_state_blocks * plan.block_size
    capacity = plan.num_kv_tokens
    if kv_tokens > capacity:
        return "kv", (f"the batch holds {kv_tokens} KV tokens, but {replica.model} on {replica.tp}x{replica.gpu} "
                      f"keeps {capacity} in its KV cache")
    return None


def plan_memory(replica: ReplicaConfig, max_num_batched_tokens: int, max_num_seqs: int,
                scheduler: SchedulerConfig | str | None = None) -> MemoryPlan:
    """KV capacity of a replica, in the blocks of ``scheduler``'s engine (:func:`engine_block_size`), at its
    memory fraction and on its basis (``SchedulerConfig.memory_fraction``; a name: that policy at its defaults;
    None: vLLM's rule, 16-token blocks); refuses layouts whose weights do not fit."""
    name = scheduler.name if isinstance(scheduler, SchedulerConfig) else scheduler
    sched = scheduler if isinstance(scheduler, SchedulerConfig) else SchedulerConfig(scheduler or "vllm")
    fraction, basis = sched.memory_fraction(replica)
    m, gpu, tp, db = replica.model_spec, replica.gpu_spec, replica.tp, replica.dtype_bytes
    layers = split_layers(m.num_layers, replica.pp)
    # MHA/GQA heads are sharded by TP, an MLA latent is replicated. A hybrid's linear-attention layers
    # and a short window's sliding layers keep no per-token KV (state_blocks_per_seq charges them); the
    # other layers' is spread over all of them (layers split evenly over stages).
    kv_layer = m.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, tp)
    kv_token_layer = kv_layer
    if m.num_growing_kv_layers != m.num_layers:
        kv_token_layer *= m.num_growing_kv_layers / m.num_layers
    activation = activation_reserve_bytes(replica, max_num_batched_tokens, max_num_seqs)
    usable = gpu.memory_bytes * fraction
    # What a stage's weights share the budget with: vLLM's profiled activations (total basis, and free, where they
    # come off before the fraction), or on SGLang's static basis the memory in use before it loads the model (its
    # fraction is of the GPU, the pool what the weights leave of it: as the launch line converts it,
    # simulator.planning.launch.launch_memory_fraction).
    beside = NON_TORCH_RESERVE_BYTES if basis == "static" else activation
    weights, budgets, per_token = [], [], []
    for stage, num_layers in enumerate(layers):
        # at --dtype (what the checkpoint keeps at 16 bits in the stage's own layers apart); embeddings, LM head at dtype_bytes
        w = replica.layer_weights_bytes(num_layers, sum(layers[:stage]))
        if stage == 0:
            w += m.embedding_params / tp * db
        if stage == len(layers) - 1 and (not m.tied_embeddings or replica.pp > 1):
            w += m.vocab_size * m.hidden_size / tp * db
        budget = usable - w - beside
        if basis == "free" and gpu.memory_bytes > w + activation:
            budget = (gpu.memory_bytes - w - activation) * fraction
        if budget <= 0:
            need_gib = (w + beside) / GiB
            fix = "raise --tp/--pp or use a larger GPU"
            if replica.dtype in ("bf16", "fp16"):  # 16-bit weights: an FP8 checkpoint holds them in half the bytes
                fix = "raise --tp/--pp, quantise the weights (--dtype fp8) or use a larger GPU"
                if w / 2 + beside >= usable > w / 4 + beside:  # (gpt-oss-120b on one GPU: FP8 fails too; MXFP4 fits)
                    fix = (f"raise --tp/--pp, quantise the weights to 4 bits (--dtype mxfp4 or nvfp4, as gpt-oss's and "
                           f"NVFP4 checkpoints ship; FP8 still needs ~{(w / 2 + beside) / GiB:.0f} GiB) or use a "
                           "larger GPU")
            if basis == "static":  # SGLang's: the static share holds the weights, the rest its activations
                what = "weights and the memory in use before loading"
                fix = f"raise --gpu-memory-utilization (SGLang's --mem-fraction-static, now {fraction:g}), or {fix}"
            else:
                what = "weights+activations"
            if basis != "static" and activation > w:  # a step's activations, not the weights, fill the GPU: a knob
                fix = (f"lower --max-num-batched-tokens or --max-num-seqs (a step of {max_num_batched_tokens:,} tokens "
                       f"and {max_num_seqs:,} sequences needs {activation / GiB:.1f} GiB of activations), or {fix}")
            raise ConfigError(
                "replica", f"{m.name} on {replica.gpu} tp={tp} pp={replica.pp} does not fit: stage {stage} needs "
                f"{need_gib:.1f} GiB for {what} but {usable / GiB:.1f} GiB are usable per GPU "
                f"(short by {(w + beside - usable) / GiB:.1f} GiB)", fix)
        weights.append(w)
        budgets.append(budget)
        if replica.pp > 1 and m.num_growing_kv_layers != m.num_layers:
            # The stage's own full-attention layers, not the mean: interleaved (one in k, as hybrids and
            # gpt-oss alternate), a stage holds at most ceil(its share) of them, and the fullest stage sets
            # the cache (the mean over-counted Qwen3.5-397B's at pp=4, stages of 3, 4, 4 and 4, by 6.7%).
            num_growing = math.ceil(m.num_growing_kv_layers * num_layers / m.num_layers - 1e-9)
            per_token.append(num_growing * kv_layer)
        else:
            per_token.append(num_layers * kv_token_layer)
    num_tokens = int(min(b / t for b, t in zip(budgets, per_token, strict=True)))
    block = engine_block_size(replica, name)
    num_blocks = planned_blocks = num_tokens // block
    if replica.num_gpu_blocks is not None:
        # A given block count replaces the plan's (vLLM's num_gpu_blocks_override), e.g. to match
        # another simulator's cache size, or an unbounded cache; the weights must still fit, which is
        # checked above. The blocks may exceed what the GPU holds: asked for, as vLLM's override allows.
        num_blocks = replica.num_gpu_blocks
    window = window_blocks_per_seq(replica, kv_layer, kv_token_layer, block)
    return MemoryPlan(tuple(weights), activation, tuple(budgets), tuple(per_token),
                      num_blocks * block, num_blocks, block,
                      state_blocks_per_seq(replica, kv_token_layer, block) + window,
                      None if replica.num_gpu_blocks is None else planned_blocks * block, window, fraction, basis)


def state_blocks_per_seq(replica: ReplicaConfig, kv_token_layer: float, block_size: int) -> int:
    """Blocks one sequence's recurrent state takes in a hybrid model (0 otherwise): the state of
    its linear-attention layers over the KV a block of tokens takes in its full-attention layers,
    per mean layer (``kv_token_layer`` is already that mean), rounded up."""
    m = replica.model_spec
    if not m.is_hybrid:
        return 0
    state = m.linear_state_bytes_per_gpu_layer(replica.dtype_bytes, replica.tp) * m.num_linear_layers / m.num_layers
    return -(-int(round(state / kv_token_layer)) // block_size)


def window_blocks_per_seq(replica: ReplicaConfig, kv_layer: float, kv_token_layer: float, block_size: int) -> int:
    """Blocks one sequence's window takes in the windowed sliding layers (``ModelSpec.num_windowed_layers``;
    0 without): ``window + block_size`` tokens of ``kv_layer`` bytes in each (vLLM V1 keeps the block
    the window starts in), over the KV a block of tokens takes in the growing layers (``kv_token_layer``,
    per mean layer), rounded up. At most the context's worth: a request never holds more."""
    m = replica.model_spec
    if not m.num_windowed_layers:
        return 0
    tokens = min(m.sliding_window + block_size, replica.effective_max_model_len)
    held = m.num_windowed_layers * tokens * kv_layer / m.num_layers
    return -(-int(round(held / kv_token_layer)) // block_size)


class BlockManager:
    """Counts KV blocks of fixed size. New prompts respect a watermark of free blocks
    (as vLLM does, so a burst of admissions cannot leave running decodes without room);
    growing a running request may use every free block."""

    __slots__ = ("num_blocks", "block_size", "num_free_blocks", "watermark_blocks", "state_blocks")
    # Seconds of host-to-GPU KV loading the admissions since the last iteration priced owe
    # (a prefix cache's CPU tier, simulator.engine.prefix_cache); always 0 here.
    pending_load_s = 0.0

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, state_blocks: int = 0) -> None:
        if num_blocks <= 0:
            raise ConfigError("kv_cache", f"no KV blocks available ({num_blocks})", "raise --tp/--pp, store the KV "
                              "cache in FP8 (--kv-cache-dtype fp8) or raise --gpu-memory-utilization")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.num_free_blocks = num_blocks
        self.watermark_blocks = int(watermark * num_blocks)
        # Blocks a running sequence's recurrent state holds (hybrid models; 0: none), taken at admission.
        self.state_blocks = state_blocks

    @property
    def num_usable_blocks(self) -> int:
        """Blocks an idle cache can give one new request's tokens (all but the watermark and its state)."""
        return self.num_blocks - self.watermark_blocks - self.state_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def admission_blocks(self, num_tokens: int, req: Request | None = None) -> int:
        """Free blocks admitting a new request holding ``num_tokens`` tokens would take: its tokens' and its
        state's (``req``, the request itself, matters only to a prefix cache: hits others hold take none)."""
        return self.blocks_for(num_tokens) + self.state_blocks

    def can_admit(self, num_tokens: int, req: Request | None = None) -> bool:
        """Whether a new request holding ``num_tokens`` tokens fits above the watermark (see :meth:`admission_blocks`)."""
        return self.num_free_blocks - self.admission_blocks(num_tokens, req) >= self.watermark_blocks

    def cached_prefix_tokens(self, req: Request) -> int:
        """Tokens of ``req``'s prompt a lookup now would find cached: none without a prefix cache."""
        return 0

    def reserve(self, req: Request, num_tokens: int) -> None:
        """Grow ``req``'s allocation to hold ``num_tokens`` (caller checked it fits)."""
        need = -(-num_tokens // self.block_size) - req.num_blocks
        if need > 0:
            assert need <= self.num_free_blocks, "KV block over-allocation"
            self.num_free_blocks -= need
            req.num_blocks += need

    def admit(self, req: Request, num_tokens: int) -> None:
        """Allocate a request leaving ``waiting`` (a prefix cache also finds its cached prefix)."""
        self.reserve(req, num_tokens)
        self.take_state(req)

    def take_state(self, req: Request) -> None:
        """Give ``req`` its recurrent state's blocks unless it holds them (caller checked they fit)."""
        if self.state_blocks and not req.num_state_blocks:
            assert self.state_blocks <= self.num_free_blocks, "KV block over-allocation"
            self.num_free_blocks -= self.state_blocks
            req.num_state_blocks = self.state_blocks

    def try_grow(self, req: Request, num_tokens: int) -> bool:
        """Grow ``req`` to hold ``num_tokens`` if free blocks allow; no watermark."""
        need = -(-num_tokens // self.block_size) - req.num_blocks
        if need <= 0:
            return True
        if need > self.num_free_blocks:
            return False
        self.num_free_blocks -= need
        req.num_blocks += need
        return True

    def free(self, req: Request) -> None:
        self.num_free_blocks += req.num_blocks + req.num_state_blocks
        req.num_blocks = 0
        req.num_state_blocks = 0

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks


def build_kv_cache(replica: ReplicaConfig, sched: SchedulerConfig) -> tuple[BlockManager, MemoryPlan]:
    """One replica's KV cache as its scheduler sees it: the memory plan's blocks, with the
    scheduler's watermark. The one place a replica's cache is sized (runs, pools, planners)."""
    max_model_len = replica.effective_max_model_len
    plan = plan_memory(replica, sched.token_budget(max_model_len, replica.gpu_spec, replica.attention_dp),
                       sched.reserved_logits_seqs(replica.gpu_spec), sched)
    return BlockManager(plan.num_blocks, plan.block_size, sched.watermark, plan.num_state_blocks), plan


def max_model_len_shortfall(blocks: BlockManager, max_model_len: int) -> str | None:
    """Why an idle cache cannot take one request of ``max_model_len`` tokens (None if it can):
    new prompts may use every block but the watermark."""
    held = blocks.num_usable_blocks * blocks.block_size
    if held >= max_model_len:
        return None
    whole = (blocks.num_blocks - blocks.state_blocks) * blocks.block_size
    if whole >= max_model_len:  # the watermark is what leaves too little: name it
        return (f"the KV cache holds {whole} tokens per replica, but the scheduler's watermark keeps "
                f"{blocks.watermark_blocks} of its {blocks.num_blocks} blocks free, leaving {held}, fewer than "
                f"max_model_len {max_model_len} (lower the config's scheduler.watermark)")
    if held < whole:  # (the figure a run reports is the whole cache: say both)
        return (f"the KV cache holds {whole} tokens per replica ({held} past the scheduler's watermark), fewer than "
                f"max_model_len {max_model_len}")
    return f"the KV cache holds {held} tokens per replica, fewer than max_model_len {max_model_len}"
