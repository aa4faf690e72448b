"""A model replica as a SimPy process: schedule, price, wait, apply.

The loop is the only place where simulated time passes for a replica:

1. ask the scheduler (a pure policy) for a batch;
2. ask the cost model how long that batch takes;
3. ``yield env.timeout(duration)``;
4. let the scheduler apply the outcome at the new ``env.now`` (tokens, completions).

An idle replica sleeps on an event that :meth:`Replica.submit` fires, so idle periods
cost no simulation events. Tensor parallelism enters through the cost model and the
memory plan. Pipeline parallelism replaces step 2-4 with stage processes
(:mod:`simulator.engine.pipeline`); this module is the PP=1 replica and the shared base.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

import simpy

from simulator.config.run_config import RunConfig
from simulator.costmodel.base import CostModel
from simulator.engine.kvcache import MemoryPlan, build_kv_cache, max_model_len_shortfall
from simulator.engine.schedulers import SCHEDULERS, Batch, Scheduler
from simulator.fast import skipping as fastforward
from simulator.workload.request import Request, Status

if TYPE_CHECKING:
    from simulator.engine.records import Recorder

from simulator.config.errors import ConfigError


def build_scheduler(config: RunConfig, lockstep: bool = False) -> tuple[Scheduler, MemoryPlan]:
    """Scheduler and KV cache for one replica of ``config``; refuses impossible layouts.
    ``lockstep``: advance steady decodes as a cohort (:meth:`Scheduler.enable_lockstep`)."""
    replica, sched = config.replica, config.scheduler
    max_model_len = replica.effective_max_model_len
    blocks, plan = build_kv_cache(replica, sched)
    short = max_model_len_shortfall(blocks, max_model_len)
    if short is not None:
        raise ConfigError("replica.max_model_len", short, "lower --max-model-len or add GPUs (--tp/--pp)")
    scheduler = SCHEDULERS[sched.name](sched, blocks, max_model_len)
    if lockstep:
        scheduler.enable_lockstep()
    return scheduler, plan


class Replica:
    """One replica: a scheduler, its KV cache and a cost model, driven by a SimPy process.

    Contract: every submitted request is either rejected at once (``status`` REJECTED,
    ``reject_reason`` set) or eventually finishes; ``recorder`` sees every iteration.
    """

    def __init__(self, env: simpy.Environment, replica_id: int, scheduler: Scheduler,
                 cost_model: CostModel, recorder: Recorder,
                 horizon: Callable[[], float] | None = None) -> None:
        self.env = env
        # Event skipping (simulator.fast.skipping): ``horizon()`` is the time of the next event
        # that can touch this replica (an arrival, a watch); None steps one iteration at a time.
        self.horizon = horizon
        # Whether the event at the horizon is an arrival (it cannot change an iteration that
        # already started); False while a watch process, which may read anything, runs.
        self.horizon_is_arrival = True
        self.replica_id = replica_id
        self.scheduler = scheduler
        self.cost_model = cost_model
        self.recorder = recorder
        self._wakeup: simpy.Event | None = None
        self.num_busy_s = 0.0
        self.resumed_at = -1.0  # when an iteration's timeout last woke the loop (ties, engine.run_partitioned)
        # The stretch whose end the loop waits for (applied then), for settle(); else None.
        self.stretch_in_flight: fastforward.Stretch | None = None
        self.process = env.process(self.run())

    @property
    def num_outstanding(self) -> int:
        return self.scheduler.num_outstanding

    def submit(self, req: Request) -> None:
        req.replica_id = self.replica_id
        reason = self.scheduler.rejection_reason(req)
        if reason is not None:
            req.status = Status.REJECTED
            req.reject_reason = reason
            self.recorder.on_reject(req)
            return
        self.scheduler.add_request(req)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def settle(self, at: float) -> None:
        """Apply now the iterations of the stretch in flight that end before ``at`` (the time
        now), so that the state is the step-by-step loop's at this instant: an observer that
        calls this first (a capacity watch, see ``engine.run_to_end``) lets stretches straddle
        its wake-ups. The iteration in progress stays in flight (applied at its end, as it
        would be); a run stopped now leaves it unscheduled, where the loop had scheduled it
        (its blocks not yet taken: no table or figure reads that)."""
        stretch = self.stretch_in_flight
        if stretch is None:
            return
        num = bisect_left(stretch.ends, at, 1) - 1  # iterations ending before at (one ending at it comes after)
        if num < 1:
            return
        head, self.stretch_in_flight = fastforward.split(stretch, num, self.scheduler.blocks.num_used_blocks)
        if fastforward.apply(self, head):  # invariant: only a stretch's last iteration finishes requests
            raise RuntimeError(f"replica {self.replica_id}: a stretch finished requests before its last iteration")

    def _sleep(self) -> simpy.Event:
        self._wakeup = self.env.event()
        return self._wakeup

    def _take_batch(self) -> Batch | None:
        """The policy's next batch, stamped with its admissions' first-scheduled time; None
        when there is nothing to run until a request arrives or a batch completes."""
        scheduler = self.scheduler
        batch = scheduler.schedule()
        if not batch.requests and not batch.num_lockstep:  # len(batch) == 0, without the call
            if scheduler.waiting and not scheduler.running:
                raise RuntimeError("scheduler returned an empty batch with only waiting requests")  # invariant
            return None
        if batch.admitted:
            now = self.env.now
            for req in batch.admitted:
                if req.first_scheduled_at is None:
                    req.first_scheduled_at = now
        return batch

    def run(self):  # noqa: ANN201 - SimPy generator
        env, scheduler, cost, recorder, horizon = self.env, self.scheduler, self.cost_model, self.recorder, self.horizon
        skip = False  # whether the last iteration left a state worth trying to skip from
        chunking = False  # whether it left a prompt partly prefilled (a chunked-prefill stretch may follow)
        chunk_stretches = cost.fast_chunk_stretches  # else not worth planning (see CostModel)
        duration = 0.0
        decode_s = 0.0  # the last skipped iteration's time: sizes the next stretch's pricing call
        # With event skipping on, an iteration that ends strictly before every other pending
        # event is applied without a SimPy event: nothing else can run in between (a tie
        # yields: SimPy would run the older event first). The clock is then moved by hand:
        # valid only when nothing is pending before the new time (``at < env.peek()``: SimPy
        # would have done exactly this, as the next event popped would have been ours). SimPy
        # has no public call for it; ``_now`` is the attribute its own ``step`` assigns.
        inline = horizon is not None
        while True:
            # Try to skip only where two more iterations fit before the horizon (a cheap
            # guess from the last one; plan() decides exactly).
            if (skip or chunking) and horizon is not None and env.now + 2 * duration < (horizon_at := horizon()):
                if skip:
                    stretch = fastforward.plan(self, horizon_at, decode_s if 0 < decode_s < duration else duration,
                                               self.horizon_is_arrival)
                else:
                    stretch = fastforward.plan_chunks(self, horizon_at, duration, self.horizon_is_arrival)
                if stretch is not None:
                    if inline and stretch.ends[-1] < env.peek():
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
                    finished = fastforward.apply(self, stretch)
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
            end_at = started_at + duration  # the float SimPy's timeout would land on
            if inline and end_at < env.peek():
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


@cache
def with_mixin(mixin: type, base: type) -> type:
    """``base`` with ``mixin``'s methods first (one class per pair, so instances of a pool share it)."""
    return type(f"{mixin.__name__.removesuffix('Mixin')}{base.__name__}", (mixin, base), {})
