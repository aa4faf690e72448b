"""JSON out: NaN and infinity as null (JSON has neither)."""

from __future__ import annotations

import math
from typing import Any


def jsonable(value: Any) -> Any:
    """``value`` with NaN and infinite floats as None, through dicts, lists and tuples."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value
