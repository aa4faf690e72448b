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


def test_first_token_at_refuses_unknown_value() -> None:
    with pytest.raises(ConfigError, match="first_token_at"):
        RunConfig().replace(first_token_at="router")
