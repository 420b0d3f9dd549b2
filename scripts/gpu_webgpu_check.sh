#!/usr/bin/env bash
# The plug-in check on the GPU machine: conformance on vulkan/cuda/webgpu, the sm_90a cubin
# chosen over PTX on an sm_90 device, the models suite on all three APIs, webgpu peaks.
# Usage there: source .gpu/setup.sh; XDG_CACHE_HOME=$PWD/.gpucache scripts/gpu_webgpu_check.sh
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export HALBENCH_GPU_TESTS=1
py=python3
step() { echo; echo "=== $1"; }
step "versions"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$py -m halbench list-drivers 2>&1 | grep -A1 "^webgpu"
$py -m halbench dump-devices webgpu > "$OUT/webgpu-dump.txt" 2>&1; head -12 "$OUT/webgpu-dump.txt" | grep identity
step "conformance + plug-in tests"
timeout 240 $py -m pytest -q -p no:cacheprovider tests/hal tests/test_plugins.py -k "not local and not hip" --gpu \
  2>&1 | tee "$OUT/tests.log" | tail -3
step "sm_90a cubin on the H100"
$py - "$XDG_CACHE_HOME/mnv2_sm90a.hbx" <<'PY'
import sys, collections, numpy as np, halbench
from halbench.runtime import Module
with halbench.create_device("cuda://0") as dev, Module.load(sys.argv[1], dev) as m:
    chosen = collections.Counter((m.variant(e.id).format, m.variant(e.id).target) for e in m.bundle.manifest.executables)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    (y,) = m.invoke(None, [x])
    print(dev.info.identity.arch, dict(chosen), "finite:", bool(np.isfinite(y).all()),
          "median ms:", round(m.profile(None, [x], runs=20).median_ns() / 1e6, 3))
PY
step "models on vulkan, cuda, webgpu"
timeout 330 $py -m halbench run-suite models --device 'vulkan://*' --device 'cuda://*' --device 'webgpu://*' \
  --no-progress -o "$OUT/models.json" 2>&1 | tail -3
step "webgpu peaks"
timeout 120 $py -m halbench run-suite device-peaks --device 'webgpu://*' --no-progress -o "$OUT/peaks-webgpu.json" 2>&1 | tail -2
$py - "$OUT/models.json" "$OUT/peaks-webgpu.json" <<'PY'
import json, sys, numpy as np
rows = {}
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except OSError:
        continue
    for b in d["benchmarks"]:
        s = b["samples"]["device_ms"]
        m = b.get("metrics") or {}
        med = float(np.median(s)) if s else float("nan")
        rate = ""
        if s and m.get("bytes") and "bandwidth" in b["name"]: rate = f"{m['bytes'] / med / 1e6:.0f} GB/s"
        if s and m.get("flops") and "peak" in b["name"]: rate = f"{m['flops'] / med / 1e9:.1f} TF/s"
        rows.setdefault(b["name"], {})[b["device"].split(":")[0]] = (f"{med:.3f}" if s else b["status"]) + (f" {rate}" if rate else "")
        if b["status"] != "ok": print("  ", b["name"], b["device"], b["status"], (b.get("error") or "")[:150])
print(f"{'benchmark':24} {'vulkan':>16} {'cuda':>16} {'webgpu':>22}")
for k, v in rows.items():
    print(f"{k:24} {v.get('vulkan', '-'):>16} {v.get('cuda', '-'):>16} {v.get('webgpu', '-'):>22}")
PY
