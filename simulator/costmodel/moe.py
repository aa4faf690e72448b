"""Roofline pricing of mixture-of-experts layers and multi-head latent attention.

**Experts.** A MoE layer runs a router (a ``hidden x num_experts`` GEMM plus top-k/softmax and
token-permutation kernels), then each token's top-``k`` routed experts and every shared
expert. For an iteration of ``n`` tokens:

- *experts touched*: each token picks ``k`` distinct experts of ``E``; an expert escapes one
  token with probability ``1 - k/E``, so the expected number touched is
  ``E * (1 - (1 - k/E)**n)`` (:func:`expected_experts_touched`): at most ``n * k`` (a decode
  batch of 8 with top-2 reads at most 16 experts' weights), and ``E`` for any prefill chunk
  of a few hundred tokens. Those experts' weights are what the layer reads from HBM.
- *tokens per expert*: ``n * k`` assignments spread over the touched experts; the grouped GEMM
  is priced as if each touched expert carried the busiest expert's load,
  ``moe_imbalance * n * k / touched`` (a grouped GEMM's time follows its largest group, and an
  expert-parallel rank waits for the busiest rank), so FLOPs grow with the imbalance factor.
- *expert parallelism* (``ep``): experts are split over ``ep`` GPUs of the TP group, each
  expert's FFN over the remaining ``tp / ep``; attention stays tensor-parallel. Each MoE layer
  then adds an all-to-all dispatch and combine of the routed hidden states (each rank sends its
  ``1/tp`` share of the tokens, ``k`` copies, ``(ep-1)/ep`` of them off-GPU) over the TP link,
  and an all-gather restores the replicated activations the next attention expects, in place
  of the MLP's all-reduce.
- *attention data parallelism* (``attention_dp`` ranks of ``tp`` GPUs): each rank runs attention,
  the router, shared experts and dense layers on its own tokens with its own TP; the routed
  experts are sharded over all ``tp * dp`` GPUs (``moe_tp = tp * dp / ep`` per expert, ``ep``
  ways) and see every rank's tokens. A rank's cost model prices the layer for ``dp * t`` tokens
  (every rank assumed to carry the ``t`` this rank does: the ranks meet in each MoE layer, so a
  step is as slow as the busiest rank, and an idle rank runs a dummy batch; the approximation
  prices the others like this one). Dispatch and combine cross the DP group's link
  (:class:`~simulator.config.topology.ReplicaTopology`'s ``ep_bytes_per_s``: NVLink inside a node
  or an NVL72 rack, else split between NVLink and the GPU's share of the node's NICs); with ``ep = 1``
  the tokens are all-gathered over the group and the expert outputs reduce-scattered back
  (SGLang's DP attention with a TP MoE).
- shared experts are a dense MLP sharded by TP; dense layers (DeepSeek's first three) are
  priced by the plain MLP ops, weighted by their share of the layers (the per-layer table is a
  mean over layers, exact for a whole model).

**MLA** (DeepSeek-V2/V3). Projections: ``q_a`` and ``kv_a`` (replicated, as vLLM runs them),
``q_b`` and ``kv_b`` sharded by heads, output ``heads * v_head_dim -> hidden``. Prefill runs
ordinary attention over up-projected keys/values (``qk = nope + rope``, ``v`` dims per head)
plus the ``kv_b`` up-projection of every context token; decode runs the absorbed form (as
FlashMLA does): it reads the compressed latent once per token for all local heads, and each
head does ``2 * (2 * kv_lora_rank + rope)`` FLOPs per context token.

Constants (:class:`ExpertCalibration`): the expert GEMMs' efficiencies and the routing kernels'
fixed cost are fitted to LLMServingSim's H100 Mixtral-8x7B tables (HF eager kernels; vLLM's
fused top-k and grouped GEMMs are likely somewhat faster); other GPUs use their dense-GEMM
calibration. ``results/fidelity/moe.md`` reports the held-out error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from simulator.config.run_config import ReplicaConfig
    from simulator.config.specs import ModelSpec
    from simulator.costmodel.roofline import RooflineCostModel


@dataclass(frozen=True)
class ExpertCalibration:
    """Efficiencies of the expert GEMMs and the router's fixed cost on one GPU.

    An expert GEMM of ``m`` tokens takes ``max(flops / (peak * compute_eff * m / (m + half_tokens)),
    bytes / (hbm * memory_eff))``; the router takes its gate GEMM plus ``router_overhead_s``
    (softmax, top-k, normalisation, token permutation kernels).
    """

    compute_eff: float
    half_tokens: float
    memory_eff: float
    router_overhead_s: float
    source: str


# Fitted by `python -m simulator.calibrate.fit_moe` on the training rows (80%, seed 0) of
# LLMServingSim's H100 Mixtral-8x7B tp1/2/4 layers.csv (expert.w1/w2/w3 and gate rows).
_H100_EXPERTS = ExpertCalibration(compute_eff=0.852, half_tokens=134.0, memory_eff=0.821, router_overhead_s=52.2e-6,
                                  source="LLMServingSim H100 Mixtral-8x7B layers.csv, tp1/2/4 training rows")
EXPERT_CALIBRATION: dict[str, ExpertCalibration] = {
    "h100-sxm": _H100_EXPERTS,
    "h100-pcie": _H100_EXPERTS,  # same architecture
    "h200": _H100_EXPERTS,
}


def expert_calibration(rf: RooflineCostModel) -> ExpertCalibration:
    """The GPU's fitted expert constants, else its dense-GEMM calibration and the H100 router cost."""
    c = rf.cal
    if c.expert_compute_eff is not None:  # a calibration with its own expert constants ("today")
        return ExpertCalibration(c.expert_compute_eff, c.expert_half_tokens, c.expert_memory_eff,
                                 c.expert_router_overhead_s, c.source)
    found = EXPERT_CALIBRATION.get(rf.gpu.name)
    if found is not None:
        return found
    return ExpertCalibration(c.gemm_compute_eff, c.gemm_half_tokens, c.gemm_memory_eff,
                             _H100_EXPERTS.router_overhead_s, "dense GEMM calibration of the GPU")


