"""CLI fuzzing, round 5: the newest scheduler knobs across commands, and malformed calibration input.

Each case was a traceback (calibrate-engine on an inf or 1e20 iteration-table row, a bench JSON with
a 1e20 length, a negative rate, text submit times or a bare number where a list goes, benchmark rows
with an inf concurrency; validate on an empty or foreign perf_model.csv), a wrong answer (disagg
split/compare laid out 4 GPUs for --gpus 2 under --pp 2 or --attention-dp 2), a refusal naming the
wrong flag or a circle of refusals (batch waiting in split, compare and plan --modes disagg blamed on
--gpus; plan's attention-DP balance sent to --attention-dp, which plan refuses; SGLang's intake
interval in SGLang pools sent to --scheduler sglang, which the pools then refused; a sweep base
refused for a scheduler its grid replaces), or a value silently dropped (a batch-wait ratio under
one token of the budget, which never holds a step; a --speculative-config key given twice, or
acceptance_rate beside acceptance_rates; a fractional count truncated). Now each is one line naming
the field, exit code 2, or runs as asked; the valid neighbours still run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import one_line_error, simulate_module

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
HUGE = 1e20
BATCH_WAIT = ["--batch-wait-timeout-iters", "40", "--batch-wait-max-tokens-ratio", "0.8"]
ITERATION_HEADER = "tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s"


def simulate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return simulate_module(*args, cwd=cwd)


def iteration_table(path: Path, first_row: str) -> Path:
    """An iteration table of 19 usable rows after ``first_row`` (line 2)."""
    rows = [first_row] + [f"1,0,0,{8 * i},{1000 * i},0.0{i + 1}" for i in range(1, 10)] \
        + [f"1,1,{256 * i},4,500,0.0{i + 2}" for i in range(1, 10)]
    path.write_text("\n".join([ITERATION_HEADER, *rows]) + "\n")
    return path


@pytest.mark.parametrize(("row", "needle"), [
    ("1,1,512,0,0,inf", "infinite"),  # passed the sign check; ValueError in the least squares
    ("1,1,1e20,0,0,0.05", "more than 4,194,304 tokens"),  # 'Maximum allowed size exceeded' pricing the step
    ("1,1.5,512,0,0,0.05", "fractional"),  # 1.5 prompts priced as one
])
def test_calibrate_engine_refuses_a_bad_iteration_row(tmp_path: Path, row: str, needle: str) -> None:
    table = iteration_table(tmp_path / "table.csv", row)
    line = one_line_error(simulate("calibrate-engine", "--out", str(tmp_path / "engine.json"), "--table", str(table)))
    assert line.startswith("error: table: row on line 2") and needle in line, line
    assert not (tmp_path / "engine.json").exists()


def test_a_clean_iteration_table_still_fits(tmp_path: Path) -> None:
    import pandas as pd

    from simulator.calibrate.engine_fit import check_iteration_table
    table = iteration_table(tmp_path / "table.csv", "1,1,512,0,0,0.05")
    assert len(check_iteration_table(pd.read_csv(table), "llama-2-7b", "a100-80gb")) == 19


BENCH = {"input_lens": [100] * 10, "output_lens": [10] * 10, "ttfts": [0.05] * 10,
         "itls": [[0.01] * 9 for _ in range(10)], "request_rate": "inf", "model_id": "meta-llama/Llama-2-7b-hf"}


@pytest.mark.parametrize(("change", "needle"), [
    ({"input_lens": [HUGE] + [100] * 9}, "input_lens[0] is 1e+20, not a whole token count"),  # OverflowError
    ({"output_lens": [10.5] * 10}, "output_lens[0] is 10.5, not a whole token count"),  # truncated to 10
    ({"request_rate": -3}, "request_rate -3.0 is not a positive rate"),  # 'scale < 0' from numpy
    ({"request_rate": "nan"}, "request_rate nan is not a positive rate"),  # blamed on 'requests: arrival_at'
    ({"request_submit_times": ["a"] * 10}, "request_submit_times holds 'a'"),  # ValueError
    ({"errors": 5}, "errors must be a list"),  # TypeError
    ({"itls": [5] * 10}, "itls[0] must be a list"),  # TypeError
])
def test_read_bench_refuses_malformed_values(tmp_path: Path, change: dict, needle: str) -> None:
    from simulator.calibrate.engine_fit import read_bench

    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**BENCH, **change}))
    with pytest.raises(ConfigError, match="bench") as err:
        read_bench(path)
    assert needle in str(err.value), err.value


def test_calibrate_engine_bench_overflow_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**BENCH, "output_lens": [HUGE] * 10}))
    line = one_line_error(simulate("calibrate-engine", "--out", str(tmp_path / "e.json"), "--bench", str(path)))
    assert line.startswith("error: bench: ") and "output_lens[0] is 1e+20" in line, line


@pytest.mark.parametrize(("value", "needle"), [("inf", "concurrency must be a positive finite whole number, got inf"),
                                               ("4.5", "concurrency must be a positive finite whole number, got 4.5"),
                                               ("nan", "got nan (")])  # was 'got np.float64(nan)'
def test_calibrate_engine_rows_refuse_odd_concurrency(tmp_path: Path, value: str, needle: str) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text("backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms\n"
                    f"vllm,llama-2-7b,a100-80gb,1024,128,{value},100,20\n")  # inf: an OverflowError traceback
    line = one_line_error(simulate("calibrate-engine", "--out", str(tmp_path / "e.json"), "--rows", str(rows)))
    assert line.startswith("error: rows: ") and needle in line, line


@pytest.mark.parametrize(("text", "needle"), [("", "is not a readable CSV"), ("a,b\n1,2\n", "lacks column(s) model")])
def test_validate_refuses_a_malformed_profiles_folder(tmp_path: Path, text: str, needle: str) -> None:
    (tmp_path / "data" / "splitwise-sim").mkdir(parents=True)
    (tmp_path / "data" / "splitwise-sim" / "perf_model.csv").write_text(text)  # a traceback either way
    line = one_line_error(simulate("validate", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "data")))
    assert line.startswith("error: --data: ") and needle in line, line


@pytest.mark.parametrize("changes", [{"replica__pp": 2}, {"replica__model": "qwen3-30b-a3b", "replica__attention_dp": 2,
                                                          "replica__ep": 2}])
def test_split_and_compare_lay_out_exactly_the_gpus(changes: dict) -> None:
    """A replica keeps the run's pp and attention DP: --gpus 4 laid out 8 GPUs (and --gpus 2, 4)."""
    from simulator.config.disagg_layout import num_gpus_of
    from simulator.planning.split import aggregated_candidates, split_candidates

    config = RunConfig().replace(**changes)
    for gpus in (2, 4, 8):
        layouts = split_candidates(config, gpus, (1, 2)) + [c for _, c in aggregated_candidates(config, gpus, (1, 2), (512,))]
        assert {num_gpus_of(c) for c in layouts} <= {gpus}
    assert split_candidates(config, 4, (1,)) and aggregated_candidates(config, 4, (1,), (512,))
    assert not split_candidates(config, 2, (1,))  # two replicas of 2 GPUs each do not fit 2 GPUs


