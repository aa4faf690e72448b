"""``simulate calibrate-engine`` defects an audit found: the artifact written over its own measurement, --rows
replayed at one token budget whatever the GPU and backend, an unidentified prefill floor written at its start,
a wrong 'before' for presets the replay cannot express, unit mistakes fitted in silence, a null scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.cli.engine import calibrate_engine_command
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig


@pytest.mark.parametrize("flag", ["table", "bench", "rows"])
def test_out_may_not_be_an_input(tmp_path: Path, flag: str) -> None:
    """--out the same file as --table, --bench or --rows (by its name, or through a link) overwrote the
    measurement with the artifact, exit 0."""
    measured = tmp_path / "measured.txt"
    measured.write_text("the measurement\n")
    link = tmp_path / "link.json"
    link.symlink_to(measured)
    for out in (measured, link, tmp_path / "." / "measured.txt"):
        with pytest.raises(ConfigError, match=f"is the --{flag} file: writing the artifact would overwrite"):
            calibrate_engine_command(RunConfig(), out, **{flag: measured})
    assert measured.read_text() == "the measurement\n"


def _rows_frame(rows: list, truth: object, budget: int | None = None):  # noqa: ANN202 - a DataFrame
    """Rows 'measured' by replaying each row's kernels-only run (at ``budget``: None, its engine's default)
    under ``truth``'s terms: what the simulator itself reports for them (the replay equals the simulation)."""
    import pandas as pd

    from simulator.calibrate import silicon_fit as sf

    out = []
    for row in rows:
        ttft, tpot = sf.replay(sf.trace_of(sf.user_row_config(row, RunConfig(), budget)), truth)
        out.append({**row._asdict(), "ttft_ms": ttft, "tpot_ms": tpot})
    return pd.DataFrame(out)


def test_rows_replay_at_each_engines_own_budget() -> None:
    """Without --max-num-batched-tokens a row steps under its engine's default for its GPU and backend (vLLM's
    2048 on an A100, SGLang's by memory, trtllm-serve's 8192), as `simulate run` does, not 8192 everywhere."""
    import collections

    from simulator.calibrate import silicon_fit as sf

    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp")
    budgets = {(b, g): sf.row_budget(sf.user_row_config(row(b, "llama-3.1-8b", g, 1024, 128, 4, 1), RunConfig(), None))
               for b in ("vllm", "sglang", "trtllm") for g in ("a100-80gb", "h100-sxm", "b200")}
    assert budgets == {("vllm", "a100-80gb"): 2048, ("vllm", "h100-sxm"): 8192, ("vllm", "b200"): 8192,
                       ("sglang", "a100-80gb"): 8192, ("sglang", "h100-sxm"): 8192, ("sglang", "b200"): 16384,
                       ("trtllm", "a100-80gb"): 8192, ("trtllm", "h100-sxm"): 8192, ("trtllm", "b200"): 8192}
    given = sf.user_row_config(row("vllm", "llama-3.1-8b", "a100-80gb", 1024, 128, 4, 1), RunConfig(), 4096)
    assert sf.row_budget(given) == 4096


def test_rows_made_at_the_engines_default_budget_fit_exactly(aic: Path, tmp_path: Path) -> None:
    """A100 rows measured at vLLM's own budget (2048) were replayed at 8192: held-out TTFT 103% off after the fit
    (0% with --max-num-batched-tokens 2048). The artifact says which budget the replays ran."""
    import collections
    import json

    import numpy as np

    from simulator.calibrate import silicon_fit as sf

    truth = sf.Params(False, np.array([2e-3, 20e-6, 1e-6, 5e-6]))
    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp")
    rows = [row("vllm", m, "a100-80gb", isl, osl, c, 1) for m in ("llama-3.1-8b", "qwen3-8b")
            for isl, osl, c in ((1024, 32, 4), (4096, 32, 8), (8000, 32, 4), (512, 64, 32))]
    csv = tmp_path / "rows.csv"
    _rows_frame(rows, truth).to_csv(csv, index=False)
    out = tmp_path / "e.json"
    report = calibrate_engine_command(RunConfig(), out, rows=csv, holdout=0.25, seed=0)["report"]
    assert report["holdout_after"]["ttft_median"] < 0.01 and report["holdout_after"]["tpot_median"] < 0.01
    assert json.loads(out.read_text())["report"]["token_budget"] == "engine default per GPU: a100-80gb 2048"
    given = calibrate_engine_command(RunConfig().replace(scheduler__max_num_batched_tokens=4096), tmp_path / "g.json",
                                     rows=csv, holdout=0.25, seed=0)["report"]
    assert given["token_budget"] == 4096


