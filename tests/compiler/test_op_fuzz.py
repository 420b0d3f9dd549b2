"""Differential fuzzing of the ONNX import against onnxruntime: hypothesis draws one ONNX node
at a time (Conv, ConvTranspose, the pools, Gemm, the reductions, Slice, Pad, Softmax, Gather,
broadcasting arithmetic, the normalizations) with random shapes and attributes (asymmetric
pads, auto_pad, dilations, groups, ceil_mode, negative steps and axes, out-of-range slice
bounds, broadcasting operands), compiles it for local-sync:// and compares every element
with onnxruntime.

A drawn case passes when halbench's output matches, or when halbench refuses the model with
its one-line error (an operator form it does not take); a wrong number, another exception or a
shape that differs fails. Cases onnxruntime itself refuses are discarded. The conformance suite
covers each operator's listed forms; this covers the combinations nobody listed, which is where
the import's real-model bugs were found (an AveragePool with ceil_mode dividing its edge
windows by the whole window). CI runs a bounded, derandomized set; the ``fuzz`` marker with
HALBENCH_FUZZ_EXAMPLES=N runs more with fresh seeds (the nightly job).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")

from onnx import TensorProto, helper, numpy_helper

from halbench.compiler import CompileOptions, compile_model
from halbench.errors import HalbenchError
from tests.compiler.helpers import compile_for, device_or_skip, onnx_reference, run_local

pytestmark = pytest.mark.fuzz
_NIGHTLY = "HALBENCH_FUZZ_EXAMPLES" in os.environ
EXAMPLES = int(os.environ.get("HALBENCH_FUZZ_EXAMPLES", "12"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=not _NIGHTLY, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

OPSET = 18
_URIS = {"local": "local-sync://", "vulkan": "vulkan://"}


class Case:
    """One drawn model: its node, input shapes, constant operands and the elements' tolerance."""

    def __init__(self, op: str, inputs: dict[str, tuple[int, ...]], consts: dict[str, np.ndarray] | None = None,
                 order: list[str] | None = None, atol: float = 1e-5, out_type: int = TensorProto.FLOAT, **attrs):
        self.op, self.inputs, self.consts, self.attrs, self.atol = op, inputs, consts or {}, attrs, atol
        self.out_type, self.in_type, self.rtol = out_type, TensorProto.FLOAT, 1e-4
        self.order = order or [*inputs, *self.consts]

    def model(self) -> onnx.ModelProto:
        outputs = (["y"] + [f"y{i}" for i in range(1, len(self.consts["split"]))] if self.op == "Split"
                   else ["y", "indices"] if self.op == "TopK" else ["y"])
        node = helper.make_node(self.op, [n if n else "" for n in self.order], outputs,
                                **{k: v for k, v in self.attrs.items() if v is not None})
        return self._graph_model([node])

    def _graph_model(self, nodes: list) -> onnx.ModelProto:
        g = helper.make_graph(
            nodes, "fuzz",
            [helper.make_tensor_value_info(n, self.in_type, list(s)) for n, s in self.inputs.items()],
            [helper.make_tensor_value_info("y", self.out_type, None)],
            [numpy_helper.from_array(v, n) for n, v in self.consts.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        return m

    def __repr__(self) -> str:
        consts = {n: (v.tolist() if v.size <= 8 else v.shape) for n, v in self.consts.items()}
        half = ", f16" if self.in_type == TensorProto.FLOAT16 else ""
        return f"{self.op}(inputs={self.inputs}, consts={consts}, attrs={self.attrs}{half})"


def half(case: Case) -> Case:
    """``case`` in f16: its inputs, float constants and float output. halbench computes each
    element in f32 and rounds it once; onnxruntime's f16 kernels may round along the way, so
    the tolerance is a few f16 ulps of the output's scale (more where the op accumulates)."""
    case.in_type = TensorProto.FLOAT16
    case.consts = {n: v.astype(np.float16) if v.dtype == np.float32 else v for n, v in case.consts.items()}
    if case.out_type == TensorProto.FLOAT:
        case.out_type = TensorProto.FLOAT16
    case.atol, case.rtol = max(case.atol, 1e-2), 4e-3
    return case


def _check(case: Case, api: str = "local") -> None:
    rng = np.random.default_rng(0)
    dt = np.float16 if case.in_type == TensorProto.FLOAT16 else np.float32
    feeds = {n: rng.standard_normal(s).astype(dt) for n, s in case.inputs.items()}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        path = tmp / "m.onnx"
        onnx.save(case.model(), path)
        try:
            ref = onnx_reference(path, feeds)[0]
        except Exception:  # noqa: BLE001 -- a form onnxruntime refuses is not a case
            assume(False)
        assume(ref.size > 0 and np.all(np.isfinite(ref)))
        assume(_references_agree(case, feeds, ref))
        if os.environ.get("HB_FUZZ_TRACE"):
            print("CASE", case, flush=True)
        try:
            cm = compile_model(path, CompileOptions(target_devices=(api, "local")) if api != "local" else None)
        except HalbenchError as e:
            if os.environ.get("HB_FUZZ_TRACE"):
                print("REFUSED", str(e)[:200], flush=True)
            assert "\n" not in str(e).strip(), f"{case}: a refusal of more than one line: {e}"
            return
        bundle = tmp / "m.hbx"
        cm.write(bundle)
        out = run_local(bundle, feeds, _URIS[api])[0]  # a compiled model must run: a failure here is a bug
        assert out.shape == ref.shape, f"{case}: shape {out.shape}, onnxruntime {ref.shape}"
        bad = _close(out, ref, case.atol, case.rtol)
        assert not bad.any(), (f"{case}: {int(bad.sum())} of {ref.size} elements differ, first at "
                               f"{np.argwhere(bad)[0].tolist()}: {out[bad][0]} against {ref[bad][0]}")


def _close(out: np.ndarray, ref: np.ndarray, atol: float, rtol: float = 1e-4) -> np.ndarray:
    """Where ``out`` is not within the tolerance of ``ref`` (relative to ref's largest element)."""
    ref = np.asarray(ref, np.float64)
    scale = max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0
    return np.abs(out.astype(np.float64) - ref) > atol * scale + rtol * np.abs(ref)


def _references_agree(case: Case, feeds: dict[str, np.ndarray], ref: np.ndarray) -> bool:
    """Whether the ONNX reference implementation gives onnxruntime's answer: where the two
    disagree (an AveragePool with ceil_mode, count_include_pad and asymmetric pads) the standard
    is read two ways, and halbench follows the conformance suite's (the reference's) reading."""
    from onnx.reference import ReferenceEvaluator

    try:
        other = ReferenceEvaluator(case.model()).run(None, feeds)[0]
    except Exception:  # noqa: BLE001 -- a form the reference does not take: onnxruntime decides
        return True
    return other.shape == ref.shape and not _close(np.asarray(other), ref, case.atol, case.rtol).any()


_dim = st.integers(1, 7)


def _rand(rng_seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(rng_seed).standard_normal(shape).astype(np.float32)


@st.composite
def convs(draw) -> Case:
    n, g = draw(st.integers(1, 2)), draw(st.sampled_from([1, 1, 2, 3]))
    cin, cout = g * draw(st.integers(1, 3)), g * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(st.integers(kh, 9)), draw(st.integers(kw, 9))
    strides = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    dil = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    auto = draw(st.sampled_from([None, None, "SAME_UPPER", "SAME_LOWER", "VALID"]))
    pads = None if auto else [draw(st.integers(0, 2)) for _ in range(4)]
    consts = {"W": _rand(1, (cout, cin // g, kh, kw))}
    order = ["x", "W"]
    if draw(st.booleans()):
        consts["B"] = _rand(2, (cout,))
        order.append("B")
    return Case("Conv", {"x": (n, cin, h, w)}, consts, order, group=g, strides=strides, dilations=dil,
                pads=pads, auto_pad=auto, kernel_shape=[kh, kw] if draw(st.booleans()) else None)


@st.composite
def conv_transposes(draw) -> Case:
    n, g = draw(st.integers(1, 2)), draw(st.sampled_from([1, 1, 2]))
    cin, cout = g * draw(st.integers(1, 3)), g * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    h, w = draw(_dim), draw(_dim)
    strides = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    dil = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    opad = [draw(st.integers(0, max(0, s - 1))) for s in strides]
    pads = [draw(st.integers(0, 1)) for _ in range(4)]
    consts = {"W": _rand(3, (cin, cout // g, kh, kw))}
    order = ["x", "W"]
    if draw(st.booleans()):
        consts["B"] = _rand(4, (cout,))
        order.append("B")
    return Case("ConvTranspose", {"x": (n, cin, h, w)}, consts, order, group=g, strides=strides,
                dilations=dil, pads=pads, output_padding=opad if any(opad) else None)


@st.composite
def pools(draw) -> Case:
    op = draw(st.sampled_from(["MaxPool", "AveragePool", "LpPool"]))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    h, w = draw(st.integers(kh, 10)), draw(st.integers(kw, 10))
    strides = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    pads = [draw(st.integers(0, min(kh, kw) - 1)) for _ in range(4)] if min(kh, kw) > 1 else [0, 0, 0, 0]
    attrs = {"kernel_shape": [kh, kw], "strides": strides, "pads": pads}
    if op != "LpPool":
        attrs["ceil_mode"] = draw(st.sampled_from([0, 1]))
    if op == "AveragePool":
        attrs["count_include_pad"] = draw(st.sampled_from([0, 1]))
    if op == "MaxPool" and draw(st.booleans()):
        attrs["dilations"] = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    if op == "LpPool":
        attrs["p"] = draw(st.sampled_from([1, 2, 3]))
    return Case(op, {"x": (draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w)}, **attrs)


@st.composite
def gemms(draw) -> Case:
    m, k, n = draw(_dim), draw(_dim), draw(_dim)
    ta, tb = draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1]))
    consts = {"B": _rand(5, (n, k) if tb else (k, n))}
    order = ["a", "B"]
    c = draw(st.sampled_from([None, (), (n,), (1, n), (m, 1), (m, n)]))
    if c is not None:
        consts["C"] = _rand(6, c)
        order.append("C")
    return Case("Gemm", {"a": (k, m) if ta else (m, k)}, consts, order, transA=ta, transB=tb,
                alpha=draw(st.sampled_from([None, 1.0, 0.5, -2.0])), beta=draw(st.sampled_from([None, 1.0, 0.0, 3.0])))


@st.composite
def reductions(draw) -> Case:
    op = draw(st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                               "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare"]))
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    axes = draw(st.lists(st.integers(-rank, rank - 1), min_size=0, max_size=rank, unique_by=lambda a: a % rank))
    consts = {"axes": np.array(axes, np.int64)} if axes or draw(st.booleans()) else {}
    return Case(op, {"x": shape}, consts, ["x", *consts], keepdims=draw(st.sampled_from([None, 0, 1])),
                noop_with_empty_axes=draw(st.sampled_from([None, 0, 1])), atol=1e-4)


@st.composite
def slices(draw) -> Case:
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    axes = draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda a: a % rank))
    starts, ends, steps = [], [], []
    for a in axes:
        d = shape[a]
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        starts.append(draw(st.integers(-d - 2, d + 2)))
        ends.append(draw(st.sampled_from([draw(st.integers(-d - 2, d + 2)), 2**62, -(2**62)])))
        steps.append(step)
    consts = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64),
              "axes": np.array(axes, np.int64), "steps": np.array(steps, np.int64)}
    return Case("Slice", {"x": shape}, consts)


