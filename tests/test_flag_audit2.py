"""Flags a second audit found doing nothing, or ending in a traceback, in some combination: each now takes
effect or is refused in one line naming the flag and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_fuzz_round13 import invoke


def test_sglang_disaggregated_pools_at_a_receive_interval_run_to_the_end() -> None:
    # (a RuntimeError traceback: the prefill pool's batch stayed "full" with nothing running)
    code, out = invoke("run", "--scheduler", "sglang", "--prefill-pool", "1x", "--decode-pool", "1x",
                       "--scheduler-recv-interval", "3", "--qps", "8", "--num-requests", "300", "--no-progress")
    assert code == 0 and "requests: 300 finished, 0 rejected" in out, out


@pytest.mark.parametrize(("engine", "extra", "needle"), [
    ("vllm-2026:overlap_pipeline=true", ("--pp", "2"), "overlap_pipeline=true would do nothing: vllm-2026 has no overlap_cpu"),
    ("vllm-v1:overlap_pipeline=false", (), "overlap_pipeline keeps async scheduling under pipeline parallelism, and "
     "the run has none (--pp 1)"),
    ("vllm-2026:prefill_floor_above_tokens=5000", (), "vllm-2026 has no prefill_floor_per_layer_s"),
    ("vllm-2026:prefill_excess_threshold_tokens=16", (), "vllm-2026 has no prefill_excess_token_s"),
    ("vllm-2026:rpc_per_seq_s=0.001", (), "rpc_per_seq_s is the RPC to a TP group's workers, and the run has none"),
    ("vllm-2026:drafter_in_graph=true", (), "drafter_in_graph is a speculating engine's term, and the run does not"),
    ("vllm-2026:overlap_any_drafter=true", ("--tp", "2"), "overlap_any_drafter is a speculating engine's term"),
])
def test_an_engine_term_the_run_never_reads_is_refused(engine: str, extra: tuple[str, ...], needle: str) -> None:
    # (each ran as the preset alone, byte for byte, with no word)
    code, out = invoke("run", "--engine", engine, *extra, "--num-requests", "20", "--no-progress")
    assert code == 2 and out.startswith("error: --engine: ") and needle in out, out


def test_engine_terms_are_read_where_the_run_has_what_they_price() -> None:
    code, out = invoke("run", "--engine", "vllm-v1:overlap_pipeline=false", "--pp", "2", "--num-requests", "20",
                       "--no-progress")
    assert code == 0, out
    with_handoff = invoke("run", "--engine", "vllm-2026:handoff_s=0.4", "--prefill-pool", "1x", "--decode-pool", "1x",
                          "--num-requests", "20", "--no-progress", "--json")
    plain = invoke("run", "--prefill-pool", "1x", "--decode-pool", "1x", "--num-requests", "20", "--no-progress",
                   "--json")
    assert with_handoff[0] == plain[0] == 0
    # (the preset's own handoff is 150 ms)
    assert json.loads(with_handoff[1])["ttft_s_p50"] > json.loads(plain[1])["ttft_s_p50"] + 0.2


def test_disagg_split_takes_a_handoff_every_layout_it_searches_waits_out(tmp_path: Path) -> None:
    # (refused as "the run is not disaggregated": the pool-less base was judged, not the layouts searched)
    code, out = invoke("disagg", "split", "--engine", "vllm-2026:handoff_s=0.05", "--gpus", "2", "--num-requests", "30")
    assert code == 0 and "best: P 1x" in out, out


def test_a_sweep_engine_term_no_point_reads_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[base]\nnum_requests = 20\n[grid]\nengine = ["vllm-2026", "vllm-2026:handoff_s=0.5"]\n')
    code, out = invoke("sweep", str(path), "--out", str(tmp_path / "o"))  # (two rows alike but for that column)
    assert code == 2 and out.startswith("error: sweep.grid.engine: vllm-2026:handoff_s=0.5: at every point running "
                                        "it, handoff_s is waited out"), out
    path.write_text('[base]\nnum_requests = 20\nengine = "vllm-2026:handoff_s=0.5"\n[grid]\n'
                    'prefill_pool = ["1x", "1x(tp=2)"]\ndecode_pool = ["1x"]\n')
    code, out = invoke("sweep", str(path), "--out", str(tmp_path / "o2"))  # every point disaggregated: read
    assert code == 0, out


def _sweep_file(tmp_path: Path, trace: Path, grid: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(f'[base]\ntrace = "{trace}"\nnum_requests = 8\n[grid]\n{grid}\n')
    return path


def test_a_sweep_prefix_cache_option_no_point_s_trace_reads_is_refused(tmp_path: Path) -> None:
    # (run refuses these beside a trace without block hashes; a sweep ran them, its rows alike but for that column)
    hashed = tmp_path / "hashed.jsonl"
    hashed.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 2048, "output_length": 8,
                                          "hash_ids": [1, 2, 3, 4 + i]}) + "\n" for i in range(8)))
    plain = tmp_path / "plain.jsonl"
    plain.write_text("".join(json.dumps({"num_prompt_tokens": 64, "num_output_tokens": 8, "arrived_at": i * 0.1}) + "\n"
                             for i in range(8)))
    code, out = invoke("sweep", str(_sweep_file(tmp_path, plain, "cpu_kv_gib = [0, 10]")), "--out", str(tmp_path / "a"))
    assert code == 2 and out.startswith("error: sweep.grid.cpu_kv_gib: no point's trace names its prompts' blocks"), out
    code, out = invoke("sweep", str(_sweep_file(tmp_path, plain, "qps = [1, 2]")), "--out", str(tmp_path / "b"),
                       "--no-prefix-caching")
    assert code == 2 and out.startswith("error: --no-prefix-caching: no point's trace names its prompts' blocks"), out
    code, out = invoke("sweep", str(_sweep_file(tmp_path, tmp_path / "hashed.jsonl", 'scheduler = ["vllm", "orca"]')),
                       "--out", str(tmp_path / "b2"), "--no-prefix-caching")  # (named --prefix-caching)
    assert code == 2 and out.startswith("error: --no-prefix-caching: no point of the sweep reads it"), out
    code, out = invoke("sweep", str(_sweep_file(tmp_path, hashed, "cpu_kv_gib = [0, 10]")), "--out", str(tmp_path / "c"))
    assert code == 0, out
    sessions = tmp_path / "sessions"  # a folder of session files: sessions and block hashes
    sessions.mkdir()
    for n in range(2):
        (sessions / f"trace_000{n}.json").write_text(json.dumps({"block_size": 64, "requests": [
            {"t": 0, "in": 200, "out": 4, "hash_ids": [1, 2, 3, 4 + n], "api_time": 1},
            {"t": 2, "in": 260, "out": 4, "hash_ids": [1, 2, 3, 4 + n, 9], "think_time": 1}]}))
    path = tmp_path / "w.toml"
    path.write_text(f'[base]\ntrace = "{sessions}"\narrival = "trace"\n[grid]\nsession_replay = ["open", "closed"]\n')
    code, out = invoke("sweep", str(path), "--out", str(tmp_path / "d"))  # (refused: a folder was read as no trace)
    assert code == 0, out


@pytest.mark.parametrize(("text", "needle"), [
    ('num_seeds = 2\n[grid]\nmax_num_seqs = [8, 16]\n', "error: sweep.base.num_seeds: nothing in the search's trials is "
     "drawn at random"),
    ('[grid]\nseed = [0, 1]\n', "error: sweep point seed=0: seed: nothing in the search's trials is drawn at random"),
])
def test_a_capacity_sweep_seed_no_point_draws_with_is_refused(tmp_path: Path, text: str, needle: str) -> None:
    # (simulate capacity refuses --seeds and --seed there; a sweep searched the very same trials, its spread 0)
    path = tmp_path / "c.toml"
    path.write_text('mode = "capacity"\n[base]\nusers = true\nworkload = "fixed"\nnum_requests = 40\n' + text)
    code, out = invoke("sweep", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and out.startswith(needle), out
    # kept where some point draws (ShareGPT's lengths)
    path.write_text('mode = "capacity"\n[base]\nusers = true\nnum_seeds = 2\nnum_requests = 40\n[grid]\n'
                    'workload = ["fixed", "sharegpt"]\n')
    from simulator.planning.sweep import build_spec, load_sweep_file

    assert len(build_spec(load_sweep_file(path)).points) == 2


SPEC = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
NOTE = "note: --speculative-config not modelled: prompt_lookup_max"


@pytest.mark.parametrize("view", [("run", "--json"), ("run", "--metrics", "vllm"), ("capacity", "--json")])
def test_a_speculative_key_left_unmodelled_is_said_in_every_view(view: tuple[str, ...]) -> None:
    # (said in run's table header only: --json, vllm's block and capacity ran it with no word)
    code, out = invoke(*view, "--speculative-config", SPEC, "--acceptance-rate", "0.6", "--num-requests", "20",
                       "--no-progress" if view[0] == "run" else "--max-trials", *(() if view[0] == "run" else ("3",)))
    assert code == 0 and NOTE in out, out
    if view[-1] == "--json" and view[0] == "run":
        summary = json.loads(out[:out.index(NOTE)])
        assert list(summary["speculative"]["not_modelled"]) == ["prompt_lookup_max"]


def test_a_pool_budget_under_a_scheduler_without_one_is_refused() -> None:
    # (--scheduler orca --max-num-batched-tokens is refused; the pool's budget= moved its KV blocks alone)
    code, out = invoke("run", "--prefill-pool", "1x(sched=orca,budget=1024)", "--decode-pool", "1x", "--num-requests",
                       "20", "--no-progress")
    assert code == 2 and out.startswith("error: prefill_pool (budget): the pool runs orca, whose steps no token "
                                        "budget bounds, so budget= would do nothing"), out
    code, out = invoke("run", "--prefill-pool", "1x(sched=vllm-v1,budget=1024)", "--decode-pool", "1x",
                       "--num-requests", "20", "--no-progress")
    assert code == 0, out


def test_plan_pipeline_degrees_no_disaggregated_layout_takes_are_refused(tmp_path: Path) -> None:
    # (the same layouts as --pps 1, no word; --pps 2 alone ended in "no layout fits ... (allow more GPUs ...)")
    code, out = invoke("plan", "--qps", "1", "--gpus", "a100-80gb", "--modes", "disagg", "--pps", "1,2",
                       "--num-requests", "50", "--no-verify", "--out", str(tmp_path / "p"))
    assert code == 2 and out.startswith("error: --pps: disaggregated pools are searched at pipeline parallelism 1 "
                                        "only"), out
    code, out = invoke("plan", "--qps", "1", "--gpus", "a100-80gb", "--modes", "agg", "--engine",
                       "vllm-2026:handoff_s=0.05", "--num-requests", "50", "--no-verify", "--out", str(tmp_path / "q"))
    assert code == 2 and out.startswith("error: --engine: handoff_s is waited out between a disaggregated layout's"), out


@pytest.mark.parametrize(("args", "why"), [
    (("--scheduler", "vllm"), "--scheduler vllm caches no prefixes by default"),
    (("--speculative-config", '{"method":"ngram","num_speculative_tokens":3}', "--acceptance-rate", "0.5"),
     "speculative decoding turns prefix caching off"),
])
def test_no_prefix_caching_where_nothing_caches_is_refused(tmp_path: Path, args: tuple[str, ...], why: str) -> None:
    trace = tmp_path / "hashed.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": 100 * i, "input_length": 2048, "output_length": 8,
                                         "hash_ids": [1, 2, 3, 4 + i]}) + "\n" for i in range(10)))
    code, out = invoke("run", *args, "--no-prefix-caching", "--trace", str(trace), "--num-requests", "10",
                       "--no-progress")
    assert code == 2 and out.startswith(f"error: --no-prefix-caching: {why}, so --no-prefix-caching would do "
                                        "nothing"), out
    code, out = invoke("run", "--no-prefix-caching", "--trace", str(trace), "--num-requests", "10", "--no-progress")
    assert code == 0, out  # vllm-v1 caches by default: the flag turns it off


def test_sweep_workers_size_a_local_ray_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # (Ray started with every CPU whatever --workers said, and nothing said so)
    import types

    import simulator.planning.sweep as sweep_module

    seen: dict[str, object] = {}

    def fake_run_sweep(spec, out, **kwargs):  # noqa: ANN001, ANN202 - run_sweep's signature
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr(sweep_module, "run_sweep", fake_run_sweep)
    path = tmp_path / "s.toml"
    path.write_text("[base]\nnum_requests = 8\n[grid]\nqps = [1, 2]\n")
    invoke("sweep", str(path), "--out", str(tmp_path / "o"), "--ray-address", "local", "--workers", "3")
    assert seen["ray_cpus"] == 3
    invoke("sweep", str(path), "--out", str(tmp_path / "o"), "--ray-address", "local")
    assert seen["ray_cpus"] is None  # every CPU, as before
    code, out = invoke("sweep", str(path), "--out", str(tmp_path / "o"), "--ray-address", "10.0.0.1:6379",
                       "--workers", "3")
    assert code == 2 and out.startswith("error: --workers: sets local processes, and --ray-address 10.0.0.1:6379"), out
    # the local instance is started with them
    calls: dict[str, object] = {}
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: calls.update(kw))
    monkeypatch.setitem(__import__("sys").modules, "ray", fake)
    sweep_module._connect("local", 3)
    assert calls["num_cpus"] == 3


@pytest.mark.parametrize("burstiness", ["0.5", "1"])  # (0.5 named --arrival; 1, Poisson's, ran)
def test_capacity_users_beside_burstiness_names_burstiness(burstiness: str) -> None:
    code, out = invoke("capacity", "--users", "--burstiness", burstiness, "--num-requests", "50")
    assert code == 2 and out.startswith("error: --burstiness: --users searches a closed loop"), out


@pytest.mark.parametrize(("text", "needle"), [
    ("max_users = 8\n[grid]\nmax_num_seqs = [8, 16]\n", "error: sweep.base.max_users: it sets a users search, and no "
     "point searches the users"),
    ("users = true\n[grid]\nmax_qps = [8, 16]\n", "error: sweep point max_qps=8.0: max_qps: it sets a rate search, "
     "and this point searches the users"),  # (not "points 0 and 1 are the same configuration")
    ("[grid]\nengine = [\"vllm-2026:foo=1\"]\n", "error: sweep.grid.engine: vllm-2026:foo=1: 'foo' is not a term"),
    # (a grid crossing users with max_users: its users points read it, the two rate points run one search)
    ("[grid]\nusers = [true, false]\nmax_users = [8, 16]\n", "error: sweep.grid: points 2 and 3 run the same "
     "search (sweep point users=False, max_users=16): max_users only sets a users search, and they make a rate search"),
    ("users = true\nworkload = \"fixed\"\n[grid]\nnum_seeds = [1, 2]\n", "error: sweep point num_seeds=1: "
     "num_seeds: nothing in the search's trials is drawn at random"),  # (two rows alike)
])
def test_capacity_sweep_search_keys_are_judged_over_the_points(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text('mode = "capacity"\n[base]\nnum_requests = 40\n' + text)
    code, out = invoke("sweep", str(path), "--out", str(tmp_path / "o"))  # (the engine: every point failed, one by one)
    assert code == 2 and out.startswith(needle), out


def test_a_users_only_search_key_is_kept_where_some_point_searches_the_users(tmp_path: Path) -> None:
    # (refused at the rate point: "--max-users: caps a users search, and this search varies the rate")
    from simulator.planning.sweep import build_spec, load_sweep_file

    path = tmp_path / "c.toml"
    path.write_text('mode = "capacity"\n[base]\nmax_users = 8\nnum_requests = 40\n[grid]\nusers = [true, false]\n')
    points = build_spec(load_sweep_file(path)).points
    assert [p.options["max_users"] for p in points] == [8, 4096]  # the rate point as it is without it


def test_a_typed_seed_or_a_file_s_engine_is_blamed_where_it_was_given(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('mode = "capacity"\n[base]\nusers = true\nworkload = "fixed"\nnum_requests = 40\n')
    code, out = invoke("sweep", str(path), "--out", str(tmp_path / "o"), "--seed", "3")  # (was sweep.base.seed)
    assert code == 2 and out.startswith("error: --seed: nothing in the search's trials is drawn at random"), out
    assert invoke("run", "--num-requests", "10", "--no-progress", "--out", str(tmp_path / "r"))[0] == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    config["engine"] = "vllm-2026:overlap_pipeline=true"
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps(config))
    code, out = invoke("run", "--config", str(cfg), "--pp", "2", "--no-progress")  # (was blamed on --engine)
    assert code == 2 and out.startswith("error: engine: overlap_pipeline=true would do nothing"), out
