"""AIConfigurator's silicon rows read as their README asks, and turned into closed-loop runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.calibrate.silicon import Unexpressible, data_path, read_silicon, row_config, source_fields


@pytest.fixture(scope="module")
def silicon(shared_data):
    return read_silicon(data_path(shared_data))


@pytest.fixture(scope="module")
def shared_data():  # module scope: the CSV is read once for these tests
    from tests.conftest import SHARED_DATA

    if not data_path(SHARED_DATA).is_file():
        pytest.skip("../shared/data/validation/aiconfigurator is not present")
    return SHARED_DATA


def test_wip_rows_dropped_and_duplicates_kept_once(silicon):
    from simulator.calibrate.silicon import measurement_key

    kept, dropped = silicon
    assert len(kept) + len(dropped) == 3092
    assert not kept["wip"].any()
    assert (dropped["wip"]).sum() == 174  # the README's count
    assert not measurement_key(kept).duplicated().any()
    copies = dropped[~dropped["wip"]]
    assert len(copies) > 0
    # Every dropped copy's measurement is still there once.
    pairs = set(measurement_key(kept).itertuples(index=False, name=None))
    assert all(p in pairs for p in measurement_key(copies).itertuples(index=False, name=None))


def test_a_measurement_exported_rounded_or_a_digit_apart_is_kept_once(silicon):
    """Qwen3.5-397B on 8 B200s under SGLang, 4 users of 1024/8192: the 2026-03-25 dump, the 2026-04-06 dump (its
    TTFT one binary digit apart) and the gap-analysis export (both figures rounded to 0.01 ms) hold one run."""
    kept, dropped = silicon
    ids = {"2026_03_25_qwen3_5_397b_b200_sxm_sglang_bf16_agg_1024x8192_c4_tp8_0_ep1_0_630",
           "2026_04_06_qwen3_5_397b_b200_sxm_sglang_bf16_agg_1024x8192_c4_tp8_ep1_1826",
           "qwen3_5_397b_gap_analysis_qwen3_5_397b_gap_analysis_b200_sxm_sglang_bf16_agg_1024x8192_c4_tp8_ep1_6"}
    assert kept["id"].isin(ids).sum() == 1
    assert dropped["id"].isin(ids).sum() == 2
    assert kept.loc[kept["id"].isin(ids), "num_copies"].item() == 3


def _row(**fields):  # noqa: ANN003, ANN202 - a hand-made CSV row, as itertuples gives it
    from types import SimpleNamespace

    base = {"mode": "agg", "system": "b200_sxm", "tp_size": 8.0, "pp_size": 1.0, "attention_dp_size": 1.0,
            "moe_tp_size": 1.0, "moe_ep_size": 8.0}
    return SimpleNamespace(**{**base, **fields})


@pytest.mark.parametrize(("recorded", "read_as"), [
    ((16, 1, 4, 4), (4, 1, 1, 4)),  # SGLang/TRT-LLM tp4 ep4, as the later dumps write it
    ((64, 1, 8, 8), (8, 1, 1, 8)),
    ((1, 64, 8, 8), (1, 8, 1, 8)),  # tp8 ep8 with DP attention
    ((4, 4, 1, 16), (1, 4, 1, 4)),  # a DP+EP form (InferenceX's vLLM rows of known scripts: _vllm_script_layout)
])
def test_a_layout_recorded_scaled_by_its_ep_width_is_read_as_its_node(recorded, read_as):
    from simulator.calibrate.silicon import _single_node_layout

    tp, adp, moe_tp, ep = recorded
    fixed = _single_node_layout(_row(tp_size=tp, attention_dp_size=adp, moe_tp_size=moe_tp, moe_ep_size=ep))
    assert fixed is not None
    assert (fixed["tp_size"], fixed["attention_dp_size"], fixed["moe_tp_size"], fixed["moe_ep_size"]) == read_as


_KIMI, _MINIMAX = "moonshotai/Kimi-K2.5", "MiniMaxAI/MiniMax-M2.5"
_DB = "db-dump/2026-04-27; config_id=635; silicon_concurrency=4; measured=2026-03-27T00:00:00.000Z"


@pytest.mark.parametrize(("model", "recorded", "read_as"), [
    (_KIMI, (4, 4, 1, 16), (4, 1, 4, 1)),  # filed as DP4/EP16 (tp x ep GPUs): its script runs TP4, no EP
    (_KIMI, (4, 1, 1, 4), (4, 1, 4, 1)),  # an ep 4 entry: Kimi's script never passes --enable-expert-parallel
    (_MINIMAX, (4, 4, 1, 16), (4, 1, 1, 4)),  # MiniMax's passes it: EP over the TP group
    (_MINIMAX, (2, 2, 1, 4), (2, 1, 1, 2)),
    (_KIMI, (8, 1, 8, 1), None),  # filed as run
    (_MINIMAX, (4, 1, 1, 4), None),
    (_MINIMAX, (2, 1, 2, 1), None),  # an ep 1 entry of a script that reads EP_SIZE: TP alone, as filed
    ("meta-llama/Llama-3.1-70B", (4, 4, 1, 16), None),  # a script the table does not know: left to the general rule
])
def test_inferencex_vllm_rows_are_read_as_their_script_launched_them(model, recorded, read_as):
    from simulator.calibrate.silicon import _vllm_script_layout

    tp, adp, moe_tp, ep = recorded
    row = _row(backend="vllm", model_path=model, silicon_data_source=_DB, tp_size=tp, attention_dp_size=adp,
               moe_tp_size=moe_tp, moe_ep_size=ep, precision="fp8" if model == _MINIMAX else "fp4")
    fixed = _vllm_script_layout(row)
    got = None if fixed is None else (fixed["tp_size"], fixed["attention_dp_size"], fixed["moe_tp_size"],
                                      fixed["moe_ep_size"])
    assert got == read_as
    # Another backend's row, or one the gap analyses ran (not InferenceX's scripts), is not read this way.
    assert _vllm_script_layout(_row(**{**vars(row), "backend": "sglang"})) is None
    assert _vllm_script_layout(_row(**{**vars(row), "silicon_data_source": "source_file=kimi-k2.5-gap-analysis.csv"})) is None
    # MiniMax-M2.5 FP4's scripts run DP attention where the entry asks, which the row does not record: as filed.
    if model == _MINIMAX:
        assert _vllm_script_layout(_row(**{**vars(row), "precision": "fp4"})) is None


def test_minimax_b200_rows_of_the_0_17_image_ran_expert_parallel_at_every_point():
    # That script passed --enable-expert-parallel whatever the entry's ep: a tp 2 point filed without EP ran EP 2.
    from simulator.calibrate.silicon import _vllm_script_layout

    row = _row(backend="vllm", model_path=_MINIMAX, silicon_data_source=_DB, tp_size=2, attention_dp_size=1,
               moe_tp_size=2, moe_ep_size=1, backend_version="0.17.0", precision="fp8")
    assert _vllm_script_layout(row) == {"tp_size": 2, "attention_dp_size": 1, "moe_tp_size": 1, "moe_ep_size": 2}
    assert _vllm_script_layout(_row(**{**vars(row), "backend_version": "0.19.0"})) is None
    assert _vllm_script_layout(_row(**{**vars(row), "system": "b300_sxm"})) is None


def test_the_rows_of_known_vllm_scripts_run_without_attention_dp_and_say_why(silicon):
    # The aggregated vLLM rows of Kimi-K2.5 and MiniMax-M2.5 FP8 ran without attention DP (their scripts never pass
    # --data-parallel-size): Kimi's without EP, MiniMax's 0.17.0 B200 rows with EP over their TP group; the rows read
    # otherwise than filed say so.
    kept, _ = silicon
    vllm = kept[(kept["backend"] == "vllm") & (kept["mode"] == "agg")]
    known = vllm[vllm["model_path"].str.contains("Kimi") | (vllm["model_path"].str.contains("MiniMax")
                                                             & (vllm["precision"] == "fp8"))]
    assert len(known) > 100
    assert (known["attention_dp_size"].fillna(1) == 1).all()
    kimi = known[known["model_path"].str.contains("Kimi")]
    assert (kimi["moe_ep_size"] == 1).all() and (kimi["moe_tp_size"] == kimi["tp_size"]).all()
    old = known[known["model_path"].str.contains("MiniMax") & (known["system"] == "b200_sxm")
                & (known["backend_version"] == "0.17.0") & (known["tp_size"] > 1)]
    assert len(old) > 10 and (old["moe_ep_size"] == old["tp_size"]).all()
    read = vllm[vllm["layout_read_as"].str.contains("vLLM script", na=False)]
    assert len(read) > 20
    assert read["layout_read_as"].str.startswith("recorded tp/adp/moe_tp/moe_ep").all()


@pytest.mark.parametrize("fields", [
    {},  # 8 GPUs: as recorded
    {"tp_size": 16.0, "moe_ep_size": 16.0},  # 16 GPUs that are not G x G with moe_tp = moe_ep = G
    {"tp_size": 16.0, "moe_tp_size": 4.0, "moe_ep_size": 4.0, "system": "gb200"},  # an NVL72 rack holds it
    {"tp_size": 16.0, "moe_tp_size": 4.0, "moe_ep_size": 4.0, "mode": "disagg"},
])
def test_layouts_recorded_as_run_are_left_alone(fields):
    from simulator.calibrate.silicon import _single_node_layout

    assert _single_node_layout(_row(**fields)) is None


@pytest.mark.parametrize(("fields", "copies"), [
    ({"batch_size": 13.0, "concurrency": 416.0, "tp_size": 2.0}, 32),  # a gtl job's 32 TP2 engines
    ({"batch_size": 16.0, "concurrency": 64.0, "attention_dp_size": 4.0}, 1),  # batch_size per DP rank: one engine
    ({"batch_size": 48.0, "concurrency": 48.0}, 1),
    ({"batch_size": 48.0, "concurrency": 100.0}, 1),  # not a whole number of engines: as recorded
    ({"batch_size": float("nan"), "concurrency": 64.0}, 1),
    ({"batch_size": 13.0, "concurrency": 416.0, "mode": "disagg"}, 1),
])
def test_an_aggregated_row_whose_users_are_a_multiple_of_its_batch_ran_that_many_engines(fields, copies):
    from simulator.calibrate.silicon import engine_copies

    assert engine_copies(_row(**fields)) == copies


def test_a_gtl_row_runs_one_engine_copy_with_its_share_of_the_users(silicon):
    """The 10 aggregated rows whose concurrency is a multiple of batch_size x attention_dp run one copy of the
    engine with batch_size users and say so; a row whose batch_size counts the ranks of a layout recorded scaled
    by its EP width (read back to its node) stays one engine with every user."""
    kept, _ = silicon
    read = kept[kept["layout_read_as"].str.contains("copies of the engine")]
    assert len(read) == 10 and (read["mode"] == "agg").all()
    assert (read["concurrency"] == read["batch_size"] * read["attention_dp_size"].fillna(1).clip(lower=1)).all()
    qwen = read[read["id"].str.contains("qwen3_32b_nvfp4_b200_sxm_trtllm_agg_15000x500_c416")].iloc[0]
    assert qwen["concurrency"] == 13 and "416 users over 32 copies" in qwen["layout_read_as"]
    scaled = kept[kept["id"] == "dsr1_b200_trtllm_fp4_agg_8192x1024_c128_cfg191"].iloc[0]
    assert scaled["concurrency"] == 128 and "copies" not in scaled["layout_read_as"]
    assert row_config(next(read.itertuples())).workload.concurrency == int(read["batch_size"].iloc[0])


def test_one_measurement_under_two_layout_encodings_reads_as_one_engine(silicon):
    """Identical (TTFT, TPOT) pairs come from the 2026-03-25 dump as tp4 ep4 and from the later dumps as 16
    GPUs: once read, no aggregated row on an 8-GPU-node system is larger than its node."""
    kept, _ = silicon
    agg = kept[(kept["mode"] == "agg") & kept["system"].isin(["b200_sxm", "b300_sxm", "h100_sxm"])]
    gpus = agg["tp_size"] * agg["attention_dp_size"].fillna(1).clip(lower=1) * agg["pp_size"].fillna(1)
    assert gpus.max() <= 8
    fixed = kept[(kept["mode"] == "agg") & (kept["layout_read_as"] != "")
                 & ~kept["layout_read_as"].str.contains("copies of the engine")]
    assert len(fixed) > 100 and fixed["layout_read_as"].str.match(r"recorded .* read as").all()


def test_concurrency_comes_from_the_source():
    fields = source_fields("db-dump/2026-04-27; config_id=733; silicon_concurrency=128; measured=x; wip=False")
    assert fields["silicon_concurrency"] == "128" and fields["wip"] == "False"


def test_an_agg_row_becomes_its_closed_loop(silicon):
    kept, _ = silicon
    rows = kept[(kept["model_path"] == "meta-llama/Llama-3.1-70B") & (kept["mode"] == "agg")
                & (kept["system"] == "h100_sxm")]
    row = next(rows.itertuples())
    config = row_config(row)
    w = config.workload
    assert config.replica.model == "llama-3.1-70b" and config.replica.gpu == "h100-sxm"
    assert config.replica.tp == int(row.tp_size)
    assert w.concurrency == int(row.concurrency) and w.num_warmup == w.concurrency
    assert (w.prompt_tokens, w.output_tokens) == (int(row.isl), int(row.osl))
    assert w.arrival == "burst" and config.scheduler.name == "vllm-v1"


def test_each_backends_rows_plan_the_kv_cache_by_its_engines_rule(silicon):
    """TensorRT-LLM's rows run vLLM V1's policy but TensorRT-LLM's cache (0.9 of free memory, 32-token blocks, as the
    trtllm preset plans it), its disaggregated pools too; SGLang's and vLLM's rows their own schedulers' rules."""
    from simulator.config.disagg_layout import layout_of
    from simulator.engine.kvcache import build_kv_cache

    kept, _ = silicon

    def first_config(rows):  # noqa: ANN001, ANN202 - the first expressible row's run
        for row in rows.itertuples():
            try:
                return row_config(row)
            except Unexpressible:
                continue
        raise AssertionError("no expressible row")

    agg = kept[(kept["mode"] == "agg") & (kept["model_path"] == "Qwen/Qwen3-32B")]
    for backend, fraction_of, block in (("trtllm", "free", 32), ("sglang", "static", 16), ("vllm", "total", 16)):
        config = first_config(agg[agg["backend"] == backend])
        _, plan = build_kv_cache(config.replica, config.scheduler)
        assert (plan.memory_basis, plan.block_size) == (fraction_of, block)
        # ... and its attention-DP steps' MoE layers as its engine runs them (TensorRT-LLM's: the ranks' own tokens)
        assert config.scheduler.dp_padding_rule() == ("graphs" if backend == "vllm" else "sum")
    trt = first_config(kept[(kept["mode"] == "disagg") & (kept["backend"] == "trtllm")])
    pools = layout_of(trt)
    for pool in (pools.prefill_replica, pools.decode_replica):
        assert (pool.memory_fraction_of, pool.block_size) == ("free", 32)
    assert pools.prefill_scheduler.dp_padding_rule() == pools.decode_scheduler.dp_padding_rule() == "sum"


