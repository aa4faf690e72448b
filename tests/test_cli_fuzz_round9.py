"""CLI fuzzing, round 9: the files other tools write, read back after a hand edit.

Each case was a traceback (an engine artifact's term as a string, a TP table entry of one number, no
``engine`` object), a wrong answer (an engine term of -1 ran with negative latencies; a CSV whose rows
each carry one more cell than its header was read shifted by a column; a key given twice in a JSON file
kept its last value), or something silently dropped (a duplicated CSV column, a total that contradicts
its parts, hash ids on a plain JSONL line, a Mooncake line's extra key, a Weka folder's upper-case or
gzipped session files, a Weka file's ``hash_id_scope``). Now each is one line naming the field; the
valid neighbours run as before.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from helpers import one_line_error, simulate_module

from simulator.config.errors import ConfigError
from simulator.config.hf_config import load_hf_model
from simulator.config.options import load_config_file
from simulator.costmodel.engine_model import ARTIFACT_FORMAT, ARTIFACT_VERSION, ENGINES, load_engine
from simulator.workload.generate import load_trace
from simulator.workload.prefix_traces import read_prefix_trace

ROOT = Path(__file__).resolve().parents[1]


# -- an engine artifact edited by hand -------------------------------------------------------------------------

def _artifact(tmp_path: Path, **changes: object) -> Path:
    terms = ENGINES["vllm-2026"].to_dict()
    for key, value in changes.items():
        if value is KeyError:
            terms.pop(key)
        else:
            terms[key] = value
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"format": ARTIFACT_FORMAT, "format_version": ARTIFACT_VERSION, "engine": terms}))
    return path


@pytest.mark.parametrize(("changes", "needle"), [
    ({"cpu_iteration_s": "0.005"}, "engine.cpu_iteration_s: must be float, got '0.005'"),
    ({"cpu_iteration_s": -1}, "engine.cpu_iteration_s: must be finite and >= 0, got -1"),
    ({"prefill_excess_threshold_tokens": "2048"}, "engine.prefill_excess_threshold_tokens: must be int"),
    ({"prefill_excess_threshold_tokens": -5}, "engine.prefill_excess_threshold_tokens: must be finite and >= 0"),
    ({"collective_extra_s": [[2]]}, "engine.collective_extra_s: must be a list of [int, float], got [[2]]"),
    ({"rpc_s": "abc"}, "engine.rpc_s: must be a list of [int, float]"),
    ({"overlap_cpu": "no"}, "engine.overlap_cpu: must be bool, got 'no'"),
    ({"cuda_graphs": "false"}, "engine.cuda_graphs: must be bool"),
    ({"name": KeyError}, "engine.name: missing"),
])
def test_an_engine_artifacts_terms_are_type_checked(tmp_path: Path, changes: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_engine(str(_artifact(tmp_path, **changes)))
    assert needle in str(err.value)


def test_an_engine_artifact_without_its_terms_is_one_line_and_a_whole_one_loads(tmp_path: Path) -> None:
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({"format": ARTIFACT_FORMAT, "format_version": ARTIFACT_VERSION}))
    with pytest.raises(ConfigError, match="holds no 'engine' object"):
        load_engine(str(path))
    assert load_engine(str(_artifact(tmp_path))) == ENGINES["vllm-2026"]
    assert load_engine(str(_artifact(tmp_path, collective_extra_s=[[2, 1e-6]]))).collective_extra_s == ((2, 1e-6),)


# -- a key given twice ------------------------------------------------------------------------------------------

def test_a_key_given_twice_in_a_json_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text('{"seed": 0, "seed": 7}')
    with pytest.raises(ConfigError, match="key 'seed': given twice: 0 and 7"):
        load_config_file(config)
    model = json.loads((ROOT / "tests" / "data" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
    text = json.dumps(model)[:-1] + ', "num_hidden_layers": 2}'
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(text)
    with pytest.raises(ConfigError, match="key 'num_hidden_layers': given twice: 32 and 2"):
        load_hf_model(str(tmp_path / "m" / "config.json"))
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"input_toks": 100, "output_toks": 10, "input_toks": 999}\n')
    with pytest.raises(ConfigError, match="line 1: key 'input_toks': given twice: 100 and 999"):
        load_trace(trace)
    same = tmp_path / "same.json"  # the same value twice changes nothing: it stays readable
    same.write_text('{"seed": 7, "seed": 7}')
    assert load_config_file(same).seed == 7


# -- CSV traces -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "needle"), [
    ("arrived_at,num_prefill_tokens,num_decode_tokens\n0,100,10,5\n1,200,20,6\n",
     "the rows have more cells than the header's 3 columns"),
    ("num_prefill_tokens,num_decode_tokens\n100,10,5\n200,20,6\n", "the rows have more cells than the header's 2"),
    ("arrived_at,num_prefill_tokens,num_decode_tokens,num_prefill_tokens\n0,100,10,999\n",
     "column 'num_prefill_tokens' is named twice"),
    ("num_prefill_tokens,num_decode_tokens,num_total_tokens\n10,5,15\n20,5,26\n",
     "line 3: num_total_tokens is 26, not num_prefill_tokens + num_decode_tokens = 25"),
])
def test_a_csv_trace_that_would_be_misread_is_refused(tmp_path: Path, text: str, needle: str) -> None:
    for name, write in (("t.csv", lambda p: p.write_text(text)), ("t.csv.gz", lambda p: p.write_bytes(gzip.compress(text.encode())))):
        path = tmp_path / name
        write(path)
        with pytest.raises(ConfigError) as err:
            load_trace(path)
        assert needle in str(err.value)


def test_a_csv_trace_whose_total_agrees_reads_on_either_path(tmp_path: Path) -> None:
    plain = tmp_path / "plain.csv"  # lengths only: the csv module's path
    plain.write_text("num_prefill_tokens,num_decode_tokens,num_total_tokens\n10,5,15\n20,5,25\n")
    timed = tmp_path / "timed.csv"  # with arrivals: the pandas path
    timed.write_text("arrived_at,num_prefill_tokens,num_decode_tokens,num_total_tokens\n0,10,5,15\n1.5,20,5,25\n")
    for path in (plain, timed):
        data = load_trace(path)
        assert data.num_prompt_tokens.tolist() == [10, 20] and data.num_output_tokens.tolist() == [5, 5]
    assert load_trace(timed).arrival_s.tolist() == [0.0, 1.5]


# -- traces with block hashes -----------------------------------------------------------------------------------

def test_hash_ids_are_read_or_refused_never_dropped(tmp_path: Path) -> None:
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"input_toks": 100, "output_toks": 10, "hash_ids": [1]}\n')
    with pytest.raises(ConfigError, match="line 1 has hash_ids, which are read only from Mooncake lines"):
        load_trace(plain)
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2], "session_id": 3}\n')
    with pytest.raises(ConfigError, match="key 'session_id' is not read from a Mooncake line"):
        read_prefix_trace(str(extra))
    ndjson = tmp_path / "mc.ndjson"  # Mooncake's form under another JSONL name is read as Mooncake
    ndjson.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                      '{"timestamp": 1000, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n')
    trace = read_prefix_trace(str(ndjson))
    assert trace is not None and trace.fmt == "mooncake" and [h.tolist() for h in trace.block_hashes] == [[0, 1]] * 2  # (renumbered)


def _session(scope: str | None, ids: list[int], **extra: object) -> str:
    data: dict = {"block_size": 64, "requests": [{"t": 0.0, "in": 200, "out": 4, "hash_ids": ids}]}
    if scope is not None:
        data["hash_id_scope"] = scope
    data["requests"][0].update(extra)
    return json.dumps(data)


def test_a_weka_folder_reads_every_session_file_and_its_id_scope(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "trace_0.json").write_text(_session("local", [1, 2, 3]))
    (folder / "trace_1.JSON").write_text(_session("local", [1, 2, 3]))
    (folder / "trace_2.json.gz").write_bytes(gzip.compress(_session("local", [1, 2, 3]).encode()))
    (folder / "README.md").write_text("not a session")
    trace = read_prefix_trace(str(folder))
    assert trace is not None and len(trace) == 3
    assert len({int(h[0]) for h in trace.block_hashes}) == 3  # local ids: three id spaces
    shared = tmp_path / "shared"
    shared.mkdir()
    for i in range(2):
        (shared / f"trace_{i}.json").write_text(_session("global", [1, 2, 3]))
    trace = read_prefix_trace(str(shared))
    assert trace is not None and len({int(h[0]) for h in trace.block_hashes}) == 1  # one id space
    (shared / "trace_2.json").write_text(_session("everywhere", [1]))
    with pytest.raises(ConfigError, match="hash_id_scope is 'everywhere'"):
        read_prefix_trace(str(shared))


def test_a_weka_subagent_marker_with_counts_of_its_own_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"block_size": 64, "hash_id_scope": "local", "requests": [
        {"t": 0.0, "in": 100, "out": 4, "hash_ids": [1]},
        {"type": "subagent", "t": 1.0, "in": 500, "requests": [{"t": 0.5, "in": 80, "out": 2, "hash_ids": [9]}]}]}))
    with pytest.raises(ConfigError, match="request 1: a subagent entry with its own 'in'"):
        read_prefix_trace(str(path))


# -- plan: what it sets itself, and its limits ------------------------------------------------------------------

_PLAN = ["plan", "--model", "llama-3.1-8b", "--qps", "4", "--num-requests", "64", "--gpus", "a100-80gb", "--tps", "1",
         "--modes", "agg", "--budgets", "2048", "--seqs", "256"]


def test_plan_refuses_a_budget_its_budgets_set(tmp_path: Path) -> None:
    for flag in ("--chunk-size", "--max-num-batched-tokens"):  # (the second blamed the GPU's memory)
        proc = simulate_module(*_PLAN, flag, "128", "--out", str(tmp_path / "p"))
        assert f"{flag}: plan sets it in every layout it searches (from --budgets)" in one_line_error(proc)


def test_a_plan_over_its_limits_says_which_limit_and_what_was_verified(tmp_path: Path) -> None:
    proc = simulate_module(*_PLAN, "--max-gpus", "2", "--out", str(tmp_path / "p"))
    assert proc.returncode == 1, proc.stderr[-2000:]
    # 2 units were verified and missed; the row shows the 3 it would take, marked over the limit
    assert "missed at 2" in proc.stdout and "*: the fleet exceeds --max-gpus 2" in proc.stdout
    assert "no layout meets the SLO within --max-gpus 2: the cheapest, a100-80gb agg bf16 tp1 b2048 s256, needs 3 units" \
        in " ".join(proc.stdout.split())
    frame = pd.read_csv(tmp_path / "p" / "plan.csv")
    assert frame.loc[0, "units"] == 3 and frame.loc[0, "verified_units"] == 2 and frame.loc[0, "over_limit"] == "--max-gpus 2"


# -- explicit values of options the run does not read ----------------------------------------------------------

@pytest.mark.parametrize(("args", "needle"), [
    (["--scheduler-recv-interval", "1"], "--scheduler-recv-interval: only the sglang scheduler polls"),
    (["--warmup-mode", "steady"], "--warmup-mode: the warm-up mode is a closed loop's"),
    (["--over-length", "drop"], "--over-length: it says what becomes of trace rows"),
    (["--prefill-pool", "1x(tp=1)", "--decode-pool", "2x(tp=1)", "--kv-link-scope", "shared"],
     "--kv-link-scope: one prefill worker sends every transfer"),
])
def test_an_explicit_default_the_run_does_not_read_is_refused(args: list[str], needle: str) -> None:
    assert needle in one_line_error(simulate_module("run", "--model", "llama-3.1-8b", "--num-requests", "8", *args))


def test_the_same_options_run_where_they_are_read(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("num_prefill_tokens,num_decode_tokens\n100,10\n9000,10\n")
    for args in (["--num-requests", "8", "--scheduler", "sglang", "--scheduler-recv-interval", "1"],
                 ["--num-requests", "8", "--concurrency", "4", "--num-warmup", "4", "--warmup-mode", "steady"],
                 ["--trace", str(trace), "--max-total-tokens", "4096", "--over-length", "drop", "--num-requests", "1"],
                 ["--num-requests", "8", "--prefill-pool", "2x(tp=1)", "--decode-pool", "2x(tp=1)",
                  "--kv-link-scope", "shared"]):
        proc = simulate_module("run", "--model", "llama-3.1-8b", *args)
        assert proc.returncode == 0, (args, proc.stderr[-1500:])


def test_a_saved_results_num_prompts_are_the_measured_requests(tmp_path: Path) -> None:
    """vLLM's num_prompts are the measured requests (its --num-warmups are sent besides them)."""
    out = tmp_path / "r.json"
    proc = simulate_module("run", "--model", "llama-3.1-8b", "--num-requests", "24", "--concurrency", "4",
                           "--num-warmup", "4", "--save-result", str(out))
    assert proc.returncode == 0, proc.stderr[-1500:]
    saved = json.loads(out.read_text())
    assert saved["num_prompts"] == saved["completed"] + saved["failed"] == 20


