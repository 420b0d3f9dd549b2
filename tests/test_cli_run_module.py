"""``halbench run-module`` and ``halbench compile``: outputs, files, and one-line failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import tests.hal.kernels_local  # noqa: F401  (registers the test.* kernels in this process)
from halbench.cli import main
from tests.runtime import bundles as B

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hbx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "model.hbx"
    B.build(path)
    return path


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli1") / "add.hbx"
    B.single_function(path)
    return path


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _values(line: str) -> np.ndarray:
    """The numbers of a printed ``1000xf32=...`` line."""
    body = line.split("=", 1)[1].replace("[", " ").replace("]", " ")
    return np.array([float(t) for t in body.split()], dtype=np.float32)


def _fails(r, expect: str) -> str:
    assert r.exit_code == 1, r.output
    err = r.stderr.strip()
    assert "\n" not in err and "Traceback" not in err and err.startswith("halbench: error: ")
    assert expect in err, err
    assert r.stdout == ""
    return err


@pytest.mark.parametrize("uri", ["local-sync://", "local-task://"])
def test_prints_like_iree(hbx: Path, uri: str, tmp_path: Path) -> None:
    x = B.x_input()
    np.save(tmp_path / "x.npy", x)
    r = run("run-module", f"--device={uri}", f"--module={hbx}", "--function=affine", f"--input=@{tmp_path}/x.npy")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0] == "EXEC @affine"
    assert lines[1::2] == ["result[0]: hal.buffer_view", "result[1]: hal.buffer_view", "result[2]: hal.buffer_view"]
    assert lines[2].startswith("1000xf32=") and lines[4].startswith("4xf32=")
    for line, want in zip(lines[2::2], B.expected_affine(x)):
        np.testing.assert_array_equal(_values(line), want)


def test_outputs_to_npy_and_iree_input_forms(hbx: Path, tmp_path: Path) -> None:
    y, t = tmp_path / "y.npy", tmp_path / "t.npy"
    r = run("run-module", "--device=local-sync://", f"--module={hbx}", "--function=affine",
            "--input=1000xf32=3", f"--output=@{y}", "--output=-", f"--output=@{t}")
    assert r.exit_code == 0, r.output
    x = np.full(B.N, 3, np.float32)
    want = B.expected_affine(x)
    np.testing.assert_array_equal(np.load(y), want[0])
    np.testing.assert_array_equal(np.load(t), want[2])
    assert f"result[0]: written to {y}" in r.stdout and "result[1]: hal.buffer_view" in r.stdout
    values = ",".join(str(i % 5) for i in range(B.N))
    r = run("run-module", "--device=local-sync://", f"--module={hbx}", "--function=add",
            f"--input=1000xf32={values}", "--input=1000xf32=0.5", "--print-max-element-count=3")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[2] == "1000xf32=0.5 1.5 2.5 ..."


def test_function_may_be_omitted_with_one_function(single: Path, hbx: Path) -> None:
    r = run("run-module", "--device=local-task://", f"--module={single}", "--input=1000xf32=1",
            "--input=1000xf32=2")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[:2] == ["EXEC @add", "result[0]: hal.buffer_view"]
    np.testing.assert_array_equal(_values(r.stdout.splitlines()[2]), np.full(B.N, 3, np.float32))
    _fails(run("run-module", "--device=local-sync://", f"--module={hbx}", "--input=1000xf32=1"),
           "the module has 3 functions (affine, add, rand); choose one with --function")


@pytest.mark.parametrize("args, expect", [
    (["--function=nope", "--input=1000xf32=1"], "the module has no function 'nope'; it has: affine, add, rand"),
    (["--function=add", "--input=1000xf32=1"], "function 'add' takes 2 inputs (a: 1000xf32, b: 1000xf32), got 1"),
    (["--function=affine", "--input=999xf32=1"], "input 'x' of 'affine' must have shape 1000xf32, got shape 999xf32"),
    (["--function=affine", "--input=1000xi32=1"], "input 'x' of 'affine' must be 1000xf32, got 1000xi32"),
    (["--function=affine", "--input=1000xf32=1,2"], "malformed --input '1000xf32=1,2': 2 values"),
    (["--function=affine", "--input=1000xf32"], "malformed --input '1000xf32'"),
    (["--function=affine", "--input=1000xq9=1"], "unknown element type 'q9'"),
    (["--function=affine", "--input=@missing.npy"], "file missing.npy not found"),
    (["--function=affine", "--input=1000xf32=1", "--output=out.txt"], "malformed --output 'out.txt'"),
    (["--function=affine", "--input=1000xf32=1", "--output=-", "--output=-", "--output=-", "--output=-"],
     "5 --output given, but 'affine' has 3 results"),
])
def test_bad_input_one_line_and_no_output_file(hbx: Path, tmp_path: Path, args: list[str], expect: str,
                                              monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out.npy"
    r = run("run-module", "--device=local-sync://", f"--module={hbx}", *args, f"--output=@{out}")
    _fails(r, expect)
    assert os.listdir(tmp_path) == []


def test_bad_bundles(hbx: Path, tmp_path: Path) -> None:
    data = hbx.read_bytes()
    (tmp_path / "cut.hbx").write_bytes(data[: len(data) // 2])
    _fails(run("run-module", "--device=local-sync://", f"--module={tmp_path}/cut.hbx", "--input=1000xf32=1"),
           "bundle cut.hbx is not a valid .hbx file")
    with zipfile.ZipFile(hbx) as zin, zipfile.ZipFile(tmp_path / "v9.hbx", "w") as zout:
        for n in zin.namelist():
            d = zin.read(n)
            if n == "manifest.json":
                d = json.dumps({**json.loads(d), "version": 9}).encode()
            zout.writestr(n, d)
    _fails(run("run-module", "--device=local-sync://", f"--module={tmp_path}/v9.hbx", "--input=1000xf32=1"),
           "bundle v9.hbx has format version 9, but this halbench reads version 1; recompile it")
    with zipfile.ZipFile(hbx) as zin, zipfile.ZipFile(tmp_path / "m.hbx", "w") as zout:
        for n in zin.namelist():
            if n != "weights/w.bin":
                zout.writestr(n, zin.read(n))
    _fails(run("run-module", "--device=local-sync://", f"--module={tmp_path}/m.hbx", "--function=affine",
               "--input=1000xf32=1"), "member weights/w.bin is missing")
    flipped = bytearray(data)
    with zipfile.ZipFile(hbx) as z:
        info = z.getinfo("weights/w.bin")
    flipped[info.header_offset + 30 + len(info.filename) + len(info.extra) + 17] ^= 1
    (tmp_path / "flip.hbx").write_bytes(bytes(flipped))
    _fails(run("run-module", "--device=local-sync://", f"--module={tmp_path}/flip.hbx", "--function=affine",
               "--input=1000xf32=1"), "bundle flip.hbx is corrupted: member weights/w.bin")
    _fails(run("run-module", "--device=local-sync://", f"--module={tmp_path}/none.hbx", "--input=f32=1"),
           "no such file")
    _fails(run("run-module", "--device=nodriver://", f"--module={hbx}", "--function=affine",
               "--input=1000xf32=1"), "unknown driver 'nodriver'")


def test_real_subprocess(hbx: Path, tmp_path: Path) -> None:
    """The installed entry point in a fresh process (the test kernels registered first)."""
    boot = "import sys, tests.hal.kernels_local; from halbench.cli import main; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "y.npy"
    cmd = [sys.executable, "-c", boot, "run-module", "--device=local-task://", f"--module={hbx}",
           "--function=rand", "--input=1000xf32=2", f"--output=@{out}"]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["EXEC @rand", f"result[0]: written to {out}"]
    np.testing.assert_array_equal(np.load(out), B.expected_rand(np.full(B.N, 2, np.float32)))
    bad = [*cmd[:-2], "--input=1000xf32=2,x", f"--output=@{out}.2.npy"]
    r = subprocess.run(bad, check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().startswith("halbench: error: malformed --input") and "\n" not in r.stderr.strip()
    assert not Path(f"{out}.2.npy").exists()


# -- compile ---------------------------------------------------------------------------------
def _fake_compiler(monkeypatch, fail: Exception | None = None) -> list:
    """Stand in for halbench.compiler.compile.compile_model (tested by the compiler's own tests),
    and for its file checks (frontend.preflight); in this process (HALBENCH_ISOLATE=0), where the
    stand-in is."""
    comp = pytest.importorskip("halbench.compiler.compile")
    from halbench.bundle import write_bundle
    from halbench.compiler import frontend

    calls = []

    class Result:
        def __init__(self) -> None:
            self.manifest, self.members = B.manifest()
            self.statistics = {"dispatches": 5}
            self.notes: list[str] = []

        def write(self, path) -> None:
            write_bundle(path, self.manifest, self.members)

    def fake(path, options):
        calls.append((path, options))
        if fail:
            raise fail
        return Result()

    monkeypatch.setattr(comp, "compile_model", fake)
    monkeypatch.setattr(frontend, "preflight", lambda path: path)
    monkeypatch.setenv("HALBENCH_ISOLATE", "0")
    return calls


def test_compile_writes_a_bundle_run_module_runs(tmp_path: Path, monkeypatch) -> None:
    calls = _fake_compiler(monkeypatch)
    out = tmp_path / "m.hbx"
    r = run("compile", "model.onnx", "-o", str(out), "--target-device=local", "--weights=random",
            "--input-shape", "input=1x3x8x8", "--statistics")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"dispatches": 5}
    path, opts = calls[0]
    assert path == "model.onnx" and opts.weights == "random" and tuple(opts.target_devices) == ("local",)
    assert dict(opts.input_shapes) == {"input": (1, 3, 8, 8)}
    r = run("run-module", "--device=local-sync://", f"--module={out}", "--function=add",
            "--input=1000xf32=1", "--input=1000xf32=2")
    assert r.exit_code == 0 and "1000xf32=3 3 3" in r.stdout


def test_compile_failures_leave_no_file(tmp_path: Path, monkeypatch) -> None:
    from halbench.errors import CompileError

    _fake_compiler(monkeypatch, CompileError("unsupported op 'onnx.Foo' at node 3; supported: Conv, ..."))
    out = tmp_path / "m.hbx"
    _fails(run("compile", "model.onnx", "-o", str(out)), "unsupported op 'onnx.Foo'")
    _fails(run("compile", "model.onnx", "-o", str(out), "--input-shape", "input=1xax3"),
           "malformed --input-shape 'input=1xax3'")
    assert os.listdir(tmp_path) == []


def test_a_raw_input_file_is_read_only_as_far_as_its_prefix_says(tmp_path) -> None:
    """--input=1x64xf32=@/dev/zero must not read gigabytes: the prefix bounds the read."""
    import pytest as _pytest

    from halbench.errors import UserError
    from halbench.runtime.io import parse_input

    with _pytest.raises(UserError, match="has more than 256 B, and the prefix needs 256 B"):
        parse_input("1x64xf32=@/dev/zero")
    raw = tmp_path / "x.bin"
    raw.write_bytes(bytes(256))
    assert parse_input(f"1x64xf32=@{raw}").shape == (1, 64)
