"""Engine cost of attention data parallelism: CPU time per run and iterations per CPU-second.

Qwen3-30B-A3B on one H100 per rank (``--attention-dp N --ep N``), the built-in ``sharegpt``
distribution at each of ``--qps`` (Poisson, one seed), under ``--scheduler`` (vllm-v1 by default, whose steps above
its largest CUDA graph price the MoE at the ranks' own tokens, ``--dp-padding graphs``; sglang or trtllm do so in a
prompt step, ``--dp-padding sum``), DP1, DP2 and DP8, each with the fast paths
off (``--no-fast-forward``: the plain loop) and on (lockstep decodes and event skipping; a DP
replica's ranks step together, :mod:`simulator.engine.dp_group`, and skip together,
:mod:`simulator.fast.dp_group`). Iterations count each rank's. Best of ``--repeats`` (the machine
is shared).

    python benchmarks/bench_dp.py [--num-requests 2000] [--qps 4.0 16.0] [--repeats 2] [--scheduler sglang]
"""

from __future__ import annotations

import argparse
import time


def one(dp: int, fast_forward: bool, num_requests: int, qps: float, repeats: int, scheduler: str = "vllm-v1") -> dict:
    from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
    from simulator.simulation import simulate

    config = RunConfig(replica=ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=1, attention_dp=dp, ep=dp),
                       scheduler=SchedulerConfig(scheduler),
                       workload=WorkloadConfig("sharegpt", num_requests=num_requests, qps=qps), seed=0,
                       fast_forward=fast_forward)
    best, iterations = float("inf"), 0
    for _ in range(repeats):
        started = time.process_time()
        result = simulate(config)
        best = min(best, time.process_time() - started)
        iterations = len(result.iterations)
    return {"dp": dp, "event_skipping": fast_forward, "cpu_s": best, "iterations": iterations,
            "iterations_per_cpu_s": iterations / best}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-requests", type=int, default=2000)
    p.add_argument("--qps", type=float, nargs="+", default=[4.0, 16.0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--scheduler", default="vllm-v1")
    p.add_argument("--dps", type=int, nargs="+", default=[1, 2, 8])
    a = p.parse_args()
    print(f"{'qps':>5} {'dp':>3} {'skipping':>8} {'cpu_s':>7} {'iterations':>10} {'it/cpu-s':>10}")
    for qps in a.qps:
        for dp in a.dps:
            for ff in (False, True):
                r = one(dp, ff, a.num_requests, qps, a.repeats, a.scheduler)
                print(f"{qps:>5g} {r['dp']:>3} {str(r['event_skipping']):>8} {r['cpu_s']:>7.2f} "
                      f"{r['iterations']:>10,} {r['iterations_per_cpu_s']:>10,.0f}")


if __name__ == "__main__":
    main()
