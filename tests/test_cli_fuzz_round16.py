"""CLI fuzzing, round 16: a run's figures redrawn by code that no longer reproduces the run, said nowhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_cli_fuzz_round13 import invoke, refused


def test_plot_run_says_when_its_re_simulation_is_not_the_runs(tmp_path: Path) -> None:
    """`plot run` re-simulates config.json; where the folder's summary.json says otherwise (other code made the run,
    or its config was edited) the figures are not the run's, and a warning says which figures moved."""
    run = tmp_path / "run"
    code, output = invoke("run", "--num-requests", "8", "--out", str(run))
    assert code == 0, output
    code, output = invoke("plot", "run", str(run), "--out", str(tmp_path / "a"))
    assert code == 0 and "warning" not in output and (tmp_path / "a" / "tbt_cdf.png").is_file(), output
    summary = json.loads((run / "summary.json").read_text())
    summary["num_iterations"] += 1
    (run / "summary.json").write_text(json.dumps(summary))
    code, output = invoke("plot", "run", str(run / "config.json"), "--out", str(tmp_path / "b"))
    assert code == 0 and (tmp_path / "b" / "tbt_cdf.png").is_file(), output
    warning = next(line for line in output.splitlines() if line.startswith("warning:"))
    assert "does not reproduce its summary.json (num_iterations" in warning and "this code's" in warning


@pytest.mark.parametrize(("link", "says"), [
    ("infiniband-400gx8", "did you mean 'infiniband-400g-x8'?"),
    ("ib-400g", "did you mean 'infiniband-400g'?"),
    ("nvlnk", "did you mean 'nvlink'?"),
    ("infiniband-400g@3us", "a link name takes no latency ('@3us')"),
    ("25GB/s@3", "the latency '3' is not a time in us, ms or s"),
    ("25GB/s@", "the latency '' is not a time"),
    ("token-ring", "use a link name (nvlink,"),
])
def test_a_malformed_kv_link_says_which_part_is_wrong(link: str, says: str) -> None:
    """`--kv-link` answered "unknown link" whatever was wrong: a misspelt name, a NIC count without its dash, a
    latency on a named link (whose latency is its kind's), a bandwidth's latency without a unit (read lower-cased,
    which then blamed the bandwidth's unit)."""
    line = refused("run", "--prefill-pool", "1x", "--decode-pool", "1x", "--kv-link", link, "--num-requests", "4")
    assert line.startswith("error: --kv-link: ") and says in line, line


def test_a_sweep_refuses_two_spellings_of_one_deployment(tmp_path: Path) -> None:
    """'1x' takes the run's tp: beside tp 1 it is '1x(tp=1)', and a grid of both ran one deployment twice, as two
    rows of results.csv; across a product grid only the points where they meet are one."""
    line = refused("sweep", "--grid", "prefill_pool=1x(tp=1),1x", "--decode-pool", "1x", "--num-requests", "4",
                   "--out", str(tmp_path / "a"))
    assert "points 0 (prefill_pool=1x(tp=1)) and 1 (prefill_pool=1x) spell one deployment" in line, line
    line = refused("sweep", "--grid", "prefill_pool=1x(tp=2),1x", "--grid", "tp=1,2", "--decode-pool", "1x",
                   "--num-requests", "4", "--out", str(tmp_path / "b"))
    assert "points 1 (prefill_pool=1x(tp=2), tp=2) and 3 (prefill_pool=1x, tp=2) spell one deployment" in line, line
    code, output = invoke("sweep", "--grid", "prefill_pool=1x(tp=2),1x", "--decode-pool", "1x", "--num-requests", "4",
                          "--out", str(tmp_path / "c"))
    assert code == 0 and "ran 2 points (0 failed)" in output, output


def test_a_run_under_a_prefill_floor_says_what_it_holds_a_step_to() -> None:
    """sglang-2026's fitted prefill floor (3.33 ms a layer) holds any step with prompt tokens of an 80-layer model to
    266 ms, decodes batched or waiting behind it included: a TBT/TPOT capacity met it first, said nowhere."""
    code, output = invoke("run", "--engine", "sglang-2026", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4",
                          "--dtype", "fp8", "--num-requests", "8")
    assert code == 0, output
    assert "engine sglang-2026 (a step carrying prompt tokens takes >= 266 ms: its prefill floor, 3.33 ms x 80 " \
           "layers)" in " ".join(output.split()), output
    code, output = invoke("capacity", "--engine", "trtllm-2026", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                          "--num-requests", "64")
    assert code == 0 and "its prefill floor, 0.86 ms x 32 layers" in " ".join(output.split()), output
    code, output = invoke("run", "--num-requests", "8")  # vllm-2026 has no floor: the title names the engine alone
    assert code == 0 and "prefill floor" not in output and "engine vllm-2026 ·" in " ".join(output.split()), output


