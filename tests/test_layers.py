"""DESIGN.md's layer rules, checked on the source: dependencies point down only.
docs/architecture.md draws the same map; change both together."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "halbench"

# layer -> packages it must never import (runtime code runs where no compiler is installed;
# reports read stored results only; the probe and the HAL know nothing above them)
FORBIDDEN = {
    "kernels": ("halbench.drivers", "halbench.compiler", "halbench.runtime", "halbench.bench",
                "halbench.reports", "halbench.probe"),
    "drivers": ("halbench.compiler", "halbench.runtime", "halbench.bench", "halbench.reports"),
    # The compiler half of a plug-in unit never imports its driver half (nor any driver).
    "compiler/backends": ("halbench.drivers", "halbench.runtime", "halbench.bench", "halbench.reports"),
    "runtime": ("halbench.compiler", "halbench.bench", "halbench.reports"),
    "bundle": ("halbench.compiler", "halbench.runtime", "halbench.bench", "halbench.reports"),
    "probe": ("halbench.drivers", "halbench.compiler", "halbench.runtime", "halbench.bench",
              "halbench.reports"),
    "compiler": ("halbench.bench", "halbench.reports", "halbench.runtime"),
    "bench": ("halbench.reports", "halbench.fleet"),
    # Fleet runs the runner in worker processes and merges results: below cli, above bench.
    "fleet": ("halbench.reports", "halbench.compiler", "halbench.runtime"),
    # Tune compiles candidates and runs them through the HAL: above both, beside bench.
    "tune": ("halbench.reports", "halbench.fleet", "halbench.bench"),
    # Peers run a model file with their own stack: no HAL, no runner (bench calls them).
    "peers": ("halbench.drivers", "halbench.runtime", "halbench.bench", "halbench.reports",
              "halbench.kernels"),
}


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_down(layer: str) -> None:
    bad = []
    for path in sorted((PKG / layer).rglob("*.py")):
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in FORBIDDEN[layer]):
                bad.append(f"{path.relative_to(PKG.parent)} imports {name}")
    assert not bad, "\n".join(bad)


def test_nothing_below_imports_tune() -> None:
    """halbench tune sits on top (like the CLI): the compiler reads its cache file through
    compiler/tuning_cache.py, never through halbench.tune."""
    bad = []
    for layer in ("kernels", "drivers", "runtime", "bundle", "probe", "compiler", "bench", "peers"):
        for path in sorted((PKG / layer).rglob("*.py")):
            bad += [f"{path.relative_to(PKG.parent)} imports {n}" for n in _imports(path)
                    if n == "halbench.tune" or n.startswith("halbench.tune.")]
    assert not bad, "\n".join(bad)


def test_hal_core_imports_no_layer_above() -> None:
    for name in ("hal.py", "errors.py", "uri.py", "dtypes.py", "files.py", "arch.py", "tools.py", "validation.py",
                 "precision.py"):
        allowed = ("probe",) if name == "hal.py" else ()  # hal.py takes DeviceInfo from probe.info
        above = [n for n in _imports(PKG / name) if n.startswith("halbench.") and n.split(".")[1] in
                 ("drivers", "compiler", "runtime", "bench", "reports", "probe", "kernels")
                 and n.split(".")[1] not in allowed]
        assert not above, (name, above)


def test_nobody_reaches_into_another_package_for_kernels() -> None:
    """The NumPy kernels are their own layer: the local driver, the compiler and the micro
    benchmarks import halbench.kernels, never each other's modules for them."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        for name in _imports(path):
            if name.startswith("halbench.drivers.local") and "drivers/local" not in str(path):
                bad.append(f"{path.relative_to(PKG.parent)} imports {name}")
    assert not bad, "\n".join(bad)


def test_the_runner_never_imports_a_peer_stack() -> None:
    """bench/ talks to peers through halbench.peers (plug-in lookup, find_spec) and the worker
    process; torch, onnx2torch and iree.runtime are imported only inside halbench/peers/."""
    bad = []
    for path in sorted((PKG / "bench").rglob("*.py")):
        for name in _imports(path):
            if name.split(".")[0] in ("torch", "onnx2torch") or name.startswith("iree.runtime"):
                bad.append(f"{path.relative_to(PKG.parent)} imports {name}")
    assert not bad, "\n".join(bad)


def test_ray_is_imported_only_by_the_fleet_cluster_module() -> None:
    """Ray is an optional extra: only halbench/fleet/ray_fleet.py imports it (lazily, for --cluster)."""
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        for name in _imports(path):
            if name.split(".")[0] == "ray" and path != PKG / "fleet" / "ray_fleet.py":
                bad.append(f"{path.relative_to(PKG.parent)} imports {name}")
    assert not bad, "\n".join(bad)
