"""Memory per stage: weights, activation reserve and KV capacity against hand calculations.

DESIGN.md: capacity per replica = (GPU memory x utilisation - weights/TP/PP - activation
reserve) / KV bytes per token per GPU, with KV bytes per token per layer =
2 x kv_heads x head_dim x dtype bytes, sharded by TP, layers split by PP; the tightest
stage decides. Below, model dimensions are typed in from each model's Hugging Face
``config.json`` (not read from the catalog, so a catalog typo fails here), and the
arithmetic is written out step by step.
"""

from __future__ import annotations

import pytest

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.engine.kvcache import plan_memory
from simulator.simulation import simulate

GiB = 2**30
BUDGET, SEQS, BLOCK = 512, 128, 16  # max_num_batched_tokens, max_num_seqs, block size

# model: (layers, hidden, heads, kv_heads, ffn, vocab, gated_mlp, tied_embeddings) from config.json
HF_DIMS = {
    "llama-2-7b": (32, 4096, 32, 32, 11008, 32000, True, False),
    "llama-2-13b": (40, 5120, 40, 40, 13824, 32000, True, False),
    "llama-2-70b": (80, 8192, 64, 8, 28672, 32000, True, False),
    "llama-3-8b": (32, 4096, 32, 8, 14336, 128256, True, False),
    "llama-3-70b": (80, 8192, 64, 8, 28672, 128256, True, False),
    "llama-3.3-70b": (80, 8192, 64, 8, 28672, 128256, True, False),
    "llama-3.2-3b": (28, 3072, 24, 8, 8192, 128256, True, True),
    "mistral-7b-v0.3": (32, 4096, 32, 8, 14336, 32768, True, False),
    "mistral-7b": (32, 4096, 32, 8, 14336, 32000, True, False),
    "mistral-7b-v0.1": (32, 4096, 32, 8, 14336, 32000, True, False),  # its 4096-token window: counted like full layers
    "llama-33b": (60, 6656, 52, 52, 17920, 32000, True, False),
    "yi-34b": (60, 7168, 56, 8, 20480, 64000, True, False),
    "yi-34b-200k": (60, 7168, 56, 8, 20480, 64000, True, False),
    "codellama-34b": (48, 8192, 64, 8, 22016, 32000, True, False),
    "qwen-72b": (80, 8192, 64, 64, 24576, 152064, True, False),
    "internlm-20b": (60, 5120, 40, 40, 13824, 103168, True, False),
    "phi-2": (32, 2560, 32, 32, 10240, 51200, False, False),
    "falcon-180b": (80, 14848, 232, 8, 59392, 65024, False, True),
    "tiny-llama-1b": (22, 2048, 32, 4, 5632, 32000, True, False),
    "llama-3.1-8b": (32, 4096, 32, 8, 14336, 128256, True, False),
    "llama-3.1-70b": (80, 8192, 64, 8, 28672, 128256, True, False),
    "llama-3.1-405b": (126, 16384, 128, 8, 53248, 128256, True, False),
    "llama-3.1-405b-fp8": (126, 16384, 128, 8, 53248, 128256, True, False),  # (at bf16 here: its FP8 form below)
    "qwen2.5-7b": (28, 3584, 28, 4, 18944, 152064, True, False),
    "qwen2.5-72b": (80, 8192, 64, 8, 29568, 152064, True, False),
}

