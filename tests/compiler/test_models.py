"""Whole zoo models: compile -> bundle -> local-sync:// against onnxruntime (1e-4 relative)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.compiler.helpers import compile_and_run, onnx_reference, rel_err

pytest.importorskip("iree.compiler")
pytest.importorskip("onnxruntime")
zoo = pytest.importorskip("halbench.bench.zoo")

# Each takes under ~5 s here (compile ~1 s, NumPy run < 1 s), so all stay in the default run.
# The webinar's models: PoseNet ~9 s, DeepLabV3 ~25 s to compile on two shared cores; the
# 24-layer MobileBERT is slow, its 2-layer variant stands in for it by default.
MODELS = ["tiny-cnn", "tiny-mlp", "tiny-bert", "mobilenetv2", "resnet50", "minilm-l6",
          "posenet", "deeplabv3", "tiny-mobilebert", pytest.param("mobilebert", marks=pytest.mark.slow)]


@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.onnx"
    zoo.save(name, str(path))
    feeds = zoo.make_inputs(name)
    ref = onnx_reference(path, feeds)
    out, cm = compile_and_run(path, feeds, tmp_path)
    assert len(out) == len(ref)
    for o, r in zip(out, ref):
        assert o.shape == r.shape and np.isfinite(o).all()
        assert rel_err(o, r) <= 1e-4, f"{name}: relative error {rel_err(o, r):.2e}"
    steps = cm.manifest.functions[0].steps
    assert all(s.flops >= 0 and s.bytes > 0 for s in steps if s.kind == "dispatch")


def test_random_weights_bundle_is_small_and_runs(tmp_path: Path) -> None:
    """weights="random": the model's float initializers are randomized (randomize_onnx); weights
    equal to them are declared, not stored, and so are those the compiler made of them (a
    transposed Gemm weight, by its derivation tree): the bundle stores no weight at all, and
    computes what onnxruntime computes on the randomized model."""
    from halbench.compiler import CompileOptions, compile_model

    path = tmp_path / "m.onnx"
    zoo.save("tiny-cnn", str(path))
    feeds = zoo.make_inputs("tiny-cnn")
    cm = compile_model(path, CompileOptions(weights="random"))
    stored = compile_model(path, CompileOptions())
    assert cm.statistics["weight_bytes"] < stored.statistics["weight_bytes"]
    assert sum(w.storage == "random" for w in cm.manifest.weights) >= 2
    assert all(w.storage == "random" for w in cm.manifest.weights), \
        [w.name for w in cm.manifest.weights if w.storage != "random"]
    assert any(w.derive is not None for w in cm.manifest.weights)  # the Gemm's transposed weight
    cm.write(tmp_path / "r.hbx")
    from tests.compiler.helpers import run_local

    out = run_local(tmp_path / "r.hbx", feeds)
    assert np.isfinite(out[0]).all()
    import onnx
    import onnxruntime as ort

    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

    m = onnx.load(str(path))
    randomize_onnx(m, RANDOM_SEED)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    ref = sess.run(None, dict(zip(names, feeds if isinstance(feeds, (list, tuple)) else [feeds[n] for n in names])))
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-4, atol=1e-5)
    stored.write(tmp_path / "s.hbx")
    plain = run_local(tmp_path / "s.hbx", feeds)
    assert not np.allclose(plain[0], out[0])  # the randomized model is another model


def test_random_weights_keep_batchnorm_variances(tmp_path: Path) -> None:
    """weights="random" leaves a BatchNormalization's variance as the model has it (random values
    are negative half the time and would make every output NaN, which the reference matches
    too); the other weights are random, the bundle stores the variance, and the outputs are
    finite and match onnxruntime on the same randomized model."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx
    from halbench.compiler import CompileOptions, compile_model
    from tests.compiler.helpers import run_local

    c = 6
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(np.float32), n) for n in ("scale", "var")]
    inits += [numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), n) for n in ("bias", "mean")]
    graph = helper.make_graph(
        [helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["b"]),
         helper.make_node("Relu", ["b"], ["y"])], "bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, c, 5, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, c, 5, 5])], inits)
    path = tmp_path / "bn.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    m = onnx.load(str(path))
    randomize_onnx(m, RANDOM_SEED)
    after = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    assert np.array_equal(after["var"], numpy_helper.to_array(inits[1]))
    assert not np.array_equal(after["scale"], numpy_helper.to_array(inits[0]))
    x = rng.standard_normal((2, c, 5, 5)).astype(np.float32)
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.isfinite(ref).all() and (ref > 0).any()
    cm = compile_model(path, CompileOptions(weights="random"))
    cm.write(tmp_path / "bn.hbx")
    out = run_local(tmp_path / "bn.hbx", {"x": x})[0]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
