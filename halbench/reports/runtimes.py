"""Which entries ``compare`` and ``gate`` put side by side: one rule for both.

By default an entry meets the entry of the same (name, device, runtime) in the other file, so a
peer's entries (``torch-cudagraph``, ``onnxruntime-cpu``) meet that peer's, never halbench's.

With runtimes named (``--baseline-runtime torch-cudagraph``), the baseline runtime's entries meet
the candidate runtime's (``halbench`` unless ``--candidate-runtime`` says otherwise) of the same
(name, device), in one file or in two: "is halbench within 10% of PyTorch". A baseline entry on a
device where the candidate runtime has no entry of its name is *unmatched*: listed, not an error
(ONNX Runtime's CPU entries on ``local-task://`` meet no GPU entry). Candidate entries that no
baseline-runtime entry meets (micro-benchmarks, devices the peer does not run on) are left out
and counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from halbench.bench.schema import HALBENCH
from halbench.errors import BadOption

__all__ = ["Key", "Sides", "match", "runtimes_in", "where"]

#: An entry's key: (name, device, runtime).
Key = tuple[str, str, str]


def runtimes_in(doc: dict[str, Any]) -> list[str]:
    """The runtimes with entries in a results dict: halbench first, then the peers by name."""
    return sorted({b["runtime"] for b in doc["benchmarks"]}, key=lambda r: (r != HALBENCH, r))


def where(name: str, device: str, runtime: str) -> str:
    """How a message names an entry: ``resnet50/b1 on cuda://0``, a peer's with its runtime."""
    return f"{name} on {device}" if runtime == HALBENCH else f"{name} ({runtime}) on {device}"


@dataclass(frozen=True)
class Sides:
    """Both sides' entries by key, and the order to list the keys in.

    With runtimes named (``base_runtime`` set), every key carries the candidate's runtime, the
    keys are the baseline runtime's entries in file order, and ``left_out`` counts the candidate
    entries that no baseline entry meets.
    """

    base: dict[Key, dict[str, Any]]
    new: dict[Key, dict[str, Any]]
    keys: list[Key]
    base_runtime: str | None = None
    new_runtime: str | None = None
    left_out: int = 0

    @property
    def across_runtimes(self) -> bool:
        return self.base_runtime is not None

    @property
    def common(self) -> list[Key]:
        return [k for k in self.keys if k in self.base and k in self.new]


def _keyed(doc: dict[str, Any], runtime: str | None = None) -> dict[Key, dict[str, Any]]:
    return {(b["name"], b["device"], b["runtime"]): b for b in doc["benchmarks"]
            if runtime is None or b["runtime"] == runtime}


def _check(doc: dict[str, Any], runtime: str, label: str, option: str) -> None:
    present = runtimes_in(doc)
    if runtime not in present:
        raise BadOption(f"{option} {runtime!r}: {label} has no entries of that runtime; its "
                        f"runtimes: {', '.join(present) or 'none'}")


def match(base: dict[str, Any], new: dict[str, Any], base_runtime: str | None = None,
          new_runtime: str | None = None, *, base_label: str = "the baseline",
          new_label: str = "the candidate") -> Sides:
    """Pair the entries of two results dicts (the same dict twice to compare runtimes in one file).

    Without runtimes, entries pair by (name, device, runtime). Naming either runtime (the other
    defaults to halbench) pairs the baseline runtime's entries with the candidate runtime's by
    (name, device). Raises BadOption, naming the runtimes present, for a runtime with no entries
    on its side, and for a runtime compared with itself in one file.
    """
    if base_runtime is None and new_runtime is None:
        b, n = _keyed(base), _keyed(new)
        return Sides(b, n, list(b) + [k for k in n if k not in b])
    base_runtime, new_runtime = base_runtime or HALBENCH, new_runtime or HALBENCH
    _check(base, base_runtime, base_label, "--baseline-runtime")
    _check(new, new_runtime, new_label, "--candidate-runtime")
    if base is new and base_runtime == new_runtime:
        raise BadOption(f"--baseline-runtime and --candidate-runtime are both {base_runtime!r}: "
                        f"name two different runtimes of {base_label}")
    n = _keyed(new, new_runtime)
    b = {(name, dev, new_runtime): e for (name, dev, _), e in _keyed(base, base_runtime).items()}
    return Sides(b, n, list(b), base_runtime, new_runtime, sum(k not in b for k in n))
