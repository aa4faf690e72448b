"""The open-loop arrival process: each request submitted to the cluster at its own arrival time.

The cluster runs it for a plain trace or generated workload; a session client runs it for each
session's first request (the rest follow their predecessors: :mod:`simulator.engine.sessions`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import simpy

from simulator.workload.request import Request


def send_at_arrival_times(env: simpy.Environment, requests: Iterable[Request], cluster: Any,
                          on_send: Callable[[Request], None] | None = None) -> Iterator[simpy.Event]:
    """The SimPy process: wait until each request's ``arrival_at`` (in order), then submit it.

    Invariant: ``cluster.next_arrival_at`` is the instant SimPy will wake this process (to the
    last bit), or inf once every request is sent; the skipping replicas plan up to it."""
    for req in requests:
        gap = req.arrival_at - env.now
        if gap > 0:
            cluster.next_arrival_at = env.now + gap
            yield env.timeout(gap)
        # now + (t - now) may differ from t in the last bit: take the clock's value so every
        # timestamp of a request comes from the same clock (first_scheduled_at >= arrival_at).
        req.arrival_at = env.now
        if on_send is not None:
            on_send(req)
        cluster.submit(req)
    cluster.next_arrival_at = math.inf
