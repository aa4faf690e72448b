"""Capacity search: a bracketable answer, exact early exit, capacity 0 with a reason, tau, CLI."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from helpers import ConstantCostModel
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.engine import cluster
from simulator.engine.tbt import GapLog, same_gaps
from simulator.planning import capacity as capacity_module
from simulator.planning.capacity import (
    SLO,
    GapsAbove,
    OverloadWatch,
    SearchSettings,
    certain_fail_count,
    find_capacity,
    run_trial,
    search_seed,
)
from simulator.planning.tau import DecodeMix, choose_tau, knee_tokens
from simulator.simulation import simulate

runner = CliRunner()

ITERATION_S = 0.01
NUM_SLOTS = 4
NUM_OUTPUT = 10


def _price_all(monkeypatch: pytest.MonkeyPatch, load) -> None:  # noqa: ANN001
    """Every cost model a run or a capacity search loads is ``load(spec, replica, engine)``."""
    monkeypatch.setattr(cluster, "load_cost_model", load)
    monkeypatch.setattr(capacity_module, "load_cost_model", load)


@pytest.fixture
def constant_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every iteration takes ITERATION_S whatever its batch."""
    _price_all(monkeypatch, lambda spec, replica, engine=None: ConstantCostModel(replica, ITERATION_S))


def slots_config(num_requests: int = 512, **changes) -> RunConfig:
    """NUM_SLOTS requests at a time, each needing exactly NUM_OUTPUT iterations (one prefill of
    16 tokens that yields the first token, then NUM_OUTPUT - 1 decodes): with constant
    iterations this is a queue with NUM_SLOTS servers of deterministic service
    NUM_OUTPUT * ITERATION_S, i.e. saturated at MU requests/s."""
    return RunConfig().replace(
        replica__model="mistral-7b", scheduler__name="sarathi", scheduler__max_num_seqs=NUM_SLOTS,
        scheduler__chunk_size=64, workload__name="fixed", workload__prompt_tokens=16,
        workload__output_tokens=NUM_OUTPUT, workload__num_requests=num_requests, workload__qps=10.0, **changes)


MU = NUM_SLOTS / (NUM_OUTPUT * ITERATION_S)  # 40 requests/s


def test_capacity_brackets_the_service_rate(constant_cost):
    # Scheduling delay limit 0.2 s. Below MU the queue is stable (waits of a few iterations at
    # moderate load); above it the backlog grows at (qps - MU) and the median request, which
    # arrives at n / (2 qps), waits ~(1 - MU/qps) n / (2 MU) -- over 0.2 s once
    # qps > MU / (1 - 0.4 MU / n) = 41.3 for n = 512. So capacity lies in [0.75 MU, 1.04 MU].
    slo = SLO(tbt_s=0.05, sched_delay_s=0.2)
    result = search_seed(slots_config(), slo, SearchSettings(qps_start=10.0))
    assert 0.75 * MU <= result.capacity_qps <= MU / (1 - 0.4 * MU / 512) + 0.5
    passed = [t for t in result.trials if t.passed]
    failed = [t for t in result.trials if not t.passed]
    assert passed and failed
    assert max(t.qps for t in passed) == result.capacity_qps
    assert min(t.qps for t in failed) > result.capacity_qps
    gap = (min(t.qps for t in failed) - result.capacity_qps) / min(t.qps for t in failed)
    assert gap <= 0.025
    # TBT is one constant iteration everywhere, so only the queue can fail a trial.
    assert all("scheduling delay" in t.reason or "overloaded" in t.reason for t in failed)
    assert result.at_capacity is not None and result.at_capacity.tbt_s_p99 == pytest.approx(ITERATION_S)


def test_a_trial_too_short_to_build_a_queue_is_no_pass(constant_cost):
    """64 requests at any rate over MU arrive in under the 2 s scheduling-delay limit, and the server drains them
    (64 / MU = 1.6 s) before the median waits 2 s: every rate up to --max-qps passed ("capacity at least 1000 QPS"
    for a server that sustains 40). Such a trial is too short to judge: the answer is the most a long enough trial
    shows, a lower bound that says why."""
    slo = SLO(tbt_s=0.05, sched_delay_s=2.0)
    report = find_capacity(slots_config(num_requests=64), slo, SearchSettings(qps_start=10.0))
    seed = report.seeds[0]
    assert seed.capacity_qps <= MU and seed.at_least and seed.too_short
    assert "too short to judge" in seed.reason and "--num-requests" in seed.reason
    short = [t for t in seed.trials if t.too_short]
    assert short and all(not t.passed and t.arrival_span_s < 2.0 for t in short)
    assert all(t.arrival_span_s >= 2.0 for t in seed.trials if t.passed)
    summary = report.summary()
    assert summary["capacity_is_lower_bound"] and summary["capacity_limited_by_trial_length"]
    long_enough = find_capacity(slots_config(num_requests=512), slo, SearchSettings(qps_start=10.0))
    assert not long_enough.summary()["capacity_limited_by_trial_length"]


def test_a_trial_whose_queue_still_grows_past_the_limit_fails(constant_cost):
    """10% over MU for 512 requests: the median request waits ~0.58 s, under a 0.8 s limit, but the last quarter's
    ~1 s, and the backlog is still growing at the last arrival. The whole run's P50 passed only because the run
    ended; the run itself is overloaded (as `simulate run` says), so it is no sustainable rate."""
    slo = SLO(tbt_s=0.05, sched_delay_s=0.8)
    over = run_trial(slots_config(), 1.1 * MU, slo, early_exit=False)
    assert over.sched_delay_s_q <= 0.8  # the P50 limit alone would pass it
    assert not over.passed and not over.too_short and over.reason.startswith("overloaded")
    assert run_trial(slots_config(), 0.9 * MU, slo, early_exit=False).passed
    assert search_seed(slots_config(), slo, SearchSettings(qps_start=10.0)).capacity_qps <= 1.1 * MU


