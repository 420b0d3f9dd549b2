"""The bundle format: round trips, atomic writes, and a one-line refusal for every bad bundle."""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from halbench.bundle import (
    BufferRange,
    DispatchStep,
    Manifest,
    random_weight,
    read_bundle,
    write_bundle,
)
from halbench.bundle.weights import f32_to_bf16
from halbench.errors import UserError
from tests.runtime import bundles as B


@pytest.fixture
def hbx(tmp_path: Path) -> Path:
    path = tmp_path / "model.hbx"
    B.build(path)
    return path


def _one_line(e: pytest.ExceptionInfo) -> str:
    msg = str(e.value)
    assert "\n" not in msg and msg
    return msg


def _rewrite(src: Path, dst: Path, manifest=None, drop: str | None = None,
             replace_member: tuple[str, bytes] | None = None, add: tuple[str, bytes] | None = None) -> Path:
    """Copy a bundle member by member, changing one thing (a well-formed zip, so only our
    checks can catch it)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            data = zin.read(name)
            if name == drop:
                continue
            if name == "manifest.json" and manifest is not None:
                data = json.dumps(manifest).encode()
            if replace_member and name == replace_member[0]:
                data = replace_member[1]
            zout.writestr(name, data)
        if add:
            zout.writestr(*add)
    return dst


def _doc(path: Path) -> dict:
    with zipfile.ZipFile(path) as z:
        return json.loads(z.read("manifest.json"))


# -- round trip and writing ------------------------------------------------------------------
def test_round_trip(hbx: Path) -> None:
    b = read_bundle(hbx)
    m, members = B.manifest()
    assert b.manifest == replace(m, members=b.manifest.members)
    assert Manifest.from_dict(b.manifest.to_dict()) == b.manifest
    assert set(b.manifest.members) == set(members)
    assert b.manifest.function("affine").signature() == "affine(x: 1000xf32) -> (y: 1000xf32, s: 4xf32, t: 1000xf32)"
    np.testing.assert_array_equal(b.weight(b.manifest.weights[0]), B.weight_w())


def test_manifest_json_matches_the_documented_layout(hbx: Path) -> None:
    d = _doc(hbx)
    assert d["format"] == "halbench-bundle" and d["version"] == 1
    assert {"buffers", "weights", "executables", "functions", "members"} <= set(d)
    step = d["functions"][0]["steps"][0]
    assert step["kind"] == "dispatch" and step["bindings"][0] == {"buffer": 0, "offset": 0, "length": 4000}
    v = d["executables"][0]["variants"][0]
    assert v["format"] == "local-v1" and v["member"] == "executables/0.0.json"
    assert v["entry"]["name"] == "main" and v["workgroups"] == [16, 1, 1]


def test_dynamic_shared_memory_round_trips_and_old_manifests_read_as_zero(hbx: Path, tmp_path: Path) -> None:
    d = _doc(hbx)
    assert "dynamic_shared_bytes" not in d["executables"][0]["variants"][0]["entry"]  # written only when set
    assert read_bundle(hbx).manifest.executables[0].variants[0].entry.dynamic_shared_bytes == 0
    d["executables"][0]["variants"][0]["entry"]["dynamic_shared_bytes"] = 196608
    b = read_bundle(_rewrite(hbx, tmp_path / "smem.hbx", manifest=d))
    entry = b.manifest.executables[0].variants[0].entry
    assert entry.dynamic_shared_bytes == 196608
    assert b.manifest.to_dict()["executables"][0]["variants"][0]["entry"]["dynamic_shared_bytes"] == 196608
    assert Manifest.from_dict(b.manifest.to_dict()) == b.manifest


def test_writes_are_deterministic(tmp_path: Path) -> None:
    B.build(tmp_path / "a.hbx")
    B.build(tmp_path / "b.hbx")
    assert (tmp_path / "a.hbx").read_bytes() == (tmp_path / "b.hbx").read_bytes()


def test_failed_write_leaves_the_old_file_and_no_temporaries(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "model.hbx"
    path.write_bytes(b"old")
    m, members = B.manifest()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(zipfile.ZipFile, "writestr", boom)
    with pytest.raises(OSError):
        write_bundle(path, m, members)
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["model.hbx"]


def test_write_refuses_a_broken_manifest_and_writes_nothing(tmp_path: Path) -> None:
    m, members = B.manifest()
    f = m.function("add")
    bad = replace(f, steps=(DispatchStep(3, (BufferRange(6), BufferRange(7), BufferRange(8, 256, 4000))),))
    with pytest.raises(UserError) as e:
        write_bundle(tmp_path / "x.hbx", replace(m, functions=(bad,)), members)
    assert "buffer 8" in _one_line(e)
    assert os.listdir(tmp_path) == []
    with pytest.raises(UserError, match="member name"):
        write_bundle(tmp_path / "x.hbx", m, {**members, "../evil": b""})
    with pytest.raises(UserError, match="does not list"):
        write_bundle(tmp_path / "x.hbx", m, {k: v for k, v in members.items() if k != "weights/w.bin"})
    assert os.listdir(tmp_path) == []
    with pytest.raises(UserError, match="cannot write bundle .*No such file or directory"):
        write_bundle(tmp_path / "no" / "x.hbx", m, members)


# -- refusals ----------------------------------------------------------------------------
def test_missing_and_non_zip_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such file") as e:
        read_bundle(tmp_path / "nope.hbx")
    _one_line(e)
    (tmp_path / "text.hbx").write_text("hello")
    with pytest.raises(UserError, match="not a valid .hbx file") as e:
        read_bundle(tmp_path / "text.hbx")
    assert "recompile" in _one_line(e)


def test_truncated(hbx: Path, tmp_path: Path) -> None:
    data = hbx.read_bytes()
    for cut in (len(data) // 2, len(data) - 10, 100):
        p = tmp_path / f"cut{cut}.hbx"
        p.write_bytes(data[:cut])
        with pytest.raises(UserError) as e:
            read_bundle(p)
        assert "recompile" in _one_line(e)


def test_flipped_byte_in_a_member(hbx: Path, tmp_path: Path) -> None:
    """A flipped byte anywhere in a member's data is refused, by the zip CRC or our sha256."""
    data = bytearray(hbx.read_bytes())
    with zipfile.ZipFile(hbx) as z:
        info = z.getinfo("weights/w.bin")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    for k in (0, 1234, info.compress_size - 1):
        flipped = bytearray(data)
        flipped[start + k] ^= 0x40
        p = tmp_path / "flipped.hbx"
        p.write_bytes(bytes(flipped))
        with pytest.raises(UserError) as e:
            read_bundle(p)
        msg = _one_line(e)
        assert "corrupted" in msg and "weights/w.bin" in msg and "recompile" in msg


