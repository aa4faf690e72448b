"""The README's CPU path, run exactly as written there: profile -> fit -> simulate.

The three ``simulate`` lines are read from the README's fenced block (so the test and the
documentation cannot drift apart) and run in order in an empty folder, through the installed
``simulate`` entry point where there is one. Marked slow: the quick CPU profile takes tens of
seconds (it measures real torch kernels), but CI runs it.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]


def readme_cpu_commands() -> list[list[str]]:
    """The ``simulate`` lines of the README block that holds the CPU quick profile."""
    blocks = re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
    block = next(b for b in blocks if "--device cpu --quick" in b and "--gpu cpu" in b)
    return [shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("simulate ")]


def entry_point() -> list[str]:
    exe = Path(sys.executable).with_name("simulate")
    if exe.exists():
        return [str(exe)]
    found = shutil.which("simulate")
    return [found] if found else [sys.executable, "-m", "simulator"]


def test_readme_commands_are_profile_fit_run() -> None:
    commands = readme_cpu_commands()
    assert [c[1] for c in commands] == ["profile", "fit", "run"]
    profile, fit, run = commands
    assert profile[:3] == ["simulate", "profile", "--model"] and "--quick" in profile and "cpu" in profile
    # The fit reads what profile wrote, and the run uses what fit wrote.
    assert fit[fit.index("--profile") + 1] == profile[profile.index("--out") + 1] + "/profile.csv"
    assert run[run.index("--cost-model") + 1] == fit[fit.index("--out") + 1]
    assert run[run.index("--gpu") + 1] == "cpu"


@pytest.mark.slow
def test_readme_cpu_path_runs_as_written(tmp_path: Path) -> None:
    from simulator.config.run_config import RunConfig
    from simulator.simulation import simulate

    profile, fit, run = readme_cpu_commands()
    for command in (profile, fit, run):
        res = subprocess.run([*entry_point(), *command[1:]], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600)
        assert res.returncode == 0, f"{shlex.join(command)}\n{res.stdout}\n{res.stderr}"
        assert "Traceback" not in res.stderr
    artifact_path = fit[fit.index("--out") + 1]
    artifact = json.loads((tmp_path / artifact_path).read_text())
    assert artifact["gpu"] == "cpu" and {"qkv_proj", "lm_head", "attn_decode"} <= set(artifact["learned_ops"])
    assert f"cost model: {artifact_path}" in res.stdout  # the run says which cost model it used
    out = tmp_path / run[run.index("--out") + 1]
    config = json.loads((out / "config.json").read_text())
    assert config["cost_model"] == str((tmp_path / artifact_path).resolve())  # absolute: --config from anywhere
    # The fitted model set the pace: the same config replayed here gives the written iterations
    # bit for bit, and the roofline would have given others.
    written = pd.read_parquet(out / "iterations.parquet")
    replay = RunConfig.from_dict({**config, "cost_model": str(tmp_path / artifact_path)})
    again = simulate(replay).iteration_frame()
    assert written["duration_s"].tolist() == again["duration_s"].tolist()
    roofline = simulate(replay.replace(cost_model="roofline")).iteration_frame()
    # (not a tolerance on their sums or medians: the profile is timed afresh on this CPU, and a run's summed
    # durations landed within 0.1% of the roofline's by chance)
    assert roofline["duration_s"].tolist() != written["duration_s"].tolist()
