"""Per-target launch parameters: workgroup sizes, GEMM tiles, reduction strategy, matrix units.

Everything here is a pure function of a :class:`~halbench.compiler.targets.Target` (or None:
the API's safe default) and the problem's shape, so the same dispatch compiles to the same
kernel for the same target. Numbers are chosen for why they work, not tuned by search:

- 1-D kernels use 256 threads (8 warps / 4 wave64 / 32 lavapipe lanes x 8): enough latency
  hiding on every desktop GPU, small enough for 128-invocation mobile limits after clamping.
- GEMM tiles come from shared memory: two f32 tiles (BM x BK and BK x BN) must fit with room
  for two resident workgroups per SM/CU; 4x4 or 8x8 outputs per thread amortise the shared
  memory reads (2*T loads per T*T FMAs).
- f16 / bf16 GEMMs on matrix units (cooperative matrix, WMMA) take one subgroup per warp tile of
  fragments and a BK of two fragment depths; the shared tiles are f16, so 128x128 fits easily.
- A reduction becomes workgroup-cooperative when its rows are long and contiguous (softmax and
  layer norm over 384..30522 elements), so a row is read by a whole workgroup in coalesced
  strides instead of one thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from halbench.arch import is_sm, parse_sm
from halbench.tools import SPIRV_VERSION

__all__ = [
    "GEMM_FRAGMENTS",
    "GLSL_STAGED",
    "MAX_GROUPS_X",
    "WGMMA_CONVS",
    "WGMMA_MATMULS",
    "GemmConfig",
    "GemmTiles",
    "MmaTiles",
    "Tuning",
    "WgmmaTiles",
    "config_problem",
    "fold_groups",
    "gemm_min_blocks",
    "gemm_stages",
    "gemm_tiles",
    "matrix_shape",
    "mma_fragment",
    "mma_sync_conv_tiles",
    "mma_sync_dynamic",
    "mma_sync_fits",
    "mma_sync_ok",
    "mma_sync_split",
    "mma_sync_takes_split",
    "mma_sync_tiles",
    "mma_tiles",
    "problem_key",
    "reduction_plan",
    "split_k",
    "split_k_room",
    "tuning_for",
    "wgmma_ok",
    "wgmma_tiles",
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
    #: every subgroup size the driver may pick (Vulkan without requiredSubgroupSize), preferred first
    subgroup_sizes: tuple[int, ...] = ()
    #: measured f32 GEMM configurations by problem key (``problem_key``), from a tuning cache
    #: or forced by ``halbench tune``; a problem without one takes the rule (``gemm_tiles``)
    gemm_configs: tuple[tuple[str, GemmConfig], ...] = ()
    #: subgroup reductions (subgroupAdd, __shfl_xor_sync) may be used; never on WebGPU
    subgroup_arithmetic: bool = False
    #: shared memory a CUDA kernel may take per block by opting in to dynamic shared memory
    #: (EntryPoint.dynamic_shared_bytes; the target's opt-in limit, 227 KiB on the H100); 0 where
    #: kernels keep static shared memory only (Vulkan, WebGPU, HIP, CUDA targets without opt-in)
    dynamic_shared_bytes: int = 0
    #: subgroup shuffles (subgroupShuffleXor) may be used; never on WebGPU
    subgroup_shuffle: bool = False

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


@dataclass(frozen=True)
class GemmConfig:
    """Everything the scalar GEMM template lets a tuner choose for one problem: the workgroup
    tile (``bm x bn``, ``bk`` deep), the outputs per thread (``tm x tn``), the split-K slices
    (1: none; never more than the schedule reserved scratch for, ``kernels.gemm_split``),
    whether a thread owns runs of 4 adjacent rows/columns (``runs``) or strided ones, and whether
    the K steps of a stage are written out with the thread's fragments double-buffered in
    registers (``frag``, gemm.j2 FRAG; on the APIs of GEMM_FRAGMENTS, elsewhere ignored) or left to a
    rolled loop. Two more choices apply to the register-staged GEMM of GLSL (Vulkan) only, and are
    ignored elsewhere: ``double``, two shared stages with one barrier per K step (gemm.j2 DB), and
    ``vec_a``, A read 4 along K per 16-byte load where it is dense there (gemm.j2 VA). Each was
    measured both faster and slower than the single-stage scalar staging depending on the GEMM
    (kernels.GLSL_STAGING), so the tuner chooses them per problem."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    split: int = 1
    runs: bool = False
    frag: bool = False
    double: bool = False
    vec_a: bool = False

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def tiles(self) -> GemmTiles:
        return GemmTiles(self.bm, self.bn, self.bk, self.tm, self.tn)

    def to_dict(self) -> dict[str, Any]:
        return {"bm": self.bm, "bn": self.bn, "bk": self.bk, "tm": self.tm, "tn": self.tn,
                "split": self.split, "runs": self.runs, **({"frag": True} if self.frag else {}),
                **({"double": True} if self.double else {}), **({"vec_a": True} if self.vec_a else {})}

    def label(self) -> str:
        s = f"{self.bm}x{self.bn}x{self.bk}/{self.tm}x{self.tn}"
        return (s + (f" split{self.split}" if self.split > 1 else "") + (" runs" if self.runs else "")
                + (" frag" if self.frag else "") + (" db" if self.double else "") + (" va" if self.vec_a else ""))

    def problem(self, t: Tuning, max_split: int) -> str | None:
        """Why this configuration cannot run on ``t`` (None: it can). A configuration read from a
        cache is untrusted: the GEMM falls back to the rule when this names a problem."""
        if min(self.bm, self.bn, self.bk, self.tm, self.tn, self.split) < 1:
            return "a size below 1"
        if self.bm % self.tm or self.bn % self.tn:
            return "a thread tile that does not divide the workgroup tile"
        if self.tm > 16 or self.tn > 16 or self.bm > 256 or self.bn > 256 or self.bk > 64:
            return "a tile beyond 256x256x64 / 16x16 per thread"
        if self.threads > t.max_invocations or self.threads < 1:
            return f"{self.threads} threads (the target allows {t.max_invocations})"
        need = self.tiles.shared_bytes() * (2 if self.double and t.api in GLSL_STAGED else 1)
        if need > t.shared_bytes:
            return f"{need} bytes of shared memory (the target has {t.shared_bytes})"
        if self.split > max_split:
            return f"{self.split} K slices where the schedule reserved scratch for {max_split}"
        return None


