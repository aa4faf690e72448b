"""DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the spec, its config.json reading, its KV cache and its
pricing (the attention proper over at most index_topk keys a query, the indexer over every key)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_same_run

from simulator.config.catalog import get_model
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig
from simulator.costmodel.base import BatchShape
from simulator.costmodel.roofline import RooflineCostModel

GLM5_CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", "hidden_size": 6144,
    "num_hidden_layers": 78, "num_attention_heads": 64, "num_key_value_heads": 64, "head_dim": 64,
    "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192, "qk_rope_head_dim": 64, "v_head_dim": 256,
    "intermediate_size": 12288, "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "first_k_dense_replace": 3, "vocab_size": 154880, "max_position_embeddings": 202752,
    "index_topk": 2048, "index_n_heads": 32, "index_head_dim": 128, "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False, "hidden_act": "silu"}


def test_the_catalog_models_carry_their_published_size_and_an_indexer_key_a_token():
    glm, v32, alias = get_model("glm-5"), get_model("deepseek-v3.2"), get_model("zai-org/GLM-5-FP8")
    assert alias is glm and glm.is_sparse_attention and not get_model("deepseek-v3").is_sparse_attention
    assert abs(glm.num_params / 1e9 - 744) < 2  # GLM-5's model card: 744B (its MTP layer is the drafter's)
    # the latent and the indexer's FP8 key of 128 plus one fp32 scale; an FP8 latent keeps its scales and a 16-bit
    # rotary key (vLLM's fp8_ds_mla, 656 bytes), a 16-bit one is DeepSeek-V3's
    assert v32.kv_bytes_per_token_per_layer(1) == 512 + 4 * 4 + 2 * 64 + 132 == 788
    assert v32.kv_bytes_per_token_per_layer(2) == get_model("deepseek-v3").kv_bytes_per_token_per_layer(2) + 132


@pytest.mark.parametrize("model", ["deepseek-v3.2", "deepseek-v3"])
def test_the_indexer_and_mla_down_projections_are_whole_on_every_tp_rank(model: str):
    """vLLM and SGLang build the indexer's projections and MLA's down-projections to its latents (fused_qkv_a_proj)
    as replicated linears, as they do the router gate: a TP rank holds its share of the rest and those whole (they
    were counted sharded: 1.4 GiB a GPU short for DeepSeek-V3.2 at TP8, 0.7 for DeepSeek-V3)."""
    m = get_model(model)
    per_gpu = {tp: ReplicaConfig(model=model, gpu="b200", tp=tp, dtype="fp8").layer_weights_bytes(61)
               for tp in (1, 2, 8)}
    whole = 61 * m.replicated_attention_params * 1.0  # bytes at FP8, every layer has them
    whole += 58 * m.hidden_size * m.num_experts * 2.0  # the router gate, 16-bit in an FP8 checkpoint
    down = m.hidden_size * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
    assert m.replicated_attention_params == down + m.indexer_params and (m.indexer_params > 0) == m.is_sparse_attention
    for tp in (2, 8):
        assert per_gpu[tp] == pytest.approx((per_gpu[1] - whole) / tp + whole, rel=1e-12)
    assert get_model("llama-3.1-8b").replicated_attention_params == 0


def test_sparse_attention_needs_fp8_tensor_cores_and_no_profile():
    with pytest.raises(ConfigError, match="replica.gpu: glm-5's sparse attention runs FP8 indexer kernels, and "
                                          "a100-80gb has no FP8 tensor cores"):
        ReplicaConfig(model="glm-5", gpu="a100-80gb", tp=8, dtype="fp8")
    from profiler.runner import ProfileConfig

    with pytest.raises(ConfigError, match="attends sparsely"):
        ProfileConfig(model="deepseek-v3.2", out=Path("unused"), device="cpu", tp=(8,))


def test_sparse_attention_needs_mla_and_its_whole_indexer():
    dense = get_model("llama-3.1-8b")
    with pytest.raises(ConfigError, match="model.index_topk: sparse attention needs MLA"):
        replace(dense, index_topk=2048, index_num_heads=32, index_head_dim=128)
    with pytest.raises(ConfigError, match="model.index_topk"):
        replace(get_model("deepseek-v3"), index_topk=2048)


def test_a_glm5_config_json_reads_as_the_catalog_entry(tmp_path: Path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GLM5_CONFIG))
    read, entry = get_model(str(path)), get_model("glm-5")
    for field in ("num_layers", "hidden_size", "num_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                  "v_head_dim", "num_experts", "num_dense_layers", "index_topk", "index_num_heads", "index_head_dim"):
        assert getattr(read, field) == getattr(entry, field), field
    assert read.num_params == entry.num_params
    # a sparse family without its indexer would be read as dense MLA: refused
    path.write_text(json.dumps({k: v for k, v in GLM5_CONFIG.items() if not k.startswith("index_")}))
    with pytest.raises(ConfigError, match="model.index_topk: .*attends sparsely, but no index_topk"):
        get_model(str(path))
    # an indexer without latent attention would be dropped: refused
    dense = {k: v for k, v in GLM5_CONFIG.items() if k not in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
                                                                "qk_rope_head_dim", "v_head_dim")}
    path.write_text(json.dumps({**dense, "model_type": "deepseek_v3", "head_dim": 96}))
    with pytest.raises(ConfigError, match="model.index_topk: .*latent attention needs kv_lora_rank"):
        get_model(str(path))


def _roofline(model: str) -> RooflineCostModel:
    return RooflineCostModel(ReplicaConfig(model=model, gpu="b200", tp=8, dtype="fp8"))


def test_the_attention_reads_at_most_topk_keys_a_query_and_the_indexer_scores_them_all():
    """DeepSeek-V3.2 is DeepSeek-V3 with DSA: its attention proper at any context is V3's at min(context, 2048),
    and what it adds is the indexer's time, which grows with every key."""
    sparse, dense = _roofline("deepseek-v3.2"), _roofline("deepseek-v3")
    n = 16
    for ctx in (512, 2048, 8192, 65536):
        shape = BatchShape.decode_only(n, n * ctx, n * ctx * ctx, ctx)
        capped = BatchShape.decode_only(n, n * min(ctx, 2048), n * min(ctx, 2048) ** 2, min(ctx, 2048))
        indexer = sparse.indexer_time(n * ctx, n * ctx, n)
        assert sparse.attention_decode(shape) == pytest.approx(dense.attention_decode(capped) + indexer, rel=1e-12)
    longer = [sparse.indexer_time(n * ctx, n * ctx, n) for ctx in (8192, 16384, 32768)]
    assert longer[0] < longer[1] < longer[2]
    # a prompt's chunk: at most 2,048 keys a query for the attention, every causal pair for the indexer
    chunk, before = 1024, 16384
    shape = BatchShape.from_requests(prefills=[(chunk, before)])
    windowed = dense._attention_prefill(chunk * 2048, chunk + 2048, chunk, 1)
    indexer = sparse.indexer_time(shape.prefill_attn_pairs, shape.prefill_kv_tokens, chunk)
    assert sparse.attention_prefill(shape) == pytest.approx(windowed + indexer, rel=1e-12)
    assert sparse.attention_prefill(shape) < dense.attention_prefill(shape)


