"""CLI fuzzing, round 15 (deployment layouts): a NIC link's -xN gave every worker the node's N NICs, a KV link priced from the prefill pool's GPU alone,
EP flags beside pools that set their own TP, a link latency of 1e20 s, headers silent on what changed the answer, a
--scheduler no pool ran, a MoE kernel refusal suggesting itself, and pool errors naming run flags.
"""

from __future__ import annotations

from test_cli_fuzz_round13 import invoke, refused

from simulator.config.run_config import RunConfig


def test_a_nic_link_is_a_workers_share_of_the_nodes_nics() -> None:
    from simulator.config.disagg_layout import parse_link

    one = parse_link("infiniband-400g", "h100-sxm")
    assert parse_link("infiniband-400g-x8", "h100-sxm", senders=1).bytes_per_s == one.bytes_per_s
    assert parse_link("infiniband-400g-x8", "h100-sxm", senders=4).bytes_per_s == 4 * one.bytes_per_s
    assert parse_link("infiniband-400g-x8", "h100-sxm").bytes_per_s == 8 * one.bytes_per_s  # (shared: the node's)
    assert parse_link("infiniband-400g-x8", "h100-sxm", senders=16).bytes_per_s == 16 * one.bytes_per_s  # (2 nodes)


def test_a_kv_link_is_checked_and_priced_at_both_ends() -> None:
    line = refused("run", "--prefill-pool", "1x(tp=1,gpu=h100-sxm)", "--decode-pool", "1x(tp=1,gpu=l40s)",
                   "--kv-link", "nvlink", "--num-requests", "5")
    assert "l40s has no NVLink (use --kv-link pcie)" in line
    from simulator.config.disagg_layout import layout_of

    config = RunConfig().replace(prefill_pool="1x(tp=1,gpu=h100-sxm)", decode_pool="1x(tp=1,gpu=a100-80gb)",
                                 kv_link="pcie")
    swapped = config.replace(prefill_pool="1x(tp=1,gpu=a100-80gb)", decode_pool="1x(tp=1,gpu=h100-sxm)")
    assert layout_of(config).link.bytes_per_s == layout_of(swapped).link.bytes_per_s  # (the A100's, both ways)
    assert "over 10 s" in refused("run", "--prefill-pool", "1x", "--decode-pool", "1x", "--kv-link",
                                  "25GB/s@99999999999999999999s")


def test_expert_parallel_flags_beside_pools_and_in_a_plan() -> None:
    line = refused("run", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--prefill-pool", "1x(tp=2)",
                   "--decode-pool", "1x(tp=2)", "--attention-dp", "2", "--enable-expert-parallel")
    assert "--prefill-pool has 4 GPUs in its MoE group" in line and "its own ep=N" in line
    code, output = invoke("run", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--prefill-pool", "1x(tp=2,ep=4)",
                          "--decode-pool", "1x", "--attention-dp", "2", "--enable-expert-parallel",
                          "--num-requests", "5", "--no-progress")
    assert code == 0, output  # (a pool with its own ep=, and one whose tp x dp is the run's, take it)
    line = refused("plan", "--model", "qwen3-30b-a3b", "--qps", "1", "--tps", "2", "--enable-expert-parallel")
    assert "plan sets each layout's EP itself" in line


def test_headers_pools_and_messages_say_what_runs() -> None:
    code, output = invoke("run", "--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)", "--first-token-at",
                          "prefill", "--num-requests", "10", "--no-progress")
    assert code == 0 and "the first token from the prefill worker" in output, output
    line = refused("run", "--prefill-pool", "1x(tp=1,sched=orca)", "--decode-pool", "1x(tp=1,sched=orca)",
                   "--mixed-pool", "1x(tp=1,sched=orca)", "--scheduler", "sarathi")
    assert "--scheduler would do nothing" in line and "each set sched= themselves" in line
    assert "leave sched= out of a pool (it then runs --scheduler's)" in line
    assert "(pass nodes=2 or lower tp=/pp=)" in refused("run", "--prefill-pool", "1x(tp=16)", "--decode-pool", "1x")
    code, output = invoke("run", "--model", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--prefill-pool",
                          "1x(tp=2,ep=2,redundant=0)", "--decode-pool", "1x(tp=2)", "--num-requests", "5", "--no-progress")
    assert code == 0, output  # (redundant=0, the default, was 'must be a positive integer')
    from simulator.config.disagg_layout import pool_fix

    assert pool_fix("use --nodes <= 1") == "use nodes=1 or less" and pool_fix("drop --moe-kernel") == "drop moe="
    code, output = invoke("run", "--metrics", "vllm", "--prefill-pool", "2x(tp=2)", "--decode-pool", "1x(tp=4)",
                          "--num-requests", "10", "--no-progress")
    assert code == 0 and "disaggregated: prefill 2x(tp=2) + decode 1x(tp=4)" in output, output
