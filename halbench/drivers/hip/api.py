"""HIP (hip-python's ``hip.hip``) behind the shared GPU adapter.

UNTESTED beyond the unavailable path: no AMD GPU exists where halbench is developed. Written
against hip-python 10's signatures (each call returns ``(hipError_t, *values)``, pointers come
back as hip-python Pointer objects that ``int()`` turns into addresses).
"""

from __future__ import annotations

from typing import Any

from halbench.drivers._gpu.api import GpuApi, fmt_bytes
from halbench.errors import DriverUnavailable

__all__ = ["HipApi", "load_hip"]

_hip: Any = None


def load_hip() -> Any:
    """Import hip-python and hipInit once; a missing package or libamdhip64.so is
    DriverUnavailable with the reason."""
    global _hip
    if _hip is not None:
        return _hip
    try:
        from hip import hip
    except ImportError as e:
        raise DriverUnavailable("hip", f"hip-python is not installed ({e}); pip install hip-python") from e
    try:
        (status,) = hip.hipInit(0)
    except RuntimeError as e:  # hip-python dlopens lazily: "failed to dlopen 'libamdhip64.so'..."
        raise DriverUnavailable("hip", f"libamdhip64.so (the ROCm HIP runtime) could not be loaded: {e}") from e
    if status != hip.hipError_t.hipSuccess:
        raise DriverUnavailable("hip", f"hipInit failed: {status.name}" + (
            " (no AMD GPU is visible)" if status.name == "hipErrorNoDevice" else ""))
    _hip = hip
    return hip


# Short attribute names (CUDA's spelling, used by the shared driver) -> hipDeviceAttribute_t.
_ATTRS = {
    "COMPUTE_CAPABILITY_MAJOR": "hipDeviceAttributeComputeCapabilityMajor",
    "COMPUTE_CAPABILITY_MINOR": "hipDeviceAttributeComputeCapabilityMinor",
    "MAX_THREADS_PER_BLOCK": "hipDeviceAttributeMaxThreadsPerBlock",
    "MAX_SHARED_MEMORY_PER_BLOCK": "hipDeviceAttributeMaxSharedMemoryPerBlock",
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": "hipDeviceAttributeSharedMemPerBlockOptin",
    "WARP_SIZE": "hipDeviceAttributeWarpSize",
    "MULTIPROCESSOR_COUNT": "hipDeviceAttributeMultiprocessorCount",
    **{f"MAX_GRID_DIM_{a}": f"hipDeviceAttributeMaxGridDim{a}" for a in "XYZ"},
    **{f"MAX_BLOCK_DIM_{a}": f"hipDeviceAttributeMaxBlockDim{a}" for a in "XYZ"},
}


