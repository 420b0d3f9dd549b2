"""Shared test setup: GPU-only tests (marker ``gpu``) run only where asked for."""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--gpu", action="store_true", default=False,
                     help="run tests marked gpu (needs a real GPU; see ../shared/gpu/README.md)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--gpu") or os.environ.get("HALBENCH_GPU_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="needs a real GPU: CI has none; run with --gpu on the GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
