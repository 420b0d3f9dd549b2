#!/usr/bin/env python3
"""Device-peaks variants on the GPU in one call: which copy, FMA and GEMM kernel is best.

For each device (cuda://, vulkan:// by default) it runs every variant of the micro kernels the
device-peaks suite uses (bandwidth-copy unroll x grid, fma-f32 chains x unroll and the old vec4
GLSL kernel, gemm-f16 / gemm-bf16 tiles and pipelines, up to 192 KiB of dynamic shared
memory on CUDA), checks each one's output, and prints one table:
TB/s or TFLOP/s (median of the device-timed samples) against the bars of issue #12 (copy
2.9 TB/s; f32 FMA 60 TFLOP/s; f16 GEMM 550 through CUDA, 450 through Vulkan). It stops
starting variants when --budget seconds are spent, so the call stays within the device time.

Usage (on the GPU machine, after ``source .gpus/setup.sh``):
    python3 scripts/gpu_peaks.py [--budget 240] [--quick] [--out FILE.json] [DEVICE ...]
Exit status 0 when every variant that ran passed its check.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GIB = 1 << 30
BARS = {("bandwidth-copy", "cuda"): 2.9, ("bandwidth-copy", "vulkan"): 2.9,
        ("fma-f32", "cuda"): 60.0, ("fma-f32", "vulkan"): 60.0,
        ("gemm-f16", "cuda"): 550.0, ("gemm-f16", "vulkan"): 450.0,
        ("gemm-bf16", "cuda"): 550.0}


def variants(api: str, quick: bool) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []
    # unroll 1 with a 65535 cap is the old kernel (one vec4 per thread, grid-stride)
    for unroll in (1, 2, 4, 8):
        for wgs in ((65535,) if quick else (4224, 65535)):
            out.append(("bandwidth-copy", {"bytes": GIB, "unroll": unroll, "workgroups": wgs}))
    fma = {"workgroups": 8192, "iters": 4096}
    for chains in (16, 32, 64):
        for unroll in (1, 4):
            out.append(("fma-f32", {**fma, "chains": chains, "unroll": unroll}))
    if api == "vulkan":
        out.append(("fma-f32", {**fma, "chains": 32, "unroll": 1, "vector": 4}))  # the old kernel
        out.append(("fma-f32", {**fma, "chains": 32, "unroll": 4, "vector": 4}))  # old, unrolled
    g = {"m": 4096, "n": 4096, "k": 4096}
    if api == "cuda":
        # (tile_m, tile_n, tile_k, stages, mma): mma 1 = mma.sync, 2 / 3 = wgmma with 0 / 1 groups
        # in flight. The tiles sit in dynamic shared memory: the second list of each kind goes past
        # the old 48 KiB (up to 192 KiB of the H100's 227 KiB), with deeper pipelines and tile_k 64.
        # The wgmma kernels run last: a fault poisons the CUDA context for whatever follows.
        sync = [(128, 128, 32, 3, 1), (128, 128, 32, 2, 1), (128, 256, 32, 2, 1), (256, 128, 32, 2, 1),
                (64, 128, 32, 4, 1)]
        sync_deep = [(128, 128, 32, 4, 1), (128, 128, 64, 3, 1), (128, 128, 64, 4, 1), (128, 256, 32, 4, 1),
                     (128, 256, 64, 3, 1), (256, 128, 64, 3, 1)]
        wg = [(128, 128, 32, 3, 3), (128, 128, 32, 3, 2), (128, 256, 32, 2, 2), (64, 256, 32, 2, 2),
              (256, 128, 32, 2, 2), (192, 128, 32, 2, 2), (64, 128, 32, 4, 3)]
        wg_deep = [(128, 128, 32, 4, 2), (128, 128, 32, 5, 3), (128, 128, 32, 6, 3), (128, 128, 64, 3, 2),
                   (128, 128, 64, 4, 3), (128, 128, 64, 5, 3), (128, 256, 32, 4, 3), (128, 256, 64, 3, 2),
                   (128, 256, 64, 4, 3), (256, 128, 64, 3, 2), (256, 128, 64, 4, 3), (192, 128, 64, 4, 3),
                   (64, 256, 64, 4, 3), (256, 128, 64, 4, 2), (256, 128, 32, 6, 3), (256, 128, 32, 8, 3),
                   (128, 256, 32, 6, 3), (128, 256, 32, 8, 3), (192, 128, 64, 5, 3), (192, 128, 32, 8, 3)]
        bf16 = [(128, 128, 32, 3, 2), (128, 256, 64, 4, 3), (256, 128, 64, 4, 3)]
        # warp-specialized wgmma: mma 4 (one workgroup per tile), 5 (persistent: one per SM)
        ws = [(bm, bn, bk, st, mma) for mma in (4, 5) for bm, bn, bk, st in
              ((128, 256, 32, 8), (128, 256, 32, 9), (128, 256, 32, 7), (256, 128, 32, 8), (256, 128, 32, 9),
               (128, 256, 64, 4), (256, 128, 64, 4))]
        ws_bf16 = [(128, 256, 32, 8, 5), (128, 256, 32, 9, 5), (256, 128, 32, 8, 5), (256, 128, 32, 9, 5),
                   (128, 256, 32, 8, 4)]
        if quick:
            sync, sync_deep, wg, wg_deep, bf16 = sync[:1], sync_deep[2:3], wg[1:2], wg_deep[4:9], bf16[1:2]
        todo = [("gemm-f16", t) for t in sync + sync_deep] + [("gemm-bf16", sync[0])]
        todo += [("gemm-f16", t) for t in wg + wg_deep]
        todo += [("gemm-bf16", t) for t in bf16]
        # small shapes first (k of one or two tiles: the pipelines' prologue and drain), then speed
        todo += [("gemm-f16", (128, 256, 64, 4, 4), (256, 512, kk)) for kk in (64, 128, 448)]
        # persistent (one workgroup per SM): more tiles than workgroups, k of 1 to 14 tiles
        todo += [("gemm-f16", (128, 256, 32, 9, 5), (mm, 4096, kk)) for mm, kk in ((2048, 32), (4096, 448))]
        todo += [("gemm-f16", t) for t in ws] + [("gemm-bf16", t) for t in ws_bf16]
        todo = [t if len(t) == 3 else (*t, None) for t in todo]
        for kind, (bm, bn, bk, st, mma), shape in todo:
            m = 4224 if bm == 192 else g["m"]  # 4096 is no multiple of 192
            size = dict(zip("mnk", shape)) if shape else {"m": m}
            out.append((kind, {**g, **size, "tile_m": bm, "tile_n": bn, "tile_k": bk, "stages": st, "mma": mma}))
    else:
        tiles = [(128, 128, 32), (128, 128, 16), (128, 256, 16), (256, 128, 16), (64, 128, 32),
                 (128, 64, 32), (64, 64, 32)]
        for bm, bn, bk in tiles[:3] if quick else tiles:
            out.append(("gemm-f16", {**g, "tile_m": bm, "tile_n": bn, "tile_k": bk}))
        # workgroup-scope cooperative matrix (VK_NV_cooperative_matrix2): mma 2 loads the operands
        # from memory (the driver stages them), mma 3 stages them in shared memory first; each tile
        # at the device's listed workgroup sizes (skipped with the reason where it lists none)
        wgs = [(128, 128, 32), (128, 128, 64), (128, 256, 32), (256, 128, 32), (128, 256, 64), (256, 128, 64),
               (256, 256, 32), (64, 128, 32), (128, 64, 64), (128, 128, 16)]
        # mma 4: tensor-addressed loads (coopMatLoadTensorNV), the tiles of mma 2 and 256x256x64
        for mma in (4, 2, 3):
            for inv in (128, 256):
                for bm, bn, bk in (wgs[:2] if quick else wgs + [(256, 256, 64)] if mma == 4 else wgs if mma == 2
                                   else wgs[:3] + wgs[9:]):
                    out.append(("gemm-f16", {**g, "tile_m": bm, "tile_n": bn, "tile_k": bk, "mma": mma,
                                             "invocations": inv}))
    return out


def measure(mb, min_time_s: float = 0.25, max_samples: int = 50, warmup_s: float = 0.5) -> float:
    """Median device time in ms over samples taken for about min_time_s, after at least 2 warm-up
    runs and warmup_s of them (as the suite runner warms up: NVIDIA's Vulkan driver left the
    H100's first variant, a 1 GiB copy, at 1.69 TB/s after 2 runs alone)."""
    w0 = time.perf_counter()
    done = 0
    while done < 2 or time.perf_counter() - w0 < warmup_s:
        mb.run()
        done += 1
    times: list[float] = []
    t0 = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - t0 < min_time_s and len(times) < max_samples):
        times.append(mb.run().device_ms)
    return statistics.median(times)


