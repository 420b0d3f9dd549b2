"""Realistic synthetic results files, so report/compare/gate/trace tests need no runner or GPU.

The numbers follow a roofline model of each device: a dispatch takes
max(flops / compute, bytes / bandwidth) at a per-API efficiency, plus a launch overhead; samples
carry lognormal noise, rare slow spikes (page faults, clock ramps) and a small per-run offset,
the way real repeated runs on one machine differ.

    python tests/reports/make_results.py out.json [--seed 1] [--slowdown 1.1]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from halbench.probe.info import (
    DeviceInfo,
    Features,
    Identity,
    Limits,
    MatrixShape,
    Memory,
    MemoryHeap,
    QueueFamily,
    Tier,
    Timing,
)

__all__ = ["DEVICES", "HOST_CPU", "MODELS", "PEERS", "main", "make_results", "set_repetitions"]

H100_UUID = "GPU-5f1c2a7e-93b4-4d8e-a1c2-0e6f7d8a9b10"


@dataclass(frozen=True)
class FakeDevice:
    info: DeviceInfo
    bandwidth_gb_s: float  # what a good kernel achieves
    compute_tflop_s: dict[str, float]
    efficiency: float  # share of the roofline model kernels reach
    launch_ms: float
    noise: float  # lognormal sigma of one sample
    samples: int
    published: dict[str, Any] | None = None
    clocks: bool = False


def _vk_tier(missing: tuple[str, ...] = ()) -> Tier:
    return Tier("vulkan-1.3", not missing, missing)


_FLAGS_GPU = {"shaderFloat16": True, "shaderInt8": True, "bufferDeviceAddress": True,
              "timelineSemaphore": True, "scalarBlockLayout": True, "synchronization2": True,
              "cooperativeMatrix": True, "shaderIntegerDotProduct": True}
_FLAGS_LVP = {**_FLAGS_GPU, "cooperativeMatrix": False}
_H100_MMA = (MatrixShape(16, 16, 16, "f16", "f16", "f32", "f32"),
             MatrixShape(16, 16, 16, "bf16", "bf16", "f32", "f32"))
_H100_PUBLISHED = {"source": "halbench.compiler.targets:h100-sxm", "bandwidth_gb_s": 3350.0,
                   "compute_tflop_s": {"f32": 67.0, "f16": 989.0, "bf16": 989.0}}

DEVICES: dict[str, FakeDevice] = {
    "h100-vulkan": FakeDevice(
        DeviceInfo("vulkan", 0, Identity(
            "NVIDIA H100 80GB HBM3", "NVIDIA", 0x10DE, 0x2330, "discrete-gpu", H100_UUID,
            "0000:19:00.0", "Vulkan", "1.4.312", "NVIDIA", "580.95.05", "580.95.05", None, None,
            "sm_90", "NVIDIA_PROPRIETARY", "9.0"),
            Limits((1024, 1024, 64), 1024, (2**31 - 1, 65535, 65535), 49152, 256, 2**32 - 1, 16,
                   32, 4096, 32, 32, 32, 132),
            Features(_FLAGS_GPU, _H100_MMA, ("basic", "arithmetic", "ballot", "shuffle")),
            Memory(80 * 2**30, (MemoryHeap(80 * 2**30, ("DEVICE_LOCAL",)),)),
            (QueueFamily(0, 16, ("GRAPHICS", "COMPUTE", "TRANSFER"), 64),
             QueueFamily(2, 8, ("COMPUTE", "TRANSFER"), 64)),
            Timing(1.0, ("DEVICE", "CLOCK_MONOTONIC")), ("VK_KHR_push_descriptor",),
            (_vk_tier(),), ("push_descriptor", "calibrated_timestamps", "cooperative_matrix")),
        2700.0, {"f32": 52.0, "f16": 560.0}, 0.55, 0.004, 0.015, 40, _H100_PUBLISHED, True),
    "h100-cuda": FakeDevice(
        DeviceInfo("cuda", 0, Identity(
            "NVIDIA H100 80GB HBM3", "NVIDIA", 0x10DE, 0x2330, "discrete-gpu", H100_UUID,
            "0000:19:00.0", "CUDA", "13.0", "NVIDIA", "580.95.05", "", None, None, "sm_90", "",
            "9.0"),
            Limits((1024, 1024, 64), 1024, (2**31 - 1, 65535, 65535), 232448, None, None, None,
                   None, None, 32, 32, 32, 132),
            Features({"shaderFloat16": True, "bf16": True, "shaderInt8": True}, _H100_MMA),
            Memory(80 * 2**30), (), Timing(1.0, ("CLOCK_MONOTONIC",)),
            attributes={"l2_cache_bytes": 52428800, "clock_rate_khz": 1980000}),
        2950.0, {"f32": 58.0, "f16": 690.0}, 0.65, 0.003, 0.012, 40, _H100_PUBLISHED, True),
    "lavapipe": FakeDevice(
        DeviceInfo("vulkan", 1, Identity(
            "llvmpipe (LLVM 19.1.7, 256 bits)", "Mesa", 0x10005, 0, "cpu", None, None, "Vulkan",
            "1.4.305", "llvmpipe", "25.0.7", "Mesa 25.0.7 (LLVM 19.1.7)", None, None, "x86_64",
            "MESA_LLVMPIPE"),
            Limits((1024, 1024, 1024), 1024, (65535, 65535, 65535), 32768, 256, 2**31 - 1, 16, 8,
                   4096, 8, 8, 8, 2),
            Features(_FLAGS_LVP, (), ("basic", "vote", "arithmetic", "ballot")),
            Memory(8 * 2**30, (MemoryHeap(8 * 2**30, ("DEVICE_LOCAL",)),)),
            (QueueFamily(0, 1, ("GRAPHICS", "COMPUTE", "TRANSFER"), 64),),
            Timing(1.0, ("DEVICE", "CLOCK_MONOTONIC")), ("VK_KHR_push_descriptor",),
            (_vk_tier(),), ("push_descriptor", "calibrated_timestamps")),
        18.0, {"f32": 0.12, "f16": 0.06}, 0.35, 0.02, 0.04, 10),
}

URIS = {"h100-vulkan": "vulkan://0", "lavapipe": "vulkan://1", "h100-cuda": "cuda://0"}
FORMATS = {"vulkan": "vulkan-spirv-bda-v1", "cuda": "cuda-cubin-v1"}

#: name -> (dispatch count, GFLOP per item, MB per item, batch)
MODELS: dict[str, tuple[int, float, float, int]] = {
    "mobilenetv2/b1": (65, 0.6, 28.0, 1),
    "mobilenetv2/b8": (65, 0.6, 14.0, 8),
    "resnet50/b1": (54, 8.2, 110.0, 1),
    "minilm-l6/s128": (42, 2.9, 95.0, 1),
}
_KINDS = ("conv2d+relu6", "depthwise_conv2d+relu6", "matmul+bias", "softmax", "layernorm",
          "add", "gelu", "pool")


def _dispatches(rng: np.random.Generator, count: int, gflop: float, mbytes: float
                ) -> list[tuple[str, float, float]]:
    """Split a model's work into dispatches with varied arithmetic intensity."""
    weights = rng.lognormal(0, 1.0, count)
    weights /= weights.sum()
    bweights = rng.lognormal(0, 0.7, count)
    bweights /= bweights.sum()
    out = []
    for i in range(count):
        kind = _KINDS[int(rng.integers(len(_KINDS)))]
        flops = gflop * 1e9 * weights[i] * (0.05 if kind in ("add", "softmax", "layernorm") else 1)
        out.append((f"{kind}_{i}", float(flops), float(mbytes * 1e6 * bweights[i])))
    return out


