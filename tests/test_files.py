"""Atomic writes: all or nothing, with ordinary permissions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from halbench.errors import UserError
from halbench.files import atomic_open, atomic_write


def test_write_replaces_whole_file_with_plain_permissions(tmp_path: Path) -> None:
    p = tmp_path / "sub" / "r.json"
    atomic_write(p, "first")
    atomic_write(p, b"second")
    assert p.read_bytes() == b"second"
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask
    assert os.listdir(p.parent) == ["r.json"]


def test_failure_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    p = tmp_path / "r.json"
    atomic_write(p, "old")
    with pytest.raises(RuntimeError):
        with atomic_open(p) as f:
            f.write(b"half")
            raise RuntimeError("interrupted")
    assert p.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_missing_folder_without_make_dirs_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot write bundle .*No such file or directory"):
        atomic_write(tmp_path / "no" / "m.hbx", b"x", "bundle", make_dirs=False)


def test_a_killed_writers_temporary_file_is_removed_by_the_next_write(tmp_path: Path) -> None:
    """A writer killed mid-write (SIGKILL) leaves ``.NAME.PID.*.tmp`` beside the output; the next
    write of that output removes it once its process is gone and it is a minute old. A live
    writer's file, a fresh one and another output's are left alone."""
    import signal
    import subprocess
    import sys
    import time

    p = tmp_path / "m.hbx"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child.send_signal(signal.SIGKILL)
    child.wait()
    dead = child.pid
    old = time.time() - 600
    stale = tmp_path / f".m.hbx.{dead}.k3j2.tmp"
    fresh = tmp_path / f".m.hbx.{dead}.zz91.tmp"
    live = tmp_path / f".m.hbx.{os.getppid()}.a1b2.tmp"
    other = tmp_path / f".n.hbx.{dead}.q7q7.tmp"
    for f in (stale, fresh, live, other):
        f.write_bytes(b"half a bundle")
    for f in (stale, live, other):
        os.utime(f, (old, old))
    atomic_write(p, b"whole")
    assert p.read_bytes() == b"whole"
    assert not stale.exists()
    assert fresh.exists() and live.exists() and other.exists()
