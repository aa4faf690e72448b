"""Automatic prefix caching: KV blocks named by the prefix they hold, shared and kept after use.

vLLM V1's rule (``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py``), on the simulator's
block counts:

- **Names.** A *full* block of prompt tokens is named by its prefix: equal names mean equal
  tokens from the start of the prompt through the end of the block (vLLM chains a hash over
  the block's tokens and its parent's hash). The simulator has no tokens; a request carries
  the block hash ids of a trace (Mooncake: 512-token blocks, the last one partial; Weka: 64-token
  blocks, full ones only), ``Request.block_hashes`` with ``Request.hash_block_size``, and
  :func:`block_names` maps them onto the engine's blocks honestly: engine block ``k`` (tokens
  ``[k*bs, (k+1)*bs)``) is named by the trace block that holds its last token and its end's
  offset in that block. Equal trace id means equal prefix through that trace block, so equal
  names mean equal prefixes; an engine block inside a trace block whose id differs is a miss
  even if its tokens might agree (the trace cannot tell), so hits are counted at the trace's
  granularity, never above it. Engine blocks past the hashed tokens (the partial tail, and
  every generated token) have no name, except where the session's next request resends this
  prompt and its answer: the trace names that content in the next request's hashes, which
  :func:`~simulator.workload.prefix_traces.continued_hashes` carries over to this request
  (``Request.num_named_tokens``), so its answer's full blocks join the cache when it ends
  (:meth:`PrefixCachingBlockManager._cache_answer`), as vLLM and SGLang cache output blocks
  (they do so as the blocks fill; a next turn sent before the answer ends finds none of it
  here). Without it a two-turn session with a 512-token answer recomputed 576 tokens of its
  second prompt where vLLM's rule computes 80.
- **Lookup at admission.** The longest run of cached blocks from the prompt's start is the
  cache hit; it is capped at ``(num_known - 1) // bs`` blocks, since the last known token is
  always computed to get logits (vLLM's ``max_cache_hit_length = num_tokens - 1``). So a
  wholly cached prompt of ``k*bs + 1`` tokens runs 1 token, one of ``k*bs`` tokens runs its last
  block again, in a block of its own: the cached copy stays cached and a hit for others (vLLM's
  block pool does not de-duplicate, and a lookup takes a name's first copy). ``num_computed`` starts at the hit; the scheduler's token budget covers only the
  rest; the cost model prices the chunk with the hit as attention context (``kv_before``).
  The walk costs O(hit blocks + 1) dictionary lookups: it never scans the cache.
- **Sharing.** A hit block gains a reference; a block is free only when no request
  references it.
- **Freed blocks stay cached.** When its last reference goes, a computed named block joins an
  LRU pool of evictable blocks (blocks of a request are freed last-block-first, so a shared
  prefix is the most recently used part, as vLLM's ``free_blocks(reversed(...))``). A hit on
  it takes it back out. An allocation takes an empty block if there is one and evicts the
  least recently used cached block otherwise (any block, not only leaves: an evicted middle
  block strands its descendants, unreachable by the longest-prefix walk, until they are
  evicted in turn).
- **When a block becomes visible.** A block is registered under its name when its request
  is admitted, but it is a hit for others only once its owner has computed it
  (``owner.num_computed >= block end``); vLLM caches a chunk's blocks when it schedules the
  chunk, so a request admitted in the same step can share them. Here it waits until the chunk
  has run (at most one iteration later). Two concurrent misses on the same name: the first
  registered copy is the cached one; the other is an anonymous block (vLLM keeps both).

Differences from vLLM V1, stated: (1) empty blocks are taken before any cached block is
evicted (vLLM keeps one queue of free blocks in the order they were freed, so it may evict a
cached block while an uncached freed block sits behind it in the queue); (2) the schedulers
reserve a request's whole prompt at admission (the simulator's rule), where V1 allocates per
scheduled chunk; (3) a request's admission check counts its hits (``can_admit(num_tokens,
req)``): only hits on blocks other running requests hold lower the blocks it needs, as in
V1's ``allocate_slots``.

SGLang's radix cache (``policy="radix-lru"``, :class:`RadixBlockManager`): the same blocks and
names, but only *leaves* are evicted (a cached block none of whose children is cached), LRU
among them by last use, so a shared prefix stays while any branch below it does. SGLang caches
at token granularity by default (``page_size=1``); here the granule is the engine block.
Under these rules the two policies evict the same blocks: a block's children are released no
later than it (a request that holds a child holds its parent, and frees its blocks last-first),
so the LRU pool's oldest block is always a leaf (``tests/test_prefix_cache.py`` checks the two on
random request streams, with requests sharing blocks still being computed and ones freed
mid-prompt: no difference in its 300 streams, nor in 3,000 when this was written).

A CPU tier (``host_blocks`` > 0; vLLM's offloading connector, LMCache's local CPU backend):
a block evicted from the GPU is kept in host memory, LRU there too (a hit moves it to the most
recent end; the host keeps its copy). At admission, after the GPU hits end, the walk goes on in
the host tier: those blocks are allocated on the GPU like new ones, counted as computed, and
their load over the host link (``host_load_s`` seconds a block) is owed in ``pending_load_s``,
which the replica adds to the iteration that schedules the request (a blocking load: the step
waits for it, as LMCache's synchronous retrieve does; vLLM V1's asynchronous load would hold only
the request). Hits there are counted apart (``num_host_hit_tokens``,
``Request.num_host_cached_tokens``). Lazy evictions move blocks to the host in the same order
as eager ones, before any lookup: the same tier contents.

Fast paths: the lockstep cohort and event skipping take decode blocks by lowering
``num_free_blocks`` directly (:meth:`simulator.fast.cohort.DecodeCohort.begin_step`, ``fast.skipping.apply``).
``num_free_blocks`` here counts every block an allocation can get (empty *or* evictable), so
their arithmetic holds unchanged; the evictions such allocations imply are made lazily, the
least recently used first, at the next call into this class (:meth:`_reconcile`), which is
before anything reads or changes the pool: the same blocks are evicted as if at once.
Invariants: ``len(lru) <= num_free_blocks`` after every method; a name in the cache map is
either referenced (``ref > 0``) or in the LRU pool; ``num_free_blocks`` plus the distinct
blocks referenced by live requests equals ``num_blocks``.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np

from simulator.engine.kvcache import BlockManager

if TYPE_CHECKING:
    from simulator.workload.request import Request


def num_named_blocks(block_hashes, hash_block_size: int, num_prompt_tokens: int, block_size: int) -> int:  # noqa: ANN001
    """How many of the engine's prompt blocks :func:`block_names` names: those ending within the hashed tokens."""
    return min(len(block_hashes) * hash_block_size, num_prompt_tokens) // block_size


