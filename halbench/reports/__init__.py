"""Reports from stored results: HTML report, compare, CI gate, trace export.

Everything here reads results files (``halbench.bench.results.read_results``), never live
devices. Import-light: submodules load matplotlib, jinja2 and scipy only when used.
"""

from __future__ import annotations

__all__: list[str] = []
