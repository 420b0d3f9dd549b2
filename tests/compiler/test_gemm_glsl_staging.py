"""The Vulkan GEMM's register staging (gemm.j2 DB / VA / VB, kernels._glsl_staging).

Vulkan has no cp.async: the tiles go global -> registers -> shared. On GLSL (switches in
kernels.GLSL_STAGING) the shared tiles may come in two stages where twice the tiles fit (one
barrier per K step), A may be read 4 neighbours along K per 16-byte load where it is dense and K,
the step and every K slice are whole 4s, and B 4 along N where it is dense along N (matmul, NHWC
filters) or a 1x1 stride-1 unpadded NCHW convolution's pixels come in whole 4s. By default only
B's runs are on, for thread tiles of 32+ outputs without split-K (the only one measured faster on
the H100). Here: the default, which kernels take which path with every switch on, that CUDA, HIP
and WGSL keep theirs, and that the kernels match the NumPy oracle on lavapipe with each switch on
and off, under tiles where a thread's last 16-byte load is past the tile (guarded), split-K,
batch, NHWC and --precision rounding.
"""

from __future__ import annotations

import dataclasses

import pytest

from halbench.compiler.codegen import kernels
from halbench.compiler.codegen.glsl import generate_vulkan, glsl_sources
from halbench.compiler.codegen.tuning import GemmConfig, tuning_for
from tests.compiler import codegen_cases as cc
from tests.compiler.helpers import forced_gemm_tuning
from tests.compiler.test_codegen_vulkan import rel_err
from tests.compiler.test_gemm_async import _run
from tests.compiler.test_gemm_pix import matches_numpy_on_lavapipe

