"""CLI fuzzing, round 4: flags a trace leaves unread, contradictory search flags, absurd sizes, foreign flags.

Each case ran silently (a prefix-cache or routing flag that a trace without block hashes or
sessions leaves unread; --tbt-early-exit beside --no-early-exit), or was refused naming the wrong
flag (a 1e20 --block-size blamed on --tp, a 1e20 token budget on the replica's memory, a bad
import-aiconfigurator --data on --kernels, which that command does not have); now each is one line
naming the flag, exit code 2, and the valid neighbours still run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import one_line_error, simulate_module

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
HUGE = "100000000000000000000"  # 1e20, past 2^63


def simulate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return simulate_module(*args, cwd=cwd)


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """A CSV trace (lengths and arrivals only) and a Mooncake trace (block hashes, no sessions)."""
    (tmp_path / "plain.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n0.5,200,20\n"
                                        "1.0,50,5\n1.2,300,8\n")
    rows = [{"timestamp": 100 * i, "input_length": 600, "output_length": 4, "hash_ids": [0, 10 + i]}
            for i in range(6)]
    (tmp_path / "mooncake.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


PLAIN, MOONCAKE = "{dir}/plain.csv", "{dir}/mooncake.jsonl"
TRACE_CASES = [
    # a trace without block hashes: the prefix cache never hits, the router never finds a prefix
    (["--trace", PLAIN, "--cpu-kv-gib", "4"], "--cpu-kv-gib: --trace"),
    (["--trace", PLAIN, "--prefix-cache-policy", "radix-lru"], "--prefix-cache-policy: --trace"),
    # prefix caching on or off: the same run where no prompt names its blocks (a built-in workload too)
    (["--trace", PLAIN, "--prefix-caching"], "--prefix-caching: --trace"),
    (["--no-prefix-caching"], "--no-prefix-caching: the sharegpt workload names no prompt blocks"),
    (["--trace", PLAIN, "--router", "prefix_aware", "--replicas", "2"], "--router: prefix_aware routes by cached prefix"),
    # no sessions (CSV, and Mooncake's hashed requests alike): the session router is least_outstanding
    (["--trace", PLAIN, "--router", "session", "--replicas", "2"], "--router: session keeps each session"),
    (["--trace", MOONCAKE, "--router", "session", "--replicas", "2"], "--router: session keeps each session"),
    # prefix caching off: no replica has a cache for prefix_aware to score
    (["--trace", MOONCAKE, "--router", "prefix_aware", "--replicas", "2", "--no-prefix-caching"],
     "--router: prefix_aware routes to the replica that has the longest prefix cached, but prefix caching is off"),
]


@pytest.mark.parametrize(("args", "needle"), TRACE_CASES)
def test_run_refuses_flags_the_trace_leaves_unread(traces: Path, args: list[str], needle: str) -> None:
    args = [a.replace("{dir}", str(traces)) for a in args]
    line = one_line_error(simulate("run", *args, "--num-requests", "8", "--no-progress"))
    assert line.startswith(f"error: {needle}"), line


def test_a_trace_with_block_hashes_still_takes_them(traces: Path) -> None:
    proc = simulate("run", "--trace", str(traces / "mooncake.jsonl"), "--cpu-kv-gib", "1", "--prefix-cache-policy",
                    "radix-lru", "--router", "prefix_aware", "--replicas", "2", "--num-requests", "6", "--json",
                    "--no-progress")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["prefix_caching"]["prompt_tokens"] > 0


def test_only_given_flags_are_refused(traces: Path) -> None:
    """A value from --config (not typed) is not the user's to drop: only the command line's options are checked.
    The router is the exception: one with nothing to route by ran as least outstanding under its own name, a run
    mislabelled however the router was given (simulator.workload.prefix_traces.check_router)."""
    from simulator.cli.options import check_trace_given

    config = RunConfig().replace(workload__trace=str(traces / "plain.csv"), scheduler__cpu_kv_gib=4.0,
                                 router="least_outstanding", num_replicas=2)
    check_trace_given(config, {"trace": str(traces / "plain.csv")})  # --cpu-kv-gib not typed
    with pytest.raises(ConfigError, match="--cpu-kv-gib"):
        check_trace_given(config, {"trace": str(traces / "plain.csv"), "cpu_kv_gib": 4.0})
    with pytest.raises(ConfigError, match="^--router: session keeps each session"):  # from --config, not typed
        check_trace_given(config.replace(router="session"), {"trace": str(traces / "plain.csv")})
    # a sweep's grid may change them (each point is checked as it is built: tests/test_sweep.py)
    check_trace_given(config.replace(router="session"), {"cpu_kv_gib": 4.0, "router": "session"}, "sweep")


@pytest.mark.parametrize(("args", "flag"), [
    (["--tbt-early-exit", "--no-early-exit"], "--tbt-early-exit"),
    (["--no-tbt-early-exit", "--no-early-exit"], "--no-tbt-early-exit"),
    (["--tbt-early-exit", "--criterion", "goodput"], "--tbt-early-exit"),
])
def test_capacity_refuses_contradictory_early_exit_flags(args: list[str], flag: str) -> None:
    line = one_line_error(simulate("capacity", *args, "--num-requests", "16", "--max-trials", "2", "--workers", "1"))
    assert line.startswith(f"error: {flag}: ") and "would do nothing" in line, line


@pytest.mark.parametrize(("args", "needle"), [
    (["--block-size", HUGE], "--block-size: a KV block of"),
    (["--block-size", "65537"], "--block-size: a KV block of"),
    (["--max-num-batched-tokens", HUGE], "--max-num-batched-tokens: a budget of"),
    (["--chunk-size", HUGE], "--chunk-size: a budget of"),
    (["--scheduler", "sarathi", "--chunk-size", HUGE], "--chunk-size: a budget of"),
    (["--prefill-pool", f"1x(budget={HUGE})", "--decode-pool", "1x()"], "--prefill-pool: budget="),
])
def test_absurd_sizes_are_refused_naming_their_flag(args: list[str], needle: str) -> None:
    line = one_line_error(simulate("run", *args, "--num-requests", "4", "--no-progress"))
    assert needle in line and "--tp" not in line, line
    flag = next(a for a in args if a.startswith("--") and a not in ("--scheduler", "--decode-pool"))
    assert (flag if flag != "--prefill-pool" else "budget=") in line.split(":", 2)[2], line


@pytest.mark.parametrize("size", [1, 8, 16, 32, 48, 64, 128, 256, 512, 528, 4096, 65536])
def test_block_sizes_engines_use_stay_valid(size: int) -> None:
    assert RunConfig().replace(replica__block_size=size).replica.block_size == size


def test_import_aiconfigurator_names_its_own_data_flag(tmp_path: Path) -> None:
    out = tmp_path / "tables"
    (tmp_path / "empty").mkdir()
    line = one_line_error(simulate("import-aiconfigurator", "--gpu", "h100-sxm", "--out", str(out),
                                   "--data", str(tmp_path / "empty")))
    assert line.startswith("error: --data: ") and "--kernels" not in line, line
    assert not out.exists()