# Reference layouts: the papers' (Sarathi-Serve: Mistral-7B 1xA100, Yi-34B TP2, LLaMA2-70B
# TP4-PP2 on A40, Falcon-180B TP4-PP2 on 2 nodes), else the smallest usual one that fits.
# model: (gpu, memory GiB, tp, pp, nodes)
LAYOUTS = {
    "llama-2-7b": ("a100-80gb", 80, 1, 1, 1),
    "llama-2-13b": ("a100-80gb", 80, 1, 1, 1),
    "llama-2-70b": ("a40", 48, 4, 2, 1),
    "llama-3-8b": ("a100-80gb", 80, 1, 1, 1),
    "llama-3-70b": ("a100-80gb", 80, 4, 1, 1),
    "llama-3.3-70b": ("h100-sxm", 80, 4, 1, 1),
    "llama-3.2-3b": ("a100-80gb", 80, 1, 1, 1),
    "mistral-7b-v0.3": ("a100-80gb", 80, 1, 1, 1),
    "mistral-7b": ("a100-80gb", 80, 1, 1, 1),
    "mistral-7b-v0.1": ("a100-80gb", 80, 1, 1, 1),
    "llama-33b": ("a100-80gb", 80, 1, 1, 1),  # Spec-Bench's Vicuna-33B: 65 GB of FP16 weights on one A100
    "yi-34b": ("a100-80gb", 80, 2, 1, 1),
    "yi-34b-200k": ("a100-80gb", 80, 2, 1, 1),
    "codellama-34b": ("a100-80gb", 80, 2, 1, 1),
    "qwen-72b": ("a100-80gb", 80, 4, 1, 1),
    "internlm-20b": ("a100-80gb", 80, 1, 1, 1),
    "phi-2": ("a100-80gb", 80, 1, 1, 1),
    "falcon-180b": ("a100-80gb", 80, 4, 2, 2),
    "tiny-llama-1b": ("a40", 48, 1, 1, 1),
    "llama-3.1-8b": ("h100-sxm", 80, 1, 1, 1),
    "llama-3.1-70b": ("h100-sxm", 80, 4, 1, 1),
    "llama-3.1-405b": ("h100-sxm", 80, 8, 2, 2),
    "llama-3.1-405b-fp8": ("h100-sxm", 80, 8, 2, 2),
    "qwen2.5-7b": ("a100-80gb", 80, 1, 1, 1),
    "qwen2.5-72b": ("a100-80gb", 80, 4, 1, 1),
}


