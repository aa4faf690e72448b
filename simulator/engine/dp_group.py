"""Attention data parallelism: the DP ranks of one engine replica step together.

With DP attention (SGLang's ``--enable-dp-attention``, vLLM's ``--data-parallel-size`` with
``--enable-expert-parallel``, TensorRT-LLM's ``enable_attention_dp``) each of an engine's
``attention_dp`` ranks keeps its own batch and KV cache and runs attention alone, but the MoE
layers between the attention layers are one collective over all ranks (the all-to-all dispatch
and combine, or an all-gather and reduce-scatter): no rank can start its next forward pass
before every rank has finished this one. The engines keep the ranks in step: while any rank has
work, every rank runs a forward pass each step, an idle one a dummy batch (and pads the ranks' batches to
the largest rank's token count for their CUDA graphs and MoE dispatch: by the rules below).

:class:`DPGroup` is that barrier as a mechanism. One SimPy process steps the group's ranks
(plain :class:`~simulator.engine.replica.Replica` objects built without a process of their own):
each step, every rank's policy picks its batch as usual, each rank prices its batch (its cost
model already prices the MoE layers for the group's tokens: the rank's tokens x ``attention_dp``,
:mod:`simulator.costmodel.moe`), and the step lasts as long as the slowest rank's. A rank that
prefills a long prompt thus holds up every other rank's decodes, which independent ranks would
not show. Each rank records its own iteration (its batch, the group's duration); an idle rank
records nothing and is not counted busy (its dummy pass has no tokens).

**What the MoE layers carry** (``--dp-padding``, the engine's rule by default:
:meth:`~simulator.config.run_config.SchedulerConfig.dp_padding_rule`). Priced as above, every rank is
padded to the busiest rank's tokens (``max``). SGLang and TensorRT-LLM route the ranks' own tokens in a step
that carries a prompt (``sum``: SGLang gathers with ``SUM_LEN`` whenever a rank extends; TensorRT-LLM's MoE
skips the padded rows of its context steps): there the group sets each rank's
:attr:`~simulator.costmodel.base.BatchShape.moe_group_tokens` to the sum of the ranks' tokens for the pricing,
so one rank's long prompt beside idle ranks costs one prompt's experts, not ``attention_dp`` of them. Their
decode-only steps stay padded to the largest rank (CUDA graphs, ``MAX_LEN``). vLLM V1 (``graphs``, its
``coordinate_batch_across_dp`` as of early 2026; its earlier releases padded every step while CUDA graphs were on,
``max``) pads to the largest rank only where every rank's step runs in a captured CUDA graph: its ranks agree
each step on the least of their graph modes, and a rank whose step has more tokens than its largest captured
graph runs eagerly, so the step routes the ranks' own tokens (:attr:`DPGroup.graph_tokens`; a prompt chunk of a
few hundred tokens beside decodes stays padded; an engine without CUDA graphs never pads). The padded count is
the largest rank's tokens, not the graph size they round up to (a few percent at most).

TensorRT-LLM can also *balance* the ranks (``attention_dp_config.enable_balance``, which
InferenceX's TensorRT-LLM recipes turn on with DP attention): since a rank's prompt stalls every
rank's decodes, it holds new prompts until every rank has one, for at most ``timeout_iters``
iterations (and, with ``batching_wait_iters``, a few more once they all have). :class:`PromptBalance`
is that rule, from the queues as each step begins; a held step runs every rank's decodes only.

Event skipping wraps this loop from the fast layer (:mod:`simulator.fast.dp_group`: the group
skips where every busy rank is steady); partitioned runs are per replica, never for DP ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

if TYPE_CHECKING:
    from simulator.engine.replica import Replica
    from simulator.engine.schedulers import Batch, Scheduler


class DPGroup:
    """The ranks of one engine replica, stepped in lockstep by one SimPy process.

    Contract: every rank's iteration starts when the group's does and lasts the longest of the
    ranks' priced durations; a rank's submit (or a disaggregated pool's ``wake``) wakes the group.
    The ranks keep their own schedulers, KV caches, ids and records.
    """

    def __init__(self, env: simpy.Environment, ranks: list[Replica]) -> None:
        if any(rank.process is not None for rank in ranks):  # invariant: one loop steps each rank
            raise RuntimeError("a DP group's ranks must be built without their own process (start=False)")
        self.env = env
        self.ranks = ranks
        self.balance = PromptBalance.of(ranks[0].scheduler.config)
        # Whether some steps' MoE layers carry the ranks' own tokens, not the largest rank's padded (module
        # docstring): "sum" a step that carries a prompt, "graphs" a step some rank runs outside a CUDA graph.
        rule, lead = ranks[0].scheduler.config.dp_padding_rule(), ranks[0]
        # Under "graphs", the most tokens a rank's step may carry and still run in a CUDA graph, so be padded (0: an
        # engine without CUDA graphs, whose steps are never padded); None under the other rules.
        self.graph_tokens: int | None = None
        if rule == "graphs":
            engine = getattr(lead.cost_model, "engine", None)
            self.graph_tokens = graph_tokens(lead.scheduler) if getattr(engine, "cuda_graphs", True) else 0
        # (a budget within the largest graph pads every step, as "max" does: nothing to route)
        self.routes_own_tokens = lead.cost_model.model.is_moe and (
            rule == "sum" or (self.graph_tokens is not None and lead.scheduler.token_budget > self.graph_tokens))
        self.process = env.process(self.run())

    def _sleep(self) -> simpy.Event:
        # One event for the group: whichever rank is woken (Replica.submit, wake) triggers it.
        wakeup = self.env.event()
        for rank in self.ranks:
            rank._wakeup = wakeup
        return wakeup

    def run(self):  # noqa: ANN201 - SimPy generator
        """Every rank takes its batch; the step lasts the slowest rank's time; all apply at its end."""
        while True:
            batches = self._take_batches()
            if all(batch is None for batch in batches):
                yield self._sleep()
                continue
            yield from self._step(batches)

    def _step(self, batches: list[Batch | None]):  # noqa: ANN202 - SimPy generator, returns the step's duration
        """One group step over ``batches`` (None: an idle rank): the slowest rank's time, then every rank applies."""
        started_at = self.env.now
        ranks = self.ranks
        group = self._own_tokens(batches, self.graph_tokens) if self.routes_own_tokens else 0
        if group:
            for batch in batches:
                if batch is not None:
                    batch.shape.moe_group_tokens = group
        duration = max(rank._price(batch) for rank, batch in zip(ranks, batches, strict=True) if batch is not None)
        if group:  # for this pricing only: a shape priced again (a skipping rank's) is priced as a rank alone
            for batch in batches:
                if batch is not None:
                    batch.shape.moe_group_tokens = 0
        yield self.env.timeout(duration)
        for rank, batch in zip(ranks, batches, strict=True):
            if batch is not None:
                rank._apply(batch, started_at, duration)
        return duration


    @staticmethod
    def _own_tokens(batches: list[Batch | None], graph_tokens: int | None) -> int:
        """The tokens the MoE layers route (every rank's own) in a step that is not padded, or 0 for a padded
        one (priced by default). ``graph_tokens`` None (``sum``): padded unless some rank's step carries a prompt;
        else (``graphs``): padded unless some rank's step has more than ``graph_tokens`` tokens."""
        shapes = [batch.shape for batch in batches if batch is not None]
        if graph_tokens is None:
            if not any(shape.num_prompt_tokens for shape in shapes):
                return 0
        elif all(shape.num_tokens <= graph_tokens for shape in shapes):
            return 0
        return sum(shape.num_tokens for shape in shapes)

    def _take_batches(self) -> list[Batch | None]:
        """Every rank's batch for the step that begins now; its decodes only where the balance holds prompts."""
        if self.balance is None or not self.balance.holds(self.ranks):
            return [rank._take_batch() for rank in self.ranks]
        return [rank._take_decodes() for rank in self.ranks]


class PromptBalance:
    """TensorRT-LLM's attention-DP balance (``attention_dp_config``: ``enable_balance``,
    ``timeout_iters``, ``batching_wait_iters``), one per group: the ranks exchange what they would
    schedule (requests in prompt and in decode phase) and all take the same decision.

    Contract: :meth:`holds` is asked once at the start of every step, from the queues as they stand;
    True means no rank starts a new prompt this step (a chunked prompt under way goes on: the engine
    would hold it too, but without chunked context, its default, it has none). Every rank must have a prompt to
    schedule (and a free batch slot) for prompts to go ahead; else they wait, one step at a time, up to
    ``timeout_iters`` steps, unless some rank has no decodes (a rank without any request counts as
    decoding: the engine pads it with a dummy). The wait counter runs on whether or not prompts wait
    (as the engine's does), so a lone prompt waits out what is left of the current count.
    """

    def __init__(self, timeout_iters: int, batching_wait_iters: int) -> None:
        self.timeout_iters = timeout_iters
        self.batching_wait_iters = batching_wait_iters
        self.num_waited = 0  # the engine's adp_ctx_waiting_iters_count
        self.num_batching_waited = 0  # its adp_ctx_batching_wait_iters_count

    @classmethod
    def of(cls, config) -> PromptBalance | None:  # noqa: ANN001 - a SchedulerConfig
        timeout = config.dp_balance_timeout_iters
        return cls(timeout, config.dp_balance_batching_wait_iters) if timeout else None

    def holds(self, ranks: list[Replica]) -> bool:
        if not any(rank.scheduler.running or rank.scheduler.waiting for rank in ranks):
            return False  # no step follows (the group sleeps), and the engine counts none
        all_prompt = all_decode = all_free = True
        for rank in ranks:
            has_prompt, has_decode, free = _view(rank.scheduler)
            all_prompt, all_decode, all_free = all_prompt and has_prompt, all_decode and has_decode, all_free and free
        if all_free and all_prompt:
            self.num_waited = 0
            if all_decode:
                if self.num_batching_waited < self.batching_wait_iters:
                    self.num_batching_waited += 1
                    return True
                self.num_batching_waited = 0
            return False
        self.num_waited += 1
        if self.num_waited >= self.timeout_iters or not all_decode:
            self.num_waited = 0
            return False
        return True

    def skip(self, num_steps: int) -> None:
        """``num_steps`` steps in which no rank had a prompt and every rank decoded (a skipped
        stretch): the wait counter runs on, wrapping at ``timeout_iters`` as step by step."""
        self.num_waited = (self.num_waited + num_steps) % self.timeout_iters


def has_prompt(scheduler: Scheduler) -> bool:
    """Whether a rank would schedule a prompt now, as :class:`PromptBalance` sees it."""
    return _view(scheduler)[0]


def _view(scheduler: Scheduler) -> tuple[bool, bool, bool]:
    """What a rank would schedule now, as the engine's ranks exchange it: whether a prompt (one under
    way, or the head of ``waiting`` where a batch slot and its KV blocks are free), whether a decode
    (or no request at all: the engine's dummy), and whether its batch has a free slot."""
    running, waiting = scheduler.running, scheduler.waiting
    if not running and not waiting:
        return False, True, True
    # Lockstep cohort members decode (their other counters may lag; num_generated > 0 holds).
    has_decode = any(req.num_generated for req in running)
    free = len(running) < scheduler.max_num_seqs
    has_prompt = any(not req.num_generated for req in running)
    if not has_prompt and waiting and free:
        head = waiting[0]
        has_prompt = scheduler.blocks.can_admit(scheduler.reserve_tokens(head), head)
    return has_prompt, has_decode, free


# vLLM V1's largest captured CUDA graph by default (CompilationConfig.max_cudagraph_capture_size, unset):
# min(2 x max_num_seqs x decode query length, 512), and never above the step's token budget.
MAX_GRAPH_TOKENS = 512


def graph_tokens(scheduler: Scheduler) -> int:
    """The most tokens a step of ``scheduler``'s rank runs in a captured CUDA graph under vLLM V1's defaults:
    ``min(2 x max_num_seqs x (1 + drafts), 512, token budget)`` (a speculating rank's decode query is its drafts
    and one token)."""
    spec = scheduler.speculation
    query = 1 + (spec.config.k if spec is not None else 0)
    return max(1, min(2 * scheduler.max_num_seqs * query, MAX_GRAPH_TOKENS, scheduler.token_budget))


def group_ranks(env: simpy.Environment, ranks: list[Replica], attention_dp: int,
                group_class: type[DPGroup] = DPGroup) -> list[DPGroup]:
    """Consecutive runs of ``attention_dp`` ranks (one engine replica's) as lockstep groups
    (``group_class``: :class:`DPGroup`, or the fast layer's skipping group over skipping ranks)."""
    if len(ranks) % attention_dp:  # invariant: ranks come whole replicas at a time
        raise RuntimeError(f"{len(ranks)} ranks are not whole replicas of {attention_dp} DP ranks")
    return [group_class(env, ranks[i:i + attention_dp]) for i in range(0, len(ranks), attention_dp)]
