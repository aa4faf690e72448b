"""The planner's options, declared once: the SLO a trial must meet and how the search runs.

:data:`PLANNER_OPTIONS` names every SLO and search option once: its name (the command-line flag
``--tbt-slo`` and the sweep-file key ``tbt_slo``), the :class:`SLO` or :class:`SearchSettings`
field it sets, its type, its help and which commands take it. Defaults are the dataclasses'.
``simulate capacity`` (and ``simulate plan``, for the options it shares) get their typer
parameters from it (:mod:`simulator.cli.planner_options`), and sweep files' capacity keys are
parsed and checked against it (:mod:`simulator.planning.sweep`), so an option added here exists
everywhere with the same name, default and meaning.

Light on purpose: the CLI imports this module at start-up, so it loads no numpy, pandas or simpy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from simulator.config.errors import ConfigError
from simulator.config.run_config import MAX_QPS, MIN_QPS, RunConfig
from simulator.util.text import percent

CRITERIA = ("tbt", "goodput")  # what a trial is judged on: Sarathi-Serve's latency limits, or DistServe's goodput
DEFAULT_GOODPUT_TARGET = 0.9  # DistServe: 90% of requests meet both SLOs
CAPACITY_DEFAULT_NUM_REQUESTS = 2048  # a capacity trial's requests where none are given (CLI, sweep, plan's verdicts)


def _field_default(holder: type, name: str) -> Any:
    """The default of dataclass ``holder``'s field ``name``."""
    return next(f.default for f in dataclasses.fields(holder) if f.name == name)


# Limits beyond these are said (SLO.unit_notes): most likely milliseconds typed where seconds are read.
MAX_TOKEN_LIMIT_S = 5.0  # a TPOT or TBT limit, seconds a token
MAX_WAIT_LIMIT_S = 600.0  # a TTFT or scheduling-delay limit
_SLO_EXAMPLES = {"tbt_s": 0.2, "sched_delay_s": 2, "goodput_ttft_s": 2, "ttft_s": 2, "tpot_s": 0.05}  # error fixes


# Each SLO limit by its sweep key (its flag: ``--`` and dashes), and whether it is a time a token or a wait.
LIMIT_KINDS = {"tbt_slo": "token", "tpot_slo": "token", "goodput_tpot_slo": "token", "ttft_slo": "wait",
               "goodput_ttft_slo": "wait", "sched_delay_slo": "wait"}


def limit_notes(limits: Mapping[str, float | None], as_flags: bool = True) -> list[str]:
    """Limits far beyond any serving SLO (``limits``: seconds by :data:`LIMIT_KINDS` key), said by flag (or, not
    ``as_flags``, by a sweep file's key), not refused: a huge limit is how one switches a limit off. A TPOT or TBT
    limit of 50 is 50 seconds a token, most likely 50 ms typed as milliseconds."""
    out = []
    for key, value in limits.items():
        most = MAX_TOKEN_LIMIT_S if LIMIT_KINDS[key] == "token" else MAX_WAIT_LIMIT_S
        if value is not None and value > most:
            name = f"--{key.replace('_', '-')}" if as_flags else key
            out.append(f"{name} {value:g} is {value:g} seconds (limits are in seconds: {value:g} ms would be "
                       f"{value / 1000:g})")
    return out


