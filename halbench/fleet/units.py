"""Units of a fleet run: one physical device of one node, run serially by one pinned worker.

The ``cuda://`` and ``vulkan://`` URIs of one NVIDIA GPU share its UUID, so they are one unit:
they never run at the same time. Devices without a UUID (the local CPU drivers) are a unit each.
``run_unit`` starts the worker (``fleet/worker.py``) for a unit in a session of its own and yields
its journal records as they come; the same function runs inside a Ray task on a remote node.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Unit", "UnitDevice", "die_with_parent", "make_units", "resource_name", "run_unit"]


@dataclass(frozen=True)
class UnitDevice:
    key: str  # the device's key in the merged results: its URI, or URI@NODE in a cluster run
    uri: str  # its URI on its node
    pattern: str  # what the pinned worker opens: DRIVER://UUID where the device has a UUID
    uuid: str | None = None


@dataclass(frozen=True)
class Unit:
    node: str
    id: str  # the UUID, or the URI of a device without one
    devices: tuple[UnitDevice, ...]
    #: benchmark name -> patterns of this unit's devices that it runs on
    plan: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False)

    @property
    def resource(self) -> str:
        """The Ray custom resource that names this device (``halbench_gpu_<uuid>``)."""
        return resource_name(self.id)

    @property
    def label(self) -> str:
        return f"{self.node}:{'+'.join(d.uri for d in self.devices)}"

    def env(self) -> dict[str, str]:
        """The pinning environment: a GPU unit's worker sees only its own GPU through CUDA."""
        return {"CUDA_VISIBLE_DEVICES": self.id} if self.id.startswith("GPU-") else {}


def resource_name(unit_id: str) -> str:
    return "halbench_gpu_" + re.sub(r"[^A-Za-z0-9_-]", "_", unit_id)


def make_units(node: str, devices: list[dict[str, Any]], plans: dict[str, list[str]], suffix: str) -> list[Unit]:
    """Group a node's devices (``fleet.worker.discover``'s entries) into units; ``plans`` maps each
    benchmark name to the URIs (on this node) it runs on. Units with no benchmark are left out."""
    groups: dict[str, list[UnitDevice]] = {}
    for d in devices:
        uid = d.get("uuid") or d["uri"]
        pattern = f"{d['driver']}://{d['uuid']}" if d.get("uuid") else d["uri"]
        groups.setdefault(uid, []).append(UnitDevice(f"{d['uri']}{suffix}", d["uri"], pattern, d.get("uuid")))
    units = []
    for uid, devs in groups.items():
        by_uri = {d.uri: d.pattern for d in devs}
        plan = {name: tuple(by_uri[u] for u in uris if u in by_uri) for name, uris in plans.items()}
        plan = {k: v for k, v in plan.items() if v}
        if plan:
            units.append(Unit(node, uid, tuple(devs), plan))
    return units


def die_with_parent() -> None:
    """Called by the worker first: it is killed when the process that started it dies (a Ray node
    that dies takes its workers' children along; PR_SET_PDEATHSIG)."""
    parent = os.getppid()
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the call
        os._exit(1)


def run_unit(unit: Unit, suite_path: str, *, run: dict[str, Any], only_done: list[dict[str, Any]],
             device_infos: dict[str, Any], peers: list[str], suffix: str,
             command_line: list[str] | None = None, workdir: str | None = None) -> Iterator[dict[str, Any]]:
    """Run ``unit``'s benchmarks in a pinned worker; yield its journal records (fleet keys) as they
    are written, then ``{"type": "exit", "rc": ..., "log": ...}``. ``only_done``: result records of
    this unit the fleet's journal already holds (``--resume``): the worker skips them."""
    tmp = tempfile.TemporaryDirectory(prefix="halbench-unit-", dir=workdir)
    folder = Path(tmp.name)
    r, w = os.pipe()
    spec = {"suite": suite_path, "devices": [{"key": d.key, "pattern": d.pattern} for d in unit.devices],
            "plan": {k: list(v) for k, v in unit.plan.items()}, "output": str(folder / "unit.json"),
            "run": run, "done": only_done, "device_infos": device_infos, "peers": peers, "suffix": suffix,
            "node": unit.node, "stream_fd": w, "command_line": command_line}
    (folder / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    log = open(folder / "worker.log", "wb")  # noqa: SIM115 - closed below
    try:
        proc = subprocess.Popen([sys.executable, "-m", "halbench.fleet.worker", str(folder / "spec.json")],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, pass_fds=(w,),
                                env={**os.environ, **unit.env()}, start_new_session=True)
    except OSError:
        log.close()
        os.close(r)
        tmp.cleanup()
        raise
    finally:
        os.close(w)
    try:
        with os.fdopen(r, encoding="utf-8") as stream:
            for line in stream:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by a dying worker: its benchmark counts as not done
        rc = proc.wait()
        log.close()
        text = (folder / "worker.log").read_text(encoding="utf-8", errors="replace")
        yield {"type": "exit", "rc": rc, "log": text[-2000:]}
    finally:
        try:  # the worker and whatever it started, also when the consumer gave up on us
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        if not log.closed:
            log.close()
        tmp.cleanup()
