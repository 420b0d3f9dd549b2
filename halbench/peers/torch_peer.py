"""PyTorch as a peer: the ONNX file loaded with onnx2torch (so the weights are the same), run
eagerly, replayed as a CUDA graph, or through torch.compile. fp32 runs with TF32 off; the
``tf32`` precision turns it on; ``f16`` and ``bf16`` run the f32 model under ``torch.autocast``
(matmuls and convolutions in that type, f32 accumulation; inputs and outputs stay f32), as
halbench's ``compile --precision``. CUDA runs are timed with CUDA events, CPU runs on the host."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from halbench.peers import (
    Modes,
    Peer,
    PeerSample,
    PeerSpec,
    PeerUnsupported,
    PreparedPeer,
    host_timed,
    outputs_to_numpy,
)

__all__ = ["TorchPeer"]


class TorchPeer(Peer):
    name = "torch"
    modes: ClassVar[Modes] = {
        "eager": (("cuda", "cpu"), "eager PyTorch"),
        "cudagraph": (("cuda",), "eager PyTorch captured in a CUDA graph, replayed"),
        "compile": (("cuda", "cpu"), ("torch.compile (inductor); compile_mode reduce-overhead "
                                       "on CUDA (CUDA graphs), default on CPU; max-autotune"))}
    default_mode = "eager"
    precisions = ("fp32", "tf32", "f16", "bf16")
    packages = "torch, onnx2torch"
    modules = ("torch", "onnx2torch")
    distribution = "torch"

    def runtime(self, spec: PeerSpec, kind: str) -> str:
        mode = spec.mode or self.default_mode
        precision = spec.options.get("precision", "fp32")
        return f"torch-{mode}" + (f"-{precision}" if precision != "fp32" else "")

    def prepare(self, spec: PeerSpec, model: Path, names: Sequence[str], inputs: Sequence[np.ndarray],
                device: Any) -> PreparedPeer:
        why = self.missing()
        if why:
            raise PeerUnsupported(why)
        return _Prepared(self, spec, model, inputs, device)


def _cuda_index(torch: Any, device: Any) -> int:
    """The torch CUDA ordinal of a probed halbench device: by UUID, else its ordinal."""
    uuid = str(getattr(device, "uuid", "") or "").lower().removeprefix("gpu-")
    for i in range(torch.cuda.device_count()):
        u = str(getattr(torch.cuda.get_device_properties(i), "uuid", "")).lower().removeprefix("gpu-")
        if uuid and u == uuid:
            return i
    return int(getattr(device, "ordinal", 0) or 0)


#: The opset an older model is upgraded to (onnx.version_converter) when onnx2torch has no
#: converter for one of its ops at the model's own opset: onnx2torch converts from the opsets
#: exporters write today, not the ONNX model zoo's classic files (GoogLeNet's and SqueezeNet's
#: Dropout-7 at opset 8, SqueezeNet 1.1's MaxPool-1 at opset 6). The ops' meaning is the same.
UPGRADE_OPSET = 13


def _onnx_opset(m: Any) -> int:
    return max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), default=0)


def convert_onnx(model: Path) -> tuple[Any, str | None]:
    """The model as a torch module through onnx2torch, and ``"8 -> 13"`` where it had to be
    upgraded to UPGRADE_OPSET first (None where it converted as it is). PeerUnsupported names
    what onnx2torch (and the upgrade) could not do."""
    import onnx
    import onnx2torch

    def unsupported(e: BaseException, after: str = "") -> PeerUnsupported:
        first = str(e).splitlines()[0][:300] if str(e) else ""
        return PeerUnsupported(f"onnx2torch cannot convert the model{after}: {type(e).__name__}: {first}")

    try:
        return onnx2torch.convert(str(model)), None
    except Exception as e:  # noqa: BLE001 - onnx2torch raises NotImplementedError and more
        first_error = e
    if not isinstance(first_error, NotImplementedError):  # (a converter missing: an upgrade may help)
        raise unsupported(first_error)
    m = onnx.load(str(model))
    opset = _onnx_opset(m)
    if not 0 < opset < UPGRADE_OPSET:
        raise unsupported(first_error)
    from onnx import version_converter

    try:
        up = version_converter.convert_version(m, UPGRADE_OPSET)
        return onnx2torch.convert(up), f"{opset} -> {UPGRADE_OPSET}"
    except Exception as e:  # noqa: BLE001 - the converter and onnx2torch raise what they raise
        raise unsupported(e, f" (at opset {opset}: {type(first_error).__name__}; "
                             f"after upgrading it to {UPGRADE_OPSET})") from None


def _freeze_reshapes(net: Any, inputs: Sequence[np.ndarray] = ()) -> int:
    """onnx2torch reshapes by a shape tensor (``torch.Size(tensor)``): on a GPU that is a
    device-to-host read per Reshape, which breaks CUDA graph capture and torch.compile. A shape
    that is a constant of the model becomes literal ints in the graph (the same computation)."""
    import torch

    gm, n = net, 0
    modules = dict(gm.named_modules())
    if inputs:  # the shapes of the values, for a 0 ("copy this dimension") in a shape
        from torch.fx.passes.shape_prop import ShapeProp

        try:
            with torch.inference_mode():
                ShapeProp(gm).propagate(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        except Exception:  # noqa: BLE001, S110 - without traced shapes, such reshapes stay as they are
            pass
    for node in list(gm.graph.nodes):
        kind = type(modules.get(node.target)).__name__ if node.op == "call_module" else ""
        if kind == "OnnxGather" and len(node.args) >= 2 and getattr(node.args[1], "op", None) == "get_attr":
            # A Gather by one constant index (BERT's [CLS] token): indexing with a 0-d tensor
            # reads it on the host; torch.select takes the int.
            idx = gm
            for part in node.args[1].target.split("."):
                idx = getattr(idx, part)
            if torch.as_tensor(idx).dim() == 0:
                with gm.graph.inserting_after(node):
                    new = gm.graph.call_function(torch.select, (node.args[0], int(modules[node.target]._axis),
                                                                int(torch.as_tensor(idx).item())))
                node.replace_all_uses_with(new)
                gm.graph.erase_node(node)
                n += 1
            continue
        if kind != "OnnxReshape":
            continue
        if len(node.args) < 2 or getattr(node.args[1], "op", None) != "get_attr":
            continue
        shape = gm
        for part in node.args[1].target.split("."):
            shape = getattr(shape, part)
        dims = [int(d) for d in torch.as_tensor(shape).reshape(-1).tolist()]
        if 0 in dims:  # "copy this dimension" (ONNX allowzero=0): from the input's shape
            meta = getattr(node.args[0], "meta", {}).get("tensor_meta")
            if meta is None:
                continue
            dims = [int(meta.shape[i]) if d == 0 else d for i, d in enumerate(dims)]
        with gm.graph.inserting_after(node):
            new = gm.graph.call_function(torch.reshape, (node.args[0], tuple(dims)))
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        n += 1
    if n:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return n


#: onnx2torch modules that read arguments after the first on the host (``tolist()``, ``item()``,
#: ``torch.Size(t)``, slice bounds; onnx2torch 1.5), by class name -> the first such position.
_HOST_READERS = {
    "OnnxConstantOfShape": 0, "OnnxRange": 0, "OnnxCumSum": 1, "OnnxExpand": 1, "OnnxPadDynamic": 1,
    "OnnxReduceSumDynamicAxes": 1, "OnnxReshape": 1, "OnnxResize": 1, "OnnxResizeV10": 1, "OnnxSlice": 1,
    "OnnxSplit": 1, "OnnxSplit13": 1, "OnnxTile": 1, "OnnxUnsqueezeDynamicAxes": 1,
    "OnnxSqueezeDynamicAxes": 1, "OnnxTopK": 1}
#: Dropout in inference is the identity; onnx2torch's reads its ratio with ``item()``.
_DROPOUTS = {"OnnxDropoutDynamic", "Dropout", "OnnxDropout"}


def _host_constant_module(value: Any) -> Any:
    """A module returning ``value`` (a CPU tensor) that ``.to(device)`` leaves on the CPU: it is
    held outside the module's buffers."""
    from torch import nn

    class _HostConstant(nn.Module):
        def __init__(self, v: Any) -> None:
            super().__init__()
            self.__dict__["value"] = v  # not a buffer: a device move leaves it where it is

        def forward(self) -> Any:
            return self.__dict__["value"]

    return _HostConstant(value.detach().cpu())


