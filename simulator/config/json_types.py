"""Type checks for values read from JSON into a frozen config dataclass.

A dataclass's validators compare numbers and call string methods, so a value of the wrong type
(``"tp": "2"``, ``"overlap_cpu": "false"``, ``"rpc_s": [[2]]``) would otherwise end in a
traceback, or worse, pass: ``"false"`` is true. :func:`check_json_types` refuses it in one line
that names the field, by the field's own type hint.
"""

from __future__ import annotations

import json
import numbers
import types
import typing
from typing import Any

from simulator.config.errors import ConfigError


def fits(value: Any, hint: Any) -> bool:  # noqa: ANN401 - any JSON value against any hint
    """Whether a JSON ``value`` has the type a field declares (``int``, ``float``, ``str``, ``bool``,
    one of them ``| None``, a ``tuple[X, ...]`` of them or a fixed ``tuple[X, Y]``, each a JSON
    list); other types are left to the field's own checks."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(value is None if arg is type(None) else fits(value, arg) for arg in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list | tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(fits(v, args[0]) for v in value)
        return len(value) == len(args) and all(fits(v, a) for v, a in zip(value, args, strict=True))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:  # numbers.Integral: a planner's numpy integers too
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if hint is float:  # an integer too: JSON writes 1.0 as 1 in some hands
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    return True


def type_words(hint: Any) -> str:  # noqa: ANN401 - any type hint
    """A declared type as a reader of a JSON file says it: ``int or null``, ``a list of float``,
    ``a list of [int, float]``."""
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a list of {type_words(args[0])}"
        return "[" + ", ".join(type_words(a) for a in args) + "]"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(type_words(a) for a in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def check_json_types(prefix: str, cls: type, values: dict[str, Any],
                     fix: str = "use the config.json a run wrote") -> None:
    """Refuse, in one line naming ``prefix`` + the field, a value in ``values`` whose type is not the
    one ``cls`` declares for it. Keys ``cls`` does not declare are left to the caller."""
    hints = typing.get_type_hints(cls)
    for name, value in values.items():
        hint = hints.get(name)
        if hint is not None and not fits(value, hint):
            raise ConfigError(f"{prefix}{name}", f"must be {type_words(hint)}, got {value!r}", fix)


def loads_once(text: str, where: str) -> Any:  # noqa: ANN401 - any JSON document
    """``json.loads``, refusing an object that gives one key twice with two values (the plain
    reader keeps the last one without a word). ``where`` names the file or option in the error;
    a decoding error is left to the caller, which knows what to say of it."""
    def no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen and seen[key] != value:
                field = f"{where}.{key}" if where.startswith("--") else f"{where}: key {key!r}"  # an option, a file
                raise ConfigError(field, f"given twice: {seen[key]!r} and {value!r}", "give each key once")
            seen[key] = value
        return seen

    return json.loads(text, object_pairs_hook=no_repeats)
