"""Stopping worker processes cleanly on Ctrl-C or SIGTERM.

A terminal sends Ctrl-C to the whole process group, so worker processes ignore SIGINT
themselves (:func:`ignore_interrupts`, a pool initializer) and only the parent decides how
to stop: it turns the signal into ``KeyboardInterrupt`` (:func:`stop_on_signals`), ignores
a second one while it cleans up (:func:`signals_ignored`) and terminates the workers
(:func:`terminate_pool`). Signals stay blocked while workers start
(:func:`signals_blocked`), so none can be hit before its initializer runs, and the parent
waits until every worker has run it (:class:`WorkerPool`): a worker stopped while it still
reads its start-up data (spawn and forkserver pools) would print a traceback. Used by
sweeps (:mod:`simulator.planning.sweep`), parallel cluster runs (:mod:`simulator.engine.cluster`) and
multi-seed capacity searches (:mod:`simulator.planning.capacity`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from simulator.config.errors import WorkerDied


def ignore_interrupts() -> None:
    """Worker initializer: the parent alone handles Ctrl-C; SIGTERM (how the parent stops a
    worker) kills. Signals were blocked while the worker started; unblock them now."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _worker_started(started: Any) -> None:
    """Worker initializer of :class:`WorkerPool`: Ctrl-C is the parent's business; then say so."""
    ignore_interrupts()
    started.release()


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Hold SIGINT/SIGTERM back while workers (and pool threads) are started: blocked in this
    thread, so they inherit the mask and cannot be hit before :func:`ignore_interrupts` runs,
    and deferred here, so this process is not stopped half-way through starting one (a spawn
    worker whose start-up data was never written prints a traceback). The mask alone does not
    do the second: the kernel hands a process-wide signal to any thread that does not block it
    (numpy's BLAS threads, started at import), and Python then runs the handler in the main
    thread all the same. A signal that arrives meanwhile is raised again once the block ends. Yields the
    signals held so far (a list that grows as they arrive; always empty outside the main thread)."""
    held: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield held
        return
    handlers = {sig: signal.signal(sig, lambda signum, frame: held.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield held
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        for sig, previous in handlers.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(held):  # each signal once, in arrival order, to the handler now in force
            signal.raise_signal(sig)


@contextlib.contextmanager
def signal_handlers(handler: Any) -> Iterator[None]:
    """Install ``handler`` for SIGINT and SIGTERM (main thread only; elsewhere a no-op),
    putting the previous handlers back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            if previous is not None:
                signal.signal(sig, previous)


def stop_on_signals(received: list[str]) -> contextlib.AbstractContextManager[None]:
    """Turn SIGINT and SIGTERM into ``KeyboardInterrupt`` in the main thread, recording which
    arrived in ``received``."""

    def handler(signum: int, frame: object) -> None:
        received.append(signal.Signals(signum).name)
        raise KeyboardInterrupt

    return signal_handlers(handler)


def signals_ignored() -> contextlib.AbstractContextManager[None]:
    """While stopping, a second Ctrl-C must not break the clean-up into a traceback."""
    return signal_handlers(signal.SIG_IGN)


def terminate_pool(pool: ProcessPoolExecutor) -> None:
    """Stop a pool's running tasks now (ProcessPoolExecutor has no public way to stop a running
    task before Python 3.14) and wait for its processes to go."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    pool.shutdown(wait=True, cancel_futures=True)


class WorkerPool:
    """A process pool whose workers leave Ctrl-C and SIGTERM to the parent.

    Contract: :meth:`submit_all` returns once every worker it started has run its
    initializer (so a signal from then on finds only workers that ignore Ctrl-C and die
    quietly on SIGTERM); leaving the ``with`` block normally waits for the pool, leaving it
    by any exception (``KeyboardInterrupt`` included) terminates the workers first. A worker
    that died (the out-of-memory killer, ``kill -9``) breaks the pool: the ``BrokenProcessPool``
    a future or a submit raises leaves the block as :class:`WorkerDied`, one line. Inside
    the block SIGINT and SIGTERM raise ``KeyboardInterrupt`` (:func:`stop_on_signals`),
    unless ``signals_interrupt=False``: a caller that installs its own handlers (a sweep
    records which signal arrived).
    """

    START_TIMEOUT_S = 60.0

    def __init__(self, max_workers: int, start_method: str | None = None, *, signals_interrupt: bool = True) -> None:
        context = multiprocessing.get_context(start_method)
        self._started = context.Semaphore(0)
        self.pool = ProcessPoolExecutor(max_workers=max_workers, mp_context=context, initializer=_worker_started,
                                        initargs=(self._started,))
        self._num_started = 0
        self._handlers = stop_on_signals([]) if signals_interrupt else contextlib.nullcontext()

    def submit_all(self, fn: Callable[..., Any], jobs: Iterable[tuple]) -> list[Future]:
        """Submit ``fn(*job)`` for every job; return their futures once the workers run."""
        with signals_blocked():  # workers (and the pool's manager thread) start on submit
            futures = [self.pool.submit(fn, *job) for job in jobs]
            # The pool starts its processes during submit (all at once, or one per task).
            num_processes = len(getattr(self.pool, "_processes", None) or {})
            while self._num_started < num_processes and self._started.acquire(timeout=self.START_TIMEOUT_S):
                self._num_started += 1
        return futures

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """:meth:`submit_all` of one job."""
        return self.submit_all(fn, [args])[0]

    def stop(self) -> None:
        """Terminate the workers now, tasks still running included (their results are not wanted)."""
        with signals_ignored():
            terminate_pool(self.pool)

    def __enter__(self) -> WorkerPool:
        self._handlers.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc_type is None:
                self.pool.shutdown(wait=True)
            else:
                self.stop()
        finally:
            self._handlers.__exit__(exc_type, exc, tb)
        # A worker gone without a word (no cause: a result that failed to unpickle has one, and is a bug to show).
        if isinstance(exc, BrokenProcessPool) and exc.__cause__ is None:
            raise WorkerDied from None
