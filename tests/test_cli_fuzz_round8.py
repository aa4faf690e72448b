"""CLI fuzzing, round 8: hand-edited files, edge numbers, and flags that a mode cannot read.

Each case was a traceback (a rate of 1e-307 or a trace row at 1e307 s overflowing the skipping loop; a run
config's speculative section with null or a string for its rates), a wrong answer (a rate of 1e-15 reported
0 ms latencies; "false" in a model config read as true; a plan's launch command without the KV and
speculation settings it priced; a profile table given twice counted twice), or something silently dropped
(a model config's MoE, MLA or linear-attention fields on an architecture without those layers, two expert
counts that disagree, a sweep key named twice, tau over a disaggregated config, predict's --context without
decodes, an empty --out or link name, a GPU file's NVLink switch without NVLink, a draft model beside n-gram
lookup, a --qps-start outside the search's range).
Now each is one line naming the field; the valid neighbours run as before.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from helpers import one_line_error, simulate_module

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, WorkloadConfig

ROOT = Path(__file__).resolve().parents[1]
LLAMA = json.loads((ROOT / "tests" / "data" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
QWEN = json.loads((ROOT / "tests" / "data" / "hf_configs" / "qwen2.5-7b" / "config.json").read_text())


# -- rates and times at the edge of a float --------------------------------------------------------------------

def test_rates_below_the_floor_and_arrivals_past_the_horizon_are_refused() -> None:
    from simulator.planning.options import SearchSettings
    from simulator.workload.generate import RequestTable

    with pytest.raises(ConfigError, match="workload.qps: must be at least 0.001"):
        WorkloadConfig(qps=1e-307)
    assert WorkloadConfig(qps=1e-3).qps == 1e-3
    with pytest.raises(ConfigError, match="arrivals reach 1e\\+307 s"):
        RequestTable([0.0, 1e307], [100, 100], [10, 10], "far")
    with pytest.raises(ConfigError, match="capacity.qps_start: must be at least"):
        SearchSettings(qps_start=1e-15, min_qps=1e-16)
    with pytest.raises(ConfigError, match="capacity.min_qps"):
        SearchSettings(min_qps=1e-16)
    with pytest.raises(ConfigError, match="2000 is outside the search's range"):  # it was clamped to 1,000
        SearchSettings(qps_start=2000.0)
    assert SearchSettings(qps_start=999.0).qps_start == 999.0


# -- a run config edited by hand -----------------------------------------------------------------------------

@pytest.mark.parametrize(("key", "value", "needle"), [
    ("acceptance_rates", None, "must be a list of float, got None"),
    ("acceptance_rates", "0.6", "must be a list of float, got '0.6'"),
    ("acceptance_rates", [True, True, True], "must be a list of float"),
    ("unmodelled_keys", None, "must be a list of str"),
    ("token_tree", [[0], "x"], "must be a list of a list of int"),
])
def test_a_config_files_speculative_section_is_type_checked(key: str, value: object, needle: str) -> None:
    from simulator.config.speculative import SpeculativeConfig

    good = RunConfig(speculative=SpeculativeConfig("ngram", 3, acceptance_rates=(0.6,))).to_dict()
    good["speculative"] = SpeculativeConfig("ngram", 3, acceptance_rates=(0.6,)).to_dict()
    assert RunConfig.from_dict(copy.deepcopy(good)).speculative.acceptance_rates == (0.6, 0.6, 0.6)
    bad = copy.deepcopy(good)
    bad["speculative"][key] = value
    with pytest.raises(ConfigError, match=f"config.speculative.{key}: {needle}"):
        RunConfig.from_dict(bad)


def test_ngram_refuses_a_draft_model_and_eagle_keeps_its_heads_path() -> None:
    from simulator.config.speculative import SpeculativeConfig

    with pytest.raises(ConfigError, match="ngram looks its drafts up"):
        SpeculativeConfig("ngram", 3, draft_model="not-a-model", acceptance_rates=(0.5,))
    assert SpeculativeConfig("eagle3", 3, draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", acceptance_rates=(0.5,))


# -- model configs --------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("base", "changes", "needle"), [
    (QWEN, {"use_sliding_window": "false"}, "use_sliding_window: .* needs true or false"),
    (LLAMA, {"attn_output_gate": "false"}, "attn_output_gate: .* needs true or false"),
    (LLAMA, {"moe_intermediate_size": 1408, "n_shared_experts": 2}, "moe_intermediate_size: .* no experts"),
    (LLAMA, {"first_k_dense_replace": 3}, "first_k_dense_replace: .* no experts"),
    (LLAMA, {"interleave_moe_layer_step": 2}, "interleave_moe_layer_step: .* no experts"),
    (LLAMA, {"q_lora_rank": 1536}, "q_lora_rank: .* needs kv_lora_rank"),
    (LLAMA, {"linear_num_key_heads": 16}, "linear_num_key_heads: .* no linear-attention layers"),
    (LLAMA, {"mamba_ssm_dtype": "float32"}, "mamba_ssm_dtype: .* no linear-attention layers"),
    (LLAMA, {"attention_chunk_size": 8192}, "attention_chunk_size: .* no chunked local attention"),
    (LLAMA, {"use_sliding_window": True, "sliding_window": 4096}, "use_sliding_window: .* reads sliding_window alone"),
    (LLAMA, {"text_config": {"hidden_size": 1}}, "text_config: .* does not wrap a text model"),
    (LLAMA, {"head_dim": 0}, "head_dim: .* needs a positive integer"),
    (LLAMA, {"num_local_experts": 8, "num_experts": 16, "num_experts_per_tok": 2, "model_type": "mixtral"},
     "num_local_experts=8, num_experts=16 disagree"),
])
def test_a_model_config_refuses_fields_it_would_drop(base: dict, changes: dict, needle: str) -> None:
    from simulator.config.hf_config import model_from_hf_dict

    assert model_from_hf_dict(copy.deepcopy(base), "m")  # the file as published reads
    with pytest.raises(ConfigError, match=needle):
        model_from_hf_dict({**copy.deepcopy(base), **changes}, "m")


def test_a_model_configs_harmless_defaults_still_read() -> None:
    """Values that change nothing (false, null, 1 for a layer frequency) are not refused."""
    from simulator.config.hf_config import model_from_hf_dict

    spec = model_from_hf_dict({**LLAMA, "use_sliding_window": False, "q_lora_rank": None, "moe_layer_freq": 1,
                               "mlp_only_layers": [], "attn_output_gate": False}, "m")
    assert spec == model_from_hf_dict(copy.deepcopy(LLAMA), "m")


def test_a_gpu_file_refuses_a_switch_without_nvlink_and_reads_a_bom_and_an_upper_case_suffix(tmp_path: Path) -> None:
    from simulator.config.hf_config import load_gpu_file

    table = {"name": "x", "bf16_tflops": 100, "hbm_gb_per_s": 1000, "memory_gb": 24}
    bad = tmp_path / "switch.json"
    bad.write_text(json.dumps({**table, "nvlink_switch": True}))
    with pytest.raises(ConfigError, match="NVLink switch without NVLink"):
        load_gpu_file(str(bad))
    named = tmp_path / "named.json"
    named.write_text(json.dumps({**table, "name": 5}))
    with pytest.raises(ConfigError, match="gpu.name: .* needs a string"):
        load_gpu_file(str(named))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(table).encode())
    upper = tmp_path / "gpu.TOML"
    upper.write_text('name = "x"\nbf16_tflops = 100\nhbm_gb_per_s = 1000\nmemory_gb = 24\n')
    assert load_gpu_file(str(bom)).memory_bytes == load_gpu_file(str(upper)).memory_bytes == 24e9


# -- what a mode cannot read ----------------------------------------------------------------------------------

def test_sweep_refuses_a_key_named_twice_and_fast_forward() -> None:
    from simulator.planning.sweep import build_spec

    with pytest.raises(ConfigError, match="names 'tp' twice"):
        build_spec({"grid": {"tp,tp": [[1, 2]]}})
    with pytest.raises(ConfigError, match="fast_forward changes a run's speed"):
        build_spec({"grid": {"fast_forward": [True, False]}})
    assert len(build_spec({"base": {"num_requests": 10}, "grid": {"tp": [1, 2]}}).points) == 2


def test_predict_refuses_contexts_for_requests_the_batch_does_not_hold() -> None:
    from simulator.cli.costmodel import build_shape

    with pytest.raises(ConfigError, match="--context: gives the decodes' KV lengths"):
        build_shape([100], [], 0, [500])
    with pytest.raises(ConfigError, match="--prefill-context: gives the prompt chunks"):
        build_shape([], [10], 2, [500])
    assert build_shape([100], [20], 2, [500]).num_tokens == 102


def test_fit_refuses_a_profile_table_given_twice(tmp_path: Path) -> None:
    from simulator.util.paths import check_profile_tables

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "profile.csv").write_text("op\n")
    with pytest.raises(ConfigError, match="is the table .* already gave"):
        check_profile_tables([tmp_path / "p", tmp_path / "p" / "profile.csv"])
    assert len(check_profile_tables([tmp_path / "p"])) == 1


def test_a_plans_launch_commands_carry_what_it_priced() -> None:
    from simulator.config.prices import price_of
    from simulator.config.speculative import SpeculativeConfig
    from simulator.planning.launch import launch_command
    from simulator.planning.plan import Candidate, Layout

    layout = Layout("h100-sxm", "agg", "bf16", 1, budget=2048, max_num_seqs=256)
    candidate = Candidate(layout, 1.0, price_of("h100-sxm"))
    plain = RunConfig(replica=ReplicaConfig(model="llama-3.1-8b", gpu="h100-sxm"))
    assert "--kv-cache-dtype" not in launch_command(candidate, plain, "vllm")[0]  # a default run's stays short
    priced = plain.replace(replica__gpu_memory_utilization=0.5, replica__kv_cache_dtype="fp8", replica__block_size=32,
                           speculative=SpeculativeConfig("eagle3", 3, acceptance_rates=(0.7,)))
    (vllm,) = launch_command(candidate, priced, "vllm")
    assert "--gpu-memory-utilization 0.5" in vllm and "--kv-cache-dtype fp8" in vllm and "--block-size 32" in vllm
    assert '"method": "eagle3", "num_speculative_tokens": 3' in vllm and "acceptance" not in vllm
    (sglang,) = launch_command(candidate, priced, "sglang")
    # (SGLang's static fraction leaves the activations out, TensorRT-LLM's is of what weights and activations leave)
    assert "--mem-fraction-static 0.495" in sglang and "--speculative-algorithm EAGLE3" in sglang
    assert "--speculative-num-draft-tokens 4" in sglang and "--page-size 32" in sglang
    (trt,) = launch_command(candidate, priced, "trtllm")
    assert '"kv_cache_config": {"free_gpu_memory_fraction": 0.371, "dtype": "fp8", "tokens_per_block": 32}' in trt
    assert '"speculative_config": {"decoding_type": "Eagle", "max_draft_len": 3' in trt
    assert "moe_config" not in trt and "--moe-runner-backend" not in sglang  # the engines' own MoE kernel


def test_a_plans_launch_commands_select_the_moe_kernel_it_priced() -> None:
    from simulator.config.prices import price_of
    from simulator.planning.launch import launch_command
    from simulator.planning.plan import Candidate, Layout

    layout = Layout("b200", "agg", "fp8-block", 8, ep=8, budget=8192, max_num_seqs=256)
    candidate = Candidate(layout, 1.0, price_of("b200"))
    base = RunConfig(replica=ReplicaConfig(model="deepseek-v3", gpu="b200", tp=8, kernels="trtllm",
                                           moe_kernel="deepgemm"))
    (trt,) = launch_command(candidate, base, "trtllm")
    assert '"moe_config": {"backend": "DEEPGEMM"}' in trt
    (sglang,) = launch_command(candidate, base, "sglang")
    assert "--moe-runner-backend deep_gemm --moe-a2a-backend deepep" in sglang  # SGLang's DeepGEMM runner needs it
    (vllm,) = launch_command(candidate, base, "vllm")
    assert "priced with the tables' deepgemm MoE kernel, which this command does not select" in vllm
    # SGLang runs DeepGEMM's experts only over DeepEP's EP ranks: at ep 1 the command leaves the runner to it, saying so
    dense_ep = Layout("b200", "agg", "fp8-block", 8, ep=1, budget=8192, max_num_seqs=256)
    (sglang,) = launch_command(Candidate(dense_ep, 1.0, price_of("b200")), base, "sglang")
    command, _, note = sglang.partition("  # ")
    assert "--moe-runner-backend" not in command and "--moe-a2a-backend" not in command
    assert "SGLang runs only with expert parallelism over DeepEP" in note


def test_a_plans_launch_commands_map_the_kernel_the_tables_resolved(aic) -> None:  # noqa: ANN001
    """A part of a name is the kernel it resolved to in the tables, not the letters typed ("deep" is in no engine's
    option value: it had emitted nothing and said the command did not select it); a part of the default's name
    (SGLang's block-FP8 experts on B200 are priced by FlashInfer's TensorRT-LLM rows, which its GB200 collector timed)
    is that kernel, SGLang's flashinfer_trtllm runner."""
    from simulator.config.prices import price_of
    from simulator.planning.launch import launch_command
    from simulator.planning.plan import Candidate, Layout

    candidate = Candidate(Layout("b200", "agg", "fp8-block", 8, ep=8, budget=8192, max_num_seqs=256), 1.0,
                          price_of("b200"))
    base = RunConfig(replica=ReplicaConfig(model="deepseek-v3", gpu="b200", tp=8, kernels="trtllm", moe_kernel="deep"))
    (trt,) = launch_command(candidate, base, "trtllm")
    assert '"moe_config": {"backend": "DEEPGEMM"}' in trt
    (sglang,) = launch_command(candidate, base.replace(replica__kernels="sglang", replica__moe_kernel="flashinfer"),
                               "sglang")
    assert "--moe-runner-backend flashinfer_trtllm" in sglang


