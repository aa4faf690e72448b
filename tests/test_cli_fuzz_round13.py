"""CLI fuzzing, round 13: rejected requests reported as slow ones (capacity, plan, disagg split), a trace
labelled by the default workload, search lists searched twice, MoE knees of one token, a chain-trained head
drafting in parallel, capacity searches refused only after their trials, a --concurrency lowered unsaid, a
reproduction whose summary forgot the run's SLOs, and a preempting pass missing from the iterations table.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from simulator.cli.app import main
from simulator.config.errors import ConfigError


def invoke(*args: str) -> tuple[int, str]:
    """``simulate ARGS`` through the CLI's entry point (its one-line errors), in this process: (exit code, output)."""
    out = io.StringIO()
    argv, sys.argv = sys.argv, ["simulate", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                main()
                code = 0
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 0
    finally:
        sys.argv = argv
    return code, out.getvalue()


def refused(*args: str) -> str:
    """The one-line error of ``simulate ARGS`` (exit 2, no traceback)."""
    code, output = invoke(*args)
    lines = output.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, output)
    return lines[0]


@pytest.fixture
def half_too_long(tmp_path: Path) -> Path:
    """30 requests, every other one longer than a 2,048-token context."""
    rows = [f"{i * 0.2:.1f},{100 if i % 2 == 0 else 3000},20" for i in range(30)]
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time,num_prefill_tokens,num_decode_tokens\n" + "\n".join(rows) + "\n")
    return trace


def test_capacity_says_how_many_requests_were_rejected(half_too_long: Path) -> None:
    """Its trials passed with 15 of 30 requests rejected, said nowhere on screen; the workload read 'sharegpt'."""
    code, output = invoke("capacity", "--trace", str(half_too_long), "--num-requests", "30", "--max-model-len", "2048",
                          "--max-qps", "2")
    assert code == 0, output
    assert f"workload: trace {half_too_long}" in output and "sharegpt" not in output
    assert "note: up to 15 of a trial's 30 requests were rejected on arrival (prompt+output" in output
    assert "raise --max-model-len" in output
    assert "engine vllm-2026 · kernels roofline" in output  # what priced the trials, in the title


def test_a_goodput_search_names_rejections_not_slowness(half_too_long: Path) -> None:
    """disagg split printed 'best: ... at 0 req/s per GPU' with no reason; its trials' reason called the rejected
    requests late for TTFT."""
    code, output = invoke("disagg", "split", "--gpus", "2", "--tps", "1", "--trace", str(half_too_long),
                          "--num-requests", "30", "--max-model-len", "2048")
    assert code == 1, output  # (no answer)
    flat = " ".join(output.split())
    assert "best:" not in flat and "none meets the SLO at any rate searched" in flat
    assert "rejected on arrival (decode pool: prompt+output" in flat


def test_ttft_watch_tells_rejected_from_slow() -> None:
    from simulator.planning.capacity import TTFTWatch
    from simulator.workload.request import Request

    watch = TTFTWatch(ttft_s=1.0, attainment=0.9)
    rejected, slow = Request(0, 0.0, 10, 5), Request(1, 0.0, 10, 5)
    rejected.reject_reason = "prompt+output = 15 tokens exceeds max_model_len 8"
    assert watch.is_late(rejected, 0.5) and watch.is_late(slow, 2.0)
    assert watch.stop_message(2, 10, 2.0) == ("2 of 10 requests already missed TTFT 1s: 1 slow, 1 rejected on arrival "
                                              "(prompt+output = 15 tokens exceeds max_model_len 8)")


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--tps", "1,1", "--tps: 1 is given twice"), ("--seqs", "128,128", "--seqs: 128 is given twice"),
    ("--ratios", "1:1,1:1", "--ratios: 1:1 is given twice"), ("--dtypes", "bf16,BF16", "BF16 is given twice (as bf16)"),
    ("--dtypes", "fp4,nvfp4", "nvfp4 is given twice (as fp4)"), ("--gpus", "a100-80gb,a100", "a100 is given twice"),
    ("--tps", "1,,2", "--tps: has an empty item"),
])
def test_plan_refuses_a_value_given_twice(flag: str, value: str, said: str) -> None:
    """Each repeated value searched its layouts twice (every row of layouts.csv and trials.csv doubled)."""
    args = ["plan", "--qps", "2", "--num-requests", "20", flag, value]
    if flag != "--gpus":
        args += ["--gpus", "b200" if "fp4" in value else "a100-80gb"]
    assert said in refused(*args)


