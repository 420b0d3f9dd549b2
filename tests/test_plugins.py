"""An API is one plug-in unit: the driver half (formats, preference, check_variant) and the
compiler half (halbench.compiler.backends) agree, and each rule exists once."""

from __future__ import annotations

import pytest

import halbench
from halbench.arch import cubin_runs_on, parse_sm, ptx_runs_on
from halbench.bundle import ExecutableDecl, Variant, select_variant
from halbench.compiler.backends import backend, backend_for_driver, backends
from halbench.compiler.targets import list_targets
from halbench.drivers import driver_names, get_driver, known_formats
from halbench.errors import UserError
from halbench.hal import Device, EntryPoint
from halbench.probe.info import DeviceInfo, Features, Identity


def _info(driver: str, arch: str | None = None, flags: dict | None = None) -> DeviceInfo:
    return DeviceInfo(driver, 0, Identity(name=f"a {driver} device", arch=arch),
                      features=Features(flags=dict(flags or {})))


class _Described(Device):
    """A device known only by its probe record: it answers can_run through its real driver
    (select_variant's questions) and opens nothing. The rule under test is the driver's own."""

    def __init__(self, driver: str, info: DeviceInfo, formats: tuple[str, ...] | None = None):
        super().__init__(info, info.uri)
        self.driver = get_driver(driver)
        self.formats = formats if formats is not None else self.driver.formats

    def _allocate(self, nbytes, usage):  # pragma: no cover - never called
        raise NotImplementedError

    _load_executable = _command_buffer = _submit = _semaphore = _allocate


def _exe(*variants: tuple[str, str]) -> ExecutableDecl:
    ep = EntryPoint("main", 1)
    return ExecutableDecl(0, "d0", tuple(Variant(f, t, f"executables/0.{i}", ep, (1, 1, 1))
                                         for i, (f, t) in enumerate(variants)))


# -- one rule in one place: CUDA archs -------------------------------------------------------
@pytest.mark.parametrize("cubin,device,ok", [
    ("sm_80", "sm_80", True), ("sm_80", "sm_86", True), ("sm_86", "sm_80", False),
    ("sm_80", "sm_90", False), ("sm_90a", "sm_90", True), ("sm_90a", "sm_90a", True),
    ("sm_90a", "sm_91", False), ("sm_90", "sm_90a", True), ("sm_100f", "sm_103", True),
    ("sm_100f", "sm_110", False), ("sm_100a", "sm_103", False), ("sm_120", "sm_100", False),
])
def test_cubin_rule(cubin: str, device: str, ok: bool) -> None:
    assert cubin_runs_on(cubin, device) is ok


@pytest.mark.parametrize("ptx,device,ok", [
    ("sm_60", "sm_90", True), ("sm_90", "sm_80", False), ("sm_90", "sm_100", True),
    ("sm_90a", "sm_90", True), ("sm_90a", "sm_100", False),
])
def test_ptx_rule(ptx: str, device: str, ok: bool) -> None:
    assert ptx_runs_on(ptx, device) is ok


def test_arch_grammar_one_line_error() -> None:
    with pytest.raises(UserError, match="'sm_9x' is not a CUDA arch like sm_90"):
        parse_sm("sm_9x")
    assert str(parse_sm("sm_100f")) == "sm_100f"


# -- the bundle asks the driver -------------------------------------------------------------
def test_select_prefers_bda_then_descriptors() -> None:
    exe = _exe(("vulkan-spirv-descriptors-v1", "spirv1.6"), ("vulkan-spirv-bda-v1", "spirv1.6"),
               ("local-v1", "host"))
    assert select_variant(exe, _Described("vulkan", _info("vulkan", flags={"bufferDeviceAddress": True})))[0] == 1
    no_bda = _Described("vulkan", _info("vulkan", flags={"bufferDeviceAddress": False}))
    assert select_variant(exe, no_bda)[0] == 0
    with halbench.create_device("local-sync://") as dev:
        assert select_variant(exe, dev)[0] == 2


