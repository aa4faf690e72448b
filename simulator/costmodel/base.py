"""The cost-model interface: a batch's shape in, seconds out.

The engine describes each iteration by a :class:`BatchShape`: token counts plus a few
sums that capture the *distribution* of attention work (a batch of one 4K-token
prefill and one of sixteen 256-token prefills have equal token totals and very
different attention cost). The scheduler fills it while it builds the batch, so the
hot loop never looks at individual requests twice.

A :class:`CostModel` turns a shape into time, per pipeline stage:

``stage_time(shape, s) = [overhead if s == 0] + [pre if s == 0]
                         + layers(s) * layer_time + [post if s == last]``

Implementations provide four cheap functions (``layer_time``, ``pre_time``,
``post_time``, ``overhead_time``) that are called once per iteration and must not call
a regression ``predict``: precompute onto token grids instead. ``breakdown`` is the
slow, per-op path for ``simulate predict`` and analysis.

Extension point: subclass :class:`CostModel`, implement the four functions and
``breakdown``, and make :func:`simulator.costmodel.load_cost_model` return it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from simulator.config.run_config import ReplicaConfig


@dataclass(slots=True)
class BatchShape:
    """What the cost model needs to know about one iteration's batch.

    A prefill chunk of ``c`` tokens over ``p`` tokens already in the KV cache attends
    to ``p + c`` keys; causally that is ``c * p + c * (c + 1) / 2`` query-key pairs.
    A decode over a KV cache of ``k`` tokens (the new token included) reads ``k`` keys.
    """

    # The drafts verified beside the decodes, in ``num_prefill_tokens``: none here (a class constant, read once an
    # iteration by the recorder; a speculating shape computes it).
    num_verify_rows: ClassVar[int] = 0

    num_prefill_tokens: int = 0  # sum of chunk sizes
    num_prefills: int = 0  # prefill chunks in the batch
    prefill_attn_pairs: float = 0.0  # sum over chunks of c*p + c*(c+1)/2
    prefill_kv_tokens: int = 0  # sum over chunks of p + c (keys read)
    prefill_chunk_sq_sum: float = 0.0  # sum of c**2
    prefill_max_kv: int = 0  # max over chunks of p + c
    num_decodes: int = 0
    decode_kv_tokens: int = 0  # sum of decode KV lengths
    decode_kv_sq_sum: float = 0.0  # sum of squared decode KV lengths
    decode_max_kv: int = 0
    num_logits: int = 0  # entries that produce an output token this iteration
    # Tokens entering the routed experts this step across an attention-DP group, where the engine routes the
    # ranks' own tokens (a prompt step under ``--dp-padding sum``, a step above the largest CUDA graph under
    # ``graphs``: :mod:`simulator.engine.dp_group`); 0 is the
    # default reading, ``num_tokens x attention_dp`` (every rank padded to this one's tokens). Set by the
    # group for one pricing only, never by a scheduler.
    moe_group_tokens: int = 0

    @property
    def num_tokens(self) -> int:
        return self.num_prefill_tokens + self.num_decodes

    @property
    def num_prompt_tokens(self) -> int:
        """The prompts' tokens among ``num_prefill_tokens`` (all of them here; a speculating
        shape carries verify rows there too)."""
        return self.num_prefill_tokens

    def add_prefill(self, chunk: int, kv_before: int, produces_token: bool) -> None:
        self.num_prefill_tokens += chunk
        self.num_prefills += 1
        self.prefill_attn_pairs += chunk * kv_before + chunk * (chunk + 1) / 2
        kv = kv_before + chunk
        self.prefill_kv_tokens += kv
        self.prefill_chunk_sq_sum += chunk * chunk
        if kv > self.prefill_max_kv:
            self.prefill_max_kv = kv
        if produces_token:
            self.num_logits += 1

    def add_decode(self, kv_len: int) -> None:
        self.num_decodes += 1
        self.decode_kv_tokens += kv_len
        self.decode_kv_sq_sum += kv_len * kv_len
        if kv_len > self.decode_max_kv:
            self.decode_max_kv = kv_len
        self.num_logits += 1

    def add_decodes(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int) -> None:
        """``add_decode`` for ``num_decodes`` decodes at once, given their KV sums (exact:
        the sums are integers below 2**53, so their order does not matter)."""
        if num_decodes:
            self.num_decodes += num_decodes
            self.decode_kv_tokens += kv_sum
            self.decode_kv_sq_sum += kv_sq_sum
            if kv_max > self.decode_max_kv:
                self.decode_max_kv = kv_max
            self.num_logits += num_decodes

    @classmethod
    def decode_only(cls, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int) -> BatchShape:
        """The shape of a batch of ``num_decodes`` decodes whose KV lengths (new token
        included) sum to ``kv_sum``, their squares to ``kv_sq_sum``, with maximum ``kv_max``.
        Equal, field for field, to adding those decodes one by one (the sums are exact
        integers below 2**53)."""
        return cls(num_decodes=num_decodes, decode_kv_tokens=kv_sum, decode_kv_sq_sum=float(kv_sq_sum),
                   decode_max_kv=kv_max, num_logits=num_decodes)

    @classmethod
    def from_requests(cls, prefills: list[tuple[int, int]] = (), decodes: list[int] = ()) -> BatchShape:
        """Build a shape from (chunk, kv_before) prefills and decode KV lengths; each chunk
        is assumed to finish its prompt (produce a token)."""
        shape = cls()
        for chunk, kv_before in prefills:
            shape.add_prefill(chunk, kv_before, True)
        for kv in decodes:
            shape.add_decode(kv)
        return shape


def split_layers(num_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage: as even as possible, the earlier stages take the remainder."""
    base, extra = divmod(num_layers, pp)
    return [base + (1 if s < extra else 0) for s in range(pp)]