@st.composite
def pads(draw) -> Case:
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(2, 5)) for _ in range(rank))
    mode = draw(st.sampled_from(["constant", "reflect", "edge", "wrap"]))
    lo = -1 if mode == "constant" else 0
    amounts = [draw(st.integers(lo, 2 if mode != "reflect" else 1)) for _ in range(2 * rank)]
    consts = {"pads": np.array(amounts, np.int64)}
    order = ["x", "pads"]
    if mode == "constant" and draw(st.booleans()):
        consts["value"] = np.array(draw(st.sampled_from([0.0, 1.5, -3.0])), np.float32)
        order.append("value")
    return Case("Pad", {"x": shape}, consts, order, mode=mode)


@st.composite
def softmaxes(draw) -> Case:
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    return Case(draw(st.sampled_from(["Softmax", "LogSoftmax", "Hardmax"])), {"x": shape},
                axis=draw(st.integers(-rank, rank - 1)))


@st.composite
def gathers(draw) -> Case:
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    axis = draw(st.integers(-rank, rank - 1))
    d = shape[axis]
    if draw(st.booleans()):
        ishape = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2))))
        idx = np.array(draw(st.lists(st.integers(-d, d - 1), min_size=int(np.prod(ishape)),
                                     max_size=int(np.prod(ishape)))), np.int64).reshape(ishape)
        return Case("Gather", {"x": shape}, {"i": idx}, axis=axis)
    ishape = list(shape)
    ishape[axis] = draw(st.integers(1, 4))
    n = int(np.prod(ishape))
    idx = np.array(draw(st.lists(st.integers(-d, d - 1), min_size=n, max_size=n)), np.int64).reshape(ishape)
    return Case("GatherElements", {"x": shape}, {"i": idx}, axis=axis)


