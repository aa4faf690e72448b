"""Round 17 of the CLI audit: warm-ups that a sweep grid or a users search did not drain, adaptive-speculation
thresholds no step can reach, fixed arrivals beside a concurrency with no rate, a GPU priced twice, and errors that
named a config field or no column instead of what was typed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from test_cli_fuzz_round13 import invoke, refused

SPEC = ["--speculative-config", '{"method": "eagle3", "num_speculative_tokens": 3}', "--acceptance-rate", "0.7"]


def _timeless(value: object) -> object:
    """A JSON answer without its wall-clock times (the only part that differs between identical searches)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k != "wall_s"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _answer(output: str) -> dict:
    """The JSON answer of an output that also holds the notes said beside it (stderr, after the answer)."""
    return json.loads(output[output.index("{"):output.rindex("}") + 1])


def _duration_s(folder: Path) -> float:
    return json.loads((folder / "summary.json").read_text())["duration_s"]


def test_a_sweep_grid_in_vllms_spelling_drains_the_warm_up_as_run_does(tmp_path: Path) -> None:
    """`--grid num_warmups=...` ran each closed-loop point's warm-up beside its measured requests, where
    `run --num-warmups` drains it first (vLLM's phase): the points now match the runs they stand for, and our own
    spelling keeps the steady default in both."""
    code, out = invoke("run", "--no-progress", "--concurrency", "8", "--num-requests", "32", "--num-warmups", "4",
                       "--out", str(tmp_path / "run"))
    assert code == 0, out
    code, out = invoke("sweep", "--grid", "num_warmups=4", "--concurrency", "8", "--num-requests", "32",
                       "--out", str(tmp_path / "sweep"))
    assert code == 0, out
    point = pd.read_csv(tmp_path / "sweep" / "results.csv").iloc[0]
    assert point["warmup_mode"] == "drain"
    assert point["duration_s"] == _duration_s(tmp_path / "run")
    code, out = invoke("sweep", "--grid", "num_warmup=4", "--concurrency", "8", "--num-requests", "32",
                       "--out", str(tmp_path / "ours"))
    assert code == 0, out
    assert "warmup_mode" not in pd.read_csv(tmp_path / "ours" / "results.csv").columns
    # an open loop capped at 8 in flight drains it too, as run does (resolve_aliases: any concurrency)
    capped = ["--concurrency", "8", "--qps", "4", "--num-requests", "32"]
    code, out = invoke("run", "--no-progress", *capped, "--num-warmups", "4", "--out", str(tmp_path / "capped-run"))
    assert code == 0, out
    code, out = invoke("sweep", "--grid", "num_warmups=4", *capped, "--out", str(tmp_path / "capped"))
    assert code == 0, out
    assert pd.read_csv(tmp_path / "capped" / "results.csv").iloc[0]["duration_s"] == _duration_s(tmp_path / "capped-run")


def test_a_users_search_reads_its_warm_up_as_a_closed_loops(tmp_path: Path) -> None:
    """`capacity --users` searches closed loops, but without --concurrency its config had none: --num-warmups ran
    steady (unlike the same search with --concurrency 16, its first trial anyway) and --warmup-mode drain was
    refused for want of a concurrency."""
    args = ["capacity", "--users", "--num-warmups", "8", "--num-requests", "64", "--max-trials", "2", "--json"]
    code, bare = invoke(*args)
    assert code == 0, bare
    code, typed = invoke(*args, "--concurrency", "16")
    assert code == 0, typed
    assert _timeless(_answer(bare)) == _timeless(_answer(typed))
    # a capacity sweep's users points alike
    sweep = tmp_path / "users.toml"
    sweep.write_text('mode = "capacity"\n[base]\nusers = true\nnum_warmups = 8\nnum_requests = 64\n'
                     'max_trials = 2\n[grid]\nseed = [0]\n')
    code, out = invoke("sweep", str(sweep), "--out", str(tmp_path / "users"))
    assert code == 0, out
    point = pd.read_csv(tmp_path / "users" / "results.csv").iloc[0]
    assert point["warmup_mode"] == "drain"
    assert point["output_tok_s_at_capacity"] == _answer(bare)["output_tok_s_at_capacity"]


