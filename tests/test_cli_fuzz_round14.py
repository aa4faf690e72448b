"""CLI fuzzing, round 14 (the commands earlier rounds covered least): a fit of any --model on a table timed for
another, a calibration of a partial profiles folder presented as a fit, reports overwriting another's README, an
import labelled with its folder's name, flags that did nothing (a bench fit's --seed, --max-total-tokens over exact
lengths, profile --tp on communication ops), a bench of zero TTFTs, a config.json's use_sliding_window false, a
learned artifact tied to its model's path as typed, steps no engine runs, and lists with empty or repeated items.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from test_cli_fuzz_round13 import invoke, refused

from simulator.config.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
VIDUR = ROOT.parent / "shared" / "data" / "profiles" / "vidur"
MLP = VIDUR / "compute" / "a100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
needs_vidur = pytest.mark.skipif(not MLP.is_file(), reason="Vidur's profiles are not in ../shared")


@needs_vidur
def test_a_fit_refuses_a_model_whose_shapes_the_table_did_not_time(tmp_path: Path) -> None:
    """A Vidur table imported without --model names none: fit --model qwen-72b priced Qwen-72B with Llama-2-7B's
    GEMMs (63.5 ms a 512-token prefill against the roofline's 191)."""
    (tmp_path / "a100").mkdir()
    shutil.copy(MLP, tmp_path / "a100" / "mlp.csv")
    code, output = invoke("import-vidur", str(tmp_path / "a100" / "mlp.csv"), "--out", str(tmp_path / "iv"))
    assert code == 0, output
    line = refused("fit", "--profile", str(tmp_path / "iv"), "--model", "qwen-72b", "--tp", "2", "--out",
                   str(tmp_path / "f.json"))
    assert "rows do 0.25x the work of qwen-72b's attn_out_proj at tp 2" in line and not (tmp_path / "f.json").exists()
    code, output = invoke("fit", "--profile", str(tmp_path / "iv"), "--model", "llama-2-7b", "--tp", "2", "--out",
                          str(tmp_path / "f.json"))
    assert code == 0, output
    (tmp_path / "loose").mkdir()  # outside Vidur's layout, no GPU named: it was labelled 'loose'
    shutil.copy(MLP, tmp_path / "loose" / "mlp.csv")
    line = refused("import-vidur", str(tmp_path / "loose" / "mlp.csv"), "--out", str(tmp_path / "iv2"))
    assert "its folder (loose) names no catalog GPU" in line and "pass --gpu" in line


@needs_vidur
def test_calibrate_refuses_a_folder_without_every_gpus_profiles(tmp_path: Path) -> None:
    from simulator.calibrate.fit_calibration import calibrate_all

    (tmp_path / "vidur" / "compute").mkdir(parents=True)
    shutil.copytree(VIDUR / "compute" / "a100", tmp_path / "vidur" / "compute" / "a100")
    with pytest.raises(ConfigError, match="lacks vidur/legacy_2024-05/a100/attention.csv, .* and 5 more, whose constants"):
        calibrate_all(tmp_path)


def test_reports_and_profiles_keep_to_their_own_folders(tmp_path: Path) -> None:
    """validate --out a project folder replaced its README.md; import-vidur wrote into a run's folder."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "README.md").write_text("mine\n")
    line = refused("validate", "--out", str(tmp_path / "proj"))
    assert "README.md is not this report's" in line and (tmp_path / "proj" / "README.md").read_text() == "mine\n"
    assert "README.md is not this report's" in refused("fidelity", "--out", str(tmp_path / "proj"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text("{}")
    assert "already holds other files (summary.json)" in refused("import-vidur", str(tmp_path / "run" / "summary.json"),
                                                                 "--out", str(tmp_path / "run"))


def test_flags_that_did_nothing_are_refused(tmp_path: Path) -> None:
    line = refused("run", "--workload", "fixed", "--max-total-tokens", "1000", "--no-progress")
    assert "--max-total-tokens: every request of the fixed workload is 512 + 128 tokens" in line
    from profiler.runner import ProfileConfig

    with pytest.raises(ConfigError, match="--tp would do nothing"):
        ProfileConfig(model="tiny-llama-1b", out=tmp_path / "p", ops=("all_reduce",), tp=(2,))
    with pytest.raises(ConfigError, match="--threads: must be positive"):
        ProfileConfig(model="tiny-llama-1b", out=tmp_path / "p", num_threads=0)
    assert "'8,' has an empty item" in refused("predict", "--prefill", "8,")
    assert "names a backend twice" in refused("fidelity", "--profile", str(tmp_path), "--kernels", "vllm,vllm")


def test_bench_fits_refuse_a_seed_and_zero_ttfts(tmp_path: Path) -> None:
    bench = json.loads((ROOT / "tests" / "data" / "vllm_bench_fixture.json").read_text())
    (tmp_path / "b.json").write_text(json.dumps(bench))
    line = refused("calibrate-engine", "--bench", str(tmp_path / "b.json"), "--seed", "3", "--out",
                   str(tmp_path / "e.json"))
    assert "--seed" in line and "would do nothing" in line
    from simulator.calibrate.engine_fit import read_bench

    (tmp_path / "z.json").write_text(json.dumps({**bench, "ttfts": [0.0] * len(bench["ttfts"])}))
    with pytest.raises(ConfigError, match=r"ttfts\[0\] is 0"):
        read_bench(tmp_path / "z.json")


def test_a_step_table_refuses_steps_no_engine_runs() -> None:
    from simulator.calibrate.engine_fit import check_iteration_table

    good = {"tp": 1, "num_prefills": 0, "prefill_tokens": 0, "prefill_context": 0, "num_decodes": 8, "decode_context": 512,
            "measured_s": 0.02}
    for change, said in (({"num_prefills": 1}, "prefills of 0 tokens"), ({"prefill_tokens": 64}, "no prefills"),
                         ({"decode_context": 0}, "context of 0 tokens"), ({"prefill_context": 100}, "prefill_context")):
        rows = pd.DataFrame([good] * 11 + [{**good, **change}])
        with pytest.raises(ConfigError, match=said):
            check_iteration_table(rows, "llama-2-7b", "a100-80gb")


def test_use_sliding_window_false_turns_the_window_off(tmp_path: Path) -> None:
    from simulator.config.catalog import get_model

    cfg = json.loads((ROOT / "tests" / "data" / "hf_configs" / "llama-3.1-8b" / "config.json").read_text())
    for name, extra in (("on", {"sliding_window": 4096}), ("off", {"sliding_window": 4096, "use_sliding_window": False})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({**cfg, **extra}))
    assert get_model(str(tmp_path / "on" / "config.json")).num_sliding_layers > 0
    assert get_model(str(tmp_path / "off" / "config.json")).num_sliding_layers == 0


def test_a_learned_artifact_names_its_model_file_from_any_folder(tmp_path: Path) -> None:
    from simulator.costmodel.learned import same_model_file

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert same_model_file(str(tmp_path / "m" / "config.json"), str(tmp_path / "m" / ".." / "m" / "config.json"))
    assert not same_model_file("llama-2-7b", "llama-2-7b") and not same_model_file(str(tmp_path / "m"), "x/y.json")


def test_review_of_round_14(tmp_path: Path) -> None:
    """A profile folder with an interrupted write's temporary, or a fidelity report inside it, resumes; a GPU named
    higher up the path is not the file's; a speculating bench fit reads --seed; --max-total-tokens above the context
    replaces the run's cap; a model folder matches its config.json."""
    from simulator.cli.profile import check_profile_dir

    (tmp_path / "p").mkdir()
    (tmp_path / "p" / ".profile.csv.tmp-123").write_text("")
    check_profile_dir(tmp_path / "p")
    (tmp_path / "p" / "metadata.json").write_text("{}")
    (tmp_path / "p" / "fidelity").mkdir()
    check_profile_dir(tmp_path / "p")
    from profiler.vidur_import import _gpu_from_path

    assert _gpu_from_path(tmp_path / "h100" / "x" / "y" / "z" / "loose" / "mlp.csv")[1] is None
    assert _gpu_from_path(tmp_path / "h100" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv")[1].name == "h100-sxm"
    code, output = invoke("run", "--model", "llama-2-7b", "--workload", "fixed", "--prompt-tokens", "4000",
                          "--output-tokens", "200", "--max-total-tokens", "5000", "--num-requests", "4", "--no-progress")
    assert code == 0 and "rejected" in output, output
    from simulator.costmodel.learned import same_model_file

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    assert same_model_file(str(tmp_path / "m"), str(tmp_path / "m" / "config.json"))
