"""Scheduling policies. Adding one: a module with a :class:`Scheduler` subclass and one
line in :data:`SCHEDULERS`."""

from __future__ import annotations

from simulator.engine.schedulers.base import Batch, Scheduler
from simulator.engine.schedulers.fastertransformer import FasterTransformerScheduler
from simulator.engine.schedulers.orca import OrcaScheduler
from simulator.engine.schedulers.sarathi import SarathiScheduler
from simulator.engine.schedulers.sglang import SGLangScheduler
from simulator.engine.schedulers.trtllm import TRTLLMScheduler
from simulator.engine.schedulers.vllm import VLLMScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {
    "vllm": VLLMScheduler,
    "orca": OrcaScheduler,
    "fastertransformer": FasterTransformerScheduler,
    "sarathi": SarathiScheduler,
    "vllm-v1": SarathiScheduler,  # same policy, vLLM's default budget (SchedulerConfig.token_budget)
    "sglang": SGLangScheduler,
    "trtllm": TRTLLMScheduler,
}

__all__ = ["SCHEDULERS", "Batch", "Scheduler"]
