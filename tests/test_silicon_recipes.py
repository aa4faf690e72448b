"""InferenceX's disaggregated recipes give the dated dumps' rows the worker counts they lack."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import pytest

from simulator.calibrate.silicon import (
    RECIPES_PATH,
    Unexpressible,
    read_recipes,
    read_silicon,
    recipe_layout,
    recipe_moe_kernels,
    row_config,
    sglang_prefill_recipe,
    trtllm_prefill_budget,
)

_POINT = {"backend": "trtllm", "system": "b200", "model": "dsr1", "precision": "fp4", "isl": 1024, "osl": 1024,
          "concurrency": 90}


def _recipe(**fields) -> dict:  # noqa: ANN003
    base = {**_POINT, "spec": "none", "num_speculative_tokens": 0, "prefill_num_workers": 1, "prefill_tp": 4,
            "prefill_ep": 4, "prefill_dp_attn": True, "decode_num_workers": 5, "decode_tp": 8, "decode_ep": 8,
            "decode_dp_attn": False, "image": "img", "matrix_key": "k", "snapshot": "o/r@abc"}
    return {**base, **fields}


def _row(**fields) -> SimpleNamespace:  # noqa: ANN003 - a dated dump's disaggregated row, as itertuples gives it
    base = {"backend": "trtllm", "system": "b200_sxm", "model_path": "deepseek-ai/DeepSeek-R1", "precision": "fp4",
            "isl": 1024.0, "osl": 1024.0, "concurrency": 90.0, "mode": "disagg", "family": "dated-dump",
            "prefill_tp_size": 4.0, "decode_tp_size": 8.0, "prefill_num_workers": math.nan,
            "decode_num_workers": math.nan, "tp_size": math.nan, "pp_size": math.nan, "attention_dp_size": math.nan}
    return SimpleNamespace(**{**base, **fields})


def test_one_recipe_at_the_point_gives_workers_dp_attention_and_ep():
    fields, note = recipe_layout(_row(), pd.DataFrame([_recipe()]))
    assert fields == {"mode": "disagg", "mtp_drafts": 0, "prefill_num_workers": 1, "prefill_tp_size": 1, "prefill_pp_size": 1,
                      "prefill_attention_dp_size": 4, "prefill_moe_tp_size": 1, "prefill_moe_ep_size": 4,
                      "decode_num_workers": 5, "decode_tp_size": 8, "decode_pp_size": 1,
                      "decode_attention_dp_size": 1, "decode_moe_tp_size": 1, "decode_moe_ep_size": 8}
    assert "prefill 1x dep4 ep4, decode 5x tp8 ep8" in note and "o/r@abc" in note


@pytest.mark.parametrize(("recipes", "recorded_tp", "reason"), [
    ([], 4, "no InferenceX recipe"),
    ([_recipe(concurrency=91)], 4, "no InferenceX recipe"),  # another point
    ([_recipe(decode_tp=4)], 4, "no InferenceX recipe"),  # disagrees with the recorded per-worker TP
    ([_recipe(), _recipe(decode_num_workers=6)], 4, "2 InferenceX recipes"),
    ([_recipe(spec="mtp", num_speculative_tokens=3)], 4, "runs MTP"),
    ([_recipe(), _recipe(spec="mtp", num_speculative_tokens=3)], 4, "with and without MTP"),
    ([_recipe(prefill_tp=1, prefill_ep=1, decode_tp=1, decode_ep=1)], 1, "tp 1, ep 1"),
])
def test_no_recipe_is_taken_unless_exactly_one_fits(recipes, recorded_tp, reason):
    row = _row(prefill_tp_size=float(recorded_tp), decode_tp_size=2.0 * recorded_tp if recorded_tp > 1 else 1.0)
    fields, note = recipe_layout(row, pd.DataFrame(recipes, columns=list(_recipe())))
    assert fields is None and reason in note


def test_an_mtp_recipe_is_taken_only_when_asked_and_its_draft_length_is_known():
    mtp = pd.DataFrame([_recipe(spec="mtp", num_speculative_tokens=3)])
    assert recipe_layout(_row(), mtp)[0] is None
    fields, note = recipe_layout(_row(), mtp, with_mtp=True)
    assert fields is not None and fields["mtp_drafts"] == 3 and note.endswith("MTP 3 drafts")
    unknown = pd.DataFrame([_recipe(spec="mtp", num_speculative_tokens=math.nan)])
    fields, note = recipe_layout(_row(), unknown, with_mtp=True)
    assert fields is None and "draft length" in note
    both = pd.DataFrame([_recipe(), _recipe(spec="mtp", num_speculative_tokens=3)])
    fields, note = recipe_layout(_row(), both, with_mtp=True)
    assert fields is None and "with and without MTP" in note


def test_a_disaggregated_point_filed_as_one_engine_needs_its_gpus_to_add_up():
    recipes = pd.DataFrame([_recipe(system="gb200", prefill_num_workers=1, decode_num_workers=4)])  # 4 + 32 GPUs
    agg = {"mode": "agg", "system": "gb200", "prefill_tp_size": math.nan, "decode_tp_size": math.nan, "pp_size": 1.0,
           "attention_dp_size": 1.0}
    fields, _ = recipe_layout(_row(**agg, tp_size=36.0), recipes)
    assert fields is not None and fields["mode"] == "disagg" and fields["decode_num_workers"] == 4
    assert recipe_layout(_row(**agg, tp_size=28.0), recipes)[0] is None


def test_the_committed_table_names_its_snapshots():
    table = read_recipes()
    assert RECIPES_PATH.is_file() and len(table) > 100
    assert table["snapshot"].str.contains("@").all()
    assert set(table["backend"]) <= {"trtllm", "sglang", "vllm"}
    assert set(table["spec"]) <= {"none", "mtp"}
    layout = ["backend", "system", "model", "precision", "isl", "osl", "concurrency", "spec", "prefill_num_workers",
              "prefill_tp", "prefill_ep", "prefill_dp_attn", "decode_num_workers", "decode_tp", "decode_ep",
              "decode_dp_attn"]
    assert not table.duplicated(layout).any()


@pytest.fixture(scope="module")
def silicon():
    from simulator.calibrate.silicon import data_path
    from tests.conftest import SHARED_DATA

    if not data_path(SHARED_DATA).is_file():
        pytest.skip("../shared/data/validation/aiconfigurator is not present")
    return read_silicon(data_path(SHARED_DATA))


def test_recipes_agree_with_the_rows_that_record_their_workers(silicon):
    """Held out: the db-dump rows record workers, DP attention and EP; read with only what the dated dumps
    keep (the per-worker TP, DP attention folded in), the recipe taken must give the same deployment."""
    kept, _ = silicon
    recorded = kept[(kept["mode"] == "disagg") & kept["decode_num_workers"].notna() & (kept["family"] == "db-dump")]
    recipes = read_recipes()
    workers_agree = all_agree = taken = 0
    for row in recorded.itertuples():
        as_dated = row._replace(prefill_tp_size=row.prefill_tp_size * row.prefill_attention_dp_size,
                                decode_tp_size=row.decode_tp_size * row.decode_attention_dp_size)
        fields, _ = recipe_layout(as_dated, recipes)
        if fields is None:
            continue
        taken += 1
        same = {c: int(getattr(row, c)) == v for c, v in fields.items() if c != "mode"}
        workers_agree += all(v for c, v in same.items() if "moe" not in c)
        all_agree += all(same.values())
    # Workers and DP attention: all but one of 83; the MoE split (EP or TP over a worker's GPUs) differs
    # on a few more, where the db-dump records moe_tp where the matrix says ep.
    assert taken >= 60 and workers_agree >= 0.95 * taken and all_agree >= 0.85 * taken


def test_rows_read_from_a_recipe_run_and_the_rest_say_why(silicon):
    kept, _ = silicon
    read = kept[kept["workers_from_recipe"]]
    assert len(read) > 100 and (read["mode"] == "disagg").all() and read["decode_num_workers"].notna().all()
    assert read["layout_read_as"].str.contains("InferenceX recipe").all()
    config = row_config(next(read.itertuples()))
    assert config.prefill_pool and config.decode_pool
    missing = kept[(kept["mode"] == "disagg") & kept["decode_num_workers"].isna()]
    assert (missing["recipe_refusal"] != "").all()
    with pytest.raises(Unexpressible, match="worker counts .*: .*recipe"):
        row_config(next(missing.itertuples()))


def test_mtp_rows_run_only_at_a_stated_acceptance(silicon):
    from simulator.calibrate.silicon import data_path
    from tests.conftest import SHARED_DATA

    kept, _ = silicon
    with_mtp, _ = read_silicon(data_path(SHARED_DATA), with_mtp=True)
    mtp = with_mtp[with_mtp["mtp_drafts"] > 0]
    # the rows the plain read refused for MTP alone now carry their recipe's layout and draft length
    assert len(mtp) > 50 and mtp["workers_from_recipe"].all() and len(with_mtp) == len(kept)
    assert set(mtp["id"]) <= set(kept.loc[kept["recipe_refusal"].str.contains("MTP"), "id"])
    row = next(mtp.itertuples())
    with pytest.raises(Unexpressible, match="acceptance is not recorded"):
        row_config(row)
    config = row_config(row, mtp_acceptance=0.7)
    spec = config.speculative
    assert spec.num_speculative_tokens == row.mtp_drafts and spec.acceptance_rates == (0.7,) * row.mtp_drafts
    with pytest.raises(Unexpressible, match="MTP acceptance"):
        row_config(row, mtp_acceptance="no-such-model:mtp")


def test_a_row_filed_as_one_engine_without_a_recipe_is_not_run_as_that_engine(silicon):
    """The 2026-04-06 dump files some disaggregated GB200 points as one tp = every GPU engine; without a recipe
    the row says why rather than run as a 32- or 64-GPU TP engine no deployment ran."""
    from simulator.calibrate.silicon import _wants_recipe

    kept, _ = silicon
    left = [r for r in kept.itertuples() if r.mode == "agg" and _wants_recipe(r) and not r.workers_from_recipe]
    assert left
    for row in left:
        with pytest.raises(Unexpressible, match=r"filed as one aggregated engine of \d+ GPUs .*InferenceX"):
            row_config(row)
    hand = _row(mode="agg", system="gb200", tp_size=64.0, pp_size=1.0, attention_dp_size=1.0, recipe_refusal="")
    with pytest.raises(Unexpressible, match="64 GPUs .*no recipe read"):
        row_config(hand)


# -- aggregated points InferenceX runs with and without MTP ------------------------------------------------------------
def _agg_row(image: str, **fields) -> SimpleNamespace:  # noqa: ANN003
    source = f"source_file=2026-04-06.csv; silicon_concurrency=8; wip=False; image=registry/org/{image} x"
    return _row(mode="agg", family="dated-dump", silicon_data_source=source, concurrency=8.0, **fields)


def _agg_points(*entries: tuple[str, str]) -> pd.DataFrame:
    return pd.DataFrame([{**_POINT, "concurrency": 8, "image": image, "spec": spec, "matrix_key": "k",
                          "snapshot": "o/r@abc"} for image, spec in entries])


def test_an_aggregated_row_is_read_as_the_mtp_run_its_image_names():
    from simulator.calibrate.silicon import agg_spec_refusal

    two_images = _agg_points(("rel:1.post2", "none"), ("rel:1.post3", "mtp"))
    assert agg_spec_refusal(_agg_row("rel:1.post2"), two_images) == ""
    assert "is its MTP run" in agg_spec_refusal(_agg_row("rel:1.post3"), two_images)
    assert "no snapshot read names the row's image" in agg_spec_refusal(_agg_row("rel:0.9"), two_images)
    one_image = _agg_points(("rel:1", "none"), ("rel:1", "mtp"))
    assert "with and without MTP on the row's image" in agg_spec_refusal(_agg_row("rel:1"), one_image)
    assert "only with MTP" in agg_spec_refusal(_agg_row("rel:1"), _agg_points(("rel:1", "mtp")))
    assert agg_spec_refusal(_agg_row("rel:1"), _agg_points(("rel:1", "none"))) == ""  # no MTP at the point
    no_image = _row(mode="agg", family="db-dump", silicon_data_source="db-dump; silicon_concurrency=8", concurrency=8.0)
    assert agg_spec_refusal(no_image, two_images) == ""  # the db-dump's rows: the slower twin (next test)
    refused = _agg_row("rel:1.post3", tp_size=8.0, pp_size=1.0, attention_dp_size=1.0,
                       spec_refusal=agg_spec_refusal(_agg_row("rel:1.post3"), two_images))
    with pytest.raises(Unexpressible, match="is its MTP run"):
        row_config(refused)


def test_mtp_image_rows_are_the_faster_twin_at_their_point(silicon):
    """The rule's evidence: at each point and recorded layout where one row's image ran the point only with MTP
    and another's only without (or records no image), the MTP-image row has the lower TPOT."""
    from simulator.calibrate.silicon import _RECIPE_MODELS

    kept, _ = silicon
    agg = kept[kept["mode"] == "agg"]
    agg = agg.assign(model=agg["model_path"].str.lower().map(_RECIPE_MODELS))  # the db-dump files R1 as V3 too
    layout = ["backend", "system", "model", "precision", "isl", "osl", "concurrency", "tp_size", "moe_ep_size",
              "attention_dp_size"]
    pairs = plain_pairs = 0
    for _, group in agg.groupby(layout):
        mtp = group[group["spec_refusal"].str.contains("is its MTP run")]
        if mtp.empty:
            continue
        images = group["silicon_data_source"].str.contains(r"image=\S")
        for named, others in ((True, group[images & (group["spec_refusal"] == "")]),
                              (False, group[~images & (group["spec_refusal"] == "")])):
            for tpot in others["silicon_tpot_ms"]:
                pairs += 1
                plain_pairs += named
                assert mtp["silicon_tpot_ms"].max() < tpot
    assert plain_pairs >= 5 and pairs >= 30  # distinct measurements (copies to 0.01 ms kept once)
    refused = kept[kept["spec_refusal"] != ""]
    assert len(refused) > 80 and (refused["mode"] == "agg").all()
    assert set(refused["backend"]) == {"trtllm", "sglang"}
    with pytest.raises(Unexpressible, match="MTP"):
        row_config(next(refused.itertuples()))


