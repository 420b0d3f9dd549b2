"""Peers: other runtimes given the very same model file and inputs on the same device.

A peer answers "is halbench's number good?": PyTorch (through onnx2torch, eager, CUDA graph or
torch.compile), ONNX Runtime (CPU, CUDA and TensorRT execution providers) and IREE (llvm-cpu,
vulkan-spirv, cuda). Each is a plug-in: built-in ones are listed here, third parties register
through the ``halbench.peers`` entry point group (a callable returning a :class:`Peer`). A peer
whose package is missing is reported with a one-line reason and skipped, never an error.

The layer: below ``bench/`` (the runner calls peers), above nothing of halbench's compiler or
HAL: a peer runs a model file with its own stack. Its results are ordinary benchmark entries
with ``runtime`` set to :meth:`Peer.runtime` (results schema 2).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, ClassVar, Self

import numpy as np

from halbench.errors import BadOption, UserError

__all__ = [
    "DEVICE_KINDS",
    "Modes",
    "Peer",
    "PeerSample",
    "PeerSpec",
    "PeerUnsupported",
    "PreparedPeer",
    "device_kind",
    "get_peer",
    "model_key",
    "parse_peer",
    "peer_names",
]

#: A peer's modes: name -> (the device kinds it runs on, what it is).
Modes = Mapping[str, tuple[tuple[str, ...], str]]

#: Device kinds a peer can run on, by the halbench driver of the device.
DEVICE_KINDS = {"cuda": "cuda", "vulkan": "vulkan", "hip": "hip", "local-sync": "cpu", "local-task": "cpu"}
#: the precisions a peer may be asked for (halbench.precision's); each peer names those it runs
PRECISIONS = ("fp32", "tf32", "f16", "bf16")


def device_kind(driver: str) -> str | None:
    """The peer device kind of a halbench driver (``cpu`` for the local drivers), or None."""
    return DEVICE_KINDS.get(driver)


class PeerUnsupported(UserError):
    """This peer cannot run this model here (package missing, device kind, model): one line why."""


@dataclass(frozen=True)
class PeerSpec:
    """A peer as a suite or ``--peer`` names it: ``torch/cudagraph``, ``onnxruntime/cpu``,
    ``iree``; ``options``: ``precision`` (fp32 | tf32, and f16 | bf16 autocast for torch),
    ``compile_mode`` (torch.compile's mode)."""

    peer: str
    mode: str = ""
    options: Mapping[str, Any] = field(default_factory=dict, hash=False)

    @property
    def text(self) -> str:
        return f"{self.peer}/{self.mode}" if self.mode else self.peer

    def to_dict(self) -> dict[str, Any]:
        return {"peer": self.text, **({"options": dict(self.options)} if self.options else {})}


@dataclass
class PeerSample:
    device_ms: float
    host_ms: float


class PreparedPeer:
    """A model loaded by a peer on one device, ready to invoke and time."""

    #: the runtime name its results carry (``torch-cudagraph``)
    runtime: str = ""
    #: ``device`` (events on the device) or ``host`` (a synchronized wall clock)
    timed_on: str = "host"

    def __init__(self) -> None:
        self.settings: dict[str, Any] = {}
        self.notes: list[str] = []

    def invoke(self) -> list[np.ndarray]:
        """Run once; the outputs as NumPy arrays (for the correctness check)."""
        raise NotImplementedError

    def run(self) -> PeerSample:
        """Run once, timed."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the peer holds (graphs, sessions, device memory)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def host_timed(call: Any) -> PeerSample:
    """A sample of ``call`` (which must return only when the work is done) on the host clock."""
    t0 = time.perf_counter_ns()
    call()
    ms = (time.perf_counter_ns() - t0) / 1e6
    return PeerSample(ms, ms)


class Peer:
    """One runtime (a plug-in). Subclasses fill the class attributes and the three methods."""

    name: str = ""
    #: mode -> (device kinds it runs on, one line of what it is)
    modes: ClassVar[Modes] = {}
    default_mode: str = ""
    #: the Python packages it needs, for the one-line reason when they are missing
    packages: str = ""

    #: the ``precision`` options it takes (fp32 first)
    precisions: tuple[str, ...] = ("fp32", "tf32")
    #: import names whose absence makes the peer unavailable, and the distribution whose version it reports
    modules: tuple[str, ...] = ()
    distribution: str = ""

    def missing(self) -> str | None:
        """Why this peer cannot run on this machine at all (a package missing), or None. Looks the
        packages up without importing them: the runner's process must not load a peer's stack."""
        from importlib.util import find_spec

        for mod in self.modules:
            try:
                found = find_spec(mod) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                return f"{mod} is not installed (pip install 'halbench[peers]')"
        return None

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(self.distribution) if self.distribution else ""
        except PackageNotFoundError:
            return ""

    def runtime(self, spec: PeerSpec, kind: str) -> str:
        """The runtime name of results: ``torch-cudagraph``, ``onnxruntime-cpu``, ``iree-cuda``."""
        return f"{self.name}-{spec.mode or self.default_mode}"

    def kinds(self, spec: PeerSpec) -> tuple[str, ...]:
        return self.modes[spec.mode or self.default_mode][0]

    def prepare(self, spec: PeerSpec, model: Path, names: Sequence[str], inputs: Sequence[np.ndarray],
                device: Any) -> PreparedPeer:
        """Load ``model`` on ``device`` (a probed DeviceInfo) with these inputs; raise
        PeerUnsupported with the reason when it cannot."""
        raise NotImplementedError

    def check_spec(self, spec: PeerSpec) -> None:
        mode = spec.mode or self.default_mode
        if mode not in self.modes:
            raise BadOption(f"peer {self.name} has no mode {spec.mode!r}; its modes: "
                            f"{', '.join(f'{self.name}/{m}' for m in self.modes)}")
        precision = spec.options.get("precision", "fp32")
        if precision not in PRECISIONS:
            raise BadOption(f"peer {spec.text}: precision {precision!r} is unknown; use one of {', '.join(PRECISIONS)}")
        if precision not in self.precisions:
            raise BadOption(f"peer {spec.text}: precision {precision} is not one this peer runs; it takes "
                            f"{', '.join(self.precisions)}")


def _builtin() -> dict[str, Any]:
    from halbench.peers.iree import IreePeer
    from halbench.peers.ort import OrtPeer
    from halbench.peers.torch_peer import TorchPeer

    return {"torch": TorchPeer, "onnxruntime": OrtPeer, "iree": IreePeer}


@lru_cache(maxsize=1)
def _registry() -> dict[str, Any]:
    reg = dict(_builtin())
    from importlib.metadata import entry_points

    for ep in entry_points(group="halbench.peers"):
        reg.setdefault(ep.name, ep)
    return reg


def peer_names() -> list[str]:
    return sorted(_registry())


@cache
def get_peer(name: str) -> Peer:
    """The peer plug-in called ``name`` (``ort`` is an alias of ``onnxruntime``)."""
    name = {"ort": "onnxruntime", "pytorch": "torch"}.get(name, name)
    reg = _registry()
    if name not in reg:
        raise BadOption(f"unknown peer {name!r}; known peers: {', '.join(peer_names())} "
                        f"(more through the halbench.peers entry point)")
    factory = reg[name]
    if hasattr(factory, "load"):  # an entry point
        try:
            factory = factory.load()
        except Exception as e:  # noqa: BLE001 - a broken plug-in is named, not a traceback
            raise UserError(f"peer plug-in {name!r} failed to load: {type(e).__name__}: {e}") from None
    peer = factory()
    if not isinstance(peer, Peer):
        raise UserError(f"peer plug-in {name!r} does not give a halbench.peers.Peer")
    return peer


def parse_peer(value: str | Mapping[str, Any]) -> PeerSpec:
    """``torch/cudagraph``, ``torch/compile``, ``onnxruntime/cpu``, ``iree``, or a mapping
    ``{peer: torch/compile, precision: tf32, compile_mode: max-autotune}``; checked against the
    peer's modes (the plug-in need not be installed to name it)."""
    options: dict[str, Any] = {}
    if isinstance(value, Mapping):
        options = {k: v for k, v in value.items() if k != "peer"}
        value = value.get("peer", "")
    if not isinstance(value, str) or not value.strip():
        raise BadOption("a peer needs a name such as torch/cudagraph, onnxruntime/cpu or iree")
    unknown = set(options) - {"precision", "compile_mode"}
    if unknown:
        raise BadOption(f"peer {value}: unknown option(s) {', '.join(sorted(unknown))}; known: precision, compile_mode")
    name, _, mode = value.strip().partition("/")
    peer = get_peer(name)
    spec = PeerSpec(peer.name, mode, options)
    peer.check_spec(spec)
    return spec


def model_key(model: Path) -> str:
    """What identifies a model file's content across machines: the ``.key`` file beside it
    (written by the runner: the benchmark's source key, weights and seed), else its sha256."""
    side = Path(str(model) + ".key")
    if side.is_file():
        return side.read_text().strip()
    import hashlib

    return hashlib.sha256(Path(model).read_bytes()).hexdigest()


def outputs_to_numpy(outs: Any) -> list[np.ndarray]:
    """A peer's outputs (a tensor, a tuple, a list, arrays) as a list of NumPy arrays."""
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    res = []
    for o in outs:
        if hasattr(o, "detach"):
            o = o.detach().cpu().numpy()
        elif hasattr(o, "to_host"):
            o = o.to_host()
        elif hasattr(o, "numpy") and not isinstance(o, np.ndarray):
            o = o.numpy()
        res.append(np.asarray(o))
    return res
