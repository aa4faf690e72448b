"""Pricing speculative decoding: the verify pass, the drafter, and the drafter's memory.

The verify pass is priced by the target's own cost model. For each speculating request the
scheduler writes ``k + 1`` query tokens (the last token and ``k`` drafts) over its context into
the batch shape (:meth:`SpecBatchShape.add_verify`): ``k + 1`` GEMM rows (the request's decode
row plus ``k`` rows counted with the step's non-decode tokens, so they take token-budget slots
and GEMM rows like any other token) and ``k + 1`` sampled rows for the LM head (every position
is scored). At small batches the step stays weight-bound and ``k + 1`` tokens cost little more
than one; at large batches they make the step compute-bound and the speculation stops paying
(the crossover ``results/speculative/`` shows).

Its attention is the engines' *decode* kernel, not a prefill: vLLM (V1) takes a batch whose
requests all have query length ``1 + k`` as a uniform decode (its attention backends' decode
path, captured in CUDA graphs for that query length; the MLA backends send query lengths up to
``1 + k`` to FlashMLA's decode kernel), SGLang and TensorRT-LLM likewise run target-verify
through their decode kernels. Each verifying request's KV (context and its ``k + 1`` new keys)
is read once and the ``k + 1`` queries share it, so the shape holds a verify as one decode over
``context + k + 1`` keys, and :class:`VerifyKernels` prices the math of its ``k + 1`` queries
on top (the kernel model's :meth:`attention_verify`, where it has one). Priced as a prefill
chunk instead, an MLA model paid the non-absorbed prefill form (the whole context up-projected
for every verify: 9 ms of a 29 ms DeepSeek-V3 step at 16 requests) and a GQA model read the KV
at the prefill kernels' efficiency.

The drafter's cost is added per step by :class:`SpeculativeCostModel`, from the few sums
:class:`SpecBatchShape` carries (speculating requests, their context sums, the step's ``k``):

- ``draft_model``: ``k`` autoregressive decode passes of the small model over the speculating
  requests (context ``j`` tokens longer in pass ``j``), plus its own pass over the step's
  prefill chunks (a draft model keeps its own KV cache, so it prefills every prompt too), priced
  by the roofline kernel model of the draft on the target's GPU at ``draft_tp`` (the target's TP where unset, as
  vLLM sets it; the calibration the target's engine selects), kernels only plus the per-pass CPU below;
- ``eagle``/``eagle3``/``mtp``: ``k`` sequential passes of one target-sized decoder layer plus
  the LM head over the speculating requests (an EAGLE head or MTP module is one layer reusing
  the target's head, behind its input projection: MTP's eh_proj and EAGLE's fc over two hidden states each pass,
  EAGLE-3's over three on a step's first), kernels plus the per-pass CPU below; a known EAGLE head
  (:data:`~simulator.config.speculative.DRAFT_HEADS`) as its own layers and draft vocabulary's LM head, priced
  as a draft model is, with an EAGLE-3 head's wider inputs (the embedding beside the hidden state into its first
  layer's q, k and v each pass; the fc over three target hidden states on a step's first pass);
- *parallel drafting* (``parallel_drafting``: P-EAGLE, PARD): one pass of the drafter a step, over ``k`` rows a
  request (the last token and ``k - 1`` mask tokens), in place of ``k`` passes of one row;
- ``medusa``: one pass of ``k`` parallel heads on the target's last hidden state (each a
  residual ``hidden x hidden`` block and its own LM head: Medusa's heads predict positions
  ``1..k`` at once, and vLLM's Medusa proposer runs them in one forward), so one pass a step
  whatever ``k``;
- ``ngram``: nothing (a CPU lookup in the request's own tokens).

Each drafter pass also pays :attr:`SpeculativeCostModel.pass_cpu_s`: an engine that runs its
CPU work synchronously (``overlap_cpu`` off) launches each pass from Python and samples its
token, so a pass costs its fixed per-step CPU (``cpu_iteration_s``; the per-request terms are
paid once a step: vLLM V0's draft worker runs its ``k`` passes in one call, advancing the inputs
on the GPU, and a batch-1 research loop has one request); an engine that hides its CPU (async
scheduling, the drafter in the step's CUDA graphs: vLLM V1's EAGLE, MTP and draft-model proposers) adds nothing, nor does an
MTP/EAGLE drafter that an engine launches as one graph inside the step (``drafter_in_graph``:
TensorRT-LLM's "one model" MTP and EAGLE-3); a bare kernel model charges its own fixed per-step
overhead, as it does the target's step. vLLM's async scheduling takes EAGLE, MTP and draft-model drafters
(:data:`ASYNC_DRAFTERS`): with CPU n-gram lookup or Medusa the whole run is synchronous (``vllm-v1``'s overlap
off, its CPU added to every step and pass: :func:`synchronous_unless_async_drafter`).

Memory (:func:`speculative_memory_plan`): a draft model holds its weights and a KV cache of
its own for every token the target caches; an EAGLE/MTP head, one layer's weights (an MTP module the target's last
layer's, an MoE one where the last is; an unknown EAGLE head the mean layer's) and its input projection (16-bit,
whole on every GPU), and one layer's KV. (Its time prices the mean layer for both.)
The target's KV blocks shrink accordingly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from simulator.config.catalog import ModelSpec, get_gpu
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.config.speculative import SpeculativeConfig, draft_spec
from simulator.costmodel.base import BatchShape, CostModel


@dataclass(frozen=True)
class DraftReplicaConfig(ReplicaConfig):
    """A replica layout for pricing a draft model that may not be in the catalog."""

    draft: ModelSpec | None = None

    def __post_init__(self) -> None:  # the model is given, not looked up; the GPU is canonicalised
        object.__setattr__(self, "gpu", get_gpu(self.gpu).name)

    @property
    def model_spec(self) -> ModelSpec:
        assert self.draft is not None
        return self.draft


def draft_replica(target: ReplicaConfig, spec: SpeculativeConfig) -> ReplicaConfig:
    """The draft model's layout: the target's GPU, numerics and roofline constants, ``draft_tp`` GPUs (unset: the
    target's TP, as vLLM sets it); a known EAGLE head's, at the target's TP (a head is sharded as the target is)."""
    assert spec.draft_model is not None
    head = spec.known_head
    model = head.spec if head is not None else draft_spec(spec.draft_model)
    tp = target.tp if head is not None else spec.draft_tp_for(target.tp)
    if tp not in (1, target.tp):  # the draft runs on the target's GPUs: one of them, or all (vLLM's rule)
        raise ConfigError("speculative.draft_tp", f"draft_tensor_parallel_size {tp} on a tp={target.tp} "
                          "replica: the draft model runs on the target's GPUs, on one or on all of them",
                          f"use draft_tensor_parallel_size 1{f' or {target.tp}' if target.tp > 1 else ''}")
    if model.num_heads % tp:
        given = f"draft_tp={tp}" if spec.draft_tp is not None else \
            f"draft_tensor_parallel_size unset takes the target's tp={tp}, which"
        raise ConfigError("speculative.draft_tp", f"{given} does not divide {model.name}'s {model.num_heads} heads",
                          'give --speculative-config "draft_tensor_parallel_size": 1')
    return DraftReplicaConfig(model=model.name, gpu=target.gpu, tp=tp, dtype_bytes=target.dtype_bytes,
                              num_nodes=1, block_size=target.block_size, draft=model,
                              roofline_calibration=target.roofline_calibration)


# The drafters an engine with ``drafter_in_graph`` runs inside the step: TensorRT-LLM's "one model" list is MTP
# and EAGLE-3 (a draft model, n-gram lookup and older EAGLE are proposed from the executor, a pass at a time).
IN_GRAPH_METHODS = frozenset({"mtp", "eagle3"})
# The drafters an async-scheduling engine overlaps (vLLM's: EAGLE and MTP proposers, and a draft model, whose
# async scheduling vLLM turns on by default since vllm-project/vllm#48341, July 2026; the CPU n-gram lookup and
# Medusa still run synchronously).
ASYNC_DRAFTERS = frozenset({"eagle", "eagle3", "mtp", "draft_model"})
_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(BatchShape))  # SpecBatchShape.of, per step


