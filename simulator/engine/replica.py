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

from collections import deque
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

import simpy

from simulator.config.run_config import MEMORY_BASIS_WORDS, ReplicaConfig, RunConfig, SchedulerConfig
from simulator.costmodel.base import CostModel
from simulator.engine.batch_wait import BatchWait
from simulator.engine.kvcache import BlockManager, GiB, MemoryPlan, build_kv_cache, max_model_len_shortfall
from simulator.engine.prefix_cache import make_block_manager
from simulator.engine.schedulers import SCHEDULERS, Batch, Scheduler
from simulator.workload.request import Request, Status

if TYPE_CHECKING:
    from simulator.config.speculative import SpeculativeConfig
    from simulator.engine.records import Recorder
    from simulator.engine.speculative import Speculation

from simulator.config.errors import ConfigError

# A policy class -> the class a fast path runs it as (simulator.fast.lockstep.lockstep_class).
SchedulerWrap = Callable[[type[Scheduler]], type[Scheduler]]


def memory_shortfall(replica: ReplicaConfig, sched: SchedulerConfig) -> str | None:
    """The one memory check: why a replica of this layout cannot hold a ``max_model_len``
    request (weights, activations and a KV cache of at least that many tokens), or None."""
    blocks, _ = build_kv_cache(replica, sched)
    return max_model_len_shortfall(blocks, replica.effective_max_model_len)


def build_pool_scheduler(replica: ReplicaConfig, sched: SchedulerConfig, *, mixin: type | None = None,
                         lockstep: SchedulerWrap | None = None, speculation: Speculation | None = None,
                         drafter: SpeculativeConfig | None = None, whole_requests: bool = True,
                         field: str = "replica.max_model_len", fix: str | None = None) -> tuple[Scheduler, MemoryPlan]:
    """The one scheduler factory: scheduler and KV cache for one replica of a pool (an
    aggregated run's replica, a disaggregated pool's, the split planner's). The policy of
    ``sched``, with ``speculation``'s mixin over it where the replica's decodes speculate (its
    KV cache less the drafter's memory, :func:`~simulator.costmodel.speculative.speculative_memory_plan`)
    and ``mixin``'s methods outside both (a disaggregated pool's role, so its ``complete`` sees
    the verify steps' finishers). ``drafter``: a drafter the replica holds (its memory) without speculating, as a
    disaggregated prefill pool's replica runs its pass over each prompt. Refuses a layout whose cache cannot hold a ``max_model_len``
    request (:func:`memory_shortfall`) unless the pool serves parts of requests
    (``whole_requests=False``: a prefill pool rejects too-long prompts one by one), the error's
    ``fix`` by default naming GPUs (and a smaller drafter). ``lockstep``: the policy's class
    with lockstep decodes (:func:`simulator.fast.lockstep.lockstep_class`, the fast layer's, which
    takes a plain policy or a decode pool's; never with speculation)."""
    max_model_len = replica.effective_max_model_len
    blocks, plan = build_kv_cache(replica, sched)
    cls = SCHEDULERS[sched.name]
    held = speculation.config if speculation is not None else drafter
    if held is not None:  # a plain block manager: speculation turns prefix caching off (config)
        # Imported here: a run without speculation never loads the speculative modules (start-up).
        from simulator.costmodel.speculative import speculative_memory_plan

        plan = speculative_memory_plan(plan, replica, held, verifies=speculation is not None)
        blocks = BlockManager(plan.num_blocks, plan.block_size, sched.watermark, plan.num_state_blocks)
        if speculation is not None:
            from simulator.engine.speculative import speculative_class

            cls = speculative_class(cls)
    # Prefix caching, where on; in a disaggregated pool's role (a mixin) only where the role caches (the prefill
    # pool's: a decode worker takes its blocks over by count from the link).
    elif sched.prefix_cache is not None and (mixin is None or getattr(mixin, "caches_prefixes", False)):
        host_blocks, host_load_s = cpu_tier(replica, sched, plan)
        blocks = make_block_manager(sched.prefix_cache, plan.num_blocks, plan.block_size, sched.watermark,
                                    host_blocks, host_load_s, plan.num_state_blocks)
    short = max_model_len_shortfall(blocks, max_model_len) if whole_requests else None
    if short is not None and replica.num_gpu_blocks is not None:  # the cache's size was given, not planned
        short += f" (--num-gpu-blocks {replica.num_gpu_blocks} sets the cache: raise it)"
    if short is not None:
        # A drafter's memory took from the cache unless the cache's size was given or n-gram drafts from the text.
        if held is None or replica.num_gpu_blocks is not None or held.method == "ngram":
            raise ConfigError(field, short, (fix or "lower --max-model-len or add GPUs (--tp/--pp)") + _kv_knobs(replica, plan))
        raise ConfigError(field, short + " (with the drafter's memory)",
                          (fix or "lower --max-model-len, add GPUs (--tp/--pp) or use a smaller drafter")
                          + _kv_knobs(replica, plan))
    if mixin is not None:
        cls = with_mixin(mixin, cls)
    if lockstep is not None and speculation is None:
        cls = lockstep(cls)  # the fast layer's wrap decides which classes take it
    scheduler = cls(sched, blocks, max_model_len, gpu=replica.gpu_spec, attention_dp=replica.attention_dp)
    if speculation is not None:
        scheduler.speculation = speculation
    return scheduler, plan


