"""Predicted vs measured TTFT/TPOT for AIConfigurator's silicon rows (closed-loop benchmark points).

Reads ``../shared/data/validation/aiconfigurator/silicon_train.csv`` (de-duplicated, wip rows
dropped: :mod:`simulator.calibrate.silicon`), turns each row into a closed-loop run (the row's
concurrency, fixed nominal ISL/OSL, one warm-up request per user left out), simulates it with the
run's default engine preset and the roofline kernels (or ``--engine`` / ``--kernels``), and
writes:

- ``predictions.csv``: one row per expressible row: measured and predicted TTFT/TPOT (mean and
  median over the measured requests) and the relative errors;
- ``unexpressible.csv``: every row not run, with the reason (wip, duplicate, or what the
  simulator cannot express);
- ``summary.csv``: median and P90 absolute relative error of TTFT and TPOT per backend x mode
  (and overall), with row counts.

By default a stratified sample (``--sample N`` rows per backend x GPU x mode, seeded) keeps the
run to a few minutes on two cores; ``--all`` runs every expressible row.

    python results/validation/silicon/run.py            # sampled
    python results/validation/silicon/run.py --all      # every row (long)
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DATA = REPO.parent / "shared" / "data"


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: ../shared/data)")
    p.add_argument("--out", type=Path, default=HERE, help="output folder (default: this folder)")
    p.add_argument("--all", action="store_true", help="run every expressible row (default: a stratified sample)")
    p.add_argument("--sample", type=int, default=6, help="rows per backend x GPU x mode when sampling (default 6)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--requests-per-user", type=int, default=3, help="measured requests per user (default 3)")
    p.add_argument("--max-requests", type=int, default=1500, help="cap on requests per row, warm-up included")
    p.add_argument("--engine", default="vllm-2023-splitwise",
                   help="engine preset or artifact (default: vllm-2023-splitwise, the run default when this "
                        "baseline was made; the run default is now vllm-2026)")
    p.add_argument("--kernels", default=None, help="kernel prices: roofline (default), vllm, sglang, trtllm "
                   "(AIConfigurator's tables), or 'backend' for each row's own engine's tables")
    p.add_argument("--roofline-calibration", default="2023",
                   help="the roofline's constants: 2023 (default: the committed baseline's) or today")
    p.add_argument("--budget", type=int, default=None, help="token budget per step (default 8192)")
    p.add_argument("--range-ratio", type=float, default=0.1, help="lengths banded around ISL/OSL as vllm bench's "
                   "--random-range-ratio (default 0.1; 0 = exactly nominal, which keeps a closed loop's users in "
                   "lockstep waves)")
    return p.parse_args(argv)


def _kernel_changes(kernels: str | None, backend: str) -> dict:
    """The run changes that price with measured kernel tables (``--kernels``): one backend's, or
    ``backend`` for each row's own engine; none for the roofline."""
    if kernels is None or kernels == "roofline":
        return {}
    return {"replica__kernels": backend if kernels == "backend" else kernels}


def _rel(pred: float, meas: float) -> float:
    return (pred - meas) / meas if meas and not math.isnan(pred) else math.nan


def run_row(row, args: argparse.Namespace) -> dict:
    from simulator.calibrate.silicon import DEFAULT_BUDGET, row_config
    from simulator.report.benchmark import benchmark_metrics
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    config = row_config(row, requests_per_user=args.requests_per_user, max_requests=args.max_requests,
                        budget=args.budget or DEFAULT_BUDGET, range_ratio=args.range_ratio, engine=args.engine,
                        extra={**_kernel_changes(args.kernels, row.backend),
                               "replica__roofline_calibration": args.roofline_calibration})
    started = time.perf_counter()
    result = simulate(config, record_iterations=False)
    cols = request_columns(result)
    m = benchmark_metrics(result, cols, percentiles_=(50.0,))
    return {
        "id": row.id, "backend": row.backend, "backend_version": row.backend_version, "system": row.system,
        "gpu": config.replica.gpu, "model": config.replica.model, "mode": row.mode, "isl": row.isl, "osl": row.osl,
        "concurrency": int(row.concurrency), "dtype": config.replica.dtype, "tp": config.replica.tp,
        "pp": config.replica.pp, "ep": config.replica.ep, "engine": config.engine, "num_copies": row.num_copies,
        "num_requests": config.workload.num_requests, "num_rejected": m["failed"],
        "measured_ttft_ms": row.silicon_ttft_ms, "measured_tpot_ms": row.silicon_tpot_ms,
        "pred_ttft_ms": m["mean_ttft_ms"], "pred_ttft_median_ms": m["median_ttft_ms"],
        "pred_tpot_ms": m["mean_tpot_ms"], "pred_tpot_median_ms": m["median_tpot_ms"],
        "ttft_err": _rel(m["mean_ttft_ms"], row.silicon_ttft_ms), "tpot_err": _rel(m["mean_tpot_ms"], row.silicon_tpot_ms),
        "wall_s": time.perf_counter() - started,
    }


