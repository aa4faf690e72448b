"""How fast bad input is refused and good input is read (figures once held by timed tests).

Parts:

- ``refusals``: every bad path of ``tests/test_cli_paths.py``'s catalogue as a fresh
  ``python -m simulator`` process (best of ``--repeats``): wall seconds each, and the median and
  worst. The test checks the refusal comes before any work library loads; this prints how long it
  took (the project's aim: well under a second, about a bare ``simulate --help``).
- ``workload``: 10,000 ShareGPT-like requests with gamma arrivals (CV 2) generated, and a
  30,000-row trace CSV loaded (the aims: 0.5 s and 1 s).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_inputs.py [--parts refusals,workload] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def best_wall_s(argv: list[str], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, cwd=ROOT, check=False)
        best = min(best, time.perf_counter() - start)
    return best


def refusals(repeats: int) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from test_cli_paths import BAD_PATHS

    help_s = best_wall_s([sys.executable, "-m", "simulator", "--help"], repeats)
    times = []
    for args, _ in BAD_PATHS:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            (base / "a_file.json").write_text("not a config")
            (base / "a_dir").mkdir()
            (base / "full").mkdir()
            (base / "full" / "notes.txt").write_text("mine")
            places = {"file": str(base / "a_file.json"), "dir": str(base / "a_dir"), "full": str(base / "full"),
                      "missing": str(base / "missing.csv"), "new": str(base / "new")}
            argv = [a.format(**places) for a in args]
            wall_s = best_wall_s([sys.executable, "-m", "simulator", *argv], repeats)
        times.append(wall_s)
        print(f"{wall_s:6.2f} s  simulate {' '.join(args)}")
    print(f"refusals: {len(times)}, median {statistics.median(times):.2f} s, worst {max(times):.2f} s "
          f"(simulate --help: {help_s:.2f} s)")


def workload() -> None:
    import pandas as pd

    from simulator.config.run_config import WorkloadConfig
    from simulator.workload.generate import generate_requests, load_trace

    start = time.perf_counter()
    generate_requests(WorkloadConfig(name="sharegpt", arrival="gamma", cv=2.0, num_requests=10_000,
                                     max_total_tokens=4096), np.random.default_rng(0))
    print(f"generate 10,000 sharegpt requests, gamma CV 2: {time.perf_counter() - start:.3f} s (aim 0.5 s)")
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"arrived_at": np.sort(rng.random(30_000)) * 3600,
                          "num_prefill_tokens": rng.integers(1, 8000, 30_000),
                          "num_decode_tokens": rng.integers(1, 1000, 30_000)})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.csv"
        frame.to_csv(path, index=False)
        start = time.perf_counter()
        num_rows = len(load_trace(path))
        print(f"load a {num_rows:,}-row trace CSV: {time.perf_counter() - start:.3f} s (aim 1 s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="refusals,workload")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - {"refusals", "workload"})
    if unknown:
        parser.error(f"--parts: unknown {', '.join(unknown)} (known: refusals, workload)")
    if "refusals" in parts:
        refusals(args.repeats)
    if "workload" in parts:
        workload()


if __name__ == "__main__":
    main()
