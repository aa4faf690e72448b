"""Event skipping is exact: skipping on and off give identical request and iteration tables.

Every scheduler, PP 1 and 2, roomy and tight KV caches (preemptions, allocation limits),
clusters, and the learned cost model; plus the cost models' vectorised stretch pricing
against their per-iteration pricing, float for float.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import simpy
from helpers import ConstantCostModel, assert_same_run, record_outcomes, submit_all

from simulator.calibrate.fit import fit_tables
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel import CostModel, RooflineCostModel
from simulator.costmodel.engine_model import SMALL_STRETCH, EngineCostModel, load_engine
from simulator.costmodel.learned import LearnedCostModel
from simulator.engine import cluster as engine
from simulator.engine.kvcache import BlockManager
from simulator.engine.records import Recorder
from simulator.engine.replica import Replica
from simulator.engine.schedulers import SCHEDULERS
from simulator.engine.tbt import same_gaps
from simulator.fast import partitioned as partitioned_runs
from simulator.fast import skipping as fastforward
from simulator.fast.lockstep import lockstep_class
from simulator.fast.replica import SkippingReplica
from simulator.planning.capacity import OverloadWatch
from simulator.report.metrics import request_frame
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable
from simulator.workload.request import Request


@pytest.fixture
def count_stretches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts skipped stretches (so a test can tell skipping really happened)."""
    calls: list[int] = []
    real = fastforward.apply

    def counted(replica, stretch):  # noqa: ANN001, ANN202
        calls.append(stretch.num_iterations)
        return real(replica, stretch)

    monkeypatch.setattr(fastforward, "apply", counted)
    return calls


@pytest.fixture
def chunk_stretches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The iterations of each skipped chunked-prefill stretch (fastforward.plan_chunks)."""
    calls: list[int] = []
    real = fastforward.plan_chunks

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        stretch = real(*args, **kwargs)
        if stretch is not None:
            calls.append(stretch.num_iterations)
        return stretch

    monkeypatch.setattr(fastforward, "plan_chunks", counted)
    return calls


def _config(scheduler: str, pp: int, utilization: float, qps: float, num_requests: int = 60) -> RunConfig:
    return RunConfig(
        replica=ReplicaConfig("llama-2-7b", "a100-80gb", pp=pp, gpu_memory_utilization=utilization,
                              max_model_len=4096),
        scheduler=SchedulerConfig(scheduler),
        workload=WorkloadConfig("sharegpt", qps=qps, num_requests=num_requests), seed=3)


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
@pytest.mark.parametrize("pp", [1, 2])
def test_skipping_on_and_off_give_identical_tables(scheduler: str, pp: int, count_stretches: list[int]) -> None:
    assert_same_run(_config(scheduler, pp, 0.9, qps=2.0), count_stretches)
    if pp == 1:
        assert sum(count_stretches) > 0  # the roomy run really skipped iterations
    else:
        assert not count_stretches  # pipelined replicas step (documented)


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "orca"])
def test_skipping_is_exact_in_a_tight_cache(scheduler: str, count_stretches: list[int]) -> None:
    """A KV cache of a few thousand tokens: stretches stop where allocations would run out."""
    config = _config(scheduler, 1, 0.9, qps=20.0, num_requests=50)
    config = config.replace(replica__gpu_memory_utilization=0.24)
    result = simulate(config.replace(fast_forward=False))
    if scheduler != "orca":
        assert int(request_frame(result)["num_preemptions"].sum()) > 0  # the case is really tight
    assert_same_run(config, count_stretches)
    assert count_stretches


@pytest.mark.parametrize(("scheduler", "chunk_size"), [("sarathi", 128), ("sarathi", 512), ("vllm-v1", 256)])
@pytest.mark.parametrize("utilization", [0.9, 0.24])
def test_chunked_prefill_stretches_are_exact(scheduler: str, chunk_size: int, utilization: float,
                                             chunk_stretches: list[int]) -> None:
    """Long prompts in chunks beside steady decodes: those iterations are skipped too, in a roomy
    cache and in a tight one (preemptions, allocations running short within a stretch)."""
    config = _config(scheduler, 1, utilization, qps=4.0, num_requests=50).replace(scheduler__chunk_size=chunk_size)
    assert_same_run(config)
    assert chunk_stretches and max(chunk_stretches) > 2  # skipped, some several chunks at once
    if utilization < 0.5:
        result = simulate(config.replace(fast_forward=False))
        assert int(request_frame(result)["num_preemptions"].sum()) > 0  # the case is really tight


@pytest.mark.parametrize(("model", "kernels", "utilization"),
                         [(m, k, u) for m in ["llama-3.1-8b"] for k in ["roofline", "vllm", "trtllm"] for u in [0.9, 0.22]]
                         + [("gpt-oss-20b", "vllm", 0.9)])
def test_chunked_prefill_stretches_are_exact_under_today_and_table_kernels(
        model: str, kernels: str, utilization: float, chunk_stretches: list[int], request: pytest.FixtureRequest) -> None:
    """As above, priced by the 'today' roofline (its prefill ramp and per-sequence term) and by
    kernel tables (their interpolated prefill attention and decode curves, sliding-window layers
    included, extrapolations counted as stepping counts them): chunk stretches happen and change nothing."""
    if kernels != "roofline":
        aic = request.getfixturevalue("shared_data") / "profiles" / "aiconfigurator"
        if not (aic / "systems" / "data").is_dir():
            pytest.skip("../shared/data/profiles/aiconfigurator is not present")
    config = RunConfig(
        replica=ReplicaConfig(model, "h100-sxm", kernels=kernels, roofline_calibration="today",
                              gpu_memory_utilization=utilization, max_model_len=8192),
        scheduler=SchedulerConfig("sarathi", chunk_size=512),
        workload=WorkloadConfig("sharegpt", qps=6.0, num_requests=60), seed=3)
    assert_same_run(config)
    assert chunk_stretches and max(chunk_stretches) > 2
    if utilization < 0.5:
        result = simulate(config.replace(fast_forward=False))
        assert int(request_frame(result)["num_preemptions"].sum()) > 0  # the case is really tight


def test_sglang_skipping_is_exact_while_refused_prompts_wait(monkeypatch: pytest.MonkeyPatch,
                                                             count_stretches: list[int]) -> None:
    """SGLang's predicted admission in a cache it keeps prompts out of (a closed loop of 48 over 400 blocks):
    decode stretches are skipped while refused prompts wait, the running batch being full (so the ratio, which
    decays at every step, admits nobody within a stretch; each stretch decays it by its length), retractions
    reset the ratio, and the tables are the stepping run's."""
    waited: list[int] = []
    counted = fastforward.apply

    def watched(replica, stretch):  # noqa: ANN001, ANN202
        if replica.scheduler.waiting:
            assert replica.scheduler.admission_blocked
            waited.append(stretch.num_iterations)
        return counted(replica, stretch)

    monkeypatch.setattr(fastforward, "apply", watched)
    config = RunConfig(replica=ReplicaConfig("llama-2-7b", "a100-80gb", num_gpu_blocks=400),
                       scheduler=SchedulerConfig("sglang"),
                       workload=WorkloadConfig("sharegpt", concurrency=48, num_requests=150), seed=3)
    assert_same_run(config, count_stretches)
    assert len(waited) > 100 and sum(waited) > 10_000  # skipped beside refused prompts
    assert int(request_frame(simulate(config)).num_preemptions.sum()) > 0  # and retracted (the ratio reset)


