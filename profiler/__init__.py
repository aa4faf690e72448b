"""servesim profiler: time real kernels with torch (the optional ``profile`` extra).

``simulate profile`` measures, for a model at one or more TP degrees, the linear,
attention, elementwise and communication kernels one GPU (or CPU) of a TP group runs,
over token counts, and writes a tidy table (:mod:`profiler.schema`) that the learned
cost model fits. ``simulate import-vidur`` converts Vidur-format CSVs into the same
table (:mod:`profiler.vidur_import`).

Modules: :mod:`~profiler.schema` (columns, op names), :mod:`~profiler.shapes` (TP
sharding), :mod:`~profiler.grid` (what is measured), :mod:`~profiler.work` (FLOPs and
bytes), :mod:`~profiler.timing` (the one timing function), :mod:`~profiler.ops`
(torch kernels), :mod:`~profiler.comm` (process groups), :mod:`~profiler.device`
(peaks, metadata), :mod:`~profiler.runner` (the resumable run).

torch is imported lazily, inside the functions that time kernels, so ``import
profiler`` (and the schema, the importer, config validation) works without it.
"""

from __future__ import annotations

from typing import Any

_LAZY = {
    "COLUMNS": "profiler.schema",
    "SCHEMA": "profiler.schema",
    "ALL_OPS": "profiler.schema",
    "OP_FAMILIES": "profiler.schema",
    "read_table": "profiler.schema",
    "ProfileConfig": "profiler.runner",
    "run_profile": "profiler.runner",
    "import_vidur": "profiler.vidur_import",
    "import_vidur_file": "profiler.vidur_import",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'profiler' has no attribute {name!r}")


__all__ = list(_LAZY)
