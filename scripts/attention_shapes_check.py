"""The fused attention kernel on ragged shapes, on a GPU machine that has no ONNX front end.

    python scripts/attention_shapes_check.py build DIR [TARGET]   (here: compile, onnxruntime)
    python scripts/attention_shapes_check.py run DIR [DEVICE ...]  (there: run, compare)

``build`` compiles the handmade attention graphs of tests/compiler/test_attention.py (SHAPES and
ODD_SHAPES: odd sequence lengths, head dims that are not multiples of 4, masks, one head) for
cuda and vulkan with TARGET (default h100) and stores each bundle with its inputs and
onnxruntime's outputs (.npz). ``run`` runs every bundle on each device (default cuda://0
vulkan://0) and prints one row per shape and device: the relative error (must be <= 1e-4).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def build(out: Path, target: str) -> None:
    import onnx

    from halbench.compiler import CompileOptions, compile_model
    from tests.compiler.helpers import onnx_reference
    from tests.compiler.test_attention import ODD_SHAPES, SHAPES, _feeds, attention_model

    out.mkdir(parents=True, exist_ok=True)
    for shape in SHAPES + ODD_SHAPES:
        name = "x".join(map(str, shape))
        model = attention_model(*shape)
        onnx.save(model, out / f"{name}.onnx")
        cm = compile_model(out / f"{name}.onnx", CompileOptions(target_devices=("cuda", "vulkan"),
                                                                targets={"cuda": target, "vulkan": target}))
        assert [d.attrs["name"] for d in cm.graph.ops] == ["attention:flash"], name
        cm.write(out / f"{name}.hbx")
        feeds = _feeds(model)
        ref = onnx_reference(out / f"{name}.onnx", feeds)
        np.savez(out / f"{name}.npz", **{f"in_{k}": v for k, v in feeds.items()}, ref=ref[0])
        print("built", name, flush=True)


def run(root: Path, devices: list[str]) -> None:
    import halbench
    from halbench.runtime import Module

    bad = 0
    print("| shape (b, h, m, n, dk, dv) | device | relative error |")
    print("|---|---|---|")
    for p in sorted(root.glob("*.hbx")):
        data = np.load(p.with_suffix(".npz"))
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in_")}
        ref = data["ref"]
        for uri in devices:
            try:
                with halbench.create_device(uri) as dev:
                    mod = Module.load(p, dev)
                    try:
                        (o,) = mod.invoke(None, feeds)
                    finally:
                        mod.close()
                err = float(np.linalg.norm(o - ref) / np.linalg.norm(ref))
                ok = err <= 1e-4 and bool(np.isfinite(o).all())
            except Exception as e:  # noqa: BLE001 -- one failing shape must not lose the others
                err, ok = float("nan"), False
                print(f"{p.stem} {uri}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            bad += not ok
            print(f"| {p.stem} | {uri} | {err:.1e}{'' if ok else '  FAIL'} |", flush=True)
    print(f"{bad} failed")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    cmd, root, *rest = sys.argv[1:]
    if cmd == "build":
        build(Path(root), rest[0] if rest else "h100")
    else:
        run(Path(root), rest or ["cuda://0", "vulkan://0"])
