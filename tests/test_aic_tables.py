"""The AIConfigurator table model (simulator.costmodel.aic): reading, interpolation, pricing.

Data-dependent tests skip where ../shared/data/profiles/aiconfigurator is absent.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel.aic.interp import Grid2D, isotonic, loglog, loglog_scalar
from simulator.costmodel.base import BatchShape


def _model(aic, model="llama-3.1-8b", gpu="h100-sxm", backend="vllm", **kw):  # noqa: ANN001, ANN202
    from simulator.costmodel.aic.model import TableCostModel

    return TableCostModel(ReplicaConfig(model=model, gpu=gpu, **kw), backend, root=aic, quiet=True)


# -- interpolation (no data needed) ------------------------------------------------------------------------------
def test_loglog_is_exact_at_grid_points_and_a_power_law_between() -> None:
    xg = np.array([1.0, 4.0, 16.0, 64.0])
    yg = np.array([3.0, 5.0, 20.0, 80.0])
    assert np.array_equal(loglog(xg, yg, xg), yg)
    # between 4 and 16 the law is y = 5 * (x / 4) ** log_4(4): at x = 8, 10
    assert loglog(xg, yg, np.array([8.0]))[0] == pytest.approx(10.0, rel=1e-12)
    lx, ly = np.log(xg).tolist(), np.log(yg).tolist()
    for x in (1.0, 2.0, 8.0, 40.0, 64.0):
        assert loglog_scalar(lx, ly, yg.tolist(), x) == pytest.approx(float(loglog(xg, yg, np.array([x]))[0]), rel=1e-12)


def test_isotonic_keeps_ordered_values_and_pools_dips() -> None:
    y = np.array([1.0, 2.0, 8.0, 2.0, 9.0])
    out = isotonic(y)
    assert np.all(np.diff(out) >= 0) and out[0] == 1.0 and out[-1] == 9.0
    assert out[2] == out[3] == pytest.approx(4.0)  # geometric mean of the dip and its violator
    ordered = np.array([0.5, 0.5, 3.0])
    assert np.array_equal(isotonic(ordered), ordered)


def test_grid_fills_holes_from_the_roofline_and_flags_them() -> None:
    roof = lambda a, b: a * np.asarray(b, dtype=float)  # noqa: E731 - linear in both
    g = Grid2D([1.0, 2.0], [(np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 4.0])),
                            (np.array([1.0, 2.0]), np.array([2.0, 4.0]))], roof)
    assert g.t[1, 2] == pytest.approx(8.0)  # 4.0 * roof(2, 4) / roof(2, 2)
    value, extrapolated = g.at(2.0, 4.0)
    assert value == pytest.approx(8.0) and extrapolated
    value, extrapolated = g.at(1.0, 2.0)
    assert value == 2.0 and not extrapolated


def test_streamed_bytes_count_a_gemms_weights_and_a_decodes_kv_reads() -> None:
    from simulator.costmodel.aic import tables as T

    gemm = T.streamed_bytes("gemm", "fp8", {"m": np.array([1, 64]), "n": np.array([4096, 4096]), "k": np.array([1024, 1024])})
    assert gemm.tolist() == [4096 * 1024 * 1.0] * 2  # the weights: a step's activations may be in L2, its weights not
    decode = T.streamed_bytes("generation_attention", "bfloat16", {
        "batch_size": np.array([2, 2, 2]), "isl": np.array([1000, 1000, 1000]), "step": np.array([24, 24, 24]),
        "num_key_value_heads": np.array([8, 8, 8]), "head_dim": np.array([128, 128, 128]),
        "kv_cache_dtype": np.array(["bfloat16", "fp8", "bfloat16"], dtype=object), "window_size": np.array([0, 0, 128])})
    # K and V of every sequence's 1,024 tokens (a 128-token window reads 128), at 2 bytes (FP8 KV: 1)
    assert decode.tolist() == [2 * 1024 * 2 * 2 * 8 * 128, 2 * 1024 * 2 * 1 * 8 * 128, 2 * 128 * 2 * 2 * 8 * 128]
    assert T.streamed_bytes("gemm", "no-such-format", {"m": np.array([1]), "n": np.array([8]), "k": np.array([8])}) is None
    assert T.streamed_bytes("moe", "bfloat16", {}) is None


# -- the database --------------------------------------------------------------------------------------------------
def test_tables_found_with_version_and_source(aic) -> None:  # noqa: ANN001
    from simulator.costmodel.aic import tables as T

    ref = T.find_table("b200_sxm", "trtllm", "moe", aic)
    assert ref.versions[0] == "1.3.0rc23" and "1.3.0rc20" in ref.versions  # reuse.yaml donor joins
    assert T.pick_source(T.find_table("h100_sxm", "vllm", "gemm", aic), "bfloat16") == "torch.nn.functional.linear"
    assert T.pick_source(T.find_table("h100_sxm", "vllm", "custom_allreduce", aic), "bfloat16") == "vLLM_custom_graph"
    assert "vllm 0.24.0" in T.describe("h100-sxm", "vllm", aic) and "h100_sxm" in T.describe("h100-sxm", "vllm", aic)


def test_unknown_gpu_or_backend_is_one_config_error(aic) -> None:  # noqa: ANN001
    from simulator.costmodel.aic.model import TableCostModel

    with pytest.raises(ConfigError, match="no AIConfigurator tables for GPU"):
        TableCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="a40"), "vllm", root=aic)
    with pytest.raises(ConfigError, match="unknown kernel tables"):
        TableCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm"), "tensorrt", root=aic)
    with pytest.raises(ConfigError, match="not found"):
        TableCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm"), "vllm", root=aic / "nowhere")


def test_a_gpu_whose_sibling_was_measured_is_refused_in_one_line(aic) -> None:  # noqa: ANN001
    """a100_sxm is the 80 GB card: its tables (and its memory bandwidth, a third above the 40 GB's) would price an
    A100-40GB run too fast, silently; the run says so before anything is priced."""
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--kernels", "vllm",
                                   "--num-requests", "5", "--no-progress"])
    assert isinstance(res.exception, ConfigError) and "\n" not in str(res.exception)
    assert str(res.exception).startswith("kernels:") and "--gpu a100-80gb" in str(res.exception)
    assert _model(aic, gpu="a100-80gb").system == "a100_sxm"


def test_a_table_gap_is_one_line_and_the_roofline_prices_that_op(aic) -> None:  # noqa: ANN001
    m = _model(aic, model="gpt-oss-120b", gpu="b200", backend="vllm", tp=2)
    assert any("generation_attention" in n and "head dim 64" in n for n in m.notes)
    assert all("\n" not in n for n in m.notes)
    assert "attn_decode" in m.roofline_ops
    shape = BatchShape.from_requests(decodes=[1000] * 8)
    assert m.attention_decode(shape) > 0  # priced (by the roofline), not failed


def test_a_gap_prints_one_note_line_once(aic, capsys) -> None:  # noqa: ANN001
    from simulator.costmodel.aic import model as M

    M._printed.clear()
    for _ in range(2):
        M.TableCostModel(ReplicaConfig(model="deepseek-v3", gpu="h100-sxm", tp=8, dtype="fp8"), "vllm", root=aic)
    err = capsys.readouterr().err.splitlines()
    mla = [line for line in err if "generation_mla" in line]
    assert len(mla) == 1 and mla[0].startswith("note: vllm tables of h100_sxm have no generation_mla table")
    assert not any("Traceback" in line for line in err)


# -- pricing -------------------------------------------------------------------------------------------------------
def test_gemm_reproduces_the_measurement_at_grid_points(aic) -> None:  # noqa: ANN001
    from simulator.costmodel.aic import tables as T

    m = _model(aic)
    ref = T.find_table("h100_sxm", "vllm", "gemm", aic)
    d = T.read_table(ref, ("m", "n", "k", "latency"), (("gemm_dtype", "==", "bfloat16"), ("n", "==", 6144),
                                                       ("k", "==", 4096)))
    order = np.argsort(d["m"])
    ms, lat = d["m"][order].astype(float), d["latency"][order] * 1e-3
    envelope = isotonic(lat)  # the model keeps latency weakly increasing in m
    got = m.gemm(ms, 4096, 6144)
    assert np.array_equal(got[envelope == lat], lat[envelope == lat])  # exact where the data is in order
    assert np.allclose(got, envelope, rtol=1e-12, atol=0)
    assert np.median(np.abs(envelope / lat - 1)) < 0.02  # tiling dips move the curve little


def test_decode_attention_reproduces_the_measurement_at_grid_points(aic) -> None:  # noqa: ANN001
    from simulator.costmodel.aic import tables as T

    m = _model(aic)
    ref = T.find_table("h100_sxm", "vllm", "generation_attention", aic)
    d = T.read_table(ref, ("batch_size", "isl", "step", "window_size", "latency"),
                     (("num_heads", "==", 32), ("num_key_value_heads", "==", 8), ("head_dim", "==", 128),
                      ("kv_cache_dtype", "==", "bfloat16"), ("kernel_source", "==", m.decode_source)))
    keep = d["window_size"] == 0
    for b in (1, 16, 128):
        sel = keep & (d["batch_size"] == b)
        s = (d["isl"] + d["step"])[sel]
        lat = d["latency"][sel] * 1e-3
        o = np.argsort(s)
        s, lat = s[o], isotonic(lat[o])
        for kv, want in zip(s.tolist(), lat.tolist(), strict=True):
            got = m.attention_decode(BatchShape.from_requests(decodes=[kv] * b))
            assert got == pytest.approx(want, rel=1e-9)


def test_prices_grow_with_batch_and_context(aic) -> None:  # noqa: ANN001
    for backend in ("vllm", "sglang", "trtllm"):
        m = _model(aic, model="llama-3.1-70b", tp=4, backend=backend)
        assert np.all(np.diff(np.asarray(m._table)) >= 0)
        prev = 0.0
        for n in (1, 2, 3, 8, 31, 64, 200, 1024):
            t = m.iteration_time(BatchShape.from_requests(decodes=[1500] * n))
            assert t >= prev
            prev = t
        prev = 0.0
        for kv in (10, 100, 1000, 5000, 30000, 200000):
            t = m.attention_decode(BatchShape.from_requests(decodes=[kv] * 16))
            assert t >= prev
            prev = t
        prev = 0.0
        for chunk in (16, 128, 512, 2048, 8192, 40000):
            t = m.attention_prefill(BatchShape.from_requests(prefills=[(chunk, 0)]))
            assert t >= prev
            prev = t


def test_extrapolation_past_the_grid_is_counted_and_continuous(aic) -> None:  # noqa: ANN001
    m = _model(aic)
    inside = BatchShape.from_requests(decodes=[1000] * 16)
    m.iteration_time(inside)
    assert m.extrapolations_by_op == {"lm_head": 1}  # its TP1 LM head only (128,256 columns: no table's shape)
    edge = m.attention_decode(BatchShape.from_requests(decodes=[32768] * 16))
    past = m.attention_decode(BatchShape.from_requests(decodes=[32769] * 16))
    assert m.extrapolations_by_op.get("attn_decode", 0) >= 1
    assert past == pytest.approx(edge, rel=1e-3) and past >= edge


def test_gemm_shapes_past_the_measured_widths_are_counted_at_the_same_price(aic) -> None:  # noqa: ANN001
    """The GEMM tables measure n and k up to 65,536: a TP1 Llama-3 LM head (128,256 columns) and a TP1 Llama-3.1-405B
    gate/up (106,496) are a measured shape scaled by the roofline, an extrapolation in every iteration that prices
    them, counted alike step by step and by a stretch; a TP2 LM head (64,128 columns) was measured."""
    from simulator.costmodel import CostModel

    tp1, tp2 = _model(aic), _model(aic, tp=2)
    chunk = BatchShape()
    chunk.add_prefill(512, 0, False)  # a chunk that does not end its prompt: no logits, no LM head
    tp1.iteration_time(chunk)
    assert tp1.num_extrapolations == 0
    decodes = BatchShape.from_requests(decodes=[1000] * 16)
    tp1.iteration_time(decodes)
    tp2.iteration_time(decodes)
    assert tp1.extrapolations_by_op == {"lm_head": 1} and tp2.num_extrapolations == 0
    wide = _model(aic, model="llama-3.1-405b", gpu="h200", dtype="fp8")
    for n, kv0, steps in ((8, 3000, 40), (8, 32700, 200)):  # the second crosses the measured KV lengths
        kv = [kv0 + 7 * i for i in range(n)]
        args = (n, sum(kv), sum(x * x for x in kv), max(kv), steps)
        wide.num_extrapolations, wide.extrapolations_by_op = 0, {}
        fast = wide.decode_stretch_times(*args)
        counted = list(wide.extrapolations_by_op.items())
        wide.num_extrapolations, wide.extrapolations_by_op = 0, {}
        assert fast == CostModel.decode_stretch_times(wide, *args)
        assert counted == list(wide.extrapolations_by_op.items())  # the same counts, first counted in the same order
        assert dict(counted)["token_ops"] == dict(counted)["lm_head"] == steps


def test_vector_decode_stretch_matches_the_scalar_path(aic) -> None:  # noqa: ANN001
    m = _model(aic, model="qwen3-32b", tp=2)
    n, kv = 24, [700 + 13 * i for i in range(24)]
    times = m.decode_stretch_times(n, sum(kv), sum(k * k for k in kv), max(kv), 300)
    for i in (0, 1, 150, 299):
        shape = BatchShape.from_requests(decodes=[k + i for k in kv])
        assert times[i] == m.iteration_time(shape)


def test_moe_and_mla_models_load(aic) -> None:  # noqa: ANN001
    moe = _model(aic, model="qwen3-30b-a3b", tp=2, ep=2)
    assert moe._moe is not None and "moe_experts" not in moe.roofline_ops
    ops = moe.breakdown(BatchShape.from_requests(decodes=[500] * 32))
    assert ops["moe_experts"] > 0 and ops["moe_act"] == 0.0  # the fused kernel includes the activation
    mla = _model(aic, model="deepseek-v3", tp=8, backend="sglang", dtype="fp8")
    assert mla._decode_grid is not None and "attn_decode" not in mla.roofline_ops
    assert mla.iteration_time(BatchShape.from_requests(decodes=[2000] * 16)) > 0


def test_moe_imbalance_scales_the_measured_experts_as_the_roofline_does(aic) -> None:  # noqa: ANN001
    """--moe-imbalance under the tables: the default routing's rows times the roofline's price with the
    imbalance over its price without. It once only switched to the power_law_1.2 rows past 1, so 1.5, 4 and 16
    priced alike (and below 1: those rows touch fewer experts at decode sizes)."""
    from simulator.costmodel.moe import moe_token_ops

    shape = BatchShape.from_requests(decodes=[500] * 32)
    layers = {}
    for imb in (1.0, 1.5, 4.0, 16.0):
        m = _model(aic, model="qwen3-30b-a3b", moe_imbalance=imb)
        layers[imb] = m.breakdown(shape)["moe_experts"]
        if imb == 1.0:
            even = m
    assert layers[1.0] < layers[1.5] < layers[4.0] < layers[16.0]
    skew = _model(aic, model="qwen3-30b-a3b", moe_imbalance=4.0)
    t = np.array([32.0])
    rf_ratio = moe_token_ops(skew.rf, t)["moe_experts"][0] / moe_token_ops(even.rf, t)["moe_experts"][0]
    assert layers[4.0] / layers[1.0] == pytest.approx(rf_ratio, rel=1e-9)


def test_trtllm_nvfp4_experts_take_the_min_latency_kernel_up_to_128_tokens(aic) -> None:  # noqa: ANN001
    """TensorRT-LLM's NVFP4 fused MoE switches to its min-latency kernel at small batches (AIConfigurator prices
    it so); the tables' CUTLASS rows, the most numerous, price every other step. Other backends are unchanged."""
    from simulator.costmodel.aic.interp import loglog
    from simulator.costmodel.aic.model import MOE_LOW_LATENCY_SOURCE, MOE_LOW_LATENCY_TOKENS

    m = _model(aic, model="deepseek-v3", gpu="b200", tp=8, backend="trtllm", dtype="nvfp4", kv_cache_dtype="fp8")
    assert m._moe_low is not None and MOE_LOW_LATENCY_SOURCE in m.moe_source
    layers = m.model.num_moe_layers

    def per_layer(n: int) -> float:
        return m.breakdown(BatchShape.from_requests(decodes=[1000] * n))["moe_experts"] / layers

    for n, curve in ((64, m._moe_low), (MOE_LOW_LATENCY_TOKENS, m._moe_low), (256, m._moe)):
        assert per_layer(n) == pytest.approx(float(loglog(*curve, np.array([float(n)]))[0]), rel=1e-9)
    assert per_layer(64) < float(loglog(*m._moe, np.array([64.0]))[0])  # faster than CUTLASS there
    fp8 = _model(aic, model="deepseek-v3", gpu="b200", tp=8, backend="trtllm", dtype="fp8")
    assert fp8._moe_low is None  # the min-latency kernel is NVFP4's only
    # B300's tables lack the kernel: its CUTLASS rows scaled by the min-latency / CUTLASS ratio B200 measured
    b300 = _model(aic, model="deepseek-v3", gpu="b300", tp=8, backend="trtllm", dtype="nvfp4", kv_cache_dtype="fp8")
    assert "b200_sxm's measured ratio" in b300.moe_source and any("b200_sxm" in n for n in b300.notes)
    x = np.array([64.0])
    expected = loglog(*b300._moe, x) * loglog(*m._moe_low, x) / loglog(*m._moe, x)
    assert float(loglog(*b300._moe_low, x)[0]) == pytest.approx(float(expected[0]), rel=1e-9)


