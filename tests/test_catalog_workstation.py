"""Workstation and GeForce GPUs (RTX 4090, RTX 5090, RTX 6000 Ada, RTX A6000, L40): vLLM is often
benchmarked on them, and a run named one failed with 'unknown GPU'. Each is priced by its
architecture's 'today' roofline constants (fractions of its own spec-sheet peaks)."""

from __future__ import annotations

import pytest

from simulator.config.catalog import get_gpu
from simulator.config.prices import price_of
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel import RooflineCostModel
from simulator.costmodel.base import BatchShape
from simulator.costmodel.calibration import describe, today_generation


@pytest.mark.parametrize(("name", "alias", "generation"), [
    ("rtx-4090", "geforce-rtx-4090", "ada"), ("rtx-5090", "geforce-rtx-5090", "blackwell"),
    ("rtx-6000-ada", "rtx-6000-ada-generation", "ada"), ("rtx-a6000", "a6000", "ampere"), ("l40", "L40", "ada"),
])
def test_each_is_named_priced_by_its_generation_and_powered(name: str, alias: str, generation: str) -> None:
    gpu = get_gpu(alias)
    assert gpu.name == name and gpu.source and gpu.nvlink_domain_gpus == 0
    assert today_generation(name) == generation and generation in describe("today", name)
    assert price_of(name).max_w > 0  # energy estimates need the board power; no list price is claimed
    assert price_of(name).usd_per_gpu_hour is None


def _decode_step_s(gpu: str) -> float:
    km = RooflineCostModel(ReplicaConfig("llama-3.1-8b", gpu, max_model_len=8192),
                           calibration=None)
    return km.iteration_time(BatchShape.decode_only(16, 16 * 1024, 16 * 1024**2, 1024))


def test_a_decode_step_follows_memory_bandwidth() -> None:
    """16 decodes of an 8B model read its 16 GB of weights a step: memory-bound, so the RTX 5090's step
    is about its 1,792 / 1,008 GB/s faster than the RTX 4090's (both bf16 with FP32 accumulation,
    which GeForce parts run at half the FP16-accumulate rate)."""
    ratio = _decode_step_s("rtx-4090") / _decode_step_s("rtx-5090")
    assert 1.4 < ratio < 1.9
    assert get_gpu("rtx-4090").bf16_flops == pytest.approx(165.2e12)  # not the 330 TF of FP16 accumulation
