"""The roofline's "today" calibration: the fit recovers known constants, its forward model is the
runtime roofline's, the selector validates and round-trips, and 2023 prices stay as they were."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from simulator.calibrate import roofline_from_tables as R
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, WorkloadConfig
from simulator.costmodel.base import BatchShape
from simulator.costmodel.calibration import DEFAULT, TODAY, calibration_for
from simulator.costmodel.roofline import RooflineCostModel

TRUE = {**R.INITIAL, **R.ELEMENTWISE, "gemm_compute_eff": 0.63, "gemm_half_tokens": 70.0, "gemm_memory_eff": 0.81,
        "kernel_floor_s": 4.5e-6, "attn_prefill_compute_eff": 0.52, "attn_prefill_half_keys": 40.0, "attn_floor_s": 9e-6,
        "mla_compute_eff": 0.3,
        "attn_decode_memory_eff": 0.77, "attn_decode_per_seq_s": 3e-7, "allreduce_bus_eff": 0.62,
        "allreduce_latency_s": 7e-6, "expert_compute_eff": 0.35, "expert_half_tokens": 30.0, "expert_memory_eff": 0.7,
        "expert_router_overhead_s": 2e-5, "gemm_fp8_compute_eff": 0.45, "gemm_fp8_half_tokens": 150.0,
        "gemm_fp8_memory_eff": 0.7, "gemm_fp8_floor_s": 8e-6, "expert_permute_s": 2e-11}


def _grid(**axes: list) -> dict[str, np.ndarray]:
    mesh = np.meshgrid(*[np.asarray(v, dtype=np.float64) for v in axes.values()], indexing="ij")
    return {k: m.ravel() for k, m in zip(axes, mesh, strict=True)}


def _synthetic(constants: dict[str, float]) -> list[R.Group]:
    """Tables of H100 shapes whose latencies are the roofline's under ``constants``, with 1% seeded noise."""
    rng = np.random.default_rng(1)
    pow2 = [2 ** i for i in range(0, 15)]
    keys = {
        "gemm": _grid(m=pow2, n=[1024, 4096, 14336], k=[1024, 4096, 8192]),
        "attn_prefill": _grid(batch_size=[1, 4, 16], isl=[16, 64, 256, 1024, 4096], num_heads=[32],
                              num_key_value_heads=[8], head_dim=[128]),
        "attn_decode": _grid(batch_size=[1, 8, 64, 256], isl=[64, 512, 4096, 16384], step=[0], num_heads=[32],
                             num_key_value_heads=[8], head_dim=[128]),
        "mla_prefill": _grid(batch_size=[1, 4, 16], isl=[16, 64, 256, 1024, 4096], num_heads=[16, 128]),
        "mla_decode": _grid(batch_size=[1, 8, 64, 256], isl=[64, 512, 4096, 16384], step=[0], num_heads=[16, 128]),
        "allreduce": _grid(message_size=[2 ** i for i in range(10, 27)], num_gpus=[2, 4, 8]),
        "moe": _grid(num_tokens=pow2, hidden_size=[4096], inter_size=[14336], topk=[2], num_experts=[8],
                     moe_tp_size=[1, 2], moe_ep_size=[1, 4]),
    }
    groups = []
    for family, k in [*keys.items(), ("gemm", keys["gemm"])]:
        dtype = "fp8" if any(g.family == "gemm" for g in groups) and family == "gemm" else "bfloat16"
        terms = R.terms_for("h100_sxm", family, dtype, k)
        truth = R.predict(family, terms, constants) * np.exp(rng.normal(0.0, 0.01, len(k[next(iter(k))])))
        groups.append(R.Group("h100_sxm", "synthetic", family, dtype, "-", k, truth, terms))
    return groups


def test_fit_recovers_constants_from_synthetic_tables():
    fitted = R.fit(_synthetic(TRUE))
    for name in ("gemm_compute_eff", "gemm_memory_eff", "attn_prefill_compute_eff", "attn_decode_memory_eff",
                 "mla_compute_eff", "allreduce_bus_eff", "expert_memory_eff", "expert_compute_eff",
                 "gemm_fp8_compute_eff", "gemm_fp8_memory_eff"):
        assert fitted[name] == pytest.approx(TRUE[name], rel=0.03), name
    for name in ("gemm_half_tokens", "kernel_floor_s", "attn_floor_s", "allreduce_latency_s", "attn_decode_per_seq_s",
                 "expert_half_tokens", "expert_router_overhead_s", "gemm_fp8_half_tokens", "gemm_fp8_floor_s",
                 "expert_permute_s"):
        assert fitted[name] == pytest.approx(TRUE[name], rel=0.1), name
    # The prefill ramp is the least identified (1% noise moves it ~15%).
    assert fitted["attn_prefill_half_keys"] == pytest.approx(TRUE["attn_prefill_half_keys"], rel=0.3)
    # And the recovered constants price the tables as the true ones do.
    for g in _synthetic(TRUE):
        err = np.abs(R.predict(g.family, g.terms, fitted) / g.measured_s - 1.0)
        assert np.median(err) < 0.04, g.family


