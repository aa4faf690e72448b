"""A replica that skips events: the loop of :class:`~simulator.engine.replica.Replica`,
advancing steady stretches of iterations in one step where nothing can interrupt them.

The plain loop yields one SimPy timeout an iteration. This one, given ``horizon()`` (the
time of the next event that can touch the replica: an arrival, a watch's wake-up), asks
:mod:`simulator.fast.skipping` for a *stretch* of iterations that provably run alone until
then (all-decode batches, or a prompt's chunks beside steady decodes), prices it in one call
and applies it at once. Results are the plain loop's, bit for bit (tests compare whole
tables with skipping on and off).

This is the one place where SimPy's clock is moved by hand (see :meth:`SkippingReplica.run`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from simulator.costmodel.base import CostModel
from simulator.engine.replica import Replica
from simulator.engine.schedulers import Scheduler
from simulator.fast import skipping
from simulator.fast.dp_group import SkippingDPGroup
from simulator.fast.steady import rules_for

if TYPE_CHECKING:
    from simulator.engine.records import Recorder


class SkippingReplica(Replica):
    """:class:`Replica` with event skipping. Contract: the same iterations, tokens and
    timestamps as the plain loop; requests' counters may lag inside a stretch in flight
    until :meth:`settle` (or the stretch's end) applies it."""

    # What steps such replicas built as attention-DP ranks (``start=False``): their group, skipping too.
    group_class = SkippingDPGroup

    def __init__(self, env: simpy.Environment, replica_id: int, scheduler: Scheduler,
                 cost_model: CostModel, recorder: Recorder, horizon: Callable[[], float],
                 horizon_is_arrival: bool = True, start: bool = True) -> None:
        # ``horizon()``: the time of the next event that can touch this replica.
        self.horizon = horizon
        # Whether the event at the horizon is an arrival (it cannot change an iteration that
        # already started); False while a watch process, which may read anything, runs.
        self.horizon_is_arrival = horizon_is_arrival
        self.resumed_at = -1.0  # when an iteration's timeout last woke the loop (ties: fast.partitioned)
        # The stretch whose end the loop waits for (applied then), for settle(); else None.
        self.stretch_in_flight: skipping.Stretch | None = None
        # When the policy's batches stay steady (None: a policy without rules never skips).
        self.steady = rules_for(scheduler)
        # ``start=False``: an attention-DP rank, stepped with its group (simulator.fast.dp_group).
        super().__init__(env, replica_id, scheduler, cost_model, recorder, start)

    def settle(self, at: float) -> None:
        """Apply now the iterations of the stretch in flight that end before ``at`` (the time
        now), so that the state is the step-by-step loop's at this instant: an observer that
        calls this first (a capacity watch, see ``engine.cluster.run_to_end``) lets stretches straddle
        its wake-ups. The iteration in progress stays in flight (applied at its end, as it
        would be; :meth:`stop` schedules it where the run ends now)."""
        stretch = self.stretch_in_flight
        if stretch is None:
            return
        num = bisect_left(stretch.ends, at, 1) - 1  # iterations ending before at (one ending at it comes after)
        if num < 1:
            return
        head, self.stretch_in_flight = skipping.split(stretch, num, self.scheduler.blocks.num_used_blocks)
        if skipping.apply(self, head):  # invariant: only a stretch's last iteration finishes requests
            raise RuntimeError(f"replica {self.replica_id}: a stretch finished requests before its last iteration")

    def stop(self, at: float) -> None:
        """The run ends at ``at``: :meth:`settle`, then schedule the stretch's iteration in progress
        as the step-by-step loop had (its requests in flight, the KV blocks it grows taken), so
        that every request's counters and blocks are that loop's at the stop."""
        self.settle(at)
        stretch = self.stretch_in_flight
        if stretch is None:
            return
        scheduler = self.scheduler
        blocks = scheduler.blocks
        if self.steady.skipped is not None:  # type: ignore[union-attr]  # (a stretch's replica has rules)
            self.steady.skipped(scheduler, 1)  # type: ignore[union-attr]  # its schedule() for that iteration ran
        cohort = getattr(scheduler, "cohort", None)
        if cohort is not None and cohort.active:
            if cohort.members:
                cohort.begin_step(blocks)  # its members' blocks; dissolving writes them in flight
        else:  # a decode stretch over plain requests: each one decodes in it
            for req in scheduler.running:
                if req.num_blocks * blocks.block_size <= req.num_computed:
                    blocks.try_grow(req, req.num_computed + 1)  # fits: the stretch counted its allocations
                req.in_flight = True
        if stretch.prefill is not None:  # its chunk is in the iteration too (its blocks held since admission)
            stretch.prefill.in_flight = True

    def run(self):  # noqa: ANN201 - SimPy generator
        env, scheduler, cost, recorder, horizon = self.env, self.scheduler, self.cost_model, self.recorder, self.horizon
        skip = False  # whether the last iteration left a state worth trying to skip from
        chunking = False  # whether it left a prompt partly prefilled (a chunked-prefill stretch may follow)
        chunk_stretches = cost.fast_chunk_stretches  # else not worth planning (see CostModel)
        duration = 0.0
        decode_s = 0.0  # the last skipped iteration's time: sizes the next stretch's pricing call
        # Batch waiting (engine.batch_wait) counts the steps in which a prompt could start: with it on,
        # skip only decode stretches that nobody waits beside (no chunk stretches), where it counts none.
        waits = self.batch_wait is not None
        # An iteration that ends strictly before every other pending
        # event is applied without a SimPy event: nothing else can run in between (a tie
        # yields: SimPy would run the older event first). The clock is then moved by hand:
        # valid only when nothing is pending before the new time (``at < env.peek()``: SimPy
        # would have done exactly this, as the next event popped would have been ours). SimPy
        # has no public call for it; ``_now`` is the attribute its own ``step`` assigns.
        while True:
            # Try to skip only where two more iterations fit before the horizon (a cheap
            # guess from the last one; plan() decides exactly).
            if ((skip or chunking) and not (waits and (chunking or scheduler.waiting))
                    and env.now + 2 * duration < (horizon_at := horizon())):
                if skip:
                    stretch = skipping.plan(self, horizon_at, decode_s if 0 < decode_s < duration else duration,
                                               self.horizon_is_arrival)
                else:
                    stretch = skipping.plan_chunks(self, horizon_at, duration, self.horizon_is_arrival)
                if stretch is not None:
                    if stretch.ends[-1] < env.peek():
                        env._now = stretch.ends[-1]  # noqa: SLF001 - the clock moved by hand (see above)
                    else:
                        self.stretch_in_flight = stretch
                        yield env.timeout(stretch.ends[-1] - env.now)
                        self.resumed_at = env.now
                        stretch, self.stretch_in_flight = self.stretch_in_flight, None  # less what settle() applied
                    duration = stretch.durations[-1]
                    # After a finish the batch may be steady again; else the stretch stopped at an
                    # arrival, at the free blocks' limit or before a prompt's last chunk: run the
                    # next iteration normally.
                    finished = skipping.apply(self, stretch)
                    if stretch.prefill is None:
                        decode_s, skip = duration, finished
                    else:
                        chunking = finished
                    continue
            batch = self._take_batch()
            if batch is None:
                yield self._sleep()
                continue
            started_at = env.now
            shape = batch.shape
            duration = cost.iteration_time(shape)
            if batch.admitted and scheduler.blocks.pending_load_s:  # KV loaded from a CPU tier first
                duration += scheduler.blocks.take_pending_load_s()
            end_at = started_at + duration  # the float SimPy's timeout would land on
            if end_at < env.peek():
                env._now = end_at  # noqa: SLF001 - the clock moved by hand (see above)
            else:
                yield env.timeout(duration)
                self.resumed_at = env.now
            self.num_busy_s += duration
            finished = scheduler.complete(batch, end_at)  # == env.now either way
            recorder.on_iteration(self.replica_id, started_at, duration, batch, scheduler.blocks.num_used_blocks)
            if finished:
                recorder.on_finish(finished)
            # No partial prefill left (every prefill chunk finished its prompt) and nobody waits
            # behind a preemption: the next batch may be all decodes; with one left, it may
            # continue beside steady decodes.
            partial = shape.num_prefills != shape.num_logits - shape.num_decodes
            skip = not partial and not batch.preempted
            chunking = partial and chunk_stretches and not batch.preempted