def test_a_knee_over_measured_gemms_is_not_one_token(aic: Path) -> None:
    """Over vLLM's H100 FP8 tables the linear layers keep gaining efficiency up to thousands of tokens, so the line
    through the compute-bound end started above the one-token cost and the knee came out 1 token; it is the ridge
    where the end's cost a token reaches the flat cost: the ridge arithmetic (989 TFLOPS FP8 dense / 3.35 TB/s)
    puts it at a few hundred."""
    code, output = invoke("tau", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "4", "--kernels", "vllm",
                          "--dtype", "fp8", "--tbt-slo", "0.05")
    assert code == 0, output
    knee = int(re.search(r"knee at ~([\d,]+) tokens", " ".join(output.split())).group(1).replace(",", ""))
    assert 100 <= knee <= 600, output


def _trace(path: Path, first_prompt: int) -> Path:
    path.write_text(f"arrived_at,num_prefill_tokens,num_decode_tokens\n0,{first_prompt},20\n0.5,200,30\n1.0,50,10\n")
    return path


def test_a_reproduction_over_an_edited_trace_says_so(tmp_path: Path) -> None:
    """config.json named its trace by path only: `run --config` over a trace edited since ran other requests under
    the same name, said nowhere. It records each file's sha256 and the reproduction warns where one reads otherwise."""
    trace = _trace(tmp_path / "t.csv", 100)
    code, output = invoke("run", "--trace", str(trace), "--arrival", "trace", "--out", str(tmp_path / "r"))
    assert code == 0, output
    record = json.loads((tmp_path / "r" / "config.json").read_text())["inputs"]
    assert record["workload.trace"]["path"] == str(trace.resolve()) and len(record["workload.trace"]["sha256"]) == 64
    code, output = invoke("run", "--config", str(tmp_path / "r" / "config.json"))
    assert code == 0 and "warning" not in output, output
    _trace(trace, 4000)
    code, output = invoke("run", "--config", str(tmp_path / "r" / "config.json"))
    assert code == 0, output
    assert "workload.trace" in output and "changed since the run" in output and "not the one it reproduces" in output


def test_a_sweep_over_an_edited_trace_is_not_resumed_beside_its_old_points(tmp_path: Path) -> None:
    """A sweep's points were keyed by the trace's path: edited in place, the sweep resumed its stored points as done
    (and a point added ran on the new contents beside them, one results.csv over two traces)."""
    trace = _trace(tmp_path / "t.csv", 100)
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'mode = "run"\n[base]\ntrace = "{trace}"\narrival = "trace"\nnum_requests = 3\n'
                     "[grid]\nmax_num_seqs = [8, 16]\n")
    out = str(tmp_path / "o")
    code, output = invoke("sweep", str(sweep), "--out", out)
    assert code == 0 and "ran 2 points" in output, output
    code, output = invoke("sweep", str(sweep), "--out", out)
    assert code == 0 and "2 already done" in output, output
    _trace(trace, 4000)
    code, output = invoke("sweep", str(sweep), "--out", out)  # (after the sweep's header line)
    line = output.strip().splitlines()[-1]
    assert code == 2 and line.startswith("error: --out: ") and "points run on other contents of" in line, output
    assert str(trace.resolve()) in line and "Traceback" not in output, output
    code, output = invoke("sweep", str(sweep), "--out", str(tmp_path / "new"))
    assert code == 0 and "ran 2 points" in output, output


def test_a_run_that_reads_no_file_keeps_its_result_key() -> None:
    """The files enter a search's resume key only where a run reads one: stored sweeps and plans of runs that read
    none resume as before (these keys are the ones the code before the fingerprints gave, at da86975)."""
    from simulator.config.inputs import fingerprints
    from simulator.config.run_config import RunConfig

    assert fingerprints(RunConfig()) == {}
    assert RunConfig().result_key(mode="run") == "e2e383bc5b17d73a"
    other = RunConfig().replace(replica__model="llama-3.1-8b", scheduler__name="sarathi")
    assert other.result_key(mode="capacity", options={"x": 1}) == "b6db91e165f14d4e"


def test_a_model_folder_is_fingerprinted_by_the_config_it_reads(tmp_path: Path) -> None:
    """A model given as a folder is read for its config.json alone: a README added beside it (or a checkpoint's
    weights) is no change of input; a file given in a recorded one's place on the command line is the user's
    choice, not a changed input; with --json the warning goes to stderr, the JSON alone to stdout."""
    from test_profiler import tiny_config

    from simulator.config.inputs import fingerprints
    from simulator.config.run_config import RunConfig

    folder = tmp_path / "m"
    folder.mkdir()
    tiny_config(tmp_path).rename(folder / "config.json")
    config = RunConfig().replace(replica__model=str(folder))
    before = fingerprints(config)
    (folder / "README.md").write_text("notes")
    (folder / "model.safetensors").write_bytes(b"\0" * 1024)
    assert fingerprints(config) == before and set(before) == {"replica.model"}
    trace = _trace(tmp_path / "t.csv", 100)
    code, output = invoke("run", "--trace", str(trace), "--arrival", "trace", "--out", str(tmp_path / "r"))
    assert code == 0, output
    other = _trace(tmp_path / "u.csv", 999)
    code, output = invoke("run", "--config", str(tmp_path / "r" / "config.json"), "--trace", str(other))
    assert code == 0 and "warning" not in output, output
    _trace(trace, 999)
    code, output = invoke("run", "--config", str(tmp_path / "r" / "config.json"), "--json")
    lines = output.strip().splitlines()
    assert code == 0 and lines[-1].startswith("warning: ") and "changed since the run" in lines[-1], output


