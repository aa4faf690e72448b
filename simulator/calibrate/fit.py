"""Fit a learned cost model from tidy profile tables (``simulate fit``).

Each op family gets its own small regression problem, and the model family is chosen by
cross-validation on the training rows (5-fold, lowest mean absolute percentage error):

- **token ops** (projections, MLP, norms, activation, rotary, residual adds, embedding,
  LM head) and **collectives** (all-reduce, send/recv, as a function of message bytes):
  one input. Candidates: isotonic regression (monotone piecewise-linear), degree-1 splines
  with 8/16/32 quantile knots on log time, and cubic polynomials in log x on log time. All
  are weighted to minimise *relative* error. Whatever wins is stored as its predictions at
  the distinct training inputs, made non-decreasing (a running maximum), and evaluated by
  linear interpolation: the stored curve *is* the model.
- **decode attention**: a line in the batch's RMS context length per batch size,
  ``t = a[n] + b[n] * sqrt(sum(k^2) / n)``, with ``a`` and ``b`` piecewise-linear in the
  batch size ``n`` (degree-1 spline basis crossed with ``[1, k]``, non-negative weights, so
  ``a, b >= 0``); the number of knots in ``n`` is chosen by CV. Per-batch-size terms capture
  occupancy steps (batch x heads filling the SMs in waves) that a global linear model in
  token sums misses by 10-30%; the RMS length describes a mixed batch's spread (it equals
  the length for a uniform batch and weights long sequences more).
- **prefill attention**: non-negative linear model in per-chunk sums that the engine keeps
  in :class:`~simulator.costmodel.base.BatchShape` (chunk tokens, causal query-key pairs,
  keys read, squared chunk lengths), the subset chosen by CV.

A fraction of each op's rows (``holdout``, default 20%) is kept out of choosing and fitting
the family; the training report gives that fit's error on those rows per op. The family chosen
is then fitted again on *all* the op's rows for the artifact, so the artifact's profiled range
(where :mod:`simulator.costmodel.learned` starts counting extrapolations) is the profile's,
and its edge points are priced by a curve that saw them. Each op's split is drawn from
``(seed, op name)`` alone, so fitting a subset of ops (``--ops``) gives the same models for
them as fitting all. Rows the profiler marked ``suspect`` (faster than the device's peak, or
not positive) are left out, and the artifact counts them per op. The artifact is plain JSON (no
pickles; its schema is :mod:`simulator.costmodel.learned_schema`): :mod:`simulator.costmodel.learned`
loads it without scikit-learn.
"""

from __future__ import annotations

import json
import platform
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import sklearn
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LinearRegression
from sklearn.model_selection import KFold
from sklearn.preprocessing import PolynomialFeatures, SplineTransformer

from simulator.calibrate.fit_data import REQUIRED_BY_OP, TIDY_COLUMNS, validate
from simulator.config.catalog import get_gpu, get_model
from simulator.config.errors import ConfigError
from simulator.costmodel.learned import LINEAR_OPS, roofline_ops_of
from simulator.costmodel.learned_schema import (
    COLLECTIVE_OPS,
    FORMAT_VERSION,
    MOE_FAMILY_OPS,
    TOKEN_FAMILY_OPS,
    Curve,
    DecodeModel,
    PrefillModel,
)

MIN_POINTS = 8  # distinct inputs an op needs before it is fitted
# Distinct inputs the training split must keep: the fewest with which every CV fold fits a curve on two
# distinct inputs. With fewer every family scored inf and the first was taken unchosen; with one, KFold raised.
MIN_TRAIN_POINTS = 3
CV_FOLDS = 5
PREFILL_FEATURES = ("num_prefill_tokens", "prefill_attn_pairs", "prefill_kv_tokens", "prefill_chunk_sq_sum")
PREFILL_SUBSETS = (("num_prefill_tokens", "prefill_attn_pairs"),
                   ("num_prefill_tokens", "prefill_attn_pairs", "prefill_kv_tokens"),
                   ("num_prefill_tokens", "prefill_attn_pairs", "prefill_chunk_sq_sum"),
                   PREFILL_FEATURES)


