"""Batch waiting: hold new prompts a few iterations so that more of them prefill together.

A prompt's prefill slows the decodes of every step it joins. TensorRT-LLM can therefore hold
the context requests of a step that also carries generation requests (``batch_wait_timeout_iters``
and ``batch_wait_max_tokens_ratio`` of its LLM API; PyExecutor's ``_waiting_requests``), so that
several prompts join one step instead of each stalling one: the step's context requests go only
once its scheduled tokens (every scheduled prompt's whole length plus a token per decode) reach
``ratio x max_num_tokens``, or once they have been held ``timeout_iters`` such steps. InferenceX's
TensorRT-LLM DeepSeek-R1 FP8 recipe on B200 turns it on (40 iterations, ratio 0.8) at 1K/1K from 64
users. The engine applies it only without attention DP (its DP ranks have their own balance,
:class:`simulator.engine.dp_group.PromptBalance`) and only to steps that carry both prompts and
decodes: a step without decodes is never held (no dead wait), and only such steps count.

:class:`BatchWait` is that rule for one replica, evaluated from the queues as each step begins
(the same view :class:`~simulator.engine.dp_group.PromptBalance` takes); a held step runs the
replica's batch with its waiting queue set aside (:meth:`simulator.engine.replica.Replica._take_decodes`):
decodes, and any prompt already under way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from simulator.config.schedulers import SCHEDULERS as ENTRIES

if TYPE_CHECKING:
    from simulator.engine.schedulers import Scheduler


class BatchWait:
    """TensorRT-LLM's batch waiting on one replica (``batch_wait_timeout_iters``,
    ``batch_wait_max_tokens_ratio``).

    Contract: :meth:`holds` is asked once at the start of every step, from the queues as they stand,
    and True means no new prompt starts this step. A step is held only where the replica has both
    decodes and a prompt to schedule (one under way, or the head of ``waiting`` where a batch slot and
    its KV blocks are free), while its scheduled tokens stay under ``ratio x token_budget`` and fewer
    than ``timeout_iters`` such steps have been held in a row. Scheduled tokens: each decode's tokens
    (1, or 1 + k verified where decodes speculate), every prompt under way's whole length, and the
    whole lengths of waiting prompts in order, while a batch slot is free and the budget is not yet
    reached (a prompt is counted whole, as the engine counts a scheduled context request, even where
    the policy will chunk it; under a policy that runs prompts whole, only while it fits the budget:
    the first that does not is not scheduled, and neither is any after it). Only held or released
    steps with both move the counter.
    """

    def __init__(self, timeout_iters: int, max_tokens_ratio: float, token_budget: int,
                 whole_prompts: bool = False) -> None:
        self.timeout_iters = timeout_iters
        # (the ratio is at most 1, so a step under the threshold is under the budget too)
        self.threshold = max_tokens_ratio * token_budget
        self.token_budget = token_budget
        # A policy that runs a prompt in one piece (trtllm): a waiting prompt past what the budget leaves is not
        # scheduled, so not counted (TensorRT-LLM's micro-batch scheduler stops at the first context request that
        # does not fit max_num_tokens). A chunking policy schedules a chunk of it up to the budget, which reaches the
        # threshold either way.
        self.whole_prompts = whole_prompts
        self.num_waited = 0  # the engine's batch_wait_iters_count

    @classmethod
    def of(cls, scheduler: Scheduler) -> BatchWait | None:
        """The rule for a replica run by ``scheduler`` (None where its config leaves it off)."""
        config = scheduler.config
        if not config.batch_wait_timeout_iters:
            return None
        entry = ENTRIES.get(config.name)
        return cls(config.batch_wait_timeout_iters, config.batch_wait_max_tokens_ratio, scheduler.token_budget,
                   whole_prompts=entry is not None and not entry.chunks_prompts)

    def holds(self, scheduler: Scheduler) -> bool:
        waiting = scheduler.waiting
        running = scheduler.running
        num_decodes = 0
        tokens = 0
        has_prompt = False
        for req in running:  # lockstep cohort members decode (num_generated > 0 holds for them)
            if req.num_generated:
                num_decodes += 1
            else:
                has_prompt = True
                tokens += req.num_prompt_tokens
        if not num_decodes:
            return False  # no generation requests: the engine never waits then
        speculation = scheduler.speculation
        tokens += num_decodes * (1 + speculation.config.num_verify_tokens if speculation is not None else 1)
        slots = scheduler.max_num_seqs - len(running)
        if waiting and slots > 0:
            head = waiting[0]
            if scheduler.blocks.can_admit(scheduler.reserve_tokens(head), head):
                has_prompt = True
                threshold = self.threshold
                computed = tokens  # what the step computes: a cached prefix is not (the engine's fit test)
                for req in waiting:  # whole prompts, in order, while a slot is free and the threshold not reached
                    if slots == 0 or tokens >= threshold:
                        break
                    if self.whole_prompts:
                        step = scheduler.prompt_step_tokens(req)
                        if computed + step > self.token_budget:
                            break  # not scheduled this step (it waits for room): not counted
                        computed += step
                    tokens += req.num_prompt_tokens + req.num_generated
                    slots -= 1
        if not has_prompt:
            return False
        if self.num_waited >= self.timeout_iters or tokens >= self.threshold:
            self.num_waited = 0
            return False
        self.num_waited += 1
        return True