def test_a_think_time_past_any_run_is_refused(tmp_path: Path) -> None:
    """A closed session replay sent the next turn 1e300 s on: duration 1e300 s and its TTFT and TBT 0 (the times
    lost their precision); open replays already refused arrivals past 1e9 s."""
    trace = tmp_path / "s.json"
    trace.write_text(json.dumps({"block_size": 64, "requests": [{"t": 0, "in": 200, "out": 10, "api_time": 1},
                                                                {"t": 1, "in": 200, "out": 10, "think_time": 1e300}]}))
    line = refused("run", "--trace", str(trace), "--arrival", "trace", "--session-replay", "closed")
    assert "request 1: think_time 1e+300 s is past 1e+09 s" in line, line


@pytest.mark.parametrize("row", ['{"input_toks": [], "output_toks": 10}', '{"input_toks": [1, 2], "output_toks": 10}',
                                 '{"input_toks": {"a": 1}, "output_toks": 10}'])
def test_a_jsonl_trace_with_a_list_for_a_count_is_refused_in_one_line(tmp_path: Path, row: str) -> None:
    """pd.isna of a list is a list: a JSONL count given as a list raised a ValueError traceback."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(row + "\n" + '{"input_toks": 5, "output_toks": 10}\n')
    line = refused("run", "--trace", str(trace), "--num-requests", "2")
    assert "line 1, column input_toks:" in line and "is not a number" in line, line


def test_a_bench_files_model_id_that_is_no_name_is_refused(tmp_path: Path) -> None:
    """A numeric model_id in a vllm bench JSON raised an AttributeError traceback."""
    data = json.loads((Path(__file__).parent / "data" / "vllm_bench_fixture.json").read_text())
    data["model_id"] = 5
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps(data))
    line = refused("calibrate-engine", "--bench", str(bench), "--out", str(tmp_path / "e.json"))
    assert "model_id must be the served model's name, got 5" in line, line


def test_a_sweep_file_that_gives_an_option_twice_is_refused(tmp_path: Path) -> None:
    """A [base] with tp and tensor_parallel_size ran the last one, unsaid (the CLI refuses --tp given twice); a YAML
    table with a key twice likewise (TOML and JSON refuse it themselves)."""
    toml = tmp_path / "s.toml"
    toml.write_text('mode = "run"\n[base]\ntp = 1\ntensor_parallel_size = 2\n')
    line = refused("sweep", str(toml), "--out", str(tmp_path / "a"))
    assert line.startswith("error: sweep.base.tensor_parallel_size: tp is given twice, also as tp"), line
    yaml_file = tmp_path / "s.yaml"
    yaml_file.write_text("mode: run\nbase:\n  num_requests: 32\n  num_requests: 16\n")
    pytest.importorskip("yaml")
    line = refused("sweep", str(yaml_file), "--out", str(tmp_path / "b"))
    assert "line 4: key 'num_requests' is given twice in its table" in line, line


def test_a_sweep_point_too_big_for_memory_is_refused_before_it_runs(tmp_path: Path) -> None:
    """simulate run refuses a run whose requests cannot fit in memory; a sweep's points drew them until numpy gave up
    (a failed point with a ValueError) or the machine ran out."""
    sweep = tmp_path / "s.toml"
    sweep.write_text('mode = "run"\n[base]\nnum_requests = 99999999999999\n[grid]\nmax_num_seqs = [8, 16]\n')
    line = refused("sweep", str(sweep), "--out", str(tmp_path / "o"))
    assert line.startswith("error: sweep.base.num_requests: 99,999,999,999,999 requests need about"), line
    assert "use num_requests" in line and not (tmp_path / "o").exists(), line


@pytest.mark.parametrize(("change", "says"), [("drop k", "the gemm table lacks its key column k"),
                                              ("m -5", "the gemm table has m = -5 (no size)")])
def test_an_aiconfigurator_export_refuses_a_table_it_would_mangle(aic: Path, tmp_path: Path, change: str,
                                                                  says: str) -> None:
    """import-aiconfigurator wrote a GEMM table without its k column (every row's shape lost) or with m = -5, rc 0."""
    import shutil

    import pandas as pd

    root = tmp_path / "db"
    (root / "systems").mkdir(parents=True)
    shutil.copy(aic / "systems" / "a100_sxm.yaml", root / "systems")
    source = next((aic / "systems" / "data" / "a100_sxm" / "gemm" / "vllm").iterdir())
    target = root / "systems" / "data" / "a100_sxm" / "gemm" / "vllm" / source.name
    shutil.copytree(source, target)
    table = next(target.glob("*.parquet"))
    frame = pd.read_parquet(table)
    frame = frame.drop(columns="k") if change == "drop k" else frame.assign(m=frame["m"].where(frame.index != 3, -5))
    frame.to_parquet(table)
    line = refused("import-aiconfigurator", "--gpu", "a100_sxm", "--backend", "vllm", "--data", str(root), "--out",
                   str(tmp_path / "o"))
    assert line.startswith("error: --data: ") and says in line, line
    ok = tmp_path / "ok"
    shutil.copytree(root, ok)
    shutil.copy(source / table.name, next((ok / "systems" / "data" / "a100_sxm" / "gemm" / "vllm").iterdir()))
    code, output = invoke("import-aiconfigurator", "--gpu", "a100_sxm", "--backend", "vllm", "--data", str(ok),
                          "--out", str(tmp_path / "o2"))
    assert code == 0, output


def test_a_bench_files_request_rate_of_true_is_no_rate(tmp_path: Path) -> None:
    data = json.loads((Path(__file__).parent / "data" / "vllm_bench_fixture.json").read_text())
    data["request_rate"] = True  # (read as 1.0 req/s)
    bench = tmp_path / "b.json"
    bench.write_text(json.dumps(data))
    line = refused("calibrate-engine", "--bench", str(bench), "--out", str(tmp_path / "e.json"))
    assert "request_rate True is not a number" in line, line


def test_messages_that_named_the_wrong_thing(tmp_path: Path) -> None:
    """A CSV naming a column twice was blamed on an unknown column 'tp.1' (pandas' rename); a numeric timestamp column
    was 'not a date-time' without naming the column of seconds; a sweep point of a grid-less sweep was 'sweep
    point : ...'."""
    rows = tmp_path / "rows.csv"
    rows.write_text("backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms,tp,tp\n"
                    "vllm,llama-3.1-8b,h100-sxm,1024,128,4,50,10,1,1\n")
    line = refused("calibrate-engine", "--rows", str(rows), "--out", str(tmp_path / "e.json"))
    assert "names column 'tp' twice" in line, line
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,num_prefill_tokens,num_decode_tokens\n2023-11-16 18:15:46,10,10\n5,10,10\n")
    line = refused("run", "--trace", str(trace), "--arrival", "trace", "--num-requests", "2")
    assert "is not a date-time" in line and "or name a column of seconds arrived_at" in line, line
    sweep = tmp_path / "s.toml"
    sweep.write_text('mode = "capacity"\n[base]\nnum_requests = 64\nconcurrency = 4\n')
    line = refused("sweep", str(sweep), "--out", str(tmp_path / "o"))
    assert line.startswith("error: sweep point 0: --concurrency: "), line


def test_a_users_search_over_exact_lengths_says_its_users_move_in_waves() -> None:
    """simulate run says exact lengths lock a closed loop's users into waves; capacity --users, whose answer they
    shape (the README's example: P99 TTFT 15 s at its answer), said nothing."""
    args = ("capacity", "--users", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--workload", "random",
            "--prompt-tokens", "1024", "--output-tokens", "256", "--num-requests", "400")
    code, output = invoke(*args)
    assert code == 0 and "users move in lock-stepped waves" in " ".join(output.split()), output
    code, output = invoke(*args, "--random-range-ratio", "0.8", "--range-style", "sglang")
    assert code == 0 and "lock-stepped" not in output, output


def test_no_split_fits_names_the_widest_layouts_reason() -> None:
    """Without --max-model-len, Llama-3.1-70B's 128K context stops the TP2 workers on 4 H100s (their KV cache), but
    the refusal quoted TP1's weights, which raising the TPs cannot lift (they were already allowed)."""
    for tps in ("1,2,4,8", "2,1"):  # (whatever order --tps gives them in)
        line = refused("disagg", "split", "--model", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "4", "--dtype",
                       "fp8", "--tps", tps)
        assert "(the widest: P 1x(tp=2,sched=vllm) + D 1x(tp=2,sched=vllm): the KV cache holds" in line and "max_model_len 131072" in line


def test_a_split_search_over_short_trials_says_its_rates_lean_high() -> None:
    """disagg split/compare search 400-request trials by default, capacity 2,048: at 400 the best layout of
    Llama-3.1-70B FP8 on 4 H100s came out 1.30 req/s a GPU, at 2,048 1.01, and Sarathi's margin over the split fell
    from 27% to 9% (a walkthrough), said nowhere."""
    args = ("disagg", "split", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "2", "--tps", "1")
    code, output = invoke(*args, "--num-requests", "200")
    text = " ".join(output.split())
    assert code == 0 and "note: 200-request trials, where simulate capacity runs 2,048" in text and "about 10x" in text


def test_a_capacity_sweep_refuses_an_slo_key_no_point_reads(tmp_path: Path) -> None:
    """simulate capacity refuses --sched-delay-slo under --criterion goodput; a capacity sweep ran two points of one
    capacity that differed in that column only. Where some point reads it (criterion tbt), it stays."""
    base = ("sweep", "--mode", "capacity", "--model", "llama-3.1-8b", "--num-requests", "64")
    line = refused(*base, "--grid", "criterion=goodput", "--grid", "sched_delay_slo=0.5,1", "--out", str(tmp_path / "a"))
    assert "sched_delay_slo=0.5: --sched-delay-slo: --criterion goodput judges a trial by its goodput alone" in line
    code, output = invoke(*base, "--grid", "criterion=goodput,tbt", "--grid", "sched_delay_slo=0.5,1", "--out",
                          str(tmp_path / "b"))
    assert code == 0 and "ran 4 points (0 failed)" in output, output
    # a flag refused by its --no- spelling, read by some point (early exit on, TBT criterion): kept
    sweep = tmp_path / "s.toml"
    sweep.write_text('mode = "capacity"\n[base]\nmodel = "llama-3.1-8b"\nnum_requests = 64\ntbt_early_exit = false\n'
                     "[grid]\nearly_exit = [true, false]\n")
    code, output = invoke("sweep", str(sweep), "--out", str(tmp_path / "c"))
    assert code == 0 and "ran 2 points (0 failed)" in output, output


def test_a_mixed_pool_says_how_many_requests_it_took() -> None:
    """A mixed pool takes a request only while every prefill worker has a queue: at a light load it took none, and
    --chunk-size or --scheduler (its knobs) changed nothing, said only in summary.json's num_mixed."""
    args = ("run", "--num-requests", "64", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--prefill-pool", "2x(tp=1)",
            "--decode-pool", "1x(tp=1)", "--mixed-pool", "1x(tp=1)")
    code, output = invoke(*args, "--qps", "1")
    assert code == 0 and "the mixed pool took 0 requests (busy 0%; it takes one only while every prefill worker has " \
                         "a queue" in " ".join(output.split()), output
    code, output = invoke(*args, "--qps", "30")
    took = re.search(r"the mixed pool took (\d+) requests? \(busy", " ".join(output.split()))
    assert code == 0 and took is not None and int(took.group(1)) > 0, output


def test_a_runs_title_gives_its_context_length() -> None:
    """--max-model-len (vLLM's flag) changed nothing where every request fits, and the title never showed it."""
    code, output = invoke("run", "--num-requests", "8", "--model", "llama-3.1-8b", "--max-model-len", "32768")
    assert code == 0 and "seqs, context 32,768)" in " ".join(output.split()), output


def test_a_rows_fit_refuses_normalize_arrivals(tmp_path: Path) -> None:
    """Every benchmark row replays as a closed loop, which has no random gaps to rescale: --normalize-arrivals did
    nothing (simulate run refuses it in a closed loop)."""
    rows = tmp_path / "rows.csv"
    rows.write_text("backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms\nvllm,llama-3.1-8b,h100-sxm,1024,128,4,50,10\n")
    line = refused("calibrate-engine", "--rows", str(rows), "--normalize-arrivals", "--out", str(tmp_path / "e.json"))
    assert line.startswith("error: --normalize-arrivals: a --rows fit replays each row as a closed loop"), line


def test_tau_over_exact_lengths_refuses_seed_and_names_no_arrivals(tmp_path: Path) -> None:
    """tau reads lengths only: --seed over exact lengths did nothing (run refuses it), and its header named the
    arrivals ('poisson 1 qps') it never reads."""
    args = ("tau", "--model", "llama-3.1-8b", "--workload", "fixed", "--prompt-tokens", "1000", "--output-tokens", "200")
    line = refused(*args, "--seed", "3")
    assert line.startswith("error: --seed: tau reads the workload's lengths, and every request is the same length")
    code, output = invoke(*args)
    assert code == 0 and "qps" not in output and "(fixed 1000 prompt / 200 output tokens)" in " ".join(output.split())
    # a run's config.json may hold --normalize-arrivals (tau refuses the flag): no arrivals named either
    code, output = invoke("run", *args[1:], "--normalize-arrivals", "--num-requests", "8", "--out", str(tmp_path / "r"))
    assert code == 0, output
    code, output = invoke("tau", "--config", str(tmp_path / "r" / "config.json"))
    assert code == 0 and "rescaled" not in output and "qps" not in output, output


def test_plan_refuses_a_router_or_node_link_no_layout_reads(tmp_path: Path) -> None:
    """--router with --no-verify over one-replica units, and --intra-node-link over one-GPU layouts, changed
    neither the table nor answer.json."""
    args = ("plan", "--model", "llama-3.1-8b", "--gpus", "h100-sxm", "--tps", "1", "--modes", "agg", "--budgets", "2048",
            "--seqs", "256", "--qps", "30", "--num-requests", "128", "--out", str(tmp_path / "p"))
    assert "nothing is routed" in refused(*args, "--no-verify", "--router", "least_outstanding")
    assert "exchange nothing over the node's links" in refused(*args, "--intra-node-link", "pcie")


def test_predict_names_its_kv_cache_dtype() -> None:
    """predict --kv-cache-dtype fp8 on a batch whose prices it does not move (a prefill under the roofline) showed
    the same table, header and JSON as without it."""
    code, output = invoke("predict", "--model", "llama-3.1-8b", "--prefill", "512", "--kv-cache-dtype", "fp8")
    assert code == 0 and "dtype bf16, KV cache fp8" in output, output
    code, output = invoke("predict", "--model", "llama-3.1-8b", "--prefill", "512", "--kv-cache-dtype", "fp8", "--json")
    assert code == 0 and json.loads(output)["kv_cache_dtype"] == "fp8", output


def test_a_split_searchs_header_says_what_shapes_its_figures() -> None:
    """--first-token-at prefill and --router changed trials.csv but neither the printed table nor its header."""
    code, output = invoke("disagg", "compare", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "2", "--tps",
                          "1", "--taus", "512", "--num-requests", "100", "--first-token-at", "prefill", "--router",
                          "least_outstanding")
    text = " ".join(output.split())
    assert code == 0 and "the first token from the prefill worker" in text and "· router least_outstanding" in text


def test_sweep_files_yaml_merges_and_older_sweeps(tmp_path: Path) -> None:
    """The duplicate-key check kept YAML's merge keys ('<<:') working and refuses a key that is no name in one line
    (a TypeError before); a sweep folder written before the points were keyed by their files' contents says so."""
    pytest.importorskip("yaml")
    merged = tmp_path / "m.yaml"
    merged.write_text("mode: run\nbase:\n  <<: {num_requests: 4}\n  num_requests: 8\ngrid:\n  max_num_seqs: [8]\n")
    code, output = invoke("sweep", str(merged), "--out", str(tmp_path / "a"))
    assert code == 0 and "ran 1 point" in output, output
    listed = tmp_path / "l.yaml"
    listed.write_text("mode: run\nbase:\n  ? [a, b]\n  : 3\n")
    assert "a key must be a name, got a list" in refused("sweep", str(listed), "--out", str(tmp_path / "b"))
    for key in ("1", "true", "~"):  # (an AttributeError traceback: no option's name)
        listed.write_text(f"mode: run\nbase:\n  {key}: 3\n")
        assert "a key must be a name, got a" in refused("sweep", str(listed), "--out", str(tmp_path / "b"))
    trace = _trace(tmp_path / "t.csv", 100)
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'mode = "run"\n[base]\ntrace = "{trace}"\narrival = "trace"\nnum_requests = 3\n'
                     "[grid]\nmax_num_seqs = [8]\n")
    out = tmp_path / "o"
    out.mkdir()
    base = {"trace": str(trace), "arrival": "trace", "num_requests": 3}
    (out / "sweep.json").write_text(json.dumps({"mode": "run", "base": base, "grid": {}, "points": [
        {"index": 0, "key": "0123456789abcdef", "params": {}}]}))  # (as the code before the fingerprints wrote it)
    code, output = invoke("sweep", str(sweep), "--out", str(out))
    assert code == 2 and "written before servesim keyed a point by the contents of the files" in output, output


