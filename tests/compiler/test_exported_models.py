"""ONNX files exported by PyTorch (tests/data/onnx), compiled for vulkan and local, run on
local-sync:// and on vulkan:// (lavapipe in CI), against onnxruntime: 1e-4 relative.

The files are the exporter's own output (scripts/export_torch_models.py), with the shape
arithmetic, Identity weights and folded BatchNorm that real files have.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.compiler.helpers import onnx_reference, rel_err, run_local
from tests.compiler.onnx_cases import _rand

pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")

TOLERANCE = 1e-4
DATA = Path(__file__).resolve().parent.parent / "data" / "onnx"
MODELS = sorted(p.stem for p in DATA.glob("*.onnx"))
DEVICES = ["local-sync://", "vulkan://"]

#: A compiled model: its bundle, its inputs and onnxruntime's outputs for them.
Compiled = tuple[Path, dict[str, np.ndarray], list[np.ndarray]]


def random_feeds(model: onnx.ModelProto, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Float inputs away from zero; integer inputs are token ids below the rows of the
    embedding (Gather) that reads them, never id 0."""
    rows = {n.input[1]: init.dims[0] for n in model.graph.node if n.op_type == "Gather"
            for init in model.graph.initializer if init.name == n.input[0]}
    feeds = {}
    for i in model.graph.input:
        t = i.type.tensor_type
        shape = tuple(d.dim_value for d in t.shape.dim)
        if t.elem_type == onnx.TensorProto.FLOAT:
            feeds[i.name] = _rand(rng, shape)
        else:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
            feeds[i.name] = rng.integers(1, rows[i.name], size=shape).astype(dtype)
    return feeds


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Compiled]:
    """name -> Compiled; each model is compiled once, for both devices."""
    from halbench.compiler import CompileOptions, compile_model

    tmp = tmp_path_factory.mktemp("exported")
    cache: dict[str, Compiled] = {}

    def get(name: str) -> Compiled:
        if name not in cache:
            path = DATA / f"{name}.onnx"
            feeds = random_feeds(onnx.load(path), np.random.default_rng(0))
            bundle = tmp / f"{name}.hbx"
            compile_model(path, CompileOptions(target_devices=("vulkan", "local"))).write(bundle)
            cache[name] = (bundle, feeds, onnx_reference(path, feeds))
        return cache[name]
    return get


def test_models_are_there() -> None:
    assert len(MODELS) >= 3, f"expected the exported models in {DATA}; see its README.md"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", MODELS)
def test_exported_model_matches_onnxruntime(name: str, device: str, compiled) -> None:
    if device.startswith("vulkan"):
        _require_vulkan()
    bundle, feeds, ref = compiled(name)
    out = run_local(bundle, feeds, device)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and np.isfinite(o).all()
        assert np.any(r != 0)
        assert rel_err(o, r) <= TOLERANCE, f"{name} on {device}: relative error {rel_err(o, r):.2e}"


def _require_vulkan() -> None:
    import halbench

    try:
        halbench.create_device("vulkan://").close()
    except Exception as e:  # noqa: BLE001 - no Vulkan here: skip with the reason
        pytest.skip(f"no Vulkan device: {e}")
