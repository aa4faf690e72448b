"""Speculative decoding settings: which drafter, how many draft tokens, how often they are accepted.

A request that speculates proposes ``k`` (``num_speculative_tokens``) draft tokens per step
(from a small draft model, an EAGLE/MTP head on the target's hidden states, Medusa's parallel
heads, or n-gram lookup in its own prompt) and the target verifies the last token plus the ``k`` drafts in one forward
pass. The drafts are accepted left to right until the first rejection; the target's token at
that position (correction, or the bonus token when all ``k`` are accepted) is emitted too, so a
step emits ``1 + a`` tokens, ``a`` in ``0..k``.

A drafter may propose a *token tree* instead of a chain (vLLM's ``speculative_token_tree``, SGLang's
``--speculative-eagle-topk`` with ``--speculative-num-draft-tokens``; EAGLE-2, Medusa and Hydra trees): several
candidates per position, all verified in the same pass (each node attends to the context and its own ancestors),
of which one root-to-leaf path is accepted. The tree's depth is ``k``; its nodes are the draft tokens a step
verifies (``num_verify_tokens``); the per-position rates below are the accepted path's (a measured tree AL is that
path's length).

Acceptance is held as *per-position conditional rates* ``r_1..r_k``: ``r_j`` is the chance
that draft ``j`` is accepted given drafts ``1..j-1`` were. Then ``P(a >= j) = r_1 * ... * r_j``
and the mean acceptance length (tokens per verify step, bonus included) is
``AL(k) = 1 + sum_j prod_{i<=j} r_i``; with one i.i.d. rate ``a`` that is
``(1 - a^(k+1)) / (1 - a)``. Measured AL curves fall faster than i.i.d. (the data folder's
README), hence per-position rates.

:class:`SpeculativeConfig` is frozen and validated on construction; :func:`from_vllm_json`
reads vLLM's ``--speculative-config`` JSON (``method``, ``num_speculative_tokens``, ``model``,
``disable_by_batch_size``, ``draft_tensor_parallel_size``, ``speculative_token_tree``). A named data-folder row is resolved
to rates by :mod:`simulator.config.acceptance` when options are parsed;
the config keeps the rates and names their source, so a saved config reproduces the run.

**Parallel drafting** (vLLM's ``parallel_drafting``, P-EAGLE and PARD drafters): the drafter proposes all ``k``
drafts in one forward pass (the last token and ``k - 1`` mask tokens a request) instead of ``k`` passes one after
another; it needs a drafter trained for it, named by ``model``. **Known heads** (:data:`DRAFT_HEADS`): an EAGLE
head whose shape is known (its layers, MLP width and draft vocabulary) is priced as that small dense model; any
other head as one layer of the target and the target's LM head.
"""

from __future__ import annotations

import ast
import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from simulator.config.catalog import MODELS, ModelSpec, get_model
from simulator.config.errors import ConfigError
from simulator.config.json_types import loads_once

METHODS = ("draft_model", "eagle", "eagle3", "mtp", "medusa", "ngram")
# vLLM's method names (and older spellings) mapped to ours.
_VLLM_METHODS = {"draft_model": "draft_model", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp",
                 "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "glm4_moe_mtp": "mtp", "mimo_mtp": "mtp",
                 "ernie_mtp": "mtp", "ngram": "ngram", "medusa": "medusa", "mlp_speculator": "eagle"}
# vLLM keys a pasted config may carry that do not change a simulated run, and why (said in the run's header).
UNMODELLED_KEYS = {"prompt_lookup_max": "n-gram match lengths act through the acceptance rates",
                   "prompt_lookup_min": "n-gram match lengths act through the acceptance rates",
                   "quantization": "the draft model is priced at the target's --dtype",
                   # (vLLM's docs write it in their EAGLE examples: a head runs on the target's GPUs, whatever it says)
                   "draft_tensor_parallel_size": "a head or lookup runs inside the target's step, on its GPUs",
                   "max_model_len": "the drafts' context is the target's --max-model-len"}
# Draft tokens a step at most: far past any drafter's (and past 2^63 the verify step's arrays overflow).
MAX_SPECULATIVE_TOKENS = 256
_VLLM_KEYS = tuple(dict.fromkeys((  # (draft_tensor_parallel_size is also an unmodelled one's key: named once)
    "method", "num_speculative_tokens", "model", "disable_by_batch_size", "draft_tensor_parallel_size",
    "acceptance_rate", "acceptance_rates", "reduce_k_batch_size", "acceptance_source", "speculative_token_tree",
    "parallel_drafting", *UNMODELLED_KEYS)))
# The methods whose drafter can propose its k drafts in one pass (vLLM's unified parallel drafting: EAGLE heads
# trained for it, P-EAGLE, and parallel draft models, PARD). Medusa's heads are parallel already; n-gram and MTP
# modules are not trained for it.
PARALLEL_DRAFTING_METHODS = ("eagle", "eagle3", "draft_model")


