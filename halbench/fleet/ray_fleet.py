"""``run-suite --cluster``: a suite over the devices of every node of a Ray cluster.

1. Ask every alive node for its devices (``fleet.worker --discover`` there, pinned to the node).
2. Group each node's devices into units (one physical device each, ``fleet/units.py``). A unit
   task asks for the custom resource ``halbench_gpu_<uuid>`` (one unit of it per device, declared
   when the node joined: ``ray start --resources "$(halbench fleet-resources)"``), so two tasks,
   of this run or another, never share a device. Nodes that declare no such resource are used
   only when no node of the cluster declares any (then by node affinity alone, with a warning).
3. Ship the compile cache's bundles once per node through the object store (one ``ray.put``, one
   staging task per node) so nodes without the compiler run precompiled bundles.
4. Run one task per unit (``fleet.units.run_unit`` on the node): its journal records come back
   as they are written, through a queue actor on the head node (Ray's streaming generators do not
   work through Ray Client), and go into the output's journal at once. A node that dies fails its
   tasks: their unfinished benchmarks become errors that say so, the journal stays, and
   ``--resume`` runs only those.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from halbench.bench.suite import Suite
from halbench.errors import NothingToDo, UserError

__all__ = ["run_cluster"]

_MAX_STAGE_BYTES = 2 << 30


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError("--cluster needs Ray, which is not installed: pip install 'halbench[fleet]'") from None
    return ray


def _discover_here(groups: list[list[str]]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "halbench.fleet.worker", "--discover", json.dumps(groups)],
                         check=False, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        raise RuntimeError(f"dump-devices failed on this node: {out.stderr.strip()[-300:]}")
    return json.loads(out.stdout)


def _stage_here(blob: bytes) -> int:
    """Unpack the driver's bundles into this node's compile cache (files it lacks; plain files only)."""
    from halbench.tools import cache_dir

    dest = cache_dir() / "bundles"
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:") as tar:
        for m in tar.getmembers():
            name = Path(m.name).name
            if not m.isfile() or name != m.name or not name.endswith(".hbx") or (dest / name).exists():
                continue
            src = tar.extractfile(m)
            tmp = dest / f".{name}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                f.write(src.read())
            os.replace(tmp, dest / name)
            n += 1
    return n


def _bundles_blob() -> bytes | None:
    """The driver's compiled bundles as one uncompressed tar (None when there are none)."""
    from halbench.tools import cache_dir

    files = sorted((cache_dir() / "bundles").glob("*.hbx"))
    if not files:
        return None
    if sum(f.stat().st_size for f in files) > _MAX_STAGE_BYTES:
        raise UserError(f"{cache_dir() / 'bundles'} holds more than {_MAX_STAGE_BYTES >> 30} GiB of bundles; "
                        f"empty it, or precompile only this suite's models (scripts/precompile.py)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:") as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    return buf.getvalue()


def _unit_here(unit: Any, suite_name: str, suite_text: bytes, kwargs: dict[str, Any], queue: Any) -> int:
    """The unit task: run the unit's worker on this node, each record into ``queue`` as it comes."""
    from halbench.fleet.units import run_unit

    n = 0
    with tempfile.TemporaryDirectory(prefix="halbench-suite-") as d:
        path = Path(d) / suite_name
        path.write_bytes(suite_text)
        for rec in run_unit(unit, str(path), **kwargs):
            queue.put(rec)
            n += 1
    return n


def _home_node(ray: Any) -> str | None:
    """Where the record queues live: this driver's node, else (Ray Client) the head node; never a
    node that runs units, whose death would take other units' records along."""
    try:
        node = ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - Ray Client has no node of its own
        node = None
    alive = {n["NodeID"]: n for n in ray.nodes() if n.get("Alive")}
    if node in alive:
        return node
    return next((i for i, n in alive.items() if any(k.startswith("node:__internal_head__")
                                                    for k in n.get("Resources") or {})), None)


