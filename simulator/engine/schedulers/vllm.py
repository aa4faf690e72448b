"""vLLM v0 (prefill-prioritising, no chunked prefill).

Each iteration first admits waiting requests, in FCFS order, while KV blocks (above
the watermark), ``max_num_seqs`` and ``max_num_batched_tokens`` allow; a request's
whole prompt (plus, after a preemption, its generated tokens) runs in one piece. If
anything was admitted the iteration is *prefill-only*: every running decode waits,
which is the generation stall Sarathi-Serve removes. Otherwise every running request
decodes one token; when blocks run out the newest running request is preempted.
"""

from __future__ import annotations

import math

from simulator.engine.schedulers.base import Batch, Scheduler


class VLLMScheduler(Scheduler):
    name = "vllm"

    def rejection_reason(self, req):  # type: ignore[override]
        # max_model_len first, as vLLM answers it: its OpenAI server refuses prompt + max_tokens over max_model_len
        # ("This model's maximum context length is ...", OpenAIServing._validate_prompt_and_tokenize) before the
        # scheduler ever sees the request; only one within it meets the scheduler's token budget (which a run's config
        # holds to the context at start, SchedulerConfig.refuse_budget_below_context; a policy built by hand may not).
        reason = super().rejection_reason(req)
        if reason is None and req.num_prompt_tokens + req.num_output_tokens - 1 > self.token_budget:
            reason = (f"prompt+output = {req.num_prompt_tokens + req.num_output_tokens} tokens exceeds "
                      f"max_num_batched_tokens {self.token_budget} (vllm runs a recomputed prompt in one piece)")
        return reason

    def schedule(self) -> Batch:
        batch = Batch()
        blocks, waiting, running = self.blocks, self.waiting, self.running
        num_batched = 0
        num_seqs = len(running)
        while waiting:
            req = waiting[0]
            n = req.num_prompt_tokens + req.num_generated
            if num_batched + n > self.token_budget or num_seqs >= self.max_num_seqs or not blocks.can_admit(n, req):
                break
            self._admit(batch)
            n -= req.num_computed  # its cached prefix, if any
            batch.add(req, n)
            num_batched += n
            num_seqs += 1
        if batch.requests:
            return batch  # prefill-only iteration: running decodes stall
        self._add_decodes(batch, math.inf, None)  # every running request decodes; no budget
        return batch
