#!/usr/bin/env bash
# One batched check on the GPU machine (../shared/gpu/README.md): device dumps, the GPU tests,
# the HAL conformance suite on vulkan:// and cuda://, host-cost benchmarks, and the
# device-peaks suite. Logs and results go to $OUT (or ./out); a short table ends the output.
# Usage there:  source .gpu/setup.sh; scripts/gpu_check.sh [quick]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export HALBENCH_GPU_TESTS=1 XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/hbcache}
py=python3
step() { echo; echo "=== $1"; }
step "versions"; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tail -2
$py -c 'import cuda.bindings, numpy; print("cuda.bindings", cuda.bindings.__version__, "numpy", numpy.__version__)'
step "dump-devices"; $py -m halbench dump-devices > "$OUT/dump-devices.txt" 2>&1; echo "rc=$?"
$py -m halbench dump-devices --format json > "$OUT/dump-devices.json" 2>/dev/null
grep -E "^# --device|feature_tier|identity.uuid|same_device_as|compute_capability|cooperative_matrix\[0\]" "$OUT/dump-devices.txt" | head -20
step "gpu + conformance tests"
timeout 330 $py -m pytest -q -p no:cacheprovider --timeout=120 tests/probe/test_gpu_probe.py tests/hal \
   tests/bench/test_micro.py tests/runtime tests/compiler/test_codegen_cuda.py tests/compiler/test_codegen_matrix.py \
   -k "not local and not throughput" --gpu \
   2>&1 | tee "$OUT/tests.log" | tail -25
step "f16 GEMM on the matrix units (2048^3)"
timeout 120 $py -m pytest -q -s -p no:cacheprovider tests/compiler/test_codegen_matrix.py -k throughput --gpu 2>&1 \
   | grep -iE "gflop|tflop|passed|failed|error" | tail -8
step "host-cost benchmarks"
timeout 120 $py -m pytest -q -p no:cacheprovider benchmarks --benchmark-enable \
   --benchmark-columns=median,iqr,rounds --benchmark-sort=name -k "vulkan or cuda" 2>&1 | tee "$OUT/bench.log" | tail -30
if [ "${1:-}" != quick ]; then
  step "device-peaks suite"
  timeout 200 $py -m halbench run-suite device-peaks --no-progress -o "$OUT/peaks.json" 2>&1 | tail -5
  step "models suite"
  timeout 200 $py -m halbench run-suite models --no-progress -o "$OUT/models.json" 2>&1 | tail -5
  $py -m halbench report "$OUT/peaks.json" "$OUT/models.json" -o "$OUT/report.html" 2>&1 | tail -2
  $py - "$OUT/peaks.json" "$OUT/models.json" <<'PY'
import json, sys, numpy as np
print(f"{'benchmark':24} {'device':10} {'status':7} {'median ms':>10} {'rate':>16} format")
for b in [b for f in sys.argv[1:] for b in json.load(open(f))["benchmarks"]]:
    s = b["samples"]["device_ms"]; m = b["metrics"]
    med = float(np.median(s)) if s else float("nan")
    rate = ""
    if s and m.get("bytes"): rate = f"{m['bytes'] / med / 1e6:.0f} GB/s"
    if s and m.get("flops"): rate = f"{m['flops'] / med / 1e9:.1f} TFLOP/s"
    if s and "latency" in b["name"]: rate = f"{np.median(b['samples']['host_ms']) * 1e3:.1f} us host"
    print(f"{b['name']:24} {b['device']:10} {b['status']:7} {med:10.4f} {rate:>16} {b.get('format') or ''} {b['error'] or ''}"[:170])
PY
fi
