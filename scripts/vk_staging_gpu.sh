#!/usr/bin/env bash
# On the H100 (run from a copy of the worktree whose ab/ holds packed bundles of
# scripts/vk_staging_ab.py, tags A = main, B = double, C = all, D = vec4): the whole-model A/B of
# the Vulkan GEMM staging variants, register counts of the ResNet-50 b8 kernels under A and the
# fastest, and a seeded re-tune of TUNE_PROBLEMS with the fastest variant into $OUT/tuning.
# Needs glslang (for the tune's compiles): source .gpum/setup.sh and install .hbwg first.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
python3 scripts/vk_staging_ab.py unpack ab
timeout 120 python3 scripts/ab_models.py ab ${DEVICES:-vulkan://0} | tee "$OUT/ab.txt"
best=$(python3 - "$OUT/ab.txt" <<'PY'
import math, re, sys
rows = [l.split("|") for l in open(sys.argv[1]) if re.match(r"\| \S+ b\d+ \| vulkan", l)]
per = {}
for r in rows:
    per.setdefault(r[3].strip(), []).append(math.log(float(r[5])))
gm = {t: math.exp(sum(v) / len(v)) for t, v in per.items()}
print(min(gm, key=gm.get) if gm else "C")
print(gm, file=sys.stderr)
PY
)
mode=$(case $best in A) echo none;; B) echo double;; D) echo vec4;; *) echo all;; esac)
echo "fastest: $best ($mode)"
for t in A $best; do
  python3 -m halbench inspect "ab/resnet50-b8-$t.hbx" --device vulkan://0 > "$OUT/inspect-$t.txt" 2>&1
done
grep -h "register_count" "$OUT"/inspect-*.txt | head -3
[ -n "${TUNE_PROBLEMS:-}" ] || exit 0
rm -rf "$OUT/tuning"; cp -r docs/examples/h100-tuning "$OUT/tuning"
timeout "${TUNE_TIMEOUT:-150}" python3 - "$mode" $TUNE_PROBLEMS <<PY 2>&1 | tail -40
import sys
from halbench.compiler.codegen import kernels
mode = sys.argv[1]
kernels.GLSL_STAGING.update(double=mode in ("double", "all"), vec4=mode in ("vec4", "all"))
from halbench.cli import main
main(["tune", *sys.argv[2:], "--device", "vulkan://0", "--target", "h100", "--budget-s", "${TUNE_BUDGET:-70}",
      "--max-candidates", "${TUNE_CANDIDATES:-10}", "--jobs", "16", "-o", "$OUT/tuning"], standalone_mode=True)
PY
