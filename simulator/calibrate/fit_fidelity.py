"""Fidelity report: held-out error of the learned model and the calibrated roofline (``simulate fidelity``).

For every public measured table in ``../shared/data/profiles`` that the cost models can
price, each op's rows are split (seed 0, 20% held out, the same rule as ``simulate fit``);
the learned model is fitted on the rest exactly as ``simulate fit`` fits it, and both the
learned model and the calibrated roofline (the constants in
:mod:`simulator.costmodel.calibration`) predict the held-out rows. The report gives, per
GPU, source and op family, the median and P95 absolute percentage error (APE) of each.

Caveat for the roofline column: its few constants were calibrated on *all* rows of these
tables (held-out rows included), so its error is a fit error, not a generalisation error;
with seven constants shared by every model, TP degree and op it cannot memorise points.

Outputs: ``fidelity.csv`` (tidy: gpu, source, op, method, num_points, median_ape,
p95_ape), PNG plots of predicted vs measured over token count, and ``README.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.calibrate.fit import (
    ape,
    decode_rms_context,
    fit_curve,
    fit_decode,
    fit_prefill,
    prefill_features,
    split_holdout,
)
from simulator.calibrate.fit_calibration import (
    TOKEN_CAL_OPS,
    attention_shapes,
    data_dir,
    roofline_attention_predictions,
    roofline_collective_predictions,
    roofline_token_predictions,
)
from simulator.calibrate.fit_data import read_profile
from simulator.config.catalog import get_model
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel.calibration import calibration_for
from simulator.costmodel.roofline import RooflineCostModel
from simulator.report.titles import FIDELITY_TITLE
from simulator.util.figures import or_skipped

HOLDOUT = 0.2
SEED = 0
GPU_DIRS = {"a100": "a100-80gb", "a40": "a40", "h100": "h100-sxm"}
LSS_LAYERS = ("llmservingsim/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv",
              "llmservingsim/H100/meta-llama/Llama-3.1-8B/tp2/layers.csv",
              "llmservingsim/H100/meta-llama/Llama-3.1-70B/tp1/layers.csv",
              "llmservingsim/H100/meta-llama/Llama-3.1-70B/tp2/layers.csv",
              "llmservingsim/H100/meta-llama/Llama-3.1-70B/tp4/layers.csv")
ATTENTION = (("vidur/legacy_2024-05/a100/attention.csv", "a100-80gb", "llama-2-70b", 2, "Vidur attention.csv"),
             ("llmservingsim/H100/meta-llama/Llama-3.1-70B/tp4/attention.csv", "h100-sxm", "llama-3-70b", 4,
              "LLMServingSim attention.csv"))
NETWORK = ("vidur/network/a100_dgx/all_reduce.csv", "vidur/network/a100_pairwise_nvlink/all_reduce.csv",
           "vidur/network/h100_dgx/all_reduce.csv", "vidur/network/h100_pairwise_nvlink/all_reduce.csv",
           "vidur/network/a100_dgx/send_recv.csv", "vidur/network/h100_dgx/send_recv.csv",
           "vidur/network/a40_pairwise_nvlink/send_recv.csv")


def _points(gpu: str, source: str, op: str, model: str, tp: int, x: np.ndarray, meas: np.ndarray,
            learned: np.ndarray, roofline: np.ndarray | None) -> pd.DataFrame:
    return pd.DataFrame({"gpu": gpu, "source": source, "op": op, "model": model, "tp": tp, "x": x,
                         "measured_s": meas, "learned_s": learned,
                         "roofline_s": roofline if roofline is not None else np.nan})


def token_table_points(table: pd.DataFrame, gpu: str, source: str, curves: dict | None = None) -> pd.DataFrame:
    """Held-out points of every token op of one table (one model, any TPs)."""
    rng = np.random.default_rng(SEED)
    frames = []
    model = str(table["model"].iloc[0])
    try:
        get_model(model)
        priced = True
    except ConfigError:
        priced = False
    for (op, tp), rows in table[table["op"].isin(TOKEN_CAL_OPS + ("lm_head",))].groupby(["op", "tp"]):
        rows = rows.reset_index(drop=True)
        x = rows["num_tokens"].to_numpy(dtype=float)
        y = rows["median_s"].to_numpy(dtype=float)
        tr, te = split_holdout(len(x), HOLDOUT, rng)
        curve, _, _ = fit_curve(x[tr], y[tr], SEED)
        if curves is not None:
            curves[(model, int(tp), op)] = curve
        roof = None
        if priced and _valid(model, gpu, int(tp)):
            roof = roofline_token_predictions(rows.iloc[te].reset_index(drop=True), gpu, calibration_for(gpu))
        frames.append(_points(gpu, source, op, model, int(tp), x[te], y[te], curve(x[te]), roof))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _valid(model: str, gpu: str, tp: int) -> bool:
    try:
        ReplicaConfig(model=model, gpu=gpu, tp=tp)
    except ConfigError:
        return False
    return True


def attention_points(table: pd.DataFrame, gpu: str, model: str, tp: int, source: str) -> pd.DataFrame:
    rng = np.random.default_rng(SEED)
    rf = RooflineCostModel(ReplicaConfig(model=model, gpu=gpu, tp=tp), calibration_for(gpu), table_tokens=1)
    frames = []
    for op, rows in table.groupby("op"):
        rows = rows.reset_index(drop=True)
        y = rows["median_s"].to_numpy(dtype=float)
        tr, te = split_holdout(len(y), HOLDOUT, rng)
        held = rows.iloc[te].reset_index(drop=True)
        if op == "attn_decode":
            n = rows["batch_size"].to_numpy(dtype=float)
            k = decode_rms_context(rows)
            dm, _, _ = fit_decode(n[tr], k[tr], y[tr], SEED)
            learned, x = dm.predict(n[te], k[te]), n[te] * k[te]
        else:
            b, c, kv = (rows[col].to_numpy(dtype=float) for col in ("batch_size", "chunk_size", "kv_context"))
            pm, _, _ = fit_prefill(b[tr], c[tr], kv[tr], y[tr], SEED)
            learned, x = pm.predict(prefill_features(b[te], c[te], kv[te])), b[te] * c[te]
        roof = roofline_attention_predictions(rf, held, attention_shapes(held))
        frames.append(_points(gpu, source, op, model, tp, x, y[te], learned, roof))
    return pd.concat(frames, ignore_index=True)


def collective_points(table: pd.DataFrame, gpu: str, source: str) -> pd.DataFrame:
    rng = np.random.default_rng(SEED)
    frames = []
    op = str(table["op"].iloc[0])
    for world, rows in table.groupby("world_size"):
        rows = rows.reset_index(drop=True)
        x = rows["message_bytes"].to_numpy(dtype=float)
        y = rows["median_s"].to_numpy(dtype=float)
        tr, te = split_holdout(len(x), HOLDOUT, rng)
        curve, _, _ = fit_curve(x[tr], y[tr], SEED)
        roof = None
        if op == "all_reduce" and "dgx" in source:
            roof = roofline_collective_predictions(rows.iloc[te].reset_index(drop=True), gpu, calibration_for(gpu))
        frames.append(_points(gpu, source, f"{op} (world {int(world)})", "", int(world), x[te], y[te],
                              curve(x[te]), roof))
    return pd.concat(frames, ignore_index=True)


def _point_steps(root: Path, curves: dict | None = None) -> list[tuple[str, Callable[[], pd.DataFrame]]]:
    """The tables to score, in order, as (label, job) pairs, so progress can count them."""
    steps: list[tuple[str, Callable[[], pd.DataFrame]]] = []
    for vidur_gpu, gpu in GPU_DIRS.items():
        for path in sorted(root.glob(f"vidur/compute/{vidur_gpu}/*/*/mlp.csv")):
            steps.append((str(path.relative_to(root)),
                          lambda path=path, gpu=gpu, c=curves if vidur_gpu == "a100" else None:
                          token_table_points(read_profile(path), gpu, "Vidur mlp.csv", c)))
    for rel in LSS_LAYERS:
        if (root / rel).exists():
            steps.append((rel, lambda rel=rel: token_table_points(read_profile(root / rel), "h100-sxm",
                                                                  "LLMServingSim layers.csv")))
    for rel, gpu, model, tp, source in ATTENTION:
        if (root / rel).exists():
            steps.append((rel, lambda rel=rel, gpu=gpu, model=model, tp=tp, source=source:
                          attention_points(read_profile(root / rel), gpu, model, tp, source)))
    for rel in NETWORK:
        if (root / rel).exists():
            gpu = GPU_DIRS[Path(rel).parts[2].split("_")[0]]
            steps.append((rel, lambda rel=rel, gpu=gpu:
                          collective_points(read_profile(root / rel), gpu, f"Vidur {Path(rel).parts[2]}")))
    return steps


def collect_points(root: Path, progress: Callable[[str, int, int], None] | None = None,
                   curves: dict | None = None, extra_steps: int = 0) -> pd.DataFrame:
    """Held-out points of every table; ``progress(label, done, total)`` as each table starts
    (``extra_steps``: steps the caller runs afterwards, counted in the total)."""
    steps = _point_steps(root, curves)
    frames = []
    for done, (label, job) in enumerate(steps):
        if progress:
            progress(label, done, len(steps) + extra_steps)
        frames.append(job())
    frames = [f for f in frames if len(f)]
    if not frames:
        raise ConfigError("--data", f"no Vidur or LLMServingSim profiles under {root}",
                          "pass the profiles folder (../shared/data/profiles)")
    return pd.concat(frames, ignore_index=True)


def summarize(points: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (gpu, source, op), g in points.groupby(["gpu", "source", "op"], sort=True):
        for method in ("learned", "roofline"):
            pred = g[f"{method}_s"].to_numpy(dtype=float)
            ok = np.isfinite(pred)
            if not ok.any():
                continue
            e = ape(pred[ok], g["measured_s"].to_numpy(dtype=float)[ok])
            rows.append({"gpu": gpu, "source": source, "op": op, "method": method, "num_points": int(ok.sum()),
                         "median_ape": round(float(np.median(e)), 4), "p95_ape": round(float(np.quantile(e, 0.95)), 4)})
    return pd.DataFrame(rows)


# -- plots -------------------------------------------------------------------------------------------------
def plot_token_ops(root: Path, out: Path, gpu_dir: str, model_path: str, tp: int) -> Path | None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gpu = GPU_DIRS[gpu_dir]
    path = root / f"vidur/compute/{gpu_dir}/{model_path}/mlp.csv"
    if not path.exists():
        return None
    table = read_profile(path)
    table = table[table["tp"] == tp]
    model = str(table["model"].iloc[0])
    ops = [op for op in TOKEN_CAL_OPS if op in set(table["op"])]
    fig, axes = plt.subplots(3, 3, figsize=(13, 10), constrained_layout=True)
    rng = np.random.default_rng(SEED)
    for ax, op in zip(axes.flat, ops, strict=False):
        rows = table[table["op"] == op].reset_index(drop=True)
        x = rows["num_tokens"].to_numpy(dtype=float)
        y = rows["median_s"].to_numpy(dtype=float)
        tr, te = split_holdout(len(x), HOLDOUT, rng)
        curve, family, _ = fit_curve(x[tr], y[tr], SEED)
        grid = np.unique(np.round(np.geomspace(1, x.max(), 300)))
        g = pd.DataFrame({"op": op, "num_tokens": grid, "model": model, "tp": tp})
        roof = roofline_token_predictions(g, gpu, calibration_for(gpu))
        ax.loglog(x[tr], y[tr] * 1e3, ".", color="0.7", ms=3, label="measured (fit)")
        ax.loglog(x[te], y[te] * 1e3, "o", mfc="none", color="k", ms=4, label="measured (held out)")
        ax.loglog(grid, curve(grid) * 1e3, "-", color="C0", label=f"learned ({family})")
        ax.loglog(grid, roof * 1e3, "--", color="C3", label="calibrated roofline")
        ax.set_title(op)
        ax.set_xlabel("tokens")
        ax.set_ylabel("ms")
    axes.flat[0].legend(fontsize=7)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    fig.suptitle(f"{model} tp{tp} on {gpu}: per-layer token ops, Vidur mlp.csv")
    dest = out / f"token_ops_{gpu}_{model}_tp{tp}.png"
    fig.savefig(dest, dpi=80)
    plt.close(fig)
    return dest


def plot_attention(points: pd.DataFrame, out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for source, g in points[points["op"].isin(("attn_prefill", "attn_decode"))].groupby("source"):
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), constrained_layout=True)
        for ax, op in zip(axes, ("attn_prefill", "attn_decode"), strict=True):
            h = g[g["op"] == op]
            ax.loglog(h["measured_s"] * 1e3, h["learned_s"] * 1e3, ".", ms=3, label="learned", color="C0")
            ax.loglog(h["measured_s"] * 1e3, h["roofline_s"] * 1e3, ".", ms=3, label="calibrated roofline", color="C3")
            lo, hi = h["measured_s"].min() * 1e3, h["measured_s"].max() * 1e3
            ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
            ax.set_xlabel("measured (ms)")
            ax.set_ylabel("predicted (ms)")
            ax.set_title(f"{op}: held-out points")
            ax.legend(fontsize=8)
        gpu = g["gpu"].iloc[0]
        fig.suptitle(f"{source} on {gpu} ({g['model'].iloc[0]} tp{int(g['tp'].iloc[0])})")
        dest = out / f"attention_{gpu}_{source.split()[0].lower()}.png"
        fig.savefig(dest, dpi=80)
        plt.close(fig)
        paths.append(dest)
    return paths


def plot_collectives(points: pd.DataFrame, out: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = points[points["op"].str.startswith("all_reduce") & points["source"].str.contains("dgx")]
    fig, ax = plt.subplots(figsize=(7, 5), constrained_layout=True)
    for i, ((gpu, op), h) in enumerate(g.groupby(["gpu", "op"])):
        h = h.sort_values("x")
        ax.loglog(h["x"], h["measured_s"] * 1e3, "o", mfc="none", ms=3, color=f"C{i}", label=f"{gpu} {op} measured")
        ax.loglog(h["x"], h["learned_s"] * 1e3, "-", color=f"C{i}", lw=1)
        ax.loglog(h["x"], h["roofline_s"] * 1e3, "--", color=f"C{i}", lw=1)
    ax.set_xlabel("message bytes")
    ax.set_ylabel("ms")
    ax.set_title("NCCL all-reduce, held-out points (solid: learned, dashed: roofline)")
    ax.legend(fontsize=6)
    dest = out / "all_reduce.png"
    fig.savefig(dest, dpi=80)
    plt.close(fig)
    return dest


def write_report(out: str | Path, root: str | Path | None = None,
                 progress: Callable[[str, int, int], None] | None = None,
                 notes: list[str] | None = None) -> pd.DataFrame:
    """Write the report; ``progress(step, done, total)`` as each step starts; figures matplotlib cannot draw are
    left out of it, said in ``notes``."""
    root = data_dir(root)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    points = collect_points(root, progress, extra_steps=1)
    summary = summarize(points)
    summary.to_csv(out / "fidelity.csv", index=False)
    if progress:
        num_steps = len(_point_steps(root)) + 1
        progress("plots", num_steps - 1, num_steps)
    plots: list[Path | None] = []
    with or_skipped("the figures", notes if notes is not None else []):
        plots = [plot_token_ops(root, out, d, "meta-llama/Llama-2-7b-hf", 1) for d in GPU_DIRS]
        plots.append(plot_token_ops(root, out, "a100", "meta-llama/Llama-2-70b-hf", 4))
        plots += plot_attention(points, out)
        plots.append(plot_collectives(points, out))
    (out / "README.md").write_text(render_readme(summary, [p for p in plots if p is not None]))
    return summary


def _pct(v: float) -> str:
    return f"{100 * v:.1f}%"


def render_readme(summary: pd.DataFrame, plots: list[Path]) -> str:
    wide = summary.pivot_table(index=["gpu", "source", "op"], columns="method", values=["median_ape", "p95_ape"])
    lines = [
        FIDELITY_TITLE,
        "",
        "Held-out error of the learned cost model (`simulate fit`) and of the calibrated roofline",
        "(constants in `simulator/costmodel/calibration.py`, fitted by `simulate calibrate`) against the",
        "public measured profiles in `../shared/data/profiles/` (Vidur, LLMServingSim; see that folder's",
        "README for provenance and units). Regenerate everything here with",
        "",
        "    simulate fidelity --out results/fidelity",
        "",
        "Method: per table, op and TP degree, 20% of the rows (seed 0) are held out; the learned model is",
        "fitted on the rest exactly as `simulate fit` does (family chosen by 5-fold CV), and both models",
        "predict the held-out rows. APE = |predicted - measured| / measured. The roofline's constants were",
        "calibrated on all rows (few constants shared by every model, TP and op, so this is a fit error).",
        "Token ops are per layer as the roofline defines them (`norms` = both layer norms, `residual_add` =",
        "both adds). Attention `x` is context tokens; collectives are indexed by message bytes.",
        "",
        "Acceptance (learned model on the Vidur A100 linear-layer tables, pooled over 8 models x TP 1-8):",
        "median APE <= 5% and P95 <= 15% per op family.",
        "",
    ]
    acc = summary[(summary["gpu"] == "a100-80gb") & (summary["source"] == "Vidur mlp.csv")
                  & (summary["method"] == "learned")]
    ok = bool(len(acc)) and bool((acc["median_ape"] <= 0.05).all() and (acc["p95_ape"] <= 0.15).all())
    lines.append(f"Result: **{'met' if ok else 'NOT met'}** (worst median {_pct(acc['median_ape'].max())}, "
                 f"worst P95 {_pct(acc['p95_ape'].max())}).")
    lines += ["", "| gpu | source | op | points | learned median | learned P95 | roofline median | roofline P95 |",
              "|---|---|---|---|---|---|---|---|"]
    counts = summary[summary["method"] == "learned"].set_index(["gpu", "source", "op"])["num_points"]
    for (gpu, source, op), row in wide.iterrows():
        def cell(metric: str, method: str, row: pd.Series = row) -> str:
            v = row.get((metric, method), np.nan)
            return "-" if v != v else _pct(v)
        lines.append(f"| {gpu} | {source} | {op} | {counts.get((gpu, source, op), '-')} | "
                     f"{cell('median_ape', 'learned')} | {cell('p95_ape', 'learned')} | "
                     f"{cell('median_ape', 'roofline')} | {cell('p95_ape', 'roofline')} |")
    lines += ["", "Notes:",
              "- LLMServingSim's H100 kernels run far below the memory roofline (a 1-token layer norm takes 18 us;",
              "  its decode `kv_cache_size` is the batch total), so the roofline, whose H100 attention constants",
              "  come from Vidur's A100 table, is far off there; the learned model fits that harness as measured.",
              "- Roofline all-reduce is reported for the DGX (NVSwitch) tables only: the catalog's default",
              "  intra-node link; pairwise-NVLink tables are fitted by the learned model alone.",
              "- CPU overhead is not calibrated (the only public table is Vidur's 2023 pre-release).",
              "", "Plots:", ""]
    lines += [f"- `{p.name}`" for p in plots]
    return "\n".join(lines) + "\n"
