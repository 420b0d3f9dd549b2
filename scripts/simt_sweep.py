"""Sweep the scalar f32 GEMM (gemm.j2) over the GEMMs of tuning problem files on GPUs, per API:
the tuning cache's configuration as it is and with ``frag`` (gemm.j2 FRAG: double-buffered
fragments; on CUDA with the register bound of tuning.gemm_min_blocks), then wide thread tiles
(8x8, 8x4, 4x8, 4x4 in runs of 4, with ``frag``) at the cache's split and, for a low-wave GEMM,
the fewest K slices for 1.5 waves. Each candidate is a one-op bundle (compiles on the GPU machine:
no front end), checked against NumPy as the tuner checks (search.measure_bundle) and timed with
device timestamps after 0.2 s of load, as the tuner times (two interleaved rounds, the best;
without the load NVIDIA's Vulkan driver left the H100 at 390 MHz and timed later problems 5x
slow). Prints one table per API and writes the fastest per problem as JSON (--out) for scripts/simt_cache.py, which merges chosen ones into a
copy of the tuning cache; the choice is made by whole-model A/Bs (scripts/ab_models.py), not
by these isolated timings alone.

Usage (on the GPU machine):
    HALBENCH_TUNING_CACHE=docs/examples/h100-tuning python scripts/simt_sweep.py \\
        cuda://0,vulkan://0 scripts/tune_problems/resnet50-b8.json ... [--jobs 14] [--out FILE]
        [--only REGEX]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from halbench.compiler.codegen.tuning import GemmConfig, split_k_room
from halbench.tune.problems import build_graph, gemm_dims, load_problems, reference

#: wide thread tiles (bm, bn, bk, tm, tn) tried in runs of 4 with the double-buffered fragments
WIDE = ((128, 128, 8, 8, 8), (128, 64, 16, 8, 4), (64, 128, 16, 4, 8), (64, 64, 16, 4, 4))


def candidates(p, cached: GemmConfig | None, cus: int = 132) -> list[GemmConfig | None]:
    """The cache's configuration (None: the rule's), it with ``frag``, then WIDE tiles with
    ``frag`` at its split and, for a low-wave GEMM, the fewest slices for 1.5 waves of blocks."""
    b, m, n, k = gemm_dims(p)
    room = split_k_room(m, n, k, b)
    out: list[GemmConfig | None] = [cached]
    if cached is not None:
        out.append(replace(cached, frag=True))
    base_split = cached.split if cached else 1
    for bm, bn, bk, tm, tn in WIDE:
        blocks = b * -(-m // bm) * -(-n // bn)
        waste = (-(-m // bm) * bm * -(-n // bn) * bn) / max(m * n, 1)
        if waste > 1.5:
            continue
        splits = {min(base_split, room)}
        if blocks < 2 * cus and room > 1:
            more = [s for s in (2, 3, 4, 6, 8) if s <= room and blocks * s >= 1.5 * cus and k // s >= 64]
            splits |= set(more[:1])
        for s in sorted(splits):
            out.append(GemmConfig(bm, bn, bk, tm, tn, s, True, True))
    return list(dict.fromkeys(out))


def _build(api: str, key: str, p, cfg: GemmConfig | None, out: Path) -> tuple[Path, dict]:
    from halbench.compiler.compile import CompileOptions, compile_graph

    opts = CompileOptions(target_devices=(api,), targets={api: "h100"}, tuning_cache="off",
                          gemm_configs={(api, key): cfg} if cfg else {},
                          backend_options={"cuda-formats": "cubin"} if api == "cuda" else {})
    cm = compile_graph(build_graph(p), opts, {"path": "sweep", "sha256": ""})
    cm.write(out)
    gemm = next((v.gemm for e in cm.manifest.executables for v in e.variants if v.gemm), None)
    return out, gemm or {}


def label(cfg: dict) -> str:
    c = cfg.get("config", {})
    s = f"{c.get('bm')}x{c.get('bn')}x{c.get('bk')}/{c.get('tm')}x{c.get('tn')}"
    s += f" k{c['split']}" if c.get("split", 1) > 1 else ""
    return s + (" r" if c.get("runs") else "") + (" frag" if c.get("frag") else "")


def sweep(uri: str, files: list[str], jobs: int, found: dict, only: str | None = None) -> None:
    import halbench
    from halbench.compiler.tuning_cache import configs_for
    from halbench.tune.search import measure_bundle

    api = uri.split(":")[0]
    cache = configs_for(api, "h100")
    problems = {}
    for f in files:
        problems.update(load_problems(f, api, "h100"))
    if only:
        problems = {k: p for k, p in problems.items() if re.search(only, k)}
    tmp = Path(tempfile.mkdtemp())
    cands = {key: candidates(p, cache.get(key)) for key, p in problems.items()}
    built: dict[tuple[str, int], tuple[Path, dict] | str] = {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:
        futs = {(key, i): pool.submit(_build, api, key, p, cfg, tmp / f"{api}-{n}-{i}.hbx")
                for n, (key, p) in enumerate(problems.items()) for i, cfg in enumerate(cands[key])}
        for kk, f in futs.items():
            try:
                built[kk] = f.result()
            except Exception as e:  # noqa: BLE001 -- a failing candidate costs its cell only
                built[kk] = f"compile: {str(e).splitlines()[0][:100]}"
    print(f"{api}: {len(built)} candidates compiled in {time.perf_counter() - t0:.0f} s", flush=True)
    rows = []
    with halbench.create_device(uri) as dev:
        for pi, (key, p) in enumerate(problems.items()):
            rng = np.random.default_rng(pi + 100)
            inputs = [rng.uniform(-1, 1, size=tuple(s)).astype(np.float32) for s in (p.a, p.b)]
            ref = reference(p, *inputs).astype(np.float64)
            got: dict[int, list[float]] = {}
            why: dict[int, str] = {}
            for _ in range(2):
                for i in range(len(cands[key])):
                    r = built[(key, i)]
                    if isinstance(r, str):
                        why[i] = r
                        continue
                    ns, err = measure_bundle(dev, r[0], inputs, ref, 20, 3, warmup_s=0.2)
                    if err:
                        why[i] = err
                    else:
                        got.setdefault(i, []).append(ns)
            best = {i: min(v) / 1e3 for i, v in got.items()}
            b, m, n, k = gemm_dims(p)
            rows.append((key, best, why, 2 * b * m * n * k))
            if best:
                win = min(best, key=best.get)
                cfg = built[(key, win)][1].get("config")  # type: ignore[index]
                found.setdefault(api, {})[key] = {"config": cfg, "problem": p.model_dump(), "us": best[win],
                                                  "cache_us": best.get(0), "cache_frag_us": best.get(1)}
            for i, w in why.items():
                print(f"  {key[:70]} cand {i}: {w[:120]}", flush=True)
    print(f"\n{api}: | problem | cache us | cache + frag us | best us | best config | TFLOP/s |")
    print("|---|---|---|---|---|---|")
    tot = [0.0, 0.0, 0.0]
    for key, best, why, flops in rows:
        short = re.sub(r":dilations.*|:transpose.*|:shared.*", "", key.replace("conv2d:f32:", "c:").replace(
            "matmul:f32:", "mm:"))
        if not best:
            print(f"| {short} | x | x | x | | |")
            continue
        win = min(best, key=best.get)
        r = built[(key, win)]
        m0, m1 = best.get(0), best.get(1)
        if m0 and m1:
            tot[0] += m0
            tot[1] += m1
            tot[2] += best[win]
        print(f"| {short} | {m0 or 0:.1f} | {m1 or 0:.1f} | {best[win]:.1f} | "
              f"{label(r[1])} | {flops / best[win] / 1e6:.1f} |")  # type: ignore[index]
    print(f"| sum | {tot[0]:.0f} | {tot[1]:.0f} | {tot[2]:.0f} | | |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("devices")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--jobs", type=int, default=14)
    ap.add_argument("--out", default=None)
    ap.add_argument("--only", default=None, help="problems whose key matches this regular expression")
    a = ap.parse_args()
    found: dict = {}
    for uri in a.devices.split(","):
        try:
            sweep(uri, a.files, a.jobs, found, a.only)
        except Exception as e:  # noqa: BLE001 -- one API failing must not lose the other's table
            print(f"{uri}: {type(e).__name__}: {str(e)[:300]}", flush=True)
        if a.out:
            Path(a.out).write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    sys.exit(main())
