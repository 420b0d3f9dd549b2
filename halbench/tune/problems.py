"""The GEMM problems a tuning run measures, and where they come from.

A problem (``bundle.manifest_schema.GemmProblemDoc``) is one matmul, batch matmul or conv2d
(implicit GEMM) with its shapes and attributes: enough to rebuild the op as a one-op halbench IR
graph, without an ONNX or MLIR front end (the GPU machine has none). Problems come from

- a bundle: every variant of a scalar f32 GEMM records its problem in the manifest;
- a problems file (``halbench tune X --save-problems FILE``): ``{"format":
  "halbench-gemm-problems", "version": 1, "problems": [...]}``, validated on reading;
- a model file (ONNX / MLIR), compiled here for the API first (needs the compiler's front end).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, ValidationError

from halbench.bundle.manifest_schema import GemmProblemDoc, _Strict
from halbench.errors import UserError

__all__ = ["ProblemsDoc", "build_graph", "gemm_dims", "load_problems", "reference", "write_problems"]

#: A problems file lists a few hundred problems at most; bigger files are refused unread.
MAX_PROBLEMS_BYTES = 4 << 20


class ProblemsDoc(_Strict):
    format: Literal["halbench-gemm-problems"] = "halbench-gemm-problems"
    version: Literal[1] = 1
    problems: Annotated[list[GemmProblemDoc], Field(max_length=10_000)]


def _key(p: GemmProblemDoc) -> str:
    from halbench.compiler.codegen.tuning import problem_key

    return problem_key(p.model_dump(exclude_none=True))


def _dedupe(problems: list[GemmProblemDoc]) -> dict[str, GemmProblemDoc]:
    """Problem key -> problem, first seen first; only f32 problems (the scalar GEMM's)."""
    out: dict[str, GemmProblemDoc] = {}
    for p in problems:
        if p.dtype == "f32":
            out.setdefault(_key(p), p)
    return out


def _from_bundle(path: Path) -> list[GemmProblemDoc]:
    from halbench.bundle import read_bundle

    b = read_bundle(path)
    return [GemmProblemDoc.model_validate(dict(v.gemm["problem"]))
            for e in b.manifest.executables for v in e.variants if v.gemm]


def _from_file(path: Path) -> list[GemmProblemDoc]:
    if path.stat().st_size > MAX_PROBLEMS_BYTES:
        raise UserError(f"{path} is over {MAX_PROBLEMS_BYTES >> 20} MiB: not a problems file")
    try:
        doc = json.loads(path.read_bytes())
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:
        raise UserError(f"{path} is not JSON ({str(e)[:80]}); write one with "
                        f"`halbench tune MODEL --save-problems {path.name}`") from None
    try:
        return list(ProblemsDoc.model_validate(doc).problems)
    except ValidationError as e:
        from halbench.validation import one_line

        raise UserError(one_line(e, f"problems file {path}")) from None


def _model_problems(path: str, opts: Any) -> list[dict[str, Any]]:
    """The GEMM problems of the model compiled with ``opts`` (in the child of run_isolated)."""
    from halbench.compiler.compile import compile_model

    cm = compile_model(path, opts)
    return [dict(v.gemm["problem"]) for e in cm.manifest.executables for v in e.variants if v.gemm]


def _from_model(path: Path, api: str, target: str | None, device_uri: str | None) -> list[GemmProblemDoc]:
    try:
        from halbench.compiler.compile import CompileOptions
        from halbench.compiler.isolate import run_isolated
    except ImportError as e:
        raise UserError(f"tuning from a model file needs the compiler's front end ({e}); compile the "
                        f"model elsewhere and give the .hbx, or a problems file") from None
    opts = CompileOptions(target_devices=(api,), weights="random", targets={api: target or "auto"},
                          target_device_uri=device_uri, tuning_cache="off")
    # in a child process, as `halbench compile`: a crash in the native front end is one line
    found = run_isolated(_model_problems, str(path), opts, what=path.name)
    return [GemmProblemDoc.model_validate(d) for d in found]


def load_problems(source: str | os.PathLike[str], api: str = "vulkan", target: str | None = None,
                  device_uri: str | None = None) -> dict[str, GemmProblemDoc]:
    """Problem key -> problem from a bundle (.hbx), a problems file (.json) or a model file."""
    p = Path(source)
    if not p.is_file():
        raise UserError(f"{source}: no such file (give a bundle .hbx, a problems .json, or a model)")
    if p.suffix == ".hbx":
        found = _from_bundle(p)
    elif p.suffix == ".json":
        found = _from_file(p)
    else:
        found = _from_model(p, api, target, device_uri)
    return _dedupe(found)


def write_problems(path: str | os.PathLike[str], problems: dict[str, GemmProblemDoc]) -> None:
    from halbench.files import atomic_write

    doc = ProblemsDoc(problems=list(problems.values()))
    atomic_write(path, json.dumps(doc.model_dump(exclude_none=True), indent=1) + "\n", what="problems file")


def build_graph(p: GemmProblemDoc) -> Any:
    """The problem as a one-op IR graph: inputs ``a`` and ``b``, output ``c`` (no front end)."""
    from halbench.compiler.ir import Graph, Op, TensorType

    attrs = p.attrs.model_dump(exclude_none=True)
    if p.kind == "conv2d":
        attrs.setdefault("strides", [1, 1])
        attrs.setdefault("dilations", [1, 1])
        attrs.setdefault("pads", [0, 0, 0, 0])
        attrs.setdefault("pad_value", 0.0)
        if "layout" not in attrs:
            raise UserError("a conv2d problem needs attrs.layout (nchw, ngchw, nhwc_hwcf or nhwc_fhwc)")
    else:
        attrs.setdefault("transpose_a", False)
        attrs.setdefault("transpose_b", False)
    g = Graph(name="gemm")
    g.types = {"a": TensorType(tuple(p.a), p.dtype), "b": TensorType(tuple(p.b), p.dtype),
               "c": TensorType(tuple(p.out), p.dtype)}
    g.ops = [Op(p.kind, ["a", "b"], ["c"], attrs)]
    g.inputs = [("a", "a"), ("b", "b")]
    g.outputs = [("c", "c")]
    _check_shapes(p, g)
    return g


def _check_shapes(p: GemmProblemDoc, g: Any) -> None:
    """The output shape must be the one the op computes: a wrong one would make kernels read
    and write out of the tensors' bounds."""
    for s in (p.a, p.b, p.out):
        if int(np.prod(s, dtype=np.int64)) > (1 << 28):
            raise UserError(f"problem {_key(p)}: a tensor of {s} is over 2^28 elements")
    want = _out_shape(p, p.attrs.model_dump(exclude_none=True))
    if tuple(want) != tuple(p.out):
        raise UserError(f"problem {_key(p)}: out is {list(p.out)} but the op computes {list(want)}")


def gemm_dims(p: GemmProblemDoc) -> tuple[int, int, int, int]:
    """(batch, M, N, K) as the GEMM kernel sees the problem."""
    from halbench.compiler.codegen.kernels import _gemm_dims

    g = build_graph(p)
    return _gemm_dims(g.ops[0], g)


def reference(p: GemmProblemDoc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The problem's result computed by the NumPy reference kernels."""
    attrs = p.attrs.model_dump(exclude_none=True)
    if p.kind == "conv2d":
        from halbench.kernels.ops.conv import conv2d

        attrs = {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "pad_value": 0.0, **attrs}
        return conv2d(attrs, [a, b])[0]
    from halbench.kernels.ops.matmul import matmul

    return matmul(attrs, [a, b])[0]


def _out_shape(p: GemmProblemDoc, attrs: dict[str, Any]) -> tuple[int, ...]:
    a, b = list(p.a), list(p.b)
    if p.kind in ("matmul", "batch_matmul"):
        shared = attrs.get("shared") if p.kind == "batch_matmul" else None
        rank = 3 if p.kind == "batch_matmul" else 2
        if len(a) != (2 if shared == "a" else rank) or len(b) != (2 if shared == "b" else rank):
            raise UserError(f"{p.kind} problem: a {a} and b {b} have the wrong rank")
        m, ka = (a[-1], a[-2]) if attrs.get("transpose_a") else (a[-2], a[-1])
        kb, n = (b[-1], b[-2]) if attrs.get("transpose_b") else (b[-2], b[-1])
        if ka != kb or (p.kind == "batch_matmul" and not shared and a[0] != b[0]):
            raise UserError(f"{p.kind} problem: a {a} and b {b} do not multiply")
        batch = b[0] if shared == "a" else a[0]
        return (batch, m, n) if p.kind == "batch_matmul" else (m, n)
    layout = attrs.get("layout", "nchw")
    st, dl = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    if len(st) != 2 or len(dl) != 2 or len(pads) != 4 or min(st + dl) < 1:
        raise UserError("conv2d problem: strides and dilations take 2 values >= 1, pads 4")
    rank = {"nchw": (4, 4), "ngchw": (5, 5), "nhwc_hwcf": (4, 4), "nhwc_fhwc": (4, 4)}[layout]
    if (len(a), len(b)) != rank:
        raise UserError(f"conv2d problem ({layout}): a {a} and b {b} have the wrong rank")
    if layout in ("nchw", "ngchw"):
        (h, w), (kh, kw), c, wc, f = a[-2:], b[-2:], a[-3], b[-3], b[-4]
    else:
        h, w, c = a[1], a[2], a[3]
        kh, kw, wc, f = (b[0], b[1], b[2], b[3]) if layout == "nhwc_hwcf" else (b[1], b[2], b[3], b[0])
    if c != wc:
        raise UserError(f"conv2d problem ({layout}): input channels {c} != filter channels {wc}")
    oh = (h + pads[0] + pads[2] - dl[0] * (kh - 1) - 1) // st[0] + 1
    ow = (w + pads[1] + pads[3] - dl[1] * (kw - 1) - 1) // st[1] + 1
    if oh < 1 or ow < 1:
        raise UserError(f"conv2d problem: the filter {kh}x{kw} does not fit the input {h}x{w}")
    if layout == "nchw":
        return (a[0], f, oh, ow)
    if layout == "ngchw":
        return (a[0], a[1], f, oh, ow)
    return (a[0], oh, ow, f)