def al_iid(rate: float, k: int) -> float:
    """Mean tokens per verify step for i.i.d. acceptance ``rate`` and ``k`` drafts:
    ``(1 - rate^(k+1)) / (1 - rate)`` (``k + 1`` at rate 1)."""
    if rate >= 1.0:
        return float(k + 1)
    return (1.0 - rate ** (k + 1)) / (1.0 - rate)


def al_of_rates(rates: tuple[float, ...] | list[float]) -> float:
    """Mean tokens per verify step for per-position conditional rates: ``1 + sum_j prod_{i<=j} r_i``."""
    total, p = 1.0, 1.0
    for r in rates:
        p *= r
        total += p
    return total


@dataclass(frozen=True)
class SpeculativeConfig:
    """One run's speculative decoding. Off when a run config holds None.

    ``acceptance_rates`` holds ``k`` per-position conditional rates (one given rate is
    repeated: i.i.d.). Adaptive policy (as engines do, so a planner can compare): with
    ``disable_by_batch_size`` running requests or more nobody speculates (vLLM's
    ``disable_by_batch_size``: ``running_queue_size >= disable_by_batch_size``); above
    ``reduce_k_batch_size`` each step's ``k`` shrinks to ``max(1, k * reduce_k_batch_size // running)``
    so the drafts per step stay near ``reduce_k_batch_size * k`` (the verify tokens near
    ``running + reduce_k_batch_size * k``).
    """

    method: str = "eagle3"
    num_speculative_tokens: int = 3
    draft_model: str | None = None  # a catalog model (or one of DRAFT_MODELS) for draft_model
    acceptance_rates: tuple[float, ...] = ()
    acceptance_source: str = ""  # where the rates came from (flag, data-folder row)
    # The draft model's tensor parallelism (vLLM's draft_tensor_parallel_size): None, as vLLM leaves it unset, is
    # the target's TP (vLLM sets an unset value to it; V1's draft-model proposer needs it equal), else 1 or the target's.
    draft_tp: int | None = None
    disable_by_batch_size: int | None = None
    reduce_k_batch_size: int | None = None
    # vLLM keys the JSON gave that this run does not model (UNMODELLED_KEYS); said, not silent
    unmodelled_keys: tuple[str, ...] = field(default=(), compare=False)
    # A token tree (vLLM's speculative_token_tree): each node the path of child ranks from the root, e.g.
    # ((0,), (1,), (0, 0)) drafts 3 tokens, 2 candidates at position 1; its depth is num_speculative_tokens.
    # () is the chain of k.
    token_tree: tuple[tuple[int, ...], ...] = ()
    # vLLM's parallel_drafting: the k drafts in one drafter pass (module docstring); a chain only.
    parallel_drafting: bool = False

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError("speculative.method", f"unknown method {self.method!r}", f"use one of {', '.join(METHODS)}")
        k = self.num_speculative_tokens
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ConfigError("speculative.num_speculative_tokens", f"must be an integer >= 1, got {k!r}",
                              "pass num_speculative_tokens >= 1 (or drop --speculative-config to turn it off)")
        if k > MAX_SPECULATIVE_TOKENS:
            raise ConfigError("speculative.num_speculative_tokens", f"must be at most {MAX_SPECULATIVE_TOKENS}, got {k:,}",
                              f"pass num_speculative_tokens <= {MAX_SPECULATIVE_TOKENS}; drafters propose a handful "
                              "a step (3 to 8 in vLLM's examples)")
        if self.method == "draft_model" and not self.draft_model:
            raise ConfigError("speculative.model", "method draft_model needs a draft model",
                              'add "model": "<catalog name>" to --speculative-config')
        if self.method == "ngram" and self.draft_model:  # (an EAGLE/Medusa head's path is normal: DRAFT_HEADS)
            raise ConfigError("speculative.model", f"ngram looks its drafts up in the request's own tokens, so a model "
                              f"({self.draft_model!r}) would do nothing", 'drop "model", or use method draft_model')
        rates = tuple(float(r) for r in self.acceptance_rates)
        if not rates:
            raise ConfigError("speculative.acceptance", "no acceptance rates given",
                              "pass --acceptance-rate A, --acceptance-rates r1,r2,.. or --acceptance-data MODEL:METHOD")
        if len(rates) == 1 and k > 1:
            rates = rates * k
        if len(rates) != k:  # (more than k were cut to k: a typo in k or in the list went unseen)
            raise ConfigError("speculative.acceptance_rates", f"{len(rates)} per-position rates for k={k}",
                              f"give one rate (i.i.d.) or exactly {k}, one a draft position")
        for r in rates:
            if not (0.0 <= r <= 1.0) or math.isnan(r):
                raise ConfigError("speculative.acceptance_rates", f"rates must lie in [0, 1], got {r}",
                                  "give each a probability between 0 and 1")
        object.__setattr__(self, "acceptance_rates", rates)
        if self.draft_tp is not None and (not isinstance(self.draft_tp, int) or isinstance(self.draft_tp, bool)
                                          or self.draft_tp < 1):
            raise ConfigError("speculative.draft_tp", f"must be an integer >= 1, got {self.draft_tp!r}",
                              'give --speculative-config a "draft_tensor_parallel_size" >= 1, or leave it out')
        # (heads and lookups run inside the target's step; 1 is kept: configs saved before None meant the target's)
        if self.draft_tp not in (None, 1) and self.method != "draft_model":
            raise ConfigError("speculative.draft_tp", f"{self.method} has no draft model of its own to lay out, so "
                              f"draft_tensor_parallel_size {self.draft_tp} would do nothing",
                              "drop draft_tensor_parallel_size")
        # vLLM refuses a disable_by_batch_size below 2: at 1 every step (one running request at least) is off.
        for name, least in (("disable_by_batch_size", 2), ("reduce_k_batch_size", 1)):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < least):
                raise ConfigError(f"speculative.{name}", f"must be an integer >= {least}, got {v!r}",
                                  "drop it to keep k fixed")
        reduce, disable = self.reduce_k_batch_size, self.disable_by_batch_size
        # k shrinks above `reduce` running requests, and speculation is off from `disable` on.
        if reduce is not None and disable is not None and reduce >= disable - 1:
            raise ConfigError("speculative.reduce_k_batch_size", f"{reduce} leaves no batch to shrink k in: k would "
                              f"shrink above {reduce} running requests, and speculation is off from "
                              f"disable_by_batch_size {disable} on", "give --spec-reduce-k-batch-size below "
                              "--spec-disable-batch-size minus 1, or drop one")
        if reduce is not None and self.num_speculative_tokens == 1:  # max(1, ...) keeps one draft
            raise ConfigError("speculative.reduce_k_batch_size", "k = 1 draft cannot shrink (k falls to 1 at least)",
                              "drop --spec-reduce-k-batch-size, or draft more tokens")
        if self.draft_model is not None and not isinstance(self.draft_model, str):
            raise ConfigError("speculative.model", f"must be a model name, got {self.draft_model!r}")
        object.__setattr__(self, "token_tree", _checked_tree(self.token_tree, k))
        if not isinstance(self.parallel_drafting, bool):
            raise ConfigError("speculative.parallel_drafting", f"must be true or false, got {self.parallel_drafting!r}")
        if self.parallel_drafting and self.method not in PARALLEL_DRAFTING_METHODS:
            raise ConfigError("speculative.parallel_drafting", f"{self.method} has no drafter that proposes its drafts "
                              f"in one pass", f"use it with {', '.join(PARALLEL_DRAFTING_METHODS)} and a drafter "
                              "trained for it, or drop parallel_drafting")
        if self.parallel_drafting and not self.draft_model:  # (only a drafter trained for it proposes k at once)
            raise ConfigError("speculative.model", "parallel_drafting needs the drafter trained for it",
                              'name it with "model" (e.g. "amazon/GPT-OSS-20B-P-EAGLE"), or drop parallel_drafting')
        head = draft_head(self.draft_model) if self.parallel_drafting else None
        if head is not None and not head.parallel:  # (it was trained on chains: one pass would propose garbage)
            parallel = [h.spec.hf_id for h in DRAFT_HEADS.values() if h.parallel and h.target == head.target]
            raise ConfigError("speculative.parallel_drafting", f"{head.spec.hf_id} drafts a chain, one pass a token: it "
                              "was not trained to propose its drafts in one pass",
                              f"drop parallel_drafting{f', or use {parallel[0]}' if parallel else ''}")
        if self.parallel_drafting and self.token_tree:  # (vLLM's parallel drafting proposes a chain)
            raise ConfigError("speculative.parallel_drafting", "proposes a chain of k drafts, not a token tree",
                              "drop speculative_token_tree, or parallel_drafting")
        object.__setattr__(self, "unmodelled_keys", tuple(str(key) for key in self.unmodelled_keys))
        bad = sorted(set(self.unmodelled_keys) - set(UNMODELLED_KEYS))
        if bad:
            raise ConfigError("speculative.unmodelled_keys", f"not a vLLM key this run leaves unmodelled: {bad[0]!r}",
                              f"known: {', '.join(UNMODELLED_KEYS)}")

    def unmodelled_note(self) -> str:
        """One line naming the vLLM keys given that do not change the run, and why ('' if none)."""
        if not self.unmodelled_keys:
            return ""
        return "not modelled: " + "; ".join(f"{key} ({UNMODELLED_KEYS[key]})" for key in self.unmodelled_keys)

    @property
    def k(self) -> int:
        return self.num_speculative_tokens

    @cached_property  # read by every drafter pass (the config is frozen: looked up once)
    def known_head(self) -> DraftHead | None:
        """The known EAGLE head ``model`` names (:data:`DRAFT_HEADS`), for an EAGLE method; else None (an unknown
        head: one layer of the target)."""
        return draft_head(self.draft_model) if self.method in HEAD_METHODS else None

    def draft_tp_for(self, target_tp: int) -> int:
        """The draft model's TP beside a target at ``target_tp``: ``draft_tp`` as given, else the target's."""
        return target_tp if self.draft_tp is None else self.draft_tp

    @property
    def num_verify_tokens(self) -> int:
        """Draft tokens a request verifies in a step at full ``k``: the tree's nodes, else ``k``."""
        return len(self.token_tree) or self.num_speculative_tokens

    @cached_property  # read by every step of a run (the config is frozen: computed once)
    def tree_widths(self) -> tuple[int, ...]:
        """Tokens each of the ``k`` draft passes feeds the drafter per request: the tree's nodes at depth
        ``0..k-1`` (the root, the last token, first); all 1 for a chain."""
        if not self.token_tree:
            return (1,) * self.num_speculative_tokens
        widths = [1] + [0] * (self.num_speculative_tokens - 1)
        for node in self.token_tree:
            if len(node) < len(widths):
                widths[len(node)] += 1
        return tuple(widths)

    @cached_property  # read by every step of a run (the config is frozen: computed once)
    def verify_pairs(self) -> int:
        """Query-key pairs among a full verify's own ``num_verify_tokens + 1`` tokens: the root attends to
        itself, a node at depth ``d`` to the root and its ``d`` ancestors-or-self (``c (c + 1) / 2`` for a chain
        of ``c`` tokens)."""
        if not self.token_tree:
            c = self.num_speculative_tokens + 1
            return c * (c + 1) // 2
        return 1 + sum(len(node) + 1 for node in self.token_tree)

    @property
    def mean_acceptance_length(self) -> float:
        """Expected tokens per verify step at full ``k`` (bonus included)."""
        return al_of_rates(self.acceptance_rates)

    def k_for(self, num_running: int) -> int:
        """Draft tokens per request in a step with ``num_running`` running requests (0: off)."""
        if self.disable_by_batch_size is not None and num_running >= self.disable_by_batch_size:  # vLLM's test
            return 0
        k = self.num_speculative_tokens
        if self.reduce_k_batch_size is not None and num_running > self.reduce_k_batch_size:
            return max(1, k * self.reduce_k_batch_size // num_running)
        return k

    def accepted_cdf(self) -> tuple[float, ...]:
        """``cdf[j] = P(a <= j)`` for ``j = 0..k-1`` (``P(a <= k) = 1``): the accepted drafts'
        distribution, for drawing ``a`` with one uniform."""
        out, p_ge, acc = [], 1.0, 0.0
        for r in self.acceptance_rates:
            acc += p_ge * (1.0 - r)  # P(a == j): the first j accepted, draft j+1 rejected
            p_ge *= r
            out.append(acc)
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens,
                "draft_model": self.draft_model, "acceptance_rates": list(self.acceptance_rates),
                "acceptance_source": self.acceptance_source, "draft_tp": self.draft_tp,
                "disable_by_batch_size": self.disable_by_batch_size, "reduce_k_batch_size": self.reduce_k_batch_size,
                "unmodelled_keys": list(self.unmodelled_keys), "token_tree": [list(node) for node in self.token_tree],
                "parallel_drafting": self.parallel_drafting}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeculativeConfig:
        known = set(cls.__dataclass_fields__)
        bad = set(data) - known
        if bad:
            raise ConfigError(f"config.speculative.{sorted(bad)[0]}", "unknown key", f"known: {', '.join(sorted(known))}")
        data = dict(data)
        for name in ("acceptance_rates", "unmodelled_keys"):
            if name in data:
                data[name] = tuple(data[name])
        if "token_tree" in data:
            data["token_tree"] = _tree_tuple(data["token_tree"], "config.speculative.token_tree")
        return cls(**data)


