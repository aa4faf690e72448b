"""import-vidur files a row under a model only where the row's shape is that model's, and says how many rows it
left out for want of a median time (synthetic files: no shared data needed)."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from profiler.vidur_import import import_vidur_file
from simulator.cli import app
from simulator.config.errors import ConfigError

MLP_HEADER = ("n_head,n_kv_head,n_embd,n_expanded_embd,vocab_size,use_gated_mlp,num_tokens,num_tensor_parallel_workers,"
              "time_stats.mlp_up_proj.median,time_stats.mlp_down_proj.median\n")
ATTN_HEADER = ("n_embd,n_q_head,n_kv_head,num_tensor_parallel_workers,is_prefill,batch_size,prefill_chunk_size,"
               "kv_cache_size,time_stats.attn_prefill.median,time_stats.attn_decode.median\n")


def test_a_named_model_must_have_the_rows_shape(tmp_path):
    mlp = tmp_path / "mlp.csv"
    mlp.write_text(MLP_HEADER + "32,32,4096,11008,32000,True,8,1,0.05,0.04\n")  # Llama-2-7B's shape
    assert set(import_vidur_file(mlp, model="llama-2-7b", gpu="a100-80gb")["model"]) == {"llama-2-7b"}
    with pytest.raises(ConfigError, match="not llama-3-8b's 4096/32/8/14336"):  # was filed as llama-3-8b's
        import_vidur_file(mlp, model="llama-3-8b", gpu="a100-80gb")
    attn = tmp_path / "attention.csv"
    attn.write_text(ATTN_HEADER + "8192,64,8,2,False,4,1,512,,0.02\n")
    assert set(import_vidur_file(attn, model="llama-2-70b", gpu="a100-80gb")["model"]) == {"llama-2-70b"}
    with pytest.raises(ConfigError, match="not llama-2-7b's 4096/32/32"):
        import_vidur_file(attn, model="llama-2-7b", gpu="a100-80gb")


def test_rows_without_a_median_are_counted_and_said(tmp_path):
    mlp = tmp_path / "mlp.csv"
    mlp.write_text(MLP_HEADER + "32,32,4096,11008,32000,True,8,1,0.05,0.04\n32,32,4096,11008,32000,True,16,1,,\n"
                   "32,32,4096,11008,32000,True,32,1,,0.07\n")
    skipped: list = []
    table = import_vidur_file(mlp, model="llama-2-7b", gpu="a100-80gb", skipped=skipped)
    # the second row's kernels both untimed, the third's first: both said (a blank column dropped an op unsaid)
    assert skipped == [(mlp, 2)] and sorted(set(table["num_tokens"])) == [8, 32]
    res = CliRunner().invoke(app, ["import-vidur", str(mlp), "--model", "llama-2-7b", "--gpu", "a100-80gb",
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "left out 2 rows of" in res.output and "without a median time" in res.output


def test_a_message_smaller_than_one_token_has_no_token_count(tmp_path):
    """Vidur times all-reduces from a few bytes up: size // (hidden x 2) was 0 for them, a token count fit
    refused, so the README's import-vidur -> fit chain stopped at fit."""
    from simulator.calibrate.fit_data import validate

    net = tmp_path / "all_reduce.csv"
    net.write_text("size,num_workers,devices_per_node,collective,time_stats.all_reduce.median\n"
                   "1024,2,2,all_reduce,0.01\n1048576,2,2,all_reduce,0.05\n")
    table = import_vidur_file(net, model="llama-2-7b", gpu="a100-80gb")
    tokens = dict(zip(table["message_bytes"], table["num_tokens"], strict=True))
    assert tokens[1048576] == 1048576 // (4096 * 2) and pd.isna(tokens[1024])
    validate(table, "imported table")  # refused 'num_tokens is 0' before


def test_an_infinite_median_is_refused_and_times_in_seconds_are_said(tmp_path):
    """An 'inf' median was read as a blank (its row left out as untimed); a file whose times are in seconds, where
    Vidur writes milliseconds, imported with rc 0, every row marked suspect, said nowhere."""
    from test_cli_fuzz_round13 import invoke, refused

    mlp = tmp_path / "mlp.csv"
    mlp.write_text(MLP_HEADER + "32,32,4096,11008,32000,True,8,1,inf,0.04\n")
    line = refused("import-vidur", str(mlp), "--model", "llama-2-7b", "--gpu", "a100-80gb", "--out", str(tmp_path / "a"))
    assert "column time_stats.mlp_up_proj.median: 'inf' is not a time in ms >= 0" in line, line
    seconds = "".join(f"32,32,4096,11008,32000,True,{n},1,{0.05 * n / 8e3:.3g},{0.04 * n / 8e3:.3g}\n"
                      for n in (256, 512, 1024, 2048))
    mlp.write_text(MLP_HEADER + seconds)
    code, output = invoke("import-vidur", str(mlp), "--model", "llama-2-7b", "--gpu", "a100-80gb", "--out",
                          str(tmp_path / "b"))
    assert code == 0 and "warning: 8 of the 8 rows imported are faster than the GPU's peaks" in output, output
    assert "look like times in seconds" in output, output