def _hand_run(name: str, num_blocks: int, fast: bool) -> tuple[list[Request], Recorder, Replica]:
    """A hand-sized cache (preemptions) with a constant-time cost model: every stretch has
    equal iteration times, the hardest case for end-time ties."""
    env = simpy.Environment()
    recorder = Recorder()
    config = SchedulerConfig(name)
    cls = lockstep_class(SCHEDULERS[name]) if fast else SCHEDULERS[name]
    scheduler = cls(config, BlockManager(num_blocks, 16, config.watermark), 2048)
    cost = ConstantCostModel(ReplicaConfig("mistral-7b", "a100-80gb"), 0.01)
    replica = (SkippingReplica(env, 0, scheduler, cost, recorder, horizon=env.peek) if fast
               else Replica(env, 0, scheduler, cost, recorder))
    rng = random.Random(7)
    requests = [Request(i, 0.05 * i + rng.random() * 0.02, rng.randint(1, 300), rng.randint(1, 200), token_times=True)
                for i in range(40)]
    submit_all(env, replica, requests)
    return requests, recorder, replica


# orca and fastertransformer do not skip in this hand-made case (their reservations leave
# requests waiting behind admissions); the roomy and tight tests above cover them.
@pytest.mark.parametrize("scheduler", ["sarathi", "vllm", "vllm-v1"])
def test_skipping_with_a_constant_cost_and_preemptions(scheduler: str, count_stretches: list[int]) -> None:
    fast, rec_fast, rep_fast = _hand_run(scheduler, 120, True)
    assert count_stretches and sum(r.num_preemptions for r in fast) > 0  # the case skips and preempts
    slow, rec_slow, rep_slow = _hand_run(scheduler, 120, False)
    assert rec_fast.iterations == rec_slow.iterations
    assert [(bytes(r.token_times), r.num_preemptions, r.completed_at, r.status) for r in fast] == \
           [(bytes(r.token_times), r.num_preemptions, r.completed_at, r.status) for r in slow]
    assert rep_fast.num_busy_s == rep_slow.num_busy_s
    assert same_gaps([rep_fast.scheduler.gaps], [rep_slow.scheduler.gaps])