def _time_ms(dev: FakeDevice, flops: float, nbytes: float, dtype: str = "f32") -> float:
    compute = flops / (dev.compute_tflop_s[dtype] * 1e12 * dev.efficiency)
    memory = nbytes / (dev.bandwidth_gb_s * 1e9 * dev.efficiency)
    return max(compute, memory) * 1e3 + dev.launch_ms


def _noisy(rng: np.random.Generator, dev: FakeDevice, median: float, n: int, offset: float
           ) -> list[float]:
    x = median * offset * rng.lognormal(0.0, dev.noise, n)
    spikes = rng.random(n) < 0.03
    x[spikes] *= rng.uniform(1.2, 1.8, int(spikes.sum()))
    return [round(float(v), 6) for v in x]


def _environment(rng: np.random.Generator, dev: FakeDevice, throttle: bool) -> dict[str, Any]:
    if not dev.clocks:
        return {}
    temp = float(rng.integers(38, 45))
    after_reasons = ["sw_thermal_slowdown"] if throttle else []
    return {"before": {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "temperature_c": temp,
                       "power_w": 118.0, "throttle_reasons": []},
            "after": {"sm_clock_mhz": 1755 if throttle else 1980, "mem_clock_mhz": 2619,
                      "temperature_c": temp + (31 if throttle else 6), "power_w": 640.0,
                      "throttle_reasons": after_reasons}}


