"""The CUDA path of the profiler: CUDA-event timing with L2 flush, CUDA graphs, NCCL.

Marked ``gpu``; skipped where torch or a CUDA device is missing (``-m "not gpu"``
deselects them explicitly). NCCL tests need two GPUs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from profiler.grid import Point  # noqa: E402
from profiler.runner import ProfileConfig, run_profile  # noqa: E402
from profiler.schema import COLUMNS, COMM_OPS, METADATA_FILE  # noqa: E402
from profiler.shapes import ShardedShapes  # noqa: E402
from simulator.config.catalog import get_model  # noqa: E402


def tiny_config(tmp_path: Path) -> Path:
    cfg = {"model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 2,
           "intermediate_size": 2816, "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 4096,
           "_name_or_path": "tiny-gpu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_cuda_bench_uses_events_and_reports_graph_overhead() -> None:
    from profiler.timing import BenchSettings, bench

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    eager = bench(lambda: a @ b, device="cuda", settings=BenchSettings(target_s=0.05))
    assert eager.repeats >= 5 and 0 < eager.p20_s <= eager.median_s <= eager.p80_s
    flops = 2 * 4096 ** 3 / eager.median_s
    assert 1e12 < flops < 3e15  # a real bf16 GEMM, not a no-op or a host-side time
    graphed = bench(lambda: a @ b, device="cuda", settings=BenchSettings(target_s=0.05, cuda_graphs=True))
    assert graphed.launch_overhead_s is not None
    assert graphed.median_s < 1.5 * eager.median_s


def test_read_flush_leaves_no_write_back_to_the_op() -> None:
    """A write flush leaves L2 dirty and the next op pays for the write-back; a read flush does not
    (on an H200, a 16 MB GEMV: 11.8 us after a read flush, 12.9 us after a write flush)."""
    from profiler.timing import BenchSettings, bench

    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    t = {mode: bench(lambda: x @ w, device="cuda", settings=BenchSettings(target_s=0.05, l2_flush=mode)).median_s
         for mode in ("read", "write")}
    assert t["read"] <= 1.02 * t["write"], t
    with pytest.raises(ValueError, match="l2_flush"):
        BenchSettings(l2_flush="sometimes")


def test_fp8_gemm_outruns_bf16_where_compute_bound() -> None:
    """FP8 tensor cores (Hopper and later) double the bf16 rate: a large FP8 GEMM takes well under
    the bf16 one's time, and its achieved rate stays under twice the bf16 peak (the suspect ceiling)."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("FP8 tensor cores need compute capability 8.9 or later")
    from profiler.ops import make_case
    from profiler.timing import BenchSettings, bench

    shapes = ShardedShapes(get_model("llama-3.1-8b"), 1)
    point = Point("mlp_up_gate", tp=1, num_tokens=8192)
    t = {dt: bench(make_case(point, shapes, dt, "cuda").fn, device="cuda", settings=BenchSettings(target_s=0.05))
         .median_s for dt in ("bfloat16", "fp8")}
    assert t["fp8"] < 0.8 * t["bfloat16"], t


def test_resume_refuses_another_flush_mode(tmp_path: Path) -> None:
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", device="cuda", quick=True,
                        ops=("rotary",), l2_flush="write")
    run_profile(cfg, progress=False)
    meta = json.loads((tmp_path / "out" / METADATA_FILE).read_text())
    assert meta["bench"]["l2_flush"] == "write" and meta["config"]["l2_flush"] == "write"
    from simulator.config.errors import ConfigError

    with pytest.raises(ConfigError, match="l2-flush write"):
        run_profile(ProfileConfig(model=cfg.model, out=cfg.out, device="cuda", quick=True, ops=("rotary",)),
                    progress=False)


def test_cuda_gemm_time_grows_with_tokens() -> None:
    from profiler.ops import make_case
    from profiler.timing import BenchSettings, bench

    shapes = ShardedShapes(get_model("llama-3-8b"), 1)
    times = [bench(make_case(Point("mlp_up_gate", tp=1, num_tokens=t), shapes, "bfloat16", "cuda").fn,
                   device="cuda", settings=BenchSettings(target_s=0.05)).median_s for t in (1024, 4096, 16384)]
    assert times[0] < times[1] < times[2], times


def test_cuda_quick_profile(tmp_path: Path) -> None:
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", device="cuda", quick=True,
                        ops=("linear", "attention", "elementwise"), tp=(1, 2))
    summary = run_profile(cfg, progress=False)
    table = summary.table
    assert tuple(table.columns) == COLUMNS and not summary.failed
    assert set(table["tp"]) == {1, 2} and (table["median_s"] > 0).all()
    assert not table["suspect"].any(), table[table["suspect"]]
    meta = json.loads((tmp_path / "out" / METADATA_FILE).read_text())
    env = meta["environment"]
    assert env["cuda_version"] and env["device_name"] == torch.cuda.get_device_name(0)
    assert meta["complete"] is True


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs two GPUs")
def test_nccl_collectives(tmp_path: Path) -> None:
    cfg = ProfileConfig(model=str(tiny_config(tmp_path)), out=tmp_path / "out", device="cuda", quick=True,
                        ops=("comm",), world_sizes=(2,))
    table = run_profile(cfg, progress=False).table
    assert set(table["op"]) == set(COMM_OPS) and set(table["backend"]) == {"nccl"}
    assert (table["median_s"] > 0).all()
