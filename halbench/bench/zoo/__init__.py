"""The model zoo: real architectures built as ONNX with seeded weights, no download.

>>> from halbench.bench import zoo
>>> model = zoo.build("mobilenetv2", batch=1)          # an onnx.ModelProto
>>> feeds = zoo.make_inputs("mobilenetv2", batch=1)    # {"input": float32[1, 3, 224, 224]}
>>> zoo.save("minilm-l6", "minilm.onnx", seq=128)

A model is a pure function of its name, batch, sequence length, opset, seed and options, so the
compiler's tests, the suites and the reference runs all see the same weights. Weights are drawn
at realistic scales (He for convolutions, Xavier for linear layers, BERT's N(0, 0.02) for
embeddings, near-identity BatchNorm and LayerNorm with non-zero shifts) so activations stay
finite and informative through the whole network, and a dropped bias or scale shows.

Families: ``cnn``, ``transformer`` and ``mlp`` are emitted at opset 13 or later (the webinar's
MobileBERT, DeepLabV3 and PoseNet among them, mobile.py); ``classic`` models (classic.py) are
the ONNX model zoo's old CNNs as its files are: IR version 3, opset 6-9, weights among the graph
inputs, e.g. ``zoo.build("zoo-googlenet")`` or ``zoo.build("zoo-squeezenet", opset=6)``.

The model carries its input specs in its metadata (``halbench.zoo.inputs``), so
``make_inputs(model)`` works on a loaded file too.
"""

from __future__ import annotations

import difflib
import inspect
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from halbench.bench.zoo.bert import bert_inputs, build_bert
from halbench.bench.zoo.classic import (
    CLASSIC_OPSETS,
    LegacyGraphBuilder,
    build_alexnet,
    build_densenet121,
    build_googlenet,
    build_inception_v2,
    build_resnet50_v1,
    build_shufflenet,
    build_squeezenet,
    build_vgg19,
    build_zfnet512,
    classic_inputs,
)
from halbench.bench.zoo.cnn import (
    build_mobilenet_v2,
    build_resnet50,
    build_tiny_cnn,
    build_tiny_mlp,
    image_inputs,
    mlp_inputs,
)
from halbench.bench.zoo.graph import GraphBuilder
from halbench.bench.zoo.mobile import (
    build_deeplabv3,
    build_mobilebert,
    build_posenet,
    mobile_image_inputs,
    mobilebert_inputs,
)
from halbench.bench.zoo.spec import InputSpec
from halbench.errors import UserError

__all__ = [
    "CLASSIC_OPSETS",
    "MIN_OPSET",
    "ZOO",
    "InputSpec",
    "ZooModel",
    "build",
    "count_parameters",
    "input_specs",
    "make_inputs",
    "options",
    "resolve_name",
    "save",
]

#: The oldest opset the builders emit: Unsqueeze's axes as an input and Softmax on one axis
#: arrived in opset 13. Older files can be made with onnx.version_converter.
MIN_OPSET = 13

Builder = Callable[..., None]