def _mla_prices_as_the_forward_model(cal, c, b: np.ndarray, s: np.ndarray) -> RooflineCostModel:  # noqa: ANN001
    """DeepSeek-V3 TP8 on H100 under ``cal``: MLA decode and prefill priced as the fit's forward model
    (constants ``c``) prices the same batches; returns the model."""
    mla = RooflineCostModel(ReplicaConfig(model="deepseek-v3", gpu="h100-sxm", tp=8), cal, table_tokens=1)
    k_mla = {"batch_size": b, "isl": s, "step": np.zeros(3), "num_heads": np.full(3, 16.0)}
    assert R.predict("mla_decode", R.terms_for("h100_sxm", "mla_decode", "bfloat16", k_mla), c) == pytest.approx(
        [mla._attention_decode(bb * ss, int(bb)) for bb, ss in zip(b, s, strict=True)], rel=1e-12)
    assert R.predict("mla_prefill", R.terms_for("h100_sxm", "mla_prefill", "bfloat16", k_mla), c) == pytest.approx(
        [mla._attention_prefill(bb * ss * (ss + 1) / 2, bb * ss, int(bb * ss), bb) for bb, ss in zip(b, s, strict=True)],
        rel=1e-12)
    return mla


@pytest.mark.parametrize("overlap", [False, True])
def test_fit_chooses_the_decode_form_the_tables_were_made_with(overlap: bool):
    """Decode attention is fitted in both forms (work items summed with the KV reads, or overlapping
    them) and the lower loss kept: tables made with one form give back that form and its prices."""
    truth = {**TRUE, "attn_decode_overlap": overlap, "attn_decode_per_kv_head_s": 2e-7, "attn_decode_floor_s": 9e-6}
    decode = [g for g in _synthetic(truth) if g.family == "attn_decode"]
    fitted = R.fit(decode)
    assert fitted["attn_decode_overlap"] is overlap
    for g in decode:
        assert np.median(np.abs(R.predict(g.family, g.terms, fitted) / g.measured_s - 1.0)) < 0.02
    other = {**fitted, "attn_decode_overlap": not overlap}  # the forms differ on these tables
    assert np.median(np.abs(R.predict("attn_decode", decode[0].terms, other) / decode[0].measured_s - 1.0)) > 0.03


