"""Sweep the mma.sync GEMM's tiles, pipeline stages and split-K over a model's convolutions on
one CUDA device, under ``--precision tf32`` and ``f16``: each candidate is compiled as a
one-op bundle (no front end needed), checked against NumPy (the precision's tolerance) and
timed with device timestamps. Prints, per problem, the rule's time and the fastest candidates.

Usage (on the GPU machine): python scripts/mma_sweep.py [PROBLEMS.json] [--precisions tf32,f16]
    [--jobs 14] [--out DIR] [--converted]
``--converted``: the filter is an f16 / bf16 input (as passes/convert_weights.py makes a constant
filter under --precision f16 / bf16), fed rounded: the mma.sync GEMM then copies it by cp.async.
The candidates are forced by replacing the tile rule inside this process only
(kernels.mma_sync_tiles / mma_sync_split), so what is measured is exactly what compile would
emit for that choice.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from halbench.compiler.codegen import kernels
from halbench.compiler.codegen.tuning import MmaTiles
from halbench.tune.problems import build_graph, gemm_dims, load_problems, reference

TOL = {"tf32": 5e-3, "f16": 1e-2, "bf16": 2e-2}
_orig_tiles, _orig_split, _orig_takes = kernels.mma_sync_tiles, kernels.mma_sync_split, kernels.mma_sync_takes_split
_local = threading.local()


def _tiles(t, kind, m, n, k, batch=1, **kw):
    cfg = getattr(_local, "cfg", None)
    if cfg == "main":  # main's rule: two stages in static shared memory
        return _orig_tiles(dataclasses.replace(t, dynamic_shared_bytes=0), kind, m, n, k, batch)
    if cfg is None:
        return _orig_tiles(t, kind, m, n, k, batch, **kw)
    return cfg


def _split(t, tiles, kind, m, n, k, batch, room, conv=False):
    cfg = getattr(_local, "cfg", None)
    if isinstance(cfg, MmaTiles):
        if cfg.split > room:
            _local.refused = True
        return tiles
    if cfg == "main":
        return tiles
    return _orig_split(t, tiles, kind, m, n, k, batch, room, conv)


def _takes(t, tiles, m, n, k, batch=1):
    return True if isinstance(getattr(_local, "cfg", None), MmaTiles) else _orig_takes(t, tiles, m, n, k, batch)


kernels.mma_sync_tiles, kernels.mma_sync_split, kernels.mma_sync_takes_split = _tiles, _split, _takes


def label(c) -> str:
    if not isinstance(c, MmaTiles):
        return str(c)
    s = f"{c.bm}x{c.bn}x{c.bk} s{c.stages}"
    return s + (f" k{c.split}" if c.split > 1 else "")


def configs(kind: str, m: int, n: int, batch: int) -> list:
    fk = 8 if kind == "tf32" else 16
    a, b = (16, 32) if kind == "tf32" else (32, 64)
    T = lambda wm, wn, fm, fn, bk, st, sp=1: MmaTiles(16, 8, fk, wm, wn, fm, fn, bk, stages=st, split=sp)
    out = ["main", None,
           T(2, 4, 4, 4, a, 3), T(2, 4, 4, 4, b, 3), T(2, 4, 4, 4, a, 4),
           T(2, 2, 4, 4, a, 3), T(2, 2, 4, 4, b, 3), T(2, 2, 2, 8, a, 3),
           T(2, 2, 2, 4, b, 3), T(2, 2, 2, 4, b, 4), T(2, 2, 2, 4, a, 3),
           T(2, 2, 2, 2, b, 3), T(2, 2, 1, 2, b, 3)]
    blocks64 = batch * -(-m // 64) * -(-n // 64)
    if blocks64 < 4 * 132:  # low-wave: split-K candidates
        out += [T(2, 2, 2, 4, b, 3, 2), T(2, 2, 2, 4, b, 3, 4), T(2, 2, 4, 4, a, 3, 2),
                T(2, 2, 4, 4, a, 3, 4), T(2, 4, 4, 4, a, 3, 2), T(2, 2, 2, 2, b, 3, 3)]
    return out


def _weight(p) -> np.ndarray:
    """The filter of ``--converted`` candidates: the same seeded values in every one of them."""
    return np.random.default_rng(abs(hash((tuple(p.a), tuple(p.b)))) % 2**32).uniform(
        -1, 1, size=tuple(p.b)).astype(np.float32)


def _graph(p, precision: str, converted: bool):
    """The one-op graph; with ``converted`` its filter is a constant (``_weight``), which the
    compile under f16 / bf16 stores in that type (passes/convert_weights.py), as a model's is."""
    g = build_graph(p)
    if converted:
        from halbench.compiler.ir import Weight

        w = g.inputs[1][1]
        g.weights[w] = Weight(w, g.types[w], _weight(p))
        g.inputs = g.inputs[:1]
    return g


