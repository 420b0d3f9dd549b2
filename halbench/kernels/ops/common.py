"""What every ``hb.*`` kernel shares: bindings -> typed arrays, the root op, its epilogue.

Attrs of every dispatch (written by ``halbench/compiler/codegen/local.py``):

- ``operands``: one ``{"dtype", "shape"}`` per binding (inputs first, then outputs);
- ``num_inputs``: how many bindings are inputs;
- ``op``: the root op's own attrs; ``root_inputs``: binding index of each root operand;
- ``epilogue`` (optional): a generic (see ``generic.py``) applied to the root's result, with
  ``epilogue_inputs``: a binding index per operand, ``-1`` for the root's result;
- ``prologue`` (optional, the compiler's passes/fuse_depthwise.py): a depthwise convolution
  computed first, {``kernel`` (``hb.depthwise_conv2d``), ``op``, ``root_inputs``, optional
  ``epilogue`` / ``epilogue_inputs``} as above; the root reads its result as ``root_inputs`` -1.

Kernels register ``parallel=False``: each is called once with the whole dispatch and computes
it in a few large NumPy operations (exact, not fast).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from halbench.kernels.format import register_kernel
from halbench.kernels.ops.generic import _DT, eval_generic

__all__ = ["KERNELS", "binding_arrays", "dispatch_kernel"]

#: kernel name -> root function ``fn(op_attrs, inputs) -> list of arrays | None``
KERNELS: dict[str, Callable[..., Any]] = {}


def binding_arrays(bindings: Sequence[np.ndarray], operands: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
    out = []
    for b, o in zip(bindings, operands):
        dt = np.dtype(_DT[o["dtype"]]) if o["dtype"] != "bf16" else np.dtype(np.uint16)
        shape = tuple(int(s) for s in o["shape"])
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        out.append(b[:n].view(dt).reshape(shape))
    return out


def dispatch_kernel(name: str, root: Callable[[Mapping[str, Any], list[np.ndarray]], list[np.ndarray]]) -> None:
    """Register ``root`` (which computes the op's results) as local kernel ``name``."""

    def kernel(bindings: list[np.ndarray], constants: np.ndarray, attrs: Mapping[str, Any],
               workgroups: tuple[int, int, int], wg_range: range) -> None:
        arrays = binding_arrays(bindings, attrs["operands"])
        n_in = int(attrs["num_inputs"])
        outs = arrays[n_in:]
        pro = attrs.get("prologue")
        fused = _prologue(pro, arrays[:n_in]) if pro else None
        results = root(attrs["op"], [_operand(arrays[:n_in], i, fused) for i in attrs["root_inputs"]])
        ep = attrs.get("epilogue")
        if ep:
            ep_ins = [results[0] if i < 0 else arrays[i] for i in attrs["epilogue_inputs"]]
            eval_generic(ep, ep_ins, outs)
            return
        for o, r in zip(outs, results):
            if r is not o:
                o[...] = r

    KERNELS[name] = root
    register_kernel(name, kernel, parallel=False)


def _operand(inputs: list[np.ndarray], i: Any, fused: np.ndarray | None) -> np.ndarray:
    """Input binding ``i``, or (``-1``) the fused prologue's result; a bundle is untrusted, so
    any other index is a damaged bundle, not a read of some other array."""
    if isinstance(i, int) and not isinstance(i, bool):
        if 0 <= i < len(inputs):
            return inputs[i]
        if i == -1 and fused is not None:
            return fused
    raise ValueError(f"a dispatch reads operand {i!r}, which it does not have; the bundle is damaged: recompile it")


#: the kernels a fused prologue may run (passes/fuse_depthwise.py)
_PROLOGUE_KERNELS = ("hb.depthwise_conv2d",)


def _prologue(pro: Mapping[str, Any], inputs: list[np.ndarray]) -> np.ndarray:
    """A dispatch's fused prologue, computed whole first: its root, then its epilogue."""
    if pro.get("kernel") not in _PROLOGUE_KERNELS:
        raise ValueError(f"a fused prologue cannot run kernel {pro.get('kernel')!r}; the bundle is damaged: "
                         f"recompile it")
    r = KERNELS[pro["kernel"]](pro["op"], [_operand(inputs, i, None) for i in pro["root_inputs"]])[0]
    if pro.get("epilogue"):
        r = eval_generic(pro["epilogue"], [_operand(inputs, i, r) for i in pro["epilogue_inputs"]])[0]
    return r


def _generic(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    return eval_generic(op, ins)


dispatch_kernel("hb.generic", _generic)


def _row(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    """A fused softmax / layer norm: its member generics in order, exactly as the dispatches
    they replace (results of one member feed the next through reshaped views)."""
    values: dict[str, np.ndarray] = {}
    outs: dict[int, np.ndarray] = {}
    for m in op["members"]:
        args = [ins[r["binding"]] if "binding" in r else values[r["value"]].reshape(r["shape"])
                for r in m["inputs"]]
        for r, res in zip(m["outputs"], eval_generic(m["generic"], args)):
            values[r["value"]] = res
            if r["output"] >= 0:
                outs[r["output"]] = res
    return [outs[i] for i in range(len(outs))]


dispatch_kernel("hb.row", _row)


_ATTENTION_LINKS = ("hb.batch_matmul", "hb.generic", "hb.row")


def _attention(op: Mapping[str, Any], ins: list[np.ndarray]) -> list[np.ndarray]:
    """A fused attention block (the compiler's passes/fuse_attention.py): its links (Q·Kᵀ batch
    matmul, element-wise scale / mask, softmax row, P·V batch matmul) in order, exactly as the
    dispatches they replace; ``steps`` name each link's kernel, attrs and operands (a binding,
    or an earlier link's result seen through a reshape)."""
    values: dict[str, np.ndarray] = {}
    for st in op["steps"]:
        if st["kernel"] not in _ATTENTION_LINKS:  # a bundle is untrusted: no other kernel, no recursion
            raise ValueError(f"hb.attention: a link cannot run kernel '{st['kernel']}'")
        try:
            args = [ins[r["binding"]] if "binding" in r else values[r["value"]].reshape(r["shape"])
                    for r in st["inputs"]]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ValueError(f"hb.attention: a link reads an operand the block does not have ({e!r}); "
                             f"the bundle is damaged: recompile it") from None
        for name, res in zip(st["outputs"], KERNELS[st["kernel"]](st["op"], args)):
            values[name] = res
    return [values[op["result"]]]


dispatch_kernel("hb.attention", _attention)
