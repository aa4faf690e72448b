"""What the AIConfigurator table model costs: loading the tables, and the simulator's loop.

- ``load``: building a :class:`~simulator.costmodel.aic.model.TableCostModel` in a fresh process
  after the imports every run makes (``first``: pyarrow, the parquet reads, grids and token
  tables; what a table-priced run pays on top), and again in the same process for another
  layout (the parquet reads are cached);
- ``loop``: ``simulate()`` of one run (Llama-3.1-8B on H100-SXM, vllm-v1 scheduler, ShareGPT
  lengths, Poisson) with ``--kernels roofline`` and with table kernels: wall and CPU seconds, best
  of ``--repeats`` (the issue asks for a table-priced run within 2x of a roofline run).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_aic_tables.py [--parts load,loop] [--requests 2000]

Prints figures; asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOAD_CASES = (("llama-3.1-8b", "h100-sxm", 1, "vllm"), ("llama-3.1-70b", "b200", 4, "trtllm"),
              ("qwen3-235b-a22b", "h100-sxm", 8, "sglang"), ("deepseek-v3", "b200", 8, "sglang"))
LOAD_SNIPPET = """
import json, sys, time
ti = time.perf_counter()
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel.roofline import RooflineCostModel  # what any run imports (numpy, the catalog)
t0 = time.perf_counter(); c0 = time.process_time()
from simulator.costmodel.aic.model import TableCostModel
model, gpu, tp, backend = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
dtype = "fp8" if model == "deepseek-v3" else "bf16"
TableCostModel(ReplicaConfig(model=model, gpu=gpu, tp=tp, dtype=dtype), backend, quiet=True)
t1 = time.perf_counter(); c1 = time.process_time()
TableCostModel(ReplicaConfig(model=model, gpu=gpu, tp=max(1, tp // 2), dtype=dtype), backend, quiet=True)
t2 = time.perf_counter()
print(json.dumps({"run_imports_wall_s": round(t0 - ti, 3), "first_wall_s": round(t1 - t0, 3), "first_cpu_s": round(c1 - c0, 3), "again_wall_s": round(t2 - t1, 3)}))
"""


def load() -> None:
    for model, gpu, tp, backend in LOAD_CASES:
        out = subprocess.run([sys.executable, "-c", LOAD_SNIPPET, model, gpu, str(tp), backend], capture_output=True,
                             text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
        print(f"load {model} {gpu} tp{tp} {backend}: {json.loads(out.stdout)}")


def loop(requests: int, repeats: int) -> None:
    from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
    from simulator.simulation import simulate

    base = RunConfig(replica=ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm"),
                     scheduler=SchedulerConfig(name="vllm-v1"),
                     workload=WorkloadConfig(name="sharegpt", qps=8.0, num_requests=requests), engine="vllm-v1")
    results = {}
    for kernels in ("roofline", "vllm", "sglang", "trtllm"):
        config = base.replace(replica__kernels=kernels)
        best = None
        for _ in range(repeats):
            w0, c0 = time.perf_counter(), time.process_time()
            result = simulate(config)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            best = (wall, cpu) if best is None or cpu < best[1] else best
        iters = result.extra.get("num_iterations", None) if hasattr(result, "extra") else None
        results[kernels] = best
        print(f"loop kernels={kernels}: wall {best[0]:.3f} s, cpu {best[1]:.3f} s"
              + (f", {iters:,} iterations" if iters else ""))
    for kernels in ("vllm", "sglang", "trtllm"):
        print(f"loop {kernels} / roofline CPU: {results[kernels][1] / results['roofline'][1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="load,loop")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "load" in parts:
        load()
    if "loop" in parts:
        loop(args.requests, args.repeats)


if __name__ == "__main__":
    main()
