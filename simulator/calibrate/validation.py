"""The validation report: predictions against every public real-engine measurement at hand.

``simulate validate --out results/validation`` regenerates it. What is compared:

- **Splitwise's vLLM runs** of Llama-2-70B on A100-80GB and H100-80GB, TP 2/4/8
  (``splitwise-sim/perf_model.csv``): the per-token decode time of a batch and the time to
  prefill its prompts, every row (medians of the repeats), under every preset but the 2026 ones
  (:data:`OUT_OF_THE_BOX`; those, fitted on AIConfigurator's silicon rows, are checked against them
  in ``results/validation/silicon``), plus overheads calibrated on one GPU's rows predicting the other GPU. The acceptance subset is
  output 128 tokens, prompts 512 and 2048, batches 1-64, without the rows flagged as source
  anomalies (see :func:`simulator.calibrate.engine_fit.splitwise_rows`).
- **Vidur's CPU-overhead tables** (``vidur/legacy_2023/*/cpu_overheads.csv``): the measured
  per-step CPU time of its engine against the ``sarathi-2023-vidur`` preset's CPU terms.

Rows the catalog cannot price are listed with the reason, not silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from simulator.calibrate.csv_input import read_csv_checked
from simulator.calibrate.engine_fit import (
    SPLITWISE_GPUS,
    SPLITWISE_MODELS,
    VIDUR_CPU_COLUMNS,
    error_summary,
    fit_splitwise,
    predict_rows,
    splitwise_iteration_table,
    splitwise_rows,
)
from simulator.config.errors import ConfigError
from simulator.config.shared_data import SHARED_DATA
from simulator.costmodel.engine_model import ENGINES, EngineCostModel, EngineModel
from simulator.report.titles import VALIDATION_TITLE

# The preset fitted to the Splitwise rows this report compares against (named: not the run default).
SPLITWISE_PRESET = "vllm-2023-splitwise"
# The presets priced on the 2023 rows: every one but the 2026 presets, which model today's engines over their kernel
# tables (fitted on AIConfigurator's silicon rows, and checked against those in results/validation/silicon).
OUT_OF_THE_BOX = ("ideal", "handset", "sarathi-2023-vidur", "vllm-v1", SPLITWISE_PRESET)


def default_data() -> Path:
    return SHARED_DATA / "profiles"


def _predict(table: pd.DataFrame, engine: EngineModel) -> np.ndarray:
    """Every row under ``engine`` over the roofline's 2023 constants, the kernels these 2023 engines ran."""
    out = np.zeros(len(table))
    for (model, gpu), part in table.groupby(["model", "gpu"]):
        out[table.index.get_indexer(part.index)] = predict_rows(part, engine, model, gpu, calibration="2023")
    return out


def splitwise_predictions(table: pd.DataFrame, progress: Callable[[str], None] | None = None
                          ) -> tuple[pd.DataFrame, dict[str, EngineModel]]:
    """Every Splitwise row under each preset of :data:`OUT_OF_THE_BOX` and the cross-GPU calibrations
    (tidy, one row per measurement and engine)."""
    engines: dict[str, tuple[EngineModel, str]] = {n: (ENGINES[n], "preset") for n in OUT_OF_THE_BOX}
    fitted: dict[str, EngineModel] = {}
    for fit_gpu in SPLITWISE_GPUS.values():
        name = f"calibrated-on-{fit_gpu}"
        fitted[name] = fit_splitwise(table, [fit_gpu], name=name)
        engines[name] = (fitted[name], f"fitted on {fit_gpu} acceptance rows")
    frames = []
    for name, (engine, how) in engines.items():
        if progress:
            progress(name)
        part = table.copy()
        part["engine"] = name
        part["engine_origin"] = how
        part["predicted_s"] = _predict(table, engine)
        frames.append(part)
    out = pd.concat(frames, ignore_index=True)
    out["error"] = (out.predicted_s - out.measured_s) / out.measured_s
    return out, fitted


def summarize_splitwise(pred: pd.DataFrame) -> pd.DataFrame:
    rows = []
    acc = pred[pred.acceptance]
    for (engine, kind), part in acc.groupby(["engine", "kind"], sort=False):
        scopes = {"both GPUs": part, **{g: part[part.gpu == g] for g in SPLITWISE_GPUS.values()}}
        for scope, sub in scopes.items():
            s = error_summary(np.abs(sub.error.to_numpy()))
            held_out = engine.startswith("calibrated-on-") and scope not in ("both GPUs", engine.removeprefix("calibrated-on-"))
            rows.append({"engine": engine, "kind": kind, "rows": scope, "held_out_gpu": held_out, "n": s["n"],
                         "median_abs_error": s["median_ape"], "p95_abs_error": s["p95_ape"],
                         "mean_signed_error": float(sub.error.mean()) if len(sub) else float("nan")})
    return pd.DataFrame(rows)