def test_early_exit_gives_the_same_verdicts_and_capacity(constant_cost):
    slo = SLO(tbt_s=0.05, sched_delay_s=0.2)
    fast = search_seed(slots_config(), slo, SearchSettings(qps_start=10.0, early_exit=True))
    slow = search_seed(slots_config(), slo, SearchSettings(qps_start=10.0, early_exit=False))
    assert fast.capacity_qps == slow.capacity_qps
    assert [(t.qps, t.passed) for t in fast.trials] == [(t.qps, t.passed) for t in slow.trials]
    stopped = [t for t in fast.trials if t.stopped_early]
    assert stopped, "an overloaded trial at 80 QPS should be stopped early"
    by_qps = {t.qps: t for t in slow.trials}
    for t in stopped:  # what early exit declared certain really happened when run to the end
        assert by_qps[t.qps].sched_delay_s_q > slo.sched_delay_s


def test_watch_does_not_change_a_run_it_does_not_stop(constant_cost):
    config = slots_config(num_requests=200).replace(workload__qps=20.0)
    plain = simulate(config)
    watched = simulate(config, watch=OverloadWatch(2.0, 50.0))
    assert "stopped" not in watched.extra
    assert watched.sim_end_at == plain.sim_end_at
    assert [(r.first_token_at, r.last_token_at, r.max_tbt_s) for r in watched.requests] == \
           [(r.first_token_at, r.last_token_at, r.max_tbt_s) for r in plain.requests]
    assert same_gaps(watched.tbt, plain.tbt)


def test_tbt_early_exit_gives_the_same_verdicts_and_capacity():
    # A real cost model: chunked prefills stall decodes, so loads fail on P99 TBT, not on the queue
    # (under the 2023 engine's per-request CPU time over 2023's kernels the 512-token hybrid steps reach 0.1 s
    # first; today's faster kernels leave the queue to fail first).
    config = RunConfig().replace(replica__model="mistral-7b", scheduler__name="sarathi", scheduler__chunk_size=512,
                                 workload__name="sharegpt", workload__num_requests=256, workload__qps=1.0,
                                 engine="vllm-2023-splitwise", replica__roofline_calibration="2023")
    slo = SLO(tbt_s=0.1)
    fast = search_seed(config, slo, SearchSettings(early_exit=True))
    slow = search_seed(config, slo, SearchSettings(early_exit=False))
    assert fast.capacity_qps == slow.capacity_qps
    assert [(t.qps, t.passed) for t in fast.trials] == [(t.qps, t.passed) for t in slow.trials]
    stopped = [t for t in fast.trials if t.stopped_early]
    assert stopped and all(t.reason.startswith("P99 TBT certain to exceed 0.1s") for t in stopped)
    by_qps = {t.qps: t for t in slow.trials}
    for t in stopped:  # what early exit declared certain really happened when run to the end
        assert by_qps[t.qps].tbt_s_q > slo.tbt_s
    # Without the TBT exit (overload exit still on) a failing trial runs on and keeps its figures.
    qps = next(t.qps for t in stopped if by_qps[t.qps].sched_delay_s_q <= slo.sched_delay_s)  # no overload
    kept = run_trial(config, qps, slo, tbt_early_exit=False)
    assert not kept.stopped_early and kept == dataclasses.replace(by_qps[kept.qps], wall_s=kept.wall_s)
    for t in fast.trials:  # a passing trial is never stopped, and keeps every figure
        if t.passed:
            assert not t.stopped_early and t == dataclasses.replace(by_qps[t.qps], wall_s=t.wall_s)


def test_gaps_above_counts_new_runs_recounts_a_compacted_log_and_gives_up_on_a_sketch():
    log = GapLog(max_runs=8)
    above = GapsAbove(0.1, [log])
    log.add(0.05, 3)
    log.add(0.2, 2)
    assert above.count() == 2
    log.extend_runs([0.3, 0.01], 4)
    assert above.count() == 6
    log.add(0.2, 1)
    log.add(0.2, 1)  # the 8th run: the log compacts, its arrays are new, and it is recounted
    assert len(log.values) < 8 and above.count() == 8
    for i in range(8):  # 8 distinct values > max_runs // 2: a sketch, which cannot be judged exactly
        log.add(0.5 + i, 1)
    assert not log.exact and above.count() is None


@pytest.mark.parametrize("n,q", [(2048, 50.0), (2047, 50.0), (1000, 99.0), (10, 90.0), (1, 50.0)])
def test_certain_fail_count_is_the_exact_threshold(n, q):
    k = certain_fail_count(n, q)
    # k values above the limit (1.0) and the rest at 0: the percentile exceeds 1.0 ...
    values = np.r_[np.zeros(n - k), np.full(k, 2.0)]
    assert np.percentile(values, q) > 1.0
    # ... but with one fewer it need not.
    values = np.r_[np.zeros(n - k + 1), np.full(k - 1, 2.0)]
    assert np.percentile(values, q) <= 1.0


def test_slo_below_a_lone_decode_is_capacity_zero_without_trials(constant_cost):
    report = find_capacity(slots_config(), SLO(tbt_s=ITERATION_S / 2))
    assert report.capacity_qps == 0.0
    assert report.seeds[0].trials == []
    assert "no QPS can meet it" in report.seeds[0].reason


def test_unmeetable_goodput_ends_at_min_qps_with_the_reason(constant_cost):
    # A TTFT of 1 ms is shorter than the first iteration: every request misses goodput.
    slo = SLO(tbt_s=0.05, min_goodput=0.5, goodput_ttft_s=0.001)
    result = search_seed(slots_config(num_requests=64), slo, SearchSettings(qps_start=1.0, min_qps=0.2))
    assert result.capacity_qps == 0.0
    assert [t.qps for t in result.trials] == [1.0, 0.5, 0.25, 0.2]  # halving, then the floor itself
    assert "capacity 0" in result.reason and "goodput" in result.reason


