"""Event skipping for attention-DP groups: the ranks of one engine replica skip together.

A :class:`~simulator.engine.dp_group.DPGroup` steps its ranks in lockstep, each step as long as
the slowest rank's batch. When every rank with work is steady (:mod:`simulator.fast.steady`:
all decodes, or decodes beside one prompt's full chunks), the next steps are known in closed
form per rank, so the group's are too: step ``i`` lasts the longest of the ranks' step ``i``.
:class:`SkippingDPGroup` plans each busy rank's stretch (:func:`~simulator.fast.skipping.plan`
or :func:`~simulator.fast.skipping.plan_chunks`, to the same horizon), keeps as many steps as
the shortest allows (its first finish, its free blocks, its prompt's last chunk), times them by
the slowest rank, cuts them again at the horizon with those longer times, and applies each
rank's piece with the group's times, as many single group steps would have. Idle ranks are left
alone: the plain group neither prices nor records them.

Exactness is :mod:`simulator.fast.skipping`'s: times are accumulated step by step with the same
float additions SimPy makes, a rank's stretch cut to the group's length counts only the kernel
extrapolations of the steps it applies, and tests compare whole runs with skipping on and off.
"""

from __future__ import annotations

import sys
from itertools import accumulate
from typing import TYPE_CHECKING

from simulator.engine.dp_group import DPGroup, has_prompt
from simulator.fast import skipping

if TYPE_CHECKING:
    from simulator.engine.schedulers import Scheduler
    from simulator.fast.replica import SkippingReplica

# What a rank's last step allows the next to be: a decode stretch, a chunked-prefill stretch, or neither.
_DECODE, _CHUNK = 1, 2


