"""The bundle manifest (``manifest.json``) as frozen dataclasses with ``to_dict``/``from_dict``.

``from_dict`` reports every malformed field with where it is (``function 'main' step 3 has no
'executable'``) as a :class:`ManifestError`; ``read_bundle`` adds the bundle's name and what to do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from halbench.dtypes import DTYPES, itemsize
from halbench.errors import UserError
from halbench.hal import EntryPoint

__all__ = [
    "BINDING_ALIGNMENT",
    "BUFFER_KINDS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "BarrierStep",
    "BufferDecl",
    "BufferRange",
    "CopyStep",
    "DispatchStep",
    "ExecutableDecl",
    "FillStep",
    "Function",
    "Manifest",
    "ManifestError",
    "Step",
    "TensorSpec",
    "Variant",
    "WeightDecl",
]

FORMAT_NAME = "halbench-bundle"
FORMAT_VERSION = 1
#: Binding offsets are multiples of this: valid on every device (docs/bundle-format.md).
BINDING_ALIGNMENT = 256
BUFFER_KINDS = ("input", "output", "weight", "transient", "status")
#: No buffer of a bundle may be larger (1 TiB: beyond any device, and beyond what NumPy indexes).
MAX_BUFFER_BYTES = 1 << 40
MANIFEST = "manifest.json"


class ManifestError(UserError):
    """A malformed manifest; ``read_bundle`` turns it into a UserError naming the bundle."""


# -- small typed accessors: every malformed field is reported with where it is -------------
def _get(d: Any, key: str, where: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if not isinstance(d, dict):
        raise ManifestError(f"{where} must be a JSON object, got {type(d).__name__}")
    if key not in d:
        if default is not ...:
            return default
        raise ManifestError(f"{where} has no '{key}'")
    v = d[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int in Python; a manifest saying "nbytes": true is still malformed.
    if (isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds):
        names = "/".join(k.__name__ for k in kinds)
        raise ManifestError(f"{where}.{key} must be {names}, got {v!r}")
    return v


def _ints(v: Any, where: str, n: int | None = None) -> tuple[int, ...]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise ManifestError(f"{where} must be a list of integers, got {v!r}")
    if n is not None and len(v) != n:
        raise ManifestError(f"{where} must have {n} integers, got {list(v)}")
    return tuple(v)


def _list(d: Any, key: str, where: str) -> list[Any]:
    return _get(d, key, where, list, [])


def _dtype(name: Any, where: str) -> str:
    if name not in DTYPES:
        raise ManifestError(f"{where} has unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return name


# -- the manifest ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    """A function input or output: its name, static shape, dtype, and where it lives."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    offset: int = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * itemsize(self.dtype)

    @property
    def type_str(self) -> str:
        """IREE's spelling: ``1x3x224x224xf32`` (``f32`` for a scalar)."""
        return "x".join([*(str(s) for s in self.shape), self.dtype])

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "buffer": self.buffer, "offset": self.offset}

    @classmethod
    def from_dict(cls, d: Any, where: str = "tensor") -> TensorSpec:
        shape = _ints(_get(d, "shape", where, list), f"{where}.shape")
        if any(s < 0 for s in shape):
            raise ManifestError(f"{where}.shape has a negative dimension: {list(shape)}")
        return cls(_get(d, "name", where, str), shape, _dtype(_get(d, "dtype", where, str), where),
                   _get(d, "buffer", where, int), _get(d, "offset", where, int, 0))


@dataclass(frozen=True)
class BufferDecl:
    id: int
    nbytes: int
    kind: str = "transient"
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "nbytes": self.nbytes, "kind": self.kind, "name": self.name}

    @classmethod
    def from_dict(cls, d: Any, where: str = "buffer") -> BufferDecl:
        b = cls(_get(d, "id", where, int), _get(d, "nbytes", where, int),
                _get(d, "kind", where, str, "transient"), _get(d, "name", where, str, ""))
        if b.nbytes <= 0:
            raise ManifestError(f"{where} (buffer {b.id}) has nbytes {b.nbytes}; it must be positive")
        if b.nbytes > MAX_BUFFER_BYTES:
            raise ManifestError(f"{where} (buffer {b.id}) asks for {b.nbytes} B, more than any device holds "
                                f"({MAX_BUFFER_BYTES} B)")
        if b.kind not in BUFFER_KINDS:
            raise ManifestError(f"{where} has kind {b.kind!r}; known: {', '.join(BUFFER_KINDS)}")
        return b


