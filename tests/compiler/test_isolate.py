"""The compile child process (halbench.compiler.isolate): results and halbench's errors come back
as they would in-process; a child that dies in native code, or hangs, becomes one CompileError
line and a kept log, and the caller goes on. The crashes here are real ones of the child
process (a NULL read through ctypes, abort() after an LLVM-style message), the way torch-mlir's
and ONNX's native code killed `halbench compile` on the crafted models of test_op_fuzz.py."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from halbench.compiler.isolate import ChildBug, compile_timeout, run_isolated
from halbench.errors import BadOption, CompileError, DriverUnavailable, UserError

ROOT = Path(__file__).resolve().parents[2]


def _value(a: int, b: int = 0) -> dict:
    return {"sum": a + b, "pid": os.getpid(), "cwd": os.getcwd(), "env": os.environ.get("HB_ISOLATE_PROBE")}


def _user_error() -> None:
    raise UserError("model.onnx is not a valid ONNX model: truncated")


def _bad_option() -> None:
    raise BadOption("--runtime x: no such runtime")


def _driver_unavailable() -> None:
    raise DriverUnavailable("cuda", "no libcuda.so.1")


def _bug() -> None:
    return [][1]  # noqa: PLE0643 -- an IndexError, a bug


def _segfault() -> None:
    ctypes.string_at(0)  # a NULL read: SIGSEGV in native code


def _llvm_abort() -> None:
    os.write(2, b"some progress\nLLVM ERROR: Failed to infer result type(s).\nStack dump:\n0. frame\n")
    os.abort()


def _warns() -> int:
    print("halbench: note: a note from the child", file=sys.stderr)
    return 7


def _hang() -> None:
    time.sleep(60)


def test_value_environment_and_directory_come_from_the_caller(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HB_ISOLATE_PROBE", "set-after-start")
    monkeypatch.chdir(tmp_path)
    r = run_isolated(_value, 2, b=3, what="m.onnx")
    assert r["sum"] == 5
    assert r["pid"] != os.getpid()  # it ran in another process
    assert r["env"] == "set-after-start" and Path(r["cwd"]) == tmp_path


@pytest.mark.parametrize("fn, cls, text, code", [
    (_user_error, UserError, "model.onnx is not a valid ONNX model: truncated", 1),
    (_bad_option, BadOption, "--runtime x: no such runtime", 2),
    (_driver_unavailable, DriverUnavailable, "driver 'cuda' is unavailable: no libcuda.so.1", 1),
])
def test_halbench_errors_come_back_as_themselves(fn, cls, text: str, code: int) -> None:
    with pytest.raises(cls) as e:
        run_isolated(fn, what="m.onnx")
    assert type(e.value) is cls and str(e.value) == text and e.value.exit_code == code


def test_a_bug_in_the_child_keeps_its_traceback() -> None:
    with pytest.raises(ChildBug) as e:
        run_isolated(_bug, what="m.onnx")
    assert str(e.value).startswith("IndexError: list index out of range")
    assert "_bug" in str(e.value.__cause__)  # the child's own traceback, for --debug


def test_a_native_crash_is_one_line_with_its_signal_and_a_kept_log(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(CompileError) as e:
        run_isolated(_segfault, what="resnet.onnx")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("resnet.onnx: the compiler's front end crashed in native code")
    assert "(SIGSEGV" in msg and "halbench check resnet.onnx" in msg
    kept = list((tmp_path / "halbench" / "failed").glob("crash-resnet.onnx-*.log"))
    assert len(kept) == 1 and str(kept[0]) in msg
    # and the caller goes on
    assert run_isolated(_value, 1, what="next.onnx")["sum"] == 1


def test_an_abort_names_the_llvm_message_not_the_stack_dump(tmp_path: Path, capfd: pytest.CaptureFixture) -> None:
    with pytest.raises(CompileError) as e:
        run_isolated(_llvm_abort, what="m.onnx", check_hint=False)
    msg = str(e.value)
    assert "(SIGABRT: LLVM ERROR: Failed to infer result type(s).)" in msg and "halbench check" not in msg
    log = Path(re.search(r"the log is (\S+)$", msg).group(1))
    assert "Stack dump:" in log.read_text()  # the whole of it kept for the report
    assert "Stack dump" not in capfd.readouterr().err  # not printed


def test_the_childs_stderr_reaches_the_caller(capfd: pytest.CaptureFixture) -> None:
    assert run_isolated(_warns, what="m.onnx") == 7
    assert "halbench: note: a note from the child" in capfd.readouterr().err


def test_a_hang_is_stopped_at_the_timeout() -> None:
    t0 = time.monotonic()
    with pytest.raises(CompileError, match=r"did not finish in 1 s"):
        run_isolated(_hang, what="m.onnx", timeout_s=1)
    assert time.monotonic() - t0 < 30


def test_isolation_off_runs_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALBENCH_ISOLATE", "0")
    assert run_isolated(_value, 1, what="m.onnx")["pid"] == os.getpid()


def test_cli_compile_and_check_report_crafted_crashers_in_one_line(tmp_path: Path) -> None:
    """`halbench compile` of a node form that used to kill the process (DepthToSpace whose
    channels are no multiple of blocksize², SIGFPE in torch-mlir) exits 1 with one line;
    `halbench check` gives that node its own verdict and passes the others."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("iree.compiler")
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("DepthToSpace", ["a"], ["b"], blocksize=3, name="d2s"),
             helper.make_node("Sigmoid", ["x"], ["c"], name="sig")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 2, 2])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in "bc"])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    path = tmp_path / "crafted.onnx"
    onnx.save(m, path)
    cli = [sys.executable, "-m", "halbench"]
    r = subprocess.run([*cli, "compile", str(path), "-o", str(tmp_path / "x.hbx")], capture_output=True,
                       text=True, timeout=300, cwd=ROOT, check=False)
    assert r.returncode == 1 and not (tmp_path / "x.hbx").exists()
    assert r.stderr.strip().count("\n") == 0
    assert "node 'd2s' (DepthToSpace): its 4 channels are not a multiple of blocksize² = 9" in r.stderr
    r = subprocess.run([*cli, "check", str(path)], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       check=False)
    assert r.returncode == 1, r.stderr
    assert "3 nodes of 3 op types; 1 cannot be compiled" in r.stdout
    assert re.search(r"d2s \(DepthToSpace, opset 18\): its 4 channels", r.stdout)


