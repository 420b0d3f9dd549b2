"""Per-target launch parameters: workgroup sizes, GEMM tiles, reduction strategy, matrix units.

Everything here is a pure function of a :class:`~halbench.compiler.targets.Target` (or None:
the API's safe default) and the problem's shape, so the same dispatch compiles to the same
kernel for the same target. Numbers are chosen for why they work, not tuned by search:

- 1-D kernels use 256 threads (8 warps / 4 wave64 / 32 lavapipe lanes x 8): enough latency
  hiding on every desktop GPU, small enough for 128-invocation mobile limits after clamping.
- GEMM tiles come from shared memory: two f32 tiles (BM x BK and BK x BN) must fit with room
  for two resident workgroups per SM/CU; 4x4 or 8x8 outputs per thread amortise the shared
  memory reads (2*T loads per T*T FMAs).
- A reduction becomes workgroup-cooperative when its rows are long and contiguous (softmax and
  layer norm over 384..30522 elements), so a row is read by a whole workgroup in coalesced
  strides instead of one thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_GROUPS_X",
    "GemmTiles",
    "Tuning",
    "fold_groups",
    "gemm_tiles",
    "matrix_shape",
    "reduction_plan",
    "tuning_for",
]

#: Vulkan guarantees 65535 workgroups per dimension; larger grids fold x into y.
MAX_GROUPS_X = 65535


@dataclass(frozen=True)
class Tuning:
    """What codegen needs to know about a target (duck-typed from ``targets.Target``)."""

    api: str
    name: str  # the Variant's target string: "spirv1.6", "sm_90", "gfx942"
    arch: str
    subgroup_size: int
    max_invocations: int
    shared_bytes: int
    compute_units: int
    matrix: tuple[Any, ...]  # MatrixShape-like: m, n, k, a_type, c_type
    fp16: bool
    bf16: bool

    @property
    def block(self) -> int:
        """Threads of a 1-D workgroup: 256, clamped to the target's limit."""
        return max(min(256, self.max_invocations), self.subgroup_size, 1)


@dataclass(frozen=True)
class GemmTiles:
    bm: int
    bn: int
    bk: int
    tm: int
    tn: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def shared_bytes(self, elem: int = 4) -> int:
        return elem * self.bk * (self.bm + self.bn + 8)


def tuning_for(target: Any, api: str) -> Tuning:
    """Normalise a ``targets.Target`` (or None, or a target name) for ``api``."""
    if target is None or isinstance(target, str):
        from halbench.compiler import targets as _targets

        target = _targets.default_target(api) if target is None else _targets.resolve_target(api, target)
    sub = getattr(target, "subgroup_size", None) or 32
    inv = int(getattr(target, "max_workgroup_invocations", 1024) or 1024)
    if api in ("cuda", "hip") and getattr(target, "shared_memory_limit", None):
        # Static __shared__ arrays are limited to 48 KiB without opting in.
        shared = min(int(target.shared_memory_bytes or 48 * 1024), 48 * 1024)
    else:
        shared = int(getattr(target, "shared_memory_bytes", 16 * 1024) or 16 * 1024)
    matrix = tuple(target.matrix_shapes(api)) if hasattr(target, "matrix_shapes") else ()
    arch = str(getattr(target, "arch", "") or "")
    # compile_glsl always targets Vulkan 1.3, i.e. SPIR-V 1.6, whatever the table's version.
    name = "spirv1.6" if api == "vulkan" else arch
    return Tuning(api, name, arch, int(sub), inv, shared, int(getattr(target, "compute_units", 0) or 0),
                  matrix, bool(getattr(target, "fp16", False)), bool(getattr(target, "bf16", False)))


def fold_groups(n: int) -> tuple[int, int, int]:
    """``n`` workgroups as (x, y, 1) with x <= 65535; kernels linearise y * x + gx and guard."""
    n = max(int(n), 1)
    if n <= MAX_GROUPS_X:
        return (n, 1, 1)
    y = -(-n // MAX_GROUPS_X)
    return (-(-n // y), y, 1)


def gemm_tiles(t: Tuning, m: int, n: int, k: int, batch: int = 1) -> GemmTiles:
    """Tiles for an f32 GEMM of M x N x K.

    Big problems on big GPUs take 128x128 (8x8 per thread, 256 threads); the default is 64x64
    with 4x4 per thread; skinny or small problems drop to 32-wide tiles so that there are enough
    workgroups to fill the machine (a 1x768 x 768x768 GEMM of BERT would otherwise run on 12
    workgroups).
    """
    cus = t.compute_units or 16
    cands = [GemmTiles(128, 128, 8, 8, 8), GemmTiles(64, 64, 16, 4, 4), GemmTiles(32, 64, 16, 2, 4),
             GemmTiles(64, 32, 16, 4, 2), GemmTiles(32, 32, 16, 2, 2)]
    ok = [c for c in cands if c.threads <= t.max_invocations and c.shared_bytes() <= t.shared_bytes // 2]
    if not ok:
        return GemmTiles(16, 16, 8, 1, 1) if t.max_invocations >= 256 else GemmTiles(8, 8, 8, 1, 1)
    for c in ok:
        groups = batch * -(-m // c.bm) * -(-n // c.bn)
        waste = (-(-m // c.bm) * c.bm * -(-n // c.bn) * c.bn) / max(m * n, 1)
        if groups >= 2 * cus and waste < 1.5:
            return c
    return ok[-1]


def matrix_shape(t: Tuning, in_dtype: str, acc: str = "f32") -> Any | None:
    """The matrix-unit shape for ``in_dtype`` inputs with ``acc`` accumulation, if the target has one."""
    for s in t.matrix:
        if s.a_type == in_dtype and s.b_type == in_dtype and s.c_type == acc and getattr(s, "scope", "subgroup") == "subgroup":
            return s
    return None


def reduction_plan(t: Tuning, points: int, length: int, contiguous: bool) -> tuple[str, int]:
    """("cooperative", threads) to reduce each output with a workgroup, or ("thread", block).

    Cooperative when rows are long, or when there are too few outputs to fill the machine; a
    reduction along a strided axis stays one thread per output (neighbouring threads then read
    neighbouring elements, which is the coalesced direction there).
    """
    cus = t.compute_units or 16
    few = points < 4 * cus * t.subgroup_size
    if length >= 128 and (contiguous or few) or (length >= 32 and points < cus):
        threads = 64
        while threads < min(t.block, 256) and threads * 4 <= length:
            threads *= 2
        return "cooperative", max(min(threads, t.max_invocations), 1)
    return "thread", t.block
