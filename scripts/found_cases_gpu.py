"""The op fuzzer's fixed cases (tests/compiler/test_op_fuzz.py FOUND) on a GPU machine, which has no
MLIR front end: compile them here, run them there against onnxruntime's answers.

Usage (here):     PYTHONPATH=$PWD python scripts/found_cases_gpu.py compile DIR [--target h100]
      (GPU):      python scripts/found_cases_gpu.py run DIR cuda://0 vulkan://0
DIR holds NAME.hbx (cuda sm_90 cubin + Vulkan, and local) and NAME.npz (the inputs and onnxruntime's
output); ``run`` prints one row per case and device, and exits 1 when any case differs.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np


def compile_all(out: Path) -> None:
    import onnx

    from halbench.compiler import CompileOptions, compile_model
    from tests.compiler.helpers import onnx_reference
    from tests.compiler.test_op_fuzz import FOUND

    out.mkdir(parents=True, exist_ok=True)
    for name, case in sorted(FOUND.items()):
        rng = np.random.default_rng(0)
        dt = np.float16 if case.in_type == onnx.TensorProto.FLOAT16 else np.float32
        feeds = {n: rng.standard_normal(s).astype(dt) for n, s in case.inputs.items()}
        with tempfile.TemporaryDirectory() as td:
            path = Path(td) / "m.onnx"
            onnx.save(case.model(), path)
            ref = onnx_reference(path, feeds)[0]
            opts = CompileOptions(target_devices=("cuda", "vulkan", "local"), targets={"cuda": "h100", "vulkan": "h100"},
                                  backend_options={"cuda-formats": "cubin"})
            compile_model(path, opts).write(out / f"{name}.hbx")
        np.savez(out / f"{name}.npz", ref=ref, atol=case.atol, rtol=case.rtol,
                 **{f"in_{k}": v for k, v in feeds.items()})
        print(f"{name}: compiled", flush=True)


def run_all(src: Path, uris: list[str]) -> int:
    import halbench
    from halbench.runtime import Module

    bad = 0
    print(f"| case | {' | '.join(uris)} |")
    print("|---|" + "---|" * len(uris))
    for bundle in sorted(src.glob("*.hbx")):
        data = np.load(bundle.with_suffix(".npz"))
        ref, atol, rtol = data["ref"].astype(np.float64), float(data["atol"]), float(data["rtol"])
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in_")}
        cells = []
        for uri in uris:
            with halbench.create_device(uri) as dev:
                mod = Module.load(bundle, dev)
                try:
                    out = mod.invoke(None, [feeds[s.name] for s in mod.function(None).inputs])[0]
                finally:
                    mod.close()
            scale = max(1.0, float(np.max(np.abs(ref))))
            ok = out.shape == ref.shape and not (np.abs(out.astype(np.float64) - ref)
                                                 > atol * scale + rtol * np.abs(ref)).any()
            err = float(np.max(np.abs(out.astype(np.float64) - ref))) if out.shape == ref.shape else float("nan")
            cells.append(f"{'ok' if ok else 'WRONG'} ({err:.1e})")
            bad += not ok
        print(f"| {bundle.stem} | {' | '.join(cells)} |", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    mode, d, *rest = sys.argv[1:]
    if mode == "compile":
        compile_all(Path(d))
    else:
        sys.exit(run_all(Path(d), rest or ["cuda://0", "vulkan://0"]))