def test_forward_model_is_the_runtime_roofline():
    cal = replace(DEFAULT, **{k: TRUE[k] for k in R.WRITTEN})
    rf = RooflineCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm"), cal, table_tokens=1)
    c = R.constants_of(cal)
    m = np.array([1.0, 7, 64, 300, 4096])
    k = {"m": m, "n": np.full(5, 4096.0), "k": np.full(5, 14336.0)}
    assert R.predict("gemm", R.terms_for("h100_sxm", "gemm", "bfloat16", k), c) == pytest.approx(rf.gemm(m, 14336, 4096),
                                                                                                    rel=1e-12)
    b, s = np.array([1.0, 8, 64]), np.array([100.0, 2000, 30000])
    heads = {"num_heads": np.full(3, 32.0), "num_key_value_heads": np.full(3, 8.0), "head_dim": np.full(3, 128.0)}
    dec = R.predict("attn_decode", R.terms_for("h100_sxm", "attn_decode", "bfloat16",
                                               {"batch_size": b, "isl": s, "step": np.zeros(3), **heads}), c)
    assert dec == pytest.approx([rf._attention_decode(bb * ss, int(bb)) for bb, ss in zip(b, s, strict=True)], rel=1e-12)
    pre = R.predict("attn_prefill", R.terms_for("h100_sxm", "attn_prefill", "bfloat16",
                                                {"batch_size": b, "isl": s, **heads}), c)
    assert pre == pytest.approx([rf._attention_prefill(bb * ss * (ss + 1) / 2, bb * ss, int(bb * ss), bb)
                                 for bb, ss in zip(b, s, strict=True)], rel=1e-12)
    rf4 = RooflineCostModel(ReplicaConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4), cal, table_tokens=1)
    msg = np.array([8192.0 * 16, 8192.0 * 1024])
    ar = R.predict("allreduce", R.terms_for("h100_sxm", "allreduce", "bfloat16",
                                            {"message_size": msg, "num_gpus": np.full(2, 4.0)}), c)
    assert ar == pytest.approx(rf4.all_reduce(msg / 8192), rel=1e-12)
    _mla_prices_as_the_forward_model(cal, c, b, s)
    from simulator.costmodel.moe import moe_token_ops

    moe = RooflineCostModel(ReplicaConfig(model="mixtral-8x7b", gpu="h100-sxm", tp=2, ep=2), cal, table_tokens=1)
    tok = np.array([1.0, 16, 512, 8192])
    k_moe = {"num_tokens": tok, "hidden_size": np.full(4, 4096.0), "inter_size": np.full(4, 14336.0),
             "topk": np.full(4, 2.0), "num_experts": np.full(4, 8.0), "moe_tp_size": np.ones(4), "moe_ep_size": np.full(4, 2.0)}
    experts = R.predict("moe", R.terms_for("h100_sxm", "moe", "bfloat16", k_moe), c) - c["expert_router_overhead_s"]
    ops = moe_token_ops(moe, tok)  # the tables time the gated activation inside the fused op: the fit prices it too
    assert experts == pytest.approx(ops["moe_experts"] + ops["moe_act"], rel=1e-12)
    # A low-precision class's own GEMM curve (gemm_formats), as the runtime picks it for --dtype fp8.
    cal8 = replace(cal, gemm_formats=(("fp8", 0.45, 150.0, 0.7, 8e-6, 3e-13),))
    rf8 = RooflineCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", dtype="fp8"), cal8, table_tokens=1)
    assert rf8.gemm_constants == (0.45, 150.0, 0.7, 8e-6, 3e-13) and rf.gemm_constants == (0.63, 70.0, 0.81, 4.5e-6, 0.0)
    # fp8-block weights take the fp8 curve where a calibration has none of its own (LANE_FALLBACK).
    assert replace(cal8).gemm_constants("fp8-block") == cal8.gemm_constants("fp8")
    g8 = R.predict("gemm", R.terms_for("h100_sxm", "gemm", "fp8", k), R.constants_of(cal8))
    assert g8 == pytest.approx(rf8.gemm(m, 14336, 4096), rel=1e-12)


def test_selector_validates_and_round_trips():
    rep = ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", roofline_calibration="today")
    cfg = RunConfig(replica=rep)
    back = RunConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert back == cfg and back.replica.roofline_calibration == "today"
    assert ReplicaConfig(roofline_calibration=2023).roofline_calibration == "2023"  # a JSON number is the year
    assert ReplicaConfig().roofline_calibration == "today"  # the default
    with pytest.raises(ConfigError, match="roofline_calibration"):
        ReplicaConfig(roofline_calibration="2024")
    from simulator.config.options import RUN_OPTIONS

    assert RUN_OPTIONS["roofline_calibration"][0] == "replica__roofline_calibration"


@pytest.mark.skipif(not TODAY, reason="no 'today' calibration written yet")
def test_today_calibration_prices_runs_and_keeps_2023_for_unmeasured_gpus():
    rf = RooflineCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", roofline_calibration="today"))
    assert rf.cal == calibration_for("h100-sxm", "today") != calibration_for("h100-sxm")
    assert rf.cal.cpu_overhead_s == calibration_for("h100-sxm").cpu_overhead_s  # CPU terms stay 2023's
    assert "AIConfigurator" in rf.cal.source
    # A GPU of no measured generation keeps its 2023 constants, and the header says so.
    from simulator.costmodel.calibration import describe, today_generation

    mi = RooflineCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="mi300x", roofline_calibration="today"))
    assert today_generation("mi300x") is None and mi.cal == calibration_for("mi300x", "2023")
    assert "no measured generation for mi300x" in describe("today", "mi300x")
    assert describe("today", "h100-sxm", engine="vllm-2026") == "today (hopper, vllm's kernels)"
    assert describe("2023", "h100-sxm") == "2023"


