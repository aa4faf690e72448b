"""Sweeps: a grid over run options, run point by point, resumable, as one tidy table.

A sweep is a *base* (run options every point shares), a *grid* (options and their lists of
values; the points are the cartesian product) and a *mode*:

- ``run``: simulate each point once and record its summary (latency quantiles, goodput, ...);
- ``capacity``: run a capacity search (:mod:`simulator.planning.capacity`) at each point and record
  the capacity, its spread over seeds and the trials.

Sweep file (TOML; YAML too when PyYAML is installed), keys are the ``simulate run`` option
names (``model``, ``tp``, ``scheduler``, ``chunk_size``, ``qps``, ``workload``, ...) plus the
point options of :data:`POINT_OPTIONS` (``tbt_slo``, ``num_seeds``, ...)::

    mode = "capacity"
    [base]
    model = "mistral-7b"
    max_model_len = 8192
    [grid]
    scheduler = ["vllm", "orca", "sarathi"]
    "tbt_slo,chunk_size" = [[0.1, 512], [0.5, 2048]]   # comma-joined keys vary together

Every point is validated (unknown keys, wrong types, invalid values) before any point runs,
and the error names the key. Each finished point is written at once to
``OUT/points/<key>.json``, where ``key`` hashes the point's full resolved config and point
options, so a killed sweep rerun with the same file skips what is done and a point's
identity does not depend on how it was spelled. A point that fails records its error
(``status = "error"``) and the sweep goes on. ``OUT/results.csv`` is rewritten as each point
finishes (rows of points not run yet have ``status = "missing"``), so a running or stopped
sweep can be read and plotted.

Interruption: one SIGINT (Ctrl-C) or SIGTERM cancels the queued points, stops the workers
(local processes are terminated; Ray tasks are cancelled), keeps every finished point and
raises :class:`SweepInterrupted`; rerunning the same sweep resumes with the points left. A
worker process that dies (the out-of-memory killer) stops the sweep the same way.
Local workers ignore SIGINT themselves (a terminal sends Ctrl-C to the whole process
group): only the sweep's own process decides how to stop.

Backends: a local process pool (``workers``; 1 runs in-process) or a Ray cluster
(``ray_address``; ``"local"`` starts a local Ray instance). Points are pure functions of
their config, and the final table is ordered by grid position and holds no wall-clock
columns, so it is identical whatever the backend or the number of workers.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import math
import re
import time
import tomllib
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulator.config.errors import ConfigError, WorkerDied
from simulator.config.limits import MAX_SEEDS
from simulator.config.options import RUN_OPTIONS, alias_of, closes_the_loop, default_random_input_len
from simulator.config.resources import check_run_fits
from simulator.config.run_config import RunConfig
from simulator.planning.options import (
    CAPACITY_DEFAULT_NUM_REQUESTS,
    PLANNER_OPTIONS,
    SLO,
    SWEEP_KEYS,
    SearchSettings,
    connect_ray,
    refuse_unread_planner_options,
    slo_and_settings,
)
from simulator.report.output import FORMATS, check_format, write_table
from simulator.util.interrupts import WorkerPool, signals_blocked, signals_ignored, stop_on_signals
from simulator.util.jsonio import jsonable
from simulator.util.progress import StepProgress

if TYPE_CHECKING:  # pandas loads with the first table, not with a sweep's validation (a wrong flag answers at once)
    import pandas as pd

MODES = ("run", "capacity")
TOP_LEVEL_KEYS = ("mode", "base", "grid")

# Point options beyond the run options: the planner's options (simulator.planning.options), by their
# sweep-file key -> (type, default, modes it applies to, help).
POINT_OPTIONS: dict[str, tuple[type, Any, tuple[str, ...], str]] = {
    key: (PLANNER_OPTIONS[name].typ, PLANNER_OPTIONS[name].default, PLANNER_OPTIONS[name].sweep_modes,
          PLANNER_OPTIONS[name].help) for key, name in SWEEP_KEYS.items()}


@dataclass(frozen=True)
class Point:
    """One grid point: its position, the values that define it, and what it runs."""

    index: int
    params: dict[str, Any]  # base options given explicitly plus this point's grid values (and what its engine set)
    config: RunConfig
    options: dict[str, Any]  # point options (POINT_OPTIONS), defaults filled in
    key: str


@dataclass
class SweepSpec:
    mode: str
    base: dict[str, Any]
    grid: dict[tuple[str, ...], list[tuple[Any, ...]]]
    points: list[Point] = field(default_factory=list)

    @property
    def varied(self) -> list[str]:
        return [name for names in self.grid for name in names]


# ---------------------------------------------------------------------------------------------
# Parsing and validation (all before any point runs)


def _canonical(name: str) -> str:
    return alias_of(name.strip().replace("-", "_"))  # vLLM's spellings too (tensor_parallel_size = tp)


def _known(name: str) -> bool:
    return name in RUN_OPTIONS or name in POINT_OPTIONS


def _coerce(where: str, name: str, value: Any) -> Any:
    """``value`` as the option's type; strings (from the CLI) are parsed."""
    typ = RUN_OPTIONS[name][1] if name in RUN_OPTIONS else POINT_OPTIONS[name][0]
    bad = ConfigError(where, f"invalid value {value!r}: expected {'true/false' if typ is bool else typ.__name__}")
    if isinstance(value, str) and typ is not str:
        text = value.strip()
        if typ is bool:
            if text.lower() in ("true", "1", "yes"):
                return True
            if text.lower() in ("false", "0", "no"):
                return False
            raise bad
        try:
            value = int(text) if typ is int else float(text)
        except ValueError:
            raise bad from None
    if typ is bool:
        if not isinstance(value, bool):
            raise bad
        return value
    if isinstance(value, bool):
        raise bad
    if typ is float and isinstance(value, int | float):
        if not math.isfinite(value):
            raise bad
        return float(value)
    if typ is int and isinstance(value, int):
        return value
    if typ is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if typ is str and isinstance(value, str):
        return value
    raise bad


