"""InferenceX's disaggregated recipes as a table: which deployment ran at each benchmark point.

The older dated dumps of ``silicon_train.csv`` record a disaggregated row's per-worker layout but not its
worker counts (nor DP attention, nor whether the recipe ran MTP). InferenceX's benchmark matrix,
``.github/configs/nvidia-master.yaml`` in SemiAnalysisAI/InferenceX (Apache-2.0), names for every
disaggregated point (model, GPU, precision, framework, ISL/OSL, concurrency) the prefill and decode workers:
``num-worker``, ``tp``, ``ep``, ``dp-attn``, and ``spec-decoding: mtp`` with the recipe file whose name gives
the draft length (``..._mtp3.yaml``). The matrix changed often (over a thousand revisions), so the table is
the union of the snapshots given, each line naming its snapshot.

    python results/validation/silicon/inferencex_recipes.py SNAPSHOT.yaml [...]    # needs PyYAML

Each ``SNAPSHOT.yaml`` is a copy of that file, named ``<owner>__<repo>__<commit>.yaml`` (the repository
and commit it came from). Writes ``simulator/data/inferencex_disagg_recipes.csv``, which
:func:`simulator.calibrate.silicon.recipe_layout` reads, and ``simulator/data/inferencex_agg_images.csv``: at
each aggregated point, the image each matrix entry ran it with and whether it runs MTP, which
:func:`simulator.calibrate.silicon.agg_spec_refusal` reads (the dumps' aggregated rows record the image, not
the speculation).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "simulator" / "data" / "inferencex_disagg_recipes.csv"
AGG_OUT = REPO / "simulator" / "data" / "inferencex_agg_images.csv"
# InferenceX framework -> the silicon rows' backend.
FRAMEWORKS = {"dynamo-trt": "trtllm", "dynamo-sglang": "sglang", "dynamo-vllm": "vllm", "sglang-disagg": "sglang",
              "trtllm-disagg": "trtllm", "vllm-disagg": "vllm"}
_DRAFTS = re.compile(r"mtp(\d+)")


def _draft_tokens(settings: list[str] | None) -> int | None:
    for item in settings or ():
        m = _DRAFTS.search(str(item).rsplit("/", 1)[-1])
        if m:
            return int(m.group(1))
    return None


def _image_name(image: str) -> str:
    """The container image as name:tag, without the host it is pulled from."""
    return str(image).replace("#", "/").rsplit("/", 1)[-1]


def recipes(path: Path) -> list[dict]:
    import yaml

    owner, repo, commit = path.stem.split("__")
    matrix = yaml.safe_load(path.read_text(encoding="utf-8"))
    lines = []
    for key, entry in matrix.items():
        if not isinstance(entry, dict) or not entry.get("disagg"):
            continue
        backend = FRAMEWORKS.get(str(entry.get("framework", "")))
        if backend is None:
            continue
        system = str(entry.get("runner", "")).split("-")[0]
        for seq in entry.get("seq-len-configs", []):
            for point in seq.get("search-space", []):
                prefill, decode = point.get("prefill", {}), point.get("decode", {})
                spec = str(point.get("spec-decoding", "none")).lower()
                drafts = _draft_tokens(prefill.get("additional-settings")) or _draft_tokens(
                    decode.get("additional-settings"))
                for conc in point.get("conc-list", []):
                    lines.append({
                        "backend": backend, "system": system, "model": entry.get("model-prefix", ""),
                        "precision": entry.get("precision", ""), "isl": int(seq["isl"]), "osl": int(seq["osl"]),
                        "concurrency": int(conc), "spec": spec,
                        "num_speculative_tokens": drafts if spec != "none" else 0,
                        "prefill_num_workers": int(prefill["num-worker"]), "prefill_tp": int(prefill["tp"]),
                        "prefill_ep": int(prefill.get("ep", 1)), "prefill_dp_attn": bool(prefill.get("dp-attn")),
                        "decode_num_workers": int(decode["num-worker"]), "decode_tp": int(decode["tp"]),
                        "decode_ep": int(decode.get("ep", 1)), "decode_dp_attn": bool(decode.get("dp-attn")),
                        "image": _image_name(entry.get("image", "")), "matrix_key": key,
                        "snapshot": f"{owner}/{repo}@{commit[:12]}"})
    return lines


def agg_points(path: Path) -> list[dict]:
    """The aggregated (single-node) points of one snapshot: at each (framework, GPU, model, precision,
    ISL/OSL, concurrency), the container image each matrix entry ran it with and whether that entry runs
    MTP (``spec-decoding``). The matrix runs many points twice, as ``<key>`` and ``<key>-mtp``, usually on
    different images, and the dumps' aggregated rows record the image but not the speculation."""
    import yaml

    owner, repo, commit = path.stem.split("__")
    matrix = yaml.safe_load(path.read_text(encoding="utf-8"))
    lines = []
    for key, entry in matrix.items():
        if not isinstance(entry, dict) or entry.get("disagg"):
            continue
        backend = AGG_FRAMEWORKS.get(str(entry.get("framework", "")))
        if backend is None:
            continue
        for seq in entry.get("seq-len-configs", []):
            for point in seq.get("search-space", []):
                low = point.get("conc-start")
                if low is None:
                    continue
                conc = int(low)
                while conc <= int(point.get("conc-end", low)):  # the matrix's concurrencies double from start to end
                    lines.append({
                        "backend": backend, "system": str(entry.get("runner", "")).split("-")[0],
                        "model": entry.get("model-prefix", ""), "precision": entry.get("precision", ""),
                        "isl": int(seq["isl"]), "osl": int(seq["osl"]), "concurrency": conc,
                        "image": _image_name(entry.get("image", "")),
                        "spec": str(point.get("spec-decoding", "none")).lower(), "matrix_key": key,
                        "snapshot": f"{owner}/{repo}@{commit[:12]}"})
                    conc *= 2
    return lines


# InferenceX's single-node framework -> the silicon rows' backend.
AGG_FRAMEWORKS = {"trt": "trtllm", "sglang": "sglang", "vllm": "vllm"}


def _union(table: pd.DataFrame, extra: tuple[str, ...]) -> pd.DataFrame:
    """One line per distinct point (every column but ``extra`` and the snapshot), the snapshots that hold it joined."""
    key = [c for c in table.columns if c not in ("snapshot", *extra)]
    return (table.groupby(key, sort=True, dropna=False)
            .agg(**{c: (c, "first") for c in extra}, snapshot=("snapshot", lambda s: " ".join(sorted(set(s)))))
            .reset_index())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("snapshots", nargs="+", type=Path)
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--agg-out", type=Path, default=AGG_OUT)
    args = p.parse_args()
    # one line per distinct recipe at a point; the snapshots that hold it joined
    table = _union(pd.DataFrame([line for path in args.snapshots for line in recipes(path)]), ("image", "matrix_key"))
    table.to_csv(args.out, index=False)
    print(f"{len(table)} recipe points from {len(args.snapshots)} snapshots -> {args.out}", file=sys.stderr)
    # one line per (aggregated point, image, speculation)
    agg = _union(pd.DataFrame([line for path in args.snapshots for line in agg_points(path)]), ("matrix_key",))
    agg.to_csv(args.agg_out, index=False)
    print(f"{len(agg)} aggregated (point, image, speculation) lines -> {args.agg_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
