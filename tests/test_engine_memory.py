"""Each engine sizes its KV cache by its own rule (SchedulerConfig.memory_fraction, kvcache.plan_memory).

vLLM: ``--gpu-memory-utilization`` 0.9 of total memory holds weights, activations and KV cache. SGLang (0.5.3 on):
``--mem-fraction-static`` of the memory holds the weights and the KV pool, activations and CUDA graphs live in the
rest, and its default is computed (ServerArgs._handle_gpu_memory_settings). TensorRT-LLM: the KV cache is
``free_gpu_memory_fraction`` 0.9 of what weights and activations leave, in blocks of ``tokens_per_block`` 32. The
expected figures below are written out from each rule's inputs; given flags win over every engine's default.
"""

from __future__ import annotations

import pytest

from simulator.config.errors import ConfigError
from simulator.config.options import build_config
from simulator.config.run_config import RunConfig
from simulator.engine.kvcache import NON_TORCH_RESERVE_BYTES, build_kv_cache

GiB, MiB = 2**30, 2**20
# Llama-3.1-8B (config.json): 32 layers, 8 KV heads of 128, bf16 KV: 2 x 8 x 128 x 2 bytes a layer
LLAMA_8B_KV_BYTES = 32 * 2 * 8 * 128 * 2


def _plan(**options):  # noqa: ANN003, ANN202
    config = build_config(**options)
    return build_kv_cache(config.replica, config.scheduler)[1]


def _sglang_fraction(gpu_mib: float, chunk: int, graph_bs: int, tp_pp: int, dp: int = 1) -> float:
    """SGLang's reserve (MiB) as its server_args writes it, for the test's own inputs."""
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp_pp / 8 * 1024
    if dp > 1:
        reserved += graph_bs * dp * 3 + (graph_bs * dp * 1.5 if graph_bs > 300 else 0)
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def test_sglang_sizes_its_pool_by_its_default_static_fraction() -> None:
    """Llama-3.1-8B on one H100 under --scheduler sglang: SGLang's default fraction (chunk 8192 and 256 CUDA-graph
    slots on an 80 GiB GPU at TP < 4: 0.836) of the memory, less the weights and the memory in use before the model
    loads; no activation reserve (it lives outside the static share). The plan had taken vLLM's 0.9 less
    activations."""
    plan = _plan(model="llama-3.1-8b", gpu="h100-sxm", scheduler="sglang")
    memory = 80 * GiB
    f = _sglang_fraction(memory / MiB, chunk=8192, graph_bs=256, tp_pp=1)
    assert f == 0.836 and (plan.memory_fraction, plan.memory_basis) == (f, "static")
    budget = f * memory - plan.weights_bytes[0] - NON_TORCH_RESERVE_BYTES
    assert plan.kv_budget_bytes[0] == pytest.approx(budget, rel=1e-12)
    assert plan.num_kv_tokens == int(budget / LLAMA_8B_KV_BYTES) // 16 * 16 and plan.block_size == 16


@pytest.mark.parametrize(("options", "inputs"), [
    ({"model": "llama-3.1-8b", "gpu": "h100-sxm", "chunk_size": 16384}, (80 * 1024, 16384, 256, 1, 1)),  # its chunk
    ({"model": "llama-3.1-70b", "gpu": "h100-sxm", "tp": 4}, (80 * 1024, 8192, 512, 4, 1)),  # 512 slots at TP >= 4
    ({"model": "deepseek-v3", "gpu": "h200", "tp": 8, "dtype": "fp8"}, (141 * 1024, 8192, 512, 8, 1)),
    # DP attention: SGLang's tp_size is every GPU of the replica (8), its chunk the one before the ranks split it
    ({"model": "deepseek-v3", "gpu": "h200", "tp": 1, "attention_dp": 8, "ep": 8, "dtype": "fp8"},
     (141 * 1024, 8192, 512, 8, 8)),
    ({"model": "llama-3.1-8b", "gpu": "l4"}, (23034, 2048, 24, 1, 1)),  # 22.5 GiB: no 10 GiB floor, 24 slots
])
def test_sglangs_default_fraction_follows_the_gpu_the_chunk_and_the_layout(options, inputs) -> None:  # noqa: ANN001
    mib, chunk, graph_bs, tp_pp, dp = inputs  # the GPU's memory in MiB (its catalog entry), SGLang's knobs
    plan = _plan(scheduler="sglang", **options)
    assert plan.memory_fraction == _sglang_fraction(mib, chunk, graph_bs, tp_pp, dp)
    memory = mib * MiB
    assert min(plan.kv_budget_bytes) == pytest.approx(
        plan.memory_fraction * memory - max(plan.weights_bytes) - NON_TORCH_RESERVE_BYTES, rel=1e-12)


