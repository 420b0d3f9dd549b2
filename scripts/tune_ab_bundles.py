"""A/B bundles of zoo models for scripts/ab_models.py: A compiled by the rules (tuning off), B with
a tuning cache (e.g. the one scripts/gpu_tune.sh wrote on the H100). Run where the compiler's
ONNX front end is; carry OUTDIR to the GPU machine.

Usage: python scripts/tune_ab_bundles.py TUNING_DIR OUTDIR [MODEL:BATCH ...]
       (default models resnet50:8 minilm-l6:8; targets cuda and vulkan h100, weights random)
Then on the GPU machine: python scripts/ab_models.py OUTDIR cuda://0 vulkan://0
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnx

from halbench.bench import zoo
from halbench.compiler.compile import CompileOptions, compile_model


def main() -> None:
    tuning, out, *specs = sys.argv[1:]
    Path(out).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs or ["resnet50:8", "minilm-l6:8"]:
            name, _, batch = spec.partition(":")
            kw = {"batch": int(batch or 1), **({"seq": 128} if name.startswith("minilm") else {})}
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name, **kw), path)
            for tag, cache in (("A", "off"), ("B", tuning)):
                opts = CompileOptions(target_devices=("cuda", "vulkan"), weights="random",
                                      targets={"cuda": "h100", "vulkan": "h100"}, tuning_cache=cache)
                cm = compile_model(path, opts)
                dest = Path(out) / f"{name}-b{kw['batch']}-{tag}.hbx"
                cm.write(dest)
                used = [v.gemm["source"] for e in cm.manifest.executables for v in e.variants if v.gemm]
                print(f"{dest}: {used.count('tuned')} of {len(used)} GEMM variants tuned", flush=True)


if __name__ == "__main__":
    main()
