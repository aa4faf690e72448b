"""SGLang's default scheduler: prefill first, prompts chunked, prefill and decode never mixed.

SGLang runs an iteration either as a *prefill* (``extend``) batch or as a *decode* batch; it
mixes them only with ``--enable-mixed-chunk`` (off by default). Each iteration it first tries
to build a prefill batch, and decodes only when no prompt can be taken:

1. a prompt whose prefill is under way (SGLang's one ``chunked_req``) takes its next chunk,
   ``min(what is left, budget)``;
2. waiting requests are admitted in FCFS order while the budget (``--chunked-prefill-size``),
   ``max_num_seqs`` (``--max-running-requests``) and KV blocks allow, the last one chunked to
   what is left of the budget (it becomes the chunked request);
3. if the batch holds any prefill it runs alone: every running decode waits (SGLang's
   prefill priority, the generation stall that mixed batches remove); else every running
   request decodes one token, and when their new blocks do not fit, requests are retracted
   first, fewest output tokens and then longest prompt first, each to the end of the waiting
   queue (SGLang's ``retract_decode``); speculating, a verify's drafts need their slots too, and
   SGLang retracts from the back of the running batch (the latest admitted) instead.

So under a closed loop at high concurrency the decodes stall while a wave of prompts is
prefilled, and a prompt's TTFT is short while decodes are many: the opposite trade-off to
vLLM v1's mixed batches (``vllm-v1``). The whole prompt's blocks are reserved at admission,
as in the other policies here (SGLang admits against a predicted token usage).

Request intake (``SchedulerConfig.recv_interval``, SGLang's ``--scheduler-recv-interval``):
SGLang's scheduler loop reads its input queue only every N-th iteration while it has work, so a
request that arrives during a busy stretch waits in an inbox for up to N iterations before the
policy sees it; with nothing running it is taken at once (the idle loop polls). N = 1 (SGLang's
default) is the plain queue.
"""

from __future__ import annotations

import math
from collections import deque

from simulator.engine.schedulers.base import Batch, Scheduler
from simulator.workload.request import Request, Status


class SGLangScheduler(Scheduler):
    name = "sglang"

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003 - the base signature
        super().__init__(*args, **kwargs)
        self.chunked: Request | None = None  # the prompt whose prefill is under way, if any
        self.recv_interval = self.config.recv_interval
        self.inbox: deque[Request] = deque()  # arrived, not yet read by the scheduler loop
        self.num_iterations = 0

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

    def _receive(self) -> None:
        """SGLang's loop reads the inbox at every N-th iteration, and at once when idle."""
        self.num_iterations += 1
        if self.inbox and (not self.running or self.num_iterations % self.recv_interval == 0):
            self.waiting.extend(self.inbox)
            self.inbox.clear()

    def schedule(self) -> Batch:
        if self.recv_interval != 1:
            self._receive()
        batch = Batch()
        budget, used = self.token_budget, 0
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
                    self.chunked = None
        waiting = self.waiting
        while waiting and self.chunked is None and used < budget and len(self.running) < self.max_num_seqs:
            req = waiting[0]
            n = req.num_prompt_tokens + req.num_generated
            if not self.blocks.can_admit(n, req):
                break
            self._admit(batch)
            left = n - req.num_computed  # less its cached prefix, if any
            chunk = min(left, budget - used)
            batch.add(req, chunk)
            used += chunk
            if chunk < left:
                self.chunked = req
        if batch.requests or self.chunked is not None:
            return batch  # a prefill batch (or the chunked prompt in flight): decodes wait
        if self.blocks.num_free_blocks < len(self.running) * self.max_decode_blocks:  # (what a decode adds at most)
            self._retract(batch)
        self._add_decodes(batch, math.inf, None)  # every running request decodes; no budget
        return batch

    def _retract(self, batch: Batch) -> None:
        """SGLang's ``retract_decode``: before a decode step whose new blocks do not fit, retract running requests,
        each back to the end of the waiting queue, until the rest grow; the last one stays (the base loop preempts
        it if even it cannot grow). Without speculation the victims go fewest output tokens first and, among those,
        the longest prompt (its sort key, ``(len(output_ids), -len(origin_input_ids))``); with it SGLang leaves the
        batch unsorted and retracts from its back ("For spec decoding, filter_batch API can only filter requests
        from the back", python/sglang/srt/managers/schedule_batch.py), the batch being in the order requests
        joined it: the latest admitted first here. A verify writes its drafts' slots too, so a request needs
        blocks for ``decode_tokens`` (computed + 1 + its drafts), not one token. (SGLang's own check reserves
        ``speculative_num_draft_tokens + topk * num_steps`` slots per request, more than the verify writes; the
        blocks the step really takes are what is checked here, as the step then grows.) The base policy's
        newest-first victim, sent to the front of the queue, is vLLM's."""
        blocks = self.blocks
        self.settle()  # the requests' counters true (a fast path's deferred decodes written: its cohort dissolves)
        decoding = [r for r in self.running if not r.in_flight]
        num_running = len(self.running)
        need = self._decode_blocks(decoding, num_running)
        if need <= blocks.num_free_blocks:
            return
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

    def _decode_blocks(self, requests: list[Request], num_running: int) -> int:
        """New KV blocks these requests' decodes take in a step of ``num_running`` running requests."""
        bs = self.blocks.block_size
        if not self.speculates:  # a plain decode grows by one block exactly when its last block is full
            return sum(1 for r in requests if r.num_blocks * bs <= r.num_computed)
        blocks_for, decode_tokens = self.blocks.blocks_for, self.decode_tokens
        return sum(max(0, blocks_for(decode_tokens(r, num_running)) - r.num_blocks) for r in requests)
