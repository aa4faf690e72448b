"""Drivers for engine tests that need a hand-sized KV cache or a fixed cost."""

from __future__ import annotations

import simpy

from simulator.config import ReplicaConfig, SchedulerConfig
from simulator.costmodel.base import BatchShape, CostModel
from simulator.costmodel.roofline import RooflineCostModel
from simulator.kvcache import BlockManager
from simulator.records import Recorder
from simulator.replica import Replica
from simulator.request import Request
from simulator.schedulers import SCHEDULERS


class ConstantCostModel(CostModel):
    """Every iteration takes ``seconds``, whatever the batch."""

    name = "constant"

    def __init__(self, replica: ReplicaConfig, seconds: float) -> None:
        super().__init__(replica)
        self.seconds = seconds

    def layer_time(self, shape: BatchShape) -> float:
        return 0.0

    def pre_time(self, shape: BatchShape) -> float:
        return 0.0

    def post_time(self, shape: BatchShape) -> float:
        return 0.0

    def overhead_time(self, shape: BatchShape) -> float:
        return self.seconds

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        return {"constant": self.seconds}


def run_requests(scheduler_name: str, specs: list[tuple[float, int, int]], *, num_blocks: int = 4096,
                 block_size: int = 16, max_model_len: int = 4096, cost: CostModel | None = None,
                 replica: ReplicaConfig | None = None, **sched_kwargs):
    """Simulate ``(arrival_at, prompt, output)`` specs on one replica with a KV cache of
    ``num_blocks``; return (requests, recorder, scheduler)."""
    replica = replica or ReplicaConfig("mistral-7b", "a100-80gb")
    env = simpy.Environment()
    recorder = Recorder()
    config = SchedulerConfig(scheduler_name, **sched_kwargs)
    scheduler = SCHEDULERS[scheduler_name](config, BlockManager(num_blocks, block_size, config.watermark), max_model_len)
    rep = Replica(env, 0, scheduler, cost or RooflineCostModel(replica), recorder)
    requests = [Request(i, a, p, o, token_times=True) for i, (a, p, o) in enumerate(specs)]
    submit_all(env, rep, requests)
    return requests, recorder, scheduler


def submit_all(env: simpy.Environment, replica: Replica, requests: list[Request]) -> None:
    """Submit ``requests`` to ``replica`` at their arrival times (as the engine's arrival
    process does) and run the environment to the end."""

    def arrivals():
        for req in requests:
            if req.arrival_at > env.now:
                yield env.timeout(req.arrival_at - env.now)
            req.arrival_at = env.now
            replica.submit(req)

    env.process(arrivals())
    env.run()