@dataclass(frozen=True)
class ZooModel:
    name: str
    description: str
    family: str  # "cnn", "transformer", "mlp", "classic" (IR 3 / old-opset files, classic.py)
    builder: Builder
    inputs: Callable[..., list[InputSpec]]
    #: Options that differ from the builder's own defaults (a tiny BERT is a small BERT).
    defaults: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    #: The published parameter count of the real model (torchvision, Hugging Face), if any.
    reference_parameters: int | None = None
    #: Whether a build + onnxruntime run takes more than a few seconds.
    large: bool = False
    #: The opset a "classic" model is emitted at by default (its ONNX model-zoo file's).
    opset: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "family": self.family,
                "aliases": list(self.aliases), "options": options(self.name),
                "reference_parameters": self.reference_parameters, "large": self.large,
                **({"opset": self.opset} if self.opset else {})}


ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("mobilenetv2", "MobileNetV2 (torchvision layout): inverted residuals, expand ratio 6, "
             "ReLU6 as Clip, 224x224, 1000 classes", "cnn", build_mobilenet_v2, image_inputs,
             aliases=("mobilenet_v2", "mobilenet-v2"), reference_parameters=3_504_872),
    ZooModel("resnet50", "ResNet-50 v1.5 (torchvision layout): bottlenecks [3, 4, 6, 3], stride on "
             "the 3x3, 224x224, 1000 classes", "cnn", build_resnet50, image_inputs,
             aliases=("resnet-50", "resnet_50"), reference_parameters=25_557_032, large=True),
    ZooModel("minilm-l6", "MiniLM-L6-H384 BERT encoder (all-MiniLM-L6-v2's backbone): 6 layers, "
             "hidden 384, 12 heads, intermediate 1536, vocab 30522, with pooler", "transformer",
             build_bert, bert_inputs,
             aliases=("minilm", "minilm-l6-h384", "all-minilm-l6-v2", "bert-minilm"),
             reference_parameters=22_713_216, large=True),
    ZooModel("tiny-cnn", "A tiny CNN for fast tests: strided, depthwise and pointwise convs, "
             "a residual add, pools, Gemm; 32x32, 10 classes", "cnn", build_tiny_cnn, image_inputs),
    ZooModel("tiny-mlp", "A tiny MLP for fast tests: Gemm, ReLU, Gemm, Softmax; 64 features",
             "mlp", build_tiny_mlp, mlp_inputs),
    ZooModel("tiny-bert", "A 1-layer BERT encoder for fast tests: hidden 64, 4 heads, "
             "intermediate 128, vocab 1000, with pooler", "transformer", build_bert, bert_inputs,
             defaults={"vocab_size": 1000, "hidden": 64, "layers": 1, "heads": 4, "intermediate": 128}),
    # The Khronos webinar's mobile models (mobile.py), as TFLite ships them, in NCHW.
    ZooModel("mobilebert", "MobileBERT (google/mobilebert-uncased): 24 layers, body 512, bottleneck "
             "128, 4 heads, 4 stacked FFNs of 512, NoNorm, ReLU, trigram embeddings of 128",
             "transformer", build_mobilebert, mobilebert_inputs, aliases=("mobile-bert",), large=True),
    ZooModel("tiny-mobilebert", "A 2-layer MobileBERT for fast tests: the same layer, vocab 1000",
             "transformer", build_mobilebert, mobilebert_inputs, defaults={"vocab_size": 1000, "layers": 2}),
    ZooModel("deeplabv3", "DeepLabV3 as TFLite's deeplabv3_257_mv_gpu: MobileNetV2 backbone with "
             "atrous convs past output stride 8, mobile ASPP (image pooling + 1x1), 21 classes, "
             "bilinear upsampling to 257x257", "cnn", build_deeplabv3, mobile_image_inputs,
             aliases=("deeplabv3-mobilenetv2", "deeplab-v3", "deeplab"), large=True),
    ZooModel("posenet", "PoseNet as TFLite's posenet_mobilenet_v1_100_257x257: MobileNetV1 1.0, "
             "output stride 32, heatmaps (17), offsets (34), forward and backward displacements "
             "(32 each) on a 9x9 grid", "cnn", build_posenet, mobile_image_inputs,
             aliases=("posenet-mobilenet-v1", "pose-net")),
    # The ONNX model zoo's classic CNNs as its old Caffe2-converted files are (classic.py): IR 3,
    # weights among the graph inputs, opset 6-9 with that opset's attributes. Parameter counts
    # are the Caffe models' (AlexNet with its grouped convolutions) or torchvision's.
    ZooModel("zoo-alexnet", "AlexNet as the ONNX zoo's bvlc_alexnet: LRN, grouped convs 2/4/5, "
             "FC 4096-4096-1000, Softmax; IR 3, opset 9", "classic", build_alexnet, classic_inputs,
             aliases=("bvlc-alexnet",), reference_parameters=60_965_224, large=True, opset=9),
    ZooModel("zoo-zfnet512", "ZFNet-512 as the ONNX zoo ships it: 7x7/2 stem, LRN, convs 3-5 "
             "widened to 512/1024/512, FC 4096-4096-1000; IR 3, opset 9", "classic", build_zfnet512,
             classic_inputs, aliases=("zfnet512", "zfnet-512", "zoo-zfnet"), large=True, opset=9),
    ZooModel("zoo-googlenet", "GoogLeNet (Inception v1) as the zoo's bvlc_googlenet: LRN, nine "
             "inception modules, no auxiliary heads; IR 3, opset 8", "classic", build_googlenet,
             classic_inputs, aliases=("bvlc-googlenet", "zoo-inception-v1"), opset=8),
    ZooModel("zoo-inception-v2", "Inception-v2 (BN-Inception) as the zoo ships it: "
             "BatchNormalization after every conv, double 3x3 branches; IR 3, opset 9", "classic",
             build_inception_v2, classic_inputs, aliases=("inception-v2", "bn-inception"), opset=9),
    ZooModel("zoo-shufflenet", "ShuffleNet v1 1x, 3 groups, as the zoo ships it: grouped 1x1 "
             "convs, channel shuffle by Reshape/Transpose/Reshape; IR 3, opset 9", "classic",
             build_shufflenet, classic_inputs, aliases=("shufflenet", "shufflenet-v1"), opset=9),
    ZooModel("zoo-squeezenet", "SqueezeNet 1.0 as the zoo's squeezenet1.0: fire modules, conv "
             "classifier, Softmax over [N, 1000, 1, 1]; IR 3, opset 8", "classic", build_squeezenet,
             classic_inputs, aliases=("zoo-squeezenet1.0", "squeezenet1.0", "squeezenet"),
             reference_parameters=1_248_424, opset=8),
    ZooModel("zoo-squeezenet1.1", "SqueezeNet 1.1 as the zoo's squeezenet1.1: 3x3 stem, earlier "
             "pools; IR 3, opset 6 (upgraded by the compiler)", "classic", build_squeezenet,
             classic_inputs, defaults={"version": "1.1"}, aliases=("squeezenet1.1",),
             reference_parameters=1_235_496, opset=6),
    ZooModel("zoo-resnet50", "ResNet-50 v1 as the zoo's Caffe2 resnet50: stride on the first 1x1, "
             "BatchNormalization nodes, FC, Softmax; IR 3, opset 9", "classic", build_resnet50_v1,
             classic_inputs, aliases=("caffe2-resnet50",), reference_parameters=25_557_032,
             large=True, opset=9),
    ZooModel("zoo-densenet121", "DenseNet-121 as the zoo ships it: dense blocks 6/12/24/16, growth "
             "32, Concat per layer, 1x1-conv classifier [N, 1000, 1, 1]; IR 3, opset 9", "classic",
             build_densenet121, classic_inputs, aliases=("densenet121", "densenet-121"),
             reference_parameters=7_978_856, large=True, opset=9),
    ZooModel("zoo-vgg19", "VGG-19 as the zoo's Caffe2 vgg19: sixteen 3x3 convs, FC "
             "4096-4096-1000, Softmax; IR 3, opset 9", "classic", build_vgg19, classic_inputs,
             aliases=("vgg19", "vgg-19"), reference_parameters=143_667_240, large=True, opset=9),
)}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_BY_KEY = {_key(alias): m.name for m in ZOO.values() for alias in (m.name, *m.aliases)}


