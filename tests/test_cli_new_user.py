"""Issue 30: what a new user, a capacity planner and a vLLM user ran into, each as a check.

Flags that would do nothing are refused in one line (or the header says what was used),
traces replay whole, model names resolve (or are refused with a hint) instead of silently
becoming another model, capacity shows TTFT and goodput at capacity and searches on
DistServe's goodput with one flag, rankings keep coarse bounds apart, and piped output
keeps its lines whole.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import on_terminal
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.catalog import MODELS, get_model
from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def simulate(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=120)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def four_rows(tmp_path: Path) -> Path:
    path = tmp_path / "four.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,100,10\n0.5,200,20\n1.0,50,5\n1.2,300,8\n")
    return path


# -- bad input catalogue (issue 30): each a one-line refusal naming the flag ---------------------------------------
BAD_INPUT = [
    (["--chunk-size", "256", "--scheduler", "vllm"], "--chunk-size"),
    (["--chunk-size", "256", "--scheduler", "orca"], "--chunk-size"),
    (["--chunk-size", "256", "--scheduler", "fastertransformer"], "--chunk-size"),
    (["--max-num-batched-tokens", "512", "--scheduler", "orca"], "--max-num-batched-tokens"),
    (["--max-num-batched-tokens", "4096", "--scheduler", "fastertransformer"], "--max-num-batched-tokens"),
    (["--workload", "fixed", "--trace", "{trace}"], "--workload"),
    (["--qps", "1e300"], "qps"),
    (["--prompt-tokens-max", "100"], "pass --prompt-tokens-max of at least --prompt-tokens"),
    (["--qps", "nan"], "qps"),
    (["--replicas", "0"], "--replicas"),
    (["--model", "gpt-5"], "config.json"),
    (["--gpu", "{gpu_zero}"], "bf16_tflops"),
    (["--gpu", "{gpu_negative}"], "bf16_tflops"),
    # lengths that the workload would not read
    (["--workload", "sharegpt", "--input-len", "1024"], "--prompt-tokens"),
    (["--trace", "{trace}", "--output-len", "64"], "--output-tokens"),
    (["--workload", "long-context", "--random-range-ratio", "0.1"], "range-ratio"),
    (["--trace", "{trace}", "--range-style", "sglang"], "--range-style"),
    (["--workload", "fixed", "--prompt-tokens", "64", "--prompt-tokens-max", "128"], "--prompt-tokens-max"),
    # options the run would not read
    (["--moe-imbalance", "1.3"], "--moe-imbalance"),
    (["--no-prefix-caching", "--prefix-cache-policy", "radix-lru"], "--prefix-cache-policy"),
    (["--first-token-at", "prefill"], "--first-token-at"),
    (["--kv-link", "nvlink"], "--kv-link"),
    (["--cv", "2"], "--cv"),
    (["--time-scale", "2"], "--time-scale"),
    (["--router", "least_outstanding"], "--router"),
    # robustness audit: run's own options
    (["--save-result", "/proc/servesim-result.json"], "--save-result"),
    (["--ttft-slo", "-1"], "--ttft-slo"),
    (["--tbt-slo", "nan"], "--tbt-slo"),
    (["--goodput"], "--goodput"),
    (["--goodput", "ttft:300", "ttft:200"], "--goodput"),
    (["--metric-percentiles", "50,90"], "--metric-percentiles"),
    # disaggregated: options every pool overrides, a pool key given twice
    (["--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)", "--tp", "2"], "--tp"),
    (["--prefill-pool", "1x(gpu=h100-sxm)", "--decode-pool", "1x(gpu=h100-sxm)", "--gpu", "a100-80gb"], "--gpu"),
    (["--prefill-pool", "1x(sched=vllm)", "--decode-pool", "1x(sched=vllm)", "--scheduler", "sarathi"], "--scheduler"),
    (["--prefill-pool", "1x(sched=vllm)", "--decode-pool", "1x(sched=vllm)", "--max-num-batched-tokens", "512"],
     "--max-num-batched-tokens"),
    (["--prefill-pool", "1x(tp=1,tp=2)", "--decode-pool", "1x"], "tp given twice"),
    # a draft TP of 0 was read as 1 (braces doubled: the arguments are format strings)
    (["--speculative-config", '{{"method": "eagle3", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 0}}',
      "--acceptance-rate", "0.7"], "draft_tensor_parallel_size"),
    # robustness audit 2: flags that did nothing, lengths switched without asking
    (["--enable-expert-parallel"], "--enable-expert-parallel"),
    (["--inter-node-link", "infiniband-400g"], "--inter-node-link"),
    (["--allow-tp-across-nodes"], "--allow-tp-across-nodes"),
    (["--intra-node-link", "pcie"], "--intra-node-link"),
    (["--workload", "fixed", "--range-style", "sglang"], "--range-style"),
    (["--range-ratio", "0.5"], "--range-ratio"),
    (["--kernels", "vllm", "--gpu", "h100-sxm", "--dtype", "mxfp4"], "--dtype"),
    (["--range-style", "sglang"], "--range-style"),
    (["--workload", "arxiv", "--output-tokens-max", "100"], "would do nothing"),
    (["--kernels", "trtllm", "--gpu", "cpu"], "no AIConfigurator tables"),  # it blamed the KV cache's size
    (["--replicas", "2", "--router", "prefix_aware"], "--router"),  # sharegpt has no block hashes
    (["--engine", "vllm-2026:handoff_s=0.02"], "not disaggregated"),  # the handoff of an aggregated run
    (["--cpu-kv-gib", "10"], "--cpu-kv-gib"),
    # robustness audit 3: values that overflowed or crashed, flags that did nothing, errors that blamed another flag
    (["--arrival", "gamma", "--cv", "inf"], "--cv"),  # a ZeroDivisionError
    (["--arrival", "gamma", "--cv", "1e-300"], "--cv"),
    (["--burstiness", "inf"], "--burstiness"),  # it named --cv
    (["--model", "qwen3-30b-a3b", "--moe-imbalance", "inf"], "--moe-imbalance"),  # NaN latencies, exit 0
    (["--gpu", "{gpu_huge}"], "gpu.memory_gb"),  # an OverflowError
    (["--gpu", "{gpu_switch}"], "gpu.nvlink_switch"),  # "no" read as true
    (["--trace", "{trace}", "--arrival", "trace", "--time-scale", "1e-320"], "--time-scale"),
    (["--arrival", "burst", "--qps", "5"], "--qps"),
    (["--trace", "{trace}", "--arrival", "trace", "--qps", "100"], "--qps"),
    (["--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)", "--router", "random"], "--router"),
    (["--max-model-len", "10"], "raise --max-model-len"),  # it said --max-total-tokens
    (["--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)", "--num-gpu-blocks", "100"], "--num-gpu-blocks"),
    (["--speculative-config", '{{"method": "ngram", "num_speculative_tokens": 3}}', "--acceptance-rate", "0.7",
      "--spec-disable-batch-size", "2", "--spec-reduce-k-batch-size", "4"], "--spec-reduce-k-batch-size"),
    # a new-user audit: naming the default arrival process beside --concurrency made a closed loop 1 QPS
    (["--concurrency", "8", "--arrival", "poisson"], "--arrival"),
    # an NVLink KV link between two machines (a new-user audit)
    (["--gpu", "h100-sxm", "--prefill-pool", "1x(tp=8)", "--decode-pool", "1x(tp=8)", "--kv-link", "nvlink"],
     "one NVLink domain (8 on h100-sxm)"),
    (["--prefill-pool", "1x(gpu=h100-sxm)", "--decode-pool", "1x(gpu=a100-80gb)", "--kv-link", "nvlink"],
     "the prefill pool runs on h100-sxm and the decode pool on a100-80gb"),
    (["--gpu", "a40", "--prefill-pool", "1x(tp=2)", "--decode-pool", "1x(tp=2)", "--kv-link", "nvlink"],
     "one NVLink domain (2 on a40)"),  # bridged pairs
    (["--gpu", "h100-sxm", "--prefill-pool", "3x(tp=4)", "--decode-pool", "1x(tp=4)", "--kv-link", "nvlink"],
     "the prefill pool (12 GPUs) and the decode pool (4) are 16"),  # a pair fits a node, the deployment does not
    # click's usage errors: one line too, not a boxed usage block
    (["--qps", "abc"], "--qps"),
    (["--qpss", "3"], "--qpss"),
    (["--num-requests"], "--num-requests"),
]


def test_commands_that_build_pools_or_grids_take_what_they_decide() -> None:
    """disagg split/compare and plan build the pools and replica counts a KV link or a router
    applies to, and a sweep's grid may make any option apply: their base config is not refused."""
    from simulator.config.options import build_config

    for command in ("split", "compare", "plan", "sweep"):
        config = build_config(command=command, kv_link="nvlink", first_token_at="prefill", router="least_outstanding")
        assert config.kv_link == "nvlink" and config.router == "least_outstanding"
    with pytest.raises(ConfigError, match="would do nothing"):
        build_config(command="capacity", router="least_outstanding")
    build_config(command="sweep", cv=2.0)  # a grid over --arrival may make it gamma
    with pytest.raises(ConfigError, match="--cv"):
        build_config(command="plan", cv=2.0)