def test_trials_running_out_before_a_pass_is_not_capacity_zero(constant_cost):
    # The same unmeetable SLO, but only two trials allowed: the search did not reach min_qps, so it says
    # the capacity was not found below the lowest QPS tried instead of calling it 0.
    slo = SLO(tbt_s=0.05, min_goodput=0.5, goodput_ttft_s=0.001)
    result = search_seed(slots_config(num_requests=64), slo, SearchSettings(qps_start=1.0, min_qps=0.2, max_trials=2))
    assert [t.qps for t in result.trials] == [1.0, 0.5]
    assert result.not_found and result.reason.startswith("not found") and "below 0.5 QPS" in result.reason
    assert "capacity 0" not in result.reason
    report = find_capacity(slots_config(num_requests=64), slo, SearchSettings(qps_start=1.0, min_qps=0.2, max_trials=2))
    assert report.summary()["capacity_not_found"] and report.capacity_qps == 0  # the JSON/sweep row says which 0
    found = find_capacity(slots_config(num_requests=64), SLO(tbt_s=1.0), SearchSettings(qps_start=1.0, max_trials=3))
    assert not found.summary()["capacity_not_found"]


def test_quantiles_are_configurable(constant_cost):
    # Under MU, a queue that stays bounded: over it the backlog grows, and a trial whose last quarter waits past
    # the limit at its percentile (P10 too) fails as overloaded, whatever the whole run's P10.
    config = slots_config(num_requests=256).replace(workload__qps=38.0)
    loose = run_trial(config, 38.0, SLO(tbt_s=0.05, sched_delay_s=0.3, sched_delay_quantile=10.0), early_exit=False)
    tight = run_trial(config, 38.0, SLO(tbt_s=0.05, sched_delay_s=0.3, sched_delay_quantile=99.0), early_exit=False)
    assert loose.sched_delay_s_q < tight.sched_delay_s_q
    assert loose.passed and not tight.passed


def test_seeds_report_spread(constant_cost):
    report = find_capacity(slots_config(num_requests=256), SLO(tbt_s=0.05, sched_delay_s=0.2),
                           SearchSettings(qps_start=20.0), num_seeds=3)
    assert [s.seed for s in report.seeds] == [0, 1, 2]
    caps = report.capacities
    assert report.capacity_qps == pytest.approx(caps.mean())
    assert report.summary()["capacity_qps_min"] == caps.min() <= caps.max() == report.summary()["capacity_qps_max"]
    assert report.capacity_qps_std == pytest.approx(caps.std(ddof=1))
    assert set(report.trials_frame()["seed"]) == {0, 1, 2}


def test_one_censored_seed_makes_the_capacity_a_lower_bound_and_says_so(constant_cost):
    """Seeds' capacities straddle MU = 40 (38.75 to 41.9 QPS uncapped): at --max-qps 40 some seeds still pass at
    the ceiling and others converge below it. Their mean counts the censored seeds at the ceiling, so it is a lower
    bound too (the flag asked every seed to be censored, and the headline read a plain capacity). A search stopped
    at --max-trials with a wide bracket is flagged as not converged."""
    args = (slots_config(num_requests=256), SLO(tbt_s=0.05, sched_delay_s=0.2))
    report = find_capacity(*args, SearchSettings(qps_start=20.0, max_qps=40.0), num_seeds=3)
    lower = sum(s.at_least for s in report.seeds)
    assert 0 < lower < 3
    summary = report.summary()
    assert summary["capacity_is_lower_bound"] and summary["num_seeds_lower_bound"] == lower
    assert not summary["capacity_converged"]
    settled = find_capacity(*args, SearchSettings(qps_start=20.0)).summary()
    assert settled["capacity_converged"] and not settled["capacity_is_lower_bound"]
    cut = find_capacity(*args, SearchSettings(qps_start=20.0, max_trials=3)).summary()  # [40, 80] after 20, 40, 80
    assert not cut["capacity_converged"] and not cut["capacity_is_lower_bound"]
    flags = ["--model", "mistral-7b", "--scheduler", "sarathi", "--max-num-seqs", "4", "--workload", "fixed",
             "--prompt-tokens", "16", "--output-tokens", "10", "--num-requests", "256", "--qps", "20",
             "--tbt-slo", "0.05", "--sched-delay-slo", "0.2", "--workers", "1"]
    text = " ".join(runner.invoke(app, ["capacity", *flags, "--seeds", "3", "--max-qps", "40"]).output.split())
    assert "capacity at least" in text and f"({lower} of 3 seeds a lower bound)" in text
    text = " ".join(runner.invoke(app, ["capacity", *flags, "--max-trials", "3"]).output.split())
    assert "not converged" in text and "capacity at least" not in text


@pytest.mark.parametrize("workers", [2, 3])
def test_trials_run_ahead_in_workers_give_the_same_search(constant_cost, workers: int):
    """One seed with --workers: the trials it may need next run ahead in processes; the trials
    it uses, their order and figures, and the capacity are the serial search's."""
    config, slo, settings = slots_config(num_requests=256), SLO(tbt_s=0.05, sched_delay_s=0.2), SearchSettings(qps_start=20.0)

    def figures(report):  # noqa: ANN001, ANN202 - as text: a trial stopped early has NaN figures
        return repr([{k: v for k, v in vars(t).items() if k != "wall_s"} for t in report.seeds[0].trials])

    serial = find_capacity(config, slo, settings)
    seen: list[float] = []
    ahead = find_capacity(config, slo, settings, workers=workers, on_trial=lambda t: seen.append(t.qps))
    assert len(serial.seeds[0].trials) >= 4
    assert figures(ahead) == figures(serial) and ahead.capacity_qps == serial.capacity_qps
    assert seen == [t.qps for t in serial.seeds[0].trials] and ahead.seeds[0].reason == serial.seeds[0].reason