_MATMUL_DEFAULTS = {"transpose_a": False, "transpose_b": False}
_CONV_DEFAULTS = {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "pad_value": 0.0}


def problem_key(problem: Any) -> str:
    """The cache key of a GEMM problem (a dict: kind, dtype, a, b, out shapes, attrs): one line,
    stable across runs, naming everything that makes the kernel differ."""
    defaults = _CONV_DEFAULTS if problem["kind"] == "conv2d" else _MATMUL_DEFAULTS
    a = {**defaults, **{k: v for k, v in (problem.get("attrs") or {}).items() if v is not None}}
    dims = ";".join("x".join(str(int(s)) for s in problem[k]) for k in ("a", "b", "out"))
    extra = ",".join(f"{k}={_attr(a[k])}" for k in sorted(a))
    return f"{problem['kind']}:{problem['dtype']}:{dims}" + (f":{extra}" if extra else "")


def _attr(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return "/".join(_attr(x) for x in v)
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float):
        return repr(v)
    return str(v)


def config_problem(op: Any, types: Any) -> dict[str, Any]:
    """The problem description of a GEMM root op (what ``problem_key`` and ``halbench tune`` read)."""
    keep = ("transpose_a", "transpose_b", "shared") if op.kind != "conv2d" else (
        "layout", "strides", "dilations", "pads", "pad_value")
    attrs = {}
    for k in keep:
        if k in op.attrs:
            v = op.attrs[k]
            attrs[k] = [int(x) for x in v] if isinstance(v, (list, tuple)) else (
                float(v) if k == "pad_value" else v)
    return {"kind": op.kind, "dtype": types[op.outputs[0]].dtype,
            "a": list(types[op.inputs[0]].shape), "b": list(types[op.inputs[1]].shape),
            "out": list(types[op.outputs[0]].shape), "attrs": attrs}


def tuning_for(target: Any, api: str) -> Tuning:
    """Normalise a ``targets.Target`` (or None, or a target name) for ``api``."""
    if target is None or isinstance(target, str):
        from halbench.compiler import targets as _targets

        target = _targets.default_target(api) if target is None else _targets.resolve_target(api, target)
    sub = getattr(target, "subgroup_size", None) or 32
    inv = int(getattr(target, "max_workgroup_invocations", 1024) or 1024)
    dynamic = 0
    if api in ("cuda", "hip") and getattr(target, "shared_memory_limit", None):
        # Static __shared__ arrays are limited to 48 KiB without opting in.
        shared = min(int(target.shared_memory_bytes or 48 * 1024), 48 * 1024)
        if api == "cuda":  # beyond that, dynamic shared memory (the driver opts the kernel in)
            optin = int(target.shared_memory_limit(api) or 0)
            dynamic = optin if optin > shared else 0
    else:
        shared = int(getattr(target, "shared_memory_bytes", 16 * 1024) or 16 * 1024)
    matrix = tuple(target.matrix_shapes(api)) if hasattr(target, "matrix_shapes") else ()
    arch = str(getattr(target, "arch", "") or "")
    # compile_glsl always targets Vulkan 1.3, i.e. SPIR-V 1.6 (tools.SPIRV_VERSION).
    name = f"spirv{SPIRV_VERSION}" if api == "vulkan" else arch
    sizes = tuple(int(s) for s in getattr(target, "subgroup_sizes", ()) or ()) or (int(sub),)
    return Tuning(api, name, arch, int(sub), inv, shared, int(getattr(target, "compute_units", 0) or 0),
                  matrix, bool(getattr(target, "fp16", False)), bool(getattr(target, "bf16", False)),
                  sizes, tuple(getattr(target, "gemm_configs", ()) or ()),
                  bool(getattr(target, "subgroup_arithmetic", False)) and api != "webgpu", dynamic,
                  bool(getattr(target, "subgroup_shuffle", False)) and api != "webgpu")


