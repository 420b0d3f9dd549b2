"""Suites: YAML files naming models, microbenchmarks, devices, sampling and gate settings.

A suite file looks like this (``suites/smoke.yaml`` is a complete example)::

    name: smoke
    description: small models and microbenchmarks
    devices: ["vulkan://*", "local-task://"]     # `*` alone: every available device
    settings: {warmup: 2, min_time_s: 0.2, min_samples: 5, max_samples: 200,
               repetitions: 1, tolerance: 1.0e-4}
    gate: {threshold: 0.05, noise_floor_ms: 0.01,
           overrides: {"peak/latency/*": {threshold: 0.25}}}
    models:
      - {name: tiny-cnn/b1, zoo: tiny-cnn, batch: 1}
      - {name: mine, path: models/mine.onnx, inputs: ["1x3x224x224xf32"], weights: random}
      - {name: resnet50-f16, zoo: resnet50, precision: f16}   # compile --precision; tolerance follows
    micro:
      - {name: peak/bandwidth/copy, kind: bandwidth-copy, params: {bytes: 16777216}}

Every benchmark may override ``settings`` keys and ``devices``. Unknown keys are refused, so
a typo cannot silently change what is measured.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from halbench.bench.suite_schema import validate_doc
from halbench.errors import UserError

__all__ = ["BenchmarkSpec", "Settings", "Suite", "find_suite", "load_suite"]

SUITES_DIR = Path(__file__).resolve().parents[2] / "suites"



@dataclass(frozen=True)
class Settings:
    warmup: int = 2
    #: ... and warm up for at least this long: GPUs raise their clocks after ~0.2 s of load
    warmup_s: float = 0.25
    min_time_s: float = 0.5
    min_samples: int = 10
    max_samples: int = 1000
    max_time_s: float = 60.0
    repetitions: int = 1
    tolerance: float = 1e-4

    def merged(self, overrides: Any) -> Settings:
        """These settings with the validated overrides (a SettingsModel) applied."""
        if overrides is None:
            return self
        given = overrides.model_dump(exclude_none=True)
        return Settings(**{**self.__dict__, **{k: type(getattr(self, k))(v) for k, v in given.items()}})


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    kind: str  # "model" | "micro"
    settings: Settings
    devices: tuple[str, ...]
    # model: zoo/path/batch/seq/inputs/weights; micro: micro kind + params
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    path: str
    sha256: str
    devices: tuple[str, ...]
    settings: Settings
    gate: dict[str, Any]
    benchmarks: tuple[BenchmarkSpec, ...]
    #: the peers every model benchmark also runs with (halbench.peers.PeerSpec)
    peers: tuple[Any, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "path": self.path, "sha256": self.sha256, "gate": self.gate}
        if self.peers:
            d["peers"] = [p.to_dict() for p in self.peers]
        return d


def find_suite(name_or_path: str) -> Path:
    """A path to a suite file, or a suite name from ``suites/`` (``smoke`` -> suites/smoke.yaml)."""
    p = Path(name_or_path)
    if p.exists():
        return p
    for cand in (SUITES_DIR / name_or_path, SUITES_DIR / f"{name_or_path}.yaml"):
        if cand.exists():
            return cand
    known = sorted(x.stem for x in SUITES_DIR.glob("*.yaml")) if SUITES_DIR.exists() else []
    raise UserError(f"no suite '{name_or_path}': not a file, and not one of the shipped suites "
                    f"({', '.join(known) or 'none'})")


_MAX_SUITE_BYTES = 1 << 20
_MAX_SUITE_NODES = 100_000


def _check_expansion(doc: Any, where: str) -> None:
    """Refuse a document whose aliases expand past a value budget: YAML shares an aliased value,
    but everything downstream (validation, the results' copy of the suite) walks it expanded,
    and a few hundred bytes of nested anchors expand to billions of values ('billion laughs')."""
    count, stack = 0, [doc]
    while stack:
        v = stack.pop()
        count += 1
        if count > _MAX_SUITE_NODES:
            raise UserError(f"{where} expands to more than {_MAX_SUITE_NODES} values (nested YAML aliases?); "
                            f"write the suite out without them")
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def load_suite(name_or_path: str) -> Suite:
    """Read and check a suite file; every problem is a one-line UserError naming the key."""
    path = find_suite(name_or_path)
    if path.stat().st_size > _MAX_SUITE_BYTES:
        raise UserError(f"suite {path} is {path.stat().st_size} B, more than the {_MAX_SUITE_BYTES} B a "
                        f"suite may have")
    raw = path.read_bytes()
    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise UserError(f"suite {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    _check_expansion(doc, f"suite {path}")
    sd = validate_doc(doc, f"suite {path}")
    settings = Settings().merged(sd.settings)
    devices = _devices(sd.devices)
    specs: list[BenchmarkSpec] = []
    for m in sd.models:
        params = m.model_dump(exclude_none=True, exclude={"name", "devices", "settings"})
        if m.path and not Path(m.path).is_absolute():
            params["path"] = str((path.parent / m.path).resolve())
        specs.append(BenchmarkSpec(m.name, "model", settings.merged(m.settings),
                                   _devices(m.devices) if m.devices is not None else devices, params))
    for m in sd.micro:
        specs.append(BenchmarkSpec(m.name, "micro", settings.merged(m.settings),
                                   _devices(m.devices) if m.devices is not None else devices,
                                   {"kind": m.kind, "params": dict(m.params or {})}))
    names = [s.name for s in specs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise UserError(f"suite {path}: benchmark names must be unique; repeated: {', '.join(dup)}")
    if not specs:
        raise UserError(f"suite {path} has no models and no micro benchmarks")
    for s in specs:
        if s.settings.max_samples < s.settings.min_samples:
            raise UserError(f"suite {path}: {s.name}: max_samples {s.settings.max_samples} is below "
                            f"min_samples {s.settings.min_samples}")
    from halbench.peers import parse_peer

    peers = []
    for i, p in enumerate(sd.peers):
        try:
            peers.append(parse_peer(p if isinstance(p, str) else p.model_dump(exclude_none=True)))
        except UserError as e:
            raise UserError(f"suite {path}: peers[{i}]: {e}") from None
    return Suite(sd.name or path.stem, sd.description or "", str(path), hashlib.sha256(raw).hexdigest(),
                 devices, settings, sd.gate.model_dump(exclude_none=True), tuple(specs), tuple(peers))


def with_precision(suite: Suite, precision: str) -> Suite:
    """``suite`` with every model compiled at ``precision`` (``run-suite --precision``)."""
    from halbench.precision import check_precision

    check_precision(precision)
    specs = tuple(dataclasses.replace(b, params={**b.params, "precision": precision}) if b.kind == "model" else b
                  for b in suite.benchmarks)
    return dataclasses.replace(suite, benchmarks=specs)


def _devices(v: list[str] | str) -> tuple[str, ...]:
    return (v,) if isinstance(v, str) else tuple(v)
