"""Lockstep decodes (simulator.fast.lockstep, simulator.fast.cohort): the same policy decisions and request state as stepping
each decode, checked on the policy alone (hand-driven schedule/complete, no SimPy) and on runs."""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import astuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.engine import cluster as engine
from simulator.engine.kvcache import BlockManager
from simulator.engine.schedulers import SCHEDULERS
from simulator.engine.tbt import GapLog, same_gaps
from simulator.fast import cohort as cohort_module
from simulator.fast.lockstep import lockstep_class
from simulator.fast.steady import rules_for
from simulator.planning.capacity import ArrivalWatch
from simulator.report.metrics import request_frame
from simulator.simulation import StopRun, simulate
from simulator.workload.request import Request, Status

FIELDS = ("num_computed", "num_generated", "num_blocks", "status", "num_preemptions", "first_token_at",
          "last_token_at", "max_tbt_s", "completed_at", "first_scheduled_at")


def _state(requests: list[Request]) -> list[tuple]:
    return [tuple(getattr(r, f) for f in FIELDS) + (bytes(r.token_times),) for r in requests]


def _shape(batch) -> tuple:  # noqa: ANN001
    return (*astuple(batch.shape), len(batch), len(batch.preempted), len(batch.admitted))


def _drive(name: str, lockstep: bool, specs: list[tuple[int, int, int]], num_blocks: int, budget: int,
           settle_every: int, seed: int) -> tuple[list[tuple], list[list[tuple]], list]:
    """Hand-drive a policy: requests arrive at given steps, iteration ``i`` ends at a time drawn
    from ``seed``; returns the per-iteration batch shapes, the request states after every
    ``settle_every``-th iteration (settling the cohort there) and the gap log."""
    kwargs = {"chunk_size": budget} if name in ("sarathi", "sglang") else {}
    if name == "trtllm":  # whole prompts: a budget that holds some of them and refuses others
        kwargs = {"max_num_batched_tokens": budget * 16}
    config = SchedulerConfig(name, **kwargs)
    cls = lockstep_class(SCHEDULERS[name]) if lockstep else SCHEDULERS[name]
    scheduler = cls(config, BlockManager(num_blocks, 16, config.watermark), 4096)
    if lockstep:
        assert scheduler.cohort is not None
    requests = [Request(i, float(step), p, o, token_times=True) for i, (step, p, o) in enumerate(specs)]
    rng = random.Random(seed)
    now, shapes, states = 0.0, [], []
    pending = sorted(requests, key=lambda r: r.arrival_at)
    for step in range(5000):
        while pending and pending[0].arrival_at <= step:
            req = pending.pop(0)
            if scheduler.rejection_reason(req) is None:
                scheduler.add_request(req)
            else:
                req.status = Status.REJECTED
        if not scheduler.has_unfinished() and not pending:
            break
        batch = scheduler.schedule()
        if not batch:
            continue
        shapes.append(_shape(batch))
        now += rng.choice([0.01, 0.02, 0.013, 0.5])  # repeated values: equal gaps, as in real runs
        scheduler.complete(batch, now)
        if settle_every and step % settle_every == 0:
            scheduler.settle()
            states.append(_state(requests))
    scheduler.settle()
    states.append(_state(requests))
    return shapes, states, [scheduler.gaps]


specs_strategy = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 700), st.integers(1, 300)),
                          min_size=1, max_size=40)


@settings(max_examples=120, deadline=None)
@given(specs=specs_strategy, num_blocks=st.integers(60, 400), budget=st.sampled_from([16, 64, 512]),
       settle_every=st.sampled_from([0, 1, 7]), seed=st.integers(0, 3),
       name=st.sampled_from(["sarathi", "vllm", "orca", "fastertransformer", "sglang", "trtllm"]))
