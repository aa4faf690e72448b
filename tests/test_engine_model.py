"""Engine overheads: presets, overlap semantics, calibration (table and vLLM bench), refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.calibrate.engine_fit import (
    calibrate_bench,
    calibrate_table,
    check_bench_model,
    make_bench_fixture,
    read_bench,
)
from simulator.cli import app
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig
from simulator.costmodel import BatchShape, load_cost_model
from simulator.costmodel.engine_model import (
    DEFAULT_ENGINE,
    ENGINES,
    EngineCostModel,
    EngineModel,
    load_engine,
    parse_overrides,
    save_engine_artifact,
    tp_lookup,
)
from simulator.costmodel.roofline import RooflineCostModel

runner = CliRunner()
FIXTURE = Path(__file__).parent / "data" / "vllm_bench_fixture.json"
SHAPES = [BatchShape.from_requests(decodes=[700] * 8), BatchShape.from_requests([(3000, 0)], [300] * 4),
          BatchShape.from_requests([(256, 512)], []), BatchShape.from_requests(decodes=[64])]


def engine_model(engine: EngineModel | str, tp: int = 4, model: str = "llama-2-70b") -> EngineCostModel:
    cm = load_cost_model("roofline", ReplicaConfig(model=model, gpu="a100-80gb", tp=tp), engine)
    assert isinstance(cm, EngineCostModel)
    return cm


def test_every_preset_names_its_source_and_the_default_exists():
    assert DEFAULT_ENGINE in ENGINES and RunConfig().engine == DEFAULT_ENGINE
    for name, e in ENGINES.items():
        assert e.name == name and e.source and e.fitted
        assert load_engine(name) is e


@pytest.mark.parametrize("name", list(ENGINES))
def test_breakdown_sums_to_iteration_time_and_shows_engine_terms(name):
    cm = engine_model(name)
    for shape in SHAPES:
        parts = cm.breakdown(shape)
        assert "cpu_overhead" not in parts and "engine_collective_extra" in parts
        assert sum(parts.values()) == pytest.approx(cm.iteration_time(shape), rel=1e-9)
        assert cm.iteration_time(shape) > 0


def test_sync_engine_adds_cpu_async_hides_it_under_gpu():
    sync = replace(ENGINES["ideal"], overlap_cpu=False, cpu_iteration_s=5e-3, cpu_per_seq_s=1e-4)
    kernels = engine_model("ideal")
    shape = SHAPES[0]
    k = kernels.iteration_time(shape)
    cpu = 5e-3 + 8 * 1e-4
    assert engine_model(sync).iteration_time(shape) == pytest.approx(k + cpu)
    assert engine_model(replace(sync, overlap_cpu=True)).iteration_time(shape) == pytest.approx(max(k, cpu))
    huge = replace(sync, overlap_cpu=True, cpu_iteration_s=1.0)  # CPU-bound: the step is the CPU time
    assert engine_model(huge).iteration_time(shape) == pytest.approx(1.0 + 8 * 1e-4)


def test_launch_bound_without_cuda_graphs_and_collective_floor_by_tp():
    launchy = replace(ENGINES["ideal"], cuda_graphs=False, launch_per_kernel_s=50e-6)
    cm = engine_model(launchy)
    assert cm.iteration_time(SHAPES[3]) >= 50e-6 * 14 * 80  # 80 layers, 14 kernels each
    floors = replace(ENGINES["ideal"], collective_extra_s=((2, 10e-6), (8, 40e-6)))
    assert tp_lookup(floors.collective_extra_s, 4) == pytest.approx(25e-6)  # linear in log2(tp)
    assert tp_lookup(floors.collective_extra_s, 1) == 0.0
    base = engine_model("ideal", tp=8).iteration_time(SHAPES[3])
    assert engine_model(floors, tp=8).iteration_time(SHAPES[3]) == pytest.approx(base + 161 * 40e-6)
    # A faster-than-NCCL collective lowers the step, but a collective never costs less than nothing.
    fast = replace(ENGINES["ideal"], collective_extra_s=((8, -1.0),))
    assert 0 < engine_model(fast, tp=8).iteration_time(SHAPES[3]) < base


def test_prefill_floor_holds_steps_with_prompt_tokens_only():
    """A step that carries prompt tokens takes at least the floor x layers (prefill runs outside
    CUDA graphs); a decode-only step does not; the stretch forms keep to the per-step prices."""
    floored = replace(ENGINES["ideal"], prefill_floor_per_layer_s=1e-3)
    cm, plain = engine_model(floored), engine_model("ideal")
    small_prefill = BatchShape.from_requests([(16, 0)], [100] * 2)
    assert plain.iteration_time(small_prefill) < 80e-3
    assert cm.iteration_time(small_prefill) == pytest.approx(80e-3)  # 80 layers x 1 ms
    assert cm.iteration_time(SHAPES[1]) == pytest.approx(max(80e-3, plain.iteration_time(SHAPES[1])))
    for decode_only in (SHAPES[0], SHAPES[3]):
        assert cm.iteration_time(decode_only) == plain.iteration_time(decode_only)
    parts = cm.breakdown(small_prefill)
    assert parts["engine_launch_bound"] == pytest.approx(80e-3 - plain.iteration_time(small_prefill))
    # a prompt's chunks beside decodes, and a decode stretch: each step as the scalar path prices it
    chunks = cm.chunk_stretch_times(4, 4 * 300, 4 * 300 * 300, 300, 64, 0, 5)
    for j, t in enumerate(chunks):
        shape = BatchShape()
        shape.add_decodes(4, 4 * (300 + j), 4 * (300 + j) ** 2, 300 + j)
        shape.add_prefill(64, 64 * j, False)
        assert t == pytest.approx(cm.iteration_time(shape), rel=1e-12) and t >= 80e-3
    decodes = cm.decode_stretch_times(4, 4 * 300, 4 * 300 * 300, 300, 60)
    assert decodes[0] == pytest.approx(plain.iteration_time(BatchShape.decode_only(4, 1200, 360000, 300)), rel=1e-12)
    assert max(decodes) < 80e-3
    # a speculative verify's query rows ride in num_prefill_tokens but are no prompt: no floor
    from simulator.costmodel.speculative import SpecBatchShape

    verify = SpecBatchShape()
    for _ in range(4):
        verify.add_verify(3, 500)
    assert verify.num_prefill_tokens == 12
    assert cm.iteration_time(verify) == plain.iteration_time(verify) < 80e-3
    verify.add_prefill(16, 0, False)
    assert cm.iteration_time(verify) == pytest.approx(80e-3)
    with pytest.raises(ConfigError, match="prefill_floor_per_layer_s"):
        replace(ENGINES["ideal"], prefill_floor_per_layer_s=-1.0)


def test_engine_field_and_flag_reach_the_simulation(tmp_path: Path):
    cfg = RunConfig().replace(workload__num_requests=20)
    from simulator.simulation import simulate

    assert cfg.engine == DEFAULT_ENGINE == "vllm-2026"  # today's vLLM unless a run names another preset
    engines = ("ideal", "vllm-2026", "handset", "vllm-2023-splitwise")
    ends = {e: simulate(cfg.replace(engine=e)).sim_end_at for e in engines}
    # Each preset reaches the run. Today's vLLM (no CPU a step, 10 us a prompt token) < a constant 1.5 ms a step <
    # the 2023 Splitwise fit. `ideal` names no backend, so the roofline prices it with every backend's constants
    # pooled, vllm-2026 with vLLM's own (faster): the two are not ordered by their CPU terms.
    assert len(set(ends.values())) == len(engines)
    assert ends["vllm-2026"] < ends["handset"] < ends["vllm-2023-splitwise"]
    assert simulate(cfg).sim_end_at == ends["vllm-2026"]
    res = runner.invoke(app, ["predict", "--model", "llama-2-70b", "--tp", "8", "--decode", "4", "--context", "512",
                              "--engine", "vllm-v1", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["engine"] == "vllm-v1"


def test_unknown_engine_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "simulator", "run", "--no-progress", "--engine", "vllm-1999"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "engine" in lines[0] and "Traceback" not in proc.stderr


# -- calibration ------------------------------------------------------------------------------------------------
def simulated_table(truth: EngineModel, n: int = 40, seed: int = 1) -> pd.DataFrame:
    """An iteration table measured on the simulator itself, with overheads we set. TP1 rows
    (no collectives) separate the per-step constant from the collective floors."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        tp = (1, 2, 4, 8)[i % 4]
        prefill = i % 3 == 0
        row = {"model": "llama-2-7b", "gpu": "a100-80gb", "tp": tp,
               "num_prefills": int(rng.integers(1, 6)) if prefill else 0,
               "prefill_tokens": int(rng.integers(128, 1500)) if prefill else 0,
               "num_decodes": 0 if prefill else int(rng.integers(1, 64)),
               "decode_context": 0 if prefill else int(rng.integers(100, 3000))}
        shape = BatchShape.from_requests([(row["prefill_tokens"], 0)] * row["num_prefills"],
                                         [row["decode_context"]] * row["num_decodes"])
        row["measured_s"] = engine_model(truth, tp=tp, model="llama-2-7b").iteration_time(shape)
        rows.append(row)
    return pd.DataFrame(rows)


