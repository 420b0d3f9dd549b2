"""Compiler targets: one table of the GPUs halbench knows, and how names resolve to them.

A target says what codegen may assume about a device (API, subgroup sizes, workgroup limits,
shared memory, matrix units, narrow types) and what the roofline may expect of it (peak TFLOP/s
per element type, memory GB/s). Three kinds of entry:

- ``arch``: an instruction-set level (``sm_90``, ``gfx1100``, ``valhall4``, ``adreno``,
  ``llvmpipe``), reachable also by its code name (``hopper``, ``rdna3``);
- ``product``: a board (``h100``, ``rx7900xtx``, ``mali-g715``): its arch's properties plus its
  own published peaks, compute-unit count and memory bandwidth;
- ``generic``: the safe defaults used when no target is given.

Peaks are dense (no structured sparsity), at boost clock, as the vendors publish them. ``f32``
is the rate without tensor / matrix units (packed FP32 counted where the vendor counts it, as on
CDNA); ``f16``, ``bf16``, ``tf32``, ``f8`` are matrix-unit rates with f32 accumulation; ``i8``
is TOP/s with i32 accumulation. A key that is absent was not published for that product.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from halbench.errors import HalbenchError, UserError
from halbench.probe.cuda import mma_shapes as _cuda_mma
from halbench.probe.hip import mma_shapes as _hip_mma
from halbench.probe.info import DeviceInfo, Features, Identity, Limits, MatrixShape
from halbench.tools import SPIRV_VERSION
from halbench.uri import DeviceURI, normalize_uuid, parse_uri

__all__ = [
    "CODE_NAMES",
    "GENERIC_VULKAN",
    "TARGETS",
    "Target",
    "annotate_dump",
    "apis",
    "by_arch",
    "default_target",
    "format_table",
    "list_targets",
    "pick_dump_device",
    "published_peaks",
    "recommended_target",
    "resolve_target",
    "target_from_device",
]



def apis() -> tuple[str, ...]:
    """The APIs that take a target: every compiler backend with a target option."""
    from halbench.compiler.backends import backends

    return tuple(b.name for b in backends().values() if b.target_option)


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # "arch" | "product" | "generic" | "probed"
    vendor: str  # "nvidia", "amd", "arm", "qualcomm", "mesa", "generic"
    apis: tuple[str, ...]
    arch: str  # the LLVM / driver arch: "sm_90", "gfx942", "valhall4", "adreno", "llvmpipe"
    code_name: str = ""
    #: arch entries: the known products built on it; product entries: their own name.
    products: tuple[str, ...] = ()
    description: str = ""
    #: Subgroup (warp / wavefront) sizes the hardware runs, preferred first. Empty: unknown,
    #: and generated code must not depend on it.
    subgroup_sizes: tuple[int, ...] = (32,)
    #: Subgroup arithmetic (subgroupAdd / __shfl_xor_sync / __shfl_xor) for reductions; a Vulkan
    #: driver may lack it (VK_SUBGROUP_FEATURE_ARITHMETIC_BIT is optional), so unknown means no.
    subgroup_arithmetic: bool = False
    #: Subgroup shuffles (subgroupShuffleXor / __shfl_xor_sync / __shfl_xor), optional on Vulkan
    #: (VK_SUBGROUP_FEATURE_SHUFFLE_BIT) apart from arithmetic: unknown means no.
    subgroup_shuffle: bool = False
    max_workgroup_size: tuple[int, int, int] = (1024, 1024, 64)
    max_workgroup_invocations: int = 1024
    #: Shared memory per workgroup without opting in (what Vulkan reports).
    shared_memory_bytes: int = 48 * 1024
    #: The most a CUDA / HIP kernel can opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize).
    shared_memory_optin_bytes: int | None = None
    #: CUDA mma.sync / wmma / wgmma and HIP MFMA / WMMA shapes.
    mma: tuple[MatrixShape, ...] = ()
    #: Vulkan VK_KHR_cooperative_matrix shapes a conformant driver reports for this hardware.
    cooperative_matrix: tuple[MatrixShape, ...] = ()
    fp16: bool = True  # native f16 arithmetic
    bf16: bool = False  # bf16 arithmetic or matrix units
    int8: bool = False  # int8 dot products (dp4a, v_dot4, SPIR-V integer dot) or matrix units
    fp8: bool = False  # f8 (e4m3 / e5m2) matrix units
    spirv_version: str | None = None  # for Vulkan targets
    compute_units: int | None = None  # SMs, CUs, shader cores
    #: Dense peak TFLOP/s (TOP/s for integers) per element type, as (dtype, value) pairs.
    peak_tflops: tuple[tuple[str, float], ...] = ()
    memory_gbps: float | None = None
    #: Where the peaks come from.
    source: str = ""
    aliases: tuple[str, ...] = ()
    #: Measured GEMM configurations (problem key, codegen.tuning.GemmConfig) the compiler attaches
    #: from the tuning cache for one compile (compiler/tuning_cache.py); never in the table.
    gemm_configs: tuple[tuple[str, Any], ...] = ()

    @property
    def subgroup_size(self) -> int:
        """The preferred subgroup size; 32 as a tiling hint when it is unknown."""
        return self.subgroup_sizes[0] if self.subgroup_sizes else 32

    def supports(self, api: str) -> bool:
        return api in self.apis

    def peak(self, dtype: str) -> float | None:
        """Dense peak TFLOP/s for ``dtype`` (``f32``, ``f16``, ``bf16``, ``i8``, ...), if published."""
        return dict(self.peak_tflops).get(dtype)

    def matrix_shapes(self, api: str) -> tuple[MatrixShape, ...]:
        """The matrix-unit shapes codegen may use through ``api``."""
        return self.cooperative_matrix if api == "vulkan" else self.mma

    def shared_memory_limit(self, api: str) -> int:
        """Shared memory one workgroup may use through ``api``: CUDA and HIP may opt in to more."""
        if api in ("cuda", "hip") and self.shared_memory_optin_bytes:
            return self.shared_memory_optin_bytes
        return self.shared_memory_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("gemm_configs")
        d["peak_tflops"] = dict(self.peak_tflops)
        for key in ("apis", "products", "subgroup_sizes", "max_workgroup_size", "aliases"):
            d[key] = list(d[key])
        d["mma"] = [asdict(s) for s in self.mma]
        d["cooperative_matrix"] = [asdict(s) for s in self.cooperative_matrix]
        return d


# -- building blocks ---------------------------------------------------------------------------

KIB = 1024


def _shapes(rows: Iterable[tuple[int, int, int, str, str]]) -> tuple[MatrixShape, ...]:
    return tuple(MatrixShape(m, n, k, t, t, acc, acc) for m, n, k, t, acc in rows)


# What NVIDIA's driver reports through VK_KHR_cooperative_matrix on Turing and later: f16 with
# f16 or f32 accumulation, 8-bit integers with i32 accumulation.
_NV_COOP = _shapes([(16, 16, 16, "f16", "f16"), (16, 16, 16, "f16", "f32"),
                    (16, 16, 32, "i8", "i32"), (16, 16, 32, "u8", "i32")])
# RADV / AMDVLK on RDNA3 and RDNA4 (WMMA underneath), one wave32 subgroup.
_AMD_COOP = _shapes([(16, 16, 16, "f16", "f16"), (16, 16, 16, "f16", "f32"), (16, 16, 16, "i8", "i32")])

# Shared memory a CUDA block may opt in to, per compute capability (CUDA C++ Programming Guide,
# "Technical Specifications per Compute Capability").
_CUDA_OPTIN_KIB = {"6": 48, "7.0": 96, "7.2": 96, "7.5": 64, "8.0": 163, "8.6": 99, "8.7": 163,
                   "8.9": 99, "9.0": 227, "10.0": 227, "12.0": 99}


def _nvidia(arch: str, code: str, description: str, products: tuple[str, ...] = (),
            aliases: tuple[str, ...] = ()) -> Target:
    digits = arch[3:].rstrip("a")
    major, minor = int(digits[:-1]), int(digits[-1])
    mma = _cuda_mma(major, minor)
    if not arch.endswith("a"):
        # wgmma needs the arch-specific sm_90a target; plain sm_90 PTX cannot use it.
        mma = tuple(s for s in mma if s.scope != "warpgroup")
    optin = _CUDA_OPTIN_KIB.get(f"{major}.{minor}", _CUDA_OPTIN_KIB.get(str(major), 48))
    return Target(
        name=arch, kind="arch", vendor="nvidia", apis=("vulkan", "cuda"), arch=arch, code_name=code,
        products=products, description=description, subgroup_sizes=(32,), subgroup_arithmetic=True,
        subgroup_shuffle=True,
        max_workgroup_size=(1024, 1024, 64), max_workgroup_invocations=1024,
        shared_memory_bytes=48 * KIB, shared_memory_optin_bytes=optin * KIB, mma=mma,
        cooperative_matrix=_NV_COOP if (major, minor) >= (7, 5) else (),
        fp16=True, bf16=major >= 8, int8=(major, minor) >= (6, 1), fp8=(major, minor) >= (8, 9),
        spirv_version=SPIRV_VERSION, aliases=aliases)


def _amd(arch: str, code: str, description: str, products: tuple[str, ...] = (),
         aliases: tuple[str, ...] = ()) -> Target:
    rdna = arch.startswith(("gfx10", "gfx11", "gfx12"))
    # Instinct (CDNA) boards ship no Vulkan driver; GCN5 and RDNA have RADV and AMDVLK.
    cdna = arch in ("gfx908", "gfx90a") or arch.startswith(("gfx94", "gfx95"))
    wmma = arch.startswith(("gfx11", "gfx12"))
    return Target(
        name=arch, kind="arch", vendor="amd", apis=("hip",) if cdna else ("vulkan", "hip"), arch=arch,
        code_name=code, products=products, description=description,
        # RDNA runs wave32 and wave64 (HIP picks wave32); GCN and CDNA are wave64 only.
        subgroup_sizes=(32, 64) if rdna else (64,), subgroup_arithmetic=True, subgroup_shuffle=True,
        max_workgroup_size=(1024, 1024, 1024), max_workgroup_invocations=1024,
        shared_memory_bytes=(160 if arch == "gfx950" else 64) * KIB, mma=_hip_mma(arch),
        cooperative_matrix=_AMD_COOP if wmma else (),
        fp16=True, bf16=arch == "gfx90a" or arch.startswith(("gfx94", "gfx95", "gfx11", "gfx12")),
        # v_dot4 int8 arrived with gfx906 (Vega 20) and gfx1011; gfx900 and gfx1010 lack it.
        int8=arch not in ("gfx900", "gfx1010"),
        fp8=arch.startswith(("gfx94", "gfx95", "gfx12")),
        spirv_version=None if cdna else SPIRV_VERSION, aliases=aliases)


def _mobile(vendor: str, arch: str, code: str, description: str, subgroup: tuple[int, ...],
            invocations: int, products: tuple[str, ...] = ()) -> Target:
    return Target(
        name=arch, kind="arch", vendor=vendor, apis=("vulkan",), arch=arch, code_name=code,
        products=products, description=description, subgroup_sizes=subgroup,
        max_workgroup_size=(invocations, invocations, invocations),
        max_workgroup_invocations=invocations, shared_memory_bytes=32 * KIB,
        fp16=True, int8=True, spirv_version=SPIRV_VERSION)


def _product(base: Target, name: str, description: str, *, cus: int | None = None,
             gbps: float | None = None, source: str = "", aliases: tuple[str, ...] = (),
             **peaks: float) -> Target:
    return dataclasses.replace(
        base, name=name, kind="product", products=(name,), description=description,
        compute_units=cus, memory_gbps=gbps, peak_tflops=tuple(peaks.items()), source=source,
        aliases=aliases)


# -- the table ---------------------------------------------------------------------------------

_ARCHS: list[Target] = [
    _nvidia("sm_60", "pascal", "Pascal GP100", ("p100",)),
    _nvidia("sm_61", "pascal", "Pascal GP10x (GeForce 10, Tesla P4/P40): dp4a"),
    _nvidia("sm_62", "pascal", "Pascal Tegra (Jetson TX2)"),
    _nvidia("sm_70", "volta", "Volta GV100: first tensor cores", ("v100",)),
    _nvidia("sm_72", "volta", "Volta Tegra (Jetson Xavier)"),
    _nvidia("sm_75", "turing", "Turing TU10x", ("t4", "rtx2070super")),
    _nvidia("sm_80", "ampere", "Ampere GA100: bf16 and tf32 tensor cores", ("a100",)),
    _nvidia("sm_86", "ampere", "Ampere GA10x", ("a10", "rtx3080ti", "rtx3090")),
    _nvidia("sm_87", "ampere", "Ampere Tegra (Jetson Orin)"),
    _nvidia("sm_89", "ada", "Ada Lovelace AD10x: f8 tensor cores", ("l4", "rtx4090"),
            aliases=("ada-lovelace", "lovelace")),
    _nvidia("sm_90", "hopper", "Hopper GH100 (portable PTX: mma.sync, no wgmma)", ("h100", "h200")),
    _nvidia("sm_90a", "hopper", "Hopper GH100, arch-specific: wgmma and setmaxnreg", ("h100", "h200")),
    _nvidia("sm_100", "blackwell", "Blackwell GB100/GB200 (B200)"),
    _nvidia("sm_120", "blackwell", "Blackwell GB20x (GeForce RTX 50)"),
    _amd("gfx900", "gcn5", "GCN5 Vega 10 (Vega 56/64, MI25)", ("mi25",), aliases=("vega", "vega10")),
    _amd("gfx906", "gcn5", "GCN5 Vega 20 (Radeon VII, MI50/MI60): v_dot4", ("mi50", "mi60"), aliases=("vega20",)),
    _amd("gfx908", "cdna1", "CDNA1 (MI100): first MFMA matrix cores", ("mi100",)),
    _amd("gfx90a", "cdna2", "CDNA2 (MI200): bf16 MFMA, f64 matrix", ("mi210", "mi250x")),
    _amd("gfx940", "cdna3", "CDNA3 early silicon (MI300 engineering parts)"),
    _amd("gfx941", "cdna3", "CDNA3 early silicon (MI300 engineering parts)"),
    _amd("gfx942", "cdna3", "CDNA3 (MI300X/MI300A/MI325X): f8 (FNUZ) MFMA", ("mi300x",)),
    _amd("gfx950", "cdna4", "CDNA4 (MI350X/MI355X): OCP f8, 160 KiB LDS"),
    _amd("gfx1010", "rdna1", "RDNA1 Navi 10 (RX 5700 XT)", aliases=("navi10",)),
    _amd("gfx1011", "rdna1", "RDNA1 Navi 12"),
    _amd("gfx1012", "rdna1", "RDNA1 Navi 14 (RX 5500)"),
    _amd("gfx1030", "rdna2", "RDNA2 Navi 21 (RX 6800/6900)", aliases=("navi21",)),
    _amd("gfx1031", "rdna2", "RDNA2 Navi 22 (RX 6700)"),
    _amd("gfx1032", "rdna2", "RDNA2 Navi 23 (RX 6600)"),
    _amd("gfx1100", "rdna3", "RDNA3 Navi 31: WMMA", ("rx7900xtx", "rx7900xt", "w7900"), aliases=("navi31",)),
    _amd("gfx1101", "rdna3", "RDNA3 Navi 32 (RX 7800/7700)", ("rx7800xt", "rx7700xt"), aliases=("navi32",)),
    _amd("gfx1102", "rdna3", "RDNA3 Navi 33 (RX 7600)"),
    _amd("gfx1103", "rdna3", "RDNA3 Phoenix APU"),
    _amd("gfx1150", "rdna3.5", "RDNA3.5 Strix Point APU"),
    _amd("gfx1151", "rdna3.5", "RDNA3.5 Strix Halo APU"),
    _amd("gfx1200", "rdna4", "RDNA4 Navi 44 (RX 9060)", ("rx9060xt",), aliases=("navi44",)),
    _amd("gfx1201", "rdna4", "RDNA4 Navi 48: WMMA with f8", ("rx9070xt", "rx9070"), aliases=("navi48",)),
    # Mali: wave (warp) of 16, 512 invocations, 32 KiB shared, as the drivers report on Valhall.
    _mobile("arm", "valhall1", "valhall1", "Arm Valhall 1st gen", (16,), 512, ("mali-g57", "mali-g77")),
    _mobile("arm", "valhall2", "valhall2", "Arm Valhall 2nd gen", (16,), 512, ("mali-g68", "mali-g78")),
    _mobile("arm", "valhall3", "valhall3", "Arm Valhall 3rd gen", (16,), 512,
            ("mali-g310", "mali-g510", "mali-g610", "mali-g710")),
    _mobile("arm", "valhall4", "valhall4", "Arm Valhall 4th gen; also the 5th-gen Mali-G720/G620, "
            "whose compute limits a compiler sees are the same", (16,), 512,
            ("mali-g615", "mali-g715", "mali-g620", "mali-g720")),
    # Adreno runs waves of 64 (and 128 on A7xx); one entry covers the family, as in IREE.
    _mobile("qualcomm", "adreno", "adreno", "Qualcomm Adreno (6xx/7xx)", (64, 128), 1024),
    dataclasses.replace(
        _mobile("mesa", "llvmpipe", "llvmpipe", "Mesa llvmpipe / lavapipe: Vulkan on the CPU", (8,), 1024),
        # Its subgroup is the host's SIMD width in 32-bit lanes: 4 (SSE), 8 (AVX2), 16 (AVX-512).
        subgroup_sizes=(8, 4, 16), subgroup_arithmetic=True, subgroup_shuffle=True,
        aliases=("lavapipe", "lvp")),
]

_BY_ARCH = {t.name: t for t in _ARCHS}
_NV = "NVIDIA datasheet"
_AMD = "AMD product specifications"

_PRODUCTS: list[Target] = [
    _product(_BY_ARCH["sm_60"], "p100", "NVIDIA Tesla P100 SXM2 16 GB", cus=56, gbps=732,
             source=f"{_NV} (Tesla P100, SXM2)", f64=5.3, f32=10.6, f16=21.2),
    _product(_BY_ARCH["sm_70"], "v100", "NVIDIA Tesla V100 SXM2", cus=80, gbps=900,
             source=f"{_NV} (Tesla V100, SXM2)", f64=7.8, f32=15.7, f16=125.0),
    _product(_BY_ARCH["sm_75"], "t4", "NVIDIA T4", cus=40, gbps=320, source=f"{_NV} (T4)",
             f32=8.1, f16=65.0, i8=130.0),
    # GeForce Turing/Ampere/Ada tensor cores run f16 with f32 accumulation at half the f16-
    # accumulate rate; the peaks below are the f32-accumulate ones that codegen uses.
    _product(_BY_ARCH["sm_75"], "rtx2070super", "NVIDIA GeForce RTX 2070 SUPER", cus=40, gbps=448,
             source="NVIDIA Turing architecture whitepaper; 40 SMs at 1770 MHz boost",
             f32=9.1, f16=36.3, i8=145.0),
    _product(_BY_ARCH["sm_80"], "a100", "NVIDIA A100 SXM4 80 GB", cus=108, gbps=2039,
             source=f"{_NV} (A100 80GB SXM)", f64=9.7, f32=19.5, tf32=156.0, bf16=312.0, f16=312.0,
             i8=624.0),
    _product(_BY_ARCH["sm_86"], "a10", "NVIDIA A10", cus=72, gbps=600, source=f"{_NV} (A10)",
             f32=31.2, tf32=62.5, bf16=125.0, f16=125.0, i8=250.0),
    _product(_BY_ARCH["sm_86"], "rtx3080ti", "NVIDIA GeForce RTX 3080 Ti", cus=80, gbps=912,
             source="NVIDIA Ampere GA102 whitepaper; 80 SMs at 1665 MHz boost",
             f32=34.1, tf32=34.1, bf16=68.2, f16=68.2, i8=272.8),
    _product(_BY_ARCH["sm_86"], "rtx3090", "NVIDIA GeForce RTX 3090", cus=82, gbps=936,
             source="NVIDIA Ampere GA102 whitepaper",
             f32=35.6, tf32=35.6, bf16=71.0, f16=71.0, i8=284.0),
    _product(_BY_ARCH["sm_89"], "l4", "NVIDIA L4", cus=58, gbps=300, source=f"{_NV} (L4), sparsity halved",
             f32=30.3, tf32=60.0, bf16=121.0, f16=121.0, f8=242.5, i8=242.5),
    _product(_BY_ARCH["sm_89"], "rtx4090", "NVIDIA GeForce RTX 4090", cus=128, gbps=1008,
             source="NVIDIA Ada Lovelace architecture whitepaper",
             f32=82.6, tf32=82.6, bf16=165.2, f16=165.2, f8=330.3, i8=660.6),
    _product(_BY_ARCH["sm_90"], "h100", "NVIDIA H100 SXM5 80 GB", cus=132, gbps=3350,
             source=f"{_NV} (H100 SXM), sparsity halved", aliases=("h100-sxm", "h100-sxm5"),
             f64=34.0, f32=67.0, tf32=494.7, bf16=989.4, f16=989.4, f8=1978.9, i8=1978.9),
    _product(_BY_ARCH["sm_90"], "h200", "NVIDIA H200 SXM 141 GB", cus=132, gbps=4800,
             source=f"{_NV} (H200 SXM), sparsity halved", aliases=("h200-sxm",),
             f64=34.0, f32=67.0, tf32=494.7, bf16=989.4, f16=989.4, f8=1978.9, i8=1978.9),
    # RDNA3 counts dual-issue FP32; its f16 is the WMMA / packed rate.
    _product(_BY_ARCH["gfx1100"], "rx7900xtx", "AMD Radeon RX 7900 XTX", cus=96, gbps=960,
             source=_AMD, f32=61.4, f16=122.8),
    _product(_BY_ARCH["gfx1100"], "rx7900xt", "AMD Radeon RX 7900 XT", cus=84, gbps=800,
             source=_AMD, f32=51.6, f16=103.2),
    _product(_BY_ARCH["gfx1100"], "w7900", "AMD Radeon PRO W7900", cus=96, gbps=864,
             source=_AMD, aliases=("radeon-pro-w7900",), f32=61.3, f16=122.6),
    _product(_BY_ARCH["gfx1101"], "rx7800xt", "AMD Radeon RX 7800 XT", cus=60, gbps=624,
             source=_AMD, f32=37.3, f16=74.6),
    _product(_BY_ARCH["gfx1101"], "rx7700xt", "AMD Radeon RX 7700 XT", cus=54, gbps=432,
             source=_AMD, f32=35.2, f16=70.3),
    _product(_BY_ARCH["gfx1200"], "rx9060xt", "AMD Radeon RX 9060 XT", cus=32, gbps=320,
             source=f"{_AMD}, sparsity halved", f32=25.6, f16=102.6, bf16=102.6, f8=205.2, i8=205.2),
    _product(_BY_ARCH["gfx1201"], "rx9070", "AMD Radeon RX 9070", cus=56, gbps=640,
             source=f"{_AMD}, sparsity halved", f32=36.1, f16=144.5, bf16=144.5, f8=289.0, i8=289.0),
    _product(_BY_ARCH["gfx1201"], "rx9070xt", "AMD Radeon RX 9070 XT", cus=64, gbps=640,
             source=f"{_AMD}, sparsity halved",
             f32=48.7, f16=194.7, bf16=194.7, f8=389.4, i8=389.4),
    # GCN5 Instinct: f16 is packed math (no matrix units); MI25 has no int8 dot product.
    _product(_BY_ARCH["gfx900"], "mi25", "AMD Radeon Instinct MI25", cus=64, gbps=484,
             source=_AMD, f64=0.77, f32=12.3, f16=24.6),
    _product(_BY_ARCH["gfx906"], "mi50", "AMD Radeon Instinct MI50 (32 GB)", cus=60, gbps=1024,
             source=_AMD, f64=6.6, f32=13.3, f16=26.5, i8=53.0),
    _product(_BY_ARCH["gfx906"], "mi60", "AMD Radeon Instinct MI60", cus=64, gbps=1024,
             source=_AMD, f64=7.4, f32=14.7, f16=29.5, i8=59.0),
    # CDNA1 has no packed FP32: f32 is the vector rate (the matrix-core f32 rate is 46.1).
    _product(_BY_ARCH["gfx908"], "mi100", "AMD Instinct MI100", cus=120, gbps=1228.8,
             source="AMD CDNA white paper", f64=11.5, f32=23.1, f16=184.6, bf16=92.3, i8=184.6),
    _product(_BY_ARCH["gfx90a"], "mi210", "AMD Instinct MI210", cus=104, gbps=1638.4,
             source="AMD CDNA2 white paper", f64=22.6, f32=45.3, f16=181.0, bf16=181.0, i8=181.0),
    _product(_BY_ARCH["gfx90a"], "mi250x", "AMD Instinct MI250X (both dies)", cus=220, gbps=3276.8,
             source="AMD CDNA2 white paper", f64=47.9, f32=95.7, f16=383.0, bf16=383.0, i8=383.0),
    _product(_BY_ARCH["gfx942"], "mi300x", "AMD Instinct MI300X", cus=304, gbps=5300,
             source="AMD CDNA3 white paper", f64=81.7, f32=163.4, tf32=653.7, f16=1307.4,
             bf16=1307.4, f8=2614.9, i8=2614.9),
    # Mali peaks depend on the licensee's core count and clocks: none are published per product.
    *(_product(arch, p, f"Arm {p.replace('mali-g', 'Mali-G')}")
      for arch in _ARCHS if arch.vendor == "arm" for p in arch.products),
]

GENERIC_VULKAN = Target(
    name="vulkan-generic", kind="generic", vendor="generic", apis=("vulkan",), arch="generic",
    # halbench runs only on devices of the vulkan-1.3 tier (as IREE's runtime baseline), and every
    # Vulkan 1.3 driver consumes SPIR-V 1.6: that is the generic version, not an older one.
    description="Any device of the vulkan-1.3 tier: SPIR-V 1.6 and the limits every conformant "
                "driver guarantees; no subgroup size, f16, int8 or cooperative matrix assumed",
    subgroup_sizes=(), max_workgroup_size=(128, 128, 64), max_workgroup_invocations=128,
    shared_memory_bytes=16 * KIB, fp16=False, spirv_version=SPIRV_VERSION, aliases=("generic",))

#: Every target, in table order: architectures, products, the generic default.
#: The hardware table. Compiler backends may add entries of their own (``extra_targets``).
TARGETS: tuple[Target, ...] = (*_ARCHS, *_PRODUCTS, GENERIC_VULKAN)

#: Code names -> the architecture they stand for, as IREE maps them: the first (lowest) arch of
#: the family, whose code runs on the rest, except where the family's flagship defines it.
CODE_NAMES: dict[str, str] = {
    "pascal": "sm_60", "volta": "sm_70", "turing": "sm_75", "ampere": "sm_80", "ada": "sm_89",
    "hopper": "sm_90", "blackwell": "sm_100",
    "gcn5": "gfx900", "cdna1": "gfx908", "cdna2": "gfx90a", "cdna3": "gfx942", "cdna4": "gfx950",
    "rdna1": "gfx1010", "rdna2": "gfx1030", "rdna3": "gfx1100", "rdna3.5": "gfx1150", "rdna4": "gfx1201",
    "valhall": "valhall1",
}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def by_arch(arch: str) -> Target:
    """The arch entry of the hardware table (``sm_60``, ``gfx942``)."""
    return _BY_ARCH[arch]


def _all_targets() -> tuple[Target, ...]:
    from halbench.compiler.backends import backends

    extra = tuple(t for b in backends().values() for t in b.extra_targets())
    return TARGETS + extra


@functools.cache
def _index() -> dict[str, Target]:
    index: dict[str, Target] = {}
    for t in _all_targets():
        for n in (t.name, *t.aliases):
            assert index.get(_key(n), t) is t, f"two targets are called {n}"
            index[_key(n)] = t
    for code, arch in CODE_NAMES.items():
        index.setdefault(_key(code), _BY_ARCH[arch])
    return index


# Adreno products are opaque about their generation; every "adreno-NNN[l]" is the family entry.
_ADRENO = re.compile(r"^adreno[-_ ]?\d{3}l?$")


def list_targets(api: str | None = None) -> list[Target]:
    """Every known target, or those usable through ``api``."""
    _check_api(api)
    return [t for t in _all_targets() if api is None or t.supports(api)]


def resolve_target(api: str | None, name: str) -> Target:
    """The target called ``name``: an LLVM arch (``sm_90``, ``gfx1100``), a code name
    (``hopper``, ``rdna3``, ``valhall4``, ``adreno``), or a product (``h100``, ``rx7900xtx``,
    ``mali-g715``), case-insensitive. ``api`` (``vulkan``, ``cuda``, ``hip``, or None for any)
    must be one the target supports. ``host`` and ``auto`` are the caller's to handle with a
    probed device (:func:`target_from_device`)."""
    _check_api(api)
    text = name.strip().lower()
    if text in ("host", "auto"):
        raise UserError(f"target {name!r} needs a probed device: resolve it with target_from_device()")
    target = _index().get(_key(text)) or (_BY_ARCH["adreno"] if _ADRENO.match(text) else None)
    if target is None:
        known = sorted({n for t in list_targets(api) for n in (t.name, *t.aliases)} |
                       {c for c, a in CODE_NAMES.items() if api is None or _BY_ARCH[a].supports(api)})
        close = difflib.get_close_matches(text, known, n=4, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        where = f" {api}" if api else ""
        raise UserError(f"unknown{where} target {name!r}{hint} (`halbench list-targets` lists them)")
    if api is not None and not target.supports(api):
        raise UserError(f"target {name!r} ({target.arch}) cannot be used with {api}: "
                        f"it supports {', '.join(target.apis)}")
    return target


def default_target(api: str) -> Target:
    """The safe target when none is given: code that runs on every device of ``api`` (the
    backend's own choice)."""
    from halbench.compiler.backends import backend

    _check_api(api)
    b = backend(api)
    if b.default_target is None:
        raise UserError(f"{api} has no default target: pass --{b.target_option}")
    return b.default_target()


# -- probed devices ----------------------------------------------------------------------------

# Product names as drivers report them, most specific first.
_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"\bH200\b", "h200"), (r"\bH100\b", "h100"), (r"\bA100\b", "a100"), (r"\bA10\b", "a10"),
    (r"\bL4\b", "l4"), (r"\bT4\b", "t4"), (r"\bV100\b", "v100"), (r"\bP100\b", "p100"),
    (r"RTX 2070 SUPER", "rtx2070super"), (r"RTX 3080 Ti\b", "rtx3080ti"), (r"RTX 3090(?! Ti)", "rtx3090"),
    (r"RTX 4090\b", "rtx4090"), (r"7900 XTX", "rx7900xtx"), (r"7900 XT\b", "rx7900xt"),
    (r"\bW7900\b", "w7900"), (r"7800 XT", "rx7800xt"), (r"7700 XT", "rx7700xt"),
    (r"9070 XT", "rx9070xt"), (r"9070\b", "rx9070"), (r"9060 XT", "rx9060xt"),
    (r"\bMI25\b", "mi25"), (r"\bMI50\b", "mi50"), (r"\bMI60\b", "mi60"), (r"\bMI100\b", "mi100"),
    (r"\bMI210\b", "mi210"),
    (r"\bMI250X\b", "mi250x"), (r"\bMI300X\b", "mi300x"), (r"\bMali-G(\d+)", "mali-g{0}"),
    (r"\bAdreno", "adreno"), (r"^llvmpipe", "llvmpipe"),
)