def vidur_cpu_comparison(data: Path) -> pd.DataFrame:
    """Measured per-step CPU time (schedule + sampler + inputs + outputs + Ray RPC) against the
    ``sarathi-2023-vidur`` preset's CPU terms, every row of every legacy table."""
    from simulator.config.run_config import ReplicaConfig
    from simulator.costmodel import load_cost_model
    from simulator.costmodel.base import BatchShape

    rows = []
    engine = ENGINES["sarathi-2023-vidur"]
    for path in sorted((data / "vidur" / "legacy_2023").glob("*/cpu_overheads.csv")):
        df = read_csv_checked(path, "--data", "pass the shared profiles folder", required=(
            *VIDUR_CPU_COLUMNS, "RAY_COMM_TIME_MEDIAN", "tensor_parallel_degree", "model_name", "batch_size"))
        for r in df.itertuples(index=False):
            measured = (sum(getattr(r, c) for c in VIDUR_CPU_COLUMNS) + r.RAY_COMM_TIME_MEDIAN) / 1e3
            tp = int(r.tensor_parallel_degree)
            try:
                name = r.model_name.replace("-Instruct", "")  # same shape as the base model
                cm = load_cost_model("roofline", ReplicaConfig(model=name, gpu="a100-80gb", tp=tp,
                                                              roofline_calibration="2023"), engine)
            except ConfigError as exc:
                rows.append({"gpu": path.parent.name, "model": r.model_name, "tp": tp, "batch": r.batch_size,
                             "measured_s": measured, "predicted_s": np.nan, "note": str(exc)})
                continue
            assert isinstance(cm, EngineCostModel)
            shape = BatchShape.from_requests(decodes=[512] * int(r.batch_size))
            rows.append({"gpu": path.parent.name, "model": cm.replica.model, "tp": tp, "batch": int(r.batch_size),
                         "measured_s": measured, "predicted_s": cm.cpu_time(shape), "note": ""})
    # (a data folder without Vidur's tables: an empty comparison, its columns kept for the report)
    out = pd.DataFrame(rows, columns=["gpu", "model", "tp", "batch", "measured_s", "predicted_s", "note"])
    out["error"] = (out.predicted_s - out.measured_s) / out.measured_s
    return out


def unusable_sources(data: Path) -> pd.DataFrame:
    """Measurements at hand that this report cannot price, with the reason."""
    rows = []
    sw = data / "splitwise-sim" / "perf_model.csv"
    if sw.exists():
        raw = pd.read_csv(sw)
        for (model, hw), part in raw.groupby(["model", "hardware"]):
            if model in SPLITWISE_MODELS and hw in SPLITWISE_GPUS:
                continue
            reason = ("power-capped H100 variant: same token times as h100-80gb, prompt times of a capped clock; "
                      "the catalog has no capped GPU") if hw.endswith("-pcap") else f"{model} is not in the model catalog"
            rows.append({"source": "splitwise-sim/perf_model.csv", "what": f"{model} on {hw}", "rows": len(part),
                         "reason": reason})
    for path in sorted((data / "distserve").glob("profiler-*.json")):
        rows.append({"source": f"distserve/{path.name}", "what": "fitted latency coefficients of OPT-13B/66B",
                     "rows": 0, "reason": "OPT models are not in the catalog and the file holds fitted curves, not runs"})
    return pd.DataFrame(rows, columns=["source", "what", "rows", "reason"])


# -- plots ----------------------------------------------------------------------------------------------------------
def _scatter(pred: pd.DataFrame, engines: list[str], stem: Path) -> list[Path]:
    from simulator.report.plots import save

    fig = Figure(figsize=(11, 5), constrained_layout=True)
    for i, kind in enumerate(("decode", "prompt")):
        ax = fig.add_subplot(1, 2, i + 1)
        for j, engine in enumerate(engines):
            sub = pred[(pred.engine == engine) & (pred.kind == kind) & pred.acceptance]
            ax.scatter(sub.measured_s * 1e3, sub.predicted_s * 1e3, s=14, label=engine, color=f"C{j}", alpha=0.8)
        sub = pred[(pred.kind == kind) & pred.acceptance]
        lo, hi = sub.measured_s.min() * 1e3 * 0.7, sub.measured_s.max() * 1e3 * 1.4
        ax.plot([lo, hi], [lo, hi], color="k", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="k", alpha=0.07, label="±10%")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured (ms)")
        ax.set_ylabel("predicted (ms)")
        ax.set_title("decode step (per token)" if kind == "decode" else "prefill of the batch's prompts")
        ax.legend(fontsize=8)
    fig.suptitle("Splitwise vLLM, Llama-2-70B, A100 + H100, TP 2/4/8 (acceptance rows)")
    return save(fig, stem, ("png",))