def test_table_calibration_recovers_overheads_we_set():
    truth = replace(ENGINES["ideal"], name="truth", overlap_cpu=False, cpu_iteration_s=3e-3, cpu_per_seq_s=200e-6,
                    cpu_per_prefill_token_s=5e-6, collective_extra_s=((2, 10e-6), (4, 40e-6), (8, 90e-6)))
    out = calibrate_table(simulated_table(truth), "llama-2-7b", "a100-80gb", base="handset")
    got = out["engine"]
    for term in ("cpu_iteration_s", "cpu_per_seq_s", "cpu_per_prefill_token_s"):
        assert getattr(got, term) == pytest.approx(getattr(truth, term), rel=0.05), term
    for (tp, want), (tp2, value) in zip(truth.collective_extra_s, got.collective_extra_s, strict=True):
        assert tp == tp2 and value == pytest.approx(want, rel=0.05)
    assert out["report"]["holdout_after"]["median_ape"] < 0.01 < out["report"]["holdout_before"]["median_ape"]


@pytest.mark.parametrize("base", ["sarathi-2023-vidur", "sglang-2026"])
def test_a_table_fit_keeps_no_term_of_its_starting_preset_it_did_not_fit(base: str):
    """The fit kept a starting preset's RPC, prefill floor, scheduler and kernels, which its features never saw:
    from sglang-2026 the 3.44 ms-a-layer floor made the held-out P95 365%."""
    truth = replace(ENGINES["ideal"], name="truth", overlap_cpu=False, cpu_iteration_s=3e-3, cpu_per_seq_s=200e-6,
                    cpu_per_prefill_token_s=5e-6, collective_extra_s=((2, 10e-6), (4, 40e-6), (8, 90e-6)))
    out = calibrate_table(simulated_table(truth), "llama-2-7b", "a100-80gb", base=base)
    got = out["engine"]
    assert got.rpc_s == () and got.rpc_per_seq_s == 0 and got.prefill_floor_per_layer_s == 0
    assert got.scheduler is None and got.kernels is None and got.roofline_prices == "all"
    assert out["report"]["holdout_after"]["median_ape"] < 0.01


