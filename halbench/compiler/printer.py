"""The IR as readable text (``--dump-after``): one op per line, bodies indented below."""

from __future__ import annotations

from halbench.compiler.ir import Body, Graph, Op

__all__ = ["print_body", "print_graph", "print_op"]


def _map(m) -> str:
    if m is None:
        return "(extract)"
    return "(" + ", ".join(f"d{r[1]}" if r[0] == "d" else str(r[1]) for r in m) + ")"


def print_body(body: Body, indent: str) -> list[str]:
    lines = []
    for i, n in enumerate(body.nodes):
        if n.op == "arg":
            rhs = f"in{n.value}"
        elif n.op == "const":
            rhs = f"{n.value!r}"
        elif n.op == "index":
            rhs = f"index d{n.value}"
        elif n.op == "extract":
            rhs = f"in{n.value}[" + ", ".join(f"v{a}" for a in n.args) + "]"
        else:
            pred = f" {n.value}" if n.value is not None else ""
            rhs = f"{n.op}{pred} " + ", ".join(f"v{a}" for a in n.args)
        lines.append(f"{indent}v{i}: {n.dtype} = {rhs}")
    lines.append(f"{indent}yield " + ", ".join(f"v{y}" for y in body.yields))
    return lines


def print_op(op: Op, g: Graph, indent: str = "  ") -> list[str]:
    outs = ", ".join(f"{v}: {g.types[v]}" if v in g.types else v for v in op.outputs)
    ins = ", ".join(op.inputs)
    a = op.attrs
    if op.kind == "dispatch":
        lines = [f"{indent}{outs} = dispatch[{a['name']}]({ins})"]
        if a.get("prologue") is not None:  # passes/fuse_depthwise.py
            pro = a["prologue"]
            lines += [f"{indent}    prologue ({pro['value']}, computed where it is read):"]
            lines += print_op(pro["root"], g, indent + "    ")
            if pro["epilogue"] is not None:
                lines += print_op(pro["epilogue"], g, indent + "    ")
        lines += print_op(a["root"], g, indent + "    ")
        if a["epilogue"] is not None:
            lines += [f"{indent}    epilogue:"] + print_op(a["epilogue"], g, indent + "    ")
        return lines
    if op.kind == "generic":
        maps = ", ".join(_map(m) for m in a["maps"])
        red = [r for r in a["reduce"] if r]
        extra = f" reduce={a['reduce']} init={a['init_consts']}" if red else ""
        iters = "".join("r" if t == "reduction" else "p" for t in a["iterators"])
        lines = [f"{indent}{outs} = generic({ins}) dims={a['dims']} iters={iters} maps=[{maps}]{extra}"]
        return lines + print_body(a["body"], indent + "    ")
    if op.kind == "row":
        lines = [f"{indent}{outs} = row[{a['pattern']}]({ins}) rows={a['rows']} length={a['length']}"]
        for m in a["ops"]:
            lines += print_op(m, g, indent + "    ")
        return lines
    if op.kind == "attention":
        lines = [f"{indent}{outs} = attention({ins}) bh={a['bh']} m={a['m']} n={a['n']} dk={a['dk']} dv={a['dv']}"]
        for m in (a["qk"], *a["pre"], a["row"], a["pv"]):
            lines += print_op(m, g, indent + "    ")
        return lines
    shown = ", ".join(f"{k}={v}" for k, v in a.items())
    return [f"{indent}{outs} = {op.kind}({ins}) {{{shown}}}"]


def print_graph(g: Graph) -> str:
    ins = ", ".join(f"{v}: {g.types[v]}" for _, v in g.inputs)
    lines = [f"func @{g.name}({ins}) -> ({', '.join(f'{u}={v}' for u, v in g.outputs)})"]
    for name, w in g.weights.items():
        lines.append(f"  weight {name}: {w.type}")
    for v, src in g.views.items():
        lines.append(f"  view {v}: {g.types[v]} = {src}")
    for i, op in enumerate(g.ops):
        lines += print_op(op, g)
        if i in g.costs:
            lines.append(f"      # flops={g.costs[i][0]} bytes={g.costs[i][1]}")
    if g.storage:
        lines.append(f"  transient arena: {g.transient_nbytes} B")
        for v, (buf, off) in g.storage.items():
            if v in g.types and buf == "transient":
                lines.append(f"    {v} @ {off}")
    return "\n".join(lines)
