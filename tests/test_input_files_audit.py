"""Input files an audit found read wrongly, each now refused in one line naming the field and the fix: a sweep
file of another encoding (a UnicodeDecodeError traceback), a prices CSV row short of cells (AttributeError) or a
price given as true ($1/h), a bench result longer than the model's context (an artifact scored inf against inf) or
whose gap lists do not match its lengths, a --config file's bad value blamed on the flag typed beside it, a session
file whose block_size came after its first 4 KB (an unknown format), an empty --trace folder, an empty
--acceptance-rates item (dropped, moving the later rates a position earlier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from simulator.cli.app import app
from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "data" / "vllm_bench_fixture.json"
runner = CliRunner()


def refusal(*args: str) -> ConfigError:
    res = runner.invoke(app, list(args))
    assert isinstance(res.exception, ConfigError), res.output
    return res.exception


# -- 2a: a sweep file that is not UTF-8 ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["s.toml", "s.yaml"])
def test_a_sweep_file_not_utf8_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"\xff\xfe[base]\n")  # UTF-16's byte-order mark
    err = refusal("sweep", str(path), "--out", str(tmp_path / "o"))
    assert str(err).startswith(f"sweep: {path} is not UTF-8 text") and "save the sweep file as UTF-8" in str(err)


# -- 2b, 3a: prices --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "needle"), [
    ("usd_per_gpu_hour,gpu\n5\n", "line 2 lacks gpu"),
    ("gpu,usd_per_gpu_hour\nh100-sxm\n", "line 2 lacks usd_per_gpu_hour"),
])
def test_a_prices_row_short_of_cells_is_refused(tmp_path: Path, text: str, needle: str) -> None:
    from simulator.config.prices import load_price_file

    path = tmp_path / "p.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"^--prices {path}: {needle}"):
        load_price_file(path)
    # an optional max_w cell left off a row stays what an empty one is
    path.write_text("gpu,usd_per_gpu_hour,max_w\nh100-sxm,5\n")
    assert load_price_file(path)["h100-sxm"].usd_per_gpu_hour == 5.0


@pytest.mark.parametrize(("name", "text"), [("b.json", '{"h100-sxm": true}'), ("b.toml", "h100-sxm = false\n")])
def test_a_price_given_as_a_boolean_is_refused(tmp_path: Path, name: str, text: str) -> None:
    from simulator.config.prices import load_price_file

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"price of h100-sxm is (true|false), not a number"):
        load_price_file(path)
    path.write_text(text.replace("true", "6.5").replace("false", "6.5"))
    assert load_price_file(path)["h100-sxm"].usd_per_gpu_hour == 6.5


# -- 3b, 3c: vllm bench results --------------------------------------------------------------------------------------

def _bench(tmp_path: Path, change) -> Path:  # noqa: ANN001 - a function of the fixture's dict
    data = json.loads(BENCH.read_text())
    change(data)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


def _longer_than_llama2(data: dict) -> None:
    data["input_lens"] = [5000] * len(data["input_lens"])  # past llama-2-7b's 4,096-token context


def test_bench_requests_past_the_context_are_refused_before_the_fit(tmp_path: Path) -> None:
    """Every request longer than the model's context: exit 0, an artifact written, 'held-out error before: ' blank
    and the fit 'score inf against inf'."""
    path = _bench(tmp_path, _longer_than_llama2)
    out = tmp_path / "engine.json"
    err = refusal("calibrate-engine", "--bench", str(path), "--model", "llama-2-7b", "--scheduler", "vllm-v1",
                  "--engine", "vllm-v1", "--out", str(out))
    assert str(err).startswith(f"bench: {path}: request 0 (5,000 prompt + ") and "4,096-token context of llama-2-7b" \
        in str(err) and "--model" in str(err)
    assert not out.exists()


def test_a_bench_fit_whose_replays_serve_nothing_writes_no_artifact(tmp_path: Path) -> None:
    """calibrate_bench kept a fit scored inf against inf (its replays rejected every request): refused."""
    from simulator.calibrate.engine_fit import calibrate_bench, read_bench
    from simulator.config.options import build_config

    run = read_bench(_bench(tmp_path, _longer_than_llama2))  # (no context given: the reader lets them through)
    config = build_config(model="llama-2-7b", scheduler="vllm-v1", engine="vllm-v1")
    with pytest.raises(ConfigError, match="^bench: no replay of the benchmark's training requests served them"):
        calibrate_bench(run, config, "vllm-v1", seed=0, max_evals=14)


@pytest.mark.parametrize("delta", [-1, 1])
def test_bench_gaps_that_do_not_match_the_output_length_are_refused(tmp_path: Path, delta: int) -> None:
    from simulator.calibrate.engine_fit import read_bench

    def change(data: dict) -> None:
        gaps = data["itls"][3]
        data["itls"][3] = gaps[:-1] if delta < 0 else [*gaps, gaps[-1]]

    path = _bench(tmp_path, change)
    n = json.loads(BENCH.read_text())["output_lens"][3]
    with pytest.raises(ConfigError, match=rf"^bench: {path}: itls\[3\] has {n - 1 + delta} gaps for "
                                          rf"output_lens\[3\] = {n} tokens"):
        read_bench(path)
    assert len(read_bench(BENCH).itls) == 100  # the fixture as written reads


# -- 4a: a --config file's bad value ---------------------------------------------------------------------------------

def test_a_config_files_bad_value_names_the_file_not_the_flag_typed(tmp_path: Path) -> None:
    path = tmp_path / "q.json"
    path.write_text('{"workload": {"qps": -1}}')
    for extra in (["--qps", "2"], []):
        err = refusal("run", "--config", str(path), *extra)
        assert str(err).startswith(f"--config {path}: workload.qps: must be positive, got -1"), str(err)
        assert "correct workload.qps in the file" in str(err)
    from simulator.cli.app import as_flag

    err = ConfigError("workload.qps", "must be positive, got -1")  # a flag's own value is still named by the flag
    assert str(as_flag(err, ["run", "--qps", "-1"])).startswith("--qps: ")


# -- 4b, 4c: traces --------------------------------------------------------------------------------------------------

def _session_requests_first() -> dict:
    """A session whose requests come first, past 4 KB, then its block size (a writer that orders no keys)."""
    requests = [{"t": float(i), "type": "n", "in": 64 * (64 + i), "out": 50, "hash_ids": list(range(1, 65 + i))}
                for i in range(20)]
    return {"requests": requests, "block_size": 64}


@pytest.mark.parametrize("indent", [None, 1])
def test_a_session_file_is_told_by_its_keys_not_its_first_4kb(tmp_path: Path, indent: int | None) -> None:
    from simulator.workload.prefix_traces import prefix_trace_format

    path = tmp_path / "session.json"
    text = json.dumps(_session_requests_first(), indent=indent)
    assert text.index('"block_size"') > 4096
    path.write_text(text)
    assert prefix_trace_format(str(path)) == "weka-sessions"
    res = runner.invoke(app, ["run", "--trace", str(path), "--model", "llama-3.1-8b", "--no-progress", "--json"])
    assert res.exit_code == 0, res.output
    # JSON lines stay told by their first line: a whole object there and another line after it
    lines = tmp_path / "t.json"
    lines.write_text('{"requests": [], "block_size": 64}\n{"input_length": 5, "output_length": 2, "hash_ids": [1], '
                     '"timestamp": 0}\n')
    assert prefix_trace_format(str(lines)) is None


def test_the_shared_traces_keep_their_formats(shared_data: Path) -> None:
    from simulator.workload.prefix_traces import prefix_trace_format

    traces = shared_data / "traces"
    assert prefix_trace_format(str(traces / "weka_claude_code" / "sessions")) == "weka-sessions"
    for session in sorted((traces / "weka_claude_code" / "sessions").glob("*.json"))[:3]:
        assert prefix_trace_format(str(session)) == "weka-sessions"
    assert prefix_trace_format(str(traces / "mooncake" / "conversation_trace.jsonl")) == "mooncake"
    assert prefix_trace_format(str(traces / "sharegpt-llama-3.1-8b-300-sps10.jsonl")) is None


def test_an_empty_trace_folder_says_it_holds_no_session_files(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    err = refusal("run", "--trace", str(folder), "--no-progress")
    assert f"{folder}: the folder holds no *.json (or *.json.gz) session files" in str(err)  # (field: --trace's)
    assert "not a file" not in str(err)


# -- 4d: --acceptance-rates ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("rates", "needle"), [("0.7,,0.3", "item 2 of 3 in '0.7,,0.3' is empty"),
                                                ("0.7,0.5,0.3,", "item 4 of 4 in '0.7,0.5,0.3,' is empty")])
def test_an_empty_acceptance_rate_is_refused(rates: str, needle: str) -> None:
    from simulator.config.speculative import parse_rates

    with pytest.raises(ConfigError, match="^--acceptance-rates: " + needle):
        parse_rates(rates)
    assert parse_rates("0.7, 0.5,0.3") == (0.7, 0.5, 0.3)


# -- 5: columns and keys no reader reads -----------------------------------------------------------------------------

def test_a_jsonl_key_first_given_on_a_later_line_is_refused(tmp_path: Path) -> None:
    """The first line's keys picked the columns: arrival times first given on line 2 were dropped in silence."""
    from simulator.workload.generate import load_trace

    path = tmp_path / "t.jsonl"
    path.write_text('{"input_toks": 10, "output_toks": 5}\n{"input_toks": 12, "output_toks": 5, "arrived_at": 3}\n')
    with pytest.raises(ConfigError, match=f"{path}: line 2 has key 'arrived_at', which the first line"):
        load_trace(path)
    path.write_text('{"input_toks": 10, "output_toks": 5}\n{"input_toks": 12, "output_toks": 5, "note": "x"}\n')
    assert list(load_trace(path).num_prompt_tokens) == [10, 12]  # a key no reader reads is no column


def test_the_shared_jsonl_traces_still_load(shared_data: Path) -> None:
    from simulator.workload.generate import load_trace

    assert len(load_trace(shared_data / "traces" / "sharegpt-llama-3.1-8b-300-sps10.jsonl")) > 0


def test_an_iteration_table_column_no_fit_reads_is_refused(tmp_path: Path) -> None:
    """--rows refused a misspelt column; --table read it as absent (every row's prefill_context 0)."""
    from simulator.calibrate.engine_fit import read_iteration_table

    rows = [f"1,1,{256 * i},4,500,0.0{i + 2},{128 * i}" for i in range(1, 10)]
    header = "tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s,"
    path = tmp_path / "steps.csv"
    path.write_text("\n".join([header + "Prefill_Context", *rows]) + "\n")
    with pytest.raises(ConfigError, match=f"^table: {path}: unknown column\\(s\\) Prefill_Context"):
        read_iteration_table(path)
    path.write_text("\n".join([header + "prefill_context", *rows]) + "\n")
    assert list(read_iteration_table(path).prefill_context)[:2] == [128, 256]
