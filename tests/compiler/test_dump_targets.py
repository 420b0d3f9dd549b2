"""Device dumps and compiler targets: `dump-devices` names the --*-target to compile with, and
`compile --target DUMP.json` takes the file `dump-devices --format json` really writes (devices
nested under `drivers`), choosing a device by `--device URI` or the first GPU.

The dump is made here, from the real lavapipe device; the "other machine" dumps are that same
file with a device renamed (what an H100 machine's dump holds for it), so every field a real
probe writes is there.
"""

from __future__ import annotations

import copy
import json
import zipfile

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from halbench.cli import main
from halbench.compiler.targets import pick_dump_device, recommended_target, target_from_device
from halbench.errors import UserError


@pytest.fixture(scope="module")
def dump() -> dict:
    r = CliRunner().invoke(main, ["dump-devices", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    if not any(d["driver"] == "vulkan" for drv in doc["drivers"] for d in drv["devices"]):
        pytest.skip("no Vulkan device (lavapipe) here")
    return doc


def _vulkan(doc: dict) -> dict:
    return next(d for drv in doc["drivers"] if drv["name"] == "vulkan" for d in drv["devices"])


def _with_h100(doc: dict, driver: str = "vulkan") -> dict:
    """``doc`` plus an H100 as ``driver``'s device 1 (as the GPU machine's dump lists it)."""
    doc = copy.deepcopy(doc)
    drv = next(d for d in doc["drivers"] if d["name"] == driver)
    h100 = copy.deepcopy(_vulkan(doc))
    h100.update(driver=driver, ordinal=len(drv["devices"]), uri=f"{driver}://{len(drv['devices'])}")
    h100["identity"].update(name="NVIDIA H100 80GB HBM3", vendor="NVIDIA", vendor_id=0x10DE,
                            device_type="discrete-gpu", driver_id="NVIDIA_PROPRIETARY",
                            uuid="GPU-11111111-2222-3333-4444-555555555555")
    drv["devices"].append(h100)
    drv["available"] = True
    return doc


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> str:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path_factory.mktemp("model") / "relu.onnx"
    onnx.save(m, path)
    return str(path)


def _compiled_target(bundle) -> str:
    with zipfile.ZipFile(bundle) as z:
        manifest = json.loads(z.read("manifest.json"))
    return next(t["target"] for t in manifest["targets"] if t["device"] == "vulkan")


# -- dump-devices says what to compile with ----------------------------------------------------

def test_dump_devices_recommends_a_target_in_text_and_json(dump):
    assert _vulkan(dump)["compile_target"] == {"option": "--vulkan-target", "target": "llvmpipe",
                                               "flag": "--vulkan-target=llvmpipe"}
    r = CliRunner().invoke(main, ["dump-devices", "vulkan"])
    assert r.exit_code == 0, r.output
    assert "#   compile with: --vulkan-target=llvmpipe" in r.output.splitlines()
    # The CPU drivers take no target: no hint rather than a wrong one.
    local = [d for drv in dump["drivers"] if drv["name"].startswith("local") for d in drv["devices"]]
    assert local and all("compile_target" not in d for d in local)


def test_recommended_target_is_the_arch_for_cuda_and_the_entry_for_vulkan(dump):
    doc = _with_h100(dump)
    vk_h100 = next(d for d in doc["drivers"][0]["devices"] if "H100" in d["identity"]["name"])
    assert recommended_target(vk_h100)["flag"] == "--vulkan-target=h100"
    cuda_h100 = dict(copy.deepcopy(vk_h100), driver="cuda")
    cuda_h100["identity"]["arch"] = "sm_90"
    assert recommended_target(cuda_h100)["flag"] == "--cuda-target=sm_90"
    rocm = dict(copy.deepcopy(vk_h100), driver="hip")
    rocm["identity"].update(name="AMD Instinct MI100", arch="gfx908")
    assert recommended_target(rocm)["flag"] == "--hip-target=gfx908"


# -- compile --target DUMP.json ----------------------------------------------------------------

def test_compile_takes_a_real_dump(dump, model, tmp_path):
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    out = tmp_path / "m.hbx"
    r = CliRunner().invoke(main, ["compile", model, "--target-device", "vulkan", "--target", str(path),
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert _compiled_target(out) == "llvmpipe"
    # The recommended flag, pasted as printed, compiles to the same target.
    flag = _vulkan(dump)["compile_target"]["flag"]
    r = CliRunner().invoke(main, ["compile", model, "--target-device", "vulkan", flag, "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert _compiled_target(out) == "llvmpipe"


def test_the_first_gpu_or_the_device_named(dump, model, tmp_path):
    path = tmp_path / "gpu-machine.json"
    path.write_text(json.dumps(_with_h100(dump)))
    out = tmp_path / "m.hbx"
    base = ["compile", model, "--target-device", "vulkan", "-o", str(out)]
    r = CliRunner().invoke(main, [*base, "--vulkan-target", str(path)])
    assert r.exit_code == 0, r.output
    assert _compiled_target(out) == "h100"  # the first GPU, not lavapipe (a CPU device)
    r = CliRunner().invoke(main, [*base, "--target", str(path), "--device", "vulkan://0"])
    assert r.exit_code == 0, r.output
    assert _compiled_target(out) == "llvmpipe"
    r = CliRunner().invoke(main, [*base, "--target", str(path), "--device",
                                  "vulkan://GPU-11111111-2222-3333-4444-555555555555"])
    assert r.exit_code == 0, r.output
    assert _compiled_target(out) == "h100"
    r = CliRunner().invoke(main, [*base, "--target", str(path), "--device", "cuda://0"])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1 and "no device cuda://0" in r.output and "vulkan://1" in r.output


def test_a_dump_of_another_driver_serves_for_the_same_board(dump):
    doc = _with_h100(dump, driver="cuda")
    doc["drivers"] = [d for d in doc["drivers"] if d["name"] == "cuda"]
    assert target_from_device(doc, "vulkan").name == "h100"
    assert target_from_device(doc, "cuda").arch == "sm_90"
    with pytest.raises(UserError, match="no hip device"):
        target_from_device(doc, "hip")
    assert pick_dump_device(doc, "cuda")["identity"]["name"] == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "not a dump-devices JSON document"),
    ('{"drivers": []}', "holds no device"),
    ('{"drivers": [{"devices": [{"identity": {"name": "x"}, "features": {"cooperative_matrix": [1]}}]}]}',
     "malformed dump-devices JSON device"),
    ("{not json", "cannot read the device dump"),
])
def test_bad_dumps_are_one_line_errors(model, tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    r = CliRunner().invoke(main, ["compile", model, "--target-device", "vulkan", "--target", str(path),
                                  "-o", str(tmp_path / "m.hbx")])
    assert r.exit_code == 1 and message in r.output and r.output.count("\n") == 1, r.output


def test_the_annotated_dump_keeps_to_the_schema(dump):
    from tests.probe.test_render import SCHEMA, check

    assert check(dump, SCHEMA) == []
    broken = copy.deepcopy(dump)
    _vulkan(broken)["compile_target"]["extra"] = 1
    assert check(broken, SCHEMA)
