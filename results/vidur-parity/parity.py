"""Side by side with Vidur: regenerate this folder's CSVs and the tables of its README.

    .venv/bin/python results/vidur-parity/parity.py [--seeds 8] [--work DIR]

Setting (issue 13): Llama-2-70B, TP2 on A100-80GB (pairwise NVLink), max 128 sequences,
block size 16, the ShareGPT trace with every request over 4096 tokens clipped as Vidur
clips it, Poisson 0.4 QPS, 1000 requests; sarathi (budget 512) and vllm. The cost model is
``simulate import-vidur`` + ``simulate fit --tp 2`` on the same Vidur profile CSVs that Vidur
predicts from (``../shared/data/profiles/vidur``).

1. imports and fits the Vidur profiles into ``--work`` (reused when present);
2. runs five configurations per scheduler, each adding one of Vidur's choices:

   - ``own``: servesim as shipped, our own samples of the trace (seeds 1..N);
   - ``own+kv``: the same samples with Vidur's KV block count (``--num-gpu-blocks``);
   - ``vidur_requests``: Vidur's own request table (seed 42: its shuffle of the clipped
     trace and its capped Poisson gaps, rebuilt here), our KV and pricing;
   - ``vidur_requests+kv``: that table with Vidur's KV block count;
   - ``vidur_requests+kv+price``: and Vidur's per-iteration price rules on top of our fitted
     kernels (script-only emulation, :class:`VidurPricing`);

3. writes ``runs.csv`` (one row per run), ``parity.csv`` (figure x configuration, with Vidur's
   figure and the ratio), ``prices.csv`` (hand-made batches priced by us and by Vidur's rules
   read straight from the CSVs) and rewrites the tables between the ``<!-- tables:start -->``
   / ``<!-- tables:end -->`` markers of ``README.md``.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
from rich.progress import Progress

from simulator.config.options import build_config
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel import load_cost_model
from simulator.costmodel.base import BatchShape, CostModel
from simulator.engine import cluster as engine
from simulator.engine.kvcache import DEFAULT_BLOCK_SIZE
from simulator.report.metrics import summarize
from simulator.simulation import simulate
from simulator.workload.generate import RequestTable, clip_lengths

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = ROOT.parent / "shared" / "data"
PROFILES = DATA / "profiles" / "vidur"
TRACE = DATA / "traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
PROFILE_FILES = ("compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv", "network/a100_pairwise_nvlink",
                 "legacy_2024-05/a100/attention.csv")

MODEL, GPU, TP, MAX_TOKENS, QPS, NUM_REQUESTS, CHUNK = "llama-2-70b", "a100-80gb", 2, 4096, 0.4, 1000, 512
VIDUR_SEED = 42  # Vidur's default seed (its request generators and set_seeds)
# The engine preset of every run here, pinned by name (a reproduction of a 2023-24 stack; the run
# default has since become today's vLLM, vllm-2026).
ENGINE = "vllm-2023-splitwise"
# The roofline's constants, pinned: these tables were made under the 2023 calibration (the run default is now
# 'today', fitted to today's kernel tables; a rerun under it is a separate change).
CALIBRATION = "2023"

# Vidur's figures from the issue-13 run (seconds; TBT = decode_token_execution_plus_preemption_time).
VIDUR = {
    "sarathi": {"ttft_s_p50": 1.061, "ttft_s_p99": 6.16, "tbt_s_p50": 0.0598, "tbt_s_p99": 0.2155, "e2e_s_p50": 31.1},
    "vllm": {"ttft_s_p50": 0.943, "ttft_s_p99": 10.27, "tbt_s_p50": 0.0599, "tbt_s_p99": 1.230, "e2e_s_p50": 34.1},
}
FIGURES = {"ttft_s_p50": "TTFT P50", "ttft_s_p99": "TTFT P99", "tbt_s_p50": "TBT P50", "tbt_s_p99": "TBT P99",
           "e2e_s_p50": "E2E P50"}
CONFIGS = {
    "own": "servesim as shipped, own samples",
    "own+kv": "own samples, Vidur's KV blocks",
    "vidur_requests": "Vidur's requests",
    "vidur_requests+kv": "Vidur's requests + KV blocks",
    "vidur_requests+kv+price": "+ Vidur's price rules",
}
# Vidur's per-iteration rules (vidur/execution_time_predictor, default config): a CPU launch cost
# added to every all-reduce, a batching overhead on GQA attention, and no CPU overhead, LM head
# or embedding (``skip_cpu_overhead_modeling`` is on by default; model_time skips the last two).
NCCL_CPU_LAUNCH_S = 0.02e-3
GQA_BATCHING_OVERHEAD = 0.1
MEMORY_MARGIN = 0.1  # Vidur's memory_margin_fraction


# -- Vidur's choices, rebuilt ------------------------------------------------------------------------------
def vidur_num_blocks(replica: ReplicaConfig, max_tokens: int = MAX_TOKENS) -> int:
    """Vidur's KV cache: whole ``max_tokens`` request slots in what the layers' weights leave
    of ``memory * (1 - margin)`` (no embedding, LM head or activations), as blocks."""
    m, tp = replica.model_spec, replica.tp
    d, q, kv = m.head_dim, m.num_heads // tp, math.ceil(m.num_kv_heads / tp)
    per_layer = m.hidden_size * d * (q + 2 * kv) + m.hidden_size * d * q + (3 if m.gated_mlp else 2) * m.hidden_size * m.ffn_size // tp
    weights = 2 * per_layer * m.num_layers
    available = replica.gpu_spec.memory_bytes * (1 - MEMORY_MARGIN)
    per_request = 2 * 2 * d * kv * max_tokens * m.num_layers
    slots = int((available - weights) // per_request)
    return (max_tokens // (replica.block_size or DEFAULT_BLOCK_SIZE)) * slots  # (unset: 16 tokens, Vidur's too)


def vidur_request_table(seed: int = VIDUR_SEED) -> RequestTable:
    """Vidur's synthetic trace-length + Poisson request table for ``seed``: the clipped trace
    shuffled by ``DataFrame.sample(frac=1, random_state=seed)``, rows taken in order, and
    exponential gaps from Python's ``random`` seeded with ``seed``, each capped at 3/qps."""
    df = pd.read_csv(TRACE)
    prompt, output = clip_lengths(df["num_prefill_tokens"].to_numpy(), df["num_decode_tokens"].to_numpy(), MAX_TOKENS)
    order = pd.DataFrame({"p": prompt, "o": output}).sample(frac=1, random_state=seed)
    rng, now, arrivals = random.Random(seed), 0.0, []
    for _ in range(NUM_REQUESTS):
        now += min(-math.log(1.0 - rng.random()) / QPS, 3.0 / QPS)
        arrivals.append(now)
    return RequestTable(np.array(arrivals), order["p"].to_numpy()[:NUM_REQUESTS], order["o"].to_numpy()[:NUM_REQUESTS],
                        f"Vidur's seed-{seed} request table")