def _summary(**replica: object) -> dict:
    from simulator.report.metrics import summarize
    from simulator.simulation import simulate

    cfg = RunConfig(replica=ReplicaConfig(model="mixtral-8x7b", gpu="h100-sxm", tp=2, ep=2, **replica),
                    workload=WorkloadConfig(num_requests=40, qps=4.0), seed=3)
    return summarize(simulate(cfg))


@pytest.mark.skipif(not TODAY, reason="no 'today' calibration written yet")
def test_today_is_the_default_and_2023_moves_prices():
    default = _summary()
    assert repr(_summary(roofline_calibration="today")) == repr(default)  # bit for bit
    assert _summary(roofline_calibration="2023")["tpot_s_p50"] != default["tpot_s_p50"]


@pytest.mark.skipif(not TODAY, reason="no 'today' calibration written yet")
def test_today_runs_the_same_with_and_without_event_skipping():
    """The prefill ramp has no plain-float chunk form: skipping falls back to the generic path, same answer."""
    from simulator.config.run_config import SchedulerConfig
    from simulator.report.metrics import summarize
    from simulator.simulation import simulate

    def run(fast: bool) -> dict:
        cfg = RunConfig(replica=ReplicaConfig(model="llama-3.1-8b", gpu="b200", roofline_calibration="today"),
                        scheduler=SchedulerConfig(name="sarathi", chunk_size=512),
                        workload=WorkloadConfig(num_requests=40, qps=6.0), seed=5, fast_forward=fast)
        return summarize(simulate(cfg))

    assert repr(run(True)) == repr(run(False))


# -- per-backend constants and dtype lanes ------------------------------------------------------------------
@pytest.mark.skipif(not TODAY, reason="no 'today' calibration written yet")
def test_today_uses_the_fitted_constants_of_the_runs_backend_and_lane():
    """``--roofline-calibration today`` prices with the written fit: --kernels' backend, else the engine
    preset's, else the pooled one; a MoE model's experts with its weight format's lane."""
    from simulator.costmodel import load_cost_model
    from simulator.costmodel.calibration import GENERATION, POOLED, roofline_backend

    fits = TODAY[GENERATION["h100-sxm"]]
    assert {POOLED, "vllm", "sglang", "trtllm"} <= set(fits)
    rep = ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", roofline_calibration="today")
    assert roofline_backend("roofline", "vllm-v1") == "vllm" and roofline_backend("sglang", "vllm-v1") == "sglang"
    assert roofline_backend("roofline", "vllm-2023-splitwise") == "vllm"
    assert roofline_backend("roofline", "ideal") == roofline_backend() == POOLED
    for engine, backend in ((None, POOLED), ("vllm-v1", "vllm"), ("sglang-2026", "sglang"), ("trtllm-2026", "trtllm")):
        cal = RooflineCostModel(rep, engine=engine).cal
        for name in R.WRITTEN:
            assert getattr(cal, name) == fits[backend][name], (engine, name)
        assert cal.gemm_formats == fits[backend]["gemm_formats"]
    # The run's own path: load_cost_model hands the engine preset to the roofline.
    assert load_cost_model("roofline", rep, "sglang-2026").kernels.cal.attn_floor_s == fits["sglang"]["attn_floor_s"]
    # A table-priced run's roofline (the ops without rows) takes --kernels' backend.
    assert RooflineCostModel(replace(rep, kernels="trtllm")).cal.gemm_compute_eff == fits["trtllm"]["gemm_compute_eff"]
    # fp8-block weights: its own GEMM lane; MoE experts: the lane's expert constants.
    fp8 = RooflineCostModel(ReplicaConfig(model="mixtral-8x7b", gpu="h100-sxm", tp=2, dtype="fp8-block",
                                          roofline_calibration="today"), engine="vllm-v1")
    lanes = {lane: curve for lane, *curve in fits["vllm"]["expert_formats"]}
    gemm_lanes = {lane: tuple(curve) for lane, *curve in fits["vllm"]["gemm_formats"]}
    assert fp8.gemm_constants == gemm_lanes["fp8_block"]
    assert [fp8.cal.expert_compute_eff, fp8.cal.expert_half_tokens, fp8.cal.expert_memory_eff,
            fp8.cal.expert_router_overhead_s, fp8.cal.expert_permute_s] == lanes["fp8_block"]
    # The 2023 calibration is untouched by either.
    assert RooflineCostModel(replace(rep, roofline_calibration="2023"), engine="vllm-v1").cal == calibration_for("h100-sxm")


