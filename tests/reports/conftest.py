"""Fixtures for report tests: realistic results files written by tests/reports/make_results.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from halbench.bench.results import write_results
from tests.reports.make_results import make_results


@pytest.fixture
def results_file(tmp_path: Path) -> Callable[..., Path]:
    """``results_file("base", seed=1, slowdown=1.5)`` writes make_results(...) and returns its path."""

    def write(name: str, doc: dict[str, Any] | None = None, **kwargs: Any) -> Path:
        return write_results(tmp_path / f"{name}.json", doc if doc is not None else make_results(**kwargs))

    return write