def test_disagg_and_sweep_lists_refuse_repeats_and_empty_items() -> None:
    assert "--tps: 1 is given twice" in refused("disagg", "split", "--gpus", "2", "--tps", "1,1")
    assert "--taus: 512 is given twice" in refused("disagg", "compare", "--taus", "512,512")
    assert "'qps=1,,2' has an empty value" in refused("sweep", "--grid", "qps=1,,2", "--out", "never-written")
    assert not Path("never-written").exists()


def test_parallel_drafting_needs_a_head_trained_for_it() -> None:
    from simulator.config.speculative import SpeculativeConfig

    with pytest.raises(ConfigError, match="drafts a chain.*use amazon/GPT-OSS-20B-P-EAGLE"):
        SpeculativeConfig(method="eagle3", num_speculative_tokens=3, draft_model="RedHatAI/gpt-oss-20b-speculator.eagle3",
                          parallel_drafting=True, acceptance_rates=(0.7,))
    spec = SpeculativeConfig(method="eagle3", num_speculative_tokens=3, draft_model="amazon/GPT-OSS-20B-P-EAGLE",
                             parallel_drafting=True, acceptance_rates=(0.7,))
    assert spec.known_head is not None and spec.known_head.parallel


def test_capacity_refuses_what_it_could_not_search_before_any_trial(tmp_path: Path) -> None:
    """A capacity sweep over concurrency ran every point and failed each; capacity --users lowered a --concurrency
    above --max-users to it without a word."""
    out = tmp_path / "sweep"
    line = refused("sweep", "--mode", "capacity", "--grid", "concurrency=2,4", "--num-requests", "20", "--out", str(out))
    assert "sweep point concurrency=2: --concurrency:" in line and "set users = true" in line
    assert not out.exists()
    assert "--concurrency: the search's first users, 100, are above the most it may try, 10" in refused(
        "capacity", "--users", "--concurrency", "100", "--max-users", "10", "--num-requests", "20")


def test_an_moe_knee_is_where_its_experts_are_all_read() -> None:
    """The asymptote passed above the one-token cost (its top-k experts only): every MoE's knee was 1 token."""
    from simulator.config.run_config import RunConfig
    from simulator.costmodel import load_cost_model
    from simulator.planning.tau import DecodeMix, choose_tau, knee_tokens

    mix = DecodeMix(num_decodes=8, decode_context=600, chunk_context=300, source="-")
    for model, tp in (("gpt-oss-20b", 1), ("mixtral-8x7b", 2)):
        config = RunConfig().replace(replica__model=model, replica__gpu="h100-sxm", replica__tp=tp)
        cost = load_cost_model(config.cost_model, config.replica, config.engine)
        knee = choose_tau(config, 0.1, mix, max_tokens=256).knee_tokens
        # (one token's cost, its top-k experts alone, gave the old 1; since round 16 it falls back to the ridge there)
        assert 16 < knee < 4096 and knee != knee_tokens(cost), (model, knee)
    dense = RunConfig().replace(replica__model="llama-3-8b", replica__gpu="h100-sxm")
    cost = load_cost_model(dense.cost_model, dense.replica, dense.engine)
    assert choose_tau(dense, 0.1, mix, max_tokens=256).knee_tokens == knee_tokens(cost) > 16  # unchanged


def test_a_reproduction_reports_as_the_run_did(tmp_path: Path) -> None:
    """config.json held no --ttft-slo, --tbt-slo, --goodput or --format: its reproduction's summary.json had the default
    SLOs' goodput and no benchmark block, and parquet tables."""
    first, again, changed = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    base = ["run", "--num-requests", "30", "--qps", "6", "--no-progress"]
    code, output = invoke(*base, "--ttft-slo", "0.1", "--tbt-slo", "0.05", "--goodput", "ttft:100 tpot:20",
                          "--format", "csv", "--out", str(first))
    assert code == 0, output
    code, output = invoke("run", "--config", str(first / "config.json"), "--no-progress", "--out", str(again))
    assert code == 0, output
    for name in ("summary.json", "config.json", "requests.csv", "iterations.csv"):
        assert (first / name).read_bytes() == (again / name).read_bytes(), name
    assert json.loads((first / "config.json").read_text())["report"]["goodput"] == "ttft:100 tpot:20"
    code, output = invoke("run", "--config", str(first / "config.json"), "--no-progress", "--ttft-slo", "1",
                          "--out", str(changed))  # a flag typed again wins over the file's
    assert code == 0, output
    assert json.loads((changed / "summary.json").read_text())["ttft_slo_s"] == 1.0
    data = json.loads((first / "config.json").read_text())
    data["report"]["ttft_slo_s"] = "fast"
    (tmp_path / "bad.json").write_text(json.dumps(data))
    assert "report.ttft_slo_s: must be a number (what --ttft-slo takes)" in refused(
        "run", "--config", str(tmp_path / "bad.json"), "--no-progress")
    line = refused("run", "--config", str(first / "summary.json"))
    assert "is a run's summary" in line and f"pass {first / 'config.json'}" in line


