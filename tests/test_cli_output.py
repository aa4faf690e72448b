"""What the CLI prints: whole names and numbers at any width, rejection reasons, overload, help.

Catalog names are the values users copy, so they never truncate: piped output keeps the table
at its natural width, and a narrow terminal gets one short record per row instead.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import on_terminal
from rich.console import Console
from rich.table import Table

from simulator.cli.tables import print_table, wrap_pairs
from simulator.config.catalog import GPUS, MODELS
from simulator.costmodel.engine_model import ENGINES

ROOT = Path(__file__).resolve().parents[1]
SIMULATE = [sys.executable, "-m", "simulator"]


def piped(*args: str, columns: int = 80) -> str:
    env = {**os.environ, "COLUMNS": str(columns)}
    res = subprocess.run([*SIMULATE, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    return res.stdout


CATALOGS = {"models": [v for m in MODELS.values() for v in (m.name, m.hf_id)],
            "gpus": [v for g in GPUS.values() for v in (g.name, *g.aliases)],
            "engines": list(ENGINES)}


@pytest.mark.parametrize("command", ["models", "gpus", "engines"])
def test_catalog_names_are_whole_when_piped(command: str) -> None:
    out = piped(command)
    assert "…" not in out and "..." not in out
    words = set(re.split(r"[\s│┃,]+", out))
    missing = [name for name in CATALOGS[command] if name not in words]
    assert not missing, missing


def test_engines_say_what_each_preset_was_fitted_with() -> None:
    records = piped("engines").split("\nsglang-2026\n")[1].split("\ntrtllm-2026\n")  # piped: a record per preset
    assert "fitted with --scheduler sglang --kernels sglang" in records[0]
    assert "fitted with --scheduler vllm-v1 --kernels trtllm" in records[1]


@pytest.mark.parametrize("command", ["models", "gpus", "engines"])
def test_catalog_wraps_rows_on_a_narrow_terminal(command: str) -> None:
    out = on_terminal(command, columns=80)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    words = set(re.split(r"[\s│┃,·]+", out))
    missing = [name for name in CATALOGS[command] if name not in words]
    assert not missing, missing


def test_numbers_are_never_squeezed_when_piped() -> None:
    table = Table("seed", "QPS", "P-TBT (s)", "note")
    for i in range(3):
        table.add_row(str(i), f"{1.23456 + i:.6g}", "0.0098765", "P99 TBT 0.1049 s > SLO 0.1 s, and a long note " * 2)
    buffer = io.StringIO()
    print_table(Console(file=buffer, width=60, force_terminal=False), table)
    out = buffer.getvalue()
    assert "0.0098765" in out and "1.23456" in out and "…" not in out
    assert out.count("and a long note") == 6  # notes on one line each, not wrapped
    assert len([ln for ln in out.splitlines() if "0.0098765" in ln]) == 3


def test_record_lines_wrap_between_pairs_only() -> None:
    pairs = ["layers 32", "hidden 4096", "kv heads 8", "a-very-long-value " * 6]
    lines = wrap_pairs(pairs, 30)
    assert lines[0] == "    layers 32 · hidden 4096"
    joined = " · ".join(line.strip() for line in lines)
    assert joined == " · ".join(pairs).strip()


# -- rejected requests --------------------------------------------------------------------------
def test_rejections_are_counted_per_reason(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from simulator.cli import app

    args = ["run", "--num-requests", "40", "--workload", "uniform", "--prompt-tokens", "100", "--prompt-tokens-max",
            "1000", "--output-tokens", "10", "--max-model-len", "512", "--max-total-tokens", "100000", "--no-progress"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    by_reason = summary["rejected_by_reason"]
    assert summary["num_rejected"] > 0 and sum(by_reason.values()) == summary["num_rejected"]
    assert list(by_reason) == ["prompt+output exceeds max_model_len 512"]
    assert f"rejected: {summary['num_rejected']} prompt+output exceeds max_model_len 512" in res.stdout


def test_rejection_kinds_drop_the_request_figures() -> None:
    from simulator.config.run_config import SchedulerConfig
    from simulator.engine.kvcache import BlockManager
    from simulator.engine.schedulers import SCHEDULERS
    from simulator.report.metrics import rejection_kind
    from simulator.workload.request import Request

    scheduler = SCHEDULERS["sarathi"](SchedulerConfig("sarathi"), BlockManager(10, 16, 0.0), 4096)
    too_long = scheduler.rejection_reason(Request(0, 0.0, 5000, 10))
    too_big = scheduler.rejection_reason(Request(1, 0.0, 1000, 10))
    assert rejection_kind(too_long) == "prompt+output exceeds max_model_len 4096"
    assert rejection_kind(too_big) == "needs more KV tokens than the cache holds (160)"
    assert rejection_kind(scheduler.rejection_reason(Request(2, 0.0, 900, 20))) == rejection_kind(too_big)
    assert rejection_kind("something else at 12.5 s") == "something else at N s"
    # a prompt over a prefill pool's or TensorRT-LLM's token budget keeps the budget (it had read "budget N")
    trtllm = SCHEDULERS["trtllm"](SchedulerConfig("trtllm", max_num_batched_tokens=2048), BlockManager(10_000, 16, 0.0),
                                  8192)
    assert rejection_kind(trtllm.rejection_reason(Request(3, 0.0, 3000, 10))).startswith("prompt exceeds max_num_tokens 2048")


# -- help -----------------------------------------------------------------------------------------
def test_run_help_shows_every_default_and_cpu() -> None:
    out = piped("run", "--help", columns=300)
    # An option's first name (vLLM's spelling may follow it: --qps,--request-rate).
    lines = {m.group(1): line for line in out.splitlines() if (m := re.search(r"(--[a-z-]+)[,\s]", line))}
    for option, default in (("--qps", "1"), ("--num-requests", "256"), ("--chunk-size", "2048 for vllm-v1"),
                            ("--max-num-seqs", "256 for vllm-v1"), ("--scheduler", "vllm-v1"), ("--model", "llama-2-7b"),
                            ("--seed", "0"), ("--cost-model", "roofline"), ("--max-num-batched-tokens", "the token budget")):
        assert f"default: {default}" in lines[option], lines[option]
    assert "cpu" in lines["--gpu"] and "h200" in lines["--gpu"]


def test_search_commands_help_names_their_own_request_default() -> None:
    """capacity, plan and disagg give --num-requests defaults of their own; their help says which (it said run's 256)."""
    for command, default in ((("capacity",), "2048"), (("plan",), "512"), (("disagg", "split"), "400"),
                             (("disagg", "compare"), "400"), (("run",), "256")):
        out = piped(*command, "--help", columns=300)
        line = next(ln for ln in out.splitlines() if "--num-requests" in ln)
        assert f"(default: {default})" in line and line.count("default:") == 1, (command, line)


# -- overload ----------------------------------------------------------------------------------
def test_overloaded_run_says_so_and_flags_summary(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from simulator.cli import app

    heavy = ["run", "--model", "mistral-7b", "--workload", "fixed", "--prompt-tokens", "2048", "--output-tokens", "64",
             "--qps", "20", "--num-requests", "100", "--no-progress"]
    res = CliRunner().invoke(app, [*heavy, "--out", str(tmp_path / "heavy")])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "heavy" / "summary.json").read_text())
    assert summary["overloaded"] is True and summary["num_waiting_at_last_arrival"] > 0
    assert summary["sched_delay_s_p50_last_quarter"] > 2 * summary["sched_delay_s_p50_first_quarter"]
    lines = [ln for ln in res.stdout.splitlines() if "load exceeds capacity" in ln]
    assert len(lines) == 1 and "simulate capacity" in lines[0]

    light = CliRunner().invoke(app, ["run", "--num-requests", "60", "--no-progress", "--out", str(tmp_path / "light")])
    assert light.exit_code == 0 and "load exceeds capacity" not in light.stdout
    assert json.loads((tmp_path / "light" / "summary.json").read_text())["overloaded"] is False