# -- artifacts, tables and folders other commands wrote ---------------------------------------------------------

def _learned_artifact() -> dict:
    from simulator.costmodel.learned_schema import FORMAT_VERSION

    curve = {"x": "num_tokens", "family": "isotonic", "knots": [1.0, 64.0, 512.0], "values": [1e-5, 2e-5, 9e-5]}
    return {"kind": "servesim-learned-cost-model", "format_version": FORMAT_VERSION, "model": "llama-3.1-8b", "tp": 1,
            "gpu": "a100-80gb", "dtype_bytes": 2, "curves": {"qkv_proj": curve}}


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda a: a["curves"]["qkv_proj"].update(values=[1e-5, 2e-5]), "m.json: 3 knots and 2 values"),
    (lambda a: a["curves"]["qkv_proj"].update(values=[-1.0, 2e-5, 9e-5]), "values must be seconds >= 0"),
    (lambda a: a["curves"]["qkv_proj"].update(knots=[64.0, 1.0, 512.0]), "knots must be positive and increasing"),
    (lambda a: a["curves"]["qkv_proj"].pop("knots"), "m.json: lacks 'knots'"),
    (lambda a: a.update(curves=[1, 2]), "m.json: must map op names to curves"),
    (lambda a: a["curves"].update(qkv_projj=a["curves"]["qkv_proj"]), "m.json: no op of that name"),
    (lambda a: a.update(tp="1"), "tp must be a whole number, got '1'"),
])
def test_a_learned_artifact_edited_by_hand_is_one_line(tmp_path: Path, edit, needle: str) -> None:  # noqa: ANN001
    from simulator.config.run_config import ReplicaConfig
    from simulator.costmodel.learned import load_artifact

    artifact = _learned_artifact()
    load_artifact(_write(tmp_path, artifact), ReplicaConfig(model="llama-3.1-8b"))  # the unedited one loads
    edit(artifact)
    with pytest.raises(ConfigError) as err:
        load_artifact(_write(tmp_path, artifact), ReplicaConfig(model="llama-3.1-8b"))
    assert needle in str(err.value) and str(err.value).startswith("cost_model")