class VidurPricing(CostModel):
    """Our fitted kernels, priced by Vidur's per-iteration rules (script-only emulation).

    Adds ``NCCL_CPU_LAUNCH_S`` to each of the two all-reduces of a layer, 10% to decode
    attention when more than one request decodes and to prefill attention when more than one
    chunk runs (GQA models), and drops CPU overhead, embedding and LM head.
    """

    name = "vidur-pricing"

    def __init__(self, base: CostModel) -> None:
        super().__init__(base.replica)
        self.base = base
        m = base.model
        self.gqa = GQA_BATCHING_OVERHEAD if m.num_heads > m.num_kv_heads else 0.0

    def layer_time(self, shape: BatchShape) -> float:
        t = self.base.layer_time(shape) + 2 * NCCL_CPU_LAUNCH_S
        if shape.num_decodes > 1:
            t += self.gqa * self.base.attention_decode(shape)
        if shape.num_prefills > 1:
            t += self.gqa * self.base.attention_prefill(shape)
        return t

    def pre_time(self, shape: BatchShape) -> float:
        return 0.0

    def post_time(self, shape: BatchShape) -> float:
        return 0.0

    def overhead_time(self, shape: BatchShape) -> float:
        return 0.0

    def breakdown(self, shape: BatchShape) -> dict[str, float]:
        return {"layers": self.model.num_layers * self.layer_time(shape)}