@dataclass(frozen=True)
class SLO:
    """What a trial must meet. Limits in seconds, quantiles in percent (0, 100]."""

    tbt_s: float = 0.2
    tbt_quantile: float = 99.0
    sched_delay_s: float = 2.0
    sched_delay_quantile: float = 50.0
    ttft_s: float | None = None  # optional limit on the ttft_quantile of TTFT
    ttft_quantile: float = 99.0
    # Optional limit on the tpot_quantile of the requests' TPOT (each request's mean gap after its
    # first token; a one-token output has none and is left out): "P99 TPOT <= 50 ms".
    tpot_s: float | None = None
    tpot_quantile: float = 99.0
    min_goodput: float | None = None  # optional: share of requests meeting goodput_ttft_s and tbt_s
    goodput_ttft_s: float = 2.0
    # "tbt": Sarathi-Serve's limits above; "goodput": DistServe's share of requests meeting TTFT and TPOT.
    criterion: str = "tbt"
    # A good request's TPOT limit; None: its largest TBT gap <= tbt_s instead (criterion "goodput": tbt_s).
    goodput_tpot_s: float | None = None

    def __post_init__(self) -> None:
        if self.criterion not in CRITERIA:
            raise ConfigError("slo.criterion", f"unknown criterion {self.criterion!r}", f"use one of {', '.join(CRITERIA)}")
        if self.criterion == "goodput":  # DistServe's defaults: 90% of requests, TPOT held to the TBT limit
            if self.min_goodput is None:
                object.__setattr__(self, "min_goodput", DEFAULT_GOODPUT_TARGET)
            if self.goodput_tpot_s is None:
                object.__setattr__(self, "goodput_tpot_s", self.tbt_s)
        if self.goodput_tpot_s is not None and not (math.isfinite(self.goodput_tpot_s) and self.goodput_tpot_s > 0):
            raise ConfigError("slo.goodput_tpot_s", f"must be a positive number of seconds, got {self.goodput_tpot_s}",
                              "e.g. 0.1 seconds")
        for name in ("tbt_s", "sched_delay_s", "goodput_ttft_s", "ttft_s", "tpot_s"):
            value = getattr(self, name)
            if value is None and name in ("ttft_s", "tpot_s"):  # optional limits
                continue
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"slo.{name}", f"must be a positive number of seconds, got {value}",
                                  f"e.g. {_SLO_EXAMPLES[name]} seconds")
        for name in ("tbt_quantile", "sched_delay_quantile", "ttft_quantile", "tpot_quantile"):
            value = getattr(self, name)
            if not 0 < value <= 100:
                raise ConfigError(f"slo.{name}", f"must be a percentile in (0, 100], got {value}", "e.g. 99 for P99")
            if value < 1:  # (0.99 read as P0.99: the fastest request's figure, a limit every load meets)
                raise ConfigError(f"slo.{name}", f"is a percentile, and {value:g} would judge P{value:g} (next to the "
                                  "fastest request)", f"for P{100 * value:g} pass {100 * value:g}" if value >= 0.01
                                  else "e.g. 99 for P99")
        if self.ttft_s is None and self.ttft_quantile != _field_default(SLO, "ttft_quantile"):
            raise ConfigError("slo.ttft_quantile", f"P{self.ttft_quantile:g} of TTFT is held to no limit",
                              "add --ttft-slo SECONDS (ttft_slo in a sweep file), or drop --ttft-quantile")
        if self.tpot_s is None and self.tpot_quantile != _field_default(SLO, "tpot_quantile"):
            raise ConfigError("slo.tpot_quantile", f"P{self.tpot_quantile:g} of TPOT is held to no limit",
                              "add --tpot-slo SECONDS (tpot_slo in a sweep file), or drop --tpot-quantile")
        if self.min_goodput is not None and not 0 < self.min_goodput <= 1:
            raise ConfigError("slo.min_goodput", f"must be a fraction in (0, 1], got {self.min_goodput}", "e.g. 0.9")

    def unit_notes(self, given: Collection[str] | None = None) -> list[str]:
        """Limits far beyond any serving SLO (:func:`limit_notes`), of the keys ``given`` (the planner options typed;
        None: every limit): a limit the command copied from another (goodput's TTFT from --ttft-slo) is said once,
        as the flag typed."""
        limits = {"tbt_slo": self.tbt_s, "tpot_slo": self.tpot_s, "goodput_tpot_slo": self.goodput_tpot_s,
                  "ttft_slo": self.ttft_s, "goodput_ttft_slo": self.goodput_ttft_s, "sched_delay_slo": self.sched_delay_s}
        return limit_notes({k: v for k, v in limits.items() if given is None or k in given})

    def wait_limit(self) -> tuple[float, float, str]:
        """The shortest limit judged on a wait that a growing queue lengthens (the scheduling delay, TTFT,
        a good request's TTFT): its seconds, the percentile of requests held to it, and its name. The first
        limit a queue outgrowing the server must break."""
        limits = [] if self.criterion == "goodput" else [
            (self.sched_delay_s, self.sched_delay_quantile, "scheduling-delay limit")]
        if self.ttft_s is not None:
            limits.append((self.ttft_s, self.ttft_quantile, "TTFT limit"))
        if self.min_goodput is not None:
            limits.append((self.goodput_ttft_s, 100 * self.min_goodput, "goodput's TTFT limit"))
        return min(limits)

    @property
    def good_request(self) -> str:
        """What a request must meet to count in goodput."""
        second = (f"TPOT <= {self.goodput_tpot_s:g}s" if self.goodput_tpot_s is not None
                  else f"max TBT <= {self.tbt_s:g}s")
        return f"TTFT <= {self.goodput_ttft_s:g}s, {second}"

    def describe(self) -> str:
        parts = [] if self.criterion == "goodput" else [
            f"P{self.tbt_quantile:g} TBT <= {self.tbt_s:g}s",
            f"P{self.sched_delay_quantile:g} scheduling delay <= {self.sched_delay_s:g}s"]
        if self.ttft_s is not None:
            parts.append(f"P{self.ttft_quantile:g} TTFT <= {self.ttft_s:g}s")
        if self.tpot_s is not None:
            parts.append(f"P{self.tpot_quantile:g} TPOT <= {self.tpot_s:g}s")
        if self.min_goodput is not None:
            parts.append(f"goodput >= {percent(self.min_goodput)} ({self.good_request})")
        return ", ".join(parts)