def _write(tmp_path: Path, data: object) -> str:
    path = tmp_path / "m.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(("value", "shown"), [("0", "0"), ("-4", "-4"), ("1.5", "1.5"), ("1e20", "1e+20")])
def test_a_profile_tables_counts_are_whole_numbers_in_range(tmp_path: Path, value: str, shown: str) -> None:
    from simulator.calibrate.fit_data import read_profile

    path = tmp_path / "profile.csv"
    path.write_text("op,num_tokens,tp,median_s,device,model\nqkv_proj,8,1,1e-5,a100-80gb,llama-3.1-8b\n"
                    f"qkv_proj,{value},1,2e-5,a100-80gb,llama-3.1-8b\n")
    with pytest.raises(ConfigError, match=re.escape(f"data row 2 (qkv_proj): num_tokens is {shown}, not a whole number")):
        read_profile(path)


def test_validate_refuses_a_bad_vidur_table_before_writing_and_runs_without_one(tmp_path: Path) -> None:
    from simulator.calibrate.validation import vidur_cpu_comparison, write_report
    from simulator.config.shared_data import SHARED_DATA

    splitwise = SHARED_DATA / "profiles" / "splitwise-sim" / "perf_model.csv"
    if not splitwise.is_file():
        pytest.skip("../shared/data is absent")
    assert vidur_cpu_comparison(tmp_path).empty  # no legacy tables: an empty comparison, not an AttributeError
    data = tmp_path / "data"
    (data / "splitwise-sim").mkdir(parents=True)
    (data / "splitwise-sim" / "perf_model.csv").write_bytes(splitwise.read_bytes())
    (data / "vidur" / "legacy_2023" / "a100").mkdir(parents=True)
    (data / "vidur" / "legacy_2023" / "a100" / "cpu_overheads.csv").write_text("model_name,batch_size\nx,1\n")
    with pytest.raises(ConfigError, match="cpu_overheads.csv lacks column"):
        write_report(tmp_path / "out", data)
    assert not (tmp_path / "out").exists()