def _broadcastable(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape``: a suffix of it, some dims set to 1."""
    k = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.booleans()) else s for s in shape[len(shape) - k:])


@st.composite
def arithmetic(draw) -> Case:
    op = draw(st.sampled_from(["Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", "Mod", "Pow"]))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 4))))
    other = _broadcastable(draw, shape)
    if draw(st.booleans()):
        shape, other = other, shape
    if op == "PRelu":  # the slope broadcasts to x (unidirectional)
        shape, other = (shape, other) if len(shape) >= len(other) else (other, shape)
        other = _broadcastable(draw, shape)
    consts = {"b": _rand(7, other)}
    attrs = {}
    if op == "Div":
        consts["b"] = np.where(np.abs(consts["b"]) < 0.25, 1.0, consts["b"]).astype(np.float32)
    if op == "Mod":
        attrs["fmod"] = 1
        consts["b"] = np.where(np.abs(consts["b"]) < 0.25, 1.0, consts["b"]).astype(np.float32)
    if op == "Pow":
        consts["b"] = np.round(consts["b"] * 2).astype(np.float32)  # integral exponents: real results
    return Case(op, {"x": shape}, consts, atol=1e-4, **attrs)


@st.composite
def norms(draw) -> Case:
    op = draw(st.sampled_from(["LayerNormalization", "InstanceNormalization", "BatchNormalization",
                               "LpNormalization", "MeanVarianceNormalization"]))
    rank = draw(st.integers(2 if op != "LayerNormalization" else 1, 4))
    if op in ("InstanceNormalization", "BatchNormalization"):
        rank = max(rank, 3)
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    eps = draw(st.sampled_from([None, 1e-5, 1e-3]))
    if op == "LayerNormalization":
        axis = draw(st.integers(-rank, rank - 1))
        norm = shape[axis:]
        consts = {"scale": _rand(8, norm)}
        if draw(st.booleans()):
            consts["bias"] = _rand(9, norm)
        return Case(op, {"x": shape}, consts, axis=axis, epsilon=eps, atol=1e-4)
    if op == "InstanceNormalization":
        return Case(op, {"x": shape}, {"scale": _rand(8, (shape[1],)), "bias": _rand(9, (shape[1],))},
                    epsilon=eps, atol=1e-4)
    if op == "BatchNormalization":
        var = np.abs(_rand(10, (shape[1],))) + 0.1
        return Case(op, {"x": shape}, {"scale": _rand(8, (shape[1],)), "bias": _rand(9, (shape[1],)),
                                       "mean": _rand(11, (shape[1],)), "var": var.astype(np.float32)},
                    epsilon=eps, atol=1e-4)
    if op == "LpNormalization":
        return Case(op, {"x": shape}, axis=draw(st.integers(-rank, rank - 1)), p=draw(st.sampled_from([1, 2])),
                    atol=1e-4)
    axes = sorted(set(draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank))))
    return Case(op, {"x": shape}, axes=axes, atol=1e-4)


@st.composite
def resizes(draw) -> Case:
    rank = draw(st.sampled_from([3, 4]))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    mode = draw(st.sampled_from(["nearest", "linear", "cubic"]))
    ctm = draw(st.sampled_from(["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                "half_pixel_symmetric"]))
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm}
    if mode == "nearest":
        attrs["nearest_mode"] = draw(st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
    if mode == "cubic":
        attrs["cubic_coeff_a"] = draw(st.sampled_from([-0.75, -0.5]))
        attrs["exclude_outside"] = draw(st.sampled_from([0, 1]))
    spatial = rank - 2
    if draw(st.booleans()):
        scales = [1.0, 1.0] + [draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])) for _ in range(spatial)]
        consts = {"roi": np.array([], np.float32), "scales": np.array(scales, np.float32)}
        order = ["x", "roi", "scales"]
    else:
        sizes = [*shape[:2], *(draw(st.integers(1, 9)) for _ in range(spatial))]
        consts = {"roi": np.array([], np.float32), "sizes": np.array(sizes, np.int64)}
        order = ["x", "roi", "", "sizes"]
    return Case("Resize", {"x": shape}, consts, order, atol=1e-4, **attrs)


@st.composite
def movements(draw) -> Case:
    op = draw(st.sampled_from(["Transpose", "Tile", "Expand", "DepthToSpace", "SpaceToDepth", "Trilu",
                               "Flatten", "CumSum", "Concat", "Split"]))
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    if op == "Transpose":
        return Case(op, {"x": shape}, perm=draw(st.permutations(range(rank))))
    if op == "Tile":
        return Case(op, {"x": shape}, {"r": np.array([draw(st.integers(1, 3)) for _ in shape], np.int64)})
    if op == "Expand":
        to = [1 if draw(st.booleans()) else d for d in shape]
        to = [draw(st.integers(2, 3)) if d == 1 and draw(st.booleans()) else d for d in shape]
        lead = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 1)))]
        return Case(op, {"x": shape}, {"s": np.array(lead + to, np.int64)})
    if op in ("DepthToSpace", "SpaceToDepth"):
        bs = draw(st.integers(1, 3))
        n, c, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
        if op == "DepthToSpace":
            return Case(op, {"x": (n, c * bs * bs, h, w)}, blocksize=bs, mode=draw(st.sampled_from(["DCR", "CRD"])))
        return Case(op, {"x": (n, c, h * bs, w * bs)}, blocksize=bs)
    if op == "Trilu":
        rank = max(rank, 2)
        shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
        return Case(op, {"x": shape}, {"k": np.array(draw(st.integers(-4, 4)), np.int64)},
                    upper=draw(st.sampled_from([0, 1])))
    if op == "Flatten":
        return Case(op, {"x": shape}, axis=draw(st.integers(-rank, rank)))
    if op == "CumSum":
        return Case(op, {"x": shape}, {"axis": np.array(draw(st.integers(-rank, rank - 1)), np.int64)},
                    exclusive=draw(st.sampled_from([0, 1])), reverse=draw(st.sampled_from([0, 1])), atol=1e-4)
    axis = draw(st.integers(-rank, rank - 1))
    if op == "Concat":
        other = list(shape)
        other[axis] = draw(st.integers(1, 4))
        return Case(op, {"x": shape}, {"b": _rand(12, tuple(other))}, axis=axis)
    d = shape[axis]
    cuts = sorted(draw(st.lists(st.integers(0, d), min_size=1, max_size=3)))
    sizes = np.diff([0, *cuts, d]).astype(np.int64)
    # the first part as the output (Split's other outputs are left unnamed)
    return Case(op, {"x": shape}, {"split": sizes}, axis=axis)


@st.composite
def unaries(draw) -> Case:
    op = draw(st.sampled_from(["Erf", "Elu", "Selu", "LeakyRelu", "HardSigmoid", "HardSwish", "Softplus",
                               "Softsign", "Mish", "Gelu", "Celu", "ThresholdedRelu", "Shrink", "Clip", "Sign",
                               "Round", "Floor", "Ceil", "Reciprocal", "Sigmoid", "Tanh", "Atan", "Sinh", "Asinh"]))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 3))))
    attrs: dict = {}
    consts: dict = {}
    order = None
    if op in ("Elu", "LeakyRelu", "Celu", "ThresholdedRelu"):
        attrs["alpha"] = draw(st.sampled_from([None, 0.1, 0.5, 2.0]))
    if op == "Gelu":
        attrs["approximate"] = draw(st.sampled_from(["none", "tanh"]))
    if op == "HardSigmoid":
        attrs["alpha"], attrs["beta"] = draw(st.sampled_from([None, 0.1, 0.3])), draw(st.sampled_from([None, 0.2, 0.6]))
    if op == "Shrink":
        attrs["lambd"], attrs["bias"] = draw(st.sampled_from([None, 0.3, 1.0])), draw(st.sampled_from([None, 0.0, 0.5]))
    if op == "Clip":
        lo, hi = draw(st.sampled_from([None, -0.5, 0.0])), draw(st.sampled_from([None, 0.5, 1.0]))
        order = ["x"]
        if lo is not None:
            consts["lo"] = np.array(lo, np.float32)
        order.append("lo" if lo is not None else "")
        if hi is not None:
            consts["hi"] = np.array(hi, np.float32)
            order.append("hi")
    return Case(op, {"x": shape}, consts, order, atol=1e-4, **attrs)


@st.composite
def index_reductions(draw) -> Case:
    op = draw(st.sampled_from(["ArgMax", "ArgMin"]))
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    return Case(op, {"x": shape}, axis=draw(st.integers(-rank, rank - 1)), keepdims=draw(st.sampled_from([0, 1])),
                select_last_index=draw(st.sampled_from([0, 1])), out_type=TensorProto.INT64)


@st.composite
def matmuls(draw) -> Case:
    m, k, n = draw(_dim), draw(_dim), draw(_dim)
    batch_a = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))]
    batch_b = [1 if draw(st.booleans()) else d for d in batch_a][len(batch_a) - draw(st.integers(0, len(batch_a))):]
    a_shape = (*batch_a, m, k) if draw(st.integers(0, 4)) else (k,)
    b_shape = (*batch_b, k, n) if draw(st.integers(0, 4)) else (k,)
    if len(a_shape) == 1 and len(b_shape) == 1:
        b_shape = (k, n)
    if draw(st.booleans()):
        return Case("MatMul", {"a": a_shape}, {"b": _rand(13, b_shape)}, atol=1e-4)
    return Case("MatMul", {"a": a_shape, "b": b_shape}, atol=1e-4)


@st.composite
def einsums(draw) -> Case:
    eq, shapes = draw(st.sampled_from([
        ("ij,jk->ik", ((3, 4), (4, 5))), ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))), ("ij->ji", ((3, 4),)),
        ("ii->i", ((4, 4),)), ("ij->", ((3, 4),)), ("i,j->ij", ((3,), (4,))), ("bhqd,bhkd->bhqk", ((1, 2, 3, 4), (1, 2, 5, 4))),
        ("ijk->kj", ((2, 3, 4),)), ("ij,ij->i", ((3, 4), (3, 4))), ("...ij,...jk->...ik", ((2, 3, 4), (4, 2)))]))
    names = ["a", "b"][:len(shapes)]
    return Case("Einsum", dict(zip(names, shapes)), equation=eq, atol=1e-4)


@st.composite
def convs_nd(draw) -> Case:
    n_sp = draw(st.sampled_from([1, 3]))
    cin, cout = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ks = [draw(st.integers(1, 3)) for _ in range(n_sp)]
    sp = [draw(st.integers(k, 6)) for k in ks]
    pads = [draw(st.integers(0, 1)) for _ in range(2 * n_sp)]
    return Case("Conv", {"x": (1, cin, *sp)}, {"W": _rand(14, (cout, cin, *ks))}, ["x", "W"],
                strides=[draw(st.integers(1, 2)) for _ in ks], dilations=[draw(st.integers(1, 2)) for _ in ks],
                pads=pads, atol=1e-4)



@st.composite
def conv_transposes_3d(draw) -> Case:
    cin, cout = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    ks = [draw(st.integers(1, 3)) for _ in range(3)]
    sp = [draw(st.integers(1, 4)) for _ in range(3)]
    strides = [draw(st.integers(1, 2)) for _ in range(3)]
    consts = {"W": _rand(17, (cin, cout, *ks))}
    if draw(st.booleans()):
        consts["B"] = _rand(18, (cout,))
    return Case("ConvTranspose", {"x": (draw(st.integers(1, 2)), cin, *sp)}, consts, ["x", *consts],
                strides=strides, dilations=[draw(st.integers(1, 2)) for _ in range(3)],
                pads=[draw(st.integers(0, 1)) for _ in range(6)],
                output_padding=[draw(st.integers(0, s - 1)) for s in strides], atol=1e-4)


@st.composite
def scatters(draw) -> Case:
    op = draw(st.sampled_from(["ScatterElements", "ScatterND", "GatherND"]))
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 5)) for _ in range(rank))
    if op == "ScatterElements":
        axis = draw(st.integers(-rank, rank - 1))
        ushape = tuple(draw(st.integers(1, d)) for d in shape)
        n = int(np.prod(ushape))
        d = shape[axis]
        # distinct indices along the axis per position (duplicates make 'none' order-dependent)
        rows = [draw(st.permutations(range(-d, 0) if draw(st.booleans()) else range(d)))[:ushape[axis]]
                for _ in range(n // ushape[axis])]
        idx = np.moveaxis(np.array(rows, np.int64).reshape(*[u for i, u in enumerate(ushape) if i != axis % rank],
                                                           ushape[axis]), -1, axis % rank)
        red = draw(st.sampled_from([None, "add", "mul", "max", "min"]))
        return Case(op, {"x": shape}, {"i": np.ascontiguousarray(idx), "u": _rand(19, ushape)}, axis=axis,
                    reduction=red, atol=1e-4)
    k = draw(st.integers(1, rank))
    m = draw(st.integers(1, 4))
    if op == "GatherND":
        idx = np.array([[draw(st.integers(-shape[j], shape[j] - 1)) for j in range(k)] for _ in range(m)], np.int64)
        return Case(op, {"x": shape}, {"i": idx})
    cells = list(np.ndindex(*shape[:k]))
    picks = draw(st.permutations(range(len(cells))))[:min(m, len(cells))]
    idx = np.array([cells[p] for p in picks], np.int64).reshape(len(picks), k)
    return Case(op, {"x": shape}, {"i": idx, "u": _rand(20, (len(picks), *shape[k:]))},
                reduction=draw(st.sampled_from([None, "add", "mul", "max", "min"])), atol=1e-4)


@st.composite
def selects(draw) -> Case:
    shape = tuple(draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 3))))
    cshape = _broadcastable(draw, shape)
    oshape = _broadcastable(draw, shape)
    cond = np.random.default_rng(21).random(cshape) > 0.5
    return Case("Where", {"x": shape}, {"c": cond, "o": _rand(22, oshape)}, ["c", "x", "o"])


@st.composite
def quantized(draw) -> Case:
    shape = tuple(draw(st.integers(1, 5)) for _ in range(draw(st.integers(1, 3))))
    rank = len(shape)
    zt = draw(st.sampled_from([np.uint8, np.int8]))
    per_axis = draw(st.booleans()) and rank > 1
    axis = draw(st.integers(-rank, rank - 1)) if per_axis else None
    sshape = (shape[axis],) if per_axis else ()
    scale = (np.abs(_rand(23, sshape)) * 0.05 + 0.01).astype(np.float32)
    zp = np.asarray(np.random.default_rng(24).integers(-5 if zt == np.int8 else 0, 6, size=sshape), zt)
    q = Case("QuantizeLinear", {"x": shape}, {"s": scale, "z": zp}, axis=axis, out_type=(
        TensorProto.UINT8 if zt == np.uint8 else TensorProto.INT8), atol=0.0)
    return q


@st.composite
def topks(draw) -> Case:
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    axis = draw(st.integers(-rank, rank - 1))
    k = draw(st.integers(1, shape[axis]))
    return Case("TopK", {"x": shape}, {"k": np.array([k], np.int64)}, axis=axis,
                largest=draw(st.sampled_from([0, 1])), sorted=1)



class GraphCase(Case):
    """A drawn graph of several nodes (the shapes the compiler's fusions look for: GEMM and
    convolution epilogues, residuals, normalizations, attention, GEMMs sharing an input), with the
    same interface as a one-node Case; its output is ``y``."""

    def __init__(self, label: str, nodes: list, inputs: dict[str, tuple[int, ...]],
                 consts: dict[str, np.ndarray], atol: float = 1e-4):
        super().__init__(label, inputs, consts, atol=atol)
        self.nodes, self.rtol = nodes, 1e-4

    def model(self) -> onnx.ModelProto:
        return self._graph_model(self.nodes)

    def __repr__(self) -> str:
        def attrs(n: onnx.NodeProto) -> str:
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            return f"{a}" if a else ""

        body = "; ".join(f"{','.join(n.output)}={n.op_type}({','.join(n.input)}){attrs(n)}" for n in self.nodes)
        consts = {n: list(v.shape) for n, v in self.consts.items()}
        return f"{self.op}(inputs={self.inputs}, consts={consts}: {body})"


class _G:
    """Builds a GraphCase's nodes and constants (weights scaled to keep values near 1)."""

    def __init__(self, seed: int):
        self.nodes: list = []
        self.consts: dict[str, np.ndarray] = {}
        self.rng = np.random.default_rng(seed)

    def const(self, v: np.ndarray) -> str:
        name = f"c{len(self.consts)}"
        self.consts[name] = v
        return name

    def weight(self, shape: tuple[int, ...], fan_in: int) -> str:
        return self.const((self.rng.standard_normal(shape) / np.sqrt(max(1, fan_in))).astype(np.float32))

    def op(self, op: str, inputs: list[str], out: str | None = None, **attrs) -> str:
        out = out or f"t{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def act(self, x: str, kind: str) -> str:
        if kind == "Relu":
            return self.op("Relu", [x])
        if kind == "Clip6":
            return self.op("Clip", [x, self.const(np.array(0, np.float32)), self.const(np.array(6, np.float32))])
        if kind == "Gelu":  # the erf form exporters write
            e = self.op("Erf", [self.op("Div", [x, self.const(np.array(np.sqrt(2), np.float32))])])
            h = self.op("Mul", [x, self.op("Add", [e, self.const(np.array(1, np.float32))])])
            return self.op("Mul", [h, self.const(np.array(0.5, np.float32))])
        if kind == "SiLU":
            return self.op("Mul", [x, self.op("Sigmoid", [x])])
        if kind == "HardSwish":
            return self.op("HardSwish", [x])
        return self.op(kind, [x])  # Sigmoid, Tanh

    def layer_norm(self, x: str, d: int) -> str:
        return self.op("LayerNormalization", [x, self.const((1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32)),
                                              self.const((0.1 * self.rng.standard_normal(d)).astype(np.float32))],
                       axis=-1, epsilon=1e-5)

    def case(self, label: str, last: str, inputs: dict[str, tuple[int, ...]], atol: float = 1e-4) -> GraphCase:
        self.nodes[-1].output[0] = "y"
        for n in self.nodes:  # (the last node's output was renamed)
            for j, v in enumerate(n.input):
                if v == last:
                    n.input[j] = "y"
        return GraphCase(label, self.nodes, inputs, self.consts, atol)


_ACTS = ["Relu", "Gelu", "Sigmoid", "Tanh", "SiLU", "Clip6", "HardSwish"]


@st.composite
def mlp_chains(draw) -> GraphCase:
    """MatMul / Gemm layers with bias, activation, residual and LayerNorm epilogues."""
    g = _G(draw(st.integers(0, 1000)))
    rank3 = draw(st.booleans())
    b, s = draw(st.integers(1, 3)), draw(st.integers(1, 9))
    k = draw(st.sampled_from([1, 3, 8, 16, 33, 64, 130]))
    shape = (b, s, k) if rank3 else (b * s, k)
    x = cur = "x"
    width = k
    for _ in range(draw(st.integers(1, 3))):
        n = draw(st.sampled_from([width, 1, 5, 16, 40, 96, 257]))
        if not rank3 and draw(st.booleans()):
            cur = g.op("Gemm", [cur, g.weight((n, width), width), g.weight((n,), 1)], transB=1,
                       alpha=draw(st.sampled_from([1.0, 0.5])))
        else:
            cur = g.op("MatMul", [cur, g.weight((width, n), width)])
            if draw(st.booleans()):
                cur = g.op("Add", [cur, g.weight((n,), 1)])
        prev_width, width = width, n
        if draw(st.booleans()):
            cur = g.act(cur, draw(st.sampled_from(_ACTS)))
        if width == prev_width and draw(st.booleans()):
            cur = g.op("Add", [cur, x])  # a residual
        if draw(st.booleans()):
            cur = g.layer_norm(cur, width)
        x = cur
    if len(g.nodes) == 0:
        cur = g.op("Relu", [cur])
    return g.case("MLP", cur, {"x": shape}, atol=2e-4)


@st.composite
def conv_chains(draw) -> GraphCase:
    """Convolutions (3x3 ones Winograd can take, depthwise, strided, 1x1) with BatchNorm,
    activations and residuals, optionally ending in global pooling and a classifier."""
    g = _G(draw(st.integers(0, 1000)))
    n, c = draw(st.integers(1, 2)), draw(st.sampled_from([1, 3, 4, 8, 16]))
    h, w = draw(st.integers(4, 14)), draw(st.integers(4, 14))
    shape = (n, c, h, w)
    x = cur = "x"
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["3x3", "3x3", "1x1", "dw", "5x5", "strided"]))
        cout = c if kind == "dw" else draw(st.sampled_from([c, 2, 8, 24]))
        k = {"3x3": 3, "1x1": 1, "dw": 3, "5x5": 5, "strided": 3}[kind]
        group = c if kind == "dw" else 1
        stride = 2 if kind == "strided" else 1
        ins = [cur, g.weight((cout, c // group, k, k), c // group * k * k)]
        if draw(st.booleans()):
            ins.append(g.weight((cout,), 1))
        cur = g.op("Conv", ins, kernel_shape=[k, k], pads=[k // 2] * 4, strides=[stride, stride], group=group)
        if draw(st.booleans()):
            cur = g.op("BatchNormalization", [cur, g.const((1 + 0.2 * g.rng.standard_normal(cout)).astype(np.float32)),
                                              g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32)),
                                              g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32)),
                                              g.const((0.5 + g.rng.random(cout)).astype(np.float32))], epsilon=1e-5)
        if draw(st.booleans()):
            cur = g.act(cur, draw(st.sampled_from(_ACTS)))
        if cout == c and stride == 1 and draw(st.booleans()):
            cur = g.op("Add", [cur, x])
        c = cout
        x = cur
    if draw(st.booleans()):
        pooled = g.op("Flatten", [g.op("GlobalAveragePool", [cur])], axis=1)
        classes = draw(st.sampled_from([1, 10]))
        cur = g.op("Gemm", [pooled, g.weight((classes, c), c), g.weight((classes,), 1)], transB=1)
    return g.case("ConvNet", cur, {"x": shape}, atol=2e-4)


@st.composite
def attentions(draw) -> GraphCase:
    """Self-attention as exporters write it: projections, heads split by Reshape / Transpose,
    scores scaled (Mul or Div), an optional additive mask, Softmax, the value product, heads
    merged, an optional output projection."""
    g = _G(draw(st.integers(0, 1000)))
    b, s = draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 7, 16, 33, 64]))
    heads, dh = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([4, 8, 16, 32]))
    d = heads * dh
    shape4 = g.const(np.array([b, s, heads, dh], np.int64))

    def proj(perm: list[int]) -> str:
        p = g.op("MatMul", ["x", g.weight((d, d), d)])
        if draw(st.booleans()):
            p = g.op("Add", [p, g.weight((d,), 1)])
        return g.op("Transpose", [g.op("Reshape", [p, shape4])], perm=perm)

    q, kt, v = proj([0, 2, 1, 3]), proj([0, 2, 3, 1]), proj([0, 2, 1, 3])
    scores = g.op("MatMul", [q, kt])
    if draw(st.booleans()):
        scores = g.op("Div", [scores, g.const(np.array(np.sqrt(dh), np.float32))])
    else:
        scores = g.op("Mul", [scores, g.const(np.array(1 / np.sqrt(dh), np.float32))])
    if draw(st.booleans()):
        mask = np.where(g.rng.random((b, 1, 1, s)) < 0.2, -10000.0, 0.0).astype(np.float32)
        scores = g.op("Add", [scores, g.const(mask)])
    ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
    cur = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), g.const(np.array([b, s, d], np.int64))])
    if draw(st.booleans()):
        cur = g.op("MatMul", [cur, g.weight((d, d), d)])
    if draw(st.booleans()):
        cur = g.layer_norm(g.op("Add", [cur, "x"]), d)
    return g.case("Attention", cur, {"x": (b, s, d)}, atol=2e-4)


