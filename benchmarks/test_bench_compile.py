"""Compile time of MobileNetV2 (batch 1, 224x224) for one target: the goal is < 10 s on a
2-core machine. A benchmark, not a test: run with ``pytest benchmarks/ --benchmark-enable``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("iree.compiler")
zoo = pytest.importorskip("halbench.bench.zoo")


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("zoo") / "mobilenetv2.onnx"
    zoo.save("mobilenetv2", str(path))
    return path


def test_compile_mobilenetv2_local(benchmark, mobilenet: Path) -> None:
    from halbench.compiler import CompileOptions, compile_model

    options = CompileOptions(target_devices=("local",))
    cm = benchmark.pedantic(compile_model, args=(mobilenet, options), rounds=3, iterations=1)
    benchmark.extra_info.update({k: round(v, 4) for k, v in cm.statistics["stages_s"].items()})
    benchmark.extra_info["dispatches"] = cm.statistics["dispatches"]
