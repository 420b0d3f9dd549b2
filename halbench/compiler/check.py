"""``halbench check MODEL.onnx``: which nodes this halbench cannot compile, and why, before a
whole compile is attempted.

The model is normalised as ``compile`` would (shapes fixed, opset upgraded, shape arithmetic
folded). Then every distinct node signature (op type, attributes, input types) is compiled on
its own as a one-node model for the local backend, its constant inputs kept constant. A node
that fails there fails in the model too; one that passes almost always passes in the model
(fusion across nodes is the compiler's own business and is checked by compiling the model).
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from halbench.errors import HalbenchError, UserError

__all__ = ["NodeVerdict", "check_model", "format_verdicts"]


@dataclass(frozen=True)
class NodeVerdict:
    name: str
    op_type: str
    opset: int
    ok: bool
    reason: str = ""
    same_as: str = ""  # another node with the same signature, checked once

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _signature(node: Any, types: dict[str, Any], consts: dict[str, bytes]) -> str:
    parts = [node.domain, node.op_type]
    parts += [f"{a.name}={a.SerializeToString().hex()}" for a in sorted(node.attribute, key=lambda a: a.name)]
    for x in node.input:
        parts.append(consts.get(x, b"").hex() if x in consts else str(types.get(x)))
    return "|".join(parts)


def _compile_nodes(paths: list[str], progress: str) -> list[str | None]:
    """Each one-node model compiled in turn, in one child process for all: None where it
    compiles, else its one-line error. Each outcome is appended to ``progress`` as it is known, so
    that the caller knows which node a crash of the process interrupted."""
    import json

    from halbench.compiler import CompileOptions, compile_model

    out: list[str | None] = []
    for f in paths:
        try:
            compile_model(f, CompileOptions(target_devices=("local",)))
            r = None
        except HalbenchError as e:
            r = str(e)
        out.append(r)
        with open(progress, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(r) + "\n")
    return out


def _compile_isolated(files: list[Path], work: Path, stem: str, worker: Any = None,
                      timeout_s: float | None = None) -> list[str | None]:
    """``_compile_nodes`` in a child process (halbench.compiler.isolate); where a node kills the
    child (a native crash in ONNX or torch-mlir) or takes longer than ``timeout_s``, that is the
    node's outcome and the nodes after it go on in a new child. One child for the whole model, not
    one per node: a child's first compile pays for MLIR's set-up again. ``worker``:
    ``_compile_nodes`` or one with its contract (the recovery's test)."""
    import json

    from halbench.compiler.isolate import run_isolated

    results: list[str | None] = []
    rest = list(files)
    while rest:
        progress = work / f"progress-{len(results)}.jsonl"
        try:
            results += run_isolated(worker or _compile_nodes, [str(f) for f in rest], str(progress), what=f"{stem}-check",
                                    check_hint=False, timeout_s=timeout_s, heartbeat=progress)
            break
        except HalbenchError as e:  # the child died or hung: at the node after those it finished
            done = ([json.loads(ln) for ln in progress.read_text(encoding="utf-8").splitlines()]
                    if progress.exists() else [])
            results += done
            results.append(str(e).removeprefix(f"{stem}-check: "))
            rest = rest[len(done) + 1:]
    return results


def _plan_nodes(path: str, input_shapes: dict[str, tuple[int, ...]], input_values: dict[str, Any],
                work: str) -> dict[str, Any]:
    """The model prepared as ``compile`` prepares it (ONNX's shape inference, the import's
    rewrites: native code, so this runs in a child too) and cut into one-node models under
    ``work``: ``{"opset", "plan": [[label, op_type, signature, verdict dict | file index | -1]],
    "files"}``. -1: a node whose signature an earlier node has."""
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import helper

    from halbench.compiler.frontend.onnx import _default_opset, prepare_model

    p = Path(path)
    try:
        model = onnx.load(str(p))
    except (DecodeError, ValueError, OSError) as e:
        raise UserError(f"{p.name} is not a valid ONNX model: {e}") from None
    model, _, _ = prepare_model(model, dict(input_shapes), dict(input_values), refuse_nodes=False)
    g = model.graph
    opset = _default_opset(model)
    types = {v.name: v.type for v in (*g.input, *g.value_info, *g.output)}
    inits = {t.name: t for t in g.initializer}
    consts = {t.name: t.SerializeToString() for t in g.initializer if len(t.SerializeToString()) <= 4096}
    plan: list[list[Any]] = []
    files: list[str] = []
    firsts: dict[str, int] = {}
    for i, node in enumerate(g.node):
        label = node.name or (node.output[0] if node.output else f"#{i}")
        sig = _signature(node, types, consts)
        if sig in firsts:
            plan.append([label, node.op_type, sig, -1])
            continue
        firsts[sig] = i
        missing = [x for x in list(node.input) + list(node.output) if x and x not in types and x not in inits]
        if missing:
            plan.append([label, node.op_type, sig, NodeVerdict(
                label, node.op_type, opset, False,
                f"ONNX shape inference gives no type for {missing[0]!r}; give the input "
                f"shapes (--input-shape) or freeze shape inputs (--freeze-input)").to_dict()])
            continue
        inputs = [helper.make_value_info(x, types[x]) for x in dict.fromkeys(node.input) if x and x not in inits]
        outputs = [helper.make_value_info(x, types[x]) for x in node.output if x]
        used = [inits[x] for x in dict.fromkeys(node.input) if x in inits]
        one = helper.make_model(helper.make_graph([node], "node", inputs, outputs, used),
                                opset_imports=list(model.opset_import), ir_version=model.ir_version)
        f = Path(work) / f"n{i}.onnx"
        onnx.save(one, str(f))
        plan.append([label, node.op_type, sig, len(files)])
        files.append(str(f))
    return {"opset": opset, "plan": plan, "files": files}


def check_model(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
                input_values: dict[str, Any] | None = None, timeout_s: float | None = None) -> list[NodeVerdict]:
    """One verdict per node of the model's main graph, in graph order. ``timeout_s``: seconds a
    node's compile may take (default: ``$HALBENCH_COMPILE_TIMEOUT``, else no limit)."""
    from halbench.compiler.frontend import require_mlir
    from halbench.compiler.isolate import compile_timeout, run_isolated

    p = Path(path)
    if not p.is_file():
        raise UserError(f"model file not found: {p}")
    require_mlir(f"checking {p.name}")  # once for the model, not once per node
    limit = compile_timeout(timeout_s)
    with tempfile.TemporaryDirectory(prefix="halbench-check-") as d:
        # in a child process, as the nodes' compiles: ONNX's inference is native code too
        prepared = run_isolated(_plan_nodes, str(p), dict(input_shapes or {}), dict(input_values or {}), d,
                                what=p.name, check_hint=False, timeout_s=limit)
        opset, files = int(prepared["opset"]), [Path(f) for f in prepared["files"]]
        errors = _compile_isolated(files, Path(d), p.stem, timeout_s=limit) if files else []
        seen: dict[str, NodeVerdict] = {}
        out: list[NodeVerdict] = []
        for label, op_type, sig, what in prepared["plan"]:
            if isinstance(what, dict):
                v = NodeVerdict(**what)
            elif what < 0:
                first = seen[sig]
                v = NodeVerdict(label, op_type, opset, first.ok, first.reason, first.name)
            elif errors[what] is None:
                v = NodeVerdict(label, op_type, opset, True)
            else:
                stem = files[what].name
                reason = str(errors[what]).replace(f"{stem}: ", "").replace(stem, "the node")
                reason = re.sub(r"^node '[^']*' \([^)]*\):? ", "", reason)
                v = NodeVerdict(label, op_type, opset, False, reason)
            seen.setdefault(sig, v)
            out.append(v)
    return out


def format_verdicts(verdicts: list[NodeVerdict], model: str) -> str:
    bad = [v for v in verdicts if not v.ok]
    kinds = sorted({v.op_type for v in verdicts})
    lines = [f"{model}: {len(verdicts)} nodes of {len(kinds)} op types; "
             + ("every node compiles" if not bad else f"{len(bad)} cannot be compiled:")]
    for v in bad:
        again = f" (as node '{v.same_as}')" if v.same_as else ""
        lines.append(f"  {v.name} ({v.op_type}, opset {v.opset}){again}: {v.reason}")
    return "\n".join(lines)