@dataclass(slots=True)
class SpecBatchShape(BatchShape):
    """A batch shape with the speculating requests' sums (the drafter's cost and the verify
    attention read them). A verify is already in the shape as a decode over its context and
    its ``k + 1`` new keys, its other ``k`` query rows in ``num_prefill_tokens`` (GEMM rows)
    without a prefill chunk; these fields add nothing a plain kernel model prices."""

    num_spec: int = 0  # requests verifying drafts this step
    spec_k: int = 0  # the step's largest k (draft passes)
    spec_kv_sum: int = 0  # sum of their contexts (last token included): where the drafter starts
    spec_kv_sq_sum: int = 0
    spec_kv_max: int = 0
    spec_tokens: int = 0  # their verify tokens: sum of k + 1
    spec_attn_pairs: float = 0.0  # their queries' query-key pairs: sum of c * context + c * (c + 1) / 2
    num_tree: int = 0  # of them, requests verifying a whole token tree (the drafter feeds its wider levels)

    @classmethod
    def of(cls, shape: BatchShape) -> SpecBatchShape:
        """A copy of ``shape`` with no speculating requests yet."""
        return cls(**{name: getattr(shape, name) for name in _SHAPE_FIELDS})

    @property
    def num_verify_rows(self) -> int:
        """The verifies' query rows beyond their decode rows (sum of k), in ``num_prefill_tokens``."""
        return self.spec_tokens - self.num_spec

    @property
    def num_prompt_tokens(self) -> int:
        return self.num_prefill_tokens - self.num_verify_rows

    def add_verify(self, k: int, context: int, width: int | None = None, pairs: int | None = None) -> None:
        """One request verifying ``k`` drafts after ``context`` cached tokens (its last token is
        fed again): ``k + 1`` query tokens over the context, every position scored, the KV of
        ``context + k + 1`` keys read once (a decode of that length, ``k`` more GEMM rows). A token
        tree of ``width`` nodes ``k`` deep verifies ``width + 1`` tokens the same way, ``pairs`` the
        query-key pairs among them (:attr:`SpeculativeConfig.verify_pairs`)."""
        w = k if width is None else width
        c = w + 1
        self.add_decode(context + c)
        self.num_prefill_tokens += w
        self.num_logits += w
        self.spec_tokens += c
        self.spec_attn_pairs += c * context + (c * (c + 1) / 2 if pairs is None else pairs)
        if w > k:
            self.num_tree += 1
        kv = context + 1
        self.num_spec += 1
        self.spec_kv_sum += kv
        self.spec_kv_sq_sum += kv * kv
        if kv > self.spec_kv_max:
            self.spec_kv_max = kv
        if k > self.spec_k:
            self.spec_k = k

    def prefill_view(self) -> BatchShape:
        """The step's prompt chunks alone (the verifies' extra rows left out)."""
        return prompt_chunks(self)


