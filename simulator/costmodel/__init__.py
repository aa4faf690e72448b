"""Cost models: predict an iteration's time for a replica and a batch shape.

``load_cost_model(spec, replica)`` is the one place that turns the ``cost_model`` field
of a run config into an object: ``"roofline"`` gives the calibrated roofline, or, where the
replica's ``kernels`` names an engine backend, that backend's measured kernel tables of the GPU
(:mod:`simulator.costmodel.aic`); any other value is the path of a fitted artifact (see
:mod:`simulator.costmodel.learned`). With
``engine`` (a preset name, an artifact path or an :class:`EngineModel`) the kernel model is
wrapped in that engine's overheads (:mod:`simulator.costmodel.engine_model`); without it the
bare kernel model is returned, as analysis of kernel tables wants.
"""

from __future__ import annotations

from pathlib import Path

from simulator.config.errors import ConfigError
from simulator.config.run_config import ReplicaConfig
from simulator.costmodel.base import BatchShape, CostModel, split_layers
from simulator.costmodel.engine_model import ENGINES, EngineCostModel, EngineModel, load_engine
from simulator.costmodel.roofline import RooflineCostModel

__all__ = ["ENGINES", "BatchShape", "CostModel", "EngineCostModel", "EngineModel", "RooflineCostModel",
           "load_cost_model", "load_engine", "split_layers"]


def load_cost_model(spec: str, replica: ReplicaConfig, engine: str | EngineModel | None = None) -> CostModel:
    # Resolved once, so the roofline takes its 'today' backend from the engine model's name (an artifact saved
    # from vllm-2026 is vLLM's, whatever its file is called) and the engine file is read once.
    model = None if engine is None else load_engine(engine)
    kernels = _load_kernels(spec, replica, model)
    return kernels if model is None else EngineCostModel(kernels, model)


def _load_kernels(spec: str, replica: ReplicaConfig, engine: str | EngineModel | None = None) -> CostModel:
    if replica.kernels != "roofline":  # an engine backend's measured kernel tables (simulator.costmodel.aic)
        if spec != "roofline":
            raise ConfigError("kernels", f"--kernels {replica.kernels} and --cost-model {spec} both price the kernels",
                              "give one: --kernels roofline with a fitted --cost-model, or the default --cost-model")
        from simulator.costmodel.aic.model import table_cost_model  # pyarrow loads only for a table-priced run

        return table_cost_model(replica, replica.kernels)
    if spec == "roofline":  # the engine names whose "today" constants price it (calibration.roofline_backend)
        return RooflineCostModel(replica, engine=engine)
    path = Path(spec)
    if not path.exists():
        raise ConfigError("cost_model", f"{spec!r} is neither 'roofline' nor an existing artifact",
                          "pass --cost-model roofline or the path written by `simulate fit`")
    try:
        from simulator.costmodel.learned import load_artifact
    except ImportError as exc:  # pragma: no cover - until the learned model lands
        raise ConfigError("cost_model", "learned cost models are not available in this build") from exc
    return load_artifact(path, replica, engine)