def test_prefill_per_head_term_is_the_fits_and_zero_leaves_2023_prices():
    cal = replace(DEFAULT, **{**{k: TRUE[k] for k in R.WRITTEN if k in TRUE}, "attn_prefill_per_head_s": 5e-8})
    rf = RooflineCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm"), cal, table_tokens=1)
    b, s = np.array([1.0, 64, 256]), np.array([16.0, 16, 2000])
    heads = {"num_heads": np.full(3, 32.0), "num_key_value_heads": np.full(3, 8.0), "head_dim": np.full(3, 128.0)}
    c = {**R.constants_of(cal)}
    pre = R.predict("attn_prefill", R.terms_for("h100_sxm", "attn_prefill", "bfloat16", {"batch_size": b, "isl": s, **heads}), c)
    shapes = [BatchShape.from_requests(prefills=[(int(ss), 0)] * int(bb)) for bb, ss in zip(b, s, strict=True)]
    assert pre == pytest.approx([rf.attention_prefill(x) for x in shapes], rel=1e-12)
    # A prompt's successive chunks in plain floats carry the per-sequence term too (event skipping's form).
    assert rf.chunk_terms_ok and rf.prefill_attention_list(16, 0, 3) == [
        rf.attention_prefill(BatchShape.from_requests(prefills=[(16, p)])) for p in (0, 16, 32)]
    # 256 one-chunk prompts of 16 tokens cost 256 x 32 heads x 50 ns more than without the term.
    rf0 = RooflineCostModel(rf.replica, replace(cal, attn_prefill_per_head_s=0.0), table_tokens=1)
    assert rf.attention_prefill(shapes[1]) - rf0.attention_prefill(shapes[1]) == pytest.approx(64 * 32 * 5e-8)


def test_decode_and_mla_terms_are_the_fits_fold_into_closed_forms_and_zero_leaves_2023_prices():
    """GQA decode's per-(sequence, KV head) and per-(sequence, head) costs and own floor fold into the
    per-sequence constant and floor of decode_attention_terms (event skipping's closed form); MLA's own
    prefill and decode constants price as the fit's forward model; without them (2023) nothing moves."""
    extra = {"attn_decode_per_kv_head_s": 4e-8, "attn_decode_per_head_s": 1e-9, "attn_decode_floor_s": 6e-6,
             "mla_up_compute_eff": 0.7, "mla_prefill_half_keys": 30.0, "mla_prefill_per_head_s": 2e-8,
             "mla_prefill_floor_s": 1.2e-5, "mla_decode_compute_eff": 0.35, "mla_decode_memory_eff": 0.8,
             "mla_decode_per_seq_s": 5e-7, "mla_decode_per_head_s": 3e-9, "mla_decode_floor_s": 9e-6}
    base = {k: TRUE[k] for k in R.WRITTEN if k in TRUE and k not in extra}
    cal = replace(DEFAULT, **base, **extra)
    rf = RooflineCostModel(ReplicaConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4), cal, table_tokens=1)
    assert rf.decode_seq_s == pytest.approx(TRUE["attn_decode_per_seq_s"] + 2 * 4e-8 + 16 * 1e-9, rel=1e-12)
    kvb, per_token, bw, per_seq, floor, overlap = rf.decode_attention_terms(8)
    assert not overlap  # summed: the form these constants were given in
    for kv in (100, 5000, 123457):
        assert (kv * kvb + per_token) / bw + per_seq + floor == rf._attention_decode(kv, 8)
    c = R.constants_of(cal)
    b, s = np.array([1.0, 8, 64]), np.array([100.0, 2000, 30000])
    heads = {"num_heads": np.full(3, 16.0), "num_key_value_heads": np.full(3, 2.0), "head_dim": np.full(3, 128.0)}
    dec = R.predict("attn_decode", R.terms_for("h100_sxm", "attn_decode", "bfloat16",
                                               {"batch_size": b, "isl": s, "step": np.zeros(3), **heads}), c)
    assert dec == pytest.approx([rf._attention_decode(bb * ss, int(bb)) for bb, ss in zip(b, s, strict=True)], rel=1e-12)
    mla = _mla_prices_as_the_forward_model(cal, c, b, s)
    # Each new term moves today's prices; without them (every 2023 calibration) the old forms price exactly.
    plain = replace(DEFAULT, **base)
    mla0 = RooflineCostModel(mla.replica, plain, table_tokens=1)
    assert mla0._attention_decode(64 * 2000, 64) != mla._attention_decode(64 * 2000, 64)
    assert mla0._attention_prefill(2e6, 2000, 2000, 1) != mla._attention_prefill(2e6, 2000, 2000, 1)
    for gpu, model, tp in (("a100-80gb", "llama-3.1-8b", 1), ("h100-sxm", "deepseek-v3", 8)):
        r23 = RooflineCostModel(ReplicaConfig(model=model, gpu=gpu, tp=tp), calibration_for(gpu, "2023"), table_tokens=1)
        c23 = r23.cal
        assert r23.decode_seq_s == c23.attn_decode_per_seq_s and r23.attn_decode_floor == c23.attn_floor
        assert c23.mla_up_compute_eff is None and c23.mla_decode_memory_eff is None and not c23.attn_decode_overlap


