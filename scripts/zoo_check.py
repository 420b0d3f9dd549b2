"""Compile zoo models for (vulkan, local) and compare each device's outputs with onnxruntime.

    PYTHONPATH=$PWD python scripts/zoo_check.py [--devices local-sync://,vulkan://] [--weights file|random] NAME...

Prints one line per model and device: compile time, run time, max relative error (norm of the
difference over the norm of the reference, per output). With ``--weights random`` the compared
reference is onnxruntime on the model randomized the same way (what the bundle computes).
On the H100: --devices local-sync://,vulkan://,cuda:// --targets vulkan,cuda,local.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

from halbench.bench import zoo
from halbench.compiler import CompileOptions, compile_model
from halbench.drivers import create_device
from halbench.runtime.module import Module


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    d = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (d if d else 1.0))


def reference(model: onnx.ModelProto, feeds: dict, weights: str) -> list[np.ndarray]:
    if weights == "random":
        from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

        randomize_onnx(model, RANDOM_SEED)
    from halbench.bench.reference import onnxruntime_session

    sess = onnxruntime_session(model)
    return sess.run(None, feeds)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+")
    ap.add_argument("--devices", default="local-sync://,vulkan://")
    ap.add_argument("--targets", default="vulkan,local")
    ap.add_argument("--weights", default="file")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--abi", default="", help="Vulkan dispatch ABI: bda or descriptors (default: both)")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds one run may take (VGG-19 at 224x224 on lavapipe needs minutes)")
    ap.add_argument("--resolution", type=int, default=0, help="input size of an image model (0: its own)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="zoo_check_"))
    failed = 0
    for name in args.names:
        path = tmp / f"{name}.onnx"
        opts = {"resolution": args.resolution} if args.resolution else {}
        zoo.save(name, path, batch=args.batch, **opts)
        feeds = zoo.make_inputs(name, batch=args.batch, **opts)
        ref = reference(onnx.load(str(path)), feeds, args.weights)
        t = time.perf_counter()
        try:
            backend = {"vulkan-dispatch-abi": args.abi} if args.abi else {}
            cm = compile_model(path, CompileOptions(target_devices=tuple(args.targets.split(",")),
                                                    weights=args.weights, backend_options=backend))
        except Exception as e:  # noqa: BLE001 - report and go on with the next model
            print(f"{name:20s} COMPILE FAILED: {str(e).splitlines()[0][:200]}", flush=True)
            failed += 1
            continue
        ct = time.perf_counter() - t
        bundle = tmp / f"{name}.hbx"
        cm.write(bundle)
        for uri in args.devices.split(","):
            t = time.perf_counter()
            try:
                with create_device(uri) as dev:
                    m = Module.load(str(bundle), dev)
                    try:
                        out = m.invoke(None, feeds, timeout_s=args.timeout)
                    finally:
                        m.close()
            except Exception as e:  # noqa: BLE001
                print(f"{name:20s} {uri:16s} RUN FAILED: {str(e).splitlines()[0][:200]}", flush=True)
                failed += 1
                continue
            rt = time.perf_counter() - t
            err = max(rel_err(o, r) for o, r in zip(out, ref, strict=True))
            # A reference that is ~0 or uniform (random weights can shrink a deep net to that)
            # makes any error look small: say so.
            spread = min(float(np.std(r)) for r in ref)
            ok = err <= 1e-4 and all(o.shape == r.shape for o, r in zip(out, ref, strict=True))
            failed += not ok
            print(f"{name:20s} {uri:16s} compile {ct:6.1f}s  load+run {rt:6.1f}s  max rel err {err:.2e}"
                  f"  ref std {spread:.2e}  {'ok' if ok else 'MISMATCH'}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