def fold_groups(n: int) -> tuple[int, int, int]:
    """``n`` workgroups as (x, y, 1) with x <= 65535; kernels linearise y * x + gx and guard."""
    n = max(int(n), 1)
    if n <= MAX_GROUPS_X:
        return (n, 1, 1)
    y = -(-n // MAX_GROUPS_X)
    return (-(-n // y), y, 1)


#: A skinny GEMM: at most this many rows (per batch; the fully connected layers of a batch-1 or
#: batch-8 CNN), at least SKINNY_MIN_N columns and SKINNY_MIN_K deep. It streams its B operand
#: (AlexNet's first one, 9216 x 4096: 151 MB of weights for a 1 x 4096 result) and is bound by
#: memory, not arithmetic.
SKINNY_ROWS = 8
SKINNY_MIN_N = 512
SKINNY_MIN_K = 1024


def skinny_tiles(m: int, n: int, k: int, conv: bool = False) -> GemmTiles | None:
    """The rule's tile for a skinny GEMM (None: not skinny): one or two rows by 256 columns, one
    row and two columns a thread, for up to 2 rows; 8 x 128 with 1 x 4 a thread for up to 8. Both
    256 threads. Measured on the H200 by ``halbench tune`` (docs/examples/h200-tune-classic-fc.txt),
    CUDA, against the old rule's 32x32 2x2 tiles: 1 x 25088 x 4096 (VGG-19's first) 0.430 -> 0.107
    ms and 1 x 9216 x 4096 (AlexNet's) 0.162 -> 0.046 with 2x256 and 16 K slices (split_k); at 8
    rows 2-2.5x with 8x64 / 8x128 tiles. Matmuls only (``conv``: an implicit-GEMM convolution
    with few output channels keeps the other tiles: unmeasured)."""
    if conv or m > SKINNY_ROWS or n < SKINNY_MIN_N or k < SKINNY_MIN_K:
        return None
    return GemmTiles(2, 256, 16, 1, 2) if m <= 2 else GemmTiles(8, 128, 16, 1, 4)


def gemm_tiles(t: Tuning, m: int, n: int, k: int, batch: int = 1, conv: bool = False) -> GemmTiles:
    """Tiles for an f32 GEMM of M x N x K.

    Big problems on big GPUs take 128x128 (8x8 per thread, 256 threads); the default is 64x64
    with 4x4 per thread; skinny or small problems drop to 32-wide tiles so that there is a wave
    of workgroups for the machine (a 1x768 x 768x768 GEMM of BERT would otherwise run on 12
    workgroups). Two waves of workgroups, and small tiles with 256 threads of 2x2 outputs: 4x4
    per thread on 64/128-thread small tiles with one wave made ResNet-50 b8 13% faster on the
    H100 but MobileNetV2 b1 38% and MiniLM-L6 b1 28% slower (fewer threads for latency-bound
    GEMMs), so the rule keeps more threads and `halbench tune` picks per problem by measurement.
    """
    skinny = skinny_tiles(m, n, k, conv)
    if skinny is not None and skinny.threads <= t.max_invocations and skinny.shared_bytes() <= t.shared_bytes // 2:
        return skinny
    cus = t.compute_units or 16
    # (128x64 and 64x64 tiles of 8x8 per thread measured 9-29% slower on the H100's ResNet-50
    # at batch 8 than these, on CUDA and Vulkan alike.)
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


def gemm_stages(t: Tuning, tiles: GemmTiles) -> int:
    """Shared-memory stages of the scalar f32 GEMM's cp.async pipeline on CUDA sm_80+ (0: none;
    the tiles are then staged through registers, as on every other target).

    With cp.async the global -> shared copies of the next ``stages - 1`` steps are in flight
    while a step multiplies, and no registers hold them: 3 stages where they fit the static
    shared-memory limit, else 2, else none.
    """
    if t.api != "cuda" or not is_sm(t.arch) or parse_sm(t.arch).major < 8:
        return 0
    per = tiles.shared_bytes()
    for stages in (3, 2):
        if stages * per <= t.shared_bytes:
            return stages
    return 0


#: The APIs whose scalar f32 GEMM can take ``GemmConfig.frag`` (gemm.j2 FRAG: a stage's BK
#: steps written out, step kk + 1's shared reads into one register set in flight during step
#: kk's FMAs on the other; CUDA C and GLSL); elsewhere (HIP, WebGPU: unmeasured) the rolled K
#: loop reads, then multiplies.
GEMM_FRAGMENTS = ("cuda", "vulkan")
#: The APIs whose scalar f32 GEMM stages its tiles through registers in GLSL, where
#: ``GemmConfig.double`` and ``vec_a`` apply (kernels._glsl_staging); CUDA stages by cp.async on
#: sm_80+, HIP and WebGPU keep the single-stage scalar staging.
GLSL_STAGED = ("vulkan",)

#: Threads per SM that a ``frag`` configuration of 256-thread blocks with thread tiles of 32+
#: outputs keeps resident on CUDA (gemm_min_blocks): two blocks, at most 128 registers a thread.
GEMM_RESIDENT_THREADS = 512


def gemm_min_blocks(t: Tuning, cfg: GemmConfig) -> int:
    """The minimum resident blocks per SM the scalar f32 GEMM asks ptxas for (``__launch_bounds__``'s
    second argument; 0: none). A ``frag`` configuration with thread tiles of 32+ outputs (8x4,
    8x8) holds 64+ accumulators and two fragment sets: without a bound ptxas may take more than
    128 registers and leave one 256-thread block per SM. Blocks of 256+ threads only: ptxas -v
    (sm_90) gave 128x64 blocks of 8x8 (128 threads) bounded to 4 blocks 40-270 bytes of spills,
    128x128 8x8 / 128x64 8x4 bounded to 2 none (1x1 convolutions) or 24 bytes (a 3x3 one's
    im2col addressing). CUDA only."""
    if (t.api != "cuda" or not cfg.frag or cfg.tm * cfg.tn < 32 or not GEMM_RESIDENT_THREADS
            or cfg.threads < 256):
        return 0
    return max(1, GEMM_RESIDENT_THREADS // cfg.threads)


#: Split-K: a GEMM whose output makes fewer than this many 32x32 tiles is split along K ...
SPLIT_K_TILES = 256
#: ... into at most this many slices, each at least this deep (a multiple of every BK) ...
SPLIT_K_MAX = 16
SPLIT_K_DEPTH = 128
#: ... while its partial sums stay under this many bytes.
SPLIT_K_BYTES = 64 << 20


def split_k(m: int, n: int, k: int, batch: int = 1, conv: bool = False) -> tuple[int, int]:
    """(slices, depth): how a small-output, deep GEMM is split along K, (1, k) when it is not.

    A batch-1 GEMM such as BERT's 128x384 projections or ResNet's last 3x3 convolutions (512 x 49
    outputs, K = 4608) makes a few dozen output tiles, so a few dozen workgroups walk a long K loop
    one latency-bound step after another while most of the GPU idles. Slicing K gives every slice
    its own workgroup; the last slice of a tile to finish adds the partial sums in slice order
    (deterministic) and runs the epilogue. The choice depends on the shape only, not the target:
    the bundle's schedule reserves the scratch memory once for every variant of the dispatch.
    """
    tiles = max(batch, 1) * -(-m // 32) * -(-n // 32)
    skinny = skinny_tiles(m, n, k, conv)
    if skinny is not None:  # counted in the skinny tile the rule takes (on targets it fits)
        tiles = max(batch, 1) * -(-m // skinny.bm) * -(-n // skinny.bn)
    if tiles >= SPLIT_K_TILES or k < 2 * SPLIT_K_DEPTH:
        return 1, k
    s = min(-(-SPLIT_K_TILES // tiles), k // SPLIT_K_DEPTH, SPLIT_K_MAX)
    per = -(-k // max(s, 1))  # K per slice, rounded up to whole 16-deep steps
    depth = -(-per // 16) * 16
    s = -(-k // depth)
    if s < 2 or 4 * s * max(batch, 1) * m * n > SPLIT_K_BYTES:
        return 1, k
    return s, depth


#: A tuned configuration may split a low-wave GEMM (fewer than SPLIT_K_ROOM_BELOW output tiles of
#: 32x32) deeper than the rule: the schedule reserves partial sums for as many slices as keep
#: slices x tiles within SPLIT_K_ROOM_TILES (16 MiB of f32 partial sums per dispatch at most).
SPLIT_K_ROOM_BELOW = 4 * SPLIT_K_TILES
SPLIT_K_ROOM_TILES = 16 * SPLIT_K_TILES


def split_k_room(m: int, n: int, k: int, batch: int = 1, conv: bool = False) -> int:
    """The most K slices the schedule reserves split-K scratch for (1: none): at least what
    ``split_k`` picks, and for a low-wave GEMM (its output fills less than a few waves of the
    machine) as many as a tuned configuration may choose. Measured on the H100 by hand at batch
    8: ResNet-50's 256 -> 256 3x3 convolutions at 14x14 (392 tiles, unsplit by the rule) 123 ->
    93-99 us with more slices, its 512 -> 512 ones at 7x7 (the rule's 2 slices) 129 -> 102 us.
    Like ``split_k`` a function of the shape alone (one reservation for every variant)."""
    rule = split_k(m, n, k, batch, conv)[0]
    tiles = max(batch, 1) * -(-m // 32) * -(-n // 32)
    if tiles >= SPLIT_K_ROOM_BELOW or k < 2 * SPLIT_K_DEPTH:
        return rule
    room = min(SPLIT_K_MAX, k // SPLIT_K_DEPTH, SPLIT_K_ROOM_TILES // tiles)
    while room > 1 and 4 * room * max(batch, 1) * m * n > SPLIT_K_BYTES:
        room -= 1
    return max(rule, room if room >= 2 else 1)


def matrix_shape(t: Tuning, in_dtype: str, acc: str = "f32") -> Any | None:
    """The matrix-unit shape for ``in_dtype`` inputs with ``acc`` accumulation, if the target has one."""
    for s in t.matrix:
        if s.a_type == in_dtype and s.b_type == in_dtype and s.c_type == acc and getattr(s, "scope", "subgroup") == "subgroup":
            return s
    return None


@dataclass(frozen=True)
class MmaTiles:
    """A matrix-unit GEMM tile: a grid of ``warps_m x warps_n`` subgroups, each owning
    ``frags_m x frags_n`` accumulator fragments of ``fm x fn`` (depth ``fk``)."""

    fm: int
    fn: int
    fk: int
    warps_m: int
    warps_n: int
    frags_m: int
    frags_n: int
    bk: int
    #: the smallest subgroup the driver may choose; fewer, wider subgroups then own ``slots``
    #: warp tiles each, so the kernel is right whatever size Vulkan picks
    min_subgroup: int = 32
    slots: int = 1
    #: shared-memory stages of the mma.sync GEMM's pipeline (gemm_mma_sync.j2): the copies of the
    #: next ``stages - 1`` K steps are in flight while one step multiplies
    stages: int = 2
    #: split-K slices of the mma.sync GEMM (1: none; at most what the schedule reserved scratch
    #: for, kernels.GemmSplit.room)
    split: int = 1

    @property
    def bm(self) -> int:
        return self.warps_m * self.frags_m * self.fm

    @property
    def bn(self) -> int:
        return self.warps_n * self.frags_n * self.fn

    @property
    def threads(self) -> int:
        return self.warps_m * self.warps_n * self.min_subgroup

    def shared_bytes(self, elem: int = 2) -> int:
        a = self.bm * (self.bk + 8) * elem
        b = self.bk * (self.bn + 8) * elem
        c = (self.threads // self.min_subgroup) * self.fm * (self.fn + 4) * 4
        return a + b + c


def mma_tiles(t: Tuning, shape: Any, m: int, n: int, k: int, batch: int = 1) -> MmaTiles | None:
    """Tiles for a matrix-unit GEMM with fragments of ``shape`` (m, n, k), or None when none fits.

    128x128 (8 subgroups of 64x32) for big problems (K deeper than MMA_SHALLOW_K), 64x64 (4 of
    32x32), then 32x32 (4 of 16x16) so that small problems still spread over the machine. One
    wave of workgroups is enough here (several 256-thread groups stay resident per SM), hence
    ``groups >= cus``.
    """
    if t.api == "cuda":
        sizes = (32,)  # the warp
    else:
        sizes = t.subgroup_sizes or (t.subgroup_size,)
    lo, hi = min(sizes), max(sizes)
    slots = max(hi // lo, 1)
    cus = t.compute_units or 16
    cands = [MmaTiles(shape.m, shape.n, shape.k, 2, 4, 4, 2, 2 * shape.k, lo, slots),
             MmaTiles(shape.m, shape.n, shape.k, 2, 2, 2, 2, 2 * shape.k, lo, slots),
             MmaTiles(shape.m, shape.n, shape.k, 2, 2, 1, 1, 2 * shape.k, lo, slots)]
    if k <= MMA_SHALLOW_K:
        cands = cands[1:]
    elem = 4 if shape.a_type == "tf32" else 2  # tf32 operands are staged as 32-bit floats
    ok = [c for c in cands if c.threads <= t.max_invocations and c.shared_bytes(elem) <= t.shared_bytes]
    return _filling_tile(ok, m, n, batch, cus)


#: mma_tiles: a GEMM this shallow (8 steps of 32 or fewer) gets no 128x128 tile: its epilogue, one
#: fragment at a time through shared memory, outweighs the K loop, and smaller tiles make more
#: workgroups to hide it. H100 Vulkan f16: ResNet-50 b8 2.786 -> 2.468 ms (its 1x1 convolutions of
#: K 64-256), MobileNetV2 b8 0.674 -> 0.655.
MMA_SHALLOW_K = 256


#: mma_split_slices: K slices of at least this depth, until the GEMM's workgroups give each
#: compute unit MMA_SPLIT_WARPS subgroups (several workgroups resident hide the staging's global
#: loads, which the matrix GEMM does not prefetch)
MMA_SPLIT_MIN_DEPTH = 128
MMA_SPLIT_WARPS = 16


def mma_split_slices(t: Tuning, tiles: MmaTiles, m: int, n: int, k: int, batch: int, room: int,
                     rule_slices: int = 1) -> int:
    """K slices for the matrix-unit GEMM on ``tiles`` (``room``: the most the schedule reserved
    scratch for, kernels.GemmSplit): at least the split rule's, then as few more as give every
    compute unit MMA_SPLIT_WARPS subgroups, none shallower than MMA_SPLIT_MIN_DEPTH."""
    cus = t.compute_units or 16
    groups = batch * -(-m // tiles.bm) * -(-n // tiles.bn)
    want = -(-MMA_SPLIT_WARPS * cus // max(tiles.threads // tiles.min_subgroup, 1))
    best = max(rule_slices, 1)
    for s in range(best, max(room, 1) + 1):
        per = -(-k // s)
        depth = -(-per // tiles.bk) * tiles.bk
        if s > best and depth < MMA_SPLIT_MIN_DEPTH:
            break
        best = -(-k // depth)
        if groups * best >= want:
            break
    return best


def _filling_tile(ok: list[MmaTiles], m: int, n: int, batch: int, cus: int) -> MmaTiles | None:
    """The first (largest) of ``ok`` whose blocks cover every compute unit without computing
    more than half again the output in padding, else the smallest."""
    for c in ok:
        groups = batch * -(-m // c.bm) * -(-n // c.bn)
        waste = (-(-m // c.bm) * c.bm * -(-n // c.bn) * c.bn) / max(m * n, 1)
        if groups >= cus and waste < 1.5:
            return c
    return ok[-1] if ok else None


def mma_fragment(t: Tuning, in_dtype: str) -> Any | None:
    """The fragment shape the matrix-unit GEMM uses for ``in_dtype`` inputs (f32 accumulation),
    or None: the scalar GEMM then runs.

    - CUDA: WMMA m16n16k16 (half from sm_70, bf16 from sm_80) whenever the target lists a
      subgroup-scope shape for the type; on sm_80+ ptxas lowers it to mma.sync m16n8k16 pairs.
      ``tf32`` (f32 operands under ``--precision tf32``): WMMA m16n16k8 ``precision::tf32`` on
      targets that list a tf32 shape (sm_80+).
    - Vulkan: the target's own cooperative-matrix shape, f16 only (glslang 13 has no bf16
      cooperative matrices).
    - HIP: none yet (rocWMMA is not in the shared C subset).
    """
    from halbench.probe.info import MatrixShape

    if t.api == "cuda" and in_dtype in ("f16", "bf16"):
        if any(s.a_type == in_dtype and s.c_type == "f32" and getattr(s, "scope", "subgroup") == "subgroup"
               for s in t.matrix):
            return MatrixShape(16, 16, 16, in_dtype, in_dtype, "f32", "f32")
        return None
    if t.api == "cuda" and in_dtype == "tf32":
        if any(s.a_type == "tf32" and s.c_type == "f32" and getattr(s, "scope", "subgroup") == "subgroup"
               for s in t.matrix):
            return MatrixShape(16, 16, 8, "tf32", "tf32", "f32", "f32")
        return None
    if t.api == "vulkan" and in_dtype == "f16":
        s = matrix_shape(t, in_dtype)
        # Shared-memory strides and offsets stay 16-byte multiples only for multiples of 8.
        if s is not None and s.m % 8 == 0 and s.n % 8 == 0 and s.k % 8 == 0:
            return s
    return None


#: Padding of the shared rows of A and B in the mma.sync GEMM (gemm_mma_sync.j2), in staged
#: elements, so fragment reads fall in distinct banks: 16 bytes for ldmatrix's eight 16-byte row
#: reads (f16 / bf16); for tf32's scalar reads, A rows (read at row g, column q) 4 banks apart
#: and B rows (row q, column g) 8 apart.
SYNC_PAD = {"f16": (8, 8), "bf16": (8, 8), "tf32": (4, 8)}


def mma_sync_ok(t: Tuning) -> bool:
    """Whether the CUDA target runs mma.sync m16n8k16 f16 / bf16 and m16n8k8 tf32, ldmatrix and
    cp.async (sm_80+): the matrix GEMM is then gemm_mma_sync.j2 instead of WMMA."""
    from halbench.arch import is_sm, parse_sm

    return t.api == "cuda" and is_sm(t.arch) and parse_sm(t.arch).major >= 8


def mma_sync_shared_bytes(kind: str, bm: int, bn: int, bk: int, stages: int = 2) -> int:
    """Shared memory of the mma.sync GEMM: ``stages`` stages of A (bm x bk) and B (bk x bn), padded."""
    es, (pa, pb) = (4 if kind == "tf32" else 2), SYNC_PAD[kind]
    return stages * es * (bm * (bk + pa) + bk * (bn + pb))


#: Static shared memory a kernel may declare without opting in (CUDA): the mma.sync GEMM asks for
#: dynamic shared memory only beyond it.
STATIC_SHARED_BYTES = 48 * 1024


def mma_sync_dynamic(t: Tuning, tiles: MmaTiles, kind: str) -> int:
    """Bytes of dynamic shared memory the mma.sync GEMM with ``tiles`` takes (0: it declares its
    stages as static arrays, within 48 KiB)."""
    need = mma_sync_shared_bytes(kind, tiles.bm, tiles.bn, tiles.bk, tiles.stages)
    return need if need > STATIC_SHARED_BYTES else 0


def mma_sync_fits(t: Tuning, tiles: MmaTiles, kind: str) -> bool:
    """Whether the target runs ``tiles``: its threads, and its stages within the static limit or,
    where the target opts in to dynamic shared memory (Tuning.dynamic_shared_bytes), within that."""
    need = mma_sync_shared_bytes(kind, tiles.bm, tiles.bn, tiles.bk, tiles.stages)
    room = max(t.shared_bytes, t.dynamic_shared_bytes)
    return tiles.threads <= t.max_invocations and 2 <= tiles.stages <= 6 and need <= room and (
        tiles.frags_n % 2 == 0 and tiles.bk % (8 if kind == "tf32" else 16) == 0)


def mma_sync_tiles(t: Tuning, kind: str, m: int, n: int, k: int, batch: int = 1, *,
                   conv: bool = False, gathered: bool = False) -> MmaTiles | None:
    """Tiles of the mma.sync GEMM (m16n8 accumulator tiles, ``kind`` f16 / bf16 / tf32 operands):
    128x128 (8 warps of 64x32), 64x64 (4 of 32x32), 64x32 (4 of 32x16), 32x32 (4 of 16x16), the
    first to make a wave of blocks without wasting half of them (as mma_tiles). Each is as deep
    (BK) as two stages allow in the 48 KiB of static shared memory, so that a small tile still
    does a useful amount of work per barrier: f16 / bf16 32, 64, 64, 128; tf32 (staged as f32)
    half that. Measured on the H100 (ResNet-50 b8 f16, all at BK 32 and 128x128 / 64x64 / 32x32
    only: 2.71 ms; these: 2.36); a lower bar of half a wave of blocks measured 10% slower.

    A convolution (``conv``) on an sm_90+ target that opts in to dynamic shared memory takes
    :func:`mma_sync_conv_tiles` instead, where one of its tiles applies (``gathered``: its B operand is an im2col of a kernel
    larger than 1x1 staged through registers)."""
    if conv and _pipelined(t):
        tiles = mma_sync_conv_tiles(t, kind, m, n, k, batch, gathered)
        if tiles is not None:
            return tiles
    fk = 8 if kind == "tf32" else 16
    cus = t.compute_units or 16
    d = 1 if kind == "tf32" else 2  # BK in units of 16: f32 staging holds half as deep
    cands = [MmaTiles(16, 8, fk, 2, 4, 4, 4, 16 * d),
             MmaTiles(16, 8, fk, 2, 2, 2, 4, 32 * d),
             MmaTiles(16, 8, fk, 2, 2, 2, 2, 32 * d),
             MmaTiles(16, 8, fk, 2, 2, 1, 2, 64 * d)]
    ok = [c for c in cands if mma_sync_fits(t, c, kind)]
    return _filling_tile(ok, m, n, batch, cus)


#: Pipeline stages of a convolution's mma.sync GEMM where dynamic shared memory allows more than
#: two (3 and 4 measured alike on the H100).
MMA_SYNC_STAGES = 3


def _pipelined(t: Tuning) -> bool:
    """Whether convolutions take the pipelined rule (mma_sync_conv_tiles, mma_sync_split): CUDA
    targets with dynamic shared memory of sm_90 on, where it was measured (the H100); sm_80 / 86
    / 89 keep the two-stage rule until measured there."""
    return bool(t.dynamic_shared_bytes) and is_sm(t.arch) and parse_sm(t.arch).major >= 9


def _blocks(tiles: MmaTiles, m: int, n: int, batch: int) -> int:
    return batch * -(-m // tiles.bm) * -(-n // tiles.bn)


def _waste(c: MmaTiles, m: int, n: int) -> float:
    return (-(-m // c.bm) * c.bm * -(-n // c.bn) * c.bn) / max(m * n, 1)


def mma_sync_conv_tiles(t: Tuning, kind: str, m: int, n: int, k: int, batch: int = 1,
                        gathered: bool = False) -> MmaTiles | None:
    """Tiles of a convolution's mma.sync GEMM where the CUDA target opts in to dynamic shared
    memory: three stages, BK 32 (tf32) / 64 (f16, bf16), and the first of 128x128 (tf32 only),
    128x64 (4 warps of 64x32), 64x64, 64x32 whose blocks reach its bar without wasting half:
    a wave for 128x128, 70% of one for the others, two waves for an f16 / bf16 convolution whose
    B operand is ``gathered`` (a 3x3 im2col staged through registers: more, smaller blocks hide
    its loads) except for 64x32. None (the two-stage rule then) where none does, or where K is
    under MMA_CONV_DEPTH: at batch 1 (ResNet-50) and for MobileNetV2's narrow convolutions this
    rule's tiles measured 7-18% slower in all than the two-stage rule's. Measured on the H100 per convolution of ResNet-50 b8 (scripts/mma_sweep.py):
    a tf32 convolution's operands are all copied by cp.async, so larger tiles win there (128x64
    over the two-stage rule's 64x64 at 28x28: 39 vs 47 us), an f16 3x3 one's smaller (64x32 at
    28x28: 32 vs 40 us). Warps of 64x64 (half the shared reads per mma) measured slower per
    convolution except tf32 1x1 ones whose 128x128 blocks make a wave (4 warps of 64x64 instead
    of 8 of 64x32: 256 -> 128 at 56x56 37.9 -> 31.1 us, 128 -> 512 at 28x28 27.5 -> 23.8), but
    ResNet-50 b8 as a whole gained 0.3% with them (over the ldmatrix.x4 tf32 A fragment that
    gemm_mma_sync.j2 records: 1.853 -> 1.848 ms), within noise: not taken."""
    fk = 8 if kind == "tf32" else 16
    cus = t.compute_units or 16
    bk = 32 if kind == "tf32" else 64
    st = MMA_SYNC_STAGES
    if k < MMA_CONV_DEPTH:
        return None
    small = 2 * cus if gathered and kind != "tf32" else 0.7 * cus
    cands = [(MmaTiles(16, 8, fk, 2, 2, 4, 4, bk, stages=st), small),
             (MmaTiles(16, 8, fk, 2, 2, 2, 4, bk, stages=st), small),
             (MmaTiles(16, 8, fk, 2, 2, 2, 2, bk, stages=st), 0.7 * cus)]
    if kind == "tf32":
        cands.insert(0, (MmaTiles(16, 8, fk, 2, 4, 4, 4, bk, stages=st), cus))
    for c, bar in cands:
        if mma_sync_fits(t, c, kind) and _blocks(c, m, n, batch) >= bar and _waste(c, m, n) < 1.5:
            return c
    return None


#: A convolution shallower than this keeps the two-stage rule (mma_sync_conv_tiles).
MMA_CONV_DEPTH = 128


#: A convolution's mma.sync GEMM at least this deep whose blocks make less than two waves is
#: split along K (mma_sync_split) ...
MMA_SPLIT_DEPTH = 2048
#: ... into at most this many slices.
MMA_SPLIT_MAX = 3


def mma_sync_split(t: Tuning, tiles: MmaTiles, kind: str, m: int, n: int, k: int, batch: int,
                   room: int, conv: bool = False) -> MmaTiles:
    """``tiles``, or the tiles and split-K slices a deep, low-wave convolution takes on a target
    with dynamic shared memory: 64x32 blocks split in up to MMA_SPLIT_MAX slices (at most
    ``room``, what the schedule reserved scratch for; 1: none) for four waves of blocks.
    Measured on the H100 (ResNet-50 b8, tf32 / f16 us): 256 -> 256 3x3 at 14x14 59 / 46 -> 52 /
    42, 512 -> 512 3x3 at 7x7 84 / 67 -> 59 / 46."""
    cus = t.compute_units or 16
    if not (conv and _pipelined(t)) or k < MMA_SPLIT_DEPTH or room < 2:
        return tiles
    if _blocks(tiles, m, n, batch) >= 2 * cus:
        return tiles
    fk = 8 if kind == "tf32" else 16
    small = MmaTiles(16, 8, fk, 2, 2, 2, 2, 32 if kind == "tf32" else 64, stages=MMA_SYNC_STAGES)
    if not mma_sync_fits(t, small, kind) or _blocks(small, m, n, batch) < 0.7 * cus:
        return tiles  # batch 1: as the rule's (ResNet-50's 3x3 at 7x7 makes 32 such blocks)
    split = min(room, MMA_SPLIT_MAX, -(-4 * cus // _blocks(small, m, n, batch)))
    return replace(small, split=split) if split >= 2 else tiles


def mma_sync_takes_split(t: Tuning, tiles: MmaTiles, m: int, n: int, k: int, batch: int = 1) -> bool:
    """Whether a GEMM that split-K would spread over the machine runs on the (unsplit) mma.sync
    GEMM instead of the rounded scalar split GEMM: when its blocks make half a wave, or its K
    loop is short (at most 24 steps of BK). Measured on the H100 at batch 1 (µs, mma.sync vs
    scalar split): ResNet-50's 3x3 convs of stage 2 (100 blocks) 25 vs 34, the 1x1 ones of stage 3
    (56 blocks, tf32 16 steps) 15 vs 21, but stage 4's 3x3 (32 blocks, f16 36 steps) 58 vs 37 and
    its 1x1 (tf32 32 steps) 40 vs 20; at batch 8 stage 4's 3x3 (104 blocks) 93 vs 148."""
    groups = batch * -(-m // tiles.bm) * -(-n // tiles.bn)
    return 2 * groups >= (t.compute_units or 16) or -(-k // tiles.bk) <= 24


@dataclass(frozen=True)
class WgmmaTiles:
    """A tile of the wgmma GEMM (gemm_wgmma.j2, sm_90a): ``nwg`` warpgroups of one m64 slab each
    (BM = 64 * nwg) by ``bn`` columns, ``stages`` shared stages of 128 bytes of K per row (BK 64
    f16 / bf16, 32 tf32), ``inflight`` wgmma groups left running across a K step (the copies then
    run ``stages - 1 - inflight`` steps ahead), ``split`` split-K slices."""

    nwg: int
    bn: int
    stages: int = 4
    inflight: int = 1
    split: int = 1

    @property
    def bm(self) -> int:
        return 64 * self.nwg

    @property
    def threads(self) -> int:
        return 128 * self.nwg

    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * 128

    def shared_bytes(self) -> int:
        return self.stages * self.stage_bytes()


#: Most stages of the wgmma GEMM whose operands all come by cp.async, and of one that converts an
#: operand in registers; its split-K bounds: a GEMM at least WGMMA_SPLIT_DEPTH deep whose blocks
#: make less than a wave is split in up to WGMMA_SPLIT_MAX slices. Measured on the H100 (ResNet-50
#: b8, whole model, A/B against mma.sync in one session): tf32 4 stages 2.006 ms, 6 stages 2.156
#: (mma.sync 1.78); f16 4 stages of 128x128 with loads stored in the same step 2.167, the loads
#: a step ahead and tiles for two waves 1.997 (mma.sync 1.60).
WGMMA_STAGES = 4
WGMMA_REG_STAGES = 4
#: wgmma groups left running across a K step where there are 3 stages or more (else none)
WGMMA_INFLIGHT = 1
#: the waves of blocks a tile must make to be taken (copied operands / converted ones)
WGMMA_WAVES = 1
WGMMA_REG_WAVES = 2
WGMMA_SPLIT_DEPTH = 1024
WGMMA_SPLIT_MAX = 4
#: Whether convolutions (NCHW) and matmuls take the wgmma GEMM on sm_90a targets. It computes
#: both (tests/compiler/test_wgmma.py) but measured slower than mma.sync on the H100 (ResNet-50 b8
#: tf32 2.006 vs 1.78 ms, f16 1.997 vs 1.60: WGMMA_STAGES): its tf32 im2col B must be K-major, so
#: a 1x1 convolution's pixel runs come by 4-byte copies (mma.sync: 16-byte), and f16 converts
#: both f32 operands in registers on the way; off until it wins.
WGMMA_CONVS = False
WGMMA_MATMULS = False

#: The matrix-unit GEMM of gemm_mma.j2 (Vulkan cooperative matrix; CUDA WMMA before sm_80) splits
#: K where the rule splits the scalar GEMM's (split_k), instead of leaving those GEMMs to the
#: scalar one under --precision, and beyond the rule where more slices give the compute units
#: enough resident subgroups (mma_split_slices). H100 Vulkan f16: ResNet-50 b1 1.30 -> 0.83 ms,
#: b8 3.10 -> 2.78, MiniLM-L6 b1 0.63 -> 0.43, MobileNetV2 b8 0.76 -> 0.66.
MMA_SPLIT_K = True


def wgmma_ok(t: Tuning, kind: str) -> bool:
    """Whether the CUDA target runs Hopper's warpgroup MMA (an arch-specific sm_90a target: it
    lists warpgroup-scope matrix shapes) with dynamic shared memory, for ``kind`` operands (f16,
    bf16, tf32)."""
    wg = any(getattr(s, "scope", "subgroup") == "warpgroup" for s in t.matrix)
    return t.api == "cuda" and wg and bool(t.dynamic_shared_bytes) and kind in ("f16", "bf16", "tf32")


def wgmma_tiles(t: Tuning, m: int, n: int, k: int, batch: int = 1, room: int = 1,
                copied: bool = True) -> WgmmaTiles | None:
    """Tiles of the wgmma GEMM: the first of 128x128, 128x64, 64x128, 64x64 (BM x BN) whose blocks
    make a wave (two where an operand is converted in registers: not ``copied``) without computing
    half again the output in padding, else 64x64; as many stages (up to WGMMA_STAGES, or
    WGMMA_REG_STAGES) as the target's dynamic shared memory holds; split along K (at most
    ``room`` slices, what the schedule reserved scratch for) where the blocks make under a wave
    and K is at least WGMMA_SPLIT_DEPTH, for about one and a half waves of blocks."""
    cus = t.compute_units or 16
    cands = [WgmmaTiles(2, 128), WgmmaTiles(2, 64), WgmmaTiles(1, 128), WgmmaTiles(1, 64)]
    bar = cus * (WGMMA_WAVES if copied else WGMMA_REG_WAVES)
    pick = cands[-1]
    for c in cands:
        if _blocks(c, m, n, batch) >= bar and _waste(c, m, n) < 1.5:
            pick = c
            break
    most = WGMMA_STAGES if copied else WGMMA_REG_STAGES
    stages = min(most, (max(t.dynamic_shared_bytes, t.shared_bytes) - 16) // pick.stage_bytes())
    if stages < 2 or pick.threads > t.max_invocations:
        return None
    pick = replace(pick, stages=stages, inflight=WGMMA_INFLIGHT if stages >= 3 else 0)
    blocks = _blocks(pick, m, n, batch)
    if blocks < cus and k >= WGMMA_SPLIT_DEPTH and room >= 2:
        split = min(room, WGMMA_SPLIT_MAX, -(-3 * cus // (2 * blocks)))
        if split >= 2:
            pick = replace(pick, split=split)
    return pick


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