def _nodes_with_a_crash(paths: list[str], progress: str) -> list:
    """``check._compile_nodes``'s contract, with a real SIGSEGV at the file named crash*."""
    import json

    out = []
    for f in paths:
        if Path(f).name.startswith("crash"):
            _segfault()
        r = None if Path(f).name.startswith("ok") else f"{Path(f).name}: refused"
        out.append(r)
        with open(progress, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(r) + "\n")
    return out


def test_check_gives_a_crashing_node_its_verdict_and_goes_on(tmp_path: Path) -> None:
    """`halbench check` compiles every node in one child; a node that kills it is that node's
    verdict (the crash, one line), and the nodes after it run in a new child."""
    from halbench.compiler.check import _compile_isolated

    names = ["ok1.onnx", "bad2.onnx", "crash3.onnx", "ok4.onnx", "crash5.onnx", "bad6.onnx"]
    files = [tmp_path / n for n in names]
    got = _compile_isolated(files, tmp_path, "model", worker=_nodes_with_a_crash)
    assert len(got) == 6
    assert got[0] is None and got[3] is None
    assert got[1] == "bad2.onnx: refused" and got[5] == "bad6.onnx: refused"
    for crashed in (got[2], got[4]):
        assert crashed.startswith("the compiler's front end crashed in native code") and "(SIGSEGV" in crashed
        assert "\n" not in crashed


def _nodes_with_a_hang(paths: list[str], progress: str) -> list:
    """``check._compile_nodes``'s contract, 0.4 s a node, hanging at the file named hang*."""
    import json

    out = []
    for f in paths:
        time.sleep(60 if Path(f).name.startswith("hang") else 0.4)
        out.append(None)
        with open(progress, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(None) + "\n")
    return out


