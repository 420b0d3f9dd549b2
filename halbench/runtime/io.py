"""IREE's ``--input`` syntax in, iree-run-module's printing and ``.npy`` files out.

Inputs (one ``--input`` per function input, in order):

- ``1x3x224x224xf32=0``: a splat (one value fills the tensor)
- ``2x2xf32=1,2,3,4``, ``2x2xf32=1 2 3 4``, ``2x2xf32=[1 2][3 4]``: every value, row-major
- ``f32=1.5``: a scalar
- ``1x3xf32=@x.npy``: a NumPy file whose shape and dtype must match the prefix;
  ``4xf32=@x.bin``: raw little-endian bytes of exactly that size
- ``@x.npy``: a NumPy file taken as it is

Outputs print as iree-run-module prints them (``result[0]: hal.buffer_view`` then
``1x1000xf32=[...]``; rank 1 without brackets, longer tensors elided after
``max_elements``), or go to ``.npy`` files written atomically.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Any

import numpy as np

from halbench.bundle import f32_to_bf16
from halbench.dtypes import DTYPES, from_numpy, to_numpy
from halbench.errors import UserError

__all__ = ["bf16_to_f32", "format_result", "format_value", "parse_input", "parse_type", "write_npy"]

_SPLIT = re.compile(r"[\s,\[\]]+")


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def parse_type(text: str, where: str = "") -> tuple[tuple[int, ...], str]:
    """``1x3x224x224xf32`` -> ``((1, 3, 224, 224), "f32")``."""
    *dims, dtype = text.strip().split("x")
    where = where or f"'{_short(text)}'"
    if dtype not in DTYPES:
        raise UserError(f"malformed --input {where}: unknown element type '{dtype}' "
                        f"(known: {', '.join(DTYPES)}); write e.g. 1x3x224x224xf32=0")
    try:
        shape = tuple(int(d) for d in dims)
    except ValueError:
        raise UserError(f"malformed --input {where}: the shape must be dimensions joined by 'x', "
                        f"e.g. 1x3x224x224xf32=0") from None
    if any(d < 0 for d in shape):
        raise UserError(f"malformed --input {where}: negative dimension in {list(shape)}")
    return shape, dtype


def _empty_type(text: str) -> bool:
    try:
        shape, _ = parse_type(text, "")
    except UserError:
        return False
    return 0 in shape


def parse_input(text: str) -> np.ndarray:
    """An array from one ``--input`` value (see the module docstring)."""
    where = f"'{_short(text)}'"
    if text.startswith("@"):
        return _load_npy(text[1:], where)
    if "=" not in text and _empty_type(text):
        shape, dtype = parse_type(text, where)
        return np.zeros(shape, dtype=to_numpy(dtype))  # an empty tensor has no values to give
    if "=" not in text:
        raise UserError(f"malformed --input {where}: expected SHAPExTYPE=VALUES (e.g. 1x3x224x224xf32=0, "
                        f"f32=1.5, 2x2xf32=1,2,3,4) or @file.npy")
    type_text, _, value = text.partition("=")
    shape, dtype = parse_type(type_text, where)
    if value.startswith("@"):
        return _load_file(value[1:], shape, dtype, where)
    tokens = [t for t in _SPLIT.split(value) if t]
    count = int(np.prod(shape, dtype=np.int64))
    if len(tokens) == 1 and count != 1:
        tokens = tokens * count  # a splat
    if len(tokens) != count:
        raise UserError(f"malformed --input {where}: {len(tokens)} values for a {type_text} tensor of "
                        f"{count} elements (give 1 value to fill it, or all {count})")
    return _values(tokens, dtype, where).reshape(shape)


def _values(tokens: list[str], dtype: str, where: str) -> np.ndarray:
    dt = to_numpy(dtype)
    try:
        if dtype == "i1":
            lookup = {"true": True, "false": False, "1": True, "0": False}
            return np.array([lookup[t.lower()] for t in tokens], dtype=np.bool_)
        if dt.kind in "iu" and dtype != "bf16":
            ints = [int(t, 16) if t.lower().lstrip("+-").startswith("0x") else int(t) for t in tokens]
        else:
            floats = np.array([float(t) for t in tokens], dtype=np.float64)
    except (KeyError, ValueError):
        raise UserError(f"malformed --input {where}: values must be {dtype} numbers separated by "
                        f"commas or spaces") from None
    if dt.kind in "iu" and dtype != "bf16":
        info = np.iinfo(dt)
        bad = [v for v in ints if not info.min <= v <= info.max]
        if bad:
            raise UserError(f"malformed --input {where}: {bad[0]} does not fit in {dtype}")
        return np.array(ints, dtype=dt)
    if dtype == "bf16":
        return f32_to_bf16(floats.astype(np.float32))
    with np.errstate(over="ignore"):  # 1e40 as f32 is inf, as a C parser would make it
        return floats.astype(dt)


def _load_npy(path: str, where: str) -> np.ndarray:
    try:
        a = np.load(path, allow_pickle=False)  # never run code from an input file
    except FileNotFoundError:
        raise UserError(f"--input {where}: file {path} not found") from None
    except (OSError, ValueError, EOFError) as e:
        raise UserError(f"--input {where}: cannot read {path} as a .npy file ({e})") from None
    if not isinstance(a, np.ndarray):
        raise UserError(f"--input {where}: {path} holds several arrays (.npz); give one .npy per input")
    if a.dtype.byteorder not in "=|":
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def _load_file(path: str, shape: tuple[int, ...], dtype: str, where: str) -> np.ndarray:
    want = to_numpy(dtype)
    if not path.endswith(".npy"):  # raw bytes, as IREE reads a .bin
        nbytes = int(np.prod(shape, dtype=np.int64)) * want.itemsize
        try:
            with open(path, "rb") as f:
                data = f.read(nbytes + 1)  # never more than the prefix asks for (/dev/zero)
                st = os.fstat(f.fileno())
        except OSError as e:
            raise UserError(f"--input {where}: cannot read {path} ({e.strerror})") from None
        if len(data) != nbytes:
            regular = stat.S_ISREG(st.st_mode)
            size = f"{st.st_size if regular else len(data)} B" if regular or len(data) <= nbytes \
                else f"more than {nbytes} B"
            raise UserError(f"--input {where}: {path} has {size}, and the prefix needs {nbytes} B")
        return np.frombuffer(data, dtype=want.newbyteorder("<")).astype(want).reshape(shape)
    a = _load_npy(path, where)
    try:
        got = from_numpy(a.dtype)
    except UserError:
        got = str(a.dtype)
    if a.dtype != want or a.shape != shape:
        file_type = "x".join([*(str(s) for s in a.shape), got])
        raise UserError(f"--input {where}: {path} holds {file_type}, but the prefix says "
                        f"{'x'.join([*(str(s) for s in shape), dtype])}")
    return a


# -- output ----------------------------------------------------------------------------------
def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def _element(v: Any, kind: str) -> str:
    if kind == "b":
        return "1" if v else "0"
    if kind in "iu":
        return str(int(v))
    return f"{float(v):g}"  # C's %g, as IREE prints


def format_value(a: np.ndarray, dtype: str, max_elements: int = 1024) -> str:
    """``2x2xf32=[1 2][3 4]`` (rank 1: ``4xf32=1 2 3 4``; scalar: ``f32=1.5``)."""
    values = bf16_to_f32(a) if dtype == "bf16" else np.asarray(a)
    kind = values.dtype.kind
    prefix = "x".join([*(str(s) for s in a.shape), dtype])
    if values.ndim == 0:
        return f"{prefix}={_element(values.item(), kind)}"
    flat = values.reshape(-1)
    budget = [max(0, int(max_elements))]

    def render(sub: np.ndarray, base: int) -> str:
        if sub.ndim == 1:
            n = min(len(sub), budget[0])
            budget[0] -= n
            parts = [_element(x, kind) for x in flat[base:base + n]]
            if n < len(sub):
                parts.append("...")
            return " ".join(parts)
        step = int(np.prod(sub.shape[1:], dtype=np.int64))
        out = []
        for i in range(sub.shape[0]):
            if budget[0] <= 0 and step:
                out.append("...")
                break
            out.append(f"[{render(sub[i], base + i * step)}]")
        return "".join(out)

    return f"{prefix}={render(values, 0)}"


def format_result(index: int, a: np.ndarray, dtype: str, max_elements: int = 1024) -> str:
    """One result as iree-run-module prints it (two lines)."""
    return f"result[{index}]: hal.buffer_view\n{format_value(a, dtype, max_elements)}"


def write_npy(path: str, a: np.ndarray) -> None:
    """Write ``a`` to ``path`` as .npy atomically."""
    from halbench.files import atomic_open

    with atomic_open(path, "output", make_dirs=False) as f:
        np.save(f, a, allow_pickle=False)
