"""Checking the paths a command reads and writes before it works, and writing outputs whole.

Every command that reads a file or writes one calls these checks first, so a wrong path
costs one line and exit code 2 (a :class:`~simulator.config.errors.ConfigError`) before
any simulation, never a traceback after it:

- :func:`check_out_dir`: an output folder is new, empty, or (``replaceable``) holds only
  what an earlier run of the same command wrote; never a file, never under a file, and
  its nearest existing folder is writable. Nothing is created by the check.
- :func:`check_out_file`: an output file is new or a regular file (never a folder, device, FIFO or socket)
  and its folder can be written; a symbolic link is followed, its target checked and written.
- neither is inside the shared data folder (:data:`~simulator.config.shared_data.SHARED_DATA`), read only.
- :func:`check_in_file` / :func:`check_in_dir`: an input exists and is of the right kind.

Outputs are then written whole or not at all: :func:`atomic_dir` and :func:`atomic_file`
hand out a temporary path beside the target and rename it into place only when writing
ended normally. Any exception (Ctrl-C's ``KeyboardInterrupt`` included) removes the
temporary path and any folder the writer created on the way, so the target is as it was.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from simulator.config.errors import ConfigError
from simulator.config.shared_data import SHARED_DATA

TMP_PREFIX = ".servesim-tmp-"


def _nearest_existing(path: Path, field: str, what: str) -> Path:
    """The nearest existing ancestor of ``path``; a file there means ``path`` cannot be made."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(field, f"{path} is under {parent}, which is a file", f"pass a {what} path")
            return parent
    return Path("/")  # unreachable: the root exists