@pytest.mark.parametrize(("change", "needle"), [
    (lambda df: df.drop(columns=["measured_s"]), "missing column"),
    (lambda df: df.head(5), "at least"),
    (lambda df: df.assign(model="llama-2-13b"), "the fit is for llama-2-7b"),
    (lambda df: df.assign(tp=3), "does not match"),
    (lambda df: df.assign(measured_s=-1.0), "measured_s is -1 \\(negative\\)"),
])
def test_table_calibration_refuses_unusable_data(change, needle):
    df = change(simulated_table(ENGINES["handset"], n=12))
    with pytest.raises(ConfigError, match=needle):
        calibrate_table(df, "llama-2-7b", "a100-80gb")


BENCH_CONFIG = RunConfig().replace(replica__model="llama-2-7b", scheduler__name="vllm-v1", workload__name="uniform",
                                   workload__prompt_tokens=128, workload__prompt_tokens_max=1024,
                                   workload__output_tokens=8, workload__output_tokens_max=48, engine="vllm-v1")


def test_bench_calibration_recovers_the_step_overhead_of_a_simulated_run(tmp_path: Path):
    truth = replace(ENGINES["vllm-v1"], overlap_cpu=False, cpu_iteration_s=4e-3)
    path = tmp_path / "bench.json"
    # 400 requests: at 100 the estimate's sampling error reaches ~8% on some seeds (2-4% at 400)
    path.write_text(json.dumps(make_bench_fixture(BENCH_CONFIG, truth, rate=12.0, num_requests=400, seed=0)))
    out = calibrate_bench(read_bench(path), BENCH_CONFIG, "vllm-v1", seed=0)
    assert out["engine"].cpu_iteration_s == pytest.approx(4e-3, rel=0.05)
    assert out["engine"].overlap_cpu is False


