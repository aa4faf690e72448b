"""CLI fuzzing, round 10: flags that did nothing in some combination, or were refused where they act.

Each case ran silently the same as without the flag (--kv-link-scope beside a mixed pool, --tbt-slo beside
--goodput-tpot-slo, --normalize-arrivals in a closed-loop capacity search, --arrival gamma without --cv,
--workload uniform without a --*-max, --roofline-calibration where the kernel tables price every op), took
a value vLLM refuses (--max-model-len over the model's context), kept the last of two spellings of one
option, or was refused where it acts (--normalize-arrivals in a capped open loop). Now each refusal is one
line naming the flag and the fix.
"""

from __future__ import annotations

from typing import Any

import pytest
from helpers import one_line_error, simulate_module
from typer.testing import CliRunner

from simulator.cli.app import app
from simulator.config.errors import ConfigError
from simulator.config.options import OPTION_ALIASES, build_config


def refused(**options: Any) -> ConfigError:
    """The error :func:`build_config` raises for a run of ``options``."""
    with pytest.raises(ConfigError) as err:
        build_config(**options)
    return err.value


# -- --kv-link-scope with one prefill worker and a mixed pool ------------------------------------------------

def test_kv_link_scope_with_one_prefill_worker_is_refused_beside_a_mixed_pool() -> None:
    """The mixed pool's requests never cross a KV link: the one prefill worker's egress is the link either way
    (tests/test_kv_links.py runs it bit for bit)."""
    err = refused(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1)", mixed_pool="1x(tp=1)", kv_link="5GB/s@10us",
                  kv_link_scope="shared")
    assert err.field == "--kv-link-scope" and "one prefill worker sends every transfer" in str(err)
    build_config(prefill_pool="2x(tp=1)", decode_pool="1x(tp=1)", mixed_pool="1x(tp=1)", kv_link="5GB/s@10us",
                 kv_link_scope="shared")


# -- capacity --criterion goodput: --tbt-slo beside --goodput-tpot-slo ---------------------------------------

def test_tbt_slo_is_refused_where_goodput_tpot_slo_holds_the_good_requests() -> None:
    proc = simulate_module("capacity", "--num-requests", "16", "--criterion", "goodput", "--goodput-tpot-slo", "0.1",
                           "--tbt-slo", "0.05")
    assert "--tbt-slo: --criterion goodput holds a good request's TPOT to --goodput-tpot-slo 0.1" in one_line_error(proc)


# -- capacity --users: a closed loop has no gaps to rescale ----------------------------------------------------

def test_a_users_search_refuses_normalize_arrivals() -> None:
    proc = simulate_module("capacity", "--users", "--num-requests", "16", "--normalize-arrivals")
    assert "--normalize-arrivals: --users searches a closed loop" in one_line_error(proc)


# -- --normalize-arrivals in a capped open loop ------------------------------------------------------------------

def test_normalize_arrivals_moves_the_sends_of_a_capped_open_loop() -> None:
    """--concurrency with --qps draws Poisson gaps and holds each send for a free user: the rescale moves them,
    as vllm bench serve rescales under --max-concurrency. A closed loop (no rate) still refuses it."""
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    options = dict(model="llama-3.1-8b", gpu="h100-sxm", workload="fixed", prompt_tokens=128, output_tokens=16,
                   num_requests=20, concurrency=4, qps=2.0, seed=1)
    plain, rescaled = (request_columns(simulate(build_config(**options, normalize_arrivals=flag)))
                       for flag in (None, True))
    assert not (plain["arrival_at"] == rescaled["arrival_at"]).all()
    assert refused(concurrency=4, normalize_arrivals=True).field == "--normalize-arrivals"


# -- --arrival gamma without --cv, --workload uniform without a --*-max -----------------------------------------

def test_gamma_of_cv_1_and_uniform_without_a_range_are_refused_as_the_runs_they_repeat() -> None:
    """Gamma gaps of shape 1 are numpy's exponential draws, and a uniform draw over one length is that
    length: each run is the other's bit for bit, so the flag that names it is refused."""
    from simulator.config.run_config import RunConfig
    from simulator.report.metrics import request_columns
    from simulator.simulation import simulate

    base = RunConfig().replace(workload__num_requests=30, workload__qps=4.0, seed=3)
    pairs = [(base, base.replace(workload__arrival="gamma")),
             (base.replace(workload__name="fixed"), base.replace(workload__name="uniform"))]
    for a, b in pairs:
        ca, cb = (request_columns(simulate(c)) for c in (a, b))
        for col in ("arrival_at", "num_prompt_tokens", "num_output_tokens", "completed_at"):
            assert (ca[col] == cb[col]).all(), col
    err = refused(arrival="gamma", qps=4.0)
    assert err.field == "--arrival" and "give a --cv other than 1" in str(err)
    assert refused(arrival="gamma", cv=1.0).field == "--arrival"
    err = refused(workload="uniform", prompt_tokens=512)
    assert err.field == "--workload" and "--prompt-tokens-max or --output-tokens-max" in str(err)
    assert build_config(arrival="gamma", cv=2.0).workload.cv == 2.0
    assert build_config(workload="uniform", output_tokens_max=200).workload.name == "uniform"


