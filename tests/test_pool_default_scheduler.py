"""A disaggregated pool without ``sched=`` runs the run's scheduler where its engine deploys disaggregated pools
(vLLM V1's NIXL-connected workers, SGLang's PD pools), else vllm: it ran vLLM V0 (whole prompts, no token budget)
beside a run and a plan whose engine was V1, so ``run`` and ``plan`` simulated one layout two ways."""

from __future__ import annotations

import pytest

from simulator.config.disagg_layout import layout_of
from simulator.config.errors import ConfigError
from simulator.config.options import build_config
from simulator.config.run_config import RunConfig
from simulator.costmodel.engine_model import implied_options
from simulator.planning.plan import Layout

POOLS = {"prefill_pool": "1x(tp=1)", "decode_pool": "1x(tp=1)"}


@pytest.mark.parametrize(("scheduler", "pools"), [(None, "vllm-v1"), ("vllm", "vllm"), ("sglang", "sglang"),
                                                  ("trtllm", "trtllm"), ("sarathi", "vllm"), ("orca", "vllm")])
def test_pools_run_the_runs_scheduler_where_its_engine_deploys_pools(scheduler: str | None, pools: str) -> None:
    # (a research policy runs only where a pool runs it: here the mixed pool; without it, below)
    mixed = {"mixed_pool": "1x(tp=1)"} if pools != (scheduler or "vllm-v1") else {}
    config = build_config(**POOLS, **mixed, **({"scheduler": scheduler} if scheduler else {}))
    layout = layout_of(config)
    assert (layout.mixed_scheduler.name == scheduler) if mixed else layout.mixed_scheduler is None
    assert layout.prefill_scheduler.name == layout.decode_scheduler.name == pools
    # a pool's own sched= still rules
    named = layout_of(config.replace(prefill_pool="1x(tp=1,sched=orca)"))
    assert named.prefill_scheduler.name == "orca" and named.decode_scheduler.name == pools


def test_a_run_and_a_plan_simulate_one_layout_alike() -> None:
    """The plan writes its pools' sched=; the same pools without it, passed to run, now run the same scheduler."""
    base = RunConfig().replace(replica__model="llama-3.1-8b", replica__gpu="h100-sxm")
    planned = Layout(gpu="h100-sxm", mode="disagg", dtype="bf16", tp=1, prefill_tp=1, num_prefill=1, num_decode=1,
                     max_num_seqs=256).config(base)
    plain = planned.replace(prefill_pool=planned.prefill_pool.replace(",sched=vllm-v1", ""),
                            decode_pool=planned.decode_pool.replace(",sched=vllm-v1", ""))
    assert "sched=vllm-v1" in planned.prefill_pool and "sched" not in plain.prefill_pool + plain.decode_pool
    assert layout_of(plain).prefill_scheduler == layout_of(planned).prefill_scheduler
    assert layout_of(plain).decode_scheduler == layout_of(planned).decode_scheduler


@pytest.mark.parametrize("scheduler", ["sarathi", "orca", "fastertransformer"])
def test_a_research_policy_no_pool_runs_is_refused(scheduler: str) -> None:
    """Its pools without sched= run vllm: the same run as --scheduler vllm (a sweep of both simulated it twice)."""
    with pytest.raises(ConfigError, match=f"^scheduler: no pool runs {scheduler}: .* as under --scheduler vllm"):
        build_config(**POOLS, scheduler=scheduler)
    build_config(prefill_pool=f"1x(sched={scheduler})", decode_pool="1x", scheduler=scheduler)  # (one pool runs it)


def test_the_pools_budget_follows_the_run() -> None:
    """--max-num-batched-tokens is the pools' budget where they run --scheduler's (it did nothing beside V0 pools)."""
    layout = layout_of(build_config(**POOLS, max_num_batched_tokens=2048))
    assert layout.prefill_scheduler.max_num_batched_tokens == layout.decode_scheduler.max_num_batched_tokens == 2048
    with pytest.raises(ConfigError, match="--max-num-batched-tokens"):  # pools of another scheduler keep none of it
        build_config(prefill_pool="1x(sched=vllm)", decode_pool="1x(sched=vllm)", max_num_batched_tokens=2048)


