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
    assert measured_itl_views(simulate(RunConfig(), token_times=True)) == {}  # no warm-up: the engine's views


def test_vllm_duration_waits_for_the_refused_request(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens,arrived_at\n200,1,0.0\n300,50,0.1\n100,20,0.2\n"
                     "900,500,30.0\n")
    res = CliRunner().invoke(app, ["run", "--trace", str(trace), "--arrival", "trace", "--scheduler", "vllm",
                                   "--max-model-len", "1024", "--max-num-batched-tokens", "1024", "--json",
                                   "--goodput", "ttft:1000"])
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


def test_closed_loop_sessions_leave_out_the_first_requests_sent(tmp_path):
    """--num-warmup is "the first requests sent", but the warm-up was the first request ids: closed-loop sessions
    send a turn as its predecessor ends, so ids 0..19 (in table order) were not the first 20 sent (5 of them here
    were sent after 20 others). The run records its send order; every figure and the written table read it."""
    import pandas as pd

    from simulator.report.output import write_run
    from simulator.workload.sessions import agents, generate_sessions

    table = generate_sessions(agents(num_sessions=16, session_rate=2.0, mean_turns=8, think_mean_s=1.0,
                                     max_prompt_tokens=32768), np.random.default_rng(1))
    n = len(table.arrival_at)
    config = RunConfig().replace(replica__model="llama-3.1-8b", replica__gpu="h100-sxm", num_replicas=2,
                                 router="session", workload__num_warmup=WARMUP, workload__num_requests=n)
    result = simulate(config, table)
    cols = request_columns(result)
    sent_at = cols["arrival_at"]
    order = np.argsort(sent_at, kind="stable")
    assert sent_at[order[WARMUP - 1]] < sent_at[order[WARMUP]]  # the first 20 sent are one set, whatever the ties
    warmup = set(order[:WARMUP].tolist())
    assert warmup != set(range(WARMUP))  # the case: ids are not the send order
    assert set(result.extra["send_order"][:WARMUP].tolist()) == warmup
    measured = np.array([i not in warmup for i in cols["request_id"].tolist()])
    done = measured & (cols["status"] == "finished")
    summary = summarize(result)
    assert summary["num_requests"] == n - WARMUP
    assert summary["ttft_s_mean"] == float(cols["ttft_s"][done].mean())
    assert summary["e2e_s_max"] == float(cols["e2e_s"][done].max())
    write_run(result, tmp_path, "csv")
    written = pd.read_csv(tmp_path / "requests.csv")
    assert set(written.request_id[written.is_warmup].tolist()) == warmup


def test_closed_loop_sessions_prefix_hit_rate_leaves_out_the_first_requests_sent():
    """The prefix cache's hit rate judged the warm-up by id (ids < num_warmup) while every other figure takes the
    first sent: in a closed-loop session replay the two sets differ, and its saved and prompt tokens were another
    set's than the summary's requests."""
    from simulator.workload.sessions import agents, generate_sessions

    table = generate_sessions(agents(num_sessions=16, session_rate=2.0, mean_turns=8, think_mean_s=1.0,
                                     max_prompt_tokens=32768), np.random.default_rng(1))
    config = RunConfig().replace(replica__model="llama-3.1-8b", replica__gpu="h100-sxm",
                                 scheduler__prefix_caching=True, workload__num_warmup=WARMUP,
                                 workload__num_requests=len(table.arrival_at))
    result = simulate(config, table)
    warmup = set(result.extra["send_order"][:WARMUP].tolist())
    assert warmup != set(range(WARMUP))  # the case: ids are not the send order
    ids = [r.request_id for r in result.requests]
    measured = [r for r in result.requests if r.request_id not in warmup and r.admitted_seq >= 0]
    summary = summarize(result)
    pc = summary["prefix_caching"]
    assert pc["prompt_tokens"] == sum(r.num_prompt_tokens for r in measured)
    assert pc["prefill_tokens_saved"] == sum(r.num_cached_tokens for r in measured)
    assert len(ids) - len(warmup) == summary["num_requests"]
