"""Figures for capacity planning and P99 TBT analysis (matplotlib, PNG and SVG).

Every function takes tidy tables (or a run result), draws on a fresh
:class:`matplotlib.figure.Figure` (never pyplot state, so importing this module changes no
backend and works headless), writes ``<stem>.png`` and ``<stem>.svg`` when given a stem,
and returns the paths written (``*_figure`` variants return the figure for notebooks).

- :func:`capacity_bars`: capacity per scheduler as grouped bars (Sarathi-Serve Figs. 10-11);
- :func:`latency_vs_qps`: P99 TBT and P50 TTFT against load, one line per scheduler;
- :func:`tbt_cdf`: CDFs of all TBT gaps, one line per run, the SLO marked;
- :func:`iteration_timeline`: prefill vs decode tokens of each iteration over time, with
  decode *stalls* (prefill-only iterations while requests are mid-decode) shaded;
- :func:`pp_gantt`: pipeline stages over time, one row per stage, one colour per
  micro-batch; bubbles are the gaps. Input: a stage table with columns ``stage``,
  ``started_at``, ``duration_s`` and ``micro_batch_id`` (optionally ``replica_id``), as
  :meth:`simulator.engine.cluster.RunResult.stage_frame` returns for PP > 1;
- :func:`tau_plot`: iteration time and throughput against tokens per iteration.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

SCHEDULER_COLORS = {"vllm": "#d62728", "orca": "#ff7f0e", "fastertransformer": "#8c564b", "sarathi": "#2ca02c",
                    "vllm-v1": "#1f77b4", "sglang": "#9467bd",
                    "trtllm": "#17becf"}
FORMATS = ("png", "svg")


def _color(name: Any, index: int) -> str:
    return SCHEDULER_COLORS.get(str(name), f"C{index % 10}")


def save(fig: Figure, stem: str | Path, formats: Sequence[str] = FORMATS) -> list[Path]:
    """Write ``fig`` as ``stem.png`` and ``stem.svg`` (folders created); return the paths."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        # SVG without a date stamp, and its element ids salted by a constant, not random ones, so regenerated
        # figures only differ when their content does.
        with matplotlib.rc_context({"svg.hashsalt": "servesim"}):
            fig.savefig(path, dpi=130, bbox_inches="tight", metadata={"Date": None} if fmt == "svg" else None)
        paths.append(path)
    return paths


def _maybe_save(fig: Figure, stem: str | Path | None) -> list[Path]:
    return save(fig, stem) if stem is not None else []


# ---------------------------------------------------------------------------------------------
# Capacity and load curves


CHARS_PER_INCH = 12  # 8-point DejaVu Sans, with a margin


def _wrap(text: str, width_in: float) -> str:
    """``text`` wrapped to lines of about ``width_in`` inches of 8-point type."""
    return textwrap.fill(text, width=max(8, int(width_in * CHARS_PER_INCH)), break_long_words=False)


