"""A peer run in a process of its own: ``python -m halbench.bench.peer_worker DIR``.

Peers load large native stacks (PyTorch with Triton's LLVM, IREE, ONNX Runtime) that do not
share a process safely with halbench's drivers (Mesa's LLVM is already loaded there: Triton
crashes on import), and a peer that crashes or hangs must cost only its own entry. DIR holds
``request.json`` (peer, device, settings, tolerance), ``inputs.npz`` and, when there is one,
``reference.npz`` (read with ``allow_pickle=False``); the worker writes ``result.json``.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["main"]


def _device(d: dict[str, Any]) -> Any:
    ident = dict(d["info"].get("identity") or {})
    path = d["uri"].partition("://")[2]
    return SimpleNamespace(uri=d["uri"], driver=d["driver"], ordinal=int(path) if path.isdigit() else 0,
                           identity=SimpleNamespace(**{k: ident.get(k) for k in (
                               "name", "vendor", "vendor_id", "uuid", "arch", "compute_capability", "driver_id")}),
                           uuid=ident.get("uuid"), info=d["info"])


def _arrays(path: Path) -> list[np.ndarray] | None:
    if not path.exists():
        return None
    with np.load(path, allow_pickle=False) as z:
        return [z[f"a{i}"] for i in range(len(z.files))]


def run(req: dict[str, Any], folder: Path) -> dict[str, Any]:
    from halbench.bench.reference import compare_outputs
    from halbench.bench.runner import sample_loop
    from halbench.bench.suite import Settings
    from halbench.peers import PeerSpec, PeerUnsupported, get_peer

    spec = PeerSpec(req["peer"], req.get("mode", ""), req.get("options") or {})
    peer = get_peer(spec.peer)
    out: dict[str, Any] = {"status": "ok", "version": peer.version(), "settings": {}, "notes": []}
    inputs = _arrays(folder / "inputs.npz") or []
    reference = _arrays(folder / "reference.npz")
    try:
        with peer.prepare(spec, Path(req["model"]), req["names"], inputs, _device(req["device"])) as pp:
            out["settings"], out["notes"], out["timed_on"] = dict(pp.settings), list(pp.notes), pp.timed_on
            if reference is None:
                out["correctness"] = {"checked": False, "passed": None, "reference": None}
            else:
                corr = compare_outputs(pp.invoke(), reference, req["tolerance"], req["reference_name"])
                out["correctness"] = corr
                if not corr["passed"]:
                    out["status"] = "wrong"
                    return out
            samples = sample_loop(pp.run, Settings(**req["settings"]))
            out["device_ms"] = [float(s.device_ms) for s in samples]
            out["host_ms"] = [float(s.host_ms) for s in samples]
    except PeerUnsupported as e:
        out.update(status="skipped", error=str(e))
    return out


def main(argv: list[str] | None = None) -> int:
    folder = Path((argv or sys.argv[1:])[0])
    req = json.loads((folder / "request.json").read_text())
    try:
        out = run(req, folder)
    except Exception as e:  # noqa: BLE001 - reported to the runner as this peer's error
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        out = {"status": "error", "error": f"{type(e).__name__}: {msg}",
               "traceback": traceback.format_exc()[-4000:]}
    tmp = folder / "result.json.tmp"
    tmp.write_text(json.dumps(out, allow_nan=True))
    tmp.replace(folder / "result.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
