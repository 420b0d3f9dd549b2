"""A/B device time of two bundles of the same model, interleaved on the same device in one
process (the hardening check: a model with and without bounds-checked gathers).

Usage: python scripts/ab_bundles.py A.hbx B.hbx ZOO_MODEL BATCH DEVICE [DEVICE ...]
Prints, per device, the median device time of A and B over 8 alternating blocks of 25 runs.
"""

from __future__ import annotations

import sys

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.runtime import Module


def main() -> None:
    a_path, b_path, model, batch, *devices = sys.argv[1:]
    feeds = zoo.make_inputs(model, batch=int(batch), seq=128)
    for uri in devices:
        with halbench.create_device(uri) as dev, Module.load(a_path, dev) as a, Module.load(b_path, dev) as b:
            inputs = [feeds[s.name] for s in a.function(None).inputs]
            ta, tb = [], []
            for _ in range(8):
                ta += list(a.profile(None, inputs, runs=25, warmup=3).total_ns)
                tb += list(b.profile(None, inputs, runs=25, warmup=3).total_ns)
            ma, mb = np.median(ta) / 1e6, np.median(tb) / 1e6
            print(f"{model} b{batch} {uri:10} A {ma:.3f} ms  B {mb:.3f} ms  B/A {mb / ma:.4f}", flush=True)


if __name__ == "__main__":
    main()