def label(kind: str, p: dict) -> str:
    if kind == "bandwidth-copy":
        return f"unroll {p['unroll']}, grid<={p['workgroups']}"
    if kind == "fma-f32":
        return f"chains {p['chains']}, unroll {p['unroll']}" + (", vec4 (old)" if p.get("vector") == 4 else "")
    if "invocations" in p:  # Vulkan workgroup-scope cooperative matrix
        mma = {2: "coopmat2", 3: "coopmat2 shared", 4: "coopmat2 tensor"}[p.get("mma")] + f" wg{p['invocations']}"
        return f"{mma} {p['tile_m']}x{p['tile_n']}x{p['tile_k']}"
    mma = {1: "mma.sync", 2: "wgmma", 3: "wgmma+1 in flight", 4: "wgmma WS", 5: "wgmma WS persistent"}.get(
        p.get("mma", 0), "coopmat")
    size = "" if (p["m"], p["n"], p["k"]) in ((4096, 4096, 4096), (4224, 4096, 4096)) else \
        f" [{p['m']}x{p['n']}x{p['k']}]"
    return f"{mma} {p['tile_m']}x{p['tile_n']}x{p['tile_k']}" + (f", {p['stages']} st" if "stages" in p else "") + size


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("devices", nargs="*", default=["vulkan://", "cuda://"])
    ap.add_argument("--budget", type=float, default=240.0, help="seconds after which no variant starts")
    ap.add_argument("--quick", action="store_true", help="fewer variants")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON here")
    ap.add_argument("--kinds", help="comma-separated kinds to run (default: all), e.g. gemm-f16,gemm-bf16")
    ap.add_argument("--match", help="run only the variants whose label matches this regular expression")
    args = ap.parse_args()

    import halbench
    from halbench.bench.micro import Unsupported, prepare_micro
    from halbench.errors import HalbenchError

    start = time.perf_counter()
    rows: list[dict] = []
    failed = False
    for uri in args.devices:
        api = uri.partition("://")[0]
        try:
            dev = halbench.create_device(uri)
        except HalbenchError as e:
            print(f"{uri}: unavailable: {e}", flush=True)
            continue
        print(f"{uri}: {dev.info.name}", flush=True)
        try:
            for kind, p in variants(api, args.quick):
                if args.kinds and kind not in args.kinds.split(","):
                    continue
                if args.match and not re.search(args.match, label(kind, p)):
                    continue
                row = {"device": uri, "kind": kind, "variant": label(kind, p), "params": p}
                if time.perf_counter() - start > args.budget:
                    row.update(status="not run (budget)")
                    rows.append(row)
                    continue
                try:
                    mb = prepare_micro(kind, dev, p)
                except Unsupported as e:
                    row.update(status=f"skipped: {e}")
                    rows.append(row)
                    print(f"  {kind:15s} {row['variant']:36s} {row['status']}", flush=True)
                    continue
                except HalbenchError as e:
                    row.update(status=f"error: {e}")
                    rows.append(row)
                    failed = True
                    print(f"  {kind:15s} {row['variant']:36s} {row['status']}", flush=True)
                    continue
                try:
                    ms = measure(mb)
                    chk = mb.check()
                    unit, scale = ("TB/s", 1e12) if "bytes" in mb.metrics else ("TFLOP/s", 1e12)
                    value = next(iter(mb.metrics.values())) / (ms * 1e-3) / scale
                    ok = bool(chk.get("passed"))
                    failed |= not ok
                    row.update(status="ok" if ok else f"WRONG ({chk.get('max_abs_error')} > {chk.get('tolerance')})",
                               ms=ms, value=value, unit=unit, note=chk.get("note", ""))
                    print(f"  {kind:15s} {row['variant']:36s} {value:9.2f} {unit:8s} {ms:9.3f} ms  "
                          f"{row['status']}", flush=True)
                except HalbenchError as e:
                    row.update(status=f"error: {e}")
                    failed = True
                    print(f"  {kind:15s} {row['variant']:36s} {row['status']}", flush=True)
                finally:
                    mb.close()
                rows.append(row)
        finally:
            dev.close()

    print("\n| device | kind | variant | rate | bar | meets | check |")
    print("|---|---|---|---|---|---|---|")
    best: dict[tuple[str, str], dict] = {}
    for r in rows:
        api = r["device"].partition("://")[0]
        bar = BARS.get((r["kind"], api))
        if "value" in r:
            meets = "yes" if bar is not None and r["value"] >= bar else "no"
            print(f"| {r['device']} | {r['kind']} | {r['variant']} | {r['value']:.2f} {r['unit']} | "
                  f"{bar if bar is not None else '-'} | {meets} | {r['status']} |")
            key = (r["device"], r["kind"])
            if r["status"] == "ok" and (key not in best or r["value"] > best[key]["value"]):
                best[key] = r
        else:
            print(f"| {r['device']} | {r['kind']} | {r['variant']} | - | {bar or '-'} | - | {r['status']} |")
    print("\nbest per device and kind (must-show bars of issue #12):")
    for (uri, kind), r in sorted(best.items()):
        bar = BARS.get((kind, uri.partition("://")[0]))
        verdict = "" if bar is None else ("MEETS" if r["value"] >= bar else "BELOW") + f" the {bar} bar"
        print(f"  {uri:10s} {kind:15s} {r['value']:8.2f} {r['unit']:8s} {r['variant']:36s} {verdict}")
    print(f"\n{time.perf_counter() - start:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
