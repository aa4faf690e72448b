"""What the fast paths need from each policy, in one place: when its batch stays steady.

A policy states its batch once, in ``schedule()``. Event skipping (:mod:`simulator.fast.skipping`)
advances a stretch of iterations in one step only where it knows the next batches in closed
form; these rules say when that holds, from the same queues ``schedule()`` reads:

- ``decode``: until a request arrives or finishes or free KV blocks run short, every
  ``schedule()`` would return exactly the running requests as 1-token decodes (in running
  order, growing each one's blocks as needed) and admit or preempt nobody;
- ``chunk`` (optional): ``(req, chunk)`` where, until a request finishes or free KV blocks run
  short, every ``schedule()`` would return the running decodes as lockstep decodes (the cohort
  is active) plus ``chunk`` tokens of ``req``'s prompt, as long as more than ``chunk`` remain,
  and admit or preempt nobody; else None;
- ``skipped`` (optional): what the policy's own state does over ``k`` such iterations that a
  stretch applies at once (their ``schedule()`` calls are not made): SGLang's ``new_token_ratio``
  decays once a decode step.

A policy listed in :data:`RULES` also allows lockstep decodes (:mod:`simulator.fast.lockstep`):
it adds its running decodes only through ``Scheduler._add_decodes`` and reads running
requests' counters nowhere else but through ``Scheduler.remaining_outputs``,
``Scheduler.new_decode_blocks`` or after ``settle()``. A policy that is not listed (a new one, or a speculating or
disaggregated pool's class) runs step by step: slower, never different. The skipping and
lockstep on/off tests (tests/test_fastforward.py, tests/test_cohort.py) check each rule
against its policy's ``schedule()``; a rule must change with its policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.engine.schedulers.fastertransformer import FasterTransformerScheduler
from simulator.engine.schedulers.orca import OrcaScheduler
from simulator.engine.schedulers.sarathi import SarathiScheduler
from simulator.engine.schedulers.sglang import SGLangScheduler
from simulator.engine.schedulers.trtllm import TRTLLMScheduler
from simulator.engine.schedulers.vllm import VLLMScheduler

if TYPE_CHECKING:
    from simulator.engine.schedulers import Scheduler
    from simulator.workload.request import Request


@dataclass(frozen=True, slots=True)
class SteadyRules:
    """A policy's steady-state predicates (see the module docstring)."""

    decode: Callable[[Scheduler], bool]
    chunk: Callable[[Scheduler], tuple[Request, int] | None] | None = None
    skipped: Callable[[Scheduler, int], None] | None = None


def _cohort(scheduler: Scheduler):  # noqa: ANN202 - a DecodeCohort or None
    cohort = getattr(scheduler, "cohort", None)  # set by simulator.fast.lockstep
    return cohort if cohort is not None and cohort.active else None


def all_running_decode(scheduler: Scheduler) -> bool:
    """Every running request is a decode (one missing token, at least one output) and none is
    in flight. (Cohort members are, by the cohort's contract: only loose ones are visited.)"""
    cohort = _cohort(scheduler)
    return bool(scheduler.running) and all(
        not r.in_flight and r.num_generated and r.num_prompt_tokens + r.num_generated - r.num_computed == 1
        for r in (cohort.loose if cohort is not None else scheduler.running))


def head_short_of_blocks(s: Scheduler) -> bool:
    """The head of ``waiting`` (prompt and any generated tokens) does not fit the free blocks; while
    only decodes run free blocks only shrink (or stay, under a reservation), so it keeps not fitting."""
    head = s.waiting[0]
    return not s.blocks.can_admit(head.num_prompt_tokens + head.num_generated, head)


def vllm_decode_steady(s: Scheduler) -> bool:
    # Nothing is admitted (the admission loop breaks on the head at once) and every running
    # request decodes; free blocks only shrink, so a head that does not fit keeps not fitting.
    if not all_running_decode(s):
        return False
    if not s.waiting:
        return True
    head = s.waiting[0]
    return (head.num_prompt_tokens + head.num_generated > s.token_budget or len(s.running) >= s.max_num_seqs
            or head_short_of_blocks(s))


def orca_decode_steady(s: Scheduler) -> bool:
    # Memory is reserved up front, so free blocks do not change while decodes run.
    return all_running_decode(s) and (
        not s.waiting or len(s.running) >= s.max_num_seqs or not s.blocks.can_admit(s.max_model_len))


