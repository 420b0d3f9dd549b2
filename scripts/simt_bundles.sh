#!/bin/bash
# Model bundles for scripts/ab_models.py A/Bs of the scalar GEMM (scripts/simt_sweep.py), compiled
# here (the GPU machine has no ONNX front end) for CUDA and Vulkan on the h100 targets, one TAG per
# code version and tuning cache; BDA-only Vulkan and cubin-only CUDA keep each bundle ~10 MB.
# usage: scripts/simt_bundles.sh REPO TAG CACHE_DIR OUT_DIR model:batch ...
#   e.g. scripts/simt_bundles.sh /work/main A /work/main/docs/examples/h100-tuning out resnet50:8 minilm-l6:8
set -u
repo=$1; tag=$2; cache=$3; out=$(realpath -m "$4"); shift 4
py=${PYTHON:-python3}
mkdir -p "$out"
for mb in "$@"; do
  m=${mb%%:*}; b=${mb##*:}
  [ -f "$out/$m-b$b.onnx" ] || PYTHONPATH=$repo $py "$(dirname "$0")/zoo_onnx.py" "$m" "$b" "$out/$m-b$b.onnx"
  (cd "$repo" && PYTHONPATH=$repo HALBENCH_TUNING_CACHE=$cache XDG_CACHE_HOME=/tmp/simt-bundles-$tag \
     $py -m halbench compile "$out/$m-b$b.onnx" -o "$out/$m-b$b-$tag.hbx" --target-device cuda,vulkan \
     --cuda-target h100 --vulkan-target h100 --weights random --vulkan-dispatch-abi bda --cuda-formats cubin) \
     || echo "FAIL $m b$b $tag"
done
