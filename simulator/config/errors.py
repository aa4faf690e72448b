"""User-facing errors.

Every mistake a user can make (an unknown model name, a malformed trace, a layout
that does not fit) raises :class:`ConfigError` with a single-line message that names
the field at fault and how to fix it. The CLI prints that line and exits non-zero;
nothing user-caused should ever surface as a traceback.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A user input is invalid. ``str(err)`` is one line: the problem and the fix."""

    def __init__(self, field: str, problem: str, fix: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        message = f"{field}: {problem}"
        if fix:
            message += f" ({fix})"
        super().__init__(message)

    def __reduce__(self) -> tuple[type, tuple[str, str, str | None]]:
        # Pickled by its own arguments: a worker process (capacity, sweep, plan) hands its error
        # back to the parent, which would otherwise call __init__ with the message alone and
        # turn the user's one-line error into a BrokenProcessPool traceback.
        return (type(self), (self.field, self.problem, self.fix))


class WorkerDied(RuntimeError):
    """A worker process of a pool died (the kernel's out-of-memory killer, ``kill -9``): the pool is
    broken and its running tasks are lost. ``str(err)`` is one line; the CLI prints it and exits 1
    (a sweep and a plan keep what finished first and say how to resume)."""

    MESSAGE = "a worker process died (out of memory?): rerun with fewer --workers"

    def __init__(self, message: str = MESSAGE) -> None:
        super().__init__(message)
