"""Cases from the hardening audit that each took the process down or ran it out of memory:
now one line, a documented exit code, and nothing allocated first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
onnx = pytest.importorskip("onnx")
pytest.importorskip("iree.compiler")
from onnx import TensorProto, helper  # noqa: E402


def _halbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "halbench", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=cwd)


def _one_line(r: subprocess.CompletedProcess, code: int, needle: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in r.stderr, r.stderr


def test_a_zero_size_input_compiles_to_an_empty_result_not_a_floating_point_exception(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("data", TensorProto.FLOAT, ["a", 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = helper.make_tensor("s", TensorProto.INT64, [3], [3, 4, 0])
    g = helper.make_graph([helper.make_node("Constant", [], ["shape"], value=shape),
                           helper.make_node("Reshape", ["data", "shape"], ["y"], allowzero=1)], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "rz.onnx")
    r = _halbench("compile", str(tmp_path / "rz.onnx"), "-o", str(tmp_path / "rz.hbx"), "--input-shape",
                  "data=0x3x4")
    assert r.returncode == 0, r.stderr
    r = _halbench("run-module", "--device=local-sync://", f"--module={tmp_path / 'rz.hbx'}", "--input=0x3x4xf32")
    assert r.returncode == 0, r.stderr
    assert "3x4x0xf32" in r.stdout, r.stdout


def test_an_empty_tensor_a_kernel_would_compute_with_is_refused_in_one_line(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])
    e = helper.make_tensor_value_info("e", TensorProto.INT64, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Gather", ["x", "e"], ["c"]),
                           helper.make_node("Relu", ["c"], ["y"])], "g", [x, e], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "ce.onnx")
    r = _halbench("compile", str(tmp_path / "ce.onnx"), "-o", str(tmp_path / "ce.hbx"), "--input-shape", "e=0")
    _one_line(r, 1, "empty tensor")
    assert not (tmp_path / "ce.hbx").exists()


def test_a_tiny_onnx_file_asking_for_13_gib_is_refused_before_allocating(tmp_path: Path) -> None:
    s = helper.make_tensor("s", TensorProto.INT64, [3], [2048, 2048, 800])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Constant", [], ["shp"], value=s),
                           helper.make_node("ConstantOfShape", ["shp"], ["y"])], "g", [], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "cos.onnx")
    assert (tmp_path / "cos.onnx").stat().st_size < 200
    _one_line(_halbench("compile", str(tmp_path / "cos.onnx"), "-o", str(tmp_path / "c.hbx")), 1, "12.5 GiB")


def test_deeply_nested_results_json_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    _one_line(_halbench("report", str(tmp_path / "deep.json"), "-o", str(tmp_path / "r.html")), 1, "nested too deeply")


def _mutated_bundle(tmp_path: Path, change) -> Path:
    from halbench.compiler import CompileOptions, compile_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    compile_model(tmp_path / "m.onnx", CompileOptions()).write(tmp_path / "m.hbx")
    z = zipfile.ZipFile(tmp_path / "m.hbx")
    m = json.loads(z.read("manifest.json"))
    change(m)
    out = tmp_path / "bad.hbx"
    with zipfile.ZipFile(out, "w") as w:
        w.writestr("manifest.json", json.dumps(m))
        for n in z.namelist():
            if n != "manifest.json":
                w.writestr(n, z.read(n))
    return out


def test_a_2_to_the_70_byte_buffer_is_refused(tmp_path: Path) -> None:
    bad = _mutated_bundle(tmp_path, lambda m: m["buffers"][0].update(nbytes=2**70))
    _one_line(_halbench("run-module", "--device=local-sync://", f"--module={bad}", "--input=2x3xf32=1"), 1,
              "more than any device holds")


def test_errors_are_one_line_and_debug_shows_the_traceback(tmp_path: Path) -> None:
    """Without --debug an error is one line; with it, the traceback is there for a bug report."""
    r = _halbench("run-module", "--device=local-sync://", "--module=/dev/null", "--input=1xf32=1")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    r = _halbench("--debug", "run-module", "--device=nosuch://", "--module=/dev/null")
    assert r.returncode != 0 and "Traceback" in r.stderr  # --debug: the traceback, for a bug report


def _two_matmuls(tmp_path: Path) -> Path:
    """x @ w @ w: the intermediate lives in the transient buffer (buffer 3, 128 B used)."""
    import numpy as np
    from onnx import numpy_helper

    from halbench.compiler import CompileOptions, compile_model

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
    w = numpy_helper.from_array(np.ones((8, 8), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"]),
                           helper.make_node("MatMul", ["t", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "mm.onnx")
    compile_model(tmp_path / "mm.onnx", CompileOptions(target_devices=("local", "vulkan"))).write(tmp_path / "mm.hbx")
    return tmp_path / "mm.hbx"


def _rewrite_manifest(src: Path, dst: Path, change) -> Path:
    z = zipfile.ZipFile(src)
    m = json.loads(z.read("manifest.json"))
    change(m)
    with zipfile.ZipFile(dst, "w") as w:
        w.writestr("manifest.json", json.dumps(m))
        for n in z.namelist():
            if n != "manifest.json":
                w.writestr(n, z.read(n))
    return dst


def _shrink_transient(m: dict) -> None:
    (t,) = [b for b in m["buffers"] if b["kind"] == "transient"]
    t["nbytes"] = 64
    for s in m["functions"][0]["steps"]:
        for r in s.get("bindings", []):
            if r["buffer"] == t["id"]:
                r["length"] = 64


def test_a_schedule_with_smaller_transient_ranges_than_its_kernels_touch_is_refused(tmp_path: Path) -> None:
    hbx = _two_matmuls(tmp_path)
    bad = _rewrite_manifest(hbx, tmp_path / "small.hbx", _shrink_transient)
    for dev in ("local-sync://", "vulkan://"):
        r = _halbench("run-module", f"--device={dev}", f"--module={bad}", "--input=4x8xf32=1")
        _one_line(r, 1, "binds 64 B of buffer 3, but the kernel touches 128 B")
    # a bundle from before min_bytes was recorded still loads (and the real one runs)
    old = _rewrite_manifest(hbx, tmp_path / "old.hbx",
                            lambda m: [s.pop("min_bytes", None) for s in m["functions"][0]["steps"]])
    for path in (hbx, old):
        r = _halbench("run-module", "--device=local-sync://", f"--module={path}", "--input=4x8xf32=1")
        assert r.returncode == 0 and "64" in r.stdout, (r.stdout, r.stderr)


@pytest.mark.parametrize("change, needle", [
    (lambda m: m["functions"][0]["steps"][0].update(min_bytes=[1]), "has 1 sizes for 3 bindings"),
    (lambda m: m["functions"][0]["steps"][0]["bindings"][0].update(lenght=8), "unknown key 'lenght'"),
    (lambda m: m["buffers"][0].update(nbytes="128"), "buffers[0].nbytes: must be int, got str"),
    (lambda m: m["weights"][0].update(seed=-1, storage="random"), "weights[0].seed"),
])
def test_malformed_manifests_are_one_line_naming_the_key(tmp_path: Path, change, needle: str) -> None:
    hbx = _two_matmuls(tmp_path)
    bad = _rewrite_manifest(hbx, tmp_path / "bad.hbx", change)
    r = _halbench("run-module", "--device=local-sync://", f"--module={bad}", "--input=4x8xf32=1")
    _one_line(r, 1, needle)


_TINY_SUITE = """name: tiny
devices: ['local-sync://']
settings: {warmup: 0, min_time_s: 0.01, min_samples: 2, max_samples: 5}
micro:
  - {name: lat, kind: latency-dispatch}
