"""Where a model benchmark's model file comes from, and what identifies it across machines.

A zoo model is keyed by its name, options and the halbench sources that build and compile it
(:func:`compiler_fingerprint`), so a changed compiler never reuses a stale bundle; a model file
by its bytes. Shared by the compile cache (``models.py``) and the reference (``reference.py``).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

from halbench import __version__
from halbench.errors import UserError
from halbench.tools import cache_dir

__all__ = ["compiler_fingerprint", "model_source"]


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the compiler's and the local kernels' sources (cache invalidation)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(__version__.encode())
    for sub in ("compiler", "kernels", "bundle"):
        for p in sorted((root / sub).rglob("*")):
            if p.suffix in (".py", ".j2", ".glsl", ".cu") and p.is_file():
                h.update(p.relative_to(root).as_posix().encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def model_source(params: dict[str, Any]) -> tuple[str, str, Any]:
    """(name, content key, a function that returns the model file) for a model benchmark.

    A zoo model is keyed by its name, options and the halbench sources that build it, and only
    built when its bundle is not cached (ResNet-50's ONNX file is ~100 MB; a seeded-random
    bundle of it is ~1 MB, small enough to carry to a machine without the compiler)."""
    if "path" in params:
        p = Path(params["path"])
        if not p.exists():
            raise UserError(f"model file {p} does not exist")
        return p.stem, hashlib.sha256(p.read_bytes()).hexdigest(), lambda: p
    from halbench.bench import zoo

    name = zoo.resolve_name(params["zoo"])
    opts = {k: params[k] for k in ("batch", "seq") if k in params}
    key = hashlib.sha256(repr((name, sorted(opts.items()), compiler_fingerprint())).encode()).hexdigest()

    def build() -> Path:
        path = cache_dir() / "models" / f"{name}-{key[:16]}.onnx"
        if not path.exists():
            zoo.save(name, path, **opts)
        return path

    return name, key, build