# Draft models not in the main catalog (a draft is never served on its own).
DRAFT_MODELS: dict[str, ModelSpec] = {
    # Qwen2-0.5B with Llama-3's vocabulary (the vLLM 2024 blog's draft for Llama-3-70B):
    # turboderp/Qwama-0.5B-Instruct config.json.
    "qwama-0.5b": ModelSpec("qwama-0.5b", "turboderp/Qwama-0.5B-Instruct", 24, 896, 14, 2, 4864, 128256, 32768,
                            tied_embeddings=True),
    # The Spec-Bench SpS draft for Vicuna (double7/vicuna-68m config.json).
    "vicuna-68m": ModelSpec("vicuna-68m", "double7/vicuna-68m", 2, 768, 12, 12, 3072, 32000, 2048),
}


# EAGLE heads whose shape is known: each priced as a small dense model of its own (its layers, its draft
# vocabulary's LM head; the embedding is the target's), where an unknown head is one layer of the target. EAGLE-3
# heads (both here) also read wider inputs, priced beside the layers (SpeculativeCostModel): the first layer's
# attention projections read the token's embedding and hidden state side by side (2 x hidden inputs), and an fc
# folds three of the target's hidden states into one, once a step.
@dataclass(frozen=True)
class DraftHead:
    """A known EAGLE head: its shape as a model (``spec``: layers, widths, draft vocabulary) and the catalog model
    it was trained for (``target``: its hidden states are what it reads)."""

    spec: ModelSpec
    target: str
    parallel: bool = False  # trained to propose its k drafts in one pass (vLLM's parallel_drafting), not a chain

    @property
    def input_gemms(self) -> tuple[tuple[int, int], tuple[int, int]]:
        """(k, n) of its two GEMMs beyond its layers as a model (EAGLE-3's wider inputs): the embedding's inputs to
        the first layer's q, k and v (``hidden -> (heads + 2 kv heads) x head_dim``), and the fc over three target
        hidden states (``3 hidden -> hidden``), once a step."""
        m = self.spec
        return (m.hidden_size, (m.num_heads + 2 * m.num_kv_heads) * m.head_dim), (3 * m.hidden_size, m.hidden_size)


