"""Disaggregated prefill and decode (Splitwise, DistServe): two pools and KV links.

The same interference Sarathi-Serve removes by chunking (a prompt's prefill stalls the
running decodes) disappears when prompts and decodes never share a GPU. A request's life:

1. **prefill pool**: routed (the run's router) to a prefill replica, which batches
   prompts under its own scheduler and token budget. The iteration that completes the
   prompt computes the **first output token** there (the chunk that makes the KV cache
   whole produces a token). Where the client gets it is ``RunConfig.first_token_at``:
   ``decode`` (default; Dynamo and vLLM/SGLang NIXL-style deployments stream every token
   from the decode worker) delivers it with the decode worker's first step after the
   handoff, so TTFT = queueing + prefill + handoff + that step; ``prefill`` delivers it when
   the prompt ends (TTFT excludes the transfer, which is then part of the first TBT gap, as
   DistServe and Splitwise account it). A request with one output token finishes on the
   prefill replica and is never transferred. Where the run speculates, the prefill replica also
   runs the drafter's pass over each prompt (a draft model's forward, an EAGLE/MTP layer) and
   holds the drafter's weights and KV, and the drafter's KV of the prompt travels with the
   target's: the decode worker's first draft needs it (SGLang's PD prefill server runs its
   EAGLE/MTP drafter over the prompt and sends the draft KV beside the target's); the decode
   replicas speculate.
2. **handoff**: the prefill replica keeps the prompt's KV blocks (they leave its running
   set but stay allocated) until a decode replica has room. Decode replicas are tried
   FIFO (the oldest finished prompt first, no overtaking): the one with the fewest
   outstanding requests among those whose KV cache can admit the prompt above the
   watermark reserves its blocks. If none can, the queue waits (**backpressure**: the
   prefill replica holds the KV, and when its cache fills it stops admitting prompts).
3. **transfer**: after the engine preset's ``handoff_s`` (the serving stack's second hop and
   the KV connector's handshake, per request; no link is held meanwhile), the prompt's KV
   bytes (2 x layers x KV heads x head dim x dtype bytes per token, the whole model's: every
   TP shard sends its share, the link carries the sum) take ``latency + bytes / bandwidth``
   (``--kv-link``) once their links are free. Which links is ``RunConfig.kv_link_scope``.
   ``per-worker`` (default; what xPyD hardware is: each engine instance has its own RDMA NICs,
   NIXL/Mooncake move KV between them): every prefill pool replica has an egress link and
   every decode pool replica an ingress link (a replica's attention-DP ranks share them),
   FIFO; ``--kv-link`` is a prefill worker's egress, and a decode worker's ingress carries
   ``max(1, its GPUs // a prefill worker's GPUs)`` such transfers at once (NICs scale with
   GPUs, one a GPU). A transfer holds its sender's egress and then a place on its receiver's
   ingress (always in that order, so no two transfers wait on each other in a cycle):
   transfers of different prefill workers run in parallel, and several prefill workers sending
   to one decode worker queue on its ingress (fan-in). With one prefill worker the egress
   alone orders every transfer (the ingress could never be contended, so it is not modelled:
   the same events as one shared link). ``shared``: one link, FIFO, that every transfer queues
   on, whatever the number of workers (the paper reproductions' assumption). When a transfer
   lands, the prefill replica frees its blocks and the decode replica starts decoding the
   request in its next iteration (continuous batching).
4. **decode pool**: every token after the first. A decode replica that runs out of
   blocks preempts by recompute as its policy says; the victim re-prefills *there*.

Splitwise's **mixed pool** (optional): aggregated replicas running the run's own
scheduler that take whole requests when the prefill pool is backed up (every prefill
replica has a waiting queue) and some mixed replica has none.

The mechanism reuses :class:`~simulator.engine.replica.Replica` (or the pipelined replica) and
the schedulers through two small mixins: the prefill scheduler hands finished prompts
off instead of decoding them; the decode scheduler accepts already-prefilled requests
straight into its running set. Replicas that hold parked KV blocks sleep, rather than
trip the "only waiting requests" invariant, when their cache cannot admit the next
request; they wake when the blocks come back.

Per-pool attention DP and EP (xPyD layouts as Dynamo and vLLM/SGLang deploy them, e.g. DEP8
prefill workers beside a DEP32 decode worker): each attention-DP rank of a pool replica is an
engine replica of its own (its batch, scheduler and KV cache), its cost model pricing the MoE
layers for the pool replica's whole ``tp x dp`` group, and a pool replica's ranks step together
(:mod:`simulator.engine.dp_group`); the prefill router spreads arrivals over
the prefill ranks, and the handoff above picks the decode rank, so each request's KV moves from
the prefill rank that computed it to the decode rank that takes it (the whole model's KV: each
rank holds all of its requests' KV, sharded only over its own TP GPUs).

Replica ids (one per rank): prefill ``0..P-1``, decode ``P..P+D-1``, mixed after them, where
``P`` is prefill replicas x their ``dp`` (likewise ``D``). A request's ``replica_id`` is where it
finished (its decode rank), or, refused up front by the decode pool's rule (longer than it can ever hold), the
first decode rank, whose rule it is (so each replica's rows sum to the run's); the handoff timeline is in
:class:`HandoffLog`.
"""

