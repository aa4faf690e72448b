"""Disaggregated serving: where the client's first token is delivered (RunConfig.first_token_at)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.report.metrics import request_columns
from simulator.simulation import simulate


def _disagg(first_token_at: str) -> RunConfig:
    return RunConfig().replace(
        replica__model="llama-3.1-8b", replica__gpu="h100-sxm", prefill_pool="1x(tp=1,gpu=h100-sxm)",
        decode_pool="1x(tp=1,gpu=h100-sxm)", kv_link="25GB/s@10us", workload__name="fixed",
        workload__prompt_tokens=2048, workload__output_tokens=32, workload__arrival="burst",
        workload__num_requests=24, workload__concurrency=8, workload__num_warmup=0, first_token_at=first_token_at)


def test_first_token_delivered_by_decode_worker() -> None:
    assert RunConfig().first_token_at == "decode"  # the deployments' default (Dynamo, NIXL connectors)
    on_decode, on_prefill = simulate(_disagg("decode")), simulate(_disagg("prefill"))
    log = on_decode.disagg.handoff
    for req in on_decode.requests:
        rid = req.request_id
        # After the KV landed on the decode worker, with that worker's first step (the second token's time).
        assert req.first_token_at == req.token_times[1] > log.transfer_end_at[rid] >= log.prefill_done_at[rid]
        assert req.token_times[0] == log.prefill_done_at[rid]
    for req in on_prefill.requests:
        assert req.first_token_at == req.token_times[0] == on_prefill.disagg.handoff.prefill_done_at[req.request_id]
    # Same engine timeline, only the delivery point moves: TTFT grows by at least the transfer.
    ttft_d = request_columns(on_decode)["ttft_s"]
    ttft_p = request_columns(on_prefill)["ttft_s"]
    transfer = log.transfer_end_at - log.transfer_start_at
    assert np.all(ttft_d >= ttft_p + transfer - 1e-12)
    assert np.array_equal(request_columns(on_decode)["completed_at"], request_columns(on_prefill)["completed_at"])


def test_the_handoff_is_time_to_first_token_not_between_tokens() -> None:
    """Delivered by the decode worker, the first two tokens reach the client together: the handoff gap
    is in TTFT, and leaves each request's max TBT and the TBT samples (it was counted in both, so a run
    met its TTFT SLO and failed TBT on the same handoff); delivered by the prefill worker it is the first
    gap. Fast path and step by step agree."""
    from simulator.engine.tbt import merged

    runs = {(at, ff): simulate(_disagg(at).replace(fast_forward=ff)) for at in ("decode", "prefill") for ff in (True, False)}
    on_decode, on_prefill = runs["decode", True], runs["prefill", True]
    for req in on_decode.requests:
        times = np.asarray(req.token_times)
        assert req.max_tbt_s == np.diff(times[1:]).max() < times[1] - times[0]
    for req in on_prefill.requests:
        assert req.max_tbt_s == np.diff(np.asarray(req.token_times)).max()
    def gaps(result):  # noqa: ANN001, ANN202
        values, counts, _ = merged(result.tbt)
        return np.repeat(values, counts)
    n = len(on_decode.requests)
    assert len(gaps(on_decode)) == len(gaps(on_prefill)) - n
    assert gaps(on_decode).max() < gaps(on_prefill).max()
    for at in ("decode", "prefill"):
        assert np.array_equal(gaps(runs[at, True]), gaps(runs[at, False]))
        assert np.array_equal(request_columns(runs[at, True])["max_tbt_s"], request_columns(runs[at, False])["max_tbt_s"])


def test_first_token_at_refuses_unknown_value() -> None:
    with pytest.raises(ConfigError, match="first_token_at"):
        RunConfig().replace(first_token_at="router")


def _with_handoff(tmp_path, handoff_s: float) -> str:  # noqa: ANN001
    from simulator.costmodel.engine_model import ENGINES, save_engine_artifact

    path = tmp_path / f"handoff-{handoff_s:g}.json"
    save_engine_artifact(ENGINES["vllm-2026"].with_terms(handoff_s=handoff_s), path, {})
    return str(path)


def test_handoff_latency_delays_the_transfer_not_the_links(tmp_path) -> None:  # noqa: ANN001
    """The engine's ``handoff_s``: each request waits it out between its prompt's end and its KV transfer;
    alone on the cluster (one user), its TTFT grows by exactly that much when the decode worker delivers
    the first token, and not at all when the prefill worker does."""
    h = 0.05
    runs = {(at, x): simulate(_disagg(at).replace(workload__concurrency=1, engine=_with_handoff(tmp_path, x)))
            for at in ("decode", "prefill") for x in (0.0, h)}
    # the same as a preset with the term overridden on the command line's form
    inline = simulate(_disagg("decode").replace(workload__concurrency=1, engine=f"vllm-2026:handoff_s={h}"))
    assert np.array_equal(request_columns(inline)["ttft_s"], request_columns(runs["decode", h])["ttft_s"])
    log = runs["decode", h].disagg.handoff
    np.testing.assert_allclose(log.handoff_done_at - log.decode_reserved_at, h, rtol=0, atol=1e-9)
    assert np.all(log.transfer_start_at >= log.handoff_done_at)
    ttft = {k: request_columns(r)["ttft_s"] for k, r in runs.items()}
    e2e = {k: request_columns(r)["e2e_s"] for k, r in runs.items()}
    np.testing.assert_allclose(ttft["decode", h] - ttft["decode", 0.0], h, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ttft["prefill", h], ttft["prefill", 0.0], rtol=0, atol=1e-9)  # later clock, same spans
    np.testing.assert_allclose(e2e["prefill", h] - e2e["prefill", 0.0], h, rtol=0, atol=1e-9)
    # Transfers are as long as without it: the links are not held meanwhile.
    base = runs["decode", 0.0].disagg.handoff
    np.testing.assert_allclose(log.transfer_end_at - log.transfer_start_at,
                               base.transfer_end_at - base.transfer_start_at, rtol=1e-12)


def test_handoff_latency_leaves_aggregated_runs_alone(tmp_path) -> None:  # noqa: ANN001
    config = _disagg("decode").replace(prefill_pool=None, decode_pool=None, first_token_at="decode")
    plain = request_columns(simulate(config.replace(engine=_with_handoff(tmp_path, 0.0))))
    delayed = request_columns(simulate(config.replace(engine=_with_handoff(tmp_path, 0.2))))
    for col in ("ttft_s", "e2e_s", "completed_at"):
        assert np.array_equal(plain[col], delayed[col])
