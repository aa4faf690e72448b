"""Attention-DP ranks step together (simulator.engine.dp_group): every rank's iteration starts with
the group's and lasts the slowest rank's, as the engines' MoE collectives force them to; a group
skips stretches of such steps (simulator.fast.dp_group) with the same results."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_run, record_stretches

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape
from simulator.engine.schedulers import SCHEDULERS
from simulator.planning.capacity import OverloadWatch
from simulator.report.metrics import request_frame
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable

MOE = dict(model="qwen3-30b-a3b", gpu="h100-sxm", tp=1, ep=2)


def _table(arrival, prompt, output) -> RequestTable:  # noqa: ANN001
    return RequestTable(np.asarray(arrival, float), np.asarray(prompt, np.int64), np.asarray(output, np.int64), "test")


def _config() -> RunConfig:
    """Two DP ranks behind round robin (the table's requests alternate between them)."""
    return RunConfig(replica=ReplicaConfig(**MOE, attention_dp=2), router="round_robin",
                     workload=WorkloadConfig(name="fixed", num_requests=2, qps=1.0, prompt_tokens=16,
                                             output_tokens=4))


def _steps(result) -> dict[float, list[tuple[int, float]]]:  # noqa: ANN001
    """Iterations by start time: (rank, duration) of each rank that ran a batch then."""
    frame = result.iteration_frame()
    steps: dict[float, list[tuple[int, float]]] = {}
    for rid, at, dur in zip(frame.replica_id, frame.started_at, frame.duration_s, strict=True):
        steps.setdefault(at, []).append((int(rid), float(dur)))
    return steps


def test_a_rank_that_prefills_holds_up_the_other_ranks_decodes() -> None:
    # Round robin: the decode (request 0, a short prompt and 40 tokens) on rank 0, then a long
    # prompt on rank 1 while it decodes. Rank 0's decode steps beside that prefill last as long as
    # the prefill step, and the group's steps never overlap.
    config = _config()
    table = _table([0.0, 0.05], [16, 8000], [40, 1])
    result = simulate(config, table)
    assert all(r.completed_at is not None for r in result.requests)
    steps = _steps(result)
    starts = sorted(steps)
    ends = [at + max(d for _, d in steps[at]) for at in starts]
    assert all(ends[i] <= starts[i + 1] + 1e-12 for i in range(len(starts) - 1))  # one step at a time
    assert all(len({d for _, d in rows}) == 1 for rows in steps.values())  # ranks of a step: one duration
    shared = [rows for rows in steps.values() if len(rows) == 2]
    assert shared, "the two ranks never ran a step together"
    cost = load_cost_model(config.cost_model, config.replica, config.engine)
    decode_alone = cost.iteration_time(BatchShape(num_decodes=1, decode_kv_tokens=60, decode_max_kv=60, num_logits=1))
    # The decode beside the 8,000-token prefill took the prefill's time, far more than a decode alone.
    assert max(d for rows in shared for _, d in rows) > 20 * decode_alone


def test_lockstep_raises_the_decoding_ranks_tpot_against_a_rank_alone() -> None:
    # The same decode with and without a long-prompt neighbour on the other rank.
    alone = simulate(_config(), _table([0.0], [16], [40])).requests[0]
    beside = simulate(_config(), _table([0.0, 0.05], [16, 8000], [40, 1])).requests[0]
    tpot = lambda r: (r.completed_at - r.first_token_at) / (r.num_output_tokens - 1)  # noqa: E731
    assert tpot(beside) > 1.2 * tpot(alone)


@pytest.mark.parametrize("concurrency", [None, 6])
def test_dp_runs_are_the_same_with_fast_paths_on_and_off_and_lose_nothing(concurrency) -> None:  # noqa: ANN001
    wl = WorkloadConfig(name="sharegpt", num_requests=60, qps=8.0, concurrency=concurrency)
    base = RunConfig(replica=ReplicaConfig(**MOE, attention_dp=2), workload=wl, seed=3)
    fast, plain = simulate(base), simulate(base.replace(fast_forward=False))
    cols = ("arrival_at", "first_token_at", "completed_at", "replica_id", "num_generated")
    for name in cols:
        assert [getattr(r, name) for r in fast.requests] == [getattr(r, name) for r in plain.requests], name
    assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in fast.requests)
    steps = _steps(fast)
    assert all(len({d for _, d in rows}) == 1 for rows in steps.values())


