"""Scoring the cost models against a measured profile (``simulate fidelity --profile``).

The measured tables are the H200 profiles committed in ``results/h200/`` (real kernels, torch 2.11,
CUDA 13.0), so these tests need no data folder; the kernel-table columns need AIConfigurator's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.calibrate import profile_fidelity as pf
from simulator.config.catalog import get_model
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel.base import BatchShape
from simulator.costmodel.calibration import calibration_for
from simulator.costmodel.roofline import RooflineCostModel

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "results" / "h200"
LLAMA8B = H200 / "llama-3.1-8b_tp1"


@pytest.fixture(scope="module")
def points_8b() -> pd.DataFrame:
    points, envs = pf.score_profiles([LLAMA8B], tables=False)
    env = envs["llama-3.1-8b_tp1"]
    assert env["device_name"] == "NVIDIA H200" and env["l2_flush"] == "read" and env["torch_version"]
    return points


def test_learned_model_generalises_on_the_measured_h200_gemms(points_8b: pd.DataFrame) -> None:
    summary = pf.summarize(points_8b)
    learned = summary[(summary["method"] == "learned") & summary["op"].isin(pf.LINEAR)]
    assert set(learned["op"]) == set(pf.LINEAR)
    # Held-out rows of smooth cuBLAS curves: the median error of the learned curve stays small.
    worst = learned.groupby("op").apply(lambda g: np.average(g["median_ape"], weights=g["num_points"]),
                                        include_groups=False)
    assert (worst < 0.06).all(), worst


def test_lm_head_is_scored_as_the_gemm_the_profiler_times(points_8b: pd.DataFrame) -> None:
    spec = get_model("llama-3.1-8b")
    rf = RooflineCostModel(ReplicaConfig(model=spec.name, gpu="h200", tp=1), calibration_for("h200", "2023"),
                           table_tokens=1)
    rows = points_8b[(points_8b["op"] == "lm_head") & (points_8b["method"] == "roofline 2023")]
    tokens = rows["x"].to_numpy()
    gemm = rf.gemm(tokens, spec.hidden_size, spec.vocab_size)
    assert np.allclose(rows["predicted_s"], gemm)
    assert (rf.lm_head_time(tokens) > gemm).all()  # the step's LM head also gathers logits and norms


def test_every_row_is_priced_by_each_roofline_and_a_fifth_by_the_learned_model(points_8b: pd.DataFrame) -> None:
    table = pd.read_csv(LLAMA8B / "profile.csv")
    gemm = table[table["op"] == "qkv_proj"]
    for method in ("roofline today (vllm)", "roofline 2023"):
        scored = points_8b[(points_8b["op"] == "qkv_proj") & (points_8b["method"] == method)]
        assert len(scored) == len(gemm) and np.isfinite(scored["predicted_s"]).all()
    learned = points_8b[(points_8b["op"] == "qkv_proj") & (points_8b["method"] == "learned")]
    assert 0 < len(learned) <= 0.25 * len(gemm)
    decode = table[table["op"] == "attn_decode"]
    mixed = decode["context_len_max"] > decode["context_len"]
    scored = points_8b[points_8b["method"] == "roofline 2023"]
    assert (scored["op"] == pf.PADDED).sum() == mixed.sum() and (scored["op"] == "attn_decode").sum() == (~mixed).sum()


def _decode_row(lens: tuple[int, ...]) -> dict:
    return {"model": "llama-3.1-8b", "op": "attn_decode", "tp": 1, "device": "h200", "backend": "sdpa",
            "num_tokens": len(lens), "batch_size": len(lens), "context_len": round(sum(lens) / len(lens)),
            "context_len_max": max(lens), "kv_tokens": sum(lens), "kv_sq_sum": sum(x * x for x in lens),
            "chunk_size": 1, "kv_context": round(sum(lens) / len(lens)), "median_s": 1e-4}  # as the profiler writes


def test_a_padded_sdpa_batch_is_priced_at_its_longest_sequence() -> None:
    lens = [(512,) * 4, (128, 256, 1024, 4096)] * 6  # enough rows for the learned fit's split
    table = pd.DataFrame([_decode_row(x) for x in lens])
    points = pf.score_table(table, "hand", "h200", tables=False)
    rf = RooflineCostModel(ReplicaConfig(model="llama-3.1-8b", gpu="h200", tp=1), calibration_for("h200", "2023"),
                           table_tokens=1)
    padded = points[(points["op"] == pf.PADDED) & (points["method"] == "roofline 2023")]
    shape = BatchShape()
    for _ in range(4):
        shape.add_decode(4096)
    assert len(padded) == 6 and np.allclose(padded["predicted_s"], rf.attention_decode(shape))


def test_labels_tell_same_named_folders_apart(tmp_path: Path) -> None:
    a, b = tmp_path / "p" / "x" / "profile.csv", tmp_path / "q" / "x" / "profile.csv"
    assert pf.labels([a, b]) == ["p/x", "q/x"]
    assert pf.labels([a]) == ["x"]


def test_kernel_tables_agree_with_measured_cublas_gemms(aic: Path) -> None:
    """Two independent measurements of the same H200 GEMMs: SGLang's collector in AIConfigurator's
    tables and this profiler's (read flush). Their medians agree within 10% per op and size class."""
    points, _ = pf.score_profiles([LLAMA8B], backends=("sglang",))
    summary = pf.summarize(points)
    gemms = summary[(summary["method"] == "tables sglang") & summary["op"].isin(pf.LINEAR)]
    assert len(gemms) == 2 * len(pf.LINEAR)
    assert gemms["median_ratio"].between(0.85, 1.1).all(), gemms


