"""A router with nothing to route by is refused however it is given: a flag, a --config file, a sweep point.

prefix_aware reads the replicas' prefix caches of the requests' block hashes, session reads the requests' sessions;
without them every request goes to the least outstanding replica, a run labelled with a router it never ran. Only
`simulate run --router X` was refused (simulator.cli.options.check_trace_given looked at the flags typed); a
config.json holding "router": "prefix_aware" on ShareGPT, and a sweep's grid point, ran silently.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.planning.sweep import build_spec
from simulator.workload.prefix_traces import check_router

runner = CliRunner()
SMALL = {"model": "mistral-7b", "num_requests": 6, "replicas": 2}
WEKA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "weka_claude_code" / "sessions"


@pytest.fixture
def traces(tmp_path: Path) -> dict[str, Path]:
    plain = tmp_path / "plain.csv"
    plain.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{i * 0.5},{100 + i},{4}\n" for i in range(6)))
    mooncake = tmp_path / "hashed.jsonl"
    mooncake.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 600, "output_length": 8,
                                            "hash_ids": [0, i + 1]}) + "\n" for i in range(6)))
    session = tmp_path / "trace_0001.json"
    session.write_text(json.dumps({"block_size": 64, "hash_id_scope": "local", "requests": [
        {"t": 2.0 * i, "in": 200 + 64 * i, "out": 8, "hash_ids": list(range(3 + i)), "think_time": 1.0}
        for i in range(4)]}))
    return {"plain": plain, "mooncake": mooncake, "session": session}


def _message(config: RunConfig) -> str:
    with pytest.raises(ConfigError) as err:
        check_router(config)
    return str(err.value)


def test_a_run_config_file_with_a_router_that_reads_nothing_is_refused(tmp_path: Path) -> None:
    """`simulate run --config` with "router": "prefix_aware" on ShareGPT ran as least_outstanding; now it gets the
    very line `--router prefix_aware` gets."""
    config = RunConfig().replace(router="prefix_aware", num_replicas=4, workload__num_requests=6)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    from_file = runner.invoke(app, ["run", "--config", str(path), "--no-progress", "--json"])
    typed = runner.invoke(app, ["run", "--router", "prefix_aware", "--replicas", "4", "--num-requests", "6",
                                "--no-progress", "--json"])
    assert isinstance(from_file.exception, ConfigError), from_file.output
    assert str(from_file.exception).startswith("--router: prefix_aware routes by cached prefix, but the sharegpt "
                                               "workload names no prompt blocks")
    assert str(from_file.exception) == str(typed.exception)
    capacity = runner.invoke(app, ["capacity", "--config", str(path)])
    assert str(capacity.exception) == str(typed.exception)
    ok = runner.invoke(app, ["run", "--config", str(path), "--router", "least_outstanding", "--no-progress", "--json"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize(("base", "router", "needle"), [
    ({}, "prefix_aware", "prefix_aware routes by cached prefix, but the sharegpt workload names no prompt blocks"),
    ({}, "session", "session keeps each session on one replica, but the sharegpt workload names no sessions"),
    ({"trace": "plain", "arrival": "trace"}, "prefix_aware", "prefix_aware routes by cached prefix, but --trace"),
    ({"trace": "mooncake", "arrival": "trace"}, "session", "session keeps each session on one replica, but --trace"),
    ({"trace": "mooncake", "arrival": "trace", "scheduler": "vllm"}, "prefix_aware",
     "prefix_aware routes to the replica that has the longest prefix cached, but prefix caching is off"),
])
def test_each_sweep_point_is_refused_with_the_runs_message(traces: dict[str, Path], base: dict, router: str,
                                                           needle: str) -> None:
    """A grid of routers built every point: the prefix_aware one ran as least outstanding, its row a copy of the
    least_outstanding row under another name. Now the point is refused as it is built, with the run's line."""
    base = {**SMALL, **{k: str(traces[v]) if k == "trace" else v for k, v in base.items()}}
    with pytest.raises(ConfigError) as err:
        build_spec({"mode": "run", "base": base, "grid": {"router": ["least_outstanding", router]}})
    run_line = _message(build_spec({"mode": "run", "base": base}).points[0].config.replace(router=router))
    assert str(err.value) == f"sweep.grid.router={router}: {run_line}"
    assert needle in run_line
    with pytest.raises(ConfigError, match=f"^sweep.base: --router: {needle}"):  # the base's router alike
        build_spec({"mode": "capacity", "base": {**base, "router": router}})


