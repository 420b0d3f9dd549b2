"""What a dependent dispatch costs beyond its kernel, per API, and what that cost depends on.

A model's Vulkan time on NVIDIA exceeds its CUDA graph's by about 1.8 us per barrier
(scripts/barrier_probe.py), while 100 chained dispatches of one no-op pipeline differ by only
0.6 us a dispatch (peak/latency/chain). This probe times chains of 100 dependent dispatches (a
barrier between each, the chain timed whole by two timestamps, as a model is), varying one
thing at a time:

- one pipeline / two alternating / 100 distinct pipelines (the same code, a different constant);
- 1 workgroup / 264 workgroups of 256 invocations (2 per SM on an H100);
- shared memory: none / 40 KiB in every other kernel;
- the buffer bound: the same / two alternating;
- Vulkan's dispatch ABI: descriptors (push descriptors where the device has them) / BDA;
- no barriers (the kernels alone);
- on Vulkan (BDA), the barrier itself: halbench's, full, shader read/write, one buffer, execution only;
- on Vulkan (BDA), no barrier at all but completion counters (1, 264 and 1056 workgroups): each
  dispatch's workgroups wait for the one before to count itself done. The run checks the chain's
  result too. On the H200 (docs/examples/h200-dispatch-cost-probe.txt) it was cheaper than a barrier
  only at one workgroup, dearer at 264, and its result was wrong: not a way to order real kernels.

Each kernel reads and rewrites one float per invocation (bounds-checked against n), so a
chain's dispatches depend on each other through memory.

Usage:
  python scripts/dispatch_cost_probe.py build OUT   # here: SPIR-V (glslang) and sm_90 cubins (NVRTC)
  python scripts/dispatch_cost_probe.py run OUT [vulkan://0 cuda://0]   # on the GPU machine
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

_GLSL = """
layout(local_size_x = 256) in;
#if SH
shared float sh[SH];
#endif
void main() {
  uint n = CONST(0), i = gl_GlobalInvocationID.x;
  float v = i < n ? B0(i) : 0.0;
#if SH
  sh[gl_LocalInvocationID.x % SH] = v;
  barrier();
  v = sh[(gl_LocalInvocationID.x + 1u) % SH];
#endif
  if (i < n) B0(i) = v * 0.5 + float(ID);
}
"""

_CUDA = r"""
typedef unsigned int uint;
extern "C" __global__ void __launch_bounds__(256) micro(float* buf, uint n) {
  uint i = blockIdx.x * 256u + threadIdx.x;
  float v = i < n ? buf[i] : 0.0f;
#if SH
  __shared__ float sh[SH];
  sh[threadIdx.x % SH] = v;
  __syncthreads();
  v = sh[(threadIdx.x + 1u) % SH];
#endif
  if (i < n) buf[i] = v * 0.5f + (float)ID;
}
"""

_IDS = 100
_SHARED = 10240  # floats: 40 KiB

# Chained by counters instead of barriers (Vulkan, BDA): each workgroup of dispatch i waits until
# every workgroup of dispatch i-1 has counted itself done in a sync buffer, then runs, then counts
# itself (device-scope fences around the counters). Nothing orders the dispatches for the driver,
# so the next one is launched while this one runs; forward progress rests on the hardware
# launching a dispatch's workgroups only after every workgroup of the one before has been
# launched. The wait gives up after SPIN_LIMIT polls and records that in sync[WAIT_FAILED].
_CHAIN_GLSL = """
layout(local_size_x = 256) in;
layout(buffer_reference, scalar) volatile buffer Sync { uint v[]; };
shared uint hb_ok;
void body() {
  uint n = CONST(0), i = gl_GlobalInvocationID.x;
  float v = i < n ? B0(i) : 0.0;
  if (i < n) B0(i) = v * 0.5 + float(ID);
}
void main() {
  Sync s = Sync(pc.table.addr[1]);
  uint wait_on = CONST(1), target = CONST(2), mine = CONST(3);
  if (target != 0u) {
    if (gl_LocalInvocationIndex == 0u) {
      uint k = 0u;
      while (s.v[wait_on] < target && k < SPIN_LIMIT) k++;
      if (k == SPIN_LIMIT) s.v[WAIT_FAILED] = 1u;
    }
    memoryBarrierBuffer();
    barrier();
  }
  body();
  memoryBarrierBuffer();
  barrier();
  if (gl_LocalInvocationIndex == 0u) atomicAdd(s.v[mine], 1u);
}
"""
_SPIN_LIMIT = 1 << 20


def _glsl(abi: str) -> str:
    from halbench.compiler.codegen import micro_glsl as mg

    if abi == "descriptors":
        buf = "DECLARE_BUF(0, float, buf0)\n#define B0(j) buf0[j]\n"
    else:
        buf = ("layout(buffer_reference, scalar) buffer Ref0 { float v[]; };\n"
               "#define B0(j) Ref0(pc.table.addr[0]).v[j]\n")
    return mg._COMMON + (mg._DESCRIPTORS if abi == "descriptors" else mg._BDA) + mg._push("copy", abi) + buf + _GLSL


def _chain_glsl() -> str:
    from halbench.compiler.codegen import micro_glsl as mg

    return (mg._COMMON + mg._BDA + "layout(push_constant, scalar) uniform Push { Table table; uint c[4]; } pc;\n"
            "#define CONST(i) pc.c[i]\n"
            "layout(buffer_reference, scalar) buffer Ref0 { float v[]; };\n"
            "#define B0(j) Ref0(pc.table.addr[0]).v[j]\n" + _CHAIN_GLSL)


def build(out: Path) -> None:
    from halbench.compiler.backends.glslang import compile_glsl
    from halbench.compiler.backends.nvrtc import compile_cuda

    out.mkdir(parents=True, exist_ok=True)
    index = []
    for sh in (0, _SHARED):
        for i in range(_IDS):
            if sh and i > 1:
                continue
            for abi in ("descriptors", "bda"):
                spv = compile_glsl(_glsl(abi), {"ID": i, "SH": sh}, name=f"probe_{abi}_{i}_{sh}")
                name = f"vk-{abi}-{i}-{sh}.spv"
                (out / name).write_bytes(spv)
                index.append({"api": "vulkan", "abi": abi, "id": i, "shared": sh, "file": name})
            cubin = compile_cuda(f"#define ID {i}\n#define SH {sh}\n" + _CUDA, arch="sm_90", name=f"probe_{i}_{sh}")
            name = f"cuda-{i}-{sh}.cubin"
            (out / name).write_bytes(cubin)
            index.append({"api": "cuda", "id": i, "shared": sh, "file": name})
    spv = compile_glsl(_chain_glsl(), {"ID": 0, "SPIN_LIMIT": f"{_SPIN_LIMIT}u", "WAIT_FAILED": _IDS + 1},
                       name="probe_chain")
    (out / "vk-chain.spv").write_bytes(spv)
    index.append({"api": "vulkan", "abi": "chain", "id": 0, "shared": 0, "file": "vk-chain.spv"})
    (out / "index.json").write_text(json.dumps(index, indent=1))
    print(f"{len(index)} kernels in {out}")


def _exe(dev, root: Path, row: dict):
    from halbench.hal import EntryPoint, ExecutableBinary

    if row["api"] == "vulkan":
        fmt = "vulkan-spirv-bda-v1" if row["abi"] in ("bda", "chain") else "vulkan-spirv-descriptors-v1"
        entry = EntryPoint("main", 2 if row["abi"] == "chain" else 1, 4 if row["abi"] == "chain" else 1,
                           (256, 1, 1))
        target = "spirv1.6"
    else:
        fmt = "cuda-cubin-v1"
        entry = EntryPoint("micro", 1, 1, (256, 1, 1), 0)
        target = "sm_90"
    return dev.load_executable(ExecutableBinary(fmt, (root / row["file"]).read_bytes(), (entry,), target)), entry.name


def _chain(dev, exes, groups: int, bufs, barriers: bool = True, dispatches: int = 100, dep=None):
    """``dep``: a Vulkan VkDependencyInfo to record between the dispatches instead of halbench's."""
    cb = dev.command_buffer(profile=True, dispatch_times=False)
    n = groups * 256
    for i in range(dispatches):
        if barriers and i:
            cb.barrier()
        exe, entry = exes[i % len(exes)]
        cb.dispatch(exe, entry, (groups, 1, 1), [bufs[i % len(bufs)]], [n])
    if dep is None:
        cb.end()
        return cb
    keep, dev.compute_barrier = dev.compute_barrier, dep
    try:
        cb.end()
    finally:
        dev.compute_barrier = keep
    return cb


