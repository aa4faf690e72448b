"""Lockstep decodes: running requests that decode one token every iteration, advanced as one.

In a busy replica most of an iteration's entries are decodes that did the same thing the
iteration before: one token each, one more KV slot each, a gap equal to the iteration's
time. Touching each of them in Python twice per iteration (building the batch, applying it)
was most of the loop's cost near capacity. A :class:`DecodeCohort` keeps such requests
*virtually*: a shared step counter ``tick`` advances them all at once, and a member's
counters are its values when it joined plus ``tick - tick0``. What differs between members
is kept where it is needed:

- the batch shape's decode sums come from running sums of the members' offsets
  (``kv = offset + tick + 1``): exact integers, so what per-entry adds would give;
- KV growth: a member needs a new block every ``block_size`` steps, from a phase fixed
  at join, so members are counted by phase (step modulo ``block_size``) in a ring that
  never moves: the blocks due before a step are one lookup, and a stretch's allocations the
  ring tiled (members whose first allocation is further ahead wait in a dict until it comes
  within one period);
- finishes: a member finishes at a step fixed at join (its bucket by finish step), so the
  tokens the members have still to generate are a running sum of those steps less ``tick``
  each (what SGLang's admission predicts from: :meth:`DecodeCohort.remaining_outputs`);
- gaps: a member's first gap is its own (its previous token may be older than the last
  step); after that every member's gap is the step's, recorded as one run, and its largest
  gap is a suffix maximum of the steps' gaps (a monotonic stack: O(log) per query).

A member's ``Request`` fields ``num_computed``, ``num_generated``, ``num_blocks``,
``last_token_at``, ``max_tbt_s`` and ``token_times`` are stale while it is a member (they hold
its join-time values); :meth:`DecodeCohort.materialise` writes the true values, and happens
when it finishes and when the cohort is dissolved (:meth:`dissolve`: before a policy, event
skipping or the end of a run reads them). Every other field is current. The free-block count
is always current: growth is counted in the step that allocates it.

The owner (:class:`~simulator.fast.lockstep.LockstepMixin` over a policy) decides when members may advance
in lockstep (every member decodes in the iteration and every allocation succeeds) and
dissolves the cohort otherwise, so the step-by-step semantics are never approximated:
tests compare whole runs with lockstep on and off.
"""

from __future__ import annotations

import heapq
from array import array
from bisect import bisect_left
from operator import sub
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.engine.kvcache import BlockManager
    from simulator.engine.tbt import GapLog
    from simulator.workload.request import Request


class _Member:
    """A request in the cohort: ``offset = num_computed - tick`` (constant while a member)."""

    __slots__ = ("req", "tick0", "offset", "blocks0", "first_due", "last", "alive")

    def __init__(self, req: Request, tick0: int, block_size: int) -> None:
        self.req = req
        self.tick0 = tick0
        self.offset = req.num_computed - tick0
        self.blocks0 = req.num_blocks
        # Its first new block is allocated before the step in which num_computed == num_blocks * bs,
        # then one every block_size steps.
        self.first_due = tick0 + req.num_blocks * block_size - req.num_computed
        self.last = tick0 + req.num_output_tokens - req.num_generated  # the step producing its last token
        self.alive = True