def prompt_chunks(shape: BatchShape) -> BatchShape:
    """``shape``'s prompt chunks alone: its prefill fields (a verify adds only GEMM rows there, which
    ``num_prompt_tokens`` leaves out)."""
    return BatchShape(num_prefill_tokens=shape.num_prompt_tokens,
                      num_prefills=shape.num_prefills, prefill_attn_pairs=shape.prefill_attn_pairs,
                      prefill_kv_tokens=shape.prefill_kv_tokens, prefill_chunk_sq_sum=shape.prefill_chunk_sq_sum,
                      prefill_max_kv=shape.prefill_max_kv)


class VerifyKernels(CostModel):
    """A kernel model that prices a :class:`SpecBatchShape`'s verifies as the engines run them:
    GEMM rows for every query token, the step's prompt chunks through prefill attention, and the
    decodes and verifies through one decode-kernel call whose math covers every query
    (``attention_verify`` of the kernel model; a kernel model without it prices the verifies as
    decodes, one query each). Any other shape costs exactly what the kernels say (same float):
    every other method is the wrapped model's."""

    def __init__(self, kernels: CostModel) -> None:
        self.__dict__["_k"] = kernels  # before anything else: __getattr__ reads it
        super().__init__(kernels.replica)
        self.name = kernels.name
        self._verify = getattr(kernels, "attention_verify", None)
        self._tabulated = hasattr(kernels, "token_time") and hasattr(kernels, "attention_prefill")

    def __getattr__(self, name: str):  # noqa: ANN204 - the wrapped model's attributes (cal, counters, tables)
        return getattr(self.__dict__["_k"], name)

    def _verify_attention(self, shape: SpecBatchShape) -> float:
        k = self._k
        if self._verify is None:
            return k.attention_decode(shape)
        plain_pairs = shape.decode_kv_tokens - (shape.spec_kv_sum + shape.num_verify_rows)  # plain decodes' keys
        return self._verify(shape.decode_kv_tokens, shape.num_decodes, plain_pairs + shape.spec_attn_pairs,
                            shape.num_decodes + shape.num_verify_rows)

    def layer_time(self, shape: BatchShape) -> float:
        if type(shape) is not SpecBatchShape or not shape.num_spec or not self._tabulated:
            return self._k.layer_time(shape)
        k = self._k
        t = shape.num_prefill_tokens + shape.num_decodes
        # TabulatedCostModel.layer_time's three terms, with the verifies' attention as above.
        group = shape.moe_group_tokens
        return (k.token_time(t) + (k.group_token_delta(t, group) if group else 0.0)
                + k.attention_prefill(shape.prefill_view()) + self._verify_attention(shape))

    def pre_time(self, shape: BatchShape) -> float:
        return self._k.pre_time(shape)

    def post_time(self, shape: BatchShape) -> float:
        return self._k.post_time(shape)

    def overhead_time(self, shape: BatchShape) -> float:
        return self._k.overhead_time(shape)

    def send_recv_time(self, num_tokens: int, hop: int | None = None) -> float:  # type: ignore[override]
        return self._k.send_recv_time(num_tokens, hop)

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        out = dict(self._k.breakdown(shape))
        if type(shape) is SpecBatchShape and shape.num_spec and self._tabulated and "attn_decode" in out:
            layers = self.model.num_layers
            out["attn_prefill"] = layers * self._k.attention_prefill(shape.prefill_view())
            out["attn_decode"] = layers * self._verify_attention(shape)
        return out


