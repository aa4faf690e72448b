"""Sweeps: validation before running, per-point files, resume, failures recorded, backends agree."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pandas as pd
import pytest
from helpers import group_gone, interrupt_when
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError
from simulator.planning.sweep import build_spec, load_sweep_file, parse_cli_grid, point_path, run_sweep
from simulator.util.text import count

runner = CliRunner()

SMALL = {"model": "mistral-7b", "num_requests": 24, "workload": "fixed", "prompt_tokens": 64, "output_tokens": 8}


def small_spec(grid: dict | None = None, mode: str = "run", **base):
    grid = grid or {"scheduler": ["vllm", "sarathi"], "qps": [2.0, 8.0]}
    varied = {name for key in grid for name in key.split(",")}  # (a base key the grid varies is refused)
    return build_spec({"mode": mode, "base": {k: v for k, v in {**SMALL, **base}.items() if k not in varied},
                       "grid": grid})


def point_files(out: Path) -> dict[str, float]:
    return {p.name: p.stat().st_mtime_ns for p in (out / "points").glob("*.json")}


def test_points_are_the_grid_product_and_keys_are_semantic():
    spec = small_spec()
    assert len(spec.points) == 4
    assert [(p.params["scheduler"], p.params["qps"]) for p in spec.points] == [
        ("vllm", 2.0), ("vllm", 8.0), ("sarathi", 2.0), ("sarathi", 8.0)]
    # Spelling a default explicitly, or an int for a float, does not change a point's identity.
    same = small_spec(grid={"scheduler": ["vllm", "sarathi"], "qps": [2, 8]}, seed=0, gpu_memory_utilization=0.9)
    assert [p.key for p in same.points] == [p.key for p in spec.points]


def test_zipped_keys_vary_together():
    spec = small_spec(grid={"tbt_slo,chunk_size": [[0.1, 256], [0.5, 1024]], "scheduler": ["sarathi"]})
    assert [(p.options["tbt_slo"], p.config.scheduler.chunk_size) for p in spec.points] == [(0.1, 256), (0.5, 1024)]


@pytest.mark.parametrize("data,key", [
    ({"grid": {"schedular": ["vllm"]}}, "sweep.grid.schedular"),
    ({"base": {"modle": "mistral-7b"}}, "sweep.base.modle"),
    ({"gird": {"qps": [1]}}, "sweep.gird"),
    ({"grid": {"scheduler": ["vllm", "fifo"]}}, "sweep.grid.scheduler"),
    ({"grid": {"qps": [1, "fast"]}}, "sweep.grid.qps"),
    ({"grid": {"tp": [1, 3]}, "base": {"model": "mistral-7b"}}, "sweep.grid.tp"),
    ({"grid": {"qps": []}}, "sweep.grid.qps"),
    ({"grid": {"tbt_slo,chunk_size": [[0.1]]}}, "sweep.grid.tbt_slo,chunk_size"),
    ({"mode": "run", "grid": {"num_seeds": [2]}}, "sweep.grid.num_seeds"),
    ({"mode": "capacity", "grid": {"tbt_quantile": [99, 0]}}, "tbt_quantile"),
    ({"mode": "fast"}, "sweep.mode"),
])
def test_bad_sweeps_are_refused_naming_the_key(data, key):
    with pytest.raises(ConfigError) as err:
        build_spec(data)
    assert key in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_key_refused_before_any_point_runs(tmp_path: Path):
    sweep = tmp_path / "bad.toml"
    sweep.write_text('mode = "run"\n[base]\nnum_requests = 10\n[grid]\nqps = [1, 2]\nchunksize = [256]\n')
    out = tmp_path / "out"
    result = runner.invoke(app, ["sweep", str(sweep), "--out", str(out), "--no-progress"])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError) and "sweep.grid.chunksize" in str(result.exception)
    assert not out.exists()


def test_resume_runs_only_missing_points(tmp_path: Path):
    out = tmp_path / "out"
    # A "killed" sweep: only the qps=2 half finished.
    partial = run_sweep(small_spec(grid={"scheduler": ["vllm", "sarathi"], "qps": [2.0]}), out)
    assert partial.num_run == 2
    before = point_files(out)
    (out / "points" / "deadbeef.json.tmp").write_text("{half a point")  # debris of a kill mid-write
    full = run_sweep(small_spec(), out)
    assert (full.num_run, full.num_skipped, full.num_failed) == (2, 2, 0)
    after = point_files(out)
    assert {k: after[k] for k in before} == before  # finished points were not rerun
    again = run_sweep(small_spec(), out)
    assert again.num_run == 0 and point_files(out) == after
    fresh = run_sweep(small_spec(), tmp_path / "fresh")
    pd.testing.assert_frame_equal(full.table, fresh.table)
    assert list(full.table["status"]) == ["ok"] * 4
    assert full.table_path.exists() and len(pd.read_csv(full.table_path)) == 4
    as_parquet = run_sweep(small_spec(), out, fmt="parquet")  # resumed in another format: one table, not two
    assert as_parquet.num_run == 0 and as_parquet.table_path.suffix == ".parquet"
    assert not (out / "results.csv").exists() and len(pd.read_parquet(as_parquet.table_path)) == 4


def test_failing_point_records_its_error_and_the_sweep_goes_on(tmp_path: Path):
    # Llama-2-70B does not fit one A100-40GB: that point fails at run time, the others run.
    spec = small_spec(grid={"model": ["mistral-7b", "llama-2-70b"], "qps": [2.0]}, gpu="a100-40gb")
    result = run_sweep(spec, tmp_path)
    assert result.num_failed == 1
    table = result.table.set_index("model")
    assert table.loc["mistral-7b", "status"] == "ok" and table.loc["llama-2-70b", "status"] == "error"
    assert "does not fit" in table.loc["llama-2-70b", "error"]
    doc = json.loads(point_path(tmp_path, spec.points[1].key).read_text())
    assert doc["status"] == "error" and doc["params"]["model"] == "llama-2-70b"
    # A rerun does not retry it unless asked.
    assert run_sweep(spec, tmp_path).num_run == 0
    assert run_sweep(spec, tmp_path, retry_failed=True).num_run == 1


def test_cli_sweep_with_a_failed_point_exits_non_zero(tmp_path: Path):
    # Llama-2-70B does not fit one A100-40GB: that point fails at run time; the sweep must not read as done.
    args = ["sweep", "--grid", "model=mistral-7b,llama-2-70b", "--gpu", "a100-40gb", "--num-requests", "8",
            "--workload", "fixed", "--prompt-tokens", "32", "--output-tokens", "4", "--out", str(tmp_path),
            "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "1 failed" in result.output and "point 1:" in result.output
    rerun = runner.invoke(app, args)  # resumed: the failed point is skipped, still not done
    assert rerun.exit_code == 1 and "ran 0 points" in rerun.output


@pytest.mark.parametrize("where", ["base", "grid", "flag"])
def test_cli_sweep_refuses_a_missing_trace_before_any_point_runs(tmp_path: Path, where: str):
    missing = tmp_path / "no-such-trace.csv"
    sweep = tmp_path / "sweep.toml"
    base = f'trace = "{missing}"\n' if where == "base" else ""
    grid = f'trace = ["{missing}"]\n' if where == "grid" else "qps = [1, 2]\n"
    sweep.write_text(f"[base]\nnum_requests = 8\n{base}[grid]\n{grid}")
    out = tmp_path / "out"
    flags = ["--trace", str(missing)] if where == "flag" else []
    result = runner.invoke(app, ["sweep", str(sweep), *flags, "--out", str(out), "--no-progress"])
    assert isinstance(result.exception, ConfigError) and "no such file" in str(result.exception)
    assert {"base": "sweep.base.trace", "grid": "sweep.grid.trace", "flag": "--trace"}[where] in str(result.exception)
    assert not (out / "points").exists()


def test_worker_count_does_not_change_the_table(tmp_path: Path):
    one = run_sweep(small_spec(), tmp_path / "one", workers=1)
    two = run_sweep(small_spec(), tmp_path / "two", workers=2)
    pd.testing.assert_frame_equal(one.table, two.table)


def test_capacity_mode_records_capacity_and_trials(tmp_path: Path):
    spec = small_spec(grid={"scheduler": ["sarathi"]}, mode="capacity", qps_start=4.0, rel_tol=0.3, tbt_slo=0.5)
    assert spec.points[0].config.workload.num_requests == SMALL["num_requests"]  # the base's own value wins
    result = run_sweep(spec, tmp_path)
    row = result.table.iloc[0]
    assert row["status"] == "ok" and row["capacity_qps"] > 0
    doc = json.loads(point_path(tmp_path, spec.points[0].key).read_text())
    assert doc["trials"] and {"qps", "passed", "tbt_s_p99"} <= set(doc["trials"][0])
    assert build_spec({"mode": "capacity"}).points[0].config.workload.num_requests == 2048


def test_a_capacity_point_whose_model_does_not_fit_records_an_error(tmp_path: Path):
    # It recorded status ok and capacity 0, blaming the TBT SLO on a lone decode the replica could never run.
    spec = small_spec(grid={"model": ["llama-3.1-405b"]}, mode="capacity", gpu="l4", tbt_slo=0.2)
    row = run_sweep(spec, tmp_path).table.iloc[0]
    assert row["status"] == "error" and "does not fit" in row["error"]


def test_a_capacity_sweep_refuses_a_qps_its_qps_start_overrides():
    # qps only sets where a rate search starts, and qps_start wins over it: simulate capacity refuses the pair,
    # and the sweep ran it, every row showing a qps that changed nothing.
    with pytest.raises(ConfigError, match=r"^sweep\.base\.qps: qps 3 only sets where each capacity search starts"):
        small_spec(grid={"qps_start": [1.0, 2.0]}, mode="capacity", qps=3.0, tbt_slo=0.5)
    with pytest.raises(ConfigError, match=r"^--qps: "):
        build_spec({"mode": "capacity", "base": SMALL, "grid": {"qps_start": [1.0, 2.0]}}, base_overrides={"qps": 3.0})
    assert len(small_spec(grid={"qps_start": [1.0, 2.0]}, mode="capacity").points) == 2  # either alone is fine
    assert small_spec(grid={"scheduler": ["sarathi"]}, mode="capacity", qps=3.0).points


def test_yaml_and_cli_grid(tmp_path: Path):
    assert parse_cli_grid(["scheduler=vllm,sarathi", "qps=1"]) == {"scheduler": ["vllm", "sarathi"], "qps": ["1"]}
    with pytest.raises(ConfigError, match="--grid"):
        parse_cli_grid(["qps"])
    if importlib.util.find_spec("yaml") is not None:
        path = tmp_path / "s.yaml"
        path.write_text("mode: run\nbase:\n  num_requests: 10\ngrid:\n  qps: [1, 2]\n")
        assert len(build_spec(load_sweep_file(path)).points) == 2


def test_cli_grid_keeps_commas_inside_a_value():
    # An engine spec's terms, a pool's layout and a JSON config carry commas of their own.
    grid = parse_cli_grid(["engine=vllm-2026:cpu_iteration_s=0.02,cpu_per_seq_s=0.001,sglang-2026",
                           "prefill_pool=2x(tp=2,pp=1),1x(tp=4)",
                           'speculative_config={"method":"ngram","num_speculative_tokens":3},off'])
    assert grid == {"engine": ["vllm-2026:cpu_iteration_s=0.02,cpu_per_seq_s=0.001", "sglang-2026"],
                    "prefill_pool": ["2x(tp=2,pp=1)", "1x(tp=4)"],
                    "speculative_config": ['{"method":"ngram","num_speculative_tokens":3}', "off"]}
    spec = build_spec({"base": {"num_requests": 10}}, grid_overrides={"engine": grid["engine"]})
    assert [p.config.engine for p in spec.points] == grid["engine"]


def test_cli_sweep_with_grid_lists_and_run_options(tmp_path: Path):
    out = tmp_path / "out"
    args = ["sweep", "--grid", "scheduler=vllm,sarathi", "--grid", "qps=2,4", "--model", "mistral-7b",
            "--num-requests", "16", "--workload", "fixed", "--prompt-tokens", "32", "--output-tokens", "4",
            "--out", str(out), "--workers", "2", "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 4 and set(table["model"]) == {"mistral-7b"} and (table["status"] == "ok").all()
    rerun = runner.invoke(app, args)
    assert "ran 0 points" in rerun.output


def test_cli_sweep_workers_auto_sizes_by_points_and_their_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import simulator.config.resources

    asked = []

    def auto(max_useful: int, requests_per_process: int) -> int:
        asked.append((max_useful, requests_per_process))
        return 2

    monkeypatch.setattr(simulator.config.resources, "auto_workers", auto)
    args = ["sweep", "--grid", "num_requests=8,24", "--grid", "qps=2,4,8", "--model", "mistral-7b", "--workload",
            "fixed", "--prompt-tokens", "32", "--output-tokens", "4", "--out", str(tmp_path), "--no-progress"]
    assert runner.invoke(app, args).exit_code == 0 and asked == []  # the default is one process
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "auto"), "--workers", "auto"])
    assert result.exit_code == 0, result.output
    assert asked == [(6, 24)]  # one process a point at most; memory for the largest point's run
    assert (pd.read_csv(tmp_path / "auto" / "results.csv")["status"] == "ok").sum() == 6


needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed")


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray instance for the Ray tests of this module (starting one takes seconds)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@needs_ray
def test_ray_and_local_give_identical_tables(tmp_path: Path, ray_local):
    remote = run_sweep(small_spec(), tmp_path / "ray", ray_address="local")
    local = run_sweep(small_spec(), tmp_path / "local", workers=2)
    pd.testing.assert_frame_equal(remote.table, local.table)


@needs_ray
def test_one_sigint_stops_a_ray_sweep_and_resume_runs_the_rest(tmp_path: Path, ray_local):
    import signal
    import threading
    import time

    from simulator.planning.sweep import SweepInterrupted

    spec = small_spec(grid={"qps": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]}, num_requests=150, prompt_tokens=256,
                      output_tokens=256)

    ended = threading.Event()

    def interrupt_after_the_first_point() -> None:
        deadline = time.monotonic() + 60
        while not list((tmp_path / "points").glob("*.json")) and time.monotonic() < deadline and not ended.is_set():
            time.sleep(0.02)
        if not ended.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    # A signal landing after the sweep ended must not stop the test session: the sender stops once the sweep
    # returns, and the harmless handler stays until the sender is done.
    previous = signal.signal(signal.SIGINT, lambda *args: None)
    sender = threading.Thread(target=interrupt_after_the_first_point, daemon=True)
    try:
        sender.start()
        with pytest.raises(SweepInterrupted) as stop:
            run_sweep(spec, tmp_path, ray_address="local")
    finally:
        ended.set()
        sender.join(timeout=70)
        signal.signal(signal.SIGINT, previous)
    done = stop.value.num_done
    assert stop.value.signal_name == "SIGINT" and 1 <= done < 6
    table = pd.read_csv(tmp_path / "results.csv")
    assert (table["status"] == "ok").sum() == done == len(point_files(tmp_path))
    assert ray_local.is_initialized()  # a cluster the sweep did not start is left running
    resumed = run_sweep(spec, tmp_path, ray_address="local")
    assert (resumed.num_run, resumed.num_skipped) == (6 - done, done)


def test_missing_ray_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("no ray")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ConfigError, match="Ray is not installed"):
        run_sweep(small_spec(), tmp_path, ray_address="local")


# Points of ~0.5-1 s each (step by step): at 250 requests with event skipping a point took ~0.1 s, and on a loaded
# machine all six could finish between the first point's file and the signal (the test then saw nothing to resume).
SLOW_POINTS = ["sweep", "--grid", "qps=1,2,3,4,5,6", "--model", "mistral-7b", "--num-requests", "4000",
               "--workload", "fixed", "--prompt-tokens", "256", "--output-tokens", "256", "--workers", "2",
               "--no-fast-forward"]


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_one_signal_stops_a_local_sweep_and_resume_runs_the_rest(tmp_path: Path, how: str):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) or SIGTERM to the
    sweep alone: exit 130, no traceback, no worker left, finished points kept and readable."""
    import subprocess
    import sys

    out = tmp_path / "out"
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    proc = subprocess.Popen([sys.executable, "-m", "simulator", *SLOW_POINTS, "--out", str(out), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=root,
                            start_new_session=True)
    stderr = interrupt_when(proc, lambda: bool(list((out / "points").glob("*.json"))), how)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr
    stderr = " ".join(stderr.split())  # as read, whatever the terminal's width
    assert "interrupted" in stderr and "run the same command again" in stderr
    assert group_gone(proc.pid), "a worker process outlived the sweep"

    kept = point_files(out)
    table = pd.read_csv(out / "results.csv")
    assert 1 <= len(kept) < 6
    assert (table["status"] == "ok").sum() == len(kept) and (table["status"] == "missing").sum() == 6 - len(kept)
    assert not list((out / "points").glob("*.tmp"))
    if how == "sigterm":
        return  # reading and resuming are the same whichever signal stopped it

    plotted = runner.invoke(app, ["plot", "sweep", str(out), "--out", str(tmp_path / "figs")])
    assert plotted.exit_code == 0, plotted.output
    assert f"{len(kept)} of 6 points finished" in " ".join(plotted.output.split())
    assert (tmp_path / "figs" / "latency_vs_qps.png").exists()

    resumed = runner.invoke(app, [*SLOW_POINTS, "--out", str(out), "--no-progress"])
    assert resumed.exit_code == 0, resumed.output
    # (the count's noun follows the number: one point left is "1 point"; how many finished depends on timing)
    assert f"ran {count(6 - len(kept), 'point')} (0 failed), {len(kept)} already done" in resumed.output
    after = point_files(out)
    assert {k: after[k] for k in kept} == kept  # finished points were not rerun
    assert (pd.read_csv(out / "results.csv")["status"] == "ok").all()


def test_results_table_is_current_while_a_sweep_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import simulator.planning.sweep as sweep_module

    seen = []
    real = sweep_module.run_point

    def spy(mode, config_dict, options):  # noqa: ANN001, ANN202
        table = pd.read_csv(tmp_path / "results.csv")  # what a reader sees before this point runs
        seen.append(list(table["status"]))
        return real(mode, config_dict, options)

    monkeypatch.setattr(sweep_module, "run_point", spy)
    run_sweep(small_spec(), tmp_path)
    assert seen == [["missing"] * 4, ["ok"] + ["missing"] * 3, ["ok"] * 2 + ["missing"] * 2, ["ok"] * 3 + ["missing"]]
    table = pd.read_csv(tmp_path / "results.csv")
    assert (table["status"] == "ok").all() and set(table["workload"]) == {"fixed"}  # the parameter, not a summary


def test_a_sweep_folder_is_not_overwritten_by_another_sweep(tmp_path):  # noqa: ANN001
    """Running a different sweep into a folder replaced its sweep.json and results and left the old points
    behind; now it is refused, while the same sweep (or one that only adds points) resumes there."""
    from simulator.config.errors import ConfigError
    from simulator.planning.sweep import build_spec, run_sweep

    base = {"model": "mistral-7b", "num_requests": 8, "workload": "fixed", "prompt_tokens": 32, "output_tokens": 4}
    run_sweep(build_spec({"base": base, "grid": {"qps": [1.0, 2.0]}}), tmp_path)
    again = run_sweep(build_spec({"base": base, "grid": {"qps": [1.0, 2.0, 4.0]}}), tmp_path)  # adds a point
    assert (again.num_run, again.num_skipped) == (1, 2)
    with pytest.raises(ConfigError, match="holds another sweep"):
        run_sweep(build_spec({"base": {**base, "num_requests": 16}, "grid": {"qps": [1.0]}}), tmp_path)


def test_options_added_later_keep_an_older_points_key_at_their_defaults():
    """A sweep folder written before an option existed resumes: the option at its default leaves
    a point's key as it was (the point's options then lacked it)."""
    from simulator.planning.options import PLANNER_OPTIONS, SWEEP_KEYS
    from simulator.planning.sweep import LATER_OPTION_DEFAULTS, point_key

    spec = build_spec({"mode": "capacity", "base": {"model": "mistral-7b"}})
    point = spec.points[0]
    config = point.config
    older = {k: v for k, v in point.options.items() if k not in LATER_OPTION_DEFAULTS}
    assert point_key("capacity", config, point.options) == point_key("capacity", config, older)
    for key, value in LATER_OPTION_DEFAULTS.items():  # each is the option's own default
        option = PLANNER_OPTIONS[SWEEP_KEYS[key]] if key in SWEEP_KEYS else None
        assert option is None or option.default == value, key
    moved = dict(point.options, users=True)
    assert point_key("capacity", config, moved) != point_key("capacity", config, point.options)


def test_a_random_workload_point_takes_vllm_benchs_prompt_length_as_run_does() -> None:
    """`simulate run --workload random` sends vllm bench's 1,024-token prompts; a sweep point naming the same
    workload ran the 512 of `fixed`. A point that gives its own length keeps it."""
    from simulator.config.options import VLLM_RANDOM_INPUT_LEN

    spec = build_spec({"base": {"workload": "random", "num_requests": 8}, "grid": {"qps": [1, 2]}})
    assert {p.config.workload.prompt_tokens for p in spec.points} == {VLLM_RANDOM_INPUT_LEN}
    spec = build_spec({"base": {"num_requests": 8}, "grid": {"workload,prompt_tokens": [["random", 300], ["fixed", 300]]}})
    assert {p.config.workload.prompt_tokens for p in spec.points} == {300}


def test_a_disaggregated_capacity_points_key_names_the_waits_it_judged():
    """A disaggregated capacity point judged before the KV link's queue counted as a wait is another point (run
    again on a resume, never kept beside new ones); an aggregated point's key stays as it was."""
    from simulator.planning.sweep import LATER_OPTION_DEFAULTS, point_key

    def key_before(point) -> str:  # noqa: ANN001 - point_key as it was
        options = {k: v for k, v in point.options.items()
                   if k not in LATER_OPTION_DEFAULTS or v != LATER_OPTION_DEFAULTS[k]}
        return point.config.result_key(mode="capacity", options=options)

    agg = build_spec({"mode": "capacity", "base": {"model": "mistral-7b"}}).points[0]
    disagg = build_spec({"mode": "capacity", "base": {"model": "mistral-7b", "prefill_pool": "1x",
                                                      "decode_pool": "1x"}}).points[0]
    assert point_key("capacity", agg.config, agg.options) == key_before(agg)
    assert point_key("capacity", disagg.config, disagg.options) != key_before(disagg)
    run = build_spec({"base": {"model": "mistral-7b", "prefill_pool": "1x", "decode_pool": "1x"}}).points[0]
    assert point_key("run", run.config, run.options) != run.config.result_key(mode="run", options=run.options)
