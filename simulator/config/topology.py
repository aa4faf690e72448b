"""Interconnects: named links, where a replica's GPUs sit, and what communication costs.

A replica with ``tp * pp`` GPUs spans ``num_nodes`` servers of at most
:data:`MAX_GPUS_PER_NODE` GPUs. Placement is fixed and simple, as in vLLM and
Megatron: global rank ``r = stage * tp + tp_rank``; ranks fill nodes in order, so each
node holds ``tp * pp / num_nodes`` consecutive GPUs (``pp / num_nodes`` whole stages
when TP groups stay inside nodes). A TP group never spans nodes unless the layout
asks for it (``allow_tp_across_nodes``): its all-reduces would then cross the slow link.

Links (:data:`LINK_NAMES`), each with a per-direction bandwidth, a fixed latency and
the fraction of bandwidth a transfer reaches:

- ``nvlink`` (the GPU's own kind), ``nvlink-switch`` (NVSwitch, DGX/HGX: every pair at
  full speed), ``nvlink-pairwise`` (bridges join GPU pairs; a ring over more than two
  GPUs also crosses PCIe, so it runs at PCIe speed, as Vidur's measured all-reduces on
  pairwise A100/H100 show); bandwidth from the GPU spec; on a fully connected mesh (an MI300X's
  Infinity Fabric: ``GPUSpec.mesh_links``) the spec's bandwidth is the sum of one link to each peer,
  so a group of n GPUs talks over n - 1 of them and a pair (a PP hop, a KV handoff) over one
  (:func:`group_link`);
- ``pcie`` (the GPU's host link);
- ``ethernet-{10,25,100,200,400,800}g`` and ``infiniband-{100,200,400,800}g``: one NIC per node,
  shared by the GPUs of the node that send at once;
- ``<nic>-x<N>`` (e.g. ``infiniband-400g-x8``): ``N`` such NICs per node (1 to
  :data:`MAX_NICS_PER_NODE`), spread evenly over the server's :data:`MAX_GPUS_PER_NODE` GPUs,
  as in rail-optimised GPU servers (DGX/HGX H100: eight 400 Gb/s NICs, one per GPU; B200/B300
  and GB200/GB300 between racks: 800 Gb/s per GPU). ``k`` GPUs of a node sending at once reach
  their own share of the NICs, ``k * N / 8`` of them, at least one and at most ``N``
  (:meth:`Link.nic_bytes_per_s`); ``-x1`` is the plain name. As a disaggregated KV link
  (``--kv-link``) the name is the ``N`` NICs together.

NVLink domains larger than a server (GB200/GB300 NVL72: ``GPUSpec.nvlink_domain_gpus`` = 72
GPUs of a rack joined by NVSwitch): a TP group, a pipeline hop or an attention-DP/EP group whose
GPUs lie inside one domain communicates over NVLink even where its GPUs sit on several nodes
(a TP group may then span nodes without ``allow_tp_across_nodes``); only traffic between
domains crosses the NICs. Replicas start at a domain's first GPU.

Costs (alpha-beta model):

- ring all-reduce of ``B`` bytes over ``n`` GPUs: ``2 (n-1) alpha + 2 (n-1)/n * B / bw``;
- send/recv of ``B`` bytes: ``alpha + B / bw``;
- a pipeline hop sends a micro-batch's hidden states (``tokens * hidden * dtype``) from
  one stage to the next. Each TP rank sends its ``1/tp`` slice to its peer and the
  receiving group all-gathers them (vLLM's and Megatron's scatter/gather): intra-node
  each slice has its own link; inter-node all slices share the NICs the stage's GPUs reach;
- a TP ring across nodes (NCCL runs a ring per NIC) crosses between nodes at the NICs the
  group's GPUs of a node reach, never faster than the ring's link inside the node;
- the attention-DP/EP all-to-all sends to a GPU's peers on its node (or NVLink domain) over
  NVLink and to the rest through its share of the node's NICs, both at once.

Latencies and efficiencies are hand-set from public NCCL measurements (Vidur's
``data/profiling/network`` tables: ~5 us small-message NVLink send/recv, 12-25 us across
nodes); tests compare them with those tables where the shared data folder is present.
The simulator itself never reads measured tables from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from simulator.config.catalog import GPUSpec, get_gpu
from simulator.config.errors import ConfigError

if TYPE_CHECKING:
    from simulator.config.run_config import ReplicaConfig

MAX_GPUS_PER_NODE = 8  # GPUs in one server (DGX/HGX and typical PCIe boxes)
MAX_NICS_PER_NODE = 32  # a bound for the -x<N> suffix (eight GPUs with up to four NICs each)

# GPUs whose NVLink goes through NVSwitch in their usual (SXM, HGX/DGX) servers; other
# NVLink parts (A40, H100 PCIe) are joined in pairs by bridges.
NVSWITCH_GPUS = frozenset({"a100-40gb", "a100-80gb", "h100-sxm", "h200"})

_GBIT = 1e9 / 8  # bytes/s in one Gbit/s
_NIC_GBITS = {"ethernet": (10, 25, 100, 200, 400, 800), "infiniband": (100, 200, 400, 800)}
_MULTI_NIC = re.compile(r"^((?:ethernet|infiniband)-\d+g)-x(.*)$")
# kind -> (latency_s, efficiency): fixed cost per message and reachable fraction of bandwidth.
_KIND_PARAMS = {
    "nvlink": (5e-6, 0.80),
    "pcie": (10e-6, 0.75),
    "ethernet": (25e-6, 0.75),  # RoCE/TCP through the NCCL socket or IB-verbs plugin
    "infiniband": (10e-6, 0.85),
}

LINK_NAMES: tuple[str, ...] = (
    "nvlink", "nvlink-switch", "nvlink-pairwise", "pcie",
    *(f"{kind}-{g}g" for kind, speeds in _NIC_GBITS.items() for g in speeds),
)
INTRA_NODE_LINKS = ("nvlink", "nvlink-switch", "nvlink-pairwise", "pcie")


@dataclass(frozen=True)
class Link:
    """One kind of connection. ``bytes_per_s`` is per direction (per GPU for NVLink and
    PCIe, per NIC for NICs); ``pairwise``: only GPU pairs share a fast path;
    ``nics_per_node``: NICs of a node (inter-node links), spread over its GPUs."""

    name: str
    kind: str  # nvlink, pcie, ethernet, infiniband
    bytes_per_s: float
    latency_s: float
    efficiency: float
    pairwise: bool = False
    nics_per_node: int = 1

    @property
    def is_inter_node(self) -> bool:
        return self.kind in ("ethernet", "infiniband")

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bytes_per_s * self.efficiency

    def nic_bytes_per_s(self, senders: int) -> float:
        """Nominal bandwidth ``senders`` GPUs of one node sending at once reach through the node's
        NICs: their share of the ``nics_per_node`` NICs (spread over the server's
        :data:`MAX_GPUS_PER_NODE` GPUs), at least one NIC, at most all. One NIC: exactly
        ``bytes_per_s`` (the share is 1.0)."""
        share = min(max(senders * self.nics_per_node / MAX_GPUS_PER_NODE, 1.0), float(self.nics_per_node))
        return self.bytes_per_s * share


def split_nics(name: str, field: str = "link") -> tuple[str, int]:
    """``'infiniband-400g-x8'`` -> ``('infiniband-400g', 8)``; other names -> ``(name, 1)``. A bad
    NIC count is a ConfigError naming ``field``."""
    key = name.lower()
    m = _MULTI_NIC.match(key)
    if m is None:
        return key, 1
    count = m.group(2)
    if not count.isdigit() or not 1 <= int(count) <= MAX_NICS_PER_NODE:
        raise ConfigError(field, f"NICs per node in {name!r} must be 1..{MAX_NICS_PER_NODE}, got {count!r}",
                          f"write e.g. {m.group(1)}-x8 (eight NICs per node, one per GPU)")
    return m.group(1), int(count)


def is_link_name(name: str) -> bool:
    """Whether ``name`` names a link (:data:`LINK_NAMES`, or a NIC with ``-x<N>``, N not checked)."""
    key = name.lower()
    m = _MULTI_NIC.match(key)
    return (m.group(1) if m else key) in LINK_NAMES


def get_link(name: str, gpu: GPUSpec, field: str = "link") -> Link:
    """The named link as seen from ``gpu``; ConfigError naming the known links otherwise."""
    key, nics = split_nics(name, field)
    if key not in LINK_NAMES:
        raise ConfigError(field, f"unknown link {name!r}",
                          f"known: {', '.join(LINK_NAMES)}; a NIC name takes -x<N> for N NICs per node")
    if key.startswith("nvlink"):
        if gpu.nvlink_bytes_per_s <= 0:
            flag = "--kv-link" if field == "kv_link" else "--intra-node-link"  # (the flag that named it)
            raise ConfigError(field, f"{gpu.name} has no NVLink", f"use {flag} pcie")
        pairwise = key == "nvlink-pairwise" or (key == "nvlink" and gpu.name not in NVSWITCH_GPUS
                                                 and not gpu.nvlink_switch)
        latency, eff = _KIND_PARAMS["nvlink"]
        return Link(key, "nvlink", gpu.nvlink_bytes_per_s, latency, eff, pairwise)
    if key == "pcie":
        latency, eff = _KIND_PARAMS["pcie"]
        return Link(key, "pcie", gpu.pcie_bytes_per_s, latency, eff)
    kind, speed = key.rsplit("-", 1)
    latency, eff = _KIND_PARAMS[kind]
    return Link(name.lower(), kind, int(speed[:-1]) * _GBIT, latency, eff, nics_per_node=nics)


def group_link(link: Link, gpu: GPUSpec, n: int) -> Link:
    """``link`` as a group of ``n`` GPUs of a node uses it: on a mesh (``GPUSpec.mesh_links``: the bandwidth is
    the sum of one link to each peer) the ``n - 1`` links to the group's other GPUs, a pair's one (a PP hop, a
    KV handoff); on a switch, the whole of it."""
    mesh = gpu.mesh_links if link.kind == "nvlink" and not link.pairwise else 0
    if not mesh:
        return link
    return replace(link, bytes_per_s=link.bytes_per_s * min(max(n - 1, 1), mesh) / mesh)


def default_intra_node_link(gpu: GPUSpec) -> str:
    """NVLink where the GPU has it, else PCIe."""
    return "nvlink" if gpu.nvlink_bytes_per_s > 0 else "pcie"


@dataclass(frozen=True)
class ReplicaTopology:
    """Where one replica's GPUs sit and which link each communication crosses.

    Invariants: ``tp * pp == num_nodes * gpus_per_node``; ``len(hop_links) == pp - 1``;
    a TP group inside one node rings over ``intra`` (at PCIe speed on pairwise NVLink
    with more than two GPUs); one that spans nodes rings over ``inter``.
    """

    gpu: str
    tp: int
    pp: int
    num_nodes: int
    gpus_per_node: int
    intra: Link
    inter: Link
    tp_spans_nodes: bool
    tp_ring_bytes_per_s: float  # nominal bandwidth of the TP ring's slowest hop
    tp_ring_latency_s: float
    hop_links: tuple[Link, ...]  # hop s: stage s -> s + 1
    # Attention data parallelism: dp ranks of tp GPUs each; the MoE layers' all-to-all runs over
    # all tp * dp GPUs of the group, at ep_bytes_per_s per GPU and direction (the TP ring's link
    # when dp == 1, so a run without DP prices exactly as before).
    dp: int = 1
    ep_bytes_per_s: float = 0.0  # (its latency is the calibration's collective latency: costmodel.moe.ep_all_to_all)
    # A TP group over several nodes of one NVLink domain (GB200/GB300 NVL72): its ring runs on NVLink.
    tp_in_nvlink_domain: bool = False
    ep_crosses_nodes: bool = False  # the attention-DP group's all-to-all reaches peers over the inter-node link

    @property
    def tp_ring_crosses_nodes(self) -> bool:
        """The TP ring runs over the inter-node link (across nodes, outside one NVLink domain)."""
        return self.tp_spans_nodes and not self.tp_in_nvlink_domain

    @property
    def uses_inter_node_link(self) -> bool:
        """Some communication of the replica crosses the inter-node link: its TP ring, a pipeline hop or
        the MoE all-to-all. False on one node, and across the nodes of one NVLink domain (NVL72)."""
        return (self.tp_ring_crosses_nodes or self.ep_crosses_nodes
                or any(link.is_inter_node for link in self.hop_links))

    def node_of_rank(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def stage_nodes(self, stage: int) -> tuple[int, ...]:
        """Nodes that stage ``stage``'s TP group occupies."""
        first, last = stage * self.tp, (stage + 1) * self.tp - 1
        return tuple(range(self.node_of_rank(first), self.node_of_rank(last) + 1))

    def describe(self) -> str:
        hops = ", ".join(f"{s}->{s + 1}: {link.name}" for s, link in enumerate(self.hop_links)) or "none"
        dp = f", {self.dp} attention-DP ranks" if self.dp > 1 else ""
        ring = ("the NVLink domain" if self.tp_in_nvlink_domain
                else "the inter-node link" if self.tp_spans_nodes else self.intra.name)
        return (f"{self.tp * self.pp * self.dp} GPUs{dp} on {self.num_nodes} node(s) x {self.gpus_per_node}; "
                f"TP ring over {ring}; hops: {hops}")


