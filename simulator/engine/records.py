"""Per-iteration and per-stage records, and the counter of finished requests.

The replica and pipeline processes write here; the engine reads it after the run. It
sits below both (it imports neither), so the engine can import the replica without an
import cycle.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.engine.schedulers import Batch
    from simulator.workload.request import Request

# Recorded per iteration. A decode contributes exactly one token, so ``num_decodes`` is also
# the decode-token count; iteration_frame() derives that column and ``batch_size``.
# num_prefill_tokens: the prompts' tokens a step computes; num_draft_tokens: the drafts a speculating step
# verifies beside its decodes (0 without speculation).
ITERATION_COLUMNS = (
    "replica_id", "started_at", "duration_s", "num_prefill_tokens", "num_decodes",
    "num_prefills", "kv_blocks_used", "num_preempted", "num_admitted", "num_draft_tokens",
)
FRAME_COLUMNS = (
    "replica_id", "started_at", "duration_s", "num_prefill_tokens", "num_decode_tokens", "batch_size",
    "num_prefills", "num_decodes", "kv_blocks_used", "num_preempted", "num_admitted", "num_draft_tokens",
)
# One row per (micro-batch, pipeline stage) execution; only replicas with pp > 1 write them.
STAGE_COLUMNS = ("replica_id", "micro_batch_id", "stage", "started_at", "duration_s")


# Typecodes of ITERATION_COLUMNS: replica_id, two float64 times, then counts. Counts are stored
# as 32-bit ints (each is far below 2**31: tokens, blocks, requests of one iteration) and read
# out as int64: 48 bytes a row instead of 80 (a 1M-request cluster run makes ~17M rows).
_ITERATION_TYPES = "iddiiiiiii"
_NUMPY_TYPES = {"d": "float64", "i": "int32"}
# Buffered rows are converted by numpy from this many (its per-call cost outweighs the gain below).
FILL_ROWS = 256
_ZEROS = array("i", bytes(4 * 256))  # zero columns of a decode stretch are slices of this


def _fill(col: array, values: Sequence, typecode: str) -> None:
    """Append Python numbers to a typed column. numpy converts them in C at about half the
    cost of ``array.extend``/``fromlist``, which parse each item as a call argument; the
    values are the same (a float64 is copied bit for bit; an int beyond the column's range
    raises, as ``extend`` would)."""
    import numpy as np  # loaded by then: runs import it; a module-level import would slow start-up

    col.frombytes(np.fromiter(values, dtype=_NUMPY_TYPES[typecode], count=len(values)).tobytes())


class IterationLog(Sequence):
    """Iteration records (:data:`ITERATION_COLUMNS` rows) kept as typed columns.

    A row costs 8 bytes a field instead of a tuple and its Python objects (~3x less).
    Rows are appended as tuples into a small buffer that moves into ``array`` columns
    every ``BUFFER`` rows, so appending stays as cheap as a list append. It reads as the
    sequence of tuples it replaces (``len``, indexing, iteration, ``==`` with another log
    or a list); :meth:`columns` hands the columns to numpy/pandas without per-row work.
    """

    BUFFER = 4096
    __slots__ = ("_cols", "_buf")

    def __init__(self, rows: Iterable[tuple] = ()) -> None:
        self._cols = [array(t) for t in _ITERATION_TYPES]
        self._buf: list[tuple] = []
        for row in rows:
            self.append(row)

    def append(self, row: tuple) -> None:
        buf = self._buf
        buf.append(row)
        if len(buf) >= self.BUFFER:
            self._flush()

    def extend(self, rows: Iterable[tuple]) -> None:
        for row in rows:
            self.append(row)

    def extend_stretch(self, replica_id: int, starts: list[float], durations: list[float],
                       num_decodes: int, kv_blocks_used: list[int], num_prefill_tokens: int = 0,
                       num_prefills: int = 0) -> None:
        """Append the rows of a stretch (:meth:`Recorder.on_stretch`): the constant columns
        are built as arrays (C-level repeats) and the others copied from lists
        (``fromlist``: half the cost of ``extend`` with a list), not per row."""
        k = len(durations)
        if len(starts) != k or len(kv_blocks_used) != k:  # invariant: the columns stay aligned
            raise ValueError("extend_stretch: columns of unequal length")
        self._flush()
        zeros = _ZEROS[:k] if k <= len(_ZEROS) else array("i", bytes(4 * k))
        rid, start, dur, prefill_tokens, decodes, prefills, used, preempted, admitted, drafts = self._cols
        rid.extend(array("i", (replica_id,)) * k)
        start.fromlist(starts)
        dur.fromlist(durations)
        prefill_tokens.extend(array("i", (num_prefill_tokens,)) * k if num_prefill_tokens else zeros)
        decodes.extend(array("i", (num_decodes,)) * k)
        prefills.extend(array("i", (num_prefills,)) * k if num_prefills else zeros)
        used.fromlist(kv_blocks_used)
        preempted.extend(zeros)
        admitted.extend(zeros)
        drafts.extend(zeros)  # (a speculating run takes the step-by-step loop: no stretches)

    def extend_log(self, other: IterationLog) -> None:
        """Append another log's rows (column by column, no per-row work)."""
        self._flush()
        other._flush()
        for col, values in zip(self._cols, other._cols, strict=True):
            col.extend(values)

    def _flush(self) -> None:
        buf = self._buf
        if buf:
            if len(buf) <= 3:  # the usual case beside stretches: a step or a few between them
                cols = self._cols
                for row in buf:
                    for col, value in zip(cols, row):  # noqa: B905 - a row has every column
                        col.append(value)
            elif len(buf) >= FILL_ROWS:
                for col, values, t in zip(self._cols, zip(*buf, strict=True), _ITERATION_TYPES, strict=True):
                    _fill(col, values, t)
            else:
                for col, values in zip(self._cols, zip(*buf, strict=True), strict=True):
                    col.extend(values)
            buf.clear()

    def columns(self, copy: bool = True) -> dict[str, Any]:
        """The columns as numpy arrays (int64 / float64), keyed by ITERATION_COLUMNS.
        ``copy=False`` gives read-only views of the log's own buffers (no memory, but they
        must not outlive a later append)."""
        import numpy as np

        self._flush()
        if not copy:  # int32 views: widen per chunk (see RunResult.iteration_chunks)
            return {name: np.frombuffer(col, dtype=_NUMPY_TYPES[t])
                    for name, col, t in zip(ITERATION_COLUMNS, self._cols, _ITERATION_TYPES, strict=True)}
        return {name: np.frombuffer(col, dtype=_NUMPY_TYPES[t]).astype(np.float64 if t == "d" else np.int64)
                for name, col, t in zip(ITERATION_COLUMNS, self._cols, _ITERATION_TYPES, strict=True)}

    def __len__(self) -> int:
        return len(self._cols[0]) + len(self._buf)

    def __getitem__(self, index):  # noqa: ANN001, ANN204 - int -> tuple, slice -> list of tuples
        self._flush()
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return tuple(col[index] for col in self._cols)

    def __iter__(self) -> Iterator[tuple]:
        self._flush()
        return zip(*self._cols, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IterationLog):
            self._flush()
            other._flush()
            return self._cols == other._cols
        if isinstance(other, list | tuple):
            return len(self) == len(other) and all(a == tuple(b) for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment] - mutable

    def __repr__(self) -> str:
        return f"IterationLog({len(self)} rows)"


