"""Vulkan codegen on lavapipe: every dispatch kind, both ABIs, against the local (NumPy) oracle.

Each case is generated, validated by spirv-val (compile_glsl does), loaded through the HAL,
dispatched with the variant's own workgroup count, and read back. f32 must match within 1e-4
relative (||out - ref|| / ||ref||).
"""

from __future__ import annotations

import numpy as np
import pytest

from halbench.compiler.codegen.glsl import generate_vulkan, glsl_sources
from halbench.compiler.codegen.tuning import fold_groups, tuning_for
from tests.compiler import codegen_cases as cc

RTOL = 1e-4


def run_variant(dev, variant, inputs: list[np.ndarray], out_shapes: list[tuple[tuple[int, ...], np.dtype]],
                poison: tuple[int, ...] = (), runs: int = 1):
    """``runs`` dispatches of ``variant`` (a barrier after each); outputs start zeroed, or as
    all-ones bytes (NaN for floats) where their index is in ``poison``, so an element the kernel
    never writes shows."""
    exe = dev.load_executable(variant.binary())
    bufs = []
    for x in inputs:
        b = dev.allocate(max(x.nbytes, 16))
        b.write(np.ascontiguousarray(x))
        bufs.append(b)
    outs = []
    for shape, dt in out_shapes:
        n = int(np.prod(shape)) * np.dtype(dt).itemsize
        b = dev.allocate(max(n, 16))
        b.write(np.full(max(n, 16), 0xFF if len(outs) in poison else 0, np.uint8))
        outs.append(b)
    cb = dev.command_buffer()
    for _ in range(runs):
        cb.dispatch(exe, variant.entry.name, variant.workgroups, bufs + outs, list(variant.constants))
        cb.barrier()
    cb.end()
    dev.submit(cb).wait()
    res = [b.read(dt, shape) for b, (shape, dt) in zip(outs, out_shapes)]
    for b in bufs + outs:
        b.free()
    return res


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(np.linalg.norm(out.astype(np.float64) - ref) / max(np.linalg.norm(ref), 1e-30))


@pytest.mark.parametrize("abi", ["bda", "descriptors"])
@pytest.mark.parametrize("case", sorted(cc.CASES))
def test_case_matches_oracle(vk, case, abi):
    g, d = cc.build(case)
    inputs = cc.random_inputs(g, d)
    ref = cc.reference(g, d, inputs)
    (variant,) = generate_vulkan(d, g, "llvmpipe", abi)
    assert variant.format == f"vulkan-spirv-{abi}-v1"
    from halbench.compiler.codegen.kernels import uses_extract

    status = uses_extract(d)  # a gather takes its bounds status slot as one more binding
    assert variant.entry.bindings == len(d.inputs) + len(d.outputs) + status
    out_shapes = [(g.types[v].shape, np.float32) for v in d.outputs] + [((4,), np.uint32)] * status
    outs = run_variant(vk, variant, inputs, out_shapes)
    if status:
        assert outs.pop().tolist() == [0, 0, 0, 0]  # in bounds: nothing recorded
    for o, r in zip(outs, ref):
        assert o.shape == r.shape
        assert np.isfinite(o).all()
        assert rel_err(o, r) <= RTOL, f"{case}/{abi}: rel err {rel_err(o, r):.2e}"


def test_all_emits_bda_first():
    g, d = cc.build("elementwise_small")
    vs = generate_vulkan(d, g, None, "all")
    assert [v.format for v in vs] == ["vulkan-spirv-bda-v1", "vulkan-spirv-descriptors-v1"]
    assert all(v.payload[:4] == b"\x03\x02\x23\x07" for v in vs), "not SPIR-V"
    assert vs[0].entry == vs[1].entry and vs[0].workgroups == vs[1].workgroups


def test_both_abis_share_the_body():
    g, d = cc.build("matmul")
    _, src = glsl_sources(d, g, "llvmpipe")
    body = lambda s: s[s.index("void main()"):].split("\n", 4)[-1]
    assert body(src["bda"]).strip().endswith(body(src["descriptors"]).strip()[-200:])


