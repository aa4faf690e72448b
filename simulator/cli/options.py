"""The options every simulation command shares, declared once.

``@run_options`` adds the run options (model, GPU, layout, scheduler knobs, workload,
cost model, cluster, seed, ``--config``) to a typer command's signature and hands the
command a validated :class:`~simulator.config.run_config.RunConfig` as its ``config`` argument.
``simulate run``, ``capacity`` and ``sweep`` all take it, so an option added to
:data:`simulator.config.options.RUN_OPTIONS` exists everywhere with the same name and meaning.

Every option defaults to ``None`` meaning "not given": the value then comes from
``--config FILE`` (a ``config.json`` written by an earlier run) or the dataclass default.
"""

from __future__ import annotations

import copy
import functools
import inspect
import os
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from simulator.config.errors import ConfigError
from simulator.config.options import (
    DECIDED_BY_COMMAND,
    DERIVED_OPTIONS,
    OPTION_ALIASES,
    RUN_OPTIONS,
    SET_BY_COMMAND,
    alias_of,
    build_config,
)
from simulator.config.run_config import RunConfig, engine_override_terms
from simulator.util.text import comma_list

WORKERS_METAVAR = "N|auto"
# vLLM's spellings of run options (OPTION_ALIASES), each a command parameter of its own.
ALIAS_NAMES = frozenset(alias for aliases in OPTION_ALIASES.values() for alias in aliases)

# Defaults that are a rule rather than one value (the dataclass holds None for "decide later").
RULE_DEFAULTS = {
    "max_model_len": "the model's",
    "num_gpu_blocks": "what the memory plan leaves for the KV cache",
    "intra_node_link": "NVLink if the GPU has it, else PCIe",
    "max_num_batched_tokens": "the token budget for sarathi/vllm-v1/sglang, 8192 for trtllm (trtllm-serve's "
                              "max_num_tokens), else max(max_model_len, 2048)",
    "chunk_size": "2048 for vllm-v1 (8192 on GPUs of 70 GiB or more but the A100), 512 for sarathi; for sglang by GPU "
                  "memory: 2048 under 35 GiB, 4096 under 60, 8192 under 160, 16384 above",
    "max_num_seqs": "256 for vllm-v1 (1024 on GPUs of 70 GiB or more but the A100), 2048-4096 for sglang (by its KV "
                    "cache), else 128",
    "max_total_tokens": "the context limit for built-in workloads, none for traces",
    "prompt_tokens_max": "--prompt-tokens",
    "output_tokens_max": "--output-tokens",
    "speculative_config": "off",
    "num_speculative_tokens": "the --speculative-config JSON's",
    "acceptance_rate": "the JSON's acceptance_rate(s)",
}


def default_text(name: str, base: RunConfig | None = None) -> str | None:
    """What an option means when not given: the RunConfig default, or the rule that picks it."""
    value: object = base or RunConfig()
    for part in RUN_OPTIONS[name][0].split("__"):
        if value is None:  # a section that is off (speculative): its options have no value
            break
        value = getattr(value, part, None)
    if value is None:
        return RULE_DEFAULTS.get(name)
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"{value:g}" if isinstance(value, float) else str(value)


def parse_ints(text: str, flag: str) -> tuple[int, ...]:
    """A comma-separated list of positive integers (``--tps 1,2,4``), or a one-line error naming ``flag``."""
    items = [part.strip() for part in text.split(",")]
    if len(items) > 1 and not all(items):  # ("1,,2": a slip, not a list of two)
        raise ConfigError(flag, f"has an empty item ({text!r})", "e.g. 1,2,4,8")
    try:
        values = tuple(int(v) for v in comma_list(text))
    except ValueError:
        raise ConfigError(flag, f"expected comma-separated integers, got {text!r}", "e.g. 1,2,4,8") from None
    if not values or min(values) <= 0:
        raise ConfigError(flag, f"expected positive integers, got {text!r}", "e.g. 1,2,4,8")
    repeated = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if repeated is not None:  # (each value's layouts or arms would be searched twice)
        raise ConfigError(flag, f"{repeated} is given twice ({text!r})", "name each value once")
    return values


