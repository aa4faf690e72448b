"""Interconnect model: named links, placement, collective costs, layout validation."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from simulator.config.catalog import get_gpu
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.config.topology import LINK_NAMES, build_topology, get_link
from simulator.costmodel.base import BatchShape
from simulator.costmodel.network import hop_time, ring_all_reduce_time, send_recv_time, tp_all_reduce_time
from simulator.costmodel.roofline import RooflineCostModel


def test_named_links_have_their_line_rates():
    a100 = get_gpu("a100-80gb")
    assert get_link("ethernet-100g", a100).bytes_per_s == 12.5e9
    assert get_link("ethernet-10g", a100).bytes_per_s == 1.25e9
    assert get_link("infiniband-400g", a100).bytes_per_s == 50e9
    assert get_link("nvlink", a100).bytes_per_s == a100.nvlink_bytes_per_s
    assert get_link("pcie", a100).bytes_per_s == a100.pcie_bytes_per_s
    assert not get_link("nvlink", a100).pairwise  # A100 SXM sits on NVSwitch
    assert get_link("nvlink", get_gpu("a40")).pairwise  # A40 has pairwise bridges
    assert get_link("nvlink-pairwise", a100).pairwise
    assert get_link("infiniband-100g", a100).latency_s < get_link("ethernet-100g", a100).latency_s


@pytest.mark.parametrize("name", ["eth-100g", "nvlink4", "infiniband-50g", ""])
def test_unknown_link_names_are_refused_with_the_known_ones(name):
    with pytest.raises(ConfigError, match="known: .*ethernet-100g"):
        get_link(name, get_gpu("a100-80gb"))


def test_nvlink_on_a_gpu_without_it_is_refused():
    with pytest.raises(ConfigError, match="no NVLink.*pcie"):
        ReplicaConfig("llama-2-7b", "l40s", tp=2, intra_node_link="nvlink")
    assert build_topology("l40s", 2, 1).intra.name == "pcie"  # the default falls back to PCIe


def test_ring_all_reduce_and_send_recv_follow_the_alpha_beta_formulas():
    # 4 GPUs, 64 MB, 100 GB/s, 10 us: 6 steps of latency + 2*3/4 * 64e6 / 100e9 seconds.
    assert ring_all_reduce_time(64e6, 4, 100e9, 10e-6) == pytest.approx(6 * 10e-6 + 1.5 * 64e6 / 100e9)
    assert ring_all_reduce_time(64e6, 1, 100e9, 10e-6) == 0.0
    link = get_link("ethernet-100g", get_gpu("a100-80gb"))
    assert send_recv_time(1e6, link) == pytest.approx(link.latency_s + 1e6 / (12.5e9 * link.efficiency))
    assert send_recv_time(0, link) == 0.0


def test_stages_fill_nodes_in_order_and_hops_cross_nodes_only_between_them():
    topo = build_topology("a100-80gb", tp=4, pp=2, num_nodes=2, inter_node_link="ethernet-100g")
    assert topo.gpus_per_node == 4
    assert topo.stage_nodes(0) == (0,) and topo.stage_nodes(1) == (1,)
    assert [link.name for link in topo.hop_links] == ["ethernet-100g"]
    topo = build_topology("a100-80gb", tp=2, pp=4, num_nodes=2, inter_node_link="infiniband-200g")
    assert [link.is_inter_node for link in topo.hop_links] == [False, True, False]
    assert build_topology("a100-80gb", tp=4, pp=2).hop_links[0].kind == "nvlink"


def test_tp_ring_speed_depends_on_the_fabric():
    a40, a100 = get_gpu("a40"), get_gpu("a100-80gb")
    # Pairwise NVLink: two GPUs share a bridge; a ring over four also crosses PCIe.
    assert build_topology(a40, 2, 1).tp_ring_bytes_per_s == a40.nvlink_bytes_per_s
    assert build_topology(a40, 4, 1).tp_ring_bytes_per_s == a40.pcie_bytes_per_s
    assert build_topology(a100, 8, 1).tp_ring_bytes_per_s == a100.nvlink_bytes_per_s  # NVSwitch
    spanning = build_topology(a100, 8, 1, num_nodes=2, inter_node_link="ethernet-100g", allow_tp_across_nodes=True)
    assert spanning.tp_spans_nodes and spanning.tp_ring_bytes_per_s == 12.5e9


def test_roofline_uses_the_topology_for_all_reduce_and_hops():
    shape = BatchShape.from_requests(prefills=[(2048, 0)])
    inside = RooflineCostModel(ReplicaConfig("llama-2-70b", "a100-80gb", tp=8, pp=1, num_nodes=1))
    across = RooflineCostModel(ReplicaConfig("llama-2-70b", "a100-80gb", tp=8, pp=1, num_nodes=2,
                                             allow_tp_across_nodes=True))
    assert across.layer_time(shape) > inside.layer_time(shape)
    one = RooflineCostModel(ReplicaConfig("falcon-180b", "a100-80gb", tp=4, pp=2))
    two = RooflineCostModel(ReplicaConfig("falcon-180b", "a100-80gb", tp=4, pp=2, num_nodes=2,
                                          inter_node_link="ethernet-100g"))
    assert two.send_recv_time(2048, 0) > 3 * one.send_recv_time(2048, 0) > 0
    assert two.send_recv_time(2048) == two.send_recv_time(2048, 0)  # hop=None: the slowest hop
    assert RooflineCostModel(ReplicaConfig("llama-2-7b")).send_recv_time(2048) == 0.0  # no pipeline, no hop


def test_a_tp_group_across_nodes_pays_the_inter_node_latency_per_all_reduce():
    # The calibrated collective latency was measured inside a node; across two nodes NCCL's tree adds an
    # inter-node hop up and one down (ceil(log2(2)) = 1 level), four nodes two levels each way.
    from simulator.config.topology import topology_for

    def latency(nodes: int) -> tuple[float, float]:
        r = ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=8 * nodes, num_nodes=nodes, allow_tp_across_nodes=nodes > 1,
                          inter_node_link="infiniband-400g")
        return RooflineCostModel(r).collective_latency_s(), topology_for(r).inter.latency_s

    inside, _ = latency(1)
    per_gpu = RooflineCostModel(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=8)).cal.allreduce_gpu_latency_s
    two, hop = latency(2)
    four, _ = latency(4)
    assert two == pytest.approx(inside + 8 * per_gpu + 2 * hop)
    assert four == pytest.approx(inside + 24 * per_gpu + 4 * hop)
    # a group that straddles two nodes though tp is smaller than a node (tp=4 at ranks 4-7, 6 GPUs a node)
    straddle = ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4, pp=3, num_nodes=2, allow_tp_across_nodes=True,
                             inter_node_link="infiniband-400g")
    assert topology_for(straddle).gpus_per_node == 6 and topology_for(straddle).tp_ring_crosses_nodes
    one_node = RooflineCostModel(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4)).collective_latency_s()
    assert RooflineCostModel(straddle).collective_latency_s() == pytest.approx(one_node + 2 * hop)


def test_kernel_tables_leave_an_all_reduce_across_nodes_to_the_roofline(aic):  # noqa: ANN001
    # The engines' custom all-reduce runs between NVLink peers of one node: its table does not price a ring
    # across nodes, which the roofline prices (NCCL over the NIC), and the run's notes say so.
    from simulator.costmodel.aic.model import TableCostModel

    r = ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=16, num_nodes=2, allow_tp_across_nodes=True,
                      inter_node_link="infiniband-400g", kernels="vllm")
    model = TableCostModel(r, "vllm", root=aic, quiet=True)
    assert "tp_all_reduce" in model.roofline_ops
    assert any("across nodes" in note for note in model.notes)
    assert model.collective_latency_s() == model.rf.collective_latency_s()


def test_the_logits_gather_pays_one_collective_latency():
    # Gathering vocab-sharded logits is one collective: its bytes scale with vocab / (2 hidden) of an all-reduce
    # of the hidden states, its latency does not (it was charged vocab / (2 hidden) = 7.8 times for Llama-3).
    import numpy as np

    for calibration in ("today", "2023"):
        rf = RooflineCostModel(ReplicaConfig("llama-3.1-70b", "h100-sxm", tp=4, roofline_calibration=calibration))
        latency = rf.collective_latency_s()
        ratio = rf.model.vocab_size / rf.model.hidden_size / 2
        n = np.array([1.0, 256.0])
        bandwidth = rf.all_reduce(n) - latency
        assert rf.logits_gather(n) == pytest.approx(bandwidth * ratio + latency)
        assert rf.logits_gather(np.array([1.0]))[0] < 2 * latency < ratio * latency
    assert RooflineCostModel(ReplicaConfig("llama-3.1-8b", "h100-sxm")).logits_gather(np.array([8.0]))[0] == 0.0


def test_a_pipeline_hop_carries_the_hidden_states_and_the_residual():
    """vLLM's IntermediateTensors (and SGLang's PPProxyTensors) send both between stages: two hidden-size
    vectors a token, which over 100 Gb Ethernet is what a hop of a 2,048-token chunk costs."""
    cm = RooflineCostModel(ReplicaConfig("llama-3-70b", "h100-sxm", tp=8, pp=2, num_nodes=2,
                                         inter_node_link="ethernet-100g"))
    nbytes = 2048 * 2 * 8192 * 2
    assert cm.send_recv_time(2048, 0) == pytest.approx(hop_time(cm.topology, nbytes, 0, cm.cal.send_recv_latency_s))
    assert cm.send_recv_time(2048, 0) > 1.9 * hop_time(cm.topology, nbytes / 2, 0, cm.cal.send_recv_latency_s)


@pytest.mark.parametrize(("kwargs", "field", "needle"), [
    ({"model": "llama-2-7b", "pp": 33}, "replica.pp", "exceeds"),
    ({"model": "llama-2-70b", "tp": 8, "pp": 2}, "replica.num_nodes", "hold only 8"),
    ({"model": "falcon-180b", "tp": 8, "pp": 1, "num_nodes": 2}, "replica.tp", "span nodes"),
    ({"model": "llama-2-7b", "tp": 1, "pp": 3, "num_nodes": 2}, "replica.num_nodes", "split evenly"),
    ({"model": "llama-2-70b", "tp": 4, "pp": 3, "num_nodes": 2}, "replica.tp", "span nodes"),
    ({"model": "llama-2-70b", "tp": 4, "pp": 2, "num_nodes": 2, "inter_node_link": "ethernet-1g"},
     "replica.inter_node_link", "unknown link"),
    ({"model": "llama-2-70b", "tp": 4, "intra_node_link": "ethernet-100g"}, "replica.intra_node_link", "links nodes"),
    ({"model": "llama-2-7b", "num_nodes": 2}, "replica.num_nodes", "empty"),
])
def test_impossible_layouts_are_one_line_config_errors(kwargs, field, needle):
    with pytest.raises(ConfigError) as err:
        ReplicaConfig(gpu="a100-80gb", **kwargs)
    assert err.value.field == field and needle in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("args", "needle"), [
    (["--pp", "33"], "exceeds"),
    (["--model", "llama-2-70b", "--tp", "8", "--pp", "2"], "hold only 8"),
    (["--model", "falcon-180b", "--tp", "8", "--nodes", "2"], "span nodes"),
    (["--model", "llama-2-70b", "--tp", "4", "--pp", "2", "--nodes", "2", "--inter-node-link", "eth100"],
     "unknown link"),
])
def test_bad_layouts_exit_non_zero_with_one_line(args, needle):
    proc = subprocess.run([sys.executable, "-m", "simulator", "run", "--no-progress", "--num-requests", "5", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_link_names_are_unique_and_resolve():
    assert len(set(LINK_NAMES)) == len(LINK_NAMES)
    for name in LINK_NAMES:
        assert get_link(name, get_gpu("h100-sxm")).bytes_per_s > 0


# -- against measured NCCL tables (Vidur's data/profiling/network), where present ----------------

def _median_ms(path, workers: int, devices_per_node: int, size: int, op: str) -> float:
    df = pd.read_csv(path)
    rows = df[(df["num_workers"] == workers) & (df["devices_per_node"] == devices_per_node) & (df["size"] == size)]
    assert len(rows), f"no {workers}-worker rows of {size} bytes in {path}"
    return float(rows[f"time_stats.{op}.median"].median())


@pytest.mark.parametrize(("folder", "gpu", "link"), [
    ("a100_dgx", "a100-80gb", "nvlink-switch"),
    ("h100_dgx", "h100-sxm", "nvlink-switch"),
    ("a100_pairwise_nvlink", "a100-80gb", "nvlink-pairwise"),
])
def test_intra_node_send_recv_is_near_measured_nccl(shared_data, folder, gpu, link):
    path = shared_data / "profiles" / "vidur" / "network" / folder / "send_recv.csv"
    if not path.exists():
        pytest.skip(f"{path} not present")
    size = 64 * 2**20  # large messages: bandwidth-bound
    measured = _median_ms(path, 2, 2, size, "send_recv") / 1e3
    predicted = send_recv_time(size, get_link(link, get_gpu(gpu)))
    assert predicted == pytest.approx(measured, rel=0.35), (predicted, measured)
    small = _median_ms(path, 2, 2, 2048, "send_recv") / 1e3
    assert send_recv_time(2048, get_link(link, get_gpu(gpu))) == pytest.approx(small, abs=10e-6)


def test_pairwise_nvlink_ring_over_four_gpus_runs_at_pcie_speed_as_measured(shared_data):
    path = shared_data / "profiles" / "vidur" / "network" / "a100_pairwise_nvlink" / "all_reduce.csv"
    if not path.exists():
        pytest.skip(f"{path} not present")
    df = pd.read_csv(path)
    size = int(df[(df["num_workers"] == 4)]["size"].max())
    measured = _median_ms(path, 4, 4, size, "all_reduce") / 1e3
    topo = build_topology("a100-80gb", 4, 1, intra_node_link="nvlink-pairwise")
    predicted = tp_all_reduce_time(topo, size)
    assert predicted == pytest.approx(measured, rel=0.5), (predicted, measured)
    # ... and an NVLink-speed ring would have been off by an order of magnitude.
    nvlink_ring = ring_all_reduce_time(size, 4, get_gpu("a100-80gb").nvlink_bytes_per_s, 5e-6)
    assert measured > 5 * nvlink_ring


def test_a_pipeline_hop_inside_a_node_pays_the_calibrations_measured_send_recv_latency():
    """The 2023 calibrations fit NCCL send/recv's fixed cost to measured small messages (A100 DGX: 9 us);
    an intra-node hop pays it, and a calibration without one pays the link's constant (NVLink: 5 us)."""
    from dataclasses import replace

    from simulator.config.run_config import ReplicaConfig
    from simulator.costmodel.calibration import BY_GPU
    from simulator.costmodel.roofline import RooflineCostModel

    replica = ReplicaConfig("llama-2-7b", "a100-80gb", pp=2, roofline_calibration="2023")
    measured = BY_GPU["a100-80gb"]
    assert measured.send_recv_latency_s == pytest.approx(9e-6)
    with_fit = RooflineCostModel(replica, measured).send_recv_time(64, 0)
    without = RooflineCostModel(replica, replace(measured, send_recv_latency_s=None)).send_recv_time(64, 0)
    assert with_fit - without == pytest.approx(9e-6 - 5e-6, rel=1e-9)


