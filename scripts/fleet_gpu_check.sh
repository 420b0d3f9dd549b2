#!/usr/bin/env bash
# Fleet check on the GPU machine (1 or 2 NVIDIA GPUs; ../shared/gpu/README.md): the models suite on
# cuda:// and vulkan:// of every GPU, three ways: serially (one process), --parallel (one pinned
# worker per GPU) and --cluster (a one-node Ray cluster started here on 127.0.0.1). Prints the wall
# time of each mode, parallel/serial and cluster/serial, and per benchmark each mode's median and
# its difference from the serial run. Results and the reports go to $OUT (or ./out).
#
# The GPU machine has no MLIR compiler: bundles come precompiled in the compile cache, staged the
# way scripts/gpu_peers.sh stages it (XDG_CACHE_HOME=/tmp/hbcache). Here, on the dev machine:
#   XDG_CACHE_HOME=$PWD/.hbcache python scripts/precompile.py models vulkan=h100 cuda=h100
# (use vulkan=h200 cuda=h200 for the H200s); carry .hbcache/halbench/bundles.
# Ray comes as wheels. The ray wheel (79 MB) is larger than one carry (64 MiB) and the machine is
# given back after 30 s idle, so what was verified on the H100 is one carry with a slimmed wheel
# (no Java jars, rllib/data/serve/tune/train/llm or dashboard build: 40 MB) for the machine's
# Python (3.12), plus its plain dependencies (msgpack, jsonschema and theirs):
#   pip download ray==2.60.0 --no-deps --python-version 3.12 --only-binary=:all: -d /tmp/rw
#   pip download msgpack jsonschema --python-version 3.12 --only-binary=:all: -d /tmp/rw/deps
#   (rewrite the ray wheel without those folders with python's zipfile; put both in DIR/whl)
# Unzip the wheels into /tmp/site there and mark Ray's binaries executable (zipfile drops the
# mode bits): chmod +x /tmp/site/ray/core/src/ray/*/* ; the bundles go in XDG_CACHE_HOME.
# Usage there:  (environment of .gpu/setup.sh, Ray importable from /tmp/site)
#               XDG_CACHE_HOME=DIR ONLY='minilm-l6/*' scripts/fleet_gpu_check.sh [SUITE]
#               (LIMIT=seconds per mode, default 170)
# A dry run without a GPU: DEVICES="local-sync:// local-task://" ONLY=tiny-mlp/b1 scripts/fleet_gpu_check.sh smoke
set -u
# stage-ray / install-ray: the two-carry path (split wheel); not verified (needs two calls within 30 s).
if [ "${1:-}" = stage-ray ]; then mkdir -p /tmp/rayw; cp -r "$2"/* /tmp/rayw/; ls -la /tmp/rayw; exit 0; fi
if [ "${1:-}" = install-ray ]; then
  cd /tmp/rayw || exit 2
  whl=$(grep '^ray-2' names | head -1)
  [ -f "$whl" ] || cat ray.part.* > "$whl"
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site ./*.whl
  PYTHONPATH=/tmp/site python3 -c 'import ray; print("ray", ray.__version__)'; exit $?
fi
OUT=${OUT:-out}; mkdir -p "$OUT"
SUITE=${1:-models}
export PYTHONPATH="$PWD:/tmp/site" PYTHONUNBUFFERED=1 XDG_RUNTIME_DIR=/tmp XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/hbcache}
export PATH="/tmp/site/bin:$PATH"
# Ray on the loopback address only (it would otherwise advertise the host's address).
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_USAGE_STATS_ENABLED=0
[ -e /usr/share/vulkan/icd.d/nvidia_icd.json ] || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
py=python3
nvidia-smi --query-gpu=index,name,uuid,driver_version --format=csv,noheader
ls "$XDG_CACHE_HOME/halbench/bundles" 2>/dev/null | wc -l | sed 's/^/precompiled bundles: /'
$py -c 'import ray; print("ray", ray.__version__)' || { echo "ray is not installed (see the header)"; exit 2; }
set -f  # the device patterns hold '*'

DEV=(); for d in ${DEVICES:-cuda://* vulkan://*}; do DEV+=(--device "$d"); done  # DEVICES: a dry run elsewhere
LIMIT=${LIMIT:-170}

timed() {  # timed MODE ARGS...: run one mode, record its wall time
  local mode=$1; shift
  rm -f "$OUT/$mode.json" "$OUT/$mode.json.partial"
  local t0; t0=$(date +%s.%N)
  timeout "$LIMIT" $py -m halbench run-suite "$SUITE" "${DEV[@]}" --no-progress -o "$OUT/$mode.json" ${ONLY:+--only "$ONLY"} "$@" \
    > "$OUT/$mode.log" 2>&1
  echo "$mode rc=$? $(tail -1 "$OUT/$mode.log" | cut -c1-150)"
  echo "$mode $t0 $(date +%s.%N)" >> "$OUT/walls.txt"
}

rm -f "$OUT/walls.txt"
echo "=== serial";   timed serial
echo "=== parallel"; timed parallel --parallel
echo "=== cluster (one-node Ray cluster on 127.0.0.1)"
PORT=${RAY_PORT:-6390}
RES=$($py -m halbench fleet-resources)
echo "resources: $RES"
$py -m ray.scripts.scripts start --head --node-ip-address=127.0.0.1 --port="$PORT" --num-cpus=4 \
  --include-dashboard=false --disable-usage-stats --resources="$RES" > "$OUT/ray-start.log" 2>&1 \
  || { tail -5 "$OUT/ray-start.log"; }
trap '$py -m ray.scripts.scripts stop --force > /dev/null 2>&1' EXIT
timed cluster --cluster "127.0.0.1:$PORT"
$py -m ray.scripts.scripts stop --force > /dev/null 2>&1

$py -m halbench report "$OUT/parallel.json" -o "$OUT/parallel.html" > /dev/null 2>&1
$py -m halbench report "$OUT/cluster.json" -o "$OUT/cluster.html" > /dev/null 2>&1
$py - "$OUT" <<'PY'
import json, sys
from pathlib import Path
import numpy as np

out = Path(sys.argv[1])
walls = {m: float(b) - float(a) for m, a, b in (ln.split() for ln in (out / "walls.txt").read_text().splitlines())}
modes = [m for m in ("serial", "parallel", "cluster") if (out / f"{m}.json").exists()]
print(f"\n{'mode':10} {'wall s':>8} {'vs serial':>9}  status")
docs = {m: json.loads((out / f"{m}.json").read_text()) for m in modes}
for m in ("serial", "parallel", "cluster"):
    if m not in walls:
        continue
    w, s = walls[m], walls.get("serial", float("nan"))
    counts = {}
    for b in docs.get(m, {}).get("benchmarks", []):
        counts[b["status"]] = counts.get(b["status"], 0) + 1
    print(f"{m:10} {w:8.1f} {w / s:9.2f}  {counts or 'no results'}")

def key(b):  # the device without the node: cluster keys are URI@NODE
    return (b["name"], b["device"].split("@")[0])

med = {m: {key(b): float(np.median(b["samples"]["device_ms"])) for b in d["benchmarks"]
           if b["status"] == "ok" and b["samples"]["device_ms"]} for m, d in docs.items()}
busy = {m: {key(b): len(b.get("busy") or []) for b in d["benchmarks"]} for m, d in docs.items()}
print(f"\n{'benchmark':22} {'device':14} {'serial ms':>10} {'parallel ms':>12} {'diff':>7} {'cluster ms':>11} {'diff':>7}  busy")
worst = {"parallel": 0.0, "cluster": 0.0}
for k in sorted(med.get("serial", {})):
    s = med["serial"][k]
    cells = []
    for m in ("parallel", "cluster"):
        v = med.get(m, {}).get(k)
        if v is None:
            cells += ["-", "-"]
            continue
        d = 100 * (v / s - 1)
        worst[m] = max(worst[m], abs(d))
        cells += [f"{v:.3f}", f"{d:+.1f}%"]
    print(f"{k[0][:22]:22} {k[1][:14]:14} {s:10.3f} {cells[0]:>12} {cells[1]:>7} {cells[2]:>11} {cells[3]:>7}"
          f"  {busy.get('parallel', {}).get(k, '-')}/{busy.get('cluster', {}).get(k, '-')}")
print(f"\nlargest |median difference| from serial: parallel {worst['parallel']:.1f}%, cluster {worst['cluster']:.1f}%"
      " (issue's bar: 3%); wall-time bar: parallel <= 0.6x serial")
PY
