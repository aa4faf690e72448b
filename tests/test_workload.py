"""Workloads: arrival processes, length sources, trace formats, filtering, bad input."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config.errors import ConfigError
from simulator.config.run_config import WorkloadConfig
from simulator.workload.generate import RequestTable, band, builtin_data, generate_requests, load_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "traces"
EXAMPLES = Path(__file__).resolve().parents[1] / "traces" / "examples"
SHAREGPT_CSV = SHARED / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"


def shared(name: str) -> Path:
    path = SHARED / name
    if not path.exists():
        pytest.skip(f"shared trace {name} not present")
    return path


def gen(seed: int = 0, **kw) -> RequestTable:
    return generate_requests(WorkloadConfig(**kw), np.random.default_rng(seed))


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------------------------------------
# Arrival processes


@pytest.mark.parametrize(("arrival", "qps", "cv", "n"), [
    ("poisson", 2.0, 1.0, 4000),
    ("poisson", 50.0, 1.0, 4000),
    ("gamma", 4.0, 0.5, 4000),
    ("gamma", 4.0, 1.0, 4000),
    ("gamma", 1.5, 3.0, 20000),
])
def test_arrival_rate_and_cv(arrival: str, qps: float, cv: float, n: int) -> None:
    table = gen(seed=7, name="fixed", arrival=arrival, qps=qps, cv=cv, num_requests=n)
    gaps = np.diff(np.concatenate([[0.0], table.arrival_at]))
    rate = 1.0 / gaps.mean()
    measured_cv = gaps.std() / gaps.mean()
    # Sampling error of the mean is cv/sqrt(n) (<= 2.1% here); 8% cannot hide a wrong rate.
    assert rate == pytest.approx(qps, rel=0.08)
    # Sample CV: a few % error; 15% still tells cv 0.5 / 1 / 3 apart.
    assert measured_cv == pytest.approx(cv, rel=0.15)


def test_fixed_and_burst_arrivals() -> None:
    fixed = gen(name="fixed", arrival="fixed", qps=4.0, num_requests=100)
    np.testing.assert_allclose(np.diff(fixed.arrival_at), 0.25)
    assert fixed.arrival_at[0] == pytest.approx(0.25)
    burst = gen(name="fixed", arrival="burst", num_requests=50)
    assert np.all(burst.arrival_at == 0.0) and len(burst) == 50


@settings(max_examples=40, deadline=None)
@given(arrival=st.sampled_from(["poisson", "gamma", "fixed", "burst"]), qps=st.floats(0.01, 1000),
       cv=st.floats(0.1, 5), n=st.integers(1, 500), seed=st.integers(0, 2**32 - 1),
       name=st.sampled_from(["sharegpt", "arxiv", "fixed", "uniform"]))
def test_request_table_invariants(arrival: str, qps: float, cv: float, n: int, seed: int, name: str) -> None:
    table = gen(seed=seed, name=name, arrival=arrival, qps=qps, cv=cv, num_requests=n,
                prompt_tokens_max=4096, output_tokens_max=256)
    assert len(table) == n
    assert table.arrival_at.dtype == np.float64 and table.num_prompt_tokens.dtype == np.int64
    assert table.arrival_at[0] >= 0 and np.all(np.diff(table.arrival_at) >= 0)
    assert table.num_prompt_tokens.min() >= 1 and table.num_output_tokens.min() >= 1
    frame = table.to_frame()
    assert list(frame.columns) == ["request_id", "arrival_at", "num_prompt_tokens", "num_output_tokens"]
    assert len(frame) == n and frame["request_id"].is_unique


def test_request_table_contract() -> None:
    table = RequestTable(np.array([0.0, 1.0]), np.array([3, 4]), np.array([1, 2]), "hand-made")
    with pytest.raises(ValueError):
        table.arrival_at[0] = 5.0  # read-only
    with pytest.raises(ConfigError):
        RequestTable(np.array([1.0, 0.5]), np.array([3, 4]), np.array([1, 2]), "decreasing")
    with pytest.raises(ConfigError):
        RequestTable(np.array([0.0, 0.5]), np.array([3, 0]), np.array([1, 2]), "zero prompt")
    with pytest.raises(ConfigError):
        RequestTable(np.array([0.0]), np.array([3, 4]), np.array([1, 2]), "ragged")


# ---------------------------------------------------------------------------------------------
# Length sources


def test_fixed_lengths_and_limit() -> None:
    table = gen(name="fixed", prompt_tokens=300, output_tokens=20, num_requests=10)
    assert set(table.num_prompt_tokens) == {300} and set(table.num_output_tokens) == {20}
    with pytest.raises(ConfigError, match="max_total_tokens"):
        gen(name="fixed", prompt_tokens=300, output_tokens=20, max_total_tokens=100)


@settings(max_examples=30, deadline=None)
@given(p_lo=st.integers(1, 5000), p_span=st.integers(0, 5000), o_lo=st.integers(1, 500), o_span=st.integers(0, 500),
       seed=st.integers(0, 1000))
def test_uniform_lengths_in_bounds(p_lo: int, p_span: int, o_lo: int, o_span: int, seed: int) -> None:
    table = gen(seed=seed, name="uniform", prompt_tokens=p_lo, prompt_tokens_max=p_lo + p_span,
                output_tokens=o_lo, output_tokens_max=o_lo + o_span, num_requests=200)
    assert table.num_prompt_tokens.min() >= p_lo and table.num_prompt_tokens.max() <= p_lo + p_span
    assert table.num_output_tokens.min() >= o_lo and table.num_output_tokens.max() <= o_lo + o_span


def test_uniform_covers_range_and_filters() -> None:
    table = gen(name="uniform", prompt_tokens=10, prompt_tokens_max=20, output_tokens=1, output_tokens_max=5,
                num_requests=2000)
    assert set(table.num_prompt_tokens) == set(range(10, 21))
    assert set(table.num_output_tokens) == set(range(1, 6))
    cut = gen(name="uniform", prompt_tokens=100, prompt_tokens_max=1000, output_tokens=100, output_tokens_max=1000,
              max_total_tokens=600, num_requests=3000)
    total = cut.num_prompt_tokens + cut.num_output_tokens
    assert len(cut) == 3000 and total.max() <= 600 and total.min() >= 200


def test_a_band_over_the_limit_is_refused_as_fixed_lengths_over_it_are() -> None:
    # It was redrawn under the limit without a word: 4000 +- 10% under 4096 gave a mean prompt of 3,747, while
    # vllm bench sends the whole band and the server refuses the longer requests (a 400).
    with pytest.raises(ConfigError, match=r"\[180, 221\], up to 4621 tokens, above the 4096") as err:
        gen(name="random", prompt_tokens=4000, output_tokens=200, range_ratio=0.1, max_total_tokens=4096)
    assert err.value.field == "workload.range_ratio" and "--max-model-len" in err.value.fix
    with pytest.raises(ConfigError, match="workload.range_ratio"):  # SGLang's band, [r len, len], too
        gen(name="random", prompt_tokens=4000, output_tokens=200, range_ratio=0.5, range_style="sglang",
            max_total_tokens=4100)
    # A band whose top is the limit runs whole.
    top = band(3600, 0.1)[1] + band(100, 0.1)[1]
    table = gen(name="random", prompt_tokens=3600, output_tokens=100, range_ratio=0.1, max_total_tokens=top,
                num_requests=2000)
    assert table.num_prompt_tokens.mean() == pytest.approx(3600, rel=0.01)


def test_a_spread_over_the_limit_says_what_share_was_redrawn() -> None:
    # A normal spread has no top to refuse: what crosses the limit is redrawn, and the source line says how much.
    table = gen(name="fixed", prompt_tokens=4000, output_tokens=46, prompt_tokens_stddev=100, max_total_tokens=4096,
                num_requests=4000)
    assert (table.num_prompt_tokens + table.num_output_tokens).max() <= 4096
    found = re.search(r"warning: ([\d,]+) of ([\d,]+) draws \(([\d.]+)%\) were over the 4096-token limit", table.source)
    assert found, table.source
    redrawn, drawn = (int(found[i].replace(",", "")) for i in (1, 2))
    assert drawn - redrawn == 4000
    assert redrawn / drawn == pytest.approx(0.3228, abs=0.02)  # P(prompt > 4050) = P(Z > 0.5 - 0.5/100)
    # Nothing redrawn, nothing said.
    assert "warning" not in gen(name="fixed", prompt_tokens=400, output_tokens=46, prompt_tokens_stddev=10,
                                max_total_tokens=4096).source


def test_a_band_over_the_models_context_is_one_line_naming_the_ratio() -> None:
    from typer.testing import CliRunner

    from simulator.cli.app import app

    res = CliRunner().invoke(app, ["run", "--prompt-tokens", "4000", "--output-tokens", "200", "--random-range-ratio",
                                   "0.1", "--num-requests", "4", "--no-progress"])
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError), res.output
    assert res.exception.field == "workload.range_ratio" and "4096" in str(res.exception)


# Sarathi-Serve (OSDI'24) Table 2.
TABLE2 = {
    "sharegpt": {"prompt": (1730, 5696), "output": (415, 834)},
    "arxiv": {"prompt": (7059, 12985), "output": (208, 371)},
}


@pytest.mark.parametrize("name", ["sharegpt", "arxiv"])
def test_builtin_matches_table2(name: str) -> None:
    table = gen(seed=3, name=name, num_requests=20000)
    for axis, values in (("prompt", table.num_prompt_tokens), ("output", table.num_output_tokens)):
        median, p90 = TABLE2[name][axis]
        assert np.median(values) == pytest.approx(median, rel=0.06), axis
        assert np.quantile(values, 0.9) == pytest.approx(p90, rel=0.06), axis
    # The sources were filtered at 8k (sharegpt) / 16k (arxiv) total tokens; the built-ins keep that.
    limit = builtin_data()[name]["max_total_tokens"]
    assert (table.num_prompt_tokens + table.num_output_tokens).max() <= limit


def _short_output_shares(prompt: np.ndarray, output: np.ndarray) -> tuple[float, float]:
    """Share of outputs < 100 tokens among the shortest and the longest quarter of prompts."""
    low, high = prompt < np.quantile(prompt, 0.25), prompt > np.quantile(prompt, 0.75)
    return float(np.mean(output[low] < 100)), float(np.mean(output[high] < 100))


def test_sharegpt_joint_relation_matches_stored_source_stats() -> None:
    table = gen(seed=11, name="sharegpt", num_requests=20000)
    sampled = pd.Series(table.num_prompt_tokens).corr(pd.Series(table.num_output_tokens), method="spearman")
    stored = builtin_data()["sharegpt"]["source_stats"]["spearman"]
    # SE of Spearman at n=20k is ~0.007; independent sampling would give ~0.0 vs 0.05.
    assert sampled == pytest.approx(stored, abs=0.025)


def test_sharegpt_joint_relation_matches_source_file() -> None:
    source = pd.read_csv(shared(SHAREGPT_CSV.name))
    prompt, output = source["num_prefill_tokens"].to_numpy(), source["num_decode_tokens"].to_numpy()
    table = gen(seed=5, name="sharegpt", num_requests=20000)
    src_rho = pd.Series(prompt).corr(pd.Series(output), method="spearman")
    smp_rho = pd.Series(table.num_prompt_tokens).corr(pd.Series(table.num_output_tokens), method="spearman")
    assert smp_rho == pytest.approx(src_rho, abs=0.025)
    assert builtin_data()["sharegpt"]["source_stats"]["spearman"] == pytest.approx(src_rho, abs=1e-12)
    # A sharper joint check: short prompts get short answers far more often than long ones
    # (source 0.18 vs 0.09; independent marginals would give ~0.12 for both).
    src_low, src_high = _short_output_shares(prompt, output)
    smp_low, smp_high = _short_output_shares(table.num_prompt_tokens, table.num_output_tokens)
    assert smp_low == pytest.approx(src_low, abs=0.025)
    assert smp_high == pytest.approx(src_high, abs=0.025)


def test_sharegpt_histogram_is_derived_from_the_named_source() -> None:
    spec = builtin_data()["sharegpt"]
    source = pd.read_csv(shared(spec["source"]["file"]))
    counts, _, _ = np.histogram2d(source["num_prefill_tokens"], source["num_decode_tokens"],
                                  bins=[spec["prompt_edges"], spec["output_edges"]])
    np.testing.assert_array_equal(counts, np.asarray(spec["counts"]))
    assert spec["source_stats"]["rows"] == len(source)


@pytest.mark.parametrize("name", ["sharegpt", "arxiv"])
def test_builtin_max_total_tokens_resamples(name: str) -> None:
    table = gen(seed=2, name=name, num_requests=3000, max_total_tokens=2048)
    total = table.num_prompt_tokens + table.num_output_tokens
    assert len(table) == 3000 and total.max() <= 2048
    assert "total <= 2048" in table.source
    with pytest.raises(ConfigError, match="max_total_tokens"):
        gen(name=name, max_total_tokens=1)


def test_unknown_workload_name() -> None:
    with pytest.raises(ConfigError, match="sharegpt"):
        gen(name="lmsys")


# ---------------------------------------------------------------------------------------------
# Trace files


def test_example_traces_load() -> None:
    vidur = load_trace(EXAMPLES / "vidur_example.csv")
    azure = load_trace(EXAMPLES / "azure_example.csv")
    jsonl = load_trace(EXAMPLES / "example.jsonl")
    lengths = load_trace(EXAMPLES / "lengths_only.csv")
    assert (vidur.fmt, azure.fmt, jsonl.fmt, lengths.fmt) == ("vidur-csv", "azure-csv", "jsonl", "vidur-csv")
    assert lengths.arrival_s is None
    assert vidur.num_prompt_tokens[1] == 1730 and vidur.arrival_s[-1] == pytest.approx(3.1)
    # Azure TIMESTAMPs are date-times: seconds since the first row.
    np.testing.assert_allclose(azure.arrival_s[:3], [0.0, 0.31941, 0.56941])
    assert list(jsonl.num_output_tokens) == [128, 256, 700, 100, 400]


def test_a_csv_with_a_byte_order_mark_reads_as_without(tmp_path: Path) -> None:
    # Excel's "CSV UTF-8" starts with a BOM; the quick reader once kept it in the first column's name,
    # so a timestamp column went unseen (and an Azure file was read as a plain one).
    for name in ("vidur_example.csv", "azure_example.csv"):
        plain = load_trace(EXAMPLES / name)
        bom = tmp_path / name
        bom.write_bytes(b"\xef\xbb\xbf" + (EXAMPLES / name).read_bytes())
        read = load_trace(bom)
        assert read.fmt == plain.fmt and read.arrival_s is not None
        np.testing.assert_array_equal(read.arrival_s, plain.arrival_s)
        np.testing.assert_array_equal(read.num_prompt_tokens, plain.num_prompt_tokens)


def test_azure_raw_and_vidur_processed_agree() -> None:
    raw = load_trace(shared("AzureLLMInferenceTrace_conv.csv"))
    processed = load_trace(shared("splitwise_conv.csv"))
    assert raw.fmt == "azure-csv" and processed.fmt == "vidur-csv" and len(raw) == 19366
    np.testing.assert_array_equal(raw.num_prompt_tokens, processed.num_prompt_tokens)
    np.testing.assert_array_equal(raw.num_output_tokens, processed.num_output_tokens)
    np.testing.assert_allclose(raw.arrival_s, processed.arrival_s, atol=1e-6)


def test_shared_jsonl_and_lengths_only_csv() -> None:
    jsonl = load_trace(shared("sharegpt-llama-3.1-8b-300-sps10.jsonl"))
    assert len(jsonl) == 300 and jsonl.arrival_s is not None
    # LLMServingSim's file: Poisson arrivals at ~10 req/s (arrival_time_ns).
    assert 7 < (len(jsonl) - 1) / jsonl.arrival_s[-1] < 13
    csv = load_trace(shared(SHAREGPT_CSV.name))
    assert len(csv) == 30731 and csv.arrival_s is None
    assert np.median(csv.num_prompt_tokens) == 1730


def test_trace_replay_takes_rows_in_order_and_scales_time() -> None:
    path = str(EXAMPLES / "vidur_example.csv")
    table = gen(trace=path, arrival="trace", num_requests=5, time_scale=2.0)
    trace = load_trace(path)
    np.testing.assert_array_equal(table.num_prompt_tokens, trace.num_prompt_tokens[:5])
    np.testing.assert_allclose(table.arrival_at, trace.arrival_s[:5] / 2.0)
    assert "first 5 rows replayed" in table.source
    # Filtering drops rows from the source before replay; later rows move up.
    cut = gen(trace=path, arrival="trace", num_requests=5, max_total_tokens=4000)
    assert list(cut.num_prompt_tokens) == [512, 1730, 96, 300, 2048]
    np.testing.assert_allclose(cut.arrival_at, [0.0, 0.35, 0.41, 1.20, 2.05])
    assert "removed" in cut.source


def test_replay_shifts_to_zero_and_rejects_too_many_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "t.csv", "arrived_at,num_prefill_tokens,num_decode_tokens\n5,10,1\n6,11,2\n8,12,3\n")
    table = gen(trace=path, arrival="trace", num_requests=3)
    np.testing.assert_allclose(table.arrival_at, [0.0, 1.0, 3.0])
    with pytest.raises(ConfigError, match="num-requests 3"):
        gen(trace=path, arrival="trace", num_requests=4)


def test_trace_lengths_with_synthetic_arrivals() -> None:
    path = str(EXAMPLES / "vidur_example.csv")
    trace = load_trace(path)
    pairs = set(zip(trace.num_prompt_tokens.tolist(), trace.num_output_tokens.tolist(), strict=True))
    few = gen(seed=1, trace=path, arrival="poisson", qps=3.0, num_requests=6)
    got = list(zip(few.num_prompt_tokens.tolist(), few.num_output_tokens.tolist(), strict=True))
    assert len(set(got)) == 6 and set(got) <= pairs  # rows are distinct in the file: no repeats
    assert "without replacement" in few.source and "poisson 3 qps" in few.source
    many = gen(seed=1, trace=path, arrival="gamma", cv=2.0, qps=3.0, num_requests=200)
    got = set(zip(many.num_prompt_tokens.tolist(), many.num_output_tokens.tolist(), strict=True))
    assert got == pairs and "every row once, then 192 drawn again (trace has only 8)" in many.source


def test_trace_arrival_without_timestamps_names_the_fix() -> None:
    with pytest.raises(ConfigError, match="no timestamps.*--arrival poisson"):
        gen(trace=str(EXAMPLES / "lengths_only.csv"), arrival="trace", num_requests=2)


@pytest.mark.parametrize(("name", "text"), [
    ("a.jsonl", '{"input_toks": 5, "output_toks": 2, "arrival_time_ns": 1000000000}\n'
                '{"input_toks": 7, "output_toks": 3, "arrival_time_ns": 1500000000}\n'),
    ("b.jsonl", '{"num_prompt_tokens": 5, "num_output_tokens": 2, "arrived_at": 1.0}\n\n'
                '{"num_prompt_tokens": 7, "num_output_tokens": 3, "arrived_at": 1.5}\n'),
    ("c.json", '{"prompt_tokens": 5, "output_tokens": 2, "arrived_at": 1}\n'
               '{"prompt_tokens": 7.0, "output_tokens": 3, "arrived_at": 1.5}\n'),
    ("d.csv", "Arrived_At,Num_Prefill_Tokens,Num_Decode_Tokens,pd_ratio\n1.0,5,2,2.5\n1.5,7,3,2.3\n\n"),
    ("e.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:01.000,5,2\n2024-05-10 00:00:01.500,7,3\n"),
])
def test_trace_key_variants(tmp_path: Path, name: str, text: str) -> None:
    trace = load_trace(write(tmp_path / name, text))
    assert list(trace.num_prompt_tokens) == [5, 7] and list(trace.num_output_tokens) == [2, 3]
    np.testing.assert_allclose(trace.arrival_s, [0.0, 0.5])


def test_gzip_traces(tmp_path: Path) -> None:
    for name, text in (("g.csv.gz", "num_prefill_tokens,num_decode_tokens\n5,2\n"),
                       ("g.jsonl.gz", '{"input_toks": 5, "output_toks": 2}\n')):
        with gzip.open(tmp_path / name, "wt") as fh:
            fh.write(text)
        trace = load_trace(tmp_path / name)
        assert list(trace.num_prompt_tokens) == [5] and list(trace.num_output_tokens) == [2]


def _damaged_gzip(text: str, damage: str) -> bytes:
    packed = gzip.compress(text.encode())
    if damage == "not-gzip":
        return text.encode()
    if damage == "truncated":
        return packed[: len(packed) // 2]
    body = bytearray(packed)  # corrupt: the header stands, the deflate stream does not
    for i in range(20, len(body) - 8, 5):
        body[i] ^= 0x5A
    return bytes(body)


_ROWS = range(1, 400)
_GZ_TRACES = {
    "t.csv.gz": "num_prefill_tokens,num_decode_tokens\n" + "".join(f"{i},{i % 7 + 1}\n" for i in _ROWS),
    "t.jsonl.gz": "".join(json.dumps({"input_toks": i, "output_toks": i % 7 + 1}) + "\n" for i in _ROWS),
    "mooncake.jsonl.gz": "".join(json.dumps({"timestamp": i, "input_length": 600, "output_length": 2,
                                             "hash_ids": [2 * i, 2 * i + 1]}) + "\n" for i in _ROWS),
    "sessions/s.json.gz": json.dumps({"block_size": 16, "requests": []}) + " " * 4000,
}


@pytest.mark.parametrize("damage", ["not-gzip", "truncated", "corrupt"])
@pytest.mark.parametrize("name", list(_GZ_TRACES))
def test_a_damaged_gzip_trace_is_one_line_error(tmp_path: Path, name: str, damage: str) -> None:
    # gzip.BadGzipFile, EOFError (a bare "Aborted!" at the command line) and zlib.error escaped some readers.
    path = tmp_path / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(_damaged_gzip(_GZ_TRACES[name], damage))
    trace = str(path.parent if name.startswith("sessions/") else path)
    with pytest.raises(ConfigError) as err:
        generate_requests(WorkloadConfig(trace=trace, num_requests=4), np.random.default_rng(0))
    assert "\n" not in str(err.value) and ("cannot read" in str(err.value) or "not a readable" in str(err.value))


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**5), st.floats(0, 100)), min_size=1,
                     max_size=40), as_jsonl=st.booleans())
def test_trace_round_trip(tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, int, float]],
                          as_jsonl: bool) -> None:
    rows = sorted(rows, key=lambda r: r[2])
    folder = tmp_path_factory.mktemp("rt")
    if as_jsonl:
        path = folder / "t.jsonl"
        path.write_text("".join(json.dumps({"input_toks": p, "output_toks": o, "arrived_at": t}) + "\n"
                                for p, o, t in rows))
    else:
        path = folder / "t.csv"
        pd.DataFrame(rows, columns=["num_prefill_tokens", "num_decode_tokens", "arrived_at"]).to_csv(path, index=False)
    trace = load_trace(path)
    assert trace.num_prompt_tokens.tolist() == [r[0] for r in rows]
    assert trace.num_output_tokens.tolist() == [r[1] for r in rows]
    np.testing.assert_allclose(trace.arrival_s, np.array([r[2] for r in rows]) - rows[0][2], atol=1e-9)


# ---------------------------------------------------------------------------------------------
# Determinism and speed


@pytest.mark.parametrize("kw", [
    {"name": "sharegpt", "arrival": "poisson", "qps": 3.0},
    {"name": "arxiv", "arrival": "gamma", "cv": 2.0},
    {"name": "uniform", "prompt_tokens_max": 4000, "output_tokens_max": 300, "max_total_tokens": 2000},
    {"trace": str(EXAMPLES / "vidur_example.csv"), "arrival": "fixed", "num_requests": 100},
])
def test_same_seed_same_requests(kw: dict) -> None:
    a, b, c = gen(seed=42, **kw), gen(seed=42, **kw), gen(seed=43, **kw)
    for field in ("arrival_at", "num_prompt_tokens", "num_output_tokens"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.source == b.source
    assert not (np.array_equal(a.arrival_at, c.arrival_at) and np.array_equal(a.num_prompt_tokens, c.num_prompt_tokens))


# ---------------------------------------------------------------------------------------------
# Bad input: one line naming the file, the line and column, and the fix


V = "arrived_at,num_prefill_tokens,num_decode_tokens\n"
BAD = [
    ("empty.csv", "", "file is empty"),
    ("header.csv", V, "no rows"),
    ("cols.csv", "a,b,c\n1,2,3\n", "unknown trace format, columns \\[a, b, c\\]"),
    ("text.csv", V + "0,10,5\n1,ten,5\n", "line 3, column num_prefill_tokens: 'ten' is not a number"),
    ("zero.csv", V + "0,10,5\n1,0,5\n", "line 3, column num_prefill_tokens: 0 is not a positive"),
    ("negout.csv", V + "0,10,-5\n", "line 2, column num_decode_tokens: -5 is not an integer token count >= 0"),
    ("fracout.csv", "num_prefill_tokens,num_decode_tokens\n10,0.5\n", "0.5 is not an integer token count >= 0"),
    ("neg.csv", V + "0,-4,5\n", "line 2, column num_prefill_tokens: -4 is not a positive"),
    ("frac.csv", V + "0,4.5,5\n", "line 2, column num_prefill_tokens: 4.5 is not a positive integer"),
    ("nan.csv", V + "0,10,5\n1,,5\n", "line 3, column num_prefill_tokens: empty or NaN value"),
    ("nanword.csv", V + "0,10,5\n1,NaN,5\n", "line 3, column num_prefill_tokens"),
    ("blank.csv", V + "0,10,5\n\n1,10,5\n", "line 3, column num_prefill_tokens: empty or NaN value"),
    ("ragged.csv", V + "0,10,5\n1,10,5,7,8\n", "not a readable CSV"),
    ("back.csv", V + "0,10,5\n2,10,5\n1,10,5\n", "line 4, column arrived_at: timestamp 1 is earlier"),
    ("negt.csv", V + "-1,10,5\n", "line 2, column arrived_at: negative timestamp"),
    ("date.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,2\nyesterday,5,2\n",
     "line 3, column TIMESTAMP: 'yesterday' is not a date-time"),
    ("two.csv", "num_prefill_tokens,prompt_tokens,num_decode_tokens\n1,2,3\n", "all give prompt lengths"),
    ("bad.jsonl", '{"input_toks": 5, "output_toks": 2}\n{"input_toks": 5, output_toks: 2}\n',
     "line 2 is not valid JSON"),
    ("list.jsonl", '[5, 2]\n', "line 1 is not a JSON object"),
    ("keys.jsonl", '{"foo": 5, "bar": 2}\n', "unknown trace format, keys of line 1 \\[foo, bar\\]"),
    ("miss.jsonl", '{"input_toks": 5, "output_toks": 2}\n{"input_toks": 5}\n', "line 2 lacks key 'output_toks'"),
    ("null.jsonl", '{"input_toks": 5, "output_toks": null}\n', "line 1, column output_toks: empty or NaN value"),
    ("bool.jsonl", '{"input_toks": true, "output_toks": 3}\n', "line 1, column input_toks: 'true' is not a number"),
    ("boolout.jsonl", '{"input_toks": 5, "output_toks": false}\n', "column output_toks: 'false' is not a number"),
    ("str.jsonl", '{"input_toks": "many", "output_toks": 3}\n', "line 1, column input_toks: 'many' is not a number"),
    ("ns.jsonl", '{"input_toks": 5, "output_toks": 3, "arrival_time_ns": 9}\n'
                 '{"input_toks": 5, "output_toks": 3, "arrival_time_ns": 8}\n', "line 2, column arrival_time_ns"),
    ("blank.jsonl", "\n\n", "file is empty"),
    ("trace.parquet", "x", "unknown trace format \\(extension .parquet\\)"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_trace(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = write(tmp_path / name, text)
    with pytest.raises(ConfigError, match=message) as info:
        generate_requests(WorkloadConfig(trace=path, num_requests=1), np.random.default_rng(0))
    text = str(info.value)
    assert "\n" not in text and name in text and info.value.field == "workload.trace"
    assert info.value.fix  # every trace error says what to do


ZERO_OUTPUT = [  # a second row recorded with 0 output tokens, in each format a trace is read from
    ("plain.csv", "num_prefill_tokens,num_decode_tokens\n10,5\n12,0\n"),
    ("total.csv", "num_prefill_tokens,num_decode_tokens,num_total_tokens\n10,5,15\n12,0,12\n"),  # the file's 0 adds up
    ("timed.csv", V + "0,10,5\n1,12,0\n"),
    ("rows.jsonl", '{"input_toks": 10, "output_toks": 5}\n{"input_toks": 12, "output_toks": 0}\n'),
    ("mooncake.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n'
                       '{"timestamp": 1, "input_length": 12, "output_length": 0, "hash_ids": [0]}\n'),
    ("trace_0001.json", json.dumps({"block_size": 64, "requests": [{"t": 0, "in": 10, "out": 5},
                                                                   {"t": 1, "in": 12, "out": 0}]})),
]


@pytest.mark.parametrize(("name", "text"), ZERO_OUTPUT, ids=[z[0] for z in ZERO_OUTPUT])
def test_every_reader_gives_a_zero_output_one_token_and_says_so(tmp_path: Path, name: str, text: str) -> None:
    # Only the Weka sessions reader did: the CSV, JSONL and Mooncake readers refused the whole file for the
    # row (Weka's requests_all.csv: 27 of 49,334).
    table = gen(trace=write(tmp_path / name, text), num_requests=2, arrival="burst")
    assert sorted(table.num_output_tokens.tolist()) == [1, 5]
    assert "1 recorded with 0 output tokens given 1" in table.source


@pytest.mark.parametrize("value", [-1, False, 0.0])
def test_a_hashed_traces_output_of_zero_is_an_integer_zero(tmp_path: Path, value: object) -> None:
    # Negative and non-integer outputs are still refused (False == 0 in Python; it was given 1 silently).
    from simulator.workload.prefix_traces import read_mooncake, read_weka_sessions

    line = {"timestamp": 0, "input_length": 10, "output_length": value, "hash_ids": [0]}
    with pytest.raises(ConfigError, match="output_length must be a positive integer"):
        read_mooncake(write(tmp_path / "m.jsonl", json.dumps(line) + "\n"))
    session = {"block_size": 64, "requests": [{"t": 0, "in": 10, "out": value}]}
    with pytest.raises(ConfigError, match="out must be a positive integer"):
        read_weka_sessions(write(tmp_path / "trace_0001.json", json.dumps(session)))


def test_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file.*--trace"):
        gen(trace=str(tmp_path / "nope.csv"))
    with pytest.raises(ConfigError, match=r"the folder holds no \*\.json \(or \*\.json\.gz\) session files"):
        gen(trace=str(tmp_path))  # (an empty folder: 'not a file', said as though it were none of these)


def test_filter_that_removes_every_row() -> None:
    with pytest.raises(ConfigError, match="no row of vidur_example.csv"):
        gen(trace=str(EXAMPLES / "vidur_example.csv"), max_total_tokens=10)
