"""Zoo-model bundles compiled with one code-generation switch changed, for scripts/ab_models.py and
scripts/api_dispatches.py on the GPU: what a switch is worth whole, and where a Vulkan / CUDA gap
comes from.

Each TAG compiles MODEL-bBATCH-TAG.hbx (fp32, --weights random, target h100, CUDA cubin and Vulkan
BDA unless the tag says otherwise) in this process, with the switch set before anything compiles:
  A          as halbench compiles today (the baseline)
  nosplit4   gemm.j2 SPLIT4 off (a split GEMM's partial sums element by element)
  noak       gemm.j2 AK off (A staged M-contiguous by 4-byte cp.async copies)
  nost4      gemm.j2 finish4 off (the epilogue stored element by element)
  noasync    CUDA without cp.async (gemm.j2's scalar register staging; CUDA only)
  desc       the Vulkan descriptor ABI instead of BDA
  nohoist    passes/hoist_branches.py off (a residual's shallow branch left where the exporter put it)
  nolevels   passes/schedule_levels.py off (dispatches in the exporter's order: a barrier between branches)
  dwfuse     passes/fuse_depthwise.py on (a depthwise convolution computed inside the 1x1 one reading it)
  nowino     --winograd off (every 3x3 convolution direct: one dispatch, not three)
and ``--same-configs`` gives CUDA the Vulkan tuning cache's configuration for every GEMM, so a
dispatch runs the same tiles on both APIs (the thirteenth session's attribution of the ResNet-50
gap to cp.async: docs/examples/h200-vulkan-gap.txt).

Usage (here, with the compiler; the tuning cache from $HALBENCH_TUNING_CACHE, else the tracked one):
  PYTHONPATH=$PWD python scripts/switch_bundles.py OUT A noasync [--models resnet50] [--batches 1 8]
                                                   [--same-configs]
then on the GPU:  python scripts/ab_models.py OUT cuda://0 vulkan://0
(noasync bundles carry CUDA only: time a folder holding them on cuda://0 alone, and put them beside
Vulkan per dispatch with scripts/api_dispatches.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TAGS = ("A", "nosplit4", "noak", "nost4", "noasync", "desc", "nohoist", "nolevels", "dwfuse", "nowino")
MODELS = ("mobilenetv2", "resnet50", "minilm-l6")  # the default; any zoo model name is taken
TRACKED_CACHE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "h100-tuning"


def _same_configs(src: Path) -> Path:
    """A copy of the tuning cache ``src`` whose CUDA file holds the Vulkan file's entries."""
    doc = json.loads((src / "vulkan-h100.json").read_text())
    doc["api"] = "cuda"
    for e in doc["entries"].values():
        e["device"] = "cuda://0"
    out = Path(tempfile.mkdtemp(prefix="halbench-same-configs-"))
    (out / "cuda-h100.json").write_text(json.dumps(doc))
    (out / "vulkan-h100.json").write_text((src / "vulkan-h100.json").read_text())
    return out


def compile_tag(out: Path, tag: str, models: list[str], batches: list[int]) -> None:
    """Compile every model and batch for ``tag`` (in the calling process: the switches are module
    state, read at compile time)."""
    import onnx

    from halbench.bench import zoo
    from halbench.compiler import CompileOptions, compile_model
    from halbench.compiler.codegen import kernels

    devs: tuple[str, ...] = ("cuda", "vulkan")
    abi = "bda"
    fuse_dw = False
    wino = "auto"
    if tag == "nosplit4":
        kernels.GEMM_SPLIT4 = False
    elif tag == "noak":
        kernels.GEMM_AK = False
    elif tag == "nost4":
        kernels.GEMM_STORE4 = False
    elif tag == "noasync":
        kernels._async_ok = lambda *a, **k: False  # every GEMM register-staged
        devs = ("cuda",)
    elif tag == "desc":
        abi = "descriptors"
    elif tag == "nohoist":
        from halbench.compiler.passes import hoist_branches

        hoist_branches.ENABLED = False
    elif tag == "nolevels":
        from halbench.compiler.passes import schedule_levels

        schedule_levels.ENABLED = False
    elif tag == "dwfuse":
        fuse_dw = True
    elif tag == "nowino":
        wino = "off"
    elif tag != "A":
        sys.exit(f"unknown tag {tag!r}; use one of {', '.join(TAGS)}")
    tmp = Path(tempfile.mkdtemp(prefix="halbench-switch-"))
    for model in models:
        for b in batches:
            kw = {"batch": b, **({"seq": 128} if model.startswith("minilm") else {})}
            src = tmp / f"{model}-b{b}.onnx"
            onnx.save(zoo.build(model, **kw), src)
            opts = CompileOptions(target_devices=devs, weights="random", precision="fp32",
                                  targets={d: "h100" for d in devs},
                                  backend_options={"vulkan-dispatch-abi": abi, "cuda-formats": "cubin"},
                                  fuse_depthwise=fuse_dw, winograd=wino)
            dest = out / f"{model}-b{b}-{tag}.hbx"
            compile_model(src, opts).write(dest)
            print(f"{dest.name}: {dest.stat().st_size / 1e6:.1f} MB", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("tags", nargs="+", choices=TAGS)
    ap.add_argument("--models", nargs="+", default=list(MODELS), help="zoo model names (halbench zoo list)")
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--same-configs", action="store_true",
                    help="CUDA takes the Vulkan cache's configuration of every GEMM")
    ap.add_argument("--one-tag", help=argparse.SUPPRESS)  # a child process: compile this tag only
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.one_tag:
        compile_tag(a.out, a.one_tag, a.models, a.batches)
        return
    cache = Path(os.environ.get("HALBENCH_TUNING_CACHE") or TRACKED_CACHE)
    env = dict(os.environ, HALBENCH_TUNING_CACHE=str(_same_configs(cache) if a.same_configs else cache))
    for tag in a.tags:  # one process per tag: a switch set for one must not reach the next
        cmd = [sys.executable, __file__, str(a.out), tag, "--one-tag", tag, "--models", *a.models,
               "--batches", *map(str, a.batches)]
        subprocess.run(cmd, check=True, env=env)


if __name__ == "__main__":
    main()
