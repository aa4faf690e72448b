"""Model specs from Hugging Face ``config.json`` files, and GPU specs from small TOML/JSON files.

``--model PATH`` (a ``config.json`` or a folder holding one; no network) builds a
:class:`~simulator.config.catalog.ModelSpec` from the fields a serving simulator needs: layers, hidden
size, heads / KV heads / head dim, FFN width, vocabulary, context length, tied embeddings,
sliding-window layers, mixture-of-experts fields and multi-head latent attention fields. It is the
one reader: ``simulate profile --model PATH`` comes here too (through ``catalog.get_model``), so the
profiler times the shapes the simulator prices and refuses what it refuses.

Families read (``model_type``): dense ``llama``, ``mistral``, ``qwen2``, ``qwen3``; MoE
``mixtral``, ``qwen3_moe``, ``gpt_oss``, ``llama4`` / ``llama4_text`` (the text model of a
multimodal config's ``text_config``); MLA + MoE ``deepseek_v3`` / ``deepseek_v2``, and with DeepSeek Sparse Attention (``index_topk``,
``index_n_heads``, ``index_head_dim``) ``deepseek_v32`` / ``glm_moe_dsa``; Kimi-K2's ``kimi_k2`` (DeepSeek-V3's
architecture) and Kimi-K2.5's ``kimi_k25`` (its text model); hybrid linear
attention + MoE ``qwen3_next`` and ``qwen3_5_moe`` (Gated DeltaNet layers from ``layer_types`` or
``full_attention_interval``; Qwen3.5's text model from its ``text_config``).

The reader is strict on purpose: a field it does not know might change the architecture
(another attention kind, a different layer pattern), so it is refused with a one-line
:class:`~simulator.config.errors.ConfigError` naming the field, rather than silently mispriced.
Fields known not to change shapes or costs (token ids, initialisation, RoPE scaling, router
loss coefficients) are ignored. The checkpoint's quantization is said, not read (a run's weights
are its ``--dtype``): ``ModelSpec.checkpoint_quant``, which the run's header compares with ``--dtype``.

``--gpu PATH`` reads a GPU from a TOML or JSON table with keys ``name``, ``bf16_tflops``,
``hbm_gb_per_s``, ``memory_gb`` and optional ``fp8_tflops``, ``fp4_tflops``, ``nvlink_gb_per_s`` (per
direction; 0 without NVLink), ``pcie_gb_per_s`` (default 64), ``nvlink_switch``, ``mesh_links`` (a
fully connected mesh: how many peer links ``nvlink_gb_per_s`` sums, e.g. 7 on an MI300X) and ``source``.

Both loaders key the spec's ``name`` on the path as given, so a run config holding the path
reproduces the run; results are cached per path (and file modification time).
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from simulator.config.errors import ConfigError
from simulator.config.json_types import loads_once
from simulator.config.limits import MAX_TOKENS
from simulator.config.specs import GB, TFLOPS, GPUSpec, ModelSpec, is_dense_layer

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gpt_oss", "llama4", "llama4_text",
               "deepseek_v3", "deepseek_v2", "deepseek_v32", "glm_moe_dsa", "qwen3_next", "qwen3_5_moe",
               "qwen3_5_moe_text", "kimi_k2", "kimi_k25")
# DeepSeek Sparse Attention's families: an indexer picks each query's keys (index_topk).
_SPARSE_ATTENTION = ("deepseek_v32", "glm_moe_dsa")
# Multimodal wrappers whose text model sits in ``text_config`` (the vision tower is not served).
_TEXT_WRAPPERS = ("llama4", "qwen3_5_moe", "kimi_k25")
# Hybrids whose full-attention q_proj also emits an output gate even where the config does not say so.
_GATED_ATTENTION = ("qwen3_next",)

# Fields the reader interprets.
_READ = frozenset({
    "quantization_config", "model_type", "architectures", "text_config", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "intermediate_size_mlp", "vocab_size",
    "max_position_embeddings", "tie_word_embeddings", "hidden_act", "sliding_window", "use_sliding_window",
    "max_window_layers", "layer_types", "num_local_experts", "num_experts", "n_routed_experts",
    "num_experts_per_tok", "experts_per_token", "moe_intermediate_size", "n_shared_experts",
    "first_k_dense_replace", "moe_layer_freq", "interleave_moe_layer_step", "decoder_sparse_step",
    "moe_layers", "mlp_only_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
    "attention_chunk_size", "no_rope_layers", "_name_or_path", "full_attention_interval", "linear_conv_kernel_dim",
    "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules",
    "linear_key_head_dim", "linear_num_key_heads", "linear_num_value_heads", "linear_value_head_dim",
    "attn_output_gate", "shared_expert_intermediate_size", "mamba_ssm_dtype", "rope_scaling", "rope_parameters",
    "index_topk", "index_n_heads", "index_head_dim",
})
# Fields that change neither shapes nor costs the simulator models.
_IGNORED = frozenset({
    "attention_bias", "attention_dropout", "hidden_dropout", "bos_token_id", "eos_token_id", "pad_token_id",
    "initializer_range", "rms_norm_eps", "rope_theta", "rope_type",
    "partial_rotary_factor", "torch_dtype", "dtype", "transformers_version", "use_cache", "auto_map",
    "pretraining_tp", "mlp_bias", "router_aux_loss_coef", "output_router_logits", "router_jitter_noise",
    "norm_topk_prob", "aux_loss_alpha", "seq_aux", "scoring_func", "topk_method", "n_group", "topk_group",
    "routed_scaling_factor", "ep_size", "use_qk_norm", "use_mrope",
    "attn_temperature_tuning", "floor_scale", "attn_scale", "swiglu_limit", "initial_context_length",
    "vision_config", "boi_token_index", "eoi_token_index", "image_token_index", "cache_implementation",
    "for_llm_compressor", "router_dtype", "use_mla", "rope_interleave", "is_llama_config", "bos_token",
    "eos_token", "tokenizer_class", "qk_layernorm", "moe_router_dtype",
    "mtp_use_dedicated_embeddings", "image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id",
})
_STATE_DTYPE_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}  # a hybrid's mamba_ssm_dtype
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "swiglu": "silu", "gelu": "gelu", "gelu_new": "gelu",
                "gelu_pytorch_tanh": "gelu"}


def is_path_like(name: str) -> bool:
    """Whether a ``--model``/``--gpu`` value names a file rather than a catalog entry: an existing
    path, or one ending in .json/.toml (an unknown ``org/model`` id stays a catalog miss)."""
    return name.lower().endswith((".json", ".toml")) or os.path.exists(name)


def _config_file(path: str) -> Path:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    if not p.is_file():
        raise ConfigError("model", f"no config file at {path}",
                          "pass a catalog name (`simulate models`) or a Hugging Face config.json / its folder")
    return p


def load_hf_model(path: str) -> ModelSpec:
    """The model described by the ``config.json`` at ``path`` (file or folder), cached."""
    p = _config_file(path)
    return _load_hf_model(path, str(p), p.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _load_hf_model(name: str, file: str, _mtime_ns: int) -> ModelSpec:
    try:
        cfg = loads_once(Path(file).read_text(encoding="utf-8-sig"), file)  # (a byte-order mark is no part of the JSON)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError("model", f"{file} is not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise ConfigError("model", f"{file} must hold a JSON object")
    return model_from_hf_dict(cfg, name, where=file)


def model_from_hf_dict(cfg: dict[str, Any], name: str, where: str = "config.json") -> ModelSpec:
    """Build a spec from a parsed ``config.json``; ``name`` becomes the spec's name. Each part of the
    architecture is read by its own function below (dense shape here; experts, latent attention,
    attention windows, linear-attention layers); any field the spec cannot honour is refused."""
    cfg, model_type = _text_config(cfg, where)
    f = _Fields(cfg, where)
    num_layers = f.need("num_hidden_layers")
    hidden = f.need("hidden_size")
    heads = f.need("num_attention_heads")
    act = str(cfg.get("hidden_act", "silu"))
    if act not in _ACTIVATIONS:
        raise ConfigError("model.hidden_act", f"{where}: unsupported activation {act!r}", f"known: {', '.join(_ACTIVATIONS)}")
    head_dim = f.need("head_dim") if cfg.get("head_dim") is not None else 0
    kwargs: dict[str, Any] = {}
    if head_dim and head_dim * heads != hidden:
        kwargs["explicit_head_dim"] = head_dim
    ffn = _experts(f, model_type, num_layers, kwargs)
    if not ffn:
        raise ConfigError("model.intermediate_size", f"{where}: needs a positive integer, got {cfg.get('intermediate_size')!r}")
    _latent_attention(f, kwargs)
    if model_type in _SPARSE_ATTENTION and not kwargs.get("index_topk"):  # (read as dense MLA, unsaid)
        raise ConfigError("model.index_topk", f"{where}: model_type {model_type} attends sparsely, but no index_topk "
                          "is given", "give index_topk, index_n_heads and index_head_dim (its indexer)")
    num_sliding, window, layer_types = _attention_windows(f, model_type, num_layers)
    _linear_attention(f, layer_types, num_layers, kwargs)
    if f.flag("attn_output_gate", model_type in _GATED_ATTENTION):
        kwargs["attn_output_gate"] = True
    if "text_config" in cfg:  # (a wrapper's was taken above and is gone)
        f.refuse_unused(("text_config",), f"model_type {model_type} does not wrap a text model "
                        f"({', '.join(_TEXT_WRAPPERS)} do)")
    # Multi-token-prediction modules (the mtp drafter): DeepSeek, Qwen3-Next/3.5 and MiniMax-M2 name them differently.
    num_mtp = max(f.opt(key, 0) or 0 for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules"))
    if num_mtp:
        kwargs["num_mtp_layers"] = num_mtp
    if num_sliding and not window:
        raise ConfigError("model.sliding_window", f"{where}: sliding layers need a positive sliding_window")
    if num_sliding:
        kwargs.update(sliding_window=window, num_sliding_layers=num_sliding)

    hf_id = str(cfg.get("_name_or_path") or Path(where).parent.name or name)
    # Absent, these take HF's defaults (MHA; untied); given, a value must mean what it says (a 0 was read as
    # absent, the string "false" as true). The context is vLLM's reading of the config (_context).
    kv_heads = f.need("num_key_value_heads") if cfg.get("num_key_value_heads") is not None else heads
    context, context_assumed, scaled = _context(f, model_type)
    if context > MAX_TOKENS:
        raise ConfigError("model.max_position_embeddings", f"{where}: {context:,} positions"
                          f"{' (rope_scaling applied)' if scaled else ''} is beyond any context "
                          f"servesim runs (at most {MAX_TOKENS:,})", "give the model's real context length")
    if context_assumed:
        kwargs["max_model_len_assumed"] = True
    tied = f.flag("tie_word_embeddings")
    quant = cfg.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):  # (read as an unquantized checkpoint, unsaid)
        raise ConfigError("model.quantization_config", f"{where}: must be an object (quant_method, ...), got "
                          f"{quant!r:.40}", "give the checkpoint's quantization_config, or drop it")
    kwargs["checkpoint_quant"] = checkpoint_quant(quant)
    if kwargs["checkpoint_quant"] == "int4" and (group := int4_group_size(quant)) not in (None, 128):
        kwargs["int4_group_size"] = group
    if kwargs["checkpoint_quant"]:
        dense = kwargs.get("num_dense_layers", 0) if kwargs.get("num_experts") else num_layers  # (whose MLP is dense)
        dense_layers = [i for i in range(num_layers) if is_dense_layer(i, dense, kwargs.get("moe_layer_step", 1))]
        kwargs.update(kept_16bit(quant, dense_layers, kwargs.get("num_shared_experts", 0)))
    vocab = f.need("vocab_size")
    try:
        return ModelSpec(
            name=name, hf_id=hf_id, num_layers=num_layers, hidden_size=hidden, num_heads=heads,
            num_kv_heads=kv_heads, ffn_size=ffn, vocab_size=vocab,
            max_model_len=context, activation=_ACTIVATIONS[act],  # type: ignore[arg-type]
            tied_embeddings=tied, source=where, **kwargs)
    except ConfigError as err:  # the spec's own checks name its fields: name the config's, and the file
        spec_field = err.field.removeprefix("model.")
        key = _HF_NAMES.get(spec_field, spec_field)
        problem = re.sub(rf"\b{re.escape(spec_field)}\b", key, err.problem)
        raise ConfigError(f"model.{key}", f"{where}: {problem}", err.fix) from None


# A config.json's context as vLLM reads it (ModelConfig's _get_and_verify_max_len, vllm/config/model.py): with no
# max_position_embeddings it assumes 2,048 tokens (and warns) unless --max-model-len gives the length; a
# rope_scaling (transformers v5: rope_parameters, one per layer type) stretches it by its factor, from
# original_max_position_embeddings for yarn, except for llama3, longrope and su, whose max_position_embeddings is
# already the stretched length, and for gemma3, whose is too. (LlamaConfig's own default, 2,048, agrees; the
# 4,096 read here before was neither.)
VLLM_ASSUMED_CONTEXT = 2048
_ROPE_UNSCALED = ("su", "longrope", "llama3")


def _context(f: _Fields, model_type: str) -> tuple[int, bool, bool]:
    """The model's context, whether it was assumed (the config gives no length) and whether rope_scaling
    stretched it."""
    cfg, where = f.cfg, f.where
    given = cfg.get("max_position_embeddings") is not None
    context = f.need("max_position_embeddings") if given else VLLM_ASSUMED_CONTEXT
    key = "rope_parameters" if cfg.get("rope_parameters") is not None else "rope_scaling"
    rope = cfg.get(key)
    if rope is None or "gemma3" in model_type:
        return context, not given, False
    if not isinstance(rope, dict):
        raise ConfigError(f"model.{key}", f"{where}: needs a JSON object, got {rope!r}", "write it as the model ships it")
    entries = list(rope.values()) if rope and all(isinstance(v, dict) for v in rope.values()) else [rope]
    factor: Any = 1.0
    for entry in entries:
        kind = entry.get("rope_type", entry.get("type", "default"))  # (transformers reads an old "type" as rope_type)
        if kind in _ROPE_UNSCALED:
            continue
        factor = entry.get("factor", factor)  # (as vLLM: the layer types are taken to share one factor)
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not math.isfinite(factor) or factor <= 0:
            raise ConfigError(f"model.{key}", f"{where}: factor needs a positive number, got {factor!r}",
                              "write it as the model ships it")
        if kind == "yarn":
            original = entry.get("original_max_position_embeddings")
            if isinstance(original, bool) or not isinstance(original, int) or original <= 0:
                raise ConfigError(f"model.{key}", f"{where}: yarn needs original_max_position_embeddings, a positive "
                                  f"integer, got {original!r}", "write it as the model ships it")
            context, given = original, True
    return int(context * factor), not given, factor != 1


# ModelSpec's fields as a config.json names them (for its validation errors).
_HF_NAMES = {"num_kv_heads": "num_key_value_heads", "num_heads": "num_attention_heads", "num_layers": "num_hidden_layers",
             "ffn_size": "intermediate_size", "num_dense_layers": "first_k_dense_replace",
             "expert_ffn_size": "moe_intermediate_size", "num_shared_experts": "n_shared_experts",
             "max_model_len": "max_position_embeddings", "num_sliding_layers": "layer_types",
             "index_num_heads": "index_n_heads"}


def checkpoint_quant(quant: object) -> str:
    """A config.json's ``quantization_config`` as the ``--dtype`` that prices such weights (``fp8``,
    ``fp8-block``, ``nvfp4``, ``mxfp4``, ``int4``), else its ``quant_method`` as written; "" for none."""
    if not isinstance(quant, dict):
        return ""
    method = str(quant.get("quant_method", "")).lower()
    algo = str(quant.get("quant_algo", "")).upper()  # (ModelOpt's)
    fmt = str(quant.get("format", "")).lower()  # (compressed-tensors')
    if method in ("fp8", "fbgemm_fp8") or algo == "FP8" or fmt == "float-quantized":  # (fbgemm: Meta's FP8 405B)
        return "fp8-block" if quant.get("weight_block_size") else "fp8"
    if algo == "NVFP4" or fmt == "nvfp4-pack-quantized":
        return "nvfp4"
    if method == "mxfp4":
        return "mxfp4"
    if method in ("awq", "gptq") and quant.get("bits") == 4:
        return "int4"
    if fmt == "pack-quantized":  # (compressed-tensors packs other widths too: int8 is no int4)
        bits = _first_group_weights(quant).get("num_bits", 4)
        return "int4" if bits == 4 else f"int{bits}"
    return method or "quantized"


def kept_16bit(quant: dict[str, Any], dense_layers: Sequence[int], num_shared_experts: int) -> dict[str, Any]:
    r"""What a checkpoint's exclusion list (compressed-tensors' ``ignore``, ModelOpt's ``exclude_modules``, the
    FP8 configs' ``modules_to_not_convert``) keeps at 16 bits, as ModelSpec fields: every layer's attention where
    it names attention projections (``self_attn``, its norms aside), the shared experts where it names them
    (Kimi-K2's INT4 checkpoint; Qwen's scalar ``shared_expert_gate`` aside), the dense MLPs of the layers it names
    (``layers.0.mlp``, ``layers.0.mlp.down_proj``), or of every dense layer where a pattern names MLP projections
    without a layer (``re:.*mlp\.(gate|up|down)_proj.*``; a router's ``mlp.gate`` is no projection). A multimodal
    checkpoint's vision tower and an MTP module's names are not the text model's."""
    names = [str(n) for key in ("ignore", "exclude_modules", "modules_to_not_convert")
             for n in (quant.get(key) or []) if isinstance(quant.get(key), list)]
    names = [n for n in names if not re.search(r"vision|visual|mm_projector|multi_modal|\bmtp\b", n)]
    out: dict[str, Any] = {}
    if any("self_attn" in n and not re.search(r"norm|rotary", n) for n in names):
        out["quant_16bit_attention"] = True
    if num_shared_experts and any(re.search(r"shared_experts?(?!_gate)", n) for n in names):
        out["quant_16bit_shared_experts"] = True
    # (Llama-4 names a dense MLP feed_forward)
    mlp = r"layers\.(\d+)\.(?:mlp|feed_forward)(?:\.(?:gate_up|gate|up|down)_proj)?(?:$|\*|\.\*|\.weight)"
    dense = set(dense_layers)
    layers = sorted({int(m.group(1)) for n in names if (m := re.search(mlp, n)) and int(m.group(1)) in dense})
    if any(n.startswith("re:") and "mlp" in n and "_proj" in n and "expert" not in n and "layers" not in n
           for n in names):
        layers = sorted(dense)  # (a pattern for every dense MLP's projections)
    if layers:
        out["quant_16bit_mlp_layers"] = tuple(layers)
    return out


def _first_group_weights(quant: dict[str, Any]) -> dict[str, Any]:
    """compressed-tensors' first config group's ``weights`` scheme ({} where it names none)."""
    groups = quant.get("config_groups")
    first = next(iter(groups.values()), None) if isinstance(groups, dict) and groups else None
    weights = first.get("weights") if isinstance(first, dict) else None
    return weights if isinstance(weights, dict) else {}


def int4_group_size(quant: dict[str, Any]) -> int | None:
    """An INT4 ``quantization_config``'s scale group: GPTQ/AWQ's ``group_size``, or compressed-tensors' first config
    group's ``weights.group_size``; None where it names none (or none that is a positive integer: -1 is per channel)."""
    group = quant.get("group_size")
    if group is None:
        group = _first_group_weights(quant).get("group_size")
    return group if isinstance(group, int) and not isinstance(group, bool) and group > 0 else None


def _text_config(cfg: dict[str, Any], where: str) -> tuple[dict[str, Any], str]:
    """The language model's fields (a multimodal wrapper's ``text_config``, its top level checked
    too) and its ``model_type``, which must be one this module reads."""
    outer_type = str(cfg.get("model_type") or "")  # (null is missing too)
    if outer_type in _TEXT_WRAPPERS and isinstance(cfg.get("text_config"), dict):
        top_level = {k: v for k, v in cfg.items() if k != "text_config"}
        _check_fields(top_level, where)
        text = cfg["text_config"]
        cfg = {**text, "tie_word_embeddings": cfg.get("tie_word_embeddings", text.get("tie_word_embeddings"))}
        if top_level.get("quantization_config") is not None:  # (Kimi-K2.5 gives it beside its text_config)
            cfg["quantization_config"] = top_level["quantization_config"]
    _check_fields(cfg, where)
    model_type = str(cfg.get("model_type") or outer_type)
    if not model_type:
        raise ConfigError("model.model_type", f"{where}: missing", f"a HF config.json names its architecture's "
                          f"model_type, one of {', '.join(MODEL_TYPES)}")
    if model_type not in MODEL_TYPES:
        raise ConfigError("model.model_type", f"{where}: unsupported model_type {model_type!r}",
                          f"supported: {', '.join(MODEL_TYPES)}")
    return cfg, model_type


class _Fields:
    """A config's integer and true/false fields, each read with a one-line error naming it where it is
    not one, and the checks that a field the architecture would not read is absent."""

    def __init__(self, cfg: dict[str, Any], where: str) -> None:
        self.cfg, self.where = cfg, where

    def need(self, key: str) -> int:
        value = self.cfg.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"model.{key}", f"{self.where}: needs a positive integer, got {value!r}")
        return value

    def opt(self, key: str, default: int = 0) -> int:
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ConfigError(f"model.{key}", f"{self.where}: needs a non-negative integer, got {value!r}")
        return value

    def unsupported(self, key: str, why: str) -> ConfigError:
        return ConfigError(f"model.{key}", f"{self.where}: {why}", "servesim cannot price this layer pattern yet")

    def flag(self, key: str, default: bool = False) -> bool:
        """A true/false field: absent (or null) is ``default``; given, it must be a JSON boolean (the
        string "false" is not false)."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise ConfigError(f"model.{key}", f"{self.where}: needs true or false, got {value!r}", "write it as a JSON boolean")
        return value

    def one_of(self, keys: tuple[str, ...]) -> int:
        """A count several families name differently (``num_local_experts`` / ``num_experts`` / ...):
        the one given, or 0; two given with different values are refused (one would be dropped)."""
        given = {k: self.opt(k) for k in keys if self.cfg.get(k) is not None}
        if len(set(given.values())) > 1:
            names = ", ".join(f"{k}={v}" for k, v in given.items())
            raise ConfigError(f"model.{next(iter(given))}", f"{self.where}: {names} disagree", "keep the one the model uses")
        return next(iter(given.values()), 0)

    def refuse_unused(self, keys: tuple[str, ...], why: str) -> None:
        """Refuse the first of ``keys`` given with a value that would change the model (not null,
        0, false or an empty list) where the architecture does not use it: it would be dropped."""
        for key in keys:
            if self.cfg.get(key) not in (None, 0, False, [], ""):
                raise ConfigError(f"model.{key}", f"{self.where}: given {self.cfg[key]!r}, but {why}, so it would be "
                                  "ignored", "remove it, or give the fields that make the layers it describes")


def _experts(f: _Fields, model_type: str, num_layers: int, kwargs: dict[str, Any]) -> int:
    """Mixture of experts: the expert fields into ``kwargs``; returns the dense layers' FFN width
    (0 where the config gives none)."""
    num_experts = f.one_of(("num_local_experts", "num_experts", "n_routed_experts"))
    top_k = f.one_of(("num_experts_per_tok", "experts_per_token"))
    ffn = f.opt("intermediate_size")
    if not num_experts:
        if top_k:
            raise ConfigError("model.num_experts_per_tok", f"{f.where}: top-k experts without an expert count",
                              "add num_local_experts / num_experts / n_routed_experts")
        f.refuse_unused(("moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size",
                         "first_k_dense_replace", "mlp_only_layers"), "the config has no experts")
        for key in ("moe_layer_freq", "interleave_moe_layer_step", "decoder_sparse_step"):  # (1: every layer, harmless)
            if f.opt(key, 1) != 1:
                f.refuse_unused((key,), "the config has no experts")
        return ffn
    expert_ffn = f.opt("moe_intermediate_size") or ffn
    if not expert_ffn:
        raise ConfigError("model.moe_intermediate_size", f"{f.where}: a MoE config needs the expert width")
    num_dense = f.opt("first_k_dense_replace")
    if f.opt("moe_layer_freq", 1) != 1:
        raise f.unsupported("moe_layer_freq", f"moe_layer_freq={f.cfg['moe_layer_freq']} (only 1 is read)")
    if f.opt("decoder_sparse_step", 1) != 1:
        raise f.unsupported("decoder_sparse_step", f"decoder_sparse_step={f.cfg['decoder_sparse_step']} (only 1 is read)")
    if f.cfg.get("mlp_only_layers"):
        raise f.unsupported("mlp_only_layers", "dense-only layers in a Qwen MoE")
    step = f.opt("interleave_moe_layer_step", 1)
    if step > 1:  # Llama-4 Maverick: every step-th layer is MoE, the others dense
        num_dense = num_layers - num_layers // step
        kwargs["moe_layer_step"] = step
    moe_layers = f.cfg.get("moe_layers")  # Llama-4's configs (transformers >= 4.51) list the MoE layers too
    if moe_layers is not None:
        if (not isinstance(moe_layers, list) or not moe_layers or len(set(map(repr, moe_layers))) != len(moe_layers)
                or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in moe_layers)):
            raise ConfigError("model.moe_layers", f"{f.where}: must list distinct layer indices in [0, {num_layers})",
                              "fix the config")
        listed_dense = num_layers - len(moe_layers)
        if listed_dense != (num_dense or 0):
            raise ConfigError("model.moe_layers", f"{f.where}: lists {len(moe_layers)} MoE layers of {num_layers}, "
                              f"but the other fields give {num_layers - (num_dense or 0)}", "make them agree")
        implied = [i for i in range(num_layers) if not is_dense_layer(i, num_dense or 0, step)]
        if sorted(moe_layers) != implied:  # (where a stage's own layers are is what its memory reads)
            raise ConfigError("model.moe_layers", f"{f.where}: lists MoE layers {sorted(moe_layers)[:4]}... where "
                              f"the other fields place them at {implied[:4]}...", "make them agree (the dense "
                              "layers first, or every interleave_moe_layer_step-th layer MoE)")
    shared_width = f.opt("shared_expert_intermediate_size")
    shared = f.opt("n_shared_experts") or (1 if model_type.startswith("llama4") or shared_width else 0)
    if shared_width and shared_width != expert_ffn:
        kwargs["shared_expert_ffn_size"] = shared_width
    # ffn_size: the dense layers' width (only the activation reserve reads it when every layer is MoE)
    dense_ffn = f.opt("intermediate_size_mlp") or ffn or expert_ffn
    kwargs.update(num_experts=num_experts, num_experts_per_tok=top_k, expert_ffn_size=expert_ffn,
                  num_shared_experts=shared, num_dense_layers=num_dense)
    return dense_ffn or expert_ffn


def _latent_attention(f: _Fields, kwargs: dict[str, Any]) -> None:
    """Multi-head latent attention (DeepSeek's MLA): its ranks and head widths into ``kwargs``."""
    if not f.opt("kv_lora_rank"):
        f.refuse_unused(("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "index_topk",
                         "index_n_heads", "index_head_dim"), "latent attention needs kv_lora_rank")
        return
    kwargs.update(q_lora_rank=f.opt("q_lora_rank"), kv_lora_rank=f.opt("kv_lora_rank"),
                  qk_nope_head_dim=f.need("qk_nope_head_dim"), qk_rope_head_dim=f.need("qk_rope_head_dim"),
                  v_head_dim=f.need("v_head_dim"))
    kwargs.pop("explicit_head_dim", None)
    if f.opt("index_topk"):  # DeepSeek Sparse Attention's indexer (DeepSeek-V3.2, GLM-5)
        kwargs.update(index_topk=f.need("index_topk"), index_num_heads=f.need("index_n_heads"),
                      index_head_dim=f.need("index_head_dim"))
    else:
        f.refuse_unused(("index_n_heads", "index_head_dim"), "sparse attention needs index_topk")


def _attention_windows(f: _Fields, model_type: str, num_layers: int) -> tuple[int, int, list | None]:
    """Sliding-window (or chunked local) attention: how many layers attend over a window, the
    window, and the config's ``layer_types`` (checked; None where absent)."""
    window = f.opt("sliding_window")
    layer_types = f.cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != num_layers:
            raise ConfigError("model.layer_types", f"{f.where}: needs one entry per layer ({num_layers})")
        bad = [t for t in layer_types if not isinstance(t, str)
               or t not in ("full_attention", "sliding_attention", "linear_attention")]
        if bad:
            raise f.unsupported("layer_types", f"layer type {bad[0]!r} (full_attention, sliding_attention and "
                                "linear_attention are read)")
        return layer_types.count("sliding_attention"), window, layer_types
    if not model_type.startswith("llama4"):
        f.refuse_unused(("attention_chunk_size", "no_rope_layers"),
                        f"model_type {model_type} has no chunked local attention (llama4 has)")
    if model_type in ("qwen2", "qwen3", "qwen3_moe"):
        num_sliding = num_layers - min(f.opt("max_window_layers", num_layers), num_layers) \
            if f.flag("use_sliding_window") else 0
    elif model_type.startswith("llama4") and f.opt("attention_chunk_size"):
        window = f.opt("attention_chunk_size")
        no_rope = f.cfg.get("no_rope_layers")
        # no_rope_layers[i] == 1: layer i uses RoPE and chunked local attention; 0: global NoPE layer.
        num_sliding = sum(1 for x in no_rope if x) if isinstance(no_rope, list) and no_rope else num_layers - num_layers // 4
    else:
        f.refuse_unused(("use_sliding_window",), f"model_type {model_type} reads sliding_window alone (qwen2, qwen3 "
                        "and qwen3_moe read use_sliding_window)")
        # use_sliding_window false turns the window off whatever the model type, as vLLM reads it
        # (ModelConfig.get_hf_config_sliding_window); it was applied here
        num_sliding = num_layers if window and f.cfg.get("use_sliding_window") is not False else 0
    return num_sliding, window, None


def _linear_attention(f: _Fields, layer_types: list | None, num_layers: int, kwargs: dict[str, Any]) -> None:
    """Hybrid linear attention (Gated DeltaNet): from ``layer_types``, else every
    ``full_attention_interval``-th layer is full attention (Qwen3-Next's config has no layer_types);
    the recurrent state's dtype from ``mamba_ssm_dtype`` where given."""
    if isinstance(layer_types, list):
        num_linear = layer_types.count("linear_attention")
    elif f.opt("full_attention_interval"):
        num_linear = num_layers - num_layers // f.opt("full_attention_interval")
    else:
        num_linear = 0
    if not num_linear:
        f.refuse_unused(("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                         "linear_conv_kernel_dim", "mamba_ssm_dtype"), "the config has no linear-attention layers")
        return
    kwargs.update(num_linear_layers=num_linear, linear_num_key_heads=f.need("linear_num_key_heads"),
                  linear_num_value_heads=f.need("linear_num_value_heads"),
                  linear_key_head_dim=f.need("linear_key_head_dim"),
                  linear_value_head_dim=f.need("linear_value_head_dim"),
                  linear_conv_kernel_dim=f.opt("linear_conv_kernel_dim", 4) or 4)
    ssm_dtype = f.cfg.get("mamba_ssm_dtype")
    if ssm_dtype is not None:
        if ssm_dtype not in _STATE_DTYPE_BYTES:
            raise ConfigError("model.mamba_ssm_dtype", f"{f.where}: unknown state dtype {ssm_dtype!r}",
                              f"known: {', '.join(_STATE_DTYPE_BYTES)}")
        kwargs["linear_state_dtype_bytes"] = _STATE_DTYPE_BYTES[ssm_dtype]


def _check_fields(cfg: dict[str, Any], where: str) -> None:
    for key in cfg:
        if key not in _READ and key not in _IGNORED:
            raise ConfigError(f"model.{key}", f"{where}: unknown architecture field", "servesim reads "
                              f"{', '.join(MODEL_TYPES)} configs; remove the field if it does not change the model")


# -- GPUs from files ---------------------------------------------------------------------------------------
_GPU_KEYS = {"name", "bf16_tflops", "fp8_tflops", "fp4_tflops", "hbm_gb_per_s", "memory_gb", "nvlink_gb_per_s", "pcie_gb_per_s",
             "nvlink_switch", "mesh_links", "source"}


# A GPU file's figures, each in its own unit (TFLOPS, GB/s, GB): what any GPU could have.
GPU_FIGURE_RANGE = (1e-3, 1e6)


def load_gpu_file(path: str) -> GPUSpec:
    """The GPU described by a TOML or JSON file, cached per path."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("gpu", f"no GPU file at {path}", "pass a catalog name (`simulate gpus`) or a .toml/.json file")
    return _load_gpu_file(path, p.stat().st_mtime_ns)


@lru_cache(maxsize=16)
def _load_gpu_file(path: str, _mtime_ns: int) -> GPUSpec:
    is_toml = path.lower().endswith(".toml")  # (GPU.TOML too)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # (a byte-order mark is not part of the table)
        data = tomllib.loads(text) if is_toml else loads_once(text, path)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError("gpu", f"{path} is not valid {'TOML' if is_toml else 'JSON'} ({exc})",
                          "write the GPU as a TOML or JSON table of the documented keys") from None
    if not isinstance(data, dict):
        raise ConfigError("gpu", f"{path} must hold a table")
    for key in data:
        if key not in _GPU_KEYS:
            raise ConfigError(f"gpu.{key}", f"{path}: unknown field", f"known: {', '.join(sorted(_GPU_KEYS))}")
    for key in ("bf16_tflops", "hbm_gb_per_s", "memory_gb"):
        if key not in data:
            raise ConfigError(f"gpu.{key}", f"{path}: missing", "give the datasheet's dense figure")

    # The figures GPUSpec needs positive (compute, memory, its bandwidth, PCIe) are refused here,
    # in the file's own units and names, so one mistake reads one way whether it is 0 or -1.
    positive = ("bf16_tflops", "hbm_gb_per_s", "memory_gb", "pcie_gb_per_s")

    def num(key: str, default: float = 0.0) -> float:
        value = data.get(key, default)
        # inf and NaN too: TOML and JSON readers take them, and the roofline would price every op at 0 s (or NaN)
        bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
        if key in positive and (bad or not value > 0):
            raise ConfigError(f"gpu.{key}", f"{path}: needs a positive number, got {value!r}")
        if bad or value < 0:
            raise ConfigError(f"gpu.{key}", f"{path}: needs a non-negative number, got {value!r}")
        # Beyond these a figure is a slip of units, and prices overflow (1e300 GB of memory) or take ages.
        if value > GPU_FIGURE_RANGE[1] or (0 < value < GPU_FIGURE_RANGE[0]):
            raise ConfigError(f"gpu.{key}", f"{path}: {value!r} is outside [{GPU_FIGURE_RANGE[0]:g}, "
                              f"{GPU_FIGURE_RANGE[1]:g}]", "give the datasheet's figure in the field's unit (TFLOPS, GB/s, GB)")
        return float(value)

    switch = data.get("nvlink_switch", False)
    if not isinstance(switch, bool):  # "no" would read as true
        raise ConfigError("gpu.nvlink_switch", f"{path}: needs true or false, got {switch!r}")
    if switch and not num("nvlink_gb_per_s"):
        raise ConfigError("gpu.nvlink_switch", f"{path}: an NVLink switch without NVLink (nvlink_gb_per_s 0) would change "
                          "nothing", "give nvlink_gb_per_s, or drop nvlink_switch")
    mesh = data.get("mesh_links", 0)
    if isinstance(mesh, bool) or not isinstance(mesh, int) or not 0 <= mesh <= 71:
        raise ConfigError("gpu.mesh_links", f"{path}: needs a whole number of peer links in [0, 71], got {mesh!r}",
                          "e.g. 7 for a GPU meshed with the 7 others of its server; 0 (or none) for a switch")
    if mesh and not switch:
        raise ConfigError("gpu.mesh_links", f"{path}: a mesh links every pair directly", "add nvlink_switch = true")
    for key in ("name", "source"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(f"gpu.{key}", f"{path}: needs a string, got {data[key]!r}", f'e.g. {key} = "my-gpu"')

    return GPUSpec(path, num("bf16_tflops") * TFLOPS, num("hbm_gb_per_s") * GB, num("memory_gb") * GB,
                   num("nvlink_gb_per_s") * GB, num("pcie_gb_per_s", 64.0) * GB, fp8_flops=num("fp8_tflops") * TFLOPS,
                   fp4_flops=num("fp4_tflops") * TFLOPS,
                   source=str(data.get("source", data.get("name", path))), nvlink_switch=switch, mesh_links=mesh)
