"""Model benchmarks: a zoo model or a model file, compiled (cached), loaded, checked, timed.

The compile cache key covers the source model's bytes, the compile options and the sources of
the compiler itself, so a changed compiler never reuses a stale bundle. The correctness
reference is the same bundle's ``local-v1`` variants run on ``local-sync://``, on the same
inputs (and the same seeded weights).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from halbench.bench.model_files import compiler_fingerprint, model_source
from halbench.bench.suite import BenchmarkSpec
from halbench.tools import cache_dir

__all__ = ["PreparedModel", "compile_cached", "prepare_model"]



def _apis_for(info: Any) -> tuple[str, tuple[str, ...]]:
    """The compiler backend of a probed device, and the target devices of its bundle (that
    backend plus local, whose variants compute the reference)."""
    from halbench.compiler.backends import backend_for_driver

    api = backend_for_driver(info.driver).name
    return api, (api,) if api == "local" else (api, "local")


@dataclass
class _Sample:
    device_ms: float
    host_ms: float
    profile: Any


@dataclass
class PreparedModel:
    params: dict[str, Any]
    format: str
    compile_stats: dict[str, Any]
    module: Any
    inputs: list[np.ndarray]
    reference: list[np.ndarray]
    flops: float = 0.0
    bytes: float = 0.0
    items_per_run: int = 1
    dispatch_infos: list[dict[str, Any]] = field(default_factory=list)

    #: onnxruntime's outputs on the same model file (the independent reference), if any
    independent: list[np.ndarray] | None = None
    independent_name: str = "local-sync"
    reference_note: str | None = None
    #: the bundle's compile --precision (halbench.precision)
    precision: str = "fp32"

    def check(self, tolerance: float) -> dict[str, Any]:
        """halbench's outputs against the independent reference (onnxruntime) when there is one,
        else against local-sync; with onnxruntime, local-sync's own error is recorded too, so a
        compiler bug both share shows as wrong with a small local-sync-vs-halbench gap. The
        tolerance is ``tolerance`` or the bundle's precision's, whichever is looser; the record
        names the precision."""
        from halbench.bench.reference import compare_outputs
        from halbench.precision import tolerance as precision_tolerance

        outs = self.module.invoke(None, self.inputs)
        tolerance = precision_tolerance(self.precision, tolerance)
        if self.independent is None:
            d = compare_outputs(outs, self.reference, tolerance, "local-sync")
            if self.reference_note:
                d["reference_note"] = self.reference_note
            d["precision"] = self.precision
            return d
        d = compare_outputs(outs, self.independent, tolerance, self.independent_name)
        local = compare_outputs(self.reference, self.independent, tolerance, self.independent_name)
        d["local_sync_rel_error"] = local["rel_error"]
        d["local_sync_vs_halbench_rel_error"] = compare_outputs(outs, self.reference, tolerance,
                                                                "local-sync")["rel_error"]
        d["precision"] = self.precision
        return d

    def run(self) -> _Sample:
        """One run timed whole (no per-dispatch timestamps, where the driver can): a model's
        latency is measured the way PyTorch's CUDA-graph replay is, with events around it."""
        r = self.module.profile(None, self.inputs, runs=1, warmup=0, dispatch_times=False)
        return _Sample(r.total_ns[0] / 1e6, r.host_ns[0] / 1e6, r.profiles[0])

    def dispatch_profiles(self, runs: int) -> list[Any]:
        """``runs`` profiles with per-dispatch times, for the dispatch breakdown."""
        return list(self.module.profile(None, self.inputs, runs=max(int(runs), 1), warmup=1).profiles)


def target_name(info: Any, api: str) -> str | None:
    """The compiler target for a probed device, as a name of the target table (so that a
    bundle compiled elsewhere for ``h100`` is the one cached for an H100 here), or None for
    the safe default when the table does not know the device."""
    from halbench.compiler.backends import backend

    if backend(api).target_option is None:
        return None
    from halbench.compiler.targets import resolve_target, target_from_device
    from halbench.errors import HalbenchError

    try:
        name = target_from_device(info, api).name
        resolve_target(api, name)
    except HalbenchError:
        return None
    return name