def target_from_device(device: DeviceInfo | Mapping[str, Any], api: str | None = None,
                       select: str | None = None) -> Target:
    """The target for a probed device (``--target=auto``): a ``DeviceInfo``, one device of a
    ``dump-devices --format json`` file, or the whole file (the device the URI ``select``
    names, else its first GPU: :func:`pick_dump_device`).

    A known product or arch gives its table entry; on Vulkan the limits the driver reports
    replace the table's (they are the truth for that driver). A device the table does not know
    becomes a ``probed`` target built from what it reports."""
    info = device if isinstance(device, DeviceInfo) else _device_from_dict(device, api, select)
    api = api or _api_of(info)
    target = _table_entry(info)
    if target is not None and api in apis() and not target.supports(api):
        target = None
    if target is None:
        return _probed(info, api)
    # Vulkan limits are the driver's truth only when Vulkan probed the device (a CUDA dump used for
    # --vulkan-target keeps the table's Vulkan limits).
    return _with_vulkan_limits(target, info) if api == "vulkan" == _api_of(info) else target


def _table_entry(info: DeviceInfo) -> Target | None:
    """The table entry a probed device is: its product by name, else its arch; None if unknown."""
    ident = info.identity
    target = None
    for pattern, product in _NAME_PATTERNS:
        m = re.search(pattern, ident.name, re.IGNORECASE)
        if m:
            target = _index().get(_key(product.format(*m.groups())))
            break
    if target is None and getattr(ident, "driver_id", "") == "MESA_LLVMPIPE":
        target = _BY_ARCH["llvmpipe"]
    if target is None and ident.arch and _key(ident.arch) in _index():
        target = _index()[_key(ident.arch)]
    if target is not None and target.kind == "product" and ident.arch and ident.arch != target.arch \
            and ident.arch in _BY_ARCH:
        # The name matched a product but the driver reports another arch: trust the driver.
        target = _BY_ARCH[ident.arch]
    return target


