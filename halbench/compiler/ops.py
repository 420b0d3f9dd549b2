"""What the compiler takes: linalg ops (what ``parse`` accepts; every backend generates code for
all of them) and ONNX ops, with the ONNX backend node tests each one passes per device.

The ONNX half is measured, not declared: ``onnx_support.json`` is written by
``scripts/onnx_conformance.py --op-table`` from conformance runs (local-sync://, vulkan:// on
lavapipe, and the GPU machine's cuda:// and vulkan:// where they ran), so it says what passes,
case by case, rather than what a pattern list claims.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["format_ops", "linalg_ops", "onnx_support"]


def linalg_ops() -> dict[str, list[str]]:
    from halbench.compiler.parse import _TOP_OPS, SCALAR_OPS

    return {"top-level": list(_TOP_OPS), "in regions": sorted(SCALAR_OPS)}


def onnx_support() -> dict[str, Any]:
    """``{"onnx": version, "devices": [...], "ops": {op: {device: [passed, cases]}}}``."""
    try:
        text = resources.files("halbench.compiler").joinpath("onnx_support.json").read_text()
    except (FileNotFoundError, OSError):
        return {"onnx": None, "devices": [], "ops": {}}
    return json.loads(text)


def format_ops(backend: str | None = None) -> str:
    lines = ["linalg ops (MLIR input; every backend: local, vulkan, cuda, hip, webgpu):"]
    for where, ops in linalg_ops().items():
        lines.append(f"  {where}: {', '.join(ops)}")
    sup = onnx_support()
    devices = [d for d in sup["devices"] if backend is None or backend in d]
    if not sup["ops"]:
        lines.append("ONNX ops: no conformance table in this installation")
        return "\n".join(lines)
    lines.append("")
    lines.append(f"ONNX ops (default domain), ONNX backend node tests passed / cases (onnx {sup['onnx']}):")
    width = max(len(op) for op in sup["ops"])
    lines.append("  " + "op".ljust(width) + "  " + "  ".join(d.ljust(14) for d in devices))
    for op, per in sorted(sup["ops"].items()):
        cells = []
        for d in devices:
            p = per.get(d)
            cells.append((f"{p[0]}/{p[1]}" + (" all" if p[0] == p[1] else "") if p else "-").ljust(14))
        lines.append("  " + op.ljust(width) + "  " + "  ".join(cells))
    return "\n".join(lines)
