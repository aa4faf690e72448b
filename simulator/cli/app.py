"""The ``simulate`` typer app and its error boundary.

Commands are thin: each parses options, builds frozen configs and calls a plain
function that tests can call directly. :func:`main` is the console entry point; it
turns any :class:`~simulator.errors.ConfigError` into one line on stderr and exit
code 2, so users never see a traceback for their own mistakes.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import typer

from simulator.cli import lazy_help
from simulator.errors import ConfigError

if TYPE_CHECKING:  # rich loads when a command prints, not when the CLI is imported
    from rich.console import Console

lazy_help.install()  # --help and usage errors without rich.markdown and rich.traceback

app = typer.Typer(
    name="simulate",
    help="servesim: simulate LLM inference serving (vLLM, Orca, FasterTransformer, Sarathi-Serve).",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def console(stderr: bool = False) -> Console:
    """A rich console; wide when output goes to a file or pipe so tables are not folded."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, width=None if stream.isatty() else 160)


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit non-zero."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    try:
        app()
    except ConfigError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