@contextmanager
def vidur_pricing():
    """Within the block, runs price iterations with :class:`VidurPricing`."""
    original = engine.load_cost_model
    # Vidur's own rules price the kernels only: the run's engine preset is not layered on them.
    engine.load_cost_model = lambda spec, replica, engine=None: VidurPricing(original(spec, replica))
    try:
        yield
    finally:
        engine.load_cost_model = original


class VidurRulePrice:
    """An iteration priced the way Vidur prices it, read straight from the profile CSVs
    (nearest profiled point or linear interpolation standing in for its random forests)."""

    TOKEN_OPS = ("attn_pre_proj", "attn_post_proj", "attn_rope", "input_layernorm", "post_attention_layernorm",
                 "mlp_up_proj", "mlp_down_proj", "mlp_act", "add")

    def __init__(self, replica: ReplicaConfig) -> None:
        m = replica.model_spec
        mlp = pd.read_csv(PROFILES / PROFILE_FILES[0])
        self.mlp = mlp[mlp.num_tensor_parallel_workers == TP].groupby("num_tokens").median(numeric_only=True)
        att = pd.read_csv(PROFILES / PROFILE_FILES[2])
        att = att[(att.n_q_head == m.num_heads) & (att.n_kv_head == m.num_kv_heads) & (att.num_tensor_parallel_workers == TP)]
        self.prefill, self.decode = att[att.prefill_chunk_size > 0], att[att.prefill_chunk_size == 0]
        ar = pd.read_csv(PROFILES / PROFILE_FILES[1] / "all_reduce.csv")
        ar = ar[(ar.num_workers == TP) & (ar.devices_per_node == TP) & (ar.collective == "all_reduce")]
        self.all_reduce = ar.groupby("size").median(numeric_only=True)
        self.hidden, self.layers = m.hidden_size, m.num_layers

    @staticmethod
    def _grid(df: pd.DataFrame, key: str, at: float, along: str, x: float, col: str) -> float:
        keys = np.sort(df[key].unique())
        rows = df[df[key] == keys[np.argmin(abs(keys - at))]].groupby(along)[col].median()
        return float(np.interp(x, rows.index.to_numpy(), rows.to_numpy()))

    def seconds(self, prefills: list[tuple[int, int]], decodes: list[int]) -> float:
        """``prefills``: (chunk, tokens cached before it); ``decodes``: KV lengths."""
        n = sum(c for c, _ in prefills) + len(decodes)
        n8 = (n + 7) // 8 * 8  # Vidur rounds the batch's tokens up to a multiple of 8
        idx = self.mlp.index.to_numpy()
        ms = sum(float(np.interp(n8, idx, self.mlp[f"time_stats.{op}.median"].to_numpy())) for op in self.TOKEN_OPS)
        ms += 2 * (float(np.interp(n8 * self.hidden * 2, self.all_reduce.index.to_numpy(),
                                   self.all_reduce["time_stats.all_reduce.median"].to_numpy())) + NCCL_CPU_LAUNCH_S * 1e3)
        if prefills:  # one lookup at (sum of cached tokens rounded to 64, sqrt of sum of squared chunks)
            kv = sum(math.ceil(k / 64) * 64 for _, k in prefills)
            chunk = round(math.sqrt(sum(c * c for c, _ in prefills)))
            t = self._grid(self.prefill, "prefill_chunk_size", chunk, "kv_cache_size", kv, "time_stats.attn_prefill.median")
            ms += t * (1 + GQA_BATCHING_OVERHEAD * (len(prefills) > 1))
        if decodes:  # one lookup at (batch, mean KV rounded up to 64)
            k = math.ceil(int(np.mean(decodes)) / 64) * 64
            t = self._grid(self.decode, "batch_size", len(decodes), "kv_cache_size", k, "time_stats.attn_decode.median")
            ms += t * (1 + GQA_BATCHING_OVERHEAD * (len(decodes) > 1))
        return self.layers * ms * 1e-3