from __future__ import annotations

import time
from bisect import insort
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np
import simpy

from simulator.config.disagg_layout import DisaggLayout, kv_bytes_per_token, layout_of, state_bytes_per_seq
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig
from simulator.config.schedulers import SCHEDULERS as SCHEDULER_ENTRIES
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import extrapolation_counts
from simulator.costmodel.engine_model import load_engine
from simulator.engine.closed_loop import ClosedLoopClient, make_recorder
from simulator.engine.cluster import (
    RunResult,
    make_replica,
    prepare_requests,
    reporter_of,
    run_to_end,
    summed_by_op,
)
from simulator.engine.dp_group import group_ranks
from simulator.engine.kvcache import BlockManager, MemoryPlan
from simulator.engine.records import Recorder
from simulator.engine.replica import Replica, SchedulerWrap, build_pool_scheduler
from simulator.engine.routers import route
from simulator.engine.schedulers import Batch, Scheduler
from simulator.engine.tbt import GapLog
from simulator.util.progress import RunProgress
from simulator.workload.request import Request, Status

HANDOFF_COLUMNS = ("request_id", "prefill_replica_id", "decode_replica_id", "prefill_done_at", "decode_reserved_at",
                   "handoff_done_at", "transfer_start_at", "transfer_end_at", "decode_seated_at", "kv_bytes")


_ARRIVAL_KEY = attrgetter("arrival_at", "request_id")  # the schedulers' running order


class _KVHold:
    """Blocks a request left behind on the prefill replica (duck-types the request for
    :meth:`BlockManager.free`, and for a prefix cache's: which request's named blocks go back to
    the cache, and that its whole prompt was computed). The request itself moves on: the decode
    worker reserves its own blocks in the request's counts while the hold is still on the link."""

    __slots__ = ("num_blocks", "num_state_blocks", "request_id", "num_computed", "num_prompt_tokens",
                 "num_named_tokens")

    def __init__(self, num_blocks: int, num_state_blocks: int = 0, request_id: int = -1, num_computed: int = 0) -> None:
        self.num_blocks = num_blocks
        self.num_state_blocks = num_state_blocks  # a hybrid's recurrent state, handed off with the KV
        self.request_id = request_id
        self.num_computed = num_computed  # the prompt's tokens: every named block is computed
        self.num_prompt_tokens = num_computed
        self.num_named_tokens = 0  # no answer computed here to name (PrefixCachingBlockManager._cache_answer)


class PrefillMixin:
    """Prefill-pool scheduler: a request leaves ``running`` when its prompt is done (its KV
    blocks stay allocated as a :class:`_KVHold`) and goes to ``on_prefilled``.
    Only the prompt's KV is ever held here. Where the pool caches prefixes (its block manager is a
    prefix cache: :attr:`caches_prefixes`), a prompt's cached prefix is not computed again, and when
    the transfer ends its blocks go back to the cache (evictable) rather than to the empty pool."""

    # The role takes the pool scheduler's prefix cache where one is on (engine.replica.build_pool_scheduler).
    caches_prefixes = True

    on_prefilled: Callable[[Request, _KVHold], None]
    num_parked: int = 0

    def max_reserve_tokens(self, req: Request) -> int:
        # The prompt's KV, or what the policy reserves to admit it where that is more (orca and
        # fastertransformer: max_model_len; trtllm: prompt and output).
        return max(req.num_prompt_tokens, super().reserve_tokens(req))  # type: ignore[misc]

    def rejection_reason(self, req: Request) -> str | None:
        if req.num_prompt_tokens + req.num_output_tokens > self.max_model_len:  # type: ignore[attr-defined]
            return (f"prompt+output = {req.num_prompt_tokens + req.num_output_tokens} tokens exceeds "
                    f"max_model_len {self.max_model_len}")  # type: ignore[attr-defined]
        # A policy that runs a prompt in one piece under a token budget (vllm, trtllm) can never start a longer one.
        entry = SCHEDULER_ENTRIES.get(self.name)  # type: ignore[attr-defined]
        whole = entry is not None and entry.token_budget and not entry.chunks_prompts
        if whole and req.num_prompt_tokens > self.token_budget:  # type: ignore[attr-defined]
            return f"prompt {req.num_prompt_tokens} tokens exceeds the prefill pool's token budget {self.token_budget}"  # type: ignore[attr-defined]
        blocks: BlockManager = self.blocks  # type: ignore[attr-defined]
        need = self.max_reserve_tokens(req)
        if blocks.blocks_for(need) > blocks.num_usable_blocks:
            what = "prompt needs" if need == req.num_prompt_tokens else f"the {self.name} policy reserves"  # type: ignore[attr-defined]
            return f"{what} {need} KV tokens but the prefill cache holds {blocks.num_usable_blocks * blocks.block_size}"
        return None

    def complete(self, batch: Batch, now: float) -> list[Request]:
        finished = super().complete(batch, now)  # type: ignore[misc]
        done = [r for r in batch.requests if r.status is Status.RUNNING and r.num_generated == 1]
        if done:
            self.running = [r for r in self.running if r.num_generated == 0]  # type: ignore[attr-defined]
            for req in done:
                hold = _KVHold(req.num_blocks, req.num_state_blocks, req.request_id, req.num_computed)
                req.num_blocks = 0
                req.num_state_blocks = 0
                self.num_parked += 1
                self.on_prefilled(req, hold)
        return finished


