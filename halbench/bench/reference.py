"""What every runtime of a model benchmark shares: the model file, the inputs, the reference.

The model file is the benchmark's ONNX file; with ``weights: random`` it is that file with its
float initializers randomized exactly as the compiler randomizes them
(``bundle.weights.randomize_onnx``), so halbench's bundle and every peer compute one function.
The reference is onnxruntime's CPU execution provider on that file when onnxruntime is
installed, independent of halbench's importer and passes; otherwise the bundle's own
``local-v1`` kernels on local-sync:// (which share halbench's compiler, so a pass bug would be
wrong in both). Results say which (``correctness.reference``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from halbench.tools import cache_dir

__all__ = ["ORT_REFERENCE", "ModelContext", "compare_outputs", "model_context"]

ORT_REFERENCE = "onnxruntime-cpu"
LOCAL_REFERENCE = "local-sync"


@dataclass
class ModelContext:
    """The shared part of one model benchmark (one per benchmark and run)."""

    path: Path | None  # the ONNX file every runtime runs; None for an MLIR model
    names: list[str] = field(default_factory=list)  # the graph's inputs, in order
    inputs: list[np.ndarray] = field(default_factory=list)
    reference: list[np.ndarray] | None = None  # onnxruntime's outputs
    reference_name: str = LOCAL_REFERENCE
    #: why onnxruntime is not the reference (not installed, failed on the model)
    reference_note: str | None = None
    #: halbench's local-sync outputs, once a halbench run computed them (the fallback reference)
    local: list[np.ndarray] | None = None

    def input_map(self) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.inputs))


_contexts: dict[str, ModelContext] = {}


def _key(params: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in params.items()))


def model_context(params: dict[str, Any]) -> ModelContext:
    """The model file, inputs and reference outputs of a model benchmark (computed once)."""
    k = _key(params)
    if k not in _contexts:
        try:
            _contexts[k] = _build(params)
        except ImportError as e:  # no onnx here (a machine that runs cached bundles only)
            _contexts[k] = ModelContext(None, reference_note=f"{e.name or e} is not installed")
    return _contexts[k]


def _build(params: dict[str, Any]) -> ModelContext:
    from halbench.bench.model_files import model_source
    from halbench.bundle.weights import RANDOM_SEED

    name, source_key, build = model_source(params)
    src = Path(build())
    if src.suffix.lower() != ".onnx":
        return ModelContext(None)
    import onnx

    weights = params.get("weights", "file")
    seed = RANDOM_SEED
    key = hashlib.sha256(f"{source_key}:{weights}:{seed}".encode()).hexdigest()
    path = src
    if weights == "random":
        path = cache_dir() / "peer-models" / f"{name}-{key[:16]}.onnx"
        if not path.exists():
            from halbench.bundle.weights import randomize_onnx
            from halbench.files import atomic_write

            m = onnx.load(str(src))
            randomize_onnx(m, seed)
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, m.SerializeToString(), "model file")
    side = Path(str(path) + ".key")
    if not side.exists() or side.read_text().strip() != key:
        side.write_text(key)
    model = onnx.load(str(path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    names = [i.name for i in graph_inputs]
    inputs = seeded_inputs(params, _onnx_specs(params, graph_inputs))
    ctx = ModelContext(path, names, inputs)
    ctx.reference, ctx.reference_note = _onnxruntime(path, names, inputs)
    if ctx.reference is not None:
        ctx.reference_name = ORT_REFERENCE
    return ctx


def seeded_inputs(params: dict[str, Any], specs: list[tuple[str, Any, Any]]) -> list[np.ndarray]:
    """THE inputs of a model benchmark, for halbench and every peer: a zoo model's own valid
    inputs; otherwise, per (name, shape, NumPy dtype), standard normal floats and 0/1 integers
    from one seed-0 generator, in order."""
    if "zoo" in params:
        from halbench.bench import zoo

        kw = {k: params[k] for k in ("batch", "seq") if k in params}
        arrays = zoo.make_inputs(params["zoo"], seed=0, **kw)
        if isinstance(arrays, dict):
            return [np.asarray(arrays[name]) for name, _, _ in specs]
        return [np.asarray(a) for a in arrays]
    rng = np.random.default_rng(0)
    out = []
    for _, shape, dt in specs:
        if np.issubdtype(dt, np.floating):
            out.append(rng.standard_normal(shape).astype(dt))
        else:
            out.append(rng.integers(0, 2, shape).astype(dt))
    return out


def _onnx_specs(params: dict[str, Any], graph_inputs: list[Any]) -> list[tuple[str, Any, Any]]:
    """(name, shape, dtype) of an ONNX graph's inputs; ``input_shapes`` fills dynamic dims."""
    from onnx.helper import tensor_dtype_to_np_dtype

    shapes = params.get("input_shapes") or {}
    out = []
    for i in graph_inputs:
        tt = i.type.tensor_type
        shape = shapes.get(i.name) or [d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim]
        out.append((i.name, tuple(shape), np.dtype(tensor_dtype_to_np_dtype(tt.elem_type))))
    return out


def onnxruntime_session(model: Any) -> Any:
    """onnxruntime's CPU session on ``model`` (a path or an onnx.ModelProto), unoptimised so that it
    computes the graph as written; an opset-6 file gets basic optimisation, which drops its
    inference Dropouts (onnxruntime has no Dropout-6 kernel)."""
    import onnx
    import onnxruntime as ort

    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    so = ort.SessionOptions()
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_BASIC if opset < 7
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    so.log_severity_level = 3
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def _onnxruntime(path: Path, names: list[str], inputs: list[np.ndarray]) -> tuple[Any, str | None]:
    if os.environ.get("HALBENCH_REFERENCE") == "local-sync":
        return None, "HALBENCH_REFERENCE=local-sync"
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None, "onnxruntime is not installed"
    try:
        sess = onnxruntime_session(path)
        return [np.asarray(o) for o in sess.run(None, dict(zip(names, inputs)))], None
    except Exception as e:  # noqa: BLE001 - ORT raises its own types
        return None, f"onnxruntime failed on the model: {str(e).splitlines()[0][:200]}"


def compare_outputs(outs: list[np.ndarray], reference: list[np.ndarray], tolerance: float,
                    reference_name: str) -> dict[str, Any]:
    """The correctness record: the worst relative L2 error (and absolute error) over the outputs."""
    worst_rel, worst_abs = 0.0, 0.0
    finite = len(outs) == len(reference)
    shapes_ok = finite
    for got, ref in zip(outs, reference):
        g = np.asarray(got).astype(np.float64)
        r = np.asarray(ref).astype(np.float64)
        if g.shape != r.shape:
            if g.size == r.size:
                g = g.reshape(r.shape)
            else:
                shapes_ok = False
                continue
        finite &= bool(np.all(np.isfinite(g)))
        denom = float(np.linalg.norm(r)) or 1.0
        worst_rel = max(worst_rel, float(np.linalg.norm(g - r)) / denom)
        worst_abs = max(worst_abs, float(np.max(np.abs(g - r))) if g.size else 0.0)
    d = {"checked": True, "passed": bool(finite and shapes_ok and worst_rel <= tolerance), "rel_error": worst_rel,
         "max_abs_error": worst_abs, "tolerance": tolerance, "reference": reference_name}
    if not shapes_ok:
        d["mismatch"] = f"{len(outs)} outputs of shapes {[tuple(np.shape(o)) for o in outs]}, reference " \
                        f"{[tuple(np.shape(r)) for r in reference]}"
    return d
