"""ONNX -> torch-dialect MLIR (IREE's importer) -> linalg on tensors (torch-mlir's pipelines).

Before import the model is normalised so that the rest of the compiler sees one shape of
input: old opsets are upgraded, initializers that are also listed as graph inputs are treated
as weights, input shapes are fixed (``input_shapes`` overrides), and every constant gets a
unique resource name so its data can be read back from the ONNX file rather than from MLIR
(the bindings cannot read ``dense_resource`` blobs).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from halbench.compiler.frontend import Imported
from halbench.compiler.frontend.fold_shapes import fold_shape_computations
from halbench.compiler.frontend.mlir import TORCH_TO_LINALG, run_pipeline
from halbench.errors import CompileError, UserError

__all__ = [
    "COMPILE_TIME_OPERANDS",
    "MIN_OPSET",
    "TARGET_OPSET",
    "compile_time_inputs",
    "load_onnx",
    "prepare_model",
]

#: Models below this opset are upgraded to TARGET_OPSET first (the importer's ONNX->torch
#: patterns are written against newer op definitions: Softmax, Reduce*, Clip, Pad, ...).
MIN_OPSET = 13
TARGET_OPSET = 17


def _default_opset(model: Any) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def prepare_model(model: Any, input_shapes: dict[str, tuple[int, ...]],
                  input_values: dict[str, Any] | None = None,
                  notes: list[str] | None = None, refuse_nodes: bool = True) -> tuple[Any, dict[str, str], dict[str, Any]]:
    """Normalise a loaded ModelProto; returns (model, resource name -> weight name, resource -> array).
    ``refuse_nodes=False`` (``halbench check``, which then compiles node by node and reports each
    node's refusal as that node's verdict) keeps invalid and crashing node forms instead of refusing
    the whole model."""
    import onnx

    from halbench.compiler.frontend.node_rewrites import (
        rewrite_ml_and_training_nodes,
        rewrite_nodes_with_shapes,
        unroll_control_flow,
    )

    opset = _default_opset(model)
    if opset and opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, TARGET_OPSET)
        except Exception as e:  # noqa: BLE001 - the converter raises bare RuntimeErrors
            raise CompileError(f"cannot upgrade the model from opset {opset} to {TARGET_OPSET}: "
                               f"{str(e).splitlines()[0]}") from None
        if notes is not None:
            notes.append(f"the model's opset {opset} was upgraded to {TARGET_OPSET} with onnx.version_converter")
    # after the upgrade: the nodes written in place of ML and training ops are of TARGET_OPSET
    rewrite_ml_and_training_nodes(model, TARGET_OPSET)
    g = model.graph
    _constants_to_initializers(g)
    if input_values:
        _freeze_inputs(g, input_values)
    _training_dropout_of_zero_ratio(g)
    _qlinear_matmul_as_integer_matmul(g)
    wraps = [n for n in g.node if n.op_type == "Pad" and any(a.name == "mode" and a.s == b"wrap" for a in n.attribute)]
    # Initializers listed as inputs (old exporters did that) are weights, not inputs. Below IR
    # version 4 an initializer had to be an input, and shape inference ignores one that is not:
    # the file is declared IR 8 (opset 17's), which it now is, so its weights keep their shapes.
    init_names = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in init_names]
    if len(real_inputs) != len(g.input):
        del g.input[:]
        g.input.extend(real_inputs)
    model.ir_version = max(model.ir_version, 8)
    _refuse_negative_dims(g, input_shapes)
    # Fix input shapes: overrides first, then refuse what stays dynamic.
    unknown = set(input_shapes) - {i.name for i in g.input}
    if unknown:
        raise UserError(f"--input-shape names {sorted(unknown)}, but the model's inputs are "
                        f"{[i.name for i in g.input]}")
    for inp in g.input:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in input_shapes:
            shape = tuple(int(s) for s in input_shapes[inp.name])
            if len(dims) and len(dims) != len(shape):
                raise UserError(f"input '{inp.name}' has rank {len(dims)}, --input-shape gives {len(shape)} dims")
            del dims[:]
            for s in shape:
                dims.add().dim_value = s
            continue
        for i, d in enumerate(dims):
            if not d.HasField("dim_value") or d.dim_value <= 0:
                sym = d.dim_param or "?"
                raise UserError(f"input '{inp.name}' has a dynamic dimension {i} ('{sym}'); give its shape "
                                f"with --input-shape {inp.name}=" + "x".join(
                                    str(x.dim_value) if x.HasField("dim_value") and x.dim_value > 0 else "N"
                                    for x in dims))
        if not inp.type.tensor_type.HasField("shape"):
            raise UserError(f"input '{inp.name}' has no shape; give it with --input-shape {inp.name}=...")
    _empty_inputs_to_constants(g)
    if refuse_nodes:
        _refuse_invalid_nodes(model)
    _guard_native_crashes(model, refuse_nodes)
    if wraps:  # torch-mlir's lowering of a wrap pad never terminates: slices and concats instead
        _wrap_pads_as_concats(model, opset)
    _maxpool3d_as_2d(model)
    _reverse_sequence_as_gather(model)
    _small_det_and_lp_norm(model)
    _unit_reductions_as_elementwise(model)
    _conv_transpose_same_as_pads(model)
    rewrite_nodes_with_shapes(model)
    # Shape arithmetic on static shapes becomes constants, so every tensor has a known rank.
    model = fold_shape_computations(model)
    if unroll_control_flow(model):  # (a Loop's trip count may be a folded constant)
        model = fold_shape_computations(model)
    _resize_axes_to_full_rank(model.graph)
    _lppool_as_average(model.graph)
    _matmul_vectors_as_matrices(model.graph)
    _space_to_depth_crd(model.graph)
    _refuse_empty_values(model)
    g = model.graph
    names: dict[str, str] = {}
    arrays: dict[str, Any] = {}
    model = _name_resources(model, names, arrays)
    return model, names, arrays


def _refuse_negative_dims(g: Any, input_shapes: dict[str, tuple[int, ...]]) -> None:
    """A declared dimension below 0 is no size (torch-mlir's importer fails on it naming only an
    MLIR type): one line naming the value, unless --input-shape replaces an input's shape."""
    kinds = [("input", v) for v in g.input if v.name not in input_shapes]
    kinds += [("output", v) for v in g.output] + [("value", v) for v in g.value_info]
    for kind, v in kinds:
        if not v.type.HasField("tensor_type"):
            continue
        for i, d in enumerate(v.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value < 0:
                way = (f"give its shape with --input-shape {v.name}=..." if kind == "input"
                       else "fix or remove the declared shape")
                raise UserError(f"{kind} '{v.name}' declares dimension {i} as {d.dim_value}, which is no size: "
                                f"the model is not valid ONNX; {way}")


def _empty_inputs_to_constants(g: Any) -> None:
    """Inputs with no elements carry no data: nodes read an empty constant in their place (the
    input stays in the signature), so that shape folding computes what depends on them."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    for inp in g.input:
        tt = inp.type.tensor_type
        dims = [d.dim_value for d in tt.shape.dim]
        if not dims or 0 not in dims:
            continue
        const = f"{inp.name}__empty"
        g.initializer.append(numpy_helper.from_array(
            np.zeros(dims, onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)), const))
        for node in g.node:
            for j, x in enumerate(node.input):
                if x == inp.name:
                    node.input[j] = const
        for o in g.output:
            if o.name == inp.name:
                raise UserError(f"input '{inp.name}' is empty and is also an output; halbench cannot compile "
                                f"an empty pass-through")


def _refuse_invalid_nodes(model: Any) -> None:
    """ONNX's own strict shape inference over the model as given: a node of the graph it rejects
    (an axis out of range, a Squeeze of a non-unit axis, a Transpose perm with a repeated axis,
    Expand shapes that do not broadcast, group 0) is refused in one line that names the node.
    torch-mlir, given such a node, hangs on some (Softmax's axis, Squeeze) and kills the process
    on others (SIGSEGV). An error inside a function body's own inference (onnx's schema of
    MeanVarianceNormalization fails in strict mode, test_mvn) is not the model's and is left alone,
    as are models inference cannot read at all (prepare_model's own inference reports those)."""
    import onnx

    try:
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
        text = " ".join(str(e).split())
        if text.count("Inference error(s)") != 1 or re.search(r"existing (elem type|shape) differ|differs from "
                                                               r"existing", text):
            return  # a declared type or shape that disagrees is left to the import, as before (ONNX's
            #         own inference of STFT disagrees with test_stft's declared, correct shape)
        m = re.search(r"\(op_type:([A-Za-z0-9_]+)(?:, node name: ([^)]*))?\): (.*?)(?= \(op_type:|$)", text)
        if not m:
            return
        op, name, detail = m.group(1), m.group(2), m.group(3)
        detail = re.sub(r"^(\[[A-Za-z]+Error\] )+", "", detail).rstrip(". ")
        if not name:
            name = next((n.name or n.output[0] for n in model.graph.node if n.op_type == op and n.output), op)
        raise UserError(f"node '{name}' ({op}) is not valid ONNX: {detail}; fix the model "
                        f"(onnx.shape_inference.infer_shapes(model, strict_mode=True) shows it)") from None
    except Exception:  # noqa: BLE001 - not a node's error: prepare_model's own inference reports it
        return


def _guard_native_crashes(model: Any, refuse_nodes: bool = True) -> None:
    """Valid-looking node forms that crash torch-mlir's lowering in native code (SIGFPE: it
    divides by a block size or group count), found by crafting nodes: refused in one line, or, for
    a Tile with a zero repeat (an empty output), written as the empty constant it is; a Slice step
    that makes ONNX's data propagation allocate without bound is clamped."""
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    ops = {"Conv", "ConvTranspose", "DepthToSpace", "SpaceToDepth", "GroupNormalization", "LRN", "Tile", "Range",
           "Slice"}
    if not any(n.op_type in ops and n.domain in ("", "ai.onnx") for n in g.node):
        return
    shapes = _inferred_shapes(model) or {}
    inits = {t.name: t for t in g.initializer}

    def const(name: str) -> Any:
        return numpy_helper.to_array(inits[name]) if name in inits else None

    for k, node in enumerate(g.node):
        if node.op_type not in ops or node.domain not in ("", "ai.onnx"):
            continue
        label = f"node '{node.name or node.output[0]}' ({node.op_type})"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x = shapes.get(node.input[0]) if node.input else None

        def refuse(why: str, label: str = label) -> None:
            if refuse_nodes:
                raise UserError(f"{label}: {why}; fix the node (torch-mlir's lowering of it kills the process)")

        if node.op_type in ("Conv", "ConvTranspose"):
            group = int(attrs.get("group", 1))
            if group < 1:
                refuse(f"group {group} is not a positive integer")
            elif x is not None and len(x) > 1 and x[1] % group:
                refuse(f"its {x[1]} input channels do not divide into {group} groups")
        elif node.op_type in ("DepthToSpace", "SpaceToDepth"):
            bs = int(attrs.get("blocksize", 0))
            if bs >= 1 and x is not None and len(x) == 4:
                if node.op_type == "DepthToSpace" and x[1] % (bs * bs):
                    refuse(f"its {x[1]} channels are not a multiple of blocksize² = {bs * bs}")
                if node.op_type == "SpaceToDepth" and (x[2] % bs or x[3] % bs):
                    refuse(f"its {x[2]}x{x[3]} image does not divide into {bs}x{bs} blocks")
        elif node.op_type == "GroupNormalization":
            groups = int(attrs.get("num_groups", 0))
            if groups < 1:
                refuse(f"num_groups {groups} is not a positive integer")
            elif x is not None and len(x) > 1 and x[1] % groups:
                refuse(f"its {x[1]} channels do not divide into {groups} groups")
        elif node.op_type == "LRN":
            size = int(attrs.get("size", 0))
            if size < 1:
                refuse(f"size {size} is not a positive integer")
            elif x is not None and len(x) > 1 and x[1] >= 1 and size > 2 * x[1] - 1:
                # A window past 2C - 1 channels sums every channel for every c: the same sum over
                # 2C - 1, with alpha / size kept (a window of 2^31 hung the compile).
                w = 2 * x[1] - 1
                alpha = float(attrs.get("alpha", 1e-4)) * w / size
                for a in node.attribute:
                    if a.name == "size":
                        a.i = w
                if not any(a.name == "alpha" for a in node.attribute):
                    node.attribute.append(helper.make_attribute("alpha", alpha))
                for a in node.attribute:
                    if a.name == "alpha":
                        a.f = alpha
        elif node.op_type == "Range":
            delta = const(node.input[2]) if len(node.input) > 2 else None
            if delta is not None and delta.size == 1 and float(delta.reshape(-1)[0]) == 0:
                refuse("its delta is 0 (the range has no end)")
        elif node.op_type == "Slice" and len(node.input) > 4 and node.input[4]:
            # ONNX's data propagation crashes on a step of 2^31 or more (SIGSEGV; near 2^62 it
            # allocates until the OOM killer ends the process): a step of 2^30 or more takes the
            # same elements of any axis shorter than that, so it is clamped there.
            steps = const(node.input[4])
            if steps is None or not np.any(np.abs(steps.astype(np.float64)) > 2.0 ** 30):
                continue
            clamped = f"{node.input[4]}__clamped{k}"
            g.initializer.append(numpy_helper.from_array(
                np.clip(steps.astype(np.int64), -(2 ** 30), 2 ** 30).astype(steps.dtype), clamped))
            node.input[4] = clamped
        elif node.op_type == "Tile" and len(node.input) > 1:
            reps = const(node.input[1])
            if x is None or reps is None or reps.size != len(x) or 0 not in reps.reshape(-1):
                continue
            out = [int(d) * int(r) for d, r in zip(x, reps.reshape(-1))]
            dtype = inits[node.input[0]].data_type if node.input[0] in inits else next(
                (v.type.tensor_type.elem_type for v in (*g.input, *g.value_info) if v.name == node.input[0]), 1)
            empty = f"{node.output[0]}__empty_tile{k}"
            g.initializer.append(numpy_helper.from_array(
                np.zeros(out, helper.tensor_dtype_to_np_dtype(dtype)), empty))
            node.CopyFrom(helper.make_node("Identity", [empty], [node.output[0]], name=node.name))


def _refuse_empty_values(model: Any) -> None:
    """An empty tensor that a node still has to compute with (it did not fold into a constant)
    would reach torch-mlir, whose shape arithmetic divides by dimensions (SIGFPE): refuse it."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - prepare_model's own inference reports it
        return
    g = inferred.graph
    shapes = {}
    for v in (*g.input, *g.value_info, *g.output):
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[v.name] = [d.dim_value for d in t.shape.dim]
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
    constant = {t.name for t in g.initializer if not t.name.endswith("__empty")}  # [] axes are fine
    # A concatenation with an empty tensor (an empty KV cache) is the concatenation of the rest.
    for node in model.graph.node:
        if node.op_type == "Concat" and node.domain in ("", "ai.onnx"):
            keep = [x for x in node.input if not (x in shapes and 0 in shapes[x] and shapes[x])]
            if keep and len(keep) < len(node.input):
                del node.input[:]
                node.input.extend(keep)
                if len(keep) == 1:
                    node.op_type = "Identity"
                    del node.attribute[:]
    for node in model.graph.node:
        for x in node.input:  # producing an empty tensor is fine (a Split's empty part); reading one is not
            if x and x not in constant and x in shapes and 0 in shapes[x] and shapes[x]:
                raise UserError(f"node '{node.name or node.output[0]}' ({node.op_type}) computes with the empty "
                                f"tensor '{x}' ({'x'.join(map(str, shapes[x]))}); halbench compiles empty tensors "
                                f"only where they fold into constants")


def _qlinear_matmul_as_integer_matmul(g: Any) -> None:
    """QLinearMatMul with constant per-tensor scales and zero points, as the ONNX reference
    computes it: an int32 MatMul of the operands less their zero points, scaled by
    ``a_scale * b_scale / y_scale`` in float64, plus ``y_zero_point``, rounded half to even and
    clipped to the output type. torch-mlir drops the zero points of a batched one and leaves
    ``linalg.quantized_matmul`` for a 2-D one."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    inits = {t.name: t for t in g.initializer}

    def const(node: Any, i: int) -> Any:
        name = node.input[i] if len(node.input) > i else ""
        return numpy_helper.to_array(inits[name]) if name in inits else None

    out = []
    for k, node in enumerate(g.node):
        if node.op_type != "QLinearMatMul" or node.domain not in ("", "ai.onnx"):
            out.append(node)
            continue
        sa, za, sb, zb, sy, zy = (const(node, i) for i in (1, 2, 4, 5, 6, 7))
        if any(v is None or v.size != 1 for v in (sa, za, sb, zb, sy, zy)) or zy.dtype not in (np.uint8, np.int8):
            out.append(node)
            continue
        p = f"{node.output[0]}__ql{k}"

        def init(name: str, value: np.ndarray, p: str = p) -> str:
            g.initializer.append(numpy_helper.from_array(value, p + name))
            return p + name

        scale = (sa * sb / sy).astype(np.float64).reshape(())  # in the scales' own type, as NumPy does
        info = np.iinfo(zy.dtype)
        i32, f64 = TensorProto.INT32, TensorProto.DOUBLE
        out += [helper.make_node("Cast", [node.input[0]], [p + "_a"], to=i32),
                helper.make_node("Sub", [p + "_a", init("_za", za.astype(np.int32).reshape(()))], [p + "_a0"]),
                helper.make_node("Cast", [node.input[3]], [p + "_b"], to=i32),
                helper.make_node("Sub", [p + "_b", init("_zb", zb.astype(np.int32).reshape(()))], [p + "_b0"]),
                helper.make_node("MatMul", [p + "_a0", p + "_b0"], [p + "_c"]),
                helper.make_node("Cast", [p + "_c"], [p + "_cd"], to=f64),
                helper.make_node("Mul", [p + "_cd", init("_s", scale)], [p + "_d"]),
                helper.make_node("Add", [p + "_d", init("_zy", zy.astype(np.float64).reshape(()))], [p + "_e"]),
                helper.make_node("Round", [p + "_e"], [p + "_r"]),
                helper.make_node("Clip", [p + "_r", init("_lo", np.array(info.min, np.float64)),
                                          init("_hi", np.array(info.max, np.float64))], [p + "_cl"]),
                helper.make_node("Cast", [p + "_cl"], [node.output[0]],
                                 to=helper.np_dtype_to_tensor_dtype(zy.dtype))]
    del g.node[:]
    g.node.extend(out)


def _training_dropout_of_zero_ratio(g: Any) -> None:
    """A Dropout in training mode with a constant ratio of 0 drops nothing: its output is its
    input and its mask all true (torch-mlir lowers no training-mode dropout)."""
    import numpy as np
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in g.initializer}

    def const(i: int, node: Any) -> Any:
        name = node.input[i] if len(node.input) > i else ""
        return numpy_helper.to_array(inits[name]) if name in inits else None

    out = []
    for node in g.node:
        training, ratio = const(2, node), const(1, node)
        if (node.op_type != "Dropout" or node.domain not in ("", "ai.onnx") or training is None
                or not bool(training) or ratio is None or float(ratio) != 0.0):
            out.append(node)
            continue
        out.append(helper.make_node("Identity", [node.input[0]], [node.output[0]]))
        if len(node.output) > 1 and node.output[1]:
            shape = f"{node.output[1]}__shape"
            out.append(helper.make_node("Shape", [node.input[0]], [shape]))
            out.append(helper.make_node("ConstantOfShape", [shape], [node.output[1]],
                                        value=numpy_helper.from_array(np.array([True]))))
    del g.node[:]
    g.node.extend(out)


def _ranks(g: Any) -> dict[str, int]:
    out = {t.name: len(t.dims) for t in g.initializer}
    for v in (*g.input, *g.value_info, *g.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = len(t.shape.dim)
    return out


def _matmul_vectors_as_matrices(g: Any) -> None:
    """A MatMul of a 1-D operand, as NumPy defines it: the vector made a 1-row (left) or 1-column
    (right) matrix and that axis squeezed from the result; two vectors, a Mul and a ReduceSum.
    torch-mlir leaves these as ``linalg.dot`` or an unlowered ``aten.matmul``."""
    import numpy as np
    from onnx import helper, numpy_helper

    ranks = _ranks(g)
    out = []
    for k, node in enumerate(g.node):
        if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx"):
            out.append(node)
            continue
        a, b = node.input[0], node.input[1]
        ra, rb = ranks.get(a), ranks.get(b)
        if ra is None or rb is None or 1 not in (ra, rb):
            out.append(node)
            continue
        y, p = node.output[0], f"{node.output[0]}__mv{k}"

        def axes(name: str, v: list[int]) -> str:
            g.initializer.append(numpy_helper.from_array(np.array(v, np.int64), name))
            return name

        if ra == 1 and rb == 1:
            out += [helper.make_node("Mul", [a, b], [p + "_prod"]),
                    helper.make_node("ReduceSum", [p + "_prod", axes(p + "_ax", [0])], [y], keepdims=0)]
        elif ra == 1:
            out += [helper.make_node("Unsqueeze", [a, axes(p + "_ax", [0])], [p + "_a"]),
                    helper.make_node("MatMul", [p + "_a", b], [p + "_mm"]),
                    helper.make_node("Squeeze", [p + "_mm", axes(p + "_sq", [-2])], [y])]
        else:
            out += [helper.make_node("Unsqueeze", [b, axes(p + "_ax", [1])], [p + "_b"]),
                    helper.make_node("MatMul", [a, p + "_b"], [p + "_mm"]),
                    helper.make_node("Squeeze", [p + "_mm", axes(p + "_sq", [-1])], [y])]
    del g.node[:]
    g.node.extend(out)


def _wrap_pads_as_concats(model: Any, opset: int) -> None:
    """Pad in mode 'wrap' (opset 19+) with constant pads (and axes): per padded axis, the last
    ``begin`` elements, the input, then its first ``end`` elements, concatenated along the axis;
    a negative pad crops. A wrap pad whose pads are not constants, or wider than its axis, is
    refused in one line (torch-mlir's own lowering of it never terminates)."""
    import numpy as np
    from onnx import helper, numpy_helper

    from halbench.compiler.frontend.fold_shapes import _static_shapes

    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    shapes = _inferred_shapes(model) or _static_shapes(g)
    big = np.iinfo(np.int64).max
    out = []
    for k, node in enumerate(g.node):
        if node.op_type != "Pad" or not any(a.name == "mode" and a.s == b"wrap" for a in node.attribute):
            out.append(node)
            continue
        where = f"node '{node.name or node.output[0]}' (Pad, opset {opset}, mode 'wrap')"
        shape = shapes.get(node.input[0])
        pads = inits.get(node.input[1]) if len(node.input) > 1 else None
        axes_in = node.input[3] if len(node.input) > 3 and node.input[3] else None
        if shape is None or pads is None or (axes_in is not None and axes_in not in inits):
            raise CompileError(f"{where}: its pads (and axes) must be constants and its input's shape static; "
                               f"freeze them with --freeze-input pads=... or use mode 'reflect', 'edge' or 'constant'")
        rank = len(shape)
        raw_axes = [int(a) for a in inits[axes_in].reshape(-1)] if axes_in is not None else list(range(rank))
        if any(not -rank <= a < rank for a in raw_axes) or len({a % rank for a in raw_axes}) != len(raw_axes):
            raise CompileError(f"{where}: axes {raw_axes} do not name distinct axes of a rank-{rank} input; "
                               f"fix the model's axes input (onnxruntime refuses it too)")
        axes = [a % rank for a in raw_axes]
        pads = [int(x) for x in pads.reshape(-1)]
        if len(pads) != 2 * len(axes):
            raise CompileError(f"{where}: {len(pads)} pads for {len(axes)} axes, where ONNX wants {2 * len(axes)} "
                               f"(every begin, then every end); fix the model's pads input")
        begins, ends = pads[:len(axes)], pads[len(axes):]
        for ax, b, e in zip(axes, begins, ends):
            left = shape[ax] - max(-b, 0) - max(-e, 0)  # what a negative pad's crop leaves
            if left <= 0 or max(b, e) > left:
                raise CompileError(f"{where}: pads {b}, {e} on axis {ax} of size {shape[ax]}: halbench wraps by at "
                                   f"most the axis's size; pad in two steps or use mode 'reflect', 'edge' or 'constant'")
        cur = node.input[0]
        done = [(ax, b, e) for ax, b, e in zip(axes, begins, ends) if b or e]
        for j, (ax, b, e) in enumerate(done):
            p = f"{node.output[0]}__wrap{k}_{ax}"

            def const(name: str, values: list[int], p: str = p) -> str:
                g.initializer.append(numpy_helper.from_array(np.array(values, np.int64), f"{p}_{name}"))
                return f"{p}_{name}"

            nxt = node.output[0] if j == len(done) - 1 else f"{p}_y"
            if min(b, e) < 0:  # crop first, then wrap what remains
                lo, hi = max(-b, 0), shape[ax] - max(-e, 0)
                out.append(helper.make_node("Slice", [cur, const("cs", [lo]), const("ce", [hi]), const("ca", [ax])],
                                            [f"{p}_crop"]))
                cur, b, e = f"{p}_crop", max(b, 0), max(e, 0)
            parts = []
            if b:
                out.append(helper.make_node("Slice", [cur, const("ts", [-b]), const("te", [big]), const("ta", [ax])],
                                            [f"{p}_tail"]))
                parts.append(f"{p}_tail")
            parts.append(cur)
            if e:
                out.append(helper.make_node("Slice", [cur, const("hs", [0]), const("he", [e]), const("ha", [ax])],
                                            [f"{p}_head"]))
                parts.append(f"{p}_head")
            out.append(helper.make_node("Concat", parts, [nxt], axis=ax) if len(parts) > 1 else
                       helper.make_node("Identity", [cur], [nxt]))
            cur = nxt
        if not done:
            out.append(helper.make_node("Identity", [node.input[0]], [node.output[0]]))
    del g.node[:]
    g.node.extend(out)


def _maxpool3d_as_2d(model: Any) -> None:
    """A 3-D MaxPool (NCDHW, one output, no auto_pad) as 2-D pools, which halbench runs: the
    depth taps are strided slices of the input along D (padded with -inf where the window's
    pads or ceil_mode reach past it), their element-wise Max, then one 2-D MaxPool over H and W
    with D folded into the batch. torch-mlir lowers a 3-D max pool to a generic over window
    indices, which halbench does not parse. The output size is ONNX shape inference's."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from halbench.compiler.frontend.fold_shapes import _static_shapes

    g = model.graph
    todo = [n for n in g.node if n.op_type == "MaxPool" and n.domain in ("", "ai.onnx") and len(n.output) == 1
            and any(a.name == "kernel_shape" and len(a.ints) == 3 for a in n.attribute)]
    if not todo:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - without shapes the pools stay as they are
        return
    shapes = _static_shapes(inferred)
    f32 = {v.name for v in (*inferred.input, *inferred.value_info) if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    out = []
    for k, node in enumerate(g.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        xs, ys = shapes.get(node.input[0]), shapes.get(node.output[0])
        if (node not in todo or auto_pad not in (b"NOTSET", "NOTSET") or attrs.get("storage_order", 0)
                or xs is None or ys is None or len(xs) != 5 or node.input[0] not in f32):
            out.append(node)
            continue
        kd, kh, kw = attrs["kernel_shape"]
        sd, sh, sw = attrs.get("strides", [1, 1, 1])
        dd, dh, dw = attrs.get("dilations", [1, 1, 1])
        db, hb, wb, _de, he, we = attrs.get("pads", [0] * 6)  # (the depth end: from the output size)
        n, c, d = xs[:3]
        do, ho, wo = ys[2:]
        p = f"{node.output[0]}__mp3d{k}"

        def const(name: str, values: Any, dtype: Any = np.int64, p: str = p) -> str:
            g.initializer.append(numpy_helper.from_array(np.array(values, dtype), f"{p}_{name}"))
            return f"{p}_{name}"

        x = node.input[0]
        need = (do - 1) * sd + (kd - 1) * dd + 1  # input depth the windows span
        end = max(0, need - (d + db))
        if db or end:
            out.append(helper.make_node("Pad", [x, const("pads", [0, 0, db, 0, 0, 0, 0, end, 0, 0]),
                                                const("inf", -np.inf, np.float32)], [p + "_xp"]))
            x = p + "_xp"
        taps = []
        for i in range(kd):
            out.append(helper.make_node("Slice", [x, const(f"s{i}", [i * dd]), const(f"e{i}", [i * dd + (do - 1) * sd + 1]),
                                                  const(f"a{i}", [2]), const(f"t{i}", [sd])], [f"{p}_tap{i}"]))
            taps.append(f"{p}_tap{i}")
        if len(taps) > 1:
            out.append(helper.make_node("Max", taps, [p + "_max"]))
        m = p + "_max" if len(taps) > 1 else taps[0]
        pool2d = {"kernel_shape": [kh, kw], "strides": [sh, sw], "dilations": [dh, dw], "pads": [hb, wb, he, we],
                  "ceil_mode": int(attrs.get("ceil_mode", 0))}
        out += [helper.make_node("Transpose", [m], [p + "_t"], perm=[0, 2, 1, 3, 4]),
                helper.make_node("Reshape", [p + "_t", const("flat", [n * do, c, xs[3], xs[4]])], [p + "_f"]),
                helper.make_node("MaxPool", [p + "_f"], [p + "_pool"], **pool2d),
                helper.make_node("Reshape", [p + "_pool", const("unflat", [n, do, c, ho, wo])], [p + "_u"]),
                helper.make_node("Transpose", [p + "_u"], [node.output[0]], perm=[0, 2, 1, 3, 4])]
    del g.node[:]
    g.node.extend(out)


def _inferred_shapes(model: Any) -> dict[str, tuple[int, ...]] | None:
    """Static shapes of the model's values by ONNX shape inference (None where it fails)."""
    import onnx

    from halbench.compiler.frontend.fold_shapes import _static_shapes

    try:
        shapes = _static_shapes(onnx.shape_inference.infer_shapes(model).graph)
    except Exception:  # noqa: BLE001 - the rewrites that need shapes are then skipped
        return None
    return {**{t.name: tuple(int(d) for d in t.dims) for t in model.graph.initializer}, **shapes}


def _reverse_sequence_as_gather(model: Any) -> None:
    """ReverseSequence (torch-mlir lowers it to an scf.for loop, which halbench does not run) as
    the GatherElements it is: along the time axis, index ``len[b] - 1 - t`` where ``t < len[b]``,
    else ``t``, the lengths read at run time."""
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    if not any(n.op_type == "ReverseSequence" for n in g.node):
        return
    shapes = _inferred_shapes(model) or {}
    out = []
    for k, node in enumerate(g.node):
        xs = shapes.get(node.input[0]) if node.op_type == "ReverseSequence" else None
        if xs is None or node.domain not in ("", "ai.onnx"):
            out.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        bax, tax = int(attrs.get("batch_axis", 1)), int(attrs.get("time_axis", 0))
        if len(xs) < 2 or {bax, tax} != {0, 1}:
            raise CompileError(f"node '{node.name or node.output[0]}' (ReverseSequence): batch_axis {bax} and "
                               f"time_axis {tax} on a rank-{len(xs)} input, where ONNX wants 0 and 1 (either way "
                               f"round) on a rank-2 or higher input; fix the node's attributes")
        ls = shapes.get(node.input[1])
        if ls is not None and (len(ls) != 1 or ls[0] != xs[bax]):
            raise CompileError(f"node '{node.name or node.output[0]}' (ReverseSequence): sequence_lens of shape "
                               f"{list(ls)} for a batch of {xs[bax]}; give one length per batch entry")
        p = f"{node.output[0]}__rs{k}"
        t_shape = [1] * len(xs)
        t_shape[tax] = xs[tax]
        b_shape = [1] * len(xs)
        b_shape[bax] = xs[bax]
        g.initializer.extend([
            numpy_helper.from_array(np.arange(xs[tax], dtype=np.int64).reshape(t_shape), p + "_t"),
            numpy_helper.from_array(np.array(b_shape, np.int64), p + "_bshape"),
            numpy_helper.from_array(np.array(1, np.int64), p + "_one"),
            numpy_helper.from_array(np.array(xs, np.int64), p + "_xshape")])
        out += [helper.make_node("Cast", [node.input[1]], [p + "_len64"], to=7),  # (int32 or int64 lengths)
                helper.make_node("Reshape", [p + "_len64", p + "_bshape"], [p + "_len"]),
                helper.make_node("Less", [p + "_t", p + "_len"], [p + "_in"]),
                helper.make_node("Sub", [p + "_len", p + "_one"], [p + "_last"]),
                helper.make_node("Sub", [p + "_last", p + "_t"], [p + "_rev"]),
                helper.make_node("Where", [p + "_in", p + "_rev", p + "_t"], [p + "_idx"]),
                helper.make_node("Expand", [p + "_idx", p + "_xshape"], [p + "_full"]),
                helper.make_node("GatherElements", [node.input[0], p + "_full"], [node.output[0]], axis=tax)]
    del g.node[:]
    g.node.extend(out)


def _small_det_and_lp_norm(model: Any) -> None:
    """Two ops torch-mlir lowers with a division that the standard avoids:
    - Det of 2x2 and 3x3 matrices (an LU decomposition without pivoting: a zero first pivot
      gives NaN) as the cofactor expansion;
    - LpNormalization (``x / norm``: NaN for an all-zero vector, where the reference gives 0) as
      ``x / norm``, where a zero norm divides by 1.
    Needs opset 15 (CastLike); older models keep torch-mlir's lowering."""
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    opset = _default_opset(model)
    if opset < 15 or not any(n.op_type in ("Det", "LpNormalization") for n in g.node):
        return
    shapes = _inferred_shapes(model) or {}
    out = []
    for k, node in enumerate(g.node):
        xs = shapes.get(node.input[0]) if node.input else None
        p = f"{node.output[0]}__hb{k}" if node.output else ""
        if node.op_type == "Det" and xs is not None and len(xs) >= 2 and xs[-1] == xs[-2] and xs[-1] in (2, 3):
            n = xs[-1]
            g.initializer.append(numpy_helper.from_array(np.array([0] * (len(xs) - 2) + [n * n], np.int64), p + "_flat"))
            g.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), p + "_last"))
            out.append(helper.make_node("Reshape", [node.input[0], p + "_flat"], [p + "_f"]))
            e = []
            for i in range(n * n):
                g.initializer.extend([numpy_helper.from_array(np.array([i], np.int64), f"{p}_s{i}"),
                                      numpy_helper.from_array(np.array([i + 1], np.int64), f"{p}_e{i}")])
                out.append(helper.make_node("Slice", [p + "_f", f"{p}_s{i}", f"{p}_e{i}", p + "_last"], [f"{p}_x{i}"]))
                e.append(f"{p}_x{i}")

            def mul(a: str, b: str, name: str, p: str = p, out: list = out) -> str:
                out.append(helper.make_node("Mul", [a, b], [f"{p}_{name}"]))
                return f"{p}_{name}"

            def sub(a: str, b: str, name: str, p: str = p, out: list = out) -> str:
                out.append(helper.make_node("Sub", [a, b], [f"{p}_{name}"]))
                return f"{p}_{name}"

            if n == 2:
                det = sub(mul(e[0], e[3], "ad"), mul(e[1], e[2], "bc"), "det")
            else:
                m0 = sub(mul(e[4], e[8], "48"), mul(e[5], e[7], "57"), "m0")
                m1 = sub(mul(e[3], e[8], "38"), mul(e[5], e[6], "56"), "m1")
                m2 = sub(mul(e[3], e[7], "37"), mul(e[4], e[6], "46"), "m2")
                t = sub(mul(e[0], m0, "t0"), mul(e[1], m1, "t1"), "t01")
                out.append(helper.make_node("Add", [t, mul(e[2], m2, "t2")], [p + "_det"]))
                det = p + "_det"
            out.append(helper.make_node("Squeeze", [det, p + "_last"], [node.output[0]]))
            continue
        if node.op_type == "LpNormalization" and node.domain in ("", "ai.onnx"):
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            axis, pn = int(attrs.get("axis", -1)), int(attrs.get("p", 2))
            if pn not in (1, 2):
                out.append(node)
                continue
            reduce = "ReduceL1" if pn == 1 else "ReduceL2"
            g.initializer.extend([numpy_helper.from_array(np.array([axis], np.int64), p + "_axes"),
                                  numpy_helper.from_array(np.array(0.0, np.float32), p + "_zero"),
                                  numpy_helper.from_array(np.array(1.0, np.float32), p + "_one")])
            red = (helper.make_node(reduce, [node.input[0], p + "_axes"], [p + "_norm"], keepdims=1) if opset >= 18
                   else helper.make_node(reduce, [node.input[0]], [p + "_norm"], axes=[axis], keepdims=1))
            out += [red,
                    helper.make_node("CastLike", [p + "_zero", node.input[0]], [p + "_z"]),
                    helper.make_node("CastLike", [p + "_one", node.input[0]], [p + "_o"]),
                    helper.make_node("Equal", [p + "_norm", p + "_z"], [p + "_is0"]),
                    helper.make_node("Where", [p + "_is0", p + "_o", p + "_norm"], [p + "_den"]),
                    helper.make_node("Div", [node.input[0], p + "_den"], [node.output[0]])]
            continue
        out.append(node)
    del g.node[:]
    g.node.extend(out)


