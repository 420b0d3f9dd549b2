"""Programmatic dependent launch (CUDA, sm_90+): kernels wait for the grids they depend on
themselves (``griddepcontrol.wait`` before anything else), the entry point says so
(``EntryPoint.dependent_launch``, kept by the manifest), and the CUDA driver then joins a kernel
to the kernel it depends on by a programmatic graph edge. Source and NVRTC checks run in CI; the
GPU tests run a chain of 40 dependent kernels both ways, and levels of two independent kernels
joined into the next (programmatic edges from both, or an empty node), checking every result."""

from __future__ import annotations

import re

import numpy as np
import pytest
from pydantic import ValidationError

from halbench.bundle.manifest_schema import EntryDoc
from halbench.compiler.codegen.cuda import cuda_source, generate_cuda
from halbench.hal import EntryPoint
from tests.compiler import codegen_cases as cc

CASES = ("matmul_big", "conv_nchw_s2_pad_bias", "elementwise_vec4", "reduce_row_384_max", "gather")


def _body(src: str) -> str:
    """The kernel's first statement (after the parameter list)."""
    return src.split("hb_main(", 1)[1].split(") {", 1)[1].lstrip().splitlines()[0]


@pytest.mark.parametrize("case", CASES)
def test_sm90_kernels_wait_for_their_predecessors_first(case):
    g, d = cc.build(case)
    _, src = cuda_source(d, g, "sm_90")
    assert _body(src) == 'asm volatile("griddepcontrol.wait;" ::: "memory");'
    assert src.count("griddepcontrol") == 1  # no early launch_dependents (measured slower)
    _, old = cuda_source(d, g, "sm_80")
    assert "griddepcontrol" not in old


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a", "sm_80"])
def test_entry_says_so_and_nvrtc_compiles_it(arch):
    pytest.importorskip("cuda.bindings.nvrtc")
    g, d = cc.build("matmul_big")
    variants = generate_cuda(d, g, arch)
    wants = arch != "sm_80"
    assert [v.entry.dependent_launch for v in variants] == [wants] * len(variants)
    ptx = next(v for v in variants if v.format == "cuda-ptx-v1").payload.decode()
    assert bool(re.search(r"^\s*griddepcontrol\.wait;", ptx, re.MULTILINE)) == wants


def test_hip_kernels_do_not_wait():
    from halbench.compiler.codegen.hip import hip_source

    g, d = cc.build("matmul_big")
    _, src = hip_source(d, g, "gfx942")
    assert "griddepcontrol" not in src


def test_entry_point_round_trip():
    e = EntryPoint("main", 3, 0, (128, 1, 1), 0, True)
    assert e.to_dict()["dependent_launch"] is True
    assert EntryPoint.from_dict(e.to_dict()) == e
    plain = EntryPoint("main", 3)
    assert "dependent_launch" not in plain.to_dict()  # older readers keep reading the manifest
    assert EntryDoc.model_validate(plain.to_dict()).dependent_launch is False
    assert EntryDoc.model_validate(e.to_dict()).dependent_launch is True
    with pytest.raises(ValidationError):
        EntryDoc.model_validate({**e.to_dict(), "dependent_launch": "yes"})


def _waiting_kernel(dev, g, d):
    """The case's cubin for ``dev`` (its variant and loaded executable); skips before sm_90."""
    arch = dev.info.identity.arch
    (v,) = generate_cuda(d, g, arch, formats=("cubin",))
    if not v.entry.dependent_launch:
        pytest.skip(f"{arch}: no dependent launch before sm_90")
    return v, dev.load_executable(v.binary())


@pytest.mark.gpu
def test_chain_of_dependent_kernels_on_cuda():
    """40 dispatches, each reading the buffer the one before wrote (ping-pong): with dependent
    launches on, every kernel after the first hangs on a programmatic edge, and the result is the
    40-fold reference; off, no programmatic edge and the same bits."""
    import halbench

    g, d = cc.build("elementwise_vec4")
    xs = cc.random_inputs(g, d, seed=1)
    ref = xs[0]
    for _ in range(40):
        ref = cc.reference(g, d, [ref, xs[1]])[0].astype(np.float32)
    got = {}
    with halbench.create_device("cuda://") as dev:
        v, exe = _waiting_kernel(dev, g, d)
        bufs = [dev.allocate(xs[0].nbytes), dev.allocate(xs[0].nbytes), dev.allocate(xs[1].nbytes)]
        try:
            for on in (True, False):
                dev.dependent_launch = on and dev.api.programmatic_edges()
                bufs[0].write(xs[0])
                bufs[2].write(xs[1])
                cb = dev.command_buffer()
                for i in range(40):
                    src, dst = bufs[i % 2], bufs[1 - i % 2]
                    cb.dispatch(exe, v.entry.name, v.workgroups, [src, bufs[2], dst], [])
                    cb.barrier()
                cb.end()
                assert cb.dependent_launches == (39 if dev.dependent_launch else 0)
                for _ in range(20):  # a race would show in some replay
                    dev.submit(cb).wait()
                    got.setdefault(on, []).append(bufs[0].read(np.float32, xs[0].shape))
                    bufs[0].write(xs[0])
                cb.release()
        finally:
            for b in bufs:
                b.free()
    assert all(np.array_equal(x, got[False][0]) for x in got[True] + got[False])
    np.testing.assert_allclose(got[True][0], ref, rtol=1e-5, atol=1e-6)


