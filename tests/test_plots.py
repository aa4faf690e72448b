"""Plots: every figure is written as PNG and SVG; stall detection and the Gantt's input contract."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from simulator.config.run_config import RunConfig
from simulator.engine.records import FRAME_COLUMNS
from simulator.planning.sweep import plot_sweep
from simulator.report import plots
from simulator.report.metrics import tbt_samples
from simulator.simulation import simulate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_written(paths: list[Path], stem: Path) -> None:
    assert sorted(p.name for p in paths) == sorted([f"{stem.name}.png", f"{stem.name}.svg"])
    png = stem.with_name(stem.name + ".png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 2000
    root = ET.parse(stem.with_name(stem.name + ".svg")).getroot()
    assert root.tag.endswith("svg")


@pytest.fixture(scope="module")
def vllm_run():
    config = RunConfig().replace(replica__model="mistral-7b", scheduler__name="vllm", workload__qps=2.0,
                                 workload__num_requests=60)
    return simulate(config)


def test_capacity_bars_and_latency_curves(tmp_path: Path):
    df = pd.DataFrame({
        "scheduler": ["vllm", "orca", "sarathi"] * 2,
        "setting": ["strict"] * 3 + ["relaxed"] * 3,
        "workload": ["sharegpt"] * 6,
        "capacity_qps": [0.5, 0.4, 1.2, 1.0, np.nan, 2.0],
        "capacity_qps_std": [0.01, 0.02, 0.03, 0.0, np.nan, 0.1],
    })
    stem = tmp_path / "bars"
    assert_written(plots.capacity_bars(df, stem, group="setting", facet="workload"), stem)
    curves = pd.DataFrame({"scheduler": ["vllm"] * 3 + ["sarathi"] * 3, "qps": [0.5, 1, 2] * 2,
                           "tbt_s_p99": [0.05, 0.2, 0.9, 0.04, 0.05, 0.08], "ttft_s_p50": [0.1, 0.2, 5, 0.1, 0.3, 0.6]})
    stem = tmp_path / "curves"
    assert_written(plots.latency_vs_qps(curves, stem, slo={"tbt_s_p99": 0.1}), stem)


def test_tbt_cdf_and_iteration_timeline_from_a_run(tmp_path: Path, vllm_run):
    stem = tmp_path / "cdf"
    assert_written(plots.tbt_cdf({"vllm": tbt_samples(vllm_run)}, stem, slo_s=0.1), stem)
    stem = tmp_path / "timeline"
    assert_written(plots.iteration_timeline(vllm_run.iteration_frame(), stem, start_at=5.0, end_at=20.0), stem)


def test_stall_mask_marks_prefill_only_iterations_that_interrupt_decodes():
    rows = [  # replica, prefill tokens, decode tokens
        (0, 100, 0),  # first prefill: nobody was decoding
        (0, 0, 1),
        (0, 200, 0),  # stall: the decode above waits
        (0, 50, 0),   # back-to-back prefill-only iteration: the same decode still waits
        (0, 70, 0),   # and a third
        (0, 0, 2),
        (0, 10, 2),   # hybrid (Sarathi) iteration: decodes continue, no stall
        (1, 30, 0),   # another replica's first prefill is not a stall of replica 0
    ]
    it = pd.DataFrame([(r, 0.0, 0.01, p, d, d + (p > 0), int(p > 0), d, 0, 0, 0, 0) for r, p, d in rows],
                      columns=list(FRAME_COLUMNS))
    assert plots.stall_mask(it).tolist() == [False, False, True, True, True, False, False, False]


def test_stall_mask_from_request_timestamps_counts_every_back_to_back_stall():
    # Iterations every 0.1 s: A (prefill of r0), B (prefill of r1: r0 waits), C (prefill of r2: r0, r1
    # wait), D (decodes), E (prefill of r3 after everyone finished: nobody waits).
    starts = [0.0, 0.1, 0.2, 0.3, 0.5]
    tokens = [(100, 0), (80, 0), (60, 0), (0, 3), (40, 0)]
    it = pd.DataFrame([(0, t, 0.1, p, d, 1, int(p > 0), d, 0, 0, 0, 0) for t, (p, d) in zip(starts, tokens, strict=True)],
                      columns=list(FRAME_COLUMNS))
    requests = pd.DataFrame({"replica_id": [0, 0, 0, 0], "first_token_at": [0.1, 0.2, 0.3, 0.6],
                             "completed_at": [0.4, 0.4, 0.4, np.nan]})
    assert plots.stall_mask(it, requests).tolist() == [False, True, True, False, False]
    # Without timestamps the estimate cannot see who is waiting: it misses B and C (no decode
    # iteration before them) and flags E (it cannot know D's decodes all finished).
    assert plots.stall_mask(it).tolist() == [False, False, False, False, True]


def test_vllm_stall_count_matches_the_request_timeline(vllm_run):
    """Exact stalls: every prefill-only iteration during which some request sits between its
    first token and its completion; at least as many as the carried-over estimate."""
    from simulator.report.metrics import request_frame

    it, req = vllm_run.iteration_frame(), request_frame(vllm_run)
    exact = plots.stall_mask(it, req)
    prefill_only = (it["num_decode_tokens"] == 0) & (it["num_prefill_tokens"] > 0)
    for i in np.flatnonzero(prefill_only.to_numpy()):
        t = it["started_at"].iloc[i]
        waiting = ((req["first_token_at"] <= t) & ~(req["completed_at"] <= t)).any()
        assert exact[i] == waiting
    assert exact.sum() >= plots.stall_mask(it).sum() > 0


def test_vllm_shows_stalls_and_sarathi_does_not():
    base = RunConfig().replace(replica__model="mistral-7b", workload__qps=3.0, workload__num_requests=60)
    vllm = simulate(base.replace(scheduler__name="vllm")).iteration_frame()
    sarathi = simulate(base.replace(scheduler__name="sarathi")).iteration_frame()
    assert plots.stall_mask(vllm).sum() > 0
    assert plots.stall_mask(sarathi).sum() == 0


def test_pp_gantt_from_a_documented_stage_table(tmp_path: Path):
    # Two stages, three micro-batches flowing through with a bubble on stage 1 at the start.
    stages = pd.DataFrame({
        "replica_id": [0] * 6,
        "micro_batch_id": [0, 0, 1, 1, 2, 2],
        "stage": [0, 1, 0, 1, 0, 1],
        "started_at": [0.0, 1.0, 1.0, 2.0, 2.0, 3.0],
        "duration_s": [1.0] * 6,
    })
    stem = tmp_path / "gantt"
    assert_written(plots.pp_gantt(stages, stem), stem)
    with pytest.raises(ValueError, match="micro_batch_id"):
        plots.pp_gantt_figure(stages.drop(columns=["micro_batch_id"]))


def test_pp_gantt_from_a_pipelined_run(tmp_path: Path):
    result = simulate(RunConfig().replace(replica__model="llama-2-7b", replica__pp=2, workload__num_requests=20))
    stages = result.stage_frame()
    assert set(stages["stage"]) == {0, 1}
    stem = tmp_path / "gantt_run"
    assert_written(plots.pp_gantt(stages, stem), stem)


def test_plot_sweep_folder(tmp_path: Path):
    from simulator.planning.sweep import build_spec, run_sweep

    spec = build_spec({"base": {"model": "mistral-7b", "num_requests": 16, "workload": "fixed", "prompt_tokens": 32,
                                "output_tokens": 4},
                       "grid": {"scheduler": ["vllm", "sarathi"], "qps": [1.0, 4.0]}})
    run_sweep(spec, tmp_path)
    written = plot_sweep(tmp_path, tmp_path / "figs")
    assert sorted(p.name for p in written) == ["latency_vs_qps.png", "latency_vs_qps.svg"]


def test_plot_sweep_never_colours_by_the_x_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Without a scheduler column the colour defaulted to the first grid key, qps, the x axis too: each qps
    became a vertical 'series' joining the other key's points. It now takes the other grid key."""
    from simulator.planning.sweep import build_spec, run_sweep
    from simulator.report import plots

    spec = build_spec({"base": {"model": "mistral-7b", "num_requests": 16, "workload": "fixed", "prompt_tokens": 32,
                                "output_tokens": 4},
                       "grid": {"qps": [1.0, 4.0], "engine": ["vllm-2026", "vllm-v1"]}})
    run_sweep(spec, tmp_path)
    seen = {}
    original = plots.latency_vs_qps
    monkeypatch.setattr(plots, "latency_vs_qps", lambda *a, **k: seen.update(k) or original(*a, **k))
    written = plot_sweep(tmp_path, tmp_path / "figs")
    assert (seen["x"], seen["hue"]) == ("qps", "engine")
    assert [p.name for p in written if p.suffix == ".png"] == ["latency_vs_qps.png"]
    written = plot_sweep(tmp_path, tmp_path / "figs2", x="engine", hue="qps")
    assert [p.name for p in written if p.suffix == ".png"] == ["latency_vs_engine.png"]  # named after its x


