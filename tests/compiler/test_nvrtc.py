"""NVRTC compiles the conformance kernels with no GPU present (CI): cubin for sm_80 and sm_90,
and PTX. The cubin's ELF header must name the arch; the PTX must carry its .target line."""

from __future__ import annotations

import re

import pytest

from halbench.compiler.backends.nvrtc import compile_cuda
from halbench.drivers.cuda.cubin import cubin_arch, cubin_runs_on
from halbench.errors import CompileError
from tests.hal.backends import KERNELS
from tests.hal.kernels_cuda import build

pytest.importorskip("cuda.bindings.nvrtc")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_cubin_is_a_cuda_elf_for_the_arch(kernel, arch):
    binary = build(kernel, "cuda-cubin-v1", arch=arch)
    data = binary.data
    assert data[:4] == b"\x7fELF" and data[7] == 0x41, "not a CUDA ELF (EI_OSABI 0x41)"
    assert cubin_arch(data) == arch
    assert binary.target == arch
    assert b"main\0" in data, "the entry point 'main' is not in the symbol table"


@pytest.mark.parametrize("kernel", KERNELS)
def test_ptx_has_target_and_entry(kernel):
    text = build(kernel, "cuda-ptx-v1", arch="sm_90").data.decode()
    assert re.search(r"^\.target sm_90\b", text, re.M)
    assert re.search(r"^\.visible \.entry main\(", text, re.M)


def test_compile_error_carries_the_log():
    with pytest.raises(CompileError, match=r"NVRTC_ERROR_COMPILATION.*broken"):
        compile_cuda('extern "C" __global__ void k() { undefined_thing(); }', arch="sm_90", name="broken")


def test_cache_returns_identical_bytes():
    src = 'extern "C" __global__ void k(int* p) { p[0] = 1; }'
    assert compile_cuda(src, arch="sm_80") is compile_cuda(src, arch="sm_80")


@pytest.mark.parametrize("cubin,device,ok", [
    ("sm_90", "sm_90", True), ("sm_80", "sm_86", True), ("sm_86", "sm_80", False),
    ("sm_80", "sm_90", False), ("sm_90a", "sm_90", True), ("sm_90a", "sm_100", False),
    ("sm_100", "sm_90", False),
])
def test_cubin_compatibility_rule(cubin, device, ok):
    assert cubin_runs_on(cubin, device) is ok


def test_not_a_cubin():
    assert cubin_arch(b"//\n.version 9.0\n.target sm_90\n" + bytes(64)) is None