@st.composite
def shared_inputs(draw) -> GraphCase:
    """GEMMs that read the same input (merged into one), their results combined; and the RMSNorm
    pattern (a reduction of x * x feeding an element-wise tail)."""
    g = _G(draw(st.integers(0, 1000)))
    m, k = draw(st.integers(1, 17)), draw(st.sampled_from([2, 16, 31, 64]))
    outs = []
    n = draw(st.sampled_from([1, 8, 24, 65]))
    for _ in range(draw(st.integers(2, 3))):
        t = g.op("MatMul", ["x", g.weight((k, n), k)])
        outs.append(g.op("Add", [t, g.weight((n,), 1)]) if draw(st.booleans()) else t)
    how = draw(st.sampled_from(["Add", "Concat", "Mul"]))
    cur = g.op("Concat", outs, axis=-1) if how == "Concat" else g.op(how, outs[:2])
    if how != "Concat" and len(outs) > 2:
        cur = g.op("Add", [cur, outs[2]])
    if draw(st.booleans()):  # RMSNorm
        width = n * len(outs) if how == "Concat" else n
        ms = g.op("ReduceMean", [g.op("Mul", [cur, cur]), g.const(np.array([-1], np.int64))], keepdims=1)
        rms = g.op("Sqrt", [g.op("Add", [ms, g.const(np.array(1e-6, np.float32))])])
        cur = g.op("Mul", [g.op("Div", [cur, rms]), g.weight((width,), 1)])
    return g.case("SharedInput", cur, {"x": (m, k)}, atol=2e-4)


