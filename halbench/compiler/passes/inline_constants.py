"""Read one-element weights (a Clip bound, a LayerNorm epsilon, a scale) as body constants.

Such a weight would otherwise cost a binding, a buffer and a load per element; as a ``const``
node a GPU template emits it as a literal.
"""

from __future__ import annotations

from halbench.compiler.ir import Body, Graph, Node, Op

__all__ = ["inline_constants"]


def _inline(op: Op, g: Graph) -> Op:
    a = op.attrs
    scalar = {i: g.weights[v].data.reshape(-1)[0].item() for i, v in enumerate(op.inputs)
              if v in g.weights and g.weights[v].data is not None and g.weights[v].type.size == 1
              and a["maps"][i] is not None and i not in a["inits"]}
    if not scalar:
        return op
    keep = [i for i in range(len(op.inputs)) if i not in scalar]
    renumber = {old: new for new, old in enumerate(keep)}
    body = Body()
    for n in a["body"].nodes:
        if n.op == "arg" and n.value in scalar:
            body.add(Node("const", (), n.dtype, scalar[n.value]))
        elif n.op in ("arg", "extract"):
            body.add(Node(n.op, n.args, n.dtype, renumber[n.value]))
        else:
            body.add(n)
    body.yields = list(a["body"].yields)
    attrs = dict(a)
    attrs.update(body=body, maps=[a["maps"][i] for i in keep] + a["maps"][len(op.inputs):],
                 inits=[None if k is None else renumber[k] for k in a["inits"]])
    return Op(op.kind, [op.inputs[i] for i in keep], list(op.outputs), attrs, op.loc)


def inline_constants(graph: Graph) -> Graph:
    g = graph.copy()
    g.ops = [_inline(op, g) if op.kind == "generic" else op for op in g.ops]
    return g
