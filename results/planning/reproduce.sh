#!/usr/bin/env bash
# Regenerate results/planning (two plans, about 20 s each on two shared cores):
#   bash results/planning/reproduce.sh
# The worked example prices kernels from AIConfigurator's vLLM tables (../shared/data/profiles/aiconfigurator);
# the second plan, the same question with the calibrated roofline instead, needs no data; it also asks
# whether short and long requests on different GPU types would be cheaper (--mix).
set -euo pipefail
cd "$(dirname "$0")/../.."
COMMON=(--model llama-3.1-70b --max-model-len 8192 --workload sharegpt --num-requests 512 --qps 40
        --scheduler vllm-v1 --engine vllm-v1 --gpus h100-sxm,h200,b200 --modes agg,disagg
        --ttft-slo 2 --tpot-slo 0.05 --attainment 0.99 --seed 0
        --kv-link-scope shared)  # as these plans were made: one FIFO KV link (the default is now one per worker)
for variant in vllm-kernels roofline; do
  out=results/planning/$variant
  rm -rf "$out"
  kernels=vllm; extra=(); [ "$variant" = roofline ] && kernels=roofline && extra=(--mix)
  COLUMNS=160 simulate plan "${COMMON[@]}" --kernels "$kernels" "${extra[@]}" --out "$out" > "results/planning/$variant.txt"
done
