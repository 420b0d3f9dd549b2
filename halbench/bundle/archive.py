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
    with atomic_open(path, "bundle", make_dirs=False) as f:
        with zipfile.ZipFile(f, "w") as z:
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
    except (zipfile.BadZipFile, EOFError, OSError):
        raise UserError(f"bundle {name} is not a valid .hbx file (not a zip archive, or truncated); "
                        f"{redo}") from None
    with z:
        names = z.namelist()
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise UserError(f"bundle {name} is corrupted: member {dupes[0]} appears twice; {redo}")
        if MANIFEST not in names:
            raise UserError(f"bundle {name} has no {MANIFEST}: it is not a halbench bundle, or it is "
                            f"damaged; {redo}")
        raw = _read(z, MANIFEST, name)
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
        for member, digest in manifest.members.items():
            if member not in names:
                raise UserError(f"bundle {name} is incomplete: member {member} is missing; {redo}")
            data = _read(z, member, name)
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


def _read(z: zipfile.ZipFile, member: str, name: str) -> bytes:
    try:
        return z.read(member)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as e:
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
