"""Generated GPU code never reads out of bounds: a gather at an index outside its table is
clamped on the device and reported by the runtime as one line naming the dispatch and the
index (the hardening issue's case: a one-node Gather of a 10x4 weight, indices 99999999 and 10).
The same bundle runs on every driver here; on the GPU machine `--gpu` adds cuda://."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
onnx = pytest.importorskip("onnx")
pytest.importorskip("iree.compiler")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    from halbench.compiler import CompileOptions, compile_model

    d = tmp_path_factory.mktemp("gather")
    w = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "w")
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    g = helper.make_graph([helper.make_node("Gather", ["w", "idx"], ["y"], axis=0)], "gather", [idx], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "gather.onnx")
    apis = ["local", "vulkan", "webgpu"] + (["cuda"] if os.environ.get("HALBENCH_GPU_TESTS") else [])
    out = d / "gather.hbx"
    compile_model(d / "gather.onnx", CompileOptions(target_devices=tuple(apis))).write(out)
    return out


def _devices() -> list[str]:
    from halbench.drivers import query_available_drivers

    up = {s.name for s in query_available_drivers() if s.available}
    return [f"{d}://" for d in ("local-sync", "vulkan", "webgpu", "cuda") if d in up]


@pytest.mark.parametrize("device", _devices())
@pytest.mark.parametrize("bad", ["99999999,0", "10,11", "-11,2"])
def test_out_of_range_gather_is_one_line_not_a_crash(bundle: Path, device: str, bad: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "halbench", "run-module", f"--device={device}", f"--module={bundle}",
                        f"--input=2xi64={bad}"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    # (ONNX wraps a negative index once: -11 in a table of 10 is -1 after it, still outside)
    expected = {"99999999,0": "99999999", "10,11": "index 1", "-11,2": "index -1"}[bad]
    assert "gathered at index" in r.stderr and expected in r.stderr, r.stderr
    # the module still works after the error: a good call returns the right rows
    good = subprocess.run([sys.executable, "-m", "halbench", "run-module", f"--device={device}",
                           f"--module={bundle}", "--input=2xi64=9,3"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert good.returncode == 0, good.stderr
    assert "[36 37 38 39][12 13 14 15]" in good.stdout


@pytest.mark.parametrize("device", [d for d in _devices() if not d.startswith("local")])
def test_the_status_is_cleared_after_an_error(bundle: Path, device: str) -> None:
    import halbench
    from halbench.errors import UserError
    from halbench.runtime import Module

    with halbench.create_device(device) as dev, Module.load(bundle, dev) as m:
        with pytest.raises(UserError, match="gathered at index 10"):
            m.invoke(None, [np.array([10, 0], np.int64)])
        (y,) = m.invoke(None, [np.array([1, 2], np.int64)])
        np.testing.assert_array_equal(y, np.arange(40, dtype=np.float32).reshape(10, 4)[[1, 2]])


@pytest.fixture(scope="module")
def scatter_bundle(tmp_path_factory) -> Path:
    """ScatterElements of 2 rows of updates into a 10x4 input at run-time row indices."""
    from onnx import TensorProto, helper

    from halbench.compiler import CompileOptions, compile_model

    d = tmp_path_factory.mktemp("scatter")
    vi = helper.make_tensor_value_info
    g = helper.make_graph(
        [helper.make_node("ScatterElements", ["x", "idx", "u"], ["y"], axis=0)], "scatter",
        [vi("x", TensorProto.FLOAT, [10, 4]), vi("idx", TensorProto.INT64, [2, 4]),
         vi("u", TensorProto.FLOAT, [2, 4])], [vi("y", TensorProto.FLOAT, [10, 4])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "scatter.onnx")
    apis = ["local", "vulkan", "webgpu"] + (["cuda"] if os.environ.get("HALBENCH_GPU_TESTS") else [])
    out = d / "scatter.hbx"
    compile_model(d / "scatter.onnx", CompileOptions(target_devices=tuple(apis))).write(out)
    return out


@pytest.mark.parametrize("device", _devices())
def test_out_of_range_scatter_is_one_error_and_writes_nothing_out_of_bounds(scatter_bundle: Path,
                                                                             device: str) -> None:
    import halbench
    from halbench.errors import HalbenchError
    from halbench.runtime import Module

    x = np.arange(40, dtype=np.float32).reshape(10, 4)
    u = -np.ones((2, 4), np.float32)
    with halbench.create_device(device) as dev, Module.load(scatter_bundle, dev) as m:
        bad = np.array([[1, 1, 1, 1], [12, 0, 0, 0]], np.int64)
        with pytest.raises(HalbenchError, match="scatter") as e:
            m.invoke(None, [x, bad, u])
        assert "12" in str(e.value) and "\n" not in str(e.value)
        # the status is cleared: a good call afterwards returns the sequential result
        good = np.array([[1, 1, 1, 1], [3, 0, 3, 0]], np.int64)
        (y,) = m.invoke(None, [x, good, u])
        want = x.copy()
        for i in range(2):
            for j in range(4):
                want[good[i, j], j] = u[i, j]
        np.testing.assert_array_equal(y, want)
