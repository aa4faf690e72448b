"""Speed and scale of the simulator (issue 12): start-up, whole runs, loop throughput, capacity.

Every figure is taken twice over: wall seconds and CPU seconds (user + system), because a
shared machine's wall time says more about the neighbours than about the code. Parts:

- ``startup``: ``simulate --help``, ``models``, ``run --help`` and a 50-request ``run --json`` as
  fresh processes (the project byte-compiled first);
- ``run``: the issue's setting (Llama-2-70B TP2 on A100-80GB, sarathi budget 512, the shared
  ShareGPT trace filtered to 4096 tokens, Poisson 0.4 QPS) as ``simulate run --json`` processes
  at 1,000 and 10,000 requests, event skipping on and off: wall, CPU, peak RSS;
- ``loop``: simulated iterations per CPU-second of ``simulate()`` (no start-up; best of
  ``--loop-repeats`` runs), roofline and
  learned (fitted from the public Vidur tables), decode-heavy low load (0.4 QPS) and near
  capacity (``HIGH_QPS``, 90% of the capacity ``simulate capacity`` finds for this setting at
  the 1 s P99 TBT SLO, one seed);
- ``capacity``: ``simulate capacity`` for Mistral-7B, sarathi 512, strict 0.1 s SLO, one seed
  (2048 requests a trial), in one process and with the default ``--workers auto`` (trials run
  ahead, one process per CPU up to 3);
- ``results``: replays recorded capacity trials of ``results/sarathi-serve`` and compares every
  figure with the recorded one (exactness of the faster loop);
- ``cluster``: ShareGPT requests over 16 replicas of Llama-3-8B on H100-SXM at ``--cluster-qps``
  with ``--out``: wall, CPU, peak RSS (``--cluster-requests``; the issue's figure is 1,000,000;
  ``--cluster-workers N`` runs the replicas in N processes, and CPU s then counts them all).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_speed.py [--parts startup,run,loop,capacity,cluster]

Needs ``../shared/data`` for the trace and Vidur tables (parts that need it say so and skip).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
TRACE = SHARED / "traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
VIDUR = SHARED / "profiles"
VIDUR_TABLES = ("vidur/compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv", "vidur/legacy_2024-05/a100/attention.csv",
                "vidur/network/a100_dgx/all_reduce.csv")
SIMULATE = [sys.executable, "-m", "simulator"]
# The engine preset of every run here, pinned by name so the figures stay comparable with the log in
# benchmarks/README.md (made under it, then the run default; the default is now vllm-2026). Likewise the
# scheduler: sarathi 512, the run default until vllm-v1.
ENGINE = "vllm-2023-splitwise"
# and the roofline's constants (2023's, the default until 'today' on 2026-12-02: benchmarks/README.md)
CALIBRATION = "2023"
ISSUE_RUN = ["run", "--model", "llama-2-70b", "--tp", "2", "--gpu", "a100-80gb", "--scheduler", "sarathi",
             "--chunk-size", "512", "--trace", str(TRACE), "--max-total-tokens", "4096", "--arrival", "poisson",
             "--qps", "0.4", "--engine", ENGINE, "--roofline-calibration", CALIBRATION, "--json"]
# 90% of 0.5547 QPS: `simulate capacity` of ISSUE_RUN's setting at --tbt-slo 1.0 (one seed, roofline,
# default engine vllm-2023-splitwise).
HIGH_QPS = 0.499
# 80% of 16 x 2.938 QPS: `simulate capacity --model llama-3-8b --gpu h100-sxm --workload sharegpt`
# (default SLO: P99 TBT 0.2 s, P50 scheduling delay 2 s; sarathi; one seed).
CLUSTER_QPS = 37.6


def timed(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd`` to completion: wall s, CPU s (user + sys of that child only), peak RSS MiB."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-2000:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mib": round(usage.ru_maxrss / 1024)}


def best_of(cmd: list[str], repeats: int) -> dict[str, float]:
    runs = [timed(cmd) for _ in range(repeats)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


STARTUP = (["--help"], ["models"], ["run", "--help"], ["run", "--num-requests", "50", "--json"])


def part_startup(args: argparse.Namespace) -> list[dict]:
    # Byte-compiled first, as an installed package is: with PYTHONDONTWRITEBYTECODE=1 and no
    # __pycache__, every start would also compile the project's modules from source.
    subprocess.run([sys.executable, "-m", "compileall", "-q", "simulator"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    return [{"part": "startup", "what": f"simulate {' '.join(c)}", **best_of(SIMULATE + c, args.repeats)}
            for c in STARTUP]


def part_run(args: argparse.Namespace) -> list[dict]:
    if not TRACE.exists():
        return [{"part": "run", "what": f"skipped: {TRACE} not found"}]
    rows = []
    for n in (1000, 10_000):
        for ff in (True, False):
            cmd = SIMULATE + ISSUE_RUN + ["--num-requests", str(n)] + ([] if ff else ["--no-fast-forward"])
            rows.append({"part": "run", "what": f"{n} requests, skipping {'on' if ff else 'off'}",
                         **best_of(cmd, args.repeats if n <= 1000 else 1)})
    return rows


def _learned_artifact(tmp: Path) -> str | None:
    from simulator.calibrate.fit import fit_tables, save_artifact
    from simulator.calibrate.fit_data import read_profiles

    paths = [VIDUR / t for t in VIDUR_TABLES]
    if not all(p.exists() for p in paths):
        return None
    table = read_profiles(paths, device="a100-80gb", model="llama-2-70b")
    out = tmp / "llama-2-70b_tp2.json"
    save_artifact(fit_tables(table, model="llama-2-70b", gpu="a100-80gb", tp=2), out)
    return str(out)


def part_loop(args: argparse.Namespace) -> list[dict]:
    if not TRACE.exists():
        return [{"part": "loop", "what": f"skipped: {TRACE} not found"}]
    from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
    from simulator.simulation import simulate

    rows = []
    # Warm-up: the first simulate() of a process pays for lazy imports, cost-model tables and
    # reading the trace (cached per process, as a capacity search's trials share it).
    simulate(RunConfig(workload=WorkloadConfig(trace=str(TRACE), num_requests=20, max_total_tokens=4096), engine=ENGINE))
    with tempfile.TemporaryDirectory() as tmp:
        models = {"roofline": "roofline", "learned": _learned_artifact(Path(tmp))}
        for name, spec in models.items():
            if spec is None:
                rows.append({"part": "loop", "what": f"{name}: skipped (Vidur tables not found)"})
                continue
            for label, qps in (("low load 0.4 QPS", 0.4), (f"near capacity {HIGH_QPS} QPS", HIGH_QPS)):
                for ff in (True, False):
                    config = RunConfig(
                        replica=ReplicaConfig("llama-2-70b", "a100-80gb", tp=2, roofline_calibration=CALIBRATION),
                        scheduler=SchedulerConfig("sarathi", chunk_size=512),
                        workload=WorkloadConfig(trace=str(TRACE), arrival="poisson", qps=qps,
                                                num_requests=args.loop_requests, max_total_tokens=4096),
                        cost_model=spec, fast_forward=ff, engine=ENGINE)
                    cpu = wall = float("inf")
                    for _ in range(args.loop_repeats):  # best of: this machine's speed drifts by the minute
                        cpu0, wall0 = time.process_time(), time.perf_counter()
                        result = simulate(config)
                        cpu = min(cpu, time.process_time() - cpu0)
                        wall = min(wall, time.perf_counter() - wall0)
                    n = len(result.iterations)
                    rows.append({"part": "loop", "what": f"{name}, {label}, skipping {'on' if ff else 'off'}",
                                 "num_iterations": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                                 "iterations_per_cpu_s": round(n / cpu), "iterations_per_wall_s": round(n / wall)})
    return rows


def part_capacity(args: argparse.Namespace) -> list[dict]:
    cmd = SIMULATE + ["capacity", "--model", "mistral-7b", "--scheduler", "sarathi", "--chunk-size", "512",
                      "--tbt-slo", "0.1", "--engine", ENGINE, "--roofline-calibration", CALIBRATION,
                      "--json"]
    # The default, --workers auto (here one process per CPU, at most 3): the trials the search
    # may need next run ahead (same result); --workers 1: one process.
    return [{"part": "capacity", "what": f"mistral-7b sarathi 512, strict 0.1 s, 1 seed, --workers {w}",
             **timed(cmd + ["--workers", w])} for w in ("1", "auto")]


def part_cluster(args: argparse.Namespace) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = SIMULATE + ["run", "--model", "llama-3-8b", "--gpu", "h100-sxm", "--replicas", "16",
                          "--workload", "sharegpt", "--qps", str(args.cluster_qps), "--num-requests",
                          str(args.cluster_requests), "--no-progress", "--json", "--out", tmp,
                          "--workers", str(args.cluster_workers), "--engine", ENGINE,
                          "--roofline-calibration", CALIBRATION,
                          "--scheduler", "sarathi", "--chunk-size", "512"]  # the run default when the log was made
        return [{"part": "cluster", "what": f"{args.cluster_requests} requests, 16x llama-3-8b h100, "
                 f"{args.cluster_qps} QPS, --out, --workers {args.cluster_workers}", **timed(cmd)}]


def _missing(value: object) -> bool:
    """NaN, or the null a JSON file stores for it (a stopped trial's latency figures)."""
    return value is None or value != value


def part_results(args: argparse.Namespace) -> list[dict]:
    """Replay recorded capacity trials of results/sarathi-serve (Mistral-7B, ShareGPT, strict; seed 0's
    last ``--results-trials`` trials of each scheduler, around its capacity) and compare every figure."""
    from dataclasses import asdict

    from simulator.config.run_config import RunConfig
    from simulator.planning.capacity import SLO, run_trial

    rows = []
    for point in sorted((ROOT / "results" / "sarathi-serve" / "sweep" / "points").glob("*.json")):
        doc = json.loads(point.read_text())
        params = doc["params"]
        if (params["model"], params["workload"], params["chunk_size"]) != ("mistral-7b", "sharegpt", 512):
            continue
        config, opts = RunConfig.from_dict(doc["config"]), doc["options"]
        slo = SLO(tbt_s=opts["tbt_slo"], tbt_quantile=opts["tbt_quantile"], sched_delay_s=opts["sched_delay_slo"],
                  sched_delay_quantile=opts["sched_delay_quantile"])
        trials = [t for t in doc["trials"] if t["seed"] == 0][-args.results_trials:]
        start, same, worded = time.process_time(), 0, 0
        for recorded in trials:
            trial = asdict(run_trial(config.replace(seed=0), recorded["qps"], slo, early_exit=opts["early_exit"],
                                    tbt_early_exit=opts["tbt_early_exit"]))
            figures = [k for k in recorded if k not in ("reason", "wall_s")]
            same += all(trial[k] == recorded[k] or (_missing(recorded[k]) and _missing(trial[k])) for k in figures)
            worded += trial["reason"] != recorded["reason"]
        # A reason's text may differ where only its wording changed (digits shown, not the figure).
        rows.append({"part": "results", "what": f"{params['scheduler']}: {same}/{len(trials)} trials with identical "
                     f"figures, {worded} reason texts reworded (qps {', '.join(str(t['qps']) for t in trials)})",
                     "cpu_s": round(time.process_time() - start, 2)})
    return rows


IN_PROCESS = {"loop", "results"}  # parts that simulate inside this process
PARTS = {"startup": part_startup, "run": part_run, "loop": part_loop, "capacity": part_capacity,
         "cluster": part_cluster, "results": part_results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="startup,run,loop,capacity")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many for the short processes")
    parser.add_argument("--loop-requests", type=int, default=2000)
    parser.add_argument("--loop-repeats", type=int, default=3, help="best of this many runs per loop setting")
    parser.add_argument("--cluster-requests", type=int, default=1_000_000)
    parser.add_argument("--cluster-qps", type=float, default=CLUSTER_QPS)
    parser.add_argument("--cluster-workers", type=int, default=1,
                        help="processes for the cluster's replicas (CPU s then counts every process)")
    parser.add_argument("--results-trials", type=int, default=3, help="recorded trials to replay per scheduler")
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of a table")
    args = parser.parse_args()
    parts = args.parts.split(",")
    for part in parts:
        if part not in PARTS:
            raise SystemExit(f"unknown part {part!r}; known: {', '.join(PARTS)}")
    # The parts that time child processes go first: Linux keeps a process's peak RSS across
    # exec, so a child started once this process has grown (loop, results) would report this
    # process's peak as its own.
    for part in sorted(parts, key=lambda p: p in IN_PROCESS):
        for row in PARTS[part](args):
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                figures = "  ".join(f"{k}={v}" for k, v in row.items() if k not in ("part", "what"))
                print(f"{row['part']:<9} {row['what']:<52} {figures}", flush=True)


if __name__ == "__main__":
    main()
