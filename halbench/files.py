"""Atomic file writes, shared by everything halbench writes (bundles, results, reports, .npy
outputs, caches): a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from halbench.errors import UserError

__all__ = ["atomic_open", "atomic_write"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
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
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, data: bytes | str, what: str = "file",
                 make_dirs: bool = True) -> Path:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` atomically."""
    with atomic_open(path, what, make_dirs) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)