def test_hopper_runs_its_sm90a_cubin_not_ptx() -> None:
    """The rule the issue found split in two: an sm_90a cubin on an sm_90 device (an H100)."""
    exe = _exe(("cuda-ptx-v1", "sm_90a"), ("cuda-cubin-v1", "sm_80"), ("cuda-cubin-v1", "sm_90a"))
    assert select_variant(exe, _Described("cuda", _info("cuda", "sm_90")))[0] == 2
    assert select_variant(exe, _Described("cuda", _info("cuda", "sm_86")))[0] == 1
    with pytest.raises(UserError) as e:
        select_variant(_exe(("cuda-cubin-v1", "sm_90")), _Described("cuda", _info("cuda", "sm_80")))
    msg = str(e.value)
    assert "\n" not in msg and "sm_90" in msg and "sm_80" in msg and "recompile" in msg


def test_nothing_runs_names_every_reason() -> None:
    with halbench.create_device("local-sync://") as dev, \
            pytest.raises(UserError, match="no variant that local-sync://0 can run.*does not load vulkan-spirv-bda-v1"):
        select_variant(_exe(("vulkan-spirv-bda-v1", "spirv1.6")), dev)


# -- both halves agree on every (variant, device) pair of the target table --------------------
def _target_pairs():
    for b in backends().values():
        if b.target_option is None:
            yield b.name, None
            continue
        for t in list_targets(b.name):
            yield b.name, t


@pytest.mark.parametrize("api,target", list(_target_pairs()),
                         ids=lambda v: v if isinstance(v, str) else getattr(v, "name", "host"))
def test_halves_agree_on_target_table(api: str, target) -> None:
    """What a compile for ``target`` emits runs on a device of that target's arch, through
    every driver of the backend, and the driver prefers the backend's first format (the cubin
    before PTX, BDA before descriptors)."""
    b = backend(api)
    emitted = b.variant_targets(target)
    assert emitted and {f for f, _ in emitted} <= set(b.formats)
    for drv_name in b.drivers:
        drv = get_driver(drv_name)
        arch = getattr(target, "arch", None)
        info = _info(drv_name, arch, {"bufferDeviceAddress": True})
        if target is not None and target.kind == "generic":
            info = _info(drv_name, None, {"bufferDeviceAddress": True})
        for fmt, tgt in emitted:
            assert fmt in drv.formats, (fmt, drv_name)
            assert drv.check_variant(fmt, tgt, info) is None, (fmt, tgt, drv_name, arch)
        exe = _exe(*reversed(emitted))
        _, chosen = select_variant(exe, _Described(drv_name, info))
        assert chosen.format == emitted[0][0], (target, chosen)


def test_every_driver_has_a_backend_and_formats_are_owned_once() -> None:
    owners: dict[str, str] = {}
    for name in driver_names():
        drv = get_driver(name)
        assert drv.formats, name
        assert backend_for_driver(name).formats == tuple(f for f in backend_for_driver(name).formats)
        for f in drv.formats:
            assert owners.setdefault(f, backend_for_driver(name).name) == backend_for_driver(name).name
            assert f in backend_for_driver(name).formats, (name, f)
    assert set(known_formats()) == set(owners)


def test_third_party_driver_must_implement_the_interface() -> None:
    from halbench.drivers import _check_driver_class
    from halbench.errors import DriverUnavailable

    class Half(halbench.hal.Driver):
        formats = ("my-format-v1",)

        def query_available_devices(self):
            return []

    with pytest.raises(DriverUnavailable, match="does not implement _open"):
        _check_driver_class("half", Half)

    class NoFormats(Half):
        formats = ()

        def _open(self, info):
            raise NotImplementedError

    with pytest.raises(DriverUnavailable, match="declares no valid executable formats"):
        _check_driver_class("nofmt", NoFormats)
