#!/usr/bin/env bash
# Profile real kernels on one H200 with servesim's own profiler (`simulate profile`), into $OUT.
#
# Run from the repository root on the GPU machine; then `simulate fidelity --profile ...` (README.md
# here) scores the cost models against the tables. Each stage has its own time limit and is
# interrupted with SIGINT, which the profiler turns into a saved, resumable table, so a stage that
# runs out of time still keeps what it measured (rerunning the script resumes every stage).
# ARCHIVE=FILE also appends each finished stage's folder to a tar (for machines that hand back few
# files). Wheels in .whl/ (simpy, where the machine lacks it) are installed into /tmp/site first;
# the checkout itself goes on PYTHONPATH, not installed.
#
#   OUT=/tmp/h200 bash results/h200/measure.sh
set -u
OUT=${OUT:?set OUT to the folder that receives the tables}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH="$PWD:/tmp/site"
else
  export PYTHONPATH="$PWD"
fi
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv 2>&1
  python3 -c "import torch, sys; print('python', sys.version.split()[0]); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version()); print('gpu', torch.cuda.get_device_name() if torch.cuda.is_available() else None)"
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

# stage LIMIT_S NAME ARGS...: one `simulate profile` run into $OUT/NAME, stopped at LIMIT_S.
stage() {
  local limit=$1 name=$2; shift 2
  local t0=$SECONDS
  timeout -s INT -k 20 "$limit" python3 -m simulator profile --device cuda --out "$OUT/$name" --no-progress "$@"
  echo "stage $name: exit $? after $((SECONDS - t0)) s"
  if [ -n "${ARCHIVE:-}" ]; then tar -rf "$ARCHIVE" -C "$OUT" "$name"; fi
}

ops=linear,attention,elementwise
# The dense Llama-3 shapes the headline questions ask about: 8B on one GPU, 70B's per-GPU shards.
stage 120 llama-3.1-8b_tp1 --model llama-3.1-8b --tp 1 --ops $ops
stage 100 llama-3.1-70b_tp4 --model llama-3.1-70b --tp 4 --ops $ops
stage 100 llama-3.1-70b_tp2_tp8 --model llama-3.1-70b --tp 2 --tp 8 --ops $ops
# The five GEMMs again as FP8 (e4m3, per-tensor scales): what an FP8 deployment's linear layers run.
stage 40 llama-3.1-8b_tp1_fp8 --model llama-3.1-8b --tp 1 --ops linear --dtype fp8
stage 40 llama-3.1-70b_tp4_fp8 --model llama-3.1-70b --tp 4 --ops linear --dtype fp8
stage 40 llama-3.1-70b_tp2_tp8_fp8 --model llama-3.1-70b --tp 2 --tp 8 --ops linear --dtype fp8
# The same grids with `--l2-flush write` (Triton's flush) are in write-flush/: measured before `read`
# existed, the first time this script ran; `--l2-flush write` and another OUT repeat them.
# Launch overhead: the per-token ops and decode attention replayed as CUDA graphs.
stage 45 llama-3.1-8b_tp1_graphs --model llama-3.1-8b --tp 1 --cuda-graphs --max-tokens 1024 \
  --ops linear,elementwise,attn_decode
# The CUDA path's own tests (events, L2 flushes, graphs, FP8), which CI's CPU machines skip.
timeout -k 10 60 python3 -m pytest -p no:cacheprovider -q -m gpu tests/test_profiler_gpu.py > "$OUT/gpu_tests.log" 2>&1
echo "gpu tests: exit $?"; tail -5 "$OUT/gpu_tests.log"