def test_trtllm_takes_a_fraction_of_free_memory_in_32_token_blocks() -> None:
    """--scheduler trtllm: KvCacheConfig's free_gpu_memory_fraction 0.9 of what weights and activations leave (the
    plan had taken vLLM's total basis), and its tokens_per_block 32 (the plan had 16)."""
    plan = _plan(model="qwen3-32b", gpu="h100-sxm", scheduler="trtllm")
    memory = 80 * GiB
    assert (plan.memory_fraction, plan.memory_basis, plan.block_size) == (0.9, "free", 32)
    budget = 0.9 * (memory - plan.weights_bytes[0] - plan.activation_bytes)
    assert plan.kv_budget_bytes[0] == pytest.approx(budget, rel=1e-12)
    assert plan.num_kv_tokens == int(budget / plan.kv_bytes_per_token[0]) // 32 * 32


def test_vllm_family_caches_are_as_they_were() -> None:
    """vLLM's rule, unchanged: 0.9 of total memory less weights and activations, 16-token blocks (446,896 tokens
    for Llama-3.1-8B on one H100 under vllm-v1, before and after the engines' rules)."""
    plan = _plan(model="llama-3.1-8b", gpu="h100-sxm")
    assert (plan.memory_fraction, plan.memory_basis, plan.block_size) == (0.9, "total", 16)
    assert plan.kv_budget_bytes[0] == pytest.approx(0.9 * 80 * GiB - plan.weights_bytes[0] - plan.activation_bytes,
                                                    rel=1e-12)
    assert plan.num_kv_tokens == 446_896
    for name in ("vllm", "sarathi", "orca", "fastertransformer"):
        other = _plan(model="llama-3.1-8b", gpu="h100-sxm", scheduler=name)
        assert (other.memory_fraction, other.memory_basis, other.block_size) == (0.9, "total", 16)
    assert "memory_basis" not in plan.as_dict()  # a vLLM run's figures keep their keys


@pytest.mark.parametrize(("options", "expected"), [
    ({"scheduler": "sglang", "gpu_memory_utilization": 0.8}, (0.8, "static", 16)),
    ({"scheduler": "sglang", "memory_fraction_of": "total"}, (0.9, "total", 16)),
    ({"scheduler": "sglang", "block_size": 32}, (0.836, "static", 32)),
    ({"scheduler": "trtllm", "gpu_memory_utilization": 0.8}, (0.8, "free", 32)),
    ({"scheduler": "trtllm", "memory_fraction_of": "total"}, (0.9, "total", 32)),
    ({"scheduler": "trtllm", "block_size": 16}, (0.9, "free", 16)),
    ({"scheduler": "vllm-v1", "memory_fraction_of": "static"}, (0.836, "static", 16)),  # SGLang's computed default
])
def test_given_memory_flags_win_over_the_engines_defaults(options, expected) -> None:  # noqa: ANN001
    plan = _plan(model="llama-3.1-8b", gpu="h100-sxm", **options)
    assert (plan.memory_fraction, plan.memory_basis, plan.block_size) == expected
    memory, w = 80 * GiB, plan.weights_bytes[0]
    f, basis, _ = expected
    budget = {"total": f * memory - w - plan.activation_bytes, "static": f * memory - w - NON_TORCH_RESERVE_BYTES,
              "free": f * (memory - w - plan.activation_bytes)}[basis]
    assert plan.kv_budget_bytes[0] == pytest.approx(budget, rel=1e-12)


