"""A/B of a runtime switch (an environment variable a driver reads when it opens a device or
records a command buffer) on the same bundles: each zoo model bundle is loaded on two devices
opened on the same GPU, one under each value, and the two are timed interleaved (whole, device
timestamps), each checked against onnxruntime, with PyTorch's CUDA graph beside them.

Usage: python scripts/ab_env.py DIR DEVICE VAR A_VALUE B_VALUE
DIR holds MODEL-bBATCH.hbx files (halbench compile --weights random); e.g.
  python scripts/ab_env.py bundles cuda://0 HALBENCH_CUDA_GRAPHS 0 1   (stream launches vs graphs)
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.runtime import Module

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_models import _max_rel_err, _reference, _torch_ms


def main() -> None:
    root, uri, var, a, b = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for path in sorted(root.glob("*.hbx")):
        m = re.fullmatch(r"(.+)-b(\d+)\.hbx", path.name)
        if not m:
            continue
        model, batch = m.group(1), int(m.group(2))
        kw = {"batch": batch, **({"seq": 128} if model.startswith("minilm") else {})}
        from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

        onnx_model = zoo.build(model, **kw)
        randomize_onnx(onnx_model, RANDOM_SEED)
        import onnx

        onnx_path = tmp / f"{model}-b{batch}.onnx"
        onnx.save(onnx_model, onnx_path)
        feeds = zoo.make_inputs(model, **kw)
        ref = _reference(onnx_path, feeds)
        torch_ms = _torch_ms(onnx_path, list(feeds.values()), "cudagraph")
        devs, mods, errs = [], [], []
        try:
            for value in (a, b):  # each device and module records its command buffers under its value
                os.environ[var] = value
                devs.append(halbench.create_device(uri))
                mod = Module.load(path, devs[-1])
                mods.append(mod)
                inputs = [feeds[s.name] for s in mod.function(None).inputs]
                out = mod.invoke(None, inputs)
                mod.profile(None, inputs, runs=2, warmup=1, dispatch_times=False)
                errs.append(_max_rel_err(out, ref))
            for mod in mods:  # clocks up
                t0 = time.monotonic()
                while time.monotonic() - t0 < 0.5:
                    mod.profile(None, inputs, runs=10, warmup=0, dispatch_times=False)
            times: list[list[float]] = [[], []]
            for _ in range(8):
                for mod, ts in zip(mods, times):
                    ts += list(mod.profile(None, inputs, runs=25, warmup=3, dispatch_times=False).total_ns)
        finally:
            for mod in mods:
                mod.close()
            for dev in devs:
                dev.close()
        med = [float(np.median(ts)) / 1e6 for ts in times]
        rows.append((model, batch, med, errs, torch_ms))
        print(f"{model} b{batch} {uri}: {var}={a} {med[0]:.3f} ms, {var}={b} {med[1]:.3f} ms", flush=True)
    print(f"\n| model | device | {var}={a} ms | {var}={b} ms | B/A | rel. err vs ORT (A, B) | torch cudagraph ms |")
    print("|---|---|---|---|---|---|---|")
    for model, batch, med, errs, tc in rows:
        tcs = f"{tc:.3f}" if tc else "-"
        print(f"| {model} b{batch} | {uri} | {med[0]:.3f} | {med[1]:.3f} | {med[1] / med[0]:.3f} | "
              f"{errs[0]:.1e}, {errs[1]:.1e} | {tcs} |")


if __name__ == "__main__":
    main()