@dataclass(frozen=True)
class SearchSettings:
    """How the bisection runs. ``qps_start=None`` starts from the config's ``workload.qps``."""

    rel_tol: float = 0.025
    qps_start: float | None = None
    min_qps: float = 0.01
    max_qps: float = 1000.0
    max_trials: int = 40
    early_exit: bool = True  # stop trials certain to fail (an overloaded queue; the TBT limit, below)
    # Also stop trials certain to miss the TBT limit. Off, those trials run to the end and keep
    # their latency figures (plots of P99 TBT against QPS crossing the SLO); the verdicts and
    # the capacity are the same either way.
    tbt_early_exit: bool = True
    # Search the closed loop's users instead of the rate: each trial is ``N`` users sending their next
    # request when their last one ends (``--concurrency N``, no rate), N a whole number up to ``max_users``;
    # the first trial's N is the config's concurrency (16 where it has none).
    users: bool = False
    max_users: int = 4096

    def __post_init__(self) -> None:
        if not 0 < self.rel_tol < 1:
            raise ConfigError("capacity.rel_tol", f"must be in (0, 1), got {self.rel_tol}", "e.g. 0.025")
        if self.qps_start is not None and not self.qps_start >= MIN_QPS:
            raise ConfigError("capacity.qps_start", f"must be at least {MIN_QPS:g} requests/s, got {self.qps_start}",
                              f"pass --qps-start {MIN_QPS:g} or more")
        # max_qps first: a NaN fails every comparison, and the range check below blamed --min-qps for it.
        if not self.max_qps <= MAX_QPS:  # nan, inf, or a rate the workload refuses (mid-search, after many trials)
            raise ConfigError("capacity.max_qps", f"must be a finite rate of at most {MAX_QPS:g} requests/s, got "
                              f"{self.max_qps}", f"pass a finite --max-qps of {MAX_QPS:g} or lower")
        default_max = type(self).__dataclass_fields__["max_qps"].default
        if self.min_qps >= MIN_QPS and not self.max_qps > self.min_qps and self.max_qps != default_max:
            # (a ceiling given at or below the floor is what is off: name it; against the default, the floor is)
            raise ConfigError("capacity.max_qps", f"must be above --min-qps {self.min_qps:g}, got {self.max_qps:g}",
                              f"pass a --max-qps above {self.min_qps:g}")
        if not MIN_QPS <= self.min_qps < self.max_qps:
            raise ConfigError("capacity.min_qps", f"need {MIN_QPS:g} <= min_qps < max_qps, got {self.min_qps}, "
                              f"{self.max_qps}", f"pass a finite --min-qps of {MIN_QPS:g} or more, below --max-qps")
        if self.qps_start is not None and not self.min_qps <= self.qps_start <= self.max_qps:  # (it was clamped)
            raise ConfigError("capacity.qps_start", f"{self.qps_start:g} is outside the search's range [{self.min_qps:g}, "
                              f"{self.max_qps:g}]", "pass a --qps-start inside it, or widen --min-qps/--max-qps")
        if self.max_trials < 2:
            raise ConfigError("capacity.max_trials", f"must be >= 2, got {self.max_trials}", "pass --max-trials 2 or more")
        # A rate setting in a users search (or the users' ceiling in a rate search) would do nothing.
        if self.users:
            for name, flag in (("qps_start", "--qps-start"), ("min_qps", "--min-qps"), ("max_qps", "--max-qps")):
                if getattr(self, name) != _field_default(SearchSettings, name):
                    raise ConfigError(flag, f"sets the rate search, and --users searches the closed loop's users, "
                                      f"so {flag} would do nothing", f"drop {flag} (--concurrency N starts the users "
                                      "search at N, --max-users caps it), or drop --users")
        elif self.max_users != _field_default(SearchSettings, "max_users"):
            raise ConfigError("--max-users", "caps a users search, and this search varies the rate, so --max-users "
                              "would do nothing", "add --users, or drop --max-users")
        if not 1 <= self.max_users <= MAX_USERS:
            raise ConfigError("capacity.max_users", f"must be in [1, {MAX_USERS:,}] users, got {self.max_users:,}",
                              f"pass --max-users {MAX_USERS:,} or lower")


