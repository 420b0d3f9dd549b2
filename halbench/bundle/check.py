"""Structural sanity of a manifest: everything the runtime would otherwise trip over later.

A bundle that passes here can be loaded without an IndexError or an out-of-range binding deep
inside a driver: ids exist, ranges lie inside their buffers, launch parameters agree with the
entry points, every binding range is as long as its kernel touches (``min_bytes``), and every
member the manifest names is hashed in ``members``.
"""

from __future__ import annotations

from halbench.bundle.manifest import (
    BINDING_ALIGNMENT,
    BarrierStep,
    BufferDecl,
    CopyStep,
    DispatchStep,
    FillStep,
    Manifest,
    ManifestError,
)

__all__ = ["check_manifest"]


def check_manifest(m: Manifest) -> None:
    """Raise :class:`ManifestError` for the first structural problem found."""
    buffers = _unique({b.id: b for b in m.buffers}, [b.id for b in m.buffers], "buffer")
    executables = _unique({e.id: e for e in m.executables}, [e.id for e in m.executables], "executable")
    _unique({}, [f.name for f in m.functions], "function")

    def inside(buf: int, offset: int, nbytes: int, where: str) -> BufferDecl:
        if buf not in buffers:
            raise ManifestError(f"{where} names buffer {buf}, which the manifest does not declare")
        b = buffers[buf]
        if offset < 0 or nbytes < 0 or offset + nbytes > b.nbytes:
            raise ManifestError(f"{where} covers bytes [{offset}, {offset + nbytes}) of buffer {buf}, "
                                f"which has only {b.nbytes} B")
        return b

    def member(name: str | None, where: str) -> None:
        if name is not None and name not in m.members:
            raise ManifestError(f"{where} names member {name}, which manifest.members does not list")

    for i, w in enumerate(m.weights):
        inside(w.buffer, w.offset, w.nbytes, f"weight '{w.name}'")
        member(w.member if w.storage == "file" else None, f"weight '{w.name}'")

    for e in m.executables:
        for vi, v in enumerate(e.variants):
            member(v.member, f"executable {e.id} variant {vi}")
        counts = {v.entry.bindings for v in e.variants}
        if len(counts) > 1:
            raise ManifestError(f"executable {e.id} ('{e.name}'): its variants take different numbers "
                                f"of bindings {sorted(counts)}; they must implement the same bindings")

    for f in m.functions:
        where = f"function '{f.name}'"
        _unique({}, [t.name for t in f.inputs], f"{where} input name")
        _unique({}, [t.name for t in f.outputs], f"{where} output name")
        for t in (*f.inputs, *f.outputs):
            inside(t.buffer, t.offset, t.nbytes, f"{where} tensor '{t.name}'")
        for si, s in enumerate(f.steps):
            sw = f"{where} step {si}"
            if isinstance(s, DispatchStep):
                if s.executable not in executables:
                    raise ManifestError(f"{sw} dispatches executable {s.executable}, which the manifest "
                                        f"does not declare")
                want = executables[s.executable].variants[0].entry.bindings
                if len(s.bindings) != want:
                    raise ManifestError(f"{sw} passes {len(s.bindings)} bindings to executable "
                                        f"{s.executable}, which takes {want}")
                for bi, r in enumerate(s.bindings):
                    bw = f"{sw} binding {bi}"
                    if r.offset % BINDING_ALIGNMENT:
                        raise ManifestError(f"{bw} has offset {r.offset}, not a multiple of {BINDING_ALIGNMENT} B")
                    if r.buffer in buffers and r.length is None:
                        length = buffers[r.buffer].nbytes - r.offset
                    else:
                        length = r.length if r.length is not None else 0
                    if r.length is not None and r.length <= 0:
                        raise ManifestError(f"{bw} has length {r.length}; it must be positive")
                    inside(r.buffer, r.offset, length, bw)
                    # The kernel touches min_bytes of this binding: a shorter range would let it
                    # read or write past the range (silently, on Vulkan and CUDA).
                    if s.min_bytes is not None and length < s.min_bytes[bi]:
                        raise ManifestError(f"{bw} binds {length} B of buffer {r.buffer}, but the kernel "
                                            f"touches {s.min_bytes[bi]} B; the schedule does not match "
                                            f"its kernels (tampered or mis-built)")
            elif isinstance(s, CopyStep):
                inside(s.src.buffer, s.src.offset, s.nbytes, f"{sw} (copy source)")
                inside(s.dst.buffer, s.dst.offset, s.nbytes, f"{sw} (copy destination)")
                if s.nbytes % 4 or s.src.offset % 4 or s.dst.offset % 4:
                    raise ManifestError(f"{sw}: copy offsets and size must be multiples of 4 B")
            elif isinstance(s, FillStep):
                inside(s.buffer, s.offset, s.nbytes, f"{sw} (fill)")
                if s.pattern_size not in (1, 2, 4) or not 0 <= s.pattern < 1 << (8 * s.pattern_size):
                    raise ManifestError(f"{sw}: fill pattern {s.pattern} does not fit in "
                                        f"{s.pattern_size} bytes (1, 2 or 4)")
                if s.nbytes % 4 or s.offset % 4:
                    raise ManifestError(f"{sw}: fill offset and size must be multiples of 4 B")
            elif not isinstance(s, BarrierStep):  # pragma: no cover - from_dict builds only these
                raise ManifestError(f"{sw} is not a step")


def _unique(table: dict, keys: list, what: str) -> dict:
    seen = set()
    for k in keys:
        if k in seen:
            raise ManifestError(f"{what} {k!r} is declared twice")
        seen.add(k)
    return table
