"""The schema of ``manifest.json`` (docs/bundle-format.md) as pydantic models: types, ranges,
sizes and unknown keys of the untrusted JSON, checked before any dataclass is built.

``Manifest.from_dict`` validates with :class:`ManifestDoc` and builds the frozen dataclasses the
runtime uses; ``check.py`` then checks what refers to what (ids, ranges inside buffers, binding
sizes). Errors are one line naming the key path (``functions[0].steps[3].bindings[1].offset``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from halbench.dtypes import DTYPES

__all__ = ["BUFFER_KINDS", "MAX_BUFFER_BYTES", "GemmChoiceDoc", "GemmConfigDoc", "GemmProblemDoc", "ManifestDoc"]

#: status: gathers' (and scatters') out-of-bounds slots; scratch: split-K counters and partial
#: sums. Both start zeroed at load, and kernels leave their counters at zero.
BUFFER_KINDS = ("input", "output", "weight", "transient", "status", "scratch")

#: No buffer of a bundle may be larger (1 TiB: beyond any device, and beyond what NumPy indexes).
MAX_BUFFER_BYTES = 1 << 40
#: Caps on counts: far beyond any real model, small enough that a hostile manifest cannot make
#: the reader build millions of objects (the manifest itself is capped at 64 MiB by archive.py).
_MAX_ITEMS = 1_000_000
#: the source nodes one dispatch may name
MAX_NODE_NAMES = 4096
_MAX_RANK = 32

Id = Annotated[int, Field(ge=0, lt=1 << 31)]
Bytes = Annotated[int, Field(ge=0, le=MAX_BUFFER_BYTES)]
Name = Annotated[str, Field(max_length=1024)]
Shape = Annotated[list[Annotated[int, Field(ge=0, le=MAX_BUFFER_BYTES)]], Field(max_length=_MAX_RANK)]
Finite = Annotated[float, Field(allow_inf_nan=False)]


class _Strict(BaseModel):
    # strict: "1" is not 1 and true is not 1 (json gives Python lists, dicts, ints, floats)
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _dtype(v: str) -> str:
    if v not in DTYPES:
        raise ValueError(f"unknown dtype {v!r}; known: {', '.join(DTYPES)}")
    return v


DType = Annotated[str, AfterValidator(_dtype)]


class TensorDoc(_Strict):
    name: Name
    shape: Shape
    dtype: DType
    buffer: Id
    offset: Bytes = 0


class BufferDoc(_Strict):
    id: Id
    nbytes: Annotated[int, Field(gt=0)]
    kind: Literal[BUFFER_KINDS] = "transient"  # type: ignore[valid-type]
    name: Name = ""

    @field_validator("nbytes")
    @classmethod
    def _holdable(cls, v: int) -> int:
        if v > MAX_BUFFER_BYTES:
            raise ValueError(f"asks for {v} B, more than any device holds ({MAX_BUFFER_BYTES} B)")
        return v


class InitDoc(_Strict):
    distribution: Literal["normal", "uniform"] = "normal"
    scale: Finite | None = None
    low: Finite | None = None
    high: Finite | None = None


class WeightDoc(_Strict):
    name: Name
    buffer: Id
    dtype: DType
    shape: Shape
    storage: Literal["file", "random"] = "file"
    member: Name | None = None
    seed: Annotated[int, Field(ge=0, lt=1 << 63)] | None = None
    init: InitDoc = Field(default_factory=InitDoc)
    offset: Bytes = 0
    #: drawn as f32, then rounded to ``dtype`` (f16 / bf16): a weight converted for --precision
    random_dtype: Literal["f32"] | None = None
    #: derived from a seeded-random weight drawn in ``random_shape`` (bundle.weights.TRANSFORMS)
    transform: Literal["winograd-f2x3"] | None = None
    random_shape: Shape | None = None
    #: made by the compiler from seeded-random weights (bundle.weights: derive_shape checks it)
    derive: dict[str, Any] | None = None
    #: the values rounded to nearest even to tf32, kept as f32: a weight rounded for --precision tf32
    round: Literal["tf32"] | None = None

    @model_validator(mode="after")
    def _storage(self) -> WeightDoc:
        if self.storage == "file" and self.member is None:
            raise ValueError(f"weight '{self.name}' is stored as a file but names no member")
        if self.storage == "random" and self.seed is None:
            raise ValueError(f"weight '{self.name}' is random but has no seed")
        if self.random_dtype is not None and (self.storage != "random" or self.dtype not in ("f16", "bf16")):
            raise ValueError(f"weight '{self.name}': random_dtype is for random f16 / bf16 weights "
                             f"(this one is {self.storage} {self.dtype})")
        if self.round is not None and self.dtype != "f32":
            raise ValueError(f"weight '{self.name}': round {self.round} is for f32 weights (this one is {self.dtype})")
        if (self.transform is None) != (self.random_shape is None):
            raise ValueError(f"weight '{self.name}': transform and random_shape go together")
        if self.derive is not None:
            from halbench.bundle.weights import derive_shape

            if self.storage != "random" or self.transform is not None:
                raise ValueError(f"weight '{self.name}': derive is for random weights without a transform")
            try:
                shape, dtype = derive_shape(self.derive)
            except (KeyError, TypeError, ValueError) as e:  # UserError is a ValueError
                raise ValueError(f"weight '{self.name}': derive: {e}") from None
            want = self.random_dtype or self.dtype
            if shape != tuple(self.shape) or dtype != want:
                raise ValueError(f"weight '{self.name}': derive makes {list(shape)}x{dtype}, not the declared "
                                 f"{list(self.shape)}x{want}")
        if self.transform is not None:
            from halbench.bundle.weights import transformed_shape

            made = transformed_shape(self.transform, tuple(self.random_shape or ()))
            if self.storage != "random" or made != tuple(self.shape):
                raise ValueError(f"weight '{self.name}': {self.transform} of a random "
                                 f"{list(self.random_shape or ())} weight gives {list(made) if made else 'nothing'}, "
                                 f"not the declared {self.storage} {list(self.shape)}")
        return self


class EntryDoc(_Strict):
    name: Name
    bindings: Annotated[int, Field(ge=0, le=4096)]
    constants: Annotated[int, Field(ge=0, le=4096)] = 0
    workgroup_size: Annotated[list[Annotated[int, Field(ge=1, le=1 << 16)]],
                              Field(min_length=3, max_length=3)] = [1, 1, 1]
    #: dynamic shared memory per workgroup in bytes (CUDA/HIP); absent in older bundles
    dynamic_shared_bytes: Annotated[int, Field(ge=0, le=1 << 20)] = 0
    #: the kernel waits for its predecessor grids itself (EntryPoint.dependent_launch); absent: false
    dependent_launch: bool = False


SmallInts = Annotated[list[Annotated[int, Field(ge=0, le=1 << 20)]], Field(max_length=8)]


class GemmAttrsDoc(_Strict):
    """The attributes that shape a GEMM problem's kernel (matmul: transposes; conv2d: geometry)."""

    transpose_a: bool | None = None
    transpose_b: bool | None = None
    #: a batch matmul's operand shared across the batch (2-D; passes/share_batch_operands.py)
    shared: Literal["a", "b"] | None = None
    layout: Literal["nchw", "ngchw", "nhwc_hwcf", "nhwc_fhwc"] | None = None
    strides: SmallInts | None = None
    dilations: SmallInts | None = None
    pads: SmallInts | None = None
    pad_value: Finite | None = None


