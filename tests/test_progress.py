"""Per-step progress of long commands: ``calibrate`` and ``fidelity`` report each step with its count."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.util.progress import StepProgress

runner = CliRunner()


def test_piped_progress_is_one_line_per_step(capsys: pytest.CaptureFixture[str]):
    with StepProgress("work") as steps:
        steps.update("first", 0, 2)
        steps.update("second", 1, 2)
        steps.update("no count")
    err = capsys.readouterr().err.splitlines()
    assert [line.split(": ", 1)[1] for line in err] == ["first", "second", "no count"]
    assert err[0].startswith("work [0/2] ") and err[1].startswith("work [1/2] ") and err[2].startswith("work ")
    with StepProgress("quiet", quiet=True) as steps:
        steps.update("nothing", 0, 1)
    assert capsys.readouterr().err == ""


def test_calibrate_reports_each_gpu_of_the_total(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from simulator.calibrate import fit_calibration
    from simulator.costmodel.calibration import DEFAULT

    monkeypatch.setattr(fit_calibration, "calibrate_gpu", lambda src, root: (DEFAULT, ["stub"]))
    monkeypatch.setattr(fit_calibration, "missing_tables", lambda src, root: [])  # (every table there)
    calls = []
    fit_calibration.calibrate_all(tmp_path, progress=lambda *a: calls.append(a))
    n = len(fit_calibration.SOURCES)
    assert calls == [(src.gpu, i, n) for i, src in enumerate(fit_calibration.SOURCES)]
    (tmp_path / "stub.csv").write_text("a\n1\n")  # the command first checks the folder holds tables
    result = runner.invoke(app, ["calibrate", "--data", str(tmp_path)])
    assert result.exit_code == 0, result.output
    first = fit_calibration.SOURCES[0].gpu
    assert f"calibrate [0/{n}]" in result.output and f"fitting {first}" in result.output


def test_fidelity_reports_each_table_then_the_plots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    from simulator.calibrate import fit_fidelity

    frame = pd.DataFrame({"gpu": ["a100-80gb"], "source": ["s"], "op": ["mlp"], "measured_s": [1.0],
                          "learned_s": [1.1], "roofline_s": [0.9]})
    monkeypatch.setattr(fit_fidelity, "_point_steps", lambda root, curves=None: [("a.csv", lambda: frame),
                                                                                 ("b.csv", lambda: frame)])
    calls = []
    points = fit_fidelity.collect_points(tmp_path, progress=lambda *a: calls.append(a), extra_steps=1)
    assert len(points) == 2 and calls == [("a.csv", 0, 3), ("b.csv", 1, 3)]