def test_disaggregated_dp_pools_step_their_ranks_together() -> None:
    config = RunConfig(replica=ReplicaConfig(**MOE, attention_dp=2),
                       workload=WorkloadConfig(name="sharegpt", num_requests=40, qps=6.0), seed=1)
    config = config.replace(prefill_pool="1x(tp=1,dp=2,ep=2)", decode_pool="1x(tp=1,dp=2,ep=2)")
    result = simulate(config)
    assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in result.requests)
    frame = result.iteration_frame()
    for ranks in ((0, 1), (2, 3)):  # the prefill replica's ranks, then the decode replica's
        pool = frame[frame.replica_id.isin(ranks)]
        durations = pool.groupby("started_at").duration_s.nunique()
        assert (durations == 1).all()
        assert (pool.groupby("started_at").replica_id.nunique() == 2).any()  # both ranks ran together


# -- event skipping over a group (simulator.fast.dp_group) ---------------------------------------------------------
@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_a_groups_skipped_stretches_are_its_steps_to_the_bit(scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Four ranks at a light load (ranks idle, ranks decoding alone, long prompts on one rank beside
    # another's decodes), then a tight cache (preemptions): skipping on and off give the same tables.
    stretches = record_stretches(monkeypatch)
    for qps, blocks in ((2.0, None), (12.0, 400)):
        replica = ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4, num_gpu_blocks=blocks, max_model_len=4096)
        config = RunConfig(replica=replica, scheduler=SchedulerConfig(scheduler),
                           workload=WorkloadConfig("sharegpt", num_requests=80, qps=qps), seed=5)
        assert_same_run(config)
    assert stretches  # the groups did skip


@pytest.mark.parametrize("concurrency", [None, 12])
def test_a_group_skips_with_measured_kernels_and_closed_loops(aic, concurrency, monkeypatch) -> None:  # noqa: ANN001
    # Kernel tables count extrapolations per priced step: a stretch cut to the group's shortest
    # counts only the steps it applies (RunResult.extra compares them).
    stretches = record_stretches(monkeypatch)
    config = RunConfig(replica=ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4, kernels="vllm"),
                       workload=WorkloadConfig("sharegpt", num_requests=60, qps=3.0, concurrency=concurrency), seed=2)
    assert_same_run(config)
    assert stretches


def test_a_group_in_a_capacity_trial_ends_as_it_does_stepping() -> None:
    # A watch reads the ranks at its wake-ups: the group's stretches end before them.
    config = RunConfig(replica=ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4),
                       workload=WorkloadConfig("sharegpt", num_requests=150, qps=40.0), seed=3)
    runs = [simulate(config.replace(fast_forward=fast), watch=OverloadWatch(2.0, 30.0, tbt_s=0.05, tbt_quantile=99.0),
                     token_times=True) for fast in (True, False)]
    on, off = runs
    assert on.extra == off.extra
    assert request_frame(on).equals(request_frame(off))
    assert on.iteration_frame().equals(off.iteration_frame())


# -- TensorRT-LLM's prompt balance (PromptBalance) ------------------------------------------------------------------
def _balanced(timeout: int, batching: int = 0, scheduler: str = "trtllm") -> RunConfig:
    return _config().replace(scheduler=SchedulerConfig(scheduler, dp_balance_timeout_iters=timeout,
                                                       dp_balance_batching_wait_iters=batching))