@pytest.fixture
def partitioned(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each fast.partitioned.run_partitioned call ran the cluster replica by replica (False: it
    met a tie and the joint run took over)."""
    return record_outcomes(monkeypatch, partitioned_runs, "run_partitioned")


@pytest.mark.parametrize("router", ["round_robin", "random", "least_outstanding"])
def test_skipping_in_a_cluster(router: str, count_stretches: list[int], partitioned: list[bool]) -> None:
    """State-free routers run replica by replica (fast.partitioned.run_partitioned); least_outstanding jointly."""
    config = _config("sarathi", 1, 0.9, qps=3.0, num_requests=80).replace(num_replicas=3, router=router)
    assert_same_run(config, count_stretches)
    assert count_stretches
    assert partitioned == ([] if router == "least_outstanding" else [True])


def test_a_cluster_whose_arrivals_tie_with_iterations_falls_back_to_the_joint_run(
        partitioned: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """Constant 0.25 s iterations and arrivals on a 0.25 s grid: an arrival lands exactly on an
    iteration's end, which only the joint run orders as SimPy does; the result still matches."""
    monkeypatch.setattr(engine, "load_cost_model", lambda name, replica, eng=None: ConstantCostModel(replica, 0.25))
    table = RequestTable(np.arange(24) * 0.25, np.full(24, 40), np.full(24, 12), source="grid")
    config = RunConfig(num_replicas=2)
    on = simulate(config, table, token_times=True)
    off = simulate(config.replace(fast_forward=False), table, token_times=True)
    assert partitioned == [False]
    assert request_frame(on).equals(request_frame(off)) and on.iteration_frame().equals(off.iteration_frame())
    assert same_gaps(on.tbt, off.tbt) and on.sim_end_at == off.sim_end_at


def test_an_arrival_its_replica_clock_cannot_land_on_falls_back_to_the_joint_run(partitioned: list[bool]) -> None:
    """Replica by replica, an arrival is stamped at the joint run's time; where no delay from the
    replica's own clock lands on it (0.237... + d jumps over 0.489...), the run falls back to the
    joint run (it stamped the request an ulp early, scheduled before it arrived; found by fuzzing)."""
    with pytest.raises(partitioned_runs._Tie):
        partitioned_runs._delay_to(0.23700000000000002, 0.48900000000000005)
    table = RequestTable(np.array([0.0, 0.44, 0.5, 0.955]), np.full(4, 10), np.full(4, 2), source="hand")
    config = RunConfig(num_replicas=2)
    on = simulate(config, table, token_times=True)
    off = simulate(config.replace(fast_forward=False), table, token_times=True)
    assert partitioned == [False]
    assert request_frame(on).equals(request_frame(off)) and on.iteration_frame().equals(off.iteration_frame())
    assert all(r.first_scheduled_at >= r.arrival_at for r in on.requests)


def test_extrapolations_are_counted_for_the_iterations_run(learned: LearnedCostModel,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A stretch is priced ahead of the horizon; only the iterations it applies count their
    extrapolations (decodes past the fitted 2,048-token context here), so the count matches
    the step-by-step run's (it counted every priced iteration: 738 against 595 in a fuzzed case)."""
    artifact = learned.artifact
    monkeypatch.setattr(engine, "load_cost_model", lambda name, replica, eng=None: EngineCostModel(
        LearnedCostModel(replica, artifact), load_engine(eng or "ideal")))
    config = RunConfig(workload=WorkloadConfig(name="uniform", prompt_tokens=1500, prompt_tokens_max=2000,
                                               output_tokens=300, output_tokens_max=700, qps=2.0, num_requests=60))
    on, off = simulate(config), simulate(config.replace(fast_forward=False))
    assert off.extra["cost_model_extrapolations"] > 0
    assert on.extra == off.extra
    assert request_frame(on).equals(request_frame(off))


# -- cost models: vectorised stretch pricing equals per-iteration pricing -------------------------

def _synthetic_profile():  # noqa: ANN202
    import pandas as pd

    rng = np.random.default_rng(0)
    rows = []
    for op, (a, b) in {"qkv_proj": (8e-6, 1.1e-7), "mlp_up_gate": (1.5e-5, 2.6e-7), "mlp_down": (1e-5, 1.3e-7)}.items():
        for t in range(1, 2049, 7):
            rows.append({"op": op, "num_tokens": t, "tp": 1, "median_s": (a + b * t) * rng.lognormal(0, 0.02)})
    for n in range(1, 33, 3):
        for k in range(64, 2049, 256):
            rows.append({"op": "attn_decode", "batch_size": n, "context_len": k, "num_tokens": n, "tp": 1,
                         "median_s": (8e-6 + 2e-7 * n + 1.2e-9 * n * k) * rng.lognormal(0, 0.02)})
    df = pd.DataFrame(rows)
    df["model"], df["device"] = "llama-2-7b", "a100-80gb"
    return df


@pytest.fixture(scope="module")
def learned() -> LearnedCostModel:
    replica = ReplicaConfig("llama-2-7b", "a100-80gb")
    return LearnedCostModel(replica, fit_tables(_synthetic_profile(), seed=0))


def _stretches(seed: int, max_n: int = 128, max_kv: int = 4000):  # noqa: ANN202
    rng = random.Random(seed)
    for _ in range(40):
        n = rng.randint(1, max_n)
        kv = [rng.randint(1, max_kv) for _ in range(n)]
        yield n, sum(kv), sum(k * k for k in kv), max(kv), rng.randint(2, 300)


@pytest.mark.parametrize("kind", ["roofline", "roofline-tp4", "learned", "hybrid"])
def test_vectorised_stretch_pricing_is_float_exact(kind: str, learned: LearnedCostModel) -> None:
    if kind == "learned":
        model: CostModel = learned
    elif kind == "hybrid":  # Gated DeltaNet layers mixed into each decode step's attention
        model = RooflineCostModel(ReplicaConfig("qwen3-next-80b-a3b", "h100-sxm", tp=4))
    else:
        model = RooflineCostModel(ReplicaConfig("llama-2-70b" if kind.endswith("tp4") else "llama-2-7b",
                                                "a100-80gb", tp=4 if kind.endswith("tp4") else 1))
    for args in _stretches(1):
        before = (getattr(model, "num_extrapolations", 0), dict(getattr(model, "extrapolations_by_op", {})))
        fast = model.decode_stretch_times(*args)
        counted = (getattr(model, "num_extrapolations", 0), dict(getattr(model, "extrapolations_by_op", {})))
        if isinstance(model, LearnedCostModel):
            model.num_extrapolations, model.extrapolations_by_op = before[0], dict(before[1])
        slow = CostModel.decode_stretch_times(model, *args)
        assert fast == slow
        assert counted == (getattr(model, "num_extrapolations", 0), dict(getattr(model, "extrapolations_by_op", {})))
    vector = model._attention_decode_vector if isinstance(model, LearnedCostModel) else model.attention_decode_vector
    # The vectorised path itself answered (for batches within the model's range), not only the fallback.
    assert any(model._vector_stretch(*args, vector) is not None for args in _stretches(1))
    if kind == "learned":
        assert learned.extrapolations_by_op.get("attn_decode", 0) > 0  # contexts past the profile were counted


@pytest.mark.parametrize("kernels", ["roofline", "learned", "hybrid"])
@pytest.mark.parametrize("preset", ["vllm-2023-splitwise", "vllm-v1"])
def test_engine_stretch_pricing_is_float_exact_over_roofline_and_learned_kernels(
        kernels: str, preset: str, learned: LearnedCostModel) -> None:
    k = learned if kernels == "learned" else RooflineCostModel(
        ReplicaConfig("qwen3-next-80b-a3b", "h100-sxm", tp=4) if kernels == "hybrid" else ReplicaConfig("llama-2-7b", "a100-80gb"))
    model = EngineCostModel(k, load_engine(preset))
    # a learned model's chunks are priced one by one, as are a hybrid's (its prefill attention has no list form)
    assert model.fast_chunk_stretches == (kernels == "roofline")
    for args in _stretches(2):
        before = (getattr(k, "num_extrapolations", 0), dict(getattr(k, "extrapolations_by_op", {})))
        fast = model.decode_stretch_times(*args)
        counted = (getattr(k, "num_extrapolations", 0), dict(getattr(k, "extrapolations_by_op", {})))
        if kernels == "learned":
            k.num_extrapolations, k.extrapolations_by_op = before[0], dict(before[1])
        slow = CostModel.decode_stretch_times(model, *args)  # iteration by iteration
        assert fast == slow
        assert counted == (getattr(k, "num_extrapolations", 0), dict(getattr(k, "extrapolations_by_op", {})))
    # The vectorised path itself answered (and stayed trusted), not only the fallback, both for
    # short stretches (plain floats) and long ones (numpy).
    assert model._stretch_ok and any(model._vector_stretch(*args) is not None for args in _stretches(2))
    for m in (2, SMALL_STRETCH, SMALL_STRETCH + 1, 250):
        fast = model._vector_stretch(7, 7 * 900, 7 * 900 * 900, 900, m)
        assert fast is not None and fast == CostModel.decode_stretch_times(model, 7, 7 * 900, 7 * 900 * 900, 900, m)


@pytest.mark.parametrize(("model", "gpu", "tp", "vectorised"), [("llama-2-7b", "a100-80gb", 1, True),
                                                                ("llama-2-70b", "h100-sxm", 4, True),
                                                                ("mixtral-8x7b", "a100-80gb", 2, True),
                                                                ("gpt-oss-20b", "h100-sxm", 1, False),
                                                                ("deepseek-v3", "h200", 8, False)])
@pytest.mark.parametrize("preset", ["vllm-2023-splitwise", "vllm-v1"])
@pytest.mark.parametrize("calibration", ["2023", "today"])
def test_chunk_stretch_pricing_is_float_exact(model: str, gpu: str, tp: int, vectorised: bool, preset: str,
                                              calibration: str) -> None:
    """A prompt's chunks beside decodes (none too), priced in plain floats over roofline
    kernels, give the per-iteration path's floats, under the 2023 calibration and today's
    (its prefill efficiency ramp and per-sequence term); sliding-window and MLA attention fall back."""
    kernels = RooflineCostModel(ReplicaConfig(model, gpu, tp=tp, roofline_calibration=calibration))
    if calibration == "today":  # the terms the 2023 calibrations lack are really there
        assert kernels.prefill_ramp and kernels.prefill_seq_s > 0
    cost = EngineCostModel(kernels, load_engine(preset))
    assert cost.fast_chunk_stretches == vectorised  # event skipping plans chunk stretches only then
    rng = random.Random(4)
    for args in _stretches(3, max_n=96):
        n, kv_sum, kv_sq_sum, kv_max, m = args
        if rng.random() < 0.2:
            n = kv_sum = kv_sq_sum = kv_max = 0
        # Small chunks read more than they compute (the bytes term), large ones the reverse.
        chunk, kv_before, m = rng.choice([1, 3, 16, rng.randint(1, 2048)]), rng.randint(0, 8000), min(m, 40)
        fast = cost.chunk_stretch_times(n, kv_sum, kv_sq_sum, kv_max, chunk, kv_before, m)
        assert fast == CostModel.chunk_stretch_times(cost, n, kv_sum, kv_sq_sum, kv_max, chunk, kv_before, m)
        assert (cost._chunk_stretch(n, kv_sum, kv_sq_sum, kv_max, chunk, kv_before, m) is not None) == vectorised
    # The same (decodes, chunk) again over other KV lengths: its KV-independent terms now come
    # from the cache (past the checked first stretches), and must still be the scalar path's.
    cost._stretch_checks_left = 0
    for kv_before in (0, 517, 7000):
        args = (12, 12 * (900 + kv_before), 12 * (900 + kv_before) ** 2, 900 + kv_before, 500, kv_before, 9)
        assert cost.chunk_stretch_times(*args) == CostModel.chunk_stretch_times(cost, *args)
    assert cost._stretch_ok  # never disagreed with the scalar path


@pytest.mark.parametrize(("model", "gpu", "tp", "backend", "vectorised"),
                         [("llama-3.1-8b", "h100-sxm", 1, "vllm", True), ("llama-3.1-70b", "h100-sxm", 4, "trtllm", True),
                          ("qwen3-32b", "b200", 2, "sglang", True), ("mixtral-8x7b", "h100-sxm", 2, "vllm", True),
                          ("deepseek-v3", "h200", 8, "sglang", True), ("gpt-oss-20b", "h100-sxm", 1, "vllm", True),
                          ("gpt-oss-120b", "b200", 2, "trtllm", True)])
def test_table_chunk_stretch_pricing_is_float_exact_and_counted(model: str, gpu: str, tp: int, backend: str,
                                                                vectorised: bool, shared_data) -> None:  # noqa: ANN001
    """Over kernel tables (--kernels vllm|sglang|trtllm) a prompt's chunks beside decodes (none
    too) are priced from the tables' prefill interpolation and decode curves in plain floats: the
    per-iteration path's floats, and its extrapolation counts (prompt lengths and contexts past
    the measured grid), op by op; sliding-window layers too (the window kernel's rows, or the full
    rows with each query's keys capped at the window)."""
    from simulator.costmodel.aic.model import TableCostModel

    root = shared_data / "profiles" / "aiconfigurator"
    if not (root / "systems" / "data").is_dir():
        pytest.skip("../shared/data/profiles/aiconfigurator is not present")
    kernels = TableCostModel(ReplicaConfig(model, gpu, tp=tp, roofline_calibration="today"), backend, root=root,
                             quiet=True)
    if model == "gpt-oss-120b":  # tables without the window kernel's prefill rows: keys capped on the full rows
        assert kernels._window_grids.pop("context") is not None
    cost = EngineCostModel(kernels, load_engine(f"{backend}-2026"))
    assert cost.fast_chunk_stretches == vectorised

    def counts() -> tuple[int, list]:
        return kernels.num_extrapolations, list(kernels.extrapolations_by_op.items())

    rng = random.Random(5)
    for check in (True, False):  # the first stretches are checked against the scalar path, then trusted
        cost._stretch_checks_left = 32 if check else 0
        for _ in range(40):
            n = rng.choice([0, rng.randint(1, 160)])
            kv = [rng.randint(1, 20000) for _ in range(n)]
            chunk, kv_before = rng.choice([1, 3, 16, 512, rng.randint(1, 8192)]), rng.randint(0, 30000)
            args = (n, sum(kv), sum(k * k for k in kv), max(kv, default=0), chunk, kv_before, rng.randint(1, 40))
            before = counts()
            fast = cost.chunk_stretch_times(*args)
            counted = counts()
            kernels.num_extrapolations, kernels.extrapolations_by_op = before[0], dict(before[1])
            assert fast == CostModel.chunk_stretch_times(cost, *args)  # iteration by iteration
            assert counted == counts()
            assert (cost._chunk_stretch(*args) is not None) == vectorised
    assert cost._stretch_ok  # never disagreed with the scalar path
    if vectorised:  # past the grids, both ways, really counted
        assert kernels.extrapolations_by_op["attn_prefill"] > 0 and kernels.extrapolations_by_op["attn_decode"] > 0


def test_a_cost_model_subclass_gets_the_exact_generic_path(monkeypatch: pytest.MonkeyPatch) -> None:
    class Slower(RooflineCostModel):
        def overhead_time(self, shape):  # noqa: ANN001, ANN202
            return super().overhead_time(shape) + 1e-6 * shape.decode_kv_tokens

    vector_calls: list[int] = []
    vector = RooflineCostModel.attention_decode_vector
    monkeypatch.setattr(RooflineCostModel, "attention_decode_vector",
                        lambda self, *a: vector_calls.append(1) or vector(self, *a))
    model = Slower(ReplicaConfig("llama-2-7b", "a100-80gb"))
    args = (8, 8000, 9_000_000, 1500, 50)
    assert model.decode_stretch_times(*args) == CostModel.decode_stretch_times(model, *args)
    assert not vector_calls  # a subclass may add terms the vector form does not know: never tried


def test_iteration_log_reads_like_the_list_of_tuples_it_replaces() -> None:
    from simulator.engine.records import ITERATION_COLUMNS, IterationLog

    rows = [(i % 3, 0.5 * i, 0.25, i, 2 * i, 1, 7, 0, i % 2, i % 4) for i in range(IterationLog.BUFFER * 2 + 5)]
    # Two decode stretches' rows (every count but decodes and blocks zero), one past the zero buffer.
    for lo, hi in ((100, 200), (300, 700)):
        rows[lo:hi] = [(2, 0.5 * i, 0.125 + i, 0, 17, 0, i // 3, 0, 0, 0) for i in range(lo, hi)]
    log = IterationLog()
    for row in rows[:100]:
        log.append(row)
    for lo, hi in ((100, 200), (200, 300), (300, 700)):
        if rows[lo][3] == 0:
            starts, durations, used = ([r[j] for r in rows[lo:hi]] for j in (1, 2, 6))
            log.extend_stretch(2, starts, durations, 17, used)
        else:
            log.extend(rows[lo:hi])
    log.extend(rows[700:709])
    # A short chunked-prefill stretch (through the row buffer) with its constant prefill columns.
    rows[709:714] = [(1, 0.5 * i, 0.25, 96, 5, 1, 40 + i, 0, 0, 0) for i in range(709, 714)]
    log.extend_stretch(1, [0.5 * i for i in range(709, 714)], [0.25] * 5, 5, [40 + i for i in range(709, 714)], 96, 1)
    log.extend(rows[714:])
    assert len(log) == len(rows) and log == rows and list(log) == rows
    assert log[0] == rows[0] and log[-1] == rows[-1] and log[5:8] == rows[5:8]
    assert log == IterationLog(rows) and log != IterationLog(rows[:-1])
    cols = log.columns()
    assert list(cols) == list(ITERATION_COLUMNS)
    assert cols["started_at"].dtype.kind == "f" and cols["num_decodes"].tolist() == [r[4] for r in rows]
    with pytest.raises(ValueError, match="unequal length"):
        log.extend_stretch(0, [0.0, 1.0], [1.0], 3, [4])
    assert len(log) == len(rows)  # nothing appended


def test_a_watch_process_sees_the_same_state_with_skipping(count_stretches: list[int]) -> None:
    """A watch may read any request at any time: skipping then stops before its wake-ups."""
    config = _config("sarathi", 1, 0.9, qps=1.0, num_requests=40)

    def run(fast: bool) -> list[tuple]:
        seen: list[tuple] = []

        def watch(env, requests):  # noqa: ANN001, ANN202
            for _ in range(1, 200):
                yield env.timeout(0.37)
                seen.append((env.now, sum(r.num_generated for r in requests), sum(len(r.token_times) for r in requests)))

        simulate(config.replace(fast_forward=fast), watch=watch, token_times=True)
        return seen

    assert run(True) == run(False)
    assert count_stretches


class _SeeingWatch(OverloadWatch):
    """A capacity trial's watch that also keeps what each TBT check saw: the time and every
    gap recorded so far, as a multiset (how gaps split into runs may differ)."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.seen: list[tuple] = []
        self._logs: list = []

    def watch_gaps(self, logs, requests) -> None:  # noqa: ANN001
        super().watch_gaps(logs, requests)
        self._logs = logs

    def certain_otherwise(self, now_at: float) -> str | None:
        gaps: Counter = Counter()
        for log in self._logs:
            for value, count in zip(log.values, log.counts, strict=True):
                gaps[value] += count
        self.seen.append((now_at, sorted(gaps.items())))
        return super().certain_otherwise(now_at)


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
def test_a_capacity_watch_sees_the_same_state_while_stretches_run_across_its_checks(
        scheduler: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A capacity trial's watch settles the replica at each check (Replica.settle), so a
    stretch may run across it: every check sees the step-by-step loop's gaps, and passing and
    stopped trials end as they do stepping (reason, requests, iterations, gaps, times)."""
    splits: list[int] = []
    real = fastforward.split

    def counted(stretch, num, num_used_blocks):  # noqa: ANN001, ANN202
        splits.append(num)
        return real(stretch, num, num_used_blocks)

    monkeypatch.setattr(fastforward, "split", counted)
    # A trial that passes (static batching overloads even at 1 QPS: stopped), one stopped on
    # TBT, and one in a tight cache (preemptions: stretches of requests stepped one by one): 0.3 of
    # the total memory, whatever basis the engine's rule takes (TensorRT-LLM's 0.3 of free memory is
    # twice the cache, and its trial passes).
    for qps, tbt_s, utilization, expect_stop in ((1.0, 0.2, 0.9, scheduler == "fastertransformer"),
                                                 (3.0, 0.03, 0.9, True), (2.0, 0.2, 0.3, True)):
        config = RunConfig(replica=ReplicaConfig("llama-2-7b", "a100-80gb", max_model_len=4096,
                                                 gpu_memory_utilization=utilization,
                                                 memory_fraction_of="total" if utilization < 0.9 else None),
                           scheduler=SchedulerConfig(scheduler),
                           workload=WorkloadConfig("sharegpt", qps=qps, num_requests=150), seed=3)
        runs, watches = [], []
        for fast in (True, False):
            watches.append(_SeeingWatch(2.0, 50.0, tbt_s=tbt_s, tbt_quantile=99.0))
            runs.append(simulate(config.replace(fast_forward=fast), watch=watches[-1], token_times=True))
        on, off = runs
        assert ("stopped" in on.extra) == expect_stop
        if utilization < 0.5 and scheduler in ("sarathi", "vllm", "vllm-v1"):
            assert any(r.num_preemptions for r in on.requests)  # the tight cache really preempted
        assert watches[0].seen == watches[1].seen and len(watches[0].seen) > 10
        assert on.extra == off.extra
        assert request_frame(on).equals(request_frame(off))
        assert on.iteration_frame().equals(off.iteration_frame())
        assert same_gaps(on.tbt, off.tbt)
        assert on.replica_busy_s == off.replica_busy_s and on.sim_end_at == off.sim_end_at
    assert splits  # stretches did run across checks


def test_a_split_stretch_applies_as_the_whole() -> None:
    """fastforward.split's two pieces, one iteration each at the extremes, write what the
    stretch does: requests, gaps, blocks, iteration rows, busy time."""
    config = _config("sarathi", 1, 0.9, qps=0.5, num_requests=8)

    def steady_replica() -> Replica:
        env = simpy.Environment()
        cluster = engine.Cluster(env, config, Recorder(), np.random.default_rng(0), lockstep=lockstep_class,
                                 skipping=SkippingReplica)
        replica = cluster.replicas[0]
        for i in range(4):
            replica.submit(Request(i, 0.0, 300 + 40 * i, 200 + 10 * i))
        while not replica.steady.decode(replica.scheduler):  # step until the batch is all decodes (no SimPy)
            batch = replica._take_batch()
            env._now += replica.cost_model.iteration_time(batch.shape)
            replica.scheduler.complete(batch, env.now)
        return replica

    def state(replica: Replica) -> tuple:
        sched = replica.scheduler
        sched.settle()
        return ([(r.num_generated, r.num_blocks, r.last_token_at, r.max_tbt_s) for r in sched.running],
                sched.blocks.num_free_blocks, list(replica.recorder.iterations), replica.num_busy_s,
                sorted(zip(sched.gaps.values, sched.gaps.counts, strict=True)))

    whole = steady_replica()
    stretch = fastforward.plan(whole, horizon_at=float("inf"))
    assert stretch is not None and stretch.num_iterations >= 3
    fastforward.apply(whole, stretch)
    for num in (1, stretch.num_iterations // 2, stretch.num_iterations - 1):
        pieces = steady_replica()
        again = fastforward.plan(pieces, horizon_at=float("inf"))
        head, rest = fastforward.split(again, num, pieces.scheduler.blocks.num_used_blocks)
        assert (head.num_iterations, rest.num_iterations) == (num, stretch.num_iterations - num)
        assert not fastforward.apply(pieces, head)
        assert pieces.scheduler.blocks.num_used_blocks == again.kv_blocks_used[num - 1]  # as after iteration num - 1
        assert len(pieces.recorder.iterations) == num
        fastforward.apply(pieces, rest)
        assert state(pieces) == state(whole), num
    with pytest.raises(ValueError, match="split"):
        fastforward.split(stretch, stretch.num_iterations, 0)


@pytest.mark.parametrize(("model", "gpu", "tp", "vectorised"), [("mixtral-8x7b", "a100-80gb", 2, True),
                                                                ("gpt-oss-20b", "h100-sxm", 1, False),
                                                                ("deepseek-v3", "h200", 8, False)])
def test_stretch_pricing_of_moe_sliding_and_mla_models_is_exact(model: str, gpu: str, tp: int, vectorised: bool) -> None:
    """MoE decode attention is vectorised; sliding-window and MLA attention fall back to
    pricing each iteration (exact by construction): both give the scalar path's floats."""
    cost = RooflineCostModel(ReplicaConfig(model, gpu, tp=tp))
    for args in _stretches(2, max_n=64, max_kv=6000):
        assert cost.decode_stretch_times(*args) == CostModel.decode_stretch_times(cost, *args)
        assert (cost._vector_stretch(*args, cost.attention_decode_vector) is not None) == vectorised


def test_stretch_allocations_counted_in_a_loop_equal_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short stretches count their block allocations in plain Python, long ones with numpy."""
    rng = random.Random(5)
    for _ in range(200):
        bs = rng.choice([1, 4, 16])
        n, num = rng.randint(1, 40), rng.randint(1, 120)
        computed = [rng.randint(1, 3000) for _ in range(n)]
        held = [-(-c // bs) + rng.randint(0, 2) for c in computed]  # enough blocks, maybe spare ones
        firsts = [h * bs - c for c, h in zip(computed, held, strict=True)]
        monkeypatch.setattr(fastforward, "SMALL_ALLOCATIONS", 10**9)  # always the plain loop
        loop = fastforward._allocations(firsts, bs, num)
        monkeypatch.setattr(fastforward, "SMALL_ALLOCATIONS", -1)  # always numpy
        vector = fastforward._allocations(firsts, bs, num)
        assert loop == vector and len(loop) == num
        assert sum(loop) == sum(max(0, -(-(c + num) // bs) - h) for c, h in zip(computed, held, strict=True))


class _StopAt:
    """A watch that settles the replicas, reads nothing else and stops the run at ``at`` (as the capacity
    planner's ArrivalWatch may)."""

    reads_only_timestamps = True

    def __init__(self, at: float) -> None:
        self.at = at

    def watch_settle(self, settle) -> None:  # noqa: ANN001
        self.settle = settle

    def __call__(self, env, requests):  # noqa: ANN001, ANN204
        from simulator.simulation import StopRun

        yield env.timeout(self.at)
        self.settle(env.now)
        raise StopRun("stop")


def test_a_disaggregated_run_stopped_early_is_the_stepping_runs() -> None:
    """A stopped disaggregated run left its decode pools' lockstep requests with the counters they had when they
    joined: 1 token generated where the stepping run had 109, the first token at the prefill's time."""
    config = RunConfig(replica=ReplicaConfig(model="tiny-llama-1b", gpu="h100-sxm", max_model_len=1024),
                       scheduler=SchedulerConfig(name="vllm", prefix_caching=False),
                       workload=WorkloadConfig(name="fixed", arrival="burst", num_requests=2, prompt_tokens=64,
                                               output_tokens=200),
                       prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)")
    fields = ("num_generated", "num_computed", "num_blocks", "first_token_at", "last_token_at")
    runs = [simulate(config.replace(fast_forward=ff), watch=_StopAt(0.3), token_times=True) for ff in (False, True)]
    for plain, fast in zip(runs[0].requests, runs[1].requests, strict=True):
        assert [getattr(plain, f) for f in fields] == [getattr(fast, f) for f in fields]
        assert bytes(plain.token_times) == bytes(fast.token_times)
    # stopped mid-decode, neither before it nor after (how far in follows the default engine's handoff latency)
    assert 10 < runs[0].requests[0].num_generated < 200


def test_trtllm_skipping_admits_a_head_whose_cached_prefix_makes_it_fit(tmp_path, count_stretches: list[int]) -> None:
    """TensorRT-LLM counts a waiting prompt's cached prefix out of max_num_tokens (schedule()): the decode
    stretch's rule must too, or it skips past the step that admits the head (here request 2: 1,024 tokens
    of which block 0's 512 are cached, beside one decode under a 1,024-token budget, once request 0 ends;
    the rule counted 1,024 and held it for request 1's 290 more decodes: TTFT 3.57 s against 0.22 s)."""
    trace = tmp_path / "hashed.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 512, "output_length": 10, "hash_ids": [0]}\n'
                     '{"timestamp": 0, "input_length": 512, "output_length": 300, "hash_ids": [1]}\n'
                     '{"timestamp": 1, "input_length": 1024, "output_length": 10, "hash_ids": [0, 2]}\n')
    config = RunConfig(scheduler=SchedulerConfig(name="trtllm", max_num_seqs=2, max_num_batched_tokens=1024,
                                                 prefix_caching=True),
                       workload=WorkloadConfig(trace=str(trace), arrival="trace", num_requests=3))
    assert_same_run(config, count_stretches)
    assert sum(count_stretches) > 0  # the decodes around it were skipped
    ttft = request_frame(simulate(config)).set_index("request_id")["ttft_s"]
    assert ttft[2] < 0.5


def test_a_run_collects_garbage_less_often_and_puts_the_thresholds_back() -> None:
    """simulate() raises CPython's generation-0 collection threshold while it runs (simulator.util.collector:
    fewer collector passes, nothing computed differs) and leaves the thresholds as it found them, also when the
    run stops early."""
    import gc

    from simulator.simulation import StopRun
    from simulator.util.collector import GEN0_THRESHOLD

    seen = []

    def watch(env, requests):  # noqa: ANN001, ANN202
        seen.append(gc.get_threshold())
        yield env.timeout(5.0)
        raise StopRun("enough")

    config = RunConfig(replica=ReplicaConfig("llama-2-7b", "a100-80gb"),
                       workload=WorkloadConfig("sharegpt", arrival="poisson", qps=2.0, num_requests=50), seed=1)
    before = gc.get_threshold()
    try:
        gc.set_threshold(500, 7, 9)
        result = simulate(config, watch=watch)
        assert result.extra["stopped"] == "enough"
        assert seen == [(GEN0_THRESHOLD, 7, 9)]
        assert gc.get_threshold() == (500, 7, 9)
    finally:
        gc.set_threshold(*before)