# -- runs --------------------------------------------------------------------------------------------------
def fit_artifact(work: Path) -> Path:
    artifact = work / f"{MODEL}-tp{TP}.json"
    if artifact.exists():
        return artifact
    cmd = [sys.executable, "-m", "simulator"]
    subprocess.run([*cmd, "import-vidur", *(str(PROFILES / f) for f in PROFILE_FILES), "--model", MODEL, "--gpu", GPU,
                    "--out", str(work / "profile")], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*cmd, "fit", "--profile", str(work / "profile" / "profile.csv"), "--tp", str(TP),
                    "--out", str(artifact)], check=True, stdout=subprocess.DEVNULL)
    return artifact


def run_one(scheduler: str, artifact: Path, seed: int, table: RequestTable | None, num_gpu_blocks: int | None) -> dict:
    options = {"model": MODEL, "gpu": GPU, "tp": TP, "scheduler": scheduler, "trace": str(TRACE),
               "max_total_tokens": MAX_TOKENS, "over_length": "clip", "qps": QPS, "num_requests": NUM_REQUESTS,
               "cost_model": str(artifact), "seed": seed, "num_gpu_blocks": num_gpu_blocks,
               "engine": ENGINE, "roofline_calibration": CALIBRATION}
    if scheduler == "sarathi":
        options["chunk_size"] = CHUNK
    s = summarize(simulate(build_config(**options), table=table))
    keep = (*FIGURES, "sched_delay_s_p50", "num_preemptions", "kv_cache_tokens")
    return {k: s[k] for k in keep}


def run_all(artifact: Path, seeds: list[int]) -> pd.DataFrame:
    blocks = vidur_num_blocks(ReplicaConfig(MODEL, GPU, tp=TP, roofline_calibration=CALIBRATION))
    vidur_table = vidur_request_table()
    plan = [(sched, cfg, seed) for sched in VIDUR for cfg in ("own", "own+kv") for seed in seeds]
    plan += [(sched, cfg, VIDUR_SEED) for sched in VIDUR for cfg in CONFIGS if cfg.startswith("vidur")]
    rows = []
    with Progress() as progress:
        task = progress.add_task("simulating", total=len(plan))
        for sched, cfg, seed in plan:
            table = vidur_table if cfg.startswith("vidur") else None
            kv = blocks if "kv" in cfg else None
            if cfg.endswith("+price"):
                with vidur_pricing():
                    figures = run_one(sched, artifact, seed, table, kv)
            else:
                figures = run_one(sched, artifact, seed, table, kv)
            rows.append({"scheduler": sched, "config": cfg, "seed": seed, **figures})
            progress.advance(task)
    return pd.DataFrame(rows)


