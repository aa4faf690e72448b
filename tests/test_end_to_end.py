"""The whole path a user takes without a GPU: profile real kernels -> fit -> simulate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


def simulate_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simulator", *args], capture_output=True, text=True, timeout=300)


def test_profile_fit_simulate_on_cpu(tmp_path: Path):
    prof, art = tmp_path / "prof", tmp_path / "tiny.json"
    p = simulate_cli("profile", "--device", "cpu", "--model", "tiny-llama-1b", "--ops", "linear", "--max-tokens", "32",
                     "--threads", "1", "--no-progress", "--out", str(prof))
    assert p.returncode == 0, p.stderr
    f = simulate_cli("fit", "--profile", str(prof / "profile.csv"), "--out", str(art))
    assert f.returncode == 0, f.stderr
    # scored against every cost model: a CPU has no today constants, and its 'roofline today' column says whose
    fid = simulate_cli("fidelity", "--profile", str(prof), "--kernels", "trtllm", "--out", str(tmp_path / "fid"))
    assert fid.returncode == 0, fid.stderr
    assert "cpu is of no generation the today constants were fitted for" in " ".join(fid.stderr.split())
    assert "cpu is of no generation" in (tmp_path / "fid" / "README.md").read_text()  # (what stays)
    artifact = json.loads(art.read_text())
    assert {"qkv_proj", "mlp_down", "lm_head"} <= set(artifact["learned_ops"])
    common = ["run", "--model", "tiny-llama-1b", "--gpu", "cpu", "--workload", "fixed", "--prompt-tokens", "24",
              "--output-tokens", "8", "--num-requests", "12", "--qps", "0.5", "--max-model-len", "1024", "--json"]
    learned = simulate_cli(*common, "--cost-model", str(art))
    roofline = simulate_cli(*common)
    assert learned.returncode == 0 and roofline.returncode == 0, learned.stderr + roofline.stderr
    s_learned, s_roof = json.loads(learned.stdout), json.loads(roofline.stdout)
    assert s_learned["num_finished"] == 12
    # The measured CPU kernels, not the spec-sheet roofline, set the pace.
    assert s_learned["tpot_s_p50"] != pytest.approx(s_roof["tpot_s_p50"], rel=0.05)
    # The header says which ops the roofline prices beside the learned ones (linear only: attention, the rest).
    shown = simulate_cli(*[a for a in common if a != "--json"], "--cost-model", str(art), "--no-progress")
    assert shown.returncode == 0 and "roofline for: " in shown.stdout
    assert "attn_decode" in shown.stdout.split("roofline for: ")[1].split(" · ")[0]
    # ... and that a CPU profile's float32 kernels price the run's 16-bit weights
    assert "learned from float32 kernels (the profile's --dtype)" in " ".join(shown.stdout.split())
    # An artifact is for one model: another model is refused in one line.
    bad = simulate_cli("run", "--model", "llama-2-7b", "--gpu", "cpu", "--cost-model", str(art), "--num-requests", "2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