def test_vllm_int4_experts_are_priced_by_the_marlin_rows_that_agree_across_collectors(aic) -> None:  # noqa: ANN001
    """vLLM's older int4 lane (vllm_marlin_int4_moe, its 0.18/0.19 tables) times the Marlin MoE kernel 2-3x slower
    than SGLang's Marlin rows of the same GPU and shape; the system's SGLang rows price it (a note says so). vLLM's
    newer lane (H100's 0.24 tables) keeps its own rows, which agree with SGLang's."""
    b200 = dict(model="kimi-k2.5", gpu="b200", tp=8, dtype="int4")
    vllm, sglang = _model(aic, **b200), _model(aic, backend="sglang", **b200)
    assert "sglang_marlin_moe" in vllm.moe_source and any("sglang_marlin_moe" in n for n in vllm.notes)
    assert np.array_equal(vllm._moe[0], sglang._moe[0]) and np.array_equal(vllm._moe[1], sglang._moe[1])
    shape = BatchShape.from_requests(decodes=[1500] * 16)
    assert vllm.breakdown(shape)["moe_experts"] == pytest.approx(sglang.breakdown(shape)["moe_experts"], rel=1e-12)
    h100 = _model(aic, model="kimi-k2.5", gpu="h100-sxm", tp=8, dtype="int4")
    assert h100.moe_source.startswith("vllm_") and not any("sglang_marlin_moe" in n for n in h100.notes)
    bf16 = _model(aic, model="kimi-k2.5", gpu="b200", tp=8)  # other dtypes keep vLLM's own rows
    assert bf16.moe_source.startswith("vllm_")