def test_gpt_oss_rows_labelled_nvfp4_run_its_mxfp4_checkpoint(silicon):
    """The data README: gpt-oss-120b is labelled nvfp4 although its checkpoint is MXFP4. Its rows run --dtype mxfp4
    (each backend's MXFP4 MoE kernel), the KV cache as the label makes AIConfigurator infer it; other NVFP4 rows
    stay NVFP4."""
    kept, _ = silicon
    agg = kept[kept["mode"] == "agg"]
    oss = agg[agg["model_path"].str.contains("gpt-oss") & (agg["gemm_quant_mode"] == "nvfp4")]
    assert len(oss) > 100
    for row in oss.head(20).itertuples():
        replica = row_config(row).replica
        assert (replica.model, replica.dtype, replica.kv_cache_dtype) == ("gpt-oss-120b", "mxfp4", "fp8")
    other = agg[~agg["model_path"].str.contains("gpt-oss") & (agg["gemm_quant_mode"] == "nvfp4")]
    assert row_config(next(other.itertuples())).replica.dtype == "nvfp4"


def test_each_provenance_runs_its_clients_load(silicon):
    """InferenceX's DB rows: its benchmark_serving.py's [0.8 len, len] band, 10 requests a user;
    the others AIPerf's exact lengths, 20 a user; both with the warm-up a phase of its own."""
    from simulator.calibrate.silicon import benchmark_client, source_family
    from simulator.calibrate.silicon_fit import cache_key

    kept, _ = silicon
    agg = kept[(kept["mode"] == "agg") & kept["model_path"].isin(["meta-llama/Llama-3.1-70B", "Qwen/Qwen3-32B"])]
    by_family = {source_family(r.silicon_data_source): r for r in agg.itertuples()}
    inferencex, aiperf = by_family["dated-dump"], by_family["gap-analysis"]  # Llama-3.1-70B, Qwen3-32B
    c = row_config(inferencex, max_requests=10**6, **benchmark_client(inferencex))
    w = c.workload
    assert (w.range_style, w.range_ratio, w.warmup_mode) == ("sglang", 0.8, "drain") and w.is_banded
    assert w.num_requests - w.num_warmup == 10 * w.concurrency
    a = row_config(aiperf, max_requests=10**6, **benchmark_client(aiperf)).workload
    assert not a.is_banded and a.warmup_mode == "drain" and a.num_requests - a.num_warmup == 20 * a.concurrency
    # InferenceX's SGLang recipe polls for requests every 10 iterations below concurrency 16, 30 from it.
    from simulator.calibrate.silicon import recipe_changes

    sglang = kept[(kept["backend"] == "sglang") & (kept["mode"] == "agg")]
    for r in sglang.itertuples():
        family = source_family(r.silicon_data_source)
        expected = ({"scheduler__recv_interval": 30 if r.concurrency >= 16 else 10}
                    if family in ("db-dump", "dated-dump") else {})
        assert recipe_changes(r) == expected
    assert recipe_changes(inferencex) == {}  # Llama-3.1-70B's rows are vLLM and TensorRT-LLM
    # Its TensorRT-LLM DeepSeek-R1 FP8 B200 recipe waits for batches at 1K/1K from 64 users, without DP attention.
    trt = kept[(kept["backend"] == "trtllm") & (kept["mode"] == "agg")]
    deepseek = trt[trt["model_path"].str.contains("deepseek-ai/")]
    waiting = [r.id for r in deepseek.itertuples() if "scheduler__batch_wait_timeout_iters" in recipe_changes(r)]
    assert len(waiting) == 4  # one measurement each (a fifth was a copy rounded to 0.01 ms)
    for r in trt[trt["id"].isin(waiting)].itertuples():
        assert (r.system, r.gemm_quant_mode, r.isl, r.osl, r.attention_dp_size) == ("b200_sxm", "fp8", 1024, 1024, 1)
        assert r.concurrency >= 64 and source_family(r.silicon_data_source) in ("db-dump", "dated-dump")
        if r.spec_refusal:  # the point's MTP run (silicon.agg_spec_refusal): not run as a plain engine
            with pytest.raises(Unexpressible, match="MTP"):
                row_config(r, extra=recipe_changes(r))
            continue
        config = row_config(r, extra=recipe_changes(r))
        assert (config.scheduler.batch_wait_timeout_iters, config.scheduler.batch_wait_max_tokens_ratio) == (40, 0.8)
    assert 2 <= sum(not r.spec_refusal for r in trt[trt["id"].isin(waiting)].itertuples()) < 5
    # Its Llama-3.3-70B B200 recipes wait for batches at 1K/1K below TP8 (20 iterations, ratio 0.9), and nowhere
    # else.
    llama = trt[trt["model_path"] == "meta-llama/Llama-3.1-70B"]
    held = {r.id: recipe_changes(r) for r in llama.itertuples() if recipe_changes(r)}
    assert len(held) >= 20
    for r in llama.itertuples():
        inferencex = source_family(r.silicon_data_source) in ("db-dump", "dated-dump")
        one_k = (r.isl, r.osl) == (1024, 1024)
        assert (r.id in held) == (inferencex and one_k and r.system == "b200_sxm" and r.tp_size < 8)
        if r.id in held:
            config = row_config(r, extra=held[r.id])
            assert (config.scheduler.batch_wait_timeout_iters, config.scheduler.batch_wait_max_tokens_ratio) == (20, 0.9)
    # The trace cache tells the band's reading apart (same ratio, other style: another trace).
    assert cache_key(c) != cache_key(c.replace(workload__range_style="vllm", workload__range_ratio=0.5)) != \
        cache_key(c.replace(workload__range_ratio=0.5))