def test_a_sweep_record_edited_by_hand_is_one_line(tmp_path: Path) -> None:
    from simulator.planning.sweep import read_sweep_folder

    for content in ('{"points": "abc"}', "[1, 2]", '{"points": [{"index": 0, "params": {}}]}'):
        (tmp_path / "sweep.json").write_text(content)
        with pytest.raises(ConfigError, match="is not a sweep's record"):
            read_sweep_folder(tmp_path)


def test_benchmark_rows_and_runs_name_a_bad_cell(tmp_path: Path) -> None:
    from simulator.calibrate.engine_fit import read_bench
    from simulator.calibrate.silicon_fit import read_user_rows

    head = "backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms,kernels,dtype\n"
    for cells, needle in (("banana,llama-3.1-8b,h100-sxm,1024,128,4,50,10,,", "backend 'banana' is not one of vllm"),
                          ("vllm,llama-3.1-8b,h100-sxm,1024,128,4,50,10,vlm,", "kernels 'vlm' is not one of"),
                          ("vllm,llama-3.1-8b,h100-sxm,1024,128,4,50,10,,fp9", "dtype 'fp9' is not one of")):
        path = tmp_path / "rows.csv"
        path.write_text(head + cells + "\n")
        with pytest.raises(ConfigError, match=f"line 2: {needle}"):
            read_user_rows(path)
    path.write_text(head + "sglang,llama-3.1-8b,h100-sxm,1024,128,4,50,10,,FP8\n")
    assert len(read_user_rows(path)) == 1  # known values (any case of a dtype) read
    bench = json.loads((ROOT / "tests" / "data" / "vllm_bench_fixture.json").read_text())
    for key, value, needle in (("request_submit_times", [0.0] * 99, "request_submit_times has 99 entries for 100"),
                               ("input_lens", [0] + bench["input_lens"][1:], "input_lens\\[0\\] is 0, not a whole")):
        edited = {**bench, key: value}
        (tmp_path / "b.json").write_text(json.dumps(edited))
        with pytest.raises(ConfigError, match=needle):
            read_bench(tmp_path / "b.json")


def test_tau_refuses_a_decode_context_without_decodes() -> None:
    proc = simulate_module("tau", "--num-decodes", "0", "--decode-context", "3000")
    assert "--decode-context: --num-decodes 0 puts no decode in the batch" in one_line_error(proc)


def test_an_engine_artifacts_own_scheduler_is_said_like_a_presets(tmp_path: Path) -> None:
    """An artifact's scheduler is run where --scheduler is not given, as a preset's is; another given is said."""
    artifact = str(_artifact(tmp_path, scheduler="sglang"))
    proc = simulate_module("run", "--model", "llama-3.1-8b", "--num-requests", "8", "--engine", artifact)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert " · sglang (" in proc.stdout and "fitted with --scheduler" not in proc.stdout
    proc = simulate_module("run", "--model", "llama-3.1-8b", "--num-requests", "8", "--engine", artifact,
                           "--scheduler", "vllm-v1")
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "engine.json was fitted with --scheduler sglang" in " ".join(proc.stdout.split())


