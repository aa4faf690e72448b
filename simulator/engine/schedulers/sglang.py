"""SGLang's default scheduler: prefill first, prompts chunked, prefill and decode never mixed.

SGLang runs an iteration either as a *prefill* (``extend``) batch or as a *decode* batch; it
mixes them only with ``--enable-mixed-chunk`` (off by default). Each iteration it first tries
to build a prefill batch, and decodes only when no prompt can be taken:

1. a prompt whose prefill is under way (SGLang's one ``chunked_req``) takes its next chunk,
   ``min(what is left, budget)``;
2. waiting requests are admitted in FCFS order while the budget (``--chunked-prefill-size``),
   ``max_num_seqs`` (``--max-running-requests``) and the predicted memory allow (below), the last
   one chunked to what is left of the budget (it becomes the chunked request);
3. if the batch holds any prefill it runs alone: every running decode waits (SGLang's
   prefill priority, the generation stall that mixed batches remove); else every running
   request decodes one token, and when their new blocks do not fit, requests are retracted
   first, fewest output tokens and then longest prompt first, each to the end of the waiting
   queue, until the rest's next decode fits (SGLang's ``retract_decode``); speculating, a verify's
   drafts need their slots too, and SGLang retracts from the back of the running batch (the latest
   admitted) instead.

So under a closed loop at high concurrency the decodes stall while a wave of prompts is
prefilled, and a prompt's TTFT is short while decodes are many: the opposite trade-off to
vLLM v1's mixed batches (``vllm-v1``).

Admission against predicted usage (SGLang's ``PrefillAdder``, python/sglang/srt/managers/schedule_policy.py,
its budget in python/sglang/srt/mem_cache/prefill_budget.py): a waiting request is admitted only if its
prompt, its ``max_new_tokens`` (here its output length, what a benchmark client sends with ``ignore_eos``)
clipped to ``CLIP_MAX_NEW_TOKENS`` and a page of slack fit in what is free less the running requests'
predicted growth, each one's remaining output (clipped) times ``new_token_ratio``, and less what the
requests admitted earlier in the pass reserve (their prompt, a page and their clipped ``max_new_tokens``,
none while only a chunk of the prompt goes). A refusal, or a pass that leaves no room, marks the running
batch full (``batch_is_full``): no prefill is tried again until the running batch shrinks (a request
finishes or is retracted), whoever waits; so a request never becomes admissible within a stretch of
decodes, although the ratio moves at each of them. The ratio starts at ``INIT_NEW_TOKEN_RATIO`` (times
``--schedule-conservativeness``, 1), falls by its decay at every decode step that retracts nobody, to
``MIN_NEW_TOKEN_RATIO_FACTOR`` of its start in ``NEW_TOKEN_RATIO_DECAY_STEPS`` steps; a retraction resets
it from the requests left running (their decoded tokens plus ``RETRACT_DECODE_STEPS`` each, over their
``max_new_tokens`` summed, plus one; at most 1), and an idle engine resets it to its start. The ratio
and the flag are this scheduler's state (one per replica, as one per SGLang scheduler process). The
request's blocks are taken as before: its whole prompt at admission, a decode's block when its last
fills; with nothing running a lone request goes when its blocks fit (SGLang clamps ``max_new_tokens``
at intake so that one request fits the pool). Not modelled: the exact check SGLang makes instead for
``ignore_eos`` requests when its radix cache is disabled (``add_one_req_ignore_eos``).

Request intake (``SchedulerConfig.recv_interval``, SGLang's ``--scheduler-recv-interval``):
SGLang's scheduler loop reads its input queue only every N-th iteration while it has work, so a
request that arrives during a busy stretch waits in an inbox for up to N iterations before the
policy sees it; with nothing running it is taken at once (the idle loop polls). N = 1 (SGLang's
default) is the plain queue.
"""

from __future__ import annotations

import math
from collections import deque

