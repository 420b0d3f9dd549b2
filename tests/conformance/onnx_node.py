"""The ONNX backend node tests (shipped with the ``onnx`` package) as halbench conformance cases.

A *plain* case is one whose graph inputs and outputs are tensors and whose test data are NumPy
arrays of standard dtypes (no sequences, optionals, strings or float8/int4 TensorProtos): those
are the cases a compiler of dense tensor programs can be judged on.

The judge is the ONNX backend runner's: the same number of outputs, the same dtype, and
``np.testing.assert_allclose`` at the case's own ``rtol`` / ``atol``.

Used by ``tests/conformance/test_onnx_node.py`` (pytest) and ``scripts/onnx_conformance.py``
(all cases in crash-isolated workers, with a JSON summary; also judges IREE the same way).
"""

from __future__ import annotations

import functools
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

STD_DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64"])


@dataclass(frozen=True)
class Case:
    name: str
    model: Any  # onnx.ModelProto
    inputs: tuple[np.ndarray, ...]
    outputs: tuple[np.ndarray, ...]
    rtol: float
    atol: float

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.model.graph.input]


def _plain(c: Any) -> bool:
    import onnx

    if c.model is None or len(c.data_sets) != 1:
        return False
    g = c.model.graph
    if not all(v.type.HasField("tensor_type") for v in list(g.input) + list(g.output)):
        return False
    ins, outs = c.data_sets[0]
    for a in list(ins) + list(outs):
        if isinstance(a, onnx.TensorProto) or not isinstance(a, (np.ndarray, np.generic)):
            return False
        if str(np.asarray(a).dtype) not in STD_DTYPES:
            return False
    return True


@functools.lru_cache(maxsize=1)
def plain_cases() -> dict[str, Case]:
    """Every plain node test case of the installed ``onnx``, by name (generated in memory)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    out = {}
    for c in cases:
        if _plain(c):
            ins, outs = c.data_sets[0]
            out[c.name] = Case(c.name, c.model, tuple(np.asarray(a) for a in ins),
                               tuple(np.asarray(a) for a in outs), float(c.rtol), float(c.atol))
    return out


def judge(outputs: list[np.ndarray], refs: tuple[np.ndarray, ...], rtol: float, atol: float) -> str | None:
    """None when ``outputs`` match ``refs`` the way the ONNX backend runner checks; else why not."""
    if len(outputs) != len(refs):
        return f"{len(outputs)} outputs, expected {len(refs)}"
    for i, (o, r) in enumerate(zip(outputs, refs)):
        o = np.asarray(o)
        if o.dtype != r.dtype:
            return f"output {i} is {o.dtype}, expected {r.dtype}"
        if o.shape != r.shape:
            return f"output {i} has shape {o.shape}, expected {r.shape}"
        try:
            np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            detail = next((ln for ln in lines if ln.startswith("Mismatched")), lines[0] if lines else "")
            return f"output {i} differs: {detail}"
    return None


def frozen_inputs(case: Case) -> dict[str, np.ndarray]:
    """The case's inputs that are compile-time operands (shapes, axes, scales: what exporters
    store as initializers), frozen to the test's values as ``halbench compile --freeze-input``
    would; the same preparation is given to IREE when it is judged."""
    from halbench.compiler.frontend.onnx import compile_time_inputs

    names = set(compile_time_inputs(case.model))
    return {n: a for n, a in zip(case.input_names, case.inputs) if n in names}


def compile_case(case: Case, workdir: Path, apis: tuple[str, ...] = ("local",)) -> Path:
    """``case``'s model compiled for ``apis`` with the test data's shapes; the bundle's path."""
    import onnx

    from halbench.compiler import CompileOptions, compile_model

    model_path = workdir / f"{case.name}.onnx"
    onnx.save(case.model, str(model_path))
    frozen = frozen_inputs(case)
    shapes = {n: a.shape for n, a in zip(case.input_names, case.inputs) if n not in frozen}
    bundle = workdir / f"{case.name}.hbx"
    compile_model(model_path, CompileOptions(target_devices=apis, input_shapes=shapes,
                                             input_values=frozen)).write(bundle)
    return bundle


def run_bundle(bundle: Path, device: Any, case: Case) -> list[np.ndarray]:
    from halbench.runtime.module import Module

    frozen = frozen_inputs(case)
    feeds = [a for n, a in zip(case.input_names, case.inputs) if n not in frozen]
    m = Module.load(str(bundle), device)
    try:
        return m.invoke(None, feeds)
    finally:
        m.close()


def check_case(case: Case, device: Any, apis: tuple[str, ...] = ("local",),
               workdir: Path | None = None) -> tuple[str, str]:
    """(``pass`` | ``compile`` | ``run`` | ``wrong``, message) for ``case`` on ``device``."""
    import halbench.kernels.ops  # noqa: F401  (registers the local kernels)

    with tempfile.TemporaryDirectory(dir=workdir) as d:
        try:
            bundle = compile_case(case, Path(d), apis)
        except Exception as e:  # noqa: BLE001 - the status says where it failed
            return "compile", f"{type(e).__name__}: {_first_line(e)}"
        try:
            outs = run_bundle(bundle, device, case)
        except Exception as e:  # noqa: BLE001
            return "run", f"{type(e).__name__}: {_first_line(e)}"
    why = judge(outs, case.outputs, case.rtol, case.atol)
    return ("wrong", why) if why else ("pass", "")


def _first_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0][:400] if s else ""


def xfail_list(path: Path) -> dict[str, str]:
    """The checked-in expected failures: case name -> reason (``# ...`` comments ignored)."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition(" ")
        out[name] = reason.strip()
    return out