def compile_cached(params: dict[str, Any], target_devices: tuple[str, ...], weights: str,
                   input_shapes: dict[str, Any] | None = None,
                   targets: dict[str, str | None] | None = None) -> tuple[Path, dict[str, Any]]:
    """Compile the benchmark's model for ``target_devices`` unless an identical bundle is cached
    (at the ``precision`` of ``params``, fp32 when it names none)."""
    from halbench.compiler.compile import CompileOptions, compile_to_file
    from halbench.compiler.isolate import run_isolated

    opts = CompileOptions(target_devices=target_devices, weights=weights, input_shapes=input_shapes or {},
                          targets={api: n for api, n in (targets or {}).items() if n},
                          precision=params.get("precision") or "fp32")
    name, source_key, build = model_source(params)
    key = hashlib.sha256((source_key + opts.cache_key() + compiler_fingerprint()).encode()).hexdigest()[:24]
    out = cache_dir() / "bundles" / f"{name}-{key}.hbx"
    if out.exists():
        return out, {"cached": True, "seconds": 0.0}
    t0 = time.perf_counter()
    source = build()
    out.parent.mkdir(parents=True, exist_ok=True)
    # In a child process: a crash in the native front end fails this benchmark with one line,
    # not the whole suite.
    r = run_isolated(compile_to_file, source, opts, out, what=Path(source).name)
    st, notes = r["statistics"], r["notes"]
    return out, {"cached": False, "seconds": time.perf_counter() - t0,
                 "dispatches": st.get("dispatches"), "executable_bytes": st.get("executable_bytes"),
                 "stages": st.get("stages_s", {}), **({"notes": notes} if notes else {})}


_reference_device: Any = None


def _reference() -> Any:
    global _reference_device
    import halbench

    if _reference_device is None or _reference_device.closed:
        _reference_device = halbench.create_device("local-sync://")
    return _reference_device


def _inputs(params: dict[str, Any], module: Any) -> list[np.ndarray]:
    from halbench.bench.reference import seeded_inputs
    from halbench.dtypes import to_numpy

    return seeded_inputs(params, [(s.name, s.shape, to_numpy(s.dtype)) for s in module.function(None).inputs])


def bundle_and_inputs(params: dict[str, Any], device: Any) -> tuple[Path, list[np.ndarray]]:
    """The (cached) bundle of a model benchmark for ``device`` and its seeded inputs."""
    from halbench.bundle import read_bundle

    target, targets = _apis_for(device.info)
    bundle, _ = compile_cached(params, targets, params.get("weights", "file"), params.get("input_shapes"),
                               {target: target_name(device.info, target)})

    class _Fn:  # _inputs needs only the function's input specs
        def __init__(self, b: Any) -> None:
            self.b = b

        def function(self, name: Any) -> Any:
            return self.b.manifest.function(name)

    return bundle, _inputs(params, _Fn(read_bundle(bundle)))


@contextmanager
def prepare_model(spec: BenchmarkSpec, device: Any) -> Iterator[PreparedModel]:
    """Compile (cached), load on ``device``, compute the local reference; yields a PreparedModel."""
    from halbench.runtime import Module

    p = dict(spec.params)
    target, targets = _apis_for(device.info)
    shapes = p.get("input_shapes")
    bundle, stats = compile_cached(p, targets, p.get("weights", "file"), shapes,
                                   {target: target_name(device.info, target)})
    stats["target"] = target_name(device.info, target) or "default"
    module = Module.load(bundle, device)
    try:
        from halbench.bench.reference import model_context

        ctx = model_context(p)
        if ctx.path is not None:  # the inputs every runtime gets, by name
            given = ctx.input_map()
            inputs = [given[s.name] for s in module.function(None).inputs]
        else:
            inputs = _inputs(p, module)
        with Module.load(bundle, _reference()) as ref_module:
            reference = ref_module.invoke(None, inputs)
        ctx.local = reference
        exe_formats = {module.variant(e.id).format for e in module.bundle.manifest.executables}
        f = module.function(None)
        pm = PreparedModel(params=p, format=",".join(sorted(exe_formats)), compile_stats=stats,
                           module=module, inputs=inputs, reference=reference, independent=ctx.reference,
                           independent_name=ctx.reference_name, reference_note=ctx.reference_note,
                           precision=str(module.bundle.manifest.options.get("precision") or "fp32"))
        pm.dispatch_infos = [{"name": s.name, "flops": s.flops, "bytes": s.bytes, "nodes": s.nodes}
                            for s in f.dispatches]
        pm.flops = float(sum(s.flops or 0 for s in f.dispatches))
        pm.bytes = float(sum(s.bytes or 0 for s in f.dispatches))
        pm.items_per_run = int(p.get("batch", 1))
        yield pm
    finally:
        module.close()