def test_lockstep_decodes_match_stepping_each_decode(specs, num_blocks, budget, settle_every, seed, name) -> None:  # noqa: ANN001
    """Same batches (shape sums, sizes, preemptions, admissions), same request state whenever
    settled, same gaps: in roomy and tight caches (preemptions), with small budgets (decodes
    cut by the budget) and settling at every step or never."""
    plain = _drive(name, False, specs, num_blocks, budget, settle_every, seed)
    lock = _drive(name, True, specs, num_blocks, budget, settle_every, seed)
    assert lock[0] == plain[0]
    assert lock[1] == plain[1]
    assert same_gaps(lock[2], plain[2])


def _check_chunk_steady(specs: list[tuple[int, int, int]], num_blocks: int, budget: int, seed: int, name: str) -> int:
    """Drive the policy with lockstep; whenever it says a prompt's chunking is steady, check the
    next batch against that. Returns how many batches were checked."""
    config = SchedulerConfig(name, chunk_size=budget)
    scheduler = lockstep_class(SCHEDULERS[name])(config, BlockManager(num_blocks, 16, config.watermark), 4096)
    chunk_rule = rules_for(scheduler).chunk
    requests = sorted((Request(i, float(step), p, o) for i, (step, p, o) in enumerate(specs)), key=lambda r: r.arrival_at)
    rng = random.Random(seed)
    now, num_checked = 0.0, 0
    for step in range(5000):
        while requests and requests[0].arrival_at <= step:
            req = requests.pop(0)
            if scheduler.rejection_reason(req) is None:
                scheduler.add_request(req)
        if not scheduler.has_unfinished() and not requests:
            break
        steady = chunk_rule(scheduler)
        if steady is not None:
            prefill, chunk = steady
            missing = prefill.num_prompt_tokens + prefill.num_generated - prefill.num_computed
            num_decodes = sum(1 for r in scheduler.running if r.num_generated
                              and r.num_prompt_tokens + r.num_generated - r.num_computed == 1)
        batch = scheduler.schedule()
        if steady is not None and not batch.preempted:
            num_checked += 1
            assert 0 < chunk < missing and chunk == scheduler.token_budget - num_decodes
            assert batch.requests == [prefill] and batch.num_tokens == [chunk]
            assert batch.num_lockstep == num_decodes and not batch.admitted
        if not batch:
            continue
        now += rng.choice([0.01, 0.02, 0.5])
        scheduler.complete(batch, now)
    return num_checked


@settings(max_examples=80, deadline=None)
@given(specs=specs_strategy, num_blocks=st.integers(60, 400), budget=st.sampled_from([16, 64, 512]),
       seed=st.integers(0, 3), name=st.sampled_from(["sarathi", "vllm-v1"]))
def test_chunk_steady_predicts_the_next_batch(specs, num_blocks, budget, seed, name) -> None:  # noqa: ANN001
    """Whenever the policy says a prompt's chunking is steady, the next batch is exactly the
    running decodes in lockstep plus that chunk, admitting nobody, unless a preemption
    intervened (running short of blocks ends a stretch: event skipping counts them first);
    in roomy and tight caches, with requests waiting behind the chunk."""
    _check_chunk_steady(specs, num_blocks, budget, seed, name)


def test_chunk_steady_arises_with_long_prompts_and_a_small_budget() -> None:
    specs = [(i, 300 + 97 * (i % 5), 20 + 11 * (i % 4)) for i in range(0, 60, 3)]
    assert _check_chunk_steady(specs, 400, 64, 0, "sarathi") > 50