def test_calibrate_engine_cli_runs_on_the_vllm_fixture_and_run_accepts_the_artifact(tmp_path: Path):
    art = tmp_path / "engine.json"
    res = runner.invoke(app, ["calibrate-engine", "--bench", str(FIXTURE), "--model", "llama-2-7b", "--scheduler",
                              "vllm-v1", "--engine", "vllm-v1", "--out", str(art)])
    assert res.exit_code == 0, res.output
    data = json.loads(art.read_text())
    assert data["format"] == "servesim-engine" and "holdout_after" in data["report"]
    assert 3e-3 < data["engine"]["cpu_iteration_s"] < 9e-3  # the fixture was made with 6 ms and 5% noise
    # Fitted over vllm-v1's roofline constants: recorded, so the artifact's name (the --out file's) does not move
    # its kernel prices (it ran under the pooled constants: TBT 27.8 against 24.6 ms in the audit's case).
    assert data["engine"]["roofline_prices"] == "vllm"
    res = runner.invoke(app, ["run", "--engine", str(art), "--num-requests", "10", "--no-progress", "--json"])
    assert res.exit_code == 0, res.output
    terms = {k: v for k, v in data["engine"].items() if k in ("cpu_iteration_s", "cpu_per_seq_s", "overlap_cpu")}
    twin = runner.invoke(app, ["run", "--engine", "vllm-v1:" + ",".join(f"{k}={v}" for k, v in terms.items()),
                               "--num-requests", "10", "--no-progress", "--json"])
    assert twin.exit_code == 0, twin.output
    assert json.loads(res.stdout)["tbt_s_p50"] == json.loads(twin.stdout)["tbt_s_p50"]


def test_roofline_constants_follow_an_artifacts_record_not_its_name():
    from simulator.costmodel.calibration import roofline_backend

    fitted = replace(ENGINES["vllm-v1"], name="my-fit", roofline_prices="vllm")
    assert roofline_backend("roofline", fitted) == "vllm"
    assert roofline_backend("roofline", replace(fitted, roofline_prices=None)) == "all"  # by its name: none
    assert roofline_backend("sglang", fitted) == "sglang"  # the run's --kernels first
    with pytest.raises(ConfigError, match="roofline_prices"):
        replace(fitted, roofline_prices="tensorrt")


def test_a_bench_measured_after_a_steady_warm_up_is_refused(tmp_path: Path):
    """Its warm-up ran beside the measured requests and is not in the lists: a replay ran lighter and the fitted
    CPU term came out 39% high."""
    data = json.loads(FIXTURE.read_text())
    steady = tmp_path / "steady.json"
    steady.write_text(json.dumps(dict(data, num_warmups=16, warmup_mode="steady")))
    with pytest.raises(ConfigError, match="steady warm-up of 16"):
        read_bench(steady)
    drained = tmp_path / "drained.json"
    drained.write_text(json.dumps(dict(data, num_warmups=16, warmup_mode="drain")))
    read_bench(drained)


def test_bench_refusals(tmp_path: Path):
    data = json.loads(FIXTURE.read_text())
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({k: v for k, v in data.items() if k != "itls"}))
    with pytest.raises(ConfigError, match="itls"):
        read_bench(bad)
    few = dict(data, **{k: data[k][:5] for k in ("input_lens", "output_lens", "ttfts", "itls", "errors")})
    bad.write_text(json.dumps(few))
    with pytest.raises(ConfigError, match="the fit needs"):
        read_bench(bad)
    with pytest.raises(ConfigError, match="pass --model llama-2-7b"):
        calibrate_bench(read_bench(FIXTURE), BENCH_CONFIG.replace(replica__model="mistral-7b"), "vllm-v1")


def test_a_bench_of_a_model_outside_the_catalog_is_fitted_as_the_given_model_and_said_so():
    run = read_bench(FIXTURE)
    assert check_bench_model(run, "llama-2-7b") is None  # the fixture's own model
    note = check_bench_model(replace(run, model_id="/models/my-finetune"), "llama-2-7b")
    assert note is not None and "/models/my-finetune" in note and "--model llama-2-7b" in note


# -- presets reproduce from the public data ---------------------------------------------------------------------
def test_splitwise_preset_refits_and_meets_the_acceptance_errors(shared_data: Path):
    from simulator.calibrate.engine_fit import fit_splitwise_preset, splitwise_iteration_table, splitwise_rows
    from simulator.calibrate.validation import splitwise_predictions, summarize_splitwise

    path = shared_data / "profiles" / "splitwise-sim" / "perf_model.csv"
    table = splitwise_iteration_table(splitwise_rows(path))
    refit = fit_splitwise_preset(path)  # the fit the preset's provenance names
    preset = ENGINES["vllm-2023-splitwise"]
    for term in ("cpu_iteration_s", "cpu_per_seq_s", "cpu_per_prefill_token_s", "prefill_excess_token_s"):
        assert getattr(refit, term) == pytest.approx(getattr(preset, term), rel=0.01), term
    s = summarize_splitwise(splitwise_predictions(table)[0]).set_index(["engine", "kind", "rows"])
    splitwise = s.loc[("vllm-2023-splitwise", "decode", "both GPUs")]
    assert splitwise.median_abs_error <= 0.10 and splitwise.p95_abs_error <= 0.25
    assert s.loc[("vllm-2023-splitwise", "prompt", "both GPUs")].median_abs_error <= 0.10
    assert s.loc[("calibrated-on-a100-80gb", "decode", "h100-sxm")].median_abs_error <= 0.15
    assert s.loc[("ideal", "decode", "both GPUs")].median_abs_error > 0.2  # what the engine model fixes