#: A reduction over one element, per op: the element-wise op it is (None: the element itself)
_UNIT_REDUCTIONS = {"ReduceSum": None, "ReduceMean": None, "ReduceMax": None, "ReduceMin": None, "ReduceProd": None,
                    "ReduceLogSumExp": None, "ReduceL1": "Abs", "ReduceL2": "Abs", "ReduceSumSquare": "Square",
                    "ReduceLogSum": "Log"}


def _unit_reductions_as_elementwise(model: Any) -> None:
    """A Reduce* node that keeps its dims and whose every reduced axis has length 1 as the
    element-wise op it is (an Identity, Abs, x * x or Log). torch-mlir's conversion of
    ReduceL2 / ReduceLogSum / ReduceLogSumExp over only unit axes aborts the whole process (an
    LLVM fatal error in the dialect conversion, not an exception); LpNormalization along a unit
    axis reaches it through _small_det_and_lp_norm's ReduceL2. Axes must be an attribute or an
    initializer; a reduction over all axes (none given) counts every axis. A reduction with no
    axes and noop_with_empty_axes (torch-mlir aborts on it too) is that element-wise op as well,
    as onnxruntime and the reference give it."""
    from onnx import helper, numpy_helper

    g = model.graph
    if not any(n.op_type in _UNIT_REDUCTIONS and n.domain in ("", "ai.onnx") for n in g.node):
        return
    shapes = _inferred_shapes(model) or {}
    inits = {t.name: t for t in g.initializer}
    out = []
    for node in g.node:
        xs = shapes.get(node.input[0]) if node.input else None
        if node.op_type not in _UNIT_REDUCTIONS or node.domain not in ("", "ai.onnx") or xs is None:
            out.append(node)
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if len(node.input) > 1 and node.input[1]:
            if node.input[1] not in inits:
                out.append(node)
                continue
            axes = [int(a) for a in numpy_helper.to_array(inits[node.input[1]]).reshape(-1)]
        else:
            axes = [int(a) for a in attrs.get("axes", [])]
        noop = not axes and int(attrs.get("noop_with_empty_axes", 0))  # (the element-wise op too)
        if not axes and not noop:
            axes = list(range(len(xs)))
        if not noop and (int(attrs.get("keepdims", 1)) != 1 or any(not -len(xs) <= a < len(xs) for a in axes)
                         or any(xs[a] != 1 for a in axes)):
            out.append(node)
            continue
        op = _UNIT_REDUCTIONS[node.op_type]
        x, y = node.input[0], node.output[0]
        if op is None:
            out.append(helper.make_node("Identity", [x], [y]))
        elif op == "Square":
            out.append(helper.make_node("Mul", [x, x], [y]))
        else:
            out.append(helper.make_node(op, [x], [y]))
    del g.node[:]
    g.node.extend(out)


