"""Element types by halbench's short names (the bundle's and the IR's), and NumPy equivalents."""

from __future__ import annotations

import numpy as np

from halbench.errors import UserError

__all__ = ["DTYPES", "from_numpy", "itemsize", "to_numpy"]

#: halbench name -> NumPy dtype. bf16 has no NumPy type: it is stored as uint16 bits.
DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.uint16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
}

_FROM_NUMPY = {v: k for k, v in DTYPES.items() if k != "bf16"}


def to_numpy(name: str) -> np.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise UserError(f"unknown element type '{name}'; known: {', '.join(DTYPES)}") from None


def from_numpy(dtype: np.dtype | type) -> str:
    dt = np.dtype(dtype)
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        raise UserError(f"unsupported NumPy dtype {dt}") from None


def itemsize(name: str) -> int:
    return to_numpy(name).itemsize
