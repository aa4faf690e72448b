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
from simulator.workload.request import Status


class SarathiScheduler(Scheduler):
    name = "sarathi"

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