def test_vllm_block_fp8_gemms_are_priced_by_a_lane_that_runs_the_format_at_bf16_speed(aic) -> None:  # noqa: ANN001
    """vLLM's block-FP8 GEMM lane on H100/H200/GB200/GB300 runs 7-50x its own bf16 GEMM at decode sizes; those
    GPUs' SGLang block-FP8 rows price it (a note says so), and the roofline's fit reads the same rows. B200's
    own 0.19 lane, which runs the format within its bf16 GEMM's reach, keeps its rows."""
    for gpu in ("h100-sxm", "h200", "gb200"):
        vllm = _model(aic, model="deepseek-v3", gpu=gpu, tp=8, dtype="fp8-block")
        sglang = _model(aic, backend="sglang", model="deepseek-v3", gpu=gpu, tp=8, dtype="fp8-block")
        assert "(sglang " in vllm.gemm_source and any("fp8_block gemm priced by sglang" in n for n in vllm.notes)
        x = np.array([1.0, 64.0, 4096.0])
        assert np.allclose(vllm.gemm(x, 2048, 7168), sglang.gemm(x, 2048, 7168), rtol=1e-12, atol=0)
    b200 = _model(aic, model="deepseek-v3", gpu="b200", tp=8, dtype="fp8-block")
    assert "(sglang " not in b200.gemm_source and not any("priced by sglang" in n for n in b200.notes)
    bf16 = _model(aic, model="llama-3.1-8b", gpu="h100-sxm")
    assert bf16.gemm_source == "torch.nn.functional.linear"
    own, own_ms, donor, donor_ms, notes = _gemm_lane_point(aic, "h100_sxm", "vllm", "fp8_block", (64, 7168, 2048))
    assert own == "DeepGemmFp8BlockScaledMMKernel" and donor == "sglang" and any("priced by sglang" in n for n in notes)
    assert own_ms > 4 * donor_ms  # the lane the donor replaces


def _gemm_lane_point(aic, system, backend, dtype, mnk):  # noqa: ANN001, ANN202
    """(own source, its latency at (m, n, k), the donor's backend, the donor's latency there, the notes)."""
    from simulator.costmodel.aic import tables as T

    ref = T.find_table(system, backend, "gemm", aic)
    own, rows = T.read_source_rows(ref, dtype, ("m", "n", "k", "latency"))
    _, priced, read, notes = T.read_priced_rows(ref, dtype, ("m", "n", "k", "latency"), root=aic)

    def at(d):  # noqa: ANN001, ANN202
        return float(d["latency"][(d["m"] == mnk[0]) & (d["n"] == mnk[1]) & (d["k"] == mnk[2])][0])

    return own, at(rows), read.backend, at(priced), notes


def test_trtllm_fp8_and_nvfp4_gemms_are_priced_by_the_lane_that_runs_them_without_its_floor(aic) -> None:  # noqa: ANN001
    """TensorRT-LLM's per-tensor FP8 GEMM rows sit on a ~14 us floor on Hopper and datacenter Blackwell (its bf16
    and block-FP8 rows of the same GPU near 4-6 us); vLLM's FP8 rows of the same GPU price that lane, and its
    NVFP4 lane on Blackwell, with a note. Its block-FP8 lane, bf16, and the workstation GPUs keep their own rows."""
    x = np.array([1.0, 64.0, 4096.0])
    for gpu, dtype in (("h100-sxm", "fp8"), ("h200", "fp8"), ("b200", "fp8"), ("gb200", "fp8"), ("b200", "nvfp4")):
        trt = _model(aic, backend="trtllm", model="llama-3.1-70b", gpu=gpu, tp=8, dtype=dtype)
        vllm = _model(aic, model="llama-3.1-70b", gpu=gpu, tp=8, dtype=dtype)
        assert "(vllm " in trt.gemm_source and any(f"{dtype} gemm priced by vllm" in n for n in trt.notes)
        assert np.allclose(trt.gemm(x, 8192, 1280), vllm.gemm(x, 8192, 1280), rtol=1e-12, atol=0)
    own, own_ms, donor, donor_ms, notes = _gemm_lane_point(aic, "b200_sxm", "trtllm", "fp8", (4, 1024, 1024))
    assert own == "torch_flow" and donor == "vllm" and any("priced by vllm" in n for n in notes)
    assert own_ms > 2 * donor_ms  # the floor the donor removes
    for kw in (dict(gpu="b200", dtype="fp8-block"), dict(gpu="b200"), dict(gpu="l40s", tp=4, dtype="fp8")):
        kept = _model(aic, backend="trtllm", model="llama-3.1-70b", **{"tp": 8, **kw})
        assert "(vllm " not in kept.gemm_source and not any("gemm priced by vllm" in n for n in kept.notes)


def test_vllm_h100_fp8_experts_are_priced_by_a_lane_that_runs_fp8_below_bf16(aic) -> None:  # noqa: ANN001
    """vLLM's H100 FP8 MoE lane runs at 2.2x its own bf16 MoE rows, every other FP8 MoE lane below its bf16 one:
    TensorRT-LLM's CUTLASS rows of the same GPU price it (a note says so); H200's vLLM lane keeps its own rows."""
    shape = BatchShape.from_requests(decodes=[2000] * 32)
    h100 = dict(model="qwen3-235b-a22b", gpu="h100-sxm", tp=8, dtype="fp8")
    vllm, trt = _model(aic, **h100), _model(aic, backend="trtllm", **h100)
    assert "(trtllm " in vllm.moe_source and any("fp8 moe priced by trtllm" in n for n in vllm.notes)
    assert vllm.breakdown(shape)["moe_experts"] == pytest.approx(trt.breakdown(shape)["moe_experts"], rel=1e-12)
    bf16 = _model(aic, model="qwen3-235b-a22b", gpu="h100-sxm", tp=8)
    assert vllm.breakdown(shape)["moe_experts"] < bf16.breakdown(shape)["moe_experts"]  # FP8 below bf16 again
    h200 = _model(aic, model="qwen3-235b-a22b", gpu="h200", tp=8, dtype="fp8")
    assert "(trtllm " not in h200.moe_source and h200.moe_source.startswith("vllm")


def test_a_lane_donor_covers_its_kernel_and_fills_gaps_only_when_it_says_so() -> None:
    """No data needed: which lanes a donor covers, and which system its rows come from."""
    from simulator.costmodel.aic.tables import LaneDonor, TableRef

    ref = TableRef("b300_sxm", "sglang", "moe", (), ("0.5.10",))
    lane = LaneDonor("moe", "sglang", "sglang", "why", dtype="bfloat16", siblings=(("b300_sxm", "gb300"),))
    assert lane.covers(ref, "bfloat16", "sglang_fused_moe_triton") and not lane.covers(ref, "nvfp4", "x")
    assert not lane.covers(ref, "bfloat16", None)  # no rows of the shape: left to the roofline
    assert LaneDonor("moe", "sglang", "sglang", "why", fills_gaps=True).covers(ref, "bfloat16", None)
    assert not LaneDonor("moe", "sglang", "sglang", "why", source="k").covers(ref, "bfloat16", "other")
    assert not LaneDonor("moe", "sglang", "sglang", "why", systems=frozenset({"b200_sxm"})).covers(ref, "bfloat16", "k")
    assert lane.donor_system("b300_sxm") == "gb300" and lane.donor_system("h100_sxm") == "h100_sxm"
    assert not lane.covers(TableRef("h100_sxm", "sglang", "moe", (), ("0.5.14",)), "bfloat16", "k")  # no sibling there


def test_blackwell_moe_runs_flashinfers_trtllm_kernels_priced_from_the_same_die(aic) -> None:  # noqa: ANN001
    """SGLang's B200/B300 launch scripts run FlashInfer's TensorRT-LLM MoE, which only the GB200/GB300 tables timed:
    their rows price SGLang's bf16, block-FP8 and NVFP4 experts there (Qwen3.5's shape, absent from B200's table,
    included), and TensorRT-LLM's block-FP8 experts (its TRTLLM MoE backend) in place of its DeepGEMM rows; other
    GPUs, dtypes and backends keep their rows."""
    shape = BatchShape.from_requests(decodes=[2000] * 64)
    for gpu, sibling in (("b300", "gb300"), ("b200", "gb200")):
        for model, dtype in (("qwen3.5-397b-a17b", "bf16"), ("deepseek-v3", "fp8-block"), ("deepseek-v3", "nvfp4")):
            own = _model(aic, backend="sglang", model=model, gpu=gpu, tp=8, dtype=dtype)
            twin = _model(aic, backend="sglang", model=model, gpu=sibling, tp=8, dtype=dtype)
            assert own.moe_source == f"sglang_flashinfer_trtllm_moe ({sibling} sglang 0.5.14)", (gpu, model)
            assert twin.moe_source == "sglang_flashinfer_trtllm_moe" and "moe_experts" not in own.roofline_ops
            assert own.breakdown(shape)["moe_experts"] == pytest.approx(twin.breakdown(shape)["moe_experts"], rel=1e-12)
    trt = _model(aic, backend="trtllm", model="deepseek-v3", gpu="b200", tp=8, dtype="fp8-block")
    assert trt.moe_source == "sglang_flashinfer_trtllm_moe (gb200 sglang 0.5.14)"
    assert any("fp8_block moe priced by gb200 sglang" in n for n in trt.notes)
    assert _model(aic, backend="trtllm", model="deepseek-v3", gpu="gb200", tp=8, dtype="fp8-block").moe_source == "deepgemm"
    kept = _model(aic, backend="sglang", model="kimi-k2.5", gpu="b300", tp=8, dtype="int4")
    assert kept.moe_source == "sglang_marlin_moe"  # no launch script says otherwise
    assert _model(aic, backend="sglang", model="deepseek-v3", gpu="h100-sxm", tp=8, dtype="fp8-block").moe_source \
        == "sglang_fused_moe_triton"


