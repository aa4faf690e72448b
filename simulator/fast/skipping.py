"""Exact event skipping: advance a replica through a stretch of like iterations at once.

Most iterations of a lightly loaded replica change nothing but the running decodes'
context lengths: every running request decodes one token, nobody is admitted, preempted
or finishes. When the policy's rule says the batch is in that state
(:mod:`simulator.fast.steady`, ``decode``), the next ``K`` iterations
are known in closed form: iteration ``i`` has the same ``n`` decodes, every KV length
``i`` longer. This module prices the stretch with one
:meth:`~simulator.costmodel.base.CostModel.decode_stretch_times` call, lets SimPy jump to
its end with one timeout, and then writes what ``K`` single steps would have written:
the same iteration records, token times, request counters and KV blocks. With lockstep
decodes (:mod:`simulator.fast.lockstep`) the stretch reads the cohort's running sums and advances
its step counter by ``K`` instead of visiting each request.

Chunked prefills (:func:`plan_chunks`): near capacity most iterations carry a prompt's
chunk, and a long prompt takes several (a 2,400-token ShareGPT prompt, five at a
512-token budget). While one prompt is chunked beside steady lockstep decodes
(:mod:`simulator.fast.steady`, ``chunk``), its chunks before the last
fill the budget, so nobody is admitted whoever waits, and each iteration is the decodes
plus ``chunk`` more tokens of that prompt over a cache ``chunk`` longer: the same stretch,
priced by :meth:`~simulator.costmodel.base.CostModel.chunk_stretch_times`. It stops
before the prompt's last chunk (which may admit requests and produces its first token).

A stretch ends with the first of:

- the iteration in which a request finishes (included: the finish is applied at its end);
- the last iteration whose block allocations still fit the free blocks (beyond it a
  preemption may follow; below it every ``try_grow`` succeeds, in any order);
- the *horizon*, the next event that can touch this replica (an arrival, a watch; see
  :class:`~simulator.engine.cluster.Cluster`): the stretch keeps the iterations that *start*
  before it, since an arrival cannot change an iteration already scheduled, only the
  next one (it joins ``waiting``; routing reads queue lengths, which decodes leave
  alone). An iteration ending exactly at the horizon is left out (SimPy orders equal
  times by creation), and with a watch process, which may read anything, the stretch
  ends before the horizon, unless the replica is alone and the watch settles it before
  reading (:meth:`~simulator.engine.replica.Replica.settle` applies the part of the stretch that
  ended by then, :func:`split`).

Exactness: times are accumulated iteration by iteration (``itertools.accumulate``, the
same float additions SimPy makes), the jump lands exactly on the last end (checked), and
the cost model's stretch pricing matches its per-iteration pricing bit for bit (its
contract; the generic fallback is the per-iteration pricing itself). The
``fast_forward`` switch (``--no-fast-forward``) keeps the step-by-step loop; tests
compare whole request and iteration tables both ways.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import reduce
from itertools import accumulate
from operator import add, sub
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simulator.engine.replica import Replica
    from simulator.engine.schedulers import Scheduler
    from simulator.fast.replica import SkippingReplica
    from simulator.workload.request import Request

# Iterations priced per cost-model call at first; the chunk grows 4x while the horizon allows.
FIRST_CHUNK = 16
# Up to this many (request, block boundary) pairs a stretch's allocations are counted in a
# plain loop; numpy's per-call cost is worth paying only beyond it.
SMALL_ALLOCATIONS = 2048


@dataclass(slots=True)
class Stretch:
    """``num_iterations`` iterations of the same decodes: ``ends[i]`` is the start of
    iteration ``i`` and ``ends[i + 1]`` its end; ``kv_blocks_used[i]`` the blocks in use
    after it. With ``prefill`` set (:func:`plan_chunks`) each also carries ``chunk`` tokens
    of that request's prompt, none of them its last."""

    num_iterations: int
    ends: list[float]
    durations: list[float]
    kv_blocks_used: list[int]
    num_allocated: int
    prefill: Request | None = None
    chunk: int = 0


