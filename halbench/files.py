"""Atomic file writes, shared by everything halbench writes (bundles, results, reports, .npy
outputs, caches): a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from halbench.errors import UserError

__all__ = ["atomic_open", "atomic_write", "check_output", "exclusive"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_STALE_S = 60.0  # a temporary file whose writer is gone is removed once it is this old


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _sweep_stale(path: Path) -> None:
    """Remove the temporary files an earlier writer of ``path`` left when it was killed mid-write
    (SIGKILL, the OOM killer, a power cut): ``.NAME.PID.*.tmp`` whose process no longer exists
    and that nothing has written to for a minute. A live writer's file is left alone; so is a
    file without a PID in its name."""
    import glob

    try:
        stale = glob.glob(glob.escape(str(path.parent / f".{path.name}.")) + "*.tmp")[:64]
    except OSError:
        return
    now = time.time()
    for t in stale:
        pid = Path(t).name[len(path.name) + 2:].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid() or _pid_alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            if now - os.stat(t).st_mtime > _STALE_S:
                os.unlink(t)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, what: str = "file", make_dirs: bool = True) -> Iterator[IO[bytes]]:
    """Open a temporary file beside ``path`` for writing bytes; on success it is flushed,
    fsynced, given the permissions a plain ``open`` would give, and renamed over ``path``.
    On any failure the temporary file is removed and ``path`` is left as it was.
    ``make_dirs`` creates missing parent folders (else a missing folder is a UserError)."""
    path = Path(path)
    try:
        if make_dirs:
            path.parent.mkdir(parents=True, exist_ok=True)
        _sweep_stale(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise UserError(f"cannot write {what} {path}: {e.strerror} ({path.parent})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes the file 0600; a result or a bundle is meant to be shared like any other.
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.strerror:  # a full disk, a quota, a file-size limit
            raise UserError(f"cannot write {what} {path}: {e.strerror}; {path} is left as it was") from None
        raise


def atomic_write(path: str | os.PathLike, data: bytes | str, what: str = "file",
                 make_dirs: bool = True) -> Path:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` atomically."""
    with atomic_open(path, what, make_dirs) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def check_output(path: str | os.PathLike, *inputs: str | os.PathLike, what: str = "output") -> Path:
    """Refuse, before any work, an output that cannot be written or would destroy an input:
    a directory, a missing or read-only folder, or the same file as one of ``inputs``."""
    out = Path(path)
    if out.is_dir():
        raise UserError(f"{what} {out} is a directory; name a file (e.g. {out / 'results.json'})")
    for i in inputs:
        if i is not None and Path(i).exists() and out.exists() and out.resolve() == Path(i).resolve():
            raise UserError(f"{what} {out} is also an input: writing it would destroy the input; "
                            f"choose another output path")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UserError(f"cannot write {what} {out}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot write {what} {out}: folder {folder} is not writable")
    return out


@contextlib.contextmanager
def exclusive(path: str | os.PathLike, what: str = "output") -> Iterator[None]:
    """Hold an advisory lock (``PATH.lock``) while writing ``path``: a second writer is refused
    with one line instead of both overwriting each other."""
    import fcntl

    lock = Path(f"{os.fspath(path)}.lock")
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as e:
        raise UserError(f"cannot lock {what} {path}: {e.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"another halbench is writing {what} {path} (it holds {lock}); wait for it, "
                            f"or choose another output") from None
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)
