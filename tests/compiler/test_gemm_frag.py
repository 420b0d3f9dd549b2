"""The scalar GEMM's written-out K steps with double-buffered fragments (GemmConfig.frag, gemm.j2
FRAG) and CUDA's register bound for wide thread tiles (tuning.gemm_min_blocks).

A ``frag`` configuration writes each shared stage's BK steps out: step kk + 1's fragments (a
thread's TM values of A and TN of B, one 16-byte read per run of 4) are read into one register
set while step kk's FMAs use the other. Off (the default, and every configuration in the H100
caches until measured otherwise) the kernel is the rolled loop it was. Here: which kernels take
it, the bound, that HIP / WGSL keep the loop, that the tuner can choose it, and that the kernels
match NumPy on lavapipe (strided and runs-of-4 fragments, partial rounds, split-K, 3x3 im2col,
NHWC, batch, with the GLSL staging switches on and off) and compile through NVRTC for sm_90.
"""

from __future__ import annotations

import dataclasses

import pytest

from halbench.compiler.codegen import kernels
from halbench.compiler.codegen.cuda import cuda_source
from halbench.compiler.codegen.glsl import glsl_sources
from halbench.compiler.codegen.tuning import GemmConfig, gemm_min_blocks, tuning_for
from tests.compiler.helpers import forced_gemm_tuning
from tests.compiler.test_gemm_glsl_staging import CASES, MODES
from tests.compiler.test_gemm_pix import matches_numpy_on_lavapipe

#: forced ``frag`` tiles: strided scalar fragments with a partial load round (96 threads), runs
#: of 4 read as 16-byte vectors (8x4 and 4x4 per thread), a 256-thread 8x8 tile
CONFIGS = {"48x32x8": GemmConfig(48, 32, 8, 4, 4, frag=True),
           "64x64x16runs": GemmConfig(64, 64, 16, 8, 4, 1, True, True),
           "32x64x16runs": GemmConfig(32, 64, 16, 4, 4, 1, True, True),
           "128x128x8runs": GemmConfig(128, 128, 8, 8, 8, 1, True, True)}


def _tuning(api: str, target: str, d, g, config: str, frag: bool = True):
    return forced_gemm_tuning(tuning_for(target, api), d, g, dataclasses.replace(CONFIGS[config], frag=frag))


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_frag_writes_the_steps_out_in_two_register_sets(config):
    g, d = CASES["conv3x3"]()
    cfg = CONFIGS[config]
    for frag in (True, False):
        t = _tuning("vulkan", "h100", d, g, config, frag)
        plan, srcs = glsl_sources(d, g, "h100", ("bda",), tuning=t)
        src = srcs["bda"]
        assert plan.gemm["source"] == "tuned" and plan.gemm["config"].get("frag", False) == frag
        assert plan.ctx["FRAG"] == frag
        assert ("for (int kk" in src) == (not frag)
        assert ("fa0_0" in src and "fa1_0" in src and "fb1_0" in src) == frag
        if frag:  # the first FMA comes after both sets' first reads (steps 0 and 1)
            first = src.index("acc_0_0 +=")
            assert src.index("fa0_0 =") < src.index("fa1_0 =") < first
            assert src.count("acc_0_0 +=") == cfg.bk
            vec = "vec4 fa0_0" in src
            assert vec == (cfg.runs and cfg.tm % 4 == 0 and cfg.tn % 4 == 0)


def test_cuda_bounds_registers_of_wide_frag_tiles_only():
    """256-thread blocks of 32+ outputs a thread with ``frag``: __launch_bounds__(256, 2)
    (two blocks of <= 128 registers); smaller tiles, fewer threads or no ``frag``: no bound."""
    g, d = CASES["conv1x1"]()
    t = tuning_for("h100", "cuda")
    assert gemm_min_blocks(t, CONFIGS["128x128x8runs"]) == 2
    assert gemm_min_blocks(t, dataclasses.replace(CONFIGS["128x128x8runs"], frag=False)) == 0
    assert gemm_min_blocks(t, CONFIGS["64x64x16runs"]) == 0  # 128 threads
    assert gemm_min_blocks(t, CONFIGS["32x64x16runs"]) == 0  # 16 outputs a thread
    assert gemm_min_blocks(tuning_for("h100", "vulkan"), CONFIGS["128x128x8runs"]) == 0
    _, src = cuda_source(d, g, tuning=_tuning("cuda", "h100", d, g, "128x128x8runs"))
    assert "__launch_bounds__(256, 2)" in src
    _, src = cuda_source(d, g, tuning=_tuning("cuda", "h100", d, g, "128x128x8runs", frag=False))
    assert "__launch_bounds__(256)" in src