def test_think_times_are_bounded_per_session() -> None:
    """Each turn waits for its own session's: the bound is the longest session's thinks, not every session's
    together (a long trace of many short sessions is no long one)."""
    import numpy as np

    from simulator.config.errors import ConfigError
    from simulator.workload.generate import RequestTable

    def table(sessions: list[int], think: list[float]) -> RequestTable:
        n = len(sessions)
        return RequestTable(np.zeros(n), np.full(n, 10), np.full(n, 10), "-", session_id=np.array(sessions),
                            think_s=np.array(think))

    table([0, 1, 2, 3], [6e8, 6e8, 6e8, 6e8])  # 2.4e9 s in all, 6e8 a session
    with pytest.raises(ConfigError, match="a session's think times add up to 1.2e\\+09 s"):
        table([0, 0, 1, 1], [6e8, 6e8, 1.0, 1.0])


def test_a_run_sized_by_num_gpu_blocks_says_so() -> None:
    """Beside --num-gpu-blocks (vLLM's override) the title said 'KV cache memory 0.5 of total' as if
    --gpu-memory-utilization sized the cache, which it no longer does."""
    code, output = invoke("run", "--num-requests", "8", "--num-gpu-blocks", "2000", "--gpu-memory-utilization", "0.5")
    text = " ".join(output.split())
    assert code == 0 and "KV cache 2,000 blocks of 16 tokens (--num-gpu-blocks, over the memory plan)" in text, output
    assert "KV cache memory 0.5" not in text, output


