"""The device under test: name, peaks for the ``suspect`` check, and run metadata.

Peaks: on CUDA the catalog's spec-sheet figures for the detected GPU (dense bf16 FLOP/s
and HBM bandwidth; unknown GPUs get generous defaults). On CPU there is no spec sheet,
so the bounds are deliberately loose hardware ceilings per thread: 4 GHz x 64 FLOP per
cycle (two AVX-512 FMA units, fp32; bf16 AMX can exceed it, hence x4) and 4 GHz x 192
bytes per cycle (L1 load+store), because small working sets live in cache. They catch
timing bugs (an op that did not run), not slow kernels.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import importlib.util
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from simulator.config.catalog import GPUS, GPUSpec

CPU_CLOCK_HZ = 4.0e9
CPU_FLOPS_PER_CYCLE = 64 * 4
CPU_BYTES_PER_CYCLE = 192
UNKNOWN_GPU_FLOPS = 2.5e15
UNKNOWN_GPU_BYTES_PER_S = 8.0e12

# Substrings of torch.cuda.get_device_name() -> catalog GPU (first match wins, so a name that holds
# another's comes first: GB200 holds B200, H200 holds H20, L40S holds L40 and L4); None: a part the
# catalog has no entry for, which no near name may stand in for (H100 NVL's 94 GB and 3.9 TB/s are no
# H100 SXM's; a GH200's HBM is no H200's).
_GPU_NAME_HINTS: tuple[tuple[str, str | None], ...] = (
    ("gh200", None),
    ("h100 nvl", None),
    ("h200 nvl", None),  # (the NVL parts' lower clocks and power are no SXM part's)
    ("gb300", "gb300"),
    ("b300", "b300"),
    ("gb200", "gb200"),
    ("b200", "b200"),
    ("h200", "h200"),
    ("h100 pcie", "h100-pcie"),
    ("h100", "h100-sxm"),
    ("h20", "h20"),
    ("a100-sxm4-40gb", "a100-40gb"),
    ("a100-pcie-40gb", "a100-40gb"),
    ("a100", "a100-80gb"),
    ("rtx pro 6000", "rtx-pro-6000"),
    ("rtx 6000 ada", "rtx-6000-ada"),
    ("rtx a6000", "rtx-a6000"),
    ("rtx 5090", "rtx-5090"),
    ("rtx 4090", "rtx-4090"),
    ("rtx 3090", "rtx-3090"),
    ("l40s", "l40s"),
    ("l40", "l40"),
    ("l4", "l4"),
    ("nvidia a40", "a40"),  # (not "rtx a4000": a bare "a40" is inside it)
    ("mi300x", "mi300x"),
)


@dataclass(frozen=True)
class DeviceInfo:
    """What was measured on, and the ceilings a plausible measurement stays under."""

    device: str  # "cpu" or "cuda"
    name: str
    count: int
    peak_flops_per_s: float
    peak_bytes_per_s: float
    catalog_gpu: str | None = None
    peak_link_bytes_per_s: float | None = None  # GPU-to-GPU, per direction; None where unknown


def catalog_gpu_for(device_name: str) -> GPUSpec | None:
    lowered = device_name.lower()
    for hint, name in _GPU_NAME_HINTS:
        if hint in lowered:
            return GPUS[name] if name is not None else None
    return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def detect(device: str, num_threads: int) -> DeviceInfo:
    import torch

    if device == "cuda":
        name = torch.cuda.get_device_name(0)
        spec = catalog_gpu_for(name)
        if spec is None:
            return DeviceInfo("cuda", name, torch.cuda.device_count(), UNKNOWN_GPU_FLOPS, UNKNOWN_GPU_BYTES_PER_S)
        # Spec-sheet peaks; 1.05 absorbs boost clocks above the datasheet figure.
        link = spec.nvlink_bytes_per_s or spec.pcie_bytes_per_s
        return DeviceInfo("cuda", name, torch.cuda.device_count(), spec.bf16_flops * 1.05,
                          spec.hbm_bytes_per_s * 1.05, spec.name, link * 1.05)
    return DeviceInfo("cpu", cpu_name(), 1, num_threads * CPU_CLOCK_HZ * CPU_FLOPS_PER_CYCLE,
                      num_threads * CPU_CLOCK_HZ * CPU_BYTES_PER_CYCLE)


def _version(package: str) -> str | None:
    if importlib.util.find_spec(package) is None:
        return None
    try:
        return importlib.metadata.version(package.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def git_revision() -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment(info: DeviceInfo, num_threads: int, attention_backends: list[str]) -> dict:
    """Versions and provenance for ``metadata.json``."""
    import torch

    env = {
        "device": info.device,
        "device_name": info.name,
        "device_count": info.count,
        "catalog_gpu": info.catalog_gpu,
        "peak_flops_per_s": info.peak_flops_per_s,
        "peak_bytes_per_s": info.peak_bytes_per_s,
        "peak_link_bytes_per_s": info.peak_link_bytes_per_s,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "driver_version": _driver_version() if info.device == "cuda" else None,
        "num_threads": num_threads,
        "cpu": cpu_name(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "attention_backends": attention_backends,
        "flash_attn_version": _version("flash_attn"),
        "flashinfer_version": _version("flashinfer"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
        "command_line": " ".join(sys.argv),
    }
    return env