def recommended_target(device: Mapping[str, Any]) -> dict[str, str] | None:
    """What to compile with for one device of a dump (``dump-devices`` prints it): the compiler
    option and its value, ``{"option": "--cuda-target", "target": "sm_90", "flag": ...}``; None
    for a device whose backend takes no target (the CPU drivers).

    CUDA and HIP code objects are per arch, so their value is the arch; Vulkan's is the table
    entry (a product or an arch) whose limits the device has. A device the table cannot place
    gets ``auto`` (probe it when compiling on that machine)."""
    from halbench.compiler.backends import backend

    api = _api_of_name(str(device.get("driver", "")))
    if api not in apis():
        return None
    try:
        t = target_from_device(device, api)
    except HalbenchError:
        return None
    value = "auto" if t.kind == "probed" else (t.name if api == "vulkan" else t.arch)
    option = f"--{backend(api).target_option}"
    return {"option": option, "target": value, "flag": f"{option}={value}"}


def annotate_dump(doc: dict[str, Any]) -> dict[str, Any]:
    """Add each device's ``compile_target`` (:func:`recommended_target`) to a dump document."""
    for drv in doc.get("drivers", ()):
        for d in drv.get("devices", ()):
            hint = recommended_target(d)
            if hint is not None:
                d["compile_target"] = hint
    return doc


