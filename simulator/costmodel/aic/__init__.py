"""Kernel prices from NVIDIA AIConfigurator's measured per-op database (``--kernels vllm|sglang|trtllm``).

:mod:`~simulator.costmodel.aic.tables` reads the tables (``../shared/data/profiles/aiconfigurator``),
:mod:`~simulator.costmodel.aic.interp` interpolates in their grids, and
:class:`~simulator.costmodel.aic.model.TableCostModel` prices an iteration from them. The
model is imported on demand (pyarrow loads only when a run asks for tables).
"""

from simulator.costmodel.aic.tables import BACKENDS, KERNEL_CHOICES

__all__ = ["BACKENDS", "KERNEL_CHOICES"]
