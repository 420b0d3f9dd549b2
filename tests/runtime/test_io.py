"""IREE's --input syntax, iree-run-module's printing, atomic .npy output."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from halbench.errors import UserError
from halbench.runtime.io import format_result, format_value, parse_input, write_npy


@pytest.mark.parametrize("text, want", [
    ("2x3xf32=0", np.zeros((2, 3), np.float32)),
    ("4xf32=1.5", np.full(4, 1.5, np.float32)),
    ("2x2xf32=1,2,3,4", np.array([[1, 2], [3, 4]], np.float32)),
    ("2x2xf32=1 2 3 4", np.array([[1, 2], [3, 4]], np.float32)),
    ("2x2xi32=[1 2][3 4]", np.array([[1, 2], [3, 4]], np.int32)),
    ("2xi32=[1 2]", np.array([1, 2], np.int32)),
    ("f32=1.5", np.array(1.5, np.float32)),
    ("i64=-7", np.array(-7, np.int64)),
    ("3xi1=true,0,1", np.array([True, False, True])),
    ("2xu8=0x10,255", np.array([16, 255], np.uint8)),
    ("2xf16=1,-2", np.array([1, -2], np.float16)),
    ("2xbf16=1,-2.5", np.array([0x3F80, 0xC020], np.uint16)),
    ("0x4xf32=", np.zeros((0, 4), np.float32)),
])
def test_parse_values(text: str, want: np.ndarray) -> None:
    got = parse_input(text)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_parse_files(tmp_path: Path) -> None:
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "a.npy", a)
    np.testing.assert_array_equal(parse_input(f"@{tmp_path}/a.npy"), a)
    np.testing.assert_array_equal(parse_input(f"2x3xf32=@{tmp_path}/a.npy"), a)
    (tmp_path / "a.bin").write_bytes(a.tobytes())
    np.testing.assert_array_equal(parse_input(f"2x3xf32=@{tmp_path}/a.bin"), a)
    np.save(tmp_path / "big.npy", a.astype(">f4"))
    assert parse_input(f"@{tmp_path}/big.npy").dtype == np.float32
    with pytest.raises(UserError, match="holds 2x3xf32, but the prefix says 3x2xf32"):
        parse_input(f"3x2xf32=@{tmp_path}/a.npy")
    with pytest.raises(UserError, match="holds 2x3xf32, but the prefix says 2x3xi32"):
        parse_input(f"2x3xi32=@{tmp_path}/a.npy")
    with pytest.raises(UserError, match="has 24 B, and the prefix needs 16 B"):
        parse_input(f"4xf32=@{tmp_path}/a.bin")
    with pytest.raises(UserError, match="not found"):
        parse_input(f"@{tmp_path}/none.npy")
    np.save(tmp_path / "obj.npy", np.array([{}], dtype=object), allow_pickle=True)
    with pytest.raises(UserError, match="cannot read"):  # never unpickles
        parse_input(f"@{tmp_path}/obj.npy")
    (tmp_path / "junk.npy").write_bytes(b"junk")
    with pytest.raises(UserError, match="cannot read"):
        parse_input(f"@{tmp_path}/junk.npy")


@pytest.mark.parametrize("text, expect", [
    ("1x3x224x224", "expected SHAPExTYPE=VALUES"),
    ("1x3xf33=0", "unknown element type 'f33'"),
    ("axbxf32=0", "the shape must be dimensions"),
    ("-1xf32=0", "negative dimension"),
    ("2x2xf32=1,2,3", "3 values for a 2x2xf32 tensor of 4 elements"),
    ("2xf32=1,x", "values must be f32 numbers"),
    ("2xi32=1.5,2", "values must be i32 numbers"),
    ("2xi8=1,300", "300 does not fit in i8"),
    ("2xu8=-1,3", "-1 does not fit in u8"),
    ("2xi1=yes,no", "values must be i1"),
    ("f32=", "0 values"),
])
def test_malformed(text: str, expect: str) -> None:
    with pytest.raises(UserError) as e:
        parse_input(text)
    assert expect in str(e.value) and "\n" not in str(e.value)


def test_format_like_iree() -> None:
    assert format_value(np.array(5.0, np.float32), "f32") == "f32=5"
    assert format_value(np.array([1, 4, 9, 16], np.float32), "f32") == "4xf32=1 4 9 16"
    assert format_value(np.array([[1, 2], [3, 4]], np.int32), "i32") == "2x2xi32=[1 2][3 4]"
    assert format_value(np.arange(8, dtype=np.float32).reshape(2, 2, 2), "f32") == \
        "2x2x2xf32=[[0 1][2 3]][[4 5][6 7]]"
    assert format_value(np.array([0.1, -2.5e-7, np.inf, np.nan], np.float32), "f32") == \
        "4xf32=0.1 -2.5e-07 inf nan"
    assert format_value(np.array([True, False]), "i1") == "2xi1=1 0"
    assert format_value(np.array([0x3F80, 0xC020], np.uint16), "bf16") == "2xbf16=1 -2.5"
    assert format_result(0, np.zeros((1, 2), np.float32), "f32") == "result[0]: hal.buffer_view\n1x2xf32=[0 0]"


def test_format_elides_long_tensors() -> None:
    assert format_value(np.arange(10, dtype=np.int32), "i32", max_elements=4) == "10xi32=0 1 2 3 ..."
    assert format_value(np.arange(1000, dtype=np.float32).reshape(1, 1000), "f32", 3) == \
        "1x1000xf32=[0 1 2 ...]"
    assert format_value(np.arange(6, dtype=np.int32).reshape(3, 2), "i32", 2) == "3x2xi32=[0 1]..."
    assert format_value(np.arange(6, dtype=np.int32).reshape(3, 2), "i32", 3) == "3x2xi32=[0 1][2 ...]..."
    assert format_value(np.arange(4, dtype=np.int32), "i32", 4) == "4xi32=0 1 2 3"


def test_write_npy_is_atomic(tmp_path: Path, monkeypatch) -> None:
    p = tmp_path / "out.npy"
    write_npy(str(p), np.arange(3, dtype=np.int32))
    np.testing.assert_array_equal(np.load(p), np.arange(3))

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "save", boom)
    with pytest.raises(OSError):
        write_npy(str(p), np.zeros(3))
    np.testing.assert_array_equal(np.load(p), np.arange(3))  # the old file is intact
    assert os.listdir(tmp_path) == ["out.npy"]
    with pytest.raises(UserError, match="cannot write"):
        write_npy(str(tmp_path / "no" / "dir.npy"), np.zeros(3))
