"""The ``simulate`` CLI: default run, reproducible outputs, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app

runner = CliRunner()


def simulate_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, timeout=120)


def test_default_run_prints_ttft_and_tbt_quantiles():
    result = runner.invoke(app, ["run", "--num-requests", "40", "--no-progress"])
    assert result.exit_code == 0, result.output
    for word in ("TTFT", "TBT", "p50", "p99", "finished"):
        assert word in result.output


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_same_seed_same_files_and_config_reproduces(tmp_path: Path, fmt: str):
    args = ["run", "--num-requests", "50", "--qps", "3", "--seed", "11", "--format", fmt, "--no-progress"]
    for name in ("a", "b"):
        assert runner.invoke(app, [*args, "--out", str(tmp_path / name)]).exit_code == 0
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files == sorted(["config.json", "summary.json", f"requests.{fmt}", f"iterations.{fmt}"])
    for name in files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    # config.json fed back reproduces the run
    res = runner.invoke(app, ["run", "--config", str(tmp_path / "a" / "config.json"), "--format", fmt,
                              "--out", str(tmp_path / "c"), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "c" / f"requests.{fmt}").read_bytes() == (tmp_path / "a" / f"requests.{fmt}").read_bytes()
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    reader = pd.read_csv if fmt == "csv" else pd.read_parquet
    assert summary["num_finished"] == (reader(tmp_path / "a" / f"requests.{fmt}")["status"] == "finished").sum()


def test_a_config_with_a_relative_trace_reproduces_the_run_from_another_folder(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch):
    """config.json names the files a run read by absolute paths: `--config` from another folder reads the
    same trace (a relative path was read relative to the new folder: no such file)."""
    made, other = tmp_path / "made", tmp_path / "other"
    made.mkdir()
    other.mkdir()
    (made / "t.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                                + "".join(f"{i * 0.5},{100 + 10 * i},{5 + i}\n" for i in range(6)))
    monkeypatch.chdir(made)
    res = runner.invoke(app, ["run", "--trace", "t.csv", "--arrival", "trace", "--out", "a", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert json.loads((made / "a" / "config.json").read_text())["workload"]["trace"] == str(made / "t.csv")
    monkeypatch.chdir(other)
    res = runner.invoke(app, ["run", "--config", str(made / "a" / "config.json"), "--out", "b", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert (other / "b" / "requests.parquet").read_bytes() == (made / "a" / "requests.parquet").read_bytes()


def test_json_summary(tmp_path: Path):
    res = runner.invoke(app, ["run", "--num-requests", "20", "--json", "--scheduler", "vllm"])
    assert res.exit_code == 0
    data = json.loads(res.output)
    assert data["num_requests"] == 20 and data["tbt_s_p99"] > 0


@pytest.mark.parametrize(("args", "needle"), [
    (["--model", "gpt-5"], "unknown model"),
    (["--gpu", "tpu-v5"], "unknown GPU"),
    (["--scheduler", "fifo"], "unknown scheduler"),
    (["--tp", "3"], "does not divide"),
    (["--model", "llama-2-70b", "--gpu", "a100-40gb"], "does not fit"),
    (["--qps", "-1"], "qps"),
    (["--num-requests", "0"], "--num-requests"),
    (["--trace", "/nonexistent/trace.csv"], "trace"),
    (["--out", "/proc/x"], "--out"),
    (["--out", str(Path(__file__).resolve().parents[1] / "README.md" / "out")], "--out"),  # a path under a file
    (["--format", "xlsx"], "--format"),
    (["--router", "fastest"], "--router"),
    (["--seed", "-1"], "seed"),
    (["--engine", "vllm-9"], "engine"),
    # issue 30: flags that would do nothing, absurd rates, the real flag's name, a folder for a file
    (["--chunk-size", "256", "--scheduler", "vllm"], "--chunk-size"),
    (["--workload", "fixed", "--trace", "/nonexistent/trace.csv"], "--workload"),
    (["--qps", "1e300"], "qps"),
    (["--replicas", "0"], "--replicas"),
    (["--config", str(Path(__file__).resolve().parent)], "--config"),
    (["--model", "Llama-9-1T"], "config.json"),
])
def test_bad_input_is_one_line_and_nonzero(args, needle):
    proc = simulate_cli("run", "--no-progress", *args)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert needle in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize("args", [["--out", "/proc/x"], ["--format", "xlsx"], ["--out", "{file}/sub"]])
def test_output_options_are_refused_before_simulating(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args):
    import simulator.cli.run as run_cli

    a_file = tmp_path / "a_file"
    a_file.write_text("")

    def no_simulation(*a, **k):
        raise AssertionError("simulated before checking the output options")

    monkeypatch.setattr(run_cli, "simulate", no_simulation)
    res = runner.invoke(app, ["run", "--no-progress", *(x.format(file=a_file) for x in args)])
    from simulator.config.errors import ConfigError

    assert isinstance(res.exception, ConfigError), res.output  # main() turns it into one line and exit 2
    assert str(res.exception).startswith(args[0])


def test_write_failure_after_the_run_keeps_the_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import simulator.cli.run as run_cli

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_cli, "write_run", disk_full)
    res = runner.invoke(app, ["run", "--num-requests", "20", "--no-progress", "--out", str(tmp_path / "o")])
    assert res.exit_code == 1
    assert "TTFT" in res.stdout and "finished" in res.stdout  # the results are on screen
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0] and lines[0].startswith("error: --out")


def test_models_and_gpus_list_catalogs():
    assert "mistral-7b" in runner.invoke(app, ["models"]).output
    assert "h100-sxm" in runner.invoke(app, ["gpus"]).output


def test_hf_id_alias_gives_same_config(tmp_path: Path):
    for name, model in (("a", "mistral-7b"), ("b", "mistralai/Mistral-7B-Instruct-v0.2")):
        assert runner.invoke(app, ["run", "--model", model, "--num-requests", "5", "--format", "csv",
                                   "--out", str(tmp_path / name), "--no-progress"]).exit_code == 0
    assert (tmp_path / "a" / "config.json").read_text() == (tmp_path / "b" / "config.json").read_text()


@pytest.mark.parametrize(("args", "needle"), [
    (["--prefill", "100000000"], "context of 4096"),  # took minutes and gigabytes before it was refused
    (["--decode", "10", "--context", "4000000"], "context of 4096"),
    (["--decode", "100000", "--context", "4000"], "KV cache"),
])
def test_predict_refuses_a_batch_the_replica_could_not_hold(args, needle):
    proc = simulate_cli("predict", *args)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0], proc.stderr


@pytest.mark.parametrize(("options", "refused"), [
    (dict(workload="fixed", arrival="fixed", qps=1.0), True),  # fixed lengths at fixed times: nothing drawn
    (dict(workload="fixed", concurrency=4), True),  # a closed loop of fixed lengths
    (dict(workload="fixed", arrival="poisson", qps=1.0), False),  # Poisson gaps
    (dict(workload="fixed", concurrency=4, range_ratio=0.5), False),  # banded lengths
    (dict(workload="fixed", concurrency=4, isl_stddev=3.0), False),  # lengths spread as AIPerf's
    (dict(workload="uniform", prompt_tokens_max=200, arrival="fixed", qps=1.0), False),  # drawn lengths
    (dict(workload="fixed", arrival="fixed", qps=1.0, replicas=2, router="random"), False),
    (dict(workload="fixed", concurrency=4, speculative_config='{"method": "ngram", "num_speculative_tokens": 3}',
          acceptance_rate=0.6), False),
])
def test_a_seed_that_nothing_reads_is_refused(options, refused) -> None:  # noqa: ANN001
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config

    options = dict(prompt_tokens=100, output_tokens=10, **options)
    build_config(**options)  # without --seed: fine either way
    if refused:
        with pytest.raises(ConfigError, match="nothing in this run is drawn at random") as err:
            build_config(seed=3, **options)
        assert err.value.field == "--seed"
    else:
        assert build_config(seed=3, **options).seed == 3


def test_a_seed_that_only_picks_trace_rows_is_read(tmp_path: Path) -> None:
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time,num_prefill_tokens,num_decode_tokens\n0.0,10,5\n0.5,20,5\n1.0,30,5\n")
    with pytest.raises(ConfigError, match="replays its first rows"):
        build_config(trace=str(trace), arrival="trace", num_requests=3, seed=1)
    assert build_config(trace=str(trace), arrival="fixed", qps=1.0, num_requests=2, seed=1).seed == 1  # rows sampled


@pytest.mark.parametrize(("args", "flag"), [
    (["run", "--tp", "2", "--tp", "4"], "--tp"),
    (["run", "--tp=2", "--tp", "4"], "--tp"),
    (["run", "--prefix-caching", "--no-prefix-caching"], "--no-prefix-caching"),
    (["capacity", "--max-qps", "3", "--max-qps=4"], "--max-qps"),
    (["run", "--goodput", "ttft:300", "tpot:50", "--goodput", "ttft:1"], "--goodput"),
])
def test_a_single_value_option_given_twice_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], args: list[str],
                                                      flag: str) -> None:
    # click kept the last value silently: --tp 2 --tp 4 ran at TP 4.
    from simulator.cli.app import main

    monkeypatch.setattr(sys, "argv", ["simulate", *args, "--no-progress"])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2 and "\n" not in err and err.startswith(f"error: {flag}: given twice")


def test_repeatable_options_and_values_like_flags_are_not_repeats(monkeypatch: pytest.MonkeyPatch) -> None:
    from simulator.cli.app import main

    # --grid repeats by design; --model's value spells a flag, and is a value.
    for args in (["sweep", "--grid", "qps=1", "--grid", "tp=1,2", "--help"],
                 ["run", "--model", "--tp", "--tp", "2", "--help"]):
        monkeypatch.setattr(sys, "argv", ["simulate", *args])
        with pytest.raises(SystemExit) as done:
            main()
        assert done.value.code == 0, args
