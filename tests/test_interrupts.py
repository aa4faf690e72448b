"""Worker pools stop cleanly: Ctrl-C and SIGTERM end multi-process commands with one line.

The parallel cluster run (tests/test_parallel_cluster.py) and the sweep (tests/test_sweep.py)
have their own signal tests; these cover the shared pool and the multi-seed capacity search.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from helpers import assert_a_signal_stops_workers

from simulator.util.interrupts import WorkerPool


def _sigint_handler_is_ignore(_: int) -> bool:
    return signal.getsignal(signal.SIGINT) is signal.SIG_IGN


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_submit_all_returns_once_every_started_worker_ignores_ctrl_c(start_method: str) -> None:
    with WorkerPool(2, start_method) as pool:
        futures = pool.submit_all(_sigint_handler_is_ignore, [(i,) for i in range(4)])
        processes = pool.pool._processes  # noqa: SLF001 - the workers the pool started
        assert processes and pool._num_started == len(processes)  # noqa: SLF001
        assert all(f.result() for f in futures)


def test_leaving_a_pool_by_an_exception_stops_its_workers() -> None:
    with pytest.raises(KeyboardInterrupt), WorkerPool(2, "spawn") as pool:
        pool.submit_all(_sigint_handler_is_ignore, [(0,), (1,)])
        pids = list(pool.pool._processes)  # noqa: SLF001
        raise KeyboardInterrupt
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_workers_start_waits_for_them_to_have_started(sig: int) -> None:
    """A signal to the process that another thread takes (the kernel may hand it to any thread
    that does not block it, as numpy's BLAS threads do not) must not stop the main thread
    inside signals_blocked: it is raised once the block ends, once per signal."""
    import threading

    from simulator.util.interrupts import signal_handlers, signals_blocked

    seen: list[int] = []

    def handler(signum: int, frame: object) -> None:
        seen.append(signum)
        raise KeyboardInterrupt

    go = threading.Event()
    other = threading.Thread(target=lambda: (go.wait(), os.kill(os.getpid(), sig), os.kill(os.getpid(), sig)))
    other.start()  # before the block: its signal mask lets the signal in
    finished_block = False
    with signal_handlers(handler), pytest.raises(KeyboardInterrupt), signals_blocked() as held:
        go.set()
        other.join()
        # Bytecode, where an unguarded handler would run, until the signal has reached this thread's handler: the
        # kernel hands it to another thread whenever that one runs next (a fixed count of loops was too few on a
        # loaded machine, and the signal then arrived after the block, under the default handler).
        deadline = time.monotonic() + 10.0
        while not held and time.monotonic() < deadline:
            pass
        for _ in range(200_000):
            pass
        finished_block = True
    assert finished_block and held and seen == [sig]


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process groups from /proc")
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
# Seeds in parallel; one seed's trials run ahead; two seeds share three processes, running ahead.
@pytest.mark.parametrize(("seeds", "workers"), [("4", "2"), ("1", "2"), ("2", "3")])
def test_a_signal_stops_a_capacity_search_and_its_workers(how: str, seeds: str, workers: str) -> None:
    """`capacity --seeds 4 --workers 2` used to run its seeds on after Ctrl-C (seconds, silently)."""
    assert_a_signal_stops_workers(["capacity", "--model", "mistral-7b", "--seeds", seeds, "--workers", workers,
                                   "--num-requests", "8192", "--json"], how)