def expected_experts_touched(num_tokens: np.ndarray | float, num_experts: int, top_k: int) -> np.ndarray:
    """Expected distinct experts a batch of ``num_tokens`` tokens routes to (each token picks
    ``top_k`` distinct experts uniformly): ``E * (1 - (1 - k/E)**n)``, at most ``n * k``."""
    n = np.asarray(num_tokens, dtype=np.float64)
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** n)


def expected_destination_ranks(num_experts: int, top_k: int, ep: int) -> float:
    """Expected EP ranks a token's ``top_k`` distinct experts live on, ``num_experts / ep`` of them a rank,
    chosen uniformly: ``ep * (1 - C(E - E/ep, k) / C(E, k))``; 1 at ``ep`` 1, rising towards ``min(k, ep)``
    (DeepSeek-V3, top-8 of 256: 3.61 at EP 4, 5.29 at EP 8, 7.27 at EP 32).

    What an EP dispatch sends a token to in a throughput (prompt) step: DeepEP's normal mode, pplx and
    TensorRT-LLM's all-to-all send it once to each rank that holds any of its experts, and the combine sums a
    rank's experts there before sending one vector back; an all-gather of the tokens (TensorRT-LLM without its
    all-to-all, vLLM's default) moves ``ep - 1`` copies, as much at EP 4 (3 against 2.7 remote) and more above.
    DeepEP's low-latency decode kernels send one copy an expert: a decode step's bandwidth part is priced low by
    k / this (1.5x at EP 8), its latency part is not; a DeepSeek-V3 NVFP4 decode step at 1,500 tokens of context
    (TensorRT-LLM's tables) is priced 1.9% / 3.1% low at 64 / 128 requests a rank on DEP8 B200, 3.4% / 1.4% at 256
    on DEP16 / DEP32 GB200. Redundant experts (E + r slots) are read as E: within 0.5% at r = E / 8."""
    if ep <= 1:
        return 1.0
    per_rank = num_experts / ep
    missed = 1.0  # P(no chosen expert on a given rank)
    for i in range(top_k):
        missed *= max(0.0, num_experts - per_rank - i) / (num_experts - i)
    return min(float(top_k), ep * (1.0 - missed))