def test_a_default_static_fraction_at_or_below_zero_is_refused_in_one_line() -> None:
    """A chunk whose activation reserve (1.5 MiB a token) is beyond the GPU leaves SGLang no static share: refused,
    naming the field and the flag that sets it, not planned as a negative cache."""
    with pytest.raises(ConfigError, match=r"replica\.gpu_memory_utilization.*--mem-fraction-static") as err:
        _plan(model="llama-3.1-8b", gpu="h100-sxm", scheduler="sglang", chunk_size=65536)
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="replica.memory_fraction_of"):
        build_config(memory_fraction_of="spare")


def test_the_run_header_says_each_engines_memory_rule() -> None:
    from simulator.cli.run import run_title

    sglang = run_title(build_config(model="llama-3.1-8b", gpu="h100-sxm", scheduler="sglang"), {})
    assert "KV cache memory 0.836 of memory, SGLang's static share for weights and KV cache" in sglang
    trtllm = run_title(build_config(model="llama-3.1-8b", gpu="h100-sxm", scheduler="trtllm"), {})
    assert ("KV cache memory 0.9 of the memory weights and activations leave, TensorRT-LLM's free fraction, "
            "32-token blocks") in trtllm
    vllm = run_title(build_config(model="llama-3.1-8b", gpu="h100-sxm"), {})
    assert "KV cache memory" not in vllm and "token blocks" not in vllm


def test_each_engines_launch_line_says_the_fraction_its_plan_used() -> None:
    """A plan under --scheduler sglang launches SGLang at the static fraction it priced (--mem-fraction-static), one
    under trtllm TensorRT-LLM at its free fraction 0.9 (free_gpu_memory_fraction), each in its own blocks."""
    import math

    from simulator.config.prices import price_of
    from simulator.planning.launch import launch_command
    from simulator.planning.plan import Candidate, Layout

    layout = Layout("h100-sxm", "agg", "bf16", 1, budget=2048, max_num_seqs=256)
    candidate = Candidate(layout, math.inf, price_of(layout.gpu))
    sglang = build_config(model="llama-3.1-8b", gpu="h100-sxm", scheduler="sglang")
    plan = build_kv_cache(layout.config(sglang).replica, layout.config(sglang).scheduler)[1]
    # chunk 2048: a reserve of 4,224 MiB, floored at 10 GiB on an 80 GiB GPU
    assert plan.memory_fraction == _sglang_fraction(80 * 1024, 2048, 256, 1) == 0.875
    (line,) = launch_command(candidate, sglang, "sglang")
    assert "--mem-fraction-static 0.875" in line and "--page-size" not in line
    trtllm = build_config(model="llama-3.1-8b", gpu="h100-sxm", scheduler="trtllm")
    line = launch_command(candidate, trtllm, "trtllm")[0]
    assert '"kv_cache_config": {"free_gpu_memory_fraction": 0.9}' in line  # tokens_per_block: its own 32


def test_result_keys_of_vllm_runs_stay_and_other_engines_change() -> None:
    """A stored sweep point resumes by its result key: a vLLM-family run's key is the one it had when its memory
    defaults were 0.9 of total memory; an SGLang or TensorRT-LLM run's changes with the cache it now plans."""
    for name in ("vllm-v1", "vllm"):
        run = RunConfig().replace(scheduler__name=name)
        before = run.replace(replica__gpu_memory_utilization=0.9, replica__memory_fraction_of="total")
        assert run.result_key(a=1) == before.result_key(a=1)
    for name in ("sglang", "trtllm"):
        run = RunConfig().replace(scheduler__name=name)
        before = run.replace(replica__gpu_memory_utilization=0.9, replica__memory_fraction_of="total")
        assert run.result_key(a=1) != before.result_key(a=1)
