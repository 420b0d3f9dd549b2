"""Fused softmax / layer-norm row kernels on a GPU machine: each model of tests/compiler/test_rows.py
(a BERT-like layer, a non-last-axis softmax, a layer norm whose mean is used elsewhere, a
5000-wide softmax that loops) and MiniLM-L6 b1, compiled for cuda and vulkan with the given
target (subgroup / warp-shuffle reductions), run on each device and compared with onnxruntime.
Prints one table row per model and device: max relative error (must be <= 1e-4), dispatch count,
and the median device time of the row dispatches.

Usage: python scripts/gpu_rows_check.py [TARGET] [DEVICE ...]   (default: h100 cuda://0 vulkan://0)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

import halbench
from halbench.compiler import CompileOptions, compile_model
from halbench.runtime import Module


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from halbench.bench import zoo
    from tests.compiler.helpers import onnx_reference
    from tests.compiler.test_rows import MODELS, _feeds

    target = sys.argv[1] if len(sys.argv) > 1 else "h100"
    devices = sys.argv[2:] or ["cuda://0", "vulkan://0"]
    tmp = Path(tempfile.mkdtemp())
    cases = {}
    for name, build in MODELS.items():
        m = build()
        onnx.save(m, tmp / f"{name}.onnx")
        cases[name] = (tmp / f"{name}.onnx", _feeds(m))
    zoo.save("minilm-l6", str(tmp / "minilm.onnx"), seq=128)
    cases["minilm-l6 b1"] = (tmp / "minilm.onnx", zoo.make_inputs("minilm-l6", seq=128))
    print("| model | device | dispatches | row dispatches | max rel. error | row dispatch ms (median, sum) |")
    print("|---|---|---|---|---|---|")
    for name, (path, feeds) in cases.items():
        ref = onnx_reference(path, feeds)
        apis = tuple(dict.fromkeys(u.split(":")[0] for u in devices))
        cm = compile_model(path, CompileOptions(target_devices=apis, targets={a: target for a in apis}))
        bundle = tmp / f"{path.stem}.hbx"
        cm.write(bundle)
        rows = [i for i, d in enumerate(cm.graph.ops) if d.attrs["kind"] == "row"]
        for uri in devices:
            try:
                with halbench.create_device(uri) as dev:
                    mod = Module.load(str(bundle), dev)
                    try:
                        inputs = [feeds[s.name] for s in mod.function(None).inputs]
                        out = mod.invoke(None, inputs)
                        err = max(float(np.max(np.abs(o - r)) / (np.max(np.abs(r)) + 1e-30)) for o, r in zip(out, ref))
                        prof = mod.profile(None, inputs, runs=20, warmup=3)
                        per = np.median(np.array(prof.dispatch_ns), axis=0) / 1e6
                        row_ms = float(sum(per[i] for i in rows)) if rows else 0.0
                    finally:
                        mod.close()
                flag = "" if err <= 1e-4 else "  FAIL"
                print(f"| {name} | {uri} | {len(cm.graph.ops)} | {len(rows)} | {err:.1e}{flag} | {row_ms:.4f} |", flush=True)
            except Exception as e:  # noqa: BLE001 -- one failing device must not lose the others
                print(f"| {name} | {uri} | {len(cm.graph.ops)} | {len(rows)} | {type(e).__name__}: {str(e)[:160]} | |",
                      flush=True)


if __name__ == "__main__":
    main()
