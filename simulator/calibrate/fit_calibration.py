"""Calibrate the roofline's efficiency constants against measured profiles (``simulate calibrate``).

For each GPU with public measurements the constants of
:class:`~simulator.costmodel.calibration.RooflineCalibration` are fitted by robust least
squares on ``log(predicted / measured)`` (so every row weighs by its *relative* error, and a
soft-L1 loss keeps a few noisy rows from steering the fit), in three stages, each with the
previous stages' constants fixed:

1. token ops (GEMMs: compute efficiency, its half-saturation token count, weight-read
   memory efficiency; elementwise, residual-add and embedding memory efficiencies; the
   kernel floor) from every Vidur ``mlp.csv`` of a catalog model on that GPU, all TP degrees;
2. attention (FlashAttention prefill compute efficiency, decode memory efficiency and
   per-sequence cost) from Vidur's A100 attention table (Llama-2-70B, TP2); A40 and H100
   take the A100 values (no Vidur attention table for them);
3. TP all-reduce (fixed latency, bus efficiency) from Vidur's single-node NCCL tables
   (DGX, NVSwitch), and the send/recv latency as the median time of the smallest messages.

LLMServingSim's H100 ``layers.csv``/``attention.csv`` are *reported* against (see
``results/fidelity``) but not fitted: that harness's kernels run an order of magnitude
below the memory roofline, and fitting them would make every H100 prediction pessimistic.
Where a GPU has no table for a stage its hand-set defaults stay and the source says so.
CPU-side overhead is not calibrated: the only public table (Vidur's 2023 pre-release
``cpu_overheads.csv``) measures a 2023 vLLM whose Python overheads later releases removed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from simulator.calibrate.fit_data import read_profile
from simulator.config.catalog import get_model
from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.config.shared_data import SHARED_DATA
from simulator.costmodel.base import BatchShape
from simulator.costmodel.calibration import DEFAULT, RooflineCalibration
from simulator.costmodel.roofline import RooflineCostModel

DATA_DIR = SHARED_DATA / "profiles"
TOKEN_CAL_OPS = ("qkv_proj", "attn_out_proj", "mlp_up_gate", "mlp_down", "mlp_act", "norms", "rotary", "residual_add",
                 "embedding")


@dataclass(frozen=True)
class GpuSources:
    """The public tables that calibrate one catalog GPU (paths relative to the profiles folder)."""

    gpu: str
    vidur_name: str
    mlp_glob: str
    extra_layers: tuple[str, ...] = ()
    attention: tuple[tuple[str, str, int], ...] = ()  # (path, model, tp)
    all_reduce: str | None = None
    send_recv: str | None = None


SOURCES = (
    GpuSources("a100-80gb", "a100", "vidur/compute/a100/*/*/mlp.csv",
               attention=(("vidur/legacy_2024-05/a100/attention.csv", "llama-2-70b", 2),),
               all_reduce="vidur/network/a100_dgx/all_reduce.csv", send_recv="vidur/network/a100_dgx/send_recv.csv"),
    GpuSources("a40", "a40", "vidur/compute/a40/*/*/mlp.csv",
               send_recv="vidur/network/a40_pairwise_nvlink/send_recv.csv"),
    GpuSources("h100-sxm", "h100", "vidur/compute/h100/*/*/mlp.csv",
               all_reduce="vidur/network/h100_dgx/all_reduce.csv", send_recv="vidur/network/h100_dgx/send_recv.csv"),
)
# GPUs whose attention constants come from another part's table (see the module docstring).
ATTENTION_FROM = {"a40": "a100-80gb", "h100-sxm": "a100-80gb"}
# LLMServingSim's H100 tables (llmservingsim/H100/...) are not applied: its kernels run an order of
# magnitude below the memory roofline (a 1-token layer norm takes 18 us, a 65K-token single-sequence
# decode reads KV at 38 GB/s), which says more about that harness than about H100 attention.
# Catalog GPUs without their own tables take the constants of the same-architecture part.
TRANSFERS = {"a100-40gb": "a100-80gb", "h100-pcie": "h100-sxm", "h200": "h100-sxm"}


def data_dir(path: str | Path | None = None) -> Path:
    d = Path(path) if path else DATA_DIR
    if not d.is_dir():
        raise ConfigError("data", f"profile folder {d} not found", "pass --data PATH to ../shared/data/profiles")
    return d


# -- predictions of a roofline for tidy rows --------------------------------------------------------------------
def roofline_token_predictions(rows: pd.DataFrame, gpu: str, cal: RooflineCalibration) -> np.ndarray:
    """Roofline time of each token-op row (rows carry model, tp, op, num_tokens)."""
    out = np.full(len(rows), np.nan)
    for (model, tp), g in rows.groupby(["model", "tp"]):
        rf = RooflineCostModel(ReplicaConfig(model=model, gpu=gpu, tp=int(tp)), cal, table_tokens=1)
        for op, h in g.groupby("op"):
            tokens = h["num_tokens"].to_numpy(dtype=float)
            pred = rf.embedding_time(tokens) if op == "embedding" else (
                rf.lm_head_time(tokens) if op == "lm_head" else rf.token_ops(tokens)[op])
            out[rows.index.get_indexer(h.index)] = pred
    return out


def attention_shapes(rows: pd.DataFrame) -> list[BatchShape]:
    shapes = []
    for op, b, c, kv, k in rows[["op", "batch_size", "chunk_size", "kv_context", "context_len"]].itertuples(index=False):
        if op == "attn_prefill":
            shapes.append(BatchShape.from_requests([(int(c), int(kv))] * int(b)))
        else:
            shape = BatchShape()
            kk = max(1, int(round(k)))
            for _ in range(int(b)):
                shape.add_decode(kk)
            shapes.append(shape)
    return shapes


def roofline_attention_predictions(rf: RooflineCostModel, rows: pd.DataFrame, shapes: list[BatchShape]) -> np.ndarray:
    ops = rows["op"].to_numpy()
    return np.array([rf.attention_prefill(s) if op == "attn_prefill" else rf.attention_decode(s)
                     for op, s in zip(ops, shapes, strict=True)])


def roofline_collective_predictions(rows: pd.DataFrame, gpu: str, cal: RooflineCalibration) -> np.ndarray:
    """Ring all-reduce time of each (message_bytes, world_size) row."""
    out = np.full(len(rows), np.nan)
    spec = get_model("llama-2-7b")  # any model: bytes are converted to its hidden-size tokens and back
    for world, g in rows.groupby("world_size"):
        rf = RooflineCostModel(ReplicaConfig(model=spec.name, gpu=gpu, tp=int(world)), cal, table_tokens=1)
        tokens = g["message_bytes"].to_numpy(dtype=float) / (spec.hidden_size * 2)
        out[rows.index.get_indexer(g.index)] = rf.all_reduce(tokens)
    return out


# -- the fit --------------------------------------------------------------------------------------------
def _fit(params: tuple[str, ...], base: RooflineCalibration, lower: list[float], upper: list[float],
         residual: Callable[[RooflineCalibration], np.ndarray]) -> RooflineCalibration:
    x0 = np.clip([getattr(base, p) for p in params], lower, upper)
    scale = np.array(x0, dtype=float)

    def fun(z: np.ndarray) -> np.ndarray:
        return residual(replace(base, **dict(zip(params, (z * scale).tolist(), strict=True))))

    sol = least_squares(fun, np.ones(len(params)), bounds=(np.array(lower) / scale, np.array(upper) / scale),
                        loss="soft_l1", f_scale=0.1, max_nfev=200)
    return replace(base, **{p: float(f"{v:.3g}") for p, v in zip(params, sol.x * scale, strict=True)})


def load_token_rows(src: GpuSources, root: Path) -> pd.DataFrame:
    frames = []
    mlp = sorted(root.glob(src.mlp_glob)) if src.mlp_glob else []
    for path in mlp + [root / p for p in src.extra_layers if (root / p).exists()]:
        t = read_profile(path)
        try:
            get_model(t["model"].iloc[0])
        except ConfigError:
            continue  # a model outside the catalog has no shape to price
        frames.append(t[t["op"].isin(TOKEN_CAL_OPS)])
    if not frames:
        return pd.DataFrame()
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[[_valid_tp(m, tp) for m, tp in zip(rows["model"], rows["tp"], strict=True)]]
    return rows.reset_index(drop=True)


def _valid_tp(model: str, tp: float) -> bool:
    try:
        ReplicaConfig(model=model, tp=int(tp))
    except ConfigError:
        return False
    return True


def path_is_vidur(src: GpuSources) -> bool:
    return bool(src.attention) and src.attention[0][0].startswith("vidur")


def load_attention_rows(src: GpuSources, root: Path) -> list[tuple[pd.DataFrame, str, int]]:
    out = []
    for path, model, tp in src.attention:
        if (root / path).exists():
            out.append((read_profile(root / path), model, tp))
    return out


def calibrate_gpu(src: GpuSources, root: Path, base: RooflineCalibration = DEFAULT) -> tuple[RooflineCalibration, list[str]]:
    """Fit one GPU's constants; returns them and the names of the tables used."""
    cal = base
    used: list[str] = []
    tok = load_token_rows(src, root)
    if len(tok):
        meas = tok["median_s"].to_numpy(dtype=float)

        def res_tokens(c: RooflineCalibration) -> np.ndarray:
            return np.log(roofline_token_predictions(tok, src.gpu, c) / meas)

        cal = _fit(("gemm_compute_eff", "gemm_half_tokens", "gemm_memory_eff", "elementwise_memory_eff",
                    "residual_add_memory_eff", "embedding_memory_eff", "kernel_floor_s"),
                   cal, [0.05, 1.0, 0.05, 0.02, 0.02, 0.02, 5e-7], [1.0, 4096.0, 1.0, 1.0, 1.0, 1.0, 1e-4], res_tokens)
        if src.mlp_glob:
            used.append(f"Vidur {src.vidur_name} mlp.csv ({tok['model'].nunique()} models, all TP)")
        if src.extra_layers:
            used.append("LLMServingSim layers.csv")
    for rows, model, tp in load_attention_rows(src, root):
        rows = rows.reset_index(drop=True)
        shapes = attention_shapes(rows)
        meas = rows["median_s"].to_numpy(dtype=float)
        replica = ReplicaConfig(model=model, gpu=src.gpu, tp=tp)

        def res_attn(c: RooflineCalibration, rows: pd.DataFrame = rows, shapes: list = shapes,
                     meas: np.ndarray = meas, replica: ReplicaConfig = replica) -> np.ndarray:
            rf = RooflineCostModel(replica, c, table_tokens=1)
            return np.log(roofline_attention_predictions(rf, rows, shapes) / meas)

        cal = _fit(("attn_prefill_compute_eff", "attn_decode_memory_eff", "attn_decode_per_seq_s"),
                   cal, [0.02, 0.02, 0.0], [1.0, 1.0, 2e-5], res_attn)
        used.append(f"{'Vidur' if path_is_vidur(src) else 'LLMServingSim'} {src.vidur_name} attention.csv ({model} tp{tp})")
    if src.all_reduce and (root / src.all_reduce).exists():
        ar = read_profile(root / src.all_reduce).reset_index(drop=True)
        meas = ar["median_s"].to_numpy(dtype=float)

        def res_ar(c: RooflineCalibration) -> np.ndarray:
            return np.log(roofline_collective_predictions(ar, src.gpu, c) / meas)

        cal = _fit(("allreduce_latency_s", "allreduce_bus_eff"), cal, [1e-6, 0.05], [2e-4, 1.5], res_ar)
        used.append(f"NCCL all_reduce {Path(src.all_reduce).parts[2]}")
    if src.send_recv and (root / src.send_recv).exists():
        sr = read_profile(root / src.send_recv)
        small = sr[sr["message_bytes"] <= sr["message_bytes"].min() * 8]
        cal = replace(cal, send_recv_latency_s=float(f"{small['median_s'].median():.3g}"))
        used.append(f"NCCL send_recv {Path(src.send_recv).parts[2]}")
    return cal, used