def _overlapping(texts) -> list[tuple[str, str]]:
    """Pairs of visible, non-empty texts whose rendered boxes intersect."""
    shown = [t for t in texts if t.get_visible() and t.get_text()]
    renderer = shown[0].figure.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in shown]
    return [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]


def test_capacity_chart_of_many_settings_has_no_colliding_labels(tmp_path: Path):
    # The committed sweep's shape: 8 long setting names x 3 schedulers, in one panel and faceted.
    settings = [f"{m}, tp={tp}, tbt_slo={s}, chunk_size={c}, {w}, max_model_len={n}"
                for m, tp, s, c in [("mistral-7b", 1, 0.1, 512), ("yi-34b", 2, 1.0, 2048)]
                for w, n in [("sharegpt", 8192), ("arxiv", 16384)] for _ in range(2)][::2] * 2
    settings = [f"{s} #{i}" for i, s in enumerate(settings)]
    rng = np.random.default_rng(0)
    df = pd.DataFrame([{"setting": s, "scheduler": h, "panel": s.split(",")[0], "capacity_qps": rng.uniform(0.1, 3),
                        "capacity_qps_std": 0.05} for s in settings for h in ("vllm", "orca", "sarathi")])
    for facet in (None, "panel"):
        fig = plots.capacity_bars_figure(df, group="setting", facet=facet, title="capacity")
        FigureCanvasAgg(fig).draw()
        for ax in fig.axes:
            assert not _overlapping(ax.get_xticklabels()), facet
            assert not _overlapping([t for t in ax.texts]), facet  # value labels
    plots.save(fig, tmp_path / "many")