def _check_writable(folder: Path, path: Path, field: str, what: str) -> None:
    """Write and remove a probe file in ``folder`` (a pseudo-filesystem such as ``/proc``
    passes ``os.access`` but refuses files)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(field, f"cannot write {path} ({exc.strerror or exc})",
                          f"pass a {what} path you can write to") from None


def _refuse_shared_data(path: Path, field: str) -> None:
    """The public data is read, never written (provenance: its READMEs describe what is there)."""
    with contextlib.suppress(OSError, RuntimeError):  # (a loop of links: RuntimeError before Python 3.13)
        if path.resolve().is_relative_to(SHARED_DATA.resolve()):
            raise ConfigError(field, f"{path} is inside the shared data folder {SHARED_DATA}, which servesim reads "
                              "and never writes", "pass an output path outside it")


def check_out_dir(path: Path | str, field: str = "--out", replaceable: Iterable[str] = (),
                  existing_ok: bool = False) -> Path:
    """Refuse an output folder that cannot be written whole, before any work.

    The folder may be new or empty; it may also hold files matching the ``replaceable``
    glob patterns (what an earlier run of the same command wrote: it is replaced as a
    whole), or anything (``existing_ok``: figures added beside an input, a resumable
    sweep). Creates nothing.
    """
    path = Path(path)
    _refuse_shared_data(path, field)
    if path.exists() and not path.is_dir():
        raise ConfigError(field, f"{path} exists and is a file", "pass a folder path")
    if path.is_dir():
        if not existing_ok:
            patterns = tuple(replaceable)
            others = sorted(p.name for p in path.iterdir()
                            if not any(fnmatch.fnmatch(p.name, pat) for pat in patterns))
            if others:
                shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
                raise ConfigError(field, f"{path} already holds other files ({shown})",
                                  "pass a new or empty folder")
        _check_writable(path, path, field, "folder")
        _check_writable(_nearest_existing(path, field, "folder"), path, field, "folder")
    else:
        _check_writable(_nearest_existing(path, field, "folder"), path, field, "folder")
    return path


# What a report writes beside its README.md (tables and figures): a folder holding only these is a report's.
REPORT_SUFFIXES = (".csv", ".png", ".svg")


def check_report_dir(path: Path | str, title: str, field: str = "--out") -> Path:
    """An output folder a report regenerates in place (:func:`check_out_dir` with ``existing_ok``), refused where
    its ``README.md`` is another's: one whose first line is not ``title`` would be overwritten (``validate --out``
    a project folder replaced its README)."""
    path = check_out_dir(path, field, existing_ok=True)
    readme = path / "README.md"
    # (a run's folder took the report's files among its own; an audit): a report's folder is new, or its own, or
    # what an interrupted report left (its tables and figures: README.md is written last); hidden files are no one's
    foreign = sorted(f.name for f in path.iterdir() if not f.name.startswith(".")
                     and not (f.is_file() and f.suffix in REPORT_SUFFIXES)) if path.is_dir() else []
    if not readme.is_file() and foreign:
        held = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise ConfigError(field, f"{path} holds other files ({held}) and no README of this report, which would be "
                          "written among them", "pass a new folder, or the report's own")
    if readme.is_file():
        with readme.open(encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
        if first != title:
            raise ConfigError(field, f"{readme} is not this report's (its first line is {first[:60]!r}, not {title!r}), "
                              "and the report would overwrite it", "pass a new folder, or the report's own")
    return path


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def out_file_target(path: Path | str, field: str = "--out") -> Path:
    """The file an output path writes: the path itself, or a symbolic link's final target, which is written in
    its place (replacing the link with a plain file would cut the user's link from the fresh output, e.g. a
    ``latest.json`` pointing into a dated folder). Refuse a target that exists and is not a regular file:
    outputs are renamed into place, which would replace a device, FIFO or socket (``/dev/null``) with a file."""
    path = Path(path)
    target = path
    if path.is_symlink():
        try:
            target = path.resolve(strict=False)
        except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13)
            raise ConfigError(field, f"{path} is a symbolic link that loops", "pass a file path") from None
    try:
        mode = target.stat().st_mode
    except FileNotFoundError:
        return target  # new (or a dangling link's target, written there)
    except OSError as exc:
        raise ConfigError(field, f"cannot reach {path} ({exc.strerror or exc})", "pass a file path") from None
    if not stat.S_ISREG(mode):
        shown = f"{path} (a link to {target})" if target != path else str(path)
        fix = "pass a file path, e.g. " + str(target / "out.json") if stat.S_ISDIR(mode) else "pass a regular file path"
        raise ConfigError(field, f"{shown} is {_kind(mode)}", fix)
    return target


def check_out_file(path: Path | str, field: str = "--out") -> Path:
    """Refuse an output file path that is not a regular file (a folder, device, FIFO, socket: followed through a
    symbolic link) or cannot be written, before any work. Returns the path given."""
    path = Path(path)
    _refuse_shared_data(path, field)
    target = out_file_target(path, field)
    _check_writable(_nearest_existing(target, field, "file"), path, field, "file")
    return path


def check_in_file(path: Path | str, field: str, hint: str = "") -> Path:
    """Refuse an input file that is missing or a folder."""
    path = Path(path)
    if path.is_dir():
        inside = [p.name for p in sorted(path.iterdir())[:3]] if os.access(path, os.R_OK) else []
        raise ConfigError(field, f"{path} is a folder, not a file",
                          hint or (f"pass a file inside it ({', '.join(inside)})" if inside else "pass a file"))
    if not path.exists():
        raise ConfigError(field, f"{path} does not exist", hint or "pass an existing file")
    return path


def check_in_dir(path: Path | str, field: str, hint: str = "") -> Path:
    """Refuse an input folder that is missing or a file."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ConfigError(field, f"{path} is a file, not a folder", hint or "pass a folder")
    if not path.exists():
        raise ConfigError(field, f"{path} does not exist", hint or "pass an existing folder")
    return path


