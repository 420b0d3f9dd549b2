"""The scalar f32 GEMM's cp.async staging (gemm.j2 ASYNC) against the register staging, on CUDA.

Three steps:

1. here (a machine with the compiler): model bundles for scripts/ab_models.py, one TAG per code
   version (A: the baseline, compiled with PYTHONPATH pointing at its checkout):
     HALBENCH_TUNING_CACHE=docs/examples/h100-tuning PYTHONPATH=/work/main \\
       python scripts/gemm_async_check.py compile DIR A
     HALBENCH_TUNING_CACHE=docs/examples/h100-tuning PYTHONPATH=$PWD \\
       python scripts/gemm_async_check.py compile DIR B
2. here, without a GPU: registers, spills and shared memory of each GEMM of the problem files,
   register staging (stages 0) against cp.async (2 and 3 stages), from ptxas -v through NVRTC:
     PYTHONPATH=$PWD python scripts/gemm_async_check.py regs scripts/tune_problems/resnet50-b8.json
3. on the GPU: every GEMM of the problem files, with the configuration compile picks (the tuning
   cache's or the rule's), at stages 0 / 2 / 3, checked against NumPy and timed (device
   timestamps, median, two interleaved rounds); one table at the end:
     HALBENCH_TUNING_CACHE=docs/examples/h100-tuning python scripts/gemm_async_check.py time \\
       cuda://0 scripts/tune_problems/resnet50-b8.json ...
"""

from __future__ import annotations

import re
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

MODELS = {"resnet50": (1, 8), "mobilenetv2": (1,), "minilm-l6": (8,)}
_local = threading.local()


def _force_stages() -> None:
    """Make kernels.gemm_stages return the calling thread's ``_local.stages`` (when set), still
    0 where that many stages do not fit the shared-memory limit."""
    from halbench.compiler.codegen import kernels, tuning

    rule = tuning.gemm_stages

    def forced(t, tiles):
        s = getattr(_local, "stages", None)
        if s is None or rule(t, tiles) == 0:
            return rule(t, tiles)
        return s if s * tiles.shared_bytes() <= t.shared_bytes else 0

    kernels.gemm_stages = forced


def compile_models(out: Path, tag: str) -> None:
    import onnx

    from halbench.bench import zoo
    from halbench.compiler import CompileOptions, compile_model

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    for model, batches in MODELS.items():
        for batch in batches:
            kw = {"batch": batch, **({"seq": 128} if model.startswith("minilm") else {})}
            src = tmp / f"{model}-b{batch}.onnx"
            onnx.save(zoo.build(model, **kw), src)
            t0 = time.perf_counter()
            opts = CompileOptions(target_devices=("cuda",), weights="random", targets={"cuda": "h100"},
                                  backend_options={"cuda-formats": "cubin"})
            compile_model(src, opts).write(out / f"{model}-b{batch}-{tag}.hbx")
            print(f"{model} b{batch} {tag}: {time.perf_counter() - t0:.0f} s", flush=True)


def _problems(files: list[str]):
    from halbench.tune.problems import load_problems

    found = {}
    for f in files:
        found.update(load_problems(f, "cuda", "h100"))
    return found


def _source(problem, stages: int | None):
    """(plan, CUDA source) of a problem's GEMM for the h100 target with the tuning cache's config."""
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.tuning import tuning_for
    from halbench.compiler.targets import resolve_target
    from halbench.compiler.tuning_cache import configs_for
    from halbench.tune.problems import build_graph

    _local.stages = stages
    g = build_graph(problem)
    t = tuning_for(resolve_target("cuda", "h100"), "cuda")
    import dataclasses

    t = dataclasses.replace(t, gemm_configs=tuple(configs_for("cuda", "h100").items()))
    return cuda_source(g.ops[0], g, tuning=t)


