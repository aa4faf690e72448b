"""Predicted vs measured TTFT/TPOT for the silicon rows of the models added to the catalog for them.

Kimi-K2.5 and MiniMax-M2.5 joined the catalog after the fit report (``fit_report.py``) was run, so
their rows are in neither ``predictions_fit.csv`` nor the fitted presets. This script runs just
those rows, through the fit report's own harness (``fit_report.rows_and_configs``: closed loop at
the row's concurrency, exact ISL/OSL, 2 measured requests a user, at most 800 requests, the row's
backend's measured kernels, ``max_model_len`` = ISL + OSL + 16, the fit report's KV links), with

- **kernels only**: engine ``ideal`` (the fit report's "kernels only" column);
- **fitted preset**: the row's backend's 2026 preset (``vllm-2026`` etc., fitted on the other
  models' rows: for these models every prediction is held out),

replaying the kernels-only steps where the run is one replica's back-to-back steps
(:func:`simulator.calibrate.silicon_fit.replay`), simulating otherwise (attention-DP ranks,
disaggregated pools). It also rewrites ``not_run.csv`` with today's catalog (the fit report's
reasons: wip, duplicates, what the simulator cannot express, and any of these rows that fail).

    python results/validation/silicon/new_models.py      # ~5-10 minutes on two shared cores

Writes ``new_models_predictions.csv`` (per row), ``new_models_summary.csv`` (median / P90 absolute
error per backend x mode x model and overall) and ``not_run.csv``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(REPO))

NEW_MODELS = ("kimi-k2.5", "minimax-m2.5")
PRESETS = {"vllm": "vllm-2026", "sglang": "sglang-2026", "trtllm": "trtllm-2026"}


def _fit_report():  # noqa: ANN202 - the sibling script, imported as a module
    spec = importlib.util.spec_from_file_location("fit_report", HERE / "fit_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _simulate(config, engine: str) -> tuple[float, float]:  # noqa: ANN001
    from simulator.report.benchmark import benchmark_metrics
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    res = simulate(config.replace(engine=engine), record_iterations=False)
    m = benchmark_metrics(res, request_columns(res))
    return m["mean_ttft_ms"], m["mean_tpot_ms"]


def summarize(pred: pd.DataFrame) -> pd.DataFrame:
    from simulator.calibrate.silicon_fit import error_row

    out = []
    groups = [("all", "all", "all", pred)] + \
        [(b, md, "all", g) for (b, md), g in pred.groupby(["backend", "mode"])] + \
        [(b, md, m, g) for (b, md, m), g in pred.groupby(["backend", "mode", "model"])]
    for backend, mode, model, g in groups:
        for label, col in (("kernels only", "kernel"), ("fitted preset", "preset")):
            e = error_row(g[[f"pred_ttft_ms_{col}", f"pred_tpot_ms_{col}"]].to_numpy(float), g)
            signed = {f"{k}_median_signed": float(np.nanmedian(g[f"pred_{k}_ms_{col}"] / g[f"measured_{k}_ms"] - 1))
                      for k in ("ttft", "tpot")}
            out.append({"backend": backend, "mode": mode, "model": model, "prediction": label, **e, **signed})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    from simulator.calibrate.silicon_fit import Params, TraceCache, replay
    from simulator.costmodel.engine_model import load_engine

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cache", type=Path, default=Path("/tmp/servesim_silicon_traces_new_models.pkl"))
    p.add_argument("--out", type=Path, default=HERE)
    p.add_argument("--limit", type=int, default=0, help="run only the first N rows (a quick look; 0: all)")
    args = p.parse_args(argv)
    fr = _fit_report()
    fr_args = fr._args(["--out", str(args.out)])
    total, distinct, rows, configs, not_run = fr.rows_and_configs(fr_args)
    mask = rows["model"].isin(NEW_MODELS).to_numpy()
    idx = np.flatnonzero(mask)
    if args.limit:
        idx = idx[:args.limit]
    print(f"{total} rows: {distinct} distinct, {len(rows)} expressible ({len(rows) / distinct:.1%}); "
          f"{mask.sum()} of them are {', '.join(NEW_MODELS)}; running {len(idx)}", flush=True)
    cache = TraceCache(args.cache)
    results, started = [], time.perf_counter()
    for n, i in enumerate(idx, 1):
        r, c = rows.iloc[i], configs[i]
        preset = PRESETS[r["backend"]]
        out = {k: r[k] for k in ("id", "backend", "backend_version", "system", "gpu", "model", "mode", "isl", "osl",
                                 "concurrency", "num_copies", "measured_ttft_ms", "measured_tpot_ms")}
        out.update(dtype=c.replica.dtype, tp=c.replica.tp, ep=c.replica.ep, attention_dp=c.replica.attention_dp,
                   preset=preset)
        t0 = time.perf_counter()
        try:
            trace = cache.get(c) if r["mode"] == "agg" else None
            if trace is not None:
                out["how"] = "replayed"
                out["pred_ttft_ms_kernel"], out["pred_tpot_ms_kernel"] = trace.kernel_ttft_ms, trace.kernel_tpot_ms
                out["pred_ttft_ms_preset"], out["pred_tpot_ms_preset"] = replay(
                    trace, Params.from_engine(load_engine(preset)))
            else:
                out["how"] = "simulated"
                out["pred_ttft_ms_kernel"], out["pred_tpot_ms_kernel"] = _simulate(c, "ideal")
                out["pred_ttft_ms_preset"], out["pred_tpot_ms_preset"] = _simulate(c, preset)
        except Exception as err:  # noqa: BLE001 - a row that fails is reported, not fatal
            print(f"  {r['id']}: {type(err).__name__}: {err}", flush=True)
            not_run.append(dict(id=r["id"], backend=r["backend"], system=r["system"], mode=r["mode"],
                                model_path=r["model_path"], reason=f"simulation failed: {type(err).__name__}: {err}"))
            continue
        out["wall_s"] = time.perf_counter() - t0
        results.append(out)
        if n % 20 == 0:
            cache.save()
            print(f"  {n}/{len(idx)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    cache.save()
    pred = pd.DataFrame(results)
    for k in ("ttft", "tpot"):
        for col in ("kernel", "preset"):
            pred[f"{k}_err_{col}"] = pred[f"pred_{k}_ms_{col}"] / pred[f"measured_{k}_ms"] - 1
    summary = summarize(pred)
    args.out.mkdir(parents=True, exist_ok=True)
    pred.to_csv(args.out / "new_models_predictions.csv", index=False, float_format="%.5g")
    summary.to_csv(args.out / "new_models_summary.csv", index=False, float_format="%.4f")
    if not args.limit:
        nr = pd.DataFrame(not_run).sort_values(["reason", "id"])
        nr.to_csv(args.out / "not_run.csv", index=False)
        ran = len(rows) - (len(idx) - len(pred))
        print(f"{ran} of {distinct} distinct rows expressible and not failed ({ran / distinct:.1%}); not run, by reason:")
        print(nr["reason"].str.replace(r"\d+", "N", regex=True).str[:90].value_counts().to_string())
    with pd.option_context("display.width", 220, "display.max_columns", 20):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"{len(pred)} rows in {time.perf_counter() - started:.0f} s; wrote {args.out}/")
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