def parse_workers(text: str, auto: Callable[[], int], remote: bool = False) -> int:
    """``--workers``: a positive integer, or ``auto``, which ``auto()`` turns into one (what
    the command can use of this machine's CPUs and memory). At most :func:`max_workers` local processes; ``remote``:
    the workers are a Ray cluster's tasks in flight (plan --ray-address HOST), which its own CPUs bound."""
    value = text.strip().lower()
    if value == "auto":
        return auto()
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError("--workers", f"expected a positive integer or 'auto', got {text!r}",
                          "e.g. --workers 2, or --workers auto for one process per CPU")
    limit = max_workers()
    if count > limit and not remote:  # (a pool starts its processes at once: 100,000 took the machine down, the OOM killer after it)
        raise ConfigError("--workers", f"{count:,} processes is beyond {limit:,}, four per CPU of this machine or 64",
                          "give at most that, or --workers auto")
    return count


def max_workers() -> int:
    """The most local ``--workers`` a command takes: four processes per CPU, or 64 where that is more."""
    return max(64, 4 * (os.cpu_count() or 1))


@functools.cache
def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def escape_markup(text: str) -> str:
    """``text`` with every ``[`` escaped for rich markup (typer's help renderer), without importing rich."""
    return text.replace("[", "\\[")


def _parameters() -> tuple[inspect.Parameter, ...]:
    """The shared options as keyword parameters, built once for every command that takes them
    (typer copies each option's info before changing it, so commands may share these). Help texts
    are escaped: typer renders them as rich markup, where ``[len x r, len]`` would read as a tag."""
    base = RunConfig()  # one validated default config, not one per option
    params = []
    for name, (_, typ, help_text) in RUN_OPTIONS.items():
        aliases = OPTION_ALIASES.get(name, ())
        if aliases:  # vLLM's spellings, each a hidden parameter of its own (below), named in the option's help
            help_text = f"{help_text.rstrip('.')} (vLLM: {', '.join(_flag(alias) for alias in aliases)})."
        default = default_text(name, base)
        if default is not None and "default" not in help_text:  # parentheses: [..] would read as rich markup
            help_text = f"{help_text.rstrip('.')} (default: {default})."
        flag = _flag(name)
        if typ is bool:  # named bool options get their --no- form only when asked for it
            flag = f"{flag}/--no-{flag[2:]}"
        annotation = Annotated[typ | None, typer.Option(flag, help=escape_markup(help_text), rich_help_panel="Run options")]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
        # One parameter per spelling: typer folds the spellings of one parameter into its last value, so
        # `--tensor-parallel-size 2 --tp 4` ran at TP 4; apart, resolve_aliases sees both and refuses the pair.
        for alias in aliases:
            annotation = Annotated[typ | None, typer.Option(_flag(alias), hidden=True, help=f"vLLM's {flag}.")]
            params.append(inspect.Parameter(alias, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    for name, (typ, help_text) in DERIVED_OPTIONS.items():  # vLLM's options that set several fields
        # A bool is the flag alone, as vLLM's (typer adds no --no- form to a named bool option).
        annotation = Annotated[typ | None, typer.Option(_flag(name), help=escape_markup(help_text), rich_help_panel="Run options")]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation))
    params.append(inspect.Parameter(
        "config_file", inspect.Parameter.KEYWORD_ONLY, default=None,
        annotation=Annotated[Path | None, typer.Option("--config", help="Start from a config.json of an earlier run.",
                                                       rich_help_panel="Run options")]))
    return tuple(params)


def replay_whole(given: dict[str, Any]) -> RunConfig | None:
    """The defaults a trace replay (``--arrival trace``) starts from: every row it can replay as
    ``num_requests``, unless ``--num-requests`` (or a ``--config``) says how many; None for any other
    run. Read from the options as given, before the config is built, because the config checks
    ``--num-warmup`` against ``num_requests`` as it is built: the rows, not the default 256, must be there."""
    given = {alias_of(name): value for name, value in given.items() if value is not None}  # (--num-prompts)
    if (given.get("arrival") != "trace" or given.get("trace") is None or given.get("num_requests") is not None
            or given.get("config_file")):
        return None
    from simulator.config.run_config import WorkloadConfig
    from simulator.workload.generate import replayable_rows  # late: reads the trace (pandas) only for a replay

    # What replayable_rows reads; a value the config refuses is refused here with the config's own message.
    workload = WorkloadConfig(trace=given["trace"], arrival="trace", max_total_tokens=given.get("max_total_tokens"),
                              over_length=given.get("over_length") or WorkloadConfig.over_length)
    rows = replayable_rows(workload)
    return RunConfig().replace(workload__num_requests=rows) if rows > 0 else None


