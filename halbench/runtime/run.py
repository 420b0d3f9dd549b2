"""``halbench run-module``: everything between the parsed options and the printed text.

Every check that can fail (bundle, function, inputs, outputs) runs before a device is created,
and output files are written only once the results exist, so a bad command leaves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

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
               timeout_s: float = 60.0, *, expected: Sequence[str] = (),
               threshold: float = 1e-4, fmt: str = "text") -> tuple[str, bool]:
    """Run one function of a bundle; return what iree-run-module would print (``fmt="json"``: the
    same as a JSON document), and whether every ``expected`` result matched (IREE's
    ``--expected_output``; ``-`` skips a result)."""
    from halbench.drivers import create_device, select_device

    targets = parse_outputs(outputs)
    info = select_device(device)  # the driver and device exist (probed, nothing opened yet)
    bundle = read_bundle(module)
    f = bundle.manifest.function(function)
    arrays = check_inputs(f, [parse_input(t) for t in inputs])
    for what, n in (("--output", len(targets)), ("--expected_output", len(expected))):
        if n > len(f.outputs):
            raise UserError(f"{n} {what} given, but '{f.name}' has {len(f.outputs)} "
                            f"result{'s' if len(f.outputs) != 1 else ''}")
    wanted = [None if e in ("", "-") else parse_input(e) for e in expected]
    with create_device(info) as dev, Module.load(bundle, dev) as m:
        results = m.invoke(f.name, arrays, timeout_s=timeout_s)
    lines = [f"EXEC @{f.name}"]
    doc: dict = {"function": f.name, "device": info.uri, "results": []}
    for i, (spec, a) in enumerate(zip(f.outputs, results)):
        path = targets[i] if i < len(targets) else None
        if path is None:
            lines.append(format_result(i, a, spec.dtype, max_elements))
            doc["results"].append(_result_json(i, a, spec.dtype, max_elements))
        else:
            write_npy(path, a)
            lines.append(f"result[{i}]: written to {path}")
            doc["results"].append({"index": i, "shape": list(a.shape), "dtype": spec.dtype,
                                   "written_to": path})
    failures = [m for i, w in enumerate(wanted) if w is not None
                for m in [_mismatch(i, results[i], w, threshold)] if m]
    if wanted:
        lines.append(f"[FAILED] {'; '.join(failures)}" if failures
                     else "[SUCCESS] all function outputs matched their expected values.")
        doc["expected"] = {"matched": not failures, "failures": failures, "threshold": threshold}
    if fmt == "json":
        import json

        return json.dumps(doc, indent=2, allow_nan=False), not failures
    return "\n".join(lines), not failures


def _result_json(i: int, a: np.ndarray, dtype: str, max_elements: int) -> dict:
    """One printed result as JSON: shape, dtype and the first ``max_elements`` values (floats as
    numbers, NaN and infinities as the strings "nan", "inf", "-inf": JSON has none of them)."""
    flat = a.reshape(-1)[:max_elements]
    if np.issubdtype(flat.dtype, np.floating) or flat.dtype.kind == "V" or "bfloat16" in str(flat.dtype):
        vals = [v if np.isfinite(v) else str(v) for v in flat.astype(np.float64).tolist()]
    elif flat.dtype == np.bool_:
        vals = [bool(v) for v in flat.tolist()]
    else:
        vals = flat.tolist()
    return {"index": i, "shape": list(a.shape), "dtype": dtype, "values": vals,
            "elided": int(a.size) > max_elements}


def _mismatch(i: int, got: np.ndarray, want: np.ndarray, threshold: float) -> str | None:
    """Why result ``i`` does not match ``want`` (IREE's --expected_output), or None."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return (f"result[{i}]: expected {'x'.join(map(str, want.shape))} {want.dtype}, "
                f"got {'x'.join(map(str, got.shape))} {got.dtype}")
    if np.issubdtype(got.dtype, np.floating):
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        bad = ~(diff <= threshold) & ~(np.isnan(got) & np.isnan(want))
    else:
        bad = got != want
    if not bad.any():
        return None
    k = int(np.flatnonzero(bad)[0])
    return (f"result[{i}]: element {k} is {got.reshape(-1)[k].item()!r}, expected {want.reshape(-1)[k].item()!r} "
            f"({int(bad.sum())} of {bad.size} differ)")
