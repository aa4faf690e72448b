"""Mixture of experts, MLA, FP8 and long context: hand calculations and behaviour.

KV bytes per token (per layer) by hand:
- MHA, Llama-2-7B: 2 (K, V) x 32 heads x 128 x 2 B = 16,384 B;
- GQA, Llama-3.1-8B: 2 x 8 KV heads x 128 x 2 B = 4,096 B, halved per GPU at TP2;
- MLA, DeepSeek-V3: (512 latent + 64 rope) x 2 B = 1,152 B, the same on every TP rank;
- FP8 halves each (1 B per element).
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.catalog import MODELS
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel import BatchShape, RooflineCostModel
from simulator.costmodel.moe import expected_destination_ranks, expected_experts_touched
from simulator.engine.kvcache import plan_memory
from simulator.simulation import simulate
from simulator.workload.generate import generate_requests

GiB = 2**30


@pytest.mark.parametrize(("model", "tp", "kv_dtype", "expected"), [
    ("llama-2-7b", 1, "auto", 16384),
    ("llama-3.1-8b", 1, "auto", 4096),
    ("llama-3.1-8b", 2, "auto", 2048),
    ("llama-3.1-8b", 2, "fp8", 1024),
    ("deepseek-v3", 1, "auto", 1152),
    ("deepseek-v3", 8, "auto", 1152),
    ("deepseek-v3", 8, "fp8", 576),
])
def test_kv_bytes_per_token_by_hand(model, tp, kv_dtype, expected):
    r = ReplicaConfig(model, "h200", tp=tp, kv_cache_dtype=kv_dtype)
    assert r.model_spec.kv_bytes_per_token_per_gpu_layer(r.kv_cache_bytes, tp) == expected
    assert RooflineCostModel(r, table_tokens=1).kv_bytes_per_token == expected


def test_fp8_kv_doubles_the_kv_tokens():
    bf16 = plan_memory(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4), 2048, 128)
    fp8 = plan_memory(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4, kv_cache_dtype="fp8"), 2048, 128)
    assert fp8.weights_bytes == bf16.weights_bytes
    assert fp8.num_kv_tokens == pytest.approx(2 * bf16.num_kv_tokens, abs=32)


def test_fp8_and_int4_weights_shrink_memory_and_decode_time():
    plans = {d: plan_memory(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4, dtype=d), 2048, 128)
             for d in ("bf16", "fp8", "int4")}
    m = MODELS["llama-3.1-70b"]
    emb = 2 * m.vocab_size * m.hidden_size * 2 / 4  # embedding + LM head stay bf16
    layers = m.num_layers * m.params_per_layer / 4
    assert plans["bf16"].weights_bytes[0] == pytest.approx(layers * 2 + emb)
    assert plans["fp8"].weights_bytes[0] == pytest.approx(layers * 1 + emb)
    assert plans["int4"].weights_bytes[0] == pytest.approx(layers * (0.5 + 2 / 128) + emb)
    assert plans["int4"].num_kv_tokens > plans["fp8"].num_kv_tokens > plans["bf16"].num_kv_tokens
    decode = BatchShape.from_requests(decodes=[1024] * 8)
    times = {d: RooflineCostModel(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4, dtype=d)).iteration_time(decode)
             for d in ("bf16", "fp8", "int4")}
    # Fewer weight bytes make the memory-bound decode faster (int4 runs at the bf16 tensor-core
    # peak, fp8 at the FP8 peak, so which of the two wins depends on the batch).
    assert times["int4"] < 0.8 * times["bf16"] and times["fp8"] < 0.8 * times["bf16"]


def test_fp8_gemms_use_the_fp8_peak_only_where_the_gpu_has_one():
    big = np.array([8192.0])
    # The 2023 constants: one GEMM efficiency at either peak ('today' gives FP8 a lane of its own, with an
    # activation-quantisation cost: tests/test_roofline_today.py).
    for gpu, speedup in (("h100-sxm", True), ("a100-80gb", False)):
        bf16 = RooflineCostModel(ReplicaConfig("llama-3.1-8b", gpu, roofline_calibration="2023"), table_tokens=1)
        fp8 = RooflineCostModel(ReplicaConfig("llama-3.1-8b", gpu, dtype="fp8", roofline_calibration="2023"),
                                table_tokens=1)
        t_bf16, t_fp8 = float(bf16.gemm(big, 4096, 14336)[0]), float(fp8.gemm(big, 4096, 14336)[0])
        if speedup:  # compute-bound: twice the peak, close to half the time
            assert t_fp8 == pytest.approx(t_bf16 / 2, rel=0.1)
        else:  # weight-only dequant on A100: same tensor-core peak
            assert t_fp8 == pytest.approx(t_bf16, rel=0.02)


@pytest.mark.parametrize("batch", [1, 2, 4, 8, 16, 64])
def test_expert_touch_count_vs_batch_size(batch):
    m = MODELS["deepseek-v3"]  # 256 experts, top-8
    touched = float(expected_experts_touched(batch, m.num_experts, m.num_experts_per_tok))
    assert touched <= min(batch * 8, 256) + 1e-9
    if batch == 1:
        assert touched == pytest.approx(8)  # one token reads exactly its k experts
    # Independent of the formula: draw each token's k distinct experts uniformly and count
    # the distinct experts the batch touches (seeded Monte Carlo, 2,000 batches).
    rng = np.random.default_rng(batch)
    counts = [len({e for _ in range(batch) for e in rng.choice(256, size=8, replace=False)}) for _ in range(2000)]
    assert touched == pytest.approx(np.mean(counts), rel=0.02)


def test_decode_batch_of_8_touches_at_most_8k_and_prefill_touches_all():
    mix = MODELS["mixtral-8x7b"]
    assert float(expected_experts_touched(8, mix.num_experts, 2)) <= 16
    assert float(expected_experts_touched(512, mix.num_experts, 2)) == pytest.approx(8)
    qwen = MODELS["qwen3-30b-a3b"]
    assert float(expected_experts_touched(8, qwen.num_experts, qwen.num_experts_per_tok)) < 64
    assert float(expected_experts_touched(2048, qwen.num_experts, qwen.num_experts_per_tok)) == pytest.approx(128)
    counts = expected_experts_touched(np.arange(1, 300), qwen.num_experts, qwen.num_experts_per_tok)
    assert np.all(np.diff(counts) > 0)


def test_moe_decode_reads_only_the_touched_experts():
    rf = RooflineCostModel(ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=2))
    ops = rf.token_ops(np.array([1.0, 512.0]))
    # One token, top-2: two experts' weights (3 x 4096 x 14336 x 2 B, halved by TP2) from HBM.
    from simulator.costmodel.moe import expert_calibration
    ec = expert_calibration(rf)
    two_experts = 2 * 3 * 4096 * 14336 * 2 / 2 / (rf.gpu.hbm_bytes_per_s * ec.memory_eff)
    assert ops["moe_experts"][0] == pytest.approx(two_experts + 2 * rf.cal.kernel_floor_s, rel=0.01)
    assert "mlp_up_gate" in ops and ops["mlp_up_gate"][0] == 0.0  # no dense MLP layers in Mixtral
    assert ops["moe_experts"][1] > 3 * ops["moe_experts"][0]  # a prefill chunk reads all 8 and computes


def test_imbalance_slows_the_experts():
    shape = np.array([4096.0])
    base = RooflineCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm"), table_tokens=1).token_ops(shape)
    skew = RooflineCostModel(ReplicaConfig("qwen3-30b-a3b", "h100-sxm", moe_imbalance=1.5),
                             table_tokens=1).token_ops(shape)
    # 1.5x the busiest expert's tokens: more FLOPs, partly offset by the better GEMM efficiency.
    assert skew["moe_experts"][0] > 1.15 * base["moe_experts"][0]


@pytest.mark.parametrize(("num_experts", "top_k", "ep"), [(256, 8, 4), (256, 8, 8), (256, 8, 32), (8, 2, 2), (128, 8, 16)])
def test_a_dispatch_sends_a_token_once_to_each_rank_holding_its_experts(num_experts, top_k, ep):
    """The closed form against sampled routings: top-k distinct experts, E/ep contiguous experts a rank."""
    rng = np.random.default_rng(7)
    picks = np.argsort(rng.random((20_000, num_experts)), axis=1)[:, :top_k]  # k distinct experts a token
    ranks = picks // (num_experts // ep)
    sampled = np.mean([len(np.unique(row)) for row in ranks])
    assert expected_destination_ranks(num_experts, top_k, ep) == pytest.approx(sampled, rel=0.01)
    assert 1.0 <= expected_destination_ranks(num_experts, top_k, ep) <= min(top_k, ep)
    assert expected_destination_ranks(num_experts, top_k, 1) == 1.0


def test_all_to_all_bytes_follow_the_ranks_a_token_reaches():
    """Dispatch and combine move a token once per remote rank it touches: at EP 4 (DeepSeek-V3, top-8 of 256)
    3.61 ranks, not 8 copies, so the bandwidth part is 3.61 / 8 of a per-expert count's."""
    shape = np.array([8192.0])
    r = ReplicaConfig("deepseek-v3", "b200", tp=1, attention_dp=4, ep=4, dtype="fp8")
    rf = RooflineCostModel(r)
    a2a = float(rf.token_ops(shape)["ep_all_to_all"][0]) / (1.0 - rf.dense_fraction)  # a MoE layer's (58 of 61)
    latency = 2 * rf.cal.allreduce_latency_s
    per_byte = 2 * 8192 * r.model_spec.hidden_size * rf.dtype_bytes * 3 / 4 / (rf.ep_link_bytes_per_s * rf.cal.allreduce_bus_eff)
    assert a2a - latency == pytest.approx(expected_destination_ranks(256, 8, 4) * per_byte, rel=1e-9)


