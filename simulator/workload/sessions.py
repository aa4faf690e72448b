"""Traffic that shares prefixes: multi-turn conversations and agent loops, with block hash ids.

A *session* is one user's conversation or one agent's run. Its context is an append-only token
stream: a prefix shared by every session (the system prompt, or an agent's tool definitions),
then the session's own first context (the first user message; an agent's task and files), then,
turn after turn, the model's answer and the next new tokens (the user's next message; the
result of the tool the agent called). Each request's prompt is the whole stream so far, so turn
``k`` resends everything turns ``1..k-1`` sent and received: this is the reuse a prefix cache
sees in chat and agent traffic.

Block hash ids (:mod:`simulator.engine.prefix_cache` reads them as a trace's): the stream is cut
into ``hash_block_size`` blocks, full blocks only (as the Weka sessions); a block wholly inside
the shared prefix has the same id in every session, any other block an id of its own session and
position. Since the stream is append-only, equal id means equal tokens from the start, as the
engine's names require.

Timing. Sessions start as a Poisson process of ``session_rate`` per second (``inf``: all at 0).
Between a turn's answer and the next request the user thinks (or the tool runs): exponential
with mean ``think_mean_s``. Two ways to replay that:

- **closed** (``closed=True``, the default): a session's next request is sent ``think_s`` after
  its previous one *finished* (:mod:`simulator.engine.sessions`; the table's ``think_s`` column
  holds the delays and its ``arrival_at`` of later turns are placeholders, the open-loop times
  below). This is how a user or an agent behaves: the load follows the server's speed.
- **open**: turn ``k+1`` arrives ``think_s`` after turn ``k`` *arrived*, whatever the server does
  (a replay of recorded times, as the traces' timestamps are).

Lengths. Conversations: new user messages lognormal (median ``turn_tokens_median``, log-sigma
``turn_tokens_sigma``; our choice, stated, for short chat messages) and answers drawn from the
built-in ShareGPT output marginal (Sarathi-Serve's openchat_sharegpt4 histogram: median 416,
P90 836); turns per session geometric with mean ``mean_turns``. Agents: a long first context
(task and files), many short calls (answers lognormal around ``output_tokens_median``: a tool
call), each followed by a tool result of ``turn_tokens_median`` tokens and ``think_mean_s`` of
tool time. A session ends at its last turn or when the next prompt would pass
``max_prompt_tokens`` (the model's context), whichever comes first.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.config.errors import ConfigError
from simulator.workload.generate import RequestTable, _builtin_sampler

SESSION_KINDS = ("conversation", "agent")
# Session-local block ids live above this many shared ids and are session * _MAX_BLOCKS + block:
# unique while a session's stream has fewer than 2**24 blocks (10**9 tokens at 64).
_MAX_BLOCKS = 1 << 24


@dataclass(frozen=True)
class SessionTraffic:
    """How to draw session traffic (see the module docstring). Validated on construction."""

    kind: str = "conversation"
    num_sessions: int = 100
    session_rate: float = 1.0  # sessions started per second (Poisson); inf: all at t = 0
    mean_turns: float = 5.0  # requests per session, geometric (>= 1)
    shared_prefix_tokens: int = 0  # system prompt / tool definitions, the same in every session
    first_tokens_median: int = 100  # the session's own first context
    first_tokens_sigma: float = 1.0
    turn_tokens_median: int = 100  # new tokens of each later turn (user message, tool result)
    turn_tokens_sigma: float = 1.0
    output_tokens_median: int = 0  # 0: ShareGPT answers (conversation); else lognormal (agents' short calls)
    output_tokens_sigma: float = 0.7
    think_mean_s: float = 10.0  # mean think / tool time before each later turn (exponential)
    max_prompt_tokens: int = 32_768
    hash_block_size: int = 64
    closed: bool = True

    def __post_init__(self) -> None:
        if self.kind not in SESSION_KINDS:
            raise ConfigError("sessions.kind", f"unknown kind {self.kind!r}", f"use one of {', '.join(SESSION_KINDS)}")
        for name in ("num_sessions", "first_tokens_median", "turn_tokens_median", "max_prompt_tokens",
                     "hash_block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"sessions.{name}", f"must be a positive integer, got {value!r}")
        if self.shared_prefix_tokens < 0 or self.output_tokens_median < 0:
            raise ConfigError("sessions.shared_prefix_tokens", "token counts must be >= 0")
        if not self.session_rate > 0:
            raise ConfigError("sessions.session_rate", f"must be > 0 (inf: all at once), got {self.session_rate!r}")
        if not self.mean_turns >= 1 or not np.isfinite(self.mean_turns):
            raise ConfigError("sessions.mean_turns", f"must be a finite number >= 1, got {self.mean_turns!r}")
        if not self.think_mean_s >= 0 or not np.isfinite(self.think_mean_s):
            raise ConfigError("sessions.think_mean_s", f"must be a finite number >= 0, got {self.think_mean_s!r}")
        for name in ("first_tokens_sigma", "turn_tokens_sigma", "output_tokens_sigma"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"sessions.{name}", "must be >= 0")
        if self.shared_prefix_tokens + 1 >= self.max_prompt_tokens:
            raise ConfigError("sessions.shared_prefix_tokens", "the shared prefix fills max_prompt_tokens",
                              "shorten it or raise max_prompt_tokens")


def conversations(num_sessions: int = 100, **kwargs: object) -> SessionTraffic:
    """Chat users: a 1,000-token system prompt shared by all, ~5 turns, 30 s of reading and
    typing between turns (our defaults, stated)."""
    base = dict(kind="conversation", num_sessions=num_sessions, shared_prefix_tokens=1_000, mean_turns=5.0,
                first_tokens_median=150, turn_tokens_median=100, think_mean_s=30.0)
    return SessionTraffic(**{**base, **kwargs})  # type: ignore[arg-type]


def agents(num_sessions: int = 20, **kwargs: object) -> SessionTraffic:
    """Agent loops: 8,000 tokens of tool definitions and system prompt shared by all, a
    10,000-token task context, ~30 short calls (~150-token tool calls), each followed by a
    ~400-token tool result after ~2 s of tool time (our defaults, in the range of the Weka
    Claude Code sessions' README: long shared context, short calls, seconds of tool time)."""
    base = dict(kind="agent", num_sessions=num_sessions, shared_prefix_tokens=8_000, mean_turns=30.0,
                first_tokens_median=10_000, first_tokens_sigma=0.5, turn_tokens_median=400, turn_tokens_sigma=1.0,
                output_tokens_median=150, output_tokens_sigma=0.7, think_mean_s=2.0, max_prompt_tokens=65_536)
    return SessionTraffic(**{**base, **kwargs})  # type: ignore[arg-type]


def _lognormal(rng: np.random.Generator, median: int, sigma: float, k: int) -> np.ndarray:
    return np.maximum(np.rint(median * np.exp(sigma * rng.standard_normal(k))), 1).astype(np.int64)


def block_ids(session: int, num_tokens: int, shared_tokens: int, block_size: int) -> np.ndarray:
    """Hash ids of the full blocks of a session's first ``num_tokens`` stream tokens: blocks
    wholly inside the shared prefix are ``0..``, the rest are the session's own."""
    n = num_tokens // block_size
    ids = np.arange(n, dtype=np.int64)
    num_shared = shared_tokens // block_size  # blocks ending within the shared prefix
    own = ids >= num_shared
    ids[own] += _MAX_BLOCKS * (session + 1)
    return ids


def generate_sessions(traffic: SessionTraffic, rng: np.random.Generator) -> RequestTable:
    """A request table of session traffic: rows in arrival order (ties by session, then turn),
    ``session_id`` per row, block hash ids per prompt, and (closed loop) ``think_s``."""
    t = traffic
    n_s = t.num_sessions
    starts = np.zeros(n_s) if np.isinf(t.session_rate) else np.cumsum(rng.exponential(1.0 / t.session_rate, n_s))
    turns = rng.geometric(1.0 / t.mean_turns, n_s) if t.mean_turns > 1 else np.ones(n_s, dtype=np.int64)
    first = _lognormal(rng, t.first_tokens_median, t.first_tokens_sigma, n_s)
    total = int(turns.sum())
    news = _lognormal(rng, t.turn_tokens_median, t.turn_tokens_sigma, total)
    if t.output_tokens_median:
        outs = _lognormal(rng, t.output_tokens_median, t.output_tokens_sigma, total)
    else:
        sampler, _limit, _label = _builtin_sampler("sharegpt")
        outs = sampler.sample(total, rng)[1]
    thinks = rng.exponential(t.think_mean_s, total) if t.think_mean_s > 0 else np.zeros(total)
    rows_at, rows_session, rows_turn, rows_prompt, rows_out, rows_think, rows_ids = [], [], [], [], [], [], []
    k = 0
    cut = 0
    for s in range(n_s):
        stream = t.shared_prefix_tokens + int(first[s])
        at = float(starts[s])
        for turn in range(int(turns[s])):
            i = k + turn
            if turn:
                stream += int(news[i])
                at += float(thinks[i])
            out = int(outs[i])
            if stream + out > t.max_prompt_tokens:
                if turn == 0:  # the first context alone is too long: cut it to fit
                    out = min(out, t.max_prompt_tokens // 4)
                    stream = t.max_prompt_tokens - out
                    cut += 1
                else:
                    break  # the session ends at the context limit
            rows_at.append(at)
            rows_session.append(s)
            rows_turn.append(turn)
            rows_prompt.append(stream)
            rows_out.append(out)
            rows_think.append(float(thinks[i]) if turn else np.nan)
            rows_ids.append(block_ids(s, stream, t.shared_prefix_tokens, t.hash_block_size))
            stream += out  # the answer joins the context of the next turn
        k += int(turns[s])
    at = np.asarray(rows_at)
    order = np.lexsort((np.asarray(rows_turn), np.asarray(rows_session), at))
    mode = "closed loop: a turn is sent think time after the previous answer" if t.closed else \
        "open loop: a turn arrives think time after the previous one arrived"
    prompts = np.asarray(rows_prompt, dtype=np.int64)[order]
    desc = (f"{t.kind} sessions: {n_s} sessions, {len(order)} requests, shared prefix {t.shared_prefix_tokens} "
            f"tokens, think {t.think_mean_s:g} s, {mode}; prompt mean {prompts.mean():.0f} tokens"
            + (f"; {cut} first contexts cut to fit" if cut else ""))
    return RequestTable(at[order], prompts, np.asarray(rows_out, dtype=np.int64)[order], desc,
                        block_hashes=tuple(rows_ids[i] for i in order.tolist()), hash_block_size=t.hash_block_size,
                        session_id=np.asarray(rows_session, dtype=np.int64)[order],
                        think_s=np.asarray(rows_think)[order] if t.closed else None)