DRAFT_HEADS: dict[str, DraftHead] = {
    # gpt-oss-20b's EAGLE-3 head: the speculators-format head's shape (nm-testing/for_testing_gptoss20b_spec_eagle3
    # config.json, a copy of the gpt-oss-20b EAGLE-3 speculator: one llama layer, hidden 2880, MLP 2880, 64 query /
    # 8 KV heads of 64, draft vocabulary 32,000), taken for RedHatAI's checkpoint (whose config was not read).
    "gpt-oss-20b-eagle3": DraftHead(ModelSpec(
        "gpt-oss-20b-eagle3", "RedHatAI/gpt-oss-20b-speculator.eagle3", 1, 2880, 64, 8, 2880, 32000, 131072,
        explicit_head_dim=64, source="nm-testing/for_testing_gptoss20b_spec_eagle3 config.json (shape taken for "
                                     "RedHatAI/gpt-oss-20b-speculator.eagle3)"), "gpt-oss-20b"),
    # P-EAGLE for gpt-oss-20b (vLLM's P-EAGLE post, 2026-03-13, and the model card: "a 4-layer P-EAGLE", following
    # EAGLE-3 over three of the target's hidden states); each layer and the draft vocabulary assumed the EAGLE-3
    # head's (the checkpoint's config.json was not read).
    "gpt-oss-20b-p-eagle": DraftHead(ModelSpec(
        "gpt-oss-20b-p-eagle", "amazon/GPT-OSS-20B-P-EAGLE", 4, 2880, 64, 8, 2880, 32000, 131072,
        explicit_head_dim=64, source="amazon/GPT-OSS-20B-P-EAGLE model card (4 layers); the layer's shape and draft "
                                     "vocabulary assumed gpt-oss-20b's EAGLE-3 head's"), "gpt-oss-20b", parallel=True),
}
HEAD_METHODS = ("eagle", "eagle3")  # the methods whose "model" may name a known head


