"""Engine terms fitted on closed-loop benchmark rows (calibrate.silicon_fit) and the CSV path of
``simulate calibrate-engine --rows``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from simulator.calibrate import silicon_fit as sf
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.costmodel.engine_model import ENGINES, save_engine_artifact
from simulator.report.benchmark import benchmark_metrics
from simulator.report.metrics import request_columns
from simulator.simulation import simulate

TRUE = sf.Params(False, np.array([2.0e-3, 40e-6, 0.5e-6, 0.0]))  # synchronous engine, known terms


def _closed_loop(model: str, tp: int, isl: int, osl: int, conc: int) -> RunConfig:
    """``conc`` users, a warm-up request each drained before 2 x ``conc`` measured ones all users send at once, as
    `vllm bench serve --num-prompts 2xconc` runs them (the --rows fit's default client, told num_prompts)."""
    return RunConfig().replace(
        replica__model=model, replica__gpu="h100-sxm", replica__tp=tp, scheduler__name="vllm-v1",
        scheduler__max_num_batched_tokens=2048, workload__name="fixed", workload__prompt_tokens=isl,
        workload__output_tokens=osl, workload__arrival="burst", workload__num_requests=3 * conc,
        workload__concurrency=conc, workload__num_warmup=conc, workload__warmup_mode="drain")


CASES = [("llama-3.1-8b", 1, 1024, 64, 4), ("llama-3.1-8b", 1, 2048, 32, 16), ("llama-3.1-8b", 2, 512, 64, 32),
         ("qwen3-8b", 1, 3000, 48, 8), ("qwen3-8b", 2, 1024, 32, 64), ("llama-3.2-3b", 1, 4096, 64, 2)]


@pytest.fixture(scope="module")
def simulated_rows(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """Rows 'measured' by full simulations with TRUE's terms, and each row's kernels-only trace."""
    folder = tmp_path_factory.mktemp("fit")
    artifact = folder / "true.json"
    save_engine_artifact(TRUE.engine("true", "test", "test"), artifact, {})
    rows, traces = [], []
    for model, tp, isl, osl, conc in CASES:
        config = _closed_loop(model, tp, isl, osl, conc)
        result = simulate(config.replace(engine=str(artifact)))
        m = benchmark_metrics(result, request_columns(result))
        rows.append({"backend": "vllm", "kernels": "roofline", "model": model, "gpu": "h100-sxm", "tp": tp, "isl": isl, "osl": osl,
                     "concurrency": conc, "num_prompts": 2 * conc, "ttft_ms": m["mean_ttft_ms"],
                     "tpot_ms": m["mean_tpot_ms"]})
        traces.append(sf.trace_of(config))
    return rows, traces, folder


def test_replay_matches_the_simulation(simulated_rows) -> None:  # noqa: ANN001
    rows, traces, _ = simulated_rows
    for row, trace in zip(rows, traces, strict=True):
        assert trace is not None
        ttft, tpot = sf.replay(trace, TRUE)
        assert ttft == pytest.approx(row["ttft_ms"], rel=1e-9)
        assert tpot == pytest.approx(row["tpot_ms"], rel=1e-9)


@pytest.mark.parametrize("changes", [
    # InferenceX's client: lengths in [0.8 len, len], the warm-up a phase of its own.
    dict(workload__range_ratio=0.8, workload__range_style="sglang", workload__warmup_mode="drain"),
    # and SGLang's policy taking new requests every 10 iterations (its recipe's --scheduler-recv-interval).
    dict(workload__range_ratio=0.8, workload__range_style="sglang", workload__warmup_mode="drain",
         scheduler__name="sglang", scheduler__recv_interval=10),
])
def test_replay_matches_the_simulation_under_the_benchmark_clients_load(tmp_path: Path, changes: dict) -> None:
    """The fit replays the benchmark client's load exactly too: drawn lengths, a drained warm-up and
    an intake every N iterations all count in steps, not seconds."""
    artifact = tmp_path / "true.json"
    save_engine_artifact(TRUE.engine("true", "test", "test"), artifact, {})
    config = _closed_loop("llama-3.1-8b", 1, 1024, 48, 8).replace(**changes)
    result = simulate(config.replace(engine=str(artifact)))
    m = benchmark_metrics(result, request_columns(result))
    assert len(set(request_columns(result)["num_prompt_tokens"])) > 5  # the band is drawn
    ttft, tpot = sf.replay(sf.trace_of(config), TRUE)
    assert ttft == pytest.approx(m["mean_ttft_ms"], rel=1e-9)
    assert tpot == pytest.approx(m["mean_tpot_ms"], rel=1e-9)


def test_replay_matches_the_simulation_with_a_prefill_floor(tmp_path: Path) -> None:
    """The prefill floor (a step with prompt tokens takes at least floor x layers) replays as the
    engine prices it, and it lengthens the run (the prompts' steps)."""
    floored = sf.Params(False, np.array([2.0e-3, 40e-6, 0.5e-6, 0.0, 1.0e-3]))  # 32 ms on 32 layers
    artifact = tmp_path / "floored.json"
    save_engine_artifact(floored.engine("floored", "test", "test"), artifact, {})
    config = _closed_loop("llama-3.1-8b", 1, 512, 48, 8)
    result = simulate(config.replace(engine=str(artifact)))
    m = benchmark_metrics(result, request_columns(result))
    trace = sf.trace_of(config)
    assert trace is not None and trace.num_layers == 32
    ttft, tpot = sf.replay(trace, floored)
    assert ttft == pytest.approx(m["mean_ttft_ms"], rel=1e-9) and tpot == pytest.approx(m["mean_tpot_ms"], rel=1e-9)
    ttft0, tpot0 = sf.replay(trace, TRUE)
    assert ttft > ttft0 and tpot > tpot0
    assert sf.Params.from_engine(floored.engine("x", "-", "-")).values[4] == pytest.approx(1.0e-3)


def test_fit_recovers_known_terms(simulated_rows) -> None:  # noqa: ANN001
    rows, traces, _ = simulated_rows
    ttft = np.array([r["ttft_ms"] for r in rows])
    tpot = np.array([r["tpot_ms"] for r in rows])
    got = sf.fit(traces, ttft, tpot, start=sf.Params(False, np.array([0.5e-3, 5e-6, 0.05e-6, 0.0])))
    assert got.overlap_cpu is False
    assert got.values[0] == pytest.approx(2.0e-3, rel=0.05)
    assert got.values[1] == pytest.approx(40e-6, rel=0.1)
    assert got.values[2] == pytest.approx(0.5e-6, rel=0.15)
    pred = sf.predict(traces, got)
    assert np.max(np.abs(pred[:, 1] / tpot - 1)) < 0.01
    # a backend fitted without a prefill floor (floor_above_tokens None) keeps it at exactly 0
    no_floor = sf.fit(traces, ttft, tpot, overlap=False, floor_above_tokens=None)
    assert no_floor.values[4] == 0.0 and no_floor.engine("x", "-", "-").prefill_floor_per_layer_s == 0.0
    assert no_floor.values[0] == pytest.approx(2.0e-3, rel=0.05)
    assert np.max(np.abs(pred[:, 0] / ttft - 1)) < 0.02
    # An async engine cannot produce these rows' TPOT at batch 64 and their TTFT at batch 2 together.
    wrong = sf.fit(traces, ttft, tpot, overlap=True)
    err_wrong = np.median(np.abs(sf.predict(traces, wrong)[:, 1] / tpot - 1))
    assert err_wrong > np.median(np.abs(pred[:, 1] / tpot - 1))


def test_calibrate_engine_rows_csv(simulated_rows, tmp_path: Path) -> None:  # noqa: ANN001
    from simulator.cli.engine import calibrate_engine_command

    rows, _, _ = simulated_rows
    import pandas as pd

    csv = tmp_path / "rows.csv"
    pd.DataFrame(rows).to_csv(csv, index=False)
    out = tmp_path / "engine.json"
    base = RunConfig().replace(engine="vllm-2023-splitwise", scheduler__max_num_batched_tokens=2048)
    result = calibrate_engine_command(base, out, rows=csv, holdout=0.34, seed=1)
    report = result["report"]
    assert report["rows"] == len(rows) and report["holdout_rows"] == 2
    assert report["holdout_after"]["tpot_median"] < 0.02
    assert report["holdout_after"]["tpot_median"] < report["holdout_before"]["tpot_median"]
    assert "leave_one_model_out" in report
    saved = json.loads(out.read_text())
    assert saved["engine"]["cpu_iteration_s"] == pytest.approx(2.0e-3, rel=0.1)
    # The prefill floor's bound is the base engine's (not fitted), in the split fit and the final one alike.
    bounded = tmp_path / "bounded.json"
    save_engine_artifact(dataclasses.replace(ENGINES["vllm-2023-splitwise"], name="bounded",
                                             prefill_floor_above_tokens=512), bounded, {})
    calibrate_engine_command(base.replace(engine=str(bounded)), tmp_path / "b.json", rows=csv,
                                      holdout=0.34, seed=1)
    assert json.loads((tmp_path / "b.json").read_text())["engine"]["prefill_floor_above_tokens"] == 512
    # One line naming the problem for a CSV without the measured columns.
    bad = tmp_path / "bad.csv"
    pd.DataFrame(rows).drop(columns=["tpot_ms"]).to_csv(bad, index=False)
    with pytest.raises(ConfigError, match="tpot_ms"):
        calibrate_engine_command(base, tmp_path / "x.json", rows=bad)
    neg = tmp_path / "neg.csv"
    pd.DataFrame(rows).assign(concurrency=[0] + [4] * (len(rows) - 1)).to_csv(neg, index=False)
    with pytest.raises(ConfigError, match="line 2: concurrency"):
        calibrate_engine_command(base, tmp_path / "y.json", rows=neg)


def test_fitted_presets_replay_silicon_rows(shared_data: Path) -> None:
    """The 2026 presets over their backend's kernel tables: a silicon row's replay equals its
    full simulation, and the TPOT of a few vLLM rows lands near the measurement."""
    from simulator.calibrate.silicon import data_path, read_silicon, row_config

    kept, _ = read_silicon(data_path(shared_data))
    pick = kept[(kept["backend"] == "vllm") & (kept["mode"] == "agg") & (kept["model_path"] == "Qwen/Qwen3-32B")
                & (kept["concurrency"] <= 16) & (kept["osl"] <= 1024)].head(3)
    assert len(pick) == 3
    errors = []
    for row in pick.itertuples():
        config = row_config(row, requests_per_user=2, max_requests=200, extra={"replica__kernels": "vllm"})
        trace = sf.trace_of(config)
        assert trace is not None
        ttft, tpot = sf.replay(trace, sf.Params.from_engine(ENGINES["vllm-2026"]))
        m = benchmark_metrics(result := simulate(config.replace(engine="vllm-2026")), request_columns(result))
        assert ttft == pytest.approx(m["mean_ttft_ms"], rel=1e-9) and tpot == pytest.approx(m["mean_tpot_ms"], rel=1e-9)
        errors.append(abs(tpot / row.silicon_tpot_ms - 1))
    assert np.median(errors) < 0.35


def test_gpt_oss_decode_stretch_on_tables(shared_data: Path) -> None:
    """Fix: a decode stretch over kernel tables whose decode curve has no edge (gpt-oss's sliding
    window) counted its extrapolations with int(inf) and failed (53 silicon rows before the fix)."""
    config = RunConfig().replace(
        replica__model="gpt-oss-120b", replica__gpu="b200", replica__tp=4, replica__dtype="nvfp4",
        replica__kv_cache_dtype="fp8", replica__kernels="vllm", replica__max_model_len=9232,
        scheduler__name="vllm-v1", scheduler__max_num_batched_tokens=8192, workload__name="fixed",
        workload__prompt_tokens=1024, workload__output_tokens=8192, workload__arrival="burst",
        workload__num_requests=8, workload__concurrency=4, workload__num_warmup=4, engine="vllm-2026")
    result = simulate(config)
    assert all(r.num_generated == 8192 for r in result.requests)


def test_fit_handoff_recovers_a_constant_gap() -> None:
    """The handoff latency is the constant that closes a TTFT gap: rows short by 150 ms (and a few outliers
    far off, which a median ignores) give 150 ms; rows already right give 0; no usable row gives 0."""
    rng = np.random.default_rng(0)
    base = rng.uniform(50, 2000, 40)
    measured = base + 150.0
    measured[:5] *= 8.0  # outliers: a median fit does not chase them
    assert sf.fit_handoff(base, measured) == pytest.approx(0.150, abs=0.005)
    assert sf.fit_handoff(base, base) == 0.0
    assert sf.fit_handoff([np.nan], [100.0]) == 0.0
    # The fitted constant lies on the grid and inside it, whatever the gap.
    assert sf.fit_handoff(base, base + 1e6) == sf.HANDOFF_GRID_S[-1]


def test_each_backend_with_enough_rows_fits_its_own_handoff() -> None:
    """Two serving stacks 100 ms and 300 ms short of measured TTFT get those handoffs, not one between them; a
    backend with too few rows takes the one fitted on every backend's rows."""
    rng = np.random.default_rng(1)
    base = rng.uniform(100, 3000, 90)
    backends = np.array(["trtllm"] * 50 + ["sglang"] * 30 + ["vllm"] * 10)
    gap = np.where(backends == "sglang", 300.0, 100.0)
    own, pooled = sf.fit_handoffs(base, base + gap, backends)
    assert own["trtllm"] == pytest.approx(0.100, abs=0.005)
    assert own["sglang"] == pytest.approx(0.300, abs=0.005)
    assert "vllm" not in own and pooled == sf.fit_handoff(base, base + gap)  # 10 rows: under MIN_OWN_HANDOFF_ROWS
    assert sf.fit_handoffs(base, base + gap, backends, min_rows=5)[0]["vllm"] == pytest.approx(0.100, abs=0.005)
    # rows without a simulated TTFT count for nobody: sglang's 30 less 15 fall under the minimum
    holes = base.copy()
    holes[50:65] = np.nan
    assert set(sf.fit_handoffs(holes, base + gap, backends)[0]) == {"trtllm"}


def test_presets_carry_the_committed_reports_fit() -> None:
    """The committed silicon report (results/validation/silicon/fitted_presets.csv) and the presets agree: every
    2026 preset's handoff latency is the report's, and each preset's terms are its backend's fit (the README says
    so). A report regenerated with other figures and presets left behind (or the other way round) fails here."""
    import pandas as pd

    table = pd.read_csv(Path(__file__).resolve().parents[1] / "results" / "validation" / "silicon" / "fitted_presets.csv")
    assert set(table["preset"]) == {"vllm-2026", "sglang-2026", "trtllm-2026"}
    for row in table.itertuples():
        assert ENGINES[row.preset].handoff_s == pytest.approx(row.handoff_ms / 1e3), row.preset
    for fit in table.itertuples():
        engine = ENGINES[fit.preset]
        near = {"rel": 5e-3, "abs": 1e-9}  # a term the fit leaves at its bound of 0 is 0 in the preset
        assert engine.cpu_iteration_s == pytest.approx(fit.cpu_iteration_ms / 1e3, **near), fit.preset
        assert engine.cpu_per_seq_s == pytest.approx(fit.cpu_per_seq_us / 1e6, **near), fit.preset
        assert engine.cpu_per_prefill_token_s == pytest.approx(fit.cpu_per_prefill_token_us / 1e6, **near), fit.preset
        assert engine.prefill_floor_per_layer_s == pytest.approx(fit.prefill_floor_per_layer_ms / 1e3, **near)
        assert engine.cpu_per_prefill_seq_layer_s == pytest.approx(fit.cpu_per_prefill_seq_layer_us / 1e6, **near)
        assert (engine.prefill_seq_layer_max_chunks or 0) == fit.prefill_seq_layer_max_chunks, fit.preset
        assert [v for _, v in engine.collective_extra_s] == pytest.approx(
            [fit.collective_extra_us / 1e6] * len(engine.collective_extra_s), **near), fit.preset


def test_a_traces_key_names_the_lengths_spread_but_not_a_zero_one() -> None:
    exact = _closed_loop("llama-3.1-8b", 1, 1024, 64, 4)
    assert sf.cache_key(exact) == sf.cache_key(exact.replace(workload__prompt_tokens_stddev=0.0))
    keys = {sf.cache_key(exact), sf.cache_key(exact.replace(workload__prompt_tokens_stddev=2.0)),
            sf.cache_key(exact.replace(workload__output_tokens_stddev=2.0))}
    assert len(keys) == 3  # a spread run's steps differ: never read back as the exact run's trace


def test_a_traces_key_names_every_field_a_trace_reads_and_not_the_engine() -> None:
    """A recipe's scheduling flags change the steps: each its own trace (batch waiting was once left off the
    key, and a rerun over a cache read the run without it back). The engine terms do not: the trace runs the
    kernels alone."""
    base = _closed_loop("llama-3.1-8b", 1, 1024, 64, 4)
    variants = [base, base.replace(scheduler__batch_wait_timeout_iters=20, scheduler__batch_wait_max_tokens_ratio=0.9),
                base.replace(scheduler__batch_wait_timeout_iters=40, scheduler__batch_wait_max_tokens_ratio=0.9),
                base.replace(scheduler__name="sglang"), base.replace(scheduler__name="sglang", scheduler__recv_interval=10),
                base.replace(scheduler__max_num_batched_tokens=8192),
                base.replace(replica__roofline_calibration="2023")]
    assert len({sf.cache_key(c) for c in variants}) == len(variants)
    assert sf.cache_key(base) == sf.cache_key(base.replace(engine="sglang-2026"))


def test_user_rows_name_gpus_by_the_catalog_and_refuse_a_fleets_users(tmp_path):
    """An alias and its name were two GPUs to the cross-validation ('leave one gpu out: num_rows 1'); a row of
    10^7 users ran on past a minute with no word."""
    from simulator.calibrate.silicon_fit import read_user_rows
    from simulator.config.errors import ConfigError

    path = tmp_path / "rows.csv"
    head = "backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms\n"
    path.write_text(head + "vllm,llama-3.1-8b,h100,1024,1024,8,50,10\nvllm,llama-3.1-8b,h100-sxm,1024,1024,16,60,12\n")
    assert set(read_user_rows(path)["gpu"]) == {"h100-sxm"}
    path.write_text(head + "vllm,llama-3.1-8b,h100,1024,1024,10000000,50,10\n")
    with pytest.raises(ConfigError, match="concurrency 10,000,000 is beyond"):
        read_user_rows(path)


def test_user_rows_refusals_and_duplicates(simulated_rows, tmp_path: Path) -> None:  # noqa: ANN001
    """calibrate-engine --rows: a row of one output token has no TPOT (a scipy traceback once); rows of two
    backends are one engine's no more (pooled silently once); a repeated row is one measurement (a copy of a
    held-out row sat in the training rows); too few training rows for the terms is said; vLLM rows fit no prefill
    floor (one never bound on the rows yet priced a tiny model's prefill 21-39% slow)."""
    import pandas as pd

    from simulator.cli.engine import calibrate_engine_command

    rows, _, _ = simulated_rows
    base = RunConfig().replace(engine="vllm-2023-splitwise", scheduler__max_num_batched_tokens=2048)
    frame = pd.DataFrame(rows)
    cases = {"osl1.csv": (frame.assign(osl=[1] + list(frame["osl"][1:])), "line 2: osl must be at least 2"),
             "mixed.csv": (frame.assign(backend=["vllm", "sglang"] * (len(frame) // 2) + ["vllm"] * (len(frame) % 2)),
                           "rows of 2 backends")}
    for name, (bad, needle) in cases.items():
        bad.to_csv(tmp_path / name, index=False)
        with pytest.raises(ConfigError, match=needle):
            calibrate_engine_command(base, tmp_path / "x.json", rows=tmp_path / name)
    doubled = tmp_path / "doubled.csv"
    pd.concat([frame, frame]).to_csv(doubled, index=False)
    report = calibrate_engine_command(base, tmp_path / "d.json", rows=doubled, holdout=0.34, seed=1)["report"]
    assert report["rows"] == len(rows) and len(report["skipped"]) == len(rows)
    assert all("one measurement, counted once" in why for _, why in report["skipped"])
    with pytest.raises(ConfigError, match="give more rows or a smaller --holdout"):
        calibrate_engine_command(base, tmp_path / "f.json", rows=doubled, holdout=0.8, seed=1)
    assert json.loads((tmp_path / "d.json").read_text())["engine"]["prefill_floor_per_layer_s"] == 0.0


def test_replay_and_fit_of_a_time_per_prompt_chunk_and_layer(tmp_path: Path) -> None:
    """The time per prompt chunk and layer of a step (PREFILL_SEQ_BACKENDS) replays as the engine prices it (x the
    model's layers: 28 to 36 here), lengthens the prompts' steps only, and a fit given it recovers it where rows of
    short and long prompts at several loads tell it from the per-token time; fits without it keep it at exactly 0."""
    truth = sf.Params(False, np.array([1.0e-3, 20e-6, 0.5e-6, 0.0, 0.0, 0.125e-3]))
    artifact = tmp_path / "chunk.json"
    save_engine_artifact(truth.engine("chunk", "test", "test"), artifact, {})
    assert truth.engine("x", "-", "-").cpu_per_prefill_seq_layer_s == 0.125e-3
    assert sf.Params.from_engine(truth.engine("x", "-", "-")).values[sf.PREFILL_SEQ] == 0.125e-3
    cases = [("llama-3.1-8b", 1, 256, 32, 16), ("llama-3.1-8b", 1, 2048, 32, 4), ("qwen3-8b", 1, 512, 48, 32),
             ("qwen3-8b", 1, 3000, 32, 8), ("llama-3.2-3b", 1, 128, 64, 24)]
    traces, ttft, tpot = [], [], []
    for model, tp, isl, osl, conc in cases:
        config = _closed_loop(model, tp, isl, osl, conc)
        result = simulate(config.replace(engine=str(artifact)))
        m = benchmark_metrics(result, request_columns(result))
        trace = sf.trace_of(config)
        assert trace is not None and trace.num_prefills is not None and trace.num_prefills.sum() > 0
        got = sf.replay(trace, truth)
        assert got[0] == pytest.approx(m["mean_ttft_ms"], rel=1e-9) and got[1] == pytest.approx(m["mean_tpot_ms"], rel=1e-9)
        without = sf.replay(trace, sf.Params(False, truth.values[:5]))
        assert got[0] > without[0]  # (the prompts' steps take longer, the first token later)
        traces.append(trace)
        ttft.append(m["mean_ttft_ms"])
        tpot.append(m["mean_tpot_ms"])
    fitted = sf.fit(traces, np.array(ttft), np.array(tpot), overlap=False, floor_above_tokens=None, prefill_seq=True)
    assert fitted.values[sf.PREFILL_SEQ] == pytest.approx(0.125e-3, rel=0.1)
    assert fitted.values[0] == pytest.approx(1.0e-3, rel=0.15)
    plain = sf.fit(traces, np.array(ttft), np.array(tpot), overlap=False, floor_above_tokens=None)
    assert plain.values[sf.PREFILL_SEQ] == 0.0
    # the fit charges the term for at most the chunks a step of its rows held, and its engine says so
    most = max(int(t.num_prefills.max()) for t in traces)
    assert fitted.max_chunks == sf.most_chunks(traces) == most and plain.max_chunks is None
    assert fitted.engine("x", "-", "-").prefill_seq_layer_max_chunks == most
    assert sf.Params.from_engine(fitted.engine("x", "-", "-")).max_chunks == most
    # replayed under a lower cap, a trace whose steps carry more chunks comes out faster, as the engine prices it
    busy = max(traces, key=lambda t: int(t.num_prefills.max()))
    low = sf.Params(False, truth.values, 0, 1)
    assert int(busy.num_prefills.max()) > 1
    assert sf.replay(busy, low)[0] < sf.replay(busy, truth)[0]
