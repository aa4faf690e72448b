"""What a read-only audit of the docs against the commands found: each a one-line answer that names the real
problem and the flag, where the command said something else."""

from __future__ import annotations

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