def test_hash_mismatch(hbx: Path, tmp_path: Path) -> None:
    p = _rewrite(hbx, tmp_path / "bad.hbx", replace_member=("executables/0.0.json", b"{}"))
    with pytest.raises(UserError) as e:
        read_bundle(p)
    assert _one_line(e) == ("bundle bad.hbx is corrupted: member executables/0.0.json fails its sha256 "
                            "check; recompile it")


def test_wrong_version_and_format(hbx: Path, tmp_path: Path) -> None:
    d = _doc(hbx)
    with pytest.raises(UserError, match="format version 2, but this halbench reads version 1") as e:
        read_bundle(_rewrite(hbx, tmp_path / "v2.hbx", manifest={**d, "version": 2}))
    _one_line(e)
    with pytest.raises(UserError, match="not a halbench bundle"):
        read_bundle(_rewrite(hbx, tmp_path / "f.hbx", manifest={**d, "format": "other"}))


def test_missing_and_unlisted_members(hbx: Path, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="incomplete: member executables/2.0.json is missing") as e:
        read_bundle(_rewrite(hbx, tmp_path / "m.hbx", drop="executables/2.0.json"))
    _one_line(e)
    with pytest.raises(UserError, match="no manifest.json"):
        read_bundle(_rewrite(hbx, tmp_path / "n.hbx", drop="manifest.json"))
    with pytest.raises(UserError, match="does not hash"):
        read_bundle(_rewrite(hbx, tmp_path / "x.hbx", add=("evil.py", b"print(1)")))


