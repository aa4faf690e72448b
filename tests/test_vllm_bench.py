"""A vLLM user's habits: `vllm bench serve` / `vllm serve` flag names, its result block and JSON."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator.cli.app import app, joined_values, main
from simulator.config.errors import ConfigError
from simulator.config.options import build_config
from simulator.report.benchmark import parse_goodput

runner = CliRunner()

VLLM_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
             "request_goodput", "output_throughput", "total_token_throughput", "max_concurrent_requests",
             "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors",
             "backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency", "date",
             *(f"{stat}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for stat in ("mean", "median", "std", "p99")))

BENCH_LINE = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm", "--tensor-parallel-size", "1",
              "--dataset-name", "random", "--random-input-len", "256", "--random-output-len", "32",
              "--random-range-ratio", "0.1", "--num-prompts", "120", "--max-concurrency", "8",
              "--request-rate", "inf", "--num-warmups", "16"]


def test_a_vllm_bench_serve_command_line_runs_and_saves_vllms_keys(tmp_path, monkeypatch, capsys):
    out = tmp_path / "result.json"
    # Through the console entry point: vLLM's --goodput takes several values (ttft:300 tpot:50).
    args = ["simulate", "run", *BENCH_LINE, "--goodput", "ttft:300", "tpot:50", "--metrics", "vllm",
            "--save-result", str(out), "--no-progress"]
    monkeypatch.setattr(sys, "argv", args)
    with pytest.raises(SystemExit) as done:
        main()
    printed = capsys.readouterr().out
    assert done.value.code in (0, None), printed
    for line in ("Mean TTFT (ms):", "Median TPOT (ms):", "P99 ITL (ms):", "Mean E2EL (ms):",
                 "Request goodput (req/s):", "Total Token throughput (tok/s):", "Maximum request concurrency:",
                 "Serving Benchmark Result"):
        assert line in printed
    doc = json.loads(out.read_text())
    assert not set(VLLM_KEYS) - set(doc)
    assert doc["completed"] == 120 - 16 and doc["max_concurrency"] == 8 and doc["request_rate"] == "inf"
    assert len(doc["ttfts"]) == len(doc["itls"]) == 104
    assert doc["max_concurrent_requests"] <= 8
    assert doc["request_goodput"] <= doc["request_throughput"]
    # The figures are those of the requests listed (vLLM's own relations between its keys).
    assert doc["mean_ttft_ms"] == pytest.approx(np.mean(doc["ttfts"]) * 1000)
    assert doc["mean_e2el_ms"] == pytest.approx(np.mean(doc["latencies"]) * 1000)
    assert doc["mean_itl_ms"] == pytest.approx(np.mean(np.concatenate(doc["itls"])) * 1000)
    assert doc["total_output_tokens"] == sum(doc["output_lens"])
    assert all(218 <= n <= 282 for n in doc["input_lens"])  # 256 banded by 0.1: [floor(230.4), ceil(281.6)]


def test_aliases_give_the_canonical_config():
    vllm = build_config(tensor_parallel_size=2, pipeline_parallel_size=1, request_rate=4.0, num_prompts=50,
                        max_concurrency=8, dataset_name="random", random_input_len=300, random_output_len=20,
                        random_range_ratio=0.2, quantization="fp8", model="llama-3-8b", gpu="h100-sxm")
    ours = build_config(tp=2, pp=1, qps=4.0, num_requests=50, concurrency=8, workload="random", prompt_tokens=300,
                        output_tokens=20, range_ratio=0.2, dtype="fp8", model="llama-3-8b", gpu="h100-sxm")
    assert vllm == ours


def test_dataset_name_random_takes_vllms_default_lengths():
    # vllm bench serve --dataset-name random draws 1024-token prompts (--random-input-len's default) and 128-token
    # outputs; the prompts here were `fixed`'s 512.
    workload = build_config(dataset_name="random", num_prompts=50, request_rate=float("inf")).workload
    assert (workload.prompt_tokens, workload.output_tokens) == (1024, 128)
    assert build_config(workload="random").workload.prompt_tokens == 1024  # the same option under its own name
    assert build_config(dataset_name="random", random_input_len=300).workload.prompt_tokens == 300  # given, it stands
    assert build_config(workload="fixed").workload.prompt_tokens == 512  # fixed is this project's own
    res = runner.invoke(app, ["run", "--dataset-name", "random", "--num-prompts", "4", "--request-rate", "inf",
                              "--no-progress"])
    assert res.exit_code == 0 and "1024 prompt / 128 output tokens" in res.stdout, res.output


def test_an_alias_and_its_name_together_is_refused():
    with pytest.raises(ConfigError, match="--tp"):
        build_config(tp=2, tensor_parallel_size=4, model="llama-3-8b")


def test_burstiness_is_gamma_arrivals_as_vllm():
    config = build_config(request_rate=2.0, burstiness=0.25)
    assert config.workload.arrival == "gamma" and config.workload.cv == pytest.approx(2.0)
    assert build_config(request_rate=2.0, burstiness=1.0).workload.cv == pytest.approx(1.0)


def test_infinite_request_rate_sends_everything_at_once():
    assert build_config(request_rate=math.inf).workload.arrival == "burst"
    assert build_config(max_concurrency=4).workload.arrival == "burst"  # vLLM's default rate is inf


def test_concurrency_without_a_rate_stays_a_closed_loop_whatever_the_burstiness():
    # vllm bench's --max-concurrency 4 --burstiness 1.0 runs at an infinite rate; burstiness 1 once
    # turned this into Poisson arrivals at the default 1 qps, an open loop nobody asked for.
    assert build_config(max_concurrency=4, burstiness=1.0).workload.arrival == "burst"
    with pytest.raises(ConfigError, match="--burstiness: shapes the gaps"):
        build_config(max_concurrency=4, burstiness=2.0)  # an infinite rate has no gaps to shape
    assert build_config(max_concurrency=4, request_rate=2.0, burstiness=2.0).workload.arrival == "gamma"


@pytest.mark.parametrize(("options", "says"), [
    ({"arrival": "poisson", "burstiness": 2.0}, "the arrivals are poisson"),  # once gamma, silently
    ({"burstiness": 2.0, "cv": 3.0}, "--cv 3.0 sets it too"),  # once named the cv as an --arrival
])
def test_burstiness_against_another_arrival_flag_is_refused(options, says):
    with pytest.raises(ConfigError, match=says):
        build_config(**options)


def test_enable_expert_parallel_spreads_experts_over_the_tp_group():
    assert build_config(model="mixtral-8x7b", tp=4, enable_expert_parallel=True).replica.ep == 4
    assert build_config(model="mixtral-8x7b", tp=4).replica.ep == 1
    with pytest.raises(ConfigError, match="one GPU"):  # (it ran, ep=1, as without the flag)
        build_config(model="mixtral-8x7b", enable_expert_parallel=True)


@pytest.mark.parametrize("text", ["ttft", "ttft:abc", "latency:30", "tpot:-1", "", "ttft:300 ttft:200"])
def test_bad_goodput_is_one_line(text):
    with pytest.raises(ConfigError, match="--goodput"):
        parse_goodput(text)


def test_multi_value_goodput_is_one_argument():
    assert joined_values(["run", "--goodput", "ttft:300", "tpot:50", "--qps", "2"]) == \
        ["run", "--goodput", "ttft:300 tpot:50", "--qps", "2"]


def test_goodput_parses_vllms_pairs():
    assert parse_goodput(["ttft:300", "tpot:50"]) == {"ttft": 300.0, "tpot": 50.0}
    assert parse_goodput("ttft:300,e2el:2000") == {"ttft": 300.0, "e2el": 2000.0}


def test_the_aliases_work_on_capacity_and_sweep_too():
    import typer.main

    group = typer.main.get_command(app)
    for command in ("run", "capacity", "sweep"):
        flags = {opt for param in group.commands[command].params for opt in param.opts}
        for flag in ("--tensor-parallel-size", "--max-concurrency", "--request-rate", "--num-prompts",
                     "--random-range-ratio", "--burstiness", "--dataset-name", "--quantization",
                     "--enable-expert-parallel", "--num-warmups"):
            assert flag in flags, (command, flag)


def test_a_sweep_file_takes_vllms_names(tmp_path):
    from simulator.planning.sweep import build_spec

    spec = build_spec({"mode": "run", "base": {"tensor_parallel_size": 2, "model": "llama-3-8b"},
                       "grid": {"max_concurrency": [4, 8]}})
    assert [p.config.replica.tp for p in spec.points] == [2, 2]
    assert [p.config.workload.concurrency for p in spec.points] == [4, 8]


def test_save_result_into_a_folder_is_refused_before_the_run(tmp_path):
    res = runner.invoke(app, ["run", *BENCH_LINE, "--save-result", str(tmp_path), "--no-progress"])
    assert isinstance(res.exception, ConfigError) and res.exception.field == "--save-result"  # main(): exit 2
    assert "Serving Benchmark Result" not in res.output
    # under a file: named as such (it said the folder did not exist)
    (tmp_path / "a-file").write_text("x")
    res = runner.invoke(app, ["run", *BENCH_LINE, "--save-result", str(tmp_path / "a-file" / "r.json"), "--no-progress"])
    assert isinstance(res.exception, ConfigError) and "which is a file" in str(res.exception)


@pytest.mark.parametrize(("key", "value", "needle"), [("ttfts", "x", "ttfts holds 'x'"), ("ttfts", -1.0, "ttfts holds -1.0"),
                                                       ("output_lens", "x", "output_lens holds 'x'"),
                                                       ("itls", "empty", "every request's itls list is empty")])
def test_bad_bench_values_are_one_line_errors(tmp_path, key, value, needle):  # noqa: ANN001
    """Strings or negatives in a bench JSON were a traceback or silently dropped metrics."""
    from simulator.calibrate.engine_fit import read_bench
    from simulator.config.errors import ConfigError

    data = json.loads((Path(__file__).parent / "data" / "vllm_bench_fixture.json").read_text())
    if value == "empty":
        data["itls"] = [[] for _ in data["itls"]]
    else:
        data[key] = [value] * len(data[key])
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=re.escape(needle)):
        read_bench(path)


def test_burstiness_against_a_config_files_closed_loop_and_in_a_sweeps_base():
    """A --config file's closed loop (every user at once) has no gaps for --burstiness to shape: 1 keeps it (it
    once became Poisson at 1 qps), 2 is refused (it became gamma at 1 qps); a rate given beside it shapes that
    rate. A sweep's base waits for its grid: --concurrency 8 --burstiness 2 with --grid qps=1,2 is gamma at each."""
    from simulator.cli.options import given_overrides
    from simulator.config.options import resolve_aliases
    from simulator.config.run_config import RunConfig

    closed = RunConfig().replace(workload__arrival="burst", workload__concurrency=4)
    assert "arrival" not in resolve_aliases({"burstiness": 1.0}, closed, from_file=True)
    with pytest.raises(ConfigError, match="--burstiness: shapes the gaps"):
        resolve_aliases({"burstiness": 2.0}, closed, from_file=True)
    assert resolve_aliases({"burstiness": 2.0, "qps": 2.0}, closed, from_file=True)["arrival"] == "gamma"
    base = given_overrides(concurrency=8, burstiness=2.0)
    assert base["arrival"] == "gamma" and base["concurrency"] == 8


