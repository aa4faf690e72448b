"""Speculative decoding in the loop: draft, verify ``k + 1`` tokens in one pass, emit the accepted run.

A running request that decodes normally contributes one token to a step (its last output
token, fed back) and gets one token out. Speculating, it contributes ``1 + k`` query tokens
(the last token and ``k`` drafts), which count against the step's token budget like any other
token, and the step's verify pass emits ``1 + a`` tokens at once (``a`` accepted drafts, then
the target's correction or bonus token), all at the step's end time. ``a`` is drawn per
request-step from the per-position acceptance rates of the run's
:class:`~simulator.config.speculative.SpeculativeConfig`, with the run's own seeded
``numpy.random.Generator`` (uniforms drawn in blocks; same seed, same run).

Token and KV accounting (the contract of :mod:`simulator.workload.request`, extended): before
the step the request holds KV blocks for ``num_computed + 1 + k`` tokens (the verify pass
writes every position); after it ``num_computed`` grows by ``1 + a`` (the last token and the
accepted drafts are cached; the newest token is still to be fed, so ``num_missing`` stays 1)
and the blocks past ``num_computed`` are freed (rejected drafts' slots). Output is capped at
the request's remaining tokens: ``k`` is cut to ``remaining - 1`` and ``1 + a`` to ``remaining``.

Gaps: the per-token view (vLLM's ITL) records the step's gap for the run's first token and
``a`` zero gaps for the rest; :func:`per_step_gaps` gives the per-step view (one gap per
request-step: the per-token log less those zeros). TPOT, ``(completion - first token) /
(n - 1)``, is unchanged in definition.

Fast paths: lockstep decodes and event skipping (:mod:`simulator.fast`) assume one token
per decode step; a speculating scheduler's class is not among the policies they know
(:data:`simulator.fast.steady.RULES` lists exact classes), so the step-by-step loop runs. A step in
which the adaptive policy turns speculation off is built and priced exactly as a plain step.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from functools import cache

import numpy as np

from simulator.config.run_config import ReplicaConfig, RunConfig
from simulator.config.speculative import SpeculativeConfig
from simulator.costmodel.speculative import SpecBatchShape, SpeculativeCostModel
from simulator.engine.schedulers import SCHEDULERS
from simulator.engine.schedulers.base import Batch, Scheduler
from simulator.engine.tbt import GapLog, itl_views, merged
from simulator.workload.request import Request

_UNIFORM_BLOCK = 4096  # uniforms drawn per Generator call


class SpeculationStats:
    """Counters of one replica's verify steps (request-steps that speculated)."""

    __slots__ = ("k", "num_verify_steps", "num_drafted", "num_accepted", "num_emitted", "accepted_hist",
                 "num_intra_step_zeros")

    def __init__(self, k: int) -> None:
        self.k = k
        self.num_verify_steps = 0
        self.num_drafted = 0  # sum of k over verify steps
        self.num_accepted = 0  # accepted drafts, before the cap at the remaining output
        self.num_emitted = 0  # tokens emitted by verify steps (after the cap)
        self.accepted_hist = [0] * (k + 1)  # verify steps by accepted drafts a = 0..k
        self.num_intra_step_zeros = 0  # zero gaps written for the 2nd.. tokens of a step

    @property
    def mean_emitted_per_step(self) -> float:
        return self.num_emitted / self.num_verify_steps if self.num_verify_steps else float("nan")

    @property
    def mean_acceptance_length(self) -> float:
        """Mean ``1 + a`` before the output cap: the data folder's AL."""
        return 1.0 + self.num_accepted / self.num_verify_steps if self.num_verify_steps else float("nan")

    def as_dict(self) -> dict[str, float | int | list[int]]:
        return {"num_verify_steps": self.num_verify_steps, "num_drafted": self.num_drafted,
                "num_accepted": self.num_accepted, "num_emitted": self.num_emitted,
                "mean_acceptance_length": self.mean_acceptance_length,
                "mean_emitted_per_step": self.mean_emitted_per_step,
                "draft_acceptance_rate": self.num_accepted / self.num_drafted if self.num_drafted else float("nan"),
                "accepted_hist": list(self.accepted_hist)}

    def merge(self, other: SpeculationStats) -> None:
        self.num_verify_steps += other.num_verify_steps
        self.num_drafted += other.num_drafted
        self.num_accepted += other.num_accepted
        self.num_emitted += other.num_emitted
        self.num_intra_step_zeros += other.num_intra_step_zeros
        self.accepted_hist = [a + b for a, b in zip(self.accepted_hist, other.accepted_hist, strict=True)]


