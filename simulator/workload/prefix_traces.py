"""Traces that name their prompts' prefix blocks: Mooncake JSONL and the Weka agent sessions.

Such a trace gives each request, besides its token counts and arrival, the ids of its
prompt's blocks, where a block's id covers the block *and everything before it* (equal id,
equal prefix). The engine's prefix cache (:mod:`simulator.engine.prefix_cache`) maps them
onto its own block size. Both formats are read into a :class:`PrefixTrace`: per-request arrays
plus one hash array per request and the trace's block size.

Mooncake (FAST'25 release, ``conversation_trace.jsonl``, ``synthetic_trace.jsonl``)
    One JSON object per line: ``timestamp`` (ms from the first request), ``input_length``,
    ``output_length``, ``hash_ids`` (one per 512-token block, the last one partial). No
    sessions.

Weka Claude Code sessions (``kv-cache-tester`` ``traces/trace_NNNN.json``)
    One file per session: ``block_size`` (64), ``requests`` (``t`` s since the session start,
    ``in``, ``out``, ``hash_ids`` for the full 64-token blocks), sub-agent entries
    (``type: "subagent"``, ``t``, nested ``requests`` timed from the sub-agent start). Ids are
    local to a file (``hash_id_scope: "local"``, every published file), so they are renumbered
    into one space with the file's index (files of scope ``"global"`` share one id space); the
    session id is the file's index. A folder's ``*.json`` and ``*.json.gz`` files are read. Requests of a session are replayed
    at ``session start + t`` (open loop: the recorded times, which include the original
    server's response times); sessions start together unless ``session_gap_s`` staggers them.
    Read for a closed replay (``closed=True``; ``--session-replay closed``), each request also gets the request
    whose end releases it and its think time after that end (:func:`_replay_links`), from the files' ``think_time``
    and ``api_time``: ``t[k] = t[j] + api_time[j] + think_time[k]`` with ``j`` the agent's latest earlier request
    that records an ``api_time`` (an answer the client waited for; 48,436 of the 48,445 later turns of the 710
    published files within 1.5 s, their times being whole seconds).

A request recorded with 0 output tokens (in either format, and in a CSV or JSONL trace) is given 1
(the simulator produces at least one token); the table's ``source`` says how many.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from simulator.config.errors import ConfigError
from simulator.config.json_types import loads_once
from simulator.config.limits import MAX_ARRIVAL_S, MAX_TOKENS

if TYPE_CHECKING:
    from simulator.config.run_config import RunConfig

_FIELD = "workload.trace"
MOONCAKE_BLOCK_TOKENS = 512
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
# What reading a trace file raises when its bytes are bad, not its content: a file that cannot be opened (OSError;
# gzip.BadGzipFile, not gzipped), a truncated gzip (EOFError, which click would turn into a bare "Aborted!") and a
# corrupt one (zlib.error). Every trace reader answers them as one line.
READ_ERRORS: tuple[type[Exception], ...] = (OSError, EOFError, zlib.error)


@dataclass(frozen=True)
class PrefixTrace:
    """Requests with prefix block hashes, in arrival order (ties keep file order)."""

    arrival_s: np.ndarray  # float64, from 0
    num_prompt_tokens: np.ndarray  # int64 > 0
    num_output_tokens: np.ndarray  # int64 > 0
    block_hashes: tuple[np.ndarray, ...]  # int64 ids per request
    hash_block_size: int  # tokens per hashed block
    session_id: np.ndarray  # int64; -1 where the trace has no sessions
    fmt: str
    note: str = ""
    # A closed replay's links (read_weka_sessions(closed=True), else None): per request the row of the request
    # whose end releases it (-1: a first turn, sent at its arrival) and the think time after that end (NaN there).
    after: np.ndarray | None = None
    think_s: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)


def _open_lines(path: str):  # noqa: ANN202 - a text file object
    """A JSONL trace's text, gunzipped on the fly where the name ends in ``.gz``."""
    return gzip.open(path, "rt", encoding="utf-8-sig") if path.lower().endswith(".gz") else open(path, encoding="utf-8-sig")


