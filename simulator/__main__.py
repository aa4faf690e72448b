"""``python -m simulator`` is the ``simulate`` command."""

from simulator.cli import main

main()