def test_manifest_not_json(hbx: Path, tmp_path: Path) -> None:
    p = _rewrite(hbx, tmp_path / "j.hbx")
    with zipfile.ZipFile(hbx) as zin, zipfile.ZipFile(p, "w") as zout:
        for n in zin.namelist():
            zout.writestr(n, b"{not json" if n == "manifest.json" else zin.read(n))
    with pytest.raises(UserError, match="manifest.json is not valid JSON") as e:
        read_bundle(p)
    _one_line(e)


def _steps(d: dict, fn: int = 0) -> list:
    return d["functions"][fn]["steps"]


@pytest.mark.parametrize("mutate, expect", [
    (lambda d: _steps(d)[0].update(executable=99), "dispatches executable 99"),
    (lambda d: _steps(d)[0]["bindings"][0].update(buffer=42), "buffer 42"),
    (lambda d: _steps(d)[0]["bindings"][0].update(length=5000), "has only 4000 B"),
    (lambda d: _steps(d)[0]["bindings"][2].update(offset=4100), "not a multiple of 256"),
    (lambda d: _steps(d)[0]["bindings"].pop(), "passes 2 bindings"),
    (lambda d: _steps(d)[0].pop("executable"), "has no 'executable'"),
    (lambda d: _steps(d)[0].update(kind="jump"), "unknown kind 'jump'"),
    (lambda d: _steps(d)[6].update(nbytes=99999), "copy source"),
    (lambda d: d["functions"][0]["inputs"][0].update(dtype="f8"), "unknown dtype"),
    (lambda d: d["functions"][0]["outputs"][0].update(shape=[2000]), "tensor 'y'"),
    (lambda d: d["buffers"][0].update(nbytes=-1), "must be positive"),
    (lambda d: d["buffers"].append(dict(d["buffers"][0])), "declared twice"),
    (lambda d: d["weights"][0].update(buffer=77), "weight 'w'"),
    (lambda d: d["weights"][1].update(init={"distribution": "cauchy"}), "cauchy"),
    (lambda d: d["executables"][0]["variants"][0].update(constants=[1]), "1 constants"),
    (lambda d: d["executables"][0]["variants"][0].update(workgroups=[0, 1, 1]), "positive"),
    (lambda d: d["executables"][0]["variants"][0]["entry"].update(dynamic_shared_bytes=-1), "dynamic_shared_bytes"),
    (lambda d: d["executables"][0]["variants"][0]["entry"].update(dynamic_shared_bytes=1 << 21),
     "dynamic_shared_bytes"),
    (lambda d: d["executables"][0]["variants"][0]["entry"].update(shared_bytes=4096), "shared_bytes"),
    (lambda d: d["executables"][0].update(variants=[]), "no variants"),
    (lambda d: d.update(functions=[d["functions"][0], d["functions"][0]]), "declared twice"),
    (lambda d: d.update(buffers="nope"), "must be list"),
])
def test_structural_problems(hbx: Path, tmp_path: Path, mutate, expect: str) -> None:
    d = _doc(hbx)
    mutate(d)
    p = _rewrite(hbx, tmp_path / "s.hbx", manifest=d)
    with pytest.raises(UserError) as e:
        read_bundle(p)
    msg = _one_line(e)
    assert msg.startswith("bundle s.hbx has an invalid manifest: ") and msg.endswith("; recompile it")
    assert expect in msg