def test_unexpressible_rows_say_why(silicon):
    kept, _ = silicon
    # GLM-5's rows run since DeepSeek Sparse Attention is modelled (they were refused for it)
    glm5 = next(kept[kept["model_path"] == "zhipuai/GLM-5"].itertuples())
    config = row_config(glm5)
    assert config.replica.model == "glm-5" and config.replica.model_spec.index_topk == 2048
    old_disagg = kept[(kept["mode"] == "disagg") & kept["prefill_num_workers"].isna()]
    with pytest.raises(Unexpressible, match="worker counts"):
        row_config(next(old_disagg.itertuples()))


def test_a_row_runs(silicon):
    from simulator.report.benchmark import benchmark_metrics
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    kept, _ = silicon
    rows = kept[(kept["model_path"] == "Qwen/Qwen3-32B") & (kept["mode"] == "agg") & (kept["concurrency"] <= 16)
                & (kept["family"] != "gtl")]
    config = row_config(next(rows.itertuples()), requests_per_user=2, range_ratio=0.1)
    result = simulate(config)
    m = benchmark_metrics(result, request_columns(result))
    assert m["completed"] == config.workload.num_requests - config.workload.num_warmup
    assert m["max_concurrent_requests"] <= config.workload.concurrency
    assert m["mean_ttft_ms"] > 0 and m["mean_tpot_ms"] > 0


