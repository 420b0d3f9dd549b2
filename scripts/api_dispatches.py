"""Per-dispatch device times of one bundle on several devices (one graph, so dispatch i is the
same op everywhere): where one API's kernels, not its barriers, lose the time.

Usage: python scripts/api_dispatches.py MODEL-bB-TAG.hbx [cuda://0 vulkan://0] [--top N]
(zoo inputs rebuilt from the file name as scripts/ab_models.py does; prints the N dispatches with
the largest difference from the first device, the sums per op kind, and the totals)
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.runtime import Module


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path, help="MODEL-bBATCH-TAG.hbx")
    ap.add_argument("devices", nargs="*", default=["cuda://0", "vulkan://0"])
    ap.add_argument("--top", type=int, default=25, help="dispatches listed (largest difference first)")
    a = ap.parse_args()
    path, uris, top = a.bundle, a.devices, a.top
    m = re.fullmatch(r"(.+)-b(\d+)-([A-Za-z0-9]+)\.hbx", path.name)
    if not m:
        sys.exit(f"{path.name}: name it MODEL-bBATCH-TAG.hbx")
    model, batch = m.group(1), int(m.group(2))
    feeds = zoo.make_inputs(model, batch=batch, **({"seq": 128} if model.startswith("minilm") else {}))
    per: dict[str, np.ndarray] = {}
    names: list[str] = []
    for uri in uris:
        with halbench.create_device(uri) as dev:
            mod = Module.load(path, dev)
            try:
                f = mod.function(None)
                inputs = [feeds[s.name] for s in f.inputs]
                # clocks up first (as ab_models.py): on a GPU machine just started, a few warm-up
                # runs left every Vulkan dispatch of ResNet-50 about 3x slow
                t0 = time.monotonic()
                while time.monotonic() - t0 < 1.0:
                    mod.profile(None, inputs, runs=10, warmup=0, dispatch_times=False)
                pb = mod.profile(None, inputs, runs=30, warmup=5)
                per[uri] = np.median(np.array(pb.dispatch_ns), axis=0) / 1e3
                names = [d.name for d in pb.dispatches]
            finally:
                mod.close()
    base = uris[0]
    n = len(per[base])
    names = (names + ["?"] * n)[:n]
    print(f"{path.name}: {n} dispatches, us each (" + " | ".join(uris) + ")")
    order = sorted(range(n), key=lambda i: -(max(per[u][i] for u in uris[1:]) - per[base][i]) if len(uris) > 1 else 0)
    for i in order[:top]:
        print(f"  {i:3d} {str(names[i])[:40]:40s} " + " ".join(f"{per[u][i]:8.1f}" for u in uris))
    kinds: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(uris))
    for i in range(n):
        k = str(names[i])
        for j, u in enumerate(uris):
            kinds[k][j] += per[u][i]
    print("by kind:")
    for k, v in sorted(kinds.items(), key=lambda kv: -kv[1][-1]):
        print(f"  {k[:40]:40s} " + " ".join(f"{x:8.1f}" for x in v))
    print("  sum" + " " * 38 + " ".join(f"{per[u].sum():8.1f}" for u in uris))


if __name__ == "__main__":
    main()