# Round robin: two long decodes (one a rank) from t=0, then a prompt on rank 0 at 0.5 s, one on rank 1 at 0.8 s.
_TWO_DECODES_TWO_PROMPTS = ([0.0, 0.0, 0.5, 0.8], [100, 100, 500, 500], [400, 400, 20, 20])


def _step_starts(result) -> list[float]:  # noqa: ANN001
    return sorted(set(result.iteration_frame().started_at.tolist()))


def test_the_balance_holds_a_prompt_until_its_wait_runs_out() -> None:
    # Rank 0's prompt (t=0.5) waits while rank 1 only decodes: the wait counter runs on from the
    # decodes' start, so it goes ahead when the count reaches the timeout, at a step start.
    plain = simulate(_balanced(0), _table(*_TWO_DECODES_TWO_PROMPTS))
    held = simulate(_balanced(60), _table(*_TWO_DECODES_TWO_PROMPTS))
    assert plain.requests[2].first_scheduled_at - plain.requests[2].arrival_at < 0.01  # the next step
    starts = _step_starts(held)
    c = held.requests[2]
    assert c.first_scheduled_at - c.arrival_at > 0.1  # held
    # Step 0 prefilled both decodes; the count ran from step 1 and wrapped at step 60 (t=0.40, before
    # the prompt came): it went ahead at step 120, where the count reached 60 again.
    assert starts[60] < c.arrival_at < starts[120] and c.first_scheduled_at == starts[120]
    # The decodes ran on meanwhile: the held step is decodes only.
    assert all(r.completed_at is not None and r.num_generated == r.num_output_tokens for r in held.requests)


def test_the_balance_lets_prompts_go_when_every_rank_has_one() -> None:
    # Two prompts arriving together, one a rank, go at the next step; a third arriving alone
    # later waits. With every rank holding a prompt the count restarts.
    arrival, prompt, output = [0.0, 0.0, 0.5, 0.5, 0.9], [100, 100, 300, 300, 300], [400, 400, 20, 20, 20]
    held = simulate(_balanced(1000), _table(arrival, prompt, output))
    for r in held.requests[2:4]:
        assert r.first_scheduled_at - r.arrival_at < 0.02
    late = held.requests[4]  # on rank 0 alone: held (an emptied rank 1 would count as decoding, a dummy)
    # until rank 0 has no decode left: the step after its long decode's last
    assert late.first_scheduled_at - late.arrival_at > 0.2
    assert late.first_scheduled_at == held.requests[0].completed_at


def test_the_balance_releases_at_once_where_a_rank_has_no_decodes() -> None:
    # A rank without any request counts as decoding (the engine's dummy), but one whose only
    # requests wait has no decode: nothing is held then.
    held = simulate(_balanced(1000), _table([0.0, 0.0], [100, 100], [50, 50]))
    assert all(r.first_scheduled_at == 0.0 for r in held.requests)


def test_batching_wait_holds_prompts_that_every_rank_has_a_few_steps_more() -> None:
    arrival, prompt, output = [0.0, 0.0, 0.5, 0.5], [100, 100, 300, 300], [400, 400, 20, 20]
    no_wait = simulate(_balanced(60), _table(arrival, prompt, output))
    waited = simulate(_balanced(60, batching=3), _table(arrival, prompt, output))
    starts = _step_starts(waited)
    went = no_wait.requests[2].first_scheduled_at
    assert waited.requests[2].first_scheduled_at == starts[starts.index(went) + 3]


@pytest.mark.parametrize("scheduler", ["trtllm", "vllm-v1", "vllm"])
def test_balanced_groups_skip_to_the_bit(scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stretches = record_stretches(monkeypatch)
    replica = ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4)
    for qps, timeout, batching in ((1.0, 60, 0), (6.0, 7, 2)):
        config = RunConfig(replica=replica, scheduler=SchedulerConfig(scheduler, dp_balance_timeout_iters=timeout,
                                                                      dp_balance_batching_wait_iters=batching),
                           workload=WorkloadConfig("sharegpt", num_requests=80, qps=qps), seed=4)
        assert_same_run(config)
    assert stretches


