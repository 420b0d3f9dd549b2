"""Reading and writing the ``.hbx`` zip: hashes, atomic writes, one-line refusals."""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from halbench.bundle.manifest import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST,
    ExecutableDecl,
    Manifest,
    ManifestError,
    Variant,
    WeightDecl,
)
from halbench.bundle.weights import weight_array
from halbench.errors import UserError
from halbench.files import atomic_open
from halbench.hal import ExecutableBinary

__all__ = ["Bundle", "read_bundle", "sha256", "write_bundle"]

# A fixed timestamp makes equal bundles byte-identical (compile caches hash them).
_EPOCH = (1980, 1, 1, 0, 0, 0)

#: Hard limits on what a bundle may make the reader hold (a bundle is untrusted input: a zip
#: member can claim a small size and inflate to gigabytes). Each can be raised through its
#: environment variable for a model that truly needs more.
LIMITS = {
    "manifest": ("HALBENCH_BUNDLE_MAX_MANIFEST_BYTES", 64 << 20),
    "executable": ("HALBENCH_BUNDLE_MAX_EXECUTABLE_BYTES", 256 << 20),
    "total": ("HALBENCH_BUNDLE_MAX_BYTES", 32 << 30),
    "members": ("HALBENCH_BUNDLE_MAX_MEMBERS", 100_000),
}
_CHUNK = 1 << 20


def limit(kind: str) -> int:
    var, default = LIMITS[kind]
    try:
        return int(os.environ.get(var, default))
    except ValueError:
        raise UserError(f"{var}={os.environ[var]!r} is not a number of bytes") from None


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Bundle:
    """A bundle read and verified: its manifest and its members' bytes."""

    path: str
    manifest: Manifest
    members: Mapping[str, bytes]

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def weight(self, decl: WeightDecl) -> np.ndarray:
        """A weight's values (read from its member, or generated from its seed)."""
        return weight_array(decl, self.members.get(decl.member) if decl.member else None)

    def binary(self, executable: ExecutableDecl, variant: Variant) -> ExecutableBinary:
        """The loadable :class:`~halbench.hal.ExecutableBinary` of one variant."""
        try:
            return ExecutableBinary(variant.format, self.members[variant.member], (variant.entry,),
                                    variant.target)
        except UserError as e:
            raise UserError(f"bundle {self.name}: executable {executable.id} has a bad variant: {e}") from None


def _check_member_name(name: str) -> None:
    parts = name.split("/")
    if name == MANIFEST or not name or name.startswith("/") or "\\" in name or ".." in parts or "" in parts:
        raise UserError(f"bad bundle member name {name!r}: use relative names like executables/0.0.json")


def write_bundle(path: str | os.PathLike[str], manifest: Manifest, members: Mapping[str, bytes]) -> Manifest:
    """Write ``manifest`` and ``members`` to ``path`` atomically; returns the manifest with its
    ``members`` hashes filled in. On any failure nothing is left at ``path`` (an existing file
    there is kept as it was)."""
    path = os.fspath(path)
    for name in members:
        _check_member_name(name)
    manifest = replace(manifest, members={n: sha256(bytes(members[n])) for n in sorted(members)},
                       format=FORMAT_NAME, version=FORMAT_VERSION)
    # The writer checks what the reader will: a broken bundle fails here, at compile time.
    manifest.check()
    text = json.dumps(manifest.to_dict(), indent=1, sort_keys=False).encode("utf-8")
    with atomic_open(path, "bundle", make_dirs=False) as f, zipfile.ZipFile(f, "w") as z:
        _add(z, MANIFEST, text, zipfile.ZIP_DEFLATED)
        for name in sorted(members):
            # Weights are mostly incompressible floats: storing them is as small and faster.
            method = zipfile.ZIP_STORED if name.startswith("weights/") else zipfile.ZIP_DEFLATED
            _add(z, name, bytes(members[name]), method)
    return manifest


def _add(z: zipfile.ZipFile, name: str, data: bytes, method: int) -> None:
    info = zipfile.ZipInfo(name, _EPOCH)
    info.compress_type = method
    info.external_attr = 0o644 << 16
    z.writestr(info, data)


