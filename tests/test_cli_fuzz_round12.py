"""CLI fuzzing, round 12: three tracebacks (an unknown scheduler in the prefill pool, negative seeds of
calibrate-engine and profile) and a speculative-config key that did nothing (an n-gram drafter's quantization),
each now a one-line error naming the field and the fix; a rejection reason over a token budget kept its budget.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def one_line_error(*args: str) -> str:
    """``simulate ARGS``'s stderr, checked to be one ``error:`` line with exit 2 and nothing on stdout."""
    proc = subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (proc.returncode, proc.stderr)
    return lines[0]


def test_an_unknown_scheduler_in_the_prefill_pool_is_one_line() -> None:
    """It was a KeyError from the prefill pool's prefix-cache lookup (the decode and mixed pools said it)."""
    line = one_line_error("run", "--num-requests", "8", "--no-progress", "--prefill-pool", "1x(tp=1,sched=nope)",
                          "--decode-pool", "1x(tp=1)")
    assert "prefill_pool (scheduler): unknown scheduler 'nope'" in line and "sglang" in line


def test_negative_seeds_are_refused_in_one_line(tmp_path: Path) -> None:
    """numpy's generators take no seed below 0: calibrate-engine's --fit-seed and profile's --seed raised its
    ValueError."""
    table = tmp_path / "t.csv"
    table.write_text("a,b\n1,2\n")
    line = one_line_error("calibrate-engine", "--table", str(table), "--out", str(tmp_path / "x.json"), "--fit-seed", "-1")
    assert "--fit-seed: must be >= 0, got -1" in line
    pytest.importorskip("torch")
    from profiler.runner import ProfileConfig
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="--seed: must be >= 0, got -1"):
        ProfileConfig(model="tiny-llama-1b", out=tmp_path, ops=("attention",), seed=-1)


def test_split_with_ep_and_no_attention_dp_says_why_and_how() -> None:
    """disagg split builds its base config at tp 1 before its layouts take --tps: --ep 2 alone was refused as
    'must divide tp=1, use --ep equal to --tp', a flag split refuses; it now says so and gives the two ways."""
    line = one_line_error("disagg", "split", "--model", "mixtral-8x7b", "--ep", "2", "--gpus", "4", "--tps", "2")
    assert "--ep: disagg split sets each layout's TP from --tps" in line and "(tp 1)" in line
    from simulator.config.options import build_config
    from simulator.config.run_config import ReplicaConfig, RunConfig

    for replica in (ReplicaConfig("mixtral-8x7b", "a100-80gb", tp=2), ReplicaConfig("mixtral-8x7b", "a100-80gb",
                                                                                      attention_dp=2)):
        # a --config whose TP or attention DP holds the EP runs (the first form of the check refused it)
        assert build_config(command="split", base=RunConfig(replica=replica), ep=2).replica.ep == 2


def test_a_traces_lengths_are_named_as_the_trace(shared_data: Path) -> None:
    """A band of fixed lengths beside a trace named the default workload ('sharegpt') and sent the user to
    --workload fixed, which a trace refuses."""
    trace = shared_data / "traces" / "mooncake" / "conversation_trace.jsonl"
    line = one_line_error("run", "--trace", str(trace), "--range-ratio", "0.2", "--num-requests", "5", "--no-progress")
    assert f"the workload is the trace {trace}" in line and "--workload fixed" not in line


def test_a_capacity_ceiling_at_or_below_the_floor_names_the_ceiling() -> None:
    """--max-qps 0 named capacity.min_qps and asked for a --min-qps (the flag not given)."""
    from simulator.config.errors import ConfigError
    from simulator.planning.options import SearchSettings

    with pytest.raises(ConfigError, match=r"capacity.max_qps: must be above --min-qps 0.01, got 0 "):
        SearchSettings(max_qps=0.0)
    with pytest.raises(ConfigError, match="capacity.min_qps"):  # the floor itself off: the floor named
        SearchSettings(min_qps=1e-16)
    with pytest.raises(ConfigError, match="capacity.min_qps"):  # a floor above the default ceiling: the floor named
        SearchSettings(min_qps=5000.0)


def test_tau_says_which_fields_of_a_config_it_does_not_read(tmp_path: Path) -> None:
    """tau --config priced a run's saved config with its replicas, request count or budget and said nothing (the same
    values as flags are refused); it now names them, in the table's output and the JSON's."""
    import json

    from typer.testing import CliRunner

    from simulator.cli.app import app
    from simulator.config.run_config import RunConfig, SchedulerConfig

    path = tmp_path / "config.json"
    path.write_text(json.dumps(RunConfig(num_replicas=2, scheduler=SchedulerConfig("sarathi", chunk_size=512)).to_dict()))
    res = CliRunner().invoke(app, ["tau", "--config", str(path)])
    assert res.exit_code == 0, res.output
    assert "note: the config's chunk_size, replicas do nothing here" in " ".join(res.output.split())
    res = CliRunner().invoke(app, ["tau", "--config", str(path), "--json"])
    assert json.loads(res.output)["unread_config_fields"] == ["chunk_size", "replicas"]
    path.write_text(json.dumps(RunConfig().to_dict()))
    res = CliRunner().invoke(app, ["tau", "--config", str(path), "--json"])
    assert "unread_config_fields" not in json.loads(res.output)


