"""Checking a function's inputs against its signature, with one-line errors naming the input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from halbench.bundle import Function, TensorSpec
from halbench.dtypes import from_numpy, to_numpy
from halbench.errors import UserError

__all__ = ["check_input", "check_inputs"]


def _type_str(shape: tuple[int, ...], dtype: str) -> str:
    return "x".join([*(str(s) for s in shape), dtype])


def check_input(f: Function, spec: TensorSpec, value: Any) -> np.ndarray:
    """``value`` as a contiguous array of exactly ``spec``'s shape and dtype, or a UserError.

    NumPy arrays must already have the right dtype (a silent cast would hide a wrong input);
    Python numbers and lists are converted.
    """
    want = to_numpy(spec.dtype)
    what = f"input '{spec.name}' of '{f.name}'"
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.asarray(value)
        if a.dtype != want:
            try:
                got = from_numpy(a.dtype)
            except UserError:
                got = str(a.dtype)
            raise UserError(f"{what} must be {spec.type_str}, got {_type_str(a.shape, got)} "
                            f"(dtype {a.dtype}, expected {want}{' holding bf16 bits' if spec.dtype == 'bf16' else ''})")
    else:
        try:
            a = np.asarray(value, dtype=want)
        except (TypeError, ValueError, OverflowError) as e:
            raise UserError(f"{what} must be {spec.type_str}; cannot convert {type(value).__name__} ({e})") from None
    if a.shape != tuple(spec.shape):
        raise UserError(f"{what} must have shape {_type_str(spec.shape, spec.dtype)}, got shape "
                        f"{_type_str(a.shape, spec.dtype)}")
    return np.ascontiguousarray(a)


def check_inputs(f: Function, inputs: Sequence[Any] | Mapping[str, Any] | np.ndarray) -> list[np.ndarray]:
    """The inputs of ``f`` in order, checked: a sequence in order, or a mapping by name."""
    sig = ", ".join(f"{t.name}: {t.type_str}" for t in f.inputs) or "none"
    n = len(f.inputs)
    if isinstance(inputs, np.ndarray):  # one array for a one-input function
        inputs = [inputs]
    if isinstance(inputs, Mapping):
        names = [t.name for t in f.inputs]
        unknown = [k for k in inputs if k not in names]
        if unknown:
            raise UserError(f"function '{f.name}' has no input '{unknown[0]}'; its inputs are ({sig})")
        missing = [k for k in names if k not in inputs]
        if missing:
            raise UserError(f"function '{f.name}' is missing input '{missing[0]}'; its inputs are ({sig})")
        values = [inputs[k] for k in names]
    else:
        values = list(inputs)
        if len(values) != n:
            raise UserError(f"function '{f.name}' takes {n} input{'s' if n != 1 else ''} ({sig}), "
                            f"got {len(values)}")
    return [check_input(f, spec, v) for spec, v in zip(f.inputs, values)]
