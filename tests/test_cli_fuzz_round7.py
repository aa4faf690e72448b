"""CLI fuzzing, round 7: input files (traces, prices, model configs, benchmark results, kernel tables).

Each case was a traceback (a 20-digit length in a plain CSV trace, an Azure trace whose rows mix UTC
offsets, a Weka session file without requests, a corrupt or latency-less kernel table, --threads 100000),
a value read otherwise than written (a Weka request without 't' sent at its session's start, the string
"false" read as tied embeddings, 0 KV heads as full MHA, acceptance rates past k cut, a draft model's TP
past the target's), or a file field or flag that changed nothing (--workload beside a --config trace, two
spellings of one GPU in a price file, a misspelt price or row column, a bench result's max_concurrency and
burstiness, workload flags beside --bench). Now each is one line naming the field; valid neighbours run.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]


# -- traces ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "needle"), [
    ("num_prefill_tokens,num_decode_tokens\n100,20\n99999999999999999999,10\n", "line 3, column num_prefill_tokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46+00:00,100,10\n2023-11-16 18:15:47,100,10\n",
     "its date-times mix time zones"),
])
def test_a_csv_trace_refuses_what_it_cannot_read(tmp_path: Path, text: str, needle: str) -> None:
    from simulator.workload.generate import load_trace

    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_trace(path)


@pytest.mark.parametrize(("data", "needle"), [
    ({"block_size": 64, "requests": []}, "no requests in its session file"),
    ({"block_size": 64, "requests": [{"in": 100, "out": 10, "hash_ids": [1, 2]}]}, "request 0: no 't'"),
])
def test_a_weka_session_needs_requests_with_times(tmp_path: Path, data: dict, needle: str) -> None:
    from simulator.workload.prefix_traces import read_weka_sessions

    path = tmp_path / "s.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=needle):
        read_weka_sessions(str(path))
    data["requests"] = [{"t": 0.5, "in": 100, "out": 10, "hash_ids": [1, 2]}]
    path.write_text(json.dumps(data))
    assert len(read_weka_sessions(str(path)).num_prompt_tokens) == 1


def test_workload_is_refused_beside_a_config_files_trace() -> None:
    from simulator.config.options import inert_options
    from simulator.config.run_config import RunConfig

    trace = RunConfig().replace(workload__trace=str(ROOT / "README.md"))  # (any path: only the field is read)
    assert "--trace" in inert_options(trace)["workload"][0]
    assert "workload" not in inert_options(RunConfig())


# -- speculation and model files ----------------------------------------------------------------------------

def test_acceptance_rates_must_match_k_and_draft_tp_a_draft_model_on_the_targets_gpus() -> None:
    from simulator.config.run_config import ReplicaConfig
    from simulator.config.speculative import SpeculativeConfig
    from simulator.costmodel.speculative import draft_replica

    with pytest.raises(ConfigError, match="4 per-position rates for k=2"):
        SpeculativeConfig(method="eagle3", num_speculative_tokens=2, acceptance_rates=(0.9, 0.1, 0.1, 0.1))
    assert SpeculativeConfig(method="eagle3", num_speculative_tokens=2, acceptance_rates=(0.7,)).acceptance_rates \
        == (0.7, 0.7)
    with pytest.raises(ConfigError, match="eagle3 has no draft model of its own"):
        SpeculativeConfig(method="eagle3", num_speculative_tokens=2, acceptance_rates=(0.7,), draft_tp=2)
    spec = SpeculativeConfig(method="draft_model", num_speculative_tokens=2, acceptance_rates=(0.7,),
                             draft_model="llama-2-7b", draft_tp=8)
    with pytest.raises(ConfigError, match="draft_tensor_parallel_size 8 on a tp=4 replica"):
        draft_replica(ReplicaConfig("llama-2-70b", "h100-sxm", tp=4), spec)
    assert draft_replica(ReplicaConfig("llama-2-70b", "h100-sxm", tp=8), spec).tp == 8


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("num_key_value_heads", 0, "model.num_key_value_heads"),
    ("max_position_embeddings", 0, "model.max_position_embeddings"),
    ("tie_word_embeddings", "false", "model.tie_word_embeddings"),
])
def test_a_model_config_field_means_what_it_says(field: str, value: object, needle: str) -> None:
    from simulator.config.hf_config import model_from_hf_dict

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
           "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000, "hidden_act": "silu"}
    assert model_from_hf_dict(cfg, "ok").num_kv_heads == 32  # absent: HF's defaults (MHA)
    with pytest.raises(ConfigError) as err:
        model_from_hf_dict({**cfg, field: value}, "bad")
    assert err.value.field == needle


# -- prices ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "needle"), [
    ("p.json", '{"h100-sxm": 5, "h100": 9}', "same GPU, priced twice"),
    ("p.csv", "gpu,usd_per_gpu_hour,max_watts\nh100-sxm,5,900\n", "unknown column.*max_watts"),
    ("p.csv", "gpu,usd_per_gpu_hour\nh100-sxm,5,900\n", "line 2 has more cells"),
])
def test_a_price_file_refuses_what_it_would_drop(tmp_path: Path, name: str, text: str, needle: str) -> None:
    from simulator.config.prices import load_price_file

    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_price_file(path)


def test_a_spreadsheets_byte_order_mark_is_no_column(tmp_path: Path) -> None:
    from simulator.config.prices import load_price_file

    path = tmp_path / "p.csv"
    path.write_bytes("\ufeffgpu,usd_per_gpu_hour,max_w\nh100-sxm,5,900\n".encode())
    row = load_price_file(path)["h100-sxm"]
    assert (row.usd_per_gpu_hour, row.max_w) == (5.0, 900.0)


# -- calibration inputs -----------------------------------------------------------------------------------

def _bench_file(tmp_path: Path, n: int = 12, **changes: object) -> Path:
    data = {"model_id": "meta-llama/Llama-2-7b-hf", "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None,
            "input_lens": [200] * n, "output_lens": [20] * n, "ttfts": [0.05] * n, "itls": [[0.02] * 19] * n,
            "errors": [""] * n, **changes}
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


def test_a_bench_result_keeps_its_client_cap_and_burstiness(tmp_path: Path) -> None:
    from simulator.calibrate.engine_fit import bench_table, calibrate_bench, read_bench
    from simulator.config.run_config import RunConfig

    run = read_bench(_bench_file(tmp_path, n=400, max_concurrency=2, burstiness=0.25))
    assert (run.max_concurrency, run.burstiness) == (2, 0.25)
    table = bench_table(run, 0)
    gaps = np.diff(table.arrival_at)  # gamma of shape 0.25: a coefficient of variation of 2 (Poisson's: 1)
    assert "gamma (burstiness 0.25)" in table.source and np.std(gaps) > 1.5 * np.mean(gaps)
    assert 0.2 < np.mean(gaps) < 0.3  # still 4 requests a second
    with pytest.raises(ConfigError, match="ran at max_concurrency 2"):
        calibrate_bench(run, RunConfig().replace(workload__concurrency=3), "vllm-v1")
    for bad in ({"max_concurrency": 0}, {"burstiness": -1}):
        with pytest.raises(ConfigError, match="max_concurrency|burstiness"):
            read_bench(_bench_file(tmp_path, **bad))
    assert read_bench(_bench_file(tmp_path)).max_concurrency is None


def test_a_bench_fit_refuses_workload_flags(tmp_path: Path) -> None:
    from simulator.cli.engine import calibrate_engine_command
    from simulator.config.run_config import RunConfig

    with pytest.raises(ConfigError, match="--qps: a --bench fit replays the benchmark's own requests"):
        calibrate_engine_command(RunConfig().replace(workload__qps=5.0), tmp_path / "e.json",
                                 bench=_bench_file(tmp_path), given={"qps"})


@pytest.mark.parametrize(("extra", "needle"), [
    ("tp\n1\n", None), ("tp\nabc\n", "tp must be a whole number >= 1, got 'abc'"),
    ("tp\n2.5\n", "tp must be a whole number >= 1, got 2.5"), ("TP\n2\n", "unknown column.*TP"),
])
def test_benchmark_rows_refuse_a_bad_layout_cell(tmp_path: Path, extra: str, needle: str | None) -> None:
    from simulator.calibrate.silicon_fit import read_user_rows

    head, cell = extra.splitlines()
    path = tmp_path / "rows.csv"
    path.write_text(f"backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms,{head}\n"
                    f"vllm,llama-3.1-8b,h100-sxm,1024,128,8,50,10,{cell}\n")
    if needle is None:
        assert read_user_rows(path)["tp"].tolist() == [1]
        return
    with pytest.raises(ConfigError, match=needle):
        read_user_rows(path)


# -- kernel tables and the profiler --------------------------------------------------------------------------

def test_a_corrupt_or_latency_less_kernel_table_is_named(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from simulator.costmodel.aic.tables import _column

    garbage = tmp_path / "gemm_perf.parquet"
    garbage.write_text("garbage")
    with pytest.raises(ConfigError, match="not a readable parquet table"):
        _column(garbage, "latency")
    bare = tmp_path / "bare.parquet"
    pq.write_table(pa.table({"m": [1, 2]}), bare)
    with pytest.raises(ConfigError, match="has no latency column"):
        _column(bare, "latency")
    assert _column(bare, "n") is None and _column(bare, "m").tolist() == [1, 2]


def test_the_profiler_caps_its_threads(tmp_path: Path) -> None:
    from profiler.runner import MAX_THREADS, ProfileConfig

    with pytest.raises(ConfigError) as err:
        ProfileConfig(model="tiny-llama-1b", out=tmp_path, num_threads=100_000)  # malloc failed inside torch
    assert err.value.field == "--threads" and f"at most {MAX_THREADS:,}" in err.value.problem
    assert ProfileConfig(model="tiny-llama-1b", out=tmp_path, num_threads=2).num_threads == 2


@pytest.mark.parametrize(("ids", "needle"), [
    ([[5, 5, 5]], "hash id 5 is twice in it"),
    ([[7, 5], [5, 7]], "hash id 5 is at block 0 here, at block 1 in an earlier request"),
])
def test_a_prefix_trace_names_blocks_by_their_prefix(tmp_path: Path, ids: list, needle: str) -> None:
    """Mooncake's and Weka's block hashes chain each block's prefix: an id is one block position and never
    repeats in a request. A trace breaking that was read, its hits counted where no cache could have them."""
    from simulator.workload.prefix_traces import read_mooncake, read_weka_sessions

    mooncake = tmp_path / "t.jsonl"
    mooncake.write_text("".join(json.dumps({"timestamp": i, "input_length": 2000, "output_length": 10,
                                            "hash_ids": h}) + "\n" for i, h in enumerate(ids)))
    with pytest.raises(ConfigError, match=needle):
        read_mooncake(str(mooncake))
    weka = tmp_path / "s.json"
    weka.write_text(json.dumps({"block_size": 512, "requests": [{"t": i, "in": 2000, "out": 10, "hash_ids": h}
                                                                for i, h in enumerate(ids)]}))
    with pytest.raises(ConfigError, match=needle):
        read_weka_sessions(str(weka))
    mooncake.write_text(json.dumps({"timestamp": 0, "input_length": 2000, "output_length": 10, "hash_ids": [7, 5]})
                        + "\n" + json.dumps({"timestamp": 1, "input_length": 2000, "output_length": 10,
                                             "hash_ids": [7, 5, 9]}) + "\n")
    assert len(read_mooncake(str(mooncake)).block_hashes) == 2  # a shared prefix, then a new block
