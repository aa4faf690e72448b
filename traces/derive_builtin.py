"""Derive the built-in workloads' length distributions: ``simulator/data/builtin_workloads.json``.

Run from the repository root (needs the shared data folder for ``sharegpt``)::

    .venv/bin/python traces/derive_builtin.py [--shared ../shared/data] [--bins 24]

``sharegpt``
    A joint 2-D histogram of (prompt, output) token counts of Sarathi-Serve's processed
    openchat_sharegpt4 trace ``sharegpt_8k_filtered_stats_llama2_tokenizer.csv`` (30,731
    rows, Llama-2 tokenizer, prompt+output <= 8192). Bin edges are log-spaced between each
    axis' min and max+1, rounded up to integers (duplicates merged), so bin i holds the
    integers ``edges[i] .. edges[i+1]-1``. Only the counts and edges are shipped, not the rows.

``arxiv``
    The matching Sarathi-Serve arxiv-summarization trace (16k-filtered, median prompt 7059)
    is not public in a usable size, and the shared 4k-filtered Vidur file has different
    statistics. So the built-in is a parametric fit to Sarathi-Serve (OSDI'24) Table 2:
    lognormal prompt and output lengths joined by a Gaussian copula, conditioned on
    prompt+output <= 16384 (the trace's filter), with (mu, sigma) per marginal solved so
    that the *filtered* medians and P90s equal the published ones. Correlation: the
    published statistics carry no joint information and the 4k-filtered file's own
    Spearman (-0.11) is an artefact of its total-length cap: within prompt windows where
    the cap does not bind (e.g. 500-2500 prompt tokens) it is 0.01 to 0.04. So rho = 0.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.workload.generate import _LognormalCopula  # noqa: E402

OUT = ROOT / "simulator" / "data" / "builtin_workloads.json"
SHAREGPT_FILE = "traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
SHAREGPT_SOURCE = {
    "file": "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "repo": "microsoft/sarathi-serve",
    "path": "data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "commit": "72339db5b120614033b317880ad3a05a5e4c9415",
    "blob": "85fc0434bc46d2b68351dfb86a43a995877dbb0e",
    "license": "Apache-2.0",
}
SHAREGPT_TABLE2 = {"prompt_median": 1730, "prompt_p90": 5696, "output_median": 415, "output_p90": 834}
ARXIV_TABLE2 = {"prompt_median": 7059, "prompt_p90": 12985, "output_median": 208, "output_p90": 371}
ARXIV_MAX_TOTAL = 16384
Z90 = 1.2815515655446004  # standard normal 0.9 quantile


def git_blob_id(path: Path) -> str:
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def integer_log_edges(lo: int, hi: int, bins: int) -> list[int]:
    edges = np.unique(np.ceil(np.geomspace(lo, hi + 1, bins + 1) - 1e-9).astype(np.int64))
    edges[0], edges[-1] = lo, hi + 1
    return [int(e) for e in edges]


def derive_sharegpt(shared: Path, bins: int) -> dict:
    path = shared / SHAREGPT_FILE
    blob = git_blob_id(path)
    if blob != SHAREGPT_SOURCE["blob"]:
        raise SystemExit(f"{path}: blob {blob} is not the expected {SHAREGPT_SOURCE['blob']}")
    frame = pd.read_csv(path)
    prompt = frame["num_prefill_tokens"].to_numpy()
    output = frame["num_decode_tokens"].to_numpy()
    p_edges = integer_log_edges(int(prompt.min()), int(prompt.max()), bins)
    o_edges = integer_log_edges(int(output.min()), int(output.max()), bins)
    counts, _, _ = np.histogram2d(prompt, output, bins=[p_edges, o_edges])
    assert counts.sum() == len(prompt)
    stats = {
        "rows": len(prompt),
        "prompt_median": float(np.median(prompt)), "prompt_p90": float(np.quantile(prompt, 0.9)),
        "output_median": float(np.median(output)), "output_p90": float(np.quantile(output, 0.9)),
        "spearman": float(pd.Series(prompt).corr(pd.Series(output), method="spearman")),
        "pd_ratio_median": float(np.median(prompt / output)),
    }
    return {
        "kind": "log_histogram_2d",
        "label": "Sarathi-Serve openchat_sharegpt4 joint histogram",
        "source": SHAREGPT_SOURCE,
        "derivation": (f"np.histogram2d of (num_prefill_tokens, num_decode_tokens) over all {len(prompt)} rows; "
                       f"{bins} log-spaced bins per axis between min and max+1, rounded up to integer edges "
                       "(duplicates merged); bin i holds integers edges[i]..edges[i+1]-1. Sampling: a cell by its "
                       "count, then each length log-uniformly within the cell's integer range. "
                       "Derived by traces/derive_builtin.py."),
        "max_total_tokens": 8192,
        "published": {"reference": "Sarathi-Serve (Agrawal et al., OSDI 2024) Table 2, openchat_sharegpt4",
                      **SHAREGPT_TABLE2},
        "source_stats": stats,
        "prompt_edges": p_edges,
        "output_edges": o_edges,
        "counts": counts.astype(int).tolist(),
    }


def fit_arxiv(num_draws: int = 2_000_000, iterations: int = 40) -> dict:
    """(mu, sigma) per marginal so that quantiles *after* the total-length filter hit the targets."""
    t = ARXIV_TABLE2
    params = {
        "prompt": {"log_mu": math.log(t["prompt_median"]), "log_sigma": math.log(t["prompt_p90"] / t["prompt_median"]) / Z90},
        "output": {"log_mu": math.log(t["output_median"]), "log_sigma": math.log(t["output_p90"] / t["output_median"]) / Z90},
    }
    spec = {"rho": 0.0, **params}
    for _ in range(iterations):
        rng = np.random.default_rng(12345)  # common random numbers: a smooth fixed-point iteration
        prompt, output = _LognormalCopula(spec).sample(num_draws, rng)
        keep = prompt + output <= ARXIV_MAX_TOTAL
        for axis, values in (("prompt", prompt[keep]), ("output", output[keep])):
            med, p90 = np.quantile(values, [0.5, 0.9])
            p = spec[axis]
            p["log_mu"] += math.log(t[f"{axis}_median"] / med)
            p["log_sigma"] *= math.log(t[f"{axis}_p90"] / t[f"{axis}_median"]) / math.log(p90 / med)
    achieved = {}
    rng = np.random.default_rng(54321)
    prompt, output = _LognormalCopula(spec).sample(num_draws, rng)
    keep = prompt + output <= ARXIV_MAX_TOTAL
    for axis, values in (("prompt", prompt[keep]), ("output", output[keep])):
        achieved[f"{axis}_median"] = float(np.median(values))
        achieved[f"{axis}_p90"] = float(np.quantile(values, 0.9))
    achieved["share_kept"] = float(keep.mean())
    return {
        "kind": "lognormal_copula",
        "label": "lognormal fit to Sarathi-Serve Table 2 arxiv-summarization",
        "source": {"reference": "Sarathi-Serve (Agrawal et al., OSDI 2024) Table 2, arxiv-summarization "
                                "(Llama-2 tokenizer, 16k-filtered trace)"},
        "derivation": ("prompt and output lengths lognormal, joined by a Gaussian copula with correlation rho, "
                       f"rounded to integers >= 1 and conditioned on prompt+output <= {ARXIV_MAX_TOTAL}; "
                       "(log_mu, log_sigma) per marginal solved by a fixed-point iteration over "
                       f"{num_draws} common random draws so the filtered median and P90 equal the published "
                       "ones. rho = 0: the published statistics carry no joint information and the shared 4k-"
                       "filtered arxiv file shows Spearman 0.01-0.04 wherever its length cap does not bind. "
                       "Derived by traces/derive_builtin.py."),
        "max_total_tokens": ARXIV_MAX_TOTAL,
        "published": ARXIV_TABLE2,
        "fit_check": achieved,
        **spec,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--bins", type=int, default=24)
    args = parser.parse_args()
    data = {
        "schema": 1,
        "about": "Built-in workload length distributions for simulator.workload.generate; regenerate with "
                 "traces/derive_builtin.py. See traces/README.md.",
        "sharegpt": derive_sharegpt(args.shared, args.bins),
        "arxiv": fit_arxiv(),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    # Each innermost list of numbers on one line: the file stays small and diffable.
    text = re.sub(r"\[[^\[\]{}\"]*\]", lambda m: " ".join(m.group(0).split()), json.dumps(data, indent=1))
    OUT.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
    print("sharegpt source stats:", data["sharegpt"]["source_stats"])
    print("arxiv fit:", {k: data["arxiv"][k] for k in ("prompt", "output", "rho", "fit_check")})


if __name__ == "__main__":
    main()
