"""CLI fuzzing, round 6: flags accepted where nothing reads them, and one traceback.

Each case was found by probing every subcommand: a traceback (calibrate-engine on an iteration table
with a header and no rows), a wrong answer (a rate search under a cap on requests in flight passed
every rate: capacity --qps 1 --concurrency 4 reported the search's ceiling), or a value that changed
nothing (a sweep grid key no point reads: its points differed in one column and nothing else; qps in a
capacity sweep's grid, which only moves where each search starts). Now each is one line naming the
field, exit code 2; the valid neighbours still run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from helpers import one_line_error, simulate_module

from simulator.calibrate.engine_fit import check_iteration_table
from simulator.config.errors import ConfigError
from simulator.planning.sweep import build_spec

ROOT = Path(__file__).resolve().parents[1]
ITERATION_HEADER = "tp,num_prefills,prefill_tokens,num_decodes,decode_context,measured_s"


def simulate(*args: str) -> subprocess.CompletedProcess:
    return simulate_module(*args, cwd=ROOT)


def test_calibrate_engine_refuses_a_table_without_rows(tmp_path: Path) -> None:
    table = tmp_path / "table.csv"
    table.write_text(ITERATION_HEADER + "\n")
    line = one_line_error(simulate("calibrate-engine", "--out", str(tmp_path / "engine.json"), "--table", str(table)))
    assert line.startswith("error: table: has a header but no rows"), line
    assert not (tmp_path / "engine.json").exists()
    rows = [f"1,1,{256 * i},{4 * i},500,0.0{i + 1}" for i in range(1, 9)]  # the fit's least: 8 rows
    table.write_text("\n".join([ITERATION_HEADER, *rows]) + "\n")
    assert len(check_iteration_table(pd.read_csv(table), "llama-2-7b", "a100-80gb")) == 8


@pytest.mark.parametrize(("grid", "base", "needle"), [
    ({"chunk_size": [256, 512]}, {"scheduler": "orca"}, "orca does not split prompts into chunks"),
    ({"cv": [1.0, 2.0]}, {}, "--arrival is poisson, not gamma"),
    ({"kv_link": ["infiniband-200g", "infinite"]}, {}, "the run is not disaggregated"),
])
def test_a_sweep_refuses_a_grid_key_no_point_reads(grid: dict, base: dict, needle: str) -> None:
    key = next(iter(grid))
    with pytest.raises(ConfigError) as err:
        build_spec({"base": {"num_requests": 5, **base}, "grid": grid})
    assert err.value.field == f"sweep.grid.{key}" and needle in err.value.problem
    assert "nothing else" in err.value.problem


def test_a_grid_key_that_some_point_reads_is_kept() -> None:
    spec = build_spec({"base": {"num_requests": 5},
                       "grid": {"chunk_size": [256, 512], "scheduler": ["orca", "sarathi"]}})
    assert len(spec.points) == 4
    spec = build_spec({"base": {"num_requests": 5, "arrival": "gamma"}, "grid": {"cv": [1.0, 2.0]}})
    assert len(spec.points) == 2


def test_a_capacity_sweep_refuses_qps_in_its_grid() -> None:
    with pytest.raises(ConfigError, match="searches the rate itself") as err:
        build_spec({"mode": "capacity", "grid": {"qps": [1.0, 2.0]}})
    assert err.value.field == "sweep.grid.qps"
    assert len(build_spec({"mode": "run", "base": {"num_requests": 5}, "grid": {"qps": [1.0, 2.0]}}).points) == 2


def test_link_flags_are_refused_where_no_communication_crosses_nodes() -> None:
    """--inter-node-link on a GB200 replica inside its NVL72 domain, and --allow-tp-across-nodes where every
    TP group fits a node, changed nothing (identical results) and were accepted; where the link is crossed
    they are read."""
    from simulator.config.options import inert_options
    from simulator.config.run_config import RunConfig

    def inert(**changes: object) -> dict:
        return inert_options(RunConfig().replace(**{f"replica__{k}": v for k, v in changes.items()}))

    assert "inter_node_link" in inert(gpu="gb200", num_nodes=2, pp=2)  # NVLink across the rack's trays
    assert "inter_node_link" not in inert(gpu="h100-sxm", num_nodes=2, pp=2)  # the hop crosses the NICs
    assert "allow_tp_across_nodes" in inert(gpu="h100-sxm", num_nodes=2, pp=2, tp=2)
    spanning = inert(gpu="h100-sxm", model="llama-3.1-70b", num_nodes=2, tp=16, allow_tp_across_nodes=True)
    assert "allow_tp_across_nodes" not in spanning and "inter_node_link" not in spanning
    line = one_line_error(simulate("run", "--num-requests", "4", "--gpu", "gb200", "--nodes", "2", "--pp", "2",
                                   "--inter-node-link", "infiniband-400g", "--no-progress"))
    assert line.startswith("error: --inter-node-link: the replica's 2 nodes are one NVLink domain of gb200"), line


def test_run_refuses_goodput_slos_its_vllm_view_does_not_show() -> None:
    line = one_line_error(simulate("run", "--num-requests", "4", "--no-progress", "--metrics", "vllm",
                                   "--ttft-slo", "0.01"))
    assert line.startswith("error: --ttft-slo: --metrics vllm prints vllm bench serve's result block"), line
    assert "--goodput" in line


@pytest.mark.parametrize("flags", [["--kv-link", "infinite"], ["--first-token-at", "prefill"]])
def test_plan_refuses_disaggregation_flags_when_it_searches_no_disaggregated_layout(flags: list[str]) -> None:
    line = one_line_error(simulate("plan", "--qps", "1", "--gpus", "a100-80gb", "--tps", "1", "--modes", "agg",
                                   "--num-requests", "20", "--no-verify", *flags))
    assert line.startswith(f"error: {flags[0]}: it applies to disaggregated layouts"), line
    assert "add disagg to --modes" in line


@pytest.mark.parametrize(("args", "needle"), [
    (["--num-decodes", "10", "--max-num-seqs", "4"], "--num-decodes: 10 decodes exceed the 4 sequences"),
    (["--num-decodes", "10", "--decode-context", "1000", "--chunk-context", "500", "--workload", "arxiv"],
     "--workload: --num-decodes, --decode-context and --chunk-context give the whole batch"),
    (["--scheduler", "orca"], "--scheduler: tau is the token budget of a step that chunks a prompt"),
])
def test_tau_refuses_what_it_would_not_read(args: list[str], needle: str) -> None:
    """tau priced 10 decodes under a cap of 4, the same batch whatever workload or seed once the batch
    was given (its title naming the workload), and the same chunked step under a scheduler that never
    chunks."""
    line = one_line_error(simulate("tau", *args))
    assert line.startswith(f"error: {needle}"), line


def test_tau_says_when_the_batch_is_given() -> None:
    res = simulate("tau", "--num-decodes", "10", "--decode-context", "1000", "--chunk-context", "500", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["mix_source"] == "the batch as given"


def test_a_learned_artifact_refuses_formats_its_curves_were_not_timed_in() -> None:
    """A fitted artifact's curves were timed on 16-bit kernels: --dtype fp8 beside one moved TBT by under 1%
    (the roofline: 30%), only the memory changed. Refused where a learned curve would price it; an op the
    artifact leaves to the roofline prices either format."""
    from simulator.config.run_config import ReplicaConfig
    from simulator.costmodel.learned import LearnedCostModel

    base = {"model": "llama-2-7b", "tp": 1, "gpu": "h100-sxm", "dtype_bytes": 2}
    fp8 = ReplicaConfig("llama-2-7b", "h100-sxm", dtype="fp8")
    with pytest.raises(ConfigError, match="fitted on 16-bit kernels, and the run's weights are fp8") as err:
        LearnedCostModel(fp8, {**base, "curves": {"mlp_down": {}}})
    assert err.value.field == "--dtype"
    fp8_kv = ReplicaConfig("llama-2-7b", "h100-sxm", kv_cache_dtype="fp8")
    with pytest.raises(ConfigError, match="over a 16-bit KV cache") as err:
        LearnedCostModel(fp8_kv, {**base, "curves": {}, "attn_decode": {}})
    assert err.value.field == "--kv-cache-dtype"
    # Curves of element-wise ops only, decode attention left to the roofline: both formats are priced.
    kept = LearnedCostModel(fp8_kv, {**base, "curves": {}})
    assert kept.decode is None


def test_disagg_split_names_its_own_flag_for_a_bad_first_rate() -> None:
    """It said 'pass --qps > 0', a flag split refuses."""
    line = one_line_error(simulate("disagg", "split", "--qps-start", "0", "--num-requests", "10"))
    assert line.startswith("error: --qps-start: must be a rate in [0.001, 1e+06]"), line
