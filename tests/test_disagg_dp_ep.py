"""Per-pool attention DP and EP in disaggregated layouts (xPyD as Dynamo and vLLM/SGLang deploy it).

Each pool replica's ``dp`` ranks run as replicas of their own, each pricing the MoE layers for its
pool replica's ``tp x dp`` group; requests are conserved and each KV handoff goes from a prefill
rank to a decode rank; bad pool layouts are refused in one line naming the pool.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.disagg_layout import kv_bytes_per_token, layout_of, parse_pool
from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape
from simulator.simulation import simulate

MOE = {"replica__model": "mixtral-8x7b", "replica__gpu": "h100-sxm", "replica__max_model_len": 4096}
PREFILL = "1x(tp=2,dp=2,ep=4)"
DECODE = "1x(tp=1,dp=4,ep=4)"


def xpyd(prefill: str = PREFILL, decode: str = DECODE, **kw) -> RunConfig:  # noqa: ANN003
    return RunConfig().replace(**{**MOE, "prefill_pool": prefill, "decode_pool": decode, "workload__name": "fixed",
                                  "workload__prompt_tokens": 600, "workload__output_tokens": 24,
                                  "workload__num_requests": 40, "workload__qps": 20.0, **kw})


def captured_run(config: RunConfig):  # noqa: ANN201
    """Simulate ``config`` and keep its DisaggCluster (to read the ranks' cost models)."""
    import simulator.engine.disagg as disagg

    clusters: list = []
    original = disagg.DisaggCluster.__init__

    def register(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        original(self, *args, **kwargs)
        clusters.append(self)

    disagg.DisaggCluster.__init__ = register
    try:
        result = simulate(config)
    finally:
        disagg.DisaggCluster.__init__ = original
    return result, clusters[-1]


def test_pool_keys_parse_canonically_and_set_the_pool_replicas() -> None:
    assert parse_pool("2x(ep=8, dp=8, tp=1, nodes=1)", "prefill_pool").canonical() == "2x(tp=1,dp=8,ep=8,nodes=1)"
    config = xpyd(prefill="1x(ep=4,dp=2,tp=2)")
    assert config.prefill_pool == PREFILL and RunConfig.from_dict(config.to_dict()) == config
    layout = layout_of(config)
    p, d = layout.prefill_replica, layout.decode_replica
    assert (p.tp, p.attention_dp, p.ep, p.moe_tp) == (2, 2, 4, 1)
    assert (d.tp, d.attention_dp, d.ep, d.moe_tp) == (1, 4, 4, 1)
    assert layout.num_gpus == 8
    # The decode pool's replica is exactly an aggregated run's replica of that layout.
    agg = RunConfig().replace(**MOE, replica__tp=1, replica__attention_dp=4, replica__ep=4)
    assert d == agg.replica


def test_a_layout_with_its_own_dp_and_ep_per_pool_runs_and_conserves_requests() -> None:
    config = xpyd()
    result, cluster = captured_run(config)
    info, log = result.disagg, result.disagg.handoff
    # One replica per rank: 1 x dp=2 prefill ranks, then 1 x dp=4 decode ranks.
    assert info.pools == ["prefill"] * 2 + ["decode"] * 4
    assert [r.replica_id for r in cluster.replicas] == list(range(6))
    # Every request finishes (none is too long here), all its tokens, and every KV block comes back.
    assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in result.requests)
    assert info.final_free_blocks == info.num_blocks
    # Each handoff goes from a prefill rank to a decode rank, moving the request's whole-model KV.
    assert set(log.prefill_replica_id.tolist()) == {0, 1}  # the router spreads arrivals over both ranks
    assert set(log.decode_replica_id.tolist()) <= {2, 3, 4, 5} and len(set(log.decode_replica_id.tolist())) > 1
    assert np.isfinite(log.transfer_end_at).all()
    per_token = kv_bytes_per_token(layout_of(config).prefill_replica)
    assert np.allclose(log.kv_bytes, [r.num_prompt_tokens * per_token for r in result.requests])
    # Each request finished on the decode rank that took its KV.
    assert [r.replica_id for r in result.requests] == log.decode_replica_id.tolist()


def test_each_pool_prices_the_moe_layers_for_its_own_dp_group() -> None:
    config = xpyd()
    _, cluster = captured_run(config)
    decode = RunConfig().replace(**MOE, replica__tp=1, replica__attention_dp=4, replica__ep=4)
    prefill = RunConfig().replace(**MOE, replica__tp=2, replica__attention_dp=2, replica__ep=4)
    lone = RunConfig().replace(**MOE, replica__tp=1)  # a rank priced without its DP group
    shape = BatchShape.from_requests(decodes=[600] * 16)
    prompt = BatchShape.from_requests(prefills=[(600, 0)])

    def price(cfg: RunConfig, s: BatchShape) -> float:
        return load_cost_model(cfg.cost_model, cfg.replica, cfg.engine).iteration_time(s)

    for replica in cluster.decode:
        assert replica.cost_model.iteration_time(shape) == price(decode, shape)
    for replica in cluster.prefill:
        assert replica.cost_model.iteration_time(prompt) == price(prefill, prompt)
    # The group matters: a tp=1 rank alone holds every expert (4x the expert weights to read).
    assert price(decode, shape) != price(lone, shape)
    assert cluster.decode[0].cost_model.iteration_time(shape) < price(lone, shape)


def test_pools_take_the_runs_attention_dp_and_ep_unless_they_set_their_own() -> None:
    config = xpyd(prefill="1x(tp=2)", decode="1x(tp=1,dp=2,ep=2)", replica__tp=2, replica__attention_dp=2,
                  replica__ep=4)
    layout = layout_of(config)
    assert (layout.prefill_replica.attention_dp, layout.prefill_replica.ep) == (2, 4)
    assert (layout.decode_replica.attention_dp, layout.decode_replica.ep) == (2, 2)
    result = simulate(config.replace(workload__num_requests=12))
    assert result.disagg.pools == ["prefill"] * 2 + ["decode"] * 2
    assert all(r.completed_at is not None for r in result.requests)


@pytest.mark.parametrize(("pools", "start"), [
    ({"decode_pool": "1x(tp=1,dp=4,ep=3)"}, "decode_pool: ep=3 must divide a replica's tp x dp = 1 x 4 = 4 GPUs"),
    ({"prefill_pool": "1x(tp=2,ep=8)"}, "prefill_pool: ep=8 must divide a replica's tp x dp = 2 x 1 = 2 GPUs"),
    ({"prefill_pool": "1x(tp=2,dp=2,pp=2)"}, "prefill_pool: attention DP (dp=2) with pipeline parallelism"),
    ({"decode_pool": "1x(tp=4,dp=4,ep=8)"}, "decode_pool: a replica's tp x pp x dp = 16 GPUs do not fit 1 node"),
    ({"prefill_pool": "1x(tp=2)", "decode_pool": "1x(tp=4,dp=4,ep=4,nodes=2)", "replica__model": "llama-2-7b"}, "decode_pool: dp=4 shards MoE"),
])
def test_bad_pool_layouts_are_refused_in_one_line_naming_the_pool(pools: dict, start: str) -> None:
    pools = dict(pools)
    with pytest.raises(ConfigError) as err:
        xpyd(pools.pop("prefill_pool", PREFILL), pools.pop("decode_pool", DECODE), **pools)
    message = str(err.value)
    assert message.startswith(start) and "\n" not in message, message
    assert err.value.fix and ("nodes=" in err.value.fix or "--" in err.value.fix)


def test_the_ep_fix_names_an_ep_that_divides_the_experts_too() -> None:
    with pytest.raises(ConfigError) as err:  # mixtral has 8 experts: ep=16 over 16 GPUs cannot be
        xpyd(decode="1x(tp=4,dp=4,ep=16,nodes=2)")
    assert "use ep=8 or one of its divisors" in str(err.value)
    xpyd(decode="1x(tp=4,dp=4,ep=8,nodes=2)")  # which the config then takes


def test_a_pool_over_two_nodes_runs_when_it_says_so() -> None:
    config = xpyd(decode="1x(tp=4,dp=4,ep=8,nodes=2)")
    assert layout_of(config).decode_replica.num_nodes == 2
    assert layout_of(config).num_gpus == 4 + 16


def test_cli_runs_per_pool_dp_and_ep_and_refuses_a_bad_one(tmp_path) -> None:  # noqa: ANN001
    from typer.testing import CliRunner

    from simulator.cli import app

    runner = CliRunner()
    args = ["run", "--model", "mixtral-8x7b", "--gpu", "h100-sxm", "--max-model-len", "4096", "--num-requests", "12",
            "--prefill-pool", PREFILL, "--no-progress", "--format", "csv"]
    res = runner.invoke(app, [*args, "--decode-pool", DECODE, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert f"prefill {PREFILL} + decode {DECODE}" in res.output
    res = runner.invoke(app, [*args, "--decode-pool", "1x(tp=1,dp=4,ep=3)"])
    assert isinstance(res.exception, ConfigError) and str(res.exception).startswith("decode_pool: ep=3")


def test_the_handoff_moves_the_kv_as_the_cache_stores_it() -> None:
    """MLA moves its compressed latent, an FP8 cache half of bf16's bytes; bf16 GQA is unchanged."""
    from simulator.config.run_config import ReplicaConfig, SchedulerConfig
    from simulator.engine.kvcache import build_kv_cache

    llama = ReplicaConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4)
    spec = llama.model_spec
    assert kv_bytes_per_token(llama) == 2 * spec.num_layers * spec.num_kv_heads * spec.head_dim * 2
    assert kv_bytes_per_token(ReplicaConfig(model="llama-3.1-70b", gpu="h100-sxm", tp=4, kv_cache_dtype="fp8")) \
        == kv_bytes_per_token(llama) / 2
    ds = ReplicaConfig(model="deepseek-v3", gpu="h200", tp=8, dtype="fp8", kv_cache_dtype="fp8")
    m = ds.model_spec
    assert kv_bytes_per_token(ds) == m.num_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * 1.0
    # What one GPU's cache holds per token (the latent is replicated on every TP rank) is what moves.
    _, plan = build_kv_cache(ds, SchedulerConfig())
    assert kv_bytes_per_token(ds) == pytest.approx(plan.kv_bytes_per_token[0])


def test_a_pool_places_redundant_experts_where_its_ep_does_not_divide_the_experts():
    """SGLang's wide-EP decode pools run EP 48 over DeepSeek's 256 experts with 32 redundant copies: the pool key
    ``redundant`` says so, and without it the pool's error names the count that would fit."""
    from simulator.config.run_config import ReplicaConfig

    base = ReplicaConfig("deepseek-v3", "gb200", dtype="fp8")
    with pytest.raises(ConfigError) as err:
        parse_pool("1x(tp=1,dp=48,ep=48)", "decode_pool").check(base, "decode_pool")
    assert err.value.field == "decode_pool" and "redundant=32" in err.value.fix
    pool = parse_pool("1x(tp=1,dp=48,ep=48,redundant=32,nodes=6)", "decode_pool")
    pool.check(base, "decode_pool")
    assert pool.canonical() == "1x(tp=1,dp=48,ep=48,redundant=32,nodes=6)"
    assert pool.replica_config(base).redundant_experts == 32
    with pytest.raises(ConfigError, match="ep=1"):
        parse_pool("1x(tp=8,redundant=32)", "prefill_pool").check(base, "prefill_pool")


def test_run_redundant_experts_that_no_pool_takes_are_refused() -> None:
    """A pool that sets its own ep= places no redundant experts unless it sets redundant=: where every pool does,
    --redundant-experts would do nothing, and the run says so instead of dropping it."""
    from typer.testing import CliRunner

    from simulator.cli import app

    args = ["run", "--model", "deepseek-v3", "--gpu", "b200", "--dtype", "fp8", "--tp", "8", "--ep", "8",
            "--redundant-experts", "32", "--num-requests", "8", "--no-progress"]
    res = CliRunner().invoke(app, [*args, "--prefill-pool", "1x(ep=8)", "--decode-pool", "1x(redundant=32)"])
    assert isinstance(res.exception, ConfigError) and "--redundant-experts would do nothing" in str(res.exception)
    res = CliRunner().invoke(app, [*args, "--prefill-pool", "1x(ep=8)", "--decode-pool", "1x(pp=1)"])
    assert res.exit_code == 0, res.output  # the decode pool keeps the run's EP and its copies


@pytest.mark.parametrize(("flags", "says"), [
    (["--prefill-pool", "1x", "--decode-pool", "2x", "--router", "random"], "--router would do nothing"),
    (["--prefill-pool", "1x", "--decode-pool", "1x", "--intra-node-link", "pcie"], "--intra-node-link would do nothing"),
    (["--prefill-pool", "1x", "--decode-pool", "1x", "--inter-node-link", "infiniband-400g-x8"],
     "--inter-node-link would do nothing"),
])
def test_flags_no_pool_reads_are_refused(flags, says) -> None:  # noqa: ANN001
    """The router picks a prefill worker only (decode workers go by free blocks and load), and a link flag acts
    only where some pool's replica crosses that link: results were bit for bit the same with and without them."""
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--num-requests", "8", "--no-progress", *flags])
    assert isinstance(res.exception, ConfigError) and says in str(res.exception)


@pytest.mark.parametrize("flags", [["--prefill-pool", "2x", "--decode-pool", "1x", "--router", "random"],
                                   ["--prefill-pool", "1x(tp=2)", "--decode-pool", "1x", "--intra-node-link", "pcie"]])
def test_the_same_flags_where_a_pool_reads_them_run(flags) -> None:  # noqa: ANN001
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--num-requests", "8", "--no-progress", *flags])
    assert res.exit_code == 0, res.output


def test_an_attention_dp_runs_kv_figure_says_it_is_one_ranks():
    # Each rank has its own cache: the figure read as the replica's halved its capacity against --tp 2.
    from typer.testing import CliRunner

    from simulator.cli import app

    res = CliRunner().invoke(app, ["run", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--attention-dp", "2",
                                   "--ep", "2", "--num-requests", "8", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert "tokens per attention-DP rank (x2)" in res.output


def test_a_pool_names_its_own_moe_kernel_and_a_roofline_run_refuses_it() -> None:
    """moe= sets a pool's --moe-kernel (a deployment's prefill and decode workers each set their engine's MoE
    backend); the other pool keeps the run's; a run the roofline prices refuses it, naming the pool."""
    pool = parse_pool("1x(tp=1, dp=8, ep=8, moe=DeepGEMM)", "prefill_pool")
    assert pool.moe == "deepgemm" and pool.canonical() == "1x(tp=1,dp=8,ep=8,moe=deepgemm)"
    base = RunConfig().replace(replica__model="deepseek-v3", replica__gpu="b200", replica__tp=8,
                               replica__kernels="trtllm").replica
    assert pool.replica_config(base).moe_kernel == "deepgemm"
    assert parse_pool("1x(tp=8)", "decode_pool").replica_config(base).moe_kernel == "auto"
    with pytest.raises(ConfigError, match=r"prefill_pool.*moe_kernel.*roofline prices from no table"):
        RunConfig().replace(replica__model="deepseek-v3", replica__gpu="b200", replica__tp=8,
                            prefill_pool="1x(tp=8,moe=deepgemm)", decode_pool="1x(tp=8)")
