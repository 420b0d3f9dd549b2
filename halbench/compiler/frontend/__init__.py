"""Importers: a model file -> an MLIR module in linalg on tensors (plus its constant data).

``load(path, input_shapes)`` picks the importer by file type: ``.onnx`` goes through IREE's ONNX
importer and torch-mlir's pipelines; ``.mlir`` is read as linalg on tensors (torch-dialect MLIR
is lowered first).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halbench.errors import CompileError, UserError

__all__ = ["Imported", "load", "preflight", "require_mlir"]


def require_mlir(what: str) -> None:
    """Raise a CompileError naming the way out where the MLIR bindings (iree-base-compiler,
    halbench's ``compiler`` extra) are not installed: a machine that only runs bundles has none."""
    try:
        import iree.compiler.ir  # noqa: F401
    except ImportError as e:
        raise CompileError(f"{what} needs the MLIR Python bindings of iree-base-compiler, which are not "
                           f"installed here ({e}): pip install 'halbench[compiler]', or compile on a machine "
                           "that has them and bring the bundle") from None


@dataclass
class Imported:
    """An MLIR module in linalg on tensors and what parse needs besides it."""

    module: Any
    input_names: list[str] | None = None
    output_names: list[str] | None = None
    #: dense resource name -> data (bytes or array)
    blobs: dict[str, Any] = field(default_factory=dict)
    #: dense resource name -> the user-facing weight name
    weight_names: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: input/output name -> the element type the model declares (where it has one)
    io_dtypes: dict[str, str] = field(default_factory=dict)
    #: what the importer changed on the way (an opset upgrade, expanded functions), for the user
    notes: list[str] = field(default_factory=list)
    #: appended to a later compile error: what the user can do about the model's inputs
    hint: str = ""
    #: weights="random" on an ONNX model: digest -> (dtype, seed) of its randomized initializers
    random_weights: dict[str, tuple[str, int]] | None = None


def preflight(path: str | Path) -> Path:
    """What ``load`` checks before it imports anything: the file exists and, for ONNX and MLIR,
    the MLIR bindings are installed (run by the caller of an isolated compile, in its own process,
    so that these stay one-line errors about this machine)."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"model file not found: {p}")
    if p.suffix.lower() in (".onnx", ".mlir", ".mlirbc"):
        require_mlir(f"importing {p.name}")
    return p


def load(path: str | Path, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
         input_values: Mapping[str, Any] | None = None, random_seed: int | None = None) -> Imported:
    p = preflight(path)
    suffix = p.suffix.lower()
    if suffix == ".onnx":
        from halbench.compiler.frontend.onnx import load_onnx

        return load_onnx(p, dict(input_shapes or {}), dict(input_values or {}), random_seed)
    if suffix in (".mlir", ".mlirbc"):
        from halbench.compiler.frontend.mlir import load_mlir

        if input_values:
            raise UserError("--freeze-input applies to ONNX models; in MLIR, make the value a constant")
        return load_mlir(p, dict(input_shapes or {}))
    raise UserError(f"cannot compile '{p.name}': expected an .onnx or .mlir file")
