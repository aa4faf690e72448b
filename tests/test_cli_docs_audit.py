"""What a read-only audit of the docs against the commands found: each a one-line answer that names the real
problem and the flag, where the command said something else."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError

runner = CliRunner()


def test_disagg_tps_that_cannot_shard_the_model_is_named_as_such():
    """--tps 3 of a 32-head model blamed memory ('no layout ... holds llama-2-7b in memory', raise --gpus)."""
    for args in (["disagg", "compare", "--tps", "3"], ["disagg", "split", "--gpus", "3", "--tps", "1,3"]):
        res = runner.invoke(app, args)
        assert isinstance(res.exception, ConfigError), res.output
        line = str(res.exception)
        assert "--tps: tp=3 does not divide llama-2-7b's 32 attention heads" in line and "memory" not in line


def test_disagg_default_tps_leave_out_degrees_the_model_does_not_shard():
    """TP 8 of a 28-head model (Qwen2.5-7B) is one of the default degrees: left out, not refused."""
    from simulator.cli.disagg import DEFAULT_TPS, _tps
    from simulator.config.run_config import RunConfig

    config = RunConfig().replace(replica__model="qwen2.5-7b")
    assert config.replica.model_spec.num_heads == 28
    assert _tps(config, DEFAULT_TPS) == (1, 2, 4)


def test_options_a_command_always_refuses_are_out_of_its_help():
    """tau's --help listed --qps, --num-requests, --arrival ... and each was refused when given."""
    def help_of(*args: str) -> str:
        res = runner.invoke(app, [*args, "--help"], terminal_width=200)
        assert res.exit_code == 0, res.output
        return res.output

    def listed(text: str, flag: str) -> bool:  # an option's own row, not a mention in another's help
        return re.search(rf"^\W? {re.escape(flag)}[\s,]", text, re.MULTILINE) is not None

    tau, split, run = help_of("tau"), help_of("disagg", "split"), help_of("run")
    assert all(listed(run, f) for f in ("--qps", "--prefill-pool", "--num-requests", "--tp"))
    assert not any(listed(tau, f) for f in ("--qps", "--num-requests", "--arrival"))
    assert not listed(split, "--prefill-pool") and not listed(split, "--tp") and listed(split, "--scheduler")
    res = runner.invoke(app, ["tau", "--qps", "3"])  # still parsed, and refused in one line
    assert isinstance(res.exception, ConfigError) and "tau does not read it" in str(res.exception)


def test_an_error_names_the_flag_typed_not_the_config_field():
    """'replica.gpu_memory_utilization: must be in (0, 1]' named no flag and no fix; from a --config file the
    dotted field stays (the file's own name for it)."""
    from simulator.cli.app import as_flag

    err = ConfigError("replica.gpu_memory_utilization", "must be in (0, 1], got 1.5")
    assert str(as_flag(err, ["run", "--gpu-memory-utilization", "1.5"])).startswith("--gpu-memory-utilization: ")
    assert str(as_flag(err, ["run", "--config", "c.json"])).startswith("replica.gpu_memory_utilization: ")
    slo = ConfigError("slo.tbt_s", "must be a positive number of seconds, got -1.0")
    assert str(as_flag(slo, ["capacity", "--tbt-slo=-1"])).startswith("--tbt-slo: ")
    res = runner.invoke(app, ["capacity", "--tbt-slo", "-1"])
    assert isinstance(res.exception, ConfigError) and "e.g. 0.2 seconds" in str(res.exception)
    res = runner.invoke(app, ["run", "--moe-imbalance", "1.3"])  # a dense model: the fix is to drop it
    assert isinstance(res.exception, ConfigError) and "drop --moe-imbalance" in str(res.exception)


def test_plan_refuses_an_unknown_gpu_before_it_starts(tmp_path):
    res = runner.invoke(app, ["plan", "--gpus", "h100-sxm,zz9", "--out", str(tmp_path / "p")])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith("--gpus: unknown GPU 'zz9'")
    assert "plan:" not in res.output  # no header printed before the error


def test_disagg_workers_take_auto_as_the_other_searches_do(monkeypatch):
    from simulator.cli.disagg import _workers
    from simulator.config.run_config import RunConfig

    monkeypatch.setattr("simulator.config.resources.available_cpus", lambda: 2)
    assert _workers("auto", RunConfig(), num_layouts=5) in (1, 2) and _workers("3", RunConfig(), 5) == 3
    with pytest.raises(ConfigError, match="--workers"):
        _workers("0", RunConfig(), 5)


def test_orca_header_claims_no_token_budget_and_the_written_files_are_listed(tmp_path):
    """Orca's header showed a '4,096-token budget' that --max-num-batched-tokens is refused for; the 'wrote'
    line left out the stages table a pipelined run writes."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["run", "--scheduler", "orca", "--num-requests", "8", "--pp", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "orca (<= 128 seqs, context 4,096)" in text and "token budget" not in text
    assert "(requests, iterations, stages, summary.json, config.json)" in text
    assert {p.stem for p in out.iterdir()} == {"requests", "iterations", "stages", "summary", "config"}
