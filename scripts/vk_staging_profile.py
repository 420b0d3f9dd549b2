"""Per-dispatch device times and register counts of one model's bundles on a Vulkan device, tag
by tag (scripts/vk_staging_ab.py's MODEL-bB-TAG.hbx; A is the baseline): which kernels a codegen
change made faster or slower, and what the driver says each one uses.

Usage: python scripts/vk_staging_profile.py DIR MODEL-bB [DEVICE]   (the JSON goes to $OUT, else .)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    root, stem = Path(sys.argv[1]), sys.argv[2]
    uri = sys.argv[3] if len(sys.argv) > 3 else "vulkan://0"
    os.environ.setdefault("HALBENCH_VULKAN_PIPELINE_STATISTICS", "1")
    import halbench
    from halbench.bench import zoo
    from halbench.runtime import Module

    tags = sorted(p.name[len(stem) + 1:-4] for p in root.glob(f"{stem}-*.hbx"))
    model, batch = stem.rsplit("-b", 1)
    feeds = zoo.make_inputs(model, batch=int(batch))
    with halbench.create_device(uri) as dev:
        mods = [Module.load(root / f"{stem}-{t}.hbx", dev) for t in tags]
        inputs = [feeds[s.name] for s in mods[0].function(None).inputs]
        regs = []
        for mod in mods:
            r = {}
            for eid, (exe, _) in mod._executables.items():
                res = exe.resources(next(iter(exe.entries)))
                r[eid] = (res.get("register_count"), res.get("shared_memory_size"))
            regs.append(r)
        for mod in mods:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.5:
                mod.profile(None, inputs, runs=10, warmup=0, dispatch_times=False)
        whole: list[list[float]] = [[] for _ in mods]
        per: list[list] = [[] for _ in mods]
        for _ in range(4):
            for mod, w, p in zip(mods, whole, per):
                w += list(mod.profile(None, inputs, runs=25, warmup=3, dispatch_times=False).total_ns)
                pr = mod.profile(None, inputs, runs=10, warmup=2)
                p += [list(x) for x in pr.dispatch_ns]
        names = [(d.name, d.executable) for d in pr.dispatches]
        for mod in mods:
            mod.close()
    med = [float(np.median(w)) / 1e6 for w in whole]
    disp = [np.median(np.array(p, dtype=np.float64), axis=0) / 1e6 for p in per]
    print(f"{stem} {uri} whole ms: " + "  ".join(f"{t} {m:.3f}" for t, m in zip(tags, med)))
    print("   sum of dispatches:  " + "  ".join(f"{t} {d.sum():.3f}" for t, d in zip(tags, disp)))
    rows = []
    for i, (name, eid) in enumerate(names):
        rows.append({"i": i, "name": name, "ms": {t: float(d[i]) for t, d in zip(tags, disp)},
                     "regs": {t: r.get(eid, (None, None))[0] for t, r in zip(tags, regs)},
                     "smem": {t: r.get(eid, (None, None))[1] for t, r in zip(tags, regs)}})
    out = Path(os.environ.get("OUT", "."))
    (out / f"profile-{stem}.json").write_text(json.dumps({"tags": tags, "whole_ms": med, "rows": rows}, indent=1))
    big = sorted(rows, key=lambda r: -r["ms"][tags[0]])[:14]
    print("  i  " + " ".join(f"{t:>12}" for t in tags) + "   (ms/regs, the 14 longest under " + tags[0] + ")")
    for r in sorted(big, key=lambda r: r["i"]):
        print(f"{r['i']:3d}  " + " ".join(f"{r['ms'][t]:7.4f}/{r['regs'][t] or 0:<4}" for t in tags) + f"  {r['name']}")


if __name__ == "__main__":
    main()