STRATEGIES = {"conv": convs(), "conv_transpose": conv_transposes(), "pool": pools(), "gemm": gemms(),
              "reduce": reductions(), "slice": slices(), "pad": pads(), "softmax": softmaxes(),
              "gather": gathers(), "arithmetic": arithmetic(), "norm": norms(), "resize": resizes(),
              "movement": movements(), "unary": unaries(), "arg": index_reductions(), "matmul": matmuls(),
              "einsum": einsums(), "conv_nd": convs_nd(), "conv_transpose_3d": conv_transposes_3d(),
              "scatter": scatters(), "where": selects(), "quantize": quantized(), "topk": topks(),
              "mlp": mlp_chains(), "convnet": conv_chains(), "attention": attentions(),
              "shared_input": shared_inputs()}
#: f16 variants of the families whose kernels compute (the movement ones only copy)
STRATEGIES.update({f"{k}_f16": STRATEGIES[k].map(half) for k in
                   ("arithmetic", "unary", "softmax", "norm", "reduce", "gemm", "matmul", "conv", "pool")})


@pytest.mark.parametrize("family", sorted(STRATEGIES))
def test_drawn_nodes_match_onnxruntime_or_are_refused(family: str) -> None:
    @FUZZ
    @given(STRATEGIES[family])
    def run(case: Case) -> None:
        _check(case)

    run()


