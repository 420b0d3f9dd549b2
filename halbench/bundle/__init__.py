"""The halbench bundle (``.hbx``): manifest dataclasses, reading/writing, weights, variants.

``docs/bundle-format.md`` is the contract. The compiler builds a :class:`Manifest` plus the
member bytes and calls :func:`write_bundle`; the runtime calls :func:`read_bundle`, which
refuses anything that does not check out (format, version, hashes, missing members, buffer
ranges, executable ids) with one :class:`~halbench.errors.UserError` line saying what is wrong
and what to do. Nothing here imports the compiler or runs Python from a bundle.

Example
-------
>>> b = read_bundle("model.hbx")                                    # doctest: +SKIP
>>> b.manifest.function("main").inputs[0].shape                     # doctest: +SKIP
(1, 3, 224, 224)
"""

from __future__ import annotations

from halbench.bundle.archive import Bundle, read_bundle, sha256, write_bundle
from halbench.bundle.manifest import (
    BINDING_ALIGNMENT,
    FORMAT_NAME,
    FORMAT_VERSION,
    BarrierStep,
    BufferDecl,
    BufferRange,
    CopyStep,
    DispatchStep,
    ExecutableDecl,
    FillStep,
    Function,
    Manifest,
    ManifestError,
    Step,
    TensorSpec,
    Variant,
    WeightDecl,
)
from halbench.bundle.variants import select_variant
from halbench.bundle.weights import f32_to_bf16, random_weight, weight_array

__all__ = [
    "BINDING_ALIGNMENT",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "BarrierStep",
    "BufferDecl",
    "BufferRange",
    "Bundle",
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
    "f32_to_bf16",
    "random_weight",
    "read_bundle",
    "select_variant",
    "sha256",
    "weight_array",
    "write_bundle",
]
