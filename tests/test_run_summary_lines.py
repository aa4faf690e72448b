"""What a run prints: one figure under one name."""

from __future__ import annotations

import re

from test_cli_fuzz_round13 import invoke


def test_a_disaggregated_run_states_one_slo_attainment_its_own_slos() -> None:
    # The disaggregated line once added a second "SLO attainment" (TTFT and TPOT, the TPOT bound being --tbt-slo's
    # value) beside the summary's (TTFT and every gap): two figures under one name, one of them mislabelled.
    code, out = invoke("run", "--model", "llama-3.1-8b", "--gpu", "h100", "--prefill-pool", "1x(tp=1)",
                       "--decode-pool", "1x(tp=1)", "--num-requests", "60", "--qps", "2", "--tbt-slo", "0.05",
                       "--no-progress")
    assert code == 0, out
    found = re.findall(r"SLO attainment \(([^)]*)\)", out)
    assert found == ["TTFT<=2.0s and every gap<=0.05s"], out
    assert out.count("SLO attainment") == 1, out