def rows_base(path: Path) -> RunConfig | None:
    """The defaults a ``calibrate-engine --rows`` fit's options are checked against: its first row's model and GPU
    (a model's options, --moe-imbalance, --max-model-len, were judged against the default Llama-2-7B, which no row
    names); None where that row does not read as one (the fit refuses the file in its own terms)."""
    import csv

    from simulator.calibrate.silicon import SYSTEMS, _model

    try:
        with Path(path).open(newline="", encoding="utf-8-sig") as f:
            for i, row in enumerate(csv.DictReader(f)):
                if i >= 1000:  # (the fit refuses a file none of whose first rows reads, in its own terms)
                    return None
                model, gpu = (row.get("model") or "").strip(), (row.get("gpu") or "").strip()
                try:  # the first row whose model and GPU the catalog knows (an unknown one is the fit's to refuse)
                    return RunConfig().replace(replica__model=_model(model), replica__gpu=SYSTEMS.get(gpu, gpu))
                except Exception:  # noqa: BLE001 - any row that does not read as a run: the next one
                    continue
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    return None


def check_trace_given(config: RunConfig, options: dict[str, Any], command: str = "run") -> None:
    """Refuse prefix-cache options and ``--session-replay`` that were given (``options``: the command line's, not
    ``--config``'s) but that ``config`` would not read because of what its ``--trace`` holds: only a trace naming its
    prompts' blocks (Mooncake JSONL, Weka sessions) shares prefixes, only Weka sessions name sessions to replay
    open or closed. The config layer refuses them for
    built-in workloads (:func:`~simulator.config.options.check_given`); a trace's format is known only
    from its file, which the config layer does not read. And the run's router, given or from ``--config``,
    where it has nothing to route by (:func:`simulator.workload.prefix_traces.check_router`): the run
    would be labelled with a router it never ran."""
    decided = DECIDED_BY_COMMAND.get(command, frozenset())
    if decided is None:  # a sweep's grid may change the trace, the scheduler or the router: each point's router is
        return           # checked as it is built, its trace's options over all points (check_sweep_trace_options)
    if "router" not in decided:
        from simulator.workload.prefix_traces import check_router  # late: reads the trace's first line only

        check_router(config)
    given_values = {alias_of(name): value for name, value in options.items() if value is not None}
    given = set(given_values)
    names = [name for name in ("prefix_cache_policy", "cpu_kv_gib", "prefix_caching") if name in given]
    trace = config.workload.trace
    if trace is None or not (names or "session_replay" in given) or not Path(trace).is_file():
        return  # (a trace that is not there, or a folder, is refused where it is read, with its own reason)
    from simulator.workload.prefix_traces import prefix_trace_format  # late: reads the trace's first line only

    fmt = prefix_trace_format(str(trace))
    if fmt is None and names:
        # (the spelling typed: --no-prefix-caching gives prefix_caching False)
        flag = "--no-prefix-caching" if names[0] == "prefix_caching" and given_values.get("prefix_caching") is False \
            else _flag(names[0])
        raise ConfigError(flag, f"--trace {trace} names no prompt blocks (only a trace with block hashes shares "
                          f"prefixes: Mooncake JSONL, Weka sessions), so {flag} would do nothing",
                          f"pass a --trace with hash_ids (e.g. Mooncake's), or drop {flag}")
    if fmt != "weka-sessions" and "session_replay" in given:  # (closed is refused where the trace is read, too)
        raise ConfigError("--session-replay", f"--trace {trace} names no sessions (only Claude Code session files "
                          "do), so --session-replay would do nothing", "pass Claude Code session files as --trace, "
                          "or drop --session-replay")


