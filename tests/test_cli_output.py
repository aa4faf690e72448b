"""What the CLI prints: whole names and numbers at any width, rejection reasons, overload, help.

Catalog names are the values users copy, so they never truncate: piped output keeps the table
at its natural width, and a narrow terminal gets one short record per row instead.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from simulator.catalog import GPUS, MODELS
from simulator.cli.tables import print_table, wrap_pairs

ROOT = Path(__file__).resolve().parents[1]
SIMULATE = [sys.executable, "-m", "simulator"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def piped(*args: str, columns: int = 80) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    res = subprocess.run([*SIMULATE, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


def on_terminal(*args: str, columns: int = 80) -> str:
    """Run with stdout on a pseudo-terminal ``columns`` wide, as a user at a shell would."""
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "xterm"}
    proc = subprocess.Popen([*SIMULATE, *args], stdout=slave, stderr=slave, env=env, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


CATALOGS = {"models": [v for m in MODELS.values() for v in (m.name, m.hf_id)],
            "gpus": [v for g in GPUS.values() for v in (g.name, *g.aliases)]}


@pytest.mark.parametrize("command", ["models", "gpus"])
def test_catalog_names_are_whole_when_piped(command: str) -> None:
    out = piped(command)
    assert "…" not in out and "..." not in out
    words = set(re.split(r"[\s│┃,]+", out))
    missing = [name for name in CATALOGS[command] if name not in words]
    assert not missing, missing


@pytest.mark.parametrize("command", ["models", "gpus"])
def test_catalog_wraps_rows_on_a_narrow_terminal(command: str) -> None:
    out = on_terminal(command, columns=80)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    words = set(re.split(r"[\s│┃,·]+", out))
    missing = [name for name in CATALOGS[command] if name not in words]
    assert not missing, missing


def test_numbers_are_never_squeezed_when_piped() -> None:
    table = Table("seed", "QPS", "P-TBT (s)", "note")
    for i in range(3):
        table.add_row(str(i), f"{1.23456 + i:.6g}", "0.0098765", "P99 TBT 0.1049 s > SLO 0.1 s, and a long note " * 2)
    buffer = io.StringIO()
    print_table(Console(file=buffer, width=60, force_terminal=False), table)
    out = buffer.getvalue()
    assert "0.0098765" in out and "1.23456" in out and "…" not in out
    assert out.count("and a long note") == 6  # notes on one line each, not wrapped
    assert len([ln for ln in out.splitlines() if "0.0098765" in ln]) == 3


def test_record_lines_wrap_between_pairs_only() -> None:
    pairs = ["layers 32", "hidden 4096", "kv heads 8", "a-very-long-value " * 6]
    lines = wrap_pairs(pairs, 30)
    assert lines[0] == "    layers 32 · hidden 4096"
    joined = " · ".join(line.strip() for line in lines)
    assert joined == " · ".join(pairs).strip()