def test_a_router_with_something_to_read_is_kept(traces: dict[str, Path]) -> None:
    base = {**SMALL, "arrival": "trace"}
    spec = build_spec({"mode": "run", "base": {**base, "trace": str(traces["session"])},
                       "grid": {"router": ["least_outstanding", "prefix_aware", "session"]}})
    assert [p.config.router for p in spec.points] == ["least_outstanding", "prefix_aware", "session"]
    check_router(RunConfig().replace(router="prefix_aware", num_replicas=2, workload__trace=str(traces["mooncake"])))
    check_router(RunConfig().replace(router="prefix_aware"))  # one replica: no choice to make (its flag is refused)


def test_a_disaggregated_prefix_aware_refusal_suggests_session_only_where_the_workload_has_sessions(
        traces: dict[str, Path]) -> None:
    """The hint said `--router session or least_outstanding` on ShareGPT too, where --router session is refused."""
    pools = RunConfig().replace(prefill_pool="2x(tp=1)", decode_pool="1x(tp=1)", router="prefix_aware",
                                scheduler__prefix_caching=False)
    for workload, with_sessions in ((None, False), (traces["mooncake"], False), (traces["session"], True)):
        line = _message(pools.replace(workload__trace=None if workload is None else str(workload)))
        assert "prefix caching is off in the prefill pool, so prefix_aware has no cache to read" in line
        assert ("--router session" in line) == with_sessions, line
        if with_sessions:  # the hint's router is taken there
            check_router(pools.replace(router="session", workload__trace=str(workload)))
        else:  # and refused where it is not given
            with pytest.raises(ConfigError, match="names no sessions"):
                check_router(pools.replace(router="session", workload__trace=None if workload is None else
                                           str(workload)))
    typed = runner.invoke(app, ["run", "--prefill-pool", "2x", "--decode-pool", "1x", "--router", "prefix_aware",
                                "--no-progress"])
    # (vllm-v1's prefill pool caches by default: ShareGPT is refused for naming no blocks, and no session router hinted)
    assert str(typed.exception) == _message(pools.replace(scheduler__prefix_caching=None))
    assert "names no prompt blocks" in str(typed.exception) and "--router session" not in str(typed.exception)


@pytest.mark.skipif(not WEKA.is_dir(), reason="the Weka Claude Code sessions are not in ../shared")
def test_the_claude_code_sessions_take_both_routers() -> None:
    config = RunConfig().replace(num_replicas=2, workload__trace=str(WEKA), workload__arrival="trace")
    for router in ("prefix_aware", "session"):
        check_router(config.replace(router=router))


def test_the_run_header_names_the_router_where_it_has_a_choice() -> None:
    """Two runs that differ in --router alone printed the same header."""
    from simulator.cli.run import run_title

    assert " · 2 replicas behind least_outstanding · " in run_title(RunConfig(num_replicas=2,
                                                                              router="least_outstanding"), {})
    assert " · 1 replica · " in run_title(RunConfig(), {})  # one replica: no choice, no router said
    pools = RunConfig().replace(prefill_pool="2x(tp=1)", decode_pool="1x(tp=1)", router="least_outstanding")
    assert " · prefill workers by least_outstanding · " in run_title(pools, {})
    assert "prefill workers by" not in run_title(pools.replace(prefill_pool="1x(tp=1)", router="round_robin"), {})


def test_router_help_says_how_least_outstanding_breaks_ties() -> None:
    from simulator.config.options import RUN_OPTIONS
    from simulator.engine.routers import least_outstanding

    text = RUN_OPTIONS["router"][2]
    assert "a tie goes to the lowest replica index" in text and "prefill worker" in text
    assert least_outstanding([2, 1, 1], 0, None) == 1  # what it says  # type: ignore[arg-type]
