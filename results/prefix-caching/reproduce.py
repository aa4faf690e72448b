"""Prefix caching, routers and session traffic: what a prefix cache saves and what routing keeps of it.

Workloads (subsampled so the whole script runs in a few minutes on two CPU cores; every
subsample is stated in the tables' ``workload`` column and the README):

- ``mooncake-conv``: Mooncake's conversation trace, its first 1,000 requests at their recorded
  times (330 s of the hour: the cache starts cold, so the reuse is lower than the hour's 37 %).
- ``mooncake-synth``: Mooncake's synthetic trace, its first 1,000 requests at recorded times.
- ``weka-agents``: the 28 Weka Claude Code sessions, requests that fit Llama-3.1-70B's 131,072-token
  context (the rest dropped, the count stated), their first 600 at the recorded times (21 minutes).
- ``gen-chat``: generated conversations (simulator.workload.sessions.conversations: 1,000-token
  system prompt shared by all, ShareGPT answers, ~5 turns, 30 s think), 300 sessions starting
  at 1/s, closed loop (a user waits for the answer, then thinks).
- ``gen-agents``: generated agent loops (sessions.agents: 8,000 shared tokens of tools, a 10,000
  token task, ~30 short calls with 2 s of tool time), 24 sessions starting at 0.2/s, closed loop.

Deployments: Llama-3.1-70B on H100-SXM, TP4 per replica, and gpt-oss-120b (MoE, MXFP4 weights) on
H100-SXM, TP2 per replica; 8 replicas, vLLM V1 scheduler (prefix caching on by default, 16-token
blocks, vLLM's LRU), roofline kernel prices.

Tables (this folder):
- ``caching.csv``: caching off vs on, each workload and model, least-outstanding router.
- ``routers.csv``: round robin, least outstanding, prefix-aware, session affinity (caching on, Llama).
- ``cache_size.csv``: KV blocks per replica at 0.3, 0.5 and all of the memory plan (Llama, prefix-aware).
- ``cpu_tier.csv``: a CPU KV tier of 0, 256 and 1,024 GiB per replica (Llama, least outstanding).
- ``gpus_at_slo.csv``: fewest replicas (2, 4, 8, 16, 32) whose TTFT P90 is within 5 s, caching off / on with
  least outstanding / on with prefix-aware routing (Mooncake conversation, Weka agents; Llama).
Plots: ``caching.png``, ``routers.png``, ``cache_size.png``, ``gpus_at_slo.png``.

Run from the repository root:  python results/prefix-caching/reproduce.py
Needs ../shared/data (the traces); without it the trace workloads are skipped and said so.
"""

from __future__ import annotations

import csv
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from simulator.config.run_config import ReplicaConfig, RunConfig, SchedulerConfig  # noqa: E402
from simulator.report.metrics import summarize  # noqa: E402
from simulator.report.sessions import session_summary, ttft_split  # noqa: E402
from simulator.simulation import simulate  # noqa: E402
from simulator.workload.generate import RequestTable  # noqa: E402
from simulator.workload.prefix_traces import read_mooncake, read_weka_sessions  # noqa: E402
from simulator.workload.sessions import agents, conversations, generate_sessions  # noqa: E402

OUT = Path(__file__).resolve().parent
DATA = ROOT.parent / "shared" / "data" / "traces"
SEED = 0
NUM_REPLICAS = 8
TTFT_SLO_S = 5.0  # P90
MODELS = {  # name -> (model, gpu, tp, weight dtype, context)
    "llama-3.1-70b": ("llama-3.1-70b", "h100-sxm", 4, "bf16", 131_072),
    "gpt-oss-120b": ("gpt-oss-120b", "h100-sxm", 2, "mxfp4", 131_072),
}


# -- workloads -----------------------------------------------------------------------------------
def _trace_table(trace, n: int, scale: float, limit: int, label: str) -> RequestTable:  # noqa: ANN001
    keep = np.flatnonzero(trace.num_prompt_tokens + trace.num_output_tokens <= limit)
    dropped = len(trace) - len(keep)
    keep = keep[:n]
    at = trace.arrival_s[keep]
    at = (at - at[0]) / scale
    desc = f"{label}: first {len(keep)} of {len(trace)} requests" + (f" ({dropped} over {limit} tokens dropped)"
                                                                        if dropped else "")
    desc += f", recorded times / {scale:g}" if scale != 1 else ", recorded times"
    return RequestTable(at, trace.num_prompt_tokens[keep], trace.num_output_tokens[keep], desc,
                        block_hashes=tuple(trace.block_hashes[i] for i in keep.tolist()),
                        hash_block_size=trace.hash_block_size, session_id=trace.session_id[keep])


