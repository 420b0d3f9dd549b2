"""Write the GEMM problem files of zoo models (run where the compiler's ONNX front end is), for
`halbench tune` on a machine without it (scripts/gpu_tune.sh reads scripts/tune_problems/).

Usage: python scripts/tune_problems.py [MODEL:BATCH ...]   (default: resnet50:8 minilm-l6:8)
The problems do not depend on the target (the pass pipeline is the same for every API).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import onnx

from halbench.bench import zoo
from halbench.tune import load_problems, write_problems

OUT = Path(__file__).resolve().parent / "tune_problems"


def main() -> None:
    specs = sys.argv[1:] or ["resnet50:8", "minilm-l6:8"]
    with tempfile.TemporaryDirectory() as tmp:
        for spec in specs:
            name, _, batch = spec.partition(":")
            kw = {"batch": int(batch or 1), **({"seq": 128} if name.startswith("minilm") else {})}
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(zoo.build(name, **kw), path)
            problems = load_problems(path, "vulkan")
            out = OUT / f"{name}-b{kw['batch']}.json"
            write_problems(out, problems)
            print(f"{spec}: {len(problems)} GEMM problems -> {out}")


if __name__ == "__main__":
    main()