def test_vllm_blackwell_experts_are_priced_by_the_flashinfer_kernels_todays_vllm_runs(aic) -> None:  # noqa: ANN001
    """vLLM's 0.19 B200/B300 MoE lanes timed its Triton experts; today's vLLM runs FlashInfer's TensorRT-LLM experts
    there where they take the shape, which its 0.24 collectors timed on GB200/GB300 (the same dies): those rows price
    bf16, FP8 and block-FP8 experts (DeepSeek-V3 at EP8: the lane they replace a median 1.24x their time at <= 256 tokens). Its NVFP4 lane (already
    FlashInfer's), other backends and Hopper keep their own rows."""
    from simulator.costmodel.aic import tables as T

    shape = BatchShape.from_requests(decodes=[2000] * 64)
    for gpu, sibling in (("b200", "gb200"), ("b300", "gb300")):
        for model, dtype, ep in (("qwen3-235b-a22b", "bf16", 8), ("qwen3-235b-a22b", "fp8", 1), ("deepseek-v3", "fp8-block", 1)):
            own = _model(aic, model=model, gpu=gpu, tp=8, ep=ep, dtype=dtype)
            twin = _model(aic, model=model, gpu=sibling, tp=8, ep=ep, dtype=dtype)
            assert "flashinfer_trtllm" in own.moe_source and own.moe_source.endswith(f"({sibling} vllm 0.24.0)"), own.moe_source
            assert any(f"moe priced by {sibling} vllm" in n for n in own.notes)
            # the run's header (describe) names the tables that lent rows
            assert own.describe().startswith(f"vllm 0.19.0 tables of {gpu}_sxm") and own.borrowed["moe"] == f"{sibling} vllm 0.24.0"
            assert f"; moe by {sibling} vllm 0.24.0's rows" in own.describe() and "moe by" not in twin.describe()
            assert own.breakdown(shape)["moe_experts"] == pytest.approx(twin.breakdown(shape)["moe_experts"], rel=1e-12)
    ref = T.find_table("b200_sxm", "vllm", "moe", aic)
    dsv3 = (("hidden_size", "==", 7168), ("inter_size", "==", 2048), ("topk", "==", 8), ("num_experts", "==", 256),
            ("moe_tp_size", "==", 1), ("moe_ep_size", "==", 8), ("distribution", "==", "power_law_1.01"))
    cols = ("num_tokens", "latency")
    own_src, own_rows = T.read_source_rows(ref, "fp8_block", cols, dsv3)
    src, rows, read, notes = T.read_priced_rows(ref, "fp8_block", cols, dsv3, aic)
    assert own_src == "vllm_fused_moe" and read.system == "gb200" and any("priced by gb200 vllm" in n for n in notes)
    common, i, j = np.intersect1d(own_rows["num_tokens"], rows["num_tokens"], return_indices=True)
    small = common <= 256
    assert small.sum() >= 4 and np.median(own_rows["latency"][i][small] / rows["latency"][j][small]) > 1.2
    # a split the donor's kernel does not take (Qwen3-235B's experts over 8 GPUs: 192 columns, not a multiple of 128)
    # falls back, as vLLM does, to the kernel the lane's own rows time
    narrow = _model(aic, model="qwen3-235b-a22b", gpu="b200", tp=8)
    assert narrow.moe_source == "vllm_fused_moe" and "moe_experts" not in narrow.roofline_ops
    assert any("bfloat16 MoE at moe_tp=8 x moe_ep=1 priced by its own vllm_fused_moe rows (the lane's donor has none "
               "there)" in n for n in narrow.notes)
    assert "moe_experts" in _model(aic, model="qwen3-235b-a22b", gpu="gb200", tp=8).roofline_ops  # no rows of its own
    assert "(gb200 " not in _model(aic, model="deepseek-v3", gpu="b200", tp=8, dtype="nvfp4").moe_source
    assert "(gb200 " not in _model(aic, backend="trtllm", model="qwen3-235b-a22b", gpu="b200", tp=8).moe_source
    assert "(" not in _model(aic, model="qwen3-235b-a22b", gpu="h200", tp=8).moe_source


def test_a_split_the_widest_kernel_was_not_timed_at_is_priced_by_the_kernel_that_was(aic) -> None:  # noqa: ANN001
    """vLLM's H100 tables time its block-FP8 experts as FlashInfer's CUTLASS kernel under EP (EP 2-128, the most rows)
    and as Triton's at EP 1 (TP 1 and 2): the collector times the kernel the engine picks at each layout. A run at
    EP 1 is priced by the Triton rows, not by the roofline; a run under EP keeps the CUTLASS rows."""
    shape = BatchShape.from_requests(decodes=[1000] * 32)
    single = _model(aic, model="qwen3-30b-a3b", dtype="fp8-block")
    assert single.moe_source == "vllm_fp8moe_triton_tritonexperts" and "moe_experts" not in single.roofline_ops
    assert any("fp8_block MoE at moe_tp=1 x moe_ep=1 priced by its own vllm_fp8moe_triton_tritonexperts rows (its "
               "vllm_fp8moe_flashinfer_cutlass_flashinferexperts rows, the kernel timed over the most shapes, have none "
               "there" in n for n in single.notes)
    assert single.breakdown(shape)["moe_experts"] > 0
    ep = _model(aic, model="qwen3-30b-a3b", dtype="fp8-block", tp=2, ep=2)
    assert ep.moe_source == "vllm_fp8moe_flashinfer_cutlass_flashinferexperts" and not any("have none" in n for n in ep.notes)
    # where no kernel of the lane was timed at the split, the roofline still prices it (and says so)
    assert "moe_experts" in _model(aic, model="qwen3-30b-a3b", dtype="fp8-block", tp=4).roofline_ops


def test_mxfp4_experts_take_mxfp8_activations_on_blackwell_datacenter_gpus(aic) -> None:  # noqa: ANN001
    """gpt-oss's MXFP4 experts on B200/GB200/B300/GB300 run FlashInfer's TensorRT-LLM MXFP4 x MXFP8 kernel (TensorRT-LLM's
    default MoE backend there, SGLang's default precision, vLLM as deployed); Hopper runs BF16 activations."""
    for gpu in ("b200", "gb200"):
        assert _model(aic, model="gpt-oss-120b", gpu=gpu, backend="trtllm", dtype="mxfp4").moe_dtype == "w4a8_mxfp4_mxfp8"
    assert _model(aic, model="gpt-oss-120b", gpu="h200", backend="trtllm", dtype="mxfp4").moe_dtype == "w4a16_mxfp4"
    # No vLLM collector timed that kernel at gpt-oss's expert shapes: SGLang's GB200/GB300 rows of it, the same dies
    for gpu, donor in (("b200", "gb200 sglang"), ("b300", "gb300 sglang"), ("gb200", "sglang")):
        vllm = _model(aic, model="gpt-oss-120b", gpu=gpu, backend="vllm", dtype="mxfp4")
        assert vllm.moe_dtype == "w4a8_mxfp4_mxfp8" and vllm.moe_source == f"sglang_flashinfer_trtllm_moe ({donor} 0.5.14)"
        assert vllm.rf.kernel_format == "mxfp4-w4a8"
    # ... filling gaps only: vLLM's own MXFP8 rows of other expert shapes stay its own
    from simulator.costmodel.aic import tables as T

    shape = (("hidden_size", "==", 4096), ("inter_size", "==", 2048), ("topk", "==", 6), ("num_experts", "==", 256))
    ref = T.find_table("gb200", "vllm", "moe", aic)
    src, _, read, notes = T.read_priced_rows(ref, "w4a8_mxfp4_mxfp8", ("num_tokens", "latency"), shape, aic)
    assert src.startswith("vllm_mxfp4moe_flashinfer_trtllm_mxfp4_mxfp8") and read is ref and notes == ()
    # vLLM's 0.19 B200 w4a16 lane timed another kernel than vLLM runs for gpt-oss (FlashInfer's TensorRT-LLM MXFP4 at
    # bf16 activations), whose rows its 0.24 collector took on GB200, the same die
    w4a16 = _model(aic, model="gpt-oss-120b", gpu="b200", backend="vllm", dtype="mxfp4-w4a16")
    assert w4a16.moe_source.endswith("flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic (gb200 vllm 0.24.0)")
    assert any("priced by gb200 vllm" in n for n in w4a16.notes) and w4a16.rf.kernel_format == "mxfp4-w4a16"
    b200 = _model(aic, model="gpt-oss-120b", gpu="b200", backend="trtllm", dtype="mxfp4")
    per_layer = b200.breakdown(BatchShape.from_requests(decodes=[1000] * 16))["moe_experts"] / b200.model.num_moe_layers
    assert 0.1e-3 < per_layer < 0.2e-3  # the w4a8 rows (0.15 ms at 16 tokens), not w4a16's (0.61 ms)
    assert b200.rf.kernel_format == "mxfp4-w4a8"
    # an explicit kernel a table lacks is priced by the roofline's lane of that kernel, and said (H100: w4a16 only)
    explicit = _model(aic, model="gpt-oss-120b", gpu="h100-sxm", backend="vllm", dtype="mxfp4-w4a8")
    assert explicit.rf.kernel_format == "mxfp4-w4a8" and explicit.moe_source is None
    assert any("no MoE rows" in n and "w4a8_mxfp4_mxfp8 (that shape has: w4a16_mxfp4)" in n for n in explicit.notes)


