"""Which variant of an executable a device runs. The bundle holds no rule of its own: the
device's driver says which formats it loads, best first (``Device.formats``), and whether a
variant built for some target runs there (``Device.can_run`` -> ``Driver.check_variant``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from halbench.bundle.manifest import ExecutableDecl, Variant
from halbench.errors import UserError

if TYPE_CHECKING:
    from halbench.hal import Device

__all__ = ["select_variant"]


def select_variant(executable: ExecutableDecl, device: Device) -> tuple[int, Variant]:
    """``(index, variant)`` of the variant ``device`` runs best; a UserError says why none fits."""
    runnable, reasons = [], []
    for i, v in enumerate(executable.variants):
        why = device.can_run(v.format, v.target, v.requires)
        if why is None:
            runnable.append((device.formats.index(v.format), i, v))
        else:
            reasons.append(f"{v.format}" + (f" ({v.target})" if v.target else "") + f": {why}")
    if not runnable:
        name = f" ('{executable.name}')" if executable.name else ""
        raise UserError(f"executable {executable.id}{name} has no variant that {device.uri} can run "
                        f"[{'; '.join(reasons)}]; recompile the model for this device "
                        f"(it loads {', '.join(device.formats) or 'no format'})")
    _, i, v = min(runnable)
    return i, v
