#!/usr/bin/env bash
# The peers check on the GPU machine (../shared/gpu/README.md): the models suite with PyTorch
# (CUDA graph, torch.compile), ONNX Runtime (CPU) and IREE (cuda, vulkan) beside halbench on
# cuda:// and vulkan://, one report. Bundles and IREE modules come precompiled in .hbcache
# (scripts/precompile.py); the model files and the peer model files are rebuilt there.
# The carry limit (64 MiB a call) splits the cache over calls: each stages what it carries.
# Usage there: scripts/gpu_peers.sh setup DIR   (carry .gpu and DIR: installs the wheels into /tmp/site)
#              scripts/gpu_peers.sh stage DIR   (carry DIR: more of the cache)
#              scripts/gpu_peers.sh run [--resume]
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
stage() { mkdir -p /tmp/hbcache/halbench; cp -r "$1"/* /tmp/hbcache/halbench/; du -sh /tmp/hbcache/halbench/*; }
if [ "${1:-}" = setup ]; then
  source .gpu/setup.sh
  [ -d .hbw ] && python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .hbw/*.whl
  python3 -c 'import torch, onnx2torch, onnxruntime, iree.runtime; print("torch", torch.__version__, "ort", onnxruntime.__version__)'
  stage "$2"; exit 0
fi
if [ "${1:-}" = stage ]; then stage "$2"; exit 0; fi
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=/tmp XDG_CACHE_HOME=/tmp/hbcache
export PATH="/tmp/site/cmeel.prefix/bin:/tmp/site/bin:$PATH" LD_LIBRARY_PATH="/tmp/site/cmeel.prefix/lib"
[ -e /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m halbench list-peers | grep -v "^  "
R=/tmp/peers-r.json
# Progress: one line per finished entry, from the journal, while the suite runs.
( while sleep 20; do [ -f $R.partial ] && echo "$(date +%T) $(grep -c '"type": "result"' $R.partial) entries done, last: $(tail -1 $R.partial | cut -c1-160)"; done ) &
watcher=$!
timeout ${LIMIT:-540} python3 -m halbench run-suite ${SUITE:-models} --peer torch/cudagraph --peer torch/compile \
  --peer onnxruntime/cpu --peer iree -o $R --report /tmp/peers-r.html --no-progress ${ONLY:+--only "$ONLY"} ${2:-} 2>&1 | tail -12
kill $watcher 2>/dev/null
cp $R /tmp/peers-r.html "$OUT/" 2>/dev/null
python3 - $R <<'PY'
import json, sys, numpy as np
try:
    d = json.load(open(sys.argv[1]))
except OSError:
    sys.exit("no results yet")
rows = {}
for b in d["benchmarks"]:
    s = b["samples"]["device_ms"]
    col = f"{b['runtime']}@{b['device'].split(':')[0]}"
    rows.setdefault(b["name"], {})[col] = f"{np.median(s):.3f}" if s else b["status"][:4]
cols = sorted({c for r in rows.values() for c in r})
print("model".ljust(14), " ".join(c[:22].rjust(22) for c in cols))
for n, r in rows.items():
    print(n.ljust(14), " ".join(r.get(c, "-").rjust(22) for c in cols))
for b in d["benchmarks"]:
    if b["status"] != "ok" or (b.get("runtime_info") or {}).get("note"):
        print(b["name"], b["runtime"], b["device"], b["status"], (b.get("error") or b["runtime_info"].get("note") or "")[:160])
PY