def test_sglang_hopper_gpt_oss_experts_are_priced_by_the_triton_kernels_rows_at_ep1(aic) -> None:  # noqa: ANN001
    """SGLang's GPT-OSS rule runs OpenAI's triton_kernels MXFP4 MoE on Hopper at ep_size 1 (and refuses it above), the
    kernel vLLM's H100 rows time; SGLang's own H100 rows (its Triton fused MoE, 2.9-3.1x those at moe_tp 1) price only
    its EP > 1 splits. Old code: gpt-oss-20b's experts at 32 decodes 13.9 ms a step against vLLM's 4.8."""
    from simulator.costmodel.aic import tables as T
    from simulator.costmodel.aic.tables import LaneDonor, TableRef

    shape = BatchShape.from_requests(decodes=[8192] * 32)
    for model, tp in (("gpt-oss-20b", 1), ("gpt-oss-120b", 2)):
        sglang = _model(aic, model=model, backend="sglang", tp=tp, dtype="mxfp4")
        vllm = _model(aic, model=model, backend="vllm", tp=tp, dtype="mxfp4")
        ours, theirs = sglang.breakdown(shape)["moe_experts"], vllm.breakdown(shape)["moe_experts"]
        assert ours == pytest.approx(theirs, rel=0.10), (model, ours, theirs)
        assert sglang.moe_source.endswith("oaitritonmxfp4expertsmonolithic (vllm 0.24.0)"), sglang.moe_source
        assert any("moe at moe_ep_size 1 priced by vllm 0.24.0" in n for n in sglang.notes)
    # at EP > 1 SGLang runs its Triton fused MoE: its own rows
    ep2 = _model(aic, model="gpt-oss-120b", backend="sglang", tp=2, ep=2, dtype="mxfp4")
    assert ep2.moe_source == "sglang_fused_moe_triton" and not any("priced by vllm" in n for n in ep2.notes)
    # fits and held-out errors read every split: the donor's rows at moe_ep 1, the lane's own elsewhere
    ref = T.find_table("h100_sxm", "sglang", "moe", aic)
    src, rows, read, _ = T.read_priced_rows(ref, "w4a16_mxfp4", ("moe_ep_size", "latency"), root=aic, warm="keep")
    own_src, own = T.read_source_rows(ref, "w4a16_mxfp4", ("moe_ep_size", "latency"))
    assert src.endswith("at moe_ep_size 1, sglang_fused_moe_triton elsewhere") and read.backend == "vllm"
    assert sorted(rows["latency"][rows["moe_ep_size"] > 1]) == sorted(own["latency"][own["moe_ep_size"] > 1])
    assert (rows["moe_ep_size"] == 1).sum() > 0
    # a lane's `where` against the split a caller prices
    lane = LaneDonor("moe", "sglang", "vllm", "why", where=(("moe_ep_size", 1),))
    h100 = TableRef("h100_sxm", "sglang", "moe", (), ("0.5.14",))
    assert lane.covers(h100, "w4a16_mxfp4", "k") and lane.covers(h100, "w4a16_mxfp4", "k", {"moe_ep_size": 1})
    assert not lane.covers(h100, "w4a16_mxfp4", "k", {"moe_tp_size": 1, "moe_ep_size": 2})


def test_four_bit_moe_checkpoints_price_attention_and_the_router_from_the_bf16_gemm_rows(aic) -> None:  # noqa: ANN001
    """An NVFP4 MoE checkpoint keeps its attention projections and router gate at 16 bits: the tables' bfloat16
    GEMM rows price them (as they price the bf16 checkpoint's), its NVFP4 rows the rest; a dense NVFP4 model's
    projections stay on the NVFP4 rows."""
    shape = BatchShape.from_requests(decodes=[1500] * 4)
    fp4 = _model(aic, model="deepseek-v3", gpu="b200", tp=8, backend="trtllm", dtype="nvfp4", kv_cache_dtype="fp8")
    bf16 = _model(aic, model="deepseek-v3", gpu="b200", tp=8, backend="trtllm", kv_cache_dtype="fp8")
    a, b = fp4.breakdown(shape), bf16.breakdown(shape)
    for op in ("qkv_proj", "attn_out_proj", "moe_router"):
        assert a[op] == pytest.approx(b[op], rel=1e-9), op
    t = np.array([4.0])
    assert fp4.gemm(t, 2048, 7168)[0] != pytest.approx(bf16.gemm(t, 2048, 7168)[0], rel=1e-3)  # the NVFP4 rows
    dense = _model(aic, model="llama-3.1-70b", gpu="b200", tp=2, backend="trtllm", dtype="nvfp4")
    assert dense.attn_gemm == dense.gemm
    # every quantized checkpoint's LM head stays at 16 bits (as the memory plan holds it): the bfloat16 rows
    dense_bf16 = _model(aic, model="llama-3.1-70b", gpu="b200", tp=2, backend="trtllm")
    n = np.array([1.0, 64.0, 2048.0])
    np.testing.assert_allclose(dense.lm_head_time(n), dense_bf16.lm_head_time(n), rtol=1e-12)
    np.testing.assert_allclose(fp4.lm_head_time(n), bf16.lm_head_time(n), rtol=1e-12)


def test_vllm_mla_on_blackwell_is_priced_by_the_kernel_it_runs(aic) -> None:  # noqa: ANN001
    """vLLM has no MLA core tables; on Blackwell its FlashInfer MLA backend runs TensorRT-LLM's kernels,
    so TensorRT-LLM's rows price it (said in a note); Hopper has no such donor and stays the roofline's."""
    shape = BatchShape.from_requests(decodes=[2000] * 16)
    vllm = _model(aic, model="deepseek-v3", gpu="b200", tp=8, backend="vllm", dtype="fp8")
    trt = _model(aic, model="deepseek-v3", gpu="b200", tp=8, backend="trtllm", dtype="fp8")
    assert "attn_decode" not in vllm.roofline_ops and "attn_prefill" not in vllm.roofline_ops
    assert any("generation_mla" in n and "trtllm's priced it" in n for n in vllm.notes)
    assert vllm.versions["mla"].startswith("trtllm ")
    assert vllm.attention_decode(shape) == pytest.approx(trt.attention_decode(shape), rel=1e-12)
    hopper = _model(aic, model="deepseek-v3", gpu="h100-sxm", tp=8, backend="vllm", dtype="fp8")
    assert "attn_decode" in hopper.roofline_ops


def test_sliding_window_layers_use_the_window_kernel_rows(aic) -> None:  # noqa: ANN001
    from simulator.costmodel import CostModel, load_cost_model

    m = _model(aic, model="gpt-oss-120b", tp=2)
    assert set(m._window_grids) == {"generation", "context"}  # 128-token window rows measured on H100
    full = _model(aic, model="llama-3.1-8b")  # same machinery, no window layers
    long_kv = BatchShape.from_requests(decodes=[30000] * 16)
    short_kv = BatchShape.from_requests(decodes=[300] * 16)
    # half the layers attend over 128 keys: the per-layer mean grows about half as fast with context
    growth = m.attention_decode(long_kv) / m.attention_decode(short_kv)
    assert 1.0 < growth < full.attention_decode(long_kv) / full.attention_decode(short_kv)
    cm = load_cost_model("roofline", ReplicaConfig(model="gpt-oss-120b", gpu="h100-sxm", tp=2, kernels="vllm"), "vllm-v1")
    kv = [500 + 3 * i for i in range(40)]
    for m_steps in (20, 120):
        args = (40, sum(kv), sum(x * x for x in kv), max(kv), m_steps)
        assert cm.decode_stretch_times(*args) == CostModel.decode_stretch_times(cm, *args)
    assert cm._stretch_ok


def test_heldout_error_of_a_small_family(aic) -> None:  # noqa: ANN001
    from simulator.calibrate.aic_heldout import heldout

    (h,) = heldout("h100_sxm", "vllm", "allreduce", root=aic)
    s = h.summary()
    assert s["points"] >= 40 and h.source == "vLLM_custom_graph"
    assert s["table_median_err"] <= 0.05
    assert s["table_median_err"] < s["roofline_median_err"]
    assert math.isfinite(s["table_p95_err"])


