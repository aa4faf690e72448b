"""Scheduling policies. Adding one: a module here with a :class:`Scheduler` subclass and one line
in :data:`simulator.config.schedulers.SCHEDULERS` (the config layer names each policy's class by its
import path, so it can validate names below the engine); :data:`SCHEDULERS` resolves them."""

from __future__ import annotations

from importlib import import_module

from simulator.config.schedulers import SCHEDULERS as _ENTRIES
from simulator.engine.schedulers.base import Batch, Scheduler


def _resolve(policy: str) -> type[Scheduler]:
    module, _, name = policy.partition(":")
    cls = getattr(import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, Scheduler)):
        raise TypeError(f"{policy} is not a Scheduler subclass")
    return cls


SCHEDULERS: dict[str, type[Scheduler]] = {name: _resolve(entry.policy) for name, entry in _ENTRIES.items()}

__all__ = ["SCHEDULERS", "Batch", "Scheduler"]
