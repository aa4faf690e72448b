"""Closed-loop sessions: a user sends the next turn only after the answer came, and a think.

Session traffic (:mod:`simulator.workload.sessions`) carries, per request, its session and a
think time. A session's first request is sent at its ``arrival_at``; every later one is sent
``think_s`` after the session's previous request finished (or was refused), so a slow server
slows its users down instead of growing an unbounded queue, as real chat users and agents do.
A table's ``after`` names the request that releases each one instead of the session's previous
request (a recorded Claude Code session replayed closed: ``--session-replay closed``).
This is :mod:`simulator.engine.closed_loop`'s mechanism (sends at completions, learnt through
the run's recorder) with one user per session and a delay, instead of N interchangeable users.

The send happens in a timeout's callback, even for a zero think time, so a request is never
submitted from inside the replica's own completion step. As with the closed loop, the next
send is a completion anywhere: such runs are never partitioned and event skipping stops at
the next event of any kind (``watched`` in :class:`simulator.engine.cluster.Cluster`).
A request's ``arrival_at`` becomes the time it was sent; TTFT and E2E count from there.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import simpy

from simulator.engine.arrivals import send_at_arrival_times
from simulator.workload.request import Request


class SessionClient:
    """Sends each session's requests in order (see the module docstring).

    Invariant: a request with a finite ``think_s`` is sent exactly ``think_s`` after its predecessor
    ended, so never before it ended; at most one request per session is in flight unless ``after``
    releases several by one request (a Claude Code session's side calls and parallel sub-agents). ``sent_ids``: the requests'
    ids in the order they were sent, which is not id order (a later session's turn may go before an
    earlier one's): the warm-up is the first ``num_warmup`` of them (``RunResult.extra["send_order"]``)."""

    __slots__ = ("env", "cluster", "_next", "_think", "sent_ids")

    def __init__(self, requests: Sequence[Request], session_id: np.ndarray, think_s: np.ndarray,
                 after: np.ndarray | None = None) -> None:
        """``after``: per request, the row of the request whose end releases it (-1: none), where that is not
        its session's previous request (``RequestTable.after``)."""
        # request id -> the requests its end releases, in table order (one, but where ``after`` says more)
        self._next: dict[int, list[Request]] = {}
        self._think: dict[int, float] = {}  # request id -> its think time (later turns only)
        last: dict[int, Request] = {}  # session -> its latest request so far, in table order
        links = after.tolist() if after is not None else [None] * len(requests)
        for req, session, think, link in zip(requests, session_id.tolist(), think_s.tolist(), links, strict=True):
            if session < 0:
                continue
            if not math.isnan(think):  # sent after its predecessor ends
                prev = last.get(session) if link is None else requests[link]
                if prev is None:
                    raise ValueError(f"request {req.request_id} has a think time but no earlier request "
                                     f"in session {session}")
                self._next.setdefault(prev.request_id, []).append(req)
                self._think[req.request_id] = think
            last[session] = req
        self.env: simpy.Environment | None = None
        self.cluster: Any = None
        self.sent_ids: list[int] = []  # in the order sent

    def is_first(self, req: Request) -> bool:
        return req.request_id not in self._think

    def ended(self, finished: Sequence[Request]) -> None:
        """``finished`` ended now (answered or refused): their sessions' next turns are due after a think."""
        env = self.env
        for req in finished:
            for nxt in self._next.get(req.request_id, ()):
                env.timeout(self._think[nxt.request_id]).callbacks.append(functools.partial(self._send, nxt))

    def _send(self, req: Request, _event: simpy.Event) -> None:
        req.arrival_at = self.env.now  # sent now: TTFT and E2E count from here
        self._count_sent(req)
        self.cluster.submit(req)

    def arrivals(self, env: simpy.Environment, requests: Sequence[Request], cluster: Any) -> Iterator[simpy.Event]:
        """The SimPy process: send every session's first request at its arrival time."""
        self.env, self.cluster = env, cluster
        yield from send_at_arrival_times(env, (r for r in requests if self.is_first(r)), cluster, self._count_sent)

    def _count_sent(self, req: Request) -> None:
        self.sent_ids.append(req.request_id)

    @property
    def num_sent(self) -> int:
        return len(self.sent_ids)