def test_hip_and_wgsl_keep_the_rolled_loop():
    from halbench.compiler.codegen.hip import hip_source
    from halbench.compiler.codegen.wgsl import wgsl_source

    g, d = CASES["matmul"]()
    for plan, src in (hip_source(d, g, "gfx942", tuning=_tuning("hip", "gfx942", d, g, "32x64x16runs")),
                      wgsl_source(d, g, tuning=_tuning("webgpu", None, d, g, "48x32x8"))):
        assert plan.gemm["config"].get("frag") and not plan.ctx["FRAG"]
        assert "fa0_0" not in src


def test_the_tuner_tries_the_other_inner_loop():
    from halbench.tune.search import candidates

    for api in ("cuda", "vulkan"):
        t = tuning_for("h100", api)
        base = GemmConfig(64, 64, 16, 4, 4, 1, True)
        cands = candidates(t, base, 1, 2)
        assert dataclasses.replace(base, frag=True) in cands
        assert all(c.frag for c in candidates(t, dataclasses.replace(base, frag=True), 1, 1))
    assert not any(c.frag for c in candidates(tuning_for(None, "webgpu"), GemmConfig(32, 32, 16, 2, 2), 1, 2))


def test_a_cached_frag_config_round_trips(tmp_path):
    from halbench.compiler.tuning_cache import configs_for, update_cache

    cfg = CONFIGS["64x64x16runs"]
    p = {"kind": "matmul", "dtype": "f32", "a": [64, 64], "b": [64, 64], "out": [64, 64],
         "attrs": {"transpose_a": False, "transpose_b": False}}
    entry = {"problem": p, "config": cfg.to_dict(), "time_ns": 1.0}
    update_cache(tmp_path / "cuda-h100.json", "cuda", "h100", {"k": entry})
    assert configs_for("cuda", "h100", tmp_path)["k"] == cfg
    assert GemmConfig(**{k: v for k, v in cfg.to_dict().items() if k != "frag"}).frag is False  # older caches


LAVAPIPE = [(case, config, "default") for case in sorted(CASES) for config in ("48x32x8", "64x64x16runs")] + [
    (case, "32x64x16runs", "all")
    for case in ("matmul", "conv1x1", "conv3x3", "conv_split_k", "batch_matmul")]


@pytest.mark.parametrize("case,config,mode", LAVAPIPE)
def test_frag_kernels_match_numpy_on_lavapipe(vk, case, config, mode, monkeypatch):
    for k, v in MODES[mode].items():
        monkeypatch.setitem(kernels.GLSL_STAGING, k, v)
    g, d = CASES[case]()
    t = _tuning("vulkan", "llvmpipe", d, g, config)
    plan, _ = glsl_sources(d, g, tuning=t, abis=("bda",))
    assert plan.gemm["source"] == "tuned" and plan.ctx["FRAG"], plan.gemm
    if case == "conv_split_k":
        assert plan.ctx["SPLIT"] > 1
    matches_numpy_on_lavapipe(vk, d, g, t, monkeypatch, 11, f"{case}/{config}/{mode}")


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("case", ["conv3x3", "conv1x1", "matmul_odd", "conv_split_k"])
def test_frag_kernels_compile_for_sm90(case, config):
    pytest.importorskip("cuda.bindings.nvrtc")
    from halbench.compiler.backends.nvrtc import compile_cuda

    g, d = CASES[case]()
    plan, src = cuda_source(d, g, tuning=_tuning("cuda", "h100", d, g, config))
    assert plan.ctx["FRAG"] and plan.ctx["ASYNC"]
    assert compile_cuda(src, arch="sm_90", output="cubin", name="t", rename={"hb_main": "main"})
