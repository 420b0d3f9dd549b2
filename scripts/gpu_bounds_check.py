#!/usr/bin/env python3
"""Out-of-range gathers and scatters on each device: one line per (device, case).

The hardening issue's cases: a one-node Gather of a 10x4 table at indices 99999999 / 10 / -11,
and a ScatterElements into a 10x4 tensor at row 12 (and -11). Each must be a one-line error
naming the dispatch and the index (the kernel clamps or skips the index and records it in its
status slot), and a good call right after must return the right values (the slot is cleared).

Usage:
    python scripts/gpu_bounds_check.py                      # every available device of the list
    python scripts/gpu_bounds_check.py vulkan:// cuda://    # these devices
    python scripts/gpu_bounds_check.py --build DIR          # here: compile the bundles (vulkan,
                                                            # cuda sm_90, local) into DIR
    python scripts/gpu_bounds_check.py --bundles DIR vulkan:// cuda://   # there: use them
The GPU machine has no MLIR compiler: build here, carry DIR, run there with --bundles.
Exit status 0 when every line says ok.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

DEFAULT_DEVICES = ("local-sync://", "vulkan://", "cuda://", "webgpu://")
TABLE = np.arange(40, dtype=np.float32).reshape(10, 4)


def _models(d: Path) -> tuple[Path, Path]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    vi = helper.make_tensor_value_info
    w = numpy_helper.from_array(TABLE, "w")
    g = helper.make_graph([helper.make_node("Gather", ["w", "idx"], ["y"], axis=0)], "gather",
                          [vi("idx", TensorProto.INT64, [2])], [vi("y", TensorProto.FLOAT, [2, 4])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "gather.onnx")
    g = helper.make_graph([helper.make_node("ScatterElements", ["x", "idx", "u"], ["y"], axis=0)], "scatter",
                          [vi("x", TensorProto.FLOAT, [10, 4]), vi("idx", TensorProto.INT64, [2, 4]),
                           vi("u", TensorProto.FLOAT, [2, 4])], [vi("y", TensorProto.FLOAT, [10, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "scatter.onnx")
    return d / "gather.onnx", d / "scatter.onnx"


def _scatter_want(idx: np.ndarray, u: np.ndarray) -> np.ndarray:
    want = TABLE.copy()
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            want[idx[i, j], j] = u[i, j]
    return want


def _cases() -> list[tuple[str, str, list[np.ndarray], str, list[np.ndarray], np.ndarray]]:
    """(bundle, case, bad inputs, expected text, good inputs, good output)."""
    u = -np.ones((2, 4), np.float32)
    good_rows = np.array([9, 3], np.int64)
    good_idx = np.array([[1, 1, 1, 1], [3, 0, 3, 0]], np.int64)
    out = []
    for bad, text in (([99999999, 0], "gathered at index 99999999"), ([10, 11], "gathered at index 1"),
                      ([-11, 2], "gathered at index -1")):
        out.append(("gather", f"gather {bad}", [np.array(bad, np.int64)], text, [good_rows], TABLE[good_rows]))
    for row, text in ((12, "scattered at index 12"), (-11, "scattered at index -1")):
        bad = np.array([[1, 1, 1, 1], [row, 0, 0, 0]], np.int64)
        out.append(("scatter", f"scatter row {row}", [TABLE, bad, u], text, [TABLE, good_idx, u],
                    _scatter_want(good_idx, u)))
    return out


def main(argv: list[str]) -> int:
    import halbench
    from halbench.compiler import CompileOptions, compile_model
    from halbench.drivers import query_available_drivers
    from halbench.errors import HalbenchError
    from halbench.runtime import Module

    if argv[:1] == ["--build"]:
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        for src in _models(Path(tempfile.mkdtemp(prefix="hb-bounds-"))):
            compile_model(src, CompileOptions(target_devices=("vulkan", "cuda", "local"),
                                               targets={"cuda": "sm_90"})).write(out / f"{src.stem}.hbx")
        print(f"bundles in {out}")
        return 0
    given = None
    if argv[:1] == ["--bundles"]:
        given, argv = Path(argv[1]), argv[2:]
    up = {s.name for s in query_available_drivers() if s.available}
    devices = argv or [d for d in DEFAULT_DEVICES if d.partition("://")[0] in up]
    apis = sorted({"local" if d.startswith("local") else d.partition("://")[0] for d in devices})
    bundles = {}
    if given is not None:
        bundles = {name: given / f"{name}.hbx" for name in ("gather", "scatter")}
    else:
        tmp = Path(tempfile.mkdtemp(prefix="hb-bounds-"))
        for src in _models(tmp):
            bundles[src.stem] = tmp / f"{src.stem}.hbx"
            compile_model(src, CompileOptions(target_devices=tuple(apis))).write(bundles[src.stem])
    failures = 0
    print(f"{'device':16} {'case':22} result")
    for dev_uri in devices:
        try:
            dev = halbench.create_device(dev_uri)
        except HalbenchError as e:
            print(f"{dev_uri:16} {'(open)':22} SKIP {e}")
            continue
        with dev:
            for bundle, case, bad, text, good, want in _cases():
                try:
                    with Module.load(bundles[bundle], dev) as m:
                        try:
                            m.invoke(None, bad)
                            line, ok = "FAIL no error (an out-of-range index went unnoticed)", False
                        except HalbenchError as e:
                            msg = str(e)
                            ok = text in msg and "\n" not in msg
                            line = ("ok   " if ok else "FAIL ") + msg[:110]
                        if ok:
                            (y,) = m.invoke(None, good)
                            if not np.array_equal(y, want):
                                line, ok = "FAIL the good call after the error returned wrong values", False
                except HalbenchError as e:
                    line, ok = f"FAIL {e}"[:120], False
                failures += not ok
                print(f"{dev_uri:16} {case:22} {line}", flush=True)
    print(f"{'all ok' if not failures else f'{failures} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