def _kv_knobs(replica: ReplicaConfig, plan: MemoryPlan) -> str:
    """The memory knobs that grow a planned KV cache without more GPUs, as the tail of a too-small cache's fix
    ('' where the cache's size was given, or both knobs are spent): FP8 KV halves a token's bytes, and a larger
    share of the GPU's memory leaves more of it to the cache."""
    if replica.num_gpu_blocks is not None:
        return ""
    knobs = [] if replica.kv_cache_dtype == "fp8" else ["store the KV cache in FP8 (--kv-cache-dtype fp8)"]
    if plan.memory_fraction < 0.95:  # (past it there is next to nothing left to give)
        basis = "" if plan.memory_basis == "total" else f" {MEMORY_BASIS_WORDS[plan.memory_basis]}"
        knobs.append(f"raise --gpu-memory-utilization (now {plan.memory_fraction:g}{basis})")
    return f", or {' or '.join(knobs)}" if knobs else ""


def cpu_tier(replica: ReplicaConfig, sched: SchedulerConfig, plan: MemoryPlan) -> tuple[int, float]:
    """The prefix cache's CPU tier for one replica: blocks that ``sched.cpu_kv_gib`` of host memory
    holds (every GPU's shard of a block: the per-GPU KV bytes times ``tp``), and the seconds to
    load one block, each GPU its shard over its own host link at the GPU's PCIe bandwidth per
    direction (in parallel). (0, 0.0) without a tier."""
    if not sched.cpu_kv_gib:
        return 0, 0.0
    block_bytes_per_gpu = plan.kv_bytes_per_token[0] * plan.block_size
    host_blocks = int(sched.cpu_kv_gib * GiB // (block_bytes_per_gpu * replica.tp))
    if host_blocks == 0:  # (no tier at all was built, while the header named one)
        need = block_bytes_per_gpu * replica.tp / GiB
        raise ConfigError("scheduler.cpu_kv_gib", f"{sched.cpu_kv_gib:g} GiB holds no KV block (one is {need:.3g} GiB "
                          f"over the replica's {replica.tp} GPUs)", f"pass --cpu-kv-gib {need * 1.01:.3g} or more, or drop it")
    return host_blocks, block_bytes_per_gpu / replica.gpu_spec.pcie_bytes_per_s


def build_scheduler(config: RunConfig, lockstep: SchedulerWrap | None = None,
                    replica_id: int = 0) -> tuple[Scheduler, MemoryPlan]:
    """:func:`build_pool_scheduler` for replica ``replica_id`` of an aggregated ``config``; where
    the run speculates, with that replica's own acceptance stream (:func:`speculation_rng`)."""
    spec = config.speculative
    speculation = None
    if spec is not None:
        from simulator.engine.speculative import Speculation, speculation_rng

        speculation = Speculation(spec, speculation_rng(config.seed, replica_id))
    return build_pool_scheduler(config.replica, config.scheduler, lockstep=lockstep, speculation=speculation)


class Replica:
    """One replica: a scheduler, its KV cache and a cost model, driven by a SimPy process.

    Contract: every submitted request is either rejected at once (``status`` REJECTED,
    ``reject_reason`` set) or eventually finishes; ``recorder`` sees every iteration.
    """

    def __init__(self, env: simpy.Environment, replica_id: int, scheduler: Scheduler,
                 cost_model: CostModel, recorder: Recorder, start: bool = True) -> None:
        self.env = env
        self.replica_id = replica_id
        self.scheduler = scheduler
        self.cost_model = cost_model
        self.recorder = recorder
        self._wakeup: simpy.Event | None = None
        self.num_busy_s = 0.0
        # TensorRT-LLM's batch waiting where the config turns it on (simulator.engine.batch_wait), else None.
        self.batch_wait = BatchWait.of(scheduler)
        # ``start=False``: a rank that another process steps (simulator.engine.dp_group), whose
        # ``_wakeup`` is then that process's.
        self.process = env.process(self.run()) if start else None

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
        """Make the state at ``at`` (the time now) the step-by-step loop's, before an observer
        reads it: nothing to do for this loop, which applies each iteration at its end
        (:class:`simulator.fast.replica.SkippingReplica` applies stretches late and overrides it)."""

    def stop(self, at: float) -> None:
        """The run ends at ``at`` (a watch stopped it): nothing to do for this loop, whose state is
        always the step-by-step one (:class:`simulator.fast.replica.SkippingReplica` overrides it)."""

    def _sleep(self) -> simpy.Event:
        self._wakeup = self.env.event()
        return self._wakeup

    def _take_batch(self) -> Batch | None:
        """The policy's next batch, stamped with its admissions' first-scheduled time; None
        when there is nothing to run until a request arrives or a batch completes. Where batch
        waiting holds new prompts this step, the batch without them (:meth:`_take_decodes`)."""
        if self.batch_wait is not None and self.batch_wait.holds(self.scheduler):
            return self._take_decodes()
        return self._schedule()

    def _take_decodes(self) -> Batch | None:
        """The policy's batch with its waiting queue set aside (it admits nobody; a prompt under way
        goes on): what a step holding new prompts runs (batch waiting, an attention-DP balance). A
        request the policy preempts meanwhile goes back to the front of the queue, as it would have."""
        scheduler = self.scheduler
        held, scheduler.waiting = scheduler.waiting, deque()
        try:
            return self._schedule()
        finally:
            preempted, scheduler.waiting = scheduler.waiting, held
            held.extendleft(reversed(preempted))

    def _schedule(self) -> Batch | None:
        """The policy's next batch as :meth:`_take_batch` returns it, with no batch waiting."""
        scheduler = self.scheduler
        batch = scheduler.schedule()
        if not batch.requests and not batch.num_lockstep:  # len(batch) == 0, without the call
            if batch.preempted:  # (a pipeline's in-flight requests are no victims: a request can preempt itself
                # and leave nothing to run) the pass is a row of its own, so the table counts every preemption;
                # recorded first: a pass that preempted the last running request leaves only waiting ones (stalled)
                self.recorder.on_iteration(self.replica_id, self.env.now, 0.0, batch, scheduler.blocks.num_used_blocks)
            if scheduler.waiting and not scheduler.running:
                return self._stalled()
            return None
        if batch.admitted:
            now = self.env.now
            for req in batch.admitted:
                if req.first_scheduled_at is None:
                    req.first_scheduled_at = now
        return batch

    def _stalled(self) -> Batch | None:
        """The policy admitted nothing with only waiting requests: on a plain replica every block is
        free then, so the head of ``waiting`` fits (rejection saw to that) and this is a policy bug."""
        raise RuntimeError("scheduler returned an empty batch with only waiting requests")  # invariant

    def run(self):  # noqa: ANN201 - SimPy generator
        """The loop: schedule, price, wait, complete (one SimPy timeout an iteration)."""
        env = self.env
        while True:
            batch = self._take_batch()
            if batch is None:
                yield self._sleep()
                continue
            started_at = env.now
            duration = self._price(batch)
            yield env.timeout(duration)
            self._apply(batch, started_at, duration)

    def _price(self, batch: Batch) -> float:
        """How long ``batch`` takes on this replica's GPUs."""
        duration = self.cost_model.iteration_time(batch.shape)
        if batch.admitted and self.scheduler.blocks.pending_load_s:  # KV loaded from a CPU tier first
            duration += self.scheduler.blocks.take_pending_load_s()
        return duration

    def _apply(self, batch: Batch, started_at: float, duration: float) -> None:
        """The iteration that ran ``batch`` from ``started_at`` for ``duration`` ends now."""
        self.num_busy_s += duration
        scheduler, recorder = self.scheduler, self.recorder
        finished = scheduler.complete(batch, started_at + duration)  # the float SimPy's timeout landed on
        recorder.on_iteration(self.replica_id, started_at, duration, batch, scheduler.blocks.num_used_blocks)
        if finished:
            recorder.on_finish(finished)


@cache
def with_mixin(mixin: type, base: type) -> type:
    """``base`` with ``mixin``'s methods first (one class per pair, so instances of a pool share it)."""
    return type(f"{mixin.__name__.removesuffix('Mixin')}{base.__name__}", (mixin, base), {})