def test_fit_holds_its_heldout_error_on_a_fixed_sample(aic):  # noqa: ANN001
    """Regression guard: constants fitted to a seeded sample of H200's vLLM and SGLang tables price H100's
    (the other Hopper) within the errors measured when this was written; fails if the fit or forms regress."""
    fams = ("gemm", "attn_prefill", "attn_decode", "moe")
    train = [g for be in ("vllm", "sglang") for f in fams for g in R.load_groups("h200_sxm", be, f, aic, max_rows=150)]
    test = [g for be in ("vllm", "sglang") for f in fams for g in R.load_groups("h100_sxm", be, f, aic, max_rows=150)]
    fits = R.fit_backends(train)
    worst = {}
    for g in test:
        err = np.median(np.abs(R.predict(g.family, g.terms, fits[g.backend]) / g.measured_s - 1.0))
        worst[(g.family, g.dtype)] = max(worst.get((g.family, g.dtype), 0.0), float(err))
    # Worst backend's median error when written (gemm bf16 0.097, fp8-block 0.118, attention prefill 0.215 and
    # decode 0.147 since each is a stage of its own and decode chooses its form, MoE bf16 0.221), with a margin:
    # a fit or form that regresses by more fails here.
    limits = {("gemm", "bfloat16"): 0.12, ("gemm", "fp8_block"): 0.15, ("attn_prefill", "bfloat16"): 0.26,
              ("attn_decode", "bfloat16"): 0.18, ("moe", "bfloat16"): 0.27}
    for key, limit in limits.items():
        assert worst[key] < limit, (key, worst[key])


@pytest.mark.skipif(not TODAY, reason="no 'today' calibration written yet")
def test_written_constants_read_back_as_the_runtime_reads_them(tmp_path):
    """The fit writes data (JSON), not code: what it writes for a calibration loads back field for field,
    lanes as tuples."""
    from simulator.costmodel.calibration import POOLED, load_today

    written = TODAY["hopper"][POOLED]
    path = tmp_path / "today.json"
    R.write_calibration({"hopper": {POOLED: R.constants_of(replace(DEFAULT, **written))}}, path)
    back = load_today(path)["hopper"][POOLED]
    assert {k: v for k, v in back.items() if k != "source"} == {k: v for k, v in written.items() if k != "source"}
    assert isinstance(back["gemm_formats"], tuple) and all(isinstance(f, tuple) for f in back["gemm_formats"])
    assert load_today(tmp_path / "absent.json") == {}
    # a fit of some generations (--generation) keeps the others' entries and the generations' order
    R.write_calibration({"ada": {POOLED: R.constants_of(replace(DEFAULT, **written))}}, path)
    both = load_today(path)
    assert list(both) == [g for g in R.GENERATIONS if g in ("hopper", "ada")]
    assert both["hopper"][POOLED] == back


