"""Every command checks its output paths and input files before it works, and writes whole.

The catalogue below runs each command with an existing file where a folder goes and a folder
where a file goes (and a few missing inputs): each must answer with one line on stderr and
exit code 2 before any work: none of the libraries the work needs (pandas, SimPy, scikit-learn,
torch, matplotlib, Ray) has loaded when it answers. How long a refusal takes is a figure of
``benchmarks/bench_refusal.py``, not a timed test. Then: an interrupted ``run --out``
leaves either nothing or a complete run, and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    a_file = tmp_path / "a_file.json"
    a_file.write_text("not a config")
    a_dir = tmp_path / "a_dir"
    a_dir.mkdir()
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    return {"file": str(a_file), "dir": str(a_dir), "full": str(full), "missing": str(tmp_path / "missing.csv"),
            "new": str(tmp_path / "new")}


# (command line, a word the one line must hold); {file}: an existing file, {dir}: an empty folder,
# {full}: a folder holding a user's file, {missing}: nothing there, {new}: a fresh path.
BAD_PATHS = [
    (["run", "--out", "{file}"], "--out"),
    (["run", "--out", "{full}"], "--out"),
    (["run", "--config", "{dir}"], "--config"),
    (["run", "--config", "{missing}"], "--config"),
    (["capacity", "--out", "{file}"], "--out"),
    (["capacity", "--out", "{full}"], "--out"),
    (["sweep", "{dir}"], "is a folder"),
    (["sweep", "{missing}"], "does not exist"),
    (["sweep", "--out", "{file}", "--grid", "qps=1,2"], "--out"),
    (["disagg", "split", "--out", "{file}"], "--out"),
    (["disagg", "compare", "--out", "{file}"], "--out"),
    (["plot", "sweep", "{file}"], "sweep folder"),
    (["plot", "sweep", "{dir}", "--out", "{file}"], "--out"),
    (["plot", "run", "{file}", "--out", "{new}"], "plot run"),
    (["plot", "run", "{dir}"], "plot run"),
    (["plot", "run", "{missing}"], "plot run"),
    (["tau", "--plot", "{dir}"], "--plot"),
    (["calibrate-engine", "--out", "{dir}", "--table", "{file}"], "--out"),
    (["calibrate-engine", "--out", "{new}.json", "--table", "{dir}"], "--table"),
    (["calibrate-engine", "--out", "{new}.json", "--bench", "{missing}"], "--bench"),
    (["fit", "--profile", "{file}", "--out", "{dir}"], "--out"),
    (["fit", "--profile", "{missing}", "--out", "{new}.json"], "--profile"),
    (["profile", "--model", "tiny-llama-1b", "--out", "{file}"], "--out"),
    (["import-vidur", "{missing}", "--out", "{new}"], "import-vidur"),
    (["import-vidur", "{dir}", "--out", "{file}"], "--out"),
    (["fidelity", "--out", "{file}"], "--out"),
    (["validate", "--out", "{file}"], "--out"),
    (["calibrate", "--data", "{file}"], "--data"),
    (["calibrate", "--data", "{dir}"], "--data"),  # no profiles there: a fit to nothing was printed as a fit
    (["fidelity", "--out", "{new}", "--data", "{dir}"], "--data"),
    (["fidelity", "--profile", "{missing}", "--out", "{new}"], "--profile"),
    (["fidelity", "--profile", "{dir}", "--out", "{new}"], "--profile"),  # a folder with no profile.csv
    (["fidelity", "--profile", "{file}", "--data", "{dir}", "--out", "{new}"], "--data"),
    (["fidelity", "--kernels", "vllm", "--out", "{new}"], "--kernels"),
    (["import-aiconfigurator", "--gpu", "b200", "--out", "{file}"], "--out"),
    (["run", "--format", "csv"], "--format"),  # no --out: the format of nothing
    (["sweep", "--out", "{new}", "--grid", "qps=1", "--grid", "qps=2"], "--grid"),
]


# Runs the CLI as ``python -m simulator`` does, then writes the top-level modules loaded to the
# file named by argv[1] (stderr and the exit code stay the command's own).
DRIVER = """
import json, runpy, sys
record, sys.argv = sys.argv[1], ["simulator", *sys.argv[2:]]
code = 0
try:
    runpy.run_module("simulator", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    code = stop.code
with open(record, "w") as f:
    json.dump(sorted({name.partition(".")[0] for name in sys.modules}), f)
sys.exit(code)
"""
WORK_LIBRARIES = {"pandas", "pyarrow", "simpy", "sklearn", "torch", "matplotlib", "ray"}


@pytest.mark.parametrize(("args", "needle"), BAD_PATHS, ids=[" ".join(a) for a, _ in BAD_PATHS])
def test_bad_path_is_one_line_exit_2_before_any_work(places: dict[str, str], args: list[str], needle: str,
                                                     tmp_path: Path) -> None:
    argv = [a.format(**places) for a in args]
    record = tmp_path / "modules.json"
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(record), *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr + proc.stdout
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]
    loaded = WORK_LIBRARIES & set(json.loads(record.read_text()))
    assert not loaded, f"refused after loading {sorted(loaded)}"
    # Nothing was created by a refused command.
    assert not Path(places["new"]).exists() and not Path(places["new"] + ".json").exists()
    assert sorted(os.listdir(places["dir"])) == []


def test_plot_run_does_not_blame_config(places: dict[str, str]) -> None:
    res = runner.invoke(app, ["plot", "run", places["file"]])
    assert isinstance(res.exception, ConfigError)  # refused, and for its own argument
    assert "--config" not in str(res.exception)


# -- atomic outputs -------------------------------------------------------------------------------------------

RUN = ["run", "--num-requests", "30", "--qps", "4", "--no-progress", "--format", "csv"]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_interrupt_while_writing_leaves_nothing_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.report.output as output

    real = output.write_chunks
    calls = []

    def interrupted(chunks, path_stem, fmt):  # noqa: ANN001, ANN202 - the first table is written, then Ctrl-C
        calls.append(path_stem)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(chunks, path_stem, fmt)

    monkeypatch.setattr(output, "write_chunks", interrupted)
    out = tmp_path / "sub" / "o"
    res = runner.invoke(app, [*RUN, "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert f"interrupted: nothing written to {out}" in res.stderr
    assert not out.exists() and not (tmp_path / "sub").exists()  # nor the parent it made
    assert _leftovers(tmp_path) == []


def test_interrupt_before_writing_leaves_no_out_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.cli.run as run_cli

    def stopped(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cli, "simulate", stopped)
    out = tmp_path / "o"
    res = runner.invoke(app, [*RUN, "--out", str(out)])
    assert res.exit_code == 130
    assert "nothing was written" in res.stderr
    assert _leftovers(tmp_path) == []


def test_complete_run_replaces_an_earlier_run_whole(tmp_path: Path) -> None:
    out = tmp_path / "o"
    assert runner.invoke(app, [*RUN, "--out", str(out)]).exit_code == 0
    first = _leftovers(out)
    assert first == ["config.json", "iterations.csv", "requests.csv", "summary.json"]
    res = runner.invoke(app, [*RUN, "--seed", "3", "--out", str(out)])  # the same command again: replaced
    assert res.exit_code == 0, res.output
    assert _leftovers(out) == first and '"seed": 3' in (out / "config.json").read_text()
    assert _leftovers(tmp_path) == ["o"]  # no temporary folder left beside it


def test_atomic_file_keeps_the_old_file_on_interrupt(tmp_path: Path) -> None:
    from simulator.util.paths import atomic_file

    target = tmp_path / "a.json"
    target.write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_file(target) as tmp:
        tmp.write_text("half")
        raise KeyboardInterrupt
    assert target.read_text() == "old" and _leftovers(tmp_path) == ["a.json"]
    with atomic_file(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and _leftovers(tmp_path) == ["a.json"]


def test_capacity_out_is_written_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    def interrupted(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(pd.DataFrame, "to_csv", interrupted)
    out = tmp_path / "cap"
    res = runner.invoke(app, ["capacity", "--num-requests", "40", "--max-trials", "3", "--rel-tol", "0.5",
                              "--workers", "1", "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert f"interrupted: nothing written to {out}" in res.stderr
    assert _leftovers(tmp_path) == []


def test_outputs_inside_the_shared_data_folder_are_refused(tmp_path: Path) -> None:
    """The public data is read, never written (an audit's capacity --out wrote into it: we run as root)."""
    from simulator.config.shared_data import SHARED_DATA
    from simulator.util.paths import check_out_dir, check_out_file

    for check, path in ((check_out_dir, SHARED_DATA / "x"), (check_out_file, SHARED_DATA / "traces" / "t.csv")):
        with pytest.raises(ConfigError, match="inside the shared data folder"):
            check(path, "--out")
    res = runner.invoke(app, ["capacity", "--out", str(SHARED_DATA / "x")])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith("--out")
    check_out_dir(tmp_path / "elsewhere", "--out")  # anywhere else is as before


def test_validate_out_is_rewritten_whole_or_left_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """validate wrote straight into --out: Ctrl-C after its CSVs left new tables beside the old README and figures,
    and said nothing. The report is written beside it and moved in; files of others in the folder stay."""
    import pandas as pd

    import simulator.calibrate.validation as validation

    out = tmp_path / "validation"
    (out / "silicon").mkdir(parents=True)
    (out / "silicon" / "fit_report.py").write_text("kept")
    old = {"README.md": "# Validation against real engines\nold", "splitwise_summary.csv": "old"}  # (its own README)
    for name, text in old.items():
        (out / name).write_text(text)

    def report(folder, data=None, progress=None, stop=True):  # noqa: ANN001, ANN202 - a table, then Ctrl-C
        (Path(folder) / "splitwise_summary.csv").write_text("new")
        if stop:
            raise KeyboardInterrupt
        (Path(folder) / "README.md").write_text("new")
        return {"summary": pd.DataFrame(columns=["rows", "engine", "kind", "median_abs_error", "p95_abs_error"])}

    monkeypatch.setattr(validation, "write_report", report)
    res = runner.invoke(app, ["validate", "--out", str(out)])
    assert res.exit_code == 130, res.output
    assert f"interrupted: nothing written, {out} left as it was" in res.stderr
    assert {p.name: p.read_text() for p in out.iterdir() if p.is_file()} == old
    assert _leftovers(tmp_path) == ["validation"]  # no temporary folder left beside it
    monkeypatch.setattr(validation, "write_report", lambda folder, data=None, progress=None: report(folder, stop=False))
    res = runner.invoke(app, ["validate", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert {p.name: p.read_text() for p in out.iterdir() if p.is_file()} == {"README.md": "new",
                                                                            "splitwise_summary.csv": "new"}
    assert (out / "silicon" / "fit_report.py").read_text() == "kept" and _leftovers(tmp_path) == ["validation"]


# -- special files and links as output paths -------------------------------------------------------------------
# Outputs are renamed into place, so a FIFO, a device (/dev/null: never named in a test) or a link was replaced by a
# plain file. Every file output is checked first: a path that is not a regular file is refused, a link is followed
# and its target written (the link kept). A FIFO here is made in tmp_path; nothing outside it is touched.

def _special(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "to_pipe.json").symlink_to(fifo)
    (tmp_path / "loop_a.json").symlink_to(tmp_path / "loop_b.json")
    (tmp_path / "loop_b.json").symlink_to(tmp_path / "loop_a.json")
    (tmp_path / "to_dir.json").symlink_to(tmp_path)
    return {"fifo": fifo, "link": tmp_path / "to_pipe.json", "loop": tmp_path / "loop_a.json",
            "dir": tmp_path / "to_dir.json"}


def test_check_out_file_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    from simulator.util.paths import atomic_file, check_out_file

    special = _special(tmp_path)
    for kind, needle in (("fifo", "is a FIFO"), ("link", f"(a link to {special['fifo']}) is a FIFO"),
                         ("loop", "link that loops"), ("dir", "is a folder")):
        with pytest.raises(ConfigError, match="^--out: .*" + needle.replace("(", r"\(").replace(")", r"\)")):
            check_out_file(special[kind], "--out")
        # and the writer itself, should the path change after the check
        with pytest.raises(ConfigError), atomic_file(special[kind]) as tmp:
            tmp.write_text("x")
    assert (tmp_path / "pipe").is_fifo() and (tmp_path / "to_pipe.json").is_symlink()
    assert not any(p.name.startswith(".servesim-tmp-") for p in tmp_path.iterdir())


OUT_FILE_COMMANDS = [
    (["run", "--num-requests", "3", "--save-result", "{out}"], "--save-result"),
    (["fit", "--profile", "{table}", "--out", "{out}"], "--out"),
    (["calibrate-engine", "--table", "{table}", "--out", "{out}"], "--out"),
    (["tau", "--plot", "{stem}"], "--plot"),
]


@pytest.mark.parametrize(("args", "flag"), OUT_FILE_COMMANDS, ids=[a[0] for a, _ in OUT_FILE_COMMANDS])
@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_outputs_never_replace_a_fifo(tmp_path: Path, args: list[str], flag: str, kind: str,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.planning.tau as tau_module

    def worked(*a, **k):  # noqa: ANN002, ANN003, ANN202 - refused before any work (and savefig never opens the FIFO)
        raise AssertionError("tau worked before refusing --plot")

    monkeypatch.setattr(tau_module, "choose_tau", worked)
    special = _special(tmp_path)
    table = tmp_path / "table.csv"
    table.write_text("not,a\ntable,\n")
    out = special[kind]
    if args[0] == "tau":  # a stem: PATH.svg is the FIFO (or the link to it)
        out = tmp_path / ("plot.svg" if kind == "fifo" else "plot_link.svg")
        os.mkfifo(out) if kind == "fifo" else out.symlink_to(special["fifo"])
    argv = [a.format(out=out, table=table, stem=out.with_suffix("")) for a in args]
    res = runner.invoke(app, argv)
    assert isinstance(res.exception, ConfigError), res.output
    assert str(res.exception).startswith(f"{flag}: ") and "is a FIFO" in str(res.exception)
    assert out.is_fifo() and special["fifo"].is_fifo() and (kind == "fifo" or out.is_symlink())


def test_save_result_through_a_link_writes_its_target(tmp_path: Path) -> None:
    """The link stays and points at the fresh result (it was replaced by a plain file)."""
    target = tmp_path / "runs" / "r1.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    res = runner.invoke(app, ["run", "--num-requests", "3", "--save-result", str(link)])
    assert res.exit_code == 0, res.output
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert json.loads(target.read_text())["num_prompts"] == 3
    assert sorted(p.name for p in target.parent.iterdir()) == ["r1.json"]  # no temporary file left


def test_tau_plot_checks_the_files_it_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tau checked its stem, not STEM.png and STEM.svg: a folder d.png failed after the work (IsADirectoryError),
    and --plot x.png wrote x.png.png."""
    import simulator.planning.tau as tau_module

    (tmp_path / "d.png").mkdir()
    calls = []
    real = tau_module.choose_tau
    monkeypatch.setattr(tau_module, "choose_tau", lambda *a, **k: calls.append(1) or real(*a, **k))
    res = runner.invoke(app, ["tau", "--plot", str(tmp_path / "d")])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith("--plot: "), res.output
    assert "d.png is a folder" in str(res.exception) and not calls  # before any work
    res = runner.invoke(app, ["tau", "--plot", str(tmp_path / "x.png")])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("x")) == ["x.png", "x.svg"]


def test_tau_checks_the_formats_plots_writes() -> None:
    from simulator.cli.capacity import PLOT_FORMATS
    from simulator.report.plots import FORMATS

    assert PLOT_FORMATS == FORMATS