CASES = {
    "matmul": lambda: cc.matmul(70, 52, 44, epilogue=True),  # K, N whole 4s: A and B in 16 bytes
    "matmul_odd": lambda: cc.matmul(33, 50, 27),  # neither
    "matmul_ta_tb": lambda: cc.matmul(40, 36, 24, ta=True, tb=True),  # A along M, B along K: scalar
    "batch_matmul": lambda: cc.matmul(20, 24, 16, batch=3),
    "conv1x1": lambda: cc.conv("nchw", 2, 12, 6, 6, 20, (1, 1), epilogue=True),  # 36 pixels: B in 4s
    "conv1x1_odd": lambda: cc.conv("nchw", 2, 12, 7, 7, 20, (1, 1)),  # 49 pixels: B through the taps
    "conv1x1_s2": lambda: cc.conv("nchw", 2, 16, 8, 8, 12, (1, 1), 2),
    "conv3x3": lambda: cc.conv("nchw", 2, 8, 9, 11, 12, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
    "conv_grouped": lambda: cc.conv("ngchw", 2, 8, 4, 6, 12, (1, 1), groups=2),
    "conv_nhwc": lambda: cc.conv("nhwc_hwcf", 2, 8, 9, 11, 12, (3, 3), 1, 1, (1, 1, 1, 1)),
    "conv_split_k": lambda: cc.conv("nchw", 1, 256, 7, 7, 64, (3, 3), 1, 1, (1, 1, 1, 1), epilogue=True),
}
#: (VA, VB) per case: whether A / B is read in 16-byte runs
RUNS = {"matmul": (True, True), "matmul_odd": (False, False), "matmul_ta_tb": (False, False),
        "batch_matmul": (True, True), "conv1x1": (True, True), "conv1x1_odd": (True, False),
        "conv1x1_s2": (True, False), "conv3x3": (True, False), "conv_grouped": (True, True),
        "conv_nhwc": (False, True), "conv_split_k": (True, False)}
#: forced tiles (None: the rule's): 96 threads over a 32-wide B tile 8 deep (64 runs of 4: a
#: partial round), runs of 4 with 16-byte shared reads, a 16-deep step
CONFIGS = {None: None, "48x32x8": GemmConfig(48, 32, 8, 4, 4), "64x64x16runs": GemmConfig(64, 64, 16, 8, 4, 1, True),
           "32x64x16": GemmConfig(32, 64, 16, 4, 4, 1, True)}
MODES = {"all": {"double": True, "vec4_a": True, "vec4_b": True},
         "double": {"double": True, "vec4_a": False, "vec4_b": False},
         "a": {"double": False, "vec4_a": True, "vec4_b": False},
         "b": {"double": False, "vec4_a": False, "vec4_b": True},
         "none": {"double": False, "vec4_a": False, "vec4_b": False},
         "default": dict(kernels.GLSL_STAGING)}


@pytest.fixture
def every_switch(monkeypatch):
    for k in kernels.GLSL_STAGING:
        monkeypatch.setitem(kernels.GLSL_STAGING, k, True)


def _tuning(d, g, config: str | None, target: str = "llvmpipe"):
    t = tuning_for(target, "vulkan")
    return t if CONFIGS[config] is None else forced_gemm_tuning(t, d, g, CONFIGS[config])


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_operands_load_runs_of_4(case, every_switch):
    g, d = CASES[case]()
    plan, srcs = glsl_sources(d, g, "h100", ("bda",))
    src = srcs["bda"]
    assert plan.template == "gemm.j2" and plan.ctx["DB"]
    va, vb = RUNS[case]
    assert (plan.ctx["VA"] is not None, plan.ctx["VB"] is not None) == (va, vb)
    assert ("vec4 qa0" in src, "vec4 qb0" in src) == (va, vb)
    assert ("float pa0" in src, "float pb0" in src) == (not va, not vb)
    # the 16-byte loads read the operand's vec4 view, declared for exactly those bindings
    for run, x in zip((va, vb), ("qa0 = V", "qb0 = V")):
        assert (x in src) == run
    # one barrier per K step: the loop's only barrier() is after the stores
    loop = src.split("for (int k0", 1)[1].split("acc_0_0 +=", 1)[0]  # up to the first FMA
    assert loop.count("barrier();") == 1
    assert "so_a = " in src and "so_b = " in src


def test_double_stages_only_where_they_fit(every_switch):
    g, d = CASES["matmul"]()
    t = tuning_for("h100", "vulkan")
    small = forced_gemm_tuning(t, d, g, GemmConfig(64, 64, 16, 4, 4, 1, True))
    big = forced_gemm_tuning(t, d, g, GemmConfig(128, 64, 32, 8, 4, 1, True))  # 25.6 KiB a stage
    assert 2 * big.gemm_configs[0][1].tiles.shared_bytes() > t.shared_bytes
    for tt, db in ((small, True), (big, False)):
        plan, srcs = glsl_sources(d, g, "h100", ("bda",), tuning=tt)
        assert plan.gemm["source"] == "tuned" and plan.ctx["DB"] == db
        shared = {n: size for _, n, size in plan.shared}
        cfg = tt.gemm_configs[0][1]
        assert shared["As"] == (2 if db else 1) * cfg.bk * (cfg.bm + 4) // 4  # vec4 words
        loop = srcs["bda"].split("for (int k0", 1)[1].split("acc_0_0 +=", 1)[0]
        assert loop.count("barrier();") == 1


@pytest.mark.parametrize("config,vb", [(GemmConfig(64, 64, 16, 8, 4, 1, True), True),
                                       (GemmConfig(128, 64, 16, 8, 8, 1, True), True),
                                       (GemmConfig(64, 64, 16, 4, 4, 1, True), False),
                                       (GemmConfig(32, 32, 16, 2, 2, 1, True), False)])
def test_default_is_b_in_runs_of_4_on_wide_thread_tiles_only(config, vb):
    """By default: no second stage, A as scalars, B in 16-byte loads on 8x4 / 8x8 thread tiles of
    an unsplit GEMM; every other kernel's GLSL is the plain register staging."""
    g, d = CASES["conv1x1"]()
    t = forced_gemm_tuning(tuning_for("h100", "vulkan"), d, g, config)
    plan, srcs = glsl_sources(d, g, "h100", ("bda",), tuning=t)
    assert plan.gemm["source"] == "tuned"
    assert not plan.ctx["DB"] and plan.ctx["VA"] is None and (plan.ctx["VB"] is not None) == vb
    assert "so_a = 0" not in srcs["bda"] and "float pa0" in srcs["bda"]
    assert ("vec4 qb0" in srcs["bda"]) == vb and ("hb_xb0" in srcs["bda"]) == (not vb)
    g, d = CASES["conv_split_k"]()  # split-K: unchanged whatever the tiles
    plan, _ = glsl_sources(d, g, "h100", ("bda",))
    assert plan.ctx["SPLIT"] > 1 and plan.ctx["VB"] is None


def test_other_languages_keep_their_staging(every_switch):
    """CUDA (cp.async on sm_80+, registers on sm_75), HIP and WGSL: no DB / VA / VB."""
    from halbench.compiler.codegen.cuda import cuda_source
    from halbench.compiler.codegen.hip import hip_source
    from halbench.compiler.codegen.wgsl import wgsl_source

    g, d = CASES["conv1x1"]()
    t75 = dataclasses.replace(tuning_for("sm_90", "cuda"), arch="sm_75", name="sm_75")
    for plan, src in (cuda_source(d, g, "h100"), cuda_source(d, g, tuning=t75), hip_source(d, g, "gfx942"),
                      wgsl_source(d, g)):
        assert not plan.ctx["DB"] and plan.ctx["VA"] is None and plan.ctx["VB"] is None
        assert "qa0" not in src and "qb0" not in src and "so_a = 0" not in src


#: every switch setting under the rule's tiles and the partial round; all on and the default
#: under every forced tile
LAVAPIPE = [(case, config, mode) for case in sorted(CASES) for config in CONFIGS for mode in sorted(MODES)
            if mode in ("all", "default") or config in (None, "48x32x8")]


@pytest.mark.parametrize("case,config,mode", LAVAPIPE)
def test_matches_numpy_on_lavapipe(vk, case, config, mode, monkeypatch):
    for k, v in MODES[mode].items():
        monkeypatch.setitem(kernels.GLSL_STAGING, k, v)
    g, d = CASES[case]()
    t = _tuning(d, g, config)
    plan, _ = glsl_sources(d, g, tuning=t, abis=("bda",))
    if config is not None:
        assert plan.gemm["source"] == "tuned", plan.gemm
    assert plan.ctx["DB"] == MODES[mode]["double"]
    if not MODES[mode]["vec4_a"]:
        assert plan.ctx["VA"] is None
    if not MODES[mode]["vec4_b"]:
        assert plan.ctx["VB"] is None
    matches_numpy_on_lavapipe(vk, d, g, t, monkeypatch, 7, f"{case}/{config}/{mode}")


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_runs_of_4_round_each_component_on_lavapipe(vk, precision, every_switch):
    """--precision without matrix units rounds every staged value, the 16-byte loads' too."""
    g, d = cc.matmul(36, 40, 32)
    xs = cc.random_inputs(g, d, seed=3)
    exact = cc.reference(g, d, xs)[0]
    d.attrs["root"].attrs["precision"] = precision
    want = cc.reference(g, d, xs)[0]
    plan, srcs = glsl_sources(d, g, "llvmpipe", ("bda",))
    assert plan.ctx["VA"] is not None and plan.ctx["VB"] is not None
    for x in ("qa0.x", "qa0.w", "qb0.x", "qb0.w"):
        assert f"hb_round_{precision}({x})" in srcs["bda"]
    (v,) = generate_vulkan(d, g, "llvmpipe", "bda")
    got = _run(vk, d, g, v, xs)[0]
    assert rel_err(got, want) < 1e-6 and rel_err(got, exact) > 1e-5


#: the tuner's per-problem staging (GemmConfig.double / vec_a), with every GLSL_STAGING switch off
PER_CONFIG = {"double": GemmConfig(32, 64, 16, 4, 4, 1, True, double=True),
              "vec_a": GemmConfig(32, 64, 16, 4, 4, 1, True, vec_a=True),
              "both_frag": GemmConfig(64, 64, 16, 8, 4, 1, True, True, double=True, vec_a=True),
              "split": GemmConfig(32, 32, 16, 2, 2, 2, True, double=True, vec_a=True)}


@pytest.mark.parametrize("case", ["matmul", "conv1x1", "conv3x3", "conv_split_k"])
@pytest.mark.parametrize("name", sorted(PER_CONFIG))
def test_a_configuration_turns_its_staging_on(vk, case, name, monkeypatch):
    """A configuration's ``double`` / ``vec_a`` give its GEMM two shared stages / A's 16-byte
    loads with the module switches off, are recorded in the bundle's configuration, and the kernel
    matches NumPy on lavapipe; the same configuration without them is the plain staging."""
    for k in kernels.GLSL_STAGING:
        monkeypatch.setitem(kernels.GLSL_STAGING, k, False)
    g, d = CASES[case]()
    cfg = PER_CONFIG[name]
    if cfg.split > 1 and kernels.gemm_split(d, g) is None:
        cfg = dataclasses.replace(cfg, split=1)
    t = forced_gemm_tuning(tuning_for("llvmpipe", "vulkan"), d, g, cfg)
    plan, srcs = glsl_sources(d, g, tuning=t, abis=("bda",))
    assert plan.gemm["source"] == "tuned"
    assert plan.gemm["config"].get("double", False) == cfg.double
    assert plan.gemm["config"].get("vec_a", False) == cfg.vec_a
    assert plan.ctx["DB"] == cfg.double
    assert (plan.ctx["VA"] is not None) == (cfg.vec_a and RUNS[case][0])
    assert ("so_a = " in srcs["bda"]) == cfg.double
    plain = forced_gemm_tuning(tuning_for("llvmpipe", "vulkan"), d, g,
                               dataclasses.replace(cfg, double=False, vec_a=False))
    p2, _ = glsl_sources(d, g, tuning=plain, abis=("bda",))
    assert not p2.ctx["DB"] and p2.ctx["VA"] is None
    matches_numpy_on_lavapipe(vk, d, g, t, monkeypatch, 11, f"{case}/{name}")


def test_a_configuration_staging_is_glsl_only():
    """CUDA keeps cp.async (or its registers) whatever the configuration says; ``double`` counts
    twice the shared memory only on Vulkan."""
    from halbench.compiler.codegen.cuda import cuda_source

    g, d = CASES["matmul"]()
    cfg = GemmConfig(64, 64, 16, 4, 4, 1, True, double=True, vec_a=True)
    plan, src = cuda_source(d, g, tuning=forced_gemm_tuning(tuning_for("h100", "cuda"), d, g, cfg))
    assert not plan.ctx["DB"] and plan.ctx["VA"] is None and "qa0" not in src
    big = GemmConfig(128, 128, 32, 8, 8, 1, True, double=True)  # 34 KiB a stage, 68 with two
    assert big.problem(tuning_for("h100", "vulkan"), 1) is not None
    assert "shared memory" in big.problem(tuning_for("h100", "vulkan"), 1)
    assert big.problem(tuning_for("h100", "cuda"), 1) is None
    assert GemmConfig(**big.to_dict()) == big and big.label().endswith(" db")
    assert "double" not in GemmConfig(32, 32, 16, 2, 2).to_dict()  # unset: the cache reads as before