def fastertransformer_decode_steady(s: Scheduler) -> bool:
    # A running batch only decodes; waiting requests wait for the whole batch to finish.
    return all_running_decode(s)


def sarathi_decode_steady(s: Scheduler) -> bool:
    # Every decode fits the budget; nothing is admitted: no one waits, the budget or
    # max_num_seqs is used up, or the head does not fit (free blocks only shrink while
    # decodes grow, so it keeps not fitting).
    running = s.running
    if len(running) > s.token_budget or not all_running_decode(s):
        return False
    waiting = s.waiting
    return (not waiting or len(running) >= s.token_budget or len(running) >= s.max_num_seqs
            or head_short_of_blocks(s))


def sglang_decode_steady(s: Scheduler) -> bool:
    # A decode batch repeats while no prefill is tried: no prompt is under way (every running request
    # decodes) and nobody waits, max_num_seqs run, or the running batch is full (an admission ran out of
    # predicted room and nobody has left since: until one does, SGLang tries no prefill, so the ratio's
    # decay admits nobody within the stretch, which ends at the first finish). A head refused while the
    # flag is clear is not steady: that refusal sets the flag, so the step is taken. With a request-intake
    # interval the policy counts its iterations (its polls): never skipped.
    if s.recv_interval != 1 or not all_running_decode(s):  # type: ignore[attr-defined]
        return False
    return not s.waiting or len(s.running) >= s.max_num_seqs or s.admission_blocked  # type: ignore[attr-defined]


def sglang_skipped(s: Scheduler, num_steps: int) -> None:
    # A decode step that retracts nobody decays the ratio: a stretch fits its blocks, so it retracts nobody.
    s.decay_new_token_ratio(num_steps)  # type: ignore[attr-defined]


def trtllm_decode_steady(s: Scheduler) -> bool:
    # Decodes only, while the head cannot join: max_num_seqs reached, its whole prompt beside the decodes
    # over max_num_tokens (both fixed while only decodes run), or its whole-request reservation short of
    # blocks (reserved requests never grow, so free blocks do not change).
    if not all_running_decode(s):
        return False
    waiting = s.waiting
    if not waiting or len(s.running) >= s.max_num_seqs:
        return True
    head = waiting[0]
    # The step's tokens as schedule() counts them, a cached prefix out (reserved requests allocate no
    # blocks while decoding, so the cache, and with it this count, holds still over the stretch).
    prompt = s.prompt_step_tokens(head)
    return len(s.running) + prompt > s.token_budget or not s.blocks.can_admit(s.reserve_tokens(head), head)


def sarathi_chunk_steady(s: Scheduler) -> tuple[Request, int] | None:
    # The first partial prefill (running order) takes what the decodes leave of the budget;
    # while that is not its last chunk the budget is full, so later partials get nothing and
    # nobody is admitted, whoever waits. Lockstep only: the cohort carries the decodes.
    cohort = _cohort(s)
    if cohort is None:
        return None
    prefill, missing, num_partial = None, 0, 0
    for req in cohort.loose:
        if req.in_flight:
            return None
        left = req.num_prompt_tokens + req.num_generated - req.num_computed
        if left > 1:
            num_partial += 1
            if prefill is None:
                prefill, missing = req, left
        elif not req.num_generated:  # a prompt's 1-token tail: a prefill entry before the chunk
            return None
    if prefill is None:
        return None
    chunk = s.token_budget - (len(cohort.members) + len(cohort.loose) - num_partial)  # less the decodes
    return (prefill, chunk) if 0 < chunk < missing else None


# Exact classes: a subclass or a pool's mixin class is a different policy until it is listed.
RULES: dict[type[Scheduler], SteadyRules] = {
    VLLMScheduler: SteadyRules(vllm_decode_steady),
    OrcaScheduler: SteadyRules(orca_decode_steady),
    FasterTransformerScheduler: SteadyRules(fastertransformer_decode_steady),
    SarathiScheduler: SteadyRules(sarathi_decode_steady, sarathi_chunk_steady),
    SGLangScheduler: SteadyRules(sglang_decode_steady, skipped=sglang_skipped),
    TRTLLMScheduler: SteadyRules(trtllm_decode_steady),
}


def rules_for(scheduler: Scheduler) -> SteadyRules | None:
    """The scheduler's policy's rules (a lockstep class's own policy), or None: never skip."""
    cls = type(scheduler)
    return RULES.get(getattr(cls, "lockstep_of", cls))