def _stream(ray: Any, task: Any, args: tuple, head: str | None) -> Any:
    """Submit a unit task and yield its records as they arrive. They travel through a queue actor
    on the head node (streaming generators do not work through Ray Client); a task whose node died
    raises here, after every record it sent has been yielded."""
    from ray.util.queue import Empty, Queue

    opts: dict[str, Any] = {"num_cpus": 0}
    if head:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=head, soft=False)
    queue = Queue(actor_options=opts)
    try:
        ref = task.remote(*args, queue)
        while True:
            try:
                yield queue.get(timeout=0.5)
                continue
            except Empty:
                pass
            if ray.wait([ref], timeout=0)[0]:
                while True:  # what it sent before it ended
                    try:
                        yield queue.get_nowait()
                    except Empty:
                        break
                ray.get(ref)  # raises for a lost node or a failed task
                return
    finally:
        queue.shutdown(force=True)


#: Seconds to wait before each further attempt when a Ray Client server was reached but its
#: session did not start (the head starts one server process per client; on a loaded head that
#: can miss Ray's own deadline). Refused or unreachable addresses fail at once.
_CLIENT_INIT_RETRIES = (2.0, 5.0)


def _connect(ray: Any, address: str) -> bool:
    """Connect to the cluster (unless this process already is); True if we connected."""
    if ray.is_initialized():
        return False
    waits = list(_CLIENT_INIT_RETRIES) if address.startswith("ray://") else []
    tries = 1 + len(waits)
    while True:
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            return True
        except ConnectionAbortedError:  # "Initialization failure from server": the session did not start
            if not waits:
                raise UserError(f"cannot connect to the Ray cluster at {address}: its Ray Client server was "
                                f"reached but started no session ({tries} {'tries' if tries > 1 else 'try'}); see "
                                f"ray_client_server*.err in the head's /tmp/ray/session_latest/logs") from None
            ray.shutdown()
            time.sleep(waits.pop(0))
        except Exception as e:  # noqa: BLE001 - any failure to connect is one line
            raise UserError(f"cannot connect to the Ray cluster at {address}: {str(e).strip().splitlines()[0]}; "
                            f"start one with `ray start --head` (docs/fleet.md)") from None


def run_cluster(address: str, suite: Suite, output: str | os.PathLike, *, devices: list[str] | None = None,
                only: list[str] | None = None, progress: bool = True, command_line: list[str] | None = None,
                resume: bool = False, peers: list[str] | None = None) -> dict[str, Any]:
    """Run ``suite`` on every device of every node of the Ray cluster at ``address`` (``ray://HOST:PORT``
    for Ray Client, ``HOST:PORT`` of the head, or ``auto``); one results file, ``run_suite``'s contract."""
    from halbench.files import check_output, exclusive

    check_output(output, suite.path, what="results file")
    ray = import_ray()
    connected = _connect(ray, address)
    try:
        with exclusive(output, "results file"):
            return _run(ray, suite, str(output), devices, only, progress, command_line, resume, peers or [])
    finally:
        if connected:
            ray.shutdown()


def _affinity(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)


def _discover(ray: Any, suite: Suite, only: list[str] | None, devices: list[str] | None
              ) -> tuple[list[dict[str, Any]], list[str]]:
    """Every alive node's devices: ``[{node_id, name, info, devices, missing, resources}]``."""
    groups = _groups(suite, only, devices)
    task = ray.remote(num_cpus=0, max_retries=0)(_discover_here)
    alive = [n for n in ray.nodes() if n.get("Alive")]
    refs = [task.options(scheduling_strategy=_affinity(n["NodeID"])).remote(groups) for n in alive]
    found, warnings = [], []
    for n, ref in zip(alive, refs, strict=True):
        try:
            d = ray.get(ref, timeout=300)
        except Exception as e:  # noqa: BLE001 - a node that cannot answer is left out
            warnings.append(f"node {n['NodeManagerAddress']} ({n['NodeID'][:8]}) did not list its devices: "
                            f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}")
            continue
        found.append({**d, "node_id": n["NodeID"], "resources": n.get("Resources") or {}})
    names = [f["node"] for f in found]
    for f in found:  # one host may hold several nodes (a test cluster): tell them apart, by the
        # devices they declare where they do (stable across restarts: --resume finds them again)
        if names.count(f["node"]) > 1:
            declared = sorted(k for k in f["resources"] if k.startswith("halbench_gpu_"))
            tag = hashlib.sha256(" ".join(declared).encode()).hexdigest()[:6] if declared else f["node_id"][:6]
            f["name"] = f"{f['node']}-{tag}"
        else:
            f["name"] = f["node"]
    return found, warnings


