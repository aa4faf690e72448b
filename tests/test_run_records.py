"""What a run's tables and summaries count, checked against the requests themselves (found by a probe that
diffed runs): a disaggregated run's warm-up requests and handoff gaps, a speculating run's drafts, and the
preemptions of a pipeline pass that ran nothing."""

from __future__ import annotations

import numpy as np

from simulator.config.run_config import RunConfig
from simulator.config.speculative import SpeculativeConfig
from simulator.report.disagg_metrics import disagg_summary
from simulator.report.metrics import request_columns, request_frame, summarize
from simulator.simulation import simulate

DISAGG = dict(prefill_pool="2x", decode_pool="1x", workload__num_requests=60, workload__qps=4.0)


def test_a_disaggregated_runs_figures_leave_out_the_warm_up_and_the_handoff_gap() -> None:
    """With --num-warmup the TBT figures came from token times that still held the handoff (the first two
    tokens reach the client together): 0.28 s max TBT against 0.05 s without warm-up; the disagg block
    counted the warm-up requests."""
    plain = simulate(RunConfig().replace(**DISAGG))
    warm = simulate(RunConfig().replace(**DISAGG, workload__num_warmup=10))
    s_plain, s_warm = summarize(plain), summarize(warm)
    assert s_warm["tbt_s_max"] <= s_plain["tbt_s_max"] + 1e-12  # same requests, fewer of them measured
    cols = request_columns(warm)
    measured = (cols["request_id"] >= 10) & (cols["status"] == "finished")
    # Handed-off requests: every gap after the second token (the first two arrive together).
    assert s_warm["num_tbt_samples"] == int((cols["num_output_tokens"][measured] - 2).clip(0).sum())
    frame = request_frame(warm)
    block = disagg_summary(warm, frame)
    assert block["num_transfers"] == disagg_summary(plain, request_frame(plain))["num_transfers"] - 10
    assert np.isclose(block["decode_tbt_s_max"], s_warm["tbt_s_max"])


def test_a_speculating_runs_iteration_table_keeps_drafts_apart_from_prompts() -> None:
    """Drafts were counted as prefill tokens: 61,594 of a run's 205,993, decode-only steps with 3 each."""
    spec = SpeculativeConfig("ngram", 3, acceptance_rates=(0.6,))
    result = simulate(RunConfig().replace(workload__num_requests=40, workload__qps=4.0, speculative=spec))
    it = result.iteration_frame()
    cols = request_columns(result)
    assert it["num_prefill_tokens"].sum() == cols["num_prompt_tokens"].sum()  # no prefix caching here
    assert it["num_draft_tokens"].sum() == result.extra["speculative"]["num_drafted"] > 0
    assert (it.loc[it["num_prefills"] == 0, "num_prefill_tokens"] == 0).all()


def test_a_pipelines_empty_pass_keeps_its_preemptions() -> None:
    """A pass whose only request preempted itself ran nothing and was not written: 19 preemptions in the
    table against 25 on the requests."""
    result = simulate(RunConfig().replace(replica__pp=2, replica__num_gpu_blocks=300, workload__num_requests=100,
                                          workload__qps=8.0))
    it, cols = result.iteration_frame(), request_columns(result)
    assert cols["num_preemptions"].sum() > 0
    assert it["num_preempted"].sum() == cols["num_preemptions"].sum()
    empty = it[it["duration_s"] == 0]
    assert (empty["num_preempted"] > 0).all() and (empty["num_prefill_tokens"] + empty["num_decodes"] == 0).all()