@pytest.mark.parametrize(("args", "says"), [
    (["--max-num-seqs", "4", "--qps", "20", "--spec-disable-batch-size", "10"],
     "--spec-disable-batch-size: speculation turns off at 10 running requests, but max_num_seqs 4 holds"),
    (["--concurrency", "2", "--spec-reduce-k-batch-size", "2"],
     "--spec-reduce-k-batch-size: k shrinks above 2 running requests, but --concurrency 2 holds every step to 2"),
    (["--scheduler", "vllm-v1", "--qps", "2", "--spec-disable-batch-size", "300"],
     "max_num_seqs 256 (the default) holds every step to 256"),
])
def test_an_adaptive_speculation_threshold_no_step_reaches_is_refused(args: list[str], says: str) -> None:
    """A threshold above the most requests a step can run left every step at full k, the run identical to one
    without the flag."""
    assert says in refused("run", "--no-progress", "--num-requests", "16", *SPEC, *args)


def test_an_adaptive_speculation_threshold_a_step_reaches_still_runs() -> None:
    code, out = invoke("run", "--no-progress", "--num-requests", "16", *SPEC, "--concurrency", "8",
                       "--spec-disable-batch-size", "8")
    assert code == 0, out
    # a users search raises its concurrency trial by trial: its first users bound no threshold
    code, out = invoke("capacity", "--users", *SPEC, "--concurrency", "16", "--spec-disable-batch-size", "20",
                       "--num-requests", "48", "--max-trials", "2")
    assert code == 0, out


def test_fixed_arrivals_in_a_sweep_file_beside_a_concurrency_need_a_rate(tmp_path: Path) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text('mode = "run"\n[base]\nconcurrency = 8\narrival = "fixed"\nnum_requests = 8\n'
                     '[grid]\nseed = [0, 1]\n')
    assert "fixed spaces arrivals at a rate, but no --qps" in refused("sweep", str(sweep), "--out",
                                                                      str(tmp_path / "out"))


def test_a_gpu_priced_twice_on_the_command_line_is_refused() -> None:
    """The last --price of a GPU won, unsaid; a --prices file pricing a GPU twice was already refused."""
    line = refused("plan", "--gpus", "a100-80gb", "--modes", "agg", "--tps", "1", "--budgets", "2048", "--seqs",
                   "128", "--no-verify", "--num-requests", "64", "--qps", "2", "--price", "a100-80gb=1",
                   "--price", "a100-80gb=5")
    assert "--price: a100-80gb is priced twice: 'a100-80gb=1' and 'a100-80gb=5'" in line


@pytest.mark.parametrize(("row", "says"), [
    ("1,1,512,0,0,0.05,", "prefill_context is empty"),
    ("1,1,512,0,0,abc,0", "measured_s is 'abc' (non-numeric)"),
    ("1,1,512,0,-5,0.05,0", "decode_context is -5 (negative)"),
])
def test_an_unusable_iteration_table_cell_is_named(tmp_path: Path, row: str, says: str) -> None:
    """One message covered an empty optional cell, a word and a negative number alike, naming no column."""
    table = tmp_path / "t.csv"
    table.write_text("tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s,prefill_context\n"
                     f"{row}\n1,0,0,8,600,0.02,0\n")
    line = refused("calibrate-engine", "--table", str(table), "--model", "llama-2-7b", "--gpu", "a100-80gb",
                   "--out", str(tmp_path / "e.json"))
    assert line.startswith("error: table: row on line 2: ") and says in line, line


def test_errors_name_what_was_typed() -> None:
    assert refused("run", "--no-progress", *SPEC[:2], "--acceptance-rate", "1.2").startswith(
        "error: --acceptance-rate: rates must lie in [0, 1], got 1.2")
    line = refused("run", "--no-progress", "--engine", "vllm-2026:cpu_iteration_s=0.001:cpu_per_seq_s=0.0001")
    assert "overrides are separated by commas, not colons (e.g. vllm-2026:cpu_iteration_s=0.001," \
           "cpu_per_seq_s=0.0001)" in line


