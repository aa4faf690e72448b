"""Speculative-decoding measurements of the data folder: measured speedups and Spec-Bench rows.

``../shared/data/validation/speculative/`` (see its README). The acceptance-length curves and
their conversion to per-position rates live in :mod:`simulator.config.acceptance` (option
parsing resolves ``--acceptance-data`` there); they are re-exported here for the reports.
"""

from __future__ import annotations

from pathlib import Path

from simulator.config.acceptance import (  # noqa: F401 - re-exported
    DATA_DIR,
    AcceptanceCurve,
    acceptance_from_data,
    data_dir,
    find_curve,
    golden_curves,
    iid_rate,
    rates_from_al_curve,
    read_rows,
)


def measurements(path: str | Path | None = None) -> list[dict[str, str]]:
    """Every row of ``spec_decode_measurements.csv``."""
    return read_rows("spec_decode_measurements.csv", path)


def spec_bench(path: str | Path | None = None) -> list[dict[str, str]]:
    """Every row of ``spec_bench_leaderboard.csv`` (batch 1)."""
    return read_rows("spec_bench_leaderboard.csv", path)