def test_expert_parallelism_prices_all_to_all_only_under_attention_dp():
    """EP over a TP group keeps the MLP all-reduce (each GPU runs its experts on the tokens it already
    holds); under attention DP the all-reduce becomes dispatch and combine all-to-alls over the link."""
    shape = BatchShape.from_requests(prefills=[(2048, 0)])
    tp_only = RooflineCostModel(ReplicaConfig("deepseek-v3", "h200", tp=8, dtype="fp8")).breakdown(shape)
    tp_ep = RooflineCostModel(ReplicaConfig("deepseek-v3", "h200", tp=8, ep=8, dtype="fp8")).breakdown(shape)
    assert tp_only["ep_all_to_all"] == tp_ep["ep_all_to_all"] == 0.0
    assert tp_ep["tp_all_reduce"] == pytest.approx(tp_only["tp_all_reduce"])
    dp = RooflineCostModel(ReplicaConfig("deepseek-v3", "h200", tp=2, attention_dp=4, ep=8, dtype="fp8"))
    dp_ops = dp.breakdown(shape)
    assert dp_ops["ep_all_to_all"] > 0.0
    tp2 = RooflineCostModel(ReplicaConfig("deepseek-v3", "h200", tp=2, attention_dp=4, dtype="fp8")).breakdown(shape)
    assert dp_ops["tp_all_reduce"] == pytest.approx(tp2["tp_all_reduce"])  # both swap the MLP's for collectives
    # Dense layers (DeepSeek's first 3) keep their MLP ops.
    assert tp_only["mlp_up_gate"] > 0.0


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(model="llama-3.1-8b", tp=2, ep=2), "replica.ep"),
    (dict(model="mixtral-8x7b", tp=4, ep=3), "replica.ep"),
    (dict(model="mixtral-8x7b", dtype="fp6"), "replica.dtype"),
    (dict(model="mixtral-8x7b", kv_cache_dtype="int8"), "replica.kv_cache_dtype"),
    (dict(model="mixtral-8x7b", moe_imbalance=0.5), "replica.moe_imbalance"),
])
def test_bad_moe_and_dtype_options(kwargs, field):
    with pytest.raises(ConfigError) as err:
        ReplicaConfig(gpu="h100-sxm", **kwargs)
    assert err.value.field == field


