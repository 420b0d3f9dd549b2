"""The ``local-v1`` executable format and the registry of NumPy kernels the local drivers run.

Format
------
``ExecutableBinary.data`` is UTF-8 JSON that maps every entry point to a registered kernel::

    {"entries": {"main": {"kernel": "matmul_f32", "attrs": {"m": 64, "n": 64, "k": 32}}}}

Every entry point of the binary must appear in ``entries`` and nothing else may; ``attrs`` is
any JSON object, handed to the kernel unchanged. A binary with a single entry point may use
the shorthand ``{"kernel": ..., "attrs": ...}``. No Python travels in a binary: a kernel is
only a name, looked up in this process's registry when the executable is loaded, and an
unknown name is refused then. Build binaries with :func:`local_binary`.

Kernels
-------
A kernel is a function::

    fn(bindings, constants, attrs, workgroups, wg_range) -> None

- ``bindings``: ``list[np.ndarray]``, one writable ``uint8`` view per binding over exactly the
  bound range (``buffer[offset:offset + length]``); ``bindings[i].view(np.float32)`` etc.
- ``constants``: read-only ``np.ndarray`` of ``uint32`` (``constants[1:2].view(np.float32)``
  reinterprets a float's bits).
- ``attrs``: read-only mapping, the entry's ``attrs`` from the binary.
- ``workgroups``: ``(x, y, z)`` of the dispatch.
- ``wg_range``: the flattened workgroup ids this call must compute, a ``range`` with step 1.
  Workgroup ``(x, y, z)`` has id ``x + X * (y + Y * z)`` (x fastest, as on GPUs);
  :func:`workgroup_xyz` turns a range back into coordinates.

A kernel registered ``parallel=True`` may be called several times at once (local-task) with
disjoint ranges that together cover ``range(x * y * z)``; each call must write only what its
workgroups own. A per-workgroup test kernel fits as is; a whole-tensor kernel (conv, matmul)
either splits its output along the flattened id or registers ``parallel=False`` and is then
called exactly once with the full range. Either way results must not depend on the split:
these drivers are the compiler's correctness oracle.

Kernels register with :func:`register_kernel` at import of the module defining them; that
module must be imported before a binary naming them is loaded (the compiler's kernels belong
in a module importable without the compiler, as the runtime never imports ``compiler/``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from halbench.errors import UserError
from halbench.hal import EntryPoint, ExecutableBinary

__all__ = [
    "FORMAT",
    "Kernel",
    "RegisteredKernel",
    "get_kernel",
    "local_binary",
    "parse_binary",
    "register_kernel",
    "registered_kernels",
    "workgroup_xyz",
]

FORMAT = "local-v1"


class Kernel(Protocol):
    def __call__(self, bindings: list[np.ndarray], constants: np.ndarray, attrs: Mapping[str, Any],
                 workgroups: tuple[int, int, int], wg_range: range) -> None: ...


@dataclass(frozen=True)
class RegisteredKernel:
    name: str
    fn: Kernel
    parallel: bool = True


_registry: dict[str, RegisteredKernel] = {}
_lock = threading.Lock()


def register_kernel(name: str, fn: Callable[..., None], *, parallel: bool = True,
                    replace: bool = False) -> Callable[..., None]:
    """Register ``fn`` under ``name`` (see the module docstring for its signature).

    Registering the same function twice is harmless (a module imported twice); another
    function under a taken name is refused unless ``replace=True``. Returns ``fn``.
    """
    if not isinstance(name, str) or not name:
        raise UserError(f"a local kernel name must be a non-empty string, got {name!r}")
    if not callable(fn):
        raise UserError(f"local kernel '{name}' must be callable, got {fn!r}")
    with _lock:
        old = _registry.get(name)
        if old is not None and not replace and _qualname(old.fn) != _qualname(fn):
            raise UserError(f"local kernel '{name}' is already registered by {_qualname(old.fn)}; "
                            f"pass replace=True to override it")
        _registry[name] = RegisteredKernel(name, fn, bool(parallel))
    return fn


def get_kernel(name: str) -> RegisteredKernel:
    """The kernel registered as ``name``; a UserError lists the registered ones otherwise."""
    try:
        return _registry[name]
    except KeyError:
        known = ", ".join(sorted(_registry)) or "none (import the module that registers them)"
        raise UserError(f"local kernel '{name}' is not registered; registered kernels: {known}") from None


def registered_kernels() -> list[str]:
    return sorted(_registry)


def local_binary(entries: Mapping[str, tuple[str, Mapping[str, Any], EntryPoint]],
                 target: str = "host") -> ExecutableBinary:
    """A ``local-v1`` binary from ``{entry_name: (kernel_name, attrs, EntryPoint)}``.

    The JSON is written with sorted keys so that equal inputs give equal bytes (content hashes
    of bundles stay stable). NumPy scalars and arrays in ``attrs`` become JSON numbers / lists.
    """
    doc: dict[str, Any] = {}
    eps = []
    for name, item in entries.items():
        try:
            kernel, attrs, ep = item
        except (TypeError, ValueError):
            raise UserError(f"local_binary entry '{name}' must be (kernel_name, attrs, EntryPoint)") from None
        if not isinstance(ep, EntryPoint) or ep.name != name:
            raise UserError(f"local_binary entry '{name}' needs an EntryPoint named '{name}', got {ep!r}")
        if not isinstance(kernel, str) or not kernel:
            raise UserError(f"local_binary entry '{name}': kernel name must be a non-empty string")
        doc[name] = {"kernel": kernel, "attrs": dict(attrs or {})}
        eps.append(ep)
    try:
        data = json.dumps({"entries": doc}, sort_keys=True, default=_json_default)
    except TypeError as e:
        raise UserError(f"local_binary: attrs must be JSON-serializable: {e}") from None
    return ExecutableBinary(FORMAT, data.encode("utf-8"), tuple(eps), target)


def parse_binary(binary: ExecutableBinary) -> dict[str, tuple[RegisteredKernel, Mapping[str, Any]]]:
    """Entry name -> (kernel, attrs) of a ``local-v1`` binary; refuses anything malformed or
    naming an unregistered kernel, with what is wrong in the message."""
    try:
        doc = json.loads(binary.data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UserError(f"local-v1 executable is not UTF-8 JSON: {e}") from None
    names = [e.name for e in binary.entries]
    if isinstance(doc, dict) and "kernel" in doc and "entries" not in doc:
        if len(names) != 1:
            raise UserError(f"the local-v1 shorthand {{kernel, attrs}} needs exactly one entry point, "
                            f"the binary has {names}")
        doc = {"entries": {names[0]: doc}}
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), dict):
        raise UserError('local-v1 executable must be {"entries": {name: {"kernel": ..., "attrs": {...}}}}')
    described = doc["entries"]
    missing = [n for n in names if n not in described]
    extra = [n for n in described if n not in names]
    if missing or extra:
        raise UserError(f"local-v1 executable: entry points {names} do not match its descriptions "
                        f"{list(described)} (missing {missing}, extra {extra})")
    out = {}
    for name in names:
        d = described[name]
        if not isinstance(d, dict) or not isinstance(d.get("kernel"), str):
            raise UserError(f"local-v1 entry '{name}' needs a \"kernel\" name, got {d!r}")
        attrs = d.get("attrs", {})
        if not isinstance(attrs, dict):
            raise UserError(f"local-v1 entry '{name}': attrs must be a JSON object, got {attrs!r}")
        out[name] = (get_kernel(d["kernel"]), attrs)
    return out


def workgroup_xyz(workgroups: tuple[int, int, int], wg_range: range) -> tuple[np.ndarray, ...]:
    """The (x, y, z) coordinates of the flattened workgroup ids in ``wg_range``."""
    ids = np.arange(wg_range.start, wg_range.stop, dtype=np.int64)
    x = ids % workgroups[0]
    rest = ids // workgroups[0]
    return x, rest % workgroups[1], rest // workgroups[1]


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serializable")