#: the families whose kernels halbench's GPU code generator writes itself (GEMM, convolution,
#: window, row, reduction and movement kernels), drawn again for Vulkan on lavapipe
GPU_FAMILIES = ("conv", "conv_transpose", "conv_transpose_3d", "conv_nd", "pool", "gemm", "matmul", "reduce", "softmax", "norm", "movement",
                "slice", "pad", "gather", "arg", "resize", "conv_f16", "matmul_f16", "gemm_f16", "softmax_f16",
                "norm_f16", "reduce_f16", "pool_f16", "arithmetic_f16", "scatter", "where", "quantize", "topk",
                "unary", "einsum", "arithmetic", "mlp", "convnet", "attention", "shared_input")
GPU_FUZZ = settings(FUZZ, max_examples=max(1, EXAMPLES // 2))


@pytest.mark.parametrize("family", GPU_FAMILIES)
def test_drawn_nodes_on_lavapipe(family: str) -> None:
    """The same draws through the GPU code generator (SPIR-V, Vulkan BDA) on Mesa's lavapipe:
    every computed index, tile edge and split is exercised on shapes nobody chose."""
    device_or_skip("vulkan://")

    @GPU_FUZZ
    @given(STRATEGIES[family])
    def run(case: Case) -> None:
        _check(case, "vulkan")

    run()


#: What the fuzzer found, kept as fixed cases (each failed before its fix: an LLVM abort that
#: killed the process, a wrong output shape, wrong values, or a kernel failure at run time)
FOUND = {
    # ReduceL2 / ReduceLogSum / ReduceLogSumExp over unit axes only: torch-mlir aborted
    "reduce_l2_unit_axis": Case("ReduceL2", {"x": (2, 1, 6)}, {"axes": np.array([1], np.int64)}, keepdims=1),
    "reduce_logsumexp_unit_axis": Case("ReduceLogSumExp", {"x": (1, 1, 6)}, {"axes": np.array([-2], np.int64)},
                                       keepdims=1),
    "reduce_sum_square_noop": Case("ReduceSumSquare", {"x": (3,)}, {"axes": np.array([], np.int64)},
                                   noop_with_empty_axes=1),
    "lp_norm_unit_axis": Case("LpNormalization", {"x": (1, 1, 6)}, axis=-2, p=2),
    # ceil_mode's last window starting in the end padding is dropped (torch-mlir kept it)
    "max_pool_ceil_last_window": Case("MaxPool", {"x": (1, 1, 2, 2)}, kernel_shape=[2, 2], strides=[1, 2],
                                      pads=[0, 0, 0, 1], ceil_mode=1),
    "max_pool_ceil_lowering": Case("MaxPool", {"x": (1, 3, 7, 5)}, kernel_shape=[2, 3], strides=[3, 3],
                                   pads=[0, 1, 0, 1], ceil_mode=1),
    "average_pool_ceil_no_pad_count": Case("AveragePool", {"x": (1, 1, 2, 1)}, kernel_shape=[1, 1],
                                           strides=[2, 1], ceil_mode=1, count_include_pad=0),
    # (nineteenth session, fresh seeds) ... and with count_include_pad and end pads
    "average_pool_ceil_counting_end_pad": Case("AveragePool", {"x": (1, 1, 2, 2)}, kernel_shape=[2, 2],
                                               strides=[1, 2], pads=[0, 0, 0, 1], ceil_mode=1,
                                               count_include_pad=1),
    "average_pool_ceil_counting_no_pads": Case("AveragePool", {"x": (1, 1, 2, 1)}, kernel_shape=[1, 1],
                                               strides=[2, 1], ceil_mode=1, count_include_pad=1),
    # ConvTranspose with asymmetric pads: refused (torch-mlir has no pattern), grouped or not
    "conv_transpose_asymmetric": Case("ConvTranspose", {"x": (2, 3, 3, 6)}, {"W": _rand(3, (3, 2, 1, 2))},
                                      strides=[3, 2], dilations=[2, 2], pads=[1, 0, 0, 1]),
    "conv_transpose_asymmetric_grouped": Case("ConvTranspose", {"x": (2, 4, 7, 4)}, {"W": _rand(3, (4, 1, 2, 2))},
                                              group=2, strides=[1, 3], dilations=[2, 1], pads=[1, 0, 1, 1],
                                              output_padding=[0, 1]),
    # DepthToSpace in CRD mode: torch-mlir's lowering permuted the elements
    "depth_to_space_crd_block_1": Case("DepthToSpace", {"x": (1, 2, 1, 2)}, blocksize=1, mode="CRD"),
    "depth_to_space_crd": Case("DepthToSpace", {"x": (2, 8, 2, 3)}, blocksize=2, mode="CRD"),
    # Softsign: refused (torch-mlir's conversion has no pattern for it)
    "softsign": Case("Softsign", {"x": (2, 3)}),
    # Clip with a max but no min: torch-mlir's lowering failed on the absent min
    "clip_max_only": Case("Clip", {"x": (2, 3)}, {"hi": np.array(0.5, np.float32)}, ["x", "", "hi"]),
    # 3-D convolutions: refused (no 3-D kernel in halbench's code generator); grouped, padded, strided
    "conv3d": Case("Conv", {"x": (2, 4, 5, 6, 5)}, {"W": _rand(15, (6, 2, 3, 2, 3)), "B": _rand(16, (6,))},
                   group=2, strides=[2, 1, 2], dilations=[1, 2, 1], pads=[1, 0, 1, 0, 1, 1], atol=1e-4),
    # Resize forms torch-mlir refused: 1-D (a rank-3 input), half_pixel_symmetric, cubic with
    # half_pixel, nearest with pytorch_half_pixel
    "resize_1d_linear": Case("Resize", {"x": (4, 6, 3)}, {"roi": np.array([], np.float32),
                                                         "sizes": np.array([4, 6, 7], np.int64)},
                             ["x", "roi", "", "sizes"], mode="linear", coordinate_transformation_mode="align_corners",
                             atol=1e-4),
    "resize_cubic_symmetric": Case("Resize", {"x": (1, 2, 4, 5)}, {"roi": np.array([], np.float32),
                                                                  "scales": np.array([1, 1, 1.5, 2], np.float32)},
                                   mode="cubic", coordinate_transformation_mode="half_pixel_symmetric",
                                   cubic_coeff_a=-0.5, atol=1e-4),
    "resize_nearest_pytorch_half_pixel": Case("Resize", {"x": (1, 1, 3, 4)},
                                              {"roi": np.array([], np.float32),
                                               "scales": np.array([1, 1, 2, 0.5], np.float32)},
                                              mode="nearest", coordinate_transformation_mode="pytorch_half_pixel",
                                              nearest_mode="floor"),
    # 3-D ConvTranspose: torch-mlir lowers none
    "conv_transpose_3d": Case("ConvTranspose", {"x": (2, 2, 3, 2, 3)}, {"W": _rand(17, (2, 3, 2, 3, 2)),
                                                                        "B": _rand(18, (3,))},
                              strides=[2, 1, 2], dilations=[1, 2, 1], pads=[1, 0, 0, 0, 1, 1],
                              output_padding=[1, 0, 1], atol=1e-4),
    # an f16 result of a value torch-mlir computes in f64: the GLSL rounding helper took no double
    "reduce_logsumexp_f16": half(Case("ReduceLogSumExp", {"x": (3,)}, keepdims=0)),
    "lp_pool_f16": half(Case("LpPool", {"x": (1, 2, 3, 3)}, kernel_shape=[2, 2], p=3)),
    # negative (cropping) constant pads: a run-time kernel failure or a refusal
    "pad_crop": Case("Pad", {"x": (5, 5)}, {"pads": np.array([-1, 1, 1, 1], np.int64)}, mode="constant"),
    "pad_crop_value": Case("Pad", {"x": (5, 2, 4, 3)}, {"pads": np.array([1, 0, -1, 2, 1, 1, -1, 0], np.int64),
                                                        "value": np.array(1.5, np.float32)}, mode="constant"),
    # reflect pads torch-mlir lowered to a reversed indexing map or dynamic shapes
    "pad_reflect_1d": Case("Pad", {"x": (2,)}, {"pads": np.array([1, 1], np.int64)}, mode="reflect"),
    "pad_reflect_one_side": Case("Pad", {"x": (4, 4)}, {"pads": np.array([0, 1, 0, 0], np.int64)}, mode="reflect"),
    "pad_edge_axes": Case("Pad", {"x": (3, 4, 2)}, {"pads": np.array([2, 0, 1, 2], np.int64),
                                                    "value": np.array(0.0, np.float32),
                                                    "axes": np.array([-1, 0], np.int64)},
                          order=["x", "pads", "value", "axes"], mode="edge"),
    # backwards slices: a start past the end (an empty tensor at run time) and a flip
    "slice_back_from_past_end": Case("Slice", {"x": (2,)}, {"starts": np.array([2], np.int64),
                                                           "ends": np.array([0], np.int64),
                                                           "axes": np.array([0], np.int64),
                                                           "steps": np.array([-2], np.int64)}),
    "slice_flip": Case("Slice", {"x": (3, 4)}, {"starts": np.array([-1], np.int64),
                                               "ends": np.array([-(2**63)], np.int64),
                                               "axes": np.array([1], np.int64),
                                               "steps": np.array([-1], np.int64)}),
    # found by crafting nodes (nineteenth session): ONNX's data propagation crashed on a Slice step
    # of 2^31 (SIGSEGV) and allocated until the OOM killer came at 2^62; Tile with a zero repeat
    # crashed torch-mlir (SIGFPE)
    "slice_step_2_31": Case("Slice", {"x": (4, 3)}, {"starts": np.array([1], np.int64),
                                                     "ends": np.array([4], np.int64),
                                                     "axes": np.array([0], np.int64),
                                                     "steps": np.array([2**31], np.int64)}),
    "slice_step_2_62": Case("Slice", {"x": (4,)}, {"starts": np.array([0], np.int64),
                                                   "ends": np.array([4], np.int64),
                                                   "axes": np.array([0], np.int64),
                                                   "steps": np.array([2**62], np.int64)}),
    "tile_zero_repeat": Case("Tile", {"x": (2, 3)}, {"repeats": np.array([0, 2], np.int64)}),
}


def _found_on(name: str, api: str, uri: str) -> None:
    case = FOUND[name]
    rng = np.random.default_rng(0)
    dt = np.float16 if case.in_type == TensorProto.FLOAT16 else np.float32
    feeds = {n: rng.standard_normal(s).astype(dt) for n, s in case.inputs.items()}
    with tempfile.TemporaryDirectory() as td:
        path = Path(td) / "m.onnx"
        onnx.save(case.model(), path)
        ref = onnx_reference(path, feeds)[0]
        bundle = compile_for(api, path, Path(td)) if api != "local" else Path(td) / "m.hbx"
        if api == "local":
            compile_model(path).write(bundle)
        out = run_local(bundle, feeds, uri)[0]
    assert out.shape == ref.shape
    assert not _close(out, ref, case.atol, case.rtol).any(), (out, ref)


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_cases_compile_and_match_onnxruntime(name: str) -> None:
    """Each case compiles (no refusal: the fix makes it a model halbench takes) and matches."""
    _found_on(name, "local", "local-sync://")


@pytest.mark.parametrize("name", sorted(FOUND))
def test_found_cases_on_lavapipe(name: str) -> None:
    """The rewritten graphs through the GPU code generator, on Mesa's lavapipe."""
    _found_on(name, "vulkan", device_or_skip("vulkan://"))


#: Crafted nodes the new rewrites must refuse in one line, quickly, without building huge tables
#: or dividing by zero (each crashed or would have allocated gigabytes in a rewrite before)
CRAFTED = {
    "depth_to_space_crd_no_blocksize": Case("DepthToSpace", {"x": (1, 4, 2, 2)}, mode="CRD"),
    "conv3d_stride_0": Case("Conv", {"x": (1, 1, 3, 3, 3)}, {"W": _rand(1, (1, 1, 2, 2, 2))}, strides=[0, 1, 1]),
    "conv_transpose_3d_huge_stride": Case("ConvTranspose", {"x": (1, 1, 3, 2, 2)}, {"W": _rand(1, (1, 1, 2, 2, 2))},
                                          strides=[1 << 30, 1, 1]),
    "pad_edge_huge": Case("Pad", {"x": (2, 3)}, {"pads": np.array([0, 1 << 40, 0, 0], np.int64)}, mode="edge"),
    "max_pool_ceil_kernel_0": Case("MaxPool", {"x": (1, 1, 4, 4)}, kernel_shape=[0, 2], ceil_mode=1),
    # nineteenth session, crafted beside the fuzzer: each hung or killed the compiling process in
    # torch-mlir (SIGFPE, SIGSEGV) or ONNX before halbench refused it itself
    "conv_group_0": Case("Conv", {"x": (1, 1, 2, 2)}, {"W": _rand(1, (1, 1, 1, 1))}, group=0),
    "conv_groups_not_dividing": Case("Conv", {"x": (1, 2, 4, 4)}, {"W": _rand(1, (2, 1, 2, 2))}, group=3),
    "conv_transpose_group_0": Case("ConvTranspose", {"x": (1, 1, 2, 2)}, {"W": _rand(1, (1, 1, 3, 3))}, group=0),
    "depth_to_space_channels_not_multiple": Case("DepthToSpace", {"x": (1, 4, 2, 2)}, blocksize=3),
    "depth_to_space_huge_blocksize": Case("DepthToSpace", {"x": (1, 4, 2, 2)}, blocksize=1 << 20, mode="CRD"),
    "space_to_depth_huge_blocksize": Case("SpaceToDepth", {"x": (1, 1, 4, 4)}, blocksize=1 << 20),
    "group_norm_0_groups": Case("GroupNormalization", {"x": (1, 4, 2, 2)},
                                {"scale": np.ones(4, np.float32), "bias": np.zeros(4, np.float32)}, num_groups=0),
    "lrn_size_0": Case("LRN", {"x": (1, 2, 2, 2)}, size=0),
    "range_delta_0": Case("Range", {}, {"start": np.array(0, np.float32), "limit": np.array(4, np.float32),
                                        "delta": np.array(0, np.float32)}),
    "softmax_axis_out_of_range": Case("Softmax", {"x": (2, 3)}, axis=7),
    "squeeze_non_unit_axis": Case("Squeeze", {"x": (2, 3)}, {"axes": np.array([0], np.int64)}),
    "transpose_repeated_axis": Case("Transpose", {"x": (2, 3)}, perm=[0, 0]),
    "expand_incompatible": Case("Expand", {"x": (2, 3)}, {"shape": np.array([4, 3], np.int64)}),
}


def _compile_file(path: Path) -> None:
    compile_model(path)


@pytest.mark.parametrize("name", sorted(CRAFTED))
def test_crafted_nodes_are_refused_in_one_line(name: str) -> None:
    """Refused by halbench itself: in a child process (as `halbench compile` runs it), so that a
    form that crashes or hangs the native front end again fails this test instead of pytest."""
    from halbench.compiler.isolate import run_isolated

    with tempfile.TemporaryDirectory() as td:
        path = Path(td) / "m.onnx"
        onnx.save(CRAFTED[name].model(), path)
        with pytest.raises(HalbenchError) as e:
            run_isolated(_compile_file, path, what=name, timeout_s=120)
    msg = str(e.value)
    assert msg and "\n" not in msg.strip()
    assert "crashed in native code" not in msg and "did not finish" not in msg, msg


def test_lrn_window_past_the_channels_compiles_and_matches_the_formula(tmp_path: Path) -> None:
    """An LRN of size 2^31 - 1 over 3 channels hung the compile; the window past 2C - 1 channels
    sums every channel, so it compiles as one of 2C - 1 with alpha / size kept (onnxruntime itself
    tries to allocate 32 GiB for it: the formula is the reference)."""
    from halbench.compiler.isolate import run_isolated

    size, alpha, beta, bias = 2**31 - 1, 0.3, 0.75, 1.5
    case = Case("LRN", {"x": (1, 3, 2, 2)}, size=size, alpha=alpha, beta=beta, bias=bias)
    path, bundle = tmp_path / "m.onnx", tmp_path / "m.hbx"
    onnx.save(case.model(), path)
    run_isolated(_compile_to, path, bundle, what="lrn", timeout_s=120)
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 2))
    ref = x / (bias + alpha / size * (x * x).sum(axis=1, keepdims=True)) ** beta
    out = run_local(bundle, {"x": x.astype(np.float32)}, "local-sync://")[0]
    assert np.abs(out - ref).max() < 1e-5


def _compile_to(path: Path, bundle: Path) -> None:
    compile_model(path).write(bundle)
