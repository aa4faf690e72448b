"""Closed-loop load: a fixed number of users, each sending its next request when its last one ends.

This is how serving engines are benchmarked today: ``vllm bench serve --max-concurrency N
--request-rate inf``, AIPerf's and genai-perf's concurrency mode. N users share one queue of
requests (the workload's, in order); a user takes the next request as soon as its previous one
has finished (or was refused), so at most N requests are in flight at any instant and the
offered load follows the server's speed instead of a clock.

With a finite request rate as well (``--max-concurrency N --request-rate R`` in vLLM), request
``i`` is *ready* at its arrival time from the workload's arrival process and is sent at the
later of that time and the moment a user is free (vLLM's semaphore; FIFO, as requests are sent
in order). Either way a request's ``arrival_at`` becomes the time it was sent: TTFT and E2E
are measured from there, as the benchmark clients measure them (client-side queueing before
the send is not part of TTFT).

The process runs inside the SimPy loop: the next send time is the next completion, which no
one knows in advance. That is why closed-loop runs are never partitioned (one replica at a
time needs every submit time up front) and why, in a cluster, event skipping takes the next
event of any kind as its horizon instead of the next arrival (see
:class:`simulator.engine.cluster.Cluster`). A lone replica keeps its stretches: a stretch
ends at its first finished request, the only instant a new request can be sent.

Completions reach the process through the run's recorder (:func:`notifying`): every finished
or refused request frees its user's slot at that simulated instant.

**Warm-up phases** (``workload.warmup_mode``). With ``steady`` (the default) the warm-up requests
are simply the first ``num_warmup`` of the same loop: the measured requests are sent as users
free up, so the measured phase begins in whatever rhythm the warm-up left. The benchmark clients
instead run the warm-up as a phase of its own (AIPerf's ``--warmup-request-count``, ``vllm bench
serve --num-warmups``): with ``drain`` the first measured request is held until every warm-up
request has ended (none in flight), and the measured phase then starts from an idle server with
all users sending at that instant (as many as the concurrency allows, in order). Either way no
more than ``concurrency`` requests are ever in flight, and the warm-up requests stay out of the
figures (the metrics drop the first ``num_warmup`` request ids).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import simpy

from simulator.engine.records import Recorder
from simulator.workload.request import Request


class ClosedLoopClient:
    """``concurrency`` users sending ``requests`` in order (see the module docstring).

    Invariant: ``num_in_flight`` (sent and neither finished nor refused) never exceeds
    ``concurrency``; ``max_in_flight`` records the largest value it took.

    ``drain_before``: the index of the first request held until none is in flight (the first
    measured request under ``warmup_mode="drain"``); None: never held.
    """

    __slots__ = ("concurrency", "drain_before", "num_in_flight", "max_in_flight", "num_sent", "_wakeup",
                 "_sent_events")

    def __init__(self, concurrency: int, drain_before: int | None = None) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self.drain_before = drain_before if drain_before else None  # 0 warm-up requests: nothing to drain
        self.num_in_flight = 0
        self.max_in_flight = 0
        # Requests sent so far, in list order: the rest have a ready time, not an arrival, yet.
        self.num_sent = 0
        self._wakeup: simpy.Event | None = None
        self._sent_events: dict[int, simpy.Event] = {}  # index -> an event to trigger when it is sent (until_sent)

    @classmethod
    def of(cls, workload: Any) -> ClosedLoopClient | None:
        """The client of a run's ``WorkloadConfig``; None for an open loop."""
        if workload.concurrency is None:
            return None
        drain = workload.num_warmup if getattr(workload, "warmup_mode", "steady") == "drain" else None
        return cls(workload.concurrency, drain)

    def done(self, num: int) -> None:
        """``num`` requests finished or were refused now: their users are free again."""
        self.num_in_flight -= num
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.triggered:
            wakeup.succeed()  # the sender resumes at this instant, after the event that freed it

    def until_sent(self, env: simpy.Environment, index: int) -> simpy.Event | None:
        """An event that triggers at the instant request ``index`` is sent, or None if it was
        already: a watch that judges requests by their arrival waits on it (until then the
        request's ``arrival_at`` is only its ready time)."""
        if index < self.num_sent:
            return None
        event = self._sent_events.get(index)
        if event is None:
            event = self._sent_events[index] = env.event()
        return event

    def ended(self, finished: Sequence[Request]) -> None:
        """The recorder's call (:func:`notifying`): ``finished`` ended now, answered or refused."""
        self.done(len(finished))

    def arrivals(self, env: simpy.Environment, requests: Sequence[Request], cluster: Any) -> Iterator[simpy.Event]:
        """The SimPy process: send each request once it is ready and a user is free."""
        for i, req in enumerate(requests):
            ready_at = req.arrival_at
            if ready_at > env.now:
                cluster.next_arrival_at = ready_at
                yield env.timeout(ready_at - env.now)
            # The measured phase starts once the warm-up phase has drained (warmup_mode "drain").
            limit = 1 if i == self.drain_before else self.concurrency
            while self.num_in_flight >= limit:
                cluster.next_arrival_at = math.inf  # unknown: the next completion
                self._wakeup = env.event()
                yield self._wakeup
            self._wakeup = None
            self.num_in_flight += 1
            if self.num_in_flight > self.max_in_flight:
                self.max_in_flight = self.num_in_flight
            req.arrival_at = env.now  # sent now: TTFT and E2E count from here
            self.num_sent = i + 1
            cluster.submit(req)  # a refusal calls done(1) before this returns
            sent = self._sent_events.pop(i, None)
            if sent is not None:
                sent.succeed()  # a watch waiting on this send resumes at this instant, after it
        cluster.next_arrival_at = math.inf


@functools.cache
def notifying(recorder_class: type[Recorder]) -> type[Recorder]:
    """``recorder_class`` that also tells a client (its ``client`` attribute: anything with
    ``ended(requests)``, a :class:`ClosedLoopClient` or a sessions client) of every finished or
    refused request. One class per base, so the hot path's calls stay plain method calls."""

    def on_finish(self: Any, finished: list[Request]) -> None:
        recorder_class.on_finish(self, finished)
        self.client.ended(finished)

    def on_reject(self: Any, req: Request) -> None:
        recorder_class.on_reject(self, req)
        self.client.ended((req,))

    return type(f"Notifying{recorder_class.__name__}", (recorder_class,),
                {"__slots__": ("client",), "on_finish": on_finish, "on_reject": on_reject})


def make_recorder(recorder_class: type[Recorder], client: Any, **kwargs: Any) -> Recorder:
    """A recorder of ``recorder_class`` (``kwargs`` as its constructor's) that frees ``client``'s
    users as requests end; a plain one without a client."""
    if client is None:
        return recorder_class(**kwargs)
    recorder = notifying(recorder_class)(**kwargs)
    recorder.client = client  # type: ignore[attr-defined]
    return recorder
