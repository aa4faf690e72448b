"""Orca: iteration-level batching without chunking.

Every iteration runs all running decodes plus whole new prompts (no token budget).
Memory is reserved for the maximum sequence length (``max_model_len``) at admission,
as the Sarathi-Serve reference implementation's Orca block manager does, so a
running request never needs more blocks and nothing is ever preempted.
"""

from __future__ import annotations

import math

from simulator.engine.schedulers.base import Batch, Scheduler


class OrcaScheduler(Scheduler):
    name = "orca"

    def reserve_tokens(self, req) -> int:  # type: ignore[override]
        return self.max_model_len

    def schedule(self) -> Batch:
        batch = Batch()
        # Every running request decodes (its whole prompt ran at admission; the max-length
        # reservation means blocks never run short).
        self._add_decodes(batch, math.inf, None)
        waiting = self.waiting
        while waiting and len(self.running) < self.max_num_seqs and self.blocks.can_admit(self.max_model_len):
            req = self._admit(batch)
            batch.add(req, req.num_prompt_tokens + req.num_generated - req.num_computed)  # less a cached prefix
        return batch
