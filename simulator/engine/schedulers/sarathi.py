"""Sarathi-Serve: chunked prefills in stall-free hybrid batches under one token budget.

Every iteration carries, in this order: (1) one token for every running decode,
preempting the newest running request when a decode cannot get a KV slot; (2) the
next chunk of each partially prefilled request, in arrival order; (3) new requests from ``waiting``,
admitted only if blocks for their whole prompt can be allocated. Each chunk is
``min(remaining prompt, budget - tokens so far)``, so an iteration never exceeds the
token budget tau (``chunk_size``) and decodes are never paused by a prefill.

vLLM v1 (chunked prefill always on, one token budget) is this policy with vLLM's
defaults (budget 2048); it is registered as ``vllm-v1`` rather than copied. (v1
allocates blocks chunk by chunk; here the whole prompt is reserved at admission.)
"""

from __future__ import annotations

from simulator.engine.schedulers.base import Batch, Scheduler
from simulator.workload.request import Request, Status


class SarathiScheduler(Scheduler):
    name = "sarathi"
    supports_lockstep = True

    def decode_steady(self) -> bool:
        # Every decode fits the budget; nothing is admitted: no one waits, the budget or
        # max_num_seqs is used up, or the head does not fit (free blocks only shrink while
        # decodes grow, so it keeps not fitting).
        running = self.running
        if len(running) > self.token_budget or not self._all_running_decode():
            return False
        waiting = self.waiting
        return (not waiting or len(running) >= self.token_budget or len(running) >= self.max_num_seqs
                or not self.blocks.can_admit(waiting[0].num_prompt_tokens + waiting[0].num_generated, waiting[0]))

    def chunk_steady(self) -> tuple[Request, int] | None:
        # The first partial prefill (running order) takes what the decodes leave of the budget;
        # while that is not its last chunk the budget is full, so later partials get nothing and
        # nobody is admitted, whoever waits. Lockstep only: the cohort carries the decodes.
        cohort = self.cohort
        if cohort is None or not cohort.active:
            return None
        prefill, missing, num_partial = None, 0, 0
        for req in cohort.loose:
            if req.in_flight:
                return None
            left = req.num_prompt_tokens + req.num_generated - req.num_computed
            if left > 1:
                num_partial += 1
                if prefill is None:
                    prefill, missing = req, left
            elif not req.num_generated:  # a prompt's 1-token tail: a prefill entry before the chunk
                return None
        if prefill is None:
            return None
        chunk = self.token_budget - (len(cohort.members) + len(cohort.loose) - num_partial)  # less the decodes
        return (prefill, chunk) if 0 < chunk < missing else None

    def schedule(self) -> Batch:
        batch = Batch()
        budget = self.token_budget
        partial: list = []
        used = self._add_decodes(batch, budget, partial)
        for req in partial:
            if used >= budget:
                break
            if req.status is not Status.RUNNING:  # preempted as a victim above
                continue
            chunk = min(req.num_prompt_tokens + req.num_generated - req.num_computed, budget - used)
            batch.add(req, chunk)
            used += chunk
        waiting = self.waiting
        while waiting and used < budget and len(self.running) < self.max_num_seqs:
            req = waiting[0]
            if not self.blocks.can_admit(req.num_prompt_tokens + req.num_generated, req):
                break
            self._admit(batch)  # num_computed: its cached prefix, if any
            chunk = min(req.num_prompt_tokens + req.num_generated - req.num_computed, budget - used)
            batch.add(req, chunk)
            used += chunk
        return batch
