"""ONNX -> torch-dialect MLIR (IREE's importer) -> linalg on tensors (torch-mlir's pipelines).

Before import the model is normalised so that the rest of the compiler sees one shape of
input: old opsets are upgraded, initializers that are also listed as graph inputs are treated
as weights, input shapes are fixed (``input_shapes`` overrides), and every constant gets a
unique resource name so its data can be read back from the ONNX file rather than from MLIR
(the bindings cannot read ``dense_resource`` blobs).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from halbench.compiler.frontend import Imported
from halbench.compiler.frontend.fold_shapes import fold_shape_computations
from halbench.compiler.frontend.mlir import TORCH_TO_LINALG, run_pipeline
from halbench.errors import CompileError, UserError

__all__ = ["load_onnx", "prepare_model", "MIN_OPSET", "TARGET_OPSET"]

#: Models below this opset are upgraded to TARGET_OPSET first (the importer's ONNX->torch
#: patterns are written against newer op definitions: Softmax, Reduce*, Clip, Pad, ...).
MIN_OPSET = 13
TARGET_OPSET = 17


def _default_opset(model: Any) -> int:
    for o in model.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 0


def prepare_model(model: Any, input_shapes: dict[str, tuple[int, ...]]) -> tuple[Any, dict[str, str], dict[str, Any]]:
    """Normalise a loaded ModelProto; returns (model, resource name -> weight name, resource -> array)."""
    import onnx
    from onnx import numpy_helper

    opset = _default_opset(model)
    if opset and opset < 7:
        raise UserError(f"ONNX opset {opset} is too old; halbench reads opset 7 and newer")
    if opset and opset < MIN_OPSET:
        try:
            model = onnx.version_converter.convert_version(model, TARGET_OPSET)
        except Exception as e:  # the converter raises bare RuntimeErrors
            raise CompileError(f"cannot upgrade the model from opset {opset} to {TARGET_OPSET}: "
                               f"{str(e).splitlines()[0]}") from None
    g = model.graph
    # ONNX Constant nodes holding tensors become initializers: one path for all weights.
    keep = []
    for node in g.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.attribute) == 1 \
                and node.attribute[0].name == "value":
            t = onnx.TensorProto()
            t.CopyFrom(node.attribute[0].t)
            t.name = node.output[0]
            g.initializer.append(t)
        else:
            keep.append(node)
    if len(keep) != len(g.node):
        del g.node[:]
        g.node.extend(keep)
    # Initializers listed as inputs (old exporters did that) are weights, not inputs.
    init_names = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in init_names]
    if len(real_inputs) != len(g.input):
        del g.input[:]
        g.input.extend(real_inputs)
    # Fix input shapes: overrides first, then refuse what stays dynamic.
    unknown = set(input_shapes) - {i.name for i in g.input}
    if unknown:
        raise UserError(f"--input-shape names {sorted(unknown)}, but the model's inputs are "
                        f"{[i.name for i in g.input]}")
    for inp in g.input:
        dims = inp.type.tensor_type.shape.dim
        if inp.name in input_shapes:
            shape = tuple(int(s) for s in input_shapes[inp.name])
            if 0 in shape:
                # The import pipeline divides by dimensions: a zero one would crash the process
                # (SIGFPE) inside it. Zero-size tensors are not supported yet: refuse them here.
                raise UserError(f"input '{inp.name}' has a zero-size dimension ({'x'.join(map(str, shape))}); "
                                f"halbench compiles non-empty tensors only")
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
    # Shape arithmetic on static shapes becomes constants, so every tensor has a known rank.
    model = fold_shape_computations(model)
    g = model.graph
    # Unique, identifier-safe resource names; remember which initializer each one is.
    rename: dict[str, str] = {}
    names: dict[str, str] = {}
    arrays: dict[str, Any] = {}
    for i, t in enumerate(g.initializer):
        new = f"hbw{i}"
        rename[t.name] = new
        names[new] = t.name
        arrays[new] = numpy_helper.to_array(t)
        t.name = new
    for node in g.node:
        for j, x in enumerate(node.input):
            if x in rename:
                node.input[j] = rename[x]
    for o in g.output:
        if o.name in rename:
            o.name = rename[o.name]
    for vi in g.value_info:
        if vi.name in rename:
            vi.name = rename[vi.name]
    # Old shapes in value_info can contradict overridden input shapes: infer afresh.
    del g.value_info[:]
    try:
        model = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:
        raise CompileError(f"ONNX shape inference failed: {str(e).splitlines()[0]}") from None
    return model, names, arrays


def load_onnx(path: Path, input_shapes: dict[str, tuple[int, ...]]) -> Imported:
    import onnx
    from google.protobuf.message import DecodeError
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer

    t0 = time.perf_counter()
    try:
        model = onnx.load(str(path))
    except (DecodeError, ValueError, OSError) as e:
        raise UserError(f"{path.name} is not a valid ONNX model: {e}") from None
    if not model.graph.node:
        raise UserError(f"{path.name} is not a valid ONNX model: its graph has no nodes")
    model, names, arrays = prepare_model(model, input_shapes)
    input_names = [i.name for i in model.graph.input]
    output_names = [names.get(o.name, o.name) for o in model.graph.output]
    t1 = time.perf_counter()
    ctx = ir.Context()
    try:
        info = onnx_importer.ModelInfo(model)
        module = info.create_module(context=ctx)
        imp = onnx_importer.NodeImporter.define_function(info.main_graph, module.operation)
        imp.import_all()
    except onnx_importer.OnnxImportError as e:
        raise CompileError(f"importing {path.name}: {e}") from None
    t2 = time.perf_counter()
    run_pipeline(module, TORCH_TO_LINALG, f"lowering {path.name} to linalg (an ONNX op halbench's importer "
                                          f"cannot lower?)")
    t3 = time.perf_counter()
    return Imported(module, input_names, output_names, arrays, names,
                    {"load_onnx": t1 - t0, "import_onnx": t2 - t1, "torch_to_linalg": t3 - t2})
