"""A request's life inside the simulator.

The scheduler contract follows vLLM v1: prefill and decode are just token counts.
A request *knows* ``num_prompt_tokens + num_generated`` tokens; ``num_computed``
of them are in its KV cache. An iteration that schedules ``n`` of the missing
tokens advances ``num_computed`` by ``n``; when that makes the KV cache whole, the
iteration produces one new output token. So:

- prefill = ``num_missing > 1`` (possibly split into chunks); the chunk that completes
  the prompt produces the first output token;
- decode = ``num_missing == 1``: the last output token is fed back in;
- preemption by recompute resets ``num_computed`` to 0, so the request re-prefills its
  prompt *and* the tokens it had generated, then produces the next token.

Per token, a request keeps only what its latency metrics need: the first and last token
times and its largest gap (``max_tbt_s``); every gap also goes to its replica's
:class:`~simulator.engine.tbt.GapLog` (pooled TBT quantiles), so memory does not grow with the
tokens generated. A run asked for token times (``simulate(..., token_times=True)``: tests,
calibration, disaggregated hand-off analysis) also fills ``token_times``.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Sequence
from enum import StrEnum

import numpy as np


class Status(StrEnum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    REJECTED = "rejected"


class Request:
    """Mutable runtime state of one request. Only the replica/scheduler mutate it.

    Invariants: ``0 <= num_computed <= num_known``; ``num_generated <= num_output_tokens``;
    ``first_token_at <= last_token_at`` once a token exists; ``max_tbt_s`` is the largest gap
    between consecutive tokens (0.0 before the second); ``token_times``, when kept, has
    ``num_generated`` non-decreasing entries, the first ``first_token_at``, the last ``last_token_at``.
    """

    __slots__ = (
        "request_id", "arrival_at", "num_prompt_tokens", "num_output_tokens",
        "num_computed", "num_generated", "num_blocks", "status", "in_flight",
        "replica_id", "first_scheduled_at", "completed_at", "num_preemptions",
        "first_token_at", "last_token_at", "max_tbt_s", "token_times", "reject_reason", "admitted_seq",
        "block_hashes", "hash_block_size", "num_cached_tokens", "session_id",
        "num_host_cached_tokens", "num_state_blocks", "num_named_tokens",
    )

    def __init__(self, request_id: int, arrival_at: float, num_prompt_tokens: int, num_output_tokens: int,
                 token_times: bool = False) -> None:
        self.request_id = request_id
        self.arrival_at = arrival_at
        self.num_prompt_tokens = num_prompt_tokens
        self.num_output_tokens = num_output_tokens
        self.num_computed = 0
        self.num_generated = 0
        self.num_blocks = 0  # KV blocks currently held
        self.num_state_blocks = 0  # blocks its recurrent state holds (hybrid models), beside num_blocks
        self.status = Status.WAITING
        self.in_flight = False  # part of a batch that has not finished (pipeline parallelism)
        self.replica_id = -1
        self.first_scheduled_at: float | None = None
        self.completed_at: float | None = None
        self.num_preemptions = 0
        self.first_token_at: float | None = None
        self.last_token_at = math.nan
        self.max_tbt_s = 0.0
        self.token_times: array | None = array("d") if token_times else None
        self.reject_reason: str | None = None
        self.admitted_seq = -1  # order of (re)admission (the running list itself is in arrival order)
        # Prefix caching (simulator.engine.prefix_cache): the prompt's block hash ids from a trace
        # (None: no prefix is known to be shared) and the tokens each id covers; the prompt tokens
        # found cached at its first admission.
        self.block_hashes: Sequence[int] | None = None
        self.hash_block_size = 0
        # Tokens past the prompt its ids name too (0: the prompt's alone): where the session's next request
        # resends this one's prompt and answer, its ids carry on over the answer (continued_hashes), so the
        # answer's blocks are cached under the names that request will look up.
        self.num_named_tokens = 0
        self.num_cached_tokens = 0
        self.num_host_cached_tokens = 0  # of those, the tokens loaded from a CPU tier
        self.session_id = -1  # the conversation or agent session it belongs to (-1: none); routers read it

    @property
    def num_known(self) -> int:
        """Tokens the model has seen or produced: prompt plus generated output."""
        return self.num_prompt_tokens + self.num_generated

    @property
    def num_missing(self) -> int:
        """Tokens still to run through the model before the next output token."""
        return self.num_prompt_tokens + self.num_generated - self.num_computed

    @property
    def is_prefill(self) -> bool:
        return self.num_prompt_tokens + self.num_generated - self.num_computed > 1

    @property
    def max_num_tokens(self) -> int:
        """KV footprint at completion: the last output token is never fed back."""
        return self.num_prompt_tokens + self.num_output_tokens - 1

    def __repr__(self) -> str:
        return (f"Request(id={self.request_id}, prompt={self.num_prompt_tokens}, out={self.num_output_tokens}, "
                f"computed={self.num_computed}, generated={self.num_generated}, status={self.status.value})")


# A request's fields as columns (one entry per request): what a replica's run sets, read off
# its requests in a worker process, and the whole run's requests merged in the parent.
RUN_FIELDS = tuple(f for f in Request.__slots__ if f not in ("request_id", "num_prompt_tokens", "num_output_tokens",
                                                             "block_hashes", "hash_block_size", "session_id",
                                                             "num_named_tokens"))
_TIMES_OR_NONE = ("first_scheduled_at", "completed_at", "first_token_at")  # NaN for None in a column
_DTYPES = {"arrival_at": np.float64, "last_token_at": np.float64, "max_tbt_s": np.float64, "in_flight": np.bool_,
           **dict.fromkeys(("num_computed", "num_generated", "num_blocks", "replica_id", "num_preemptions",
                            "admitted_seq", "num_cached_tokens", "num_host_cached_tokens"), np.int64)}


def run_field_columns(requests: list[Request]) -> dict[str, np.ndarray]:
    """The :data:`RUN_FIELDS` of ``requests`` as numpy columns: times that may be None as
    float64 with NaN, counts as int64, and any other field (status, token times, reject
    reason, a field added later) as an object array, which holds anything as it is."""
    cols: dict[str, np.ndarray] = {}
    for name in RUN_FIELDS:
        values = [getattr(r, name) for r in requests]
        if name in _TIMES_OR_NONE:
            cols[name] = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
        elif name in _DTYPES:
            cols[name] = np.array(values, dtype=_DTYPES[name])
        else:
            column = np.empty(len(values), dtype=object)
            column[:] = values
            cols[name] = column
    return cols


class RequestColumns(Sequence[Request]):
    """A run's requests held as columns (``request_id``, the token counts and every
    :data:`RUN_FIELDS` entry, as :func:`run_field_columns` writes them), read as a sequence of
    :class:`Request` objects only if someone asks.

    A cluster whose replicas ran in worker processes comes back this way: metrics read the
    columns directly (:func:`simulator.report.metrics.request_columns`), and building a million
    request objects just to read their fields back would cost more than the parent's whole
    share of the run. The objects are built, once, on first access by index or iteration.
    """

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns
        self._objects: list[Request] | None = None

    def __len__(self) -> int:
        return len(self.columns["request_id"])

    def __getitem__(self, index):  # noqa: ANN001, ANN204 - int or slice, as a list's
        return self.objects()[index]

    def __iter__(self) -> Iterator[Request]:
        return iter(self.objects())

    def objects(self) -> list[Request]:
        if self._objects is None:
            cols = self.columns
            reqs = [Request(i, 0.0, p, o) for i, p, o in zip(cols["request_id"].tolist(), cols["num_prompt_tokens"].tolist(),
                                                             cols["num_output_tokens"].tolist(), strict=True)]
            for name in RUN_FIELDS:
                column = cols[name]
                values = column.tolist()
                if name in _TIMES_OR_NONE:
                    values = [None if v != v else v for v in values]  # NaN back to None
                for req, value in zip(reqs, values, strict=True):
                    setattr(req, name, value)
            self._objects = reqs
        return self._objects
