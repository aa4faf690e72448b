"""Measurement grids: which shapes a profile run times.

* Token counts (linear, elementwise): dense at small counts, where kernel launch and
  tile quantisation dominate (1..8, then every 16 up to 256), then geometric (a factor
  ``2**(1/4)``, rounded to multiples of 16) up to ``max_tokens``, which is always
  included.
* Prefill attention: chunk sizes (powers of two) x KV context already cached (0 and
  powers of two), with ``kv_context + chunk <= max_model_len``.
* Decode attention: batch sizes x context lengths (powers of two), with the total KV
  tokens capped, plus *mixed* batches whose per-sequence lengths are drawn from a
  seeded log-normal around the same mean (same seed, same grid).
* Communication: message sizes of ``tokens x hidden x dtype bytes`` over the token
  grid, for each world size.

``quick`` grids are small, for smoke tests and CPU runs, yet each op still gets
:data:`QUICK_MIN_POINTS` distinct shapes: enough for ``simulate fit`` (its ``MIN_POINTS``)
to accept a quick profile, so profile -> fit -> simulate works end to end on a laptop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.schema import ATTN_DECODE, ATTN_PREFILL, COMM_OPS, ELEMENTWISE_OPS, LINEAR_OPS, SEND_RECV
from profiler.shapes import ShardedShapes

# Total KV tokens of one decode batch (all sequences): keeps memory bounded on any device.
MAX_DECODE_KV_TOKENS = 1 << 21
MAX_DECODE_KV_TOKENS_QUICK = 1 << 14
# Distinct shapes per op in a quick grid; must be >= simulator.calibrate.fit.MIN_POINTS (a test checks).
QUICK_MIN_POINTS = 8


@dataclass(frozen=True)
class Point:
    """One measurement: an op and its shape parameters (None where not applicable)."""

    op: str
    tp: int | None = None
    num_tokens: int | None = None
    batch_size: int | None = None
    chunk_size: int | None = None
    kv_context: int | None = None
    context_lens: tuple[int, ...] | None = None  # decode: per-sequence KV length
    message_bytes: int | None = None
    world_size: int | None = None
    backend: str = "torch"  # kernel library: torch, sdpa, flash_attn, gloo, nccl

    def shape_columns(self) -> dict[str, int | None]:
        """The schema's shape columns for this point."""
        cols: dict[str, int | None] = {
            "num_tokens": self.num_tokens, "batch_size": self.batch_size, "chunk_size": self.chunk_size,
            "kv_context": self.kv_context, "message_bytes": self.message_bytes, "world_size": self.world_size,
            "tp": self.tp, "context_len": None, "context_len_max": None, "kv_tokens": None, "kv_sq_sum": None,
        }
        if self.op == ATTN_PREFILL:
            ctx = int(self.kv_context) + int(self.chunk_size)
            cols.update(context_len=ctx, context_len_max=ctx, kv_tokens=self.batch_size * ctx,
                        kv_sq_sum=self.batch_size * ctx * ctx)
        elif self.op == ATTN_DECODE:
            lens = self.context_lens
            mean = round(sum(lens) / len(lens))
            cols.update(context_len=mean, context_len_max=max(lens), kv_tokens=sum(lens),
                        kv_sq_sum=sum(x * x for x in lens), kv_context=mean, chunk_size=1)
        return cols


def quick_token_grid(max_tokens: int, num_points: int = QUICK_MIN_POINTS) -> list[int]:
    """``num_points`` distinct counts from 1 to ``max_tokens``, near-geometric (fewer only when
    ``max_tokens < num_points``): 1, 2, 4, ..., 128 for 128."""
    if max_tokens <= num_points:
        return list(range(1, max_tokens + 1))
    out: list[int] = []
    last = num_points - 1
    for i in range(num_points):
        t = max(round(max_tokens ** (i / last)), out[-1] + 1 if out else 1)
        out.append(min(t, max_tokens - (last - i)))  # leave room for the points still to come
    return out


def token_grid(max_tokens: int, quick: bool = False) -> list[int]:
    if quick:
        return quick_token_grid(max_tokens)
    grid = set(range(1, 9)) | set(range(16, 257, 16))
    t = 256.0
    while t < max_tokens:
        t *= 2 ** 0.25
        grid.add(int(round(t / 16) * 16))
    grid = {g for g in grid if g <= max_tokens}
    grid.add(max_tokens)
    return sorted(grid)