def test_moe_memory_counts_every_expert_by_hand():
    # Mixtral-8x7B on 2x H100: all 8 experts of every layer are resident; the router gate (4096 x 8) is whole on
    # both GPUs, as vLLM's replicated gate is.
    m = MODELS["mixtral-8x7b"]
    per_layer = 4096 * 6144 + 4096 * 4096 + 8 * 3 * 4096 * 14336 + 4096 * 8 + 2 * 4096
    weights = (32 * per_layer + 2 * 32000 * 4096) * 2 / 2
    plan = plan_memory(ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=2), 512, 128)
    assert plan.weights_bytes[0] == pytest.approx(weights + 32 * 4096 * 8 * 2 / 2, rel=1e-9)
    # KV: 32 layers x 2 x (8 KV heads / 2) x 128 x 2 B per token on each GPU.
    assert plan.kv_bytes_per_token[0] == 32 * 2 * 4 * 128 * 2
    assert m.num_params * 2 / 2 == pytest.approx(weights, rel=1e-6)


def test_mla_memory_and_decode_attention():
    plan = plan_memory(ReplicaConfig("deepseek-v3", "h200", tp=8, dtype="fp8", kv_cache_dtype="fp8"), 2048, 128)
    assert plan.kv_bytes_per_token[0] == 61 * 576
    with pytest.raises(ConfigError, match="does not fit"):
        plan_memory(ReplicaConfig("deepseek-v3", "h200", tp=8), 2048, 128)  # 1.34 TB of bf16 weights on 8 GPUs
    # 2023 constants: MLA decode reads its latent at the decode bandwidth ('today' fits MLA its own)
    rf = RooflineCostModel(ReplicaConfig("deepseek-v3", "h200", tp=8, ep=8, dtype="fp8", kv_cache_dtype="fp8",
                                         roofline_calibration="2023"))
    short = rf.attention_decode(BatchShape.from_requests(decodes=[1024] * 32))
    long = rf.attention_decode(BatchShape.from_requests(decodes=[32768] * 32))
    assert long > 10 * short  # reads grow with context
    # The latent is read once for all heads: 32 x 32K tokens x 576 B at the decode bandwidth.
    floor = 32 * 32768 * 576 / (rf.gpu.hbm_bytes_per_s * rf.cal.attn_decode_memory_eff)
    assert floor <= long <= 1.5 * floor