class DecodeMixin:
    """Decode-pool scheduler: a transferred request (its prompt's blocks reserved by the
    handoff) joins ``running`` directly, or, while ``max_num_seqs`` requests already run, waits
    in ``seated_later`` (its KV held here) for a finishing request's seat, first come first
    seated; ``on_freed`` is told when blocks come back, ``on_seated`` when a transferred request
    joins ``running`` (the end of its wait for a seat)."""

    on_freed: Callable[[], None]
    on_seated: Callable[[Request], None] | None = None
    num_parked: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.seated_later: deque[Request] = deque()

    def add_request(self, req: Request) -> None:
        if req.num_generated >= 1 and req.num_computed == req.num_prompt_tokens and req.num_blocks > 0:
            self.num_parked -= 1
            if len(self.running) >= self.max_num_seqs:  # type: ignore[attr-defined]
                self.seated_later.append(req)
            else:
                self._seat(req)
            return
        super().add_request(req)  # type: ignore[misc]

    def _seat(self, req: Request) -> None:
        if self.on_seated is not None:
            self.on_seated(req)
        req.status = Status.RUNNING
        self._admission_counter += 1  # type: ignore[attr-defined]
        req.admitted_seq = self._admission_counter  # type: ignore[attr-defined]
        running = self.running  # type: ignore[attr-defined]
        # ``running`` is kept in arrival order (FCFS priority; the victim is the latest arrival).
        if running and _ARRIVAL_KEY(running[-1]) > _ARRIVAL_KEY(req):
            insort(running, req, key=_ARRIVAL_KEY)
        else:
            running.append(req)

    def handoff_tokens(self, req: Request) -> int:
        """KV tokens a landing transfer reserves here: its prompt's, or, for a policy that reserves ahead of what a
        request knows (orca and fastertransformer: max_model_len; trtllm: prompt and output), the policy's, so
        that such a decode worker never preempts, as its aggregated twin never does."""
        ahead = self.reserve_tokens(req)  # type: ignore[attr-defined]
        return ahead if ahead > req.num_prompt_tokens + req.num_generated else req.num_prompt_tokens

    @property
    def num_outstanding(self) -> int:
        return super().num_outstanding + len(self.seated_later)  # type: ignore[misc]

    def complete(self, batch: Batch, now: float) -> list[Request]:
        finished = super().complete(batch, now)  # type: ignore[misc]
        later = self.seated_later
        while later and len(self.running) < self.max_num_seqs:  # type: ignore[attr-defined]
            self._seat_later(later.popleft())
        if finished or batch.preempted:
            self.on_freed()
        return finished

    def _seat_later(self, req: Request) -> None:
        """A waiting transferred request takes a freed seat (a fast path that tracks who joined
        ``running`` overrides this)."""
        self._seat(req)


class ParkingReplicaMixin:
    """A replica whose cache may hold parked blocks (KV waiting for, or reserved by, a
    transfer): with nothing running and nothing admitted it sleeps until :meth:`wake` (a
    transfer leaving frees blocks) or a landing transfer's submit, instead of treating the
    empty batch as a policy bug. Parked blocks can leave too little for the head of ``waiting``
    (its prompt, or the ``max_model_len`` that orca and fastertransformer reserve), or for the
    request a preemption just sent back to ``waiting``."""

    def _take_batch(self) -> Batch | None:
        sched = self.scheduler  # type: ignore[attr-defined]
        if sched.num_parked and sched.waiting and not sched.running:
            head = sched.waiting[0]
            # (the head itself: a prefix cache counts its hits on blocks others hold, as the policy's admission does)
            if not sched.blocks.can_admit(head.num_prompt_tokens + head.num_generated, head):
                return None
        return super()._take_batch()  # type: ignore[misc]

    def _stalled(self) -> Batch | None:
        sched = self.scheduler  # type: ignore[attr-defined]
        later = getattr(sched, "seated_later", None)
        if later:  # a preemption emptied the seats that transferred requests wait for: seat them, then retry
            while later and len(sched.running) < sched.max_num_seqs:
                sched._seat_later(later.popleft())
            return super()._take_batch()  # type: ignore[misc]
        if not sched.num_parked:
            super()._stalled()  # type: ignore[misc]
        return None  # the loop sleeps until a transfer frees or brings blocks

    def wake(self) -> None:
        wakeup = self._wakeup  # type: ignore[attr-defined]
        if wakeup is not None and not wakeup.triggered:
            wakeup.succeed()


