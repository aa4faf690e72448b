"""The Vidur importer reproduces the shared Vidur CSVs' rows in the tidy schema (seconds).

Expected values are read from the raw files with the csv module, independently of the
importer's pandas path; one literal spot value per file guards the unit conversion.
Skipped where ``/work/shared/data`` (``../shared/data``) is absent.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from profiler.schema import COLUMNS, KEY_COLUMNS, METADATA_FILE, TABLE_FILE, read_table
from profiler.vidur_import import MLP_OP_MAP, import_to_folder, import_vidur, import_vidur_file
from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "profiles" / "vidur"
MLP = DATA / "compute" / "a100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
PHI2 = DATA / "compute" / "a100" / "microsoft" / "phi-2" / "mlp.csv"
ATTENTION = DATA / "legacy_2024-05" / "a100" / "attention.csv"
ALL_REDUCE = DATA / "network" / "a100_dgx" / "all_reduce.csv"
SEND_RECV = DATA / "network" / "h100_pairwise_nvlink" / "send_recv.csv"

pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason="shared Vidur data (../shared/data) not present")


def raw_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def contains(values: pd.Series, value: float) -> bool:
    return any(v == pytest.approx(value, rel=1e-12) for v in values)


def matching(df: pd.DataFrame, **where: object) -> pd.DataFrame:
    """Rows with these values; Vidur repeats some points, so there may be several."""
    mask = pd.Series(True, index=df.index)
    for col, value in where.items():
        mask &= df[col] == value
    rows = df[mask]
    assert len(rows) >= 1, f"no row matches {where}"
    return rows


def test_mlp_rows_are_reproduced_in_seconds() -> None:
    table = import_vidur_file(MLP)
    assert tuple(table.columns) == COLUMNS
    assert set(table["model"]) == {"llama-2-7b"} and set(table["device"]) == {"a100-80gb"}
    raw = raw_rows(MLP)
    assert len(table) == len(raw) * len({op for op, _ in MLP_OP_MAP.values()})
    # Vidur repeats some points (e.g. 2048 and 4096 tokens); every measurement stays a row.
    by_key: dict[tuple[int, int], list[dict]] = {}
    for rec in raw:
        by_key.setdefault((int(rec["num_tokens"]), int(rec["num_tensor_parallel_workers"])), []).append(rec)
    expected = {"qkv_proj": ["attn_pre_proj"], "attn_out_proj": ["attn_post_proj"], "mlp_up_gate": ["mlp_up_proj"],
                "mlp_down": ["mlp_down_proj"], "rotary": ["attn_rope"], "embedding": ["emb"], "mlp_act": ["mlp_act"],
                "norms": ["input_layernorm", "post_attention_layernorm"], "residual_add": ["add", "add"]}
    for (tokens, tp), recs in list(by_key.items())[::7] + [((4096, 1), by_key[(4096, 1)])]:
        rows = table[(table["num_tokens"] == tokens) & (table["tp"] == tp)]
        for op, vidur_ops in expected.items():
            want = sorted(sum(float(r[f"time_stats.{v}.median"]) for v in vidur_ops) * 1e-3 for r in recs)
            got = sorted(rows.loc[rows["op"] == op, "median_s"])
            assert got == pytest.approx(want, rel=1e-12), (op, tokens, tp)
    # Known row: 4096 tokens, TP1, attention pre-projection 1.911 ms (the file's first row).
    assert contains(table.loc[(table["op"] == "qkv_proj") & (table["num_tokens"] == 4096) & (table["tp"] == 1),
                              "median_s"], 1.911e-3)
    # Linear ops stay below the A100's peaks; times are seconds, not milliseconds.
    linear = table[table["op"].isin(["qkv_proj", "mlp_up_gate", "mlp_down", "attn_out_proj"])]
    assert not linear["suspect"].any() and table["median_s"].max() < 1.0


def test_mlp_of_a_parallel_block_model_counts_its_single_norm() -> None:
    table = import_vidur_file(PHI2)
    norms = table[table["op"] == "norms"]
    assert set(norms["num_calls"]) == {1} and set(table["model"]) == {"phi-2"}


def test_attention_rows_are_reproduced() -> None:
    table = import_vidur_file(ATTENTION)
    raw = raw_rows(ATTENTION)
    prefill_raw = [r for r in raw if r["is_prefill"] == "True"]
    decode_raw = [r for r in raw if r["is_prefill"] == "False"]
    assert (table["op"] == "attn_prefill").sum() == len(prefill_raw)
    assert (table["op"] == "attn_decode").sum() == len(decode_raw)
    for rec in prefill_raw[::211]:
        rows = matching(table, op="attn_prefill", batch_size=int(rec["batch_size"]),
                        chunk_size=int(rec["prefill_chunk_size"]), kv_context=int(rec["kv_cache_size"]))
        assert contains(rows["median_s"], float(rec["time_stats.attn_prefill.median"]) * 1e-3)
        assert (rows["context_len"] == int(rec["kv_cache_size"]) + int(rec["prefill_chunk_size"])).all()
    for rec in decode_raw[::503]:
        rows = matching(table, op="attn_decode", batch_size=int(rec["batch_size"]),
                        context_len=int(rec["kv_cache_size"]))
        assert contains(rows["median_s"], float(rec["time_stats.attn_decode.median"]) * 1e-3)
    # Known rows: the file's last row (prefill 4096, TP2: 2.316 ms) and its first (decode, batch 1, 32 keys).
    assert contains(matching(table, op="attn_prefill", chunk_size=4096, kv_context=0, batch_size=1)["median_s"],
                    2.316e-3)
    assert contains(matching(table, op="attn_decode", batch_size=1, context_len=32)["median_s"], 0.015e-3)
    assert set(table["tp"]) == {2} and table["model"].isna().all()  # 8192/64/8 fits several catalog models


def test_attention_model_can_be_named() -> None:
    table = import_vidur_file(ATTENTION, model="llama-2-70b")
    assert set(table["model"]) == {"llama-2-70b"}


def test_network_rows_keep_single_node_by_default() -> None:
    raw = raw_rows(ALL_REDUCE)
    single = [r for r in raw if int(r["devices_per_node"]) >= int(r["num_workers"])]
    table = import_vidur_file(ALL_REDUCE)
    assert len(table) == len(single) and set(table["op"]) == {"all_reduce"}
    everything = import_vidur_file(ALL_REDUCE, all_topologies=True)
    assert len(everything) == len(raw)
    rec = single[len(single) // 2]
    rows = matching(table, message_bytes=int(rec["size"]), world_size=int(rec["num_workers"]),
                    topology=f"a100_dgx:devices_per_node={rec['devices_per_node']}")
    assert contains(rows["median_s"], float(rec["time_stats.all_reduce.median"]) * 1e-3)
    sr = import_vidur_file(SEND_RECV)
    assert set(sr["op"]) == {"send_recv"} and set(sr["device"]) == {"h100-sxm"}
    assert not sr["suspect"].any()


def test_import_to_folder_merges_and_refuses_another_model(tmp_path: Path) -> None:
    out = tmp_path / "vidur"
    first = import_to_folder([MLP, ALL_REDUCE], out)
    again = import_to_folder([MLP], out)  # same keys: replaced, not added twice
    assert len(again) == len(first)
    assert again.duplicated(list(KEY_COLUMNS)).sum() == first.duplicated(list(KEY_COLUMNS)).sum()
    meta = json.loads((out / METADATA_FILE).read_text())
    assert meta["model"] == "llama-2-7b" and meta["complete"] is True and len(meta["sources"]) == 2
    pd.testing.assert_frame_equal(read_table(out / TABLE_FILE), again)
    other = DATA / "compute" / "a100" / "meta-llama" / "Meta-Llama-3-8B" / "mlp.csv"
    with pytest.raises(ConfigError, match="holds a profile of llama-2-7b"):
        import_to_folder([other], out)


def test_cli_import_vidur(tmp_path: Path) -> None:
    code = "from simulator.cli import main; main()"
    res = subprocess.run([sys.executable, "-c", code, "import-vidur", str(SEND_RECV), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    single = [r for r in raw_rows(SEND_RECV) if int(r["devices_per_node"]) >= int(r["num_workers"])]
    assert len(read_table(tmp_path / "o" / TABLE_FILE)) == len(single)
    bad = subprocess.run([sys.executable, "-c", code, "import-vidur", str(tmp_path / "o" / TABLE_FILE), "--out",
                          str(tmp_path / "p")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "not a Vidur profile" in bad.stderr and "Traceback" not in bad.stderr


def test_folder_input_and_missing_file_errors(tmp_path: Path) -> None:
    table = import_vidur([DATA / "network" / "h100_pairwise_nvlink"])
    assert set(table["op"]) == {"all_reduce", "send_recv"}
    with pytest.raises(ConfigError, match="no such file"):
        import_vidur_file(tmp_path / "mlp.csv")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="holds no mlp.csv"):
        import_vidur([empty])


@pytest.mark.parametrize(("cell", "needle"), [("abc", "column num_tokens: 'abc'"), ("", "column num_tokens: 'nan'"),
                                              ("12.7", "'12.7' is not a whole number"), ("-5", "'-5'")])
def test_bad_key_cells_name_their_line_and_column(tmp_path, cell, needle):  # noqa: ANN001
    """A key cell that is not a whole number was a traceback (int('abc')); now one error naming line and column."""
    from profiler.vidur_import import import_vidur_file
    from simulator.config.errors import ConfigError

    header = ("n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers,"
              "time_stats.mlp_up_proj.median\n")
    path = tmp_path / "mlp.csv"
    path.write_text(header + "32,32,4096,11008,32000,True,1,1,0.05\n" + f"32,32,4096,11008,32000,True,{cell},1,0.06\n")
    with pytest.raises(ConfigError, match="line 3, "):
        import_vidur_file(path, model="llama-2-7b", gpu="a100-80gb")
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        import_vidur_file(path, model="llama-2-7b", gpu="a100-80gb")
    (tmp_path / "empty").mkdir()
    head_only = tmp_path / "empty" / "mlp.csv"
    head_only.write_text(header)
    with pytest.raises(ConfigError, match="no rows"):
        import_vidur_file(head_only, model="llama-2-7b", gpu="a100-80gb")
