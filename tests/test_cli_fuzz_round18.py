"""Round 18 of the CLI audit: flags accepted where nothing reads them (fast-forwarding a loop that never skips, a
prices file that prices none of the GPUs searched)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from test_cli_fuzz_round13 import invoke, refused

from simulator.config.errors import ConfigError

POOLS = ["--model", "llama-3.1-8b", "--gpu", "h100", "--num-requests", "20"]
SPEC = ["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}', "--acceptance-rate", "0.6"]


def test_fast_forward_is_refused_where_the_loop_steps_one_iteration_at_a_time() -> None:
    """Disaggregated pools and speculating runs take the plain loop whatever --[no-]fast-forward says: either value
    typed there did nothing, unsaid (disagg split too, whose every layout is disaggregated)."""
    pools = [*POOLS, "--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)"]
    assert "disaggregated pools step one iteration at a time" in refused("run", *pools, "--no-fast-forward")
    assert "a speculating run steps one iteration" in refused("run", *POOLS, *SPEC, "--fast-forward")
    line = refused("disagg", "split", *POOLS, "--gpus", "2", "--no-fast-forward")
    assert line.startswith("error: --no-fast-forward: no layout of the search reads it"), line
    # where the loop does skip, the flag is taken, and changes no result
    code, fast = invoke("run", *POOLS, "--fast-forward")
    code_slow, slow = invoke("run", *POOLS, "--no-fast-forward")
    assert code == code_slow == 0, (fast, slow)
    table = [line for line in fast.splitlines() if line.startswith("│")]
    assert table and table == [line for line in slow.splitlines() if line.startswith("│")]


def test_a_prices_file_that_prices_none_of_the_searched_gpus_is_refused(tmp_path: Path) -> None:
    """A --prices file is a whole table, so one GPU of it that the plan searches makes it count; pricing none of
    --gpus, the plan ran on the catalog's list prices as if the file had not been given."""
    prices = tmp_path / "prices.csv"
    prices.write_text("gpu,usd_per_gpu_hour\nb200,5.0\n")
    line = refused("plan", "--model", "llama-3.1-8b", "--gpus", "h100", "--prices", str(prices), "--qps", "2",
                   "--out", str(tmp_path / "plan"))
    assert line.startswith("error: --prices: ") and "none of which --gpus h100 searches" in line, line
    assert not (tmp_path / "plan" / "layouts.csv").exists()


def test_an_import_says_which_tables_it_found_no_rows_of_and_takes_a_gpu_alias(aic: Path, tmp_path: Path) -> None:
    """import-aiconfigurator wrote a backend's file without a word where a table was absent or empty (a run over it
    finds nothing there to look up), and refused `--gpu h100`, the alias every run takes."""
    code, output = invoke("import-aiconfigurator", "--gpu", "h100", "--backend", "vllm", "--data", str(aic),
                          "--out", str(tmp_path / "out"))
    assert code == 0, output
    assert "note: h100_sxm vllm: no rows of context_mla, generation_mla" in output  # (vLLM's H100 tables: no MLA)
    assert (tmp_path / "out" / "h100_sxm_vllm_0.24.0.parquet").is_file()
    code, output = invoke("import-aiconfigurator", "--gpu", "h100", "--backend", "sglang", "--data", str(aic),
                          "--out", str(tmp_path / "sglang"))
    assert code == 0 and "note:" not in output, output  # (SGLang's has every table)


