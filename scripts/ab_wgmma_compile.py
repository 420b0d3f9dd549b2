"""Compile A/B bundles for scripts/ab_models.py (CUDA only, --weights random): MODEL-bB-TAG.hbx
in DIR/PRECISION/. ``--sm90a`` compiles for the h100 product with its arch-specific sm_90a code
instead of its sm_90 default, and ``--wgmma`` switches on the warpgroup-MMA GEMM (gemm_wgmma.j2,
tuning.WGMMA_CONVS; needs --sm90a); run it once with the baseline's halbench on PYTHONPATH (TAG A)
and once with the change's (TAG B, --sm90a --wgmma).

Usage: python scripts/ab_wgmma_compile.py DIR TAG [--sm90a [--wgmma]] --models resnet50 minilm-l6
       --batches 8 1 --precisions tf32 f16
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("tag")
    ap.add_argument("--sm90a", action="store_true")
    ap.add_argument("--wgmma", action="store_true", help="switch on the wgmma GEMM (tuning.WGMMA_CONVS)")
    ap.add_argument("--set", nargs="*", default=[], metavar="NAME=INT",
                    help="tuning.WGMMA_* constants to override (STAGES=3 INFLIGHT=0 WAVES=2 ...)")
    ap.add_argument("--models", nargs="+", default=["resnet50"])
    ap.add_argument("--batches", nargs="+", type=int, default=[8])
    ap.add_argument("--precisions", nargs="+", default=["tf32", "f16"])
    a = ap.parse_args()
    import onnx

    from halbench.bench import zoo
    from halbench.compiler import CompileOptions, compile_model
    from halbench.compiler import compile as compile_mod
    from halbench.compiler import targets as T

    if a.wgmma:
        from halbench.compiler.codegen import kernels

        kernels.WGMMA_CONVS = True
    from halbench.compiler.codegen import tuning

    for kv in a.set:
        name, value = kv.split("=")
        setattr(tuning, f"WGMMA_{name.upper()}", int(value))
    if a.sm90a:
        h100 = T.resolve_target("cuda", "h100")
        arch = T.resolve_target("cuda", "sm_90a")
        target = dataclasses.replace(h100, arch="sm_90a", mma=arch.mma)
        compile_mod._resolve_target = lambda api, name, device=None: target
    tmp = Path(tempfile.mkdtemp())
    for model in a.models:
        for batch in a.batches:
            kw = {"batch": batch, **({"seq": 128} if model.startswith("minilm") else {})}
            src = tmp / f"{model}-b{batch}.onnx"
            onnx.save(zoo.build(model, **kw), src)
            for p in a.precisions:
                t0 = time.perf_counter()
                opts = CompileOptions(target_devices=("cuda",), weights="random", precision=p,
                                      targets={"cuda": "h100"}, backend_options={"cuda-formats": "cubin"})
                cm = compile_model(src, opts)
                (a.out / p).mkdir(parents=True, exist_ok=True)
                dest = a.out / p / f"{model}-b{batch}-{a.tag}.hbx"
                cm.write(dest)
                mb = dest.stat().st_size / 1e6
                print(f"{dest}: {time.perf_counter() - t0:.0f} s, {mb:.1f} MB", flush=True)


if __name__ == "__main__":
    main()
