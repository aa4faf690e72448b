"""The shared bracket-and-bisect search (simulator.planning.search) against a known pass/fail threshold."""

from __future__ import annotations

import random
from collections.abc import Collection
from concurrent.futures import Future

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.planning.search import Limits, Outcome, SearchAhead, State, largest_passing, loads_ahead, run_ahead


def _search(threshold: float, start: float, limits: Limits, **kwargs):  # noqa: ANN003, ANN202
    tried: list[float] = []

    def passes(qps: float) -> bool:
        tried.append(qps)
        return qps <= threshold

    return largest_passing(passes, start, limits, **kwargs), tried


@given(threshold=st.floats(0.02, 400.0), start=st.floats(0.01, 1000.0), rel_tol=st.sampled_from([0.01, 0.025, 0.25]),
       max_trials=st.integers(1, 60))
def test_the_search_brackets_the_threshold_within_its_limits(threshold: float, start: float, rel_tol: float,
                                                             max_trials: int) -> None:
    limits = Limits(rel_tol, 0.01, 1000.0, max_trials)
    found, tried = _search(threshold, start, limits)
    assert found.num_trials == len(tried) <= max(1, max_trials)
    assert len(set(tried)) == len(tried)  # no load is tried twice
    if found.passed_qps is not None:
        assert found.passed_qps <= threshold and found.passed_qps in tried
    if found.failed_qps is not None:
        assert found.failed_qps > threshold and found.failed_qps in tried
    if found.stop == "converged":
        assert found.passed_qps is not None and found.failed_qps is not None
        assert (found.failed_qps - found.passed_qps) / found.failed_qps <= rel_tol
    elif found.stop == "max_trials":
        assert len(tried) == max_trials
    if max_trials == 60:  # enough trials for any bracket here: the search converges
        assert found.stop == "converged"
    if found.stop == "none_passes":  # only where the floor itself was tried and failed
        assert 0.01 in tried and threshold < 0.01 + 1e-12


def test_a_rate_search_tries_its_floor_before_saying_none_passes() -> None:
    """Halving from a failure past --min-qps tries --min-qps itself (it said 'none' at 0.6 having tried only 1)."""
    found, tried = _search(0.8, 1.0, Limits(0.02, 0.6, 1000.0, 40))
    assert tried[:2] == [1.0, 0.6] and found.stop == "converged" and 0.6 <= found.passed_qps <= 0.8
    found, tried = _search(0.5, 1.0, Limits(0.02, 0.6, 1000.0, 40))
    assert tried == [1.0, 0.6] and found.stop == "none_passes" and found.failed_qps == 0.6
    found, tried = _search(3, 8, Limits(0.0, 3, 4096, 40, integer=True))  # users: 8, 4, then the floor 3
    assert tried[:3] == [8, 4, 3] and found.passed_qps == 3


@given(threshold=st.integers(0, 5000), start=st.integers(1, 4096), rel_tol=st.sampled_from([0.0, 0.025, 0.25]))
def test_a_whole_number_search_tries_whole_numbers_and_ends_one_apart(threshold: int, start: int,
                                                                       rel_tol: float) -> None:
    """A users search: every load a whole number from 1 to the ceiling, never one twice, and (with
    trials enough) the bracket closed to neighbours or the relative tolerance."""
    limits = Limits(rel_tol, 1, 4096, 60, integer=True)
    found, tried = _search(threshold, start, limits)
    assert all(isinstance(n, int) and 1 <= n <= 4096 for n in tried) and len(set(tried)) == len(tried)
    if threshold == 0:
        assert found.passed_qps is None and found.stop == "none_passes" and found.failed_qps == 1
    elif found.stop == "max_qps":  # the ceiling itself passed
        assert found.passed_qps == 4096 <= threshold
    else:
        assert found.stop == "converged" and found.passed_qps is not None and found.failed_qps is not None
        assert found.passed_qps <= threshold < found.failed_qps
        gap = found.failed_qps - found.passed_qps
        assert gap == 1 or gap / found.failed_qps <= rel_tol
        if rel_tol == 0.0:
            assert found.passed_qps == threshold  # exact: the most that passes


