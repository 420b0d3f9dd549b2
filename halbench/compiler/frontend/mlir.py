"""MLIR text -> a module in linalg on tensors.

Weights in ``dense_resource`` constants live in the file's ``dialect_resources`` section,
which the Python bindings parse but cannot read back; they are read from the file's resource
section here (the blobs are hex strings whose first 4 bytes are the alignment).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from halbench.compiler.frontend import Imported
from halbench.errors import UserError

__all__ = ["TORCH_TO_LINALG", "load_mlir", "run_pipeline"]

#: torch dialect (from the ONNX importer) -> linalg on tensors.
TORCH_TO_LINALG = ("builtin.module(torch-onnx-to-torch-backend-pipeline,"
                   "torch-backend-to-linalg-on-tensors-backend-pipeline)")

_BLOB = re.compile(r'([A-Za-z_][\w.$-]*)\s*:\s*"0x([0-9A-Fa-f]*)"')


def resource_blobs(text: str) -> dict[str, bytes]:
    start = text.rfind("{-#")
    if start < 0:
        return {}
    out = {}
    for name, hexdata in _BLOB.findall(text[start:]):
        raw = bytes.fromhex(hexdata)
        out[name] = raw[4:]  # the leading 4 bytes are the blob's alignment
    return out


def run_pipeline(module: Any, pipeline: str, what: str) -> None:
    from iree.compiler.ir import MLIRError
    from iree.compiler.passmanager import PassManager

    from halbench.errors import CompileError

    with module.context:
        pm = PassManager.parse(pipeline)
        try:
            pm.run(module.operation)
        except MLIRError as e:
            first = str(e).strip().splitlines()
            raise CompileError(f"{what} failed: {' '.join(first[:3])}") from None


def load_mlir(path: Path, input_shapes: dict[str, tuple[int, ...]]) -> Imported:
    from iree.compiler import ir

    t0 = time.perf_counter()
    data = path.read_bytes()
    ctx = ir.Context()
    try:
        if path.suffix == ".mlirbc":
            module = ir.Module.parse(data, context=ctx)
            text = ""
        else:
            text = data.decode("utf-8")
            module = ir.Module.parse(text, context=ctx)
    except (ir.MLIRError, UnicodeDecodeError, ValueError) as e:
        msg = " ".join(str(e).split())[:300]
        raise UserError(f"{path.name} is not valid MLIR: {msg}") from None
    timings = {"parse_mlir": time.perf_counter() - t0}
    if "torch." in text and "!torch.vtensor" in text:
        t1 = time.perf_counter()
        run_pipeline(module, TORCH_TO_LINALG, "lowering torch to linalg")
        timings["torch_to_linalg"] = time.perf_counter() - t1
    if input_shapes:
        raise UserError("--input-shape applies to ONNX models; MLIR inputs carry their shapes in the function type")
    return Imported(module, blobs=resource_blobs(text), timings=timings)
