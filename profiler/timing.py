"""One timing function for every op: :func:`bench`.

CUDA (in the spirit of Triton's ``do_bench``):

1. warm-up calls (compilation, autotuning, allocator, clocks);
2. an estimate from a few calls picks the repeat count that fills ``target_s``
   (clamped to ``[min_repeats, max_repeats]``) unless ``repeats`` fixes it;
3. before each repetition the L2 cache is emptied of the op's data (so weights are read
   from HBM as in a real forward pass) and ``before_each`` runs (e.g. a barrier for
   collectives); neither is timed. The flush (``BenchSettings.l2_flush``) *reads* a 256 MB
   buffer by default, leaving L2 full of clean lines as a forward pass leaves it (the last
   layer's weights); ``write`` zeroes the buffer as Triton's ``do_bench`` does, which leaves
   L2 full of dirty lines whose write-back the timed op pays for (on an H200 it made Llama-3.1-8B's
   decode GEMMs 12-23% slower, ``results/h200/``). There is no unflushed mode: with no kernel
   queued ahead of it, a small op's events time the host's launch gap (an 18 us GEMM read 36 us);
4. a pair of CUDA events brackets each repetition; one synchronize at the end;
5. optionally the op is captured in a CUDA graph and replayed the same way: the graph
   time is reported as the op time and ``eager - graph`` as launch overhead.

CPU: the same loop with ``time.perf_counter_ns`` (a CPU op is synchronous) and the
thread count fixed by the caller (``torch.set_num_threads``) for the whole run.

The result is the median with the 20th and 80th percentiles and the repeat count,
plus the raw samples (collectives reduce them across ranks before summarising).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

L2_FLUSH_BYTES = 256 * 1024 * 1024
L2_FLUSH_MODES = ("read", "write")


@dataclass(frozen=True)
class Timing:
    """Summary of the timed repetitions of one op, in seconds."""

    median_s: float
    p20_s: float
    p80_s: float
    repeats: int
    samples_s: tuple[float, ...]
    launch_overhead_s: float | None = None


def summarize(samples_s: np.ndarray | list[float], launch_overhead_s: float | None = None) -> Timing:
    s = np.asarray(samples_s, dtype=np.float64)
    if s.size == 0:
        raise ValueError("no samples to summarise")
    p20, med, p80 = np.percentile(s, [20, 50, 80])
    return Timing(float(med), float(p20), float(p80), int(s.size), tuple(float(x) for x in s), launch_overhead_s)


@dataclass(frozen=True)
class BenchSettings:
    """How hard to time each op."""

    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 100
    target_s: float = 0.1  # wall time per point the adaptive repeat count aims for
    cuda_graphs: bool = False
    l2_flush: str = "read"  # one of L2_FLUSH_MODES; see the module docstring

    def __post_init__(self) -> None:
        if self.l2_flush not in L2_FLUSH_MODES:
            raise ValueError(f"l2_flush must be one of {', '.join(L2_FLUSH_MODES)}, got {self.l2_flush!r}")

    @classmethod
    def quick(cls) -> BenchSettings:
        # No separate warm-up: the untimed estimate call that picks the repeat count warms up.
        return cls(warmup=0, min_repeats=3, max_repeats=10, target_s=0.02)


class _FlushBuffer:
    """The 256 MB buffer read (or written) before each CUDA repetition (one per device)."""

    _buffers: dict = {}

    @classmethod
    def get(cls, device):  # noqa: ANN001, ANN206 - torch types are lazy
        import torch

        key = str(device)
        if key not in cls._buffers:
            # float32 zeros: a sum over them is a plain streaming read (no NaN, no int8 widening)
            cls._buffers[key] = torch.zeros(L2_FLUSH_BYTES // 4, dtype=torch.float32, device=device)
        return cls._buffers[key]


def _l2_flusher(device, mode: str) -> Callable[[], object]:  # noqa: ANN001 - torch types are lazy
    """What runs (untimed) before each repetition to empty L2 of the op's data."""
    buf = _FlushBuffer.get(device)
    if mode == "write":
        return buf.zero_
    import torch

    out = torch.empty((), dtype=torch.float32, device=device)
    return lambda: torch.sum(buf, dim=0, out=out)


def bench(fn: Callable[[], object], *, device: str = "cpu", settings: BenchSettings | None = None,
          repeats: int | None = None, before_each: Callable[[], object] | None = None,
          flush_l2: bool = True) -> Timing:
    """Time ``fn()`` (which must do the same work every call); see the module docstring.

    ``repeats`` fixes the repeat count (collectives need the same count on every rank);
    otherwise it adapts to ``settings.target_s``.
    """
    settings = settings or BenchSettings()
    if device.startswith("cuda"):
        return _bench_cuda(fn, device, settings, repeats, before_each, flush_l2)
    return _bench_cpu(fn, settings, repeats, before_each)


def _pick_repeats(estimate_s: float, settings: BenchSettings, repeats: int | None) -> int:
    if repeats is not None:
        return max(1, int(repeats))
    n = int(settings.target_s / max(estimate_s, 1e-9))
    return max(settings.min_repeats, min(settings.max_repeats, n))


def _bench_cpu(fn: Callable[[], object], settings: BenchSettings, repeats: int | None,
               before_each: Callable[[], object] | None) -> Timing:
    # With a fixed count there is no sizing call to warm up on: warm up at least once.
    for _ in range(settings.warmup if repeats is None else max(settings.warmup, 1)):
        fn()
    if repeats is None:
        t0 = time.perf_counter_ns()
        fn()
        estimate = (time.perf_counter_ns() - t0) * 1e-9
    else:
        estimate = 0.0
    n = _pick_repeats(estimate, settings, repeats)
    samples = np.empty(n)
    for i in range(n):
        if before_each is not None:
            before_each()
        t0 = time.perf_counter_ns()
        fn()
        samples[i] = (time.perf_counter_ns() - t0) * 1e-9
    return summarize(samples)


def _bench_cuda(fn: Callable[[], object], device: str, settings: BenchSettings, repeats: int | None,
                before_each: Callable[[], object] | None, flush_l2: bool) -> Timing:
    import torch

    dev = torch.device(device)
    flush = _l2_flusher(dev, settings.l2_flush) if flush_l2 else None
    for _ in range(settings.warmup):
        fn()
    torch.cuda.synchronize(dev)

    def timed(call: Callable[[], object], n: int) -> np.ndarray:
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        for i in range(n):
            if flush is not None:
                flush()
            if before_each is not None:
                before_each()
            starts[i].record()
            call()
            ends[i].record()
        torch.cuda.synchronize(dev)
        return np.array([s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True)])

    estimate = float(np.median(timed(fn, 3))) if repeats is None else 0.0
    n = _pick_repeats(estimate, settings, repeats)
    eager = timed(fn, n)
    if not settings.cuda_graphs:
        return summarize(eager)
    # Capture on a side stream (required by torch), then replay: no per-kernel launches.
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        fn()  # warm the side stream's allocator pool
    torch.cuda.current_stream(dev).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize(dev)
    replayed = timed(graph.replay, n)
    overhead = float(np.median(eager) - np.median(replayed))
    return summarize(replayed, launch_overhead_s=overhead)