def test_overlapped_decode_is_the_larger_of_read_and_work_items_in_every_form():
    """With ``attn_decode_overlap`` a decode kernel costs max(KV read, n * per-sequence cost) + floor:
    the scalar path, the stretch terms, the vector path, a verify without math and the fit's forward
    model agree; the read-bound and the item-bound sides each show; summed is never less."""
    extra = {"attn_decode_per_kv_head_s": 4e-8, "attn_decode_per_head_s": 1e-9, "attn_decode_floor_s": 6e-6}
    base = {k: TRUE[k] for k in R.WRITTEN if k in TRUE and k not in extra}
    summed = replace(DEFAULT, **base, **extra)
    cal = replace(summed, attn_decode_overlap=True)
    replica = ReplicaConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4)
    rf, rf_sum = (RooflineCostModel(replica, c, table_tokens=1) for c in (cal, summed))
    kvb, per_token, bw, per_seq, floor, overlap = rf.decode_attention_terms(8)
    assert overlap and per_seq == 8 * rf.decode_seq_s
    kvs = np.array([8, 100, 5000, 123457, 2_000_000], dtype=np.int64)
    scalar = [rf._attention_decode(int(kv), 8) for kv in kvs]
    assert scalar == [max((int(kv) * kvb + per_token) / bw, per_seq) + floor for kv in kvs]
    assert rf.attention_decode_vector(8, kvs, kvs.astype(np.float64) ** 2, kvs).tolist() == scalar
    assert scalar[0] == per_seq + floor and scalar[-1] > per_seq + floor  # item-bound short, read-bound long
    assert all(a < b for a, b in zip(scalar, (rf_sum._attention_decode(int(kv), 8) for kv in kvs), strict=True))
    assert rf._attention_verify(5000.0, 8, 0.0, 8) == rf._attention_decode(5000, 8)  # one query each, no math
    c = R.constants_of(cal)
    assert c["attn_decode_overlap"] is True
    b, s = np.array([1.0, 8, 64]), np.array([100.0, 2000, 30000])
    heads = {"num_heads": np.full(3, 16.0), "num_key_value_heads": np.full(3, 2.0), "head_dim": np.full(3, 128.0)}
    dec = R.predict("attn_decode", R.terms_for("h100_sxm", "attn_decode", "bfloat16",
                                               {"batch_size": b, "isl": s, "step": np.zeros(3), **heads}), c)
    assert dec == pytest.approx([rf._attention_decode(bb * ss, int(bb)) for bb, ss in zip(b, s, strict=True)], rel=1e-12)
    assert R.constants_entry({**c, **{k: 1.0 for k in R.WRITTEN if c.get(k) is None}}, "x")["attn_decode_overlap"] is True


