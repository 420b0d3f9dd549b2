"""Command buffers: recorded once into a list of ready-made Vulkan arguments, emitted at end().

Everything a dispatch needs at submit time is built while recording: the push-constant bytes,
the descriptor writes (or a written descriptor set), the BDA binding table. Emitting at end()
also lets the timestamp query pool be sized exactly, and reset inside the command buffer, so a
profiled command buffer can be submitted any number of times.

Every command buffer starts with a full memory barrier: its first scope holds all earlier
submissions on the queue, so back-to-back submissions of read-modify-write work stay ordered
without semaphores, as on every other driver. It ends with a barrier to the host, so buffer
reads after a wait see the results.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from halbench.drivers.vulkan._vk import check, ffi, lib, vk
from halbench.drivers.vulkan.executable import VulkanExecutable
from halbench.errors import UserError
from halbench.hal import BufferBinding, CommandBuffer, EntryPoint

if TYPE_CHECKING:
    from halbench.drivers.vulkan.device import VulkanDevice
    from halbench.drivers.vulkan.memory import VulkanBuffer

__all__ = ["VulkanCommandBuffer"]

_COMPUTE_BP = vk.VK_PIPELINE_BIND_POINT_COMPUTE
_STAGE = vk.VK_SHADER_STAGE_COMPUTE_BIT
_ALL = vk.VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT
_TABLE_CHUNK = 4096
_SETS_PER_POOL = 64


class VulkanCommandBuffer(CommandBuffer):
    def __init__(self, device: VulkanDevice, profile: bool):
        super().__init__(device, profile)
        self.ops: list[tuple[Any, ...]] = []
        self.keep: list[Any] = []  # cffi objects the recorded commands point into
        self.handle: Any = None
        self.query_pool: Any = None
        self.queries = 0
        self.submit_info: Any = None
        self.last_submission: Any = None  # profiled resubmission waits for this one
        self._tables: list[tuple[Any, int, int]] = []  # (block, offset, size) chunks of the table pool
        self._table_cursor = _TABLE_CHUNK
        self._desc_pools: list[Any] = []
        self._sets_left = self._descs_left = 0

    # -- recording --------------------------------------------------------------------
    def _dispatch(self, executable: VulkanExecutable, entry: EntryPoint, workgroups: tuple[int, int, int],
                  bindings: tuple[BufferBinding, ...], constants: np.ndarray) -> None:
        dev = self.device
        pipe = executable.pipelines[entry.name]
        consts = constants.astype("<u4").tobytes()
        if executable.bda:  # addresses, not descriptors: maxStorageBufferRange does not apply
            push = struct.pack("<Q", self._table(bindings)) + consts
            self.ops.append(("dispatch", pipe, workgroups, self._keep_bytes(push), len(push), None))
            return
        max_range = dev.physical.limits.maxStorageBufferRange
        for i, b in enumerate(bindings):
            if b.length > max_range:
                raise UserError(f"binding {i}: {b.length} B exceeds maxStorageBufferRange ({max_range} B); "
                                f"the buffer-device-address ABI has no such limit (--vulkan-dispatch-abi bda)")
        push_ptr = self._keep_bytes(consts) if consts else None
        infos = ffi.new("VkDescriptorBufferInfo[]", [
            {"buffer": b.buffer.vk_buffer, "offset": b.buffer.offset + b.offset, "range": b.length}
            for b in bindings])
        writes = ffi.new("VkWriteDescriptorSet[]", [
            {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, "dstBinding": i, "descriptorCount": 1,
             "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "pBufferInfo": infos + i}
            for i in range(len(bindings))])
        self.keep += [infos, writes]
        if dev.push_descriptors or not bindings:
            desc = ("push", len(bindings), writes)
        else:
            dset = self._descriptor_set(pipe.set_layout, len(bindings))
            for i in range(len(bindings)):
                writes[i].dstSet = dset
            lib.vkUpdateDescriptorSets(dev.handle, len(bindings), writes, 0, ffi.NULL)
            desc = ("set", ffi.new("VkDescriptorSet*", dset))
            self.keep.append(desc[1])
        self.ops.append(("dispatch", pipe, workgroups, push_ptr, len(consts), desc))

    def _keep_bytes(self, data: bytes) -> Any:
        p = ffi.new("char[]", data)
        self.keep.append(p)
        return p

    def _table(self, bindings: tuple[BufferBinding, ...]) -> int:
        """Write a binding table (one uint64 address per binding) and return its device address."""
        if not bindings:
            return 0
        need = 8 * len(bindings)
        if self._table_cursor + need > (self._tables[-1][2] if self._tables else 0):
            self._tables.append(self.device.table_pool.alloc(max(_TABLE_CHUNK, need)))
            self._table_cursor = 0
        block, off, _ = self._tables[-1]
        at = off + self._table_cursor
        table = ffi.cast("uint64_t*", block.ptr + at)
        for i, b in enumerate(bindings):
            buf: VulkanBuffer = b.buffer  # type: ignore[assignment]
            table[i] = buf.block.address + buf.offset + b.offset
        self._table_cursor += -(-need // 16) * 16
        return block.address + at

    def _descriptor_set(self, layout: Any, n: int) -> Any:
        dev = self.device
        if self._sets_left == 0:
            sizes = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                      "descriptorCount": _SETS_PER_POOL * 16})
            info = ffi.new("VkDescriptorPoolCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO, "maxSets": _SETS_PER_POOL,
                "poolSizeCount": 1, "pPoolSizes": sizes})
            out = ffi.new("VkDescriptorPool*")
            check(lib.vkCreateDescriptorPool(dev.handle, info, ffi.NULL, out), "vkCreateDescriptorPool", dev)
            self._desc_pools.append(out[0])
            self._sets_left, self._descs_left = _SETS_PER_POOL, _SETS_PER_POOL * 16
        if n > self._descs_left:
            self._sets_left = 0  # this pool is out of descriptors: open the next one
            return self._descriptor_set(layout, n)
        layouts = ffi.new("VkDescriptorSetLayout*", layout)
        info = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorPool": self._desc_pools[-1],
            "descriptorSetCount": 1, "pSetLayouts": layouts})
        out = ffi.new("VkDescriptorSet*")
        check(lib.vkAllocateDescriptorSets(dev.handle, info, out), "vkAllocateDescriptorSets", dev)
        self._sets_left -= 1
        self._descs_left -= n
        return out[0]

    def _barrier(self) -> None:
        self.ops.append(("barrier",))

    def _copy(self, src: VulkanBuffer, dst: VulkanBuffer, src_offset: int, dst_offset: int,
              nbytes: int) -> None:
        region = ffi.new("VkBufferCopy*", {"srcOffset": src.offset + src_offset,
                                           "dstOffset": dst.offset + dst_offset, "size": nbytes})
        self.keep.append(region)
        self.ops.append(("copy", src.vk_buffer, dst.vk_buffer, region))

    def _fill(self, buffer: VulkanBuffer, pattern: int, offset: int, nbytes: int) -> None:
        self.ops.append(("fill", buffer.vk_buffer, buffer.offset + offset, nbytes, pattern))

    # -- emission ---------------------------------------------------------------------
    def _end(self) -> None:
        dev = self.device
        fn = dev.fn
        with dev._lock:  # the command pool is externally synchronized
            info = ffi.new("VkCommandBufferAllocateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": dev.command_pool,
                "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1})
            out = ffi.new("VkCommandBuffer*")
            check(lib.vkAllocateCommandBuffers(dev.handle, info, out), "vkAllocateCommandBuffers", dev)
            self.handle = cb = out[0]
            n_dispatch = sum(op[0] == "dispatch" for op in self.ops)
            if self.profile:
                self.queries = 2 + 2 * n_dispatch if self.dispatch_times else 2
                qi = ffi.new("VkQueryPoolCreateInfo*", {
                    "sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                    "queryType": vk.VK_QUERY_TYPE_TIMESTAMP, "queryCount": self.queries})
                qp = ffi.new("VkQueryPool*")
                check(lib.vkCreateQueryPool(dev.handle, qi, ffi.NULL, qp), "vkCreateQueryPool", dev)
                self.query_pool = qp[0]
            # Simultaneous use: the same command buffer may be pending several times at once.
            begin = ffi.new("VkCommandBufferBeginInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                "flags": vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT})
            check(lib.vkBeginCommandBuffer(cb, begin), "vkBeginCommandBuffer", dev)
            qp = self.query_pool
            if qp is not None:
                fn.vkCmdResetQueryPool(cb, qp, 0, self.queries)
            fn.vkCmdPipelineBarrier2(cb, dev.full_barrier)
            if qp is not None:
                fn.vkCmdWriteTimestamp2(cb, _ALL, qp, 0)
            self._emit(cb, fn, qp if self.dispatch_times else None)
            if qp is not None:
                fn.vkCmdWriteTimestamp2(cb, _ALL, qp, 1)
            fn.vkCmdPipelineBarrier2(cb, dev.host_barrier)
            check(lib.vkEndCommandBuffer(cb), "vkEndCommandBuffer", dev)
        self.submit_info = ffi.new("VkCommandBufferSubmitInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_SUBMIT_INFO, "commandBuffer": cb})

    def _emit(self, cb: Any, fn: Any, qp: Any) -> None:
        bound = None
        q = 2
        narrow = self._compute_only_barriers()
        for i, op in enumerate(self.ops):
            kind = op[0]
            if kind == "dispatch":
                _, pipe, (x, y, z), push, push_size, desc = op
                if pipe is not bound:
                    fn.vkCmdBindPipeline(cb, _COMPUTE_BP, pipe.handle)
                    bound = pipe
                if desc is not None and desc[0] == "push" and desc[1]:
                    fn.vkCmdPushDescriptorSetKHR(cb, _COMPUTE_BP, pipe.layout, 0, desc[1], desc[2])
                elif desc is not None and desc[0] == "set":
                    fn.vkCmdBindDescriptorSets(cb, _COMPUTE_BP, pipe.layout, 0, 1, desc[1], 0, ffi.NULL)
                if push_size:
                    fn.vkCmdPushConstants(cb, pipe.layout, _STAGE, 0, push_size, push)
                if qp is not None:
                    fn.vkCmdWriteTimestamp2(cb, _ALL, qp, q)
                fn.vkCmdDispatch(cb, x, y, z)
                if qp is not None:
                    fn.vkCmdWriteTimestamp2(cb, _ALL, qp, q + 1)
                q += 2
            elif kind == "barrier":
                dev = self.device
                fn.vkCmdPipelineBarrier2(cb, dev.compute_barrier if i in narrow else dev.full_barrier)
            elif kind == "copy":
                fn.vkCmdCopyBuffer(cb, op[1], op[2], 1, op[3])
            elif kind == "fill":
                fn.vkCmdFillBuffer(cb, op[1], op[2], op[3], op[4])

    def _compute_only_barriers(self) -> set[int]:
        """The barriers with only dispatches on both sides (up to the neighbouring barriers):
        they order compute shaders' storage accesses, nothing else."""
        out: set[int] = set()
        bounds = [-1] + [i for i, op in enumerate(self.ops) if op[0] == "barrier"] + [len(self.ops)]
        for a, b, c in zip(bounds, bounds[1:], bounds[2:]):
            if all(op[0] == "dispatch" for op in self.ops[a + 1:c] if op[0] != "barrier"):
                out.add(b)
        return out

    def read_ticks(self) -> list[int]:
        dev = self.device
        out = ffi.new("uint64_t[]", self.queries)
        check(dev.fn.vkGetQueryPoolResults(dev.handle, self.query_pool, 0, self.queries, 8 * self.queries, out, 8,
                                           vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults", dev)
        return list(out)

    def release(self) -> None:
        dev = self.device
        if dev.closed:
            return
        with dev._lock:
            if self.handle is not None:
                lib.vkFreeCommandBuffers(dev.handle, dev.command_pool, 1, ffi.new("VkCommandBuffer*", self.handle))
                self.handle = None
            if self.query_pool is not None:
                lib.vkDestroyQueryPool(dev.handle, self.query_pool, ffi.NULL)
                self.query_pool = None
            for p in self._desc_pools:
                lib.vkDestroyDescriptorPool(dev.handle, p, ffi.NULL)
            self._desc_pools.clear()
            for block, off, size in self._tables:
                dev.table_pool.free(block, off, size)
            self._tables.clear()
        dev._command_buffers.discard(self)
