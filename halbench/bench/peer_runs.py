"""Peer runs inside a suite: which devices each peer of a model benchmark runs on, and one run
(load, check against the reference, warm up, sample) recorded as an ordinary results entry.

Placement: a peer runs on every device of the benchmark whose kind it serves (torch/cudagraph on
each cuda:// device, iree on cuda://, vulkan:// and the CPU). The host CPU counts once: a CPU
peer runs on the benchmark's first local device, or on local-task:// when the benchmark has none
and the peer runs only on CPUs (onnxruntime/cpu beside GPU runs). A peer that fits no device, or
whose package is missing, leaves one skipped entry saying why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from halbench.bench.schema import BenchmarkResult, Correctness, Metrics, Samples, Timing
from halbench.bench.suite import BenchmarkSpec

__all__ = ["PeerJob", "peer_pairs", "run_peer"]

#: A tf32 peer rounds matmul operands to 10 bits of mantissa: its check allows this much
#: (the f16 / bf16 autocast peers: halbench.precision.TOLERANCE, as halbench's own runs).
TF32_TOLERANCE = 5e-3


@dataclass(frozen=True)
class PeerJob:
    spec: Any  # halbench.peers.PeerSpec
    runtime: str
    kind: str

    @property
    def text(self) -> str:
        return self.spec.text


def peer_pairs(spec: BenchmarkSpec, infos: list[Any], peers: tuple[Any, ...], resolve_devices: Any
               ) -> list[tuple[BenchmarkSpec, Any, str | None, PeerJob]]:
    """The (spec, device, why-not, job) work items of ``peers`` for one model benchmark."""
    from halbench.peers import device_kind, get_peer

    out: list[tuple[BenchmarkSpec, Any, str | None, PeerJob]] = []
    for ps in peers:
        peer = get_peer(ps.peer)
        kinds = peer.kinds(ps)
        chosen: list[tuple[Any, str]] = []
        cpu_taken = False
        # The host CPU once, multi-threaded local-task before local-sync.
        for info in sorted(infos, key=lambda i: i.driver != "local-task"):
            k = device_kind(info.driver)
            if k in kinds and not (k == "cpu" and cpu_taken):
                chosen.append((info, k))
                cpu_taken |= k == "cpu"
        if not chosen and kinds == ("cpu",):
            host, _ = resolve_devices(("local-task://",))
            chosen = [(h, "cpu") for h in host[:1]]
        if not chosen:
            here = ", ".join(i.uri for i in infos) or "no device"
            job = PeerJob(ps, peer.runtime(ps, kinds[0]), kinds[0])
            first = infos[0].uri if infos else "none://"
            out.append((spec, first, f"peer {ps.text} runs on {', '.join(kinds)} devices; this run has {here}",
                        job))
            continue
        for info, k in chosen:
            out.append((spec, info, None, PeerJob(ps, peer.runtime(ps, k), k)))
    return out


def _entry(spec: BenchmarkSpec, uri: str, driver: str, job: PeerJob, status: str = "ok",
           error: str | None = None, info: dict[str, Any] | None = None) -> BenchmarkResult:
    return BenchmarkResult(spec.name, spec.kind, uri, driver, status, error, params=dict(spec.params),
                           runtime=job.runtime, runtime_info={"peer": job.text, **(info or {})})


def run_peer(spec: BenchmarkSpec, where: Any, missing_reason: str | None, job: PeerJob,
             device_entries: dict[str, Any]) -> BenchmarkResult:
    """One repetition of a peer on one device, as a results entry (never raises for the peer's
    own failure: a missing package or an unsupported model is ``skipped`` with the reason)."""
    from halbench.peers import PeerUnsupported, get_peer

    if missing_reason is not None:
        return _entry(spec, where, where.partition("://")[0], job, "skipped", missing_reason)
    peer = get_peer(job.spec.peer)
    uri, driver = where.uri, where.driver
    info = {"version": "", "settings": {}}
    why = peer.missing()
    if why:
        return _entry(spec, uri, driver, job, "skipped", why, info)
    info["version"] = peer.version()
    if uri not in device_entries:
        from halbench.bench.environment import device_entry

        device_entries[uri] = device_entry(where)
    try:
        return _measure(spec, where, job, peer, info)
    except PeerUnsupported as e:
        return _entry(spec, uri, driver, job, "skipped", str(e), info)
    except Exception as e:  # noqa: BLE001 - a peer's failure must not lose the suite
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        return _entry(spec, uri, driver, job, "error", f"{job.text}: {type(e).__name__}: {msg}", info)


def _measure(spec: BenchmarkSpec, device: Any, job: PeerJob, peer: Any, info: dict[str, Any]) -> BenchmarkResult:
    """Load, check and time the peer in a worker process (``halbench.bench.peer_worker``)."""
    import json
    import tempfile

    import numpy as np

    from halbench.bench.reference import model_context
    from halbench.peers import PeerUnsupported

    ctx = model_context(dict(spec.params))
    if ctx.path is None:
        raise PeerUnsupported("peers run ONNX models; this benchmark's model is MLIR")
    reference, ref_name = ctx.reference, ctx.reference_name
    if reference is None:
        reference = ctx.local
    from halbench.precision import tolerance as precision_tolerance

    tol = precision_tolerance(job.spec.options.get("precision"), spec.settings.tolerance)
    s = spec.settings
    req = {"peer": job.spec.peer, "mode": job.spec.mode, "options": dict(job.spec.options),
           "model": str(ctx.path), "names": ctx.names, "tolerance": tol, "reference_name": ref_name,
           "device": {"uri": device.uri, "driver": device.driver, "info": device.to_dict()},
           "settings": dict(s.__dict__)}
    # Bounded: sampling stops by max_time_s; loading and torch.compile get ten minutes more.
    timeout = s.max_time_s + 600
    with tempfile.TemporaryDirectory(prefix="halbench-peer-") as tmp:
        folder = Path(tmp)
        np.savez(folder / "inputs.npz", **{f"a{i}": x for i, x in enumerate(ctx.inputs)})
        if reference is not None:
            np.savez(folder / "reference.npz", **{f"a{i}": x for i, x in enumerate(reference)})
        (folder / "request.json").write_text(json.dumps(req))
        code = _run_worker(folder, timeout)
        if code is None:
            return _entry(spec, device.uri, device.driver, job, "error",
                          f"{job.text} did not finish within {timeout:.0f} s", info)
        res_path = folder / "result.json"
        if not res_path.exists() or res_path.stat().st_size > (16 << 20):
            log = (folder / "worker.log").read_bytes()[-4096:].decode("utf-8", "replace")
            tail = (log.strip().splitlines() or [f"exit code {code}"])[-1][:300]
            return _entry(spec, device.uri, device.driver, job, "error",
                          f"{job.text} crashed (exit code {code}): {tail}", info)
        out = json.loads(res_path.read_text())
    info = {**info, "version": out.get("version", info.get("version", "")), "settings": out.get("settings") or {}}
    if out.get("notes"):
        info["note"] = "; ".join(out["notes"])
    entry = _entry(spec, device.uri, device.driver, job, "ok", None, info)
    status = out.get("status", "error")
    if status in ("skipped", "error"):
        return replace(entry, status=status, error=out.get("error") or "unknown failure")
    corr = out.get("correctness") or {"checked": False}
    if reference is None:
        corr = {**corr, "note": f"no reference: {ctx.reference_note}, and halbench did not run this model"}
    entry = replace(entry, correctness=Correctness.from_check(corr))
    if status == "wrong":
        return entry.failed("wrong", f"output differs from the {ref_name} reference: relative error "
                                     f"{corr.get('rel_error', float('nan')):.3g} > tolerance {tol:g}")
    source = "cuda-events" if out.get("timed_on") == "device" else "host"
    return replace(entry, samples=Samples(tuple(out.get("device_ms") or ()), tuple(out.get("host_ms") or ())),
                   timing=Timing(s.warmup, s.min_time_s, s.min_samples, False, None, source, s.warmup_s),
                   metrics=Metrics(items_per_run=int(spec.params.get("batch", 1))))


def _run_worker(folder: Path, timeout: float) -> int | None:
    """Run the peer worker on ``folder``; its exit code, or None when it ran out of time.

    It runs in a session of its own with its output in a file: on a timeout or an interrupt the
    whole process group is killed (torch.compile's compile workers with it), and no pipe is left
    for an orphaned grandchild to hold open, which would hang the runner."""
    import os
    import signal
    import subprocess
    import sys

    with open(folder / "worker.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "halbench.bench.peer_worker", str(folder)],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            try:  # the worker's leftovers too, also after a normal exit
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            proc.wait()
