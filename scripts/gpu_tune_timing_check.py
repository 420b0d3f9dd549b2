"""Why do the tuner's Vulkan times differ from the same kernels inside a model? One problem,
compiled with the rule's configuration through CUDA and Vulkan, timed four ways:
  tuner: measure_bundle (checked, ``samples`` per-dispatch timestamps after warmup_s of load);
  whole: 0.5 s of load, then 100 runs timed whole (no per-dispatch timestamps);
  tuner again right after ``whole``;
  graph-like: one command buffer of 20 dispatches back to back, per-dispatch median.
Usage (GPU machine): python3 scripts/gpu_tune_timing_check.py"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

import halbench
from halbench.bundle.manifest_schema import GemmProblemDoc
from halbench.compiler.codegen.tuning import problem_key
from halbench.runtime import Module
from halbench.tune.problems import reference
from halbench.tune.search import _compile, measure_bundle

PROBLEMS = [
    {"kind": "conv2d", "dtype": "f32", "a": [8, 256, 14, 14], "b": [256, 256, 3, 3], "out": [8, 256, 14, 14],
     "attrs": {"dilations": [1, 1], "layout": "nchw", "pad_value": 0.0, "pads": [1, 1, 1, 1], "strides": [1, 1]}},
    {"kind": "batch_matmul", "dtype": "f32", "a": [8, 128, 1536], "b": [1536, 384], "out": [8, 128, 384],
     "attrs": {"shared": "b", "transpose_a": False, "transpose_b": False}},
]


def VARIANTS(p: GemmProblemDoc) -> list:
    from halbench.compiler.codegen.tuning import GemmConfig

    out = []
    for uri, api, abis in (("cuda://0", "cuda", (None,)), ("vulkan://0", "vulkan", ("bda", "descriptors"))):
        for abi in abis:
            out.append((uri, api, abi, None))
        for cfg in (GemmConfig(bm=64, bn=64, bk=16, tm=4, tn=4, split=1, runs=True),
                    GemmConfig(bm=64, bn=64, bk=16, tm=4, tn=4, split=1, runs=False)):
            for abi in abis[:1]:
                out.append((uri, api, abi, cfg))
    return out


def tuned(problems: list[dict]) -> None:
    """The tuner itself on these problems (its times should match the ones timed alone)."""
    from halbench.tune import tune

    docs = {problem_key(GemmProblemDoc.model_validate(r).model_dump()): GemmProblemDoc.model_validate(r)
            for r in problems}
    keys = list(docs)
    orders = [("all", keys), ("last alone", keys[-1:]), ("reversed", keys[::-1])]
    for (what, ks), uri in [(o, u) for u in ("cuda://0", "vulkan://0") for o in orders]:
        run = tune({k: docs[k] for k in ks}, uri, target="h100", budget_s=10 * len(ks), jobs=16, max_candidates=8)
        print(f"-- {what}")
        for r in run.results:
            print(f"tuner {uri}: {r.key[:50]} rule {r.rule.config.label()} "
                  f"{(r.rule.time_ns or 0) / 1e3:.1f} us, best {r.best.config.label()} {(r.best.time_ns or 0) / 1e3:.1f} us")


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    rows = []
    for i, raw in enumerate(PROBLEMS):
        p = GemmProblemDoc.model_validate(raw)
        key = problem_key(p.model_dump())
        rng = np.random.default_rng(0)
        inputs = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
        ref = reference(p, *inputs).astype(np.float64)
        for uri, api, abi, cfg in VARIANTS(p):
            path, gemm, err = _compile(p, key, api, "h100", uri, cfg, abi, tmp / f"{i}-{api}-{abi}-{cfg}.hbx")
            if err:
                print(key, api, err)
                continue
            with halbench.create_device(uri) as dev:
                t1, _e1 = measure_bundle(dev, path, inputs, ref, 10, 3, 0.2)
                with Module.load(path, dev) as mod:
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < 0.5:
                        mod.profile(inputs=inputs, runs=10, warmup=0, dispatch_times=False)
                    whole = float(np.median(mod.profile(inputs=inputs, runs=100, warmup=3,
                                                        dispatch_times=False).total_ns))
                    per = float(mod.profile(inputs=inputs, runs=30, warmup=3).dispatch_median_ns()[0])
                t2, _e2 = measure_bundle(dev, path, inputs, ref, 10, 3, 0.0)
            rows.append((key[:60], f"{api}-{abi or ''}", gemm["config"], t1, whole, per, t2))
    print("\n| problem | api | config | tuner us | whole us | per-dispatch us (after load) | tuner again us |")
    for k, api, cfg, t1, w, per, t2 in rows:
        c = f"{cfg['bm']}x{cfg['bn']}x{cfg['bk']}/{cfg['tm']}x{cfg['tn']} s{cfg['split']}{' runs' if cfg.get('runs') else ''}"
        print(f"| {k} | {api} | {c} | {(t1 or 0) / 1e3:.1f} | {w / 1e3:.1f} | {per / 1e3:.1f} | {(t2 or 0) / 1e3:.1f} |")


if __name__ == "__main__":
    import sys

    if "--tuner-only" not in sys.argv:
        main()
    tuned(PROBLEMS)
