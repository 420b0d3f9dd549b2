"""What the barriers between dependent dispatches cost a whole model, per API.

For each MODEL-bB-TAG.hbx in DIR (as scripts/ab_models.py takes them) and each device, the
model's function is timed whole (two timestamps, as run-suite times it) three ways, interleaved:
as compiled, with every barrier step left out of the recorded command buffer (the results are
then wrong: this is a timing experiment only), and, on Vulkan, with full (all-commands, memory)
barriers instead of the narrow compute-to-compute ones, with execution-only barriers
(compute to compute, no memory dependency: wrong results on a GPU whose caches need the
invalidation; it shows whether the wait or the cache work costs), and with each narrow barrier
replaced by an event (vkCmdSetEvent2 after the dispatches before it, vkCmdWaitEvents2 with the same
dependency, vkCmdResetEvent2 after: a split barrier; the probe waits for each submission, so an
event is never pending twice). The difference over the number
of barriers is what one dependent dispatch pays for its wait beyond what the kernels take.

Usage (on the GPU machine): python scripts/barrier_probe.py DIR [vulkan://0 cuda://0]
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import numpy as np

import halbench
from halbench.bench import zoo
from halbench.bundle.manifest import BarrierStep
from halbench.runtime import Module


class _EventBarriers:
    """The device's function table with the narrow barrier recorded as a set / wait / reset of an
    event of its own (``release`` destroys the events, before the device is closed)."""

    def __init__(self, dev) -> None:
        from halbench.drivers.vulkan._vk import device_fn

        self._fn, self._dev = dev.fn, dev
        self._set, self._wait, self._reset = (device_fn(dev.handle, n) for n in
                                              ("vkCmdSetEvent2", "vkCmdWaitEvents2", "vkCmdResetEvent2"))
        self._keep: list = []

    def __getattr__(self, name: str):
        return getattr(self._fn, name)

    def vkCmdPipelineBarrier2(self, cb, dep) -> None:
        if dep is not self._dev.compute_barrier:
            return self._fn.vkCmdPipelineBarrier2(cb, dep)
        from halbench.drivers.vulkan._vk import check, ffi, lib, vk

        info = ffi.new("VkEventCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_EVENT_CREATE_INFO, "flags": 1})
        ev = ffi.new("VkEvent*")
        check(lib.vkCreateEvent(self._dev.handle, info, ffi.NULL, ev), "vkCreateEvent", self._dev)
        self._keep.append(ev)
        self._set(cb, ev[0], dep)
        self._wait(cb, 1, ev, dep)
        self._reset(cb, ev[0], vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT)

    def release(self) -> None:
        from halbench.drivers.vulkan._vk import ffi, lib

        for ev in self._keep:
            lib.vkDestroyEvent(self._dev.handle, ev[0], ffi.NULL)
        self._keep.clear()


def _timed(mod: Module, inputs: list, rounds: int = 25) -> list[float]:
    return list(mod.profile(None, inputs, runs=rounds, warmup=2, dispatch_times=False).total_ns)


def _load(path: Path, dev, skip_barriers: bool, feeds: dict) -> tuple[Module, list]:
    """The module and its inputs, its command buffers (plain, and timed whole: recorded by its
    first profile) recorded with or without barriers."""
    probe = dev.command_buffer(profile=False)
    cls = type(probe)
    probe.release()
    orig = cls.barrier
    if skip_barriers:
        cls.barrier = lambda self, *a, **k: None
    try:
        mod = Module.load(path, dev)
        inputs = [feeds[s.name] for s in mod.function(None).inputs]
        mod.profile(None, inputs, runs=1, warmup=0, dispatch_times=False)
    finally:
        cls.barrier = orig
    return mod, inputs


def main() -> None:
    root = Path(sys.argv[1])
    uris = sys.argv[2:] or ["vulkan://0", "cuda://0"]
    rows = []
    for p in sorted(root.glob("*.hbx")):
        m = re.fullmatch(r"(.+)-b(\d+)-([A-Za-z0-9]+)\.hbx", p.name)
        if not m:
            continue
        model, batch = m.group(1), int(m.group(2))
        kw = {"batch": batch, **({"seq": 128} if model.startswith("minilm") else {})}
        feeds = zoo.make_inputs(model, **kw)
        for uri in uris:
            variants = [("compiled", False, True), ("no barriers", True, True)]
            if uri.startswith("vulkan"):
                variants += [("full barriers", False, False), ("execution only", False, "exec"),
                             ("events", False, "event")]
            times: dict[str, list[float]] = {}
            mods = {}
            devs = []
            try:
                for name, skip, narrow in variants:
                    os.environ["HALBENCH_VULKAN_NARROW_BARRIERS"] = "0" if narrow is False else "1"
                    dev = halbench.create_device(uri)
                    devs.append(dev)
                    if narrow == "event":
                        dev.fn = _EventBarriers(dev)
                    if narrow == "exec":
                        from halbench.drivers.vulkan._vk import vk

                        stage = vk.VK_PIPELINE_STAGE_2_COMPUTE_SHADER_BIT
                        dev.compute_barrier = dev._dependency(stage, 0, stage, 0)
                    mods[name], inputs = _load(p, dev, skip, feeds)
                os.environ.pop("HALBENCH_VULKAN_NARROW_BARRIERS", None)
                f = mods["compiled"].function(None)
                n_disp = sum(1 for s in f.steps if not isinstance(s, BarrierStep) and hasattr(s, "executable"))
                n_bar = sum(isinstance(s, BarrierStep) for s in f.steps)
                for mod in mods.values():  # clocks up
                    for _ in range(8):
                        _timed(mod, inputs, 10)
                for _ in range(6):
                    for name, mod in mods.items():
                        times.setdefault(name, []).extend(_timed(mod, inputs))
                med = {k: float(np.median(v)) / 1e3 for k, v in times.items()}
                per = (med["compiled"] - med["no barriers"]) / max(n_bar, 1)
                rows.append((model, batch, uri, n_disp, n_bar, med, per))
                print(f"{model} b{batch} {uri}: " + ", ".join(f"{k} {v:.1f} us" for k, v in med.items())
                      + f"; {n_disp} dispatches, {n_bar} barriers, {per:.2f} us a barrier", flush=True)
            except Exception as e:  # noqa: BLE001 -- one failing bundle must not lose the others
                print(f"{model} b{batch} {uri}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            finally:
                for mod in mods.values():
                    mod.close()
                for dev in devs:
                    if isinstance(getattr(dev, "fn", None), _EventBarriers):
                        dev.fn.release()
                    dev.close()
    print("\n| model | device | dispatches | barriers | compiled us | no barriers us | full barriers us | "
          "execution-only us | events us | us per barrier |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, batch, uri, nd, nb, med, per in rows:
        fb, ex, evs = (f"{med[k]:.1f}" if k in med else "-" for k in ("full barriers", "execution only", "events"))
        print(f"| {model} b{batch} | {uri} | {nd} | {nb} | {med['compiled']:.1f} | {med['no barriers']:.1f} | {fb} | "
              f"{ex} | {evs} | {per:.2f} |")


if __name__ == "__main__":
    main()