@pytest.mark.skipif(not TODAY, reason="no 'today' calibration written yet")
@pytest.mark.parametrize(("gpu", "engine"), [("b200", "vllm-2026"), ("h100-sxm", "sglang-2026"), ("h100-sxm", "vllm-2026")])
def test_decode_stretches_keep_their_closed_form_in_either_decode_form(gpu: str, engine: str):
    """Event skipping's closed forms price every step as the scalar path does, on the read-bound and the
    item-bound side of an overlapped decode and under the sum: no stretch falls back (a disagreement would
    send the instance to step-by-step pricing for good, silently slower)."""
    from simulator.costmodel import load_cost_model

    replica = ReplicaConfig(model="llama-3.1-8b", gpu=gpu, roofline_calibration="today")
    model = load_cost_model("roofline", replica, engine)
    overlap = model.kernels.decode_overlap
    assert overlap == (TODAY[{"b200": "blackwell", "h100-sxm": "hopper"}[gpu]][engine.split("-")[0]]["attn_decode_overlap"])
    for n, kv0, m in ((64, 64 * 3, 8), (64, 64 * 3, 200), (4, 4 * 30_000, 8), (4, 4 * 30_000, 200)):
        kv_sq0 = n * (kv0 // n) ** 2
        assert model._vector_stretch(n, kv0, kv_sq0, kv0 // n, m) is not None  # the closed form, not the generic path
        assert model._chunk_stretch(n, kv0, kv_sq0, kv0 // n, 256, 0, 6) is not None
        times = model.decode_stretch_times(n, kv0, kv_sq0, kv0 // n, m)
        for i in (0, m - 1):
            shape = BatchShape.decode_only(n, kv0 + n * i, kv_sq0 + 2 * i * kv0 + n * i * i, kv0 // n + i)
            assert times[i] == model.iteration_time(shape)
        chunked = model.chunk_stretch_times(n, kv0, kv_sq0, kv0 // n, 256, 0, 6)
        assert len(chunked) == 6
    assert model._stretch_ok


def test_moe_routings_relate_to_the_runtimes_by_a_fitted_ep_load():
    """The MoE tables' three routings: power_law_1.01 (the runtime's) owns the expert constants; balanced and
    power_law_1.2 rows load an EP rank ``ep ** -a`` / ``ep ** b`` times as much, fitted; rows without a routing
    price as the runtime's, and at EP 1 every routing's tokens are the rank's."""
    truth = {**TRUE, "expert_balanced_ep_exp": 0.15, "expert_skewed_ep_exp": 0.08}
    keys = _grid(num_tokens=[2 ** i for i in range(0, 15)], hidden_size=[4096], inter_size=[14336], topk=[2],
                 num_experts=[8], moe_tp_size=[1], moe_ep_size=[1, 2, 4, 8])
    n = len(keys["num_tokens"])
    groups, rng = [], np.random.default_rng(3)
    for routing in R.ROUTINGS:
        k = {**keys, "distribution": np.array([routing] * n, dtype=object)}
        terms = R.terms_for("h100_sxm", "moe", "bfloat16", k)
        truth_s = R.predict("moe", terms, truth) * np.exp(rng.normal(0.0, 0.01, n))
        groups.append(R.Group("h100_sxm", "synthetic", "moe", "bfloat16", "-", k, truth_s, terms))
    fitted = R.fit(groups)
    assert fitted["expert_balanced_ep_exp"] == pytest.approx(0.15, rel=0.1)
    assert fitted["expert_skewed_ep_exp"] == pytest.approx(0.08, rel=0.15)
    ref = R.terms_for("h100_sxm", "moe", "bfloat16", keys)  # no routing: the runtime's
    assert R.predict("moe", ref, truth) == pytest.approx(R.predict("moe", groups[1].terms, truth), rel=1e-12)
    ep1 = keys["moe_ep_size"] == 1
    big = ep1 & (keys["num_tokens"] >= 64)  # every expert touched: the routings differ only in an EP rank's load
    for g in (groups[0], groups[2]):
        assert R.predict("moe", g.terms, truth)[big] == pytest.approx(R.predict("moe", ref, truth)[big], rel=1e-6)
        assert not np.allclose(R.predict("moe", g.terms, truth)[~ep1], R.predict("moe", ref, truth)[~ep1])


def test_a_gpu_the_constants_were_not_fitted_on_moves_its_gemm_knee_with_its_ridge():
    """The H20 is a Hopper part with a sixth of the H100's FLOPs and more HBM bandwidth: priced by the H100/H200
    constants with their knee fixed in tokens, its batch-1 decode came out 1.6x slower than the H100's and slower
    again at FP8 (a new-user audit). Its knee now moves with its ridge point: a memory-bound decode is no slower
    than on the H100 and faster at FP8; the GPUs the constants were fitted on keep theirs."""
    from simulator.calibrate.roofline_from_tables import CATALOG_GPU, GENERATIONS
    from simulator.config.catalog import get_gpu
    from simulator.costmodel.calibration import FITTED_ON, ridge_knee_scale

    assert {g: tuple(CATALOG_GPU[s] for s in systems) for g, systems in GENERATIONS.items()} == FITTED_ON
    for names in FITTED_ON.values():
        assert all(ridge_knee_scale(get_gpu(n), "today") == 1.0 for n in names)
    assert ridge_knee_scale(get_gpu("h20"), "2023") == 1.0
    assert ridge_knee_scale(get_gpu("h20"), "today") < 0.2  # 148 TF / 4.0 TB/s against the H100's and H200's

    def decode_s(gpu: str, dtype: str = "bf16") -> float:
        replica = ReplicaConfig("llama-3.1-8b", gpu, dtype=dtype, roofline_calibration="today")
        return float(RooflineCostModel(replica).iteration_time(BatchShape.from_requests(decodes=[1])))

    assert decode_s("h200") < decode_s("h20") < decode_s("h100-sxm")  # 4.8 > 4.0 > 3.35 TB/s
    assert decode_s("h20", "fp8") < decode_s("h20")
    # a MoE's expert GEMMs move their knee too (Mixtral-8x7B TP2 at batch 1 was 20 ms on the H20, 8 on the H100)
    def moe_s(gpu: str) -> float:
        replica = ReplicaConfig("mixtral-8x7b", gpu, tp=2, roofline_calibration="today")
        return float(RooflineCostModel(replica).iteration_time(BatchShape.from_requests(decodes=[1])))

    assert moe_s("h200") < moe_s("h20") < moe_s("h100-sxm")
    # a pricer given its calibration outright takes the scale it is given (simulate fidelity's 'roofline today')
    replica = ReplicaConfig("llama-3.1-8b", "h20", roofline_calibration="today")
    given = RooflineCostModel(replica, calibration_for("h20", "today"), table_tokens=1,
                              ridge_scale=ridge_knee_scale(get_gpu("h20"), "today"))
    assert given.ridge_scale == RooflineCostModel(replica).ridge_scale < 0.2
    assert RooflineCostModel(replica, calibration_for("h20", "today"), table_tokens=1).ridge_scale == 1.0