# -- runs ----------------------------------------------------------------------------------------------------------
def test_moe_kernel_names_the_tables_own_kernel_in_place_of_the_engines_default(aic) -> None:  # noqa: ANN001
    """--moe-kernel deepgemm (TensorRT-LLM's moe_config backend DEEPGEMM, which its high-throughput DeepSeek recipes
    run) prices TensorRT-LLM's block-FP8 experts on B200 by its own DeepGEMM rows, where the default prices the TRTLLM
    backend by the GB200 FlashInfer rows; naming the default's kernel changes nothing; a name the tables lack, or
    that fits several kernels, is one ConfigError naming the ones they have."""
    kw = dict(backend="trtllm", model="deepseek-v3", gpu="b200", tp=1, attention_dp=8, ep=8, dtype="fp8-block",
              kernels="trtllm")
    default, deepgemm = _model(aic, **kw), _model(aic, **kw, moe_kernel="DeepGEMM")
    assert default.moe_source == "sglang_flashinfer_trtllm_moe (gb200 sglang 0.5.14)"
    assert deepgemm.moe_source == "deepgemm (--moe-kernel deepgemm)" and deepgemm.replica.moe_kernel == "deepgemm"
    assert "moe kernel deepgemm (--moe-kernel)" in deepgemm.describe() and "--moe-kernel" not in default.describe()
    prompt = BatchShape.from_requests(prefills=[(8192, 0)])  # every rank's 8K tokens enter each MoE layer: 64K
    t_default, t_deepgemm = (m.breakdown(prompt)["moe_experts"] for m in (default, deepgemm))
    assert t_deepgemm < 0.5 * t_default  # DeepGEMM's grouped GEMM scales with EP; the FlashInfer rows barely do
    same = _model(aic, **kw, moe_kernel="flashinfer_trtllm")
    assert same.moe_source == default.moe_source and same.breakdown(prompt) == default.breakdown(prompt)
    with pytest.raises(ConfigError, match=r"replica\.moe_kernel.*no table of b200_sxm or gb200 times a MoE kernel 'cutlass'"
                                          r".*trtllm tables' \(deepgemm \(fp8_block\)"):
        _model(aic, **kw, moe_kernel="cutlass")
    with pytest.raises(ConfigError, match=r"replica\.moe_kernel.*several.*moe_torch_flow_cutlass, moe_torch_flow_min"):
        _model(aic, **{**kw, "dtype": "nvfp4"}, moe_kernel="moe_torch_flow")
    fp4 = _model(aic, **{**kw, "dtype": "nvfp4"}, moe_kernel="cutlass")
    assert fp4.moe_source == "moe_torch_flow_cutlass (--moe-kernel cutlass)"  # the whole way: no min-latency blend


def test_moe_kernel_another_backends_collector_timed_prices_it_with_a_note(aic) -> None:  # noqa: ANN001
    """A kernel the engines share that the backend's own collector did not time (SGLang's DeepEP experts run
    DeepGEMM's grouped GEMMs; only TensorRT-LLM's GB200 collector timed DeepGEMM there) is priced by the other
    backend's rows of the same GPU, the run's notes and tables line saying whose."""
    kw = dict(backend="sglang", model="deepseek-v3", gpu="gb200", tp=1, attention_dp=32, ep=32, dtype="fp8-block",
              kernels="sglang", num_nodes=8)
    default, deepgemm = _model(aic, **kw), _model(aic, **kw, moe_kernel="deepgemm")
    trt = _model(aic, **{**kw, "backend": "trtllm", "kernels": "trtllm"}, moe_kernel="deepgemm")
    assert default.moe_source == "sglang_flashinfer_trtllm_moe" and deepgemm.moe_source.startswith("deepgemm")
    assert "moe by trtllm" in deepgemm.describe() and any("priced by trtllm" in n for n in deepgemm.notes)
    decode = BatchShape.from_requests(decodes=[2000] * 192)  # 192 a rank x 32 ranks enter each MoE layer
    assert deepgemm.breakdown(decode)["moe_experts"] == pytest.approx(trt.breakdown(decode)["moe_experts"], rel=1e-12)
    assert deepgemm.breakdown(decode)["moe_experts"] < 0.5 * default.breakdown(decode)["moe_experts"]


def test_moe_kernel_timed_only_on_the_same_die_prices_from_its_sibling(aic) -> None:  # noqa: ANN001
    """SGLang's wide-EP NVFP4 decode workers on GB200 run FlashInfer's CuteDSL experts, which SGLang's collectors timed
    on B200 (the same die) and not on GB200: --moe-kernel cutedsl prices them by B200's rows, saying so, where the
    default's FlashInfer TensorRT-LLM rows price an EP32 decode's experts twice as slow."""
    kw = dict(backend="sglang", model="deepseek-v3", gpu="gb200", tp=1, attention_dp=32, ep=32, dtype="nvfp4",
              kernels="sglang", num_nodes=8)
    default, cutedsl = _model(aic, **kw), _model(aic, **kw, moe_kernel="cutedsl")
    b200 = _model(aic, **{**kw, "gpu": "b200", "num_nodes": 4}, moe_kernel="cutedsl")
    assert default.moe_source.startswith("sglang_flashinfer_trtllm_moe")
    assert cutedsl.moe_source == "sglang_flashinfer_cutedsl_moe (--moe-kernel cutedsl)"
    assert any("priced by b200_sxm sglang" in n and "the same die" in n for n in cutedsl.notes)
    assert "moe by b200_sxm sglang" in cutedsl.describe()
    decode = BatchShape.from_requests(decodes=[1500] * 256)  # 256 a rank x 32 ranks enter each MoE layer
    assert cutedsl.breakdown(decode)["moe_experts"] == pytest.approx(b200.breakdown(decode)["moe_experts"], rel=1e-12)
    assert cutedsl.breakdown(decode)["moe_experts"] < 0.6 * default.breakdown(decode)["moe_experts"]


def test_moe_kernel_is_refused_where_nothing_would_read_it() -> None:
    with pytest.raises(ConfigError, match=r"replica\.moe_kernel.*dense model"):
        ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", kernels="trtllm", moe_kernel="deepgemm")
    with pytest.raises(ConfigError, match=r"replica\.moe_kernel.*roofline prices from no table"):
        ReplicaConfig(model="deepseek-v3", gpu="b200", tp=8, moe_kernel="deepgemm")
    with pytest.raises(ConfigError, match=r"replica\.moe_kernel.*empty"):
        ReplicaConfig(model="deepseek-v3", gpu="b200", tp=8, kernels="trtllm", moe_kernel=" ")
    assert ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", moe_kernel="AUTO").moe_kernel == "auto"


def _run_config(kernels: str, fast_forward: bool = True, **replica):  # noqa: ANN003, ANN202
    from simulator.config.run_config import RunConfig, SchedulerConfig, WorkloadConfig

    return RunConfig(replica=ReplicaConfig(model=replica.pop("model", "llama-3.1-8b"), gpu=replica.pop("gpu", "h100-sxm"),
                                           kernels=kernels, **replica),
                     scheduler=SchedulerConfig(name="vllm-v1"), engine="vllm-v1", fast_forward=fast_forward,
                     workload=WorkloadConfig(name="sharegpt", qps=6.0, num_requests=120))


def test_kernels_field_is_validated() -> None:
    with pytest.raises(ConfigError, match="replica.kernels"):
        ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", kernels="tensorrt")


def test_table_priced_run_skips_stretches_with_the_same_results(aic) -> None:  # noqa: ANN001
    from simulator.costmodel import load_cost_model
    from simulator.costmodel.aic.model import TableCostModel
    from simulator.simulation import simulate

    cost = load_cost_model("roofline", _run_config("sglang", tp=2, model="qwen3-32b").replica, "vllm-v1")
    assert isinstance(cost.kernels, TableCostModel) and cost._kernels_learned is False  # the fast stretch path
    fast = simulate(_run_config("sglang", tp=2, model="qwen3-32b"))
    slow = simulate(_run_config("sglang", fast_forward=False, tp=2, model="qwen3-32b"))
    roof = simulate(_run_config("roofline", tp=2, model="qwen3-32b"))
    a = [(r.first_token_at, r.completed_at) for r in fast.requests]
    assert a == [(r.first_token_at, r.completed_at) for r in slow.requests]
    assert a != [(r.first_token_at, r.completed_at) for r in roof.requests]  # the tables priced it
    # every step with logits prices the 75,968-column TP2 LM head, wider than the tables measured: counted alike
    count = fast.extra["cost_model_extrapolations"]
    assert count == slow.extra["cost_model_extrapolations"] and count >= len(fast.requests)


def test_engine_stretches_over_tables_are_float_exact_and_counted_alike(aic) -> None:  # noqa: ANN001
    from simulator.costmodel import CostModel, load_cost_model

    replica = ReplicaConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4, kernels="vllm")
    for preset in ("vllm-v1", "vllm-2023-splitwise"):
        cm = load_cost_model("roofline", replica, preset)
        k = cm.kernels
        for n, kv0, m in ((8, 3000, 40), (8, 3000, 200), (64, 30000, 120), (300, 200, 60), (150, 5000, 90)):
            kv = [kv0 + 7 * i for i in range(n)]
            args = (n, sum(kv), sum(x * x for x in kv), max(kv), m)
            before = k.num_extrapolations
            fast = cm.decode_stretch_times(*args)
            counted = k.num_extrapolations - before
            slow = CostModel.decode_stretch_times(cm, *args)
            assert fast == slow
            assert counted == k.num_extrapolations - before - counted
        assert cm._stretch_ok and k.num_extrapolations > 0  # the fast path answered; long contexts were counted


