"""Run multi-target bundles (vulkan + cuda + local in one .hbx) on every device that loads
them, check each against local-sync, and print a latency table. The GPU machine has no
compiler: build the bundles here first with ``--build DIR`` and carry DIR.

Usage: python scripts/one_bundle_check.py --build DIR    (here: compile)
       python scripts/one_bundle_check.py DIR            (there: run)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

MODELS = [("mobilenetv2", {"batch": 1}), ("resnet50", {"batch": 1}), ("minilm-l6", {"batch": 1, "seq": 128})]


def build(out: Path) -> None:
    from halbench.bench import zoo
    from halbench.compiler.compile import CompileOptions, compile_model

    out.mkdir(parents=True, exist_ok=True)
    for name, kw in MODELS:
        onnx_path = Path("/tmp") / f"{name}.onnx"
        zoo.save(name, onnx_path, **kw)
        opts = CompileOptions(target_devices=("vulkan", "cuda", "local"), weights="random",
                              targets={"vulkan": "h100", "cuda": "h100"})
        compile_model(onnx_path, opts).write(out / f"{name}.hbx")
        np.savez(out / f"{name}.inputs.npz", **zoo.make_inputs(name, **kw))
        print(name, (out / f"{name}.hbx").stat().st_size // 1024, "KiB", flush=True)


def run(src: Path) -> None:
    import halbench
    from halbench.runtime import Module

    print(f"{'model':12} {'device':14} {'formats':38} {'rel err':>9} {'median ms':>10} {'p10':>8} {'p90':>8}")
    for name, _ in MODELS:
        inputs = dict(np.load(src / f"{name}.inputs.npz"))
        ref = None
        for uri in ("local-sync://", "vulkan://", "cuda://"):
            try:
                dev = halbench.create_device(uri)
            except halbench.HalbenchError as e:
                print(f"{name:12} {uri:14} unavailable: {e}")
                continue
            with dev, Module.load(src / f"{name}.hbx", dev) as m:
                out = m.invoke(None, inputs)
                if ref is None:
                    ref = out
                err = max(float(np.linalg.norm(o.astype(np.float64) - r) / (np.linalg.norm(r) or 1))
                          for o, r in zip(out, ref))
                fmts = sorted({m.variant(e.id).format for e in m.bundle.manifest.executables})
                runs = 5 if uri.startswith("local") else 50
                p = m.profile(None, inputs, runs=runs, warmup=3)
                ms = np.asarray(p.total_ns) / 1e6
                print(f"{name:12} {uri:14} {','.join(fmts):38} {err:9.2e} {np.median(ms):10.3f} "
                      f"{np.percentile(ms, 10):8.3f} {np.percentile(ms, 90):8.3f}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--build":
        build(Path(sys.argv[2]))
    else:
        run(Path(sys.argv[1]))