class GemmProblemDoc(_Strict):
    """One GEMM (matmul, batch_matmul, or conv2d as implicit GEMM): enough to rebuild its op."""

    kind: Literal["matmul", "batch_matmul", "conv2d"]
    dtype: DType
    a: Shape
    b: Shape
    out: Shape
    attrs: GemmAttrsDoc = Field(default_factory=GemmAttrsDoc)


class GemmConfigDoc(_Strict):
    """A scalar GEMM kernel's configuration (codegen.tuning.GemmConfig); the compiler checks it
    against the target before it uses it."""

    bm: Annotated[int, Field(ge=1, le=256)]
    bn: Annotated[int, Field(ge=1, le=256)]
    bk: Annotated[int, Field(ge=1, le=64)]
    tm: Annotated[int, Field(ge=1, le=16)]
    tn: Annotated[int, Field(ge=1, le=16)]
    split: Annotated[int, Field(ge=1, le=64)] = 1
    runs: bool = False
    #: written out only when set (GemmConfig.to_dict), so configurations without it read as before
    frag: bool | None = None
    #: GLSL register staging: two shared stages (gemm.j2 DB), A in 16-byte loads (VA); written
    #: out only when set, like ``frag``
    double: bool | None = None
    vec_a: bool | None = None


class GemmChoiceDoc(_Strict):
    """Which configuration a variant's GEMM uses, and whether tuning or the rule chose it."""

    problem: GemmProblemDoc
    key: Annotated[str, Field(max_length=1024)]
    config: GemmConfigDoc
    source: Literal["tuned", "rule"]


class MatrixChoiceDoc(_Strict):
    """The matrix-unit GEMM a variant runs (--precision, or f16 / bf16 tensors): its kernel, the
    fragments' operand type, its tiles, K slices and shared-memory stages."""

    kernel: Literal["coopmat", "wmma", "mma.sync", "wgmma"]
    operands: Literal["f16", "bf16", "tf32"]
    bm: Annotated[int, Field(ge=1, le=512)]
    bn: Annotated[int, Field(ge=1, le=512)]
    bk: Annotated[int, Field(ge=1, le=512)]
    split: Annotated[int, Field(ge=1, le=64)] = 1
    stages: Annotated[int, Field(ge=1, le=16)] | None = None
    #: the operands (a, b, ab) whose values come rounded already (tf32 weights rounded at compile
    #: time) and go to the matrix units as they are
    rounded: Literal["a", "b", "ab"] | None = None


