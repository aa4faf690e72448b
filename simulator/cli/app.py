"""The ``simulate`` typer app and its error boundary.

Commands are thin: each parses options, builds frozen configs and calls a plain
function that tests can call directly. :func:`main` is the console entry point; it
turns any :class:`~simulator.config.errors.ConfigError` into one line on stderr and exit
code 2, so users never see a traceback for their own mistakes; a worker process that died
(:class:`~simulator.config.errors.WorkerDied`) is one line and exit code 1.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import typer.main

from simulator.config.errors import ConfigError, WorkerDied

if TYPE_CHECKING:  # rich loads when a command prints, not when the CLI is imported
    from rich.console import Console


app = typer.Typer(
    name="simulate",
    help="servesim: simulate LLM inference serving (vLLM, SGLang, TensorRT-LLM, Sarathi-Serve, Orca, FasterTransformer).",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def console(stderr: bool = False) -> Console:
    """A rich console. On a terminal, lines wrap between words at its width. Into a file or
    pipe, a printed line stays one line however long (soft wrap: no edge to wrap at, so a
    header or warning is never cut mid-line or mid-word) and tables keep their natural width
    (:func:`simulator.cli.tables.print_table`; ``COLUMNS``, where set, bounds them)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(stderr=stderr, width=None if tty else 160, soft_wrap=not tty)


def fail(message: str, code: int = 2) -> None:
    """Print one line to stderr and exit non-zero."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def said_then_written(out: Path, what: str) -> Iterator[None]:
    """Around the write of a command's result to ``out``, once the command has shown it: a write that fails (a full
    disk, a folder made read-only since the command began) or Ctrl-C ends in one line that points at ``what`` above,
    exit 1 or 130, not in a traceback that takes the result with it."""
    try:
        yield
    except KeyboardInterrupt:
        fail(f"interrupted: nothing written to {out}", code=130)
    except OSError as exc:
        fail(f"--out: could not write {out} ({exc.strerror or exc}); the {what} is above", code=1)


def command_line(argv: list[str]):  # noqa: ANN201 - a click command
    """The click command that runs ``argv`` (the arguments after the program name).

    typer builds a click command, every option included, for each registered command at each
    start (~15 ms for this CLI, the shared run options of seven commands). When the first
    argument names a command or group, only that one can run, so the group is built with just
    it; anything else (``--help``, no or an unknown command) gets the whole app. Pretty
    exceptions are off, so the excepthook typer would install has nothing to add.
    """
    name = argv[0] if argv else None
    commands = [c for c in app.registered_commands
                if (c.name or (c.callback and typer.main.get_command_name(c.callback.__name__))) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not (commands or groups):
        return typer.main.get_command(app)
    just_one = copy.copy(app)
    just_one.registered_commands, just_one.registered_groups = commands, groups
    return typer.main.get_group(just_one)


# Options that take several values in vLLM's argparse (nargs='+'): ``--goodput ttft:300 tpot:50``.
MULTI_VALUE_OPTIONS = ("--goodput",)


def joined_values(argv: list[str]) -> list[str]:
    """``argv`` with the values after a :data:`MULTI_VALUE_OPTIONS` flag joined into one argument
    (click takes one value per option): ``--goodput ttft:300 tpot:50`` -> ``--goodput 'ttft:300 tpot:50'``."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        out.append(argv[i])
        if argv[i] in MULTI_VALUE_OPTIONS:
            values = []
            while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i += 1
                values.append(argv[i])
            out.append(" ".join(values))
        i += 1
    return out


def refuse_blank_values(argv: list[str]) -> None:
    """An empty or blank value (``--out ""``, ``--intra-node-link=``) is refused in one line: click would
    take it, and a path made of it is the current folder (``--out ""`` wrote there, or failed after the run)."""
    for i, arg in enumerate(argv):
        if arg.startswith("--") and "=" in arg:
            flag, _, value = arg.partition("=")
        elif not arg.strip():
            flag, value = (argv[i - 1] if i and argv[i - 1].startswith("-") else "argument"), arg
        else:
            continue
        if not value.strip():
            raise ConfigError(flag, "is empty", "give it a value, or leave it out")


