"""The rows InferenceX's recipes made expressible, predicted by the committed 2026 presets (unseen rows).

The dated dumps' disaggregated rows lack worker counts; :func:`simulator.calibrate.silicon.recipe_layout`
takes them from InferenceX's benchmark matrix where exactly one recipe fits (``inferencex_recipes.py``).
The committed presets (``vllm-2026``, ``sglang-2026``, ``trtllm-2026``, with the fitted handoff) were
fitted before these rows could run, so this is a check on rows they never saw, run exactly as the fit
report runs a row (its client, recipe flags, kernels and KV link; first token from the decode worker).

    python results/validation/silicon/recipe_rows.py --jobs 2     # ~12 minutes on two cores

Writes ``recipe_rows.csv`` (one line a row: the recipe read, measured and predicted TTFT/TPOT) and prints
the median and P90 absolute error by backend x GPU.

With ``--mtp-acceptance A [--mtp-acceptance B ...]`` it runs instead the rows whose one recipe runs MTP
with a known draft length (``recipe_layout``'s ``with_mtp``) at each acceptance named (an AL curve of the
data folder, ``MODEL:METHOD[:THINKING]``, or an i.i.d. rate; ``off``: without MTP), and writes
``recipe_mtp_rows.csv``: the matrix does not record what InferenceX's random prompts accept, so each
acceptance is a stated assumption, not a fit.

    python results/validation/silicon/recipe_rows.py --jobs 2 --mtp-acceptance off \\
        --mtp-acceptance deepseek-v4-pro:mtp:thinking_on --mtp-acceptance deepseek-v4-pro:mtp:thinking_off \
        --mtp-acceptance 1.0 --max-concurrency 512

Results are kept in ``/tmp`` as they come (a cache named by a hash of ``simulator/``), so an interrupted run
resumes.
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

from fit_report import PRESETS, _args, code_hash, parse_acceptance, rows_and_configs  # noqa: E402

OFF = "off"


def _picked(data: Path, mtp: bool) -> tuple[pd.DataFrame, list]:
    """The recipe-read rows, or (``mtp``) those whose recipe runs MTP, each configured as the fit report
    configures it, under its backend's committed preset. The MTP rows are read at full acceptance, a
    stand-in that :func:`_at` replaces."""
    argv = ["--data", str(data)] + (["--mtp-acceptance", "1.0"] if mtp else [])
    _, _, rows, configs, _ = rows_and_configs(_args(argv))
    picked = (rows["mtp_drafts"] > 0 if mtp else rows["workers_from_recipe"]).to_numpy(bool)
    configs = [c.replace(engine=PRESETS[backend], first_token_at="decode")
               for c, backend, k in zip(configs, rows["backend"], picked, strict=True) if k]
    return rows[picked].reset_index(drop=True), configs


def _at(rows: pd.DataFrame, configs: list, acceptance: str | float) -> list:
    """The MTP rows' configs at ``acceptance`` (``off``: without MTP), or why a row cannot take it."""
    from simulator.calibrate.silicon import Unexpressible, mtp_changes

    out: list = []
    for config, drafts in zip(configs, rows["mtp_drafts"], strict=True):
        try:
            out.append(config.replace(speculative=None) if acceptance == OFF
                       else config.replace(**mtp_changes(int(drafts), acceptance)))
        except Unexpressible as why:
            out.append(str(why))
    return out


def _run(keys: list, configs: list, cache: Path, jobs: int) -> list:
    """Each config's simulated (TTFT, TPOT) ms or its failure, read from / added to ``cache`` by key."""
    from simulator.calibrate.silicon import simulate_row

    done: dict = pickle.loads(cache.read_bytes()) if cache.is_file() else {}
    for key, config in zip(keys, configs, strict=True):
        if isinstance(config, str):  # not expressible: its reason is its result
            done[key] = config
    pending = [(k, c) for k, c in zip(keys, configs, strict=True) if k not in done]
    # the largest first, so the last ones left run side by side are small
    pending.sort(key=lambda item: -item[1].workload.concurrency)
    print(f"{len(keys)} rows, {len(pending)} to run", flush=True)
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(simulate_row, c): key for key, c in pending}
        for n, fut in enumerate(as_completed(futures), 1):
            done[futures[fut]] = fut.result()
            cache.write_bytes(pickle.dumps(done))
            if n % 10 == 0 or n == len(pending):
                print(f"  {n}/{len(pending)} rows, {time.perf_counter() - started:.0f} s", flush=True)
    return [done[k] for k in keys]


