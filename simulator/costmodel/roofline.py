"""Roofline cost model: spec-sheet peaks times calibrated efficiencies.

Each op of a transformer layer is priced on one GPU of the TP group (the shapes it
really runs: heads and FFN sharded by ``tp``) as

    time = max(flops / (peak * eff_compute), bytes / (hbm_bw * eff_memory)) + floor

with the efficiency factors of :mod:`simulator.costmodel.calibration`. Ops whose
cost depends only on the iteration's token count (projections, MLP, norms,
activation, rotary, residual adds, TP all-reduces) are summed into one table indexed
by token count, built once; the hot path is a list lookup plus a closed-form
attention term computed from the :class:`BatchShape` sums.

Assumptions, stated once:
- activations at ``dtype_bytes`` (bf16); weights at ``--dtype`` bytes, scales included (bf16,
  fp8, fp8-block, nvfp4, mxfp4, int4 weight-only: :mod:`simulator.config.precision`) and GEMMs at
  the FP8 or FP4 tensor-core peak for such weights where the GPU has one (else weight-only at
  the bf16 peak; MXFP4 experts at the activations of the engine's kernel, ``kernel_format``); KV cache at ``--kv-cache-dtype`` bytes; attention math at the bf16 peak;
  weights read once per GEMM, activations read and written once;
- mixture-of-experts layers, expert parallelism, attention data parallelism and multi-head
  latent attention are priced by :mod:`simulator.costmodel.moe`; sliding-window layers cap
  each query's keys at the window; a hybrid's Gated DeltaNet layers are priced by
  :mod:`simulator.costmodel.linear_attention`;
- attention prefill is FlashAttention-like (compute-bound, causal pairs counted
  exactly); decode attention is paged and memory-bound (reads every KV byte once) with
  a small per-sequence cost;
- TP all-reduce is a ring over the intra-node link: ``2 (tp-1)/tp * bytes / bw``;
  two per layer (one for parallel attention/MLP blocks such as Falcon's);
- the LM head runs only for rows that sample a token; sampling and CPU-side work are
  a per-iteration constant plus a per-sequence term.
"""

from __future__ import annotations

import numpy as np

from simulator.config.precision import WEIGHT_FORMATS, kernel_format
from simulator.config.run_config import ReplicaConfig
from simulator.config.topology import topology_for
from simulator.costmodel.base import BatchShape, TabulatedCostModel
from simulator.costmodel.calibration import RooflineCalibration, calibration_for, ridge_knee_scale, roofline_backend
from simulator.costmodel.linear_attention import hybrid_token_ops, linear_attention_time, linear_geometry
from simulator.costmodel.moe import (
    mla_attention_decode,
    mla_attention_prefill,
    mla_projections,
    moe_token_ops,
    uses_moe_collectives,
)
from simulator.costmodel.network import cross_node_latency_s, hop_time

# Layer ops whose cost depends only on the number of tokens in the iteration.
TOKEN_OPS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_act", "mlp_down",
             "norms", "rotary", "residual_add", "tp_all_reduce")



# Vectors of ``hidden_size`` a pipeline hop sends per token: the hidden states and the residual stream, as
# vLLM's IntermediateTensors ({"hidden_states", "residual"}) and SGLang's PPProxyTensors carry them between
# stages of its pre-norm models (the residual is added back after the next stage's first norm).
PP_HOP_VECTORS = 2