def test_tau_refuses_a_disaggregated_config() -> None:
    from simulator.cli.capacity import _check_tau_reads

    config = RunConfig(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)")
    with pytest.raises(ConfigError, match="disaggregated config's pools never run one"):
        _check_tau_reads(None, config, None, None, None)  # type: ignore[arg-type]


def test_blank_values_are_refused_before_any_work(tmp_path: Path) -> None:
    from simulator.cli.app import refuse_blank_values

    for argv, flag in ((["run", "--out", ""], "--out"), (["run", "--intra-node-link="], "--intra-node-link"),
                       (["tau", "--plot", "  "], "--plot"), (["plot", "run", ""], "argument")):
        with pytest.raises(ConfigError, match=f"^{flag}: is empty"):
            refuse_blank_values(argv)
    refuse_blank_values(["run", "--out", "x", "--no-progress"])
    line = one_line_error(simulate_module("run", "--out", "", "--num-requests", "5", cwd=tmp_path))
    assert line.startswith("error: --out: is empty") and not list(tmp_path.iterdir())  # nothing simulated or written


def test_a_kv_cache_set_past_the_memory_plan_is_said() -> None:
    """--num-gpu-blocks may ask for more than the GPU holds (an unbounded cache, as the prefix-cache tests use);
    10 million blocks on one A100 ran without a word. The summary now keeps what the memory plan gives."""
    from simulator.cli.run import run_simulation

    base = RunConfig(workload=WorkloadConfig(num_requests=3))
    _, over = run_simulation(base.replace(replica__num_gpu_blocks=100_000))
    assert over["kv_cache_tokens"] == 1_600_000 > over["kv_cache_tokens_by_memory"] > 0
    _, given = run_simulation(base.replace(replica__num_gpu_blocks=3_000))
    assert given["kv_cache_tokens"] == 48_000 < given["kv_cache_tokens_by_memory"] == over["kv_cache_tokens_by_memory"]
    _, planned = run_simulation(base)
    assert "kv_cache_tokens_by_memory" not in planned
    assert planned["kv_cache_tokens"] == over["kv_cache_tokens_by_memory"]


def test_profile_refuses_a_seed_that_draws_nothing(tmp_path: Path) -> None:
    """--seed draws only the decode-attention batches' mixed lengths: with --ops linear it changed nothing."""
    from profiler.runner import ProfileConfig

    with pytest.raises(ConfigError, match="--seed: draws the mixed lengths"):
        ProfileConfig(model="tiny-llama-1b", out=tmp_path, ops=("linear",), seed=3)
    assert ProfileConfig(model="tiny-llama-1b", out=tmp_path, ops=("attention",), seed=3).seed == 3
