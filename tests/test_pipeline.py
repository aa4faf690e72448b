"""Pipeline parallelism: stage processes, micro-batches in flight, emergent bubbles."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from helpers import ConstantCostModel

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig, WorkloadConfig
from simulator.costmodel.base import BatchShape
from simulator.engine.kvcache import BlockManager
from simulator.engine.pipeline import PipelinedReplica
from simulator.engine.records import Recorder
from simulator.engine.schedulers import SCHEDULERS
from simulator.report.metrics import summarize
from simulator.simulation import simulate
from simulator.workload.request import Request


class FixedStageCost(ConstantCostModel):
    """Stage ``s`` always takes ``stage_s[s]`` seconds; every hop takes ``hop_s``."""

    name = "fixed-stage"

    def __init__(self, replica: ReplicaConfig, stage_s: list[float], hop_s: float = 0.0) -> None:
        super().__init__(replica, seconds=sum(stage_s))
        self.stage_s = stage_s
        self.hop_s = hop_s

    def stage_time(self, shape: BatchShape, stage: int) -> float:
        return self.stage_s[stage]

    def send_recv_time(self, num_tokens: int, hop: int | None = None) -> float:
        return self.hop_s


def run_pipeline(stage_s: list[float], specs: list[tuple[float, int, int]], *, scheduler: str = "sarathi",
                 hop_s: float = 0.0, num_blocks: int = 8192, **sched_kwargs):
    """Drive one PipelinedReplica with a fixed-stage cost model. Checks, at every
    ``schedule()``, that fewer than pp micro-batches are in flight and that the new batch
    holds no request already in flight. Returns (requests, recorder, replica)."""
    pp = len(stage_s)
    replica_cfg = ReplicaConfig("llama-2-7b", "a100-80gb", pp=pp)
    config = RunConfig(replica=replica_cfg)
    env = simpy.Environment()
    recorder = Recorder()
    sched_cfg = SchedulerConfig(scheduler, **sched_kwargs)
    base = SCHEDULERS[scheduler]
    state: dict = {}

    class Checked(base):  # type: ignore[misc, valid-type]
        def schedule(self):
            rep = state["replica"]
            assert rep.num_in_flight < rep.pp
            busy = {r.request_id for r in self.running if r.in_flight}
            batch = super().schedule()
            assert not busy & {r.request_id for r in batch.requests}, "a request joined two micro-batches"
            assert len({r.request_id for r in batch.requests}) == len(batch.requests)
            return batch

    sched = Checked(sched_cfg, BlockManager(num_blocks, 16, sched_cfg.watermark), 4096)
    rep = PipelinedReplica(env, 0, sched, FixedStageCost(replica_cfg, stage_s, hop_s), recorder, config)
    state["replica"] = rep
    requests = [Request(i, a, p, o, token_times=True) for i, (a, p, o) in enumerate(specs)]

    def arrivals():
        for req in requests:
            if req.arrival_at > env.now:
                yield env.timeout(req.arrival_at - env.now)
            rep.submit(req)

    env.process(arrivals())
    env.run()
    return requests, recorder, rep


@pytest.mark.parametrize("stage_s", [[0.010, 0.010], [0.010, 0.025, 0.015], [0.030, 0.010, 0.010, 0.020]])
def test_identical_micro_batches_reach_the_analytical_steady_state(stage_s):
    # 64 requests, 16-token budget: every micro-batch is 16 decodes (or 16 prompt tokens),
    # and enough requests are never in flight that stage 0 always finds work.
    requests, recorder, rep = run_pipeline(stage_s, [(0.0, 16, 400)] * 64, chunk_size=16)
    assert all(r.num_generated == r.num_output_tokens for r in requests)
    done_at = np.sort([start + dur for _, start, dur, *_ in recorder.iterations])
    lo, hi = int(0.2 * len(done_at)), int(0.8 * len(done_at))
    throughput = (hi - lo) / (done_at[hi] - done_at[lo])  # micro-batches per second in steady state
    expected = 1.0 / max(stage_s)
    assert throughput == pytest.approx(expected, rel=0.02)
    # The slowest stage is (almost) never idle; the others idle for max - own per micro-batch.
    span = done_at[-1]
    slowest = int(np.argmax(stage_s))
    assert rep.stage_busy_s[slowest] / span > 0.97
    for s, t in enumerate(stage_s):
        assert rep.stage_busy_s[s] / span == pytest.approx(t / max(stage_s), abs=0.03)


def test_one_micro_batch_alone_runs_stages_back_to_back_with_hops():
    requests, recorder, _ = run_pipeline([0.010, 0.020, 0.005], [(0.0, 8, 1)], hop_s=0.004)
    rows = sorted(recorder.stages, key=lambda r: r[2])
    assert [r[2] for r in rows] == [0, 1, 2]
    for prev, nxt in zip(rows, rows[1:], strict=False):
        # The next stage starts exactly when the activations arrive: compute end + hop.
        assert nxt[3] == pytest.approx(prev[3] + prev[4] + 0.004)
    (_, started_at, duration, *_), = recorder.iterations
    assert started_at == 0.0 and duration == pytest.approx(0.010 + 0.020 + 0.005 + 2 * 0.004)
    # The token is emitted when the last stage finishes, not before.
    assert requests[0].token_times[0] == pytest.approx(rows[-1][3] + rows[-1][4])


def test_tokens_are_emitted_only_at_micro_batch_completion_and_stages_run_in_order():
    specs = [(0.003 * i, 40 + 7 * i, 5 + i % 9) for i in range(30)]
    requests, recorder, rep = run_pipeline([0.004, 0.006], specs, chunk_size=64)
    ends = {round(start + dur, 12) for _, start, dur, *_ in recorder.iterations}
    for req in requests:
        assert req.num_generated == req.num_output_tokens
        assert all(round(t, 12) in ends for t in req.token_times)
    # Each stage serves micro-batches in scheduling order, one at a time.
    for s in range(rep.pp):
        rows = [r for r in recorder.stages if r[2] == s]
        assert [r[1] for r in rows] == sorted(r[1] for r in rows)
        for a, b in zip(rows, rows[1:], strict=False):
            assert b[3] >= a[3] + a[4] - 1e-12
    assert rep.num_in_flight == 0


def _pp_config(scheduler: str, **workload) -> RunConfig:
    return RunConfig(replica=ReplicaConfig("llama-2-70b", "a40", tp=4, pp=2), scheduler=SchedulerConfig(scheduler),
                     workload=WorkloadConfig("sharegpt", **workload), seed=3)


def test_vllm_mixed_batches_make_larger_bubbles_than_sarathi():
    summaries, durations = {}, {}
    for name in ("vllm", "sarathi"):
        result = simulate(_pp_config(name, arrival="poisson", qps=4.0, num_requests=300))
        summaries[name] = summarize(result)
        stage0 = result.stage_frame().query("stage == 0")["duration_s"].to_numpy()
        durations[name] = stage0.std() / stage0.mean()
        assert summaries[name]["num_finished"] == 300
    vllm, sarathi = summaries["vllm"]["bubble_fraction_sum"], summaries["sarathi"]["bubble_fraction_sum"]
    # Cause: vLLM alternates prefill-only and decode-only micro-batches (non-uniform), Sarathi's
    # are budgeted; effect: the pipeline idles more under vLLM on the same workload.
    assert durations["vllm"] > 2 * durations["sarathi"]
    assert vllm > 1.5 * sarathi and vllm - sarathi > 0.15, (vllm, sarathi)


def test_pipeline_runs_are_deterministic_and_record_every_stage():
    config = _pp_config("sarathi", arrival="poisson", qps=2.0, num_requests=60)
    a, b = simulate(config), simulate(config)
    assert a.stages == b.stages and a.iterations == b.iterations
    assert len(a.stages) == 2 * len(a.iterations)
    frame = a.stage_frame()
    busy = frame.groupby("stage")["duration_s"].sum().to_numpy()
    assert busy == pytest.approx(a.stage_busy_s[0])
    s = summarize(a)
    assert s["bubble_fraction_sum"] == pytest.approx(sum(s["stage_bubble_fraction"][0]))
    assert all(0.0 <= x <= 1.0 for x in s["stage_bubble_fraction"][0])


def test_pp_layout_prices_an_inter_node_hop_above_an_intra_node_one():
    one_node = simulate(RunConfig(replica=ReplicaConfig("llama-2-13b", "a100-80gb", tp=2, pp=2),
                                  workload=WorkloadConfig("fixed", prompt_tokens=1024, output_tokens=4,
                                                          arrival="burst", num_requests=8)))
    two_nodes = simulate(RunConfig(replica=ReplicaConfig("llama-2-13b", "a100-80gb", tp=2, pp=2, num_nodes=2,
                                                         inter_node_link="ethernet-10g"),
                                   workload=WorkloadConfig("fixed", prompt_tokens=1024, output_tokens=4,
                                                           arrival="burst", num_requests=8)))
    # Same compute, slower wire: every micro-batch takes longer end to end.
    compute = [sum(r[4] for r in res.stages) for res in (one_node, two_nodes)]
    assert compute[0] == pytest.approx(compute[1])
    e2e = [sum(r[2] for r in res.iterations) for res in (one_node, two_nodes)]
    assert e2e[1] > e2e[0] + 0.01


@pytest.mark.parametrize(("pp", "num_nodes"), [(2, 1), (4, 2)])
def test_engine_terms_on_the_gpu_are_shared_by_each_stages_layers(pp: int, num_nodes: int) -> None:
    """Under PP each stage carries its layers' share of the engine's GPU-side terms (collective
    extras, prefill excess, the launch floor); the CPU work stays on stage 0, where the engine
    schedules and dispatches the step. At TP4 the collective extra is not zero (at TP2 it is,
    which hid stage 0 carrying all of it: 48.4 ms against 20.7 ms for a decode batch of 64)."""
    from simulator.costmodel import BatchShape, load_cost_model

    cost = load_cost_model("roofline", ReplicaConfig("llama-2-70b", "a100-80gb", tp=4, pp=pp, num_nodes=num_nodes),
                           "vllm-2023-splitwise")
    assert cost.collective_s > 0
    layers = cost.layers_per_stage
    num_layers = sum(layers)
    for shape in (BatchShape.from_requests(prefills=[(3000, 0)], decodes=[100] * 30),
                  BatchShape.from_requests(decodes=[1000] * 64)):
        gpu_extra = cost.collective_s + cost.prefill_excess_time(shape)
        layer, pre, post = cost.layer_time(shape), cost.pre_time(shape), cost.post_time(shape)
        for s in range(pp):
            kernels = layers[s] * layer + (pre if s == 0 else 0.0) + (post if s == pp - 1 else 0.0)
            gpu = max(kernels + gpu_extra * layers[s] / num_layers, cost.launch_s * layers[s] / num_layers)
            expected = gpu + cost.cpu_time(shape) if s == 0 else gpu  # a synchronous engine
            assert cost.stage_time(shape, s) == pytest.approx(expected, rel=1e-12)
        # Nothing lost or counted twice: the stages add up to the step without pipelining.
        assert sum(cost.stage_time(shape, s) for s in range(pp)) == pytest.approx(cost.iteration_time(shape), rel=1e-12)
