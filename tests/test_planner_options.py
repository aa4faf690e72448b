"""The planner's one option table: each SLO and search option is declared once, and capacity,
plan and sweep files take exactly the options the table gives them, with its defaults."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError
from simulator.config.options import OPTION_ALIASES, RUN_OPTIONS
from simulator.planning import capacity as capacity_mod
from simulator.planning import plan as plan_mod
from simulator.planning.options import (
    PLANNER_OPTIONS,
    SLO,
    SWEEP_KEYS,
    PlanSLO,
    SearchSettings,
    options_of,
    slo_and_settings,
)
from simulator.planning.sweep import build_spec

runner = CliRunner()
COMMANDS = ("capacity", "plan")
HOLDERS = {"slo": SLO, "search": SearchSettings, "plan": PlanSLO}

# A valid value other than the default, per option (a changed value must reach its field).
CHANGED: dict[str, Any] = {
    "tbt_slo": 0.3, "tbt_quantile": 95.0, "sched_delay_slo": 1.5, "sched_delay_quantile": 90.0, "ttft_slo": 1.25,
    "tpot_slo": 0.04, "attainment": 0.9, "ttft_quantile": 90.0, "min_goodput": 0.8, "goodput_ttft_slo": 3.0,
    "goodput_tpot_slo": 0.07, "tpot_quantile": 90.0, "criterion": "goodput", "seeds": 2, "rel_tol": 0.1, "qps_start": 3.0, "min_qps": 0.05,
    "max_qps": 500.0, "max_trials": 12, "early_exit": False, "tbt_early_exit": False, "users": True, "max_users": 64,
}
# What an option needs beside it to mean anything (alone it is refused: a percentile held to no limit).
NEEDS: dict[str, dict[str, Any]] = {"ttft_quantile": {"ttft_slo": CHANGED["ttft_slo"]},
                                    "tpot_quantile": {"tpot_slo": CHANGED["tpot_slo"]}, "max_users": {"users": True}}


def _params(command: str) -> dict[str, Any]:
    """The click parameters of ``simulate COMMAND``, by name."""
    return {p.name: p for p in typer.main.get_command(app).commands[command].params}


def test_each_dataclass_field_is_set_by_exactly_one_option_per_command() -> None:
    for command in (*COMMANDS, "sweep"):
        setters: dict[str, list[str]] = {}
        for name, option in PLANNER_OPTIONS.items():
            resolved = option.for_command("capacity" if command == "sweep" else command)
            if resolved.sets:
                setters.setdefault(resolved.sets, []).append(name)
        assert all(len(names) == 1 for names in setters.values()), setters
    every_field = {f"{section}.{f.name}" for section, holder in HOLDERS.items() for f in dataclasses.fields(holder)}
    declared = {o.for_command(c).sets for o in PLANNER_OPTIONS.values() for c in COMMANDS}
    assert every_field <= declared  # a new SLO or search field must be added to the table


def test_sweep_keys_are_one_per_option_and_clash_with_no_run_option() -> None:
    assert len(SWEEP_KEYS) == len(set(SWEEP_KEYS.values()))
    run_names = set(RUN_OPTIONS) | {alias for aliases in OPTION_ALIASES.values() for alias in aliases}
    assert not (set(SWEEP_KEYS) | set(PLANNER_OPTIONS)) & run_names
    assert SWEEP_KEYS["num_seeds"] == "seeds"


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_takes_exactly_its_options_with_the_tables_defaults(command: str) -> None:
    params = _params(command)
    for name, option in PLANNER_OPTIONS.items():
        if command not in option.commands:
            assert name not in params, f"{command} takes --{name} but the table says it should not"
            continue
        resolved = option.for_command(command)
        param = params[name]
        assert param.opts[0] == "--" + name.replace("_", "-")
        assert param.default == resolved.default
        assert param.help == resolved.help
        assert getattr(param, "rich_help_panel", None) == resolved.panel


def test_capacity_hands_its_flags_to_the_slo_and_the_search(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def no_search(config, slo, settings, num_seeds, **_):  # noqa: ANN001, ANN003, ANN202
        seen.update(slo=slo, settings=settings, num_seeds=num_seeds)
        raise KeyboardInterrupt  # stop before any trial; the command answers code 130

    monkeypatch.setattr(capacity_mod, "find_capacity", no_search)
    names = options_of("capacity")
    # Under the goodput criterion the TBT and delay limits judge nothing (refused): each criterion's own flags.
    # The TBT early exit is read only by the TBT criterion's early exit (refused with --no-early-exit), and
    # --tbt-slo only as the good requests' TPOT limit where --goodput-tpot-slo is not given (refused beside it).
    unread_by_goodput = {"tbt_quantile", "sched_delay_slo", "sched_delay_quantile", "tbt_early_exit", "tbt_slo"}
    # The rate search's settings and the users search's are each refused in the other search.
    users_only, rate_only = {"users", "max_users"}, {"qps_start", "min_qps", "max_qps"}
    for given in ([n for n in names if n not in ("criterion", "tbt_early_exit", *users_only)],
                  [n for n in names if n not in ("criterion", "early_exit", *users_only)],
                  [n for n in names if n not in unread_by_goodput | users_only],
                  [n for n in names if n not in ("criterion", "tbt_early_exit", *rate_only)]):
        args = [arg for name in given for arg in (
            [f"--{'' if CHANGED[name] else 'no-'}{name.replace('_', '-')}"] if isinstance(CHANGED[name], bool)
            else [f"--{name.replace('_', '-')}", str(CHANGED[name])])]
        res = runner.invoke(app, ["capacity", *args, "--workers", "1", "--json"])
        assert res.exit_code == 130, res.output
        expected_slo, expected_settings = slo_and_settings({n: CHANGED[n] for n in given})
        assert seen["slo"] == expected_slo and seen["settings"] == expected_settings
        assert seen["num_seeds"] == CHANGED["seeds"]
    for name in names:  # and every changed value is not a default: each flag really moved its field
        assert CHANGED[name] != PLANNER_OPTIONS[name].default


def test_plan_hands_its_flags_to_its_slo(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    seen: dict[str, Any] = {}

    def no_plan(config, load_qps, slo, space, prices, limits, rel_tol, **_):  # noqa: ANN001, ANN003, ANN202
        seen.update(slo=slo, rel_tol=rel_tol)
        raise KeyboardInterrupt

    monkeypatch.setattr(plan_mod, "plan", no_plan)
    args = [a for name in options_of("plan") for a in (f"--{name.replace('_', '-')}", str(CHANGED[name]))]
    res = runner.invoke(app, ["plan", *args, "--out", str(tmp_path / "p")])
    assert res.exit_code == 130, res.output
    assert seen == {"slo": PlanSLO(ttft_s=1.25, tpot_s=0.04, attainment=0.9), "rel_tol": 0.1}


def test_sweep_files_take_each_capacity_key_and_refuse_it_where_it_does_not_apply() -> None:
    for key, name in SWEEP_KEYS.items():
        option = PLANNER_OPTIONS[name]
        spec = build_spec({"mode": "capacity", "base": {key: CHANGED[name], **NEEDS.get(name, {})}})
        assert spec.points[0].options[key] == CHANGED[name]
        assert spec.points[0].options.keys() == SWEEP_KEYS.keys()  # every key, at its default unless given
        if "run" not in option.sweep_modes:
            with pytest.raises(ConfigError, match="only applies to mode = capacity"):
                build_spec({"mode": "run", "base": {key: CHANGED[name], **NEEDS.get(name, {})}})
    for name in set(PLANNER_OPTIONS) - set(SWEEP_KEYS.values()):  # plan's own options are no sweep keys
        with pytest.raises(ConfigError, match="unknown key"):
            build_spec({"mode": "capacity", "base": {name: CHANGED[name]}})


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_max_qps_is_named_as_itself(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 value: str) -> None:
    # NaN fails every comparison: the range check blamed --min-qps for --max-qps nan.
    import sys

    from simulator.cli.app import main

    monkeypatch.setattr(sys, "argv", ["simulate", "capacity", "--max-qps", value])
    with pytest.raises(SystemExit) as done:
        main()
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2 and err.startswith("error: --max-qps:") and "finite" in err


def test_a_goodput_target_is_shown_with_the_digits_it_was_given() -> None:
    """--min-goodput 0.999 read "goodput >= 100%" (``:.0%``), as if every request had to meet it, and plan's
    --attainment 0.999 likewise (plan's table: test_plan)."""
    from simulator.planning.split import GoodputSLO

    assert "goodput >= 99.9% (" in SLO(min_goodput=0.999).describe()
    assert SLO(min_goodput=0.9).describe().endswith("goodput >= 90% (TTFT <= 2s, max TBT <= 0.2s)")
    assert PlanSLO(attainment=0.999).describe().startswith("99.9% of requests")
    assert GoodputSLO(attainment=0.999).describe().startswith("99.9% of requests")