def test_resume_keys_tell_the_former_default_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Results stored when every pool without sched= ran vllm are not those of vllm-v1 pools: their keys differ;
    where the pools run vllm now too (--scheduler vllm, a research policy) or name their own, keys are unchanged."""
    v1 = RunConfig().replace(**POOLS)
    configs = {"vllm-v1 pools": v1, "vllm pools": v1.replace(scheduler__name="vllm"),
               "sarathi's pools": v1.replace(scheduler__name="sarathi", scheduler__chunk_size=512, mixed_pool="1x(tp=1)"),
               "named pools": v1.replace(prefill_pool="1x(tp=1,sched=vllm-v1)", decode_pool="1x(tp=1,sched=sglang)"),
               "aggregated": RunConfig()}
    now = {name: config.result_key() for name, config in configs.items()}
    # the keys as they were: no pool scheduler in them
    monkeypatch.setattr(RunConfig, "_unnamed_pool_scheduler", lambda self: None)
    before = {name: config.result_key() for name, config in configs.items()}
    assert {name for name in configs if now[name] != before[name]} == {"vllm-v1 pools"}
    assert RunConfig().result_key(mode="run") == "e2e383bc5b17d73a"  # (an aggregated run, as before: round16)


def test_an_engine_sets_the_scheduler_of_pools_that_name_none() -> None:
    """--engine sglang-2026 on a disaggregated run: its pools run sglang (the policy it was fitted under), unless both
    name their own, where an implied --scheduler would do nothing (and is not refused as if given)."""
    assert implied_options({"engine": "sglang-2026", "gpu": "h100-sxm", **POOLS}).get("scheduler") == "sglang"
    both = {"prefill_pool": "1x(sched=vllm-v1)", "decode_pool": "1x(sched=vllm-v1)"}
    assert "scheduler" not in implied_options({"engine": "sglang-2026", "gpu": "h100-sxm", **both})


def test_a_sweep_refuses_two_spellings_of_one_pool_scheduler_or_gpu(tmp_path) -> None:  # noqa: ANN001
    """'1x(tp=1)' and '1x(tp=1,sched=vllm-v1)' are one deployment under the default --scheduler (as '1x(gpu=h100-sxm)'
    beside --gpu h100-sxm): a sweep ran both as two points of identical results; 'sched=vllm' is another."""
    from simulator.planning.sweep import build_spec, load_sweep_file

    def spec(pairs: list[list[str]], **base: object) -> None:
        path = tmp_path / "s.toml"
        base_lines = "\n".join(f"{k} = {v!r}".replace("'", '"') for k, v in {"num_requests": 20, **base}.items())
        rows = ", ".join("[" + ", ".join(f'"{p}"' for p in pair) + "]" for pair in pairs)
        path.write_text(f'mode = "run"\n[base]\n{base_lines}\n[grid]\n"prefill_pool,decode_pool" = [{rows}]\n')
        build_spec(load_sweep_file(path))

    for pairs, base in (([["1x(tp=1)", "1x(tp=1)"], ["1x(tp=1,sched=vllm-v1)", "1x(tp=1,sched=vllm-v1)"]], {}),
                        ([["1x(tp=1)", "1x(tp=1)"], ["1x(tp=1,gpu=h100-sxm)", "1x(tp=1)"]], {"gpu": "h100-sxm"})):
        with pytest.raises(ConfigError, match="spell one deployment"):
            spec(pairs, **base)
    spec([["1x(tp=1)", "1x(tp=1)"], ["1x(tp=1,sched=vllm)", "1x(tp=1,sched=vllm)"]])  # (V0 pools: another run)


def test_capacity_and_run_titles_say_what_the_pools_run() -> None:
    from test_cli_fuzz_round13 import invoke

    code, output = invoke("capacity", "--scheduler", "sglang", "--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)",
                          "--num-requests", "100")
    assert code == 0 and "· pools run sglang ·" in " ".join(output.split()), output
    code, output = invoke("run", "--engine", "sglang-2026", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
                          "--prefill-pool", "1x(sched=vllm-v1)", "--decode-pool", "1x", "--num-requests", "5",
                          "--no-progress")
    assert code == 0 and "note: sglang-2026 was fitted with --scheduler sglang (a pool here runs vllm-v1)" in " ".join(
        output.split()), output


def test_spelled_out_pools_keep_a_gpu_files_path_and_the_runs_redundant_experts(tmp_path) -> None:  # noqa: ANN001
    """The duplicate check wrote the run's GPU into each pool, and pool text lowercases gpu=: a GPU file 'G/MyGPU.toml'
    became 'g/mygpu.toml', missing, and every point was refused. '1x' beside --ep 4 --redundant-experts 4 keeps the
    run's 4 copies, '1x(ep=4)' places none: they were read as one deployment."""
    from simulator.planning.sweep import build_spec, load_sweep_file

    folder = tmp_path / "G"
    folder.mkdir()
    (folder / "MyGPU.toml").write_text("bf16_tflops = 400\nhbm_gb_per_s = 2000\nmemory_gb = 80\n")

    def points(base: str, pairs: str) -> int:
        path = tmp_path / "s.toml"
        path.write_text(f'mode = "run"\n[base]\nnum_requests = 20\n{base}\n[grid]\n"prefill_pool,decode_pool" = {pairs}\n')
        return len(build_spec(load_sweep_file(path)).points)

    assert points(f'gpu = "{folder / "MyGPU.toml"}"\nkv_link = "100GB/s"',
                  '[["1x(tp=1)", "1x(tp=1)"], ["2x(tp=1)", "1x(tp=1)"]]') == 2
    assert points('model = "qwen3-30b-a3b"\ngpu = "h100-sxm"\ntp = 4\nep = 4\nredundant_experts = 4',
                  '[["1x", "1x"], ["1x(ep=4)", "1x"]]') == 2


