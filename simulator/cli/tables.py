"""Printing tables whose cells are values to copy: never truncated, never squeezed.

rich shrinks a table that is wider than the console by folding or eliding cells
("llam...", "0.009..."): that destroys exactly the names and numbers a user copies.
:func:`print_table` never lets it:

- every cell stays on one line (``no_wrap``), so a value is never cut or split;
- piped or redirected output is printed at the table's natural width, however wide
  (a file has no edge; ``grep`` and ``cut`` then see whole rows), unless ``COLUMNS`` is set
  in the environment: then that is the edge, as on a terminal; its title is a line of its own;
- on a terminal (or ``COLUMNS``) narrower than the table, each row is printed as a short record instead:
  the first column's value as a heading, then ``header value`` pairs, wrapped between
  pairs, never inside one.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich loads when a table is printed, not when the CLI is imported
    from rich.console import Console
    from rich.table import Table

PAIR_SEPARATOR = " · "
RECORD_INDENT = "    "


def _plain(cell: object) -> str:
    from rich.text import Text

    return cell.plain if isinstance(cell, Text) else str(cell)


def table_rows(table: Table) -> list[list[str]]:
    """The table's cells as plain strings, row by row."""
    columns = [[_plain(c) for c in col._cells] for col in table.columns]
    return [list(row) for row in zip(*columns, strict=True)] if columns else []


def wrap_pairs(pairs: list[str], width: int, indent: str = RECORD_INDENT) -> list[str]:
    """Greedy lines of ``indent`` + pairs joined by :data:`PAIR_SEPARATOR`, at most ``width`` wide
    where a pair fits at all (a longer pair gets a line of its own, whole)."""
    lines: list[str] = []
    line = ""
    for pair in pairs:
        candidate = pair if not line else line + PAIR_SEPARATOR + pair
        if line and len(indent) + len(candidate) > width:
            lines.append(indent + line)
            line = pair
        else:
            line = candidate
    if line:
        lines.append(indent + line)
    return lines


def piped_columns() -> int | None:
    """The edge ``COLUMNS`` sets for output that is not a terminal, or None (no edge)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return columns if columns > 0 else None


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` with every cell whole (see the module docstring)."""
    from rich.text import Text

    for column in table.columns:
        column.no_wrap = True
        column.overflow = "ignore"
    # Each column's natural width (padding included), measured once. Where the table is printed
    # at those widths they are fixed on the columns, so rich does not measure every cell twice
    # more (what Measurement.get of the table and then printing it would do; same output).
    unbounded = console.options.update_width(1_000_000)
    widths = [table._measure_column(console, unbounded, column).maximum for column in table.columns]
    natural = sum(widths) + table._extra_width
    edge = console.width if console.is_terminal else piped_columns()
    if edge is None or natural <= edge:
        for column, width in zip(table.columns, widths, strict=True):
            column.width = width - table._get_padding_width(column._index)
    if not console.is_terminal and (edge is None or natural <= edge):
        if table.title:  # on a line of its own: folded to the table's width it would break mid-line
            console.print(table.title, soft_wrap=True, highlight=False)
            table.title = None
        width = console.width
        console.width = max(width, natural)
        try:
            console.print(table, crop=False)
        finally:
            console.width = width
        return
    if console.is_terminal and natural <= console.width:
        console.print(table)
        return
    if table.title:
        console.print(table.title, soft_wrap=True)
    headers = [_plain(c.header) for c in table.columns]
    for row in table_rows(table):
        console.print(Text(row[0], style="bold"), soft_wrap=True)
        pairs = [f"{h} {v}" for h, v in zip(headers[1:], row[1:], strict=True) if v not in ("", "-")]
        for line in wrap_pairs(pairs, edge or console.width):
            console.print(Text(line), soft_wrap=True)
