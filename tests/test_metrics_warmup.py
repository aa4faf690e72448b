"""Figures beside each other are judged over the same requests and window: each replica's TBT and a speculating
run's ITL views leave the warm-up out as the run's own figures do; vLLM's benchmark duration waits for the failed
requests too; the folder's summary.json holds the benchmark block the screen shows."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.run_config import RunConfig
from simulator.report.benchmark import measured_itl_views
from simulator.report.metrics import request_columns, summarize
from simulator.simulation import simulate

WARMUP = 20


def _p50(gaps: list[np.ndarray]) -> float:
    return float(np.percentile(np.concatenate(gaps), 50))


def test_each_replicas_tbt_leaves_the_warm_up_out():
    config = RunConfig().replace(workload__num_requests=160, workload__qps=6.0, num_replicas=2,
                                 workload__num_warmup=WARMUP)
    result = simulate(config, token_times=True)
    rows = summarize(result)["per_replica"]
    cols = request_columns(result)
    with_warmup = []
    for rid, row in enumerate(rows):
        mine = [np.diff(np.frombuffer(r.token_times)) for r in result.requests if r.replica_id == rid]
        measured = [np.diff(np.frombuffer(r.token_times)) for r in result.requests if r.replica_id == rid
                    and r.request_id >= WARMUP]
        assert row["tbt_s_p50"] == _p50(measured)
        with_warmup.append(_p50(mine))
        assert row["num_requests"] == int(((cols["replica_id"] == rid) & (cols["request_id"] >= WARMUP)).sum())
    assert any(w != row["tbt_s_p50"] for w, row in zip(with_warmup, rows, strict=True))  # the warm-up moved them


def test_speculative_itl_views_leave_the_warm_up_out():
    spec = '{"method":"eagle3","num_speculative_tokens":3}'
    args = ["run", "--num-requests", "60", "--qps", "2", "--speculative-config", spec, "--acceptance-rate", "0.7",
            "--num-warmup", str(WARMUP), "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    views = summary["speculative"]
    assert views["num_itl_per_token_gaps"] == summary["num_tbt_samples"]  # the run's TBT: measured requests
    assert 0 < views["num_itl_per_step_gaps"] < views["num_itl_per_token_gaps"]
    assert measured_itl_views(simulate(RunConfig(), token_times=True), 0) == {}  # no warm-up: the engine's views


def test_vllm_duration_waits_for_the_refused_request(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n200,1,0.0\n300,50,0.1\n100,20,0.2\n"
                     "900,500,30.0\n")
    res = CliRunner().invoke(app, ["run", "--trace", str(trace), "--arrival", "trace", "--scheduler", "vllm",
                                   "--max-num-batched-tokens", "1024", "--json", "--goodput", "ttft:1000"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["num_rejected"] == 1
    assert summary["benchmark"]["duration"] == 30.0  # the refused request came back at 30 s (was 0.70 s)


def test_the_folders_summary_holds_the_benchmark_block(tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", "--num-requests", "20", "--out", str(out), "--goodput", "ttft:300"])
    assert res.exit_code == 0, res.output
    block = json.loads((out / "summary.json").read_text())["benchmark"]
    assert block["completed"] == 20 and block["request_goodput"] is not None


def test_an_overloaded_trace_replay_is_told_to_stretch_the_trace(tmp_path):
    """The overload hint named --qps and `simulate capacity`, both of which a trace replay refuses."""
    trace = tmp_path / "burst.csv"
    rows = "".join(f"3000,300,{i * 0.01:.2f}\n" for i in range(300))
    trace.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n" + rows)
    res = CliRunner().invoke(app, ["run", "--trace", str(trace), "--arrival", "trace"])
    assert res.exit_code == 0, res.output
    said = " ".join(res.output.split())
    assert "load exceeds capacity" in said and "--time-scale below 1" in said and "lower --qps" not in said