class VariantDoc(_Strict):
    format: Name
    target: Name = ""
    member: Name
    entry: EntryDoc
    workgroups: Annotated[list[Annotated[int, Field(ge=1, lt=1 << 32)]], Field(min_length=3, max_length=3)]
    constants: Annotated[list[Annotated[int, Field(ge=-(1 << 31), lt=1 << 32)]], Field(max_length=4096)] = []
    #: device features the variant needs (Vulkan: read from its SPIR-V); refused at load by name
    requires: Annotated[list[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]],
                        Field(max_length=32)] = []
    #: a scalar f32 GEMM's configuration and where it came from (halbench tune's cache, or the rule)
    gemm: GemmChoiceDoc | None = None
    #: a matrix-unit GEMM's kernel and tiles (the compiler's rule picked them)
    matrix: MatrixChoiceDoc | None = None

    @model_validator(mode="after")
    def _constants(self) -> VariantDoc:
        if len(self.constants) != self.entry.constants:
            raise ValueError(f"has {len(self.constants)} constants but its entry takes {self.entry.constants}")
        return self


class ExecutableDoc(_Strict):
    id: Id
    name: Name = ""
    variants: Annotated[list[VariantDoc], Field(max_length=64)]

    @field_validator("variants")
    @classmethod
    def _some(cls, v: list[VariantDoc]) -> list[VariantDoc]:
        if not v:
            raise ValueError("has no variants")
        return v


class RangeDoc(_Strict):
    buffer: Id
    offset: Bytes = 0
    length: Annotated[int, Field(gt=0, le=MAX_BUFFER_BYTES)] | None = None


class PlaceDoc(_Strict):
    """A copy's source or destination: a buffer and an offset (the copy says how many bytes)."""

    buffer: Id
    offset: Bytes = 0


class DispatchDoc(_Strict):
    kind: Literal["dispatch"]
    executable: Id
    name: Name = ""
    bindings: Annotated[list[RangeDoc], Field(max_length=4096)] = []
    #: per binding, the bytes the kernel touches from the range's start; the runtime refuses a
    #: range shorter than that (bundles written before this field have none: not checked)
    min_bytes: Annotated[list[Bytes], Field(max_length=4096)] | None = None
    flops: Annotated[int, Field(ge=0)] = 0
    bytes: Annotated[int, Field(ge=0)] = 0
    #: the source (ONNX) nodes the dispatch computes, when the compiler knew them
    nodes: Annotated[list[Annotated[str, Field(max_length=256)]], Field(max_length=MAX_NODE_NAMES)] = []

    @model_validator(mode="after")
    def _one_size_per_binding(self) -> DispatchDoc:
        if self.min_bytes is not None and len(self.min_bytes) != len(self.bindings):
            raise ValueError(f".min_bytes: has {len(self.min_bytes)} sizes for {len(self.bindings)} bindings")
        return self


class BarrierDoc(_Strict):
    kind: Literal["barrier"]


class CopyDoc(_Strict):
    kind: Literal["copy"]
    src: PlaceDoc
    dst: PlaceDoc
    nbytes: Bytes


class FillDoc(_Strict):
    kind: Literal["fill"]
    buffer: Id
    offset: Bytes = 0
    nbytes: Bytes
    pattern: Annotated[int, Field(ge=0, lt=1 << 32)] = 0
    pattern_size: Literal[1, 2, 4] = 4


StepDoc = Annotated[DispatchDoc | BarrierDoc | CopyDoc | FillDoc, Field(discriminator="kind")]


class FunctionDoc(_Strict):
    name: Name
    inputs: Annotated[list[TensorDoc], Field(max_length=4096)] = []
    outputs: Annotated[list[TensorDoc], Field(max_length=4096)] = []
    steps: Annotated[list[StepDoc], Field(max_length=_MAX_ITEMS)] = []


class ManifestDoc(_Strict):
    format: Literal["halbench-bundle"]
    version: int
    created_by: Name = ""
    source: dict[str, Any] = {}
    #: the compile options that shaped the code: target_devices, weights, precision (fp32 when absent)
    options: dict[str, Any] = {}
    targets: Annotated[list[dict[str, Any]], Field(max_length=1024)] = []
    members: Annotated[dict[Name, Annotated[str, Field(pattern=r"^[0-9a-fA-F]{64}$")]],
                       Field(max_length=_MAX_ITEMS)] = {}
    buffers: Annotated[list[BufferDoc], Field(max_length=_MAX_ITEMS)] = []
    weights: Annotated[list[WeightDoc], Field(max_length=_MAX_ITEMS)] = []
    executables: Annotated[list[ExecutableDoc], Field(max_length=_MAX_ITEMS)] = []
    functions: Annotated[list[FunctionDoc], Field(max_length=4096)] = []

    @field_validator("options")
    @classmethod
    def _precision(cls, v: dict[str, Any]) -> dict[str, Any]:
        from halbench.precision import PRECISIONS

        if "precision" in v and v["precision"] not in PRECISIONS:
            raise ValueError(f"options.precision {v['precision']!r} is not one of {', '.join(PRECISIONS)}")
        return v
