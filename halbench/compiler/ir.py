"""halbench IR: a graph of ops on statically shaped tensors, as small plain dataclasses.

Values are named by strings (``%3``, ``input``, ``conv1.w``); a :class:`Graph` maps every name
to its :class:`TensorType`. Ops are listed in execution order. Element-wise work lives in
``generic`` ops: operand indexing maps, iterator types and a region body kept as a
:class:`Body` — a list of scalar nodes in SSA order (one statement each, so a GPU template can
emit one line per node and the NumPy kernel one array expression per node).

An indexing map is a tuple of results, one per operand axis; each result is ``("d", i)``
(iteration dim ``i``) or ``("c", k)`` (the constant index ``k``). Captured tensors (read by
``tensor.extract`` in a body, e.g. an embedding table) have the map ``None``.

Everything here is JSON-friendly: :meth:`Body.to_json` and :meth:`Op.generic_attrs` are what
kernels receive.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from halbench.dtypes import itemsize

__all__ = [
    "GENERIC_KINDS",
    "NAMED_KINDS",
    "Body",
    "Graph",
    "IndexMap",
    "MapResult",
    "Node",
    "Op",
    "TensorType",
    "Weight",
    "is_identity",
    "merge_locs",
    "node_names",
]

MapResult = tuple[str, int]
IndexMap = tuple[MapResult, ...]

#: Op kinds whose semantics are in a region body.
GENERIC_KINDS = ("generic",)
#: Structured ops with fixed semantics (attrs carry their parameters).
NAMED_KINDS = ("conv2d", "depthwise_conv2d", "pool", "matmul", "batch_matmul", "pad", "concat",
               "slice", "insert_slice", "reshape", "copy", "scan", "sort", "scatter",
               "winograd_input", "winograd_output")


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * itemsize(self.dtype)

    def __str__(self) -> str:
        return "x".join(str(s) for s in self.shape) + ("x" if self.shape else "") + self.dtype


@dataclass(frozen=True)
class Node:
    """One scalar operation of a body: ``op`` over earlier nodes ``args``.

    ``op`` is ``arg`` (value = operand index), ``const`` (value = the number), ``index``
    (value = iteration dim), ``extract`` (value = captured operand index; args = indices), or an
    arith/math op name without its dialect (``addf``, ``exp``, ``cmpf`` with value = predicate).
    """

    op: str
    args: tuple[int, ...] = ()
    dtype: str = "f32"
    value: Any = None

    def to_json(self) -> list[Any]:
        return [self.op, list(self.args), self.dtype, self.value]


@dataclass
class Body:
    nodes: list[Node] = field(default_factory=list)
    yields: list[int] = field(default_factory=list)

    def add(self, node: Node) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1

    def to_json(self) -> dict[str, Any]:
        return {"nodes": [n.to_json() for n in self.nodes], "yields": list(self.yields)}

    def live(self) -> Body:
        """A copy without nodes the yields do not need (renumbered)."""
        need: set[int] = set()
        stack = list(self.yields)
        while stack:
            i = stack.pop()
            if i not in need:
                need.add(i)
                stack.extend(self.nodes[i].args)
        remap: dict[int, int] = {}
        out = Body()
        for i, n in enumerate(self.nodes):
            if i in need:
                remap[i] = out.add(Node(n.op, tuple(remap[a] for a in n.args), n.dtype, n.value))
        out.yields = [remap[y] for y in self.yields]
        return out

    def count_ops(self) -> int:
        """Arithmetic nodes (what flops count per iteration point)."""
        return sum(1 for n in self.nodes if n.op not in ("arg", "const", "index", "extract", "select")
                   and not n.op.startswith(("index_cast", "ext", "trunc", "bitcast")))


@dataclass
class Op:
    """One op. ``inputs``/``outputs`` are value names; ``attrs`` depend on ``kind``.

    generic attrs: ``dims`` (iteration sizes), ``iterators`` ("parallel"/"reduction"),
    ``maps`` (one per input, then one per output), ``body`` (:class:`Body`), ``reduce`` (per
    output: None or add/max/min/mul), ``inits`` (per output: input index of the initial value,
    or None), ``init_consts`` (per output: a constant initial value, or None).
    """

    kind: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    loc: str = ""

    def clone(self) -> Op:
        return Op(self.kind, list(self.inputs), list(self.outputs), copy.deepcopy(self.attrs), self.loc)

    def generic_attrs(self) -> dict[str, Any]:
        """The JSON a generic kernel needs."""
        a = self.attrs
        return {"dims": list(a["dims"]), "iterators": list(a["iterators"]),
                "maps": [None if m is None else [list(r) for r in m] for m in a["maps"]],
                "body": a["body"].to_json(), "reduce": list(a["reduce"]),
                "inits": list(a["inits"]), "init_consts": list(a["init_consts"])}


@dataclass
class Weight:
    """A constant tensor: its data, or None when only declared (random weights)."""

    name: str
    type: TensorType
    data: np.ndarray | None = None
    #: the f32 weight this one is a compile-time rounding of (passes/convert_weights.py), or None
    source: Weight | None = None
    #: (transform, weight) where this one is a bundle.weights.TRANSFORMS transform of another
    #: (passes/winograd.py): a bundle declares it random when that weight is
    derived: tuple[str, Weight] | None = None
    #: (op, weights, params) where the compiler made this one of others by moving or joining
    #: elements (passes/fold_constants.py: "map", passes/merge_gemms.py: "concat"): a bundle
    #: declares it random, by its derivation tree (bundle.weights.derive_values), when its
    #: sources are
    recipe: tuple[str, tuple[Weight, ...], dict[str, Any]] | None = None
    #: "tf32" where the values are f32 rounded to nearest even to tf32 (passes/convert_weights.py):
    #: the tf32 GEMMs reading it take them as they are, without rounding them again
    rounded: str | None = None


@dataclass
class Graph:
    types: dict[str, TensorType] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    #: (user-facing name, value name) of every function input / output, in order.
    inputs: list[tuple[str, str]] = field(default_factory=list)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    weights: dict[str, Weight] = field(default_factory=dict)
    #: value -> the value it is a view of (a reshape of the same bytes).
    views: dict[str, str] = field(default_factory=dict)
    name: str = "main"
    #: After buffer assignment: value -> (storage, offset in bytes); storage is ``input:NAME``,
    #: ``output:NAME``, ``weight:NAME`` or ``transient``.
    storage: dict[str, tuple[str, int]] = field(default_factory=dict)
    transient_nbytes: int = 0
    #: After cost: per dispatch op index, (flops, bytes).
    costs: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: Function input/output value -> the element type users see, where the model declares one
    #: the linalg types lost (``u8`` for a signless ``i8``: same bytes, its signedness kept).
    io_dtypes: dict[str, str] = field(default_factory=dict)

    def copy(self) -> Graph:
        return Graph(dict(self.types), [op.clone() for op in self.ops], list(self.inputs),
                     list(self.outputs), dict(self.weights), dict(self.views), self.name,
                     dict(self.storage), self.transient_nbytes, dict(self.costs), dict(self.io_dtypes))

    def producers(self) -> dict[str, int]:
        return {v: i for i, op in enumerate(self.ops) for v in op.outputs}

    def uses(self) -> dict[str, int]:
        """How many times each value is read (by ops, views and function outputs)."""
        n: dict[str, int] = {}
        for op in self.ops:
            for v in op.inputs:
                n[v] = n.get(v, 0) + 1
        for src in self.views.values():
            n[src] = n.get(src, 0) + 1
        for _, v in self.outputs:
            n[v] = n.get(v, 0) + 1
        return n

    def root(self, v: str) -> str:
        """The value whose storage ``v`` views."""
        while v in self.views:
            v = self.views[v]
        return v

    def __str__(self) -> str:
        from halbench.compiler.printer import print_graph

        return print_graph(self)


def is_identity(m: IndexMap | None, rank: int) -> bool:
    return m is not None and len(m) == rank and all(r == ("d", i) for i, r in enumerate(m))


# A quoted name not followed by ":line" (that is a file location, from an MLIR source).
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"(?!:\d)')


def node_names(loc: str) -> list[str]:
    """The source (ONNX node) names in an op's location: the ONNX importer names each op's
    location after its node, lowering keeps it (``"conv_Conv"``, or ``fused["a", "b"]``)."""
    out: list[str] = []
    for name in _QUOTED.findall(loc or ""):
        if name and name not in out and not name.startswith("onnx_importer."):
            out.append(name)
    return out


def merge_locs(*locs: str) -> str:
    """One location naming every source node of ops fused into one, in order, each once."""
    names: list[str] = []
    for loc in locs:
        names += [n for n in node_names(loc) if n not in names]
    return ", ".join('"' + n.replace("\\", "\\\\").replace('"', '\\"') + '"' for n in names)
