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
    from iree.compiler import compile_str, ir
    from iree.compiler.extras import onnx_importer

    from tests.conformance.onnx_node import frozen_inputs, judge

    frozen = frozen_inputs(case)
    feeds = [a for n, a in zip(case.input_names, case.inputs) if n not in frozen]
    try:
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        for n, a in frozen.items():  # the same preparation halbench gets: compile-time operands frozen
            model.graph.initializer.append(onnx.numpy_helper.from_array(a, n))
        keep = [i for i in model.graph.input if i.name not in frozen]
        del model.graph.input[:]
        model.graph.input.extend(keep)
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        if opset and opset < 17:
            try:
                model = onnx.version_converter.convert_version(model, 17)
            except Exception:  # noqa: BLE001, S110 - keep the original; the importer may still take it
                pass
        # The test's shapes for dynamic dims, as for halbench.
        for inp, a in zip(model.graph.input, feeds):
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
                           extra_args=["--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false"])
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
        res = fn(*feeds)
        if not isinstance(res, (list, tuple)):
            res = [res]
        outs = [r.to_host() if hasattr(r, "to_host") else __import__("numpy").asarray(r) for r in res]
    except Exception as e:  # noqa: BLE001
        return "run", f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
    why = judge(outs, case.outputs, case.rtol, case.atol)
    return ("wrong", why) if why else ("pass", "")


def _precompile(case, apis: tuple[str, ...], target: str | None, out_dir: Path) -> tuple[str, str]:
    """Compile ``case`` for ``apis`` into ``out_dir`` with its data (for a machine without the compiler)."""
    import tempfile

    import numpy as np
    import onnx

    from halbench.compiler import CompileOptions, compile_model
    from tests.conformance.onnx_node import frozen_inputs

    frozen = frozen_inputs(case)
    with tempfile.TemporaryDirectory() as d:
        model_path = Path(d) / f"{case.name}.onnx"
        onnx.save(case.model, str(model_path))
        shapes = {n: a.shape for n, a in zip(case.input_names, case.inputs) if n not in frozen}
        targets = {apis[0]: target} if target else {}
        try:
            cm = compile_model(model_path, CompileOptions(target_devices=apis, input_shapes=shapes,
                                                          input_values=frozen, targets=targets))
        except Exception as e:  # noqa: BLE001
            return "compile", f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
    cm.write(out_dir / f"{case.name}.hbx")
    feeds = [a for n, a in zip(case.input_names, case.inputs) if n not in frozen]
    np.savez(out_dir / f"{case.name}.npz", tol=np.array([case.rtol, case.atol]),
             **{f"in{i}": a for i, a in enumerate(feeds)}, **{f"out{i}": a for i, a in enumerate(case.outputs)})
    return "pass", ""


def _run_bundle(name: str, src: Path, device) -> tuple[str, str]:
    import numpy as np

    from halbench.runtime.module import Module
    from tests.conformance.onnx_node import judge

    data = np.load(src / f"{name}.npz", allow_pickle=False)
    ins = [data[f"in{i}"] for i in range(sum(1 for k in data.files if k.startswith("in")))]
    refs = tuple(data[f"out{i}"] for i in range(sum(1 for k in data.files if k.startswith("out"))))
    rtol, atol = (float(x) for x in data["tol"])
    try:
        m = Module.load(str(src / f"{name}.hbx"), device)
        try:
            outs = m.invoke(None, ins)
        finally:
            m.close()
    except Exception as e:  # noqa: BLE001
        return "run", f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
    why = judge(outs, refs, rtol, atol)
    return ("wrong", why) if why else ("pass", "")


def worker(args: argparse.Namespace) -> None:
    """Read case names on stdin, answer one JSON line each."""
    import warnings

    warnings.simplefilter("ignore")
    from tests.conformance.onnx_node import check_case, plain_cases

    cases = {} if args.from_bundles else plain_cases()
    device = None
    if args.runtime == "halbench" and not args.compile_only:
        from halbench.drivers import create_device

        device = create_device(args.device)
    apis = tuple(dict.fromkeys((args.api, "local")))
    workdir = Path(os.environ.get("TMPDIR", "/tmp"))
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        t0 = time.perf_counter()
        if args.compile_only:
            status, msg = _precompile(cases[name], (args.api,), args.target, args.bundle_dir)
        elif args.from_bundles:
            status, msg = _run_bundle(name, args.from_bundles, device)
        elif args.runtime == "iree":
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


