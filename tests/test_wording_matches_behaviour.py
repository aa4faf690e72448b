"""What a command says of itself agrees with what it does: the run header names `--workload random` as random (it
said fixed), import-aiconfigurator's help its one file per backend (it said one table per backend and version), the
README's GPU-file fields that mesh_links needs nvlink_switch, and its capacity comment the reason --concurrency is
refused for."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _one_line(text: str) -> str:
    return " ".join(text.replace("│", " ").split())


@pytest.mark.parametrize(("args", "header"), [
    (["--workload", "random"], "workload: random 1024 prompt / 128 output tokens,"),
    (["--workload", "random", "--isl-stddev", "5"], "workload: random 1024 prompt / 128 output tokens, standard "
                                                     "deviation 5 / 0"),
    (["--workload", "fixed"], "workload: fixed 512 prompt / 128 output tokens,"),
])
def test_the_run_header_names_the_workload_given(args: list[str], header: str) -> None:
    res = runner.invoke(app, ["run", "--num-requests", "8", "--no-progress", *args])
    assert res.exit_code == 0, res.output
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("workload:")][0].startswith(header)


def test_import_aiconfigurator_help_says_one_file_per_backend_with_its_versions() -> None:
    text = _one_line(runner.invoke(app, ["import-aiconfigurator", "--help"], env={"COLUMNS": "200"}).output)
    assert "one tidy file per backend with all its versions in one table" in text
    assert "per backend and version" not in text


def test_readme_says_mesh_links_needs_nvlink_switch_as_the_gpu_file_reader_does(tmp_path: Path) -> None:
    gpu = tmp_path / "mesh.toml"
    gpu.write_text("bf16_tflops = 100\nhbm_gb_per_s = 2000\nmemory_gb = 80\nnvlink_gb_per_s = 300\nmesh_links = 7\n")
    res = runner.invoke(app, ["run", "--gpu", str(gpu), "--num-requests", "4", "--no-progress"])
    assert res.exit_code != 0 and "add nvlink_switch = true" in str(res.exception)
    readme = _one_line((ROOT / "README.md").read_text())
    assert "`mesh_links` (a fully connected mesh" in readme and "it needs `nvlink_switch = true`" in readme


def test_readme_gives_the_reason_capacity_refuses_concurrency_for() -> None:
    res = runner.invoke(app, ["capacity", "--concurrency", "8", "--num-requests", "64"])
    reason = str(res.exception)
    assert "varies the request rate, and a closed loop of 8 users has none" in reason
    readme = (ROOT / "README.md").read_text()
    assert ("# A rate search refuses --concurrency: it varies the request rate, and a closed loop of users has none"
            in readme)
