"""TTFT semantics experiment: how the benchmark client's warm-up and the token budget move the error.

Issue 28: with the fitted 2026 presets over each backend's measured kernels, TPOT is within
15-28% at the median but TTFT 43-72%. The benchmark clients (AIPerf ``--warmup-request-count``,
``vllm bench serve --num-warmups``) run the warm-up as a phase of its own and then start the
measured phase from an idle server with every user sending at once; the harness so far ran the
warm-up as the first requests of the same loop. This script runs a fixed stratified sample of
the silicon rows (``--sample`` per backend x GPU x mode, seed 0, as ``run.py``) under

- ``warmup_mode`` ``steady`` (today) or ``drain`` (the clients' phases; ``simulator.engine.closed_loop``),
- exact lengths (``--range-ratio 0``, AIPerf's ``--isl/--osl``) or a 10% band (vllm bench's
  ``--random-range-ratio 0.1``; the rows do not record theirs), or (``s0.8``) InferenceX's client's band,
  ``--random-range-ratio 0.8`` as its ``benchmark_serving.py`` reads it (``--range-style sglang``: [0.8 x len, len]),
- the token budget 8192 for every backend, or each engine's own default (a variant ending in ``-engine``:
  SGLang's ``chunked_prefill_size`` is 16384 on GPUs with more than ~160 GB),

each with ``--kernels <backend>`` and the ``<backend>-2026`` preset, and writes one CSV per variant
(``ttft_semantics/rows_<variant>_rpu<N>.csv``) and ``ttft_semantics/summary_rpu<N>.csv``: median
absolute error of mean TTFT and mean TPOT per backend x mode and variant. ``--requests-per-user``:
3 as the harness (``fit_report.py`` uses 2), 20 as AIPerf's ``--num-requests 20*C`` (at most
``--max-requests`` in all).

    python results/validation/silicon/ttft_semantics.py --variants steady-0,drain-0,steady-0.1,drain-0.1,steady-0-engine,drain-0-engine
    python results/validation/silicon/ttft_semantics.py --requests-per-user 20 --max-requests 4000 \
        --variants steady-0,drain-0,steady-0.1,drain-0.1,steady-0-engine
    python results/validation/silicon/ttft_semantics.py --families db-dump,dated-dump --requests-per-user 10 \
        --max-requests 4000 --variants steady-0,steady-s0.8,drain-s0.8 --summary summary_inferencex_rpu10.csv
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))

# Each engine's default token budget per step, where it differs from 8192 (see the README).
LARGE_GPU_SYSTEMS = ("b200_sxm", "b300_sxm", "gb200", "gb300")  # > 160 GB of HBM


def engine_budget(backend: str, system: str) -> int:
    """SGLang: chunked_prefill_size 16384 on GPUs over ~160 GB, 8192 on 80-160 GB; vLLM V1's API
    server and TRT-LLM: 8192."""
    if backend == "sglang" and system in LARGE_GPU_SYSTEMS:
        return 16384
    return 8192


def _kv_link_of():  # the fit report's KV fabric per row (a script, loaded by path)
    spec = importlib.util.spec_from_file_location("fit_report", HERE / "fit_report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kv_link_of


def sample_rows(data: Path, per_group: int, seed: int) -> pd.DataFrame:
    from simulator.calibrate.silicon import Unexpressible, data_path, read_silicon, row_config

    kept, _ = read_silicon(data_path(data))
    ok = []
    for r in kept.itertuples():
        try:
            row_config(r, extra={"replica__kernels": r.backend})
        except Unexpressible:
            continue
        ok.append(r.Index)
    todo = kept.loc[ok]
    return todo.sample(frac=1.0, random_state=seed).groupby(["backend", "system", "mode"]).head(per_group).sort_values("row")


def run_variant(rows: pd.DataFrame, variant: str, args: argparse.Namespace, kv_link_of) -> pd.DataFrame:
    from simulator.calibrate.silicon import Unexpressible, row_config, source_family
    from simulator.report.benchmark import benchmark_metrics
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    parts = variant.split("-")
    mode, style = parts[0], "sglang" if parts[1].startswith("s") else "vllm"
    rr = float(parts[1].lstrip("s"))
    budgets = parts[2] if len(parts) > 2 else "8192"
    out = []
    started = time.perf_counter()
    for i, r in enumerate(rows.itertuples(), 1):
        link = kv_link_of(r) if r.mode == "disagg" and r.prefill_num_workers == r.prefill_num_workers else None
        budget = engine_budget(r.backend, r.system) if budgets == "engine" else int(budgets)
        t0 = time.perf_counter()
        try:
            config = row_config(r, requests_per_user=args.requests_per_user, max_requests=args.max_requests,
                                budget=budget, range_ratio=rr, range_style=style, engine=f"{r.backend}-2026", warmup_mode=mode,
                                **({"kv_link": link} if link else {}),
                                extra={"replica__kernels": r.backend, "replica__roofline_calibration": "2023",
                                       "replica__max_model_len": int(r.isl) + int(r.osl) + 16,
                                       # as the committed tables were made: one KV link for all
                                       # transfers (2 of the 66 rows have several prefill workers;
                                       # the run default is now a link per worker)
                                       "kv_link_scope": "shared"})
            result = simulate(config, record_iterations=False)
            m = benchmark_metrics(result, request_columns(result), percentiles_=(50.0,))
            ttft, tpot, why = m["mean_ttft_ms"], m["mean_tpot_ms"], ""
        except (Unexpressible, Exception) as err:  # noqa: BLE001 - a failed row is listed, not fatal
            ttft, tpot, why = math.nan, math.nan, f"{type(err).__name__}: {err}"
        out.append({"id": r.id, "family": source_family(r.silicon_data_source), "backend": r.backend,
                    "system": r.system, "mode": r.mode, "model_path": r.model_path,
                    "isl": r.isl, "osl": r.osl, "concurrency": int(r.concurrency), "budget": budget,
                    "measured_ttft_ms": r.silicon_ttft_ms, "measured_tpot_ms": r.silicon_tpot_ms,
                    "pred_ttft_ms": ttft, "pred_tpot_ms": tpot,
                    "ttft_err": ttft / r.silicon_ttft_ms - 1, "tpot_err": tpot / r.silicon_tpot_ms - 1,
                    "failed": why, "wall_s": time.perf_counter() - t0})
        if i % 10 == 0:
            print(f"  {variant}: {i}/{len(rows)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    return pd.DataFrame(out)


def summarize(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for variant, df in frames.items():
        ok = df[np.isfinite(df["ttft_err"]) & np.isfinite(df["tpot_err"])]
        groups = [("all", "all", ok)] + [(b, m, g) for (b, m), g in ok.groupby(["backend", "mode"])]
        for backend, mode, g in groups:
            rows.append({"variant": variant, "backend": backend, "mode": mode, "num_rows": len(g),
                         "ttft_median_abs_err": float(g["ttft_err"].abs().median()),
                         "ttft_median_signed_err": float(g["ttft_err"].median()),
                         "tpot_median_abs_err": float(g["tpot_err"].abs().median()),
                         "tpot_median_signed_err": float(g["tpot_err"].median())})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--out", type=Path, default=HERE / "ttft_semantics")
    p.add_argument("--sample", type=int, default=6, help="rows per backend x GPU x mode (default 6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--requests-per-user", type=int, default=3)
    p.add_argument("--max-requests", type=int, default=800)
    p.add_argument("--variants", default="steady-0,drain-0,steady-0.1,drain-0.1",
                   help="comma-separated MODE-RANGE[-engine]: MODE steady|drain, RANGE the band ratio, "
                        "'-engine' for each engine's default token budget (else 8192)")
    p.add_argument("--families", default=None,
                   help="comma-separated provenance families to keep (silicon.source_family: db-dump, dated-dump, "
                        "gap-analysis, gtl; default all); db-dump,dated-dump are InferenceX's benchmark DB")
    p.add_argument("--summary", default=None, help="summary file name in --out (default summary_rpu<N>.csv)")
    args = p.parse_args(argv)
    from simulator.calibrate.silicon import data_path

    if not data_path(args.data).is_file():
        print(f"error: {data_path(args.data)} not found (pass --data FOLDER)", file=sys.stderr)
        return 2
    rows = sample_rows(args.data, args.sample, args.seed)
    if args.families:
        from simulator.calibrate.silicon import source_family

        keep = [source_family(src) in args.families.split(",") for src in rows["silicon_data_source"]]
        rows = rows[keep].reset_index(drop=True)
    print(f"{len(rows)} sampled rows ({args.sample} per backend x GPU x mode)", flush=True)
    kv_link_of = _kv_link_of()
    args.out.mkdir(parents=True, exist_ok=True)
    frames = {}
    for variant in args.variants.split(","):
        frames[variant] = df = run_variant(rows, variant, args, kv_link_of)
        df.to_csv(args.out / f"rows_{variant}_rpu{args.requests_per_user}.csv", index=False, float_format="%.6g")
    summary = summarize(frames)
    summary.insert(1, "requests_per_user", args.requests_per_user)
    summary.to_csv(args.out / (args.summary or f"summary_rpu{args.requests_per_user}.csv"), index=False, float_format="%.4f")
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
