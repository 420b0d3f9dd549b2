"""IREE as a peer: iree-base-compiler imports the ONNX file (weights externalized as IREE
parameters) and compiles it for llvm-cpu, vulkan-spirv or cuda, with the target named by the
device's arch; iree-base-runtime runs it, timed like iree-benchmark-module (a synchronous call
on the host clock, inputs already on the device).

When IREE cannot target the device (IREE 3.13 has no sm_90), the error is recorded and the
nearest target it has is tried, and the result says so. Compiled modules are cached by the
model's content key, device kind and requested target, so a machine without the compiler (the
GPU machine) runs modules compiled elsewhere (``scripts/precompile.py --iree``). Weights travel
as parameters built at load time from the model file, so a module stays small.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from halbench.peers import (
    Modes,
    Peer,
    PeerSample,
    PeerSpec,
    PeerUnsupported,
    PreparedPeer,
    host_timed,
)

__all__ = ["IreePeer", "compile_for", "iree_candidates"]

#: Initializers with at least this many elements become IREE parameters (the rest stay inline).
PARAM_THRESHOLD = 256
_SCOPE = "model"
_RUNTIME_DRIVER = {"cpu": "local-task", "vulkan": "vulkan", "cuda": "cuda", "hip": "hip"}
#: Fallbacks when IREE does not know the device's own target.
_NEAREST = {"cuda": ["sm_80"], "vulkan": ["ampere"], "hip": ["gfx942"]}


class IreePeer(Peer):
    name = "iree"
    modes: ClassVar[Modes] = {
        "default": (("cpu", "vulkan", "cuda", "hip"),
        "IREE: llvm-cpu, vulkan-spirv, cuda or rocm by the device")}
    default_mode = "default"
    packages = "iree-base-runtime (and iree-base-compiler to compile)"
    modules = ("iree.runtime",)
    distribution = "iree-base-runtime"

    def runtime(self, spec: PeerSpec, kind: str) -> str:
        return f"iree-{kind}"

    def prepare(self, spec: PeerSpec, model: Path, names: Sequence[str], inputs: Sequence[np.ndarray],
                device: Any) -> PreparedPeer:
        why = self.missing()
        if why:
            raise PeerUnsupported(why)
        from halbench.peers import device_kind

        kind = device_kind(device.driver) or ""
        return _Prepared(kind, model, names, inputs, device, self.version())


def iree_candidates(kind: str, device: Any) -> list[str | None]:
    """The IREE targets to try for a device, best first: its own arch, then the nearest."""
    ident = device.identity
    if kind == "cuda":
        arch = ident.arch or (f"sm_{str(ident.compute_capability).replace('.', '')}"
                              if ident.compute_capability else None)
        return list(dict.fromkeys([a for a in [arch, *_NEAREST["cuda"]] if a]))
    if kind == "hip":
        return list(dict.fromkeys([a for a in [ident.arch, *_NEAREST["hip"]] if a]))
    if kind == "vulkan":
        if ident.vendor_id == 0x10DE:  # NVIDIA: IREE names targets by code name
            own = _code_name(device)
            return list(dict.fromkeys([a for a in [own, *_NEAREST["vulkan"]] if a]))
        return [None]  # IREE's generic Vulkan target (lavapipe, unknown vendors)
    return ["host"]


def _code_name(device: Any) -> str | None:
    try:
        from halbench.compiler.targets import target_from_device
    except ImportError:
        return None
    info = getattr(device, "info", None)  # the worker's device: the probed DeviceInfo as a dict
    try:
        t = target_from_device(info if isinstance(info, dict) else device, "vulkan")
    except Exception:  # noqa: BLE001
        return None
    return getattr(t, "code_name", None) or None


def _target_args(kind: str, target: str | None) -> list[str]:
    if kind == "cpu":
        return ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                "--iree-llvmcpu-target-cpu=host"]
    if kind == "vulkan":
        return ["--iree-hal-target-device=vulkan"] + ([f"--iree-vulkan-target={target}"] if target else [])
    if kind == "cuda":
        return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={target}"]
    return ["--iree-hal-target-device=hip", f"--iree-hip-target={target}"]


def _sanitize(name: str) -> str:
    return name.replace(":", "_")


def _cache_paths(cache: Path, key: str, kind: str, requested: str | None) -> tuple[Path, Path]:
    # A module runs only on the IREE runtime of its compiler's version (the two are pinned alike).
    version = IreePeer().version() or "unknown"
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{key[:24]}-{kind}-{requested or 'default'}-iree{version}")
    return cache / f"{stem}.vmfb", cache / f"{stem}.json"


def compile_for(model: Path, key: str, kind: str, candidates: list[str | None], cache: Path) -> dict[str, Any]:
    """Compile (or find cached) ``model`` for ``kind``: the first candidate target IREE takes.
    Returns the cache record: ``vmfb`` path, ``target``, ``note``, ``compile_s``; raises
    PeerUnsupported with IREE's own error when none works or the compiler is missing."""
    vmfb, meta = _cache_paths(cache, key, kind, candidates[0])
    if vmfb.exists() and meta.exists():
        rec = json.loads(meta.read_text())
        if rec.get("error"):
            raise PeerUnsupported(rec["error"])
        return {**rec, "vmfb": str(vmfb), "cached": True}
    try:
        from iree.compiler import compile_file
    except ImportError:
        raise PeerUnsupported("no compiled IREE module is cached for this model and target, and "
                              "iree-base-compiler is not installed to compile one (compile elsewhere "
                              "with scripts/precompile.py --iree and carry the cache)") from None
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        mlir = Path(tmp) / "model.mlir"
        r = subprocess.run([sys.executable, "-m", "iree.compiler.tools.import_onnx", str(model), "-o", str(mlir),
                            "--externalize-params", "--no-save-params", "--params-scope", _SCOPE,
                            "--num-elements-threshold", str(PARAM_THRESHOLD)],
                           check=False, capture_output=True, text=True, timeout=1800)
        if r.returncode != 0:
            err = (r.stderr.strip().splitlines() or ["?"])[-1][:300]
            raise PeerUnsupported(f"IREE's ONNX importer failed: {err}")
        params = sorted(set(re.findall(r'parameter\.named<"[^"]*"::"([^"]+)">', mlir.read_text())))
        errors: list[str] = []
        for target in candidates:
            try:
                data = compile_file(str(mlir), extra_args=_target_args(kind, target))
            except Exception as e:  # noqa: BLE001 - the compiler raises CompilerToolError
                lines = [ln.strip() for ln in str(e).splitlines() if "error:" in ln.lower()]
                code = next((ln.strip() for ln in str(e).splitlines() if "Error code" in ln), "")
                errors.append(f"{target or 'default'}: {(lines or [code or str(e).splitlines()[0]])[0][:240]}")
                continue
            note = None
            if errors:
                note = (f"IREE cannot target {candidates[0]} ({errors[0]}); compiled for the nearest "
                        f"target it has, {target}")
            rec = {"target": target or "default", "requested": candidates[0] or "default", "note": note,
                   "compile_s": round(time.perf_counter() - t0, 2), "params": params,
                   "flags": _target_args(kind, target)}
            vmfb.write_bytes(data)
            meta.write_text(json.dumps(rec))
            return {**rec, "vmfb": str(vmfb), "cached": False}
    msg = f"IREE could not compile the model for {kind}: " + "; ".join(errors)
    meta.write_text(json.dumps({"error": msg}))
    raise PeerUnsupported(msg)