def _build_pool_scheduler(replica: ReplicaConfig, sched: SchedulerConfig, mixin: type | None, field: str,
                          config: RunConfig | None = None, replica_id: int = 0,
                          lockstep: SchedulerWrap | None = None) -> tuple[Scheduler, MemoryPlan]:
    try:
        return _pool_scheduler(replica, sched, mixin, field, config, replica_id, lockstep)
    except ConfigError as err:
        if err.field != "replica":  # (the memory plan's: a layout whose weights and activations do not fit)
            raise
        # Named by its pool, whose layout string is what to change (--tp/--pp are refused beside pools).
        flag = "--" + field.replace("_", "-")
        raise ConfigError(flag, f"the {field.removesuffix('_pool')} pool's replica ({_layout_words(replica)}): "
                          f"{err.problem}", f"give the pool more GPUs in {flag} (tp=, pp=, dp=), or a larger gpu=") \
            from None


def _layout_words(replica: ReplicaConfig) -> str:
    return f"{replica.gpu} tp={replica.tp} pp={replica.pp} dp={replica.attention_dp} ep={replica.ep}"


def _pool_scheduler(replica: ReplicaConfig, sched: SchedulerConfig, mixin: type | None, field: str,
                    config: RunConfig | None, replica_id: int,
                    lockstep: SchedulerWrap | None) -> tuple[Scheduler, MemoryPlan]:
    if config is not None and config.speculative is not None and mixin is not PrefillMixin:
        # Decode and mixed replicas speculate (a prefill replica emits only the first token).
        from simulator.engine.speculative import Speculation, speculation_rng

        return build_pool_scheduler(replica, sched, mixin=mixin, field=field,
                                    speculation=Speculation(config.speculative, speculation_rng(config.seed, replica_id)),
                                    fix="lower --max-model-len, give the pool more GPUs or use a smaller drafter")
    # A prefill replica holds prompts only: one too long for it is rejected per request. Where the run speculates it
    # holds the drafter too (module docstring, step 1).
    return build_pool_scheduler(replica, sched, mixin=mixin, whole_requests=mixin is not PrefillMixin, field=field,
                                fix="lower --max-model-len or give the pool more GPUs",
                                lockstep=lockstep if replica.pp == 1 else None,
                                drafter=config.speculative if config is not None else None)


def check_pools_fit(config: RunConfig) -> None:
    """Raise what building the pools raises where a pool's replica does not hold the model (its weights and
    activations; a whole request's KV cache in a decode or mixed pool), without a run: one replica of each pool,
    built as :class:`DisaggCluster` builds them."""
    layout = layout_of(config)
    assert layout is not None
    _build_pool_scheduler(layout.prefill_replica, layout.prefill_scheduler, PrefillMixin, "prefill_pool")
    _build_pool_scheduler(layout.decode_replica, layout.decode_scheduler, DecodeMixin, "decode_pool", config)
    if layout.mixed is not None:
        assert layout.mixed_replica is not None and layout.mixed_scheduler is not None
        _build_pool_scheduler(layout.mixed_replica, layout.mixed_scheduler, None, "mixed_pool", config)


def _make_replica(env: simpy.Environment, replica_id: int, scheduler: Scheduler, config: RunConfig,
                  replica_cfg: ReplicaConfig, recorder: Recorder, parking: bool) -> Replica:
    if config.speculative is not None:  # the drafter's time beside the target's (a prefill replica's: over prompts)
        from simulator.engine.speculative import speculative_cost_model

        assert config.speculative is not None
        cost: Any = speculative_cost_model(config, config.speculative, replica_cfg)
    else:
        cost = load_cost_model(config.cost_model, replica_cfg, config.engine)
    return make_replica(env, replica_id, scheduler, cost, recorder, config.replace(replica=replica_cfg),
                        mixin=ParkingReplicaMixin if parking else None)


