#!/bin/bash
# Bundles for scripts/ab_models.py A/Bs of Winograd F(2x2, 3x3) (passes/winograd.py): per model,
# batch and precision, TAG A with it off (HALBENCH_WINOGRAD=off) and TAG B with MODE (default
# auto: the convolutions the rule takes; on: every one that qualifies), compiled by this checkout for the h100
# target (cubin; --weights random) with the H100 tuning cache; fp32 bundles also for Vulkan.
# Each precision goes to its own subdirectory OUT_DIR/PRECISION.
# usage: scripts/winograd_bundles.sh OUT_DIR [model:batch ...]   (default: resnet50:1 resnet50:8)
# env: MODE (auto | on), PYTHON (default python3), PRECISIONS (default "fp32 tf32 f16"), HALBENCH_TUNING_CACHE
#   (default this checkout's docs/examples/h100-tuning)
# then on the H100: python scripts/ab_models.py OUT_DIR/fp32 cuda://0 vulkan://0
#                   python scripts/ab_models.py OUT_DIR/tf32 cuda://0 --torch-precision tf32
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "$1"); shift
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(resnet50:1 resnet50:8)
py=${PYTHON:-python3}
cache=${HALBENCH_TUNING_CACHE:-$repo/docs/examples/h100-tuning}
for p in ${PRECISIONS:-fp32 tf32 f16}; do
  mkdir -p "$out/$p"
  devices=cuda
  [ "$p" = fp32 ] && devices=cuda,vulkan
  for mb in "${models[@]}"; do
    m=${mb%%:*}; b=${mb##*:}
    [ -f "$out/$m-b$b.onnx" ] || PYTHONPATH=$repo $py "$repo/scripts/zoo_onnx.py" "$m" "$b" "$out/$m-b$b.onnx"
    for tag in A B; do
      mode=$([ $tag = A ] && echo off || echo "${MODE:-auto}")
      (cd "$repo" && PYTHONPATH=$repo HALBENCH_TUNING_CACHE=$cache HALBENCH_WINOGRAD=$mode \
         XDG_CACHE_HOME=/tmp/winograd-bundles-$tag $py -m halbench compile "$out/$m-b$b.onnx" \
         -o "$out/$p/$m-b$b-$tag.hbx" --target-device $devices --cuda-target h100 --vulkan-target h100 \
         --vulkan-dispatch-abi bda --cuda-formats cubin --weights random --precision "$p") \
        || echo "FAIL $m b$b $p $tag"
    done
  done
done
ls -l "$out"/*/*.hbx