def published_peaks(device: DeviceInfo | Mapping[str, Any]) -> dict[str, Any]:
    """The vendor's peak figures for a probed device, as results files store them
    (``devices[uri].published_peaks``), or {} for a device the table cannot place."""
    try:
        target = target_from_device(device)
    except (HalbenchError, KeyError, TypeError, ValueError):
        return {}  # a CPU or an unknown API has no published peaks
    if not (target.memory_gbps or target.peak_tflops):
        return {}
    return {"bandwidth_gb_s": target.memory_gbps, "compute_tflop_s": dict(target.peak_tflops),
            "source": f"halbench.compiler.targets:{target.name}"}


def _api_of(info: DeviceInfo) -> str:
    """The compiler backend of the driver that probed ``info``."""
    from halbench.compiler.backends import backend_for_driver

    try:
        return backend_for_driver(info.driver).name
    except UserError:
        return (info.identity.api or info.driver).lower()


def _with_vulkan_limits(target: Target, info: DeviceInfo) -> Target:
    lim, feats = info.limits, info.features
    sizes = tuple(sorted({s for s in (lim.subgroup_size, lim.min_subgroup_size, lim.max_subgroup_size) if s},
                         key=lambda s: s != lim.subgroup_size))
    changes: dict[str, Any] = {}
    if sizes:
        changes["subgroup_sizes"] = sizes
    if lim.max_workgroup_size:
        changes["max_workgroup_size"] = tuple(lim.max_workgroup_size)
    if lim.max_workgroup_invocations:
        changes["max_workgroup_invocations"] = lim.max_workgroup_invocations
    if lim.max_shared_memory_bytes:
        changes["shared_memory_bytes"] = lim.max_shared_memory_bytes
    if feats.subgroup_operations:
        changes["subgroup_arithmetic"] = "arithmetic" in feats.subgroup_operations
        changes["subgroup_shuffle"] = "shuffle" in feats.subgroup_operations
    if "cooperativeMatrix" in feats.flags:
        has = feats.flags["cooperativeMatrix"]
        changes["cooperative_matrix"] = tuple(feats.cooperative_matrix) if has else ()
    return dataclasses.replace(target, **changes)