def workloads() -> dict[str, RequestTable]:
    out: dict[str, RequestTable] = {}
    mooncake = DATA / "mooncake"
    if mooncake.is_dir():
        out["mooncake-conv"] = _trace_table(read_mooncake(str(mooncake / "conversation_trace.jsonl")), 1000, 1.0,
                                            131_072, "Mooncake conversation")
        out["mooncake-synth"] = _trace_table(read_mooncake(str(mooncake / "synthetic_trace.jsonl")), 1000, 1.0,
                                             131_072, "Mooncake synthetic")
    weka = DATA / "weka_claude_code" / "sessions"
    if weka.is_dir():
        out["weka-agents"] = _trace_table(read_weka_sessions(str(weka)), 600, 1.0, 131_072, "Weka Claude Code sessions")
    if not out:
        print(f"note: {DATA} not found: trace workloads skipped", file=sys.stderr)
    rng = np.random.default_rng(SEED)
    out["gen-chat"] = generate_sessions(conversations(300, session_rate=1.0, max_prompt_tokens=131_072), rng)
    out["gen-agents"] = generate_sessions(agents(24, session_rate=0.2, max_prompt_tokens=131_072), rng)
    return out


# The engine preset of every run here, pinned by name: these tables were made under the 2023 default
# (vllm-2023-splitwise) before the run default became today's vLLM (vllm-2026).
ENGINE = "vllm-2023-splitwise"
# The roofline's constants, pinned: these tables were made under the 2023 calibration (the run default is now
# 'today', fitted to today's kernel tables; a rerun under it is a separate change).
CALIBRATION = "2023"


# -- one run -------------------------------------------------------------------------------------
def config(model: str, caching: bool, router: str, replicas: int = NUM_REPLICAS,
           num_gpu_blocks: int | None = None, cpu_kv_gib: float = 0.0) -> RunConfig:
    name, gpu, tp, dtype, context = MODELS[model]
    return RunConfig(replica=ReplicaConfig(name, gpu, tp=tp, dtype=dtype, max_model_len=context,
                                           num_gpu_blocks=num_gpu_blocks, roofline_calibration=CALIBRATION),
                     # vLLM V1's budget and batch cap as these tables were made (2048 and 128; the defaults
                     # are now the engine's, 8192 and 1024 on H100-class GPUs)
                     scheduler=SchedulerConfig("vllm-v1", prefix_caching=caching, cpu_kv_gib=cpu_kv_gib,
                                               max_num_batched_tokens=2048, max_num_seqs=128),
                     num_replicas=replicas, router=router, seed=SEED, engine=ENGINE)


def run(cfg: RunConfig, table: RequestTable) -> dict[str, float]:
    t0 = time.perf_counter()
    result = simulate(cfg, table, record_iterations=False)
    summary = summarize(result)
    split = ttft_split(result)
    cache = summary.get("prefix_caching") or {}
    sessions = session_summary(result)
    served = [r for r in result.requests if r.completed_at is not None]
    span = max(r.completed_at for r in served) - min(r.arrival_at for r in result.requests)
    row = {
        "replicas": cfg.num_replicas, "gpus": cfg.num_replicas * cfg.replica.tp, "router": cfg.router,
        "caching": cfg.scheduler.prefix_cache is not None, "kv_blocks": result.memory.num_blocks,
        "hit_rate": cache.get("hit_rate", 0.0), "prefill_tokens_saved": cache.get("prefill_tokens_saved", 0),
        "cpu_kv_gib": cfg.scheduler.cpu_kv_gib, "cpu_hit_rate": cache.get("cpu_hit_rate", 0.0),
        "ttft_p50_s": split["ttft_s_p50"], "ttft_p90_s": split["ttft_s_p90"], "ttft_p99_s": split["ttft_s_p99"],
        "ttft_queue_mean_s": split["ttft_queue_s_mean"], "ttft_prefill_mean_s": split["ttft_prefill_s_mean"],
        "e2e_p50_s": summary["e2e_s_p50"], "tpot_p50_s": summary["tpot_s_p50"],
        "output_tok_s": sum(r.num_output_tokens for r in served) / span,
        "requests_per_s": len(served) / span, "num_requests": len(result.requests), "num_served": len(served),
        "session_span_p50_s": sessions.get("session_span_s_p50", float("nan")),
        "session_ttft_sum_p50_s": sessions.get("session_ttft_sum_s_p50", float("nan")),
        "wall_s": time.perf_counter() - t0,
    }
    return {k: (round(v, 5) if isinstance(v, float) else v) for k, v in row.items()}