def test_cli_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "rep"
    res = subprocess.run([sys.executable, "-m", "simulator", "fidelity", "--profile", str(LLAMA8B), "--out", str(out)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "no generation the today constants" not in res.stderr  # (an H200 has them: a CPU profile is told so)
    summary = pd.read_csv(out / "fidelity.csv")
    assert {"learned", "roofline today (vllm)", "roofline 2023"} <= set(summary["method"])
    readme = (out / "README.md").read_text()
    assert "NVIDIA H200" in readme and "2.11.0+cu130" in readme and (out / "ratio_llama-3.1-8b_tp1_tp1.png").exists()


def test_fit_leaves_padded_sdpa_decode_batches_out() -> None:
    """A mixed decode batch timed with SDPA is padded to its longest sequence, which a paged kernel
    never is: the decode fit must not learn from those rows (here: whatever they say, same model)."""
    from simulator.calibrate.fit import fit_tables, padded_decode

    table = pd.read_csv(LLAMA8B / "profile.csv")
    mask = padded_decode(table)
    decode = table["op"] == "attn_decode"
    assert mask.sum() == (decode & (table["context_len_max"] > table["context_len"])).sum() > 0
    corrupted = table.copy()
    corrupted.loc[mask, "median_s"] *= 100
    ops = table[table["op"].isin(("attn_decode", "qkv_proj"))]
    a = fit_tables(ops)["attn_decode"]
    b = fit_tables(corrupted[corrupted["op"].isin(("attn_decode", "qkv_proj"))])["attn_decode"]
    assert a == b


@pytest.mark.parametrize("rel", ["vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv",  # repeated token counts
                                 "llmservingsim/H100/meta-llama/Llama-3.1-8B/tp1/layers.csv"])  # no kv_tokens column
def test_imported_public_tables_are_scored_too(shared_data: Path, rel: str) -> None:
    points, envs = pf.score_profiles([shared_data / "profiles" / rel], tables=False)
    summary = pf.summarize(points)
    assert len(envs) == 1 and {"learned", "roofline 2023"} <= set(summary["method"])
    assert np.isfinite(points["predicted_s"]).all() and (points["measured_s"] > 0).all()


def test_a_table_naming_no_model_or_given_twice_is_one_clear_error(shared_data: Path) -> None:
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="names 0 models"):
        pf.score_profiles([shared_data / "profiles" / "vidur/legacy_2024-05/a100/attention.csv"], tables=False)
    with pytest.raises(ConfigError, match="more than once"):
        pf.score_profiles([LLAMA8B, LLAMA8B / "profile.csv"], tables=False)


def test_fp8_rows_are_priced_as_fp8_weights() -> None:
    """The H200's FP8 GEMM table: its rows are their own ops, priced with FP8 weights (half the bytes
    and twice the rate of the same shapes in bf16), and the measured FP8 GEMMs beat the bf16 ones."""
    fp8, _ = pf.score_profiles([H200 / "llama-3.1-8b_tp1_fp8"], tables=False)
    bf16, _ = pf.score_profiles([LLAMA8B], tables=False)
    method = "roofline today (vllm)"
    a = fp8[(fp8["op"] == "mlp_up_gate (fp8)") & (fp8["method"] == method)].set_index("x")
    b = bf16[(bf16["op"] == "mlp_up_gate") & (bf16["method"] == method)].set_index("x")
    assert len(a) == len(b) == 48
    assert (a["predicted_s"] < b["predicted_s"]).all() and (a["measured_s"] < b["measured_s"]).all()


def test_layer_gemms_are_also_scored_together(points_8b: pd.DataFrame) -> None:
    """What a step pays for a layer's GEMMs: the four measured times summed, and each model's sum."""
    table = pd.read_csv(LLAMA8B / "profile.csv")
    at64 = table[(table["num_tokens"] == 64) & table["op"].isin(pf.LAYER_GEMMS)]
    row = points_8b[(points_8b["op"] == pf.LAYER_GEMMS_SUM) & (points_8b["x"] == 64)
                    & (points_8b["method"] == "roofline 2023")]
    assert len(at64) == 4 and len(row) == 1
    assert row["measured_s"].iloc[0] == pytest.approx(at64["median_s"].sum())
    parts = points_8b[points_8b["op"].isin(pf.LAYER_GEMMS) & (points_8b["x"] == 64)
                      & (points_8b["method"] == "roofline 2023")]
    assert row["predicted_s"].iloc[0] == pytest.approx(parts["predicted_s"].sum())


def test_fit_ops_leaves_the_rest_to_the_roofline_of_the_runs_engine(tmp_path: Path) -> None:
    """`simulate fit --ops linear,attention` on a torch profile: its GEMMs and attention learned, its
    unfused element-wise ops left to the roofline, whose constants are the run's engine's."""
    from simulator.cli.costmodel import fit_command
    from simulator.config.errors import ConfigError
    from simulator.costmodel import load_cost_model

    out = tmp_path / "h200.json"
    artifact = fit_command([LLAMA8B], out, ops=["linear,attention"])  # a profile folder is accepted too
    assert set(artifact["learned_ops"]) == {*pf.LINEAR, "attn_prefill", "attn_decode"}
    assert {"norms", "mlp_act", "rotary", "residual_add", "embedding"} <= set(artifact["roofline_ops"])
    replica = ReplicaConfig(model="llama-3.1-8b", gpu="h200", tp=1)
    for engine, backend in (("sglang-2026", "sglang"), ("vllm-v1", "vllm")):
        model = load_cost_model(str(out), replica, engine).kernels
        assert model.roofline.cal == calibration_for("h200", "today", backend)
    with pytest.raises(ConfigError, match="--ops"):
        fit_command([LLAMA8B], tmp_path / "x.json", ops=["comm"])