def verify_aware(target: CostModel, engine=None) -> CostModel:  # noqa: ANN001 - EngineModel
    """``target`` with its kernels wrapped in :class:`VerifyKernels` (an engine model rebuilt over
    them with the same terms), so verifies are priced as decode-kernel attention."""
    from simulator.costmodel.engine_model import EngineCostModel

    if isinstance(target, EngineCostModel):
        return EngineCostModel(VerifyKernels(target.kernels), engine or target.engine)
    return VerifyKernels(target)


def synchronous_unless_async_drafter(engine, method: str):  # noqa: ANN001, ANN201 - EngineModel | None
    """``engine`` as it runs this drafter: an async-scheduling engine whose overlap takes only some drafters
    (vLLM's: :data:`ASYNC_DRAFTERS`) runs the others synchronously (its CPU time adds to every step)."""
    if engine is None or not engine.overlap_cpu or engine.overlap_any_drafter or method in ASYNC_DRAFTERS:
        return engine
    return engine.with_terms(overlap_cpu=False)


class SpeculativeCostModel(CostModel):
    """The target's cost model plus the drafter's time (see the module docstring).

    A shape without speculating requests costs exactly what the target says (same float), the target as the
    engine runs it beside this drafter (:func:`synchronous_unless_async_drafter`)."""

    def __init__(self, target: CostModel, spec: SpeculativeConfig) -> None:
        super().__init__(target.replica)
        self.kernels = getattr(target, "kernels", target)  # a kernel model under the engine terms
        engine = synchronous_unless_async_drafter(getattr(target, "engine", None), spec.method)
        self.target = verify_aware(target, engine)
        self.spec = spec
        tree = f", tree of {spec.num_verify_tokens}" if spec.token_tree else ""
        self.name = f"{target.name} + speculative {spec.method} k={spec.k}{tree}"
        self.draft: CostModel | None = None
        self._head_input_s: dict[tuple[int, bool], float] = {}  # _head_inputs by (rows, first pass)
        self._input_proj_s: dict[tuple[int, bool], float] = {}  # _input_proj by (rows, first pass)
        if spec.method == "draft_model" or spec.known_head is not None:
            from simulator.costmodel.roofline import RooflineCostModel

            # The draft's kernels at the calibration the target's roofline uses (the engine's backend, a fitted
            # artifact's roofline_prices included: the model, not its name).
            self.draft = RooflineCostModel(draft_replica(target.replica, spec), engine=engine)
        # The CPU a drafter pass adds (see pass_cpu_s): a synchronous engine's fixed per-step CPU,
        # a bare kernel model's own fixed overhead, nothing where the engine hides its CPU or launches
        # an MTP/EAGLE drafting loop as one graph inside the step.
        if engine is None:
            self.pass_cpu_s = self.kernels.overhead_time(BatchShape())
        elif getattr(self.target, "overlap", engine.overlap_cpu) or (engine.drafter_in_graph and
                                                                      spec.method in IN_GRAPH_METHODS):
            # (the overlap the target runs with: none under PP where the engine's async scheduling stops there)
            self.pass_cpu_s = 0.0
        else:
            self.pass_cpu_s = engine.cpu_iteration_s
        self.send_recv_time = target.send_recv_time  # type: ignore[method-assign]
        self.learned_ops = getattr(target, "learned_ops", [])

    @property
    def num_extrapolations(self) -> int:
        return getattr(self.target, "num_extrapolations", 0)

    # -- the drafter -------------------------------------------------------------------------------------------
    def _draft_pass(self, shape: BatchShape, first: bool = True) -> float:
        """One forward pass of the draft model: its kernels plus :attr:`pass_cpu_s`; a known EAGLE-3 head's also
        its wider inputs (:meth:`_head_inputs`), the fc on a step's ``first`` pass."""
        d = self.draft
        assert d is not None
        t = d.pre_time(shape) + d.model.num_layers * d.layer_time(shape) + d.post_time(shape) + self.pass_cpu_s
        return t + self._head_inputs(shape.num_tokens, first) if self.spec.known_head is not None else t

    def _head_inputs(self, rows: int, first: bool) -> float:
        """An EAGLE-3 head's GEMMs beyond its layers as a model: its first layer's attention projections read the
        token's embedding beside the hidden state (``hidden`` more inputs to q, k and v), and, once a step, the
        fc folds three of the target's hidden states into one (``3 hidden -> hidden``, a replicated linear in vLLM:
        whole on every GPU)."""
        key = (rows, first)
        if (t := self._head_input_s.get(key)) is not None:  # (every drafter pass asks: a step's rows repeat)
            return t
        d, head = self.draft, self.spec.known_head
        assert d is not None and head is not None
        x = np.array([rows], dtype=np.float64)
        (qkv_k, qkv_n), (fc_k, fc_n) = head.input_gemms
        t = float(d.gemm(x, qkv_k, qkv_n // d.replica.tp)[0])  # sharded with the layer's q, k and v
        if first:  # the fc, a replicated linear (vLLM's ReplicatedLinear): whole on every GPU
            t += float(d.gemm(x, fc_k, fc_n)[0])
        self._head_input_s[key] = t
        return t

    def draft_time(self, shape: BatchShape) -> float:
        """Seconds the drafter adds to this step: its pass over the step's prompt chunks (a draft model's
        forward, an EAGLE/MTP head's layer: each builds its own KV of the prompt, in steps that verify
        nothing too) and its draft passes for the speculating requests; 0.0 for n-gram."""
        if self.spec.method == "ngram":
            return 0.0
        total = self._draft_prefill_time(shape) if shape.num_prefills else 0.0
        if not isinstance(shape, SpecBatchShape) or not shape.num_spec:
            return total
        if self.spec.parallel_drafting:  # one pass: k rows a request
            rows = self._parallel_shape(shape)
            return total + (self._draft_pass(rows) if self.draft is not None else self._target_layer_pass(rows))
        n, kv_sum, kv_sq, kv_max = shape.num_spec, shape.spec_kv_sum, shape.spec_kv_sq_sum, shape.spec_kv_max
        if self.draft is not None:
            for j in range(shape.spec_k):
                total += self._draft_pass(self._pass_shape(shape, j), first=j == 0)
            return total
        k = self.kernels
        if self.spec.method == "medusa":  # k heads, one pass: a residual block and an LM head each
            d = BatchShape.decode_only(n, kv_sum, kv_sq, kv_max)
            h = self.model.hidden_size
            block = float(k.gemm(np.array([n], dtype=np.float64), h, h // self.replica.tp)[0]) if hasattr(k, "gemm") else 0.0
            return shape.spec_k * (block + k.post_time(d)) + self.pass_cpu_s
        for j in range(shape.spec_k):  # one decoder layer + LM head per draft position
            total += self._target_layer_pass(self._pass_shape(shape, j), first=j == 0)
        return total

    def _target_layer_pass(self, d: BatchShape, first: bool = True) -> float:
        """An unknown EAGLE head's or an MTP module's pass: its input projection (:meth:`_input_proj`), one layer of
        the target and its LM head, plus :attr:`pass_cpu_s`."""
        k = self.kernels
        return (k.pre_time(d) + self._input_proj(d.num_tokens, first) + k.layer_time(d) + k.post_time(d)
                + self.pass_cpu_s)

    def _input_proj(self, rows: int, first: bool) -> float:
        """The projection an MTP module or unknown EAGLE head runs before its layer, whole on every GPU at 16 bits
        (:func:`input_proj_params`): MTP's eh_proj and EAGLE's fc (``2 hidden -> hidden``) every pass, EAGLE-3's fc
        (``3 hidden -> hidden``) on a step's first pass only (later passes feed the head's own hidden state)."""
        key = (rows, first)
        if (t := self._input_proj_s.get(key)) is not None:  # (every drafter pass asks: a step's rows repeat)
            return t
        h, width = self.model.hidden_size, input_proj_width(self.spec, first)
        k = self.kernels
        # (a learned model prices it by its roofline; a kernel model without GEMMs, a test's constant one, not at all)
        gemm16 = getattr(k, "gemm16", None) or getattr(getattr(k, "roofline", None), "gemm16", None)
        t = float(gemm16(np.array([rows], dtype=np.float64), width * h, h)[0]) if width and gemm16 and rows else 0.0
        self._input_proj_s[key] = t
        return t

    def _pass_shape(self, shape: SpecBatchShape, j: int) -> BatchShape:
        """Draft pass ``j``'s batch: a decode per speculating request at its context plus ``j``; a
        request verifying a whole token tree feeds the tree's nodes at depth ``j`` (:attr:`tree_widths`),
        each a decode row over that context."""
        n, kv_sum, kv_sq, kv_max = shape.num_spec, shape.spec_kv_sum, shape.spec_kv_sq_sum, shape.spec_kv_max
        extra = shape.num_tree * (self.spec.tree_widths[j] - 1) if shape.num_tree else 0
        if not extra:
            return BatchShape.decode_only(n, kv_sum + n * j, kv_sq + 2 * j * kv_sum + n * j * j, kv_max + j)
        # The tree's requests' mean context stands for each extra row's (the shape keeps sums, not each request's).
        rows = n + extra
        scale = rows / n
        return BatchShape.decode_only(rows, round((kv_sum + n * j) * scale), round((kv_sq + 2 * j * kv_sum + n * j * j) * scale),
                                      kv_max + j)

    @staticmethod
    def _parallel_shape(shape: SpecBatchShape) -> BatchShape:
        """A parallel drafter's one pass: per speculating request its last token as a decode over its context and
        ``k - 1`` mask tokens after it, as GEMM rows scored by the LM head (their attention over the context it
        reads once is left to the decode's: a few more queries on the same keys)."""
        n, k = shape.num_spec, shape.spec_k
        d = BatchShape.decode_only(n, shape.spec_kv_sum, shape.spec_kv_sq_sum, shape.spec_kv_max)
        d.num_prefill_tokens += n * (k - 1)
        d.num_logits += n * (k - 1)
        return d

    def _draft_prefill_time(self, shape: BatchShape) -> float:
        """The drafter's pass over the step's prompt chunks (a verify's rows are no prompt): the draft model's
        forward, or one head layer (EAGLE, MTP) over the prompt's hidden states; Medusa's heads read only
        the last token's (nothing here). An attention-DP group's MoE rule (``BatchShape.moe_group_tokens``) is the
        target's: a MoE head layer's pass here stays priced as every rank padded to this one's prompt tokens."""
        p = prompt_chunks(shape)
        if p.num_prefills <= 0 or p.num_prefill_tokens <= 0 or self.spec.method == "medusa":
            return 0.0
        if self.draft is not None:
            return self._draft_pass(p)
        k = self.kernels
        return k.pre_time(p) + self._input_proj(p.num_tokens, True) + k.layer_time(p) + self.pass_cpu_s

    # -- CostModel interface -----------------------------------------------------------------------------------
    def layer_time(self, shape: BatchShape) -> float:
        return self.target.layer_time(shape)

    def pre_time(self, shape: BatchShape) -> float:
        return self.target.pre_time(shape)

    def post_time(self, shape: BatchShape) -> float:
        return self.target.post_time(shape)

    def overhead_time(self, shape: BatchShape) -> float:
        return self.target.overhead_time(shape) + self.draft_time(shape)

    def iteration_time(self, shape: BatchShape) -> float:
        t = self.target.iteration_time(shape)
        if shape.num_prefills or (isinstance(shape, SpecBatchShape) and shape.num_spec):
            t += self.draft_time(shape)
        return t

    def stage_time(self, shape: BatchShape, stage: int) -> float:
        t = self.target.stage_time(shape, stage)
        # The drafter runs on the last stage, beside the target's last hidden states and sampled tokens (vLLM V1
        # builds its proposer on the last PP rank only): there it passes over a step's prompt chunks as well as
        # drafting for its verifies, as iteration_time prices both.
        if stage == len(self.layers_per_stage) - 1 and (
                shape.num_prefills or (isinstance(shape, SpecBatchShape) and shape.num_spec)):
            t += self.draft_time(shape)
        return t

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        out = dict(self.target.breakdown(shape))
        out["speculative_draft"] = self.draft_time(shape)
        return out


def drafter_memory(replica: ReplicaConfig, spec: SpeculativeConfig) -> tuple[float, float]:
    """(weight bytes, KV bytes per cached token) the drafter adds on each GPU of the target."""
    m = replica.model_spec
    if spec.method == "ngram":
        return 0.0, 0.0
    if spec.known_head is not None:  # its layers, wider inputs (module docstring) and draft vocabulary's LM head
        head = spec.known_head.spec  # (the embedding is the target's), 16-bit
        (qkv_k, qkv_n), (fc_k, fc_n) = spec.known_head.input_gemms
        weights = ((head.num_layers * head.params_per_layer + qkv_k * qkv_n + head.vocab_size * head.hidden_size)
                   / replica.tp + fc_k * fc_n) * replica.dtype_bytes  # (the fc whole on every GPU)
        return weights, head.num_layers * head.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, replica.tp)
    if spec.method == "draft_model":
        d = draft_replica(replica, spec)
        dm = d.model_spec
        # Its layers as the target's are laid out (MLA's down-projections whole on every rank), at 16 bits.
        weights = d.layer_weights_bytes(dm.num_layers) \
            + dm.embedding_params * (1 if dm.tied_embeddings else 2) / d.tp * replica.dtype_bytes
        kv = dm.num_layers * dm.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, d.tp)
        return weights, kv
    if spec.method == "medusa":  # k heads: a hidden x hidden block and an LM head (16-bit, as the target's) each, no KV
        head = m.hidden_size * m.hidden_size * replica.weight_bytes + m.hidden_size * m.vocab_size * replica.dtype_bytes
        return spec.k * head / replica.tp, 0.0
    # EAGLE / MTP: one decoder layer, sharded as the target's are (an MoE layer's experts over the tp x attention-DP
    # GPUs of the MoE group, a 4-bit checkpoint's attention at 16 bits), its input projection whole at 16 bits, and
    # its KV; the LM head and embedding are shared.
    # (an MTP module is the model's next layer, an MoE one where the model's last is; an EAGLE head of unknown shape
    # is taken as the mean layer)
    layer = replica.layer_weights_bytes(1, m.num_layers - 1) if spec.method == "mtp" else replica.layer_weights_bytes(1)
    return (layer + input_proj_params(m, spec) * replica.dtype_bytes,
            m.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, replica.tp))


def input_proj_width(spec: SpeculativeConfig, first: bool = True) -> int:
    """Hidden states an MTP module's or unknown EAGLE head's input projection reads a row (0 for other drafters):
    MTP's eh_proj and EAGLE's fc 2 (the token's embedding beside the target's hidden state), EAGLE-3's fc 3 (three
    of the target's layers) on a step's first pass and 0 after. A known head (``spec.known_head``) prices its own."""
    if spec.known_head is not None or spec.method not in ("mtp", "eagle", "eagle3"):
        return 0
    if spec.method == "eagle3":
        return 3 if first else 0
    return 2


def input_proj_params(model: ModelSpec, spec: SpeculativeConfig) -> int:
    """Weights of that projection (``width x hidden x hidden``): vLLM and SGLang build it as a plain or replicated
    linear (DeepSeek's eh_proj an ``nn.Linear``), whole on every GPU, and checkpoints keep it at 16 bits. (Not
    modelled: TensorRT-LLM's MTP shards it by rows without attention DP, and vLLM's Qwen3-Next MTP by columns.)"""
    return input_proj_width(spec) * model.hidden_size * model.hidden_size


def drafter_kv_bytes_per_token(replica: ReplicaConfig, spec: SpeculativeConfig) -> float:
    """The drafter's KV bytes of one token for its whole model (every layer and KV head, at the KV cache's dtype):
    what a disaggregated handoff moves beside the target's (:func:`~simulator.config.disagg_layout.kv_bytes_per_token`).
    0.0 where the drafter keeps no KV (Medusa, n-gram)."""
    if spec.method in ("ngram", "medusa"):
        return 0.0
    if spec.known_head is not None:
        head = spec.known_head.spec
        return head.num_layers * head.kv_bytes_per_token_per_layer(replica.kv_cache_bytes)
    if spec.method == "draft_model":
        dm = draft_spec(spec.draft_model or "")
        return dm.num_layers * dm.kv_bytes_per_token_per_layer(replica.kv_cache_bytes)
    return replica.model_spec.kv_bytes_per_token_per_layer(replica.kv_cache_bytes)  # one EAGLE/MTP layer


def speculative_memory_plan(plan, replica: ReplicaConfig, spec: SpeculativeConfig,  # noqa: ANN001, ANN201 - MemoryPlan
                            verifies: bool = True):
    """``plan`` with the drafter's weights taken from the last stage's KV budget and its KV bytes
    added to each cached token's there (the drafter runs on the last PP stage, as
    :meth:`SpeculativeCostModel.stage_time` prices it), so the target holds fewer KV blocks (a given
    ``num_gpu_blocks`` is kept as given). ``verifies`` False: a replica that runs the drafter over
    prompts but verifies nothing (a disaggregated prefill pool's)."""
    if verifies:
        # A hybrid keeps a recurrent state for each of the k + 1 positions a verify may stop at (vLLM's
        # num_speculative_blocks), so that a rejected draft rolls back to the accepted one's state.
        # (A sliding window's blocks are the window's, once.)
        recurrent = plan.num_state_blocks - plan.num_window_blocks
        plan = dataclasses.replace(plan, num_state_blocks=plan.num_window_blocks + recurrent * (1 + spec.k))
    weights, kv = drafter_memory(replica, spec)
    if (weights == 0.0 and kv == 0.0) or replica.num_gpu_blocks is not None:
        return plan
    last = len(plan.kv_budget_bytes) - 1
    budgets = tuple(b - weights if stage == last else b for stage, b in enumerate(plan.kv_budget_bytes))
    if budgets[last] <= 0:
        raise ConfigError("speculative.model", f"the drafter's weights ({weights / 2**30:.1f} GiB per GPU) leave no KV "
                          "cache", "use a smaller draft model or more GPUs")
    per_token = tuple(t + kv if stage == last else t for stage, t in enumerate(plan.kv_bytes_per_token))
    num_tokens = int(min(b / t for b, t in zip(budgets, per_token, strict=True)))
    num_blocks = num_tokens // plan.block_size
    return dataclasses.replace(plan, kv_budget_bytes=budgets, kv_bytes_per_token=per_token,
                               num_kv_tokens=num_blocks * plan.block_size, num_blocks=num_blocks)