"""


@pytest.mark.parametrize("pattern, code", [("cuda://3", 1), ("nosuchdriver://0", 1), ("cuda://*", 0),
                                           ("hip://*", 0)])
def test_a_named_missing_device_is_an_error_exit_a_wildcard_is_a_note(tmp_path: Path, pattern: str,
                                                                        code: int) -> None:
    from halbench.drivers import query_available_drivers

    driver = pattern.partition("://")[0]
    if any(s.name == driver and s.available for s in query_available_drivers()):
        pytest.skip(f"{driver} is available here: cannot test a missing device with it")
    (tmp_path / "s.yaml").write_text(_TINY_SUITE)
    out = tmp_path / "r.json"
    r = _halbench("run-suite", str(tmp_path / "s.yaml"), "-o", str(out), "--no-progress",
                  "--device", "local-sync://", "--device", pattern)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    doc = json.loads(out.read_text())  # the devices that are here are measured and kept
    assert {b["device"]: b["status"] for b in doc["benchmarks"]}["local-sync://0"] == "ok"
    if code:
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and pattern in errors[0] and "named explicitly" in errors[0], r.stderr
        assert [b["status"] for b in doc["benchmarks"] if b["device"] == pattern] == ["skipped"]
    else:
        assert [b["device"] for b in doc["benchmarks"]] == ["local-sync://0"]


def _results(tmp_path: Path) -> Path:
    from halbench.bench.results import write_results
    from tests.reports.make_results import make_results

    return write_results(tmp_path / "r.json", make_results(seed=1))


def _limited(nbytes: int):
    """A child whose files cannot grow past ``nbytes`` (RLIMIT_FSIZE): a full disk, portably and
    without root (Python ignores SIGXFSZ, so a write past it fails with EFBIG)."""
    import resource

    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))


@pytest.mark.parametrize("cmd, code", [
    (["report", "{r}", "-o", "{out}"], 1),
    (["trace", "{r}", "-o", "{out}"], 1),
    (["gate", "--baseline", "{r}", "--candidate", "{r}", "--junit", "{out}"], 2),
])
def test_a_full_disk_is_one_line_and_keeps_the_old_file(tmp_path: Path, cmd: list[str], code: int) -> None:
    r = _results(tmp_path)
    out = tmp_path / "out.file"
    out.write_text("old")
    args = [a.format(r=r, out=out) for a in cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "halbench", *args], capture_output=True, text=True, timeout=300,
                       env=env, preexec_fn=_limited(2048))
    assert p.returncode == code, (p.stdout, p.stderr)
    errors = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(errors) == 1 and "Traceback" not in p.stderr and "File too large" in errors[0], p.stderr
    if cmd[0] == "gate":  # the gate then writes its (small) "unusable" report, whole, for CI to show
        import xml.etree.ElementTree as ET

        assert ET.parse(out).getroot().find("testsuite").get("errors") == "1"
    else:
        assert out.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.file", "r.json"]  # no temporary left


def test_gate_outputs_that_would_destroy_an_input_or_need_a_folder_write_nothing(tmp_path: Path) -> None:
    r = _results(tmp_path)
    before = r.read_bytes()
    p = _halbench("gate", "--baseline", str(r), "--candidate", str(r), "--junit", str(r))
    _one_line(p, 2, "is also an input")
    assert r.read_bytes() == before
    p = _halbench("gate", "--baseline", str(r), "--candidate", str(r), "--summary", str(tmp_path / "no" / "s.md"))
    _one_line(p, 2, "does not exist")
    assert not (tmp_path / "no").exists()


def test_compile_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), src)
    before = src.read_bytes()
    _one_line(_halbench("compile", str(src), "-o", str(src)), 1, "is also an input")
    assert src.read_bytes() == before


@pytest.mark.parametrize("uri", ["vulkan://²", "vulkan://0\u200b", "cuda://99999999999999999999"])
def test_odd_device_uris_are_one_line(tmp_path: Path, uri: str) -> None:
    r = _halbench("run-module", f"--device={uri}", "--module=/dev/null", "--input=1xf32=1")
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_manifest_that_inflates_past_its_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """The audit's 1.6 MB bundle whose manifest expands to 1.5 GB, at a smaller scale: the cap
    (HALBENCH_BUNDLE_MAX_MANIFEST_BYTES) is checked against the zip header and while reading."""
    bomb = tmp_path / "bomb.hbx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("manifest.json", '{"format": "halbench-bundle", "version": 1, "created_by": "' +
                   " " * (8 << 20) + '"}')
    assert bomb.stat().st_size < 100_000
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HALBENCH_BUNDLE_MAX_MANIFEST_BYTES": str(1 << 20)}
    r = subprocess.run([sys.executable, "-m", "halbench", "run-module", "--device=local-sync://",
                        f"--module={bomb}", "--input=1xf32=1"], capture_output=True, text=True, timeout=300, env=env)
    _one_line(r, 1, "more than 1048576 B")


def test_zero_medians_render_and_compare_without_dividing_by_zero(tmp_path: Path) -> None:
    from halbench.bench.results import write_results
    from tests.reports.make_results import make_results

    doc = make_results(seed=1)
    for b in doc["benchmarks"]:
        if b["status"] == "ok":
            b["samples"]["device_ms"] = [0.0] * len(b["samples"]["device_ms"])
            b["samples"]["host_ms"] = [0.0] * len(b["samples"]["host_ms"])
    zero = write_results(tmp_path / "zero.json", doc)
    base = write_results(tmp_path / "base.json", make_results(seed=2))
    r = _halbench("report", str(zero), str(base), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    r = _halbench("compare", str(base), str(zero), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "Infinity" not in r.stdout and "NaN" not in r.stdout
    json.loads(r.stdout)


@pytest.mark.parametrize("settings, needle", [("{repetitions: 0}", "settings.repetitions"),
                                              ("{max_time_s: .nan}", "must be a finite number"),
                                              ("{repetitions: abc}", "settings.repetitions")])
def test_a_suite_that_would_do_nothing_or_fail_at_the_write_is_refused_keeping_old_results(
        tmp_path: Path, settings: str, needle: str) -> None:
    (tmp_path / "s.yaml").write_text(_TINY_SUITE.replace("settings: {", f"settings: {{{settings[1:-1]}, "))
    out = tmp_path / "r.json"
    out.write_text("old results")
    r = _halbench("run-suite", str(tmp_path / "s.yaml"), "-o", str(out), "--no-progress")
    _one_line(r, 2, needle)
    assert out.read_text() == "old results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "s.yaml"]


def test_compiling_where_the_mlir_bindings_are_missing_is_one_line_naming_the_extra(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """A machine that only runs bundles (the GPU machine) has no iree-base-compiler: compile and
    check say what to install instead of exiting 3 ("a bug in halbench")."""
    from click.testing import CliRunner

    from halbench.cli import main

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                                opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "r.onnx")
    for name in ("iree.compiler", "iree.compiler.ir"):
        monkeypatch.setitem(sys.modules, name, None)  # what `import` sees where the wheel is absent
    for args in (["compile", str(tmp_path / "r.onnx"), "-o", str(tmp_path / "r.hbx")],
                 ["check", str(tmp_path / "r.onnx")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1, (args, r.exit_code, r.output)
        assert "pip install 'halbench[compiler]'" in r.output and "Traceback" not in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1, r.output
    assert not (tmp_path / "r.hbx").exists()