def test_a_search_resumes_from_verdicts_it_is_given() -> None:
    limits = Limits(0.05, 0.01, 1000.0, 40)
    # A pass at 4 already known: the next loads double from it, 4 itself is not tried again.
    found, tried = _search(10.0, 4.0, limits, passed_qps=4.0, num_tried=1)
    assert tried[:2] == [8.0, 16.0] and 4.0 not in tried
    assert found.num_trials == len(tried) + 1 and found.stop == "converged"
    # A failure at 4: halving from it.
    found, tried = _search(1.5, 4.0, limits, failed_qps=4.0, num_tried=1)
    assert tried[:2] == [2.0, 1.0] and found.failed_qps is not None and found.failed_qps <= 2.0
    with pytest.raises(ValueError, match="below"):
        largest_passing(lambda q: True, 1.0, limits, passed_qps=4.0, failed_qps=2.0)


def test_the_limits_name_why_the_search_stopped() -> None:
    assert _search(0.001, 1.0, Limits(0.05, 0.01, 1000.0, 40))[0].stop == "none_passes"
    assert _search(5000.0, 1.0, Limits(0.05, 0.01, 1000.0, 40))[0].stop == "max_qps"
    found, tried = _search(3.0, 1.0, Limits(0.05, 0.01, 1000.0, 4))
    assert found.stop == "max_trials" and tried == [1.0, 2.0, 4.0, 3.0]


def test_a_rate_search_tries_its_ceiling_where_the_doubling_passes_it() -> None:
    found, tried = _search(7.25, 1.0, Limits(0.05, 0.01, 6.0, 40))  # capacity above the ceiling: the ceiling
    assert tried == [1.0, 2.0, 4.0, 6.0] and found.passed_qps == 6.0 and found.stop == "max_qps"
    found, tried = _search(5.0, 1.0, Limits(0.05, 0.01, 6.0, 40))  # below it: bisected between 4 and 6
    assert tried[:4] == [1.0, 2.0, 4.0, 6.0] and found.stop == "converged" and 4.0 <= found.passed_qps <= 5.0
    found, tried = _search(5000.0, 1.0, Limits(0.05, 0.01, 1000.0, 40))
    assert tried[-2:] == [512.0, 1000.0] and found.passed_qps == 1000.0


def _ahead(start, passes, start_qps: float, limits: Limits, width: int, **kwargs) -> tuple[Outcome | None, list]:  # noqa: ANN001
    """One search run ahead alone (``run_ahead``'s ``wait_any`` and the search's ``on_result``
    from ``kwargs``): its outcome and the results it used."""
    wait_any = kwargs.pop("wait_any")
    search = SearchAhead(start, passes, start_qps, limits, width, **kwargs)
    run_ahead([search], wait_any)
    return search.outcome, search.used


class _FakePool:
    """Trials as futures that end only when ``wait_any`` says so: it ends one trial in flight,
    picked by ``rng``, as a pool's trials end in whatever order their lengths give."""

    def __init__(self, rng: random.Random, width: int) -> None:
        self.rng, self.width = rng, width
        self.started: list[float] = []
        self.in_flight: dict[Future, float] = {}
        self.num_waits = 0

    def start(self, qps: float) -> Future:
        assert len([f for f in self.in_flight if not f.cancelled()]) < self.width  # a free place, always
        self.started.append(qps)
        future: Future = Future()
        self.in_flight[future] = qps
        return future

    def wait_any(self, futures: Collection[Future]) -> set[Future]:
        self.num_waits += 1
        assert futures and all(f in self.in_flight and not f.done() for f in futures)
        chosen = self.rng.choice(list(futures))
        chosen.set_running_or_notify_cancel()
        chosen.set_result(self.in_flight.pop(chosen))
        return {chosen}


@given(threshold=st.floats(0.02, 400.0), start=st.floats(0.01, 1000.0), rel_tol=st.sampled_from([0.025, 0.25]),
       max_trials=st.integers(1, 40), width=st.integers(1, 7), order_seed=st.integers(0, 2**32))
def test_running_trials_ahead_changes_nothing_but_speed(threshold: float, start: float, rel_tol: float,
                                                        max_trials: int, width: int, order_seed: int) -> None:
    """A search run ahead, whatever order its trials end in: the loads it uses, in order,
    and the outcome equal the serial search's; it never has more than ``width`` trials in
    flight, starts each load once, and cancels what it did not need and had not begun."""
    limits = Limits(rel_tol, 0.01, 1000.0, max_trials)
    serial, serial_tried = _search(threshold, start, limits)
    pool = _FakePool(random.Random(order_seed), width)
    seen: list[float] = []
    found, used = _ahead(pool.start, lambda qps: qps <= threshold, start, limits, width,
                         on_result=seen.append, wait_any=pool.wait_any)
    assert found == serial and used == serial_tried and seen == used
    assert len(set(pool.started)) == len(pool.started) and set(serial_tried) <= set(pool.started)
    assert all(f.cancelled() for f in pool.in_flight)  # what did not end was not needed
    if width == 1:
        assert pool.started == serial_tried  # nothing ahead: exactly the serial search
    # Before the first verdict, the loads either verdict leads to were started too.
    first_wave = loads_ahead(State(None, None, 0), start, limits, width)
    assert pool.started[:len(first_wave)] == first_wave


