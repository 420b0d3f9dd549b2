"""``halbench tune`` on lavapipe (the real Vulkan driver): problems from a bundle, a problems file
written and read back, candidates measured and verified, the cache written with its schema, and
compile using the cached configurations (the manifest says so) with results that still match
onnxruntime. Performance is never asserted: only that times came back and what was chosen."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from halbench.bundle import read_bundle
from halbench.bundle.manifest_schema import GemmProblemDoc
from halbench.cli import main
from halbench.compiler.codegen.tuning import GemmConfig, problem_key, tuning_for
from halbench.compiler.compile import CompileOptions
from halbench.compiler.tuning_cache import read_cache, update_cache
from halbench.tune import candidates, load_problems, measure_bundle
from halbench.tune.problems import build_graph, reference
from halbench.tune.search import _compile, split_counts
from tests.compiler.helpers import device_or_skip, onnx_reference, rel_err, run_local

RNG = np.random.default_rng(3)


def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer MLP: MatMul 64x256x256, ReLU, MatMul 64x256x128."""
    tmp = tmp_path_factory.mktemp("mlp")
    w1 = (RNG.standard_normal((256, 256)) / 16).astype(np.float32)
    w2 = (RNG.standard_normal((256, 128)) / 16).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 128])],
                          [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp / "mlp.onnx"
    onnx.save(m, path)
    return path


def _gemms(bundle: Path) -> list[dict]:
    m = read_bundle(bundle).manifest
    return [dict(v.gemm) for e in m.executables for v in e.variants if v.gemm]


def test_tune_writes_the_cache_and_compile_uses_it(mlp: Path, tmp_path: Path) -> None:
    uri = device_or_skip("vulkan://")
    first = tmp_path / "rule.hbx"
    r = run("compile", str(mlp), "-o", str(first), "--target-device", "vulkan,local", "--vulkan-target", "auto",
            "--tuning-cache", "off")
    assert r.exit_code == 0, r.output
    assert {g["source"] for g in _gemms(first)} == {"rule"}
    # The bundle's problems, written to a problems file (what the GPU machine gets) and read back.
    problems = tmp_path / "problems.json"
    r = run("tune", str(first), "--save-problems", str(problems))
    assert r.exit_code == 0, r.output
    keys = set(load_problems(problems))
    assert keys == {g["key"] for g in _gemms(first)} and len(keys) == 2
    cache = tmp_path / "cache"
    r = run("tune", str(problems), "--device", uri, "--budget-s", "20", "--samples", "2", "--warmup", "1",
            "--max-candidates", "2", "--output", str(cache), "--format", "json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output)
    assert all(p["rule"]["time_ns"] > 0 and p["best"]["time_ns"] > 0 for p in report["problems"])
    files = list(cache.glob("vulkan-*.json"))
    assert len(files) == 1 and files[0] == Path(report["cache"])
    doc = read_cache(files[0])  # the schema holds
    assert doc.api == "vulkan" and doc.target == report["target"] and set(doc.entries) == keys
    # Compiling again takes the cached configurations, says so per variant, and still computes
    # what onnxruntime computes.
    tuned = tmp_path / "tuned.hbx"
    r = run("compile", str(mlp), "-o", str(tuned), "--target-device", "vulkan,local", "--vulkan-target", "auto",
            "--tuning-cache", str(cache))
    assert r.exit_code == 0, r.output
    used = _gemms(tuned)
    assert used and {g["source"] for g in used} == {"tuned"}
    for g in used:
        assert g["config"] == doc.entries[g["key"]].config.model_dump(exclude_none=True)
    r = run("inspect", str(tuned))
    assert r.exit_code == 0 and "(tuned)" in r.output, r.output
    # --device loads it there and shows what the driver says of each kernel (lavapipe: nothing).
    r = run("inspect", str(tuned), "--device", uri, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["device"] == uri and all(e["loaded"]["format"].startswith("vulkan-spirv")
                                        for e in doc["executables"])
    r = run("inspect", str(tuned), "--device", uri)
    assert r.exit_code == 0 and r.output.count(f"on {uri} (vulkan-spirv-") == 2, r.output
    r = run("inspect", str(tuned), "--device", "local-sync://")
    assert r.exit_code == 0 and r.output.count("on local-sync:// (local-v1)") == 2, r.output
    x = RNG.standard_normal((64, 256)).astype(np.float32)
    ref = onnx_reference(mlp, {"x": x})[0]
    for device in (uri, "local-sync://"):  # the tuned GPU variant, and the oracle beside it
        out = run_local(tuned, {"x": x}, device=device)[0]
        assert rel_err(out, ref) < 1e-4, device
    # The compile cache key covers the configurations used.
    opts = {"target_devices": ("vulkan",), "targets": {"vulkan": "auto"}}
    assert CompileOptions(**opts, tuning_cache=str(cache)).cache_key() != \
        CompileOptions(**opts, tuning_cache="off").cache_key()


def _square(transpose_b: bool = False) -> GemmProblemDoc:
    return GemmProblemDoc.model_validate({"kind": "matmul", "dtype": "f32", "a": [96, 96], "b": [96, 96],
                                          "out": [96, 96], "attrs": {"transpose_b": transpose_b}})


def test_re_tuning_measures_what_the_cache_holds(mlp: Path, tmp_path: Path) -> None:
    """With ``seed`` (what ``halbench tune --output`` does), the configuration a cache holds for
    a problem is measured right after the rule even when no search stage runs; without it, not."""
    uri = device_or_skip("vulkan://")
    problems = load_problems(mlp, "vulkan")
    key = min(problems)
    from halbench.tune import tune

    probe = tune({key: problems[key]}, uri, budget_s=10, samples=1, warmup=0, max_candidates=0)
    rule = probe.results[0].rule.config
    seed = next(c for c in (GemmConfig(32, 32, 16, 2, 2), GemmConfig(64, 64, 16, 4, 4)) if c != rule)
    cache = tmp_path / f"vulkan-{probe.target}.json"
    update_cache(cache, "vulkan", probe.target, {key: {
        "problem": problems[key].model_dump(), "config": seed.to_dict(), "rule": rule.to_dict(),
        "device": uri, "measured_at": "2026-11-25T00:00:00Z", "time_ns": 1.0, "rule_time_ns": 1.0,
        "candidates": 1}})
    for seeded in (True, False):
        res = tune({key: problems[key]}, uri, budget_s=10, samples=1, warmup=0, max_candidates=0,
                   cache=str(cache), seed=seeded).results[0]
        assert any(m.config == seed for m in res.tried) == seeded


def test_a_wrong_result_is_discarded(tmp_path: Path) -> None:
    """A real kernel that computes something else (A x B^T where A x B is asked) is rejected by
    the output check before it is timed; the right kernel is timed."""
    import halbench

    uri = device_or_skip("vulkan://")
    p, wrong = _square(), _square(transpose_b=True)
    a, b = (RNG.uniform(-1, 1, (96, 96)).astype(np.float32) for _ in range(2))
    ref = reference(p, a, b).astype(np.float64)
    paths = {}
    for name, prob in (("right", p), ("wrong", wrong)):
        key = problem_key(prob.model_dump())
        path, gemm, err = _compile(prob, key, "vulkan", "auto", uri, None, "descriptors", tmp_path / f"{name}.hbx")
        assert err is None and gemm["source"] == "rule", err
        paths[name] = path
    with halbench.create_device(uri) as dev:
        ns, err = measure_bundle(dev, paths["wrong"], [a, b], ref, samples=1, warmup=0)
        assert ns is None and err.startswith("wrong result")
        ns, err = measure_bundle(dev, paths["right"], [a, b], ref, samples=1, warmup=0)
        assert err is None and ns > 0


def test_a_forced_configuration_is_compiled_as_given(tmp_path: Path) -> None:
    p = _square()
    key = problem_key(p.model_dump())
    cfg = GemmConfig(32, 64, 8, 2, 4, 1, False)
    path, gemm, err = _compile(p, key, "vulkan", "llvmpipe", None, cfg, "descriptors", tmp_path / "c.hbx")
    assert err is None and gemm["source"] == "tuned" and gemm["config"] == cfg.to_dict()
    # One the target cannot run (4096 threads) is refused, not compiled as something else.
    big = GemmConfig(128, 128, 8, 2, 2)
    path, gemm, err = _compile(p, key, "vulkan", "llvmpipe", None, big, "descriptors", tmp_path / "d.hbx")
    assert path is None and "refused" in err


def test_candidates_fit_the_target() -> None:
    t = tuning_for("llvmpipe", "vulkan")
    base = GemmConfig(64, 64, 16, 4, 4, 2, True)
    for stage in (1, 2):
        cands = candidates(t, base, 2, stage)
        assert cands and base not in cands
        assert all(c.problem(t, 2) is None for c in cands)
    assert {c.split for c in candidates(t, base, 4, 2)} >= {1, 4}


def test_stage_two_tries_the_other_glsl_staging_on_vulkan_only() -> None:
    """Around the best, Vulkan's stage 2 tries two shared stages and A's 16-byte loads (each
    flipped alone, right after the slice counts); stage 1 keeps the base's staging on every tile;
    CUDA, whose sm_80+ GEMM stages by cp.async, gets neither."""
    base = GemmConfig(32, 64, 16, 4, 4, 1, True)
    vk = candidates(tuning_for("h100", "vulkan"), base, 1, 2)
    flips = [c for c in vk if (c.double, c.vec_a) != (False, False)]
    assert flips == [replace(base, double=True), replace(base, vec_a=True)]
    assert vk.index(flips[0]) == 0  # one slice reserved: nothing to split first
    staged = replace(base, double=True)
    assert all(c.double for c in candidates(tuning_for("h100", "vulkan"), staged, 1, 1))
    assert not any(c.double or c.vec_a for stage in (1, 2) for c in candidates(tuning_for("h100", "cuda"), base, 1, stage))


def test_stage_two_tries_the_deeper_splits_the_schedule_reserves_first() -> None:
    """A low-wave GEMM's reservation (split_k_room) reaches the tuner: ResNet-50 b8's 256 -> 256
    3x3 convolution at 14x14 (unsplit by the rule, room for 10 slices) gets stage-2 candidates of
    2 to 10 slices, ahead of the other depths and ownership."""
    from halbench.compiler.codegen.kernels import gemm_split

    p = GemmProblemDoc(kind="conv2d", dtype="f32", a=[8, 256, 14, 14], b=[256, 256, 3, 3], out=[8, 256, 14, 14],
                       attrs={"layout": "nchw", "strides": [1, 1], "dilations": [1, 1], "pads": [1, 1, 1, 1],
                              "pad_value": 0.0})
    g = build_graph(p)
    sp = gemm_split(g.ops[0], g)
    assert sp is not None and (sp.slices, sp.room) == (1, 10)
    t = tuning_for("h100", "cuda")
    base = GemmConfig(32, 32, 16, 2, 2)
    cands = candidates(t, base, sp.room, 2)
    assert [c.split for c in cands[:7]] == [2, 3, 4, 5, 6, 8, 10]
    assert split_counts(1) == [1] and split_counts(2) == [1, 2] and split_counts(16)[-1] == 16


def test_a_tuned_deeper_split_is_compiled_and_measured_right(tmp_path: Path) -> None:
    """A configuration splitting deeper than the rule (6 slices where the rule takes 2, the
    schedule reserved 8) is compiled as given and passes the tuner's output check on lavapipe."""
    import halbench

    p = GemmProblemDoc(kind="matmul", dtype="f32", a=[256, 1024], b=[1024, 512], out=[256, 512],
                       attrs={"transpose_a": False, "transpose_b": False})
    key = problem_key(p.model_dump())
    cfg = GemmConfig(32, 32, 16, 4, 2, 6, False)
    path, gemm, err = _compile(p, key, "vulkan", "llvmpipe", None, cfg, "descriptors", tmp_path / "c.hbx")
    assert err is None and gemm["source"] == "tuned" and gemm["config"]["split"] == 6
    assert read_bundle(path).manifest.executables[0].variants[0].workgroups[2] == 6
    uri = device_or_skip("vulkan://")
    a = RNG.uniform(-1, 1, (256, 1024)).astype(np.float32)
    b = RNG.uniform(-1, 1, (1024, 512)).astype(np.float32)
    with halbench.create_device(uri) as dev:
        ns, err = measure_bundle(dev, path, [a, b], reference(p, a, b).astype(np.float64), samples=1, warmup=0)
    assert err is None and ns > 0


def _cache_doc(cfg: dict) -> dict:
    p = _square().model_dump(exclude_none=True)
    return {"api": "vulkan", "target": "llvmpipe",
            "entries": {problem_key(p): {"problem": p, "config": cfg, "time_ns": 1.0}}}


@pytest.mark.parametrize("content, says", [
    (b"{not json", "is not JSON"),
    (json.dumps({"api": "vulkan", "target": "llvmpipe", "entries": {}, "extra": 1}).encode(), "unknown key"),
    (json.dumps(_cache_doc({"bm": 0, "bn": 64, "bk": 8, "tm": 4, "tn": 4})).encode(), "bm"),
])
def test_a_bad_cache_is_a_one_line_error(tmp_path: Path, content: bytes, says: str) -> None:
    cache = tmp_path / "vulkan-llvmpipe.json"
    cache.write_bytes(content)
    graph = tmp_path / "m.hbx"
    problems = tmp_path / "p.json"
    problems.write_text(json.dumps({"problems": [_square().model_dump(exclude_none=True)]}))
    r = run("compile", str(_mlp_file(tmp_path)), "-o", str(graph), "--target-device", "vulkan",
            "--vulkan-target", "llvmpipe", "--tuning-cache", str(cache))
    assert r.exit_code == 1
    line = r.output.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert says in line and str(cache) in line and "--tuning-cache off" in line, line


def test_an_oversized_cache_is_refused_unread(tmp_path: Path) -> None:
    cache = tmp_path / "vulkan-llvmpipe.json"
    with open(cache, "wb") as f:
        f.truncate(17 << 20)
    r = run("compile", str(_mlp_file(tmp_path)), "-o", str(tmp_path / "m.hbx"), "--target-device", "vulkan",
            "--vulkan-target", "llvmpipe", "--tuning-cache", str(tmp_path))
    assert r.exit_code == 1 and "over the 16 MiB" in r.output and "\n" not in r.output.strip(), r.output


def test_a_cached_configuration_the_target_cannot_run_falls_back_to_the_rule(tmp_path: Path) -> None:
    """The cache is untrusted: a configuration of 4096 threads passes the schema but not the
    target's limits, so the GEMM takes the rule."""
    (tmp_path / "vulkan-llvmpipe.json").write_text(json.dumps(
        _cache_doc({"bm": 128, "bn": 128, "bk": 8, "tm": 2, "tn": 2})))
    from halbench.compiler.compile import compile_graph

    opts = CompileOptions(target_devices=("vulkan",), targets={"vulkan": "llvmpipe"}, tuning_cache=str(tmp_path))
    cm = compile_graph(build_graph(_square()), opts)
    gemm = next(v.gemm for e in cm.manifest.executables for v in e.variants if v.gemm)
    assert gemm["source"] == "rule"


def test_bad_problems_are_one_line_errors(tmp_path: Path) -> None:
    bad = _square().model_dump(exclude_none=True)
    bad["out"] = [96, 95]
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"problems": [bad]}))
    r = run("tune", str(f), "--device", "vulkan://", "--budget-s", "1")
    assert r.exit_code == 1 and "out is [96, 95] but the op computes [96, 96]" in r.output, r.output
    f.write_text(json.dumps({"problems": [{"kind": "gemm"}]}))
    r = run("tune", str(f), "--save-problems", str(tmp_path / "q.json"))
    assert r.exit_code == 1 and "problems[0].kind" in r.output and "\n" not in r.output.strip(), r.output


