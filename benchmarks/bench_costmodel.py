"""Learned cost model vs roofline: simulation wall time and per-call cost.

Fits an artifact for Llama-2-70B, TP2 on A100 from the public Vidur tables (linear layers,
attention, NCCL all-reduce), then simulates the same Sarathi run with ``cost_model`` =
``roofline`` and = the artifact, best of ``--repeats``. Target: learned <= 1.5x roofline.
Also times one ``iteration_time`` call for a mixed batch. Needs ``../shared/data``.

    .venv/bin/python benchmarks/bench_costmodel.py [--requests 1024] [--repeats 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import timeit
from pathlib import Path

from simulator.calibrate.fit import fit_tables, save_artifact
from simulator.calibrate.fit_data import read_profiles
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel import BatchShape, load_cost_model
from simulator.simulation import simulate

PROFILES = Path(__file__).resolve().parents[2] / "shared" / "data" / "profiles"
TABLES = ("vidur/compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv", "vidur/legacy_2024-05/a100/attention.csv",
          "vidur/network/a100_dgx/all_reduce.csv")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1024)
    parser.add_argument("--qps", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not PROFILES.is_dir():
        print(f"skipped: {PROFILES} not found")
        return 0
    t0 = time.perf_counter()
    artifact = fit_tables(read_profiles([PROFILES / t for t in TABLES]), tp=2)
    fit_s = time.perf_counter() - t0
    path = Path(tempfile.mkdtemp()) / "llama-2-70b-a100-tp2.json"
    save_artifact(artifact, path)
    replica = ReplicaConfig(model="llama-2-70b", gpu="a100-80gb", tp=2)
    base = RunConfig(replica=replica, scheduler=SchedulerConfig(name="sarathi", chunk_size=512),
                     workload=WorkloadConfig(name="sharegpt", qps=args.qps, num_requests=args.requests), seed=0)
    print(f"fit: {fit_s:.2f} s ({len(artifact['learned_ops'])} learned ops)")

    walls: dict[str, float] = {}
    for name, spec in (("roofline", "roofline"), ("learned", str(path))):
        config = base.replace(cost_model=spec)
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            result = simulate(config)
            best = min(best, time.perf_counter() - start)
        walls[name] = best
        extra = result.extra.get("cost_model_extrapolations", 0)
        print(f"simulate ({name:8s}): {best:.3f} s wall, {args.requests} requests, extrapolations={extra}")
    ratio = walls["learned"] / walls["roofline"]
    print(f"learned / roofline wall time: {ratio:.2f}x (target <= 1.5x)")

    shape = BatchShape.from_requests([(256, 1024)], [1500 + 13 * i for i in range(100)])
    for name, spec in (("roofline", "roofline"), ("learned", str(path))):
        cm = load_cost_model(spec, replica)
        n = 20000
        per_call = timeit.timeit(lambda cm=cm: cm.iteration_time(shape), number=n) / n
        print(f"iteration_time ({name:8s}): {per_call * 1e6:.2f} us per call")
    return 0 if ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
