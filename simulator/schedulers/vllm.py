"""vLLM v0 (prefill-prioritising, no chunked prefill).

Each iteration first admits waiting requests, in FCFS order, while KV blocks (above
the watermark), ``max_num_seqs`` and ``max_num_batched_tokens`` allow; a request's
whole prompt (plus, after a preemption, its generated tokens) runs in one piece. If
anything was admitted the iteration is *prefill-only*: every running decode waits,
which is the generation stall Sarathi-Serve removes. Otherwise every running request
decodes one token; when blocks run out the newest running request is preempted.
"""

from __future__ import annotations

from simulator.schedulers.base import Batch, Scheduler


class VLLMScheduler(Scheduler):
    name = "vllm"

    def rejection_reason(self, req):  # type: ignore[override]
        if req.num_prompt_tokens + req.num_output_tokens - 1 > self.token_budget:
            return (f"prompt+output = {req.num_prompt_tokens + req.num_output_tokens} tokens exceeds "
                    f"max_num_batched_tokens {self.token_budget} (vllm runs a recomputed prompt in one piece)")
        return super().rejection_reason(req)

    def decode_steady(self) -> bool:
        # Nothing is admitted (the admission loop breaks on the head at once) and every
        # running request decodes; free blocks only shrink, so a head that does not fit keeps not fitting.
        if not self._all_running_decode():
            return False
        if not self.waiting:
            return True
        head = self.waiting[0]
        n = head.num_prompt_tokens + head.num_generated
        return n > self.token_budget or len(self.running) >= self.max_num_seqs or not self.blocks.can_admit(n)

    def schedule(self) -> Batch:
        batch = Batch()
        blocks, waiting, running = self.blocks, self.waiting, self.running
        num_batched = 0
        num_seqs = len(running)
        while waiting:
            req = waiting[0]
            n = req.num_prompt_tokens + req.num_generated
            if num_batched + n > self.token_budget or num_seqs >= self.max_num_seqs or not blocks.can_admit(n):
                break
            self._admit(batch)
            batch.add(req, n)
            num_batched += n
            num_seqs += 1
        if batch.requests:
            return batch  # prefill-only iteration: running decodes stall
        # Decodes: as in SarathiScheduler, entries appended in place and shape sums folded once.
        block_size = blocks.block_size
        append_req, append_tokens = batch.requests.append, batch.num_tokens.append
        num_decodes = kv_sum = kv_sq_sum = kv_max = 0
        i, num_running = 0, len(running)
        while i < num_running:
            req = running[i]
            if req.in_flight:
                i += 1
                continue
            computed = req.num_computed
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
            i += 1
        batch.shape.add_decodes(num_decodes, kv_sum, kv_sq_sum, kv_max)
        return batch
