#!/usr/bin/env bash
# Issue 15's report on the GPU machine: the smoke suite on vulkan:// and cuda://, its report,
# and a short table per device: dispatches named by ONNX nodes, the dispatch sum against the
# model time (launch gaps / idle), and roofline points above the measured ceiling.
# Bundles come precompiled (the GPU machine has no MLIR); on this machine first:
#   XDG_CACHE_HOME=$PWD/.hbcache python scripts/precompile.py smoke vulkan=h100 cuda=h100
# then carry .hbcache. Usage there: source .gpu/setup.sh; scripts/gpu_report_check.sh
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$PWD/.hbcache} XDG_RUNTIME_DIR=/tmp
R="$OUT/smoke-gpu.json"
timeout 400 python3 -m halbench run-suite smoke --device 'vulkan://*' --device 'cuda://*' -o "$R" \
  --report "$OUT/smoke-gpu.html" --no-progress --format json | head -c 600; echo
python3 - "$R" <<'PY'
import json, sys
from pathlib import Path
from halbench.bench.results import read_results
from halbench.reports.report_data import build_context
doc = read_results(sys.argv[1])
ctx = build_context([(Path(sys.argv[1]), doc)])
print(f"{'device':12} {'model':14} {'disp':>5} {'named':>6} {'sum ms':>8} {'model ms':>9} {'gaps ms':>8}")
for b in doc["benchmarks"]:
    if b["kind"] != "model" or b["status"] != "ok":
        continue
    d = b.get("dispatches") or []
    named = sum(1 for x in d if x.get("nodes"))
    s = sum(x["device_ms"]["median"] for x in d)
    ms = sorted(b["samples"]["device_ms"])[len(b["samples"]["device_ms"]) // 2]
    print(f"{b['device']:12} {b['name']:14} {len(d):5d} {named:6d} {s:8.3f} {ms:9.3f} {ms - s:8.3f}")
for r in ctx["rooflines"]:
    print(f"roofline {r['title']}: {r['count']} points, {len(r['above'])} above the measured ceiling "
          f"({r['ceiling_name']})")
print("warnings:", len(ctx["warnings"]), "listed,", len(ctx["noisy"]), "noisy (grouped)")
PY
