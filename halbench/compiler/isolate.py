"""Compiles in a child process, so that a crash in native code cannot take the caller with it.

The compiler's front end runs native code halbench does not own: ONNX's shape inference and
torch-mlir's conversions (C++), which on some inputs abort the process (an LLVM fatal error), divide
by zero (SIGFPE), or allocate until the kernel's OOM killer ends it. None of that is an exception
Python can catch. :func:`run_isolated` runs one compile in a child process instead: its result and
its :class:`~halbench.errors.HalbenchError` come back as they would in-process, and a child that
dies becomes one :class:`~halbench.errors.CompileError` line naming the signal, the native
message (``LLVM ERROR: ...``) and the log kept for a bug report.

The child's stderr is captured in a file and replayed after it ends (so that a crash's stack dump
is not printed; warnings and notes still reach the user). Nothing crosses back but JSON that
halbench wrote. ``HALBENCH_ISOLATE=0`` runs in-process (a debugger, a profile).

Children come from multiprocessing's fork server: one fresh interpreter per process that
imports the compiler once (``_PRELOAD``) and forks a child per call, cheaply. Forking the caller
itself is not safe once it has threads: a process that compiled in-process holds MLIR's thread
pool, and a runner holds GPU drivers' threads and locks; a child forked from it deadlocked in
the pool (seen in the test suite). The child takes the caller's environment and working
directory of the moment of the call (the server's are those of its start).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from halbench.errors import CompileError, HalbenchError

__all__ = ["ChildBug", "compile_timeout", "isolation_enabled", "run_isolated"]

#: Lines of a dead child's log that say what killed it, best first.
_CAUSES = (r"LLVM ERROR: .*", r".*Assertion .* failed.*", r"terminate called .*", r".*what\(\): .*",
           r"Fatal Python error: .*", r".*[Ss]egmentation fault.*", r".*error: .*")
_MAX_REPLAY = 1 << 20  # bytes of a child's stderr replayed (the rest is in its log)
_MAX_CAUSE_READ = 4 << 20  # bytes at each end of a dead child's log searched for its cause
_MAX_KEPT_LOG = 16 << 20  # bytes of a dead child's log kept (its head and its tail)


class ChildBug(RuntimeError):
    """An exception other than a HalbenchError in the child: a bug in halbench. Its message is
    the child's ``Type: message``; its traceback is the ``__cause__`` (shown by ``--debug``)."""


class _RemoteTraceback(Exception):
    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


def isolation_enabled() -> bool:
    return os.environ.get("HALBENCH_ISOLATE", "1") != "0" and hasattr(os, "fork")


def compile_timeout(value: float | str | None = None) -> float | None:
    """Seconds a compile may take before it is stopped: ``value`` where given (a CLI option),
    else ``$HALBENCH_COMPILE_TIMEOUT``; None (no limit) where neither is set or the value is 0."""
    raw = value if value is not None else os.environ.get("HALBENCH_COMPILE_TIMEOUT", "").strip() or None
    if raw is None:
        return None
    try:
        t = float(raw)
    except (TypeError, ValueError):
        t = -1.0
    if not (t >= 0 and t < 1e7):
        from halbench.errors import UserError

        src = "the compile timeout" if value is not None else "$HALBENCH_COMPILE_TIMEOUT"
        raise UserError(f"{src} {raw!r} is not a number of seconds; give e.g. 600, or 0 for no limit")
    return t or None


#: Modules the fork server imports once, so that each child starts with them loaded.
_PRELOAD = ["numpy", "onnx", "halbench.compiler.compile", "halbench.compiler.frontend.onnx",
            "halbench.compiler.frontend.mlir", "halbench.compiler.parse"]