@pytest.mark.parametrize(("args", "workload"), [
    (["--input-len", "1024", "--output-len", "256"], "fixed 1024 prompt / 256 output tokens"),
    (["--random-input-len", "300", "--random-range-ratio", "0.1"], "range ratio 0.1 ([270, 330]"),
    (["--random-input-len", "300", "--random-range-ratio", "0.8", "--range-style", "sglang"],
     "range ratio 0.8 as sglang reads it ([240, 300]"),
    (["--prompt-tokens", "100", "--prompt-tokens-max", "400"], "uniform prompt [100, 400]"),
])
def test_lengths_without_a_workload_are_the_lengths_run(args: list[str], workload: str) -> None:
    """vllm bench's --random-input-len without --dataset-name: the lengths asked for, not ShareGPT's."""
    res = runner.invoke(app, ["run", "--num-requests", "8", "--no-progress", *args])
    assert res.exit_code == 0, res.output
    assert workload in [ln for ln in res.stdout.splitlines() if ln.startswith("workload:")][0]


@pytest.mark.parametrize(("args", "needle"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_naming_the_flag(tmp_path: Path, four_rows: Path, args: list[str], needle: str) -> None:
    for name, value in (("gpu_zero", 0), ("gpu_negative", -1)):
        (tmp_path / f"{name}.toml").write_text(f'bf16_tflops = {value}\nhbm_gb_per_s = 2000\nmemory_gb = 80\n')
    (tmp_path / "gpu_huge.toml").write_text('bf16_tflops = 100\nhbm_gb_per_s = 2000\nmemory_gb = 1e300\n')
    (tmp_path / "gpu_switch.toml").write_text('bf16_tflops = 100\nhbm_gb_per_s = 2000\nmemory_gb = 80\nnvlink_switch = "no"\n')
    places = {"trace": str(four_rows), **{name: str(tmp_path / f"{name}.toml")
                                          for name in ("gpu_zero", "gpu_negative", "gpu_huge", "gpu_switch")}}
    line = one_line_error(simulate("run", "--no-progress", *(a.format(**places) for a in args)))
    assert needle in line, line
    if "--replicas" in args:
        assert "--num-replicas" not in line


def test_acceptance_data_of_another_drafter_is_refused(shared_data: Path) -> None:
    line = one_line_error(simulate("run", "--no-progress", "--speculative-config",
                                   '{"method": "eagle3", "num_speculative_tokens": 3}', "--acceptance-data", "qwen3.5:mtp"))
    assert "--acceptance-data" in line and "MTP drafts" in line and "eagle3" in line, line


def test_qps_inf_is_said_to_mean_every_request_at_once() -> None:
    # vLLM's --request-rate inf: every request at t=0; the workload line says what was used.
    res = runner.invoke(app, ["run", "--qps", "inf", "--num-requests", "4", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "burst (all at t=0)" in [ln for ln in res.stdout.splitlines() if ln.startswith("workload:")][0]


def test_a_gpu_file_with_no_compute_is_described_one_way(tmp_path: Path) -> None:
    from simulator.config.catalog import get_gpu

    messages = []
    for value in (0, -1, "'x'"):
        path = tmp_path / f"g{len(messages)}.toml"
        path.write_text(f"bf16_tflops = {value}\nhbm_gb_per_s = 2000\nmemory_gb = 80\n")
        with pytest.raises(ConfigError) as err:
            get_gpu(str(path))
        messages.append(str(err.value).replace(str(path), "PATH"))
    assert messages[0].replace("0", "V") == messages[1].replace("-1", "V")
    assert all(m.startswith("gpu.bf16_tflops: PATH: needs a positive number") for m in messages), messages


def test_trace_without_trace_arrivals_says_poisson_over_its_lengths(four_rows: Path) -> None:
    res = runner.invoke(app, ["run", "--trace", str(four_rows), "--num-requests", "6", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "Poisson arrivals over the trace's lengths" in res.stdout


def test_a_trace_replays_whole_by_default(four_rows: Path, tmp_path: Path) -> None:
    import json

    res = runner.invoke(app, ["run", "--trace", str(four_rows), "--arrival", "trace", "--no-progress",
                              "--out", str(tmp_path / "o"), "--format", "csv"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["num_requests"] == 4
    # Told otherwise, it replays the first rows.
    res = runner.invoke(app, ["run", "--trace", str(four_rows), "--arrival", "trace", "--num-requests", "2", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["num_requests"] == 2


def test_a_whole_replays_warm_up_is_checked_against_its_rows(tmp_path: Path) -> None:
    # --num-warmup was checked against the default 256 requests before the replay's row count was set.
    import json

    path = tmp_path / "rows.csv"
    path.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                    + "".join(f"{i * 0.01:.2f},20,2\n" for i in range(300)))
    replay = ["run", "--trace", str(path), "--arrival", "trace", "--no-progress"]
    res = runner.invoke(app, [*replay, "--num-warmup", "260", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert (summary["num_warmup"], summary["num_requests"]) == (260, 40)  # the 300 rows less the warm-up
    res = runner.invoke(app, [*replay, "--num-warmup", "300"])
    assert res.exit_code != 0 and "num_requests=300" in str(res.exception), res.output


# -- names -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "short"), [
    ("Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("Qwen/Qwen3-8B", "qwen3-8b"),
    ("Qwen3-8B", "qwen3-8b"),
    ("Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-v0.3"),
    ("Llama-3.2-3B-Instruct", "llama-3.2-3b"),
    ("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b"),
    ("Llama-3.1-70B-Instruct", "llama-3.1-70b"),  # a repository name alone finds its organisation's id
])
def test_model_names_resolve_to_their_own_entry(name: str, short: str) -> None:
    assert get_model(name).name == short


# Published parameter counts (billions) the new entries' shapes must give, within 2%.
PUBLISHED = {
    "llama-3.3-70b": (70.6, "HF meta-llama/Llama-3.3-70B-Instruct model page, 70.6B params"),
    "qwen3-8b": (8.2, "Qwen3-8B model card: Number of Parameters 8.2B"),
    "mistral-7b-v0.3": (7.25, "HF mistralai/Mistral-7B-Instruct-v0.3 model page, 7.25B params"),
    "llama-3.2-3b": (3.21, "HF meta-llama/Llama-3.2-3B-Instruct model page, 3.21B params"),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_new_entries_match_published_counts_and_name_a_source(name: str) -> None:
    m = MODELS[name]
    assert m.num_params / 1e9 == pytest.approx(PUBLISHED[name][0], rel=0.02)
    assert "config.json" in m.source and m.name == name


def test_llama_33_is_not_llama_31() -> None:
    assert get_model("meta-llama/Llama-3.3-70B-Instruct") is not get_model("llama-3.1-70b")


def test_unknown_model_says_a_config_json_path_works() -> None:
    with pytest.raises(ConfigError) as err:
        get_model("Llama-9-1T")
    assert "config.json" in str(err.value)


def test_sweep_of_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    line = one_line_error(simulate("sweep", str(tmp_path)))
    assert "is a folder" in line and "does not exist" not in line


def test_plot_run_of_a_bad_file_does_not_blame_config(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("not json")
    line = one_line_error(simulate("plot", "run", str(bad)))
    assert "--config" not in line and "plot run" in line


def test_run_header_shows_engine_ep_and_dtype() -> None:
    res = runner.invoke(app, ["run", "--num-requests", "5", "--no-progress", "--dtype", "fp8", "--engine", "vllm-v1",
                              "--scheduler", "vllm-v1"])
    assert res.exit_code == 0, res.output
    header = res.stdout.splitlines()[0]
    for word in ("engine vllm-v1", "ep=1", "dtype fp8"):
        assert word in res.stdout, (word, header)


# -- capacity: TTFT and goodput at capacity, and the goodput criterion --------------------------------------------
CAP = ["capacity", "--num-requests", "60", "--rel-tol", "0.3", "--max-trials", "6", "--workers", "1"]


def test_capacity_prints_p99_ttft_and_goodput_at_capacity() -> None:
    import json

    res = runner.invoke(app, CAP)
    assert res.exit_code == 0, res.output
    last = [ln for ln in res.stdout.splitlines() if ln.startswith("capacity ")][0]
    assert "P99 TTFT" in last and "goodput" in last
    data = json.loads(runner.invoke(app, [*CAP, "--json"]).stdout)
    assert 0 <= data["goodput_fraction_at_capacity"] <= 1 and data["ttft_s_p99_at_capacity"] > 0


def test_capacity_headline_shows_the_judged_tbt_quantile() -> None:
    import json

    res = runner.invoke(app, [*CAP, "--tbt-quantile", "50"])
    assert res.exit_code == 0, res.output
    last = [ln for ln in res.stdout.splitlines() if ln.startswith("capacity ")][0]
    data = json.loads(runner.invoke(app, [*CAP, "--tbt-quantile", "50", "--json"]).stdout)
    assert f"P50 TBT {data['tbt_s_q_at_capacity']:.3g} s" in last and "P99 TBT" in last


def test_capacity_goodput_criterion_searches_on_distserve_goodput() -> None:
    import json

    res = runner.invoke(app, [*CAP, "--criterion", "goodput", "--goodput-ttft-slo", "1.5", "--goodput-tpot-slo",
                              "0.05", "--min-goodput", "0.8", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["slo_settings"]["criterion"] == "goodput"
    trials = data["trials"]
    assert trials and any(t["passed"] for t in trials) and any(not t["passed"] for t in trials)
    for t in trials:  # the verdict is the goodput target alone (a trial stopped early certainly misses it)
        if not t["stopped_early"]:
            assert t["passed"] == (t["goodput_fraction"] >= 0.8), t
        else:
            assert not t["passed"] and "TTFT" in t["reason"]
    assert data["goodput_fraction_at_capacity"] >= 0.8
    assert "goodput >= 80%" in data["slo"] and "TPOT <= 0.05s" in data["slo"]


def test_goodput_criterion_refuses_a_bad_target() -> None:
    res = runner.invoke(app, [*CAP, "--criterion", "goodput", "--min-goodput", "1.5"])
    assert isinstance(res.exception, ConfigError) and "min_goodput" in str(res.exception)
    res = runner.invoke(app, [*CAP, "--criterion", "ttft"])
    assert isinstance(res.exception, ConfigError) and "criterion" in str(res.exception)


# -- disagg rankings never mix coarse bounds with exact rates -----------------------------------------------------
def test_split_table_puts_coarse_bounds_apart() -> None:
    from simulator.cli.disagg import ranked_sections
    from simulator.config.run_config import RunConfig
    from simulator.planning.split import GoodputResult, results_frame

    cfg = RunConfig()
    exact = GoodputResult("a", "disagg", cfg, 2, rate_qps=4.0, rel_tol=0.05)
    bound = GoodputResult("b", "disagg", cfg, 2, rate_qps=3.0, rel_tol=0.25, coarse=True, failed_qps=3.9,
                          reason="below the best so far (coarse): passes at 3, fails at 3.9 QPS")
    other = GoodputResult("c", "vllm", cfg, 2, rate_qps=1.0, rel_tol=0.05)
    ranked, bounds = ranked_sections(results_frame([bound, exact, other]))
    assert list(ranked["label"]) == ["a", "c"] and list(bounds["label"]) == ["b"]


def test_split_help_promises_no_plot() -> None:
    out = runner.invoke(app, ["disagg", "split", "--help"], env={"COLUMNS": "300"}).stdout
    assert "plot" not in out


# -- piped output ---------------------------------------------------------------------------------------------------
def test_piped_header_and_warning_are_whole_lines() -> None:
    heavy = ["run", "--model", "mistral-7b", "--workload", "fixed", "--prompt-tokens", "2048", "--output-tokens", "64",
             "--qps", "20", "--num-requests", "100", "--no-progress", "--replicas", "1"]
    proc = simulate(*heavy, columns=80)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = [ln for ln in lines if "mistral-7b on" in ln]
    assert len(header) == 1 and "vllm-v1" in header[0] and "1 replica" in header[0] and "replica(s)" not in header[0]
    warning = [ln for ln in lines if "load exceeds capacity" in ln]
    assert len(warning) == 1 and warning[0].rstrip().endswith("(same options)")


def test_counts_have_plurals_and_thousands_separators() -> None:
    res = runner.invoke(app, ["run", "--num-requests", "1", "--no-progress"])
    assert res.exit_code == 0
    assert "1 requests" not in res.stdout and re.search(r"\b1 finished\b", res.stdout)
    from simulator.config.resources import format_bytes
    from simulator.util.text import count

    assert count(1, "request") == "1 request" and count(1_000_000, "request") == "1,000,000 requests"
    assert format_bytes(5401670.9 * 2**30) == "5.2 PiB" and format_bytes(3 * 2**30) == "3.0 GiB"


def test_models_respects_columns_when_piped() -> None:
    proc = simulate("models", columns=100)
    assert proc.returncode == 0
    assert max(len(ln) for ln in proc.stdout.splitlines()) <= 100
    words = set(re.split(r"[\s│┃,·]+", proc.stdout))
    assert all(m.name in words and m.hf_id in words for m in MODELS.values())


def test_overload_warning_wraps_between_words_on_a_terminal() -> None:
    out = on_terminal("run", "--model", "mistral-7b", "--workload", "fixed", "--prompt-tokens", "2048",
                      "--output-tokens", "64", "--qps", "20", "--num-requests", "100", "--no-progress", columns=80)
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if "load exceeds capacity" in ln)
    end = next(i for i, ln in enumerate(lines) if i >= start and "(same options)" in ln)
    warning = lines[start:end + 1]
    assert len(warning) > 1 and max(len(ln) for ln in warning) <= 80
    joined = " ".join(ln.strip() for ln in warning)  # a word split across lines would read "capac ity"
    assert "lower --qps or find the sustainable rate with `simulate capacity` (same options)" in joined
    header = next(i for i, ln in enumerate(lines) if "mistral-7b on" in ln)
    assert "vllm-v1" in " ".join(ln.strip() for ln in lines[header:header + 3])


def test_sweep_points_take_the_criterion_and_old_keys_stand() -> None:
    from simulator.config.run_config import RunConfig
    from simulator.planning.sweep import build_spec, point_key

    spec = build_spec({"mode": "capacity", "base": {"num_requests": 40, "min_goodput": 0.8},
                       "grid": {"criterion": ["tbt", "goodput"]}})
    by_criterion = {p.options["criterion"]: p for p in spec.points}
    assert set(by_criterion) == {"tbt", "goodput"}
    tbt = by_criterion["tbt"]
    before = {k: v for k, v in tbt.options.items() if k not in ("criterion", "goodput_tpot_slo")}
    assert point_key("capacity", tbt.config, before) == tbt.key  # a sweep folder from before still resumes
    assert by_criterion["goodput"].key != tbt.key
    assert isinstance(tbt.config, RunConfig)


# -- other commands' bad input (robustness audit): one line naming the flag, exit 2 -----------------------------
def test_config_error_survives_a_worker_process() -> None:
    """A ConfigError raised in a worker (capacity, sweep, plan) reaches the parent whole, not as a
    BrokenProcessPool traceback: it pickles by its own arguments."""
    import pickle

    err = pickle.loads(pickle.dumps(ConfigError("workload.qps", "too high", "lower it")))
    assert (err.field, err.problem, err.fix, str(err)) == ("workload.qps", "too high", "lower it",
                                                           "workload.qps: too high (lower it)")


@pytest.mark.parametrize("value", ["inf", "1e300"])
def test_capacity_refuses_a_ceiling_the_workload_would_refuse(value: str) -> None:
    line = one_line_error(simulate("capacity", "--num-requests", "20", "--max-qps", value))
    assert line.startswith("error: --max-qps:") and "1e+06" in line, line  # the flag, not the field


@pytest.mark.parametrize(("section", "key", "value", "needle"), [
    ("workload", "num_requests", "abc", "config.workload.num_requests: must be int"),
    ("replica", "tp", "2", "config.replica.tp: must be int"),
    ("replica", "model", None, "config.replica.model: must be str"),
    ("scheduler", "max_num_seqs", 1.5, "config.scheduler.max_num_seqs: must be int or null"),
    (None, "seed", "x", "config.seed: must be int"),
    (None, "replica", "x", "config.replica: must be an object"),
])
def test_a_config_json_of_the_wrong_types_is_one_line(tmp_path: Path, section: str | None, key: str,
                                                      value: object, needle: str) -> None:
    """A hand-edited config.json ("tp": "2", "model": null) is refused in one line, not a TypeError
    from a validator's comparison; run --config and plot run read it alike."""
    import json

    from simulator.config.run_config import RunConfig

    data = RunConfig().to_dict()
    (data[section] if section else data)[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    for args in (("run", "--no-progress", "--config", str(path)), ("plot", "run", str(path))):
        line = one_line_error(simulate(*args))
        assert needle in line, line


@pytest.mark.parametrize(("text", "needle"), [
    ("bf16_tflops = inf\nhbm_gb_per_s = 2000\nmemory_gb = 80\n", "gpu.bf16_tflops"),
    ("bf16_tflops = 900\nhbm_gb_per_s = 2000\nmemory_gb = 80\nnvlink_gb_per_s = nan\n", "gpu.nvlink_gb_per_s"),
    ("\udcff\udcfe", "not valid TOML"),
])
def test_a_gpu_file_with_infinite_or_unreadable_figures_is_refused(tmp_path: Path, text: str, needle: str) -> None:
    """inf and NaN parse as TOML floats; a non-UTF-8 file is not TOML: each one line, not a run or a traceback."""
    path = tmp_path / "gpu.toml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    line = one_line_error(simulate("run", "--no-progress", "--num-requests", "4", "--gpu", str(path)))
    assert needle in line, line


def test_plot_takes_a_run_folder_and_refuses_columns_it_would_not_use(tmp_path: Path) -> None:
    """`plot run FOLDER` (as its help says) draws; --hue/--x naming no column of a sweep, or given to
    plot run, are refused instead of swapped for another column or ignored."""
    from simulator.planning.sweep import build_spec, run_sweep

    run_dir = tmp_path / "run"
    assert simulate("run", "--no-progress", "--num-requests", "4", "--out", str(run_dir)).returncode == 0
    res = simulate("plot", "run", str(run_dir))
    assert res.returncode == 0 and "wrote" in res.stdout, res.stderr
    assert "--hue" in one_line_error(simulate("plot", "run", str(run_dir), "--hue", "qps"))
    sweep_dir = tmp_path / "sweep"
    run_sweep(build_spec({"base": {"num_requests": 4, "workload": "fixed", "prompt_tokens": 32, "output_tokens": 4},
                          "grid": {"qps": [1.0, 2.0]}}), sweep_dir)
    for flag in ("--hue", "--x"):
        line = one_line_error(simulate("plot", "sweep", str(sweep_dir), flag, "nope"))
        assert line.startswith(f"error: {flag}: 'nope' is not a column") and "qps" in line, line


def test_pool_options_a_pool_leaves_to_the_run_still_apply() -> None:
    """A run option reaches the pools that do not set the key: it is taken, not refused."""
    from simulator.config.options import build_config

    config = build_config(prefill_pool="1x", decode_pool="1x(tp=1)", tp=2)
    assert config.replica.tp == 2
    config = build_config(prefill_pool="1x", decode_pool="1x", scheduler="vllm", max_num_batched_tokens=4096)
    assert config.scheduler.max_num_batched_tokens == 4096  # the pools run vllm, so they keep its budget
    build_config(prefill_pool="1x", decode_pool="1x", mixed_pool="1x", scheduler="sarathi")  # the mixed pool runs it


@pytest.mark.parametrize(("args", "needle"), [
    (["split", "--tp", "2"], "--tp"),
    (["split", "--replicas", "2"], "--replicas"),
    (["split", "--prefill-pool", "1x", "--decode-pool", "1x"], "--prefill-pool"),
    (["compare", "--scheduler", "orca"], "--scheduler"),
    (["split", "--max-num-batched-tokens", "4096"], "--max-num-batched-tokens"),
    (["split", "--qps", "inf"], "workload.arrival"),
    (["split", "--concurrency", "4"], "--concurrency"),
    (["split", "--qps", "5"], "--qps"),  # the search sets the rate: 5 and 50 gave the same trials
    (["split", "--num-warmup", "5"], "--num-warmup"),
    (["split", "--workers", "0"], "--workers"),
])
def test_disagg_searches_refuse_what_they_set_or_cannot_search(args: list[str], needle: str) -> None:
    """disagg split/compare build every layout's pools, TP and replicas themselves and search a rate:
    options they set would do nothing, and rate-less arrivals would make every trial the same."""
    line = one_line_error(simulate("disagg", *args, "--gpus", "2"))
    assert needle in line, line


def test_disagg_split_keeps_a_vllm_budget_for_its_pools() -> None:
    from simulator.config.options import build_config

    config = build_config(command="split", scheduler="vllm", max_num_batched_tokens=4096)
    assert config.scheduler.max_num_batched_tokens == 4096


@pytest.mark.parametrize(("args", "needle"), [
    (["--qps", "inf"], "workload.arrival"),
    (["--rel-tol", "0"], "--rel-tol"),
    (["--max-gpus", "0"], "--max-gpus"),
    (["--max-cost", "nan"], "--max-cost"),
    (["--modes", ""], "--modes"),
    (["--dtypes", "fp3"], "--dtypes"),
    (["--top", "-1"], "--top"),
    (["--tp", "2"], "--tp"),
    (["--gpu", "h100-sxm"], "--gpu"),
    (["--prices", "{binary}"], "--prices"),
    (["--prices", "{max_w}"], "max_w"),
    (["--prices", "{dup}"], "priced twice"),  # the last row won in silence
    (["--ratios", "1:0"], "--ratios"),  # a pool of no replicas: every layout was dropped as invalid
    (["--tps", "3"], "does not divide"),  # the error said no layout fits, not why
])
def test_plan_refuses_before_searching(tmp_path: Path, args: list[str], needle: str) -> None:
    """What would fail every layout's search one by one, bound nothing, or be set by the plan
    itself is one line before the first of ~1,000 searches."""
    (tmp_path / "binary.csv").write_bytes(b"\x00\xff\xfe")
    (tmp_path / "max_w.csv").write_text("gpu,usd_per_gpu_hour,max_w\nh100-sxm,2,abc\n")
    (tmp_path / "dup.csv").write_text("gpu,usd_per_gpu_hour\nh100-sxm,1.0\nh100-sxm,9.0\n")
    places = {"binary": str(tmp_path / "binary.csv"), "max_w": str(tmp_path / "max_w.csv"), "dup": str(tmp_path / "dup.csv")}
    line = one_line_error(simulate("plan", *(a.format(**places) for a in args), "--out", str(tmp_path / "p")))
    assert needle in line, line


def test_a_malformed_ray_address_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    (tmp_path / "s.toml").write_text('[base]\nnum_requests = 4\n[grid]\nqps = [1, 2]\n')
    proc = simulate("sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"), "--ray-address", "foo",
                    "--no-progress")
    line = one_line_error(proc)
    assert line.startswith("error: --ray-address: cannot connect to 'foo'"), line
    assert not (tmp_path / "o").exists()  # refused before the sweep's folder is written


@pytest.mark.parametrize(("args", "needle"), [
    (["--num-decodes", "100000000"], "--num-decodes"),
    (["--max-tokens", "1000000000"], "--max-tokens"),
    (["--qps", "5"], "--qps"),
    (["--num-requests", "50"], "--num-requests"),
    (["--chunk-size", "512"], "--chunk-size"),
])
def test_tau_refuses_what_it_would_not_read_or_never_finish(args: list[str], needle: str) -> None:
    """tau prices one iteration over the workload's lengths and chooses the budget: rates, run size and
    budgets would do nothing; a batch or budget of 1e8 tokens would price for hours."""
    line = one_line_error(simulate("tau", *args))
    assert needle in line, line


def test_profile_refuses_options_the_cpu_run_would_not_read() -> None:
    """--cuda-graphs on the CPU timer, and --world-size without a comm op, would change nothing."""
    from profiler.runner import ProfileConfig

    with pytest.raises(ConfigError, match="--cuda-graphs"):
        ProfileConfig(model="phi-2", out=Path("unused"), device="cpu", cuda_graphs=True)
    with pytest.raises(ConfigError, match="--world-size"):
        ProfileConfig(model="phi-2", out=Path("unused"), ops=("linear",), world_sizes=(4,))
    ProfileConfig(model="phi-2", out=Path("unused"), ops=("linear", "comm"), world_sizes=(2,))  # comm reads it


def test_a_run_that_admits_no_prompt_prints_no_nan(tmp_path: Path) -> None:
    """Every request over the context limit: rejected and said so, and the prefix-cache share is '-', not 'nan%'."""
    trace = tmp_path / "long.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100000,10\n")
    res = runner.invoke(app, ["run", "--trace", str(trace), "--num-requests", "3", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "nan" not in res.stdout and "prefix cache: - of prompt tokens" in res.stdout, res.stdout
    assert "rejected: 3" in res.output


@pytest.mark.parametrize("flag", [["--qps", "5"], ["--tp", "2"], ["--kernels", "vllm", "--gpu", "h100-sxm"]])
def test_a_table_fit_refuses_run_options_it_does_not_read(tmp_path: Path, flag: list[str]) -> None:
    """calibrate-engine --table prices the table's own steps with the model, GPU, cost model and engine:
    a load, a layout or kernel prices given beside it changed nothing (the fit came out the same)."""
    table = tmp_path / "steps.csv"
    table.write_text("tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s\n"
                     "1,0,0,8,512,0.02\n1,1,512,0,0,0.05\n1,0,0,16,512,0.025\n1,1,1024,0,0,0.09\n")
    line = one_line_error(simulate("calibrate-engine", "--table", str(table), "--out", str(tmp_path / "e.json"), *flag))
    assert flag[0] in line and "would do nothing" in line, line
    assert not (tmp_path / "e.json").exists()


@pytest.mark.parametrize(("command", "args"), [("tau", ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}',
                                                        "--acceptance-rate", "0.5"]),
                                               ("tau", ["--concurrency", "4"])])
def test_searches_and_tau_refuse_what_they_do_not_read(command: str, args: list[str]) -> None:
    """tau priced the same plain iteration with speculation given; tau --concurrency blamed --arrival.
    (capacity judged every request whatever --num-warmup said: it now leaves the warm-up out, test_cli_fuzz_round9.)"""
    line = one_line_error(simulate(command, *args))
    assert args[0] in line and "would do nothing" in line, line


# -- robustness audit 3: search commands' options that did nothing or misled ---------------------------------------
@pytest.mark.parametrize(("args", "needle"), [
    (["--qps-start", "7", "--qps", "3"], "--qps-start"),  # --qps was dropped
    (["--criterion", "goodput", "--sched-delay-slo", "0.001"], "--sched-delay-slo"),  # not judged under goodput
    (["--criterion", "goodput", "--tbt-quantile", "10"], "--tbt-quantile"),
])
def test_capacity_refuses_options_the_search_would_not_read(args: list[str], needle: str) -> None:
    res = runner.invoke(app, [*CAP, *args])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith(needle), res.output


def test_capacity_whose_trials_all_passed_is_a_lower_bound() -> None:
    import json

    res = runner.invoke(app, [*CAP[:-4], "--max-trials", "2", "--qps", "0.1", "--workers", "1"])
    assert res.exit_code == 0, res.output
    assert any(ln.startswith("capacity at least ") for ln in res.stdout.splitlines()), res.stdout
    assert "raise --max-trials" in res.stdout and "raise max_qps" not in res.stdout
    data = json.loads(runner.invoke(app, [*CAP[:-4], "--max-trials", "2", "--qps", "0.1", "--workers", "1",
                                          "--json"]).stdout)
    assert data["capacity_is_lower_bound"] is True


@pytest.mark.parametrize(("args", "needle"), [
    (["--decode-context", "10000000"], "--decode-context"),  # beyond the model's context: priced anyway
    (["--num-decodes", "8000", "--decode-context", "100000"], "--num-decodes"),  # beyond the KV cache
    (["--scheduler", "sglang", "--scheduler-recv-interval", "5"], "--scheduler-recv-interval"),
])
def test_tau_refuses_batches_it_cannot_hold_and_options_it_does_not_read(args: list[str], needle: str) -> None:
    res = runner.invoke(app, ["tau", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", *args])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith(needle), res.output


def test_sweep_refuses_a_bad_format_before_announcing_points(tmp_path: Path) -> None:
    res = runner.invoke(app, ["sweep", "--grid", "qps=1,2", "--format", "xlsx", "--out", str(tmp_path / "s")])
    assert isinstance(res.exception, ConfigError) and "--format" in str(res.exception)
    assert "sweep:" not in res.stdout


def test_config_file_errors_name_their_cause() -> None:
    from simulator.config.run_config import RunConfig, SchedulerConfig
    from simulator.engine.replica import build_pool_scheduler

    with pytest.raises(ConfigError, match="kv_link: unknown link 'bogus'"):  # an aggregated run's config too
        RunConfig().replace(kv_link="bogus")
    RunConfig().replace(kv_link="25GB/s@10us", replica__gpu="l40s")  # a bandwidth, and no GPU check here
    with pytest.raises(ConfigError, match="watermark"):  # it blamed max_model_len alone
        build_pool_scheduler(RunConfig().replica, SchedulerConfig(watermark=0.99))


def test_an_unreachable_ray_address_is_refused_in_seconds() -> None:
    import time

    from simulator.planning.options import probe_address

    started = time.perf_counter()
    for address in ("127.0.0.1:1", "ray://127.0.0.1:1", "host.invalid:6379"):
        with pytest.raises(ConfigError, match="--ray-address"):
            probe_address(address, timeout_s=2.0)
    assert time.perf_counter() - started < 10
    with pytest.raises(ConfigError, match="not a number"):
        probe_address("127.0.0.1:abc")
    probe_address("local")  # Ray's own names pass


def test_a_bracketed_ipv6_ray_address_is_probed_as_ray_reads_it() -> None:
    """``[::1]:6379`` is Ray's form of an IPv6 address; the probe looked the bracketed name up and refused it."""
    import socket
    import threading

    from simulator.planning.options import probe_address

    try:
        server = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            conn.sendall(b"\x00\x00\x18\x04\x00\x00\x00\x00\x00")  # a SETTINGS frame, as gRPC answers

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        probe_address(f"[::1]:{port}", timeout_s=2.0)
    finally:
        thread.join(timeout=5)
        server.close()


@pytest.mark.parametrize(("reply", "is_ray"), [(b"HTTP/1.0 400 Bad Request\r\n\r\n", False), (b"", False),
                                               (b"\x00\x00\x18\x04\x00\x00\x00\x00\x00", True)])
def test_a_ray_address_that_answers_but_not_as_ray_is_refused(reply: bytes, is_ray: bool) -> None:
    """A port that takes the connection but is no Ray cluster (an HTTP server; a server that closes at once) is
    refused in one line: ``ray.init`` retried it for minutes. A server that answers HTTP/2's preface with a SETTINGS
    frame, as Ray's GCS and client server (gRPC) do, passes."""
    import socket
    import threading

    from simulator.planning.options import probe_address

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(64)
            if reply:
                conn.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        if is_ray:
            probe_address(f"127.0.0.1:{port}", timeout_s=2.0)
        else:
            with pytest.raises(ConfigError, match="--ray-address: something answers .* not as a Ray cluster"):
                probe_address(f"127.0.0.1:{port}", timeout_s=2.0)
    finally:
        thread.join(timeout=5)
        server.close()


def test_errors_of_a_new_user_audit_name_what_is_missing(tmp_path: Path) -> None:
    """An override without its value, an engine file that is not JSON, a Mooncake trace without its hash_ids and a
    HF config.json without model_type: each one line saying what is missing (they said "neither a preset nor an
    artifact", "JSONDecodeError", an unknown format naming no Mooncake key, and "unsupported model_type ''")."""
    bad_json = tmp_path / "engine.json"
    bad_json.write_text('{"format": 1,\n "x": }')
    mooncake = tmp_path / "mooncake.jsonl"
    mooncake.write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\n')
    hf = tmp_path / "config.json"
    hf.write_text('{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "vocab_size": 32000, '
                  '"intermediate_size": 11008}')
    cases = [(["--engine", "vllm-2026:cpu_iteration_s"], "the override 'cpu_iteration_s' has no value"),
             (["--engine", str(bad_json)], "line 2 column 7"),
             (["--trace", str(mooncake)], "input_length/output_length with hash_ids"),
             (["--model", str(hf)], "model.model_type: " + str(hf) + ": missing")]
    for args, needle in cases:
        line = one_line_error(simulate("run", "--no-progress", *args))
        assert needle in line, line


def test_capacity_says_when_num_gpu_blocks_gives_a_cache_larger_than_the_memory() -> None:
    """--num-gpu-blocks may exceed what the GPU holds (vLLM's override, asked for); run's header said so, capacity's
    answer did not, and a 500x cache raised a user capacity 14 -> 59 without a word (a new-user audit)."""
    args = ["capacity", "--users", "--model", "llama-3.1-8b", "--gpu", "l4", "--max-model-len", "4096", "--workload",
            "fixed", "--prompt-tokens", "1024", "--output-tokens", "64", "--tpot-slo", "0.2", "--tbt-slo", "1",
            "--num-requests", "40", "--max-users", "8"]
    big = simulate(*args, "--num-gpu-blocks", "10000000")
    assert big.returncode == 0, big.stderr
    assert "note: --num-gpu-blocks sets a KV cache of 160,000,000 tokens" in big.stdout
    plain = simulate(*args)
    assert plain.returncode == 0 and "--num-gpu-blocks" not in plain.stdout


def test_an_arrival_process_beside_a_concurrency_needs_a_rate_in_run_config_and_sweep(tmp_path: Path) -> None:
    """--arrival poisson beside --concurrency and no rate ran a capped open loop at the default 1 QPS, in `run`, over
    a closed loop's --config file and in a sweep file (a typed default --arrival in a sweep was dropped: closed
    loops). Each is refused; with a rate (typed, or a grid's) it runs; vLLM's --max-concurrency --burstiness 1 stays
    a closed loop."""
    assert "--arrival: poisson spaces arrivals at a rate" in one_line_error(
        simulate("run", "--no-progress", "--concurrency", "4", "--arrival", "poisson"))
    # fixed gaps too: it ran at the default 1 QPS, unsaid (an audit)
    assert "--arrival: fixed spaces arrivals at a rate, but no --qps" in one_line_error(
        simulate("run", "--no-progress", "--concurrency", "4", "--arrival", "fixed"))
    folder = tmp_path / "closed"
    assert simulate("run", "--no-progress", "--concurrency", "4", "--num-requests", "8", "--out",
                    str(folder)).returncode == 0
    config = str(folder / "config.json")
    assert "no --qps is given beside a concurrency of 4" in one_line_error(
        simulate("run", "--no-progress", "--config", config, "--arrival", "poisson"))
    assert simulate("run", "--no-progress", "--config", config, "--arrival", "poisson", "--qps", "3").returncode == 0
    sweep = tmp_path / "s.toml"
    sweep.write_text('mode = "run"\n[base]\nconcurrency = 8\narrival = "poisson"\nnum_requests = 8\n[grid]\nseed = [0, 1]\n')
    assert "--arrival: poisson spaces arrivals at a rate" in one_line_error(simulate("sweep", str(sweep), "--out",
                                                                            str(tmp_path / "o1")))
    assert "--arrival: poisson spaces arrivals at a rate" in one_line_error(simulate(
        "sweep", "--grid", "seed=0,1", "--concurrency", "8", "--arrival", "poisson", "--num-requests", "8", "--out",
        str(tmp_path / "o2")))
    assert simulate("sweep", "--grid", "qps=1,2", "--concurrency", "8", "--arrival", "poisson", "--num-requests", "8",
                    "--out", str(tmp_path / "o3")).returncode == 0
    closed = simulate("run", "--no-progress", "--max-concurrency", "8", "--burstiness", "1", "--num-requests", "8")
    assert closed.returncode == 0 and "closed loop: 8 users" in closed.stdout


def test_disagg_split_says_the_kv_link_refused_its_layouts_not_memory() -> None:
    """Every split of 16 H100s at TP 8 joins 16 GPUs by --kv-link nvlink, which one node's NVLink cannot (and no
    split of L40S GPUs has NVLink at all): the search blamed memory ('no layout ... holds llama-3.1-8b in memory',
    raise --gpus)."""
    line = one_line_error(simulate("disagg", "split", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "16",
                                   "--tps", "8", "--kv-link", "nvlink"))
    assert line.startswith("error: --kv-link: no layout of 16 GPUs at --tps 8 can run its handoff over nvlink"), line
    line = one_line_error(simulate("disagg", "split", "--model", "llama-3.1-8b", "--gpu", "l40s", "--gpus", "4",
                                   "--tps", "1", "--kv-link", "nvlink"))
    assert line.startswith("error: --kv-link:") and "l40s has no NVLink" in line, line