def test_disagg_rows_whose_pools_differ_map_each_pools_dp_and_ep(silicon):
    from simulator.config.disagg_layout import layout_of

    kept, _ = silicon
    disagg = kept[(kept["mode"] == "disagg") & kept["prefill_num_workers"].notna()
                  & kept["model_path"].str.contains("DeepSeek-V3")]
    differ = disagg[(disagg["prefill_attention_dp_size"].fillna(1) != disagg["decode_attention_dp_size"].fillna(1))
                    | (disagg["prefill_moe_ep_size"].fillna(1) != disagg["decode_moe_ep_size"].fillna(1))]
    assert len(differ) > 50
    for row in differ.itertuples():
        layout = layout_of(row_config(row))  # every one expressible now
        for pool, replica, workers in (("prefill", layout.prefill_replica, layout.prefill),
                                       ("decode", layout.decode_replica, layout.decode)):
            assert replica.tp == int(getattr(row, f"{pool}_tp_size"))
            assert replica.attention_dp == int(getattr(row, f"{pool}_attention_dp_size"))
            assert replica.ep == int(getattr(row, f"{pool}_moe_ep_size"))
            assert workers.num_replicas == int(getattr(row, f"{pool}_num_workers"))
            assert replica.num_gpus <= 8 * replica.num_nodes
    # Rows whose pools agree without attention DP keep the run-level mapping (the pools take the run's EP).
    same = disagg[(disagg["prefill_attention_dp_size"].fillna(1) == 1) & (disagg["decode_attention_dp_size"].fillna(1) == 1)
                  & (disagg["prefill_moe_ep_size"] == disagg["decode_moe_ep_size"])]
    config = row_config(next(same.itertuples()))
    assert "dp=" not in config.prefill_pool and config.replica.ep == int(next(same.itertuples()).decode_moe_ep_size)