def test_seeds_sharing_more_workers_give_the_same_searches(constant_cost):
    """Fewer seeds than workers: the searches share the processes, each running its trials
    ahead in its share. Every seed's trials, their order and figures, and the capacities are
    the serial searches'; every trial a search uses is reported, and every seed once."""
    config, slo, settings = slots_config(num_requests=256), SLO(tbt_s=0.05, sched_delay_s=0.2), SearchSettings(qps_start=20.0)

    def figures(report):  # noqa: ANN001, ANN202 - as text: a trial stopped early has NaN figures
        return repr([[{k: v for k, v in vars(t).items() if k != "wall_s"} for t in s.trials] for s in report.seeds])

    serial = find_capacity(config, slo, settings, num_seeds=2)
    seen: list[tuple[int, float]] = []
    done: list[int] = []
    shared = find_capacity(config, slo, settings, num_seeds=2, workers=3, on_trial=lambda t: seen.append((t.seed, t.qps)),
                           on_seed_done=lambda s: done.append(s.seed))
    assert figures(shared) == figures(serial) and [s.seed for s in shared.seeds] == [0, 1]
    assert [s.reason for s in shared.seeds] == [s.reason for s in serial.seeds]
    assert sorted(done) == [0, 1]
    assert sorted(seen) == sorted((t.seed, t.qps) for s in serial.seeds for t in s.trials)


@pytest.mark.parametrize("width, max_trials", [(3, 2), (4, 4), (2, 6)])
def test_trials_ending_together_after_the_search_is_decided_are_left_unread(width: int, max_trials: int):
    """Several trials of one search can end in one wait; once the first decides the search, the
    rest are left unread (they raised StopIteration before, under load, in capacity --workers)."""
    from concurrent.futures import Future

    from simulator.planning.search import Limits, SearchAhead, largest_passing, run_ahead

    def ended(load: float) -> Future:
        future: Future = Future()
        future.set_result(load)
        return future

    limits = Limits(rel_tol=0.3, min_qps=0.1, max_qps=100.0, max_trials=max_trials)
    search = SearchAhead(ended, lambda load: load <= 5.0, 1.0, limits, width)
    run_ahead([search], wait_any=lambda futures: list(futures))  # every trial in flight ends at once
    serial = largest_passing(lambda load: load <= 5.0, 1.0, limits)
    assert search.outcome is not None and search.outcome.passed_qps == serial.passed_qps
    assert search.outcome.num_trials == serial.num_trials


def test_a_tpot_percentile_limit_judges_the_requests_own_tpot():
    """--tpot-slo holds the --tpot-quantile of the finished requests' TPOT (one-token outputs have
    none), the figure a planner asks for ("P99 TPOT <= 50 ms"), on top of the default limits."""
    config = RunConfig().replace(replica__model="mistral-7b", workload__num_requests=96, workload__qps=4.0)
    loose = dict(tbt_s=10.0, sched_delay_s=10.0)
    free = run_trial(config, 4.0, SLO(**loose), early_exit=False)
    from simulator.report.metrics import request_columns

    cols = request_columns(simulate(config))
    tpot = cols["tpot_s"][(cols["status"] == "finished") & ~np.isnan(cols["tpot_s"])]
    assert len(tpot) > 50 and free.tpot_s_p99 == pytest.approx(float(np.percentile(tpot, 99)))
    assert free.tpot_s_q == free.tpot_s_p99 and free.tpot_s_p50 < free.tpot_s_p99  # P99 without a limit
    tight = run_trial(config, 4.0, SLO(**loose, tpot_s=0.99 * free.tpot_s_p99), early_exit=False)
    assert not tight.passed and tight.reason.startswith("P99 TPOT")
    assert run_trial(config, 4.0, SLO(**loose, tpot_s=1.01 * free.tpot_s_p99), early_exit=False).passed
    median = SLO(**loose, tpot_s=1.01 * free.tpot_s_p50, tpot_quantile=50.0)  # the median meets what P99 misses
    trial = run_trial(config, 4.0, median, early_exit=False)
    assert trial.passed and trial.tpot_s_q == pytest.approx(free.tpot_s_p50)
    assert median.describe().endswith(f"P50 TPOT <= {1.01 * free.tpot_s_p50:g}s")


def test_a_tpot_limit_below_every_requests_floor_is_capacity_zero_without_trials(constant_cost):
    # Every decode takes ITERATION_S: no request's TPOT can be below it.
    report = find_capacity(slots_config(), SLO(tbt_s=1.0, tpot_s=0.9 * ITERATION_S))
    assert report.capacity_qps == 0.0 and report.seeds[0].trials == []
    assert "TPOT SLO" in report.seeds[0].reason and "no QPS can meet it" in report.seeds[0].reason
    report = find_capacity(slots_config(num_requests=64), SLO(tbt_s=1.0, sched_delay_s=0.2, tpot_s=1.1 * ITERATION_S),
                           SearchSettings(qps_start=10.0))
    assert report.capacity_qps > 0  # just above the floor: met, the delay limit ends the search


def test_a_users_search_finds_the_most_closed_loop_users_meeting_the_slo(constant_cost):
    """--users: each trial a closed loop of N users (no rate), N whole; with NUM_SLOTS slots of
    NUM_OUTPUT iterations each, users beyond the slots queue for one, and the median TTFT (one
    iteration while every user has a slot) grows past a limit of 10 iterations once they do."""
    config = slots_config(num_requests=512).replace(workload__qps=1.0)  # the rate at its default: none is read
    slo = SLO(tbt_s=0.05, sched_delay_s=10.0, ttft_s=10 * ITERATION_S, ttft_quantile=50.0)
    verdicts = {n: run_trial(config, n, slo, early_exit=False, users=True) for n in range(1, 13)}
    assert verdicts[NUM_SLOTS].ttft_s_p50 == pytest.approx(ITERATION_S)  # a slot each: the first token next step
    passing = [n for n, t in verdicts.items() if t.passed]
    assert passing == list(range(1, max(passing) + 1)) and NUM_SLOTS <= max(passing) < 12  # monotone, then fails
    report = find_capacity(config, slo, SearchSettings(users=True))
    trials = report.seeds[0].trials
    assert report.capacity_qps == max(passing) and all(float(t.qps).is_integer() for t in trials)
    assert trials[0].qps == 16  # no --concurrency: the first trial's 16 users
    assert report.seeds[0].reason.startswith(f"converged: passes at {max(passing)} users, fails at {max(passing) + 1} users")
    summary = report.summary()
    assert summary["capacity_users"] == max(passing) and "capacity_qps" not in summary
    assert list(report.trials_frame().columns[:2]) == ["seed", "users"]
    started = find_capacity(config.replace(workload__concurrency=4, workload__arrival="burst"), slo,
                            SearchSettings(users=True))
    assert started.seeds[0].trials[0].qps == 4 and started.capacity_qps == report.capacity_qps