def test_sliding_window_caps_attention():
    rf = RooflineCostModel(ReplicaConfig("gpt-oss-120b", "h100-sxm", tp=2), table_tokens=1)
    shape = BatchShape.from_requests(decodes=[65536] * 16)
    windowed = rf.attention_decode(shape)
    rf.sliding_fraction = 0.0  # the same model with full attention in every layer
    full = rf.attention_decode(shape)
    # Half the layers read at most 128 keys per sequence: about half the full-attention reads.
    assert windowed == pytest.approx(0.5 * full, rel=0.05)


def test_long_context_workload_and_a_128k_request_end_to_end():
    wl = WorkloadConfig(name="long-context", num_requests=200, qps=1.0)
    reqs = generate_requests(wl, np.random.default_rng(0))
    total = reqs.num_prompt_tokens + reqs.num_output_tokens
    assert reqs.num_prompt_tokens.min() >= 32768 and total.max() <= 131072
    assert np.median(reqs.num_prompt_tokens) > 50000
    # One 127K prompt and one 32K prompt, chunked prefill: both finish; attention grows with context.
    results = {}
    for prompt in (32768, 126976):
        cfg = RunConfig(replica=ReplicaConfig("llama-3.1-8b", "h100-sxm"),
                        scheduler=SchedulerConfig("sarathi", chunk_size=2048),
                        workload=WorkloadConfig(name="fixed", prompt_tokens=prompt, output_tokens=16, num_requests=1,
                                                qps=1.0))
        res = simulate(cfg)
        req = res.requests[0]
        assert req.completed_at is not None
        results[prompt] = req.first_token_at - req.arrival_at
    assert results[126976] > 4.5 * results[32768]  # more than linear: attention over the growing context


def test_mixtral_h100_decode_ops_within_15_percent_of_llmservingsim(shared_data):
    """The acceptance check, fast form: held-out rows of the MoE families at decode sizes
    (<= 256 tokens), roofline with the committed expert constants and learned curves fitted on
    the training rows (results/fidelity/moe.md has the full report)."""
    from simulator.calibrate.fit import ape, fit_curve
    from simulator.calibrate.fit_moe import DECODE_MAX_TOKENS, load_tables, roofline_predict, split
    from simulator.costmodel.moe import EXPERT_CALIBRATION

    rows = load_tables(shared_data / "profiles")
    train, held = split(rows)
    held = held[held["tokens"] <= DECODE_MAX_TOKENS]
    ec = EXPERT_CALIBRATION["h100-sxm"]
    for family in ("moe_gate", "expert_w1", "expert_w2", "expert_w3"):
        for tp in (1, 2, 4):
            test = held[(held["family"] == family) & (held["tp"] == tp)]
            x, y = test["tokens"].to_numpy(), test["measured_s"].to_numpy()
            assert np.median(ape(roofline_predict(family, tp, x, ec), y)) < 0.15, (family, tp)
    for family in ("moe_gate", "expert_w1"):
        tr = train[(train["family"] == family) & (train["tp"] == 1)]
        curve, _, _ = fit_curve(tr["tokens"].to_numpy(), tr["measured_s"].to_numpy())
        test = held[(held["family"] == family) & (held["tp"] == 1)]
        assert np.median(ape(curve(test["tokens"].to_numpy()), test["measured_s"].to_numpy())) < 0.15