def _powers_of_two(lo: int, hi: int) -> list[int]:
    out, v = [], lo
    while v <= hi:
        out.append(v)
        v *= 2
    return out


def prefill_grid(max_tokens: int, max_model_len: int, quick: bool = False) -> list[tuple[int, int]]:
    """``(chunk_size, kv_context)`` pairs."""
    if quick:
        top = max(1, min(max_tokens, max_model_len // 2))  # room left for the cached contexts
        chunks = sorted({max(1, top // 4), max(1, top // 2), top})
        contexts = [0, 128, 256]  # 3 x 3 = 9 shapes where max_tokens >= 4
    else:
        chunks = _powers_of_two(16, max_tokens)
        contexts = [0, *_powers_of_two(256, max_model_len)]
    return [(c, k) for c in chunks for k in contexts if c <= max_tokens and c + k <= max_model_len]


def decode_grid(max_model_len: int, rng: np.random.Generator, quick: bool = False) -> list[tuple[int, ...]]:
    """Per-sequence KV lengths of each decode batch: uniform batches, then mixed ones."""
    if quick:
        batch_sizes, contexts, cap = [1, 4, 8], [128, 512, 1024], MAX_DECODE_KV_TOKENS_QUICK  # 9 uniform + mixed
    else:
        batch_sizes, contexts, cap = _powers_of_two(1, 256), _powers_of_two(128, max_model_len), MAX_DECODE_KV_TOKENS
    contexts = [c for c in contexts if c <= max_model_len] or [max_model_len]
    out: list[tuple[int, ...]] = []
    for b in batch_sizes:
        for c in contexts:
            if b * c <= cap:
                out.append((c,) * b)
    # Mixed batches: a log-normal spread (sigma 1, heavy-tailed like real traces) around
    # the same mean, clipped to [1, max_model_len].
    for b in batch_sizes:
        if b < 2:
            continue
        for c in contexts:
            if b * c > cap:
                continue
            lens = np.exp(rng.normal(0.0, 1.0, size=b))
            lens = np.clip(np.round(lens / lens.mean() * c), 1, max_model_len).astype(int)
            if b * int(lens.max()) > 4 * cap:  # padded K/V (SDPA) must stay bounded too
                continue
            out.append(tuple(int(x) for x in lens))
    return out


def comm_token_grid(max_tokens: int, quick: bool = False) -> list[int]:
    if quick:
        return quick_token_grid(max_tokens)
    return _powers_of_two(1, max_tokens) if max_tokens >= 1 else []


def build_points(ops: tuple[str, ...], shapes_by_tp: dict[int, ShardedShapes], world_sizes: tuple[int, ...],
                 max_tokens: int, dtype_bytes: int, rng: np.random.Generator, quick: bool = False,
                 attention_backends: tuple[str, ...] = ("sdpa",), comm_backend: str = "gloo") -> list[Point]:
    """Every point of a run, in a stable order (ops, then TP, then shape, then backend)."""
    points: list[Point] = []
    tokens = token_grid(max_tokens, quick)
    any_shapes = next(iter(shapes_by_tp.values()))
    model = any_shapes.model
    for op in ops:
        if op in LINEAR_OPS or op in ELEMENTWISE_OPS:
            for tp in shapes_by_tp:
                points += [Point(op, tp=tp, num_tokens=t) for t in tokens]
        elif op == ATTN_PREFILL:
            for tp in shapes_by_tp:
                points += [Point(op, tp=tp, num_tokens=c, batch_size=1, chunk_size=c, kv_context=k, backend=be)
                           for c, k in prefill_grid(max_tokens, model.max_model_len, quick)
                           for be in attention_backends]
        elif op == ATTN_DECODE:
            # One draw of the mixed batches, shared by every TP degree.
            lens_list = decode_grid(model.max_model_len, rng, quick)
            for tp in shapes_by_tp:
                points += [Point(op, tp=tp, num_tokens=len(lens), batch_size=len(lens), context_lens=lens,
                                 backend=be)
                           for lens in lens_list for be in attention_backends]
        elif op in COMM_OPS:
            for ws in world_sizes:
                if op == SEND_RECV and ws != 2:
                    continue  # point-to-point between two pipeline neighbours
                for t in comm_token_grid(max_tokens, quick):
                    nbytes = t * model.hidden_size * dtype_bytes
                    points.append(Point(op, num_tokens=t, message_bytes=nbytes, world_size=ws, backend=comm_backend))
        else:  # pragma: no cover - ops are validated before
            raise AssertionError(op)
    return points