def test_a_rows_fits_model_options_are_judged_by_the_rows_model(aic: Path, tmp_path: Path) -> None:
    """--moe-imbalance beside rows of an MoE model was refused as 'llama-2-7b is a dense model', and --max-model-len
    against Llama-2-7B's context: the defaults, which no row names."""
    rows = tmp_path / "rows.csv"
    rows.write_text("backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms\n" + "".join(
        f"vllm,qwen3-30b-a3b,h100-sxm,1024,128,{c},{40 + c},{10 + c / 8}\n" for c in (4, 8, 16, 32)))
    code, output = invoke("calibrate-engine", "--rows", str(rows), "--moe-imbalance", "1.5",
                          "--out", str(tmp_path / "e.json"))
    assert code == 0 and "dense model" not in output, output
    code, output = invoke("calibrate-engine", "--rows", str(rows), "--max-model-len", "8192",
                          "--out", str(tmp_path / "f.json"))
    assert code == 0, output
    line = refused("calibrate-engine", "--rows", str(rows), "--model", "qwen3-30b-a3b", "--out", str(tmp_path / "g"))
    assert line.startswith("error: --model: a --rows fit replays each row"), line


def test_tau_over_a_trace_leaves_out_what_the_context_rejects(shared_data: Path) -> None:
    """tau over Claude Code sessions (prompts of tens of thousands of tokens) priced a chunk after 51,844 tokens on
    Llama-2-7B's 4K context, and on Llama-3.1-8B blamed a --num-decodes nobody gave: the engine rejects the longer
    requests, so no batch holds them."""
    sessions = str(shared_data / "traces" / "weka_claude_code" / "sessions")
    line = refused("tau", "--trace", sessions)
    assert line.startswith("error: workload: no request of trace sessions") and "4,096-token context" in line, line
    code, output = invoke("tau", "--model", "llama-3.1-8b", "--trace", sessions)
    assert code == 0 and "longer than the 131,072-token context" in " ".join(output.split()), output