SGLANG_ROWS = [("llama-3.1-8b", "h100-sxm"), ("qwen3-8b", "h100-sxm"), ("llama-3.1-8b", "b200"), ("qwen3-8b", "b200")]


@pytest.mark.parametrize("floor", [0.0, 1.5e-3])
def test_sglang_rows_write_the_prefill_floor_they_identify_and_their_policy(aic: Path, tmp_path: Path, floor: float) -> None:
    """SGLang rows whose steps no floor lengthens wrote the floor at the fit's start (1 ms a layer: rows made with
    0 and 0.5 ms fitted alike, and a 64-token prompt was priced 4x its TTFT): now 0, said in a note; a floor the
    rows do show is fitted as before. The artifact names the policy the rows were replayed under (it was null)."""
    import collections
    import json

    import numpy as np

    from simulator.calibrate import silicon_fit as sf

    truth = sf.Params(False, np.array([1e-3, 15e-6, 2e-6, 5e-6, floor]))
    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp")
    shapes = ((1024, 32, 4), (4096, 32, 16)) if floor == 0 else ((64, 32, 1), (4096, 32, 16))
    rows = [row("sglang", m, g, isl, osl, c, 1) for m, g in SGLANG_ROWS for isl, osl, c in shapes]
    csv = tmp_path / "rows.csv"
    _rows_frame(rows, truth).to_csv(csv, index=False)
    out = tmp_path / "e.json"
    report = calibrate_engine_command(RunConfig(), out, rows=csv, holdout=0.25, seed=0)["report"]
    engine = json.loads(out.read_text())["engine"]
    assert engine["scheduler"] == "sglang"
    unbound = [n for n in report["notes"] if "prefill floor" in n]
    if floor == 0:
        assert engine["prefill_floor_per_layer_s"] == 0.0
        assert len(unbound) == 1 and "not identified by them, written as 0" in unbound[0]
    else:
        assert engine["prefill_floor_per_layer_s"] == pytest.approx(floor, rel=0.02) and not unbound
    assert report["holdout_after"]["ttft_median"] < 0.01


