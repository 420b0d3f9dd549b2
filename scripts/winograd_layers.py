#!/usr/bin/env python3
"""Per convolution, on the GPU: the direct convolution (bundle A, --winograd off) against its
Winograd F(2x2, 3x3) form (bundle B, --winograd on: input transform, batched GEMM, output
transform), each dispatch timed on the device, grouped by the ONNX Conv node they compute.
What passes/winograd.py's ``auto`` rule (AUTO_MIN_MACS) is fitted to.

Usage (GPU machine): python scripts/winograd_layers.py DIR DEVICE [DEVICE ...]
DIR holds MODEL-bBATCH-A.hbx / -B.hbx pairs (scripts/winograd_bundles.sh). Prints one row per
rewritten convolution: its Winograd GEMM multiply-adds, A and B in microseconds (median of the
runs, the GPU kept busy by repeating the function in each submission) and B / A.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import numpy as np

import halbench
from halbench.runtime import Module


def _per_conv(m: Module, runs: int = 20) -> dict[str, tuple[float, int, int]]:
    """Conv node -> (microseconds, dispatches, GEMM multiply-adds of a batch_matmul among them)."""
    f = m.function(None)
    feeds = [np.random.default_rng(0).standard_normal(t.shape).astype(np.float32) for t in f.inputs]
    m.profile(None, feeds, runs=3, warmup=2)
    p = m.profile(None, feeds, runs=runs, warmup=1, repeat=4)
    out: dict[str, list] = {}
    for d, info in enumerate(p.dispatches):
        convs = [n for n in (info.nodes or ()) if "conv" in n.lower()]
        if not convs:
            continue
        us = statistics.median(row[d] for row in p.dispatch_ns) / 1e3
        e = out.setdefault(convs[0], [0.0, 0, 0])
        e[0] += us
        e[1] += 1
        if "batch_matmul" in info.name:
            e[2] += int(info.flops // 2)
    return {k: (v[0], v[1], v[2]) for k, v in out.items()}


def main() -> int:
    d = Path(sys.argv[1])
    uris = sys.argv[2:] or ["cuda://0"]
    pairs = sorted({re.sub(r"-[AB]\.hbx$", "", p.name) for p in d.glob("*-A.hbx")})
    for uri in uris:
        try:
            dev = halbench.create_device(uri)
        except Exception as e:  # noqa: BLE001 - a device that does not open is reported, the rest run
            print(f"{uri}: {type(e).__name__}: {e}")
            continue
        with dev:
            for stem in pairs:
                res = {}
                for tag in "AB":
                    m = Module.load(str(d / f"{stem}-{tag}.hbx"), dev)
                    try:
                        res[tag] = _per_conv(m)
                    except Exception as e:  # noqa: BLE001
                        print(f"{stem} {tag} {uri}: {type(e).__name__}: {e}")
                    finally:
                        m.close()
                if len(res) < 2:
                    continue
                print(f"\n{stem} {uri}: convolutions rewritten (B has more than one dispatch for them)")
                print("| conv | Winograd MACs | A us | B us (dispatches) | B / A |")
                print("|---|---|---|---|---|")
                tot_a = tot_b = 0.0
                for node, (b_us, nb, macs) in sorted(res["B"].items(), key=lambda kv: -kv[1][2]):
                    if nb < 2 or node not in res["A"]:
                        continue
                    a_us = res["A"][node][0]
                    tot_a, tot_b = tot_a + a_us, tot_b + b_us
                    print(f"| {node} | {macs / 1e6:.1f} M | {a_us:.1f} | {b_us:.1f} ({nb}) | {b_us / a_us:.2f} |")
                print(f"| all | | {tot_a:.1f} | {tot_b:.1f} | {tot_b / max(tot_a, 1e-9):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
