"""A/B/C... of codegen changes on the GPU: bundles of the same zoo models compiled by
different halbench versions, interleaved on each device in one process, each timed whole (as
PyTorch's CUDA graph replay is) and checked against onnxruntime, with PyTorch (CUDA graph)
timed on the same model file beside them.

Usage: python scripts/ab_models.py DIR DEVICE [DEVICE ...] [--torch-precision fp32|tf32|f16|bf16]
DIR holds MODEL-bBATCH-TAG.hbx files (halbench compile --weights random; TAG A is the
baseline); the ONNX file they were compiled from is rebuilt from the zoo with the same seeds.
A TAG ending in "nd" is run with the device's dependent launches off (GpuDevice.dependent_launch;
a copy of another tag's bundle then times programmatic edges against plain ones); a TAG ending in "nj" with the
CUDA device's programmatic joins off (GpuDevice.programmatic_joins: an empty node after a level of several kernels).
--torch-precision times PyTorch at that precision (TF32, or autocast f16 / bf16), for bundles
compiled with --precision; fp32 (TF32 off) by default.
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.runtime import Module


def _reference(onnx_path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    sess = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _max_rel_err(out: list[np.ndarray], ref: list[np.ndarray] | None) -> float:
    """The worst output's max |out - ref| / max |ref| (NaN without a reference)."""
    if ref is None:
        return float("nan")
    return max(float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-30)) for x, y in zip(out, ref))


def _torch_ms(onnx_path: Path, inputs: list[np.ndarray], mode: str, precision: str = "fp32") -> float | None:
    try:
        from halbench.peers import PeerSpec, get_peer
    except ImportError:
        return None
    try:
        from types import SimpleNamespace

        peer = get_peer("torch")
        dev = SimpleNamespace(uri="cuda://0", driver="cuda", ordinal=0, uuid=None, info={},
                              identity=SimpleNamespace(name=None, vendor=None, vendor_id=None, uuid=None, arch=None,
                                                       compute_capability=None, driver_id=None))
        spec = PeerSpec("torch", mode, {"precision": precision} if precision != "fp32" else {})
        with peer.prepare(spec, onnx_path, [], inputs, dev) as p:
            for _ in range(20):
                p.run()
            return float(np.median([p.run().device_ms for _ in range(200)]))
    except Exception as e:  # noqa: BLE001 -- a peer failure must not lose halbench's rows
        print(f"  torch-{mode}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None


def main() -> None:
    args = sys.argv[1:]
    precision = "fp32"
    if "--torch-precision" in args:
        i = args.index("--torch-precision")
        precision = args[i + 1]
        del args[i:i + 2]
    root, *devices = args
    found: dict[tuple[str, str], list[str]] = {}
    for p in Path(root).glob("*.hbx"):
        if m := re.fullmatch(r"(.+)-b(\d+)-([A-Za-z0-9]+)\.hbx", p.name):
            found.setdefault((m.group(1), m.group(2)), []).append(m.group(3))
    rows = []
    tmp = Path(tempfile.mkdtemp())
    for (model, batch), tags in sorted(found.items()):
        tags = sorted(tags)  # the first (A) is the baseline
        kw = {"batch": int(batch), **({"seq": 128} if model.startswith("minilm") else {})}
        from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

        m = zoo.build(model, **kw)
        randomize_onnx(m, RANDOM_SEED)
        import onnx

        onnx_path = tmp / f"{model}-b{batch}.onnx"
        onnx.save(m, onnx_path)
        feeds = zoo.make_inputs(model, **kw)
        ref = _reference(onnx_path, feeds)
        torch_ms = _torch_ms(onnx_path, list(feeds.values()), "cudagraph", precision) if devices else None
        for uri in devices:
            try:
                with halbench.create_device(uri) as dev:
                    pdl = getattr(dev, "dependent_launch", None)

                    def use(t: str, dev=dev, pdl=pdl) -> None:  # command buffers record the flags
                        if pdl is not None:
                            dev.dependent_launch = pdl and not t.endswith("nd")
                        if hasattr(dev, "programmatic_joins"):  # a tag ending in "nj": empty join nodes
                            dev.programmatic_joins = not t.endswith("nj")

                    mods = []
                    for t in tags:
                        use(t)
                        mods.append(Module.load(Path(root) / f"{model}-b{batch}-{t}.hbx", dev))
                    try:
                        inputs = [feeds[s.name] for s in mods[0].function(None).inputs]
                        errs = []
                        for mod in mods:
                            out = mod.invoke(None, inputs)
                            errs.append(_max_rel_err(out, ref))
                        # Clocks rise after ~0.2 s of load (NVIDIA's Vulkan measured 1.7x slower before).
                        for t, mod in zip(tags, mods):
                            use(t)
                            t0 = time.monotonic()
                            while time.monotonic() - t0 < 0.5:
                                mod.profile(None, inputs, runs=10, warmup=0, dispatch_times=False)
                        times: list[list[float]] = [[] for _ in mods]
                        for _ in range(6):
                            for mod, ts in zip(mods, times):
                                ts += list(mod.profile(None, inputs, runs=25, warmup=3, dispatch_times=False).total_ns)
                        use(tags[-1])
                        pb = mods[-1].profile(None, inputs, runs=20, warmup=3)
                    finally:
                        for mod in mods:
                            mod.close()
                med = [float(np.median(ts)) / 1e6 for ts in times]
                for t, ms, err in zip(tags, med, errs):
                    rows.append((model, batch, uri, t, ms, ms / med[0], err, torch_ms))
                print(f"{model} b{batch} {uri:10} " + "  ".join(f"{t} {ms:.3f}" for t, ms in zip(tags, med)), flush=True)
                per = np.median(np.array(pb.dispatch_ns), axis=0) / 1e6
                top = sorted(zip(per, [d.name for d in pb.dispatches]), reverse=True)[:6]
                print(f"   {tags[-1]}: {len(per)} dispatches, sum {per.sum():.3f} ms; top:",
                      ", ".join(f"{n} {t:.3f}" for t, n in top), flush=True)
            except Exception as e:  # noqa: BLE001 -- one failing model must not lose the others
                print(f"{model} b{batch} {uri}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    print(f"\n| model | device | bundle | ms (timed whole) | / A | rel. error vs ORT | torch cudagraph {precision} ms | / torch |")
    print("|---|---|---|---|---|---|---|---|")
    for model, batch, uri, t, ms, r, err, tc in rows:
        tcs, rt = (f"{tc:.3f}", f"{ms / tc:.2f}") if tc else ("-", "-")
        print(f"| {model} b{batch} | {uri} | {t} | {ms:.3f} | {r:.3f} | {err:.1e} | {tcs} | {rt} |")


if __name__ == "__main__":
    main()
