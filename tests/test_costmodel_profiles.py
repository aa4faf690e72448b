"""Learned and calibrated cost models against the public measured profiles (skipped without ../shared/data)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.calibrate.fit import fit_tables
from simulator.calibrate.fit_calibration import roofline_token_predictions
from simulator.calibrate.fit_data import read_profile, read_profiles
from simulator.calibrate.fit_fidelity import token_table_points
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel import BatchShape
from simulator.costmodel.calibration import DEFAULT, calibration_for
from simulator.costmodel.learned import LearnedCostModel

A100_7B = "profiles/vidur/compute/a100/meta-llama/Llama-2-7b-hf/mlp.csv"
A100_70B = "profiles/vidur/compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv"
A100_ATTN = "profiles/vidur/legacy_2024-05/a100/attention.csv"
A100_AR = "profiles/vidur/network/a100_dgx/all_reduce.csv"


def test_vidur_linear_layers_held_out_error_within_target(shared_data):
    """The acceptance figure for one model: held-out APE per op, pooled over TP 1-8."""
    art = fit_tables(read_profile(shared_data / A100_7B), tp=1)
    assert (art["model"], art["gpu"]) == ("llama-2-7b", "a100-80gb")
    assert all(row["num_holdout"] >= 40 and row["holdout_median_ape"] <= 0.05 for row in art["report"])
    points = token_table_points(read_profile(shared_data / A100_7B), "a100-80gb", "Vidur mlp.csv")
    assert sorted(points["tp"].unique()) == [1, 2, 4, 8]
    for op, g in points.groupby("op"):
        err = np.abs(g["learned_s"] / g["measured_s"] - 1)
        assert np.median(err) <= 0.05, op
        assert np.quantile(err, 0.95) <= 0.15, op


def test_vidur_full_artifact_predicts_a_sane_iteration(shared_data):
    table = read_profiles([shared_data / A100_70B, shared_data / A100_ATTN, shared_data / A100_AR])
    art = fit_tables(table, tp=2)
    assert {"attn_decode", "attn_prefill", "all_reduce"} <= set(art["learned_ops"])
    by_op = {r["op"]: r for r in art["report"]}
    assert by_op["attn_decode"]["holdout_median_ape"] < 0.06
    assert by_op["attn_prefill"]["holdout_median_ape"] < 0.06
    cm = LearnedCostModel(ReplicaConfig(model="llama-2-70b", gpu="a100-80gb", tp=2), art)
    small = cm.iteration_time(BatchShape.from_requests([], [1024] * 8))
    large = cm.iteration_time(BatchShape.from_requests([(512, 0)], [1024] * 64))
    # A 70B decode step on two A100s reads ~70 GB of weights per GPU: tens of milliseconds.
    assert 0.02 < small < large < 1.0
    assert cm.num_extrapolations == 0


def test_attention_table_refused_for_another_model(shared_data):
    table = read_profiles([shared_data / A100_7B, shared_data / A100_ATTN])
    with pytest.raises(ConfigError, match="attention rows are for hidden 8192"):
        fit_tables(table, tp=2)


def test_calibrated_roofline_beats_the_defaults_on_a100_gemms(shared_data):
    table = read_profile(shared_data / A100_70B)
    rows = table[table["op"].isin(["qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down"])].reset_index(drop=True)
    meas = rows["median_s"].to_numpy(dtype=float)
    cal = calibration_for("a100-80gb")
    assert cal is not DEFAULT and "Vidur" in cal.source
    err_cal = np.median(np.abs(roofline_token_predictions(rows, "a100-80gb", cal) / meas - 1))
    err_default = np.median(np.abs(roofline_token_predictions(rows, "a100-80gb", DEFAULT) / meas - 1))
    assert err_cal < err_default
    assert err_cal < 0.15