def is_mooncake_jsonl(path: str) -> bool:
    """Whether the first non-blank line of a JSONL file (plain or gzipped) is an object with ``hash_ids``."""
    try:
        with _open_lines(path) as fh:
            for line in fh:
                if line.strip():
                    record = json.loads(line)
                    return isinstance(record, dict) and "hash_ids" in record and "input_length" in record
    except (*READ_ERRORS, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return False


def is_weka_session(path: str) -> bool:
    """A Weka session file, or a directory holding ``*.json`` session files."""
    p = Path(path)
    if p.is_dir():
        return any(f.is_file() and _is_session_name(f.name) for f in p.iterdir())
    if not _is_session_name(p.name):
        return False
    try:
        keys = _document_keys(str(p))
    except (*READ_ERRORS, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return keys is not None and ({"block_size", "requests"} <= keys or "hash_id_scope" in keys)


def _document_keys(path: str) -> set[str] | None:
    """The top-level keys of a file holding one JSON object, else None. Read from the parsed object, not from the
    text's head (a session whose long ``requests`` came before ``block_size`` was an unknown format); a JSONL file,
    a whole object on its first line and another line after it, is told after two lines, however long the file."""
    with _open_lines(path) as fh:
        first = fh.readline()
        while first and not first.strip():
            first = fh.readline()
        try:
            record = json.loads(first)
        except json.JSONDecodeError:  # an object spread over lines (pretty-printed): the one document, whole
            record = json.loads(first + fh.read())
        else:
            line = fh.readline()
            while line and not line.strip():
                line = fh.readline()
            if line:
                return None  # a line after a whole object: JSON lines
    return set(record) if isinstance(record, dict) else None


def _positive_int(value: object, what: str, path: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(_FIELD, f"{path}: {where}: {what} must be a positive integer, got {value!r}",
                          "fix or delete that request")
    if value > MAX_TOKENS:  # (past 2^63 the int64 arrays overflow)
        raise ConfigError(_FIELD, f"{path}: {where}: {what} {value:,} is beyond any model's context (at most "
                          f"{MAX_TOKENS:,})", "fix or delete that request")
    return value


def output_tokens(value: object, path: str, where: str, what: str) -> tuple[int, bool]:
    """A request's recorded output length, and whether it was 0 and given 1: a request the server answered
    with no token (recorded in Claude Code's and other logs) still costs its prefill, and the simulator
    produces at least one token, so it is kept rather than the whole trace refused (:func:`zero_output_note`)."""
    if type(value) is int and value == 0:  # (not False, which == 0 too; refused below as not an integer)
        return 1, True
    return _positive_int(value, what, path, where), False


def zero_output_note(count: int) -> str:
    """What a trace's source line adds for ``count`` rows recorded with 0 output tokens, given 1."""
    return f", {count} recorded with 0 output tokens given 1" if count else ""


def _hash_ids(value: object, path: str, where: str) -> list[int]:
    """A request's block hash ids: a list of non-negative integers that fit int64."""
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < 1 << 63
                                              for i in value):
        raise ConfigError(_FIELD, f"{path}: {where}: hash_ids must be a list of non-negative 64-bit integers",
                          "fix that request")
    return value


def _check_chain(ids: list[int], positions: dict[int, int], path: str, where: str) -> None:
    """A request's block ids as a prefix chain: each block's hash covers every token before it, so an id names one
    block position, the same in every request (``positions``: id -> position so far, updated), and never repeats
    in one request. A trace that breaks this (hand-edited, or hashing blocks alone) would count hits no cache
    could have made."""
    for k, h in enumerate(ids):
        at = positions.setdefault(h, k)
        if at != k:
            why = "twice in it" if h in ids[:k] else f"at block {k} here, at block {at} in an earlier request"
            raise ConfigError(_FIELD, f"{path}: {where}: hash id {h} is {why}", "pass block hashes that chain each "
                              "block's prefix (Mooncake's and Weka's traces do)")


def _seconds(value: object, path: str, where: str) -> float:
    """A Weka request's ``t``: seconds >= 0 from its session's (or sub-agent's) start."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(_FIELD, f"{path}: {where}: t must be a number of seconds >= 0, got {value!r}",
                          "fix that request")
    return float(value)


def _required(req: dict, key: str, path: str, where: str) -> object:
    """A request's field that has no default (a missing ``t`` read as 0 sent the request at its session's start)."""
    if key not in req:
        raise ConfigError(_FIELD, f"{path}: {where}: no '{key}'", "give each request its time from the session's start")
    return req[key]


def _requests(value: object, path: str, where: str) -> list:
    if not isinstance(value, list):
        raise ConfigError(_FIELD, f"{path}: {where}: 'requests' must be a list, got {type(value).__name__}",
                          "pass Weka trace files")
    return value


def read_mooncake(path: str, block_tokens: int = MOONCAKE_BLOCK_TOKENS) -> PrefixTrace:
    """A Mooncake trace: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""
    arrival, prompt, output, hashes = [], [], [], []
    num_zero_out = 0
    positions: dict[int, int] = {}
    dense: dict[int, int] = {}  # raw hash id -> its number in this trace
    try:
        with _open_lines(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    rec = loads_once(line, f"{path}: line {lineno}")
                except json.JSONDecodeError as err:
                    raise ConfigError(_FIELD, f"{path}: line {lineno} is not valid JSON ({err.msg})",
                                      "one JSON object per line") from None
                where = f"line {lineno}"
                if not isinstance(rec, dict):
                    raise ConfigError(_FIELD, f"{path}: {where} is not a JSON object", "one JSON object per line")
                for key in MOONCAKE_KEYS:
                    if key not in rec:
                        raise ConfigError(_FIELD, f"{path}: {where} lacks key {key!r}",
                                          "Mooncake lines have timestamp, input_length, output_length, hash_ids")
                if len(rec) > len(MOONCAKE_KEYS):  # (a session_id here would be read as no session)
                    extra = next(k for k in rec if k not in MOONCAKE_KEYS)
                    raise ConfigError(_FIELD, f"{path}: {where}: key {extra!r} is not read from a Mooncake line",
                                      "Mooncake lines have timestamp, input_length, output_length, hash_ids only")
                n_in = _positive_int(rec["input_length"], "input_length", path, where)
                n_out, zero = output_tokens(rec["output_length"], path, where, "output_length")
                num_zero_out += zero
                ids = _hash_ids(rec["hash_ids"], path, where)
                if len(ids) > -(-n_in // block_tokens):
                    raise ConfigError(_FIELD, f"{path}: {where}: {len(ids)} hash ids for {n_in} tokens "
                                      f"(at most {-(-n_in // block_tokens)} blocks of {block_tokens})",
                                      "check the trace's block size")
                _check_chain(ids, positions, path, where)
                t = rec["timestamp"]
                if isinstance(t, bool) or not isinstance(t, int | float) or not np.isfinite(t) or t < 0:
                    raise ConfigError(_FIELD, f"{path}: {where}: timestamp must be a number >= 0 (ms), got {t!r}",
                                      "fix that line")
                if arrival and t < arrival[-1]:
                    raise ConfigError(_FIELD, f"{path}: {where}: timestamp {t} is earlier than the line before",
                                      "sort the trace by timestamp")
                arrival.append(float(t))
                prompt.append(n_in)
                output.append(n_out)
                # Renumbered densely in order of first use (a bijection, so every shared prefix stays shared):
                # the engine names a block id * hash_block_size + offset, which for raw ids near 2**63
                # wrapped in int64 and made two unrelated blocks one.
                hashes.append(np.fromiter((dense.setdefault(h, len(dense)) for h in ids), dtype=np.int64, count=len(ids)))
    except UnicodeDecodeError:
        raise ConfigError(_FIELD, f"{path}: not UTF-8 text", "pass a JSONL text file") from None
    except READ_ERRORS as err:
        raise ConfigError(_FIELD, f"{path}: cannot read ({err or type(err).__name__})", "check the file") from None
    if not arrival:
        raise ConfigError(_FIELD, f"{path}: no requests", "pass a Mooncake JSONL trace")
    at = np.asarray(arrival) / 1000.0
    return PrefixTrace(at - at[0], np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64),
                       tuple(hashes), block_tokens, np.full(len(at), -1, dtype=np.int64), "mooncake",
                       zero_output_note(num_zero_out))


def _is_session_name(name: str) -> bool:
    return name.lower().endswith((".json", ".json.gz"))


def _session_files(path: str) -> list[Path]:
    """A session file, or a folder's ``*.json`` and ``*.json.gz`` files (any case) in name order."""
    p = Path(path)
    files = sorted(f for f in p.iterdir() if f.is_file() and _is_session_name(f.name)) if p.is_dir() else [p]
    if not files:
        raise ConfigError(_FIELD, f"{path}: no *.json session files", "pass a Weka session file or their folder")
    return files


def _session_text(file: Path) -> str:
    with _open_lines(str(file)) as fh:
        return fh.read()


def _optional_seconds(req: dict, key: str, path: str, where: str) -> float | None:
    """A request's ``api_time`` or ``think_time``: seconds >= 0, or None where the file records none (old traces)."""
    value = req.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(_FIELD, f"{path}: {where}: {key} must be a number of seconds >= 0, got {value!r}",
                          "fix that request, or replay the sessions at their recorded times (--session-replay open)")
    if value > MAX_ARRIVAL_S:  # (a closed replay sent the next turn 1e300 s on: its times lost their precision)
        raise ConfigError(_FIELD, f"{path}: {where}: {key} {value:.3g} s is past {MAX_ARRIVAL_S:g} s (~31 years)",
                          "fix that request, or replay the sessions at their recorded times (--session-replay open)")
    return float(value)


def _replay_links(entries: list[tuple[float, dict, str, int]], path: str) -> list[tuple[int, float]]:
    """A closed replay of one session file (``entries`` in time order: ``(t, request, where, agent)``, agent 0 the
    main one): per entry, the entry whose end releases it and the think time after that end, or ``(-1, NaN)`` for
    the first request, sent at its recorded time.

    A later request of an agent waits for that agent's latest earlier request that records an ``api_time`` (the
    client waited for its answer; a request without one, a side call, releases nothing, and several requests may
    wait for one: the trace's ``think_time`` counts from it), else for the one before it; then its ``think_time``,
    or where none is recorded the recorded gap, the earlier answer's ``api_time`` taken off where known. A
    sub-agent's first request waits for the main agent's request it followed (by that rule), then the recorded gap
    from that answer to the sub-agent's start (its own ``think_time``, 0, counts from the sub-agent's start); the
    main agent's next turn counts its ``think_time`` from its own last answer, which spans the sub-agents' work."""
    out: list[tuple[int, float]] = []
    times: list[float] = []
    apis: list[float | None] = []
    latest: dict[int, int] = {}  # agent -> its latest entry so far
    waited: dict[int, int] = {}  # agent -> its latest entry with an api_time
    for k, (t, req, where, agent) in enumerate(entries):
        api = _optional_seconds(req, "api_time", path, where)
        think = _optional_seconds(req, "think_time", path, where)
        if agent in latest:
            after = waited.get(agent, latest[agent])
        else:  # an agent's first request: a sub-agent's waits for the main agent's
            after = waited.get(0, latest.get(0, -1)) if agent else -1
            think = None
        if after < 0:
            out.append((-1, math.nan))
        else:
            gap = t - times[after] - (apis[after] or 0.0)  # the recorded gap after that answer
            out.append((after, think if think is not None else max(0.0, gap)))
        times.append(t)
        apis.append(api)
        latest[agent] = k
        if api is not None:
            waited[agent] = k
    return out


def read_weka_sessions(path: str, session_gap_s: float = 0.0, closed: bool = False) -> PrefixTrace:
    """Weka agent sessions (one file, or a folder of ``*.json``): every request of every
    session (sub-agents flattened), ids renumbered per file, sorted by arrival (stable:
    session order, then the file's order). ``closed``: with each request's release for a closed replay
    (:func:`_replay_links`; ``PrefixTrace.after`` and ``think_s``)."""
    rows: list[tuple[float, int, int, int, np.ndarray, int]] = []  # (t, session, in, out, ids, order)
    links: list[tuple[int, float]] = []  # a closed replay's, by order: (the order of the row releasing it, think)
    block_size: int | None = None
    num_zero_out = 0
    next_id = 0
    shared_ids: dict[int, int] = {}  # files of hash_id_scope 'global': their ids -> the run's
    shared_positions: dict[int, int] = {}
    for session, file in enumerate(_session_files(path)):
        try:
            data = loads_once(_session_text(file), str(file))
        except (*READ_ERRORS, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ConfigError(_FIELD, f"{file}: not a readable JSON session ({err})", "pass Weka trace files") from None
        if not isinstance(data, dict) or "requests" not in data or "block_size" not in data:
            raise ConfigError(_FIELD, f"{file}: lacks 'requests' or 'block_size'", "pass Weka trace files")
        bs = _positive_int(data["block_size"], "block_size", str(file), "top level")
        if block_size is None:
            block_size = bs
        elif bs != block_size:
            raise ConfigError(_FIELD, f"{file}: block_size {bs} differs from {block_size} of earlier files",
                              "replay files of one block size together")
        scope = data.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            raise ConfigError(_FIELD, f"{file}: hash_id_scope is {scope!r}", "use 'local' (ids comparable within "
                              "one file, as in every Weka trace) or 'global' (across the files)")
        if scope == "local":  # this file's ids -> the run's, and -> their block position
            local: dict[int, int] = {}
            positions: dict[int, int] = {}
        else:  # one id space over the files: ids are kept as they are
            local, positions = shared_ids, shared_positions
        start = session * session_gap_s
        entries: list[tuple[float, dict, str, int]] = []  # (t, request, where, agent: 0 main, i + 1 request i's)
        for i, req in enumerate(_requests(data["requests"], str(file), "top level")):
            if not isinstance(req, dict):
                raise ConfigError(_FIELD, f"{file}: request {i} is not an object", "pass Weka trace files")
            if req.get("type") == "subagent":
                own = [k for k in ("in", "out", "hash_ids") if k in req]
                if own:  # (a marker: its requests are nested; a count of its own would be dropped)
                    raise ConfigError(_FIELD, f"{file}: request {i}: a subagent entry with its own {own[0]!r}",
                                      "put the sub-agent's requests in its 'requests' list")
                base = _seconds(_required(req, "t", str(file), f"request {i}"), str(file), f"request {i}")
                for j, sub in enumerate(_requests(req.get("requests", []), str(file), f"request {i}")):
                    if not isinstance(sub, dict):
                        raise ConfigError(_FIELD, f"{file}: request {i}.{j} is not an object", "pass Weka trace files")
                    entries.append((base + _seconds(_required(sub, "t", str(file), f"request {i}.{j}"), str(file),
                                                    f"request {i}.{j}"), sub, f"request {i}.{j}", i + 1))
            else:
                entries.append((_seconds(_required(req, "t", str(file), f"request {i}"), str(file), f"request {i}"),
                                req, f"request {i}", 0))
        entries.sort(key=lambda e: e[0])  # stable: ties keep the file's order
        if closed:
            first = len(rows)  # the file's entries become rows first, first + 1, ... (their order)
            links.extend((first + a if a >= 0 else -1, think) for a, think in _replay_links(entries, str(file)))
        for t, req, where, _ in entries:
            n_in = _positive_int(req.get("in"), "in", str(file), where)
            n_out, zero = output_tokens(req.get("out"), str(file), where, "out")
            num_zero_out += zero
            raw = _hash_ids(req.get("hash_ids", []), str(file), where)
            if len(raw) > -(-n_in // bs):
                raise ConfigError(_FIELD, f"{file}: {where}: {len(raw)} hash ids for {n_in} tokens", "check block_size")
            _check_chain(raw, positions, str(file), where)
            ids = np.empty(len(raw), dtype=np.int64)
            for k, h in enumerate(raw):
                g = local.get(h)
                if g is None:
                    g = local[h] = next_id
                    next_id += 1
                ids[k] = g
            rows.append((start + t, session, n_in, n_out, ids, len(rows)))
    assert block_size is not None
    if not rows:
        raise ConfigError(_FIELD, f"{path}: no requests in its session file(s)",
                          "pass Weka session files that record requests")
    rows.sort(key=lambda r: (r[0], r[1], r[5]))
    at = np.array([r[0] for r in rows], dtype=np.float64)
    note = zero_output_note(num_zero_out)
    after = think_s = None
    if closed:  # the links by order, to rows in arrival order (a request's release sorts before it: earlier t, or
        row_of = np.empty(len(rows), dtype=np.int64)  # the same t and an earlier order)
        row_of[[r[5] for r in rows]] = np.arange(len(rows))
        after = np.array([row_of[links[r[5]][0]] if links[r[5]][0] >= 0 else -1 for r in rows], dtype=np.int64)
        think_s = np.array([links[r[5]][1] for r in rows], dtype=np.float64)
        assert np.all(after < np.arange(len(rows)))
    return PrefixTrace(at - at[0], np.array([r[2] for r in rows], dtype=np.int64),
                       np.array([r[3] for r in rows], dtype=np.int64), tuple(r[4] for r in rows), block_size,
                       np.array([r[1] for r in rows], dtype=np.int64), "weka-sessions", note, after, think_s)


def prefix_trace_format(path: str) -> str | None:
    """Which of these formats the trace at ``path`` is (``"weka-sessions"``, ``"mooncake"``), from its name
    and first line (a session file's: its top-level keys), or None (a trace without block hashes: CSV, plain
    JSONL). Only Weka sessions name sessions (Mooncake's ``session_id`` is -1 throughout)."""
    if (Path(path).is_dir() or _is_session_name(path)) and is_weka_session(path):
        return "weka-sessions"
    if path.lower().removesuffix(".gz").endswith((".jsonl", ".ndjson", ".json")) and is_mooncake_jsonl(path):
        return "mooncake"
    return None


def check_router(config: RunConfig) -> None:
    """Refuse ``config.router`` where the run's workload gives it nothing to route by (no block hashes for
    ``prefix_aware``, no sessions for ``session``: :func:`simulator.config.options.router_unread`), read from what the
    config's trace holds (its first line). A one-line error, as ``--router`` given there gets from the options
    (``check_given``), whether the router came from a flag, a ``--config`` file or a sweep point: each ran silently
    as least outstanding. A trace that is not there, or a folder of no session files, is left to be refused where
    it is read, with its own reason."""
    from simulator.config.options import router_unread

    w = config.workload
    fmt = None
    if w.trace is not None:
        if not Path(w.trace).exists():
            return
        fmt = prefix_trace_format(w.trace)
        if fmt is None and Path(w.trace).is_dir():
            return
    source = f"--trace {w.trace}" if w.trace is not None else f"the {w.name} workload"
    unread = router_unread(config, hashes=fmt is not None, sessions=fmt == "weka-sessions", source=source)
    if unread is not None:
        why, fix = unread
        raise ConfigError("--router", f"{why}, so --router would do nothing", fix.replace("{flag}", "--router"))


def read_prefix_trace(path: str, closed: bool = False) -> PrefixTrace | None:
    """The trace at ``path`` if it is one of these formats, else None; ``closed``: Weka sessions with their closed
    replay's links (:func:`read_weka_sessions`)."""
    fmt = prefix_trace_format(path)
    if fmt == "weka-sessions":
        return read_weka_sessions(path, closed=closed)
    return read_mooncake(path) if fmt == "mooncake" else None


# -- reference hit rates (the data README's rules; tests and reports) -------------------------
def ideal_hit_blocks(block_hashes: tuple[np.ndarray, ...] | list) -> np.ndarray:
    """Per request, the longest prefix of its ids that is a prefix of some earlier request's
    ids (an unbounded cache, requests one at a time in order). Ids are prefix hashes, so a
    block is seen before iff its id is."""
    seen: set[int] = set()
    out = np.zeros(len(block_hashes), dtype=np.int64)
    for i, ids in enumerate(block_hashes):
        ids = ids.tolist() if isinstance(ids, np.ndarray) else ids
        k = 0
        for h in ids:
            if h not in seen:
                break
            k += 1
        out[i] = k
        seen.update(ids)
    return out


def continued_hashes(block_hashes: Sequence[np.ndarray], session_id: np.ndarray, num_prompt_tokens: np.ndarray,
                     num_output_tokens: np.ndarray, hash_block_size: int) -> list[tuple[np.ndarray, int]]:
    """Per request (table order): its block hash ids and the tokens they name, carried on over its answer where the
    session's next request resends this one's prompt and answer (its ids agree on the prompt's full blocks and its
    prompt is at least this one's prompt plus output): that request's ids for every full block up to this one's
    prompt plus output. A prefix cache then names this request's answer blocks (and a prompt tail its own ids left
    unhashed) as the next turn will look them up, as vLLM and SGLang cache a request's output blocks too. A request
    without a session, the last of its session, or one whose successor does not resend it (a sub-agent's branch, a
    rewritten history) keeps its ids and names its prompt only (tokens 0)."""
    n = len(block_hashes)
    out: list[tuple[np.ndarray, int]] = [(np.asarray(h), 0) for h in block_hashes]
    later: dict[int, int] = {}  # session -> its next request (walking backwards)
    sessions = np.asarray(session_id).tolist()
    for i in range(n - 1, -1, -1):
        s = sessions[i]
        if s < 0:
            continue
        j = later.get(s)
        later[s] = i
        if j is None:
            continue
        prompt, total = int(num_prompt_tokens[i]), int(num_prompt_tokens[i] + num_output_tokens[i])
        mine, nxt = np.asarray(block_hashes[i]), np.asarray(block_hashes[j])
        span = total // hash_block_size
        full = prompt // hash_block_size
        if span <= full or int(num_prompt_tokens[j]) < total or len(nxt) < span:
            continue  # the answer completes no block past the prompt's, or the next request does not resend it
        if not np.array_equal(nxt[:full], mine[:full]):
            continue
        out[i] = (nxt[:span], span * hash_block_size)
    return out