# -- disaggregated layouts said as they are ---------------------------------------------------------------------

def test_a_pool_shows_the_layout_it_inherits_and_split_says_why_nothing_fits() -> None:
    from simulator.config.disagg_layout import layout_of
    from simulator.config.run_config import RunConfig
    from simulator.planning.split import split_candidates

    config = RunConfig().replace(replica__model="llama-3.1-8b", replica__pp=2, prefill_pool="1x(tp=1)",
                                 decode_pool="1x(tp=1)")
    assert layout_of(config).describe().startswith("prefill 1x(tp=1,pp=2) + decode 1x(tp=1,pp=2)")
    pools = {(c.prefill_pool, c.decode_pool) for c in split_candidates(config, 4, (1,))}
    assert pools == {("1x(tp=1,pp=2,sched=vllm)", "1x(tp=1,pp=2,sched=vllm)")}  # each passed back to `run` alone is the same layout
    line = one_line_error(simulate_module("disagg", "split", "--model", "llama-3.1-8b", "--gpus", "2", "--tps", "2",
                                          "--num-requests", "16"))
    assert "a prefill and a decode worker of at least tp=2 need 4 GPUs, and --gpus is 2" in line and "--tps 1" in line


def test_a_kv_cache_too_small_for_max_model_len_names_the_figure_a_run_reports() -> None:
    line = one_line_error(simulate_module("run", "--model", "llama-3.1-8b", "--num-gpu-blocks", "2000",
                                          "--num-requests", "8"))
    assert "the KV cache holds 32000 tokens per replica (31680 past the scheduler's watermark)" in line


# -- the importers -------------------------------------------------------------------------------------------

def _vidur_mlp(tmp_path: Path, tokens: str = "8", emb: str = "0.01") -> Path:
    folder = tmp_path / "h100" / "meta-llama" / "Llama-2-7b-hf"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mlp.csv"
    path.write_text("num_tokens,num_tensor_parallel_workers,n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,"
                    "use_gated_mlp,time_stats.emb.median,time_stats.mlp_up_proj.median\n"
                    f"{tokens},1,32,32,4096,11008,32000,True,{emb},0.05\n")
    return path


def test_import_vidur_refuses_negative_times_no_tokens_and_a_file_given_twice(tmp_path: Path) -> None:
    from profiler.vidur_import import import_vidur

    path = _vidur_mlp(tmp_path)
    assert len(import_vidur([path])) == 2  # the embedding and the up projection
    with pytest.raises(ConfigError, match="given twice"):
        import_vidur([path, path.parent])
    with pytest.raises(ConfigError, match="time_stats.emb.median: '-1.0' is not a time in ms >= 0"):
        import_vidur([_vidur_mlp(tmp_path, emb="-1.0")])
    with pytest.raises(ConfigError, match="num_tokens: '0' tokens time no kernel"):
        import_vidur([_vidur_mlp(tmp_path, tokens="0")])


def test_aiconfigurator_latencies_are_positive_numbers(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from simulator.costmodel.aic.tables import _column

    for name, values, needle in (("neg", [1.0, -1.0], "row 1's latency is -1.0, not a positive finite time"),
                                 ("nan", [1.0, float("nan")], "row 1's latency is nan"),
                                 ("text", ["1.0", "2.0"], "its latency column holds string, not numbers")):
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"m": [1, 2], "latency": values}), path)
        with pytest.raises(ConfigError, match=re.escape(needle)):
            _column(path, "latency")
    pq.write_table(pa.table({"m": [1, 2], "latency": [1.0, 2.0]}), tmp_path / "ok.parquet")
    assert _column(tmp_path / "ok.parquet", "latency").tolist() == [1.0, 2.0]
    line = one_line_error(simulate_module("import-aiconfigurator", "--gpu", "h100-sxm", "--backend", "vllm",
                                          "--backend", "vllm", "--out", str(tmp_path / "out")))
    assert "--backend: vllm given twice" in line


# -- a checkpoint's quantization, prices, a header alone --------------------------------------------------------

