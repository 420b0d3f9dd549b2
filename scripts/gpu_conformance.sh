#!/usr/bin/env bash
# On the GPU machine: the ONNX backend node tests, precompiled on a machine with the compiler
#   .venv/bin/python scripts/onnx_conformance.py --only-passing vulkan.json --compile-only \
#       --api cuda --target sm_90 --bundle-dir .gpuconf/cuda        (and --api vulkan --target h100)
#   tar cJf .gpuconf/conformance.tar.xz -C .gpuconf cuda vulkan
# run on cuda:// and vulkan:// and judged against the reference outputs they carry.
# Carry [".gpu", ".gpuconf/conformance.tar.xz"]; results land in $OUT/{cuda,vulkan}.json (labels $LABEL-cuda / -vulkan,
# LABEL=h100 by default).
set -u
source .gpu/setup.sh
work=$(mktemp -d)
tar xJf .gpuconf/conformance.tar.xz -C "$work"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for api in cuda vulkan; do
  python3 scripts/onnx_conformance.py --from-bundles "$work/$api" --device "$api://" --api "$api" -j 8 \
      --timeout 120 --label "${LABEL:-h100}-$api" -o "$OUT/$api.json" > "$OUT/$api.txt" 2>&1
  echo "== $api"; grep -v "done," "$OUT/$api.txt" | head -12
done