def _bench(rng, key, uri, dev, name, kind, flops, nbytes, items, dispatches, slow, offset, t0,
           throttle=False, dtype="f32") -> tuple[dict[str, Any], int]:
    total = sum(_time_ms(dev, f, b, dtype) for _, f, b in dispatches) * slow
    n = dev.samples
    device_ms = _noisy(rng, dev, total, n, offset)
    overhead = 0.03 if dev.info.driver == "cuda" else 0.05
    host_ms = [round(v + overhead + abs(float(rng.normal(0, 0.01))), 6) for v in device_ms]
    disp_out = []
    t = t0
    for i, (dname, f, b) in enumerate(dispatches):
        med = _time_ms(dev, f, b, dtype) * slow * offset
        d_ns = int(med * 1e6)
        disp_out.append({
            "index": i, "name": dname, "flops": f, "bytes": b,
            "device_ms": {"median": round(med, 6), "p10": round(med * 0.97, 6),
                          "p90": round(med * 1.04, 6), "mean": round(med * 1.01, 6), "count": n},
            "trace": {"start_ns": t, "end_ns": t + d_ns, "queue": 0}})
        t += d_ns + 1500  # a barrier between dispatches
    bench = {
        "name": name, "kind": kind, "device": uri, "driver": dev.info.driver,
        "runtime": "halbench", "runtime_info": {},
        "format": FORMATS[dev.info.driver], "status": "ok", "error": None,
        "params": {"model": name.split("/")[0], "batch": items, "dtype": dtype} if kind == "model"
        else {"dtype": dtype},
        "compile": {"seconds": round(float(rng.uniform(0.5, 4.0)), 3), "cached": False,
                    "dispatches": len(dispatches), "executable_bytes": 4096 * len(dispatches),
                    "stages": {"import": 0.4, "passes": 0.2, "codegen": 0.9}},
        "correctness": {"checked": kind == "model", "passed": True if kind == "model" else None,
                        "max_abs_error": 3e-6 if kind == "model" else None,
                        "rel_error": 1e-6 if kind == "model" else None, "tolerance": 1e-4,
                        "reference": "local-sync"},
        "timing": {"warmup": 3, "min_time_s": 1.0, "min_samples": 10,
                   "calibrated": dev.info.driver == "cuda" or "calibrated_timestamps"
                   in dev.info.opportunities,
                   "calibration_deviation_ns": round(float(rng.uniform(40, 400)), 1),
                   "total_source": "timestamps"},
        "samples": {"device_ms": device_ms, "host_ms": host_ms},
        "metrics": {"flops": sum(f for _, f, _ in dispatches), "bytes": sum(b for _, _, b in dispatches),
                    "unit": "ms", "items_per_run": items},
        "dispatches": disp_out,
        "environment": _environment(rng, dev, throttle),
    }
    return bench, t + 2_000_000


#: The host CPU a CPU peer (onnxruntime-cpu, iree-cpu) runs on; halbench runs no model there.
HOST_CPU = "local-task://"
_HOST_CPU_INFO = {"driver": "local-task", "uri": HOST_CPU,
                  "identity": {"name": "Intel(R) Xeon(R) Platinum 8480+", "vendor": "Intel",
                               "device_type": "cpu", "api": "host", "arch": "x86_64"}}