def resolve_name(name: str) -> str:
    """The zoo's canonical name for ``name`` (case, dashes and underscores ignored)."""
    canonical = _BY_KEY.get(_key(name))
    if canonical is None:
        known = sorted({*ZOO, *(a for m in ZOO.values() for a in m.aliases)})
        close = difflib.get_close_matches(name.lower(), known, n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UserError(f"unknown zoo model {name!r}{hint} (known: {', '.join(ZOO)})")
    return canonical


def options(name: str, **opts: Any) -> dict[str, Any]:
    """Every option of a zoo model with its value: the builder's defaults, the zoo entry's, then
    ``opts``. An option the model does not take is a UserError naming the ones it does."""
    entry = ZOO[resolve_name(name)]
    params = inspect.signature(entry.builder).parameters
    resolved = {k: p.default for k, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    unknown = sorted(set(opts) - set(resolved))
    if unknown:
        raise UserError(f"zoo model {entry.name!r} takes no option {', '.join(unknown)}; "
                        f"its options: {', '.join(sorted(resolved))}")
    return {**resolved, **entry.defaults, **opts}


def input_specs(name: str, batch: int = 1, seq: int = 128, **opts: Any) -> list[InputSpec]:
    """The inputs of a zoo model, in graph order, with how to generate valid data for each."""
    entry = ZOO[resolve_name(name)]
    _check_sizes(batch, seq)
    return entry.inputs(batch, seq, **options(name, **opts))


def build(name: str, batch: int = 1, seq: int = 128, opset: int | None = None, seed: int = 0,
          **opts: Any) -> onnx.ModelProto:
    """Build a zoo model as a checked ``onnx.ModelProto`` with static shapes.

    Parameters
    ----------
    name
        A zoo name or alias (``mobilenetv2``, ``resnet50``, ``minilm-l6``, ``tiny-bert``, ...).
    batch, seq
        Batch size; sequence length (transformers only).
    opset
        ONNX opset to emit: ``MIN_OPSET`` or later (default 17); for the ``classic`` family,
        ``CLASSIC_OPSETS`` (default: the opset of the model's ONNX-zoo file), IR version 3.
    seed
        Seed of the weights: the same seed gives the same model, byte for byte.
    opts
        Model options, see ``options(name)``: ``width_mult``, ``num_classes``, ``resolution``,
        ``fold_bn`` (CNNs); ``vocab_size``, ``layers``, ``hidden``, ``heads``, ``intermediate``,
        ``layer_norm="fused"|"decomposed"``, ``pooler`` (BERT).
    """
    entry = ZOO[resolve_name(name)]
    resolved = options(entry.name, **opts)
    specs = input_specs(entry.name, batch, seq, **opts)
    graph_name = entry.name.replace("-", "_").replace(".", "_")
    if entry.family == "classic":
        opset = entry.opset if opset is None else opset
        g: GraphBuilder = LegacyGraphBuilder(graph_name, opset, seed, batch)
    else:
        opset = 17 if opset is None else opset
        if opset < MIN_OPSET or opset > onnx.defs.onnx_opset_version():
            raise UserError(f"opset {opset} is outside what the zoo emits "
                            f"({MIN_OPSET} to {onnx.defs.onnx_opset_version()})")
        g = GraphBuilder(graph_name, opset, seed)
    entry.builder(g, specs, batch, seq, **resolved)
    metadata = {
        "halbench.zoo.name": entry.name,
        "halbench.zoo.seed": str(seed),
        "halbench.zoo.options": json.dumps({"batch": batch, "seq": seq, **resolved}, sort_keys=True),
        "halbench.zoo.inputs": json.dumps([s.to_dict() for s in specs]),
    }
    return g.finish(entry.description, metadata)


def make_inputs(model: str | onnx.ModelProto, batch: int = 1, seed: int = 0, seq: int = 128,
                **opts: Any) -> dict[str, np.ndarray]:
    """Valid, seeded, non-trivial inputs for a zoo model: by name (with the same ``batch``,
    ``seq`` and options as its ``build``), or from a built or loaded model's metadata."""
    if isinstance(model, onnx.ModelProto):
        props = {p.key: p.value for p in model.metadata_props}
        if "halbench.zoo.inputs" not in props:
            raise UserError(f"model {model.graph.name!r} was not built by the zoo: it has no input specs")
        specs = [InputSpec.from_dict(d) for d in json.loads(props["halbench.zoo.inputs"])]
    else:
        specs = input_specs(model, batch, seq, **opts)
    rng = np.random.default_rng(seed)
    return {s.name: s.generate(rng) for s in specs}


def save(name: str, path: str | os.PathLike[str], **kwargs: Any) -> Path:
    """Build a zoo model (``kwargs`` as for :func:`build`) and write it to ``path`` atomically."""
    model = build(name, **kwargs)
    from halbench.files import atomic_write

    # Written beside the target and renamed, so a crash never leaves a truncated model behind.
    return atomic_write(path, model.SerializeToString(), "model")


def count_parameters(model: onnx.ModelProto) -> int:
    """Trainable parameters, counted as PyTorch counts them: floating-point initializers of
    more than one element (scalars are structural constants), without BatchNorm's running
    statistics (buffers, not parameters)."""
    buffers = {n.input[i] for n in model.graph.node if n.op_type == "BatchNormalization" for i in (3, 4)}
    total = 0
    for t in model.graph.initializer:
        if t.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16):
            continue
        size = int(np.prod(t.dims)) if t.dims else 1
        if size > 1 and t.name not in buffers and not t.name.startswith("const_"):
            total += size
    return total


def _check_sizes(batch: int, seq: int) -> None:
    if batch < 1 or seq < 1:
        raise UserError(f"batch and sequence length must be at least 1 (got batch={batch}, seq={seq})")