def compile_one(p, precision: str, cfg, path: Path, converted: bool = False):
    from halbench.compiler.compile import CompileOptions, compile_graph

    _local.cfg, _local.refused = cfg, False
    try:
        opts = CompileOptions(target_devices=("cuda",), targets={"cuda": "h100"}, precision=precision,
                              tuning_cache="off", backend_options={"cuda-formats": "cubin"})
        cm = compile_graph(_graph(p, precision, converted), opts, {"path": "sweep", "sha256": ""})
        var = cm.manifest.executables[0].variants[0]
        if var.gemm is not None:
            return None, "scalar GEMM"
        if _local.refused:
            return None, "not split"
        cm.write(path)
        return path, None
    except Exception as e:  # noqa: BLE001 -- a candidate that does not compile is reported
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    finally:
        _local.cfg = None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("problems", nargs="?", default="scripts/tune_problems/resnet50-b8.json")
    ap.add_argument("--precisions", default="tf32,f16")
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="cuda://0")
    ap.add_argument("--converted", action="store_true")
    a = ap.parse_args()
    import halbench
    from halbench.runtime import Module

    probs = [p for p in load_problems(a.problems).values() if p.kind == "conv2d"]
    tmp = Path(tempfile.mkdtemp())
    rows, t0 = [], time.perf_counter()
    jobs = []
    for prec in a.precisions.split(","):
        for i, p in enumerate(probs):
            b, m, n, _ = gemm_dims(p)
            for j, c in enumerate(configs(prec, m, n, b)):
                jobs.append((prec, i, p, c, tmp / f"{prec}-{i}-{j}.hbx"))
    with ThreadPoolExecutor(a.jobs) as pool:
        built = list(pool.map(lambda jb: compile_one(jb[2], jb[0], jb[3], jb[4], a.converted), jobs))
    print(f"compiled {len(jobs)} in {time.perf_counter() - t0:.0f} s", flush=True)
    rng = np.random.default_rng(0)
    data = {}
    with halbench.create_device(a.device) as dev:
        for (prec, i, p, c, _), (path, err) in zip(jobs, built):
            if i not in data:
                ins = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
                data[i] = (ins, reference(p, *ins).astype(np.float64))
            ins, ref = data[i]
            if a.converted:
                w = _weight(p)
                ins, ref = [ins[0]], reference(p, ins[0], w).astype(np.float64)
            ns = None
            if path is not None:
                try:
                    with Module.load(path, dev) as mod:
                        out = mod.invoke(inputs=list(ins))[0]
                        rel = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
                        if not np.isfinite(rel) or rel > TOL[prec]:
                            err = f"wrong: rel {rel:.2g}"
                        else:
                            for _ in range(3):
                                mod.profile(inputs=list(ins), runs=10, warmup=0, dispatch_times=False)
                            prof = mod.profile(inputs=list(ins), runs=15, warmup=3)
                            ns = float(prof.dispatch_median_ns()[0])
                except Exception as e:  # noqa: BLE001
                    err = f"run: {type(e).__name__}: {str(e)[:120]}"
            rows.append({"precision": prec, "problem": i, "shape": f"{p.a}x{p.b}", "config": label(c),
                         "us": None if ns is None else ns / 1e3, "error": err})
    print(f"total {time.perf_counter() - t0:.0f} s", flush=True)
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "mma_sweep.json").write_text(json.dumps(rows, indent=1))
    errs = [r for r in rows if r["error"] and r["error"] not in ("scalar GEMM", "not split")]
    for r in errs[:20]:
        print("ERR", r["precision"], r["problem"], r["config"], r["error"])
    print(f"{len(errs)} errors")
    for prec in a.precisions.split(","):
        tot = {}
        print(f"\n{prec}: problem | main us | rule us | best (us) | 2nd")
        for i, p in enumerate(probs):
            rs = [r for r in rows if r["precision"] == prec and r["problem"] == i and r["us"]]
            def get(name: str, rs: list = rs) -> float | None:
                return next((r["us"] for r in rs if r["config"] == name), None)
            best = sorted(rs, key=lambda r: r["us"])
            for r in rs:
                tot[r["config"]] = tot.get(r["config"], 0.0) + r["us"]
            mi, ru = get("main"), get("None")
            print(f"{i:2d} {p.a[1]:4d}->{p.b[0]:4d} k{p.b[2]} s{(p.attrs.strides or [1])[0]} {p.out[2]:3d}px | "
                  f"{mi or 0:7.1f} | {ru or 0:7.1f} | " + " | ".join(f"{r['config']} {r['us']:.1f}" for r in best[:3]))
        bests = sum(min(r["us"] for r in rows if r["precision"] == prec and r["problem"] == i and r["us"])
                    for i in range(len(probs)))
        print(f"{prec} sums: main {tot.get('main', 0):.0f} rule {tot.get('None', 0):.0f} per-problem best {bests:.0f} us")


if __name__ == "__main__":
    sys.exit(main())