def test_plot_sweep_says_when_its_points_lack_the_latency_columns(tmp_path: Path) -> None:
    """Points written without the metrics a latency plot draws (another version's) ended in a KeyError."""
    code, out = invoke("sweep", "--grid", "qps=1,2", "--num-requests", "16", "--out", str(tmp_path / "s"))
    assert code == 0, out
    for path in (tmp_path / "s" / "points").glob("*.json"):
        point = json.loads(path.read_text())
        point["metrics"] = {k: v for k, v in point["metrics"].items() if not k.startswith(("tbt", "ttft"))}
        path.write_text(json.dumps(point))
    assert "record none of tbt_s_p99, ttft_s_p50" in refused("plot", "sweep", str(tmp_path / "s"),
                                                            "--out", str(tmp_path / "p"))


def test_a_users_search_gives_its_notes_beside_the_json_answer() -> None:
    """--json printed the answer alone: the note that a trial's few requests a user leave the first wave in the
    figures (and the other answer notes) went unsaid there."""
    code, out = invoke("capacity", "--users", "--num-requests", "48", "--max-trials", "2", "--json")
    assert code == 0 and "note: 48 requests a trial are" in out, out


def test_a_report_is_not_written_among_another_folders_files(tmp_path: Path) -> None:
    """validate (and fidelity) --out a run's folder wrote the report among the run's files."""
    code, out = invoke("run", "--no-progress", "--num-requests", "4", "--out", str(tmp_path / "run"))
    assert code == 0, out
    line = refused("validate", "--out", str(tmp_path / "run"))
    assert "holds other files (config.json," in line and "no README of this report" in line


def test_a_profile_names_its_config_json_by_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative --model config.json was recorded as given, so the table named a file no other folder has."""
    from profiler.runner import ProfileConfig

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
        "num_key_value_heads": 8, "intermediate_size": 1024, "vocab_size": 1000, "max_position_embeddings": 2048}))
    monkeypatch.chdir(tmp_path)
    config = ProfileConfig(model="m/config.json", out=Path("p"))
    assert config.model == str(tmp_path / "m" / "config.json") and config.to_dict()["model"] == config.model


@pytest.mark.parametrize("link", ["-5GB/s", "1e9GB/s"])
def test_a_kv_link_number_the_bandwidth_form_cannot_read_is_said(link: str) -> None:
    line = refused("run", "--no-progress", "--num-requests", "4", "--prefill-pool", "1x", "--decode-pool", "1x",
                   "--kv-link", link)
    assert f"'{link}' is no bandwidth this reads: digits with an optional fraction, then GB/s" in line


def test_the_first_token_point_takes_any_case() -> None:
    code, out = invoke("run", "--no-progress", "--num-requests", "4", "--prefill-pool", "1x", "--decode-pool", "1x",
                       "--first-token-at", "Prefill")
    assert code == 0, out


def test_a_users_search_takes_a_typed_warm_up_mode_without_a_concurrency(tmp_path: Path) -> None:
    """--warmup-mode drain beside --users was refused for want of a concurrency (the search's trials have one), and
    a sweep's users points asked for users above their max_users."""
    args = ["capacity", "--users", "--num-requests", "64", "--max-trials", "2", "--json"]
    code, typed = invoke(*args, "--num-warmup", "8", "--warmup-mode", "drain")
    assert code == 0, typed
    code, vllm = invoke(*args, "--num-warmups", "8")
    assert code == 0 and _timeless(_answer(typed)) == _timeless(_answer(vllm)), vllm
    assert "no warm-up is given" in refused("capacity", "--users", "--warmup-mode", "drain", "--num-requests", "64")
    sweep = tmp_path / "few.toml"
    sweep.write_text('mode = "capacity"\n[base]\nusers = true\nnum_warmups = 4\nmax_users = 8\n'
                     'num_requests = 64\nmax_trials = 2\n[grid]\nseed = [0]\n')
    code, out = invoke("sweep", str(sweep), "--out", str(tmp_path / "few"))
    assert code == 0, out


def test_a_report_folder_may_hold_hidden_files_and_what_an_interrupted_report_left(tmp_path: Path) -> None:
    from simulator.util.paths import check_report_dir

    for name, files in (("hidden", (".gitkeep",)), ("left", ("fidelity.csv", "ratio_x.png"))):
        folder = tmp_path / name
        folder.mkdir()
        for f in files:
            (folder / f).write_text("x")
        assert check_report_dir(folder, "# title") == folder

