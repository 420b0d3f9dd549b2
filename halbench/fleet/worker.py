"""The fleet worker: one process per physical device, started by ``fleet.units.run_unit``.

``python -m halbench.fleet.worker SPEC.json`` runs the suite on the devices of one unit (the
``cuda://`` and ``vulkan://`` of one GPU, say), serially, with the ordinary runner and its journal.
It is pinned: its parent set ``CUDA_VISIBLE_DEVICES`` to the GPU's UUID, and it opens each device
by UUID (``vulkan://GPU-...``), so it can touch no other GPU. Every journal record is renamed to the
fleet's device keys and written as one JSON line to the stream file descriptor its parent gave it.

``python -m halbench.fleet.worker --discover PATTERN...`` prints this node's devices as JSON (what a
Ray node answers when the driver asks for its devices).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

__all__ = ["discover", "discover_groups", "main"]


def discover(patterns: list[str]) -> dict[str, Any]:
    """This machine's devices for ``patterns``: node name and info, devices, unavailable patterns."""
    from halbench.bench.environment import device_entry
    from halbench.bench.runner import node_info
    from halbench.drivers import resolve_devices

    node, info = node_info()
    infos, missing = resolve_devices(patterns)
    return {"node": node, "node_info": info,
            "devices": [{"uri": d.uri, "driver": d.driver, "uuid": d.identity.uuid, "name": d.name,
                         "info": device_entry(d)} for d in infos],
            "missing": [list(m) for m in missing]}


def discover_groups(groups: list[list[str]]) -> dict[str, Any]:
    """``discover`` for each group of patterns (a benchmark's device list): the union of their
    devices, and per group the URIs it names here."""
    out: dict[str, Any] = {"devices": [], "groups": []}
    seen: set[str] = set()
    for patterns in groups:
        d = discover(patterns)
        out.update(node=d["node"], node_info=d["node_info"])
        out["groups"].append([e["uri"] for e in d["devices"]])
        out["devices"] += [e for e in d["devices"] if e["uri"] not in seen]
        seen.update(e["uri"] for e in d["devices"])
    return out


def _rename(rec: dict[str, Any], keys: dict[str, str], suffix: str, node: str) -> dict[str, Any]:
    """A journal record with device URIs of this process turned into the fleet's keys."""
    def key(uri: str) -> str:
        return keys.get(uri, f"{uri}{suffix}")

    if rec.get("type") == "device":
        return {**rec, "uri": key(rec["uri"]), "info": {**rec["info"], "node": node,
                                                         "uri": key(rec["uri"]).removesuffix(suffix)}}
    if rec.get("type") == "result":
        return {**rec, "result": {**rec["result"], "device": key(rec["result"]["device"])}}
    return rec


def _run(spec: dict[str, Any], stream: Any) -> int:
    from halbench.bench.journal import journal_path
    from halbench.bench.runner import run_suite
    from halbench.bench.suite import load_suite
    from halbench.drivers import select_device
    from halbench.errors import HalbenchError
    from halbench.peers import parse_peer

    def emit(rec: dict[str, Any]) -> None:
        stream.write(json.dumps(rec, allow_nan=False) + "\n")
        stream.flush()

    suite = load_suite(spec["suite"])
    keys: dict[str, str] = {}  # URI in this process -> the fleet's key
    local: dict[str, str] = {}  # pattern -> URI in this process
    for d in spec["devices"]:
        try:
            uri = select_device(d["pattern"]).uri
        except HalbenchError:
            uri = d["pattern"]  # the runner records it as skipped, with the reason
        keys[uri] = d["key"]
        local[d["pattern"]] = uri
    back = {v: k for k, v in keys.items()}
    plan = spec["plan"]  # benchmark name -> the patterns of this unit it runs on
    suite = replace(suite, benchmarks=tuple(replace(b, devices=tuple(plan[b.name]))
                                            for b in suite.benchmarks if b.name in plan))
    out = Path(spec["output"])
    done = spec.get("done") or []
    if done:  # the fleet's journal has these: hand them to the runner's own --resume
        with open(journal_path(out), "w", encoding="utf-8") as f:
            f.write(json.dumps({"type": "header", "suite_sha256": suite.sha256, "run": spec["run"]}) + "\n")
            for uri, info in (spec.get("device_infos") or {}).items():
                f.write(json.dumps({"type": "device", "uri": back.get(uri, uri), "info": info}) + "\n")
            for rec in done:
                r = rec["result"]
                f.write(json.dumps({"type": "result", "rep": rec["rep"],
                                    "result": {**r, "device": back.get(r["device"], r["device"])}}) + "\n")
    peers = [parse_peer(p) for p in spec.get("peers") or ()]
    results = run_suite(suite, out, progress=False, command_line=spec.get("command_line"), resume=bool(done),
                        peers=peers, tee=lambda rec: emit(_rename(rec, keys, spec["suffix"], spec["node"])))
    emit({"type": "end", "benchmarks": len(results["benchmarks"])})
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--discover"]:  # then a JSON list of pattern lists
        print(json.dumps(discover_groups(json.loads(argv[1]))))
        return 0
    from halbench.fleet.units import die_with_parent

    die_with_parent()
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    stream = os.fdopen(int(spec["stream_fd"]), "w", encoding="utf-8")
    try:
        return _run(spec, stream)
    except Exception as e:  # noqa: BLE001 - the parent reports it against this unit's benchmarks
        stream.write(json.dumps({"type": "failed", "error": f"{type(e).__name__}: {e}"}) + "\n")
        stream.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