class DecodeCohort:
    """Decodes advanced together by a shared step counter.

    Contract (kept by the owner): a member is RUNNING, not in flight, and a decode (one
    missing token, at least one generated) in every step it takes part in, and every
    member takes part in every :meth:`step`. ``loose`` holds the running requests that are
    not members, in running (arrival) order, so the owner visits only those per iteration.
    ``ends[t]`` is the end time of step ``t`` (``ends[0]`` unused).
    """

    __slots__ = ("block_size", "active", "pending", "tick", "ends", "members", "loose", "sum_offset",
                 "sum_offset_sq", "_offsets", "_ring", "_far", "_finish", "_finish_steps", "_sum_finish", "_max_finish",
                 "_fresh", "_stack_ticks", "_stack_gaps")

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.active = False
        self._reset()

    def _reset(self) -> None:
        self.pending = False  # a step is scheduled (its blocks allocated) and not yet completed
        self.tick = 0
        self.ends = array("d", [0.0])
        self.members: dict[int, _Member] = {}  # by request id
        self.loose: list[Request] = []
        self.sum_offset = self.sum_offset_sq = 0  # of the members' offsets
        self._offsets: list[tuple[int, int, _Member]] = []  # max-heap (negated) of offsets; dead entries lazily
        # Allocations. Invariant: a member whose first allocation step ``first_due`` is below
        # ``tick + block_size`` is counted in ``_ring[first_due % block_size]`` (it allocates before
        # every step t >= tick with t of that phase), any other in ``_far[first_due]``.
        self._ring = [0] * self.block_size
        self._far: dict[int, int] = {}
        self._finish: dict[int, list[_Member]] = {}  # step -> members whose last token it produces
        self._finish_steps: list[int] = []  # min-heap of _finish's keys (popped keys leave lazily)
        self._sum_finish = 0  # of the members' finish steps: their outputs still to come sum to it less n * tick
        self._max_finish = 0  # at least the members' latest finish step (not lowered when they leave)
        self._fresh: list[_Member] = []  # joined since the last step: their next gap is their own
        # Monotonic stack of the steps' common gaps: ticks increasing, gaps strictly decreasing, so the
        # largest gap of steps >= t is the first entry at or after t. A decode stretch pushes its
        # steps after the first as one entry (their maximum) at its second step: queries start at
        # a member's second step, and nobody joins inside a stretch, so none starts within one.
        self._stack_ticks: list[int] = []
        self._stack_gaps: list[float] = []

    def activate(self, running: list[Request]) -> None:
        """Start with no members: every running request is loose."""
        self._reset()
        self.loose = list(running)
        self.active = True

    def join(self, req: Request) -> None:
        """Make a loose decode a member from the coming step (the caller removes it from ``loose``)."""
        tick = self.tick
        m = _Member(req, tick, self.block_size)
        self.members[req.request_id] = m
        self.sum_offset += m.offset
        self.sum_offset_sq += m.offset * m.offset
        heapq.heappush(self._offsets, (-m.offset, req.request_id, m))
        if m.first_due < tick + self.block_size:
            self._ring[m.first_due % self.block_size] += 1
        else:
            self._far[m.first_due] = self._far.get(m.first_due, 0) + 1
        last = m.last
        self._sum_finish += last
        if last > self._max_finish:
            self._max_finish = last
        finishers = self._finish.get(last)
        if finishers is None:
            self._finish[last] = [m]
            heapq.heappush(self._finish_steps, last)
        else:
            finishers.append(m)
        self._fresh.append(m)

    def num_due(self) -> int:
        """Blocks the members allocate before the coming step (one each)."""
        return self._ring[self.tick % self.block_size]

    def begin_step(self, blocks: BlockManager) -> tuple[int, int, int, int]:
        """Schedule the coming step (the caller checked that its :meth:`num_due` blocks are
        free): allocate them; return (count, sum, sum of squares, max) of the members' KV
        lengths in it, for the batch shape."""
        num_due = self._ring[self.tick % self.block_size]
        if num_due:
            blocks.num_free_blocks -= num_due
        self.pending = True
        return self.decode_sums()

    def step(self, now: float, gaps: GapLog) -> list[Request]:
        """Every member produced one token at ``now``: record the gaps, return (materialised) finishers."""
        tick = self.tick
        common = now - self.ends[tick]  # the gap of every member that took part in the last step
        fresh = self._fresh
        num_common = len(self.members) - len(fresh)
        if fresh:
            for m in fresh:
                req = m.req
                gap = now - req.last_token_at
                if gap == common:  # e.g. its prefill ended the last step
                    num_common += 1
                else:
                    gaps.add(gap, 1)
                if gap > req.max_tbt_s:
                    req.max_tbt_s = gap
            fresh.clear()
        if num_common:
            gaps.add(common, num_common)
        self.tick = tick = tick + 1
        if self._far:  # the one far step that comes within a period now (the invariant held before)
            count = self._far.pop(tick + self.block_size - 1, None)
            if count:
                self._ring[(tick - 1) % self.block_size] += count
        self._push_gap(tick, common)
        self.ends.append(now)
        self.pending = False
        done = self._finish.pop(tick, None)
        return [] if done is None else self._leave(done)

    def _leave(self, done: list[_Member]) -> list[Request]:
        """Finishers: materialised and out of the cohort."""
        for m in done:
            self.materialise(m)
            self._remove(m)
        if not self.members:  # nobody left to read the past steps: start the step count afresh
            loose = self.loose
            self._reset()
            self.loose, self.active = loose, True
        return [m.req for m in done]

    def _push_gap(self, tick: int, gap: float) -> None:
        stack_ticks, stack_gaps = self._stack_ticks, self._stack_gaps
        while stack_gaps and stack_gaps[-1] <= gap:
            stack_ticks.pop()
            stack_gaps.pop()
        stack_ticks.append(tick)
        stack_gaps.append(gap)

    # -- decode stretches (simulator.fast.skipping) ------------------------------------------
    def join_loose(self, decodes_only: bool = False) -> None:
        """Every loose request joins (the caller checked that all are decodes); with
        ``decodes_only``, only the decodes do (one missing token, at least one generated) and
        the others stay loose, in order."""
        if not decodes_only:
            for req in self.loose:
                self.join(req)
            self.loose = []
            return
        rest = []
        for req in self.loose:
            if req.num_generated and req.num_prompt_tokens + req.num_generated - req.num_computed == 1:
                self.join(req)
            else:
                rest.append(req)
        self.loose = rest

    def decode_sums(self) -> tuple[int, int, int, int]:
        """(count, sum, sum of squares, max) of the members' KV lengths in the coming step."""
        n, t = len(self.members), self.tick + 1
        s1 = self.sum_offset
        offsets = self._offsets
        while not offsets[0][2].alive:
            heapq.heappop(offsets)
        return n, s1 + n * t, self.sum_offset_sq + 2 * t * s1 + n * t * t, -offsets[0][0] + t

    def remaining_outputs(self, clip: int) -> int:
        """Sum over the members of the tokens each has still to generate, at most ``clip`` each (a
        member finishing at step ``last`` has ``last - tick`` to go)."""
        tick = self.tick
        if self._max_finish - tick <= clip:  # nobody is clipped: the running sum
            return self._sum_finish - len(self.members) * tick
        return sum(len(done) * min(last - tick, clip) for last, done in self._finish.items())

    def steps_to_first_finish(self) -> int:
        steps, finish = self._finish_steps, self._finish
        while steps[0] not in finish:  # popped at its step (a key is only ever removed there)
            heapq.heappop(steps)
        return steps[0] - self.tick

    def allocations(self, num_steps: int) -> list[int]:
        """Blocks the members allocate before each of the next ``num_steps`` steps (the
        ring, rotated to the coming step and tiled; the far members added where they start)."""
        bs, ring = self.block_size, self._ring
        t0 = self.tick % bs
        row = ring[t0:] + ring[:t0]
        per_step = (row * (num_steps // bs + 1))[:num_steps] if num_steps > bs else row[:num_steps]
        for first, count in self._far.items():
            for i in range(first - self.tick, num_steps, bs):
                per_step[i] += count
        return per_step

    def _admit_far(self) -> None:
        """Move far members whose first allocation is now within one period into the ring."""
        horizon, ring, bs = self.tick + self.block_size, self._ring, self.block_size
        for first in [f for f in self._far if f < horizon]:
            ring[first % bs] += self._far.pop(first)

    def advance(self, ends: list[float], gaps: GapLog) -> list[Request]:
        """``len(ends) - 1`` steps at once, step ``i`` ending at ``ends[i + 1]`` (the caller
        counted their allocations); returns the finishers of the last one, materialised."""
        k = len(ends) - 1
        finished = self.step(ends[1], gaps)  # none unless it is the last: a stretch ends at its first finish
        if k == 1:  # one step: the last piece of a stretch split at a watch's check (skipping.split)
            return finished
        inner = list(map(sub, ends[2:], ends[1:k]))  # steps 1..k-1's gaps: ends[i + 1] - ends[i]
        gaps.extend_runs(inner, len(self.members))
        tick = self.tick  # after the first step
        self._push_gap(tick + 1, max(inner))
        self.ends.fromlist(ends[2:])
        self.tick = tick = tick + k - 1
        if self._far:
            self._admit_far()
        done = self._finish.pop(tick, None)
        return [] if done is None else self._leave(done)

    def materialise(self, m: _Member) -> None:
        """Write the member's true counters and token times into its request (as of ``tick``)."""
        req, k = m.req, self.tick - m.tick0
        if k <= 0:  # joined for the coming step: its fields are current, unless that step is pending
            if self.pending:
                self._write_blocks(m)
            return
        tick = self.tick
        req.num_computed += k
        req.num_generated += k
        req.last_token_at = self.ends[tick]
        if k >= 2:  # gaps of steps tick0+2 .. tick are the steps' common gaps
            i = bisect_left(self._stack_ticks, m.tick0 + 2)
            if self._stack_gaps[i] > req.max_tbt_s:
                req.max_tbt_s = self._stack_gaps[i]
        if req.token_times is not None:
            req.token_times.extend(self.ends[m.tick0 + 1:tick + 1])
        self._write_blocks(m)

    def _write_blocks(self, m: _Member) -> None:
        # With a step pending (only when a run stops mid-iteration), its block is held already.
        req = m.req
        need = -(-(req.num_computed + self.pending) // self.block_size)
        req.num_blocks = need if need > m.blocks0 else m.blocks0
        req.in_flight = self.pending

    def _remove(self, m: _Member) -> None:
        m.alive = False
        first = m.first_due
        if first < self.tick + self.block_size:
            self._ring[first % self.block_size] -= 1
        elif self._far[first] == 1:
            del self._far[first]
        else:
            self._far[first] -= 1
        del self.members[m.req.request_id]
        self._sum_finish -= m.last
        self.sum_offset -= m.offset
        self.sum_offset_sq -= m.offset * m.offset

    def dissolve(self) -> None:
        """Materialise every member and stop: the owner's queues are plain requests again."""
        for m in self.members.values():
            self.materialise(m)
        self.active = False
        self._reset()