def _decode_curves(pred: pd.DataFrame, engines: list[str], stem: Path) -> list[Path]:
    from simulator.report.plots import save

    sub = pred[(pred.kind == "decode") & (pred.prompt_tokens == 512) & (pred.output_tokens == 128)]
    gpus, tps = sorted(sub.gpu.unique()), sorted(sub.tp.unique())
    fig = Figure(figsize=(4 * len(tps), 3.4 * len(gpus)), constrained_layout=True)
    for gi, gpu in enumerate(gpus):
        for ti, tp in enumerate(tps):
            ax = fig.add_subplot(len(gpus), len(tps), gi * len(tps) + ti + 1)
            cell = sub[(sub.gpu == gpu) & (sub.tp == tp)]
            meas = cell[cell.engine == engines[0]].sort_values("batch")
            ok = meas.anomaly == ""
            ax.plot(meas.batch[ok], meas.measured_s[ok] * 1e3, "ko", label="measured")
            if (~ok).any():
                ax.plot(meas.batch[~ok], meas.measured_s[~ok] * 1e3, "kx", label="source anomaly")
            for j, engine in enumerate(engines):
                e = cell[cell.engine == engine].sort_values("batch")
                ax.plot(e.batch, e.predicted_s * 1e3, "-", color=f"C{j}", label=engine)
            ax.set_xscale("log", base=2)
            ax.set_title(f"{gpu} TP{tp}")
            ax.set_xlabel("batch")
            ax.set_ylabel("decode step (ms)")
            ax.set_ylim(bottom=0)
            if gi == 0 and ti == 0:
                ax.legend(fontsize=7)
    fig.suptitle("Decode step vs batch (prompt 512, 128 output tokens)")
    return save(fig, stem, ("png",))


# -- the report -----------------------------------------------------------------------------------------------------
def _pct(x: float) -> str:
    return "-" if x != x else f"{100 * x:.1f}%"