def load_sweep_file(path: Path) -> dict[str, Any]:
    """A sweep file's raw content (TOML, JSON, or YAML if PyYAML is installed), by its suffix in any case."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError("sweep", f"{path} is a folder, not a sweep file", "pass a sweep file (.toml, .json or .yaml)")
    if not path.is_file():
        raise ConfigError("sweep", f"{path} does not exist", "pass a sweep file (.toml, .json or .yaml)")
    try:
        text = path.read_text(encoding="utf-8-sig")  # (a byte-order mark is no part of the table)
    except UnicodeDecodeError as exc:  # a binary file, or another encoding (UTF-16's byte-order mark)
        raise ConfigError("sweep", f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                          "save the sweep file as UTF-8") from None
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise ConfigError("sweep", "YAML sweep files need PyYAML", "pip install pyyaml, or write TOML") from None
        class UniqueKeys(yaml.SafeLoader):  # TOML refuses a key given twice; PyYAML's last one won, unsaid
            pass

        def mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # ('<<: *base': its keys may be given again, and win)
                    continue
                key = loader.construct_object(key_node, deep=deep)
                if not isinstance(key, str):  # (a list is unhashable; a number, true or null no option's name)
                    raise ConfigError("sweep", f"{path}: line {key_node.start_mark.line + 1}: a key must be a name, "
                                      f"got a {type(key).__name__}", "write the sweep file's keys as names")
                if key in seen:
                    raise ConfigError("sweep", f"{path}: line {key_node.start_mark.line + 1}: key {key!r} is given "
                                      "twice in its table", "give each key once")
                seen.add(key)
            return loader.construct_mapping(node, deep)

        def number(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> Any:  # noqa: ANN401 - an int or a float
            # YAML 1.1 reads 010 as 8 (octal), 0x10 as 16, 0b11 as 3 and 1:30 as 90 (base 60): no number a sweep means
            text, is_int = node.value.replace("_", ""), node.tag.endswith(":int")
            if (re.fullmatch(r"[-+]?(0|[1-9][0-9]*)", text) is None) if is_int else (":" in text):
                raise ConfigError("sweep", f"{path}: line {node.start_mark.line + 1}: {node.value!r} is read by YAML "
                                  "1.1 as a binary, octal, hexadecimal or base-60 number", "write the number in decimal "
                                  f"(or quote {node.value!r} if it is text)")
            return (loader.construct_yaml_int if is_int else loader.construct_yaml_float)(node)

        UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
        UniqueKeys.add_constructor("tag:yaml.org,2002:int", number)
        UniqueKeys.add_constructor("tag:yaml.org,2002:float", number)
        try:
            data = yaml.load(text, Loader=UniqueKeys)  # noqa: S506 - a SafeLoader
        except yaml.YAMLError as exc:
            raise ConfigError("sweep", f"{path} is not valid YAML ({str(exc).splitlines()[0]})") from None
    elif path.suffix.lower() == ".json":  # (the same table as JSON: it was read as TOML and refused as such)
        from simulator.config.json_types import loads_once

        try:
            data = loads_once(text, str(path))
        except json.JSONDecodeError as exc:
            raise ConfigError("sweep", f"{path} is not valid JSON ({exc})") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("sweep", f"{path} is not valid TOML ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError("sweep", f"{path} must hold a table of keys")
    return data


def parse_cli_grid(items: Iterable[str]) -> dict[str, Any]:
    """``["scheduler=vllm,sarathi", "qps=0.5,1"]`` -> ``{"scheduler": ["vllm", "sarathi"], ...}``."""
    grid: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError("--grid", f"{item!r} is not NAME=V1,V2,...", "e.g. --grid scheduler=vllm,sarathi")
        name, values = item.split("=", 1)
        if name.strip() in grid:  # a second --grid for a name would silently replace the first
            raise ConfigError("--grid", f"{name.strip()} given twice", f"give its values once: --grid {name.strip()}=V1,V2,...")
        pieces = split_grid_values(values)
        if len(pieces) > 1 and any(v.strip() == "" for v in pieces):  # ("1,,2": a slip; a point would go missing)
            raise ConfigError("--grid", f"{item!r} has an empty value", f"e.g. --grid {name.strip()}=V1,V2")
        grid[name.strip()] = [v for v in pieces if v.strip() != ""]
    return grid


_TERM = re.compile(r"\s*[A-Za-z_]\w*=")


def split_grid_values(text: str) -> list[str]:
    """A ``--grid`` value list split at its commas, except the commas inside a value: within
    brackets or quotes (a pool spec ``2x(tp=2,pp=1)``, a JSON speculative config), and between an
    engine spec's terms (``vllm-2026:handoff_s=0.02,cpu_s=1e-3``: a piece ``name=value`` after a
    piece holding ``:`` continues it, since no grid value of its own has that form)."""
    pieces, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            pieces.append(text[start:i])
            start = i + 1
    pieces.append(text[start:])
    out: list[str] = []
    for piece in pieces:
        if out and ":" in out[-1] and _TERM.match(piece):
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


def build_spec(data: dict[str, Any], mode: str | None = None, base_overrides: dict[str, Any] | None = None,
               grid_overrides: dict[str, Any] | None = None, given_flags: Collection[str] | None = None,
               imply_engine: bool = True, vllm_warmups: bool = False) -> SweepSpec:
    """Validate a sweep (file content plus CLI overrides) and resolve all its points.

    ``given_flags``: the run options given as flags, where ``base_overrides`` holds more (a
    ``--config`` file's values, a base a grid may vary); None: every base override was given.
    A flag that a grid varies too, or that no point reads, is refused (it would do nothing).
    ``imply_engine``: a point naming an engine takes the scheduler and kernels its preset was fitted with where the
    point sets none (:func:`~simulator.costmodel.engine_model.implied_options`, as ``simulate run --engine``); off
    for a base from a ``--config`` file, which holds its own. ``vllm_warmups``: the warm-up was given in vLLM's
    spelling on the command line (``--num-warmups``); the sweep file's ``num_warmups`` says so itself. A closed-loop
    point then drains its warm-up first, as ``simulate run`` reads that spelling (config.options.resolve_aliases),
    unless a warm-up mode is given."""
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ConfigError(f"sweep.{key}", "unknown key", f"known: {', '.join(TOP_LEVEL_KEYS)}")
    mode = mode or data.get("mode", "run")
    if mode not in MODES:
        raise ConfigError("sweep.mode", f"unknown mode {mode!r}", f"use one of {', '.join(MODES)}")
    raw_base = data.get("base", {}) or {}
    raw_grid = data.get("grid", {}) or {}
    for section, raw in (("base", raw_base), ("grid", raw_grid)):
        if not isinstance(raw, dict):
            raise ConfigError(f"sweep.{section}", "must be a table of options")

    base: dict[str, Any] = {}
    spelled: dict[str, str] = {}  # the file's base key each option came from
    for key in raw_base:
        if (name := _canonical(key)) in spelled:  # (tp and tensor_parallel_size: the last one won, unsaid)
            raise ConfigError(f"sweep.base.{key}", f"{name} is given twice, also as {spelled[name]}",
                              "give it once")
        spelled[name] = key
    for key, value in [*raw_base.items(), *(base_overrides or {}).items()]:
        name = _canonical(key)
        _check_name(f"sweep.base.{key}", name, mode)
        base[name] = _coerce(f"sweep.base.{key}", name, value)
    # The run options given as flags (which a grid must not silently drop), and the file's own base keys.
    overridden = {_canonical(key) for key in base_overrides or {}}
    given = overridden if given_flags is None else {_canonical(name) for name in given_flags}
    file_keys = {_canonical(key): key for key in raw_base if _canonical(key) not in overridden | given}

    grid: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    entries = [(key, values, False) for key, values in raw_grid.items()]
    entries += [(key, values, True) for key, values in (grid_overrides or {}).items()]
    for key, values, from_cli in entries:
        names = tuple(_canonical(k) for k in key.split(","))
        where = f"sweep.grid.{key}"
        for name in names:
            _check_name(where, name, mode)
        if len(set(names)) < len(names):  # ("tp,tp": the last column would win, the first dropped)
            raise ConfigError(where, f"names {max(names, key=names.count)!r} twice", "name each option once")
        if "fast_forward" in names:  # (its points would be refused as one configuration, for the wrong reason)
            raise ConfigError(where, "fast_forward changes a run's speed, never its results, so its points would be "
                              "the same", "drop fast_forward from the grid (time runs with benchmarks/)")
        if not isinstance(values, list) or not values:
            raise ConfigError(where, "must be a non-empty list of values")
        rows = []
        for value in values:
            row = value if len(names) > 1 else [value]
            if not isinstance(row, list | tuple) or len(row) != len(names):
                raise ConfigError(where, f"each entry must list {len(names)} values ({', '.join(names)}), got {value!r}")
            rows.append(tuple(_coerce(where, n, v) for n, v in zip(names, row, strict=True)))
        for name in names:
            if name in given:  # the grid would win at every point: the flag would label rows it did not change
                flag = f"--{name.replace('_', '-')}"
                source = f"--grid {key}=..." if from_cli else f"the sweep file's grid ({key})"
                raise ConfigError(flag, f"{source} sets it too, and the grid wins at every point, so {flag} would "
                                  "do nothing", f"drop {flag}, or {name} from the grid")
            if name in file_keys and not from_cli:  # the file contradicts itself: its base value would never run
                # (a --grid on the command line may vary a file's base: the file is then a template)
                raise ConfigError(f"sweep.base.{file_keys[name]}", f"the grid ({key}) sets it too and wins at every "
                                  f"point, so the base's {file_keys[name]} = {raw_base[file_keys[name]]!r} would do "
                                  "nothing", f"drop {file_keys[name]} from [base], or from the grid")
            base.pop(name, None)  # the grid wins over a --config file's value
            for other in list(grid):
                if name in other:
                    raise ConfigError(where, f"{name!r} is already varied by {','.join(other)}")
        if mode == "capacity" and "qps" in names:  # (a capacity point searches the rate; qps is only where it starts)
            raise ConfigError(where, "a capacity point searches the rate itself: qps only sets its first trial, so "
                              "points differing in qps find the same capacity", "drop qps from the grid (give "
                              "--qps for where each search starts), or use mode = \"run\" to run each rate")
        grid[names] = rows
    if mode == "capacity" and "num_requests" not in base and not any("num_requests" in n for n in grid):
        base["num_requests"] = CAPACITY_DEFAULT_NUM_REQUESTS

    spec = SweepSpec(mode, base, grid)
    # vllm bench serve's --num-warmups is a phase of its own: a closed-loop point drains it, as `run` does
    # (a grid column spelled num_warmups too: its points drained nothing, unlike the run they stand for; an audit)
    grid_vllm_warmups = any(k.strip().replace("-", "_") == "num_warmups" for key, _, _ in entries for k in key.split(","))
    drain_warmups = ((vllm_warmups or spelled.get("num_warmup") == "num_warmups" or grid_vllm_warmups)
                     and "warmup_mode" not in base and not any("warmup_mode" in names for names in grid))
    seen: dict[str, tuple[int, str]] = {}
    base_only = frozenset(base) - frozenset(spec.varied)  # (a key unread there is blamed on the base)
    unread_by: dict[str, list[ConfigError]] = {}  # a capacity point's unread planner key (its flag): the points
    for index, combo in enumerate(itertools.product(*grid.values()) if grid else [()]):
        values = dict(base)
        for names, row in zip(grid, combo, strict=True):
            values.update(zip(names, row, strict=True))
        where = "sweep point " + (", ".join(f"{k}={v}" for k, v in values.items() if k in spec.varied) or str(index))
        if drain_warmups and values.get("num_warmup"):
            # as run's resolve_aliases: any concurrency (a closed loop, or an open one capped) drains vLLM's warm-up;
            # a users search's trials are closed loops from its concurrency (the search's first users where none)
            if mode == "run" and values.get("concurrency") is not None:
                values["warmup_mode"] = "drain"
            elif mode == "capacity" and values.get("users"):
                from simulator.planning.capacity import DEFAULT_FIRST_USERS

                values.setdefault("concurrency", min(DEFAULT_FIRST_USERS, values.get("max_users") or DEFAULT_FIRST_USERS))
                values["warmup_mode"] = "drain"
        if imply_engine and values.get("engine") is not None:
            from simulator.costmodel.engine_model import implied_options

            # (a flag typed at its default value is given, though the CLI's base leaves it out as a default)
            values.update({name: value for name, value in implied_options(values).items() if name not in given})
        try:
            config = _point_config(values, where, closed_loop=mode == "run")
        except ConfigError:
            # Blame the base where no grid value alone on it makes it valid, else a grid value that fails
            # alone on it, else the point; only a point that fails (never the base alone, whose defaults
            # a grid may replace: --scheduler-recv-interval beside scheduler = ["sglang"]) refuses the sweep.
            failing = []
            for grid_names, rows in grid.items():
                for row in rows:
                    try:
                        _point_config({**base, **dict(zip(grid_names, row, strict=True))},
                                      f"sweep.grid.{','.join(grid_names)}={','.join(map(str, row))}",
                                      closed_loop=mode == "run")
                    except ConfigError as err:
                        failing.append(err)
            if len(failing) == sum(len(rows) for rows in grid.values()):
                _point_config(base, "sweep.base", closed_loop=mode == "run")
            if failing:
                raise failing[0] from None
            raise
        options = _point_options(values, mode, where, unread_by, base_only)
        try:  # as simulate run refuses it: a point's requests must fit in memory (1e20 drew until numpy gave up)
            check_run_fits(config.workload.num_requests)
        except ConfigError as err:
            field = "sweep.base.num_requests" if "num_requests" in base and "num_requests" not in spec.varied else where
            raise ConfigError(field, err.problem, err.fix.replace("--num-requests", "num_requests")) from None
        if mode == "capacity":  # what no trial could search is refused here, not point by point after they run
            from simulator.planning.capacity import check_searchable, seed_unread

            # An SLO or search key a point's search would not read, as simulate capacity refuses it (under
            # criterion = "goodput", sched_delay_slo = [0.5, 1] gave two points of one capacity, differing in a
            # column): refused where no point given it reads it, as a run option no point reads
            planner = {SWEEP_KEYS[key]: value for key, value in options.items()}
            named = {SWEEP_KEYS[key] for key in values if key in POINT_OPTIONS}
            try:
                refuse_unread_planner_options(config, planner, named, qps_start=False)  # (below: a sweep's terms)
            except ConfigError as err:
                unread_by.setdefault(err.field, []).append(ConfigError(where, f"{err.field}: {err.problem}", err.fix))

            # Seeds where nothing in a point's trials is drawn at random (a closed loop of fixed lengths): as
            # simulate capacity refuses --seeds and --seed there, refused where no point given them reads them
            if (unread := seed_unread(config, bool(options["users"]))) is not None:
                if options["num_seeds"] > 1 or "num_seeds" in spec.varied:  # (a grid [1, 2]: two rows alike)
                    field, name = _blamed("num_seeds", where, base_only)
                    seeds = options["num_seeds"]
                    unread_by.setdefault("--seeds", []).append(ConfigError(
                        field, f"{name}{unread[0]}, so " + (f"each of the {seeds} seeds would search the very same "
                                                            "trials" if seeds > 1 else "num_seeds would do nothing"),
                        unread[1].replace("{flag}", "num_seeds")))
                if "seed" in values:
                    field, name = _blamed("seed", where, base_only, given)
                    unread_by.setdefault("--seed", []).append(ConfigError(
                        field, f"{name}{unread[0]}, so seed would do nothing", unread[1].replace("{flag}", "seed")))
            try:
                check_searchable(config, bool(options["users"]), max_users=options["max_users"])
            except ConfigError as err:
                fix = ("set users = true to search the most users (concurrency starts it), or drop concurrency"
                       if err.field == "--concurrency" and not options["users"] else err.fix)
                raise ConfigError(where, f"{err.field}: {err.problem}", fix) from None
        key = point_key(mode, config, options)
        same = point_key(mode, _spelled_out(config), options)  # ('1x' and '1x(tp=1)' beside --tp 1: one run)
        if same in seen:
            first, first_where = seen[same]
            differ = sorted(k for k in set(values) | set(spec.points[first].params)
                            if values.get(k) != spec.points[first].params.get(k))
            if differ and all(k in SEARCH_KIND_KEYS and SEARCH_KIND_KEYS[k] != bool(options["users"]) for k in differ):
                # (a grid crossing users with a key only one kind of search reads: its other points read it)
                k, reads_users = differ[0], SEARCH_KIND_KEYS[differ[0]]
                if "users" not in spec.varied:  # (no point reads it: said so)
                    raise unread_by[f"--{k.replace('_', '-')}"][0]
                reader, made = (("a users search", "a rate search") if reads_users else
                                ("a rate search", "a users search"))
                raise ConfigError("sweep.grid", f"points {first} and {index} run the same search ({where}): "
                                  f"{', '.join(differ)} only set{'s' if len(differ) == 1 else ''} {reader}, and they "
                                  f"make {made}", f"give the points making {made} one value of {k}: zip the keys "
                                  f"in the grid, e.g. \"users,{k}\" = [[{str(reads_users).lower()}, V1], "
                                  f"[{str(reads_users).lower()}, V2], [{str(not reads_users).lower()}, V1]]")
            if point_key(mode, spec.points[first].config, options) == key:
                raise ConfigError("sweep.grid", f"points {first} and {index} are the same configuration ({where})",
                                  "remove the duplicate values")
            raise ConfigError("sweep.grid", f"points {first} ({first_where.removeprefix('sweep point ')}) and {index} "
                              f"({where.removeprefix('sweep point ')}) spell one deployment", "give each pool its layout "
                              "in full (e.g. 1x(tp=2) for 1x beside tp=2), or drop one of the values")
        seen[same] = (index, where)
        spec.points.append(Point(index, values, config, options, key))
    for flag, errors in unread_by.items():
        name = flag.removeprefix("--").removeprefix("no-").replace("-", "_")  # (--no-tbt-early-exit: tbt_early_exit)
        # (a planner key by its sweep key, num_seeds for --seeds; a run option, seed, by its own name)
        given_at = sum(1 for p in spec.points if any(SWEEP_KEYS.get(k, k) == name for k in p.params))
        if len(errors) >= given_at:  # no point given it reads it
            raise errors[0]
    # What an engine set at some point is a column: the other points' values of it are their configs'.
    from simulator.config.options import option_value

    implied = {name for p in spec.points for name in p.params if name not in base and name not in spec.varied}
    for point in spec.points:
        for name in implied:
            point.params.setdefault(name, option_value(point.config, name))
    _refuse_unread(spec.points, grid, given, {name: key for name, key in file_keys.items() if name in base})
    if mode == "capacity" and "qps" in base and all(p.options["qps_start"] is not None and not p.options["users"]
                                                    for p in spec.points):
        # A rate search's qps only sets its first trial, which qps_start sets too and wins (simulate capacity
        # refuses the pair alike): every row would show a qps that changed nothing.
        flag = "--qps" if "qps" in given else f"sweep.base.{file_keys['qps']}" if "qps" in file_keys else "--config"
        raise ConfigError(flag, f"qps {base['qps']:g} only sets where each capacity search starts, and qps_start "
                          "(the sweep's) sets it too and wins at every point, so it would do nothing",
                          "give one of qps and qps_start")
    return spec


def _spelled_out(config: RunConfig) -> RunConfig:
    """``config`` with each pool written with the layout it takes from the run (``PoolSpec.effective``), its GPU and
    the scheduler it runs: two spellings of one deployment (``1x`` and ``1x(tp=1,sched=vllm-v1)`` beside the
    defaults), one run."""
    from dataclasses import replace

    from simulator.config.disagg_layout import layout_of
    from simulator.config.hf_config import is_path_like

    layout = layout_of(config)
    if layout is None:
        return config

    def spelled(pool, replica, scheduler) -> str:  # noqa: ANN001 - a PoolSpec, its ReplicaConfig, its SchedulerConfig
        # (a GPU file's path stays as the pool gives it: pool text lowercases gpu=, and a path is case-sensitive)
        gpu = pool.gpu if is_path_like(replica.gpu) else replica.gpu
        return replace(pool, sched=scheduler.name, gpu=gpu).effective(replica)

    return config.replace(prefill_pool=spelled(layout.prefill, layout.prefill_replica, layout.prefill_scheduler),
                          decode_pool=spelled(layout.decode, layout.decode_replica, layout.decode_scheduler),
                          mixed_pool=None if layout.mixed is None or layout.mixed_replica is None
                          else spelled(layout.mixed, layout.mixed_replica, layout.mixed_scheduler))


def _sweep_inputs(spec: SweepSpec) -> dict[str, str]:
    """The files the sweep's points read, path -> sha256 (simulator.config.inputs): its points' keys hold them."""
    from simulator.config.inputs import inputs_record

    return {entry["path"]: entry["sha256"] for p in spec.points for entry in inputs_record(p.config).values()}


def _refuse_unread(points: list[Point], grid: dict[tuple[str, ...], list[tuple[Any, ...]]], given: set[str],
                   file_keys: dict[str, str]) -> None:
    """Refuse an option that no point of the sweep reads (:func:`simulator.config.options.inert_options`): a
    base option (a flag given, or a key of the file's base), whose every row would show a value that changed
    nothing, or a grid key, whose points would differ in that column and nothing else (``chunk_size`` under
    ``--scheduler orca``, ``cv`` without gamma arrivals). One that some point reads is kept (``--chunk-size``
    beside ``scheduler = vllm, sarathi``)."""
    from simulator.config.options import engine_terms_unread, given_flag, inert_options, option_value
    from simulator.costmodel.engine_model import check_engine_spec_read, load_engine

    inert = [inert_options(point.config, users_search=bool(point.options.get("users")),
                           max_users=point.options.get("max_users") if point.options.get("users") else None)
             for point in points]

    def unread(name: str) -> str | None:
        """Why no point reads ``name`` (up to two reasons), or None if one does."""
        if name not in RUN_OPTIONS or not all(name in off for off in inert):
            return None
        whys = list(dict.fromkeys(off[name][0] for off in inert))
        return "; ".join(whys[:2]) + ("; ..." if len(whys) > 2 else "")

    for name in sorted(given) + sorted(file_keys):
        why = unread(name)
        if why is not None:
            # (the spelling typed: --no-prefix-caching gives prefix_caching false)
            flag = given_flag(name, option_value(points[0].config, name)) if name in given else file_keys[name]
            raise ConfigError(flag if name in given else f"sweep.base.{flag}",
                              f"no point of the sweep reads it ({why}), so {flag} would do nothing",
                              inert[0][name][1].replace("{flag}", flag))
    # An engine's override term that no point running that engine reads (handoff_s with no pools): its rows would
    # differ from the plain preset's, where the grid has it, in that column and nothing else
    by_engine: dict[str, list[dict[str, tuple[str, str]]]] = {}
    for point in points:
        by_engine.setdefault(str(point.config.engine), []).append(engine_terms_unread(point.config))
    for engine, unread_at in by_engine.items():
        flag = ("sweep.grid.engine" if any("engine" in names for names in grid) else
                "--engine" if "engine" in given else "sweep.base.engine")
        try:  # (a term no engine has ran every point to its failure, one by one)
            load_engine(engine)
            check_engine_spec_read(engine)
        except ConfigError as err:
            raise ConfigError(flag, f"{engine}: {err.problem}", err.fix) from None
        for term, (why, fix) in unread_at[0].items():
            if all(term in off for off in unread_at):
                raise ConfigError(flag, f"{engine}: at every point running it, {term} {why}, so it would do nothing",
                                  f"{fix}, or drop {term}")
    for names in grid:
        for name in names:
            why = unread(name)
            if why is not None:
                raise ConfigError(f"sweep.grid.{','.join(names)}", f"no point of the sweep reads {name} ({why}), so "
                                  "its points would differ in that column and nothing else",
                                  inert[0][name][1].replace("{flag}", name))


def _check_name(where: str, name: str, mode: str) -> None:
    if not _known(name):
        known = sorted(set(RUN_OPTIONS) | {k for k, v in POINT_OPTIONS.items() if mode in v[2]})
        raise ConfigError(where, "unknown key", f"known: {', '.join(known)}")
    if name in POINT_OPTIONS and mode not in POINT_OPTIONS[name][2]:
        raise ConfigError(where, f"only applies to mode = {' or '.join(POINT_OPTIONS[name][2])}",
                          f"remove it or set mode = \"{POINT_OPTIONS[name][2][0]}\"")


def _point_config(values: dict[str, Any], where: str, closed_loop: bool = True) -> RunConfig:
    """A point's config, refused as ``simulate run`` refuses it; its router too, where the point's workload gives it
    nothing to route by (``prefix_aware`` on ShareGPT ran as least outstanding under the router's name).
    ``closed_loop``: a concurrency without a rate is N users in a closed loop, as ``--concurrency N`` is (a run
    point's; a capacity point's users search sends its own, and a rate search refuses a concurrency)."""
    from simulator.workload.prefix_traces import check_router  # (reads a trace's first line only)

    values = dict(values)
    default_random_input_len(values)  # as `simulate run --workload random` reads it
    if values.get("arrival") == "trace" and values.get("trace") and values.get("num_requests") is None:
        # As `simulate run --trace T --arrival trace` replays it (config.options.replay_whole): every row, not the
        # default 256 (a sweep file's [base] trace replayed 256 where the same flags replayed 8,819)
        from simulator.config.inputs import digest  # (the rows of the file as it is now: an edit is read again)

        path = Path(str(values["trace"]))
        rows = _replayable_rows(str(path), digest(path) if path.exists() else "", values.get("max_total_tokens"),
                                values.get("over_length"))
        if rows > 0:
            values["num_requests"] = rows
    if closed_loop and closes_the_loop(values):
        # As `simulate run --concurrency N` reads it (config.options.resolve_aliases): N users in a closed loop. A
        # grid's concurrency = [16, 64] ran a 1 req/s Poisson load capped at N in flight: every point alike
        values["arrival"] = "burst"
    changes = {RUN_OPTIONS[k][0]: v for k, v in values.items() if k in RUN_OPTIONS}
    try:
        config = RunConfig().replace(**changes)
        check_router(config)
        return config
    except ConfigError as err:
        raise ConfigError(where, f"{err.field}: {err.problem}", err.fix) from None
    except (TypeError, ValueError) as err:
        raise ConfigError(where, str(err)) from None


@functools.lru_cache(maxsize=16)
def _replayable_rows(trace: str, contents: str, max_total_tokens: int | None, over_length: str | None) -> int:
    """:func:`~simulator.workload.generate.replayable_rows` of a trace, read once for a sweep's points (0 where it
    does not read: the point's own config refuses it in its terms); ``contents``: its digest, a key only."""
    from simulator.config.run_config import WorkloadConfig
    from simulator.workload.generate import replayable_rows

    try:
        return replayable_rows(WorkloadConfig(trace=trace, arrival="trace", max_total_tokens=max_total_tokens,
                                              over_length=over_length or WorkloadConfig.over_length))
    except ConfigError:
        return 0


def _blamed(key: str, where: str, base_only: frozenset[str], typed: Collection[str] = ()) -> tuple[str, str]:
    """Where a point's unread ``key`` is blamed, and how its problem names it: its flag where it was typed (``typed``:
    the run options given as flags), the sweep's base where only the base gives it (every point alike), else the
    point."""
    if key in typed:
        return f"--{key.replace('_', '-')}", ""
    return (f"sweep.base.{key}", "") if key in base_only else (where, f"{key}: ")


# A capacity point's search keys that only one kind of search reads: users (True) reads max_users; a rate search
# (False) reads the rate's keys. Given at a point of the other kind they are left at their default there (the point
# is what it would be without them) and refused only where no point given them reads them (build_spec).
SEARCH_KIND_KEYS: dict[str, bool] = {"max_users": True, "qps_start": False, "min_qps": False, "max_qps": False}


def _point_options(values: dict[str, Any], mode: str, where: str,
                   unread: dict[str, list[ConfigError]] | None = None, base_only: frozenset[str] = frozenset()
                   ) -> dict[str, Any]:
    """A point's search and SLO options (its ``values``, the rest at their defaults), checked; ``unread``: where a
    search key only the other kind of search reads is noted (:data:`SEARCH_KIND_KEYS`); ``base_only``: the keys given
    in the sweep's base alone (blamed there)."""
    options = {k: v[1] for k, v in POINT_OPTIONS.items() if mode in v[2]}
    options.update({k: v for k, v in values.items() if k in POINT_OPTIONS})
    if mode == "capacity" and unread is not None:
        for key, users in SEARCH_KIND_KEYS.items():
            if key in values and bool(options["users"]) != users and options[key] != POINT_OPTIONS[key][1]:
                options[key] = POINT_OPTIONS[key][1]
                search = "a users search" if users else "a rate search"
                field, name = _blamed(key, where, base_only)
                unread.setdefault(f"--{key.replace('_', '-')}", []).append(ConfigError(
                    field, f"{name}it sets {search}, and " + (f"no point searches the {'users' if users else 'rate'}"
                                                               if key in base_only else "this point searches the "
                                                               f"{'rate' if users else 'users'}") +
                    f", so {key} would do nothing",
                    f"set users = {'true' if users else 'false'} at some point, or drop {key}"))
    try:
        if mode == "capacity":
            _slo_and_settings(options)
        elif options["tbt_slo"] is not None and options["tbt_slo"] <= 0:
            raise ConfigError("tbt_slo", "must be positive")
    except ConfigError as err:
        raise ConfigError(where, f"{err.field}: {err.problem}", err.fix) from None
    return options


def _slo_and_settings(options: dict[str, Any]) -> tuple[SLO, SearchSettings]:
    slo, settings = slo_and_settings({SWEEP_KEYS[key]: value for key, value in options.items()})
    if not 1 <= options["num_seeds"] <= MAX_SEEDS:
        raise ConfigError("num_seeds", f"must be in [1, {MAX_SEEDS:,}] independent searches, got {options['num_seeds']:,}",
                          "give num_seeds N (3-10 show the spread of the capacity)")
    return slo, settings


# Point options added after sweeps were first written: at these values they leave a point's key
# as it was, so a sweep folder from before them still resumes instead of running every point again.
LATER_OPTION_DEFAULTS: dict[str, Any] = {"criterion": "tbt", "goodput_tpot_slo": None, "tpot_slo": None,
                                         "tpot_quantile": 99.0, "users": False, "max_users": 4096}


def point_key(mode: str, config: RunConfig, options: dict[str, Any]) -> str:
    """Identity of a point: a hash of everything that determines its result."""
    options = {k: v for k, v in options.items() if k not in LATER_OPTION_DEFAULTS or v != LATER_OPTION_DEFAULTS[k]}
    if config.is_disaggregated:  # judged (capacity) and reported (a run's overload) with the KV link's wait
        from simulator.report.metrics import DISAGG_WAITS

        options = {**options, "disagg_waits": DISAGG_WAITS}
    return config.result_key(mode=mode, options=options)


# ---------------------------------------------------------------------------------------------
# Running one point (a pure function of its arguments: safe in any process)


def _flat_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, list | tuple):
            numbers = [v for v in value if isinstance(v, int | float)]
            if numbers:
                out[f"{key}_mean"] = float(sum(numbers) / len(numbers))
        elif isinstance(value, bool | int | float | str) or value is None:
            out[key] = value
    return out


def run_point(mode: str, config_dict: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Run one point; never raises: a failure is returned as ``status = "error"``."""
    start = time.perf_counter()
    record: dict[str, Any] = {"status": "ok", "error": "", "metrics": {}, "trials": []}
    try:
        config = RunConfig.from_dict(config_dict)
        if mode == "run":
            from simulator.report.metrics import request_frame, summarize
            from simulator.simulation import simulate

            result = simulate(config)
            summary = summarize(result, request_frame(result), ttft_slo_s=options["ttft_slo"] or 2.0,
                                tbt_slo_s=options["tbt_slo"])
            record["metrics"] = _flat_metrics(summary)
        else:
            from simulator.planning.capacity import find_capacity

            slo, settings = _slo_and_settings(options)
            report = find_capacity(config, slo, settings, num_seeds=options["num_seeds"])
            record["metrics"] = _flat_metrics(report.summary(include_wall=False))
            record["trials"] = [{k: v for k, v in row.items() if k != "wall_s"}
                                for row in report.trials_frame().to_dict("records")]
    except Exception as exc:  # noqa: BLE001 - a failing point is recorded and the sweep goes on
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        record.update(status="error", error=f"{type(exc).__name__}: {message}", metrics={}, trials=[])
    record["wall_s"] = time.perf_counter() - start
    return record


# ---------------------------------------------------------------------------------------------
# The sweep


@dataclass
class SweepResult:
    table: pd.DataFrame
    num_run: int
    num_skipped: int
    num_failed: int
    out: Path
    table_path: Path


class SweepInterrupted(Exception):  # noqa: N818 - it is an outcome, not an error of the sweep
    """A sweep stopped by SIGINT or SIGTERM, or by a worker process that died (``worker_died``:
    the out-of-memory killer, ``kill -9``): finished points are kept under ``out`` and the
    results table is current; running the same sweep again runs only the points left."""

    def __init__(self, signal_name: str, num_done: int, num_total: int, out: Path, table_path: Path,
                 worker_died: bool = False) -> None:
        self.signal_name = signal_name
        self.num_done = num_done
        self.num_total = num_total
        self.out = out
        self.table_path = table_path
        self.worker_died = worker_died
        why = WorkerDied.MESSAGE if worker_died else f"interrupted by {signal_name}"
        super().__init__(f"sweep {why}: {num_done} of {num_total} points done")


def point_path(out: Path, key: str) -> Path:
    return Path(out) / "points" / f"{key}.json"


def _write_point(out: Path, mode: str, point: Point, record: dict[str, Any]) -> dict[str, Any]:
    path = point_path(out, point.key)
    text = json.dumps(jsonable({"key": point.key, "mode": mode, "params": point.params, "options": point.options,
                                "config": point.config.to_dict(), **record}), indent=1, sort_keys=True)
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(path)  # atomic: a killed sweep never leaves half a point
    except OSError as exc:  # (a file made read-only inside a writable folder: a PermissionError traceback)
        raise ConfigError("--out", f"cannot write {tmp} ({exc.strerror or type(exc).__name__})",
                          "make the sweep folder's files writable, or pass a new folder") from None
    return json.loads(text)  # exactly what a later read_point returns


def read_point(out: Path, key: str) -> dict[str, Any] | None:
    path = point_path(out, key)
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None


def _is_done(doc: dict[str, Any] | None, retry_failed: bool) -> bool:
    return doc is not None and not (retry_failed and doc.get("status") != "ok")


# -- backends: call ``on_done(point, record)`` in this thread as each point finishes


def _run_local(spec: SweepSpec, todo: list[Point], workers: int, on_done: Callable[[Point, dict], None]) -> None:
    if workers == 1:
        for point in todo:
            on_done(point, run_point(spec.mode, point.config.to_dict(), point.options))
        return
    # run_sweep handles the signals; no idle processes started
    with WorkerPool(min(workers, len(todo)), signals_interrupt=False) as pool:
        jobs = [(spec.mode, p.config.to_dict(), p.options) for p in todo]
        futures = dict(zip(pool.submit_all(run_point, jobs), todo, strict=True))
        handled: set[Future] = set()
        try:
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    handled.add(future)
                    on_done(futures[future], future.result())
        except (KeyboardInterrupt, BrokenProcessPool):
            # Points that finished while we were interrupted (or before a worker died) are kept; the
            # ones in flight are stopped (leaving the pool) and rerun on resume.
            with signals_ignored():
                for future, point in futures.items():
                    if future not in handled and future.done() and not future.cancelled() and future.exception() is None:
                        on_done(point, future.result())
            raise


def _connect(address: str, num_cpus: int | None = None) -> tuple[Any, bool]:
    """Ray, connected to ``address`` ('local' starts an instance of ``num_cpus`` CPUs, default all), and whether
    this call started it; a missing Ray or an unreachable address refused in one line."""
    try:
        import ray
    except ImportError:
        raise ConfigError("--ray-address", "Ray is not installed",
                          "pip install 'servesim[ray]' (or ray), or drop --ray-address to use local processes") from None
    started_here = not ray.is_initialized()
    if started_here:
        with signals_blocked():  # Ray's own processes must not take the Ctrl-C meant for the sweep
            if address == "local":
                ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            else:
                connect_ray(ray, address)
    return ray, started_here


def _run_ray(spec: SweepSpec, todo: list[Point], session: tuple[Any, bool],
             on_done: Callable[[Point, dict], None]) -> None:
    ray, started_here = session
    remote = ray.remote(num_cpus=1)(run_point)
    refs = {remote.remote(spec.mode, p.config.to_dict(), p.options): p for p in todo}
    pending = list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                on_done(refs[ref], ray.get(ref))
    except KeyboardInterrupt:
        with signals_ignored():
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0) if pending else ([], [])
            for ref in ready:  # finished while we were interrupted: keep them
                with contextlib.suppress(Exception):
                    on_done(refs[ref], ray.get(ref, timeout=0))
            for ref in pending:
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
            if started_here:
                ray.shutdown()
        raise


# -- the results table


def _table(points: Iterable[tuple[int, str, dict[str, Any]]], param_names: list[str],
           docs: dict[str, dict[str, Any] | None]) -> pd.DataFrame:
    rows = []
    for index, key, params in points:
        doc = docs.get(key) or {"status": "missing", "error": "", "metrics": {}}
        row: dict[str, Any] = {"point": index, "key": key}
        row.update({name: params.get(name) for name in param_names})
        row["status"] = doc.get("status", "missing")
        row["error"] = doc.get("error", "")
        for name, value in (doc.get("metrics") or {}).items():
            # A parameter keeps its column: a summary field of the same name (``workload``: the
            # workload's description) stays in the point's file only.
            row.setdefault(name, value)
        rows.append(row)
    import pandas as pd

    return pd.DataFrame(rows)


def _param_names(spec: SweepSpec) -> list[str]:
    names = list(spec.base) + [n for n in spec.varied if n not in spec.base]
    # ... and what a point's engine set where nothing else did (build_spec's imply_engine): a column, not unsaid
    return names + list(dict.fromkeys(n for p in spec.points for n in p.params if n not in names))


def read_sweep_folder(folder: Path) -> tuple[dict[str, Any], pd.DataFrame]:
    """A sweep folder's ``sweep.json`` and its current table, built from the point files (so
    a sweep that is still running, or was stopped, reads as far as it got)."""
    folder = Path(folder)
    info_path = folder / "sweep.json"
    if not info_path.is_file():
        raise ConfigError("sweep folder", f"{folder} has no sweep.json", "pass the --out folder of `simulate sweep`")
    try:
        info = json.loads(info_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError("sweep folder", f"{info_path} is not valid JSON ({exc})") from None
    raw = info.get("points", []) if isinstance(info, dict) else None
    ok = isinstance(raw, list) and all(
        isinstance(p, dict) and isinstance(p.get("index"), int) and isinstance(p.get("key"), str)
        and isinstance(p.get("params"), dict) for p in raw)
    if not ok:  # (a hand edit: a KeyError, TypeError or AttributeError deep in the table)
        raise ConfigError("sweep folder", f"{info_path} is not a sweep's record (each point needs an index, a key and "
                          "params)", "pass the --out folder of `simulate sweep`, or rerun the sweep there")
    points = [(p["index"], p["key"], p["params"]) for p in raw]
    names = list(dict.fromkeys(n for _, _, params in points for n in params))
    table = _table(points, names, {key: read_point(folder, key) for _, key, _ in points})
    return info, table


def run_sweep(spec: SweepSpec, out: Path, workers: int = 1, ray_address: str | None = None, fmt: str = "csv",
              progress: bool = False, retry_failed: bool = False, ray_cpus: int | None = None) -> SweepResult:
    """Run the points of ``spec`` not yet done under ``out``, keeping the results table current: in ``workers``
    local processes, or on Ray at ``ray_address`` ('local': an instance of ``ray_cpus`` CPUs, default all; one
    point a CPU).

    Raises :class:`SweepInterrupted` on SIGINT/SIGTERM (from the main thread), or when a worker
    process dies, after stopping the workers and writing the table of the points finished so far.
    """
    if workers < 1:
        raise ConfigError("--workers", f"must be >= 1, got {workers}")
    check_format(fmt)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError("--out", f"{out} exists and is not a folder")
    earlier = out / "sweep.json"
    if earlier.is_file():  # a folder is resumed by the same sweep, never overwritten by another
        try:
            before = json.loads(earlier.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            before = None
        keys = {p.key for p in spec.points}
        if (not isinstance(before, dict) or not isinstance(before.get("points"), list)
                or not all(isinstance(p, dict) and isinstance(p.get("key"), str) for p in before["points"])
                or not isinstance(before.get("base", {}), dict)):  # (what the sweep writes: read below as such)
            raise ConfigError("--out", f"{earlier} is not a sweep's record (unreadable, or edited by hand)",
                              "pass a new folder, or restore the sweep.json the sweep wrote")
        if {p["key"] for p in before["points"]} - keys:
            then, now = before.get("base", {}), jsonable(spec.base)
            changed = sorted(k for k in set(then) | set(now) if then.get(k) != now.get(k))
            what = f" (the base differs in {', '.join(changed)})" if changed else ""
            files_then = before.get("inputs") if isinstance(before.get("inputs"), dict) else {}
            edited = sorted(path for path, sha in _sweep_inputs(spec).items() if files_then.get(path, sha) != sha)
            if edited and not changed:
                raise ConfigError("--out", f"{out} holds this sweep's points run on other contents of "
                                  f"{', '.join(edited)} (edited since): they would sit beside points of the new one",
                                  "pass a new folder for the new contents, or restore the file to resume")
            if "inputs" not in before and _sweep_inputs(spec) and not changed:  # (written before the fingerprints)
                raise ConfigError("--out", f"{out} holds a sweep written before servesim keyed a point by the contents "
                                  "of the files it reads (its sweep.json records none), so its points cannot be told "
                                  "from this sweep's", "pass a new folder (its points run again)")
            grid_now = jsonable({",".join(k): [list(r) for r in v] for k, v in spec.grid.items()})
            if not changed and before.get("grid") == grid_now and before.get("mode") == spec.mode:
                # (the same file and options: the code keyed its points otherwise when it ran them)
                raise ConfigError("--out", f"{out} holds this sweep's points as other code keyed them (a point's key "
                                  "is everything its result depends on, and what the code reads of it changed since: "
                                  "a concurrency grid runs closed loops, files are read by their contents, a "
                                  "disaggregated pool without sched= runs --scheduler's, a disaggregated point's "
                                  "waits include the KV link's)",
                                  "pass a new folder (its points run again)")
            raise ConfigError("--out", f"{out} holds another sweep: its sweep.json has points this one does not{what}",
                              "pass a new folder, or the same sweep file and options to resume it")
    # A point not done (never run, or failed and rerun with --retry-failed) has no doc yet.
    docs = {p.key: read_point(out, p.key) for p in spec.points}
    docs = {key: doc if _is_done(doc, retry_failed) else None for key, doc in docs.items()}
    todo = [p for p in spec.points if docs[p.key] is None]
    # Ray first: an address that cannot be reached is refused before the folder is written.
    session = _connect(ray_address, ray_cpus) if ray_address and todo else None
    (out / "points").mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps(jsonable({
        "mode": spec.mode, "base": spec.base,
        "grid": {",".join(k): [list(r) for r in v] for k, v in spec.grid.items()},
        "points": [{"index": p.index, "key": p.key, "params": p.params} for p in spec.points],
        "inputs": _sweep_inputs(spec)}), indent=1))
    table_path = out / f"results.{fmt}"
    param_names = _param_names(spec)

    def current_table() -> pd.DataFrame:
        return _table(((p.index, p.key, p.params) for p in spec.points), param_names, docs)

    write_table(current_table(), out / "results", fmt)
    for other in FORMATS:  # a resumed sweep in another --format: its table is this one now, not a stale copy
        if other != fmt:
            (out / f"results.{other}").unlink(missing_ok=True)
    failed = 0
    num_skipped, num_total = len(spec.points) - len(todo), len(spec.points)
    num_done = num_skipped
    steps = StepProgress("sweep", quiet=not progress)

    def on_done(point: Point, record: dict[str, Any]) -> None:
        nonlocal failed, num_done
        docs[point.key] = _write_point(out, spec.mode, point, record)
        if record["status"] != "ok":
            failed += 1
        write_table(current_table(), out / "results", fmt)
        num_done += 1
        note = "ok" if record["status"] == "ok" else f"failed: {record['error'][:60]}"
        where = ", ".join(f"{name}={point.params[name]}" for name in spec.varied if name in point.params)
        steps.update(f"point {point.index}{f' ({where})' if where else ''} {note}", num_done, num_total)

    received: list[str] = []
    with steps:
        steps.update(f"{len(todo)} points to run", num_done, num_total)
        try:
            with stop_on_signals(received):
                if session is not None:
                    _run_ray(spec, todo, session, on_done)
                elif not ray_address:  # (with Ray and nothing to run, nothing connects)
                    _run_local(spec, todo, min(workers, max(1, len(todo))), on_done)
        except (KeyboardInterrupt, WorkerDied) as stop:
            # From the files: a signal may have landed between writing a point and noting it.
            docs.update({p.key: read_point(out, p.key) for p in todo})
            write_table(current_table(), out / "results", fmt)
            num_done = sum(_is_done(doc, False) for doc in docs.values())
            raise SweepInterrupted(received[0] if received else "SIGINT", num_done, num_total, out,
                                   table_path, worker_died=isinstance(stop, WorkerDied)) from None
    table = current_table()
    write_table(table, out / "results", fmt)
    return SweepResult(table, len(todo), num_skipped, failed, out, table_path)


def plot_sweep(folder: Path, out: Path, x: str = "qps", hue: str = "scheduler") -> list[Path]:
    """Figures for a sweep folder, finished or not (:func:`simulator.report.plots.plot_sweep_table`)."""
    from simulator.report.plots import plot_sweep_table

    info, table = read_sweep_folder(folder)
    return plot_sweep_table(info, table, folder, out, x=x, hue=hue)
