"""Where PyTorch spends a zoo model's time on the GPU, kernel by kernel, beside halbench's dispatches:
torch.compile (or the CUDA graph) run through the torch peer (the ONNX file via onnx2torch, the same
seeded weights), profiled by torch.profiler (CUPTI, CUDA kernels only) over a few replays, and a
halbench bundle of the same model profiled per dispatch (device timestamps).

Usage (on the GPU machine): python scripts/torch_kernel_profile.py MODEL BATCH [--mode compile|cudagraph]
    [--bundle B.hbx[s] --store DIR] [--precision fp32]
Prints the top kernels by total time per replay (µs), their count per replay and the sums, then
halbench's dispatches summed by kind.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_precision import _kw, _onnx, _unpack, torch_cuda_device  # the sibling script's helpers


def torch_kernels(onnx_path: Path, inputs: list[np.ndarray], mode: str, precision: str, replays: int = 10) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from halbench.peers import PeerSpec, get_peer

    dev = torch_cuda_device()
    with get_peer("torch").prepare(PeerSpec("torch", mode, {"precision": precision}), onnx_path, [], inputs,
                                   dev) as p:
        for _ in range(20):
            p.run()
        whole = float(np.median([p.run().device_ms for _ in range(100)]))
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(replays):
                p.run()
            torch.cuda.synchronize()
    agg: dict[str, list[float]] = defaultdict(list)
    for e in prof.events():
        if e.device_type.name == "CUDA" and e.device_time > 0:
            agg[e.name].append(e.device_time)  # µs
    rows = sorted(((sum(v) / replays, len(v) / replays, k) for k, v in agg.items()), reverse=True)
    total = sum(r[0] for r in rows)
    print(f"torch {mode} {precision}: whole {whole:.3f} ms; kernels sum {total / 1e3:.3f} ms per replay, "
          f"{sum(r[1] for r in rows):.0f} kernels")
    for t, n, name in rows[:18]:
        print(f"  {t:8.1f} us  x{n:4.0f}  {name[:110]}")


def halbench_dispatches(bundle: Path, inputs: dict[str, np.ndarray]) -> None:
    import halbench
    from halbench.runtime import Module

    with halbench.create_device("cuda://0") as dev, Module.load(bundle, dev) as mod:
        ins = [inputs[s.name] for s in mod.function(None).inputs]
        for _ in range(3):
            mod.profile(None, ins, runs=10, warmup=0, dispatch_times=False)
        whole = float(np.median(mod.profile(None, ins, runs=25, warmup=3, dispatch_times=False).total_ns)) / 1e6
        pb = mod.profile(None, ins, runs=10, warmup=2)
        per = np.median(np.array(pb.dispatch_ns), axis=0) / 1e3
    agg: dict[str, list[float]] = defaultdict(list)
    for d, t in zip(pb.dispatches, per):
        agg[d.name].append(float(t))
    print(f"halbench {bundle.name}: whole {whole:.3f} ms; dispatches sum {sum(per) / 1e3:.3f} ms, {len(per)} dispatches")
    for name, ts in sorted(agg.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {sum(ts):8.1f} us  x{len(ts):4d}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("batch", type=int)
    ap.add_argument("--mode", default="compile")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--bundle", type=Path, default=None, help="a .hbx, or a gpu_precision.py pack (.hbxs, with --store)")
    ap.add_argument("--store", type=Path, default=None)
    a = ap.parse_args()
    from halbench.bench import zoo

    tmp = Path(tempfile.mkdtemp())
    feeds = zoo.make_inputs(a.model, **_kw(a.model, a.batch))
    torch_kernels(_onnx(a.model, a.batch, tmp), list(feeds.values()), a.mode, a.precision)
    if a.bundle is not None:
        bundle = a.bundle
        if bundle.suffix == ".hbxs":
            bundle = _unpack(bundle, a.store, tmp / (bundle.stem + ".hbx"))
        halbench_dispatches(bundle, feeds)


if __name__ == "__main__":
    sys.exit(main())