def write(name: str, rows: list[dict]) -> None:
    """The rows without their wall times (the tables stay the same from run to run)."""
    rows = [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]
    fields = list(dict.fromkeys(k for row in rows for k in row))
    with open(OUT / name, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {name} ({len(rows)} rows)")


def _log(label: str, row: dict) -> None:
    print(f"  {label:55s} hit {row['hit_rate']:.3f}  TTFT p50 {row['ttft_p50_s']:8.3f} p90 {row['ttft_p90_s']:8.3f}"
          f"  out {row['output_tok_s']:8.1f} tok/s  ({row['wall_s']:.1f} s)", flush=True)


# -- experiments ---------------------------------------------------------------------------------
def caching_rows(tables: dict[str, RequestTable]) -> list[dict]:
    rows = []
    for model in MODELS:
        for wl, table in tables.items():
            for caching in (False, True):
                row = {"model": model, "workload": wl, **run(config(model, caching, "least_outstanding"), table)}
                _log(f"{model} {wl} caching={caching}", row)
                rows.append(row)
    return rows


def router_rows(tables: dict[str, RequestTable]) -> list[dict]:
    rows = []
    for wl, table in tables.items():
        has_sessions = table.session_id is not None and (table.session_id >= 0).any()
        for router in ("round_robin", "least_outstanding", "prefix_aware") + (("session",) if has_sessions else ()):
            row = {"model": "llama-3.1-70b", "workload": wl, **run(config("llama-3.1-70b", True, router), table)}
            _log(f"{wl} {router}", row)
            rows.append(row)
    return rows


def cache_size_rows(tables: dict[str, RequestTable]) -> list[dict]:
    rows = []
    full = simulate(config("llama-3.1-70b", True, "prefix_aware"), RequestTable([0.0], [16], [1], "probe")).memory
    for wl in ("mooncake-conv", "weka-agents"):
        if wl not in tables:
            continue
        for share in (0.3, 0.5, 1.0):
            blocks = int(full.num_blocks * share)
            if blocks * 16 < 131_072 + 16:  # a replica must hold one longest request
                continue
            row = {"model": "llama-3.1-70b", "workload": wl, "kv_share": share,
                   **run(config("llama-3.1-70b", True, "prefix_aware", num_gpu_blocks=blocks), tables[wl])}
            _log(f"{wl} kv x{share}", row)
            rows.append(row)
    return rows


SLO_REPLICAS = (2, 4, 8, 16, 32)


CPU_TIER_GIB = (0.0, 256.0, 1024.0)


def cpu_tier_rows(tables: dict[str, RequestTable]) -> list[dict]:
    """The CPU tier: host memory per replica for blocks evicted from the GPUs (Llama, least outstanding,
    the router that scatters sessions over the most caches)."""
    rows = []
    for wl in ("mooncake-conv", "weka-agents"):
        if wl not in tables:
            continue
        for gib in CPU_TIER_GIB:
            row = {"model": "llama-3.1-70b", "workload": wl,
                   **run(config("llama-3.1-70b", True, "least_outstanding", cpu_kv_gib=gib), tables[wl])}
            _log(f"{wl} cpu tier {gib:g} GiB (cpu hits {row['cpu_hit_rate']:.3f})", row)
            rows.append(row)
    return rows


def gpus_at_slo_rows(tables: dict[str, RequestTable]) -> list[dict]:
    """Fewest replicas of SLO_REPLICAS whose TTFT P90 <= TTFT_SLO_S, per setting."""
    rows = []
    for wl in ("mooncake-conv", "weka-agents"):
        if wl not in tables:
            continue
        for caching, router in ((False, "least_outstanding"), (True, "least_outstanding"), (True, "prefix_aware")):
            found = None
            for replicas in SLO_REPLICAS:
                row = run(config("llama-3.1-70b", caching, router, replicas=replicas), tables[wl])
                _log(f"{wl} caching={caching} {router} x{replicas}", row)
                if row["ttft_p90_s"] <= TTFT_SLO_S:
                    found = row
                    break
            rows.append({"model": "llama-3.1-70b", "workload": wl, "setting": f"caching {'on' if caching else 'off'}, "
                         f"{router}", "ttft_p90_slo_s": TTFT_SLO_S, "met": found is not None,
                         **(found or {"replicas": f">{SLO_REPLICAS[-1]}"})})
    return rows


# -- plots ---------------------------------------------------------------------------------------
def plots(caching: list[dict], routers: list[dict], sizes: list[dict], slo: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for ax, model in zip(axes, MODELS, strict=True):
        rows = [r for r in caching if r["model"] == model]
        wls = list(dict.fromkeys(r["workload"] for r in rows))
        x = np.arange(len(wls))
        for k, on in enumerate((False, True)):
            vals = [next(r["ttft_p50_s"] for r in rows if r["workload"] == w and r["caching"] == on) for w in wls]
            ax.bar(x + (k - 0.5) * 0.4, vals, 0.4, label=f"caching {'on' if on else 'off'}")
        ax.set_xticks(x, wls, rotation=20)
        ax.set_yscale("log")
        ax.set_ylabel("TTFT P50 (s)")
        ax.set_title(f"{model}, {NUM_REPLICAS} replicas, least outstanding")
        ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "caching.png", dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    wls = list(dict.fromkeys(r["workload"] for r in routers))
    names = ("round_robin", "least_outstanding", "prefix_aware", "session")
    x = np.arange(len(wls))
    for k, router in enumerate(names):
        hit = [next((r["hit_rate"] for r in routers if r["workload"] == w and r["router"] == router), np.nan) for w in wls]
        ttft = [next((r["ttft_p50_s"] for r in routers if r["workload"] == w and r["router"] == router), np.nan)
                for w in wls]
        axes[0].bar(x + (k - 1.5) * 0.2, hit, 0.2, label=router)
        axes[1].bar(x + (k - 1.5) * 0.2, ttft, 0.2, label=router)
    axes[0].set_ylabel("prefix cache hit rate (prompt tokens)")
    axes[1].set_ylabel("TTFT P50 (s)")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xticks(x, wls, rotation=20)
        ax.legend(fontsize=8)
    fig.suptitle(f"Routers, caching on: Llama-3.1-70B H100 TP4 x {NUM_REPLICAS}")
    fig.tight_layout()
    fig.savefig(OUT / "routers.png", dpi=110)
    plt.close(fig)

    if sizes:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        for wl in dict.fromkeys(r["workload"] for r in sizes):
            rows = [r for r in sizes if r["workload"] == wl]
            axes[0].plot([r["kv_share"] for r in rows], [r["hit_rate"] for r in rows], "o-", label=wl)
            axes[1].plot([r["kv_share"] for r in rows], [r["ttft_p50_s"] for r in rows], "o-", label=wl)
        axes[0].set_ylabel("hit rate")
        axes[1].set_ylabel("TTFT P50 (s)")
        axes[1].set_yscale("log")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("KV cache per replica (share of the memory plan)")
            ax.legend()
        fig.suptitle("Cache size: Llama-3.1-70B H100 TP4, prefix-aware router")
        fig.tight_layout()
        fig.savefig(OUT / "cache_size.png", dpi=110)
        plt.close(fig)

    if slo:
        fig, ax = plt.subplots(figsize=(8, 4))
        labels = [f"{r['workload']}\n{r['setting']}" for r in slo]
        gpus = [r["gpus"] if r["met"] else 0 for r in slo]
        ax.barh(np.arange(len(slo)), gpus)
        for i, r in enumerate(slo):
            ax.text(gpus[i], i, f" {r['gpus']}" if r["met"] else f" not met with {SLO_REPLICAS[-1]} replicas",
                    va="center", fontsize=8)
        ax.set_yticks(np.arange(len(slo)), labels, fontsize=8)
        ax.set_xlabel(f"H100s needed for TTFT P90 <= {TTFT_SLO_S:g} s (Llama-3.1-70B TP4 replicas)")
        fig.tight_layout()
        fig.savefig(OUT / "gpus_at_slo.png", dpi=110)
        plt.close(fig)


def main() -> None:
    import argparse

    # No options: the tables are what this script was made with; --help says what it does.
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    t0 = time.perf_counter()
    tables = workloads()
    for name, table in tables.items():
        print(f"{name}: {table.source}")
    print("caching off vs on")
    caching = caching_rows(tables)
    write("caching.csv", caching)
    print("routers")
    routers = router_rows(tables)
    write("routers.csv", routers)
    print("cache size")
    sizes = cache_size_rows(tables)
    if sizes:
        write("cache_size.csv", sizes)
    print("CPU tier")
    tier = cpu_tier_rows(tables)
    if tier:
        write("cpu_tier.csv", tier)
    print("GPUs at the TTFT SLO")
    slo = gpus_at_slo_rows(tables)
    if slo:
        write("gpus_at_slo.csv", slo)
    with open(OUT / "workloads.txt", "w") as fh:
        for name, table in tables.items():
            fh.write(f"{name}: {table.source}\n")
    plots(caching, routers, sizes, slo)
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