def expected_tables(src: GpuSources) -> list[str]:
    """The tables (paths or a glob, relative to the profiles folder) ``src``'s constants are fitted to."""
    return [src.mlp_glob, *src.extra_layers, *(path for path, _, _ in src.attention),
            *(p for p in (src.all_reduce, src.send_recv) if p)]


def missing_tables(src: GpuSources, root: Path) -> list[str]:
    """Those of :func:`expected_tables` that ``root`` lacks (a glob: matching nothing)."""
    return [t for t in expected_tables(src) if not (any(root.glob(t)) if "*" in t else (root / t).is_file())]


def calibrate_all(root: str | Path | None = None, progress: Callable[[str, int, int], None] | None = None,
                  ) -> dict[str, RooflineCalibration]:
    """Calibrated constants per GPU; ``progress(gpu, done, total)`` as each GPU starts."""
    root = data_dir(root)
    # Constants fitted to nothing would be the defaults dressed up as a fit (and --write would put them in place of
    # the calibrated ones): a folder without every table a GPU's constants come from is refused, naming them.
    missing = [table for src in SOURCES for table in missing_tables(src, root)]
    if len(missing) == sum(len(expected_tables(src)) for src in SOURCES):
        raise ConfigError("--data", f"no Vidur or LLMServingSim profiles under {root}",
                          "pass the profiles folder (../shared/data/profiles)")
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        raise ConfigError("--data", f"{root} lacks {shown}, whose constants would be the defaults",
                          "pass the whole profiles folder (../shared/data/profiles)")
    out: dict[str, RooflineCalibration] = {}
    for done, src in enumerate(SOURCES):
        if progress:
            progress(src.gpu, done, len(SOURCES))
        cal, used = calibrate_gpu(src, root)
        out[src.gpu] = replace(cal, source="fitted by `simulate calibrate` to " + "; ".join(used))
    attn_fields = ("attn_prefill_compute_eff", "attn_decode_memory_eff", "attn_decode_per_seq_s")
    for gpu, parent in ATTENTION_FROM.items():
        out[gpu] = replace(out[gpu], **{f: getattr(out[parent], f) for f in attn_fields},
                           source=out[gpu].source + f"; attention constants from {parent}")
    for gpu, parent in TRANSFERS.items():
        out[gpu] = replace(out[parent], source=f"{parent} constants (same architecture): " + out[parent].source)
    return out