def _probed(info: DeviceInfo, api: str) -> Target:
    if api not in apis():
        raise UserError(f"device {info.name!r} ({info.driver}) is not a GPU that halbench compiles for")
    ident, flags = info.identity, info.features.flags
    base = Target(
        name=_key(ident.name) or "device", kind="probed", vendor=(ident.vendor or "unknown").lower(),
        apis=(api,), arch=ident.arch or "unknown", description=f"{ident.name}, as probed",
        subgroup_sizes=(), shared_memory_bytes=16 * KIB, max_workgroup_size=(128, 128, 64),
        max_workgroup_invocations=128, fp16=bool(flags.get("shaderFloat16")),
        bf16=bool(flags.get("shaderBFloat16Type")), int8=bool(flags.get("shaderIntegerDotProduct")),
        mma=tuple(info.features.cooperative_matrix) if api != "vulkan" else (),
        spirv_version=SPIRV_VERSION if api == "vulkan" else None, compute_units=info.limits.compute_units)
    return _with_vulkan_limits(base, info)


def _dump_devices(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The devices of a dump: nested under ``drivers`` (what ``dump-devices --format json``
    writes), or a flat ``devices`` list."""
    if isinstance(data.get("drivers"), list):
        groups = [drv.get("devices") for drv in data["drivers"] if isinstance(drv, Mapping)]
    else:
        groups = [data.get("devices")]
    return [d for g in groups if isinstance(g, list) for d in g
            if isinstance(d, Mapping) and isinstance(d.get("identity"), Mapping)]


def _matches(d: Mapping[str, Any], uri: DeviceURI) -> bool:
    from halbench.drivers import canonical_driver

    if canonical_driver(str(d.get("driver", ""))) != canonical_driver(uri.driver):
        return False
    if uri.ordinal is not None:
        return d.get("ordinal") == uri.ordinal
    if uri.uuid is not None:
        return normalize_uuid(str(d["identity"].get("uuid") or "")) == uri.uuid
    return True


def pick_dump_device(data: Mapping[str, Any], api: str | None = None,
                     device: str | None = None) -> Mapping[str, Any]:
    """The device of a ``dump-devices --format json`` document to compile for: the one the URI
    ``device`` names (``vulkan://1``, ``cuda://GPU-...``), else the first GPU of ``api``'s
    drivers, else the first GPU of any driver (the same board has one table entry whatever API
    probed it), else the first device."""
    devices = _dump_devices(data)
    if not devices:
        raise UserError("the device dump holds no device: write it with `halbench dump-devices "
                        "--format json > DUMP.json` on the machine that has the GPU")
    if device:
        uri = parse_uri(device)
        found = [d for d in devices if _matches(d, uri)]
        if not found:
            listed = ", ".join(str(d.get("uri") or f"{d.get('driver')}://{d.get('ordinal')}") for d in devices)
            raise UserError(f"the device dump has no device {device}; it holds: {listed}")
        return found[0]
    pool = [d for d in devices if api is None or _api_of_name(str(d.get("driver", ""))) == api]
    if not pool:  # another API probed the board: use it where the table knows it for this API
        pool = [d for d in devices if (t := _table_entry(_device_from_dict(d, None))) and t.supports(api)]
    if not pool:
        drivers = sorted({str(d.get("driver")) for d in devices})
        raise UserError(f"the device dump holds no {api} device, nor a board the target table knows "
                        f"for {api} (it has {', '.join(drivers)} devices); name a target instead "
                        f"(halbench list-targets --api {api})")
    gpus = [d for d in pool if d["identity"].get("device_type") not in ("cpu",)]
    return (gpus or pool)[0]


def _api_of_name(driver: str) -> str:
    from halbench.compiler.backends import backend_for_driver

    try:
        return backend_for_driver(driver).name
    except UserError:
        return driver


def _device_from_dict(data: Mapping[str, Any], api: str | None, device: str | None = None) -> DeviceInfo:
    """A DeviceInfo from ``dump-devices --format json`` output: one device or the whole file."""
    if "drivers" in data or "devices" in data:
        data = pick_dump_device(data, api, device)
    if "identity" not in data:
        raise UserError("not a dump-devices JSON device: it has no 'identity'")

    def pick(cls: type, d: Mapping[str, Any] | None) -> dict[str, Any]:
        names = {f.name for f in dataclasses.fields(cls)}
        out = {k: v for k, v in (d or {}).items() if k in names}
        return {k: tuple(v) if isinstance(v, list) else v for k, v in out.items()}

    try:
        feats = data.get("features") or {}
        matrix = tuple(MatrixShape(**pick(MatrixShape, s)) for s in feats.get("cooperative_matrix") or ())
        return DeviceInfo(
            driver=str(data.get("driver", "")), ordinal=int(data.get("ordinal", 0)),
            identity=Identity(**pick(Identity, data["identity"])),
            limits=Limits(**pick(Limits, data.get("limits"))),
            features=Features(flags=dict(feats.get("flags") or {}), cooperative_matrix=matrix))
    except (TypeError, ValueError, AttributeError) as e:
        raise UserError(f"malformed dump-devices JSON device ({e}); write the dump again with "
                        f"`halbench dump-devices --format json`") from None


def _check_api(api: str | None) -> None:
    if api is not None and api not in apis():
        raise UserError(f"unknown API {api!r}; known: {', '.join(apis())}")


def format_table(targets: Iterable[Target], api: str | None = None) -> str:
    """The text form of ``halbench list-targets``: one line per target. Shared memory is the
    limit through ``api`` (CUDA's opt-in maximum) or, without one, the portable limit."""
    head = ("NAME", "KIND", "ARCH", "CODE NAME", "APIS", "SUBGROUP", "SMEM KiB", "MATRIX",
            "F32 TF/s", "F16 TF/s", "GB/s")
    rows = [head]
    for t in targets:
        matrix = "/".join(sorted({f"{s.a_type}" for s in (*t.mma, *t.cooperative_matrix)})) or "-"

        def num(v: float | None) -> str:
            return f"{v:g}" if v is not None else "-"

        rows.append((t.name, t.kind, t.arch, t.code_name or "-", ",".join(t.apis),
                     ",".join(map(str, t.subgroup_sizes)) or "any",
                     str(t.shared_memory_limit(api or "vulkan") // KIB),
                     matrix, num(t.peak("f32")), num(t.peak("f16")), num(t.memory_gbps)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