def draft_head(name: str | None) -> DraftHead | None:
    """A known EAGLE head (:data:`DRAFT_HEADS`) by name or HF id, any case; None for any other."""
    if not name:
        return None
    key = name.lower()
    return next((h for h in DRAFT_HEADS.values() if key in (h.spec.name, h.spec.hf_id.lower())), None)


def draft_spec(name: str) -> ModelSpec:
    """A draft model by name: :data:`DRAFT_MODELS` first, then the catalog (HF ids accepted)."""
    key = name.lower()
    for spec in DRAFT_MODELS.values():
        if key in (spec.name, spec.hf_id.lower()):
            return spec
    try:
        return get_model(name)
    except ConfigError:
        if draft_head(name) is not None:
            raise ConfigError("speculative.model", f"{name} is an EAGLE head, not a draft model",
                              'use "method": "eagle3" with it') from None
        raise ConfigError("speculative.model", f"unknown draft model {name!r}",
                          f"use a catalog model or one of {', '.join(DRAFT_MODELS)}") from None


def check_drafter(spec: SpeculativeConfig, target: ModelSpec) -> None:
    """Refuses a draft model whose vocabulary is not the target's, as vLLM does
    (``verify_equal_vocab_size_if_draft_model``): its drafts are token ids the target verifies; and a known EAGLE
    head (:data:`DRAFT_HEADS`) trained for another model (it reads its own target's hidden states)."""
    head = spec.known_head
    if head is not None and head.target != target.name:  # a head reads its own target's hidden states
        raise ConfigError("speculative.model", f"{head.spec.hf_id} is {head.target}'s head, not {target.name}'s",
                          f"name {target.name}'s own head, or leave \"model\" out (priced as one layer of it)")
    if spec.method != "draft_model" or spec.draft_model is None:
        return
    draft = draft_spec(spec.draft_model)
    if draft.vocab_size == target.vocab_size:
        return
    same = sorted((m for m in (*DRAFT_MODELS.values(), *MODELS.values())
                   if m.vocab_size == target.vocab_size and m.num_params < target.num_params), key=lambda m: m.num_params)
    raise ConfigError("speculative.model", f"draft {draft.name}'s vocabulary of {draft.vocab_size:,} tokens is not "
                      f"{target.name}'s {target.vocab_size:,}: its drafts would be another tokenizer's ids",
                      "use a draft with the target's tokenizer" + (f", e.g. {', '.join(m.name for m in same[:3])}"
                                                                  if same else ""))