def ape(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    """Absolute percentage error, as a fraction."""
    return np.abs(np.asarray(pred, dtype=float) - meas) / np.asarray(meas, dtype=float)


# -- one-input curves ------------------------------------------------------------------------------
def _curve_families() -> dict[str, Callable[[np.ndarray, np.ndarray], Callable[[np.ndarray], np.ndarray]]]:
    def isotonic(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        m = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(x, y, sample_weight=1.0 / y**2)
        return m.predict

    def spline(n_knots: int) -> Callable:
        def fit(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
            k = min(n_knots, len(np.unique(x)))
            st = SplineTransformer(n_knots=max(k, 2), degree=1, knots="quantile", extrapolation="linear")
            basis = st.fit_transform(x[:, None])
            lr = LinearRegression().fit(basis, np.log(y))
            return lambda q: np.exp(lr.predict(st.transform(np.asarray(q, dtype=float)[:, None])))
        return fit

    def poly(x: np.ndarray, y: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        pf = PolynomialFeatures(3, include_bias=False)
        lr = LinearRegression().fit(pf.fit_transform(np.log(x)[:, None]), np.log(y))
        return lambda q: np.exp(lr.predict(pf.transform(np.log(np.asarray(q, dtype=float))[:, None])))

    return {"isotonic": isotonic, "pwlinear-8": spline(8), "pwlinear-16": spline(16), "pwlinear-32": spline(32),
            "poly-3-log": poly}


def _to_curve(predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> Curve:
    knots = np.unique(x)
    values = np.maximum.accumulate(np.maximum(predict(knots), 0.0))  # monotone by construction
    return Curve(knots.astype(np.float64), values.astype(np.float64))


def curve_of_family(family: str, x: np.ndarray, y: np.ndarray) -> Curve:
    """The curve of ``family`` (a name :func:`fit_curve` returns) fitted on all of ``x, y``."""
    return _to_curve(_curve_families()[family](x, y), x)


def fit_curve(x: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[Curve, str, dict[str, float]]:
    """Choose a family by K-fold CV (mean APE) and fit it on all of ``x, y``."""
    families = _curve_families()
    folds = KFold(n_splits=min(CV_FOLDS, len(x)), shuffle=True, random_state=seed)
    scores: dict[str, float] = {}
    for name, family in families.items():
        errs = []
        for tr, te in folds.split(x):
            if len(np.unique(x[tr])) < 2:
                continue
            errs.append(ape(_to_curve(family(x[tr], y[tr]), x[tr])(x[te]), y[te]))
        scores[name] = float(np.mean(np.concatenate(errs))) if errs else float("inf")
    best = min(scores, key=scores.get)
    return curve_of_family(best, x, y), best, scores


# -- decode attention ----------------------------------------------------------------------------------
def decode_rms_context(rows: pd.DataFrame) -> np.ndarray:
    """RMS KV length per row: ``sqrt(kv_sq_sum / batch)`` where the table has the exact sum of
    squares (mixed batches, profiler schema), else the (uniform) ``context_len``."""
    k = rows["context_len"].to_numpy(dtype=float)
    if "kv_sq_sum" in rows:
        sq = pd.to_numeric(rows["kv_sq_sum"], errors="coerce").to_numpy(dtype=float)
        b = rows["batch_size"].to_numpy(dtype=float)
        k = np.where(np.isfinite(sq) & (sq > 0), np.sqrt(sq / b), k)
    return k


def padded_decode(rows: pd.DataFrame) -> np.ndarray:
    """Mixed decode batches timed with SDPA, which pads every sequence to the longest: they time
    padding that the engines' paged kernels never do, so the decode fit leaves them out."""
    if "backend" not in rows or "context_len_max" not in rows:
        return np.zeros(len(rows), dtype=bool)
    sdpa = rows["backend"].astype(str).to_numpy() == "sdpa"  # a missing backend (<NA>, nan) is not SDPA
    longest = pd.to_numeric(rows["context_len_max"], errors="coerce").to_numpy(dtype=float)
    mean = pd.to_numeric(rows["context_len"], errors="coerce").to_numpy(dtype=float)
    return sdpa & (longest > mean)  # NaN compares False


def _decode_design(n: np.ndarray, k: np.ndarray, st: SplineTransformer | None, per_seq: bool = False) -> np.ndarray:
    basis = st.transform(n[:, None]) if st is not None else (n[:, None] if per_seq else np.ones((len(n), 1)))
    return np.hstack([basis, basis * k[:, None]])


def _fit_decode_once(n: np.ndarray, k: np.ndarray, y: np.ndarray, n_knots: int, per_seq: bool = False) -> DecodeModel:
    """``n_knots`` spline knots in the batch size (1: one line in the RMS context for every batch size);
    ``per_seq``: one line per sequence, ``n * (a + b * k)`` (a profile of too few batch sizes to shape a
    spline still grows with the sequences it reads)."""
    distinct = len(np.unique(n))
    st = None
    if distinct >= 3 and n_knots >= 2 and not per_seq:
        st = SplineTransformer(n_knots=min(n_knots, distinct), degree=1, knots="quantile",
                               extrapolation="constant").fit(n[:, None])
    lr = LinearRegression(positive=True, fit_intercept=False).fit(_decode_design(n, k, st, per_seq), y,
                                                                  sample_weight=1.0 / y**2)
    max_batch = int(n.max())
    grid = np.arange(max_batch + 1, dtype=np.float64)
    g = _decode_design(np.maximum(grid, 1.0), np.zeros_like(grid), st, per_seq)
    width = g.shape[1] // 2
    a = g[:, :width] @ lr.coef_[:width]
    b = g[:, :width] @ lr.coef_[width:]
    a[0] = b[0] = 0.0
    return DecodeModel(a, b, max_batch, float(k.max()))


def fit_decode(n: np.ndarray, k: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[DecodeModel, str, dict[str, float]]:
    distinct = max(1, len(np.unique(n)))
    options = [o for o in (1, 4, 8, 16, 32, 64, 128) if o <= distinct]
    folds = KFold(n_splits=min(CV_FOLDS, len(n)), shuffle=True, random_state=seed)
    scores: dict[str, float] = {}
    for o in options:
        errs = [ape(_fit_decode_once(n[tr], k[tr], y[tr], o).predict(n[te], k[te]), y[te]) for tr, te in folds.split(n)]
        scores[f"batch-lines-{o}"] = float(np.mean(np.concatenate(errs)))
    if distinct < 4:  # too few batch sizes for a spline: one line for every size (flat in the sequences), or per sequence
        errs = [ape(_fit_decode_once(n[tr], k[tr], y[tr], 1, per_seq=True).predict(n[te], k[te]), y[te])
                for tr, te in folds.split(n)]
        scores["per-seq-lines"] = float(np.mean(np.concatenate(errs)))
    best = min(scores, key=scores.get)
    return decode_of_family(best, n, k, y), best, scores


def decode_of_family(family: str, n: np.ndarray, k: np.ndarray, y: np.ndarray) -> DecodeModel:
    """The decode model of ``family`` (a name :func:`fit_decode` returns) fitted on all of ``n, k, y``."""
    if family == "per-seq-lines":
        return _fit_decode_once(n, k, y, 1, per_seq=True)
    return _fit_decode_once(n, k, y, int(family.rsplit("-", 1)[1]))


# -- prefill attention ----------------------------------------------------------------------------
def prefill_features(batch: np.ndarray, chunk: np.ndarray, kv_before: np.ndarray) -> dict[str, np.ndarray]:
    """The BatchShape sums of ``batch`` equal chunks of ``chunk`` tokens over ``kv_before`` cached ones."""
    return {"num_prefill_tokens": batch * chunk, "prefill_attn_pairs": batch * (chunk * kv_before + chunk * (chunk + 1) / 2),
            "prefill_kv_tokens": batch * (kv_before + chunk), "prefill_chunk_sq_sum": batch * chunk * chunk}


def _fit_prefill_once(feats: dict[str, np.ndarray], y: np.ndarray, subset: tuple[str, ...],
                      chunk: np.ndarray, kv: np.ndarray) -> PrefillModel:
    X = np.column_stack([feats[f] for f in subset])
    lr = LinearRegression(positive=True).fit(X, y, sample_weight=1.0 / y**2)
    return PrefillModel(max(float(lr.intercept_), 0.0), dict(zip(subset, map(float, lr.coef_), strict=True)),
                        float(chunk.max()), float((kv + chunk).max()))


def fit_prefill(batch: np.ndarray, chunk: np.ndarray, kv: np.ndarray, y: np.ndarray,
                seed: int = 0) -> tuple[PrefillModel, str, dict[str, float]]:
    feats = prefill_features(batch, chunk, kv)
    folds = KFold(n_splits=min(CV_FOLDS, len(y)), shuffle=True, random_state=seed)
    scores: dict[str, float] = {}
    for subset in PREFILL_SUBSETS:
        errs = []
        for tr, te in folds.split(y):
            m = _fit_prefill_once({f: v[tr] for f, v in feats.items()}, y[tr], subset, chunk[tr], kv[tr])
            errs.append(ape(m.predict({f: v[te] for f, v in feats.items()}), y[te]))
        scores["linear:" + "+".join(subset)] = float(np.mean(np.concatenate(errs)))
    best = min(scores, key=scores.get)
    return prefill_of_family(best, batch, chunk, kv, y), best, scores


def prefill_of_family(family: str, batch: np.ndarray, chunk: np.ndarray, kv: np.ndarray, y: np.ndarray) -> PrefillModel:
    """The prefill model of ``family`` (a name :func:`fit_prefill` returns) fitted on all the rows given."""
    subset = tuple(family.split(":", 1)[1].split("+"))
    return _fit_prefill_once(prefill_features(batch, chunk, kv), y, subset, chunk, kv)


# -- the whole fit ---------------------------------------------------------------------------------------
def split_holdout(num_rows: int, fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices (train, held out); at least one row is trained on."""
    order = rng.permutation(num_rows)
    num_held = int(round(fraction * num_rows)) if num_rows > 1 else 0
    return np.sort(order[num_held:]), np.sort(order[:num_held])


def _report_row(op: str, family: str, scores: dict[str, float], num_train: int, err: np.ndarray) -> dict[str, Any]:
    return {"op": op, "family": family, "num_train": num_train, "num_holdout": int(len(err)),
            "holdout_mape": float(np.mean(err)) if len(err) else None,
            "holdout_median_ape": float(np.median(err)) if len(err) else None,
            "holdout_p95_ape": float(np.quantile(err, 0.95)) if len(err) else None,
            "cv_mape": {k: round(v, 5) for k, v in scores.items()}}


def _op_rng(seed: int, op: str) -> np.random.Generator:
    """The hold-out split's generator for ``op``: from the seed and the op's name alone (a stable hash, not
    Python's salted one), so an op's split does not depend on which other ops were fitted before it."""
    return np.random.default_rng([seed, zlib.crc32(op.encode())])


def _too_few(op: str, n: int, suspect: int = 0) -> ConfigError:
    left_out = f" ({suspect} more the profiler marked suspect were left out)" if suspect else ""
    return ConfigError("profile", f"op {op} has {n} distinct points{left_out}, too few to fit (need {MIN_POINTS})",
                       "profile more token counts or drop the op's rows")


def _check_train(op: str, num_train: int, num_total: int, holdout: float) -> None:
    """The training split must be able to choose a family (see :data:`MIN_TRAIN_POINTS`)."""
    if num_train < MIN_TRAIN_POINTS:
        raise ConfigError("--holdout", f"{holdout:g} leaves op {op} {num_train} of its {num_total} distinct points to "
                          f"choose a model family on (cross-validation needs {MIN_TRAIN_POINTS})",
                          "pass a smaller --holdout (default 0.2), or profile more sizes")


def _suspect(table: pd.DataFrame) -> np.ndarray:
    """Rows the profiler marked ``suspect`` (a bool column; read from CSV it may be strings, blank: not)."""
    if "suspect" not in table:
        return np.zeros(len(table), dtype=bool)
    return table["suspect"].astype(str).str.strip().str.lower().isin(("true", "1", "1.0")).to_numpy()


def _check_shape(rows: pd.DataFrame, model: str, tp: int) -> None:
    """Attention tables fix a shape, not a name: it must be the artifact model's."""
    if not {"hidden_size", "num_heads", "num_kv_heads"} <= set(rows.columns):
        return
    spec = get_model(model)
    shapes = rows[["hidden_size", "num_heads", "num_kv_heads"]].dropna().drop_duplicates()
    for h, q, kv in shapes.itertuples(index=False):
        if (int(h), int(q), int(kv)) != (spec.hidden_size, spec.num_heads, spec.num_kv_heads):
            raise ConfigError("profile", f"attention rows are for hidden {int(h)}, {int(q)} heads, {int(kv)} KV heads, "
                              f"not {model}'s {spec.hidden_size}/{spec.num_heads}/{spec.num_kv_heads}",
                              "fit attention tables of the same model")


def _check_gemm_shapes(table: pd.DataFrame, spec: Any, tp: int) -> None:
    """Refuse GEMM rows timed on another model's shapes than ``spec``'s at ``tp``: their work (the flops the profiler
    or ``import-vidur`` computed from the shapes they timed) against this model's. A table that names no model (a
    Vidur one imported without --model) was fitted to any --model given, pricing Qwen-72B with Llama-2-7B's GEMMs."""
    from profiler.shapes import ShardedShapes
    from profiler.work import token_op_work

    gemms = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down")
    if "flops" not in table or "num_tokens" not in table:  # (a table without the work columns: nothing to check)
        return
    rows = table[table["op"].isin(gemms) & (table["tp"] == tp) & (pd.to_numeric(table["flops"], errors="coerce") > 0)]
    if rows.empty:
        return
    try:
        shapes = ShardedShapes(spec, tp)
    except ConfigError:
        return  # (the fit's own checks say why this TP cannot shard the model)
    for op, part in rows.groupby("op", sort=True):
        expected = np.array([token_op_work(str(op), int(t), shapes, 2).flops for t in part["num_tokens"]])
        ratio = float(np.median(part["flops"].to_numpy(dtype=float) / expected))
        if not 0.9 <= ratio <= 1.1:
            raise ConfigError("model", f"the profile's {op} rows do {ratio:.3g}x the work of {spec.name}'s {op} at tp "
                              f"{tp}: they were timed on another model's shapes",
                              "pass the --model the profile was timed for (import-vidur --model names it)")


def fit_tables(table: pd.DataFrame, *, model: str | None = None, gpu: str | None = None, tp: int | None = None,
               holdout: float = 0.2, seed: int = 0, sources: list[str] | None = None,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Fit every op the table covers for one (model, GPU, TP); return the artifact dict."""
    if not 0 <= holdout < 1:
        raise ConfigError("holdout", f"must be in [0, 1), got {holdout}")
    if seed < 0:  # (numpy's seeding refuses it with a traceback)
        raise ConfigError("--seed", f"must be >= 0, got {seed}")
    validate(table, "profile table")
    suspect = _suspect(table)
    # The profiler's flag: faster than the device's peak, or not positive; no kernel's time, so not a curve's point.
    suspect_by_op = {str(op): int(n) for op, n in table.loc[suspect, "op"].value_counts().sort_index().items()}
    table = table[~suspect].copy()
    for column in TIDY_COLUMNS:
        if column not in table:
            table[column] = np.nan
    for column in ("model", "device"):
        table[column] = table[column].astype(object).where(table[column].notna(), "").astype(str)
    # The same measurement twice (one profile passed under two paths: only its source differs) is one point: a
    # held-out row's twin in the training split scored 0.0% (an audit); and the rows in a canonical order, so the
    # splits and CV folds, seeded, do not turn on the order the tables were read in (a shuffled profile chose
    # other families).
    measured = sorted(c for c in table.columns if c != "source")  # (by name: the files' column order may differ)
    table = (table.drop_duplicates(subset=measured).sort_values(measured, kind="mergesort", na_position="last")
             .reset_index(drop=True))
    models = sorted({m for m in table["model"].astype(str) if m and m != "nan"})
    model = get_model(model).name if model else (models[0] if len(models) == 1 else None)
    if model is None:
        raise ConfigError("model", "the profile does not name its model", "pass --model")
    if models and models != [model]:
        raise ConfigError("model", f"profile is for {', '.join(models)}, not {model}", "pass matching tables")
    devices = sorted({d for d in table["device"].astype(str) if d and d != "nan"})
    gpu = get_gpu(gpu).name if gpu else (devices[0] if len(devices) == 1 else None)
    if gpu is None:
        raise ConfigError("gpu", "the profile does not name its GPU", "pass --gpu")
    get_gpu(gpu)
    if devices and devices != [gpu]:
        raise ConfigError("gpu", f"profile is for {', '.join(devices)}, not {gpu}", "pass matching tables")
    # The dtype the profiler timed the weight GEMMs in (its --dtype; fp8: FP8 GEMMs, the other ops in bf16, so a
    # bf16 profile's attention may sit beside an fp8 profile's GEMMs). None: a table without one (Vidur's: 16-bit).
    gemm_rows = table["op"].isin(LINEAR_OPS)
    timed_in = table.loc[gemm_rows, "dtype"].dropna() if "dtype" in table else ()
    dtypes = sorted({str(d) for d in timed_in} - {"", "nan", "<NA>"})
    if len(dtypes) > 1:
        raise ConfigError("profile", f"the profile's GEMMs were timed in {' and '.join(dtypes)}: one artifact prices "
                          "one weight format", "fit each dtype's GEMM rows on their own")
    gemm_dtype = dtypes[0] if dtypes else None
    tps = sorted({int(t) for t in table["tp"].dropna()})
    if tp is None:
        compute_tps = sorted({int(t) for t in table.loc[~table["op"].isin(COLLECTIVE_OPS), "tp"].dropna()})
        if len(compute_tps) != 1:
            raise ConfigError("tp", f"profile covers tp {compute_tps or tps}", "pass --tp to choose one")
        tp = compute_tps[0]
    spec = get_model(model)
    _check_gemm_shapes(table, spec, tp)
    from simulator.config.hf_config import is_path_like

    if is_path_like(model) and Path(model).is_file():  # (a config.json: the run names it from any folder)
        model = str(Path(model).resolve())
    artifact: dict[str, Any] = {
        "format_version": FORMAT_VERSION, "kind": "servesim-learned-cost-model", "model": model, "gpu": gpu, "tp": tp,
        "dtype_bytes": 2, "gemm_dtype": gemm_dtype, "sklearn_version": sklearn.__version__, "numpy_version": np.__version__,
        "python_version": platform.python_version(), "holdout_fraction": holdout, "seed": seed,
        "sources": sources or (sorted(map(str, table["source"].dropna().unique())) if "source" in table else []),
        "suspect_rows_dropped": suspect_by_op, "curves": {}, "report": [],
    }
    report = artifact["report"]

    def say(msg: str) -> None:
        if progress:
            progress(msg)

    def split(op: str, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``op``'s (train, held out) rows; ``keys``: one row per row, its distinct inputs (a 2-D array)."""
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        num_total = len(uniq)
        if num_total < MIN_POINTS:
            raise _too_few(op, num_total, suspect_by_op.get(op, 0))
        # a distinct input's repeated measurements go to one side (a repeat on the other would score its own twin)
        _, te_keys = split_holdout(num_total, holdout, _op_rng(seed, op))
        held = np.isin(np.asarray(inverse).ravel(), te_keys)
        tr, te = np.flatnonzero(~held), np.flatnonzero(held)
        _check_train(op, len(np.unique(keys[tr], axis=0)), num_total, holdout)
        return tr, te

    def fit_one(op: str, rows: pd.DataFrame, x_column: str, extra: dict[str, Any]) -> None:
        """Choose and score one op's curve on the training split; store the family refitted on every row."""
        x = rows[x_column].to_numpy(dtype=float)
        y = rows["median_s"].to_numpy(dtype=float)
        tr, te = split(op, x[:, None])
        curve, family, scores = fit_curve(x[tr], y[tr], seed)
        report.append(_report_row(op, family, scores, len(tr), ape(curve(x[te]), y[te])))
        if len(te):
            curve = curve_of_family(family, x, y)
        artifact["curves"][op] = {"x": x_column, "family": family, **extra, **curve.to_json()}

    for op in TOKEN_FAMILY_OPS + MOE_FAMILY_OPS:
        rows = table[(table["op"] == op) & (table["tp"].isna() | (table["tp"] == tp))]
        if rows.empty:
            continue
        say(op)
        fit_one(op, rows, "num_tokens", {})
    for op in COLLECTIVE_OPS:
        world = tp if op == "all_reduce" else 2
        rows = table[(table["op"] == op) & (table["world_size"] == world)]
        if rows.empty or (op == "all_reduce" and tp == 1):
            continue
        say(op)
        fit_one(op, rows, "message_bytes", {"world_size": world})
    rows = table[(table["op"] == "attn_decode") & (table["tp"].isna() | (table["tp"] == tp))]
    padded = padded_decode(rows)
    if padded.any() and len(rows[~padded][["batch_size", "context_len"]].drop_duplicates()) >= MIN_POINTS:
        rows = rows[~padded]  # where too few uniform batches remain, the padded ones are better than none
    if not rows.empty:
        _check_shape(rows, model, tp)
        n = rows["batch_size"].to_numpy(dtype=float)
        k = decode_rms_context(rows)
        y = rows["median_s"].to_numpy(dtype=float)
        tr, te = split("attn_decode", rows[["batch_size", "context_len"]].to_numpy(dtype=float))
        say("attn_decode")
        dm, family, scores = fit_decode(n[tr], k[tr], y[tr], seed)
        report.append(_report_row("attn_decode", family, scores, len(tr), ape(dm.predict(n[te], k[te]), y[te])))
        if len(te):
            dm = decode_of_family(family, n, k, y)
        artifact["attn_decode"] = {"family": family, **dm.to_json()}
    rows = table[(table["op"] == "attn_prefill") & (table["tp"].isna() | (table["tp"] == tp))]
    if not rows.empty:
        _check_shape(rows, model, tp)
        b, c, kv = (rows[col].to_numpy(dtype=float) for col in REQUIRED_BY_OP["attn_prefill"])
        y = rows["median_s"].to_numpy(dtype=float)
        tr, te = split("attn_prefill", np.column_stack([b, c, kv]))
        say("attn_prefill")
        pm, family, scores = fit_prefill(b[tr], c[tr], kv[tr], y[tr], seed)
        feats = prefill_features(b[te], c[te], kv[te])
        report.append(_report_row("attn_prefill", family, scores, len(tr), ape(pm.predict(feats), y[te])))
        if len(te):
            pm = prefill_of_family(family, b, c, kv, y)
        artifact["attn_prefill"] = {"family": family, **pm.to_json()}
    if not report:
        raise ConfigError("profile", f"no rows for {model} at tp={tp}", "check the table's tp and op columns")
    learned = [r["op"] for r in report]
    artifact["learned_ops"] = learned
    artifact["roofline_ops"] = roofline_ops_of(learned, tp)
    return artifact


def save_artifact(artifact: dict[str, Any], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(artifact, indent=1) + "\n")
    return path