def test_the_title_names_a_mixed_pools_scheduler() -> None:
    from test_cli_fuzz_round13 import invoke

    code, output = invoke("run", "--prefill-pool", "1x", "--decode-pool", "1x", "--mixed-pool", "1x", "--scheduler",
                          "sarathi", "--num-requests", "5", "--no-progress")
    assert code == 0 and "runs V1's chunked prefill); mixed pool sarathi ·" in " ".join(output.split()), output


def test_a_sweep_drains_vllms_warmups_in_a_closed_loop_as_run_does(tmp_path) -> None:  # noqa: ANN001
    """`run --concurrency N --num-warmups W` (vLLM's spelling) drains the warm-up first, as vllm bench serve does; a
    sweep's concurrency grid beside the same flag kept the steady warm-up, so its points were not the runs."""
    from simulator.planning.sweep import build_spec, load_sweep_file

    def modes(base: str, grid: str = "concurrency = [4, 8]", **kw: object) -> list[str]:
        path = tmp_path / "s.toml"
        path.write_text(f'mode = "run"\n[base]\nnum_requests = 40\n{base}\n[grid]\n{grid}\n')
        return [p.config.workload.warmup_mode for p in build_spec(load_sweep_file(path), **kw).points]

    assert modes("num_warmups = 8") == ["drain", "drain"]  # (the file's own spelling)
    assert modes("num_warmup = 8") == ["steady", "steady"]  # (ours: steady, as run's --num-warmup)
    assert modes("num_warmup = 8", vllm_warmups=True) == ["drain", "drain"]  # (--num-warmups typed)
    assert modes('num_warmups = 8\nwarmup_mode = "steady"') == ["steady", "steady"]  # (a mode given stands)
    assert modes("num_warmups = 8", grid="qps = [1, 2]") == ["steady", "steady"]  # (an open loop has no drain)
