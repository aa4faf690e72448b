"""A user's or a data folder's CSV, read or refused in one line.

Every table a fit reads goes through :func:`read_csv_checked`: a path that is not a file, a file
pandas cannot parse (malformed quoting, a binary file, an empty one) and missing columns each
become one :class:`~simulator.config.errors.ConfigError` naming the option that gave the path.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.errors import ConfigError


def read_csv_checked(path: Path | str, field: str, fix: str | None = None, required: Iterable[str] = (),
                     columns_fix: str | None = None) -> Any:
    """``path`` as a DataFrame holding every ``required`` column, or a one-line error on ``field``
    (``fix`` says what to pass instead; ``columns_fix`` what a file lacking columns should give)."""
    import pandas as pd  # a refusal of a bad path comes before the import

    path = Path(path)
    if not path.is_file():
        raise ConfigError(field, f"{path} does not exist", fix)
    try:
        # Every line a row (blank ones too, dropped below), so a row's position + 2 is its line in errors; no
        # column taken for the index (a trailing comma made pandas take the first, shifting every cell left)
        with warnings.catch_warnings():  # (a row of more cells than the header is refused below, in one line)
            warnings.simplefilter("ignore", pd.errors.ParserWarning)
            df = pd.read_csv(path, skip_blank_lines=False, index_col=False)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise ConfigError(field, f"{path} is not a readable CSV ({type(exc).__name__})", fix) from None
    import csv

    with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:
        lines = list(csv.reader(f))
    header = [name.strip() for name in lines[0]] if lines else []
    twice = sorted({name for name in header if name and header.count(name) > 1})  # (blank ones: pandas' "Unnamed")
    if twice:  # (pandas renamed a second tp "tp.1")
        raise ConfigError(field, f"{path} names column {twice[0]!r} twice", "give each column once")
    for number, cells in enumerate(lines[1:], start=2):
        if any(c.strip() for c in cells[len(header):]):  # (empty ones: a trailing comma)
            raise ConfigError(field, f"{path} line {number} has {len(cells)} cells under a header of {len(header)}",
                              "give each row one cell a column (quote a cell holding a comma)")
    blank = df.isna().all(axis=1).to_numpy()
    last = len(blank) - int(np.argmin(blank[::-1])) if not blank.all() else 0  # trailing blank lines are dropped
    if blank[:last].any():
        raise ConfigError(field, f"{path} line {int(np.argmax(blank)) + 2} is blank", "remove it")
    if last < len(df):  # read again without them, so their empty cells leave no column's type float
        df = pd.read_csv(path, index_col=False)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ConfigError(field, f"{path} lacks column(s) {', '.join(missing)}", columns_fix or fix)
    return df