def build_topology(gpu: GPUSpec | str, tp: int, pp: int, num_nodes: int = 1, intra_node_link: str | None = None,
                   inter_node_link: str = "ethernet-100g", allow_tp_across_nodes: bool = False,
                   dp: int = 1) -> ReplicaTopology:
    """Place a replica's GPUs on nodes; refuse impossible layouts with one-line errors.

    With attention data parallelism (``dp > 1``, PP 1) the replica is ``dp`` ranks of ``tp``
    consecutive GPUs (rank ``d`` holds GPUs ``d*tp .. d*tp+tp-1``), each TP group inside a node
    as always. The MoE group (all ``tp * dp`` GPUs) all-to-alls over NVLink where it fits one
    NVLink domain (a server, or a GB200/GB300 NVL72 rack: ``GPUSpec.nvlink_domain_gpus``), at
    PCIe speed on pairwise NVLink or PCIe-only parts past two GPUs, else over the inter-node link,
    whose NIC the node's GPUs share (each sends at once in an all-to-all).
    """
    gpu = get_gpu(gpu) if isinstance(gpu, str) else gpu
    num_gpus = tp * pp * dp
    what = "tp x pp" if dp == 1 else "tp x attention_dp"
    if intra_node_link is not None and not intra_node_link.strip():  # "" is not "the default"
        raise ConfigError("replica.intra_node_link", "is empty", "name a link inside a node (nvlink, nvlink-switch, "
                          "nvlink-pairwise, pcie), or drop it for the GPU's own")
    intra_name = intra_node_link or default_intra_node_link(gpu)
    if intra_name.lower() not in INTRA_NODE_LINKS and is_link_name(intra_name):
        raise ConfigError("replica.intra_node_link", f"{intra_name!r} links nodes, not GPUs inside one",
                          f"use one of {', '.join(INTRA_NODE_LINKS)}")
    intra = get_link(intra_name, gpu, "replica.intra_node_link")
    inter = get_link(inter_node_link, gpu, "replica.inter_node_link")
    if not inter.is_inter_node:
        raise ConfigError("replica.inter_node_link", f"{inter_node_link!r} is not a link between nodes",
                          "use ethernet-100g, infiniband-200g, ...")
    if num_nodes > num_gpus:
        raise ConfigError("replica.num_nodes", f"{num_nodes} nodes for {what} = {num_gpus} GPUs leaves nodes empty",
                          f"use --nodes <= {num_gpus}")
    if num_gpus % num_nodes:
        raise ConfigError("replica.num_nodes", f"{what} = {num_gpus} GPUs do not split evenly over {num_nodes} nodes",
                          f"make --nodes divide {what}")
    gpus_per_node = num_gpus // num_nodes
    if gpus_per_node > MAX_GPUS_PER_NODE:
        need = -(-num_gpus // MAX_GPUS_PER_NODE)
        raise ConfigError("replica.num_nodes", f"{what} = {num_gpus} GPUs but {num_nodes} node(s) of "
                          f"{MAX_GPUS_PER_NODE} GPUs hold only {num_nodes * MAX_GPUS_PER_NODE}",
                          f"pass --nodes {need} or lower --tp/--pp" + ("/--attention-dp" if dp > 1 else ""))
    tp_spans_nodes = gpus_per_node % tp != 0
    # An NVLink domain larger than a node (NVL72): GPUs first..last talk over NVLink when in one domain.
    domain = gpu.nvlink_domain_gpus if intra.kind == "nvlink" and not intra.pairwise else 0

    def in_domain(first: int, last: int) -> bool:
        return domain > gpus_per_node and first // domain == last // domain

    # Every TP group: one per pipeline stage, or per attention-DP rank (DP and PP do not combine).
    tp_in_domain = tp_spans_nodes and all(in_domain(g * tp, (g + 1) * tp - 1) for g in range(pp * dp))
    if tp_spans_nodes and not tp_in_domain and not allow_tp_across_nodes:
        layout = f"pp={pp}" if dp == 1 else f"attention-dp={dp}"
        raise ConfigError("replica.tp", f"a tp={tp} group would span nodes ({gpus_per_node} GPUs per node with "
                          f"{layout} on {num_nodes} nodes)",
                          ("keep TP inside a node (tp dividing GPUs per node, pp a multiple of --nodes)" if dp == 1
                           else "keep each rank's TP group inside a node or NVLink domain (tp dividing its GPUs)")
                          + " or pass --allow-tp-across-nodes")
    if intra.pairwise and tp > 2:
        pcie = get_link("pcie", gpu)
        ring_bw, ring_latency = min(intra.bytes_per_s, pcie.bytes_per_s), max(intra.latency_s, pcie.latency_s)
    else:
        ring_bw, ring_latency = group_link(intra, gpu, tp).bytes_per_s, intra.latency_s
    if tp_spans_nodes and not tp_in_domain:
        # NCCL runs a ring per NIC: the ring crosses nodes at the NICs the group's GPUs of a node
        # reach, no faster than its hops inside the node (one NIC: the NIC, bytes_per_s exactly, as ever).
        nic_bw = inter.nic_bytes_per_s(min(tp, gpus_per_node))
        ring_bw = min(nic_bw, ring_bw) if inter.nics_per_node > 1 else nic_bw
        ring_latency = inter.latency_s
    hops = []
    for s in range(pp - 1):
        # Rank i of stage s sends to rank i of stage s + 1: the hop stays local only if every such pair does (a
        # TP group across nodes puts some pairs on two nodes even where the stages' first GPUs share one).
        pairs = [(s * tp + i, (s + 1) * tp + i) for i in range(tp)]
        local = all(a // gpus_per_node == b // gpus_per_node or in_domain(a, b) for a, b in pairs)
        hops.append(group_link(intra, gpu, 2) if local else inter)
    ep_bw = ring_bw  # without DP the MoE group is the TP group
    ep_crosses_nodes = False
    if dp > 1:
        group = tp * dp
        local_bw = group_link(intra, gpu, min(group, gpus_per_node)).bytes_per_s
        if intra.pairwise and min(group, gpus_per_node) > 2:
            local_bw = min(intra.bytes_per_s, get_link("pcie", gpu).bytes_per_s)
        if num_nodes == 1 or (intra.kind == "nvlink" and not intra.pairwise and group <= gpu.nvlink_domain_gpus):
            ep_bw = local_bw
        else:
            # A GPU's all-to-all peers: (local - 1) of the group's (group - 1) on its own node (or
            # NVLink domain), the rest behind the node's NICs, shared by the node's GPUs sending at
            # once; both paths run together, so the slower share sets the time.
            local = domain if domain > gpus_per_node else gpus_per_node
            remote = (group - local) / (group - 1)
            nic = inter.nic_bytes_per_s(gpus_per_node) / gpus_per_node
            ep_bw = 1.0 / max((1.0 - remote) / local_bw, remote / nic)
            ep_crosses_nodes = True
    return ReplicaTopology(gpu.name, tp, pp, num_nodes, gpus_per_node, intra, inter, tp_spans_nodes,
                           ring_bw, ring_latency, tuple(hops), dp, ep_bw, tp_in_domain, ep_crosses_nodes)


def topology_for(replica: ReplicaConfig) -> ReplicaTopology:
    """The topology of a (validated) replica config."""
    return build_topology(replica.gpu_spec, replica.tp, replica.pp, replica.num_nodes, replica.intra_node_link,
                          replica.inter_node_link, replica.allow_tp_across_nodes, replica.attention_dp)
