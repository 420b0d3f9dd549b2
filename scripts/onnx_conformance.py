#!/usr/bin/env python3
"""Run the ONNX backend node tests through halbench (or IREE) and count what passes.

    .venv/bin/python scripts/onnx_conformance.py                       # local-sync://, all plain cases
    .venv/bin/python scripts/onnx_conformance.py --device vulkan:// --api vulkan -k conv
    .venv/bin/python scripts/onnx_conformance.py --runtime iree        # IREE llvm-cpu, same judge
    .venv/bin/python scripts/onnx_conformance.py --only-passing out/local.json --device cuda:// --api cuda

Each case runs in a worker process; a worker that crashes or hangs costs only its current case
(recorded as ``crash`` / ``timeout``) and is restarted. ``-o`` writes every case's status and
message as JSON; the summary groups failures by their first words.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _iree_check(case, workdir: Path) -> tuple[str, str]:
    """``case`` through iree-base-compiler (onnx import, llvm-cpu) and iree-base-runtime (local-sync)."""
    import onnx
    from iree import runtime as rt
    from iree.compiler import compile_str
    from iree.compiler.extras import onnx_importer
    from iree.compiler import ir

    from tests.conformance.onnx_node import judge

    try:
        model = case.model
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset and opset < 17:
            try:
                model = onnx.version_converter.convert_version(model, 17)
            except Exception:  # noqa: BLE001 - keep the original; the importer may still take it
                model = case.model
        # The test's shapes for dynamic dims, as for halbench.
        for inp, a in zip(model.graph.input, case.inputs):
            dims = inp.type.tensor_type.shape.dim
            del dims[:]
            for s in a.shape:
                dims.add().dim_value = s
        model = onnx.shape_inference.infer_shapes(model, data_prop=True)
        ctx = ir.Context()
        info = onnx_importer.ModelInfo(model)
        module = info.create_module(context=ctx)
        imp = onnx_importer.NodeImporter.define_function(info.main_graph, module.operation)
        imp.import_all()
        vmfb = compile_str(str(module), target_backends=["llvm-cpu"], input_type="onnx",
                           extra_args=["--iree-llvmcpu-target-cpu=host"])
    except Exception as e:  # noqa: BLE001
        return "compile", f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
    try:
        config = rt.Config("local-sync")
        ctx2 = rt.SystemContext(config=config)
        ctx2.add_vm_module(rt.VmModule.copy_buffer(ctx2.instance, vmfb))
        fn = ctx2.modules.module[info.main_graph.graph_proto.name] \
            if hasattr(ctx2.modules.module, info.main_graph.graph_proto.name) else None
        if fn is None:
            names = [n for n in dir(ctx2.modules.module) if not n.startswith("_")]
            fn = getattr(ctx2.modules.module, names[0])
        res = fn(*case.inputs)
        if not isinstance(res, (list, tuple)):
            res = [res]
        outs = [r.to_host() if hasattr(r, "to_host") else __import__("numpy").asarray(r) for r in res]
    except Exception as e:  # noqa: BLE001
        return "run", f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
    why = judge(outs, case.outputs, case.rtol, case.atol)
    return ("wrong", why) if why else ("pass", "")


def worker(args: argparse.Namespace) -> None:
    """Read case names on stdin, answer one JSON line each."""
    import warnings

    warnings.simplefilter("ignore")
    from tests.conformance.onnx_node import check_case, plain_cases

    cases = plain_cases()
    device = None
    if args.runtime == "halbench":
        from halbench.drivers import create_device

        device = create_device(args.device)
    apis = tuple(dict.fromkeys((args.api, "local")))
    workdir = Path(os.environ.get("TMPDIR", "/tmp"))
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        t0 = time.perf_counter()
        if args.runtime == "iree":
            status, msg = _iree_check(cases[name], workdir)
        else:
            status, msg = check_case(cases[name], device, apis, workdir)
        print(json.dumps({"case": name, "status": status, "message": msg,
                          "seconds": round(time.perf_counter() - t0, 3)}), flush=True)


class _Slot:
    def __init__(self, argv: list[str]):
        self.argv = argv
        self.proc: subprocess.Popen | None = None

    def ask(self, name: str, timeout: float) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True, cwd=ROOT)
        box: list[str] = []
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        t = threading.Thread(target=lambda: box.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if box and box[0]:
            return json.loads(box[0])
        if t.is_alive():
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return {"case": name, "status": "timeout", "message": f"no answer in {timeout:.0f} s"}
        rc = self.proc.wait()
        self.proc = None
        return {"case": name, "status": "crash", "message": f"worker died (exit {rc})"}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def group(msg: str) -> str:
    s = re.sub(r"'[^']*'|\"[^\"]*\"|%\w+|\d+(x\d+)*", "_", msg)
    return " ".join(s.split()[:9])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="local-sync://")
    ap.add_argument("--api", default="local", help="compiler backend to compile each case for")
    ap.add_argument("--runtime", choices=("halbench", "iree"), default="halbench")
    ap.add_argument("-k", dest="pattern", help="regular expression: only case names matching it")
    ap.add_argument("--only-passing", type=Path, help="only the cases that pass in this earlier -o file")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per case")
    ap.add_argument("-o", "--output", type=Path)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0

    import warnings

    warnings.simplefilter("ignore")
    from tests.conformance.onnx_node import plain_cases

    names = sorted(plain_cases())
    if args.pattern:
        names = [n for n in names if re.search(args.pattern, n)]
    if args.only_passing:
        prev = json.loads(args.only_passing.read_text())["cases"]
        names = [n for n in names if prev.get(n, {}).get("status") == "pass"]
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--device", args.device,
            "--api", args.api, "--runtime", args.runtime]
    todo = list(reversed(names))
    results: dict[str, dict] = {}
    lock = threading.Lock()
    t0 = time.time()

    def run_slot() -> None:
        slot = _Slot(argv)
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    name = todo.pop()
                r = slot.ask(name, args.timeout)
                with lock:
                    results[name] = r
                    if len(results) % 100 == 0:
                        ok = sum(1 for x in results.values() if x["status"] == "pass")
                        print(f"  {len(results)}/{len(names)} done, {ok} pass, {time.time() - t0:.0f} s",
                              file=sys.stderr, flush=True)
        finally:
            slot.close()

    threads = [threading.Thread(target=run_slot) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counts = collections.Counter(r["status"] for r in results.values())
    groups = collections.Counter(f"{r['status']}: {group(r['message'])}" for r in results.values()
                                 if r["status"] != "pass")
    summary = {"runtime": args.runtime, "device": args.device, "api": args.api, "cases": len(names),
               "counts": dict(counts), "seconds": round(time.time() - t0, 1)}
    try:
        import onnx

        summary["onnx"] = onnx.__version__
    except ImportError:
        pass
    if args.output:
        tmp = args.output.with_suffix(".tmp")
        tmp.write_text(json.dumps({"summary": summary, "cases": dict(sorted(results.items()))}, indent=1))
        tmp.replace(args.output)
    print(json.dumps(summary))
    for g, n in groups.most_common(40):
        print(f"{n:5d}  {g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
