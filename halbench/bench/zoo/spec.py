"""Input specs: what a zoo model takes, and how to make valid data for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["KINDS", "InputSpec"]

#: How an input's data is generated:
#: ``normal``: standard normal floats (a normalised image);
#: ``int``: integers uniform in [low, high) (token ids, segment ids);
#: ``mask``: per batch row, ones for a random valid length of at least half the row, then
#: zeros (an attention mask with padding at the end, as tokenizers produce it).
KINDS = ("normal", "int", "mask")


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # NumPy name: "float32", "int64"
    kind: str = "normal"
    low: int = 0
    high: int = 0  # exclusive; for kind "int"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown input kind {self.kind!r}; known: {', '.join(KINDS)}")

    def generate(self, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "normal":
            return rng.standard_normal(self.shape).astype(self.dtype)
        if self.kind == "int":
            return rng.integers(self.low, self.high, self.shape).astype(self.dtype)
        rows, length = int(np.prod(self.shape[:-1])), self.shape[-1]
        valid = rng.integers(max(1, (length + 1) // 2), length + 1, rows)
        mask = np.arange(length)[None, :] < valid[:, None]
        return mask.reshape(self.shape).astype(self.dtype)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> InputSpec:
        return cls(**{**d, "shape": tuple(d["shape"])})
