"""Disaggregated prefill/decode vs chunked prefills: the reproduction behind README.md here.

Run from the repository root (about 5 minutes on 2 busy cores)::

    PYTHONPATH=. python results/disaggregation/reproduce.py [--num-requests 300] [--only phase,distserve,slo,gpus,prompt,link]

Writes, beside this file: ``phase_times.csv`` (our cost model vs Splitwise's measured
Llama-2-70B prompt/token times, when ``../shared/data`` is present), ``slo_levels.csv``
(goodput per GPU of every layout of 8 A100s at three SLO levels), ``few_gpus.csv`` (4
GPUs), ``crossover_prompt.csv`` and ``crossover_link.csv`` (at the prompt length where the
best split beats the best aggregated layout by most; needs ``crossover_prompt.csv``),
``distserve_fig2.csv``, and a PNG per table.

Setting: Llama-2-70B on A100-80GB (Splitwise's and DistServe's model class), fixed
prompt/output lengths (2048/128 unless swept), Poisson arrivals, roofline cost model with
the engine model ``ENGINE``,
goodput = the largest rate at which 90% of requests meet both TTFT and TPOT SLOs
(:mod:`simulator.planning.split`), per GPU.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from simulator.config.disagg_layout import layout_of
from simulator.config.run_config import ReplicaConfig, RunConfig
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape
from simulator.planning.split import (
    GoodputSLO,
    aggregated_candidates,
    goodput_search,
    label_of,
    results_frame,
    search_all,
    split_candidates,
)
from simulator.report.plots import save

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[1].parent / "shared" / "data" / "profiles" / "splitwise-sim" / "perf_model.csv"
SLO_LEVELS = {"tight": GoodputSLO(1.0, 0.06), "medium": GoodputSLO(2.0, 0.1), "relaxed": GoodputSLO(5.0, 0.2)}
TPS = (2, 4, 8)
TAUS = (128, 256, 512, 1024)
PROMPTS = (256, 512, 1024, 2048, 3072)
COLORS = {"vllm": "#d62728", "sarathi": "#2ca02c", "disagg": "#1f77b4"}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# The engine model every run here is priced with: the project default, fitted to the same
# Splitwise vLLM measurements that phase_times.csv compares against. Pinned by name so a later
# change of the default does not silently change these tables (the first version of these
# figures used "ideal", the kernels alone; README.md quotes how the findings moved).
ENGINE = "vllm-2023-splitwise"
# DistServe and Splitwise count TTFT at the prefill instance's first token; pinned so the default
# (the decode worker delivers it, as Dynamo/NIXL deployments) leaves these tables as they were.
FIRST_TOKEN_AT = "prefill"
# One KV link that every transfer queues on, as these tables were made (the run default is now a link
# per prefill worker's egress and decode worker's ingress, --kv-link-scope per-worker); pinned so the
# splits with two prefill or decode replicas keep the link they were searched with.
KV_LINK_SCOPE = "shared"
# The batch cap these tables were made with (vLLM V1's default is now the engine's: 256 on the A100).
MAX_NUM_SEQS = 128
# The pools' scheduler, pinned: DistServe's prefill instance (whole prompts), as these tables were made (a pool without
# sched= now runs the run's --scheduler's, vllm-v1; disagg split's layouts, from split_candidates, write sched=vllm).
POOL_SCHEDULER = "vllm"
# The roofline's constants, pinned: these tables were made under the 2023 calibration (the run default is now
# 'today', fitted to today's kernel tables; a rerun under it is a separate change).
CALIBRATION = "2023"


def base_config(num_requests: int, prompt: int = 2048, output: int = 128) -> RunConfig:
    return RunConfig().replace(replica__model="llama-2-70b", replica__gpu="a100-80gb", workload__name="fixed",
                               workload__prompt_tokens=prompt, workload__output_tokens=output,
                               workload__num_requests=num_requests, kv_link="infiniband-200g",
                               engine=ENGINE, first_token_at=FIRST_TOKEN_AT, kv_link_scope=KV_LINK_SCOPE,
                               scheduler__max_num_seqs=MAX_NUM_SEQS, replica__roofline_calibration=CALIBRATION)


def compare(base: RunConfig, gpus: int, slo: GoodputSLO, taus=TAUS) -> pd.DataFrame:  # noqa: ANN001
    cands = aggregated_candidates(base, gpus, TPS, taus) + [("disagg", c) for c in split_candidates(base, gpus, TPS)]
    return results_frame(search_all(cands, slo, qps_start=1.0))


def best_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df.sort_values("goodput_per_gpu", ascending=False, kind="stable").groupby("family", sort=False).head(1)


def disagg_margin(prompts: pd.DataFrame) -> pd.Series:
    """Best disaggregated over best aggregated goodput per GPU, per prompt length."""
    best = prompts.groupby(["prompt_tokens", "family"])["goodput_per_gpu"].max().unstack()
    return best["disagg"] / best.drop(columns="disagg").max(axis=1)


# ------------------------------------------------------------------------------------------------
def phase_times() -> pd.DataFrame | None:
    """Splitwise's measured prompt and token times (Llama-2-70B, vLLM, TP8) beside our roofline,
    with the engine model (``ours_ms``) and the kernels alone (``kernels_ms``)."""
    if not SHARED.exists():
        log("shared data absent: skipping phase times")
        return None
    meas = pd.read_csv(SHARED)
    meas = meas[(meas["model"] == "llama2-70b") & (meas["tensor_parallel"] == 8)]
    rows = []
    for hw, gpu in (("a100-80gb", "a100-80gb"), ("h100-80gb", "h100-sxm")):
        replica = ReplicaConfig(model="llama-2-70b", gpu=gpu, tp=8, roofline_calibration=CALIBRATION)
        cost = load_cost_model("roofline", replica, engine=ENGINE)
        kernels = load_cost_model("roofline", replica)
        m = meas[meas["hardware"] == hw]
        for prompt, grp in m[m["batch_size"] == 1].groupby("prompt_size"):
            shape = BatchShape.from_requests(prefills=[(int(prompt), 0)])
            rows.append({"gpu": gpu, "phase": "prompt", "tokens_or_batch": int(prompt),
                         "splitwise_ms": float(grp["prompt_time"].median()),
                         "ours_ms": cost.iteration_time(shape) * 1e3, "kernels_ms": kernels.iteration_time(shape) * 1e3})
        for batch, grp in m[m["prompt_size"] == 512].groupby("batch_size"):
            # A token step of a batch of `batch` requests, mid-output of 512-token prompts.
            shape = BatchShape.from_requests(decodes=[512 + 64] * int(batch))
            rows.append({"gpu": gpu, "phase": "token", "tokens_or_batch": int(batch),
                         "splitwise_ms": float(grp["token_time"].median()),
                         "ours_ms": cost.iteration_time(shape) * 1e3, "kernels_ms": kernels.iteration_time(shape) * 1e3})
    df = pd.DataFrame(rows)
    df["ours_over_splitwise"] = df["ours_ms"] / df["splitwise_ms"]
    fig = Figure(figsize=(11, 4))
    for ax, phase, xlabel in zip(fig.subplots(1, 2), ("prompt", "token"), ("prompt tokens (batch 1)", "batch size (prompt 512)"), strict=True):
        for gpu, color in (("a100-80gb", "C0"), ("h100-sxm", "C1")):
            d = df[(df["phase"] == phase) & (df["gpu"] == gpu)]
            ax.plot(d["tokens_or_batch"], d["splitwise_ms"], "o-", color=color, label=f"{gpu} Splitwise measured")
            ax.plot(d["tokens_or_batch"], d["ours_ms"], "s--", color=color, label=f"{gpu} servesim roofline + {ENGINE}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=6)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{phase} time (ms)")
        ax.set_title(f"Llama-2-70B TP8 {phase} phase")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, HERE / "phase_times", formats=("png",))
    return df


def slo_levels(n: int) -> pd.DataFrame:
    frames = []
    for name, slo in SLO_LEVELS.items():
        log(f"SLO level {name}: {slo.describe()}")
        df = compare(base_config(n), 8, slo)
        df.insert(0, "slo_level", name)
        df.insert(1, "ttft_slo_s", slo.ttft_s)
        df.insert(2, "tpot_slo_s", slo.tpot_s)
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def plot_slo_levels(out: pd.DataFrame) -> None:
    best = out.sort_values("goodput_per_gpu", ascending=False, kind="stable").groupby(["slo_level", "family"], sort=False).head(1)
    fig = Figure(figsize=(8, 4.6))
    ax = fig.subplots()
    levels = list(SLO_LEVELS)
    width = 0.27
    for k, fam in enumerate(("vllm", "sarathi", "disagg")):
        vals = [best[(best["slo_level"] == lv) & (best["family"] == fam)]["goodput_per_gpu"].max() for lv in levels]
        labels = [best[(best["slo_level"] == lv) & (best["family"] == fam)]["label"].iloc[0] for lv in levels]
        bars = ax.bar(np.arange(len(levels)) + (k - 1) * width, vals, width, color=COLORS[fam], label=fam)
        for bar, lab in zip(bars, labels, strict=True):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), lab.replace(" + ", "\n+"), ha="center",
                    va="bottom", fontsize=5.5, rotation=90)
    ax.set_xticks(range(len(levels)), [f"{lv}\nTTFT<={SLO_LEVELS[lv].ttft_s:g}s, TPOT<={SLO_LEVELS[lv].tpot_s:g}s" for lv in levels])
    ax.set_ylabel("goodput per GPU (req/s, 90% attainment)")
    ax.set_title("Llama-2-70B, 8x A100-80GB, prompt 2048 / output 128: best layout of each family")
    ax.legend(loc="upper left")
    ax.set_ylim(0, best["goodput_per_gpu"].max() * 1.45)
    fig.tight_layout()
    save(fig, HERE / "slo_levels", formats=("png",))


def few_gpus(n: int) -> pd.DataFrame:
    log("4 GPUs, medium SLO")
    df = compare(base_config(n), 4, SLO_LEVELS["medium"])
    df.insert(0, "slo_level", "medium")
    return df


def crossover_link(n: int, split: RunConfig, slo_name: str) -> pd.DataFrame:
    """The split's goodput per link bandwidth: on the one shared link of these tables, then with a
    link per worker (each prefill worker's egress, the decode worker's ingress: the run default)."""
    slo = SLO_LEVELS[slo_name]
    rows = []
    for scope in (KV_LINK_SCOPE, "per-worker"):
        for link in ("1gbps", "2.5gbps", "5gbps", "10gbps", "25gbps", "100gbps", "infiniband-200g", "infinite"):
            log(f"link {link} ({scope})")
            cfg = split.replace(kv_link=link, kv_link_scope=scope, workload__num_requests=n)
            res = goodput_search(cfg, slo, label_of(cfg), "disagg")
            rows.append({"kv_link": link, "link_gbytes_per_s": layout_of(cfg).link.bytes_per_s / 1e9,
                         "label": res.label, "goodput_per_gpu": res.goodput_per_gpu, "rate_qps": res.rate_qps,
                         "kv_link_scope": scope})
    return pd.DataFrame(rows)


def plot_crossover_link(df: pd.DataFrame, agg_best: pd.DataFrame, slo_name: str, prompt: int) -> None:
    slo = SLO_LEVELS[slo_name]
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    if "kv_link_scope" not in df:  # a table from before the per-worker sweep
        df = df.assign(kv_link_scope=KV_LINK_SCOPE)
    for scope, style in ((KV_LINK_SCOPE, "o-"), ("per-worker", "s--")):
        d = df[df["kv_link_scope"] == scope]
        if len(d):
            x = d["link_gbytes_per_s"].replace(np.inf, 1e3)
            ax.plot(x, d["goodput_per_gpu"], style, color=COLORS["disagg"],
                    label=f"disagg {d['label'].iloc[0]}, {'one shared link' if scope == 'shared' else 'a link per worker'}")
    for row in agg_best.itertuples():
        ax.axhline(row.goodput_per_gpu, color=COLORS[row.family], ls="--", label=f"{row.label} (aggregated)")
    ax.set_xscale("log")
    ax.set_xlabel("KV link effective bandwidth (GB/s; 'infinite' drawn at 1000; per worker: each worker's)")
    ax.set_ylabel("goodput per GPU (req/s)")
    ax.set_title(f"Llama-2-70B, prompt {prompt}/output 128, 8x A100-80GB "
                 f"({slo_name} SLO: {slo.describe()})", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    save(fig, HERE / "crossover_link", formats=("png",))


def crossover_prompt(n: int, slo_name: str) -> pd.DataFrame:
    """Every layout of 8 GPUs (aggregated: each TP and tau; disaggregated: every split) per prompt length."""
    slo = SLO_LEVELS[slo_name]
    rows = []
    for prompt in PROMPTS:
        log(f"prompt {prompt}")
        df = compare(base_config(n, prompt=prompt), 8, slo)
        df.insert(0, "prompt_tokens", prompt)
        rows.append(df)
    return pd.concat(rows, ignore_index=True)


def plot_crossover_prompt(out: pd.DataFrame, slo_name: str) -> None:
    slo = SLO_LEVELS[slo_name]
    best = out.sort_values("goodput_per_gpu", ascending=False, kind="stable").groupby(["prompt_tokens", "family"]).head(1)
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for fam in ("vllm", "sarathi", "disagg"):
        d = best[best["family"] == fam].sort_values("prompt_tokens")
        ax.plot(d["prompt_tokens"], d["goodput_per_gpu"], "o-", color=COLORS[fam], label=fam)
    ax.set_xlabel("prompt tokens (output 128)")
    ax.set_ylabel("goodput per GPU (req/s)")
    ax.set_yscale("log")
    # At each prompt length the best family's label goes above its point and the others' below,
    # so points close in goodput keep their labels apart; at the last length, labels end at the point.
    last = best["prompt_tokens"].max()
    for prompt, group in best.groupby("prompt_tokens"):
        ha, dx = ("right", -4) if prompt == last else ("left", 4)
        for rank, row in enumerate(group.sort_values("goodput_per_gpu", ascending=False).itertuples()):
            ax.annotate(row.label.replace("sarathi ", "").replace("vllm ", ""), (row.prompt_tokens, row.goodput_per_gpu),
                        fontsize=5.5, color=COLORS[row.family], xytext=(dx, 4 if rank == 0 else -9),
                        textcoords="offset points", ha=ha)
    ax.set_title(f"8x A100-80GB, best layout per family ({slo_name} SLO: {slo.describe()})", fontsize=8)
    ax.legend()
    fig.tight_layout()
    save(fig, HERE / "crossover_prompt", formats=("png",))


def distserve_fig2(n: int) -> pd.DataFrame:
    """DistServe's motivating example (Fig. 2): a 13B model on A100s, prompts 512 / outputs 64,
    TTFT <= 0.4 s and TPOT <= 0.04 s: colocated on one GPU vs 2 prefill + 1 decode GPUs.
    OPT-13B is not in our catalog; Llama-2-13B has its shape class (40 layers, hidden 5120)."""
    slo = GoodputSLO(0.4, 0.04)
    base = RunConfig().replace(replica__model="llama-2-13b", replica__roofline_calibration=CALIBRATION, workload__name="fixed", workload__prompt_tokens=512,
                               workload__output_tokens=64, workload__num_requests=n, engine=ENGINE,
                               first_token_at=FIRST_TOKEN_AT, kv_link_scope=KV_LINK_SCOPE)
    cands = [("vllm", base.replace(scheduler__name="vllm"))]
    cands += [("sarathi", base.replace(scheduler__name="sarathi", scheduler__chunk_size=t)) for t in (128, 256, 512)]
    cands += [("disagg", base.replace(prefill_pool=p, decode_pool=d))
              for p, d in ((f"2x(tp=1,sched={POOL_SCHEDULER})", f"1x(tp=1,sched={POOL_SCHEDULER})"),
                           (f"1x(tp=1,sched={POOL_SCHEDULER})", f"1x(tp=1,sched={POOL_SCHEDULER})"),
                           (f"1x(tp=1,sched={POOL_SCHEDULER})", f"2x(tp=1,sched={POOL_SCHEDULER})"))]
    log("DistServe Fig. 2 setting")
    return results_frame(search_all(cands, slo, qps_start=1.0, prune=False))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-requests", type=int, default=300)
    parser.add_argument("--only", default="phase,distserve,slo,gpus,prompt,link")
    parser.add_argument("--sweep-slo", default="tight", choices=list(SLO_LEVELS))
    args = parser.parse_args()
    parts = set(args.only.split(","))
    n = args.num_requests
    if "phase" in parts and (df := phase_times()) is not None:
        df.to_csv(HERE / "phase_times.csv", index=False, float_format="%.5g")
    if "distserve" in parts:
        distserve_fig2(n).to_csv(HERE / "distserve_fig2.csv", index=False, float_format="%.5g")
    if "slo" in parts:
        slo_levels(n).to_csv(HERE / "slo_levels.csv", index=False, float_format="%.5g")
    if "gpus" in parts:
        few_gpus(n).to_csv(HERE / "few_gpus.csv", index=False, float_format="%.5g")
    if "prompt" in parts:
        crossover_prompt(n, args.sweep_slo).to_csv(HERE / "crossover_prompt.csv", index=False, float_format="%.5g")
    # The link sweep runs where disaggregation wins by most: the prompt length of the prompt sweep
    # with the largest ratio of the best split to the best aggregated layout.
    prompts = pd.read_csv(HERE / "crossover_prompt.csv") if (HERE / "crossover_prompt.csv").exists() else None
    best = link_prompt = None
    if prompts is not None:
        link_prompt = disagg_margin(prompts).idxmax()
        best = best_rows(prompts[prompts["prompt_tokens"] == link_prompt])
    if "link" in parts and best is not None:
        split_row = best[best["family"] == "disagg"].iloc[0]
        split = base_config(n, prompt=link_prompt).replace(prefill_pool=split_row["prefill_pool"],
                                                           decode_pool=split_row["decode_pool"])
        crossover_link(n, split, args.sweep_slo).to_csv(HERE / "crossover_link.csv", index=False, float_format="%.5g")
    # Figures from the tables (``--only plots`` redraws them without simulating).
    if (HERE / "slo_levels.csv").exists():
        plot_slo_levels(pd.read_csv(HERE / "slo_levels.csv"))
    if prompts is not None:
        plot_crossover_prompt(prompts, args.sweep_slo)
    if best is not None and (HERE / "crossover_link.csv").exists():
        plot_crossover_link(pd.read_csv(HERE / "crossover_link.csv"), best[best["family"] != "disagg"], args.sweep_slo,
                            link_prompt)
    log("done")


if __name__ == "__main__":
    main()