MAX_USERS = 1_000_000  # a users search's ceiling at most (a trial holds every user's request at once)

# A plan searches many layouts, each to this relative gap: coarser than one capacity search's.
PLAN_REL_TOL = 0.05


@dataclass(frozen=True)
class PlanSLO:
    """DistServe's goodput SLO: ``attainment`` of requests meet TTFT <= ``ttft_s`` and TPOT <= ``tpot_s``.
    "P99 TTFT <= 2 s and P99 TPOT <= 50 ms" is read as 99% of requests meeting both (a joint
    criterion: slightly stricter than the two percentiles apart)."""

    ttft_s: float = 2.0
    tpot_s: float = 0.05
    attainment: float = 0.99

    def __post_init__(self) -> None:
        for name in ("ttft_s", "tpot_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"--{name.replace('_s', '').replace('_', '-')}-slo",
                                  f"must be a positive number of seconds, got {value}")
        if not 0 < self.attainment <= 1:
            raise ConfigError("--attainment", f"must be a fraction in (0, 1], got {self.attainment}", "e.g. 0.99 for P99")

    def unit_notes(self) -> list[str]:
        """Limits far beyond any serving SLO (:func:`limit_notes`)."""
        return limit_notes({"tpot_slo": self.tpot_s, "ttft_slo": self.ttft_s})

    def capacity_slo(self) -> SLO:
        return SLO(criterion="goodput", tbt_s=self.tpot_s, goodput_ttft_s=self.ttft_s, goodput_tpot_s=self.tpot_s,
                   min_goodput=self.attainment)

    def describe(self) -> str:
        return f"{percent(self.attainment)} of requests with TTFT <= {self.ttft_s:g}s and TPOT <= {self.tpot_s * 1e3:g}ms"



SLO_PANEL = "SLO"
SEARCH_PANEL = "Search"


@dataclass(frozen=True)
class PlannerOption:
    """One planner option: what it sets, its type and help, and where it is taken.

    ``sets`` is ``"slo.<field>"``, ``"search.<field>"`` or ``"plan.<field>"`` (the field of
    :class:`SLO`, :class:`SearchSettings` or :class:`PlanSLO` whose default it takes), or ``""``
    for an option of the search as a whole (its ``default`` is then given here). ``key`` is its
    name in sweep files when that differs from the flag's (``--seeds`` is ``num_seeds`` there).
    ``variants`` holds what differs where one command reads the same flag its own way (``simulate
    plan``'s ``--ttft-slo`` is every request's limit, not a percentile's): command -> fields.
    """

    sets: str
    typ: type
    help: str
    panel: str | None  # the --help panel; None: the command's plain options
    commands: tuple[str, ...] = ("capacity",)  # CLI commands that take it as a flag
    sweep_modes: tuple[str, ...] = ("capacity",)  # sweep modes whose files take it as a key
    key: str | None = None
    own_default: Any = None  # only for sets == ""
    variants: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)

    def for_command(self, command: str) -> PlannerOption:
        """This option as ``command`` reads it."""
        return dataclasses.replace(self, **self.variants[command]) if command in self.variants else self

    @property
    def default(self) -> Any:
        if not self.sets:
            return self.own_default
        section, _, name = self.sets.partition(".")
        return _field_default({"slo": SLO, "search": SearchSettings, "plan": PlanSLO}[section], name)