def test_a_stretchs_extrapolations_are_counted_as_pricing_it_counts_them_without_its_times(aic, monkeypatch) -> None:  # noqa: ANN001
    """Event skipping counts the extrapolations of the iterations it applies after pricing more: where the
    stretch is priced in closed form and counted once (its checks against the scalar path over), the model
    counts it without pricing it again, the counters (per op, in order) as pricing leaves them."""
    from simulator.costmodel import load_cost_model

    cm = load_cost_model("roofline", ReplicaConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4, kernels="vllm"),
                         "vllm-v1")
    assert cm.fast_chunk_stretches
    priced_calls = []
    series_times = cm._series_times
    monkeypatch.setattr(cm, "_series_times", lambda *a: (priced_calls.append(1), series_times(*a))[1])
    for checks_left in (32, 0):  # the first stretches of an instance are checked (and priced again), then trusted
        cm._stretch_checks_left = checks_left
        # (a chunk of 32,768 tokens beside 600 decodes: token ops, prefill and decode attention past the tables)
        for n, kv0, c, m in ((8, 3000, 512, 40), (64, 30000, 512, 120), (150, 5000, 8192, 90), (600, 3000, 32768, 10)):
            kv = [kv0 + 7 * i for i in range(n)]
            decode = (n, sum(kv), sum(x * x for x in kv), max(kv), m)
            chunk = (*decode[:4], c, kv0, m)
            for price, count, args in ((cm.decode_stretch_times, cm.count_decode_stretch_times, decode),
                                       (cm.chunk_stretch_times, cm.count_chunk_stretch_times, chunk)):
                price(*args)  # as skipping prices a stretch before counting its applied iterations
                mark = cm.extrapolation_mark()
                price(*args)
                priced = cm.extrapolation_mark()
                cm.rollback_extrapolations(mark)
                priced_calls.clear()
                count(*args)
                assert cm.extrapolation_mark() == priced
                assert bool(priced_calls) == (checks_left > 0)
    assert {"token_ops", "attn_prefill", "attn_decode"} <= set(cm.kernels.extrapolations_by_op) and cm._stretch_ok


def test_tables_and_a_fitted_artifact_are_alternatives(aic) -> None:  # noqa: ANN001
    from simulator.costmodel import load_cost_model

    with pytest.raises(ConfigError, match="both price the kernels"):
        load_cost_model("some-artifact.json", ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm", kernels="vllm"))


def test_run_header_names_the_tables(aic, tmp_path) -> None:  # noqa: ANN001
    from typer.testing import CliRunner

    from simulator.cli import app

    result = CliRunner().invoke(app, ["run", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kernels", "trtllm",
                                      "--num-requests", "30", "--no-progress", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    header = " ".join(result.output.split())
    assert "kernels: trtllm 1.3.0rc20 tables of h100_sxm" in header
    # the tables price the run; the default --cost-model roofline does not (it prices only what describe() lists)
    assert "cost model: kernel tables · kernels:" in header and "cost model: roofline" not in header
    assert json.loads((tmp_path / "config.json").read_text())["replica"]["kernels"] == "trtllm"


def test_the_tables_line_names_only_what_priced_the_run(aic) -> None:  # noqa: ANN001
    """describe() names the table families whose rows price some op: no all-reduce table at TP1 (L40S's comm
    table is another version than its others), the MLA tables and not the attention ones for an MLA model, and
    the roofline's ep_all_to_all (ROOFLINE_ALWAYS) where attention DP makes it price something."""
    assert _model(aic, gpu="l40s").describe() == "vllm 0.24.0 tables of l40s (AIConfigurator)"
    assert _model(aic, gpu="l40s", tp=2).describe() == "vllm tables of l40s (AIConfigurator): gemm/attention 0.24.0, comm 0.22.0"
    ds = {"model": "deepseek-v3", "gpu": "b200", "backend": "trtllm", "dtype": "nvfp4"}
    tp8 = _model(aic, tp=8, **ds).describe()
    assert "mla/comm 1.3.0rc20" in tp8 and "attention" not in tp8 and "ep_all_to_all" not in tp8
    assert _model(aic, tp=1, attention_dp=8, ep=8, **ds).describe().endswith("; roofline only for ep_all_to_all")


def test_import_aiconfigurator_writes_a_tidy_table(aic, tmp_path) -> None:  # noqa: ANN001
    import pandas as pd
    from typer.testing import CliRunner

    from simulator.cli import app

    result = CliRunner().invoke(app, ["import-aiconfigurator", "--gpu", "h100-sxm", "--backend", "sglang", "--out",
                                      str(tmp_path), "--data", str(aic)])
    assert result.exit_code == 0, result.output
    (path,) = tmp_path.glob("h100_sxm_sglang_*.parquet")
    frame = pd.read_parquet(path)
    assert {"system", "backend", "version", "family", "kernel_source", "dtype", "latency_s"} <= set(frame.columns)
    assert set(frame["family"]) >= {"gemm", "attention", "moe", "comm"} and frame["latency_s"].gt(0).all()


def test_a_database_without_the_gpus_hardware_file_is_one_line(aic, tmp_path) -> None:  # noqa: ANN001
    """A copy of the database holding systems/data/l40s but not systems/l40s.yaml (whose memory bandwidth prices
    the element-wise ops and bounds the warm rows): the export refuses it before making its folder, a model too."""
    from typer.testing import CliRunner

    from simulator.cli import app
    from simulator.costmodel.aic.model import TableCostModel

    partial = tmp_path / "db"
    (partial / "systems" / "data").mkdir(parents=True)
    (partial / "systems" / "data" / "l40s").symlink_to(aic / "systems" / "data" / "l40s")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["import-aiconfigurator", "--gpu", "l40s", "--backend", "vllm", "--out", str(out),
                                   "--data", str(partial)])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith("--data:")
    assert "l40s.yaml" in str(res.exception) and "\n" not in str(res.exception) and not out.exists()
    with pytest.raises(ConfigError, match=r"^kernels: .*l40s\.yaml is missing"):
        TableCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="l40s"), "vllm", root=partial)


def test_a_runs_table_model_shares_the_tables_and_counts_its_own_extrapolations(aic) -> None:  # noqa: ANN001
    """table_cost_model (what a run loads) reads a system's tables once per process; each run's
    copy prices the same and counts only its own extrapolations."""
    from simulator.costmodel.aic.model import table_cost_model

    replica = ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm")
    first, second = table_cost_model(replica, "vllm"), table_cost_model(replica, "vllm")
    assert first is not second and first._gemm_index is second._gemm_index  # indexed once
    fresh = _model(aic)
    shape = BatchShape()
    shape.add_decodes(8, 8 * 400_000, 8 * 400_000**2, 400_000)  # past the measured contexts: extrapolated
    assert first.iteration_time(shape) == fresh.iteration_time(shape)
    assert first.num_extrapolations > 0 and second.num_extrapolations == 0


def test_predict_breaks_down_a_table_priced_step(aic) -> None:  # noqa: ANN001
    """``simulate predict --kernels`` prices the step from the GPU's tables (as a run with that flag does),
    says which tables, and marks each op by what priced it; attention DP sends every rank's tokens through
    the experts of the batch described (one rank's)."""
    from typer.testing import CliRunner

    from simulator.cli import app

    base = ["predict", "--model", "deepseek-v3", "--gpu", "b200", "--dtype", "nvfp4", "--decode", "16", "--context",
            "2048", "--engine", "trtllm-2026", "--json"]
    runner = CliRunner()
    out = {}
    for name, extra in {"roofline": ["--tp", "8", "--kernels", "roofline"], "tables": ["--tp", "8"],  # (the engine's)
                        "dp": ["--tp", "1", "--attention-dp", "8", "--ep", "8", "--kernels", "trtllm"]}.items():
        res = runner.invoke(app, base + extra)
        assert res.exit_code == 0, res.output
        out[name] = json.loads(res.stdout)  # notes go to stderr
    roofline, tables, dp = out["roofline"], out["tables"], out["dp"]
    assert roofline["tables"] is None and roofline["kernels"] == "roofline"
    assert tables["tables"].startswith("trtllm") and "b200_sxm" in tables["tables"]
    assert tables["cost_model"].startswith("tables:trtllm")
    for r in (tables, dp):
        assert sum(r["breakdown_s"].values()) == pytest.approx(r["iteration_time_s"], rel=1e-9)
    assert tables["breakdown_s"]["moe_experts"] != roofline["breakdown_s"]["moe_experts"]
    # 8 ranks' 16 tokens each through the experts: more expert work than one TP8 batch of 16
    assert dp["breakdown_s"]["moe_experts"] > tables["breakdown_s"]["moe_experts"]
    assert dp["attention_dp"] == 8 and dp["ep"] == 8
    text = runner.invoke(app, base[:-1] + ["--tp", "8", "--kernels", "trtllm"])
    assert text.exit_code == 0 and "kernels: trtllm" in " ".join(text.output.split())
    assert "│ tables" in text.output


def test_predict_marks_the_ops_the_roofline_priced(aic) -> None:  # noqa: ANN001
    """roofline_ops names families ("gemm": every GEMM at the run's dtype); predict's from column marks their ops.
    H100's vLLM tables have no int4 GEMM rows: the projections and MLP GEMMs are the roofline's, the LM head (kept at
    16 bits) the bf16 rows'. Its TP1 LM head, wider than any measured shape, is the step's one extrapolated lookup."""
    from typer.testing import CliRunner

    from simulator.cli import app

    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--kernels", "vllm", "--dtype", "int4",
            "--decode", "8", "--context", "1000"]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["roofline_ops"][0] == "gemm" and out["num_extrapolations"] == 1
    assert out["roofline_priced"] == dict.fromkeys(("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down"), "roofline")
    res = CliRunner().invoke(app, args)
    rows = {line.split("│")[1].strip(): line.split("│")[4].strip() for line in res.output.splitlines()
            if line.count("│") == 5}
    assert rows["mlp_down"] == rows["qkv_proj"] == "roofline" and rows["lm_head_sampling"] == "tables"


