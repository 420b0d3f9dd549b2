"""int8 on the GPU machine, Vulkan beside CUDA: the dot-int8 micro (peak/dot/int8 of the
device-peaks suite, at the suite's size) on vulkan:// and cuda://, MatMulInteger bundles checked
exactly against onnxruntime on both, and the --*-target each device's dump recommends.

The GPU machine has no MLIR compiler: build the bundles here, carry the folder, run there.

Usage: python scripts/check_int8_vulkan.py --build .hbw/int8                (here: compile)
       source .gpu/setup.sh; python3 scripts/check_int8_vulkan.py .hbw/int8  (there: run)
       python scripts/check_int8_vulkan.py .hbw/int8 --quick    (a small micro, e.g. on lavapipe)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

# (name, a type, b type, M, K, N): ONNX's MatMulInteger with zero points, odd and tiled sizes.
CASES = [("u8xi8_odd", "uint8", "int8", 5, 37, 7), ("u8xi8", "uint8", "int8", 256, 1024, 512),
         ("i8xi8", "int8", "int8", 128, 768, 384), ("u8xu8", "uint8", "uint8", 64, 512, 256)]
DEVICES = ("vulkan://", "cuda://")
MICRO = {"workgroups": 8192, "iters": 4096}  # suites/device-peaks.yaml, peak/dot/int8


def _model(path: Path, a_t: str, b_t: str, m: int, k: int, n: int) -> None:
    import onnx
    from onnx import helper

    tp = {"uint8": onnx.TensorProto.UINT8, "int8": onnx.TensorProto.INT8}
    rng = np.random.default_rng(3)
    info = np.iinfo(b_t)
    w = rng.integers(info.min, info.max, size=(k, n), endpoint=True).astype(b_t)
    b_zp = (rng.integers(-3, 4, size=n) + (3 if b_t == "uint8" else 0)).astype(b_t)
    inits = [helper.make_tensor("w", tp[b_t], [k, n], w.tobytes(), raw=True),
             helper.make_tensor("a_zp", tp[a_t], [], [5 if a_t == "uint8" else -4]),
             helper.make_tensor("b_zp", tp[b_t], [n], b_zp.tolist())]
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w", "a_zp", "b_zp"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", tp[a_t], [m, k])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.INT32, [m, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path)


def build(out: Path) -> None:
    import onnxruntime as ort

    from halbench.compiler.compile import CompileOptions, compile_model

    out.mkdir(parents=True, exist_ok=True)
    for name, a_t, b_t, m, k, n in CASES:
        onnx_path = out / f"{name}.onnx"
        _model(onnx_path, a_t, b_t, m, k, n)
        info = np.iinfo(a_t)
        a = np.random.default_rng(1).integers(info.min, info.max, size=(m, k), endpoint=True).astype(a_t)
        (ref,) = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"a": a})
        np.savez(out / f"{name}.npz", a=a, ref=ref)
        # One bundle per target choice: vulkan-generic (the safe default), and the H100 entry (what
        # dump-devices recommends there). CUDA gets sm_90 in the first: NVRTC 13 cannot build the
        # sm_60 default any more.
        for tag, targets in (("generic", {"cuda": "sm_90"}), ("h100", {"vulkan": "h100", "cuda": "h100"})):
            opts = CompileOptions(target_devices=("vulkan", "cuda"), targets=targets)
            compile_model(onnx_path, opts).write(out / f"{name}.{tag}.hbx")
        print("built", name)


def _micro_row(uri: str) -> str:
    import halbench
    from halbench.bench.micro import Unsupported, prepare_micro
    from halbench.compiler.targets import published_peaks

    try:
        dev = halbench.create_device(uri)
    except Exception as e:  # noqa: BLE001 - report the reason and go on
        return f"{uri:10} unavailable: {str(e)[:90]}"
    try:
        mb = prepare_micro("dot-int8", dev, MICRO)
    except Unsupported as e:
        dev.close()
        return f"{uri:10} skipped: {e}"
    try:
        for _ in range(3):
            mb.run()
        ms = [mb.run().device_ms for _ in range(20)]
        check = mb.check()
        med = float(np.median(ms))
        tops = mb.metrics["flops"] / (med * 1e-3) / 1e12
        peak = published_peaks(dev.info).get("compute_tflop_s", {}).get("i8")
        how = check.get("note", "").split("; ", 2)[-1]
        return (f"{uri:10} {dev.info.name[:24]:24} {med:9.3f} {tops:9.2f} "
                f"{(str(peak) if peak else '-'):>10} {'exact' if check['passed'] else 'WRONG':6} {mb.format}  {how}")
    finally:
        mb.close()
        dev.close()


def _matmul_rows(folder: Path) -> list[str]:
    import halbench
    from halbench.runtime.module import Module

    rows = []
    for uri in DEVICES:
        try:
            dev = halbench.create_device(uri)
        except Exception as e:  # noqa: BLE001
            rows.append(f"{uri:10} unavailable: {str(e)[:90]}")
            continue
        for name, *_ in CASES:
            data = np.load(folder / f"{name}.npz")
            for tag in ("generic", "h100"):
                try:
                    mod = Module.load(str(folder / f"{name}.{tag}.hbx"), dev)
                    try:
                        (out,) = mod.invoke(None, {"a": data["a"]})
                    finally:
                        mod.close()
                    diff = int(np.count_nonzero(out != data["ref"]))
                    verdict = "exact" if diff == 0 and out.dtype == np.int32 else f"WRONG ({diff} differ)"
                except Exception as e:  # noqa: BLE001 - one line per failure, the table goes on
                    verdict = f"ERROR {type(e).__name__}: {str(e)[:80]}"
                rows.append(f"{uri:10} {name:10} {tag:8} {data['ref'].shape!s:12} {verdict}")
        dev.close()
    return rows


def run(folder: Path) -> None:
    print("=== compile targets dump-devices recommends")
    proc = subprocess.run([sys.executable, "-m", "halbench", "dump-devices", "--format", "json"],
                          capture_output=True, text=True, check=False)
    try:
        doc = json.loads(proc.stdout)
        for drv in doc["drivers"]:
            for d in drv["devices"]:
                print(f"{d['uri']:14} {d['identity']['name'][:32]:32} {d.get('compile_target', {}).get('flag', '-')}")
    except (ValueError, KeyError) as e:
        print("dump-devices failed:", e, proc.stderr[-300:])
    print(f"\n=== peak/dot/int8 ({MICRO['workgroups']} workgroups x 256, {MICRO['iters']} iterations, "
          f"16 dp4a per iteration)")
    print(f"{'device':10} {'name':24} {'median ms':>9} {'TOP/s':>9} {'pub. i8':>10} {'check':6} format  how")
    for uri in DEVICES:
        print(_micro_row(uri))
    print("\n=== MatMulInteger vs onnxruntime (bundles built with --build)")
    for row in _matmul_rows(folder):
        print(row)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--build":
        build(Path(sys.argv[2]))
    elif len(sys.argv) in (2, 3) and not sys.argv[1].startswith("-") and sys.argv[2:] in ([], ["--quick"]):
        if sys.argv[2:]:
            MICRO.update(workgroups=16, iters=256)
        run(Path(sys.argv[1]))
    else:
        sys.exit(__doc__)
