"""``halbench run-module``: everything between the parsed options and the printed text.

Every check that can fail (bundle, function, inputs, outputs) runs before a device is created,
and output files are written only once the results exist, so a bad command leaves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from halbench.bundle import read_bundle
from halbench.errors import UserError
from halbench.runtime.inputs import check_inputs
from halbench.runtime.io import format_result, parse_input, write_npy
from halbench.runtime.module import Module

__all__ = ["parse_outputs", "run_module"]


def parse_outputs(specs: Sequence[str]) -> list[str | None]:
    """``--output`` values in result order: ``@FILE.npy`` (a path), ``-`` (print, ``None``),
    or empty (print too, as a placeholder to reach a later result)."""
    out: list[str | None] = []
    for s in specs:
        if s in ("", "-"):
            out.append(None)
        elif s.startswith("@") and s.endswith(".npy") and len(s) > 5:
            out.append(s[1:])
        else:
            raise UserError(f"malformed --output '{s}': use @FILE.npy to write a result to a NumPy file, "
                            f"or - to print it")
    return out


def run_module(device: str, module: str | os.PathLike[str], function: str | None,
               inputs: Sequence[str], outputs: Sequence[str] = (), max_elements: int = 1024,
               timeout_s: float = 60.0) -> str:
    """Run one function of a bundle and return what iree-run-module would print."""
    import halbench

    targets = parse_outputs(outputs)
    bundle = read_bundle(module)
    f = bundle.manifest.function(function)
    arrays = check_inputs(f, [parse_input(t) for t in inputs])
    if len(targets) > len(f.outputs):
        raise UserError(f"{len(targets)} --output given, but '{f.name}' has {len(f.outputs)} "
                        f"result{'s' if len(f.outputs) != 1 else ''}")
    with halbench.create_device(device) as dev, Module.load(bundle, dev) as m:
        results = m.invoke(f.name, arrays, timeout_s=timeout_s)
    lines = [f"EXEC @{f.name}"]
    for i, (spec, a) in enumerate(zip(f.outputs, results)):
        path = targets[i] if i < len(targets) else None
        if path is None:
            lines.append(format_result(i, a, spec.dtype, max_elements))
        else:
            write_npy(path, a)
            lines.append(f"result[{i}]: written to {path}")
    return "\n".join(lines)