def test_before_is_simulated_for_a_preset_the_replay_cannot_express(aic: Path, tmp_path: Path) -> None:
    """The held-out error 'before' replayed the base preset as the fit's five terms: vllm-2023-splitwise's prefill
    excess (and RPC, launch floor, collective extra by TP of others) left out, a 4096-token row's TTFT at 554 ms
    where the simulator gives 1181. Such a preset's 'before' is now its simulation, and a note says why."""
    import collections

    import numpy as np

    from simulator.calibrate import silicon_fit as sf
    from simulator.calibrate.silicon import simulate_row

    truth = sf.Params(False, np.array([2e-3, 20e-6, 1e-6, 5e-6]))
    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp")
    rows = [row("vllm", m, "h100-sxm", isl, osl, c, 1) for m in ("llama-3.1-8b", "qwen3-8b")
            for isl, osl, c in ((1024, 32, 4), (4096, 32, 8), (8000, 32, 4), (512, 64, 32))]
    frame = _rows_frame(rows, truth)
    csv = tmp_path / "rows.csv"
    frame.to_csv(csv, index=False)
    base = RunConfig().replace(engine="vllm-2023-splitwise")
    report = calibrate_engine_command(base, tmp_path / "e.json", rows=csv, holdout=0.25, seed=3)["report"]
    assert any("the replay cannot express vllm-2023-splitwise's prefill_excess_token_s" in n for n in report["notes"])
    # the held-out rows (calibrate_rows' seeded split), simulated under the preset
    read = sf.read_user_rows(csv).rename(columns={"ttft_ms": "measured_ttft_ms", "tpot_ms": "measured_tpot_ms"})
    test = sf.held_out_rows(read, 0.25, 3)
    assert test.sum() == 2
    sims = np.array([simulate_row(sf.user_row_config(r, base, None)) for r, k in zip(rows, test, strict=True) if k])
    held = frame[test].rename(columns={"ttft_ms": "measured_ttft_ms", "tpot_ms": "measured_tpot_ms"})
    assert report["holdout_before"] == pytest.approx(sf.error_row(sims, held), rel=1e-9)


def test_replay_gaps_name_the_terms_a_replay_leaves_out() -> None:
    import collections

    from simulator.calibrate import silicon_fit as sf
    from simulator.costmodel.engine_model import ENGINES

    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp pp kernels")
    tables = [sf.user_row_config(row("vllm", "llama-3.1-8b", "h100-sxm", 1024, 32, 4, 1, 1, "vllm"), RunConfig(), None)]
    roof_tp4 = [sf.user_row_config(row("vllm", "llama-3.1-70b", "h100-sxm", 1024, 32, 4, 4, 1, "roofline"),
                                   RunConfig(), None)]
    # the 2026 presets are the fit's own terms: replayed exactly over their kernel tables
    assert all(sf.replay_gaps(ENGINES[n], tables) == [] for n in ("vllm-2026", "sglang-2026", "trtllm-2026", "ideal"))
    assert sf.replay_gaps(ENGINES["vllm-2023-splitwise"], tables) == ["prefill_excess_token_s"]
    assert sf.replay_gaps(ENGINES["vllm-2023-splitwise"], roof_tp4) == [
        "prefill_excess_token_s", "collective_extra_s by TP", "roofline_prices (vllm's roofline constants)"]
    assert sf.replay_gaps(ENGINES["sarathi-2023-vidur"], roof_tp4) == ["rpc_s", "rpc_per_seq_s"]


