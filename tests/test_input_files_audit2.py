"""Input files a second audit found read wrongly: a bench result's requests sorted by send time apart from their
lengths (the fit replayed another workload), a bench list given as null (a TypeError), and more below, each now
read right or refused in one line naming the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.calibrate.engine_fit import read_bench
from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "data" / "vllm_bench_fixture.json"


def _bench(tmp_path: Path, **changes: object) -> Path:
    data = json.loads(BENCH.read_text())
    data.update(changes)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


def test_bench_requests_are_ordered_by_send_time_with_their_own_lengths(tmp_path: Path) -> None:
    data = json.loads(BENCH.read_text())
    n = len(data["input_lens"])
    sent = [float(n - i) for i in range(n)]  # listed last-sent first
    run = read_bench(_bench(tmp_path, request_submit_times=sent))
    ok = [i for i in range(n) if not data["errors"][i] and data["output_lens"][i] > 1]
    order = sorted(ok, key=lambda i: sent[i])
    assert np.array_equal(run.arrival_at, np.array([sent[i] for i in order]) - min(sent[i] for i in ok))
    assert run.input_lens.tolist() == [data["input_lens"][i] for i in order]  # each request keeps its lengths...
    assert run.output_lens.tolist() == [data["output_lens"][i] for i in order]
    assert run.ttfts.tolist() == [data["ttfts"][i] for i in order]  # ... and its measured figures
    assert [g.tolist() for g in run.itls] == [data["itls"][i] for i in order]
    # listed in send order, nothing moves
    inorder = read_bench(_bench(tmp_path, request_submit_times=sorted(sent)))
    assert inorder.input_lens.tolist() == [data["input_lens"][i] for i in ok]


@pytest.mark.parametrize("key", ["input_lens", "ttfts", "itls"])
def test_a_bench_list_given_as_null_is_refused(tmp_path: Path, key: str) -> None:
    path = _bench(tmp_path, **{key: None})
    with pytest.raises(ConfigError, match=f"^bench: {path} lacks {key} \\({key} null\\)"):
        read_bench(path)


# -- CSV tables (calibrate-engine --rows / --table, fit --profile) ---------------------------------------------------

ROWS_HEADER = "backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms"
ROW = "vllm,llama-3.1-8b,h100-sxm,1024,128,{c},50,10"


def test_a_csv_row_is_numbered_by_its_line_and_read_cell_by_cell(tmp_path: Path) -> None:
    from simulator.calibrate.csv_input import read_csv_checked

    path = tmp_path / "rows.csv"
    # a trailing comma on each row: pandas took the first column for the index, shifting every cell left
    path.write_text(ROWS_HEADER + "\n" + "\n".join(ROW.format(c=c) + "," for c in (4, 8)) + "\n\n\n")
    df = read_csv_checked(path, "rows")
    assert df["backend"].tolist() == ["vllm", "vllm"] and df["concurrency"].tolist() == [4, 8]
    assert df["concurrency"].dtype.kind == "i"  # the trailing blank lines leave no column float
    path.write_text(ROWS_HEADER + "\n" + ROW.format(c=4) + "\n\n" + ROW.format(c=8) + "\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} line 3 is blank"):  # (was dropped, so later lines were
        read_csv_checked(path, "rows")                                         # named one line early)
    path.write_text(ROWS_HEADER + "\n" + ROW.format(c=4) + ",EXTRA\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} line 2 has 9 cells under a header of 8"):
        read_csv_checked(path, "rows")


@pytest.mark.parametrize(("row", "needle"), [
    (",llama-3.1-8b,h100-sxm,1024,128,4,50,10,1", "line 2: backend is empty"),  # was "backend np.float64(nan)"
    ("vllm,,h100-sxm,1024,128,4,50,10,1", "line 2: model is empty"),
    ("vllm,llama-3.1-8b,h100-sxm,1024,128,4,50,10,true", "line 2: tp must be a whole number >= 1, got True"),
])
def test_a_benchmark_row_with_an_empty_or_boolean_cell_is_refused(tmp_path: Path, row: str, needle: str) -> None:
    from simulator.calibrate.silicon_fit import read_user_rows

    path = tmp_path / "rows.csv"
    path.write_text(ROWS_HEADER + ",tp\n" + "\n".join([row] * 4) + "\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} {needle}"):
        read_user_rows(path)


def test_an_iteration_table_row_without_its_model_is_refused(tmp_path: Path) -> None:
    from simulator.calibrate.engine_fit import check_iteration_table, read_iteration_table

    path = tmp_path / "t.csv"
    path.write_text("tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s,model\n"
                    + "".join(f"1,0,0,{b},1000,0.0{b + 10},\n" for b in range(8, 16)))
    with pytest.raises(ConfigError, match="^table: row on line 2 has no model"):  # (an AttributeError traceback)
        check_iteration_table(read_iteration_table(path), "llama-2-7b", "a100-80gb")


@pytest.mark.parametrize(("column", "value"), [("gpu", "h100-sxm"), ("tp_size", "2")])
def test_a_tidy_profile_column_the_fit_does_not_read_is_refused(tmp_path: Path, column: str, value: str) -> None:
    """A "gpu" column was not read (the fit took --gpu's label for H100 timings), nor a "tp_size" one (TP-2
    timings fitted as TP 1)."""
    from simulator.calibrate.fit_data import read_profile

    path = tmp_path / "p.csv"
    path.write_text(f"op,num_tokens,{column},model,median_s\n"
                    + "".join(f"qkv_proj,{n},{value},llama-2-7b,{n * 1e-6}\n" for n in (1, 2, 4, 8)))
    with pytest.raises(ConfigError, match=f"unknown column\\(s\\) {column}"):
        read_profile(path, device="a100-80gb")
    path.write_text(path.read_text().replace(column, "device" if column == "gpu" else "tp"))
    assert len(read_profile(path, device="h100-sxm")) == 4


# -- resuming an --out folder whose tables were edited --------------------------------------------------------------

PLAN = ["plan", "--qps", "1", "--gpus", "a100-80gb", "--modes", "agg", "--tps", "1", "--seqs", "128", "--budgets", "512",
        "--no-verify", "--num-requests", "100"]


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda t: t.replace("\n", ",EXTRA\n", 2).replace(",EXTRA\n", "\n", 1), "line 2 has more cells than the header"),
    (lambda t: t.split("\n")[0] + "\n" + t.split("\n")[1].rsplit(",", 3)[0] + "\n", "line 2 has fewer cells"),
    (lambda t: t.replace("key,", "KEY,", 1), "line 2 has no key or status"),
    (lambda t: t.replace(",ok,,", ",ok,,x", 1), "has capacity_qps 'x"),
])
def test_a_plan_resumed_from_an_edited_layouts_table_is_refused(tmp_path: Path, edit, needle: str) -> None:  # noqa: ANN001
    # (TypeError, KeyError or ValueError tracebacks, or a UnicodeDecodeError for other bytes)
    from test_cli_fuzz_round13 import invoke

    out = tmp_path / "plan"
    code, text = invoke(*PLAN, "--out", str(out))
    assert code == 0, text
    table = out / "layouts.csv"
    table.write_text(edit(table.read_text()))
    code, text = invoke(*PLAN, "--out", str(out))
    assert code == 2 and f"\nerror: --out: {table} " in text and needle in text, text
    table.write_bytes(b"\xff\xfe" + table.read_bytes())
    code, text = invoke(*PLAN, "--out", str(out))
    assert code == 2 and "is not a plan's layouts table (UnicodeDecodeError)" in text, text


@pytest.mark.parametrize("edit", [
    lambda d: {**d, "base": [], "points": [*d["points"], {"key": "another"}]},  # (AttributeError)
    lambda d: {**d, "points": [{**d["points"][0], "key": ["x"]}]},  # (TypeError: unhashable list)
])
def test_a_sweep_resumed_from_an_edited_record_is_refused(tmp_path: Path, edit) -> None:  # noqa: ANN001
    from test_cli_fuzz_round13 import invoke

    path = tmp_path / "s.toml"
    path.write_text("[base]\nnum_requests = 8\n[grid]\nqps = [1, 2]\n")
    out = tmp_path / "o"
    assert invoke("sweep", str(path), "--out", str(out))[0] == 0
    record = out / "sweep.json"
    record.write_text(json.dumps(edit(json.loads(record.read_text()))))
    code, text = invoke("sweep", str(path), "--out", str(out))
    assert code == 2 and f"error: --out: {record} is not a sweep's record (unreadable, or edited by hand)" in text, text


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("ttft_slo_s", -1, "must be a positive number of seconds, got -1"),
    ("format", "xls", "unknown format 'xls'"),
    ("metrics", "foo", "unknown view 'foo'"),
    ("goodput", "ttft:abc", "expected NAME:MILLISECONDS"),
])
def test_a_bad_value_of_a_config_file_s_report_section_is_the_file_s(tmp_path: Path, key: str, value: object,
                                                                       needle: str) -> None:
    # (blamed on --ttft-slo, --format, ...: flags the user never typed)
    from test_cli_fuzz_round13 import invoke

    assert invoke("run", "--num-requests", "10", "--no-progress", "--out", str(tmp_path / "r"))[0] == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    config["report"][key] = value
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    code, out = invoke("run", "--config", str(path), "--no-progress", "--out", str(tmp_path / "r2"))
    assert code == 2 and out.startswith(f"error: --config {path}: report.{key}: ") and needle in out, out
    assert out.rstrip().endswith(f"correct report.{key} in the file)"), out


@pytest.mark.parametrize("value", ["010", "1:30", "0x10", "0b11"])
def test_a_yaml_sweep_number_yaml_1_1_reads_in_another_base_is_refused(tmp_path: Path, value: str) -> None:
    # (max_num_seqs: 010 ran as 8, 1:30 as 90)
    from simulator.planning.sweep import load_sweep_file

    path = tmp_path / "s.yaml"
    path.write_text(f"base:\n  num_requests: 8\ngrid:\n  max_num_seqs: [{value}]\n")
    with pytest.raises(ConfigError, match=f"line 4: '{value}' is read by YAML 1.1 as a binary, octal"):
        load_sweep_file(path)
    path.write_text("base:\n  num_requests: 1_000\n  qps: .5\ngrid:\n  max_num_seqs: [8, -2]\n  cv: [0.5]\n")
    assert load_sweep_file(path) == {"base": {"num_requests": 1000, "qps": 0.5}, "grid": {"max_num_seqs": [8, -2],
                                                                                         "cv": [0.5]}}


# -- smaller misreads: engine artifacts, prices, HF configs --------------------------------------------------------

def test_an_engine_artifact_s_tp_given_twice_or_a_term_of_hours_is_refused() -> None:
    from simulator.costmodel.engine_model import ENGINES

    base = ENGINES["vllm-v1"].to_dict()
    with pytest.raises(ConfigError, match=r"^engine\.rpc_s: tp=2 is given twice"):  # (the smaller one won, unsaid)
        type(ENGINES["vllm-v1"]).from_dict({**base, "rpc_s": [[2, 0.5], [2, 0.001]]})
    with pytest.raises(ConfigError, match=r"^engine\.cpu_iteration_s: 1e\+300 s is more than an hour"):
        type(ENGINES["vllm-v1"]).from_dict({**base, "cpu_iteration_s": 1e300})  # (ran to TTFTs of 1e300 s)


def test_a_prices_csv_gpu_the_catalog_lacks_names_the_file_and_line(tmp_path: Path) -> None:
    from simulator.config.prices import load_price_file

    path = tmp_path / "p.csv"
    path.write_text("gpu,usd_per_gpu_hour\nh100-sxm,6\nbanana,3\n")
    with pytest.raises(ConfigError, match=f"^--prices {path}: line 3: unknown GPU 'banana'"):
        load_price_file(path)


def test_an_hf_quantization_config_that_is_no_object_is_refused(tmp_path: Path) -> None:
    from simulator.config.hf_config import load_hf_model

    model = json.loads((ROOT / "tests" / "data" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
    model["quantization_config"] = [1]  # (read as an unquantized checkpoint)
    (tmp_path / "config.json").write_text(json.dumps(model))
    with pytest.raises(ConfigError, match=r"^model\.quantization_config: .*must be an object"):
        load_hf_model(str(tmp_path / "config.json"))


def test_a_csv_line_of_spaces_or_before_the_header_or_a_later_row_s_extra_cells(tmp_path: Path) -> None:
    from simulator.calibrate.csv_input import read_csv_checked

    path = tmp_path / "rows.csv"
    path.write_text(ROWS_HEADER + "\n" + ROW.format(c=4) + "\n" + ROW.format(c=8) + "\n  \n\t\n,,\n")
    df = read_csv_checked(path, "rows")  # (lines of spaces or commas after the rows: dropped, as blank ones are)
    assert df["concurrency"].tolist() == [4, 8] and df["concurrency"].dtype.kind == "i"
    path.write_text(ROWS_HEADER + "\n" + ROW.format(c=4) + "\n   \n" + ROW.format(c=8) + "\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} line 3 is blank"):  # (was read as a row of text)
        read_csv_checked(path, "rows")
    path.write_text("\n" + ROWS_HEADER + "\n" + ROW.format(c=4) + "\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} line 1 is blank, where its header should be"):
        read_csv_checked(path, "rows")
    path.write_text(ROWS_HEADER + "\n" + ROW.format(c=4) + "\n" + ROW.format(c=8) + ",9\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} line 3 has 9 cells"):  # (was a ParserError)
        read_csv_checked(path, "rows")
    path.write_text(ROWS_HEADER + "\n" + ROW.format(c=4) + "\n" + ROW.format(c=8) + ",\n")  # one trailing comma
    assert read_csv_checked(path, "rows")["concurrency"].tolist() == [4, 8]


def test_a_boolean_tp_cell_beside_an_empty_one_is_refused(tmp_path: Path) -> None:
    from simulator.calibrate.silicon_fit import read_user_rows

    path = tmp_path / "rows.csv"  # (pandas reads true as True beside an empty cell: to_numeric took it for 1)
    path.write_text(ROWS_HEADER + ",tp\n" + "\n".join(ROW.format(c=4) + cell for cell in (",true", ",", ",true",
                                                                                           ",true")) + "\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} line 2: tp must be a whole number >= 1, got True"):
        read_user_rows(path)


def test_a_csv_quote_never_closed_is_refused_not_read_as_one_cell(tmp_path: Path) -> None:
    # (csv's lenient reader kept it as one cell holding every later row: a --rows fit ran on the rows before it)
    from simulator.calibrate.csv_input import read_csv_checked

    path = tmp_path / "rows.csv"
    path.write_text(ROWS_HEADER + ",backend_version\n" + ROW.format(c=4) + ',"0.6\n' + ROW.format(c=8) + ",0.7\n")
    with pytest.raises(ConfigError, match=f"^rows: {path} line 2 is not a readable CSV record"):
        read_csv_checked(path, "rows")