def test_learned_cost_model_fits_and_composes_moe_ops(shared_data):
    """`simulate fit` on LLMServingSim's Mixtral table learns the router and per-expert curves; the
    learned model composes them over the touched experts and agrees with the roofline's MoE ops."""
    from simulator.calibrate.fit import fit_tables
    from simulator.calibrate.fit_data import read_profile
    from simulator.costmodel.learned import LearnedCostModel

    table = read_profile(shared_data / "profiles/llmservingsim/H100/mistralai/Mixtral-8x7B-v0.1/tp1/layers.csv")
    table = table[table["op"].str.startswith("moe") & (table["num_tokens"] % 16 == 0)]
    artifact = fit_tables(table)
    assert artifact["model"] == "mixtral-8x7b" and artifact["tp"] == 1
    assert {"moe_gate", "moe_expert_up", "moe_expert_down", "moe_expert_act"} <= set(artifact["learned_ops"])
    assert "moe_experts" not in artifact["roofline_ops"] and "moe_router" not in artifact["roofline_ops"]
    # the roofline at the constants calibrated on these LLMServingSim tables (2023's)
    replica = ReplicaConfig("mixtral-8x7b", "h100-sxm", roofline_calibration="2023")
    learned, roofline = LearnedCostModel(replica, artifact), RooflineCostModel(replica)
    for batch in (1, 8, 64):
        shape = BatchShape.from_requests(decodes=[1024] * batch)
        lb, rb = learned.breakdown(shape), roofline.breakdown(shape)
        assert lb["moe_experts"] == pytest.approx(rb["moe_experts"], rel=0.15)
        assert lb["moe_router"] == pytest.approx(rb["moe_router"], rel=0.3)
    # Attention DP (four 1-GPU ranks, ep=4): the experts see the group's tokens on both models.
    replica = ReplicaConfig("mixtral-8x7b", "h100-sxm", attention_dp=4, ep=4, roofline_calibration="2023")
    learned_dp, roofline_dp = LearnedCostModel(replica, artifact), RooflineCostModel(replica)
    for batch in (1, 8, 64):
        shape = BatchShape.from_requests(decodes=[1024] * batch)
        assert learned_dp.breakdown(shape)["moe_experts"] == pytest.approx(roofline_dp.breakdown(shape)["moe_experts"],
                                                                           rel=0.15)
    # One token, top-2: two experts' w1+w3+w2 at one token each, in all 32 layers.
    one = learned.breakdown(BatchShape.from_requests(decodes=[1024]))["moe_experts"]
    per_expert = sum(float(learned.curves[op](np.array([1.0]))[0]) for op in ("moe_expert_up", "moe_expert_down"))
    assert one == pytest.approx(32 * 2 * per_expert, rel=1e-6)


def test_learned_all_reduce_under_ep_is_counted_as_the_roofline_counts_it():
    """EP over a TP group keeps each MoE layer's MLP all-reduce; under attention DP it becomes
    all-to-alls plus an all-gather (the roofline's ``ep_all_to_all``), and a learned all-reduce curve
    prices only the attention's."""
    from simulator.costmodel.learned import LearnedCostModel
    from simulator.costmodel.learned_schema import Curve

    curve = Curve(np.array([1.0, 1e6, 1e8]), np.array([1e-5, 2e-5, 1e-3]))
    shape = BatchShape.from_requests(decodes=[1024] * 16)
    tokens_bytes = np.array([16.0 * 4096 * 2])  # Mixtral's hidden size, bf16
    one = float(curve(tokens_bytes)[0])
    per_layer = {}
    for name, kw in {"tp": dict(ep=1), "tp+ep": dict(ep=2), "dp+ep": dict(attention_dp=2, ep=4)}.items():
        replica = ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=2, **kw)
        artifact = {"model": "mixtral-8x7b", "tp": 2, "gpu": "h100-sxm", "curves": {"all_reduce": curve.to_json()}}
        learned, roofline = LearnedCostModel(replica, artifact), RooflineCostModel(replica)
        ops = learned.token_ops(np.array([16.0]))
        per_layer[name] = float(ops["tp_all_reduce"][0])
        assert float(ops["ep_all_to_all"][0]) == pytest.approx(float(roofline.token_ops(np.array([16.0]))["ep_all_to_all"][0]))
        assert learned.breakdown(shape)["tp_all_reduce"] == pytest.approx(32 * per_layer[name])
    assert per_layer["tp"] == pytest.approx(2 * one)  # attention's and the MLP's
    assert per_layer["tp+ep"] == pytest.approx(2 * one)  # the same: EP without DP keeps the MLP all-reduce
    assert per_layer["dp+ep"] == pytest.approx(one)  # every Mixtral layer is MoE: the attention's only


