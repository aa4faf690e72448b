"""The capacity search's pre-check under speculative decoding (issue 32).

Without speculation the floor is a lone decode: every TBT gap and every TPOT lasts at least
that. With it a step emits up to ``k + 1`` tokens (per-token gaps of 0 between them) and pays
for its drafter, so the floor is the cheapest step per token it can emit (TPOT) or the
cheapest step scaled by how many zero gaps can sit below the quantile (TBT). These tests hold
the floor against real simulated runs both ways: it lets through an SLO speculation meets, it
refuses one no run meets, and it is never above what a run measures.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.config.run_config import RunConfig, WorkloadConfig
from simulator.engine.tbt import percentiles
from simulator.planning.capacity import (
    SLO,
    SearchSettings,
    find_capacity,
    impossible_reason,
    min_iteration_s,
    request_output_tokens,
    run_trial,
    step_floor,
    tpot_floors,
    zero_gap_factor,
)
from simulator.report.metrics import request_columns, tbt_distribution
from simulator.simulation import simulate

NGRAM = '{"method": "ngram", "num_speculative_tokens": 3}'


def _config(num_requests: int = 48, qps: float = 0.5, **changes) -> RunConfig:  # noqa: ANN003
    """llama-2-7b on one A100 (roofline, vllm-2023-splitwise preset): a lone decode costs 13.2 ms."""
    return RunConfig(workload=WorkloadConfig(num_requests=num_requests, qps=qps, output_tokens=64), seed=3,
                     engine="vllm-2023-splitwise").replace(**changes)


def _spec(rate: float = 0.9, json: str = NGRAM, **changes) -> RunConfig:  # noqa: ANN003
    return _config(speculative__vllm_json=json, speculative__acceptance_rate=rate, **changes)


def test_plain_floor_is_the_lone_decode_unchanged() -> None:
    config = _config()
    floor = step_floor(config)
    assert floor.verify_s == () and floor.max_accepted == 0
    assert min_iteration_s(config) == floor.plain_s == floor.token_s()[0] == floor.tbt_quantile_s(50.0)
    reason = impossible_reason(config, SLO(tbt_s=floor.plain_s * 0.9))
    assert reason is not None and "lone decode" in reason and "no QPS can meet it" in reason
    assert impossible_reason(config, SLO(tbt_s=floor.plain_s * 1.1)) is None


def test_tpot_slo_below_a_lone_decode_is_met_with_speculation() -> None:
    """The old pre-check said capacity 0 here (a TPOT SLO of 10 ms below the 13.2 ms lone
    decode); with n-gram speculation (k=3, acceptance 0.9) a real search finds a capacity."""
    slo = SLO(tbt_s=0.010, criterion="goodput")  # 90% of requests with TPOT <= 10 ms
    plain, spec = _config(), _spec()
    assert min_iteration_s(plain) > slo.goodput_tpot_s
    assert impossible_reason(plain, slo) is not None  # plain decoding: still refused
    assert impossible_reason(spec, slo) is None
    report = find_capacity(spec, slo, SearchSettings(qps_start=0.5, min_qps=0.1, max_qps=8.0, rel_tol=0.5,
                                                     max_trials=6))
    assert report.capacity_qps > 0.0, report.seeds[0].reason
    best = report.seeds[0].at_capacity
    assert best is not None and best.passed and best.goodput_fraction >= 0.9


def test_low_tbt_quantile_slo_is_met_with_speculation() -> None:
    """P50 of per-token gaps with k=3: up to 3/4 of them can be 0, so no floor applies, and a
    real run meets a 5 ms P50 (below the lone decode) the old check refused."""
    slo = SLO(tbt_s=0.005, tbt_quantile=50.0)
    spec = _spec()
    assert impossible_reason(_config(), slo) is not None
    assert step_floor(spec).tbt_quantile_s(50.0) == 0.0
    assert impossible_reason(spec, slo) is None
    trial = run_trial(spec, 0.5, slo)
    assert trial.passed, trial.reason
    assert trial.tbt_s_q <= 0.005


def test_new_floor_still_refuses_what_no_run_meets() -> None:
    """Even with every draft accepted (rate 1: each verify emits k + 1 = 4 tokens), a TPOT
    below the lone verify's time over 4 tokens, or a P99 TBT below a lone step, is out of
    reach: the pre-check says so naming speculation, and a real run at low load agrees."""
    spec = _spec(rate=1.0)
    floor = step_floor(spec)
    per_token_s, step = floor.token_s()
    assert "verify of 3 drafts" in step and per_token_s < min_iteration_s(_config()) / 3
    tpot_slo = SLO(tbt_s=per_token_s * 0.95, criterion="goodput")
    reason = impossible_reason(spec, tpot_slo)
    assert reason is not None and "speculative decoding (ngram, k=3)" in reason and "TPOT" in reason
    result = simulate(spec.replace(workload__qps=0.2, workload__num_requests=16))
    tpot = request_columns(result)["tpot_s"]
    assert np.nanmin(tpot) > tpot_slo.goodput_tpot_s  # no request meets it
    tbt_slo = SLO(tbt_s=0.010)  # P99 > 3/4: the quantile is a real step's gap
    reason = impossible_reason(spec, tbt_slo)
    assert reason is not None and "P99 TBT" in reason and "3/4" in reason and "speculative" in reason
    values, counts, _ = tbt_distribution(result)
    assert percentiles(values, counts, [99.0])[0] > tbt_slo.tbt_s


# Methods, k, acceptance (i.i.d., per position with a 0, perfect), adaptive policies, a
# disaggregated decode pool; low load (lone steps: the floor's own case) and high load.
RUNS = [
    dict(json=NGRAM, rate=0.9, qps=0.3),
    dict(json=NGRAM, rate=1.0, qps=0.3),
    dict(json=NGRAM, rate=0.6, qps=20.0),
    dict(json='{"method": "eagle3", "num_speculative_tokens": 2}', rate=0.8, qps=0.5),
    dict(json='{"method": "draft_model", "num_speculative_tokens": 4, "model": "vicuna-68m"}', rate=0.95, qps=1.0),
    dict(json='{"method": "eagle3", "num_speculative_tokens": 3, "acceptance_rates": [0.9, 0.0, 0.5]}', rate=None,
         qps=0.5),
    dict(json='{"method": "ngram", "num_speculative_tokens": 4, "disable_by_batch_size": 2}', rate=0.9, qps=8.0),
    dict(json='{"method": "eagle", "num_speculative_tokens": 4, "reduce_k_batch_size": 2}', rate=0.9, qps=8.0),
    dict(json=NGRAM, rate=0.9, qps=1.0, prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)"),
    dict(json=NGRAM, rate=0.9, qps=1.0, prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)", first_token_at="prefill"),
    dict(json=None, rate=None, qps=1.0, prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)"),  # plain
]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: "-".join(str(v)[:24] for v in r.values()))
def test_floor_never_above_what_a_run_measures(run: dict) -> None:
    changes = {k: v for k, v in run.items() if k not in ("json", "rate", "qps")}
    if run["json"] is not None:
        changes["speculative__vllm_json"] = run["json"]
    if run["rate"] is not None:
        changes["speculative__acceptance_rate"] = run["rate"]
    config = _config(num_requests=32, qps=run["qps"], **changes)
    floor = step_floor(config)
    result = simulate(config)
    if run["json"] is not None:
        assert result.extra["speculative"]["num_verify_steps"] > 0
    cols = request_columns(result)
    # the pre-check's lengths are the run's; each request's TPOT is at or above its floor
    assert sorted(request_output_tokens(config)) == sorted(cols["num_output_tokens"])
    has_tpot = ~np.isnan(cols["tpot_s"])
    tpot = cols["tpot_s"][has_tpot]
    assert len(tpot)
    assert (tpot_floors(config, floor, cols["num_output_tokens"])[has_tpot] <= tpot).all()
    values, counts, _ = tbt_distribution(result)
    quantiles = (10.0, 50.0, 67.0, 75.0, 80.0, 90.0, 95.0, 99.0, 100.0)
    for q, measured in zip(quantiles, percentiles(values, counts, quantiles), strict=True):
        assert floor.tbt_quantile_s(q) <= measured, (q, floor.tbt_quantile_s(q), measured)
    # A TPOT SLO 95% of this run's requests meet, and its own P99 TBT, are never refused
    # (the run itself shows them within reach).
    assert impossible_reason(config, SLO(tbt_s=float(np.quantile(tpot, 0.95)), criterion="goodput")) is None
    p99 = percentiles(values, counts, [99.0])[0]
    assert impossible_reason(config, SLO(tbt_s=p99)) is None


@given(z=st.integers(0, 5), quantile=st.floats(1.0, 100.0), num_steps=st.integers(1, 40), data=st.data())
def test_zero_gap_factor_bounds_any_sample(z: int, quantile: float, num_steps: int, data: st.DataObject) -> None:
    """Any gaps a run can write (per step one gap >= 1 and up to z zeros) have their
    ``quantile`` (numpy's linear) at or above :func:`zero_gap_factor`."""
    zeros = sum(data.draw(st.lists(st.integers(0, z), min_size=num_steps, max_size=num_steps)))
    steps = data.draw(st.lists(st.floats(1.0, 3.0), min_size=num_steps, max_size=num_steps))
    sample = np.concatenate([np.zeros(zeros), np.array(steps)])
    assert zero_gap_factor(quantile, z) <= float(np.percentile(sample, quantile)) + 1e-12


def test_zero_gap_factor_is_tight_for_long_runs() -> None:
    assert zero_gap_factor(99.0, 0) == 1.0 and zero_gap_factor(10.0, 0) == 1.0
    assert zero_gap_factor(75.0, 3) == 0.0 and zero_gap_factor(50.0, 1) == 0.0  # the quantile can be a 0 gap
    assert zero_gap_factor(100.0, 7) == 1.0
    # q above the zero share: a long run's quantile is a step's gap; the factor only gives way
    # to small runs (a few gaps, the quantile interpolated between a 0 and a step).
    assert 0.95 <= zero_gap_factor(99.0, 3) < 1.0
    assert math.isclose(zero_gap_factor(99.0, 3), 0.97)  # 4 gaps [0, 0, 0, 1]: index 2.97


def test_cli_capacity_names_speculation_when_it_refuses() -> None:
    import json

    from typer.testing import CliRunner

    from simulator.cli import app

    result = CliRunner().invoke(app, ["capacity", "--num-requests", "32", "--engine", "vllm-2023-splitwise",
                                      "--speculative-config", NGRAM,
                                      "--acceptance-rate", "1.0", "--tbt-slo", "0.003", "--criterion", "goodput",
                                      "--json"])
    assert result.exit_code == 1, result.output  # (no answer: exit 1, the JSON written)
    data = json.loads(result.output)
    assert data["capacity_qps"] == 0.0 and data["num_trials"] == 0
    assert "speculative decoding (ngram, k=3)" in data["reason"] and "at most 4 tokens" in data["reason"]