def block_names(block_hashes, hash_block_size: int, num_prompt_tokens: int, block_size: int) -> list[int]:  # noqa: ANN001
    """Names of the engine's full prompt blocks that the trace's hash ids cover, in order.

    Engine block ``k`` ends at token ``e = (k+1) * block_size``; the trace block holding token
    ``e - 1`` is ``m = (e - 1) // hash_block_size``; the name is ``id[m] * hash_block_size + (e - m
    * hash_block_size)`` (unique: the offset is in ``1..hash_block_size``). Only blocks ending
    within the hashed tokens, ``min(len(ids) * hash_block_size, num_prompt_tokens)``, are named.
    """
    ids = np.asarray(block_hashes, dtype=np.int64)
    n = num_named_blocks(block_hashes, hash_block_size, num_prompt_tokens, block_size)
    if n <= 0:
        return []
    ends = np.arange(1, n + 1, dtype=np.int64) * block_size
    m = (ends - 1) // hash_block_size
    return (ids[m] * hash_block_size + (ends - m * hash_block_size)).tolist()


class _Block:
    """A named block: ``ref`` requests hold it; ``owner`` is the request computing it (None once
    computed, known from ``owner.num_computed >= end``); ``end`` its last token + 1."""

    __slots__ = ("name", "ref", "owner", "end", "parent", "num_children", "last_used")

    def __init__(self, name: int, owner: Request | None, end: int, parent: _Block | None) -> None:
        self.name = name
        self.ref = 1
        self.owner = owner
        self.end = end
        self.parent = parent  # the cached block before it (radix policy)
        self.num_children = 0
        self.last_used = 0


