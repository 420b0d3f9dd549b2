"""Compile a model, run it on local-sync:// through the runtime, compare with onnxruntime."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import halbench.kernels.ops  # noqa: F401  (registers the hb.* kernels)
from halbench.compiler import CompileOptions, compile_model


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / (denom if denom else 1.0))


def onnx_reference(path: str | Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_local(bundle_path: str | Path, feeds: dict[str, np.ndarray] | list[np.ndarray],
              device: str = "local-sync://") -> list[np.ndarray]:
    from halbench.drivers import create_device
    from halbench.runtime.module import Module

    with create_device(device) as dev:
        m = Module.load(str(bundle_path), dev)
        try:
            return m.invoke(None, feeds)
        finally:
            m.close()


def compile_and_run(model_path: str | Path, feeds: dict[str, np.ndarray], tmp: Path,
                    **options: Any) -> tuple[list[np.ndarray], Any]:
    cm = compile_model(model_path, CompileOptions(**options))
    out = tmp / (Path(model_path).stem + ".hbx")
    cm.write(out)
    return run_local(out, feeds), cm


def device_or_skip(uri: str) -> str:
    """``uri`` when a device opens there; otherwise the test skips with the reason."""
    import pytest

    import halbench

    try:
        halbench.create_device(uri).close()
    except Exception as e:  # noqa: BLE001 - no such device here: skip with the reason
        pytest.skip(f"no {uri} device: {e}")
    return uri


def compile_for(api: str, path: Path, tmp: Path, **options: object) -> Path:
    """``path`` compiled for ``api`` and local (the oracle's variants) into ``tmp``."""
    from halbench.compiler import CompileOptions, compile_model

    bundle = tmp / (path.stem + ".hbx")
    compile_model(path, CompileOptions(target_devices=(api, "local"), **options)).write(bundle)
    return bundle


def forced_gemm_tuning(t: Any, d: Any, g: Any, cfg: Any) -> Any:
    """``t`` with ``cfg`` as the measured configuration of dispatch ``d``'s GEMM (its split set to
    what the rule reserves, so the forced tiles run wherever the schedule splits the GEMM)."""
    import dataclasses

    from halbench.compiler.codegen.kernels import gemm_split
    from halbench.compiler.codegen.tuning import config_problem, problem_key

    sp = gemm_split(d, g)
    if sp is not None:
        cfg = dataclasses.replace(cfg, split=sp.slices)
    key = problem_key(config_problem(d.attrs["root"], g.types))
    return dataclasses.replace(t, gemm_configs=((key, cfg),))


def same_bits_both_ways(compiled: dict[str, Any], feeds: dict[str, np.ndarray], ref: np.ndarray, tmp: Path,
                        uris: tuple[str, ...] = ("local-sync://", "vulkan://"), tol: float = 1e-5) -> None:
    """Each compiled module (name -> CompiledModule) run on each device matches ``ref`` (the
    model's first output) within ``tol``, and all of them give the same bits on a device: two
    schedules of the same kernels (an A/B of a scheduling pass) compute the same function."""
    outs: dict[tuple[str, str], np.ndarray] = {}
    for what, cm in compiled.items():
        bundle = tmp / f"{what.replace(' ', '_')}.hbx"
        cm.write(bundle)
        for uri in uris:
            y = run_local(bundle, feeds, uri)[0]
            assert y.shape == ref.shape and rel_err(y, ref) < tol, (what, uri, rel_err(y, ref))
            outs[what, uri] = y
    first = next(iter(compiled))
    for (what, uri), y in outs.items():
        assert np.array_equal(y, outs[first, uri]), (what, first, uri)
