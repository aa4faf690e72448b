"""Pricing speculative decoding: the verify pass, the drafter, and the drafter's memory.

The verify pass is priced by the target's own cost model, because the scheduler writes it
into the batch shape as what it is: for each speculating request, a prefill-like chunk of
``k + 1`` query tokens (the last token and ``k`` drafts) over its context
(``add_prefill(k + 1, kv_before=context, produces=True)``), with ``k`` more sampled rows for
the LM head (every position is scored). So verify tokens take token-budget slots and GEMM
rows like any other token: at small batches the step stays weight-bound and ``k + 1`` tokens
cost little more than one; at large batches they make the step compute-bound and the
speculation stops paying (the crossover ``results/speculative/`` shows).

The drafter's cost is added per step by :class:`SpeculativeCostModel`, from the few sums
:class:`SpecBatchShape` carries (speculating requests, their context sums, the step's ``k``):

- ``draft_model``: ``k`` autoregressive decode passes of the small model over the speculating
  requests (context ``j`` tokens longer in pass ``j``), plus its own pass over the step's
  prefill chunks (a draft model keeps its own KV cache, so it prefills every prompt too), priced
  by the roofline kernel model of the draft on the target's GPU at ``draft_tp``; the engine's
  CPU terms (scheduling, output processing, the TP RPC) are the step's and are not repeated per
  draft pass (the engine presets lump them, so a per-pass share cannot be read off the data);
- ``eagle``/``eagle3``/``mtp``: ``k`` sequential passes of one target-sized decoder layer plus
  the LM head over the speculating requests (an EAGLE head or MTP module is one layer reusing
  the target's head), kernels only: the engines that ship them run the drafter inside the
  step's CUDA graph;
- ``ngram``: nothing (a CPU lookup in the request's own tokens).

Memory (:func:`speculative_memory_plan`): a draft model holds its weights and a KV cache of
its own for every token the target caches; an EAGLE/MTP head, one layer's weights and KV.
The target's KV blocks shrink accordingly.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from simulator.config.catalog import ModelSpec, get_gpu, get_model
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.config.speculative import SpeculativeConfig
from simulator.costmodel.base import BatchShape, CostModel

# Draft models not in the main catalog (a draft is never served on its own).
DRAFT_MODELS: dict[str, ModelSpec] = {
    # Qwen2-0.5B with Llama-3's vocabulary (the vLLM 2024 blog's draft for Llama-3-70B):
    # turboderp/Qwama-0.5B-Instruct config.json.
    "qwama-0.5b": ModelSpec("qwama-0.5b", "turboderp/Qwama-0.5B-Instruct", 24, 896, 14, 2, 4864, 128256, 32768,
                            tied_embeddings=True),
    # The Spec-Bench SpS draft for Vicuna (double7/vicuna-68m config.json).
    "vicuna-68m": ModelSpec("vicuna-68m", "double7/vicuna-68m", 2, 768, 12, 12, 3072, 32000, 2048),
}


def draft_spec(name: str) -> ModelSpec:
    """A draft model by name: :data:`DRAFT_MODELS` first, then the catalog (HF ids accepted)."""
    key = name.lower()
    for spec in DRAFT_MODELS.values():
        if key in (spec.name, spec.hf_id.lower()):
            return spec
    try:
        return get_model(name)
    except ConfigError:
        raise ConfigError("speculative.model", f"unknown draft model {name!r}",
                          f"use a catalog model or one of {', '.join(DRAFT_MODELS)}") from None


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
    """The draft model's layout: the target's GPU and numerics, ``draft_tp`` GPUs."""
    assert spec.draft_model is not None
    model = draft_spec(spec.draft_model)
    if model.num_heads % spec.draft_tp:
        raise ConfigError("speculative.draft_tp", f"draft_tp={spec.draft_tp} does not divide {model.name}'s "
                          f"{model.num_heads} heads", "use draft_tensor_parallel_size 1")
    return DraftReplicaConfig(model=model.name, gpu=target.gpu, tp=spec.draft_tp, dtype_bytes=target.dtype_bytes,
                              num_nodes=1, block_size=target.block_size, draft=model)


_SHAPE_FIELDS = tuple(f.name for f in dataclasses.fields(BatchShape))  # SpecBatchShape.of, per step


@dataclass(slots=True)
class SpecBatchShape(BatchShape):
    """A batch shape with the speculating requests' sums (the drafter's cost reads them).
    Their verify chunks are already in the prefill fields; these add nothing the target prices."""

    num_spec: int = 0  # requests verifying drafts this step
    spec_k: int = 0  # the step's largest k (draft passes)
    spec_kv_sum: int = 0  # sum of their contexts (last token included)
    spec_kv_sq_sum: int = 0
    spec_kv_max: int = 0
    spec_tokens: int = 0  # their verify tokens: sum of k + 1
    spec_attn_pairs: float = 0.0  # their verify chunks' share of prefill_attn_pairs
    spec_chunk_sq_sum: float = 0.0  # and of prefill_chunk_sq_sum

    @classmethod
    def of(cls, shape: BatchShape) -> SpecBatchShape:
        """A copy of ``shape`` with no speculating requests yet."""
        return cls(**{name: getattr(shape, name) for name in _SHAPE_FIELDS})

    def add_verify(self, k: int, context: int) -> None:
        """One request verifying ``k`` drafts after ``context`` cached tokens (its last token is
        fed again): a ``k + 1``-token chunk over the context, every position scored."""
        c = k + 1
        self.add_prefill(c, context, True)
        self.num_logits += k
        self.spec_tokens += c
        self.spec_attn_pairs += c * context + c * (c + 1) / 2
        self.spec_chunk_sq_sum += c * c
        kv = context + 1
        self.num_spec += 1
        self.spec_kv_sum += kv
        self.spec_kv_sq_sum += kv * kv
        if kv > self.spec_kv_max:
            self.spec_kv_max = kv
        if k > self.spec_k:
            self.spec_k = k


class SpeculativeCostModel(CostModel):
    """The target's cost model plus the drafter's time (see the module docstring).

    A shape without speculating requests costs exactly what the target says (same float)."""

    def __init__(self, target: CostModel, spec: SpeculativeConfig) -> None:
        super().__init__(target.replica)
        self.target = target
        self.spec = spec
        self.name = f"{target.name} + speculative {spec.method} k={spec.k}"
        self.kernels = getattr(target, "kernels", target)  # a kernel model under the engine terms
        self.draft: CostModel | None = None
        if spec.method == "draft_model":
            from simulator.costmodel import load_cost_model

            self.draft = load_cost_model("roofline", draft_replica(target.replica, spec))  # kernels only
        self.send_recv_time = target.send_recv_time  # type: ignore[method-assign]
        self.learned_ops = getattr(target, "learned_ops", [])

    @property
    def num_extrapolations(self) -> int:
        return getattr(self.target, "num_extrapolations", 0)

    # -- the drafter -------------------------------------------------------------------------------------------
    def draft_time(self, shape: BatchShape) -> float:
        """Seconds the drafter adds to this step (0.0 without speculating requests or for n-gram)."""
        if not isinstance(shape, SpecBatchShape) or not shape.num_spec or self.spec.method == "ngram":
            return 0.0
        n, kv_sum, kv_sq, kv_max = shape.num_spec, shape.spec_kv_sum, shape.spec_kv_sq_sum, shape.spec_kv_max
        total = 0.0
        if self.draft is not None:
            if shape.num_prefills > shape.num_spec:  # prompt chunks beside the verifies
                total += self._draft_prefill_time(shape)
            for j in range(shape.spec_k):
                total += self.draft.iteration_time(
                    BatchShape.decode_only(n, kv_sum + n * j, kv_sq + 2 * j * kv_sum + n * j * j, kv_max + j))
            return total
        k = self.kernels
        for j in range(shape.spec_k):  # one decoder layer + LM head per draft position
            d = BatchShape.decode_only(n, kv_sum + n * j, kv_sq + 2 * j * kv_sum + n * j * j, kv_max + j)
            total += k.pre_time(d) + k.layer_time(d) + k.post_time(d)
        return total

    def _draft_prefill_time(self, shape: SpecBatchShape) -> float:
        """The draft model's pass over the step's prompt chunks (the prefill fields less the
        verify chunks'; the KV sums and maximum stay the whole step's: a bound, and small)."""
        assert self.draft is not None
        tokens = shape.num_prefill_tokens - shape.spec_tokens
        chunks = shape.num_prefills - shape.num_spec
        if chunks <= 0 or tokens <= 0:
            return 0.0
        p = BatchShape(num_prefill_tokens=tokens, num_prefills=chunks,
                       prefill_attn_pairs=max(0.0, shape.prefill_attn_pairs - shape.spec_attn_pairs),
                       prefill_kv_tokens=shape.prefill_kv_tokens,
                       prefill_chunk_sq_sum=max(0.0, shape.prefill_chunk_sq_sum - shape.spec_chunk_sq_sum),
                       prefill_max_kv=shape.prefill_max_kv, num_logits=0)
        return self.draft.iteration_time(p)

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
        if isinstance(shape, SpecBatchShape) and shape.num_spec:
            t += self.draft_time(shape)
        return t

    def stage_time(self, shape: BatchShape, stage: int) -> float:
        t = self.target.stage_time(shape, stage)
        if stage == 0 and isinstance(shape, SpecBatchShape) and shape.num_spec:
            t += self.draft_time(shape)  # the drafter runs where the step starts
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
    if spec.method == "draft_model":
        d = draft_replica(replica, spec)
        dm = d.model_spec
        weights = (dm.num_layers * dm.params_per_layer + dm.embedding_params * (1 if dm.tied_embeddings else 2)) \
            / d.tp * replica.dtype_bytes
        kv = dm.num_layers * dm.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, d.tp)
        return weights, kv
    # EAGLE / MTP: one decoder layer (sharded like the target's) and its KV; the LM head is shared.
    return (m.params_per_layer / replica.tp * replica.weight_bytes,
            m.kv_bytes_per_token_per_gpu_layer(replica.kv_cache_bytes, replica.tp))


def speculative_memory_plan(plan, replica: ReplicaConfig, spec: SpeculativeConfig):  # noqa: ANN001, ANN201 - MemoryPlan
    """``plan`` with the drafter's weights taken from each stage's KV budget and its KV bytes
    added to each cached token's, so the target holds fewer KV blocks (a given
    ``num_gpu_blocks`` is kept as given)."""
    weights, kv = drafter_memory(replica, spec)
    if (weights == 0.0 and kv == 0.0) or replica.num_gpu_blocks is not None:
        return plan
    budgets = tuple(b - weights for b in plan.kv_budget_bytes)
    if min(budgets) <= 0:
        raise ConfigError("speculative.model", f"the drafter's weights ({weights / 2**30:.1f} GiB per GPU) leave no KV "
                          "cache", "use a smaller draft model or more GPUs")
    per_token = tuple(t + kv for t in plan.kv_bytes_per_token)
    num_tokens = int(min(b / t for b, t in zip(budgets, per_token, strict=True)))
    num_blocks = num_tokens // plan.block_size
    return dataclasses.replace(plan, kv_budget_bytes=budgets, kv_bytes_per_token=per_token,
                               num_kv_tokens=num_blocks * plan.block_size, num_blocks=num_blocks)