def test_tuning_needs_a_gpu_device(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps({"problems": [_square().model_dump(exclude_none=True)]}))
    r = run("tune", str(f), "--device", "local-sync://")
    assert r.exit_code == 1 and "no GPU GEMM to tune" in r.output, r.output


def _mlp_file(tmp: Path) -> Path:
    w = (RNG.standard_normal((32, 32)) / 6).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [96, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [96, 32])],
                          [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp / "mm.onnx"
    onnx.save(m, path)
    return path


def test_a_zoo_model_by_name_gives_its_problems(tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    r = run("tune", "tiny-mlp", "--save-problems", str(out))
    assert r.exit_code == 0, r.output
    assert load_problems(out) and all(p.dtype == "f32" for p in load_problems(out).values())


def test_stage_one_skips_tiles_that_mostly_compute_padding() -> None:
    t = tuning_for("h100", "cuda")
    base = GemmConfig(64, 64, 16, 4, 4)
    mid = candidates(t, base, 1, 1, (24, 384))  # M = 24: tiles of 64+ rows would mostly compute padding
    assert mid and all(c.bm <= 32 for c in mid) and any(c.bm == 8 for c in mid)
    assert len(candidates(t, base, 1, 1, (1024, 1536))) > len(mid)
    # M = 8, a skinny GEMM (SKINNY_M): it streams B, so the GEMV-like tiles and tiles of up to 8x
    # the rows stay candidates
    skinny = candidates(t, base, 1, 1, (8, 384))
    assert {(8, 128), (8, 64)} <= {(c.bm, c.bn) for c in skinny} and all(c.bm <= 64 for c in skinny)


def test_a_missing_cache_named_explicitly_is_an_error(tmp_path: Path) -> None:
    r = run("compile", str(_mlp_file(tmp_path)), "-o", str(tmp_path / "m.hbx"), "--target-device", "vulkan",
            "--tuning-cache", str(tmp_path / "nope"))
    assert r.exit_code == 1 and "does not exist" in r.output and "\n" not in r.output.strip(), r.output


@pytest.mark.parametrize("runs", [False, True])
def test_a_configuration_reaches_the_generated_kernel(tmp_path: Path, runs: bool) -> None:
    """The tuned tile, depth and ownership are what the GLSL says (16-byte shared loads follow
    the runs), and the kernel still computes the product on lavapipe."""
    import halbench

    p = _square()
    key = problem_key(p.model_dump())
    cfg = GemmConfig(64, 32, 8, 4, 4, 1, runs)
    path, gemm, err = _compile(p, key, "vulkan", "llvmpipe", None, cfg, "descriptors", tmp_path / "c.hbx")
    assert err is None and gemm["config"] == cfg.to_dict()
    import dataclasses

    from halbench.compiler.codegen.glsl import glsl_sources
    from halbench.compiler.pipeline import run_pipeline
    from halbench.compiler.targets import resolve_target
    g = run_pipeline(build_graph(p))
    t = dataclasses.replace(resolve_target("vulkan", "llvmpipe"), gemm_configs=((key, cfg),))
    src = glsl_sources(g.ops[0], g, t, abis=("descriptors",))[1]["descriptors"]
    assert "local_size_x = 128" in src and ("shared vec4 As" in src) == runs
    uri = device_or_skip("vulkan://")
    a, b = (RNG.uniform(-1, 1, (96, 96)).astype(np.float32) for _ in range(2))
    with halbench.create_device(uri) as dev:
        ns, err = measure_bundle(dev, path, [a, b], reference(p, a, b).astype(np.float64), samples=1, warmup=0)
    assert err is None and ns > 0


def test_a_timing_after_idle_is_preceded_by_load(tmp_path: Path) -> None:
    """``warmup_s`` runs the kernel at least that long before its samples (GPUs lower their
    clocks while the next candidates compile): a floor on the call's wall time, not a speed."""
    import time

    import halbench

    uri = device_or_skip("vulkan://")
    p = _square()
    a, b = (RNG.uniform(-1, 1, (96, 96)).astype(np.float32) for _ in range(2))
    path, _, err = _compile(p, problem_key(p.model_dump()), "vulkan", "auto", uri, None, "descriptors",
                            tmp_path / "k.hbx")
    assert err is None, err
    with halbench.create_device(uri) as dev:
        t0 = time.monotonic()
        ns, err = measure_bundle(dev, path, [a, b], reference(p, a, b).astype(np.float64), samples=1, warmup=0,
                                 warmup_s=0.3)
        assert err is None and ns > 0
        assert time.monotonic() - t0 >= 0.3


def test_the_fastest_wide_tiles_are_retried_with_the_other_inner_loop() -> None:
    """frag_retries: the three fastest correct configurations with thread tiles of 32+ outputs,
    frag flipped; narrow, wrong, already-measured and unrunnable ones are left out; none on an API
    without the frag loop."""
    from halbench.tune.search import FRAG_RETRIES, Measured, frag_retries

    t = tuning_for("h100", "cuda")
    ms = [Measured(GemmConfig(32, 64, 16, 4, 4), 45.6e3),  # narrow (16 outputs a thread): not retried
          Measured(GemmConfig(64, 64, 16, 8, 4), 49.2e3),
          Measured(GemmConfig(64, 128, 16, 8, 8), 51.8e3),
          Measured(GemmConfig(128, 64, 16, 8, 8), 53.0e3),
          Measured(GemmConfig(128, 128, 8, 8, 8), 60.0e3),
          Measured(GemmConfig(64, 128, 8, 8, 8), None, "wrong result (relative error 1)")]
    flips = frag_retries(t, ms, 1)
    assert flips == [GemmConfig(64, 64, 16, 8, 4, frag=True), GemmConfig(64, 128, 16, 8, 8, frag=True),
                     GemmConfig(128, 64, 16, 8, 8, frag=True)]
    assert len(flips) == FRAG_RETRIES
    # one already measured with frag is not measured again; the next is taken instead
    ms.append(Measured(GemmConfig(64, 64, 16, 8, 4, frag=True), 42.2e3))
    assert GemmConfig(64, 64, 16, 8, 4, frag=True) not in frag_retries(t, ms, 1)
    assert GemmConfig(64, 64, 16, 8, 4) not in frag_retries(t, ms, 1)  # measured already
    assert frag_retries(tuning_for(None, "webgpu"), ms, 1) == []
