"""Today's precisions and attention data parallelism (issue 27, items 3 and 4).

Weight bytes by hand (scales included, simulator.config.precision): fp8 1 B; fp8-block
1 + 4/16384 B (an fp32 scale per 128x128 block); nvfp4 0.5 + 1/16 B (an E4M3 scale per 16);
mxfp4 0.5 + 1/32 B (an E8M0 scale per 32); int4 0.5 + 2/128 B (a bf16 scale per 128).
GPU figures are checked against AIConfigurator's system files where ../shared/data has them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.catalog import GPUS, MODELS, get_gpu
from simulator.config.errors import ConfigError
from simulator.config.precision import WEIGHT_FORMATS
from simulator.config.run_config import ReplicaConfig, RunConfig, WorkloadConfig
from simulator.costmodel import BatchShape, RooflineCostModel
from simulator.engine.kvcache import plan_memory

GiB = 2**30
runner = CliRunner()

# catalog name -> AIConfigurator system file (systems/<name>.yaml)
SYSTEM_FILES = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "b300": "b300_sxm",
                "gb200": "gb200", "gb300": "gb300", "a100-80gb": "a100_sxm", "l40s": "l40s",
                "rtx-pro-6000": "rtx_pro_6000_server"}


def _system_numbers(path: Path) -> dict[str, float]:
    """``key: number`` lines of a system yaml (its gpu/node sections hold no repeated keys we read)."""
    out: dict[str, float] = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^\s+([a-z0-9_]+):\s*([0-9.eE+]+)\s*(#.*)?$", line)
        if m:
            out.setdefault(m.group(1), float(m.group(2)))
    return out


@pytest.mark.parametrize("name", sorted(SYSTEM_FILES))
def test_gpu_catalog_matches_the_aiconfigurator_system_file(shared_data, name):
    path = shared_data / "profiles" / "aiconfigurator" / "systems" / f"{SYSTEM_FILES[name]}.yaml"
    if not path.is_file():
        pytest.skip(f"{path} is absent")
    sys = _system_numbers(path)
    g = get_gpu(name)
    assert SYSTEM_FILES[name] in g.source  # the catalog names the file its figures come from
    assert g.memory_bytes == pytest.approx(sys["mem_capacity"], rel=1e-6)
    assert g.hbm_bytes_per_s == pytest.approx(sys["mem_bw"], rel=1e-6)
    assert g.bf16_flops == pytest.approx(sys["bfloat16_tc_flops"], rel=1e-3)  # l40s: 362 vs 362.05
    assert g.fp8_flops == pytest.approx(sys.get("fp8_tc_flops", 0.0), rel=1e-3)  # h100/h200: 1979 vs 1978
    assert g.fp4_flops == pytest.approx(sys.get("fp4_tc_flops", 0.0), rel=1e-3)
    link = g.nvlink_bytes_per_s or g.pcie_bytes_per_s  # the system's intra-node link per direction
    assert link == pytest.approx(sys["intra_node_bw"], rel=1e-6)
    assert g.pcie_bytes_per_s == pytest.approx(sys["pcie_bw"], rel=1e-6)


def test_fp4_tensor_cores_only_on_blackwell():
    fp4 = {name for name, g in GPUS.items() if g.fp4_flops > 0}
    assert fp4 == {"b200", "gb200", "b300", "gb300", "rtx-pro-6000", "rtx-5090"}
    assert GPUS["b300"].fp4_flops == pytest.approx(14e15) and GPUS["gb300"].fp4_flops == pytest.approx(15e15)
    assert GPUS["gb200"].nvlink_domain_gpus == 72 and GPUS["rtx-pro-6000"].nvlink_bytes_per_s == 0
    for alias in ("b300-sxm", "gb300-nvl72", "rtx-pro-6000-server"):
        assert get_gpu(alias).name in ("b300", "gb300", "rtx-pro-6000")


# -- weights -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("dtype", "nbytes"), [
    ("bf16", 2.0), ("fp8", 1.0), ("fp8-block", 1 + 4 / 16384), ("nvfp4", 0.5625), ("mxfp4", 0.53125),
    ("int4", 0.5 + 2 / 128)])
def test_weight_bytes_by_hand_and_the_memory_plan(dtype, nbytes):
    r = ReplicaConfig("llama-3.1-70b", "b200", tp=2, dtype=dtype)
    assert r.weight_bytes == nbytes
    m = MODELS["llama-3.1-70b"]
    plan = plan_memory(r, 2048, 128)
    emb = 2 * m.vocab_size * m.hidden_size * 2 / 2  # embedding and LM head stay bf16
    assert plan.weights_bytes[0] == pytest.approx(m.num_layers * m.params_per_layer / 2 * nbytes + emb)


def test_fp4_weights_against_bf16_memory_plan_by_hand():
    m = MODELS["llama-3.1-70b"]
    bf16 = plan_memory(ReplicaConfig("llama-3.1-70b", "b200", tp=2), 2048, 128)
    fp4 = plan_memory(ReplicaConfig("llama-3.1-70b", "b200", tp=2, dtype="nvfp4"), 2048, 128)
    saved = m.num_layers * m.params_per_layer / 2 * (2 - 0.5625)  # per GPU
    assert bf16.weights_bytes[0] - fp4.weights_bytes[0] == pytest.approx(saved)
    # 80 layers x 855,654,400 params = 68.45 B, over 2 GPUs, 1.4375 B saved each: 45.82 GiB per GPU.
    assert saved == 80 * 855_654_400 / 2 * 1.4375 and saved / GiB == pytest.approx(45.82, abs=0.01)
    # The freed bytes all go to the KV cache: 80 layers x 2 x 4 KV heads x 128 x 2 B per token per GPU.
    per_token = 80 * 2 * 4 * 128 * 2
    assert fp4.kv_bytes_per_token[0] == bf16.kv_bytes_per_token[0] == per_token
    assert fp4.num_kv_tokens - bf16.num_kv_tokens == pytest.approx(saved / per_token, abs=2 * 16)


def test_gemm_peak_follows_the_weight_format():
    cases = {("b200", "nvfp4"): 9e15, ("b200", "mxfp4"): 4.5e15, ("h100-sxm", "mxfp4"): 989e12, ("b200", "mxfp4-w4a8"): 4.5e15,
             ("b200", "mxfp4-w4a16"): 2.25e15, ("b200", "fp8-block"): 4.5e15, ("b200", "fp8"): 4.5e15,
             ("b200", "int4"): 2.25e15, ("b200", "bf16"): 2.25e15, ("h100-sxm", "fp8-block"): 1979e12,
             ("h100-sxm", "nvfp4"): 989e12, ("a100-80gb", "fp8"): 312e12, ("b300", "nvfp4"): 14e15}
    for (gpu, dtype), peak in cases.items():
        rf = RooflineCostModel(ReplicaConfig("qwen3-30b-a3b", gpu, dtype=dtype), table_tokens=1)
        assert rf.gemm_peak_flops == pytest.approx(peak), (gpu, dtype)


def test_fp4_without_fp4_tensor_cores_is_priced_weight_only_and_said_so():
    h100 = get_gpu("h100-sxm")
    fmt = WEIGHT_FORMATS["nvfp4"]
    assert fmt.runs_weight_only(h100) and not fmt.runs_weight_only(get_gpu("b200"))
    assert "weight-only" in fmt.describe(h100) and fmt.describe(get_gpu("b200")) == "nvfp4"
    # Weight-only FP4 streams a quarter of bf16's weight bytes: a small decode batch is faster
    # than bf16 and fp8 on the same H100, and its big-prefill GEMMs run at the bf16 peak.
    shape = BatchShape.from_requests(decodes=[1024] * 4)
    times = {d: RooflineCostModel(ReplicaConfig("llama-3.1-8b", "h100-sxm", dtype=d)).iteration_time(shape)
             for d in ("bf16", "fp8", "nvfp4")}
    assert times["nvfp4"] < times["fp8"] < times["bf16"]
    rf = RooflineCostModel(ReplicaConfig("llama-3.1-8b", "h100-sxm", dtype="nvfp4"), table_tokens=1)
    assert rf.gemm_peak_flops == h100.bf16_flops and rf.gemm_knee_scale == pytest.approx(0.5625 / 2)


def test_mxfp4_runs_as_the_engines_moe_kernel_runs_it_never_w4a4():
    """gpt-oss's MXFP4 experts: MXFP8 activations on FP8 tensor cores (w4a8) on datacenter Blackwell, and for
    TensorRT-LLM on the RTX PRO 6000 too; bf16 activations (w4a16) before Blackwell and for vLLM and SGLang on the
    RTX PRO 6000 (sm_120, where FlashInfer's MXFP8 MoE kernel does not run). The header says which."""
    from simulator.config.precision import describe_format, kernel_format

    b200, h100, rtx = get_gpu("b200"), get_gpu("h100-sxm"), get_gpu("rtx-pro-6000")
    assert {kernel_format("mxfp4", b, b200) for b in ("vllm", "sglang", "trtllm", "all")} == {"mxfp4-w4a8"}
    assert {kernel_format("mxfp4", b, h100) for b in ("vllm", "sglang", "trtllm", "all")} == {"mxfp4-w4a16"}
    assert [kernel_format("mxfp4", b, rtx) for b in ("vllm", "sglang", "trtllm")] == ["mxfp4-w4a16"] * 2 + ["mxfp4-w4a8"]
    assert kernel_format("mxfp4-w4a16", "trtllm", b200) == "mxfp4-w4a16" and kernel_format("nvfp4", "trtllm", b200) == "nvfp4"
    assert describe_format("mxfp4", "trtllm", b200) == "mxfp4 (as mxfp4-w4a8: trtllm's MXFP4 MoE kernel on b200)"
    peaks, times = {}, {}
    shape = BatchShape.from_requests(prefills=[(4096, 0)])
    for dtype, kernels, engine in (("mxfp4", "trtllm", None), ("mxfp4", "roofline", "trtllm-2026"),
                                   ("mxfp4-w4a16", "trtllm", None)):
        rf = RooflineCostModel(ReplicaConfig("gpt-oss-120b", "b200", dtype=dtype, kernels=kernels), engine=engine)
        peaks[dtype, engine], times[dtype, engine] = rf.gemm_peak_flops, rf.iteration_time(shape)
    assert peaks["mxfp4", None] == peaks["mxfp4", "trtllm-2026"] == b200.fp8_flops
    assert peaks["mxfp4-w4a16", None] == b200.bf16_flops
    # a prefill's experts are compute-bound: MXFP8 activations on FP8 tensor cores beat bf16's
    assert times["mxfp4", None] == times["mxfp4", "trtllm-2026"] < times["mxfp4-w4a16", None]
    # the same bytes in memory whichever kernel runs them
    assert ReplicaConfig("gpt-oss-120b", "b200", dtype="mxfp4-w4a8").weight_bytes == \
        ReplicaConfig("gpt-oss-120b", "b200", dtype="mxfp4").weight_bytes == 0.53125


def test_fp4_on_blackwell_speeds_up_compute_bound_prefill():
    shape = BatchShape.from_requests(prefills=[(8192, 0)])
    t = {d: RooflineCostModel(ReplicaConfig("llama-3.1-70b", "b200", tp=2, dtype=d)).iteration_time(shape)
         for d in ("bf16", "fp8", "nvfp4")}
    assert t["nvfp4"] < t["fp8"] < t["bf16"]


def test_dtype_spellings_and_bad_names():
    assert ReplicaConfig("llama-3.1-8b", "h100", dtype="fp8_block").dtype == "fp8-block"
    assert ReplicaConfig("llama-3.1-8b", "h100", dtype="w4a16").dtype == "int4"
    assert ReplicaConfig("llama-3.1-8b", "b200", dtype="fp4").dtype == "nvfp4"  # AIConfigurator's and TRT-LLM's label
    assert ReplicaConfig("llama-3.1-8b", "h100", kv_cache_dtype="fp8_e4m3").kv_cache_dtype == "fp8"
    with pytest.raises(ConfigError) as err:
        ReplicaConfig("llama-3.1-8b", "h100", dtype="fp3")
    assert err.value.field == "replica.dtype" and "nvfp4" in str(err.value)


# -- KV cache ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("model", "tp", "kv", "per_layer"), [
    ("qwen3-30b-a3b", 1, "auto", 2 * 4 * 128 * 2),
    ("qwen3-30b-a3b", 1, "fp8", 2 * 4 * 128 * 1),
    ("gpt-oss-120b", 2, "fp8", 2 * 4 * 64 * 1),
    ("deepseek-v3", 8, "fp8", 576),  # MLA: one latent per token, replicated on every TP rank
])
def test_fp8_kv_bytes_per_token_by_hand(model, tp, kv, per_layer):
    r = ReplicaConfig(model, "b200", tp=tp, kv_cache_dtype=kv, dtype="nvfp4")
    plan = plan_memory(r, 2048, 64)
    # per token, the layers whose KV grows with every token (gpt-oss: its 18 full-attention layers; its 18
    # sliding ones hold a 128-token window a sequence, charged per sequence)
    assert plan.kv_bytes_per_token[0] == MODELS[model].num_growing_kv_layers * per_layer
    assert RooflineCostModel(r, table_tokens=1).kv_bytes_per_token == per_layer


