"""Device-timed samples of a function: what ``Module.profile`` returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from halbench.hal import Profile

__all__ = ["DispatchInfo", "ProfileResult"]


@dataclass(frozen=True)
class DispatchInfo:
    """A dispatch step of the function, in recording order (index into the per-run timings)."""

    index: int
    name: str
    executable: int
    entry: str
    format: str
    flops: int = 0
    bytes: int = 0
    nodes: tuple[str, ...] = ()  # the source (ONNX) nodes, as the bundle's manifest names them

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "name": self.name, "executable": self.executable,
                "entry": self.entry, "format": self.format, "flops": self.flops, "bytes": self.bytes,
                "nodes": list(self.nodes)}


@dataclass(frozen=True)
class ProfileResult:
    """``runs`` device-timed submissions of one function.

    ``total_ns[r]`` is the device time of run ``r``; ``dispatch_ns[r][d]`` that of dispatch
    ``d`` (see ``dispatches`` for its name, flops and bytes); ``host_ns[r]`` the host wall time
    from submit to the end of the wait. ``profiles`` keeps the HAL's raw records (absolute
    times on the host CLOCK_MONOTONIC timeline, for traces).
    """

    function: str
    device: str
    dispatches: tuple[DispatchInfo, ...]
    total_ns: tuple[int, ...]
    dispatch_ns: tuple[tuple[int, ...], ...]
    host_ns: tuple[int, ...]
    profiles: tuple[Profile, ...]

    @property
    def runs(self) -> int:
        return len(self.total_ns)

    @property
    def total_source(self) -> str:
        return self.profiles[0].total_source if self.profiles else "timestamps"

    @property
    def calibrated(self) -> bool:
        return all(p.calibrated for p in self.profiles)

    @property
    def flops(self) -> int:
        return sum(d.flops for d in self.dispatches)

    @property
    def bytes(self) -> int:
        return sum(d.bytes for d in self.dispatches)

    def median_ns(self) -> float:
        return float(np.median(self.total_ns)) if self.total_ns else float("nan")

    def dispatch_median_ns(self) -> list[float]:
        """Median device time of each dispatch over the runs."""
        if not self.dispatch_ns:
            return [float("nan")] * len(self.dispatches)
        return [float(v) for v in np.median(np.asarray(self.dispatch_ns, dtype=np.float64), axis=0)]

    def to_dict(self) -> dict[str, Any]:
        return {"function": self.function, "device": self.device, "runs": self.runs,
                "total_source": self.total_source, "calibrated": self.calibrated,
                "dispatches": [d.to_dict() for d in self.dispatches],
                "total_ns": list(self.total_ns), "dispatch_ns": [list(r) for r in self.dispatch_ns],
                "host_ns": list(self.host_ns), "profiles": [p.to_dict() for p in self.profiles]}
