"""``simulate`` command line. Each submodule adds its commands to :data:`app`."""
# ruff: noqa: I001  (import order is the order of commands in `simulate --help`)

from simulator.cli.app import app, main

# Importing a command module registers its commands; one line per module.
from simulator.cli import run as _run  # noqa: F401
from simulator.cli import capacity as _capacity  # noqa: F401
from simulator.cli import plan as _plan  # noqa: F401
from simulator.cli import catalog as _catalog  # noqa: F401
from simulator.cli import profile as _profile  # noqa: F401
from simulator.cli import costmodel as _costmodel  # noqa: F401
from simulator.cli import disagg as _disagg  # noqa: F401
from simulator.cli import engine as _engine  # noqa: F401
from simulator.cli import aic as _aic  # noqa: F401

__all__ = ["app", "main"]