def _capture_safe(net: Any, inputs: Sequence[np.ndarray] = ()) -> int:
    """The converted model without host reads of device values, so that a CUDA graph can capture
    it and torch.compile need not break the graph (the same computation; returns the rewrites):
    reshapes by constant shapes (``_freeze_reshapes``); Dropout, the identity in inference; and a
    model constant, or a Shape of a tensor whose shape the trace knows, that only onnx2torch
    modules read on the host (a Slice's bounds, an Expand's, a Tile's or a Reshape's shape, a
    Resize's scales: ``_HOST_READERS``) kept on the CPU when the model moves
    to the GPU, where such a read would copy it back and synchronise (a capture refuses both).
    A model these leave unsafe still fails its capture, as before."""
    import torch

    n = _freeze_reshapes(net, inputs)
    gm = net
    modules = dict(gm.named_modules())

    def kind(node: Any) -> str:
        return type(modules.get(node.target)).__name__ if node.op == "call_module" else ""

    for node in list(gm.graph.nodes):
        if kind(node) in _DROPOUTS and node.args and not gm.training:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            n += 1
    for node in list(gm.graph.nodes):
        if node.op == "get_attr":
            value = gm
            for part in node.target.split("."):
                value = getattr(value, part)
        elif kind(node) == "OnnxConstant":
            value = modules[node.target]()
        elif kind(node) == "OnnxShape" and node.args and hasattr(node.args[0], "meta") \
                and node.args[0].meta.get("tensor_meta") is not None:  # a static shape, traced
            shape_of = modules[node.target]
            dims = list(node.args[0].meta["tensor_meta"].shape)[shape_of._start:shape_of._end]
            value = torch.tensor(dims, dtype=torch.int64)
        else:
            continue
        if not isinstance(value, torch.Tensor) or not node.users:
            continue
        host_only = all(
            kind(u) in _HOST_READERS  # (keywords are never the data input)
            and all(i >= _HOST_READERS[kind(u)] for i, a in enumerate(u.args) if a is node)
            for u in node.users)
        if not host_only:
            continue
        name = f"halbench_host_const_{n}"
        gm.add_submodule(name, _host_constant_module(value))
        with gm.graph.inserting_before(node):
            new = gm.graph.call_module(name)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        n += 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return n


