"""Profiler harness on CPU: schema, shapes, grids, timing, resume, bad input.

Runs on tiny models (a config.json written per test) so the file stays well under a
minute on a shared 2-core machine; communication uses 2 real gloo processes once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from profiler.grid import Point, decode_grid, token_grid
from profiler.runner import ProfileConfig, resolve_ops
from profiler.schema import ALL_OPS, COLUMNS, COMM_OPS, KEY_COLUMNS, METADATA_FILE, OP_FAMILIES, TABLE_FILE, read_table
from profiler.shapes import ShardedShapes
from simulator.config.catalog import get_model
from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SIMULATE = [sys.executable, "-c", "from simulator.cli import main; main()"]

torch = pytest.importorskip("torch")


def tiny_config(tmp_path: Path, name: str = "tiny-test", **overrides: int) -> Path:
    cfg = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
           "intermediate_size": 512, "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 1024,
           "hidden_act": "silu", "_name_or_path": name, **overrides}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SIMULATE, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


# -- shapes and grids ------------------------------------------------------------------------
def test_sharded_shapes_follow_megatron_sharding() -> None:
    m = get_model("tiny-llama-1b")  # 32 heads, 4 KV heads, head_dim 64, ffn 5632
    s = ShardedShapes(m, 2)
    assert s.linear_shape("qkv_proj") == (2048, (16 + 2 * 2) * 64)
    assert s.linear_shape("attn_out_proj") == (16 * 64, 2048)
    assert s.linear_shape("mlp_up_gate") == (2048, 2 * 5632 // 2)
    assert s.linear_shape("mlp_down") == (5632 // 2, 2048)
    assert s.linear_shape("lm_head") == (2048, 16000)
    # More ranks than KV heads: each rank keeps one replicated KV head.
    s8 = ShardedShapes(m, 8)
    assert s8.kv_heads == 1 and s8.qkv_width == (4 + 2) * 64


@pytest.mark.parametrize("tp", [3, 5, 64])
def test_tp_not_dividing_heads_is_a_config_error(tp: int) -> None:
    with pytest.raises(ConfigError, match="tp"):
        ShardedShapes(get_model("tiny-llama-1b"), tp)


def test_hf_config_path_is_parsed(tmp_path: Path) -> None:
    path = tiny_config(tmp_path, num_key_value_heads=1)
    m = ProfileConfig(model=str(path), out=tmp_path / "out").model_spec
    assert (m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_size, m.vocab_size, m.max_model_len) == \
        (256, 4, 1, 512, 1000, 1024)
    # The simulator's naming: the path as given is the name (so `simulate fit` finds it again).
    assert m.gated_mlp and m.name == str(path) and m.hf_id == "tiny-test"
    # A folder holding config.json works too.
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(path.read_text())
    assert ProfileConfig(model=str(tmp_path / "m"), out=tmp_path / "out").model_spec.hidden_size == 256


def test_bad_hf_config_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64}))
    with pytest.raises(ConfigError, match="num_attention_heads"):
        ProfileConfig(model=str(bad), out=tmp_path / "out")
    bad.write_text(json.dumps({"hidden_size": 64}))  # no model_type: refused, not guessed to be a Llama
    with pytest.raises(ConfigError, match="model_type"):
        ProfileConfig(model=str(bad), out=tmp_path / "out")
    with pytest.raises(ConfigError, match="no config file"):
        ProfileConfig(model=str(tmp_path / "missing.json"), out=tmp_path / "out")


def test_token_grid_is_dense_then_geometric_up_to_max() -> None:
    grid = token_grid(16384)
    assert grid[:8] == list(range(1, 9))
    assert grid == sorted(set(grid)) and grid[-1] == 16384
    ratios = np.diff(grid[grid.index(512):]) / np.array(grid[grid.index(512):-1])
    assert ratios.max() < 0.25  # geometric steps of ~2**(1/4), no big holes
    assert token_grid(100)[-1] == 100


@pytest.mark.parametrize("max_tokens", [8, 16, 64, 128, 256, 2048])
def test_quick_grids_give_fit_enough_points(max_tokens: int) -> None:
    from profiler.grid import QUICK_MIN_POINTS, comm_token_grid, prefill_grid, quick_token_grid
    from simulator.calibrate.fit import MIN_POINTS

    assert QUICK_MIN_POINTS >= MIN_POINTS
    grid = quick_token_grid(max_tokens)
    assert grid == token_grid(max_tokens, quick=True) and len(set(grid)) == MIN_POINTS
    assert grid[0] == 1 and grid[-1] == max_tokens and grid == sorted(grid)
    assert len(set(comm_token_grid(max_tokens, quick=True))) >= MIN_POINTS
    assert len(set(prefill_grid(max_tokens, 2048, quick=True))) >= MIN_POINTS
    assert len({(len(x), round(sum(x) / len(x))) for x in decode_grid(2048, np.random.default_rng(0), quick=True)}
               ) >= MIN_POINTS


def test_cpu_profiles_default_to_float32_and_cuda_to_bf16(tmp_path: Path) -> None:
    assert ProfileConfig(model="tiny-llama-1b", out=tmp_path, device="cpu").dtype == "float32"
    assert ProfileConfig(model="tiny-llama-1b", out=tmp_path, device="cuda").dtype == "bfloat16"
    assert ProfileConfig(model="tiny-llama-1b", out=tmp_path, device="cpu", dtype="bfloat16").dtype == "bfloat16"


def test_decode_grid_is_seeded_and_has_mixed_batches() -> None:
    a = decode_grid(4096, np.random.default_rng(7), quick=True)
    b = decode_grid(4096, np.random.default_rng(7), quick=True)
    c = decode_grid(4096, np.random.default_rng(8), quick=True)
    assert a == b and a != c
    mixed = [lens for lens in a if len(set(lens)) > 1]
    assert mixed and all(1 <= x <= 4096 for lens in mixed for x in lens)


def test_resolve_ops_accepts_families_and_names() -> None:
    assert resolve_ops(["comm"]) == OP_FAMILIES["comm"]
    assert resolve_ops(["linear,attn_decode"]) == (*OP_FAMILIES["linear"], "attn_decode")
    assert resolve_ops(None) == ALL_OPS
    with pytest.raises(ConfigError, match="unknown op"):
        resolve_ops(["linear", "matmul"])


def test_point_columns_describe_mixed_decode_batches() -> None:
    cols = Point("attn_decode", tp=1, num_tokens=3, batch_size=3, context_lens=(10, 20, 60)).shape_columns()
    assert (cols["context_len"], cols["context_len_max"], cols["kv_tokens"], cols["kv_sq_sum"]) == \
        (30, 60, 90, 100 + 400 + 3600)
    pre = Point("attn_prefill", tp=1, num_tokens=16, batch_size=1, chunk_size=16, kv_context=100).shape_columns()
    assert pre["context_len"] == 116


# -- timing ---------------------------------------------------------------------------------
def test_bench_fixed_repeats_and_percentile_order() -> None:
    from profiler.timing import BenchSettings, bench

    calls = []
    t = bench(lambda: calls.append(1), settings=BenchSettings(warmup=2), repeats=7)
    assert t.repeats == 7 and len(t.samples_s) == 7 and len(calls) == 2 + 7
    assert 0 < t.p20_s <= t.median_s <= t.p80_s


def test_large_gemm_time_grows_with_tokens() -> None:
    from profiler.ops import make_case
    from profiler.timing import BenchSettings, bench

    torch.set_num_threads(1)
    spec = get_model("llama-2-7b")
    shapes = ShardedShapes(spec, 8)  # mlp_up_gate: [T, 4096] x [4096, 2752]
    settings = BenchSettings(warmup=1, min_repeats=3, max_repeats=5, target_s=0.05)
    times = []
    for tokens in (32, 128, 512):
        case = make_case(Point("mlp_up_gate", tp=8, num_tokens=tokens), shapes, "float32", "cpu")
        times.append(bench(case.fn, settings=settings).median_s)
    assert times[0] < times[1] < times[2], times
    assert times[2] > 2 * times[0]


# -- full runs -------------------------------------------------------------------------------
def test_quick_run_covers_every_op_family_with_the_schema(tmp_path: Path) -> None:
    path = tiny_config(tmp_path)
    cfg = ProfileConfig(model=str(path), out=tmp_path / "out", quick=True, max_tokens=64, num_threads=1)
    summary = run_profile_quiet(cfg)
    table = summary.table
    assert tuple(table.columns) == COLUMNS
    assert set(table["op"]) == set(ALL_OPS)
    assert not table.duplicated(list(KEY_COLUMNS)).any()
    assert (table["median_s"] > 0).all() and (table["p20_s"] <= table["median_s"]).all()
    assert (table["median_s"] <= table["p80_s"]).all() and (table["repeats"] >= 1).all()
    assert set(table["model"]) == {str(path)} and set(table["device"]) == {"cpu"}
    comm = table[table["op"].isin(COMM_OPS)]
    assert set(comm["world_size"]) == {2} and set(comm["backend"]) == {"gloo"}
    assert (comm["message_bytes"] == comm["num_tokens"] * 256 * 4).all()  # float32: the CPU default
    assert set(table["dtype"]) == {"float32"}
    compute = table[~table["op"].isin(COMM_OPS)]
    assert (compute["tp"] == 1).all()
    np.testing.assert_allclose(compute["achieved_flops_per_s"], compute["flops"] / compute["median_s"])
    decode = table[table["op"] == "attn_decode"]
    assert (decode["context_len_max"] > decode["context_len"]).any()  # mixed batches are there
    meta = json.loads((tmp_path / "out" / METADATA_FILE).read_text())
    assert meta["complete"] is True and meta["model"] == str(path)
    env = meta["environment"]
    for key in ("torch_version", "device_name", "device_count", "date", "git_revision", "command_line",
                "num_threads", "driver_version", "cuda_version"):
        assert key in env
    # The CSV on disk reads back identically.
    pd.testing.assert_frame_equal(read_table(tmp_path / "out" / TABLE_FILE), table)


def test_fp8_profile_times_fp8_linear_layers_beside_bf16_ops(tmp_path: Path) -> None:
    """``--dtype fp8`` is an FP8 deployment: FP8 GEMMs (1-byte weights and inputs, bf16 out), the rest
    bf16; a second fp8 run resumes it, and a bf16 run adds bf16 GEMMs beside (their dtype keys them)."""
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", quick=True, max_tokens=16,
                        ops=("qkv_proj", "rotary"), num_threads=1, dtype="fp8")
    table = run_profile_quiet(cfg).table
    assert dict(table.groupby("op")["dtype"].unique().map(tuple)) == {"qkv_proj": ("fp8",), "rotary": ("bfloat16",)}
    gemm = table[table["op"] == "qkv_proj"]
    k, n = 256, (4 + 2 * 2) * 64  # hidden; (heads + 2 KV heads) x head_dim
    t = gemm["num_tokens"].to_numpy()
    np.testing.assert_allclose(gemm["bytes"], k * n + t * k + 2 * t * n)
    assert run_profile_quiet(cfg).skipped == len(table)
    both = run_profile_quiet(ProfileConfig(model=cfg.model, out=cfg.out, quick=True, max_tokens=16,
                                           ops=("qkv_proj",), num_threads=1, dtype="bfloat16")).table
    assert set(both.loc[both["op"] == "qkv_proj", "dtype"]) == {"fp8", "bfloat16"}


def run_profile_quiet(cfg: ProfileConfig, **kw):  # noqa: ANN201
    from profiler.runner import run_profile

    return run_profile(cfg, progress=False, **kw)


def test_interrupted_run_resumes_without_remeasuring(tmp_path: Path) -> None:
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", quick=True, max_tokens=64,
                        ops=("linear", "elementwise"), num_threads=1)

    def interrupt_after_five(i: int, row: dict) -> None:
        if i == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_profile_quiet(cfg, on_point=interrupt_after_five)
    partial = read_table(tmp_path / "out" / TABLE_FILE)
    assert len(partial) == 5
    assert json.loads((tmp_path / "out" / METADATA_FILE).read_text())["complete"] is False
    assert not list((tmp_path / "out").glob(".*tmp*"))  # no temporary files left behind

    resumed = run_profile_quiet(cfg)
    assert resumed.skipped == 5 and resumed.measured == len(resumed.table) - 5
    kept = resumed.table.merge(partial, on=list(KEY_COLUMNS), suffixes=("", "_old"))
    assert len(kept) == 5 and (kept["median_s"] == kept["median_s_old"]).all()
    assert json.loads((tmp_path / "out" / METADATA_FILE).read_text())["complete"] is True

    again = run_profile_quiet(cfg)
    assert again.measured == 0 and len(again.table) == len(resumed.table)


def test_folder_with_another_models_table_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=out, quick=True, max_tokens=8, ops=("mlp_act",),
                        num_threads=1)
    before = run_profile_quiet(cfg).table
    other = ProfileConfig(model=str(tiny_config(tmp_path, name="other-model")), out=out, quick=True, max_tokens=8,
                          ops=("mlp_act",), num_threads=1)
    with pytest.raises(ConfigError, match="holds a profile of .*tiny-test.json"):
        run_profile_quiet(other)
    pd.testing.assert_frame_equal(read_table(out / TABLE_FILE), before)


def test_cuda_requested_without_cuda_is_refused(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    cfg = ProfileConfig(model="tiny-llama-1b", out=tmp_path / "out", device="cuda", quick=True)
    with pytest.raises(ConfigError, match="CUDA requested"):
        run_profile_quiet(cfg)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kwargs, field", [
    ({"model": "no-such-model"}, "model"),
    ({"model": "tiny-llama-1b", "tp": (3,)}, "tp"),
    ({"model": "tiny-llama-1b", "ops": ("gemm",)}, "ops"),
    ({"model": "tiny-llama-1b", "device": "tpu"}, "device"),
    ({"model": "tiny-llama-1b", "dtype": "int8"}, "dtype"),
    ({"model": "tiny-llama-1b", "max_tokens": 0}, "max_tokens"),
    ({"model": "tiny-llama-1b", "world_sizes": (1,)}, "world_sizes"),
    ({"model": "tiny-llama-1b", "l2_flush": "read"}, "--l2-flush"),  # the CPU timer has no L2 flush
    ({"model": "tiny-llama-1b", "device": "cuda", "l2_flush": "sometimes"}, "--l2-flush"),
])
def test_bad_config_is_a_one_line_config_error(tmp_path: Path, kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        ProfileConfig(out=tmp_path, **kwargs)
    assert str(err.value).startswith(field) and "\n" not in str(err.value)


# -- command line ----------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["--model", "no-such-model"], "unknown model"),
    (["--model", "tiny-llama-1b", "--tp", "3"], "does not divide"),
    (["--model", "tiny-llama-1b", "--ops", "matmul"], "unknown op"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    res = run_cli("profile", "--quick", "--out", str(tmp_path / "o"), *args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in res.stderr


def test_cli_without_torch_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from simulator.cli import app
    from simulator.cli import profile as profile_cli

    monkeypatch.setattr(profile_cli, "torch_available", lambda: False)
    res = CliRunner().invoke(app, ["profile", "--model", "tiny-llama-1b", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "install the profile extra: pip install 'servesim[profile]'" in res.output
    assert "torch==2.13.0" in res.output and "CPU" in res.output  # how to get the CPU build
    assert "://" not in res.output  # no registry host named


def test_cli_writes_table_and_resumes(tmp_path: Path) -> None:
    args = ["profile", "--model", str(tiny_config(tmp_path)), "--quick", "--max-tokens", "8", "--ops", "linear",
            "--threads", "1", "--no-progress", "--out", str(tmp_path / "o")]
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    n = len(read_table(tmp_path / "o" / TABLE_FILE))
    assert n == len(OP_FAMILIES["linear"]) * 8  # quick: tokens 1..8, enough for `simulate fit`
    second = run_cli(*args)
    assert second.returncode == 0 and f"0 measured, {n} already there" in " ".join(second.stdout.split())
    meta = json.loads((tmp_path / "o" / "metadata.json").read_text())
    assert meta["config"]["dtype"] == "float32" and meta["earlier_configs"] == []  # the same run again
    # resumed with another dtype: the table holds both dtypes' rows, and its metadata both runs' configs
    third = run_cli(*args, "--dtype", "bfloat16")
    assert third.returncode == 0, third.stderr
    assert set(read_table(tmp_path / "o" / TABLE_FILE)["dtype"]) == {"float32", "bfloat16"}
    meta = json.loads((tmp_path / "o" / "metadata.json").read_text())
    assert meta["config"]["dtype"] == "bfloat16" and [c["dtype"] for c in meta["earlier_configs"]] == ["float32"]


def test_profiler_imports_without_torch() -> None:
    code = ("import sys, profiler, profiler.schema, profiler.grid, profiler.shapes, profiler.work, "
            "profiler.runner, profiler.vidur_import, profiler.timing, profiler.ops, profiler.comm, "
            "profiler.device, simulator.cli; profiler.COLUMNS; "
            "assert 'torch' not in sys.modules, 'torch imported eagerly'")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert res.returncode == 0, res.stderr


def test_cli_profile_of_a_config_json_fits_without_naming_the_model(tmp_path: Path) -> None:
    # The table records the spec's name (the path as given), which `simulate fit` resolves with the
    # same reader; the profiler's old parser wrote `_name_or_path`, which fit could not find.
    path = str(tiny_config(tmp_path))
    out = tmp_path / "o"
    prof = run_cli("profile", "--model", path, "--quick", "--max-tokens", "8", "--ops", "linear", "--threads", "1",
                   "--no-progress", "--out", str(out))
    assert prof.returncode == 0, prof.stderr
    fit = run_cli("fit", "--profile", str(out / TABLE_FILE), "--out", str(tmp_path / "fit.json"))
    assert fit.returncode == 0, fit.stderr
    artifact = json.loads((tmp_path / "fit.json").read_text())
    assert artifact["model"] == path and "qkv_proj" in artifact["curves"]


def test_piped_progress_is_plain_lines(tmp_path: Path, capsys, monkeypatch) -> None:  # noqa: ANN001
    """Without a terminal (a log, CI, nohup) rich's bar printed nothing until the end: the profile says where it
    is in plain lines instead (points done of the total, with an ETA), every PLAIN_PROGRESS_EVERY_S."""
    from profiler import runner

    monkeypatch.setattr(runner, "PLAIN_PROGRESS_EVERY_S", 0.0)  # a line a point
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", quick=True, max_tokens=16,
                        ops=("norms", "rotary"), num_threads=1)
    summary = runner.run_profile(cfg, progress=True)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "profiling: " in ln]
    total = len(summary.table)
    assert len(lines) >= total and f"profiling: {total}/{total} (100%)" in lines[-1]
    run_profile_quiet(ProfileConfig(model=cfg.model, out=tmp_path / "again", quick=True, max_tokens=16, ops=("norms",),
                                    num_threads=1))
    assert "profiling" not in capsys.readouterr().err  # --no-progress: silent


def test_a_cpu_profile_resumed_with_other_threads_is_refused(tmp_path: Path) -> None:
    """--threads 2 into a 1-thread folder reused its timings as if measured now ('0 measured, 128 already there')."""
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", quick=True, max_tokens=16,
                        ops=("rotary",), num_threads=1)
    run_profile_quiet(cfg)
    with pytest.raises(ConfigError, match="was measured with --threads 1, not 2"):
        run_profile_quiet(ProfileConfig(model=cfg.model, out=cfg.out, quick=True, max_tokens=16, ops=("rotary",),
                                        num_threads=2))
    assert run_profile_quiet(cfg).skipped > 0  # the same threads resume it


def test_fit_says_when_a_profile_is_unfinished_or_an_op_fits_its_held_out_rows_badly(tmp_path: Path) -> None:
    """`simulate fit` fitted a profile cut short (metadata complete: false) without a word, and reported a 78%
    held-out error only in a table cell (a quick grid's three batch sizes cannot shape decode attention)."""
    import numpy as np
    import pandas as pd

    out = tmp_path / "o"
    prof = run_cli("profile", "--model", str(tiny_config(tmp_path)), "--quick", "--max-tokens", "8", "--ops", "linear",
                   "--threads", "1", "--no-progress", "--out", str(out))
    assert prof.returncode == 0, prof.stderr
    meta = json.loads((out / "metadata.json").read_text())
    (out / "metadata.json").write_text(json.dumps({**meta, "complete": False}))
    table = pd.read_csv(out / TABLE_FILE)
    noisy = table["op"] == "lm_head"
    table.loc[noisy, "median_s"] *= np.resize([0.1, 10.0], int(noisy.sum()))  # no curve follows a 100x zigzag
    table.to_csv(out / TABLE_FILE, index=False)
    fit = run_cli("fit", "--profile", str(out), "--out", str(tmp_path / "fit.json"))
    assert fit.returncode == 0, fit.stderr
    said = " ".join((fit.stdout + fit.stderr).split())
    assert "is an unfinished profile" in said
    assert "held-out median error above 25%:" in said and "lm_head" in said.split("above 25%:")[1]


@pytest.mark.parametrize(("device_name", "catalog"), [
    ("NVIDIA B200", "b200"), ("NVIDIA GB200", "gb200"), ("NVIDIA H20", "h20"), ("NVIDIA H200", "h200"),
    ("NVIDIA L4", "l4"), ("NVIDIA L40", "l40"), ("NVIDIA L40S", "l40s"), ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("NVIDIA RTX A6000", "rtx-a6000"), ("AMD Instinct MI300X", "mi300x"),
    ("NVIDIA GH200 480GB", None), ("NVIDIA H100 NVL", None),  # once read as an H200 and an H100 SXM
    ("NVIDIA H200 NVL", None), ("NVIDIA RTX A4000", None), ("NVIDIA A40", "a40"),  # an A4000 was read as an A40
])
def test_a_profiled_gpu_is_the_catalog_gpu_it_is(device_name: str, catalog: str | None) -> None:
    """Profiles of catalog GPUs the detector did not know (B200, L4, RTX 4090, MI300X ...) could not be fitted;
    a GH200 matched "h200" and an H100 NVL "h100"."""
    from profiler.device import catalog_gpu_for

    found = catalog_gpu_for(device_name)
    assert (found.name if found is not None else None) == catalog


def test_a_profile_resumed_with_other_timing_settings_is_refused(tmp_path: Path) -> None:
    """A --quick table resumed without --quick (or the reverse; --cuda-graphs on and off likewise) kept its rows,
    timed the rest otherwise and rewrote metadata.json as if every row had the new settings."""
    from profiler.runner import check_resume_settings

    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", quick=True, max_tokens=16,
                        ops=("rotary",), num_threads=1)
    run_profile_quiet(cfg)
    with pytest.raises(ConfigError, match=r"^--quick: .* was measured with --quick, this run has no --quick: one table "
                                          r"would mix two timing settings \(pass --quick to resume it"):
        run_profile_quiet(ProfileConfig(model=cfg.model, out=cfg.out, max_tokens=16, ops=("rotary",), num_threads=1))
    assert run_profile_quiet(cfg).skipped > 0  # the same settings resume it
    graphs = ProfileConfig(model=cfg.model, out=cfg.out, device="cuda", cuda_graphs=True, ops=("rotary",))
    with pytest.raises(ConfigError, match=r"^--cuda-graphs: .* was measured with no --cuda-graphs, this run has "
                                          r"--cuda-graphs: .*\(drop --cuda-graphs to resume it"):
        check_resume_settings(graphs, {"quick": False, "cuda_graphs": False})
    check_resume_settings(graphs, {"num_threads": 1})  # metadata without the settings: nothing to hold it to


def test_a_cpu_profile_records_no_l2_flush(tmp_path: Path) -> None:
    """metadata.json's bench settings said l2_flush "read" for a CPU table, though only the CUDA timer flushes."""
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", quick=True, max_tokens=4,
                        ops=("rotary",), num_threads=1)
    run_profile_quiet(cfg)
    meta = json.loads((cfg.out / METADATA_FILE).read_text())
    assert meta["bench"]["l2_flush"] is None and meta["config"]["l2_flush"] is None