def test_weight_member_of_the_wrong_size(hbx: Path, tmp_path: Path) -> None:
    d = _doc(hbx)
    import hashlib

    d["members"]["weights/w.bin"] = hashlib.sha256(b"1234").hexdigest()
    p = _rewrite(hbx, tmp_path / "w.hbx", manifest=d, replace_member=("weights/w.bin", b"1234"))
    with pytest.raises(UserError, match="needs 4000 B, but member weights/w.bin has 4 B"):
        read_bundle(p)


# -- weights -------------------------------------------------------------------------------
def test_random_weights_are_seeded_and_typed() -> None:
    a = random_weight("f32", (3, 4), 5, {"distribution": "normal", "scale": 2.0})
    assert a.dtype == np.float32 and a.shape == (3, 4)
    ref = (np.random.default_rng(5).standard_normal((3, 4)) * 2.0).astype(np.float32)
    np.testing.assert_array_equal(a, ref)
    u = random_weight("f16", (100,), 1, {"distribution": "uniform", "low": 2, "high": 3})
    assert u.dtype == np.float16 and 2 <= u.min() and u.max() <= 3
    i = random_weight("i8", (1000,), 1, {"distribution": "uniform", "low": -500, "high": 500})
    assert i.dtype == np.int8 and i.min() == -128 and i.max() == 127
    assert random_weight("i1", (10,), 1).dtype == np.bool_
    assert random_weight("bf16", (10,), 1).dtype == np.uint16
    assert not np.array_equal(random_weight("f32", (10,), 1), random_weight("f32", (10,), 2))


def test_bf16_rounds_to_nearest_even() -> None:
    x = np.array([1.0, -2.5, 1.0 + 2**-8, 1.0 + 3 * 2**-8, np.inf, np.nan], dtype=np.float32)
    assert list(f32_to_bf16(x)) == [0x3F80, 0xC020, 0x3F80, 0x3F82, 0x7F80, 0x7FC0]




# -- hostile bundles: bounded reads, linear checks ----------------------------------------
def _tiny_bundle(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from halbench.bundle import read_bundle
    from halbench.compiler import CompileOptions, compile_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    compile_model(tmp_path / "m.onnx", CompileOptions()).write(tmp_path / "m.hbx")
    return read_bundle(tmp_path / "m.hbx")


def _zip_with(path, members: dict[str, bytes], manifest: dict) -> None:
    import json
    import zipfile

    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", json.dumps(manifest))
        for n, d in members.items():
            z.writestr(n, d)


def test_a_member_that_inflates_past_its_limit_is_refused_without_reading_it(tmp_path, monkeypatch) -> None:
    import json

    from halbench.bundle import read_bundle
    from halbench.bundle.archive import sha256

    pytest.importorskip("onnx")
    b = _tiny_bundle(tmp_path)
    doc = json.loads(b.manifest.to_json()) if hasattr(b.manifest, "to_json") else b.manifest.to_dict()
    exe = next(iter(b.manifest.members))
    bomb = bytes(64 << 20)  # 64 MiB of zeros: deflates to ~64 KiB
    doc["members"][exe] = sha256(bomb)
    members = dict(b.members)
    members[exe] = bomb
    _zip_with(tmp_path / "bomb.hbx", members, doc)
    monkeypatch.setenv("HALBENCH_BUNDLE_MAX_EXECUTABLE_BYTES", str(1 << 20))
    with pytest.raises(UserError, match="would expand to 67108864 B, more than 1048576 B") as e:
        read_bundle(tmp_path / "bomb.hbx")
    assert "\n" not in str(e.value)


def test_many_members_are_checked_in_linear_time(tmp_path) -> None:
    import zipfile

    from halbench.bundle import read_bundle

    with zipfile.ZipFile(tmp_path / "many.hbx", "w") as z:
        for i in range(20000):
            z.writestr(f"m/{i}", b"")
        z.writestr("m/7", b"")
    with pytest.raises(UserError, match="member m/7 appears twice"):
        read_bundle(tmp_path / "many.hbx")