def test_a_users_search_says_how_it_ended_in_users(constant_cost):
    config = slots_config(num_requests=64).replace(workload__qps=1.0)
    # A first token sooner than one iteration: not even one user meets it.
    none = find_capacity(config, SLO(tbt_s=0.05, ttft_s=ITERATION_S / 2), SearchSettings(users=True))
    assert none.capacity_qps == 0.0 and none.seeds[0].reason.startswith("capacity 0: no number of users down to 1 meets")
    assert [t.qps for t in none.seeds[0].trials] == [16, 8, 4, 2, 1]
    # Every user meets a loose SLO up to the ceiling: a lower bound, in users.
    capped = find_capacity(config, SLO(tbt_s=1.0, sched_delay_s=100.0), SearchSettings(users=True, max_users=20))
    assert capped.summary()["capacity_is_lower_bound"] and capped.capacity_qps == 20  # the ceiling itself tried
    assert [t.qps for t in capped.seeds[0].trials] == [16, 20]
    assert "still meets the SLO at 20 users (the search limit; raise --max-users)" in capped.seeds[0].reason


def test_a_users_search_refuses_what_it_would_not_read(constant_cost):
    config = slots_config(num_requests=64)
    with pytest.raises(ConfigError, match="--qps: --users searches a closed loop"):
        find_capacity(config, SLO(), SearchSettings(users=True))  # a rate given (10 QPS): a users search reads none
    with pytest.raises(ConfigError, match="--arrival"):
        find_capacity(config.replace(workload__qps=1.0, workload__arrival="gamma"), SLO(), SearchSettings(users=True))
    with pytest.raises(ConfigError, match="--max-qps.*would do nothing"):
        SearchSettings(users=True, max_qps=50.0)
    with pytest.raises(ConfigError, match="--max-users.*add --users"):
        SearchSettings(max_users=64)
    closed = config.replace(workload__concurrency=8, workload__arrival="burst")
    with pytest.raises(ConfigError, match="add --users"):  # a rate search over a closed loop: offered the users one
        find_capacity(closed, SLO())
    # A rate under a cap on requests in flight: above what the cap carries the client holds requests back,
    # the offered rate is never served, and every higher rate would pass (it reported 512 QPS here).
    with pytest.raises(ConfigError, match="--concurrency 4 caps the requests in flight.*drop --concurrency"):
        find_capacity(config.replace(workload__concurrency=4, workload__qps=1.0), SLO())


def test_bad_inputs_are_config_errors():
    with pytest.raises(ConfigError, match="slo.tbt_quantile"):
        SLO(tbt_quantile=0)
    with pytest.raises(ConfigError, match="slo.tbt_s"):
        SLO(tbt_s=-1)
    with pytest.raises(ConfigError, match="slo.ttft_quantile.*--ttft-slo"):  # a percentile held to no limit
        SLO(ttft_quantile=90)
    assert SLO(ttft_s=1.0, ttft_quantile=90).describe().endswith("P90 TTFT <= 1s")
    with pytest.raises(ConfigError, match="slo.tpot_quantile.*--tpot-slo"):
        SLO(tpot_quantile=90)
    with pytest.raises(ConfigError, match="slo.tpot_s"):
        SLO(tpot_s=0.0)
    with pytest.raises(ConfigError, match="rel_tol"):
        SearchSettings(rel_tol=0)
    with pytest.raises(ConfigError, match="workload.arrival"):
        find_capacity(RunConfig().replace(workload__arrival="burst"), SLO())


def test_cli_capacity_json_reports_zero_for_an_impossible_slo():
    result = runner.invoke(app, ["capacity", "--model", "mistral-7b", "--tbt-slo", "0.0005", "--json"])
    assert result.exit_code == 1, result.output  # (no answer: exit 1, the JSON written)
    data = json.loads(result.output)
    assert data["capacity_qps"] == 0.0
    assert "no QPS can meet it" in data["reason"]
    assert data["config"]["workload"]["num_requests"] == 2048  # capacity's own default trial size


