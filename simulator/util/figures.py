"""Figures are a command's last and least output: one that cannot be drawn because the environment's matplotlib is
broken or misconfigured (an unknown ``MPLBACKEND``, a half-installed package or one of its dependencies) must not
take the tables computed before it, nor end in a traceback. :func:`from_matplotlib` tells such a failure from a bug
of ours (a bad argument to a drawing call stays a traceback, to be fixed); commands draw under :func:`or_skipped`,
which turns such a failure into a one-line note (:func:`skipped`), and keep what they wrote."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator

# The packages a figure is drawn with: a failure to load them (or matplotlib's backend) is the environment's
_PACKAGES = ("matplotlib", "fontTools", "PIL", "kiwisolver", "pyparsing")
# Where matplotlib chooses and loads its backend and fonts: an error raised under these is its configuration's (a
# drawing call's bad argument raised in a backend's or the font manager's file is not: those files are not matched)
_SETUP_FUNCTIONS = frozenset({"use", "switch_backend", "_get_backend_mod", "_load_fontmanager", "get_backend"})


def _roots() -> list[str]:
    """The folders the figure packages load from (found, not imported: one may be the broken one)."""
    out = []
    for name in _PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        for location in (spec.submodule_search_locations or []) if spec is not None else []:
            out.append(os.path.join(os.path.realpath(location), ""))
    return out


def from_matplotlib(err: BaseException) -> bool:
    """Whether ``err`` is the environment's matplotlib failing to load: an import of one of its packages failing,
    an error raised while one of them was being imported, or one raised where matplotlib sets up its backend and
    fonts. An error a drawing call raises on our arguments is not."""
    if isinstance(err, ImportError) and (err.name or "").split(".")[0] in _PACKAGES:
        return True
    frames = []  # (file, function) from the outermost frame to where it was raised
    tb = err.__traceback__
    while tb is not None:
        frames.append((os.path.realpath(tb.tb_frame.f_code.co_filename), tb.tb_frame.f_code.co_name))
        tb = tb.tb_next
    roots = _roots()
    theirs = [(path, name) for path, name in frames if any(path.startswith(root) for root in roots)]
    if not frames or frames[-1] not in theirs:
        return False  # (raised in our code, or elsewhere)
    # a module of theirs failing as it is imported (its body running), or their backend and font set-up
    return isinstance(err, ImportError) or any(name == "<module>" or name in _SETUP_FUNCTIONS for _, name in theirs)


def skipped(what: str, err: BaseException) -> str:
    """The one line that says figure ``what`` was not drawn, and why."""
    return (f"{what} not drawn: matplotlib failed ({type(err).__name__}: {' '.join(str(err).split())}); check "
            "MPLBACKEND and the matplotlib install (the tables before it stand)")


@contextlib.contextmanager
def or_skipped(what: str, notes: list[str]) -> Iterator[None]:
    """Draw figure(s) ``what`` in the block; where matplotlib cannot (:func:`from_matplotlib`), append the note that
    says so to ``notes`` and go on; any other error is raised."""
    try:
        yield
    except Exception as err:
        if not from_matplotlib(err):
            raise
        notes.append(skipped(what, err))