def test_vidur_preset_refits(shared_data: Path):
    from simulator.calibrate.engine_fit import fit_vidur_preset

    refit = fit_vidur_preset(shared_data / "profiles" / "vidur" / "legacy_2023" / "a100" / "cpu_overheads.csv")
    preset = ENGINES["sarathi-2023-vidur"]
    assert refit.cpu_per_seq_s == pytest.approx(preset.cpu_per_seq_s, rel=0.01)
    assert dict(refit.rpc_s) == pytest.approx(dict(preset.rpc_s), rel=0.01)


@pytest.mark.parametrize("name", list(ENGINES))
def test_decode_stretch_pricing_matches_the_scalar_path_bit_for_bit(name):
    cm = engine_model(name, tp=8)
    n, kv = 24, [300 + 7 * j for j in range(24)]
    kv_sum, kv_sq, kv_max = sum(kv), sum(k * k for k in kv), max(kv)
    stretch = cm.decode_stretch_times(n, kv_sum, kv_sq, kv_max, 40)
    scalar = [cm.iteration_time(BatchShape.decode_only(n, kv_sum + n * i, kv_sq + 2 * i * kv_sum + n * i * i, kv_max + i))
              for i in range(40)]
    assert stretch == scalar
    assert cm._vector_stretch(n, kv_sum, kv_sq, kv_max, 40) == scalar  # the vectorised path itself, not the fallback
    # The same n again (its KV-independent terms now cached) at other lengths, short and long.
    kv_sum, kv_sq, kv_max = kv_sum + 5000, kv_sq + 2 * 5000 * kv_sum // n + 9999, kv_max + 900
    for m in (3, 200):
        scalar = [cm.iteration_time(BatchShape.decode_only(n, kv_sum + n * i, kv_sq + 2 * i * kv_sum + n * i * i, kv_max + i))
                  for i in range(m)]
        assert cm._vector_stretch(n, kv_sum, kv_sq, kv_max, m) == scalar


def test_expert_parallelism_changes_the_collectives_the_engine_counts_only_under_attention_dp():
    """EP over a TP group keeps each MoE layer's TP all-reduce (every GPU holds the step's tokens; vLLM
    uses all-to-all kernels only at dp_size > 1). Under attention DP with EP the all-reduce becomes a
    dispatch and a combine all-to-all plus an all-gather (as the roofline prices it), three collectives
    instead of one; without EP an all-gather and a reduce-scatter. Mixtral-8x7B: 2 x 32 + 1 at TP."""
    from simulator.costmodel.engine_model import num_collectives

    ep1, ep8 = (ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=8, ep=ep) for ep in (1, 8))
    assert num_collectives(ep1) == num_collectives(ep8) == 2 * 32 + 1
    costs = [load_cost_model("roofline", r, "vllm-2023-splitwise") for r in (ep1, ep8)]
    assert costs[1].collective_s == pytest.approx(costs[0].collective_s)
    shape = BatchShape.decode_only(4, 4 * 1000, 4 * 1000**2, 1000)
    assert costs[1].kernels.breakdown(shape)["ep_all_to_all"] == 0.0
    dp_ep = ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=4, attention_dp=2, ep=8)
    assert num_collectives(dp_ep) == 2 * 32 + 1 + 2 * 32
    assert load_cost_model("roofline", dp_ep, "vllm-2023-splitwise").kernels.breakdown(shape)["ep_all_to_all"] > 0
    # a dense model is unaffected by an ep setting it cannot use
    assert num_collectives(ReplicaConfig("llama-2-70b", "h100-sxm", tp=8)) == 2 * 80 + 1
    # attention DP without EP: an all-gather and a reduce-scatter replace each MoE layer's all-reduce
    dp = ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=4, attention_dp=2)
    assert num_collectives(dp) == 2 * 32 + 1 + 32


