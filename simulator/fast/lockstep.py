"""Lockstep decodes wrapped around a policy: the same batches, fewer Python visits.

A policy builds its batch from the running queue every iteration, and in a busy replica
most entries are decodes that did the same thing the iteration before. :class:`LockstepMixin`
goes over a policy class (:func:`lockstep_class`) and lets a :class:`~simulator.fast.cohort.DecodeCohort`
carry such decodes: the policy's ``schedule()`` is unchanged; the mixin overrides the base's
mechanism methods it calls (``_add_decodes``, ``_admit``, ``_preempt``, ``carried_step``,
``retire``, ``remaining_outputs``, ``new_decode_blocks``) so that they visit only requests outside the cohort. Where the step-by-step batch
would differ (a decode cut by the token budget, a preemption) the cohort is dissolved first
and the base methods run as in the plain loop. Tests compare whole runs with lockstep on and off.

Which policies may be wrapped is stated once, in :data:`simulator.fast.steady.RULES`: a policy
that adds its running decodes only through ``Scheduler._add_decodes`` and reads running
requests' counters nowhere else but through ``Scheduler.remaining_outputs``, ``Scheduler.new_decode_blocks``
or after ``settle()`` (vllm, orca, fastertransformer, sarathi, sglang, trtllm). A disaggregated
decode pool's class (:class:`~simulator.engine.disagg.DecodeMixin` over such a policy) is wrapped
too, with :class:`LockstepDecodePool`: a handed-off request joins ``running`` without admission,
so it joins the cohort's loose requests there. Any other class (a new policy, a speculating
replica, a prefill pool, which reads its running requests' counters in ``complete``) runs plain.

Contract while a cohort is active: members' counters are stale (see the cohort module);
:meth:`LockstepMixin.settle` writes them before anything outside the policy reads running
requests. Only for a replica without pipelining (one batch in flight).
"""

from __future__ import annotations

from functools import cache

from simulator.engine.disagg import DecodeMixin
from simulator.engine.schedulers.base import Batch, Scheduler, insert_fcfs, outputs_left, plain_decode_blocks
from simulator.fast.cohort import DecodeCohort
from simulator.fast.steady import RULES
from simulator.workload.request import Request, Status


class LockstepMixin:
    """Scheduler mechanism methods with a decode cohort (see the module docstring). Mixed in
    over a policy by :func:`lockstep_class`; ``cohort`` is created with the scheduler."""

    cohort: DecodeCohort

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - the policy's own signature
        super().__init__(*args, **kwargs)
        self.cohort = DecodeCohort(self.blocks.block_size)  # type: ignore[attr-defined]

    def settle(self) -> None:
        if self.cohort.active:
            self.cohort.dissolve()

    def _admit(self: Scheduler, batch: Batch) -> Request:
        req = Scheduler._admit(self, batch)
        cohort = self.cohort  # type: ignore[attr-defined]
        if cohort.active:
            insert_fcfs(cohort.loose, req)
        return req

    def _preempt(self: Scheduler, req: Request, batch: Batch) -> None:
        assert not self.cohort.active  # type: ignore[attr-defined]  # invariant: preemption runs step by step
        Scheduler._preempt(self, req, batch)

    def _add_decodes(self: Scheduler, batch: Batch, budget: float, partial: list[Request] | None) -> int:
        cohort = self.cohort  # type: ignore[attr-defined]
        if not cohort.active:
            cohort.activate(self.running)
        used = _lockstep_decodes(self, cohort, batch, budget, partial)
        if used is not None:
            return used
        cohort.dissolve()  # step by step from here: this iteration preempts or cuts decodes
        return Scheduler._add_decodes(self, batch, budget, partial)

    def remaining_outputs(self: Scheduler, clip: int) -> int:
        cohort = self.cohort  # type: ignore[attr-defined]
        if not cohort.active:
            return Scheduler.remaining_outputs(self, clip)
        # The members' counters are stale: their finish steps say what is left; the loose ones' are true.
        return cohort.remaining_outputs(clip) + outputs_left(cohort.loose, clip)

    def new_decode_blocks(self: Scheduler) -> int:
        cohort = self.cohort  # type: ignore[attr-defined]
        if not cohort.active:
            return Scheduler.new_decode_blocks(self)
        # The members' blocks due before the coming step (none while a step is pending: they are in flight);
        # the loose ones' counters are true.
        return (0 if cohort.pending else cohort.num_due()) + plain_decode_blocks(cohort.loose, self.blocks.block_size)

    def carried_step(self: Scheduler, now: float) -> list[Request]:
        # complete() calls it first: the cohort's finishers come before the entries' (the recorder's order).
        return self.cohort.step(now, self.gaps)  # type: ignore[attr-defined]

    def retire(self: Scheduler, finished: list[Request], now: float) -> None:
        super().retire(finished, now)  # type: ignore[misc]  # the policy's own, if it keeps state of its finishes
        cohort = self.cohort  # type: ignore[attr-defined]
        if cohort.active:
            cohort.loose = [r for r in cohort.loose if r.status is Status.RUNNING]


