"""How well each cost model prices a measured profile (``simulate fidelity --profile``).

``simulate profile`` measures one GPU's kernels; this module asks every cost model the simulator
has to price the same shapes and reports the error per op, so a user who profiled their own GPU
(and the project, for the tables in ``results/h200/``) sees which model to trust for what:

* ``learned``: ``simulate fit``'s model, fitted on 80% of the op's rows (seed 0) and scored on the
  other 20%, as ``simulate fit`` reports it (padded decode batches, which the fit leaves out, unscored);
* ``roofline today (B)`` and ``roofline 2023``: the calibrated roofline with the constants a
  default run uses (fitted to backend B's kernel tables) and the 2023 ones (Vidur's profiles);
* ``tables B``: AIConfigurator's measured kernel tables of backend B for the GPU (``--kernels B``),
  where the data folder holds them.

The models price what they would charge inside a simulated step, so where a profile times
something else the comparison says what it is, not a verdict: the profiler's LM head is the GEMM
alone (the models' ``lm_head_time`` adds the logit gather and final norm, left out here); its
element-wise ops are torch's unfused kernels while the engines fuse them (the tables price a
residual add inside the norm, so it is not scored for them; ``elementwise (sum)`` compares the
four together); and SDPA pads a mixed decode batch to its longest sequence, so those rows are
priced as the padded batch they ran (``attn_decode (padded)``), uniform ones as themselves.

A profile measured with ``--dtype fp8`` has FP8 linear layers (their ops named ``qkv_proj (fp8)``,
priced as FP8 weights) beside bf16 element-wise ops and attention.

Output: tidy ``points`` (one row per measured point and method) and a summary per profile, TP, op,
regime (token ops: decode sizes are <= 256 tokens; prefill attention: with or without cached context
before the chunk) and method: points, median predicted/measured ratio, median
and P95 absolute percentage error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from profiler.schema import TABLE_FILE
from simulator.calibrate.fit import (
    ape,
    decode_rms_context,
    fit_curve,
    fit_decode,
    fit_prefill,
    padded_decode,
    prefill_features,
    split_holdout,
)
from simulator.calibrate.fit_calibration import attention_shapes, roofline_attention_predictions
from simulator.calibrate.fit_data import read_profile
from simulator.config.catalog import ModelSpec, get_model
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel.base import TabulatedCostModel
from simulator.costmodel.calibration import KERNEL_BACKENDS, calibration_for, ridge_knee_scale
from simulator.costmodel.roofline import RooflineCostModel
from simulator.report.titles import PROFILE_FIDELITY_TITLE
from simulator.util.figures import or_skipped
from simulator.util.paths import check_profile_tables

HOLDOUT = 0.2
SEED = 0
DECODE_TOKENS = 256  # token ops at or below this count are "decode" sizes
LINEAR = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down", "lm_head")
ELEMENTWISE = ("norms", "mlp_act", "rotary", "residual_add")
TOKEN_OPS = (*LINEAR, *ELEMENTWISE, "embedding")
ELEMENTWISE_SUM = "elementwise (sum)"
LAYER_GEMMS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down")
LAYER_GEMMS_SUM = "layer GEMMs (sum)"
PADDED = "attn_decode (padded)"
ATTENTION = ("attn_prefill", "attn_decode", PADDED)


def environment(path: Path) -> dict:
    """The ``environment`` block of the profile's ``metadata.json`` beside it (empty where none)."""
    meta = path.parent / "metadata.json"
    try:
        data = json.loads(meta.read_text()) if meta.exists() else {}
    except (OSError, json.JSONDecodeError):
        return {}
    env = dict(data.get("environment") or {})
    config = data.get("config") or {}
    if "l2_flush" in config:
        env["l2_flush"] = config["l2_flush"]  # None on a CPU, which has no flush
    else:  # written before the flush modes existed, when a CUDA run zeroed the buffer
        env["l2_flush"] = "write" if (config.get("device") or env.get("device")) == "cuda" else None
    return env


