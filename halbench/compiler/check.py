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


def _compile_node(path: Path) -> None:
    from halbench.compiler import CompileOptions, compile_model

    compile_model(path, CompileOptions(target_devices=("local",)))


def check_model(path: str | Path, input_shapes: dict[str, tuple[int, ...]] | None = None,
                input_values: dict[str, Any] | None = None) -> list[NodeVerdict]:
    """One verdict per node of the model's main graph, in graph order."""
    import onnx
    from google.protobuf.message import DecodeError
    from onnx import helper

    from halbench.compiler.frontend import require_mlir
    from halbench.compiler.frontend.onnx import _default_opset, prepare_model
    from halbench.compiler.isolate import run_isolated

    p = Path(path)
    if not p.is_file():
        raise UserError(f"model file not found: {p}")
    require_mlir(f"checking {p.name}")  # once for the model, not once per node
    try:
        model = onnx.load(str(p))
    except (DecodeError, ValueError, OSError) as e:
        raise UserError(f"{p.name} is not a valid ONNX model: {e}") from None
    model, _, _ = prepare_model(model, dict(input_shapes or {}), dict(input_values or {}), refuse_nodes=False)
    g = model.graph
    opset = _default_opset(model)
    types = {v.name: v.type for v in (*g.input, *g.value_info, *g.output)}
    inits = {t.name: t for t in g.initializer}
    consts = {t.name: t.SerializeToString() for t in g.initializer if len(t.SerializeToString()) <= 4096}
    seen: dict[str, NodeVerdict] = {}
    out: list[NodeVerdict] = []
    with tempfile.TemporaryDirectory(prefix="halbench-check-") as d:
        for i, node in enumerate(g.node):
            label = node.name or (node.output[0] if node.output else f"#{i}")
            sig = _signature(node, types, consts)
            if sig in seen:
                first = seen[sig]
                out.append(NodeVerdict(label, node.op_type, opset, first.ok, first.reason, first.name))
                continue
            missing = [x for x in list(node.input) + list(node.output)
                       if x and x not in types and x not in inits]
            if missing:
                v = NodeVerdict(label, node.op_type, opset, False,
                                f"ONNX shape inference gives no type for {missing[0]!r}; give the input "
                                f"shapes (--input-shape) or freeze shape inputs (--freeze-input)")
            else:
                inputs = [helper.make_value_info(x, types[x]) for x in dict.fromkeys(node.input)
                          if x and x not in inits]
                outputs = [helper.make_value_info(x, types[x]) for x in node.output if x]
                used = [inits[x] for x in dict.fromkeys(node.input) if x in inits]
                one = helper.make_model(helper.make_graph([node], "node", inputs, outputs, used),
                                        opset_imports=list(model.opset_import), ir_version=model.ir_version)
                f = Path(d) / f"n{i}.onnx"
                onnx.save(one, str(f))
                try:  # in a child process: a node that crashes the front end is that node's verdict
                    run_isolated(_compile_node, f, what=f"{p.stem}-node{i}", check_hint=False)
                    v = NodeVerdict(label, node.op_type, opset, True)
                except HalbenchError as e:
                    reason = str(e).replace(f"n{i}.onnx: ", "").replace(f"n{i}.onnx", "the node")
                    reason = reason.removeprefix(f"{p.stem}-node{i}: ")
                    reason = re.sub(r"^node '[^']*' \([^)]*\):? ", "", reason)
                    v = NodeVerdict(label, node.op_type, opset, False, reason)
            seen[sig] = v
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
