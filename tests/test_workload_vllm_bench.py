"""Workloads as vllm bench serve makes them: its rescale of random arrivals (--normalize-arrivals) and its
oversampling of a dataset smaller than --num-prompts (every row once, then the extra ones drawn)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.options import build_config
from simulator.config.run_config import RunConfig
from simulator.workload.generate import generate_requests, sample_rows


@pytest.mark.parametrize("arrival", ["poisson", "gamma"])
def test_normalized_arrivals_end_at_n_over_qps_for_every_seed(arrival: str) -> None:
    ends, plain = [], []
    for seed in range(3):
        base = RunConfig().replace(workload__arrival=arrival, workload__cv=2.0 if arrival == "gamma" else 1.0,
                                   workload__qps=10.0, workload__num_requests=100, seed=seed)
        norm = base.replace(workload__normalize_arrivals=True)
        a, b = (generate_requests(c.workload, np.random.default_rng(seed)).arrival_at for c in (base, norm))
        assert np.allclose(b / a, b[-1] / a[-1])  # one factor: the gaps keep their shape
        ends.append(b[-1])
        plain.append(a[-1])
    assert np.allclose(ends, 10.0) and len({round(x, 6) for x in plain}) == 3


def test_normalize_arrivals_is_refused_where_it_would_do_nothing() -> None:
    for options in ({"arrival": "fixed"}, {"arrival": "burst", "concurrency": 4}):
        with pytest.raises(ConfigError, match="--normalize-arrivals"):
            build_config(normalize_arrivals=True, **options)


def test_a_small_trace_is_used_whole_before_any_row_repeats() -> None:
    rng = np.random.default_rng(0)
    idx = sample_rows(10, 25, rng)
    assert sorted(idx[:10].tolist()) == list(range(10)) and len(idx) == 25 and idx.max() < 10
    assert sorted(sample_rows(10, 10, rng).tolist()) == list(range(10))