def read_sweep_traces(configs: list[RunConfig], varied: list[str], flags: set[str]) -> None:
    """Read each distinct trace of a sweep's point ``configs`` once, before any point runs, as ``run`` reads its
    trace before it simulates: a missing or unreadable trace is one error naming where it was given
    (``varied``: the grid's names; ``flags``: the run flags typed), not a failure at every point."""
    from simulator.workload.generate import load_trace  # late: the readers load pandas
    from simulator.workload.prefix_traces import read_prefix_trace

    seen: set[str] = set()
    for config in configs:
        trace = config.workload.trace
        if trace is None or trace in seen:
            continue
        seen.add(trace)
        field = f"sweep.grid.trace={trace}" if "trace" in varied else "--trace" if "trace" in flags else "sweep.base.trace"
        try:
            read_prefix_trace(trace) or load_trace(trace)  # a hashed trace, or any other (as the point reads it)
        except ConfigError as err:
            raise ConfigError(field, err.problem, err.fix) from None


def check_sweep_trace_options(spec: Any, flags: set[str]) -> None:
    """Refuse a sweep's prefix-cache options and ``session_replay`` (given in its base or varied by its grid) that no
    point reads because of what its trace holds, as :func:`check_trace_given` refuses them for a run: only a trace
    naming its prompts' blocks shares prefixes, only Weka sessions name sessions to replay. (Points without a trace
    are the config layer's: ``_refuse_unread`` in :mod:`simulator.planning.sweep`.)"""
    from simulator.workload.prefix_traces import prefix_trace_format  # late: reads a trace's first line only

    formats: dict[str, str | None] = {}

    def fmt(trace: str) -> str | None:
        if trace not in formats:
            formats[trace] = prefix_trace_format(trace) if Path(trace).exists() else None  # (a folder of sessions)
        return formats[trace]

    traces = [p.config.workload.trace for p in spec.points]
    if not traces or any(t is None for t in traces):
        return  # a point with a built-in workload: the config layer judges it
    for name in ("prefix_cache_policy", "cpu_kv_gib", "prefix_caching", "session_replay"):
        if name not in spec.base and name not in spec.varied:
            continue
        wants = ("weka-sessions",) if name == "session_replay" else None
        if any((fmt(t) in wants) if wants else fmt(t) is not None for t in traces):
            continue  # some point reads it
        flag = (f"sweep.grid.{name}" if name in spec.varied else
                ("--no-prefix-caching" if name == "prefix_caching" and spec.base.get(name) is False else _flag(name))
                if name in flags else f"sweep.base.{name}")
        what = ("names sessions (only Claude Code session files do)" if wants else
                "names its prompts' blocks (only a trace with block hashes shares prefixes: Mooncake JSONL, Weka "
                "sessions)")
        raise ConfigError(flag, f"no point's trace {what}, so {flag} would do nothing",
                          f"give the points a trace that does, or drop {flag}")