def test_checks_timeout_is_per_node_and_a_hanging_node_gets_the_verdict(tmp_path: Path) -> None:
    """check's limit is per node (the child's progress file is its heartbeat): eight nodes of
    0.4 s each pass a 1.5 s limit together, and the one that hangs is stopped and named."""
    from halbench.compiler.check import _compile_isolated

    names = [f"ok{i}.onnx" for i in range(4)] + ["hang4.onnx"] + [f"ok{i}.onnx" for i in range(5, 9)]
    t0 = time.monotonic()
    got = _compile_isolated([tmp_path / n for n in names], tmp_path, "model", worker=_nodes_with_a_hang,
                            timeout_s=1.5)
    assert time.monotonic() - t0 < 30
    assert got[:4] == [None] * 4 and got[5:] == [None] * 4
    assert got[4].startswith("the compile did not finish in 1.5 s and was stopped"), got[4]
    assert "halbench check" not in got[4]


def test_the_compile_timeout_comes_from_the_option_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HALBENCH_COMPILE_TIMEOUT", raising=False)
    assert compile_timeout() is None and compile_timeout(30) == 30.0 and compile_timeout(0) is None
    monkeypatch.setenv("HALBENCH_COMPILE_TIMEOUT", "45")
    assert compile_timeout() == 45.0 and compile_timeout(5) == 5.0
    monkeypatch.setenv("HALBENCH_COMPILE_TIMEOUT", "ten minutes")
    with pytest.raises(UserError, match=r"\$HALBENCH_COMPILE_TIMEOUT 'ten minutes' is not a number of seconds"):
        compile_timeout()
    monkeypatch.setenv("HALBENCH_COMPILE_TIMEOUT", "1")
    with pytest.raises(CompileError, match=r"did not finish in 1 s .*\$HALBENCH_COMPILE_TIMEOUT\), or run "
                                           r"`halbench check m.onnx`"):
        run_isolated(_hang, what="m.onnx")  # the environment's limit by default


def _floods_then_segfaults() -> None:
    chunk = b"x" * 1023 + b"\n"
    os.write(2, b"LLVM ERROR: the cause, written first\n")
    for _ in range(40 * 1024):  # 40 MiB of stderr
        os.write(2, chunk)
    _segfault()


def test_a_flooded_log_keeps_its_ends_and_still_names_the_cause(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(CompileError) as e:
        run_isolated(_floods_then_segfaults, what="m.onnx", check_hint=False)
    msg = str(e.value)
    assert "(SIGSEGV: LLVM ERROR: the cause, written first)" in msg
    log = Path(re.search(r"the log is (\S+)$", msg).group(1))
    assert log.stat().st_size < 17 << 20
    text = log.read_bytes()
    assert text.startswith(b"LLVM ERROR: the cause") and b"bytes left out ..." in text


def test_cli_compile_timeout_stops_the_compile_in_one_line(tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("iree.compiler")
    from onnx import TensorProto, helper

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    cli = [sys.executable, "-m", "halbench", "compile", str(path), "-o", str(tmp_path / "x.hbx")]
    r = subprocess.run([*cli, "--timeout", "0.001"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       check=False)
    assert r.returncode == 1 and not (tmp_path / "x.hbx").exists()
    assert r.stderr.strip().count("\n") == 0
    assert "relu.onnx: the compile did not finish in 0.001 s and was stopped" in r.stderr
    r = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=ROOT, check=False,
                       env={**os.environ, "HALBENCH_COMPILE_TIMEOUT": "soon"})
    assert r.returncode != 0 and "$HALBENCH_COMPILE_TIMEOUT 'soon' is not a number of seconds" in r.stderr
    r = subprocess.run([*cli, "--timeout", "600"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                       check=False, env={**os.environ, "HALBENCH_COMPILE_TIMEOUT": "0.001"})
    assert r.returncode == 0, r.stderr  # the option wins over the environment