def _tree_tuple(raw: Any, where: str) -> tuple[tuple[int, ...], ...]:
    """A tree given as a list of paths (JSON lists or tuples) as a tuple of int tuples (one-line error otherwise)."""
    try:
        return tuple(tuple(node) for node in raw)
    except TypeError:
        raise ConfigError(where, f"must be a list of paths, got {raw!r}", "e.g. [(0,), (1,), (0, 0)]") from None


def _checked_tree(tree: Any, k: int) -> tuple[tuple[int, ...], ...]:
    """``tree`` validated (paths of child ranks, each node's parent present, depth ``k``) and sorted
    breadth-first, as vLLM sorts it; () stays the chain."""
    tree = _tree_tuple(tree, "speculative.token_tree")
    if not tree:
        return ()
    where = "speculative.token_tree"
    fix = "write each node as the path of child ranks from the root, e.g. [(0,), (1,), (0, 0)]"
    for node in tree:
        if not node or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in node):
            raise ConfigError(where, f"node {node!r} is not a non-empty path of ranks >= 0", fix)
    nodes = sorted(tree, key=lambda n: (len(n), n))
    seen: set[tuple[int, ...]] = set()
    for node in nodes:
        if node in seen:
            raise ConfigError(where, f"node {node!r} given twice", "give each node once")
        if len(node) > 1 and node[:-1] not in seen:
            raise ConfigError(where, f"node {node!r} has no parent {node[:-1]!r}", "add the parent, or drop the node")
        seen.add(node)
    if len(nodes) > MAX_SPECULATIVE_TOKENS:
        raise ConfigError(where, f"{len(nodes):,} nodes, more than {MAX_SPECULATIVE_TOKENS}", "verify a smaller tree")
    depth = len(nodes[-1])
    if depth != k:
        raise ConfigError("speculative.num_speculative_tokens", f"{k} positions, but the token tree is {depth} deep",
                          f"a tree's depth is its draft positions: drop --num-speculative-tokens or pass {depth}")
    return tuple(nodes)


def parse_rates(text: str) -> tuple[float, ...]:
    """``'0.8,0.7,0.6'`` -> per-position rates (one-line error on anything else)."""
    items = text.split(",")
    if text.strip():
        empty = next((i for i, x in enumerate(items, 1) if not x.strip()), None)
        if empty is not None:  # (dropped, it moved every later rate one draft position earlier)
            raise ConfigError("--acceptance-rates", f"item {empty} of {len(items)} in {text!r} is empty",
                              "give one rate per draft position, e.g. --acceptance-rates 0.8,0.7,0.6")
    try:
        rates = tuple(float(x) for x in items if x.strip())
    except ValueError:
        raise ConfigError("--acceptance-rates", f"not a comma-separated list of numbers: {text!r}",
                          "e.g. --acceptance-rates 0.8,0.7,0.6") from None
    if not rates:
        raise ConfigError("--acceptance-rates", "empty list", "e.g. --acceptance-rates 0.8,0.7,0.6")
    return rates