def _child(fn: Callable[..., Any], args: tuple, kwargs: dict, log_path: str, conn: Any,
           env: dict[str, str] | None = None, cwd: str | None = None) -> None:
    """The child's body: the caller's environment, stderr to the log, run, send one JSON message."""
    if env is not None:
        os.environ.clear()
        os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        msg: dict[str, Any] = {"value": fn(*args, **kwargs)}
    except HalbenchError as e:
        msg = {"error": type(e).__name__, "message": str(e), "exit_code": e.exit_code}
    except BaseException as e:  # noqa: BLE001 -- a bug: its traceback goes back as text
        msg = {"bug": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    try:
        data = json.dumps(msg, default=str)
    except (TypeError, ValueError) as e:
        data = json.dumps({"bug": f"the isolated call's result is not JSON: {e}", "traceback": ""})
    sys.stderr.flush()
    conn.send_bytes(data.encode())
    conn.close()


def _rebuild(msg: dict[str, Any]) -> HalbenchError:
    """The child's HalbenchError as the same class (one of halbench.errors) with its message."""
    from halbench import errors

    cls = getattr(errors, str(msg.get("error")), None)
    text = str(msg.get("message", ""))
    if not (isinstance(cls, type) and issubclass(cls, HalbenchError)):
        cls = CompileError
    try:
        e = cls(text)
    except TypeError:  # a class whose constructor takes more than the message
        e = cls.__new__(cls)
        Exception.__init__(e, text)
    if str(e) != text:
        e = cls.__new__(cls)
        Exception.__init__(e, text)
    if isinstance(msg.get("exit_code"), int) and msg["exit_code"] != type(e).exit_code:
        e.exit_code = msg["exit_code"]
    return e


def _cause(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for pattern in _CAUSES:
        for ln in lines:
            if re.fullmatch(pattern, ln):
                return ln[:300]
    return lines[-1][:300] if lines else ""


def _ends(path: Path, each: int) -> bytes:
    """The file whole where it is at most ``2 * each`` bytes, else its first and last ``each``
    bytes with a line between saying how much was left out (a child that wrote gigabytes to
    stderr must not make its own crash report slow or huge)."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        f.seek(0)
        if size <= 2 * each:
            return f.read()
        head = f.read(each)
        f.seek(size - each)
        return head + f"\n[... {size - 2 * each} bytes left out ...]\n".encode() + f.read(each)


def _keep_log(src: Path, what: str) -> Path | None:
    from halbench.files import atomic_write
    from halbench.tools import cache_dir

    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", what)[:60] or "compile"
    dest = cache_dir() / "failed" / f"crash-{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    try:
        atomic_write(dest, _ends(src, _MAX_KEPT_LOG // 2), what="crash log")
    except (OSError, HalbenchError):
        return None
    return dest


def _died(code: int, log_path: Path, what: str, hint: bool) -> CompileError:
    sig = -code if code < 0 else None
    try:
        name = signal.Signals(sig).name if sig else f"exit status {code}"
    except ValueError:
        name = f"signal {sig}"
    if sig == signal.SIGKILL:
        name += ", killed: out of memory?"
    try:
        cause = _cause(_ends(log_path, _MAX_CAUSE_READ).decode(errors="replace"))
    except OSError:
        cause = ""
    kept = _keep_log(log_path, what)
    where = f"; the log is {kept}" if kept else ""
    return CompileError(
        f"{what}: the compiler's front end crashed in native code, ONNX's or torch-mlir's "
        f"({name}{': ' + cause if cause else ''})"
        + (f"; `halbench check {what}` names the node" if hint else "") + where)


_FROM_ENV: Any = object()


def run_isolated(fn: Callable[..., Any], *args: Any, what: str, start: str = "forkserver",
                 timeout_s: float | None = _FROM_ENV, check_hint: bool = True, heartbeat: Path | None = None,
                 **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a child process; its (JSON-able) value, or its HalbenchError
    raised here. ``what`` names the work in a crash's message (the model file's name). ``start``:
    a multiprocessing start method (see the module's doc; ``fn`` and the arguments must pickle
    for all but 'fork'). A child still
    running after ``timeout_s`` is killed and reported as hung (default: :func:`compile_timeout`,
    from ``$HALBENCH_COMPILE_TIMEOUT``; None: no limit). ``heartbeat``: a file the child appends to
    as it finishes each part of its work; each time it grows, the child has ``timeout_s`` again
    (a limit per part, for check's nodes). ``check_hint``: a crash's message points to
    ``halbench check`` (not where the caller is that check)."""
    if timeout_s is _FROM_ENV:
        timeout_s = compile_timeout()
    if not isolation_enabled():
        return json.loads(json.dumps(fn(*args, **kwargs), default=str))
    import multiprocessing as mp

    ctx = mp.get_context(start)
    if start == "forkserver":
        ctx.set_forkserver_preload(_PRELOAD)
    fd, name = tempfile.mkstemp(prefix="halbench-compile-", suffix=".log")
    os.close(fd)
    log_path = Path(name)
    recv, send = ctx.Pipe(duplex=False)
    sys.stdout.flush()
    sys.stderr.flush()
    proc = ctx.Process(target=_child, args=(fn, args, kwargs, name, send, dict(os.environ), os.getcwd()),
                       daemon=True)
    try:
        proc.start()
        send.close()
        data = b""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        beat = -1
        while True:  # read before joining: a large message must not block the child's send
            if heartbeat is not None and deadline is not None:
                try:
                    size = heartbeat.stat().st_size
                except OSError:  # not written yet
                    size = 0
                if size != beat:
                    beat, deadline = size, time.monotonic() + timeout_s
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if recv.poll(min(left, 0.5) if left is not None else 0.5):
                try:
                    data = recv.recv_bytes()
                except EOFError:  # the child died without a message
                    pass
                break
            if not proc.is_alive():
                if recv.poll(0):
                    continue
                break
            if deadline is not None and time.monotonic() >= deadline:
                proc.kill()
                proc.join()
                raise CompileError(
                    f"{what}: the compile did not finish in {timeout_s:g} s and was stopped; give it longer "
                    f"(--timeout, $HALBENCH_COMPILE_TIMEOUT)"
                    + (f", or run `halbench check {what}` to find the node it hangs on" if check_hint else ""))
        proc.join()
        if not data:
            raise _died(proc.exitcode if proc.exitcode is not None else -1, log_path, what, check_hint)
        _replay(log_path)
        msg = json.loads(data)
        if "value" in msg:
            return msg["value"]
        if "error" in msg:
            raise _rebuild(msg)
        bug = ChildBug(str(msg.get("bug", "unknown failure")))
        raise bug from _RemoteTraceback(str(msg.get("traceback", "")))
    finally:
        recv.close()
        if proc.is_alive():
            proc.kill()
            proc.join()
        log_path.unlink(missing_ok=True)


def _replay(log_path: Path) -> None:
    """The child's stderr (warnings, notes) to ours, once it has ended normally."""
    try:
        with open(log_path, "rb") as f:
            text = f.read(_MAX_REPLAY)
    except OSError:
        return
    if text:
        sys.stderr.write(text.decode(errors="replace"))
        sys.stderr.flush()