# Name (flag and sweep key) -> option. The order is the order of the commands' parameters.
PLANNER_OPTIONS: dict[str, PlannerOption] = {
    "tbt_slo": PlannerOption("slo.tbt_s", float, "TBT limit (s) on the --tbt-quantile of all TBT gaps.", SLO_PANEL,
                             sweep_modes=("run", "capacity")),
    "tbt_quantile": PlannerOption("slo.tbt_quantile", float, "Percentile of TBT held to --tbt-slo.", SLO_PANEL),
    "sched_delay_slo": PlannerOption("slo.sched_delay_s", float, "Limit (s) on the scheduling-delay percentile.",
                                     SLO_PANEL),
    "sched_delay_quantile": PlannerOption("slo.sched_delay_quantile", float, "Percentile of scheduling delay.",
                                          SLO_PANEL),
    "ttft_slo": PlannerOption("slo.ttft_s", float, "Optional limit (s) on the --ttft-quantile of TTFT.", SLO_PANEL,
                              commands=("capacity", "plan"), sweep_modes=("run", "capacity"),
                              variants={"plan": {"sets": "plan.ttft_s", "help": "TTFT (s) a request must meet."}}),
    "tpot_slo": PlannerOption("slo.tpot_s", float, "Optional limit (s) on the --tpot-quantile of the requests' "
                              "TPOT (mean gap after the first token).", SLO_PANEL, commands=("capacity", "plan"),
                              variants={"plan": {"sets": "plan.tpot_s", "help": "TPOT (s) a request must meet."}}),
    "attainment": PlannerOption("plan.attainment", float, "Share of requests that must meet both (DistServe's "
                                "goodput): 0.99 for P99.", SLO_PANEL, commands=("plan",), sweep_modes=()),
    "ttft_quantile": PlannerOption("slo.ttft_quantile", float, "Percentile of TTFT held to --ttft-slo.", SLO_PANEL),
    "tpot_quantile": PlannerOption("slo.tpot_quantile", float, "Percentile of TPOT held to --tpot-slo.", SLO_PANEL),
    "min_goodput": PlannerOption("slo.min_goodput", float, "Optional: minimum share of requests with TTFT <= "
                                 "--goodput-ttft-slo and max TBT <= --tbt-slo (TPOT <= --goodput-tpot-slo where "
                                 "given); with --criterion goodput, the target (default 0.9).", SLO_PANEL),
    "goodput_ttft_slo": PlannerOption("slo.goodput_ttft_s", float, "TTFT (s) a request must meet to count in goodput "
                                      "(simulate capacity: --ttft-slo's where that is given and goodput is only "
                                      "reported, not judged by --min-goodput or --criterion goodput).",
                                      SLO_PANEL),
    "goodput_tpot_slo": PlannerOption("slo.goodput_tpot_s", float, "TPOT (s) a request must meet to count in goodput "
                                      "(default: its max TBT <= --tbt-slo; with --criterion goodput, TPOT <= "
                                      "--tbt-slo).", SLO_PANEL),
    "criterion": PlannerOption("slo.criterion", str, "What a trial must meet: tbt (Sarathi-Serve: P99 TBT and P50 "
                               "scheduling delay limits) or goodput (DistServe: --min-goodput of requests meet both "
                               "--goodput-ttft-slo and --goodput-tpot-slo).", SLO_PANEL),
    "seeds": PlannerOption("", int, "Independent searches (seeds seed..seed+n-1); the spread is reported.",
                           SEARCH_PANEL, key="num_seeds", own_default=1),
    "rel_tol": PlannerOption("search.rel_tol", float, "Stop bisecting at this relative gap.", SEARCH_PANEL,
                             commands=("capacity", "plan"),
                             variants={"plan": {"sets": "", "own_default": PLAN_REL_TOL, "panel": None,
                                                "help": "Each capacity search stops at this relative gap."}}),
    "qps_start": PlannerOption("search.qps_start", float, "First trial's QPS (default: --qps).", SEARCH_PANEL),
    "min_qps": PlannerOption("search.min_qps", float, "Report capacity 0 below this QPS.", SEARCH_PANEL),
    "max_qps": PlannerOption("search.max_qps", float, "Search ceiling.", SEARCH_PANEL),
    "max_trials": PlannerOption("search.max_trials", int, "Trials per seed at most.", SEARCH_PANEL),
    "early_exit": PlannerOption("search.early_exit", bool, "Stop trials that are certain to fail (same verdicts, "
                                "sooner).", SEARCH_PANEL),
    "tbt_early_exit": PlannerOption("search.tbt_early_exit", bool, "With --early-exit, also stop trials certain to "
                                    "miss the TBT limit; off, they keep their latency figures.", SEARCH_PANEL),
    "users": PlannerOption("search.users", bool, "Search the most closed-loop users (each sends its next request when "
                           "its last ends, as vllm bench serve --max-concurrency) meeting the SLO instead of the "
                           "Poisson rate; the first trial's is --concurrency (default 16).", SEARCH_PANEL),
    "max_users": PlannerOption("search.max_users", int, "With --users, the search ceiling.", SEARCH_PANEL),
}

