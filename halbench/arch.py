"""GPU instruction-set names and which binaries run where: the one copy of these rules.

The CUDA driver (which cubin or PTX a device runs), the compiler (which archs it may emit for)
and the bundle (which variant to pick) all ask this module, so they cannot disagree.

CUDA archs are ``sm_XY`` with an optional suffix: ``a`` (arch-specific features such as
Hopper's wgmma: runs only on exactly that arch) or ``f`` (family-specific, CUDA 12.9+: runs on
later minors of the same major). AMD archs are ``gfxNNN`` with optional target features after a
colon (``gfx90a:xnack-``); a code object runs only on its own gfx arch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from halbench.errors import UserError

__all__ = ["SmArch", "cubin_runs_on", "gfx_runs_on", "is_gfx", "is_sm", "parse_sm", "ptx_runs_on"]

_SM = re.compile(r"sm_([1-9][0-9]?)([0-9])([af]?)")
_GFX = re.compile(r"gfx[0-9a-f]{3,4}")


@dataclass(frozen=True, order=True)
class SmArch:
    major: int
    minor: int
    suffix: str = ""  # "", "a" or "f"

    def __str__(self) -> str:
        return f"sm_{self.major}{self.minor}{self.suffix}"


def parse_sm(arch: str) -> SmArch:
    """``sm_90a`` -> SmArch(9, 0, "a"); anything else is a UserError naming the grammar."""
    m = _SM.fullmatch(arch or "")
    if not m:
        raise UserError(f"'{arch}' is not a CUDA arch like sm_90, sm_90a or sm_100f")
    return SmArch(int(m.group(1)), int(m.group(2)), m.group(3))


def is_sm(arch: str) -> bool:
    return bool(_SM.fullmatch(arch or ""))


def cubin_runs_on(cubin: str, device: str) -> bool:
    """SASS runs on its own major at the same or a later minor (sm_80 on sm_86, never sm_80 on
    sm_90); an arch-specific build (sm_90a) runs only on exactly that arch (sm_90)."""
    c, d = parse_sm(cubin), parse_sm(device)
    if c.suffix == "a":
        return (c.major, c.minor) == (d.major, d.minor)
    return c.major == d.major and c.minor <= d.minor


def ptx_runs_on(ptx: str, device: str) -> bool:
    """PTX JIT-compiles for any later arch, except arch- and family-specific PTX, which keeps
    the cubin rule."""
    p, d = parse_sm(ptx), parse_sm(device)
    if p.suffix:
        return cubin_runs_on(ptx, device)
    return (p.major, p.minor) <= (d.major, d.minor)


def is_gfx(arch: str) -> bool:
    return bool(_GFX.fullmatch((arch or "").split(":")[0]))


def gfx_runs_on(code_object: str, device: str) -> bool:
    """A code object runs only on the gfx arch it was built for (target features aside)."""
    return code_object.split(":")[0] == device.split(":")[0]
