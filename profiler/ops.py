"""Real torch kernels for each compute op, on the shapes one TP rank runs.

:func:`make_case` turns a :class:`~profiler.grid.Point` into an :class:`OpCase`: a
closure that runs the op on preallocated tensors, plus the op's useful FLOPs and bytes
(for achieved throughput and the ``suspect`` check). All tensors are allocated once per
point, outside the timed region; a linear op's weight may be reused from the previous
point of the same shape (``weights``, a cache the caller owns): its values do not change
the timing, and drawing a 32000 x 2048 weight per point cost more than timing it on CPU.

* linear ops: ``torch.nn.functional.linear`` on ``[T, K]`` activations and an
  ``[N, K]`` weight (bytes: weight + input + output, each once);
* elementwise: RMSNorm/LayerNorm (``num_norms`` calls), SiLU-and-mul or GeLU, rotary
  embedding (NeoX style on Q and K), the layer's two residual adds, and the embedding
  lookup on a vocab shard;
* attention with ``torch.nn.functional.scaled_dot_product_attention`` (GQA via
  ``enable_gqa``): prefill chunks attend causally with the mask aligned bottom-right
  (query ``i`` sees ``kv_context + i + 1`` keys); decode batches pad K/V to the longest
  sequence and mask the padding. With ``flash_attn`` importable on CUDA, the same
  points are also timed with ``flash_attn_func`` / ``flash_attn_with_kvcache`` (true
  variable-length KV, no padding) as backend ``flash_attn``.

FLOPs and bytes come from :mod:`profiler.work` (shared with the importer).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

from profiler.grid import Point
from profiler.schema import ATTN_DECODE, ATTN_PREFILL, EMBEDDING, LINEAR_OPS, MLP_ACT, NORMS, RESIDUAL_ADD, ROTARY
from profiler.shapes import ShardedShapes
from profiler.work import decode_work, linear_work, prefill_work, token_op_work

# Activation dtypes by profile dtype. ``fp8`` is a deployment's: the linear layers multiply FP8 (e4m3)
# weights and activations (per-tensor scales, bf16 out; the activations' quantisation not timed), and
# every other op runs in bf16.
ACTIVATION_DTYPE = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "fp8": "bfloat16"}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 2}  # the activations' bytes
ATTENTION_BACKENDS = ("sdpa", "flash_attn")


@dataclass
class OpCase:
    """A ready-to-time op: ``fn()`` does the work; ``flops``/``bytes`` its useful work."""

    fn: Callable[[], object]
    flops: float
    bytes: float
    num_calls: int = 1


def torch_dtype(name: str):  # noqa: ANN201 - torch is imported lazily
    import torch

    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[ACTIVATION_DTYPE[name]]


def op_dtype(op: str, dtype: str) -> str:
    """The dtype an op of a ``dtype`` profile runs in (its rows' ``dtype`` column)."""
    return dtype if op in LINEAR_OPS else ACTIVATION_DTYPE[dtype]


def available_attention_backends(device: str) -> list[str]:
    """``sdpa`` always; ``flash_attn`` on CUDA when the package is importable."""
    backends = ["sdpa"]
    if device == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        backends.append("flash_attn")
    return backends


def make_case(point: Point, shapes: ShardedShapes, dtype: str, device: str, backend: str = "sdpa",
              weights: dict | None = None) -> OpCase:
    """``weights``: an optional dict the caller keeps across points; it holds the last linear weight."""
    dt = torch_dtype(dtype)
    db = DTYPE_BYTES[dtype]
    op = point.op
    if op in LINEAR_OPS and dtype == "fp8":
        t, (k, n) = point.num_tokens, shapes.linear_shape(op)
        fn = _linear_fp8(t, k, n, device, weights)
        w = linear_work(t, k, n, 1, out_db=2)  # 1-byte weights and inputs, bf16 out
    elif op in LINEAR_OPS:
        fn = _linear(point.num_tokens, *shapes.linear_shape(op), dt, device, weights)
        w = token_op_work(op, point.num_tokens, shapes, db)
    elif op in (NORMS, MLP_ACT, ROTARY, RESIDUAL_ADD, EMBEDDING):
        fn = _elementwise(op, point.num_tokens, shapes, dt, device, weights)
        w = token_op_work(op, point.num_tokens, shapes, db)
    elif op == ATTN_PREFILL:
        fn = _prefill(point, shapes, dt, device, backend)
        w = prefill_work(point.batch_size, point.chunk_size, point.kv_context, shapes, db)
    elif op == ATTN_DECODE:
        fn = _decode(point, shapes, dt, device, backend)
        w = decode_work(point.context_lens, shapes, db)
    else:
        raise ValueError(f"not a compute op: {op}")
    return OpCase(fn, w.flops, w.bytes, w.num_calls)


def _linear(t: int, k: int, n: int, dt, device: str, weights: dict | None = None) -> Callable[[], object]:  # noqa: ANN001
    import torch
    import torch.nn.functional as F

    x = torch.randn(t, k, dtype=dt, device=device)
    w = _weight(n, k, dt, device, weights)
    return lambda: F.linear(x, w)


def _linear_fp8(t: int, k: int, n: int, device: str, weights: dict | None = None) -> Callable[[], object]:
    """``[t, k] x [k, n]`` in FP8 e4m3 with per-tensor scales (cuBLASLt on Hopper and later)."""
    import torch

    fp8 = torch.float8_e4m3fn
    x = torch.randn(t, k, device=device).to(fp8)
    w = _weight(n, k, fp8, device, weights)  # [n, k] row-major: its transpose is the column-major mat2
    one = torch.ones((), dtype=torch.float32, device=device)
    return lambda: torch._scaled_mm(x, w.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def _weight(n: int, k: int, dt, device: str, weights: dict | None):  # noqa: ANN001, ANN202
    """An ``[n, k]`` weight, from ``weights`` when the previous point drew one of that shape."""
    import torch

    key = (n, k, dt, device)
    w = weights.get(key) if weights is not None else None
    if w is None:
        w = (torch.randn(n, k, device=device) * k ** -0.5).to(dt)  # drawn in fp32: randn has no FP8
        if weights is not None:
            weights.clear()  # one weight alive at a time: memory stays that of one point
            weights[key] = w
    return w


def _elementwise(op: str, t: int, s: ShardedShapes, dt, device: str,  # noqa: ANN001
                 weights: dict | None = None) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F

    h = s.hidden
    if op == NORMS:
        x = torch.randn(t, h, dtype=dt, device=device)
        w = torch.ones(h, dtype=dt, device=device)
        b = torch.zeros(h, dtype=dt, device=device)
        n = s.num_norms
        if s.model.norm == "layernorm":
            def norm() -> object:
                return F.layer_norm(x, (h,), w, b, 1e-5)
        else:
            def norm() -> object:
                return F.rms_norm(x, (h,), w, 1e-6)

        def run() -> None:
            for _ in range(n):
                norm()
        return run
    if op == MLP_ACT:
        f = s.ffn
        if s.model.gated_mlp:
            x = torch.randn(t, 2 * f, dtype=dt, device=device)
            act = F.silu if s.model.activation == "silu" else (lambda v: F.gelu(v, approximate="tanh"))

            def run() -> object:
                return act(x[:, :f]) * x[:, f:]
            return run
        x = torch.randn(t, f, dtype=dt, device=device)
        return lambda: F.gelu(x, approximate="tanh")
    if op == ROTARY:
        d = s.head_dim
        q = torch.randn(t, s.heads, d, dtype=dt, device=device)
        k = torch.randn(t, s.kv_heads, d, dtype=dt, device=device)
        pos = torch.arange(t, device=device, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        ang = torch.outer(pos, inv)
        cos, sin = ang.cos().to(dt)[:, None, :], ang.sin().to(dt)[:, None, :]

        def rope(x):  # noqa: ANN001, ANN202
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

        def run() -> object:
            return rope(q), rope(k)
        return run
    if op == RESIDUAL_ADD:
        x = torch.randn(t, h, dtype=dt, device=device)
        y = torch.randn(t, h, dtype=dt, device=device)
        z = torch.randn(t, h, dtype=dt, device=device)

        def run() -> object:
            return (x + y) + z  # the two residual adds of a layer
        return run
    if op == EMBEDDING:
        w = _weight(s.vocab, h, dt, device, weights)
        ids = torch.randint(0, s.vocab, (t,), device=device)
        return lambda: F.embedding(ids, w)
    raise ValueError(op)


def _prefill(p: Point, s: ShardedShapes, dt, device: str, backend: str) -> Callable[[], object]:  # noqa: ANN001
    import torch
    import torch.nn.functional as F

    b, c, k_ctx, d = p.batch_size, p.chunk_size, p.kv_context, s.head_dim
    keys = k_ctx + c
    if backend == "flash_attn":
        from flash_attn import flash_attn_func

        q = torch.randn(b, c, s.heads, d, dtype=dt, device=device)
        kk = torch.randn(b, keys, s.kv_heads, d, dtype=dt, device=device)
        vv = torch.randn(b, keys, s.kv_heads, d, dtype=dt, device=device)
        # flash-attn >= 2.1 aligns the causal mask bottom-right, as chunked prefill needs.
        return lambda: flash_attn_func(q, kk, vv, causal=True)
    q = torch.randn(b, s.heads, c, d, dtype=dt, device=device)
    kk = torch.randn(b, s.kv_heads, keys, d, dtype=dt, device=device)
    vv = torch.randn(b, s.kv_heads, keys, d, dtype=dt, device=device)
    gqa = s.heads != s.kv_heads
    if k_ctx == 0:
        def run() -> object:
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True, enable_gqa=gqa)
    else:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(c, keys)
        if gqa:  # CausalBias does not forward enable_gqa everywhere: expand K/V heads once.
            rep = s.heads // s.kv_heads
            kk, vv = kk.repeat_interleave(rep, dim=1), vv.repeat_interleave(rep, dim=1)

        def run() -> object:
            return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
    return run


def _decode(p: Point, s: ShardedShapes, dt, device: str, backend: str) -> Callable[[], object]:  # noqa: ANN001
    import torch
    import torch.nn.functional as F

    lens = p.context_lens
    b, lmax, d = len(lens), max(lens), s.head_dim
    if backend == "flash_attn":
        from flash_attn import flash_attn_with_kvcache

        q = torch.randn(b, 1, s.heads, d, dtype=dt, device=device)
        kc = torch.randn(b, lmax, s.kv_heads, d, dtype=dt, device=device)
        vc = torch.randn(b, lmax, s.kv_heads, d, dtype=dt, device=device)
        seqlens = torch.tensor(lens, dtype=torch.int32, device=device)
        return lambda: flash_attn_with_kvcache(q, kc, vc, cache_seqlens=seqlens)
    q = torch.randn(b, s.heads, 1, d, dtype=dt, device=device)
    kk = torch.randn(b, s.kv_heads, lmax, d, dtype=dt, device=device)
    vv = torch.randn(b, s.kv_heads, lmax, d, dtype=dt, device=device)
    gqa = s.heads != s.kv_heads
    mask = None
    if min(lens) != lmax:  # mixed lengths: mask each sequence's padding
        lengths = torch.tensor(lens, device=device)
        mask = (torch.arange(lmax, device=device)[None, :] < lengths[:, None])[:, None, None, :]

    def run() -> object:
        return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, enable_gqa=gqa)
    return run