def test_fp8_kv_halves_decode_attention_bytes():
    shape = BatchShape.from_requests(decodes=[8192] * 32)
    auto = RooflineCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm"), table_tokens=1).attention_decode(shape)
    fp8 = RooflineCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm", kv_cache_dtype="fp8"),
                            table_tokens=1).attention_decode(shape)
    assert 0.5 < fp8 / auto < 0.6  # KV bytes halve; the per-sequence and query terms stay


# -- attention data parallelism ------------------------------------------------------------------

def test_dp_ep_layout_numbers():
    r = ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=1, attention_dp=2, ep=2)
    assert (r.num_gpus, r.moe_tp, r.moe_ep) == (2, 1, 2)
    r = ReplicaConfig("deepseek-v3", "b200", tp=2, attention_dp=4, ep=4)
    assert (r.num_gpus, r.moe_tp, r.moe_ep) == (8, 2, 4)
    r = ReplicaConfig("qwen3-235b-a22b", "h200", tp=1, attention_dp=8)  # SGLang dp-attention without EP: MoE TP8
    assert (r.moe_tp, r.moe_ep) == (8, 1)


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(model="llama-3.1-8b", tp=1, attention_dp=2), "replica.attention_dp"),  # dense: use --replicas
    (dict(model="qwen3-30b-a3b", tp=1, attention_dp=2, ep=4), "replica.ep"),  # ep must divide tp x dp
    (dict(model="qwen3-30b-a3b", tp=2, attention_dp=2, ep=3), "replica.ep"),
    (dict(model="qwen3-30b-a3b", tp=1, pp=2, attention_dp=2), "replica.attention_dp"),
    (dict(model="qwen3-30b-a3b", tp=1, attention_dp=0), "replica.attention_dp"),
    (dict(model="qwen3-30b-a3b", tp=1, attention_dp=16), "replica.num_nodes"),  # 16 GPUs in one node
])
def test_bad_dp_layouts_are_one_line_errors(kwargs, field):
    with pytest.raises(ConfigError) as err:
        ReplicaConfig(gpu="h100-sxm", **kwargs)
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_ep_no_longer_has_to_divide_tp_under_dp():
    ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=1, attention_dp=2, ep=2)  # vLLM DP2 + EP2
    with pytest.raises(ConfigError):
        ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=1, ep=2)  # without DP, ep still divides tp


