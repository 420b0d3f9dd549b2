"""WGSL executables and command buffers on a WebGPU device (the ABI: docs/webgpu.md).

A HAL command buffer is recorded once and submitted many times, but a WebGPU command buffer
runs once. Everything that costs something is made at record time (pipelines, bind groups,
one uniform buffer holding every dispatch's constants); each submission only encodes the
recorded commands into a fresh command encoder. WebGPU orders and synchronises dispatches and
copies itself, so a HAL barrier records nothing.

With profiling, each dispatch gets a compute pass of its own whose beginning and end write
timestamps; WebGPU has no calibrated time domains, so the times are exact durations laid on the
host clock from the submission's host time (``Profile.calibrated`` is False).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from halbench.drivers.webgpu.device import WebGpuDevice, wgpu_error
from halbench.errors import UserError
from halbench.hal import (
    BufferBinding,
    CommandBuffer,
    DispatchTiming,
    EntryPoint,
    Executable,
    ExecutableBinary,
    Profile,
)

__all__ = ["WebGpuCommandBuffer", "WebGpuExecutable", "fill_executable"]

#: Dispatches timed per query set (WebGPU allows 4096 queries in one: two per dispatch).
_PER_SET = 2048

_FILL_WGSL = """
@group(0) @binding(0) var<storage, read_write> buf: array<u32>;
@group(0) @binding(1) var<uniform> hb_c: array<vec4<u32>, 1>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) ng: vec3<u32>) {
  let count = hb_c[0][0];
  for (var i = gid.x; i < count; i += ng.x * 64u) { buf[i] = hb_c[0][1]; }
}
"""


class WebGpuExecutable(Executable):
    """A WGSL module and one compute pipeline per entry point, with explicit layouts (an "auto"
    layout would drop bindings the shader does not use, and the ABI numbers them all)."""

    def __init__(self, device: WebGpuDevice, binary: ExecutableBinary):
        super().__init__(device, binary)
        import wgpu

        try:
            source = binary.data.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError("webgpu-wgsl-v1 executable is not UTF-8 WGSL text") from None
        dev = device.wgpu
        try:
            module = dev.create_shader_module(code=source)
        except Exception as e:  # noqa: BLE001 - naga's validation error, first line
            raise UserError(f"the WGSL of '{binary.entries[0].name}' does not validate on {device.uri}: "
                            f"{' '.join(str(e).split())[:300]}") from None
        self.layouts: dict[str, Any] = {}
        self.pipelines: dict[str, Any] = {}
        limit = device.limits["max-storage-buffers-per-shader-stage"]
        for ep in binary.entries:
            if ep.bindings > limit:
                raise UserError(f"entry '{ep.name}' takes {ep.bindings} storage buffers; {device.uri} "
                                f"allows {limit}")
            stage = wgpu.ShaderStage.COMPUTE
            entries = [{"binding": i, "visibility": stage, "buffer": {"type": wgpu.BufferBindingType.storage}}
                       for i in range(ep.bindings)]
            if ep.constants:
                entries.append({"binding": ep.bindings, "visibility": stage,
                                "buffer": {"type": wgpu.BufferBindingType.uniform}})
            try:
                bgl = dev.create_bind_group_layout(entries=entries)
                layout = dev.create_pipeline_layout(bind_group_layouts=[bgl])
                self.pipelines[ep.name] = dev.create_compute_pipeline(
                    layout=layout, compute={"module": module, "entry_point": ep.name})
            except Exception as e:  # noqa: BLE001
                raise UserError(f"entry '{ep.name}' does not fit its WGSL on {device.uri}: "
                                f"{' '.join(str(e).split())[:300]}") from None
            self.layouts[ep.name] = bgl


def fill_executable(device: WebGpuDevice) -> WebGpuExecutable:
    return WebGpuExecutable(device, ExecutableBinary(
        "webgpu-wgsl-v1", _FILL_WGSL.encode(), (EntryPoint("main", 1, 2, (64, 1, 1)),), "wgsl"))


@dataclass
class _Dispatch:
    pipeline: Any
    layout: Any
    workgroups: tuple[int, int, int]
    bindings: tuple[BufferBinding, ...]
    constants: np.ndarray
    entry: str
    bind_group: Any = None


class WebGpuCommandBuffer(CommandBuffer):
    def __init__(self, device: WebGpuDevice, profile: bool):
        super().__init__(device, profile)
        self.ops: list[tuple[str, Any]] = []
        self.scratch: list[Any] = []
        self.uniforms: Any = None
        self.query_sets: list[Any] = []  # WebGPU caps a query set at 4096: _PER_SET dispatches each

    # -- recording ------------------------------------------------------------------------
    def _dispatch(self, executable: Executable, entry: EntryPoint, workgroups: tuple[int, int, int],
                  bindings: tuple[BufferBinding, ...], constants: np.ndarray) -> None:
        exe: WebGpuExecutable = executable  # type: ignore[assignment]
        self.ops.append(("dispatch", _Dispatch(exe.pipelines[entry.name], exe.layouts[entry.name], workgroups,
                                               bindings, constants, entry.name)))

    def _copy(self, src: Any, dst: Any, src_offset: int, dst_offset: int, nbytes: int) -> None:
        if src is dst:  # WebGPU refuses a copy within one buffer: go through a scratch buffer
            import wgpu

            u = wgpu.BufferUsage
            scratch = self.device.wgpu.create_buffer(size=(nbytes + 3) & ~3, usage=u.COPY_SRC | u.COPY_DST)
            self.scratch.append(scratch)
            self.ops.append(("copy", (src.handle, src_offset, scratch, 0, nbytes)))
            self.ops.append(("copy", (scratch, 0, dst.handle, dst_offset, nbytes)))
            return
        self.ops.append(("copy", (src.handle, src_offset, dst.handle, dst_offset, nbytes)))

    def _fill(self, buffer: Any, pattern: int, offset: int, nbytes: int) -> None:
        if pattern == 0:
            self.ops.append(("clear", (buffer.handle, offset, nbytes)))
            return
        # Any other pattern: the device's fill kernel over the words of the range.
        fill = self.device.fill_kernel()
        count = nbytes // 4
        binding = BufferBinding(buffer, offset, nbytes)
        groups = (min(-(-count // 64), 65535), 1, 1)
        self.ops.append(("dispatch", _Dispatch(fill.pipelines["main"], fill.layouts["main"], groups, (binding,),
                                               np.array([count, pattern], np.uint32), "fill")))

    def _end(self) -> None:
        """Make what every submission reuses: the constants' uniform buffer, the bind groups and,
        when profiling, the query set."""
        import wgpu

        dev: WebGpuDevice = self.device  # type: ignore[assignment]
        dispatches = [d for kind, d in self.ops if kind == "dispatch"]
        align = dev.uniform_alignment
        slots, offset = [], 0
        for d in dispatches:
            size = 16 * -(-len(d.constants) // 4) if len(d.constants) else 0
            slots.append((offset, size))
            offset += -(-size // align) * align if size else 0
        try:
            if offset:
                self.uniforms = dev.wgpu.create_buffer(size=offset, usage=wgpu.BufferUsage.UNIFORM |
                                                       wgpu.BufferUsage.COPY_DST)
                data = np.zeros(offset // 4, np.uint32)
                for d, (off, size) in zip(dispatches, slots):
                    data[off // 4: off // 4 + len(d.constants)] = d.constants
                dev.wgpu.queue.write_buffer(self.uniforms, 0, data)
            for d, (off, size) in zip(dispatches, slots):
                entries = [{"binding": i, "resource": {"buffer": b.buffer.handle, "offset": b.offset,
                                                       "size": min((b.length + 3) & ~3, b.buffer.handle.size - b.offset)}}
                           for i, b in enumerate(d.bindings)]
                if size:
                    entries.append({"binding": len(d.bindings),
                                    "resource": {"buffer": self.uniforms, "offset": off, "size": size}})
                d.bind_group = dev.wgpu.create_bind_group(layout=d.layout, entries=entries)
            if self.profile and dispatches:
                n = len(dispatches)
                self.query_sets = [dev.wgpu.create_query_set(type=wgpu.QueryType.timestamp,
                                                             count=2 * min(_PER_SET, n - i))
                                   for i in range(0, n, _PER_SET)]
        except Exception as e:  # noqa: BLE001
            raise wgpu_error(e, "recording a command buffer", dev) from None

    # -- submitting -----------------------------------------------------------------------
    def _encode(self, sub: Any) -> Any:
        """A fresh WebGPU command buffer for one submission of the recorded commands."""
        import wgpu

        dev: WebGpuDevice = self.device  # type: ignore[assignment]
        enc = dev.wgpu.create_command_encoder()
        cpass, k = None, 0
        for kind, op in self.ops:
            if kind != "dispatch" and cpass is not None:
                cpass.end()
                cpass = None
            if kind == "copy":
                enc.copy_buffer_to_buffer(*op)
            elif kind == "clear":
                enc.clear_buffer(*op)
            else:
                if self.profile:
                    cpass = enc.begin_compute_pass(timestamp_writes={
                        "query_set": self.query_sets[k // _PER_SET],
                        "beginning_of_pass_write_index": 2 * (k % _PER_SET),
                        "end_of_pass_write_index": 2 * (k % _PER_SET) + 1})
                elif cpass is None:
                    cpass = enc.begin_compute_pass()
                cpass.set_pipeline(op.pipeline)
                cpass.set_bind_group(0, op.bind_group)
                cpass.dispatch_workgroups(*op.workgroups)
                if self.profile:
                    cpass.end()
                    cpass = None
                k += 1
        if cpass is not None:
            cpass.end()
        if self.profile and k:
            sub.resolve = dev.wgpu.create_buffer(size=16 * k, usage=wgpu.BufferUsage.QUERY_RESOLVE |
                                                 wgpu.BufferUsage.COPY_SRC)
            for j, qs in enumerate(self.query_sets):
                count = 2 * min(_PER_SET, k - j * _PER_SET)
                enc.resolve_query_set(qs, 0, count, sub.resolve, j * _PER_SET * 16)
        return enc.finish()

    def _profile(self, sub: Any) -> Profile:
        entries = [d.entry for kind, d in self.ops if kind == "dispatch"]
        host = sub.host_submit_ns
        if not entries:
            return Profile((), host, host, 0, calibrated=False, host_submit_ns=host, host_done_ns=sub.host_done_ns)
        ticks = np.frombuffer(self.device.wgpu.queue.read_buffer(sub.resolve), np.uint64).astype(np.int64)
        sub.resolve.destroy()
        t0 = int(ticks[0])
        timings = tuple(DispatchTiming(i, e, host + int(ticks[2 * i]) - t0, host + int(ticks[2 * i + 1]) - t0)
                        for i, e in enumerate(entries))
        end = max(t.end_ns for t in timings)
        return Profile(timings, host, end, end - host, calibrated=False,
                       host_submit_ns=host, host_done_ns=sub.host_done_ns)

    def release(self) -> None:
        for obj in (self.uniforms, *self.query_sets, *self.scratch):
            if obj is not None:
                obj.destroy()
        self.uniforms = None
        self.query_sets = []
        self.scratch = []
