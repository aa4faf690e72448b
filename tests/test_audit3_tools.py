"""Planner, sweep, calibrate-engine and predict flags that were accepted but did nothing (or said the
wrong thing): each is refused with a one-line ConfigError naming the flag, and the usages where the
flag does apply still run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError
from simulator.planning.sweep import build_spec

runner = CliRunner()

PLAN = ["plan", "--model", "llama-3.1-8b", "--num-requests", "40", "--qps", "2", "--gpus", "a100-80gb", "--tps", "1",
        "--seqs", "128", "--no-verify"]
SWEEP = ["sweep", "--model", "llama-3.1-8b", "--num-requests", "4", "--workload", "fixed", "--prompt-tokens", "32",
         "--output-tokens", "4", "--no-progress"]


def refused(args: list[str], flag: str) -> str:
    res = runner.invoke(app, args)
    assert isinstance(res.exception, ConfigError), (res.exception, res.output)
    assert flag in str(res.exception) and "would do nothing" in str(res.exception), str(res.exception)
    return str(res.exception)


class Searched(Exception):  # noqa: N818 - a marker: the plan got past every check of its options
    pass


@pytest.fixture
def no_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """``simulate plan`` stops where its search would start: what is checked is the command line."""
    import simulator.planning.plan

    def stop(*args: object, **kwargs: object) -> None:
        raise Searched

    monkeypatch.setattr(simulator.planning.plan, "plan", stop)


# -- 1, 2: plan's search-space flags ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("args", "flag"), [
    (["--modes", "agg", "--ratios", "5:5"], "--ratios"),  # ratios are disaggregated units
    (["--modes", "agg", "--attention-dps", "4"], "--attention-dps"),  # attention DP is searched for MoE models
    (["--scheduler", "orca", "--budgets", "512,2048"], "--budgets"),  # orca has no token budget to search
    (["--modes", "disagg", "--budgets", "512"], "--budgets"),  # the pools keep their own budget
])
def test_plan_refuses_search_space_flags_no_layout_reads(tmp_path: Path, no_search: None, args: list[str],
                                                         flag: str) -> None:
    refused([*PLAN, *args, "--out", str(tmp_path / "p")], flag)


@pytest.mark.parametrize("args", [
    ["--modes", "disagg", "--ratios", "1:1"],
    ["--modes", "agg", "--budgets", "512"],  # vllm-v1 (the default scheduler) chunks
    ["--scheduler", "orca", "--modes", "agg"],  # the flags' defaults never trip the check
    ["--model", "qwen3-30b-a3b", "--modes", "agg", "--attention-dps", "1,2"],
])
def test_plan_accepts_search_space_flags_that_apply(tmp_path: Path, no_search: None, args: list[str]) -> None:
    res = runner.invoke(app, [*PLAN, *args, "--out", str(tmp_path / "p")])
    assert isinstance(res.exception, Searched), (res.exception, res.output)


# -- 3, 4: sweep base options --------------------------------------------------------------------------------------
def test_sweep_refuses_a_base_option_no_point_reads(tmp_path: Path) -> None:
    message = refused([*SWEEP, "--grid", "scheduler=vllm,orca", "--chunk-size", "512", "--out", str(tmp_path / "s")],
                      "--chunk-size")
    assert "no point of the sweep reads it" in message
    assert not (tmp_path / "s" / "results.csv").exists()
    # A file's base key alike.
    with pytest.raises(ConfigError, match="sweep.base.chunk_size"):
        build_spec({"base": {"chunk_size": 512}, "grid": {"scheduler": ["vllm", "orca"]}})


def test_sweep_keeps_a_base_option_a_grid_point_reads(tmp_path: Path) -> None:
    res = runner.invoke(app, [*SWEEP, "--grid", "scheduler=vllm,sarathi", "--chunk-size", "512", "--out",
                              str(tmp_path / "s")])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(tmp_path / "s" / "results.csv")
    assert (table["status"] == "ok").all() and len(table) == 2


@pytest.mark.parametrize("args", [["--grid", "qps=1", "--qps", "2"], ["--grid", "request_rate=1,3", "--qps", "2"]])
def test_sweep_refuses_a_flag_the_grid_also_sets(tmp_path: Path, args: list[str]) -> None:
    res = runner.invoke(app, [*SWEEP, *args, "--out", str(tmp_path / "s")])
    assert isinstance(res.exception, ConfigError) and "--qps" in str(res.exception), (res.exception, res.output)
    assert "drop --qps" in str(res.exception)


def test_sweep_grid_still_varies_a_base_that_was_not_given_as_a_flag() -> None:
    # A sweep file's base, and (given_flags) a --config's values, are a base the grid may vary.
    assert len(build_spec({"base": {"qps": 2.0}}, grid_overrides={"qps": ["1", "3"]}).points) == 2
    spec = build_spec({}, base_overrides={"qps": 2.0, "model": "mistral-7b"}, grid_overrides={"qps": ["1", "3"]},
                      given_flags={"model"})
    assert [p.config.workload.qps for p in spec.points] == [1.0, 3.0]
    with pytest.raises(ConfigError, match="--qps"):
        build_spec({}, base_overrides={"qps": 2.0}, grid_overrides={"qps": ["1"]})


# -- 5: calibrate-engine --rows ------------------------------------------------------------------------------------
ROWS = """backend,kernels,model,gpu,tp,isl,osl,concurrency,ttft_ms,tpot_ms
vllm,roofline,llama-3.1-8b,h100-sxm,1,256,16,2,30,8
vllm,roofline,llama-3.1-8b,h100-sxm,1,512,16,4,40,9
vllm,roofline,qwen3-8b,a100-80gb,1,256,16,2,50,12
vllm,roofline,qwen3-8b,a100-80gb,1,512,16,4,60,13
"""


@pytest.mark.parametrize("args", [["--model", "mistral-7b"], ["--gpu", "a100-80gb"], ["--num-requests", "20"],
                                  ["--tp", "1"], ["--qps", "3"]])
def test_calibrate_engine_rows_refuses_run_options_it_does_not_read(tmp_path: Path, args: list[str]) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(ROWS)
    refused(["calibrate-engine", "--rows", str(rows), "--out", str(tmp_path / "e.json"), *args], args[0])
    assert not (tmp_path / "e.json").exists()


def test_calibrate_engine_rows_labels_the_artifact_with_the_rows_models_and_gpus(tmp_path: Path) -> None:
    rows = tmp_path / "rows.csv"
    rows.write_text(ROWS)
    out = tmp_path / "e.json"
    res = runner.invoke(app, ["calibrate-engine", "--rows", str(rows), "--out", str(out), "--engine", "vllm-2026"])
    assert res.exit_code == 0, res.output
    saved = json.loads(out.read_text())
    assert saved["model"] == "llama-3.1-8b, qwen3-8b" and saved["gpu"] == "h100-sxm, a100-80gb"


# -- 6, 7: predict -------------------------------------------------------------------------------------------------
def test_predict_refuses_a_pipeline_it_would_only_relabel() -> None:
    refused(["predict", "--model", "llama-3.1-8b", "--prefill", "2048", "--pp", "4", "--json"], "--pp")
    res = runner.invoke(app, ["predict", "--model", "llama-3.1-8b", "--prefill", "2048", "--pp", "1", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["iteration_time_s"] > 0


def test_predict_decodes_without_context_name_the_context_flag() -> None:
    res = runner.invoke(app, ["predict", "--decode", "3"])
    assert isinstance(res.exception, ConfigError), (res.exception, res.output)
    assert "--context" in str(res.exception) and "KV length" in str(res.exception)
    assert "0 values" not in str(res.exception)
    assert runner.invoke(app, ["predict", "--decode", "3", "--context", "512"]).exit_code == 0