def test_dp_rank_prices_its_experts_for_the_whole_group():
    """A DP2+EP2 rank holding t tokens runs the experts of 2t tokens (both ranks'), sharded as
    the TP2+EP2 replica shards them: the same expert time as that replica at 2t tokens."""
    dp = RooflineCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=1, attention_dp=2, ep=2))
    tp = RooflineCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=2, ep=2))
    t = np.array([1.0, 8.0, 64.0, 512.0])
    assert np.allclose(dp.token_ops(t)["moe_experts"], tp.token_ops(2 * t)["moe_experts"], rtol=1e-12)
    # Attention stays the rank's own: TP1 with the rank's own heads, no TP all-reduce.
    shape = BatchShape.from_requests(decodes=[2048] * 8)
    assert dp.heads_per_gpu == 32 and dp.breakdown(shape)["tp_all_reduce"] == 0.0
    assert dp.breakdown(shape)["ep_all_to_all"] > 0.0


def test_dp_memory_plan_shards_only_the_experts_over_the_group():
    m = MODELS["deepseek-v3"]
    r = ReplicaConfig("deepseek-v3", "b200", tp=1, attention_dp=8, ep=8, dtype="nvfp4")
    plan = plan_memory(r, 2048, 64)
    experts = m.num_moe_layers * m.num_experts * m.expert_params
    # An NVFP4 MoE checkpoint keeps attention and the router gate at 16 bits, on every DP rank.
    sixteen = m.num_layers * m.attention_params + m.num_moe_layers * m.hidden_size * m.num_experts
    rest = m.num_layers * m.params_per_layer - experts - sixteen
    emb = 2 * m.vocab_size * m.hidden_size * 2
    assert plan.weights_bytes[0] == pytest.approx((rest + experts / 8) * 0.5625 + sixteen * 2 + emb, rel=1e-9)
    # 653.9 B routed-expert params / 8 and 5.8 B others at 0.5625 B, 11.5 B of attention and router at 2 B, and
    # 3.7 GB of bf16 embeddings: 74.8 GB per GPU.
    assert sixteen == 61 * 187_105_280 + 58 * 7168 * 256
    assert plan.weights_bytes[0] / GiB == pytest.approx(69.69, abs=0.01)
    assert plan.kv_bytes_per_token[0] == 61 * 576 * 2  # each rank's own MLA cache, bf16