def _allocations(firsts: list[int], block_size: int, num_iterations: int) -> list[int]:
    """New blocks allocated in each iteration of a stretch by requests stepped one by one
    (the cohort counts its own: :meth:`DecodeCohort.allocations`): request ``j`` allocates one
    at iteration ``firsts[j]`` and every ``block_size`` iterations after. (A request with
    ``c`` computed tokens and ``b`` blocks first allocates at ``b * block_size - c``.)"""
    if len(firsts) * (num_iterations // block_size + 1) <= SMALL_ALLOCATIONS:
        per_iteration = [0] * num_iterations
        for first in firsts:
            for i in range(first, num_iterations, block_size):
                per_iteration[i] += 1
        return per_iteration
    first = np.asarray(firsts, dtype=np.int64)
    starts = np.bincount(first[first < num_iterations], minlength=num_iterations)
    rows = -(-num_iterations // block_size)
    padded = np.zeros(rows * block_size, dtype=np.int64)
    padded[:num_iterations] = starts
    # An allocation at i0 repeats at i0 + block_size, ...: a cumulative sum down each residue.
    return np.cumsum(padded.reshape(rows, block_size), axis=0).reshape(-1)[:num_iterations].tolist()


def steps_within(ends: list[float], num: int, horizon_at: float, straddle: bool) -> int:
    """How many of the ``num`` steps timed by ``ends`` (``ends[i]`` the start of step ``i``, ``ends[i + 1]``
    its end) a stretch keeps before the horizon: those starting before it where ``straddle`` (one ending
    exactly at it left out: SimPy runs the older event first), else those ending before it."""
    if straddle:
        within = bisect_left(ends, horizon_at, 0, num)
        return within - 1 if within and ends[within] == horizon_at else within
    return bisect_left(ends, horizon_at, 1) - 1


def _fit(now: float, horizon_at: float, straddle: bool, max_iterations: int,
         price: Callable[[int, int], list[float]], duration_hint: float) -> tuple[list[float], list[float]] | None:
    """The iterations of a stretch that fit before the horizon: ``(ends, durations)`` as in
    :class:`Stretch`, at least 2 and at most ``max_iterations``, or None. ``price(i, m)``
    gives the times of iterations ``i .. i + m - 1``; it is called on growing chunks."""
    ends: list[float] = []
    durations: list[float] = []
    num, chunk = 0, FIRST_CHUNK
    if duration_hint > 0 and horizon_at != math.inf:
        chunk = max(FIRST_CHUNK, int((horizon_at - now) / duration_hint) + 2)
    while num < max_iterations:
        m = min(chunk, max_iterations - num)
        priced = price(num, m)
        new_ends = list(accumulate(priced, initial=ends[-1] if ends else now))
        within = steps_within(new_ends, m, horizon_at, straddle)
        if not ends:  # the first call, usually the only one
            ends, durations = new_ends, priced[:within]  # a copy: price's list is not ours to change
            del ends[within + 1:]
        else:
            durations += priced[:within]
            ends += new_ends[1:within + 1]
        num += within
        if within < m:
            break
        chunk *= 4
    if not ends:
        return None
    # SimPy lands at now + delay: keep only a stretch whose end that sum hits exactly.
    while num >= 2 and now + (ends[num] - now) != ends[num]:
        num -= 1
    if num < 2:
        return None
    del ends[num + 1:], durations[num:]
    return ends, durations


def plan(replica: SkippingReplica, horizon_at: float, duration_hint: float = 0.0, straddle: bool = True,
         limit: int | None = None) -> Stretch | None:
    """The decode stretch the replica can skip from now, or None (step normally).
    ``straddle``: the event at the horizon is an arrival, so iterations starting before it
    are kept (else only those ending before it). ``duration_hint`` (the last iteration's
    time) sizes the first pricing call so that one call usually covers the stretch.
    ``limit``: at most that many iterations (an attention-DP group's shortest stretch)."""
    scheduler, env = replica.scheduler, replica.env
    now = env.now
    rules = replica.steady
    if horizon_at <= now or rules is None or not rules.decode(scheduler):
        return None
    blocks = scheduler.blocks
    bs = blocks.block_size
    cohort = getattr(scheduler, "cohort", None)  # lockstep decodes (simulator.fast.lockstep)
    if cohort is not None and cohort.active:  # lockstep decodes: the same figures from the cohort's sums
        cohort.join_loose()
        n, kv_sum, kv_sq_sum, kv_max = cohort.decode_sums()
        max_iterations = cohort.steps_to_first_finish()
        allocations = cohort.allocations
    else:
        running = scheduler.running
        n = len(running)
        # up to the iteration in which the first request finishes
        max_iterations = min(r.num_output_tokens - r.num_generated for r in running)
        computed = [r.num_computed for r in running]
        # Decode KV lengths in the first iteration (the new token included): exact integer sums.
        kv_sum, kv_sq_sum, kv_max = sum(computed) + n, sum((c + 1) * (c + 1) for c in computed), max(computed) + 1
        firsts = [r.num_blocks * bs - c for r, c in zip(running, computed, strict=True)]

        def allocations(num: int) -> list[int]:
            return _allocations(firsts, bs, num)
    if limit is not None:
        max_iterations = min(max_iterations, limit)
    cost = replica.cost_model

    def price(num: int, m: int) -> list[float]:  # iterations num .. num + m - 1
        return cost.decode_stretch_times(n, kv_sum + n * num, kv_sq_sum + 2 * num * kv_sum + n * num * num,
                                         kv_max + num, m)

    def count(m: int) -> None:  # the extrapolations price(0, m) counts
        cost.count_decode_stretch_times(n, kv_sum, kv_sq_sum, kv_max, m)
    return _stretch(replica, horizon_at, straddle, duration_hint, n, max_iterations, allocations, price, count)


def plan_chunks(replica: SkippingReplica, horizon_at: float, duration_hint: float = 0.0, straddle: bool = True,
                limit: int | None = None) -> Stretch | None:
    """The chunked-prefill stretch the replica can skip from now, or None: the iterations in
    which steady decodes run beside full chunks of one long prompt
    (:mod:`simulator.fast.steady`, ``chunk``), up to the one before its
    last chunk (that one may admit requests); only where the cost model prices such stretches
    in closed form (``fast_chunk_stretches``). Arguments as for :func:`plan`."""
    scheduler, env = replica.scheduler, replica.env
    rules = replica.steady
    if horizon_at <= env.now or not replica.cost_model.fast_chunk_stretches or rules is None or rules.chunk is None:
        return None
    steady = rules.chunk(scheduler)
    if steady is None:
        return None
    prefill, chunk = steady
    cohort = getattr(scheduler, "cohort", None)
    assert cohort is not None and cohort.active  # the chunk rule's contract
    # The decodes join now (as the next schedule() would); the prompts stay loose.
    cohort.join_loose(decodes_only=True)
    left = prefill.num_prompt_tokens + prefill.num_generated - prefill.num_computed
    max_iterations = (left - 1) // chunk  # iterations i with left - i * chunk > chunk
    if limit is not None:
        max_iterations = min(max_iterations, limit)
    if cohort.members:
        n, kv_sum, kv_sq_sum, kv_max = cohort.decode_sums()
        max_iterations = min(max_iterations, cohort.steps_to_first_finish())
        allocations = cohort.allocations
    else:
        n = kv_sum = kv_sq_sum = kv_max = 0

        def allocations(num: int) -> list[int]:
            return [0] * num
    cost = replica.cost_model
    kv_before = prefill.num_computed

    def price(num: int, m: int) -> list[float]:  # iterations num .. num + m - 1
        return cost.chunk_stretch_times(n, kv_sum + n * num, kv_sq_sum + 2 * num * kv_sum + n * num * num,
                                        kv_max + num, chunk, kv_before + num * chunk, m)

    def count(m: int) -> None:  # the extrapolations price(0, m) counts
        cost.count_chunk_stretch_times(n, kv_sum, kv_sq_sum, kv_max, chunk, kv_before, m)
    stretch = _stretch(replica, horizon_at, straddle, duration_hint, n, max_iterations, allocations, price, count)
    if stretch is not None:
        stretch.prefill, stretch.chunk = prefill, chunk
    return stretch


def _stretch(replica: Replica, horizon_at: float, straddle: bool, duration_hint: float, n: int, max_iterations: int,
             allocations: Callable[[int], list[int]], price: Callable[[int, int], list[float]],
             count: Callable[[int], None]) -> Stretch | None:
    """The stretch of at most ``max_iterations`` iterations of ``n`` decodes (each allocating
    as ``allocations`` says), priced by ``price``, that fits the free blocks and the horizon.
    ``count(m)`` counts the cost model's extrapolations as ``price(0, m)`` does (its times unwanted)."""
    if max_iterations < 2:
        return None
    blocks = replica.scheduler.blocks
    # Each request needs at most max_iterations // bs + 1 new blocks: skip the exact count when that fits.
    if n * (max_iterations // blocks.block_size + 1) > blocks.num_free_blocks:
        allocated = list(accumulate(allocations(max_iterations)))  # blocks allocated by each iteration's end
        if allocated[-1] > blocks.num_free_blocks:
            max_iterations = bisect_right(allocated, blocks.num_free_blocks)  # the iterations that still fit
            if max_iterations < 2:
                return None
    cost = replica.cost_model
    mark = cost.extrapolation_mark()
    fitted = _fit(replica.env.now, horizon_at, straddle, max_iterations, price, duration_hint)
    if mark is not None and cost.extrapolation_mark() != mark:
        # Pricing counted extrapolations in iterations the stretch will not apply (past the horizon,
        # or the whole stretch where none fits): count only the applied ones, as pricing them at once
        # does (the stepping loop counts the rest when it runs them); counted without pricing them again
        # where the model can.
        cost.rollback_extrapolations(mark)
        if fitted is not None:
            count(len(fitted[1]))
    if fitted is None:
        return None
    ends, durations = fitted
    num = len(durations)
    used = allocations(num)  # blocks allocated before each iteration, then (summed) in use after it
    used[0] += blocks.num_used_blocks
    used = list(accumulate(used))
    return Stretch(num, ends, durations, used, used[-1] - blocks.num_used_blocks)


def split(stretch: Stretch, num: int, num_used_blocks: int) -> tuple[Stretch, Stretch]:
    """The stretch's first ``num`` iterations and the rest (``1 <= num < num_iterations``),
    applied one after the other as the whole would be; ``num_used_blocks``: the blocks in use
    before it. Only the last iteration may finish requests, so the first piece finishes none."""
    if not 1 <= num < stretch.num_iterations:  # invariant: two non-empty pieces
        raise ValueError(f"split: {num} of {stretch.num_iterations} iterations")
    used = stretch.kv_blocks_used
    head_allocated = used[num - 1] - num_used_blocks
    head = Stretch(num, stretch.ends[:num + 1], stretch.durations[:num], used[:num], head_allocated,
                   stretch.prefill, stretch.chunk)
    rest = Stretch(stretch.num_iterations - num, stretch.ends[num:], stretch.durations[num:], used[num:],
                   stretch.num_allocated - head_allocated, stretch.prefill, stretch.chunk)
    return head, rest


def apply(replica: Replica, stretch: Stretch) -> bool:
    """Write the stretch's effects, at its end, as ``num_iterations`` single steps would have (the
    policy's own state too: its rules' ``skipped``).
    Returns whether requests finished (the state may allow another stretch at once)."""
    scheduler = replica.scheduler
    blocks = scheduler.blocks
    blocks.num_free_blocks -= stretch.num_allocated
    rules = replica.steady  # type: ignore[attr-defined]  # (a SkippingReplica's)
    if rules.skipped is not None:  # the policy's own state over the iterations its schedule() did not see
        rules.skipped(scheduler, stretch.num_iterations)
    replica.num_busy_s = reduce(add, stretch.durations, replica.num_busy_s)  # the per-iteration float adds
    cohort = getattr(scheduler, "cohort", None)
    prefill = stretch.prefill
    if prefill is not None:  # its chunks produce no token (none is its last): only its progress moves
        prefill.num_computed += stretch.num_iterations * stretch.chunk
        if prefill.num_computed >= prefill.num_prompt_tokens + prefill.num_generated:  # invariant (the chunk rule)
            raise RuntimeError(f"a chunked-prefill stretch finished request {prefill.request_id}'s prompt")
    if cohort is not None and cohort.active:  # always so for a chunk stretch
        num_decodes = len(cohort.members)
        # A chunk stretch may have no decodes: the step-by-step loop then never ticks the cohort.
        finished = cohort.advance(stretch.ends, scheduler.gaps) if num_decodes else []
    else:
        num_decodes = len(scheduler.running)
        finished = _apply_to_requests(scheduler, stretch)
    if finished:
        scheduler.retire(finished, replica.env.now)
        stretch.kv_blocks_used[-1] = blocks.num_used_blocks
    replica.recorder.on_stretch(replica.replica_id, stretch.ends, stretch.durations, num_decodes,
                                stretch.kv_blocks_used, stretch.chunk, int(prefill is not None))
    if finished:
        replica.recorder.on_finish(finished)
    return bool(finished)


def _apply_to_requests(scheduler: Scheduler, stretch: Stretch) -> list[Request]:
    """The stretch's tokens, gaps and blocks written into every running request; the finishers."""
    k = stretch.num_iterations
    ends = stretch.ends
    first_end, last_end = ends[1], ends[-1]
    # Iterations 1..k-1: every request's previous token ended the iteration before, so each
    # iteration's gaps are one run of n equal values (what complete() would record).
    inner = list(map(sub, ends[2:], ends[1:k]))  # ends[i + 1] - ends[i] for i in 1..k-1
    inner_max = max(inner) if inner else -1.0  # none in a one-iteration piece (see split); gaps are >= 0
    token_times = None
    bs = scheduler.blocks.block_size
    gaps = scheduler.gaps
    # Iteration 0's gaps, run-length encoded in running order, as Scheduler.complete does (the
    # encoding is inlined in both: a call per token would cost more than the rest of the loop).
    run_gap, run_count = -1.0, 0
    for req in scheduler.running:
        gap = first_end - req.last_token_at
        if gap == run_gap:
            run_count += 1
        else:
            if run_count:
                gaps.add(run_gap, run_count)
            run_gap, run_count = gap, 1
        if gap < inner_max:
            gap = inner_max
        if gap > req.max_tbt_s:
            req.max_tbt_s = gap
        req.last_token_at = last_end
        if req.token_times is not None:
            if token_times is None:
                token_times = array("d", ends[1:])
            req.token_times.extend(token_times)
        req.num_computed += k
        req.num_generated += k
        need = -(-req.num_computed // bs)
        if need > req.num_blocks:
            req.num_blocks = need
    if run_count:
        gaps.add(run_gap, run_count)
    gaps.extend_runs(inner, len(scheduler.running))
    # The last iteration may finish requests (Scheduler.retire takes them out).
    return [r for r in scheduler.running if r.num_generated == r.num_output_tokens]