@pytest.mark.parametrize("command", ["split", "compare"])
def test_disagg_searches_refuse_batch_waiting(command: str) -> None:
    # was 'gpus: no layout of that many GPUs fits the model': every layout refused batch waiting
    line = one_line_error(simulate("disagg", command, "--gpus", "2", "--num-requests", "8", *BATCH_WAIT))
    assert line.startswith(f"error: --batch-wait-timeout-iters: disagg {command} does not read it"), line
    assert "--gpus" not in line, line


@pytest.mark.parametrize(("args", "needle"), [
    (["--modes", "disagg", *BATCH_WAIT], "--batch-wait-timeout-iters: --modes disagg searches only disaggregated"),
    (["--modes", "agg", "--dp-balance-timeout-iters", "60"], "llama-2-7b has no experts"),
    (["--model", "qwen3-30b-a3b", "--modes", "disagg", "--dp-balance-timeout-iters", "60"], "--modes disagg"),
    (["--model", "qwen3-30b-a3b", "--attention-dps", "1", "--dp-balance-timeout-iters", "60"],
     "--attention-dps searches attention DP 1 only"),
])
def test_plan_refuses_knobs_no_layout_reads(tmp_path: Path, args: list[str], needle: str) -> None:
    line = one_line_error(simulate("plan", "--gpus", "h100-sxm", "--tps", "1", "--num-requests", "16", "--qps", "1",
                                   "--out", str(tmp_path / "plan"), *args))
    assert needle in line and "would do nothing" in line, line
    assert not line.startswith("error: --gpus"), line


