"""The split planner's goodput search judges a rate as capacity does: sustained, or no pass."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import ConstantCostModel
from typer.testing import CliRunner

from simulator.cli import app
from simulator.config.run_config import RunConfig
from simulator.engine import cluster
from simulator.planning import capacity as capacity_module
from simulator.planning.split import GoodputSLO, goodput_search, results_frame, trials_frame

ITERATION_S = 0.01
NUM_SLOTS = 4
NUM_OUTPUT = 10
MU = NUM_SLOTS / (NUM_OUTPUT * ITERATION_S)  # 40 requests/s: what the server drains


@pytest.fixture
def constant_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every iteration takes ITERATION_S whatever its batch."""
    load = lambda spec, replica, engine=None: ConstantCostModel(replica, ITERATION_S)  # noqa: E731
    monkeypatch.setattr(cluster, "load_cost_model", load)
    monkeypatch.setattr(capacity_module, "load_cost_model", load)


def slots_config(num_requests: int) -> RunConfig:
    """NUM_SLOTS requests at a time, each NUM_OUTPUT constant iterations: a server saturated at MU requests/s
    (as tests/test_capacity.py's), searched as `disagg compare` searches its aggregated arms."""
    return RunConfig().replace(
        replica__model="mistral-7b", scheduler__name="sarathi", scheduler__max_num_seqs=NUM_SLOTS,
        scheduler__chunk_size=64, workload__name="fixed", workload__prompt_tokens=16,
        workload__output_tokens=NUM_OUTPUT, workload__num_requests=num_requests, workload__qps=10.0)


def test_a_goodput_trial_too_short_to_build_a_queue_is_no_pass(constant_cost):
    """64 requests at any rate over MU arrive in under the 2 s TTFT SLO and drain (64 / MU = 1.6 s) before 10% of
    them wait 2 s: every rate up to the search's limit passed, 500 QPS for a server that sustains 40. The answer
    is now the most a long enough trial shows, flagged as a lower bound set by the trial length."""
    res = goodput_search(slots_config(64), GoodputSLO(ttft_s=2.0, tpot_s=0.05, attainment=0.9), qps_start=10.0)
    assert res.rate_qps <= MU and res.at_least and res.too_short
    assert res.reason.startswith("at least") and "too short to judge" in res.reason and "--num-requests" in res.reason
    short = [t for t in res.trials if t.too_short]
    assert short and all(not t.passed and t.attainment >= 0.9 and t.qps > res.rate_qps for t in short)
    row = results_frame([res]).iloc[0]
    assert row["at_least"] and row["limited_by_trial_length"]
    trials = trials_frame([res])
    assert list(trials.columns) == ["label", "family", "qps", "attainment", "passed", "reason", "too_short",
                                    "stopped_early"]
    assert trials["too_short"].sum() == len(short)


def test_a_goodput_trial_whose_queue_still_grows_fails(constant_cost):
    """Just under 1 MU with 512 requests, 90% of requests meet a 0.8 s TTFT, but the last quarter's P90 wait is past
    it and the backlog still grows at the last arrival: the run is overloaded (a longer trial misses the SLO), so
    the rate is no goodput."""
    slo = GoodputSLO(ttft_s=0.8, tpot_s=0.05, attainment=0.9)
    res = goodput_search(slots_config(512), slo, qps_start=10.0)
    met = max(t[0] for t in res.trials if t[1] >= slo.attainment)  # the most QPS whose attainment holds
    assert res.rate_qps < met  # (the attainment alone answered it)
    overloaded = [t for t in res.trials if t.reason.startswith("overloaded")]
    assert overloaded and all(t.attainment >= slo.attainment and not t.passed and not t.too_short for t in overloaded)
    assert res.rate_qps < min(t.qps for t in overloaded)
    assert not res.at_least and not res.too_short and res.reason.startswith("passes at")


