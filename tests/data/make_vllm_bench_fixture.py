"""Write ``vllm_bench_fixture.json``: a ``vllm bench serve --save-result --save-detailed``-shaped
result made by servesim itself (not a measurement, not a copied file).

Llama-2-7B on one A100-80GB, the vllm-v1 scheduler, 100 requests (prompts 128-1024, outputs
8-48 tokens) at 12 requests/s, under a synchronous engine that exposes 6 ms of CPU time per step
(the vllm-v1 preset's other terms), with 5% lognormal noise on every TTFT and inter-token gap.
``simulate calibrate-engine --bench`` should find about 6 ms.

    PYTHONPATH=. python tests/data/make_vllm_bench_fixture.py
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from simulator.calibrate.engine_fit import make_bench_fixture
from simulator.config.run_config import RunConfig
from simulator.costmodel.engine_model import ENGINES

CONFIG = RunConfig().replace(replica__model="llama-2-7b", scheduler__name="vllm-v1", workload__name="uniform",
                             workload__prompt_tokens=128, workload__prompt_tokens_max=1024,
                             workload__output_tokens=8, workload__output_tokens_max=48)
TRUTH = replace(ENGINES["vllm-v1"], name="fixture-truth", overlap_cpu=False, cpu_iteration_s=6e-3)

if __name__ == "__main__":
    data = make_bench_fixture(CONFIG, TRUTH, rate=12.0, num_requests=100, seed=0, noise=0.05)
    out = Path(__file__).with_name("vllm_bench_fixture.json")
    out.write_text(json.dumps(data) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
