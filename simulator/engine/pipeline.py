"""Pipeline parallelism: one SimPy process per stage, micro-batches flowing through them.

A replica with ``pp = p`` splits the model's layers into ``p`` stages
(:func:`~simulator.costmodel.base.split_layers`; embedding on the first, LM head and
sampling on the last). Each stage is a SimPy process that takes micro-batches from its
inbox in arrival order and holds its GPUs for ``cost_model.stage_time(shape, s)``:

- **stage 0** also drives the scheduler: whenever it is free and fewer than ``p``
  micro-batches are in flight it calls ``schedule()``. The policies skip requests that
  are in flight (``Request.in_flight``), so a request sits in at most one micro-batch
  (DESIGN.md). An empty batch means: sleep until a micro-batch completes or a request
  arrives;
- **hop** ``s -> s+1``: after stage ``s`` computes, the activations of every token in
  the micro-batch travel over that hop's link (:mod:`simulator.config.topology`: NVLink/PCIe
  inside a node, Ethernet/InfiniBand between nodes, stages placed on nodes in order).
  Transfers are asynchronous for the sender (a separate stream) but serialised on the
  link; the receiver cannot start before the data is there;
- **the last stage** applies the iteration (``Scheduler.complete``) at the moment it
  finishes: tokens are emitted then, and the requests become schedulable again.

Nothing here assumes a bubble: a stage is idle exactly when its inbox is empty or the
next micro-batch is still on the wire, so bubbles emerge from the timing of
non-uniform micro-batches (vLLM's prefill-only vs decode-only iterations) and from
requests that are all in flight. They are measured: per-stage busy seconds
(``stage_busy_s``) and one record per stage execution (``Recorder.on_stage``); the
bubble fraction of a stage is ``1 - busy / span of the run`` (:mod:`simulator.report.metrics`).

Iteration records keep the PP=1 meaning per micro-batch: ``started_at`` is its start
on stage 0, ``duration_s`` its end-to-end time to leaving the last stage.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import simpy

from simulator.config.run_config import RunConfig
from simulator.costmodel.base import CostModel
from simulator.engine.replica import Replica
from simulator.engine.schedulers import Batch, Scheduler

if TYPE_CHECKING:
    from simulator.engine.records import Recorder

# A micro-batch in flight: (micro_batch_id, batch, started_at on stage 0).
MicroBatch = tuple[int, Batch, float]


def hop_pricer(cost_model: CostModel) -> Callable[[int, int], float]:
    """``price(num_tokens, hop)``: activation transfer time over hop ``hop``.

    Cost models that know the topology take the hop (``send_recv_time(n, hop)``, as the
    roofline does); others (e.g. a fitted send/recv curve) price every hop alike."""
    fn = cost_model.send_recv_time
    try:
        hop_aware = "hop" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without signatures
        hop_aware = False
    if hop_aware:
        return fn  # type: ignore[return-value]
    return lambda num_tokens, hop: fn(num_tokens)


class PipelinedReplica(Replica):
    """A replica whose ``pp`` stages run as SimPy processes.

    Contract (beyond :class:`~simulator.engine.replica.Replica`'s): at most ``pp`` micro-batches
    are in flight; a request is in at most one of them; each stage processes
    micro-batches in the order they were scheduled; ``stage_busy_s[s]`` is the time
    stage ``s`` spent computing. ``num_busy_s`` is the mean over stages.
    """

    def __init__(self, env: simpy.Environment, replica_id: int, scheduler: Scheduler, cost_model: CostModel,
                 recorder: Recorder, config: RunConfig) -> None:
        pp = config.replica.pp
        self.pp = pp
        self.stage_busy_s = [0.0] * pp
        self.num_in_flight = 0
        self.num_micro_batches = 0
        # Inbox of stage s (s >= 1): (ready_at, micro-batch) in scheduling order.
        self._inbox: list[deque[tuple[float, MicroBatch]]] = [deque() for _ in range(pp)]
        self._stage_wakeup: list[simpy.Event | None] = [None] * pp
        self._link_free_at = [0.0] * max(pp - 1, 0)
        self._hop_time = hop_pricer(cost_model)
        super().__init__(env, replica_id, scheduler, cost_model, recorder)  # starts run() = stage 0
        self.stage_processes = [self.process] + [env.process(self._stage(s)) for s in range(1, pp)]

    # -- stage 0: scheduling -----------------------------------------------------------------
    def run(self):  # noqa: ANN201 - SimPy generator
        env, cost, recorder, pp = self.env, self.cost_model, self.recorder, self.pp
        rid = self.replica_id
        while True:
            if self.num_in_flight >= pp:
                yield self._sleep()  # woken by a completion (or an arrival: then re-check)
                continue
            batch = self._take_batch()
            if batch is None:
                yield self._sleep()
                continue
            started_at = env.now
            mb: MicroBatch = (self.num_micro_batches, batch, started_at)
            self.num_micro_batches += 1
            self.num_in_flight += 1
            duration = cost.stage_time(batch.shape, 0)
            yield env.timeout(duration)
            self.stage_busy_s[0] += duration
            self.num_busy_s += duration / pp
            recorder.on_stage(rid, mb[0], 0, started_at, duration)
            self._hand_off(0, mb)

    # -- stages 1 .. pp-1 ---------------------------------------------------------------------
    def _stage(self, stage: int):  # noqa: ANN202 - SimPy generator
        env, cost, recorder, pp = self.env, self.cost_model, self.recorder, self.pp
        inbox, rid, last = self._inbox[stage], self.replica_id, stage == self.pp - 1
        while True:
            if not inbox:
                self._stage_wakeup[stage] = env.event()
                yield self._stage_wakeup[stage]
                continue
            ready_at, mb = inbox.popleft()
            if ready_at > env.now:  # activations still on the wire: this stage idles
                yield env.timeout(ready_at - env.now)
            started_at = env.now
            duration = cost.stage_time(mb[1].shape, stage)
            yield env.timeout(duration)
            self.stage_busy_s[stage] += duration
            self.num_busy_s += duration / pp
            recorder.on_stage(rid, mb[0], stage, started_at, duration)
            if last:
                self._complete(mb)
            else:
                self._hand_off(stage, mb)

    def _hand_off(self, stage: int, mb: MicroBatch) -> None:
        """Send ``mb``'s activations over hop ``stage``; the link carries one transfer at a time."""
        now = self.env.now
        transfer = self._hop_time(mb[1].shape.num_tokens, stage)
        start = max(now, self._link_free_at[stage])
        ready_at = start + transfer
        self._link_free_at[stage] = ready_at
        self._inbox[stage + 1].append((ready_at, mb))
        wakeup = self._stage_wakeup[stage + 1]
        if wakeup is not None and not wakeup.triggered:
            self._stage_wakeup[stage + 1] = None
            wakeup.succeed()

    def _complete(self, mb: MicroBatch) -> None:
        """The micro-batch left the last stage: emit its tokens, free its requests."""
        now = self.env.now
        _, batch, started_at = mb
        self.num_in_flight -= 1
        finished = self.scheduler.complete(batch, now)
        self.recorder.on_iteration(self.replica_id, started_at, now - started_at, batch,
                                   self.scheduler.blocks.num_used_blocks)
        if finished:
            self.recorder.on_finish(finished)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
