"""Input files a second audit found read wrongly: a bench result's requests sorted by send time apart from their
lengths (the fit replayed another workload), a bench list given as null (a TypeError), and more below, each now
read right or refused in one line naming the field and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.calibrate.engine_fit import read_bench
from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "data" / "vllm_bench_fixture.json"


def _bench(tmp_path: Path, **changes: object) -> Path:
    data = json.loads(BENCH.read_text())
    data.update(changes)
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


def test_bench_requests_are_ordered_by_send_time_with_their_own_lengths(tmp_path: Path) -> None:
    data = json.loads(BENCH.read_text())
    n = len(data["input_lens"])
    sent = [float(n - i) for i in range(n)]  # listed last-sent first
    run = read_bench(_bench(tmp_path, request_submit_times=sent))
    ok = [i for i in range(n) if not data["errors"][i] and data["output_lens"][i] > 1]
    order = sorted(ok, key=lambda i: sent[i])
    assert np.array_equal(run.arrival_at, np.array([sent[i] for i in order]) - min(sent[i] for i in ok))
    assert run.input_lens.tolist() == [data["input_lens"][i] for i in order]  # each request keeps its lengths...
    assert run.output_lens.tolist() == [data["output_lens"][i] for i in order]
    assert run.ttfts.tolist() == [data["ttfts"][i] for i in order]  # ... and its measured figures
    assert [g.tolist() for g in run.itls] == [data["itls"][i] for i in order]
    # listed in send order, nothing moves
    inorder = read_bench(_bench(tmp_path, request_submit_times=sorted(sent)))
    assert inorder.input_lens.tolist() == [data["input_lens"][i] for i in ok]


@pytest.mark.parametrize("key", ["input_lens", "ttfts", "itls"])
def test_a_bench_list_given_as_null_is_refused(tmp_path: Path, key: str) -> None:
    path = _bench(tmp_path, **{key: None})
    with pytest.raises(ConfigError, match=f"^bench: {path} lacks {key} \\({key} null\\)"):
        read_bench(path)