def test_a_mesh_gives_a_group_the_links_to_its_peers_only():
    """An MI300X's 448 GB/s is seven 64 GB/s links, one to each other GPU of its server (a mesh, no switch):
    a TP pair talks over one, a TP4 group over three, TP8 over all seven; a PP hop is one pair's link. The
    mesh once priced every group at the full 448 GB/s (a TP2 all-reduce ~7x too fast)."""
    link = 64e9
    for tp in (2, 4, 8):
        assert build_topology("mi300x", tp, 1).tp_ring_bytes_per_s == pytest.approx(link * (tp - 1))
    assert [h.bytes_per_s for h in build_topology("mi300x", 2, 4).hop_links] == pytest.approx([link] * 3)
    assert build_topology("mi300x", 2, 1, dp=4).ep_bytes_per_s == pytest.approx(7 * link)  # the 8-GPU MoE group
    # a switch reaches its full bandwidth from any group
    assert build_topology("h100-sxm", 2, 1).tp_ring_bytes_per_s == build_topology("h100-sxm", 8, 1).tp_ring_bytes_per_s


def test_a_gpu_file_may_describe_a_mesh(tmp_path):
    import json

    from simulator.config.hf_config import load_gpu_file

    table = {"name": "m", "bf16_tflops": 1000, "hbm_gb_per_s": 5000, "memory_gb": 192, "nvlink_gb_per_s": 448,
             "nvlink_switch": True}
    for mesh, needle in ((7, None), (-1, "mesh_links"), (True, "mesh_links"), (2.5, "mesh_links")):
        path = tmp_path / f"g{mesh}.json"
        path.write_text(json.dumps({**table, "mesh_links": mesh}))
        if needle is None:
            assert build_topology(load_gpu_file(str(path)), 2, 1).tp_ring_bytes_per_s == pytest.approx(64e9)
        else:
            with pytest.raises(ConfigError, match=needle):
                load_gpu_file(str(path))
    path = tmp_path / "noswitch.json"
    path.write_text(json.dumps({**table, "nvlink_switch": False, "mesh_links": 7}))
    with pytest.raises(ConfigError, match="add nvlink_switch"):
        load_gpu_file(str(path))


