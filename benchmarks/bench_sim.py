"""Engine speed: simulated requests and output tokens per wall-second, and peak memory.

Runs 10,000 ShareGPT-like requests (the built-in ``sharegpt`` distribution, filtered to
the model's context) per scheduler on Llama-2-7B / A100-80GB, each in a fresh
subprocess so peak RSS is per run. Targets on a 2-core machine: each run under 10 s
wall and 1 GiB peak memory.

    python benchmarks/bench_sim.py [--num-requests 10000] [--qps 2.0] [--schedulers vllm,sarathi] [--engine handset]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

SCHEDULERS = ("vllm", "orca", "fastertransformer", "sarathi")


def one(scheduler: str, num_requests: int, qps: float, model: str, gpu: str, engine: str | None = None) -> dict:
    from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
    from simulator.simulation import simulate

    config = RunConfig(replica=ReplicaConfig(model, gpu), scheduler=SchedulerConfig(scheduler),
                       workload=WorkloadConfig("sharegpt", num_requests=num_requests, qps=qps))
    if engine:  # engine overheads change step times, hence batch sizes and the iteration count
        config = config.replace(engine=engine)
    start = time.perf_counter()
    result = simulate(config)
    wall = time.perf_counter() - start
    num_out = sum(r.num_generated for r in result.requests)
    return {
        "scheduler": scheduler, "num_requests": num_requests, "qps": qps, "wall_s": round(wall, 2),
        "num_iterations": len(result.iterations),
        "requests_per_wall_s": round(num_requests / wall),
        "output_tokens_per_wall_s": round(num_out / wall),
        "iterations_per_wall_s": round(len(result.iterations) / wall),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=10_000)
    parser.add_argument("--qps", type=float, default=2.0)
    parser.add_argument("--model", default="llama-2-7b")
    parser.add_argument("--gpu", default="a100-80gb")
    parser.add_argument("--schedulers", default=",".join(SCHEDULERS))
    parser.add_argument("--engine", default=None, help="engine preset (default: the run default); 'handset' "
                        "reproduces the step times of servesim before engine models")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one(args.child, args.num_requests, args.qps, args.model, args.gpu, args.engine)))
        return
    print(f"{'scheduler':<18}{'wall s':>8}{'iters':>10}{'req/wall-s':>12}{'out tok/wall-s':>16}{'peak MiB':>10}")
    for name in args.schedulers.split(","):
        out = subprocess.run([sys.executable, __file__, "--child", name, "--num-requests", str(args.num_requests),
                              "--qps", str(args.qps), "--model", args.model, "--gpu", args.gpu,
                              *(["--engine", args.engine] if args.engine else [])],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        flag = "" if r["wall_s"] < 10 and r["peak_rss_mib"] < 1024 else "  <- over target"
        print(f"{name:<18}{r['wall_s']:>8}{r['num_iterations']:>10}{r['requests_per_wall_s']:>12}"
              f"{r['output_tokens_per_wall_s']:>16}{r['peak_rss_mib']:>10}{flag}")


if __name__ == "__main__":
    main()