def _autocast(net: Any, device_type: str, dtype: Any) -> Any:
    import torch

    def run(*xs: Any) -> Any:
        with torch.autocast(device_type, dtype=dtype):
            out = net(*xs)
        # outputs stay f32, as the model's
        if isinstance(out, torch.Tensor):
            return out.float()
        return type(out)(o.float() if isinstance(o, torch.Tensor) and o.is_floating_point() else o for o in out)

    return run


class _Prepared(PreparedPeer):
    def __init__(self, peer: TorchPeer, spec: PeerSpec, model: Path, inputs: Sequence[np.ndarray],
                 device: Any) -> None:
        super().__init__()
        import torch

        self.torch = torch
        mode = spec.mode or peer.default_mode
        cuda = device.driver == "cuda"
        if cuda and not torch.cuda.is_available():
            raise PeerUnsupported(f"this torch {torch.__version__} sees no CUDA device")
        self.runtime = peer.runtime(spec, "cuda" if cuda else "cpu")
        self.timed_on = "device" if cuda else "host"
        precision = spec.options.get("precision", "fp32")
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        self.dev = torch.device("cuda", _cuda_index(torch, device)) if cuda else torch.device("cpu")
        net, upgraded = convert_onnx(model)
        net = net.eval()
        frozen = _capture_safe(net, inputs)  # on the CPU, before the move: it traces shapes
        net = net.to(self.dev)
        self.xs = [torch.from_numpy(np.ascontiguousarray(x)).to(self.dev) for x in inputs]
        self.settings = {"mode": mode, "precision": precision, "tf32": tf32,
                         "device": str(self.dev), "loader": "onnx2torch", "capture_rewrites": frozen,
                         **({"opset_upgrade": upgraded} if upgraded else {})}
        fn = net
        if precision in ("f16", "bf16"):
            # Autocast around the f32 model: matmuls and convolutions run in f16 / bf16 with f32
            # accumulation (cuBLAS / cuDNN), the rest as autocast's op lists say; the graph and
            # torch.compile capture the casts with the kernels.
            dtype = torch.float16 if precision == "f16" else torch.bfloat16
            self.settings["autocast"] = str(dtype)
            fn = _autocast(net, self.dev.type, dtype)
        if mode == "compile":
            # On CUDA, torch.compile with CUDA graphs (reduce-overhead): halbench replays a
            # recorded command buffer too, so launch overhead is out of both numbers.
            cmode = spec.options.get("compile_mode", "reduce-overhead" if cuda else "default")
            self.settings["compile_mode"] = cmode
            fn = torch.compile(fn, mode=cmode)
        self.fn = fn
        self.graph = None
        self.out: Any = None
        t0 = time.perf_counter()
        with torch.inference_mode():
            if mode == "cudagraph":
                self._capture()
            else:
                for _ in range(3):  # compiles (torch.compile) and warms up outside the samples
                    self.out = self.fn(*self.xs)
                self._sync()
        self.settings["prepare_s"] = round(time.perf_counter() - t0, 3)

    def _capture(self) -> None:
        torch = self.torch
        s = torch.cuda.Stream(self.dev)
        s.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(s):
            for _ in range(3):
                self.fn(*self.xs)
        torch.cuda.current_stream(self.dev).wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.fn(*self.xs)
        self._sync()

    def _sync(self) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def _call(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            with self.torch.inference_mode():
                self.out = self.fn(*self.xs)

    def invoke(self) -> list[np.ndarray]:
        self._call()
        self._sync()
        return outputs_to_numpy(self.out)

    def run(self) -> PeerSample:
        if self.dev.type != "cuda":
            return host_timed(self._call)
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter_ns()
        start.record()
        self._call()
        end.record()
        end.synchronize()
        host = (time.perf_counter_ns() - t0) / 1e6
        return PeerSample(float(start.elapsed_time(end)), host)

    def close(self) -> None:
        self.graph = None
        self.fn = None
        self.out = None
        self.xs = []
