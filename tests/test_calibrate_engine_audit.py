"""``simulate calibrate-engine`` defects an audit found: the artifact written over its own measurement, --rows
replayed at one token budget whatever the GPU and backend, an unidentified prefill floor written at its start,
a wrong 'before' for presets the replay cannot express, unit mistakes fitted in silence, a null scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli.engine import calibrate_engine_command
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig


@pytest.mark.parametrize("flag", ["table", "bench", "rows"])
def test_out_may_not_be_an_input(tmp_path: Path, flag: str) -> None:
    """--out the same file as --table, --bench or --rows (by its name, or through a link) overwrote the
    measurement with the artifact, exit 0."""
    measured = tmp_path / "measured.txt"
    measured.write_text("the measurement\n")
    link = tmp_path / "link.json"
    link.symlink_to(measured)
    for out in (measured, link, tmp_path / "." / "measured.txt"):
        with pytest.raises(ConfigError, match=f"is the --{flag} file: writing the artifact would overwrite"):
            calibrate_engine_command(RunConfig(), out, **{flag: measured})
    assert measured.read_text() == "the measurement\n"
