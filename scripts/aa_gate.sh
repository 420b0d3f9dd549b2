#!/usr/bin/env bash
# A/A check of the gate: run the same fast microbenchmark suite twice, N times, and count the
# gate's three answers. Both runs of a pair measure the same code, so every REGRESSION is a false
# positive (the bar is zero); INCONCLUSIVE means the machine was too noisy to vouch for the
# threshold, which is an honest answer on a loaded machine.
# Results files already in OUTDIR are reused, so the gate can be re-judged without re-running.
# Usage: scripts/aa_gate.sh [PAIRS=10] [OUTDIR=aa-runs]   (HALBENCH=... picks the executable)
set -u
pairs=${1:-10}; dir=${2:-aa-runs}; mkdir -p "$dir"
hb=${HALBENCH:-.venv/bin/halbench}
pass=0; regression=0; inconclusive=0; unusable=0
for i in $(seq 1 "$pairs"); do
  for side in a b; do
    [ -s "$dir/$i-$side.json" ] && continue
    $hb run-suite smoke --only 'peak/*' --no-progress -o "$dir/$i-$side.json" >/dev/null 2>&1
  done
  $hb gate --baseline "$dir/$i-a.json" --candidate "$dir/$i-b.json" \
    --summary "$dir/$i-gate.md" >"$dir/$i-gate.txt" 2>&1
  rc=$?
  case $rc in
    0) pass=$((pass + 1)) ;;
    1) regression=$((regression + 1)) ;;
    3) inconclusive=$((inconclusive + 1)) ;;
    *) unusable=$((unusable + 1)) ;;
  esac
  echo "pair $i: gate exit $rc ($(tail -n 1 "$dir/$i-gate.txt"))"
done
echo "A/A pairs: $pairs; PASS $pass, INCONCLUSIVE $inconclusive, REGRESSION $regression" \
     "(false positives), unusable $unusable"
[ "$regression" = 0 ]