def test_the_fit_report_runs_each_row_with_all_its_clients_requests(silicon):
    """A cap on a row's requests (the report had 800) left a high-concurrency row one synchronised
    wave after the warm-up drain, whose mean TTFT is half the whole backlog's prefill: MiniMax-M2.5
    on 4 B300 at concurrency 512 came out 38.5 s against 3.3 s measured (4.5 s uncapped)."""
    import importlib.util

    from simulator.calibrate.silicon import benchmark_client
    from simulator.report.benchmark import benchmark_metrics
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    script = Path(__file__).resolve().parents[1] / "results" / "validation" / "silicon" / "fit_report.py"
    spec = importlib.util.spec_from_file_location("fit_report", script)
    fit_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_report)
    cap = fit_report._args([]).max_requests or None
    kept, _ = silicon
    row = next(kept[(kept["model_path"] == "MiniMaxAI/MiniMax-M2.5") & (kept["concurrency"] == 512)
                    & (kept["isl"] == 1024) & (kept["mode"] == "agg")].itertuples())
    full = row_config(row, max_requests=cap, **benchmark_client(row))
    w = full.workload
    assert w.num_requests - w.num_warmup == 10 * w.concurrency  # InferenceX's --num-prompts 10 x C
    one_wave = full.replace(workload__num_requests=2 * w.concurrency)

    def mean_ttft(config):  # noqa: ANN001, ANN202
        result = simulate(config)
        return benchmark_metrics(result, request_columns(result))["mean_ttft_ms"]

    assert mean_ttft(one_wave) > 2 * mean_ttft(full)