def hand_kv_tokens(model: str) -> tuple[int, list[float]]:
    """KV tokens of one replica and per-GPU weight bytes per stage, by the DESIGN.md formula."""
    layers, h, heads, kv_heads, ffn, vocab, gated, tied = HF_DIMS[model]
    _, mem_gib, tp, pp, _ = LAYOUTS[model]
    head_dim = h // heads
    q = heads * head_dim
    kv = kv_heads * head_dim
    params_per_layer = h * (q + 2 * kv) + q * h + (3 if gated else 2) * h * ffn + 2 * h  # QKV, O, MLP, norms
    kv_heads_per_gpu = max(1, kv_heads // tp)  # a GPU keeps at least one KV head
    # vLLM's profiling run: widest intermediates for BUDGET tokens, fp32 logits per sequence, 1 GiB non-torch.
    act_per_token = (q // tp + 2 * kv_heads_per_gpu * head_dim + (3 if gated else 2) * ffn // tp + 4 * h) * 2
    activation = GiB + BUDGET * act_per_token + min(SEQS, BUDGET) * vocab * 4
    usable = mem_gib * GiB * 0.9
    base, extra = divmod(layers, pp)
    tokens, weights = [], []
    for s in range(pp):
        n = base + (1 if s < extra else 0)
        params = n * params_per_layer
        if s == 0:
            params += vocab * h  # embedding
        if s == pp - 1 and (not tied or pp > 1):
            params += vocab * h  # LM head (its own copy when it sits on another stage)
        w = params * 2 / tp
        weights.append(w)
        kv_bytes_per_token = n * 2 * kv_heads_per_gpu * head_dim * 2
        tokens.append((usable - w - activation) / kv_bytes_per_token)
    return int(min(tokens)) // BLOCK * BLOCK, weights


def _plan(model: str):
    gpu, _, tp, pp, nodes = LAYOUTS[model]
    return plan_memory(ReplicaConfig(model, gpu, tp=tp, pp=pp, num_nodes=nodes), BUDGET, SEQS)


def test_every_catalog_model_has_a_reference_layout():
    from simulator.config.catalog import MODELS

    # MoE, MLA and explicit-head-dim models have their own hand calculations in tests/test_moe.py.
    plain = {name for name, m in MODELS.items() if not (m.is_moe or m.is_mla or m.explicit_head_dim)}
    assert plain == set(LAYOUTS) == set(HF_DIMS)


@pytest.mark.parametrize("model", sorted(LAYOUTS))
def test_kv_capacity_matches_the_hand_calculation(model):
    plan = _plan(model)
    tokens, weights = hand_kv_tokens(model)
    assert plan.weights_bytes == pytest.approx(weights, rel=1e-12)
    assert abs(plan.num_kv_tokens - tokens) <= BLOCK  # float rounding may move one block at most
    assert plan.num_blocks * BLOCK == plan.num_kv_tokens


def test_llama_2_7b_on_one_a100_worked_by_hand():
    # per layer: QKV 4096*(4096+2*4096) = 50,331,648; O 4096*4096 = 16,777,216;
    # MLP 3*4096*11008 = 135,266,304; norms 2*4096 = 8,192  -> 202,383,360 parameters
    # weights: (32 * 202,383,360 + 2 * 32000 * 4096) * 2 bytes = 13,476,823,040 B
    # activation: 2^30 + 512 * (4096 + 2*4096 + 3*11008 + 4*4096) * 2 + 128 * 32000 * 4
    #           = 1,073,741,824 + 63,176,704 + 16,384,000 = 1,153,302,528 B
    # usable: 0.9 * 80 GiB = 77,309,411,328 B; KV budget = 62,679,285,760 B
    # KV per token: 32 layers * 2 * 32 heads * 128 * 2 B = 524,288 B -> 119,551.7 tokens
    # -> 7,471 blocks of 16 = 119,536 tokens
    plan = _plan("llama-2-7b")
    assert plan.weights_bytes == (13_476_823_040,)
    assert plan.activation_bytes == 1_153_302_528
    assert plan.kv_bytes_per_token == (524_288,)
    assert plan.num_kv_tokens == 119_536 and plan.num_blocks == 7_471


def test_llama_2_70b_tp4_pp2_on_a40_worked_by_hand():
    # per layer: 8192*(8192+2*1024) + 8192*8192 + 3*8192*28672 + 2*8192 = 855,654,400 parameters
    # each stage: 40 layers + either the embedding or the LM head (32000*8192 each), / TP 4, 2 B:
    #   (40 * 855,654,400 + 262,144,000) * 2 / 4 = 17,244,160,000 B per GPU
    # activation: 2^30 + 512 * (8192/4 + 2*(8/4)*128 + 3*28672/4 + 4*8192) * 2 + 128 * 32000 * 4
    #           = 1,073,741,824 + 512 * 113,664 + 16,384,000 = 1,148,321,792 B
    # usable: 0.9 * 48 GiB = 46,385,646,796.8 B; KV budget = 27,993,165,004.8 B per GPU
    # KV per token per GPU: 40 layers * 2 * (8/4 heads) * 128 * 2 B = 40,960 B -> 683,426.9 tokens
    # -> 42,714 blocks = 683,424 tokens
    plan = _plan("llama-2-70b")
    assert plan.weights_bytes == (17_244_160_000, 17_244_160_000)
    assert plan.activation_bytes == 1_148_321_792
    assert plan.kv_bytes_per_token == (40_960, 40_960)
    assert plan.num_kv_tokens == 683_424


def test_pipeline_stages_split_weights_and_the_tightest_stage_decides():
    one = plan_memory(ReplicaConfig("llama-2-13b", "a100-80gb", tp=1, pp=1), BUDGET, SEQS)
    two = plan_memory(ReplicaConfig("llama-2-13b", "a100-80gb", tp=1, pp=2), BUDGET, SEQS)
    assert max(two.weights_bytes) < 0.55 * one.weights_bytes[0]
    assert two.num_kv_tokens > 2 * one.num_kv_tokens  # half the layers per GPU and more free memory
    three = plan_memory(ReplicaConfig("llama-2-13b", "a100-80gb", tp=1, pp=3), BUDGET, SEQS)  # 14/13/13 layers
    assert three.kv_bytes_per_token[0] > three.kv_bytes_per_token[1]
    assert three.num_kv_tokens == min(int(b / t) for b, t in zip(three.kv_budget_bytes, three.kv_bytes_per_token,
                                                                  strict=True)) // BLOCK * BLOCK


def test_a_pipeline_stage_holds_its_own_layers_dense_and_moe_mlps():
    """DeepSeek-V3's first 3 layers are dense: at --pp 2 the first stage (layers 0-30) holds 3 dense MLPs and 28 MoE
    layers' experts, the second (31-60) 30 MoE layers'. Each was charged the mean share, which put 2.5 GiB a GPU
    of the second stage's experts on the first and overstated the second's KV cache."""
    r = ReplicaConfig("deepseek-v3", "h200", tp=4, pp=2, dtype="fp8-block")
    m, wb = r.model_spec, r.weight_bytes
    first, second = plan_memory(r, BUDGET, SEQS).weights_bytes
    moe_layer = ((m.attention_params + 2 * m.hidden_size + m.shared_expert_params + m.num_experts * m.expert_params)
                 / 4 * wb + m.replicated_attention_params * (1 - 1 / 4) * wb + m.hidden_size * m.num_experts * 2)
    lm_head = m.vocab_size * m.hidden_size / 4 * 2
    assert second == pytest.approx(30 * moe_layer + lm_head, rel=1e-9)
    dense_layer = moe_layer + (m.mlp_params(m.ffn_size) - m.shared_expert_params - m.num_experts * m.expert_params) \
        / 4 * wb - m.hidden_size * m.num_experts * 2
    assert first == pytest.approx(3 * dense_layer + 28 * moe_layer + m.embedding_params / 4 * 2, rel=1e-9)
    assert second - first > 2 * 2**30
    whole = r.layer_weights_bytes(m.num_layers)  # the stages' layers add up to the model's
    assert r.layer_weights_bytes(31, 0) + r.layer_weights_bytes(30, 31) == pytest.approx(whole, rel=1e-12)


def test_interleaved_moe_layers_are_counted_where_they_are(tmp_path):
    """Llama-4 Maverick's MoE layers alternate with dense ones (interleave_moe_layer_step 2: layers 1, 3, ... MoE), so
    each stage of a --pp 2 split holds 12 of each: the stage count read them as the first 24 layers, all dense, and
    put every expert on the second stage (refused as 21 GiB short on H100)."""
    import json
    from pathlib import Path

    from simulator.config.catalog import ModelSpec
    from simulator.config.errors import ConfigError

    scout = json.loads((Path(__file__).parent / "data" / "hf_configs" / "llama-4-scout" / "config.json").read_text())
    text = {**scout["text_config"], "interleave_moe_layer_step": 2, "num_local_experts": 128}
    (tmp_path / "config.json").write_text(json.dumps({**scout, "text_config": text}))
    r = ReplicaConfig(str(tmp_path), "h100-sxm", tp=4, pp=2, dtype="fp8")
    m = r.model_spec
    assert (m.moe_layer_step, m.num_dense_layers, m.num_dense_layers_in(0, 24), m.num_dense_layers_in(1, 3)) == (2, 24,
                                                                                                              12, 1)
    first, second = plan_memory(r, BUDGET, SEQS).weights_bytes
    assert first == pytest.approx(second, rel=1e-3)  # (the embedding on one, the LM head on the other)
    assert r.layer_weights_bytes(24, 0) == pytest.approx(r.layer_weights_bytes(48) / 2, rel=1e-12)
    shape = dict(name="x", hf_id="x", num_layers=48, hidden_size=5120, num_heads=40, num_kv_heads=8, ffn_size=16384,
                 vocab_size=202048, max_model_len=8192)
    moe = dict(num_experts=128, num_experts_per_tok=1, expert_ffn_size=8192)
    for fields, says in (({**moe, "num_dense_layers": 10, "moe_layer_step": 2}, "model.num_dense_layers: 10, but one "
                          "layer in every 2 MoE (moe_layer_step) leaves 24 of 48 dense"),
                         ({"moe_layer_step": 2}, "model.moe_layer_step: 2 places MoE layers, but the model has no "
                          "experts"),
                         ({**moe, "moe_layer_step": 0}, r"model.moe_layer_step: must be in 1..48"),
                         ({**moe, "moe_layer_step": 64}, r"model.moe_layer_step: must be in 1..48")):
        with pytest.raises(ConfigError) as err:
            ModelSpec(**shape, **fields)
        assert str(err.value).startswith(says), str(err.value)


@pytest.mark.parametrize(("model", "gpu", "tp", "pp", "nodes"), [
    ("falcon-180b", "a100-80gb", 4, 1, 1),  # 90 GB of weights per GPU
    ("llama-2-70b", "a40", 1, 1, 1),
    ("llama-2-70b", "a40", 2, 1, 1),
])
def test_layouts_that_do_not_fit_are_refused_naming_the_shortfall(model, gpu, tp, pp, nodes):
    config = RunConfig(replica=ReplicaConfig(model, gpu, tp=tp, pp=pp, num_nodes=nodes),
                       workload=WorkloadConfig("fixed", num_requests=1))
    with pytest.raises(ConfigError, match=r"does not fit: stage 0 needs .* GiB .*short by \d+\.\d GiB") as err:
        simulate(config)
    assert "\n" not in str(err.value) and "--tp/--pp" in str(err.value)


def test_falcon_fits_once_split_over_two_nodes():
    # The same model refused at TP4 runs at TP4 x PP2 on 2 x 4 A100-80GB.
    result = simulate(RunConfig(replica=ReplicaConfig("falcon-180b", "a100-80gb", tp=4, pp=2, num_nodes=2),
                                scheduler=SchedulerConfig(max_num_batched_tokens=BUDGET, max_num_seqs=SEQS),  # the plan's knobs
                                workload=WorkloadConfig("fixed", prompt_tokens=128, output_tokens=4, num_requests=4)))
    assert result.memory.num_kv_tokens == _plan("falcon-180b").num_kv_tokens


def test_a_fraction_of_free_memory_gives_the_kv_cache_what_the_weights_leave():
    """TensorRT-LLM's free_gpu_memory_fraction: the KV cache is 0.9 of what weights and activations
    leave, not what is left of 0.9 of the GPU (vLLM): more KV where the weights nearly fill the GPU."""
    total = ReplicaConfig("llama-2-70b", "a100-80gb", tp=2)
    free = ReplicaConfig("llama-2-70b", "a100-80gb", tp=2, memory_fraction_of="free")
    a, b = plan_memory(total, BUDGET, SEQS), plan_memory(free, BUDGET, SEQS)
    gpu = total.gpu_spec.memory_bytes
    assert a.kv_budget_bytes[0] == pytest.approx(0.9 * gpu - a.weights_bytes[0] - a.activation_bytes)
    assert b.kv_budget_bytes[0] == pytest.approx(0.9 * (gpu - b.weights_bytes[0] - b.activation_bytes))
    assert b.num_kv_tokens > a.num_kv_tokens
    with pytest.raises(ConfigError, match="replica.memory_fraction_of"):
        ReplicaConfig("llama-2-70b", "a100-80gb", memory_fraction_of="spare")


@pytest.mark.parametrize("width", [1, 4])
def test_activation_width_other_than_two_bytes_is_refused(width):
    """``dtype_bytes`` is the activations' width: a config file setting it apart from ``dtype``
    (1 byte beside bf16 weights) would price the weights at a width the header does not show."""
    with pytest.raises(ConfigError, match="replica.dtype_bytes.*kv_cache_dtype"):
        ReplicaConfig("llama-2-7b", "a100-80gb", dtype_bytes=width)


def test_weights_that_do_not_fit_at_16_bits_name_a_quantised_dtype():
    """The weights' own knob: a 16-bit model that does not fit halves its weights as an FP8 checkpoint; an FP8 one
    has no such step left to name."""
    with pytest.raises(ConfigError, match=r"\(raise --tp/--pp, quantise the weights \(--dtype fp8\) or use a larger "
                                          r"GPU\)$"):
        plan_memory(ReplicaConfig("llama-3.1-70b", "h100-sxm"), BUDGET, SEQS)
    with pytest.raises(ConfigError, match=r"\(raise --tp/--pp or use a larger GPU\)$"):
        plan_memory(ReplicaConfig("llama-3.1-405b", "h100-sxm", tp=2, dtype="fp8"), BUDGET, SEQS)


def test_a_kv_cache_too_small_for_one_request_names_the_memory_knobs():
    """A cache below max_model_len grows without GPUs too: FP8 KV (half a token's bytes) and a larger share of
    the memory; each is named while it has something left to give, on the one line."""
    from simulator.engine.replica import build_pool_scheduler

    sched = SchedulerConfig()
    with pytest.raises(ConfigError) as err:
        build_pool_scheduler(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=2), sched)
    assert str(err.value).endswith("(lower --max-model-len or add GPUs (--tp/--pp), or store the KV cache in FP8 "
                                   "(--kv-cache-dtype fp8) or raise --gpu-memory-utilization (now 0.9))")
    with pytest.raises(ConfigError) as err:
        build_pool_scheduler(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=2, kv_cache_dtype="fp8",
                                           gpu_memory_utilization=0.96), sched)
    assert str(err.value).endswith("(lower --max-model-len or add GPUs (--tp/--pp))") and "\n" not in str(err.value)


