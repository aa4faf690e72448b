"""Bounds past which a value is a typo, not a configuration: each refused in one line naming its
field, before it can overflow an integer draw, enumerate for minutes or be blamed on memory. Kept
apart from :mod:`simulator.config.run_config` so that the modules it imports (the disaggregated
layouts) and the workload readers can check against them too."""

# A request rate above this is a mistake (an inf or 1e300 typed for "as fast as possible"),
# not a load: --arrival burst sends every request at once.
MAX_QPS = 1e6
# Below this rate (one request every ~17 minutes) a rate is a typo (1e-307 for "slowly"): its arrivals
# reach past MAX_ARRIVAL_S, or overflow to inf, within a few requests.
MIN_QPS = 1e-3
# Arrival times past this (~31 years) lose the microsecond: a float64 timestamp there resolves 0.1 us,
# and at 1e15 s a whole token time rounds away (latencies of 0 ms were reported).
MAX_ARRIVAL_S = 1e9
# Gamma gaps' coefficient of variation and a trace's time divisor: outside these the gaps over- or
# underflow (a gamma of shape 1/cv^2) long before any real traffic is described.
CV_RANGE = (1e-3, 1e3)
TIME_SCALE_RANGE = (1e-6, 1e6)
# A token count above this (a request's length, a length bound) is a typo, not a request: no model's context
# comes near it, and past 2^63 the workload's integer draws overflow (a traceback, not the usual refusal).
MAX_TOKENS = 1 << 40
# Tokens a KV cache block may hold: real engines page in 1-256 tokens (vLLM's --block-size 1-256,
# SGLang's --page-size, TensorRT-LLM's tokens_per_block; vLLM's hybrid models some thousands); past it a
# block is a typo, and the run would find no block fits the cache and blame the GPU's memory.
MAX_BLOCK_SIZE = 1 << 16
# More replicas than any fleet simulated here: each replica takes ~8 ms to build (its scheduler, KV cache and cost
# model), so 10,000 take about a minute before the first request, and 100,000 sat silent for 13 minutes.
MAX_REPLICAS = 10_000
# What the refusals say of it.
MAX_REPLICAS_WHY = "each replica takes milliseconds to build: more would take minutes before the first request"
# GiB of host memory a replica's CPU KV tier may have (1 PiB): beyond it the block count overflows.
MAX_CPU_KV_GIB = float(1 << 20)
# Iterations an attention-DP balance may hold prompts (TensorRT-LLM's recipes: 50-500).
MAX_BALANCE_ITERS = 100_000
# Independent capacity searches (--seeds): each is a whole bisection of trials; past this a count is a
# typo (a million seeds planned for minutes before its first trial, printing nothing).
MAX_SEEDS = 1_000