def test_the_fit_reports_rows_come_out_the_same_in_parallel(tmp_path):
    """``fit_report.py --jobs N`` runs the simulated rows in N processes: the same numbers as one,
    each row in its place, and a rerun reads them back from the row cache."""
    import importlib.util

    import numpy as np
    import pandas as pd

    from simulator.config.run_config import RunConfig
    from simulator.costmodel.engine_model import ENGINES, save_engine_artifact

    script = Path(__file__).resolve().parents[1] / "results" / "validation" / "silicon" / "fit_report.py"
    spec = importlib.util.spec_from_file_location("fit_report", script)
    fit_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_report)
    engine = tmp_path / "engine.json"
    save_engine_artifact(ENGINES["sglang-2026"], engine, {})
    configs = [RunConfig().replace(replica__model="llama-3.1-8b", replica__gpu="h100-sxm", workload__name="fixed",
                                   workload__prompt_tokens=isl, workload__output_tokens=16, workload__arrival="burst",
                                   workload__num_requests=12, workload__concurrency=4, workload__num_warmup=4)
               for isl in (256, 1024, 3000)]
    rows = pd.DataFrame({"mode": ["agg"] * 3})
    one, _ = fit_report._simulate_rows(rows, configs, lambda r: str(engine), jobs=1)
    cache = fit_report.RowCache(tmp_path / "rows.pkl")
    two, errors = fit_report._simulate_rows(rows, configs, lambda r: str(engine), cache=cache, jobs=2)
    assert not errors and np.array_equal(one, two) and len(set(one[:, 0])) == 3
    again, _ = fit_report._simulate_rows(rows, configs, lambda r: str(engine),
                                         cache=fit_report.RowCache(tmp_path / "rows.pkl"), jobs=2)
    assert np.array_equal(again, one)