# -- the models ---------------------------------------------------------------------------------------
def pricers(model: str, gpu: str, tp: int, backends: tuple[str, ...], tables: bool,
            weights: str = "bf16") -> dict[str, TabulatedCostModel]:
    """Every cost model that can price ``model`` on ``gpu`` at ``tp`` with ``weights``, by method name."""
    replica = ReplicaConfig(model=model, gpu=gpu, tp=tp, dtype=weights)
    out: dict[str, TabulatedCostModel] = {  # the roofline and the table model price the same ops
        f"roofline today ({backends[0] if backends else 'all'})":
            RooflineCostModel(replica, calibration_for(gpu, "today", backends[0] if backends else None),
                              table_tokens=1, ridge_scale=ridge_knee_scale(replica.gpu_spec, "today")),
        "roofline 2023": RooflineCostModel(replica, calibration_for(gpu, "2023"), table_tokens=1),
    }
    if tables:
        from simulator.costmodel.aic.model import table_cost_model
        from simulator.costmodel.aic.tables import system_for

        try:
            system_for(gpu)
        except ConfigError:
            return out  # no tables for this GPU
        for backend in backends:
            try:
                out[f"tables {backend}"] = table_cost_model(replica, backend)
            except ConfigError:
                continue  # this backend has no tables for the GPU
    return out


