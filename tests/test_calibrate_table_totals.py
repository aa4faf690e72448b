"""``calibrate-engine --table``'s ``prefill_tokens`` is each prefill chunk's tokens: a table giving each step's
total there was fitted in silence to a wrong engine (cpu_iteration_s 0, held-out median 20.8%). The step's total
is taken as ``num_prefill_tokens`` (iterations.parquet's name), and a table that reads better as totals is warned."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.calibrate.engine_fit import calibrate_table, predict_rows
from simulator.config.errors import ConfigError
from simulator.costmodel.engine_model import ENGINES

TRUTH = replace(ENGINES["ideal"], name="truth", overlap_cpu=False, cpu_iteration_s=3e-3, cpu_per_seq_s=200e-6,
                cpu_per_prefill_token_s=5e-6, collective_extra_s=((2, 10e-6),))


def _per_chunk_table() -> pd.DataFrame:
    """Steps measured on the simulator under TRUTH, ``prefill_tokens`` each chunk's (several steps of 2-4 chunks)."""
    rows = [{"tp": tp, "num_prefills": n, "prefill_tokens": tokens, "num_decodes": d, "decode_context": 800}
            for tp in (1, 2) for n, tokens, d in ((0, 0, 8), (0, 0, 64), (1, 512, 0), (1, 2048, 0), (2, 512, 0),
                                                   (2, 1024, 16), (4, 512, 0), (3, 256, 32), (1, 512, 16))]
    df = pd.DataFrame(rows)
    return df.assign(measured_s=predict_rows(df, TRUTH, "llama-2-7b", "a100-80gb"))


def test_step_totals_are_read_as_num_prefill_tokens_or_warned() -> None:
    per_chunk = _per_chunk_table()
    total = per_chunk.num_prefills * per_chunk.prefill_tokens
    right = calibrate_table(per_chunk, "llama-2-7b", "a100-80gb", base="handset")
    assert right["report"]["holdout_after"]["median_ape"] < 0.01 and right["report"]["warnings"] == []
    # each step's total under the name that says so: the same fit
    named = calibrate_table(per_chunk.drop(columns="prefill_tokens").assign(num_prefill_tokens=total), "llama-2-7b",
                            "a100-80gb", base="handset")
    assert named["report"]["holdout_after"]["median_ape"] < 0.01
    assert named["engine"].cpu_iteration_s == pytest.approx(right["engine"].cpu_iteration_s, rel=1e-3)
    # the total under prefill_tokens: fitted as chunks (what the column means), and the likely mix-up said
    mixed = calibrate_table(per_chunk.assign(prefill_tokens=total), "llama-2-7b", "a100-80gb", base="handset")
    assert mixed["report"]["holdout_after"]["median_ape"] > 0.05
    assert len(mixed["report"]["warnings"]) == 1
    assert "read as each step's total" in mixed["report"]["warnings"][0]
    assert "name the column num_prefill_tokens" in mixed["report"]["warnings"][0]
    # both columns, disagreeing: one of them is not what it says
    with pytest.raises(ConfigError, match="line 6: num_prefill_tokens 512 is not num_prefills x prefill_tokens"):
        calibrate_table(per_chunk.assign(num_prefill_tokens=per_chunk.prefill_tokens), "llama-2-7b", "a100-80gb")


def test_help_says_prefill_tokens_is_per_chunk_and_what_decode_context_is() -> None:
    from simulator.cli import app

    res = CliRunner().invoke(app, ["calibrate-engine", "--help"], env={"COLUMNS": "300"})
    text = " ".join(res.output.replace("│", " ").split())
    assert "prefill_tokens (each prefill chunk's tokens, not the step's total: give that as num_prefill_tokens)" in text
    assert "decode_context (each decode's tokens already in the KV cache)" in text


def test_a_total_split_over_uneven_chunks_keeps_every_token() -> None:
    from simulator.calibrate.engine_fit import row_shape

    row = pd.DataFrame([{"num_prefills": 3, "num_prefill_tokens": 1000, "num_decodes": 0, "decode_context": 0}])
    shape = row_shape(next(row.itertuples(index=False)))
    assert shape.num_prefills == 3 and shape.num_prefill_tokens == 1000
    assert shape.prefill_chunk_sq_sum == 334**2 + 2 * 333**2  # chunks of 334, 333 and 333 tokens