@dataclass
class DisaggFigures:
    """What a disaggregated run adds to its :class:`~simulator.engine.cluster.RunResult`: the
    layout, each replica's pool and KV cache, the KV links, and the per-request handoffs."""

    layout: str  # DisaggLayout.describe()
    pools: list[str]  # per replica: "prefill", "decode" or "mixed"
    num_blocks: list[int]  # per replica: KV blocks
    num_gpus: int
    link_busy_s: float  # the busiest link's time carrying transfers (the one link's, if shared)
    link_bytes_per_s: float  # each link's (every link is a --kv-link)
    link_latency_s: float
    kv_bytes_per_token: float
    final_free_blocks: list[int]  # per replica, at the end of the run
    handoff: HandoffLog
    link_scope: str = "shared"  # RunConfig.kv_link_scope
    # Per link, busy seconds: "shared", or "prefill<i> egress" per prefill pool replica then
    # "decode<j> ingress" per decode pool replica (none where one prefill worker makes them idle).
    links_busy_s: dict[str, float] | None = None


class HandoffLog:
    """Per-request handoff timeline (NaN / -1 where a request never got there)."""

    def __init__(self, n: int) -> None:
        self.prefill_replica_id = np.full(n, -1, dtype=np.int64)
        self.decode_replica_id = np.full(n, -1, dtype=np.int64)
        self.prefill_done_at = np.full(n, np.nan)
        self.decode_reserved_at = np.full(n, np.nan)
        self.handoff_done_at = np.full(n, np.nan)  # the engine's handoff latency over: the link may be queued for
        self.transfer_start_at = np.full(n, np.nan)
        self.transfer_end_at = np.full(n, np.nan)
        # When the decode worker seated it (it joined ``running``): later than the transfer's end while
        # ``max_num_seqs`` requests already ran there (its KV held meanwhile: a wait no block count shows).
        self.decode_seated_at = np.full(n, np.nan)
        self.kv_bytes = np.zeros(n)
        self.mixed = np.zeros(n, dtype=bool)  # served wholly by a mixed replica

    def frame(self):  # noqa: ANN201
        import pandas as pd

        return pd.DataFrame({"request_id": np.arange(len(self.kv_bytes)),
                             **{c: getattr(self, c) for c in HANDOFF_COLUMNS[1:]}, "mixed": self.mixed})


