"""Learned cost model: fitted profile curves, evaluated by table lookup.

``simulate fit`` (:mod:`simulator.calibrate.fit`) writes a JSON artifact with, per op, a
monotone piecewise-linear curve over token count (or message bytes for collectives), a
per-batch-size table of decode-attention coefficients and a linear model for prefill
attention. :func:`load_artifact` checks that the artifact is for the run's replica
(model, TP; GPU: under attention data parallelism, one rank's TP, whose attention and dense
layers the curves price per rank while the MoE layers see the whole DP group's tokens, as
:mod:`simulator.costmodel.moe` prices them) and builds a :class:`LearnedCostModel`, which at load time

- sums every per-layer token op onto one dense table ``0..max_tokens`` (ops the artifact
  lacks come from the calibrated roofline for the same replica, so a Vidur ``mlp.csv``
  alone still gives a complete model), likewise for embedding and LM head;
- keeps decode attention as two lists ``a[n]``, ``b[n]`` and prefill attention as a few
  coefficients.

So one iteration costs three list lookups, one square root and a handful of
multiplications: no regression ``predict`` in the hot loop.

**Out of range.** Past the largest token count, batch size or context length the profiles
cover, curves continue linearly (slope of the top quarter of the fitted range, see
:class:`~simulator.costmodel.learned_schema.Curve`), the decode coefficients likewise, and the prefill
model is linear anyway. Every call that needed such an extrapolation increments
``num_extrapolations`` (per op in ``extrapolations_by_op``), which the engine reports in the
run summary: the numbers are a documented guess, never a silent one.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from simulator.config.errors import ConfigError
from simulator.config.json_types import loads_once
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel.base import BatchShape, TabulatedCostModel
from simulator.costmodel.learned_schema import CURVE_OPS, FORMAT_VERSION, Curve, DecodeModel, PrefillModel
from simulator.costmodel.moe import routed_experts, uses_moe_collectives
from simulator.costmodel.roofline import PP_HOP_VECTORS, TOKEN_OPS, RooflineCostModel

MIN_TABLE_TOKENS = 16384
# The weight GEMMs among the learned ops: a curve of these was timed at the profile's weights (16-bit, or FP8
# per-tensor for a --dtype fp8 profile; float32 on a CPU stands for 16-bit: the CPU path's own device).
LINEAR_OPS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down", "lm_head")
# profiler.runner.DTYPES, named here since that module loads pandas, which a run's artifact never needs (a test
# checks the two agree)
PROFILE_DTYPES = ("bfloat16", "float16", "float32", "fp8")


def read_artifact(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = loads_once(path.read_text(), str(path))
    except (OSError, ValueError) as exc:
        raise ConfigError("cost_model", f"{path} is not a readable cost-model artifact ({type(exc).__name__})",
                          "pass a file written by `simulate fit`") from None
    if not isinstance(data, dict) or data.get("kind") != "servesim-learned-cost-model":
        raise ConfigError("cost_model", f"{path} is not a servesim cost-model artifact", "pass a file written by `simulate fit`")
    if data.get("format_version") != FORMAT_VERSION:
        raise ConfigError("cost_model", f"{path} has format_version {data.get('format_version')}, this build reads "
                          f"{FORMAT_VERSION}", "re-run `simulate fit` with this version")
    return data


def load_artifact(path: str | Path, replica: ReplicaConfig, engine: object = None) -> LearnedCostModel:
    """Load a fitted artifact for ``replica`` (``engine``: whose 'today' roofline constants price the ops
    it lacks); a model/TP/GPU mismatch is a ConfigError."""
    return LearnedCostModel(replica, read_artifact(path), source=str(path), engine=engine)


def same_model_file(a: Any, b: Any) -> bool:  # noqa: ANN401 - an artifact's value, of any JSON type
    """Whether two --model values name one config.json file (as typed from two folders, or resolved by the fit)."""
    from simulator.config.hf_config import is_path_like

    if not (isinstance(a, str) and isinstance(b, str) and is_path_like(a) and is_path_like(b)):
        return False
    def file_of(name: str) -> Path:
        path = Path(name).resolve(strict=True)
        return path / "config.json" if path.is_dir() else path  # (a model folder names its config.json)

    try:
        return file_of(a) == file_of(b)
    except OSError:
        return False



def learned_ops_of(artifact: dict[str, Any]) -> list[str]:
    """The ops an artifact prices by what it holds: its curves' names, then its attention models' (its own
    ``learned_ops`` list, edited by hand, could say otherwise)."""
    curves = artifact.get("curves") if isinstance(artifact.get("curves"), dict) else {}
    return [*curves, *(op for op in ("attn_decode", "attn_prefill") if op in artifact)]


def roofline_ops_of(learned: list[str], tp: int) -> list[str]:
    """The cost-model ops an artifact that learned ``learned`` (its curves' and attention models' names) leaves to
    the calibrated roofline."""
    ops = ["qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_act", "mlp_down", "norms", "rotary", "residual_add",
           "tp_all_reduce", "embedding", "attn_prefill", "attn_decode", "lm_head_sampling", "cpu_overhead", "send_recv"]
    covered = set(learned)
    if "all_reduce" in covered or tp == 1:
        covered.add("tp_all_reduce")
    if "lm_head" in covered:
        covered.add("lm_head_sampling")
    ops += ["moe_router", "moe_experts", "moe_act"]
    for learned_op, priced_op in (("moe_gate", "moe_router"), ("moe_expert_act", "moe_act")):
        if learned_op in covered:
            covered.add(priced_op)
    if {"moe_expert_up", "moe_expert_down"} <= covered:
        covered.add("moe_experts")
    return [op for op in ops if op not in covered]

class LearnedCostModel(TabulatedCostModel):
    """Cost model from fitted profile curves; same interface and contract as the roofline."""

    name = "learned"
    STRETCH_FORMS = frozenset({"decode-rms", "decode-terms"})  # rms where decode attention is fitted

    def __init__(self, replica: ReplicaConfig, artifact: dict[str, Any], source: str = "<memory>",
                 engine: object = None) -> None:
        super().__init__(replica)
        if not isinstance(artifact.get("tp"), int) or isinstance(artifact.get("tp"), bool):  # ("fitted for tp='1'")
            raise ConfigError("cost_model.tp", f"{source}: tp must be a whole number, got {artifact.get('tp')!r}",
                              "pass the artifact `simulate fit` wrote")
        for key, want in (("model", replica.model), ("tp", replica.tp), ("gpu", replica.gpu)):
            if artifact.get(key) != want and not (key == "model" and same_model_file(artifact.get(key), want)):
                raise ConfigError("cost_model", f"{source} was fitted for {key}={artifact.get(key)!r}, the run has "
                                  f"{key}={want}", f"fit an artifact for {key}={want} or use --cost-model roofline")
        if replica.model_spec.is_hybrid:  # the profiler times softmax attention only: every layer would be priced so
            raise ConfigError("cost_model", f"{replica.model} is a hybrid (Gated DeltaNet layers), which learned "
                              "profiles do not cover", "use --cost-model roofline or --kernels vllm|sglang|trtllm")
        if replica.model_spec.is_sparse_attention:  # (dense attention over every key, no indexer: priced so)
            raise ConfigError("cost_model", f"{replica.model} attends sparsely (DeepSeek Sparse Attention), which "
                              "learned profiles do not cover", "use --cost-model roofline or --kernels vllm|sglang|trtllm")
        # The profiles time 16-bit kernels (bf16/fp16 GEMMs over a 16-bit KV cache): an FP8/FP4/INT4 run's
        # weights or an FP8 cache would be priced at 16-bit speed by a learned curve, with only their memory
        # changed. (Ops the artifact leaves to the roofline price either format.)
        curves = artifact.get("curves", {})
        timed = artifact.get("gemm_dtype")  # the profiler's --dtype; None: a 16-bit table (Vidur, LLMServingSim)
        if timed is not None and timed not in PROFILE_DTYPES:
            raise ConfigError("cost_model", f"{source} has gemm_dtype {timed!r}",
                              f"pass a file written by `simulate fit` (gemm_dtype one of {', '.join(PROFILE_DTYPES)})")
        if timed == "fp8" and replica.dtype != "fp8" and any(op in curves for op in LINEAR_OPS):
            raise ConfigError("--dtype", f"{source} was fitted on FP8 GEMMs (a --dtype fp8 profile), and the run's "
                              f"weights are {replica.dtype}", "pass --dtype fp8, or fit a 16-bit profile")
        if timed != "fp8" and replica.dtype not in ("bf16", "fp16") and any(op in curves for op in LINEAR_OPS):
            raise ConfigError("--dtype", f"{source} was fitted on 16-bit kernels, and the run's weights are "
                              f"{replica.dtype}", "drop --dtype, or price it with --cost-model roofline or "
                              "--kernels vllm|sglang|trtllm")
        if replica.kv_cache_bytes != replica.dtype_bytes and "attn_decode" in artifact:
            raise ConfigError("--kv-cache-dtype", f"{source} was fitted over a 16-bit KV cache, and the run's is "
                              f"{replica.kv_cache_dtype}", "drop --kv-cache-dtype, or price it with --cost-model "
                              "roofline or --kernels vllm|sglang|trtllm")
        if artifact.get("dtype_bytes", 2) != replica.dtype_bytes:
            raise ConfigError("cost_model", f"{source} was fitted for dtype_bytes={artifact.get('dtype_bytes')}",
                              f"fit one for dtype_bytes={replica.dtype_bytes}")
        self.artifact = artifact
        self.source = source
        # The ops it leaves to the roofline get the constants a roofline run with this engine gets
        self.roofline = RooflineCostModel(replica, table_tokens=1, engine=engine)
        if "curves" not in artifact:  # (every op was priced by the roofline, the header saying they were learned)
            raise ConfigError("cost_model.curves", f"{source}: lacks curves", "pass the artifact `simulate fit` wrote")
        curves = artifact["curves"]
        if not isinstance(curves, dict):
            raise ConfigError("cost_model.curves", f"{source}: must map op names to curves, got {curves!r:.40}",
                              "pass the artifact `simulate fit` wrote")
        unknown = sorted(set(curves) - set(CURVE_OPS))
        if unknown:  # (a misspelt op's curve was never read: its op priced by the roofline without a word)
            raise ConfigError(f"cost_model.curves.{unknown[0]}", f"{source}: no op of that name",
                              f"ops: {', '.join(CURVE_OPS)}")
        part = "curves"
        try:  # an artifact edited by hand: a wrong shape or type is one line naming the part
            self.curves = {}
            for op, c in curves.items():
                part = f"curves.{op}"
                self.curves[op] = Curve.from_json(c)
            part = "attn_decode"
            self.decode = DecodeModel.from_json(artifact["attn_decode"]) if "attn_decode" in artifact else None
            part = "attn_prefill"
            self.prefill = PrefillModel.from_json(artifact["attn_prefill"]) if "attn_prefill" in artifact else None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = (f"lacks {exc}" if isinstance(exc, KeyError) else str(exc) if isinstance(exc, ValueError)
                    else "is not the shape `simulate fit` writes")
            raise ConfigError(f"cost_model.{part}", f"{source}: {what}", "pass the artifact `simulate fit` wrote") from None
        self.learned_ops = learned_ops_of(artifact)
        self.roofline_ops = roofline_ops_of(self.learned_ops, replica.tp)
        self.num_extrapolations = 0
        self.extrapolations_by_op: dict[str, int] = {}
        layer_ops = [op for op in TOKEN_OPS if op in self.curves]
        # Largest token count every learned token op covers (inf where nothing is learned).
        token_ranges = [self.curves[op].x_max for op in layer_ops + ["embedding"] if op in self.curves]
        self.max_fitted_tokens = min(token_ranges) if token_ranges else math.inf
        if "all_reduce" in self.curves:
            self.max_fitted_tokens = min(self.max_fitted_tokens, self.curves["all_reduce"].x_max / self._bytes_per_token)
        self.max_fitted_logits = self.curves["lm_head"].x_max if "lm_head" in self.curves else math.inf
        self._num_all_reduce = 1 if self.model.parallel_attn_mlp else 2
        if self.model.is_moe and uses_moe_collectives(replica):
            # As in the roofline: EP layers swap the MLP's all-reduce for all-to-alls and an
            # all-gather, attention-DP layers without EP for a gather and a scatter over the DP
            # group (the roofline's ``ep_all_to_all``, kept: no curve covers them).
            self._num_all_reduce -= self.model.num_moe_layers / self.model.num_layers
        if self.prefill is not None:
            p = self.prefill
            self._pre_intercept = p.intercept
            self._pre_coef = [(field, c) for field, c in p.coef.items() if c != 0.0]
        if self.decode is not None:
            self._dec_a = self.decode.a.tolist()
            self._dec_b = self.decode.b.tolist()
            self._dec_max_batch = self.decode.max_batch
        self._build_tables(max(MIN_TABLE_TOKENS, int(min(self.max_fitted_tokens, 1 << 20)) + 1))

    # -- tables ------------------------------------------------------------------------------------------
    @property
    def _bytes_per_token(self) -> float:
        return float(self.model.hidden_size * self.replica.dtype_bytes)

    def token_ops(self, tokens: np.ndarray) -> dict[str, np.ndarray]:
        """Per-layer time of each token op (learned where the artifact has it, else roofline)."""
        tokens = np.asarray(tokens, dtype=np.float64)
        out = self.roofline.token_ops(tokens)
        for op in TOKEN_OPS:
            if op in self.curves:
                out[op] = self.curves[op](tokens)
        if "all_reduce" in self.curves and self.replica.tp > 1:
            out["tp_all_reduce"] = self._num_all_reduce * self.curves["all_reduce"](tokens * self._bytes_per_token)
        if self.model.is_moe:
            self._moe_ops(tokens, out)
        return out

    def _moe_ops(self, tokens: np.ndarray, out: dict[str, np.ndarray]) -> None:
        """MoE layers from per-expert curves (LLMServingSim-style tables of whole experts, each a
        function of the tokens routed to that expert): the router curve at the rank's tokens;
        experts are placed as :mod:`simulator.costmodel.moe` places them
        (:func:`~simulator.costmodel.moe.routed_experts`): the routed experts see the MoE group's
        tokens (every attention-DP rank's, ``tokens * attention_dp``), a GPU holds ``touched / ep``
        of the touched experts, each a ``1 / moe_tp`` slice of a whole expert (``moe_tp = tp *
        attention_dp / ep`` GPUs share one), and runs its GEMMs (and activation) at the busiest
        expert's ``moe_imbalance * group * k / touched`` tokens; a slice costs the whole expert's
        curve over ``moe_tp`` (weights and FLOPs both scale with its width). Attention, the router
        and dense-MLP curves stay per rank; dense-MLP curves count only for the model's dense
        layers; ops without a curve (shared experts, the MoE collectives) stay with the roofline."""
        m, r = self.model, self.replica
        moe_share = m.num_moe_layers / m.num_layers
        for op in ("mlp_up_gate", "mlp_act", "mlp_down"):
            if op in self.curves:
                out[op] = (1.0 - moe_share) * self.curves[op](tokens)
        _, experts_here, per_expert = routed_experts(m, r, tokens)
        local = experts_here / r.moe_tp  # touched / ep experts here, each a 1/moe_tp slice
        if "moe_gate" in self.curves:
            out["moe_router"] = moe_share * np.where(tokens > 0, self.curves["moe_gate"](tokens), 0.0)
        if "moe_expert_up" in self.curves and "moe_expert_down" in self.curves:
            gemms = self.curves["moe_expert_up"](per_expert) + self.curves["moe_expert_down"](per_expert)
            out["moe_experts"] = moe_share * np.where(tokens > 0, local * gemms, 0.0)
        if "moe_expert_act" in self.curves:
            out["moe_act"] = moe_share * np.where(tokens > 0, local * self.curves["moe_expert_act"](per_expert), 0.0)

    def embedding_time(self, tokens: np.ndarray) -> np.ndarray:
        if "embedding" in self.curves:
            return self.curves["embedding"](tokens)
        return self.roofline.embedding_time(tokens)

    def lm_head_time(self, num_logits: np.ndarray) -> np.ndarray:
        if "lm_head" in self.curves:
            return self.curves["lm_head"](num_logits)
        return self.roofline.lm_head_time(num_logits)

    def _count(self, op: str) -> None:
        if self._quiet:
            return
        self.num_extrapolations += 1
        self.extrapolations_by_op[op] = self.extrapolations_by_op.get(op, 0) + 1

    # -- attention -------------------------------------------------------------------------------------------
    def attention_prefill(self, shape: BatchShape) -> float:
        if shape.num_prefills == 0:
            return 0.0
        if self.prefill is None:
            return self.roofline.attention_prefill(shape)
        if shape.prefill_max_kv > self.prefill.max_kv:
            self._count("attn_prefill")
        t = self._pre_intercept
        for field, c in self._pre_coef:
            t += c * getattr(shape, field)
        return t

    def attention_decode(self, shape: BatchShape) -> float:
        n = shape.num_decodes
        if n == 0:
            return 0.0
        if self.decode is None:
            return self.roofline.attention_decode(shape)
        k_rms = math.sqrt(shape.decode_kv_sq_sum / n)
        if n <= self._dec_max_batch:
            if shape.decode_max_kv > self.decode.max_context:
                self._count("attn_decode")
            return self._dec_a[n] + self._dec_b[n] * k_rms
        self._count("attn_decode")
        return float(self.decode.predict(np.array([n]), np.array([k_rms]))[0])

    def decode_attention_terms(self, n: int) -> tuple[float, float, float, float, float, bool] | None:
        """The roofline's linear terms where no decode attention was fitted, else None (see
        :meth:`decode_attention_rms_terms`)."""
        return self.roofline.decode_attention_terms(n) if self.decode is None else None

    def decode_attention_rms_terms(self, n: int) -> tuple[float, float] | None:
        """Fitted decode attention of ``n`` sequences as ``a + b * sqrt(kv_sq_sum / n)``:
        ``(a, b)``, for a caller that writes the formula into its own loop (the scalar path's
        float ops, counting nothing); None without a fit or beyond its largest batch."""
        if self.decode is None or n > self._dec_max_batch:
            return None
        return self._dec_a[n], self._dec_b[n]

    def _attention_decode_vector(self, n: int, kv_sums: np.ndarray, kv_sq_sums: np.ndarray,
                                 kv_maxes: np.ndarray) -> np.ndarray | None:
        """:meth:`attention_decode` for many decode batches of ``n`` sequences (None where the
        scalar path would extrapolate the batch size); counts nothing."""
        if self.decode is None:
            return self.roofline.attention_decode_vector(n, kv_sums, kv_sq_sums, kv_maxes)
        if n > self._dec_max_batch:
            return None
        return self._dec_a[n] + self._dec_b[n] * np.sqrt(kv_sq_sums / n)

    def decode_stretch_times(self, num_decodes: int, kv_sum: int, kv_sq_sum: int, kv_max: int,
                             num_iterations: int) -> list[float]:
        n, k = num_decodes, num_iterations
        times = None
        if type(self) is LearnedCostModel and k > 1 and n > 0:
            times = self._vector_stretch(n, kv_sum, kv_sq_sum, kv_max, k, self._attention_decode_vector)
        if times is None:
            return super().decode_stretch_times(n, kv_sum, kv_sq_sum, kv_max, k)
        self.count_stretch(n, kv_max, k)
        return times

    def count_stretch(self, n: int, kv_max: int, k: int) -> None:
        """Count the extrapolations the scalar path would over a decode stretch (see
        :meth:`decode_stretch_times`), in its order of first occurrence (dict order): per
        iteration token ops (layer_time), decode attention, LM head."""
        num_attn = 0
        if self.decode is not None:
            # Iterations i < k with kv_max + i > max_context: those from the first integer above it.
            limit = self.decode.max_context
            if limit != math.inf:
                num_attn = max(0, k - max(0, math.floor(limit) + 1 - kv_max))
        attn = ("attn_decode", num_attn)
        order = [("token_ops", k if n > self.max_fitted_tokens else 0)]
        lm_head = ("lm_head", k if n > self.max_fitted_logits else 0)
        order += [attn, lm_head] if num_attn == k else [lm_head, attn]
        for op, count in order:
            if count:
                self.num_extrapolations += count
                self.extrapolations_by_op[op] = self.extrapolations_by_op.get(op, 0) + count

    # -- CostModel interface: the tables live in TabulatedCostModel; here only the range checks -------------
    def layer_time(self, shape: BatchShape) -> float:
        if shape.num_prefill_tokens + shape.num_decodes > self.max_fitted_tokens:
            self._count("token_ops")
        return super().layer_time(shape)

    def post_time(self, shape: BatchShape) -> float:
        if shape.num_logits > self.max_fitted_logits:
            self._count("lm_head")
        return super().post_time(shape)

    def overhead_time(self, shape: BatchShape) -> float:
        return self.roofline.overhead_time(shape)

    def send_recv_time(self, num_tokens: int, hop: int | None = None) -> float:
        """Learned send/recv for hops inside a node (where the profile measured it), else the
        roofline's topology model: an inter-node hop is priced by its network link, not NVLink."""
        if "send_recv" in self.curves and self.replica.pp > 1:
            topo = self.roofline.topology
            hops = range(topo.pp - 1) if hop is None else (hop,)
            if all(not topo.hop_links[h].is_inter_node for h in hops):
                return float(self.curves["send_recv"](np.array([num_tokens * PP_HOP_VECTORS * self._bytes_per_token]))[0])
        return self.roofline.send_recv_time(num_tokens, hop)
