"""--session-replay closed: Claude Code sessions sent as their turns end, each after its recorded think time.

Replayed at their recorded times (open, the default), a session's next turn is sent when the original server had
answered, whatever the simulated server does: a slower one got the turn before the answer it builds on. The files
keep t[k] = t[j] + api_time[j] + think_time[k] (j: the agent's latest earlier request with an api_time), so a
closed replay sends each later turn think_time after the turn it waited for ends (simulator.engine.sessions).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.options import build_config
from simulator.config.run_config import RunConfig
from simulator.engine.cluster import prepare_table
from simulator.simulation import simulate

WEKA = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces" / "weka_claude_code" / "sessions"
ROOT = Path(__file__).resolve().parents[1]


def _request(t: float, tokens: int, first_id: int, api: float | None, think: float | None) -> dict:
    """A request of ``tokens`` prompt tokens whose 64-token blocks are ids first_id, first_id + 1, ... (one chain)."""
    req = {"t": t, "type": "s", "in": tokens, "out": 40, "hash_ids": list(range(first_id, first_id + tokens // 64))}
    if api is not None:
        req["api_time"] = api
    if think is not None:
        req["think_time"] = think
    return req


def _session(path: Path, scale: int = 1) -> Path:
    """One session as Claude Code records it, answered fast (0.05 s) by the original server: a side call with no
    api_time released by turn 1 alongside turn 2, a sub-agent started after turn 2, the main agent's turn 3 after
    its own last answer (its think time spans the sub-agent's work)."""
    sub = {"t": 0.45, "type": "subagent", "requests": [_request(0.0, 6_000, 100_000, 0.05, 0.0),
                                                       _request(0.15, 8_000, 100_000, 0.05, 0.1)]}
    requests = [_request(0.0, 12_000 * scale, 0, 0.05, 0.0),
                _request(0.15, 14_000 * scale, 0, 0.05, 0.1),
                _request(0.22, 3_000, 50_000, None, 0.02),  # a side call: no api_time, released by turn 1
                _request(0.30, 16_000 * scale, 0, 0.05, 0.1),  # turn 2: waits for turn 1 too
                sub,  # starts 0.1 s after turn 2's recorded answer
                _request(0.60, 18_000 * scale, 0, 0.05, 0.25)]
    path.write_text(json.dumps({"block_size": 64, "hash_id_scope": "local", "requests": requests}))
    return path


def _config(trace: Path, replay: str, num_requests: int = 7, **options: object) -> RunConfig:
    return build_config(model="llama-3.1-8b", gpu="a100-80gb", replicas=2, router="least_outstanding",
                        trace=str(trace), arrival="trace", session_replay=replay, num_requests=num_requests, **options)


def test_each_later_turn_is_sent_its_think_time_after_the_turn_it_waited_for(tmp_path: Path) -> None:
    trace = _session(tmp_path / "trace_0001.json")
    table, _, _ = prepare_table(_config(trace, "closed"), None, None)
    # rows by recorded time: turn 0, turn 1, the side call, turn 2, the sub-agent's two, turn 3
    assert table.after.tolist() == [-1, 0, 1, 1, 3, 4, 3]
    expected = [math.nan, 0.1, 0.02, 0.1, 0.45 - 0.30 - 0.05, 0.1, 0.25]
    np.testing.assert_allclose(table.think_s, expected, equal_nan=True)
    closed = sorted(simulate(_config(trace, "closed")).requests, key=lambda r: r.request_id)
    assert all(r.completed_at is not None for r in closed)
    assert closed[0].arrival_at == 0.0  # the first turn at its recorded time
    for r, after, think in zip(closed[1:], table.after[1:].tolist(), table.think_s[1:].tolist(), strict=True):
        waited = closed[after]
        assert r.arrival_at >= waited.completed_at  # never before the answer it builds on
        assert r.arrival_at == pytest.approx(waited.completed_at + think, abs=1e-9)
    # Open (the default, unchanged): the recorded times, answered or not.
    open_ = sorted(simulate(_config(trace, "open")).requests, key=lambda r: r.request_id)
    assert [r.arrival_at for r in open_] == pytest.approx(table.arrival_at.tolist())
    assert sum(r.arrival_at < open_[a].completed_at for r, a in zip(open_[1:], table.after[1:].tolist(),
                                                                      strict=True)) >= 3


def test_a_turn_whose_release_was_dropped_waits_for_what_released_that_one(tmp_path: Path) -> None:
    """--max-total-tokens drops turn 1 (over the limit): turn 2 and the side call wait for turn 0, their think
    times plus turn 1's; --time-scale divides the think times as it divides the recorded times."""
    trace = _session(tmp_path / "trace_0001.json", scale=2)  # turns 0-3: 24K, 28K, 32K, 36K tokens
    table, _, _ = prepare_table(_config(trace, "closed", 4, max_total_tokens=26_000, time_scale=2.0), None, None)
    # kept: turn 0, the side call, the sub-agent's two (turns 1-3 over the limit)
    assert table.num_prompt_tokens.tolist() == [24_000, 3_000, 6_000, 8_000]
    assert table.after.tolist() == [-1, 0, 0, 2]
    np.testing.assert_allclose(table.think_s, [math.nan, (0.1 + 0.02) / 2, (0.1 + 0.1 + 0.1) / 2, 0.1 / 2],
                               equal_nan=True)


def test_closed_replay_is_refused_where_it_would_do_nothing_or_is_not_modelled(tmp_path: Path) -> None:
    trace = _session(tmp_path / "trace_0001.json")
    mooncake = tmp_path / "hashed.jsonl"
    mooncake.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 600, "output_length": 8,
                                            "hash_ids": [0, i + 1]}) + "\n" for i in range(4)))
    plain = tmp_path / "plain.csv"
    plain.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,4\n1,120,4\n")
    cases = [
        ({"session_replay": "closed"}, "no trace is given"),
        ({"session_replay": "open"}, "--session-replay: it says how a session trace's turns are replayed"),
        ({"trace": str(trace), "session_replay": "closed", "qps": 2.0}, "--arrival is poisson"),
        ({"trace": str(trace), "arrival": "trace", "session_replay": "closed", "concurrency": 2}, "--concurrency"),
        ({"trace": str(trace), "arrival": "trace", "session_replay": "closed", "prefill_pool": "2x",
          "decode_pool": "1x", "prefix_caching": False}, "disaggregated pools are not modelled"),
        ({"trace": str(trace), "arrival": "trace", "session_replay": "later"}, "unknown replay"),
    ]
    for options, needle in cases:
        with pytest.raises(ConfigError, match=needle):
            build_config(**options)
    for other in (mooncake, plain):  # the trace names no sessions: refused where it is read
        config = RunConfig().replace(workload__trace=str(other), workload__arrival="trace",
                                     workload__session_replay="closed", workload__num_requests=2)
        with pytest.raises(ConfigError, match="^--session-replay: closed sends each session's later turns"):
            simulate(config)
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--trace", str(mooncake), "--arrival", "trace", "--session-replay", "open",
                                   "--no-progress"])
    assert str(res.exception).startswith(f"--session-replay: --trace {mooncake} names no sessions")