SPEC_EAGLE = ["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}', "--acceptance-rate", "0.7"]


def test_a_users_search_refuses_a_speculation_threshold_above_its_max_users(tmp_path: Path) -> None:
    """A users search's trials never pass --max-users, so a threshold above it left every trial at full k, unsaid
    (its concurrency alone was judged, which the trials raise); in a sweep's users points alike."""
    line = refused("capacity", "--users", "--max-users", "16", *SPEC_EAGLE, "--spec-disable-batch-size", "20",
                   "--num-requests", "48")
    assert "but --max-users 16 holds every step to 16" in line, line
    code, out = invoke("capacity", "--users", "--max-users", "16", *SPEC_EAGLE, "--spec-disable-batch-size", "12",
                       "--num-requests", "48", "--max-trials", "2")
    assert code == 0, out
    sweep = tmp_path / "users.toml"
    sweep.write_text('mode = "capacity"\n[base]\nusers = true\nmax_users = 8\nnum_requests = 48\nmax_trials = 2\n'
                     '[grid]\nseed = [0, 1]\n')
    line = refused("sweep", str(sweep), *SPEC_EAGLE, "--spec-disable-batch-size", "20", "--out", str(tmp_path / "s"))
    assert "--max-users 8 holds every step to 8" in line, line


def test_workers_beyond_four_a_cpu_are_refused_before_any_process_starts(tmp_path: Path) -> None:
    """A pool starts its processes at once: --workers 100000 started ~4,100 before the OOM killer ended the plan,
    leaving the rest orphaned."""
    from simulator.cli.options import max_workers

    for command in (["plan", "--gpus", "h100-sxm", "--modes", "agg", "--tps", "1", "--qps", "2", "--no-verify",
                     "--out", str(tmp_path / "plan")], ["capacity", "--num-requests", "20"],
                    ["disagg", "split", "--gpus", "2", "--num-requests", "20"]):
        line = refused(*command, "--workers", "100000")
        assert line.startswith(f"error: --workers: 100,000 processes is beyond {max_workers():,}"), line


def test_a_plan_launches_its_canonical_format_and_refuses_a_dtype_its_dtypes_replace(tmp_path: Path) -> None:
    """`--dtypes fp4` (nvfp4's other spelling) was priced as NVFP4 and launched with no --quantization; --dtype beside
    --dtypes did nothing; a --launch engine other than the one simulated was printed without a word."""
    args = ["plan", "--model", "llama-3.1-8b", "--gpus", "b200", "--modes", "agg", "--tps", "1", "--qps", "2",
            "--no-verify", "--num-requests", "60"]
    code, out = invoke(*args, "--dtypes", "fp4", "--out", str(tmp_path / "fp4"))
    assert code == 0, out
    assert "--quantization modelopt_fp4" in out and "1 unit behind" in out, out
    line = refused(*args, "--dtypes", "bf16", "--dtype", "fp8", "--out", str(tmp_path / "both"))
    assert line.startswith("error: --dtype: --dtypes bf16 gives the weight formats searched"), line
    code, out = invoke(*args, "--launch", "sglang", "--out", str(tmp_path / "sglang"))
    assert code == 0 and "note: the fleet was simulated as vllm" in out, out


def test_a_compare_budget_no_layout_fits_is_refused_on_taus_before_any_search() -> None:
    """`disagg compare --taus 99999999`: one search ran, then the comparison died naming --max-num-batched-tokens."""
    line = refused("disagg", "compare", "--gpus", "2", "--taus", "256,99999999", "--num-requests", "20")
    assert line.startswith("error: --taus: a token budget of 99,999,999 fits no layout (tp=1: "), line


def test_engine_terms_no_step_reads_are_refused_by_predict_tau_and_plan(tmp_path: Path) -> None:
    """predict, tau and plan took --engine override terms their steps never read (a handoff, a TP group's RPC at
    tp 1): identical answers, the label alone changed."""
    line = refused("predict", "--engine", "vllm-2026:handoff_s=5", "--decode", "4", "--context", "100")
    assert "handoff_s is waited out between a disaggregated run's prefill and decode workers, and the batch " \
           "predicted is not disaggregated" in line, line
    assert "rpc_per_seq_s is the RPC" in refused("predict", "--engine", "vllm-2026:rpc_per_seq_s=0.01", "--decode",
                                                 "4", "--context", "100")
    code, out = invoke("predict", "--engine", "vllm-2026:rpc_per_seq_s=0.01", "--tp", "2", "--decode", "4",
                       "--context", "100", "--json")
    assert code == 0, out
    assert refused("tau", "--engine", "vllm-2026:handoff_s=5").endswith("(drop handoff_s)")
    line = refused("plan", "--gpus", "h100-sxm", "--modes", "agg", "--tps", "1", "--qps", "2", "--no-verify",
                   "--engine", "vllm-2026:rpc_per_seq_s=0.01", "--out", str(tmp_path / "plan"))
    assert "and --tps searches only tp 1" in line, line


def test_predict_names_its_flags_in_its_errors() -> None:
    """predict's errors named `prefill:` and `context:`, not the flags typed."""
    assert refused("predict", "--prefill", "x").startswith("error: --prefill: 'x' is not an integer")
    assert refused("predict", "--decode", "2", "--context", "0").startswith("error: --context: ")
    assert refused("predict", "--decode", "2", "--context", "1,2,3").startswith("error: --context: got 3 values")


def test_input_files_that_said_nothing_or_the_wrong_thing(tmp_path: Path) -> None:
    """An empty {} prices table priced nothing, unsaid; a folder given as --prices 'did not exist'; a JSON sweep file
    was refused as invalid TOML (it is read now, repeated keys refused as in every JSON input)."""
    plan = ["plan", "--gpus", "h100-sxm", "--modes", "agg", "--tps", "1", "--qps", "2", "--no-verify",
            "--out", str(tmp_path / "plan")]
    empty = tmp_path / "prices.json"
    empty.write_text("{}")
    assert "and it names none" in refused(*plan, "--prices", str(empty))
    assert refused(*plan, "--prices", str(tmp_path)).startswith(f"error: --prices: {tmp_path} is a folder")
    sweep = tmp_path / "sweep.json"
    sweep.write_text('{"mode": "run", "base": {"num_requests": 8}, "grid": {"seed": [0, 1]}}')
    code, out = invoke("sweep", str(sweep), "--out", str(tmp_path / "sweep"))
    assert code == 0 and len(pd.read_csv(tmp_path / "sweep" / "results.csv")) == 2, out
    sweep.write_text('{"mode": "run", "mode": "capacity"}')
    assert "given twice" in refused("sweep", str(sweep), "--out", str(tmp_path / "again"))


def test_plan_refuses_fast_forward_where_its_layouts_step_one_iteration_at_a_time(tmp_path: Path) -> None:
    line = refused("plan", "--gpus", "h100-sxm", "--modes", "disagg", "--tps", "1", "--qps", "2", "--no-verify",
                   "--no-fast-forward", "--out", str(tmp_path / "plan"))
    assert "--modes disagg searches only disaggregated pools, which step one iteration at a time" in line, line


def test_a_ray_clusters_workers_are_not_held_to_this_machines_cpus() -> None:
    """--workers for plan on a Ray cluster is its tasks in flight, bounded by the cluster's CPUs, not this machine's."""
    from simulator.cli.options import max_workers, parse_workers

    assert parse_workers(str(max_workers() + 1), lambda: 1, remote=True) == max_workers() + 1
    with pytest.raises(ConfigError, match="--workers"):
        parse_workers(str(max_workers() + 1), lambda: 1)
