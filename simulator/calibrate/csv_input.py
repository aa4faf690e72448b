"""A user's or a data folder's CSV, read or refused in one line.

Every table a fit reads goes through :func:`read_csv_checked`: a path that is not a file, a file
pandas cannot parse (malformed quoting, a binary file, an empty one) and missing columns each
become one :class:`~simulator.config.errors.ConfigError` naming the option that gave the path.

The file is read record by record first (the ``csv`` module), so that a row's position in the frame
is its place in the file: a blank line between rows (pandas dropped it, and errors named every later
row a line early) and a row of more cells than the header are refused naming their line; blank lines
after the last row and empty cells past the header's (a trailing comma, which made pandas take the
first column for the index and shift every cell left) are dropped. pandas then reads those records as
it reads any CSV, so a column's type is what it always was.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simulator.config.errors import ConfigError


def _blank(cells: list[str]) -> bool:
    return not any(cell.strip() for cell in cells)


def read_csv_checked(path: Path | str, field: str, fix: str | None = None, required: Iterable[str] = (),
                     columns_fix: str | None = None) -> Any:
    """``path`` as a DataFrame holding every ``required`` column, or a one-line error on ``field``
    (``fix`` says what to pass instead; ``columns_fix`` what a file lacking columns should give)."""
    import pandas as pd  # a refusal of a bad path comes before the import

    path = Path(path)
    if not path.is_file():
        raise ConfigError(field, f"{path} does not exist", fix)
    records: list[tuple[int, list[str]]] = []  # (the line each record starts on, its cells)
    try:
        with path.open(newline="", encoding="utf-8-sig") as f:  # (a spreadsheet's byte-order mark is no column)
            # strict: a quote never closed is refused (not read as one cell holding every later row)
            reader = csv.reader(f, strict=True)
            start = 1
            for cells in reader:
                records.append((start, cells))
                start = reader.line_num + 1
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"{path} is not a readable CSV ({type(exc).__name__})", fix) from None
    except csv.Error as exc:
        raise ConfigError(field, f"{path} line {start} is not a readable CSV record ({exc})",
                          "close each quoted cell, and double a quote inside one") from None
    if not records:
        raise ConfigError(field, f"{path} is not a readable CSV (EmptyDataError)", fix)
    line, header = records[0]
    if _blank(header):
        raise ConfigError(field, f"{path} line {line} is blank, where its header should be", "remove it")
    header = [name.strip() for name in header]
    twice = sorted({name for name in header if name and header.count(name) > 1})  # (blank ones: pandas' "Unnamed")
    if twice:  # (pandas renamed a second tp "tp.1")
        raise ConfigError(field, f"{path} names column {twice[0]!r} twice", "give each column once")
    rows = records[1:]
    while rows and _blank(rows[-1][1]):  # blank lines (or cells) after the last row
        rows.pop()
    for line, cells in rows:
        if _blank(cells):
            raise ConfigError(field, f"{path} line {line} is blank", "remove it")
        if any(c.strip() for c in cells[len(header):]):  # (empty ones: a trailing comma)
            raise ConfigError(field, f"{path} line {line} has {len(cells)} cells under a header of {len(header)}",
                              "give each row one cell a column (quote a cell holding a comma)")
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(records[0][1])
    writer.writerows(cells[:len(header)] for _, cells in rows)
    try:
        df = pd.read_csv(io.StringIO(text.getvalue()), index_col=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ConfigError(field, f"{path} is not a readable CSV ({type(exc).__name__})", fix) from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ConfigError(field, f"{path} lacks column(s) {', '.join(missing)}", columns_fix or fix)
    return df