def test_twins_are_one_recorded_deployment_measured_far_apart():
    """``results/validation/silicon/twins.py``: rows agreeing on every recorded field whose measured TPOTs span more
    than the ratio are one group (fast and slow marked); a closer pair, and disaggregated rows without worker counts
    or whose workers a recipe gave (their deployment is not recorded to begin with), are not."""
    import importlib.util

    import pandas as pd

    script = Path(__file__).resolve().parents[1] / "results" / "validation" / "silicon" / "twins.py"
    spec = importlib.util.spec_from_file_location("twins", script)
    twins = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(twins)
    base = {"backend": "trtllm", "backend_version": "1.2", "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm",
            "precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "mode": "agg", "isl": 1024,
            "osl": 1024, "concurrency": 4, "tp_size": 8.0, "pp_size": 1.0, "attention_dp_size": 1.0,
            "moe_tp_size": 1.0, "moe_ep_size": 8.0, "prefill_num_workers": float("nan"), "silicon_ttft_ms": 150.0,
            "family": "dated-dump", "silicon_data_source": "x"}
    rows = [
        {**base, "id": "slow", "silicon_tpot_ms": 10.0},
        {**base, "id": "fast", "model_path": "deepseek-ai/DeepSeek-V3", "silicon_tpot_ms": 5.0},  # one architecture
        {**base, "id": "near-a", "concurrency": 8, "silicon_tpot_ms": 10.0},
        {**base, "id": "near-b", "concurrency": 8, "silicon_tpot_ms": 9.0},
        {**base, "id": "dis-a", "mode": "disagg", "silicon_tpot_ms": 10.0},
        {**base, "id": "dis-b", "mode": "disagg", "silicon_tpot_ms": 4.0},
        # workers a recipe gave are not recorded either
        {**base, "id": "rec-a", "mode": "disagg", "prefill_num_workers": 1.0, "silicon_tpot_ms": 10.0,
         "workers_from_recipe": True},
        {**base, "id": "rec-b", "mode": "disagg", "prefill_num_workers": 1.0, "silicon_tpot_ms": 4.0,
         "workers_from_recipe": True},
    ]
    out = twins.twins(pd.DataFrame(rows), ratio=1.3)
    assert sorted(out["id"]) == ["fast", "slow"]
    assert dict(zip(out["id"], out["role"], strict=True)) == {"fast": "fast", "slow": "slow"}
    assert out["tpot_span"].iloc[0] == pytest.approx(2.0)