def test_an_intra_node_link_between_one_gpu_nodes_is_refused() -> None:
    """PP over two one-GPU nodes sends every hop over the inter-node link: --intra-node-link pcie and nvlink gave the
    same run; refused as doing nothing (with TP inside each node it is read)."""
    line = one_line_error("run", "--pp", "2", "--nodes", "2", "--intra-node-link", "pcie", "--num-requests", "5",
                          "--no-progress")
    assert "--intra-node-link: each of the replica's 2 nodes holds one of its GPUs" in line
    from simulator.config.options import build_config

    build_config(pp=2, tp=2, nodes=2, intra_node_link="pcie")
    # read where it changes the run: a GB200 rack's hops ride NVLink unless the link says PCIe, and a TP ring across
    # one-GPU nodes reads its efficiency (a review found both refused by the first form of the check)
    build_config(gpu="gb200", pp=2, nodes=2, intra_node_link="pcie")
    build_config(tp=2, nodes=2, allow_tp_across_nodes=True, intra_node_link="pcie")


def test_a_scheduler_name_is_read_in_any_case() -> None:
    """--gpu H100-SXM and --model LLAMA-2-7B were read in any case, --scheduler VLLM refused."""
    from simulator.config.options import build_config
    from simulator.config.run_config import SchedulerConfig

    assert build_config(scheduler="Sarathi", chunk_size=512).scheduler == SchedulerConfig("sarathi", chunk_size=512)
    assert SchedulerConfig("VLLM-V1").name == "vllm-v1"


def test_plan_mix_of_equal_lengths_is_refused_before_its_search(tmp_path: Path) -> None:
    """plan --mix --workload fixed searched every layout, printed the answer, then failed on an empty long half."""
    line = one_line_error("plan", "--out", str(tmp_path / "p"), "--qps", "1", "--mix", "--gpus", "a100-80gb", "--modes",
                          "agg", "--tps", "1", "--seqs", "128", "--budgets", "512", "--workload", "fixed")
    assert "--mix: splits the traffic at the median length" in line and not (tmp_path / "p").exists()


def test_import_vidur_refuses_a_gpu_its_folder_contradicts_and_topologies_of_no_collective(shared_data: Path,
                                                                                         tmp_path: Path) -> None:
    """--gpu a40 on an H100 folder's mlp.csv relabelled its rows (its plausibility checks then read the A40's peaks);
    --all-topologies on compute profiles alone gave the same table."""
    mlp = shared_data / "profiles" / "vidur" / "compute" / "h100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
    line = one_line_error("import-vidur", str(mlp), "--gpu", "a40", "--out", str(tmp_path / "a"))
    assert "--gpu:" in line and "folder of h100 profiles (h100), not a40's" in line
    from profiler.vidur_import import import_vidur_file  # within the folder's family --gpu overrides its guess

    assert set(import_vidur_file(mlp, gpu="h100-pcie")["device"]) == {"h100-pcie"}
    line = one_line_error("import-vidur", str(mlp), "--all-topologies", "--out", str(tmp_path / "b"))
    assert "--all-topologies:" in line and "no file given is a collective's" in line


def test_messages_name_the_flag_given_and_what_the_pools_run() -> None:
    """plan --price of an unknown GPU named the catalog's field (gpu:); --chunk-size beside two default pools said they
    'each set budget= or run another scheduler' though neither did: they run vllm."""
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config
    from simulator.config.prices import parse_price_flags

    with pytest.raises(ConfigError, match=r"^--price: 'nope=2': unknown GPU 'nope'"):
        parse_price_flags(["nope=2"], {})
    with pytest.raises(ConfigError, match="--prefill-pool runs vllm; --decode-pool runs vllm, not --scheduler vllm-v1"):
        build_config(chunk_size=256, prefill_pool="1x(tp=1,sched=vllm)", decode_pool="1x(tp=1,sched=vllm)")
    # (pools without sched= run --scheduler's, vllm-v1 here, and keep its budget)
    from simulator.config.disagg_layout import layout_of

    layout = layout_of(build_config(max_num_batched_tokens=512, prefill_pool="1x", decode_pool="1x"))
    assert layout.decode_scheduler.name == "vllm-v1" and layout.decode_scheduler.max_num_batched_tokens == 512
    with pytest.raises(ConfigError, match="--prefill-pool sets budget=; --decode-pool runs sarathi, not --scheduler"):
        build_config(chunk_size=256, prefill_pool="1x(budget=512)", decode_pool="1x(sched=sarathi)")


def test_an_infinite_rate_beside_an_arrival_names_the_spelling_given() -> None:
    """--qps inf --arrival gamma named --request-rate (vLLM's spelling, not typed)."""
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config

    for spelling in ("qps", "request_rate"):
        with pytest.raises(ConfigError, match=f"^--{spelling.replace('_', '-')}: inf sends every request at once"):
            build_config(**{spelling: float("inf")}, arrival="gamma")


def test_tau_names_burstiness_as_typed() -> None:
    """vLLM's --burstiness becomes --arrival gamma and --cv: tau refused it as '--arrival'."""
    from simulator.config.errors import ConfigError
    from simulator.config.options import build_config

    with pytest.raises(ConfigError, match="^--burstiness: tau does not read it"):
        build_config(command="tau", burstiness=2.0)
    with pytest.raises(ConfigError, match="^--arrival: tau does not read it"):
        build_config(command="tau", arrival="gamma")
