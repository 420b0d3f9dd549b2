"""The list-drivers / list-devices / dump-devices commands: output, JSON and exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from halbench.cli import main
from halbench.drivers import get_driver
from halbench.errors import DriverUnavailable

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def _unavailable(name: str) -> str:
    try:
        get_driver(name).query_available_devices()
    except DriverUnavailable as e:
        return e.reason
    pytest.skip(f"{name} is available on this machine")


@pytest.fixture(scope="module")
def vk_uuid() -> str:
    try:
        devices = get_driver("vulkan").query_available_devices()
    except DriverUnavailable as e:
        pytest.skip(f"no Vulkan here: {e.reason}")
    if not devices or not devices[0].identity.uuid:
        pytest.skip("no Vulkan device with a UUID")
    return devices[0].identity.uuid


def test_list_drivers_shows_unavailable_reasons() -> None:
    r = run("list-drivers")
    assert r.exit_code == 0
    reason = _unavailable("cuda")
    assert f"unavailable: {reason}" in r.stdout
    doc = json.loads(run("list-drivers", "--format", "json").stdout)
    hip = next(d for d in doc["drivers"] if d["name"] == "hip")
    assert hip["available"] is False and "libamdhip64.so not found" in hip["reason"]


def test_list_devices(vk_uuid: str) -> None:
    r = run("list-devices")
    assert r.exit_code == 0
    assert any(ln.startswith("vulkan://0 ") and vk_uuid in ln for ln in r.stdout.splitlines())
    assert "local-sync://0" in r.stdout and "local-task://0" in r.stdout
    doc = json.loads(run("list-devices", "vulkan", "--format", "json").stdout)
    assert {d["driver"] for d in doc["devices"]} == {"vulkan"}
    assert doc["devices"][0]["uuid"] == vk_uuid and doc["devices"][0]["uuid_uri"] == f"vulkan://{vk_uuid}"


def test_dump_all_text(vk_uuid: str) -> None:
    r = run("dump-devices")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    for name in ("vulkan", "cuda", "hip", "local-sync", "local-task"):
        assert f"# Driver: {name}" in lines
    assert "# --device=vulkan://0" in lines and f"# --device=vulkan://{vk_uuid}" in lines
    assert any(ln.startswith("feature_tier[vulkan-1.3]: ") for ln in lines)
    assert f"#   unavailable: {_unavailable('cuda')}" in lines


def test_dump_json(vk_uuid: str) -> None:
    r = run("dump-devices", "--format", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and doc["halbench_version"]
    by_name = {d["name"]: d for d in doc["drivers"]}
    assert by_name["cuda"]["available"] is False and by_name["cuda"]["devices"] == []
    dev = by_name["vulkan"]["devices"][0]
    assert dev["identity"]["uuid"] == vk_uuid and dev["tiers"][0]["name"] == "vulkan-1.3"
    assert all(type(v) is bool for v in dev["features"]["flags"].values())


@pytest.mark.parametrize("target", ["vulkan://0", "vulkan://{uuid}", "vulkan://{hex}"])
def test_dump_one_device(vk_uuid: str, target: str) -> None:
    target = target.format(uuid=vk_uuid, hex=vk_uuid[4:].replace("-", ""))
    doc = json.loads(run("dump-devices", target, "--format", "json").stdout)
    assert [d["name"] for d in doc["drivers"]] == ["vulkan"]
    assert [d["uri"] for d in doc["drivers"][0]["devices"]] == ["vulkan://0"]


@pytest.mark.parametrize("args, needle", [
    (["dump-devices", "nosuch"], "unknown driver 'nosuch'"),
    (["list-devices", "nosuch"], "unknown driver 'nosuch'"),
    (["dump-devices", "vulkan://xyz"], "malformed device URI"),
    (["dump-devices", "vulkan:0"], "malformed device URI"),
    (["dump-devices", "vulkan://99"], "no device vulkan://99; available: vulkan://0"),
    (["dump-devices", "vulkan://GPU-00000000-0000-0000-0000-000000000000"], "no vulkan device with UUID"),
    (["dump-devices", "cuda"], "driver 'cuda' is unavailable: "),
    (["list-devices", "hip"], "driver 'hip' is unavailable: libamdhip64.so not found"),
])
def test_user_errors_exit_1_with_one_line(args: list[str], needle: str) -> None:
    if args[1] in ("cuda", "hip"):
        _unavailable(args[1])
    elif args[1].startswith("vulkan://") and args[1][9:].isdigit():
        pytest.importorskip("vulkan")
    r = run(*args)
    assert r.exit_code == 1
    assert r.stdout == ""
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("halbench: error: ") and needle in err[0]


def test_real_subprocess() -> None:
    exe = Path(sys.executable).with_name("halbench")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "halbench"]
    p = subprocess.run([*cmd, "dump-devices"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")})
    assert p.returncode == 0, p.stderr
    assert "# Driver: vulkan" in p.stdout and "# Driver: local-sync" in p.stdout
    p = subprocess.run([*cmd, "dump-devices", "nosuch"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr.count("\n") == 1