def test_latency_curves_have_a_title_and_no_colliding_tick_labels():
    curves = pd.DataFrame({"scheduler": ["vllm"] * 4 + ["sarathi"] * 4, "qps": [0.25, 0.4, 0.5, 0.75] * 2,
                           "tbt_s_p99": [0.018, 0.03, 0.11, 0.6, 0.017, 0.02, 0.09, 0.097],
                           "ttft_s_p50": [0.78, 0.9, 0.95, 1.0, 0.8, 0.9, 1.4, 2.5]})
    fig = plots.latency_vs_qps_figure(curves, slo={"tbt_s_p99": 0.1}, title="Mistral-7B, arxiv")
    FigureCanvasAgg(fig).draw()
    assert fig._suptitle is not None and fig._suptitle.get_text() == "Mistral-7B, arxiv"
    for ax in fig.axes:
        labels = ax.get_yticklabels(which="both")
        assert len([t for t in labels if t.get_text()]) >= 2
        assert not _overlapping(labels)


def test_plot_sweep_on_a_partial_folder_says_so(tmp_path: Path):
    from simulator.config.errors import ConfigError
    from simulator.planning.sweep import build_spec, point_path, run_sweep

    spec = build_spec({"base": {"model": "mistral-7b", "num_requests": 16, "workload": "fixed", "prompt_tokens": 32,
                                "output_tokens": 4},
                       "grid": {"scheduler": ["vllm", "sarathi"], "qps": [1.0, 4.0]}})
    run_sweep(spec, tmp_path)
    point_path(tmp_path, spec.points[3].key).unlink()  # as if stopped before the last point
    (tmp_path / "results.csv").unlink()  # even without the table: the point files are the truth
    plot_sweep(tmp_path, tmp_path / "figs")
    fig_title = (tmp_path / "figs" / "latency_vs_qps.svg").read_text()
    assert "partial: 3 of 4 points" in fig_title
    for p in spec.points[:3]:
        point_path(tmp_path, p.key).unlink()
    with pytest.raises(ConfigError, match="no finished points"):
        plot_sweep(tmp_path, tmp_path / "figs")
    with pytest.raises(ConfigError, match="sweep.json"):
        plot_sweep(tmp_path / "figs", tmp_path / "figs")


