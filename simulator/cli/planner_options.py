"""The planner's options as typer parameters, generated from the one table.

``@planner_options("capacity")`` adds to a command's signature every option of
:data:`simulator.planning.options.PLANNER_OPTIONS` that the command takes (the flag is the name,
``--tbt-slo``; the default the SLO's or SearchSettings' own; the help and panel the table's) and
hands the command their values as one ``planner`` dict, by name. The command builds its SLO and
settings from it (:func:`~simulator.planning.options.slo_and_settings`,
:func:`~simulator.planning.options.plan_slo`) when it is ready to, so it may check its paths
first, as before.
"""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any

import typer

from simulator.cli.options import escape_markup
from simulator.planning.options import PLANNER_OPTIONS, options_of


def _parameter(name: str, command: str) -> inspect.Parameter:
    option = PLANNER_OPTIONS[name].for_command(command)
    default = option.default
    typ = option.typ | None if default is None else option.typ
    annotation = Annotated[typ, typer.Option(help=escape_markup(option.help), rich_help_panel=option.panel)]
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def planner_options(command: str, after: dict[str, str] | None = None):  # noqa: ANN201 - decorator over typer commands
    """Add ``command``'s planner options to the signature (after ``config``, before the
    command's own parameters) and pass them to it as ``planner``. ``after`` places an own
    parameter right after a planner option instead (``{"workers": "seeds"}``: the help lists
    them together)."""
    names = options_of(command)
    after = after or {}
    if unknown := set(after.values()) - set(names):
        raise ValueError(f"{command} takes no planner option {', '.join(sorted(unknown))}")

    def decorate(fn):  # noqa: ANN001, ANN202
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "planner"]
        lead = [p for p in own if p.name == "config"]  # read by @run_options above

        @functools.wraps(fn)
        def wrapper(**kwargs: Any):  # noqa: ANN202
            planner = {name: kwargs.pop(name) for name in names}
            return fn(planner=planner, **kwargs)

        placed = {name: [p for p in own if after.get(p.name) == name] for name in names}
        params = [*lead, *(q for name in names for q in (_parameter(name, command), *placed[name])),
                  *(p for p in own if p.name != "config" and p.name not in after)]
        wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {}
        del wrapper.__wrapped__  # typer must see the merged signature, not fn's
        return wrapper

    return decorate