def check_profile_table(path: Path | str, field: str = "--profile") -> Path:
    """The table of a profile argument: a ``simulate profile`` folder (its ``profile.csv``, the profiler's
    ``TABLE_FILE``, named here because util sits below the profiler) or a table file."""
    path = Path(path)
    if path.is_dir():
        if not (path / "profile.csv").is_file():
            raise ConfigError(field, f"{path} holds no profile.csv", "pass a `simulate profile` folder or a profile table")
        return path / "profile.csv"
    return check_in_file(path, field, "pass a `simulate profile` folder or a profile table")


def check_profile_tables(paths: list[Path] | list[str], field: str = "--profile") -> list[Path]:
    """:func:`check_profile_table` of each, and no table twice (a folder and its profile.csv are one):
    a table given twice would count its rows twice, and put copies of training rows in the hold-out."""
    tables = [check_profile_table(path, field) for path in paths]
    seen: dict[Path, Path] = {}
    for given, table in zip(paths, tables, strict=True):
        key = table.resolve()
        if key in seen:
            raise ConfigError(field, f"{given} given more than once: it is the table {seen[key]} already gave ({table})",
                              "pass each profile once")
        seen[key] = Path(given)
    return tables


def _made_parents(path: Path) -> list[Path]:
    """Create ``path``'s missing parent folders; return those created, deepest first."""
    missing = [p for p in path.absolute().parents if not p.exists()]
    path.parent.mkdir(parents=True, exist_ok=True)
    return missing  # parents() runs deepest first


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first
        with contextlib.suppress(OSError):
            folder.rmdir()


@contextlib.contextmanager
def atomic_dir(target: Path | str) -> Iterator[Path]:
    """Yield a temporary folder beside ``target``; rename it to ``target`` when the block ends
    normally (an existing ``target``, which :func:`check_out_dir` allowed, is replaced as a
    whole). On any exception the temporary folder and the parents made for it are removed
    and ``target`` is untouched."""
    target = Path(target)
    made = _made_parents(target)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + target.name + "-", dir=target.parent))
    tmp.chmod(0o777 & ~_umask())  # as a plain mkdir would make it (mkdtemp's is private)
    try:
        yield tmp
        if target.is_dir():
            old = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + target.name + "-old-", dir=target.parent))
            os.rename(target, old / "d")  # aside, then the new one in place, then the old one gone
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(old / "d", target)  # the earlier output back where it was
                os.rmdir(old)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(made)
        raise


@contextlib.contextmanager
def atomic_update(target: Path | str) -> Iterator[Path]:
    """:func:`atomic_dir` for a folder regenerated in place, which may hold other files (a report folder beside
    the scripts of another): yield a temporary folder beside ``target``; when the block ends normally, move each
    file written there onto ``target``'s of the same path, the rest of ``target`` staying, with Ctrl-C and
    SIGTERM ignored for those few renames. On any exception the temporary folder and the parents made for it
    are removed and ``target`` is untouched."""
    from simulator.util.interrupts import signals_ignored

    target = Path(target)
    made = _made_parents(target)
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX + target.name + "-", dir=target.parent))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_empty(made)
        raise
    with signals_ignored():
        try:
            target.mkdir(exist_ok=True)
            for path in sorted(tmp.rglob("*")):  # a folder before what it holds
                dest = target / path.relative_to(tmp)
                if path.is_dir():
                    dest.mkdir(exist_ok=True)
                else:
                    os.replace(path, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def atomic_file(target: Path | str, field: str = "--out") -> Iterator[Path]:
    """Yield a temporary file path beside ``target`` (same suffix, so writers that go by it
    still do); ``os.replace`` it onto ``target`` when the block ends normally, remove it
    (and the parents made for it) on any exception. A symbolic link's target is written, and
    one that is not a regular file refused (:func:`out_file_target`; :func:`check_out_file`
    said so before any work)."""
    target = out_file_target(target, field)
    made = _made_parents(target)
    fd, name = tempfile.mkstemp(prefix=TMP_PREFIX + target.stem + "-", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        tmp.chmod(0o666 & ~_umask())  # as a plain open() would make it (mkstemp's is private)
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        _remove_empty(made)
        raise