def test_plot_sweep_of_a_users_search_shows_users_and_refuses_a_mixed_one(tmp_path: Path):
    from simulator.config.errors import ConfigError
    from simulator.planning.sweep import build_spec, run_sweep

    base = {"model": "mistral-7b", "num_requests": 32, "workload": "fixed", "prompt_tokens": 32, "output_tokens": 8,
            "tpot_slo": 0.02, "rel_tol": 0.2}
    spec = build_spec({"mode": "capacity", "base": {**base, "users": True}, "grid": {"scheduler": ["vllm", "sarathi"]}})
    run_sweep(spec, tmp_path / "users")
    written = plot_sweep(tmp_path / "users", tmp_path / "users")
    assert any(p.suffix == ".svg" for p in written)
    svg = (tmp_path / "users" / "capacity.svg").read_text()
    assert "capacity (users)" in svg and "capacity (QPS)" not in svg
    mixed = build_spec({"mode": "capacity", "base": base, "grid": {"users": [True, False]}})
    run_sweep(mixed, tmp_path / "mixed")
    with pytest.raises(ConfigError, match="qps and users"):
        plot_sweep(tmp_path / "mixed", tmp_path / "mixed")


def test_a_figure_saved_twice_is_the_same_svg(tmp_path: Path) -> None:
    """Regenerated results/ figures differ only where their content does: no date, no random ids."""
    fig = Figure()
    ax = fig.subplots()
    ax.plot([0, 1, 2], [1, 3, 2], label="a")
    ax.legend()
    first = plots.save(fig, tmp_path / "a", formats=("svg",))[0].read_bytes()
    second = plots.save(fig, tmp_path / "b", formats=("svg",))[0].read_bytes()
    assert first == second and b"clip-path" in first


def test_plot_sweep_of_one_key_other_than_the_rate_puts_it_on_x(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A sweep over tp alone: latency against tp, one series (the key went to the colours and x fell back to the
    row index, 'latency_vs_point', a one-dot series per tp)."""
    from simulator.planning.sweep import build_spec, run_sweep
    from simulator.report import plots

    spec = build_spec({"base": {"model": "mistral-7b", "num_requests": 16, "workload": "fixed", "prompt_tokens": 32,
                                "output_tokens": 4},
                       "grid": {"tp": [1, 2]}})
    run_sweep(spec, tmp_path)
    seen = {}
    original = plots.latency_vs_qps
    monkeypatch.setattr(plots, "latency_vs_qps", lambda *a, **k: seen.update(k, rows=len(a[0])) or original(*a, **k))
    written = plot_sweep(tmp_path, tmp_path / "figs")
    assert [p.name for p in written if p.suffix == ".png"] == ["latency_vs_tp.png"]
    assert seen["x"] == "tp" and seen["hue"] == "series" and seen["rows"] == 2


def test_plot_run_of_a_disaggregated_run_draws_each_pools_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The decode worker's steps are where a disaggregated run's TBT comes from: it gets a timeline of its own beside
    the prefill worker's (only replica 0, the prefill worker, was drawn)."""
    from simulator.config.run_config import RunConfig, WorkloadConfig
    from simulator.report import plots

    config = RunConfig(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)",
                       workload=WorkloadConfig(num_requests=20, qps=4.0))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(config.to_dict()))
    drawn = []
    original = plots.iteration_timeline_figure
    monkeypatch.setattr(plots, "iteration_timeline_figure",
                        lambda it, **k: drawn.append((k["replica_id"], int((it["replica_id"] == k["replica_id"]).sum())))
                        or original(it, **k))
    written = plots.plot_run(tmp_path / "run", tmp_path / "figs")
    names = {p.name for p in written if p.suffix == ".png"}
    assert {"iteration_timeline_prefill.png", "iteration_timeline_decode.png"} <= names
    assert [rid for rid, _ in drawn] == [0, 1] and all(n > 0 for _, n in drawn)


def _run_sweep_table(grid: dict, rows: list[dict]) -> tuple[dict, pd.DataFrame]:
    """A finished run-mode sweep's info and table, by hand (two latency figures a point)."""
    table = pd.DataFrame([{**r, "status": "ok", "tbt_s_p99": 0.01 * (i + 1), "ttft_s_p50": 0.1 * (i + 1)}
                          for i, r in enumerate(rows)])
    return {"mode": "run", "base": {"model": "tiny-llama-1b"}, "grid": grid}, table