def write_report(out: Path, data: Path | None = None, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    data = Path(data) if data else default_data()
    sw = data / "splitwise-sim" / "perf_model.csv"
    if not sw.exists():
        raise ConfigError("data", f"{sw} does not exist", "pass --data pointing at the shared profiles folder")
    rows = splitwise_rows(sw)
    table = splitwise_iteration_table(rows)
    pred, fitted = splitwise_predictions(table, progress)
    if progress:
        progress("vidur cpu overheads")
    vidur = vidur_cpu_comparison(data)  # (read before anything is written: a bad table leaves no half report)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pred.to_csv(out / "splitwise_predictions.csv", index=False, float_format="%.6g")
    summary = summarize_splitwise(pred)
    summary.to_csv(out / "splitwise_summary.csv", index=False, float_format="%.4f")
    pd.DataFrame([{"engine": n, **e.to_dict()} for n, e in fitted.items()]).to_csv(
        out / "cross_gpu_calibrations.csv", index=False)
    vidur.to_csv(out / "vidur_cpu_overheads.csv", index=False, float_format="%.6g")
    unusable = unusable_sources(data)
    unusable.to_csv(out / "not_compared.csv", index=False)
    _scatter(pred, ["ideal", "handset", SPLITWISE_PRESET], out / "splitwise_scatter")
    _decode_curves(pred, ["ideal", SPLITWISE_PRESET, "calibrated-on-a100-80gb", "calibrated-on-h100-sxm"],
                   out / "splitwise_decode_vs_batch")
    (out / "README.md").write_text(_readme(rows, summary, fitted, vidur, unusable))
    return {"summary": summary, "fitted": fitted}


def _readme(rows: pd.DataFrame, summary: pd.DataFrame, fitted: dict[str, EngineModel], vidur: pd.DataFrame,
            unusable: pd.DataFrame) -> str:
    both = summary[summary.rows == "both GPUs"].pivot_table(index="engine", columns="kind",
                                                           values=["median_abs_error", "p95_abs_error"], sort=False)
    lines = []
    for engine in both.index:
        r = both.loc[engine]
        lines.append(f"| {engine} | {_pct(r[('median_abs_error', 'decode')])} | {_pct(r[('p95_abs_error', 'decode')])} | "
                     f"{_pct(r[('median_abs_error', 'prompt')])} | {_pct(r[('p95_abs_error', 'prompt')])} |")
    cross = summary[summary.held_out_gpu]
    cross_lines = [f"| {r.engine} | {r.rows} | {r.kind} | {_pct(r.median_abs_error)} | {_pct(r.p95_abs_error)} |"
                   for r in cross.itertuples()]
    anomalies = rows[rows.anomaly != ""]
    anomaly_lines = [f"- {r.gpu} TP{r.tp}, prompt {r.prompt_tokens}, batch {r.batch}: {r.anomaly}"
                     for r in anomalies.itertuples()]
    v = vidur.dropna(subset=["predicted_s"])
    verr = np.abs(v.error.to_numpy())
    fit_lines = [f"- `{n}`: " + ", ".join(f"{k}={val}" for k, val in e.to_dict().items()
                                          if k not in ("name", "source", "fitted") and val not in (0.0, (), [], False, None))
                 for n, e in fitted.items()]
    from simulator.config.run_config import ReplicaConfig
    from simulator.engine.kvcache import plan_memory

    kv_tokens = plan_memory(ReplicaConfig(model="llama-2-70b", gpu="a100-80gb", tp=2), 4096, 256).num_kv_tokens
    not_lines = [f"- {r.source}: {r.what} ({r.rows} rows): {r.reason}" for r in unusable.itertuples()]
    return f"""{VALIDATION_TITLE}

Regenerate: `simulate validate --out results/validation` (reads `../shared/data/profiles`;
a few seconds on two cores). Predictions use the calibrated roofline kernels plus an
engine model (`simulator/costmodel/engine_model.py`); `--engine` picks it everywhere.

## Splitwise: vLLM (2023) serving Llama-2-70B, A100-80GB and H100-80GB, TP 2/4/8

Each measurement is the median of its repeats. A *decode* row is the source's `token_time`
(per-token decode time of a batch, priced as one decode step at the mean context, prompt +
64); a *prompt* row is `prompt_time` (prefilling the batch's prompts, priced as one prefill
step). Acceptance rows: 128 output tokens, prompts 512 (batches 1-64) and 2048 (batch 1), both
GPUs, {int(rows.acceptance.sum())} measurements, each giving one decode and one prompt row.

Absolute relative error over the acceptance rows (both GPUs):

| engine | decode median | decode P95 | prompt median | prompt P95 |
|---|---|---|---|---|
{chr(10).join(lines)}

`ideal` is the kernels alone, `handset` the constant servesim used before engine models
(1.5 ms + 25 us a request), `{SPLITWISE_PRESET}` the preset fitted to these rows (the run default until `vllm-2026`).

Calibrated on one GPU's rows, predicting the other (held-out GPU):

| engine | predicted rows | kind | median | P95 |
|---|---|---|---|---|
{chr(10).join(cross_lines)}

Fitted terms (seconds; `collective_extra_s` per collective, by TP):
{chr(10).join(fit_lines)}

Rows treated as source anomalies (excluded from fits and acceptance, kept in the CSV):
{chr(10).join(anomaly_lines) or '- none'}

Why: at TP2 the KV cache (90% of 2 x 80 GB less the weights and activations) holds
{kv_tokens:,} tokens by the simulator's memory plan, fewer than 64 sequences x 640 tokens
= 40,960, so the engine cannot have run the batch at once; the measured prompt
time of batch 64 is below that of batch 32 (794 ms vs 6.6 s on A100), which only a smaller
running batch explains, and the token time drops with it.

What the fit says about the engine: per decode step about 3 ms plus 0.29 ms a request of
CPU work (scheduling, sampling, output processing), and per TP collective a latency floor
that grows with TP (0 at TP2, ~39 us at TP4, ~95 us at TP8 beyond NCCL's own latency): the
decode floor of 45 ms (A100) / 30 ms (H100) at TP4 and TP8 that the kernels alone miss.
Batched prompts beyond ~2048 tokens a step run slower per token than the kernels predict
(`prefill_excess_token_s`); the kernels explain single prompts within a few percent. The
TP2 floor comes out 0 because these rows (one model, no TP1) cannot separate the lowest TP's
floor from the per-step constant, which absorbs it. `{SPLITWISE_PRESET}`'s errors above are in
sample (it was fitted to these rows); the cross-GPU rows are the out-of-sample check. Today's
presets (`vllm-2026`, the run default, `sglang-2026`, `trtllm-2026`) are not priced here: they
model today's engines over their kernel tables, and are checked against AIConfigurator's silicon
rows in `silicon/`.

Plots: `splitwise_scatter.png` (predicted vs measured), `splitwise_decode_vs_batch.png`.
Tables: `splitwise_predictions.csv` (every row x engine), `splitwise_summary.csv`,
`cross_gpu_calibrations.csv`.

## Vidur: CPU overheads of its vLLM/Sarathi-Serve fork (legacy_2023)

Measured per-step CPU time (schedule + sampler + prepare inputs + process outputs + Ray
RPC, medians) against the `sarathi-2023-vidur` preset's CPU terms: {len(v)} rows, median
absolute error {_pct(float(np.median(verr)) if len(verr) else float('nan'))}, P95
{_pct(float(np.quantile(verr, 0.95)) if len(verr) else float('nan'))} (`vidur_cpu_overheads.csv`; the A40 tables are
priced with the same terms: the preset is host-, not GPU-specific).

## Not compared

{chr(10).join(not_lines) or '- nothing'}
"""
