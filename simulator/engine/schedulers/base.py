"""Scheduler contract: queues in, one batch out.

A scheduler owns a FCFS ``waiting`` deque and a ``running`` list (in arrival order: FCFS
priority) and a :class:`~simulator.engine.kvcache.BlockManager`. ``schedule()`` is the policy: it picks
the next batch — which requests run and how many tokens each contributes — allocating
KV blocks and preempting as it goes. It reads no clock and does no I/O, so tests drive
it with hand-made queues. ``complete(batch, now)`` is the shared mechanism that applies
a finished iteration: advance prefill progress, emit tokens, free finished requests.

Token accounting (vLLM v1's contract, see :mod:`simulator.workload.request`): an entry of
``n`` tokens advances ``num_computed`` by ``n``; it produces a token iff that makes the
request's KV cache whole.

Common rules (DESIGN.md): preemption is by recompute; the victim is the newest running
request (latest arrival) that is not in flight, re-queued at the front of ``waiting``.
``running`` is kept in arrival order, as the sarathi-serve reference and vLLM v0 sort
their running queue by FCFS priority every step. Without pipelining this is admission
order anyway (the victim is always the newest and goes back to the front of ``waiting``);
with pipelining the newest may be in flight, and an older victim, re-admitted later,
takes its arrival place again: its prefill chunks come before those of later arrivals
and it is not the next victim. With pipeline
parallelism several batches may be in flight, but a request is in at most one
(``Request.in_flight``); policies skip in-flight requests.

Lockstep decodes (:mod:`simulator.engine.cohort`): a policy that adds its running decodes only
through :meth:`Scheduler._add_decodes` may set ``supports_lockstep``; the engine then lets a
cohort carry the steady decodes, and ``_add_decodes`` and ``complete`` visit only the other
running requests. The batch is the same (up to entry order); where it would not be (a decode
cut by the budget, a preemption) the cohort is dissolved first and the loop steps as before.

Extension point: subclass :class:`Scheduler`, implement ``schedule`` (and
``reserve_tokens`` if the policy reserves memory up front), and add one line to
``simulator.engine.schedulers.SCHEDULERS``.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from dataclasses import dataclass
from operator import attrgetter

from simulator.config.run_config import SchedulerConfig
from simulator.costmodel.base import BatchShape
from simulator.engine.cohort import DecodeCohort
from simulator.engine.kvcache import BlockManager
from simulator.engine.tbt import GapLog
from simulator.workload.request import Request, Status

_FCFS_KEY = attrgetter("arrival_at", "request_id")  # running order: arrival, ties by id


def _insert_fcfs(queue: list[Request], req: Request) -> None:
    """Insert in running order: at the end, unless a re-admitted request goes back to its arrival place."""
    if queue and _FCFS_KEY(queue[-1]) > _FCFS_KEY(req):
        insort(queue, req, key=_FCFS_KEY)
    else:
        queue.append(req)


@dataclass(slots=True, init=False)
class Batch:
    """One iteration's work. ``requests[i]`` contributes ``num_tokens[i]`` tokens, and the
    scheduler's lockstep decodes (:mod:`simulator.engine.cohort`) one token each when ``num_lockstep``
    is set (they are in ``shape``, not in ``requests``)."""

    requests: list[Request]
    num_tokens: list[int]
    shape: BatchShape
    preempted: list[Request]  # preempted while building this batch
    admitted: list[Request]  # (re)admitted from waiting by this batch
    num_lockstep: int

    def __init__(self) -> None:  # one per iteration: plain assignments beat default factories (2x)
        self.requests, self.num_tokens, self.shape = [], [], BatchShape()
        self.preempted, self.admitted, self.num_lockstep = [], [], 0

    def __len__(self) -> int:
        return len(self.requests) + self.num_lockstep

    def add(self, req: Request, num_tokens: int) -> None:
        """Append an entry and account its attention work in the shape."""
        self.requests.append(req)
        self.num_tokens.append(num_tokens)
        req.in_flight = True
        kv_before = req.num_computed
        # A decode feeds back the last output token; a prompt's 1-token chunk is still prefill.
        if num_tokens == 1 and req.num_generated and req.num_prompt_tokens + req.num_generated - kv_before == 1:
            self.shape.add_decode(kv_before + 1)
        else:
            produces = kv_before + num_tokens == req.num_prompt_tokens + req.num_generated
            self.shape.add_prefill(num_tokens, kv_before, produces)


class Scheduler:
    """Base policy. Subclasses implement :meth:`schedule`."""

    name = "base"
    # Whether the policy adds running decodes only through _add_decodes and reads running
    # requests' counters nowhere else while a cohort is active: then enable_lockstep() may
    # advance them as a cohort (simulator.engine.cohort).
    supports_lockstep = False

    def __init__(self, config: SchedulerConfig, blocks: BlockManager, max_model_len: int) -> None:
        self.config = config
        self.blocks = blocks
        self.max_model_len = max_model_len
        self.max_num_seqs = config.max_num_seqs
        self.token_budget = config.token_budget(max_model_len)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._admission_counter = 0  # per-scheduler sequence, not a global
        self.gaps = GapLog()  # every TBT gap of the tokens this scheduler's iterations produced
        self.cohort: DecodeCohort | None = None  # lockstep decodes, when enabled

    def enable_lockstep(self) -> None:
        """Advance steady decodes as a cohort (a pure speed-up: the same runs, bit for bit).
        Only for a replica without pipelining (one batch in flight) whose requests nobody
        reads mid-run but through :meth:`settle`; a no-op for a policy that does not opt in."""
        if self.supports_lockstep:
            self.cohort = DecodeCohort(self.blocks.block_size)

    def settle(self) -> None:
        """Write every running request's true counters (dissolve the cohort): before anything
        outside the policy reads running requests."""
        if self.cohort is not None and self.cohort.active:
            self.cohort.dissolve()

    # -- queue management --------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        req.status = Status.WAITING
        self.waiting.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def reserve_tokens(self, req: Request) -> int:
        """KV tokens a request must hold to be admitted. Default: everything it knows."""
        return req.num_prompt_tokens + req.num_generated

    def max_reserve_tokens(self, req: Request) -> int:
        """The most KV tokens the request will ever hold under this policy."""
        return max(self.reserve_tokens(req), req.max_num_tokens)

    def rejection_reason(self, req: Request) -> str | None:
        """Why a request can never be served by this policy, or None."""
        if req.num_prompt_tokens + req.num_output_tokens > self.max_model_len:
            return (f"prompt+output = {req.num_prompt_tokens + req.num_output_tokens} tokens exceeds "
                    f"max_model_len {self.max_model_len}")
        if self.blocks.blocks_for(self.max_reserve_tokens(req)) > self.blocks.num_usable_blocks:
            return (f"needs {self.max_reserve_tokens(req)} KV tokens but the cache holds "
                    f"{self.blocks.num_usable_blocks * self.blocks.block_size}")
        return None

    def _admit(self, batch: Batch) -> Request:
        """Move the head of ``waiting`` to ``running`` with its reservation allocated."""
        req = self.waiting.popleft()
        # A prefix cache shares the cached prefix and starts num_computed there (else it stays 0).
        self.blocks.admit(req, self.reserve_tokens(req))
        req.status = Status.RUNNING
        self._admission_counter += 1
        req.admitted_seq = self._admission_counter
        _insert_fcfs(self.running, req)
        if self.cohort is not None and self.cohort.active:
            _insert_fcfs(self.cohort.loose, req)
        batch.admitted.append(req)
        return req

    def _preempt(self, req: Request, batch: Batch) -> None:
        """Preempt by recompute: drop the KV cache, re-queue at the front."""
        assert self.cohort is None or not self.cohort.active  # invariant: preemption runs step by step
        self.running.remove(req)
        self.blocks.free(req)
        req.num_computed = 0
        req.num_preemptions += 1
        req.status = Status.WAITING
        self.waiting.appendleft(req)
        batch.preempted.append(req)

    def _newest_victim(self) -> Request | None:
        """The latest-arriving running request that is not in flight."""
        for req in reversed(self.running):
            if not req.in_flight:
                return req
        return None

    def _grow_or_preempt(self, req: Request, num_tokens: int, batch: Batch) -> bool:
        """Make room for ``req`` to hold ``num_tokens``, preempting the newest running
        requests as needed. Returns False if ``req`` itself had to be preempted."""
        if req.num_blocks * self.blocks.block_size >= num_tokens:
            return True  # the common case: the last block has room
        while not self.blocks.try_grow(req, num_tokens):
            victim = self._newest_victim()
            if victim is None or victim is req:
                self._preempt(req, batch)
                return False
            self._preempt(victim, batch)
        return True

    # -- policy --------------------------------------------------------------------------
    def schedule(self) -> Batch:
        raise NotImplementedError

    def decode_steady(self) -> bool:
        """Whether, until a request arrives or finishes or free KV blocks run short, every
        ``schedule()`` would return exactly the running requests as 1-token decodes (in
        ``running`` order, growing each one's blocks as needed) and admit or preempt
        nobody. Event skipping (:mod:`simulator.fast.skipping`) relies on it to advance such
        stretches in one step. Default False: a policy opts in by overriding it, and must
        keep it in step with ``schedule()`` (the skipping on/off tests check it)."""
        return False

    def chunk_steady(self) -> tuple[Request, int] | None:
        """``(req, chunk)`` where, until a request finishes or free KV blocks run short, every
        ``schedule()`` would return the running decodes as lockstep decodes (the cohort is
        active) plus ``chunk`` tokens of ``req``'s prompt, as long as more than ``chunk``
        remain (not its last chunk), and admit or preempt nobody; else None. Event skipping
        (:mod:`simulator.fast.skipping`) advances such chunked-prefill stretches in one step.
        Default None: a policy opts in by overriding it, and must keep it in step with
        ``schedule()`` (the skipping on/off tests check it)."""
        return None

    def _all_running_decode(self) -> bool:
        """Every running request is a decode (one missing token, at least one output) and
        none is in flight. (Cohort members are, by the cohort's contract.)"""
        cohort = self.cohort
        return bool(self.running) and all(
            not r.in_flight and r.num_generated and r.num_prompt_tokens + r.num_generated - r.num_computed == 1
            for r in (cohort.loose if cohort is not None and cohort.active else self.running))

    def _add_decodes(self, batch: Batch, budget: float, partial: list[Request] | None) -> int:
        """One token for each running request not in flight, in running order, until ``budget``
        tokens; KV blocks grow as needed, preempting the newest. With ``partial`` given, a
        request with more than one token missing goes there instead (its chunk is the policy's
        business). Returns the tokens added.

        The hot loop of every decode iteration: with a cohort (:meth:`enable_lockstep`), only
        requests outside it are visited (:meth:`_lockstep_decodes`); else entries are appended
        in place as :meth:`Batch.add` would, and the decodes' shape sums kept in locals and
        folded in once (integer sums, so exactly what per-entry adds would give).
        """
        cohort = self.cohort
        if cohort is not None:
            if not cohort.active:
                cohort.activate(self.running)
            used = self._lockstep_decodes(batch, budget, partial)
            if used is not None:
                return used
            cohort.dissolve()  # step by step from here: this iteration preempts or cuts decodes
        running, block_size = self.running, self.blocks.block_size
        append_req, append_tokens = batch.requests.append, batch.num_tokens.append
        num_decodes = kv_sum = kv_sq_sum = kv_max = used = 0
        i, num_running = 0, len(running)
        while i < num_running:
            req = running[i]
            if req.in_flight:
                i += 1
                continue
            computed = req.num_computed
            if partial is not None and req.num_prompt_tokens + req.num_generated - computed > 1:
                partial.append(req)
                i += 1
                continue
            if used >= budget:
                break
            if req.num_blocks * block_size <= computed:  # the last block is full: grow, maybe preempting
                grown = self._grow_or_preempt(req, computed + 1, batch)
                num_running = len(running)  # preemption removes from the end
                if not grown:
                    break  # req was the newest: everything after it is gone too
            if req.num_generated:
                append_req(req)
                append_tokens(1)
                req.in_flight = True
                kv = computed + 1
                num_decodes += 1
                kv_sum += kv
                kv_sq_sum += kv * kv
                if kv > kv_max:
                    kv_max = kv
            else:
                batch.add(req, 1)  # a prompt's 1-token tail is a prefill chunk
            used += 1
            i += 1
        batch.shape.add_decodes(num_decodes, kv_sum, kv_sq_sum, kv_max)
        return used

    def _lockstep_decodes(self, batch: Batch, budget: float, partial: list[Request] | None) -> int | None:
        """:meth:`_add_decodes` with the cohort: the same batch (up to entry order), visiting
        only loose requests; loose decodes join the cohort. None (nothing changed) where the
        step-by-step loop would do something else: cut decodes at the budget or preempt."""
        cohort = self.cohort
        assert cohort is not None
        block_size = self.blocks.block_size
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
        if used > budget or need + cohort.num_due() > self.blocks.num_free_blocks:
            return None
        if partial is not None:
            partial.extend(partials)
        for req in joiners:
            cohort.join(req)
        cohort.loose = rest
        if cohort.members:
            batch.shape.add_decodes(*cohort.begin_step(self.blocks))
            batch.num_lockstep = len(cohort.members)
        for req in tails:
            if req.num_blocks * block_size <= req.num_computed:
                self.blocks.try_grow(req, req.num_computed + 1)
            batch.add(req, 1)
        return used

    # -- mechanism -------------------------------------------------------------------------
    def complete(self, batch: Batch, now: float) -> list[Request]:
        """Apply a finished iteration at simulated time ``now``; return finished requests.

        Each new token updates its request's first/last token time and largest gap; the
        gaps go to ``self.gaps`` run-length encoded (one run per iteration in the common case
        where every decode's previous token ended the last iteration; the runs' order is not
        part of the contract: statistics use the multiset). Lockstep decodes advance in one
        cohort step.
        """
        gaps = self.gaps
        finished = self.cohort.step(now, gaps) if batch.num_lockstep else []  # type: ignore[union-attr]
        run_gap, run_count = -1.0, 0  # the current run of equal gaps (gaps are >= 0)
        for req, n in zip(batch.requests, batch.num_tokens):  # noqa: B905 - equal by construction
            req.in_flight = False
            computed = req.num_computed + n
            req.num_computed = computed
            generated = req.num_generated
            if computed == req.num_prompt_tokens + generated:
                if generated:
                    gap = now - req.last_token_at
                    if gap > req.max_tbt_s:
                        req.max_tbt_s = gap
                    if gap == run_gap:
                        run_count += 1
                    else:
                        if run_count:
                            gaps.add(run_gap, run_count)
                        run_gap, run_count = gap, 1
                else:
                    req.first_token_at = now
                req.last_token_at = now
                if req.token_times is not None:
                    req.token_times.append(now)
                generated += 1
                req.num_generated = generated
                if generated == req.num_output_tokens:
                    finished.append(req)
        if run_count:
            gaps.add(run_gap, run_count)
        if finished:
            self.retire(finished, now)
        return finished

    def retire(self, finished: list[Request], now: float) -> None:
        """Finished requests (their counters true) leave the running queues and free their blocks."""
        for req in finished:
            self.blocks.free(req)
            req.status = Status.FINISHED
            req.completed_at = now
        if len(finished) <= 4:  # a few finishers: removing them beats rebuilding the queue
            for req in finished:
                self.running.remove(req)
        else:
            self.running = [r for r in self.running if r.status is Status.RUNNING]
        cohort = self.cohort
        if cohort is not None and cohort.active:
            cohort.loose = [r for r in cohort.loose if r.status is Status.RUNNING]
