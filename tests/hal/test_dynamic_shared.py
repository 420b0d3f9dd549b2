"""Dynamic shared memory (EntryPoint.dynamic_shared_bytes): the entry point carries it, devices
without it refuse it by name, the CUDA/HIP check refuses more than the device's per-block limit
in one line, and (on the GPU machine, --gpu) a kernel using 96 KiB of it runs on cuda:// as a
graph and as stream launches."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import halbench
from halbench.drivers._gpu.executable import check_shared_memory
from halbench.errors import DriverUnavailable, UserError
from halbench.hal import MAX_DYNAMIC_SHARED_BYTES, EntryPoint, ExecutableBinary
from tests.hal import kernels_local, kernels_vulkan
from tests.hal.util import TIMEOUT_S, record

H100_OPTIN = 232448  # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN of an H100 (227 KiB)


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


# -- the entry point ---------------------------------------------------------------------------
def test_entry_point_carries_the_size_and_old_dicts_read_as_zero() -> None:
    ep = EntryPoint("micro", 3, 3, (256, 1, 1), 196608)
    d = ep.to_dict()
    assert d["dynamic_shared_bytes"] == 196608
    assert EntryPoint.from_dict(d) == ep
    old = {"name": "main", "bindings": 1, "constants": 1, "workgroup_size": [64, 1, 1]}
    assert EntryPoint.from_dict(old).dynamic_shared_bytes == 0
    assert EntryPoint.from_dict(old).to_dict() == old  # 0 is left out: older readers see no new key


@pytest.mark.parametrize("size", [-1, MAX_DYNAMIC_SHARED_BYTES + 1])
def test_entry_point_refuses_a_size_out_of_range(size: int) -> None:
    with pytest.raises(UserError, match="dynamic_shared_bytes must be 0 to") as e:
        EntryPoint("main", 1, 0, (1, 1, 1), size)
    _one_line(e)


# -- the limit check (what the cuda/hip drivers run at load) -----------------------------------
def test_check_accepts_up_to_the_optin_limit() -> None:
    check_shared_memory("micro", 196608, 0, H100_OPTIN, "cuda://0")  # 128x256x64, 4 stages
    check_shared_memory("micro", H100_OPTIN - 1024, 1024, H100_OPTIN, "cuda://0")


def test_check_refuses_more_than_the_limit_in_one_line() -> None:
    with pytest.raises(UserError) as e:
        check_shared_memory("micro", 245760, 0, H100_OPTIN, "cuda://0")
    msg = _one_line(e)
    assert msg == ("entry 'micro' needs 245760 bytes of dynamic shared memory, more than the 232448 bytes "
                   "(227 KiB) a workgroup may use on cuda://0; use a smaller tile or fewer pipeline stages")
    with pytest.raises(UserError, match="needs 232448 bytes of dynamic plus 16 bytes of static shared memory"):
        check_shared_memory("micro", H100_OPTIN, 16, H100_OPTIN, "cuda://0")


# -- devices without dynamic shared memory refuse it by name --------------------------------------
def _with_shared(binary: ExecutableBinary, nbytes: int) -> ExecutableBinary:
    return replace(binary, entries=tuple(replace(ep, dynamic_shared_bytes=nbytes) for ep in binary.entries))


def test_local_device_refuses_dynamic_shared_memory() -> None:
    with halbench.create_device("local-sync://") as dev:
        binary = kernels_local.build("add_one", "local-v1")
        dev.load_executable(binary).free()  # without it, the same binary loads
        with pytest.raises(UserError, match=r"entry 'main' asks for 65536 bytes of dynamic shared memory, "
                                            r"which local-sync://\S* does not provide") as e:
            dev.load_executable(_with_shared(binary, 65536))
        _one_line(e)


def test_vulkan_device_refuses_dynamic_shared_memory() -> None:
    try:
        dev = halbench.create_device("vulkan://")
    except DriverUnavailable as e:
        pytest.skip(f"vulkan unavailable: {e}")
    with dev:
        fmt = dev.formats[0]
        with pytest.raises(UserError, match="dynamic shared memory.*only cuda:// and hip://"):
            dev.load_executable(_with_shared(kernels_vulkan.build("add_one", fmt), 4096))


# -- on the GPU: a kernel that uses 96 KiB of dynamic shared memory --------------------------------
# Each workgroup stages `words` input words in shared memory and writes them back reversed, so every
# word of the 96 KiB must hold what was stored there. The kernel clamps `words` to the dynamic shared
# memory it was launched with (%dynamic_smem_size), so a wrong constant cannot write past it.
_REVERSE = r"""
extern "C" __global__ void __launch_bounds__(256) hb_main(const unsigned* __restrict__ in,
        unsigned* __restrict__ out, unsigned n, unsigned words) {
  extern __shared__ unsigned s[];
  unsigned dyn;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
  words = min(words, dyn / 4u);
  size_t base = (size_t)blockIdx.x * words;
  for (unsigned i = threadIdx.x; i < words; i += 256u) s[i] = base + i < n ? in[base + i] : 0xFFFFFFFFu;
  __syncthreads();
  for (unsigned i = threadIdx.x; i < words; i += 256u)
    if (base + i < n) out[base + i] = s[words - 1u - i];
}"""

SHARED = 96 * 1024


@pytest.fixture(scope="module")
def cuda():
    try:
        dev = halbench.create_device("cuda://")
    except DriverUnavailable as e:
        pytest.skip(f"cuda unavailable: {e}")
    yield dev
    dev.close()


def _reverse_binary(arch: str, shared: int) -> ExecutableBinary:
    from halbench.compiler.backends.nvrtc import compile_cuda

    data = compile_cuda(_REVERSE, arch=arch, output="cubin", name="hal_reverse", rename={"hb_main": "main"})
    return ExecutableBinary("cuda-cubin-v1", data, (EntryPoint("main", 2, 2, (256, 1, 1), shared),), arch)


def _expected(x: np.ndarray, words: int) -> np.ndarray:
    n = x.size
    out = np.empty_like(x)
    for b in range(-(-n // words)):
        idx = b * words + np.arange(words)
        src = b * words + words - 1 - np.arange(words)
        vals = np.where(src < n, x[np.minimum(src, n - 1)], np.uint32(0xFFFFFFFF))
        keep = idx < n
        out[idx[keep]] = vals[keep]
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [True, False], ids=["graph", "stream"])
@pytest.mark.parametrize("shared", [32 * 1024, SHARED], ids=["32KiB", "96KiB"])
def test_cuda_kernel_uses_dynamic_shared_memory(cuda, graphs: bool, shared: int) -> None:
    old = cuda.use_graphs
    cuda.use_graphs = graphs
    try:
        words = shared // 4
        n = 5 * words // 2  # the last workgroup half full
        x = np.random.default_rng(1).integers(0, 1 << 32, n, dtype=np.uint32)
        src, dst = cuda.allocate(4 * n), cuda.allocate(4 * n)
        src.write(x)
        dst.write(np.zeros(n, np.uint32))
        exe = cuda.load_executable(_reverse_binary(cuda.arch, shared))
        cb = record(cuda, lambda c: c.dispatch(exe, "main", (-(-n // words),), [src, dst], [n, words]),
                    profile=True)
        assert (cb.exec is not None) is graphs
        for _ in range(2):
            sub = cuda.submit(cb)
            sub.wait(TIMEOUT_S)
            assert sub.profile().dispatches  # the profiled path (events around the kernel) ran too
        np.testing.assert_array_equal(dst.read(np.uint32), _expected(x, words))
    finally:
        cuda.use_graphs = old


@pytest.mark.gpu
def test_cuda_refuses_more_than_the_device_limit(cuda) -> None:
    assert cuda.shared_memory_limit >= 48 * 1024
    with pytest.raises(UserError, match=rf"needs {cuda.shared_memory_limit + 1024} bytes .* on cuda://") as e:
        cuda.load_executable(_reverse_binary(cuda.arch, cuda.shared_memory_limit + 1024))
    _one_line(e)


@pytest.mark.gpu
def test_cuda_gemm_in_192_kib_of_shared_memory_is_right(cuda) -> None:
    """The deepest GEMM pipeline gpu_peaks runs (128x256x64, 4 stages) through the micro path."""
    from halbench.bench.micro import Unsupported, prepare_micro

    for mma in (1, 3):
        params = {"m": 1024, "n": 1024, "k": 1024, "tile_m": 128, "tile_n": 256, "tile_k": 64, "stages": 4,
                  "mma": mma}
        try:
            mb = prepare_micro("gemm-f16", cuda, params)
        except Unsupported as e:
            assert mma == 3 or cuda.shared_memory_limit < 196608, e  # wgmma is sm_90 only
            continue
        try:
            mb.run()
            assert mb.check()["passed"], mb.check()
        finally:
            mb.close()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["gemm-f16", "gemm-bf16"])
def test_cuda_warp_specialized_gemm_is_right(cuda, kind) -> None:
    """The warp-specialized wgmma GEMM against NumPy: one workgroup per tile (mma 4) with k of one
    and of several tiles, and persistent (mma 5) with more tiles than SMs and fewer k tiles than
    stages, so the stages' phases wrap inside and across a workgroup's tiles."""
    from halbench.bench.micro import Unsupported, prepare_micro

    cases = [(4, 256, 512, 32, 128, 256, 32, 8), (4, 512, 256, 448, 256, 128, 64, 4),
             (5, 2048, 4096, 96, 128, 256, 32, 8), (5, 512, 1024, 4096, 128, 256, 32, 9)]
    for mma, m, n, k, bm, bn, bk, stages in cases:
        params = {"m": m, "n": n, "k": k, "tile_m": bm, "tile_n": bn, "tile_k": bk, "stages": stages, "mma": mma}
        try:
            mb = prepare_micro(kind, cuda, params)
        except Unsupported as e:
            assert "sm_90 only" in str(e), e
            return
        try:
            mb.run()
            assert mb.check()["passed"], (params, mb.check())
        finally:
            mb.close()
