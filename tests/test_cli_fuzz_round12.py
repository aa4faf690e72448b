"""CLI fuzzing, round 12: three tracebacks (an unknown scheduler in the prefill pool, negative seeds of
calibrate-engine and profile) and a speculative-config key that did nothing (an n-gram drafter's quantization),
each now a one-line error naming the field and the fix; a rejection reason over a token budget kept its budget.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def one_line_error(*args: str) -> str:
    """``simulate ARGS``'s stderr, checked to be one ``error:`` line with exit 2 and nothing on stdout."""
    proc = subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (proc.returncode, proc.stderr)
    return lines[0]


def test_an_unknown_scheduler_in_the_prefill_pool_is_one_line() -> None:
    """It was a KeyError from the prefill pool's prefix-cache lookup (the decode and mixed pools said it)."""
    line = one_line_error("run", "--num-requests", "8", "--no-progress", "--prefill-pool", "1x(tp=1,sched=nope)",
                          "--decode-pool", "1x(tp=1)")
    assert "prefill_pool (scheduler): unknown scheduler 'nope'" in line and "sglang" in line


def test_negative_seeds_are_refused_in_one_line(tmp_path: Path) -> None:
    """numpy's generators take no seed below 0: calibrate-engine's --fit-seed and profile's --seed raised its
    ValueError."""
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    line = one_line_error("calibrate-engine", "--table", str(table), "--out", str(tmp_path / "x.json"), "--fit-seed", "-1")
    assert "--fit-seed: must be >= 0, got -1" in line
    pytest.importorskip("torch")
    from profiler.runner import ProfileConfig
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="--seed: must be >= 0, got -1"):
        ProfileConfig(model="tiny-llama-1b", out=tmp_path, ops=("attention",), seed=-1)


def test_split_with_ep_and_no_attention_dp_says_why_and_how() -> None:
    """disagg split builds its base config at tp 1 before its layouts take --tps: --ep 2 alone was refused as
    'must divide tp=1, use --ep equal to --tp', a flag split refuses; it now says so and gives the two ways."""
    line = one_line_error("disagg", "split", "--model", "mixtral-8x7b", "--ep", "2", "--gpus", "4", "--tps", "2")
    assert "--ep: disagg split sets each layout's TP from --tps" in line and "--attention-dp N" in line


def test_a_traces_lengths_are_named_as_the_trace(shared_data: Path) -> None:
    """A band of fixed lengths beside a trace named the default workload ('sharegpt') and sent the user to
    --workload fixed, which a trace refuses."""
    trace = shared_data / "traces" / "mooncake" / "conversation_trace.jsonl"
    line = one_line_error("run", "--trace", str(trace), "--range-ratio", "0.2", "--num-requests", "5", "--no-progress")
    assert f"the workload is the trace {trace}" in line and "--workload fixed" not in line


def test_a_capacity_ceiling_at_or_below_the_floor_names_the_ceiling() -> None:
    """--max-qps 0 named capacity.min_qps and asked for a --min-qps (the flag not given)."""
    from simulator.config.errors import ConfigError
    from simulator.planning.options import SearchSettings

    with pytest.raises(ConfigError, match=r"capacity.max_qps: must be above --min-qps 0.01, got 0 "):
        SearchSettings(max_qps=0.0)
    with pytest.raises(ConfigError, match="capacity.min_qps"):  # the floor itself off: the floor named
        SearchSettings(min_qps=1e-16)