def test_steady_long_delays_are_not_called_growing() -> None:
    import numpy as np
    import pandas as pd

    from simulator.report.metrics import overload_summary

    n = 40
    arrival = np.arange(n, dtype=float)
    frame = pd.DataFrame({"arrival_at": arrival, "first_scheduled_at": arrival + 5.0, "status": "finished",
                          "sched_delay_s": np.full(n, 5.0)})
    assert overload_summary(frame)["overloaded"] is False  # long but steady: not growing
    frame["first_scheduled_at"] = arrival + arrival * 0.5  # delay grows with every arrival
    frame["sched_delay_s"] = arrival * 0.5
    assert overload_summary(frame)["overloaded"] is True


# -- huge runs: progress and memory ------------------------------------------------------------
def test_plain_progress_runs_from_generation_on() -> None:
    from simulator.config.run_config import RunConfig
    from simulator.simulation import simulate
    from simulator.util.progress import RunProgress

    buffer = io.StringIO()
    progress = RunProgress(stream=buffer, plain=True, every_s=0.0, quiet_s=0.0)
    simulate(RunConfig().replace(workload__num_requests=300, workload__qps=4.0), progress=progress)
    phases = [line.split("] ", 1)[1] for line in buffer.getvalue().splitlines()]
    assert phases[:3] == ["generating 300 requests...", "building 300 requests...", "simulating: 0/300"]
    assert re.fullmatch(r"simulating: 300/300 \(100%\), \d+s in this step, ETA 0s", phases[-1]), phases[-1]
    assert "\x1b[" not in buffer.getvalue()  # plain lines, no terminal codes