@pytest.mark.parametrize(("quant", "named"), [
    ({"quant_method": "fp8", "activation_scheme": "dynamic"}, "fp8"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8-block"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "awq", "bits": 4}, "int4"),
    ({"quant_method": "compressed-tensors", "format": "float-quantized"}, "fp8"),
    ({"quant_method": "bitsandbytes"}, "bitsandbytes"),
])
def test_a_checkpoints_quantization_is_said_beside_the_dtype_priced(quant: dict, named: str) -> None:
    from simulator.config.hf_config import checkpoint_quant

    assert checkpoint_quant(quant) == named
    assert checkpoint_quant(None) == ""


def test_a_quantized_checkpoint_run_at_another_dtype_says_so(tmp_path: Path) -> None:
    model = json.loads((ROOT / "tests" / "data" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
    model["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic"}
    (tmp_path / "config.json").write_text(json.dumps(model))
    said = "note: the checkpoint's config.json is quantized (fp8); the run prices --dtype bf16"
    plain = simulate_module("run", "--model", str(tmp_path / "config.json"), "--num-requests", "8")
    assert plain.returncode == 0 and said in " ".join(plain.stdout.split()), plain.stderr[-1500:]
    fp8 = simulate_module("run", "--model", str(tmp_path / "config.json"), "--num-requests", "8", "--dtype", "fp8")
    assert fp8.returncode == 0 and "checkpoint's config.json" not in fp8.stdout


@pytest.mark.parametrize(("name", "text", "needle"), [
    ("h.csv", "gpu,usd_per_gpu_hour\n", "has no rows below its header"),
    ("t.toml", "[prices]\nh100-sxm = 3.0\n", "[prices] is a table; the file maps GPU names"),
    ("b.csv", "gpu,usd_per_gpu_hour\nh100-sxm,1e308\n", "must be a number of USD per GPU-hour in (0, 10000]"),
    ("w.csv", "gpu,usd_per_gpu_hour,max_w\nh100-sxm,3,1e308\n", "must be a number of watts in (0, 100000]"),
])
def test_a_price_file_that_would_mislead_is_refused(tmp_path: Path, name: str, text: str, needle: str) -> None:
    from simulator.config.prices import load_price_file

    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as err:
        load_price_file(tmp_path / name)
    assert needle in str(err.value)


def test_a_profile_table_of_a_header_alone_says_so(tmp_path: Path) -> None:
    from simulator.calibrate.fit_data import read_profile

    (tmp_path / "p.csv").write_text("op,num_tokens,tp,median_s,device,model\n")
    with pytest.raises(ConfigError, match="has no rows below its header"):
        read_profile(tmp_path / "p.csv")


def test_busy_fractions_stay_within_the_run_with_a_warm_up() -> None:
    """A warm-up's compute is the GPUs' too: over the measured requests' span alone it put busy above 1."""
    from simulator.config.run_config import RunConfig
    from simulator.report.metrics import summarize
    from simulator.simulation import simulate

    for workload in ({"workload__concurrency": 4, "workload__num_warmup": 63, "workload__arrival": "burst"},
                     {"workload__qps": 5.0, "workload__num_warmup": 10}):
        config = RunConfig().replace(replica__model="llama-3.1-8b", workload__num_requests=64, num_replicas=2,
                                     router="round_robin", **workload)
        summary = summarize(simulate(config))
        assert all(0 < b <= 1 + 1e-9 for b in summary["replica_busy_fraction"]), summary["replica_busy_fraction"]
        assert [r["busy_fraction"] for r in summary["per_replica"]] == summary["replica_busy_fraction"]


def test_a_speculating_runs_itl_is_per_streamed_chunk_as_vllms() -> None:
    """vLLM's benchmark times a gap per streamed chunk; a speculating step's tokens arrive as one chunk. Our TBT
    keeps the per-token view (a zero gap for each token a step emits beside its first)."""
    from simulator.config.run_config import RunConfig
    from simulator.config.speculative import SpeculativeConfig
    from simulator.report.benchmark import benchmark_metrics, per_request_lists
    from simulator.report.metrics import request_columns, summarize
    from simulator.simulation import simulate

    spec = SpeculativeConfig(method="eagle3", num_speculative_tokens=3, acceptance_rates=(0.8, 0.65, 0.5))
    config = RunConfig().replace(replica__model="llama-3.1-8b", workload__num_requests=16, workload__concurrency=1,
                                 workload__arrival="burst", speculative=spec)
    result = simulate(config, token_times=True)
    cols = request_columns(result)
    metrics = benchmark_metrics(result, cols)
    lists = per_request_lists(result, cols)
    assert metrics["median_itl_ms"] > 5 and all(all(g > 0 for g in itl) for itl in lists["itls"])
    # each chunk a step: as many gaps as steps after the first, fewer than tokens after the first
    assert sum(map(len, lists["itls"])) < sum(n - 1 for n in lists["output_lens"])
    assert summarize(result)["tbt_s_p50"] == 0.0  # the per-token view: most gaps are the zeros of accepted runs


def test_capacity_trials_leave_a_warm_up_out_as_a_run_does() -> None:
    """A users search's first wave (every user sends at once) set its P99 TTFT; --num-warmup was refused."""
    from simulator.config.run_config import RunConfig
    from simulator.planning.capacity import run_trial
    from simulator.planning.options import SLO

    config = RunConfig().replace(replica__model="llama-3.1-8b", workload__name="fixed", workload__prompt_tokens=1024,
                                 workload__output_tokens=256, workload__num_requests=400)
    slo = SLO(tbt_s=1.0, sched_delay_s=60.0, ttft_s=60.0)
    cold = run_trial(config, 64, slo, users=True)
    warm = run_trial(config.replace(workload__num_warmup=64), 64, slo, users=True)
    assert warm.num_finished == cold.num_finished - 64
    assert warm.ttft_s_p99 < cold.ttft_s_p99
    proc = simulate_module("capacity", "--model", "llama-3.1-8b", "--users", "--max-users", "32", "--num-requests", "96",
                           "--num-warmup", "16", "--workload", "fixed", "--prompt-tokens", "512", "--output-tokens", "64")
    assert proc.returncode == 0 and "capacity" in proc.stdout, proc.stderr[-1500:]


def test_compare_says_when_no_disaggregated_layout_fits() -> None:
    """At a 131K context the pools' vllm scheduler reserves a whole-prompt prefill: no 1x(tp=2) pool of 70B fits
    on 4 H100s; compare showed its aggregated side alone, titled 'aggregated vs disaggregated', without a word."""
    from simulator.config.run_config import RunConfig
    from simulator.planning.split import split_candidates

    config = RunConfig().replace(replica__model="llama-3.1-70b", replica__gpu="h100-sxm")
    dropped: list[str] = []
    assert split_candidates(config, 4, (2, 4), dropped) == []
    assert dropped and dropped[0].startswith("P 1x(tp=2,sched=vllm) + D 1x(tp=2,sched=vllm): ") and "does not fit" in dropped[0]
    proc = simulate_module("disagg", "compare", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "4",
                           "--tps", "2,4", "--num-requests", "32")
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "note: no disaggregated layout of 4 GPUs fits, so none is compared (the widest: P 1x(tp=2,sched=vllm)" in " ".join(proc.stdout.split())


def test_a_disaggregated_runs_header_names_its_pools_gpus_calibration() -> None:
    proc = simulate_module("run", "--model", "llama-3.1-8b", "--prefill-pool", "1x(tp=1,gpu=b200)", "--decode-pool",
                           "1x(tp=1,gpu=h100-sxm)", "--num-requests", "8")
    assert proc.returncode == 0, proc.stderr[-1500:]
    out = " ".join(proc.stdout.split())
    assert "roofline calibration: today (blackwell, vllm's kernels); today (hopper, vllm's kernels)" in out  # was ampere


def test_a_plan_verified_on_a_handful_of_late_requests_says_so(tmp_path: Path) -> None:
    """A fleet verified on 768 requests at 99% passed or failed on 8 of them: another seed flipped it. (A verification
    sends 2,048 requests at least since round 16: at 99.9%, 2 of them.)"""
    proc = simulate_module(*_PLAN, "--attainment", "0.999", "--out", str(tmp_path / "p"))
    assert proc.returncode == 0, proc.stderr[-1500:]
    out = " ".join(proc.stdout.split())
    assert "verified on 2,048 requests, of which 2 may miss the SLO at 99.9%: a handful of requests decides it" in out
    proc = simulate_module(*_PLAN, "--out", str(tmp_path / "q"))
    assert proc.returncode == 0 and "a handful of requests decides it" not in proc.stdout, proc.stderr[-1500:]


def test_a_sweep_files_base_value_its_grid_replaces_is_refused(tmp_path: Path) -> None:
    """[base] qps = 3 with [grid] qps = [1, 2]: the base's 3 never ran, and nothing said so (a flag was refused)."""
    from simulator.planning.sweep import build_spec, load_sweep_file

    path = tmp_path / "s.toml"
    path.write_text('mode = "run"\n[base]\nqps = 3.0\nnum_requests = 8\n[grid]\nqps = [1.0, 2.0]\n')
    with pytest.raises(ConfigError, match=r"sweep.base.qps: the grid \(qps\) sets it too .* qps = 3.0 would do nothing"):
        build_spec(load_sweep_file(path))
    path.write_text('mode = "run"\n[base]\nnum_requests = 8\n[grid]\nqps = [1.0, 2.0]\n')
    assert len(build_spec(load_sweep_file(path)).points) == 2


def test_a_plan_over_a_closed_loop_config_names_the_config(tmp_path: Path) -> None:
    """It blamed --qps (burst arrivals send no rate), and dropping --qps then blamed --concurrency, which was not given."""
    proc = simulate_module("run", "--model", "llama-3.1-8b", "--concurrency", "4", "--num-requests", "8",
                           "--out", str(tmp_path / "cl"))
    assert proc.returncode == 0, proc.stderr[-1500:]
    for extra in (["--qps", "4"], []):
        line = one_line_error(simulate_module("plan", "--config", str(tmp_path / "cl" / "config.json"), *extra,
                                              "--gpus", "a100-80gb", "--tps", "1", "--modes", "agg",
                                              "--out", str(tmp_path / "p")))
        assert "--config: its run is a closed loop of 4 users (workload.concurrency), and plan searches" in line


def test_an_eagle_heads_named_checkpoint_is_said_not_read() -> None:
    proc = simulate_module("run", "--model", "llama-3.1-8b", "--num-requests", "8", "--speculative-config",
                           '{"method": "eagle3", "num_speculative_tokens": 3, "model": "org/EAGLE3-head"}',
                           "--acceptance-rate", "0.7")
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "eagle3 (org/EAGLE3-head: named, not read; priced as one layer of the target)" in " ".join(proc.stdout.split())


# -- what the commands write, read back -------------------------------------------------------------------------

def test_plan_and_sweep_refuse_another_commands_folder(tmp_path: Path) -> None:
    """plan appended its rows to a capacity folder's trials.csv (a 6-column row under a 17-column header)."""
    folder = tmp_path / "c1"
    folder.mkdir()
    (folder / "capacity.json").write_text("{}")
    (folder / "trials.csv").write_text("seed,qps\n0,1.0\n")
    line = one_line_error(simulate_module(*_PLAN, "--out", str(folder)))
    assert "already holds other files (capacity.json)" in line
    line = one_line_error(simulate_module("sweep", "--grid", "qps=1,2", "--num-requests", "8", "--out", str(folder)))
    assert "already holds other files (capacity.json, trials.csv)" in line


def test_a_runs_figures_go_with_it_and_plot_run_refuses_a_summary(tmp_path: Path) -> None:
    run = tmp_path / "r1"
    assert simulate_module("run", "--num-requests", "8", "--out", str(run)).returncode == 0
    (run / "tbt_cdf.png").write_bytes(b"")  # what `plot run` writes beside it
    assert simulate_module("run", "--num-requests", "8", "--out", str(run)).returncode == 0  # was refused
    assert not (run / "tbt_cdf.png").exists()  # replaced whole: no figure of another run left
    line = one_line_error(simulate_module("plot", "run", str(run / "summary.json")))
    assert "summary.json is a run's summary, not its config" in line


def test_a_saved_results_start_times_are_its_arrivals_when_read_back(tmp_path: Path) -> None:
    """calibrate-engine --bench read only vLLM's request_submit_times and redrew Poisson arrivals for our own file."""
    from simulator.calibrate.engine_fit import read_bench

    out = tmp_path / "r.json"
    proc = simulate_module("run", "--model", "llama-3.1-8b", "--num-requests", "32", "--qps", "2",
                           "--save-result", str(out))
    assert proc.returncode == 0, proc.stderr[-1500:]
    saved = json.loads(out.read_text())
    assert "request_submit_times" not in saved and len(saved["start_times"]) == 32
    run = read_bench(out)
    assert run.arrival_at is not None and len(run.arrival_at) == len(run.ttfts)
    assert run.arrival_at[0] == 0.0 and run.arrival_at[-1] > 0


def test_a_sweep_folder_of_another_sweep_says_what_differs(tmp_path: Path) -> None:
    out = tmp_path / "sw"
    assert simulate_module("sweep", "--grid", "qps=1,2", "--num-requests", "8", "--out", str(out)).returncode == 0
    line = one_line_error(simulate_module("sweep", "--grid", "qps=1,2", "--num-requests", "9", "--out", str(out)))
    assert "holds another sweep: its sweep.json has points this one does not (the base differs in num_requests)" in line
    (out / "sweep.json").write_text("{")
    line = one_line_error(simulate_module("sweep", "--grid", "qps=1,2", "--num-requests", "8", "--out", str(out)))
    assert "sweep.json is not a sweep's record (unreadable, or edited by hand)" in line


def test_a_file_that_cannot_be_written_inside_a_sweep_or_plan_folder_is_one_line(tmp_path: Path) -> None:
    """A point file or trials.csv made unwritable inside a writable folder ended in a PermissionError traceback
    (here a folder stands in the file's place: root writes through read-only modes)."""
    from simulator.planning.sweep import build_spec, point_path, run_sweep

    spec = build_spec({"mode": "run", "base": {"num_requests": 8}, "grid": {"qps": [1.0, 2.0]}})
    point_path(tmp_path / "sw", spec.points[0].key).with_suffix(".json.tmp").mkdir(parents=True)
    with pytest.raises(ConfigError, match="cannot write .*json.tmp \\(Is a directory\\)"):
        run_sweep(spec, tmp_path / "sw")
    (tmp_path / "p" / "trials.csv").mkdir(parents=True)
    line = one_line_error(simulate_module(*_PLAN, "--out", str(tmp_path / "p")))
    assert "--out: cannot write" in line and "trials.csv (Is a directory)" in line


def test_a_profile_tables_mean_context_may_be_a_fraction(tmp_path: Path) -> None:
    """LLMServingSim's decode rows give a batch's mean context (0.97, 10.67): the count check refused two shared tables."""
    from simulator.calibrate.fit_data import read_profile

    (tmp_path / "p.csv").write_text("op,num_tokens,batch_size,context_len,tp,median_s,device,model\n"
                                    "attn_decode,3,3,10.666667,1,2e-5,a100-80gb,llama-3.1-8b\n")
    assert read_profile(tmp_path / "p.csv")["context_len"].tolist() == [10.666667]
    (tmp_path / "p.csv").write_text("op,num_tokens,batch_size,context_len,tp,median_s,device,model\n"
                                    "attn_decode,3,3,-0.5,1,2e-5,a100-80gb,llama-3.1-8b\n")
    with pytest.raises(ConfigError, match="context_len is -0.5, not a number in"):
        read_profile(tmp_path / "p.csv")
