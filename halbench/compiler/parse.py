"""MLIR (linalg on tensors) -> halbench IR, by walking the module with the MLIR Python bindings.

Only what the op's attributes and types say is used (no text scraping of ops). Named linalg ops
become named IR ops; ``linalg.generic`` / ``broadcast`` / ``transpose`` / ``fill`` become
``generic`` ops whose body is a list of scalar nodes. The init (``outs``) of a named op is folded
away when it is a fill with the op's neutral value; any other init becomes an explicit
element-wise combine, which the fusion passes later pull into the op's epilogue.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from halbench.compiler.ir import Body, Graph, Node, Op, TensorType, Weight
from halbench.dtypes import to_numpy
from halbench.errors import CompileError

__all__ = ["SCALAR_OPS", "SUPPORTED_OPS", "parse_module"]

_CONV = {
    "linalg.conv_2d_nchw_fchw": ("conv2d", "nchw"),
    "linalg.conv_2d_ngchw_gfchw": ("conv2d", "ngchw"),
    "linalg.conv_2d_nhwc_hwcf": ("conv2d", "nhwc_hwcf"),
    "linalg.conv_2d_nhwc_fhwc": ("conv2d", "nhwc_fhwc"),
    "linalg.depthwise_conv_2d_nchw_chw": ("depthwise_conv2d", "nchw"),
    "linalg.depthwise_conv_2d_nhwc_hwc": ("depthwise_conv2d", "nhwc"),
}
_POOL = {
    "linalg.pooling_nchw_max": ("max", "nchw"), "linalg.pooling_nchw_sum": ("sum", "nchw"),
    "linalg.pooling_nhwc_max": ("max", "nhwc"), "linalg.pooling_nhwc_sum": ("sum", "nhwc"),
}
_MATMUL = {"linalg.matmul": "matmul", "linalg.batch_matmul": "batch_matmul"}
#: 1-D convolutions and pools: the 2-D op over a height of 1 (input axis, weight axis, 2-D layout).
_CONV1D = {
    "linalg.conv_1d_ncw_fcw": ("conv2d", "nchw", 2, 2),
    "linalg.conv_1d_nwc_wcf": ("conv2d", "nhwc_hwcf", 1, 0),
    "linalg.depthwise_conv_1d_ncw_cw": ("depthwise_conv2d", "nchw", 2, 1),
    "linalg.depthwise_conv_1d_nwc_wc": ("depthwise_conv2d", "nhwc", 1, 0),
}
_POOL1D = {
    "linalg.pooling_ncw_max": ("max", "nchw", 2), "linalg.pooling_ncw_sum": ("sum", "nchw", 2),
    "linalg.pooling_nwc_max": ("max", "nhwc", 1), "linalg.pooling_nwc_sum": ("sum", "nhwc", 1),
}

#: Scalar ops allowed in a region (dialect prefix dropped in the IR).
SCALAR_OPS = frozenset(["arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.negf", "arith.remf", "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf", "arith.addi", "arith.subi", "arith.muli", "arith.divsi", "arith.divui", "arith.remsi", "arith.remui", "arith.floordivsi", "arith.ceildivsi", "arith.andi", "arith.ori", "arith.xori", "arith.shli", "arith.shrsi", "arith.shrui", "arith.maxsi", "arith.minsi", "arith.maxui", "arith.minui", "arith.cmpf", "arith.cmpi", "arith.select", "arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.extf", "arith.truncf", "arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui", "arith.bitcast", "arith.constant", "math.exp", "math.exp2", "math.expm1", "math.log", "math.log2", "math.log1p", "math.tanh", "math.erf", "math.rsqrt", "math.sqrt", "math.powf", "math.fpowi", "math.absf", "math.absi", "math.ceil", "math.floor", "math.round", "math.roundeven", "math.sin", "math.cos", "math.atan", "math.atan2", "math.copysign", "math.fma", "math.tan", "math.acos", "math.asin", "math.acosh", "math.asinh", "math.atanh", "math.cosh", "math.sinh", "linalg.index", "tensor.extract"])

_TOP_OPS = ["arith.constant", "tensor.empty", "linalg.fill", "linalg.generic", "linalg.broadcast",
            "linalg.transpose", "linalg.matmul", "linalg.batch_matmul", *_CONV, *_POOL, *_CONV1D, *_POOL1D,
            "linalg.pooling_ndhwc_sum", "linalg.pooling_ndhwc_max",
            "tensor.pad",
            "tensor.collapse_shape", "tensor.expand_shape", "tensor.reshape", "tensor.cast",
            "tensor.concat", "tensor.extract_slice", "tensor.insert_slice", "tm_tensor.scan", "tm_tensor.sort",
            "tm_tensor.scatter", "cf.assert", "func.return"]

#: Everything the parser accepts (shown in the error for anything else).
SUPPORTED_OPS = tuple(_TOP_OPS) + tuple(sorted(SCALAR_OPS))

_CMPF = ["false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord", "ueq", "ugt", "uge", "ult", "ule",
         "une", "uno", "true"]
_CMPI = ["eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge"]
_COMBINE = {"addf": "add", "addi": "add", "maximumf": "max", "maxnumf": "max", "maxsi": "max",
            "minimumf": "min", "minnumf": "min", "minsi": "min", "mulf": "mul", "muli": "mul"}


def _unsupported(op: Any, what: str = "") -> CompileError:
    extra = f" ({what})" if what else ""
    return CompileError(f"unsupported op '{op.name}'{extra} at {_loc(op)}; `halbench check MODEL.onnx` names "
                        f"the ONNX node that needs it, `halbench list-ops` lists the ops halbench compiles")


def _loc(op: Any) -> str:
    s = str(op.location)
    m = re.fullmatch(r"loc\((.*)\)", s)
    s = m.group(1) if m else s
    if s in ('""', "unknown", ""):
        # The ONNX importer leaves locations empty: say where the op sits instead.
        try:
            parent = op.parent
            while parent is not None and parent.name != "func.func":
                parent = parent.parent
            fn = str(parent.attributes["sym_name"]) if parent is not None else "?"
            block_ops = [o.operation for o in op.block.operations]
            idx = next(i for i, o in enumerate(block_ops) if o == op)
            return f"op #{idx} of @{fn.strip(chr(34))}"
        except Exception:  # noqa: BLE001 - a location is best effort
            return "an unknown location"
    return s


def _dtype(t: Any) -> str:
    s = str(t)
    if s == "index":
        return "i64"
    if s.startswith("ui"):
        return "u" + s[2:]
    if s in ("f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64"):
        return s
    raise CompileError(f"unsupported element type '{s}'")


class _Parser:
    def __init__(self, ir: Any, blobs: Mapping[str, np.ndarray], weight_names: Mapping[str, str]):
        self.ir = ir
        self.blobs = blobs
        self.weight_names = weight_names
        self.g = Graph()
        self.names: dict[Any, str] = {}
        self.scalars: dict[Any, tuple[Any, str]] = {}   # outer scalar constants
        self.fills: dict[Any, Any] = {}                  # fill result -> its scalar constant
        self.empties: set[Any] = set()
        self.runtime_scalars: dict[Any, tuple[Any, tuple[int, ...]]] = {}  # scalar -> (tensor, indices)
        self.counter = 0

    # -- values ---------------------------------------------------------------------
    def tensor_type(self, t: Any, what: str) -> TensorType:
        rt = self.ir.RankedTensorType(t)
        shape = []
        for i in range(rt.rank):
            if rt.is_dynamic_dim(i):
                raise CompileError(f"{what} has a dynamic dimension {i} ({t}); halbench compiles static "
                                   f"shapes only: give the input shapes (--input-shape NAME=1x3x224x224)")
            shape.append(rt.get_dim_size(i))
        return TensorType(tuple(shape), _dtype(rt.element_type))

    def define(self, v: Any, name: str | None = None, what: str = "value") -> str:
        if name is None:
            name = f"%{self.counter}"
            self.counter += 1
        self.names[v] = name
        self.g.types[name] = self.tensor_type(v.type, what)
        return name

    def name(self, v: Any) -> str:
        if v in self.empties and v not in self.names and v not in self.fills:
            # An uninitialised tensor read as a value: any content is valid; it reads zeros.
            self.fills[v] = 0
        if v in self.fills and v not in self.names:
            self.materialize_fill(v)
        try:
            return self.names[v]
        except KeyError:
            raise CompileError(f"value {v.get_name()} is used as a tensor but halbench cannot "
                               f"produce it (defined by {v.owner.name if hasattr(v.owner, 'name') else '?'})") from None

    def fresh(self, t: TensorType) -> str:
        name = f"%{self.counter}"
        self.counter += 1
        self.g.types[name] = t
        return name

    def emit(self, kind: str, ins: list[str], outs: list[str], attrs: dict[str, Any], op: Any) -> Op:
        o = Op(kind, ins, outs, attrs, _loc(op))
        self.g.ops.append(o)
        return o

    # -- the walk ---------------------------------------------------------------------
    def parse(self, module: Any, input_names: list[str] | None, output_names: list[str] | None) -> Graph:
        funcs = [op for op in module.body.operations if op.operation.name == "func.func"]
        if not funcs:
            raise CompileError("the MLIR module has no func.func; expected linalg on tensors in a func.func")
        public = [f for f in funcs if "sym_visibility" not in f.attributes
                  or str(f.attributes["sym_visibility"]) != '"private"']
        func = (public or funcs)[0]
        self.g.name = str(func.attributes["sym_name"]).strip('"')
        block = func.regions[0].blocks[0]
        for i, arg in enumerate(block.arguments):
            user = input_names[i] if input_names and i < len(input_names) else f"arg{i}"
            name = self.define(arg, user, f"input '{user}'")
            self.g.inputs.append((user, name))
        for op in block.operations:
            self.top(op.operation, output_names)
        return self.g

    def top(self, op: Any, output_names: list[str] | None) -> None:
        before = len(self.g.ops)
        self.top_op(op, output_names)
        if len(self.g.ops) > before and self.g.ops[-1].kind in ("reshape", "slice", "concat", "generic"):
            self.fold_if_constant()

    def top_op(self, op: Any, output_names: list[str] | None) -> None:
        n = op.name
        if n == "func.return":
            for i, v in enumerate(op.operands):
                user = output_names[i] if output_names and i < len(output_names) else f"output{i}"
                self.g.outputs.append((user, self.name(v)))
        elif n == "arith.constant":
            self.constant(op)
        elif n == "tensor.empty":
            self.empties.add(op.results[0])
        elif n == "cf.assert":
            pass  # runtime checks (division by zero) that the oracle does not reproduce
        elif n == "linalg.fill" and op.operands[0] in self.runtime_scalars:
            self.runtime_fill(op)
        elif n == "linalg.fill":
            self.fills[op.results[0]] = self.scalar_const(op.operands[0], op)
        elif n == "linalg.generic":
            self.generic(op)
        elif n == "linalg.broadcast":
            self.broadcast(op)
        elif n == "linalg.transpose":
            self.transpose(op)
        elif n in _MATMUL:
            self.matmul(op, _MATMUL[n])
        elif n in _CONV:
            self.conv(op, *_CONV[n])
        elif n in _POOL:
            self.pool(op, *_POOL[n])
        elif n in _CONV1D or n in _POOL1D:
            self.one_d(op, n)
        elif n in ("linalg.pooling_ndhwc_sum", "linalg.pooling_ndhwc_max"):
            self.pool3d(op, "sum" if n.endswith("sum") else "max")
        elif n == "tensor.pad":
            self.pad(op)
        elif n in ("tensor.collapse_shape", "tensor.expand_shape", "tensor.reshape", "tensor.cast"):
            self.emit("reshape", [self.name(op.operands[0])], [self.define(op.results[0])], {}, op)
        elif n == "tensor.concat":
            dim = self.ir.IntegerAttr(op.attributes["dim"]).value
            self.emit("concat", [self.name(v) for v in op.operands], [self.define(op.results[0])],
                      {"axis": dim}, op)
        elif n == "tensor.extract_slice":
            self.extract_slice(op)
        elif n == "tm_tensor.scan":
            self.scan(op)
        elif n == "tm_tensor.sort":
            self.sort(op)
        elif n == "tm_tensor.scatter":
            self.scatter(op)
        elif n == "tensor.extract" and not isinstance(op.results[0].type, self.ir.RankedTensorType):
            self.scalar_extract(op)
        elif n in SCALAR_OPS and len(op.results) == 1 \
                and not isinstance(op.results[0].type, self.ir.RankedTensorType):
            self.scalar_arith(op)
        elif n == "tensor.insert_slice":
            self.insert_slice(op)
        else:
            raise _unsupported(op)

    # -- constants --------------------------------------------------------------------
    def constant(self, op: Any) -> None:
        attr = op.attributes["value"]
        res = op.results[0]
        if not isinstance(res.type, self.ir.RankedTensorType):
            self.scalars[res] = (self._scalar_value(attr), _dtype(res.type))
            return
        t = self.tensor_type(res.type, "constant")
        data, rname = self.dense_data(attr, t, op)
        if rname is None and data.size > 1:
            # The pipeline inlines small resources as dense attrs: find their name by content.
            rname = self.by_content().get((data.shape, data.dtype.str, data.tobytes()))
        name = self.weight_names.get(rname, rname) if rname else f"const{len(self.g.weights)}"
        while name in self.g.types:
            name += "_"
        self.define(res, name)
        self.g.weights[name] = Weight(name, t, data)

    def by_content(self) -> dict[tuple[Any, ...], str]:
        if not hasattr(self, "_by_content"):
            self._by_content = {}
            for k, v in self.blobs.items():
                if isinstance(v, np.ndarray) and v.size <= 1 << 16:
                    self._by_content.setdefault((v.shape, v.dtype.str, v.tobytes()), k)
        return self._by_content

    def _scalar_value(self, attr: Any) -> Any:
        if isinstance(attr, self.ir.FloatAttr):
            return float(self.ir.FloatAttr(attr).value)
        if isinstance(attr, self.ir.IntegerAttr):
            return int(self.ir.IntegerAttr(attr).value)
        if isinstance(attr, self.ir.BoolAttr):
            return int(self.ir.BoolAttr(attr).value)
        raise CompileError(f"unsupported scalar constant {attr}")

    def dense_data(self, attr: Any, t: TensorType, op: Any) -> tuple[np.ndarray, str | None]:
        dt = to_numpy(t.dtype)
        if isinstance(attr, self.ir.DenseResourceElementsAttr):
            m = re.match(r"dense_resource<([^>]+)>", str(attr))
            rname = m.group(1) if m else ""
            if rname not in self.blobs:
                raise CompileError(f"constant at {_loc(op)} refers to resource '{rname}' whose data is "
                                   f"not in the file (elided or external)")
            blob = self.blobs[rname]
            arr = np.frombuffer(blob, dtype=dt) if isinstance(blob, (bytes, bytearray)) else np.asarray(blob)
            if arr.size != t.size:
                raise CompileError(f"resource '{rname}' holds {arr.size} elements, its type {t} needs {t.size}")
            return arr.astype(dt, copy=False).reshape(t.shape), rname
        if isinstance(attr, self.ir.DenseElementsAttr):
            d = self.ir.DenseElementsAttr(attr)
            if d.is_splat:
                _check_constant_size(t)
                return np.full(t.shape, self._scalar_value(d.get_splat_value()), dtype=dt), None
            try:
                arr = np.array(d, copy=True)
            except (TypeError, ValueError, RuntimeError):
                cls = self.ir.DenseFPElementsAttr if t.dtype.startswith(("f", "bf")) else self.ir.DenseIntElementsAttr
                arr = np.array([cls(attr)[i] for i in range(t.size)])
            if t.dtype == "i1":
                arr = arr.astype(np.bool_)
            return arr.astype(dt, copy=False).reshape(t.shape), None
        raise _unsupported(op, f"constant attribute {str(attr)[:60]}")

    def scalar_const(self, v: Any, op: Any) -> Any:
        if v in self.scalars:
            return self.scalars[v][0]
        raise _unsupported(op, "a fill or pad value must be a scalar constant")

    def materialize_fill(self, v: Any) -> None:
        """A fill read as a tensor (not only as an init): a generic with a constant body."""
        t = self.tensor_type(v.type, "fill")
        body = Body()
        body.yields = [body.add(Node("const", (), t.dtype, self.fills[v]))]
        self.g.ops.append(Op("generic", [], [self.define(v)], _generic_attrs(
            list(t.shape), ["parallel"] * len(t.shape), [_ident(len(t.shape))], body, [None], [None], [None])))

    def init_of(self, v: Any, neutral: float) -> str | None:
        """None when the init is neutral (a fill of ``neutral`` or an empty tensor)."""
        if v in self.empties:
            return None
        if v in self.fills and float(self.fills[v]) == neutral:
            return None
        return self.name(v)

    # -- generic and friends ------------------------------------------------------------
    def affine_map(self, m: Any, op: Any) -> tuple[tuple[str, int], ...]:
        out = []
        for e in m.results:
            if isinstance(e, self.ir.AffineDimExpr):
                out.append(("d", self.ir.AffineDimExpr(e).position))
            elif isinstance(e, self.ir.AffineConstantExpr):
                out.append(("c", self.ir.AffineConstantExpr(e).value))
            else:
                raise _unsupported(op, f"indexing map {m} is not a projection")
        return tuple(out)

    def generic(self, op: Any) -> None:
        ir = self.ir
        seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
        n_in, n_out = seg[0], seg[1]
        operands = list(op.operands)
        ins, outs = operands[:n_in], operands[n_in:n_in + n_out]
        maps = [self.affine_map(ir.AffineMapAttr(a).value, op) for a in ir.ArrayAttr(op.attributes["indexing_maps"])]
        iters = ["reduction" if "reduction" in str(a) else "parallel"
                 for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        dims = [0] * len(iters)
        for v, m in zip(ins + outs, maps):
            shape = self.tensor_type(v.type, "operand").shape
            for axis, (k, d) in enumerate(m):
                if k == "d":
                    dims[d] = shape[axis]
        results = list(op.results)
        # Results nobody reads (an argmax index next to the max) are dropped with their body.
        live = [k for k, r in enumerate(results) if _has_uses(r)]
        if not live:
            return
        block = op.regions[0].blocks[0]
        operand_vals: list[Any] = list(ins)
        operand_maps: list[Any] = maps[:n_in]
        arg_operand: dict[Any, int] = {block.arguments[i]: i for i in range(n_in)}
        out_args = {block.arguments[n_in + k]: k for k in range(n_out)}
        reducing = "reduction" in iters
        body = Body()
        values: dict[Any, int] = {}
        arg_nodes: dict[int, int] = {}
        out_nodes: dict[int, int] = {}

        def operand_node(v: Any) -> int:
            if v in values:
                return values[v]
            if v in arg_operand:
                i = arg_operand[v]
                if i not in arg_nodes:
                    arg_nodes[i] = body.add(Node("arg", (), _dtype(v.type), i))
                return arg_nodes[i]
            if v in out_args:
                k = out_args[v]
                if not reducing:
                    # A parallel body reading its init: the init is simply one more input.
                    operand_vals.append(outs[k])
                    operand_maps.append(maps[n_in + k])
                    arg_operand[v] = len(operand_vals) - 1
                    return operand_node(v)
                if k not in out_nodes:
                    out_nodes[k] = body.add(Node("out", (), _dtype(v.type), k))
                return out_nodes[k]
            if v in self.scalars:
                val, dt = self.scalars[v]
                values[v] = body.add(Node("const", (), dt, val))
                return values[v]
            if v in self.runtime_scalars:
                return self.materialize_scalar(v, body, operand_vals, operand_maps, values)
            raise _unsupported(op, f"its body reads {v.get_name()}, which is neither an operand nor a constant")

        for inner in block.operations:
            inner = inner.operation
            name = inner.name
            if name == "linalg.yield":
                yields = [operand_node(v) for v in inner.operands]
                continue
            if name == "cf.assert":
                continue
            if name not in SCALAR_OPS:
                raise _unsupported(inner, "inside a linalg.generic region")
            res = inner.results[0]
            dt = _dtype(res.type)
            short = name.split(".", 1)[1]
            if name == "arith.constant":
                values[res] = body.add(Node("const", (), dt, self._scalar_value(inner.attributes["value"])))
            elif name == "linalg.index":
                values[res] = body.add(Node("index", (), "i64", ir.IntegerAttr(inner.attributes["dim"]).value))
            elif name == "tensor.extract":
                src = inner.operands[0]
                if src not in self.names and src not in self.fills:
                    raise _unsupported(inner, "extract from a tensor defined inside the region")
                operand_vals.append(src)
                operand_maps.append(None)
                idx = len(operand_vals) - 1
                args = tuple(operand_node(v) for v in list(inner.operands)[1:])
                values[res] = body.add(Node("extract", args, dt, idx))
            else:
                values[res] = body.add(Node(short, tuple(operand_node(v) for v in inner.operands), dt,
                                            self._predicate(inner)))

        reduce_kinds: list[str | None] = []
        inits: list[int | None] = []
        init_consts: list[Any] = []
        out_names: list[str] = []
        out_maps = []
        final_yields = []
        def is_combine(k: int) -> bool:
            node = body.nodes[yields[k]]
            return (_COMBINE.get(node.op) is not None and len(node.args) == 2
                    and out_nodes.get(k) in node.args
                    and all(not _reads_out(body, a, out_nodes) for a in node.args if a != out_nodes[k]))

        if reducing and not all(is_combine(k) for k in live):
            self.sequential_reduction(op, dims, iters, operand_vals, operand_maps, maps[n_in:], outs,
                                      results, body, yields)
            return
        for k in live:
            y = yields[k]
            if reducing:
                node = body.nodes[y]
                kind = _COMBINE.get(node.op)
                if kind is None or len(node.args) != 2 or out_nodes.get(k) not in node.args:
                    raise _unsupported(op, f"reduction body yields '{node.op}', not a combine of "
                                           f"{sorted(set(_COMBINE))} with the accumulator")
                other = node.args[1] if node.args[0] == out_nodes[k] else node.args[0]
                reduce_kinds.append(kind)
                final_yields.append(other)
                init = outs[k]
                if init in self.fills:
                    inits.append(None)
                    init_consts.append(self.fills[init])
                elif init in self.empties:
                    inits.append(None)
                    init_consts.append({"add": 0.0, "mul": 1.0, "max": float("-inf"), "min": float("inf")}[kind])
                else:
                    operand_vals.append(init)
                    operand_maps.append(maps[n_in + k])
                    inits.append(len(operand_vals) - 1)
                    init_consts.append(None)
            else:
                reduce_kinds.append(None)
                final_yields.append(y)
                inits.append(None)
                init_consts.append(None)
            out_maps.append(maps[n_in + k])
        body.yields = final_yields
        body = body.live()
        if any(n.op == "out" for n in body.nodes):
            raise _unsupported(op, "the accumulator is used beyond the final combine")
        in_names = [self.name(v) for v in operand_vals]
        for k in live:
            out_names.append(self.define(results[k]))
        self.emit("generic", in_names, out_names, _generic_attrs(
            dims, iters, operand_maps + out_maps, body, reduce_kinds, inits, init_consts), op)

    def materialize_scalar(self, v: Any, body: Body, operand_vals: list[Any], operand_maps: list[Any],
                           values: dict[Any, int]) -> int:
        """The body node computing outer scalar ``v`` (a constant, or a run-time scalar expression
        whose gathered tensors become captured operands)."""
        if v in values:
            return values[v]
        if v in self.scalars:
            val, dt = self.scalars[v]
            values[v] = body.add(Node("const", (), dt, val))
            return values[v]
        rs = self.runtime_scalars[v]
        if rs[0] == "extract":
            operand_vals.append(rs[1])
            operand_maps.append(None)
            idx = tuple(body.add(Node("const", (), "i64", i)) for i in rs[2])
            values[v] = body.add(Node("extract", idx, _dtype(v.type), len(operand_vals) - 1))
        else:
            _, short, dt, value, operands = rs
            args = tuple(self.materialize_scalar(x, body, operand_vals, operand_maps, values) for x in operands)
            values[v] = body.add(Node(short, args, dt, value))
        return values[v]

    def runtime_fill(self, op: Any) -> None:
        """A fill with a run-time scalar: a generic whose body computes the scalar."""
        t = self.tensor_type(op.results[0].type, "fill")
        body = Body()
        vals: list[Any] = []
        maps: list[Any] = []
        body.yields = [self.materialize_scalar(op.operands[0], body, vals, maps, {})]
        rank = len(t.shape)
        self.emit("generic", [self.name(x) for x in vals], [self.define(op.results[0])], _generic_attrs(
            list(t.shape), ["parallel"] * rank, maps + [_ident(rank)], body, [None], [None], [None]), op)

    def fold_if_constant(self) -> None:
        """The op just emitted, when it reads only constants and makes a small result (shape
        arithmetic: which rows to slice, how far to pad), evaluated now: later scalar reads of
        it (``tensor.extract``) become constants, and so do the shapes computed from them."""
        o = self.g.ops[-1]
        if not all(v in self.g.weights and self.g.weights[v].data is not None for v in o.inputs):
            return
        if sum(self.g.types[v].size for v in o.outputs) > 4096:
            return  # weights: the fold_constants pass decides about those
        from halbench.kernels.ops.generic import eval_generic

        data = [np.asarray(self.g.weights[v].data) for v in o.inputs]
        try:
            if o.kind == "generic":
                outs = eval_generic(o.generic_attrs(), data)
            elif o.kind == "reshape":
                outs = [data[0].reshape(self.g.types[o.outputs[0]].shape)]
            elif o.kind == "concat":
                outs = [np.concatenate(data, axis=int(o.attrs["axis"]))]
            else:  # slice
                a = o.attrs
                outs = [data[0][tuple(slice(off, off + (n - 1) * st + 1, st)
                                      for off, n, st in zip(a["offsets"], a["sizes"], a["strides"]))]]
        except Exception:  # noqa: BLE001 - not foldable here (an out-of-bounds gather): leave it to run
            return
        self.g.ops.pop()
        # how it was made, where it only moves or joins weights (a --weights random bundle
        # declares it by that instead of storing it: bundle.weights.derive_values)
        from halbench.compiler.passes.fold_constants import copy_recipe

        ins = [self.g.weights[v] for v in o.inputs]
        recipe = (copy_recipe(o.generic_attrs(), ins) if o.kind == "generic" else
                  ("concat", tuple(ins), {"axis": int(o.attrs["axis"]) % len(self.g.types[o.outputs[0]].shape)})
                  if o.kind == "concat" and ins else None)
        for v, a in zip(o.outputs, outs):
            t = self.g.types[v]
            self.g.weights[v] = Weight(v, t, np.asarray(a, dtype=to_numpy(t.dtype)).reshape(t.shape), recipe=recipe)

    def sequential_reduction(self, op: Any, dims: list[int], iters: list[str], operand_vals: list[Any],
                             operand_maps: list[Any], out_maps: list[Any], outs: list[Any], results: list[Any],
                             body: Body, yields: list[int]) -> None:
        """A reduction whose body is not one combine per output (argmax: compare, then select the
        value and its index): every output is an accumulator (``out`` node k), the body yields their
        next values, and the reduction points are visited in order (reduce kind ``seq``)."""
        inits: list[int | None] = []
        init_consts: list[Any] = []
        for k, init in enumerate(outs):
            if init in self.fills:
                inits.append(None)
                init_consts.append(self.fills[init])
            elif init in self.empties:
                raise _unsupported(op, "a reduction whose accumulator starts undefined (tensor.empty)")
            else:
                operand_vals.append(init)
                operand_maps.append(out_maps[k])
                inits.append(len(operand_vals) - 1)
                init_consts.append(None)
        body.yields = list(yields)
        body = body.live()
        in_names = [self.name(v) for v in operand_vals]
        out_names = [self.define(r) for r in results]
        self.emit("generic", in_names, out_names, _generic_attrs(
            dims, iters, operand_maps + list(out_maps), body, ["seq"] * len(results), inits, init_consts), op)

    def broadcast(self, op: Any) -> None:
        x = op.operands[0]
        t_out = self.tensor_type(op.results[0].type, "broadcast")
        added = list(self.ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        in_map = tuple(("d", d) for d in range(len(t_out.shape)) if d not in added)
        body = Body()
        body.yields = [body.add(Node("arg", (), t_out.dtype, 0))]
        rank = len(t_out.shape)
        self.emit("generic", [self.name(x)], [self.define(op.results[0])], _generic_attrs(
            list(t_out.shape), ["parallel"] * rank, [in_map, _ident(rank)], body, [None], [None], [None]), op)

    def transpose(self, op: Any) -> None:
        x = op.operands[0]
        t_out = self.tensor_type(op.results[0].type, "transpose")
        perm = list(self.ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        rank = len(perm)
        # out[d0..dn] = in[...] with in axis perm[i] = out axis i.
        in_map = [None] * rank
        for i, p in enumerate(perm):
            in_map[p] = ("d", i)
        body = Body()
        body.yields = [body.add(Node("arg", (), t_out.dtype, 0))]
        self.emit("generic", [self.name(x)], [self.define(op.results[0])], _generic_attrs(
            list(t_out.shape), ["parallel"] * rank, [tuple(in_map), _ident(rank)], body, [None], [None], [None]), op)

    # -- named ops --------------------------------------------------------------------
    def with_init(self, kind: str, ins: list[str], attrs: dict[str, Any], op: Any, neutral: float,
                  combine: str) -> None:
        init = self.init_of(op.operands[len(ins)], neutral)
        if init is None:
            self.emit(kind, ins, [self.define(op.results[0])], attrs, op)
            return
        t = self.tensor_type(op.results[0].type, kind)
        tmp = self.fresh(t)
        self.emit(kind, ins, [tmp], attrs, op)
        body = Body()
        a, b = body.add(Node("arg", (), t.dtype, 0)), body.add(Node("arg", (), t.dtype, 1))
        body.yields = [body.add(Node(combine, (a, b), t.dtype))]
        rank = len(t.shape)
        self.emit("generic", [tmp, init], [self.define(op.results[0])], _generic_attrs(
            list(t.shape), ["parallel"] * rank, [_ident(rank)] * 3, body, [None], [None], [None]), op)

    def matmul(self, op: Any, kind: str) -> None:
        attrs = {"transpose_a": False, "transpose_b": False}
        if "indexing_maps" in op.attributes:
            maps = [self.affine_map(self.ir.AffineMapAttr(a).value, op)
                    for a in self.ir.ArrayAttr(op.attributes["indexing_maps"])]
            b = 1 if kind == "batch_matmul" else 0
            d = [("d", b + i) for i in range(3)]  # m, n, k
            batch = [("d", 0)] if b else []
            known = {tuple(batch + [d[0], d[2]]): ("transpose_a", False), tuple(batch + [d[2], d[0]]): ("transpose_a", True)}
            known_b = {tuple(batch + [d[2], d[1]]): False, tuple(batch + [d[1], d[2]]): True}
            if maps[0] not in known or maps[1] not in known_b or maps[2] != tuple(batch + [d[0], d[1]]):
                raise _unsupported(op, f"indexing maps {maps} are not a (transposed) matmul")
            attrs = {"transpose_a": known[maps[0]][1], "transpose_b": known_b[maps[1]]}
        ins = [self.name(v) for v in list(op.operands)[:2]]
        t = self.tensor_type(op.results[0].type, kind)
        self.with_init(kind, ins, attrs, op, 0.0, "addf" if t.dtype.startswith("f") else "addi")

    def _ints(self, op: Any, name: str, default: list[int]) -> list[int]:
        if name not in op.attributes:
            return default
        return [int(x) for x in self.ir.DenseIntElementsAttr(op.attributes[name])]

    def conv(self, op: Any, kind: str, layout: str) -> None:
        ins = [self.name(v) for v in list(op.operands)[:2]]
        attrs = {"layout": layout, "strides": self._ints(op, "strides", [1, 1]),
                 "dilations": self._ints(op, "dilations", [1, 1]), "pads": [0, 0, 0, 0], "pad_value": 0.0}
        self.with_init(kind, ins, attrs, op, 0.0, "addf")

    def pool(self, op: Any, mode: str, layout: str) -> None:
        window = self.tensor_type(op.operands[1].type, "pooling window").shape
        attrs = {"mode": mode, "layout": layout, "kernel": list(window),
                 "strides": self._ints(op, "strides", [1, 1]), "dilations": self._ints(op, "dilations", [1, 1]),
                 "pads": [0, 0, 0, 0], "pad_value": 0.0 if mode == "sum" else float("-inf")}
        neutral = 0.0 if mode == "sum" else float("-inf")
        init_v = op.operands[2]
        if mode == "max" and init_v in self.fills and float(self.fills[init_v]) <= -3.0e38:
            init = None  # the lowest finite float is as neutral as -inf for a max over a window
        else:
            init = self.init_of(init_v, neutral)
        self.with_init_value(init, [self.name(op.operands[0])], attrs, op, "addf" if mode == "sum" else "maximumf")

    def _predicate(self, op: Any) -> str | None:
        """A compare's predicate name (the Node value of cmpf / cmpi); None for other ops."""
        table = {"arith.cmpf": _CMPF, "arith.cmpi": _CMPI}.get(op.name)
        return table[self.ir.IntegerAttr(op.attributes["predicate"]).value] if table else None

    def region_body(self, op: Any, what: str) -> Body:
        """A TMTensor region (block arguments -> ``arg`` nodes 0, 1, ...) as a scalar body."""
        block = op.regions[0].blocks[0]
        body = Body()
        values: dict[Any, int] = {a: body.add(Node("arg", (), _dtype(a.type), i))
                                  for i, a in enumerate(block.arguments)}
        for inner in block.operations:
            inner = inner.operation
            if inner.name == "tm_tensor.yield":
                body.yields = [values[v] if v in values else self._region_const(v, inner) for v in inner.operands]
                continue
            if inner.name not in SCALAR_OPS or inner.name in ("tensor.extract", "linalg.index"):
                raise _unsupported(inner, f"inside a {what} region")
            res = inner.results[0]
            short = inner.name.split(".", 1)[1]
            if inner.name == "arith.constant":
                values[res] = body.add(Node("const", (), _dtype(res.type),
                                            self._scalar_value(inner.attributes["value"])))
                continue
            value = self._predicate(inner)
            args = []
            for v in inner.operands:
                args.append(values[v] if v in values else self._region_const(v, inner))
            values[res] = body.add(Node(short, tuple(args), _dtype(res.type), value))
        return body

    def _region_const(self, v: Any, op: Any) -> int:
        raise _unsupported(op, f"its region reads {v.get_name()} from outside")

    def scan(self, op: Any) -> None:
        """``tm_tensor.scan`` (CumSum): out[i] = body(out[i-1], in[i]) along ``dimension``."""
        ins = list(op.operands)
        x, init_out, init_acc = ins[0], ins[1], ins[2]
        if _has_uses(op.results[1]):
            raise _unsupported(op, "its final accumulator is read")
        if init_acc not in self.fills:
            raise _unsupported(op, "an accumulator that does not start as a constant")
        body = self.region_body(op, "scan")
        attrs = {"axis": self.ir.IntegerAttr(op.attributes["dimension"]).value,
                 "inclusive": bool(self.ir.BoolAttr(op.attributes["inclusive"]).value),
                 "init": self.fills[init_acc], "body": body}
        del init_out  # every element is written
        self.emit("scan", [self.name(x)], [self.define(op.results[0])], attrs, op)

    def sort(self, op: Any) -> None:
        """``tm_tensor.sort`` (TopK): a stable sort of every line along ``dimension`` by a
        one-compare comparator of the first operand; the other operands move with it."""
        body = self.region_body(op, "sort")
        ys = body.yields
        node = body.nodes[ys[0]] if len(ys) == 1 else None
        order = None
        if node is not None and node.op in ("cmpf", "cmpi") and node.args in ((0, 1), (1, 0)):
            desc = node.value in ("ogt", "oge", "ugt", "uge", "sgt", "sge")
            asc = node.value in ("olt", "ole", "ult", "ule", "slt", "sle")
            if desc or asc:
                order = "descending" if desc == (node.args == (0, 1)) else "ascending"
        if order is None:
            raise _unsupported(op, "a comparator other than one <, <=, > or >= of the first operand")
        dim = self.ir.IntegerAttr(op.attributes["dimension"]).value
        outs = [self.define(r) for r in op.results]
        self.emit("sort", [self.name(v) for v in op.operands], outs,
                  {"axis": dim, "order": order,
                   "unsigned": node.value.startswith("u") and node.op == "cmpi"}, op)

    def scatter(self, op: Any) -> None:
        """``tm_tensor.scatter``: for each update row i in order, out[indices[i]] = body(update, out)."""
        seg = list(self.ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"])) \
            if "operandSegmentSizes" in op.attributes else [2, 1]
        operands = list(op.operands)
        updates, indices, original = operands[0], operands[1], operands[seg[0]]
        body = self.region_body(op, "scatter")
        dim_map = list(self.ir.DenseI64ArrayAttr(op.attributes["dimension_map"]))
        self.emit("scatter", [self.name(updates), self.name(indices), self.name(original)],
                  [self.define(op.results[0])], {"dimension_map": dim_map, "body": body}, op)

    def pool3d(self, op: Any, mode: str) -> None:
        """A 3-D pool (NDHWC; LRN's channel window, 3-D average pools) as 2-D pools: one per depth
        offset of the window over a strided depth slice, then summed (or maxed) together."""
        x = self.name(op.operands[0])
        tx = self.g.types[x]
        kd, kh, kw = self.tensor_type(op.operands[1].type, "pooling window").shape
        sd, sh, sw = self._ints(op, "strides", [1, 1, 1])
        dd, dh, dw = self._ints(op, "dilations", [1, 1, 1])
        t_res = self.tensor_type(op.results[0].type, "result")
        n, d_out, ho, wo, c = t_res.shape
        _, _, h, w, _ = tx.shape
        neutral = 0.0 if mode == "sum" else float("-inf")
        combine = ("addf" if mode == "sum" else "maximumf") if tx.dtype.startswith("f") else \
            ("addi" if mode == "sum" else "maxsi")
        parts = []
        for i in range(kd):
            sl = self.fresh(TensorType((n, d_out, h, w, c), tx.dtype))
            self.emit("slice", [x], [sl], {"offsets": [0, i * dd, 0, 0, 0], "sizes": [n, d_out, h, w, c],
                                           "strides": [1, sd, 1, 1, 1]}, op)
            flat = self.fresh(TensorType((n * d_out, h, w, c), tx.dtype))
            self.emit("reshape", [sl], [flat], {}, op)
            pooled = self.fresh(TensorType((n * d_out, ho, wo, c), tx.dtype))
            self.emit("pool", [flat], [pooled], {"mode": mode, "layout": "nhwc", "kernel": [kh, kw],
                                                 "strides": [sh, sw], "dilations": [dh, dw], "pads": [0, 0, 0, 0],
                                                 "pad_value": neutral}, op)
            parts.append(pooled)
        init = op.operands[2]
        if not (init in self.empties or (init in self.fills and float(self.fills[init]) in (neutral, -3.4028234663852886e38))):
            parts.append(self.fresh(TensorType((n * d_out, ho, wo, c), tx.dtype)))
            self.emit("reshape", [self.name(init)], [parts[-1]], {}, op)
        acc = parts[0]
        for other in parts[1:]:
            body = Body()
            a, b = body.add(Node("arg", (), tx.dtype, 0)), body.add(Node("arg", (), tx.dtype, 1))
            body.yields = [body.add(Node(combine, (a, b), tx.dtype))]
            nxt = self.fresh(TensorType((n * d_out, ho, wo, c), tx.dtype))
            self.emit("generic", [acc, other], [nxt], _generic_attrs(
                [n * d_out, ho, wo, c], ["parallel"] * 4, [_ident(4)] * 3, body, [None], [None], [None]), op)
            acc = nxt
        self.emit("reshape", [acc], [self.define(op.results[0])], {}, op)

    def one_d(self, op: Any, n: str) -> None:
        """A 1-D conv or pool as the 2-D op over a height of 1, between two reshapes (views)."""
        def lifted(v: Any, axis: int, what: str) -> str:
            t = self.tensor_type(v.type, what)
            shape = list(t.shape)
            shape.insert(axis, 1)
            out = self.fresh(TensorType(tuple(shape), t.dtype))
            self.emit("reshape", [self.name(v)], [out], {}, op)
            return out

        strides = [1] + self._ints(op, "strides", [1])
        dilations = [1] + self._ints(op, "dilations", [1])
        t_res = self.tensor_type(op.results[0].type, "result")
        if n in _CONV1D:
            kind, layout, x_axis, w_axis = _CONV1D[n]
            ins = [lifted(op.operands[0], x_axis, "input"), lifted(op.operands[1], w_axis, "filter")]
            attrs = {"layout": layout, "strides": strides, "dilations": dilations, "pads": [0, 0, 0, 0],
                     "pad_value": 0.0}
            neutral, combine, init_v = 0.0, "addf" if t_res.dtype.startswith("f") else "addi", op.operands[2]
        else:
            mode, layout, x_axis = _POOL1D[n]
            window = self.tensor_type(op.operands[1].type, "pooling window").shape
            ins = [lifted(op.operands[0], x_axis, "input")]
            kind = "pool"
            neutral = 0.0 if mode == "sum" else float("-inf")
            attrs = {"mode": mode, "layout": layout, "kernel": [1, *window], "strides": strides,
                     "dilations": dilations, "pads": [0, 0, 0, 0], "pad_value": neutral}
            combine, init_v = ("addf" if mode == "sum" else "maximumf"), op.operands[2]
        shape = list(t_res.shape)
        shape.insert(x_axis, 1)
        t4 = TensorType(tuple(shape), t_res.dtype)
        out4 = self.fresh(t4)
        self.emit(kind, ins, [out4], attrs, op)
        if kind == "pool" and mode == "max" and init_v in self.fills and float(self.fills[init_v]) <= -3.0e38:
            init = None
        else:
            init = self.init_of(init_v, neutral)
        if init is not None:
            init4 = self.fresh(t4)
            self.emit("reshape", [init], [init4], {}, op)
            body = Body()
            a, b = body.add(Node("arg", (), t4.dtype, 0)), body.add(Node("arg", (), t4.dtype, 1))
            body.yields = [body.add(Node(combine, (a, b), t4.dtype))]
            summed = self.fresh(t4)
            self.emit("generic", [out4, init4], [summed], _generic_attrs(
                list(t4.shape), ["parallel"] * 4, [_ident(4)] * 3, body, [None], [None], [None]), op)
            out4 = summed
        self.emit("reshape", [out4], [self.define(op.results[0])], {}, op)

    def with_init_value(self, init: str | None, ins: list[str], attrs: dict[str, Any], op: Any, combine: str) -> None:
        t = self.tensor_type(op.results[0].type, "pool")
        if init is None:
            self.emit("pool", ins, [self.define(op.results[0])], attrs, op)
            return
        tmp = self.fresh(t)
        self.emit("pool", ins, [tmp], attrs, op)
        body = Body()
        a, b = body.add(Node("arg", (), t.dtype, 0)), body.add(Node("arg", (), t.dtype, 1))
        body.yields = [body.add(Node(combine, (a, b), t.dtype))]
        rank = len(t.shape)
        self.emit("generic", [tmp, init], [self.define(op.results[0])], _generic_attrs(
            list(t.shape), ["parallel"] * rank, [_ident(rank)] * 3, body, [None], [None], [None]), op)

    def pad(self, op: Any) -> None:
        ir = self.ir
        dyn = iter(list(op.operands)[1:])
        sizes = []
        for attr in ("static_low", "static_high"):
            vals = []
            for v in ir.DenseI64ArrayAttr(op.attributes[attr]):
                if v < -(2 ** 62):  # computed from constants (shape arithmetic): known here
                    x = next(dyn)
                    if x not in self.scalars:
                        raise _unsupported(op, "padding known only at run time")
                    v = int(self.scalars[x][0])
                vals.append(int(v))
            sizes.append(vals)
        low, high = sizes
        src = self.name(op.operands[0])
        ts = self.g.types[src]
        out_t = TensorType(tuple(n + lo + hi for n, lo, hi in zip(ts.shape, low, high)), ts.dtype)
        rt = ir.RankedTensorType(op.results[0].type)
        static = all(not rt.is_dynamic_dim(i) for i in range(rt.rank))
        out = self.define(op.results[0]) if static else self.fresh(out_t)
        if not static:
            self.names[op.results[0]] = out
        block = op.regions[0].blocks[0]
        ops = [o.operation for o in block.operations]
        term = ops[-1]
        value = term.operands[0]
        if value in self.scalars:
            pad_value = self.scalars[value][0]
        elif len(ops) == 2 and ops[0].name == "arith.constant":
            pad_value = self._scalar_value(ops[0].attributes["value"])
        elif value in self.runtime_scalars and len(ops) == 1:
            # Padding with a run-time value (Pad's constant_value input): the value fills the
            # result, and the source is inserted into it.
            body = Body()
            vals: list[Any] = []
            maps: list[Any] = []
            body.yields = [self.materialize_scalar(value, body, vals, maps, {})]
            rank = len(out_t.shape)
            fill = self.fresh(out_t)
            self.emit("generic", [self.name(x) for x in vals], [fill], _generic_attrs(
                list(out_t.shape), ["parallel"] * rank, maps + [_ident(rank)], body, [None], [None], [None]), op)
            self.emit("insert_slice", [src, fill], [out], {"offsets": low, "sizes": list(ts.shape),
                                                           "strides": [1] * rank}, op)
            return
        else:
            raise _unsupported(op, "pad value is not a constant")
        self.emit("pad", [src], [out], {"low": low, "high": high, "value": pad_value}, op)

    def _static(self, op: Any, name: str) -> list[int]:
        vals = list(self.ir.DenseI64ArrayAttr(op.attributes[name]))
        if any(v < -(2 ** 62) for v in vals):
            raise _unsupported(op, "dynamic offsets, sizes or strides")
        return vals

    def extract_slice(self, op: Any) -> None:
        operands = list(op.operands)
        if len(operands) == 1:
            offsets, sizes = self._static(op, "static_offsets"), self._static(op, "static_sizes")
            strides = self._static(op, "static_strides")
        else:
            # Offsets and sizes computed from constants (shape arithmetic the pipeline did not fold).
            dyn = iter(operands[1:])
            lists = []
            for attr in ("static_offsets", "static_sizes", "static_strides"):
                vals = []
                for v in self.ir.DenseI64ArrayAttr(op.attributes[attr]):
                    if v < -(2 ** 62):
                        x = next(dyn)
                        if x not in self.scalars:
                            raise _unsupported(op, "offsets, sizes or strides known only at run time")
                        v = int(self.scalars[x][0])
                    vals.append(int(v))
                lists.append(vals)
            offsets, sizes, strides = lists
        src = self.name(op.operands[0])
        rt = self.ir.RankedTensorType(op.results[0].type)
        if all(not rt.is_dynamic_dim(i) for i in range(rt.rank)):
            out = self.define(op.results[0])  # its own type: the result may drop unit dims
        else:
            out = self.fresh(TensorType(tuple(sizes), self.g.types[src].dtype))
            self.names[op.results[0]] = out
        self.emit("slice", [src], [out], {"offsets": offsets, "sizes": sizes, "strides": strides}, op)

    def scalar_extract(self, op: Any) -> None:
        """``tensor.extract`` of a constant tensor at constant indices, outside any region: a scalar
        constant (shape arithmetic on constant shape tensors)."""
        src = op.operands[0]
        name = self.names.get(src)
        w = self.g.weights.get(name) if name else None
        idx = list(op.operands)[1:]
        if any(i not in self.scalars for i in idx):
            raise _unsupported(op, "a scalar read at indices known only at run time")
        if w is None or w.data is None:
            # A run-time scalar (OneHot's on/off values): region bodies that read it gather it.
            self.runtime_scalars[op.results[0]] = ("extract", src, tuple(int(self.scalars[i][0]) for i in idx))
            return
        at = tuple(int(self.scalars[i][0]) for i in idx)
        value = np.asarray(w.data)[at] if at else np.asarray(w.data).reshape(())
        self.scalars[op.results[0]] = (value.item(), _dtype(op.results[0].type))

    def scalar_arith(self, op: Any) -> None:
        """arith / math on scalar constants outside any region: evaluated here, as the kernels would."""
        from halbench.kernels.ops.generic import _eval_nodes

        short = op.name.split(".", 1)[1]
        res = op.results[0]
        if op.name == "arith.constant":
            self.constant(op)
            return
        value = self._predicate(op)
        if any(v not in self.scalars for v in op.operands):
            if all(v in self.scalars or v in self.runtime_scalars for v in op.operands):
                # On a run-time scalar: kept as an expression, evaluated inside the bodies that read it.
                self.runtime_scalars[res] = ("op", short, _dtype(res.type), value, list(op.operands))
                return
            raise _unsupported(op, "scalar arithmetic on values known only at run time")
        nodes = [["const", [], self.scalars[v][1], self.scalars[v][0]] for v in op.operands]
        nodes.append([short, list(range(len(nodes))), _dtype(res.type), value])
        out = _eval_nodes(nodes, lambda k: None, lambda d: None, lambda k: None, [])[-1]
        self.scalars[res] = (np.asarray(out).item(), _dtype(res.type))

    def insert_slice(self, op: Any) -> None:
        if len(list(op.operands)) != 2:
            raise _unsupported(op, "dynamic offsets, sizes or strides")
        src, dest = op.operands[0], op.operands[1]
        attrs = {"offsets": self._static(op, "static_offsets"), "sizes": self._static(op, "static_sizes"),
                 "strides": self._static(op, "static_strides")}
        if dest in self.empties:
            attrs["dest_fill"] = None
            ins = [self.name(src)]
        elif dest in self.fills and dest not in self.names:
            attrs["dest_fill"] = self.fills[dest]
            ins = [self.name(src)]
        else:
            ins = [self.name(src), self.name(dest)]
        self.emit("insert_slice", ins, [self.define(op.results[0])], attrs, op)


def _has_uses(v: Any) -> bool:
    for _ in v.uses:
        return True
    return False


def _ident(rank: int) -> tuple[tuple[str, int], ...]:
    return tuple(("d", i) for i in range(rank))


def _reads_out(body: Body, i: int, out_nodes: dict[int, int]) -> bool:
    """Whether node ``i`` depends on an accumulator (an ``out`` node)."""
    accs = set(out_nodes.values())
    stack, seen = [i], set()
    while stack:
        j = stack.pop()
        if j in accs:
            return True
        if j not in seen:
            seen.add(j)
            stack.extend(body.nodes[j].args)
    return False


def _generic_attrs(dims: list[int], iters: list[str], maps: list[Any], body: Body, reduce: list[Any],
                   inits: list[Any], init_consts: list[Any]) -> dict[str, Any]:
    return {"dims": list(dims), "iterators": list(iters), "maps": list(maps), "body": body,
            "reduce": list(reduce), "inits": list(inits), "init_consts": list(init_consts)}


def parse_module(module: Any, *, input_names: list[str] | None = None,
                 output_names: list[str] | None = None, blobs: Mapping[str, Any] | None = None,
                 weight_names: Mapping[str, str] | None = None) -> Graph:
    """Build halbench IR from an ``iree.compiler.ir.Module`` in linalg on tensors.

    ``blobs`` maps dense resource names to their data (bytes or arrays); ``weight_names`` maps a
    resource name to the weight's user-facing name (the ONNX initializer's).
    """
    from iree.compiler import ir

    with module.context:
        return _Parser(ir, blobs or {}, weight_names or {}).parse(module, input_names, output_names)


#: The largest constant the compiler materialises (a splat expands to its full shape here);
#: HALBENCH_MAX_CONSTANT_BYTES raises it for a model that truly has one this large.
_MAX_CONSTANT = 4 << 30


def _check_constant_size(t: Any) -> None:
    import os

    limit = int(os.environ.get("HALBENCH_MAX_CONSTANT_BYTES", _MAX_CONSTANT))
    if t.nbytes > limit:
        raise CompileError(f"a constant of type {t} needs {t.nbytes / 2**30:.1f} GiB, more than the "
                           f"{limit / 2**30:.1f} GiB the compiler materialises (HALBENCH_MAX_CONSTANT_BYTES)")
