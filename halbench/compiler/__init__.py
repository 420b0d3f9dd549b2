"""The halbench compiler: ONNX / MLIR -> halbench IR -> per-device executables -> bundle.

``compile_model`` and ``CompileOptions`` (from ``halbench.compiler.compile``) are the public
entry; they load lazily so that ``halbench.compiler.targets`` stays cheap to import and the
MLIR bindings are only needed when compiling.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CompileOptions", "CompiledModule", "compile_model"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from halbench.compiler import compile as _compile

        return getattr(_compile, name)
    raise AttributeError(f"module 'halbench.compiler' has no attribute '{name}'")