def test_the_balance_is_refused_where_it_would_do_nothing() -> None:
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config

    with pytest.raises(ConfigError, match="attention-DP ranks"):
        build_config(model="qwen3-30b-a3b", dp_balance_timeout_iters=60)
    with pytest.raises(ConfigError, match="SGLang"):
        SchedulerConfig("sglang", dp_balance_timeout_iters=60)
    with pytest.raises(ConfigError, match="balance, which is off"):
        SchedulerConfig("trtllm", dp_balance_batching_wait_iters=2)
    assert build_config(model="qwen3-30b-a3b", attention_dp=2, ep=2, scheduler="trtllm",
                        dp_balance_timeout_iters=60).scheduler.dp_balance_timeout_iters == 60


# -- what a prompt step's MoE layers carry (--dp-padding) -----------------------------------------------------------
def _first_step_s(result) -> float:  # noqa: ANN001
    frame = result.iteration_frame()
    return float(frame.duration_s[frame.started_at == frame.started_at.min()].max())


@pytest.mark.parametrize("kernels", ["roofline", "vllm"])
def test_a_lone_prompt_pays_one_ranks_experts_where_the_engine_routes_the_ranks_own_tokens(kernels, request) -> None:
    # One 6,000-token prompt on the first of four ranks, the others idle. Padded to the largest rank (vLLM) its
    # step prices the routed experts for 4 x 6,000 tokens; routing the ranks' own tokens (SGLang, TensorRT-LLM),
    # for 6,000: the step a rank prices with BatchShape.moe_group_tokens = 6,000.
    if kernels != "roofline":
        request.getfixturevalue("aic")
    replica = ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4, kernels=kernels)
    table = _table([0.0], [6000], [3])
    steps = {}
    for padding in ("max", "sum", "graphs"):
        config = RunConfig(replica=replica, scheduler=SchedulerConfig("vllm-v1", dp_padding=padding),
                           workload=WorkloadConfig(name="fixed", num_requests=1, prompt_tokens=6000, output_tokens=3))
        steps[padding] = _first_step_s(simulate(config, table))
    cost = load_cost_model(config.cost_model, replica, config.engine)
    shape = BatchShape.from_requests(prefills=[(6000, 0)])
    assert steps["max"] == cost.iteration_time(shape)
    shape.moe_group_tokens = 6000
    assert steps["sum"] == cost.iteration_time(shape)
    assert steps["graphs"] == steps["sum"]  # 6,000 tokens: far above vLLM's largest CUDA graph (512)
    assert steps["sum"] < 0.8 * steps["max"]  # Qwen3-30B-A3B's experts are most of a prompt step


def test_vllm_pads_a_prompt_step_that_fits_a_cuda_graph_and_not_one_that_does_not() -> None:
    # vLLM V1 ("graphs"): a prompt of at most 512 tokens alone runs in a captured graph, so the group pads the idle
    # ranks to it, as "max" prices it; one token more runs eagerly and routes its own tokens; an engine without CUDA
    # graphs (the 2023 preset) never pads; a budget within the largest graph always does.
    replica = ReplicaConfig(**{**MOE, "ep": 4}, attention_dp=4)
    cases = ((300, "vllm-2026", None, True), (512, "vllm-2026", None, True), (513, "vllm-2026", None, False),
             (300, "vllm-2023-splitwise", None, False), (300, "vllm-2026", 320, True))
    for prompt, engine, budget, padded in cases:
        steps = {}
        for padding in ("max", "sum", "graphs"):
            config = RunConfig(replica=replica, engine=engine,
                               scheduler=SchedulerConfig("vllm-v1", dp_padding=padding, max_num_batched_tokens=budget,
                                                         max_num_seqs=budget),
                               workload=WorkloadConfig(name="fixed", num_requests=1, prompt_tokens=prompt,
                                                       output_tokens=3))
            steps[padding] = _first_step_s(simulate(config, _table([0.0], [prompt], [3])))
        assert steps["sum"] < steps["max"]
        assert steps["graphs"] == (steps["max"] if padded else steps["sum"]), (prompt, engine, budget)