def _check_prompt_lookup(data: dict[str, Any], method: str) -> None:
    """n-gram's ``prompt_lookup_min``/``prompt_lookup_max`` checked as vLLM's SpeculativeConfig checks them (one given
    stands for both; each at least 1, min <= max), though their effect here is the acceptance rates': a range
    vLLM refuses must not run. Given to another method they would do nothing (vLLM sets them to 0)."""
    given = {key: data[key] for key in ("prompt_lookup_min", "prompt_lookup_max") if data.get(key) is not None}
    if not given:
        return
    if method != "ngram":
        key = next(iter(given))
        raise ConfigError(f"--speculative-config.{key}", f"sets n-gram's lookup, and {method} looks nothing up, so it "
                          "would do nothing", f"drop {key}, or use method ngram")
    for key, value in given.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"--speculative-config.{key}", f"must be a whole number of tokens, got {value!r}",
                              f'e.g. "{key}": 4')
        if value < 1:
            raise ConfigError(f"--speculative-config.{key}", f"must be at least 1, got {value}", f'e.g. "{key}": 4')
    low = given.get("prompt_lookup_min", given.get("prompt_lookup_max"))
    high = given.get("prompt_lookup_max", low)
    if low > high:
        raise ConfigError("--speculative-config.prompt_lookup_min", f"{low} is above prompt_lookup_max {high}",
                          "give prompt_lookup_min <= prompt_lookup_max")


def vllm_json_fields(text: str) -> dict[str, Any]:
    """The :class:`SpeculativeConfig` fields vLLM's ``--speculative-config`` JSON gives (one-line
    errors on anything else), e.g. ``{"method": "eagle3", "num_speculative_tokens": 3, "model": "..."}``.
    An old-style ``"model": "[ngram]"`` means n-gram; a model without a method means a draft
    model. Keys ``acceptance_rate`` / ``acceptance_rates`` / ``reduce_k_batch_size`` /
    ``acceptance_source`` are ours (so a whole config fits in one JSON string)."""
    try:
        data = loads_once(text, "--speculative-config")
    except json.JSONDecodeError as exc:
        raise ConfigError("--speculative-config", f"not valid JSON ({exc.msg} at column {exc.colno})",
                          """e.g. '{"method": "eagle3", "num_speculative_tokens": 3}'""") from None
    if not isinstance(data, dict):
        raise ConfigError("--speculative-config", "must be a JSON object", """e.g. '{"method": "ngram", "num_speculative_tokens": 4}'""")
    bad = sorted(set(data) - set(_VLLM_KEYS))
    if bad:
        raise ConfigError(f"--speculative-config.{bad[0]}", "unknown key", f"known: {', '.join(_VLLM_KEYS)}")
    model = data.get("model")
    method = data.get("method")
    if method is None:
        method = "ngram" if model == "[ngram]" else ("draft_model" if model else None)
    if method is None:
        raise ConfigError("--speculative-config.method", "missing", f"give one of {', '.join(METHODS)}")
    if str(method).lower() not in _VLLM_METHODS:
        raise ConfigError("--speculative-config.method", f"unknown method {method!r}", f"use one of {', '.join(METHODS)}")
    tree: tuple[tuple[int, ...], ...] = ()
    if data.get("speculative_token_tree") is not None:  # vLLM's string of a list of tuples (a list, too)
        raw = data["speculative_token_tree"]
        if isinstance(raw, str):
            try:
                raw = ast.literal_eval(raw)
            except (ValueError, SyntaxError):
                raise ConfigError("--speculative-config.speculative_token_tree", f"cannot read {raw!r}",
                                  'write it as vLLM does, e.g. "[(0,), (1,), (0, 0)]"') from None
        tree = _tree_tuple(raw, "--speculative-config.speculative_token_tree")
        if not tree:
            raise ConfigError("--speculative-config.speculative_token_tree", "empty", "give at least one node, or drop it")
        given = data.get("num_speculative_tokens")
        if given is not None and given != len(tree):  # vLLM counts a tree's nodes as its speculative tokens
            raise ConfigError("--speculative-config.num_speculative_tokens",
                              f"{given!r}, but speculative_token_tree has {len(tree)} nodes",
                              f"pass {len(tree)} (vLLM's count of a tree's draft tokens), or leave it out")
        depth = max(len(node) for node in tree)
        data = {**data, "num_speculative_tokens": depth}  # ours: the tree's positions (SpeculativeConfig.k)
    if "num_speculative_tokens" not in data:
        raise ConfigError("--speculative-config.num_speculative_tokens", "missing", 'add "num_speculative_tokens": 3')
    rates: tuple[float, ...] = ()
    source = str(data.get("acceptance_source") or "")
    if data.get("acceptance_rates") is not None and data.get("acceptance_rate") is not None:
        raise ConfigError("--speculative-config.acceptance_rate", "given with acceptance_rates, which would win",
                          "give one of acceptance_rate (i.i.d.) and acceptance_rates (per position)")
    if data.get("acceptance_rates") is not None:
        raw = data["acceptance_rates"]
        if not isinstance(raw, list) or not all(isinstance(r, int | float) and not isinstance(r, bool) for r in raw):
            raise ConfigError("--speculative-config.acceptance_rates", f"must be a list of numbers, got {raw!r}",
                              'e.g. "acceptance_rates": [0.8, 0.7, 0.6]')
        rates = tuple(float(r) for r in raw)
        source = source or "--speculative-config acceptance_rates"
    elif data.get("acceptance_rate") is not None:
        raw = data["acceptance_rate"]
        if not isinstance(raw, int | float) or isinstance(raw, bool):
            raise ConfigError("--speculative-config.acceptance_rate", f"must be a number, got {raw!r}",
                              'e.g. "acceptance_rate": 0.7')
        rates = (float(raw),)
        source = source or "--speculative-config acceptance_rate (i.i.d.)"
    ours = _VLLM_METHODS[str(method).lower()]
    _check_prompt_lookup(data, ours)
    if data.get("quantization") is not None and ours == "ngram":
        raise ConfigError("--speculative-config.quantization", "ngram looks its drafts up in the request's own tokens "
                          "and has no draft model to quantize, so it would do nothing", "drop quantization")
    draft_tp = data.get("draft_tensor_parallel_size")
    if draft_tp is not None and ours != "draft_model" and (not isinstance(draft_tp, int) or isinstance(draft_tp, bool)
                                                           or draft_tp < 1):
        raise ConfigError("--speculative-config.draft_tensor_parallel_size", f"must be an integer >= 1, got "
                          f"{draft_tp!r}", "drop draft_tensor_parallel_size, or give it as vLLM takes it")
    parallel = data.get("parallel_drafting")
    if parallel is not None and not isinstance(parallel, bool):
        raise ConfigError("--speculative-config.parallel_drafting", f"must be true or false, got {parallel!r}",
                          '"parallel_drafting": true')
    return {"method": ours, "num_speculative_tokens": data["num_speculative_tokens"],
            "draft_model": None if model == "[ngram]" else model, "acceptance_rates": rates,
            "acceptance_source": source,
            # None (vLLM's default) is the target's TP; a 0 or -1 typed is refused by SpeculativeConfig, not read as None;
            # a head's or a lookup's is read nowhere (it runs on the target's GPUs): said as unmodelled
            "draft_tp": draft_tp if ours == "draft_model" else None,
            "disable_by_batch_size": data.get("disable_by_batch_size"),
            "reduce_k_batch_size": data.get("reduce_k_batch_size"),
            "unmodelled_keys": tuple(key for key in UNMODELLED_KEYS if data.get(key) is not None
                                     and not (key == "draft_tensor_parallel_size" and ours == "draft_model")),
            "token_tree": tree, "parallel_drafting": bool(parallel)}


