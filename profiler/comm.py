"""Collective and point-to-point communication, timed in real process groups.

For each world size, :func:`measure_comm` spawns ``world_size`` processes with
``torch.multiprocessing`` that join a ``torch.distributed`` group over TCP on
127.0.0.1 (a free port picked by the OS): ``gloo`` on CPU, ``nccl`` on CUDA (one GPU
per rank). Every rank times every point with :func:`profiler.timing.bench` using the
same fixed repeat count and a barrier before each repetition (so ranks start
together); the per-repetition times are then max-reduced across ranks (an op is done
when its slowest rank is done) and summarised on rank 0, which writes the results to
a JSON file the parent reads back.

* ``all_reduce``: sum of a ``message_bytes`` tensor on every rank;
* ``all_gather``: ``all_gather_into_tensor`` into a ``message_bytes`` output
  (``message_bytes / world_size`` per rank); gloo lacks it, so on CPU the list form;
* ``send_recv``: rank 0 sends ``message_bytes`` to rank 1 (pipeline neighbours).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

from profiler.grid import Point
from profiler.schema import ALL_GATHER, ALL_REDUCE, SEND_RECV
from profiler.timing import BenchSettings, bench, summarize

INIT_TIMEOUT_S = 120


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def comm_backend(device: str) -> str:
    return "nccl" if device == "cuda" else "gloo"


def measure_comm(points: list[Point], world_size: int, device: str, dtype: str, settings: BenchSettings,
                 num_threads: int = 1) -> list[dict]:
    """Time ``points`` (all of one world size) in a fresh group; one dict per point.

    Each dict holds the point's index in ``points`` and the :class:`Timing` fields.
    """
    import torch.multiprocessing as mp

    if not points:
        return []
    with tempfile.TemporaryDirectory(prefix="servesim-comm-") as tmp:
        result_path = Path(tmp) / "result.json"
        payload = {
            "points": [asdict(p) for p in points],
            "device": device,
            "dtype": dtype,
            "settings": asdict(settings),
            "port": free_port(),
            "num_threads": num_threads,
            "result_path": str(result_path),
        }
        mp.spawn(_worker, args=(world_size, payload), nprocs=world_size, join=True)
        return json.loads(result_path.read_text())


def _repeats_for(nbytes: int, settings: BenchSettings) -> int:
    # Fixed on every rank (an adaptive count could differ between ranks and deadlock):
    # more repetitions for small messages, where jitter dominates.
    if nbytes <= 1 << 20:
        return settings.max_repeats
    return max(settings.min_repeats, settings.max_repeats // 4)


def _worker(rank: int, world_size: int, payload: dict) -> None:
    import torch
    import torch.distributed as dist

    from profiler.ops import torch_dtype

    device = payload["device"]
    torch.set_num_threads(payload["num_threads"])
    backend = comm_backend(device)
    if backend == "gloo":
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    if device == "cuda":
        torch.cuda.set_device(rank)
        dev = f"cuda:{rank}"
    else:
        dev = "cpu"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{payload['port']}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=INIT_TIMEOUT_S))
    try:
        settings = BenchSettings(**payload["settings"])
        dt = torch_dtype(payload["dtype"])
        elem = torch.tensor([], dtype=dt).element_size()
        results = []
        for index, raw in enumerate(payload["points"]):
            point = Point(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items()})
            numel = max(1, point.message_bytes // elem)
            fn = _make_fn(point.op, numel, world_size, rank, dt, dev)
            timing = bench(fn, device=dev, settings=settings, repeats=_repeats_for(point.message_bytes, settings),
                           before_each=dist.barrier, flush_l2=False)
            samples = torch.tensor(timing.samples_s, dtype=torch.float64, device=dev)
            dist.all_reduce(samples, op=dist.ReduceOp.MAX)
            final = summarize(samples.cpu().numpy())
            results.append({"index": index, "median_s": final.median_s, "p20_s": final.p20_s,
                            "p80_s": final.p80_s, "repeats": final.repeats})
        dist.barrier()
        if rank == 0:
            tmp = Path(payload["result_path"]).with_suffix(".tmp")
            tmp.write_text(json.dumps(results))
            tmp.replace(payload["result_path"])
    finally:
        dist.destroy_process_group()


def _make_fn(op: str, numel: int, world_size: int, rank: int, dt, dev: str):  # noqa: ANN001, ANN202
    import torch
    import torch.distributed as dist

    if op == ALL_REDUCE:
        x = torch.ones(numel, dtype=dt, device=dev)
        return lambda: dist.all_reduce(x)
    if op == ALL_GATHER:
        per_rank = max(1, numel // world_size)
        x = torch.ones(per_rank, dtype=dt, device=dev)
        if dev == "cpu":  # gloo has no all_gather_into_tensor
            outs = [torch.empty(per_rank, dtype=dt, device=dev) for _ in range(world_size)]
            return lambda: dist.all_gather(outs, x)
        out = torch.empty(per_rank * world_size, dtype=dt, device=dev)
        return lambda: dist.all_gather_into_tensor(out, x)
    if op == SEND_RECV:
        x = torch.ones(numel, dtype=dt, device=dev)
        if rank == 0:
            return lambda: dist.send(x, dst=1)
        if rank == 1:
            return lambda: dist.recv(x, src=0)
        return lambda: None
    raise ValueError(f"not a communication op: {op}")