def test_a_sweeps_concurrency_grid_is_a_closed_loop_as_the_flag_is(tmp_path: Path) -> None:
    """--concurrency N alone is N users in a closed loop; a sweep's concurrency grid ran each point as the default
    1 req/s Poisson load capped at N in flight, every point of a throughput curve alike (~915 tok/s from 16 to 512)."""
    code, output = invoke("sweep", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--grid", "concurrency=4,64",
                          "--workload", "random", "--prompt-tokens", "512", "--output-tokens", "128", "--num-requests",
                          "256", "--out", str(tmp_path / "s"))
    assert code == 0, output
    import csv

    rows = {r["concurrency"]: float(r["output_tokens_per_s"]) for r in csv.DictReader((tmp_path / "s" / "results.csv").open())}
    assert rows["64"] > 3 * rows["4"], rows  # (at 1 req/s both carried about the same)
    point = json.loads(next((tmp_path / "s" / "points").glob("*.json")).read_text())
    assert point["config"]["workload"]["arrival"] == "burst", point["config"]["workload"]


def test_a_disaggregated_run_names_its_pools_scheduler() -> None:
    """The pools ran vllm (V0: whole prompts, no token budget) unless a pool's sched= said otherwise, beside a run
    whose --scheduler (vllm-v1) was never theirs: a DeepSeek prefill rank took 22 prompts (161,683 tokens) in one
    14 s step, and the title named no pool scheduler. They run --scheduler's now (vLLM's NIXL workers run V1), and
    the title says which; a research policy's pools run vllm, said so."""
    args = ("run", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--num-requests", "8", "--prefill-pool", "1x")
    code, output = invoke(*args, "--decode-pool", "1x")
    text = " ".join(output.split())
    assert code == 0 and "· pools run vllm-v1 ·" in text and "V0" not in text, output
    code, output = invoke(*args, "--decode-pool", "1x", "--mixed-pool", "1x", "--scheduler", "sarathi")
    text = " ".join(output.split())
    assert code == 0 and "· pools run vllm (vLLM V0: whole prompts, no token budget; a pool's sched=vllm-v1" in text
    code, output = invoke(*args[:7], "--prefill-pool", "1x(sched=vllm-v1)", "--decode-pool",
                          "1x(sched=vllm-v1)")
    text = " ".join(output.split())
    assert code == 0 and "· pools run vllm-v1 ·" in text and "V0" not in text, output


def test_a_closed_loop_beyond_its_kv_cache_says_how_many_users_it_holds() -> None:
    """256 users of 8K/1K on DeepSeek-R1 FP8 over 8 B200s: TTFT p50 46 s and preemptions, with no word that the KV
    cache holds ~150 users' contexts; an overloaded closed loop was told to 'lower --qps', which it has none of."""
    code, output = invoke("run", "--model", "deepseek-v3", "--gpu", "b200", "--tp", "8", "--dtype", "fp8",
                          "--concurrency", "256", "--workload", "random", "--prompt-tokens", "8192", "--output-tokens",
                          "1024", "--random-range-ratio", "0.8", "--range-style", "sglang", "--num-requests", "512")
    text = " ".join(output.split())
    users = re.search(r"note: the KV cache holds [\d,]+ tokens, about ([\d,]+) of the 256 users' contexts", text)
    assert code == 0 and users is not None and 100 < int(users.group(1).replace(",", "")) < 256, output
    assert "lower --qps" not in text, output


def test_vllms_documented_speculative_json_runs_with_its_unread_keys_said() -> None:
    """vLLM's docs write EAGLE configs with "draft_tensor_parallel_size": 1 and "max_model_len": the first was refused
    as doing nothing (a head runs on the target's GPUs), the second as an unknown key. They run, said as not modelled
    (round 9 refused the first; a pasted config is vLLM's, not a flag typed)."""
    spec = ('{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3, '
            '"draft_tensor_parallel_size": 1, "max_model_len": 2048, "acceptance_rate": 0.7}')
    code, output = invoke("run", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--tp", "2", "--num-requests", "8",
                          "--speculative-config", spec)
    text = " ".join(output.split())
    assert code == 0 and "not modelled: draft_tensor_parallel_size (a head or lookup runs inside the target's step" \
        in text and "max_model_len (the drafts' context is the target's --max-model-len)" in text, output
    bad = spec.replace('"draft_tensor_parallel_size": 1', '"draft_tensor_parallel_size": 0')
    assert "must be an integer >= 1, got 0" in refused("run", "--model", "llama-3.1-8b", "--num-requests", "8",
                                                        "--speculative-config", bad)


def test_a_model_too_big_even_at_fp8_is_pointed_to_4_bits() -> None:
    """gpt-oss-120b at bf16 on one H100 was told to quantise to FP8, which needs 112 GiB too; it ships in MXFP4."""
    line = refused("run", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--num-requests", "4")
    assert "quantise the weights to 4 bits (--dtype mxfp4 or nvfp4" in line and "FP8 still needs ~" in line, line
    code, output = invoke("run", "--model", "gpt-oss-120b", "--gpu", "h100-sxm", "--dtype", "mxfp4", "--num-requests",
                          "4")
    assert code == 0, output


def test_tau_sizes_its_own_batch_to_leave_its_chunk_room() -> None:
    """The decodes tau drew filled the cache with full-length sequences and left the chunk none: it refused its own
    batch (Llama-2-7B, fixed 4,060/10), blaming the workload."""
    code, output = invoke("tau", "--model", "llama-2-7b", "--workload", "fixed", "--prompt-tokens", "4060",
                          "--output-tokens", "10")
    assert code == 0 and "knee" in output, output


def test_a_rows_fit_whose_first_row_is_unknown_is_refused_in_its_own_terms(tmp_path: Path) -> None:
    """rows_base read the first row's model through the silicon reader, whose Unexpressible escaped as a traceback;
    the first row that resolves gives the defaults, and a file of none is the fit's to refuse."""
    rows = tmp_path / "rows.csv"
    rows.write_text("backend,model,gpu,isl,osl,concurrency,ttft_ms,tpot_ms\nvllm,nosuch-model,h100-sxm,1024,128,4,50,10\n")
    line = refused("calibrate-engine", "--rows", str(rows), "--out", str(tmp_path / "e.json"))
    assert line.startswith("error: rows: ") and "nosuch-model is not in the catalog" in line, line


def test_a_mean_gap_is_the_same_bits_whatever_blas_threads_it_ran_under() -> None:
    """np.dot (BLAS) split a long weighted sum by its thread count: a sweep's points on Ray workers (one thread) and
    locally (two) differed in tbt_s_mean's last digit, and a resumed sweep mixed both."""
    import os
    import subprocess
    import sys

    code = ("import numpy as np; from simulator.engine.tbt import quantile_stats; "
            "from simulator.report.benchmark import _weighted_stats; rng = np.random.default_rng(0); "
            "v = np.sort(rng.random(400_000)); c = rng.integers(1, 50, 400_000); "
            "print(repr(quantile_stats(v, c, 'tbt_s')['tbt_s_mean']), repr(_weighted_stats(v, c, 'itl', [99.0])))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                           env={**os.environ, "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads}).stdout
            for threads in ("1", "2", "4")}
    assert len(outs) == 1, outs