def refuse_repeated_options(command: Any, argv: list[str]) -> None:  # noqa: ANN401 - a click command or group
    """A single-value option given twice (``--tp 2 --tp 4``, ``--tp=2 --tp 4``, ``--prefix-caching
    --no-prefix-caching``) is refused in one line: click keeps the last silently, so the run would differ from
    the one the first spelling asked for. Options that repeat by design (``--grid``, ``--profile``: click's
    ``multiple``) and counts are left alone. ``argv`` is walked with ``command``'s own options, into the
    subcommand it names, so an option's value (``--qps -1``) is never read as a flag."""
    cmd, seen, i = command, {}, 0
    options = _options_of(cmd)
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":  # the rest are arguments
            return
        commands = getattr(cmd, "commands", None)
        if isinstance(commands, dict) and arg in commands:  # a subcommand: its own options from here on
            cmd, seen = commands[arg], {}
            options = _options_of(cmd)
            continue
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        param = options.get(flag)
        if param is None:  # an argument, or an unknown option (click names it)
            continue
        takes_value = not param.is_flag and not param.count and param.nargs != 0
        if takes_value and not eq and i < len(argv):
            value, i = argv[i], i + 1
        if param.multiple or param.count:
            continue
        typed = f"{flag} {value}" if takes_value else flag
        if param.name in seen:
            raise ConfigError(flag, f"given twice ('{seen[param.name]}', then '{typed}'), and only the last would "
                              "count", "give it once")
        seen[param.name] = typed


def _options_of(command: Any) -> dict[str, Any]:  # noqa: ANN401 - a click command
    """``command``'s options by each spelling (``--tp``, ``--no-prefix-caching``)."""
    out: dict[str, Any] = {}
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", None) == "option":
            for name in (*param.opts, *param.secondary_opts):
                out[name] = param
    return out


def as_flag(err: ConfigError, argv: list[str]) -> ConfigError:
    """``err`` named by the flag the user typed where its field is a config field that flag sets
    (``replica.gpu_memory_utilization`` -> ``--gpu-memory-utilization``, ``slo.tbt_s`` -> ``--tbt-slo``); a
    field from a ``--config`` file, or no flag's, keeps its dotted name, which the file uses."""
    from simulator.config.options import OPTION_ALIASES, RUN_OPTIONS

    typed = {arg.partition("=")[0] for arg in argv if arg.startswith("--")}
    flags: dict[str, list[str]] = {}
    for name, (target, _, _) in RUN_OPTIONS.items():
        flags.setdefault(target.replace("__", "."), []).extend(
            "--" + n.replace("_", "-") for n in (name, *OPTION_ALIASES.get(name, ())))
    if err.field not in flags and err.field.startswith(("slo.", "capacity.")):
        from simulator.planning.options import PLANNER_OPTIONS

        for name, option in PLANNER_OPTIONS.items():
            # (SearchSettings names its fields capacity.<field> in errors, as a sweep file's capacity keys)
            field = option.sets.replace("search.", "capacity.", 1) if option.sets.startswith("search.") else option.sets
            flags.setdefault(field, []).append("--" + name.replace("_", "-"))
    given = [flag for flag in flags.get(err.field, ()) if flag in typed]
    return ConfigError(given[0], err.problem, err.fix) if given else err


# What a failed write at the end of the work raises: no space, no quota, no permission, a read-only or full file system
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.EFBIG})


def _click_errors() -> tuple[type[Exception], type[Exception]]:
    """(UsageError, ClickException) of the click that typer runs on: the click package, or the copy
    newer typers vendor (typer._click); both are found from the public ``typer.BadParameter``."""
    by_name = {c.__name__: c for c in typer.BadParameter.__mro__}
    return by_name["UsageError"], by_name["ClickException"]


