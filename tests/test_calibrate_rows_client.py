"""``calibrate-engine --rows`` replays each row as the benchmark client that measured it ran it (``--client``
and the client columns): rows measured with banded lengths and replayed with exact ones locked the simulated
users into waves (every prefill in one step), a TTFT several times the measured one, which no engine term fits."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.calibrate import silicon_fit as sf
from simulator.cli.engine import calibrate_engine_command
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig

TRUTH = sf.Params(False, np.array([2e-3, 20e-6, 1e-6, 5e-6]))
Row = collections.namedtuple("Row", "backend kernels model gpu isl osl concurrency tp")
ROWS = [Row("vllm", "roofline", m, "h100-sxm", isl, osl, c, 1) for m in ("llama-3.1-8b", "qwen3-8b")
        for isl, osl, c in ((1024, 32, 8), (2048, 48, 16), (4000, 32, 8), (512, 64, 32))]


def _measured(client: sf.RowClient, budget: int = 2048) -> pd.DataFrame:
    """The rows 'measured' under TRUTH's terms by the simulator replaying each as ``client`` ran it."""
    out = []
    for row in ROWS:
        ttft, tpot = sf.replay(sf.trace_of(sf.user_row_config(row, RunConfig(), budget, client)), TRUTH)
        out.append({**row._asdict(), "ttft_ms": ttft, "tpot_ms": tpot})
    return pd.DataFrame(out)


def test_rows_are_replayed_as_their_client_ran_them(tmp_path: Path) -> None:
    """InferenceX's rows ([0.8 len, len] lengths) fit exactly when --client inferencex says so; replayed with exact
    lengths (vllm bench serve's default) the same rows are far off, before and after the fit."""
    csv = tmp_path / "rows.csv"
    _measured(sf.row_client({"client": "inferencex"})).to_csv(csv, index=False)
    base = RunConfig().replace(scheduler__max_num_batched_tokens=2048)
    told = calibrate_engine_command(base, tmp_path / "told.json", rows=csv, client="inferencex")["report"]
    exact = calibrate_engine_command(base, tmp_path / "exact.json", rows=csv)["report"]
    assert told["holdout_after"]["ttft_median"] < 0.01 and told["holdout_after"]["tpot_median"] < 0.01
    assert exact["holdout_after"]["ttft_median"] > 10 * told["holdout_after"]["ttft_median"] + 0.05
    assert told["client"].startswith("inferencex") and exact["client"].startswith("vllm-bench")
    # The same stated per row: a client column (the file's --client left at its default).
    pd.read_csv(csv).assign(client="inferencex").to_csv(tmp_path / "col.csv", index=False)
    by_column = calibrate_engine_command(base, tmp_path / "col.json", rows=tmp_path / "col.csv")["report"]
    assert by_column["holdout_after"] == pytest.approx(told["holdout_after"])


def test_each_client_replays_its_lengths_requests_and_warm_up() -> None:
    """The client's band or spread, request count and drained warm-up reach the row's workload; the row's client
    columns override the file's --client settings."""
    row = ROWS[0]
    work = sf.user_row_config(row, RunConfig(), None, sf.row_client({}, sf.parse_client("vllm-bench"))).workload
    assert (work.range_ratio, work.is_banded, work.is_spread) == (0.0, False, False)  # vllm bench's default: exact
    assert (work.warmup_mode, work.num_warmup, work.num_requests) == ("drain", 8, 8 + 1000)
    banded = sf.row_client({}, sf.parse_client("vllm-bench,range_ratio=0.5,num_prompts=40"))
    work = sf.user_row_config(row, RunConfig(), None, banded).workload
    assert (work.range_ratio, work.range_style, work.is_banded, work.num_requests) == (0.5, "vllm", True, 8 + 40)
    work = sf.user_row_config(row, RunConfig(), None, sf.row_client({"client": "inferencex"})).workload
    assert (work.range_ratio, work.range_style, work.num_requests) == (0.8, "sglang", 8 + 10 * 8)
    spread = sf.row_client({"client": "aiperf", "isl_stddev": 10.0, "osl_stddev": float("nan")})
    work = sf.user_row_config(row, RunConfig(), None, spread).workload
    assert (work.prompt_tokens_stddev, work.output_tokens_stddev, work.num_requests) == (10.0, 0.0, 8 + 20 * 8)
    # a row's cells over the file's; a row naming another client takes none of the file's settings
    assert sf.row_client({"range_ratio": 0.2}, sf.parse_client("vllm-bench,range_ratio=0.5")).range_ratio == 0.2
    assert sf.row_client({"client": "inferencex"}, sf.parse_client("vllm-bench,range_ratio=0.5")).range_ratio == 0.8
    # a client's count beyond what a row replays is capped
    many = sf.row_client({"num_prompts": 10**6})
    assert sf.user_row_config(row, RunConfig(), None, many).workload.num_requests == 8 + sf.MAX_ROW_REQUESTS


@pytest.mark.parametrize(("cells", "match"), [
    ({"client": "genai-perf"}, "line 3: client 'genai-perf' is not one of vllm-bench, inferencex, aiperf"),
    ({"isl_stddev": 5}, "line 3: isl_stddev vllm-bench draws no normal spread"),
    ({"client": "aiperf", "range_ratio": 0.5}, "line 3: range_ratio aiperf draws no band"),
    ({"range_ratio": 1.0}, r"line 3: range_ratio vllm-bench draws lengths in \[len x \(1-r\), len x \(1\+r\)\], so r must be below 1"),
    ({"client": "inferencex", "range_ratio": 1.5}, r"line 3: range_ratio inferencex draws lengths in \[len x r, len\], so r must be at most 1, got 1.5"),
    ({"num_prompts": 2.5}, "line 3: num_prompts must be a whole number >= 1, got 2.5"),
    ({"range_ratio": "wide"}, "line 3: range_ratio must be a finite number >= 0, got 'wide'"),
])
def test_client_columns_are_checked_per_line(tmp_path: Path, cells: dict, match: str) -> None:
    frame = pd.DataFrame([{**r._asdict(), "ttft_ms": 50.0, "tpot_ms": 5.0} for r in ROWS[:3]])
    for key, value in cells.items():
        frame[key] = [None, value, None]
    frame.to_csv(tmp_path / "rows.csv", index=False)
    with pytest.raises(ConfigError, match=match):
        calibrate_engine_command(RunConfig(), tmp_path / "e.json", rows=tmp_path / "rows.csv")


def test_client_flag_is_checked_and_read_by_rows_only(tmp_path: Path) -> None:
    for spec, match in (("vllm-bench,ratio=0.5", "--client: 'ratio=0.5' is not key=value with a key of"),
                        ("aiperf,range_ratio=0.8", "--client: range_ratio aiperf draws no band"),
                        ("sharegpt", "--client: client 'sharegpt' is not one of")):
        with pytest.raises(ConfigError, match=match):
            sf.parse_client(spec)
    table = tmp_path / "steps.csv"
    table.write_text("tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s\n")
    with pytest.raises(ConfigError, match="--client: names the client that measured --rows"):
        calibrate_engine_command(RunConfig(), tmp_path / "e.json", table=table, client="inferencex")