def stretch_forms(model: object) -> frozenset[str]:
    """The stretch forms ``model``'s own class declares (:attr:`CostModel.STRETCH_FORMS`)."""
    return type(model).__dict__.get("STRETCH_FORMS", frozenset())


def extrapolation_counts(cost: object) -> dict[str, int]:
    """A cost model's extrapolations per op (a copy; empty for one that counts none). A model under engine
    terms or speculation counts them in the kernel model it wraps (its ``kernels``), whose total it reports."""
    return dict(getattr(getattr(cost, "kernels", cost), "extrapolations_by_op", None) or {})


class CostModel(ABC):
    """Predicts iteration time for a replica (model, GPU, TP, PP) and a batch shape.

    Contract: every function is deterministic and non-negative, grows (weakly) with
    every field of the shape, and is cheap enough to call once per iteration.
    """

    name: str = "abstract"
    # Whether chunk_stretch_times is cheaper than pricing each iteration (a closed form); event
    # skipping tries chunked-prefill stretches only then: priced one by one they cost what the
    # busy steps they replace do, and planning them is not free.
    fast_chunk_stretches: bool = False
    # The closed forms of a step this class offers stretch pricing (simulator.costmodel.engine_model):
    # "decode-terms" (decode_attention_terms), "decode-rms" (decode_attention_rms_terms), "decode-curve"
    # (decode_attention_curve), "chunk-terms" (prefill_attention_list beside decode-terms). Read with
    # stretch_forms(model): declared by a class for itself, never inherited, so a subclass that changes a
    # term gets the exact step-by-step path until it declares its own forms.
    STRETCH_FORMS: frozenset[str] = frozenset()

    def __init__(self, replica: ReplicaConfig) -> None:
        self.replica = replica
        self.model = replica.model_spec
        self.gpu = replica.gpu_spec
        self.layers_per_stage = split_layers(self.model.num_layers, replica.pp)

    @abstractmethod
    def layer_time(self, shape: BatchShape) -> float:
        """One transformer layer on one GPU of the TP group, TP all-reduces included."""

    @abstractmethod
    def pre_time(self, shape: BatchShape) -> float:
        """Embedding lookup (first pipeline stage)."""

    @abstractmethod
    def post_time(self, shape: BatchShape) -> float:
        """Final norm, LM head and sampling (last pipeline stage)."""

    @abstractmethod
    def overhead_time(self, shape: BatchShape) -> float:
        """CPU-side per-iteration work: scheduling, input preparation, output processing."""

    @abstractmethod
    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        """Seconds per op for the whole iteration (all layers, PP=1 view); sums to
        ``iteration_time`` up to floating-point rounding."""

    def send_recv_time(self, num_tokens: int) -> float:
        """Activation transfer between two pipeline stages; overridden where PP is modelled."""
        return 0.0

    def stage_time(self, shape: BatchShape, stage: int) -> float:
        t = self.layers_per_stage[stage] * self.layer_time(shape)
        if stage == 0:
            t += self.overhead_time(shape) + self.pre_time(shape)
        if stage == len(self.layers_per_stage) - 1:
            t += self.post_time(shape)
        return t

    def iteration_time(self, shape: BatchShape) -> float:
        """Wall time of one iteration with all stages back to back (PP=1 latency)."""
        return (self.overhead_time(shape) + self.pre_time(shape)
                + self.model.num_layers * self.layer_time(shape) + self.post_time(shape))

    def extrapolation_mark(self) -> tuple | None:
        """The state of the model's extrapolation counters (``num_extrapolations`` and its per-op
        dict, in order), or None where it counts none; :meth:`rollback_extrapolations` restores it.
        A fast path that prices iterations it may not apply counts only those it applies."""
        counts = getattr(self, "extrapolations_by_op", None)
        return None if counts is None else (self.num_extrapolations, tuple(counts.items()))  # type: ignore[attr-defined]

    def rollback_extrapolations(self, mark: tuple) -> None:
        self.num_extrapolations, self.extrapolations_by_op = mark[0], dict(mark[1])  # type: ignore[attr-defined]

    def decode_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int,
                             num_iterations: int) -> list[float]:
        """``iteration_time`` of ``num_iterations`` consecutive decode-only iterations of the
        same ``num_decodes`` sequences. The first has the decode sums of
        :meth:`BatchShape.decode_only`; in iteration ``i`` every KV length is ``i`` longer
        (sum ``+ n*i``, squares ``+ 2*i*kv_sum + n*i*i``, max ``+ i``).

        Event skipping (:mod:`simulator.fast.skipping`) prices a whole stretch with one call.
        This default prices every iteration's shape with :meth:`iteration_time`, so it is
        exact for any cost model, including subclasses that add terms; a vectorised
        override must return the same floats bit for bit (and count what the scalar path
        counts), or fall back to this one.
        """
        n, out = num_decodes, []
        for i in range(num_iterations):
            shape = BatchShape.decode_only(n, kv_sum + n * i, kv_sq_sum + 2 * i * kv_sum + n * i * i, kv_max + i)
            out.append(self.iteration_time(shape))
        return out

    def count_decode_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int,
                                   num_iterations: int) -> None:
        """Count the extrapolations :meth:`decode_stretch_times` of these arguments counts, its times unwanted
        (event skipping, after pricing iterations it will not apply, counts those it applies). This default
        prices them; a model that counts a stretch's extrapolations apart from its pricing counts only."""
        self.decode_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, num_iterations)

    def count_chunk_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int, chunk: int,
                                  kv_before: int, num_iterations: int) -> None:
        """:meth:`count_decode_stretch_times` for :meth:`chunk_stretch_times`."""
        self.chunk_stretch_times(num_decodes, kv_sum, kv_sq_sum, kv_max, chunk, kv_before, num_iterations)

    def chunk_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int, chunk: int,
                            kv_before: int, num_iterations: int) -> list[float]:
        """``iteration_time`` of ``num_iterations`` consecutive iterations that each carry the
        decodes of :meth:`decode_stretch_times` (none when ``num_decodes`` is 0) and then one
        prefill chunk of ``chunk`` tokens that does not finish its prompt, over ``kv_before``
        cached tokens in the first (``kv_before + i * chunk`` in iteration ``i``): a long
        prompt's chunks beside steady decodes (chunked prefills).

        Each shape is built as the scheduler builds it (decodes first, then the chunk), so
        the floats are those of the per-iteration path for any cost model.
        """
        n, out = num_decodes, []
        for i in range(num_iterations):
            shape = BatchShape()
            shape.add_decodes(n, kv_sum + n * i, kv_sq_sum + 2 * i * kv_sum + n * i * i, kv_max + i)
            shape.add_prefill(chunk, kv_before + i * chunk, False)
            out.append(self.iteration_time(shape))
        return out