def test_a_mesh_pair_hands_kv_over_one_link_and_a_learned_profile_keeps_its_hops():
    """A disaggregated handoff between two MI300X workers (--kv-link nvlink) goes over one peer link, not the
    seven together; and a learned profile's measured send/recv still prices a mesh's intra-node PP hop (the hop
    is a share of the node's link, which an equality test against the link once missed)."""
    from simulator.config.disagg_layout import parse_link

    mesh, switch = parse_link("nvlink", "mi300x"), parse_link("nvlink", "h100-sxm")
    link = get_link("nvlink", get_gpu("mi300x"))
    assert mesh.bytes_per_s == pytest.approx(link.effective_bytes_per_s / 7)
    assert switch.bytes_per_s == pytest.approx(get_link("nvlink", get_gpu("h100-sxm")).effective_bytes_per_s)
    topo = build_topology("mi300x", 2, 2)
    assert not topo.hop_links[0].is_inter_node and topo.hop_links[0] != topo.intra


def test_a_pipeline_hop_crosses_nodes_where_any_rank_pair_does():
    # tp=4 over 6-GPU nodes (--allow-tp-across-nodes): stage 1 holds GPUs 4-7, two of them on node 1, so ranks
    # 2 and 3 of stage 0 send to another node. Comparing the stages' first GPUs read the hop as NVLink.
    topo = build_topology("h100-sxm", tp=4, pp=3, num_nodes=2, allow_tp_across_nodes=True)
    assert [h.kind for h in topo.hop_links] == ["ethernet", "ethernet"]
    aligned = build_topology("h100-sxm", tp=4, pp=4, num_nodes=2)  # stages 0-1 on node 0, 2-3 on node 1
    assert [h.kind for h in aligned.hop_links] == ["nvlink", "ethernet", "nvlink"]


def test_an_attention_dp_ranks_tp_group_across_an_nvlink_domain_is_refused_as_a_stages_is():
    # GB200 NVL72: rank 4 of tp=16 holds GPUs 64-79, across the 72-GPU domain; it was priced as NVLink.
    with pytest.raises(ConfigError, match="attention-dp=5"):
        build_topology("gb200", tp=16, pp=1, num_nodes=10, dp=5)
    assert build_topology("gb200", tp=16, pp=1, num_nodes=8, dp=4).tp_in_nvlink_domain