def test_plan_takes_the_dp_balance_for_its_attention_dp_layouts(tmp_path: Path) -> None:
    # was refused: 'no replica has attention-DP ranks ... add --attention-dp N', which plan refuses in turn
    proc = simulate("plan", "--model", "qwen3-30b-a3b", "--gpus", "h100-sxm", "--tps", "1", "--seqs", "128",
                    "--budgets", "2048", "--attention-dps", "2", "--modes", "agg", "--num-requests", "16", "--qps", "1",
                    "--no-verify", "--dp-balance-timeout-iters", "60", "--out", str(tmp_path / "plan"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads((tmp_path / "plan" / "plan.json").read_text())
    assert plan["config"]["scheduler"]["dp_balance_timeout_iters"] == 60


def test_plan_without_an_answer_writes_its_figure_quietly(tmp_path: Path) -> None:
    # a limit no layout meets left a legend of nothing: matplotlib's UserWarning on stderr
    proc = simulate("plan", "--gpus", "a100-80gb", "--tps", "1", "--seqs", "128", "--budgets", "512", "--modes", "agg",
                    "--num-requests", "16", "--qps", "1", "--no-verify", "--max-cost", "0.01", "--out", str(tmp_path / "p"))
    assert proc.returncode == 1 and "no layout meets" in proc.stdout, proc.stderr[-2000:]
    assert proc.stderr.strip() == "", proc.stderr
    assert (tmp_path / "p" / "frontier.png").is_file()


def test_a_sweep_base_is_judged_by_its_points() -> None:
    """The base alone ran on the default scheduler (vllm-v1), which a grid of sglang replaces."""
    from simulator.planning.sweep import build_spec

    spec = build_spec({"base": {"num_requests": 4, "scheduler_recv_interval": 4},
                       "grid": {"scheduler": ["sglang"], "qps": [1, 2]}})
    assert [p.config.scheduler.recv_interval for p in spec.points] == [4, 4]
    # an invalid point blames the grid value that fails on the base alone ...
    with pytest.raises(ConfigError, match=r"^sweep\.grid\.scheduler=vllm-v1: scheduler\.recv_interval"):
        build_spec({"base": {"num_requests": 4, "scheduler_recv_interval": 4}, "grid": {"scheduler": ["vllm-v1", "sglang"]}})
    # ... and the base where no grid value makes it valid
    with pytest.raises(ConfigError, match=r"^sweep\.base: scheduler\.recv_interval"):
        build_spec({"base": {"num_requests": 4, "scheduler_recv_interval": 4}, "grid": {"qps": [1, 2]}})
    with pytest.raises(ConfigError, match=r"^sweep\.grid\.scheduler=sglang: scheduler\.batch_wait_timeout_iters"):
        build_spec({"base": {"batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8},
                    "grid": {"scheduler": ["trtllm", "sglang"]}})


def test_a_sweep_flag_is_judged_by_the_points_its_grid_makes(tmp_path: Path) -> None:
    """The flag alone is refused on the default scheduler; every point of the grid takes it."""
    out = tmp_path / "s"
    proc = simulate("sweep", "--grid", "scheduler=sglang", "--scheduler-recv-interval", "4", "--num-requests", "8",
                    "--out", str(out), "--no-progress")
    assert proc.returncode == 0, proc.stderr[-2000:]
    import csv

    (row,) = csv.DictReader((out / "results.csv").open())
    assert (row["scheduler"], row["scheduler_recv_interval"], row["status"]) == ("sglang", "4", "ok")
    proc = simulate("sweep", "--grid", "scheduler=sglang,vllm-v1", "--scheduler-recv-interval", "4",
                    "--num-requests", "8", "--out", str(tmp_path / "t"), "--no-progress")
    assert proc.returncode == 2 and proc.stderr.startswith("error: sweep.grid.scheduler=vllm-v1: "), proc.stderr
    assert "Traceback" not in proc.stderr


SGLANG_POOLS = ["--prefill-pool", "1x(sched=sglang)", "--decode-pool", "1x(sched=sglang)"]


def test_sglang_pools_take_the_intake_interval() -> None:
    # refused in a circle: 'use --scheduler sglang', then '--scheduler would do nothing'
    from simulator.config.options import build_config

    config = build_config(scheduler="sglang", scheduler_recv_interval=30, prefill_pool="1x(sched=sglang)",
                          decode_pool="1x(sched=sglang)")
    assert config.scheduler.recv_interval == 30
    with pytest.raises(ConfigError, match="--scheduler would do nothing"):  # interval 1: --scheduler is unread again
        build_config(scheduler="sglang", prefill_pool="1x(sched=sglang)", decode_pool="1x(sched=sglang)")


def test_a_pool_of_another_scheduler_names_sched_not_scheduler() -> None:
    line = one_line_error(simulate("run", "--scheduler", "sglang", "--scheduler-recv-interval", "4", "--prefill-pool",
                                   "1x(sched=sglang)", "--decode-pool", "1x(sched=vllm-v1)", "--num-requests", "4",
                                   "--no-progress"))
    assert line.startswith("error: decode_pool (scheduler.recv_interval): ") and "set sched=sglang" in line, line


@pytest.mark.parametrize(("scheduler", "ratio", "budget"), [("trtllm", 1e-300, "8,192"), ("trtllm", 1e-4, "8,192"),
                                                            ("sarathi", 1e-3, "512")])
def test_a_batch_wait_ratio_under_one_token_is_refused(scheduler: str, ratio: float, budget: str) -> None:
    # every step that decodes reaches a threshold under one token: the run was the run without batch waiting
    with pytest.raises(ConfigError, match=f"^scheduler.batch_wait_max_tokens_ratio: .* the {budget}-token budget"):
        RunConfig().replace(scheduler__name=scheduler, scheduler__batch_wait_timeout_iters=40,
                            scheduler__batch_wait_max_tokens_ratio=ratio)
    RunConfig().replace(scheduler__name=scheduler, scheduler__batch_wait_timeout_iters=40,
                        scheduler__batch_wait_max_tokens_ratio=0.01)


@pytest.mark.parametrize(("spec", "needle"), [
    ('{"method": "eagle3", "num_speculative_tokens": 3, "method": "ngram"}', "--speculative-config.method: given twice"),
    ('{"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rate": 0.5, "acceptance_rates": [0.6]}',
     "--speculative-config.acceptance_rate: given with acceptance_rates"),
])
def test_speculative_config_refuses_a_value_it_would_drop(spec: str, needle: str) -> None:
    line = one_line_error(simulate("run", "--speculative-config", spec, "--num-requests", "4", "--no-progress"))
    assert line.startswith(f"error: {needle}"), line


def test_speculative_config_repeating_a_key_alike_still_runs() -> None:
    from simulator.config.speculative import vllm_json_fields

    fields = vllm_json_fields('{"method": "eagle3", "num_speculative_tokens": 3, "method": "eagle3"}')
    assert fields["method"] == "eagle3" and fields["num_speculative_tokens"] == 3


def test_a_step_too_large_for_the_gpu_names_the_budget_not_only_the_layout() -> None:
    # A 10M-token budget's activations (1,150 GiB) were blamed on the layout alone ("raise --tp/--pp").
    line = one_line_error(simulate("run", "--max-num-batched-tokens", "10000000", "--num-requests", "4", "--no-progress"))
    assert line.startswith("error: replica: ") and "lower --max-num-batched-tokens or --max-num-seqs" in line, line
    # weights that do not fit still point at the layout alone
    line = one_line_error(simulate("run", "--model", "llama-3.1-70b", "--num-requests", "4", "--no-progress"))
    assert "(raise --tp/--pp, quantise the weights (--dtype fp8) or use a larger GPU)" in line \
        and "max-num-batched-tokens" not in line, line


@pytest.mark.parametrize("seeds", ["1000000", "0"])
def test_a_seed_count_past_any_study_is_refused_before_the_search(seeds: str) -> None:
    # a million seeds planned its searches for minutes, printing nothing, before its first trial
    line = one_line_error(simulate("capacity", "--seeds", seeds, "--num-requests", "64"))
    assert line.startswith("error: --seeds: must be in [1, 1,000]"), line