def test_every_copy_of_a_measurement_gets_the_same_speculation_verdict(silicon):
    """A measurement recorded twice (the same TTFT and TPOT to 0.01 ms; the db-dump's copy has no image) is one run: the
    copies dropped as duplicates carry the kept row's verdict, so dropping them cannot change what runs."""
    from simulator.calibrate.silicon import MEASUREMENT_KEY, measurement_key

    kept, dropped = silicon
    pair = list(MEASUREMENT_KEY)
    copies = dropped[dropped["dropped"].str.startswith("duplicate")]
    copies = pd.concat([copies, measurement_key(copies)], axis=1).merge(
        pd.concat([kept[["spec_refusal"]], measurement_key(kept)], axis=1), on=pair, suffixes=("", "_kept"))
    assert len(copies) > 100
    assert (copies["spec_refusal"] == copies["spec_refusal_kept"]).all()
    assert (copies["spec_refusal"] != "").sum() >= 6  # copies of refused measurements exist and agree


def test_trtllm_deepseek_fp8_b200_rows_run_the_moe_kernel_their_recipe_sets():
    """InferenceX's DeepSeek-R1 FP8 B200 deployments set TensorRT-LLM's moe_config backend DEEPGEMM: the single-node
    script from 256 users at 1K/1K and 1K/8K, the disaggregated 1K/1K recipes on every prefill worker and on decode
    workers with DP attention; 8K/1K recipes, other rows and other backends keep the engine's default. Only a
    table-priced run names the kernel (the roofline times none)."""
    fp8 = dict(precision="fp8", gemm_quant_mode="fp8", silicon_data_source="db-dump; silicon_concurrency=8")
    dep = dict(prefill_num_workers=1.0, prefill_tp_size=1.0, prefill_attention_dp_size=8.0, prefill_moe_tp_size=1.0,
               prefill_moe_ep_size=8.0, decode_num_workers=5.0, decode_tp_size=1.0, decode_pp_size=1.0,
               decode_attention_dp_size=8.0, decode_moe_tp_size=1.0, decode_moe_ep_size=8.0, prefill_pp_size=1.0,
               concurrency=1920.0, spec_refusal="")
    row = _row(**fp8, **dep)
    assert recipe_moe_kernels(row) == ("deepgemm", "deepgemm")
    tp8 = {**dep, "decode_tp_size": 8.0, "decode_attention_dp_size": 1.0, "decode_moe_tp_size": 8.0,
           "decode_moe_ep_size": 1.0}
    assert recipe_moe_kernels(_row(**fp8, **tp8)) == ("deepgemm", None)
    assert recipe_moe_kernels(_row(**fp8, **{**dep, "isl": 8192.0})) == (None, None)
    for other in ({"system": "gb200"}, {"backend": "sglang"}, {"backend": "vllm"}, {"silicon_data_source": "gtl; x=1"}):
        assert recipe_moe_kernels(_row(**{**fp8, **other}, **dep)) == (None, None), other
    agg = dict(mode="agg", tp_size=1.0, pp_size=1.0, attention_dp_size=8.0, moe_tp_size=1.0, moe_ep_size=8.0)
    assert recipe_moe_kernels(_row(**fp8, **{**dep, **agg, "concurrency": 256.0, "osl": 8192.0})) == ("deepgemm", None)
    assert recipe_moe_kernels(_row(**fp8, **{**dep, **agg, "concurrency": 128.0})) == (None, None)
    tables = row_config(row, extra={"replica__kernels": "trtllm"})
    assert ",moe=deepgemm," in tables.prefill_pool and ",moe=deepgemm," in tables.decode_pool
    assert "moe=" not in row_config(row).prefill_pool and row_config(row).replica.moe_kernel == "auto"
    one = row_config(_row(**fp8, **{**dep, **agg, "concurrency": 256.0}), extra={"replica__kernels": "trtllm"})
    assert one.replica.moe_kernel == "deepgemm"


