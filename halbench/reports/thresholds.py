"""Where the limits of ``compare`` and ``gate`` come from: never from the candidate alone.

In order, each overriding the one before:
1. built-in defaults (threshold 5%, noise floor 0 ms, alpha 0.01);
2. the baseline file's suite settings (``run.suite.gate``, recorded when the baseline ran);
3. a gate file in the repository (``--gate-file halbench-gate.yaml``), same keys as a suite's
   ``gate:`` section;
4. the command line (``--threshold``, ``--noise-floor-ms``).

The candidate's own suite settings are ignored -- an edited candidate must not waive its own
slowdown -- and a warning says when they differ from the baseline's.

Per-benchmark ``overrides`` are keyed by a benchmark name or a glob (``peak/latency/*``), either
optionally followed by ``@device`` (``resnet50/b1@cuda://0``). An exact ``name@device`` wins over an
exact name, which wins over globs; among globs the first listed that matches wins. Overrides from
a gate file replace the baseline's for the same key; command-line flags set the defaults only.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halbench.errors import UserError
from halbench.reports.decision import ALPHA, DEFAULT_THRESHOLD, Limits

__all__ = ["GateSettings", "load_gate_file", "resolve_settings", "validate_gate"]

_KEYS = {"threshold", "noise_floor_ms", "alpha", "overrides"}
_OVERRIDE_KEYS = {"threshold", "noise_floor_ms"}
# (minimum, maximum) of each number: a threshold of 10 is a 11x slowdown; alpha is a p-value.
_RANGES = {"threshold": (0.0, 10.0), "noise_floor_ms": (0.0, math.inf), "alpha": (1e-9, 0.5)}


@dataclass(frozen=True)
class GateSettings:
    """The defaults and per-benchmark overrides in force, and where they came from."""

    threshold: float = DEFAULT_THRESHOLD
    noise_floor_ms: float = 0.0
    alpha: float = ALPHA
    overrides: dict[str, dict[str, float]] = field(default_factory=dict)
    sources: tuple[str, ...] = ("defaults",)

    def limits_for(self, name: str, device: str) -> Limits:
        o = self.override_for(name, device)
        return Limits(o.get("threshold", self.threshold), o.get("noise_floor_ms", self.noise_floor_ms),
                      self.alpha)

    def override_for(self, name: str, device: str) -> dict[str, float]:
        if f"{name}@{device}" in self.overrides:
            return self.overrides[f"{name}@{device}"]
        if name in self.overrides:
            return self.overrides[name]
        for pattern, o in self.overrides.items():
            subject = f"{name}@{device}" if "@" in pattern else name
            if fnmatch.fnmatchcase(subject, pattern):
                return o
        return {}

    def to_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "noise_floor_ms": self.noise_floor_ms,
                "alpha": self.alpha, "overrides": self.overrides, "sources": list(self.sources)}


def _number(value: Any, key: str, where: str) -> float:
    lo, hi = _RANGES[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi \
            or not math.isfinite(value):
        bounds = f"between {lo:g} and {hi:g}" if math.isfinite(hi) else f">= {lo:g}"
        raise UserError(f"{where}.{key}: expected a number {bounds}, got {value!r:.40}")
    return float(value)


def validate_gate(doc: Any, where: str) -> dict[str, Any]:
    """Check a gate section (suite, results file or gate file); return it with floats.

    The one definition of a valid gate section is the suite schema's ``GateSection``: suites,
    stored results and gate files are all checked by it. A UserError names the key, so a typo
    cannot silently loosen the gate."""
    from pydantic import ValidationError

    from halbench.bench.suite_schema import GateSection, one_line

    try:
        g = GateSection.model_validate({} if doc is None else doc)
    except ValidationError as e:
        raise one_line(e, where) from None
    out: dict[str, Any] = {k: float(v) for k, v in g.model_dump(exclude_none=True, exclude={"overrides"}).items()}
    out["overrides"] = {str(k): o.model_dump(exclude_none=True) for k, o in (g.overrides or {}).items()}
    return out


def load_gate_file(path: str | Path) -> dict[str, Any]:
    """Read and validate a gate file: YAML (or JSON) with a suite's ``gate:`` keys."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: gate file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: cannot read gate file: {e}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path}: gate file is not valid YAML: {str(e).splitlines()[0]}") from None
    if isinstance(doc, dict) and set(doc) == {"gate"}:  # a suite-style file with only `gate:`
        doc = doc["gate"]
    return validate_gate(doc, str(path))


def _suite_gate(doc: dict[str, Any]) -> Any:
    return ((doc.get("run") or {}).get("suite") or {}).get("gate")


def resolve_settings(base: dict[str, Any], cand: dict[str, Any] | None = None, *,
                     gate_file: str | Path | None = None, threshold: float | None = None,
                     noise_floor_ms: float | None = None) -> tuple[GateSettings, list[str]]:
    """The settings for judging ``cand`` against ``base``, and warnings to show.

    Raises UserError for an invalid gate section in the baseline or the gate file.
    """
    warnings: list[str] = []
    merged: dict[str, Any] = {"threshold": DEFAULT_THRESHOLD, "noise_floor_ms": 0.0, "alpha": ALPHA,
                              "overrides": {}}
    sources = ["defaults"]
    base_gate = validate_gate(_suite_gate(base), "baseline run.suite.gate")
    layers = [("baseline suite", base_gate)]
    if gate_file is not None:
        layers.append((f"gate file {gate_file}", load_gate_file(gate_file)))
    layers.append(("command line", {k: v for k, v in (("threshold", threshold),
                                                      ("noise_floor_ms", noise_floor_ms))
                                    if v is not None}))
    for label, layer in layers:
        if any(layer.get(k) is not None for k in _RANGES) or layer.get("overrides"):
            sources.append(label)
        merged.update({k: layer[k] for k in _RANGES if layer.get(k) is not None})
        merged["overrides"] = {**merged["overrides"], **(layer.get("overrides") or {})}
    if cand is not None:
        try:
            cand_gate = validate_gate(_suite_gate(cand), "candidate run.suite.gate")
        except UserError as e:
            cand_gate = None
            warnings.append(f"{e} (ignored: limits never come from the candidate)")
        if cand_gate is not None and cand_gate != base_gate:
            warnings.append("the candidate's suite gate settings differ from the baseline's and are "
                            f"ignored (limits never come from the candidate): candidate {cand_gate}, "
                            f"baseline {base_gate}")
    return GateSettings(merged["threshold"], merged["noise_floor_ms"], merged["alpha"],
                        merged["overrides"], tuple(sources)), warnings