@dataclass(frozen=True)
class WeightDecl:
    """A weight: stored in a member (``storage="file"``) or seeded random (``"random"``)."""

    name: str
    buffer: int
    dtype: str
    shape: tuple[int, ...]
    storage: str = "file"
    member: str | None = None
    seed: int | None = None
    init: Mapping[str, Any] = field(default_factory=dict)
    offset: int = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * itemsize(self.dtype)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "buffer": self.buffer, "offset": self.offset,
                             "dtype": self.dtype, "shape": list(self.shape), "storage": self.storage}
        if self.storage == "file":
            d["member"] = self.member
        else:
            d["seed"] = self.seed
            d["init"] = dict(self.init)
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "weight") -> WeightDecl:
        storage = _get(d, "storage", where, str, "file")
        w = cls(_get(d, "name", where, str), _get(d, "buffer", where, int),
                _dtype(_get(d, "dtype", where, str), where),
                _ints(_get(d, "shape", where, list), f"{where}.shape"), storage,
                _get(d, "member", where, str, None), _get(d, "seed", where, int, None),
                dict(_get(d, "init", where, dict, {})), _get(d, "offset", where, int, 0))
        if storage == "file" and w.member is None:
            raise ManifestError(f"{where} ('{w.name}') is stored as a file but names no member")
        if storage == "random":
            if w.seed is None:
                raise ManifestError(f"{where} ('{w.name}') is random but has no seed")
            if not 0 <= w.seed < 2**63:
                raise ManifestError(f"{where} ('{w.name}') has seed {w.seed}; seeds are 0 .. 2^63-1")
            _check_init(w.init, f"{where}.init")
        elif storage != "file":
            raise ManifestError(f"{where} ('{w.name}') has storage {storage!r}; known: file, random")
        return w


def _check_init(init: Mapping[str, Any], where: str) -> None:
    dist = init.get("distribution", "normal")
    need = {"normal": ("scale",), "uniform": ("low", "high")}.get(dist)
    if need is None:
        raise ManifestError(f"{where}.distribution is {dist!r}; known: normal, uniform")
    for k in need:
        if k in init and (isinstance(init[k], bool) or not isinstance(init[k], (int, float))):
            raise ManifestError(f"{where}.{k} must be a number, got {init[k]!r}")


#: A variant's required features: driver feature names (``cooperativeMatrix``), a few at most.
_FEATURE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
_MAX_REQUIRES = 32


@dataclass(frozen=True)
class Variant:
    """One executable payload for one format/target, with its own launch parameters."""

    format: str
    target: str
    member: str
    entry: EntryPoint
    workgroups: tuple[int, int, int]
    constants: tuple[int, ...] = ()
    #: Device features the payload needs, by the driver's names (Vulkan: ``cooperativeMatrix``,
    #: ``shaderFloat16``); a device lacking one refuses the variant by name (check_variant).
    requires: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "target": self.target, "member": self.member,
                "entry": self.entry.to_dict(), "workgroups": list(self.workgroups),
                "constants": list(self.constants),
                **({"requires": list(self.requires)} if self.requires else {})}

    @classmethod
    def from_dict(cls, d: Any, where: str = "variant") -> Variant:
        e = _get(d, "entry", where, dict)
        try:
            entry = EntryPoint(_get(e, "name", f"{where}.entry", str),
                               _get(e, "bindings", f"{where}.entry", int),
                               _get(e, "constants", f"{where}.entry", int, 0),
                               _ints(_get(e, "workgroup_size", f"{where}.entry", list, [1, 1, 1]),
                                     f"{where}.entry.workgroup_size", 3))
        except UserError as err:
            raise ManifestError(f"{where}.entry: {err}") from None
        wg = _ints(_get(d, "workgroups", where, list), f"{where}.workgroups", 3)
        if min(wg) < 1:
            raise ManifestError(f"{where}.workgroups must be positive, got {list(wg)}")
        consts = _ints(_get(d, "constants", where, list, []), f"{where}.constants")
        if len(consts) != entry.constants:
            raise ManifestError(f"{where} has {len(consts)} constants but its entry takes {entry.constants}")
        if any(not -(2**31) <= c < 2**32 for c in consts):
            raise ManifestError(f"{where}.constants must fit in 32 bits, got {list(consts)}")
        requires = _get(d, "requires", where, list, [])
        if len(requires) > _MAX_REQUIRES or not all(isinstance(r, str) and _FEATURE_NAME.fullmatch(r)
                                                    for r in requires):
            raise ManifestError(f"{where}.requires must be up to {_MAX_REQUIRES} feature names "
                                f"(letters and digits), got {requires!r:.200}")
        return cls(_get(d, "format", where, str), _get(d, "target", where, str, ""),
                   _get(d, "member", where, str), entry, wg, consts, tuple(requires))  # type: ignore[arg-type]


