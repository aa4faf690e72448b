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


def test_a_request_the_decode_pool_refuses_counts_on_a_replica(tmp_path) -> None:  # noqa: ANN001
    # (refused before routing, it was on no replica: per_replica summed to the finished requests alone)
    import json

    trace = tmp_path / "long.csv"
    trace.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n"
                     + "".join(f"{i * 0.5},{3000 if i % 3 == 0 else 500},100\n" for i in range(30)))
    code, out = invoke("run", "--trace", str(trace), "--arrival", "trace", "--max-model-len", "2048", "--prefill-pool",
                       "1x", "--decode-pool", "1x", "--json", "--no-progress")
    assert code == 0, out
    summary = json.loads(out)
    assert summary["num_rejected"] == 10
    assert sum(r["num_requests"] for r in summary["per_replica"]) == summary["num_requests"] == 30
    assert sum(r["num_rejected"] for r in summary["per_replica"]) == 10
