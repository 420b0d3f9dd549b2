"""Per-dispatch device times of A/B bundles (MODEL-bB-TAG.hbx in DIR, as scripts/ab_models.py
takes them), side by side by dispatch index (the bundles must come from the same graph).

Usage: python scripts/ab_dispatches.py DIR [cuda://0]  (prints dispatches where the tags differ
by more than 2 us, and the sums)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.runtime import Module


def main() -> None:
    root = Path(sys.argv[1])
    uri = sys.argv[2] if len(sys.argv) > 2 else "cuda://0"
    found: dict[tuple[str, str], list[str]] = {}
    for p in root.glob("*.hbx"):
        if m := re.fullmatch(r"(.+)-b(\d+)-([A-Za-z0-9]+)\.hbx", p.name):
            found.setdefault((m.group(1), m.group(2)), []).append(m.group(3))
    with halbench.create_device(uri) as dev:
        for (model, batch), tags in sorted(found.items()):
            tags = sorted(tags)
            kw = {"batch": int(batch), **({"seq": 128} if model.startswith("minilm") else {})}
            feeds = zoo.make_inputs(model, **kw)
            per = {}
            for t in tags:
                mod = Module.load(root / f"{model}-b{batch}-{t}.hbx", dev)
                try:
                    inputs = [feeds[s.name] for s in mod.function(None).inputs]
                    pb = mod.profile(None, inputs, runs=30, warmup=5)
                    per[t] = np.median(np.array(pb.dispatch_ns), axis=0) / 1e3
                finally:
                    mod.close()
            print(f"{model} b{batch}: us per dispatch (" + " / ".join(tags) + ")")
            for i in range(len(per[tags[0]])):
                row = [per[t][i] for t in tags]
                if max(row) - min(row) > 2.0:
                    print(f"  {i:3d} " + " ".join(f"{x:7.1f}" for x in row))
            print("  sum " + " ".join(f"{per[t].sum():7.1f}" for t in tags))


if __name__ == "__main__":
    main()