# Sweep-file key -> option name (the options a sweep file may hold).
SWEEP_KEYS: dict[str, str] = {option.key or name: name for name, option in PLANNER_OPTIONS.items()
                              if option.sweep_modes}


def options_of(command: str) -> list[str]:
    """The planner options ``command`` takes as flags, in table order."""
    return [name for name, option in PLANNER_OPTIONS.items() if command in option.commands]


def fields_set(command: str, values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Option ``values`` (by name) as ``command`` reads them: section -> dataclass field -> value."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        option = PLANNER_OPTIONS[name].for_command(command)
        if option.sets:
            section, _, field = option.sets.partition(".")
            out.setdefault(section, {})[field] = value
    return out


def slo_and_settings(values: Mapping[str, Any]) -> tuple[SLO, SearchSettings]:
    """The capacity SLO and search settings that option ``values`` (by name; missing ones at
    their defaults) set. Raises the dataclasses' :class:`ConfigError` for an invalid value."""
    fields = fields_set("capacity", values)
    return SLO(**fields.get("slo", {})), SearchSettings(**fields.get("search", {}))


def plan_slo(values: Mapping[str, Any]) -> PlanSLO:
    """The plan's SLO that option ``values`` (by name) set."""
    return PlanSLO(**fields_set("plan", values).get("plan", {}))


# A gRPC server (Ray's GCS at host:port, its client server at ray://host:port) answers HTTP/2's client preface with
# a SETTINGS frame: a 9-byte frame header whose fourth byte is the frame type, 0x4.
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _answers_http2(sock: Any, timeout_s: float) -> bool:
    """Whether the server on ``sock`` answers HTTP/2's preface with a SETTINGS frame within ``timeout_s``."""
    import time

    header, deadline = b"", time.monotonic() + timeout_s  # (sendall runs under create_connection's timeout_s)
    try:
        sock.sendall(_HTTP2_PREFACE)
        while len(header) < 4 and time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))  # the whole reply within timeout_s
            chunk = sock.recv(9 - len(header))
            if not chunk:
                break
            header += chunk
    except OSError:  # a timeout (TimeoutError) or a reset
        return False
    return len(header) >= 4 and header[3] == 0x4