def summarize(pred: pd.DataFrame) -> pd.DataFrame:
    rows = []
    groups = [("all", "all", pred)] + [(b, m, g) for (b, m), g in pred.groupby(["backend", "mode"])]
    for backend, mode, g in groups:
        out = {"backend": backend, "mode": mode, "num_rows": len(g)}
        for metric in ("ttft", "tpot"):
            err = g[f"{metric}_err"].abs().dropna()
            out[f"{metric}_median_abs_err"] = float(err.median()) if len(err) else math.nan
            out[f"{metric}_p90_abs_err"] = float(err.quantile(0.9)) if len(err) else math.nan
            out[f"{metric}_median_signed_err"] = float(g[f"{metric}_err"].median()) if len(err) else math.nan
        rows.append(out)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    from simulator.calibrate.silicon import Unexpressible, data_path, read_silicon, row_config

    args = _args(argv)
    path = data_path(args.data)
    if not path.is_file():
        print(f"error: {path} not found (pass --data FOLDER)", file=sys.stderr)
        return 2
    kept, dropped = read_silicon(path)
    skipped = [dict(id=r.id, backend=r.backend, system=r.system, mode=r.mode, model_path=r.model_path, reason=r.dropped)
               for r in dropped.itertuples()]
    runnable = []
    for r in kept.itertuples():
        try:
            row_config(r, extra=_kernel_changes(args.kernels, r.backend))
        except Unexpressible as why:
            skipped.append(dict(id=r.id, backend=r.backend, system=r.system, mode=r.mode, model_path=r.model_path,
                                reason=str(why)))
            continue
        runnable.append(r.Index)
    todo = kept.loc[runnable]
    print(f"{len(kept) + len(dropped)} rows: {len(dropped)} dropped (wip, duplicates), {len(kept)} distinct, "
          f"{len(todo)} expressible ({len(todo) / max(len(kept), 1):.0%} of distinct)")
    if not args.all:
        todo = todo.sample(frac=1.0, random_state=args.seed).groupby(["backend", "system", "mode"]).head(args.sample)
        print(f"sampled {len(todo)} rows ({args.sample} per backend x GPU x mode; --all for every row)")
    results, started = [], time.perf_counter()
    for i, r in enumerate(todo.sort_values("row").itertuples(), 1):
        try:
            results.append(run_row(r, args))
        except Exception as err:  # noqa: BLE001 - a row that fails is reported, not fatal
            skipped.append(dict(id=r.id, backend=r.backend, system=r.system, mode=r.mode, model_path=r.model_path,
                                reason=f"simulation failed: {type(err).__name__}: {err}"))
        if i % 20 == 0:
            print(f"  {i}/{len(todo)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    pred = pd.DataFrame(results)
    pred.to_csv(args.out / "predictions.csv", index=False, float_format="%.6g")
    pd.DataFrame(skipped).sort_values(["reason", "id"]).to_csv(args.out / "unexpressible.csv", index=False)
    summary = summarize(pred) if len(pred) else pd.DataFrame()
    summary.to_csv(args.out / "summary.csv", index=False, float_format="%.4f")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    reasons = pd.DataFrame(skipped)["reason"].str.replace(r"\d+", "N", regex=True).value_counts()
    print("not run, by reason:\n" + reasons.to_string())
    print(f"{len(pred)} rows simulated in {time.perf_counter() - started:.0f} s; wrote {args.out}/")
    return 0 if len(pred) else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
