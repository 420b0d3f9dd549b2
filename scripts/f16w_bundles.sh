#!/bin/bash
# Bundles for scripts/ab_models.py A/Bs of the compile-time weight conversion
# (passes/convert_weights.py): per model and precision, TAG A with it off
# (HALBENCH_NO_CONVERT_WEIGHTS=1) and TAG B with it on, compiled by this checkout for CUDA only
# on the h100 target (cubin, --weights random), with the H100 tuning cache of the main checkout.
# Each precision goes to its own subdirectory: OUT_DIR/f16, OUT_DIR/tf32 (if PRECISIONS names it).
# usage: scripts/f16w_bundles.sh OUT_DIR [model:batch ...]   (default: resnet50:8 mobilenetv2:8 minilm-l6:8)
#   e.g. scripts/f16w_bundles.sh /work/f16w-ab resnet50:8
# env: PYTHON (default python3), PRECISIONS (default "f16"), HALBENCH_TUNING_CACHE (default
#   this checkout's docs/examples/h100-tuning)
# then on the H100: python scripts/ab_models.py OUT_DIR/f16 cuda://0 --torch-precision f16
#                   python scripts/f16w_check.py OUT_DIR/f16 cuda://0   (A and B bit-identical)
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$(realpath -m "$1"); shift
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(resnet50:8 mobilenetv2:8 minilm-l6:8)
py=${PYTHON:-python3}
cache=${HALBENCH_TUNING_CACHE:-$repo/docs/examples/h100-tuning}
for p in ${PRECISIONS:-f16}; do
  mkdir -p "$out/$p"
  for mb in "${models[@]}"; do
    m=${mb%%:*}; b=${mb##*:}
    [ -f "$out/$m-b$b.onnx" ] || PYTHONPATH=$repo $py "$repo/scripts/zoo_onnx.py" "$m" "$b" "$out/$m-b$b.onnx"
    for tag in A B; do
      off=$([ $tag = A ] && echo 1 || echo 0)
      (cd "$repo" && PYTHONPATH=$repo HALBENCH_TUNING_CACHE=$cache HALBENCH_NO_CONVERT_WEIGHTS=$off \
         XDG_CACHE_HOME=/tmp/f16w-bundles-$tag $py -m halbench compile "$out/$m-b$b.onnx" \
         -o "$out/$p/$m-b$b-$tag.hbx" --target-device cuda --cuda-target h100 --cuda-formats cubin \
         --weights random --precision "$p") || echo "FAIL $m b$b $p $tag"
    done
  done
done
ls -l "$out"/*/*.hbx