def regs(files: list[str]) -> None:
    """ptxas -v of each problem's kernel at stages 0, 2, 3 (no GPU)."""
    from cuda.bindings import nvrtc

    from halbench.compiler.backends.nvrtc import cuda_include_dirs

    _force_stages()
    print("| problem | config | stages | regs | spill st/ld B | smem B |")
    print("|---|---|---|---|---|---|")
    for key, p in _problems(files).items():
        for stages in (0, 2, 3):
            plan, src = _source(p, stages)
            if plan.template != "gemm.j2":
                continue
            _, prog = nvrtc.nvrtcCreateProgram(src.encode(), b"k.cu", 0, [], [])
            opts = [b"--gpu-architecture=sm_90", b"--std=c++17", b"--ptxas-options=-v",
                    *[f"-I{d}".encode() for d in cuda_include_dirs()]]
            nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, log)
            text = log.decode(errors="replace")
            r = re.search(r"Used (\d+) registers", text)
            sp = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", text)
            sm = re.search(r"(\d+) bytes smem", text)
            print(f"| {key[:70]} | {plan.gemm['config']['bm']}x{plan.gemm['config']['bn']}x"
                  f"{plan.gemm['config']['bk']}/{plan.gemm['config']['tm']}x{plan.gemm['config']['tn']} "
                  f"{plan.gemm['source']} | {plan.ctx['ASYNC']} | {r and r.group(1)} | "
                  f"{sp and sp.group(1)}/{sp and sp.group(2)} | {sm and sm.group(1)} |", flush=True)


def _compile_one(key, problem, stages: int | None, out: Path):
    from halbench.compiler.compile import CompileOptions, compile_graph
    from halbench.compiler.tuning_cache import configs_for
    from halbench.tune.problems import build_graph

    _local.stages = stages
    cfg = configs_for("cuda", "h100").get(key)
    opts = CompileOptions(target_devices=("cuda",), targets={"cuda": "h100"}, tuning_cache="off",
                          gemm_configs={("cuda", key): cfg} if cfg else {},
                          backend_options={"cuda-formats": "cubin"})
    cm = compile_graph(build_graph(problem), opts, {"path": "check", "sha256": ""})
    cm.write(out)
    gemm = next((v.gemm for e in cm.manifest.executables for v in e.variants if v.gemm), None)
    return out, gemm