def test_metas_fp8_405b_keeps_attention_and_its_edge_layers_mlps_at_16_bits():
    """Meta's FP8 Llama-3.1-405B (fbgemm_fp8) quantises the FFNs but layer 0's and 125's and leaves self-attention
    at BF16: vLLM logged 57.75 GiB of its weights a GPU at TP8 on H100 (vLLM issue 6746; vLLM's "GB" is GiB), where
    FP8 everywhere plans 47.7 GiB and so about twice the KV cache."""
    metas = ReplicaConfig("meta-llama/Llama-3.1-405B-Instruct-FP8", "h100-sxm", tp=8, dtype="fp8")
    assert metas.model == "llama-3.1-405b-fp8" and metas.attention_16bit and metas.mlp_16bit_layers == (0, 125)
    plan = plan_memory(metas, BUDGET, SEQS)
    assert plan.weights_bytes[0] / GiB == pytest.approx(57.75, rel=0.03)
    # by hand: 126 attention blocks and 2 MLPs at 2 B, 124 MLPs at 1 B, embedding and LM head at 2 B, norms at 1 B
    h, q, kv, ffn, vocab = 16384, 16384, 1024, 53248, 128256
    attention, mlp = h * (q + 2 * kv) + q * h, 3 * h * ffn
    by_hand = (126 * attention * 2 + 2 * mlp * 2 + 124 * mlp + 126 * 2 * h + 2 * vocab * h * 2) / 8
    assert plan.weights_bytes[0] == pytest.approx(by_hand, rel=1e-12)
    # any other FP8 checkpoint of the shape (vLLM's --quantization fp8 of the BF16 one) quantises every layer
    everything = plan_memory(ReplicaConfig("llama-3.1-405b", "h100-sxm", tp=8, dtype="fp8"), BUDGET, SEQS)
    assert everything.weights_bytes[0] / GiB == pytest.approx(47.7, abs=0.05)
    assert plan.num_kv_tokens < 0.65 * everything.num_kv_tokens  # (at this small step; 0.58 at vLLM's 8192 tokens)
    # over pipeline stages each kept MLP weighs on the stage that holds its layer: the first and the last of four
    staged = plan_memory(ReplicaConfig(metas.model, "h100-sxm", tp=8, pp=4, num_nodes=4, dtype="fp8"), BUDGET, SEQS)
    edge = mlp * (2 - 1) / 8
    assert staged.weights_bytes[0] - staged.weights_bytes[1] == pytest.approx(edge + vocab * h * 2 / 8)
    assert staged.weights_bytes[3] - staged.weights_bytes[2] == pytest.approx(edge + vocab * h * 2 / 8)
    # at another --dtype it is some other checkpoint: nothing kept (the header notes the config's fp8)
    assert not ReplicaConfig(metas.model, "h200", tp=8).attention_16bit
