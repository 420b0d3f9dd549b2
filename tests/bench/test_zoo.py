"""The model zoo: every model is valid ONNX, runs in onnxruntime with finite, informative
outputs, is a pure function of its seed, and has the real architecture's parameter count."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from halbench.bench import zoo
from halbench.errors import UserError

ort = pytest.importorskip("onnxruntime")


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds), strict=True))


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


# name, build kwargs, expected output shapes
CASES = [
    ("tiny-mlp", dict(batch=3), {"probabilities": (3, 10)}),
    ("tiny-cnn", dict(batch=2), {"logits": (2, 10)}),
    ("tiny-bert", dict(batch=2, seq=32), {"last_hidden_state": (2, 32, 64), "pooler_output": (2, 64)}),
    ("mobilenetv2", dict(), {"logits": (1, 1000)}),
    ("resnet50", dict(), {"logits": (1, 1000)}),
    ("minilm-l6", dict(seq=128), {"last_hidden_state": (1, 128, 384), "pooler_output": (1, 384)}),
    ("mobilebert", dict(batch=2, seq=64), {"last_hidden_state": (2, 64, 512), "pooler_output": (2, 512)}),
    ("deeplabv3", dict(), {"logits": (1, 21, 257, 257)}),
    ("posenet", dict(batch=2), {"heatmaps": (2, 17, 9, 9), "offsets": (2, 34, 9, 9),
                                "displacement_fwd": (2, 32, 9, 9), "displacement_bwd": (2, 32, 9, 9)}),
]


@pytest.fixture(scope="module")
def built() -> dict[str, onnx.ModelProto]:
    """Each case built once: the large ones take most of a second each."""
    return {name: zoo.build(name, **kwargs) for name, kwargs, _ in CASES}


@pytest.mark.parametrize("name, kwargs, shapes", CASES, ids=[c[0] for c in CASES])
def test_runs_in_onnxruntime(built, name, kwargs, shapes):
    model = built[name]
    onnx.checker.check_model(model, full_check=True)
    outs = run(model, zoo.make_inputs(name, **kwargs))
    assert {k: v.shape for k, v in outs.items()} == shapes
    for out in outs.values():
        assert out.dtype == np.float32
        assert np.isfinite(out).all()
        # Informative: neither constant nor collapsed to zero, and different per batch row.
        assert out.std() > 1e-2 and np.abs(out).mean() > 1e-2
        if out.shape[0] > 1:
            assert not np.allclose(out[0], out[1])


@pytest.mark.parametrize("name, reference", [
    ("mobilenetv2", 3_504_872), ("resnet50", 25_557_032), ("minilm-l6", 22_713_216)])
def test_parameter_counts_match_the_real_models(built, name, reference):
    # Folded BatchNorm turns (gamma, beta) into one bias, so the count is a little under
    # torchvision's; 2% is far below what a missing block or a wrong width would cost.
    assert zoo.ZOO[name].reference_parameters == reference
    assert zoo.count_parameters(built[name]) == pytest.approx(reference, rel=0.02)


@pytest.mark.parametrize("name", ["mobilenetv2", "resnet50"])
def test_unfolded_batchnorm_counts_exactly_as_torchvision(name):
    # With BatchNormalization kept, the layout is torchvision's parameter for parameter.
    model = zoo.build(name, fold_bn=False)
    assert zoo.count_parameters(model) == zoo.ZOO[name].reference_parameters
    assert any(n.op_type == "BatchNormalization" for n in model.graph.node)


def test_minilm_full_vocab_counts_exactly_as_hugging_face(built):
    assert zoo.count_parameters(built["minilm-l6"]) == 22_713_216
    small = zoo.build("minilm-l6", vocab_size=1000)
    assert zoo.count_parameters(small) == 22_713_216 - (30522 - 1000) * 384


def test_folded_and_unfolded_batchnorm_agree():
    for name in ("tiny-cnn", "mobilenetv2"):
        feeds = zoo.make_inputs(name)
        folded = run(zoo.build(name, fold_bn=True), feeds)["logits"]
        unfolded = run(zoo.build(name, fold_bn=False), feeds)["logits"]
        assert rel_err(folded, unfolded) < 1e-4


@pytest.mark.parametrize("opset", [13, 17, 18, 21])
def test_layer_norm_fused_and_decomposed_agree(opset):
    kwargs = dict(batch=2, seq=16, opset=opset)
    feeds = zoo.make_inputs("tiny-bert", **{k: v for k, v in kwargs.items() if k != "opset"})
    decomposed = zoo.build("tiny-bert", layer_norm="decomposed", **kwargs)
    assert not any(n.op_type == "LayerNormalization" for n in decomposed.graph.node)
    assert {"ReduceMean", "Sub", "Pow", "Sqrt", "Div"} <= {n.op_type for n in decomposed.graph.node}
    out = run(decomposed, feeds)
    if opset >= 17:
        fused = run(zoo.build("tiny-bert", **kwargs), feeds)
        for key in fused:
            assert rel_err(out[key], fused[key]) < 1e-4
    else:
        with pytest.raises(UserError, match="opset 17"):
            zoo.build("tiny-bert", **kwargs)


def test_bert_graph_has_the_exported_op_mix():
    ops = {n.op_type for n in zoo.build("tiny-bert", seq=8).graph.node}
    assert {"Gather", "LayerNormalization", "MatMul", "Transpose", "Softmax", "Div", "Erf",
            "Reshape", "Cast", "Unsqueeze", "Gemm", "Tanh"} <= ops


def test_mobilenet_uses_clip_as_relu6_and_depthwise_convs():
    model = zoo.build("mobilenetv2")
    ops = [n.op_type for n in model.graph.node]
    assert "Clip" in ops and "Relu" not in ops
    groups = [a.i for n in model.graph.node if n.op_type == "Conv" for a in n.attribute if a.name == "group"]
    assert sum(g > 1 for g in groups) == 17  # one depthwise conv per inverted residual block
    assert ops.count("Add") == 10  # residual connections in torchvision's layout


def test_mobilenet_width_multiplier():
    half = zoo.count_parameters(zoo.build("mobilenetv2", width_mult=0.5))
    full = zoo.count_parameters(zoo.build("mobilenetv2"))
    # The 1280-wide last conv and the classifier do not shrink below width 1.0.
    assert 1.5e6 < half < 0.6 * full


def test_resnet_layout():
    model = zoo.build("resnet50", num_classes=10)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Conv") == 53  # 1 stem + 16 bottlenecks x 3 + 4 downsamples
    assert ops.count("MaxPool") == 1 and ops.count("GlobalAveragePool") == 1
    assert model.graph.output[0].type.tensor_type.shape.dim[1].dim_value == 10


def test_deterministic_by_seed():
    a = zoo.build("tiny-bert", seed=7).SerializeToString()
    assert zoo.build("tiny-bert", seed=7).SerializeToString() == a
    assert zoo.build("tiny-bert", seed=8).SerializeToString() != a
    x, y = zoo.make_inputs("tiny-bert", seed=3), zoo.make_inputs("tiny-bert", seed=3)
    assert all(np.array_equal(x[k], y[k]) for k in x)
    z = zoo.make_inputs("tiny-bert", seed=4)
    assert not np.array_equal(x["input_ids"], z["input_ids"])


def test_bert_inputs_are_valid():
    specs = zoo.input_specs("minilm-l6", batch=4, seq=64)
    assert [s.name for s in specs] == ["input_ids", "attention_mask", "token_type_ids"]
    feeds = zoo.make_inputs("minilm-l6", batch=4, seq=64, seed=1)
    ids, mask, types = feeds["input_ids"], feeds["attention_mask"], feeds["token_type_ids"]
    assert ids.dtype == mask.dtype == types.dtype == np.int64
    assert ids.shape == mask.shape == types.shape == (4, 64)
    assert 0 <= ids.min() and ids.max() < 30522 and len(np.unique(ids)) > 32
    assert set(np.unique(types)) == {0, 1}
    assert set(np.unique(mask)) <= {0, 1} and (mask[:, 0] == 1).all()
    # Padding at the end only, and at least half of each row attended.
    assert (np.diff(mask, axis=1) <= 0).all() and (mask.sum(axis=1) >= 32).all()
    small = zoo.make_inputs("minilm-l6", vocab_size=100)["input_ids"]
    assert small.max() < 100


def test_inputs_from_model_metadata(built):
    model = built["tiny-bert"]
    from_model = zoo.make_inputs(model, seed=5)
    from_name = zoo.make_inputs("tiny-bert", batch=2, seq=32, seed=5)
    assert from_model.keys() == from_name.keys()
    assert all(np.array_equal(from_model[k], from_name[k]) for k in from_model)
    props = {p.key: p.value for p in model.metadata_props}
    assert props["halbench.zoo.name"] == "tiny-bert"
    assert json.loads(props["halbench.zoo.options"])["layers"] == 1
    stranger = onnx.helper.make_model(onnx.helper.make_graph([], "g", [], []))
    with pytest.raises(UserError, match="not built by the zoo"):
        zoo.make_inputs(stranger)


def test_save_writes_a_loadable_model(tmp_path):
    path = zoo.save("tiny-cnn", tmp_path / "sub" / "tiny.onnx", batch=2, seed=3)
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.onnx"]  # no temp file left
    loaded = onnx.load(str(path))
    assert loaded.SerializeToString() == zoo.build("tiny-cnn", batch=2, seed=3).SerializeToString()
    assert run(loaded, zoo.make_inputs(loaded))["logits"].shape == (2, 10)


def test_registry_and_names():
    assert {"mobilenetv2", "resnet50", "minilm-l6", "tiny-cnn", "tiny-mlp", "tiny-bert"} <= set(zoo.ZOO)
    for entry in zoo.ZOO.values():
        assert entry.description
        json.dumps(entry.to_dict())
    assert zoo.resolve_name("MobileNet_V2") == "mobilenetv2"
    assert zoo.resolve_name("ResNet-50") == "resnet50"
    assert zoo.resolve_name("all-MiniLM-L6-v2") == "minilm-l6"


def test_bad_requests_are_user_errors():
    with pytest.raises(UserError, match="did you mean.*resnet50"):
        zoo.build("resnet5")
    with pytest.raises(UserError, match="takes no option.*width_mult"):
        zoo.build("tiny-cnn", width_mult=2.0)
    with pytest.raises(UserError, match="opset"):
        zoo.build("tiny-mlp", opset=9)
    with pytest.raises(UserError, match="at least 1"):
        zoo.build("tiny-mlp", batch=0)
    with pytest.raises(UserError, match="positions"):
        zoo.build("tiny-bert", seq=1024)


def test_mobilebert_layout(built):
    """24 layers of the bottleneck body: NoNorm (no LayerNormalization), ReLU FFNs, 4 heads."""
    model = built["mobilebert"]
    ops = [n.op_type for n in model.graph.node]
    assert "LayerNormalization" not in ops and "ReduceMean" not in ops and "Erf" not in ops
    assert ops.count("Softmax") == 24 and ops.count("Relu") == 24 * 4
    inits = {t.name: tuple(t.dims) for t in model.graph.initializer}
    assert inits["embeddings.word_embeddings.weight"] == (30522, 128)
    assert inits["embeddings.embedding_transformation.weight"] == (384, 512)
    assert inits["encoder.layer.0.attention.self.value.weight"] == (512, 128)
    # The encoder without pre-training heads: a little under the paper's 25.3M.
    assert zoo.count_parameters(model) == pytest.approx(25.3e6, rel=0.04)


def test_deeplabv3_layout(built):
    """MobileNetV2 at depth 0.5 with atrous convs past output stride 8, the mobile ASPP, and
    an align-corners bilinear upsampling to the input size."""
    model = built["deeplabv3"]
    nodes = model.graph.node
    convs = [n for n in nodes if n.op_type == "Conv"]
    dilations = sorted({tuple(onnx.helper.get_attribute_value(a)) for n in convs for a in n.attribute
                        if a.name == "dilations"})
    assert dilations == [(2, 2), (4, 4)]
    strided = [n for n in convs if any(a.name == "strides" and list(a.ints) == [2, 2] for a in n.attribute)]
    assert len(strided) == 3  # output stride 8
    resize = [n for n in nodes if n.op_type == "Resize"]
    assert len(resize) == 1
    assert {a.name: a.s for a in resize[0].attribute}["coordinate_transformation_mode"] == b"align_corners"
    assert 0.6e6 < zoo.count_parameters(model) < 0.8e6  # the 2.7 MB TFLite file's size
    assert zoo.count_parameters(zoo.build("deeplabv3", output_stride=16)) == zoo.count_parameters(model)


def test_posenet_layout(built):
    model = built["posenet"]
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    assert len(convs) == 1 + 13 * 2 + 4  # stem, 13 depthwise-separable pairs, 4 heads
    assert sum(any(a.name == "group" and a.i > 1 for a in n.attribute) for n in convs) == 13
    # MobileNetV1 1.0's 3.2M parameters without its classifier, plus the 1x1 heads.
    assert zoo.count_parameters(model) == pytest.approx(3.2e6 + 1024 * 115, rel=0.02)