class RooflineCostModel(TabulatedCostModel):
    """Analytical cost model for any catalog GPU; the default when no profile exists."""

    name = "roofline"
    STRETCH_FORMS = frozenset({"decode-terms", "chunk-terms"})

    def __init__(self, replica: ReplicaConfig, calibration: RooflineCalibration | None = None,
                 table_tokens: int = 16384, engine: object = None, ridge_scale: float | None = None) -> None:
        super().__init__(replica)
        # The calibration's constants for this GPU, engine backend ("today": --kernels' backend, else the
        # engine preset's, else every backend's pooled) and weight format (its MoE expert lane).
        backend = roofline_backend(replica.kernels, engine)
        # The format the kernels run: --dtype, except mxfp4, which the backend's MXFP4 MoE kernel makes w4a16 or w4a8.
        self.kernel_format = kernel_format(replica.dtype, backend, replica.gpu_spec)
        # How far the GEMM knee moves with this GPU's ridge point (calibration.ridge_knee_scale; on a GPU its
        # generation's constants were not fitted on): given, else the replica's where its calibration prices the
        # run, else 1.0 (a calibration given outright: a fitter's constants on the GPUs they are fitted on)
        self.ridge_scale = (ridge_scale if ridge_scale is not None else 1.0 if calibration is not None
                            else ridge_knee_scale(replica.gpu_spec, replica.roofline_calibration))
        self.cal = calibration or calibration_for(replica.gpu, replica.roofline_calibration, backend,
                                                  self.kernel_format)
        m, tp, db = self.model, replica.tp, replica.dtype_bytes
        self.dtype_bytes = db
        self.heads_per_gpu = m.num_heads // tp
        self.kv_heads_per_gpu = max(1, m.num_kv_heads // tp)
        self.q_per_gpu = self.heads_per_gpu * m.head_dim
        self.kv_per_gpu = self.kv_heads_per_gpu * m.head_dim
        self.ffn_per_gpu = m.ffn_size // tp
        self.kv_bytes_per_token = 2 * self.kv_per_gpu * db  # per layer, per GPU
        self.tp_link_bytes_per_s = self._tp_link_bandwidth()
        # The kind of link the TP ring runs on; a calibration may hold its own all-reduce constants for it.
        topo = self.topology
        self.tp_link_kind = "pcie" if topo.intra.kind == "pcie" and not topo.tp_spans_nodes else "nvlink"
        self.cal = self.cal.for_link(self.tp_link_kind)
        # The MoE all-to-all's link: the TP ring's without attention DP, the DP group's with it.
        self.ep_link_bytes_per_s = self.topology.ep_bytes_per_s
        self._init_numerics_and_experts()
        self._build_tables(table_tokens + 1)

    def _init_numerics_and_experts(self) -> None:
        """Weight/KV dtypes, FP8 peak, MoE layer mix, MLA and sliding-window attention
        (:mod:`simulator.costmodel.moe`); every default leaves a bf16 dense model's prices unchanged."""
        m, r = self.model, self.replica
        self.weight_bytes = r.weight_bytes
        # FP8 (per-tensor or block) and FP4 (NVFP4/MXFP4) weights run on those tensor cores where the
        # GPU has them (simulator.config.precision), else weight-only at the bf16 peak.
        fmt = WEIGHT_FORMATS[self.kernel_format]
        self.gemm_peak_flops = fmt.peak_flops(r.gpu_spec)
        # The calibrated small-batch ramp of GEMM efficiency stands for the weight-streaming regime
        # of bf16 kernels; a weight-only quantized kernel (int4, mxfp4-w4a16, or fp8/fp4 without those
        # tensor cores) streams weight_bytes/dtype_bytes as much, so its knee moves to as many fewer tokens.
        # On a GPU its generation's constants were not fitted on, the knee moves with the GPU's ridge point too.
        self.gemm_knee_scale = ((self.weight_bytes / self.dtype_bytes if fmt.runs_weight_only(r.gpu_spec) else 1.0)
                                * self.ridge_scale)
        # This dtype's GEMM curve (the calibration's gemm_* fields unless it has one for the dtype's class).
        self.gemm_constants = self.cal.gemm_constants(self.kernel_format)
        # A 4-bit MoE checkpoint's attention projections, and those of a checkpoint that keeps its attention at 16
        # bits (Meta's FP8 Llama-3.1-405B), run 16-bit GEMMs (attn_gemm); the router gate always does (gemm16).
        self.attn_16bit = r.attention_16bit
        self._bf16_constants = self.cal.gemm_constants("bf16")
        if r.kv_cache_dtype != "auto" or m.is_mla:
            # (attention reads the latents; a DSA model's indexer keys are read by its indexer: indexer_time)
            self.kv_bytes_per_token = m.kv_bytes_per_token_per_gpu_layer(r.kv_cache_bytes, r.tp) - m.index_key_bytes
        # Share of layers with a dense MLP (the per-layer tables are means over layers).
        self.dense_fraction = 1.0 - m.num_moe_layers / m.num_layers
        self.sliding_fraction = m.num_sliding_layers / m.num_layers
        self.sliding_window = m.sliding_window
        # DeepSeek Sparse Attention: every layer's queries attend to at most index_topk keys, the ones its indexer
        # picks; as many as a window of that size holds, so the window's pricing caps them (keys capped at
        # n x topk over a batch: exact where every sequence is on one side of topk, above it where they straddle
        # it). The indexer itself scores every key: indexer_time.
        self.sparse = m.is_sparse_attention
        if self.sparse:
            self.sliding_fraction, self.sliding_window = 1.0, m.index_topk
        linear_geometry(self)  # a hybrid's share of Gated DeltaNet layers (linear_fraction) and their shapes
        self.mla = m.is_mla  # checked once per attention call: keep it a plain attribute
        # Seconds per prefilling sequence of its per-(sequence, head) cost (0.0 in the 2023 calibrations).
        self.prefill_seq_s = self.heads_per_gpu * self.cal.attn_prefill_per_head_s
        # Whether a prompt's successive chunks have prefill_attention_list's plain-float form: full
        # attention (MLA and sliding windows price prefill another way), with or without the
        # 'today' calibration's efficiency ramp and per-sequence term.
        self.chunk_terms_ok = not (self.mla or self.sliding_fraction or self.linear_fraction)
        # The calibration's derived attention constants, read once (attention is priced every step).
        self.attn_floor = self.cal.attn_floor
        # Decode attention's per-sequence cost with its per-(sequence, KV head) and per-(sequence, query head)
        # parts folded in, and its floor ("today"; the 2023 calibrations: attn_decode_per_seq_s + 0.0 + 0.0,
        # the same float, and attn_floor), so every decode form stays n * per_seq + floor.
        c = self.cal
        self.decode_seq_s = (c.attn_decode_per_seq_s + self.kv_heads_per_gpu * c.attn_decode_per_kv_head_s
                             + self.heads_per_gpu * c.attn_decode_per_head_s)
        self.attn_decode_floor = self.attn_floor if c.attn_decode_floor_s is None else c.attn_decode_floor_s
        self.decode_overlap = c.attn_decode_overlap  # max(KV read, n * decode_seq_s) + floor, else their sum
        self.mla_eff = self.cal.mla_eff
        self.prefill_ramp = bool(self.cal.attn_prefill_half_keys)

    # -- primitive pricing -------------------------------------------------------------
    def _tp_link_bandwidth(self) -> float:
        """Bandwidth of the TP ring's slowest hop (:mod:`simulator.config.topology`): NVLink, PCIe
        where pairwise NVLink rings cross it, or the inter-node link for TP across nodes."""
        self.topology = topology_for(self.replica)
        return self.topology.tp_ring_bytes_per_s

    def send_recv_time(self, num_tokens: int, hop: int | None = None) -> float:
        """Activations of ``num_tokens`` tokens from stage ``hop`` to ``hop + 1`` over that hop's
        link (intra- or inter-node); ``hop=None`` prices the slowest hop."""
        topo = self.topology
        if topo.pp == 1 or num_tokens <= 0:
            return 0.0
        nbytes = num_tokens * PP_HOP_VECTORS * self.model.hidden_size * self.dtype_bytes
        latency = self.cal.send_recv_latency_s  # measured NCCL send/recv, where the calibration has it
        if hop is None:
            return max(hop_time(topo, nbytes, h, latency) for h in range(topo.pp - 1))
        return hop_time(topo, nbytes, hop, latency)

    def gemm(self, tokens: np.ndarray, k: int, n: int) -> np.ndarray:
        """Time of ``[tokens, k] @ [k, n]`` in bf16 on one GPU."""
        return self._gemm_time(tokens, k, n, self.weight_bytes, self.gemm_peak_flops, self.gemm_constants,
                               self.gemm_knee_scale)

    def gemm16(self, tokens: np.ndarray, k: int, n: int) -> np.ndarray:
        """A GEMM a quantized checkpoint keeps at 16 bits (weights at ``dtype_bytes``, the bf16 peak and
        curve): its LM head and MoE router gate always (FP8, NVFP4 and MXFP4 checkpoints leave ``lm_head`` and the
        gate unquantized, and memory is planned so), and a 4-bit MoE checkpoint's attention."""
        return self._gemm_time(tokens, k, n, float(self.dtype_bytes), self.gpu.bf16_flops, self._bf16_constants,
                               self.ridge_scale)

    def attn_gemm(self, tokens: np.ndarray, k: int, n: int) -> np.ndarray:
        """An attention projection's GEMM: :meth:`gemm`, or :meth:`gemm16` where the checkpoint keeps them at 16 bits
        (``ReplicaConfig.attention_16bit``)."""
        return self.gemm16(tokens, k, n) if self.attn_16bit else self.gemm(tokens, k, n)

    def _gemm_time(self, tokens: np.ndarray, k: int, n: int, weight_bytes: float, peak_flops: float,
                   constants: tuple[float, float, float, float, float], knee_scale: float) -> np.ndarray:
        t = np.asarray(tokens, dtype=np.float64)
        flops = 2.0 * t * k * n
        # Weights at their format's bytes, activations at dtype_bytes (bit-identical to the bf16 form when equal).
        nbytes = k * n * weight_bytes + t * k * self.dtype_bytes + t * n * self.dtype_bytes
        compute_eff, half_tokens, memory_eff, floor, act_elem_s = constants
        eff_c = compute_eff * t / (t + half_tokens * knee_scale)
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(t > 0, flops / (peak_flops * eff_c), 0.0)
        memory = nbytes / (self.gpu.hbm_bytes_per_s * memory_eff)
        # act_elem_s: a low-precision lane's activation quantisation, per activation element (0.0 for bf16).
        return np.where(t > 0, np.maximum(compute, memory) + floor + t * k * act_elem_s, 0.0)

    def elementwise(self, tokens: np.ndarray, bytes_per_token: float, kernels: int = 1,
                    eff: float | None = None) -> np.ndarray:
        c = self.cal
        t = np.asarray(tokens, dtype=np.float64)
        mem = t * bytes_per_token / (self.gpu.hbm_bytes_per_s * (eff or c.elementwise_memory_eff))
        return np.where(t > 0, mem + kernels * c.kernel_floor_s, 0.0)

    def all_reduce(self, tokens: np.ndarray) -> np.ndarray:
        """One ring all-reduce of the hidden states across the TP group."""
        tp = self.replica.tp
        t = np.asarray(tokens, dtype=np.float64)
        if tp == 1:
            return np.zeros_like(t)
        nbytes = t * self.model.hidden_size * self.dtype_bytes
        bw = self.tp_link_bytes_per_s * self.cal.allreduce_bus_eff
        return np.where(t > 0, 2.0 * (tp - 1) / tp * nbytes / bw + self.collective_latency_s(), 0.0)

    def collective_latency_s(self) -> float:
        """The latency each TP all-reduce is charged: a fixed part and, with the 'today' constants,
        one per GPU past two (the 2023 calibration's is 0.0); a TP group across nodes (outside one NVLink
        domain) adds :func:`cross_node_latency_s` (the calibrated part was measured inside a node)."""
        return (self.cal.allreduce_latency_s + max(0, self.replica.tp - 2) * self.cal.allreduce_gpu_latency_s
                + cross_node_latency_s(self.topology))

    # -- per-op view ----------------------------------------------------------------------
    def token_ops(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Per-layer time of each token-count op, vectorised over token counts."""
        m, db = self.model, self.dtype_bytes
        h = m.hidden_size
        up_width = (2 if m.gated_mlp else 1) * self.ffn_per_gpu
        act_bytes = (up_width + self.ffn_per_gpu) * db
        num_all_reduce = 1 if m.parallel_attn_mlp else 2
        num_norms = 1 if m.parallel_attn_mlp else 2
        dense = self.dense_fraction
        # EP (or attention-DP) layers swap the MLP all-reduce for all-to-alls (or a gather and scatter)
        if m.is_moe and uses_moe_collectives(self.replica):
            num_all_reduce -= 1.0 - dense
        if m.is_mla:
            qkv, out_proj = mla_projections(self, tokens)
        else:
            gate = self.q_per_gpu if m.attn_output_gate else 0  # gated attention: q_proj also emits the gate
            qkv = self.attn_gemm(tokens, h, self.q_per_gpu + gate + 2 * self.kv_per_gpu)
            out_proj = self.attn_gemm(tokens, self.q_per_gpu, h)
        ops = {
            "qkv_proj": qkv,
            "attn_out_proj": out_proj,
            "mlp_up_gate": self.gemm(tokens, h, up_width),
            "mlp_act": self.elementwise(tokens, act_bytes),
            "mlp_down": self.gemm(tokens, self.ffn_per_gpu, h),
            "norms": self.elementwise(tokens, num_norms * 2 * h * db, kernels=num_norms),
            "rotary": self.elementwise(tokens, 2 * (self.q_per_gpu + self.kv_per_gpu) * db) if m.rotary
            else np.zeros_like(np.asarray(tokens, dtype=np.float64)),
            "residual_add": self.elementwise(tokens, 2 * 3 * h * db, kernels=2, eff=self.cal.residual_add_memory_eff),
            "tp_all_reduce": num_all_reduce * self.all_reduce(tokens),
        }
        if m.is_moe:  # per-layer means: dense MLPs in the dense layers, experts in the others
            for op in ("mlp_up_gate", "mlp_act", "mlp_down"):
                ops[op] = dense * ops[op]
            for op, value in moe_token_ops(self, tokens).items():
                ops[op] = (1.0 - dense) * value
        if self.linear_fraction:  # a hybrid: its Gated DeltaNet layers' projections and element-wise passes
            hybrid_token_ops(self, tokens, ops)
        return ops

    def attention_prefill(self, shape: BatchShape) -> float:
        if shape.num_prefills == 0:
            return 0.0
        # (a DSA model's every layer is capped: its full-attention price would be computed only to be replaced)
        t = 0.0 if self.sparse else self._attention_prefill(shape.prefill_attn_pairs, shape.prefill_kv_tokens,
                                                             shape.num_prefill_tokens, shape.num_prefills)
        if self.sliding_fraction:  # window layers: each query sees at most `window` keys
            w = self.sliding_window
            local = self._attention_prefill(min(shape.prefill_attn_pairs, shape.num_prefill_tokens * w),
                                            min(shape.prefill_kv_tokens, shape.num_prefill_tokens + shape.num_prefills * w),
                                            shape.num_prefill_tokens, shape.num_prefills)
            t = local if self.sparse else t + self.sliding_fraction * (local - t)
        if self.linear_fraction:  # a hybrid's linear layers run their recurrence instead
            t += self.linear_fraction * (linear_attention_time(self, shape.num_prefill_tokens, shape.num_prefills) - t)
        if self.sparse:
            t += self.indexer_time(shape.prefill_attn_pairs, shape.prefill_kv_tokens, shape.num_prefill_tokens)
        return t

    def indexer_time(self, pairs: float, kv_tokens: float, num_queries: float) -> float:
        """One layer's DeepSeek Sparse Attention indexer: ``num_queries`` queries each score every causal key
        (``pairs`` query-key pairs in all; a decode's are its KV length) with all ``index_num_heads`` heads on FP8
        tensor cores, reading ``kv_tokens`` keys of its cache and writing a float32 score a pair, which the top-k
        reads back. Every TP rank runs all the indexer's heads (SGLang's and vLLM's indexer weights are
        replicated), so TP does not divide it. One kernel floor for the logits and one for the top-k. Linear in
        the keys for a batch (the decode curves rely on it): the read outweighs the math on every GPU with FP8
        tensor cores, the only ones a DSA model runs on (ReplicaConfig)."""
        m, c, g = self.model, self.cal, self.gpu
        flops = 2.0 * m.index_num_heads * m.index_head_dim * pairs
        nbytes = (kv_tokens * m.index_key_bytes + num_queries * m.index_num_heads * m.index_head_dim
                  + 2 * 4 * pairs)
        peak = g.fp8_flops or g.bf16_flops
        return (max(flops / (peak * c.attn_prefill_compute_eff), nbytes / (g.hbm_bytes_per_s * c.gemm_memory_eff))
                + 2.0 * c.kernel_floor_s)

    def _attention_prefill(self, pairs: float, kv_tokens: float, num_tokens: int, num_prefills: float = 1.0) -> float:
        if self.mla:
            return mla_attention_prefill(self, pairs, kv_tokens, num_tokens, num_prefills)
        c, g, d, db = self.cal, self.gpu, self.model.head_dim, self.dtype_bytes
        flops = 4.0 * self.heads_per_gpu * d * pairs
        nbytes = kv_tokens * self.kv_bytes_per_token + 2 * num_tokens * self.q_per_gpu * db
        eff = c.prefill_compute_eff(pairs, num_tokens) if self.prefill_ramp else c.attn_prefill_compute_eff
        return (max(flops / (g.bf16_flops * eff), nbytes / (g.hbm_bytes_per_s * c.gemm_memory_eff))
                + self.attn_floor + num_prefills * self.prefill_seq_s)

    def prefill_attention_list(self, chunk: int, kv_before: int, num_iterations: int) -> list[float] | None:
        """:meth:`attention_prefill` of one ``chunk``-token chunk over ``kv_before`` cached
        tokens, then ``chunk`` more each iteration (a prompt's successive chunks), in plain
        floats with the scalar path's operations in its order (so each element is that
        iteration's price bit for bit); None for MLA and sliding-window attention."""
        if not self.chunk_terms_ok:
            return None
        c, g = self.cal, self.gpu
        # _attention_prefill's terms for one chunk (num_prefills 1), its constant factors evaluated
        # once in the same order: flops = head * pairs, pairs = chunk * p + chunk * (chunk + 1) / 2
        # (BatchShape.add_prefill's sum: an int plus a float), keys read p + chunk.
        head = 4.0 * self.heads_per_gpu * self.model.head_dim
        kvb, query = self.kv_bytes_per_token, 2 * chunk * self.q_per_gpu * self.dtype_bytes
        bandwidth, floor, half = g.hbm_bytes_per_s * c.gemm_memory_eff, self.attn_floor, chunk * (chunk + 1) / 2
        seq = 1 * self.prefill_seq_s  # num_prefills * prefill_seq_s (0.0 in the 2023 calibrations: adds nothing)
        steps = range(kv_before, kv_before + chunk * num_iterations, chunk)
        if self.prefill_ramp:
            # RooflineCalibration.prefill_compute_eff(pairs, chunk): the efficiency ramped by keys per query.
            eff, half_keys, peak = c.attn_prefill_compute_eff, c.attn_prefill_half_keys, g.bf16_flops
            out = []
            for p in steps:
                pairs = chunk * p + half
                keys = pairs / chunk
                f = head * pairs / (peak * (eff * keys / (keys + half_keys)))
                b = ((p + chunk) * kvb + query) / bandwidth
                out.append((f if f > b else b) + floor + seq)
            return out
        compute = g.bf16_flops * c.attn_prefill_compute_eff
        return [(f if (f := head * (chunk * p + half) / compute) > (b := ((p + chunk) * kvb + query) / bandwidth)
                 else b) + floor + seq
                for p in steps]

    def attention_decode(self, shape: BatchShape) -> float:
        if shape.num_decodes == 0:
            return 0.0
        t = 0.0 if self.sparse else self._attention_decode(shape.decode_kv_tokens, shape.num_decodes)
        if self.sliding_fraction:
            local = self._attention_decode(min(shape.decode_kv_tokens, shape.num_decodes * self.sliding_window),
                                           shape.num_decodes)
            t = local if self.sparse else t + self.sliding_fraction * (local - t)
        if self.linear_fraction:
            t += self.linear_fraction * (linear_attention_time(self, shape.num_decodes, shape.num_decodes) - t)
        if self.sparse:
            t += self.indexer_time(shape.decode_kv_tokens, shape.decode_kv_tokens, shape.num_decodes)
        return t

    def _attention_decode(self, kv_tokens: float, num_decodes: int) -> float:
        if self.mla:
            return mla_attention_decode(self, kv_tokens, num_decodes)
        c, g = self.cal, self.gpu
        nbytes = kv_tokens * self.kv_bytes_per_token + 2 * num_decodes * self.q_per_gpu * self.dtype_bytes
        if self.decode_overlap:
            return (max(nbytes / (g.hbm_bytes_per_s * c.attn_decode_memory_eff), num_decodes * self.decode_seq_s)
                    + self.attn_decode_floor)
        return (nbytes / (g.hbm_bytes_per_s * c.attn_decode_memory_eff)
                + num_decodes * self.decode_seq_s + self.attn_decode_floor)

    def attention_verify(self, kv_tokens: float, num_seqs: int, query_pairs: float, num_queries: int) -> float:
        """One layer's decode attention for ``num_seqs`` sequences of which some bring several
        query tokens (speculative verifies): the engines run verifies through their decode
        kernels (vLLM's FlashAttention/FlashInfer/FlashMLA backends take a uniform query length
        ``1 + k`` as decode; the query tokens fold into the query-head rows), so each sequence's
        ``kv_tokens`` keys are read once while the math covers ``query_pairs`` query-key pairs of
        ``num_queries`` query tokens. With one query a sequence this is :meth:`attention_decode`'s
        price plus the (memory-bound) math bound."""
        t = 0.0 if self.sparse else self._attention_verify(kv_tokens, num_seqs, query_pairs, num_queries)
        if self.sliding_fraction:
            w = self.sliding_window
            local = self._attention_verify(min(kv_tokens, num_seqs * w), num_seqs, min(query_pairs, num_queries * w),
                                           num_queries)
            t = local if self.sparse else t + self.sliding_fraction * (local - t)
        if self.linear_fraction:
            t += self.linear_fraction * (linear_attention_time(self, num_queries, num_seqs) - t)
        if self.sparse:
            t += self.indexer_time(query_pairs, kv_tokens, num_queries)
        return t

    def _attention_verify(self, kv_tokens: float, num_seqs: int, query_pairs: float, num_queries: int) -> float:
        if self.mla:
            return mla_attention_decode(self, kv_tokens, num_seqs, query_pairs, num_queries)
        c, g = self.cal, self.gpu
        flops = 4.0 * self.heads_per_gpu * self.model.head_dim * query_pairs
        nbytes = kv_tokens * self.kv_bytes_per_token + 2 * num_queries * self.q_per_gpu * self.dtype_bytes
        bound = max(flops / (g.bf16_flops * c.attn_prefill_compute_eff), nbytes / (g.hbm_bytes_per_s * c.attn_decode_memory_eff))
        if self.decode_overlap:  # the decode kernel's form (_attention_decode): its work items overlap the bound
            return max(bound, num_seqs * self.decode_seq_s) + self.attn_decode_floor
        return bound + num_seqs * self.decode_seq_s + self.attn_decode_floor

    def decode_attention_terms(self, n: int) -> tuple[float, float, float, float, float, bool] | None:
        """Decode attention of ``n`` sequences holding ``kv`` KV tokens in all, as
        ``(kv * kvb + per_token) / bandwidth + per_seq + floor``, or with ``overlap``
        ``max((kv * kvb + per_token) / bandwidth, per_seq) + floor``: these six terms (the scalar
        path's float ops, its constant products evaluated once), for a caller that writes the
        formula into its own loop over a stretch; None for MLA and sliding-window attention (a hybrid's
        linear layers mix in after, :meth:`decode_linear_mix`)."""
        if self.mla or self.sliding_fraction:
            return None
        c, g = self.cal, self.gpu
        return (self.kv_bytes_per_token, 2 * n * self.q_per_gpu * self.dtype_bytes,
                g.hbm_bytes_per_s * c.attn_decode_memory_eff, n * self.decode_seq_s, self.attn_decode_floor,
                self.decode_overlap)

    def attention_decode_vector(self, n: int, kv_sums: np.ndarray, kv_sq_sums: np.ndarray,
                                kv_maxes: np.ndarray) -> np.ndarray | None:
        """:meth:`attention_decode` for many decode batches of ``n`` sequences, same float ops;
        None (price each iteration) for MLA and sliding-window attention."""
        if self.mla or self.sliding_fraction:
            return None
        c, g = self.cal, self.gpu
        nbytes = kv_sums * self.kv_bytes_per_token + 2 * n * self.q_per_gpu * self.dtype_bytes
        if self.decode_overlap:  # _attention_decode's max(read, per_seq) + floor, element by element
            out = np.maximum(nbytes / (g.hbm_bytes_per_s * c.attn_decode_memory_eff), n * self.decode_seq_s)
            out += self.attn_decode_floor
        else:
            out = nbytes / (g.hbm_bytes_per_s * c.attn_decode_memory_eff) + n * self.decode_seq_s + self.attn_decode_floor
        mix = self.decode_linear_mix(n)
        if mix is not None:  # attention_decode's t += f * (g - t), element by element
            f, lin = mix
            out = out + f * (lin - out)
        return out

    def decode_linear_mix(self, n: int) -> tuple[float, float] | None:
        """A hybrid's ``(linear share, recurrence seconds)`` for ``n`` decodes: its decode attention is
        the full-attention price ``t`` then ``t + share * (recurrence - t)``; None for other models."""
        if not self.linear_fraction:
            return None
        return self.linear_fraction, linear_attention_time(self, n, n)

    def decode_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int,
                             num_iterations: int) -> list[float]:
        # Vectorised only for this exact class: a subclass may add terms, so it gets the generic path.
        if type(self) is RooflineCostModel and num_iterations > 1 and num_decodes > 0:
            times = self._vector_stretch(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations,
                                         self.attention_decode_vector)
            if times is not None:
                return times
        return super().decode_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations)

    def embedding_time(self, tokens: np.ndarray) -> np.ndarray:
        return self.elementwise(tokens, 2 * self.model.hidden_size * self.dtype_bytes, eff=self.cal.embedding_memory_eff)

    def logits_gather(self, num_logits: np.ndarray) -> np.ndarray:
        """Gathering the vocab-sharded logits of ``num_logits`` tokens over the TP group: one collective, whose
        bytes are ``vocab / (2 hidden)`` times an all-reduce of the hidden states' (an all-gather moves half an
        all-reduce's bytes an element), its latency paid once."""
        n = np.asarray(num_logits, dtype=np.float64)
        if self.replica.tp == 1:
            return np.zeros_like(n)
        latency = self.collective_latency_s()
        ratio = self.model.vocab_size / self.model.hidden_size / 2
        return np.where(n > 0, (self.all_reduce(n) - latency) * ratio + latency, 0.0)

    def lm_head_time(self, num_logits: np.ndarray) -> np.ndarray:
        m, n = self.model, np.asarray(num_logits, dtype=np.float64)
        lm_head = self.gemm16(n, m.hidden_size, m.vocab_size // self.replica.tp)
        gather = self.logits_gather(n)
        norm = self.elementwise(n, 2 * m.hidden_size * self.dtype_bytes)
        return np.where(n > 0, lm_head + gather + norm + self.cal.kernel_floor_s, 0.0)

    # -- CostModel interface ------------------------------------------------------------------
    def overhead_time(self, shape: BatchShape) -> float:
        c = self.cal
        return c.cpu_overhead_s + c.cpu_overhead_per_seq_s * (shape.num_prefills + shape.num_decodes)
