"""CLI fuzzing, round 11: flags accepted where they change nothing (an audit ran each beside its run without it
and found the same numbers), now refused as doing nothing, each in one line naming the flag and the fix:
the prefix-cache flags on disaggregated pools that cache nothing, the attention-DP balance on pools that
never hold a prompt for it, and what a command decides for itself (plan without aggregated layouts, tau's one
iteration, split's one prefill worker, capacity's closed loop, values equal to a default).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from simulator.cli.app import app
from simulator.config.errors import ConfigError
from simulator.config.options import build_config

POOLS = {"prefill_pool": "1x(tp=1)", "decode_pool": "1x(tp=1)"}
DIS = ["--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)"]


@pytest.fixture
def mooncake(shared_data: Path) -> str:
    """Mooncake's conversation trace (block hashes: what a prefix cache reads)."""
    return str(shared_data / "traces" / "mooncake" / "conversation_trace.jsonl")


def refused(**options: Any) -> ConfigError:
    """The error :func:`build_config` raises for a run of ``options``."""
    with pytest.raises(ConfigError) as err:
        build_config(**options)
    return err.value


def refusal(*args: str) -> ConfigError:
    """The ConfigError ``simulate ARGS`` stops on (a one-line error, exit 2, no traceback)."""
    res = CliRunner().invoke(app, list(args))
    assert isinstance(res.exception, ConfigError), res.output
    return res.exception


# -- prefix caching: the prefill pool caches as the run's engine would, a mixed pool as its scheduler -------------

VLLM = ["--scheduler", "vllm", "--max-num-batched-tokens", "8192"]  # (no pool caches by default)


@pytest.mark.parametrize(("flag", "needle"), [(["--prefix-cache-policy", "radix-lru"], "prefix caching is off in the "
                                               "prefill pool"),
                                              (["--no-prefix-caching"], "no pool of the run caches prefixes by default")])
@pytest.mark.parametrize("command", ["run", "capacity"])
def test_prefix_cache_flags_are_refused_on_pools_that_cache_nothing(command: str, flag: list[str], needle: str,
                                                                   mooncake: str) -> None:
    """Under --scheduler vllm no pool caches by default (the decode pool never does): --prefix-cache-policy and
    --no-prefix-caching would run the very run without them, and config.json would say otherwise."""
    err = refusal(command, "--trace", mooncake, "--num-requests", "30", *DIS, *VLLM, *flag)
    text = str(err)
    assert flag[0] in text and "\n" not in text and needle in text


@pytest.mark.parametrize("flag", [["--prefix-cache-policy", "radix-lru"], ["--no-prefix-caching"], ["--prefix-caching"],
                                  ["--cpu-kv-gib", "4"]])
def test_prefix_cache_flags_set_the_prefill_pool_s_cache(flag: list[str], mooncake: str) -> None:
    """The prefill pool caches where the run's engine would (vllm-v1: on), so each flag is read there (it had been
    refused: the pools kept no prefix cache)."""
    from simulator.config.disagg_layout import layout_of

    options = {"prefix_cache_policy": "radix-lru"} if flag[0] == "--prefix-cache-policy" else \
        {"prefix_caching": flag[0] == "--prefix-caching"} if "caching" in flag[0] else {"cpu_kv_gib": 4.0}
    layout = layout_of(build_config(**POOLS, trace=mooncake, num_requests=30, **options))
    expect = None if flag[0] == "--no-prefix-caching" else options.get("prefix_cache_policy", "vllm-lru")
    assert layout.prefill_scheduler.prefix_cache == expect and layout.decode_scheduler.prefix_cache is None


def test_a_mixed_pool_caches_and_takes_the_prefix_cache_flags(mooncake: str) -> None:
    """A mixed pool's replicas serve whole requests and cache as an aggregated replica: --prefix-caching had been
    refused there as "not modelled in disaggregated pools". The policy flag still needs caching on there."""
    mixed = dict(POOLS, mixed_pool="1x(tp=1)", trace=mooncake, num_requests=30)
    assert build_config(**mixed, scheduler="vllm", prefix_caching=True).scheduler.prefix_cache == "vllm-lru"
    assert build_config(**mixed, prefix_caching=False).scheduler.prefix_caching is False
    build_config(**mixed, prefix_cache_policy="radix-lru")  # vllm-v1's mixed pool caches by default
    err = refused(**mixed, scheduler="vllm", prefix_cache_policy="radix-lru")
    assert err.field == "--prefix-cache-policy" and "prefix caching is off in the prefill and mixed pools" in str(err)


