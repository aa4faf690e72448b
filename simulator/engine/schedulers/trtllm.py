"""TensorRT-LLM's default scheduling: in-flight batching with every request's memory guaranteed.

TensorRT-LLM (its PyTorch backend, ``trtllm-serve``) schedules in two stages each iteration:

1. the **capacity scheduler**, ``GUARANTEED_NO_EVICT`` by default, admits a waiting request only
   if KV blocks for its whole length (prompt plus every output token it may produce) can be
   set aside, so a running request never needs more and nothing is ever evicted;
2. the **micro-batch scheduler** puts every running generation request (one token each) and
   then whole context requests, in arrival order, into one step while the step's tokens stay
   within ``max_num_tokens`` (the token budget; chunked context is off by default, so a prompt
   runs in one piece and waits for a step with room for all of it).

Against vLLM V1 (``vllm-v1``): no chunking (a prompt that does not fit what the decodes leave of
the budget waits), and admission reserves the whole output up front (fewer requests run at
once in the same cache, none is ever preempted). A prompt longer than the budget is refused
(TensorRT-LLM needs ``max_num_tokens`` to hold the longest prompt without chunked context).
"""

from __future__ import annotations

import math

from simulator.engine.schedulers.base import Batch, Scheduler
from simulator.workload.request import Request


class TRTLLMScheduler(Scheduler):
    name = "trtllm"

    def reserve_tokens(self, req: Request) -> int:
        return req.num_prompt_tokens + req.num_output_tokens  # GUARANTEED_NO_EVICT: the whole request

    def rejection_reason(self, req: Request) -> str | None:
        if req.num_prompt_tokens > self.token_budget:
            return (f"prompt {req.num_prompt_tokens} tokens exceeds max_num_tokens {self.token_budget} "
                    "(trtllm runs a prompt in one piece)")
        return super().rejection_reason(req)

    def schedule(self) -> Batch:
        batch = Batch()
        # Every running request decodes: its blocks were reserved at admission, so none grows short.
        used = self._add_decodes(batch, math.inf, None)
        budget, waiting = self.token_budget, self.waiting
        while waiting and len(self.running) < self.max_num_seqs:
            req = waiting[0]
            if used + self.prompt_step_tokens(req) > budget or \
                    not self.blocks.can_admit(self.reserve_tokens(req), req):
                break
            self._admit(batch)
            n = req.num_prompt_tokens + req.num_generated - req.num_computed  # less a cached prefix, if any
            batch.add(req, n)
            used += n
        return batch
