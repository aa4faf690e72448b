"""Token-budget calibration: Sarathi-Serve's offline choice of tau.

A Sarathi iteration carries every running decode plus prefill chunks up to the token
budget tau, so one iteration's time is the TBT of every decoding request. tau is picked
offline from the cost of such *hybrid* iterations: the largest budget whose predicted
iteration time, with the decode batch the workload brings, still fits the TBT SLO.

The hybrid iteration priced for budget ``tau`` here is

- ``num_decodes`` decodes, each over a KV cache of ``decode_context`` tokens, and
- one prefill chunk of ``tau - num_decodes`` tokens that starts ``chunk_context`` tokens
  into its prompt (a chunk in the middle of a typical prompt),

Defaults come from the workload (a seeded sample of its request lengths):
``decode_context`` = mean of ``prompt + output / 2`` (a decode is on average half way
through its output), ``chunk_context`` = half the mean prompt, and ``num_decodes`` = the
largest decode batch the replica can hold for that workload:
``min(max_num_seqs, KV blocks / mean(blocks of prompt + output))`` (whole blocks of
``--block-size`` tokens, as the paged cache holds them). That is the worst case at high
load, so the chosen tau is safe there; pass smaller counts for a lighter operating point.

The *knee* is where the linear layers (QKV, output projection, MLP GEMMs) turn from
memory-bound (time flat in tokens: weights are read once whatever the batch) to
compute-bound (time linear in tokens). It is found from the cost model alone as the
point where the flat small-batch time meets the large-batch asymptote; throughput
(tokens/s) rises steeply up to it and saturates after, which is why a tau near the knee
gives both good TBT and good throughput.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from simulator.config.errors import ConfigError
from simulator.config.run_config import RunConfig
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape, CostModel

LINEAR_OPS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down")
# The largest token budget choose_tau considers: past any engine's iteration (vLLM's and SGLang's
# budgets are a few thousand to tens of thousands), and a grid it prices in about a second.
MAX_TAU_TOKENS = 1 << 20


@dataclass(frozen=True)
class DecodeMix:
    """The decode batch and chunk position a hybrid iteration is priced with."""

    num_decodes: int
    decode_context: int
    chunk_context: int
    source: str

    def __post_init__(self) -> None:
        if self.num_decodes < 0:
            raise ConfigError("tau.num_decodes", f"must be >= 0, got {self.num_decodes}")
        if self.decode_context < 1:
            raise ConfigError("tau.decode_context", f"must be >= 1, got {self.decode_context}")
        if self.chunk_context < 0:
            raise ConfigError("tau.chunk_context", f"must be >= 0, got {self.chunk_context}")


@dataclass
class TauResult:
    """Budget table and the chosen budget. ``tau`` is 0 when even the decodes alone miss the SLO."""

    config: RunConfig
    tbt_slo_s: float
    mix: DecodeMix
    tau: int
    knee_tokens: int
    reason: str
    table: pd.DataFrame = field(repr=False)

    def summary(self) -> dict[str, Any]:
        at = self.table.set_index("num_tokens")
        tau_row = at.loc[self.tau] if self.tau in at.index else None
        return {
            "tau": self.tau,
            "knee_tokens": self.knee_tokens,
            "tbt_slo_s": self.tbt_slo_s,
            "iteration_s_at_tau": float(tau_row["iteration_s"]) if tau_row is not None else math.nan,
            "throughput_tokens_per_s_at_tau": float(tau_row["throughput_tokens_per_s"]) if tau_row is not None else math.nan,
            "num_decodes": self.mix.num_decodes,
            "decode_context": self.mix.decode_context,
            "chunk_context": self.mix.chunk_context,
            "mix_source": self.mix.source,
            "reason": self.reason,
            "model": self.config.replica.model,
            "gpu": self.config.replica.gpu,
            "tp": self.config.replica.tp,
            "pp": self.config.replica.pp,
        }


def workload_mix(config: RunConfig, num_decodes: int | None = None, decode_context: int | None = None,
                 chunk_context: int | None = None, num_samples: int = 2048) -> DecodeMix:
    """The decode batch of ``config``'s workload (see the module docstring); given values win."""
    from simulator.engine.replica import build_scheduler
    from simulator.workload.generate import generate_requests

    if None not in (num_decodes, decode_context, chunk_context):  # the whole batch given: no workload read
        return DecodeMix(num_decodes=num_decodes, decode_context=decode_context, chunk_context=chunk_context,
                         source="the batch as given")
    workload = config.workload
    if workload.trace is None and workload.max_total_tokens is None:
        workload = _replace(workload, max_total_tokens=config.replica.effective_max_model_len)  # as the engine does
    workload = _replace(workload, num_requests=num_samples)
    if workload.arrival == "trace":
        workload = _replace(workload, arrival="poisson")  # only lengths matter here
    table = generate_requests(workload, np.random.default_rng(config.seed))
    prompt = np.asarray(table.num_prompt_tokens, dtype=np.float64)
    output = np.asarray(table.num_output_tokens, dtype=np.float64)
    limit = config.replica.effective_max_model_len
    fits = prompt + output <= limit  # (a trace's longer rows: the engine rejects them, no batch holds them)
    source = table.length_source or table.source
    if not fits.all():
        if not fits.any():
            raise ConfigError("workload", f"no request of {source} fits the {limit:,}-token context of "
                              f"{config.replica.model} (every one is longer)", "raise --max-model-len, or give the "
                              "batch with --num-decodes, --decode-context and --chunk-context")
        source += f"; {int((~fits).sum()):,} of {len(fits):,} drawn left out, longer than the {limit:,}-token context"
        prompt, output = prompt[fits], output[fits]
    chunk_context = int(round(np.mean(prompt) / 2)) if chunk_context is None else chunk_context
    if num_decodes is None:
        sched, plan = build_scheduler(config)
        # The cache is paged: a sequence holds whole blocks (its last one part-filled), and a
        # hybrid's also its recurrent state's blocks; the step's chunk and the tokens before it hold theirs too (a
        # cache filled with decodes left the chunk no room, and tau refused its own batch)
        blocks_per_seq = float(np.mean(np.ceil((prompt + output) / plan.block_size))) + plan.num_state_blocks
        chunk_blocks = math.ceil((chunk_context + 1) / plan.block_size) + plan.num_state_blocks
        num_decodes = int(min(sched.max_num_seqs, max(plan.num_blocks - chunk_blocks, 0) // max(blocks_per_seq, 1.0)))
    return DecodeMix(
        num_decodes=num_decodes,
        decode_context=int(round(np.mean(prompt + output / 2))) if decode_context is None else decode_context,
        chunk_context=chunk_context,
        # (the lengths only: the arrivals drawn beside them, "poisson 1 qps", are no part of a step's shape)
        source=source,
    )


def _replace(obj: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(obj, **changes)


def hybrid_shape(mix: DecodeMix, num_tokens: int) -> BatchShape:
    """The batch of a budget of ``num_tokens``: the decodes, then one chunk with the rest."""
    decodes = min(mix.num_decodes, num_tokens)
    chunk = num_tokens - decodes
    return BatchShape.from_requests(prefills=[(chunk, mix.chunk_context)] if chunk > 0 else [],
                                    decodes=[mix.decode_context] * decodes)


def linear_layer_time(cost: CostModel, tokens: np.ndarray) -> np.ndarray:
    """Seconds per layer of the linear ops (GEMMs) at each token count."""
    if hasattr(cost, "token_ops"):
        ops = cost.token_ops(tokens)
        return np.sum([ops[name] for name in LINEAR_OPS if name in ops], axis=0)
    # Any other cost model: the token-count ops of a shape that has tokens but no attention entries.
    return np.array([cost.layer_time(BatchShape(num_prefill_tokens=int(t))) for t in tokens])


def knee_tokens(cost: CostModel, max_tokens: int = 8192, flat_tokens: int = 1) -> int:
    """Token count where the flat (memory-bound) and linear (compute-bound) regimes of the
    linear layers meet: ``(T(f) - b) / s`` for the asymptote ``T(t) ~ s t + b``, where ``f`` (``flat_tokens``)
    is where the flat regime reads every weight: one token for a dense model; for an MoE the tokens whose
    routing touches 95% of the experts (one token reads only its top-k experts, and the line through the
    compute-bound end passed above that cost: every MoE's knee came out 1)."""
    hi = max(64, max_tokens, 4 * flat_tokens)
    grid = np.array([min(flat_tokens, hi // 2), hi // 2, hi])
    t1, t_half, t_hi = linear_layer_time(cost, grid)
    slope = (t_hi - t_half) / (hi - hi // 2)
    if slope <= 0:
        return hi  # never leaves the memory-bound regime within the grid
    intercept = t_hi - slope * hi
    if intercept >= t1:
        # The compute-bound end is concave (measured GEMMs keep gaining efficiency up to thousands of tokens), so its
        # asymptote starts above the flat cost and meets it nowhere: the ridge of max(flat, per-token cost at the
        # end) instead, where the end's average cost a token reaches the flat cost (FP8 Llama-3.1-70B over
        # vLLM's H100 tables: 1 -> a few hundred tokens).
        return int(max(1, flat_tokens, round(t1 * hi / t_hi)))
    # (not below flat_tokens: short of it an MoE's cost still grows with the experts it reads, not its compute)
    return int(max(1, flat_tokens, round((t1 - intercept) / slope)))


def choose_tau(config: RunConfig, tbt_slo_s: float, mix: DecodeMix | None = None, max_tokens: int = 8192,
               step: int = 16) -> TauResult:
    """Largest budget (any integer up to ``max_tokens``) whose hybrid iteration fits ``tbt_slo_s``."""
    if not (math.isfinite(tbt_slo_s) and tbt_slo_s > 0):
        raise ConfigError("--tbt-slo", f"must be a positive number of seconds, got {tbt_slo_s}", "e.g. --tbt-slo 0.1")
    if not 16 <= max_tokens <= MAX_TAU_TOKENS:  # the grid is priced every 16 tokens: a huge bound never ends
        raise ConfigError("--max-tokens", f"must be in [16, {MAX_TAU_TOKENS:,}], got {max_tokens:,}",
                          "e.g. --max-tokens 8192")
    mix = mix or workload_mix(config)
    cost = load_cost_model(config.cost_model, config.replica, config.engine)
    grid = np.unique(np.concatenate([np.arange(step, max_tokens + 1, step), [1, max(1, mix.num_decodes), max_tokens]]))
    iteration = np.array([cost.iteration_time(hybrid_shape(mix, int(t))) for t in grid])
    linear = linear_layer_time(cost, grid) * config.replica.model_spec.num_layers

    def fits(tokens: int) -> bool:
        return cost.iteration_time(hybrid_shape(mix, tokens)) <= tbt_slo_s

    floor = max(1, mix.num_decodes)
    if not fits(floor):
        tau = 0
        reason = (f"even the {mix.num_decodes} decodes alone take "
                  f"{cost.iteration_time(hybrid_shape(mix, floor)) * 1e3:.1f} ms > SLO {tbt_slo_s * 1e3:g} ms: "
                  "lower max_num_seqs or use a faster layout")
    elif fits(max_tokens):
        tau = max_tokens
        reason = f"every budget up to max_tokens={max_tokens} fits; raise --max-tokens to look further"
    else:
        lo, hi = floor, max_tokens  # fits(lo), not fits(hi); the cost model is monotone in tokens
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        tau = lo
        reason = f"largest budget with predicted iteration time <= {tbt_slo_s * 1e3:g} ms"
    table = pd.DataFrame({
        "num_tokens": grid.astype(np.int64),
        "num_decodes": np.minimum(mix.num_decodes, grid).astype(np.int64),
        "num_prefill_tokens": np.maximum(grid - mix.num_decodes, 0).astype(np.int64),
        "iteration_s": iteration,
        "throughput_tokens_per_s": grid / iteration,
        "linear_layers_s": linear,
        "linear_tokens_per_s": grid / linear,
    })
    if tau and tau not in set(table["num_tokens"]):
        extra = pd.DataFrame({
            "num_tokens": [tau], "num_decodes": [min(mix.num_decodes, tau)],
            "num_prefill_tokens": [max(tau - mix.num_decodes, 0)],
            "iteration_s": [cost.iteration_time(hybrid_shape(mix, tau))],
            "linear_layers_s": [float(linear_layer_time(cost, np.array([tau]))[0]) * config.replica.model_spec.num_layers],
        })
        extra["throughput_tokens_per_s"] = extra["num_tokens"] / extra["iteration_s"]
        extra["linear_tokens_per_s"] = extra["num_tokens"] / extra["linear_layers_s"]
        table = pd.concat([table, extra[table.columns]]).sort_values("num_tokens", ignore_index=True)
    # The knee is the model's and GPU's, not the search's: fitted on the default grid whatever --max-tokens bounds
    # (a bound of 256 or less left both fitting points memory-bound and the knee at 1 token).
    spec = config.replica.model_spec
    # (each token picks top-k of E experts: t tokens leave an expert untouched with probability (1 - k/E)^t)
    share = spec.num_experts_per_tok / spec.num_experts if spec.num_experts else 1.0
    flat = 1 if share >= 1 else math.ceil(math.log(0.05) / math.log(1.0 - share))
    return TauResult(config, tbt_slo_s, mix, tau, knee_tokens(cost, flat_tokens=flat), reason, table)
