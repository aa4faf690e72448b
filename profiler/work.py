"""Useful work of each op: FLOPs, bytes moved and kernel calls, without torch.

Shared by the kernels we time (:mod:`profiler.ops`) and the importer
(:mod:`profiler.vidur_import`), so achieved throughput and the ``suspect`` flag mean
the same for measured and imported rows. Multiply-adds count as two FLOPs; bytes are
each operand read or written once (the lower bound a kernel can reach); attention
counts only causal / unpadded query-key pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from profiler.schema import (
    ALL_GATHER,
    ALL_REDUCE,
    EMBEDDING,
    LINEAR_OPS,
    MLP_ACT,
    NORMS,
    RESIDUAL_ADD,
    ROTARY,
    SEND_RECV,
)
from profiler.shapes import ShardedShapes


@dataclass(frozen=True)
class Work:
    flops: float
    bytes: float
    num_calls: int = 1


def linear_work(t: int, k: int, n: int, db: int, out_db: int | None = None) -> Work:
    """``[t, k] x [k, n]``: weights and inputs of ``db`` bytes, the output of ``out_db`` (default ``db``)."""
    return Work(2.0 * t * k * n, float((k * n + t * k) * db + t * n * (db if out_db is None else out_db)))


def token_op_work(op: str, t: int, s: ShardedShapes, db: int) -> Work:
    """Work of a linear or elementwise op over ``t`` tokens on one TP rank."""
    h = s.hidden
    if op in LINEAR_OPS:
        return linear_work(t, *s.linear_shape(op), db)
    if op == NORMS:
        n = s.num_norms
        return Work(n * 4.0 * t * h, float(n * (2 * t * h + h) * db), n)
    if op == MLP_ACT:
        f = s.ffn
        if s.model.gated_mlp:
            return Work(5.0 * t * f, float(3 * t * f * db))
        return Work(8.0 * t * f, float(2 * t * f * db))
    if op == ROTARY:
        width = (s.heads + s.kv_heads) * s.head_dim
        return Work(3.0 * t * width, float((2 * t * width + t * s.head_dim) * db))
    if op == RESIDUAL_ADD:
        return Work(2.0 * t * h, float(2 * 3 * t * h * db), 2)
    if op == EMBEDDING:
        return Work(0.0, float(2 * t * h * db + 8 * t))
    raise ValueError(f"not a token op: {op}")


def prefill_work(batch: int, chunk: int, kv_context: int, s: ShardedShapes, db: int) -> Work:
    keys = kv_context + chunk
    pairs = batch * (chunk * kv_context + chunk * (chunk + 1) / 2)
    d = s.head_dim
    return Work(4.0 * s.heads * d * pairs, float((2 * batch * chunk * s.heads * d + 2 * batch * keys * s.kv_heads * d) * db))


def decode_work(context_lens: tuple[int, ...] | list[int], s: ShardedShapes, db: int) -> Work:
    total, b, d = sum(context_lens), len(context_lens), s.head_dim
    return Work(4.0 * s.heads * d * total, float((2 * total * s.kv_heads * d + 2 * b * s.heads * d) * db))


def comm_work(op: str, message_bytes: float, world_size: int) -> Work:
    """Bus bytes in the NCCL-tests convention, so bandwidth compares across ops and sizes."""
    factor = {ALL_REDUCE: 2 * (world_size - 1) / world_size, ALL_GATHER: (world_size - 1) / world_size,
              SEND_RECV: 1.0}[op]
    return Work(0.0, float(message_bytes) * factor)