class Speculation:
    """One replica's speculation: the config, its acceptance draws and counters."""

    def __init__(self, config: SpeculativeConfig, rng: np.random.Generator) -> None:
        self.config = config
        self.rng = rng
        self.cdf = list(config.accepted_cdf())  # P(a <= j), j < k
        self.stats = SpeculationStats(config.k)
        self._uniforms: list[float] = []
        self._next = 0

    def draw(self, k: int) -> int:
        """Accepted drafts ``a`` in ``0..k`` for one verify of ``k <= config.k`` drafts: the
        first rejection of the full chain, cut at ``k`` (the same positions' rates)."""
        if self._next >= len(self._uniforms):
            self._uniforms = self.rng.random(_UNIFORM_BLOCK).tolist()
            self._next = 0
        u = self._uniforms[self._next]
        self._next += 1
        a = bisect_right(self.cdf, u)
        return a if a < k else k


def speculation_rng(seed: int, replica_id: int) -> np.random.Generator:
    """The acceptance stream of one replica: independent of the workload and router streams
    (which :func:`simulator.engine.cluster.rng_streams` spawns as children 0 and 1 of the seed)."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(2, replica_id))))


class SpeculativeMixin:
    """Scheduler methods for a replica whose decoding requests speculate (see the module
    docstring). Mixed in over a policy by :func:`speculative_class`; the instance's
    ``speculation`` is set by :func:`simulator.engine.replica.build_pool_scheduler` (or
    :func:`make_speculative`)."""

    speculation: Speculation
    reserves_up_front: bool = False  # set per policy by speculative_class

    @property
    def max_decode_blocks(self) -> int:
        # A verify holds computed + 1 + width tokens, width <= num_verify_tokens, in blocks that hold computed
        # already: ceil((c + 1 + w) / bs) - ceil(c / bs) <= ceil((1 + w) / bs).
        self_: Scheduler = self  # type: ignore[assignment]
        return -(-(1 + self.speculation.config.num_verify_tokens) // self_.blocks.block_size)

    def decode_k(self, num_running: int) -> int:
        return self.speculation.config.k_for(num_running)

    def decode_tokens(self, req: Request, num_running: int) -> int:
        # What _add_decodes grows a decode to when the budget cuts nothing (SGLang's decode step has none).
        k_step = self.speculation.config.k_for(num_running)
        if k_step == 0 or not req.num_generated:
            return req.num_computed + 1
        return req.num_computed + 1 + self._drafts(req, k_step, self._tree_width(k_step))[1]

    def _tree_width(self, k_step: int) -> int:
        """Draft tokens a full-depth verify holds in a step whose k is ``k_step``: the whole token tree at the
        configured k, else a chain of ``k_step``."""
        config = self.speculation.config
        return config.num_verify_tokens if k_step == config.k else k_step

    @staticmethod
    def _drafts(req: Request, k_step: int, tree_width: int) -> tuple[int, int]:
        """``req``'s drafts and verified width in such a step: ``k_step`` cut to the output left; the whole tree
        (``tree_width``) at full depth, else the chain. (A token budget may cut both further.)"""
        k = min(k_step, req.num_output_tokens - req.num_generated - 1)
        return k, (tree_width if k == k_step else k)

    def max_reserve_tokens(self, req: Request) -> int:
        # The verify pass writes a slot per draft token past the cached tokens before the rejected ones are
        # freed. A chain's k is cut to the output left, so it never passes prompt + output; a tree's nodes
        # beyond its depth may (and a tree is verified only at full depth).
        config = self.speculation.config
        return super().max_reserve_tokens(req) + config.num_verify_tokens - config.k  # type: ignore[misc]

    def _add_decodes(self, batch: Batch, budget: float, partial: list[Request] | None) -> int:
        """:meth:`Scheduler._add_decodes` where each decode verifies ``k`` drafts: ``1 + k``
        tokens of the budget (``k`` cut to what the budget and the request's remaining output
        leave), KV grown to hold them. The step's ``k`` is the adaptive policy's for the
        number of running requests; 0 gives exactly the plain step. A token tree is verified
        whole (``1 + num_verify_tokens`` tokens) only at full depth; a cut ``k`` (the adaptive
        policy, a request's last tokens, the budget's end) verifies a chain of ``k``."""
        self_: Scheduler = self  # type: ignore[assignment]
        config = self.speculation.config
        k_step = config.k_for(len(self_.running))
        if k_step == 0:
            return super()._add_decodes(batch, budget, partial)  # type: ignore[misc]
        tree_width = self._tree_width(k_step)
        tree_pairs = config.verify_pairs if tree_width > k_step else None
        shape = batch.shape
        if not isinstance(shape, SpecBatchShape):
            shape = batch.shape = SpecBatchShape.of(shape)
        running, block_size = self_.running, self_.blocks.block_size
        used, i, num_running = 0, 0, len(running)
        while i < num_running:
            req = running[i]
            if req.in_flight:
                i += 1
                continue
            computed = req.num_computed
            if partial is not None and req.num_prompt_tokens + req.num_generated - computed > 1:
                partial.append(req)
                i += 1
                continue
            if used >= budget:
                break
            if req.num_generated:
                k, width = self._drafts(req, k_step, tree_width)
                if budget - used - 1 < width:
                    width = k = min(k, int(budget - used - 1))
                need = computed + 1 + width
            else:
                k, width, need = 0, 0, computed + 1  # a prompt's 1-token tail
            if req.num_blocks * block_size < need:
                grown = self_._grow_or_preempt(req, need, batch)
                num_running = len(running)  # preemption removes from the end
                if not grown:
                    break
            if not req.num_generated:
                batch.add(req, 1)
                used += 1
            else:
                batch.requests.append(req)
                batch.num_tokens.append(1 + width)
                req.in_flight = True
                if width > k:
                    shape.add_verify(k, computed, width, tree_pairs)
                elif k:
                    shape.add_verify(k, computed)
                else:
                    shape.add_decode(computed + 1)
                used += 1 + width
            i += 1
        return used

    def complete(self, batch: Batch, now: float) -> list[Request]:
        """:meth:`Scheduler.complete`, with verify entries (a decode of ``1 + k`` tokens) emitting
        ``1 + a`` tokens at ``now`` and freeing their rejected slots."""
        if not isinstance(batch.shape, SpecBatchShape):  # no verify entry: _add_decodes made none
            return super().complete(batch, now)  # type: ignore[misc]
        requests, num_tokens = batch.requests, batch.num_tokens
        verify = [j for j, (r, n) in enumerate(zip(requests, num_tokens, strict=True))
                  if n > 1 and r.num_generated and r.num_prompt_tokens + r.num_generated - r.num_computed == 1]
        if not verify:
            return super().complete(batch, now)  # type: ignore[misc]
        self_: Scheduler = self  # type: ignore[assignment]
        spec, stats, gaps, blocks = self.speculation, self.speculation.stats, self_.gaps, self_.blocks
        block_size = blocks.block_size
        finished: list[Request] = []
        run_gap, run_count, zeros = -1.0, 0, 0  # equal gaps as one run, and the steps' zero gaps as one
        depth = spec.config.k
        reserves = self.reserves_up_front
        for j in verify:
            # Verified tokens: a chain of k <= depth, or a whole tree (more nodes than its depth).
            req, width = requests[j], num_tokens[j] - 1
            k = min(width, depth)
            req.in_flight = False
            a = spec.draw(k)
            emitted = min(a + 1, req.num_output_tokens - req.num_generated)
            stats.num_verify_steps += 1
            stats.num_drafted += width
            stats.num_accepted += a
            stats.num_emitted += emitted
            stats.accepted_hist[a] += 1
            gap = now - req.last_token_at
            if gap > req.max_tbt_s:
                req.max_tbt_s = gap
            if gap == run_gap:
                run_count += 1
            else:
                if run_count:
                    gaps.add(run_gap, run_count)
                run_gap, run_count = gap, 1
            zeros += emitted - 1
            req.last_token_at = now
            if req.token_times is not None:
                req.token_times.extend(array("d", (now,)) * emitted)
            computed = req.num_computed + emitted  # the last token and the accepted drafts
            req.num_computed = computed
            req.num_generated += emitted
            keep = -(-computed // block_size)  # rejected drafts' slots go back
            if reserves:
                keep = max(keep, -(-self_.reserve_tokens(req) // block_size))
            if req.num_blocks > keep:
                blocks.num_free_blocks += req.num_blocks - keep
                req.num_blocks = keep
            if req.num_generated == req.num_output_tokens:
                finished.append(req)
        if run_count:
            gaps.add(run_gap, run_count)
        if zeros:
            gaps.add(0.0, zeros)
            stats.num_intra_step_zeros += zeros
        # The other entries through the base mechanism (it retires its own finishers); the
        # batch's lists are restored for the recorder.
        keep_idx = set(verify)
        batch.requests = [r for j, r in enumerate(requests) if j not in keep_idx]
        batch.num_tokens = [n for j, n in enumerate(num_tokens) if j not in keep_idx]
        try:
            rest = super().complete(batch, now)  # type: ignore[misc]
        finally:
            batch.requests, batch.num_tokens = requests, num_tokens
        if finished:
            self_.retire(finished, now)
        return rest + finished


@cache
def speculative_class(base: type[Scheduler]) -> type[Scheduler]:
    """``base`` with :class:`SpeculativeMixin`'s methods first (one class per policy). A policy that reserves
    up front (orca and fastertransformer max_model_len, trtllm prompt and output) keeps its reservation after
    a verify: only the slots the verify grew past it go back (``reserves_up_front``, known once per class)."""
    return type(f"Speculative{base.__name__}", (SpeculativeMixin, base),
                {"reserves_up_front": base.reserve_tokens is not Scheduler.reserve_tokens})


def make_speculative(scheduler: Scheduler, config: SpeculativeConfig, rng: np.random.Generator) -> Scheduler:
    """A scheduler of the same policy, state and KV cache, whose decodes speculate. Call it on a
    freshly built scheduler of a plain policy (no requests yet, no fast-path class)."""
    assert not scheduler.has_unfinished() and type(scheduler) in SCHEDULERS.values()
    cls = speculative_class(type(scheduler))
    out = cls.__new__(cls)
    out.__dict__.update(scheduler.__dict__)
    out.speculation = Speculation(config, rng)
    return out


def per_step_gaps(log: GapLog, num_intra_step_zeros: int) -> GapLog:
    """The per-step view of a per-token gap log: the zero gaps written for the second and later
    tokens of a verify step removed (a token's gap is otherwise a step's duration, never 0)."""
    out = GapLog()
    left = num_intra_step_zeros
    for value, count in zip(log.values, log.counts, strict=True):
        if left and value == 0.0:
            drop = min(left, count)
            left -= drop
            count -= drop
        if count:
            out.add(value, count)
    return out


def speculation_stats(schedulers: list[Scheduler]) -> dict | None:
    """The replicas' speculation counters merged (None where nobody speculates)."""
    total: SpeculationStats | None = None
    for s in schedulers:
        spec = s.speculation
        if spec is None:
            continue
        if total is None:
            total = SpeculationStats(spec.stats.k)
        total.merge(spec.stats)
    return None if total is None else total.as_dict()