def uses_moe_collectives(replica: ReplicaConfig) -> bool:
    """Whether a MoE layer swaps the MLP's TP all-reduce for :func:`ep_all_to_all`'s collectives
    (dispatch and combine under EP, gather and scatter without it): the rule every cost model applies
    when it counts a layer's all-reduces. Only attention data parallelism does: without it every GPU
    of the TP group already holds the step's tokens, so under EP each runs its own experts on them and
    the layer's TP all-reduce sums the outputs, as under a TP MoE (vLLM runs its all-to-all kernels
    only at ``dp_size > 1``, ``FusedMoEParallelConfig.use_all2all_kernels``; SGLang and TensorRT-LLM
    dispatch tokens over EP with DP attention)."""
    return replica.attention_dp > 1


def routed_experts(model: ModelSpec, replica: ReplicaConfig, tokens: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where one GPU's routed-expert work comes from, for ``tokens`` per rank (vectorised):
    ``(group, experts_here, per_expert)``. ``group``: tokens entering the routed experts (every
    attention-DP rank's: ``tokens * attention_dp``); ``experts_here``: the touched experts this GPU
    holds (``touched / ep``; each a ``1 / moe_tp`` slice of a whole expert); ``per_expert``: the
    busiest expert's tokens, ``moe_imbalance * group * k / touched``."""
    t = np.asarray(tokens, dtype=np.float64)
    k, ep = model.num_experts_per_tok, replica.ep
    group = t * replica.attention_dp  # tokens entering the routed experts: every DP rank's (t itself without DP)
    experts_here = expected_experts_touched(group, model.num_experts, k) / ep
    assignments = group * k / ep
    with np.errstate(divide="ignore", invalid="ignore"):
        per_expert = np.where(experts_here > 0, replica.moe_imbalance * assignments / experts_here, 0.0)
    return group, experts_here, per_expert


def moe_token_ops(rf: RooflineCostModel, tokens: np.ndarray) -> dict[str, np.ndarray]:
    """Per-MoE-layer seconds of each expert op on one GPU, vectorised over token counts."""
    m, r, c, g = rf.model, rf.replica, rf.cal, rf.gpu
    t = np.asarray(tokens, dtype=np.float64)
    h, k, num_e, ep, db, wb = m.hidden_size, m.num_experts_per_tok, m.num_experts, r.ep, rf.dtype_bytes, rf.weight_bytes
    f_local = m.expert_ffn_size // r.moe_tp
    up_mult = 2 if m.gated_mlp else 1
    group, touched, per_expert = routed_experts(m, r, t)  # touched: on this GPU
    assignments = group * k / ep
    flops = 2.0 * per_expert * h * (up_mult + 1) * f_local
    weight_bytes = (up_mult + 1) * h * f_local * wb
    act_bytes = per_expert * (2 * h + (up_mult + 1) * f_local) * db
    ec = expert_calibration(rf)
    # (the knee moves with the ridge point on a GPU the constants were not fitted on, as the dense GEMMs' does)
    eff_c = ec.compute_eff * per_expert / (per_expert + ec.half_tokens * rf.ridge_scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = np.where(per_expert > 0, flops / (rf.gemm_peak_flops * eff_c), 0.0)
    memory = (weight_bytes + act_bytes) / (g.hbm_bytes_per_s * ec.memory_eff)
    experts = np.where(t > 0, touched * np.maximum(compute, memory) + 2 * c.kernel_floor_s, 0.0)
    if c.expert_permute_s:  # a calibration with a token-permutation term ("today"; 2023 has none)
        experts = experts + np.where(t > 0, group * k * h * c.expert_permute_s, 0.0)
    # The router gate is a 16-bit GEMM in every checkpoint (engines build it as an unquantised replicated linear).
    router = np.where(t > 0, rf.gemm16(t, h, num_e) + ec.router_overhead_s, 0.0)
    act = rf.elementwise(r.moe_imbalance * assignments, (up_mult + 1) * f_local * db)
    shared_width = m.num_shared_experts * (m.shared_expert_ffn_size or m.expert_ffn_size) // r.tp
    shared = (rf.gemm(t, h, up_mult * shared_width) + rf.gemm(t, shared_width, h)
              + rf.elementwise(t, (up_mult + 1) * shared_width * db)) if shared_width else np.zeros_like(t)
    return {"moe_router": router, "moe_experts": experts, "moe_act": act, "moe_shared_experts": shared,
            "ep_all_to_all": ep_all_to_all(rf, t)}


def ep_all_to_all(rf: RooflineCostModel, tokens: np.ndarray) -> np.ndarray:
    """Dispatch and combine of one MoE layer under attention DP with expert parallelism, plus the
    all-gather that replaces the MLP's all-reduce; an all-gather and a reduce-scatter under attention DP
    over a TP MoE; zero without attention DP (:func:`uses_moe_collectives`)."""
    r, c, m = rf.replica, rf.cal, rf.model
    t = np.asarray(tokens, dtype=np.float64)
    dp = r.attention_dp
    if not uses_moe_collectives(r):
        return np.zeros_like(t)
    bw = rf.ep_link_bytes_per_s * c.allreduce_bus_eff  # the TP ring's link without DP
    if r.ep == 1:  # DP attention over a TP MoE: all-gather every rank's tokens, reduce-scatter the outputs
        g = r.tp * dp
        nbytes = t * dp * m.hidden_size * rf.dtype_bytes
        return np.where(t > 0, 2.0 * ((g - 1) / g * nbytes / bw + c.allreduce_latency_s), 0.0)
    # Each token to the other ranks holding its experts (on average (ep - 1) / ep of the ranks it touches).
    ranks = expected_destination_ranks(m.num_experts, m.num_experts_per_tok, r.ep)
    sent = t / r.tp * ranks * m.hidden_size * rf.dtype_bytes * (r.ep - 1) / r.ep
    a2a = 2.0 * (sent / bw + c.allreduce_latency_s)
    if r.tp == 1:  # a DP rank of one GPU: nothing to gather
        return np.where(t > 0, a2a, 0.0)
    # Restoring the rank's replicated activations: inside its TP group, over the TP ring's link.
    tp_bw = rf.tp_link_bytes_per_s * c.allreduce_bus_eff
    gather = (r.tp - 1) / r.tp * t * m.hidden_size * rf.dtype_bytes / tp_bw + c.allreduce_latency_s
    return np.where(t > 0, a2a + gather, 0.0)


def mla_projections(rf: RooflineCostModel, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q/kv projections, output projection) of one MLA layer on one GPU."""
    m = rf.model
    heads = rf.heads_per_gpu
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    down = m.kv_lora_rank + m.qk_rope_head_dim + (m.q_lora_rank or 0)
    gemm = rf.attn_gemm  # 16 bits where a 4-bit MoE checkpoint keeps its attention so
    proj = gemm(tokens, m.hidden_size, down)
    proj = proj + (gemm(tokens, m.q_lora_rank, heads * qk) if m.q_lora_rank
                   else gemm(tokens, m.hidden_size, heads * qk))
    # kv_b: in prefill it up-projects the keys and values; in absorbed decode the same weights
    # are applied to the queries and outputs instead; either way they are read once.
    proj = proj + gemm(tokens, m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.v_head_dim))
    if m.is_sparse_attention:  # DSA's indexer: queries from the query latent, a key and head weights from the
        # hidden state, every head on every TP rank (replicated weights)
        proj = proj + gemm(tokens, m.q_lora_rank or m.hidden_size, m.index_num_heads * m.index_head_dim)
        proj = proj + gemm(tokens, m.hidden_size, m.index_head_dim + m.index_num_heads)
    out = gemm(tokens, heads * m.v_head_dim, m.hidden_size)
    return proj, out


def mla_attention_prefill(rf: RooflineCostModel, pairs: float, kv_tokens: float, num_tokens: int,
                          num_prefills: float = 1.0) -> float:
    """One MLA layer's prefill attention: ``pairs`` causal query-key pairs, ``kv_tokens`` keys read,
    ``num_prefills`` sequences.

    A calibration with ``mla_up_compute_eff`` ("today") prices the pairs and the context's up-projection
    as two parts: the pairs at ``mla_compute_eff`` ramped by the mean keys per query (short prompts do not
    fill the tensor cores, as GQA prefill's ``attn_prefill_half_keys``), the up-projection at its own
    efficiency (a GEMM-like pass over the latent cache, no ramp), plus a cost per (sequence, head) and
    MLA prefill's own floor. Without it (2023): one efficiency for both, the attention floor."""
    m, c, g = rf.model, rf.cal, rf.gpu
    heads = rf.heads_per_gpu
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    flops = 2.0 * heads * (qk + m.v_head_dim) * pairs
    # Up-projecting the cached context (kv_lora -> heads * (nope + v)) for every chunk.
    up = 2.0 * kv_tokens * m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
    nbytes = kv_tokens * rf.kv_bytes_per_token + 2 * num_tokens * heads * qk * rf.dtype_bytes
    if c.mla_up_compute_eff is not None:
        eff = rf.mla_eff
        if c.mla_prefill_half_keys and num_tokens > 0:
            keys = pairs / num_tokens
            eff = eff * keys / (keys + c.mla_prefill_half_keys)
        compute = flops / (g.bf16_flops * eff) + up / (g.bf16_flops * c.mla_up_compute_eff)
        floor = rf.attn_floor if c.mla_prefill_floor_s is None else c.mla_prefill_floor_s
        return (max(compute, nbytes / (g.hbm_bytes_per_s * c.gemm_memory_eff)) + floor
                + num_prefills * heads * c.mla_prefill_per_head_s)
    flops += up
    return (max(flops / (g.bf16_flops * rf.mla_eff), nbytes / (g.hbm_bytes_per_s * c.gemm_memory_eff))
            + rf.attn_floor)


def mla_attention_decode(rf: RooflineCostModel, kv_tokens: float, num_decodes: int,
                         query_pairs: float | None = None, num_queries: int | None = None) -> float:
    """One MLA layer's absorbed decode attention over ``kv_tokens`` cached latents. A speculative
    verify runs the same kernel with several query tokens a sequence (FlashMLA folds them into
    the query-head rows): ``query_pairs`` (query-key pairs, default ``kv_tokens``) and
    ``num_queries`` (query tokens, default ``num_decodes``) then set the math and the query
    bytes, while each sequence's latents are read once."""
    m, c, g = rf.model, rf.cal, rf.gpu
    heads = rf.heads_per_gpu
    flops = 2.0 * heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim) * (kv_tokens if query_pairs is None else query_pairs)
    nbytes = kv_tokens * rf.kv_bytes_per_token + 2 * (num_decodes if num_queries is None else num_queries) * heads * (
        m.kv_lora_rank + m.qk_rope_head_dim) * rf.dtype_bytes
    if c.mla_decode_memory_eff is not None:  # MLA decode's own constants ("today"), not GQA decode's
        compute_eff = rf.mla_eff if c.mla_decode_compute_eff is None else c.mla_decode_compute_eff
        floor = rf.attn_floor if c.mla_decode_floor_s is None else c.mla_decode_floor_s
        return (max(flops / (g.bf16_flops * compute_eff), nbytes / (g.hbm_bytes_per_s * c.mla_decode_memory_eff))
                + num_decodes * (c.mla_decode_per_seq_s + heads * c.mla_decode_per_head_s) + floor)
    return (max(flops / (g.bf16_flops * rf.mla_eff), nbytes / (g.hbm_bytes_per_s * c.attn_decode_memory_eff))
            + num_decodes * c.attn_decode_per_seq_s + rf.attn_floor)
