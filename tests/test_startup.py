"""Start-up: commands import only what they use; the pandas-free trace reader agrees with pandas."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator import workload


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(out.stdout.split())


def test_the_cli_imports_no_heavy_library() -> None:
    loaded = _modules_after("import simulator.cli")
    assert not {"pandas", "numpy", "simpy", "pyarrow", "matplotlib", "sklearn", "ray"} & loaded


def test_a_run_without_out_never_loads_pandas() -> None:
    code = ("from simulator.cli.run import run_simulation\n"
            "from simulator.config import RunConfig, WorkloadConfig\n"
            "run_simulation(RunConfig(workload=WorkloadConfig('sharegpt', num_requests=20)))")
    loaded = _modules_after(code)
    assert "numpy" in loaded and "pandas" not in loaded and "matplotlib" not in loaded


def _both_readers(path: Path):  # noqa: ANN202
    plain = workload._read_csv_plain(str(path))
    saved = workload._read_csv_plain
    try:
        workload._read_csv_plain = lambda p: None  # force the pandas reader
        reference = workload._read_csv(str(path))
    finally:
        workload._read_csv_plain = saved
    return plain, reference


def test_plain_trace_reader_agrees_with_pandas(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    prompt, output = rng.integers(1, 8000, 500), rng.integers(1, 2000, 500)
    path = tmp_path / "t.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens,pd_ratio\n"
                    + "".join(f"{p},{o},{p / o}\n" for p, o in zip(prompt, output, strict=True)) + "\n\n")
    plain, reference = _both_readers(path)
    assert plain is not None
    assert np.array_equal(plain.num_prompt_tokens, reference.num_prompt_tokens)
    assert np.array_equal(plain.num_output_tokens, reference.num_output_tokens)
    assert (plain.fmt, plain.columns, plain.arrival_s) == (reference.fmt, reference.columns, None)


@pytest.mark.parametrize("body", ["12.0,5\n", "12,\n", "12,5\n\n7,3\n", "12,5,9\n", "-3,4\n", "0,4\n"])
def test_anything_unusual_goes_to_the_pandas_reader(tmp_path: Path, body: str) -> None:
    path = tmp_path / "odd.csv"
    path.write_text("num_prefill_tokens,num_decode_tokens\n" + body)
    assert workload._read_csv_plain(str(path)) is None
