"""Command buffers on a GPU device: recorded once into a graph, replayed per submit.

Nodes are added explicitly (not by stream capture) so that commands between two barriers have
no edges between them and may run concurrently, as the HAL allows; each barrier joins
everything before it: an empty node after several commands, except after a few kernels that
wait for their predecessors themselves, which the next kernels follow through a programmatic
edge from each (``GpuDevice.programmatic_joins``). With profiling,
each kernel is bracketed by event-record nodes and the commands run one after another (so a
dispatch's events time it, not its overlap with its neighbours); the same commands also stay
available as an event-free graph (``unprofiled_total``: the concurrent time) and as a plain
list for stream launches.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from halbench.drivers._gpu.executable import KernelParams
from halbench.hal import BufferBinding, CommandBuffer, EntryPoint, Executable

#: The most kernels between two barriers that the next ones depend on directly (programmatic
#: edges from each) rather than through an empty join node (GpuDevice.programmatic_joins).
JOIN_DIRECT_MAX = 8

__all__ = ["GpuCommandBuffer"]


class GpuCommandBuffer(CommandBuffer):
    def __init__(self, device: Any, profile: bool):
        super().__init__(device, profile)
        # ("kernel", function, grid, block, KernelParams, dynamic shared bytes, dependent launch) |
        # ("copy", dst, src, n) |
        # ("fill", dst, word, count) | ("barrier",)
        self.ops: list[tuple] = []
        self.exec: Any = None  # the graph replayed per submit (profiled one when profile=True)
        self.unprofiled_exec: Any = None  # event-free graph, built on first need
        self._graphs: list[Any] = []
        self._execs: list[Any] = []
        #: Per dispatch (start, end) timing events; recorded inside the graph or around launches.
        self.dispatch_events: list[tuple[Any, Any]] = []
        self.inflight_profiled: Any = None  # the last profiled submission (its events are ours)
        #: programmatic edges (dependent launches) in the last graph built
        self.dependent_launches = 0

    # -- recording --------------------------------------------------------------------
    def _dispatch(self, executable: Executable, entry: EntryPoint, workgroups: tuple[int, int, int],
                  bindings: tuple[BufferBinding, ...], constants: np.ndarray) -> None:
        fn = executable.functions[entry.name]
        self.ops.append(("kernel", fn, workgroups, entry.workgroup_size, KernelParams(bindings, constants),
                         entry.dynamic_shared_bytes, entry.dependent_launch))

    def _barrier(self) -> None:
        self.ops.append(("barrier",))

    def _copy(self, src: Any, dst: Any, src_offset: int, dst_offset: int, nbytes: int) -> None:
        self.ops.append(("copy", dst.ptr + dst_offset, src.ptr + src_offset, nbytes))

    def _fill(self, buffer: Any, pattern: int, offset: int, nbytes: int) -> None:
        self.ops.append(("fill", buffer.ptr + offset, pattern, nbytes // 4))

    def _end(self) -> None:
        dev = self.device
        dev._enter()
        if self.profile and self.dispatch_times:
            n = sum(1 for op in self.ops if op[0] == "kernel")
            self.dispatch_events = [(dev._take_event(True), dev._take_event(True)) for _ in range(n)]
        if dev.use_graphs and self.ops:
            self.exec = self._build(with_events=self.profile and self.dispatch_times)

    # -- graphs -----------------------------------------------------------------------
    def _build(self, with_events: bool) -> Any:
        """Build and instantiate a graph of the recorded commands."""
        api, ctx = self.device.api, self.device.ctx
        graph = api.graph_create()
        self._graphs.append(graph)
        deps: list[Any] = []  # what the current segment (since the last barrier) depends on
        segment: list[Any] = []  # the last node of each command in the current segment
        chain: list[Any] = []  # profiled graphs: the previous command's last node
        # Unprofiled graphs: a kernel that waits for its predecessors itself, whose one dependency
        # is such a kernel too, follows it through a programmatic edge (a dependent launch).
        waits: set[Any] = set()  # the nodes of kernels marked EntryPoint.dependent_launch
        pdl = self.device.dependent_launch and not with_events
        self.dependent_launches = 0
        k = 0
        for op in self.ops:
            kind = op[0]
            if kind == "barrier":
                if len(segment) > 1 and not (pdl and self.device.programmatic_joins
                                             and len(segment) <= JOIN_DIRECT_MAX and set(segment) <= waits):
                    deps = [api.graph_add_empty(graph, segment)]
                elif segment:
                    # one node, or a few kernels that each wait for their predecessors: the next
                    # kernels depend on them directly (programmatic edges from every one; its
                    # griddepcontrol.wait waits for all), not through an empty node, which ends
                    # dependent launch there
                    deps = segment
                segment = []
            elif kind == "kernel":
                _, fn, grid, block, params, shared, waiting = op
                if with_events:
                    # Profiled: every dispatch after the previous one, as Vulkan's timestamps
                    # order them, so its events time it alone and not its overlap with
                    # neighbours (the opt-in unprofiled total keeps the concurrent time).
                    start, end = self.dispatch_events[k]
                    node = api.graph_add_event_record(graph, chain or deps, start)
                    node = api.graph_add_kernel(graph, [node], fn, grid, block, params.ptr, shared)
                    node = api.graph_add_event_record(graph, [node], end)
                    chain = [node]
                else:
                    programmatic = pdl and waiting and bool(deps) and set(deps) <= waits
                    node = api.graph_add_kernel(graph, deps, fn, grid, block, params.ptr, shared,
                                                programmatic=programmatic)
                    if pdl and waiting:
                        waits.add(node)
                    self.dependent_launches += programmatic
                k += 1
                segment.append(node)
            elif kind == "copy":
                segment.append(api.graph_add_copy(graph, chain or deps, op[1], op[2], op[3], ctx))
                chain = [segment[-1]] if with_events else chain
            elif kind == "fill":
                segment.append(api.graph_add_fill(graph, chain or deps, op[1], op[2], op[3], ctx))
                chain = [segment[-1]] if with_events else chain
        graph_exec = api.graph_instantiate(graph)
        self._execs.append(graph_exec)
        return graph_exec

    def unprofiled(self) -> Any:
        if self.unprofiled_exec is None and self.ops:
            self.device._enter()
            self.unprofiled_exec = self._build(with_events=False)
        return self.unprofiled_exec

    # -- submission -------------------------------------------------------------------
    def enqueue(self, stream: Any) -> None:
        """Queue the commands once on ``stream``: a graph launch, or one call per command."""
        if self.exec is not None:
            self.device.api.graph_launch(self.exec, stream)
        elif self.ops:
            self.launch_each(stream, with_events=self.profile and self.dispatch_times)

    def launch_each(self, stream: Any, with_events: bool) -> None:
        """Individual stream launches: the stream is in order, so barriers need nothing."""
        api = self.device.api
        k = 0
        for op in self.ops:
            kind = op[0]
            if kind == "kernel":
                if with_events:
                    api.event_record(self.dispatch_events[k][0], stream)
                api.launch(op[1], op[2], op[3], op[4].ptr, stream, op[5])
                if with_events:
                    api.event_record(self.dispatch_events[k][1], stream)
                k += 1
            elif kind == "copy":
                api.memcpy_dtod_async(op[1], op[2], op[3], stream)
            elif kind == "fill":
                api.memset_d32_async(op[1], op[2], op[3], stream)

    def release(self) -> None:
        dev = self.device
        if dev.closed:
            return
        api = dev.api
        for e in self._execs:
            dev._safely(lambda e=e: api.graph_exec_destroy(e))
        for g in self._graphs:
            dev._safely(lambda g=g: api.graph_destroy(g))
        self._execs, self._graphs = [], []
        self.exec = self.unprofiled_exec = None
        for start, end in self.dispatch_events:
            dev._give_event(start, True)
            dev._give_event(end, True)
        self.dispatch_events = []
        dev._command_buffers.discard(self)
