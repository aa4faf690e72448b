"""Reproduce the Sarathi-Serve capacity study and regenerate this folder's CSVs, figures and tables.

    .venv/bin/python results/sarathi-serve/reproduce.py [--workers 2] [--figures-only]

1. runs (or resumes: finished points are reused) the capacity sweep of ``sweep.toml`` into
   ``sweep/`` -- 24 settings x 3 seeds, 2048 requests per trial;
2. writes ``capacity.csv`` (one row per setting and scheduler) and ``ratios.csv``
   (Sarathi-Serve over vLLM and over Orca, per setting);
3. draws ``figures/``: capacity bars, P99 TBT / P50 TTFT against QPS from the search
   trials, TBT CDFs and iteration timelines at a common load;
4. rewrites the tables between the ``<!-- tables:start -->`` / ``<!-- tables:end -->``
   markers of ``README.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.planning.sweep import build_spec, load_sweep_file, read_point, run_sweep
from simulator.report import plots
from simulator.report.metrics import request_frame, summarize, tbt_samples
from simulator.simulation import simulate

HERE = Path(__file__).resolve().parent
FIGURES = HERE / "figures"
SCHEDULERS = ("vllm", "orca", "sarathi")
MODEL_LABEL = {"mistral-7b": "Mistral-7B, 1xA100", "yi-34b-200k": "Yi-34B, 2xA100 (TP2)"}
# The paper's headline ratios (Sarathi-Serve over vLLM; abstract and Sec. 5.1).
PAPER_VS_VLLM = {"mistral-7b": 2.6, "yi-34b-200k": 3.7}


def slo_label(chunk_size: int) -> str:
    return "strict" if chunk_size == 512 else "relaxed"


def point_doc(point, out: Path) -> dict | None:  # noqa: ANN001
    """A point's finished record: by its key, else (for --figures-only, when run options gained
    fields since the sweep ran and so every key changed) by its parameters in ``sweep.json``."""
    doc = read_point(out, point.key)
    if doc is None and (out / "sweep.json").exists():
        stored = {json.dumps(p["params"], sort_keys=True): p["key"]
                  for p in json.loads((out / "sweep.json").read_text())["points"]}
        key = stored.get(json.dumps(point.params, sort_keys=True))
        doc = read_point(out, key) if key else None
    return doc


def capacity_table(spec, out: Path) -> pd.DataFrame:  # noqa: ANN001
    rows = []
    for point in spec.points:
        doc = point_doc(point, out)
        if doc is None or doc["status"] != "ok":
            raise SystemExit(f"point {point.index} ({point.params}) is {'missing' if doc is None else doc['error']}")
        p, m = point.params, doc["metrics"]
        per_seed = {}
        for t in doc["trials"]:
            if t["passed"]:
                per_seed[t["seed"]] = max(per_seed.get(t["seed"], 0.0), t["qps"])
        rows.append({
            "model": p["model"], "tp": p["tp"], "workload": p["workload"], "max_model_len": p["max_model_len"],
            "slo": slo_label(p["chunk_size"]), "tbt_slo_s": p["tbt_slo"],
            "token_budget": p["chunk_size"] if p["scheduler"] == "sarathi" else None,
            "scheduler": p["scheduler"], "capacity_qps": m["capacity_qps"], "capacity_qps_std": m["capacity_qps_std"],
            "capacity_qps_min": m["capacity_qps_min"], "capacity_qps_max": m["capacity_qps_max"],
            "num_seeds": m["num_seeds"], "num_trials": m["num_trials"],
            "tbt_s_p99_at_capacity": m["tbt_s_p99_at_capacity"], "ttft_s_p50_at_capacity": m["ttft_s_p50_at_capacity"],
            "ttft_s_p99_at_capacity": m["ttft_s_p99_at_capacity"],
            "sched_delay_s_p50_at_capacity": m["sched_delay_s_q_at_capacity"],
            "limited_by": _limit(doc["trials"]),
        })
    return pd.DataFrame(rows)


def _limit(trials: list[dict]) -> str:
    """What failed the smallest failing trial of each seed: the binding constraint."""
    kinds = set()
    for seed in {t["seed"] for t in trials}:
        failed = sorted((t for t in trials if t["seed"] == seed and not t["passed"]), key=lambda t: t["qps"])
        if failed:
            reason = failed[0]["reason"]
            kinds.add("TBT" if "TBT" in reason else "queue")
    return "+".join(sorted(kinds)) or "-"


def ratio_table(cap: pd.DataFrame) -> pd.DataFrame:
    keys = ["model", "workload", "slo", "tbt_slo_s"]
    wide = cap.pivot_table(index=keys, columns="scheduler", values="capacity_qps").reset_index()
    lo = cap.pivot_table(index=keys, columns="scheduler", values="capacity_qps_min").reset_index()
    hi = cap.pivot_table(index=keys, columns="scheduler", values="capacity_qps_max").reset_index()
    out = wide[keys].copy()
    for other in ("vllm", "orca"):
        out[f"sarathi_vs_{other}"] = wide["sarathi"] / wide[other]
        # Range over seeds: worst and best pairing of the per-seed extremes.
        out[f"sarathi_vs_{other}_low"] = lo["sarathi"] / hi[other]
        out[f"sarathi_vs_{other}_high"] = hi["sarathi"] / lo[other]
    out["paper_sarathi_vs_vllm_headline"] = out["model"].map(PAPER_VS_VLLM)
    order = {"mistral-7b": 0, "yi-34b-200k": 1, "sharegpt": 0, "arxiv": 1, "strict": 0, "relaxed": 1}
    return out.sort_values(["model", "workload", "slo"], key=lambda s: s.map(order), ignore_index=True)


def figures(cap: pd.DataFrame, spec, out: Path) -> list[Path]:  # noqa: ANN001
    FIGURES.mkdir(exist_ok=True)
    written = []
    bars = cap.assign(panel=cap["model"].map(MODEL_LABEL) + " · " + cap["workload"])
    bars["slo"] = bars["slo"] + " (" + bars["tbt_slo_s"].map(lambda s: f"{s:g}") + "s)"
    fig = plots.capacity_bars_figure(bars, group="slo", hue="scheduler", facet="panel",
                                     title="Capacity (QPS) at P99 TBT SLO, mean of 3 seeds (bars: std)")
    written += plots.save(fig, FIGURES / "capacity", formats=("png",))

    # Latency against load, from every search trial (seed 0), per setting.
    for setting, group in _trials(spec, out).groupby(["model", "workload", "slo"], sort=False):
        model, workload, slo = setting
        tbt_slo = float(group["tbt_slo_s"].iloc[0])
        fig = plots.latency_vs_qps_figure(
            group[group["seed"] == 0], x="qps", hue="scheduler", slo={"tbt_s_p99": tbt_slo},
            title=f"{MODEL_LABEL[model]}, {workload}, {slo} SLO: search trials (seed 0)")
        written += plots.save(fig, FIGURES / f"latency_{model}_{workload}_{slo}", formats=("png",))

    # TBT CDFs and timelines at one common load: vLLM's strict capacity, Mistral-7B / sharegpt.
    base_points = {p.params["scheduler"]: p for p in spec.points if p.params["model"] == "mistral-7b"
                   and p.params["workload"] == "sharegpt" and p.params["chunk_size"] == 512}
    qps = float(cap[(cap["model"] == "mistral-7b") & (cap["workload"] == "sharegpt") & (cap["slo"] == "strict")
                    & (cap["scheduler"] == "vllm")]["capacity_qps"].iloc[0])
    results = {name: simulate(base_points[name].config.replace(workload__qps=qps)) for name in SCHEDULERS}
    fig = plots.tbt_cdf_figure({n: tbt_samples(r) for n, r in results.items()}, slo_s=0.1,
                               title=f"Mistral-7B, sharegpt, {qps:.2f} QPS (vLLM's strict capacity)")
    written += plots.save(fig, FIGURES / "tbt_cdf_mistral-7b_sharegpt", formats=("png",))
    for name in ("vllm", "sarathi"):
        it = results[name].iteration_frame()
        mid = float(it["started_at"].median())
        fig = plots.iteration_timeline_figure(it, start_at=mid, end_at=mid + 6, requests=request_frame(results[name]),
                                              title=f"{name}: Mistral-7B, sharegpt, {qps:.2f} QPS")
        written += plots.save(fig, FIGURES / f"timeline_{name}_mistral-7b_sharegpt", formats=("png",))
    summaries = {n: summarize(r, tbt_slo_s=0.1) for n, r in results.items()}
    pd.DataFrame([{"scheduler": n, "qps": qps, **{k: s[k] for k in ("tbt_s_p50", "tbt_s_p99", "tbt_s_max", "ttft_s_p50",
                                                                    "ttft_s_p99", "num_preemptions")}}
                  for n, s in summaries.items()]).to_csv(HERE / "common_load_mistral-7b_sharegpt.csv", index=False)
    return written


def _trials(spec, out: Path) -> pd.DataFrame:  # noqa: ANN001
    frames = []
    for point in spec.points:
        doc = point_doc(point, out)
        p = point.params
        frames.append(pd.DataFrame(doc["trials"]).assign(model=p["model"], workload=p["workload"],
                                                         slo=slo_label(p["chunk_size"]), tbt_slo_s=p["tbt_slo"],
                                                         scheduler=p["scheduler"]))
    return pd.concat(frames, ignore_index=True)


def _fmt(x: float, digits: int = 3) -> str:
    return "-" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{digits}g}"


def markdown_tables(cap: pd.DataFrame, ratios: pd.DataFrame) -> str:
    lines = ["### Capacity (QPS; mean ± std over 3 seeds)", "",
             "| model | workload | SLO (P99 TBT) | vLLM | Orca | Sarathi-Serve (budget) | limited by (vLLM / Orca / Sarathi) |",
             "|---|---|---|---|---|---|---|"]
    keys = ["model", "workload", "slo", "tbt_slo_s"]
    for key, group in cap.groupby(keys, sort=False):
        g = group.set_index("scheduler")
        cells = [f"{g.loc[s, 'capacity_qps']:.3f} ± {g.loc[s, 'capacity_qps_std']:.3f}" for s in SCHEDULERS]
        cells[2] += f" ({int(g.loc['sarathi', 'token_budget'])})"
        limits = " / ".join(g.loc[s, "limited_by"] for s in SCHEDULERS)
        lines.append(f"| {MODEL_LABEL[key[0]]} | {key[1]} | {key[2]} ({key[3]:g} s) | " + " | ".join(cells)
                     + f" | {limits} |")
    lines += ["", "### Capacity ratios (Sarathi-Serve over the baseline; range over seed extremes)", "",
              "| model | workload | SLO | Sarathi / vLLM | Sarathi / Orca | paper, Sarathi / vLLM (headline) |",
              "|---|---|---|---|---|---|"]
    for _, r in ratios.iterrows():
        lines.append(
            f"| {MODEL_LABEL[r['model']]} | {r['workload']} | {r['slo']} ({r['tbt_slo_s']:g} s) | "
            f"**{r['sarathi_vs_vllm']:.2f}x** ({r['sarathi_vs_vllm_low']:.2f}-{r['sarathi_vs_vllm_high']:.2f}) | "
            f"**{r['sarathi_vs_orca']:.2f}x** ({r['sarathi_vs_orca_low']:.2f}-{r['sarathi_vs_orca_high']:.2f}) | "
            f"up to {r['paper_sarathi_vs_vllm_headline']:g}x |")
    lines += ["", "### At capacity (mean over seeds)", "",
              "| model | workload | SLO | scheduler | P99 TBT (s) | P50 TTFT (s) | P99 TTFT (s) | P50 sched. delay (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for _, r in cap.iterrows():
        lines.append(f"| {MODEL_LABEL[r['model']]} | {r['workload']} | {r['slo']} | {r['scheduler']} | "
                     f"{_fmt(r['tbt_s_p99_at_capacity'])} | {_fmt(r['ttft_s_p50_at_capacity'])} | "
                     f"{_fmt(r['ttft_s_p99_at_capacity'])} | {_fmt(r['sched_delay_s_p50_at_capacity'])} |")
    return "\n".join(lines)


def update_readme(tables: str) -> None:
    readme = HERE / "README.md"
    text = readme.read_text()
    new = re.sub(r"<!-- tables:start -->.*<!-- tables:end -->",
                 lambda _: f"<!-- tables:start -->\n{tables}\n<!-- tables:end -->", text, flags=re.S)
    readme.write_text(new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--figures-only", action="store_true",
                        help="redraw figures/ (and the tables) from the finished points in sweep/, running none")
    args = parser.parse_args()
    start = time.perf_counter()
    spec = build_spec(load_sweep_file(HERE / "sweep.toml"))
    if not args.figures_only:
        result = run_sweep(spec, HERE / "sweep", workers=args.workers, progress=not args.no_progress)
        print(f"sweep: ran {result.num_run} points, reused {result.num_skipped}, {result.num_failed} failed")
    cap = capacity_table(spec, HERE / "sweep")
    cap.to_csv(HERE / "capacity.csv", index=False, float_format="%.6g")
    ratios = ratio_table(cap)
    ratios.to_csv(HERE / "ratios.csv", index=False, float_format="%.4g")
    written = figures(cap, spec, HERE / "sweep")
    tables = markdown_tables(cap, ratios)
    (HERE / "tables.md").write_text(tables + "\n")
    update_readme(tables)
    print(tables)
    print(f"wrote capacity.csv, ratios.csv, tables.md, {len(written)} figures in {time.perf_counter() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