def test_unit_slips_are_refused_with_the_column_and_the_likely_unit(aic: Path, tmp_path: Path) -> None:
    """Timings in another unit fitted in silence, exit 0: --rows with ttft_ms in seconds (93,834% held-out error),
    --table with measured_s in milliseconds (12 s a step fitted), --bench with TTFT and ITL in milliseconds (the
    search's 100 ms edge, 99.6% off). Each is now one line naming the column and the unit it looks to be in."""
    import collections
    import json

    import numpy as np

    from simulator.calibrate import silicon_fit as sf
    from simulator.calibrate.engine_fit import predict_rows
    from simulator.costmodel.engine_model import ENGINES

    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp")
    rows = [row("vllm", m, "h100-sxm", isl, 32, c, 1) for m in ("llama-3.1-8b", "qwen3-8b")
            for isl, c in ((1024, 4), (4096, 8))]
    frame = _rows_frame(rows, sf.Params(False, np.array([2e-3, 20e-6, 1e-6, 5e-6])))
    for column, scale, unit in (("ttft_ms", 1e-3, "in seconds"), ("tpot_ms", 1e3, "in microseconds")):
        csv = tmp_path / f"{column}.csv"
        frame.assign(**{column: frame[column] * scale}).to_csv(csv, index=False)
        with pytest.raises(ConfigError, match=f"{column} is a median .* what the kernels alone take .*: {unit}, where "
                                              "milliseconds are expected"):
            calibrate_engine_command(RunConfig(), tmp_path / "e.json", rows=csv)
    # an iteration table in milliseconds
    import pandas as pd

    table = pd.DataFrame([{"tp": 1, "num_prefills": p, "prefill_tokens": 512 * p, "num_decodes": d,
                           "decode_context": 700} for p, d in ((0, 8), (1, 4), (0, 32), (2, 0), (0, 1), (1, 16),
                                                              (0, 64), (1, 0), (0, 4), (3, 8))])
    table["measured_s"] = predict_rows(table, ENGINES["vllm-v1"], "llama-2-7b", "a100-80gb") * 1e3
    table.to_csv(tmp_path / "table.csv", index=False)
    config = RunConfig().replace(replica__model="llama-2-7b", replica__gpu="a100-80gb")
    with pytest.raises(ConfigError, match="measured_s is a median .*x what the kernels alone take .*: in "
                                          "milliseconds, where seconds are expected"):
        calibrate_engine_command(config, tmp_path / "t.json", table=tmp_path / "table.csv")
    # a vllm bench result with its timings in milliseconds
    data = json.loads((Path(__file__).parent / "data" / "vllm_bench_fixture.json").read_text())
    data["ttfts"] = [t * 1e3 for t in data["ttfts"]]
    data["itls"] = [[g * 1e3 for g in gaps] for gaps in data["itls"]]
    (tmp_path / "bench.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="itls is a median .*x what the kernels alone take .*: in milliseconds, "
                                          "where seconds are expected"):
        calibrate_engine_command(config, tmp_path / "b.json", bench=tmp_path / "bench.json")
    assert not any((tmp_path / f).exists() for f in ("e.json", "t.json", "b.json"))


def test_a_term_at_its_search_bound_is_warned(aic: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A --rows fit whose term ends at its search bound says so (the rows ask for more than the fit allows); a term
    at 0, the least it may take, is no warning."""
    import collections

    import numpy as np

    from simulator.calibrate import silicon_fit as sf

    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp")
    rows = [row("vllm", m, "h100-sxm", isl, 32, c, 1) for m in ("llama-3.1-8b", "qwen3-8b")
            for isl, c in ((1024, 4), (4096, 8), (512, 32))]
    csv = tmp_path / "rows.csv"
    _rows_frame(rows, sf.Params(False, np.array([2e-3, 20e-6, 0.0, 0.0]))).to_csv(csv, index=False)
    report = calibrate_engine_command(RunConfig(), tmp_path / "e.json", rows=csv)["report"]
    assert report["warnings"] == []
    monkeypatch.setattr(sf, "UPPER", np.array([1e-3, 2e-3, 20e-6, 2e-3, 10e-3, 50e-3]))  # the per-step CPU capped under 2 ms
    report = calibrate_engine_command(RunConfig(), tmp_path / "e.json", rows=csv)["report"]
    assert report["warnings"] == ["cpu_iteration_s ended at its search bound (0.001 s): the rows ask for more than "
                                  "the fit allows"]


def test_a_skipped_rows_reason_names_its_cause(aic: Path, tmp_path: Path) -> None:
    """A pipeline-parallel row whose micro-batches' steps overlap was skipped as 'attention DP or idle gaps'; an
    attention-DP row's ranks are said as such."""
    import collections

    import numpy as np

    from simulator.calibrate import silicon_fit as sf

    row = collections.namedtuple("Row", "backend model gpu isl osl concurrency tp pp attention_dp ep")
    rows = [row("vllm", m, "h100-sxm", isl, 32, c, 1, 1, 1, 1) for m in ("llama-3.1-8b", "qwen3-8b")
            for isl, c in ((1024, 4), (4096, 8), (512, 16))]
    frame = _rows_frame(rows, sf.Params(False, np.array([2e-3, 20e-6, 1e-6, 0.0])))
    odd = [row("vllm", "llama-3.1-8b", "h100-sxm", 1024, 32, 16, 1, 2, 1, 1),
           row("vllm", "qwen3-30b-a3b", "h100-sxm", 1024, 32, 8, 1, 1, 2, 2)]
    import pandas as pd

    frame = pd.concat([frame, pd.DataFrame([{**r._asdict(), "ttft_ms": 100.0, "tpot_ms": 10.0} for r in odd])],
                      ignore_index=True)
    csv = tmp_path / "rows.csv"
    frame.to_csv(csv, index=False)
    report = calibrate_engine_command(RunConfig(), tmp_path / "e.json", rows=csv)["report"]
    assert report["skipped"] == [
        (8, "not one replica's back-to-back steps, which the fit replays: pipeline parallelism (pp 2) overlaps its "
            "micro-batches' steps"),
        (9, "not one replica's back-to-back steps, which the fit replays: attention-DP ranks step side by side")]


def test_help_says_what_max_evals_bounds_and_that_rows_are_means() -> None:
    """--max-evals' help said 'simulations the bench fit may run' while a 13-point grid and 5 search steps always
    ran; --rows' did not say its TTFT and TPOT are means (the replay's are)."""
    import re

    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["calibrate-engine", "--help"], env={"COLUMNS": "200"})
    text = re.sub(r"\s+", " ", res.output.replace("│", " "))
    assert "a fixed 13-point grid, which always runs" in text
    assert "each row's mean TTFT and TPOT, not a median or percentile" in text


