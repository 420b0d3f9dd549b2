"""The bundle manifest (``manifest.json``) as frozen dataclasses with ``to_dict``.

:meth:`Manifest.from_dict` validates the untrusted JSON with the pydantic schema in
``manifest_schema.py`` (one line naming the key path: ``functions[0].steps[3] has no
'executable'``), builds these dataclasses, and checks what refers to what (``check.py``); every
problem is a :class:`ManifestError`, to which ``read_bundle`` adds the bundle's name and what to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from halbench.bundle.manifest_schema import BUFFER_KINDS, ManifestDoc
from halbench.dtypes import itemsize
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
MANIFEST = "manifest.json"


class ManifestError(UserError):
    """A malformed manifest; ``read_bundle`` turns it into a UserError naming the bundle."""


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



@dataclass(frozen=True)
class BufferDecl:
    id: int
    nbytes: int
    kind: str = "transient"
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "nbytes": self.nbytes, "kind": self.kind, "name": self.name}



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
    #: a random weight drawn in this type (``f32``), then rounded to nearest even to ``dtype``
    #: (f16 / bf16): a weight the compiler converted for --precision (None: drawn as ``dtype``)
    random_dtype: str | None = None
    #: a random weight derived from a seeded-random one (bundle.weights.TRANSFORMS): drawn in
    #: ``random_shape``, then put through this transform (``winograd-f2x3``)
    transform: str | None = None
    random_shape: tuple[int, ...] | None = None
    #: a random weight the compiler made from seeded-random ones (a transpose, a concatenation):
    #: the tree of how (bundle.weights.derive_values), evaluated in its leaves' type, then
    #: rounded to ``dtype`` where ``random_dtype`` says so
    derive: Mapping[str, Any] | None = None
    #: ``tf32``: the values (stored, drawn, transformed or derived) rounded to nearest even to tf32
    #: and kept as f32: a weight the compiler rounded for --precision tf32, whose GEMMs then read
    #: it without rounding it again
    round: str | None = None

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
            if self.random_dtype is not None:
                d["random_dtype"] = self.random_dtype
            if self.transform is not None:
                d["transform"] = self.transform
                d["random_shape"] = list(self.random_shape or ())
            if self.derive is not None:
                d["derive"] = self.derive
        if self.round is not None:
            d["round"] = self.round
        return d



#: A variant's required features: driver feature names (``cooperativeMatrix``), a few at most.


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
    #: a scalar f32 GEMM's problem, configuration and source ("tuned" or "rule"), as the manifest
    #: stores it (schema: manifest_schema.GemmChoiceDoc)
    gemm: Mapping[str, Any] | None = field(default=None, hash=False)
    #: a matrix-unit GEMM's kernel, operand type, tiles, K slices and stages (schema:
    #: manifest_schema.MatrixChoiceDoc)
    matrix: Mapping[str, Any] | None = field(default=None, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "target": self.target, "member": self.member,
                "entry": self.entry.to_dict(), "workgroups": list(self.workgroups),
                "constants": list(self.constants),
                **({"requires": list(self.requires)} if self.requires else {}),
                **({"gemm": dict(self.gemm)} if self.gemm else {}),
                **({"matrix": dict(self.matrix)} if self.matrix else {})}



@dataclass(frozen=True)
class ExecutableDecl:
    id: int
    name: str
    variants: tuple[Variant, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "variants": [v.to_dict() for v in self.variants]}



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



@dataclass(frozen=True)
class DispatchStep:
    executable: int
    bindings: tuple[BufferRange, ...]
    name: str = ""
    flops: int = 0
    bytes: int = 0
    #: per binding, how many bytes from the range's start the kernel may touch; ``check.py``
    #: refuses a binding range shorter than that (None: a bundle written before it was recorded)
    min_bytes: tuple[int, ...] | None = None
    nodes: tuple[str, ...] = ()  # the source (ONNX) nodes this dispatch computes, when known
    kind: str = field(default="dispatch", init=False)

    def to_dict(self) -> dict[str, Any]:
        d = {"kind": "dispatch", "executable": self.executable, "name": self.name,
             "bindings": [b.to_dict() for b in self.bindings], "flops": self.flops, "bytes": self.bytes}
        if self.min_bytes is not None:
            d["min_bytes"] = list(self.min_bytes)
        if self.nodes:
            d["nodes"] = list(self.nodes)
        return d


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
        from pydantic import ValidationError

        from halbench.validation import one_line

        if not isinstance(d, dict):
            raise ManifestError(f"the manifest must be a JSON object, got {type(d).__name__}")
        if d.get("format") != FORMAT_NAME:
            raise ManifestError(f"its format is {d.get('format')!r}, not {FORMAT_NAME!r}")
        if d.get("version") != FORMAT_VERSION:
            raise ManifestError(f"it has bundle format version {d.get('version')!r}, and this halbench reads "
                                f"version {FORMAT_VERSION}")
        try:
            doc = ManifestDoc.model_validate(d)
        except ValidationError as e:
            raise ManifestError(one_line(e, expected="must be", missing="{parent} has no '{key}'",
                                         tags=_STEP_KINDS)) from None
        m = _from_doc(doc)
        m.check()
        return m

    def check(self) -> None:
        """Structural sanity: ids exist, ranges lie inside their buffers, members are listed."""
        from halbench.bundle.check import check_manifest

        check_manifest(self)


_STEP_KINDS = frozenset(("dispatch", "barrier", "copy", "fill"))


# -- from the validated JSON to the dataclasses ---------------------------------------------
def _tensor(t: Any) -> TensorSpec:
    return TensorSpec(t.name, tuple(t.shape), t.dtype, t.buffer, t.offset)


def _step(s: Any) -> Step:
    if s.kind == "dispatch":
        return DispatchStep(s.executable, tuple(BufferRange(r.buffer, r.offset, r.length) for r in s.bindings),
                            s.name, s.flops, s.bytes, None if s.min_bytes is None else tuple(s.min_bytes),
                            tuple(s.nodes))
    if s.kind == "copy":
        return CopyStep(BufferRange(s.src.buffer, s.src.offset), BufferRange(s.dst.buffer, s.dst.offset), s.nbytes)
    if s.kind == "fill":
        return FillStep(s.buffer, s.offset, s.nbytes, s.pattern, s.pattern_size)
    return BarrierStep()


def _variant(v: Any) -> Variant:
    e = v.entry
    entry = EntryPoint(e.name, e.bindings, e.constants, tuple(e.workgroup_size), e.dynamic_shared_bytes,
                       e.dependent_launch)
    return Variant(v.format, v.target, v.member, entry, tuple(v.workgroups), tuple(v.constants),
                   tuple(v.requires),  # type: ignore[arg-type]
                   v.gemm.model_dump(exclude_none=True) if v.gemm is not None else None,
                   v.matrix.model_dump(exclude_none=True) if v.matrix is not None else None)


def _from_doc(doc: ManifestDoc) -> Manifest:
    return Manifest(
        buffers=tuple(BufferDecl(b.id, b.nbytes, b.kind, b.name) for b in doc.buffers),
        executables=tuple(ExecutableDecl(e.id, e.name, tuple(_variant(v) for v in e.variants))
                          for e in doc.executables),
        functions=tuple(Function(f.name, tuple(_tensor(t) for t in f.inputs), tuple(_tensor(t) for t in f.outputs),
                                 tuple(_step(s) for s in f.steps)) for f in doc.functions),
        weights=tuple(WeightDecl(w.name, w.buffer, w.dtype, tuple(w.shape), w.storage, w.member, w.seed,
                                 w.init.model_dump(exclude_unset=True), w.offset, w.random_dtype,
                                 w.transform, tuple(w.random_shape) if w.random_shape is not None else None,
                                 w.derive, w.round)
                       for w in doc.weights),
        members=dict(doc.members), created_by=doc.created_by, source=dict(doc.source),
        options=dict(doc.options), targets=tuple(dict(t) for t in doc.targets),
        format=doc.format, version=doc.version)
