"""Help and usage errors without rich's Markdown and traceback machinery.

typer formats ``--help`` and usage errors with ``typer.rich_utils``, which imports
``rich.markdown`` (markdown-it, pygments) and ``rich.traceback`` (attrs) at its top: about
60 ms of every ``simulate --help``, though this CLI uses neither (its help is rich markup,
not Markdown, and pretty exceptions are off). :func:`install` arranges that when typer
first imports ``typer.rich_utils``, those two modules are stand-ins while it runs, and the
names it takes from them (``Markdown``, ``Traceback``) build the real objects on first use.
Nothing else changes: help text and errors are rendered by the same typer code, and an import
of ``rich.markdown`` or ``rich.traceback`` before or after that gets the real module (a stand-in
hands any other name over to the real module too). ``rich_markup_mode=None`` would avoid the
import as well, but drops typer's rich help altogether (option panels, colours).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

TARGET = "typer.rich_utils"


def _real(module_name: str, attr: str) -> Any:
    """``module_name.attr`` from the real module (a stand-in, if present, is taken out first)."""
    module = sys.modules.get(module_name)
    if isinstance(module, _StandIn):
        del sys.modules[module_name]
    return getattr(importlib.import_module(module_name), attr)


class _StandIn(types.ModuleType):
    """A module that is only a name while ``typer.rich_utils`` runs; any name other than the
    stand-in classes below comes from the real module."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _real(self.__name__, name)


class Markdown:
    """Stand-in for :class:`rich.markdown.Markdown`: constructing one builds the real one."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _real("rich.markdown", "Markdown")(*args, **kwargs)


class Traceback:
    """Stand-in for :class:`rich.traceback.Traceback` (typer builds it with ``from_exception``)."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _real("rich.traceback", "Traceback")(*args, **kwargs)

    @staticmethod
    def from_exception(*args: Any, **kwargs: Any) -> Any:
        return _real("rich.traceback", "Traceback").from_exception(*args, **kwargs)


STAND_INS = {"rich.markdown": Markdown, "rich.traceback": Traceback}


# The finder and loader follow the import protocols without subclassing importlib.abc, whose
# import (importlib.resources, tempfile, ...) would cost a few ms of every start.
class _Loader:
    """Runs the real loader of ``typer.rich_utils`` with the stand-ins in ``sys.modules``."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        placed = []
        for name, cls in STAND_INS.items():
            if name not in sys.modules:  # already imported for real: typer gets the real one
                stand_in = _StandIn(name)
                setattr(stand_in, cls.__name__, cls)
                sys.modules[name] = stand_in
                placed.append(name)
        try:
            self._loader.exec_module(module)
        finally:
            for name in placed:
                if isinstance(sys.modules.get(name), _StandIn):
                    del sys.modules[name]

    def __getattr__(self, name: str) -> Any:  # get_source etc., for tracebacks and inspect
        return getattr(self._loader, name)


class _Finder:
    """Finds ``typer.rich_utils`` once, through the normal finders, and wraps its loader."""

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> Any:
        if fullname != TARGET:
            return None
        uninstall()
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


_FINDER = _Finder()


def install() -> None:
    """Take effect at typer's first import of ``typer.rich_utils`` (no-op if it has happened)."""
    if TARGET not in sys.modules and _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
