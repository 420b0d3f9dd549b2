"""The tuning cache: measured GEMM configurations per (API, target), read by the compiler.

``halbench tune`` measures candidate configurations of a model's GEMM problems on a device and
writes the fastest per problem here; ``compile`` then uses them for that target instead of the
rule (``codegen.tuning.gemm_tiles``). One JSON file per API and target name,
``$XDG_CACHE_HOME/halbench/tuning/<api>-<target>.json``, written atomically. The file is
untrusted: it is size-capped and validated with :class:`TuningCacheDoc`, and every
configuration is checked again against the target by codegen (``GemmConfig.problem``) before
it is used. A file that does not validate is an error naming the file and the way out.

Where the compiler looks (``CompileOptions.tuning_cache``, ``--tuning-cache``): ``None`` means
``$HALBENCH_TUNING_CACHE`` or else the default directory; ``off`` looks nowhere; a directory
holds ``<api>-<target>.json`` files; a ``.json`` file is used for the API and target it names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError

from halbench.bundle.manifest_schema import GemmConfigDoc, GemmProblemDoc, _Strict
from halbench.errors import UserError

__all__ = ["MAX_CACHE_BYTES", "TuningCacheDoc", "TuningEntryDoc", "cache_file", "configs_for",
           "default_dir", "fingerprint", "read_cache", "update_cache"]

#: A cache of thousands of problems is a few MiB; a larger file is not one of ours.
MAX_CACHE_BYTES = 16 << 20
_MAX_ENTRIES = 100_000
VERSION = 1

Label = Annotated[str, Field(max_length=256)]
Nanos = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class TuningEntryDoc(_Strict):
    """One problem's measured best configuration, and the rule's for comparison."""

    problem: GemmProblemDoc
    config: GemmConfigDoc
    time_ns: Nanos
    rule: GemmConfigDoc | None = None
    rule_time_ns: Nanos | None = None
    candidates: Annotated[int, Field(ge=0, le=100_000)] = 0
    device: Label = ""
    measured_at: Label = ""


class TuningCacheDoc(_Strict):
    format: Literal["halbench-tuning"] = "halbench-tuning"
    version: Literal[1] = VERSION
    api: Label
    target: Label
    entries: Annotated[dict[Annotated[str, Field(max_length=1024)], TuningEntryDoc],
                       Field(max_length=_MAX_ENTRIES)] = Field(default_factory=dict)


def default_dir() -> Path:
    from halbench.tools import cache_dir

    return cache_dir() / "tuning"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name) or "target"


def cache_file(api: str, target: str, where: str | os.PathLike[str] | None = None) -> Path | None:
    """The cache file for ``api`` and ``target`` under ``where`` (see the module doc), or None
    when tuning is off."""
    if where is None:
        where = os.environ.get("HALBENCH_TUNING_CACHE") or default_dir()
    if str(where) == "off":
        return None
    p = Path(where)
    if p.suffix == ".json":
        return p
    return p / f"{_safe(api)}-{_safe(target)}.json"


def read_cache(path: str | os.PathLike[str]) -> TuningCacheDoc:
    """Read and validate one cache file; a one-line UserError names what is wrong and the way out."""
    p = Path(path)
    way_out = "delete it, re-run `halbench tune`, or compile with --tuning-cache off"
    try:
        size = p.stat().st_size
    except OSError as e:
        raise UserError(f"cannot read the tuning cache {p}: {e.strerror or e}") from None
    if size > MAX_CACHE_BYTES:
        raise UserError(f"tuning cache {p} is {size} bytes, over the {MAX_CACHE_BYTES >> 20} MiB a "
                        f"tuning cache may be: not a tuning cache? ({way_out})")
    try:
        doc = json.loads(p.read_bytes())
    except OSError as e:
        raise UserError(f"cannot read the tuning cache {p}: {e.strerror or e}") from None
    except (ValueError, RecursionError) as e:
        raise UserError(f"tuning cache {p} is not JSON ({str(e)[:80]}); {way_out}") from None
    try:
        return TuningCacheDoc.model_validate(doc)
    except ValidationError as e:
        from halbench.validation import one_line

        raise UserError(f"{one_line(e, f'tuning cache {p}')}; {way_out}") from None


def _applies(doc: TuningCacheDoc, api: str, target: str) -> bool:
    return doc.api == api and doc.target == target


def configs_for(api: str, target: str, where: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Problem key -> ``GemmConfig`` of the cache for ``api`` and ``target`` ({} when none)."""
    from halbench.compiler.codegen.tuning import GemmConfig

    given = where if where is not None else os.environ.get("HALBENCH_TUNING_CACHE")
    if given not in (None, "", "off") and not Path(given).exists():  # a typo must not mean "no tuning"
        raise UserError(f"tuning cache {given} does not exist; give a directory of <api>-<target>.json "
                        f"files or one such file (halbench tune -o), or off")
    path = cache_file(api, target, where)
    if path is None or not path.exists():
        return {}
    doc = read_cache(path)
    if not _applies(doc, api, target):
        return {}
    return {k: GemmConfig(**e.config.model_dump(exclude_none=True)) for k, e in doc.entries.items()}


def fingerprint(api: str, target: str, where: str | os.PathLike[str] | None = None) -> str:
    """A digest of the configurations the compiler would use for ``api`` and ``target`` (empty
    when none): part of the compile cache key, so a new tuning result recompiles."""
    configs = configs_for(api, target, where)
    if not configs:
        return ""
    text = json.dumps({k: c.to_dict() for k, c in sorted(configs.items())}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def update_cache(path: str | os.PathLike[str], api: str, target: str,
                 entries: Mapping[str, Mapping[str, Any]]) -> TuningCacheDoc:
    """Merge ``entries`` (problem key -> TuningEntryDoc fields) into the cache at ``path`` and
    write it atomically, under a lock. An existing file for another API or target is refused."""
    from halbench.files import exclusive

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(p, "tuning cache"):  # read, merge and write under one lock
        return _merge(p, api, target, entries)


def _merge(p: Path, api: str, target: str, entries: Mapping[str, Mapping[str, Any]]) -> TuningCacheDoc:
    from halbench.files import atomic_write

    old: dict[str, Any] = {}
    if p.exists():
        doc = read_cache(p)
        if not _applies(doc, api, target):
            raise UserError(f"tuning cache {p} holds {doc.api} {doc.target}, not {api} {target}; "
                            f"give another --output")
        old = {k: e.model_dump(exclude_none=True) for k, e in doc.entries.items()}
    old.update({k: dict(v) for k, v in entries.items()})
    try:
        new = TuningCacheDoc.model_validate({"api": api, "target": target, "entries": old})
    except ValidationError as e:
        from halbench.validation import one_line

        raise UserError(one_line(e, f"tuning result for {p}")) from None
    atomic_write(p, json.dumps(new.model_dump(exclude_none=True), indent=1, sort_keys=True) + "\n",
                 what="tuning cache")
    return new
