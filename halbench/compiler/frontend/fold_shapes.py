"""Fold an ONNX graph's shape arithmetic into constants before import.

Exporters compute target shapes at run time even when every input shape is static: PyTorch's
TorchScript exporter turns ``unflatten(-1, (3, E))`` into ``Shape -> Slice(0, Mod(-1, rank))
-> Concat -> Reshape``. ONNX shape inference cannot see through ``Mod`` (its data propagation
covers only a few ops), so the Reshape's result has no rank and torch-mlir refuses it. Here each
node whose inputs are all small constants, or a ``Shape`` of a statically shaped tensor, is
evaluated with ``onnx.reference`` and replaced by an initializer, and each ``If`` on a constant
condition by the branch it takes, until nothing changes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["MAX_FOLD_ELEMENTS", "fold_shape_computations"]

#: Only tensors this small are folded: shape arithmetic, never weights (the compiler's own
#: constant folding handles those, without duplicating them in the ONNX file).
MAX_FOLD_ELEMENTS = 64


def fold_shape_computations(model: Any) -> Any:
    """``model`` with its constant shape computations replaced by initializers (shapes inferred)."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    outputs = {o.name for o in g.output}
    opsets = {o.domain or "": int(o.version) for o in model.opset_import}
    for _ in range(len(g.node) + 1):  # each round folds at least one node or stops
        try:
            model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 - prepare_model's own inference reports it
            return model
        g = model.graph
        shapes = _static_shapes(g)
        consts = {t.name: numpy_helper.to_array(t) for t in g.initializer
                  if int(np.prod(t.dims)) <= MAX_FOLD_ELEMENTS}
        keep = []
        changed = False
        for node in g.node:
            branch = _constant_branch(node, consts)
            if branch is not None:  # an If on a constant: the branch taken, in its place
                keep.extend(_inline_branch(branch, node, g))
                changed = True
                continue
            values = _evaluate(node, consts, shapes, opsets)
            if values is not None and outputs.intersection(node.output) and not (
                    any(v.size == 0 for v in values) or any(x in consts and consts[x].size == 0 for x in node.input if x)):
                values = None  # outputs stay computed, unless empty tensors make them constants
            if values is None:
                keep.append(node)
                continue
            for name, value in zip(node.output, values):
                g.initializer.append(numpy_helper.from_array(value, name))
                consts[name] = value
            changed = True
        if not changed:
            return model
        del g.node[:]
        g.node.extend(keep)
        del g.value_info[:]  # inferred afresh, now that more is constant
    return model


def _constant_branch(node: Any, consts: dict[str, np.ndarray]) -> Any | None:
    """The branch graph an ``If`` takes when its condition is a constant, else None."""
    if node.op_type != "If" or node.domain not in ("", "ai.onnx") or not node.input:
        return None
    cond = consts.get(node.input[0])
    if cond is None or cond.size != 1:
        return None
    want = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    return next((a.g for a in node.attribute if a.name == want), None)


def _inline_branch(branch: Any, node: Any, g: Any) -> list[Any]:
    """``branch``'s nodes (its initializers moved to ``g``), then an Identity from each branch
    output to the ``If`` output it stands for. ONNX names are unique model-wide: nothing clashes."""
    from onnx import helper

    g.initializer.extend(branch.initializer)
    nodes = list(branch.node)
    for out, name in zip(branch.output, node.output):
        if name:
            nodes.append(helper.make_node("Identity", [out.name], [name]))
    return nodes


def _static_shapes(g: Any) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for v in (*g.input, *g.value_info, *g.output):
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[v.name] = tuple(d.dim_value for d in t.shape.dim)
    return shapes


def _evaluate(node: Any, consts: dict[str, np.ndarray], shapes: dict[str, tuple[int, ...]],
              opsets: dict[str, int]) -> list[np.ndarray] | None:
    """The node's outputs if it can be folded, else None."""
    from onnx import helper

    if node.domain not in ("", "ai.onnx") or any(a.type in (a.GRAPH, a.GRAPHS) for a in node.attribute):
        return None
    if node.op_type == "Shape":
        if node.input[0] not in shapes:
            return None
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        shape = shapes[node.input[0]]
        return [np.array(shape[attrs.get("start", 0):attrs.get("end", len(shape))], np.int64)]
    if node.op_type == "Size" and node.input[0] in shapes:
        return [np.array(int(np.prod(shapes[node.input[0]], dtype=np.int64)), np.int64)]
    inputs = [x for x in node.input if x]
    if not inputs or not all(x in consts for x in inputs) or node.op_type.startswith("Random"):
        return None
    from onnx.reference import ReferenceEvaluator

    try:
        values = ReferenceEvaluator(node, opsets=opsets).run(None, {x: consts[x] for x in inputs})
    except Exception:  # noqa: BLE001 - an op the reference cannot run stays for the importer
        return None
    values = [np.asarray(v) for v in values]
    if any(v.size > MAX_FOLD_ELEMENTS for v in values):
        return None
    return values