def test_a_preempting_pass_that_stalls_is_still_a_row(tmp_path: Path) -> None:
    """A disaggregated decode replica's pass that preempted its last running request left only waiting ones:
    the parked-blocks path slept without writing the pass, so the iterations table lost a preemption."""
    out = tmp_path / "x"
    code, output = invoke("run", "--num-requests", "100", "--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)",
                          "--num-gpu-blocks", "150", "--max-model-len", "2048", "--qps", "20", "--model", "llama-3.1-8b",
                          "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}',
                          "--acceptance-rate", "0.7", "--no-progress", "--out", str(out))
    assert code == 0, output
    requests, iterations = pd.read_parquet(out / "requests.parquet"), pd.read_parquet(out / "iterations.parquet")
    assert requests["num_preemptions"].sum() == iterations["num_preempted"].sum() > 0


def test_rejection_kinds_group_under_their_pool() -> None:
    from simulator.report.metrics import rejection_kind

    assert rejection_kind("decode pool: prompt+output = 24,043 tokens exceeds max_model_len 8192") == (
        "decode pool: prompt+output exceeds max_model_len 8192")


def test_an_open_loop_warm_up_is_said_in_the_header() -> None:
    code, output = invoke("run", "--num-requests", "20", "--num-warmup", "5", "--no-progress")
    assert code == 0, output
    assert "the first 5 requests a warm-up left out" in " ".join(output.split())


def test_an_engine_preset_runs_the_scheduler_it_was_fitted_with(tmp_path: Path) -> None:
    """--engine sglang-2026 alone ran vLLM V1's scheduling (a note said it was fitted with SGLang's); a refusal that
    what it set brought says so, one it did not bring does not; a sweep point naming it takes it too, in a column."""
    code, output = invoke("run", "--engine", "sglang-2026", "--gpu", "rtx-4090", "--num-requests", "5", "--no-progress")
    assert code == 0 and " · sglang (" in output and "--scheduler sglang" not in output, output
    line = refused("run", "--engine", "sglang-2026", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--attention-dp",
                   "2", "--ep", "2", "--dp-balance-timeout-iters", "5", "--num-requests", "5", "--no-progress")
    assert "SGLang schedules its DP ranks its own way" in line and "--engine sglang-2026 runs --scheduler sglang" in line
    line = refused("run", "--engine", "sglang-2026", "--gpu", "rtx-4090", "--prefix-cache-policy", "vllm-lru")
    assert "names no prompt blocks" in line and "--engine sglang-2026 runs" not in line  # (not what it set)
    out = tmp_path / "sweep"
    code, output = invoke("sweep", "--grid", "engine=vllm-2026,sglang-2026", "--gpu", "rtx-4090", "--num-requests",
                          "10", "--out", str(out))
    assert code == 0, output
    table = pd.read_csv(out / "results.csv")
    assert table[["engine", "scheduler"]].values.tolist() == [["vllm-2026", "vllm-v1"], ["sglang-2026", "sglang"]]