def test_split_says_at_least_when_its_trials_are_too_short(tmp_path) -> None:  # noqa: ANN001
    """Llama-2-7B on A100s, 2,048-token prompts, 16 requests a trial: a 1+1 split drains ~6.4 req/s (capacity
    --criterion goodput over 1,000 requests), yet 16 requests at 58 QPS arrive and drain within the 2 s TTFT SLO,
    and the split read '58 req/s' (29 per GPU). Its answer is now a lower bound, said as one."""
    out = tmp_path / "split"
    res = CliRunner().invoke(app, ["disagg", "split", "--gpus", "2", "--tps", "1", "--workload", "fixed",
                                   "--prompt-tokens", "2048", "--output-tokens", "16", "--num-requests", "16",
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    row = pd.read_csv(out / "results.csv").iloc[0]
    assert row["rate_qps"] < 16 and row["at_least"] and row["limited_by_trial_length"]
    assert f"at least {row['rate_qps']:.3g}" in res.output and "too short to judge" in res.output
    assert "raise --num-requests" in res.output
    assert "best: P 1x(tp=1,sched=vllm) + D 1x(tp=1,sched=vllm) at least" in res.output


def _disagg_params(command: str) -> dict:
    import click
    import typer

    root = typer.main.get_command(app)
    ctx = click.Context(root)
    return {p.name: p for p in root.get_command(ctx, "disagg").get_command(ctx, command).params}


# Every value of these is refused by split and compare (the pools run vllm, the search an open loop's rate).
NEVER_READ = {"concurrency": "4", "time_scale": "2", "session_replay": "open", "scheduler_recv_interval": "2",
              "chunk_size": "512"}
PREFIX_CACHE_FLAGS = ("prefix_caching", "prefix_cache_policy", "cpu_kv_gib")


@pytest.mark.parametrize("command", ["split", "compare"])
def test_disagg_help_leaves_out_what_it_always_refuses_and_says_when_it_refuses_the_rest(command: str) -> None:
    params = _disagg_params(command)
    assert all(params[name].hidden for name in NEVER_READ)
    # (the layouts' prefill pools cache as a run's would; compare's aggregated arms may cache)
    assert not any(params[name].hidden for name in PREFIX_CACHE_FLAGS)
    assert "poisson, gamma or fixed only" in params["arrival"].help
    assert "vllm only" in params["scheduler"].help
    assert "with --scheduler vllm only" in params["max_num_batched_tokens"].help


@pytest.mark.parametrize("name", [*NEVER_READ])
def test_split_refuses_what_its_help_leaves_out_as_never_read(name: str) -> None:
    """Each was refused before with a fix the command refuses too (--arrival trace, --scheduler sglang/sarathi)."""
    flag = "--" + name.replace("_", "-")
    value = NEVER_READ[name]
    args = ["disagg", "split", "--gpus", "2", "--tps", "1", "--num-requests", "8",
            *(["--scheduler", "vllm"] if name == "chunk_size" else []), flag, value]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0, res.output
    assert "disagg split does not read it" in str(res.exception) and f"drop {flag}" in str(res.exception)


# -- the prefix-cache flags reach every layout's prefill pool (and compare's aggregated arms) -------------------------

SHARED = ["--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-model-len", "16384", "--gpus", "2", "--tps", "1",
          "--num-requests", "40"]


def shared_prefix_trace(folder, n: int = 40) -> str:  # noqa: ANN001
    """A Mooncake JSONL of ``n`` 8,192-token prompts sharing their first 15 of 16 512-token blocks."""
    rows = [{"timestamp": 50 * i, "input_length": 8192, "output_length": 16, "hash_ids": [*range(15), 1000 + i]}
            for i in range(n)]
    path = folder / "shared.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_split_passes_the_prefix_cache_flags_to_every_layout(tmp_path) -> None:  # noqa: ANN001
    """Over a trace with block hashes each layout's prefill pool caches as a run's (vllm-v1: on), so the flags
    change what the layouts do: they had been refused as 'disagg split does not read it'."""
    trace = ["--trace", shared_prefix_trace(tmp_path)]
    rates = {}
    for name, flags in {"cached": [], "off": ["--no-prefix-caching"], "radix": ["--prefix-cache-policy", "radix-lru"],
                        "cpu": ["--cpu-kv-gib", "4"]}.items():
        res = CliRunner().invoke(app, ["disagg", "split", *SHARED, *trace, *flags, "--out", str(tmp_path / name)])
        assert res.exit_code == 0, res.output
        # the header names the trials' own requests: the trace's 40 rows (it had said "workload sharegpt")
        assert "workload trace shared.jsonl" in res.output and "40 requests per trial" in res.output
        rates[name] = pd.read_csv(tmp_path / name / "results.csv")["rate_qps"].tolist()
        config = json.loads((tmp_path / name / "summary.json").read_text())["config"]["scheduler"]
        assert config["prefix_caching"] is (False if name == "off" else None)
    # recomputing 15 shared blocks of every prompt carries a fraction of the rate (prefill-bound)
    assert rates["off"][0] < rates["cached"][0] / 2
    # --no-prefix-caching where no prefill pool caches by default (--scheduler vllm) still does nothing
    res = CliRunner().invoke(app, ["disagg", "split", *SHARED, *trace, "--scheduler", "vllm", "--no-prefix-caching"])
    assert "--scheduler vllm caches no prefixes by default" in str(res.exception)
    assert "drop --no-prefix-caching" in str(res.exception)


def test_compare_keeps_its_aggregated_arms_beside_a_cpu_tier_for_the_prefill_pools(tmp_path) -> None:  # noqa: ANN001
    """--cpu-kv-gib is the layouts' prefill pools' (vllm-v1: caching on); the vllm and sarathi arms cache only with
    --prefix-caching, as their runs do, and a run refuses a CPU tier of a cache that is off: every arm had been
    dropped in silence, leaving a comparison of one side. With --prefix-caching they take it."""
    trace = ["--trace", shared_prefix_trace(tmp_path)]
    for flags in (["--cpu-kv-gib", "4"], ["--prefix-caching", "--cpu-kv-gib", "4"]):
        out = tmp_path / "-".join(flags)
        res = CliRunner().invoke(app, ["disagg", "compare", *SHARED, *trace, "--taus", "512", *flags, "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert sorted(pd.read_csv(out / "results.csv")["family"]) == ["disagg", "sarathi", "vllm"]


def test_a_trial_stopped_once_certain_to_fail_is_marked_a_bound(constant_cost):
    """A trial stopped early reports the attainment bound it was stopped at: trials.csv says which trials those are,
    and the comparison plot draws them hollow beside the measured curve (drawn joined into it, a bound read as a
    recovery: sarathi at 15 QPS 'at' 0.8975, a read-only audit)."""
    from simulator.planning.split import comparison_figure

    slo = GoodputSLO(ttft_s=0.8, tpot_s=0.05, attainment=0.9)
    res = goodput_search(slots_config(512), slo, qps_start=10.0)
    trials = trials_frame([res])
    stopped = trials[trials["stopped_early"]]
    assert len(stopped) and not stopped["passed"].any() and (stopped["qps"] > res.rate_qps).all()
    assert not trials.loc[~trials["stopped_early"], "reason"].str.contains("certain").any()
    fig = comparison_figure(results_frame([res]), trials, slo)
    lines = fig.axes[1].get_lines()
    hollow = [ln for ln in lines if ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 1 and len(hollow[0].get_xdata()) == len(stopped)