def test_short_piped_run_keeps_stderr_clean_and_bad_out_is_refused_first() -> None:
    res = subprocess.run([*SIMULATE, "run", "--num-requests", "30"], capture_output=True, text=True, cwd=ROOT,
                         timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    res = subprocess.run([*SIMULATE, "run", "--num-requests", "300", "--out", "/dev/null/x"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 2 and len(res.stderr.splitlines()) == 1 and "--out" in res.stderr


def test_progress_lines_carry_counts_and_eta() -> None:
    from simulator.util.progress import RunProgress

    buffer = io.StringIO()
    progress = RunProgress(stream=buffer, plain=True, every_s=0.0, quiet_s=0.0)
    progress.phase("generating 1,000 requests")
    progress.start("simulating", 1000)
    progress.update(250)
    progress.close()
    lines = buffer.getvalue().splitlines()
    assert lines[0].endswith("generating 1,000 requests...") and lines[1].endswith("simulating: 0/1,000")
    assert re.search(r"simulating: 250/1,000 \(25%\), \d+s in this step, ETA \d+s$", lines[2]), lines[2]


def test_a_run_that_cannot_fit_in_memory_is_refused_up_front() -> None:
    from simulator.config.errors import ConfigError
    from simulator.config.resources import BYTES_PER_REQUEST, GiB, check_run_fits, estimate_run_bytes

    assert estimate_run_bytes(1000) == 1000 * BYTES_PER_REQUEST
    assert estimate_run_bytes(1000, bytes_per_request=500) == 500_000  # one figure to update
    assert check_run_fits(10_000, available=2 * GiB) == 10_000 * BYTES_PER_REQUEST
    with pytest.raises(ConfigError) as err:
        check_run_fits(10_000_000, available=4 * GiB)
    message = str(err.value)
    assert message.startswith("--num-requests") and "\n" not in message
    assert f"{10_000_000 * BYTES_PER_REQUEST / GiB:.1f} GiB" in message and "4.0 GiB" in message
    assert f"--num-requests {4 * GiB // BYTES_PER_REQUEST:,} or fewer" in message
    # Through the CLI: refused in one line before generating anything.
    res = subprocess.run([*SIMULATE, "run", "--num-requests", "100000000"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "GiB" in res.stderr and "generating" not in res.stderr


def test_auto_workers_is_bounded_by_cpus_use_and_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.config.resources
    from simulator.config.resources import BYTES_PER_REQUEST, GiB, auto_workers, available_cpus

    assert available_cpus() >= 1
    assert auto_workers(3, 2048, available=64 * GiB, cpus=2) == 2  # the CPUs
    assert auto_workers(3, 2048, available=64 * GiB, cpus=16) == 3  # what the command can use
    assert auto_workers(8, 1_000_000, available=3 * 1_000_000 * BYTES_PER_REQUEST, cpus=16) == 3  # memory
    assert auto_workers(8, 10_000_000, available=1 * GiB, cpus=16) == 1  # at least one
    monkeypatch.setattr(simulator.config.resources, "available_bytes", lambda: None)  # where memory cannot be read
    assert auto_workers(8, 10_000_000, cpus=4) == 4  # unknown memory is no limit


def test_workers_option_takes_a_count_or_auto() -> None:
    from simulator.cli.options import parse_workers
    from simulator.config.errors import ConfigError

    assert parse_workers("3", lambda: 7) == 3
    assert parse_workers(" Auto ", lambda: 7) == 7
    for bad in ("0", "-1", "two", "1.5", "", "\u00b2"):
        with pytest.raises(ConfigError) as err:
            parse_workers(bad, lambda: 7)
        assert str(err.value).startswith("--workers:") and "auto" in str(err.value)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_iteration_table_written_in_chunks_reads_back_as_the_frame(tmp_path: Path, fmt: str) -> None:
    """Large runs write the iteration table chunk by chunk; the file is the frame, row for row."""
    import pandas as pd

    from simulator.config.run_config import RunConfig, WorkloadConfig
    from simulator.report.output import write_chunks
    from simulator.simulation import simulate

    result = simulate(RunConfig(workload=WorkloadConfig("sharegpt", qps=6.0, num_requests=40), num_replicas=3))
    frame = result.iteration_frame()
    assert len(frame) > 50
    path = write_chunks(result.iteration_chunks(chunk_rows=17), tmp_path / "iterations", fmt)
    back = pd.read_parquet(path) if fmt == "parquet" else pd.read_csv(path)
    pd.testing.assert_frame_equal(back, frame, check_exact=fmt == "parquet", rtol=1e-15)
    assert (frame["started_at"] + frame["duration_s"]).is_monotonic_increasing  # end-time order across replicas


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_request_table_written_in_chunks_reads_back_as_the_frame(tmp_path: Path, fmt: str) -> None:
    """The request table goes out from numpy columns in chunks, no pandas frame: the file is
    request_frame, row for row (a rejected request's reason and NaN times included)."""
    import numpy as np
    import pandas as pd

    from simulator.config.run_config import RunConfig
    from simulator.report.metrics import request_columns, request_frame
    from simulator.report.output import column_chunks, write_chunks
    from simulator.simulation import simulate
    from simulator.workload.generate import RequestTable

    table = RequestTable(np.arange(30) * 0.2, np.r_[np.full(29, 300), 9000], np.full(30, 20), source="hand")
    result = simulate(RunConfig(num_replicas=2), table)
    frame = request_frame(result)
    assert frame["reject_reason"].iloc[-1]  # 9,000 tokens exceed the context: rejected with a reason
    path = write_chunks(column_chunks(request_columns(result), chunk_rows=7), tmp_path / "requests", fmt)
    back = pd.read_parquet(path) if fmt == "parquet" else pd.read_csv(path, keep_default_na=False,
                                                                        na_values={c: [""] for c in frame.columns
                                                                                   if c != "reject_reason"})
    pd.testing.assert_frame_equal(back, frame, check_exact=fmt == "parquet", rtol=1e-15)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_write_run_writes_both_tables_side_by_side_as_the_frames(tmp_path: Path, fmt: str) -> None:
    """write_run writes the two tables in two threads, the iteration table's chunks gathered
    ahead: the files are still the frames; parquet float columns go without a dictionary
    (nearly all distinct), integer and text columns with one."""
    import pandas as pd
    import pyarrow.parquet as pq

    from simulator.config.run_config import RunConfig, WorkloadConfig
    from simulator.report.metrics import request_frame
    from simulator.report.output import write_run
    from simulator.simulation import simulate

    result = simulate(RunConfig(workload=WorkloadConfig("sharegpt", qps=6.0, num_requests=40), num_replicas=3))
    paths = write_run(result, tmp_path / "out", fmt)
    read = pd.read_parquet if fmt == "parquet" else pd.read_csv
    exact = {"check_exact": fmt == "parquet", "rtol": 1e-15}
    pd.testing.assert_frame_equal(read(paths["iterations"]), result.iteration_frame(), **exact)
    requests = request_frame(result)
    back = pd.read_parquet(paths["requests"]) if fmt == "parquet" else pd.read_csv(
        paths["requests"], keep_default_na=False, na_values={c: [""] for c in requests.columns if c != "reject_reason"})
    pd.testing.assert_frame_equal(back, requests, **exact)
    if fmt == "csv":
        return
    meta = pq.ParquetFile(paths["requests"]).metadata
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    dictionary = {name: meta.row_group(0).column(i).has_dictionary_page for i, name in enumerate(names)}
    assert not dictionary["arrival_at"] and not dictionary["ttft_s"]
    assert dictionary["request_id"] and dictionary["status"]


def test_prefetched_yields_every_item_in_order_and_passes_errors_on() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from simulator.report.output import prefetched

    def failing():  # noqa: ANN202
        yield 1
        raise ValueError("chunk 2 failed")

    with ThreadPoolExecutor(2) as pool:
        assert list(prefetched(iter(range(5)), pool)) == [0, 1, 2, 3, 4]
        assert list(prefetched(iter([]), pool)) == []
        with pytest.raises(ValueError, match="chunk 2"):
            list(prefetched(failing(), pool))


def test_a_preset_run_under_another_policy_says_so() -> None:
    """sglang-2026 was fitted with SGLang's own batches: --engine sglang-2026 alone runs them (it ran vLLM V1's,
    with a note); a run under another policy given says so in its title; under sglang (or a preset fitted with the
    run's policy) nothing is added."""
    from typer.testing import CliRunner

    from simulator.cli import app
    from simulator.config.errors import ConfigError
    from simulator.costmodel.engine_model import EngineModel

    base = ["run", "--num-requests", "10", "--no-progress", "--gpu", "rtx-4090"]  # (a GPU without kernel tables)
    implied = CliRunner().invoke(app, [*base, "--engine", "sglang-2026"])
    assert implied.exit_code == 0 and " · sglang (" in implied.stdout and "--scheduler sglang" not in implied.stdout
    other = CliRunner().invoke(app, [*base, "--engine", "sglang-2026", "--scheduler", "vllm-v1"])
    assert other.exit_code == 0 and "note: sglang-2026 was fitted with --scheduler sglang" in other.stdout
    own = CliRunner().invoke(app, [*base, "--engine", "sglang-2026", "--scheduler", "sglang"])
    assert own.exit_code == 0 and "--scheduler sglang" not in own.stdout
    # ... and over other kernel prices than its own tables (the roofline: the GPU has none)
    assert "note: sglang-2026 was fitted with --kernels sglang" in own.stdout
    trt = CliRunner().invoke(app, [*base, "--engine", "trtllm-2026"])  # fitted under vllm-v1, the run's policy
    assert trt.exit_code == 0 and "note: trtllm-2026 was fitted with --kernels trtllm" in trt.stdout
    assert "fitted with" not in CliRunner().invoke(app, base).stdout  # vllm-2026 ran vllm-v1, the default
    with pytest.raises(ConfigError, match="engine.scheduler"):
        EngineModel(name="x", source="-", fitted="-", scheduler="tgi")
    with pytest.raises(ConfigError, match="engine.kernels"):
        EngineModel(name="x", source="-", fitted="-", kernels="cutlass")


def test_a_preset_run_as_fitted_adds_no_note(aic) -> None:  # noqa: ANN001
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--num-requests", "10", "--no-progress", "--gpu", "h100-sxm",
                                   "--engine", "sglang-2026", "--scheduler", "sglang", "--kernels", "sglang"])
    assert res.exit_code == 0, res.output
    assert "engine sglang-2026" in res.stdout and "fitted with" not in res.stdout
    # --engine alone takes both where the GPU has the tables: the same run
    alone = CliRunner().invoke(app, ["run", "--num-requests", "10", "--no-progress", "--gpu", "h100-sxm",
                                     "--engine", "sglang-2026"])
    def figures(out: str) -> list[str]:
        return [line for line in out.splitlines() if " wall" not in line]  # (the wall-clock time differs)

    assert alone.exit_code == 0 and figures(alone.stdout) == figures(res.stdout)


def test_warmup_rows_are_marked_in_the_requests_table(tmp_path):  # noqa: ANN001
    """summary.json leaves the warm-up out (32 of 40 here); the requests table keeps every row and says which."""
    import json

    import pandas as pd
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--concurrency", "8", "--num-requests", "40", "--num-warmup", "8",
                                   "--no-progress", "--out", str(tmp_path / "r"), "--format", "csv"])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(tmp_path / "r" / "requests.csv")
    assert len(table) == 40 and table["is_warmup"].sum() == 8
    assert set(table.loc[table["is_warmup"], "request_id"]) == set(range(8))
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["num_requests"] == 32
