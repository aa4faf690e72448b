"""A fit says what it fitted before it writes the artifact: a write that fails at the end (a full disk, a folder
made read-only since) ends in one line that points at the figures above, not in losing them."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from test_calibrate_table_totals import _per_chunk_table
from test_cli_fuzz_round13 import invoke

ROOT = Path(__file__).resolve().parents[1]


def _full_disk(*_args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_calibrate_engine_prints_the_fit_before_a_failed_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.cli.engine as engine_cli

    table = tmp_path / "t.csv"
    _per_chunk_table().to_csv(table, index=False)
    out = tmp_path / "engine.json"
    args = ("calibrate-engine", "--table", str(table), "--model", "llama-2-7b", "--gpu", "a100-80gb", "--out", str(out))
    code, text = invoke(*args)
    assert code == 0 and text.index("held-out error after") < text.index(f"wrote {out}") and out.is_file(), text
    out.unlink()
    monkeypatch.setattr(engine_cli, "write_engine_result", _full_disk)
    code, text = invoke(*args)
    assert code == 1 and "held-out error after" in text and not out.exists(), text  # (the fit was lost with the write)
    assert text.rstrip().endswith(f"error: --out: could not write {out} (No space left on device); the fit is above")


def test_fit_prints_the_cost_model_before_a_failed_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import simulator.cli.costmodel as costmodel_cli

    out = tmp_path / "cm.json"
    args = ("fit", "--profile", str(ROOT / "results" / "h200" / "write-flush" / "llama-3.1-8b_tp1"), "--out", str(out))
    monkeypatch.setattr(costmodel_cli, "write_fit", _full_disk)
    code, text = invoke(*args)
    assert code == 1 and "roofline fallback for" in text and not out.exists(), text
    assert text.rstrip().endswith(f"error: --out: could not write {out} (No space left on device); the fit is above")


def test_a_fit_takes_the_threshold_of_a_term_its_starting_engine_lacks(tmp_path: Path) -> None:
    # calibrate-engine fits the excess rate above the starting engine's threshold: a run refuses the threshold alone
    # (the rate is 0 there), a fit must not (it was refused as 'would do nothing').
    table = tmp_path / "t.csv"
    _per_chunk_table().to_csv(table, index=False)
    engine = "vllm-2026:prefill_excess_threshold_tokens=1024"
    code, text = invoke("calibrate-engine", "--table", str(table), "--model", "llama-2-7b", "--gpu", "a100-80gb",
                        "--engine", engine, "--out", str(tmp_path / "e.json"))
    assert code == 0, text
    code, text = invoke("run", "--engine", engine, "--num-requests", "10", "--no-progress")
    assert code == 2 and "prefill_excess_threshold_tokens=1024 would do nothing: vllm-2026 has no " \
        "prefill_excess_token_s" in text, text
