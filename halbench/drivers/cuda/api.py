"""CUDA's driver API (cuda-python's ``cuda.bindings.driver``) behind the shared GPU adapter.

This file and ``query.py`` are the only places the cuda driver names CUDA functions. Every call
goes through ``_check``: a failing CUresult becomes a DriverError named after the CUresult,
with cuGetErrorString's explanation and what halbench was doing.
"""

from __future__ import annotations

from typing import Any

from halbench.drivers._gpu.api import GpuApi
from halbench.errors import DriverUnavailable
from halbench.probe.status import cuda_check, cuda_status_name

__all__ = ["CudaApi", "load_driver"]

_driver: Any = None


def load_driver() -> Any:
    """Import cuda-python and cuInit once; a missing package or libcuda is DriverUnavailable
    with the reason (the listing prints it; nothing crashes)."""
    global _driver
    if _driver is not None:
        return _driver
    try:
        from cuda.bindings import driver
    except ImportError as e:
        raise DriverUnavailable("cuda", f"cuda-python is not installed ({e}); pip install cuda-python") from e
    try:
        (status,) = driver.cuInit(0)
    except Exception as e:  # cuda.pathfinder raises its own DynamicLibNotFoundError for libcuda
        raise DriverUnavailable("cuda", f"libcuda.so (the NVIDIA driver) could not be loaded: {e}") from e
    if status != driver.CUresult.CUDA_SUCCESS:
        name = status.name
        raise DriverUnavailable("cuda", f"cuInit failed: {name}" + (
            " (no NVIDIA GPU is visible)" if name == "CUDA_ERROR_NO_DEVICE" else ""))
    _driver = driver
    return driver