def test_collective_clamp_is_what_the_kernels_charge_per_all_reduce():
    """An engine whose collectives beat the kernel model's latency is clamped at that latency, and
    'today''s roofline charges a per-GPU part on top of the fixed one: the clamp includes it."""
    from simulator.costmodel.engine_model import kernel_collective_latency_s

    today = RooflineCostModel(ReplicaConfig(model="llama-2-70b", gpu="h100-sxm", tp=8, roofline_calibration="today"))
    c = today.cal
    assert c.allreduce_gpu_latency_s > 0
    assert kernel_collective_latency_s(today) == pytest.approx(c.allreduce_latency_s + 6 * c.allreduce_gpu_latency_s)
    one_token = float(today.all_reduce(np.array([1.0]))[0])
    assert kernel_collective_latency_s(today) < one_token < kernel_collective_latency_s(today) * 1.1
    old = RooflineCostModel(ReplicaConfig(model="llama-2-70b", gpu="h100-sxm", tp=8, roofline_calibration="2023"))
    assert kernel_collective_latency_s(old) == old.cal.allreduce_latency_s  # the 2023 calibration: no per-GPU part


def test_engine_term_overrides_on_a_preset_name() -> None:
    """``--engine PRESET:term=value,...`` changes those terms of the preset and keeps the rest; bad terms,
    values and bases are one-line errors naming the engine."""
    from simulator.config.errors import ConfigError
    from simulator.config.run_config import RunConfig
    from simulator.costmodel.engine_model import ENGINES, load_engine

    e = load_engine("sglang-2026:handoff_s=0.02,cpu_iteration_s=0.001,overlap_cpu=true,prefill_floor_above_tokens=512")
    base = ENGINES["sglang-2026"]
    assert (e.handoff_s, e.cpu_iteration_s, e.overlap_cpu, e.prefill_floor_above_tokens) == (0.02, 0.001, True, 512)
    assert e.prefill_floor_per_layer_s == base.prefill_floor_per_layer_s and e.kernels == base.kernels
    assert RunConfig().replace(engine="vllm-2026:handoff_s=0").engine == "vllm-2026:handoff_s=0"
    for spec, needle in (("vllm-2026:nope=1", "not a term"), ("vllm-2026:handoff_s=x", "not a float"),
                         ("vllm-2026:handoff_s=-1", "engine.handoff_s"), ("vllm-2026:scheduler=vllm", "not a term"),
                         ("vllm-2026:handoff_s=0.1,handoff_s=0.2", "given twice")):
        with pytest.raises(ConfigError, match=needle):
            load_engine(spec)
    with pytest.raises(ConfigError, match="neither a preset"):
        RunConfig().replace(engine="nope:handoff_s=1")


def test_a_bench_files_failed_requests_are_said(tmp_path: Path):
    """calibrate-engine --bench left a bench file's failed requests out with no word on the terminal (only the
    artifact's report counted them)."""
    data = json.loads(FIXTURE.read_text())
    data["ttfts"][3], data["errors"][3] = None, "timeout"
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps(data))
    res = runner.invoke(app, ["calibrate-engine", "--bench", str(bench), "--model", "llama-2-7b",
                              "--out", str(tmp_path / "e.json")])
    assert res.exit_code == 0, res.output
    assert "1 failed request(s) of the bench file not used" in " ".join(res.output.split())


def test_async_overlap_under_pipeline_parallelism_follows_overlap_pipeline():
    # vLLM runs async scheduling with PP since vllm-project/vllm#32359 (vllm-v1 hides its CPU there too); an engine
    # without overlap_pipeline (vLLM before it) runs its PP steps synchronously.
    from simulator.costmodel.engine_model import ENGINES

    shape = BatchShape.from_requests(decodes=[600] * 8)
    older = ENGINES["vllm-v1"].with_terms(overlap_pipeline=False)
    for pp in (1, 2):
        replica = ReplicaConfig("llama-2-7b", "h100-sxm", pp=pp)
        on = load_cost_model("roofline", replica, engine="vllm-v1")
        before = load_cost_model("roofline", replica, engine=older)
        off = load_cost_model("roofline", replica, engine=ENGINES["vllm-v1"].with_terms(overlap_cpu=False))
        assert on.iteration_time(shape) < off.iteration_time(shape)
        assert (before.iteration_time(shape) == off.iteration_time(shape)) is (pp > 1)


def test_a_run_over_other_roofline_constants_than_its_presets_fit_says_so():
    res = CliRunner().invoke(app, ["run", "--engine", "vllm-2023-splitwise", "--num-requests", "4", "--no-progress"])
    assert res.exit_code == 0 and "fitted with --roofline-calibration 2023" in res.output
    res = CliRunner().invoke(app, ["run", "--engine", "vllm-2023-splitwise", "--roofline-calibration", "2023",
                                   "--num-requests", "4", "--no-progress"])
    assert res.exit_code == 0 and "--roofline-calibration 2023" not in res.output