def capacity_bars_figure(df: pd.DataFrame, group: str, hue: str = "scheduler", value: str = "capacity_qps",
                         err: str | None = "capacity_qps_std", facet: str | None = None, title: str = "",
                         ylabel: str = "capacity (QPS)") -> Figure:
    """Grouped bars: one group per ``group`` value, one bar per ``hue`` value, one panel per ``facet``.

    Readable at any size: panels wrap four to a row, each panel is wide enough for its bars,
    group labels wrap to their slot, each value label sits above its error bar (turned upright
    when the bar is too narrow for it), and the legend sits below the panels.
    """
    facets = list(dict.fromkeys(df[facet])) if facet else [None]
    hues = list(dict.fromkeys(df[hue]))
    num_groups = max(len(dict.fromkeys((df if fv is None else df[df[facet] == fv])[group])) for fv in facets)
    longest_word = max((len(word) for g in df[group] for word in str(g).split()), default=1)
    bar_in = 0.32  # inches per bar: room for a 3-digit label over it
    # A group's slot holds its bars and its label's longest word (labels wrap at spaces).
    slot_in = max(len(hues) * bar_in + 0.35, (longest_word + 2) / CHARS_PER_INCH)
    panel_in = max(3.2, num_groups * slot_in + 0.9)
    ncols = min(4, len(facets))
    nrows = -(-len(facets) // ncols)
    fig = Figure(figsize=(panel_in * ncols, 3.0 * nrows + 0.9), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    width = 0.8 / max(1, len(hues))
    upright = slot_in * width < 0.3  # inches of one bar
    for ax, fv in zip(axes, facets, strict=False):
        sub = df if fv is None else df[df[facet] == fv]
        groups = list(dict.fromkeys(sub[group]))
        x = np.arange(len(groups))
        top = 0.0
        for i, hv in enumerate(hues):
            rows = sub[sub[hue] == hv].set_index(group).reindex(groups)
            heights = rows[value].to_numpy(dtype=float)
            has_err = bool(err) and err in rows
            yerr = np.nan_to_num(rows[err].to_numpy(dtype=float)) if has_err else np.zeros(len(groups))
            bars = ax.bar(x + (i - (len(hues) - 1) / 2) * width, np.nan_to_num(heights), width,
                          yerr=yerr if has_err else None, capsize=2, label=str(hv), color=_color(hv, i))
            for bar, h, e in zip(bars, heights, yerr, strict=True):
                if np.isfinite(h):
                    top = max(top, h + e)
                    ax.annotate(f"{h:.3g}", (bar.get_x() + bar.get_width() / 2, h + e), ha="center", va="bottom",
                                fontsize=7, rotation=90 if upright else 0, xytext=(0, 2), textcoords="offset points")
        ax.set_xticks(x, [_wrap(str(g), slot_in) for g in groups], fontsize=8)
        ax.set_ylim(0, top * (1.25 if upright else 1.12) if top > 0 else 1.0)
        ax.set_title(_wrap(str(fv) if fv is not None else title, panel_in), fontsize=9)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[len(facets):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(hues), fontsize=8, frameon=False, title=hue,
               title_fontsize=8)
    if title and facet:
        fig.suptitle(_wrap(title, panel_in * ncols), fontsize=10)
    return fig


def capacity_bars(df: pd.DataFrame, stem: str | Path | None, **kwargs: Any) -> list[Path]:
    return _maybe_save(capacity_bars_figure(df, **kwargs), stem)


LATENCY_METRICS = (("tbt_s_p99", "P99 TBT (s)"), ("ttft_s_p50", "P50 TTFT (s)"))


def latency_vs_qps_figure(df: pd.DataFrame, x: str = "qps", hue: str = "scheduler",
                          metrics: Sequence[tuple[str, str]] = LATENCY_METRICS,
                          slo: Mapping[str, float] | None = None, title: str = "", logy: bool = True) -> Figure:
    """One panel per metric, metric against ``x``, one line per ``hue`` value; SLO lines dashed."""
    fig = Figure(figsize=(4.2 * len(metrics), 3.5), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for ax, (col, label) in zip(axes, metrics, strict=True):
        for i, hv in enumerate(dict.fromkeys(df[hue])):
            sub = df[(df[hue] == hv) & df[col].notna()].sort_values(x)
            ax.plot(sub[x], sub[col], marker="o", ms=3, label=str(hv), color=_color(hv, i))
        if slo and col in slo:
            ax.axhline(slo[col], ls="--", color="k", lw=1, label="SLO")
        ax.set_xlabel(x)
        ax.set_ylabel(label)
        if logy:
            values = df[col].to_numpy(dtype=float)
            values = values[np.isfinite(values) & (values > 0)]
            _log_ticks(ax, values.min() if len(values) else 1.0, values.max() if len(values) else 10.0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(_wrap(title, fig.get_figwidth()), fontsize=10)
    return fig


def _log_ticks(ax: Any, low: float, high: float) -> None:
    """Plain-number labels on a log y axis, only as many as fit: 1-2-3-5 per decade over a
    short range, 1-2-5 over a few decades, powers of ten beyond; unlabelled minor ticks."""
    ax.set_yscale("log")
    decades = math.log10(max(high, 1e-12) / max(low, 1e-12))
    subs = (1.0, 2.0, 3.0, 5.0) if decades <= 1 else (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def latency_vs_qps(df: pd.DataFrame, stem: str | Path | None, **kwargs: Any) -> list[Path]:
    return _maybe_save(latency_vs_qps_figure(df, **kwargs), stem)


# ---------------------------------------------------------------------------------------------
# TBT and iterations


def tbt_cdf_figure(samples: Mapping[str, np.ndarray], slo_s: float | None = None, title: str = "TBT CDF") -> Figure:
    """Empirical CDF of every TBT gap per label (log x); the P99 of each marked."""
    fig = Figure(figsize=(5.0, 3.4))
    ax = fig.subplots()
    for i, (label, values) in enumerate(samples.items()):
        v = np.sort(np.asarray(values, dtype=float))
        if len(v) == 0:
            continue
        y = np.arange(1, len(v) + 1) / len(v)
        color = _color(label, i)
        ax.plot(v, y, label=f"{label} (P99 {np.percentile(v, 99) * 1e3:.0f} ms)", color=color)
    if slo_s is not None:
        ax.axvline(slo_s, ls="--", color="k", lw=1, label=f"SLO {slo_s:g}s")
    ax.axhline(0.99, ls=":", color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("time between tokens (s)")
    ax.set_ylabel("fraction of gaps")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:  # (none where no run has a gap, every request rejected: a UserWarning)
        ax.legend(fontsize=7, loc="lower right")
    if not any(len(values) for values in samples.values()):
        ax.text(0.5, 0.5, "no gaps between tokens (no request produced two)", transform=ax.transAxes, ha="center",
                va="center", fontsize=8, color="grey")
    fig.tight_layout()
    return fig


def tbt_cdf(samples: Mapping[str, np.ndarray], stem: str | Path | None, **kwargs: Any) -> list[Path]:
    return _maybe_save(tbt_cdf_figure(samples, **kwargs), stem)


def stall_mask(iterations: pd.DataFrame, requests: pd.DataFrame | None = None) -> np.ndarray:
    """Iterations that stall decoding: prefill-only (no decode tokens) while requests of the
    same replica are mid-decode, so they wait out the prefill. Every such iteration counts,
    back-to-back ones included.

    With ``requests`` (:func:`simulator.report.metrics.request_frame`) a request is mid-decode at an
    iteration's start if its first token came before and it had not completed; this is exact
    (a request prefilled by the previous prefill-only iteration is waiting too). Without it,
    a prefill-only iteration stalls when the last iteration before it that was not
    prefill-only carried decodes (those requests still wait).
    """
    it = iterations
    prefill_only = (it["num_decode_tokens"].to_numpy() == 0) & (it["num_prefill_tokens"].to_numpy() > 0)
    if requests is not None:
        mid_decode = np.zeros(len(it), dtype=np.int64)
        replica = it["replica_id"].to_numpy()
        started = it["started_at"].to_numpy(dtype=float)
        for rid in np.unique(replica):
            reqs = requests[requests["replica_id"] == rid]
            first = np.sort(reqs["first_token_at"].to_numpy(dtype=float))
            done = np.sort(np.nan_to_num(reqs["completed_at"].to_numpy(dtype=float), nan=np.inf))
            rows = replica == rid
            # Completion never precedes the first token, so started - completed = mid-decode.
            mid_decode[rows] = (np.searchsorted(first, started[rows], side="right")
                                - np.searchsorted(done, started[rows], side="right"))
        return prefill_only & (mid_decode > 0)
    # Decodes of the latest iteration that was not prefill-only, carried over prefill-only runs.
    carried = it["num_decode_tokens"].where(~prefill_only).groupby(it["replica_id"]).ffill()
    return prefill_only & (carried.fillna(0).to_numpy() > 0)


def iteration_timeline_figure(iterations: pd.DataFrame, start_at: float | None = None, end_at: float | None = None,
                              replica_id: int = 0, title: str = "", requests: pd.DataFrame | None = None) -> Figure:
    """Tokens per iteration over time (stacked prefill / decode) above iteration duration;
    stall iterations shaded. ``iterations`` is :meth:`RunResult.iteration_frame`; with
    ``requests`` (the run's request frame) stalls are exact (see :func:`stall_mask`)."""
    it = iterations[iterations["replica_id"] == replica_id].reset_index(drop=True)
    stalls = stall_mask(it, requests)
    keep = np.ones(len(it), dtype=bool)
    if start_at is not None:
        keep &= it["started_at"].to_numpy() >= start_at
    if end_at is not None:
        keep &= it["started_at"].to_numpy() <= end_at
    it, stalls = it[keep], stalls[keep]
    fig = Figure(figsize=(9.0, 4.6))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    t, w = it["started_at"].to_numpy(), it["duration_s"].to_numpy()
    dec, pre = it["num_decode_tokens"].to_numpy(), it["num_prefill_tokens"].to_numpy()
    top.bar(t, dec, width=w, align="edge", color="#1f77b4", label="decode tokens", linewidth=0)
    top.bar(t, pre, width=w, bottom=dec, align="edge", color="#ff7f0e", label="prefill tokens", linewidth=0)
    bottom.bar(t, w * 1e3, width=w, align="edge", color=np.where(stalls, "#d62728", "#7f7f7f"), linewidth=0)
    for ax in (top, bottom):
        for s_at, s_w in zip(t[stalls], w[stalls], strict=True):
            ax.axvspan(s_at, s_at + s_w, color="#d62728", alpha=0.12, lw=0)
    # Symlog: a few dozen decode tokens stay visible beside multi-thousand-token prefills.
    top.set_yscale("symlog", linthresh=32)
    top.set_ylabel("tokens / iteration (symlog)")
    top.legend(fontsize=8, loc="upper right")
    count = f"{int(stalls.sum())} decode stalls (prefill-only iterations while requests decode; shaded)"
    top.set_title(f"{title}: {count}" if title else f"replica {replica_id}: {count}", fontsize=10)
    bottom.set_ylabel("iteration (ms)")
    bottom.set_xlabel("simulated time (s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def iteration_timeline(iterations: pd.DataFrame, stem: str | Path | None, **kwargs: Any) -> list[Path]:
    return _maybe_save(iteration_timeline_figure(iterations, **kwargs), stem)


def pp_gantt_figure(stages: pd.DataFrame, start_at: float | None = None, end_at: float | None = None,
                    replica_id: int = 0, title: str = "") -> Figure:
    """Stage x time chart: each (micro-batch, stage) execution a box; white gaps are bubbles.

    ``stages`` columns: ``stage``, ``started_at``, ``duration_s``, ``micro_batch_id``, and
    optionally ``replica_id`` (rows of other replicas are dropped).
    """
    missing = {"stage", "started_at", "duration_s", "micro_batch_id"} - set(stages.columns)
    if missing:
        raise ValueError(f"stage table lacks columns {sorted(missing)}")
    st = stages
    if "replica_id" in st:
        st = st[st["replica_id"] == replica_id]
    if start_at is not None:
        st = st[st["started_at"] + st["duration_s"] >= start_at]
    if end_at is not None:
        st = st[st["started_at"] <= end_at]
    num_stages = int(stages["stage"].max()) + 1 if len(stages) else 1
    fig = Figure(figsize=(9.0, 0.6 * num_stages + 1.4))
    ax = fig.subplots()
    for s in range(num_stages):
        rows = st[st["stage"] == s]
        colors = [f"C{int(b) % 10}" for b in rows["micro_batch_id"]]
        ax.broken_barh(list(zip(rows["started_at"], rows["duration_s"], strict=True)), (s - 0.4, 0.8),
                       facecolors=colors, edgecolors="white", linewidth=0.3)
    span = (st["started_at"].min(), (st["started_at"] + st["duration_s"]).max()) if len(st) else (0.0, 1.0)
    busy = st.groupby("stage")["duration_s"].sum() if len(st) else pd.Series(dtype=float)
    width = max(span[1] - span[0], 1e-12)
    labels = [f"stage {s} ({busy.get(s, 0.0) / width:.0%} busy)" for s in range(num_stages)]
    ax.set_yticks(range(num_stages), labels)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (s)")
    ax.set_title(title or "pipeline stages (colour = micro-batch; gaps = bubbles)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def pp_gantt(stages: pd.DataFrame, stem: str | Path | None, **kwargs: Any) -> list[Path]:
    return _maybe_save(pp_gantt_figure(stages, **kwargs), stem)


# ---------------------------------------------------------------------------------------------
# Token budget


def tau_figure(result: Any) -> Figure:
    """Iteration time and throughput against tokens per iteration for a :class:`TauResult`."""
    tab = result.table
    fig = Figure(figsize=(9.0, 3.4))
    left, right = fig.subplots(1, 2)
    left.plot(tab["num_tokens"], tab["iteration_s"] * 1e3, label=f"hybrid iteration ({result.mix.num_decodes} decodes)")
    left.plot(tab["num_tokens"], tab["linear_layers_s"] * 1e3, label="linear layers only", ls="-.")
    left.axhline(result.tbt_slo_s * 1e3, ls="--", color="k", lw=1, label=f"TBT SLO {result.tbt_slo_s:g}s")
    right.plot(tab["num_tokens"], tab["throughput_tokens_per_s"], label="hybrid iteration")
    right.plot(tab["num_tokens"], tab["linear_tokens_per_s"], label="linear layers only", ls="-.")
    for ax in (left, right):
        if result.tau:
            ax.axvline(result.tau, color="#2ca02c", lw=1.2, label=f"tau = {result.tau}")
        ax.axvline(result.knee_tokens, color="#9467bd", lw=1, ls=":", label=f"knee ~ {result.knee_tokens}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("tokens per iteration")
        ax.grid(alpha=0.3)
    left.set_yscale("log")
    left.set_ylabel("time (ms)")
    right.set_ylabel("tokens / s")
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    r = result.config.replica
    fig.suptitle(f"token budget: {r.model} on {r.num_gpus}x {r.gpu} (tp={r.tp}, pp={r.pp})", fontsize=10)
    fig.tight_layout()
    return fig


def tau_plot(result: Any, stem: str | Path | None) -> list[Path]:
    return _maybe_save(tau_figure(result), stem)


# ---------------------------------------------------------------------------------------------
# From files (``simulate plot``)


def _setting_label(row: pd.Series, names: Sequence[str]) -> str:
    """``mistral-7b, tp=1, tbt_slo=0.1``: text values bare, numbers with their name."""
    return ", ".join(str(row[n]) if isinstance(row[n], str) else f"{n}={row[n]:g}" if isinstance(row[n], float)
                     else f"{n}={row[n]}" for n in names)


def sweep_counts(table: pd.DataFrame) -> tuple[int, int, int]:
    """(finished, failed, not run yet) points of a sweep table."""
    status = table["status"]
    return int((status == "ok").sum()), int((status == "error").sum()), int((status == "missing").sum())


def plot_sweep_table(info: dict, table: pd.DataFrame, folder: Path, out: Path, x: str = "qps",
                     hue: str = "scheduler") -> list[Path]:
    """Figures for a sweep's table (``info`` and ``table`` as
    :func:`simulator.planning.sweep.read_sweep_folder` reads them from ``folder``), finished or
    not: capacity bars (capacity mode) or latency curves (run mode) of the points finished so
    far; a partial sweep says so in the title."""
    from simulator.config.errors import ConfigError

    num_ok, num_failed, num_missing = sweep_counts(table)
    if num_ok == 0:
        raise ConfigError("plot sweep", f"{folder} has no finished points yet ({len(table)} planned, "
                          f"{num_failed} failed)", "run or resume the sweep first")
    note = f" [partial: {num_ok} of {len(table)} points]" if num_ok < len(table) else ""
    table = table[table["status"] == "ok"]
    entries = [names.split(",") for names in info["grid"]]  # grid keys; zipped ones vary together
    varied = [n for names in entries for n in names]
    hue_given = hue in table  # (asked for, or the scheduler column a sweep over schedulers has)
    if hue not in table:
        hue = varied[0] if varied else "point"
    fixed = {k: v for k, v in info["base"].items() if k in ("model", "gpu", "workload", "tp", "pp")}
    base = ", ".join(str(v) if isinstance(v, str) else f"{k}={v}" for k, v in fixed.items())
    if info["mode"] == "capacity":
        # The grid keys besides the colour's: a key zipped with it keeps its partners (their values set the bars
        # of one colour apart; dropping them left one group holding two bars of a colour).
        others = [rest for names in entries if (rest := [n for n in names if n != hue])]
        facet_names: list[str] = []
        if len(others) > 1:
            # Many settings: one panel per value of the first grid key, bars grouped by the rest.
            facet_names, others = others[0], others[1:]
        group_names = [n for names in others for n in names]
        table = table.assign(
            setting=table.apply(_setting_label, axis=1, names=group_names) if group_names else "all",
            panel=table.apply(_setting_label, axis=1, names=facet_names) if facet_names else "")
        slos = list(dict.fromkeys(table["slo"].astype(str))) if "slo" in table else []
        slo = f"at {slos[0]}" if len(slos) == 1 else "at each setting's SLO"
        seeds = int(info["base"].get("num_seeds", 1))
        spread = f", mean of {seeds} seeds (bars: std)" if seeds > 1 else ""
        # What the points searched: the rate (capacity_qps) or a closed loop's users (capacity_users).
        units = [u for u in ("qps", "users") if f"capacity_{u}" in table and table[f"capacity_{u}"].notna().any()]
        if len(units) != 1:
            raise ConfigError("plot sweep", f"{folder}'s points searched {' and '.join(units) or 'neither rates nor users'}"
                              ", which one axis cannot show", "plot a sweep whose points all search the rate, or all "
                              "the users (users = true)")
        unit = units[0]
        ylabel = f"capacity ({'users' if unit == 'users' else 'QPS'})"
        title = f"{ylabel} {slo}{spread}" + (f" · {base}" if base else "") + note
        fig = capacity_bars_figure(table, group="setting", hue=hue, facet="panel" if facet_names else None,
                                   title=title, value=f"capacity_{unit}", err=f"capacity_{unit}_std", ylabel=ylabel)
        return save(fig, Path(out) / "capacity")
    if x not in table:  # the rate is no column: x takes a grid key, before the default colour does
        x = next((n for n in varied if not (hue_given and n == hue)), "point")
    if hue == x:  # the default colour fell on the x axis: each x would be a series of its own
        hue = next((n for n in varied if n != x), None)
    if hue is None:  # one key varied, on x: one series
        table, hue = table.assign(series="all points"), "series"
    # A line is one configuration: every key that varies, but x, tells the series apart (the colour alone joined
    # sarathi at chunk 256 and at 512 into one zigzag). One such key colours the lines by its values; several
    # label each line by all of them, the colour key's first.
    keys = [n for n in dict.fromkeys([hue, *varied]) if n != x and n in table and table[n].astype(str).nunique() > 1]
    if len(keys) == 1:
        hue = keys[0]
    elif len(keys) > 1:
        table, hue = table.assign(series=table.apply(_setting_label, axis=1, names=keys)), "series"
    title = f"latency against {x}" + (f" · {base}" if base else "") + note
    # (points written without these metrics, by another version, ended in a KeyError traceback; an audit)
    metrics = tuple((c, label) for c, label in LATENCY_METRICS if c in table and table[c].notna().any())
    if not metrics:
        raise ConfigError("plot sweep", f"{folder}'s finished points record none of "
                          f"{', '.join(c for c, _ in LATENCY_METRICS)} (written by another version of servesim?)",
                          "rerun the sweep into a new --out")
    return latency_vs_qps(table, Path(out) / f"latency_vs_{x}", x=x, hue=hue, title=title, metrics=metrics)


# The figures of summary.json a re-simulation must give again, bit for bit, for its plots to be the run's.
REPRODUCED_FIGURES = ("num_requests", "num_finished", "num_rejected", "num_iterations", "ttft_s_mean", "tpot_s_mean",
                      "e2e_s_max")


def unreproduced(summary_path: Path, summary: dict[str, Any]) -> str | None:
    """What of the run's ``summary.json`` at ``summary_path`` a re-simulation's ``summary`` does not give again
    (one line), None where every figure of :data:`REPRODUCED_FIGURES` it has is equal, or it has none (no file,
    unreadable)."""
    import json

    try:
        old = json.loads(summary_path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(old, dict):
        return None
    differ = [f"{k} {old[k]!r} -> {summary.get(k)!r}" for k in REPRODUCED_FIGURES if k in old and old[k] != summary.get(k)]
    return "; ".join(differ) or None


def plot_run(path: Path, out: Path, notes: list[str] | None = None) -> list[Path]:
    """Re-simulate a run from its ``config.json`` (bit-for-bit) and draw TBT CDF, timeline and PP Gantt; where the
    folder's ``summary.json`` says otherwise than the re-simulation (a run made by other code), a line in ``notes``."""
    from simulator.config.options import load_config_file
    from simulator.report.metrics import request_frame, summarize, tbt_samples
    from simulator.simulation import simulate

    path = Path(path)
    config_path = path / "config.json" if path.is_dir() else path
    config = load_config_file(config_path, field="plot run")
    result = simulate(config)
    differ = unreproduced(config_path.parent / "summary.json", summarize(result))
    if differ is not None and notes is not None:
        notes.append(f"the re-simulation of {config_path} does not reproduce its summary.json ({differ}): the run "
                     f"was made by other code (or its config.json edited since), and these figures are this code's")
    out = Path(out)
    label = config.scheduler.name
    written = tbt_cdf({label: tbt_samples(result)}, out / "tbt_cdf", title=f"TBT CDF: {config.replica.model}, {label}")
    iters = result.iteration_frame()
    requests = request_frame(result)
    # One timeline a run; a disaggregated run's workers do different work: one for the first prefill worker and
    # one for the first decode worker (ids: the prefill ranks first, simulator.engine.disagg), whose steps the
    # TBT comes from.
    timelines = [("iteration_timeline", 0, "")]
    if config.is_disaggregated:
        from simulator.config.disagg_layout import layout_of

        layout = layout_of(config)
        assert layout is not None
        first_decode = layout.num_prefill_workers
        timelines = [("iteration_timeline_prefill", 0, "prefill worker 0"),
                     ("iteration_timeline_decode", first_decode, f"decode worker (replica {first_decode})")]
    for stem, replica_id, what in timelines:
        own = iters["started_at"][iters["replica_id"] == replica_id]
        mid = float(own.median()) if len(own) else 0.0
        written += iteration_timeline(iters, out / stem, start_at=mid, end_at=mid + 10.0, replica_id=replica_id,
                                      title=what, requests=requests)
    if config.replica.pp > 1 and hasattr(result, "stage_frame"):
        stages = result.stage_frame()
        if len(stages):
            t0 = float(stages["started_at"].median())
            written += pp_gantt(stages, out / "pp_gantt", start_at=t0, end_at=t0 + 2.0)
    return written
