"""Flags a second audit found doing nothing, or ending in a traceback, in some combination: each now takes
effect or is refused in one line naming the flag and the fix."""

from __future__ import annotations

from test_cli_fuzz_round13 import invoke


def test_sglang_disaggregated_pools_at_a_receive_interval_run_to_the_end() -> None:
    # (a RuntimeError traceback: the prefill pool's batch stayed "full" with nothing running)
    code, out = invoke("run", "--scheduler", "sglang", "--prefill-pool", "1x", "--decode-pool", "1x",
                       "--scheduler-recv-interval", "3", "--qps", "8", "--num-requests", "300", "--no-progress")
    assert code == 0 and "requests: 300 finished, 0 rejected" in out, out
