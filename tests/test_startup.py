"""Start-up: commands import only what they use; the pandas-free trace reader agrees with pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.workload import generate as workload


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


HEAVY = {"pandas", "numpy", "simpy", "pyarrow", "matplotlib", "sklearn", "ray", "torch"}


def _run_cli(args: list[str]) -> tuple[subprocess.CompletedProcess, set[str]]:
    """``simulate ARGS`` in a fresh interpreter: the process and the modules it had loaded at exit."""
    code = ("import sys\nfrom simulator.cli import main\n"
            f"sys.argv = ['simulate', *{args!r}]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('MODULES', ' '.join(sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    marker = proc.stderr.rindex("MODULES ")
    return proc, set(proc.stderr[marker + len("MODULES "):].split())


def test_the_cli_imports_no_heavy_library() -> None:
    loaded = _modules_after("import simulator.cli")
    assert not HEAVY & loaded
    assert not {m for m in loaded if m == "rich" or m.startswith("rich.")}  # rich loads when something prints


@pytest.mark.parametrize("args", [["--help"], ["run", "--help"], ["capacity", "--help"], ["disagg", "split", "--help"],
                                  ["models"], ["run", "--qps", "abc"]])
def test_help_listings_and_usage_errors_load_no_heavy_library(args: list[str]) -> None:
    proc, loaded = _run_cli(args)
    assert proc.stdout.strip() or "Invalid value" in proc.stderr  # the command did print its help, table or error
    assert not HEAVY & loaded


def _described(command) -> list[tuple]:  # noqa: ANN001
    """What a click command accepts and says, option by option."""
    return [(p.name, tuple(p.opts), p.default, getattr(p, "help", None), p.required, type(p.type).__name__, p.type.name)
            for p in command.params]


def test_a_named_command_is_built_alone_and_exactly_as_in_the_whole_app() -> None:
    import typer.main

    from simulator.cli import app
    from simulator.cli.app import command_line

    whole = typer.main.get_command(app)
    for name, command in whole.commands.items():
        alone = command_line([name, "--help"])
        assert list(alone.commands) == [name]
        built = alone.commands[name]
        assert _described(built) == _described(command), name
        assert built.help == command.help
        for sub in getattr(command, "commands", {}):  # disagg split / compare
            assert _described(built.commands[sub]) == _described(command.commands[sub])
    for argv in ([], ["--help"], ["no-such-command"], ["--version"]):
        assert list(command_line(argv).commands) == list(whole.commands)


def test_a_run_without_out_never_loads_pandas() -> None:
    code = ("from simulator.cli.run import run_simulation\n"
            "from simulator.config.run_config import RunConfig, WorkloadConfig\n"
            "run_simulation(RunConfig(workload=WorkloadConfig('sharegpt', num_requests=20)))")
    loaded = _modules_after(code)
    assert "numpy" in loaded
    assert not {"pandas", "pyarrow", "matplotlib", "sklearn", "scipy"} & loaded  # the roofline run needs none


def _both_readers(path: Path):  # noqa: ANN202
    plain = workload._read_csv_plain(str(path))
    saved = workload._read_csv_plain
    try:
        workload._read_csv_plain = lambda p: None  # force the pandas reader
        reference = workload._read_csv(str(path))
    finally:
        workload._read_csv_plain = saved
    return plain, reference


def test_plain_trace_reader_agrees_with_pandas(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    prompt, output = rng.integers(1, 8000, 500), rng.integers(1, 2000, 500)
    path = tmp_path / "t.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens,pd_ratio\n"
                    + "".join(f"{p},{o},{p / o}\n" for p, o in zip(prompt, output, strict=True)) + "\n\n")
    plain, reference = _both_readers(path)
    assert plain is not None
    assert np.array_equal(plain.num_prompt_tokens, reference.num_prompt_tokens)
    assert np.array_equal(plain.num_output_tokens, reference.num_output_tokens)
    assert (plain.fmt, plain.columns, plain.arrival_s) == (reference.fmt, reference.columns, None)


@pytest.mark.parametrize("body", ["12.0,5\n", "12,\n", "12,5\n\n7,3\n", "12,5,9\n", "-3,4\n", "0,4\n"])
def test_anything_unusual_goes_to_the_pandas_reader(tmp_path: Path, body: str) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n" + body)
    assert workload._read_csv_plain(str(path)) is None


def _catalog_table():  # noqa: ANN202
    from rich.table import Table

    from simulator.config.catalog import MODELS

    table = Table("name", "hf id", "layers", "params (B)", title="models", title_justify="left")
    for m in MODELS.values():
        table.add_row(m.name, m.hf_id, str(m.num_layers), f"[bold]{m.num_params / 1e9:.1f}[/bold]")
    table.add_row("empty cells", None, "", "-")
    return table


@pytest.mark.parametrize("terminal", [False, True])
def test_print_table_prints_what_rich_prints_at_the_natural_width(terminal: bool) -> None:
    """print_table measures each column once and fixes the widths; rich measuring it all again
    (the table's Measurement, then printing it at that width) must give the same characters."""
    import io

    from rich.console import Console
    from rich.measure import Measurement

    from simulator.cli.tables import print_table

    def console() -> Console:
        return Console(file=io.StringIO(), width=400, force_terminal=terminal,
                       color_system="truecolor" if terminal else None)

    ours = console()
    print_table(ours, _catalog_table())
    reference, table = console(), _catalog_table()
    if not terminal:  # piped, the title is a line of its own (folded to the table's width it could break)
        reference.print(table.title, soft_wrap=True, highlight=False)
        table.title = None
    for column in table.columns:
        column.no_wrap, column.overflow = True, "ignore"
    natural = Measurement.get(reference, reference.options.update_width(1_000_000), table).maximum
    assert natural < 400
    reference.print(table, crop=False)
    assert ours.file.getvalue() == reference.file.getvalue()
    assert "\x1b[" in ours.file.getvalue() if terminal else "\x1b[" not in ours.file.getvalue()