def test_the_option_leaves_stored_sweep_keys_as_they_were() -> None:
    """A new workload field would change every point's key (the hash of the whole config), and a stored sweep
    would run again from scratch: at its default, 'open', it is left out of the key."""
    from simulator.planning.sweep import point_key

    stored = json.loads((ROOT / "results" / "sarathi-serve" / "sweep" / "points" / "ace268df2579b253.json").read_text())
    config = RunConfig.from_dict(stored["config"])
    assert config.workload.session_replay == "open"
    assert point_key(stored["mode"], config, stored["options"]) == stored["key"] == "ace268df2579b253"
    closed = config.replace(workload__trace=str(WEKA), workload__arrival="trace", workload__session_replay="closed")
    assert point_key(stored["mode"], closed, stored["options"]) != point_key(
        stored["mode"], closed.replace(workload__session_replay="open"), stored["options"])


@pytest.mark.skipif(not WEKA.is_dir(), reason="the Weka Claude Code sessions are not in ../shared")
def test_the_claude_code_sessions_replayed_closed_never_send_a_turn_early() -> None:
    """The audit's case: the first 258 requests on two replicas; open sends most later turns before the turn
    they waited for ended (over 190 of 216 here), closed none, each exactly its think time after."""
    config = build_config(model="llama-3.1-8b", gpu="h100-sxm", replicas=2, router="least_outstanding",
                          trace=str(WEKA), arrival="trace", num_requests=258, session_replay="closed")
    table, _, _ = prepare_table(config, None, None)
    counts = {}
    for replay in ("open", "closed"):
        reqs = sorted(simulate(config.replace(workload__session_replay=replay)).requests, key=lambda r: r.request_id)
        early = 0
        for r, after, think in zip(reqs, table.after.tolist(), table.think_s.tolist(), strict=True):
            end = reqs[after].completed_at if after >= 0 else None
            if end is None:  # a first turn, or one released by a refused request (ended when refused)
                continue
            early += r.arrival_at < end
            if replay == "closed":
                assert r.arrival_at == pytest.approx(end + think, abs=1e-9)
        counts[replay] = early
    assert counts["closed"] == 0 and counts["open"] > 190  # (the README says so)
