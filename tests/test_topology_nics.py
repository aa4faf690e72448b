"""NICs per node (``<nic>-x<N>``) and NVLink domains larger than a node (NVL72), priced by the
alpha-beta formulas of :mod:`simulator.config.topology`, recomputed here from the link speeds."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest

from simulator.config.catalog import get_gpu
from simulator.config.disagg_layout import layout_of, parse_link
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig
from simulator.config.topology import build_topology, get_link, topology_for
from simulator.costmodel.network import hop_time, ring_all_gather_time, tp_all_reduce_time

GBIT = 1e9 / 8
IB_LATENCY, IB_EFF = 10e-6, 0.85  # topology's infiniband kind


def test_plain_names_are_one_nic_and_x1_is_the_plain_name() -> None:
    gpu = get_gpu("h100-sxm")
    plain, x1, x8 = (get_link(n, gpu) for n in ("infiniband-400g", "infiniband-400g-x1", "infiniband-400g-x8"))
    assert plain.nics_per_node == 1 and x8.nics_per_node == 8 and x8.bytes_per_s == 400 * GBIT
    for k in (1, 4, 8):
        assert plain.nic_bytes_per_s(k) == x1.nic_bytes_per_s(k) == 400 * GBIT  # one NIC, however many send
    # k GPUs of an 8-GPU node with 8 NICs reach k NICs; with 4 NICs, k/2 of them (at least one).
    assert [x8.nic_bytes_per_s(k) / (400 * GBIT) for k in (1, 2, 4, 8)] == [1, 2, 4, 8]
    x4 = get_link("infiniband-400g-x4", gpu)
    assert [x4.nic_bytes_per_s(k) / (400 * GBIT) for k in (1, 2, 4, 8)] == [1, 1, 2, 4]
    assert get_link("infiniband-800g-x16", gpu).nic_bytes_per_s(8) == 16 * 800 * GBIT


def test_tp_ring_across_nodes_runs_at_the_nodes_nics() -> None:
    h100 = get_gpu("h100-sxm")
    kw = {"num_nodes": 2, "allow_tp_across_nodes": True}
    one = build_topology(h100, 16, 1, inter_node_link="infiniband-400g", **kw)
    eight = build_topology(h100, 16, 1, inter_node_link="infiniband-400g-x8", **kw)
    sixteen = build_topology(h100, 16, 1, inter_node_link="infiniband-800g-x16", **kw)
    assert one.tp_ring_bytes_per_s == 400 * GBIT
    assert eight.tp_ring_bytes_per_s == 8 * 400 * GBIT  # a ring per NIC: the node's eight NICs
    assert sixteen.tp_ring_bytes_per_s == h100.nvlink_bytes_per_s  # never faster than the ring inside the node
    # all_reduce_time: 2 (n-1) alpha + 2 (n-1)/n B / (bw x eff), alpha the NIC's latency.
    nbytes, n = 64e6, 16
    for topo, bw in ((one, 400 * GBIT), (eight, 3200 * GBIT)):
        want = 2 * (n - 1) * IB_LATENCY + 2 * (n - 1) / n * nbytes / (bw * 0.8)
        assert tp_all_reduce_time(topo, nbytes, efficiency=0.8) == pytest.approx(want, rel=1e-12)


def test_pipeline_hop_shares_the_nics_its_stage_reaches() -> None:
    h100 = get_gpu("h100-sxm")
    nvlink = h100.nvlink_bytes_per_s
    nbytes = 8192 * 8192 * 2.0  # 8192 tokens of hidden 8192 in bf16
    for tp, link, nics in ((8, "infiniband-400g", 1), (8, "infiniband-400g-x8", 8), (4, "infiniband-400g-x8", 4),
                           (4, "infiniband-400g-x4", 2)):
        topo = build_topology(h100, tp, 2, num_nodes=2, inter_node_link=link)
        assert topo.hop_links[0].is_inter_node
        gather = (tp - 1) * 5e-6 + (tp - 1) / tp * nbytes / (nvlink * 0.80)
        want = IB_LATENCY + nbytes / (nics * 400 * GBIT * IB_EFF) + gather
        assert hop_time(topo, nbytes, 0) == pytest.approx(want, rel=1e-12), (tp, link)
        assert gather == pytest.approx(ring_all_gather_time(nbytes, tp, nvlink * 0.8, 5e-6), rel=1e-12)


def test_attention_dp_all_to_all_uses_each_gpus_nic() -> None:
    def ep(link: str) -> float:
        return topology_for(ReplicaConfig("qwen3-235b-a22b", "h200", tp=1, attention_dp=16, ep=16, num_nodes=2,
                                          dtype="fp8", inter_node_link=link)).ep_bytes_per_s
    nvlink, remote = get_gpu("h200").nvlink_bytes_per_s, 8 / 15  # 8 of a GPU's 15 peers on the other node
    for link, per_gpu in (("infiniband-400g", 400 * GBIT / 8), ("infiniband-400g-x8", 400 * GBIT)):
        assert ep(link) == pytest.approx(1 / max((1 - remote) / nvlink, remote / per_gpu), rel=1e-12)


def test_the_roofline_prices_tp_and_ep_collectives_over_the_nics() -> None:
    from simulator.costmodel.roofline import RooflineCostModel

    t = np.array([1.0, 256.0, 4096.0])

    def all_reduce(link: str) -> np.ndarray:
        rep = ReplicaConfig("llama-2-70b", "h100-sxm", tp=16, num_nodes=2, allow_tp_across_nodes=True,
                            inter_node_link=link, roofline_calibration="2023")  # the closed form below: 2023's
        rf = RooflineCostModel(rep)
        nbytes = t * rf.model.hidden_size * rf.dtype_bytes
        # (a ring across two nodes: the inter-node latency up and down NCCL's tree, one level)
        want = 2.0 * 15 / 16 * nbytes / (rf.topology.tp_ring_bytes_per_s * rf.cal.allreduce_bus_eff) \
            + rf.cal.allreduce_latency_s + 2 * rf.topology.inter.latency_s
        np.testing.assert_allclose(rf.all_reduce(t), want, rtol=1e-12)
        return rf.all_reduce(t)

    plain, eight = all_reduce("infiniband-400g"), all_reduce("infiniband-400g-x8")
    assert (eight < plain).all()


def test_nvl72_tp16_all_reduce_runs_over_nvlink() -> None:
    from simulator.costmodel.roofline import RooflineCostModel

    gb200 = get_gpu("gb200")
    # no --allow-tp-across-nodes needed in a rack; 2023 constants: the closed form below has no per-GPU latency
    rep = ReplicaConfig("llama-2-70b", "gb200", tp=16, num_nodes=2, roofline_calibration="2023")
    topo = topology_for(rep)
    assert topo.tp_spans_nodes and topo.tp_in_nvlink_domain and "NVLink domain" in topo.describe()
    assert topo.tp_ring_bytes_per_s == gb200.nvlink_bytes_per_s and topo.tp_ring_latency_s == 5e-6
    rf = RooflineCostModel(rep)
    t = np.array([64.0])
    want = 2.0 * 15 / 16 * t * rf.model.hidden_size * 2 / (gb200.nvlink_bytes_per_s * rf.cal.allreduce_bus_eff) \
        + rf.cal.allreduce_latency_s
    np.testing.assert_allclose(rf.all_reduce(t), want, rtol=1e-12)
    # A pipeline hop between nodes of the rack is NVLink too; the same layout on H100 nodes is not.
    assert topology_for(ReplicaConfig("llama-2-70b", "gb200", tp=8, pp=2, num_nodes=2)).hop_links[0].kind == "nvlink"
    assert topology_for(ReplicaConfig("llama-2-70b", "h100-sxm", tp=8, pp=2, num_nodes=2)).hop_links[0].is_inter_node
    with pytest.raises(ConfigError, match="span nodes"):
        ReplicaConfig("llama-2-70b", "h100-sxm", tp=16, num_nodes=2)


def test_moe_group_past_one_rack_counts_the_rack_as_local() -> None:
    link = "infiniband-800g-x8"
    topo = topology_for(ReplicaConfig("kimi-k2.5", "gb200", tp=1, attention_dp=96, ep=96, num_nodes=12,
                                      dtype="nvfp4", inter_node_link=link))
    nvlink, remote = get_gpu("gb200").nvlink_bytes_per_s, (96 - 72) / 95
    assert topo.ep_bytes_per_s == pytest.approx(1 / max((1 - remote) / nvlink, remote / (800 * GBIT)), rel=1e-12)


@pytest.mark.parametrize("link", ["infiniband-400g-x0", "infiniband-400g-x", "infiniband-400g-xabc",
                                  "infiniband-400g-x33", "ethernet-400g-x1.5", "infiniband-300g-x8", "nvlink-x8"])
def test_bad_nic_counts_are_one_line_config_errors(link: str) -> None:
    with pytest.raises(ConfigError) as err:
        ReplicaConfig("llama-2-70b", "h100-sxm", tp=8, pp=2, num_nodes=2, inter_node_link=link)
    assert err.value.field == "replica.inter_node_link" and "\n" not in str(err.value)
    with pytest.raises(ConfigError) as err:  # as the intra-node link it is refused too
        ReplicaConfig("llama-2-7b", "h100-sxm", tp=2, intra_node_link="infiniband-400g-x8")
    assert err.value.field == "replica.intra_node_link"


def test_kv_link_with_nics_is_a_workers_share_or_all_of_them_shared() -> None:
    one, eight = parse_link("infiniband-400g", "h100-sxm"), parse_link("infiniband-400g-x8", "h100-sxm")
    assert one.bytes_per_s == 400 * GBIT * IB_EFF and eight.bytes_per_s == 8 * 400 * GBIT * IB_EFF
    assert eight.latency_s == one.latency_s == IB_LATENCY
    cfg = RunConfig(prefill_pool="1x(tp=2)", decode_pool="1x(tp=2)", kv_link="infiniband-400g-x8")
    # a TP2 worker's link: two of the node's eight NICs (one a GPU), not all eight
    assert layout_of(cfg).link == eight.__class__("infiniband-400g-x8", 2 * 400 * GBIT * IB_EFF, IB_LATENCY)
    assert layout_of(cfg.replace(kv_link_scope="shared")).link == eight
    with pytest.raises(ConfigError) as err:
        RunConfig(prefill_pool="1x(tp=2)", decode_pool="1x(tp=2)", kv_link="infiniband-400g-x0")
    assert err.value.field == "kv_link"


def _row(system: str, tp: int, adp: int, ep: int) -> SimpleNamespace:
    """A synthetic aggregated silicon row (the fields row_config reads)."""
    nan = float("nan")
    return SimpleNamespace(concurrency=64, model_path="deepseek-ai/DeepSeek-V3", system=system, gemm_quant_mode="fp8_block",
                           isl=1024, osl=128, mode="agg", tp_size=tp, pp_size=1, attention_dp_size=adp,
                           moe_ep_size=ep, moe_tp_size=tp * adp // ep, prefill_num_workers=nan,
                           decode_num_workers=nan)


def test_a_silicon_row_over_two_h100_nodes_maps_to_eight_400g_nics() -> None:
    from simulator.calibrate.silicon import row_config

    config = row_config(_row("h100_sxm", 1, 16, 16))
    assert config.replica.num_nodes == 2 and config.replica.inter_node_link == "infiniband-400g-x8"
    topo = topology_for(config.replica)
    assert topo.inter.nics_per_node == 8 and topo.inter.bytes_per_s == 400 * GBIT
    # The GB200 row's 16-GPU group stays on the rack's NVLink.
    gb = topology_for(row_config(_row("gb200", 16, 1, 16)).replica)
    assert gb.tp_in_nvlink_domain and gb.ep_bytes_per_s == get_gpu("gb200").nvlink_bytes_per_s


def test_silicon_networks_match_the_system_files(shared_data) -> None:  # noqa: ANN001
    from simulator.calibrate.silicon import SYSTEM_NETWORKS, SYSTEMS
    from simulator.config.topology import MAX_GPUS_PER_NODE, split_nics

    for system, link in SYSTEM_NETWORKS.items():
        text = (shared_data / "profiles" / "aiconfigurator" / "systems" / f"{system}.yaml").read_text()
        node = {k: float(v) for k, v in re.findall(r"^\s+(\w+):\s*([0-9.e+]+)", text.split("node:", 1)[1], re.M)}
        per_gpu = node.get("inter_rack_bw", node["inter_node_bw"])  # NVL72: the NICs between racks
        name, nics = split_nics(link)
        gpu = get_gpu(SYSTEMS[system])
        assert get_link(name, gpu).bytes_per_s * nics / MAX_GPUS_PER_NODE == per_gpu, system
        if "num_gpus_per_rack" in node:
            assert gpu.nvlink_domain_gpus == node["num_gpus_per_rack"]
            assert node["inter_node_bw"] == gpu.nvlink_bytes_per_s  # NVLink between the rack's trays
        else:
            assert node["num_gpus_per_node"] == MAX_GPUS_PER_NODE and gpu.nvlink_domain_gpus == 0
