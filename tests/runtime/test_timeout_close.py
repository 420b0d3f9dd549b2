"""A run that times out on vulkan:// (lavapipe) is still executing: closing its module and the
device must not free the buffers under it (that was a segfault: VGG-19 at 224x224 past the
60 s default timeout). Run in a child process, so a crash is a failed test, not a dead run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("onnx")

_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    from halbench.compiler import CompileOptions, compile_model
    from halbench.drivers import create_device
    from halbench.errors import WaitTimeout
    from halbench.runtime.module import Module

    n, tmp = 2560, sys.argv[1]  # 26 MB operands: dedicated blocks, given back to the driver when freed
    f = TensorProto.FLOAT
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mm",
                          [helper.make_tensor_value_info("a", f, [n, n]), helper.make_tensor_value_info("b", f, [n, n])],
                          [helper.make_tensor_value_info("y", f, [n, n])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp + "/mm.onnx")
    compile_model(tmp + "/mm.onnx", CompileOptions(target_devices=("vulkan",))).write(tmp + "/mm.hbx")
    a = np.ones((n, n), np.float32)
    timeouts = 0
    with create_device("vulkan://") as dev:
        for _ in range(2):
            m = Module.load(tmp + "/mm.hbx", dev)
            try:
                m.invoke(None, [a, a], timeout_s=0.001)
            except WaitTimeout:
                timeouts += 1
            m.close()
            assert m.closed
            # new allocations written while the timed-out runs may still execute
            for b in [dev.allocate(64 << 20, "transient") for _ in range(2)]:
                b.write(np.zeros(16 << 20, np.float32))
    print("timeouts", timeouts)
""")


def test_close_after_a_timed_out_run_does_not_crash(tmp_path: Path) -> None:
    from tests.compiler.helpers import device_or_skip

    device_or_skip("vulkan://")
    pytest.importorskip("iree.compiler")
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path)], check=False, capture_output=True,
                       text=True, timeout=300, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, f"child exited {r.returncode}: {r.stderr[-2000:]}"
    assert "timeouts 2" in r.stdout  # the runs did time out: the case under test happened
