"""Unpack one gpu_precision pack member and print `halbench inspect --device` for it (the GPU
machine has no front end; the pack carries the bundle): registers and occupancy per kernel.
Usage: python3 scripts/gpu_inspect_packed.py PACK_DIR NAME.hbxs DEVICE [--top N]"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_precision import _unpack

from halbench.cli import main

root, name, device = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
dest = Path(tempfile.mkdtemp()) / name.replace(".hbxs", ".hbx")
_unpack(root / name, root / "weights", dest)
main(["inspect", str(dest), "--device", device], standalone_mode=True)
