"""ONNX ops the importer cannot lower, replaced by their ONNX function bodies.

Many newer ONNX ops (Attention, RMSNormalization, RotaryEmbedding, Swish, AffineGrid, ...) are
defined by the ONNX standard as a function of simpler ops: a schema's function body, or a
context-dependent one built for the node's attributes and input types. When torch-mlir's ONNX
conversion leaves such an op behind, halbench expands it into that body (recursively) and imports
again: the semantics are the standard's own. The one exception is CumProd, which the standard
gives no body: it becomes a masked ReduceProd of standard ops (``_cumprod_function``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ALWAYS_EXPAND", "PREVIEW", "expand_functions", "function_for"]

#: Ops torch-mlir converts into something it then cannot lower: expanded before import.
ALWAYS_EXPAND = frozenset({"RotaryEmbedding", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"})

_DOMAIN = "halbench.expand"
#: The standard's preview domain: its ops (FlexAttention) are expanded into their function
#: bodies too, where the standard gives one, as torch-mlir imports only the default domain.
PREVIEW = "ai.onnx.preview"


def _opset(model: Any, domain: str = "") -> int:
    for o in model.opset_import:
        if o.domain == domain or (not domain and o.domain == "ai.onnx"):
            return int(o.version)
    return 0


def function_for(node: Any, opset: int, value_types: dict[str, Any]) -> Any | None:
    """The FunctionProto that defines ``node`` at ``opset``, or None when the standard gives none."""
    import onnx
    from onnx import defs

    try:
        schema = defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # noqa: BLE001 - no schema: an unknown or custom op
        return None
    fn = None
    if schema.has_context_dependent_function:
        types = []
        for name in node.input:
            t = value_types.get(name)
            if name and t is None:
                return None  # the body depends on a type shape inference did not find
            types.append(t.SerializeToString() if t is not None else onnx.TypeProto().SerializeToString())
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                opset, node.SerializeToString(), types)
        except Exception:  # noqa: BLE001 - the schema refuses this node's attributes
            data = None
        if data:
            fn = onnx.FunctionProto()
            fn.ParseFromString(data)
    if fn is None and schema.has_function:
        try:
            data = schema.get_function_with_opset_version(opset)
        except Exception:  # noqa: BLE001
            data = None
        if data:
            fn = onnx.FunctionProto()
            fn.ParseFromString(data) if isinstance(data, bytes) else fn.CopyFrom(data)
        elif schema.function_body is not None and schema.function_body.node:
            fn = onnx.FunctionProto()
            fn.CopyFrom(schema.function_body)
    if fn is None or not fn.node:
        return None
    return fn


#: CumProd's masked form holds n x n elements per column: for short axes only.
MAX_CUMPROD_AXIS = 1024


def _cumprod_function(node: Any, opset: int, value_types: dict[str, Any], g: Any) -> Any | None:
    """CumProd (which the standard gives no function body) as a FunctionProto of standard ops:
    ``y[.., i, ..] = ReduceProd_j(Where(mask[i, j], x[.., j, ..], 1))``, the mask chosen by
    ``exclusive`` and ``reverse``. Needs a static shape, a constant axis and a short axis."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    t = value_types.get(node.input[0])
    axis_init = next((i for i in g.initializer if i.name == node.input[1]), None)
    if t is None or axis_init is None or not t.tensor_type.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.tensor_type.shape.dim]
    if not dims or min(dims) < 0:
        return None
    rank = len(dims)
    a = int(numpy_helper.to_array(axis_init).reshape(-1)[0])
    a = a + rank if a < 0 else a
    if not 0 <= a < rank or dims[a] > MAX_CUMPROD_AXIS:
        return None
    attrs = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    n = dims[a]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    ex, rev = bool(attrs.get("exclusive", 0)), bool(attrs.get("reverse", 0))
    mask = (j > i if ex else j >= i) if rev else (j < i if ex else j <= i)
    mask = mask.reshape([n, n] + [1] * (rank - 1 - a))

    def const(name: str, value: np.ndarray) -> Any:
        return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))

    nodes = [const("mask", mask), const("one_f", np.array(1.0, np.float32)),
             helper.make_node("CastLike", ["one_f", "x"], ["one"]),
             const("ax", np.array([a], np.int64)), helper.make_node("Unsqueeze", ["x", "ax"], ["xt"]),
             helper.make_node("Where", ["mask", "xt", "one"], ["w"])]
    if opset >= 18:
        nodes += [const("rax", np.array([a + 1], np.int64)),
                  helper.make_node("ReduceProd", ["w", "rax"], ["y"], keepdims=0)]
    else:
        nodes.append(helper.make_node("ReduceProd", ["w"], ["y"], axes=[a + 1], keepdims=0))
    return helper.make_function("", "CumProd", ["x", "axis"], ["y"], nodes,
                                [onnx.helper.make_opsetid("", opset)])


def _fill_default_attributes(node: Any, opset: int) -> None:
    """Attributes the node leaves at their defaults, written out: a function body refers to them
    by name, and the inliner drops a reference to an attribute the call does not carry."""
    from onnx import defs

    try:
        schema = defs.get_schema(node.op_type, opset, node.domain or "")
    except Exception:  # noqa: BLE001
        return
    given = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        d = attr.default_value
        if name not in given and d is not None and d.type:
            a = node.attribute.add()
            a.CopyFrom(d)
            a.name = name


def expand_functions(model: Any, op_types: set[str]) -> tuple[Any, list[str]]:
    """``model`` with every node of ``op_types`` (default or preview domain) replaced by its
    function body.

    Returns the new model and the op types that were expanded (those without a body stay)."""
    import onnx
    from onnx import inliner

    opset = _opset(model)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    g = inferred.graph
    value_types = {v.name: v.type for v in list(g.input) + list(g.value_info) + list(g.output)}
    for t in g.initializer:
        tp = onnx.TypeProto()
        tp.tensor_type.elem_type = t.data_type
        for d in t.dims:
            tp.tensor_type.shape.dim.add().dim_value = d
        value_types[t.name] = tp
    out = onnx.ModelProto()
    out.CopyFrom(model)
    expanded: list[str] = []
    for i, node in enumerate(out.graph.node):
        if node.domain not in ("", "ai.onnx", PREVIEW) or node.op_type not in op_types:
            continue
        node_opset = _opset(model, PREVIEW) if node.domain == PREVIEW else opset
        _fill_default_attributes(node, node_opset)
        fn = function_for(node, node_opset, value_types)
        if fn is None and node.op_type == "CumProd":
            fn = _cumprod_function(node, opset, value_types, g)
        if fn is None:
            continue
        if node.op_type not in expanded:
            expanded.append(node.op_type)
        name = f"{node.op_type}_{i}"
        fn.name = name
        fn.domain = _DOMAIN
        out.functions.append(fn)
        node.op_type = name
        node.domain = _DOMAIN
    if not expanded:
        return model, []
    out.opset_import.add(domain=_DOMAIN, version=1)
    out = inliner.inline_local_functions(out, convert_version=True)
    keep = [o for o in out.opset_import if o.domain != _DOMAIN]
    del out.opset_import[:]
    out.opset_import.extend(keep)
    return out, expanded
