"""``local-v1`` executables: each dispatch names its ``hb.*`` NumPy kernel and carries, as JSON
attrs, everything that kernel needs (operand shapes and dtypes, the root op's parameters, the
body and maps of a generic or epilogue). The kernels live in ``halbench/kernels/ops``.
"""

from __future__ import annotations

from typing import Any

from halbench.compiler.codegen.variant import GpuVariant
from halbench.compiler.ir import Graph, Op
from halbench.hal import EntryPoint, ExecutableBinary
from halbench.kernels.format import local_binary

__all__ = ["dispatch_attrs", "kernel_name", "local_executable", "local_variant"]


def kernel_name(d: Op) -> str:
    root = d.attrs["root"]
    return "hb.generic" if root.kind == "generic" else f"hb.{root.kind}"


def _row_attrs(op: Op, g: Graph) -> dict[str, Any]:
    """A fused row dispatch (passes/fuse_rows.py): its member generics, each operand either a
    binding (an input of the dispatch) or the result of an earlier member seen through a view."""
    members = []
    for m in op.attrs["ops"]:
        ins = []
        for v in m.inputs:
            src = op.attrs["sources"].get(v)
            ins.append({"binding": op.inputs.index(v)} if src is None else
                       {"value": src, "shape": list(g.types[v].shape)})
        outs = [{"value": v, "output": op.outputs.index(v) if v in op.outputs else -1} for v in m.outputs]
        members.append({"generic": m.generic_attrs(), "inputs": ins, "outputs": outs})
    return {"members": members}


def _attention_attrs(op: Op, g: Graph) -> dict[str, Any]:
    """A fused attention dispatch (passes/fuse_attention.py): one step per link, each operand a
    binding of the dispatch or an earlier link's result (by the value it views) in its shape."""
    a = op.attrs

    def ref(v: str) -> dict[str, Any]:
        if v in op.inputs:
            return {"binding": op.inputs.index(v)}
        return {"value": g.root(v), "shape": list(g.types[v].shape)}

    def generic(p: Op) -> dict[str, Any]:
        return {"kernel": "hb.generic", "op": p.generic_attrs(), "inputs": [ref(v) for v in p.inputs],
                "outputs": list(p.outputs)}

    # transposes read through (passes/fuse_attention.py _absorb_transposes) run first
    steps = [generic(t) for t in (a.get("loads") or {}).values()]
    steps.append({"kernel": "hb.batch_matmul", "op": _op_attrs(a["qk"], g), "inputs": [ref(v) for v in a["qk"].inputs],
                  "outputs": list(a["qk"].outputs)})
    steps += [generic(p) for p in a["pre"]]
    row = a["row"]
    steps.append({"kernel": "hb.row", "op": _row_attrs(row, g), "inputs": [ref(v) for v in row.inputs],
                  "outputs": list(row.outputs)})
    steps.append({"kernel": "hb.batch_matmul", "op": _op_attrs(a["pv"], g), "inputs": [ref(v) for v in a["pv"].inputs],
                  "outputs": list(a["pv"].outputs)})
    if a.get("store") is not None:  # the transpose O is written through
        steps.append(generic(a["store"]))
    return {"steps": steps, "result": op.outputs[0]}


def _op_attrs(op: Op, g: Graph) -> dict[str, Any]:
    if op.kind == "generic":
        return op.generic_attrs()
    if op.kind == "row":
        return _row_attrs(op, g)
    if op.kind == "attention":
        return _attention_attrs(op, g)
    attrs = dict(op.attrs)
    if hasattr(attrs.get("body"), "to_json"):  # scan / scatter regions
        attrs["body"] = attrs["body"].to_json()
    attrs["out_shape"] = list(g.types[op.outputs[0]].shape)
    return attrs


def dispatch_attrs(d: Op, g: Graph) -> dict[str, Any]:
    """The kernel attrs of dispatch ``d`` (see ``halbench/kernels/ops/common.py``)."""
    root, ep = d.attrs["root"], d.attrs["epilogue"]
    pro = d.attrs.get("prologue")
    values = d.inputs + d.outputs
    attrs: dict[str, Any] = {
        "operands": [{"dtype": g.types[v].dtype, "shape": list(g.types[v].shape)} for v in values],
        "num_inputs": len(d.inputs),
        "op": _op_attrs(root, g),
        # -1: the fused prologue's result (passes/fuse_depthwise.py), which has no binding
        "root_inputs": [-1 if pro is not None and v == pro["value"] else d.inputs.index(v) for v in root.inputs],
    }
    if pro is not None:
        p_root, p_ep = pro["root"], pro["epilogue"]
        attrs["prologue"] = {"kernel": f"hb.{p_root.kind}", "op": _op_attrs(p_root, g),
                             "root_inputs": [d.inputs.index(v) for v in p_root.inputs]}
        if p_ep is not None:
            attrs["prologue"]["epilogue"] = p_ep.generic_attrs()
            attrs["prologue"]["epilogue_inputs"] = [-1 if v == p_root.outputs[0] else d.inputs.index(v)
                                                    for v in p_ep.inputs]
    if ep is not None:
        attrs["epilogue"] = ep.generic_attrs()
        attrs["epilogue_inputs"] = [-1 if v == root.outputs[0] else d.inputs.index(v) for v in ep.inputs]
    return attrs


def local_executable(d: Op, g: Graph) -> ExecutableBinary:
    # A gathering dispatch takes the status binding, and a split-K GEMM its scratch binding, on
    # every backend (the schedule binds them); the NumPy kernels need neither and leave them alone.
    from halbench.compiler.codegen.kernels import gemm_split, uses_extract

    n = len(d.inputs) + len(d.outputs) + uses_extract(d) + (gemm_split(d, g) is not None)
    ep = EntryPoint("main", bindings=n)
    return local_binary({"main": (kernel_name(d), dispatch_attrs(d, g), ep)}, target="host")


def local_variant(d: Op, g: Graph) -> GpuVariant:
    """The ``local-v1`` variant of dispatch ``d``: one call of its NumPy kernel."""
    b = local_executable(d, g)
    return GpuVariant(b.format, b.target, b.data, b.entries[0], (1, 1, 1), (), "", "json")
