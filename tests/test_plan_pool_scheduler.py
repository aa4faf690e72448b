"""A plan's disaggregated pools run the plan's engine (``--scheduler``) where that engine deploys disaggregated pools.

Before, ``Layout.config`` wrote pools without ``sched=``, so under ``--scheduler sglang`` or ``trtllm`` they ran vLLM's
2023 policy and memory rules, beside aggregated layouts of the named engine, and the launch command started that
engine's servers for pools simulated as vLLM; ``--modes disagg --scheduler sglang`` was refused as doing nothing.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.disagg_layout import layout_of
from simulator.config.errors import ConfigError
from simulator.config.prices import price_of
from simulator.config.run_config import RunConfig
from simulator.config.schedulers import SCHEDULERS
from simulator.engine.kvcache import engine_block_size
from simulator.planning.launch import launch_command
from simulator.planning.plan import Candidate, Layout

UNIT = Layout("h100-sxm", "disagg", "bf16", 1, prefill_tp=1, num_prefill=2, num_decode=1, max_num_seqs=128)


def _base(scheduler: str) -> RunConfig:
    return RunConfig().replace(replica__model="llama-3.1-8b", replica__max_model_len=4096, scheduler__name=scheduler,
                               workload__name="sharegpt", workload__num_requests=32)


@pytest.mark.parametrize("scheduler", ["sglang", "trtllm", "vllm-v1"])
def test_a_disaggregated_layout_runs_the_plans_engine_in_both_pools(scheduler: str) -> None:
    """Its pools say sched=, and run that policy with its engine's memory basis and KV page. vllm-v1 too: the launch
    starts vLLM servers with a NIXL connector, which only vLLM's V1 engine runs (its pools ran V0's policy)."""
    base = _base(scheduler)
    config = UNIT.config(base, units=2)
    assert f"sched={scheduler}" in config.prefill_pool and f"sched={scheduler}" in config.decode_pool
    pools = layout_of(config)
    assert pools is not None and UNIT.scheduler(base) == scheduler
    entry = SCHEDULERS[scheduler]
    for replica, sched in ((pools.prefill_replica, pools.prefill_scheduler),
                           (pools.decode_replica, pools.decode_scheduler)):
        assert sched.name == scheduler
        assert sched.memory_basis(replica) == entry.memory_basis
        assert engine_block_size(replica, sched.name) == entry.block_size
    # The prefill pool caches as the engine does by default (SGLang's radix tree, TensorRT-LLM's block reuse).
    assert pools.prefill_scheduler.prefix_cache == entry.prefix_cache


def test_a_research_policys_plan_lays_its_pools_out_under_vllm() -> None:
    """sarathi is no engine that deploys disaggregated pools: its plan's pools run vllm, and say so."""
    base = _base("sarathi")
    pools = layout_of(UNIT.config(base))
    assert pools is not None and pools.prefill_scheduler.name == pools.decode_scheduler.name == "vllm"
    assert UNIT.scheduler(base) == "vllm"


def _fraction(line: str, engine: str) -> float:
    pattern = {"sglang": r"--mem-fraction-static ([\d.]+)", "trtllm": r'"free_gpu_memory_fraction": ([\d.]+)'}[engine]
    found = re.search(pattern, line)
    assert found is not None, line
    return float(found.group(1))


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_the_launch_starts_the_pools_the_plan_simulated(engine: str) -> None:
    """Each server of a plan under --scheduler sglang/trtllm gets its engine's own memory fraction (the pools were
    simulated with it): before, the fractions were converted from vLLM's 0.9 of total memory, the rule the pools
    ran by, and SGLang's prefill server was launched with another budget than SGLang's chunk."""
    base = _base(engine)
    lines = [ln for ln in launch_command(Candidate(UNIT, math.inf, price_of(UNIT.gpu)), base, engine)
             if "behind" not in ln]
    pools = layout_of(UNIT.config(base))
    assert pools is not None
    for line, replica, sched in zip(lines, (pools.prefill_replica, pools.decode_replica),
                                    (pools.prefill_scheduler, pools.decode_scheduler), strict=True):
        own, _ = sched.memory_fraction(replica)  # the engine's default fraction, on its own basis
        assert own - 1e-3 < _fraction(line, engine) <= own + 1e-9, (line, own)
    if engine == "sglang":  # SGLang's own chunk, which the prefill pool ran: no budget to tell the server
        assert "--max-prefill-tokens" not in lines[0] and "--chunked-prefill-size" not in lines[0]


PLAN = ["plan", "--model", "llama-3.1-8b", "--max-model-len", "4096", "--gpus", "h100-sxm", "--modes", "disagg",
        "--tps", "1", "--seqs", "128", "--ratios", "1:1", "--num-requests", "48", "--qps", "2", "--no-verify"]


def test_plan_modes_disagg_takes_scheduler_sglang_and_says_its_pools_run_it(tmp_path: Path) -> None:
    """Refused before ('--modes disagg searches only disaggregated pools, which run vllm'): the pools now run it."""
    res = CliRunner().invoke(app, [*PLAN, "--scheduler", "sglang", "--launch", "sglang", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    rows = pd.read_csv(tmp_path / "layouts.csv")
    assert len(rows) and set(rows["scheduler"]) == {"sglang"}
    info = json.loads((tmp_path / "plan.json").read_text())
    assert info["pool_scheduler"] == "sglang"
    assert json.loads((tmp_path / "answer.json").read_text())["answer"]["scheduler"] == "sglang"
    assert "--disaggregation-mode prefill" in res.output and "--disaggregation-mode decode" in res.output


def test_plan_modes_disagg_still_refuses_a_scheduler_that_no_pool_runs(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [*PLAN, "--scheduler", "sarathi", "--out", str(tmp_path)])
    err = res.exception
    assert isinstance(err, ConfigError) and err.field == "--scheduler", res.output
    # (it is read: the pools run vllm's, not the default's; it only runs in none of them)
    assert "which run vllm under --scheduler sarathi" in str(err) and "schedules no layout" in str(err)
    assert "would do nothing" not in str(err) and "add agg to --modes" in str(err)


def test_a_folder_whose_pools_ran_vllm_is_not_resumed_as_a_plan_of_the_engines_pools(tmp_path: Path) -> None:
    """The pools' scheduler is part of the plan's identity where it moved off vllm: a folder made when the
    pools of a --scheduler sglang plan ran vllm holds rows of other layouts under the same keys."""
    from simulator.config.disagg_layout import FALLBACK_POOL_SCHEDULER
    from simulator.planning.options import PlanSLO
    from simulator.planning.plan import plan_identity

    slo = PlanSLO(ttft_s=1.0, tpot_s=0.05, attainment=0.9)
    base = _base("sglang")
    then = base.result_key(load_qps=2.0, slo={"ttft_s": 1.0, "tpot_s": 0.05, "attainment": 0.9}, rel_tol=0.05)
    assert plan_identity(base, 2.0, slo, 0.05) != then
    vllm = _base(FALLBACK_POOL_SCHEDULER)  # whose pools ran vllm before and do now: its folders resume
    assert plan_identity(vllm, 2.0, slo, 0.05) == vllm.result_key(load_qps=2.0, slo=slo.__dict__, rel_tol=0.05)
