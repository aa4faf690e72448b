"""The run-length TBT gap log: exact quantiles without expanding, and a bounded sketch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.tbt import RELATIVE_ERROR, GapLog, canonical, expand, merged, percentiles, quantile_stats

gaps = st.lists(st.tuples(st.floats(0.0, 5.0, allow_nan=False), st.integers(1, 50)), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(runs=gaps, qs=st.lists(st.floats(0.0, 100.0), min_size=1, max_size=5))
def test_weighted_percentiles_equal_numpy_on_the_expanded_gaps_bit_for_bit(runs, qs):
    log = GapLog()
    for value, count in runs:
        log.add(value, count)
    values, counts, exact = merged([log])
    every = np.repeat([v for v, _ in runs], [c for _, c in runs])
    assert exact and np.array_equal(expand(values, counts), np.sort(every))
    assert percentiles(values, counts, qs) == [float(x) for x in np.percentile(every, qs)]
    stats = quantile_stats(values, counts, "tbt_s")
    assert stats["tbt_s_max"] == every.max() and np.isclose(stats["tbt_s_mean"], every.mean(), rtol=1e-12)


def test_logs_merge_as_the_union_of_their_gaps():
    a, b = GapLog(), GapLog()
    for value, count in ((0.1, 3), (0.2, 1), (0.1, 2)):
        a.add(value, count)
    b.add(0.2, 4)
    values, counts, _ = merged([a, b])
    assert values.tolist() == [0.1, 0.2] and counts.tolist() == [5, 5] and len(a) + len(b) == 10
    c = GapLog(max_runs=8)
    c.extend_runs([0.1, 0.2, 0.1, 0.3, 0.1, 0.2, 0.1, 0.3], 3)  # a stretch's runs: full, so it merges equal values
    assert c.exact and len(c.values) == 3 and len(c) == 24
    assert merged([c])[0].tolist() == [0.1, 0.2, 0.3] and merged([c])[1].tolist() == [12, 6, 6]


def test_a_full_log_merges_equal_values_and_stays_exact():
    log = GapLog(max_runs=8)
    for i in range(20):  # 20 runs of 3 distinct values: compaction keeps 3 exact runs
        log.add([0.01, 0.02, 0.03][i % 3], 1)
    assert log.exact and len(log.values) < 8 and len(log) == 20
    values, counts, _ = merged([log])
    assert values.tolist() == [0.01, 0.02, 0.03] and counts.tolist() == [7, 7, 6]


def test_beyond_its_size_a_log_becomes_a_sketch_within_the_stated_relative_error():
    rng = np.random.default_rng(0)
    every = rng.lognormal(-3.0, 1.0, 20_000)  # distinct values: compaction must bucket them
    log = GapLog(max_runs=1024)
    for x in every:
        log.add(float(x), 1)
    assert not log.exact and len(log.values) < 1024 and len(log) == len(every)
    values, counts, exact = merged([log])
    assert not exact
    for q, approx in zip((50, 90, 99, 99.9), percentiles(values, counts, (50, 90, 99, 99.9)), strict=True):
        # Each gap moved by at most RELATIVE_ERROR, so every order statistic did too.
        truth = np.percentile(every, q, method="lower"), np.percentile(every, q, method="higher")
        assert min(truth) * (1 - RELATIVE_ERROR) <= approx <= max(truth) * (1 + RELATIVE_ERROR)


def test_canonical_drops_nothing_and_sorts():
    values, counts = canonical(np.array([0.3, 0.1, 0.3, 0.0]), np.array([1, 2, 3, 4]))
    assert values.tolist() == [0.0, 0.1, 0.3] and counts.tolist() == [4, 2, 4]
    # Already canonical input comes back as it is; sorted input is not canonical with a zero
    # count or a repeated value.
    again = canonical(values, counts)
    assert again[0].tolist() == [0.0, 0.1, 0.3] and again[1].tolist() == [4, 2, 4]
    values, counts = canonical(np.array([0.1, 0.2, 0.3]), np.array([1, 0, 2]))
    assert values.tolist() == [0.1, 0.3] and counts.tolist() == [1, 2]
    values, counts = canonical(np.array([0.1, 0.2, 0.2]), np.array([1, 1, 2]))
    assert values.tolist() == [0.1, 0.2] and counts.tolist() == [1, 3]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.1, 0.25, 1.0, 1e-9, 3.5]), st.integers(0, 5)), max_size=40),
       st.integers(1, 4))
def test_canonical_equals_unique_and_canonicalise_keeps_the_gaps(runs, parts):
    values = np.array([v for v, _ in runs], dtype=np.float64)
    counts = np.array([c for _, c in runs], dtype=np.int64)
    got_v, got_c = canonical(values, counts)
    unique, inverse = np.unique(values, return_inverse=True)
    totals = np.bincount(inverse.reshape(-1), weights=counts, minlength=len(unique)).astype(np.int64)
    assert np.array_equal(got_v, unique[totals > 0]) and np.array_equal(got_c, totals[totals > 0])
    # Logs canonicalised apart (as workers do) merge to the same distribution as the raw logs.
    logs = [GapLog() for _ in range(parts)]
    for i, (v, c) in enumerate(runs):
        logs[i % parts].add(v, c)
    raw = merged(logs)
    for log in logs:
        log.canonicalise()
        assert np.all(np.diff(np.frombuffer(log.values)) > 0)
    after = merged(logs)
    assert np.array_equal(raw[0], after[0]) and np.array_equal(raw[1], after[1]) and raw[2] == after[2]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 4)), min_size=1, max_size=30), st.data())
def test_remove_takes_one_occurrence_of_each_gap_out(runs, data):
    log = GapLog()
    for value, count in runs:
        log.add(value, count)
    gaps = np.repeat([v for v, _ in runs], [c for _, c in runs])
    taken = data.draw(st.lists(st.integers(0, len(gaps) - 1), unique=True, max_size=len(gaps)))
    log.remove(gaps[taken])
    rest = np.delete(gaps, taken)
    assert np.array_equal(expand(*merged([log])[:2]), np.sort(rest))


def test_remove_refuses_a_gap_the_log_does_not_hold_and_works_on_sketches():
    log = GapLog()
    log.add(0.5, 2)
    with pytest.raises(ValueError, match="does not hold"):
        log.remove(np.array([0.25]))
    with pytest.raises(ValueError, match="does not hold"):
        log.remove(np.array([0.5, 0.5, 0.5]))
    sketch = GapLog(max_runs=4)
    for i in range(20):
        sketch.add(0.01 * (i + 1), 1)
    assert not sketch.exact
    sketch.remove(np.array([0.2, 0.01]))  # added raw, taken out by their buckets
    assert len(sketch) == 18
