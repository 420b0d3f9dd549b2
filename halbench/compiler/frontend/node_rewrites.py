"""ONNX nodes torch-mlir cannot lower (or lowers wrongly), written as the standard ops they equal.

Each rewrite replaces a node by default-domain nodes with the same outputs, before the model
reaches torch-mlir. Without shapes (``rewrite_ml_and_training_nodes``, after the opset upgrade):

* the optimizers of ``ai.onnx.preview.training`` (Adagrad, Adam, Momentum in both modes), one
  element-wise chain per optimized tensor, the formulas of the operator specification;
* Gelu with ``approximate='tanh'`` as its formula (torch-mlir's lowering multiplies by 0.797724
  where sqrt(2 / pi) is 0.7978846: 2e-4 off, and 1e-3 relative in the tail);
* ``ai.onnx.ml`` Binarizer (``X > threshold`` as 0 / 1 of X's type) and ArrayFeatureExtractor
  (a Gather along the last axis);
* an f16 Range (torch-mlir lowers none) counted in f32 and cast to f16;
* Softsign as ``x / (1 + |x|)`` (torch-mlir's conversion has no pattern for it), and Clip with
  a max but no min as a Min (torch-mlir's lowering fails on the absent min).

With the static shapes of ONNX shape inference (``rewrite_nodes_with_shapes``):

* Compress with a constant condition (frozen, as conformance and ``--freeze-input`` do): a
  Gather of the selected indices, the input flattened first where no axis is given;
* ScatterElements with reduction ``max`` / ``min``: the updates spread over a one-hot of their
  indices (the reduction's neutral value elsewhere), reduced along the scatter axis, padded to
  the data's shape and combined with the data by Max / Min;
* Resize to constant sizes under a keep_aspect_ratio_policy: a Resize by the one scale the
  policy picks, where that gives the policy's output size (else by tables, below);
* Resize with constant scales / sizes / roi where torch-mlir has no pattern or the wrong
  coordinates (``tf_crop_and_resize``, ``antialias``, ``exclude_outside``; ``align_corners``
  with nearest, or with scales that give a fractional output length, which the specification's
  coordinates use): per resized axis a
  Gather of the taps at compile-time indices (clamped: the edge repeats), weighted by
  compile-time coefficients and summed, the extrapolation value where tf_crop_and_resize falls
  outside the input;
* DFT (forward, inverse, onesided, inverse onesided) as matrix products with compile-time cosine
  and sine tables, and STFT as compile-time frame gathers, the window, and that DFT;
* AveragePool with ceil_mode, count_include_pad and pads as floor mode over grown end pads
  (the standard drops a last window starting in the end padding), scaled by window / taps inside
  where windows reach past the padded input (torch-mlir divides those by the whole window);
* MaxPool (and AveragePool without count_include_pad) with ceil_mode as floor mode with grown end pads (torch-mlir keeps a last window that
  the standard drops, or fails to lower);
* Pad with a negative (cropping) pad as a Slice, then the Pad; 'reflect' and 'edge' pads as a
  Gather per axis at compile-time indices (torch-mlir lowers some to a reversed indexing map or
  to dynamic shapes);
* Slice with a negative step (constant bounds) as a Gather per axis at the indices it takes;
* a 3-D ConvTranspose as one 2-D ConvTranspose (the filter's depth taps as output channels) and
  a constant 0 / 1 product that sums each output depth's planes (torch-mlir lowers none);
* a 3-D Conv as one 2-D Conv: each output depth's input taps gathered into the channels, the
  output depths folded into the batch (halbench's code generator has no 3-D convolution);
* Col2Im (N-D) as a gather of each image element's column elements at compile-time indices;
* ConvTranspose with groups as one per group (torch-mlir's lowering of groups fails), and with
  asymmetric pads as the unpadded one cropped by a Slice (torch-mlir has no pattern for them);
* QuantizeLinear / DequantizeLinear with blocked scales as their formulas;
* TensorScatter (a KV cache's update, linear or circular) as a select between the cache and the
  update row each position takes;
* GridSample (4-D and 5-D; nearest, linear, and cubic on 4-D; every padding mode) as gathers from
  the flattened image at clamped indices: torch-mlir's lowering rounds nearest halves up, reads
  outside the image under padding 'zeros', and has no border or reflection padding, no cubic
  mode and no 5-D input;
* RNN, GRU and LSTM (default activations) unrolled over their time steps, each direction, with
  sequence lengths read at run time: torch-mlir lowers only the forward direction (to a loop)
  and drops LSTM's peepholes.

After shape folding (``unroll_control_flow``): Scan over a static length, and Loop with a
constant trip count whose body keeps its condition true, unrolled (at most
``MAX_UNROLLED_STEPS`` steps, ``MAX_UNROLLED_NODES`` nodes): torch-mlir lowers both to loops (scf.for / scf.while), which
halbench does not run; an If with a constant condition becomes the branch it takes, one with a
run-time condition a Where of both branches (where they declare the same static shapes).

A node a rewrite cannot take (shapes or types it does not fit, a condition known only at run
time, a one-hot too large, too many steps) is left as it is, and torch-mlir's lowering or refusal
applies as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["rewrite_ml_and_training_nodes", "rewrite_nodes_with_shapes", "unroll_control_flow"]

_TRAINING = "ai.onnx.preview.training"
_ML = "ai.onnx.ml"
#: Floating-point element types (f16, f32, f64, bf16)
_FLOATS = (10, 1, 11, 16)
#: Largest one-hot (indices x axis length elements) a ScatterElements min / max is spread over
_MAX_ONE_HOT = 1 << 24


class _Builder:
    """Appends nodes and scalar constants with names unique to one rewritten node."""

    def __init__(self, g: Any, prefix: str) -> None:
        self.g, self.prefix, self.nodes, self.k = g, prefix, [], 0

    def name(self) -> str:
        self.k += 1
        return f"{self.prefix}_{self.k}"

    def const(self, value: Any, dtype: Any = None) -> str:
        import numpy as np
        from onnx import numpy_helper

        name = self.name()
        self.g.initializer.append(numpy_helper.from_array(np.asarray(value, dtype or np.float32), name))
        return name

    def op(self, op_type: str, inputs: list[str], output: str | None = None, **attrs: Any) -> str:
        from onnx import helper

        out = output or self.name()
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out


def _elem_types(model: Any, inferred: Any = None) -> dict[str, int]:
    """Element type (TensorProto enum) of each value whose type is declared or inferable
    (``inferred``: the graph of ONNX shape inference over ``model``, where the caller ran it)."""
    import onnx

    g = model.graph
    out = {t.name: int(t.data_type) for t in g.initializer}
    if inferred is None:
        try:
            inferred = onnx.shape_inference.infer_shapes(model).graph
        except Exception:  # noqa: BLE001 - declared types only
            inferred = g
    for vi in [*inferred.input, *inferred.value_info, *inferred.output]:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out.setdefault(vi.name, int(vi.type.tensor_type.elem_type))
    return out


def _shapes_and_types(model: Any) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Static shapes and element types of the model's values, from one ONNX shape inference
    (declared types only, and no shapes but the initializers', where it fails)."""
    import onnx

    from halbench.compiler.frontend.fold_shapes import _static_shapes

    g = model.graph
    shapes = {t.name: tuple(int(d) for d in t.dims) for t in g.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
        shapes.update(_static_shapes(inferred))
    except Exception:  # noqa: BLE001 - the rewrites that need shapes are then skipped
        inferred = g
    return shapes, _elem_types(model, inferred)


def _default_opset(model: Any) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _attrs(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _adagrad(b: _Builder, a: dict[str, Any], r: str, t: str, x: str, g: str, h: str,
             outs: tuple[str, str]) -> None:
    tf = b.op("Cast", [t], to=1)
    rate = b.op("Div", [r, b.op("Add", [b.const(1.0), b.op("Mul", [tf, b.const(a.get("decay_factor", 0.0))])])])
    greg = b.op("Add", [b.op("Mul", [b.const(a.get("norm_coefficient", 0.0)), x]), g])
    h_new = b.op("Add", [h, b.op("Mul", [greg, greg])], outs[1])
    scale = b.op("Add", [b.op("Sqrt", [h_new]), b.const(a.get("epsilon", 0.0))])
    b.op("Sub", [x, b.op("Div", [b.op("Mul", [rate, greg]), scale])], outs[0])


def _momentum(b: _Builder, a: dict[str, Any], r: str, t: str, x: str, g: str, v: str,
              outs: tuple[str, str]) -> None:
    alpha = b.const(a["alpha"])
    greg = b.op("Add", [b.op("Mul", [b.const(a["norm_coefficient"]), x]), g])
    # the gradient's coefficient is 1 at the first step (T = 0)
    beta = b.op("Where", [b.op("Greater", [t, b.const(0, "int64")]), b.const(a["beta"]), b.const(1.0)])
    v_new = b.op("Add", [b.op("Mul", [alpha, v]), b.op("Mul", [beta, greg])], outs[1])
    mode = a.get("mode", b"standard")
    step = v_new if mode in (b"standard", "standard") else b.op("Add", [greg, b.op("Mul", [alpha, v_new])])
    b.op("Sub", [x, b.op("Mul", [r, step])], outs[0])


def _adam(b: _Builder, a: dict[str, Any], r: str, t: str, x: str, g: str, v: str, h: str,
          outs: tuple[str, str, str]) -> None:
    al, be = float(a.get("alpha", 0.9)), float(a.get("beta", 0.999))
    greg = b.op("Add", [b.op("Mul", [b.const(a.get("norm_coefficient", 0.0)), x]), g])
    v_new = b.op("Add", [b.op("Mul", [b.const(al), v]), b.op("Mul", [b.const(1.0 - al), greg])], outs[1])
    h_new = b.op("Add", [b.op("Mul", [b.const(be), h]),
                         b.op("Mul", [b.const(1.0 - be), b.op("Mul", [greg, greg])])], outs[2])
    denom = b.op("Add", [b.op("Sqrt", [h_new]), b.const(a.get("epsilon", 1e-6))])
    # bias correction from the second step on: R * sqrt(1 - beta^T) / (1 - alpha^T)
    tf = b.op("Cast", [t], to=1)
    corrected = b.op("Div", [b.op("Mul", [r, b.op("Sqrt", [b.op("Sub", [b.const(1.0), b.op("Pow", [b.const(be), tf])])])]),
                             b.op("Sub", [b.const(1.0), b.op("Pow", [b.const(al), tf])])])
    rate = b.op("Where", [b.op("Greater", [t, b.const(0, "int64")]), corrected, r])
    x_new = b.op("Sub", [x, b.op("Mul", [rate, b.op("Div", [v_new, denom])])])
    b.op("Mul", [b.const(1.0 - float(a.get("norm_coefficient_post", 0.0))), x_new], outs[0])


#: op -> (tensors per optimized variable after R and T, the rewrite)
_OPTIMIZERS: dict[str, tuple[int, Callable[..., None]]] = {
    "Adagrad": (3, _adagrad), "Momentum": (3, _momentum), "Adam": (4, _adam)}


def _gelu_tanh(node: Any) -> bool:
    return (node.op_type == "Gelu" and node.domain in ("", "ai.onnx")
            and _attrs(node).get("approximate", b"none") in (b"tanh", "tanh"))


def _softsign(node: Any) -> bool:
    return node.op_type == "Softsign" and node.domain in ("", "ai.onnx")


def _clip_max_only(node: Any) -> bool:
    return (node.op_type == "Clip" and node.domain in ("", "ai.onnx") and len(node.input) == 3
            and not node.input[1] and bool(node.input[2]))


def _range_f16(node: Any) -> bool:
    return node.op_type == "Range" and node.domain in ("", "ai.onnx") and len(node.input) == 3


def rewrite_ml_and_training_nodes(model: Any, target_opset: int) -> bool:
    """The training optimizers and the two ML ops as default-domain nodes; True where any was
    rewritten (the model then imports the default domain at ``target_opset`` if it did not)."""
    import numpy as np
    from onnx import helper

    g = model.graph
    if not any(n.domain in (_TRAINING, _ML) or _gelu_tanh(n) or _range_f16(n) or _softsign(n) or _clip_max_only(n)
               for n in g.node):
        return False
    types = _elem_types(model)
    f32 = 1  # TensorProto.FLOAT: the formulas' constants are f32
    out, done = [], False
    for k, node in enumerate(g.node):
        b = _Builder(g, f"{node.output[0] if node.output else node.op_type}__nr{k}")
        a = _attrs(node)
        if node.domain == _TRAINING and node.op_type in _OPTIMIZERS:
            per, fn = _OPTIMIZERS[node.op_type]
            ins = list(node.input)
            n = (len(ins) - 2) // per
            if n < 1 or len(ins) != 2 + per * n or len(node.output) != (per - 1) * n:
                out.append(node)
                continue
            r, t = ins[0], ins[1]
            required = ("alpha", "beta", "norm_coefficient") if node.op_type == "Momentum" else ()
            if any(types.get(v) != f32 for v in [r, *ins[2:]]) or any(k not in a for k in required):
                out.append(node)  # f64 or f16 optimizer state: left to torch-mlir (which refuses it)
                continue
            for i in range(n):
                fn(b, a, r, t, *[ins[2 + j * n + i] for j in range(per)],
                   tuple(node.output[j * n + i] for j in range(per - 1)))
        elif node.domain == _ML and node.op_type == "Binarizer":
            et = types.get(node.input[0])
            if et is None:
                out.append(node)
                continue
            # compared in X's type, the result 0 / 1 in X's type
            thr = b.const(a.get("threshold", 0.0), helper.tensor_dtype_to_np_dtype(et))
            b.op("Cast", [b.op("Greater", [node.input[0], thr])], node.output[0], to=et)
        elif _gelu_tanh(node):
            et = types.get(node.input[0])
            if et not in (1, 10, 11):  # f32, f16, f64
                out.append(node)
                continue
            dt = helper.tensor_dtype_to_np_dtype(et)
            x = node.input[0]
            # 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), evaluated in x's type
            inner = b.op("Mul", [b.const(np.sqrt(2.0 / np.pi), dt),
                                 b.op("Add", [x, b.op("Mul", [b.const(0.044715, dt),
                                                              b.op("Mul", [x, b.op("Mul", [x, x])])])])])
            half = b.op("Mul", [b.const(0.5, dt), b.op("Add", [b.const(1.0, dt), b.op("Tanh", [inner])])])
            b.op("Mul", [x, half], node.output[0])
        elif _range_f16(node):
            if any(types.get(v) != 10 for v in node.input):
                out.append(node)
                continue
            # (torch-mlir lowers no f16 Range): counted in f32, each element rounded to f16 once
            r32 = [b.op("Cast", [v], to=f32) for v in node.input]
            b.op("Cast", [b.op("Range", r32)], node.output[0], to=10)
        elif _clip_max_only(node):
            # Clip with a max and no min (torch-mlir passes the absent min on as a tensor: it fails)
            b.op("Min", [node.input[0], node.input[2]], node.output[0])
        elif _softsign(node):
            et = types.get(node.input[0])
            if et not in (1, 10, 11):
                out.append(node)
                continue
            # x / (1 + |x|) in x's type (torch-mlir's conversion has no pattern for Softsign)
            one = b.const(1.0, helper.tensor_dtype_to_np_dtype(et))
            b.op("Div", [node.input[0], b.op("Add", [one, b.op("Abs", [node.input[0]])])], node.output[0])
        elif node.domain == _ML and node.op_type == "ArrayFeatureExtractor":
            b.op("Gather", [node.input[0], node.input[1]], node.output[0], axis=-1)
        else:
            out.append(node)
            continue
        out += b.nodes
        done = True
    del g.node[:]
    g.node.extend(out)
    if done and not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("", target_opset))
    return done


def rewrite_nodes_with_shapes(model: Any) -> None:
    """The rewrites that need static shapes (see the module's docstring), each node by
    _rewrite_one. ONNX shape inference runs once, and only where such a node is present."""
    g = model.graph
    ranks = {t.name: len(t.dims) for t in g.initializer}  # (a 3-D convolution's filter: rank 5)
    ranks.update({v.name: len(v.type.tensor_type.shape.dim) for v in [*g.input, *g.value_info]
                  if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")})
    todo = [n for n in g.node if n.domain in ("", "ai.onnx") and (
        n.op_type == "Compress"
        or (n.op_type == "ScatterElements" and _attrs(n).get("reduction", b"none") in (b"max", b"min"))
        or n.op_type == "Resize"
        or n.op_type in ("GridSample", "TensorScatter", "DFT", "STFT", "RNN", "GRU", "LSTM")
        or (n.op_type == "ConvTranspose" and (int(_attrs(n).get("group", 1)) > 1 or _asymmetric(_attrs(n))
                                              or len(_attrs(n).get("kernel_shape", [])) == 3
                                              or (len(n.input) > 1 and ranks.get(n.input[1]) == 5)))
        or n.op_type in ("QuantizeLinear", "DequantizeLinear", "Col2Im")
        or (n.op_type in ("MaxPool", "AveragePool") and _attrs(n).get("ceil_mode", 0))
        or (n.op_type == "Pad" and len(n.input) > 1)
        or (n.op_type == "Slice" and len(n.input) > 4 and n.input[4])
        or (n.op_type == "Conv" and (len(_attrs(n).get("kernel_shape", [])) == 3
                                     or (len(n.input) > 1 and ranks.get(n.input[1]) == 5))))]
    if not todo:
        return
    inits = {t.name: t for t in g.initializer}
    shapes, types = _shapes_and_types(model)
    opset = _default_opset(model)
    out = []
    for k, node in enumerate(g.node):
        if node not in todo:
            out.append(node)
            continue
        b = _Builder(g, f"{node.output[0]}__nr{k}")
        where = f"node '{node.name or node.output[0]}' ({node.op_type})"
        if not _rewrite_one(b, node, _attrs(node), shapes, types, inits, where, opset):
            out.append(node)  # left to torch-mlir (its lowering, or its one-line refusal)
            continue
        out += b.nodes
    del g.node[:]
    g.node.extend(out)


def _rewrite_one(b: _Builder, node: Any, a: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                 types: dict[str, int], inits: dict[str, Any], where: str, opset: int) -> bool:
    """``node`` rewritten into ``b`` by the rewrite for its op type; False where it does not fit
    (the node is then kept)."""
    op = node.op_type
    x = node.input[0]
    xs = shapes.get(x)
    second = shapes.get(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    f32 = types.get(x) == 1
    if op == "Compress":
        return _compress(b, node, a, xs, inits, where)
    if op == "MaxPool":
        return _pool_ceil_as_pads(b, node, a, xs)
    if op == "Pad":
        return _pad_by_gathers(b, node, a, xs, inits, where)
    if op == "Slice":
        return _slice_backwards_as_gathers(b, node, xs, inits)
    if op == "Conv":
        return xs is not None and len(xs) == 5 and _conv3d_as_conv2d(b, node, a, xs, second)
    if op in ("RNN", "GRU", "LSTM"):
        floats = [v for k, v in enumerate(node.input) if v and k != 4]  # all but sequence_lens
        return all(types.get(v) in (None, 1) for v in floats) and _recurrent(b, node, a, shapes)
    if op == "AveragePool" and (not a.get("count_include_pad", 0) or not any(a.get("pads", []))):
        return _pool_ceil_as_pads(b, node, a, xs)  # (without pads, count_include_pad counts nothing)
    if op == "AveragePool":
        return _average_pool_ceil_counts(b, node, a, xs)
    if op == "Col2Im":
        return _col2im(b, node, a, xs, inits, where)
    if op == "ConvTranspose":
        if xs is not None and len(xs) == 5:
            return _conv_transpose3d(b, node, a, xs, second)
        if int(a.get("group", 1)) > 1:
            return _grouped_conv_transpose(b, node, a, xs, second)
        return _conv_transpose(b, [*node.input], a, xs, second, node.output[0])
    if op in ("QuantizeLinear", "DequantizeLinear"):
        return _quantize_linear(b, node, a, shapes, types, where)
    if op == "DFT":
        return f32 and _dft_node(b, node, a, xs, inits, where, opset)
    if op == "STFT":
        window = shapes.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        return f32 and _stft_node(b, node, a, xs, inits, where, opset, window)
    if op == "TensorScatter":
        return _tensor_scatter(b, node, a, xs, second, where)
    if op == "GridSample":
        return f32 and types.get(node.input[1]) == 1 and _grid_sample(b, node, a, xs, second)
    if op == "Resize":
        if a.get("keep_aspect_ratio_policy", b"stretch") == b"stretch":
            wanted = _resize_by_tables_wanted(a) or (xs is not None and len(xs) != 4)
            return f32 and wanted and _resize_by_tables(b, node, a, xs, inits)
        # a Resize by the policy's scale where flooring gives its size, else by tables
        return _resize_keeping_aspect(b, node, a, xs, inits) or (f32 and _resize_by_tables(b, node, a, xs, inits))
    return _scatter_minmax(b, node, a, xs, second, types, where)


def _pool_ceil_as_pads(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None) -> bool:
    """MaxPool, or AveragePool without count_include_pad (or pads), with ceil_mode as one without, its end
    pads grown to cover the last window. The standard's output length drops the last window
    where it would start past the input and its begin padding (as PyTorch's); torch-mlir's
    lowering keeps it (a wrong output shape) or fails to lower. Padding neither wins a max nor
    counts in such an average, so the pads that make floor mode give that length give the same
    windows and values."""
    if len(node.output) != 1 or xs is None or len(xs) < 3 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return False
    ks = [int(k) for k in a.get("kernel_shape", [])]
    n = len(ks)
    if n != len(xs) - 2:
        return False
    strides = [int(s) for s in a.get("strides", [1] * n)]
    dils = [int(d) for d in a.get("dilations", [1] * n)]
    pads = [int(p) for p in a.get("pads", [0] * (2 * n))]
    if (len(strides) != n or len(dils) != n or len(pads) != 2 * n or min(strides + dils + ks) < 1
            or min(pads) < 0):
        return False
    ends = []
    for i in range(n):
        length, k, s, d, pb, pe = xs[2 + i], ks[i], strides[i], dils[i], pads[i], pads[n + i]
        span = d * (k - 1) + 1
        total = length + pb + pe
        if total < span:
            return False
        out = -(-(total - span) // s) + 1
        if (out - 1) * s >= length + pb:  # the last window would start in the end padding
            out -= 1
        pe2 = max(0, (out - 1) * s + span - length - pb)  # (padding past the last window is never read)
        if (length + pb + pe2 - span) // s + 1 != out:
            return False
        ends.append(pe2)
    attrs = {k: v for k, v in a.items() if k not in ("ceil_mode", "pads", "count_include_pad")}
    b.op(node.op_type, [node.input[0]], node.output[0], pads=pads[:n] + ends, **attrs)
    return True


def _pad_by_gathers(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None,
                    inits: dict[str, Any], where: str = "Pad") -> bool:
    """Pad with constant pads (and axes) over a static shape where torch-mlir's lowering fails
    or refuses: a negative pad (a crop) as a Slice first; then 'reflect' and 'edge' as a Gather
    per padded axis at compile-time indices (torch-mlir lowers some reflect pads to a reversed
    indexing map halbench does not take, others to dynamic shapes); a constant pad, its negative
    parts cropped, stays a Pad. Other pads are left to torch-mlir."""
    import numpy as np
    from onnx import numpy_helper

    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if xs is None or mode not in ("constant", "reflect", "edge") or node.input[1] not in inits:
        return False
    rank = len(xs)
    axes_in = node.input[3] if len(node.input) > 3 and node.input[3] else None
    if axes_in is not None and axes_in not in inits:
        return False
    raw = [int(v) for v in numpy_helper.to_array(inits[axes_in]).reshape(-1)] if axes_in else list(range(rank))
    if any(not -rank <= v < rank for v in raw) or len({v % rank for v in raw}) != len(raw):
        return False
    pads = [int(v) for v in numpy_helper.to_array(inits[node.input[1]]).reshape(-1)]
    if len(pads) != 2 * len(raw):
        return False
    begin, end = [0] * rank, [0] * rank
    for j, ax in enumerate(v % rank for v in raw):
        begin[ax], end[ax] = pads[j], pads[len(raw) + j]
    if mode == "constant" and min(begin + end) >= 0:
        return False  # torch-mlir's own lowering
    cut = [xs[i] - max(-begin[i], 0) - max(-end[i], 0) for i in range(rank)]
    if min(cut) < 0 or (mode != "constant" and min(cut) < 1):
        return False
    if mode == "reflect" and any((begin[i] > 0 or end[i] > 0) and max(begin[i], end[i]) > cut[i] - 1
                                 for i in range(rank)):
        return False  # wider than the axis: onnxruntime refuses it
    if any(cut[i] + max(begin[i], 0) + max(end[i], 0) > _MAX_ONE_HOT for i in range(rank)):
        from halbench.errors import CompileError

        raise CompileError(f"{where}: pads {pads} make an axis longer than {_MAX_ONE_HOT} elements; "
                           f"fix the node's pads (torch-mlir aborts the process on such a pad)")
    x = node.input[0]
    if min(begin + end) < 0:
        crop = [i for i in range(rank) if begin[i] < 0 or end[i] < 0]
        x = b.op("Slice", [x, b.const([max(-begin[i], 0) for i in crop], np.int64),
                           b.const([xs[i] - max(-end[i], 0) for i in crop], np.int64), b.const(crop, np.int64)])
    grow = [max(v, 0) for v in begin] + [max(v, 0) for v in end]
    if mode == "constant":
        value = [node.input[2]] if len(node.input) > 2 and node.input[2] else []
        b.op("Pad", [x, b.const(grow, np.int64), *value], node.output[0], mode="constant")
        return True
    todo = [i for i in range(rank) if grow[i] or grow[rank + i]]
    for j, ax in enumerate(todo):
        d, lo, hi = cut[ax], grow[ax], grow[rank + ax]
        idx = []
        for t in range(-lo, d + hi):
            if mode == "edge":
                idx.append(min(max(t, 0), d - 1))
                continue
            while t < 0 or t >= d:
                t = -t if t < 0 else 2 * (d - 1) - t
            idx.append(t)
        x = b.op("Gather", [x, b.const(idx, np.int64)], node.output[0] if j == len(todo) - 1 else None, axis=ax)
    if not todo:
        b.op("Identity", [x], node.output[0])
    return True


def _slice_backwards_as_gathers(b: _Builder, node: Any, xs: tuple[int, ...] | None, inits: dict[str, Any]) -> bool:
    """A Slice with constant starts / ends / axes / steps, some step negative, over a static
    shape as a Gather per axis at the indices it takes (Python's slice rules: the clamping the
    standard gives). torch-mlir lowers a backwards slice to a reversed indexing map halbench does
    not take, and one starting past the end to an empty tensor (a kernel failure at run time)."""
    import numpy as np
    from onnx import numpy_helper

    ins = list(node.input)
    if xs is None or any(v not in inits for v in ins[1:5] if v) or not ins[2] or not ins[1]:
        return False
    vals = [numpy_helper.to_array(inits[v]).reshape(-1).astype(np.int64).tolist() if v else None for v in ins[1:5]]
    starts, ends, axes, steps = vals
    rank = len(xs)
    axes = axes if axes is not None else list(range(len(starts)))
    if not (len(starts) == len(ends) == len(axes) == len(steps)) or min(steps) >= 0 or 0 in steps:
        return False
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        return False
    x = node.input[0]
    order = sorted(range(len(axes)), key=lambda j: axes[j] % rank)
    for n, j in enumerate(order):
        ax = axes[j] % rank
        big = 1 << 62  # (INT64_MAX / MIN-like bounds clamp as Python's do)
        lo, hi = max(min(starts[j], big), -big), max(min(ends[j], big), -big)
        idx = list(range(*slice(lo, hi, steps[j]).indices(xs[ax])))
        if not idx:
            return False  # an empty result: left to torch-mlir and the importer's refusal
        last = n == len(order) - 1
        x = b.op("Gather", [x, b.const(idx, np.int64)], node.output[0] if last else None, axis=ax)
    return True


def _conv3d_as_conv2d(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...], ws: tuple[int, ...] | None) -> bool:
    """A 3-D convolution (halbench's code generator has no 3-D kernel) as one 2-D convolution:
    the input's depth taps of every output depth gathered at compile-time indices and stacked
    into the channels (channel-major, so groups stay contiguous), the output depths folded into
    the batch, the filter's depth folded into its input channels; then unfolded back. Depth
    padding is a zero Pad first; height and width keep the node's pads, strides and dilations."""
    import numpy as np

    if ws is None or len(ws) != 5 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return False
    n, c, d, h, w = xs
    f, cg, kd = ws[0], ws[1], ws[2]
    strides = [int(v) for v in a.get("strides", [1, 1, 1])]
    dils = [int(v) for v in a.get("dilations", [1, 1, 1])]
    pads = [int(v) for v in a.get("pads", [0] * 6)]
    group = int(a.get("group", 1))
    if (len(strides) != 3 or len(dils) != 3 or len(pads) != 6 or min(pads) < 0 or min(strides + dils) < 1
            or group < 1 or c != cg * group):
        return False
    dp = d + pads[0] + pads[3]
    od = (dp - dils[0] * (kd - 1) - 1) // strides[0] + 1
    if od < 1 or n * od * c * kd * h * w > 1 << 26:
        return False
    x = node.input[0]
    if pads[0] or pads[3]:
        x = b.op("Pad", [x, b.const([0, 0, pads[0], 0, 0, 0, 0, pads[3], 0, 0], np.int64)], mode="constant")
    idx = [[o * strides[0] + t * dils[0] for o in range(od)] for t in range(kd)]
    x = b.op("Gather", [x, b.const(idx, np.int64)], axis=2)  # [N, C, KD, OD, H, W]
    x = b.op("Transpose", [x], perm=[0, 3, 1, 2, 4, 5])  # [N, OD, C, KD, H, W]
    x = b.op("Reshape", [x, b.const([n * od, c * kd, h, w], np.int64)])
    wt = b.op("Reshape", [node.input[1], b.const([f, cg * kd, ws[3], ws[4]], np.int64)])
    bias = [node.input[2]] if len(node.input) > 2 and node.input[2] else []
    y = b.op("Conv", [x, wt, *bias], group=group, kernel_shape=[ws[3], ws[4]], strides=strides[1:],
             dilations=dils[1:], pads=[pads[1], pads[2], pads[4], pads[5]])
    oh = (h + pads[1] + pads[4] - dils[1] * (ws[3] - 1) - 1) // strides[1] + 1
    ow = (w + pads[2] + pads[5] - dils[2] * (ws[4] - 1) - 1) // strides[2] + 1
    y = b.op("Reshape", [y, b.const([n, od, f, oh, ow], np.int64)])
    b.op("Transpose", [y], node.output[0], perm=[0, 2, 1, 3, 4])
    return True


def _conv_transpose3d(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...], ws: tuple[int, ...] | None) -> bool:
    """A 3-D ConvTranspose (torch-mlir lowers none) as one 2-D ConvTranspose and a product over
    depth: the input depths folded into the batch, the filter's depth taps into its output
    channels; then each output depth sums the (input depth, tap) planes that land on it, a
    constant 0 / 1 matrix, so strides, dilations, pads and output_padding along depth are that
    matrix. Height and width keep the node's attributes (asymmetric pads through
    _conv_transpose). Groups, output_shape and auto_pad are left to torch-mlir's refusal."""
    import numpy as np

    if (ws is None or len(ws) != 5 or int(a.get("group", 1)) != 1 or "output_shape" in a
            or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or ws[0] != xs[1]):
        return False
    n, c, d, h, w = xs
    f, kd = ws[1], ws[2]
    strides = [int(v) for v in a.get("strides", [1, 1, 1])]
    dils = [int(v) for v in a.get("dilations", [1, 1, 1])]
    pads = [int(v) for v in a.get("pads", [0] * 6)]
    opad = [int(v) for v in a.get("output_padding", [0, 0, 0])]
    if (len(strides) != 3 or len(dils) != 3 or len(pads) != 6 or len(opad) != 3 or min(pads) < 0
            or min(strides + dils) < 1 or min(opad) < 0):
        return False
    od = strides[0] * (d - 1) + opad[0] + dils[0] * (kd - 1) + 1 - pads[0] - pads[3]
    oh = strides[1] * (h - 1) + opad[1] + dils[1] * (ws[3] - 1) + 1 - pads[1] - pads[4]
    ow = strides[2] * (w - 1) + opad[2] + dils[2] * (ws[4] - 1) + 1 - pads[2] - pads[5]
    if min(od, oh, ow) < 1 or n * d * f * kd * oh * ow > 1 << 26 or kd * d * od > _MAX_ONE_HOT:
        return False
    x = b.op("Transpose", [node.input[0]], perm=[0, 2, 1, 3, 4])  # [N, D, C, H, W]
    x = b.op("Reshape", [x, b.const([n * d, c, h, w], np.int64)])
    wt = b.op("Reshape", [node.input[1], b.const([c, f * kd, ws[3], ws[4]], np.int64)])  # out channel f * KD + t
    attrs2 = {"strides": strides[1:], "dilations": dils[1:], "pads": [pads[1], pads[2], pads[4], pads[5]],
              "output_padding": opad[1:], "kernel_shape": [ws[3], ws[4]]}
    y = b.name()
    if not _conv_transpose(b, [x, wt], attrs2, (n * d, c, h, w), (c, f * kd, ws[3], ws[4]), y):
        return False
    y = b.op("Reshape", [y, b.const([n, d, f, kd, oh * ow], np.int64)])
    y = b.op("Transpose", [y], perm=[0, 2, 4, 3, 1])  # [N, F, OHW, KD, D]
    y = b.op("Reshape", [y, b.const([n, f, oh * ow, kd * d], np.int64)])
    sel = np.zeros((kd * d, od), np.float32)
    for t in range(kd):
        for i in range(d):
            o = i * strides[0] + t * dils[0] - pads[0]
            if 0 <= o < od:
                sel[t * d + i, o] = 1.0
    y = b.op("MatMul", [y, b.const(sel)])  # [N, F, OHW, OD]
    y = b.op("Transpose", [y], perm=[0, 1, 3, 2])
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if bias is None:
        b.op("Reshape", [y, b.const([n, f, od, oh, ow], np.int64)], node.output[0])
        return True
    y = b.op("Reshape", [y, b.const([n, f, od, oh, ow], np.int64)])
    b.op("Add", [y, b.op("Reshape", [bias, b.const([f, 1, 1, 1], np.int64)])], node.output[0])
    return True


def _compress(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None, inits: dict[str, Any],
              where: str) -> bool:
    """Compress with a constant condition as a Gather of the selected indices (the input
    flattened first where no axis is given)."""
    import numpy as np
    from onnx import numpy_helper

    from halbench.errors import CompileError

    if node.input[1] not in inits or xs is None:
        return False
    cond = numpy_helper.to_array(inits[node.input[1]]).reshape(-1).astype(bool)
    axis = a.get("axis")
    if axis is not None and not -len(xs) <= int(axis) < len(xs):
        raise CompileError(f"{where}: axis {axis} outside a rank-{len(xs)} input; fix the node's axis")
    length = int(np.prod(xs)) if axis is None else xs[int(axis) % len(xs)]
    picked = np.nonzero(cond)[0]
    if picked.size and picked[-1] >= length:
        raise CompileError(f"{where}: the condition selects element {int(picked[-1])} of an axis of "
                           f"{length}; give a condition no longer than the axis")
    if not picked.size:
        return False  # an empty result: _refuse_empty_values names it
    src = node.input[0]
    if axis is None:
        src = b.op("Reshape", [src, b.const([-1], "int64")])
    b.op("Gather", [src, b.const(picked.astype(np.int64), "int64")], node.output[0],
         axis=0 if axis is None else int(axis))
    return True


def _scatter_minmax(b: _Builder, node: Any, a: dict[str, Any], ds: tuple[int, ...] | None,
                    ids: tuple[int, ...] | None, types: dict[str, int], where: str) -> bool:
    """ScatterElements with reduction max / min: the updates spread over a one-hot of their
    indices (the neutral value elsewhere), reduced along the scatter axis, padded to the data's
    shape and combined with the data by Max / Min."""
    import numpy as np

    from halbench.errors import CompileError

    if (ds is None or ids is None or len(ds) != len(ids) or not len(ds)
            or types.get(node.input[0]) not in _FLOATS):  # +-inf is the neutral value
        return False
    rank = len(ds)
    axis = int(a.get("axis", 0))
    if not -rank <= axis < rank:
        raise CompileError(f"{where}: axis {axis} outside rank-{rank} data; fix the node's axis")
    axis %= rank
    n = ds[axis]
    # (indices may outnumber the data along the scatter axis: the one-hot reduces them)
    if int(np.prod(ids)) * n > _MAX_ONE_HOT or any(i > d for j, (i, d) in enumerate(zip(ids, ds)) if j != axis):
        return False
    is_max = a["reduction"] == b"max"
    neutral = b.op("CastLike", [b.const(-np.inf if is_max else np.inf), node.input[0]])
    # each index through a Gather of 0..n-1: negative ones count from the end, and one outside
    # [-n, n) stops the run with halbench's index error (as onnxruntime refuses it) instead of
    # matching no position and being dropped
    idx = b.op("Gather", [b.const(np.arange(n, dtype=np.int64), "int64"), b.op("Cast", [node.input[1]], to=7)], axis=0)
    last = b.const([-1], "int64")
    hot = b.op("Equal", [b.op("Unsqueeze", [idx, last]),
                         b.const(np.arange(n, dtype=np.int64).reshape([1] * rank + [n]), "int64")])
    spread = b.op("Where", [hot, b.op("Unsqueeze", [node.input[2], last]), neutral])  # ids + [n]
    red = b.op("ReduceMax" if is_max else "ReduceMin", [spread, b.const([axis], "int64")], keepdims=0)
    # the data axis (length n) is last now: move it back to where the scatter axis was
    perm = list(range(rank))
    perm.insert(axis, rank - 1)
    moved = b.op("Transpose", [red], perm=perm[:rank])
    part = tuple(n if j == axis else ids[j] for j in range(rank))
    if part != tuple(ds):
        pads = [0] * rank + [d - p for d, p in zip(ds, part)]
        moved = b.op("Pad", [moved, b.const(pads, "int64"), neutral], mode="constant")
    b.op("Max" if is_max else "Min", [node.input[0], moved], node.output[0])
    return True


def _resize_keeping_aspect(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None,
                           inits: dict[str, Any]) -> bool:
    """Resize to constant ``sizes`` under keep_aspect_ratio_policy ``not_larger`` / ``not_smaller``:
    one scale for every resized axis (the smallest / largest of sizes / input), the output
    ``round_half_up(scale * input)``, and the coordinates transformed with that scale. That is
    a Resize by ``scales`` wherever flooring ``scale * input`` gives the same size; False (node
    kept) where it does not, or where sizes or the input's shape are not known."""
    import numpy as np
    from onnx import numpy_helper

    if xs is None or len(node.input) < 4 or node.input[3] not in inits:
        return False
    rank = len(xs)
    sizes = [int(v) for v in numpy_helper.to_array(inits[node.input[3]]).reshape(-1)]
    axes = [int(v) % rank for v in a.get("axes", range(rank))]
    if len(axes) != len(sizes) or len(set(axes)) != len(axes) or min(xs) <= 0:
        return False
    ratios = [sz / xs[ax] for ax, sz in zip(axes, sizes)]
    policy = a["keep_aspect_ratio_policy"]
    scale = min(ratios) if policy in (b"not_larger", "not_larger") else max(ratios)
    if any(int(scale * xs[ax]) != int(scale * xs[ax] + 0.5) for ax in axes):
        return False
    full = np.ones(rank, np.float32)
    full[axes] = scale
    if any(float(np.float32(scale)) * xs[ax] != scale * xs[ax] for ax in axes):
        return False  # the f32 scale would give another size
    keep = {k: v for k, v in a.items() if k not in ("axes", "keep_aspect_ratio_policy")}
    b.op("Resize", [node.input[0], "", b.const(full)], node.output[0], **keep)
    return True


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _resize_by_tables_wanted(a: dict[str, Any]) -> bool:
    """Whether a (stretching) Resize is one _resize_by_tables takes: torch-mlir has no pattern for
    tf_crop_and_resize, half_pixel_symmetric, some cubic forms, nor for nearest with align_corners
    or pytorch_half_pixel (cubic goes by tables whatever its coordinates), and its
    align_corners coordinates use the integer output length where the specification, given
    scales, uses scale x length. (A Resize of other than 4 dims goes by tables too: torch-mlir
    lowers only 2-D spatial resizes; rewrite_nodes_with_shapes looks at every Resize.)"""
    ctm = _text(a.get("coordinate_transformation_mode", "half_pixel"))
    mode = _text(a.get("mode", "nearest"))
    nearest_phalf = ctm == "pytorch_half_pixel" and mode == "nearest"
    return (ctm in ("tf_crop_and_resize", "align_corners", "half_pixel_symmetric") or mode == "cubic"
            or bool(a.get("antialias", 0)) or bool(a.get("exclude_outside", 0)) or nearest_phalf)


def _resize_axis(mode: str, ctm: str, nearest: str, cubic_a: float, exclude: bool, length: int,
                 scale: float, out_len: int, roi: tuple[float, float],
                 antialias: bool = False) -> tuple[Any, Any, Any]:
    """One axis of a Resize as the ONNX specification computes it: per output index its taps
    (input indices, clamped into the axis, so the edge repeats), their coefficients, and where
    tf_crop_and_resize maps it outside the input (then the extrapolation value), as arrays
    [out_len, taps], [out_len, taps], [out_len] (or None). ``antialias`` (linear, cubic): a
    downsampling axis widens its filter by 1 / scale, the coefficients normalised to sum 1."""
    import numpy as np

    y = np.arange(out_len, dtype=np.float64)
    frac_len = scale * length  # the specification's output length: scale x input, not floored
    outside = None
    if ctm == "align_corners":
        x = np.zeros(out_len) if frac_len == 1 else y * (length - 1) / (frac_len - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi
        x = (np.full(out_len, (hi - lo) * (length - 1) / 2) if frac_len == 1
             else y * (hi - lo) * (length - 1) / (frac_len - 1)) + lo * (length - 1)
        outside = (x < 0) | (x > length - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out_len, -0.5) if frac_len == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        x = length / 2 * (1 - out_len / frac_len) + (y + 0.5) / scale - 0.5
    left = np.ceil(x).astype(np.int64) - 1  # the tap left of x: x itself counts as a right tap
    r = x - left  # in (0, 1]
    if mode == "nearest":
        pick = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5, "floor": r >= 1.0,
                "ceil": np.ones_like(r, bool)}[nearest]
        taps = (left + np.where((r == 1.0) | pick, 1, 0))[:, None]
        coef = np.ones((out_len, 1))
    else:
        # taps left + j for j in [start, 2 - start); without antialias (or upsampling) start is
        # 0 (linear) / -1 (cubic): two / four taps
        s_ = min(scale, 1.0) if antialias else 1.0
        reach = 1.0 if mode == "linear" else 2.0
        start = int(np.floor(-reach / s_)) + 1
        offs = np.arange(start, 2 - start)
        taps = left[:, None] + offs[None, :]
        u = np.abs(offs[None, :] - r[:, None]) * s_  # each tap's (scaled) distance from x
        if mode == "linear":
            coef = np.clip(1 - u, 0, 1)
        else:  # cubic (Keys, coefficient A)
            A = cubic_a
            near = ((A + 2) * u - (A + 3)) * u * u + 1
            far = ((A * u - 5 * A) * u + 8 * A) * u - 4 * A
            coef = np.where(u <= 1, near, np.where(u < 2, far, 0.0))
        if antialias:
            coef = coef / coef.sum(axis=1, keepdims=True)
    if exclude and mode != "nearest":
        coef = np.where((taps < 0) | (taps >= length), 0.0, coef)
        total = coef.sum(axis=1, keepdims=True)
        coef = coef / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, length - 1), coef, outside


def _resize_by_tables(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None,
                      inits: dict[str, Any]) -> bool:
    """A stretching Resize of a static f32 input with constant roi / scales / sizes, axis by axis
    (the interpolation is separable) as _resize_axis tabulates it: a Gather of every tap at its
    clamped index, the taps weighted and summed (one tap for nearest), the extrapolation value
    where tf_crop_and_resize leaves the input. False (node kept) where a parameter is not
    constant or the shapes are unknown."""
    import numpy as np
    from onnx import numpy_helper

    def const(k: int) -> Any:
        """Input k as a flat array; None where absent or empty (exporters write an empty scales
        beside sizes), False where not a constant."""
        if len(node.input) <= k or not node.input[k]:
            return None
        if node.input[k] not in inits:
            return False
        v = numpy_helper.to_array(inits[node.input[k]]).reshape(-1)
        return v if v.size else None

    if xs is None or not xs or min(xs) <= 0:
        return False
    rank = len(xs)
    roi, scales, sizes = const(1), const(2), const(3)
    if any(v is False for v in (roi, scales, sizes)) or (scales is None) == (sizes is None):
        return False  # (exactly one of scales and sizes)
    axes = [int(v) % rank for v in a.get("axes", range(rank))]
    if len(set(axes)) != len(axes):
        return False
    full_scale, full_out = [1.0] * rank, list(xs)
    if scales is not None:
        if len(scales) != len(axes) or not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            return False
        for ax, sc in zip(axes, scales):
            full_scale[ax] = float(sc)
            full_out[ax] = int(float(sc) * xs[ax])
    else:
        if len(sizes) != len(axes) or np.any(sizes <= 0):
            return False
        for ax, sz in zip(axes, sizes):
            full_out[ax], full_scale[ax] = int(sz), int(sz) / xs[ax]
        policy = _text(a.get("keep_aspect_ratio_policy", "stretch"))
        if policy in ("not_larger", "not_smaller"):  # one scale for every resized axis
            pick = min if policy == "not_larger" else max
            one = pick(full_scale[ax] for ax in axes)
            for ax in axes:
                full_scale[ax], full_out[ax] = one, int(np.floor(one * xs[ax] + 0.5))
        elif policy != "stretch":
            return False
    full_roi = [(0.0, 1.0)] * rank
    ctm = _text(a.get("coordinate_transformation_mode", "half_pixel"))
    if ctm == "tf_crop_and_resize":
        if roi is None or len(roi) != 2 * len(axes):
            return False
        for i, ax in enumerate(axes):
            full_roi[ax] = (float(roi[i]), float(roi[i + len(axes)]))
    if min(full_out) <= 0 or int(np.prod(full_out)) > _MAX_ONE_HOT:
        return False
    mode, nearest = _text(a.get("mode", "nearest")), _text(a.get("nearest_mode", "round_prefer_floor"))
    antialias = bool(a.get("antialias", 0))
    for ax in range(rank):  # an antialiased downsample by a tiny scale reaches over many taps
        s_ = min(full_scale[ax], 1.0) if antialias else 1.0
        taps = 1 if mode == "nearest" else 2 - 2 * (int(np.floor(-(1.0 if mode == "linear" else 2.0) / s_)) + 1)
        if taps * full_out[ax] > _MAX_ONE_HOT:
            return False
    if (ctm == "align_corners" and mode != "nearest" and not antialias and not a.get("exclude_outside", 0)
            and rank == 4 and all(full_scale[ax] * xs[ax] == full_out[ax] for ax in range(rank))):
        return False  # whole output lengths: torch-mlir's lowering computes these right (2-D only)
    if mode not in ("nearest", "linear", "cubic") or (antialias and mode == "nearest"):
        return False  # (the specification has no antialiased nearest; torch-mlir's refusal stands)
    extrap = float(a.get("extrapolation_value", 0.0))
    cur, shape = node.input[0], list(xs)
    for ax in range(rank):
        if full_out[ax] == xs[ax] and full_scale[ax] == 1.0 and full_roi[ax] == (0.0, 1.0):
            continue  # the identity along this axis (as the specification skips it)
        taps, coef, outside = _resize_axis(mode, ctm, nearest, float(a.get("cubic_coeff_a", -0.75)),
                                           bool(a.get("exclude_outside", 0)), xs[ax], full_scale[ax],
                                           full_out[ax], full_roi[ax], antialias)
        n, t = full_out[ax], taps.shape[1]
        got = b.op("Gather", [cur, b.const(taps.reshape(-1), "int64")], axis=ax)
        if t > 1:
            split = shape[:ax] + [n, t] + shape[ax + 1:]
            got = b.op("Reshape", [got, b.const(split, "int64")])
            w = coef.astype(np.float32).reshape([1] * ax + [n, t] + [1] * (rank - ax - 1))
            got = b.op("ReduceSum", [b.op("Mul", [got, b.const(w)]), b.const([ax + 1], "int64")], keepdims=0)
        if outside is not None and outside.any():
            mask = outside.reshape([1] * ax + [n] + [1] * (rank - ax - 1))
            got = b.op("Where", [b.const(mask, np.bool_), b.const(np.float32(extrap)), got])
        cur, shape[ax] = got, n
    b.op("Identity", [cur], node.output[0])
    return True


def _average_pool_ceil_counts(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None) -> bool:
    """AveragePool with ceil_mode, count_include_pad and pads, as a floor-mode one over end pads
    grown to cover the standard's last window, scaled where windows reach past the padded input.
    The standard drops a last window that would start in the end padding (torch-mlir kept it: a
    wrong output shape, found by tests/compiler/test_op_fuzz.py), and divides a window that
    reaches past the padded input by its taps inside it (torch-mlir by the whole window): the
    floor-mode pool gives sum / window, times window / count, a compile-time tensor (the counts
    per axis multiply). False (node kept) where the shapes or attributes are not plain."""
    import numpy as np

    if xs is None or len(xs) < 3 or _text(a.get("auto_pad", "NOTSET")) != "NOTSET":
        return False
    d = len(xs) - 2
    k = [int(v) for v in a.get("kernel_shape", [])]
    st = [int(v) for v in a.get("strides", [1] * d)]
    dl = [int(v) for v in a.get("dilations", [1] * d)]
    pads = [int(v) for v in a.get("pads", [0] * (2 * d))]
    if len(k) != d or len(st) != d or len(dl) != d or len(pads) != 2 * d or min(k + st + dl) < 1 or min(pads) < 0:
        return False
    counts, ends = [], []
    for i in range(d):
        length, pb, pe = xs[2 + i], pads[i], pads[d + i]
        span = dl[i] * (k[i] - 1) + 1
        if length + pb + pe < span:
            return False
        out = -(-(length + pb + pe - span) // st[i]) + 1
        if (out - 1) * st[i] >= length + pb:  # the last window would start in the end padding
            out -= 1
        pe2 = max(0, (out - 1) * st[i] + span - length - pb)  # (padding past the last window is never read)
        if (length + pb + pe2 - span) // st[i] + 1 != out:
            return False
        ends.append(pe2)
        o = np.arange(out)[:, None] * st[i] - pb + np.arange(k[i])[None, :] * dl[i]
        counts.append(((o >= -pb) & (o < length + pe)).sum(axis=1))
    attrs = {n: v for n, v in a.items() if n not in ("ceil_mode", "pads")}
    if all((c == k[i]).all() for i, c in enumerate(counts)):  # every window inside the padded input
        b.op("AveragePool", [node.input[0]], node.output[0], pads=pads[:d] + ends, **attrs)
        return True
    count = counts[0].astype(np.float64)
    for c in counts[1:]:
        count = np.multiply.outer(count, c)
    scale = (np.prod(k) / np.maximum(count, 1)).astype(np.float32).reshape((1, 1, *count.shape))
    pooled = b.op("AveragePool", [node.input[0]], pads=pads[:d] + ends, **attrs)
    b.op("Mul", [pooled, b.const(scale)], node.output[0])
    return True


def _col2im(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None, inits: dict[str, Any],
            where: str) -> bool:
    """Col2Im (N-D; torch-mlir lowers none here) as a gather: each image element sums, over the
    block offsets, the column element that lands on it (at most one per offset; the tables are
    compile-time), so [N, C, K * L] -> [N, C, pixels, K] -> summed over K. False (node kept) where
    the image or block shape is not constant."""
    import numpy as np
    from onnx import numpy_helper

    from halbench.errors import CompileError

    if xs is None or len(xs) != 3 or any(v not in inits for v in node.input[1:3]):
        return False
    img = [int(v) for v in numpy_helper.to_array(inits[node.input[1]]).reshape(-1)]
    blk = [int(v) for v in numpy_helper.to_array(inits[node.input[2]]).reshape(-1)]
    d = len(img)
    dil = [int(v) for v in a.get("dilations", [1] * d)]
    st = [int(v) for v in a.get("strides", [1] * d)]
    pads = [int(v) for v in a.get("pads", [0] * (2 * d))]
    if not d or len(blk) != d or len(dil) != d or len(st) != d or len(pads) != 2 * d or min(img + blk + dil + st) < 1:
        raise CompileError(f"{where}: image shape {img}, block shape {blk}, dilations {dil}, strides {st} and pads "
                           f"{pads} do not describe one N-D image; give {len(img)} of each (pads twice)")
    nb = [(img[i] + pads[i] + pads[d + i] - (dil[i] * (blk[i] - 1) + 1)) // st[i] + 1 for i in range(d)]
    k, length = int(np.prod(blk)), int(np.prod(nb))
    if min(nb) < 1 or xs[1] % k or xs[2] != length:
        raise CompileError(f"{where}: an input of shape {list(xs)} is not C x {k} block elements by {length} blocks "
                           f"for these shapes; fix the input or the shapes")
    pix = int(np.prod(img))
    if pix * k > _MAX_ONE_HOT:
        return False
    ys = np.stack(np.unravel_index(np.arange(pix), img), axis=1)  # [pixels, d]
    offs = np.stack(np.unravel_index(np.arange(k), blk), axis=1)  # [k, d]
    pos = ys[:, None, :] + np.array(pads[:d]) - offs[None, :, :] * np.array(dil)  # [pixels, k, d]
    q, r = np.divmod(pos, np.array(st))
    ok = np.all((r == 0) & (q >= 0) & (q < np.array(nb)), axis=2)
    lidx = np.ravel_multi_index(tuple(np.clip(q, 0, np.array(nb) - 1).transpose(2, 0, 1)), nb)
    flat = np.where(ok, np.arange(k)[None, :] * length + lidx, 0).astype(np.int64)
    c = xs[1] // k
    cols = b.op("Reshape", [node.input[0], b.const([xs[0], c, k * length], np.int64)])
    got = b.op("Gather", [cols, b.const(flat, np.int64)], axis=2)  # [N, C, pixels, k]
    summed = b.op("ReduceSum", [b.op("Mul", [got, b.const(ok.astype(np.float32))]), b.const([3], np.int64)],
                  keepdims=0)
    b.op("Reshape", [summed, b.const([xs[0], c, *img], np.int64)], node.output[0])
    return True


def _grouped_conv_transpose(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None,
                            ws: tuple[int, ...] | None) -> bool:
    """ConvTranspose with groups (torch-mlir's lowering builds a wrong collapse for them) as one
    ConvTranspose per group on its split of the input channels, filter (and bias), concatenated
    along the channels. False (node kept) for unknown shapes or channels the groups do not divide."""
    groups = int(a.get("group", 1))
    if xs is None or ws is None or len(xs) < 3 or xs[1] % groups or ws[0] != xs[1]:
        return False
    split_x = b.op("Split", [node.input[0], b.const([xs[1] // groups] * groups, "int64")], axis=1)
    xs_g = [f"{split_x}_g{i}" for i in range(groups)]
    b.nodes[-1].ClearField("output")
    b.nodes[-1].output.extend(xs_g)
    ws_g = [f"{b.prefix}_w{i}" for i in range(groups)]
    b.op("Split", [node.input[1], b.const([ws[0] // groups] * groups, "int64")], axis=0)
    b.nodes[-1].ClearField("output")
    b.nodes[-1].output.extend(ws_g)
    bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
    bs_g: list[str | None] = [None] * groups
    if bias is not None:
        bs_g = [f"{b.prefix}_b{i}" for i in range(groups)]
        b.op("Split", [bias, b.const([ws[1]] * groups, "int64")], axis=0)
        b.nodes[-1].ClearField("output")
        b.nodes[-1].output.extend(bs_g)
    keep = {k: v for k, v in a.items() if k != "group"}
    xs1 = (xs[0], xs[1] // groups, *xs[2:])
    ws1 = (ws[0] // groups, *ws[1:])
    parts = []
    for x, w, bb in zip(xs_g, ws_g, bs_g):
        out = b.name()
        if not _conv_transpose(b, [x, w] + ([bb] if bb else []), keep, xs1, ws1, out):
            return False
        parts.append(out)
    b.op("Concat", parts, node.output[0], axis=1)
    return True


def _asymmetric(a: dict[str, Any]) -> bool:
    """Whether a ConvTranspose's explicit pads differ between an axis's begin and end."""
    pads = [int(p) for p in a.get("pads", [])]
    n = len(pads) // 2
    return pads[:n] != pads[n:]


def _conv_transpose(b: _Builder, inputs: list[str], a: dict[str, Any], xs: tuple[int, ...] | None,
                    ws: tuple[int, ...] | None, out: str) -> bool:
    """One ConvTranspose (no groups) into ``out``; asymmetric pads (torch-mlir's conversion has
    no pattern for them) as the unpadded transposed convolution cropped by a Slice: pads crop
    the full output, begin pads at the start and end pads at the end of each axis. False where
    the shapes, an output_shape or auto_pad make that unsafe (the node is then kept)."""
    import numpy as np

    if not _asymmetric(a):
        b.op("ConvTranspose", inputs, out, **a)
        return True
    n = len(a.get("pads", [])) // 2
    if xs is None or ws is None or len(xs) != n + 2 or len(ws) != n + 2 or "output_shape" in a \
            or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return False
    pads = [int(p) for p in a["pads"]]
    strides = [int(v) for v in a.get("strides", [1] * n)]
    dils = [int(v) for v in a.get("dilations", [1] * n)]
    opad = [int(v) for v in a.get("output_padding", [0] * n)]
    if not (len(strides) == len(dils) == len(opad) == n) or min(pads) < 0:
        return False
    full = [strides[i] * (xs[2 + i] - 1) + opad[i] + dils[i] * (ws[2 + i] - 1) + 1 for i in range(n)]
    if any(full[i] - pads[i] - pads[n + i] <= 0 for i in range(n)):
        return False
    keep = {k: v for k, v in a.items() if k != "pads"}
    whole = b.op("ConvTranspose", inputs, **keep)
    b.op("Slice", [whole, b.const(pads[:n], np.int64), b.const([full[i] - pads[n + i] for i in range(n)], np.int64),
                   b.const([2 + i for i in range(n)], np.int64)], out)
    return True


#: Integer element types (TensorProto enum) -> their (lowest, highest) values
_INT_RANGES = {2: (0, 255), 3: (-128, 127), 5: (-32768, 32767)}


def _quantize_linear(b: _Builder, node: Any, a: dict[str, Any], shapes: dict[str, tuple[int, ...]],
                     types: dict[str, int], where: str) -> bool:
    """QuantizeLinear / DequantizeLinear with blocked scales (torch-mlir has no pattern for them)
    as their formulas: y = saturate(round_half_even(x / scale) + zero_point) and
    y = (x - zero_point) * scale, a per-axis scale shaped to broadcast along ``axis``, a blocked
    one repeated ``block_size`` times along it (a Gather of index // block_size). Others (per
    tensor or per axis) are left to torch-mlir, which lowers them, and 16-bit unsigned ones to its
    refusal (torch has no uint16 tensors)."""
    import numpy as np

    from halbench.errors import CompileError

    x, scale = node.input[0], node.input[1]
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
    quant = node.op_type == "QuantizeLinear"
    block = int(a.get("block_size", 0))
    qtype = types.get(zp) if zp else (int(a.get("output_dtype", 0)) or 2) if quant else types.get(x)
    if not block or qtype not in (2, 3, 5):
        return False  # per tensor / per axis: torch-mlir's pattern; 16-bit unsigned: torch-mlir has no such type
    xs, ss = shapes.get(x), shapes.get(scale)
    if xs is None or ss is None:
        return False
    rank = len(xs)
    axis = int(a.get("axis", 1)) % max(rank, 1)

    def shaped(v: str) -> str:
        if block:
            if len(ss) != rank or ss[axis] * block < xs[axis]:
                raise CompileError(f"{where}: a blocked scale of shape {list(ss)} does not cover an input of shape "
                                   f"{list(xs)} in blocks of {block} along axis {axis}; fix the scale's shape")
            return b.op("Gather", [v, b.const(np.arange(xs[axis]) // block, np.int64)], axis=axis)
        if len(ss) == 1 and rank > 1 and ss[0] == xs[axis] and ss[0] != 1:  # per axis
            return b.op("Reshape", [v, b.const([xs[axis] if d == axis else 1 for d in range(rank)], np.int64)])
        return v

    s_ = shaped(scale)
    z = b.op("Cast", [shaped(zp)], to=1) if zp else None
    if quant:
        q = b.op("Round", [b.op("Div", [b.op("Cast", [x], to=1), b.op("Cast", [s_], to=1)])])
        if z is not None:
            q = b.op("Add", [q, z])
        lo, hi = _INT_RANGES[qtype]
        q = b.op("Clip", [q, b.const(np.float32(lo)), b.const(np.float32(hi))])
        b.op("Cast", [q], node.output[0], to=qtype)
    else:
        d = b.op("Cast", [x], to=1)
        if z is not None:
            d = b.op("Sub", [d, z])
        b.op("CastLike", [b.op("Mul", [d, b.op("Cast", [s_], to=1)]), scale], node.output[0])
    return True


def _const_int(inits: dict[str, Any], node: Any, k: int) -> int | None | bool:
    """Input ``k`` of ``node`` as a constant integer; None where absent, False where not constant."""
    from onnx import numpy_helper

    if len(node.input) <= k or not node.input[k]:
        return None
    if node.input[k] not in inits:
        return False
    return int(numpy_helper.to_array(inits[node.input[k]]).reshape(-1)[0])


def _dft(b: _Builder, x: str, xs: tuple[int, ...], ax: int, n: int, inverse: bool, onesided: bool) -> str:
    """The DFT of ``x`` ([..., 1 | 2]: real, or real and imaginary parts) along ``ax`` over ``n``
    points (the signal cut or zero-padded to n), as matrix products with compile-time cosine and
    sine tables (f32, as every GEMM; tables computed in f64): forward (``onesided``: the first n / 2 + 1 frequencies), inverse (scaled by 1 / n),
    or inverse onesided (a real signal of n points from its first n / 2 + 1 frequencies, the
    others their conjugates). Returns the [..., 2] (or [..., 1]) result's name."""
    import numpy as np

    rank = len(xs) - 1  # without the component axis
    length = xs[ax]
    complex_in = xs[-1] == 2
    parts = [b.op("Gather", [x, b.const(np.int64(c), np.int64)], axis=rank) for c in range(xs[-1])]
    perm = [d for d in range(rank) if d != ax] + [ax]
    back = list(np.argsort(perm))
    parts = [b.op("Transpose", [p_], perm=perm) for p_ in parts]  # the signal axis last
    if inverse and onesided:
        rows, cols = min(length, n // 2 + 1), n
    else:
        rows, cols = min(length, n), (n // 2 + 1 if onesided and not inverse else n)
    k = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(cols, dtype=np.float64)[None, :]
    ang = 2 * np.pi * k * j / n
    cos, sin = np.zeros((length, cols)), np.zeros((length, cols))
    cos[:rows], sin[:rows] = np.cos(ang), np.sin(ang)

    def mm(v: str, table: Any) -> str:
        return b.op("MatMul", [v, b.const(table.astype(np.float32))])

    def add(u: str | None, v: str) -> str:
        return v if u is None else b.op("Add", [u, v])

    re_, im_ = parts[0], parts[1] if complex_in else None
    if inverse and onesided:
        w = np.full((length, 1), 2.0)
        w[0] = 1.0
        if n % 2 == 0 and n // 2 < length:
            w[n // 2] = 1.0
        real = mm(re_, cos * w / n)
        if im_ is not None:
            real = add(real, mm(im_, -sin * w / n))
        out = [real]
    elif inverse:  # x = (X e^{+i...}) / n
        real, imag = mm(re_, cos / n), mm(re_, sin / n)
        if im_ is not None:
            real, imag = add(real, mm(im_, -sin / n)), add(imag, mm(im_, cos / n))
        out = [real, imag]
    else:  # X = x e^{-i...}
        real, imag = mm(re_, cos), mm(re_, -sin)
        if im_ is not None:
            real, imag = add(real, mm(im_, sin)), add(imag, mm(im_, cos))
        out = [real, imag]
    out = [b.op("Unsqueeze", [b.op("Transpose", [v], perm=[int(d) for d in back]), b.const([rank], np.int64)])
           for v in out]
    return out[0] if len(out) == 1 else b.op("Concat", out, axis=rank)


def _dft_node(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None, inits: dict[str, Any],
              where: str, opset: int) -> bool:
    """DFT (torch-mlir has no pattern) through _dft; False (node kept) where the shape, length or
    axis is not known at compile time."""
    from halbench.errors import CompileError

    if xs is None or len(xs) < 3 or xs[-1] not in (1, 2):
        return False
    n, ax = _const_int(inits, node, 1), (_const_int(inits, node, 2) if opset >= 20 else int(a.get("axis", 1)))
    if n is False or ax is False:
        return False
    if ax is None:
        ax = -2
    if not -len(xs) <= ax < len(xs) or ax % len(xs) in (0, len(xs) - 1):
        raise CompileError(f"{where}: axis {ax} is not a signal axis of a rank-{len(xs)} input (not the batch, "
                           f"not the last, real / imaginary axis); fix the axis")
    ax %= len(xs)
    inverse, onesided = bool(a.get("inverse", 0)), bool(a.get("onesided", 0))
    if n is None:
        n = 2 * (xs[ax] - 1) if inverse and onesided else xs[ax]
    if n < 1:
        raise CompileError(f"{where}: a DFT length of {n}; give a positive dft_length")
    if onesided and not inverse and xs[-1] == 2:
        raise CompileError(f"{where}: a onesided DFT takes a real signal, not a complex one; set onesided=0")
    if max(n, xs[ax]) * n > _MAX_ONE_HOT:
        return False  # (cosine / sine tables too large to hold: left to torch-mlir's refusal)
    b.op("Identity", [_dft(b, node.input[0], xs, ax, n, inverse, onesided)], node.output[0])
    return True


def _stft_node(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None, inits: dict[str, Any],
               where: str, opset: int, wshape: tuple[int, ...] | None = None) -> bool:
    """STFT (torch-mlir has no pattern): the frames gathered at compile-time indices ([batch,
    frames, frame length, 1 | 2]), weighted by the window, and their DFT along the frame
    (_dft); False (node kept) where the shapes, step, window or length are not constant."""
    import numpy as np
    from onnx import numpy_helper

    from halbench.errors import CompileError

    if xs is None or len(xs) != 3 or xs[-1] not in (1, 2):
        return False
    step, n = _const_int(inits, node, 1), _const_int(inits, node, 3)
    win = node.input[2] if len(node.input) > 2 and node.input[2] else None
    ws = None if win is None else (tuple(numpy_helper.to_array(inits[win]).shape) if win in inits else wshape)
    if step is False or step is None or n is False or (win is not None and (ws is None or len(ws) != 1)):
        return False
    if n is None:
        if win is None:
            raise CompileError(f"{where}: neither a window nor a frame_length; give one of them")
        n = int(ws[0])
    if win is not None and ws[0] != n:
        raise CompileError(f"{where}: a window of {ws[0]} for frames of {n}; give a window as long as a frame")
    if step < 1 or n < 1 or n > xs[1]:
        raise CompileError(f"{where}: frames of {n} every {step} over a signal of {xs[1]}; give a positive step "
                           f"and frames no longer than the signal")
    frames = 1 + (xs[1] - n) // step
    if max(frames, n) * n > _MAX_ONE_HOT:
        return False  # (frame indices or DFT tables too large to hold: left to torch-mlir's refusal)
    idx = (np.arange(frames)[:, None] * step + np.arange(n)[None, :]).astype(np.int64)
    framed = b.op("Gather", [node.input[0], b.const(idx, np.int64)], axis=1)  # [batch, frames, n, c]
    if win is not None:  # (a constant window or one given at run time)
        framed = b.op("Mul", [framed, b.op("Reshape", [win, b.const([1, 1, n, 1], np.int64)])])
    onesided = bool(a.get("onesided", 1))
    if onesided and xs[-1] == 2:
        raise CompileError(f"{where}: a onesided STFT takes a real signal, not a complex one; set onesided=0")
    b.op("Identity", [_dft(b, framed, (xs[0], frames, n, xs[-1]), 2, n, False, onesided)], node.output[0])
    return True


def _tensor_scatter(b: _Builder, node: Any, a: dict[str, Any], cs: tuple[int, ...] | None,
                    us: tuple[int, ...] | None, where: str) -> bool:
    """TensorScatter (opset 24, a KV cache's update) as a select: cache position p of batch b
    takes update row ``p - write_indices[b]`` (modulo the cache length in circular mode) where
    that row exists, else keeps the cache. In linear mode a write index outside
    [0, cache - update] along the axis stops the run with halbench's index error (the reference
    fails on it too) instead of writing nothing. False (node kept) for unknown shapes."""
    import numpy as np

    from halbench.errors import CompileError

    if cs is None or us is None or len(cs) != len(us) or len(cs) < 2:
        return False
    rank = len(cs)
    axis = int(a.get("axis", -2))
    if not -rank <= axis < rank or axis % rank == 0:
        raise CompileError(f"{where}: axis {axis} is not a sequence axis of a rank-{rank} cache (axis 0 is the "
                           f"batch); fix the node's axis")
    axis %= rank
    if any(c != u for j, (c, u) in enumerate(zip(cs, us)) if j != axis) or us[axis] > cs[axis]:
        raise CompileError(f"{where}: an update of shape {list(us)} does not fit a cache of shape {list(cs)}; "
                           f"give an update of the cache's shape with at most {cs[axis]} along axis {axis}")
    mode = _text(a.get("mode", "linear"))
    if mode not in ("linear", "circular"):
        raise CompileError(f"{where}: unknown mode '{mode}'; use linear or circular")
    length, seq = cs[axis], us[axis]
    if len(node.input) > 2 and node.input[2]:
        w = b.op("Cast", [node.input[2]], to=7)
        if mode == "linear":  # through a Gather of 0..length-seq: an index past it is an error
            w = b.op("Gather", [b.const(np.arange(length - seq + 1, dtype=np.int64), "int64"),
                                b.op("Where", [b.op("Less", [w, b.const(0, "int64")]),
                                               b.const(length + 1, "int64"), w])], axis=0)
    else:
        w = b.const(np.zeros(cs[0], np.int64), "int64")
    w = b.op("Reshape", [w, b.const([cs[0]] + [1] * (rank - 1), "int64")])
    p = b.const(np.arange(length, dtype=np.int64).reshape([1] * axis + [length] + [1] * (rank - axis - 1)), "int64")
    row = b.op("Sub", [p, w])
    if mode == "circular":
        row = b.op("Mod", [row, b.const(length, "int64")])  # (fmod 0: the divisor's sign, so 0..length-1)
    inside = b.op("And", [b.op("GreaterOrEqual", [row, b.const(0, "int64")]),
                          b.op("Less", [row, b.const(seq, "int64")])])
    clamped = b.op("Clip", [row, b.const(0, "int64"), b.const(seq - 1, "int64")])
    idx = b.op("Expand", [clamped, b.const(list(cs), "int64")])
    got = b.op("GatherElements", [node.input[1], idx], axis=axis)
    b.op("Where", [b.op("Expand", [inside, b.const(list(cs), "int64")]), got, node.input[0]], node.output[0])
    return True


def _grid_sample(b: _Builder, node: Any, a: dict[str, Any], xs: tuple[int, ...] | None,
                 gs: tuple[int, ...] | None) -> bool:
    """GridSample of an N x C x H x W (or x D x H x W) input, mode nearest, linear or (2-D) cubic,
    each padding mode, as the ONNX reference computes it: grid coordinates denormalised
    (align_corners or not), rounded half to even for nearest (ONNX Round; torch-mlir's lowering
    rounds halves up), moved inside by the padding mode, then each tap gathered from the
    flattened image at a clamped index (nothing outside the input is read), zeroed where padding
    'zeros' puts it outside, and weighted by the product of its per-axis coefficients (linear;
    Keys' cubic with A = -0.75). False (node kept) for other ranks or modes, or unknown shapes."""
    import itertools

    mode = a.get("mode", b"bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode.decode() if isinstance(mode, bytes) else mode,
                                                         mode.decode() if isinstance(mode, bytes) else mode)
    pad = a.get("padding_mode", b"zeros")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    align = bool(a.get("align_corners", 0))
    if xs is None or gs is None or len(xs) not in (4, 5) or len(gs) != len(xs):
        return False
    nd = len(xs) - 2
    dims = list(xs[2:])
    if (gs[-1] != nd or gs[0] != xs[0] or mode not in ("nearest", "linear", "cubic") or (mode == "cubic" and nd != 2)
            or pad not in ("zeros", "border", "reflection") or min(xs) <= 0 or min(gs) <= 0
            or (align and pad == "reflection" and min(dims) < 2)):
        return False
    n, c = xs[0], xs[1]
    out_sp = list(gs[1:-1])
    pts = 1
    for d in out_sp:
        pts *= d
    f = b.const

    def select(cond: str, yes: str, no: str) -> str:
        return b.op("Where", [cond, yes, no])

    def reflect(v: str, lo: float, hi: float) -> str:
        below, above = b.op("Less", [v, f(lo)]), b.op("Greater", [v, f(hi)])
        dx = select(below, b.op("Sub", [f(lo), v]), b.op("Sub", [v, f(hi)]))
        rng = f(hi - lo)
        turns = b.op("Floor", [b.op("Div", [dx, rng])])
        r = b.op("Sub", [dx, b.op("Mul", [turns, rng])])
        even = b.op("Equal", [b.op("Mod", [turns, f(2.0)], fmod=1), f(0.0)])
        lo_r, hi_r = b.op("Add", [f(lo), r]), b.op("Sub", [f(hi), r])
        return select(below, select(even, lo_r, hi_r), select(above, select(even, hi_r, lo_r), v))

    def bounds(d: int) -> tuple[float, float]:
        return (0.0, d - 1.0) if align else (-0.5, d - 0.5)

    def coordinate(component: int, d: int) -> str:
        g = b.op("Gather", [node.input[1], f(component, "int64")], axis=nd + 1)  # N x out...
        one = b.op("Add", [g, f(1.0)])
        v = (b.op("Mul", [one, f((d - 1) / 2.0)]) if align
             else b.op("Div", [b.op("Sub", [b.op("Mul", [one, f(float(d))]), f(1.0)]), f(2.0)]))
        if mode == "nearest":
            v = b.op("Round", [v])
        lo, hi = bounds(d)
        if pad == "border":
            outside = b.op("Or", [b.op("Less", [v, f(lo)]), b.op("Greater", [v, f(hi)])])
            v = select(outside, b.op("Clip", [v, f(0.0), f(d - 1.0)]), v)
        elif pad == "reflection":
            v = reflect(v, lo, hi)
        return v

    def tap(i: str, d: int) -> tuple[str, str | None]:
        """(index clamped into the axis, validity or None) of the integral coordinate ``i``."""
        valid = None
        if pad == "zeros":
            valid = b.op("And", [b.op("GreaterOrEqual", [i, f(0.0)]), b.op("LessOrEqual", [i, f(d - 1.0)])])
        elif pad == "reflection":
            i = b.op("Floor", [b.op("Max", [reflect(i, *bounds(d)), f(0.0)])])  # C's int() of a value >= -0.5
        return b.op("Cast", [b.op("Clip", [i, f(0.0), f(d - 1.0)])], to=7), valid

    def cubic(t: str) -> list[str]:
        """Keys' coefficients (A = -0.75) of the taps at x0 - 1 .. x0 + 2, t = x - x0."""
        al = -0.75

        def far(u: str) -> str:  # ((A u - 5A) u + 8A) u - 4A, for u in [1, 2]
            return b.op("Sub", [b.op("Mul", [b.op("Add", [b.op("Mul", [b.op("Sub", [b.op("Mul", [u, f(al)]),
                                                                                     f(5 * al)]), u]), f(8 * al)]),
                                             u]), f(4 * al)])

        def near(u: str) -> str:  # ((A + 2) u - (A + 3)) u^2 + 1, for u in [0, 1]
            return b.op("Add", [b.op("Mul", [b.op("Sub", [b.op("Mul", [u, f(al + 2)]), f(al + 3)]),
                                             b.op("Mul", [u, u])]), f(1.0)])

        one_t = b.op("Sub", [f(1.0), t])
        return [far(b.op("Add", [t, f(1.0)])), near(t), near(one_t), far(b.op("Add", [one_t, f(1.0)]))]

    strides = [1] * nd
    for k in range(nd - 2, -1, -1):
        strides[k] = strides[k + 1] * dims[k + 1]
    flat = b.op("Reshape", [node.input[0], f([n, c, strides[0] * dims[0]], "int64")])
    full = f([n, c, pts], "int64")
    unsq = f([1], "int64")

    def gather(coords: list[str]) -> str:
        idx, ok = None, None
        for k, cv in enumerate(coords):
            ik, vk = tap(cv, dims[k])
            term = b.op("Mul", [ik, f(strides[k], "int64")]) if strides[k] != 1 else ik
            idx = term if idx is None else b.op("Add", [idx, term])
            if vk is not None:
                ok = vk if ok is None else b.op("And", [ok, vk])
        idx = b.op("Expand", [b.op("Reshape", [idx, f([n, 1, pts], "int64")]), full])
        val = b.op("Reshape", [b.op("GatherElements", [flat, idx], axis=2), f([n, c, *out_sp], "int64")])
        if ok is None:
            return val
        return select(b.op("Unsqueeze", [ok, unsq]), val, b.op("CastLike", [f(0.0), val]))

    coords = [coordinate(nd - 1 - k, dims[k]) for k in range(nd)]  # grid's last entry is x (W)
    if mode == "nearest":
        b.op("Identity", [gather(coords)], node.output[0])
        return True
    per_axis = []
    for v in coords:
        x0 = b.op("Floor", [v])
        t = b.op("Sub", [v, x0])
        if mode == "linear":
            per_axis.append([(x0, b.op("Sub", [f(1.0), t])), (b.op("Add", [x0, f(1.0)]), t)])
        else:
            per_axis.append([(b.op("Add", [x0, f(float(j))]), w) for j, w in zip((-1, 0, 1, 2), cubic(t))])
    total = None
    for combo in itertools.product(*per_axis):
        wgt = combo[0][1]
        for _, w in combo[1:]:
            wgt = b.op("Mul", [wgt, w])
        term = b.op("Mul", [gather([cv for cv, _ in combo]), b.op("Unsqueeze", [wgt, unsq])])
        total = term if total is None else b.op("Add", [total, term])
    b.op("Identity", [total], node.output[0])
    return True


#: Most time steps (times directions) a recurrent node is unrolled into
_MAX_STEPS = 256


def _recurrent(b: _Builder, node: Any, a: dict[str, Any], shapes: dict[str, tuple[int, ...]]) -> bool:
    """RNN, GRU and LSTM with the default activations, unrolled over their (static) time steps:
    forward, reverse or bidirectional, either layout, LSTM peepholes, GRU's linear_before_reset,
    sequence_lens read at run time (a step past a sequence's length leaves its state and writes
    zeros). torch-mlir lowers only the forward direction (to a loop) and drops the peepholes.
    False (node kept) for custom activations, clip, input_forget, or unknown shapes."""
    op = node.op_type
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    ins = list(node.input) + [""] * (8 - len(node.input))
    xs, ws = shapes.get(ins[0]), shapes.get(ins[1])
    if (xs is None or ws is None or len(xs) != 3 or len(ws) != 3 or "activations" in a or "clip" in a
            or a.get("input_forget", 0) or any(k in a for k in ("activation_alpha", "activation_beta"))):
        return False
    layout = int(a.get("layout", 0))
    steps, batch = (xs[1], xs[0]) if layout else (xs[0], xs[1])
    direction = a.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    dirs = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}.get(direction)
    hidden = int(a.get("hidden_size", ws[1] // gates))
    if dirs is None or ws[0] != len(dirs) or ws[1] != gates * hidden or steps * len(dirs) > _MAX_STEPS:
        return False
    f = b.const
    i64 = "int64"

    def take(src: str, d: int) -> str:  # one direction's slice of a [D, ...] operand
        return b.op("Gather", [src, f(d, i64)], axis=0)

    def cols(v: str, k: int) -> str:  # gate k's columns of a [B, gates * H] value
        return b.op("Slice", [v, f([k * hidden], i64), f([(k + 1) * hidden], i64), f([-1], i64)])

    x = b.op("Transpose", [ins[0]], perm=[1, 0, 2]) if layout else ins[0]  # T x B x I
    lens = None
    if ins[4]:
        lens = b.op("Unsqueeze", [b.op("Cast", [ins[4]], to=7), f([1], i64)])  # B x 1
    outs_y, outs_h, outs_c = [], [], []
    for d, backwards in enumerate(dirs):
        wt = b.op("Transpose", [take(ins[1], d)], perm=[1, 0])  # I x gates*H
        rt = b.op("Transpose", [take(ins[2], d)], perm=[1, 0])  # H x gates*H
        xw = b.op("MatMul", [x, wt])  # T x B x gates*H
        wb = rb = None
        if ins[3]:
            bias = take(ins[3], d)
            wb = b.op("Slice", [bias, f([0], i64), f([gates * hidden], i64), f([0], i64)])
            rb = b.op("Slice", [bias, f([gates * hidden], i64), f([2 * gates * hidden], i64), f([0], i64)])
            xw = b.op("Add", [xw, wb])
        def init(k: int, d: int = d) -> str:  # direction d's initial state, B x H
            return b.op("Squeeze", [b.op("Gather", [ins[k], f([d], i64)], axis=1 if layout else 0),
                                    f([1 if layout else 0], i64)])

        h = init(5) if ins[5] else b.op("Expand", [f(0.0), f([batch, hidden], i64)])
        c = None
        if op == "LSTM":
            c = init(6) if ins[6] else b.op("Expand", [f(0.0), f([batch, hidden], i64)])
            if ins[7]:
                p = take(ins[7], d)
                pi, po, pf = (b.op("Slice", [p, f([k * hidden], i64), f([(k + 1) * hidden], i64), f([0], i64)])
                              for k in range(3))
        ys: list[str | None] = [None] * steps
        for t in (range(steps - 1, -1, -1) if backwards else range(steps)):
            xt = b.op("Gather", [xw, f(t, i64)], axis=0)  # B x gates*H
            if op == "RNN":
                pre = b.op("Add", [xt, b.op("MatMul", [h, rt])])
                new_h = b.op("Tanh", [b.op("Add", [pre, rb]) if rb else pre])
                new_c = None
            elif op == "GRU":
                hr = b.op("MatMul", [h, rt])
                if rb:
                    hr = b.op("Add", [hr, rb])
                z = b.op("Sigmoid", [b.op("Add", [cols(xt, 0), cols(hr, 0)])])
                r = b.op("Sigmoid", [b.op("Add", [cols(xt, 1), cols(hr, 1)])])
                if a.get("linear_before_reset", 0):
                    cand = b.op("Add", [cols(xt, 2), b.op("Mul", [r, cols(hr, 2)])])
                else:
                    rh = b.op("MatMul", [b.op("Mul", [r, h]), cols(rt, 2)])
                    cand = b.op("Add", [cols(xt, 2), b.op("Add", [rh, cols(rb, 2)]) if rb else rh])
                cand = b.op("Tanh", [cand])
                new_h = b.op("Add", [b.op("Mul", [b.op("Sub", [f(1.0), z]), cand]), b.op("Mul", [z, h])])
                new_c = None
            else:  # LSTM, gates i, o, f, c
                pre = b.op("Add", [xt, b.op("MatMul", [h, rt])])
                if rb:
                    pre = b.op("Add", [pre, rb])
                gi, go, gf, gc = (cols(pre, k) for k in range(4))
                if ins[7]:
                    gi, gf = b.op("Add", [gi, b.op("Mul", [pi, c])]), b.op("Add", [gf, b.op("Mul", [pf, c])])
                new_c = b.op("Add", [b.op("Mul", [b.op("Sigmoid", [gf]), c]),
                                     b.op("Mul", [b.op("Sigmoid", [gi]), b.op("Tanh", [gc])])])
                if ins[7]:
                    go = b.op("Add", [go, b.op("Mul", [po, new_c])])
                new_h = b.op("Mul", [b.op("Sigmoid", [go]), b.op("Tanh", [new_c])])
            if lens is not None:  # past a sequence's end: the state stays, the output is zero
                live = b.op("Less", [f(t, i64), lens])
                ys[t] = b.op("Where", [live, new_h, f(0.0)])
                new_h = b.op("Where", [live, new_h, h])
                if new_c is not None:
                    new_c = b.op("Where", [live, new_c, c])
            else:
                ys[t] = new_h
            h, c = new_h, new_c
        outs_y.append(b.op("Concat", [b.op("Unsqueeze", [y, f([0], i64)]) for y in ys], axis=0))  # T x B x H
        outs_h.append(h)
        outs_c.append(c)
    want = list(node.output) + [""] * (3 - len(node.output))
    if want[0]:
        y = b.op("Concat", [b.op("Unsqueeze", [v, f([1], i64)]) for v in outs_y], axis=1)  # T x D x B x H
        b.op("Transpose", [y], want[0], perm=[2, 0, 1, 3]) if layout else b.op("Identity", [y], want[0])
    for name, vals in ((want[1], outs_h), (want[2] if op == "LSTM" else "", outs_c)):
        if name:
            s = b.op("Concat", [b.op("Unsqueeze", [v, f([1 if layout else 0], i64)]) for v in vals],
                     axis=1 if layout else 0)  # D x B x H, or B x D x H
            b.op("Identity", [s], name)
    return True


#: The most steps a Scan or Loop is unrolled over (each step copies the body's nodes)
MAX_UNROLLED_STEPS = 256
#: The most nodes an unrolled Scan or Loop may become (steps x body nodes): a crafted file with a
#: large body and many steps is left to torch-mlir's refusal instead of growing the graph
MAX_UNROLLED_NODES = 1 << 16


def _subgraph_free(body: Any) -> bool:
    """Whether no node of ``body`` holds a graph of its own (those are not renamed here)."""
    from onnx import AttributeProto

    return all(at.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for n in body.node for at in n.attribute)


def _inline_body(b: _Builder, g: Any, body: Any, bound: dict[str, str], step: int) -> dict[str, str]:
    """One copy of ``body``'s nodes, its inputs bound to the values in ``bound``; every value the
    body defines renamed for this step (outer-scope names are read as they are). The body's
    initializers and Constant nodes become graph initializers. Returns the name map."""
    from onnx import helper, numpy_helper

    names = dict(bound)
    for t in body.initializer:
        names[t.name] = b.const(numpy_helper.to_array(t), numpy_helper.to_array(t).dtype)
    for sp in body.sparse_initializer:  # (rare) densified
        arr = numpy_helper.to_array(sp)
        names[sp.values.name] = b.const(arr, arr.dtype)
    for n in body.node:
        for o in n.output:
            if o:
                names[o] = f"{b.prefix}_s{step}_{o}"
        node = helper.make_node(n.op_type, [names.get(v, v) if v else "" for v in n.input],
                                [names[o] if o else "" for o in n.output], domain=n.domain or None)
        node.attribute.extend(n.attribute)
        b.nodes.append(node)
    return names


def unroll_control_flow(model: Any) -> bool:
    """Scan (opset 9+) over a static scan length and Loop with a constant trip count whose body
    keeps its condition true, unrolled step by step, and If with a constant condition as its
    branch; True where any was (see the module's docstring). Others are left to torch-mlir."""
    g = model.graph
    if not any(n.op_type in ("Scan", "Loop", "If") and n.domain in ("", "ai.onnx") for n in g.node):
        return False
    opset = _default_opset(model)
    shapes, _ = _shapes_and_types(model)
    inits = {t.name: t for t in g.initializer}
    out, done = [], False
    for k, node in enumerate(g.node):
        if node.op_type not in ("Scan", "Loop", "If") or node.domain not in ("", "ai.onnx"):
            out.append(node)
            continue
        b = _Builder(g, f"{node.output[0] or node.op_type}__unroll{k}")
        a = _attrs(node)
        n_inits = len(g.initializer)
        body = a.get("body")
        if node.op_type == "If":
            ok = _if_as_branches(b, g, node, a, inits)
        elif body is None or not _subgraph_free(body):
            ok = False
        elif node.op_type == "Scan":
            ok = opset >= 9 and _unroll_scan(b, g, node, a, body, shapes)
        else:
            ok = _unroll_loop(b, g, node, body, inits)
        if not ok:
            del g.initializer[n_inits:]  # the constants of a copy that is not used
            out.append(node)
            continue
        out += b.nodes
        done = True
    del g.node[:]
    g.node.extend(out)
    return done


def _declared_shape(vi: Any) -> tuple[int, ...] | None:
    t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if t is None or not t.HasField("shape") or not t.elem_type:
        return None
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    return None if any(d < 0 for d in dims) else (int(t.elem_type), *dims)


def _if_as_branches(b: _Builder, g: Any, node: Any, a: dict[str, Any], inits: dict[str, Any]) -> bool:
    """If with a constant condition: the branch it takes, inlined. With a condition known only
    at run time (torch-mlir lowers it to a select halbench cannot run): both branches inlined
    (they have no side effects) and each output a Where of the two, where the branches declare
    the same static type and shape for it."""
    from onnx import numpy_helper

    then, other = a.get("then_branch"), a.get("else_branch")
    if then is None or other is None or not (_subgraph_free(then) and _subgraph_free(other)):
        return False
    if len(then.output) != len(node.output) or len(other.output) != len(node.output):
        return False
    cond = inits.get(node.input[0])
    if cond is not None:
        branch = then if bool(numpy_helper.to_array(cond).reshape(-1)[0]) else other
        names = _inline_body(b, g, branch, {}, 0)
        for o, bo in zip(node.output, branch.output):
            if o:
                b.op("Identity", [names.get(bo.name, bo.name)], o)
        return True
    if any(_declared_shape(t) is None or _declared_shape(t) != _declared_shape(e)
           for t, e in zip(then.output, other.output)):
        return False
    tn, en = _inline_body(b, g, then, {}, 0), _inline_body(b, g, other, {}, 1)
    c = b.op("Reshape", [node.input[0], b.const([], "int64")])  # (a 1-element condition as a scalar)
    for o, t, e in zip(node.output, then.output, other.output):
        if o:
            b.op("Where", [c, tn.get(t.name, t.name), en.get(e.name, e.name)], o)
    return True


def _unroll_scan(b: _Builder, g: Any, node: Any, a: dict[str, Any], body: Any,
                 shapes: dict[str, tuple[int, ...]]) -> bool:
    import numpy as np

    m = int(a.get("num_scan_inputs", 0))
    n = len(node.input) - m
    k = len(body.output) - n
    if m < 1 or n < 0 or k < 0 or len(body.input) != n + m:
        return False
    xs = [shapes.get(v) for v in node.input[n:]]
    if any(s is None or not s for s in xs):
        return False
    raw_axes = list(a.get("scan_input_axes", [0] * m))
    in_dirs = list(a.get("scan_input_directions", [0] * m))
    out_dirs = list(a.get("scan_output_directions", [0] * k))
    if len(raw_axes) != m or len(in_dirs) != m or len(out_dirs) != k:
        return False  # (attributes that do not match the inputs: torch-mlir's refusal)
    in_axes = [int(v) % len(s) for v, s in zip(raw_axes, xs)]
    lengths = {s[ax] for s, ax in zip(xs, in_axes)}
    if len(lengths) != 1:
        return False
    steps = lengths.pop()
    if not 1 <= steps <= MAX_UNROLLED_STEPS or steps * len(body.node) > MAX_UNROLLED_NODES:
        return False
    state = list(node.input[:n])
    per_step: list[list[str]] = [[] for _ in range(k)]
    for t in range(steps):
        bound = {body.input[i].name: state[i] for i in range(n)}
        for j in range(m):
            at = steps - 1 - t if in_dirs[j] else t
            bound[body.input[n + j].name] = b.op("Gather", [node.input[n + j], b.const(np.int64(at), np.int64)],
                                                 axis=in_axes[j])
        names = _inline_body(b, g, body, bound, t)
        outs = [names.get(o.name, o.name) for o in body.output]
        state = outs[:n]
        for j in range(k):
            per_step[j].append(outs[n + j])
    for i in range(n):
        if node.output[i]:
            b.op("Identity", [state[i]], node.output[i])
    out_axes = list(a.get("scan_output_axes", [0] * k))
    for j in range(k):
        name = node.output[n + j] if n + j < len(node.output) else ""
        if not name:
            continue
        ax = int(out_axes[j]) if j < len(out_axes) else 0
        if ax < 0:  # counted from the end of the stacked output: the element's rank + 1
            t = body.output[n + j].type.tensor_type
            if not t.HasField("shape"):
                return False
            ax += len(t.shape.dim) + 1
        seq = per_step[j][::-1] if out_dirs[j] else per_step[j]
        parts = [b.op("Unsqueeze", [v, b.const([ax], np.int64)]) for v in seq]
        b.op("Concat", parts, name, axis=ax)
    return True


def _unroll_loop(b: _Builder, g: Any, node: Any, body: Any, inits: dict[str, Any]) -> bool:
    import numpy as np
    from onnx import numpy_helper

    ins = list(node.input)
    if not ins or not ins[0] or ins[0] not in inits:
        return False
    steps = int(numpy_helper.to_array(inits[ins[0]]).reshape(-1)[0])
    if not 1 <= steps <= MAX_UNROLLED_STEPS or steps * len(body.node) > MAX_UNROLLED_NODES:
        return False
    if len(ins) > 1 and ins[1] and (ins[1] not in inits or not bool(numpy_helper.to_array(inits[ins[1]]).reshape(-1)[0])):
        return False  # a condition not known to start true
    carried = ins[2:]
    n = len(carried)
    k = len(body.output) - 1 - n
    if len(body.input) != 2 + n or k < 0:
        return False
    # the body must keep its condition true: its cond output is its cond input (or an Identity
    # of it) or a constant true
    cond_in, cond_out = body.input[1].name, body.output[0].name
    producers = {o: nd for nd in body.node for o in nd.output}
    src = cond_out
    while src in producers and producers[src].op_type == "Identity":
        src = producers[src].input[0]
    const_true = (src in {t.name for t in body.initializer}
                  and bool(numpy_helper.to_array(next(t for t in body.initializer if t.name == src)).reshape(-1)[0]))
    if src != cond_in and not const_true:
        return False
    state = carried
    per_step: list[list[str]] = [[] for _ in range(k)]
    for t in range(steps):
        bound = {body.input[0].name: b.const(np.int64(t), np.int64),
                 body.input[1].name: b.const(np.bool_(True), np.bool_)}
        bound.update({body.input[2 + i].name: state[i] for i in range(n)})
        names = _inline_body(b, g, body, bound, t)
        outs = [names.get(o.name, o.name) for o in body.output]
        state = outs[1:1 + n]
        for j in range(k):
            per_step[j].append(outs[1 + n + j])
    for i in range(n):
        if i < len(node.output) and node.output[i]:
            b.op("Identity", [state[i]], node.output[i])
    for j in range(k):
        name = node.output[n + j] if n + j < len(node.output) else ""
        if name:
            parts = [b.op("Unsqueeze", [v, b.const([0], np.int64)]) for v in per_step[j]]
            b.op("Concat", parts, name, axis=0)
    return True
