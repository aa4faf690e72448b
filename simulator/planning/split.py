"""Planning disaggregated serving: goodput per GPU, the split search, the comparison.

**Goodput** (DistServe, OSDI'24): the largest Poisson request rate at which at least
``attainment`` (90%) of requests meet *both* the TTFT SLO and the TPOT SLO
(:func:`simulator.report.disagg_metrics.slo_attainment`), divided by the GPUs the layout
occupies. Search: like :mod:`simulator.planning.capacity` (common random numbers: every trial of
one seed draws the same lengths and the same unit-rate arrivals scaled by 1/QPS), bracket
by doubling/halving from a start rate, then bisect to a relative gap ``rel_tol``. A trial
stops early (the engine's ``watch`` hook) once more requests than the SLO tolerates have
already waited longer than the TTFT SLO for their first token: the verdict is certain.

Sustained (:func:`simulator.planning.capacity.sustained`, capacity's own judgement): goodput is a rate
the layout sustains, so a trial that meets the attainment still fails when its run is overloaded (its
queue still growing at the last arrival), and is too short to judge, no pass, when its arrivals span less
than the TTFT SLO: a short trial at a rate the layout cannot drain meets it anyway. A search whose
answer lies below such trials reports it as a lower bound (``at_least``, ``too_short``) set by
``--num-requests``, not by the layout.

**Split search**: for a fixed GPU count, every (prefill replicas x prefill TP, decode
replicas x decode TP) that uses exactly those GPUs and fits in memory, each searched for
goodput; the best goodput per GPU wins.

**Comparison**: on the same GPUs, workload and SLOs, aggregated ``vllm`` and ``sarathi``
(every TP that fits, replicas filling the GPUs; sarathi at each token budget tau of a
grid, keeping its best) beside the disaggregated splits, one row per candidate.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, NamedTuple

import pandas as pd

from simulator import simulation
from simulator.config.disagg_layout import SPLIT_POOL_SCHEDULER, layout_of, num_gpus_of
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.config.schedulers import SCHEDULERS
from simulator.engine.kvcache import build_kv_cache
from simulator.engine.replica import memory_shortfall
from simulator.planning.capacity import TTFTWatch, format_against, judged_requests, sustained
from simulator.planning.options import PlanSLO
from simulator.planning.search import Limits, largest_passing
from simulator.util.interrupts import WorkerPool
from simulator.util.text import percent

DEFAULT_TAUS = (256, 512, 1024, 2048)


@dataclass(frozen=True)
class GoodputSLO(PlanSLO):
    """DistServe's targets (:class:`PlanSLO`'s, validated the same way) at DistServe's defaults:
    90% of requests with TTFT <= 2 s and TPOT <= 0.1 s."""

    tpot_s: float = 0.1
    attainment: float = 0.9

    def describe(self) -> str:
        return f"{percent(self.attainment)} of requests with TTFT <= {self.ttft_s:g}s and TPOT <= {self.tpot_s:g}s"


class GoodputTrial(NamedTuple):
    """One goodput trial: its rate, SLO attainment (a stopped trial's: the upper bound it was stopped at),
    and verdict. ``reason``: why it is no pass ("" where it passed); ``too_short``: it met the attainment,
    but its arrivals span less than the TTFT SLO, too short to judge (:func:`~simulator.planning.capacity.sustained`)."""

    qps: float
    attainment: float
    passed: bool
    reason: str = ""
    too_short: bool = False
    stopped_early: bool = False  # stopped once certain to fail: ``attainment`` is the bound it was stopped at


@dataclass
class GoodputResult:
    """One layout's goodput search: its trials, the rate found, per GPU."""

    label: str
    family: str  # vllm, sarathi, disagg
    config: RunConfig
    num_gpus: int
    rate_qps: float = 0.0
    reason: str = ""
    trials: list[GoodputTrial] = field(default_factory=list)
    wall_s: float = 0.0
    rel_tol: float = 0.05  # how finely rate_qps was bisected
    # Bisected only coarsely below a better layout of its family (branch and bound): rate_qps is
    # then a lower bound, the true rate in [rate_qps, failed_qps), never ranked beside exact rates.
    coarse: bool = False
    failed_qps: float | None = None  # the lowest rate that failed (None: none did)
    # No trial above rate_qps failed outright (the search limit or max_trials came first), or those above it
    # were too short to judge: the rate is at least rate_qps, with no upper bound found.
    at_least: bool = False
    # The rates above rate_qps were too short a trial to judge (their arrivals span less than the TTFT SLO): the
    # answer is a lower bound set by --num-requests (capacity's capacity_limited_by_trial_length).
    too_short: bool = False

    @property
    def goodput_per_gpu(self) -> float:
        return self.rate_qps / self.num_gpus

    def row(self) -> dict[str, Any]:
        cfg = self.config
        return {"label": self.label, "family": self.family, "num_gpus": self.num_gpus, "rate_qps": self.rate_qps,
                "goodput_per_gpu": self.goodput_per_gpu, "prefill_pool": cfg.prefill_pool or "",
                "decode_pool": cfg.decode_pool or "", "tp": cfg.replica.tp if not cfg.is_disaggregated else 0,
                "num_replicas": cfg.num_replicas if not cfg.is_disaggregated else 0,
                "scheduler": cfg.scheduler.name if not cfg.is_disaggregated else "disagg",
                "chunk_size": cfg.scheduler.chunk_size or 0, "num_trials": len(self.trials), "rel_tol": self.rel_tol,
                "coarse": self.coarse, "failed_qps": self.failed_qps, "at_least": self.at_least,
                "limited_by_trial_length": self.too_short, "reason": self.reason}


def goodput_trial(config: RunConfig, qps: float, slo: GoodputSLO, early_exit: bool = True) -> GoodputTrial:
    """Simulate ``config`` at ``qps`` and judge it: it passes when its SLO attainment is at least
    ``slo.attainment`` and the run sustains the rate, as a capacity trial judges that
    (:func:`simulator.planning.capacity.sustained`: not overloaded, and long enough to tell). A trial
    stopped as certain to fail reports the upper bound it was stopped at (``1 - missed so far / requests``)."""
    watch = TTFTWatch(slo.ttft_s, slo.attainment)
    result = simulation.simulate(config.replace(workload__qps=qps), watch=watch if early_exit else None)
    stopped = result.extra.get("stopped")
    if stopped is not None:  # certain miss: report the bound it was stopped at
        return GoodputTrial(qps, 1.0 - watch.num_late / watch.num_requests, False, str(stopped), stopped_early=True)
    as_capacity = slo.capacity_slo()  # DistServe's goodput as capacity's --criterion goodput judges it
    cols, good = judged_requests(result, as_capacity)
    attainment = float(good.mean()) if len(good) else math.nan
    if not attainment >= slo.attainment:
        return GoodputTrial(qps, attainment, False, f"SLO attainment {format_against(100 * attainment, 100 * slo.attainment)}% "
                            f"< {percent(slo.attainment)}")
    reasons, too_short = sustained(result, cols, as_capacity)
    return GoodputTrial(qps, attainment, not reasons, "; ".join(reasons), too_short)


def attainment_at(config: RunConfig, qps: float, slo: GoodputSLO, early_exit: bool = True) -> float:
    """SLO attainment of ``config`` at ``qps`` (:func:`goodput_trial`'s; a stopped trial's upper bound)."""
    return goodput_trial(config, qps, slo, early_exit).attainment


def goodput_search(config: RunConfig, slo: GoodputSLO, label: str = "", family: str = "", qps_start: float = 1.0,
                   rel_tol: float = 0.05, min_qps: float = 0.01, max_qps: float = 500.0, max_trials: int = 24,
                   incumbent_qps: float | None = None, coarse_rel_tol: float = 0.25) -> GoodputResult:
    """Largest QPS whose trial passes (:func:`goodput_trial`: attainment >= ``slo.attainment``, sustained),
    by bracket, then bisect. Trials too short to judge count as no pass; an answer below them is a lower
    bound (``at_least``, ``too_short``), as is one no trial above failed.

    With ``incumbent_qps`` (the best rate of a competitor on as many GPUs), the first trial
    runs there; a layout that fails it cannot win, and is bisected only to ``coarse_rel_tol``.
    """
    start = time.perf_counter()
    res = GoodputResult(label or (config.prefill_pool or config.scheduler.name), family, config, num_gpus_of(config))

    def passes(qps: float) -> bool:
        trial = goodput_trial(config, qps, slo)
        res.trials.append(trial)
        return trial.passed

    limits = Limits(rel_tol, min_qps, max_qps, max_trials)
    if not incumbent_qps:
        found = largest_passing(passes, qps_start, limits)
    elif passes(incumbent_qps):
        found = largest_passing(passes, incumbent_qps, limits, passed_qps=incumbent_qps, num_tried=1)
    else:  # it cannot win: bisected below the incumbent only coarsely
        rel_tol = max(rel_tol, coarse_rel_tol)
        found = largest_passing(passes, incumbent_qps, replace(limits, rel_tol=rel_tol), failed_qps=incumbent_qps,
                                num_tried=1)
        res.reason = "below the best so far (coarse): "
        res.coarse = True
    lo, hi = found.passed_qps, found.failed_qps
    failed = next(t for t in res.trials if t.qps == hi) if hi is not None else None
    res.rate_qps = lo or 0.0
    res.failed_qps = hi
    if failed is not None and failed.too_short:
        # The least rate above every pass was too short a trial to judge, and so is every rate above it (a
        # trial's arrivals span 1 / rate): the passes show a lower bound, not where the SLO breaks.
        res.too_short = True
        why = failed.reason.removeprefix("too short to judge: ")
        if lo is None:
            res.reason = f"not found: no trial down to {hi:.3g} QPS was long enough to judge ({why})"
        else:
            res.at_least = True
            res.reason += f"at least {lo:.4g} QPS: the trials above it are too short to judge; at {hi:.4g} QPS {why}"
    elif lo is None and found.stop == "none_passes":
        res.reason = f"misses the SLO down to {hi:.3g} QPS ({failed.reason if failed is not None else ''})"
    elif hi is None:
        res.at_least = lo is not None
        if found.stop == "max_qps":
            res.reason = f"meets the SLO up to the search limit {max_qps:g} QPS"
        elif lo is not None:
            res.reason = f"still meets the SLO at {lo:.4g} QPS after {found.num_trials} trials, the most allowed"
    elif lo:
        res.reason += f"passes at {lo:.4g}, fails at {hi:.4g} QPS"
    res.rel_tol = rel_tol
    res.wall_s = time.perf_counter() - start
    return res


def fits(config: RunConfig) -> bool:
    """Whether every replica of ``config`` holds its weights and a max_model_len KV cache, as
    its run sizes the cache (watermark included). Stricter than a run for a prefill pool,
    which a run lets reject long prompts one by one: a planner's layout serves every request."""
    return fit_problem(config) is None


def engine_seq_limit(config: RunConfig) -> int:
    """The sequence cap the engine of ``config``'s decoding replicas takes with no ``--max-num-seqs`` (a
    disaggregated config's decode pool's): the policy's own rule on that replica's GPU and KV cache (SGLang's by its
    cache, which only the memory plan knows; the others' by the GPU alone)."""
    layout = layout_of(config)
    replica, sched = ((layout.decode_replica, layout.decode_scheduler) if layout is not None
                      else (config.replica, config.scheduler))
    sched = replace(sched, max_num_seqs=None)
    try:
        blocks, _ = build_kv_cache(replica, sched)
        kv_tokens: int | None = blocks.num_blocks * blocks.block_size
    except ConfigError:  # (a layout that cannot hold the model: fits() drops it)
        kv_tokens = None
    return sched.seq_limit(replica.gpu_spec, kv_tokens, replica.effective_max_model_len)


def fit_problem(config: RunConfig) -> str | None:
    """Why ``config`` does not :func:`fits` (the first replica's shortfall, or the config's refusal), or None."""
    try:
        layout = layout_of(config)
        pairs = ([(layout.prefill_replica, layout.prefill_scheduler), (layout.decode_replica, layout.decode_scheduler)]
                 if layout is not None else [(config.replica, config.scheduler)])
        if layout is not None and layout.mixed is not None:
            pairs.append((layout.mixed_replica, layout.mixed_scheduler))
        for replica, sched in pairs:
            problem = memory_shortfall(replica, sched)
            if problem is not None:
                return str(problem)
    except ConfigError as err:
        return str(err)
    return None


def split_candidates(config: RunConfig, num_gpus: int, tps: Sequence[int] = (1, 2, 4, 8),
                     dropped: list[str] | None = None) -> list[RunConfig]:
    """Every disaggregated layout of exactly ``num_gpus`` GPUs (pools of one TP each) that fits.
    A pool's replica keeps the run's ``pp`` and attention DP, so it holds ``tp x pp x dp`` GPUs.
    ``dropped``, where given, gets one line for each layout that does not fit, with why."""
    out = []
    base = config.replace(prefill_pool=None, decode_pool=None, mixed_pool=None)
    per_tp = base.replica.pp * base.replica.attention_dp  # GPUs a replica holds per TP rank
    # The pools' strings say the pp and dp they keep and the scheduler they run (DistServe's whole prompts, not the
    # run's --scheduler a pool without sched= takes): a row's pool, passed back to `run`, is the same layout.
    keep = (f",pp={base.replica.pp}" if base.replica.pp > 1 else "") + (
        f",dp={base.replica.attention_dp}" if base.replica.attention_dp > 1 else "") + f",sched={SPLIT_POOL_SCHEDULER}"
    for tp_p in tps:
        for tp_d in tps:
            g_p, g_d = tp_p * per_tp, tp_d * per_tp
            for n_p in range(1, num_gpus // g_p + 1):
                rest = num_gpus - n_p * g_p
                if rest < g_d or rest % g_d:
                    continue
                try:
                    cand = base.replace(prefill_pool=f"{n_p}x(tp={tp_p}{keep})", decode_pool=f"{rest // g_d}x(tp={tp_d}{keep})",
                                        num_replicas=1)
                except ConfigError as err:  # (a layout the config refuses, e.g. an NVLink KV link across nodes: said)
                    if dropped is not None:
                        dropped.append(f"P {n_p}x(tp={tp_p}) + D {rest // g_d}x(tp={tp_d}): {err.problem}")
                    continue
                problem = fit_problem(cand)
                if problem is None:
                    out.append(cand)
                elif dropped is not None:
                    dropped.append(f"P {cand.prefill_pool} + D {cand.decode_pool}: {problem}")
    # Balanced splits first: with pruning, a strong early incumbent makes the rest cheap.
    return sorted(out, key=lambda c: abs(2 * layout_of(c).num_prefill_gpus - num_gpus))


def aggregated_candidates(config: RunConfig, num_gpus: int, tps: Sequence[int] = (1, 2, 4, 8),
                          taus: Sequence[int] = DEFAULT_TAUS) -> list[tuple[str, RunConfig]]:
    """vllm and sarathi (each tau) on ``num_gpus`` GPUs: ``num_gpus / (tp x pp x dp)`` replicas of each TP
    that fits (a replica keeps the run's ``pp`` and attention DP); a tau whose arm fits at no TP where vllm's does is
    refused on ``--taus``."""
    out = []
    unfit: dict[int, str] = {}  # tau -> why its arm does not fit (the first TP's)
    base = config.replace(prefill_pool=None, decode_pool=None, mixed_pool=None)
    per_tp = base.replica.pp * base.replica.attention_dp
    # The arms take the prefix-cache flags as a run of vllm or sarathi would: neither caches by default, so a
    # --cpu-kv-gib meant for the layouts' prefill pools (which cache as the run's scheduler does) goes to an arm only
    # where --prefix-caching turns its cache on (a run refuses a CPU tier of a cache that is off: every arm had been
    # dropped, unsaid).
    def cpu_kv_gib(name: str) -> float:
        on = base.scheduler.prefix_caching
        caches = SCHEDULERS[name].prefix_cache is not None if on is None else on
        return base.scheduler.cpu_kv_gib if caches else 0.0

    for tp in tps:
        if num_gpus % (tp * per_tp):
            continue
        try:
            vllm = base.replace(replica__tp=tp, num_replicas=num_gpus // (tp * per_tp), scheduler__name="vllm",
                                scheduler__chunk_size=None, scheduler__max_num_batched_tokens=None,
                                scheduler__cpu_kv_gib=cpu_kv_gib("vllm"))
        except ConfigError:
            continue
        if not fits(vllm):
            continue
        out.append(("vllm", vllm))
        for tau in taus:
            sarathi = vllm.replace(scheduler__name="sarathi", scheduler__chunk_size=tau,
                                   scheduler__cpu_kv_gib=cpu_kv_gib("sarathi"))
            problem = fit_problem(sarathi)  # (a budget's activations may not fit where vllm's do)
            if problem is None:
                out.append(("sarathi", sarathi))
            else:
                unfit.setdefault(tau, f"tp={tp}: {problem}")
    held = {c.scheduler.chunk_size for name, c in out if name == "sarathi"}
    if out and (never := [tau for tau in taus if tau not in held]):  # (it failed after a search, naming another flag)
        raise ConfigError("--taus", f"a token budget of {never[0]:,} fits no layout ({unfit[never[0]]})",
                          "give --taus budgets whose steps fit, e.g. 256,512,1024,2048")
    return out


def label_of(config: RunConfig) -> str:
    if config.is_disaggregated:
        return f"P {config.prefill_pool} + D {config.decode_pool}"
    s = config.scheduler
    tau = f" tau={s.chunk_size}" if s.name == "sarathi" else ""
    return f"{s.name}{tau} {config.num_replicas}x(tp={config.replica.tp})"


def _job(config: RunConfig, slo: GoodputSLO, family: str, qps_start: float) -> GoodputResult:
    return goodput_search(config, slo, label_of(config), family, qps_start=qps_start)


def search_all(candidates: Sequence[tuple[str, RunConfig]], slo: GoodputSLO, qps_start: float = 1.0, workers: int = 1,
               on_done: Callable[[GoodputResult], None] | None = None, prune: bool = True) -> list[GoodputResult]:
    """Goodput search of every candidate, in order.

    ``prune`` (sequential only): each search starts at the best rate its family (vllm,
    sarathi, disagg) has reached so far and bisects a layout that misses it only coarsely
    (branch and bound: each family's best and its rate are exact to ``rel_tol``, the
    others' rates to 25%), and a search started at the incumbent bisects other rates than one
    started at ``qps_start``: the rows, and the best layout within the tolerance, differ from
    unpruned searches. ``workers > 1`` runs every search in full in a process pool: the same
    results as ``workers=1, prune=False``. Either way the results are deterministic.
    """
    jobs = [(cfg, slo, family, qps_start) for family, cfg in candidates]
    results: list[GoodputResult] = []
    if workers <= 1:
        best: dict[str, float] = {}
        for cfg, _, family, _ in jobs:
            incumbent = best.get(family, 0.0)
            res = goodput_search(cfg, slo, label_of(cfg), family, qps_start=qps_start,
                                 incumbent_qps=incumbent if prune and incumbent > 0 else None)
            best[family] = max(incumbent, res.rate_qps)
            results.append(res)
            if on_done:
                on_done(res)
    else:
        # Ctrl-C or SIGTERM: KeyboardInterrupt here, and the searches still running are stopped.
        with WorkerPool(min(workers, len(jobs))) as pool:  # (no idle processes started)
            for future in pool.submit_all(_job, jobs):
                results.append(future.result())
                if on_done:
                    on_done(results[-1])
    return results


def results_frame(results: Sequence[GoodputResult]) -> pd.DataFrame:
    df = pd.DataFrame([r.row() for r in results])
    if len(df):
        df["best_in_family"] = df["goodput_per_gpu"] == df.groupby("family")["goodput_per_gpu"].transform("max")
    return df


def trials_frame(results: Sequence[GoodputResult]) -> pd.DataFrame:
    """Every trial: its rate, SLO attainment and verdict (``passed``, ``too_short``, ``reason``: why it is no pass)."""
    columns = ["label", "family", *GoodputTrial._fields]
    rows = [{"label": r.label, "family": r.family, **t._asdict()} for r in results for t in r.trials]
    return pd.DataFrame(rows, columns=columns)


def slo_dict(slo: GoodputSLO) -> dict[str, Any]:
    return asdict(slo)


FAMILY_COLORS = {"vllm": "#d62728", "sarathi": "#2ca02c", "disagg": "#1f77b4"}


def comparison_figure(results: pd.DataFrame, trials: pd.DataFrame, slo: GoodputSLO, title: str = ""):  # noqa: ANN201
    """Left: goodput per GPU of every candidate, grouped by family, best of each labelled; a
    layout searched only coarsely (``coarse``) is a hatched, faint bar marked "bound" (its rate
    is a lower bound, not a rank), and a rate that is a lower bound otherwise (``at_least``) reads ">=". Right: SLO attainment against QPS for the best candidate of
    each family, the target marked."""
    from matplotlib.figure import Figure

    df = results.sort_values(["family", "goodput_per_gpu"], ascending=[True, False], kind="stable").reset_index(drop=True)
    fig = Figure(figsize=(12, max(4.8, 1.6 + 0.2 * len(df))))  # (a bar a fifth of an inch: 21 layouts were crammed)
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.4, 1]})
    colors = [FAMILY_COLORS.get(f, "C7") for f in df["family"]]
    coarse = df["coarse"].astype(bool) if "coarse" in df else pd.Series(False, index=df.index)
    # a lower bound either way: searched coarsely, or no trial above it failed or was long enough to judge
    bound = coarse | (df["at_least"].astype(bool) if "at_least" in df else False)
    bars = ax.barh(range(len(df)), df["goodput_per_gpu"], color=colors)
    for bar, is_bound in zip(bars, coarse, strict=True):
        if is_bound:
            bar.set_alpha(0.4)
            bar.set_hatch("//")
    ax.set_yticks(range(len(df)), [f"{label} (bound)" if b else label for label, b in zip(df["label"], coarse, strict=True)],
                  fontsize=7)
    ax.invert_yaxis()
    if len(df) and df["goodput_per_gpu"].max() > 0:  # room for the value labels right of the longest bar
        ax.set_xlim(0, 1.2 * float(df["goodput_per_gpu"].max()))
    ax.set_xlabel("goodput per GPU\n(req/s at which the SLO attainment holds)")  # (two lines: one ran into ax2's)
    ax.set_title(title or "goodput per GPU", fontsize=10)
    for i, row in df.iterrows():
        ax.text(row["goodput_per_gpu"], i, f" {'>= ' if bound[i] else ''}{row['goodput_per_gpu']:.2f}", va="center",
                fontsize=7)
    best = results.sort_values("goodput_per_gpu", ascending=False, kind="stable").groupby("family", sort=False).head(1)
    for row in best.itertuples():
        t = trials[trials["label"] == row.label].sort_values("qps")
        color = FAMILY_COLORS.get(row.family, "C7")
        # a trial stopped once certain to fail is a bound (hollow), not a measurement: the line joins measured ones
        stopped = t["stopped_early"].astype(bool) if "stopped_early" in t else pd.Series(False, index=t.index)
        measured = t[~stopped]
        ax2.plot(measured["qps"], measured["attainment"], "o-", color=color,
                 label=f"{row.label} ({row.goodput_per_gpu:.2f}/GPU)")
        ax2.plot(t.loc[stopped, "qps"], t.loc[stopped, "attainment"], "o", mfc="none", color=color)
    ax2.axhline(slo.attainment, color="k", ls="--", lw=1)
    ax2.set_xlabel("request rate (QPS)\nhollow: stopped once certain to fail, at the rate it was stopped at")
    ax2.set_ylabel("SLO attainment")
    ax2.set_title(f"best of each: {slo.describe()}", fontsize=9)
    ax2.legend(fontsize=7, loc="lower left")
    ax2.set_ylim(-0.02, 1.02)
    fig.tight_layout()
    return fig


def comparison_plot(results: pd.DataFrame, trials: pd.DataFrame, slo: GoodputSLO, stem, title: str = ""):  # noqa: ANN001, ANN201
    from simulator.report.plots import save

    return save(comparison_figure(results, trials, slo, title), stem)