class _Prepared(PreparedPeer):
    timed_on = "host"

    def __init__(self, kind: str, model: Path, names: Sequence[str], inputs: Sequence[np.ndarray],
                 device: Any, version: str) -> None:
        super().__init__()
        import iree.runtime as rt
        import onnx
        from onnx import numpy_helper

        from halbench.peers import model_key
        from halbench.tools import cache_dir

        self.runtime = f"iree-{kind}"
        rec = compile_for(model, model_key(model), kind, iree_candidates(kind, device), cache_dir() / "iree")
        if rec.get("note"):
            self.notes.append(rec["note"])
        driver = _RUNTIME_DRIVER[kind]
        try:
            self.config = rt.Config(driver)
        except Exception as e:  # noqa: BLE001
            raise PeerUnsupported(f"IREE's {driver} driver cannot start here: {str(e).splitlines()[0][:200]}") from None
        # Weights: the model file's initializers, as IREE parameters (scope "model").
        index = rt.ParameterIndex()
        self._params: list[np.ndarray] = []  # kept alive: IREE imports their memory
        m = onnx.load(str(model))
        by_name = {_sanitize(t.name): t for t in m.graph.initializer}
        for p in rec.get("params", []):
            if p not in by_name:
                raise PeerUnsupported(f"IREE module wants parameter {p!r}, which the model does not have")
            self._params.append(_aligned(numpy_helper.to_array(by_name[p])))
            index.add_buffer(p, self._params[-1])
        graph_name = m.graph.name
        del m, by_name
        self.ctx = rt.SystemContext(config=self.config)
        self.ctx.add_vm_module(rt.create_io_parameters_module(self.ctx.instance,
                                                              index.create_provider(scope=_SCOPE)))
        vm = rt.VmModule.mmap(self.ctx.instance, rec["vmfb"])
        self.ctx.add_vm_module(vm)
        fns = [n for n in vm.function_names if not n.startswith("__") and "$" not in n]
        fn_name = next((n for n in fns if n == graph_name), None) or (fns[0] if fns else None)
        if fn_name is None:
            raise PeerUnsupported("the IREE module exports no function")
        self.fn = self.ctx.modules[vm.name][fn_name]
        self.args = [rt.asdevicearray(self.config.device, _aligned(x)) for x in inputs]
        self.out: Any = None
        self.settings = {"target": rec["target"], "requested_target": rec["requested"], "driver": driver,
                         "flags": rec.get("flags", []), "compile_s": rec.get("compile_s"),
                         "cached": rec.get("cached", False), "iree": version}

    def _call(self) -> None:
        self.out = self.fn(*self.args)

    def invoke(self) -> list[np.ndarray]:
        self._call()
        outs = self.out if isinstance(self.out, (list, tuple)) else [self.out]
        return [_to_host(self.config.device, o) if hasattr(o, "_buffer_view") else np.asarray(o) for o in outs]

    def run(self) -> PeerSample:
        # The module's exported function is synchronous (IREE's default execution model waits on
        # its fences before returning), as iree-benchmark-module times it.
        return host_timed(self._call)

    def close(self) -> None:
        self.fn = None
        self.args = []
        self.out = None
        self.ctx = None


def _to_host(device: Any, arr: Any) -> np.ndarray:
    """A device array's values through a staging buffer. iree-base-runtime 3.13's ``to_host``
    imports an unaligned NumPy allocation on Vulkan, which the driver refuses
    (minImportedHostPointerAlignment); a mappable staging buffer works on every driver."""
    import iree.runtime as rt

    if arr._is_mappable():
        return np.array(arr.to_host())
    bv = arr._buffer_view
    source = bv.get_buffer()
    usage = int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED)
    host = device.allocator.allocate_buffer(memory_type=int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE),
                                            allowed_usage=usage, allocation_size=source.byte_length())
    sem = device.create_semaphore(0)
    device.queue_copy(source, host, wait_semaphores=rt.HalFence.create_at(sem, 0),
                      signal_semaphores=rt.HalFence.create_at(sem, 1))
    rt.HalFence.create_at(sem, 1).wait()
    return np.array(host.map().asarray(bv.shape, arr._get_raw_dtype()))


def _aligned(a: np.ndarray, alignment: int = 4096) -> np.ndarray:
    """A copy of ``a`` whose memory starts on a page: Vulkan imports host memory only so aligned."""
    a = np.ascontiguousarray(a)
    raw = np.empty(a.nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out
