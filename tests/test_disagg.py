"""Disaggregated prefill/decode: conservation, ordering, link timing, KV balance, no stalls
(per-worker vs shared KV links: test_kv_links.py)."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.config.disagg_layout import layout_of, parse_link, parse_pool
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.report.disagg_metrics import decode_tbt_samples, disagg_summary, handoff_frame
from simulator.report.metrics import request_frame, tbt_samples
from simulator.simulation import simulate


def table(arrivals, prompts, outputs):  # noqa: ANN001, ANN201
    return SimpleNamespace(arrival_at=list(arrivals), num_prompt_tokens=list(prompts),
                           num_output_tokens=list(outputs), source="test")


def disagg_config(prefill: str = "1x(tp=1)", decode: str = "1x(tp=1)", link: str = "infiniband-200g",
                  mixed: str | None = None, util: float = 0.9, max_model_len: int = 1024, **kw) -> RunConfig:  # noqa: ANN003
    return RunConfig().replace(prefill_pool=prefill, decode_pool=decode, kv_link=link, mixed_pool=mixed,
                               replica__gpu_memory_utilization=util, replica__max_model_len=max_model_len, **kw)


def balanced_run(config: RunConfig, tab):  # noqa: ANN001, ANN201
    """Simulate, checking at every arrival that each replica's KV blocks balance
    (free + held by its requests + parked for a transfer == total)."""
    import simulator.engine.disagg as disagg

    clusters: list = []
    original = disagg.DisaggCluster.__init__

    def register(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        original(self, *args, **kwargs)
        clusters.append(self)

    def watch(env, requests):  # noqa: ANN001, ANN202
        for req in requests:
            if req.arrival_at > env.now:
                yield env.timeout(req.arrival_at - env.now)
            for free, held, total in clusters[-1].kv_balance():
                assert free + held == total and free >= 0
            for replica in clusters[-1].replicas:  # the schedulers keep running in arrival order
                keys = [(r.arrival_at, r.request_id) for r in replica.scheduler.running]
                assert keys == sorted(keys)

    disagg.DisaggCluster.__init__ = register
    try:
        result = simulate(config, tab, watch=watch)
    finally:
        disagg.DisaggCluster.__init__ = original
    assert all(free == total and held == 0 for free, held, total in clusters[-1].kv_balance())
    return result


def max_overlap(starts: np.ndarray, ends: np.ndarray) -> int:
    """Most intervals ``[start, end)`` open at once (an end at t before a start at t)."""
    events = sorted([(e - 1e-12, -1) for e in ends] + [(s, 1) for s in starts])
    return max(np.cumsum([d for _, d in events]), default=0)


def check_link_capacity(result, layout, scope: str) -> None:  # noqa: ANN001
    """Transfers on each KV link (engine.disagg step 3) never exceed its capacity: one shared link
    carries one transfer at a time; per worker, each prefill worker's egress one, each decode
    worker's ingress ``max(1, decode GPUs // prefill GPUs)``."""
    log = result.disagg.handoff
    done = np.flatnonzero(~np.isnan(log.transfer_start_at))
    starts, ends = log.transfer_start_at[done], log.transfer_end_at[done]
    if scope == "shared":
        assert max_overlap(starts, ends) <= 1
        return
    num_prefill = layout.prefill.num_replicas * layout.prefill_replica.attention_dp
    sender = log.prefill_replica_id[done] // layout.prefill_replica.attention_dp
    receiver = (log.decode_replica_id[done] - num_prefill) // layout.decode_replica.attention_dp
    width = max(1, layout.decode_replica.num_gpus // layout.prefill_replica.num_gpus)
    for k in np.unique(sender):
        assert max_overlap(starts[sender == k], ends[sender == k]) <= 1
    if layout.prefill.num_replicas > 1:
        for k in np.unique(receiver):
            assert max_overlap(starts[receiver == k], ends[receiver == k]) <= width


def check_invariants(config: RunConfig, tab) -> None:  # noqa: ANN001
    """Conservation and ordering of one disaggregated run (see the module docstring)."""
    result = balanced_run(config, tab)
    layout = layout_of(config)
    info, log = result.disagg, result.disagg.handoff
    num_prefill = layout.prefill.num_replicas
    pools = np.array(info.pools)
    prefill_ids = set(np.flatnonzero(pools == "prefill").tolist())
    # Every request finishes or is rejected with a reason.
    for r in result.requests:
        assert r.completed_at is not None or r.reject_reason, r
        assert r.completed_at is None or r.num_generated == r.num_output_tokens
    # KV blocks balance in every pool: all returned at the end.
    assert info.final_free_blocks == info.num_blocks
    # No link carries more transfers at once than it can (one; a wide decode ingress its width).
    starts, ends = log.transfer_start_at, log.transfer_end_at
    check_link_capacity(result, layout, config.kv_link_scope)
    iters = result.iteration_frame()
    prefill_iters = iters[iters["replica_id"].isin(prefill_ids)]
    prompts_on_prefill = 0
    for r in result.requests:
        rid = r.request_id
        if r.reject_reason or log.mixed[rid]:
            assert math.isnan(starts[rid])
            continue
        prompts_on_prefill += r.num_prompt_tokens
        assert 0 <= log.prefill_replica_id[rid] < num_prefill
        if r.num_output_tokens == 1:  # finishes on the prefill replica, no transfer
            assert math.isnan(starts[rid])
            continue
        # Transferred exactly once, after the last prefill chunk, before the first decode.
        assert log.decode_replica_id[rid] >= num_prefill and r.replica_id == log.decode_replica_id[rid]
        assert log.prefill_done_at[rid] == r.token_times[0]
        assert log.prefill_done_at[rid] <= log.decode_reserved_at[rid] <= starts[rid] <= ends[rid] < r.token_times[1]
        nbytes = r.num_prompt_tokens * info.kv_bytes_per_token
        assert log.kv_bytes[rid] == nbytes
        assert ends[rid] - starts[rid] == pytest.approx(layout.link.transfer_s(nbytes), rel=1e-9, abs=1e-12)
    # Every prompt is prefilled exactly once in the prefill pool (it never preempts).
    assert int(prefill_iters["num_prefill_tokens"].sum()) == prompts_on_prefill
    assert int(prefill_iters["num_decodes"].sum()) == 0


pool = st.builds(lambda n, tp, pp, sched, seqs: f"{n}x(tp={tp},pp={pp},sched={sched}{seqs})", st.integers(1, 2),
                 st.sampled_from([1, 2]), st.sampled_from([1, 1, 2]), st.sampled_from(["vllm", "sarathi"]),
                 st.sampled_from(["", "", ",seqs=2"]))
requests_st = st.lists(st.tuples(st.floats(0, 2, allow_nan=False), st.integers(2, 900), st.integers(1, 40)),
                       min_size=1, max_size=24)


@settings(max_examples=int(os.environ.get("SERVESIM_EXAMPLES", "25")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(prefill=pool, decode=pool, link=st.sampled_from(["infinite", "1GB/s@1ms", "infiniband-200g", "ethernet-10g"]),
       mixed=st.sampled_from([None, "1x(tp=1)"]), util=st.sampled_from([0.19, 0.2, 0.9]), specs=requests_st,
       scope=st.sampled_from(["per-worker", "shared"]))
def test_conservation_and_ordering_over_random_layouts(prefill, decode, link, mixed, util, specs, scope) -> None:  # noqa: ANN001
    arrivals = sorted(s[0] for s in specs)
    config = disagg_config(prefill, decode, link, mixed, util, scheduler__name="sarathi", scheduler__chunk_size=256,
                           kv_link_scope=scope)
    check_invariants(config, table(arrivals, [s[1] for s in specs], [s[2] for s in specs]))


def test_link_time_matches_a_hand_calculation() -> None:
    # Llama-2-7B: 2 (K,V) x 32 layers x 32 KV heads x 128 head dim x 2 bytes = 524,288 bytes per token.
    config = disagg_config(link="10GB/s@50us")
    result = simulate(config, table([0.0], [100], [3]))
    log = result.disagg.handoff
    assert log.kv_bytes[0] == 100 * 524_288
    assert log.transfer_end_at[0] - log.transfer_start_at[0] == pytest.approx(100 * 524_288 / 10e9 + 50e-6, rel=1e-12)
    # A topology link: InfiniBand 200 Gbit/s at 85% efficiency and 10 us.
    ib = parse_link("infiniband-200g", "a100-80gb")
    assert ib.transfer_s(1e9) == pytest.approx(10e-6 + 1e9 / (200e9 / 8 * 0.85), rel=1e-12)


def test_bandwidth_units_are_read_case_sensitively() -> None:
    # B is bytes, b bits: 200 Gbit/s is 25 GB/s however the bits are spelt, and the name shows the canonical unit.
    bits = [parse_link(text, "a100-80gb") for text in ("200Gb/s", "200Gbps", "200gbps")]
    gbytes = parse_link("25GB/s", "a100-80gb")
    assert all(link.bytes_per_s == pytest.approx(gbytes.bytes_per_s) for link in bits)
    assert {link.name for link in bits} == {"200Gb/s"} and gbytes.name == "25GB/s"
    assert parse_link("25GB/s@10US", "a100-80gb").name == "25GB/s@10us"
    # A spelling that says neither bytes nor bits is refused, at parse and at config validation.
    for text in ("200gb/s", "200GBPS", "200gB/s"):
        with pytest.raises(ConfigError, match="bytes or bits"):
            parse_link(text, "a100-80gb")
        with pytest.raises(ConfigError, match="bytes or bits"):
            RunConfig().replace(kv_link=text)  # validated in __post_init__


def test_transfers_queue_on_the_shared_link() -> None:
    config = disagg_config(prefill="2x(tp=1)", decode="2x(tp=1)", link="1GB/s", kv_link_scope="shared")
    result = simulate(config, table([0.0, 0.0], [512, 512], [4, 4]))
    log = result.disagg.handoff
    one = 512 * 524_288 / 1e9
    first, second = np.argsort(log.transfer_start_at)
    assert log.transfer_start_at[second] == pytest.approx(log.transfer_end_at[first])
    assert log.transfer_end_at[second] - log.transfer_start_at[second] == pytest.approx(one)
    df = handoff_frame(result, request_frame(result))
    assert df.loc[second, "link_queue_s"] > 0.9 * one


def test_fast_link_and_roomy_decode_pool_have_no_prefill_stalls() -> None:
    """Infinite link + ample decode KV: every decode-pool gap is one decode-only iteration."""
    rng = np.random.default_rng(3)
    n = 40
    arrivals = np.sort(rng.uniform(0, 4, n))
    prompts, outputs = rng.integers(200, 1000, n), rng.integers(20, 60, n)
    tab = table(arrivals, prompts, outputs)
    config = disagg_config(prefill="1x(tp=1)", decode="1x(tp=2)", link="infinite")
    result = simulate(config, tab)
    iters = result.iteration_frame()
    decode_iters = iters[iters["replica_id"] == 1]
    assert (decode_iters["num_prefill_tokens"] == 0).all()
    assert sum(r.num_preemptions for r in result.requests) == 0
    gaps = decode_tbt_samples(result)
    assert gaps.max() == pytest.approx(decode_iters["duration_s"].max(), rel=1e-9)
    handoff = handoff_frame(result, request_frame(result))
    assert (handoff["transfer_s"].dropna() == 0).all()
    # the first decode step waits for the engine's handoff latency (the stack's), then at most one step
    from simulator.costmodel.engine_model import load_engine

    stack_s = load_engine(config.engine).handoff_s
    assert np.allclose(handoff["stack_s"].dropna(), stack_s, rtol=0, atol=1e-9)
    assert handoff["handoff_gap_s"].max() <= stack_s + 2 * decode_iters["duration_s"].max() + 1e-9
    # The same requests on one aggregated vLLM replica stall decodes behind prompts.
    agg = simulate(RunConfig().replace(scheduler__name="vllm", replica__max_model_len=1024), tab)
    assert tbt_samples(agg).max() > 3 * gaps.max()


def test_full_decode_pool_backpressures_the_prefill_pool() -> None:
    # A decode cache of ~2,800 tokens (0.19 of an A100-80GB beside Llama-2-7B) and eight 700-token
    # prompts at once: prompts wait on the prefill replica, holding their KV, until decodes finish.
    config = disagg_config(prefill="1x(tp=2)", decode="1x(tp=1)", util=0.19, link="infinite")
    result = simulate(config, table([0.0] * 8, [700] * 8, [30] * 8))
    df = request_frame(result)
    assert (df["status"] == "finished").all()
    summary = disagg_summary(result, df)
    assert summary["backpressure_s_max"] > 0
    assert summary["num_transfers"] == 8
    assert result.disagg.final_free_blocks == result.disagg.num_blocks


def test_decode_pool_seats_at_most_its_max_num_seqs() -> None:
    """``seqs=`` on the decode pool caps its running batch: transferred requests beyond it wait,
    their KV held on the decode replica, for a finishing request's seat (the fast path agrees)."""
    rng = np.random.default_rng(5)
    tab = table(np.zeros(12), rng.integers(100, 400, 12), rng.integers(5, 40, 12))
    runs = {ff: simulate(disagg_config(decode="1x(tp=1,seqs=3)", link="infinite", fast_forward=ff), tab)
            for ff in (True, False)}
    iters = runs[True].iteration_frame()
    decode_iters = iters[iters["replica_id"] == 1]
    assert decode_iters["batch_size"].max() == 3
    df = request_frame(runs[True])
    assert (df["status"] == "finished").all()
    assert runs[True].disagg.final_free_blocks == runs[True].disagg.num_blocks
    assert iters.equals(runs[False].iteration_frame())
    assert df.equals(request_frame(runs[False]))
    # Unlimited seats: the same requests decode together.
    wide = simulate(disagg_config(link="infinite"), tab).iteration_frame()
    assert wide[wide["replica_id"] == 1]["batch_size"].max() > 3


def test_mixed_pool_takes_overflow_and_runs_are_deterministic() -> None:
    config = disagg_config(prefill="1x(tp=1)", decode="1x(tp=1)", mixed="1x(tp=1)", util=0.9,
                           workload__num_requests=60, workload__qps=20.0)
    a, b = simulate(config), simulate(config)
    assert a.disagg.handoff.mixed.sum() > 0
    assert [list(r.token_times) for r in a.requests] == [list(r.token_times) for r in b.requests]
    check_invariants(config, None)


def test_pool_syntax_is_canonical_and_errors_name_the_field() -> None:
    assert parse_pool(" 2X( tp=2 , gpu=H100-SXM )", "p").canonical() == "2x(tp=2,gpu=h100-sxm)"
    a = RunConfig().replace(prefill_pool="2x(gpu=h100-sxm,tp=2)", decode_pool="1x")
    b = RunConfig().replace(prefill_pool="2x(tp=2,gpu=h100-sxm)", decode_pool="1x()")
    assert a == b and a.prefill_pool == "2x(tp=2,gpu=h100-sxm)"
    assert RunConfig.from_dict(a.to_dict()) == a
    layout = layout_of(a)
    assert layout.prefill_replica.tp == 2 and layout.prefill_replica.gpu == "h100-sxm" and layout.num_gpus == 5
    for kwargs, field in (({"prefill_pool": "2(tp=2)", "decode_pool": "1x"}, "prefill_pool"),
                          ({"prefill_pool": "1x(tp=3)", "decode_pool": "1x"}, "prefill_pool"),
                          ({"prefill_pool": "1x(foo=1)", "decode_pool": "1x"}, "prefill_pool"),
                          ({"prefill_pool": "1x"}, "decode_pool"),
                          ({"prefill_pool": "1x", "decode_pool": "1x", "num_replicas": 2}, "num_replicas"),
                          ({"prefill_pool": "1x", "decode_pool": "1x", "kv_link": "warp"}, "kv_link")):
        with pytest.raises(ConfigError) as err:
            RunConfig().replace(**kwargs)
        assert str(err.value).startswith(field)


def test_run_and_split_headers_name_the_link_in_its_canonical_unit() -> None:
    from typer.testing import CliRunner

    from simulator.cli import app

    runner = CliRunner()
    ran = runner.invoke(app, ["run", "--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)", "--num-requests", "8",
                              "--kv-link", "200gbps", "--no-progress"])
    assert ran.exit_code == 0, ran.output
    assert "over 200Gb/s" in ran.output and "200gbps" not in ran.output
    split = runner.invoke(app, ["disagg", "split", "--gpus", "2", "--num-requests", "16", "--kv-link", "100gbps",
                                "--workers", "1"])
    assert split.exit_code == 0, split.output
    assert "KV link 100Gb/s" in split.output


def test_cli_runs_a_disaggregated_layout_and_reports_bad_pools_in_one_line(tmp_path) -> None:  # noqa: ANN001
    from typer.testing import CliRunner

    from simulator.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["run", "--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)", "--num-requests", "20",
                              "--out", str(tmp_path / "o"), "--format", "csv", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "disaggregated prefill 1x(tp=1) + decode 1x(tp=1)" in res.output
    assert (tmp_path / "o" / "handoff.csv").exists()
    res = runner.invoke(app, ["run", "--prefill-pool", "2y", "--decode-pool", "1x"])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith("prefill_pool: cannot read")


# ---------------------------------------------------------------------------------------------
# Planning: goodput per GPU, split search, comparison, capacity and sweeps on disaggregated layouts


def small_workload(config: RunConfig) -> RunConfig:
    return config.replace(workload__name="fixed", workload__prompt_tokens=512, workload__output_tokens=32,
                          workload__num_requests=60)


@pytest.mark.parametrize(("num_gpu_blocks", "runs"), [(256, False), (260, True)])
def test_fits_agrees_with_the_run_at_the_watermark(num_gpu_blocks: int, runs: bool) -> None:
    """256 blocks of 16 are exactly max_model_len 4096 tokens, but new prompts may not use the
    1% watermark (2 blocks): the run refuses that cache, so the planner must not offer it."""
    from simulator.planning.split import fits

    config = small_workload(RunConfig().replace(replica__model="llama-2-7b", replica__num_gpu_blocks=num_gpu_blocks))
    assert config.replica.effective_max_model_len == 4096
    assert fits(config) is runs
    if runs:
        assert len(simulate(config).requests) == 60
    else:
        with pytest.raises(ConfigError, match="max_model_len"):
            simulate(config)


def test_split_candidates_use_exactly_the_gpus_and_fit() -> None:
    from simulator.config.disagg_layout import num_gpus_of
    from simulator.planning.split import aggregated_candidates, fits, split_candidates

    base = RunConfig().replace(replica__model="llama-2-13b")
    splits = split_candidates(base, 8)
    labels = {(c.prefill_pool, c.decode_pool) for c in splits}
    assert ("4x(tp=1,sched=vllm)", "1x(tp=4,sched=vllm)") in labels
    assert ("1x(tp=1,sched=vllm)", "7x(tp=1,sched=vllm)") in labels
    assert all(num_gpus_of(c) == 8 and fits(c) for c in splits)
    assert len(labels) == len(splits)
    # Llama-2-70B does not fit one A100-80GB: no pool of tp=1 is offered.
    big = split_candidates(RunConfig().replace(replica__model="llama-2-70b"), 8)
    assert big and all("(tp=1," not in c.prefill_pool + c.decode_pool for c in big)
    agg = aggregated_candidates(base, 8, taus=(512,))
    assert {(f, c.num_replicas, c.replica.tp) for f, c in agg} >= {("vllm", 8, 1), ("sarathi", 4, 2)}


def test_goodput_search_brackets_the_slo_attainment() -> None:
    from simulator.planning.split import GoodputSLO, attainment_at, goodput_search

    config = small_workload(disagg_config())
    slo = GoodputSLO(ttft_s=1.0, tpot_s=0.05, attainment=0.9)
    res = goodput_search(config, slo, qps_start=2.0, rel_tol=0.1)
    assert res.rate_qps > 0 and res.num_gpus == 2
    assert res.goodput_per_gpu == pytest.approx(res.rate_qps / 2)
    passing = [t.qps for t in res.trials if t.passed]
    failing = [t.qps for t in res.trials if not t.passed]
    assert all(t.attainment >= 0.9 for t in res.trials if t.passed)
    assert max(passing) == res.rate_qps and min(failing) > res.rate_qps
    assert (min(failing) - res.rate_qps) / min(failing) <= 0.1
    assert attainment_at(config, res.rate_qps, slo, early_exit=False) >= 0.9


def test_compare_command_writes_table_and_plot(tmp_path) -> None:  # noqa: ANN001
    import pandas as pd
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["disagg", "compare", "--gpus", "2", "--tps", "1", "--taus", "512", "--workload", "fixed",
                                   "--prompt-tokens", "512", "--output-tokens", "32", "--num-requests", "40",
                                   "--ttft-slo", "1", "--tpot-slo", "0.05", "--qps-start", "4", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    df = pd.read_csv(tmp_path / "results.csv")
    assert set(df["family"]) == {"vllm", "sarathi", "disagg"}
    assert (df["goodput_per_gpu"] > 0).all()
    assert (tmp_path / "comparison.png").stat().st_size > 10_000


def test_capacity_and_sweeps_accept_disaggregated_layouts(tmp_path) -> None:  # noqa: ANN001
    from simulator.planning.capacity import SLO, SearchSettings, find_capacity, min_iteration_s
    from simulator.planning.sweep import build_spec, run_sweep

    config = small_workload(disagg_config(prefill="1x(tp=1)", decode="1x(tp=2)"))
    # The TBT floor is the decode pool's lone decode, not the (default) run replica's.
    assert min_iteration_s(config) < min_iteration_s(config.replace(prefill_pool=None, decode_pool=None))
    report = find_capacity(config, SLO(tbt_s=0.2), SearchSettings(qps_start=4.0, rel_tol=0.1))
    assert report.capacity_qps > 0
    spec = build_spec({"base": {"workload": "fixed", "num_requests": 16, "prompt_tokens": 256, "output_tokens": 8},
                       "grid": {"prefill_pool,decode_pool": [["1x(tp=1)", "1x(tp=1)"], ["2x(tp=1)", "1x(tp=2)"]]}})
    result = run_sweep(spec, tmp_path)
    assert result.num_failed == 0 and len(result.table) == 2


def _tiny(prefill: str, blocks: int, max_len: int, n: int, prompt: int, output: int, ff: bool) -> object:
    return simulate(RunConfig().replace(
        replica__model="tiny-llama-1b", replica__num_gpu_blocks=blocks, replica__max_model_len=max_len,
        prefill_pool=prefill, decode_pool="1x", workload__arrival="burst", workload__num_requests=n,
        workload__name="fixed", workload__prompt_tokens=prompt, workload__output_tokens=output, fast_forward=ff))


@pytest.mark.parametrize("ff", [True, False])
def test_parked_blocks_make_a_pool_wait_not_fail(ff: bool) -> None:
    """With KV parked (waiting to leave a prefill replica, or reserved on a decode replica for KV on its
    way), a pool may admit nothing: orca reserves max_model_len per prompt beside a parked prompt, and a
    decode replica may preempt its only running request. It waits for the transfer (it raised, found by
    fuzzing); every request finishes, blocks balance, and the fast path agrees."""
    orca = _tiny("1x(sched=orca)", 200, 2048, 2, 1000, 4, ff)
    preempting = _tiny("1x", 40, 600, 12, 100, 400, ff)
    for result in (orca, preempting):
        df = request_frame(result)
        assert (df["status"] == "finished").all()
        assert result.disagg.final_free_blocks == result.disagg.num_blocks
    assert request_frame(preempting)["num_preemptions"].sum() > 0
    if ff:
        for args in (("1x(sched=orca)", 200, 2048, 2, 1000, 4), ("1x", 40, 600, 12, 100, 400)):
            assert request_frame(_tiny(*args, True)).equals(request_frame(_tiny(*args, False)))


def test_a_prefill_pool_rejects_what_its_policy_cannot_reserve() -> None:
    """orca admits a prompt only with max_model_len reserved: a prefill replica whose cache holds less
    (one GPU of the run's two, a 20% watermark) rejects each request with that reason (it had raised)."""
    config = RunConfig().replace(
        replica__model="llama-3.2-3b", replica__gpu="a100-40gb", replica__tp=2, replica__gpu_memory_utilization=0.7,
        scheduler__watermark=0.2, prefill_pool="1x(tp=1,sched=orca)", decode_pool="1x", kv_link="infiniband-200g",
        workload__name="fixed", workload__prompt_tokens=1500, workload__output_tokens=16, workload__num_requests=3,
        workload__arrival="burst")
    df = request_frame(simulate(config))
    assert (df["status"] == "rejected").all()
    assert df["reject_reason"].str.contains("the orca policy reserves 131072 KV tokens but the prefill cache").all()
    # The same prompts under vLLM's policy need only their own KV there, and finish.
    assert (request_frame(simulate(config.replace(prefill_pool="1x(tp=1)")))["status"] == "finished").all()


@pytest.mark.parametrize("ff", [True, False])
def test_a_preemption_that_empties_the_seats_seats_the_waiting_transfers(ff: bool) -> None:
    """One seat a decode replica (seqs 1), transferred requests waiting for it with their KV held:
    vLLM's policy preempts the one running request for blocks, leaving no one running and the
    preempted request short of blocks; the waiting transfers take the free seat (it raised: found by
    fuzzing). Every request finishes or is rejected with its reason, blocks balance, fast = step."""
    config = RunConfig().replace(
        replica__model="llama-3.1-8b", replica__block_size=64, replica__num_gpu_blocks=48, replica__max_model_len=2229,
        scheduler__max_num_seqs=1, prefill_pool="1x(tp=4,budget=1024)", decode_pool="1x", workload__num_requests=20,
        fast_forward=ff)
    result = simulate(config)
    df = request_frame(result)
    assert df["num_preemptions"].sum() > 0 and (df["status"] == "finished").sum() > 0
    assert ((df["status"] == "finished") | df["reject_reason"].notna()).all()
    assert result.disagg.final_free_blocks == result.disagg.num_blocks
    if ff:
        assert df.equals(request_frame(simulate(config.replace(fast_forward=False))))


@pytest.mark.parametrize("policy", ["orca", "fastertransformer", "trtllm"])
def test_a_reserve_ahead_policy_never_preempts_on_the_decode_pool_either(policy) -> None:  # noqa: ANN001
    # orca/fastertransformer reserve max_model_len at admission, trtllm the whole request: aggregated they never
    # preempt. The handoff reserved the prompt alone on the decode worker: 24 preemptions where the twin had 0.
    config = RunConfig().replace(prefill_pool=f"2x(sched={policy})", decode_pool=f"1x(sched={policy})",
                                 replica__num_gpu_blocks=600, replica__max_model_len=4096, workload__name="fixed",
                                 workload__prompt_tokens=2000, workload__output_tokens=1000,
                                 workload__num_requests=60, workload__qps=20.0)
    result = simulate(config)
    df = request_frame(result)
    assert (df["status"] == "finished").all()
    assert df["num_preemptions"].sum() == 0
    assert result.disagg.final_free_blocks == result.disagg.num_blocks
    vllm = simulate(config.replace(prefill_pool="2x(sched=vllm)", decode_pool="1x(sched=vllm)"))
    assert request_frame(vllm)["num_preemptions"].sum() > 0  # the same load does press the cache


def test_decode_tbt_leaves_the_mixed_pools_requests_out() -> None:
    config = disagg_config(prefill="1x", decode="1x", mixed="1x", max_model_len=4096, workload__num_requests=200,
                           workload__qps=12.0)
    result = simulate(config, token_times=True)
    mixed = result.disagg.handoff.mixed
    assert mixed.any() and (~mixed).any()
    decode_only = [np.diff(np.frombuffer(r.token_times, dtype=np.float64)[1:]) for r in result.requests
                   if not mixed[r.request_id] and len(r.token_times) > 2]
    assert np.array_equal(decode_tbt_samples(result), np.concatenate(decode_only))


def test_a_disaggregated_run_that_rejects_everything_prints_no_nan() -> None:
    """Every request rejected (500-token prompts past a 256-token budget): the run line's KV occupancy read
    'prefill nan% decode nan%'; it reads '-' where no request held a block."""
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--prefill-pool", "1x(tp=1,sched=trtllm,budget=256)", "--decode-pool",
                                   "1x(tp=1)", "--workload", "fixed", "--prompt-tokens", "500", "--output-tokens", "10",
                                   "--num-requests", "20", "--no-progress"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert "KV occupancy mean prefill - decode -" in " ".join(res.stdout.split()) and "nan" not in res.stdout
