"""A worker process that dies (the out-of-memory killer, ``kill -9``) ends a multi-process command with one line
and a non-zero exit, not a BrokenProcessPool traceback after the work done; a sweep and a plan keep what finished
and say how to resume."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
from helpers import exit_at_once

from simulator.config.errors import WorkerDied
from simulator.planning import sweep
from simulator.util.interrupts import WorkerPool

RUN_POINT = sweep.run_point


def _main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``simulate ARGS`` in this process (its fork pools inherit the test's patches): (exit code, stderr)."""
    from simulator.cli.app import main

    monkeypatch.setattr(sys, "argv", ["simulate", *args])
    with pytest.raises(SystemExit) as done:
        main()
    return done.value.code, capsys.readouterr().err


def _assert_one_line(code: int, err: str) -> None:
    assert code == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: a worker process died (out of memory?): rerun with fewer --workers"), err


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_a_pool_whose_worker_dies_raises_worker_died(start_method: str) -> None:
    with pytest.raises(WorkerDied, match="worker process died"), WorkerPool(2, start_method) as pool:
        pool.submit(os._exit, 9).result()
    with pytest.raises(WorkerDied), WorkerPool(1) as pool:  # a submit to the broken pool: the same
        pool.submit(os._exit, 9).exception()
        pool.submit(abs, 1)


def test_a_failing_task_is_not_a_dead_worker() -> None:
    with pytest.raises(ZeroDivisionError), WorkerPool(1) as pool:
        pool.submit(divmod, 1, 0).result()


SWEEP_OUT: list[Path] = []


def _point_or_die(mode: str, config: dict, options: dict) -> dict:
    """The sweep's point at qps 4 dies once the two other points are written (so what finished is known)."""
    if config["workload"]["qps"] == 4.0:
        deadline = time.monotonic() + 60
        while len(list((SWEEP_OUT[0] / "points").glob("*.json"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        os._exit(9)
    return RUN_POINT(mode, config, options)


def test_a_sweep_whose_worker_dies_keeps_the_finished_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    SWEEP_OUT[:] = [out]
    monkeypatch.setattr(sweep, "run_point", _point_or_die)
    args = ["sweep", "--model", "mistral-7b", "--num-requests", "8", "--workload", "fixed", "--prompt-tokens", "32",
            "--output-tokens", "4", "--grid", "qps=1,2,4", "--workers", "2", "--no-progress", "--out", str(out)]
    code, err = _main(monkeypatch, capsys, *args)
    _assert_one_line(code, err)
    assert "2 of 3 points done" in err and "1 left" in err and "run the same command again with fewer --workers" in err
    assert len(list((out / "points").glob("*.json"))) == 2
    monkeypatch.setattr(sweep, "run_point", RUN_POINT)
    from simulator.cli.app import main

    monkeypatch.setattr(sys, "argv", ["simulate", *args])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0 and "ran 1 point (0 failed), 2 already done" in capsys.readouterr().out  # resumed


def test_a_plan_whose_worker_dies_says_how_to_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.planning import plan

    monkeypatch.setattr(plan, "search_layout", exit_at_once)
    code, err = _main(monkeypatch, capsys, "plan", "--model", "llama-3.1-8b", "--max-model-len", "4096", "--qps", "6",
                      "--num-requests", "64", "--gpus", "h100-sxm", "--modes", "agg", "--tps", "1", "--budgets",
                      "512,1024", "--seqs", "64", "--workers", "2", "--out", str(tmp_path / "plan"))
    _assert_one_line(code, err)
    assert f"{tmp_path / 'plan'}/layouts.csv" in err and "to resume" in err


@pytest.mark.parametrize(("seeds", "name"), [("2", "search_seed"), ("1", "run_trial")])  # a search a process; ahead
def test_a_capacity_search_whose_worker_dies_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str], seeds: str,
                                                         name: str) -> None:
    from simulator.planning import capacity

    monkeypatch.setattr(capacity, name, exit_at_once)
    code, err = _main(monkeypatch, capsys, "capacity", "--model", "mistral-7b", "--num-requests", "16", "--seeds",
                      seeds, "--workers", "2", "--json")
    _assert_one_line(code, err)


def test_a_run_whose_worker_dies_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.fast import partitioned

    monkeypatch.setattr(partitioned, "_replica_in_worker", exit_at_once)  # (spawn workers import it by name)
    code, err = _main(monkeypatch, capsys, "run", "--replicas", "2", "--num-requests", "40", "--workers", "2",
                      "--no-progress", "--out", str(tmp_path / "run"))
    _assert_one_line(code, err)
    assert not (tmp_path / "run").exists()