def _stats(g: pd.DataFrame, tag: str = "") -> pd.Series:
    t, o = g[f"ttft_error{tag}"], g[f"tpot_error{tag}"]
    return pd.Series({"rows": int(o.notna().sum()), "ttft_median": t.abs().median(), "ttft_p90": t.abs().quantile(0.9),
                      "ttft_signed": t.median(), "tpot_median": o.abs().median(), "tpot_p90": o.abs().quantile(0.9),
                      "tpot_signed": o.median()})


def _predicted(out: pd.DataFrame, got: list, tag: str = "") -> None:
    out[f"pred_ttft_ms{tag}"] = [g[0] if not isinstance(g, str) else np.nan for g in got]
    out[f"pred_tpot_ms{tag}"] = [g[1] if not isinstance(g, str) else np.nan for g in got]
    out[f"failed{tag}"] = [g if isinstance(g, str) else "" for g in got]
    for m in ("ttft", "tpot"):
        out[f"{m}_error{tag}"] = out[f"pred_{m}_ms{tag}"] / out[f"measured_{m}_ms"] - 1


def _frame(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows[["id", "backend", "system", "gpu", "model", "isl", "osl", "concurrency", "layout_read_as"]].copy()
    out["measured_ttft_ms"], out["measured_tpot_ms"] = rows["silicon_ttft_ms"], rows["silicon_tpot_ms"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=HERE.parents[2].parent / "shared" / "data")
    p.add_argument("--jobs", type=int, default=1, help="processes (the largest rows take several GB each)")
    p.add_argument("--cache", type=Path, default=None,
                   help="results kept as they come (default: /tmp/servesim_recipe_rows_<hash of simulator/>.pkl, so a "
                        "code change starts afresh)")
    p.add_argument("--mtp-acceptance", action="append", default=[], metavar="CURVE|RATE|off",
                   help="run the MTP recipe rows at this acceptance (repeatable; see the module docstring)")
    p.add_argument("--max-concurrency", type=int, default=0,
                   help="with --mtp-acceptance: leave out rows of more users (speculative runs step every iteration, "
                        "not fast-forwarded: a 512-user row takes ~1.5 min; default 0: all)")
    args = p.parse_args(argv)
    stated = {a: a if a == OFF else parse_acceptance(p, a) for a in args.mtp_acceptance}  # one line, before any run
    if args.cache is None:
        args.cache = Path(f"/tmp/servesim_recipe_rows_{code_hash()}.pkl")
    np.seterr(all="ignore")
    try:
        rows, configs = _picked(args.data, bool(args.mtp_acceptance))
    except Exception as err:  # noqa: BLE001 - one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not args.mtp_acceptance:
        # keyed by row and the recipe read: a row the table now reads otherwise runs again
        got = _run(list(zip(rows["id"], rows["layout_read_as"], strict=True)), configs, args.cache, args.jobs)
        out = _frame(rows)
        _predicted(out, got)
        out.to_csv(HERE / "recipe_rows.csv", index=False, float_format="%.4f")
        ran = out[out["failed"] == ""]
        print(f"{len(ran)} of {len(out)} ran; absolute relative error (signed: median of the signed error)")
        print(ran.groupby("backend").apply(_stats).round(3).to_string())
        print(ran.groupby(["backend", "gpu"]).apply(_stats).round(3).to_string())
        return 0
    if args.max_concurrency:
        small = (rows["concurrency"] <= args.max_concurrency).to_numpy()
        rows, configs = rows[small].reset_index(drop=True), [c for c, k in zip(configs, small, strict=True) if k]
    out = _frame(rows)
    out["mtp_drafts"] = rows["mtp_drafts"].to_numpy()
    for acceptance in args.mtp_acceptance:
        keys = [(i, note, acceptance) for i, note in zip(rows["id"], rows["layout_read_as"], strict=True)]
        print(f"MTP at {acceptance}:", end=" ", flush=True)
        got = _run(keys, _at(rows, configs, stated[acceptance]), args.cache.with_name(args.cache.stem + "_mtp.pkl"), args.jobs)
        _predicted(out, got, f"_{acceptance}")
    out.to_csv(HERE / "recipe_mtp_rows.csv", index=False, float_format="%.4f")
    print("absolute relative error by backend x acceptance (signed: median of the signed error)")
    table = pd.DataFrame({(b, a): _stats(g, f"_{a}") for a in args.mtp_acceptance
                          for b, g in out.groupby("backend")}).T
    print(table.round(3).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