def _counter_chain(dev, exe, groups: int, buf, sync, dispatches: int = 100):
    """``dispatches`` dependent dispatches ordered by counters in ``sync`` (zeroed first), no barriers."""
    cb = dev.command_buffer(profile=True, dispatch_times=False)
    cb.fill(sync, 0)
    cb.barrier()
    n = groups * 256
    for i in range(dispatches):
        cb.dispatch(exe[0], exe[1], (groups, 1, 1), [buf, sync], [n, max(i - 1, 0), groups if i else 0, i])
    cb.end()
    return cb


def _barrier_kinds(dev, buf) -> dict:
    """The ways to order one dispatch after another that Vulkan offers, as VkDependencyInfos."""
    import vulkan as vk
    from vulkan import ffi

    s2 = vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT
    keep = []

    def dep(barrier=None, buffer=None):
        info = {"sType": vk.VK_STRUCTURE_TYPE_DEPENDENCY_INFO}
        if barrier is not None:
            mb = ffi.new("VkMemoryBarrier2*", dict(sType=vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER_2, **barrier))
            keep.append(mb)
            info.update(memoryBarrierCount=1, pMemoryBarriers=mb)
        if buffer is not None:
            bb = ffi.new("VkBufferMemoryBarrier2*", dict(sType=vk.VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER_2,
                                                          srcQueueFamilyIndex=0xFFFFFFFF,
                                                          dstQueueFamilyIndex=0xFFFFFFFF,
                                                          buffer=buf.vk_buffer, offset=buf.offset,
                                                          size=2**64 - 1, **buffer))
            keep.append(bb)
            info.update(bufferMemoryBarrierCount=1, pBufferMemoryBarriers=bb)
        d = ffi.new("VkDependencyInfo*", info)
        keep.append(d)
        return d

    rw = vk.VK_ACCESS_2_SHADER_STORAGE_READ_BIT | vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT
    out = {
        "barrier: halbench's (compute storage)": dev.compute_barrier,
        "barrier: full (all commands, memory)": dev.full_barrier,
        "barrier: shader write -> read": dep({"srcStageMask": s2, "srcAccessMask": vk.VK_ACCESS_2_SHADER_WRITE_BIT,
                                                  "dstStageMask": s2, "dstAccessMask": vk.VK_ACCESS_2_SHADER_READ_BIT}),
        "barrier: on the one buffer": dep(buffer={"srcStageMask": s2,
                                                      "srcAccessMask": vk.VK_ACCESS_2_SHADER_STORAGE_WRITE_BIT,
                                                      "dstStageMask": s2, "dstAccessMask": rw}),
        "barrier: execution only (no memory dep.)": dep({"srcStageMask": s2, "srcAccessMask": 0,
                                                             "dstStageMask": s2, "dstAccessMask": 0}),
    }
    dev._probe_keep = keep
    return out


