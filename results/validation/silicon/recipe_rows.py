"""The rows InferenceX's recipes made expressible, predicted by the committed 2026 presets (unseen rows).

The dated dumps' disaggregated rows lack worker counts; :func:`simulator.calibrate.silicon.recipe_layout`
takes them from InferenceX's benchmark matrix where exactly one recipe fits (``inferencex_recipes.py``).
The committed presets (``vllm-2026``, ``sglang-2026``, ``trtllm-2026``, with the fitted handoff) were
fitted before these rows could run, so this is a check on rows they never saw, run exactly as the fit
report runs a row (its client, recipe flags, kernels and KV link; first token from the decode worker).

    python results/validation/silicon/recipe_rows.py --jobs 2     # ~30-45 minutes on two cores

Writes ``recipe_rows.csv`` (one line a row: the recipe read, measured and predicted TTFT/TPOT) and prints
the median and P90 absolute error by backend x GPU. Results are kept in ``/tmp`` as they come, so an
interrupted run resumes.
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
sys.path.insert(0, str(HERE))

from fit_report import PRESETS, _args, rows_and_configs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from simulator.calibrate.silicon import simulate_row

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=HERE.parents[2].parent / "shared" / "data")
    p.add_argument("--jobs", type=int, default=1, help="processes (the largest rows take several GB each)")
    p.add_argument("--cache", type=Path, default=Path("/tmp/servesim_recipe_rows.pkl"))
    args = p.parse_args(argv)
    np.seterr(all="ignore")
    try:
        _, _, rows, configs, _ = rows_and_configs(_args(["--data", str(args.data)]))
    except Exception as err:  # noqa: BLE001 - one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    picked = rows["workers_from_recipe"].to_numpy(bool)
    configs = [c.replace(engine=PRESETS[backend], first_token_at="decode")
               for c, backend, k in zip(configs, rows["backend"], picked, strict=True) if k]
    rows = rows[picked].reset_index(drop=True)
    # keyed by row and the recipe read: a row the table now reads otherwise runs again
    done: dict[tuple[str, str], tuple[float, float] | str] = (
        pickle.loads(args.cache.read_bytes()) if args.cache.is_file() else {})
    keys = list(zip(rows["id"], rows["layout_read_as"], strict=True))
    pending = [(k, c) for k, c in zip(keys, configs, strict=True) if k not in done]
    # the largest first, so the last ones left run side by side are small
    pending.sort(key=lambda item: -item[1].workload.concurrency)
    print(f"{len(rows)} rows read from a recipe, {len(pending)} to run", flush=True)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(simulate_row, c): rid for rid, c in pending}
        for n, fut in enumerate(as_completed(futures), 1):
            done[futures[fut]] = fut.result()
            args.cache.write_bytes(pickle.dumps(done))
            if n % 10 == 0 or n == len(pending):
                print(f"  {n}/{len(pending)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    got = [done[k] for k in keys]
    out = rows[["id", "backend", "system", "gpu", "model", "isl", "osl", "concurrency", "layout_read_as"]].copy()
    out["measured_ttft_ms"], out["measured_tpot_ms"] = rows["silicon_ttft_ms"], rows["silicon_tpot_ms"]
    out["pred_ttft_ms"] = [g[0] if not isinstance(g, str) else np.nan for g in got]
    out["pred_tpot_ms"] = [g[1] if not isinstance(g, str) else np.nan for g in got]
    out["failed"] = [g if isinstance(g, str) else "" for g in got]
    for m in ("ttft", "tpot"):
        out[f"{m}_error"] = out[f"pred_{m}_ms"] / out[f"measured_{m}_ms"] - 1
    out.to_csv(HERE / "recipe_rows.csv", index=False, float_format="%.4f")
    ran = out[out["failed"] == ""]

    def stats(g: pd.DataFrame) -> pd.Series:
        t, o = g["ttft_error"].abs(), g["tpot_error"].abs()
        return pd.Series({"rows": len(g), "ttft_median": t.median(), "ttft_p90": t.quantile(0.9),
                          "ttft_signed": g["ttft_error"].median(), "tpot_median": o.median(),
                          "tpot_p90": o.quantile(0.9), "tpot_signed": g["tpot_error"].median()})

    print(f"{len(ran)} of {len(out)} ran; absolute relative error (signed: median of the signed error)")
    print(ran.groupby("backend").apply(stats).round(3).to_string())
    print(ran.groupby(["backend", "gpu"]).apply(stats).round(3).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