from simulator.engine.schedulers.base import Batch, Scheduler, plain_decode_blocks
from simulator.workload.request import Request, Status

# SGLang's admission constants, its defaults (python/sglang/srt/environ.py, "Scheduler token budgeting and
# admission"; the ratio's arithmetic in managers/scheduler_components/new_token_ratio_tracker.py).
INIT_NEW_TOKEN_RATIO = 0.7  # SGLANG_INIT_NEW_TOKEN_RATIO
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14  # SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR
NEW_TOKEN_RATIO_DECAY_STEPS = 600  # SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS
RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS
CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION
SCHEDULE_CONSERVATIVENESS = 1.0  # --schedule-conservativeness


class SGLangScheduler(Scheduler):
    name = "sglang"

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - the base signature
        super().__init__(*args, **kwargs)
        self.chunked: Request | None = None  # the prompt whose prefill is under way, if any
        self.recv_interval = self.config.recv_interval
        self.inbox: deque[Request] = deque()  # arrived, not yet read by the scheduler loop
        self.num_iterations = 0
        # SGLang's new_token_ratio (its NewTokenRatioTracker): the last value it was set to and the decode steps
        # it has decayed since, so that a fast path's stretch of k steps moves it as k single steps do.
        self.init_new_token_ratio = min(INIT_NEW_TOKEN_RATIO * SCHEDULE_CONSERVATIVENESS, 1.0)
        self.min_new_token_ratio = min(self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.new_token_ratio_decay = (self.init_new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self._ratio_set = self.init_new_token_ratio
        self._ratio_steps = 0
        # SGLang's running_batch.batch_is_full: set when admission ran out of predicted room, cleared when
        # the running batch shrinks (seen by _num_running_seen, the running count a schedule() left).
        self.batch_is_full = False
        self._num_running_seen = 0

    def add_request(self, req: Request) -> None:
        if self.recv_interval == 1:
            super().add_request(req)
            return
        req.status = Status.WAITING
        self.inbox.append(req)

    def has_unfinished(self) -> bool:
        return bool(self.inbox) or super().has_unfinished()

    @property
    def num_outstanding(self) -> int:
        return len(self.inbox) + len(self.waiting) + len(self.running)

    @property
    def new_token_ratio(self) -> float:
        """The share of the running requests' remaining outputs admission counts on them growing by."""
        if not self._ratio_steps:
            return self._ratio_set  # (a retraction may set it below the floor, until the next decode step)
        return max(self._ratio_set - self._ratio_steps * self.new_token_ratio_decay, self.min_new_token_ratio)

    def decay_new_token_ratio(self, num_steps: int = 1) -> None:
        """``num_steps`` decode steps that retracted nobody: each lowers the ratio by its decay, to its floor."""
        self._ratio_steps += num_steps

    @property
    def admission_blocked(self) -> bool:
        """Whether the next ``schedule()`` tries no prefill (``batch_is_full`` and nobody left the running batch)."""
        # (an empty running batch is never full: its prompts' KV may have left with a transfer, not through retire,
        # and nothing could shrink it further; kept full, a disaggregated prefill pool's waiting requests stalled)
        return self.batch_is_full and bool(self.running) and len(self.running) >= self._num_running_seen

    def retire(self, finished: list[Request], now: float) -> None:
        super().retire(finished, now)
        self.batch_is_full = False  # the running batch shrank
        if not self.num_outstanding:  # idle: SGLang's on_idle resets the ratio
            self._ratio_set, self._ratio_steps = self.init_new_token_ratio, 0

    def _receive(self) -> None:
        """SGLang's loop reads the inbox at every N-th iteration, and at once when idle."""
        self.num_iterations += 1
        if self.inbox and (not self.running or self.num_iterations % self.recv_interval == 0):
            self.waiting.extend(self.inbox)
            self.inbox.clear()

    def schedule(self) -> Batch:
        if self.recv_interval != 1:
            self._receive()
        if self.batch_is_full and not self.admission_blocked:
            self.batch_is_full = False  # a request left the running batch (a prefill pool's finished prompt), or none is left
        batch = Batch()
        budget, used = self.token_budget, 0
        finishing = None  # the prompt under way, where this step takes its last chunk
        req = self.chunked
        if req is not None:
            left = req.num_prompt_tokens + req.num_generated - req.num_computed
            if req.status is not Status.RUNNING or (req.num_generated and left <= 1):
                self.chunked = None  # preempted, or its prompt is done: a decode now
            elif not req.in_flight:
                chunk = min(left, budget)
                batch.add(req, chunk)
                used = chunk
                if chunk == left:
                    self.chunked, finishing = None, req
        if self.waiting and self.chunked is None and not self.batch_is_full:
            self._admit_waiting(batch, used, finishing)
        self._num_running_seen = len(self.running)
        if batch.requests or self.chunked is not None:
            return batch  # a prefill batch (or the chunked prompt in flight): decodes wait
        retracted = False
        if self.blocks.num_free_blocks < len(self.running) * self.max_decode_blocks:  # (what a decode adds at most)
            retracted = self._retract(batch)
            self._num_running_seen = len(self.running)
        self._add_decodes(batch, math.inf, None)  # every running request decodes; no budget
        if batch and not retracted:
            self.decay_new_token_ratio()
        return batch

    def _admit_waiting(self, batch: Batch, used: int, finishing: Request | None) -> None:
        """SGLang's ``PrefillAdder`` over the waiting queue (see the module doc): admit while the chunk budget
        and ``max_num_seqs`` allow and the predicted room holds each one; a refusal, or no room left after an
        admission, sets ``batch_is_full``. The room, in tokens: the free blocks' (a prefix cache's evictable
        ones among them) less the running requests' remaining outputs times the ratio, less what the pass
        reserves: for ``finishing`` (a prompt whose last chunk this step takes; SGLang keeps its
        ``chunked_req`` out of the running batch until then) a page and its ``max_new_tokens``, for each
        admission its prompt (the blocks it takes), a page and its ``max_new_tokens`` where the whole prompt
        goes now. SGLang checks a request's remaining output, and reserves its whole ``max_new_tokens``."""
        blocks, budget, waiting, running = self.blocks, self.token_budget, self.waiting, self.running
        if len(running) >= self.max_num_seqs:  # at --max-running-requests SGLang marks the batch full too
            self.batch_is_full = True
            return
        bs = blocks.block_size
        rest = self.remaining_outputs(CLIP_MAX_NEW_TOKENS) if running else 0
        room = float(blocks.num_free_blocks * bs)
        if finishing is not None:
            rest -= min(finishing.num_output_tokens - finishing.num_generated, CLIP_MAX_NEW_TOKENS)
            room -= bs + min(finishing.num_output_tokens, CLIP_MAX_NEW_TOKENS)
        room -= rest * self.new_token_ratio
        while waiting and self.chunked is None and len(running) < self.max_num_seqs:
            req = waiting[0]
            n = req.num_prompt_tokens + req.num_generated
            taken = blocks.admission_blocks(n, req)
            fits = blocks.num_free_blocks - taken >= blocks.watermark_blocks
            if fits and running:  # (a lone request goes when its blocks fit)
                fits = taken * bs + min(req.num_output_tokens - req.num_generated, CLIP_MAX_NEW_TOKENS) + bs < room
            if not fits:
                self.batch_is_full = True
                return
            if used >= budget:
                return  # the chunk budget is spent (by the last chunk of the prompt under way)
            self._admit(batch)
            left = n - req.num_computed  # less its cached prefix, if any
            chunk = min(left, budget - used)
            batch.add(req, chunk)
            used += chunk
            if chunk < left:
                self.chunked = req
            room -= taken * bs + bs + (min(req.num_output_tokens, CLIP_MAX_NEW_TOKENS) if chunk == left else 0)
            if room <= 0:
                self.batch_is_full = True
                return
            if used >= budget:
                return

    def _retract(self, batch: Batch) -> bool:
        """SGLang's ``retract_decode``: before a decode step whose new blocks do not fit, retract running requests,
        each back to the end of the waiting queue, until the rest's next decode fits (its loop's
        ``check_decode_mem(selected_indices=...)``, python/sglang/srt/managers/schedule_batch.py; before late 2025 it
        retracted until ``RETRACT_DECODE_STEPS`` tokens a request were free); the last one stays (the base loop
        preempts it if even it cannot grow). Returns whether the step's blocks did not fit (SGLang then calls
        ``retract_decode``, which resets the ratio from the requests left, :meth:`_reset_ratio`, instead of a
        decay). Without speculation the victims go fewest output tokens first and, among those, the longest prompt (its sort key, ``(len(output_ids), -len(origin_input_ids))``); with it SGLang leaves the
        batch unsorted and retracts from its back ("For spec decoding, filter_batch API can only filter requests
        from the back", python/sglang/srt/managers/schedule_batch.py), the batch being in the order requests
        joined it: the latest admitted first here. A verify writes its drafts' slots too, so a request needs
        blocks for ``decode_tokens`` (computed + 1 + its drafts), not one token. (SGLang's own check reserves
        ``speculative_num_draft_tokens + topk * num_steps`` slots per request, more than the verify writes; the
        blocks the step really takes are what is checked here, as the step then grows.) The base policy's
        newest-first victim, sent to the front of the queue, is vLLM's."""
        blocks = self.blocks
        if not self.speculates and self.new_decode_blocks() <= blocks.num_free_blocks:
            return False  # (the usual answer, counted without settling: a fast path's cohort stays)
        self.settle()  # the requests' counters true (a fast path's deferred decodes written: its cohort dissolves)
        decoding = [r for r in self.running if not r.in_flight]
        num_running = len(self.running)
        need = self._decode_blocks(decoding, num_running)
        if need <= blocks.num_free_blocks:
            return False
        if self.speculates:
            order = sorted(decoding, key=lambda r: r.admitted_seq)
        else:
            order = sorted(decoding, key=lambda r: (r.num_generated, -r.num_prompt_tokens), reverse=True)
        k = self.decode_k(num_running)
        while len(order) > 1 and need > blocks.num_free_blocks:
            victim = order.pop()
            need -= self._decode_blocks([victim], num_running)  # (before the preemption clears its counters)
            self._preempt(victim, batch)
            self.waiting.append(self.waiting.popleft())  # (the base sent it to the front; SGLang extends the queue)
            num_running -= 1
            if self.decode_k(num_running) != k:  # an adaptive k moved with the running count: recount the rest
                k = self.decode_k(num_running)
                need = self._decode_blocks(order, num_running)
        if batch.preempted:
            self.batch_is_full = False  # the running batch shrank
        self._reset_ratio()  # (SGLang's retract_decode sets it even where only one request was left to retract)
        return True

    def _reset_ratio(self) -> None:
        """SGLang's ratio after a retraction, from the requests left running (counters true): their decoded
        tokens plus ``RETRACT_DECODE_STEPS`` each, over their ``max_new_tokens`` (output lengths) summed plus one,
        at most 1."""
        running = self.running
        decoded = sum(r.num_generated for r in running)
        max_new = sum(r.num_output_tokens for r in running)
        self._ratio_set = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(running)) / (max_new + 1))
        self._ratio_steps = 0

    def _decode_blocks(self, requests: list[Request], num_running: int) -> int:
        """New KV blocks these requests' decodes take in a step of ``num_running`` running requests."""
        if not self.speculates:  # (these requests are not in flight: settled, about to decode)
            return plain_decode_blocks(requests, self.blocks.block_size)
        blocks_for, decode_tokens = self.blocks.blocks_for, self.decode_tokens
        return sum(max(0, blocks_for(decode_tokens(r, num_running)) - r.num_blocks) for r in requests)