def _time(dev, cb, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        sub = dev.submit(cb)
        sub.wait(timeout_s=60)
        out.append(sub.profile().total_ns / 1e3)
    return out


def run(root: Path, uris: list[str]) -> None:
    import halbench

    index = json.loads((root / "index.json").read_text())
    results: dict[tuple[str, str], float] = {}
    for uri in uris:
        api = uri.split(":")[0]
        abis = ("descriptors", "bda") if api == "vulkan" else (None,)
        for abi in abis:
            dev = halbench.create_device(uri)
            try:
                def pick(i: int, sh: int = 0, api=api, abi=abi, dev=dev):
                    row = next(r for r in index if r["api"] == api and r["id"] == i and r["shared"] == sh
                               and (abi is None or r["abi"] == abi))
                    return _exe(dev, root, row)

                one = [pick(0)]
                two = [pick(0), pick(1)]
                many = [pick(i) for i in range(_IDS)]
                shared = [pick(0), pick(1, _SHARED)]
                big = 264
                b1 = dev.allocate(big * 256 * 4)
                b2 = dev.allocate(big * 256 * 4)
                for b in (b1, b2):
                    b.write(np.zeros(big * 256, np.float32))
                variants = {
                    "1 pipeline, 1 wg": _chain(dev, one, 1, [b1]),
                    "2 pipelines, 1 wg": _chain(dev, two, 1, [b1]),
                    "100 pipelines, 1 wg": _chain(dev, many, 1, [b1]),
                    "1 pipeline, 264 wg": _chain(dev, one, big, [b1]),
                    "2 pipelines, 264 wg": _chain(dev, two, big, [b1]),
                    "100 pipelines, 264 wg": _chain(dev, many, big, [b1]),
                    "2 pipelines, 40 KiB shared in one, 264 wg": _chain(dev, shared, big, [b1]),
                    "1 pipeline, 2 buffers, 264 wg": _chain(dev, one, big, [b1, b2]),
                    "100 pipelines, 264 wg, no barriers": _chain(dev, many, big, [b1], barriers=False),
                }
                if api == "vulkan" and abi == "bda":  # the barrier's own kind, 1 pipeline, 264 wg
                    for k, dep in _barrier_kinds(dev, b1).items():
                        variants[k] = _chain(dev, one, big, [b1], dep=dep)
                    row = next((r for r in index if r.get("abi") == "chain"), None)
                    if row is not None:  # ordered by counters, no barriers
                        chain = _exe(dev, root, row)
                        sync = dev.allocate(4 * (_IDS + 2))
                        for g in (1, big, 4 * big):
                            variants[f"counters, no barriers, {g} wg"] = _counter_chain(dev, chain, g, b3 := dev.allocate(g * 256 * 4), sync)
                            b3.write(np.zeros(g * 256, np.float32))
                for cb in variants.values():  # clocks up
                    _time(dev, cb, 20)
                times: dict[str, list[float]] = {k: [] for k in variants}
                for _ in range(8):
                    for k, cb in variants.items():
                        times[k] += _time(dev, cb, 10)
                if api == "vulkan" and abi == "bda" and any(k.startswith("counters") for k in variants):
                    flags = sync.read(np.uint32, (_IDS + 2,))
                    print(f"{uri}: counter chain: last counter {flags[_IDS - 2]}, wait failed {flags[_IDS + 1]}")
                    cb = _counter_chain(dev, chain, big, b1, sync)  # check the values: x <- x/2 + 0, 100 times
                    b1.write(np.full(big * 256, 1024.0, np.float32))
                    dev.submit(cb).wait(timeout_s=60)
                    got = b1.read(np.float32, (big * 256,))
                    want = np.float32(1024.0)
                    for _ in range(100):
                        want = np.float32(want * np.float32(0.5))
                    print(f"{uri}: counter chain result max |err| {float(np.max(np.abs(got - want))):.3g} "
                          f"(want {want}), wait failed {sync.read(np.uint32, (_IDS + 2,))[_IDS + 1]}")
                    cb.release()
                label = f"{uri}" + (f" ({abi})" if abi else "")
                for k, v in times.items():
                    results[(label, k)] = statistics.median(v)
                    print(f"{label:28s} {k:44s} {statistics.median(v):8.1f} us  "
                          f"({statistics.median(v) / 100:.2f} us a dispatch)", flush=True)
                for cb in variants.values():
                    cb.release()
            finally:
                dev.close()
    labels = sorted({k[0] for k in results})
    kinds = list(dict.fromkeys(k[1] for k in results))
    print("\n| 100 dependent dispatches, us | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for k in kinds:
        print(f"| {k} | " + " | ".join(f"{results.get((lab, k), float('nan')):.1f}" for lab in labels) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] not in ("build", "run"):
        sys.exit(__doc__)
    if sys.argv[1] == "build":
        build(Path(sys.argv[2]))
    else:
        run(Path(sys.argv[2]), sys.argv[3:] or ["vulkan://0", "cuda://0"])
