#!/usr/bin/env bash
# A/A check of the gate: run the same fast microbenchmark suite twice, N times, and count
# how often `halbench gate` calls a regression (each one is a false positive).
# Usage: scripts/aa_gate.sh [PAIRS=10] [OUTDIR=aa-runs]
set -u
pairs=${1:-10}; dir=${2:-aa-runs}; mkdir -p "$dir"
hb=${HALBENCH:-.venv/bin/halbench}
fp=0; unusable=0
for i in $(seq 1 "$pairs"); do
  for side in a b; do
    $hb run-suite smoke --only 'peak/*' --no-progress -o "$dir/$i-$side.json" >/dev/null 2>&1
  done
  $hb gate --baseline "$dir/$i-a.json" --candidate "$dir/$i-b.json" --summary "$dir/$i-gate.md" >/dev/null 2>&1
  rc=$?
  [ $rc = 1 ] && fp=$((fp + 1))
  [ $rc = 2 ] && unusable=$((unusable + 1))
  echo "pair $i: gate exit $rc"
done
echo "A/A pairs: $pairs, gate failures (false positives): $fp, unusable: $unusable"