def test_erf_accuracy(vk):
    """GLSL has no erf: ours is within 2 ulp (relative 2.4e-7) of the exact one in f32."""
    from scipy.special import erf

    from halbench.compiler.ir import Body, Node

    x = np.concatenate([np.linspace(-5, 5, 4001), np.geomspace(1e-8, 1, 500), -np.geomspace(1e-8, 1, 500)])
    x = x.astype(np.float32)
    g, d = cc.elementwise((x.size,))
    b = Body()
    b.yields = [b.add(Node("erf", (b.add(Node("arg", (), "f32", 0)),)))]
    d.attrs["root"].attrs["body"] = b
    (v,) = generate_vulkan(d, g, "llvmpipe", "descriptors")
    (out,) = run_variant(vk, v, [x, np.ones(x.size, np.float32)], [((x.size,), np.float32)])
    ref = erf(x.astype(np.float64))
    rel = np.abs(out - ref) / np.maximum(np.abs(ref), 1e-30)
    assert rel.max() < 2.4e-7, f"max relative error {rel.max():.3e} at x={x[rel.argmax()]}"


def test_groups_fold_beyond_65535():
    assert fold_groups(65535) == (65535, 1, 1)
    x, y, z = fold_groups(65536 * 3 + 7)
    assert x <= 65535 and x * y >= 65536 * 3 + 7 and z == 1


def test_large_grid_folds_and_runs(vk):
    """A copy of 2^23 + 3 floats: more than 65535 workgroups of 128 threads, folded into y."""
    n = (1 << 23) + 3
    g, d = cc.copy((n,), (n,))
    (v,) = generate_vulkan(d, g, "generic", "bda") if False else generate_vulkan(d, g, None, "bda")
    assert v.workgroups[1] > 1 and v.workgroups[0] <= 65535
    x = np.arange(n, dtype=np.float32) + 1.0
    (out,) = run_variant(vk, v, [x], [((n,), np.float32)])
    np.testing.assert_array_equal(out, x)


def test_tuning_picks_workgroups_from_the_target():
    from halbench.compiler.codegen.tuning import gemm_tiles

    h100, lp = tuning_for("h100", "vulkan"), tuning_for("llvmpipe", "vulkan")
    assert h100.block == 256
    big = gemm_tiles(h100, 4096, 4096, 4096)
    assert big.threads <= h100.max_invocations and big.shared_bytes() <= h100.shared_bytes
    assert gemm_tiles(lp, 1, 768, 768).bm <= 64


#: f16 storage, f32 arithmetic (rounded once on store): the oracle computes in f16, so allow
#: the f16 rounding of both sides, accumulated over K (documented bound for f16: 1e-2).
F16_RTOL = 1e-2


@pytest.mark.parametrize("abi", ["bda", "descriptors"])
@pytest.mark.parametrize("case", ["matmul_f16", "elementwise_f16"])
def test_f16_matches_oracle(vk, case, abi):
    if case == "matmul_f16":
        g, d = cc.matmul(24, 40, 33, dtype="f16")
    else:
        g, d = cc.elementwise((6, 40), dtype="f16")
    inputs = cc.random_inputs(g, d)
    ref = cc.reference(g, d, inputs)
    (variant,) = generate_vulkan(d, g, "llvmpipe", abi)
    (out,) = run_variant(vk, variant, inputs, [(g.types[d.outputs[0]].shape, np.float16)])
    assert rel_err(out, ref[0]) <= F16_RTOL


def test_a_rejected_kernel_is_one_line_naming_its_kept_source(tmp_path, monkeypatch):
    """A generated kernel glslang rejects (a code generator bug) is reported in one line that
    names the file its source was kept in, not with the source pasted into the error."""
    from halbench.compiler.codegen.glsl import _compile
    from halbench.errors import CompileError

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    src = "#version 460\nlayout(local_size_x = 1) in;\nvoid main() { hb_missing(1.0); }\n"
    with pytest.raises(CompileError) as e:
        _compile(src, "broken_bda", False)
    msg = str(e.value)
    assert "\n" not in msg and "glslang failed on broken_bda" in msg and "hb_missing" in msg
    kept = [p for p in (tmp_path / "halbench" / "failed").iterdir()]
    assert len(kept) == 1 and kept[0].read_text() == src and str(kept[0]) in msg


def test_a_missing_kernel_compiler_is_not_called_a_code_generator_bug(monkeypatch):
    """Only a rejection of the generated source is reported as a code generator bug; glslang
    missing keeps its own one-line error (how to install it)."""
    from halbench.compiler.backends import glslang
    from halbench.compiler.codegen.glsl import _compile
    from halbench.errors import CompileError

    def missing(*a, **k):
        raise CompileError("glslangValidator not found; apt install glslang-tools")

    monkeypatch.setattr(glslang, "compile_glsl", missing)
    with pytest.raises(CompileError) as e:
        _compile("void main() {}", "k_bda", False)
    assert str(e.value) == "glslangValidator not found; apt install glslang-tools"
