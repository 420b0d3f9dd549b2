"""Bundles for an A/B of the Vulkan GEMM's register staging (kernels.GLSL_STAGING), compiled
here (the GPU machine has no ONNX front end) and timed there with scripts/ab_models.py.

Usage: python scripts/vk_staging_ab.py DIR TAG [default|double|vec4|a|b|none|all] [--apis vulkan,cuda] [--abi bda|descriptors]
       [--models resnet50:1,resnet50:8,mobilenetv2:8]
writes DIR/MODEL-bB-TAG.hbx (--weights random, target h100, BDA ABI; the tuning cache is
$HALBENCH_TUNING_CACHE). Run with PYTHONPATH at another checkout for its code (tag A: main);
a checkout without GLSL_STAGING ignores the switches.
       python scripts/vk_staging_ab.py pack DIR | unpack DIR
moves the bundles' weights/ members to DIR/weights/SHA256.bin, one copy each (the carry to the
GPU machine is small), and puts them back there.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import time
import zipfile
from pathlib import Path


def _repack(path: Path, store: Path, out: bool) -> None:
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(path) as z, zipfile.ZipFile(tmp, "w") as w:
        for info in z.infolist():
            data = z.read(info)
            if out and info.filename.startswith("weights/"):
                (store / f"{hashlib.sha256(data).hexdigest()}.bin").write_bytes(data)
                continue
            w.writestr(info, data, compress_type=info.compress_type)
        if not out:
            for name, digest in json.loads(z.read("manifest.json"))["members"].items():
                if name.startswith("weights/") and name not in z.namelist():
                    w.writestr(zipfile.ZipInfo(name), (store / f"{digest}.bin").read_bytes())
    tmp.replace(path)


def main() -> None:
    if sys.argv[1] in ("pack", "unpack"):
        d = Path(sys.argv[2])
        (d / "weights").mkdir(exist_ok=True)
        for p in sorted(d.glob("*.hbx")):
            _repack(p, d / "weights", sys.argv[1] == "pack")
        return
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    opts = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
    out, tag = Path(args[0]), args[1]
    mode = args[2] if len(args) > 2 else "all"
    from halbench.compiler.codegen import kernels

    if hasattr(kernels, "GLSL_STAGING") and mode != "default":  # default: the checkout's own
        kernels.GLSL_STAGING.update(double=mode in ("double", "all"), vec4_a=mode in ("vec4", "a", "all"),
                                    vec4_b=mode in ("vec4", "b", "all"))
    import onnx

    from halbench.bench import zoo
    from halbench.compiler import CompileOptions, compile_model

    apis = tuple(opts.get("apis", "vulkan,cuda").split(","))
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    for spec in opts.get("models", "resnet50:1,resnet50:8,mobilenetv2:8").split(","):
        model, batch = spec.split(":")
        t0 = time.perf_counter()
        src = tmp / f"{model}-b{batch}.onnx"
        onnx.save(zoo.build(model, batch=int(batch)), src)
        o = CompileOptions(target_devices=apis, weights="random", targets={a: "h100" for a in apis},
                           backend_options={"vulkan-dispatch-abi": opts.get("abi", "bda")})
        compile_model(src, o).write(out / f"{model}-b{batch}-{tag}.hbx")
        print(f"{model} b{batch} {tag} ({mode}, {'/'.join(apis)}): {time.perf_counter() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
