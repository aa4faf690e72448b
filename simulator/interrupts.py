"""Stopping worker processes cleanly on Ctrl-C or SIGTERM.

A terminal sends Ctrl-C to the whole process group, so worker processes ignore SIGINT
themselves (:func:`ignore_interrupts`, a pool initializer) and only the parent decides how
to stop: it turns the signal into ``KeyboardInterrupt`` (:func:`stop_on_signals`), ignores
a second one while it cleans up (:func:`signals_ignored`) and terminates the workers
(:func:`terminate_pool`). Signals stay blocked while workers start
(:func:`signals_blocked`), so none can be hit before its initializer runs. Used by sweeps
(:mod:`simulator.sweep`) and parallel cluster runs (:mod:`simulator.engine`).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def ignore_interrupts() -> None:
    """Worker initializer: the parent alone handles Ctrl-C; SIGTERM (how the parent stops a
    worker) kills. Signals were blocked while the worker started; unblock them now."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Block SIGINT/SIGTERM in this thread while workers (and pool threads) are started, so
    they inherit the mask and cannot be hit before :func:`ignore_interrupts` runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


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