def probe_address(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a ``host:port`` (or ``ray://host:port``) that takes no TCP connection within
    ``timeout_s``, or takes one but does not speak gRPC as Ray does (an HTTP server, a database: Ray would retry it
    for minutes); names Ray resolves itself (``auto``, ``local``) pass untouched, and with ``RAY_USE_TLS`` set the
    gRPC check is skipped (the server then speaks TLS first)."""
    import os
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host:
        return
    if host.startswith("[") and host.endswith("]"):  # an IPv6 literal, [::1]:6379, as Ray parses it
        host = host[1:-1]
    if not port.isdigit():
        raise ConfigError("--ray-address", f"{address!r}: the port {port!r} is not a number",
                          "pass host:port (e.g. 10.0.0.1:6379) or ray://host:10001")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    except OSError as exc:
        raise ConfigError("--ray-address", f"nothing answers at {address!r} ({exc.strerror or exc})",
                          "start the cluster (`ray start --head`) or pass its address, or 'local'") from None
    with sock:
        tls = os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true")
        if not tls and not _answers_http2(sock, timeout_s):
            raise ConfigError("--ray-address", f"something answers at {address!r} but not as a Ray cluster does "
                              "(no gRPC reply)", "pass the head's GCS address (host:6379 by default, as `ray start "
                              "--head` prints it) or ray://host:10001, or 'local'")


def connect_ray(ray: Any, address: str) -> None:
    """``ray.init(address=...)`` for ``--ray-address``, a malformed or unreachable address refused
    in one line (Ray raises ValueError or ConnectionError, which would end in a traceback). A
    ``host:port`` nobody answers on, or that answers but not as Ray's gRPC servers do, is refused after a 5 s
    probe (:func:`probe_address`): Ray itself retries for minutes."""
    probe_address(address)
    try:
        ray.init(address=address, log_to_driver=False)
    except (ValueError, ConnectionError) as exc:
        raise ConfigError("--ray-address", f"cannot connect to {address!r} ({' '.join(str(exc).split())})",
                          "pass a Ray cluster address (host:port or ray://host:port), or 'local'; a cluster with "
                          "token authentication needs RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN or "
                          "~/.ray/auth_token) here too") from None


def refuse_unread_planner_options(config: RunConfig, planner: dict, typed: set[str] | frozenset[str] = frozenset(),
                                  run_flags: set[str] | frozenset[str] = frozenset(), qps_start: bool = True) -> None:
    """Refuse search and SLO options that this search would not read (given, they would change
    nothing), in a capacity search (``simulate capacity``, a capacity sweep's points); ``typed``: the planner options
    typed on the command line (or given by a sweep point), ``run_flags`` the run options given: a value equal to the
    default, typed, is refused as any other; ``qps_start``: also a --qps-start beside a --qps (a sweep says it in its
    own terms)."""
    from simulator.config.run_config import WorkloadConfig

    def given(name: str) -> bool:  # typed, or (a --config file, a caller's dict) away from the default
        return name in typed or (planner.get(name) is not None
                                 and planner[name] != PLANNER_OPTIONS[name].for_command("capacity").default)

    if "tbt_early_exit" in typed or given("tbt_early_exit"):  # read only by the TBT criterion's early exit
        flag = "--tbt-early-exit" if planner["tbt_early_exit"] else "--no-tbt-early-exit"
        if planner.get("early_exit") is False:
            raise ConfigError(flag, f"says whether trials stop early on the TBT limit, but --no-early-exit runs every "
                              f"trial to the end, so {flag} would do nothing", f"drop {flag} or --no-early-exit")
        if planner.get("criterion") == "goodput":
            raise ConfigError(flag, f"says whether trials stop early on the TBT limit, but --criterion goodput stops "
                              f"them on the TTFT goodput alone, so {flag} would do nothing",
                              f"drop {flag}, or use --criterion tbt")

    if qps_start and given("qps_start") and ("qps" in run_flags or config.workload.qps != WorkloadConfig().qps):
        raise ConfigError("--qps-start", f"--qps {config.workload.qps:g} sets the first trial's rate too, and "
                          f"--qps-start {planner['qps_start']:g} would win over it", "give one of them")
    if planner.get("criterion") == "goodput":  # the goodput target alone judges a trial
        for name in ("sched_delay_slo", "sched_delay_quantile", "tbt_quantile"):
            if given(name):
                flag = "--" + name.replace("_", "-")
                raise ConfigError(flag, f"--criterion goodput judges a trial by its goodput alone, so {flag} "
                                  "would do nothing", f"drop {flag}, or use --criterion tbt")
        # A good request's TPOT limit is --goodput-tpot-slo where given, else --tbt-slo (SLO.__post_init__): with
        # both, no figure of the search reads --tbt-slo.
        if given("tbt_slo") and given("goodput_tpot_slo"):
            raise ConfigError("--tbt-slo", f"--criterion goodput holds a good request's TPOT to --goodput-tpot-slo "
                              f"{planner['goodput_tpot_slo']:g}, so --tbt-slo would do nothing",
                              "drop --tbt-slo (it is the TPOT limit only without --goodput-tpot-slo)")
