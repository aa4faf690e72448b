"""Progress on stderr: of a long run (:class:`RunProgress`) and of a command's steps (:class:`StepProgress`).

Both write to stderr only, so stdout stays clean for a command's result, and both only
observe: no result depends on them.

A run of millions of requests spends tens of seconds generating and building requests
before the first one finishes, then minutes simulating, then more computing metrics and
writing tables. :class:`RunProgress` shows each phase as it starts:

- on a terminal, a rich bar: the phase, and while simulating the finished requests out
  of the total, elapsed time and an ETA (from the rate of finished requests so far);
- piped or redirected, plain lines: one as each phase starts, and while simulating one
  every :data:`PLAIN_EVERY_S` seconds with the same counts and ETA, so a log or a CI job
  shows a sign of life. A short run stays silent (stderr then holds nothing but a possible
  one-line error): a phase line is printed once the run has taken :data:`PLAIN_QUIET_S`
  seconds, or at once for a phase over :data:`PLAIN_BIG_COUNT` requests.

It only observes: the engine calls :meth:`phase`, :meth:`start` and :meth:`update`; no
simulation state depends on it, so the same seed gives the same results with or without it.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # rich loads when a live line is shown, not at import
    from rich.progress import Progress

PLAIN_EVERY_S = 10.0
PLAIN_QUIET_S = 2.0
PLAIN_BIG_COUNT = 100_000


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class RunProgress:
    """Phases and a request counter with ETA; rich on a terminal, plain lines otherwise."""

    def __init__(self, stream: TextIO | None = None, plain: bool | None = None,
                 every_s: float = PLAIN_EVERY_S, quiet_s: float = PLAIN_QUIET_S) -> None:
        self._stream = stream or sys.stderr
        self._plain = (not self._stream.isatty()) if plain is None else plain
        self._every_s = every_s
        self._quiet_s = quiet_s
        self._started = time.perf_counter()
        self._phase = ""
        self._phase_started = self._started
        self._total: int | None = None
        self._last_line = 0.0
        self._bar = None
        self._task = None
        if not self._plain:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=Console(file=self._stream), transient=True)
            self._task = self._bar.add_task("starting", total=None)
            self._bar.start()

    def phase(self, text: str, count: int = 0) -> None:
        """A step without a count (generating requests, writing tables); ``count``: requests it handles."""
        self._phase, self._total = text, None
        self._phase_started = time.perf_counter()
        if self._bar is not None:
            self._bar.update(self._task, description=text, total=None, completed=0)
        elif self._worth_a_line(count):
            self._line(f"{text}...")

    def start(self, text: str, total: int) -> None:
        """A counted step: :meth:`update` reports how many of ``total`` are done."""
        self._phase, self._total = text, total
        self._phase_started = self._last_line = time.perf_counter()
        if self._bar is not None:
            self._bar.reset(self._task, description=text, total=total, completed=0)
        elif self._worth_a_line(total):
            self._line(f"{text}: 0/{total:,}")

    def _worth_a_line(self, count: int) -> bool:
        return count >= PLAIN_BIG_COUNT or time.perf_counter() - self._started >= self._quiet_s

    def update(self, done: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done)
            return
        now = time.perf_counter()
        if now - self._last_line >= self._every_s:
            self._last_line = now
            self._line(self.describe(done, now))

    def describe(self, done: int, now: float | None = None) -> str:
        """``simulating: 1,200/10,000 (12%), 30s in this step, ETA 3m40s``."""
        now = time.perf_counter() if now is None else now
        spent = now - self._phase_started
        total = self._total or 0
        text = f"{self._phase}: {done:,}/{total:,}"
        if total:
            text += f" ({done / total:.0%})"
        text += f", {_duration(spent)} in this step"
        if total and done:
            text += f", ETA {_duration(spent / done * (total - done))}"
        return text

    def _line(self, text: str) -> None:
        print(f"[{_duration(time.perf_counter() - self._started)}] {text}", file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


class StepProgress:
    """Steps of a long command (a capacity search's trials, a sweep's points, a planner's
    searches). On a terminal: one live line (spinner, steps done of the total when known,
    elapsed time, the current step). Piped or redirected: one plain line per step, so a log
    shows where the command is.

    Context manager; call :meth:`update` as each step starts (or ends).

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