class PrefixCachingBlockManager(BlockManager):
    """:class:`BlockManager` with vLLM V1's automatic prefix caching (see the module doc).

    Same interface: schedulers admit with :meth:`admit` (look up, share, allocate the rest)
    and may pass the request to :meth:`can_admit` so its hits count. Counters:
    ``num_queried_tokens`` / ``num_hit_tokens`` (every admission, vLLM's hit-rate counters),
    ``num_evicted_blocks``.
    """

    __slots__ = ("_cache", "_lru", "_held", "_names_memo", "num_queried_tokens", "num_hit_tokens",
                 "num_evicted_blocks", "_host", "host_blocks", "host_load_s", "pending_load_s", "num_host_hit_tokens")
    policy = "vllm-lru"
    _linked = False  # whether blocks track their parent and children (the radix policy)

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, host_blocks: int = 0,
                 host_load_s: float = 0.0, state_blocks: int = 0) -> None:
        super().__init__(num_blocks, block_size, watermark, state_blocks)
        # The CPU tier: names of blocks evicted from the GPU, least recent first (None: no tier).
        self._host: OrderedDict[int, None] | None = OrderedDict() if host_blocks > 0 else None
        self.host_blocks = host_blocks
        self.host_load_s = host_load_s  # seconds to load one block from the host
        self.pending_load_s = 0.0
        self.num_host_hit_tokens = 0
        self._cache: dict[int, _Block] = {}  # name -> its registered block (referenced, or in _lru)
        self._lru: OrderedDict[int, _Block] = OrderedDict()  # evictable cached blocks, least recent first
        self._held: dict[int, list[_Block]] = {}  # request id -> registered blocks it references
        self._names_memo: tuple[int, list[int]] = (-1, [])  # (request id, names): the blocked head asks often
        self.num_queried_tokens = 0
        self.num_hit_tokens = 0
        self.num_evicted_blocks = 0

    # -- pool ------------------------------------------------------------------------------
    @property
    def num_cached_blocks(self) -> int:
        """Blocks registered under a name (referenced or evictable)."""
        return len(self._cache)

    @property
    def num_evictable_blocks(self) -> int:
        self._reconcile()
        return len(self._lru)

    def _reconcile(self) -> None:
        """Evict, least recently used first, the cached blocks that allocations made since the
        last call took (free blocks fell below the evictable ones)."""
        excess = len(self._lru) - self.num_free_blocks
        if excess > 0:
            self._evict(excess)

    def _evict(self, num: int) -> None:
        lru, cache = self._lru, self._cache
        host = self._host
        for _ in range(num):
            name, _block = lru.popitem(last=False)
            del cache[name]
            if host is not None:
                self._offload(name)
        self.num_evicted_blocks += num

    def _offload(self, name: int) -> None:
        """An evicted block's copy goes to the CPU tier (most recent), which drops its least
        recent block when full."""
        host = self._host
        host[name] = None
        host.move_to_end(name)
        if len(host) > self.host_blocks:
            host.popitem(last=False)

    def take_pending_load_s(self) -> float:
        """The host loads owed since the last call (the replica adds them to an iteration)."""
        load, self.pending_load_s = self.pending_load_s, 0.0
        return load

    def _release(self, block: _Block) -> None:
        """A computed block's last reference went: it becomes evictable (most recent)."""
        self._lru[block.name] = block

    def _unregister(self, block: _Block) -> None:
        del self._cache[block.name]

    # -- lookup ----------------------------------------------------------------------------
    def names_of(self, req: Request) -> list[int]:
        if req.block_hashes is None:
            return []
        memo_id, names = self._names_memo
        if memo_id != req.request_id:
            names = block_names(req.block_hashes, req.hash_block_size, req.num_prompt_tokens, self.block_size)
            self._names_memo = (req.request_id, names)
        return names

    def _lookup(self, req: Request, names: list[int]) -> list[_Block]:
        """The longest run of computed cached blocks from the prompt's start, capped so the last
        known token is computed."""
        limit = _hit_cap_blocks(req, self.block_size)
        if limit > len(names):
            limit = len(names)
        cache, hits = self._cache, []
        for i in range(limit):
            block = cache.get(names[i])
            if block is None:
                break
            owner = block.owner
            if owner is not None:
                if owner.num_computed < block.end:
                    break  # registered but not yet computed
                block.owner = None
            hits.append(block)
        return hits

    def cached_prefix_tokens(self, req: Request) -> int:
        """Tokens of ``req``'s prompt a lookup now would find cached (a router's score); 0 for a request
        whose prompt names no blocks (no hashes), without touching the cache."""
        if req.block_hashes is None:
            return 0
        self._reconcile()
        return len(self._lookup(req, self.names_of(req))) * self.block_size

    def admission_blocks(self, num_tokens: int, req: Request | None = None) -> int:
        if req is None or req.block_hashes is None:
            return super().admission_blocks(num_tokens)
        self._reconcile()
        hits = self._lookup(req, self.names_of(req))
        referenced = 0
        for block in hits:
            if block.ref:
                referenced += 1
        # An evictable hit leaves the free pool, so only hits others hold save blocks.
        return -(-num_tokens // self.block_size) + self.state_blocks - referenced

    # -- allocation ------------------------------------------------------------------------
    def admit(self, req: Request, num_tokens: int) -> None:
        """Allocate a request leaving ``waiting`` (holding no blocks, nothing computed): its
        cached prefix is shared and counted as computed, the rest allocated and named."""
        if req.num_blocks or req.block_hashes is None:
            self.reserve(req, num_tokens)
            self.take_state(req)
            self.num_queried_tokens += req.num_prompt_tokens + req.num_generated
            return
        self._reconcile()
        names = self.names_of(req)
        hits = self._lookup(req, names)
        lru = self._lru
        num_hits = len(hits)
        bs = self.block_size
        num_host = 0
        host = self._host
        if host is not None and names:  # the walk goes on in the CPU tier (before this admission evicts)
            limit = min(len(names), _hit_cap_blocks(req, bs), -(-num_tokens // bs))
            k = num_hits
            while k < limit and names[k] in host:
                host.move_to_end(names[k])
                k += 1
            num_host = k - num_hits
            if num_host:
                self.pending_load_s += num_host * self.host_load_s
                self.num_host_hit_tokens += num_host * bs
        num_taken = 0
        for block in hits:
            if not block.ref:  # evictable: a hit takes it out of the pool
                del lru[block.name]
                num_taken += 1
            block.ref += 1
        self.num_free_blocks -= num_taken
        total = -(-num_tokens // bs)
        need = total - num_hits
        assert need <= self.num_free_blocks, "KV block over-allocation"
        self.num_free_blocks -= need
        req.num_blocks = total
        self.take_state(req)  # a hybrid's state is its own (the hit's state taken as cached with its blocks)
        if len(lru) > self.num_free_blocks:
            self._evict(len(lru) - self.num_free_blocks)
        hit_tokens = num_hits * bs
        req.num_computed = hit_tokens + num_host * bs  # the host's blocks are loaded, not recomputed
        if req.admitted_seq < 0:  # its first admission (the scheduler numbers it next): the traffic's hit
            req.num_cached_tokens = hit_tokens + num_host * bs
            req.num_host_cached_tokens = num_host * bs
        self.num_queried_tokens += req.num_prompt_tokens + req.num_generated
        self.num_hit_tokens += hit_tokens
        # Name the new prompt blocks (computed as the request's chunks run).
        held = hits
        cache = self._cache
        stop = min(len(names), total)
        new_names = names[num_hits:stop]
        if new_names and cache.keys().isdisjoint(new_names):  # the common case: no copy of any name
            parent = hits[-1] if hits else None
            blocks = [_Block(name, req, end, None) for name, end in
                      zip(new_names, range((num_hits + 1) * bs, (stop + 1) * bs, bs), strict=True)]
            cache.update(zip(new_names, blocks, strict=True))
            if self._linked:
                for block in blocks:
                    block.parent = parent
                    self._link(block)
                    parent = block
            held.extend(blocks)
        elif new_names:
            parent = hits[-1] if hits else None
            # Whether the walk stopped at the cap (the last known token runs), not at a miss: a wholly cached prompt
            # of k*bs tokens recomputes its last block, whose cached copy was not hit for the cap alone.
            capped = num_hits + num_host >= _hit_cap_blocks(req, bs)
            for k in range(num_hits, stop):
                name = names[k]
                old = cache.get(name)
                if old is not None:
                    if old.ref or capped:
                        # Another request's copy, or a computed one the walk reaches, stays the named one (vLLM's
                        # block pool keeps both copies and a lookup takes the first); ours is anonymous.
                        parent = None
                        continue
                    self._drop_stranded(old)  # an evictable copy past a miss: ours replaces it
                block = _Block(name, req, (k + 1) * bs, parent if self._linked else None)
                self._link(block)
                cache[name] = block
                held.append(block)
                parent = block
        if held:
            self._held[req.request_id] = held

    def _link(self, block: _Block) -> None:
        """Hook for the radix policy (children counts)."""

    def _drop_stranded(self, block: _Block) -> None:
        del self._lru[block.name]
        del self._cache[block.name]

    def _cache_answer(self, req: Request, held: list[_Block] | None) -> None:
        """Name the full blocks past the prompt's that ``req`` computed (its answer, and a prompt tail named only
        by the ids carried on from its session's next turn: ``Request.num_named_tokens``) and release them to the
        pool, last first, before the prompt's blocks are: vLLM and SGLang cache output blocks too. A name already
        registered keeps its block; ours is then freed as an anonymous one."""
        bs = self.block_size
        # the prompt's named blocks (names_of's count, without its memo: the blocked head's stays)
        first = num_named_blocks(req.block_hashes, req.hash_block_size, req.num_prompt_tokens, bs)
        names = block_names(req.block_hashes, req.hash_block_size, min(req.num_computed, req.num_named_tokens), bs)
        if len(names) <= first:
            return
        cache = self._cache
        parent = held[-1] if held and held[-1].end == first * bs and self._linked else None
        made = []
        for k in range(first, len(names)):
            name = names[k]
            if name in cache:
                parent = None  # (another request's copy; the chain continues from none of ours)
                continue
            block = _Block(name, None, (k + 1) * bs, parent)
            block.ref = 0
            self._link(block)
            cache[name] = block
            made.append(block)
            parent = block if self._linked else None
        release = self._release if self._linked else None
        for block in reversed(made):  # the answer's last block the least recent, as a request frees its blocks
            if release is None:
                self._lru[block.name] = block
            else:
                release(block)

    def free(self, req: Request) -> None:
        self._reconcile()
        num_freed = req.num_blocks
        held = self._held.pop(req.request_id, None)
        if req.num_named_tokens > req.num_prompt_tokens:
            self._cache_answer(req, held)
        if held:
            computed = req.num_computed
            lru = self._lru
            release = self._release if self._linked else None
            for block in reversed(held):  # last block first: the prefix ends up most recent
                ref = block.ref - 1
                block.ref = ref
                if ref:
                    num_freed -= 1  # still held by another request
                elif block.owner is None or block.end <= computed:
                    block.owner = None
                    if release is None:
                        lru[block.name] = block
                    else:
                        release(block)
                else:
                    self._unregister(block)  # never computed (preempted mid-prompt): nothing to keep
        self.num_free_blocks += num_freed + req.num_state_blocks
        req.num_blocks = 0
        req.num_state_blocks = 0

    def num_shared_references(self) -> int:
        """References to registered blocks beyond one a block: the holders' ``num_blocks`` count a shared block once
        per holder, so their sum less this is the distinct blocks they hold (a block balance's, tests). O(cache)."""
        return sum(block.ref - 1 for block in self._cache.values() if block.ref > 1)

    def check(self) -> None:
        """Assert the invariants (tests)."""
        self._reconcile()
        assert len(self._lru) <= self.num_free_blocks <= self.num_blocks
        for name, block in self._cache.items():
            assert block.name == name
            assert block.ref > 0 or name in self._lru, f"unreferenced block {name} outside the pool"
        for name in self._lru:
            assert self._cache[name].ref == 0


class RadixBlockManager(PrefixCachingBlockManager):
    """SGLang's radix-cache eviction on the same blocks: only leaves (no cached child) are
    evictable, least recently used first; evicting a leaf may make its parent a leaf.

    The evictable leaves are a heap keyed by last use (entries made stale by a hit, a new
    child or a re-release are skipped when popped); ``_lru`` holds every ref-0 cached block,
    leaf or not, so ``len(_lru)`` still counts what allocations may claim."""

    __slots__ = ("_heap", "_clock")
    policy = "radix-lru"
    _linked = True

    def __init__(self, num_blocks: int, block_size: int, watermark: float = 0.01, host_blocks: int = 0,
                 host_load_s: float = 0.0, state_blocks: int = 0) -> None:
        super().__init__(num_blocks, block_size, watermark, host_blocks, host_load_s, state_blocks)
        self._heap: list[tuple[int, int, _Block]] = []
        self._clock = 0

    def _push_if_leaf(self, block: _Block) -> None:
        if not block.ref and not block.num_children:
            heapq.heappush(self._heap, (block.last_used, block.name, block))

    def _release(self, block: _Block) -> None:
        self._clock += 1
        block.last_used = self._clock
        self._lru[block.name] = block
        self._push_if_leaf(block)

    def _link(self, block: _Block) -> None:
        if block.parent is not None:
            block.parent.num_children += 1

    def _unlink(self, block: _Block) -> None:
        parent = block.parent
        if parent is not None and self._cache.get(parent.name) is parent:
            parent.num_children -= 1
            self._push_if_leaf(parent)

    def _unregister(self, block: _Block) -> None:
        del self._cache[block.name]
        self._unlink(block)

    def _drop_stranded(self, block: _Block) -> None:
        del self._lru[block.name]
        del self._cache[block.name]
        self._unlink(block)

    def _evict(self, num: int) -> None:
        # The hot loop of a prefix-cache run that overflows its pool: _unlink and _push_if_leaf written out.
        heap, lru, cache, host = self._heap, self._lru, self._cache, self._host
        heappop, heappush = heapq.heappop, heapq.heappush
        for _ in range(num):
            while True:
                last_used, name, block = heappop(heap)  # a ref-0 block always leads to a leaf
                if (not block.ref and not block.num_children and block.last_used == last_used
                        and cache.get(name) is block):
                    break
            del lru[name]
            del cache[name]
            parent = block.parent
            if parent is not None and cache.get(parent.name) is parent:
                parent.num_children -= 1
                if not parent.ref and not parent.num_children:
                    heappush(heap, (parent.last_used, parent.name, parent))
            if host is not None:
                self._offload(name)
        self.num_evicted_blocks += num


def make_block_manager(policy: str | None, num_blocks: int, block_size: int, watermark: float,
                       host_blocks: int = 0, host_load_s: float = 0.0, state_blocks: int = 0) -> BlockManager:
    """The KV cache of one replica: plain counts (``policy`` None) or prefix caching, with a
    CPU tier of ``host_blocks`` blocks loaded at ``host_load_s`` seconds each where > 0
    (``state_blocks``: a hybrid model's recurrent state per running sequence)."""
    if policy is None:
        return BlockManager(num_blocks, block_size, watermark, state_blocks)
    if policy == "vllm-lru":
        return PrefixCachingBlockManager(num_blocks, block_size, watermark, host_blocks, host_load_s, state_blocks)
    if policy == "radix-lru":
        return RadixBlockManager(num_blocks, block_size, watermark, host_blocks, host_load_s, state_blocks)
    raise ValueError(f"unknown prefix cache policy {policy!r}")  # the config validates it


def _hit_cap_blocks(req: Request, block_size: int) -> int:
    """The most blocks a lookup may hit for ``req``: its last known token always runs (vLLM's
    ``max_cache_hit_length = num_tokens - 1``)."""
    return (req.num_prompt_tokens + req.num_generated - 1) // block_size