def _conv_transpose_same_as_pads(model: Any) -> None:
    """ConvTranspose with auto_pad SAME_UPPER / SAME_LOWER (which torch-mlir's conversion refuses)
    with the explicit pads the standard defines for it: output size input * stride, the total
    padding split in halves, the odd one at the end (UPPER) or the start (LOWER)."""
    import numpy as np
    from onnx import helper, numpy_helper

    g = model.graph
    todo = [n for n in g.node if n.op_type == "ConvTranspose" and any(
        a.name == "auto_pad" and a.s in (b"SAME_UPPER", b"SAME_LOWER") for a in n.attribute)]
    if not todo:
        return
    shapes = _inferred_shapes(model) or {}
    crops = []
    for node in todo:
        xs, ws = shapes.get(node.input[0]), shapes.get(node.input[1])
        if xs is None or ws is None:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if "output_shape" in attrs:
            continue
        rank = len(xs) - 2
        kernel = list(attrs.get("kernel_shape", ws[2:]))
        strides = list(attrs.get("strides", [1] * rank))
        dil = list(attrs.get("dilations", [1] * rank))
        outpad = list(attrs.get("output_padding", [0] * rank))
        upper = attrs["auto_pad"] in (b"SAME_UPPER", "SAME_UPPER")
        begin, end = [], []
        for i in range(rank):
            total = max(0, strides[i] * (xs[2 + i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1
                        - xs[2 + i] * strides[i])
            small = total // 2
            begin.append(small if upper else total - small)
            end.append(total - small if upper else small)
        keep = [a for a in node.attribute if a.name not in ("auto_pad", "pads")]
        del node.attribute[:]
        node.attribute.extend(keep)
        if begin == end:
            node.attribute.append(helper.make_attribute("pads", begin + end))
            continue
        # torch-mlir takes symmetric pads only: no pads, then the output cropped by a Slice
        full = [strides[i] * (xs[2 + i] - 1) + outpad[i] + (kernel[i] - 1) * dil[i] + 1 for i in range(rank)]
        y, p = node.output[0], f"{node.output[0]}__same"
        node.output[0] = p + "_full"
        g.initializer.extend([numpy_helper.from_array(np.array(begin, np.int64), p + "_s"),
                              numpy_helper.from_array(np.array([f - e for f, e in zip(full, end)], np.int64), p + "_e"),
                              numpy_helper.from_array(np.arange(2, 2 + rank, dtype=np.int64), p + "_a")])
        crops.append((node, helper.make_node("Slice", [p + "_full", p + "_s", p + "_e", p + "_a"], [y])))
    for node, crop in crops:
        i = list(g.node).index(node)
        g.node.insert(i + 1, crop)


def _lppool_as_average(g: Any) -> None:
    """LpPool with dilations or auto_pad SAME_* (which torch-mlir's conversion refuses) as
    ``(AveragePool(|x|^p, count_include_pad=1) * window) ^ (1/p)``: the padding holds zeros, which
    add nothing to the sum of |x|^p, and the average over the whole window times its size is that
    sum. Other LpPools, and those whose input is not known to be f32, are left to torch-mlir."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    f32 = {v.name for v in (*g.input, *g.value_info) if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    out = []
    for k, node in enumerate(g.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if (node.op_type != "LpPool" or node.domain not in ("", "ai.onnx") or node.input[0] not in f32
                or (all(d == 1 for d in attrs.get("dilations", [])) and auto_pad in ("NOTSET", "VALID"))):
            out.append(node)
            continue
        p = int(attrs.get("p", 2))
        window = int(np.prod(attrs["kernel_shape"]))
        pre = f"{node.output[0]}__lp{k}"
        g.initializer.extend([numpy_helper.from_array(np.array(p, np.float32), pre + "_p"),
                              numpy_helper.from_array(np.array(window, np.float32), pre + "_n"),
                              numpy_helper.from_array(np.array(1.0 / p, np.float32), pre + "_r")])
        pool = {n: v for n, v in attrs.items() if n in ("kernel_shape", "strides", "pads", "dilations", "ceil_mode")}
        if auto_pad != "NOTSET":
            pool["auto_pad"] = auto_pad
        out += [helper.make_node("Abs", [node.input[0]], [pre + "_abs"]),
                helper.make_node("Pow", [pre + "_abs", pre + "_p"], [pre + "_pow"]),
                helper.make_node("AveragePool", [pre + "_pow"], [pre + "_avg"], count_include_pad=1, **pool),
                helper.make_node("Mul", [pre + "_avg", pre + "_n"], [pre + "_sum"]),
                helper.make_node("Pow", [pre + "_sum", pre + "_r"], [node.output[0]])]
    del g.node[:]
    g.node.extend(out)


def _space_to_depth_crd(g: Any) -> None:
    """SpaceToDepth in CRD mode (opset 28), which torch-mlir lowers as DCR: the standard's own
    Reshape -> Transpose(0, 1, 3, 5, 2, 4) -> Reshape, for a static 4-D input; DepthToSpace in CRD
    mode likewise (Reshape -> Transpose(0, 1, 4, 2, 5, 3) -> Reshape): torch-mlir's lowering
    permuted its elements (found by tests/compiler/test_op_fuzz.py). SpaceToDepth and DepthToSpace
    of block size 1 are identities."""
    import numpy as np
    from onnx import helper, numpy_helper

    from halbench.compiler.frontend.fold_shapes import _static_shapes

    shapes = _static_shapes(g)
    out = []
    for k, node in enumerate(g.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        shape = shapes.get(node.input[0]) if node.input else None
        bs = int(attrs.get("blocksize", 0))
        if node.op_type in ("SpaceToDepth", "DepthToSpace") and node.domain in ("", "ai.onnx") and bs < 1:
            raise CompileError(f"node '{node.name or node.output[0]}' ({node.op_type}): blocksize "
                               f"{attrs.get('blocksize', '(missing)')} is not a positive integer; fix the node "
                               f"(torch-mlir's lowering divides by it and kills the process)")
        if (node.op_type in ("SpaceToDepth", "DepthToSpace") and node.domain in ("", "ai.onnx")
                and bs == 1):
            out.append(helper.make_node("Identity", [node.input[0]], [node.output[0]]))  # (mis-lowered in CRD mode)
            continue
        crd = attrs.get("mode") in (b"CRD", "CRD")
        if (node.op_type == "DepthToSpace" and node.domain in ("", "ai.onnx") and crd and shape is not None
                and len(shape) == 4 and bs >= 1 and shape[1] % (bs * bs) == 0):
            b = int(attrs["blocksize"])
            n, c, h, w = shape
            p = f"{node.output[0]}__crd{k}"
            g.initializer.append(numpy_helper.from_array(np.array([n, c // (b * b), b, b, h, w], np.int64), p + "_s6"))
            g.initializer.append(numpy_helper.from_array(np.array([n, c // (b * b), h * b, w * b], np.int64), p + "_s4"))
            out += [helper.make_node("Reshape", [node.input[0], p + "_s6"], [p + "_r"]),
                    helper.make_node("Transpose", [p + "_r"], [p + "_t"], perm=[0, 1, 4, 2, 5, 3]),
                    helper.make_node("Reshape", [p + "_t", p + "_s4"], [node.output[0]])]
            continue
        if (node.op_type != "SpaceToDepth" or node.domain not in ("", "ai.onnx")
                or not crd or shape is None or len(shape) != 4 or bs < 1):
            out.append(node)
            continue
        b = int(attrs["blocksize"])
        n, c, h, w = shape
        p = f"{node.output[0]}__crd{k}"
        g.initializer.append(numpy_helper.from_array(np.array([n, c, h // b, b, w // b, b], np.int64), p + "_s6"))
        g.initializer.append(numpy_helper.from_array(np.array([n, c * b * b, h // b, w // b], np.int64), p + "_s4"))
        out += [helper.make_node("Reshape", [node.input[0], p + "_s6"], [p + "_r"]),
                helper.make_node("Transpose", [p + "_r"], [p + "_t"], perm=[0, 1, 3, 5, 2, 4]),
                helper.make_node("Reshape", [p + "_t", p + "_s4"], [node.output[0]])]
    del g.node[:]
    g.node.extend(out)


def _resize_axes_to_full_rank(g: Any) -> None:
    """A Resize with ``axes`` (opset 18+) and constant scales or sizes becomes the same Resize
    over every axis (scale 1, or the input's own size, on the others): torch-mlir's conversion
    refuses ``axes``. Left alone under a keep_aspect_ratio_policy other than 'stretch'."""
    import numpy as np
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in g.initializer}
    shapes = {}
    for v in (*g.input, *g.value_info, *g.output):
        t = v.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            shapes[v.name] = [d.dim_value for d in t.shape.dim]
    for k, node in enumerate(g.node):
        if node.op_type != "Resize" or node.domain not in ("", "ai.onnx"):
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axes, policy = attrs.get("axes"), attrs.get("keep_aspect_ratio_policy", b"stretch")
        shape = shapes.get(node.input[0])
        if not axes or policy not in (b"stretch", "stretch") or shape is None:
            continue
        rank = len(shape)
        axes = [a + rank if a < 0 else a for a in axes]
        slot = next((i for i in (3, 2) if len(node.input) > i and node.input[i] in inits), None)
        if slot is None or sorted(axes) != sorted(set(axes)) or not all(0 <= a < rank for a in axes):
            continue
        given = numpy_helper.to_array(inits[node.input[slot]])
        full = np.array(shape, np.int64) if slot == 3 else np.ones(rank, given.dtype)
        for a, v in zip(axes, given):
            full[a] = v
        name = f"{node.input[slot]}__full{k}"
        g.initializer.append(numpy_helper.from_array(full.astype(given.dtype), name))
        node.input[slot] = name
        keep = [a for a in node.attribute if a.name != "axes"]
        del node.attribute[:]
        node.attribute.extend(keep)


def _constants_to_initializers(g: Any) -> None:
    """ONNX Constant nodes holding tensors become initializers: one path for all weights."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    keep = []
    for node in g.node:
        a = node.attribute[0] if len(node.attribute) == 1 else None
        if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or a is None:
            keep.append(node)
            continue
        if a.name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(a.t)
        elif a.name in ("value_float", "value_int"):
            t = numpy_helper.from_array(np.array(a.f if a.name == "value_float" else a.i,
                                                 np.float32 if a.name == "value_float" else np.int64))
        elif a.name in ("value_floats", "value_ints"):
            t = numpy_helper.from_array(np.array(list(a.floats) if a.name == "value_floats" else list(a.ints),
                                                 np.float32 if a.name == "value_floats" else np.int64))
        else:
            keep.append(node)  # sparse and string constants: the importer's business
            continue
        t.name = node.output[0]
        g.initializer.append(t)
    if len(keep) != len(g.node):
        del g.node[:]
        g.node.extend(keep)


def _name_resources(model: Any, names: dict[str, str], arrays: dict[str, Any]) -> Any:
    """Unique, identifier-safe resource names for initializers not named yet (``hbwN``); remember
    which initializer each one is. Shapes are inferred afresh (old value_info can contradict
    overridden input shapes)."""
    import onnx
    from onnx import numpy_helper

    g = model.graph
    rename: dict[str, str] = {}
    for t in g.initializer:
        if t.name in arrays:
            continue
        new = f"hbw{len(arrays)}"
        rename[t.name] = new
        names[new] = t.name
        arrays[new] = numpy_helper.to_array(t)
        t.name = new
    _rename_inputs(g.node, rename)
    for o in g.output:
        if o.name in rename:
            o.name = rename[o.name]
    del g.value_info[:]
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001
        raise CompileError(f"ONNX shape inference failed: {str(e).splitlines()[0]}") from None


def _rename_inputs(nodes: Any, rename: dict[str, str]) -> None:
    """Node inputs renamed, in subgraphs (If / Loop / Scan bodies) too: a body may use an outer
    initializer by name."""
    import onnx

    for node in nodes:
        for j, x in enumerate(node.input):
            if x in rename:
                node.input[j] = rename[x]
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_inputs(a.g.node, rename)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _rename_inputs(sub.node, rename)


#: ONNX op -> the input positions a static-shape compiler needs at compile time: shapes, axes,
#: pads, sizes, counts and quantization parameters. Exporters store these as initializers; a
#: model that takes them as inputs compiles once they are frozen (``--freeze-input``).
COMPILE_TIME_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 3),
    "ConstantOfShape": (0,), "Squeeze": (1,), "Unsqueeze": (1,), "Split": (1,), "TopK": (1,),
    "Resize": (1, 2, 3), "Upsample": (1,), "Range": (0, 1, 2), "OneHot": (1,), "CenterCropPad": (1, 2),
    "Trilu": (1,), "CumSum": (1,), "CumProd": (1,), "NonMaxSuppression": (2, 3, 4), "Compress": (1,),
    "DFT": (1, 2), "STFT": (1, 3), "MelWeightMatrix": (0, 1, 2, 3, 4), "BlackmanWindow": (0,),
    "HannWindow": (0,), "HammingWindow": (0,), "Col2Im": (1, 2), "AffineGrid": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,), "QuantizeLinear": (1, 2), "DequantizeLinear": (1, 2),
    "QLinearMatMul": (1, 2, 4, 5, 6, 7), "QLinearConv": (1, 2, 4, 5, 6, 7), "ConvInteger": (2, 3),
    "MatMulInteger": (2, 3), "Dropout": (1, 2), "Loop": (0, 1),
}