def test_overrides_of_roofline_prices_and_launch_terms_take_effect_or_are_refused():
    # roofline_prices was listed as overridable but every value failed ("is not a str | None"); cuda_graphs=false
    # alone changed nothing (no preset has a per-kernel launch time).
    from simulator.costmodel.engine_model import load_engine

    assert load_engine("vllm-2026:roofline_prices=sglang").roofline_prices == "sglang"
    with pytest.raises(ConfigError, match="none of vllm, sglang, trtllm, all"):
        load_engine("vllm-2026:roofline_prices=foo")
    for text in ("cuda_graphs=false", "launch_per_kernel_s=4e-6"):
        with pytest.raises(ConfigError, match="would do nothing"):
            load_engine(f"vllm-2026:{text}")
    floor = load_engine("vllm-2026:cuda_graphs=false,launch_per_kernel_s=5e-5")  # above a decode step of 7 ms
    replica = ReplicaConfig("llama-3-8b", "h100-sxm")
    shape = BatchShape.from_requests(decodes=[500])
    assert (load_cost_model("roofline", replica, floor).iteration_time(shape)
            > load_cost_model("roofline", replica, "vllm-2026").iteration_time(shape))


def test_cpu_time_per_prompt_chunk_and_layer_charges_the_prompt_steps_only():
    chunky = replace(ENGINES["ideal"], overlap_cpu=False, cpu_per_prefill_seq_layer_s=0.1e-3)
    plain, cm = engine_model("ideal"), engine_model(chunky)
    layers = cm.replica.model_spec.num_layers
    two = BatchShape.from_requests([(256, 0), (128, 512)], [64, 64])  # two prompt chunks beside two decodes
    assert cm.iteration_time(two) == pytest.approx(plain.iteration_time(two) + 2 * layers * 0.1e-3)
    decodes = BatchShape.from_requests(decodes=[64] * 8)
    assert cm.iteration_time(decodes) == plain.iteration_time(decodes)
    parts = cm.breakdown(two)
    assert parts["engine_cpu_per_prefill"] == pytest.approx(2 * layers * 0.1e-3)
    shallow = engine_model(chunky, tp=1, model="llama-3.1-8b")  # 32 layers to llama-2-70b's 80: a chunk costs 32/80
    assert shallow.breakdown(two)["engine_cpu_per_prefill"] == pytest.approx(2 * 32 * 0.1e-3) and layers == 80
    assert sum(parts.values()) == pytest.approx(cm.iteration_time(two), rel=1e-9)


def test_the_time_per_prompt_chunk_is_charged_for_no_more_chunks_than_its_cap():
    """A fitted preset charges its time per prompt chunk and layer for at most the chunks a step of its rows held:
    512 short prompts in one step once cost 14x one prompt of their tokens under vllm-2026 (3.1 s of CPU on 8,192
    prompt tokens of Llama-3.1-8B). The cap is a field of the artifact, refused below 1."""
    capped = replace(ENGINES["ideal"], overlap_cpu=False, cpu_per_prefill_seq_layer_s=0.1e-3,
                     prefill_seq_layer_max_chunks=3)
    uncapped = replace(capped, prefill_seq_layer_max_chunks=None)
    cm, free = engine_model(capped), engine_model(uncapped)
    layers = cm.replica.model_spec.num_layers
    for n in (1, 3, 4, 40):
        shape = BatchShape.from_requests([(16, 0)] * n, [64, 64])
        assert cm.breakdown(shape)["engine_cpu_per_prefill"] == pytest.approx(min(n, 3) * layers * 0.1e-3)
        assert free.breakdown(shape)["engine_cpu_per_prefill"] == pytest.approx(n * layers * 0.1e-3)
        assert sum(cm.breakdown(shape).values()) == pytest.approx(cm.iteration_time(shape), rel=1e-9)
    assert EngineModel.from_dict(capped.to_dict()).prefill_seq_layer_max_chunks == 3
    with pytest.raises(ConfigError, match="prefill_seq_layer_max_chunks"):
        replace(capped, prefill_seq_layer_max_chunks=0)
    # today's vLLM preset: 512 prompts of 16 tokens cost no more CPU a step than 11 such prompts
    vllm = engine_model("vllm-2026", tp=1, model="llama-3.1-8b")
    many, few = BatchShape.from_requests([(16, 0)] * 512), BatchShape.from_requests([(16, 0)] * 11)
    assert vllm.breakdown(many)["engine_cpu_per_prefill"] == vllm.breakdown(few)["engine_cpu_per_prefill"] > 0