def _glm5_closed_loop(kernels: str) -> RunConfig:
    return RunConfig().replace(replica__model="glm-5", replica__gpu="b200", replica__tp=8, replica__dtype="fp8",
                               replica__kernels=kernels, engine="sglang-2026", scheduler__name="sglang",
                               workload__name="fixed", workload__prompt_tokens=3000, workload__output_tokens=64,
                               workload__concurrency=8, workload__arrival="burst", workload__num_requests=24)


def test_a_sparse_model_runs_the_same_stepped_or_fast_forwarded_over_the_roofline():
    """The fast paths (decode stretches, a prompt's successive chunks) price a DSA step as stepping does."""
    assert_same_run(_glm5_closed_loop("roofline"))


def test_a_sparse_model_runs_the_same_stepped_or_fast_forwarded_over_the_tables(aic) -> None:  # noqa: ANN001
    """The same over SGLang's tables, whose decode curve carries the indexer's line and whose prompt chunks add it."""
    from simulator.simulation import simulate

    config = _glm5_closed_loop("sglang")
    assert_same_run(config)
    run = simulate(config)
    assert len(run.requests) == 24 and all(r.completed_at is not None for r in run.requests)


def test_the_tables_decode_curve_is_the_capped_rows_plus_the_indexer_between_its_knots(aic) -> None:  # noqa: ANN001
    """Over the tables the decode attention is a curve in the batch's keys: at any point it is the capped
    attention's curve plus the indexer's own price (a line), and no long context reads past the rows."""
    from bisect import bisect_right

    from simulator.costmodel.aic.model import table_cost_model

    cost = table_cost_model(ReplicaConfig(model="glm-5", gpu="b200", tp=8, dtype="fp8"), "sglang")
    rf = cost.rf
    for n in (1, 16, 64):
        xs, fs, slopes, limit = cost._decode_curve(n)
        assert limit == float("inf")
        capped = cost._window_curve(n)
        for x in np.geomspace(1, 4e6 * n, 40):
            j, k = bisect_right(xs, x) - 1, bisect_right(capped[0], x) - 1
            attention = capped[1][k] + (x - capped[0][k]) * capped[2][k]
            assert fs[j] + (x - xs[j]) * slopes[j] == pytest.approx(attention + rf.indexer_time(x, x, n), rel=1e-9)
    before = cost.num_extrapolations
    cost.attention_decode(BatchShape.decode_only(4, 4 * 150_000, 4 * 150_000**2, 150_000))
    assert cost.num_extrapolations == before  # (150K keys a sequence beyond the rows: read at 2,048)