class SkippingDPGroup(DPGroup):
    """:class:`DPGroup` over :class:`~simulator.fast.replica.SkippingReplica` ranks (built with
    ``start=False``). Contract: the plain group's iterations, tokens and timestamps, bit for bit;
    a rank's requests' counters may lag inside a stretch in flight, as a skipping replica's do."""

    ranks: list[SkippingReplica]

    def run(self):  # noqa: ANN201 - SimPy generator
        env, ranks = self.env, self.ranks
        lead = ranks[0]  # the ranks share the cluster's horizon and its straddle rule
        horizon, straddle = lead.horizon, lead.horizon_is_arrival
        # A chunked-prefill stretch's steps carry a prompt, which the group may price at the ranks' own tokens where
        # its engine routes them (DPGroup.routes_own_tokens): no rank's stretch knows the others', so none is taken.
        chunk_ok = [rank.cost_model.fast_chunk_stretches and not self.routes_own_tokens for rank in ranks]
        modes = [0] * len(ranks)  # per rank, what its last step allows (_DECODE, _CHUNK or 0)
        retry = False  # whether the last step left every busy rank steady, or a stretch ended at a finish
        duration = 0.0
        while True:
            if retry and env.now + 2 * duration < (horizon_at := horizon()):
                pieces = self._plan(modes, horizon_at, duration, straddle)
                if pieces is not None:
                    ends = pieces[0][1].ends
                    num_steps = len(ends) - 1
                    if ends[-1] < env.peek():
                        env._now = ends[-1]  # noqa: SLF001 - as SkippingReplica.run moves it (see there)
                    else:
                        for rank, piece in pieces:
                            rank.stretch_in_flight = piece
                        yield env.timeout(ends[-1] - env.now)
                        pieces = [(rank, rank.stretch_in_flight) for rank, _ in pieces]  # less what settle() applied
                        for rank, _ in pieces:
                            rank.stretch_in_flight = None
                    duration = pieces[0][1].durations[-1]
                    finished = False
                    for rank, piece in pieces:
                        finished |= skipping.apply(rank, piece)
                    if self.balance is not None:
                        self.balance.skip(num_steps)
                    # After a finish the batches may be steady again; else a rank stopped at its free
                    # blocks or before a prompt's last chunk, or the horizon came: step normally.
                    retry = finished
                    continue
            batches = self._take_batches()
            if all(batch is None for batch in batches):
                yield self._sleep()
                continue
            duration = yield from self._step(batches)
            retry = True
            for i, batch in enumerate(batches):
                if batch is None:
                    modes[i] = 0
                    continue
                shape = batch.shape
                partial = shape.num_prefills != shape.num_logits - shape.num_decodes
                modes[i] = 0 if batch.preempted else _CHUNK if partial and chunk_ok[i] else 0 if partial else _DECODE
                retry = retry and modes[i] != 0

    def _plan(self, modes: list[int], horizon_at: float, hint: float,
              straddle: bool) -> list[tuple[SkippingReplica, skipping.Stretch]] | None:
        """Each busy rank's piece of the group's stretch, timed by the group (``ends`` and
        ``durations`` shared), or None where a busy rank is not steady or fewer than two steps fit."""
        now = self.env.now
        busy = [(rank, mode) for rank, mode in zip(self.ranks, modes, strict=True)
                if rank.scheduler.num_outstanding]  # an idle rank has no batch and no record
        if not busy:
            return None
        # With the prompt balance, only stretches in which no rank has a prompt to schedule (each step
        # then only runs the balance's wait counter on: PromptBalance.skip).
        if self.balance is not None and any(mode != _DECODE or has_prompt(rank.scheduler) for rank, mode in busy):
            return None
        # Before any pricing, each decode rank's rule and its first finish (a group's stretch ends at the
        # first finish on any rank, and a busy group finishes a request every few steps): where either
        # rules the stretch out, nothing is priced.
        num: int | None = None
        for rank, mode in busy:
            if mode == _DECODE:
                if rank.steady is None or not rank.steady.decode(rank.scheduler):
                    return None
                # Under vLLM's rule a decode step above the largest CUDA graph routes the ranks' own tokens, which
                # no rank's stretch knows (its decodes are one token each: a speculating run takes the plain loop).
                if self.graph_tokens is not None and len(rank.scheduler.running) > self.graph_tokens:
                    return None
                steps = _steps_to_first_finish(rank.scheduler)
                if steps < 2:
                    return None
                num = steps if num is None else min(num, steps)
            elif mode != _CHUNK:
                return None
        planned: list[tuple[SkippingReplica, int, tuple | None, skipping.Stretch]] = []
        for rank, mode in busy:
            mark = rank.cost_model.extrapolation_mark()
            stretch = (skipping.plan if mode == _DECODE else skipping.plan_chunks)(rank, horizon_at, hint, straddle, num)
            if stretch is None:
                self._unprice(planned)  # (plan counted nothing for a stretch it did not return)
                return None
            planned.append((rank, mode, mark, stretch))
            num = stretch.num_iterations  # the shortest so far: later ranks price no more steps than that
        assert num is not None  # the last rank planned has the fewest steps (each took the limit so far)
        durations = [max(step) for step in zip(*(stretch.durations[:num] for *_, stretch in planned), strict=True)]
        ends = list(accumulate(durations, initial=now))  # the float additions SimPy makes, step by step
        num = skipping.steps_within(ends, num, horizon_at, straddle)  # the horizon again, with the group's longer steps
        while num >= 2 and now + (ends[num] - now) != ends[num]:  # SimPy lands at now + delay
            num -= 1
        if num < 2:
            self._unprice(planned)
            return None
        del ends[num + 1:], durations[num:]
        pieces = []
        for rank, mode, mark, stretch in planned:
            if stretch.num_iterations > num:
                if mark is not None:  # count only the applied steps' extrapolations: price them again
                    rank.cost_model.rollback_extrapolations(mark)
                    stretch = (skipping.plan if mode == _DECODE else skipping.plan_chunks)(
                        rank, horizon_at, hint, straddle, limit=num)
                    if stretch is None or stretch.num_iterations != num:  # its own end not hit exactly (rare): step
                        self._unprice(planned)
                        return None
                else:
                    stretch = skipping.split(stretch, num, rank.scheduler.blocks.num_used_blocks)[0]
            stretch.ends, stretch.durations = ends, durations  # shared, never changed in place (apply reads them)
            pieces.append((rank, stretch))
        return pieces

    @staticmethod
    def _unprice(planned: list) -> None:
        """Undo the kernel-extrapolation counts of stretches planned but not applied."""
        for rank, _, mark, _ in planned:
            if mark is not None:
                rank.cost_model.rollback_extrapolations(mark)


def _steps_to_first_finish(scheduler: Scheduler) -> int:
    """Steps until a running request of a steady decode batch finishes (in the last of them), as
    :func:`~simulator.fast.skipping.plan` counts them; the cohort's members from its heap."""
    cohort = getattr(scheduler, "cohort", None)
    if cohort is not None and cohort.active:
        steps = cohort.steps_to_first_finish() if cohort.members else sys.maxsize
        for req in cohort.loose:  # the members' counters are stale; the loose ones' are not
            steps = min(steps, req.num_output_tokens - req.num_generated)
        return steps
    return min(r.num_output_tokens - r.num_generated for r in scheduler.running)
