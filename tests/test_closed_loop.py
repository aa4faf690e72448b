"""Closed-loop load (``--concurrency N``): N users, each sending its next request when its last ends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.report.benchmark import benchmark_metrics, max_in_flight
from simulator.report.metrics import request_columns, summarize
from simulator.simulation import simulate

SMALL = dict(replica__model="llama-3-8b", replica__gpu="h100-sxm", scheduler__name="vllm-v1",
             workload__name="fixed", workload__prompt_tokens=512, workload__output_tokens=64,
             workload__arrival="burst", workload__num_requests=240, workload__concurrency=16)


def closed(**changes) -> RunConfig:
    return RunConfig().replace(**{**SMALL, **changes})


def _timeline(result):
    cols = request_columns(result)
    return cols, cols["arrival_at"], cols["completed_at"]


def test_never_more_than_n_in_flight_and_n_reached():
    result = simulate(closed())
    cols, sent, ended = _timeline(result)
    assert (cols["status"] == "finished").all()
    assert max_in_flight(sent, ended) == 16
    # Sends happen only at t=0 (the first N) or at a completion: a user waits for its last request.
    later = np.sort(sent[16:])
    assert (sent[:16] == 0).all()
    assert np.isin(later, ended).all()


def test_throughput_matches_littles_law():
    # Steady state (warm-up left out): throughput = N / mean E2E. The last waves drain below N
    # users (throughput falls short: measured -2.8% to -3.2% at 40 waves
    # and -0.7% to -0.8% at 120 under the 2023 and 2026 engines): 120 waves within 1.5%.
    result = simulate(closed(workload__num_requests=16 * 120, workload__num_warmup=32,
                             workload__prompt_tokens=256, workload__output_tokens=128,
                             workload__range_ratio=0.5))
    cols = request_columns(result)
    m = benchmark_metrics(result, cols)
    little = 16 / (m["mean_e2el_ms"] / 1000)
    assert m["request_throughput"] == pytest.approx(little, rel=0.015)


def test_same_results_with_and_without_event_skipping():
    for replicas in (1, 2):
        a = simulate(closed(num_replicas=replicas, fast_forward=True))
        b = simulate(closed(num_replicas=replicas, fast_forward=False))
        ca, cb = request_columns(a), request_columns(b)
        for name in ("arrival_at", "first_token_at", "completed_at", "replica_id"):
            assert np.array_equal(ca[name], cb[name]), (replicas, name)


def test_closed_loop_is_never_partitioned():
    # Two replicas behind round robin would run apart in open loop; closed loop needs the joint run.
    with pytest.raises(ConfigError, match="workers"):
        simulate(closed(num_replicas=2), workers=2)


def test_warmup_requests_are_left_out_of_the_figures():
    # Banded lengths: the users drift apart after the ramp (with exact lengths every wave repeats it).
    result = simulate(closed(workload__num_warmup=48, workload__range_ratio=0.3))
    cols = request_columns(result)
    m = benchmark_metrics(result, cols)
    measured = cols["request_id"] >= 48
    assert m["completed"] == 240 - 48
    assert m["mean_ttft_ms"] == pytest.approx(float(np.mean(cols["ttft_s"][measured])) * 1000)
    assert m["itl_excludes_warmup"]
    s = summarize(result, cols)
    assert s["num_finished"] == 240 - 48
    assert s["ttft_s_mean"] == pytest.approx(float(np.mean(cols["ttft_s"][measured])))
    # The warm-up ramp (everyone sent at t=0) is what the figures leave out: its TTFTs are the largest.
    assert cols["ttft_s"][:16].mean() > cols["ttft_s"][measured].mean()


def test_itl_without_warmup_equals_the_pooled_gaps():
    result = simulate(closed(), token_times=True)
    cols = request_columns(result)
    m = benchmark_metrics(result, cols, percentiles_=(50, 90, 99))
    gaps = np.concatenate([np.diff(np.frombuffer(r.token_times, dtype=np.float64)) for r in result.requests])
    assert m["median_itl_ms"] == pytest.approx(float(np.median(gaps)) * 1000, rel=1e-12)
    assert m["p99_itl_ms"] == pytest.approx(float(np.percentile(gaps, 99)) * 1000, rel=1e-12)
    assert m["mean_itl_ms"] == pytest.approx(float(gaps.mean()) * 1000, rel=1e-9)


def test_range_ratio_bands_lengths_as_vllm_bench():
    result = simulate(closed(workload__range_ratio=0.25, workload__num_requests=400))
    cols = request_columns(result)
    p, o = cols["num_prompt_tokens"], cols["num_output_tokens"]
    assert p.min() >= math.floor(512 * 0.75) and p.max() <= math.ceil(512 * 1.25)
    assert o.min() >= math.floor(64 * 0.75) and o.max() <= math.ceil(64 * 1.25)
    assert len(np.unique(p)) > 50  # really drawn, not fixed


@pytest.mark.parametrize("ratio, lo", [(0.8, 409), (0.0, 1)])
def test_range_style_sglang_bands_below_the_length(ratio, lo):
    # SGLang's bench_serving (and InferenceX's client) read r as the low end's fraction: [int(len*r), len].
    result = simulate(closed(workload__range_ratio=ratio, workload__range_style="sglang", workload__num_requests=400))
    cols = request_columns(result)
    p, o = cols["num_prompt_tokens"], cols["num_output_tokens"]
    assert p.min() >= lo and p.max() <= 512 and o.min() >= max(int(64 * ratio), 1) and o.max() <= 64
    assert p.min() < lo + 0.1 * (512 - lo) and p.max() > 512 - 0.1 * (512 - lo)  # the whole band is drawn
    assert np.mean(p) == pytest.approx((lo + 512) / 2, rel=0.05)  # uniform: its mean mid-band, not at 512


def test_range_style_sglang_at_ratio_one_is_fixed_and_vllm_is_the_default():
    fixed = request_columns(simulate(closed(workload__range_ratio=1.0, workload__range_style="sglang")))
    assert (fixed["num_prompt_tokens"] == 512).all() and (fixed["num_output_tokens"] == 64).all()
    assert RunConfig().workload.range_style == "vllm" and not closed().workload.is_banded
    assert closed(workload__range_style="sglang").workload.is_banded  # r 0 under sglang: [1, len]


def test_stddev_spreads_lengths_as_aiperf_and_a_zero_one_stays_exact():
    result = simulate(closed(workload__prompt_tokens_stddev=20.0, workload__num_requests=2000))
    cols = request_columns(result)
    p, o = cols["num_prompt_tokens"], cols["num_output_tokens"]
    assert (o == 64).all()  # --osl-stddev 0: exact
    assert np.issubdtype(p.dtype, np.integer) and p.min() >= 1
    assert np.mean(p) == pytest.approx(512, abs=4 * 20 / math.sqrt(2000))  # the mean within 4 standard errors
    assert np.std(p) == pytest.approx(20, rel=0.1)
    again = request_columns(simulate(closed(workload__prompt_tokens_stddev=20.0, workload__num_requests=2000)))
    assert (again["num_prompt_tokens"] == p).all()  # same seed, same lengths


def test_a_spread_of_a_few_tokens_splits_a_closed_loops_waves():
    # 8 users of exactly 1,024 prompt tokens fill a 8,192-token budget to the token: they are prefilled
    # together and stay one wave (every first token of a round at one instant). A spread of a few tokens
    # (AIPerf's prompts as the server counts them) overflows the budget and splits the wave.
    base = dict(workload__prompt_tokens=1024, workload__output_tokens=128, workload__concurrency=8,
                workload__num_requests=160, scheduler__max_num_batched_tokens=8192)
    exact = request_columns(simulate(closed(**base)))
    spread = request_columns(simulate(closed(**base, workload__prompt_tokens_stddev=3.0)))
    first_exact, first_spread = exact["first_token_at"][80:], spread["first_token_at"][80:]
    assert len(np.unique(first_exact)) == len(first_exact) // 8  # waves of 8
    assert len(np.unique(first_spread)) > len(first_spread) // 8
    assert spread["ttft_s"][80:].mean() < exact["ttft_s"][80:].mean()


def test_finite_rate_with_a_concurrency_cap_sends_at_the_later_of_both():
    config = closed(workload__arrival="poisson", workload__qps=50.0, workload__concurrency=4)
    planned = RunConfig().replace(**{**SMALL, "workload__arrival": "poisson", "workload__qps": 50.0,
                                     "workload__concurrency": None})
    capped, free = simulate(config), simulate(planned)
    cc, cf = request_columns(capped), request_columns(free)
    assert max_in_flight(cc["arrival_at"], cc["completed_at"]) == 4
    assert (cc["arrival_at"] >= cf["arrival_at"]).all()  # never before its planned time
    assert max_in_flight(cf["arrival_at"], cf["completed_at"]) > 4  # the cap mattered


def test_a_refused_request_frees_its_user():
    # Requests longer than the context are refused at submit (lengths not filtered to it: a
    # max_total_tokens above it): their users move on at once.
    config = closed(replica__max_model_len=600, workload__range_ratio=0.5, workload__max_total_tokens=10**6,
                    workload__num_requests=100, workload__concurrency=4)
    result = simulate(config)
    cols = request_columns(result)
    assert (cols["status"] == "rejected").any() and (cols["status"] == "finished").any()
    done = cols["status"] == "finished"
    assert max_in_flight(cols["arrival_at"][done], cols["completed_at"][done]) == 4
    # A refusal frees its user at once: the next request is sent at the same instant.
    refused = np.flatnonzero(~done)
    refused = refused[refused + 1 < len(done)]
    assert (cols["arrival_at"][refused + 1] == cols["arrival_at"][refused]).any()


def test_disaggregated_closed_loop():
    config = closed(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)", workload__num_requests=64,
                    workload__concurrency=8)
    result = simulate(config)
    cols = request_columns(result)
    assert (cols["status"] == "finished").all()
    assert max_in_flight(cols["arrival_at"], cols["completed_at"]) == 8
    # per-GPU throughputs are over every GPU of the deployment (2 here): output and total tokens (InferenceX's
    # output_tput_per_gpu and tput_per_gpu)
    m = benchmark_metrics(result, cols)
    assert m["num_gpus"] == 2
    assert m["output_throughput_per_gpu"] == pytest.approx(m["output_throughput"] / 2)
    assert m["total_token_throughput_per_gpu"] == pytest.approx(m["total_token_throughput"] / 2)
    assert m["total_token_throughput_per_gpu"] > m["output_throughput_per_gpu"]


@pytest.mark.parametrize("changes, field", [
    (dict(workload__concurrency=0), "workload.concurrency"),
    (dict(workload__num_warmup=-1), "workload.num_warmup"),
    (dict(workload__num_warmup=240), "workload.num_warmup"),
    (dict(workload__range_ratio=1.0), "workload.range_ratio"),
    (dict(workload__range_ratio=1.5, workload__range_style="sglang"), "workload.range_ratio"),
    (dict(workload__range_style="aiperf"), "workload.range_style"),
    (dict(workload__range_style="sglang", workload__name="sharegpt"), "workload.range_ratio"),
    (dict(workload__prompt_tokens_stddev=-1.0), "workload.prompt_tokens_stddev"),
    (dict(workload__output_tokens_stddev=float("nan")), "workload.output_tokens_stddev"),
    (dict(workload__prompt_tokens_stddev=5.0, workload__name="sharegpt"), "workload.prompt_tokens_stddev"),
    (dict(workload__prompt_tokens_stddev=5.0, workload__range_ratio=0.2), "workload.prompt_tokens_stddev"),
])
def test_bad_closed_loop_settings_are_one_line(changes, field):
    with pytest.raises(ConfigError) as err:
        closed(**changes)
    assert err.value.field == field


def test_peak_concurrency_counts_refused_requests_as_the_users_they_held():
    # Refused requests return at once: each was a send and a return, not a return alone (which read 0 users).
    config = closed(replica__max_model_len=600, workload__range_ratio=0.5, workload__max_total_tokens=10**6,
                    workload__num_requests=100, workload__concurrency=4)
    result = simulate(config)
    cols = request_columns(result)
    assert (cols["status"] == "rejected").any()
    assert benchmark_metrics(result, cols)["max_concurrent_requests"] == 4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_rescaled_poisson_loads_duration_starts_before_the_first_send_as_vllms(seed):
    # vllm bench serve starts its clock, then sleeps delay_ts[0] before the first send; the rescale puts the last
    # send at n / qps, so its duration (and throughput) barely moves with the seed. From the first send it moved 30%.
    config = RunConfig().replace(replica__model="llama-3-8b", replica__gpu="h100-sxm", workload__name="fixed",
                                 workload__prompt_tokens=128, workload__output_tokens=16, workload__qps=2.0,
                                 workload__num_requests=10, workload__normalize_arrivals=True, seed=seed)
    result = simulate(config)
    cols = request_columns(result)
    m = benchmark_metrics(result, cols)
    last = float(cols["completed_at"].max())
    assert cols["arrival_at"].min() > 0
    assert m["duration"] == pytest.approx(last)
    assert 5.0 < m["duration"] < 5.0 + float((cols["completed_at"] - cols["arrival_at"]).max()) + 1e-9
    assert summarize(result, cols)["duration_s"] == pytest.approx(m["duration"])


def test_a_warmups_tail_is_no_part_of_the_measured_throughput(tmp_path):
    # One long warm-up request still streams long after the nine measured ones finished: the figures' window
    # ends with the last measured request, in the summary as in the vLLM view.
    from simulator.workload.generate import RequestTable

    arrival = 0.5 + 0.1 * np.arange(10)
    output = np.full(10, 20)
    output[0] = 2000
    table = RequestTable(arrival, np.full(10, 100), output, "hand-made")
    config = RunConfig().replace(replica__model="llama-3-8b", replica__gpu="h100-sxm", workload__num_warmup=1,
                                 workload__num_requests=10)
    result = simulate(config, table)
    cols = request_columns(result)
    measured = cols["request_id"] >= 1
    window = float(cols["completed_at"][measured].max() - cols["arrival_at"][measured].min())
    assert result.sim_end_at > cols["completed_at"][measured].max() + 1.0  # the warm-up ran on well after
    s = summarize(result, cols)
    assert s["duration_s"] == pytest.approx(window)
    assert s["output_tokens_per_s"] == pytest.approx(9 * 20 / window)
    assert benchmark_metrics(result, cols)["duration"] == pytest.approx(window)