def _groups(suite: Suite, only: list[str] | None, devices: list[str] | None) -> list[list[str]]:
    """The distinct device-pattern lists of the selected benchmarks, in order."""
    from halbench.fleet.merge import plans_for

    seen: dict[tuple[str, ...], None] = {}
    plans_for(suite, only, devices, lambda p: (seen.setdefault(p), ([], []))[1])
    return [list(g) for g in seen]


def _units(suite: Suite, only: list[str] | None, devices: list[str] | None, found: list[dict[str, Any]]
           ) -> tuple[list[tuple[Any, str]], list[str]]:
    """(unit, Ray node id) for every unit of every node, and warnings."""
    from halbench.fleet.merge import plans_for
    from halbench.fleet.units import make_units

    declared = any(k.startswith("halbench_gpu_") for f in found for k in f["resources"])
    groups = _groups(suite, only, devices)
    out, warnings = [], []
    for f in found:
        named = {tuple(g): (uris, []) for g, uris in zip(groups, f["groups"], strict=True)}
        plans, _ = plans_for(suite, only, devices, lambda p, named=named: named[p])
        units = make_units(f["name"], f["devices"], plans, f"@{f['name']}")
        if declared:
            kept = [u for u in units if f["resources"].get(u.resource, 0) >= 1]
            if len(kept) < len(units) and kept:
                warnings.append(f"node {f['name']}: {len(units) - len(kept)} device(s) without a "
                                f"halbench_gpu_* resource left out")
            units = kept
        out += [(u, f["node_id"]) for u in units]
    if not declared and out:
        warnings.append("no node declares halbench_gpu_* resources: devices are reserved by node affinity "
                        "only (start nodes with `ray start --resources \"$(halbench fleet-resources)\"`)")
    return out, warnings


def _run(ray: Any, suite: Suite, output: str, devices: list[str] | None, only: list[str] | None,
         progress: bool, command_line: list[str] | None, resume: bool, peers: list[str]) -> dict[str, Any]:
    from halbench.fleet.merge import Fleet, collect

    found, warnings = _discover(ray, suite, only, devices)
    units, more = _units(suite, only, devices, found)
    warnings += more
    if not units:
        raise NothingToDo(f"no node of the Ray cluster has a device for suite {suite.name} "
                          f"({len(found)} node(s) answered){'; ' + warnings[0] if warnings else ''}")
    nodes = {f["name"]: {**f["node_info"], "ray_node_id": f["node_id"]} for f in found}
    fleet = Fleet(output, suite, nodes, resume, command_line)
    try:
        fleet.warnings += warnings
        blob = _bundles_blob()
        if blob is not None:  # once per node: one object, one staging task per node that runs units
            ref = ray.put(blob)
            stage = ray.remote(num_cpus=0, max_retries=0)(_stage_here)
            ray.get([stage.options(scheduling_strategy=_affinity(nid)).remote(ref)
                     for nid in dict.fromkeys(nid for _, nid in units)], timeout=600)
        unit_task = ray.remote(num_cpus=0, max_retries=0)(_unit_here)
        run = fleet.run.to_dict()
        text = Path(suite.path).read_bytes()
        where = dict(units)
        reserve = any(k.startswith("halbench_gpu_") for f in found for k in f["resources"])
        head = _home_node(ray)

        def start(unit: Any) -> Any:
            kwargs = {"run": run, "only_done": fleet.done_of(unit), "device_infos": fleet.infos_of(unit),
                      "peers": peers, "suffix": f"@{unit.node}", "command_line": command_line}
            return _stream(ray, unit_task.options(scheduling_strategy=_affinity(where[unit]),
                                                  resources={unit.resource: 1} if reserve else {}),
                           (unit, Path(suite.path).name, text, kwargs), head)

        collect(fleet, [u for u, _ in units], start, progress)
        return fleet.finish()
    except BaseException:
        fleet.close()
        raise


def fleet_resources() -> dict[str, int]:
    """This host's devices as Ray custom resources, one per physical device, for ``ray start --resources``."""
    from halbench.fleet.units import resource_name
    from halbench.fleet.worker import discover

    return {resource_name(d.get("uuid") or d["uri"]): 1 for d in discover(["*"])["devices"]}
