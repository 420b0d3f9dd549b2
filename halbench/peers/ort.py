"""ONNX Runtime as a peer: CPU execution provider everywhere; CUDA and TensorRT where
onnxruntime-gpu (and TensorRT) are installed. Inputs and outputs are bound once through IO
binding, so the timed region is the model's run, not its transfers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from halbench.peers import Modes, Peer, PeerSample, PeerSpec, PeerUnsupported, PreparedPeer, host_timed

__all__ = ["OrtPeer"]

_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
              "tensorrt": "TensorrtExecutionProvider"}


class OrtPeer(Peer):
    name = "onnxruntime"
    modes: ClassVar[Modes] = {
        "cpu": (("cpu",), "CPU execution provider"),
        "cuda": (("cuda",), "CUDA execution provider (onnxruntime-gpu)"),
        "tensorrt": (("cuda",), "TensorRT execution provider (onnxruntime-gpu + TensorRT)")}
    default_mode = "cpu"
    packages = "onnxruntime"
    modules = ("onnxruntime",)
    distribution = "onnxruntime"

    def prepare(self, spec: PeerSpec, model: Path, names: Sequence[str], inputs: Sequence[np.ndarray],
                device: Any) -> PreparedPeer:
        why = self.missing()
        if why:
            raise PeerUnsupported(why)
        import onnxruntime as ort

        mode = spec.mode or self.default_mode
        provider = _PROVIDERS[mode]
        if provider not in ort.get_available_providers():
            raise PeerUnsupported(f"onnxruntime {ort.__version__} here has no {provider} "
                                  f"(it has {', '.join(ort.get_available_providers())}); install onnxruntime-gpu"
                                  + (" and TensorRT" if mode == "tensorrt" else ""))
        return _Prepared(ort, mode, provider, model, names, inputs, device)


class _Prepared(PreparedPeer):
    timed_on = "host"

    def __init__(self, ort: Any, mode: str, provider: str, model: Path, names: Sequence[str],
                 inputs: Sequence[np.ndarray], device: Any) -> None:
        super().__init__()
        self.runtime = f"onnxruntime-{mode}"
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers: list[Any] = [provider]
        dev_type, dev_id = "cpu", 0
        if mode != "cpu":
            dev_type, dev_id = "cuda", int(getattr(device, "ordinal", 0) or 0)
            providers = [(provider, {"device_id": dev_id}), "CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(model), opts, providers=providers)
        except Exception as e:  # noqa: BLE001 - ORT raises its own exception types
            raise PeerUnsupported(f"onnxruntime cannot load the model: {str(e).splitlines()[0][:300]}") from None
        self.binding = self.session.io_binding()
        self._keep = []
        for n, x in zip(names, inputs):
            v = ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(x), dev_type, dev_id)
            self._keep.append(v)
            self.binding.bind_ortvalue_input(n, v)
        for o in self.session.get_outputs():
            self.binding.bind_output(o.name, dev_type, dev_id)
        self.settings = {"provider": provider, "graph_optimization": "all", "io_binding": True,
                         "intra_op_threads": opts.intra_op_num_threads or "default"}

    def _run(self) -> None:
        self.session.run_with_iobinding(self.binding)
        self.binding.synchronize_outputs()

    def invoke(self) -> list[np.ndarray]:
        self._run()
        return [np.asarray(o) for o in self.binding.copy_outputs_to_cpu()]

    def run(self) -> PeerSample:
        return host_timed(self._run)

    def close(self) -> None:
        self.binding = None
        self.session = None
        self._keep = []