def test_sglang_wide_ep_deepseek_fp8_pools_on_gb200_and_gb300_run_deepgemm():
    """InferenceX's SGLang DeepSeek-R1 FP8 recipes on GB200/GB300 run their expert-parallel workers over DeepEP, whose
    block-FP8 experts run DeepGEMM (a pool without EP keeps FlashInfer's TensorRT-LLM MoE); not on B200 (FlashInfer
    there), not aggregated; in FP4 their wide-EP decode workers run CuteDSL."""
    wide = dict(backend="sglang", system="gb200", precision="fp8", gemm_quant_mode="fp8", prefill_num_workers=2.0,
                prefill_tp_size=1.0, prefill_pp_size=1.0, prefill_attention_dp_size=8.0, prefill_moe_tp_size=1.0,
                prefill_moe_ep_size=8.0, decode_num_workers=1.0, decode_tp_size=4.0, decode_pp_size=1.0,
                decode_attention_dp_size=1.0, decode_moe_tp_size=4.0, decode_moe_ep_size=1.0, concurrency=1024.0,
                silicon_data_source="db-dump; silicon_concurrency=1024", spec_refusal="")
    assert recipe_moe_kernels(_row(**wide)) == ("deepgemm", None)
    assert recipe_moe_kernels(_row(**{**wide, "system": "gb300", "decode_moe_ep_size": 4.0,
                                        "decode_moe_tp_size": 1.0})) == ("deepgemm", "deepgemm")
    for other in ({"system": "b200_sxm"}, {"mode": "agg"}):
        assert recipe_moe_kernels(_row(**{**wide, **other})) == (None, None), other
    # NVFP4: the wide-EP decode workers run FlashInfer's CuteDSL experts (priced from B200's/B300's SGLang rows), the
    # prefill workers and TP decode workers the default; EP 48 (untimed) the default too; not on B200
    fp4 = {**wide, "gemm_quant_mode": "nvfp4", "decode_moe_ep_size": 32.0, "decode_attention_dp_size": 32.0,
           "decode_tp_size": 1.0, "decode_moe_tp_size": 1.0}
    assert recipe_moe_kernels(_row(**fp4)) == (None, "cutedsl")
    assert recipe_moe_kernels(_row(**{**fp4, "system": "gb300"})) == (None, "cutedsl")
    for other in ({"decode_moe_ep_size": 48.0}, {"decode_moe_ep_size": 1.0}, {"system": "b200_sxm"},
                  {"backend": "trtllm", "system": "gb300"}):
        assert recipe_moe_kernels(_row(**{**fp4, **other})) == (None, None), other


