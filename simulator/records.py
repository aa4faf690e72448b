"""Per-iteration and per-stage records, and the counter of finished requests.

The replica and pipeline processes write here; the engine reads it after the run. It
sits below both (it imports neither), so the engine can import the replica without an
import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.request import Request
    from simulator.schedulers import Batch

# Recorded per iteration. A decode contributes exactly one token, so ``num_decodes`` is also
# the decode-token count; iteration_frame() derives that column and ``batch_size``.
ITERATION_COLUMNS = (
    "replica_id", "started_at", "duration_s", "num_prefill_tokens", "num_decodes",
    "num_prefills", "kv_blocks_used", "num_preempted", "num_admitted",
)
FRAME_COLUMNS = (
    "replica_id", "started_at", "duration_s", "num_prefill_tokens", "num_decode_tokens", "batch_size",
    "num_prefills", "num_decodes", "kv_blocks_used", "num_preempted", "num_admitted",
)
# One row per (micro-batch, pipeline stage) execution; only replicas with pp > 1 write them.
STAGE_COLUMNS = ("replica_id", "micro_batch_id", "stage", "started_at", "duration_s")


class Recorder:
    """Collects per-iteration records as tuples (cheap to append, tidy to export) and
    counts terminal request events for progress reporting."""

    __slots__ = ("iterations", "stages", "num_done", "rejected", "_on_progress", "_next_report", "_report_every")

    def __init__(self, on_progress: Callable[[int], None] | None = None, report_every: int = 1) -> None:
        self.iterations: list[tuple] = []
        self.stages: list[tuple] = []  # STAGE_COLUMNS rows, pipelined replicas only
        self.num_done = 0
        self.rejected: list[Request] = []
        self._on_progress = on_progress
        self._report_every = max(1, report_every)
        self._next_report = self._report_every

    def on_iteration(self, replica_id: int, started_at: float, duration: float, batch: Batch, kv_blocks_used: int) -> None:
        s = batch.shape
        self.iterations.append((replica_id, started_at, duration, s.num_prefill_tokens, s.num_decodes,
                                s.num_prefills, kv_blocks_used, len(batch.preempted), len(batch.admitted)))

    def on_decode_stretch(self, replica_id: int, ends: list[float], durations: list[float], num_decodes: int,
                          kv_blocks_used: list[int]) -> None:
        """A skipped decode-only stretch (:mod:`simulator.fastforward`): iteration ``i`` started at
        ``ends[i]`` and took ``durations[i]``; the rows equal those single steps would write."""
        k = len(durations)
        self.iterations.extend(zip(repeat(replica_id, k), ends, durations, repeat(0, k), repeat(num_decodes, k),
                                   repeat(0, k), kv_blocks_used, repeat(0, k), repeat(0, k), strict=False))  # ends has k + 1

    def on_stage(self, replica_id: int, micro_batch_id: int, stage: int, started_at: float, duration: float) -> None:
        self.stages.append((replica_id, micro_batch_id, stage, started_at, duration))

    def _count(self, n: int) -> None:
        self.num_done += n
        if self._on_progress is not None and self.num_done >= self._next_report:
            self._on_progress(self.num_done)
            self._next_report = self.num_done + self._report_every

    def on_finish(self, finished: list[Request]) -> None:
        self._count(len(finished))

    def on_reject(self, req: Request) -> None:
        self.rejected.append(req)
        self._count(1)
