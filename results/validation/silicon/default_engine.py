"""Which default prices today's engines: the former default preset against the new one, on sampled rows.

Aggregated rows of ``silicon_train.csv`` (the fit report's harness: closed loop at the row's concurrency,
loaded as the row's client most likely did (``fit_report.py --client benchmark``), its sample of ``--sample``
rows per backend x GPU x model), each run under

- ``2023default``: ``vllm-2023-splitwise`` over the roofline (2023 calibration): the first run default;
- ``2026_2023``: ``vllm-2026`` over the same roofline: the run default after it;
- ``2026_today``: ``vllm-2026`` over the roofline's 'today' constants: the run default now;
- ``2026_tables``: ``vllm-2026`` over the row's backend's measured kernels (``--kernels``; gaps priced by the 'today' roofline).

    python results/validation/silicon/default_engine.py [--sample 3]     # ~10 minutes on two shared cores

Writes ``default_engine.csv`` (per row: measured and predicted mean TTFT/TPOT) and prints the median
absolute errors per backend.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

CANDIDATES = {
    "2023default": {"engine": "vllm-2023-splitwise", "kernels": "roofline", "calibration": "2023"},
    "2026_2023": {"engine": "vllm-2026", "kernels": "roofline", "calibration": "2023"},
    "2026_today": {"engine": "vllm-2026", "kernels": "roofline", "calibration": "today"},
    "2026_tables": {"engine": "vllm-2026", "kernels": None, "calibration": "today"},  # None: the row's backend
}


def main(argv: list[str] | None = None) -> int:
    from simulator.report.benchmark import benchmark_metrics
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sample", type=int, default=3, help="rows per backend x GPU x model x mode (default 3)")
    p.add_argument("--out", type=Path, default=HERE / "default_engine.csv")
    args = p.parse_args(argv)
    spec = importlib.util.spec_from_file_location("fit_report", HERE / "fit_report.py")
    fr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fr)
    _, _, rows, configs, _ = fr.rows_and_configs(fr._args(["--sample", str(args.sample)]))
    out = []
    for i in np.flatnonzero((rows["mode"] == "agg").to_numpy()):
        r, c = rows.iloc[i], configs[i]
        rec = {k: r[k] for k in ("id", "backend", "gpu", "model", "isl", "osl", "concurrency",
                                 "measured_ttft_ms", "measured_tpot_ms")}
        for name, cand in CANDIDATES.items():
            replica = dataclasses.replace(c.replica, roofline_calibration=cand["calibration"],
                                          **({"kernels": cand["kernels"]} if cand["kernels"] else {}))
            res = simulate(c.replace(engine=cand["engine"], replica=replica), record_iterations=False)
            m = benchmark_metrics(res, request_columns(res))
            rec[f"ttft_ms_{name}"], rec[f"tpot_ms_{name}"] = m["mean_ttft_ms"], m["mean_tpot_ms"]
        out.append(rec)
        print(f"{len(out)} rows", end="\r", flush=True)
    d = pd.DataFrame(out)
    d.to_csv(args.out, index=False, float_format="%.5g")
    for backend, g in [("all", d), *d.groupby("backend")]:
        errs = [f"{name}: TTFT {np.median(np.abs(g[f'ttft_ms_{name}'] / g.measured_ttft_ms - 1)):.0%} "
                f"TPOT {np.median(np.abs(g[f'tpot_ms_{name}'] / g.measured_tpot_ms - 1)):.0%}" for name in CANDIDATES]
        print(f"{backend:7s} n={len(g):3d} | " + " | ".join(errs))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
