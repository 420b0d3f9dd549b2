"""Compiler targets: every naming scheme resolves, unknown names suggest, the table is
self-consistent, probed devices map to their entries, and `halbench list-targets` prints it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from halbench.cli import main
from halbench.compiler import targets as T
from halbench.compiler.targets import default_target, resolve_target, target_from_device
from halbench.errors import UserError
from halbench.probe.info import DeviceInfo, Features, Identity, Limits, MatrixShape

NVIDIA_ARCHS = ["sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a",
                "sm_100", "sm_120"]
AMD_ARCHS = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx942", "gfx950", "gfx1010", "gfx1030",
             "gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1200", "gfx1201"]
CODE_NAMES = {"pascal": "sm_60", "volta": "sm_70", "turing": "sm_75", "ampere": "sm_80", "ada": "sm_89",
              "hopper": "sm_90", "blackwell": "sm_100", "rdna1": "gfx1010", "rdna2": "gfx1030",
              "rdna3": "gfx1100", "rdna4": "gfx1201", "cdna1": "gfx908", "cdna2": "gfx90a",
              "cdna3": "gfx942", "cdna4": "gfx950", "valhall1": "valhall1", "valhall4": "valhall4",
              "adreno": "adreno"}
PRODUCTS = {"p100": "sm_60", "v100": "sm_70", "t4": "sm_75", "a100": "sm_80", "a10": "sm_86",
            "l4": "sm_89", "rtx2070super": "sm_75", "rtx3080ti": "sm_86", "rtx3090": "sm_86",
            "rtx4090": "sm_89", "h100": "sm_90", "h200": "sm_90", "rx7900xtx": "gfx1100",
            "rx7900xt": "gfx1100", "w7900": "gfx1100", "rx9070xt": "gfx1201", "mi210": "gfx90a",
            "mi250x": "gfx90a", "mi300x": "gfx942", "mali-g57": "valhall1", "mali-g68": "valhall2",
            "mali-g77": "valhall1", "mali-g78": "valhall2", "mali-g710": "valhall3",
            "mali-g715": "valhall4", "mali-g720": "valhall4",
            # IREE's Vulkan guide's AMD products and its ROCm guide's Instinct boards.
            "rx7700xt": "gfx1101", "rx7800xt": "gfx1101", "rx9060xt": "gfx1200", "rx9070": "gfx1201",
            "mi25": "gfx900", "mi50": "gfx906", "mi60": "gfx906", "mi100": "gfx908"}


@pytest.mark.parametrize("name", NVIDIA_ARCHS + AMD_ARCHS + ["valhall2", "valhall3", "llvmpipe"])
def test_llvm_archs_resolve_to_themselves(name):
    t = resolve_target(None, name)
    assert t.name == t.arch == name and t.kind == "arch"


@pytest.mark.parametrize("code, arch", CODE_NAMES.items())
def test_code_names_resolve_to_their_arch(code, arch):
    t = resolve_target(None, code)
    assert t.arch == arch and t.code_name == code


@pytest.mark.parametrize("product, arch", PRODUCTS.items())
def test_products_resolve_with_their_arch(product, arch):
    t = resolve_target(None, product)
    assert t.kind == "product" and t.name == product and t.arch == arch
    assert product in resolve_target(None, arch).products


@pytest.mark.parametrize("spelling", ["H100", " h100 ", "H100-SXM", "h100_sxm5"])
def test_names_are_case_and_punctuation_insensitive(spelling):
    assert resolve_target("cuda", spelling).name == "h100"


def test_other_spellings():
    assert resolve_target("vulkan", "RX 7900 XTX").name == "rx7900xtx"
    assert resolve_target("vulkan", "Mali-G715").name == "mali-g715"
    assert resolve_target("vulkan", "adreno-740").arch == "adreno"
    assert resolve_target("vulkan", "lavapipe").arch == "llvmpipe"
    assert resolve_target("hip", "GFX942").arch == "gfx942"


def test_hopper_h100_and_sm_90_agree():
    hopper, h100, sm90 = (resolve_target("cuda", n) for n in ("hopper", "h100", "sm_90"))
    assert hopper is sm90
    for field in ("arch", "code_name", "apis", "subgroup_sizes", "max_workgroup_size",
                  "max_workgroup_invocations", "shared_memory_bytes", "shared_memory_optin_bytes",
                  "mma", "cooperative_matrix", "fp16", "bf16", "int8", "fp8"):
        assert getattr(h100, field) == getattr(sm90, field), field
    # The brief's Hopper facts.
    mma = {(s.m, s.n, s.k, s.a_type, s.c_type) for s in h100.mma}
    assert {(16, 8, 16, "f16", "f32"), (16, 8, 16, "bf16", "f32"), (16, 8, 32, "i8", "i32"),
            (16, 8, 32, "f8e4m3", "f32")} <= mma
    assert any(s.m == s.n == s.k == 16 and s.a_type == "f16" for s in h100.cooperative_matrix)
    assert h100.peak("bf16") == pytest.approx(989.4) and h100.peak("f32") == pytest.approx(67.0)
    assert h100.memory_gbps == pytest.approx(3350)
    assert h100.shared_memory_limit("cuda") == 227 * 1024 and h100.shared_memory_limit("vulkan") == 48 * 1024


def test_sm_90a_adds_wgmma_only():
    sm90, sm90a = resolve_target("cuda", "sm_90"), resolve_target("cuda", "sm_90a")
    assert not any(s.scope == "warpgroup" for s in sm90.mma)
    assert any(s.scope == "warpgroup" for s in sm90a.mma)
    assert set(sm90.mma) < set(sm90a.mma)


def test_matrix_units_by_family():
    rdna3 = resolve_target("vulkan", "rdna3")
    assert rdna3.subgroup_sizes[0] == 32
    assert {(s.m, s.n, s.k, s.a_type) for s in rdna3.mma} >= {(16, 16, 16, "f16"), (16, 16, 16, "bf16")}
    cdna3 = resolve_target("hip", "cdna3")
    assert cdna3.subgroup_sizes == (64,)
    assert {(16, 16, 16, "f16"), (32, 32, 8, "f16")} <= {(s.m, s.n, s.k, s.a_type) for s in cdna3.mma}
    for name in ("llvmpipe", "valhall4", "adreno", "sm_60", "gfx1030"):
        t = resolve_target(None, name)
        assert not t.cooperative_matrix, name
    assert not resolve_target(None, "llvmpipe").mma


def test_unknown_names_suggest_close_ones():
    with pytest.raises(UserError, match=r"unknown cuda target 'h10'.*did you mean.*h100"):
        resolve_target("cuda", "h10")
    with pytest.raises(UserError, match=r"did you mean.*rdna3"):
        resolve_target("vulkan", "rdna33")
    with pytest.raises(UserError, match=r"did you mean.*gfx942"):
        resolve_target("hip", "gfx943")
    with pytest.raises(UserError, match="unknown"):
        resolve_target(None, "quantum-gpu-9000")


def test_api_mismatch_and_special_names():
    with pytest.raises(UserError, match="cannot be used with vulkan"):
        resolve_target("vulkan", "mi300x")  # Instinct ships no Vulkan driver
    with pytest.raises(UserError, match="cannot be used with cuda"):
        resolve_target("cuda", "rx7900xtx")
    with pytest.raises(UserError, match="probed device"):
        resolve_target("vulkan", "auto")
    with pytest.raises(UserError, match="unknown API"):
        resolve_target("metal", "h100")


def test_defaults_are_safe():
    v = default_target("vulkan")
    assert v.kind == "generic" and v.spirv_version == "1.6"  # the vulkan-1.3 tier consumes SPIR-V 1.6
    assert v.subgroup_sizes == () and v.max_workgroup_invocations == 128
    assert v.shared_memory_bytes == 16 * 1024 and not v.fp16 and not v.cooperative_matrix
    assert default_target("cuda").arch == "sm_60"
    assert default_target("hip").arch == "gfx908"  # as IREE's ROCm guide defaults


def test_every_entry_is_consistent():
    archs = {t.name: t for t in T.TARGETS if t.kind == "arch"}
    for t in T.TARGETS:
        assert t.apis and set(t.apis) <= set(T.apis()), t.name
        assert t.kind in ("arch", "product", "generic"), t.name
        assert all(s > 0 and s & (s - 1) == 0 for s in t.subgroup_sizes), t.name
        assert t.max_workgroup_invocations <= max(t.max_workgroup_size) * 1024
        assert all(d >= 1 for d in t.max_workgroup_size)
        assert t.shared_memory_bytes >= 16 * 1024
        assert t.shared_memory_optin_bytes is None or t.shared_memory_optin_bytes >= t.shared_memory_bytes
        assert ("vulkan" in t.apis) == (t.spirv_version is not None), t.name
        assert not t.cooperative_matrix or "vulkan" in t.apis
        assert not t.mma or {"cuda", "hip"} & set(t.apis), t.name
        for s in (*t.mma, *t.cooperative_matrix):
            assert s.m > 0 and s.n > 0 and s.k > 0
            if s.a_type == "bf16":
                assert t.bf16, t.name
            if s.a_type.startswith("f8"):
                assert t.fp8, t.name
        for dtype, value in t.peak_tflops:
            assert dtype in ("f64", "f32", "tf32", "f16", "bf16", "f8", "i8") and value > 0, t.name
        if t.memory_gbps is not None:
            assert t.memory_gbps > 0
        if t.kind == "product":
            assert t.products == (t.name,) and t.arch in archs, t.name
            assert t.name in archs[t.arch].products, t.name
            if t.vendor in ("nvidia", "amd"):
                # Published boards: peaks, bandwidth, compute units and a source.
                assert t.peak("f32") and t.peak("f16") and t.memory_gbps and t.compute_units and t.source
                # Matrix units beat the vector units wherever they exist.
                if t.mma:
                    assert t.peak("f16") > t.peak("f32"), t.name
        if t.kind == "arch":
            for p in t.products:
                # sm_90a lists the Hopper boards too; they resolve to the portable sm_90.
                assert resolve_target(None, p).arch in (t.arch, t.arch.removesuffix("a"))
        json.dumps(t.to_dict())
    assert set(T.CODE_NAMES.values()) <= set(archs)


def _device(name: str, api: str, vendor_id: int | None = None, arch: str | None = None,
            driver_id: str = "", **limits) -> DeviceInfo:
    identity = Identity(name=name, api=api, vendor_id=vendor_id, arch=arch, driver_id=driver_id)
    return DeviceInfo(driver=api.lower(), ordinal=0, identity=identity, limits=Limits(**limits))


def test_probed_cuda_device_maps_to_its_product():
    h100 = _device("NVIDIA H100 80GB HBM3", "CUDA", arch="sm_90")
    assert target_from_device(h100) == resolve_target("cuda", "h100")
    unknown = _device("NVIDIA GeForce RTX 3060", "CUDA", arch="sm_86")
    assert target_from_device(unknown) is resolve_target("cuda", "sm_86")


def test_probed_vulkan_devices():
    h100 = _device("NVIDIA H100 80GB HBM3", "Vulkan", vendor_id=0x10DE, subgroup_size=32,
                   max_shared_memory_bytes=49152, max_workgroup_invocations=1024)
    t = target_from_device(h100)
    assert t.name == "h100" and t.arch == "sm_90" and t.shared_memory_bytes == 49152
    lvp = _device("llvmpipe (LLVM 15.0.6, 256 bits)", "Vulkan", vendor_id=0x10005, driver_id="MESA_LLVMPIPE",
                  subgroup_size=8, min_subgroup_size=8, max_subgroup_size=8, max_shared_memory_bytes=32768,
                  max_workgroup_invocations=1024, max_workgroup_size=(1024, 1024, 1024))
    t = target_from_device(lvp)
    assert t.arch == "llvmpipe" and t.subgroup_sizes == (8,) and not t.cooperative_matrix


def test_unknown_device_becomes_a_probed_target():
    dev = DeviceInfo(driver="vulkan", ordinal=0,
                     identity=Identity(name="Imaginary GPU 9", api="Vulkan", vendor="Imaginary"),
                     limits=Limits(subgroup_size=32, max_shared_memory_bytes=65536,
                                   max_workgroup_invocations=256, max_workgroup_size=(256, 256, 64)),
                     features=Features(
                         flags={"shaderFloat16": True, "cooperativeMatrix": True},
                         cooperative_matrix=(MatrixShape(16, 16, 16, "f16", "f16", "f32", "f32"),)))
    t = target_from_device(dev)
    assert t.kind == "probed" and t.apis == ("vulkan",) and t.subgroup_sizes == (32,)
    assert t.shared_memory_bytes == 65536 and t.fp16 and len(t.cooperative_matrix) == 1
    with pytest.raises(UserError, match="not a GPU"):
        cpu = DeviceInfo(driver="local-sync", ordinal=0, identity=Identity(name="cpu", api="host"))
        target_from_device(cpu)


def test_target_from_a_device_dump():
    h100 = _device("NVIDIA H100 80GB HBM3", "CUDA", arch="sm_90").to_dict()
    lvp = _device("llvmpipe (LLVM 15.0.6, 256 bits)", "Vulkan", vendor_id=0x10005, subgroup_size=8).to_dict()
    dump = json.loads(json.dumps({"schema_version": 1, "devices": [lvp, h100]}))
    assert target_from_device(dump, api="cuda").name == "h100"
    assert target_from_device(dump).arch == "llvmpipe"
    assert target_from_device(dump["devices"][1]).name == "h100"
    with pytest.raises(UserError, match="no hip device"):
        target_from_device(dump, api="hip")


def test_list_targets_cli_text_and_json():
    r = CliRunner().invoke(main, ["list-targets", "--api", "cuda"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split()[:3] == ["NAME", "KIND", "ARCH"]
    h100 = next(line for line in lines if line.startswith("h100 "))
    assert "sm_90" in h100 and "hopper" in h100 and "989.4" in h100 and "3350" in h100
    assert not any(line.startswith("rx7900xtx") for line in lines)
    r = CliRunner().invoke(main, ["list-targets", "--format", "json"])
    assert r.exit_code == 0, r.output
    names = {t["name"] for t in json.loads(r.output)["targets"]}
    assert {"sm_90", "h100", "gfx1100", "rx7900xtx", "valhall4", "mali-g715", "adreno", "llvmpipe",
            "vulkan-generic"} <= names
    r = CliRunner().invoke(main, ["list-targets", "--api", "metal"])
    assert r.exit_code != 0


@pytest.mark.parametrize("product, arch", [("rx7700xt", "gfx1101"), ("rx7800xt", "gfx1101"),
                                           ("rx9060xt", "gfx1200"), ("rx9070", "gfx1201"),
                                           ("rx9070xt", "gfx1201"), ("mi25", "gfx900"),
                                           ("mi50", "gfx906"), ("mi60", "gfx906")])
def test_amd_guide_products_work_through_vulkan_and_hip(product, arch):
    """IREE takes these names as --iree-vulkan-target and --iree-rocm-target alike."""
    for api in ("vulkan", "hip"):
        t = resolve_target(api, product)
        assert t.arch == arch and t.supports(api)
    # The board's own peaks, not the arch's (which has none).
    assert resolve_target("hip", product).memory_gbps


def test_mi100_is_rocm_only():
    assert resolve_target("hip", "mi100").arch == "gfx908"
    with pytest.raises(UserError, match="cannot be used with vulkan"):
        resolve_target("vulkan", "mi100")


@pytest.mark.parametrize("name, product", [("AMD Radeon RX 7800 XT (RADV NAVI32)", "rx7800xt"),
                                           ("AMD Radeon RX 7700 XT", "rx7700xt"),
                                           ("AMD Radeon RX 9070 (RADV GFX1201)", "rx9070"),
                                           ("AMD Radeon RX 9070 XT", "rx9070xt"),
                                           ("AMD Radeon RX 9060 XT", "rx9060xt"),
                                           ("AMD Instinct MI100", "mi100")])
def test_probed_amd_names_map_to_their_product(name, product):
    api = "hip" if "MI100" in name else "vulkan"
    info = DeviceInfo(driver=api, ordinal=0, identity=Identity(name=name, vendor="AMD"))
    assert target_from_device(info, api).name == product


def test_generic_vulkan_target_says_the_spirv_version_it_emits(tmp_path):
    """vulkan-generic is what a compile without --vulkan-target gets: its description and its
    spirv_version must name the version in the modules' headers (spirv-val runs on each)."""
    import onnx
    from onnx import TensorProto, helper

    from halbench.compiler import CompileOptions, compile_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "relu.onnx")
    cm = compile_model(tmp_path / "relu.onnx", CompileOptions(target_devices=("vulkan",)))
    generic = default_target("vulkan")
    major, minor = (int(p) for p in generic.spirv_version.split("."))
    modules = [v for k, v in cm.members.items() if k.endswith(".spv")]
    assert modules
    for spv in modules:
        assert int.from_bytes(spv[4:8], "little") == (major << 16) | (minor << 8)
    assert f"SPIR-V {generic.spirv_version}" in generic.description
    assert all(t.spirv_version == generic.spirv_version for t in T.list_targets("vulkan")
               if t.spirv_version)


def test_vulkan_subgroup_shuffles_come_from_the_driver() -> None:
    """Subgroup shuffles are optional apart from arithmetic: a probed Vulkan device's target has
    them only where the driver reports VK_SUBGROUP_FEATURE_SHUFFLE_BIT (lavapipe does)."""
    import dataclasses

    import halbench

    try:
        dev = halbench.create_device("vulkan://")
    except Exception as e:  # noqa: BLE001 - no Vulkan device here: say why
        pytest.skip(f"no vulkan:// device: {e}")
    info = dev.info
    dev.close()
    assert target_from_device(info, "vulkan").subgroup_shuffle == ("shuffle" in info.features.subgroup_operations)
    ops = tuple(o for o in info.features.subgroup_operations if o != "shuffle")
    without = dataclasses.replace(info, features=dataclasses.replace(info.features, subgroup_operations=ops))
    assert not target_from_device(without, "vulkan").subgroup_shuffle
