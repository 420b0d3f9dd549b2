"""Device memory: a sub-allocator over large blocks, and the HAL Buffer on top of it.

Each block is one VkDeviceMemory with one VkBuffer over all of it; a HAL buffer is a range of a
block. So thousands of small buffers cost two Vulkan objects per 64 MiB, far below
maxMemoryAllocationCount (4096 on many drivers), and a binding is just (block buffer, offset).
Buffers larger than half a block get a block of their own, freed with them.
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

from halbench.drivers.vulkan._vk import (
    BUFFER_USAGE_SHADER_DEVICE_ADDRESS,
    MEMORY_ALLOCATE_DEVICE_ADDRESS,
    check,
    ffi,
    lib,
    vk,
)
from halbench.errors import UserError
from halbench.hal import Buffer

if TYPE_CHECKING:
    from halbench.drivers.vulkan.device import VulkanDevice

__all__ = ["DL", "HC", "HCACHED", "HV", "Block", "MemoryPool", "VulkanBuffer", "pick_memory_type"]

DL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
HV = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT
HC = vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
HCACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT
BLOCK_SIZE = 64 << 20


def pick_memory_type(memory: Any, allowed_bits: int, preferences: list[tuple[int, int]]) -> int | None:
    """The first memory type in ``allowed_bits`` matching a (required flags, heap index or -1) pair."""
    for required, heap in preferences:
        for i in range(memory.memoryTypeCount):
            t = memory.memoryTypes[i]
            if allowed_bits >> i & 1 and t.propertyFlags & required == required and heap in (-1, t.heapIndex):
                return i
    return None


class Block:
    """One VkDeviceMemory + one VkBuffer over it; a sorted free list of (offset, size) ranges."""

    def __init__(self, pool: MemoryPool, size: int, dedicated: bool):
        dev = pool.device
        self.pool, self.size, self.dedicated = pool, size, dedicated
        self.buffer = self.memory = None
        self.ptr: Any = None
        self.address = 0
        info = vk.VkBufferCreateInfo(size=size, usage=pool.usage, sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        out = ffi.new("VkBuffer*")
        check(lib.vkCreateBuffer(dev.handle, ffi.addressof(info), ffi.NULL, out), "vkCreateBuffer", dev)
        self.buffer = out[0]
        try:
            self._bind(pool, dev)
        except BaseException:
            self.destroy()
            raise
        self.free_ranges: list[tuple[int, int]] = [(0, size)]

    def _bind(self, pool: MemoryPool, dev: VulkanDevice) -> None:
        req = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(dev.handle, self.buffer, req)
        type_index = pool.type_index(req.memoryTypeBits)
        flags = vk.VkMemoryAllocateFlagsInfo(flags=MEMORY_ALLOCATE_DEVICE_ADDRESS) if dev.bda else None
        info = vk.VkMemoryAllocateInfo(allocationSize=req.size, memoryTypeIndex=type_index,
                                       pNext=ffi.addressof(flags) if flags is not None else None)
        out = ffi.new("VkDeviceMemory*")
        check(lib.vkAllocateMemory(dev.handle, ffi.addressof(info), ffi.NULL, out),
              f"vkAllocateMemory of {req.size} B", dev)
        self.memory = out[0]
        check(lib.vkBindBufferMemory(dev.handle, self.buffer, self.memory, 0), "vkBindBufferMemory", dev)
        if pool.mapped and pool.type_flags & HV:
            pp = ffi.new("void**")
            check(lib.vkMapMemory(dev.handle, self.memory, 0, req.size, 0, pp), "vkMapMemory", dev)
            self.ptr = ffi.cast("char*", pp[0])
        if dev.bda and pool.usage & BUFFER_USAGE_SHADER_DEVICE_ADDRESS:
            ai = vk.VkBufferDeviceAddressInfo(buffer=self.buffer)
            self.address = lib.vkGetBufferDeviceAddress(dev.handle, ffi.addressof(ai))

    def alloc(self, size: int) -> int | None:
        for i, (off, n) in enumerate(self.free_ranges):
            if n >= size:
                if n == size:
                    del self.free_ranges[i]
                else:
                    self.free_ranges[i] = (off + size, n - size)
                return off
        return None

    def release(self, offset: int, size: int) -> None:
        r = self.free_ranges
        i = bisect.bisect(r, (offset, size))
        r.insert(i, (offset, size))
        # Coalesce with the neighbours so the block can be reused for large buffers.
        if i + 1 < len(r) and r[i][0] + r[i][1] == r[i + 1][0]:
            r[i] = (r[i][0], r[i][1] + r[i + 1][1])
            del r[i + 1]
        if i > 0 and r[i - 1][0] + r[i - 1][1] == r[i][0]:
            r[i - 1] = (r[i - 1][0], r[i - 1][1] + r[i][1])
            del r[i]

    @property
    def empty(self) -> bool:
        return self.free_ranges == [(0, self.size)]

    def destroy(self) -> None:
        h = self.pool.device.handle
        if self.buffer is not None:
            lib.vkDestroyBuffer(h, self.buffer, ffi.NULL)
            self.buffer = None
        if self.memory is not None:
            lib.vkFreeMemory(h, self.memory, ffi.NULL)  # unmaps too
            self.memory = None


class MemoryPool:
    """Blocks of one kind of memory (device buffers, binding tables, staging)."""

    def __init__(self, device: VulkanDevice, name: str, usage: int, preferences: list[tuple[int, int]],
                 mapped: bool, block_size: int = BLOCK_SIZE):
        self.device, self.name, self.usage, self.preferences = device, name, usage, preferences
        self.mapped = mapped
        self.block_size = block_size
        self.align = max(256, device.binding_alignment)
        self.blocks: list[Block] = []
        self.type_flags = 0

    def type_index(self, allowed_bits: int) -> int:
        mem = self.device.physical.memory
        i = pick_memory_type(mem, allowed_bits, self.preferences)
        if i is None:
            raise UserError(f"{self.device.uri} has no memory type for {self.name} buffers")
        self.type_flags = mem.memoryTypes[i].propertyFlags
        return i

    def alloc(self, nbytes: int) -> tuple[Block, int, int]:
        """(block, offset, reserved size) for ``nbytes``."""
        size = -(-nbytes // self.align) * self.align
        if size > self.block_size // 2:
            self.device.check_allocation_size(size)
            block = Block(self, size, dedicated=True)
            block.free_ranges = []
            return block, 0, size
        for block in self.blocks:
            off = block.alloc(size)
            if off is not None:
                return block, off, size
        block = Block(self, self.block_size, dedicated=False)
        self.blocks.append(block)
        return block, block.alloc(size), size

    def free(self, block: Block, offset: int, size: int) -> None:
        if block.dedicated:
            block.destroy()
            return
        block.release(offset, size)
        # Keep one empty block for reuse; give the rest back to the driver.
        if block.empty and sum(b.empty for b in self.blocks) > 1:
            self.blocks.remove(block)
            block.destroy()

    def destroy(self) -> None:
        for b in self.blocks:
            b.destroy()
        self.blocks.clear()


class VulkanBuffer(Buffer):
    """A range of a block. Host access is direct where the memory is mapped, else staged."""

    def __init__(self, device: VulkanDevice, nbytes: int, pool: MemoryPool):
        super().__init__(device, nbytes)
        self.pool = pool
        self.block, self.offset, self.reserved = pool.alloc(nbytes)
        self.vk_buffer = self.block.buffer

    def _write(self, data: memoryview, offset: int) -> None:
        dev = self.device
        # Host access is immediate, as on every driver: callers order it with waits.
        if self.block.ptr is not None:
            ffi.memmove(self.block.ptr + (self.offset + offset), data, data.nbytes)
        else:
            dev.stager.write(self, data, offset)

    def _read(self, out: memoryview, offset: int) -> None:
        dev = self.device
        if self.block.ptr is not None and self.pool.type_flags & HCACHED:
            ffi.memmove(out, self.block.ptr + (self.offset + offset), out.nbytes)
        else:
            # Uncached (write-combined, e.g. a BAR window) memory reads at a crawl: stage instead.
            dev.stager.read(self, out, offset)

    def _free(self) -> None:
        self.pool.free(self.block, self.offset, self.reserved)

    def _device_address(self) -> int:
        if not self.block.address:
            raise UserError(f"{self.device.uri} has no bufferDeviceAddress")
        return self.block.address + self.offset