def test_trtllm_deepseek_fp4_prefill_workers_run_trtllm_gen_moe_under_their_recipes_max_num_tokens():
    """InferenceX's TensorRT-LLM DeepSeek-R1 NVFP4 disaggregated recipes on B200 and GB200 run their DP-attention
    prefill workers with moe_config backend TRTLLM (the TRTLLM-Gen MoE, AIConfigurator's min-latency rows, at every
    token count) and max_num_tokens 10,240 / 16,896 (B200, 1K / 8K prompts) or 16,384 / 16,640 (GB200); decode pools,
    B300/GB300 (no TRTLLM-Gen rows), FP8, prefill workers without DP attention and other backends keep the default."""
    fp4 = dict(precision="fp4", gemm_quant_mode="nvfp4", silicon_data_source="db-dump; silicon_concurrency=90",
               prefill_num_workers=1.0, prefill_tp_size=1.0, prefill_pp_size=1.0, prefill_attention_dp_size=4.0,
               prefill_moe_tp_size=1.0, prefill_moe_ep_size=4.0, decode_num_workers=5.0, decode_tp_size=8.0,
               decode_pp_size=1.0, decode_attention_dp_size=1.0, decode_moe_tp_size=1.0, decode_moe_ep_size=8.0,
               spec_refusal="")
    row = _row(**fp4)
    assert recipe_moe_kernels(row) == ("min_latency", None)
    assert trtllm_prefill_budget(row) == 10240
    assert trtllm_prefill_budget(_row(**{**fp4, "isl": 8192.0})) == 16896
    assert trtllm_prefill_budget(_row(**{**fp4, "system": "gb200", "isl": 8192.0})) == 16640
    for other in ({"system": "b300_sxm"}, {"system": "gb300"}, {"gemm_quant_mode": "fp8", "precision": "fp8"},
                  {"prefill_attention_dp_size": 1.0, "prefill_tp_size": 4.0}, {"isl": 4096.0},
                  {"silicon_data_source": "gtl; x=1"}, {"mode": "agg"}):
        assert trtllm_prefill_budget(_row(**{**fp4, **other})) is None, other
        assert recipe_moe_kernels(_row(**{**fp4, **other}))[0] != "min_latency", other
    tables = row_config(row, extra={"replica__kernels": "trtllm"})
    assert ",moe=min_latency," in tables.prefill_pool and ",budget=10240," in tables.prefill_pool
    assert "moe=" not in tables.decode_pool and ",budget=8192," in tables.decode_pool