# -- the attention-DP balance: only an aggregated replica's or a mixed pool's ranks hold prompts ----------------

DP_POOLS = {"model": "mixtral-8x7b", "gpu": "h100-sxm", "num_requests": 120, "arrival": "burst",
            "prefill_pool": "1x(tp=1,dp=4,ep=4)", "decode_pool": "1x(tp=1,dp=4,ep=4)"}


@pytest.mark.parametrize("balance", [{"dp_balance_timeout_iters": 50},
                                     {"dp_balance_timeout_iters": 50, "dp_balance_batching_wait_iters": 5}])
def test_dp_balance_is_refused_where_only_the_prefill_pool_has_dp_ranks(balance: dict[str, int]) -> None:
    """The balance holds new prompts while every rank decodes: a prefill pool's rank with a prompt has no decode
    (the balance lets prompts go at once), so there it did nothing; a decode pool's ranks recompute preempted
    requests' prompts, and a mixed pool's take whole requests: the balance is read there."""
    prefill_only = {**DP_POOLS, "decode_pool": "1x(tp=4,ep=4)"}
    err = refused(**prefill_only, **balance)
    assert err.field == "--dp-balance-timeout-iters" and "a prefill pool's ranks never all decode" in str(err)
    assert "add dp=N to --decode-pool or --mixed-pool, or drop --dp-balance-timeout-iters" in str(err)
    # where ranks do hold prompts: a decode pool or a mixed pool with attention DP, an aggregated replica with it
    build_config(**DP_POOLS, **balance)
    build_config(**prefill_only, **balance, mixed_pool="1x(tp=1,dp=4,ep=4)")
    build_config(model="mixtral-8x7b", gpu="h100-sxm", attention_dp=4, ep=4, **balance)


def test_dp_balance_moves_a_decode_pool_whose_ranks_preempt() -> None:
    """A decode rank's preempted request goes back to waiting to recompute its prompt, and the balance holds it: a
    tight cache on a DP2 decode pool ran differently with the balance on (a reviewer's case), yet was refused."""
    from types import SimpleNamespace

    from simulator.config.run_config import RunConfig
    from simulator.simulation import simulate

    rng = np.random.default_rng(1)
    n = 60
    table = SimpleNamespace(arrival_at=list(np.arange(n) * 0.01), source="t",
                            num_prompt_tokens=[int(x) for x in rng.integers(200, 600, n)],
                            num_output_tokens=[int(x) for x in rng.integers(200, 800, n)])
    base = RunConfig().replace(prefill_pool="1x(tp=1)", decode_pool="1x(tp=1,dp=2)", kv_link="infiniband-200g",
                               replica__model="qwen3-30b-a3b", replica__gpu="h100-sxm", replica__max_model_len=2048,
                               replica__num_gpu_blocks=400)
    off = simulate(base, table)
    on = simulate(base.replace(scheduler__dp_balance_timeout_iters=50), table)
    assert sum(r.num_preemptions for r in off.requests) > 0
    assert [r.completed_at for r in on.requests] != [r.completed_at for r in off.requests]


# -- plan --modes disagg: pools of a research policy run vllm; under --scheduler vllm they keep no prefix cache ----

PLAN = ["plan", "--gpus", "a100-80gb", "--modes", "disagg", "--tps", "1", "--seqs", "128", "--ratios", "1:1",
        "--num-requests", "60", "--qps", "1", "--no-verify"]


@pytest.mark.parametrize("flag", [["--scheduler", "sarathi"], ["--scheduler", "orca"],
                                  ["--scheduler", "vllm", "--max-num-batched-tokens", "8192", "--no-prefix-caching"]])
def test_plan_without_aggregated_layouts_refuses_what_only_they_read(flag: list[str], mooncake: str,
                                                                     tmp_path: Path) -> None:
    """Every layout of --modes disagg runs the pools' scheduler: a research policy's pools run vllm, so --scheduler
    sarathi schedules none of them (an engine's, sglang or trtllm, runs its pools: tests/test_plan_pool_scheduler.py).
    Under --scheduler vllm no prefill pool caches by default: --no-prefix-caching does nothing."""
    err = refusal(*PLAN, "--trace", mooncake, "--out", str(tmp_path / "plan"), *flag)
    named = flag[-1] if flag[-1].startswith("--") else flag[0]
    if named == "--no-prefix-caching":  # (no aggregated layout under vllm caches either: the run options' own check)
        assert err.field == named and "--scheduler vllm caches no prefixes by default" in str(err)
        return
    assert err.field == named and "--modes disagg searches only disaggregated pools" in str(err)
    assert "add agg to --modes, or " in str(err) and f"drop {named}" in str(err)


