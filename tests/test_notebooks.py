"""The notebooks run end to end (nbclient) on small settings and their own checks hold, and
they are committed executed (outputs included, so they read on the web), by
``python tests/test_notebooks.py`` (this venv's kernel, no timing metadata: the same bytes
on every run at the same versions)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SMALL = {"SERVESIM_NB_REQUESTS": "160", "SERVESIM_NB_REL_TOL": "0.15"}

NAMES = ["p99_tbt_analysis.ipynb", "capacity_planning.ipynb"]
needs_nbclient = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("nbclient", "nbformat", "ipykernel")),
    reason="nbclient, nbformat and ipykernel are needed (the test extra)")


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_has_its_outputs(name: str) -> None:
    nb = json.loads((NOTEBOOKS / name).read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c.get("execution_count") for c in code), "execute the notebook before committing it"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert len([o for o in outputs if "image/png" in o.get("data", {})]) >= 3
    assert all("execution" not in c.get("metadata", {}) for c in code), "no timing metadata (not reproducible)"


@needs_nbclient
@pytest.mark.parametrize("name", NAMES)
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


def execute_in_place(path: Path) -> None:
    """Run ``path`` with the default settings and write it back with its outputs (no timing
    metadata, so the file is the same at every run)."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=1800, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    nbformat.write(nb, path)


if __name__ == "__main__":  # python tests/test_notebooks.py: re-execute the committed notebooks
    for notebook in NAMES:
        execute_in_place(NOTEBOOKS / notebook)
        print(f"executed {notebook}")
