"""A/B of scalar f32 GEMM kernel variants (gemm.j2 on CUDA) on the GEMMs of a tuning problems file,
with cuBLAS (torch.matmul, TF32 off; cuDNN for convolutions) beside them: what the tile search cannot reach (pipeline
stages, the register bound, the fragment loop on every configuration).

Each variant compiles every f32 problem as a one-op bundle with the tuning cache's configuration
(``$HALBENCH_TUNING_CACHE``), changed only as the variant says, by replacing a rule inside this
process (so what is timed is exactly what compile would emit for that choice):
  base  the cache's configuration as compile uses it
  st4   four cp.async stages where they fit the static shared memory (the rule: three)
  lb    ``__launch_bounds__(threads, 65536 / (threads * 64))``: at most 64 registers a thread
  frag  the cache's configuration with ``frag`` (gemm.j2 FRAG)
  and their combinations (``st4+lb``: both); ``lbN``: ``__launch_bounds__(threads, N)``;
  ``noak`` / ``nost4``: without gemm.j2 AK (A K-contiguous, 16-byte copies) / finish4 (16-byte stores);
  ``aheadN``: FRAG reads a thread's fragments N K steps before their FMAs (the rule: 1);
  ``cBMxBNxBK_TMxTN[_sS][_nr]``: every problem forced to that workgroup / thread tile (S split-K
  slices, default 1; runs of 4 where both thread-tile sides are multiples of 4, none with ``nr``)
  (``--variants`` picks them: ``run`` times whichever bundles the compile wrote)

Usage:
  here:    HALBENCH_TUNING_CACHE=docs/examples/h100-tuning PYTHONPATH=$PWD \\
             python scripts/gemm_variants_ab.py compile DIR [PROBLEMS.json] [--variants base,st4,...]
  the GPU: python scripts/gemm_variants_ab.py run DIR [--device cuda://0] [--rounds 5]
Prints per problem the median device time of each variant (µs), cuBLAS's, and the sums.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

VARIANTS = ("base", "st4", "lb", "frag", "st4+lb", "lb+frag", "st4+lb+frag")


def _patch(variant: str) -> None:
    from halbench.compiler.codegen import kernels

    orig_stages, orig_min = kernels.gemm_stages, kernels.gemm_min_blocks
    parts = variant.split("+")
    if "st4" in parts:
        kernels.gemm_stages = lambda t, tiles: (4 if orig_stages(t, tiles) and 4 * tiles.shared_bytes() <= t.shared_bytes
                                                else orig_stages(t, tiles))
    if "lb" in parts:
        kernels.gemm_min_blocks = lambda t, cfg: (65536 // (cfg.threads * 64)) if t.api == "cuda" else orig_min(t, cfg)
    if "noak" in parts:  # A staged M-contiguous by 4-byte copies (before gemm.j2 AK)
        kernels.GEMM_AK = False
    if "nost4" in parts:  # the epilogue stored element by element (before gemm.j2 finish4)
        kernels.GEMM_STORE4 = False
    for x in parts:
        if x.startswith("ahead") and x[5:].isdigit():  # FRAG fragments read N K steps ahead
            kernels.FRAG_AHEAD = int(x[5:])
        if x.startswith("lb") and x[2:].isdigit():
            kernels.gemm_min_blocks = lambda t, cfg, n=int(x[2:]): n if t.api == "cuda" else orig_min(t, cfg)


def _cache_with(src: Path, parts: list[str]) -> Path:
    """A copy of the CUDA cache with every entry's configuration changed as ``parts`` say."""
    doc = json.loads((src / "cuda-h100.json").read_text())
    for e in doc["entries"].values():
        for x in parts:
            if x == "frag":
                e["config"]["frag"] = True
            elif x.startswith("c"):
                w, t, *more = x[1:].split("_")
                bm, bn, bk = (int(v) for v in w.split("x"))
                tm, tn = (int(v) for v in t.split("x"))
                split = next((int(m[1:]) for m in more if m[:1] == "s" and m[1:].isdigit()), 1)
                e["config"].update(bm=bm, bn=bn, bk=bk, tm=tm, tn=tn, split=split,
                                   runs="nr" not in more and tm % 4 == 0 and tn % 4 == 0)
    out = Path(tempfile.mkdtemp()) / "cuda-h100.json"
    out.write_text(json.dumps(doc))
    return out.parent