def test_plan_without_aggregated_layouts_passes_the_prefix_cache_flags_to_the_prefill_pools(tmp_path: Path) -> None:
    """Each layout's prefill pool caches as a run's would (vllm-v1: on), so over a trace with block hashes the flags
    change the plan: they had been refused as 'whose bound prices no prefix cache'. 100 prompts of 8,192 tokens
    sharing 15 of their 16 blocks: recomputing them takes more units."""
    import json

    import pandas as pd

    rows = [{"timestamp": 50 * i, "input_length": 8192, "output_length": 16, "hash_ids": [*range(15), 1000 + i]}
            for i in range(100)]
    trace = tmp_path / "shared.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    args = ["plan", "--model", "llama-3.1-8b", "--max-model-len", "16384", "--gpus", "h100-sxm", "--modes", "disagg",
            "--tps", "1", "--seqs", "128", "--ratios", "1:1", "--num-requests", "100", "--qps", "4", "--no-verify",
            "--trace", str(trace)]
    units = {}
    for name, flags in {"cached": [], "off": ["--no-prefix-caching"], "radix": ["--prefix-cache-policy", "radix-lru"],
                        "cpu": ["--cpu-kv-gib", "4"]}.items():
        res = CliRunner().invoke(app, [*args, *flags, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        units[name] = int(pd.read_csv(tmp_path / name / "plan.csv")["units"].iloc[0])
    assert units["off"] > units["cached"]


def test_plan_without_aggregated_layouts_takes_scheduler_vllm_that_keeps_a_budget() -> None:
    """--scheduler vllm says the pools keep --max-num-batched-tokens; with agg in --modes every flag is read."""
    from simulator.planning.plan import SearchSpace, unread_run_options

    disagg, both = (SearchSpace(modes=modes) for modes in (("disagg",), ("agg", "disagg")))
    assert "scheduler" not in unread_run_options(build_config(scheduler="vllm", max_num_batched_tokens=4096), disagg)
    unread = unread_run_options(build_config(scheduler="sglang"), both)
    assert not {"scheduler", "prefix_caching", "prefix_cache_policy", "cpu_kv_gib"} & set(unread)


# -- capacity: the seed of trials that draw nothing -----------------------------------------------------------------

FIXED_USERS = ["capacity", "--users", "--workload", "fixed", "--prompt-tokens", "300", "--output-tokens", "50",
               "--num-requests", "100", "--max-trials", "4", "--workers", "1"]


@pytest.mark.parametrize(("flag", "needle"), [(["--seeds", "3"], "each of the 3 seeds would search the very same"),
                                              (["--seed", "5"], "--seed would do nothing")])
def test_capacity_refuses_seeds_where_its_trials_draw_nothing(flag: list[str], needle: str) -> None:
    """The run options are checked on the config before --users makes each trial a closed loop (its Poisson
    arrivals read the seed; the trials' burst of users does not): three seeds searched one answer three times."""
    err = refusal(*FIXED_USERS, *flag)
    assert err.field == flag[0] and "nothing in the search's trials is drawn at random" in str(err)
    assert needle in str(err) and f"drop {flag[0]}" in str(err)
    # fixed arrivals of fixed lengths in a rate search: the same
    err = refusal("capacity", "--arrival", "fixed", "--workload", "fixed", "--num-requests", "100", "--seeds", "3")
    assert err.field == "--seeds" and "at fixed arrivals" in str(err)


def test_capacity_takes_seeds_where_its_trials_draw() -> None:
    from simulator.planning.capacity import seed_unread

    assert seed_unread(build_config(workload="fixed", num_requests=100), users=False) is None  # Poisson gaps
    assert seed_unread(build_config(num_requests=100), users=True) is None  # ShareGPT's drawn lengths
    assert seed_unread(build_config(workload="fixed", num_requests=100), users=True) is not None


# -- a value equal to the default, given, does nothing as much as another -------------------------------------------

CAPACITY = ["capacity", "--workload", "fixed", "--num-requests", "64", "--max-trials", "2", "--workers", "1"]


@pytest.mark.parametrize("qps", ["1", "2"])
def test_capacity_refuses_a_qps_it_does_not_read_whatever_its_value(qps: str) -> None:
    """The checks compared --qps with its default (1): --qps 2 was refused beside --users and --qps-start, and
    --qps 1 ran, ignored."""
    err = refusal(*CAPACITY, "--users", "--qps", qps)
    assert err.field == "--qps" and "--users searches a closed loop" in str(err) and "drop --qps" in str(err)
    err = refusal(*CAPACITY, "--qps-start", "3", "--qps", qps)
    assert err.field == "--qps-start" and f"--qps {qps} sets the first trial's rate too" in str(err)


@pytest.mark.parametrize("arrival", ["poisson", "burst"])
def test_capacity_users_refuses_an_arrival_process_typed(arrival: str) -> None:
    """--users runs each trial as a closed loop (users send as theirs end): --arrival poisson or burst, typed, was
    accepted and changed nothing."""
    err = refusal(*CAPACITY, "--users", "--arrival", arrival)
    assert err.field == "--arrival" and "--users searches a closed loop" in str(err) and "drop --arrival" in str(err)


def test_capacity_refuses_a_goodput_search_sched_delay_slo_at_its_default() -> None:
    err = refusal(*CAPACITY, "--criterion", "goodput", "--sched-delay-slo", "2")
    assert err.field == "--sched-delay-slo" and "judges a trial by its goodput alone" in str(err)


# -- tau prices one iteration: no arrivals to rescale, no prefix cache ------------------------------------------------

@pytest.mark.parametrize("flag", [["--normalize-arrivals"], ["--prefix-caching"], ["--no-prefix-caching"],
                                  ["--prefix-cache-policy", "radix-lru"], ["--cpu-kv-gib", "4"]])
def test_tau_refuses_what_one_iteration_does_not_read(flag: list[str], mooncake: str) -> None:
    """Each ran the very tau of the run without it (--normalize-arrivals changed a label only)."""
    err = refusal("tau", "--trace", mooncake, "--model", "llama-3.1-8b", "--max-model-len", "32768", *flag)
    assert err.field == flag[0] and "tau does not read it" in str(err) and f"drop {flag[0]}" in str(err)


# -- --kv-link-scope over an infinite link ---------------------------------------------------------------------------

def test_kv_link_scope_is_refused_over_an_infinite_link() -> None:
    """A transfer holds an infinite link for no time: no transfer waits for another, shared or per worker."""
    pools = {"prefill_pool": "2x(tp=1)", "decode_pool": "1x(tp=1)", "num_requests": 60, "qps": 8.0}
    err = refused(**pools, kv_link="infinite", kv_link_scope="shared")
    assert err.field == "--kv-link-scope" and "--kv-link infinite moves every transfer in no time" in str(err)
    assert "give --kv-link a bandwidth" in str(err) and "drop --kv-link-scope" in str(err)
    build_config(**pools, kv_link="infinite")
    assert build_config(**pools, kv_link="5GB/s@10us", kv_link_scope="shared").kv_link_scope == "shared"


# -- disagg split/compare: a pool option that no layout reads ---------------------------------------------------------

@pytest.mark.parametrize(("flag", "needle"), [(["--router", "random"], "the prefill pool is one"),
                                              (["--kv-link-scope", "shared"], "one prefill worker sends every transfer")])
def test_split_refuses_a_pool_option_no_layout_reads(flag: list[str], needle: str) -> None:
    """Every split of 2 GPUs at TP 1 has one prefill worker: --router random and --kv-link-scope shared searched
    the very layouts (a run refuses them for one prefill worker; split lays the pools out itself)."""
    err = refusal("disagg", "split", "--gpus", "2", "--tps", "1", "--num-requests", "60", *flag)
    assert err.field == flag[0] and "no layout of the search reads it" in str(err) and needle in str(err)
    assert f"drop {flag[0]}" in str(err)


def test_split_and_compare_keep_a_pool_option_some_layout_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """3 GPUs lay out two prefill workers beside one decode worker; compare's aggregated arms route over replicas."""
    from simulator.cli import disagg

    class Searched(Exception):
        """The command got past its checks to the search (not run here)."""

    def search(candidates, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        raise Searched(len(candidates))

    monkeypatch.setattr(disagg, "_search", search)
    for args in (["split", "--gpus", "3"], ["compare", "--gpus", "2", "--taus", "256"]):
        res = CliRunner().invoke(app, ["disagg", *args, "--tps", "1", "--num-requests", "60", "--router", "random"])
        assert isinstance(res.exception, Searched), res.output


# -- plan --price of a GPU not searched -------------------------------------------------------------------------------

def test_plan_refuses_a_price_of_a_gpu_it_does_not_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--gpus a100-80gb --price h100-sxm=1.0 planned the A100 alone, the H100's price unread."""
    from simulator.planning import plan

    args = [*PLAN, "--out", str(tmp_path / "plan"), "--price", "A100-80GB=5"]
    err = refusal(*args, "--price", "h100-sxm=1.0")
    assert err.field == "--price" and "--gpus a100-80gb does not search it" in str(err)
    assert "add h100-sxm to --gpus, or drop --price h100-sxm=1.0" in str(err)

    class Planned(Exception):
        """The command got past its checks to the plan (not run here)."""

    def planned(config, qps, slo, space, prices, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        raise Planned(prices["a100-80gb"].usd_per_gpu_hour)

    monkeypatch.setattr(plan, "plan", planned)
    res = CliRunner().invoke(app, args)  # the searched GPU's price, however spelled, is taken
    assert isinstance(res.exception, Planned) and res.exception.args == (5.0,), res.output


@pytest.mark.parametrize("flag", ["--prefix-caching", "--no-prefix-caching"])
def test_a_trace_without_block_hashes_names_the_prefix_flag_as_typed(tmp_path: Path, flag: str) -> None:
    # The refusal read --no-prefix-caching as the field it sets and named "--prefix-caching", a flag not typed.
    trace = tmp_path / "plain.csv"
    trace.write_text("prompt_tokens,output_tokens,arrival_time\n100,10,0\n200,10,1\n")
    res = CliRunner().invoke(app, ["run", "--trace", str(trace), flag])
    assert res.exit_code != 0
    assert str(res.exception).startswith(f"{flag}: --trace {trace} names no prompt blocks")
    assert str(res.exception).endswith(f"or drop {flag})")


def test_where_speculation_turned_prefix_caching_off_the_fix_is_not_the_refused_prefix_caching(mooncake: str) -> None:
    # Speculative decoding turns prefix caching off, and --prefix-caching is refused beside it: a refusal whose fix
    # said "pass --prefix-caching" sent the user to a second refusal.
    spec = dict(speculative_config='{"method": "ngram", "num_speculative_tokens": 3}', acceptance_rate=0.6)
    with pytest.raises(ConfigError) as err:
        build_config(num_requests=20, **spec, prefix_cache_policy="radix-lru")
    assert "speculative decoding turns it off" in str(err.value) and "drop the speculation" in err.value.fix
    assert "--prefix-caching" not in err.value.fix
    res = CliRunner().invoke(app, ["run", "--num-requests", "20", "--speculative-config", spec["speculative_config"],
                                   "--acceptance-rate", "0.6", "--replicas", "2", "--router", "prefix_aware",
                                   "--trace", mooncake])
    assert isinstance(res.exception, ConfigError), res.output
    assert "speculative decoding turns it off" in str(res.exception) and "drop the speculation" in res.exception.fix
    assert "--prefix-caching" not in res.exception.fix
    with pytest.raises(ConfigError, match="prefix caching is off") as err:  # without speculation: as before
        build_config(num_requests=20, scheduler="vllm", prefix_cache_policy="radix-lru")
    assert err.value.fix.startswith("pass --prefix-caching")


def test_plan_refuses_dp_padding_where_no_layout_has_attention_dp(tmp_path: Path) -> None:
    # --dp-padding says what an attention-DP step's MoE layers carry: a plan of a dense model, or one searching
    # attention DP 1 only, has no such layout, and ran to the end with it in silence.
    for extra in (["--model", "llama-3.1-8b"], ["--model", "qwen3-30b-a3b", "--attention-dps", "1"]):
        res = CliRunner().invoke(app, ["plan", *extra, "--dp-padding", "sum", "--gpus", "h100-sxm", "--tps", "1",
                                       "--num-requests", "20", "--qps", "1", "--out", str(tmp_path / "p")])
        assert isinstance(res.exception, ConfigError), res.output
        assert str(res.exception).startswith("--dp-padding: no layout of the plan has attention-DP ranks")

