"""The ONNX backend node tests as halbench's conformance suite.

Every plain case of the installed ``onnx`` package (see ``onnx_node.py``) is compiled with
halbench's compiler and run on local-sync:// and on vulkan:// (lavapipe), then judged like the
ONNX backend runner judges a backend: dtype, shape, ``assert_allclose`` at the case's tolerances.

Expected failures are listed, each with its reason, in ``xfail_local.txt`` (local-sync) and
``xfail_vulkan.txt`` (Vulkan failures beyond the local ones). The lists can only shrink: a listed
case that passes is a strict XPASS, so the run fails until its line is removed. Cases listed
with the reason ``crash:`` or ``hang:`` are not run (they would take the test process down).

``HALBENCH_CONFORMANCE=local`` runs the local-sync half only; ``=off`` skips both.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import pytest

from tests.conformance.onnx_node import check_case, plain_cases, xfail_list

HERE = Path(__file__).parent
XFAIL_LOCAL = xfail_list(HERE / "xfail_local.txt")
XFAIL_VULKAN = xfail_list(HERE / "xfail_vulkan.txt")
MODE = os.environ.get("HALBENCH_CONFORMANCE", "all")

if MODE == "off":
    pytest.skip("HALBENCH_CONFORMANCE=off", allow_module_level=True)
MEASURED_WITH = {"onnx": "1.23.2", "iree-base-compiler": "3.13.0"}
_installed = {}
for _dist in MEASURED_WITH:
    try:
        _installed[_dist] = importlib.metadata.version(_dist)
    except importlib.metadata.PackageNotFoundError:
        _installed[_dist] = None
if _installed != MEASURED_WITH:
    pytest.skip(f"the expected-failure lists were measured with {MEASURED_WITH}, this is {_installed} "
                f"(scripts/setup.sh installs the measured versions)", allow_module_level=True)

CASES = plain_cases()


def _params(listed: dict[str, str], names: list[str], listing: str) -> list:
    out = []
    for n in names:
        reason = listed.get(n)
        if reason is None:
            out.append(n)
        elif reason.startswith(("crash:", "hang:")):
            out.append(pytest.param(n, marks=pytest.mark.skip(reason=f"{listing}: {reason}")))
        else:
            out.append(pytest.param(n, marks=pytest.mark.xfail(
                reason=f"{listing} (remove the line when it passes): {reason}", strict=True)))
    return out


@pytest.fixture(scope="module")
def local_device():
    from halbench.drivers import create_device

    with create_device("local-sync://") as dev:
        yield dev


@pytest.fixture(scope="module")
def vulkan_device():
    from halbench.drivers import create_device

    try:
        dev = create_device("vulkan://")
    except Exception as e:  # noqa: BLE001 - no Vulkan here: say so
        pytest.skip(f"no vulkan:// device: {e}")
    with dev:
        yield dev


@pytest.mark.parametrize("name", _params(XFAIL_LOCAL, sorted(CASES), "xfail_local.txt"))
def test_local_sync(name: str, local_device, tmp_path: Path) -> None:
    status, msg = check_case(CASES[name], local_device, ("local",), tmp_path)
    assert status == "pass", f"{name}: {status}: {msg}"


_VULKAN_NAMES = sorted(n for n in CASES if n not in XFAIL_LOCAL)


@pytest.mark.skipif(MODE == "local", reason="HALBENCH_CONFORMANCE=local: the Vulkan half is off")
@pytest.mark.parametrize("name", _params(XFAIL_VULKAN, _VULKAN_NAMES, "xfail_vulkan.txt"))
def test_vulkan(name: str, vulkan_device, tmp_path: Path) -> None:
    status, msg = check_case(CASES[name], vulkan_device, ("vulkan", "local"), tmp_path)
    assert status == "pass", f"{name}: {status}: {msg}"


def test_lists_name_real_cases() -> None:
    """Every listed case exists in this onnx, and the Vulkan list adds to the local one."""
    for listing, names in (("xfail_local.txt", XFAIL_LOCAL), ("xfail_vulkan.txt", XFAIL_VULKAN)):
        unknown = sorted(set(names) - set(CASES))
        assert not unknown, f"{listing} names cases this onnx does not have: {unknown[:5]}"
        assert all(r.strip() for r in names.values()), f"{listing}: every entry states its reason"
    assert not set(XFAIL_VULKAN) & set(XFAIL_LOCAL), "a case fails locally: list it in xfail_local.txt only"


def test_enough_cases_pass() -> None:
    """The suite is the real one: most plain cases are expected to pass on local-sync."""
    assert len(CASES) > 1500
    passing = len(CASES) - len(XFAIL_LOCAL)
    assert passing >= 1350, f"only {passing} of {len(CASES)} cases are expected to pass"