def compile_time_inputs(model: Any) -> list[str]:
    """The graph inputs that feed a compile-time operand (see COMPILE_TIME_OPERANDS), directly or,
    for operands that set shapes, through the values computed from them (a Loop's trip count from
    a Range's bounds); a Shape or Size node reads only its input's shape, so the trail stops
    there."""
    g = model.graph
    inputs = {i.name for i in g.input} - {t.name for t in g.initializer}
    producer = {o: n for n in g.node for o in n.output if o}
    out: list[str] = []
    seen: set[str] = set()

    def trace(v: str) -> None:
        stack = [v]
        while stack:
            v = stack.pop()
            if not v or v in seen:
                continue
            seen.add(v)
            if v in inputs:
                out.append(v)
                continue
            n = producer.get(v)
            if n is not None and n.domain in ("", "ai.onnx") and n.op_type not in ("Shape", "Size"):
                stack.extend(n.input)

    for node in g.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        for k in COMPILE_TIME_OPERANDS.get(node.op_type, ()):
            if k >= len(node.input):
                continue
            if node.op_type in _VALUE_OPERANDS:  # (dynamic quantization computes its scale from the data)
                v = node.input[k]
                if v in inputs and v not in out:
                    out.append(v)
            else:
                trace(node.input[k])
    return out