class TabulatedCostModel(CostModel):
    """A cost model whose token-count ops are precomputed onto a grid indexed by tokens.

    Subclasses provide vectorised pricing (``token_ops``, ``embedding_time``,
    ``lm_head_time``) and the two attention terms; this class owns the tables, grows them
    on demand, and answers the per-iteration calls with list lookups.
    """

    @abstractmethod
    def token_ops(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Per-layer seconds of each token-count op, vectorised over token counts."""

    @abstractmethod
    def embedding_time(self, tokens: np.ndarray) -> np.ndarray:
        """Embedding lookup, vectorised over token counts."""

    @abstractmethod
    def lm_head_time(self, num_logits: np.ndarray) -> np.ndarray:
        """Final norm, LM head and sampling, vectorised over sampled rows."""

    @abstractmethod
    def attention_prefill(self, shape: BatchShape) -> float:
        """One layer's prefill attention for the batch's chunks."""

    @abstractmethod
    def attention_decode(self, shape: BatchShape) -> float:
        """One layer's decode attention for the batch's decodes."""

    # Set by :meth:`_vector_stretch` while it checks its answer against the scalar path, so
    # that check leaves no trace (e.g. in a learned model's extrapolation counters).
    _quiet = False
    # Cleared for good the first time a vectorised stretch disagrees with the scalar path
    # (a subclass or an edit changed a term this vectorisation does not know about).
    _vector_stretch_ok = True
    # Stretches still to check against the scalar path (per instance; then trusted: the
    # check is there to catch a changed formula, which the first stretches already show).
    _stretch_checks_left = 32

    def _vector_stretch(self, n: int, kv_sum: int, kv_sq_sum: int, kv_max: int, num_iterations: int,
                        attention_decode_vector) -> list[float] | None:  # noqa: ANN001 - (n, sums, sq, max) -> array
        """A decode stretch priced with numpy: every term of ``iteration_time`` but decode
        attention is the same for the whole stretch (only decode KV fields change), so it is
        computed once by the scalar functions; decode attention comes vectorised from
        ``attention_decode_vector``. The terms are combined in ``iteration_time``'s order
        so each float matches the scalar path; the first and last are checked against it
        (for an instance's first stretches), and a mismatch returns None (and disables this path): the caller falls back to
        :meth:`CostModel.decode_stretch_times`. Returns None too where not vectorisable."""
        if not self._vector_stretch_ok:
            return None
        i = np.arange(num_iterations, dtype=np.int64)
        sums = kv_sum + n * i
        sq = (kv_sq_sum + 2 * kv_sum * i + n * i * i).astype(np.float64)
        maxes = kv_max + i
        first = BatchShape.decode_only(n, kv_sum, kv_sq_sum, kv_max)
        self._quiet = True
        try:
            attn = attention_decode_vector(n, sums, sq, maxes)
            if attn is None:
                return None
            head = self.overhead_time(first) + self.pre_time(first)
            layer_rest = self.token_time(n) + self.attention_prefill(first)
            times = ((head + self.model.num_layers * (layer_rest + attn)) + self.post_time(first)).tolist()
            ok = True
            if self._stretch_checks_left > 0:
                self._stretch_checks_left -= 1
                last = BatchShape.decode_only(n, int(sums[-1]), int(sq[-1]), int(maxes[-1]))
                ok = times[0] == self.iteration_time(first) and times[-1] == self.iteration_time(last)
        finally:
            self._quiet = False
        if not ok:
            self._vector_stretch_ok = False
            return None
        return times

    def _build_tables(self, size: int) -> None:
        tokens = np.arange(size, dtype=np.float64)
        self._table: list[float] = sum(self.token_ops(tokens).values()).tolist()
        self._pre_table: list[float] = self.embedding_time(tokens).tolist()
        self._post_table: list[float] = self.lm_head_time(tokens).tolist()

    def _grow(self, num_tokens: int) -> None:
        self._build_tables(max(num_tokens + 1, 2 * len(self._table)))

    def token_time(self, num_tokens: int) -> float:
        """Per-layer time of all token-count ops."""
        if num_tokens >= len(self._table):
            self._grow(num_tokens)
        return self._table[num_tokens]

    def layer_time(self, shape: BatchShape) -> float:
        t = shape.num_prefill_tokens + shape.num_decodes  # token_time, inlined: once per iteration
        if t >= len(self._table):
            self._grow(t)
        group = shape.moe_group_tokens  # (0 but in an attention-DP group's prompt step; x + 0.0 is x, bit for bit)
        return (self._table[t] + (self.group_token_delta(t, group) if group else 0.0) + self.attention_prefill(shape)
                + self.attention_decode(shape))

    # The token-count ops that price the MoE group's tokens (the routed experts and their activation; with attention
    # DP over a TP MoE, ``ep`` 1, the all-gather of every rank's tokens too): each prices ``t x attention_dp`` tokens
    # for a rank of ``t``, as if every rank were padded to this one's tokens.
    def group_ops(self) -> tuple[str, ...]:
        return ("moe_experts", "moe_act", "ep_all_to_all") if self.replica.ep == 1 else ("moe_experts", "moe_act")

    # The group ops' tables (group_token_delta): by a rank's tokens (the padded reading) and by the group's tokens.
    _group_by_rank: list[float] | None = None
    _group_by_total: list[float] | None = None

    def group_token_delta(self, num_tokens: int, group_tokens: int) -> float:
        """Per-layer seconds a rank of ``num_tokens`` tokens gains (or loses) when the MoE group routes
        ``group_tokens`` tokens, not ``num_tokens x attention_dp`` (:attr:`BatchShape.moe_group_tokens`): the
        group ops (:meth:`group_ops`) priced at ``group_tokens / attention_dp`` tokens a rank, less their price at
        ``num_tokens``. Tabulated both ways, as ``layer_time``'s ops are: a chunked prompt makes most of an
        attention-DP group's steps ask, every rank of them."""
        by_rank, by_total = self._group_by_rank, self._group_by_total
        if by_rank is None or by_total is None or num_tokens >= len(by_rank) or group_tokens >= len(by_total):
            self._grow_group_tables(num_tokens, group_tokens)
            by_rank, by_total = self._group_by_rank, self._group_by_total
        return by_total[group_tokens] - by_rank[num_tokens]

    def _grow_group_tables(self, num_tokens: int, group_tokens: int) -> None:
        names = self.group_ops()
        dp = self.replica.attention_dp

        def table(per_rank: np.ndarray) -> list[float]:
            ops = self.token_ops(per_rank)
            return sum((ops[name] for name in names if name in ops), np.zeros_like(per_rank)).tolist()

        size = max(num_tokens + 1, 2 * len(self._group_by_rank or ()), 1024)
        total = max(group_tokens + 1, 2 * len(self._group_by_total or ()), 1024 * dp)
        self._group_by_rank = table(np.arange(size, dtype=np.float64))
        self._group_by_total = table(np.arange(total, dtype=np.float64) / dp)

    def pre_time(self, shape: BatchShape) -> float:
        t = shape.num_prefill_tokens + shape.num_decodes
        if t >= len(self._pre_table):
            self._grow(t)
        return self._pre_table[t]

    def post_time(self, shape: BatchShape) -> float:
        n = shape.num_logits
        if n >= len(self._post_table):
            self._grow(n)
        return self._post_table[n]

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        layers = self.model.num_layers
        t = shape.num_prefill_tokens + shape.num_decodes
        out = {"cpu_overhead": self.overhead_time(shape), "embedding": self.pre_time(shape)}
        for op, value in self.token_ops(np.array([t], dtype=np.float64)).items():
            out[op] = layers * float(value[0])
        out["attn_prefill"] = layers * self.attention_prefill(shape)
        out["attn_decode"] = layers * self.attention_decode(shape)
        out["lm_head_sampling"] = self.post_time(shape)
        return out
