"""Rows that record the same deployment but measure different ones, and whether MTP tells them apart.

Two checks on ``silicon_train.csv``, after :func:`~simulator.calibrate.silicon.read_silicon`'s
de-duplication:

1. **Twins.** Fully recorded rows (aggregated, or disaggregated with worker counts) that agree on every recorded field of the deployment and the load (backend, model as the simulator reads it,
   system, precision and quantisation lanes, mode, ISL, OSL, concurrency, every layout field) yet whose
   measured TPOTs differ by more than ``--ratio`` (1.3x): one simulated row cannot match both, so they
   bound what any model can reach on them. Written to ``twins.csv`` (one line a row, ``group`` joins
   the twins, ``role`` fast/slow/middle by measured TPOT).
2. **MTP.** The recipes of these rows may run multi-token prediction, which the CSV does not record. The
   TensorRT-LLM DeepSeek-V3/R1 rows on B200 (where most twins are) are simulated under ``trtllm-2026``
   over TensorRT-LLM's tables (the fit report's load, ``--client benchmark``) three ways: speculation off,
   and MTP with 3 draft tokens at an i.i.d. acceptance rate of 0.6 and 0.75 (2.2 and 2.7 tokens a step;
   a sweep, not a fit). Written to ``mtp_check.csv``; the medians by image version and twin role print.

    python results/validation/silicon/twins.py            # ~10 minutes on two cores
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

# Every recorded field of a deployment and its load (the measured TTFT/TPOT and the provenance aside).
DEPLOYMENT = ("backend", "model", "system", "precision", "gemm_quant_mode", "moe_quant_mode", "mode", "isl",
              "osl", "concurrency", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
              "moe_ep_size", "prefill_num_workers", "prefill_tp_size", "prefill_pp_size", "prefill_attention_dp_size",
              "prefill_moe_tp_size", "prefill_moe_ep_size", "decode_num_workers", "decode_tp_size", "decode_pp_size",
              "decode_attention_dp_size", "decode_moe_tp_size", "decode_moe_ep_size")
MTP_RATES = (0.6, 0.75)


def _model_or_path(model_path: str) -> str:
    """The catalog model a simulation runs (DeepSeek-V3 and -R1 are one architecture), else the path."""
    from simulator.calibrate.silicon import Unexpressible, _model

    try:
        return _model(model_path)
    except Unexpressible:
        return model_path


def twins(kept: pd.DataFrame, ratio: float) -> pd.DataFrame:
    """Groups of rows with one recorded deployment whose measured TPOTs span more than ``ratio``."""
    # a disaggregated row without worker counts does not record its deployment to begin with
    recorded = ~kept.get("workers_from_recipe", pd.Series(False, index=kept.index)).fillna(False).astype(bool)
    frame = kept[((kept["mode"] != "disagg") | kept["prefill_num_workers"].notna()) & recorded].copy()
    frame["model"] = frame["model_path"].map(_model_or_path)
    key = [c for c in DEPLOYMENT if c in frame.columns]
    frame["group"] = frame.groupby(key, dropna=False, sort=False).ngroup()
    span = frame.groupby("group")["silicon_tpot_ms"].agg(lambda s: s.max() / s.min())
    frame = frame[frame["group"].isin(span.index[span > ratio])].copy()
    frame["tpot_span"] = frame["group"].map(span)
    rank = frame.groupby("group")["silicon_tpot_ms"].rank(method="first")
    size = frame.groupby("group")["silicon_tpot_ms"].transform("size")
    frame["role"] = np.where(rank == 1, "fast", np.where(rank == size, "slow", "middle"))
    frame["group"] = frame["group"].factorize()[0]
    cols = ["group", "role", "tpot_span", "id", "backend", "backend_version", "model", "model_path", "system", "precision",
            "isl", "osl", "concurrency", "tp_size", "attention_dp_size", "moe_ep_size", "silicon_ttft_ms",
            "silicon_tpot_ms", "family", "silicon_data_source"]
    # the provenance without the registry host its image was pulled from
    frame["silicon_data_source"] = frame["silicon_data_source"].str.replace(r"[\w.-]+\.(?:io|com|org)[/#]", "",
                                                                            regex=True)
    return frame.sort_values(["group", "silicon_tpot_ms"])[cols].reset_index(drop=True)


def mtp_runs(data: Path, roles: dict[str, str], jobs: int) -> pd.DataFrame:
    """The TensorRT-LLM DeepSeek B200 aggregated rows, each run as the fit report runs it (its rows and
    configs: ``fit_report.rows_and_configs``) under ``trtllm-2026``, without and with MTP."""
    import importlib.util

    from simulator.calibrate.silicon import simulate_row
    from simulator.config.speculative import SpeculativeConfig

    spec = importlib.util.spec_from_file_location("fit_report", HERE / "fit_report.py")
    fit_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_report)
    _, _, rows, configs, _ = fit_report.rows_and_configs(fit_report._args(["--data", str(data)]))
    pick = ((rows["backend"] == "trtllm") & (rows["mode"] == "agg") & (rows["system"] == "b200_sxm")
            & (rows["model"] == "deepseek-v3")).to_numpy()
    configs = [c.replace(engine="trtllm-2026") for c, keep in zip(configs, pick, strict=True) if keep]
    rows = rows[pick].reset_index(drop=True)
    settings: dict[str, dict] = {"off": {}}
    for rate in MTP_RATES:
        settings[f"mtp{rate:g}"] = {
            "speculative": SpeculativeConfig(method="mtp", num_speculative_tokens=3, acceptance_rates=(rate,) * 3,
                                             acceptance_source=f"i.i.d. {rate:g} (a sweep)"),
            "scheduler__prefix_caching": False}
    out = rows[["id", "backend_version", "precision", "isl", "osl", "concurrency", "tp_size", "attention_dp_size",
                "moe_ep_size", "measured_ttft_ms", "measured_tpot_ms"]].copy()
    out["twin_role"] = out["id"].map(roles).fillna("single")
    for name, changes in settings.items():
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(simulate_row, [c.replace(**changes) for c in configs]))
        out[f"pred_ttft_ms_{name}"] = [x[0] if isinstance(x, tuple) else np.nan for x in results]
        out[f"pred_tpot_ms_{name}"] = [x[1] if isinstance(x, tuple) else np.nan for x in results]
        print(f"{name}: {len(configs)} rows", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from simulator.calibrate.silicon import data_path, read_silicon

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=HERE.parents[2].parent / "shared" / "data")
    parser.add_argument("--ratio", type=float, default=1.3, help="measured TPOT span that makes twins")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-mtp", action="store_true", help="list the twins only")
    args = parser.parse_args(argv)
    try:
        kept, _ = read_silicon(data_path(args.data))
    except Exception as err:  # noqa: BLE001 - one line, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    tw = twins(kept, args.ratio)
    tw.to_csv(HERE / "twins.csv", index=False, float_format="%.4f")
    print(f"{tw['group'].nunique()} groups, {len(tw)} rows whose measured TPOT spans > {args.ratio:g}x:")
    print(tw.groupby(["backend", "model", "system"]).agg(groups=("group", "nunique"), rows=("id", "size"),
                                                              median_span=("tpot_span", "median")).round(2).to_string())
    if args.no_mtp:
        return 0
    out = mtp_runs(args.data, dict(zip(tw["id"], tw["role"], strict=True)), args.jobs)
    out.to_csv(HERE / "mtp_check.csv", index=False, float_format="%.4f")
    names = ["off", *(f"mtp{r:g}" for r in MTP_RATES)]
    for n in names:
        out[f"tpot_{n}"] = out[f"pred_tpot_ms_{n}"] / out["measured_tpot_ms"] - 1
    table = out.groupby(["backend_version", "twin_role"])[[f"tpot_{n}" for n in names]].median()
    table["rows"] = out.groupby(["backend_version", "twin_role"]).size()
    print("median signed TPOT error, TensorRT-LLM DeepSeek-V3/R1 on B200, by image and twin role:")
    print(table.round(2).to_string())
    print("median absolute:", {n: round(float(out[f"tpot_{n}"].abs().median()), 3) for n in names})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