def compile_all(out: Path, problems: str, variants: tuple[str, ...] = VARIANTS) -> None:
    import subprocess

    out.mkdir(parents=True, exist_ok=True)
    (out / "variants.json").write_text(json.dumps(list(variants)))
    for v in variants:  # one process per variant: each patches the rules its own way
        r = subprocess.run([sys.executable, __file__, "_compile_one", str(out), problems, v], check=False)
        if r.returncode:
            print(f"{v}: did not compile", flush=True)


def _compile_one(out: Path, problems: str, variant: str) -> None:
    from halbench.compiler.compile import CompileOptions, compile_graph
    from halbench.tune.problems import build_graph, load_problems

    cache = os.environ.get("HALBENCH_TUNING_CACHE")
    parts = variant.split("+")
    if cache and any(x == "frag" or x.startswith("c") for x in parts):
        os.environ["HALBENCH_TUNING_CACHE"] = str(_cache_with(Path(cache), parts))
    _patch(variant)
    for i, (key, p) in enumerate(load_problems(problems).items()):
        if p.dtype != "f32":
            continue
        opts = CompileOptions(target_devices=("cuda",), targets={"cuda": "h100"},
                              backend_options={"cuda-formats": "cubin"})
        try:
            cm = compile_graph(build_graph(p), opts, {"path": key, "sha256": ""})
        except Exception as e:  # noqa: BLE001 -- a configuration a problem cannot take costs its cell
            print(f"{variant} {key}: {type(e).__name__}: {str(e)[:120]}", flush=True)
            continue
        for ex in cm.manifest.executables:  # a forced configuration the target refused falls back to the rule
            for v in ex.variants:
                if v.gemm and parts != ["base"] and v.gemm.get("source") != "tuned":
                    print(f"{variant} {key}: not taken ({v.gemm.get('source')}: {v.gemm.get('config')})", flush=True)
        cm.write(out / f"p{i}-{variant.replace('+', '_')}.hbx")
        (out / f"p{i}.key").write_text(json.dumps({"key": key, "problem": p.model_dump(mode="json")}))
    print(f"{variant}: compiled", flush=True)