#: runtime -> (the device it runs on: a DEVICES key, or HOST_CPU; its runtime_info)
PEERS: dict[str, tuple[str, dict[str, Any]]] = {
    "torch-cudagraph": ("h100-cuda", {"peer": "torch/cudagraph", "version": "2.11.0",
                                      "settings": {"precision": "fp32", "tf32": False}}),
    "torch-compile": ("h100-cuda", {"peer": "torch/compile", "version": "2.11.0",
                                    "settings": {"precision": "fp32", "mode": "max-autotune"}}),
    "torch-eager": ("h100-cuda", {"peer": "torch/eager", "version": "2.11.0",
                                  "settings": {"precision": "fp32", "tf32": False}}),
    "onnxruntime-cuda": ("h100-cuda", {"peer": "onnxruntime/cuda", "version": "1.23.2",
                                       "settings": {"provider": "CUDAExecutionProvider"},
                                       "note": "2 nodes fell back to the CPU provider"}),
    "onnxruntime-cpu": (HOST_CPU, {"peer": "onnxruntime/cpu", "version": "1.23.2",
                                   "settings": {"provider": "CPUExecutionProvider", "threads": 16}}),
    "iree-cuda": ("h100-cuda", {"peer": "iree/cuda", "version": "3.8.0",
                                "settings": {"target": "sm_90"}}),
    "iree-vulkan": ("h100-vulkan", {"peer": "iree/vulkan", "version": "3.8.0",
                                    "settings": {"target": "nvidia"}}),
}


def _peer_entries(rng: np.random.Generator, benchmarks: list[dict[str, Any]],
                  peers: dict[str, float | dict[str, float]]) -> tuple[list[dict[str, Any]], bool]:
    """Entries of peer runtimes for every model halbench timed on the peer's device, each taking
    ``ratio`` times halbench's median there (a CPU peer: times halbench's on the first device);
    True when a CPU peer ran (its device joins ``devices``)."""
    out, host = [], False
    models = [b for b in benchmarks if b["kind"] == "model" and b["status"] == "ok"]
    for runtime, ratios in peers.items():
        dev_key, info = PEERS[runtime]
        uri = HOST_CPU if dev_key == HOST_CPU else URIS[dev_key]
        for b in models:
            if dev_key != HOST_CPU and b["device"] != uri:
                continue
            if dev_key == HOST_CPU and b["device"] != models[0]["device"]:
                continue
            ratio = ratios.get(b["name"], 1.0) if isinstance(ratios, dict) else ratios
            noise = DEVICES[dev_key].noise if dev_key != HOST_CPU else 0.03
            n = len(b["samples"]["device_ms"])
            median = float(np.median(b["samples"]["device_ms"])) * ratio
            x = median * rng.lognormal(0.0, noise, n)
            device_ms = [round(float(v), 6) for v in x]
            host = host or dev_key == HOST_CPU
            out.append({
                "name": b["name"], "kind": "model", "device": uri,
                "driver": "local-task" if dev_key == HOST_CPU else b["driver"],
                "runtime": runtime, "runtime_info": info, "format": None, "status": "ok",
                "error": None, "params": b["params"], "compile": {},
                "correctness": {"checked": True, "passed": True, "max_abs_error": 2e-6,
                                "rel_error": 8e-7, "tolerance": 1e-4,
                                "reference": "onnxruntime-cpu"},
                "timing": {"warmup": 3, "min_time_s": 1.0, "min_samples": 10,
                           "calibrated": dev_key != HOST_CPU, "calibration_deviation_ns": None,
                           "total_source": "timestamps" if dev_key != HOST_CPU else "unprofiled"},
                # A CPU peer has no device timestamps: host wall time only.
                "samples": ({"device_ms": [], "host_ms": device_ms} if dev_key == HOST_CPU else
                            {"device_ms": device_ms, "host_ms": [round(v + 0.02, 6) for v in device_ms]}),
                "metrics": b["metrics"], "dispatches": [], "environment": {}})
    return out, host


def _micros(dev_key: str, dev: FakeDevice) -> list[tuple[str, float, float, str | None]]:
    """(name, flops, bytes, skip reason) of the peak micro-benchmarks."""
    mb = 256 * 2**20 if dev.info.identity.device_type != "cpu" else 64 * 2**20
    out: list[tuple[str, float, float, str | None]] = [
        ("peak/bandwidth/copy", 0.0, 2.0 * mb, None),
        ("peak/bandwidth/triad", 2.0 * mb / 12, 3.0 * mb, None),
        ("peak/fma/f32", 2.0e12 if dev.clocks else 2.0e9, 0.0, None),
        ("peak/latency/dispatch", 0.0, 0.0, None),
    ]
    coop = None if dev.info.features.cooperative_matrix else "no cooperative matrix on llvmpipe"
    out.append(("peak/matrix/f16", 2.0e13 if dev.clocks else 0.0, 0.0, coop))
    return out


