"""A/B of a codegen change on the GPU: bundles of the same zoo models compiled before (A) and
after (B), interleaved on each device in one process, B's outputs checked against A's and
onnxruntime's, with PyTorch (CUDA graph) timed on the same model file beside them.

Usage: python scripts/ab_models.py DIR DEVICE [DEVICE ...]
DIR holds MODEL-bB-A.hbx / MODEL-bB-B.hbx pairs (scripts/precompile-style, --weights random);
the ONNX file each was compiled from is rebuilt from the zoo (same seeds). Prints one table row
per (model, device): A and B median device ms, B/A, B's max relative error, and torch's ms.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
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


def _torch_ms(onnx_path: Path, inputs: list[np.ndarray], mode: str) -> float | None:
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
        with peer.prepare(PeerSpec("torch", mode), onnx_path, [], inputs, dev) as p:
            for _ in range(20):
                p.run()
            return float(np.median([p.run().device_ms for _ in range(200)]))
    except Exception as e:  # noqa: BLE001 -- a peer failure must not lose halbench's rows
        print(f"  torch-{mode}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return None


def _unprofiled(uri: str, path: Path, inputs: list[np.ndarray]) -> float | None:
    """The event-free graph's time (HALBENCH_<API>_UNPROFILED_TOTAL): timed as PyTorch's graph
    replay is, with events around the whole submission only."""
    api = uri.partition("://")[0]
    if api not in ("cuda", "hip"):
        return None
    var = f"HALBENCH_{api.upper()}_UNPROFILED_TOTAL"
    os.environ[var] = "1"
    try:
        with halbench.create_device(uri) as dev, Module.load(path, dev) as mod:
            return float(np.median(mod.profile(None, inputs, runs=100, warmup=5).total_ns)) / 1e6
    finally:
        del os.environ[var]


def main() -> None:
    root, *devices = sys.argv[1:]
    pairs = sorted({m.group(1, 2) for p in Path(root).glob("*-A.hbx")
                    if (m := re.fullmatch(r"(.+)-b(\d+)-A\.hbx", p.name))})
    rows = []
    tmp = Path(tempfile.mkdtemp())
    for model, batch in pairs:
        b_path = Path(root) / f"{model}-b{batch}-B.hbx"
        a_path = Path(root) / f"{model}-b{batch}-A.hbx"
        if not b_path.exists():
            continue
        kw = {"batch": int(batch), **({"seq": 128} if model.startswith("minilm") else {})}
        from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

        m = zoo.build(model, **kw)
        randomize_onnx(m, RANDOM_SEED)
        import onnx

        onnx_path = tmp / f"{model}-b{batch}.onnx"
        onnx.save(m, onnx_path)
        feeds = zoo.make_inputs(model, **kw)
        ref = _reference(onnx_path, feeds)
        torch_ms = {mode: _torch_ms(onnx_path, list(feeds.values()), mode) for mode in ("cudagraph",)}
        for uri in devices:
            try:
                with halbench.create_device(uri) as dev, Module.load(a_path, dev) as a, Module.load(b_path, dev) as b:
                    inputs = [feeds[s.name] for s in a.function(None).inputs]
                    out_b = b.invoke(None, inputs)
                    out_a = a.invoke(None, inputs)
                    err_a = max(float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-30)) for x, y in zip(out_b, out_a))
                    err_r = (max(float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-30)) for x, y in zip(out_b, ref))
                             if ref is not None else float("nan"))
                    ta, tb = [], []
                    for _ in range(6):
                        ta += list(a.profile(None, inputs, runs=25, warmup=3).total_ns)
                        tb += list(b.profile(None, inputs, runs=25, warmup=3).total_ns)
                    pb = b.profile(None, inputs, runs=20, warmup=3)
                    per = np.median(np.array(pb.dispatch_ns), axis=0) / 1e6 if getattr(pb, "dispatch_ns", None) else None
                    ma, mb = np.median(ta) / 1e6, np.median(tb) / 1e6
                    un = _unprofiled(uri, b_path, inputs)
                    rows.append((model, batch, uri, ma, mb, mb / ma, err_a, err_r, torch_ms.get("cudagraph"), un))
                    print(f"{model} b{batch} {uri:10} A {ma:.3f} ms  B {mb:.3f} ms  B/A {mb / ma:.3f}  "
                          f"err(B,A) {err_a:.1e} err(B,ort) {err_r:.1e}", flush=True)
                    if per is not None:
                        infos = pb.dispatches
                        top = sorted(zip(per, [d.name for d in infos]), reverse=True)[:6]
                        print("   top dispatches (B):", ", ".join(f"{n} {t:.3f}" for t, n in top), flush=True)
            except Exception as e:  # noqa: BLE001 -- one failing model must not lose the others
                print(f"{model} b{batch} {uri}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    print("\n| model | device | A ms | B ms | B/A | B unprofiled ms | err vs A | err vs ORT | torch cudagraph ms | B/torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, batch, uri, ma, mb, r, ea, er, tc, un in rows:
        tcs = f"{tc:.3f}" if tc else "-"
        best = un if un else mb
        rt = f"{best / tc:.2f}" if tc else "-"
        uns = f"{un:.3f}" if un else "-"
        print(f"| {model} b{batch} | {uri} | {ma:.3f} | {mb:.3f} | {r:.3f} | {uns} | {ea:.1e} | {er:.1e} | {tcs} | {rt} |")


if __name__ == "__main__":
    main()
