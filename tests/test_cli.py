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


# -- one CLI: --format json everywhere, one naming scheme, exit codes in every --help ----------

def _commands() -> list[str]:
    import click

    return sorted(main.list_commands(click.Context(main)))


def test_every_command_takes_format_json_and_lists_its_exit_codes() -> None:
    from halbench.cli import exit_codes

    assert len(_commands()) >= 14
    for name in _commands():
        r = run(name, "--help")
        assert r.exit_code == 0, r.output
        assert "--format" in r.output and "json" in r.output, f"{name} has no --format json"
        assert "Exit codes" in r.output, f"{name}'s --help has no exit codes"
        text = " ".join(r.output.split())
        for code, _ in exit_codes(name):
            if code != 130:
                assert f"{code} " in text.split("Exit codes", 1)[1], f"{name}: exit code {code} missing"


def test_readme_exit_code_table_is_the_cli_table() -> None:
    from halbench.cli import exit_codes

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for name in _commands():
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"README's exit code table has no row for {name}"
        cells = [c.strip().replace("\\|", "|") for c in row.strip("|").split(" | ")]
        codes = dict(exit_codes(name))
        assert cells[1:5] == [codes.get(c, "–") for c in (0, 1, 2, 3)], name


@pytest.fixture(scope="module")
def two_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    from halbench.bench.results import write_results
    from tests.reports.make_results import make_results

    d = tmp_path_factory.mktemp("two")
    base = write_results(d / "base.json", make_results(seed=1, repetitions=3))
    new = write_results(d / "new.json", make_results(seed=2, repetitions=3, slowdown={"resnet50/b1": 2.0}))
    return str(base), str(new)


def test_compare_and_gate_take_both_spellings(two_results: tuple[str, str]) -> None:
    base, new = two_results
    positional = run("compare", base, new, "--format", "json")
    named = run("compare", "--baseline", base, "--candidate", new, "--format", "json")
    short = run("compare", "--base", base, "--new", new, "--format", "json")
    assert positional.exit_code == named.exit_code == short.exit_code == 0, positional.output + named.output
    assert json.loads(positional.stdout) == json.loads(named.stdout) == json.loads(short.stdout)
    g_named = run("gate", "--baseline", base, "--candidate", new, "--format", "json")
    g_positional = run("gate", base, new, "--format", "json")
    assert g_named.exit_code == g_positional.exit_code == 1  # resnet50 twice as slow: REGRESSION
    a, b = json.loads(g_named.stdout), json.loads(g_positional.stdout)
    assert a == b and a["answer"] == "REGRESSION" and a["exit_code"] == 1
    assert any(o["result"] == "regression" and o["name"] == "resnet50/b1" and o["decision"]["p_value"] is not None
               for o in a["outcomes"])
    # The verdicts of compare's JSON and the gate's JSON are one decision.
    verdicts = {(r["name"], r["device"]): r["verdict"] for r in json.loads(positional.stdout)["rows"]}
    results = {(o["name"], o["device"]): o["result"] for o in a["outcomes"]}
    to_gate = {"slower": "regression", "same": "pass", "faster": "pass", "inconclusive": "inconclusive"}
    assert {k: to_gate[v] for k, v in verdicts.items() if v in to_gate} == \
        {k: v for k, v in results.items() if k in verdicts and verdicts[k] in to_gate}


@pytest.mark.parametrize("cmd", ["compare", "gate"])
def test_files_given_twice_are_refused_in_one_line(two_results: tuple[str, str], cmd: str) -> None:
    base, new = two_results
    r = run(cmd, base, new, "--baseline", base)
    assert r.exit_code == 2
    err = r.stderr.strip()
    assert "\n" not in err and "not both" in err and "Traceback" not in err


def test_gate_json_when_the_input_is_unusable(two_results: tuple[str, str], tmp_path: Path) -> None:
    base, _ = two_results
    r = run("gate", base, str(tmp_path / "missing.json"), "--format", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["answer"] == "UNUSABLE" and doc["problems"]


def test_report_and_trace_format_json(two_results: tuple[str, str], tmp_path: Path) -> None:
    base, new = two_results
    out = tmp_path / "r.html"
    r = run("report", base, new, "-o", str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["output"] == str(out) and doc["bytes"] == out.stat().st_size
    t = run("trace", base, "-o", str(tmp_path / "t.json"), "--format", "json")
    assert t.exit_code == 0, t.output
    assert json.loads(t.stdout)["dispatch_slices"] > 0


def test_run_module_format_json(tmp_path: Path) -> None:
    import numpy as np

    import tests.hal.kernels_local  # noqa: F401  (registers the test.* kernels in this process)
    from tests.runtime import bundles as B

    hbx = tmp_path / "m.hbx"
    B.build(hbx)
    x = B.x_input()
    np.save(tmp_path / "x.npy", x)
    r = run("run-module", "--device=local-sync://", f"--module={hbx}", "--function=affine",
            f"--input=@{tmp_path}/x.npy", "--format", "json", "--print-max-element-count", "100000")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["function"] == "affine" and doc["device"] == "local-sync://0"
    for got, want in zip(doc["results"], B.expected_affine(x)):
        assert got["shape"] == list(want.shape) and not got["elided"]
        np.testing.assert_array_equal(np.array(got["values"], dtype=want.dtype).reshape(want.shape), want)
    short = run("run-module", "--device=local-sync://", f"--module={hbx}", "--function=affine",
                f"--input=@{tmp_path}/x.npy", "--format", "json", "--print-max-element-count", "3")
    first = json.loads(short.stdout)["results"][0]
    assert first["elided"] and len(first["values"]) == 3


def test_run_suite_format_json(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    r = run("run-suite", "smoke", "-o", str(out), "--device", "local-sync://0", "--only",
            "peak/latency/dispatch", "--no-progress", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["output"] == str(out) and doc["counts"] == {"ok": 1} and doc["suite"] == "smoke"
    assert isinstance(doc["warnings"], list)