def make_results(*, seed: int = 0, devices: tuple[str, ...] = ("h100-vulkan", "lavapipe", "h100-cuda"),
                 models: tuple[str, ...] | None = None, extra_models: int = 0, micros: bool = True,
                 slowdown: float | dict[str, float] = 1.0, run_offset: float = 0.005,
                 run_id: str | None = None, gate: dict[str, Any] | None = None,
                 throttle: bool = False, wrong: str | None = None,
                 driver_version: str | None = None, repetitions: int = 1,
                 repetition_noise: float = 0.01,
                 peers: dict[str, float | dict[str, float]] | None = None) -> dict[str, Any]:
    """One results dict (schema version 2).

    ``seed`` makes the noise differ between runs; the model structure (dispatch names, flops,
    bytes) depends only on the model name, as it would for two runs of one suite.
    ``slowdown`` multiplies model times (a float for all, or name -> factor).
    ``repetitions`` > 1 stores that many repetitions per benchmark (``samples.blocks``), each
    shifted by its own lognormal factor of sigma ``repetition_noise``, as a suite's repetitions.
    ``peers``: runtime (a key of PEERS) -> the ratio of its time to halbench's on the same device
    (a float for all models, or name -> ratio), e.g. ``{"torch-cudagraph": 0.6,
    "onnxruntime-cpu": 3.0}``; a CPU peer runs on HOST_CPU, its ratio against halbench's first
    device.
    """
    rng = np.random.default_rng(seed)
    offset = float(rng.lognormal(0.0, run_offset))  # per run: another boot, another clock ramp
    names = list(models if models is not None else MODELS)
    specs = {n: MODELS[n] for n in names}
    for i in range(extra_models):
        specs[f"synth-{i:02d}/b1"] = (30 + i % 40, 0.2 + 0.3 * i, 10.0 + 5 * i, 1)
    doc_devices, benchmarks = {}, []
    t0 = 8_213_000_000_000 + seed * 10**10  # CLOCK_MONOTONIC ns since boot
    for key in devices:
        dev, uri = DEVICES[key], URIS[key]
        d = dev.info.to_dict()
        if driver_version and dev.clocks:
            d["identity"]["driver_version"] = driver_version
        if dev.published:
            d["published_peaks"] = dev.published
        doc_devices[uri] = d
        for name, (count, gflop, mbytes, batch) in specs.items():
            structure = np.random.default_rng(abs(hash_name(name)))
            disp = _dispatches(structure, count, gflop * batch, mbytes * batch)
            slow = slowdown.get(name, 1.0) if isinstance(slowdown, dict) else slowdown
            if wrong == name and key == "lavapipe":
                benchmarks.append({"name": name, "kind": "model", "device": uri, "driver": "vulkan",
                                   "format": FORMATS["vulkan"], "status": "wrong",
                                   "error": "max abs error 0.37 > tolerance 1e-4 at output 0",
                                   "correctness": {"checked": True, "passed": False,
                                                   "max_abs_error": 0.37, "tolerance": 1e-4}})
                continue
            bench, t0 = _bench(rng, key, uri, dev, name, "model", 0, 0, batch, disp, slow, offset,
                               t0, throttle=throttle and name == names[-1])
            benchmarks.append(bench)
        if not micros:
            continue
        for name, flops, nbytes, skip in _micros(key, dev):
            if skip:
                benchmarks.append({"name": name, "kind": "micro", "device": uri,
                                   "driver": dev.info.driver, "format": FORMATS[dev.info.driver],
                                   "status": "skipped", "error": skip})
                continue
            dtype = "f16" if "f16" in name else "f32"
            dev_m = dev
            if name == "peak/matrix/f16":  # matrix units run far above the FMA pipes
                dev_m = FakeDevice(**{**dev.__dict__, "efficiency": 1.0})
            elif name.startswith("peak/"):
                dev_m = FakeDevice(**{**dev.__dict__, "efficiency": 0.95})
            bench, t0 = _bench(rng, key, uri, dev_m, name, "micro", flops, nbytes, 1,
                               [(name.replace("/", "_"), flops, nbytes)], 1.0, offset, t0,
                               dtype=dtype)
            bench["correctness"] = {"checked": False}
            benchmarks.append(bench)
    for b in benchmarks:
        b.setdefault("runtime", "halbench")
        b.setdefault("runtime_info", {})
    if peers:
        more, host = _peer_entries(rng, benchmarks, peers)
        benchmarks += more
        if host:
            doc_devices[HOST_CPU] = _HOST_CPU_INFO
    if repetitions > 1:
        _repeat(benchmarks, repetitions, repetition_noise, np.random.default_rng(seed + 7919))
    if gate is None:
        gate = {"threshold": 0.05, "noise_floor_ms": 0.002,
                "overrides": {"mobilenetv2/b8": {"threshold": 0.08}}}
    warnings = [f"{URIS[k]}: throttling seen (sw_thermal_slowdown)" for k in devices
                if throttle and DEVICES[k].clocks]
    doc_devices = {k: {**v, "node": "bench-h100-01"} for k, v in doc_devices.items()}
    return {
        "schema_version": 3,
        "kind": "halbench-results",
        "run": {"id": run_id or f"2026-11-22T05-{seed % 60:02d}-00Z-{seed:04x}",
                "halbench_version": "0.1.0", "git_commit": f"{(seed * 2654435761) % 16**7:07x}",
                "host": {"hostname": "bench-h100-01", "platform": "Linux-6.8.0-x86_64",
                         "python": "3.11.9", "cpu": "Intel(R) Xeon(R) Platinum 8480+"},
                "started_at": f"2026-11-22T05:{seed % 60:02d}:00Z",
                "finished_at": f"2026-11-22T05:{seed % 60:02d}:59Z",
                "command_line": ["halbench", "run-suite", "suites/models.yaml"],
                "suite": {"name": "models", "path": "suites/models.yaml", "sha256": "0" * 64,
                          "gate": gate},
                "nodes": {"bench-h100-01": {"host": {"hostname": "bench-h100-01"}, "halbench_version": "0.1.0"}}},
        "devices": doc_devices,
        "benchmarks": benchmarks,
        "warnings": warnings,
    }


