"""Will a run fit in memory? An estimate made before any work, the memory available, and the
processes a command may start (``--workers auto``).

A run keeps every request, every iteration record (48 bytes) and each replica's TBT gap
runs (16 bytes, about one per iteration; token timestamps are not kept), and afterwards the
per-request table its metrics come from. All of it grows with the number of requests, so
the estimate is one figure per request:

    estimate = num_requests x BYTES_PER_REQUEST

:data:`BYTES_PER_REQUEST` is measured, not derived: peak RSS growth of ``simulate run``'s
path (simulate, request_frame, summarize) divided by the request count, for the default
configuration (Llama-2-7B on one A100-80GB, sarathi, ShareGPT-like lengths, 1 QPS): 2,000
requests peaked at 213,300 KiB and 50,000 at 480,996 KiB on the project's CI machine, 5,711
bytes per added request. When the engine's records change, re-measure and update that one
number; the check and its message follow.
"""

from __future__ import annotations

import os
from pathlib import Path

from simulator.config.errors import ConfigError

BYTES_PER_REQUEST = 5_800
GiB = 1 << 30


def estimate_run_bytes(num_requests: int, bytes_per_request: int = BYTES_PER_REQUEST) -> int:
    """Peak memory a run of ``num_requests`` is expected to need (see the module docstring)."""
    return int(num_requests) * int(bytes_per_request)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def available_bytes() -> int | None:
    """Memory this process can still take: the system's MemAvailable, capped by a cgroup v2
    limit where one applies; None where neither can be read."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if available is None and hasattr(os, "sysconf"):
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            available = None
    limit = _read_int(Path("/sys/fs/cgroup/memory.max"))  # "max" (no limit) reads as None
    used = _read_int(Path("/sys/fs/cgroup/memory.current"))
    if limit is not None and used is not None:
        room = max(0, limit - used)
        available = room if available is None else min(available, room)
    return available


_BINARY_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def format_bytes(num_bytes: float, min_unit: str = "GiB") -> str:
    """A byte count in the largest binary unit (from ``min_unit`` up) that keeps it >= 1,
    one decimal, thousands separators: ``format_bytes(5.8e15) == "5.2 PiB"``."""
    index = _BINARY_UNITS.index(min_unit)
    value = num_bytes / 1024**index
    while abs(value) >= 1024 and index < len(_BINARY_UNITS) - 1:
        value /= 1024
        index += 1
    return f"{value:,.1f} {_BINARY_UNITS[index]}"


def check_run_fits(num_requests: int, available: int | None = None,
                   bytes_per_request: int = BYTES_PER_REQUEST) -> int:
    """Refuse, in one line with the figures and the fix, a run that will not fit in memory.

    Returns the estimate in bytes. ``available`` defaults to :func:`available_bytes`; where
    that is unknown nothing is refused.
    """
    need = estimate_run_bytes(num_requests, bytes_per_request)
    available = available_bytes() if available is None else available
    if available is not None and need > available:
        fits = max(1, available // bytes_per_request)
        raise ConfigError(
            "--num-requests",
            f"{num_requests:,} requests need about {format_bytes(need)} ({bytes_per_request:,} bytes each) "
            f"but {format_bytes(available)} of memory is available",
            f"use --num-requests {fits:,} or fewer, or a machine with more memory")
    return need


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one (a container or
    ``taskset`` limits it), else the machine's count; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def auto_workers(max_useful: int, requests_per_process: int, available: int | None = None,
                 cpus: int | None = None) -> int:
    """Processes for ``--workers auto``: one per available CPU, no more than ``max_useful``
    (what the command can keep busy), and no more than the memory holds at
    ``requests_per_process`` requests each (:func:`estimate_run_bytes`); at least 1."""
    cpus = available_cpus() if cpus is None else cpus
    available = available_bytes() if available is None else available
    n = min(cpus, max_useful)
    if available is not None:
        n = min(n, available // max(1, estimate_run_bytes(requests_per_process)))
    return max(1, int(n))