def test_a_pools_gpu_file_is_an_input_too(tmp_path: Path) -> None:
    """A GPU file named by a pool's gpu= was no recorded input: edited, `run --config` reproduced another run
    silently and a sweep resumed its stale points."""
    from simulator.config.inputs import fingerprints
    from simulator.config.run_config import RunConfig

    gpu = tmp_path / "g.toml"
    gpu.write_text("bf16_tflops = 989\nhbm_gb_per_s = 3350\nmemory_gb = 80\n")
    config = RunConfig().replace(replica__model="llama-3.1-8b", prefill_pool=f"1x(tp=1,gpu={gpu})",
                                 decode_pool=f"1x(tp=1,gpu={gpu})")
    before, key = fingerprints(config), config.result_key(mode="run")
    assert set(before) == {"prefill_pool.gpu", "decode_pool.gpu"}
    gpu.write_text("bf16_tflops = 989\nhbm_gb_per_s = 2000\nmemory_gb = 80\n")
    assert fingerprints(config) != before and config.result_key(mode="run") != key


def test_a_sweep_files_trace_replays_whole_as_the_flags_do(tmp_path: Path) -> None:
    """[base] trace + arrival = "trace" replayed the default 256 rows, where the same sweep given --trace --arrival
    trace as flags, and simulate run, replay every row."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{i * 0.1:.1f},{50 + i % 7},{5 + i % 3}\n" for i in range(300)))
    sweep = tmp_path / "s.toml"
    sweep.write_text(f'mode = "run"\n[base]\ntrace = "{trace}"\narrival = "trace"\n[grid]\nmax_num_seqs = [8]\n')
    code, output = invoke("sweep", str(sweep), "--out", str(tmp_path / "o"))
    assert code == 0, output
    point = json.loads(next((tmp_path / "o" / "points").glob("*.json")).read_text())
    assert point["config"]["workload"]["num_requests"] == 300, point["config"]["workload"]