def test_a_trial_that_ends_early_frees_its_place_for_the_next_needed_one() -> None:
    """Width 2 from 1 QPS, the threshold at 1.6: 1 and 2 start together. When 2 fails first,
    the place it frees goes at once to 1.5, the load the search needs should 1 pass (as it
    does), not to a load past 2's pass, nor left idle until 1 ends."""
    limits = Limits(0.05, 0.01, 1000.0, 40)
    order = iter([2.0, 1.0, 1.5])
    started: list[float] = []
    futures: dict[Future, float] = {}

    def start_trial(qps: float) -> Future:
        started.append(qps)
        futures[(f := Future())] = qps
        return f

    def wait_scripted(in_flight: Collection[Future]) -> set[Future]:
        want = next(order, None)
        chosen = next((f for f in in_flight if futures[f] == want), None) or next(iter(in_flight))
        chosen.set_running_or_notify_cancel()
        chosen.set_result(futures[chosen])
        return {chosen}

    found, used = _ahead(start_trial, lambda qps: qps <= 1.6, 1.0, limits, 2, wait_any=wait_scripted)
    assert started[:3] == [1.0, 2.0, 1.5]
    assert used[:3] == [1.0, 2.0, 1.5] and found.passed_qps is not None and 1.5 <= found.passed_qps <= 1.6
    # Known verdicts are followed, not listed: with 2 failed, 1's pass leads straight to 1.5.
    assert loads_ahead(State(None, None, 0), 1.0, limits, 2, known={2.0: False}) == [1.0, 1.5]


@given(thresholds=st.lists(st.floats(0.02, 400.0), min_size=2, max_size=4), start=st.floats(0.01, 1000.0),
       widths=st.lists(st.integers(1, 3), min_size=4, max_size=4), order_seed=st.integers(0, 2**32))
def test_searches_sharing_one_pool_each_give_the_serial_search(thresholds: list[float], start: float,
                                                               widths: list[int], order_seed: int) -> None:
    """run_ahead drives several searches at once (the seeds of one capacity search sharing its
    processes), trials ending in any order: each uses the serial search's loads in its order
    and ends as it does, keeps to its own width, and says when it is done, once."""
    limits = Limits(0.025, 0.01, 1000.0, 30)
    rng = random.Random(order_seed)
    futures: dict[Future, tuple[int, float]] = {}

    def starter(i: int):  # noqa: ANN202
        def start_trial(qps: float) -> Future:
            assert sum(1 for f, (j, _) in futures.items() if j == i and not f.done() and not f.cancelled()) < widths[i]
            futures[(f := Future())] = (i, qps)
            return f
        return start_trial

    def wait_any(in_flight: Collection[Future]) -> set[Future]:
        chosen = rng.choice(list(in_flight))
        chosen.set_running_or_notify_cancel()
        chosen.set_result(futures[chosen][1])
        return {chosen}

    searches = [SearchAhead(starter(i), lambda q, t=t: q <= t, start, limits, widths[i])
                for i, t in enumerate(thresholds)]
    finished: list[int] = []
    run_ahead(searches, wait_any, on_outcome=finished.append)
    assert sorted(finished) == list(range(len(thresholds)))
    for search, threshold in zip(searches, thresholds, strict=True):
        serial, tried = _search(threshold, start, limits)
        assert search.outcome == serial and search.used == tried


def test_a_never_verdict_ends_the_search_at_once() -> None:
    """A failure no load can turn (every request refused whatever the rate) ends the search, as none passing,
    without halving on to the floor; the loads run ahead past it are none."""
    from simulator.planning.search import NEVER

    tried: list[float] = []
    limits = Limits(0.05, 0.01, 100.0, 20)
    found = largest_passing(lambda q: tried.append(q) or NEVER, 4.0, limits)
    assert found == Outcome(None, 4.0, "none_passes", 1) and tried == [4.0]
    assert loads_ahead(State(None, None, 0), 4.0, limits, 3, {4.0: NEVER}) == []
    assert loads_ahead(State(None, 8.0, 1), 4.0, limits, 2, {4.0: NEVER}) == []
