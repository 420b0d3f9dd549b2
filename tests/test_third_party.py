"""A third-party API plugs into both halves through entry points, with no edit to halbench:
its driver is listed by `list-drivers`, its backend gives `compile` a --toy-target option, its
format is known, and a bundle compiled for it runs through its driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A toy API: its device is the local CPU device, loading "toy-numpy-v1" executables (the local
# kernels under another format name), and its backend emits them.
TOY = textwrap.dedent('''
    from halbench.compiler.backends import CompilerBackend
    from halbench.compiler.codegen.local import local_variant
    from halbench.compiler.targets import Target
    from halbench.drivers.local import LocalSyncDriver
    from halbench.drivers.local.device import create_device as _local
    from halbench.hal import ExecutableBinary

    FORMAT = "toy-numpy-v1"
    TOY_TARGET = Target(name="toy-1", kind="generic", vendor="generic", apis=("toy",), arch="toy1")

    class ToyDriver(LocalSyncDriver):
        description = "a toy API for the plug-in test"
        formats = (FORMAT,)

        def query_available_devices(self):
            from halbench.probe.cpu import query_devices
            return query_devices("toy")

        def _open(self, info):
            dev = _local(LocalSyncDriver(), info)  # the local device, under the toy's own URI
            dev.formats = (FORMAT,)
            inner = dev._load_executable
            dev._load_executable = lambda b: inner(ExecutableBinary("local-v1", b.data, b.entries, b.target))
            return dev

    def _generate(d, g, target, options):
        v = local_variant(d, g)
        return [v.__class__(FORMAT, target.name, v.payload, v.entry, v.workgroups, (), "", "json")]

    BACKEND = CompilerBackend(name="toy", description="toy", drivers=("toy",), formats=(FORMAT,),
                              generate=_generate, target_option="toy-target",
                              default_target=lambda: TOY_TARGET, extra_targets=lambda: (TOY_TARGET,),
                              variant_targets=lambda t: [(FORMAT, t.name)])
''')


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("plugin")
    (d / "toyapi.py").write_text(TOY)
    info = d / "toyapi-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyapi\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[halbench.drivers]\ntoy = toyapi:ToyDriver\n\n"
                                           "[halbench.compiler_backends]\ntoy = toyapi:BACKEND\n")
    return d


def _halbench(plugin: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{plugin}{os.pathsep}{ROOT}"}
    return subprocess.run([sys.executable, "-m", "halbench", *args], capture_output=True, text=True,
                          env=env, timeout=300, cwd=cwd or ROOT)


def test_both_halves_register(plugin_path: Path) -> None:
    drivers = json.loads(_halbench(plugin_path, "list-drivers", "--format", "json").stdout)["drivers"]
    toy = next(d for d in drivers if d["name"] == "toy")
    assert toy["available"] and toy["device_count"] == 1
    help_text = _halbench(plugin_path, "compile", "--help").stdout
    assert "--toy-target" in help_text and "toy" in help_text.split("--target-device")[1].split("\n")[0]
    targets = json.loads(_halbench(plugin_path, "list-targets", "--api", "toy", "--format", "json").stdout)
    assert [t["name"] for t in targets["targets"]] == ["toy-1"]


def test_a_bundle_for_the_toy_api_runs_on_its_driver(plugin_path: Path, tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    out = tmp_path / "m.hbx"
    r = _halbench(plugin_path, "compile", str(model), "-o", str(out), "--target-device", "toy")
    assert r.returncode == 0, r.stderr
    r = _halbench(plugin_path, "run-module", "--device=toy://", f"--module={out}", "--input=2x3xf32=1")
    assert r.returncode == 0, r.stderr
    assert "2x3xf32" in r.stdout
    r = _halbench(plugin_path, "run-module", "--device=local-sync://", f"--module={out}", "--input=2x3xf32=1")
    assert r.returncode == 1 and "toy-numpy-v1" in r.stderr and "\n" not in r.stderr.strip()