def test_a_model_that_does_not_fit_is_an_error_not_capacity_zero():
    """The SLO's floor was judged first: Llama-3.1-405B on one L4 read "capacity 0: the TBT SLO 0.2s is below the
    fastest possible iteration" with exit 0, the lone decode priced on a replica that cannot hold the weights."""
    result = runner.invoke(app, ["capacity", "--model", "llama-3.1-405b", "--gpu", "l4", "--num-requests", "64",
                                 "--workers", "1"])
    assert result.exit_code != 0 and isinstance(result.exception, ConfigError), result.output  # (main: one line, 2)
    assert "does not fit" in str(result.exception) and "capacity 0" not in result.output
    with pytest.raises(ConfigError, match="does not fit"):  # a disaggregated pool's replica too
        find_capacity(RunConfig().replace(replica__model="llama-3.1-405b", replica__gpu="l4",
                                          prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)"), SLO())


def test_cli_capacity_small_search(tmp_path):
    result = runner.invoke(app, ["capacity", "--model", "mistral-7b", "--num-requests", "128", "--qps", "2",
                                 "--tbt-slo", "0.5", "--rel-tol", "0.2", "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["capacity_qps"] > 0
    assert math.isfinite(data["tbt_s_p99_at_capacity"]) and data["tbt_s_p99_at_capacity"] <= 0.5
    assert 0 < data["tpot_s_p50_at_capacity"] <= data["tpot_s_p99_at_capacity"] == data["tpot_s_q_at_capacity"]
    assert (tmp_path / "trials.csv").exists() and json.loads((tmp_path / "capacity.json").read_text())["trials"]


def test_cli_capacity_searches_users(tmp_path):
    result = runner.invoke(app, ["capacity", "--users", "--model", "mistral-7b", "--num-requests", "128",
                                 "--concurrency", "8", "--tpot-slo", "0.03", "--rel-tol", "0.1", "--out", str(tmp_path),
                                 "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # (its notes are on stderr)
    assert data["capacity_users"] >= 1 and float(data["capacity_users"]).is_integer() and "capacity_qps" not in data
    assert data["tpot_s_q_at_capacity"] <= 0.03 and data["trials"][0]["users"] == 8 and "qps" not in data["trials"][0]
    assert "users" in (tmp_path / "trials.csv").read_text().splitlines()[0].split(",")
    text = runner.invoke(app, ["capacity", "--users", "--model", "mistral-7b", "--num-requests", "128",
                               "--tpot-slo", "0.03", "--rel-tol", "0.1"])
    assert text.exit_code == 0 and f"capacity {int(data['capacity_users'])} users" in text.output


def test_cli_capacity_workers_default_to_auto_with_the_serial_search(monkeypatch):
    """The default runs trials ahead in as many processes as auto allows: the same report."""
    from simulator.cli import capacity as cli_capacity

    asked = []

    def two(num_seeds: int, requests_per_trial: int) -> int:
        asked.append((num_seeds, requests_per_trial))
        return 2

    monkeypatch.setattr(cli_capacity, "capacity_auto_workers", two)
    args = ["capacity", "--model", "mistral-7b", "--num-requests", "128", "--qps", "2", "--tbt-slo", "0.2",
            "--rel-tol", "0.1", "--json"]
    auto, serial = runner.invoke(app, args), runner.invoke(app, [*args, "--workers", "1"])
    assert auto.exit_code == 0 and serial.exit_code == 0, auto.output + serial.output
    assert asked == [(1, 128)]  # auto was asked, once, with the trial size
    reports = [json.loads(r.output) for r in (auto, serial)]
    for report in reports:
        report.pop("wall_s")
        for t in report["trials"]:
            t.pop("wall_s")
        for seed in report["per_seed"]:
            seed.get("at_capacity", {}).pop("wall_s", None)
    assert reports[0] == reports[1] and len(reports[0]["trials"]) >= 4
    bad = runner.invoke(app, [*args, "--workers", "many"])
    assert isinstance(bad.exception, ConfigError) and str(bad.exception).startswith("--workers")  # main(): one line


@pytest.mark.parametrize("case", ["closed loop", "disaggregated"])
def test_early_exit_agrees_with_running_every_trial_out(case: str):
    """Two watches read what was not yet so (found by fuzzing): a closed loop's requests held back
    by the client counted as waiting to be scheduled (their ready time read as an arrival: capacity
    2 against 64 QPS), and a disaggregated run's live gap logs held the handoff gaps that the decode
    worker's delivery takes out after the run (capacity 0 against 16 QPS)."""
    if case == "closed loop":  # a users search: the client holds each request until a user is free
        config = RunConfig().replace(replica__model="tiny-llama-1b", workload__concurrency=3,
                                     workload__arrival="burst", workload__num_requests=150, seed=255)
        slo = SLO(tbt_s=0.2, sched_delay_s=2.0)
        settings = {flag: SearchSettings(users=True, max_users=64, max_trials=4, early_exit=flag)
                    for flag in (True, False)}
        first = 3
    else:
        config = RunConfig().replace(replica__model="llama-3.1-8b", replica__gpu="b200", replica__tp=4,
                                     prefill_pool="2x", decode_pool="1x", workload__name="fixed",
                                     workload__prompt_tokens=512, workload__output_tokens=16,
                                     workload__num_requests=150, workload__qps=2.0)
        slo = SLO(tbt_s=0.02)
        settings = {flag: SearchSettings(qps_start=config.workload.qps, max_trials=4, early_exit=flag)
                    for flag in (True, False)}
        first = config.workload.qps
    fast, slow = (search_seed(config, slo, settings[flag]) for flag in (True, False))
    assert fast.capacity_qps == slow.capacity_qps > 2 * first
    assert [(t.qps, t.passed) for t in fast.trials] == [(t.qps, t.passed) for t in slow.trials]


@pytest.mark.parametrize("criterion", ["tbt", "goodput"])
def test_early_exit_never_changes_a_users_search(criterion: str):
    """A users search's trials are closed loops whose requests wait on the client until a user is
    free (ready at 0, not arrived): the watches check each at its send, never count a request
    waiting on the client as late, and stop the failing trials early (they had checked at the
    ready times, all 0, and stopped nothing) with the verdicts of running them out."""
    config = RunConfig().replace(replica__model="tiny-llama-1b", workload__num_requests=200, seed=7,
                                 scheduler__max_num_seqs=8)  # users beyond 8 queue: late by either measure
    slo = (SLO(tbt_s=0.2, sched_delay_s=0.05, tpot_s=0.01) if criterion == "tbt"
           else SLO(criterion="goodput", tbt_s=0.05, goodput_ttft_s=0.05, min_goodput=0.9))
    fast, slow = (search_seed(config, slo, SearchSettings(users=True, max_trials=8, early_exit=flag))
                  for flag in (True, False))
    assert [(t.qps, t.passed) for t in fast.trials] == [(t.qps, t.passed) for t in slow.trials]
    assert fast.capacity_qps == slow.capacity_qps >= 1 and any(not t.passed for t in fast.trials)
    assert all(t.stopped_early for t in fast.trials if not t.passed) and not any(t.stopped_early for t in slow.trials)


def test_cli_capacity_bad_quantile_is_one_line():
    result = runner.invoke(app, ["capacity", "--tbt-quantile", "150"])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError) or "tbt_quantile" in result.output


def test_tau_fits_the_slo_and_grows_with_it():
    config = RunConfig().replace(replica__model="mistral-7b")
    mix = DecodeMix(num_decodes=32, decode_context=1024, chunk_context=512, source="test")
    strict, relaxed = choose_tau(config, 0.1, mix), choose_tau(config, 0.5, mix)
    assert 32 < strict.tau < relaxed.tau
    from simulator.costmodel import load_cost_model
    from simulator.planning.tau import hybrid_shape

    cost = load_cost_model("roofline", config.replica, config.engine)
    assert cost.iteration_time(hybrid_shape(mix, strict.tau)) <= 0.1 < cost.iteration_time(hybrid_shape(mix, strict.tau + 1))
    # The knee sits where the GEMMs' arithmetic intensity meets the GPU's ridge: tens to a few hundred tokens.
    assert 16 <= knee_tokens(cost) <= 1024
    # a property of the model and GPU: a search bounded at 64 tokens reports the same knee (it said 1 token)
    assert choose_tau(config, 0.1, mix, max_tokens=64).knee_tokens == strict.knee_tokens == knee_tokens(cost)
    impossible = choose_tau(config, 0.001, mix)
    assert impossible.tau == 0 and "decodes alone" in impossible.reason


def test_tau_decode_batch_counts_whole_blocks():
    """The default decode batch is what the paged cache holds: each sequence whole blocks of
    --block-size tokens, so a block larger than a request's tokens halves the batch."""
    from simulator.engine.replica import build_scheduler
    from simulator.planning.tau import workload_mix

    base = RunConfig().replace(replica__model="llama-3.1-70b", replica__tp=2, replica__max_model_len=4096,
                               scheduler__max_num_seqs=100_000, workload__name="fixed",
                               workload__prompt_tokens=100, workload__output_tokens=20)
    batches = {}
    for size in (16, 128, 256):
        config = base.replace(replica__block_size=size)
        _, plan = build_scheduler(config)
        per_seq = -(-120 // size)  # 120 tokens a sequence, in whole blocks
        chunk = -(-(50 + 1) // size)  # the step's chunk after 50 prompt tokens holds its own (a one-token chunk)
        batches[size] = workload_mix(config).num_decodes
        assert batches[size] == (plan.num_blocks - chunk) // per_seq
    assert batches[256] < batches[128]


def test_cli_tau_json_and_plot(tmp_path):
    result = runner.invoke(app, ["tau", "--model", "mistral-7b", "--tbt-slo", "0.2", "--num-decodes", "16",
                                 "--plot", str(tmp_path / "tau"), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["tau"] > 16 and data["iteration_s_at_tau"] <= 0.2 and data["knee_tokens"] > 0
    assert (tmp_path / "tau.png").stat().st_size > 0 and (tmp_path / "tau.svg").stat().st_size > 0


@pytest.mark.parametrize("value,limit,text", [
    (0.10004, 0.1, "0.10004"),   # above the limit: never printed as "0.1"
    (0.09996, 0.1, "0.09996"),   # below it: never printed as "0.1" either
    (0.1, 0.1, "0.1"),
    (0.0722, 0.05, "0.0722"),    # far from it: three digits
    (89.96, 90.0, "89.96"),
    (1.0052083, 1.0, "1.01"),
])
def test_figures_keep_their_side_of_the_limit(value, limit, text):
    from simulator.planning.capacity import format_against

    assert format_against(value, limit) == text


def test_failure_reasons_read_true_and_progress_sees_every_trial(monkeypatch: pytest.MonkeyPatch):
    # Every gap lasts 10.04 ms against a 10 ms limit: "P99 TBT 0.01s > 0.01s" is what 3 digits would say.
    _price_all(monkeypatch, lambda spec, replica, engine=None: ConstantCostModel(replica, 0.01004))
    slo = SLO(tbt_s=0.01)
    trial = run_trial(slots_config(num_requests=32), 2.0, slo, early_exit=False)
    assert not trial.passed and trial.reason == "P99 TBT 0.01004s > 0.01s"
    stopped = run_trial(slots_config(num_requests=32), 2.0, slo)  # every gap is above: certain at the first check
    assert not stopped.passed and stopped.stopped_early and stopped.reason.startswith("P99 TBT certain to exceed 0.01s")
    seed = search_seed(slots_config(num_requests=32), slo)
    assert seed.capacity_qps == 0 and "(10.04 ms for a lone decode" in seed.reason

    _price_all(monkeypatch, lambda spec, replica, engine=None: ConstantCostModel(replica, ITERATION_S))
    seen = []
    report = find_capacity(slots_config(num_requests=64), SLO(tbt_s=0.05, sched_delay_s=0.2),
                           SearchSettings(qps_start=10.0, rel_tol=0.2), num_seeds=2, on_trial=seen.append)
    assert seen == [t for s in report.seeds for t in s.trials] and len(seen) >= 4


def test_cli_capacity_table_defines_each_column_and_shows_progress(constant_cost):
    result = runner.invoke(app, ["capacity", "--model", "mistral-7b", "--scheduler", "sarathi", "--max-num-seqs", "4",
                                 "--workload", "fixed", "--prompt-tokens", "16", "--output-tokens", "10",
                                 "--num-requests", "64", "--qps", "10", "--tbt-slo", "0.05", "--sched-delay-slo", "0.2",
                                 "--rel-tol", "0.2", "--workers", "1"])  # the patched cost model is this process's
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    # Per-trial progress (stderr, plain lines when not a terminal), then the table.
    assert "capacity" in text and "trial 1 (seed 0): 10 QPS passes" in text
    for header in ("all gaps", "max TBT", "<=0.05s", "TTFT<=2s", "why it failed"):  # header lines interleave
        assert header in text
    assert "Goodput: share of all requests with TTFT <= 2s whose own largest gap is <= 0.05s" in text
    assert "P50 scheduling delay" in text and "s > 0.2s" in text  # a failed trial says why, in full


def test_a_disaggregated_trial_judges_the_wait_for_a_decode_seat_too():
    """A decode pool that cannot keep up queues requests after their prompt, not in the prefill queue: the
    first wait alone passed 4.25 QPS for Llama-2-13B on 1x(tp=2) + 1x(tp=2), where the run then reported a P50
    TTFT of 29 s and 'load exceeds capacity'."""
    from simulator.planning.capacity import scheduling_delays
    from simulator.report.metrics import request_columns

    config = RunConfig().replace(replica__model="llama-2-13b", prefill_pool="1x(tp=2)", decode_pool="1x(tp=2)",
                                 workload__num_requests=512, workload__qps=6.0)
    result = simulate(config)
    cols = request_columns(result)
    delays = scheduling_delays(result, cols)
    log = result.disagg.handoff
    waited = np.nan_to_num(log.decode_reserved_at - log.prefill_done_at)[cols["request_id"]]
    seat = np.nan_to_num(log.decode_seated_at - log.transfer_end_at)[cols["request_id"]]
    link = np.nan_to_num(log.transfer_start_at - log.handoff_done_at)[cols["request_id"]]
    assert np.allclose(delays, cols["sched_delay_s"] + waited + link + seat, equal_nan=True)
    assert np.mean(waited) > 2.0 > np.nanmedian(cols["sched_delay_s"])  # overloaded past the prefill queue
    report = find_capacity(config, SLO(tbt_s=0.2), SearchSettings(qps_start=6.0, rel_tol=0.1))
    assert report.capacity_qps < 6.0


def test_a_disaggregated_trial_judges_the_wait_for_a_decode_seat_after_the_transfer():
    """Blocks to spare but 16 seats: landed transfers wait, their KV held, for a finishing request's seat. That
    wait is no backpressure (the blocks were reserved at once): 45 QPS passed for a decode worker whose 16
    seats serve about 8 requests/s of 200 output tokens, at a P50 TTFT of 29 s."""
    from simulator.planning.capacity import scheduling_delays
    from simulator.report.metrics import request_columns

    config = RunConfig().replace(prefill_pool="1x", decode_pool="1x(seqs=16)", workload__name="fixed",
                                 workload__prompt_tokens=500, workload__output_tokens=200, workload__num_requests=300,
                                 workload__qps=20.0)
    result = simulate(config)
    cols = request_columns(result)
    log = result.disagg.handoff
    seat = (log.decode_seated_at - log.transfer_end_at)[cols["request_id"]]
    assert np.all(seat >= 0) and np.median(seat) > 2.0
    assert np.nanmax(log.decode_reserved_at - log.prefill_done_at) < np.median(seat)  # not a wait for blocks
    assert np.median(scheduling_delays(result, cols)) > 2.0 > np.median(cols["sched_delay_s"])
    report = find_capacity(config, SLO(tbt_s=0.2), SearchSettings(qps_start=20.0, rel_tol=0.1))
    assert report.capacity_qps < 10.0


def test_a_disaggregated_trial_judges_the_wait_for_the_kv_link_too():
    """Transfers queue FIFO behind the link: a 1 GB/s link carries ~0.67 s of Llama-3.1-70B KV for each 2,048-token
    prompt, at most ~1.5 req/s, and capacity said 4 req/s (the run: TTFT median 86 s, 1.46 req/s delivered, and
    'overloaded' false: the prefill queue never grew). The link's queue is a wait like the others now, for the
    search and for the run's own verdict."""
    from simulator.planning.capacity import scheduling_delays
    from simulator.report.metrics import request_columns, summarize

    config = RunConfig().replace(replica__model="llama-3.1-70b", prefill_pool="1x(tp=4,gpu=h100-sxm)",
                                 decode_pool="1x(tp=4,gpu=h100-sxm)", workload__name="fixed",
                                 workload__prompt_tokens=2048, workload__output_tokens=256, workload__num_requests=300,
                                 workload__qps=3.0, kv_link="1GB/s@10us")
    result = simulate(config)
    cols = request_columns(result)
    log = result.disagg.handoff
    link = (log.transfer_start_at - log.handoff_done_at)[cols["request_id"]]
    assert np.nanmedian(link) > 10.0 > np.nanmedian(cols["sched_delay_s"])  # the queue is the link's
    assert np.median(scheduling_delays(result, cols)) > 10.0
    assert summarize(result, cols)["overloaded"]
    report = find_capacity(config, SLO(tbt_s=0.2), SearchSettings(qps_start=3.0, rel_tol=0.1))
    per_request_s = float(np.nanmedian(log.transfer_end_at - log.transfer_start_at))
    assert report.capacity_qps < 1.0 / per_request_s  # what the link can carry


@pytest.mark.parametrize("workers", [1, 2])  # one trial after another; trials run ahead in processes
def test_a_search_whose_every_request_is_rejected_stops_at_once(workers: int) -> None:
    """trtllm under a 256-token budget refuses every 500-token prompt at any rate: the search halved through all
    its trials to the floor (or to --max-trials, then advised to 'start lower with --qps'). It stops after the
    first trial, capacity 0, naming the rejection and what lets the requests in."""
    config = RunConfig().replace(scheduler__name="trtllm", scheduler__max_num_batched_tokens=256,
                                 workload__name="fixed", workload__prompt_tokens=500, workload__num_requests=50)
    report = find_capacity(config, SLO(), SearchSettings(max_trials=6), workers=workers)
    seed = report.seeds[0]
    assert [t.qps for t in seed.trials] == [config.workload.qps] and seed.capacity_qps == 0.0
    assert seed.converged and not seed.not_found
    assert seed.reason.startswith("capacity 0: every request is rejected (prompt 500 tokens exceeds max_num_tokens")
    assert "at any rate" in seed.reason and "raise --max-num-batched-tokens" in seed.reason
    assert "start lower" not in seed.reason