def read_bundle(path: str | os.PathLike[str]) -> Bundle:
    """Read and verify a bundle; every problem is one UserError line saying what to do."""
    path = os.fspath(path)
    name = os.path.basename(path)
    redo = "recompile it"
    try:
        z = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise UserError(f"cannot read bundle {path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"cannot read bundle {path}: it is a directory, not a .hbx file") from None
    except PermissionError:
        raise UserError(f"cannot read bundle {path}: permission denied") from None
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, ValueError):
        raise UserError(f"bundle {name} is not a valid .hbx file (not a zip archive, or truncated); "
                        f"{redo}") from None
    with z:
        names = z.namelist()
        if len(names) > limit("members"):
            raise UserError(f"bundle {name} has {len(names)} members, more than the {limit('members')} allowed "
                            f"(HALBENCH_BUNDLE_MAX_MEMBERS); {redo}")
        seen: set[str] = set()
        for n in names:  # linear: a 60k-member zip must not take quadratic time
            if n in seen:
                raise UserError(f"bundle {name} is corrupted: member {n} appears twice; {redo}")
            seen.add(n)
        if MANIFEST not in names:
            raise UserError(f"bundle {name} has no {MANIFEST}: it is not a halbench bundle, or it is "
                            f"damaged; {redo}")
        raw = _read(z, MANIFEST, name, limit("manifest"), "HALBENCH_BUNDLE_MAX_MANIFEST_BYTES")
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"bundle {name} is corrupted: {MANIFEST} is not valid JSON ({e}); {redo}") from None
        _check_version(doc, name)
        try:
            manifest = Manifest.from_dict(doc)
        except ManifestError as e:
            raise UserError(f"bundle {name} has an invalid manifest: {e}; {redo}") from None
        members: dict[str, bytes] = {}
        sizes = _declared_sizes(manifest)
        budget = limit("total")
        for member, digest in manifest.members.items():
            if member not in seen:
                raise UserError(f"bundle {name} is incomplete: member {member} is missing; {redo}")
            # A member may hold only what the manifest declares for it (weights: their exact size).
            cap = min(sizes.get(member, limit("executable")), budget)
            data = _read(z, member, name, cap, "the manifest's declared size" if member in sizes
                         else "HALBENCH_BUNDLE_MAX_EXECUTABLE_BYTES")
            budget -= len(data)
            if sha256(data) != digest.lower():
                raise UserError(f"bundle {name} is corrupted: member {member} fails its sha256 check; {redo}")
            members[member] = data
        extra = [n for n in names if n != MANIFEST and n not in members and not n.endswith("/")]
        if extra:
            raise UserError(f"bundle {name} has a member the manifest does not hash ({extra[0]}); "
                            f"it may have been tampered with; {redo}")
    bundle = Bundle(path, manifest, members)
    for w in manifest.weights:  # sizes are cheap to check now, and confusing to hit later
        if w.storage == "file" and len(members[w.member or ""]) != w.nbytes:
            raise UserError(f"bundle {name}: weight '{w.name}' needs {w.nbytes} B, but member "
                            f"{w.member} has {len(members[w.member or ''])} B; {redo}")
    return bundle


def _declared_sizes(manifest: Manifest) -> dict[str, int]:
    return {w.member: w.nbytes for w in manifest.weights if w.storage == "file" and w.member}


def _read(z: zipfile.ZipFile, member: str, name: str, cap: int, why: str) -> bytes:
    """A member's bytes, read in bounded chunks: never more than ``cap`` (+1 to notice)."""
    try:
        info = z.getinfo(member)
        if info.file_size > cap:
            raise UserError(f"bundle {name}: member {member} would expand to {info.file_size} B, more than "
                            f"{cap} B ({why}); recompile it")
        out = bytearray()
        with z.open(info) as f:
            while len(out) <= cap:
                chunk = f.read(min(_CHUNK, cap + 1 - len(out)))
                if not chunk:
                    break
                out += chunk
        if len(out) > cap:
            raise UserError(f"bundle {name}: member {member} expands past {cap} B ({why}), more than its "
                            f"header says; it is corrupted or hostile; recompile it")
        return bytes(out)
    except UserError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError,
            RuntimeError) as e:  # RuntimeError: zipfile's "is encrypted" (a flipped flag bit)
        raise UserError(f"bundle {name} is corrupted: member {member} cannot be read ({e}); "
                        f"recompile it") from None


def _check_version(doc: Any, name: str) -> None:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_NAME:
        got = doc.get("format") if isinstance(doc, dict) else None
        raise UserError(f"{name} is not a halbench bundle ({MANIFEST} has format {got!r}, "
                        f"expected {FORMAT_NAME!r})")
    version = doc.get("version")
    if version != FORMAT_VERSION:
        raise UserError(f"bundle {name} has format version {version!r}, but this halbench reads version "
                        f"{FORMAT_VERSION}; recompile it with this halbench")