class HipApi(GpuApi):
    name = "hip"
    lost_statuses = frozenset({
        "hipErrorIllegalAddress", "hipErrorLaunchFailure", "hipErrorAssert", "hipErrorECCNotCorrectable",
        "hipErrorIllegalInstruction", "hipErrorMisalignedAddress", "hipErrorInvalidPc",
        "hipErrorHardwareStackError", "hipErrorLaunchTimeOut", "hipErrorContextIsDestroyed",
    })
    oom_statuses = frozenset({"hipErrorOutOfMemory", "hipErrorMemoryAllocation"})

    def __init__(self) -> None:
        h = self.h = load_hip()
        self.owner: Any = None
        self._ok = h.hipError_t.hipSuccess
        self._not_ready = h.hipError_t.hipErrorNotReady
        self._not_found = h.hipError_t.hipErrorNotFound

    def status_name(self, status: Any) -> str:
        return getattr(status, "name", str(status))

    def status_string(self, status: Any) -> str:
        text = self.h.hipGetErrorString(status)
        text = text[-1] if isinstance(text, tuple) else text
        return text.decode() if isinstance(text, bytes) else str(text)

    def _check(self, result: Any, what: str) -> Any:
        result = result if isinstance(result, tuple) else (result,)
        if result[0] != self._ok:
            raise self.error(result[0], what, self.owner)
        return result[1] if len(result) == 2 else result[1:]

    def _where(self) -> str:
        return f" on {self.owner.uri}" if self.owner is not None else ""

    # -- device and context (HIP: one device per thread via hipSetDevice) ---------------
    def device_count(self) -> int:
        return int(self._check(self.h.hipGetDeviceCount(), "counting HIP devices"))

    def open(self, ordinal: int) -> Any:
        self._ordinal = ordinal
        self.make_current(ordinal)
        return ordinal

    def close(self, ctx: Any) -> None:
        pass

    def make_current(self, ctx: Any) -> None:
        self._check(self.h.hipSetDevice(ctx), f"selecting HIP device {ctx}")

    def attribute(self, ordinal: int, name: str) -> int:
        attr = getattr(self.h.hipDeviceAttribute_t, _ATTRS[name])
        return int(self._check(self.h.hipDeviceGetAttribute(attr, ordinal), f"reading {name}"))

    def arch(self, ordinal: int) -> str:
        props = self.h.hipDeviceProp_t()
        self._check(self.h.hipGetDeviceProperties(props, ordinal), "reading device properties")
        name = props.gcnArchName
        name = name.decode() if isinstance(name, bytes) else str(name)
        return name.split(":")[0]  # "gfx942:sramecc+:xnack-" -> "gfx942"

    def supports_stream_memops(self, ordinal: int) -> bool:
        try:
            attr = self.h.hipDeviceAttribute_t.hipDeviceAttributeCanUseStreamWaitValue
            return bool(self._check(self.h.hipDeviceGetAttribute(attr, ordinal), "reading stream memops"))
        except Exception:  # noqa: BLE001
            return False

    # -- memory -----------------------------------------------------------------------
    def mem_alloc(self, nbytes: int) -> int:
        return int(self._check(self.h.hipMalloc(nbytes), f"allocating {fmt_bytes(nbytes)}{self._where()}"))

    def mem_free(self, ptr: int) -> None:
        self._check(self.h.hipFree(ptr), "freeing device memory")

    def host_alloc(self, nbytes: int) -> int:
        flags = self.h.hipHostMallocMapped | self.h.hipHostMallocPortable | self.h.hipHostMallocCoherent
        return int(self._check(self.h.hipHostMalloc(nbytes, flags),
                               f"allocating {fmt_bytes(nbytes)} of pinned host memory{self._where()}"))

    def host_free(self, ptr: int) -> None:
        self._check(self.h.hipHostFree(ptr), "freeing pinned host memory")

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._check(self.h.hipMemcpyHtoDAsync(dst, src, nbytes, stream), "copying host to device")

    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._check(self.h.hipMemcpyDtoHAsync(dst, src, nbytes, stream), "copying device to host")

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._check(self.h.hipMemcpyDtoDAsync(dst, src, nbytes, stream), "copying device to device")

    def memset_d32_async(self, dst: int, word: int, count: int, stream: Any) -> None:
        # hipMemsetD32Async takes a signed int: reinterpret the word's bits.
        signed = word - (1 << 32) if word >= 1 << 31 else word
        self._check(self.h.hipMemsetD32Async(dst, signed, count, stream), "filling device memory")

    # -- streams and events -----------------------------------------------------------
    def stream_create(self) -> Any:
        return self._check(self.h.hipStreamCreateWithFlags(self.h.hipStreamNonBlocking), "creating a stream")

    def stream_destroy(self, stream: Any) -> None:
        self._check(self.h.hipStreamDestroy(stream), "destroying a stream")

    def stream_done(self, stream: Any) -> bool:
        return self._done(self.h.hipStreamQuery(stream)[0], "waiting for the stream")

    def stream_wait_value64(self, stream: Any, ptr: int, value: int) -> None:
        self._check(self.h.hipStreamWaitValue64(stream, ptr, value, self.h.hipStreamWaitValueGte,
                                                0xFFFFFFFFFFFFFFFF), "queueing a semaphore wait")

    def stream_write_value64(self, stream: Any, ptr: int, value: int) -> None:
        self._check(self.h.hipStreamWriteValue64(stream, ptr, value, 0), "queueing a semaphore signal")

    def event_create(self, timing: bool) -> Any:
        flags = 0 if timing else self.h.hipEventDisableTiming
        return self._check(self.h.hipEventCreateWithFlags(flags), "creating an event")

    def event_destroy(self, event: Any) -> None:
        self._check(self.h.hipEventDestroy(event), "destroying an event")

    def event_record(self, event: Any, stream: Any) -> None:
        self._check(self.h.hipEventRecord(event, stream), "recording an event")

    def event_done(self, event: Any) -> bool:
        return self._done(self.h.hipEventQuery(event)[0], "waiting for work")

    def event_elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self._check(self.h.hipEventElapsedTime(start, end), "reading event times"))

    # -- executables ------------------------------------------------------------------
    def module_load(self, image: bytes, jit: bool) -> Any:
        return self._check(self.h.hipModuleLoadData(image), f"loading a code object{self._where()}")

    def module_unload(self, module: Any) -> None:
        self._check(self.h.hipModuleUnload(module), "unloading a module")

    def module_function(self, module: Any, name: str) -> Any | None:
        status, fn = self.h.hipModuleGetFunction(module, name.encode())
        if status == self._not_found:
            return None
        return self._check((status, fn), f"looking up kernel '{name}'")

    def function_max_threads(self, function: Any) -> int:
        attr = self.h.hipFunction_attribute.HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        return int(self._check(self.h.hipFuncGetAttribute(attr, function), "reading a kernel's block limit"))

    def function_static_shared(self, function: Any) -> int:
        attr = self.h.hipFunction_attribute.HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        return int(self._check(self.h.hipFuncGetAttribute(attr, function), "reading a kernel's static shared memory"))

    def function_resources(self, function: Any) -> dict[str, int]:
        a = self.h.hipFunction_attribute
        names = {"registers": a.HIP_FUNC_ATTRIBUTE_NUM_REGS, "static_shared_bytes": a.HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                 "local_bytes": a.HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "max_threads": a.HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}
        return {k: int(self._check(self.h.hipFuncGetAttribute(v, function), f"reading a kernel's {k}"))
                for k, v in names.items()}

    def function_allow_dynamic_shared(self, function: Any, nbytes: int) -> None:
        # hipFuncSetAttribute takes a host stub; for a module's kernel HIP may answer
        # hipErrorInvalidDeviceFunction. AMD GPUs need no opt-in (the whole LDS is available to a
        # workgroup, and the load already checked the size against it), so that answer is fine.
        attr = self.h.hipFuncAttribute.hipFuncAttributeMaxDynamicSharedMemorySize
        try:
            result = self.h.hipFuncSetAttribute(function, attr, int(nbytes))
        except TypeError:  # the binding refuses a hipFunction_t where it wants a host pointer
            return
        status = result[0] if isinstance(result, tuple) else result
        if self.status_name(status) == "hipErrorInvalidDeviceFunction":
            return
        self._check(result, f"allowing {nbytes} bytes of dynamic shared memory (hipFuncSetAttribute){self._where()}")

    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               params_ptr: int, stream: Any, shared_bytes: int = 0) -> None:
        self._check(self.h.hipModuleLaunchKernel(function, *grid, *block, shared_bytes, stream, params_ptr or None,
                                                 None),
                    f"launching a kernel{self._where()}")

    # -- graphs -----------------------------------------------------------------------
    def graph_create(self) -> Any:
        return self._check(self.h.hipGraphCreate(0), "creating a graph")

    def graph_destroy(self, graph: Any) -> None:
        self._check(self.h.hipGraphDestroy(graph), "destroying a graph")

    def graph_add_kernel(self, graph: Any, deps: list[Any], function: Any, grid: tuple[int, int, int],
                         block: tuple[int, int, int], params_ptr: int, shared_bytes: int = 0,
                         programmatic: bool = False) -> Any:  # HIP: no dependent launch; plain edges
        p = self.h.hipKernelNodeParams(func=function, gridDim=self.h.dim3(*grid), blockDim=self.h.dim3(*block),
                                       sharedMemBytes=shared_bytes, kernelParams=params_ptr or None, extra=None)
        return self._check(self.h.hipGraphAddKernelNode(graph, deps or None, len(deps), p), "adding a kernel node")

    def graph_add_copy(self, graph: Any, deps: list[Any], dst: int, src: int, nbytes: int,
                       ctx: Any) -> Any:
        kind = self.h.hipMemcpyKind.hipMemcpyDeviceToDevice
        return self._check(self.h.hipGraphAddMemcpyNode1D(graph, deps or None, len(deps), dst, src, nbytes, kind),
                           "adding a copy node")

    def graph_add_fill(self, graph: Any, deps: list[Any], dst: int, word: int, count: int,
                       ctx: Any) -> Any:
        p = self.h.hipMemsetParams(dst=dst, elementSize=4, value=word, width=count, height=1, pitch=count * 4)
        return self._check(self.h.hipGraphAddMemsetNode(graph, deps or None, len(deps), p), "adding a fill node")

    def graph_add_empty(self, graph: Any, deps: list[Any]) -> Any:
        return self._check(self.h.hipGraphAddEmptyNode(graph, deps or None, len(deps)), "adding a join node")

    def graph_add_event_record(self, graph: Any, deps: list[Any], event: Any) -> Any:
        return self._check(self.h.hipGraphAddEventRecordNode(graph, deps or None, len(deps), event),
                           "adding an event record node")

    def graph_instantiate(self, graph: Any) -> Any:
        result = self.h.hipGraphInstantiate(graph, 0)
        return self._check(result[:2], f"instantiating a graph{self._where()}")

    def graph_exec_destroy(self, graph_exec: Any) -> None:
        self._check(self.h.hipGraphExecDestroy(graph_exec), "destroying a graph exec")

    def graph_launch(self, graph_exec: Any, stream: Any) -> None:
        self._check(self.h.hipGraphLaunch(graph_exec, stream), f"launching a graph{self._where()}")