def test_lockstep_advances_decodes_without_visiting_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy replica: most iterations carry a prefill chunk and many decodes. With lockstep the
    cohort takes those decodes (visiting only requests outside it), and the run is unchanged."""
    joins: list[int] = []
    real_join = cohort_module.DecodeCohort.join
    monkeypatch.setattr(cohort_module.DecodeCohort, "join", lambda self, req: (joins.append(1), real_join(self, req)))
    config = RunConfig(replica=ReplicaConfig("mistral-7b", "a100-80gb"), scheduler=SchedulerConfig("sarathi", chunk_size=512),
                       workload=WorkloadConfig("sharegpt", arrival="poisson", qps=2.0, num_requests=300), seed=2)
    on = simulate(config, token_times=True)
    off = simulate(config.replace(fast_forward=False), token_times=True)
    assert request_frame(on).equals(request_frame(off))
    assert on.iteration_frame().equals(off.iteration_frame())
    assert [bytes(r.token_times) for r in on.requests] == [bytes(r.token_times) for r in off.requests]
    assert same_gaps(on.tbt, off.tbt)
    decode_tokens = int(on.iteration_frame()["num_decode_tokens"].sum())
    assert 0 < len(joins) < decode_tokens / 20  # a decode joins once, not once per token


class _StopAt(ArrivalWatch):
    """Stops the run at a fixed time; reads nothing, as an ArrivalWatch may (timestamps only)."""

    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self, env, requests):  # noqa: ANN001, ANN204
        yield env.timeout(self.at)
        raise StopRun(f"stopped at {self.at}")


@pytest.mark.parametrize(("engine", "stop_at"), [("vllm-2023-splitwise", 30.0), ("vllm-2026", 30.0), ("vllm-2026", 17.3)])
def test_a_run_stopped_by_a_watch_leaves_true_counters(monkeypatch: pytest.MonkeyPatch, engine: str,
                                                       stop_at: float) -> None:
    """A watch that reads only timestamps keeps lockstep on; the requests still running when it
    stops the run are settled: their counters, blocks and token times are those of stepping,
    also where the stop falls inside a skipped stretch (the vllm-2026 cases: the part of the
    stretch that ended is applied and the iteration in progress scheduled, Replica.stop)."""
    steps: list[int] = []
    real_step = cohort_module.DecodeCohort.step
    monkeypatch.setattr(cohort_module.DecodeCohort, "step", lambda self, *a: (steps.append(1), real_step(self, *a))[1])
    config = RunConfig(replica=ReplicaConfig("mistral-7b", "a100-80gb"), scheduler=SchedulerConfig("sarathi", chunk_size=256),
                       workload=WorkloadConfig("sharegpt", arrival="poisson", qps=3.0, num_requests=200), seed=4,
                       engine=engine)
    on = simulate(config, watch=_StopAt(stop_at), token_times=True)
    assert steps
    steps.clear()
    off = simulate(config.replace(fast_forward=False), watch=_StopAt(stop_at), token_times=True)
    assert not steps  # stepping: no cohort
    assert "stopped" in on.extra and on.extra == off.extra
    running = [r for r in on.requests if r.status is Status.RUNNING]
    assert running and any(r.num_generated > 1 for r in running)
    assert _state(on.requests) == _state(off.requests)
    assert [r.num_blocks for r in on.requests] == [r.num_blocks for r in off.requests]


def test_a_watch_that_may_read_counters_turns_lockstep_off(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[bool] = []
    real = engine.build_scheduler

    def spy(config, lockstep=None, replica_id=0):  # noqa: ANN001, ANN202
        built.append(lockstep is not None)
        return real(config, lockstep, replica_id)

    monkeypatch.setattr(engine, "build_scheduler", spy)
    config = RunConfig(workload=WorkloadConfig("sharegpt", num_requests=30))

    def watch(env, requests):  # noqa: ANN001, ANN202
        yield env.timeout(1.0)

    simulate(config, watch=watch)
    simulate(config, watch=_StopAt(math.inf))
    simulate(config.replace(replica=dataclasses.replace(config.replica, pp=2)))
    assert built == [False, True, False]


@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 14), st.integers(2, 60)), min_size=1, max_size=8),
       st.lists(st.integers(1, 9), min_size=1, max_size=6))
@settings(max_examples=60, deadline=None)
def test_cohort_counts_every_members_block_allocations(members, stretches) -> None:  # noqa: ANN001
    """The allocation ring (and the far members waiting for it) give the blocks each member
    needs before each step: single steps and stretches, members finishing on the way, some
    holding blocks several periods ahead (as max-length reservations do)."""
    bs = 4
    blocks = BlockManager(10_000, bs)
    gaps = GapLog()
    requests = []
    for i, (computed, extra_slots, output) in enumerate(members):
        req = Request(i, 0.0, computed, output)
        req.num_computed, req.num_generated, req.status = computed, 1, Status.RUNNING
        req.num_blocks = -(-computed // bs) + extra_slots // bs  # a block for every 4 slots ahead
        req.last_token_at = 0.0
        requests.append(req)
    cohort = cohort_module.DecodeCohort(bs)
    cohort.activate(requests)
    cohort.join_loose()
    first = {r.request_id: r.num_blocks * bs - r.num_computed for r in requests}
    finish = {r.request_id: r.num_output_tokens - r.num_generated for r in requests}  # steps to its last token

    def expected(tick: int, num: int) -> list[int]:
        return [sum(1 for rid in first if tick + i < finish[rid] and tick + i >= first[rid]
                    and (tick + i - first[rid]) % bs == 0) for i in range(num)]

    now = 0.0
    for length in stretches * 3:
        tick = cohort.tick
        if not cohort.members:
            break
        horizon = min(finish[rid] for rid in first if finish[rid] > tick) - tick
        assert cohort.allocations(horizon) == expected(tick, horizon)  # up to the first finish, as a stretch asks
        k = min(length, horizon)
        if k >= 2:  # a stretch of k steps, as event skipping advances it
            ends = [now + 0.5 * j for j in range(k + 1)]
            cohort.advance(ends, gaps)
            now = ends[-1]
        else:
            assert cohort.num_due() == expected(tick, 1)[0]
            cohort.begin_step(blocks)
            now += 0.5
            cohort.step(now, gaps)
        for rid in [rid for rid in first if finish[rid] <= cohort.tick]:
            del first[rid]


@pytest.mark.parametrize(("decode_pool", "workload", "num_gpu_blocks"), [
    ("2x(sched=sarathi)", dict(arrival="poisson", qps=6.0), None),
    ("1x(sched=vllm,seqs=64)", dict(arrival="burst", concurrency=48), None),
    ("1x(sched=sarathi)", dict(arrival="poisson", qps=8.0), 900),  # a small decode cache: preemptions
])
def test_disaggregated_decode_pools_take_lockstep_with_the_same_results(monkeypatch: pytest.MonkeyPatch, decode_pool: str,
                                                                        workload: dict, num_gpu_blocks: int | None) -> None:
    """A decode pool's class (DecodeMixin over a policy) runs lockstep decodes: handed-off
    requests join the cohort's loose requests, and every request, token time, gap and handoff
    is what stepping each decode gives."""
    joins: list[int] = []
    real_join = cohort_module.DecodeCohort.join
    monkeypatch.setattr(cohort_module.DecodeCohort, "join", lambda self, req: (joins.append(1), real_join(self, req)))
    config = RunConfig(replica=ReplicaConfig("llama-2-7b", "a100-80gb", num_gpu_blocks=num_gpu_blocks),
                       workload=WorkloadConfig("sharegpt", num_requests=200, **workload), seed=3).replace(
        prefill_pool="1x", decode_pool=decode_pool)
    on = simulate(config, token_times=True)
    off = simulate(config.replace(fast_forward=False), token_times=True)
    assert request_frame(on).equals(request_frame(off))
    assert on.disagg.handoff.frame().equals(off.disagg.handoff.frame())
    assert [bytes(r.token_times) for r in on.requests] == [bytes(r.token_times) for r in off.requests]
    assert same_gaps(on.tbt, off.tbt)
    assert joins  # the decode pool's cohort carried decodes
    if num_gpu_blocks is not None:
        assert request_frame(on)["num_preemptions"].sum() > 0


def test_sglang_with_a_recv_interval_is_the_same_with_fast_paths_on_and_off() -> None:
    """The intake interval counts the policy's iterations: lockstep keeps every schedule() call and
    event skipping stays off, so runs match stepping each decode."""
    config = RunConfig(replica=ReplicaConfig("llama-2-7b", "a100-80gb"),
                       scheduler=SchedulerConfig("sglang", recv_interval=4),
                       workload=WorkloadConfig("sharegpt", arrival="poisson", qps=2.0, num_requests=200), seed=5)
    on = simulate(config, token_times=True)
    off = simulate(config.replace(fast_forward=False), token_times=True)
    assert request_frame(on).equals(request_frame(off))
    # Below saturation (at 4 req/s this GPU's queue grows for seconds and the poll's wait drowns in it),
    # requests wait for a poll.
    plain = simulate(config.replace(scheduler__recv_interval=1), token_times=True)
    assert request_frame(on)["ttft_s"].mean() > request_frame(plain)["ttft_s"].mean()


@settings(max_examples=60, deadline=None)
@given(specs=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 200), st.integers(1, 400)), min_size=1, max_size=25),
       name=st.sampled_from(["sglang", "sarathi"]))
def test_remaining_outputs_from_the_cohort_are_the_requests(specs, name) -> None:  # noqa: ANN001
    """What a policy predicting its memory reads of its running requests (their outputs still to come, each
    clipped; SGLang's admission): the cohort's members answer from their finish steps what the stepping
    scheduler's requests say, clipped below and above the outputs left; and the blocks their next decodes take
    (SGLang's retraction check) from their block phases."""
    config = SchedulerConfig(name, chunk_size=64)
    plain = SCHEDULERS[name](config, BlockManager(400, 16, config.watermark), 4096)
    lock = lockstep_class(SCHEDULERS[name])(config, BlockManager(400, 16, config.watermark), 4096)
    arrivals = [[Request(i, float(step), p, o) for i, (step, p, o) in enumerate(specs)] for _ in range(2)]
    for step in range(3000):
        for scheduler, requests in zip((plain, lock), arrivals, strict=True):
            for req in requests:
                if req.arrival_at == step and scheduler.rejection_reason(req) is None:
                    scheduler.add_request(req)
        for clip in (1, 7, 50, 4096):
            assert lock.remaining_outputs(clip) == plain.remaining_outputs(clip)
        assert lock.new_decode_blocks() == plain.new_decode_blocks()
        if not plain.has_unfinished() and step > 30:
            break
        for scheduler in (plain, lock):
            batch = scheduler.schedule()
            if batch:
                scheduler.complete(batch, step + 1.0)
    assert not lock.has_unfinished()


def test_sglang_checks_its_decode_memory_without_dissolving_the_cohort(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang checks, before each decode step where fewer blocks are free than requests run, whether the step's
    blocks fit: mostly they do and nobody is retracted; the cohort answers that without dissolving (it is
    dissolved only where a retraction follows), and runs stay those of stepping each decode."""
    calls = {"kept": 0, "retracted": 0}
    real_retract = SCHEDULERS["sglang"]._retract

    def retract(self, batch) -> bool:  # noqa: ANN001
        cohort = getattr(self, "cohort", None)
        active = cohort is not None and cohort.active
        retracted = real_retract(self, batch)
        if active:
            if retracted:
                calls["retracted"] += 1
            else:
                calls["kept"] += 1
                assert cohort.active  # nobody retracted: the cohort carries on
        return retracted

    monkeypatch.setattr(SCHEDULERS["sglang"], "_retract", retract)
    config = RunConfig(replica=ReplicaConfig("llama-2-7b", "a100-80gb", num_gpu_blocks=1000),
                       scheduler=SchedulerConfig("sglang"),
                       workload=WorkloadConfig("fixed", prompt_tokens=1024, output_tokens=1024, num_requests=100,
                                               concurrency=64), seed=1)
    on = simulate(config, token_times=True)
    off = simulate(config.replace(fast_forward=False), token_times=True)
    assert request_frame(on).equals(request_frame(off))
    assert [bytes(r.token_times) for r in on.requests] == [bytes(r.token_times) for r in off.requests]
    assert same_gaps(on.tbt, off.tbt)
    assert calls["kept"] and calls["retracted"]
