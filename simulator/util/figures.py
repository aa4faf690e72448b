"""Figures are a command's last and least output: one that fails to draw, because the environment's matplotlib is
broken or misconfigured (an unknown ``MPLBACKEND``, a missing font cache folder, a half-installed package), must not
take the tables computed before it, nor end in a traceback. :func:`from_matplotlib` tells such a failure from a bug
of ours; commands skip the figure with :func:`skipped` (a one-line note) and keep what they wrote."""

from __future__ import annotations

import os

# The packages a figure is drawn with: an error raised inside them is the environment's, not the command's
_PACKAGES = ("matplotlib", "fontTools", "PIL", "kiwisolver", "pyparsing")


def from_matplotlib(err: BaseException) -> bool:
    """Whether ``err`` was raised while importing or running matplotlib (or a package it draws with)."""
    if isinstance(err, ImportError) and (err.name or "").split(".")[0] in _PACKAGES:
        return True
    tb = err.__traceback__
    while tb is not None:
        if any(f"{os.sep}{name}{os.sep}" in tb.tb_frame.f_code.co_filename for name in _PACKAGES):
            return True
        tb = tb.tb_next
    return False


def skipped(what: str, err: BaseException) -> str:
    """The one line that says figure ``what`` was not drawn, and why."""
    return (f"{what} not drawn: matplotlib failed ({type(err).__name__}: {' '.join(str(err).split())}); check "
            "MPLBACKEND and the matplotlib install (the tables before it stand)")