def _token_prices(cm: TabulatedCostModel, rows: pd.DataFrame, spec: ModelSpec, tp: int) -> np.ndarray:
    """What ``cm`` (a roofline or table model: both have ``gemm``) charges for each token-op row (one op a call)."""
    op = str(rows["op"].iloc[0])
    tokens = rows["num_tokens"].to_numpy(dtype=float)
    if op == "lm_head":
        return cm.gemm(tokens, spec.hidden_size, -(-spec.vocab_size // tp))  # the GEMM the profiler times
    if op == "embedding":
        return cm.embedding_time(tokens)
    return np.asarray(cm.token_ops(tokens)[op], dtype=float)


def _kv_tokens(rows: pd.DataFrame) -> np.ndarray:
    """KV tokens each attention row reads (imported tables may not carry the column)."""
    if "kv_tokens" in rows and rows["kv_tokens"].notna().all():
        return rows["kv_tokens"].to_numpy(dtype=float)
    context = rows["context_len"] if "context_len" in rows and rows["context_len"].notna().all() \
        else rows["kv_context"] + rows["chunk_size"]
    return (rows["batch_size"] * context).to_numpy(dtype=float)


# -- scoring ------------------------------------------------------------------------------------------
def _base(op: str) -> str:
    """The op a row group is named after: ``qkv_proj (fp8)`` is ``qkv_proj`` measured in FP8."""
    return op.removesuffix(" (fp8)")


def _frame(label: str, rows: pd.DataFrame, op: str, x: np.ndarray, method: str, pred: np.ndarray) -> pd.DataFrame:
    tokens = rows["num_tokens"].to_numpy(dtype=float)
    if _base(op) in (*TOKEN_OPS, LAYER_GEMMS_SUM, ELEMENTWISE_SUM):
        regime = np.where(tokens <= DECODE_TOKENS, "decode", "prefill")
    elif op == "attn_prefill":  # a chunk after cached context runs a masked kernel in SDPA, another path
        regime = np.where(rows["kv_context"].to_numpy(dtype=float) > 0, "cached context", "no context")
    else:
        regime = np.full(len(rows), "all")
    return pd.DataFrame({"profile": label, "model": rows["model"].to_numpy(), "tp": rows["tp"].to_numpy(dtype=int),
                         "op": op, "regime": regime, "x": x, "measured_s": rows["median_s"].to_numpy(dtype=float),
                         "method": method, "predicted_s": pred})


def _learned_token(rows: pd.DataFrame, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    x = rows["num_tokens"].to_numpy(dtype=float)
    y = rows["median_s"].to_numpy(dtype=float)
    tr, te = split_holdout(len(x), HOLDOUT, rng)
    curve, _, _ = fit_curve(x[tr], y[tr], SEED)
    return te, curve(x[te])


def _learned_attention(op: str, rows: pd.DataFrame, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    y = rows["median_s"].to_numpy(dtype=float)
    tr, te = split_holdout(len(y), HOLDOUT, rng)
    if op == "attn_decode":
        n, k = rows["batch_size"].to_numpy(dtype=float), decode_rms_context(rows)
        model, _, _ = fit_decode(n[tr], k[tr], y[tr], SEED)
        return te, model.predict(n[te], k[te])
    b, c, kv = (rows[col].to_numpy(dtype=float) for col in ("batch_size", "chunk_size", "kv_context"))
    model, _, _ = fit_prefill(b[tr], c[tr], kv[tr], y[tr], SEED)
    return te, model.predict(prefill_features(b[te], c[te], kv[te]))


def _summed(label: str, group: pd.DataFrame, ops: tuple[str, ...], name: str, model: str, tp: int,
            spec: ModelSpec, models: dict[str, TabulatedCostModel]) -> list[pd.DataFrame]:
    """``ops`` summed at the token counts every one of them was measured at (none if one is missing)."""
    if not set(ops) <= set(group["op"]):
        return []
    wide = group[group["op"].isin(ops)].pivot_table(index="num_tokens", columns="op", values="median_s").dropna()
    rows = pd.DataFrame({"model": model, "tp": tp, "num_tokens": wide.index.to_numpy(dtype=float),
                         "median_s": wide[list(ops)].sum(axis=1).to_numpy()})
    return [_frame(label, rows, name, rows["num_tokens"].to_numpy(), method,
                   sum(_token_prices(cm, rows.assign(op=op), spec, tp) for op in ops))
            for method, cm in models.items()]


def score_table(table: pd.DataFrame, label: str, gpu: str, backends: tuple[str, ...] = KERNEL_BACKENDS,
                tables: bool = True) -> pd.DataFrame:
    """One row per (measured point, method) of a tidy profile table of one model on ``gpu``."""
    frames: list[pd.DataFrame] = []
    rng = np.random.default_rng(SEED)
    for (model, tp), group in table.groupby(["model", "tp"], sort=True):
        tp = int(tp)
        spec = get_model(str(model))
        # FP8 rows (an fp8 profile's linear layers) are their own ops, priced with FP8 weights
        fp8 = (group["dtype"].astype(str) == "fp8") if "dtype" in group else pd.Series(False, index=group.index)
        priced = {is_fp8: pricers(str(model), gpu, tp, backends, tables, weights="fp8" if is_fp8 else "bf16")
                  for is_fp8 in set(fp8)}
        models = priced.get(False, {})  # attention and element-wise ops run in bf16
        # in TOKEN_OPS order: each op's held-out split draws from the shared generator in turn
        token_rows = group[group["op"].isin(TOKEN_OPS)]
        for (_, op, is_fp8), rows in token_rows.groupby([token_rows["op"].map(TOKEN_OPS.index), "op", fp8]):
            rows = rows.sort_values("num_tokens").reset_index(drop=True)
            x = rows["num_tokens"].to_numpy(dtype=float)
            name = f"{op} (fp8)" if is_fp8 else op
            te, learned = _learned_token(rows, rng)
            frames.append(_frame(label, rows.iloc[te], name, x[te], "learned", learned))
            for method, cm in priced[is_fp8].items():
                if op == "residual_add" and method.startswith("tables"):
                    continue  # fused into the norm kernel in the tables: priced at zero
                frames.append(_frame(label, rows, name, x, method, _token_prices(cm, rows, spec, tp)))
        # what a step pays: a layer's GEMMs together (per dtype) and its element-wise ops together
        for is_fp8, cms in priced.items():
            frames += _summed(label, group[fp8 == is_fp8], LAYER_GEMMS,
                              f"{LAYER_GEMMS_SUM} (fp8)" if is_fp8 else LAYER_GEMMS_SUM, model, tp, spec, cms)
        frames += _summed(label, group, ELEMENTWISE, ELEMENTWISE_SUM, model, tp, spec, models)
        for op in ATTENTION[:2]:
            rows = group[group["op"] == op].reset_index(drop=True)
            if rows.empty:
                continue
            kv = _kv_tokens(rows)
            # SDPA pads a mixed decode batch to its longest sequence (flash-attn's kernel does not);
            # `simulate fit` leaves those rows out, so the learned model is scored on the others
            padded = padded_decode(rows) if op == "attn_decode" else np.zeros(len(rows), dtype=bool)
            fitted = rows[~padded].reset_index(drop=True)
            te, learned = _learned_attention(op, fitted, rng)
            frames.append(_frame(label, fitted.iloc[te], op, _kv_tokens(fitted)[te], "learned", learned))
            # a padded batch is priced as what it ran: every sequence at the longest one's length
            shapes = attention_shapes(rows.assign(context_len=rows["context_len_max"].where(padded, rows["context_len"]))
                                      if padded.any() else rows)
            for method, cm in models.items():
                pred = roofline_attention_predictions(cm, rows, shapes)
                for name, mask in ((op, ~padded), (PADDED, padded)):
                    if mask.any():
                        frames.append(_frame(label, rows[mask], name, kv[mask], method, pred[mask]))
    if not frames:
        raise ConfigError("--profile", f"{label} has no token-op or attention rows to score",
                          "profile linear, elementwise or attention ops (`simulate profile --ops ...`)")
    return pd.concat(frames, ignore_index=True)


def summarize(points: pd.DataFrame) -> pd.DataFrame:
    """Per profile, TP, op, regime and method: points, median ratio, median and P95 APE."""
    rows = []
    scored = points[np.isfinite(points["predicted_s"])]
    for (label, tp, op, regime, method), g in scored.groupby(["profile", "tp", "op", "regime", "method"], sort=False):
        pred, meas = g["predicted_s"].to_numpy(), g["measured_s"].to_numpy()
        err = ape(pred, meas)
        rows.append({"profile": label, "tp": int(tp), "op": op, "regime": regime, "method": method, "num_points": len(g),
                     "median_ratio": round(float(np.median(pred / meas)), 3),
                     "median_ape": round(float(np.median(err)), 4), "p95_ape": round(float(np.quantile(err, 0.95)), 4)})
    return pd.DataFrame(rows)


def labels(tables: list[Path]) -> list[str]:
    """Short unique names: each table's folder (or file stem) relative to what all of them share."""
    names = [t.parent if t.name == TABLE_FILE else t.with_suffix("") for t in tables]
    resolved = [n.resolve() for n in names]
    common = Path(os.path.commonpath(resolved)) if len(resolved) > 1 else resolved[0].parent
    out = [str(r.relative_to(common)) if r != common else r.name for r in resolved]
    return out if len(set(out)) == len(out) else [str(t) for t in tables]


def tables_available() -> bool:
    """Whether AIConfigurator's kernel tables are where ``--kernels`` reads them."""
    from simulator.costmodel.aic.tables import data_root

    try:
        data_root()
    except ConfigError:
        return False
    return True


def score_profiles(paths: list[Path], backends: tuple[str, ...] = KERNEL_BACKENDS, tables: bool = True,
                   progress: Callable[[str, int, int], None] | None = None) -> tuple[pd.DataFrame, dict[str, dict]]:
    """Points of every profile, and each profile's environment, by label (:func:`labels`)."""
    frames, envs = [], {}
    table_paths = check_profile_tables(paths)  # every path checked, and none twice, before any is read
    for done, (table_path, label) in enumerate(zip(table_paths, labels(table_paths), strict=True)):
        if progress:
            progress(label, done, len(paths))
        table = read_profile(table_path)
        models = sorted({str(m) for m in table["model"].dropna() if str(m)})
        if len(models) != 1:
            raise ConfigError("--profile", f"{table_path} names {len(models)} models ({', '.join(models) or 'none'})",
                              "score a `simulate profile` table, or a Vidur or LLMServingSim file in its model's folder")
        gpus = sorted({str(d) for d in table["device"].dropna() if str(d)})
        if len(gpus) != 1:
            raise ConfigError("--profile", f"{table_path} holds {len(gpus)} devices ({', '.join(gpus) or 'none'})",
                              "score one GPU's profile at a time")
        frames.append(score_table(table, label, gpus[0], backends, tables))
        envs[label] = {**environment(table_path), "gpu": gpus[0], "path": str(table_path)}
    return pd.concat(frames, ignore_index=True), envs


# -- the report ---------------------------------------------------------------------------------------
PLOT_OPS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down", "lm_head", LAYER_GEMMS_SUM, "attn_prefill",
            "attn_decode", ELEMENTWISE_SUM)


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)


def plot_profile(points: pd.DataFrame, label: str, tp: int, out: Path) -> Path:
    """Predicted / measured against the shape, one panel per op, one line per method."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = points[(points["profile"] == label) & (points["tp"] == tp)]
    ops = sorted((op for op in set(g["op"]) if _base(op) in PLOT_OPS), key=lambda op: (PLOT_OPS.index(_base(op)), op))
    methods = list(dict.fromkeys(g["method"]))
    num_rows = max(1, -(-len(ops) // 4))
    fig, axes = plt.subplots(num_rows, 4, figsize=(17, 4 * num_rows), constrained_layout=True, squeeze=False)
    for ax, op in zip(axes.flat, ops, strict=False):
        h = g[g["op"] == op]
        for i, method in enumerate(methods):
            m = h[h["method"] == method].sort_values("x")
            if m.empty:
                continue
            style = "o" if method == "learned" or op in ATTENTION else "-"
            ax.semilogx(m["x"], m["predicted_s"] / m["measured_s"], style, color=f"C{i}", ms=3, lw=1.2,
                        label=method + (" (held out)" if method == "learned" else ""))
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylim(0, 2)
        ax.set_title(op)
        ax.set_xlabel("KV tokens" if op in ATTENTION else "tokens")
        ax.set_ylabel("predicted / measured")
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{label}, TP {tp}: what each cost model charges / what the kernel took")
    dest = out / f"ratio_{_safe(label)}_tp{tp}.png"
    fig.savefig(dest, dpi=72)
    plt.close(fig)
    return dest


def _short_revision(revision: str | None) -> str:
    if not revision:
        return "-"
    return revision[:7] + ("-dirty" if revision.endswith("-dirty") else "")


def _environment_lines(envs: dict[str, dict]) -> list[str]:
    lines = ["| profile | GPU | driver | torch | CUDA | cuDNN | L2 flush | measured | revision |",
             "|---|---|---|---|---|---|---|---|---|"]
    for label, env in envs.items():
        lines.append(f"| {label} | {env.get('device_name') or env.get('gpu')} | {env.get('driver_version') or '-'} | "
                     f"{env.get('torch_version') or '-'} | {env.get('cuda_version') or '-'} | "
                     f"{env.get('cudnn_version') or '-'} | {env.get('l2_flush') or '-'} | "
                     f"{(env.get('date') or '-')[:16]} | {_short_revision(env.get('git_revision'))} |")
    return lines


def render_readme(summary: pd.DataFrame, envs: dict[str, dict], plots: list[Path], command: str,
                  remarks: list[str] | None = None) -> str:
    methods = list(dict.fromkeys(summary["method"]))
    lines = [
        PROFILE_FIDELITY_TITLE,
        "",
        "What each cost model charges for the shapes a `simulate profile` run measured, divided by what the",
        "kernel took (`simulator/calibrate/profile_fidelity.py` says what is compared and how). Regenerate with",
        "",
        f"    {command}",
        "",
        *_environment_lines(envs),
        "",
        "Each cell: median predicted/measured (below 1: the model is faster than the kernel) and, after the",
        "slash, the P95 absolute error. `learned` is scored on the 20% of rows its fit did not see; the others",
        "on every row. Decode sizes are token counts <= 256; prefill attention is split by whether KV was",
        "cached before the chunk (SDPA then takes a masked path). `elementwise (sum)`: norms, activation,",
        "rotary and residual adds together (torch runs them unfused; the engines fuse them).",
        "`attn_decode (padded)`: mixed batches, which SDPA pads to the longest sequence, priced as the",
        "padded batch.",
    ]
    for (label, tp), s in summary.groupby(["profile", "tp"], sort=False):
        lines += ["", f"## {label}, TP {tp}", "", "| op | sizes | points | " + " | ".join(methods) + " |",
                  "|---|---|---|" + "---|" * len(methods)]
        for (op, regime), g in s.groupby(["op", "regime"], sort=False):
            by = g.set_index("method")
            cells = [f"{by.at[m, 'median_ratio']:.2f} / {100 * by.at[m, 'p95_ape']:.0f}%" if m in by.index else "-"
                     for m in methods]
            points = int(by["num_points"].max())
            lines.append(f"| {op} | {regime} | {points} | " + " | ".join(cells) + " |")
    if remarks:  # (said on the terminal too; the README is what stays)
        lines += ["", *(f"Note: {remark}." for remark in remarks)]
    lines += ["", "Plots:", ""] + [f"- `{p.name}`" for p in plots]
    return "\n".join(lines) + "\n"


def write_report(paths: list[Path], out: Path, backends: tuple[str, ...] = KERNEL_BACKENDS, tables: bool = True,
                 command: str = "simulate fidelity --profile ...",
                 progress: Callable[[str, int, int], None] | None = None,
                 notes: list[str] | None = None, remarks: list[str] | None = None) -> pd.DataFrame:
    """Score every profile and write ``fidelity.csv``, one plot per profile and ``README.md`` to ``out``; plots
    matplotlib cannot draw are left out, said in ``notes``; what a reader of the columns should know, in
    ``remarks``."""
    points, envs = score_profiles(paths, backends, tables, progress)
    if remarks is not None and backends:
        for gpu in sorted({env["gpu"] for env in envs.values()}):
            if calibration_for(gpu, "today", backends[0]) == calibration_for(gpu, "2023"):
                # (its column read as the backend's today constants, the same figures under another name; an audit)
                remarks.append(f"{gpu} is of no generation the today constants were fitted for: the 'roofline today "
                             f"({backends[0]})' column prices with the 2023 constants, as 'roofline 2023' does")
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(points)
    summary.to_csv(out / "fidelity.csv", index=False)
    plots: list[Path] = []
    with or_skipped("the figures", notes if notes is not None else []):
        plots = [plot_profile(points, label, int(tp), out)
                 for (label, tp) in points[["profile", "tp"]].drop_duplicates().itertuples(index=False)]
    (out / "README.md").write_text(render_readme(summary, envs, plots, command, remarks))
    return summary
