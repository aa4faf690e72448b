"""``simulate`` command line. Each submodule adds its commands to :data:`app`."""

from simulator.cli.app import app, main

# Importing a command module registers its commands; one line per module.
from simulator.cli import catalog as _catalog  # noqa: E402,F401
from simulator.cli import run as _run  # noqa: E402,F401
from simulator.cli import capacity as _capacity  # noqa: E402,F401
from simulator.cli import profile as _profile  # noqa: E402,F401
from simulator.cli import costmodel as _costmodel  # noqa: E402,F401

__all__ = ["app", "main"]
