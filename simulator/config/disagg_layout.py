"""Disaggregated layouts: a prefill pool, a decode pool, the KV link between them.

A layout is written as three run options (so ``run``, ``capacity``, sweeps and
``config.json`` carry it like any other option)::

    --prefill-pool '2x(tp=2,gpu=h100-sxm)' --decode-pool '1x(tp=4,gpu=a100-80gb)' --kv-link infiniband-200g

Pool syntax: ``N`` replicas ``x`` a parenthesised list of ``key=value`` overrides of the
run's replica and scheduler: ``tp``, ``pp``, ``dp`` (attention data-parallel ranks of each
replica: ``--attention-dp``), ``ep`` (expert parallelism over the replica's ``tp x dp``
GPUs: ``--ep``), ``nodes`` (nodes each replica spans: ``--nodes``), ``gpu``, ``sched``
(scheduler name), ``budget`` (the pool's token budget: ``max_num_batched_tokens``, or the
chunk size for sarathi) and ``seqs`` (``max_num_seqs``). Keys not given come from the run options,
the scheduler too: both pools run ``--scheduler`` where its engine deploys disaggregated pools
(``vllm-v1``, the default, as vLLM's NIXL-connected workers run it: chunked prefill under the token
budget; ``sglang``; ``trtllm``; ``vllm``), else ``vllm`` (a research policy, sarathi, orca or fastertransformer,
that no engine deploys disaggregated: :func:`default_pool_scheduler`). ``disagg split`` and
``compare`` write ``sched=vllm`` in their pools (DistServe's prefill instance, whole prompts),
``simulate plan`` the plan's. ``--mixed-pool`` (same syntax) adds Splitwise's mixed machines:
aggregated replicas running the run's own scheduler, which take whole requests when every
prefill replica is backed up.

xPyD layouts as deployed today (Dynamo, vLLM/SGLang with NIXL-style KV connectors) give each
pool its own TP, attention DP and EP: ``--prefill-pool '2x(tp=1,dp=8,ep=8)' --decode-pool
'1x(tp=1,dp=32,ep=32,nodes=4)'`` is two DEP8 prefill workers and one DEP32 decode worker.
As in an aggregated run, each attention-DP rank of a pool replica is an engine replica of
its own behind the pool's router (prefill) or the handoff's choice (decode), and its cost
model prices the MoE layers for the whole ``tp x dp`` group (:mod:`simulator.costmodel.moe`).
A pool's ``ep`` must divide its ``tp x dp`` GPUs (checked here, naming the pool).

KV link (``--kv-link``): a link name of :mod:`simulator.config.topology` (``infiniband-200g``,
``ethernet-100g``, ``nvlink``, ``pcie``, ...), a bandwidth in gigabytes ``25GB/s`` or gigabits
``100Gb/s`` (``100Gbps``, ``100gbps``; ``gb/s`` says neither and is refused) with an optional latency ``@10us``, or ``infinite`` (no time at all). Its effective
bandwidth is the topology's (rated x efficiency). ``--kv-link-scope`` says whose link it is:
``per-worker`` (default) gives every prefill pool replica an egress of this link and every
decode pool replica an ingress as wide as its GPUs hold prefill workers' GPUs (NICs scale with
GPUs; a transfer holds both), ``shared`` makes it
one link that all transfers queue on, FIFO (:mod:`simulator.engine.disagg`, step 3). The run's
``--router`` routes arrivals among the prefill replicas;
``--replicas`` must stay 1 (the pools give their own counts).

Parsing canonicalises the strings (``RunConfig`` stores the canonical form), so two
spellings of one layout give the same config and the same sweep point.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from simulator.config.errors import ConfigError

if TYPE_CHECKING:
    from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig

POOL_KEYS = ("tp", "pp", "dp", "ep", "redundant", "nodes", "gpu", "moe", "sched", "budget", "seqs")
# Pool keys that override ReplicaConfig fields, and the field each sets (redundant: PoolSpec.redundant_of).
_REPLICA_KEYS = {"tp": "tp", "pp": "pp", "dp": "attention_dp", "ep": "ep", "nodes": "num_nodes", "gpu": "gpu",
                 "moe": "moe_kernel"}
# The pools' scheduler under a research policy that no engine deploys disaggregated (default_pool_scheduler), and
# what every pool without sched= ran before pools followed --scheduler (resume keys name any other: RunConfig.result_key)
FALLBACK_POOL_SCHEDULER = "vllm"
# disagg split and compare's pools (simulator.planning.split): DistServe's prefill instance, whole prompts under its
# budget; written as each pool's sched=, so a row's layout passed back to run is the layout it searched
SPLIT_POOL_SCHEDULER = "vllm"
_POOL_RE = re.compile(r"^\s*(\d+)\s*x\s*(?:\((.*)\))?\s*$", re.IGNORECASE)
# The unit is matched in any case, then read case-sensitively (_BW_UNITS): B is bytes, b bits, as link
# datasheets write them; a spelling that does not say which (gb/s, GBPS) is refused, not guessed.
_BW_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(gb/s|gbps)(?:\s*@\s*(\d+(?:\.\d+)?)\s*(us|ms|s))?$", re.IGNORECASE)
# unit -> (bytes a second of one unit, the canonical spelling a header prints)
_BW_UNITS: dict[str, tuple[float, str]] = {
    "GB/s": (1e9, "GB/s"),
    "Gb/s": (1e9 / 8, "Gb/s"), "Gbps": (1e9 / 8, "Gb/s"), "gbps": (1e9 / 8, "Gb/s"),
}


@dataclass(frozen=True)
class PoolSpec:
    """One pool: ``num_replicas`` replicas, each the run's replica with these overrides."""

    num_replicas: int
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None  # attention data-parallel ranks per replica (ReplicaConfig.attention_dp)
    ep: int | None = None
    redundant: int | None = None  # redundant expert copies over the pool's EP ranks (ReplicaConfig.redundant_experts)
    nodes: int | None = None  # nodes per replica (ReplicaConfig.num_nodes)
    gpu: str | None = None
    # the MoE kernel the pool's tables price (ReplicaConfig.moe_kernel): a deployment's prefill and decode workers
    # each set their own (TensorRT-LLM's moe_config per worker)
    moe: str | None = None
    sched: str | None = None
    budget: int | None = None
    seqs: int | None = None

    def canonical(self) -> str:
        parts = [f"{k}={getattr(self, k)}" for k in POOL_KEYS if getattr(self, k) is not None]
        return f"{self.num_replicas}x({','.join(parts)})"

    def effective(self, replica: ReplicaConfig) -> str:
        """The pool's string with the layout its replicas take from the run filled in (``replica``: one of
        them): passed back as a pool, it is the same layout without the run's --pp, --attention-dp, --ep or
        --redundant-experts."""
        inherited = {"tp": replica.tp, "pp": replica.pp if replica.pp > 1 else None,
                     "dp": replica.attention_dp if replica.attention_dp > 1 else None,
                     "ep": replica.ep if replica.ep > 1 else None,
                     # (the run's redundant experts go with the run's EP: written, or '1x' beside --ep 4
                     # --redundant-experts 4 would read as '1x(ep=4)', which places none)
                     "redundant": replica.redundant_experts if replica.redundant_experts else None}
        return replace(self, **{k: getattr(self, k) if getattr(self, k) is not None else v
                                for k, v in inherited.items()}).canonical()

    def replica_config(self, base: ReplicaConfig) -> ReplicaConfig:
        changes = {f: getattr(self, k) for k, f in _REPLICA_KEYS.items() if getattr(self, k) is not None}
        changes["redundant_experts"] = self.redundant_of(base)
        return replace(base, **changes)

    def redundant_of(self, base: ReplicaConfig) -> int:
        """The pool's redundant experts: its own, else the run's where the pool keeps the run's EP (the copies
        belong to an EP layout: a pool that sets ``ep`` places none unless it says so)."""
        if self.redundant is not None:
            return self.redundant
        return base.redundant_experts if self.ep is None else 0

    def check(self, base: ReplicaConfig, field: str) -> None:
        """Refuse, naming the pool (``field``) and the key to change, what a replica of this pool
        cannot be: attention DP on a dense model or with PP, an ``ep`` that does not divide the
        replica's ``tp x dp`` GPUs and the experts plus redundant copies, redundant copies without EP,
        more GPUs than its nodes hold. Only where the pool sets ``dp``, ``ep``, ``redundant`` or
        ``nodes`` (other layouts keep the replica's own messages)."""
        if self.dp is None and self.ep is None and self.nodes is None and self.redundant is None:
            return
        from simulator.config.catalog import get_model
        from simulator.config.specs import redundant_experts_to_fit
        from simulator.config.topology import MAX_GPUS_PER_NODE

        flag = "--" + field.replace("_", "-")
        tp, pp = self.tp or base.tp, self.pp or base.pp
        dp = self.dp or base.attention_dp
        ep = self.ep or base.ep
        nodes = self.nodes or base.num_nodes
        spec = get_model(base.model)
        if (dp > 1 or ep > 1) and not spec.is_moe:
            key = "dp" if dp > 1 else "ep"
            raise ConfigError(field, f"{key}={dp if key == 'dp' else ep} shards MoE layers, but {spec.name} has no "
                              "experts", f"drop {key} from {flag}; for more replicas raise its count N in 'Nx(...)'")
        if dp > 1 and pp > 1:
            raise ConfigError(field, f"attention DP (dp={dp}) with pipeline parallelism (pp={pp}) is not modelled",
                              f"use pp=1 in {flag}")
        group = tp * dp
        redundant = self.redundant_of(base)
        slots = spec.num_experts + redundant
        if redundant and ep == 1:
            raise ConfigError(field, f"redundant={redundant} expert copies need EP ranks to spread over (ep=1)",
                              f"add ep=N to {flag}, or drop redundant")
        if ep > 1 and (group % ep or slots % ep):
            extra = f" and {redundant} redundant copies" if redundant else ""
            raise ConfigError(field, f"ep={ep} must divide a replica's tp x dp = {tp} x {dp} = {group} GPUs and "
                              f"{spec.name}'s {spec.num_experts} experts{extra}",
                              f"in {flag} use ep={math.gcd(group, slots)} or one of its divisors"
                              + (", or raise dp" if group < spec.num_experts else "")
                              + (f", or set redundant={redundant_experts_to_fit(spec.num_experts, redundant, ep)} "
                                 "(SGLang's --ep-num-redundant-experts)"
                                 if not group % ep else ""))
        num_gpus = tp * pp * dp
        if num_gpus > nodes * MAX_GPUS_PER_NODE:
            need = -(-num_gpus // MAX_GPUS_PER_NODE)
            raise ConfigError(field, f"a replica's tp x pp x dp = {num_gpus} GPUs do not fit {nodes} node(s) of "
                              f"{MAX_GPUS_PER_NODE} GPUs", f"add nodes={need} to {flag}")

    def scheduler_config(self, base: SchedulerConfig, default: str | None = None) -> SchedulerConfig:
        """The pool's scheduler: ``sched`` (else ``default``, else the run's) with the pool's knobs."""
        name = self.sched or default or base.name
        seqs = self.seqs or base.max_num_seqs
        if base.recv_interval != 1 and name != "sglang":  # (the run's own check would send the user to --scheduler)
            raise ConfigError("scheduler.recv_interval", f"only the sglang scheduler polls for requests, and the pool "
                              f"runs {name}", "set sched=sglang in the pool, or drop --scheduler-recv-interval")
        if name == base.name:
            cfg = replace(base, max_num_seqs=seqs)
        else:  # the run's budget knobs belong to the run's scheduler, not this one
            cfg = replace(base, name=name, max_num_seqs=seqs, chunk_size=None, max_num_batched_tokens=None)
        if self.budget is not None:
            from simulator.config.schedulers import BUDGETED_SCHEDULERS, UNBUDGETED_SCHEDULERS

            if name in UNBUDGETED_SCHEDULERS:  # (it moved the KV reservation for activations alone)
                raise ConfigError("budget", f"the pool runs {name}, whose steps no token budget bounds, so budget= "
                                  "would do nothing", f"drop budget=, or set a budgeted sched= "
                                  f"({', '.join(BUDGETED_SCHEDULERS)})")
            cfg = replace(cfg, chunk_size=None, max_num_batched_tokens=self.budget)
        return cfg


def parse_pool(text: str, field: str) -> PoolSpec:
    """``'2x(tp=2,gpu=h100-sxm)'`` -> PoolSpec; ConfigError naming ``field`` otherwise."""
    fix = "write e.g. '2x(tp=2,gpu=h100-sxm)'; keys: " + ", ".join(POOL_KEYS)
    m = _POOL_RE.match(text or "")
    if not m:
        raise ConfigError(field, f"cannot read pool {text!r}", fix)
    values: dict[str, int | str] = {}
    for item in filter(None, (s.strip() for s in (m.group(2) or "").split(","))):
        key, sep, value = (s.strip() for s in item.partition("="))
        key = key.lower()
        if not sep or key not in POOL_KEYS or not value:
            raise ConfigError(field, f"bad entry {item!r} in {text!r}", fix)
        if key in values:  # else the last would win silently
            raise ConfigError(field, f"{key} given twice in {text!r}", "give each key once")
        if key in ("gpu", "sched", "moe"):
            values[key] = value.lower()
        else:
            least = 0 if key == "redundant" else 1  # (no redundant experts is a pool's own choice, as the run's 0)
            if not value.isdigit() or int(value) < least:
                raise ConfigError(field, f"{key} must be {'a whole number' if least == 0 else 'a positive integer'}, "
                                  f"got {value!r}", fix)
            values[key] = int(value)
    num = int(m.group(1))
    if num <= 0:
        raise ConfigError(field, f"needs at least one replica, got {num}", fix)
    from simulator.config.limits import MAX_REPLICAS, MAX_REPLICAS_WHY, MAX_TOKENS

    if num > MAX_REPLICAS:
        raise ConfigError(field, f"{num:,} replicas is more than {MAX_REPLICAS:,} ({MAX_REPLICAS_WHY})",
                          f"give at most {MAX_REPLICAS:,}x(...)")
    budget = values.get("budget")
    if isinstance(budget, int) and budget > MAX_TOKENS:  # else the run blames the GPU's memory (activations)
        raise ConfigError(field, f"budget={budget:,} tokens an iteration is beyond any model's context (at most "
                          f"{MAX_TOKENS:,})", "give budget=N with a token budget, e.g. budget=8192")
    return PoolSpec(num, **values)  # type: ignore[arg-type]


MAX_LINK_LATENCY_S = 10.0  # a KV link's latency, at most (RDMA's is microseconds; a WAN's under a second)


@dataclass(frozen=True)
class KVLink:
    """The link KV caches cross: ``time(bytes) = latency_s + bytes / bytes_per_s``."""

    name: str
    bytes_per_s: float  # effective (rated x efficiency); inf for an ideal link
    latency_s: float

    def transfer_s(self, nbytes: float) -> float:
        if math.isinf(self.bytes_per_s):
            return self.latency_s
        return self.latency_s + nbytes / self.bytes_per_s


def _bandwidth_link(text: str, field: str) -> KVLink | None:
    """``text`` as a bandwidth link (``25GB/s@10us``, ``200Gb/s``), named in its canonical unit; None if it is
    no bandwidth. A unit that does not say bytes or bits is refused: read either way it would be 8x off."""
    m = _BW_RE.match(text)
    if m is None:
        return None
    number, unit = m.group(1), m.group(2)
    if unit not in _BW_UNITS:
        raise ConfigError(field, f"{text!r}: {unit!r} does not say bytes or bits",
                          f"write GB/s for gigabytes a second or Gb/s (Gbps) for gigabits, e.g. '{number}GB/s' "
                          f"or '{number}Gb/s'")
    per_unit, canonical = _BW_UNITS[unit]
    bytes_per_s = float(number) * per_unit
    if bytes_per_s <= 0:
        raise ConfigError(field, f"bandwidth must be positive, got {text!r}", "give a bandwidth above 0, e.g. '25GB/s'")
    name, latency = f"{number}{canonical}", 0.0
    if m.group(3):
        latency_unit = m.group(4).lower()
        latency = float(m.group(3)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[latency_unit]
        if not latency <= MAX_LINK_LATENCY_S:  # (1e20 s ran, and its times lost their precision: TBT 0)
            raise ConfigError(field, f"latency {m.group(3)}{latency_unit} is over {MAX_LINK_LATENCY_S:g} s, no link's",
                              "give a link's latency in us or ms, e.g. '25GB/s@10us'")
        name += f"@{m.group(3)}{latency_unit}"
    return KVLink(name, bytes_per_s, latency)


def check_link_name(text: str, field: str = "kv_link") -> None:
    """Refuse a KV link that is neither ``infinite``, a bandwidth nor a link name (what
    :func:`parse_link` reads, before it looks at a GPU)."""
    from simulator.config.topology import LINK_NAMES, is_link_name

    key = (text or "").strip()
    if _bandwidth_link(key, field) is None and key.lower() not in ("inf", "infinite") and not is_link_name(key):
        import difflib

        name, at, latency = key.partition("@")
        if at and is_link_name(name):  # (a named link's latency is its kind's: only a bandwidth takes one)
            raise ConfigError(field, f"{text!r}: a link name takes no latency ('@{latency}')",
                              f"drop '@{latency}', or give the link as a bandwidth with one, e.g. "
                              f"'50GB/s@{latency or '3us'}'")
        if at and _bandwidth_link(name, field) is not None:
            raise ConfigError(field, f"{text!r}: the latency {latency!r} is not a time in us, ms or s",
                              f"write e.g. '{name}@10us', or drop '@{latency}'")
        if re.match(r"\s*[-+]?\.?\d", name):  # a number the bandwidth form does not read (-5GB/s, 1e9GB/s)
            raise ConfigError(field, f"{text!r} is no bandwidth this reads: digits with an optional fraction, then "
                              "GB/s (bytes), Gb/s or Gbps (bits)", "e.g. '0.5GB/s', '25GB/s@10us', '200Gb/s'")
        lowered = name.lower()
        nics = re.fullmatch(r"(.+?)-?x(\d+)", lowered)  # 'infiniband-400gx8': the NIC count's dash missing
        base, suffix = (nics.group(1), f"-x{nics.group(2)}") if nics else (lowered, "")
        close = difflib.get_close_matches(base, LINK_NAMES, n=1, cutoff=0.6)
        if close and is_link_name(close[0] + suffix):
            fix = f"did you mean {close[0] + suffix!r}? (links: {', '.join(LINK_NAMES)}; a NIC's with -x<N> for N NICs)"
        else:
            fix = (f"use a link name ({', '.join(LINK_NAMES)}; a NIC's with -x<N> for N NICs), a bandwidth "
                   "('25GB/s@10us' in bytes, '200Gb/s' in bits), or 'infinite'")
        raise ConfigError(field, f"unknown link {text!r}", fix)


def parse_link(text: str, gpu: str, field: str = "kv_link", senders: int | None = None) -> KVLink:
    """A topology link name (a NIC's ``-x<N>``: a node's ``N`` NICs), ``<n>GB/s`` (bytes) /
    ``<n>Gb/s`` / ``<n>Gbps`` (bits) with optional ``@<latency>``, or ``infinite``. ``senders``: the GPUs of the
    worker whose link it is (a per-worker link: its share of the node's NICs, one a GPU where there are as many,
    at least one); None: the node's NICs together (one shared link)."""
    bandwidth = _bandwidth_link((text or "").strip(), field)
    if bandwidth is not None:
        return bandwidth
    key = (text or "").strip().lower()
    if key in ("inf", "infinite"):
        return KVLink("infinite", math.inf, 0.0)
    from simulator.config.catalog import get_gpu
    from simulator.config.topology import MAX_GPUS_PER_NODE, get_link, group_link

    check_link_name((text or "").strip(), field)  # (as typed: a bandwidth's unit is case-sensitive)
    spec = get_gpu(gpu)
    link = group_link(get_link(key, spec, field), spec, 2)  # a worker's GPU to its peer's (one mesh link)
    nodes = 1 if senders is None else -(-senders // MAX_GPUS_PER_NODE)  # (a worker over several nodes has theirs)
    nics = float(link.nics_per_node) if senders is None else min(
        max(senders * link.nics_per_node / MAX_GPUS_PER_NODE, 1.0), float(link.nics_per_node * nodes))
    return KVLink(key, link.effective_bytes_per_s * nics, link.latency_s)


@dataclass(frozen=True)
class DisaggLayout:
    """A validated disaggregated layout of a run: pools, their replica and scheduler configs, the link."""

    prefill: PoolSpec
    decode: PoolSpec
    mixed: PoolSpec | None
    link: KVLink
    prefill_replica: ReplicaConfig
    decode_replica: ReplicaConfig
    mixed_replica: ReplicaConfig | None
    prefill_scheduler: SchedulerConfig
    decode_scheduler: SchedulerConfig
    mixed_scheduler: SchedulerConfig | None

    def pools(self) -> list[tuple[SchedulerConfig, ReplicaConfig]]:
        """Each pool's scheduler and replica: prefill, decode, and the mixed pool where there is one."""
        out = [(self.prefill_scheduler, self.prefill_replica), (self.decode_scheduler, self.decode_replica)]
        if self.mixed_scheduler is not None and self.mixed_replica is not None:
            out.append((self.mixed_scheduler, self.mixed_replica))
        return out

    @property
    def num_prefill_workers(self) -> int:
        """Prefill workers: the engine replicas the router picks among, one per attention-DP rank of each
        prefill pool replica (each rank schedules and caches on its own, as in an aggregated run)."""
        return self.prefill.num_replicas * self.prefill_replica.attention_dp

    @property
    def num_prefill_gpus(self) -> int:
        """GPUs the prefill pool occupies."""
        return self.prefill.num_replicas * self.prefill_replica.num_gpus

    @property
    def num_gpus(self) -> int:
        n = self.num_prefill_gpus + self.decode.num_replicas * self.decode_replica.num_gpus
        if self.mixed is not None and self.mixed_replica is not None:
            n += self.mixed.num_replicas * self.mixed_replica.num_gpus
        return n

    def describe(self) -> str:
        """The pools as their replicas are laid out (a tp, pp, dp or ep they inherit from the run is shown)."""
        out = f"prefill {self.prefill.effective(self.prefill_replica)} + decode {self.decode.effective(self.decode_replica)}"
        if self.mixed is not None and self.mixed_replica is not None:
            out += f" + mixed {self.mixed.effective(self.mixed_replica)}"
        return out + f" over {self.link.name}"


def kv_bytes_per_token(replica: ReplicaConfig) -> float:
    """KV bytes of one token for the whole model (all layers, all KV heads): what a transfer moves.
    As the cache stores it (``ModelSpec.kv_bytes_per_token_per_layer``): at the KV cache's dtype
    (``--kv-cache-dtype fp8`` moves half of bf16's bytes), and for MLA the compressed latent
    (``kv_lora_rank + qk_rope_head_dim`` a layer), not K and V of every head; the layers whose KV
    grows with every token only (a hybrid's full-attention layers, not a short window's sliding layers:
    :func:`state_bytes_per_seq` is the rest)."""
    m = replica.model_spec
    return m.num_growing_kv_layers * m.kv_bytes_per_token_per_layer(replica.kv_cache_bytes)


def state_bytes_per_seq(replica: ReplicaConfig) -> float:
    """What a transfer moves of one sequence beside its prompt's per-token KV: a hybrid model's
    recurrent state (every linear-attention layer and head), and a short window's sliding layers'
    window (the window's tokens in each, an upper bound for a shorter prompt); 0.0 for other models."""
    m = replica.model_spec
    window = m.num_windowed_layers * m.sliding_window * m.kv_bytes_per_token_per_layer(replica.kv_cache_bytes)
    return m.num_linear_layers * m.linear_state_bytes_per_gpu_layer(replica.dtype_bytes, 1) + window


# A run flag a pool's key sets for it: a fix written for the run ("pass --nodes 2") names the pool's key instead.
_POOL_FLAG_KEYS = {"--nodes": "nodes=", "--tp": "tp=", "--pp": "pp=", "--attention-dp": "dp=", "--ep": "ep=",
                   "--redundant-experts": "redundant=", "--moe-kernel": "moe=", "--max-num-seqs": "seqs="}


def pool_fix(fix: str | None) -> str | None:
    """``fix`` as a pool's: its run flags named by the pool keys that set them (``--nodes 2`` -> ``nodes=2``)."""
    if fix is None:
        return None
    flags = "|".join(re.escape(f) for f in _POOL_FLAG_KEYS)
    fix = re.sub(rf"({flags}) <= (\d+)", lambda m: f"{_POOL_FLAG_KEYS[m.group(1)]}{m.group(2)} or less", fix)
    fix = re.sub(rf"({flags}) (\d+)", lambda m: f"{_POOL_FLAG_KEYS[m.group(1)]}{m.group(2)}", fix)
    return re.sub(rf"({flags})(?![\w-])", lambda m: _POOL_FLAG_KEYS[m.group(1)], fix)


def link_words(config: RunConfig) -> str:
    """A disaggregated run's KV link scope, and who delivers the first token where not the decode worker (the
    deployments' default), as headers say them."""
    words = "a KV link per worker" if config.kv_link_scope == "per-worker" else "one shared KV link"
    return words + ("; the first token from the prefill worker" if config.first_token_at == "prefill" else "")


def layout_of(config: RunConfig) -> DisaggLayout | None:
    """The run's disaggregated layout, or None for an aggregated run. Validates every pool."""
    if config.prefill_pool is None and config.decode_pool is None:
        if config.mixed_pool is not None:
            raise ConfigError("mixed_pool", "a mixed pool needs --prefill-pool and --decode-pool")
        return None
    if config.prefill_pool is None or config.decode_pool is None:
        missing = "prefill_pool" if config.prefill_pool is None else "decode_pool"
        raise ConfigError(missing, "a disaggregated run needs both pools", f"pass --{missing.replace('_', '-')} too")
    if config.num_replicas != 1:
        raise ConfigError("num_replicas", f"a disaggregated run sizes its pools itself, got --replicas {config.num_replicas}",
                          "give the replica counts in --prefill-pool/--decode-pool, e.g. '2x(tp=2)'")
    prefill = parse_pool(config.prefill_pool, "prefill_pool")
    decode = parse_pool(config.decode_pool, "decode_pool")
    mixed = parse_pool(config.mixed_pool, "mixed_pool") if config.mixed_pool is not None else None

    def build(pool: PoolSpec, field: str, default: str | None, base: SchedulerConfig):  # noqa: ANN202
        pool.check(config.replica, field)
        try:
            replica, sched = pool.replica_config(config.replica), pool.scheduler_config(base, default)
            sched.refuse_budget_below_context(replica.effective_max_model_len,
                                              "budget=" if pool.budget is not None else "--max-num-batched-tokens")
            return replica, sched
        except ConfigError as err:
            raise ConfigError(f"{field} ({err.field})", err.problem, pool_fix(err.fix)) from None

    base = config.scheduler
    # The prefill pool caches prefixes where its sched= or the run's engine would (pool_prefix_cache); the decode pool
    # never does; a mixed pool where its scheduler does (sched=, else the run's), with the CPU tier only if it caches.
    from simulator.config.schedulers import SCHEDULER_NAMES

    if prefill.sched is not None and prefill.sched not in SCHEDULER_NAMES:  # (before its prefix cache is looked up)
        raise ConfigError("prefill_pool (scheduler)", f"unknown scheduler {prefill.sched!r}",
                          f"known: {', '.join(SCHEDULER_NAMES)}")
    pools_run = default_pool_scheduler(base.name)
    runs = {prefill.sched or pools_run, decode.sched or pools_run} | ({mixed.sched or base.name} if mixed else set())
    if pools_run != base.name and base.name not in runs and (prefill.sched is None or decode.sched is None):
        # A research policy no pool runs: the pools without sched= run vllm, the same run as --scheduler vllm's (a sweep
        # over both would simulate one deployment twice); plan refuses it alike (planning.plan.unread_run_options)
        raise ConfigError("scheduler", f"no pool runs {base.name}: a pool without sched= runs vllm under a research "
                          f"policy (sarathi, orca, fastertransformer), as under --scheduler vllm",
                          f"pass --scheduler vllm (the same pools), set sched={base.name} in a pool, or add --mixed-pool "
                          "(which runs --scheduler)")
    policy = pool_prefix_cache(base, prefill.sched or pools_run)
    p_rep, p_sched = build(prefill, "prefill_pool", pools_run,
                           replace(base, prefix_caching=policy is not None, prefix_cache_policy=policy,
                                   cpu_kv_gib=base.cpu_kv_gib if policy is not None else 0.0))
    d_rep, d_sched = build(decode, "decode_pool", pools_run,
                           replace(base, prefix_caching=False, prefix_cache_policy=None, cpu_kv_gib=0.0))
    m_rep, m_sched = build(mixed, "mixed_pool", None, base) if mixed is not None else (None, None)
    if m_sched is not None and m_sched.prefix_cache is None:  # (a CPU tier is the prefix cache's: the pools that cache)
        m_sched = replace(m_sched, cpu_kv_gib=0.0)
    # A worker's link is its share of the node's NICs (per-worker; every transfer's in one shared link), as the
    # slower end sees it: a pool on GPUs without the link is refused, and the transfer runs at the slower side's rate
    senders = p_rep.num_gpus if config.kv_link_scope == "per-worker" else None
    link = min((parse_link(config.kv_link, rep.gpu, senders=senders) for rep in (p_rep, d_rep)),
               key=lambda k: (k.bytes_per_s, -k.latency_s))
    if (config.kv_link or "").strip().lower().startswith("nvlink"):  # (after a GPU without NVLink is refused)
        _check_nvlink_pools(p_rep, prefill.num_replicas, d_rep, decode.num_replicas)
    return DisaggLayout(prefill, decode, mixed, link, p_rep, d_rep, m_rep, p_sched, d_sched, m_sched)


def _check_nvlink_pools(p_rep: ReplicaConfig, num_prefill: int, d_rep: ReplicaConfig, num_decode: int) -> None:
    """Refuse an NVLink KV link between pools that cannot share an NVLink domain: two GPU types (two machines), or
    prefill and decode pools with more GPUs together than one domain holds (an HGX node's 8, a bridged part's pair,
    an NVL72 rack's 72): the router sends any prefill worker's requests to any decode worker, so some handoffs would
    cross the nodes' NICs (a new-user audit found 8 H100s and 8 A100s joined by NVLink)."""
    from simulator.config.topology import MAX_GPUS_PER_NODE, get_link

    fix = "give the NICs between the nodes, e.g. --kv-link infiniband-400g-x8, or a bandwidth such as 50GB/s"
    if p_rep.gpu_spec != d_rep.gpu_spec:  # (specs, not names: one GPU file spelled two ways is one GPU)
        raise ConfigError("kv_link", f"nvlink joins GPUs of one machine, but the prefill pool runs on {p_rep.gpu} and "
                          f"the decode pool on {d_rep.gpu}", fix)
    spec = p_rep.gpu_spec
    domain = 2 if get_link("nvlink", spec).pairwise else spec.nvlink_domain_gpus or MAX_GPUS_PER_NODE
    prefill, decode = num_prefill * p_rep.num_gpus, num_decode * d_rep.num_gpus
    if prefill + decode > domain:
        raise ConfigError("kv_link", f"nvlink joins the GPUs of one NVLink domain ({domain} on {p_rep.gpu}), but the "
                          f"prefill pool ({prefill} GPUs) and the decode pool ({decode}) are {prefill + decode}", fix)


def pool_prefix_cache(base: SchedulerConfig, pool_scheduler: str, run_scheduler: str | None = None) -> str | None:
    """The prefix-cache policy a prefill pool running ``pool_scheduler`` keeps in a run whose scheduler
    options are ``base``, or None where it keeps none. Deployed disaggregated serving (vLLM V1 with a NIXL
    connector, SGLang PD, Dynamo) keeps automatic prefix caching on its prefill workers, so the pool caches where
    the run's engine would by default (``--scheduler``'s, e.g. vllm-v1; or the pool's own ``sched=``, e.g. sglang)
    unless ``--prefix-caching``/``--no-prefix-caching`` says otherwise; the policy is ``--prefix-cache-policy``, else
    the pool's scheduler's, else the run's, else vllm-lru. A decode pool keeps none (its blocks come over the link
    by count); a mixed pool caches as its own scheduler does (its ``sched=``, else the run's). ``run_scheduler``: another
    ``--scheduler`` than ``base``'s (whether the flag changes the pool's cache)."""
    from simulator.config.schedulers import SCHEDULERS

    default = SCHEDULERS[pool_scheduler].prefix_cache or SCHEDULERS[run_scheduler or base.name].prefix_cache
    on = default is not None if base.prefix_caching is None else base.prefix_caching
    if not on:
        return None
    return base.prefix_cache_policy or default or "vllm-lru"


def default_pool_scheduler(run_scheduler: str) -> str:
    """The scheduler a prefill or decode pool without ``sched=`` runs under ``--scheduler run_scheduler`` (and the
    one ``simulate plan`` writes as each pool's ``sched=``): the run's own where its engine serves disaggregated
    pools with it (``SchedulerEntry.serves_pools``: vLLM V1's NIXL-connected workers, SGLang's PD pools; a plan of
    SGLang compares SGLang's aggregated replicas with SGLang's PD pools, and launches what it simulated), else
    :data:`FALLBACK_POOL_SCHEDULER` (a research policy, sarathi, orca or fastertransformer, that no engine deploys
    disaggregated)."""
    from simulator.config.schedulers import SCHEDULERS

    return run_scheduler if SCHEDULERS[run_scheduler].serves_pools else FALLBACK_POOL_SCHEDULER


def prefix_cache_schedulers(config: RunConfig) -> dict[str, str]:
    """The schedulers whose engines' defaults decide whether replicas of ``config`` keep a prefix cache, by where they
    run: ``run`` (``--scheduler``: an aggregated run's replicas, and a prefill pool caches where the run's engine would,
    :func:`pool_prefix_cache`), ``prefill`` (the prefill pool's ``sched=``, else
    :func:`default_pool_scheduler`'s) and ``mixed`` (the mixed pool's
    ``sched=``, else the run's). The decode pool never caches. Reads only the pools' ``sched=`` (:func:`layout_of`
    checks the rest), so a check that runs before the layout is built sees the pools' schedulers, not only the run's."""
    out = {"run": config.scheduler.name}
    if config.prefill_pool is not None:
        out["prefill"] = (parse_pool(config.prefill_pool, "prefill_pool").sched
                          or default_pool_scheduler(config.scheduler.name))
    if config.mixed_pool is not None:
        out["mixed"] = parse_pool(config.mixed_pool, "mixed_pool").sched or config.scheduler.name
    return out


def canonical_pool(text: str | None, field: str) -> str | None:
    return None if text is None else parse_pool(text, field).canonical()


def num_gpus_of(config: RunConfig) -> int:
    """GPUs a run occupies, aggregated or disaggregated."""
    layout = layout_of(config)
    return layout.num_gpus if layout is not None else config.num_replicas * config.replica.num_gpus