_WITH_UNIT = re.compile(r"'([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([a-zA-Z%µ/]+)' is not a valid (?:float|integer)")


def _unit_hint(message: str) -> str:
    """A number typed with its unit (``--tpot-slo 50ms``) told how the flag reads it: a bare number, in the unit its
    help names (time limits are seconds: 50 ms is 0.05)."""
    found = _WITH_UNIT.search(message)
    if not found:
        return message
    number, unit = found.groups()
    seconds = f"; where it takes seconds, {number}{unit} is {float(number) / 1000:g}" if unit.lower() == "ms" else ""
    return f"{message} Give a bare number, in the unit the flag's help names{seconds}."


@contextlib.contextmanager
def _wide_help() -> Iterator[None]:
    """Help into a file or pipe at 160 columns, as the commands print: at rich's default 80 its option column cut
    the longer names (``--max-num-batched-t…``), which then could not be read or copied. A width set by the user
    (``TERMINAL_WIDTH``, typer's; ``COLUMNS``) stands; typer's width is put back after (a process running the CLI
    more than once, as tests do, keeps its own)."""
    import typer.rich_utils

    before = typer.rich_utils.MAX_WIDTH
    if before is None and "COLUMNS" not in os.environ:
        typer.rich_utils.MAX_WIDTH = 160
    try:
        yield
    finally:
        typer.rich_utils.MAX_WIDTH = before


def main() -> None:
    argv = joined_values(sys.argv[1:])
    wide = not sys.stdout.isatty() and ("--help" in argv or "-h" in argv or len(argv) <= 1)
    with _wide_help() if wide else contextlib.nullcontext():
        _main(argv)


def _main(argv: list[str]) -> None:
    usage_error, click_exception = _click_errors()
    try:
        refuse_blank_values(argv)
        # Not standalone: click's own handling would print a usage error as a boxed block of
        # five lines; here it is one, as every other mistake is.
        command = command_line(argv)
        refuse_repeated_options(command, argv)
        code = command.main(args=argv, standalone_mode=False)
    except ConfigError as err:
        typer.echo(f"error: {as_flag(err, argv)}", err=True)
        sys.exit(2)
    except WorkerDied as err:  # (a sweep and a plan say it themselves, with what they kept)
        typer.echo(f"error: {err}", err=True)
        sys.exit(1)
    except usage_error as err:  # a bad value's type, an unknown option or command, a missing argument
        ctx = getattr(err, "ctx", None)
        where = ctx.command_path if ctx is not None else " ".join(["simulate", *argv[:1]])
        message = _unit_hint(" ".join(err.format_message().split()))
        if message:  # empty for a group run bare, whose help is already printed
            typer.echo(f"error: {message} (see '{where} --help')", err=True)
        sys.exit(getattr(err, "exit_code", 2))
    except click_exception as err:
        err.show()
        sys.exit(getattr(err, "exit_code", 1))
    except typer.Abort:  # end of input at a prompt
        typer.echo("Aborted!", err=True)
        sys.exit(1)
    except OSError as err:
        # A file the work ends by writing: a full disk, a folder made read-only meanwhile. Any other OSError (a lost
        # Ray connection, a timeout, a file missing) is not this, and keeps its own message or traceback.
        if err.filename is None or err.errno not in WRITE_ERRNOS:
            raise
        typer.echo(f"error: {err.filename}: {err.strerror} (free space or permissions there, or another --out; what is "
                   "printed above stands)", err=True)
        sys.exit(1)
    except Exception as err:
        from simulator.util.figures import from_matplotlib

        if not from_matplotlib(err):
            raise
        typer.echo(f"error: matplotlib could not be loaded ({type(err).__name__}: {' '.join(str(err).split())}): "
                   "check MPLBACKEND and the matplotlib install; what is printed above stands", err=True)
        sys.exit(1)
    # A command's typer.Exit(code), or Ctrl-C's 130, comes back as the exit code; a finished command as None.
    sys.exit(code if isinstance(code, int) else 0)
