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

from simulator.request import Status
from simulator.schedulers.base import Batch, Scheduler


class SarathiScheduler(Scheduler):
    name = "sarathi"

    def decode_steady(self) -> bool:
        # Every decode fits the budget; nothing is admitted: no one waits, the budget or
        # max_num_seqs is used up, or the head does not fit (free blocks only shrink while
        # decodes grow, so it keeps not fitting).
        running = self.running
        if len(running) > self.token_budget or not self._all_running_decode():
            return False
        waiting = self.waiting
        return (not waiting or len(running) >= self.token_budget or len(running) >= self.max_num_seqs
                or not self.blocks.can_admit(waiting[0].num_prompt_tokens + waiting[0].num_generated))

    def schedule(self) -> Batch:
        batch = Batch()
        budget = self.token_budget
        used = 0
        running = self.running
        partial: list = []
        # Decodes: the hot loop. Entries are appended in running order as Batch.add would;
        # the decodes' shape sums are kept in locals and folded in once (integer sums, exact).
        block_size = self.blocks.block_size
        append_req, append_tokens = batch.requests.append, batch.num_tokens.append
        num_decodes = kv_sum = kv_sq_sum = kv_max = 0
        i, num_running = 0, len(running)
        while i < num_running:
            req = running[i]
            if req.in_flight:
                i += 1
                continue
            computed = req.num_computed
            if req.num_prompt_tokens + req.num_generated - computed > 1:
                partial.append(req)
                i += 1
                continue
            if used >= budget:
                break
            if req.num_blocks * block_size <= computed:  # the last block is full: grow, maybe preempting
                grown = self._grow_or_preempt(req, computed + 1, batch)
                num_running = len(running)  # preemption removes from the end
                if not grown:
                    break
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
            if not self.blocks.can_admit(req.num_prompt_tokens + req.num_generated):
                break
            self._admit(batch)
            chunk = min(req.num_prompt_tokens + req.num_generated, budget - used)
            batch.add(req, chunk)
            used += chunk
        return batch