# -- writing calibration.py ---------------------------------------------------------------------------------------
BEGIN, END = "# BEGIN CALIBRATED (written by `simulate calibrate`)", "# END CALIBRATED"


def render(cals: dict[str, RooflineCalibration]) -> str:
    defaults = {f.name: getattr(DEFAULT, f.name) for f in dataclasses.fields(RooflineCalibration)}
    lines = [BEGIN, "BY_GPU: dict[str, RooflineCalibration] = {"]
    # A GPU that takes its sibling's constants is written as a reference to it, not a copy.
    transfers = [gpu for gpu, parent in TRANSFERS.items()
                 if gpu in cals and parent in cals and replace(cals[gpu], source="") == replace(cals[parent], source="")]
    for gpu, cal in cals.items():
        if gpu in transfers:
            continue
        fields = [f"{k}={getattr(cal, k)!r}" for k in defaults if k != "source" and getattr(cal, k) != defaults[k]]
        lines.append(f"    {gpu!r}: replace(")
        lines.append("        DEFAULT,")
        for f in fields:
            lines.append(f"        {f},")
        lines.append(f"        source={cal.source!r},")
        lines.append("    ),")
    lines.append("}")
    for gpu in transfers:
        lines.append(f"BY_GPU[{gpu!r}] = replace(BY_GPU[{TRANSFERS[gpu]!r}], source={cals[gpu].source!r})")
    lines.append(END)
    return "\n".join(lines)


def write_calibration(cals: dict[str, RooflineCalibration], path: str | Path) -> None:
    path = Path(path)
    text = path.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise ConfigError("calibration", f"{path} has no '{BEGIN}' block to replace")
    path.write_text(pattern.sub(lambda _m: render(cals), text))
