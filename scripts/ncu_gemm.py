"""Nsight Compute on the GEMM bundles of ``scripts/gemm_variants_ab.py``: why a kernel issues less
often than cuBLAS's for the same problem (per-kernel warp stall reasons) and where (per SASS
opcode). What found gemm.j2 AK and finish4 on the H200 (docs/examples/h200-ncu-ffn1.txt).

Usage, on the GPU machine (ncu in /usr/local/cuda/bin; it times at locked base clocks):
  stalls: ncu --csv --page raw -k 'regex:^main$|xmma|gemm' --launch-skip 2 --metrics "$(python
            scripts/ncu_gemm.py metrics)" python scripts/ncu_gemm.py target DIR 2:base,3:base > raw.csv
          python scripts/ncu_gemm.py stalls raw.csv
  source: ncu --section SourceCounters --section WarpStateStats -k 'regex:^main$' --launch-skip 2
            --launch-count 1 -f -o rep python scripts/ncu_gemm.py target DIR 2:base
          ncu -i rep.ncu-rep --page source --csv --print-source sass > src.csv
          python scripts/ncu_gemm.py source src.csv
``target DIR P:VARIANT,...`` runs each named bundle (problem P, variant VARIANT: ``pP-VARIANT.hbx``
in DIR) three times, then torch.matmul (cuBLAS, TF32 off) on each problem three times, so that
``--launch-skip 2`` profiles each kernel's third launch (HALBENCH_CUDA_GRAPHS=0: plain launches).
"""

from __future__ import annotations

import collections
import csv
import json
import sys
from pathlib import Path

STALLS = ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
          "not_selected", "dispatch_stall", "lg_throttle", "selected", "no_instruction", "branch_resolving",
          "membar", "drain", "sleeping", "imc_miss")
BASE = ("gpu__time_duration.sum", "smsp__inst_executed.sum", "smsp__issue_active.avg.pct_of_peak_sustained_active",
        "sm__warps_active.avg.per_cycle_active", "launch__registers_per_thread", "launch__grid_size",
        "launch__block_size")


def metrics() -> str:
    return ",".join([*BASE, *(f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in STALLS)])


def target(root: Path, which: list[str]) -> None:
    import numpy as np

    import halbench
    from halbench.runtime import Module

    problems = {}
    with halbench.create_device("cuda://0") as dev:
        for w in which:
            i, v = w.split(":")
            problems[i] = p = json.loads((root / f"p{i}.key").read_text())["problem"]
            rng = np.random.default_rng(0)
            ins = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p["a"], p["b"])]
            m = Module.load(root / f"p{i}-{v}.hbx", dev)
            for _ in range(3):
                m.invoke(inputs=ins)
            m.close()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    for p in problems.values():
        a, b = torch.rand(*p["a"], device="cuda"), torch.rand(*p["b"], device="cuda")
        for _ in range(3):
            torch.matmul(a, b)
        torch.cuda.synchronize()


def _num(x: str) -> float:
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def _rows(path: Path, first: str) -> list[dict[str, str]]:
    rows = list(csv.reader(path.open()))
    i = next(k for k, r in enumerate(rows) if r and r[0] == first)
    return [dict(zip(rows[i], r)) for r in rows[i + 1:] if len(r) == len(rows[i])]


def stalls(path: Path) -> None:
    """One line per kernel: time, instructions, issue-active %, warps; then its top stall reasons
    (warps stalled per issued instruction)."""
    for d in _rows(path, "ID"):
        if not d.get("launch__grid_size", "").replace(",", "").isdigit():
            continue  # the units row
        st = {k.split("stalled_")[1].split("_per")[0]: _num(v) for k, v in d.items() if "stalled_" in k}
        top = sorted(st.items(), key=lambda x: -x[1])[:7]
        print(f"{d['Kernel Name'][:48]:48} grid {d['launch__grid_size']:>5} x {d['launch__block_size']:>4} "
              f"regs {d['launch__registers_per_thread']:>4}  {d['gpu__time_duration.sum']:>8} ns  "
              f"inst {d['smsp__inst_executed.sum']:>12}  issue {d['smsp__issue_active.avg.pct_of_peak_sustained_active']}% "
              f" warps/SM {d['sm__warps_active.avg.per_cycle_active']}")
        print("    " + "  ".join(f"{k} {v:.2f}" for k, v in top))


def source(path: Path) -> None:
    """Stall samples per SASS opcode (share of all samples and of the not-issued ones) and each
    opcode's main reasons; the share of samples after the last FFMA (the epilogue)."""
    data = _rows(path, "Address")
    cols = [c for c in data[0] if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(_num(d["Warp Stall Sampling (All Samples)"]) for d in data) or 1.0
    idle = sum(_num(d["Warp Stall Sampling (Not-issued Samples)"]) for d in data) or 1.0
    by: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for d in data:
        words = d["Source"].split()
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        by[op]["all"] += _num(d["Warp Stall Sampling (All Samples)"])
        by[op]["idle"] += _num(d["Warp Stall Sampling (Not-issued Samples)"])
        for c in cols:
            by[op][c[6:]] += _num(d[c])
    print(f"{'opcode':10} {'samples':>8} {'not issued':>10}  main reasons")
    for op, c in sorted(by.items(), key=lambda x: -x[1]["all"])[:12]:
        why = sorted(((k, v) for k, v in c.items() if k not in ("all", "idle")), key=lambda x: -x[1])[:3]
        print(f"{op:10} {c['all'] / total:8.1%} {c['idle'] / idle:10.1%}  " + ", ".join(f"{k} {int(v)}" for k, v in why))
    last = max((i for i, d in enumerate(data) if " FFMA " in f" {d['Source']} "), default=len(data))
    tail = sum(_num(d["Warp Stall Sampling (All Samples)"]) for d in data[last + 1:])
    print(f"after the last FFMA (epilogue): {tail / total:.1%} of the samples")


def main() -> None:
    cmd, *args = sys.argv[1:] or ["help"]
    if cmd == "metrics":
        print(metrics())
    elif cmd == "target":
        target(Path(args[0]), args[1].split(","))
    elif cmd == "stalls":
        stalls(Path(args[0]))
    elif cmd == "source":
        source(Path(args[0]))
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