def _lockstep_decodes(scheduler: Scheduler, cohort: DecodeCohort, batch: Batch, budget: float,
                      partial: list[Request] | None) -> int | None:
    """``Scheduler._add_decodes`` with the cohort: the same batch (up to entry order), visiting
    only loose requests; loose decodes join the cohort. None (nothing changed) where the
    step-by-step loop would do something else: cut decodes at the budget or preempt."""
    block_size = scheduler.blocks.block_size
    joiners: list[Request] = []
    tails: list[Request] = []  # a prompt's 1-token tail: a prefill entry
    rest: list[Request] = []  # stays loose
    partials: list[Request] = []
    need = 0
    for req in cohort.loose:
        computed = req.num_computed
        if req.in_flight:
            return None
        if req.num_prompt_tokens + req.num_generated - computed > 1:
            if partial is None:
                return None
            partials.append(req)
            rest.append(req)
            continue
        if req.num_blocks * block_size <= computed:
            need += 1
        if req.num_generated:
            joiners.append(req)
        else:
            tails.append(req)
            rest.append(req)
    # The step-by-step loop adds every decode and tail (in running order) unless the budget
    # cuts them, and grows blocks one at a time: all succeed iff that many are free.
    used = len(cohort.members) + len(joiners) + len(tails)
    if used > budget or need + cohort.num_due() > scheduler.blocks.num_free_blocks:
        return None
    if partial is not None:
        partial.extend(partials)
    for req in joiners:
        cohort.join(req)
    cohort.loose = rest
    if cohort.members:
        batch.shape.add_decodes(*cohort.begin_step(scheduler.blocks))
        batch.num_lockstep = len(cohort.members)
    for req in tails:
        if req.num_blocks * block_size <= req.num_computed:
            scheduler.blocks.try_grow(req, req.num_computed + 1)
        batch.add(req, 1)
    return used


class LockstepDecodePool:
    """A decode pool's ``add_request`` with a cohort: a handed-off request that went straight
    into ``running`` (``DecodeMixin``), or took a seat later, is loose until the policy's next
    ``_add_decodes``."""

    def add_request(self, req: Request) -> None:
        num_running = len(self.running)  # type: ignore[attr-defined]
        super().add_request(req)  # type: ignore[misc]
        cohort = self.cohort  # type: ignore[attr-defined]
        if cohort.active and len(self.running) > num_running:  # type: ignore[attr-defined]
            insert_fcfs(cohort.loose, req)

    def _seat_later(self, req: Request) -> None:  # a transferred request that waited for a seat
        super()._seat_later(req)  # type: ignore[misc]
        cohort = self.cohort  # type: ignore[attr-defined]
        if cohort.active:
            insert_fcfs(cohort.loose, req)


@cache
def lockstep_class(policy: type[Scheduler]) -> type[Scheduler]:
    """``policy`` with lockstep decodes, where :data:`~simulator.fast.steady.RULES` says it
    allows them (or a decode pool's class over such a policy); else ``policy`` itself (one
    class per policy, so replicas share it). Event skipping reads ``lockstep_of``: a pool's
    class is not in ``RULES``, so its replicas never skip."""
    if policy in RULES:
        return type(f"Lockstep{policy.__name__}", (LockstepMixin, policy), {"lockstep_of": policy})
    mixin, *base = policy.__bases__
    if mixin is DecodeMixin and len(base) == 1 and base[0] in RULES:
        return type(f"Lockstep{policy.__name__}", (LockstepMixin, LockstepDecodePool, policy), {"lockstep_of": policy})
    return policy
