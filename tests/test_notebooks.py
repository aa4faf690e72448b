"""The notebooks run end to end (nbclient) on small settings and their own checks hold."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SMALL = {"SERVESIM_NB_REQUESTS": "160", "SERVESIM_NB_REL_TOL": "0.15"}

pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("nbclient", "nbformat", "ipykernel")),
    reason="nbclient, nbformat and ipykernel are needed (the test extra)")


@pytest.mark.parametrize("name", ["p99_tbt_analysis.ipynb", "capacity_planning.ipynb"])
def test_notebook_runs(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import nbformat
    from nbclient import NotebookClient

    for key, value in SMALL.items():
        monkeypatch.setenv(key, value)  # the kernel inherits the environment
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert len(images) >= 3, "figures should render inline"
    assert os.environ["SERVESIM_NB_REQUESTS"] == SMALL["SERVESIM_NB_REQUESTS"]