def run_all(root: Path, device: str, rounds: int) -> None:
    import halbench
    from halbench.bundle.manifest_schema import GemmProblemDoc
    from halbench.runtime import Module
    from halbench.tune.problems import reference

    variants = tuple(json.loads((root / "variants.json").read_text())) if (root / "variants.json").exists() else VARIANTS
    keys = sorted(root.glob("p*.key"), key=lambda p: int(p.stem[1:]))
    rows, t0 = [], time.perf_counter()
    with halbench.create_device(device) as dev:
        for kf in keys:
            doc = json.loads(kf.read_text())
            key, p = doc["key"], GemmProblemDoc.model_validate(doc["problem"])
            rng = np.random.default_rng(0)
            ins = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
            ref = reference(p, *ins).astype(np.float64)
            mods = {}
            for v in variants:
                path = root / f"{kf.stem}-{v.replace('+', '_')}.hbx"
                if path.exists():
                    mods[v] = Module.load(path, dev)
            times: dict[str, list[float]] = {v: [] for v in mods}
            errs = {}
            try:
                for v, m in mods.items():
                    out = m.invoke(inputs=list(ins))[0]
                    errs[v] = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
                    if not errs[v] < 1e-3:
                        print(f"  {v}: WRONG (rel {errs[v]:.2g})", flush=True)
                    t1 = time.monotonic()
                    while time.monotonic() - t1 < 0.2:
                        m.profile(inputs=list(ins), runs=10, warmup=0, dispatch_times=False)
                for _ in range(rounds):
                    for v, m in mods.items():
                        times[v] += list(m.profile(inputs=list(ins), runs=20, warmup=2).dispatch_median_ns())
            finally:
                for m in mods.values():
                    m.close()
            try:
                cb = _cublas(p, ins)
            except Exception as e:  # noqa: BLE001 -- a peer failure must not lose the rows
                print(f"  cuBLAS / cuDNN: {type(e).__name__}: {str(e)[:120]}")
                cb = None
            rows.append((key, {v: float(np.median(t)) / 1e3 for v, t in times.items()}, errs, cb))
            print(key, {v: round(float(np.median(t)) / 1e3, 1) for v, t in times.items()},
                  f"cublas {rows[-1][3]:.1f}" if rows[-1][3] else "", flush=True)
    print(f"\n({time.perf_counter() - t0:.0f} s)\n| problem | " + " | ".join(variants) + " | cuBLAS | max rel err |")
    print("|---|" + "---|" * (len(variants) + 2))
    sums = dict.fromkeys(variants, 0.0)
    cub = 0.0
    for key, t, errs, cb in rows:
        for v in variants:
            sums[v] += t.get(v, float("nan"))
        cub += cb or float("nan")
        print(f"| {key.split(':')[2]} | " + " | ".join(f"{t.get(v, float('nan')):.1f}" for v in variants)
              + f" | {cb or float('nan'):.1f} | {max(errs.values()):.1e} |")
    print("| sum | " + " | ".join(f"{sums[v]:.1f}" for v in variants) + f" | {cub:.1f} | |")


def _cublas(p, ins) -> float | None:
    """cuBLAS's / cuDNN's time (µs) for the same product, TF32 off: 50 calls queued between two
    CUDA events, per call, median of 20. (The eleventh session's logs timed one call between the
    events, launch included, which overstated the vendor kernels.)"""
    try:
        import torch
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    a = torch.from_numpy(ins[0]).cuda()
    b = torch.from_numpy(ins[1]).cuda()
    at = p.attrs if isinstance(p.attrs, dict) else p.attrs.model_dump()
    if p.kind == "conv2d":  # cuDNN (NCHW), the same strides / pads / dilations
        if at.get("layout", "nchw") != "nchw":
            return None
        pads = at.get("pads") or [0, 0, 0, 0]
        if pads[0] != pads[2] or pads[1] != pads[3]:
            return None
        f = (lambda: torch.nn.functional.conv2d(a, b, stride=tuple(at.get("strides") or (1, 1)),
                                                padding=(pads[0], pads[1]),
                                                dilation=tuple(at.get("dilations") or (1, 1))))
    else:
        ta, tb = at.get("transpose_a"), at.get("transpose_b")
        f = (lambda: torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b))
    for _ in range(20):
        f()
    ts = []
    for _ in range(20):  # 50 calls queued back to back between two events: the launches overlap
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(50):
            f()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3 / 50)
    return float(np.median(ts))


def main() -> None:
    cmd = sys.argv[1]
    if cmd == "compile":
        rest = sys.argv[3:]
        variants = VARIANTS
        if "--variants" in rest:
            i = rest.index("--variants")
            variants, rest = tuple(rest[i + 1].split(",")), rest[:i] + rest[i + 2:]
        compile_all(Path(sys.argv[2]), rest[0] if rest else "scripts/tune_problems/minilm-l6-b8.json", variants)
    elif cmd == "_compile_one":
        _compile_one(Path(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        import argparse

        ap = argparse.ArgumentParser()
        ap.add_argument("cmd")
        ap.add_argument("root", type=Path)
        ap.add_argument("--device", default="cuda://0")
        ap.add_argument("--rounds", type=int, default=5)
        a = ap.parse_args()
        run_all(a.root, a.device, a.rounds)


if __name__ == "__main__":
    sys.exit(main())
