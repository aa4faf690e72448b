"""A closed loop's warm-up as a phase of its own (``workload.warmup_mode="drain"``), as AIPerf and
``vllm bench serve`` run it: the warm-up runs to completion, then every user sends at once."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.report.benchmark import benchmark_metrics, max_in_flight
from simulator.report.metrics import request_columns
from simulator.simulation import simulate

SMALL = dict(replica__model="llama-3-8b", replica__gpu="h100-sxm", scheduler__name="vllm-v1",
             workload__name="fixed", workload__prompt_tokens=512, workload__output_tokens=64,
             workload__arrival="burst", workload__num_requests=160, workload__concurrency=16,
             workload__num_warmup=24, workload__range_ratio=0.3)


def phased(**changes) -> RunConfig:
    return RunConfig().replace(**{**SMALL, "workload__warmup_mode": "drain", **changes})


def test_measured_phase_starts_when_the_warmup_has_drained():
    cols = request_columns(simulate(phased()))
    sent, ended, rid = cols["arrival_at"], cols["completed_at"], cols["request_id"]
    warm = rid < 24
    assert (cols["status"] == "finished").all()
    drained_at = ended[warm].max()
    # No measured request is sent before the last warm-up request ends; the first 16 go at that instant.
    assert sent[~warm].min() == drained_at
    first_wave = np.sort(rid[~warm])[:16]
    assert (sent[np.isin(rid, first_wave)] == drained_at).all()
    # The warm-up's 24 requests: 16 at t=0, 8 as users free up, never more than 16 in flight.
    assert max_in_flight(sent, ended) == 16
    assert max_in_flight(sent[warm], ended[warm]) == 16
    assert max_in_flight(sent[~warm], ended[~warm]) == 16
    # With steady warm-up the measured requests follow the warm-up's without a pause.
    steady = request_columns(simulate(phased(workload__warmup_mode="steady")))
    s_warm = steady["request_id"] < 24
    assert steady["arrival_at"][~s_warm].min() < steady["completed_at"][s_warm].max()


def test_warmup_is_left_out_and_the_first_wave_is_measured():
    result = simulate(phased())
    cols = request_columns(result)
    m = benchmark_metrics(result, cols)
    measured = cols["request_id"] >= 24
    assert m["completed"] == 160 - 24
    assert m["mean_ttft_ms"] == pytest.approx(float(np.mean(cols["ttft_s"][measured])) * 1000)
    # The measured phase opens with all 16 users' prompts at once: its first wave waits longest,
    # so measured TTFT is above the steady loop's (whose burst fell in the warm-up).
    steady = simulate(phased(workload__warmup_mode="steady"))
    assert m["mean_ttft_ms"] > benchmark_metrics(steady, request_columns(steady))["mean_ttft_ms"]


def test_same_results_with_and_without_event_skipping_and_reproducible():
    a = request_columns(simulate(phased(fast_forward=True)))
    b = request_columns(simulate(phased(fast_forward=False)))
    c = request_columns(simulate(phased()))
    for name in ("arrival_at", "first_token_at", "completed_at"):
        assert np.array_equal(a[name], b[name]), name
        assert np.array_equal(a[name], c[name]), name


def test_disaggregated_pools_drain_too():
    config = phased(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)", workload__num_requests=48,
                    workload__concurrency=8, workload__num_warmup=8)
    cols = request_columns(simulate(config))
    warm = cols["request_id"] < 8
    assert (cols["status"] == "finished").all()
    assert cols["arrival_at"][~warm].min() >= cols["completed_at"][warm].max()
    assert max_in_flight(cols["arrival_at"], cols["completed_at"]) == 8


@pytest.mark.parametrize("changes", [
    dict(workload__warmup_mode="phased"),
    dict(workload__num_warmup=0),
    dict(workload__concurrency=None, workload__qps=4.0, workload__arrival="poisson"),
])
def test_bad_warmup_mode_is_one_line(changes):
    with pytest.raises(ConfigError) as err:
        phased(**changes)
    assert err.value.field == "workload.warmup_mode"


def test_the_plotted_gaps_leave_the_warmup_out():
    # simulate plot run's TBT CDF: the measured requests' gaps, as the summary's TBT figures.
    from simulator.report.metrics import summarize, tbt_samples

    result = simulate(phased(), token_times=True)
    cols = request_columns(result)
    gaps = tbt_samples(result)
    measured = cols["request_id"] >= 24
    assert len(gaps) == int((cols["num_output_tokens"][measured] - 1).sum())
    assert float(np.percentile(gaps, 99)) == pytest.approx(summarize(result, cols)["tbt_s_p99"])
