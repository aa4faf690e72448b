"""FasterTransformer: request-level batching.

A batch of up to ``max_num_seqs`` waiting requests is admitted only when nothing is
running; its prompts run together in one iteration, then the batch decodes until its
last request finishes. Memory is reserved for ``max_model_len`` per request up front.
Requests that finish early leave their slot idle until the whole batch is done.
"""

from __future__ import annotations

import math

from simulator.engine.schedulers.base import Batch, Scheduler


class FasterTransformerScheduler(Scheduler):
    name = "fastertransformer"

    def reserve_tokens(self, req) -> int:  # type: ignore[override]
        return self.max_model_len

    def schedule(self) -> Batch:
        batch = Batch()
        if self.running:  # the batch decodes (blocks were reserved for max_model_len)
            self._add_decodes(batch, math.inf, None)
            return batch
        waiting = self.waiting
        while waiting and len(self.running) < self.max_num_seqs and self.blocks.can_admit(self.max_model_len):
            req = self._admit(batch)
            batch.add(req, req.num_prompt_tokens + req.num_generated - req.num_computed)  # less a cached prefix
        return batch
