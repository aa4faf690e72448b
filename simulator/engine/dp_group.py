"""Attention data parallelism: the DP ranks of one engine replica step together.

With DP attention (SGLang's ``--enable-dp-attention``, vLLM's ``--data-parallel-size`` with
``--enable-expert-parallel``, TensorRT-LLM's ``enable_attention_dp``) each of an engine's
``attention_dp`` ranks keeps its own batch and KV cache and runs attention alone, but the MoE
layers between the attention layers are one collective over all ranks (the all-to-all dispatch
and combine, or an all-gather and reduce-scatter): no rank can start its next forward pass
before every rank has finished this one. The engines keep the ranks in step: while any rank has
work, every rank runs a forward pass each step, an idle one a dummy batch (vLLM also pads every
rank's batch to the largest rank's token count for its CUDA graphs and MoE dispatch).

:class:`DPGroup` is that barrier as a mechanism. One SimPy process steps the group's ranks
(plain :class:`~simulator.engine.replica.Replica` objects built without a process of their own):
each step, every rank's policy picks its batch as usual, each rank prices its batch (its cost
model already prices the MoE layers for the group's tokens: the rank's tokens x ``attention_dp``,
:mod:`simulator.costmodel.moe`), and the step lasts as long as the slowest rank's. A rank that
prefills a long prompt thus holds up every other rank's decodes, which independent ranks would
not show. Each rank records its own iteration (its batch, the group's duration); an idle rank
records nothing and is not counted busy (its dummy pass has no tokens).

Event skipping wraps this loop from the fast layer (:mod:`simulator.fast.dp_group`: the group
skips where every busy rank is steady); partitioned runs are per replica, never for DP ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import simpy

if TYPE_CHECKING:
    from simulator.engine.replica import Replica
    from simulator.engine.schedulers import Batch


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
        self.process = env.process(self.run())

    def _sleep(self) -> simpy.Event:
        # One event for the group: whichever rank is woken (Replica.submit, wake) triggers it.
        wakeup = self.env.event()
        for rank in self.ranks:
            rank._wakeup = wakeup
        return wakeup

    def run(self):  # noqa: ANN201 - SimPy generator
        """Every rank takes its batch; the step lasts the slowest rank's time; all apply at its end."""
        env, ranks = self.env, self.ranks
        while True:
            batches: list[Batch | None] = [rank._take_batch() for rank in ranks]
            if all(batch is None for batch in batches):
                yield self._sleep()
                continue
            started_at = env.now
            duration = max(rank._price(batch) for rank, batch in zip(ranks, batches, strict=True) if batch is not None)
            yield env.timeout(duration)
            for rank, batch in zip(ranks, batches, strict=True):
                if batch is not None:
                    rank._apply(batch, started_at, duration)


def group_ranks(env: simpy.Environment, ranks: list[Replica], attention_dp: int,
                group_class: type[DPGroup] = DPGroup) -> list[DPGroup]:
    """Consecutive runs of ``attention_dp`` ranks (one engine replica's) as lockstep groups
    (``group_class``: :class:`DPGroup`, or the fast layer's skipping group over skipping ranks)."""
    if len(ranks) % attention_dp:  # invariant: ranks come whole replicas at a time
        raise RuntimeError(f"{len(ranks)} ranks are not whole replicas of {attention_dp} DP ranks")
    return [group_class(env, ranks[i:i + attention_dp]) for i in range(0, len(ranks), attention_dp)]
