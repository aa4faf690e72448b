"""Per-step progress for long commands (``capacity``, ``fidelity``, ``calibrate``).

On a terminal: one live line on stderr (spinner, steps done of the total when known, elapsed
time, the current step). Piped or redirected: one plain line per step on stderr, so a log
shows where a long command is. Either way stdout stays clean for the command's result.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich loads when a live line is shown, not when the CLI is imported
    from rich.progress import Progress


class StepProgress:
    """Context manager; call :meth:`update` as each step starts (or ends).

    ``update(message, done=None, total=None)``: ``done`` of ``total`` steps finished so far,
    when the command knows them. Safe to call from the thread that entered it only.
    """

    def __init__(self, what: str, quiet: bool = False) -> None:
        self.what = what
        self.quiet = quiet
        self._live = not quiet and sys.stderr.isatty()
        self._progress: Progress | None = None
        self._task = None
        self._start = time.perf_counter()

    def __enter__(self) -> StepProgress:
        self._start = time.perf_counter()
        if self._live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(SpinnerColumn(), TextColumn(self.what), BarColumn(bar_width=20),
                                      MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"),
                                      console=Console(stderr=True), transient=True)
            self._task = self._progress.add_task("", total=None)
            self._progress.start()
        return self

    def update(self, message: str, done: int | None = None, total: int | None = None) -> None:
        if self.quiet:
            return
        if self._progress is not None:
            self._progress.update(self._task, description=message, completed=done or 0, total=total)
            return
        count = f" [{done}/{total}]" if done is not None and total else ""
        print(f"{self.what}{count} {time.perf_counter() - self._start:.0f}s: {message}", file=sys.stderr, flush=True)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()
