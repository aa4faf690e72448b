"""The files a run reads, fingerprinted: a result belongs to its inputs only while they are the same files.

A config names its trace, a model's or GPU's file, a fitted cost model or engine and a draft's config by path.
The path alone does not say what was read: a trace edited in place ran other requests under the same name, so a
sweep resumed its stored points beside new ones measured on the new file, and ``run --config`` reproduced another
run without a word. :func:`fingerprints` hashes each file's content (a folder: its files' names and contents, a
large non-text file by its size only), which :meth:`RunConfig.result_key` takes into a search's resume key and
``config.json`` records (:data:`INPUTS_KEY`) for :func:`changed_inputs` to compare on a reproduction.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

INPUTS_KEY = "inputs"  # config.json's record of the files the run read: {role: {"path": ..., "sha256": ...}}
_CONTENT_SUFFIXES = (".json", ".jsonl", ".csv", ".gz", ".parquet", ".txt", ".yaml", ".yml", ".toml", ".tsv")
_CONTENT_MAX_BYTES = 256 * 2**20  # a folder's other files (weights) count by name and size


# The fields that name a model's folder, of which the simulator reads the config.json alone (a checkpoint's weights,
# a README beside it, are not its input)
_MODEL_ROLES = ("replica.model", "speculative.draft_model")


def named_paths(config: Any) -> dict[str, str]:  # noqa: ANN401 - a RunConfig (imported lazily by its module)
    """What ``config``'s file fields name, path-like or not, by role (``workload.trace``, ``replica.model``,
    ``replica.gpu``, ``cost_model``, ``engine``, ``speculative.draft_model``)."""
    spec = getattr(config, "speculative", None)
    named = {"workload.trace": config.workload.trace, "replica.model": config.replica.model,
             "replica.gpu": config.replica.gpu, "cost_model": config.cost_model, "engine": config.engine,
             "speculative.draft_model": getattr(spec, "draft_model", None) if spec is not None else None}
    for pool in ("prefill_pool", "decode_pool", "mixed_pool"):  # (a pool's gpu= may name a GPU's file too)
        text = getattr(config, pool, None)
        if text:
            from simulator.config.disagg_layout import parse_pool

            named[f"{pool}.gpu"] = parse_pool(text, pool).gpu
    return {role: value for role, value in named.items() if isinstance(value, str)}


def input_files(config: Any) -> dict[str, Path]:  # noqa: ANN401
    """The files ``config`` reads, by role (:func:`named_paths`): those that name an existing file or folder; a
    model's folder by its config.json."""
    from simulator.config.hf_config import is_path_like

    out = {}
    for role, value in named_paths(config).items():
        if not (is_path_like(value) and Path(value).exists()):
            continue
        path = Path(value).resolve()
        if role in _MODEL_ROLES and path.is_dir():
            path = path / "config.json"  # (what hf_config reads of it)
            if not path.is_file():
                continue
        out[role] = path
    return out


def _hash_file(path: Path, h: Any) -> None:  # noqa: ANN401 - a hashlib object
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:  # (mtime and size: a file rewritten is read again)
    h = hashlib.sha256()
    _hash_file(Path(path), h)
    return h.hexdigest()


def digest(path: Path) -> str:
    """sha256 (hex) of a file's bytes; of a folder, its files' relative names and contents in name order (a file over
    256 MiB or of another kind than tables and configs, a checkpoint's weights, by name and size)."""
    try:
        if path.is_file():
            st = path.stat()
            return _file_digest(str(path), st.st_mtime_ns, st.st_size)
        listing = []
        for p in sorted(q for q in path.rglob("*") if q.is_file() and q.suffix.lower() in _CONTENT_SUFFIXES):
            st = p.stat()  # (a folder's tables and configs: what a trace folder's reader reads, not its README)
            listing.append((p.relative_to(path).as_posix(), st.st_size, st.st_mtime_ns))
        return _folder_digest(str(path), tuple(listing))
    except OSError as exc:  # (unreadable: the run's reader says so where it reads it; the key cannot hold it)
        return f"unreadable: {exc.strerror or exc}"


@functools.lru_cache(maxsize=64)
def _folder_digest(path: str, listing: tuple[tuple[str, int, int], ...]) -> str:  # (a plan keys every layout)
    h = hashlib.sha256()
    for name, size, mtime_ns in listing:
        h.update(f"{name}\0{size}\0".encode())
        if size <= _CONTENT_MAX_BYTES:
            h.update(_file_digest(str(Path(path) / name), mtime_ns, size).encode())
    return h.hexdigest()


def fingerprints(config: Any) -> dict[str, str]:  # noqa: ANN401
    """:func:`digest` of each of :func:`input_files`, by role ({} for a run that reads no file)."""
    return {role: digest(path) for role, path in input_files(config).items()}


def inputs_record(config: Any) -> dict[str, dict[str, str]]:  # noqa: ANN401
    """config.json's :data:`INPUTS_KEY` section: each file's path and digest, by role."""
    return {role: {"path": str(path), "sha256": digest(path)} for role, path in input_files(config).items()}


def changed_inputs(config: Any, record: Any) -> list[str]:  # noqa: ANN401
    """One line per file that ``record`` (a config.json's :data:`INPUTS_KEY` section) names, that ``config`` still
    reads from the same path (a file given in its place on the command line is the user's choice), and that reads
    otherwise now (changed, or gone); [] where the record is absent or not an object (an older config.json)."""
    if not isinstance(record, dict):
        return []
    now = input_files(config)
    named = {role: str(Path(value).resolve()) for role, value in named_paths(config).items()}
    out = []
    for role, entry in record.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str) or not isinstance(entry.get("path"), str):
            continue
        path = now.get(role)
        if path is None:
            if named.get(role) in (entry["path"], str(Path(entry["path"]).parent)):  # (a model folder's config.json)
                out.append(f"{role} {entry['path']} is gone")
        elif str(path) == entry["path"] and (new := digest(path)) != entry["sha256"]:
            out.append(f"{role} {path} changed since the run (sha256 {entry['sha256'][:12]} -> {new[:12]})")
    return out
