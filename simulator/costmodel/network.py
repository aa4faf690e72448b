"""Pricing communication over a replica's links: point-to-point sends, ring collectives, and a
pipeline hop.

The topology (:mod:`simulator.config.topology`) says which link each communication crosses and
at what nominal bandwidth and latency; these functions turn that into seconds. The TP all-reduce
of a step is priced by the cost model's own calibrated form
(:meth:`~simulator.costmodel.roofline.RooflineCostModel.all_reduce`); the ring formulas here are the
textbook ones a pipeline hop and the checks against measured NCCL use.
"""

from __future__ import annotations

import math
from dataclasses import replace

from simulator.config.topology import Link, ReplicaTopology


def ring_all_reduce_time(nbytes: float, num_gpus: int, bytes_per_s: float, latency_s: float) -> float:
    """Ring all-reduce: ``2 (n-1)`` steps, each moving ``B/n`` bytes over the slowest hop."""
    if num_gpus <= 1 or nbytes <= 0:
        return 0.0
    steps = 2 * (num_gpus - 1)
    return steps * latency_s + steps / num_gpus * nbytes / bytes_per_s


def ring_all_gather_time(nbytes: float, num_gpus: int, bytes_per_s: float, latency_s: float) -> float:
    """Ring all-gather of ``B`` bytes in total: ``n-1`` steps of ``B/n`` bytes."""
    if num_gpus <= 1 or nbytes <= 0:
        return 0.0
    steps = num_gpus - 1
    return steps * latency_s + steps / num_gpus * nbytes / bytes_per_s


def send_recv_time(nbytes: float, link: Link) -> float:
    """Point-to-point transfer of ``nbytes`` over ``link``."""
    if nbytes <= 0:
        return 0.0
    return link.latency_s + nbytes / link.effective_bytes_per_s


def tp_all_reduce_time(topo: ReplicaTopology, nbytes: float, efficiency: float | None = None) -> float:
    """One ring all-reduce of ``nbytes`` across the TP group, over the ring's slowest hop at
    ``efficiency`` (default: the intra-node link's)."""
    eff = topo.intra.efficiency if efficiency is None else efficiency
    return ring_all_reduce_time(nbytes, topo.tp, topo.tp_ring_bytes_per_s * eff, topo.tp_ring_latency_s)


def cross_node_latency_s(topo: ReplicaTopology) -> float:
    """What a TP group's all-reduce across nodes adds to the latency measured inside one node (the calibrated
    collective latency, the engines' custom all-reduce tables): NCCL takes small messages across nodes by its
    tree, whose reduce goes up and broadcast comes down ``ceil(log2(nodes))`` levels of inter-node hops. A floor
    (no per-hop software cost, no congestion): nothing measured here crosses nodes to calibrate it on. None
    where the ring stays inside a node or an NVLink domain (NVL72)."""
    if not topo.tp_ring_crosses_nodes:
        return 0.0
    tp, gpn = topo.tp, topo.gpus_per_node
    # the most nodes any TP group touches (a group of tp=4 at ranks 4-7 with 6 GPUs a node touches two)
    nodes = max(((g + 1) * tp - 1) // gpn - g * tp // gpn + 1 for g in range(topo.pp * topo.dp))
    return 2 * math.ceil(math.log2(nodes)) * topo.inter.latency_s if nodes > 1 else 0.0


def hop_time(topo: ReplicaTopology, nbytes: float, hop: int, intra_latency_s: float | None = None) -> float:
    """Move a micro-batch's activations (``nbytes`` in total) from stage ``hop`` to ``hop + 1``:
    each TP rank sends its ``1/tp`` slice, and the next stage all-gathers them. ``intra_latency_s``:
    a measured send/recv fixed cost for a hop inside a node (None: the link's constant)."""
    if nbytes <= 0:
        return 0.0
    link = topo.hop_links[hop]
    gather = ring_all_gather_time(nbytes, topo.tp, topo.tp_ring_bytes_per_s * topo.intra.efficiency,
                                  topo.tp_ring_latency_s)
    if not link.is_inter_node:  # each TP rank sends its 1/tp slice over its own link
        if intra_latency_s is not None:
            link = replace(link, latency_s=intra_latency_s)
        return send_recv_time(nbytes / topo.tp, link) + gather
    # Over NICs the slices share the NICs the stage's GPUs on a node reach (one NIC: all of them
    # queue behind each other; the share is exactly 1.0 then, so the time is send_recv_time's).
    nic = link.nic_bytes_per_s(min(topo.tp, topo.gpus_per_node))
    return link.latency_s + nbytes / (nic * link.efficiency) + gather