class Recorder:
    """Collects per-iteration records (an :class:`IterationLog`: cheap to append, tidy to
    export) and counts terminal request events for progress reporting."""

    __slots__ = ("iterations", "stages", "num_done", "_on_progress", "_next_report", "_report_every")

    def __init__(self, on_progress: Callable[[int], None] | None = None, report_every: int = 1) -> None:
        self.iterations = IterationLog()
        self.stages: list[tuple] = []  # STAGE_COLUMNS rows, pipelined replicas only
        self.num_done = 0
        self._on_progress = on_progress
        self._report_every = max(1, report_every)
        self._next_report = self._report_every

    def on_iteration(self, replica_id: int, started_at: float, duration: float, batch: Batch, kv_blocks_used: int) -> None:
        s = batch.shape
        drafts = s.num_verify_rows  # a speculating step's verify rows are no prompt tokens: a column of their own
        self.iterations.append((replica_id, started_at, duration, s.num_prefill_tokens - drafts, s.num_decodes,
                                s.num_prefills, kv_blocks_used, len(batch.preempted), len(batch.admitted), drafts))

    def on_stretch(self, replica_id: int, ends: list[float], durations: list[float], num_decodes: int,
                   kv_blocks_used: list[int], num_prefill_tokens: int = 0, num_prefills: int = 0) -> None:
        """A skipped stretch (:mod:`simulator.fast.skipping`) of ``num_decodes`` decodes and, per
        iteration, ``num_prefills`` chunks of ``num_prefill_tokens`` tokens in all: iteration
        ``i`` started at ``ends[i]`` and took ``durations[i]``; the rows equal those single
        steps would write."""
        self.iterations.extend_stretch(replica_id, ends[:len(durations)], durations, num_decodes, kv_blocks_used,
                                       num_prefill_tokens, num_prefills)

    def on_stage(self, replica_id: int, micro_batch_id: int, stage: int, started_at: float, duration: float) -> None:
        self.stages.append((replica_id, micro_batch_id, stage, started_at, duration))

    def count_done(self, n: int) -> None:
        """``n`` more requests finished or were rejected (progress)."""
        self._count(n)

    def _count(self, n: int) -> None:
        self.num_done += n
        if self._on_progress is not None and self.num_done >= self._next_report:
            self._on_progress(self.num_done)
            self._next_report = self.num_done + self._report_every

    def on_finish(self, finished: list[Request]) -> None:
        self._count(len(finished))

    def on_reject(self, req: Request) -> None:
        self._count(1)


class TallyRecorder(Recorder):
    """A :class:`Recorder` that keeps no iteration or stage rows (its logs stay empty), only
    the count of finished and rejected requests: for runs judged by their requests and TBT
    gaps alone, such as capacity trials, where writing the rows was a tenth of the loop."""

    __slots__ = ()

    def on_iteration(self, replica_id: int, started_at: float, duration: float, batch: Batch, kv_blocks_used: int) -> None:
        pass

    def on_stretch(self, replica_id: int, ends: list[float], durations: list[float], num_decodes: int,
                   kv_blocks_used: list[int], num_prefill_tokens: int = 0, num_prefills: int = 0) -> None:
        pass

    def on_stage(self, replica_id: int, micro_batch_id: int, stage: int, started_at: float, duration: float) -> None:
        pass