# -- a vLLM spelling and the option's own name, given together ----------------------------------------------------

# Two different values for each option that has vLLM spellings (OPTION_ALIASES).
_TWO_VALUES = {"tp": ("2", "4"), "pp": ("1", "2"), "attention_dp": ("2", "4"), "qps": ("2", "3"),
               "num_requests": ("8", "9"), "concurrency": ("2", "3"), "num_warmup": ("1", "2"),
               "workload": ("fixed", "random"), "prompt_tokens": ("100", "200"), "output_tokens": ("10", "20"),
               "range_ratio": ("0.1", "0.2"), "prompt_tokens_stddev": ("1", "2"), "output_tokens_stddev": ("1", "2"),
               "dtype": ("bf16", "fp8")}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


@pytest.mark.parametrize(("name", "alias"), [(name, alias) for name, aliases in OPTION_ALIASES.items()
                                             for alias in aliases])
def test_an_option_and_its_vllm_spelling_with_different_values_are_refused(name: str, alias: str) -> None:
    """typer folded both spellings into one parameter, whose last value won (--tensor-parallel-size 2 --tp 4 ran
    at TP 4); each is a parameter of its own now, and resolve_aliases refuses the pair."""
    ours, theirs = _TWO_VALUES[name]
    res = CliRunner().invoke(app, ["run", "--no-progress", _flag(alias), theirs, _flag(name), ours])
    assert isinstance(res.exception, ConfigError), res.output
    assert res.exception.field == _flag(name) and "given twice" in str(res.exception) and _flag(alias) in str(res.exception)


def test_the_same_value_under_both_spellings_runs_and_a_commands_default_yields_to_vllms_spelling() -> None:
    res = CliRunner().invoke(app, ["run", "--no-progress", "--num-prompts", "4", "--num-requests", "4",
                                   "--tensor-parallel-size", "2", "--tp", "2"])
    assert res.exit_code == 0 and "tp=2" in res.output, res.output
    # capacity's own --num-requests default (2048) is not a second value beside --num-prompts: the run options
    # pass, and the next check (--out) speaks
    res = CliRunner().invoke(app, ["capacity", "--num-prompts", "16", "--out", "/proc/servesim-capacity"])
    assert isinstance(res.exception, ConfigError) and res.exception.field == "--out", res.output


# -- replicas: at most 10,000 ------------------------------------------------------------------------------------

def test_more_than_10000_replicas_are_refused_with_why() -> None:
    """Each replica takes ~8 ms to build: 100,000 were accepted and sat silent for 13 minutes."""
    assert build_config(replicas=10_000, num_requests=4).num_replicas == 10_000
    err = refused(replicas=10_001, num_requests=4)
    assert "at most 10,000 (each replica takes milliseconds to build" in str(err) and "--replicas 10,000" in str(err)
    err = refused(prefill_pool="10001x(tp=1)", decode_pool="1x(tp=1)")
    assert err.field == "prefill_pool" and "10,001 replicas is more than 10,000" in str(err)


# -- errors name the flag, not the field behind it ---------------------------------------------------------------

@pytest.mark.parametrize(("args", "line"), [
    (["capacity", "--max-trials", "1"], "error: --max-trials: must be >= 2, got 1 (pass --max-trials 2 or more)"),
    (["capacity", "--rel-tol", "2"], "error: --rel-tol: must be in (0, 1), got 2.0"),
    (["run", "--replicas", "0"], "error: --replicas: must be positive, got 0 (pass --replicas > 0)"),
])
def test_a_search_setting_and_the_replica_count_are_named_by_their_flags(args: list[str], line: str) -> None:
    """They were named capacity.max_trials, capacity.rel_tol and cluster.num_replicas (no field of a config file)."""
    assert one_line_error(simulate_module(*args, "--num-requests", "8")).startswith(line)
