"""KV links of disaggregated runs (simulator.engine.disagg, step 3): per worker or one shared.

Per worker (the default), each prefill pool replica has its own egress and each decode pool
replica its own ingress: transfers of different prefill workers run in parallel, several
sending to one decode worker queue on its ingress (which carries ``decode GPUs // prefill
GPUs`` at once). Shared: every transfer queues on the one link. With one prefill worker the
two are the same run, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_disagg import check_invariants, disagg_config, table

from simulator.config.errors import ConfigError
from simulator.config.options import RUN_OPTIONS
from simulator.config.run_config import KV_LINK_SCOPES, RunConfig
from simulator.report.disagg_metrics import disagg_summary
from simulator.report.metrics import request_frame
from simulator.simulation import simulate

ONE_S = 512 * 524_288 / 1e9  # a 512-token Llama-2-7B prompt's KV over 1 GB/s


def two_at_once(prefill: str, decode: str, scope: str):  # noqa: ANN201
    """Two identical prompts at t=0, one on each prefill worker: their transfers want the links together."""
    config = disagg_config(prefill=prefill, decode=decode, link="1GB/s", kv_link_scope=scope)
    return simulate(config, table([0.0, 0.0], [512, 512], [4, 4]))


def test_default_is_per_worker_and_a_bad_scope_names_the_field() -> None:
    assert RunConfig().kv_link_scope == "per-worker" and KV_LINK_SCOPES == ("per-worker", "shared")
    assert RUN_OPTIONS["kv_link_scope"][0] == "kv_link_scope"
    with pytest.raises(ConfigError) as err:
        RunConfig(kv_link_scope="per-node")
    assert err.value.field == "kv_link_scope" and "shared" in str(err.value)


def test_two_prefill_workers_transfer_in_parallel_per_worker_and_serially_shared() -> None:
    per = two_at_once("2x(tp=1)", "2x(tp=1)", "per-worker")
    log = per.disagg.handoff
    assert sorted(log.prefill_replica_id) == [0, 1] and sorted(log.decode_replica_id) == [2, 3]
    assert log.transfer_start_at[0] == log.transfer_start_at[1]  # both links free: both start at once
    assert log.transfer_end_at - log.transfer_start_at == pytest.approx([ONE_S, ONE_S])
    shared = two_at_once("2x(tp=1)", "2x(tp=1)", "shared").disagg.handoff
    first, second = np.argsort(shared.transfer_start_at)
    assert shared.transfer_start_at[second] == shared.transfer_end_at[first]  # queued behind the first
    assert shared.transfer_end_at.max() - log.transfer_end_at.max() == pytest.approx(ONE_S)
    # The client sees the handoff in TTFT (first token from the decode worker): one transfer less to wait.
    ttft = {s: max(r.first_token_at - r.arrival_at for r in two_at_once("2x(tp=1)", "2x(tp=1)", s).requests)
            for s in KV_LINK_SCOPES}
    assert ttft["shared"] - ttft["per-worker"] == pytest.approx(ONE_S, rel=0.05)


def test_fan_in_is_bounded_by_the_decode_workers_ingress() -> None:
    # Two prefill workers into one decode worker of the same size: its ingress takes one at a time.
    log = two_at_once("2x(tp=1)", "1x(tp=1)", "per-worker").disagg.handoff
    first, second = np.argsort(log.transfer_start_at, kind="stable")
    assert log.transfer_start_at[second] == log.transfer_end_at[first]
    assert log.transfer_end_at.max() - log.transfer_start_at.min() == pytest.approx(2 * ONE_S)
    # A decode worker with twice the GPUs (twice the NICs) takes both at once.
    wide = two_at_once("2x(tp=1)", "1x(tp=2)", "per-worker").disagg.handoff
    assert wide.transfer_start_at[0] == wide.transfer_start_at[1]
    assert wide.transfer_end_at.max() - wide.transfer_start_at.min() == pytest.approx(ONE_S)


def test_attention_dp_ranks_of_one_worker_share_its_egress() -> None:
    # Two prefill workers of two attention-DP ranks each (ranks 0,1 | 2,3): the round-robin router
    # puts the first two prompts on ranks 0 and 1, one worker, whose one egress sends them in turn.
    config = disagg_config(prefill="2x(tp=1,dp=2,ep=2)", decode="2x(tp=1)", link="1GB/s",
                           replica__model="qwen3-30b-a3b", replica__gpu="h100-sxm", kv_link_scope="per-worker")
    log = simulate(config, table([0.0, 0.0], [512, 512], [4, 4])).disagg.handoff
    assert sorted(log.prefill_replica_id) == [0, 1] and sorted(log.decode_replica_id) == [4, 5]  # two receivers
    first, second = np.argsort(log.transfer_start_at, kind="stable")
    assert log.transfer_start_at[second] == log.transfer_end_at[first]


def test_report_gives_the_busiest_link_and_each_link() -> None:
    per = two_at_once("2x(tp=1)", "2x(tp=1)", "per-worker")
    info = per.disagg
    assert info.link_scope == "per-worker"
    assert set(info.links_busy_s) == {"prefill0 egress", "prefill1 egress", "decode0 ingress", "decode1 ingress"}
    assert all(b == pytest.approx(ONE_S) for b in info.links_busy_s.values())
    assert info.link_busy_s == max(info.links_busy_s.values())
    summary = disagg_summary(per, request_frame(per))
    assert summary["link_utilization"] == max(summary["link_utilization_by_link"].values())
    shared = two_at_once("2x(tp=1)", "2x(tp=1)", "shared")
    assert shared.disagg.links_busy_s == {"shared": pytest.approx(2 * ONE_S)}
    assert "link_utilization_by_link" not in disagg_summary(shared, request_frame(shared))


@pytest.mark.parametrize("prefill, decode, mixed", [("1x(tp=1)", "1x(tp=1)", None), ("1x(tp=1)", "3x(tp=1)", None),
                                                    ("1x(tp=2,pp=2)", "2x(tp=1)", None),
                                                    ("1x(tp=1)", "1x(tp=1)", "1x(tp=1)")])
def test_one_prefill_worker_runs_bit_for_bit_the_same_either_way(prefill: str, decode: str, mixed: str | None) -> None:
    """A mixed pool changes nothing here: its requests never cross a KV link (so --kv-link-scope is refused)."""
    rng = np.random.default_rng(5)
    n = 40
    tab = table(np.sort(rng.uniform(0, 2, n)), rng.integers(16, 900, n), rng.integers(1, 30, n))
    runs = [simulate(disagg_config(prefill=prefill, decode=decode, mixed=mixed, link="2GB/s@10us", kv_link_scope=s),
                     tab) for s in KV_LINK_SCOPES]
    if mixed is not None:  # the mixed pool took some of the requests
        assert 0 < runs[0].disagg.handoff.mixed.sum() < n
    a, b = (r.disagg.handoff for r in runs)
    for col in ("decode_replica_id", "transfer_start_at", "transfer_end_at"):
        np.testing.assert_array_equal(getattr(a, col), getattr(b, col))
    for ra, rb in zip(runs[0].requests, runs[1].requests, strict=True):
        assert ra.token_times == rb.token_times and ra.first_token_at == rb.first_token_at
    assert runs[0].disagg.link_busy_s == runs[1].disagg.link_busy_s


@pytest.mark.parametrize("prefill, decode", [("3x(tp=1)", "2x(tp=1)"), ("2x(tp=1)", "1x(tp=2)"),
                                             ("2x(tp=2)", "3x(tp=1)")])
def test_per_worker_links_lose_no_request_and_balance_kv(prefill: str, decode: str) -> None:
    """Many transfers at once on a slow fabric, a tight decode cache (backpressure): every request
    finishes, every KV block comes back, no link carries more than it can (test_disagg's checks)."""
    rng = np.random.default_rng(11)
    n = 60
    arrivals = np.sort(rng.uniform(0, 1.0, n))
    # (the pools run vllm, as this test's --scheduler sarathi left them before a research policy no pool runs was
    # refused)
    config = disagg_config(prefill=prefill.replace(")", ",sched=vllm)"), decode=decode.replace(")", ",sched=vllm)"),
                           link="0.5GB/s@1ms", util=0.2, kv_link_scope="per-worker")
    check_invariants(config, table(arrivals, rng.integers(2, 900, n), rng.integers(1, 40, n)))


def test_planned_fleets_scale_the_link_only_when_shared() -> None:
    from simulator.planning.plan import Layout

    unit = Layout(gpu="h100-sxm", mode="disagg", dtype="bf16", tp=1, prefill_tp=1, num_prefill=2, num_decode=1)
    base = RunConfig().replace(replica__model="llama-2-7b", kv_link="10GB/s@5us")
    assert unit.config(base, units=3).kv_link == "10GB/s@5us"  # per worker: each worker its own link
    shared = unit.config(base.replace(kv_link_scope="shared"), units=3)
    assert shared.kv_link == "30GB/s@5us" and shared.prefill_pool == f"6x(tp=1,sched={unit.scheduler(base)})"
