"""Round 19 of the CLI audit: a vLLM V0 budget below the context, refused at start wherever it is given (the run's
scheduler, a disaggregated pool's, a search's base) as vLLM refuses it, where every longer request was rejected."""

from __future__ import annotations

from test_cli_fuzz_round13 import invoke, refused

LONG = ["--model", "llama-3.1-8b", "--gpu", "h100", "--num-requests", "20"]  # a 131,072-token context
POOLS = ["--prefill-pool", "1x(tp=1)", "--decode-pool", "1x(tp=1)"]


def test_a_whole_prompt_budget_below_the_context_is_refused_everywhere() -> None:
    line = refused("run", *LONG, "--scheduler", "vllm", "--max-num-batched-tokens", "4096")
    assert line.startswith("error: --max-num-batched-tokens: 4,096 tokens is below max_model_len 131,072"), line
    assert "--max-model-len 4096 or less, --max-num-batched-tokens 131072 or more" in line
    # a disaggregated run's pools: the run's budget, and a pool's own budget=
    line = refused("run", *LONG, "--scheduler", "vllm", "--max-num-batched-tokens", "2048", *POOLS)
    assert line.startswith("error: prefill_pool (scheduler.max_num_batched_tokens): 2,048 tokens is below"), line
    line = refused("run", *LONG, "--prefill-pool", "1x(tp=1,sched=vllm,budget=4096)", "--decode-pool", "1x(tp=1)")
    assert "budget=131072 or more" in line, line
    assert "below max_model_len" in refused("disagg", "split", *LONG, "--gpus", "2", "--scheduler", "vllm",
                                            "--max-num-batched-tokens", "8192")
    # a context the budget holds runs, every request served; a chunking scheduler takes any budget
    for extra in (["--scheduler", "vllm", "--max-num-batched-tokens", "4096", "--max-model-len", "4096"],
                  ["--scheduler", "vllm", "--max-num-batched-tokens", "2048", "--max-model-len", "2048", *POOLS],
                  ["--scheduler", "vllm-v1", "--max-num-batched-tokens", "2048"]):
        code, out = invoke("run", *LONG, *extra, "--json")
        assert code == 0 and '"num_rejected": 0' in out, (extra, out[-400:])