def test_sglang_pools_whose_ep_does_not_divide_the_experts_place_redundant_experts(silicon):
    """SGLang's GB200/GB300 wide-EP pools (EP 24 or 48 over DeepSeek's 256 experts) run with SGLang's 32 redundant
    experts (silicon.SGLANG_REDUNDANT_EXPERTS); other backends' pools never get them."""
    from simulator.calibrate.silicon import SGLANG_REDUNDANT_EXPERTS
    from simulator.config.disagg_layout import layout_of

    kept, _ = silicon
    wide = []
    for row in kept[kept["mode"] == "disagg"].itertuples():
        try:
            config = row_config(row)
        except Unexpressible:
            continue
        pools = (layout_of(config).prefill_replica, layout_of(config).decode_replica)
        placed = [p for p in pools if p.redundant_experts]
        if placed:
            wide.append(row)
            assert row.backend == "sglang"
            assert all(p.redundant_experts == SGLANG_REDUNDANT_EXPERTS and 256 % p.ep for p in placed)
    assert len(wide) >= 20


def test_the_aiperf_rows_of_vllm_and_trtllm_run_at_a_2048_token_budget(silicon):
    """AIConfigurator's own runs (AIPerf) of vLLM and TensorRT-LLM are read at a 2048-token budget
    (silicon.AIPERF_BUDGETS), SGLang's and InferenceX's rows at the harness's 8192, and a study may
    name another."""
    from simulator.calibrate.silicon import (
        AIPERF_BUDGETS,
        DEFAULT_BUDGET,
        Unexpressible,
        benchmark_client,
        source_family,
    )

    kept, _ = silicon
    seen = set()
    for r in kept[kept["mode"] == "agg"].itertuples():
        inferencex = source_family(r.silicon_data_source) in ("db-dump", "dated-dump")
        if (r.backend, inferencex) in seen:
            continue
        try:
            budget = row_config(r, **benchmark_client(r)).scheduler.max_num_batched_tokens
        except Unexpressible:  # no concurrency recorded, an MTP run: listed as not run elsewhere
            continue
        seen.add((r.backend, inferencex))
        assert budget == (DEFAULT_BUDGET if inferencex else AIPERF_BUDGETS.get(r.backend, DEFAULT_BUDGET)), r.id
        if not inferencex:
            assert benchmark_client(r, aiperf_budget=4096)["budget"] == 4096
    assert {("vllm", False), ("trtllm", False), ("sglang", False), ("vllm", True), ("sglang", True)} <= seen
    assert AIPERF_BUDGETS == {"vllm": 2048, "trtllm": 2048} and DEFAULT_BUDGET == 8192


def test_the_fit_report_can_take_one_backends_rows(shared_data):
    """``fit_report.py --backends sglang`` fits and reports that engine's rows alone (and the flag refuses
    an engine it does not know)."""
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "results" / "validation" / "silicon" / "fit_report.py"
    spec = importlib.util.spec_from_file_location("fit_report", script)
    fit_report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_report)
    args = fit_report._args(["--data", str(shared_data), "--backends", "sglang"])
    _, _, rows, configs, _ = fit_report.rows_and_configs(args)
    assert len(rows) == len(configs) > 300 and set(rows["backend"]) == {"sglang"}
    assert {c.scheduler.name for c in configs} == {"sglang"}
    with pytest.raises(SystemExit):
        fit_report._args(["--backends", "lmdeploy"])
    # --deferred-columns: the simulated rows' passes (all three by default), an unknown one refused
    assert fit_report._args([]).deferred_columns == ["fit", "cv_gpu", "cv_model"]
    assert fit_report._args(["--deferred-columns", "cv_gpu"]).deferred_columns == ["cv_gpu"]
    with pytest.raises(SystemExit):
        fit_report._args(["--deferred-columns", "cv_rack"])
    # and a simulated row that ran under one of them counts as run (it has no in-sample column); a failed one does not
    import numpy as np
    import pandas as pd

    nan = np.nan
    pred = pd.DataFrame({"id": ["replayed", "cv_gpu only", "failed"], "pred_tpot_ms_fit": [10.0, nan, nan],
                         "pred_tpot_ms_cv_gpu": [11.0, 12.0, nan], "pred_tpot_ms_cv_model": [10.5, nan, nan]})
    assert list(fit_report.rows_run(pred)["id"]) == ["replayed", "cv_gpu only"]
