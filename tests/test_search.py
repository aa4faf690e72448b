"""The shared bracket-and-bisect search (simulator.search) against a known pass/fail threshold."""

from __future__ import annotations

from concurrent.futures import Future

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.search import Limits, State, largest_passing, largest_passing_ahead, loads_ahead


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


class _LazyTrial(Future):
    """A trial that runs when its result is read, as a busy pool's would finish late."""

    def __init__(self, qps: float, in_flight: list[_LazyTrial]) -> None:
        super().__init__()
        self.qps = qps
        self._in_flight = in_flight
        in_flight.append(self)

    def result(self, timeout: float | None = None) -> float:
        if not self.done():
            self.set_result(self.qps)
            self._in_flight.remove(self)
        return super().result(timeout)

    def cancel(self) -> bool:
        if super().cancel():
            self._in_flight.remove(self)
            return True
        return False


@given(threshold=st.floats(0.02, 400.0), start=st.floats(0.01, 1000.0), rel_tol=st.sampled_from([0.025, 0.25]),
       max_trials=st.integers(1, 40), width=st.integers(1, 7))
def test_running_trials_ahead_changes_nothing_but_speed(threshold: float, start: float, rel_tol: float,
                                                        max_trials: int, width: int) -> None:
    """largest_passing_ahead: the loads it uses, in order, and the outcome equal the serial
    search's; it never has more than ``width`` trials in flight and starts each load once."""
    limits = Limits(rel_tol, 0.01, 1000.0, max_trials)
    serial, serial_tried = _search(threshold, start, limits)
    started: list[float] = []
    in_flight: list[_LazyTrial] = []

    def start_trial(qps: float) -> Future:
        assert len(in_flight) < width
        started.append(qps)
        return _LazyTrial(qps, in_flight)

    found, used = largest_passing_ahead(start_trial, lambda qps: qps <= threshold, start, limits, width)
    assert found == serial and used == serial_tried
    assert len(set(started)) == len(started) and set(serial_tried) <= set(started)
    assert not in_flight  # what was not used was cancelled
    if width == 1:
        assert started == serial_tried  # nothing ahead: exactly the serial search
    # Before the first verdict, the loads either verdict leads to were started too.
    first_wave = loads_ahead(State(None, None, 0), start, limits, width)
    assert started[:len(first_wave)] == first_wave
