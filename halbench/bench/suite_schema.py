"""The suite file's schema: pydantic models that check types, ranges, finiteness and unknown
keys, and a one-line error naming the key path of the first problem.

``bench/suite.py`` turns a validated document into the frozen ``Suite`` the runner uses; the
gate reads its settings through :class:`GateSection` (one definition, one validation).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from halbench.errors import UserError

__all__ = ["GateOverride", "GateSection", "SettingsModel", "SuiteDoc", "one_line", "validate_doc"]

Finite = Annotated[float, Field(allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=200)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class SettingsModel(_Strict):
    """Sampling settings: the suite's defaults, overridden per benchmark."""

    warmup: Annotated[int, Field(ge=0, le=100_000)] | None = None
    warmup_s: Annotated[Finite, Field(ge=0, le=3600)] | None = None
    min_time_s: Annotated[Finite, Field(ge=0, le=86_400)] | None = None
    min_samples: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    max_samples: Annotated[int, Field(ge=1, le=10_000_000)] | None = None
    max_time_s: Annotated[Finite, Field(gt=0, le=86_400)] | None = None
    repetitions: Annotated[int, Field(ge=1, le=1000)] | None = None
    tolerance: Annotated[Finite, Field(ge=0)] | None = None


class GateOverride(_Strict):
    threshold: Annotated[Finite, Field(ge=0, le=10)] | None = None
    noise_floor_ms: Annotated[Finite, Field(ge=0)] | None = None


class GateSection(_Strict):
    """A gate section as written (suite ``gate:``, stored results, ``--gate-file``): threshold
    (relative slowdown that may fail; 10 = 11x), absolute noise floor, significance level, and
    per-benchmark overrides by name or glob (optionally ``@device``). Keys left out take the
    gate's defaults (``reports/thresholds.py``); this is the one validation of all three."""

    threshold: Annotated[Finite, Field(ge=0, le=10)] | None = None
    noise_floor_ms: Annotated[Finite, Field(ge=0)] | None = None
    alpha: Annotated[Finite, Field(ge=1e-9, le=0.5)] | None = None
    overrides: dict[Name, GateOverride] | None = None


class ModelEntry(_Strict):
    name: Name
    zoo: Name | None = None
    path: Name | None = None
    batch: Annotated[int, Field(ge=1, le=1 << 20)] | None = None
    seq: Annotated[int, Field(ge=1, le=1 << 20)] | None = None
    inputs: list[Name] | None = None
    input_shapes: dict[Name, list[Annotated[int, Field(ge=0, le=1 << 31)]]] | None = None
    weights: Literal["file", "random"] | None = None
    #: compile --precision (halbench.precision); the correctness tolerance follows it
    precision: Literal["fp32", "tf32", "f16", "bf16"] | None = None
    dtype: Name | None = None
    description: str | None = None
    options: dict[str, Any] | None = None
    devices: list[Name] | Name | None = None
    settings: SettingsModel | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ModelEntry:
        if (self.zoo is None) == (self.path is None):
            raise ValueError("needs exactly one of zoo: or path:")
        return self


class MicroEntry(_Strict):
    name: Name
    kind: Name
    params: dict[Name, Annotated[int, Field(ge=1, le=1 << 40)]] | None = None
    description: str | None = None
    devices: list[Name] | Name | None = None
    settings: SettingsModel | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, v: str) -> str:
        from halbench.bench.micro import KINDS

        if v not in KINDS:
            raise ValueError(f"unknown kind '{v}'; known: {', '.join(KINDS)}")
        return v

    @model_validator(mode="after")
    def _known_params(self) -> MicroEntry:
        from halbench.bench.micro import param_names

        allowed = param_names(self.kind)
        bad = sorted(set(self.params or {}) - set(allowed))
        if bad:
            raise ValueError(f"{self.kind} takes no parameter {', '.join(bad)}; it takes: "
                             f"{', '.join(allowed) or 'none'}")
        return self


class PeerEntry(_Strict):
    """A peer with options: ``{peer: torch/compile, precision: tf32, compile_mode: max-autotune}``."""

    peer: Name
    precision: Literal["fp32", "tf32", "f16", "bf16"] | None = None
    compile_mode: Name | None = None


class SuiteDoc(_Strict):
    name: Name | None = None
    description: str | None = None
    devices: list[Name] | Name = Field(default_factory=lambda: ["*"])
    settings: SettingsModel | None = None
    gate: GateSection = Field(default_factory=GateSection)
    models: list[ModelEntry] = Field(default_factory=list)
    micro: list[MicroEntry] = Field(default_factory=list)
    #: other runtimes given the same models (halbench.peers): torch/cudagraph, onnxruntime/cpu, iree
    peers: list[Name | PeerEntry] = Field(default_factory=list)


def one_line(e: ValidationError, where: str) -> UserError:
    """The first problem of a ValidationError as one line naming its key path."""
    from halbench.validation import key_path

    err = e.errors()[0]
    loc = key_path(tuple(err["loc"]))
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        key = err["loc"][-1]
        loc = loc.rsplit(".", 1)[0] if "." in loc else "document"
        msg = (f"unknown key '{key}' (a typo? unknown keys are refused so that they cannot change "
               f"what is measured)")
    elif "finite" in err["type"]:
        msg = "must be a finite number"
    more = f" (and {len(e.errors()) - 1} more)" if len(e.errors()) > 1 else ""
    return UserError(f"{where}: {loc or 'document'}: {msg}{more}")


def validate_doc(doc: Any, where: str) -> SuiteDoc:
    if not isinstance(doc, dict):
        raise UserError(f"{where} must be a YAML mapping with name, devices, models/micro")
    try:
        return SuiteDoc.model_validate(doc)
    except ValidationError as e:
        raise one_line(e, where) from None


def finite(v: float) -> bool:
    return math.isfinite(v)
