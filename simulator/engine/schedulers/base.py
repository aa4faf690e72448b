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

Speed-ups live outside the contract (:mod:`simulator.fast`): lockstep decodes override the
mechanism methods below (``_add_decodes``, ``_admit``, ``_preempt``, ``complete``, ``retire``)
for the policies :mod:`simulator.fast.steady` lists, and event skipping reads the policies'
steady-state rules from there. A policy here only builds its batch.

Extension point: subclass :class:`Scheduler`, implement ``schedule`` (and
``reserve_tokens`` if the policy reserves memory up front), and add one line to
``simulator.config.schedulers.SCHEDULERS``.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

from simulator.config.catalog import GPUSpec
from simulator.config.run_config import SchedulerConfig
from simulator.costmodel.base import BatchShape
from simulator.engine.kvcache import BlockManager
from simulator.engine.tbt import GapLog
from simulator.workload.request import Request, Status

if TYPE_CHECKING:
    from simulator.engine.speculative import Speculation

_FCFS_KEY = attrgetter("arrival_at", "request_id")  # running order: arrival, ties by id


def insert_fcfs(queue: list[Request], req: Request) -> None:
    """Insert in running order: at the end, unless a re-admitted request goes back to its arrival place."""
    if queue and _FCFS_KEY(queue[-1]) > _FCFS_KEY(req):
        insort(queue, req, key=_FCFS_KEY)
    else:
        queue.append(req)


@dataclass(slots=True, init=False)
class Batch:
    """One iteration's work. ``requests[i]`` contributes ``num_tokens[i]`` tokens, and
    ``num_lockstep`` decodes carried by a fast path (:mod:`simulator.fast.lockstep`; 0 in the
    plain loop) one token each (they are in ``shape``, not in ``requests``)."""

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


def outputs_left(requests: Iterable[Request], clip: int) -> int:
    """Tokens these requests have still to generate, at most ``clip`` each (their counters true)."""
    return sum(min(r.num_output_tokens - r.num_generated, clip) for r in requests)


def plain_decode_blocks(requests: Iterable[Request], block_size: int) -> int:
    """New KV blocks a plain decode step takes for these requests: one each, not in flight, whose last block is full."""
    return sum(1 for r in requests if not r.in_flight and r.num_blocks * block_size <= r.num_computed)


class Scheduler:
    """Base policy. Subclasses implement :meth:`schedule`."""

    name = "base"
    # The most KV blocks one request's decode step can add: its fed-back token's slot, so one (a speculating
    # scheduler's verify writes its drafts' slots too: SpeculativeMixin). What a policy that checks the step's
    # memory before building it (SGLang's retract_decode) bounds the step's need by, at no per-request cost.
    max_decode_blocks: int = 1
    # A speculating replica's drafts and acceptance stream (simulator.engine.speculative), set on a scheduler whose
    # class has SpeculativeMixin over its policy; None for a plain one. Ask :attr:`speculates`.
    speculation: Speculation | None = None

    def __init__(self, config: SchedulerConfig, blocks: BlockManager, max_model_len: int,
                 gpu: GPUSpec | None = None, attention_dp: int = 1) -> None:
        self.config = config
        self.blocks = blocks
        self.max_model_len = max_model_len
        self.max_num_seqs = config.seq_limit(gpu, blocks.num_blocks * blocks.block_size, max_model_len)
        # The GPU picks some policies' default; SGLang's is divided over the attention-DP ranks.
        self.token_budget = config.token_budget(max_model_len, gpu, attention_dp)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._admission_counter = 0  # per-scheduler sequence, not a global
        self.gaps = GapLog()  # every TBT gap of the tokens this scheduler's iterations produced

    @property
    def speculates(self) -> bool:
        """Its decodes verify drafts (the one test of it: a speculating scheduler's ``speculation`` is set)."""
        return self.speculation is not None

    def settle(self) -> None:
        """Make every running request's counters true before anything outside the policy reads
        them: always so here; a fast path that defers them (lockstep decodes) writes them."""

    def remaining_outputs(self, clip: int) -> int:
        """Sum over the running requests of the tokens each has still to generate, at most ``clip``
        each (what a policy that predicts its memory reads: SGLang's admission); a fast path that
        defers the counters (lockstep decodes) answers from its own."""
        return outputs_left(self.running, clip)

    def new_decode_blocks(self) -> int:
        """KV blocks the running requests not in flight take in a plain decode step (one each whose last block is
        full): what a policy that checks the step's memory before building it reads (SGLang's retract_decode);
        a fast path that defers the counters (lockstep decodes) answers from its own."""
        return plain_decode_blocks(self.running, self.blocks.block_size)

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

    def prompt_step_tokens(self, req: Request) -> int:
        """The tokens ``req``'s prompt adds to a step where it runs in one piece: the whole prompt (and any output
        a preemption left to recompute) less a prefix its cache would find now (TensorRT-LLM's
        _reuse_adjusted_compute; batch waiting's fit test under a policy that runs prompts whole)."""
        return req.num_prompt_tokens + req.num_generated - self.blocks.cached_prefix_tokens(req)

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
        insert_fcfs(self.running, req)
        batch.admitted.append(req)
        return req

    def _preempt(self, req: Request, batch: Batch) -> None:
        """Preempt by recompute: drop the KV cache, re-queue at the front."""
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

    def decode_k(self, num_running: int) -> int:
        """Draft tokens each decode verifies in a step of ``num_running`` running requests: none here."""
        return 0

    def decode_tokens(self, req: Request, num_running: int) -> int:
        """KV tokens ``req`` must hold for its next decode step in a step of ``num_running`` running requests (what
        :meth:`_add_decodes` grows it to, a token budget aside): the fed-back token's slot past what is computed."""
        return req.num_computed + 1

    # -- policy --------------------------------------------------------------------------
    def schedule(self) -> Batch:
        raise NotImplementedError

    def _add_decodes(self, batch: Batch, budget: float, partial: list[Request] | None) -> int:
        """One token for each running request not in flight, in running order, until ``budget``
        tokens; KV blocks grow as needed, preempting the newest. With ``partial`` given, a
        request with more than one token missing goes there instead (its chunk is the policy's
        business). Returns the tokens added.

        The hot loop of every decode iteration: entries are appended in place as
        :meth:`Batch.add` would, and the decodes' shape sums kept in locals and folded in once
        (integer sums, so exactly what per-entry adds would give).
        """
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

    # -- mechanism -------------------------------------------------------------------------
    def complete(self, batch: Batch, now: float) -> list[Request]:
        """Apply a finished iteration at simulated time ``now``; return finished requests.

        Each new token updates its request's first/last token time and largest gap; the
        gaps go to ``self.gaps`` run-length encoded (one run per iteration in the common case
        where every decode's previous token ended the last iteration; the runs' order is not
        part of the contract: statistics use the multiset). Decodes carried by a fast path
        (``batch.num_lockstep``) advance first, through :meth:`carried_step`.
        """
        gaps = self.gaps
        finished = self.carried_step(now) if batch.num_lockstep else []
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

    def carried_step(self, now: float) -> list[Request]:
        """Advance the decodes a fast path carries outside ``batch.requests`` by one token at ``now``;
        return those that finished (counters true). The plain loop carries none; a fast path that
        sets ``Batch.num_lockstep`` overrides it (:class:`simulator.fast.lockstep.LockstepMixin`)."""
        raise NotImplementedError("a batch with lockstep decodes comes from a scheduler that carries them")

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