def test_sglang_prefill_workers_take_their_recipes_chunk_and_memory_fraction():
    """SGLang splits --chunked-prefill-size over a worker's attention-DP ranks: the harness's 8,192 gave a DP8 prefill
    rank one 1K prompt a step, where the recipes chunk 131,072 (GB200/GB300 wide-EP FP8; 65,536 FP4) or 32,768
    (B200), with their --mem-fraction-static; the decode pool keeps the harness's budget; other rows nothing."""
    wide = dict(backend="sglang", system="gb200", precision="fp8", gemm_quant_mode="fp8", prefill_num_workers=2.0,
                prefill_tp_size=1.0, prefill_pp_size=1.0, prefill_attention_dp_size=8.0, prefill_moe_tp_size=1.0,
                prefill_moe_ep_size=8.0, decode_num_workers=1.0, decode_tp_size=1.0, decode_pp_size=1.0,
                decode_attention_dp_size=32.0, decode_moe_tp_size=1.0, decode_moe_ep_size=32.0, concurrency=2048.0,
                silicon_data_source="db-dump; silicon_concurrency=2048", spec_refusal="")
    assert sglang_prefill_recipe(_row(**wide)) == (131072, 0.82)
    assert sglang_prefill_recipe(_row(**{**wide, "gemm_quant_mode": "nvfp4"})) == (65536, 0.83)
    assert sglang_prefill_recipe(_row(**{**wide, "prefill_attention_dp_size": 1.0, "prefill_tp_size": 8.0,
                                          "prefill_moe_tp_size": 1.0})) is None  # a low-latency TP recipe
    assert sglang_prefill_recipe(_row(**{**wide, "prefill_moe_ep_size": 1.0, "prefill_moe_tp_size": 8.0})) is None
    # (DP attention without EP: no recipe read runs it)
    assert sglang_prefill_recipe(_row(**{**wide, "system": "b200_sxm"})) == (32768, 0.85)
    assert sglang_prefill_recipe(_row(**{**wide, "system": "b200_sxm", "gemm_quant_mode": "nvfp4", "isl": 8192.0,
                                          "prefill_num_workers": 7.0})) == (65536, 0.85)
    for other in ({"backend": "trtllm"}, {"mode": "agg"}, {"silicon_data_source": "gtl; x=1"}):
        assert sglang_prefill_recipe(_row(**{**wide, **other})) is None, other
    config = row_config(_row(**wide))
    assert ",budget=131072," in config.prefill_pool and ",budget=8192," in config.decode_pool
    assert config.replica.gpu_memory_utilization == 0.82
    assert recipe_moe_kernels(_row(**{**wide, "decode_moe_ep_size": 48.0, "decode_attention_dp_size": 48.0})) == \
        ("deepgemm", None)  # TensorRT-LLM's collectors timed DeepGEMM at EP powers of two only