def time_problems(uri: str, files: list[str]) -> None:
    import halbench
    from halbench.tune.problems import gemm_dims, reference
    from halbench.tune.search import measure_bundle

    _force_stages()
    problems = _problems(files)
    tmp = Path(tempfile.mkdtemp())
    variants = (0, 2, 3)
    jobs = {}
    with ThreadPoolExecutor(8) as pool:
        for i, (key, p) in enumerate(problems.items()):
            for s in variants:
                jobs[(key, s)] = pool.submit(_compile_one, key, p, s, tmp / f"{i}-{s}.hbx")
    rows = []
    total = {s: 0.0 for s in variants}
    with halbench.create_device(uri) as dev:
        for i, (key, p) in enumerate(problems.items()):
            rng = np.random.default_rng(i + 100)
            inputs = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
            ref = reference(p, *inputs).astype(np.float64)
            got: dict[int, list[float]] = {s: [] for s in variants}
            why = {}
            for _ in range(2):
                for s in variants:
                    try:
                        path, _ = jobs[(key, s)].result()
                    except Exception as e:  # noqa: BLE001 -- a failing variant costs its cell only
                        why[s] = f"compile: {str(e).splitlines()[0][:80]}"
                        continue
                    ns, err = measure_bundle(dev, path, inputs, ref, 30, 5)
                    if err:
                        why[s] = err
                    else:
                        got[s].append(ns)
            b, m, n, k = gemm_dims(p)
            med = {s: (min(v) / 1e3 if v else None) for s, v in got.items()}
            spread = {s: (max(v) / min(v) - 1 if len(v) > 1 else 0) for s, v in got.items()}
            for s in variants:
                if med[s] is not None and all(med[x] is not None for x in variants):
                    total[s] += med[s]
            cfg = jobs[(key, 0)].result()[1]["config"] if 0 not in why else {}
            rows.append((key, cfg, med, spread, why, 2 * b * m * n * k))
            print(f"{i + 1}/{len(problems)} {key[:90]}: " + ", ".join(
                f"s{s} {med[s]:.1f} us" if med[s] else f"s{s} {why.get(s)}" for s in variants), flush=True)
    print("\n| problem | config | s0 us | s2 us | s3 us | s3/s0 | s3 TFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for key, cfg, med, spread, why, flops in rows:
        c = f"{cfg.get('bm')}x{cfg.get('bn')}x{cfg.get('bk')}/{cfg.get('tm')}x{cfg.get('tn')}" + (
            f" s{cfg.get('split')}" if cfg.get("split", 1) > 1 else "")
        cells = [f"{med[s]:.1f}" if med[s] else "x" for s in variants]
        ratio = f"{med[3] / med[0]:.2f}" if med[3] and med[0] else "-"
        tf = f"{flops / med[3] / 1e6:.1f}" if med[3] else "-"
        short = re.sub(r":dilations.*|:transpose.*", "", key.replace("conv2d:f32:", "c:").replace("matmul:f32:", "mm:"))
        print(f"| {short} | {c} | {' | '.join(cells)} | {ratio} | {tf} |")
    print(f"| sum of kernels | | {total[0]:.0f} | {total[2]:.0f} | {total[3]:.0f} | "
          f"{total[3] / max(total[0], 1e-9):.2f} | |")


def one(uri: str, file: str, index: int, stages: int, runs: int = 3) -> None:
    """Run problem ``index`` of ``file`` a few times at ``stages`` (for ncu --launch-skip)."""
    import halbench
    from halbench.runtime import Module

    _force_stages()
    key, p = list(_problems([file]).items())[index]
    path, gemm = _compile_one(key, p, stages, Path(tempfile.mkdtemp()) / "one.hbx")
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
    with halbench.create_device(uri) as dev, Module.load(path, dev) as mod:
        for _ in range(runs):
            mod.invoke(inputs=inputs)
    print(f"ran {key} {gemm['config']} stages {stages}")


def sweep(uri: str, file: str, indices: list[int]) -> None:
    """Split-K beyond the schedule's reservation (tuning.split_k): problems ``indices`` of ``file``
    with forced tiles x 1 / 2 / 4 / 8 K slices, checked and timed (what a larger cap would buy)."""
    import halbench
    from halbench.compiler.codegen import kernels
    from halbench.compiler.codegen.tuning import GemmConfig
    from halbench.tune.problems import gemm_dims, reference
    from halbench.tune.search import measure_bundle

    def split_rule(m, n, k, batch=1):
        s = getattr(_local, "split", 1)
        return kernels._slices(k, s) if s > 1 else (1, k)

    kernels.split_k = split_rule
    items = list(_problems([file]).items())
    tiles = [(64, 64, 16, 4, 4), (32, 64, 16, 4, 4), (32, 32, 16, 4, 4)]
    tmp = Path(tempfile.mkdtemp())
    jobs = {}

    def build(key, p, cfg, split, out):
        _local.split = split
        from halbench.compiler.compile import CompileOptions, compile_graph
        from halbench.tune.problems import build_graph

        opts = CompileOptions(target_devices=("cuda",), targets={"cuda": "h100"}, tuning_cache="off",
                              gemm_configs={("cuda", key): cfg}, backend_options={"cuda-formats": "cubin"})
        compile_graph(build_graph(p), opts, {"path": "sweep", "sha256": ""}).write(out)
        return out

    with ThreadPoolExecutor(16) as pool:
        for i in indices:
            key, p = items[i]
            for t in tiles:
                for s in (1, 2, 4, 8):
                    cfg = GemmConfig(*t, split=s, runs=True)
                    jobs[(i, t, s)] = pool.submit(build, key, p, cfg, s, tmp / f"{i}-{t[0]}x{t[1]}-{s}.hbx")
    print("| problem | tiles | split 1 | 2 | 4 | 8 us |")
    print("|---|---|---|---|---|---|")
    with halbench.create_device(uri) as dev:
        for i in indices:
            key, p = items[i]
            rng = np.random.default_rng(i)
            inputs = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
            ref = reference(p, *inputs).astype(np.float64)
            for t in tiles:
                cells = []
                for s in (1, 2, 4, 8):
                    try:
                        ns, err = measure_bundle(dev, jobs[(i, t, s)].result(), inputs, ref, 30, 5)
                    except Exception as e:  # noqa: BLE001
                        ns, err = None, str(e).splitlines()[0][:40]
                    cells.append(f"{ns / 1e3:.1f}" if ns else f"x {err[:30]}")
                short = re.sub(r":dilations.*", "", key.replace("conv2d:f32:", ""))
                print(f"| {short} | {t[0]}x{t[1]}x{t[2]}/{t[3]}x{t[4]} | {' | '.join(cells)} |", flush=True)
    _ = gemm_dims


def pack(src: Path, dest: Path) -> None:
    """Copy every bundle of ``src`` to ``dest`` without its large weights/ members (derived weights
    of a --weights random bundle, such as a transposed Gemm weight: ``unpack`` finds them again
    in the randomized zoo model)."""
    import zipfile

    dest.mkdir(parents=True, exist_ok=True)
    for b in sorted(src.glob("*.hbx")):
        with zipfile.ZipFile(b) as z, zipfile.ZipFile(dest / b.name, "w") as w:
            for info in z.infolist():
                if not info.filename.startswith("weights/") or info.file_size < (1 << 20):
                    w.writestr(info, z.read(info), compress_type=info.compress_type)
    print(f"packed {sum(f.stat().st_size for f in dest.glob('*.hbx')) / 1e6:.1f} MB")


def unpack(root: Path) -> None:
    """Put back each bundle's weights/ members: the randomized zoo model's initializers, as they
    are or transposed, whose sha256 is the one the manifest names (else the bundle is left)."""
    import hashlib
    import json
    import zipfile

    import onnx  # noqa: F401
    from onnx import numpy_helper

    from halbench.bench import zoo
    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

    for b in sorted(root.glob("*.hbx")):
        m = re.fullmatch(r"(.+)-b(\d+)-([A-Za-z0-9]+)\.hbx", b.name)
        with zipfile.ZipFile(b) as z:
            members = json.loads(z.read("manifest.json"))["members"]
            have = set(z.namelist())
        missing = {k: v for k, v in members.items() if k.startswith("weights/") and k not in have}
        if not missing:
            continue
        model, batch = m.group(1), int(m.group(2))
        mod = zoo.build(model, batch=batch, **({"seq": 128} if model.startswith("minilm") else {}))
        randomize_onnx(mod, RANDOM_SEED)
        by_digest = {}
        for t in mod.graph.initializer:
            a = numpy_helper.to_array(t)
            for x in (a, a.T) if a.ndim == 2 else (a,):
                data = np.ascontiguousarray(x).tobytes()
                by_digest[hashlib.sha256(data).hexdigest()] = data
        with zipfile.ZipFile(b, "a") as z:
            for name, digest in missing.items():
                if digest not in by_digest:
                    raise SystemExit(f"{b.name}: no initializer gives {name}")
                z.writestr(zipfile.ZipInfo(name), by_digest[digest], compress_type=zipfile.ZIP_STORED)
        print(f"unpacked {b.name}: {len(missing)} weights", flush=True)


def main() -> None:
    cmd, *args = sys.argv[1:]
    if cmd == "compile":
        compile_models(Path(args[0]), args[1])
    elif cmd == "one":
        one(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "sweep":
        sweep(args[0], args[1], [int(x) for x in args[2:]])
    elif cmd == "pack":
        pack(Path(args[0]), Path(args[1]))
    elif cmd == "unpack":
        unpack(Path(args[0]))
    elif cmd == "regs":
        regs(args)
    elif cmd == "time":
        time_problems(args[0], args[1:])
    else:
        raise SystemExit(f"unknown command {cmd}: compile, regs or time")


if __name__ == "__main__":
    main()
