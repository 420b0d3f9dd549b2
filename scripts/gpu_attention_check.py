"""Fused attention (one flash-attention dispatch per attention block) on a GPU machine, A/B
against the unfused chain compiled from the same code (CompileOptions(fuse_attention=False),
as HALBENCH_NO_FUSE_ATTENTION=1 does): the handmade attention graphs of
tests/compiler/test_attention.py (ragged shapes included) and MiniLM-L6 b1 / b8 at seq 128,
compiled for cuda and vulkan with the given target, run on each device and compared with
onnxruntime. One table row per model, device and variant: dispatches, max relative error
(must be <= 1e-4), the median device time of the attention dispatches and of the whole model
(sum of per-dispatch medians).

Usage: python scripts/gpu_attention_check.py [--quick] [TARGET] [DEVICE ...]
(default: h100 cuda://0 vulkan://0; --quick: the small handmade graphs only)

Whole-model A/B with PyTorch beside (scripts/ab_models.py): compile the same zoo model twice,
A with HALBENCH_NO_FUSE_ATTENTION=1, B without, e.g. for MiniLM-L6 b1 and b8:

    mkdir -p ab && for b in 1 8; do
      python -c "from halbench.bench import zoo; zoo.save('minilm-l6', 'ab/minilm-l6-b$b.onnx', batch=$b, seq=128)"
      HALBENCH_NO_FUSE_ATTENTION=1 python -m halbench compile ab/minilm-l6-b$b.onnx -o ab/minilm-l6-b$b-A.hbx \
          --target-device cuda,vulkan --cuda-target h100 --vulkan-target h100 --weights random
      python -m halbench compile ab/minilm-l6-b$b.onnx -o ab/minilm-l6-b$b-B.hbx \
          --target-device cuda,vulkan --cuda-target h100 --vulkan-target h100 --weights random
    done
    python scripts/ab_models.py ab cuda://0 vulkan://0
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
    from tests.compiler.test_attention import SHAPES, _feeds, attention_model

    args = sys.argv[1:]
    quick = "--quick" in args
    args = [a for a in args if a != "--quick"]
    target = args[0] if args else "h100"
    devices = args[1:] or ["cuda://0", "vulkan://0"]
    tmp = Path(tempfile.mkdtemp())
    cases = {}
    for shape in SHAPES + ([] if quick else [(8, 12, 128, 128, 32, 32)]):
        name = "attention " + "x".join(map(str, shape))
        m = attention_model(*shape)
        path = tmp / f"{name.replace(' ', '_')}.onnx"
        onnx.save(m, path)
        cases[name] = (path, _feeds(m))
    for batch in () if quick else (1, 8):
        path = tmp / f"minilm_b{batch}.onnx"
        zoo.save("minilm-l6", str(path), batch=batch, seq=128)
        cases[f"minilm-l6 b{batch}"] = (path, zoo.make_inputs("minilm-l6", batch=batch, seq=128))
    apis = tuple(dict.fromkeys(u.split(":")[0] for u in devices))
    print("| model | device | fused | dispatches | attention dispatches | max rel. error "
          "| attention ms (sum of medians) | model ms (sum of medians) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (path, feeds) in cases.items():
        ref = onnx_reference(path, feeds)
        for fused in (False, True):
            cm = compile_model(path, CompileOptions(target_devices=apis, targets={a: target for a in apis},
                                                    fuse_attention=fused))
            bundle = tmp / f"{path.stem}-{'B' if fused else 'A'}.hbx"
            cm.write(bundle)
            att = [i for i, d in enumerate(cm.graph.ops) if d.attrs["kind"] == "attention"]
            for uri in devices:
                head = f"| {name} | {uri} | {'yes' if fused else 'no'} | {len(cm.graph.ops)} | {len(att)}"
                try:
                    with halbench.create_device(uri) as dev:
                        mod = Module.load(str(bundle), dev)
                        try:
                            inputs = [feeds[s.name] for s in mod.function(None).inputs]
                            out = mod.invoke(None, inputs)
                            err = max(float(np.max(np.abs(o - r)) / (np.max(np.abs(r)) + 1e-30))
                                      for o, r in zip(out, ref))
                            prof = mod.profile(None, inputs, runs=20, warmup=3)
                            per = np.median(np.array(prof.dispatch_ns), axis=0) / 1e6
                        finally:
                            mod.close()
                    flag = "" if err <= 1e-4 else "  FAIL"
                    att_ms = float(sum(per[i] for i in att)) if att else 0.0
                    print(f"{head} | {err:.1e}{flag} | {att_ms:.4f} | {float(per.sum()):.4f} |", flush=True)
                except Exception as e:  # noqa: BLE001 -- one failing device must not lose the others
                    print(f"{head} | {type(e).__name__}: {str(e)[:160]} | | |", flush=True)


if __name__ == "__main__":
    main()
