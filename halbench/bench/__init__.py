"""Benchmarks: the model zoo, suites, the runner, statistics and stored results.

Import-light on purpose: ``import halbench.bench`` loads neither onnx nor a GPU API; import the
submodule you need (``halbench.bench.zoo``, ...).
"""

from __future__ import annotations

__all__: list[str] = []