def test_predict_refuses_bad_kernel_flags() -> None:
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["predict", "--decode", "2", "--context", "64", "--kernels", "tensorrt"])
    assert isinstance(res.exception, ConfigError) and "replica.kernels" in str(res.exception)
    res = CliRunner().invoke(app, ["predict", "--decode", "2", "--context", "64", "--attention-dp", "2"])
    assert isinstance(res.exception, ConfigError) and "replica.attention_dp" in str(res.exception)


def test_rows_timed_warm_in_l2_are_priced_at_what_the_kernel_sustains_from_memory(aic) -> None:  # noqa: ANN001
    """The L40S's tables time small GEMMs and decodes with their operands resident in its 96 MiB L2, faster than its
    GDDR6 can feed them; a serving step reads them from memory. Such rows are raised to the bandwidth the same kernel
    sustains on working sets of 512 MiB and more (or dropped, for fits); H100's rows are (nearly) untouched."""
    from simulator.config.catalog import get_gpu
    from simulator.costmodel.aic import tables as T

    cols = ("m", "n", "k", "latency")
    l40s = T.find_table("l40s", "vllm", "gemm", aic)
    src, raw, _, kept = T.read_priced_rows(l40s, "bfloat16", cols, root=aic, warm="keep")
    _, priced, _, notes = T.read_priced_rows(l40s, "bfloat16", cols, root=aic)
    _, dropped, _, _ = T.read_priced_rows(l40s, "bfloat16", cols, root=aic, warm="drop")
    moved = T.streamed_bytes("gemm", "bfloat16", raw)
    bw = T.sustained_bandwidth(l40s, "bfloat16", src)
    assert kept == () and 0.5 * get_gpu("l40s").hbm_bytes_per_s < bw < get_gpu("l40s").hbm_bytes_per_s
    warm = raw["latency"] < moved / bw * 1e3
    beyond_peak = moved / (raw["latency"] * 1e-3) > get_gpu("l40s").hbm_bytes_per_s
    assert beyond_peak.mean() > 0.03 and np.all(warm[beyond_peak])  # physically impossible from GDDR: warm
    assert moved[warm].max() < T.SUSTAINED_FROM_BYTES / 2  # every warm row's operands fit in an L2-sized set
    assert np.allclose(priced["latency"], np.maximum(raw["latency"], moved / bw * 1e3), rtol=1e-8, atol=0)
    assert np.all(priced["latency"] >= raw["latency"]) and (priced["latency"] > raw["latency"]).sum() == warm.sum()
    assert len(dropped["latency"]) == len(raw["latency"]) - warm.sum()
    assert any("timed resident in L2" in n for n in notes)
    # the model prices a Llama-3.1-8B decode's attention projections at least at that bandwidth
    model = _model(aic, gpu="l40s")
    assert any("l40s" in n and "L2" in n for n in model.notes)
    qkv = float(model.gemm(np.array([1.0]), 4096, 6144)[0])
    assert qkv >= 4096 * 6144 * 2 / bw * (1 - 1e-9)
    h100 = T.find_table("h100_sxm", "vllm", "gemm", aic)
    _, own, _, _ = T.read_priced_rows(h100, "bfloat16", cols, root=aic, warm="keep")
    _, raised, _, h100_notes = T.read_priced_rows(h100, "bfloat16", cols, root=aic)
    assert h100_notes == () and np.mean(raised["latency"] != own["latency"]) < 0.01
    decode = _model(aic, gpu="l40s", backend="sglang")
    assert any("generation_attention rows" in n for n in decode.notes)
    # the tidy export flags the same rows
    tidy = T.tidy_tables("l40s", "vllm", aic)
    flagged = tidy[(tidy["table"] == "gemm") & (tidy["dtype"] == "bfloat16") & (tidy["kernel_source"] == src)]
    assert flagged["warm_in_l2"].sum() == warm.sum() and not tidy.loc[tidy["table"] == "moe", "warm_in_l2"].any()
    assert tidy.loc[tidy["table"] == "generation_attention", "warm_in_l2"].mean() > 0.05
    # MLA's latent cache (576 values a token) the same way: warm rows only where it fits in the L40S's L2
    mla = T.find_table("l40s", "sglang", "generation_mla", aic)
    mla_cols = (*T.STREAMED_KEYS["generation_mla"], "latency")
    mla_src, mla_raw, _, _ = T.read_priced_rows(mla, "bfloat16", mla_cols, root=aic, warm="keep")
    _, mla_priced, _, _ = T.read_priced_rows(mla, "bfloat16", mla_cols, root=aic)
    raised = mla_priced["latency"] > mla_raw["latency"]
    assert raised.any() and T.streamed_bytes("generation_mla", "bfloat16", mla_raw)[raised].max() <= 96 * 2**20


def test_no_decode_attention_lane_reads_kv_faster_than_the_gpus_memory(aic) -> None:  # noqa: ANN001
    """A100 TensorRT-LLM's decode-attention rows sustain 3.45 TB/s on large KV reads, 1.7x the A100's 2.039 TB/s:
    priced as measured, 64 decodes of 8,192 tokens of Llama-3-8B took 20.5 ms, below the 33.7 ms their 68.7 GB of
    KV take to read. Each lane is now held to the GPU's own bandwidth as well as to what its kernel sustains."""
    shape = BatchShape.from_requests(decodes=[8192] * 64)
    kv_bytes = 64 * 8192 * 32 * 2 * 8 * 128 * 2  # tokens x layers x K,V x KV heads x head dim x 2 bytes
    for gpu, backend, bandwidth in (("a100-80gb", "trtllm", 2.039e12), ("h100-sxm", "sglang", 3.35e12),
                                    ("h100-sxm", "vllm", 3.35e12)):
        model = _model(aic, model="llama-3-8b", gpu=gpu, backend=backend)
        assert model.breakdown(shape)["attn_decode"] >= kv_bytes / bandwidth * (1 - 1e-9), (gpu, backend)


def test_a_named_moe_kernel_is_priced_in_the_dtype_the_default_prices(aic) -> None:  # noqa: ANN001
    """A name is looked for in the dtype the run's format prices (per-tensor FP8 where the table has it), never in a
    fallback dtype the default would not take; a donor's label is matched by its kernel's name, not its system."""
    kw = dict(backend="trtllm", model="mixtral-8x7b", gpu="b200", tp=8, ep=8, dtype="fp8", kernels="trtllm")
    assert _model(aic, **kw).moe_dtype == "fp8"
    with pytest.raises(ConfigError, match=r"replica\.moe_kernel.*'deepgemm'.* in fp8 .*trtllm tables'"):
        _model(aic, **kw, moe_kernel="deepgemm")  # DeepGEMM's rows are block-FP8 only
    ds = dict(backend="trtllm", model="deepseek-v3", gpu="b200", tp=8, ep=8, dtype="fp8-block", kernels="trtllm")
    with pytest.raises(ConfigError, match=r"no table of b200_sxm or gb200 times a MoE kernel 'gb200'"):
        _model(aic, **ds, moe_kernel="gb200")


def test_a_moe_kernel_left_at_auto_keeps_stored_result_keys(monkeypatch) -> None:  # noqa: ANN001
    """Sweep points and planned layouts stored before --moe-kernel resume: its default is not hashed (one that names
    a kernel is)."""
    import simulator.config.run_config as rc
    from simulator.config.run_config import RunConfig

    hashed: list[dict] = []
    real = rc.json.dumps
    monkeypatch.setattr(rc.json, "dumps", lambda obj, **kw: hashed.append(obj) or real(obj, **kw))
    base = RunConfig().replace(replica__model="deepseek-v3", replica__gpu="b200", replica__tp=8,
                               replica__kernels="trtllm")
    base.result_key()
    assert "moe_kernel" not in hashed[-1]["config"]["replica"]
    base.replace(replica__moe_kernel="deepgemm").result_key()
    assert hashed[-1]["config"]["replica"]["moe_kernel"] == "deepgemm"



def test_a_named_kernel_lent_by_a_donor_or_another_backend_is_the_engines_own_or_a_shared_one(aic) -> None:  # noqa: ANN001
    """Where a lane donor prices the default (gpt-oss's MXFP4 experts on B200 under SGLang: FlashInfer's rows of
    GB200), naming that kernel is the default; another backend's rows lend only kernels the engines share (DeepGEMM,
    FlashInfer's), not a backend's own (TensorRT-LLM's torch-flow CUTLASS MoE)."""
    kw = dict(backend="sglang", model="gpt-oss-120b", gpu="b200", tp=1, dtype="mxfp4", kernels="sglang")
    default = _model(aic, **kw)
    same = _model(aic, **kw, moe_kernel="flashinfer_trtllm")
    assert same.moe_source == default.moe_source and same.moe_dtype == default.moe_dtype
    with pytest.raises(ConfigError, match=r"no table of h100_sxm times a MoE kernel 'torch_flow'"):
        _model(aic, backend="sglang", model="deepseek-v3", gpu="h100-sxm", tp=8, dtype="fp8-block", kernels="sglang",
               moe_kernel="torch_flow")
