"""The ONNX model zoo's classic CNNs (zoo.classic): they are files as the zoo's old ones are
(IR 3, opset 6-9, weights among the graph inputs, old attributes), they have the real models'
parameter counts, and halbench compiles them and matches onnxruntime on the same file, on
local-sync:// and on vulkan:// (lavapipe).

Models whose compile or lavapipe run takes over ~20 s on two shared cores are marked slow
(AlexNet, ZFNet-512 and VGG-19 carry 240-580 MB of weights). Weights are the file's own: the
bundle's weights="random" draws N(0, 0.02) everywhere, which shrinks these deep nets to a
near-uniform softmax (and gives BatchNorm negative variances), against which any error would
look small.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from halbench.bench import zoo

ort = pytest.importorskip("onnxruntime")

TOLERANCE = 1e-4
CLASSIC = [n for n, m in zoo.ZOO.items() if m.family == "classic"]
#: Weights of hundreds of MB.
HUGE = {"zoo-alexnet", "zoo-zfnet512", "zoo-vgg19"}
#: Compile + local-sync run in a few seconds to ~20 s here: in the default run.
FAST_LOCAL = {"zoo-squeezenet", "zoo-squeezenet1.1", "zoo-shufflenet"}
#: Compile + lavapipe run in ~20 s or less: in the default run.
FAST_VULKAN = {"zoo-squeezenet1.1", "zoo-shufflenet"}


def _params(names: list[str], fast: set[str]) -> list:
    return [n if n in fast else pytest.param(n, marks=pytest.mark.slow) for n in names]


def _small(name: str) -> dict:
    # The file format does not depend on the input size: the huge ones are checked at 64x64
    # (their FC layers shrink with it), the rest as shipped.
    return {"resolution": 64} if name in HUGE else {}


def reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    from halbench.bench.reference import onnxruntime_session

    sess = onnxruntime_session(model)
    return sess.run(None, feeds)


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def attrs(node: onnx.NodeProto) -> dict:
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


# -- the file format -----------------------------------------------------------------------


@pytest.mark.parametrize("name", CLASSIC)
def test_files_are_as_the_old_zoo_files(name: str) -> None:
    model = zoo.build(name, **_small(name))
    entry = zoo.ZOO[name]
    opset = model.opset_import[0].version
    assert model.ir_version == 3
    assert opset == entry.opset and 6 <= opset <= 9
    inputs = {i.name for i in model.graph.input}
    weights = {t.name for t in model.graph.initializer}
    assert weights and weights <= inputs  # IR 3: every weight is also a graph input
    assert inputs - weights == {"data_0"}
    ops = {n.op_type for n in model.graph.node}
    for node in model.graph.node:
        a = attrs(node)
        if node.op_type == "BatchNormalization":
            assert ("spatial" in a) == (opset <= 8) and ("is_test" in a) == (opset <= 6)
        if node.op_type == "Dropout":
            assert ("is_test" in a) == (opset <= 6)
        if node.op_type == "Gemm":
            assert ("broadcast" in a) == (opset <= 6) and a["transB"] == 1
        if node.op_type == "Softmax":
            assert a == {"axis": 1}
    expected = {
        "zoo-alexnet": {"LRN", "Dropout", "Reshape", "Gemm", "Softmax"},
        "zoo-zfnet512": {"LRN", "Dropout", "Gemm"},
        "zoo-googlenet": {"LRN", "Concat", "Dropout", "AveragePool"},
        "zoo-inception-v2": {"BatchNormalization", "Concat", "AveragePool"},
        "zoo-shufflenet": {"Reshape", "Transpose", "BatchNormalization", "Concat"},
        "zoo-squeezenet": {"Concat", "Dropout", "GlobalAveragePool", "Softmax"},
        "zoo-squeezenet1.1": {"Concat", "Dropout", "GlobalAveragePool", "Softmax"},
        "zoo-resnet50": {"BatchNormalization", "Add", "Gemm"},
        "zoo-densenet121": {"BatchNormalization", "Concat", "AveragePool"},
        "zoo-vgg19": {"Dropout", "Gemm", "MaxPool"},
    }[name]
    assert expected <= ops, f"{name} lacks {expected - ops}"
    if name in ("zoo-alexnet",):
        assert sum(attrs(n).get("group", 1) == 2 for n in model.graph.node if n.op_type == "Conv") == 3
    if name == "zoo-shufflenet":  # the channel shuffle: 5-D reshapes around a group transpose
        perms = [attrs(n)["perm"] for n in model.graph.node if n.op_type == "Transpose"]
        assert perms and all(p == [0, 2, 1, 3, 4] for p in perms)


def test_opset_is_a_choice_within_the_family() -> None:
    for opset in (6, 7, 8, 9):
        m = zoo.build("zoo-squeezenet1.1", opset=opset)
        assert m.opset_import[0].version == opset and m.ir_version == 3
    with pytest.raises(Exception, match="outside what the classic zoo family emits"):
        zoo.build("zoo-squeezenet", opset=13)
    assert zoo.build("tiny-cnn").ir_version >= 7  # the modern family is untouched


@pytest.mark.parametrize("name", _params([n for n in CLASSIC if zoo.ZOO[n].reference_parameters],
                                         {"zoo-squeezenet", "zoo-squeezenet1.1", "zoo-densenet121",
                                          "zoo-resnet50"}))
def test_parameter_counts_are_the_real_models(name: str) -> None:
    # BatchNorm kept as nodes, running statistics not counted: as torchvision (and Caffe) count.
    assert zoo.count_parameters(zoo.build(name)) == zoo.ZOO[name].reference_parameters


@pytest.mark.parametrize("name", CLASSIC)
def test_outputs_are_informative(name: str) -> None:
    model = zoo.build(name, batch=2, **_small(name))
    out = reference(model, zoo.make_inputs(model))[0]
    assert out.shape[:2] == (2, 1000) and np.isfinite(out).all()
    flat = out.reshape(2, 1000)
    assert not np.allclose(flat[0], flat[1])
    if name != "zoo-densenet121":  # a softmax: a distribution, neither uniform nor one-hot
        np.testing.assert_allclose(flat.sum(axis=1), 1.0, rtol=1e-5)
        assert 2e-3 < flat.max() < 0.99


# -- compiled by halbench, against onnxruntime ---------------------------------------------


def _compile_and_run(name: str, tmp: Path, targets: tuple[str, ...], uris: list[str], *,
                     backend: dict[str, str] | None = None, timeout_s: float = 600.0, **opts: int) -> None:
    # timeout_s guards against a hang, it times nothing: ResNet-50, DenseNet-121 and VGG-19 (at
    # 112) take 55-65 s a run on lavapipe alone on two cores, and passed 60 s (and failed) with a
    # second lavapipe job beside them
    from halbench.compiler import CompileOptions, compile_model
    from halbench.drivers import create_device
    from halbench.runtime.module import Module
    from tests.compiler.helpers import device_or_skip

    def run_local(bundle: Path, feeds: dict, uri: str) -> list[np.ndarray]:
        with create_device(uri) as dev, Module.load(str(bundle), dev) as m:
            return m.invoke(None, feeds, timeout_s=timeout_s)

    uris = [device_or_skip(u) for u in uris]
    path = tmp / f"{name}.onnx"
    zoo.save(name, path, **opts)
    model = onnx.load(str(path))
    feeds = zoo.make_inputs(model)
    ref = reference(model, feeds)
    bundle = tmp / f"{name}.hbx"
    compile_model(path, CompileOptions(target_devices=targets, backend_options=backend or {})).write(bundle)
    for uri in uris:
        out = run_local(bundle, feeds, uri)
        assert len(out) == len(ref)
        for o, r in zip(out, ref, strict=True):
            assert o.shape == r.shape and np.isfinite(o).all()
            assert r.std() > 1e-3  # an informative reference: not a uniform softmax
            assert rel_err(o, r) <= TOLERANCE, f"{name} on {uri}: relative error {rel_err(o, r):.2e}"


@pytest.mark.parametrize("name", _params(CLASSIC, FAST_LOCAL))
def test_compiles_and_matches_onnxruntime_on_local_sync(name: str, tmp_path: Path) -> None:
    pytest.importorskip("iree.compiler")
    _compile_and_run(name, tmp_path, ("local",), ["local-sync://"])


@pytest.mark.parametrize("name", _params(CLASSIC, FAST_VULKAN))
def test_compiles_for_vulkan_and_matches_onnxruntime(name: str, tmp_path: Path) -> None:
    pytest.importorskip("iree.compiler")
    # The FC6 weights of AlexNet (151 MB), ZFNet-512 (302 MB) and VGG-19 (411 MB) at 224x224 exceed
    # lavapipe's maxStorageBufferRange (128 MB). Through the BDA ABI that limit does not apply, and
    # AlexNet and ZFNet-512 match at 224x224 (scripts/zoo_check.py --abi bda), VGG-19 too (below);
    # here all three run at 112x112 (38-75 MB), under the limit on both ABIs.
    opts = {"resolution": 112} if name in HUGE else {}
    _compile_and_run(name, tmp_path, ("vulkan", "local"), ["vulkan://", "local-sync://"], **opts)


@pytest.mark.slow
def test_vgg19_at_224_matches_onnxruntime_on_lavapipe_through_bda(tmp_path: Path) -> None:
    """VGG-19 as shipped (224x224, FC6 weights of 411 MB, past lavapipe's 128 MB
    maxStorageBufferRange) through the BDA ABI. One lavapipe run takes minutes on two shared
    cores: past the 60 s default timeout, which once freed the run's buffers under it (segfault).
    Opt-in (HALBENCH_HEAVY_TESTS=1): 6-11 minutes of lavapipe would double CI's time; the
    timeout-and-close path it found is covered in seconds by tests/runtime/test_timeout_close.py."""
    import os

    if os.environ.get("HALBENCH_HEAVY_TESTS") != "1":
        pytest.skip("VGG-19 at 224 runs 6-11 min on lavapipe: set HALBENCH_HEAVY_TESTS=1 to run it")
    pytest.importorskip("iree.compiler")
    _compile_and_run("zoo-vgg19", tmp_path, ("vulkan",), ["vulkan://"],
                     backend={"vulkan-dispatch-abi": "bda"}, timeout_s=1800.0)