def test_a_sweep_of_a_closed_loop_with_burstiness_needs_a_rate_somewhere(tmp_path):
    """The sweep's base waits for its grid's rate; a grid without one ran every point as gamma arrivals at the
    default 1 qps (``run`` refuses the same flags)."""
    res = CliRunner().invoke(app, ["sweep", "--workload", "fixed", "--num-requests", "10", "--concurrency", "8",
                                   "--burstiness", "2", "--grid", "tp=1,2", "--out", str(tmp_path / "s")])
    assert isinstance(res.exception, ConfigError) and res.exception.field == "--burstiness"
    assert "no point has one" in str(res.exception) and not (tmp_path / "s").exists()


def test_a_replayed_trace_has_no_configured_rate_and_its_file_reads_back(tmp_path):
    # A trace's timestamps are its load: no "Request rate configured" (it printed the unused --qps default, 1.00),
    # null in the JSON, and calibrate-engine reads such a file by its send times.
    from simulator.calibrate.engine_fit import read_bench

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"arrived_at": 0.5 + 0.1 * i, "num_prompt_tokens": 100,
                                         "num_output_tokens": 20 + i}) + "\n" for i in range(12)))
    out = tmp_path / "r.json"
    done = CliRunner().invoke(app, ["run", "--trace", str(trace), "--arrival", "trace", "--metrics", "vllm",
                                    "--save-result", str(out), "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "Request rate configured" not in done.output
    doc = json.loads(out.read_text())
    assert doc["request_rate"] is None
    run = read_bench(out)
    assert run.arrival_at is not None and np.allclose(run.arrival_at, 0.1 * np.arange(12))


def test_per_user_speed_without_a_two_token_output_says_so():
    done = CliRunner().invoke(app, ["run", "--output-tokens", "1", "--prompt-tokens", "100", "--concurrency", "4",
                                    "--num-requests", "12", "--metrics", "vllm", "--no-progress"])
    assert done.exit_code == 0, done.output
    assert "per user (mean 1/TPOT):     n/a" in done.output and "nan" not in done.output


SMALL_BENCH = ["--num-requests", "24", "--qps", "8", "--workload", "fixed", "--prompt-tokens", "128",
               "--output-tokens", "16", "--no-progress"]


def _saved(tmp_path: Path, *args: str) -> dict:
    """The --save-result document of a small run with ``args`` added."""
    out = tmp_path / "result.json"
    done = runner.invoke(app, ["run", *SMALL_BENCH, *args, "--save-result", str(out)])
    assert done.exit_code == 0, done.output
    return json.loads(out.read_text())


@pytest.mark.parametrize("goodput", [(), ("--goodput", "ttft:300 tpot:50")])
def test_every_key_ending_in_ms_is_a_number_as_scripts_for_vllms_files_read_it(tmp_path, goodput):
    """InferenceX's process_result float()s every key of vLLM's JSON that ends in "ms"; the SLOs were written as a
    dict under goodput_slos_ms ({} without --goodput), which crashed it. vLLM writes no SLOs: ours only where
    --goodput gave them, under a name that ends in no "ms"."""
    doc = _saved(tmp_path, *goodput)
    for key, value in doc.items():
        if key.endswith("ms"):
            float(value)  # (raises on a dict, a list or null)
    assert ("goodput_config" in doc) == bool(goodput)
    if goodput:
        assert doc["goodput_config"] == {"ttft": 300.0, "tpot": 50.0}


REFUSING = ("--workload", "uniform", "--prompt-tokens", "100", "--prompt-tokens-max", "1000", "--max-model-len", "512",
            "--max-total-tokens", "100000")  # prompts over 512 tokens are refused (prompt+output > max_model_len)


def test_a_refused_requests_times_are_vllms_zeros_and_its_error_says_why(tmp_path):
    """A refused request's TTFT and latency were null in --save-result's lists, where vLLM writes a failed request's
    0.0 (its RequestFuncOutput's defaults): np.mean(doc["ttfts"]) failed in scripts written for vLLM's files."""
    out = tmp_path / "result.json"
    done = runner.invoke(app, ["run", "--num-requests", "40", "--qps", "8", *REFUSING, "--output-tokens", "10",
                               "--save-result", str(out), "--no-progress"])
    assert done.exit_code == 0, done.output
    doc = json.loads(out.read_text())
    failed = [i for i, e in enumerate(doc["errors"]) if e]
    assert doc["failed"] == len(failed) > 0
    assert all("max_model_len" in doc["errors"][i] for i in failed)  # our reason, where vLLM's error text goes
    for key in ("ttfts", "latencies", "output_lens"):
        assert all(doc[key][i] == 0 for i in failed), key
    assert all(doc["itls"][i] == [] for i in failed)
    assert np.isfinite(np.mean(doc["ttfts"])) and np.isfinite(np.mean(doc["latencies"]))
    finished = [i for i, e in enumerate(doc["errors"]) if not e]
    # the figures are the finished requests' (vLLM's calculate_metrics skips the failed ones)
    assert doc["mean_ttft_ms"] == pytest.approx(np.mean([doc["ttfts"][i] for i in finished]) * 1000)


def _vllms_peak_output_tokens_per_s(doc: dict) -> float:
    """vLLM's calculate_metrics' max_output_tokens_per_s, from a result file's per-request lists."""
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    origin = min(doc["start_times"][i] for i in ok)
    buckets: dict[int, int] = {}
    for i in ok:
        t = doc["start_times"][i] + doc["ttfts"][i]
        for gap in [0.0, *doc["itls"][i]]:
            t += gap
            buckets[int(t - origin)] = buckets.get(int(t - origin), 0) + 1
    return float(max(buckets.values()))


@pytest.mark.parametrize("load", [("--qps", "8"), ("--concurrency", "6", "--num-warmup", "6", "--warmup-mode", "drain"),
                                  ("--concurrency", "4", "--model", "llama-3.1-8b", "--acceptance-rate", "0.7",
                                   "--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}')])
def test_peak_output_token_throughput_is_vllms_from_the_files_own_lists(tmp_path, load):
    """vLLM's max_output_tokens_per_s ("Peak output token throughput") was missing from the JSON and the block:
    the most tokens streamed in one 1-second bucket from the first send, each chunk one token (a speculating
    step's accepted run is one chunk)."""
    out = tmp_path / "result.json"
    done = runner.invoke(app, ["run", "--num-requests", "48", *load, "--workload", "fixed", "--prompt-tokens", "256",
                               "--output-tokens", "64", "--metrics", "vllm", "--save-result", str(out), "--no-progress"])
    assert done.exit_code == 0, done.output
    doc = json.loads(out.read_text())
    assert doc["max_output_tokens_per_s"] == _vllms_peak_output_tokens_per_s(doc)
    assert 0 < doc["max_output_tokens_per_s"] <= doc["total_output_tokens"]
    line = next(x for x in done.output.splitlines() if x.startswith("Peak output token throughput (tok/s):"))
    assert float(line.split()[-1]) == pytest.approx(doc["max_output_tokens_per_s"], abs=0.005)


def test_vllms_block_alone_shows_the_peak_output_token_throughput():
    """The block without --save-result keeps the token times the peak is counted from (no warm-up here)."""
    done = runner.invoke(app, ["run", *SMALL_BENCH, "--metrics", "vllm"])
    assert done.exit_code == 0, done.output
    assert "Peak output token throughput (tok/s):" in done.output


def test_vllms_num_warmups_drains_the_warm_up_first_as_vllm_runs_it(tmp_path):
    """vllm bench serve gathers its --num-warmups before the measured load starts (our drain); given in its spelling
    they ran steady, beside the measured requests (P99 TTFT 431 ms where vLLM's drained warm-up reads 1,129)."""
    vllm = build_config(max_concurrency=16, num_warmups=16, num_prompts=120, dataset_name="random")
    assert vllm == build_config(concurrency=16, num_warmup=16, num_requests=120, workload="random",
                                warmup_mode="drain")
    assert build_config(concurrency=16, num_warmup=16).workload.warmup_mode == "steady"  # our spelling: as before
    assert build_config(max_concurrency=16, num_warmups=16, warmup_mode="steady").workload.warmup_mode == "steady"
    assert build_config(request_rate=4.0, num_warmups=8).workload.warmup_mode == "steady"  # an open loop has no drain
    # a --config file's mode stands (a run's config.json always writes one)
    from simulator.config.run_config import RunConfig

    path = tmp_path / "config.json"
    path.write_text(json.dumps(RunConfig().replace(workload__concurrency=16, workload__arrival="burst").to_dict()))
    assert build_config(path, num_warmups=16).workload.warmup_mode == "steady"
    assert build_config(path, num_warmups=16, warmup_mode="drain").workload.warmup_mode == "drain"


def test_the_help_says_what_vllms_num_warmups_does():
    done = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    text = " ".join(done.output.split())
    assert "Given as vLLM's --num-warmups in a closed loop, the warm-up drains first" in text


def test_each_goodput_on_a_runs_screen_is_named_by_its_rule():
    """One screen said "goodput 2.0%" (the summary's TTFT-and-every-gap share) and "request goodput 1.78 req/s"
    (vLLM's, TTFT and TPOT), two rules under one name; each is named by its rule now."""
    done = runner.invoke(app, ["run", "--num-requests", "40", "--qps", "4", "--ttft-slo", "2", "--tbt-slo", "0.1",
                               "--goodput", "ttft:2000 tpot:100", "--no-progress"])
    assert done.exit_code == 0, done.output
    text = " ".join(done.output.split())
    assert "SLO attainment (TTFT<=2.0s and every gap<=0.1s)" in text
    assert "vLLM request goodput (ttft<=2000 ms and tpot<=100 ms)" in text
    assert text.count("goodput") == text.count("vLLM request goodput") == 1