def given_run_flags(ctx: typer.Context) -> set[str]:
    """The run options given on the command line, a default's value included (``--gpu a100-80gb``):
    :func:`config_overrides` sees only values that differ from the defaults."""
    sources = {name: ctx.get_parameter_source(name) for name in (*RUN_OPTIONS, *DERIVED_OPTIONS, *ALIAS_NAMES)}
    return {alias_of(name) for name, source in sources.items()  # (vLLM's spellings under the option's name)
            if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")}


def given_overrides(config_file: Path | None = None, **options: Any) -> dict[str, Any]:
    """The run options given (a ``--config`` file's fields under them), option name -> value, without
    building a config from them: a sweep's base, which its grid completes (``--scheduler-recv-interval``
    is refused on the default scheduler, yet holds at every point of ``--grid scheduler=sglang``). The
    sweep validates each point as it builds it."""
    from simulator.config.options import config_overrides, load_config_file, resolve_aliases

    base = load_config_file(config_file) if config_file else RunConfig()
    given = {k: v for k, v in resolve_aliases(options, base, from_file=config_file is not None, partial=True).items()
             if v is not None and k in RUN_OPTIONS}
    return {**config_overrides(base), **given}


def default_option(name: str, value: Any):  # noqa: ANN201 - decorator over a run_options command
    """Give run option ``name`` a command-specific default (unless ``--config`` is given), and say
    so in the command's ``--help`` (the shared option's text names the run default)."""

    def decorate(fn):  # noqa: ANN001, ANN202
        @functools.wraps(fn)
        def wrapper(**kwargs: Any):  # noqa: ANN202
            spellings = (name, *OPTION_ALIASES.get(name, ()))  # (--num-prompts gives --num-requests)
            if all(kwargs.get(n) is None for n in spellings) and kwargs.get("config_file") is None:
                kwargs[name] = value
            return fn(**kwargs)

        signature = inspect.signature(fn)
        wrapper.__signature__ = signature.replace(parameters=[  # type: ignore[attr-defined]
            _with_default_help(p, value) if p.name == name else p for p in signature.parameters.values()])
        del wrapper.__wrapped__  # typer must see this signature, not fn's
        return wrapper

    return decorate


def default_help(name: str, text: str):  # noqa: ANN201 - decorator over a run_options command
    """Say in the command's ``--help`` that run option ``name`` defaults to ``text`` there (a rule the command
    applies itself, e.g. by mode), changing nothing else."""

    def decorate(fn):  # noqa: ANN001, ANN202
        signature = inspect.signature(fn)
        fn.__signature__ = signature.replace(parameters=[  # type: ignore[attr-defined]
            _with_default_help(p, text) if p.name == name else p for p in signature.parameters.values()])
        return fn

    return decorate


def help_note(notes: dict[str, str]):  # noqa: ANN201 - decorator over a run_options command
    """Add to run options' ``--help`` in this command what it accepts of them (``notes``: option name -> a
    sentence, e.g. the values it refuses), changing nothing else."""

    def decorate(fn):  # noqa: ANN001, ANN202
        def noted(param: inspect.Parameter) -> inspect.Parameter:
            base, info = typing.get_args(param.annotation)
            info = copy.copy(info)  # the shared option's info stays as it is for the other commands
            info.help = f"{(info.help or '').rstrip()} {notes[param.name]}"
            return param.replace(annotation=Annotated[base, info])

        signature = inspect.signature(fn)
        fn.__signature__ = signature.replace(parameters=[  # type: ignore[attr-defined]
            noted(p) if p.name in notes else p for p in signature.parameters.values()])
        return fn

    return decorate


def _with_default_help(param: inspect.Parameter, value: Any) -> inspect.Parameter:
    """``param`` (a shared option, ``Annotated[type, typer.Option]``) with its help naming ``value`` as the default."""
    base, info = typing.get_args(param.annotation)
    info = copy.copy(info)  # the shared option's info stays as it is for the other commands
    text = re.sub(r" \(default: [^)]*\)\.$", "", info.help or "").rstrip(".")
    info.help = f"{text} (default: {value})."
    return param.replace(annotation=Annotated[base, info])


def _hidden(param: inspect.Parameter) -> inspect.Parameter:
    """``param`` (a shared option) left out of the command's ``--help``; still parsed, so giving it gets the
    command's one-line refusal rather than 'no such option'."""
    base, info = typing.get_args(param.annotation)
    info = copy.copy(info)  # the shared option's info stays as it is for the other commands
    info.hidden = True
    return param.replace(annotation=Annotated[base, info])


def engine_implies(run_kwargs: dict[str, Any], command: str) -> dict[str, str]:
    """What ``--engine`` sets where the command line does not (:func:`simulator.costmodel.engine_model.implied_options`:
    the scheduler and kernel tables its preset was fitted with, where a run reads them): not beside a ``--config``
    file (its own hold) nor for calibrate-engine (a fit's data say them), not the scheduler of disagg split and
    compare (their pools run theirs), not the kernels of a plan (its GPUs vary)."""
    if run_kwargs.get("engine") is None or run_kwargs.get("config_file") is not None or command == "calibrate_engine":
        return {}  # (a fit's own prices and policy: its --table, --bench or --rows say them)
    from simulator.costmodel.engine_model import implied_options

    skip = {"split": "scheduler", "compare": "scheduler", "plan": "kernels"}.get(command)
    return {name: value for name, value in implied_options(run_kwargs).items() if name != skip}


def _caused_by(implied: dict[str, str], err: ConfigError, base: RunConfig | None, command: str,
               run_kwargs: dict[str, Any]) -> bool:
    """Whether what ``--engine`` set (``implied``) brought refusal ``err``: the config without it is not refused so."""
    try:
        build_config(command=command, base=base, **{**run_kwargs, **dict.fromkeys(implied)})
    except ConfigError:
        return False  # (refused without them too: whatever the first refusal names, they did not bring it alone)
    return True


def run_options(fn=None, *, as_overrides: bool = False):  # noqa: ANN001, ANN201 - decorator over typer commands
    """Add the shared run options to ``fn`` and pass it ``config: RunConfig``; with ``as_overrides``,
    ``config: dict`` instead: the options given as :func:`given_overrides` reads them, for a command
    that completes them before it builds configs (a sweep's grid). Those that make a valid config alone
    are read through it, as every other command reads them."""
    if fn is None:
        return functools.partial(run_options, as_overrides=as_overrides)
    # eval_str: resolve the command module's string annotations in its own namespace.
    own = [p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "config"]

    @functools.wraps(fn)
    def wrapper(**kwargs: Any):  # noqa: ANN202
        run_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in RUN_OPTIONS or k in DERIVED_OPTIONS
                      or k in ALIAS_NAMES or k == "config_file"}
        base = replay_whole(run_kwargs)
        if fn.__name__ == "calibrate_engine" and kwargs.get("rows") is not None:
            base = rows_base(kwargs["rows"]) or base
        if (fn.__name__ == "capacity" and kwargs.get("users") and run_kwargs.get("warmup_mode") is not None
                and run_kwargs.get("concurrency") is None and run_kwargs.get("max_concurrency") is None
                and (base is None or base.workload.concurrency is None)):
            # a users search's trials are closed loops from its first users: their warm-up mode is the command's
            # to apply (capacity._users_drain_warmups); a config without a concurrency refuses one
            run_kwargs["warmup_mode"] = None
        implied = {} if as_overrides else engine_implies(run_kwargs, fn.__name__)  # (a sweep's points: its own)
        run_kwargs.update(implied)
        try:
            config = build_config(command=fn.__name__, base=base, **run_kwargs)
        except ConfigError as err:
            if implied and _caused_by(implied, err, base, fn.__name__, run_kwargs):
                took = " and ".join(f"--{name} {value}" for name, value in implied.items())
                raise ConfigError(err.field, err.problem, f"{err.fix + '; ' if err.fix else ''}--engine "
                                  f"{run_kwargs['engine']} runs {took}, as it was fitted (give them to run "
                                  "others)") from None
            if not as_overrides:
                raise
            return fn(config=given_overrides(**run_kwargs), **kwargs)
        check_trace_given(config, run_kwargs, fn.__name__)
        if (fn.__name__ != "calibrate_engine" and isinstance(config.engine, str)  # (a fit may read what a run does not)
                and engine_override_terms(config.engine)):  # (overrides only: the cost model loads late)
            from simulator.costmodel.engine_model import check_engine_spec_read

            # (the flag where it was typed; a --config file's engine is the file's)
            check_engine_spec_read(config.engine, "--engine" if run_kwargs.get("engine") is not None else "engine")
        if as_overrides:
            from simulator.config.options import config_overrides

            return fn(config=config_overrides(config), **kwargs)
        return fn(config=config, **kwargs)

    refused = SET_BY_COMMAND.get(fn.__name__, {})  # options the command always refuses: kept out of its --help
    merged = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + [
        _hidden(p) if p.name in refused else p for p in _parameters()]
    wrapper.__signature__ = inspect.Signature(merged)  # type: ignore[attr-defined]
    # typer reads the options from the signature; empty annotations spare it a type-hint walk of
    # every shared option at each start (typing.get_type_hints, twice per command).
    wrapper.__annotations__ = {}
    del wrapper.__wrapped__  # typer must see the merged signature, not fn's
    return wrapper