class CudaApi(GpuApi):
    name = "cuda"
    lost_statuses = frozenset({
        "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_LAUNCH_TIMEOUT", "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    })
    oom_statuses = frozenset({"CUDA_ERROR_OUT_OF_MEMORY"})

    def __init__(self) -> None:
        d = self.d = load_driver()
        self.owner: Any = None  # the device, marked lost on a sticky fault
        self._ok = d.CUresult.CUDA_SUCCESS
        self._not_ready = d.CUresult.CUDA_ERROR_NOT_READY
        self._not_found = d.CUresult.CUDA_ERROR_NOT_FOUND
        self._geq = d.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ
        self._write_default = d.CUstreamWriteValue_flags.CU_STREAM_WRITE_VALUE_DEFAULT

    # -- errors -----------------------------------------------------------------------
    def status_name(self, status: Any) -> str:
        return cuda_status_name(self.d, status)

    def status_string(self, status: Any) -> str:
        err, text = self.d.cuGetErrorString(status)
        if err != self._ok or text is None:
            return "unknown error"
        return text.decode() if isinstance(text, bytes) else str(text)

    def _check(self, result: tuple, what: str) -> Any:
        """``result`` is cuda-python's (CUresult, *values); return the values (the probe's check,
        with this driver's lost-device and OOM mapping)."""
        return cuda_check(self.d, result, what, lambda status, w: self.error(status, w, self.owner))

    def _where(self) -> str:
        return f" on {self.owner.uri}" if self.owner is not None else ""

    # -- device and context -----------------------------------------------------------
    def device_count(self) -> int:
        return self._check(self.d.cuDeviceGetCount(), "counting CUDA devices")

    def open(self, ordinal: int) -> Any:
        dev = self._check(self.d.cuDeviceGet(ordinal), f"getting CUDA device {ordinal}")
        ctx = self._check(self.d.cuDevicePrimaryCtxRetain(dev),
                          f"retaining the primary context of CUDA device {ordinal}")
        self._dev = dev
        self.make_current(ctx)
        return ctx

    def close(self, ctx: Any) -> None:
        self._check(self.d.cuDevicePrimaryCtxRelease(self._dev), "releasing the primary context")

    def make_current(self, ctx: Any) -> None:
        self._check(self.d.cuCtxSetCurrent(ctx), "making the primary context current")

    def attribute(self, ordinal: int, name: str) -> int:
        attr = getattr(self.d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        dev = self._check(self.d.cuDeviceGet(ordinal), f"getting CUDA device {ordinal}")
        return int(self._check(self.d.cuDeviceGetAttribute(attr, dev), f"reading {name}"))

    def arch(self, ordinal: int) -> str:
        major = self.attribute(ordinal, "COMPUTE_CAPABILITY_MAJOR")
        minor = self.attribute(ordinal, "COMPUTE_CAPABILITY_MINOR")
        return f"sm_{major}{minor}"

    def supports_stream_memops(self, ordinal: int) -> bool:
        try:
            return bool(self.attribute(ordinal, "CAN_USE_64_BIT_STREAM_MEM_OPS"))
        except Exception:  # noqa: BLE001
            return False

    # -- memory -----------------------------------------------------------------------
    def mem_alloc(self, nbytes: int) -> int:
        from halbench.drivers._gpu.api import fmt_bytes

        return int(self._check(self.d.cuMemAlloc(nbytes), f"allocating {fmt_bytes(nbytes)}{self._where()}"))

    def mem_free(self, ptr: int) -> None:
        self._check(self.d.cuMemFree(ptr), "freeing device memory")

    def host_alloc(self, nbytes: int) -> int:
        from halbench.drivers._gpu.api import fmt_bytes

        flags = self.d.CU_MEMHOSTALLOC_DEVICEMAP | self.d.CU_MEMHOSTALLOC_PORTABLE
        return int(self._check(self.d.cuMemHostAlloc(nbytes, flags),
                               f"allocating {fmt_bytes(nbytes)} of pinned host memory{self._where()}"))

    def host_free(self, ptr: int) -> None:
        self._check(self.d.cuMemFreeHost(ptr), "freeing pinned host memory")

    def memcpy_htod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._check(self.d.cuMemcpyHtoDAsync(dst, src, nbytes, stream), "copying host to device")

    def memcpy_dtoh_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._check(self.d.cuMemcpyDtoHAsync(dst, src, nbytes, stream), "copying device to host")

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: Any) -> None:
        self._check(self.d.cuMemcpyDtoDAsync(dst, src, nbytes, stream), "copying device to device")

    def memset_d32_async(self, dst: int, word: int, count: int, stream: Any) -> None:
        self._check(self.d.cuMemsetD32Async(dst, word, count, stream), "filling device memory")

    # -- streams and events -----------------------------------------------------------
    def stream_create(self) -> Any:
        return self._check(self.d.cuStreamCreate(self.d.CUstream_flags.CU_STREAM_NON_BLOCKING),
                           "creating a stream")

    def stream_destroy(self, stream: Any) -> None:
        self._check(self.d.cuStreamDestroy(stream), "destroying a stream")

    def stream_done(self, stream: Any) -> bool:
        return self._done(self.d.cuStreamQuery(stream)[0], "waiting for the stream")

    def stream_wait_value64(self, stream: Any, ptr: int, value: int) -> None:
        self._check(self.d.cuStreamWaitValue64(stream, ptr, value, self._geq),
                    "queueing a semaphore wait (cuStreamWaitValue64)")

    def stream_write_value64(self, stream: Any, ptr: int, value: int) -> None:
        self._check(self.d.cuStreamWriteValue64(stream, ptr, value, self._write_default),
                    "queueing a semaphore signal (cuStreamWriteValue64)")

    def event_create(self, timing: bool) -> Any:
        f = self.d.CUevent_flags
        flags = f.CU_EVENT_DEFAULT if timing else f.CU_EVENT_DISABLE_TIMING
        return self._check(self.d.cuEventCreate(flags), "creating an event")

    def event_destroy(self, event: Any) -> None:
        self._check(self.d.cuEventDestroy(event), "destroying an event")

    def event_record(self, event: Any, stream: Any) -> None:
        (status,) = self.d.cuEventRecord(event, stream)
        if status != self._ok:
            raise self.error(status, "recording an event", self.owner)

    def event_done(self, event: Any) -> bool:
        return self._done(self.d.cuEventQuery(event)[0], "waiting for work")

    def event_elapsed_ms(self, start: Any, end: Any) -> float:
        return float(self._check(self.d.cuEventElapsedTime(start, end), "reading event times"))

    # -- executables ------------------------------------------------------------------
    def module_load(self, image: bytes, jit: bool) -> Any:
        if jit and not image.endswith(b"\0"):
            image += b"\0"  # the driver reads PTX as a C string
        what = "JIT-compiling PTX" if jit else "loading a cubin"
        return self._check(self.d.cuModuleLoadDataEx(image, 0, [], []), f"{what}{self._where()}")

    def module_unload(self, module: Any) -> None:
        self._check(self.d.cuModuleUnload(module), "unloading a module")

    def module_function(self, module: Any, name: str) -> Any | None:
        status, fn = self.d.cuModuleGetFunction(module, name.encode())
        if status == self._not_found:
            return None
        return self._check((status, fn), f"looking up kernel '{name}'")

    def function_max_threads(self, function: Any) -> int:
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
        return int(self._check(self.d.cuFuncGetAttribute(attr, function), "reading a kernel's block limit"))

    def function_static_shared(self, function: Any) -> int:
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES
        return int(self._check(self.d.cuFuncGetAttribute(attr, function), "reading a kernel's static shared memory"))

    def function_resources(self, function: Any) -> dict[str, int]:
        a = self.d.CUfunction_attribute
        names = {"registers": a.CU_FUNC_ATTRIBUTE_NUM_REGS, "static_shared_bytes": a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                 "local_bytes": a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "const_bytes": a.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES,
                 "max_threads": a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK}
        return {k: int(self._check(self.d.cuFuncGetAttribute(v, function), f"reading a kernel's {k}"))
                for k, v in names.items()}

    def occupancy_blocks(self, function: Any, threads: int, dynamic_shared: int) -> int | None:
        return int(self._check(self.d.cuOccupancyMaxActiveBlocksPerMultiprocessor(function, int(threads),
                                                                                   int(dynamic_shared)),
                               "reading a kernel's occupancy"))

    def function_allow_dynamic_shared(self, function: Any, nbytes: int) -> None:
        attr = self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._check(self.d.cuFuncSetAttribute(function, attr, int(nbytes)),
                    f"allowing {nbytes} bytes of dynamic shared memory (cuFuncSetAttribute){self._where()}")

    def launch(self, function: Any, grid: tuple[int, int, int], block: tuple[int, int, int],
               params_ptr: int, stream: Any, shared_bytes: int = 0) -> None:
        (status,) = self.d.cuLaunchKernel(function, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                                          shared_bytes, stream, params_ptr, 0)
        if status != self._ok:
            raise self.error(status, f"launching a kernel{self._where()}", self.owner)

    # -- graphs -----------------------------------------------------------------------
    def graph_create(self) -> Any:
        return self._check(self.d.cuGraphCreate(0), "creating a graph")

    def graph_destroy(self, graph: Any) -> None:
        self._check(self.d.cuGraphDestroy(graph), "destroying a graph")

    def graph_add_kernel(self, graph: Any, deps: list[Any], function: Any, grid: tuple[int, int, int],
                         block: tuple[int, int, int], params_ptr: int, shared_bytes: int = 0,
                         programmatic: bool = False) -> Any:
        p = self.d.CUDA_KERNEL_NODE_PARAMS()
        p.func = function
        p.gridDimX, p.gridDimY, p.gridDimZ = grid
        p.blockDimX, p.blockDimY, p.blockDimZ = block
        p.sharedMemBytes = shared_bytes
        p.kernelParams = params_ptr
        p.extra = 0
        if not programmatic:
            return self._check(self.d.cuGraphAddKernelNode(graph, deps, len(deps), p), "adding a kernel node")
        # Programmatic dependent launch: the node may be launched as the blocks of the kernel it
        # depends on exit (halbench's kernels issue no early griddepcontrol.launch_dependents),
        # and waits for that kernel's completion itself (griddepcontrol.wait; EntryPoint.dependent_launch).
        node = self._check(self.d.cuGraphAddKernelNode(graph, [], 0, p), "adding a kernel node")
        edges = []
        for _ in deps:
            e = self.d.CUgraphEdgeData()
            e.from_port = self.d.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
            e.type = self.d.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
            edges.append(e)
        # CUDA 12.3-12.x bindings name the edge-data form _v2; 13.x fold it into the plain name
        add = getattr(self.d, "cuGraphAddDependencies_v2", None) or self.d.cuGraphAddDependencies
        (status,) = add(graph, deps, [node] * len(deps), edges, len(deps))
        if status != self._ok:
            raise self.error(status, "adding a programmatic dependency", self.owner)
        return node

    def programmatic_edges(self) -> bool:
        """Whether this driver API can add programmatic dependency edges to a graph (CUDA 12.3+
        bindings: cuGraphAddDependencies with edge data)."""
        return hasattr(self.d, "CUgraphEdgeData") and hasattr(self.d, "CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC")

    def graph_add_copy(self, graph: Any, deps: list[Any], dst: int, src: int, nbytes: int,
                       ctx: Any) -> Any:
        p = self.d.CUDA_MEMCPY3D()
        p.srcMemoryType = self.d.CUmemorytype.CU_MEMORYTYPE_DEVICE
        p.srcDevice = src
        p.dstMemoryType = self.d.CUmemorytype.CU_MEMORYTYPE_DEVICE
        p.dstDevice = dst
        p.WidthInBytes = nbytes
        p.Height = 1
        p.Depth = 1
        return self._check(self.d.cuGraphAddMemcpyNode(graph, deps, len(deps), p, ctx), "adding a copy node")

    def graph_add_fill(self, graph: Any, deps: list[Any], dst: int, word: int, count: int,
                       ctx: Any) -> Any:
        p = self.d.CUDA_MEMSET_NODE_PARAMS()
        p.dst = dst
        p.elementSize = 4
        p.value = word
        p.width = count
        p.height = 1
        p.pitch = count * 4
        return self._check(self.d.cuGraphAddMemsetNode(graph, deps, len(deps), p, ctx), "adding a fill node")

    def graph_add_empty(self, graph: Any, deps: list[Any]) -> Any:
        return self._check(self.d.cuGraphAddEmptyNode(graph, deps, len(deps)), "adding a join node")

    def graph_add_event_record(self, graph: Any, deps: list[Any], event: Any) -> Any:
        return self._check(self.d.cuGraphAddEventRecordNode(graph, deps, len(deps), event),
                           "adding an event record node")

    def graph_instantiate(self, graph: Any) -> Any:
        return self._check(self.d.cuGraphInstantiate(graph, 0), f"instantiating a graph{self._where()}")

    def graph_exec_destroy(self, graph_exec: Any) -> None:
        self._check(self.d.cuGraphExecDestroy(graph_exec), "destroying a graph exec")

    def graph_launch(self, graph_exec: Any, stream: Any) -> None:
        (status,) = self.d.cuGraphLaunch(graph_exec, stream)
        if status != self._ok:
            raise self.error(status, f"launching a graph{self._where()}", self.owner)