@dataclass(frozen=True)
class ExecutableDecl:
    id: int
    name: str
    variants: tuple[Variant, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "variants": [v.to_dict() for v in self.variants]}

    @classmethod
    def from_dict(cls, d: Any, where: str = "executable") -> ExecutableDecl:
        vs = tuple(Variant.from_dict(v, f"{where}.variants[{i}]")
                   for i, v in enumerate(_list(d, "variants", where)))
        if not vs:
            raise ManifestError(f"{where} has no variants")
        return cls(_get(d, "id", where, int), _get(d, "name", where, str, ""), vs)


@dataclass(frozen=True)
class BufferRange:
    """A range of a bundle buffer; ``length=None`` means to the end of the buffer."""

    buffer: int
    offset: int = 0
    length: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"buffer": self.buffer, "offset": self.offset}
        if self.length is not None:
            d["length"] = self.length
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "range") -> BufferRange:
        return cls(_get(d, "buffer", where, int), _get(d, "offset", where, int, 0),
                   _get(d, "length", where, int, None))


@dataclass(frozen=True)
class DispatchStep:
    executable: int
    bindings: tuple[BufferRange, ...]
    name: str = ""
    flops: int = 0
    bytes: int = 0
    kind: str = field(default="dispatch", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "dispatch", "executable": self.executable, "name": self.name,
                "bindings": [b.to_dict() for b in self.bindings], "flops": self.flops,
                "bytes": self.bytes}


@dataclass(frozen=True)
class BarrierStep:
    kind: str = field(default="barrier", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "barrier"}


@dataclass(frozen=True)
class CopyStep:
    src: BufferRange
    dst: BufferRange
    nbytes: int
    kind: str = field(default="copy", init=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "copy", "src": {"buffer": self.src.buffer, "offset": self.src.offset},
                "dst": {"buffer": self.dst.buffer, "offset": self.dst.offset}, "nbytes": self.nbytes}


@dataclass(frozen=True)
class FillStep:
    """Fill with a repeated ``pattern`` of ``pattern_size`` (1, 2 or 4) bytes."""

    buffer: int
    offset: int
    nbytes: int
    pattern: int = 0
    pattern_size: int = 4
    kind: str = field(default="fill", init=False)

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": "fill", "buffer": self.buffer, "offset": self.offset, "nbytes": self.nbytes,
             "pattern": self.pattern}
        if self.pattern_size != 4:
            d["pattern_size"] = self.pattern_size
        return d


Step = DispatchStep | BarrierStep | CopyStep | FillStep


def _step_from_dict(d: Any, where: str) -> Step:
    kind = _get(d, "kind", where, str)
    if kind == "dispatch":
        binds = tuple(BufferRange.from_dict(b, f"{where}.bindings[{i}]")
                      for i, b in enumerate(_list(d, "bindings", where)))
        return DispatchStep(_get(d, "executable", where, int), binds, _get(d, "name", where, str, ""),
                            _get(d, "flops", where, int, 0), _get(d, "bytes", where, int, 0))
    if kind == "barrier":
        return BarrierStep()
    if kind == "copy":
        return CopyStep(BufferRange.from_dict(_get(d, "src", where, dict), f"{where}.src"),
                        BufferRange.from_dict(_get(d, "dst", where, dict), f"{where}.dst"),
                        _get(d, "nbytes", where, int))
    if kind == "fill":
        return FillStep(_get(d, "buffer", where, int), _get(d, "offset", where, int, 0),
                        _get(d, "nbytes", where, int), _get(d, "pattern", where, int, 0),
                        _get(d, "pattern_size", where, int, 4))
    raise ManifestError(f"{where} has unknown kind {kind!r}; known: dispatch, barrier, copy, fill")


