"""Shared test helpers: hand-made requests and a small in-memory cluster driver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The public traces/profiles folder beside the checkout; skip where it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not present")
    return SHARED_DATA


@pytest.fixture
def aic(shared_data: Path) -> Path:
    """AIConfigurator's kernel database in the shared folder; skip where it is absent."""
    root = shared_data / "profiles" / "aiconfigurator"
    if not (root / "systems" / "data").is_dir():
        pytest.skip("../shared/data/profiles/aiconfigurator is not present")
    return root


# CI runs a fixed set of examples so a green run can be reproduced; locally Hypothesis explores.
from hypothesis import settings  # noqa: E402

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
