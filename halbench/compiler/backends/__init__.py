"""The compiler half of each API's plug-in unit, registered by name.

A :class:`CompilerBackend` says everything the compiler, the CLI and the micro-benchmarks need
to know about one API: the HAL drivers whose devices it compiles for, its target option
(``--vulkan-target``), its target-table entries and default target, its code generator, its
extra options (``--vulkan-dispatch-abi``), and how it builds the micro-benchmark kernels.
Nothing outside this registry lists the APIs.

Built-in backends live in this package (``vulkan.py``, ``cuda.py``, ``hip.py``, ``local.py``,
``webgpu.py``); third parties add theirs through the entry-point group
``halbench.compiler_backends`` (an entry point names a CompilerBackend instance). The tool
wrappers next to them (``glslang.py``, ``nvrtc.py``) turn generated source into device code.

The driver half (``halbench.drivers``) is the other half of the unit; the two never import
each other. They meet only in format names and target strings, and one test checks that they
agree on every target of the table (tests/test_plugins.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from typing import Any

from halbench.errors import UserError

__all__ = [
    "BackendOption",
    "CompilerBackend",
    "Unsupported",
    "api_names",
    "backend",
    "backend_for_driver",
    "backends",
]

_BUILTIN = ("local", "vulkan", "cuda", "hip", "webgpu")


class Unsupported(UserError):
    """This backend cannot build that (a micro kernel, a dtype): skipped with the reason."""


@dataclass(frozen=True)
class BackendOption:
    """One extra compile option of a backend (``--vulkan-dispatch-abi``)."""

    name: str  # the CompileOptions key and the CLI flag without dashes: "vulkan-dispatch-abi"
    choices: tuple[str, ...]
    default: str
    help: str
    #: More spellings of the flag (IREE's: ``iree-vulkan-dispatch-abi``).
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class CompilerBackend:
    """What the compiler knows of one API. Hooks are plain callables, imported lazily by the
    backend module itself, so listing backends compiles nothing and loads no tool."""

    name: str
    description: str
    #: HAL drivers whose devices run this backend's variants (the bundle picks among them).
    drivers: tuple[str, ...]
    #: Executable formats it emits, in the order it emits them.
    formats: tuple[str, ...]
    #: ``generate(dispatch, graph, target, options) -> list[GpuVariant]`` (options: the
    #: backend's own option values by name).
    generate: Callable[..., list[Any]]
    #: More names ``--target-device`` takes for it: IREE's backend names (``vulkan-spirv``,
    #: ``llvm-cpu``, ``rocm``), so IREE command lines run as written.
    aliases: tuple[str, ...] = ()
    #: The CLI flag naming this backend's target (``vulkan-target``); None: no targets (local).
    target_option: str | None = None
    #: More spellings of that flag (``rocm-target`` for hip).
    target_aliases: tuple[str, ...] = ()
    #: ``default_target() -> Target``: code that runs on every device of the API.
    default_target: Callable[[], Any] | None = None
    #: Target-table entries this backend brings beyond the shared hardware table.
    extra_targets: Callable[[], Sequence[Any]] = lambda: ()
    options: tuple[BackendOption, ...] = ()
    #: ``micro_binary(kernel, fmt, device_info[, options]) -> MicroKernel``; ``options`` are the
    #: kernel-shaping parameters as upper-case #define names (UNROLL, CHAINS, BM, ...); raises
    #: Unsupported for a kernel or an option value it has none of.
    micro_binary: Callable[..., Any] | None = None
    #: Which micro-benchmark kernels it has (names of halbench.bench.micro's kernel table).
    micro_kernels: frozenset[str] = field(default_factory=frozenset)
    #: ``variant_targets(target) -> [(format, target string)]``: what a compile for ``target``
    #: puts in the bundle, without generating code (the plug-in agreement test uses it).
    variant_targets: Callable[[Any], list[tuple[str, str]]] | None = None

    def option_defaults(self) -> dict[str, str]:
        return {o.name: o.default for o in self.options}


def _check(b: Any, where: str) -> CompilerBackend:
    if not isinstance(b, CompilerBackend):
        raise UserError(f"{where} is not a halbench.compiler.backends.CompilerBackend")
    if not b.drivers or not b.formats or not callable(b.generate):
        raise UserError(f"compiler backend '{b.name}' ({where}) needs drivers, formats and generate")
    return b


@cache
def backends() -> dict[str, CompilerBackend]:
    """Every compiler backend by name: the built-in ones, then entry points."""
    out: dict[str, CompilerBackend] = {}
    for name in _BUILTIN:
        mod = importlib.import_module(f"halbench.compiler.backends.{name}")
        out[name] = _check(mod.BACKEND, f"halbench.compiler.backends.{name}")
    for ep in entry_points(group="halbench.compiler_backends"):
        if ep.name in out:
            continue
        try:
            out[ep.name] = _check(ep.load(), ep.value)
        except (ImportError, AttributeError) as e:
            raise UserError(f"compiler backend '{ep.name}' ({ep.value}) cannot be loaded: {e}") from None
    return out


def api_names(with_aliases: bool = False) -> tuple[str, ...]:
    """The names ``--target-device`` takes (with IREE's aliases when asked)."""
    names = list(backends())
    if with_aliases:
        names += [a for b in backends().values() for a in b.aliases]
    return tuple(names)


def canonical(name: str) -> str:
    """A backend's own name for ``name`` or one of its aliases (``llvm-cpu`` -> ``local``)."""
    return backend(name).name


def backend(name: str) -> CompilerBackend:
    reg = backends()
    if name in reg:
        return reg[name]
    for b in reg.values():
        if name in b.aliases:
            return b
    raise UserError(f"unknown target device '{name}'; this compiler emits: "
                    f"{', '.join(api_names(with_aliases=True))}")


def backend_for_driver(driver: str) -> CompilerBackend:
    """The backend whose variants a HAL driver runs (``local-task`` -> ``local``)."""
    for b in backends().values():
        if driver in b.drivers:
            return b
    known = "; ".join(f"{b.name}: {', '.join(b.drivers)}" for b in backends().values())
    raise UserError(f"no compiler backend emits code for the '{driver}' driver (backends and their "
                    f"drivers: {known})")


def option_values(name: str, given: Mapping[str, str]) -> dict[str, str]:
    """The backend's options with defaults filled in, each checked against its choices."""
    b = backend(name)
    out = b.option_defaults()
    for o in b.options:
        if o.name in given:
            v = given[o.name]
            if v not in o.choices:
                raise UserError(f"--{o.name} must be one of {', '.join(o.choices)}, not '{v}'")
            out[o.name] = v
    return out