def parity_table(runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (sched, cfg), g in runs.groupby(["scheduler", "config"], sort=False):
        for fig in FIGURES:
            vidur = VIDUR[sched][fig]
            value = float(g[fig].median())
            rows.append({"scheduler": sched, "config": cfg, "figure": fig, "num_seeds": len(g), "value": value,
                         "value_min": float(g[fig].min()), "value_max": float(g[fig].max()), "vidur": vidur,
                         "ratio": value / vidur})
    return pd.DataFrame(rows)


def price_table(artifact: Path) -> pd.DataFrame:
    replica = ReplicaConfig(MODEL, GPU, tp=TP, roofline_calibration=CALIBRATION)
    ours = load_cost_model(str(artifact), replica)
    emulated = VidurPricing(ours)
    rule = VidurRulePrice(replica)
    batches = {
        "decode 13 @ 1500": ([], [1500] * 13),
        "hybrid 499 @ 1024 + 13 decodes @ 1500": ([(499, 1024)], [1500] * 13),
        "prefill 512 @ 0": ([(512, 0)], []),
        "prefill 1730 @ 0": ([(1730, 0)], []),
        "two prefills 1730 @ 0": ([(1730, 0), (1730, 0)], []),
    }
    rows = []
    for name, (prefills, decodes) in batches.items():
        shape = BatchShape.from_requests(prefills, decodes)
        parts = ours.breakdown(shape)
        rows.append({"batch": name, "servesim_ms": 1e3 * ours.iteration_time(shape),
                     "servesim_vidur_rules_ms": 1e3 * emulated.iteration_time(shape),
                     "vidur_rules_from_csv_ms": 1e3 * rule.seconds(prefills, decodes),
                     "cpu_overhead_ms": 1e3 * parts["cpu_overhead"], "lm_head_ms": 1e3 * parts["lm_head_sampling"],
                     "embedding_ms": 1e3 * parts["embedding"],
                     "nccl_launch_ms": 1e3 * 2 * ours.model.num_layers * NCCL_CPU_LAUNCH_S,
                     "gqa_overhead_ms": 1e3 * GQA_BATCHING_OVERHEAD * (parts["attn_decode"] * (len(decodes) > 1)
                                                                      + parts["attn_prefill"] * (len(prefills) > 1))})
    return pd.DataFrame(rows)


# -- README ------------------------------------------------------------------------------------------------
def _cell(row: pd.Series) -> str:
    text = f"{row.value:.4g} ({100 * (row.ratio - 1):+.0f}%)"
    if row.num_seeds > 1:
        text += f" [{row.value_min:.3g}-{row.value_max:.3g}]"
    return text


def markdown(parity: pd.DataFrame, prices: pd.DataFrame, seeds: list[int]) -> str:
    out = []
    for sched in VIDUR:
        label = f"sarathi ({CHUNK})" if sched == "sarathi" else sched
        out.append(f"**{label}** (s; our value, its difference from Vidur's, and for our own samples the median "
                   f"over seeds {seeds[0]}-{seeds[-1]} with the range)\n")
        out.append("| figure | Vidur | " + " | ".join(CONFIGS.values()) + " |")
        out.append("|---|---" + "|---" * len(CONFIGS) + "|")
        p = parity[parity.scheduler == sched]
        for fig, name in FIGURES.items():
            cells = [_cell(p[(p.config == c) & (p.figure == fig)].iloc[0]) for c in CONFIGS]
            out.append(f"| {name} | {VIDUR[sched][fig]:g} | " + " | ".join(cells) + " |")
        out.append("")
    out.append("**One iteration, priced** (ms): ours, ours under Vidur's rules, and Vidur's rules applied to the "
               "raw profile rows\n")
    out.append("| batch | servesim | servesim, Vidur's rules | Vidur's rules on the CSVs | our CPU overhead | our LM head "
               "| Vidur's NCCL launch | Vidur's GQA overhead |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in prices.itertuples():
        out.append(f"| {r.batch} | {r.servesim_ms:.2f} | {r.servesim_vidur_rules_ms:.2f} | {r.vidur_rules_from_csv_ms:.2f} "
                   f"| {r.cpu_overhead_ms:.2f} | {r.lm_head_ms:.2f} | {r.nccl_launch_ms:.2f} | {r.gqa_overhead_ms:.2f} |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="own samples: seeds 1..N")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "servesim-vidur-parity",
                        help="folder for the imported profile and the fitted artifact (reused)")
    args = parser.parse_args()
    if not (PROFILES.exists() and TRACE.exists()):
        raise SystemExit(f"needs the shared data at {DATA} (Vidur profiles and the ShareGPT trace)")
    args.work.mkdir(parents=True, exist_ok=True)
    artifact = fit_artifact(args.work)
    seeds = list(range(1, args.seeds + 1))
    runs = run_all(artifact, seeds)
    parity = parity_table(runs)
    prices = price_table(artifact)
    runs.to_csv(HERE / "runs.csv", index=False, float_format="%.6g")
    parity.to_csv(HERE / "parity.csv", index=False, float_format="%.6g")
    prices.to_csv(HERE / "prices.csv", index=False, float_format="%.4f")
    readme = HERE / "README.md"
    text = readme.read_text()
    tables = f"<!-- tables:start -->\n{markdown(parity, prices, seeds)}\n<!-- tables:end -->"
    readme.write_text(re.sub(r"<!-- tables:start -->.*<!-- tables:end -->", lambda _: tables, text, flags=re.S))
    print(markdown(parity, prices, seeds))


if __name__ == "__main__":
    main()