def _repeat(benchmarks: list[dict[str, Any]], k: int, noise: float, rng: np.random.Generator
            ) -> None:
    """Turn each timed benchmark's samples into k repetitions: the samples reshuffled, each
    repetition scaled by its own machine state."""
    for b in benchmarks:
        if b["status"] != "ok":
            continue
        dev, host = (np.asarray(b["samples"][key]) for key in ("device_ms", "host_ms"))
        count = max(len(dev), len(host))  # a CPU peer has host time only
        out_d, out_h = [], []
        for _ in range(k):
            f, order = float(rng.lognormal(0.0, noise)), rng.permutation(count)
            out_d += [round(float(v) * f, 6) for v in dev[order]] if len(dev) else []
            out_h += [round(float(v) * f, 6) for v in host[order]] if len(host) else []
        b["samples"] = {"device_ms": out_d, "host_ms": out_h, "blocks": [count] * k}


def set_repetitions(doc: dict[str, Any], name: str, device: str, medians: list[float], *,
                    n: int = 20, jitter: float = 0.01, seed: int = 0) -> dict[str, Any]:
    """Give one benchmark of ``doc`` len(medians) repetitions of n samples around each median."""
    rng = np.random.default_rng(seed)
    b = next(x for x in doc["benchmarks"] if x["name"] == name and x["device"] == device)
    samples = [round(float(m * rng.lognormal(0.0, jitter)), 6) for m in medians for _ in range(n)]
    b["samples"] = {"device_ms": samples, "host_ms": [round(v * 1.1, 6) for v in samples],
                    "blocks": [n] * len(medians)}
    return doc


def hash_name(name: str) -> int:
    """A stable hash (Python's hash() is salted per process)."""
    import zlib

    return zlib.crc32(name.encode())


def main(argv: list[str] | None = None) -> int:
    from halbench.bench.results import write_results

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--extra-models", type=int, default=0)
    args = p.parse_args(argv)
    write_results(args.out, make_results(seed=args.seed, slowdown=args.slowdown,
                                         extra_models=args.extra_models))
    return 0


if __name__ == "__main__":
    sys.exit(main())
