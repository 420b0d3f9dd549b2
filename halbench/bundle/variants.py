"""Which variant of an executable a device runs (docs/bundle-format.md, preference order)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from halbench.bundle.manifest import ExecutableDecl, Variant
from halbench.errors import UserError

if TYPE_CHECKING:
    from halbench.hal import Device

__all__ = ["FORMAT_PREFERENCE", "select_variant", "variant_runs_on"]

#: Among formats a device supports, the first listed wins.
FORMAT_PREFERENCE = ("vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1", "cuda-cubin-v1",
                     "cuda-ptx-v1", "hip-hsaco-v1", "local-v1")

_SM = re.compile(r"^sm_(\d+)(\d)([a-z]?)$")


def _cubin_runs_on(target: str, arch: str | None) -> bool:
    """CUDA's binary compatibility: a cubin for sm_XY runs on sm_XZ with Z >= Y (same major),
    except arch-specific targets (sm_90a), which run only on exactly that arch."""
    if not arch:
        return False
    if target == arch:
        return True
    t, a = _SM.match(target), _SM.match(arch)
    if not t or not a or t.group(3):
        return False
    return t.group(1) == a.group(1) and int(t.group(2)) <= int(a.group(2))


def variant_runs_on(v: Variant, device: Device) -> tuple[bool, str]:
    """Whether ``device`` can run ``v``, and if not, why (for the error message)."""
    if not device.supports(v.format):
        return False, f"{device.uri} does not load {v.format}"
    arch = device.info.identity.arch
    if v.format == "cuda-cubin-v1" and not _cubin_runs_on(v.target, arch):
        return False, f"cubin for {v.target or 'no arch'} does not run on {arch or 'an unknown arch'}"
    if v.format == "hip-hsaco-v1" and v.target and arch and v.target.split(":")[0] != arch.split(":")[0]:
        return False, f"code object for {v.target} does not run on {arch}"
    if v.format == "vulkan-spirv-bda-v1":
        flags = device.info.features.flags
        if "bufferDeviceAddress" in flags and not flags["bufferDeviceAddress"]:
            return False, f"{device.uri} has no bufferDeviceAddress"
    return True, ""


def select_variant(executable: ExecutableDecl, device: Device) -> tuple[int, Variant]:
    """``(index, variant)`` of the variant ``device`` runs best; a UserError says why none fits."""
    runnable, reasons = [], []
    for i, v in enumerate(executable.variants):
        ok, why = variant_runs_on(v, device)
        if ok:
            rank = FORMAT_PREFERENCE.index(v.format) if v.format in FORMAT_PREFERENCE else len(FORMAT_PREFERENCE)
            runnable.append((rank, i, v))
        else:
            reasons.append(f"{v.format}" + (f" ({v.target})" if v.target else "") + f": {why}")
    if not runnable:
        name = f" ('{executable.name}')" if executable.name else ""
        driver = device.uri.split(":")[0]
        target = "local" if driver.startswith("local") else driver
        raise UserError(f"executable {executable.id}{name} has no variant that {device.uri} can run "
                        f"[{'; '.join(reasons)}]; recompile the model for this device "
                        f"(--target-device={target})")
    _, i, v = min(runnable, key=lambda r: (r[0], r[1]))
    return i, v