def test_dp_ranks_run_as_engine_replicas():
    from simulator.simulation import simulate

    cfg = RunConfig(replica=ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=1, attention_dp=2, ep=2),
                    workload=WorkloadConfig(name="fixed", num_requests=12, qps=20.0, prompt_tokens=256,
                                            output_tokens=16), num_replicas=2)
    result = simulate(cfg)
    assert len(result.replica_busy_s) == 4  # 2 replicas x 2 DP ranks, each its own scheduler and KV cache
    assert all(busy > 0 for busy in result.replica_busy_s)  # the router spread the requests over every rank
    assert sum(r.completed_at is not None for r in result.requests) == 12
    assert RunConfig.from_dict(cfg.to_dict()) == cfg


# -- the acceptance command lines ------------------------------------------------------------------

def _run(*args: str):
    return runner.invoke(app, ["run", "--num-requests", "12", "--qps", "4", "--no-progress", *args])


def test_deepseek_v3_dp8_ep8_nvfp4_on_b200_runs():
    res = _run("--model", "deepseek-v3", "--gpu", "b200", "--tp", "1", "--attention-dp", "8", "--ep", "8",
               "--dtype", "nvfp4")
    assert res.exit_code == 0, res.output
    assert "dp=8" in res.output and "ep=8" in res.output and "nvfp4" in res.output
    assert "12 finished" in res.output


def test_gpt_oss_header_names_the_mxfp4_kernel_its_engine_runs():
    for gpu, engine, kernel in (("b200", "trtllm-2026", "mxfp4-w4a8: trtllm's"), ("h100-sxm", "vllm-v1", "mxfp4-w4a16: vllm's")):
        res = _run("--model", "gpt-oss-120b", "--gpu", gpu, "--tp", "2", "--dtype", "mxfp4", "--engine", engine)
        assert res.exit_code == 0, res.output
        assert f"dtype mxfp4 (as {kernel} MXFP4 MoE kernel on {gpu})" in res.output and "12 finished" in res.output


def test_qwen3_30b_dp2_ep2_runs():
    res = _run("--model", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "1", "--attention-dp", "2", "--ep", "2",
               "--kv-cache-dtype", "fp8")
    assert res.exit_code == 0, res.output
    assert "tp=1" in res.output and "dp=2" in res.output and "ep=2" in res.output and "KV cache fp8" in res.output
    assert "12 finished" in res.output