def test_an_artifact_written_before_the_per_layer_rename_still_loads():
    """Artifacts write every term: those written while the prompt-chunk term was per chunk hold it, at 0 unless a
    user set it. At 0 they load; a value set is refused with the conversion (it was per chunk, now per chunk and
    layer), and so is an override naming the old term."""
    data = ENGINES["sglang-2026"].to_dict()  # (a preset without the term: what such an artifact held)
    data["cpu_per_prefill_seq_s"] = data.pop("cpu_per_prefill_seq_layer_s")
    assert EngineModel.from_dict(data) == ENGINES["sglang-2026"]
    data["cpu_per_prefill_seq_s"] = 0.01
    with pytest.raises(ConfigError, match="divide it by the model's layers"):
        EngineModel.from_dict(data)
    with pytest.raises(ConfigError, match="give cpu_per_prefill_seq_layer_s=SECONDS"):
        parse_overrides("cpu_per_prefill_seq_s=0.01")


def test_a_table_of_one_tp_puts_its_floor_on_the_step_and_the_fit_turns_on_no_row_order():
    """A calibration audit: a tp-8 table's 2 ms a step landed on its 161 collectives (interchangeable with a
    constant at one TP), so the artifact lost it at other TPs and models; a reversed table gave other held-out
    figures; one step measured many times passed as many points and scored its held-out repeats against their twins;
    a fit that misses its held-out rows badly wrote its artifact without a word."""
    truth = replace(ENGINES["ideal"], name="truth", overlap_cpu=False, cpu_iteration_s=2e-3, cpu_per_seq_s=50e-6)
    table = simulated_table(truth, n=60).query("tp == 8").reset_index(drop=True)
    out = calibrate_table(table, "llama-2-7b", "a100-80gb", base="handset")
    assert out["engine"].cpu_iteration_s == pytest.approx(2e-3, rel=0.05)
    assert all(v == 0 for _, v in out["engine"].collective_extra_s)
    reversed_out = calibrate_table(table.iloc[::-1].reset_index(drop=True), "llama-2-7b", "a100-80gb", base="handset")
    assert reversed_out["report"] == out["report"] and reversed_out["engine"] == out["engine"]
    one_step = pd.concat([table.head(1)] * 12, ignore_index=True)
    with pytest.raises(ConfigError, match="only 1 distinct steps"):
        calibrate_table(one_step, "llama-2-7b", "a100-80gb", base="handset")


def test_a_fit_that_misses_its_held_out_rows_says_so(tmp_path: Path):
    from simulator.cli.engine import calibrate_engine_command

    table = simulated_table(ENGINES["ideal"], n=24)
    table["measured_s"] = table["measured_s"] * np.where(np.arange(len(table)) % 2, 0.5, 3.0)  # no engine's terms
    path = tmp_path / "table.csv"
    table.to_csv(path, index=False)
    config = RunConfig().replace(replica__model="llama-2-7b", replica__gpu="a100-80gb")
    result = calibrate_engine_command(config, tmp_path / "out.json", table=path, write=False)
    assert any(w.startswith("held-out median_ape") and "above 25%" in w for w in result["report"]["warnings"])


def test_a_run_says_when_its_engine_artifact_was_fitted_on_another_model_gpu_or_cost_model(tmp_path: Path):
    """An artifact records the model, GPU and kernel cost model its terms were fitted on; run over others, it was
    used without a word (fitted over a CPU profile's learned model and run over the roofline: TPOT 133 ms against
    426; a calibration audit). The run's title says so, as it says a preset's scheduler and kernels."""
    artifact = tmp_path / "fitted.json"
    save_engine_artifact(replace(ENGINES["ideal"], name="fitted", cpu_iteration_s=1e-3), artifact,
                         {"model": "llama-2-7b", "gpu": "a100-80gb", "cost_model": "learned.json"})

    def title(*args: str) -> str:
        res = CliRunner().invoke(app, ["run", "--engine", str(artifact), "--num-requests", "4", "--no-progress", *args])
        assert res.exit_code == 0, res.output
        return " ".join(res.output.split())

    plain = title("--model", "llama-2-7b", "--gpu", "a100-80gb")
    assert "was fitted with --cost-model learned.json" in plain and "--model" not in plain.split("fitted with")[1][:60]
    other = title("--model", "llama-2-13b", "--gpu", "h100-sxm")
    assert "--cost-model learned.json and --model llama-2-7b and --gpu a100-80gb" in other