def test_an_engine_sets_nothing_a_run_does_not_read(tmp_path: Path) -> None:
    """(Review of the above.) A disaggregated run's pools run their own schedulers: --engine sglang-2026 there was
    refused for a --scheduler nobody typed; a pool on its own GPU took --gpu's tables; calibrate-engine's table fit
    was refused for a --kernels nobody typed; a sweep's --kernels roofline typed at its default was overridden; an
    error the engine did not bring blamed it."""
    code, output = invoke("run", "--engine", "sglang-2026", "--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)",
                          "--num-requests", "10", "--no-progress")
    assert code == 0, output
    code, output = invoke("run", "--engine", "trtllm-2026", "--prefill-pool", "1x(tp=1,gpu=a100-40gb)",
                          "--decode-pool", "1x(tp=1,gpu=a100-40gb)", "--num-requests", "10", "--no-progress")
    assert code == 0, output
    table = tmp_path / "steps.csv"
    rows = [f"1,0,0,{n},512,{0.015 + 0.0006 * n:.4f}" for n in (4, 8, 16, 32, 64, 128)]
    rows += [f"1,1,{t},0,0,{0.01 + 0.00007 * t:.4f}" for t in (256, 512, 1024, 2048, 4096, 8192)]
    table.write_text("tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s\n" + "\n".join(rows) + "\n")
    code, output = invoke("calibrate-engine", "--table", str(table), "--engine", "sglang-2026", "--out",
                          str(tmp_path / "e.json"))
    assert code == 0 and (tmp_path / "e.json").is_file(), output
    out = tmp_path / "sweep"
    code, output = invoke("sweep", "--engine", "sglang-2026", "--scheduler", "vllm-v1", "--gpu", "rtx-4090",
                          "--num-requests", "10", "--grid", "tp=1,2", "--out", str(out))
    assert code == 0, output
    assert "scheduler" not in pd.read_csv(out / "results.csv").columns  # (nothing set: the typed default runs)
    line = refused("run", "--engine", "sglang-2026", "--gpu", "rtx-4090", "--scheduler-recv-interval", "2", "--qps", "-1")
    assert "--qps: must be positive" in line and "--engine sglang-2026 runs" not in line


def test_a_users_sweep_refuses_a_first_users_above_its_limit_before_any_trial(tmp_path: Path) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text('mode = "capacity"\n[base]\nusers = true\nmax_users = 32\nnum_requests = 40\n'
                     "[grid]\nconcurrency = [8, 64]\n")
    line = refused("sweep", str(sweep), "--out", str(tmp_path / "out"))
    assert "sweep point concurrency=64: workload.concurrency: the search's first users, 64, are above" in line
    assert not (tmp_path / "out").exists()


def test_capacity_reads_one_ttft_limit_and_reports_throughput() -> None:
    """(A second walkthrough.) capacity --ttft-slo 30 printed goodput against 2 s (--goodput-ttft-slo's default) beside
    a passing trial; --users gave no throughput, the question a users search answers."""
    code, output = invoke("capacity", "--ttft-slo", "30", "--num-requests", "100", "--max-qps", "2")
    assert code == 0, output
    flat = " ".join(output.split())
    assert "TTFT<=30s" in flat.replace(" ", "") and "goodput" in flat and "(TTFT <= 30s" in flat
    code, output = invoke("capacity", "--ttft-slo", "30", "--min-goodput", "0.5", "--num-requests", "100",
                          "--max-qps", "2")  # (goodput judged: its own limit, 2 s)
    assert code == 0 and "(TTFT <= 2s" in " ".join(output.split()), output
    code, output = invoke("capacity", "--users", "--num-requests", "100", "--max-users", "16")
    assert code == 0, output
    found = re.search(r"output ([\d,]+) tok/s", " ".join(output.split()))
    assert found and float(found.group(1).replace(",", "")) > 0, output


def test_equal_lengths_in_a_closed_loop_are_said_to_move_in_waves() -> None:
    code, output = invoke("run", "--concurrency", "8", "--workload", "fixed", "--num-requests", "24", "--no-progress")
    assert code == 0 and "users move in lock-stepped waves" in " ".join(output.split()), output
    code, output = invoke("run", "--concurrency", "8", "--workload", "fixed", "--random-range-ratio", "0.8",
                          "--range-style", "sglang", "--num-requests", "24", "--no-progress")
    assert code == 0 and "lock-stepped" not in output, output


def test_small_headers_and_fields_name_what_was_given() -> None:
    code, output = invoke("run", "--metrics", "vllm", "--num-requests", "10", "--no-progress")
    assert code == 0 and "(tp=1, pp=1, dp=1, ep=1) · 1 replica" in output and "cost model: roofline" in output, output
    # the default view's header: the policy's effective knobs, dtype and prefix cache (the vLLM view dropped them)
    assert "2,048-token budget, <= 256 seqs" in output and "dtype bf16" in output and "prefix caching: on" in output
    assert refused("run", "--gpu", "h100-sxm", "--chunk-size", "512").startswith(
        "error: --chunk-size: 512 tokens is below max_num_seqs 1,024")
