"""A cache-reading router (prefix_aware) sees the step-by-step loop's caches under event skipping: a skipped
stretch applies its prompt progress and block allocations at its end, so a stretch running across an arrival
showed the router other cached prefixes, and fast_forward changed where requests went (and TTFTs by up to 2 s)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.run_config import RunConfig
from simulator.report.metrics import request_columns
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable

BASE = RunConfig().replace(replica__model="llama-3.1-8b", replica__max_model_len=2048, scheduler__name="vllm-v1",
                           scheduler__prefix_caching=True, num_replicas=2, router="prefix_aware")


def _table(arrivals, prompts, outputs, hashes) -> RequestTable:  # noqa: ANN001
    return RequestTable(arrival_at=np.array(arrivals, dtype=float), num_prompt_tokens=np.array(prompts),
                        num_output_tokens=np.array(outputs), source="test",
                        block_hashes=tuple(np.array(h, dtype=np.int64) for h in hashes), hash_block_size=16)


@pytest.mark.parametrize("case", ["chunked prefill in flight", "decode in flight"])
def test_fast_forward_routes_as_the_step_by_step_loop(case: str) -> None:
    if case == "chunked prefill in flight":  # the owner's prompt progress was stale mid-stretch
        config = BASE.replace(replica__num_gpu_blocks=1000, scheduler__chunk_size=64,
                              scheduler__max_num_seqs=64)  # (vLLM refuses a budget below its sequence cap)
        table = _table([0.0, 0.25], [1600, 1000], [4, 4], [range(100), range(62)])
    else:  # the stretch's allocations (and the LRU evictions they make) were not yet made
        config = BASE.replace(replica__num_gpu_blocks=140)
        table = _table([0.0, 1.0, 24.5], [800, 16, 800], [1, 1990, 2], [range(50), [999], range(50)])
    fast, plain = (request_columns(simulate(config.replace(fast_forward=ff), table=table)) for ff in (True, False))
    for name, column in plain.items():
        assert np.array_equal(fast[name], column, equal_nan=column.dtype.kind == "f"), name


def test_a_trtllm_prefill_pool_rejects_a_prompt_over_its_budget() -> None:
    """TensorRT-LLM runs a prompt in one piece: a prefill pool of budget 64 took 100-token prompts it could never
    start and the run ended in 'scheduler returned an empty batch' (a traceback); now each is rejected, said why."""
    config = RunConfig().replace(replica__model="llama-3.1-8b", replica__max_model_len=2048,
                                 prefill_pool="1x(sched=trtllm,budget=64)", decode_pool="1x(sched=vllm)",
                                 workload__name="fixed", workload__prompt_tokens=100, workload__output_tokens=4,
                                 workload__num_requests=2)
    cols = request_columns(simulate(config))
    assert list(cols["status"]) == ["rejected", "rejected"]
    assert all("exceeds the prefill pool's token budget 64" in r for r in cols["reject_reason"])


def test_a_disaggregated_prefill_pool_keeps_a_session_on_one_replica() -> None:
    """--router session was silently least-outstanding in a disaggregated run (the pools' router got no request):
    a session's second request went to the other prefill replica."""
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config

    config = RunConfig().replace(prefill_pool="2x(tp=1)", decode_pool="1x(tp=1)", router="session")
    table = RequestTable(arrival_at=np.array([0.0, 0.01, 0.1]), num_prompt_tokens=np.array([3000, 600, 3100]),
                         num_output_tokens=np.array([8, 8, 8]), source="test", session_id=np.array([0, 1, 0]))
    routed = simulate(config, table=table).disagg.handoff.prefill_replica_id.tolist()
    assert routed[0] == routed[2] != routed[1]
    plain = simulate(config.replace(router="least_outstanding"), table=table).disagg.handoff.prefill_replica_id
    assert plain.tolist()[2] != routed[2]  # the load alone sends it elsewhere
    # (prefix_aware reads the prefill workers' caches, but a built-in workload names no prompt blocks to find there)
    with pytest.raises(ConfigError, match="names no prompt blocks"):
        build_config(prefill_pool="2x(tp=1)", decode_pool="1x(tp=1)", router="prefix_aware", trace=None,
                     workload="sharegpt")


def test_a_pool_that_does_not_fit_is_named_with_its_layout() -> None:
    """The memory error named 'replica' and told to raise --tp/--pp, which a run with pools refuses."""
    from simulator.config.errors import ConfigError

    config = RunConfig().replace(replica__model="llama-2-70b", prefill_pool="1x(tp=1)", decode_pool="1x(tp=4)",
                                 workload__num_requests=4)
    with pytest.raises(ConfigError) as err:
        simulate(config)
    assert err.value.field == "--prefill-pool" and "prefill pool's replica (a100-80gb tp=1" in str(err.value)
    assert "--tp" not in str(err.value)
