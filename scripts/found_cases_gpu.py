"""The op fuzzer's fixed cases (tests/compiler/test_op_fuzz.py FOUND) on a GPU machine, which has no
MLIR front end: compile them here, run them there against onnxruntime's answers.

Usage (here):     PYTHONPATH=$PWD python scripts/found_cases_gpu.py compile DIR [--target h100]
      (GPU):      python scripts/found_cases_gpu.py run DIR cuda://0 vulkan://0
DIR holds NAME.hbx (cuda sm_90 cubin + Vulkan, and local) and NAME.npz (the inputs and onnxruntime's
output); ``run`` prints one row per case and device, and exits 1 when any case differs.

The fuzzer's draws on the GPU (a corpus, since the GPU machine cannot compile):
      (here):     PYTHONPATH=$PWD python scripts/found_cases_gpu.py draw DIR --per-family 20 --seed 7 [FAMILY ...]
      (GPU):      python scripts/found_cases_gpu.py run DIR cuda://0 vulkan://0 --table FILE
``draw`` takes each GPU family of test_op_fuzz.py (all by default), draws with hypothesis from the
seed, keeps the draws onnxruntime and the ONNX reference agree on and halbench compiles (cuda sm_90
cubin and Vulkan for the h100 target), and writes FAMILY-NNN.hbx / .npz (with the drawn node's text).
With ``--table`` the run writes every row there and prints only the differing ones and a count per
family.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np


def _feeds(case) -> dict[str, np.ndarray]:
    """The case's inputs as the fuzzer draws them (seed 0, its element type)."""
    import onnx

    rng = np.random.default_rng(0)
    dt = np.float16 if case.in_type == onnx.TensorProto.FLOAT16 else np.float32
    return {n: rng.standard_normal(s).astype(dt) for n, s in case.inputs.items()}


def compile_all(out: Path) -> None:
    import onnx

    from halbench.compiler import CompileOptions, compile_model
    from tests.compiler.helpers import onnx_reference
    from tests.compiler.test_op_fuzz import FOUND

    out.mkdir(parents=True, exist_ok=True)
    for name, case in sorted(FOUND.items()):
        feeds = _feeds(case)
        with tempfile.TemporaryDirectory() as td:
            path = Path(td) / "m.onnx"
            onnx.save(case.model(), path)
            ref = onnx_reference(path, feeds)[0]
            opts = CompileOptions(target_devices=("cuda", "vulkan", "local"), targets={"cuda": "h100", "vulkan": "h100"},
                                  backend_options={"cuda-formats": "cubin"})
            compile_model(path, opts).write(out / f"{name}.hbx")
        np.savez(out / f"{name}.npz", ref=ref, atol=case.atol, rtol=case.rtol,
                 **{f"in_{k}": v for k, v in feeds.items()})
        print(f"{name}: compiled", flush=True)


def draw_all(out: Path, per_family: int, seed: int, families: list[str]) -> None:
    import onnx
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed

    from halbench.compiler import CompileOptions, compile_model
    from halbench.errors import HalbenchError
    from tests.compiler.helpers import onnx_reference
    from tests.compiler.test_op_fuzz import GPU_FAMILIES, STRATEGIES, _references_agree

    out.mkdir(parents=True, exist_ok=True)
    for fam in families or list(GPU_FAMILIES):
        drawn: list = []

        @settings(max_examples=per_family * 2, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @hseed(seed)
        @given(STRATEGIES[fam])
        def collect(case) -> None:
            drawn.append(case)  # noqa: B023 -- run at once, within this iteration

        collect()
        kept = refused = 0
        for i, case in enumerate(drawn):
            if kept >= per_family:
                break
            feeds = _feeds(case)
            with tempfile.TemporaryDirectory() as td:
                path = Path(td) / "m.onnx"
                onnx.save(case.model(), path)
                try:
                    ref = onnx_reference(path, feeds)[0]
                except Exception:  # noqa: BLE001, S112 -- a form onnxruntime refuses is not a case
                    continue
                if not (ref.size > 0 and np.all(np.isfinite(ref)) and _references_agree(case, feeds, ref)):
                    continue
                opts = CompileOptions(target_devices=("cuda", "vulkan"), targets={"cuda": "h100", "vulkan": "h100"},
                                      backend_options={"cuda-formats": "cubin"})
                try:
                    compile_model(path, opts).write(out / f"{fam}-{i:03d}.hbx")
                except HalbenchError:
                    refused += 1
                    continue
            np.savez(out / f"{fam}-{i:03d}.npz", ref=ref, atol=case.atol, rtol=case.rtol, case=np.array(repr(case)),
                     **{f"in_{k}": v for k, v in feeds.items()})
            kept += 1
        print(f"{fam}: {kept} drawn cases compiled, {refused} refused", flush=True)


def run_all(src: Path, uris: list[str], table: Path | None = None) -> int:
    import collections

    import halbench
    from halbench.runtime import Module

    bad = 0
    rows = [f"| case | {' | '.join(uris)} |", "|---|" + "---|" * len(uris)]
    per_family: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    if table is None:
        print(*rows, sep="\n")
    devices = {uri: halbench.create_device(uri) for uri in uris}  # once: contexts are not free
    for bundle in sorted(src.glob("*.hbx")):
        data = np.load(bundle.with_suffix(".npz"))
        ref, atol, rtol = data["ref"].astype(np.float64), float(data["atol"]), float(data["rtol"])
        feeds = {k[3:]: data[k] for k in data.files if k.startswith("in_")}
        cells = []
        for uri in uris:
            try:
                mod = Module.load(bundle, devices[uri])
                try:
                    out = mod.invoke(None, [feeds[s.name] for s in mod.function(None).inputs])[0]
                finally:
                    mod.close()
            except Exception as e:  # noqa: BLE001 -- a case that fails to load or run is a finding
                cells.append(f"WRONG (error: {' '.join(str(e).split())[:160]})")
                bad += 1
                continue
            scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
            ok = out.shape == ref.shape and not (np.abs(out.astype(np.float64) - ref)
                                                 > atol * scale + rtol * np.abs(ref)).any()
            err = (float(np.max(np.abs(out.astype(np.float64) - ref), initial=0.0)) if out.shape == ref.shape
                   else float("nan"))
            cells.append(f"{'ok' if ok else 'WRONG'} ({err:.1e})")
            bad += not ok
        row = f"| {bundle.stem} | {' | '.join(cells)} |"
        fam = bundle.stem.rsplit("-", 1)[0]
        per_family[fam][0] += 1
        wrong = any(c.startswith("WRONG") for c in cells)
        per_family[fam][1] += wrong
        if "case" in data.files:
            row += f" {data['case']} |" if wrong else ""
        rows.append(row)
        if table is None or wrong:
            print(row, flush=True)
    for dev in devices.values():
        dev.close()
    if table is not None:
        table.write_text("\n".join(rows) + "\n")
        for fam, (n, w) in sorted(per_family.items()):
            print(f"{fam}: {n} cases, {w} differing on some device")
        print(f"{sum(n for n, _ in per_family.values())} cases, {bad} differing results", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["compile", "draw", "run"])
    ap.add_argument("dir", type=Path)
    ap.add_argument("rest", nargs="*", help="run: device URIs; draw: families")
    ap.add_argument("--per-family", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table", type=Path, default=None)
    a = ap.parse_intermixed_args()
    if a.mode == "compile":
        compile_all(a.dir)
    elif a.mode == "draw":
        draw_all(a.dir, a.per_family, a.seed, a.rest)
    else:
        sys.exit(run_all(a.dir, a.rest or ["cuda://0", "vulkan://0"], a.table))
