"""A bundle variant records the device features its code needs, and a device that lacks one
refuses the variant by name at load ("needs cooperativeMatrix") instead of failing inside
vkCreateComputePipelines with VK_ERROR_UNKNOWN.

Real parts: an f16 GEMM compiled for an RDNA3 target (cooperative matrix), loaded on lavapipe,
which has no cooperative matrix.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from halbench.cli import main
from halbench.compiler.backends.glslang import spirv_requirements
from halbench.errors import CompileError


def _lavapipe():
    import halbench

    try:
        dev = halbench.create_device("vulkan://")
    except Exception as e:  # noqa: BLE001 - no Vulkan here: skip with the reason
        pytest.skip(f"no Vulkan device: {e}")
    if dev.info.features.flags.get("cooperativeMatrix"):
        dev.close()
        pytest.skip(f"{dev.info.name} has cooperative matrix: nothing to refuse")
    return dev


@pytest.fixture(scope="module")
def gemm(tmp_path_factory):
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT16, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, [64, 64])
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 64)).astype(np.float16), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["a", "w"], ["y"])], "g", [a], [y], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("gemm") / "gemm_f16.onnx"
    onnx.save(m, path)
    return path


def _compile(model, out, target: str):
    r = CliRunner().invoke(main, ["compile", str(model), "--target-device", "vulkan",
                                  "--vulkan-target", target, "-o", str(out)])
    assert r.exit_code == 0, r.output
    with zipfile.ZipFile(out) as z:
        manifest = json.loads(z.read("manifest.json"))
    return [v for e in manifest["executables"] for v in e["variants"]]


def test_cooperative_matrix_bundle_is_refused_by_name(gemm, tmp_path):
    dev = _lavapipe()
    dev.close()
    variants = _compile(gemm, tmp_path / "rdna3.hbx", "rx7900xtx")
    assert variants and all("cooperativeMatrix" in v["requires"] for v in variants)
    r = CliRunner().invoke(main, ["run-module", "--device", "vulkan://", "--module", str(tmp_path / "rdna3.hbx"),
                                  "--input", "64x64xf16=1"])
    assert r.exit_code == 1
    assert "needs cooperativeMatrix" in r.output and "VK_ERROR" not in r.output
    assert r.output.count("\n") == 1, r.output  # one line, no traceback


def test_the_same_model_for_the_device_runs(gemm, tmp_path):
    from halbench.runtime.module import Module

    dev = _lavapipe()
    variants = _compile(gemm, tmp_path / "lvp.hbx", "llvmpipe")
    needs = {f for v in variants for f in v.get("requires", ())}
    assert "cooperativeMatrix" not in needs
    assert needs <= {k for k, v in dev.info.features.flags.items() if v}
    m = Module.load(str(tmp_path / "lvp.hbx"), dev)
    try:
        (out,) = m.invoke(None, {"a": np.ones((64, 64), np.float16)})
        assert out.shape == (64, 64) and np.all(np.isfinite(out))
    finally:
        m.close()
        dev.close()


def test_the_driver_names_every_missing_feature():
    dev = _lavapipe()
    try:
        why = dev.can_run("vulkan-spirv-descriptors-v1", "spirv1.6", ("shaderFloat16", "cooperativeMatrix"))
        assert why is not None and why.startswith("needs cooperativeMatrix,")
        assert dev.can_run("vulkan-spirv-descriptors-v1", "spirv1.6", ("shaderFloat16",)) is None
        # A feature the probe does not report is the driver's to judge, not a refusal.
        assert dev.can_run("vulkan-spirv-descriptors-v1", "spirv1.6", ("someFutureFeature",)) is None
    finally:
        dev.close()


def test_requirements_come_from_the_module_capabilities():
    from halbench.compiler.backends.glslang import compile_glsl

    src = """#version 460
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer B { float x[]; };
void main() { float16_t h = float16_t(x[0]); x[0] = float(h * h); }
"""
    assert spirv_requirements(compile_glsl(src, name="f16_caps")) == ("shaderFloat16",)
    with pytest.raises(CompileError, match="not a SPIR-V module"):
        spirv_requirements(b"\x03\x02\x23\x07")


@pytest.mark.parametrize("requires", [["cooperative matrix"], [1], ["x"] * 33, "cooperativeMatrix"])
def test_manifest_requires_is_validated(requires):
    d = {"format": "vulkan-spirv-descriptors-v1", "target": "spirv1.6", "member": "executables/0.0.spv",
         "entry": {"name": "main", "bindings": 1}, "workgroups": [1, 1, 1], "requires": requires}
    from pydantic import ValidationError

    from halbench.bundle.manifest import _variant
    from halbench.bundle.manifest_schema import VariantDoc

    with pytest.raises(ValidationError, match="requires"):
        VariantDoc.model_validate(d)
    d["requires"] = ["cooperativeMatrix"]
    assert _variant(VariantDoc.model_validate(d)).requires == ("cooperativeMatrix",)
