"""Engine cost of parallel layouts: wall time per simulated iteration, relative to one TP replica.

Same requests (the built-in ``sharegpt`` distribution, Poisson arrivals, one seed) through
three layouts of LLaMA2-70B on A100-80GB:

- ``tp4``: one TP4 replica (the PP=1 loop; the baseline), stepped iteration by iteration
  (``fast_forward`` off), as a pipelined replica always is;
- ``tp4-fast``: the same replica with the fast paths on (event skipping, lockstep decodes),
  shown for scale: skipped iterations cost far less each, so it is no like-for-like baseline;
- ``tp4-pp2``: one TP4 x PP2 replica (two stage processes, micro-batches in flight);
- ``tp4-x4``: four TP4 replicas behind a least-outstanding router.

A pipelined "iteration" is a micro-batch (it passes through every stage); a cluster's
iterations are summed over replicas. Target: at most 2x the baseline's wall time per
iteration. The whole run's wall time is shown too: more, lighter iterations (four replicas
each at a quarter of the load) cost more in total but less each. Each layout is run ``--repeats`` times and the fastest run is kept (the machine
is shared).

    python benchmarks/bench_parallel.py [--num-requests 3000] [--qps 2.0] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

LAYOUTS = {
    "tp4": {"tp": 4, "pp": 1, "num_replicas": 1, "fast_forward": False},
    "tp4-fast": {"tp": 4, "pp": 1, "num_replicas": 1},
    "tp4-pp2": {"tp": 4, "pp": 2, "num_replicas": 1},
    "tp4-x4": {"tp": 4, "pp": 1, "num_replicas": 4},
}


def one(layout: str, num_requests: int, qps: float, scheduler: str, repeats: int) -> dict:
    from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
    from simulator.simulation import simulate

    spec = LAYOUTS[layout]
    config = RunConfig(replica=ReplicaConfig("llama-2-70b", "a100-80gb", tp=spec["tp"], pp=spec["pp"]),
                       scheduler=SchedulerConfig(scheduler), num_replicas=spec["num_replicas"],
                       router="least_outstanding",
                       workload=WorkloadConfig("sharegpt", num_requests=num_requests, qps=qps), seed=0,
                       fast_forward=spec.get("fast_forward", True))
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        result = simulate(config)
        best = min(best, time.perf_counter() - start)
    num_iterations = len(result.iterations)
    return {"layout": layout, "wall_s": best, "num_iterations": num_iterations,
            "us_per_iteration": best / num_iterations * 1e6, "num_stage_records": len(result.stages)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-requests", type=int, default=3000)
    parser.add_argument("--qps", type=float, default=2.0)
    parser.add_argument("--scheduler", default="sarathi")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rows = [one(name, args.num_requests, args.qps, args.scheduler, args.repeats) for name in LAYOUTS]
    base = rows[0]["us_per_iteration"]
    print(f"{args.num_requests} sharegpt requests at {args.qps} qps, {args.scheduler}, llama-2-70b on a100-80gb")
    print(f"{'layout':<10}{'wall s':>8}{'iterations':>12}{'us/iter':>10}{'per iter vs tp4':>17}{'wall vs tp4':>13}")
    for r in rows:
        ratio = r["us_per_iteration"] / base
        flag = "" if ratio <= 2.0 or r["layout"] == "tp4-fast" else "  <- over the 2x target"
        print(f"{r['layout']:<10}{r['wall_s']:>8.2f}{r['num_iterations']:>12}{r['us_per_iteration']:>10.1f}"
              f"{ratio:>17.2f}{r['wall_s'] / rows[0]['wall_s']:>13.2f}{flag}")


if __name__ == "__main__":
    main()