PLAIN_LOOP_NOTE = "step by step (speculation: no lockstep decodes, event skipping or partitioned runs)"


def speculation_extra(config: SpeculativeConfig, schedulers: list[Scheduler]) -> dict:
    """What a run's ``extra["speculative"]`` holds: the config, the counters merged over the
    replicas (:class:`SpeculationStats`), and the inter-token gaps two ways, as vLLM's benchmark
    reports them: per token (every token after a request's first; the second and later tokens
    of a verify step have gap 0) and per step (those zeros left out: one gap per request-step)."""
    stats = speculation_stats(schedulers) or SpeculationStats(config.k).as_dict()
    token_logs = [s.gaps for s in schedulers]
    step_logs = [per_step_gaps(s.gaps, s.speculation.stats.num_intra_step_zeros) if s.speculation is not None
                 else s.gaps for s in schedulers]
    out: dict = {"method": config.method, "num_speculative_tokens": config.k,
                 "num_verify_tokens": config.num_verify_tokens,  # a token tree's nodes, else k
                 "draft_model": config.draft_model, "parallel_drafting": config.parallel_drafting,
                 "acceptance_rates": list(config.acceptance_rates), "acceptance_source": config.acceptance_source,
                 "expected_acceptance_length": config.mean_acceptance_length,
                 "disable_by_batch_size": config.disable_by_batch_size,
                 "reduce_k_batch_size": config.reduce_k_batch_size, "loop": PLAIN_LOOP_NOTE, **stats}
    out.update(itl_views(merged(token_logs)[:2], merged(step_logs)[:2]))
    return out


def speculative_cost_model(config: RunConfig, spec: SpeculativeConfig,
                           replica: ReplicaConfig | None = None) -> SpeculativeCostModel:
    """The run's target cost model (kernels and engine preset; ``replica``: a pool's layout
    instead of the run's) with the drafter's time added."""
    from simulator.costmodel import load_cost_model

    return SpeculativeCostModel(load_cost_model(config.cost_model, replica or config.replica, config.engine), spec)
