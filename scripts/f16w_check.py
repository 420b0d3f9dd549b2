"""Whether the compile-time weight conversion (passes/convert_weights.py) leaves results
bit-identical on the GPU: each MODEL-bBATCH-A.hbx / -B.hbx pair of DIR (scripts/f16w_bundles.sh:
A with the conversion off, B on) is run on each DEVICE with the zoo's inputs, and the outputs are
compared bit for bit; also the weight bytes each bundle uploads.

Usage: python scripts/f16w_check.py DIR DEVICE [DEVICE ...]   (e.g. /work/f16w-ab/f16 cuda://0)
Prints one table; exit 1 when a pair differs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.bundle import read_bundle
from halbench.runtime import Module


def main() -> int:
    root, *devices = sys.argv[1:]
    pairs = sorted({m.groups() for p in Path(root).glob("*-A.hbx")
                    if (m := re.fullmatch(r"(.+)-b(\d+)-A\.hbx", p.name))})
    bad = 0
    print("| model | device | A weight MB | B weight MB | outputs bit-identical | max abs diff |")
    print("|---|---|---|---|---|---|")
    for model, batch in pairs:
        paths = [Path(root) / f"{model}-b{batch}-{t}.hbx" for t in "AB"]
        mb = [sum(w.nbytes for w in read_bundle(p).manifest.weights) / 1e6 for p in paths]
        kw = {"batch": int(batch), **({"seq": 128} if model.startswith("minilm") else {})}
        feeds = zoo.make_inputs(model, **kw)
        for uri in devices:
            try:
                with halbench.create_device(uri) as dev:
                    outs = []
                    for p in paths:
                        with Module.load(p, dev) as mod:
                            inputs = [feeds[s.name] for s in mod.function(None).inputs]
                            outs.append(mod.invoke(None, inputs))
            except Exception as e:  # noqa: BLE001 -- one failing device must not lose the others
                bad += 1
                print(f"| {model} b{batch} | {uri} | {mb[0]:.1f} | {mb[1]:.1f} | {type(e).__name__}: {str(e)[:160]} | |")
                continue
            same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(*outs))
            diff = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(*outs))
            bad += not same
            print(f"| {model} b{batch} | {uri} | {mb[0]:.1f} | {mb[1]:.1f} | {'yes' if same else 'NO'} | {diff:.3g} |",
                  flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