def test_compile_and_inspect_say_which_kernels_wait(tmp_path):
    """The CLI end to end: an ONNX model compiled for cuda:// at h100 (sm_90) marks every kernel
    ``dependent_launch`` in its manifest and ``halbench inspect`` says so; at a100 (sm_80) none."""
    pytest.importorskip("cuda.bindings.nvrtc")
    pytest.importorskip("iree.compiler")
    import json
    import zipfile

    import onnx
    from click.testing import CliRunner
    from onnx import TensorProto, helper, numpy_helper

    from halbench.cli import main

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"]),
                           helper.make_node("Softmax", ["y"], ["z"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 64])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [16, 32])], [w])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), model)
    for target, wants in (("h100", True), ("a100", False)):
        out = tmp_path / f"{target}.hbx"
        r = CliRunner().invoke(main, ["compile", str(model), "-o", str(out), "--target-device", "cuda",
                                      "--cuda-target", target, "--cuda-formats", "cubin", "--tuning-cache", "off"])
        assert r.exit_code == 0, r.output
        manifest = json.loads(zipfile.ZipFile(out).read("manifest.json"))
        flags = [v["entry"].get("dependent_launch", False) for e in manifest["executables"] for v in e["variants"]]
        assert len(flags) >= 2 and set(flags) == {wants}
        r = CliRunner().invoke(main, ["inspect", str(out)])
        assert r.exit_code == 0 and r.output.count("dependent launch") == (len(flags) if wants else 0), r.output


@pytest.mark.gpu
def test_levels_of_two_kernels_join_by_programmatic_edges_on_cuda():
    """20 rounds of a level of two independent kernels (A = f(X, y), B = f(X, z)) and, after a
    barrier, X = f(A, B's first row): with programmatic joins the kernel after each level follows
    both through programmatic edges (58 dependent launches), with an empty join node it cannot
    (38), with dependent launch off none; every way gives the same bits, the 20-fold reference,
    in every replay."""
    import halbench

    g, d = cc.build("elementwise_vec4")  # f(tensor, vector along the last axis) -> tensor
    xs = cc.random_inputs(g, d, seed=2)
    x, y = xs[0], xs[1]
    z = np.ascontiguousarray(y[::-1])
    n = y.size
    ref = x
    for _ in range(20):
        a = cc.reference(g, d, [ref, y])[0].astype(np.float32)
        b = cc.reference(g, d, [ref, z])[0].astype(np.float32)
        ref = cc.reference(g, d, [a, b.reshape(-1)[:n]])[0].astype(np.float32)
    got = {}
    with halbench.create_device("cuda://") as dev:
        v, exe = _waiting_kernel(dev, g, d)
        bx, ba, bb = (dev.allocate(x.nbytes) for _ in range(3))
        by, bz = dev.allocate(y.nbytes), dev.allocate(z.nbytes)
        try:
            by.write(y)
            bz.write(z)
            for mode, pdl, joins, want in (("joins", True, True, 58), ("empty node", True, False, 38),
                                           ("off", False, False, 0)):
                dev.dependent_launch = pdl and dev.api.programmatic_edges()
                dev.programmatic_joins = joins
                cb = dev.command_buffer()
                for _ in range(20):
                    cb.dispatch(exe, v.entry.name, v.workgroups, [bx, by, ba], [])
                    cb.dispatch(exe, v.entry.name, v.workgroups, [bx, bz, bb], [])
                    cb.barrier()
                    cb.dispatch(exe, v.entry.name, v.workgroups, [ba, bb, bx], [])
                    cb.barrier()
                cb.end()
                assert cb.dependent_launches == (want if dev.dependent_launch else 0), mode
                for _ in range(20):  # a race would show in some replay
                    bx.write(x)
                    dev.submit(cb).wait()
                    got.setdefault(mode, []).append(bx.read(np.float32, x.shape))
                cb.release()
        finally:
            for buf in (bx, ba, bb, by, bz):
                buf.free()
    first = got["off"][0]
    assert all(np.array_equal(r, first) for rs in got.values() for r in rs)
    np.testing.assert_allclose(first, ref, rtol=1e-5, atol=1e-6)