@pytest.mark.parametrize("zipped", [False, True])
def test_plot_sweep_draws_one_line_per_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     zipped: bool) -> None:
    """qps x scheduler x chunk_size: the lines were grouped by scheduler alone, so sarathi at chunk 256 and at 512
    made one zigzag line (two points at each qps). Each line is now one (scheduler, chunk_size)."""
    pairs = [("sarathi", 256), ("sarathi", 512), ("vllm-v1", 512)] if zipped else \
        [(s, c) for s in ("sarathi", "vllm-v1") for c in (256, 512)]
    grid = ({"qps": [[2.0], [8.0]], "scheduler,chunk_size": [list(p) for p in pairs]} if zipped else
            {"qps": [[2.0], [8.0]], "scheduler": [["sarathi"], ["vllm-v1"]], "chunk_size": [[256], [512]]})
    info, table = _run_sweep_table(grid, [{"qps": q, "scheduler": s, "chunk_size": c} for q in (2.0, 8.0)
                                          for s, c in pairs])
    seen = {}
    original = plots.latency_vs_qps
    monkeypatch.setattr(plots, "latency_vs_qps", lambda df, *a, **k: seen.update(k, df=df) or original(df, *a, **k))
    plots.plot_sweep_table(info, table, tmp_path, tmp_path)
    df, hue = seen["df"], seen["hue"]
    assert df.groupby(hue)["qps"].apply(lambda q: q.is_unique).all()  # no line holds two points at one qps
    assert sorted(df[hue].unique()) == sorted(f"{s}, chunk_size={c}" for s, c in pairs)


def test_plot_sweep_of_one_varied_key_besides_x_keeps_its_colours(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    info, table = _run_sweep_table({"qps": [[1.0], [4.0]], "scheduler": [["vllm"], ["sarathi"]]},
                                   [{"qps": q, "scheduler": s} for q in (1.0, 4.0) for s in ("vllm", "sarathi")])
    seen = {}
    original = plots.latency_vs_qps
    monkeypatch.setattr(plots, "latency_vs_qps", lambda df, *a, **k: seen.update(k, df=df) or original(df, *a, **k))
    plots.plot_sweep_table(info, table, tmp_path, tmp_path)
    assert (seen["x"], seen["hue"]) == ("qps", "scheduler")


@pytest.mark.parametrize("hue", ["scheduler", "chunk_size"])
def test_plot_capacity_sweep_whose_zipped_key_holds_the_colour(tmp_path: Path, hue: str) -> None:
    """grid "scheduler,chunk_size": the zipped key went out of the bar groups whole with the colour, chunk_size with
    it, so each colour had two bars in the one group: 'cannot reindex on an axis with duplicate labels'."""
    pairs = [("sarathi", 256), ("sarathi", 512), ("vllm-v1", 512)]
    info = {"mode": "capacity", "base": {"model": "tiny-llama-1b"}, "grid": {"scheduler,chunk_size": [list(p) for p in pairs]}}
    table = pd.DataFrame([{"scheduler": s, "chunk_size": c, "status": "ok", "capacity_qps": 1.0 + i,
                           "capacity_qps_std": 0.0, "slo": "P99 TBT <= 0.2s"} for i, (s, c) in enumerate(pairs)])
    seen = {}
    original = plots.capacity_bars_figure
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "capacity_bars_figure", lambda df, **k: seen.update(k, df=df) or original(df, **k))
        written = plots.plot_sweep_table(info, table, tmp_path, tmp_path, hue=hue)
    assert [p.name for p in written if p.suffix == ".png"] == ["capacity.png"]
    df = seen["df"]
    assert seen["hue"] == hue and not df.duplicated(["setting", hue]).any()  # each bar a point of its own
    other = "chunk_size" if hue == "scheduler" else "scheduler"
    assert df["setting"].nunique() == df[other].nunique()


def test_a_tbt_cdf_of_no_gaps_says_so_without_a_legend_warning() -> None:
    """A run whose every request was rejected has no TBT gaps: `plot run` leaked matplotlib's 'No artists with
    labels found to put in legend' UserWarning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = plots.tbt_cdf_figure({"trtllm": np.array([])})
        FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    assert ax.get_legend() is None and any("no gaps" in t.get_text() for t in ax.texts)
    fig = plots.tbt_cdf_figure({"trtllm": np.array([])}, slo_s=0.1)  # the SLO line alone: in a legend
    assert fig.axes[0].get_legend() is not None