def test_dp_error_through_the_cli_is_one_line_exit_2():
    proc = subprocess.run([sys.executable, "-m", "simulator", "run", "--model", "qwen3-30b-a3b", "--gpu", "h100",
                           "--tp", "1", "--attention-dp", "2", "--ep", "4", "--num-requests", "4", "--no-progress"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --ep: ") and "Traceback" not in proc.stderr, proc.stderr


def _fitted(tp: int) -> dict:
    """A fitted artifact for Qwen3-30B-A3B on H100 at ``tp``: a QKV, a router and whole-expert curves."""
    from simulator.costmodel.learned_schema import FORMAT_VERSION, Curve

    curve = Curve(np.array([1.0, 64.0, 4096.0]), np.array([1e-5, 2e-5, 4e-4])).to_json()
    return {"kind": "servesim-learned-cost-model", "format_version": FORMAT_VERSION, "model": "qwen3-30b-a3b",
            "tp": tp, "gpu": "h100-sxm", "curves": {op: curve for op in ("qkv_proj", "moe_gate", "moe_expert_up",
                                                                         "moe_expert_down", "moe_expert_act")}}


def test_a_fitted_cost_model_prices_attention_dp_for_the_group():
    """A fitted (learned) model prices attention DP as the roofline does (it refused it before
    issue 26 step 6): attention and the router see one rank's tokens, the routed experts the DP
    group's. Two 1-GPU ranks with ep=2 run their experts as one TP-2 EP-2 replica running both
    ranks' tokens does (the same GPUs, experts and tokens per expert)."""
    from simulator.costmodel.learned import LearnedCostModel

    dp = LearnedCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=1, attention_dp=2, ep=2), _fitted(1))
    one = LearnedCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm", tp=2, ep=2), _fitted(2))
    for t in (1.0, 7.0, 100.0):
        ops, whole = dp.token_ops(np.array([t])), one.token_ops(np.array([2 * t]))
        for op in ("moe_experts", "moe_act"):
            assert float(ops[op][0]) == pytest.approx(float(whole[op][0]), rel=1e-12)
        assert float(ops["qkv_proj"][0]) == float(dp.curves["qkv_proj"](np.array([t]))[0])
        assert float(ops["moe_router"][0]) == float(dp.curves["moe_gate"](np.array([t]))[0])


def test_a_fitted_cost_model_runs_attention_dp_through_the_cli(tmp_path):
    path = tmp_path / "qwen3-tp1.json"
    path.write_text(json.dumps(_fitted(1)))
    res = _run("--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--tp", "1", "--attention-dp", "2", "--ep", "2",
               "--cost-model", str(path))
    assert res.exit_code == 0, res.output
    assert "dp=2" in res.output and "12 finished" in res.output


def test_dp_group_all_to_all_link():
    from simulator.config.topology import topology_for

    def ep_gb(gpu, dp, nodes, **kw):
        return topology_for(ReplicaConfig("qwen3-235b-a22b", gpu, tp=1, attention_dp=dp, ep=dp, num_nodes=nodes,
                                          dtype="fp8", **kw)).ep_bytes_per_s / 1e9

    assert ep_gb("h200", 8, 1) == 450.0  # one HGX node: NVLink
    assert ep_gb("gb200", 16, 2) == 900.0  # inside the NVL72 rack: NVLink across "nodes"
    # Two HGX nodes on one 400G NIC each: 8 of 15 peers remote, the NIC's 50 GB/s shared by 8 GPUs.
    assert ep_gb("h200", 16, 2, inter_node_link="infiniband-400g") == pytest.approx(50 / 8 / (8 / 15))
    # Without DP the MoE all-to-all keeps the TP ring's link (prices as before).
    topo = topology_for(ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=4, ep=4))
    assert topo.ep_bytes_per_s == topo.tp_ring_bytes_per_s