def test_the_group_routes_own_tokens_by_its_rule() -> None:
    # DPGroup._own_tokens on hand-made steps: "sum" (graph_tokens None) routes the ranks' own tokens in a step that
    # carries a prompt; "graphs" in a step some rank runs above its largest CUDA graph (0 without graphs), prompt or
    # not.
    from types import SimpleNamespace

    from simulator.engine.dp_group import DPGroup

    def step(*shapes: BatchShape | None) -> list:
        return [None if shape is None else SimpleNamespace(shape=shape) for shape in shapes]

    decodes = lambda n: BatchShape(num_decodes=n, num_logits=n)  # noqa: E731
    prompt = lambda n, d=0: BatchShape(num_prefill_tokens=n, num_prefills=1, num_decodes=d, num_logits=1 + d)  # noqa: E731
    assert DPGroup._own_tokens(step(decodes(100), decodes(50)), None) == 0
    assert DPGroup._own_tokens(step(prompt(300), decodes(3), None), None) == 303
    assert DPGroup._own_tokens(step(decodes(100), decodes(50)), 512) == 0
    assert DPGroup._own_tokens(step(prompt(300, 10), decodes(3)), 512) == 0  # a chunk under a graph: padded
    assert DPGroup._own_tokens(step(prompt(600), decodes(3), None), 512) == 603
    assert DPGroup._own_tokens(step(decodes(600), decodes(10)), 512) == 610  # decodes above the largest graph
    assert DPGroup._own_tokens(step(decodes(3), decodes(1)), 0) == 4  # an engine without CUDA graphs


def test_vllms_largest_cuda_graph_follows_its_defaults() -> None:
    # min(2 x max_num_seqs x (1 + drafts), 512, budget): vLLM's max_cudagraph_capture_size when unset.
    from types import SimpleNamespace

    from simulator.engine.dp_group import graph_tokens

    def rank(seqs: int, budget: int, drafts: int | None = None) -> SimpleNamespace:
        spec = None if drafts is None else SimpleNamespace(config=SimpleNamespace(k=drafts))
        return SimpleNamespace(speculation=spec, max_num_seqs=seqs, token_budget=budget)

    assert graph_tokens(rank(1024, 8192)) == 512
    assert graph_tokens(rank(64, 8192)) == 128
    assert graph_tokens(rank(64, 8192, drafts=3)) == 512
    assert graph_tokens(rank(16, 8192, drafts=3)) == 128
    assert graph_tokens(rank(1024, 256)) == 256


def test_a_group_skips_exactly_beside_decode_steps_above_vllms_largest_graph(monkeypatch) -> None:  # noqa: ANN001
    # Above 512 decodes a rank (1,101 users on two ranks: 551 and 550), vLLM's steps route the ranks' own tokens, not
    # the larger rank's padded: the group must not skip such
    # stretches (no rank's stretch knows the others'), and skipping on and off still give the same tables.
    stretches = record_stretches(monkeypatch)
    replica = ReplicaConfig(**MOE, attention_dp=2)
    config = RunConfig(replica=replica, scheduler=SchedulerConfig("vllm-v1", max_num_seqs=1024),
                       workload=WorkloadConfig(name="fixed", arrival="burst", num_requests=1151, concurrency=1101, prompt_tokens=16,
                                               output_tokens=24), seed=1)
    assert_same_run(config)
    frame = simulate(config).iteration_frame()
    assert (frame.num_decodes > 512).any()  # some steps were above the largest graph
    assert stretches


