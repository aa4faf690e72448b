"""Engine presets fitted on AIConfigurator's silicon rows, and their cross-validated error (issue 28 items 2, 6).

One command:

    python results/validation/silicon/fit_report.py            # every expressible row
    python results/validation/silicon/fit_report.py --sample 8 # a quick look (8 rows per backend x GPU x model)

Reads ``../shared/data/validation/aiconfigurator/silicon_train.csv`` as its README asks (wip rows
dropped, repeated measurements kept once: :func:`simulator.calibrate.silicon.read_silicon`), turns
each row into a closed-loop run loaded as the benchmark client its provenance most likely ran
(``--client benchmark``, the default: :func:`simulator.calibrate.silicon.benchmark_client` and
:func:`~simulator.calibrate.silicon.recipe_changes`) and priced by its own backend's measured kernels (``--kernels
vllm|sglang|trtllm``), simulates it once with the kernels alone (cached), and fits each backend's
engine terms (:mod:`simulator.calibrate.silicon_fit`: CPU time per step, per request and per prompt
token, the per-collective extra, async overlap) by replaying those runs. Writes into this folder:

- ``fitted_presets.csv``: each backend's terms, fitted on every aggregated row (the ENGINES presets),
  and the disaggregated deployments' handoff latency, fitted on each backend's disaggregated rows (pooled over the
  backends for one with too few: ``silicon_fit.MIN_OWN_HANDOFF_ROWS``);
- ``predictions_fit.csv``: every row run: measured, kernels-only, in-sample, leave-one-GPU-out and
  leave-one-model-out TTFT/TPOT; disaggregated rows simulated with each fold's terms and handoff latency
  (first token delivered by the decode worker; ``handoff0``: in-sample terms without a handoff latency;
  ``--first-token-on-prefill``: delivered by the prefill worker, for comparison);
- ``cv_summary.csv``: median and P90 absolute error of TTFT and TPOT per backend x mode x fit;
- ``cv_by_group.csv``: the same per backend x GPU x model (leave-one-GPU-out);
- ``not_run.csv``: every row not run, with the reason;
- ``cv_scatter.png``, ``cv_errors.png``: predicted (held-out) vs measured, and error by group.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
DATA = REPO.parent / "shared" / "data"
sys.path.insert(0, str(REPO))


DEFERRED_COLUMNS = ("fit", "cv_gpu", "cv_model")


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: ../shared/data)")
    p.add_argument("--out", type=Path, default=HERE, help="output folder (default: this folder)")
    p.add_argument("--cache", type=Path, default=None,
                   help="kernels-only traces and simulated rows, reused between runs (default: "
                        "/tmp/servesim_silicon_<hash of simulator/>.pkl, so a code change starts afresh)")
    p.add_argument("--sample", type=int, default=0, help="rows per backend x GPU x model (0: all)")
    p.add_argument("--backends", nargs="+", choices=("vllm", "sglang", "trtllm"), default=None,
                   help="only these backends' rows (default: all three; each backend's preset is fitted on "
                        "its own rows, so its figures do not depend on the others', except the handoff of "
                        "the disaggregated rows, fitted on all of them)")
    p.add_argument("--requests-per-user", type=int, default=2, help="with --client exact: measured requests a user")
    p.add_argument("--max-requests", type=int, default=0,
                   help="cap on a row's requests, warm-up included (default 0: as many as its client sent; a cap "
                        "leaves high-concurrency rows with one synchronised wave, whose TTFT is the whole backlog's)")
    p.add_argument("--range-ratio", type=float, default=0.0,
                   help="with --client exact: lengths banded around ISL/OSL as vllm bench --random-range-ratio (default 0: exact, as "
                        "AIPerf --isl/--osl; the users then move in waves, as the measured TTFTs say)")
    p.add_argument("--client", choices=("exact", "benchmark", "inferencex"), default="benchmark",
                   help="exact: every row as --range-ratio/--requests-per-user say, warm-up inline (steady); "
                        "benchmark: each row as the client its provenance most likely ran "
                        "(silicon.benchmark_client: InferenceX's [0.8 len, len] band and 10 requests a user, "
                        "AIPerf's exact lengths and 20; warm-up a phase of its own), at most --max-requests; "
                        "and the recipe's scheduling flags (silicon.recipe_changes: InferenceX's SGLang "
                        "--scheduler-recv-interval, its TensorRT-LLM attention-DP balance); inferencex: every row as InferenceX's client, recipe as benchmark")
    p.add_argument("--aiperf-spread", type=float, nargs=2, default=None, metavar=("ISL_SD", "OSL_SD"),
                   help="with --client benchmark: run the AIPerf rows with prompt and output lengths spread by these "
                        "standard deviations in tokens (AIPerf's --isl-stddev/--osl-stddev; default: exact, as "
                        "AIConfigurator's benchmark runs it)")
    p.add_argument("--aiperf-budget", type=int, default=None, metavar="TOKENS",
                   help="with --client benchmark: run the AIPerf rows at this token budget (default: "
                        "silicon.AIPERF_BUDGETS': 2048 for vLLM's and TensorRT-LLM's aggregated rows, else 8192)")
    p.add_argument("--traces-only", action="store_true", help="build the trace cache and stop")
    p.add_argument("--no-disagg", action="store_true", help="skip simulating the disaggregated rows")
    p.add_argument("--deferred-columns", nargs="+", choices=DEFERRED_COLUMNS, default=list(DEFERRED_COLUMNS),
                   metavar="COLUMN",
                   help="which fits the simulated rows (disaggregated, attention DP) run under: fit (in-sample), "
                        "cv_gpu (leave one GPU out), cv_model (leave one model out); default all three. Each is a "
                        "pass over every such row (about half an hour on two cores); a column left out is empty "
                        "for them, and its figures cover the replayed rows alone")
    p.add_argument("--jobs", type=int, default=1,
                   help="processes for the disaggregated / attention-DP rows (default 1; the results do not depend on it). "
                        "Rows of more than 80,000 requests (thousands of users) still run one at a time")
    p.add_argument("--mtp-acceptance", default=None, metavar="CURVE|RATE",
                   help="also run the rows whose InferenceX recipe runs MTP (silicon.recipe_layout's with_mtp), at this "
                        "acceptance: an AL curve of the data folder (MODEL:METHOD[:THINKING], e.g. "
                        "deepseek-v4-pro:mtp:thinking_off) or an i.i.d. rate (default: they are listed as not run)")
    p.add_argument("--first-token-on-prefill", action="store_true",
                   help="also simulate each disaggregated row with the first token delivered by the prefill worker")
    args = p.parse_args(argv)
    if args.mtp_acceptance is not None:
        args.mtp_acceptance = parse_acceptance(p, args.mtp_acceptance)
    return args


def parse_acceptance(parser: argparse.ArgumentParser, value: str) -> str | float:
    """``--mtp-acceptance``'s value: an i.i.d. rate, or an AL curve's name, checked here (resolved for each
    row's draft length later); ``parser`` exits with one line for a name no curve matches."""
    from simulator.config.acceptance import find_curve
    from simulator.config.errors import ConfigError

    try:
        return float(value)
    except ValueError:
        try:
            find_curve(value)
        except ConfigError as err:
            parser.error(f"--mtp-acceptance: {err}")
        return value


# The KV handoff's fabric (per GPU, one direction, GB/s at ~80% of the rated rate, and a latency):
# NVLink inside an 8-GPU node or an NVL72 rack (GB200/GB300), else each GPU's own RDMA NIC, as
# the AIConfigurator system files give it (silicon.SYSTEM_NETWORKS: inter_node_bw / inter_rack_bw
# per GPU, H100 50 GB/s = ConnectX-7 400 Gb/s, B200/B300/GB200/GB300 100 GB/s = ConnectX-8 800 Gb/s).
# Every TP shard of the prefill worker sends its share at once, so the link carries the worker's GPUs' sum.
NVLINK_GBPS = {"h100_sxm": 360.0, "b200_sxm": 720.0, "b300_sxm": 720.0, "gb200": 720.0, "gb300": 720.0}
NIC_GBPS = {"h100_sxm": 40.0, "b200_sxm": 80.0, "b300_sxm": 80.0, "gb200": 80.0, "gb300": 80.0}


def kv_link_of(row) -> str:  # noqa: ANN001
    """The KV link a disaggregated row's handoff crosses (NVL72 racks and single-node layouts: NVLink)."""
    def gpus(prefix: str) -> int:
        n = 1
        for f in ("tp_size", "pp_size", "attention_dp_size"):
            v = getattr(row, f"{prefix}{f}")
            n *= int(v) if v == v and v else 1
        return n

    pgpus = gpus("prefill_")
    total = pgpus * int(row.prefill_num_workers or 1) + gpus("decode_") * int(row.decode_num_workers or 1)
    nvlink = row.system in ("gb200", "gb300") or total <= 8
    per_gpu = NVLINK_GBPS[row.system] if nvlink else NIC_GBPS[row.system]
    return f"{per_gpu * pgpus:g}GB/s@{5 if nvlink else 10}us"


def code_hash() -> str:
    """A hash of the simulator's source: cached traces and simulated rows belong to one version of it."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted((REPO / "simulator").rglob("*.py")):
        h.update(path.relative_to(REPO).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


class RowCache:
    """Simulated rows (mean TTFT, TPOT ms, or the failure) by run config, engine terms and first-token
    point, in one pickle file saved as it goes: an interrupted report resumes where it stopped."""

    def __init__(self, path: Path) -> None:
        import pickle

        self.path = path
        self.items: dict[str, tuple[float, float] | str] = {}
        if path.is_file():
            try:
                self.items = pickle.loads(path.read_bytes())
            except Exception:  # noqa: BLE001 - a broken cache is rebuilt
                self.items = {}

    @staticmethod
    def key(config, engine_text: str, first_token_at: str) -> str:  # noqa: ANN001
        import hashlib

        return hashlib.sha256(f"{config!r}|{engine_text}|{first_token_at}".encode()).hexdigest()[:24]

    def save(self) -> None:
        import pickle

        tmp = self.path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(self.items))
        tmp.replace(self.path)


def rows_and_configs(args: argparse.Namespace):  # noqa: ANN201
    from simulator.calibrate.silicon import (
        INFERENCEX_CLIENT,
        Unexpressible,
        benchmark_client,
        data_path,
        read_silicon,
        recipe_changes,
        row_config,
    )

    mtp = args.mtp_acceptance
    kept, dropped = read_silicon(data_path(args.data), with_mtp=mtp is not None)
    not_run = [dict(id=r.id, backend=r.backend, system=r.system, mode=r.mode, model_path=r.model_path,
                    reason=r.dropped) for r in dropped.itertuples()]
    ok, configs = [], []
    for r in kept.itertuples():
        try:
            link = kv_link_of(r) if r.mode == "disagg" and r.prefill_num_workers == r.prefill_num_workers else None
            client = (benchmark_client(r, args.aiperf_spread, args.aiperf_budget) if args.client == "benchmark" else
                      dict(INFERENCEX_CLIENT) if args.client == "inferencex" else
                      {"requests_per_user": args.requests_per_user, "range_ratio": args.range_ratio})
            c = row_config(r, max_requests=args.max_requests or None, **client, mtp_acceptance=mtp,
                           **({"kv_link": link} if link else {}),
                           extra={**(recipe_changes(r) if args.client != "exact" else {}),
                                  "replica__kernels": r.backend,
                                  # the tables' gaps priced as a run prices them by default (the
                                  # 'today' constants, refitted on the kernel tables)
                                  "replica__roofline_calibration": "today",
                                  # the deployments size the context to the benchmark (a model's
                                  # full context may not fit the KV cache of a small layout)
                                  "replica__max_model_len": int(r.isl) + int(r.osl) + 16})
        except Unexpressible as why:
            not_run.append(dict(id=r.id, backend=r.backend, system=r.system, mode=r.mode, model_path=r.model_path,
                                reason=str(why)))
            continue
        ok.append(r.Index)
        configs.append(c)
    rows = kept.loc[ok].reset_index(drop=True)
    rows["gpu"] = [c.replica.gpu for c in configs]
    rows["model"] = [c.replica.model for c in configs]
    rows["measured_ttft_ms"] = rows["silicon_ttft_ms"]
    rows["measured_tpot_ms"] = rows["silicon_tpot_ms"]
    if args.backends:
        mask = rows["backend"].isin(args.backends).to_numpy()
        rows, configs = rows[mask].reset_index(drop=True), [c for c, k in zip(configs, mask, strict=True) if k]
    if args.sample:
        pick = (rows.groupby(["backend", "gpu", "model", "mode"], group_keys=False)
                .apply(lambda g: g.sample(min(len(g), args.sample), random_state=0)).index)
        mask = rows.index.isin(pick)
        rows, configs = rows[mask].reset_index(drop=True), [c for c, k in zip(configs, mask, strict=True) if k]
    return len(kept) + len(dropped), len(kept), rows, configs, not_run


def build_traces(rows: pd.DataFrame, configs: list, cache) -> list:  # noqa: ANN001
    from simulator.config.errors import ConfigError

    traces, failed, started = [], {}, time.perf_counter()
    for i, (r, c) in enumerate(zip(rows.itertuples(), configs, strict=True), 1):
        try:
            traces.append(cache.get(c) if r.mode == "agg" else None)
        except ConfigError as err:
            traces.append(None)
            failed[i - 1] = f"refused by the simulator: {err}"
        except Exception as err:  # noqa: BLE001 - a row that fails is reported, not fatal
            traces.append(None)
            failed[i - 1] = f"simulation failed: {type(err).__name__}: {err}"
        if i % 100 == 0:
            cache.save()
        if i % 25 == 0:
            print(f"  traces {i}/{len(rows)}, {time.perf_counter() - started:.0f} s", flush=True)
    cache.save()
    return traces, failed


def main(argv: list[str] | None = None) -> int:
    from simulator.calibrate.silicon_fit import TraceCache

    np.seterr(all="ignore")
    args = _args(argv)
    if args.cache is None:
        args.cache = Path(f"/tmp/servesim_silicon_{code_hash()}.pkl")
    total, distinct, rows, configs, not_run = rows_and_configs(args)
    print(f"{total} rows: {distinct} distinct after wip/duplicates, {len(rows)} expressible; cache {args.cache}")
    cache = TraceCache(args.cache)
    traces, failed = build_traces(rows, configs, cache)
    if args.traces_only:
        return 0
    return report(args, total, distinct, rows, configs, traces, failed, not_run)


PRESETS = {"vllm": "vllm-2026", "sglang": "sglang-2026", "trtllm": "trtllm-2026"}


def _artifact(params, backend: str, folder: Path, handoff_s: float = 0.0) -> str:  # noqa: ANN001
    """The fitted terms (and a disaggregated deployment's handoff latency) as an engine artifact (a run
    config names it like a preset)."""
    from simulator.costmodel.engine_model import save_engine_artifact

    path = folder / f"{backend}-handoff{handoff_s * 1e3:g}ms.json"
    engine = params.engine(f"{backend}-fit", "silicon rows", "fit_report.py").with_terms(handoff_s=handoff_s)
    save_engine_artifact(engine, path, {})
    return str(path)


def _simulate_deferred(args, rows, configs, pred, deferred, failed, folder, presets, started) -> None:  # noqa: ANN001
    """Simulate the rows that are not replayed (disaggregated pools, attention-DP ranks) with each fold's
    terms. Disaggregated rows first run once without a handoff latency, which is then fitted on them
    (:func:`~simulator.calibrate.silicon_fit.fit_handoffs`: each backend's own where it has enough rows, else one
    pooled over the backends; on every row for the in-sample column, without the held-out GPU's or model's rows for
    the folds), and they run
    again with it. (The first run uses the in-sample engine terms, so a fold's handoff saw the held-out
    GPU's aggregated rows through them: the handoff itself never sees the held-out rows.)"""
    from simulator.calibrate.silicon_fit import fit_handoffs

    row_cache = RowCache(args.cache.with_name(args.cache.stem + "_rows.pkl"))
    disagg = (rows["mode"] == "disagg").to_numpy()
    base = np.full(len(rows), np.nan)
    for backend, other, params, _ in deferred:
        d = other[disagg[other]]
        if not len(d):
            continue
        art = _artifact(params, f"{backend}-all", folder)
        res, _ = _simulate_rows(rows.iloc[d], [configs[i] for i in d], lambda r, art=art: art, "decode", row_cache,
                                f"{backend} handoff 0", args.jobs)
        base[d] = res[:, 0]
        pred.loc[d, "pred_ttft_ms_handoff0"], pred.loc[d, "pred_tpot_ms_handoff0"] = res[:, 0], res[:, 1]
    measured = rows["measured_ttft_ms"].to_numpy(float)
    usable = disagg & np.isfinite(base)
    names = rows["backend"].to_numpy()

    def handoffs(train: np.ndarray) -> tuple[dict[str, float], dict[str, float], float]:
        """Every backend's handoff (its own where it has enough rows, else the pooled one), the own ones, the pooled."""
        own, pooled = fit_handoffs(base[train], measured[train], names[train])
        return {b: own.get(b, pooled) for b in set(names.tolist())}, own, pooled

    h_all, own_all, pooled_all = handoffs(usable)
    h_fold = {group: {v: handoffs(usable & (rows[group] != v).to_numpy())[0] for v in rows[group].unique()}
              for group in ("gpu", "model")}
    print(f"  handoff fitted on {usable.sum()} disaggregated rows: "
          + ", ".join(f"{b} {h * 1e3:.0f} ms" + ("" if b in own_all else " (pooled)")
                      for b, h in sorted(h_all.items())) + f"; pooled {pooled_all * 1e3:.0f} ms (leaving one GPU out: "
          + "; ".join(f"{g} " + ", ".join(f"{b} {h * 1e3:.0f}" for b, h in sorted(hs.items()))
                      for g, hs in sorted(h_fold["gpu"].items())) + " ms)", flush=True)
    for p in presets:
        p["handoff_ms"] = h_all[p["backend"]] * 1e3
    for backend, other, params, folds in deferred:
        arts = {"fit": (_artifact(params, f"{backend}-all", folder),
                        _artifact(params, f"{backend}-all", folder, h_all[backend]))}
        for group, fp in folds.items():
            for held, prm in fp.items():
                name = f"{backend}-{group}-{held}"
                arts[group, held] = (_artifact(prm, name, folder),
                                     _artifact(prm, name, folder, h_fold[group][held][backend]))

        def art_of(key, arts=arts):  # noqa: ANN001, ANN202 - a row's artifact: the handoff variant if disaggregated
            return lambda r: arts[key(r)][r.mode == "disagg"] if key(r) in arts else None

        fit_art = art_of(lambda r: "fit")
        osub, ocfg = rows.iloc[other], [configs[i] for i in other]
        runs = {"fit": (fit_art, "decode"), "cv_gpu": (art_of(lambda r: ("gpu", r.gpu)), "decode"),
                "cv_model": (art_of(lambda r: ("model", r.model)), "decode"),
                "prefill": (lambda r, a=fit_art: a(r) if r.mode == "disagg" and args.first_token_on_prefill else None,
                            "prefill")}
        errors_from = "fit" if "fit" in args.deferred_columns else args.deferred_columns[0]
        for col, (art, at) in runs.items():
            if col in DEFERRED_COLUMNS and col not in args.deferred_columns:
                continue
            res, errors = _simulate_rows(osub, ocfg, art, at, row_cache, f"{backend} {col}", args.jobs)
            pred.loc[other, f"pred_ttft_ms_{col}"], pred.loc[other, f"pred_tpot_ms_{col}"] = res[:, 0], res[:, 1]
            if col == errors_from:  # a row that fails is listed once, from the in-sample pass where it runs
                for k, why in errors.items():
                    failed[other[k]] = why
        pred.loc[other, "how"] = "simulated"
        print(f"  {backend}: {len(other)} rows simulated (disaggregated / attention DP), "
              f"{time.perf_counter() - started:.0f} s", flush=True)


BIG_ROW_REQUESTS = 80_000


def _simulate_rows(rows: pd.DataFrame, configs: list, artifact_of, first_token_at: str = "decode",  # noqa: ANN001
                   cache: RowCache | None = None, label: str = "", jobs: int = 1) -> np.ndarray:
    """Rows that are not replayed (disaggregated pools, attention-DP ranks) simulated with the terms
    ``artifact_of(row)`` names (None: not predicted); n x 2 (TTFT, TPOT ms), NaN where it failed.
    Each row's result is kept in ``cache`` (saved every few rows) and read back on a rerun; rows not
    in it run in ``jobs`` processes (each simulation stands alone, so the results do not depend on it)."""
    from simulator.calibrate.silicon import simulate_row

    out = np.full((len(rows), 2), np.nan)
    errors, results, pending = {}, {}, []
    for k, (r, c) in enumerate(zip(rows.itertuples(), configs, strict=True)):
        engine = artifact_of(r)
        if engine is None:
            continue
        key = RowCache.key(c, Path(engine).read_text(), first_token_at) if cache is not None else None
        got = cache.items.get(key) if cache is not None else None
        if got is None:
            pending.append((k, key, c.replace(engine=engine, first_token_at=first_token_at)))
        else:
            results[k] = got
    started, done = time.perf_counter(), 0

    def keep(k: int, key: str | None, got: tuple[float, float] | str) -> None:
        nonlocal done
        results[k] = got
        done += 1
        if cache is not None:
            cache.items[key] = got
            if done % 5 == 0:
                cache.save()
        if done % 10 == 0:
            print(f"    {label} {done}/{len(pending)} rows to run, {time.perf_counter() - started:.0f} s", flush=True)

    # The largest rows (over BIG_ROW_REQUESTS requests) run one at a time in this process, the rest `jobs` at a
    # time in spawned workers. Spawned, not forked: after the big rows this process holds ~12 GB (the trace cache
    # and the freed heap), and two forked workers touching their copies of it ran a 24 GB machine out of memory
    # (the OOM killer took this process, three times); a spawned worker holds its own row only.
    alone = [jobs <= 1 or config.workload.num_requests > BIG_ROW_REQUESTS for _, _, config in pending]
    big = [p for p, a in zip(pending, alone, strict=True) if a]
    small = [p for p, a in zip(pending, alone, strict=True) if not a]
    for k, key, config in big:
        keep(k, key, simulate_row(config))
    if small:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {pool.submit(simulate_row, config): (k, key) for k, key, config in small}
            for fut in as_completed(futures):
                keep(*futures[fut], fut.result())
    for k, got in results.items():
        if isinstance(got, str):
            errors[k] = got
        else:
            out[k] = got
    if cache is not None and done:
        cache.save()
    return out, errors


def rows_run(pred: pd.DataFrame) -> pd.DataFrame:
    """The rows some fit predicted: a replayed row has every column, a simulated one those of the
    ``--deferred-columns`` passes it ran under (none of them where its simulation failed)."""
    return pred[pred[[f"pred_tpot_ms_{c}" for c in DEFERRED_COLUMNS]].notna().any(axis=1)]


def _summary(pred: pd.DataFrame) -> pd.DataFrame:
    from simulator.calibrate.silicon_fit import error_row

    fits = {"kernels only": ("kernel", "kernel"), "in-sample": ("fit", "fit"),
            "leave-one-GPU-out": ("cv_gpu", "cv_gpu"), "leave-one-model-out": ("cv_model", "cv_model"),
            "first token on prefill (in-sample)": ("prefill", "prefill"),
            "no handoff latency (in-sample)": ("handoff0", "handoff0")}
    out = []
    for (backend, mode), g in list(pred.groupby(["backend", "mode"])) + [(("all", "agg"), pred[pred["mode"] == "agg"]),
                                                                         (("all", "disagg"), pred[pred["mode"] == "disagg"])]:
        for label, (a, _) in fits.items():
            cols = (f"pred_ttft_ms_{a}", f"pred_tpot_ms_{a}")
            if cols[0] not in g or g[cols[0]].notna().sum() == 0:
                continue
            e = error_row(g[list(cols)].to_numpy(float), g)
            out.append({"backend": backend, "mode": mode, "fit": label, **e})
    return pd.DataFrame(out)


def _plots(pred: pd.DataFrame, summary: pd.DataFrame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    colors = {"vllm": "tab:blue", "sglang": "tab:orange", "trtllm": "tab:green"}
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        for backend, g in pred.groupby("backend"):
            agg = g[g["mode"] == "agg"]
            ax.scatter(agg[f"measured_{metric}_ms"], agg[f"pred_{metric}_ms_cv_gpu"], s=8, alpha=0.6,
                       color=colors.get(backend), label=f"{backend} agg (leave-one-GPU-out)")
            dis = g[g["mode"] == "disagg"]
            if len(dis):
                ax.scatter(dis[f"measured_{metric}_ms"], dis[f"pred_{metric}_ms_cv_gpu"], s=20, marker="x",
                           color=colors.get(backend), label=f"{backend} disagg")
        lo = max(1e-1, float(np.nanmin(pred[f"measured_{metric}_ms"])) / 2)
        hi = float(np.nanmax(pred[f"measured_{metric}_ms"])) * 2
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [lo * 1.1, hi * 1.1], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 1.1, hi / 1.1], "k:", lw=0.6)
        ax.set(xscale="log", yscale="log", xlabel=f"measured mean {metric.upper()} (ms)",
               ylabel=f"predicted {metric.upper()} (ms)", title=f"{metric.upper()}: held-out GPU (dotted: +-10%)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "cv_scatter.png", dpi=110)
    plt.close(fig)
    s = summary[summary["backend"] != "all"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        labels = [f"{r.backend} {r.mode}\n{r.fit}" for r in s.itertuples()]
        ax.barh(range(len(s)), 100 * s[f"{metric}_median"], color="tab:blue", label="median")
        ax.barh(range(len(s)), 100 * (s[f"{metric}_p90"] - s[f"{metric}_median"]), left=100 * s[f"{metric}_median"],
                color="tab:blue", alpha=0.3, label="to P90")
        ax.set_yticks(range(len(s)), labels, fontsize=6)
        ax.set(xlabel=f"{metric.upper()} absolute error (%)", xscale="symlog")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "cv_errors.png", dpi=110)
    plt.close(fig)


def report(args, total, distinct, rows, configs, traces, failed, not_run) -> int:  # noqa: ANN001
    import tempfile

    from simulator.calibrate.silicon_fit import FLOOR_ABOVE_TOKENS, PREFILL_SEQ_BACKENDS, cross_validate, fit, predict

    for i, why in failed.items():
        r = rows.iloc[i]
        not_run.append(dict(id=r["id"], backend=r["backend"], system=r["system"], mode=r["mode"],
                            model_path=r["model_path"], reason=why))
    agg_ok = np.array([t is not None for t in traces])
    failed_first = set(failed)
    pred = rows.copy()
    for col in ("kernel", "fit", "cv_gpu", "cv_model", "prefill", "handoff0"):
        pred[f"pred_ttft_ms_{col}"] = np.nan
        pred[f"pred_tpot_ms_{col}"] = np.nan
    pred["how"] = ""
    presets = []
    folder = Path(tempfile.mkdtemp(prefix="silicon_fit_"))
    started = time.perf_counter()
    deferred = []  # (backend, rows simulated rather than replayed, its params, its folds' params)
    from simulator.calibrate.silicon_fit import fold_params

    for backend in sorted(rows["backend"].unique()):
        in_backend = (rows["backend"] == backend).to_numpy()
        mask = in_backend & agg_ok
        if mask.sum() < 8:
            continue
        idx = np.flatnonzero(mask)
        sub = rows.iloc[idx].reset_index(drop=True)
        tr = [traces[i] for i in idx]
        pred.loc[idx, "pred_ttft_ms_kernel"] = [t.kernel_ttft_ms for t in tr]
        pred.loc[idx, "pred_tpot_ms_kernel"] = [t.kernel_tpot_ms for t in tr]
        above = FLOOR_ABOVE_TOKENS.get(backend)  # None: no prefill floor fitted
        prefill_seq = backend in PREFILL_SEQ_BACKENDS
        params = fit(tr, sub["measured_ttft_ms"], sub["measured_tpot_ms"], floor_above_tokens=above,
                     prefill_seq=prefill_seq)
        p = predict(tr, params)
        pred.loc[idx, "pred_ttft_ms_fit"], pred.loc[idx, "pred_tpot_ms_fit"] = p[:, 0], p[:, 1]
        pred.loc[idx, "how"] = "replayed"
        folds = {}
        for group in ("gpu", "model"):
            folds[group] = fold_params(sub, tr, group, rows.loc[in_backend, group].unique(), floor_above_tokens=above,
                                       prefill_seq=prefill_seq)
            cv = cross_validate(sub, tr, group, folds=folds[group])
            pred.loc[idx, f"pred_ttft_ms_cv_{group}"], pred.loc[idx, f"pred_tpot_ms_cv_{group}"] = cv[:, 0], cv[:, 1]
        a, b, pt, c, fl, ps = params.values
        presets.append({"backend": backend, "preset": PRESETS.get(backend, backend), "num_rows": len(sub),
                        "gpus": " ".join(sorted(sub["gpu"].unique())), "models": " ".join(sorted(sub["model"].unique())),
                        "overlap_cpu": params.overlap_cpu, "cpu_iteration_ms": a * 1e3, "cpu_per_seq_us": b * 1e6,
                        "cpu_per_prefill_token_us": pt * 1e6, "cpu_per_prefill_seq_layer_us": ps * 1e6,
                        "collective_extra_us": c * 1e6,
                        "prefill_floor_per_layer_ms": fl * 1e3,
                        "prefill_floor_above_tokens": above if above is not None else -1,
                        # the most prompt chunks a step of the rows held: the term per chunk is charged for no more
                        "prefill_seq_layer_max_chunks": params.max_chunks or 0})
        print(f"  {backend}: {len(sub)} rows fitted and cross-validated, {time.perf_counter() - started:.0f} s "
              f"(overlap {params.overlap_cpu}, {a * 1e3:.3f} ms/step, {b * 1e6:.1f} us/req, {pt * 1e6:.3f} us/prompt "
              f"token, {ps * 1e6:.1f} us/prompt chunk/layer, {c * 1e6:.1f} us/collective, prefill floor {fl * 1e3:.3f} ms/layer "
              f"above {above} tokens)", flush=True)
        # Rows not replayed (disaggregated pools, attention-DP ranks): simulated with the same terms, below.
        if args.no_disagg:
            continue
        other = np.flatnonzero(in_backend & ~agg_ok & ~np.isin(np.arange(len(rows)), list(failed)))
        if len(other):
            deferred.append((backend, other, params, folds))
    if deferred:
        _simulate_deferred(args, rows, configs, pred, deferred, failed, folder, presets, started)
    for i, why in failed.items():
        if i not in failed_first:
            r = rows.iloc[i]
            not_run.append(dict(id=r["id"], backend=r["backend"], system=r["system"], mode=r["mode"],
                                model_path=r["model_path"], reason=why))
    ran = rows_run(pred)
    summary = _summary(ran)
    by_group = []
    from simulator.calibrate.silicon_fit import error_row

    for keys, g in ran[ran["mode"] == "agg"].groupby(["backend", "gpu", "model"]):
        by_group.append(dict(zip(("backend", "gpu", "model"), keys, strict=True),
                             **error_row(g[["pred_ttft_ms_cv_gpu", "pred_tpot_ms_cv_gpu"]].to_numpy(float), g)))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    keep = ["id", "backend", "backend_version", "system", "gpu", "model", "mode", "isl", "osl", "concurrency",
            "num_copies", "layout_read_as", "how", "measured_ttft_ms", "measured_tpot_ms"] + [
                c for c in ran.columns if c.startswith("pred_")]
    ran[keep].to_csv(out / "predictions_fit.csv", index=False, float_format="%.5g")
    pd.DataFrame(presets).to_csv(out / "fitted_presets.csv", index=False, float_format="%.5g")
    summary.to_csv(out / "cv_summary.csv", index=False, float_format="%.4f")
    pd.DataFrame(by_group).to_csv(out / "cv_by_group.csv", index=False, float_format="%.4f")
    nr = pd.DataFrame(not_run).sort_values(["reason", "id"])
    nr.to_csv(out / "not_run.csv", index=False)
    _plots(ran, summary, out)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(summary.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"{len(ran)} of {distinct} distinct rows run ({len(ran) / distinct:.0%}); {total} in the file")
    print("not run, by reason:\n" + nr["reason"].str.replace(r"\d+", "N", regex=True).str[:90].value_counts().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