@pytest.mark.parametrize(("tp", "ep"), [(1, 1), (2, 1), (4, 2), (8, 8)])
def test_learned_experts_are_placed_as_the_roofline_places_them(tp: int, ep: int):
    """A GPU holds ``touched / ep`` of the touched experts, each a ``1 / moe_tp`` slice of a whole
    expert (``moe_tp = tp / ep``): whole-expert curves are priced per slice, for any tp and ep."""
    from simulator.costmodel.learned import LearnedCostModel
    from simulator.costmodel.learned_schema import Curve

    up = Curve(np.array([1.0, 64.0, 4096.0]), np.array([2e-5, 3e-5, 6e-4]))
    down = Curve(np.array([1.0, 64.0, 4096.0]), np.array([1e-5, 2e-5, 3e-4]))
    replica = ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=tp, ep=ep)
    artifact = {"model": "mixtral-8x7b", "tp": tp, "gpu": "h100-sxm",
                "curves": {"moe_expert_up": up.to_json(), "moe_expert_down": down.to_json()}}
    learned = LearnedCostModel(replica, artifact)
    m = replica.model_spec
    for tokens in (1.0, 16.0, 512.0):
        touched = float(expected_experts_touched(np.array([tokens]), m.num_experts, m.num_experts_per_tok)[0])
        per_expert = replica.moe_imbalance * tokens * m.num_experts_per_tok / touched
        whole = float(up(np.array([per_expert]))[0] + down(np.array([per_expert]))[0])
        expected = (touched / ep) * whole / (tp // ep)  # this GPU's experts, each a 1/moe_tp slice
        got = float(learned.token_ops(np.array([tokens]))["moe_experts"][0])
        assert got == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(("tp", "dp", "ep"), [(1, 4, 4), (2, 2, 4), (2, 2, 1), (1, 2, 2)])
def test_learned_experts_under_attention_dp_are_placed_as_the_roofline_places_them(tp: int, dp: int, ep: int):
    """Issue 26 step 6: with attention DP the routed experts see every rank's tokens and are spread
    over the group's ``tp * dp`` GPUs, ``ep`` ways, each expert over ``moe_tp = tp * dp / ep``: a
    GPU runs ``touched / ep`` experts, each a ``1 / moe_tp`` slice, of the group's tokens (not
    ``touched / tp``, which prices alike only where ``ep`` divides ``tp`` without DP)."""
    from simulator.costmodel.learned import LearnedCostModel
    from simulator.costmodel.learned_schema import Curve

    up = Curve(np.array([1.0, 64.0, 4096.0]), np.array([2e-5, 3e-5, 6e-4]))
    down = Curve(np.array([1.0, 64.0, 4096.0]), np.array([1e-5, 2e-5, 3e-4]))
    replica = ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=tp, attention_dp=dp, ep=ep, moe_imbalance=1.25)
    artifact = {"model": "mixtral-8x7b", "tp": tp, "gpu": "h100-sxm",
                "curves": {"moe_expert_up": up.to_json(), "moe_expert_down": down.to_json()}}
    learned = LearnedCostModel(replica, artifact)
    num_e, k = 8, 2  # Mixtral's experts, top-2
    for tokens in (1.0, 3.0, 16.0, 512.0):  # per DP rank
        group = dp * tokens  # every rank's tokens meet in the MoE layer
        touched = num_e * (1.0 - (1.0 - k / num_e) ** group)
        per_expert = 1.25 * group * k / touched  # the busiest expert's tokens
        whole = float(up(np.array([per_expert]))[0] + down(np.array([per_expert]))[0])
        experts_per_gpu, moe_tp = touched / ep, tp * dp // ep
        expected = experts_per_gpu * whole / moe_tp
        old_rule = touched / tp * whole
        assert expected != pytest.approx(old_rule, rel=1e-3)  # the layout tells the placements apart
        got = float(learned.token_ops(np.array([tokens]))["moe_experts"][0])
        assert got == pytest.approx(expected, rel=1e-9), f"{tokens=}: moe.py's rule {expected}, touched / tp {old_rule}"