@dataclass(frozen=True)
class Function:
    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    steps: tuple[Step, ...]

    @property
    def dispatches(self) -> tuple[DispatchStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, DispatchStep))

    def signature(self) -> str:
        """``main(input: 1x3x224x224xf32) -> (logits: 1x1000xf32)``, for messages and listings."""
        ins = ", ".join(f"{t.name}: {t.type_str}" for t in self.inputs)
        outs = ", ".join(f"{t.name}: {t.type_str}" for t in self.outputs)
        return f"{self.name}({ins}) -> ({outs})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "inputs": [t.to_dict() for t in self.inputs],
                "outputs": [t.to_dict() for t in self.outputs],
                "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, d: Any, where: str = "function") -> Function:
        name = _get(d, "name", where, str)
        where = f"function '{name}'"
        return cls(name,
                   tuple(TensorSpec.from_dict(t, f"{where} input {i}") for i, t in enumerate(_list(d, "inputs", where))),
                   tuple(TensorSpec.from_dict(t, f"{where} output {i}") for i, t in enumerate(_list(d, "outputs", where))),
                   tuple(_step_from_dict(s, f"{where} step {i}") for i, s in enumerate(_list(d, "steps", where))))


@dataclass(frozen=True)
class Manifest:
    """The whole ``manifest.json``. ``members`` (name -> sha256) is filled by :func:`write_bundle`."""

    buffers: tuple[BufferDecl, ...]
    executables: tuple[ExecutableDecl, ...]
    functions: tuple[Function, ...]
    weights: tuple[WeightDecl, ...] = ()
    members: Mapping[str, str] = field(default_factory=dict)
    created_by: str = ""
    source: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    targets: tuple[Mapping[str, Any], ...] = ()
    format: str = FORMAT_NAME
    version: int = FORMAT_VERSION

    def function(self, name: str | None = None) -> Function:
        """The function called ``name``; ``None`` picks the only one (an error if several)."""
        names = [f.name for f in self.functions]
        if name is None:
            if len(self.functions) == 1:
                return self.functions[0]
            raise UserError(f"the module has {len(names)} functions ({', '.join(names) or 'none'}); "
                            f"choose one with --function")
        for f in self.functions:
            if f.name == name:
                return f
        raise UserError(f"the module has no function '{name}'; it has: {', '.join(names) or 'none'}")

    def buffer(self, id: int) -> BufferDecl:
        for b in self.buffers:
            if b.id == id:
                return b
        raise UserError(f"the manifest has no buffer {id}")

    def executable(self, id: int) -> ExecutableDecl:
        for e in self.executables:
            if e.id == id:
                return e
        raise UserError(f"the manifest has no executable {id}")

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "version": self.version, "created_by": self.created_by,
                "source": dict(self.source), "options": dict(self.options),
                "targets": [dict(t) for t in self.targets], "members": dict(self.members),
                "buffers": [b.to_dict() for b in self.buffers],
                "weights": [w.to_dict() for w in self.weights],
                "executables": [e.to_dict() for e in self.executables],
                "functions": [f.to_dict() for f in self.functions]}

    @classmethod
    def from_dict(cls, d: Any) -> Manifest:
        """Parse and check a manifest; raises :class:`ManifestError` saying what is wrong."""
        w = "manifest"
        fmt = _get(d, "format", w, str)
        if fmt != FORMAT_NAME:
            raise ManifestError(f"its format is {fmt!r}, not {FORMAT_NAME!r}")
        version = _get(d, "version", w, int)
        if version != FORMAT_VERSION:
            raise ManifestError(f"it has bundle format version {version}, and this halbench reads "
                                f"version {FORMAT_VERSION}")
        members = _get(d, "members", w, dict, {})
        if not all(isinstance(v, str) for v in members.values()):
            raise ManifestError("manifest.members must map member names to sha256 hex strings")
        m = cls(
            buffers=tuple(BufferDecl.from_dict(b, f"buffers[{i}]") for i, b in enumerate(_list(d, "buffers", w))),
            executables=tuple(ExecutableDecl.from_dict(e, f"executables[{i}]")
                              for i, e in enumerate(_list(d, "executables", w))),
            functions=tuple(Function.from_dict(f, f"functions[{i}]") for i, f in enumerate(_list(d, "functions", w))),
            weights=tuple(WeightDecl.from_dict(x, f"weights[{i}]") for i, x in enumerate(_list(d, "weights", w))),
            members=dict(members), created_by=_get(d, "created_by", w, str, ""),
            source=dict(_get(d, "source", w, dict, {})), options=dict(_get(d, "options", w, dict, {})),
            targets=tuple(dict(t) for t in _list(d, "targets", w) if isinstance(t, dict)),
            format=fmt, version=version)
        m.check()
        return m

    def check(self) -> None:
        """Structural sanity: ids exist, ranges lie inside their buffers, members are listed."""
        from halbench.bundle.check import check_manifest

        check_manifest(self)