def to_vllm_json(spec: SpeculativeConfig) -> str:
    """``spec`` as one ``--speculative-config`` string (:func:`vllm_json_fields` reads it back to
    an equal config): vLLM's keys plus ours for the acceptance and the k reduction."""
    data: dict[str, Any] = {"method": spec.method, "num_speculative_tokens": spec.num_verify_tokens}
    if spec.token_tree:
        data["speculative_token_tree"] = str(list(spec.token_tree))
    if spec.draft_model is not None:
        data["model"] = spec.draft_model
    if spec.draft_tp is not None:
        data["draft_tensor_parallel_size"] = spec.draft_tp
    if spec.disable_by_batch_size is not None:
        data["disable_by_batch_size"] = spec.disable_by_batch_size
    if spec.reduce_k_batch_size is not None:
        data["reduce_k_batch_size"] = spec.reduce_k_batch_size
    if spec.parallel_drafting:
        data["parallel_drafting"] = True
    data["acceptance_rates"] = list(spec.acceptance_rates)
    if spec.acceptance_source:
        data["acceptance_source"] = spec.acceptance_source
    return json.dumps(data)


def from_vllm_json(text: str, acceptance_rates: tuple[float, ...] = (), acceptance_source: str = "",
                   **overrides: Any) -> SpeculativeConfig:
    """A :class:`SpeculativeConfig` from vLLM's ``--speculative-config`` JSON
    (:func:`vllm_json_fields`); rates given here win over the JSON's."""
    kwargs = vllm_json_fields(text)
    if acceptance_rates:
        kwargs["acceptance_rates"] = tuple(acceptance_rates)
        kwargs["acceptance_source"] = acceptance_source
    elif acceptance_source:
        kwargs["acceptance_source"] = acceptance_source
    kwargs.update(overrides)
    return SpeculativeConfig(**kwargs)


def unmodelled_line(spec: SpeculativeConfig | None) -> str | None:
    """The note naming the ``--speculative-config`` keys given that do not change the run, as a run's header says it
    and as a command prints it where it shows no header (``--json`` on stderr, ``--metrics vllm``, ``capacity``,
    ``sweep``); None without speculation or where every key given is modelled."""
    return f"note: --speculative-config {note}" if spec is not None and (note := spec.unmodelled_note()) else None