@pytest.mark.parametrize("ep", [1, 4])
def test_learned_collectives_under_attention_dp_are_the_roofline_s(ep: int):
    """With attention DP a MoE layer's MLP all-reduce gives way to the roofline's collectives (a
    gather and scatter over the group without EP, dispatch and combine with it): a learned
    all-reduce curve prices only the attention's, per rank; attention-side curves see one rank's
    tokens."""
    from simulator.costmodel.learned import LearnedCostModel
    from simulator.costmodel.learned_schema import Curve

    curve = Curve(np.array([1.0, 1e6, 1e8]), np.array([1e-5, 2e-5, 1e-3]))
    qkv = Curve(np.array([1.0, 64.0, 4096.0]), np.array([1e-5, 2e-5, 4e-4]))
    replica = ReplicaConfig("mixtral-8x7b", "h100-sxm", tp=2, attention_dp=2, ep=ep)
    artifact = {"model": "mixtral-8x7b", "tp": 2, "gpu": "h100-sxm",
                "curves": {"all_reduce": curve.to_json(), "qkv_proj": qkv.to_json()}}
    learned, roofline = LearnedCostModel(replica, artifact), RooflineCostModel(replica)
    t = np.array([16.0])
    ops, rf_ops = learned.token_ops(t), roofline.token_ops(t)
    assert float(ops["ep_all_to_all"][0]) > 0.0
    assert float(ops["ep_all_to_all"][0]) == float(rf_ops["ep_all_to_all"][0])
    # Every Mixtral layer is MoE: the attention's all-reduce only, at this rank's 16 tokens.
    assert float(ops["tp_all_reduce"][0]) == pytest.approx(float(curve(t * 4096 * 2)[0]))
    assert float(ops["qkv_proj"][0]) == float(qkv(t)[0])


def test_redundant_experts_let_ep_divide_the_expert_slots_and_cost_their_weights():
    """DeepSeek-V3's 256 experts over 48 EP ranks need redundant copies (SGLang's --ep-num-redundant-experts):
    with 32, each rank holds 288 / 48 = 6 experts, and the weights grow by exactly those copies."""
    with pytest.raises(ConfigError) as err:
        ReplicaConfig("deepseek-v3", "gb200", tp=1, attention_dp=48, ep=48, dtype="fp8", num_nodes=6)
    assert err.value.field == "replica.ep" and "place 32 redundant experts" in err.value.fix
    plain = ReplicaConfig("deepseek-v3", "gb200", tp=1, attention_dp=8, ep=8, dtype="fp8")
    spare = ReplicaConfig("deepseek-v3", "gb200", tp=1, attention_dp=8, ep=8, dtype="fp8", redundant_experts=32)
    m = MODELS["deepseek-v3"]
    extra = plan_memory(spare, 2048, 64).weights_bytes[0] - plan_memory(plain, 2048, 64).weights_bytes[0]
    assert extra == pytest.approx(m.num_moe_layers * 32 * m.expert_params / 8 * spare.weight_bytes, rel=1e-9)
    ReplicaConfig("deepseek-v3", "gb200", tp=1, attention_dp=48, ep=48, dtype="fp8", num_nodes=6, redundant_experts=32)
    for bad in (dict(ep=1, redundant_experts=8), dict(ep=8, redundant_experts=-1)):
        with pytest.raises(ConfigError) as err:
            ReplicaConfig("deepseek-v3", "gb200", tp=1, attention_dp=8, dtype="fp8", **bad)
        assert err.value.field == "replica.redundant_experts"
    with pytest.raises(ConfigError, match="redundant copies"):  # 256 + 8 slots over 48 ranks
        ReplicaConfig("deepseek-v3", "gb200", tp=1, attention_dp=48, ep=48, dtype="fp8", num_nodes=6,
                      redundant_experts=8)
