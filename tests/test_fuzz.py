"""Fuzzing the inputs halbench reads (bundles, results, suites, run-module values) with
hypothesis: whatever the bytes, the answer is a result or a one-line HalbenchError, never
another exception, a hang or a partial file. CI runs a bounded number of examples; the
``fuzz`` marker with HALBENCH_FUZZ_EXAMPLES=N runs more (a nightly job)."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from halbench.errors import HalbenchError

pytestmark = pytest.mark.fuzz
EXAMPLES = int(os.environ.get("HALBENCH_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])


def _one_line(e: BaseException) -> None:
    assert isinstance(e, HalbenchError), f"{type(e).__name__}: {e}"
    assert "\n" not in str(e) and str(e), repr(e)


@pytest.fixture(scope="module")
def good_bundle(tmp_path_factory) -> bytes:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("iree.compiler")
    from onnx import TensorProto, helper, numpy_helper

    from halbench.compiler import CompileOptions, compile_model

    d = tmp_path_factory.mktemp("fz")
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), d / "m.onnx")
    compile_model(d / "m.onnx", CompileOptions(target_devices=("local",))).write(d / "m.hbx")
    return (d / "m.hbx").read_bytes()


def _rezip(data: bytes, member: str, new: bytes) -> bytes:
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in src.infolist():
            z.writestr(info, new if info.filename == member else src.read(info))
    return out.getvalue()


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 10**9), st.integers(1, 255)), min_size=1, max_size=8),
       cut=st.one_of(st.none(), st.integers(0, 10**9)))
@example(flips=[(6740373, 1)], cut=None)  # found here: the "encrypted" flag bit of a stored member
def test_damaged_bundles_are_refused_in_one_line(good_bundle: bytes, tmp_path_factory, flips, cut) -> None:
    from halbench.bundle import read_bundle

    data = bytearray(good_bundle)
    for pos, x in flips:
        data[pos % len(data)] ^= x
    if cut is not None:
        data = data[: cut % len(data)]
    p = tmp_path_factory.mktemp("b") / "x.hbx"
    p.write_bytes(bytes(data))
    try:
        read_bundle(p)
    except Exception as e:  # noqa: BLE001 - the assertion is on what it is
        _one_line(e)


@FUZZ
@given(doc=st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                        max_leaves=30),
       key=st.sampled_from(["functions", "buffers", "executables", "weights", "members", "version", "format"]))
def test_hostile_manifests_with_valid_hashes_are_refused(good_bundle: bytes, tmp_path_factory, doc, key) -> None:
    from halbench.bundle import read_bundle

    manifest = json.loads(zipfile.ZipFile(io.BytesIO(good_bundle)).read("manifest.json"))
    manifest[key] = doc
    p = tmp_path_factory.mktemp("m") / "x.hbx"
    p.write_bytes(_rezip(good_bundle, "manifest.json", json.dumps(manifest).encode()))
    try:
        read_bundle(p)
    except Exception as e:  # noqa: BLE001
        _one_line(e)


@FUZZ
@given(doc=st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=10), c, max_size=4),
                        max_leaves=40),
       key=st.sampled_from(["run", "devices", "benchmarks", "warnings", "schema_version"]))
def test_hostile_results_files_are_refused_in_one_line(tmp_path_factory, doc, key) -> None:
    from halbench.bench.results import read_results

    base = {"schema_version": 1, "kind": "halbench-results",
            "run": {"id": "x", "halbench_version": "0", "started_at": "t"}, "devices": {}, "benchmarks": [],
            "warnings": []}
    base[key] = doc
    p = tmp_path_factory.mktemp("r") / "r.json"
    p.write_text(json.dumps(base))
    try:
        read_results(p)
    except Exception as e:  # noqa: BLE001
        _one_line(e)


@FUZZ
@given(text=st.text(max_size=300))
def test_any_suite_text_is_a_suite_or_one_line(tmp_path_factory, text) -> None:
    from halbench.bench.suite import load_suite

    p = tmp_path_factory.mktemp("s") / "s.yaml"
    p.write_text(text)
    try:
        load_suite(str(p))
    except Exception as e:  # noqa: BLE001
        _one_line(e)


@FUZZ
@given(value=st.text(alphabet=st.sampled_from(list("0123456789x=,-.@fiu ^eE+tnar[]")), max_size=40))
def test_any_input_value_parses_or_is_one_line(value) -> None:
    from halbench.runtime.io import parse_input

    try:
        a = parse_input(value)
        assert isinstance(a, np.ndarray)
    except Exception as e:  # noqa: BLE001
        _one_line(e)


@FUZZ
@given(uri=st.text(max_size=30))
def test_any_device_uri_is_parsed_or_one_line(uri) -> None:
    from halbench.drivers import resolve_devices

    try:
        resolve_devices([uri])
    except Exception as e:  # noqa: BLE001
        _one_line(e)


def test_a_run_module_with_fuzzed_inputs_leaves_no_output_file(good_bundle: bytes, tmp_path: Path) -> None:
    """A bad --input fails before anything is written; --output files appear only on success."""
    import subprocess
    import sys

    (tmp_path / "m.hbx").write_bytes(good_bundle)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for bad in ("2x3xf32=1,2", "3x2xf32=0", "2x3xi32=0", "@missing.npy", "2x3xf32=@/dev/zero"):
        r = subprocess.run([sys.executable, "-m", "halbench", "run-module", "--device=local-sync://",
                            f"--module={tmp_path / 'm.hbx'}", f"--input={bad}", f"--output=@{tmp_path / 'y.npy'}"],
                           capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
        assert not (tmp_path / "y.npy").exists() and not list(tmp_path.glob(".y.npy*"))
