"""Benchmarks: the model zoo, suites, the runner, statistics and stored results.

Import-light on purpose: ``import halbench.bench`` loads neither onnx nor a GPU API; import the
submodule you need (``halbench.bench.zoo``, ...). ``load_results`` is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_results"]


def __getattr__(name: str) -> Any:
    if name == "load_results":
        from halbench.bench.results import load_results

        return load_results
    raise AttributeError(f"module 'halbench.bench' has no attribute '{name}'")
