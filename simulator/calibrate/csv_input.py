"""A user's or a data folder's CSV, read or refused in one line.

Every table a fit reads goes through :func:`read_csv_checked`: a path that is not a file, a file
pandas cannot parse (malformed quoting, a binary file, an empty one) and missing columns each
become one :class:`~simulator.config.errors.ConfigError` naming the option that gave the path.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

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
        df = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError, pd.errors.EmptyDataError) as exc:
        raise ConfigError(field, f"{path} is not a readable CSV ({type(exc).__name__})", fix) from None
    import csv

    with path.open(newline="", encoding="utf-8-sig", errors="replace") as f:  # pandas renamed a second tp "tp.1"
        header = [name.strip() for name in next(csv.reader(f), [])]
    twice = sorted({name for name in header if name and header.count(name) > 1})  # (blank ones: pandas' "Unnamed")
    if twice:
        raise ConfigError(field, f"{path} names column {twice[0]!r} twice", "give each column once")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ConfigError(field, f"{path} lacks column(s) {', '.join(missing)}", columns_fix or fix)
    return df