#: Ops whose compile-time operands are values, not shapes (a quantization's scale, a dropout's
#: ratio): only a graph input given there directly is frozen, not the data it may be computed from.
_VALUE_OPERANDS = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearMatMul", "QLinearConv", "ConvInteger",
                             "MatMulInteger", "Dropout"})


def _node_label(node: Any, opset: int) -> str:
    from onnx import helper

    attrs = []
    for a in node.attribute:
        if a.type in (1, 2, 3, 6, 7, 8):  # float, int, string and their lists: short enough to show
            v = helper.get_attribute_value(a)
            v = v.decode() if isinstance(v, bytes) else v
            attrs.append(f"{a.name}={v!r}" if isinstance(v, str) else f"{a.name}={v}")
    domain = f", domain '{node.domain}'" if node.domain not in ("", "ai.onnx") else ""
    extra = (", " + ", ".join(attrs)) if attrs else ""
    return f"node '{node.name or node.output[0]}' ({node.op_type}, opset {opset}{domain}{extra})"


def _freeze_hint(model: Any) -> str:
    frozen = compile_time_inputs(model)
    return (f"; inputs {frozen} set shapes or axes: freeze them with --freeze-input NAME=VALUE"
            if frozen else "")


def describe_lowering_failure(model: Any, error: str, what: str) -> str:
    """One line naming the ONNX node that torch-mlir could not lower, and the way out."""
    opset = _default_opset(model)
    opsets = {o.domain or "": int(o.version) for o in model.opset_import}
    foreign = [n for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    m = re.search(r'name = "onnx\.(\w+)"', error)
    aten = re.search(r"legalize operation '(torch\.(?:aten|prim|constant)\.[\w.]+)'", error)
    hint = _freeze_hint(model)
    if foreign:
        return (f"{what}: {_node_label(foreign[0], opsets.get(foreign[0].domain, 0))} is outside the default ONNX domain, which is all "
                f"halbench's importer takes{hint}")
    if m:
        nodes = [n for n in model.graph.node if n.op_type == m.group(1)]
        label = _node_label(nodes[0], opset) if nodes else f"an ONNX {m.group(1)} node"
        return (f"{what}: {label} cannot be lowered by halbench's importer (torch-mlir's ONNX conversion has no "
                f"pattern for this op with these attributes and types){hint}")
    if aten:
        return (f"{what}: the model needs '{aten.group(1)}', which torch-mlir cannot lower to linalg here "
                f"(an ONNX op with attributes or types its conversion does not cover){hint}")
    first = error.split(" failed: ", 1)[-1]
    return f"{what}: torch-mlir's lowering to linalg failed: {first[:300]}{hint}"


def _freeze_inputs(g: Any, values: dict[str, Any]) -> None:
    """Graph inputs named in ``values`` become initializers holding those values."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    inputs = {i.name: i for i in g.input}
    unknown = sorted(set(values) - set(inputs))
    if unknown:
        raise UserError(f"--freeze-input names {unknown}, but the model's inputs are {sorted(inputs)}")
    for name, value in values.items():
        tt = inputs[name].type.tensor_type
        want = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type) if tt.elem_type else None
        a = np.asarray(value)
        if want is not None and a.dtype != want:
            raise UserError(f"--freeze-input {name}: the model's input is {np.dtype(want).name}, the value "
                            f"given is {a.dtype.name}")
        dims = tt.shape.dim if tt.HasField("shape") else []
        if len(dims) and (len(dims) != a.ndim or any(
                d.HasField("dim_value") and d.dim_value != s for d, s in zip(dims, a.shape))):
            raise UserError(f"--freeze-input {name}: the model's input has shape "
                            f"{[d.dim_value if d.HasField('dim_value') else '?' for d in dims]}, the value "
                            f"{list(a.shape)}")
        g.initializer.append(numpy_helper.from_array(a, name))


def _import(model: Any, path: Path) -> Any:
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer

    ctx = ir.Context()
    try:
        info = onnx_importer.ModelInfo(model)
        module = info.create_module(context=ctx)
        imp = onnx_importer.NodeImporter.define_function(info.main_graph, module.operation)
        imp.import_all()
    except onnx_importer.OnnxImportError as e:
        raise CompileError(f"importing {path.name}: {e}") from None
    return module


#: The first step of TORCH_TO_LINALG: ONNX ops (``torch.operator "onnx.X"``) to torch ops.
_ONNX_TO_TORCH = "builtin.module(func.func(convert-torch-onnx-to-torch))"


def _unconverted_ops(module: Any) -> set[str]:
    """ONNX op types that torch-mlir's ONNX conversion leaves as ``torch.operator`` (converts in place)."""
    from halbench.compiler.frontend.mlir import run_pipeline

    try:
        run_pipeline(module, _ONNX_TO_TORCH, "converting ONNX ops to torch ops")
    except CompileError:
        return set()  # the full pipeline reports it
    left: set[str] = set()

    def walk(op: Any) -> None:
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    o = inner.operation
                    if o.name == "torch.operator":
                        n = str(o.attributes["name"]).strip('"')
                        if n.startswith("onnx."):
                            left.add(n[5:])
                    walk(o)

    walk(module.operation)
    return left


def load_onnx(path: Path, input_shapes: dict[str, tuple[int, ...]], input_values: dict[str, Any] | None = None,
              random_seed: int | None = None) -> Imported:
    import onnx
    from google.protobuf.message import DecodeError

    t0 = time.perf_counter()
    try:
        model = onnx.load(str(path))
    except (DecodeError, ValueError, OSError) as e:
        raise UserError(f"{path.name} is not a valid ONNX model: {e}") from None
    if not model.graph.node:
        raise UserError(f"{path.name} is not a valid ONNX model: its graph has no nodes")
    notes: list[str] = []
    random_weights = None
    if random_seed is not None:
        from halbench.bundle.weights import randomize_onnx

        random_weights = randomize_onnx(model, random_seed)
    model, names, arrays = prepare_model(model, input_shapes, input_values, notes)
    input_names = [i.name for i in model.graph.input]
    output_names = [names.get(o.name, o.name) for o in model.graph.output]
    t1 = time.perf_counter()
    from halbench.compiler.frontend.node_rewrites import unroll_control_flow
    from halbench.compiler.frontend.onnx_functions import ALWAYS_EXPAND, PREVIEW, expand_functions

    module = None
    # Ops torch-mlir's ONNX conversion leaves behind are replaced by their ONNX function bodies
    # (the standard's own definition), and the model is imported again.
    pending = ({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")} & ALWAYS_EXPAND
               | {n.op_type for n in model.graph.node if n.domain == PREVIEW})
    for _ in range(4):
        expanded: list[str] = []
        if pending:
            model, expanded = expand_functions(model, pending)
            if expanded:
                notes.append(f"expanded {', '.join(sorted(expanded))} into the ONNX standard's function "
                             f"bodies (torch-mlir does not lower them)")
                _constants_to_initializers(model.graph)
                model = fold_shape_computations(model)
                if unroll_control_flow(model):  # a function body's Scan / Loop
                    model = fold_shape_computations(model)
                model = _name_resources(model, names, arrays)
        if module is not None and not expanded:
            break
        module = _import(model, path)
        pending = _unconverted_ops(module) | (
            {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")} & ALWAYS_EXPAND)
        if not pending:
            break
    t2 = time.perf_counter()
    try:
        run_pipeline(module, TORCH_TO_LINALG, f"lowering {path.name} to linalg")
    except CompileError as e:
        raise CompileError(describe_lowering_failure(model, str(e), path.name)) from None
    t3 = time.perf_counter()
    io_dtypes = {names.get(v.name, v.name): _ONNX_DTYPES[v.type.tensor_type.elem_type]
                 for v in list(model.graph.input) + list(model.graph.output)
                 if v.type.tensor_type.elem_type in _ONNX_DTYPES}
    return Imported(module, input_names, output_names, arrays, names,
                    {"load_onnx": t1 - t0, "import_onnx": t2 - t1, "torch_to_linalg": t3 - t2},
                    io_dtypes, notes, _freeze_hint(model), random_weights)


#: ONNX TensorProto element types -> halbench dtypes (those a signature can carry).
_ONNX_DTYPES = {1: "f32", 2: "u8", 3: "i8", 4: "u16", 5: "i16", 6: "i32", 7: "i64", 9: "i1", 10: "f16",
                11: "f64", 12: "u32", 13: "u64", 16: "bf16"}