def test_sglang_divides_its_chunked_prefill_size_over_the_attention_dp_ranks():
    """SGLang's server_args: with DP attention, ``chunked_prefill_size //= dp_size`` (each rank's
    tokens enter every MoE layer together); vLLM and TensorRT-LLM take their budgets per rank."""
    from simulator.config.run_config import SchedulerConfig
    from simulator.engine.replica import build_pool_scheduler

    sglang, vllm = SchedulerConfig(name="sglang", max_num_batched_tokens=8192), SchedulerConfig(name="vllm-v1",
                                                                                              max_num_batched_tokens=8192)
    assert sglang.token_budget(4096, None, 4) == 2048 and sglang.token_budget(4096, None, 1) == 8192
    assert vllm.token_budget(4096, None, 4) == 8192
    replica = ReplicaConfig("qwen3-30b-a3b", "h100-sxm", attention_dp=4, ep=4)
    assert build_pool_scheduler(replica, sglang)[0].token_budget == 2048
    assert build_pool_scheduler(replica, vllm)[0].token_budget == 8192
    res = runner.invoke(app, ["run", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--attention-dp", "4", "--ep", "4",
                              "--scheduler", "sglang", "--max-num-batched-tokens", "8192", "--num-requests", "8",
                              "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "2,048-token budget a rank" in res.output


def test_four_bit_moe_checkpoints_keep_attention_and_the_router_at_16_bits():
    """gpt-oss (MXFP4), Kimi-K2 (INT4) and NVIDIA's NVFP4 MoE checkpoints quantise the experts only: the
    attention projections and the router gate are priced and stored at 16 bits; a dense model's 4-bit
    checkpoint and an FP8 MoE checkpoint quantise every layer as before. The router gate is whole on every GPU
    at 16 bits in every checkpoint (vLLM's and SGLang's gates are replicated, unquantised linears)."""
    m = MODELS["deepseek-v3"]
    fp4 = ReplicaConfig("deepseek-v3", "b200", tp=8, dtype="nvfp4")
    assert fp4.experts_only_quantized and ReplicaConfig("gpt-oss-120b", "b200", dtype="mxfp4").experts_only_quantized
    assert not ReplicaConfig("llama-3.1-70b", "b200", tp=2, dtype="nvfp4").experts_only_quantized
    assert not ReplicaConfig("deepseek-v3", "b200", tp=8, dtype="fp8-block").experts_only_quantized
    assert fp4.params_16bit_per_layer == pytest.approx(m.num_kv_layers * m.attention_params / m.num_layers)
    # The memory plan holds those weights at 2 bytes, the rest at 0.5625, and the router whole at 2.
    router = 58 * 7168 * 256
    uniform = (m.num_layers * m.params_per_layer - router) / 8 * 0.5625 + 2 * m.vocab_size * m.hidden_size * 2 / 8
    extra = m.num_layers * fp4.params_16bit_per_layer / 8 * (2 - 0.5625)
    whole = m.num_layers * m.replicated_attention_params * (1 - 1 / 8) * 2  # MLA's latent projections on every rank
    assert plan_memory(fp4, 2048, 64).weights_bytes[0] == pytest.approx(uniform + extra + whole + router * 2, rel=1e-9)
    # An FP8 checkpoint's router too: 16 bits, whole on each of the tp x attention-DP GPUs.
    for dp in (1, 4):
        fp8 = ReplicaConfig("deepseek-v3", "h200", tp=8 // dp, attention_dp=dp, dtype="fp8-block")
        assert fp8.params_16bit_per_layer == 0
        shards = [(m.num_layers * m.params_per_layer - router - 58 * 256 * m.expert_params) / (8 // dp),
                  58 * 256 * m.expert_params / 8, m.num_layers * m.replicated_attention_params * (1 - dp / 8)]
        assert fp8.layer_weights_bytes(61) == pytest.approx(sum(shards) * fp8.weight_bytes + router * 2, rel=1e-9)
    # The roofline prices the projections as the bf16 checkpoint's (the router's GEMM too; its routing
    # overhead is the expert lane's own constant), and the experts at FP4.
    shape = BatchShape.from_requests(decodes=[1500] * 4)
    fp4_rf = RooflineCostModel(fp4, table_tokens=1)
    bf16_rf = RooflineCostModel(ReplicaConfig("deepseek-v3", "b200", tp=8), table_tokens=1)
    ops, bf16 = fp4_rf.breakdown(shape), bf16_rf.breakdown(shape)
    for op in ("qkv_proj", "attn_out_proj"):
        assert ops[op] == pytest.approx(bf16[op], rel=1e-9), op
    t = np.array([4.0])
    assert fp4_rf.attn_gemm(t, 7168, 256)[0] == pytest.approx(bf16_rf.gemm(t, 7168, 256)[0], rel=1e-9)
    assert fp4_rf.gemm(t, 7168, 256)[0] != pytest.approx(bf16_rf.gemm(t, 7168, 256)[0], rel=1e-3)
    assert ops["moe_experts"] < bf16["moe_experts"] / 2
    dense = RooflineCostModel(ReplicaConfig("llama-3.1-70b", "b200", tp=2, dtype="nvfp4"), table_tokens=1)
    dense_bf16 = RooflineCostModel(ReplicaConfig("llama-3.1-70b", "b200", tp=2), table_tokens=1)
    assert dense.breakdown(shape)["qkv_proj"] < dense_bf16.breakdown(shape)["qkv_proj"]


def test_metas_fp8_405b_prices_its_attention_as_the_bf16_checkpoints():
    """Meta's FP8 Llama-3.1-405B keeps self-attention at BF16: its projections' GEMMs are the BF16 checkpoint's,
    its MLPs FP8; the plain entry at --dtype fp8 (every layer quantised) prices them at FP8."""
    shape = BatchShape.from_requests(decodes=[1500] * 4)
    metas = RooflineCostModel(ReplicaConfig("llama-3.1-405b-fp8", "h100-sxm", tp=8, dtype="fp8"), table_tokens=1)
    bf16 = RooflineCostModel(ReplicaConfig("llama-3.1-405b", "h100-sxm", tp=8), table_tokens=1)
    every = RooflineCostModel(ReplicaConfig("llama-3.1-405b", "h100-sxm", tp=8, dtype="fp8"), table_tokens=1)
    ops, ops16, ops8 = metas.breakdown(shape), bf16.breakdown(shape), every.breakdown(shape)
    for op in ("qkv_proj", "attn_out_proj"):
        assert ops[op] == pytest.approx(ops16[op], rel=1e-9) and ops8[op] < ops[op], op
    for op in ("mlp_up_gate", "mlp_down"):
        assert ops[op] == pytest.approx(ops8[op], rel=1e-9) and ops[op] < ops16[op], op


@pytest.mark.parametrize("dtype", ["fp8", "nvfp4", "int4"])
def test_a_quantized_checkpoints_lm_head_is_priced_at_16_bits_as_memory_plans_it(dtype):
    """FP8/FP4 checkpoints leave lm_head unquantized (the memory plan holds it at 2 bytes); it was priced at
    the run's dtype (an NVFP4 Llama-3.1-8B's LM head at 0.12 ms on an H100, below the 0.31 ms its 1 GB takes)."""
    n = np.array([1.0, 64.0, 4096.0])
    q = RooflineCostModel(ReplicaConfig("llama-3.1-8b", "h100-sxm", dtype=dtype), table_tokens=1)
    bf16 = RooflineCostModel(ReplicaConfig("llama-3.1-8b", "h100-sxm"), table_tokens=1)
    np.testing.assert_allclose(q.lm_head_time(n), bf16.lm_head_time(n), rtol=1e-12)
    assert q.gemm(n, 4096, 14336)[0] < bf16.gemm(n, 4096, 14336)[0]  # the layers' GEMMs stay quantized


def test_a_short_windows_layers_hold_the_window_not_the_context():
    """gpt-oss's sliding layers attend over 128 tokens, and vLLM V1 frees their blocks that slide out of the
    window: a sequence holds window + block_size tokens in each, not its whole context. Counted like full
    layers, gpt-oss-120b on one H100 (MXFP4) held 127,552 tokens and was refused at its 131,072-token context,
    where vLLM serves it on one 80 GB GPU."""
    m = MODELS["gpt-oss-120b"]
    assert (m.num_windowed_layers, m.num_growing_kv_layers) == (18, 18)
    r = ReplicaConfig("gpt-oss-120b", "h100-sxm", dtype="mxfp4")
    plan = plan_memory(r, 8192, 256)
    per_layer = m.kv_bytes_per_token_per_gpu_layer(2, 1)
    budget = plan.kv_budget_bytes[0]
    assert plan.num_kv_tokens == pytest.approx(budget / (18 * per_layer), abs=plan.block_size)  # twice the full count
    assert plan.num_window_blocks == plan.num_state_blocks == (128 + 16) // 16  # 18 of 36 layers: one block each
    assert plan.num_kv_tokens - plan.num_state_blocks * plan.block_size >= 131_072
    # a long window (Mistral-7B-v0.1's 4096 on every layer) and a model without windows keep the per-token count
    assert MODELS["mistral-7b-v0.1"].num_windowed_layers == 0 == MODELS["llama-3.1-8b"].num_windowed_layers
    assert plan_memory(ReplicaConfig("mistral-7b-v0.1", "h100-sxm"), 8192, 256).num_state_blocks == 0


def test_windowed_blocks_balance_in_a_run():
    from simulator.config.run_config import RunConfig, WorkloadConfig
    from simulator.simulation import simulate

    config = RunConfig(replica=ReplicaConfig("gpt-oss-20b", "h100-sxm", dtype="mxfp4", num_gpu_blocks=400,
                                         max_model_len=4096),
                       workload=WorkloadConfig(num_requests=60, qps=50.0))
    result = simulate(config)
    assert result.memory.num_state_blocks == 9
    assert all(r.completed_at is not None for r in result.requests)
    assert all(r.num_blocks == 0 and r.num_state_blocks == 0 for r in result.requests)  # every block returned


def test_a_batch_that_fits_counts_each_sequences_window_blocks():
    """predict's and capacity's batch check compares the batch's KV with the plan's tokens; a sequence's window
    (and a hybrid's state) blocks sit beside its tokens: 1,800 gpt-oss-120b decodes of 100 tokens need 16 blocks
    each, 28,800 in all, of the 15,996 an H100 holds."""
    from simulator.engine.kvcache import batch_fit_problem

    r = ReplicaConfig("gpt-oss-120b", "h100-sxm", dtype="mxfp4")
    problem = batch_fit_problem(r, BatchShape.from_requests(decodes=[100] * 1800))
    assert problem is not None and problem[0] == "kv"
    assert batch_fit_problem(r, BatchShape.from_requests(decodes=[100] * 800)) is None


def test_the_kv_figure_says_it_is_the_whole_pool_and_gives_vllms_beside_it():
    """The KV cache figure is the whole pool in full-attention tokens; vLLM logs "GPU KV cache size" as its blocks
    over its KV cache groups (one block is one group's page): gpt-oss's 18 full and 18 sliding layers are 2 groups,
    so vLLM logs half (~127,560 on one H100), Qwen3.5's 15 full and 45 linear 4 groups, a quarter. A model of one
    layer kind (Llama-4-Scout's 12 full and 36 chunked are 4 groups of 12, each growing) logs the figure itself."""
    from simulator.config.run_config import SchedulerConfig
    from simulator.engine.kvcache import build_kv_cache, vllm_kv_cache_groups, vllm_reported_kv_tokens
    from simulator.report.metrics import summarize
    from simulator.simulation import simulate

    oss = ReplicaConfig("gpt-oss-120b", "h100-sxm", dtype="mxfp4")
    plan = build_kv_cache(oss, SchedulerConfig())[1]
    assert vllm_kv_cache_groups(oss) == (18, 2)
    assert plan.num_kv_tokens == 255_120 and vllm_reported_kv_tokens(oss, plan) == plan.num_blocks // 2 * 16 == 127_552
    qwen = ReplicaConfig("qwen3.5-397b-a17b", "b200", tp=4, dtype="nvfp4")
    plan = build_kv_cache(qwen, SchedulerConfig())[1]
    assert vllm_kv_cache_groups(qwen) == (15, 4)
    assert vllm_reported_kv_tokens(qwen, plan) == plan.num_blocks // 4 * plan.block_size
    for plain in (ReplicaConfig("llama-4-scout", "h100-sxm", tp=4), ReplicaConfig("llama-3.1-8b", "h100-sxm")):
        plan = build_kv_cache(plain, SchedulerConfig())[1]
        assert vllm_reported_kv_tokens(plain, plan) == plan.num_kv_tokens
    workload = WorkloadConfig("fixed", prompt_tokens=256, output_tokens=4, num_requests=2)
    summary = summarize(simulate(RunConfig(replica=oss, workload=workload)))
    assert (summary["kv_cache_tokens"], summary["kv_cache_tokens_vllm"]) == (255_120, 127_552)
    assert "kv_cache_tokens_vllm" not in summarize(simulate(RunConfig(replica=ReplicaConfig("llama-3.1-8b", "h100-sxm"),
                                                                      workload=workload)))
    out = runner.invoke(app, ["run", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--dtype", "mxfp4",
                                   "--workload", "fixed", "--num-requests", "2", "--no-progress"]).output
    assert 'KV cache 255,120 tokens of full attention, the whole pool (vLLM\'s "GPU KV cache size" 127,552' in \
        " ".join(out.split())


def test_kimi_k25s_int4_checkpoint_by_hand():
    """Kimi-K2.5's own checkpoint (compressed-tensors INT4, group 32, its ignore list: self_attn, shared_experts and
    layer 0's mlp) at --dtype int4: 0.5 + 2/32 bytes a routed-expert weight, the rest 16-bit. It was priced as GPTQ's
    group of 128 with its shared experts and dense MLP at 4 bits: 6 GiB a GPU short at TP8 (594 GB published)."""
    m = MODELS["kimi-k2.5"]
    r = ReplicaConfig("kimi-k2.5", "b200", tp=8, dtype="int4")
    assert r.weight_bytes == 0.5 + 2 / 32 and r.shared_experts_16bit and r.mlp_16bit_layers == (0,)
    experts = m.num_moe_layers * m.num_experts * m.expert_params
    sixteen = m.num_params - experts - 2 * m.embedding_params  # all else 16-bit (but the norms: 1.3 MB)
    whole = m.num_layers * m.replicated_attention_params * (1 - 1 / 8) * 2  # MLA's latent projections on every rank
    whole += m.num_moe_layers * m.hidden_size * m.num_experts * (1 - 1 / 8) * 2  # and the router gate
    per_gpu = r.layer_weights_bytes(m.num_layers)
    assert per_gpu == pytest.approx((experts * (0.5 + 2 / 32) + sixteen * 2) / 8 + whole, rel=1e-5)
    total_gb = (8 * (per_gpu - whole) + 2 * m.embedding_params * 2) / 1e9
    assert 590 < total_gb < 600  # the checkpoint's published ~594 GB
    # another format of the shape (NVIDIA's NVFP4 checkpoint) is not that checkpoint: its own rules
    fp4 = ReplicaConfig("kimi-k2.5", "b200", tp=8, dtype="nvfp4")
    assert not fp4.runs_checkpoint_format and not fp4.shared_experts_16bit and fp4.mlp_16bit_layers == ()
    assert ReplicaConfig("kimi-k2.5", "b200", tp=8, dtype="mxfp4").weight_bytes == 0.5 + 1 / 32  # (no group of 32)


def test_a_config_jsons_int4_group_is_read(tmp_path: Path):
    """A compressed-tensors or GPTQ config.json's group size prices the scales (128 is the format's own)."""
    from simulator.config.hf_config import model_from_hf_dict

    cfg = json.loads((Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3" / "config.json").read_text())
    packed = {"format": "pack-quantized", "quant_method": "compressed-tensors",
              "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 32}}}}
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "quantization_config": packed}))
    spec = model_from_hf_dict({**cfg, "quantization_config": packed}, "x")
    assert (spec.checkpoint_quant, spec.int4_group_size) == ("int4", 32)
    assert ReplicaConfig(str(tmp_path), "b200", tp=8, dtype="int4").weight_bytes == 0.5625
    assert ReplicaConfig(str(tmp_path), "b200", tp=8, dtype="mxfp4").weight_bytes == 0.5 + 1 / 32  # (its own scales)
    gptq = model_from_hf_dict({**cfg, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}, "x")
    assert (gptq.checkpoint_quant, gptq.int4_group_size) == ("int4", 0)
    per_channel = {"quant_method": "gptq", "bits": 4, "group_size": -1}
    assert model_from_hf_dict({**cfg, "quantization_config": per_channel}, "x").int4_group_size == 0
