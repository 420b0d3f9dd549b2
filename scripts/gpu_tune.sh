#!/usr/bin/env bash
# Tune the GEMM / convolution problems of ResNet-50 b8 and MiniLM-L6 b8 on the H100, through CUDA
# and Vulkan, in one call (~5 minutes): the tuning caches go to $OUT/tuning/<api>-<target>.json,
# a table per API to stdout and $OUT/tune-<api>.txt. The problem files come with the checkout
# (scripts/tune_problems/, written by scripts/tune_problems.py where the ONNX front end is).
# Carry [".gpu"] (its setup.sh is sourced when present); nothing else: the problem files are tracked.
# Usage there:  OUT=out scripts/gpu_tune.sh [BUDGET_S_PER_API]   (default 120; TARGET=h100,
#               URIS="cuda://0 vulkan://0", PROBLEMS=the two files by default)
# Back here:    halbench compile M.onnx ... --cuda-target h100 --vulkan-target h100 --tuning-cache OUT/tuning
set -u
[ -f .gpu/setup.sh ] && source .gpu/setup.sh
OUT=${OUT:-out}; mkdir -p "$OUT/tuning"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/hbcache}
py=${PYTHON:-python3}
budget=${1:-120}
target=${TARGET:-h100}
problems=${PROBLEMS:-scripts/tune_problems/resnet50-b8.json scripts/tune_problems/minilm-l6-b8.json}
jobs=$(( $(nproc) > 16 ? 16 : $(nproc) ))
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for uri in ${URIS:-cuda://0 vulkan://0}; do
  api=${uri%%:*}
  echo; echo "=== $uri (budget ${budget}s, $jobs parallel compiles)"
  timeout $(( budget + 90 )) $py -m halbench tune $problems --device "$uri" --target "$target" --budget-s "$budget" \
      --samples 10 --warmup 3 --jobs "$jobs" --output "$OUT/tuning" 2>"$OUT/tune-$api.log" | tee "$OUT/tune-$api.txt"
  rc=${PIPESTATUS[0]}; echo "rc=$rc"
  if [ "$rc" != 0 ]; then tail -40 "$OUT/tune-$api.log"; else tail -2 "$OUT/tune-$api.log"; fi
done
ls -la "$OUT/tuning"