class DisaggCluster:
    """Prefill, decode (and mixed) replicas, the handoff queue and the KV links."""

    def __init__(self, env: simpy.Environment, config: RunConfig, layout: DisaggLayout, recorder: Recorder,
                 rng: np.random.Generator, num_requests: int, lockstep: SchedulerWrap | None = None) -> None:
        self.env = env
        self.layout = layout
        # The router picks a prefill replica (a session router keeps a session on one; prefix_aware reads the
        # prefill replicas' prefix caches, and the config refuses it where the prefill pool keeps none).
        self._router = config.router
        self._router_memo: dict = {}
        self.rng = rng
        self._step = 0
        self.log = HandoffLog(num_requests)
        # Whether the replicas' gap logs are final as the run goes: not where the decode worker delivers
        # the first token (deliver_first_token_on_decode takes the handoff gaps out after the run).
        self.gap_logs_final = config.first_token_at != "decode"
        self.kv_bytes_per_token = kv_bytes_per_token(layout.prefill_replica)
        if config.speculative is not None:  # the drafter's KV of the prompt travels with the target's (step 1)
            from simulator.costmodel.speculative import drafter_kv_bytes_per_token

            self.kv_bytes_per_token += drafter_kv_bytes_per_token(layout.prefill_replica, config.speculative)
        self.state_bytes_per_seq = state_bytes_per_seq(layout.prefill_replica)  # a hybrid's recurrent state
        # The serving stack's handoff latency (the engine preset's ``handoff_s``): before the transfer, no link held.
        self.handoff_s = load_engine(config.engine).handoff_s
        # KV links (module docstring, step 3): ``egress[k]`` the link of the k-th prefill pool
        # replica (one shared link: a single egress every transfer uses), ``ingress[k]`` of the
        # k-th decode pool replica, or none where one egress already orders every transfer.
        self.link_scope = config.kv_link_scope
        self._prefill_dp = layout.prefill_replica.attention_dp
        self._decode_dp = layout.decode_replica.attention_dp
        num_senders = 1 if self.link_scope == "shared" else layout.prefill.num_replicas
        self.egress = [simpy.Resource(env, capacity=1) for _ in range(num_senders)]
        self.egress_busy_s = [0.0] * num_senders
        num_receivers = layout.decode.num_replicas if num_senders > 1 else 0
        # A worker's NICs scale with its GPUs (one RDMA NIC a GPU, as DGX/HGX nodes have): a decode
        # worker with k times a prefill worker's GPUs takes k transfers at once, each at the sender's rate.
        self.ingress_width = max(1, layout.decode_replica.num_gpus // layout.prefill_replica.num_gpus)
        self.ingress = [simpy.Resource(env, capacity=self.ingress_width) for _ in range(num_receivers)]
        self.ingress_busy_s = [0.0] * num_receivers
        self.pending: deque[tuple[Request, _KVHold, int]] = deque()
        # request_id -> (request, prefill hold, prefill index, decode replica) while on or queued for the link
        self.in_transit: dict[int, tuple[Request, _KVHold, int, Replica]] = {}
        self.prefill: list[Replica] = []
        self.decode: list[Replica] = []
        self.mixed: list[Replica] = []
        self.plans: dict[str, MemoryPlan] = {}
        rid = 0
        # With attention DP (a pool's ``dp``) each rank of a pool replica is a replica of its own
        # (ranks of one replica consecutive), as in an aggregated run: num_replicas x dp per pool.
        for _ in range(layout.num_prefill_workers):
            sched, self.plans["prefill"] = _build_pool_scheduler(layout.prefill_replica, layout.prefill_scheduler,
                                                                 PrefillMixin, "prefill_pool", config, rid)
            replica_id = rid
            sched.on_prefilled = lambda req, hold, i=replica_id: self._on_prefilled(req, hold, i)  # type: ignore[attr-defined]
            self.prefill.append(_make_replica(env, rid, sched, config, layout.prefill_replica, recorder, True))
            rid += 1
        for _ in range(layout.decode.num_replicas * layout.decode_replica.attention_dp):
            sched, self.plans["decode"] = _build_pool_scheduler(layout.decode_replica, layout.decode_scheduler,
                                                                DecodeMixin, "decode_pool", config, rid, lockstep)
            sched.on_freed = self._dispatch  # type: ignore[attr-defined]
            sched.on_seated = self._on_seated  # type: ignore[attr-defined]
            self.decode.append(_make_replica(env, rid, sched, config, layout.decode_replica, recorder, True))
            rid += 1
        if layout.mixed is not None:
            assert layout.mixed_replica is not None and layout.mixed_scheduler is not None
            for _ in range(layout.mixed.num_replicas * layout.mixed_replica.attention_dp):
                sched, self.plans["mixed"] = _build_pool_scheduler(layout.mixed_replica, layout.mixed_scheduler, None,
                                                                   "mixed_pool", config, rid)
                self.mixed.append(_make_replica(env, rid, sched, config, layout.mixed_replica, recorder, False))
                rid += 1
        self._caches = [r.scheduler.blocks for r in self.prefill]  # what prefix_aware reads (read only)
        # Each pool replica's attention-DP ranks step together (simulator.engine.dp_group).
        for ranks, replica in ((self.prefill, layout.prefill_replica), (self.decode, layout.decode_replica),
                               (self.mixed, layout.mixed_replica)):
            if ranks and replica is not None and replica.attention_dp > 1:
                group_ranks(env, ranks, replica.attention_dp)

    @property
    def replicas(self) -> list[Replica]:
        return self.prefill + self.decode + self.mixed

    def kv_balance(self) -> list[tuple[int, int, int]]:
        """Per replica ``(free blocks, blocks its requests and parked KV hold, total)``; the
        invariant (checked by tests at any instant) is ``free + held == total``. Settles lockstep
        decodes first (their block counts are stale while they are carried)."""
        for r in self.replicas:
            r.scheduler.settle()
        held = {r.replica_id: sum(q.num_blocks + q.num_state_blocks for q in (
                    *r.scheduler.running, *r.scheduler.waiting, *getattr(r.scheduler, "seated_later", ())))
                for r in self.replicas}
        for _, hold, index in self.pending:
            held[self.prefill[index].replica_id] += hold.num_blocks + hold.num_state_blocks
        for req, hold, index, decode in self.in_transit.values():
            held[self.prefill[index].replica_id] += hold.num_blocks + hold.num_state_blocks
            held[decode.replica_id] += req.num_blocks + req.num_state_blocks
        for r in self.replicas:  # a prefix cache's shared blocks: each holder counts them (evictable ones are free)
            shared = getattr(r.scheduler.blocks, "num_shared_references", None)
            if shared is not None:
                held[r.replica_id] -= shared()
        return [(r.scheduler.blocks.num_free_blocks, held[r.replica_id], r.scheduler.blocks.num_blocks)
                for r in self.replicas]

    # -- arrivals -----------------------------------------------------------------------------
    def submit(self, req: Request) -> None:
        # A request the decode pool can never hold is refused up front, not after its prefill.
        reason = self.decode[0].scheduler.rejection_reason(req)
        if reason is not None:
            req.status = Status.REJECTED
            req.reject_reason = f"decode pool: {reason}"
            # Counted against the decode worker whose rule refused it (each replica's rows sum to the run's: it was
            # on no replica, and the per-replica breakdown lost it)
            req.replica_id = self.decode[0].replica_id
            self.decode[0].recorder.on_reject(req)
            return
        if self.mixed and all(r.scheduler.waiting for r in self.prefill):
            free = [m for m in self.mixed if not m.scheduler.waiting]
            if free:
                target = min(free, key=lambda m: m.num_outstanding)
                self.log.mixed[req.request_id] = True
                target.submit(req)
                return
        if len(self.prefill) == 1:
            index = 0
        else:
            outstanding = [r.num_outstanding for r in self.prefill]
            index = route(self._router, outstanding, self._step, self.rng, req, self._caches, self._router_memo)
            self._step += 1
        self.log.prefill_replica_id[req.request_id] = index
        self.prefill[index].submit(req)

    # -- handoff ----------------------------------------------------------------------------
    def _on_prefilled(self, req: Request, hold: _KVHold, prefill_index: int) -> None:
        self.log.prefill_done_at[req.request_id] = self.env.now
        self.pending.append((req, hold, prefill_index))
        self._dispatch()

    def _on_seated(self, req: Request) -> None:
        self.log.decode_seated_at[req.request_id] = self.env.now

    def _dispatch(self) -> None:
        """Reserve decode blocks for pending handoffs, oldest first, and start their transfers."""
        pending = self.pending
        while pending:
            req = pending[0][0]
            best, best_load = None, 0
            need = self.decode[0].scheduler.handoff_tokens(req)  # (every decode replica runs one policy)
            for replica in self.decode:  # the least loaded that can take it; the first of equals
                if replica.scheduler.blocks.can_admit(need):
                    load = replica.num_outstanding + replica.scheduler.num_parked
                    if best is None or load < best_load:
                        best, best_load = replica, load
            if best is None:
                return  # backpressure: the prefill replicas keep holding the KV
            req, hold, prefill_index = pending.popleft()
            best.scheduler.blocks.reserve(req, need)
            best.scheduler.blocks.take_state(req)
            best.scheduler.num_parked += 1
            rid = req.request_id
            self.log.decode_replica_id[rid] = best.replica_id
            self.log.decode_reserved_at[rid] = self.env.now
            self.in_transit[rid] = (req, hold, prefill_index, best)
            self.env.process(self._transfer(req, hold, prefill_index, best))

    def _carry(self, rid: int, duration: float):  # noqa: ANN202
        """The transfer itself, its links held."""
        self.log.transfer_start_at[rid] = self.env.now
        if duration > 0:
            yield self.env.timeout(duration)
        self.log.transfer_end_at[rid] = self.env.now

    def links_busy_s(self) -> dict[str, float]:
        """Busy seconds per link (:attr:`DisaggFigures.links_busy_s`)."""
        if self.link_scope == "shared":
            return {"shared": self.egress_busy_s[0]}
        return {**{f"prefill{k} egress": b for k, b in enumerate(self.egress_busy_s)},
                **{f"decode{k} ingress": b for k, b in enumerate(self.ingress_busy_s)}}

    def _transfer(self, req: Request, hold: _KVHold, prefill_index: int, decode: Replica):  # noqa: ANN202
        nbytes = req.num_prompt_tokens * self.kv_bytes_per_token + self.state_bytes_per_seq
        rid = req.request_id
        self.log.kv_bytes[rid] = nbytes
        duration = self.layout.link.transfer_s(nbytes)
        if self.handoff_s > 0:  # the second hop and the connector's handshake: the KV stays on the prefill replica
            yield self.env.timeout(self.handoff_s)
        self.log.handoff_done_at[rid] = self.env.now
        sender = prefill_index // self._prefill_dp if len(self.egress) > 1 else 0
        with self.egress[sender].request() as slot:
            yield slot
            if self.ingress:  # the sender's egress first, then the receiver's ingress (no cycles)
                receiver = (decode.replica_id - len(self.prefill)) // self._decode_dp
                with self.ingress[receiver].request() as inbound:
                    yield inbound
                    yield from self._carry(rid, duration)
                self.ingress_busy_s[receiver] += duration / self.ingress_width  # of its whole width
            else:
                yield from self._carry(rid, duration)
            self.egress_busy_s[sender] += duration
        del self.in_transit[rid]
        prefill = self.prefill[prefill_index]
        prefill.scheduler.blocks.free(hold)
        prefill.scheduler.num_parked -= 1
        prefill.wake()  # type: ignore[attr-defined]
        decode.submit(req)


def simulate_disaggregated(config: RunConfig, table=None, progress: bool | RunProgress = False,  # noqa: ANN001
                           watch: Callable[[simpy.Environment, list[Request]], Any] | None = None,
                           lockstep: SchedulerWrap | None = None) -> RunResult:
    """:func:`simulator.engine.cluster.simulate` for a disaggregated ``config``: same workload streams
    (same seed, same requests as the aggregated run), same result type. ``result.disagg``
    holds the pools, the link and the :class:`HandoffLog` (:class:`DisaggFigures`). ``lockstep``
    (the fast layer's class wrap) gives the decode pools lockstep decodes: the same results."""
    layout = layout_of(config)
    assert layout is not None
    wall_start = time.perf_counter()
    reporter = reporter_of(progress)
    # Token times kept: the hand-off analysis reads each request's second token time.
    requests, source, router_rng = prepare_requests(config, table, reporter, token_times=True)
    env = simpy.Environment()
    if reporter is not None:
        reporter.start("simulating", len(requests))
    client = ClosedLoopClient.of(config.workload)  # closed loop: users send as requests end (engine.closed_loop)
    recorder = make_recorder(Recorder, client, on_progress=reporter.update if reporter else None,
                             report_every=max(1, len(requests) // 200))
    cluster = DisaggCluster(env, config, layout, recorder, router_rng, len(requests), lockstep)
    stopped = run_to_end(env, requests, cluster, watch, reporter, own_reporter=reporter is not progress, client=client)
    replicas = cluster.replicas
    for r in replicas:  # a run stopped early leaves lockstep decodes carried: their true counters first
        r.scheduler.settle()
    if config.first_token_at == "decode":
        deliver_first_token_on_decode(requests, cluster.log, {r.replica_id: r.scheduler.gaps for r in replicas})
    links_busy_s = cluster.links_busy_s()
    pools = (["prefill"] * len(cluster.prefill) + ["decode"] * len(cluster.decode) + ["mixed"] * len(cluster.mixed))
    num_blocks = [r.scheduler.blocks.num_blocks for r in replicas]
    return RunResult(
        config=config, requests=requests, iterations=recorder.iterations, memory=cluster.plans["decode"],
        workload_source=source, sim_end_at=env.now,
        wall_s=time.perf_counter() - wall_start, replica_busy_s=[r.num_busy_s for r in replicas],
        stages=recorder.stages,
        stage_busy_s=[list(getattr(r, "stage_busy_s", (r.num_busy_s,))) for r in replicas],
        tbt=[r.scheduler.gaps for r in replicas],
        disagg=DisaggFigures(layout=layout.describe(), pools=pools, num_blocks=num_blocks, num_gpus=layout.num_gpus,
                             link_busy_s=max(links_busy_s.values()),
                             link_bytes_per_s=layout.link.bytes_per_s,
                             link_latency_s=layout.link.latency_s, kv_bytes_per_token=cluster.kv_bytes_per_token,
                             final_free_blocks=[r.scheduler.blocks.num_free_blocks for r in replicas],
                             handoff=cluster.log, link_scope=cluster.link_scope,
                             links_busy_s=links_busy_s),
        extra={"cost_model_extrapolations": sum(getattr(r.cost_model, "num_extrapolations", 0) for r in replicas),
               "cost_model_extrapolations_by_op": summed_by_op([extrapolation_counts(r.cost_model) for r in replicas]),
               **({"stopped": stopped} if stopped is not None else {}),
               **({"speculative": _speculation_extra(config, replicas)} if config.speculative is not None else {})},
    )


def deliver_first_token_on_decode(requests: list[Request], log: HandoffLog, gap_logs: dict[int, GapLog]) -> None:
    """The client's first token as the decode worker delivers it: with the decode worker's first
    step after the KV handoff (the step that yields the request's second token; that step streams
    the prefill's token and its own), so TTFT includes the handoff and the decode queue; TPOT is
    (E2E - TTFT) / (tokens - 1) from there. The first two tokens reach the client together, so the
    gap between them (the handoff) is no time between tokens: it leaves the request's ``max_tbt_s``
    and its decode replica's gap log (``gap_logs``, by replica id), as vLLM's benchmark counts no
    inter-token latency inside one streamed chunk. ``token_times`` stay the engine's (where each
    token was computed: the prefill's at the prompt's end), as the handoff analysis reads them.
    Requests that never reached a decode replica (served by a mixed replica, one output token,
    rejected or not finished) keep the prefill replica's time. Applied once, after the run: no
    event reads the gap logs meanwhile (such a run has no TBT early exit: ``gap_logs_final``), and a
    TTFT watch reading the prefill's time misses at most an early stop."""
    handed = np.isfinite(log.transfer_end_at)
    first_gaps: dict[int, list[float]] = {}
    for req in requests:
        rid = req.request_id
        times = req.token_times
        if rid >= len(handed) or not handed[rid] or times is None or len(times) < 2:
            continue
        req.first_token_at = times[1]
        first_gaps.setdefault(int(log.decode_replica_id[rid]), []).append(times[1] - times[0])
        later = np.diff(np.frombuffer(times, dtype=np.float64)[1:]) if len(times) > 2 else ()
        req.max_tbt_s = float(later.max()) if len(later) else 0.0
    for replica_id, gaps in first_gaps.items():
        gap_logs[replica_id].remove(np.array(gaps))


def _speculation_extra(config: RunConfig, replicas: list[Replica]) -> dict:
    from simulator.engine.speculative import speculation_extra

    assert config.speculative is not None
    return speculation_extra(config.speculative, [r.scheduler for r in replicas])
