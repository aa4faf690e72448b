"""CLI fuzzing, round 3: huge numbers, empty strings and malformed prefix traces.

Each case was a traceback (an int64 overflow, a MemoryError, a string where a number was
read), a hang (a count of 1e20 enumerated before any work), or a silent default (an empty
--gpus or --ops read as "all"); now each is one line naming the field, exit code 2.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import one_line_error, simulate_module

from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
HUGE = "99999999999999999999"  # past 2^63
EAGLE3 = '{"method": "eagle3", "num_speculative_tokens": %s}'


def simulate(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return simulate_module(*args, cwd=cwd)


@pytest.fixture
def traces(tmp_path: Path) -> Path:
    """Malformed traces: token counts past int64 (CSV, JSONL, Mooncake) and Weka sessions of the wrong shapes."""
    (tmp_path / "huge.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n0.5,1e20,20\n")
    (tmp_path / "huge.jsonl").write_text('{"input_toks": 10, "output_toks": 1e30}\n')
    (tmp_path / "four.csv").write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10\n0.5,200,20\n"
                                       "1.0,50,5\n1.2,300,8\n")
    mooncake = {"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}
    for name, change in (("mc_len", {"input_length": int(HUGE)}), ("mc_hash", {"hash_ids": [int(HUGE)]})):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({**mooncake, **change}) + "\n")
    weka = {"w_time": [{"t": "abc", "in": 10, "out": 5}], "w_nan": [{"t": float("nan"), "in": 10, "out": 5}],
            "w_sub": [{"type": "subagent", "t": 0, "requests": [5]}], "w_list": 5,
            "w_ids": [{"t": 0, "in": 10, "out": 5, "hash_ids": [[1]]}]}
    for name, requests in weka.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({"block_size": 16, "requests": requests}))
    return tmp_path


RUN_CASES = [
    # tracebacks: int64 overflows (numpy's draws, a list of that length, the CPU tier's block count)
    (["--workload", "uniform", "--prompt-tokens", "10", "--prompt-tokens-max", HUGE], "--prompt-tokens-max"),
    (["--replicas", HUGE], "--replicas: must be at most"),
    (["--cpu-kv-gib", "1e300", "--trace", "{dir}/four.csv"], "--cpu-kv-gib"),
    (["--speculative-config", EAGLE3 % HUGE, "--acceptance-rate", "0.5"], "speculative.num_speculative_tokens"),
    # a hang: a pool of 1e20 replicas was built one by one
    (["--prefill-pool", f"{HUGE}x", "--decode-pool", "1x"], "--prefill-pool"),
    # an empty --trace is the working folder, read as a folder of Weka sessions (now refused as any blank value)
    (["--trace", ""], "--trace: is empty"),
    # trace rows past int64: 'token counts must be > 0' after a RuntimeWarning, naming no file or line
    (["--trace", "{dir}/huge.csv"], "huge.csv: line 3, column num_prefill_tokens"),
    (["--trace", "{dir}/huge.jsonl"], "huge.jsonl: line 1, column output_toks"),
    (["--trace", "{dir}/mc_len.jsonl"], "input_length"),
    (["--trace", "{dir}/mc_hash.jsonl"], "hash_ids"),
    # Weka sessions: a ValueError, a TypeError, an AttributeError; a NaN time ran
    (["--trace", "{dir}/w_time.json"], "request 0: t must be"),
    (["--trace", "{dir}/w_nan.json"], "request 0: t must be"),
    (["--trace", "{dir}/w_sub.json"], "request 0.0 is not an object"),
    (["--trace", "{dir}/w_list.json"], "'requests' must be a list"),
    (["--trace", "{dir}/w_ids.json"], "hash_ids"),
]


@pytest.mark.parametrize(("args", "needle"), RUN_CASES, ids=[" ".join(a)[:60] for a, _ in RUN_CASES])
def test_run_refuses_in_one_line(traces: Path, args: list[str], needle: str) -> None:
    args = [a.replace("{dir}", str(traces)) for a in args]
    line = one_line_error(simulate("run", "--no-progress", "--num-requests", "4", *args, cwd=traces))
    assert needle in line, line


@pytest.mark.parametrize(("args", "needle"), [
    (["predict", "--decode", HUGE, "--context", "100"], "--decode"),  # a MemoryError
    (["predict", "--decode", "99999999999", "--context", "100"], "--decode"),
    (["plan", "--gpus", ""], "--gpus"),  # searched every GPU
    (["plan", "--dtypes", " , "], "--dtypes"),
    (["disagg", "split", "--gpus", HUGE], "--gpus"),  # a hang listing splits
    (["disagg", "split", "--gpus", "0"], "--gpus"),
    (["disagg", "compare", "--gpus", "-1"], "--gpus"),
])
def test_commands_refuse_in_one_line(tmp_path: Path, args: list[str], needle: str) -> None:
    line = one_line_error(simulate(*args, cwd=tmp_path))
    assert needle in line, line


def test_a_search_still_takes_its_bounds() -> None:
    """The bounds leave every real value alone: a pool of many replicas, a long k, a big CPU tier."""
    from simulator.config.options import build_config

    config = build_config(prefill_pool="1000x", decode_pool="1x", num_requests=4)
    assert config.prefill_pool.startswith("1000x")
    build_config(replicas=10_000, num_requests=4)
    build_config(speculative_config=EAGLE3 % 256, acceptance_rate=0.5)


@pytest.mark.parametrize("ops", [[""], [","], [" , ", ""]])
def test_profile_ops_that_name_nothing_are_refused(ops: list[str]) -> None:
    # --ops "" profiled nothing, wrote an empty table and exited 0
    from profiler.runner import resolve_ops

    with pytest.raises(ConfigError, match="--ops: names no op"):
        resolve_ops(ops)


def test_profile_max_tokens_is_bounded(tmp_path: Path) -> None:
    # --max-tokens 1e20 ran for minutes before failing
    from profiler.runner import ProfileConfig

    with pytest.raises(ConfigError, match="--max-tokens: must be at most"):
        ProfileConfig(model="tiny-llama-1b", out=tmp_path, max_tokens=int(HUGE))


def test_import_aiconfigurator_refuses_before_making_its_folder(tmp_path: Path, aic: Path) -> None:
    # --gpu "" read the systems folder itself ("backend:  has no vllm tables"); any refusal left --out behind
    for args, needle in ((["--gpu", ""], "--gpu: is empty"),
                         (["--gpu", ".."], "--gpu"),
                         (["--gpu", "h100-sxm", "--backend", "nope"], "--backend: unknown backend")):
        out = tmp_path / "tables"
        line = one_line_error(simulate("import-aiconfigurator", "--out", str(out), *args))
        assert needle in line, line
        assert not out.exists()