def _reason(r: dict) -> str:
    msg = " ".join(r["message"].split())
    msg = re.sub(r"; supported ops: .*", "", msg)
    m = re.search(r"legalize operation '([\w.]+)'.*?name = \"([\w.]+)\"", msg)
    if m:
        msg = f"torch-mlir cannot lower {m.group(2)}"
    elif "legalize operation" in msg:
        m = re.search(r"legalize operation '([\w.]+)'", msg)
        msg = f"torch-mlir cannot lower {m.group(1)}"
    prefix = {"crash": "crash: ", "timeout": "hang: "}.get(r["status"], r["status"] + ": ")
    return prefix + msg[:160]


def _write_xfail(path: Path, results: dict, summary: dict) -> None:
    lines = [f"# Expected failures of the ONNX backend node tests on {summary['device']} "
             f"(onnx {summary.get('onnx', '?')}): case, then why.",
             "# This list may only shrink: a listed case that passes fails the test run.",
             "# 'crash:' and 'hang:' entries are not run at all."]
    lines += [f"{n} {_reason(r)}" for n, r in sorted(results.items()) if r["status"] != "pass"]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def _op_table(files: list[Path]) -> None:
    """Per ONNX op type, how many of its (non-expanded) node tests pass on each device."""
    import warnings

    warnings.simplefilter("ignore")
    from tests.conformance.onnx_node import plain_cases

    cases = plain_cases()
    ops_of = {n: sorted({nd.op_type for nd in c.model.graph.node if nd.domain in ("", "ai.onnx")})
              for n, c in cases.items() if "_expanded" not in n}
    table: dict[str, dict[str, list[int]]] = {}
    devices = []
    version = None
    for f in files:
        data = json.loads(f.read_text())
        s = data["summary"]
        version = s.get("onnx", version)
        dev = s.get("label") or s["device"]
        devices.append(dev)
        for name, ops in ops_of.items():
            r = data["cases"].get(name)
            if r is None:
                continue
            for op in ops:
                cell = table.setdefault(op, {}).setdefault(dev, [0, 0])
                cell[0] += r["status"] == "pass"
                cell[1] += 1
    out = ROOT / "halbench" / "compiler" / "onnx_support.json"
    tmp = out.with_suffix(".tmp")
    lines = [f"  {json.dumps(op)}: {json.dumps(per, separators=(', ', ': '))}" for op, per in sorted(table.items())]
    tmp.write_text(f'{{"onnx": {json.dumps(version)}, "devices": {json.dumps(devices)}, "ops": {{\n'
                   + ",\n".join(lines) + "\n}}\n")
    tmp.replace(out)
    print(f"wrote {out} ({len(table)} ops, devices {devices})")


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
    ap.add_argument("--label", help="the device's name in the results (default: --device)")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile each case for --api (and --target) into --bundle-dir, with its data")
    ap.add_argument("--bundle-dir", type=Path, help="where --compile-only writes")
    ap.add_argument("--target", help="the --api backend's target (e.g. sm_90, h100)")
    ap.add_argument("--from-bundles", type=Path,
                    help="run bundles written by --compile-only (no compiler or onnx needed)")
    ap.add_argument("--write-xfail", type=Path,
                    help="write the failing cases with their reasons as an expected-failure list "
                         "(tests/conformance/xfail_*.txt; those lists may only shrink afterwards)")
    ap.add_argument("--op-table", nargs="+", type=Path, metavar="RESULTS.json",
                    help="write halbench/compiler/onnx_support.json (per ONNX op: node tests passed per "
                         "device) from earlier -o files, and exit")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return 0
    if args.op_table:
        _op_table(args.op_table)
        return 0

    import warnings

    warnings.simplefilter("ignore")
    if args.from_bundles:
        names = sorted(p.stem for p in args.from_bundles.glob("*.hbx"))
    else:
        from tests.conformance.onnx_node import plain_cases

        names = sorted(plain_cases())
    if args.compile_only:
        if not args.bundle_dir:
            ap.error("--compile-only needs --bundle-dir")
        args.bundle_dir.mkdir(parents=True, exist_ok=True)
    if args.pattern:
        names = [n for n in names if re.search(args.pattern, n)]
    if args.only_passing:
        prev = json.loads(args.only_passing.read_text())["cases"]
        names = [n for n in names if prev.get(n, {}).get("status") == "pass"]
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--device", args.device,
            "--api", args.api, "--runtime", args.runtime]
    if args.compile_only:
        argv += ["--compile-only", "--bundle-dir", str(args.bundle_dir.resolve())]
        if args.target:
            argv += ["--target", args.target]
    if args.from_bundles:
        argv += ["--from-bundles", str(args.from_bundles.resolve())]
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
               "label": args.label or (args.device if args.runtime == "halbench" else f"iree-{args.device}"),
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
    if args.write_xfail:
        _write_xfail(args.write_xfail, results, summary)
    print(json.dumps(summary))
    for g, n in groups.most_common(40):
        print(f"{n:5d}  {g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