@pytest.mark.parametrize("kernels", ["roofline", "vllm"])
def test_a_group_of_every_ranks_padded_tokens_prices_as_a_rank_alone(kernels, request) -> None:
    # The default reading of a rank's shape is the group padded to it: moe_group_tokens = tokens x attention_dp
    # prices the same step (to rounding), so only a group that routes fewer tokens changes a price.
    if kernels != "roofline":
        request.getfixturevalue("aic")
    cost = load_cost_model("roofline", ReplicaConfig(
        **{**MOE, "ep": 4}, attention_dp=4, kernels=kernels), "vllm-2026")
    for tokens in (1, 37, 512, 5000):
        shape = BatchShape.from_requests(prefills=[(tokens, 0)])
        alone = cost.iteration_time(shape)
        shape.moe_group_tokens = 4 * tokens
        assert cost.iteration_time(shape) == pytest.approx(alone, rel=1e-12)
        shape.moe_group_tokens = tokens
        assert cost.iteration_time(shape) < alone


def test_decode_only_steps_are_padded_to_the_largest_rank_under_either_rule() -> None:
    # Steps without a prompt keep the padded price (the engines' CUDA graphs, SGLang's MAX_LEN gather): a group
    # whose ranks only decode runs the same under both rules once its prompts are done.
    table = _table([0.0, 0.0], [16, 16], [60, 60])
    runs = {}
    for padding in ("max", "sum"):
        config = _config().replace(scheduler__dp_padding=padding)
        runs[padding] = simulate(config, table).iteration_frame()
    decode = {p: f[f.num_prefill_tokens == 0].groupby("started_at").duration_s.max() for p, f in runs.items()}
    assert len(decode["max"]) > 50
    assert decode["max"].to_numpy().tolist() == pytest.approx(decode["sum"].to_numpy().tolist(), rel=0, abs=0)


def test_dp_padding_is_the_engines_and_refused_where_nothing_reads_it() -> None:
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config

    assert [SchedulerConfig(name).dp_padding_rule() for name in ("vllm", "vllm-v1", "sglang", "trtllm")] == [
        "max", "graphs", "sum", "sum"]
    assert SchedulerConfig("sglang", dp_padding="max").dp_padding_rule() == "max"
    with pytest.raises(ConfigError, match="unknown attention-DP padding"):
        SchedulerConfig("vllm-v1", dp_padding="min")
    with pytest.raises(ConfigError, match="attention-DP ranks of a MoE model"):
        build_config(model="qwen3-30b-a3b", dp_padding="sum")  # no attention DP
    with pytest.raises(ConfigError, match="attention-DP ranks of a MoE model"):
        build_config(model="llama-3.1-8b", tp=2, dp_padding="sum")
    assert build_config(model="qwen3-30b-a3b", attention_dp=2, ep=2, dp_padding="sum").scheduler.dp_padding == "sum"



def test_result_keys_name_the_padding_rule_where_it_changes_results() -> None:
    # A stored point resumes by its key: an attention-DP MoE run's key says the engine's rule where it is not
    # "max" (its results changed with it: SGLang's and TensorRT-LLM's "sum", vLLM V1's "graphs"), a run under
    # "max" has the key it had before the rules existed.
    moe = RunConfig(replica=ReplicaConfig(**MOE, attention_dp=2))
    for name, rule in (("sglang", "sum"), ("trtllm", "sum"), ("vllm-v1", "graphs")):
        run = moe.replace(scheduler__name=name)
        assert run.result_key() == run.replace(scheduler__dp_padding=rule).result_key()  # the rule in force
        assert run.result_key() != run.replace(scheduler__dp_padding="max").result_key()
        others = {"sum", "graphs"} - {rule}
        assert all(run.result_key() != run.replace(scheduler__dp_padding=o).result_key() for o in others)
    run = moe.replace(scheduler__name="vllm")
    assert run.result_key() == run.replace(scheduler__dp_padding="max").result_key()