def test_validate_prints_its_summary_and_names_the_preset_it_is_of(tmp_path: Path, shared_data: Path) -> None:
    """validate's summary filtered on the run default (vllm-2026), which the report does not price: it never
    printed; its README called vllm-2023-splitwise 'the default preset'."""
    from typer.testing import CliRunner

    from simulator.cli import app

    data = tmp_path / "data"
    (data / "splitwise-sim").mkdir(parents=True)
    (data / "splitwise-sim" / "perf_model.csv").write_bytes(
        (shared_data / "profiles" / "splitwise-sim" / "perf_model.csv").read_bytes())
    res = CliRunner().invoke(app, ["validate", "--out", str(tmp_path / "out"), "--data", str(data)])
    assert res.exit_code == 0, res.output
    assert "vllm-2023-splitwise decode: median" in res.output and "vllm-2023-splitwise prompt: median" in res.output
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "default preset" not in readme and "`vllm-2023-splitwise`'s errors above are in" in readme


def test_a_rows_artifact_over_the_roofline_runs_as_its_fit_replayed(tmp_path: Path) -> None:
    """Rows over the roofline were replayed with the pooled constants (the kernels-only traces' ideal engine) while
    the artifact recorded the base preset's (vllm's under vllm-2026): simulated, it ran 2-3% off its own fit."""
    import collections

    import numpy as np

    from simulator.calibrate import silicon_fit as sf
    from simulator.calibrate.silicon import simulate_row

    row = collections.namedtuple("Row", "backend kernels model gpu isl osl concurrency tp")
    rows = [row("vllm", "roofline", m, "h100-sxm", isl, 32, c, 1) for m in ("llama-3.1-8b", "qwen3-8b")
            for isl, c in ((1024, 4), (4096, 8), (512, 16))]
    csv = tmp_path / "rows.csv"
    _rows_frame(rows, sf.Params(False, np.array([2e-3, 20e-6, 1e-6, 5e-6]))).to_csv(csv, index=False)
    out = tmp_path / "e.json"
    engine = calibrate_engine_command(RunConfig(), out, rows=csv)["engine"]
    assert engine.roofline_prices == "all"
    config = sf.user_row_config(rows[1], RunConfig(), None)
    replayed = sf.replay(sf.trace_of(config), sf.Params.from_engine(engine))
    assert simulate_row(config.replace(engine=str(out))) == pytest.approx(replayed, rel=1e-9)
