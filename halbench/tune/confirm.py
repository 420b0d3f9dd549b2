"""Whole-model confirmation of a tuning run (``halbench tune MODEL --confirm``).

The tuner times each GEMM alone, on a fresh device, with its operands cold or warm as its own
loop leaves them. Inside a model the same kernel runs between others, shares the L2 with them and
may overlap its neighbours, so a configuration that wins alone can lose in the model: on the
H200 through Vulkan, MiniLM-L6 b8's re-tuned projections each ran faster alone and the model 4.8%
slower (docs/examples/h200-vulkan-retune.txt). Confirmation compiles each model twice, with the
cache as it was and with the run's configurations, times both whole on the device, interleaved,
checks that they compute the same outputs, and keeps a model's new configurations only where the
model ran faster. A configuration that two models share is kept only if neither got slower."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["ModelCheck", "confirm_models", "kept_keys"]

#: Interleaved rounds, and timed runs a round, per bundle; clocks are raised first by this much load
ROUNDS = 6
RUNS = 25
WARM_S = 0.5
#: Largest relative difference between the two bundles' outputs (fp32; the sums' order differs)
SAME_OUTPUTS = 1e-4


@dataclass
class ModelCheck:
    """One model timed whole with the cache before (``old``) and the run's configurations (``new``)."""

    source: str
    keys: list[str]  # the model's GEMM problems the run measured
    changed: list[str] = field(default_factory=list)  # those whose configuration the run changed
    old_ms: float | None = None
    new_ms: float | None = None
    rel_diff: float | None = None  # the outputs' largest relative difference, new against old
    error: str | None = None

    @property
    def faster(self) -> bool:
        return (self.error is None and self.old_ms is not None and self.new_ms is not None
                and self.new_ms < self.old_ms)

    @property
    def verdict(self) -> str:
        if not self.changed:
            return "unchanged"
        if self.error:
            return "dropped (" + self.error + ")"
        return "kept" if self.faster else "dropped (slower whole)"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "problems": len(self.keys), "changed": len(self.changed),
                "old_ms": self.old_ms, "new_ms": self.new_ms, "rel_diff": self.rel_diff,
                "verdict": self.verdict}


def kept_keys(checks: Sequence[ModelCheck]) -> set[str]:
    """The changed configurations to merge: those of models that ran faster, less any that a
    model which did not run faster also changed."""
    keep = {k for c in checks if c.faster for k in c.changed}
    lose = {k for c in checks if c.changed and not c.faster for k in c.changed}
    return keep - lose


def _compile(model: str, api: str, target: str, cache: str, dest: Path) -> Path:
    from halbench.compiler.compile import CompileOptions, compile_to_file
    from halbench.compiler.isolate import run_isolated

    opts = CompileOptions(target_devices=(api,), weights="random", targets={api: target}, tuning_cache=cache)
    run_isolated(compile_to_file, model, opts, dest, what=Path(model).name)  # (the device is open here)
    return dest


def _inputs(module: Any) -> list[np.ndarray]:
    """Seeded inputs for the function's specs: standard normal floats, 0/1 integers (valid
    indices and masks), as run-suite gives a model file (bench.reference.seeded_inputs)."""
    from halbench.dtypes import to_numpy

    rng = np.random.default_rng(0)
    out = []
    for s in module.function(None).inputs:
        dt = to_numpy(s.dtype)
        out.append(rng.standard_normal(s.shape).astype(dt) if np.issubdtype(dt, np.floating)
                   else rng.integers(0, 2, s.shape).astype(dt))
    return out


def _rel_diff(a: Sequence[Any], b: Sequence[Any]) -> float:
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        scale = max(float(np.abs(x).max(initial=0.0)), 1e-30)
        worst = max(worst, float(np.abs(x - y).max(initial=0.0)) / scale)
    return worst


def _time_pair(paths: tuple[Path, Path], device: Any) -> tuple[float, float, float]:
    """(old ms, new ms, outputs' relative difference): both bundles loaded on ``device``, clocks
    raised, then ROUNDS interleaved rounds of RUNS whole runs each; the medians."""
    from halbench.runtime import Module

    mods = [Module.load(p, device) for p in paths]
    try:
        inputs = _inputs(mods[0])
        outs = [m.invoke(None, inputs) for m in mods]
        diff = _rel_diff(outs[0], outs[1])
        for m in mods:
            t0 = time.monotonic()
            while time.monotonic() - t0 < WARM_S:
                m.profile(None, inputs, runs=10, warmup=0, dispatch_times=False)
        times: list[list[float]] = [[], []]
        for _ in range(ROUNDS):
            for m, ts in zip(mods, times):
                ts += list(m.profile(None, inputs, runs=RUNS, warmup=3, dispatch_times=False).total_ns)
    finally:
        for m in mods:
            m.close()
    old, new = (float(np.median(ts)) / 1e6 for ts in times)
    return old, new, diff


def confirm_models(models: Mapping[str, tuple[str, list[str]]], device_uri: str, api: str, target: str,
                   old_cache: str, new_configs: Mapping[str, Any], old_configs: Mapping[str, Any],
                   new_cache: str, log: Callable[[str], None] | None = None) -> list[ModelCheck]:
    """Time each model (source label -> (model file, its problem keys)) whole on ``device_uri``,
    compiled with ``old_cache`` ("off": the rule) and with ``new_cache``. ``old_configs`` /
    ``new_configs`` (key -> GemmConfig) say which of a model's problems the run changed; a model
    with none is not compiled. A model that fails to compile or run, or whose two bundles' outputs
    differ by more than SAME_OUTPUTS, is dropped with the reason."""
    import halbench

    say = log or (lambda s: None)
    checks: list[ModelCheck] = []
    with tempfile.TemporaryDirectory(prefix="halbench-confirm-") as tmp, halbench.create_device(device_uri) as dev:
        for i, (label, (model, keys)) in enumerate(models.items()):
            c = ModelCheck(label, list(keys))
            c.changed = [k for k in keys if k in new_configs and new_configs[k] != old_configs.get(k)]
            checks.append(c)
            if not c.changed:
                say(f"{label}: no configuration changed, nothing to confirm")
                continue
            try:
                paths = (_compile(model, api, target, old_cache, Path(tmp) / f"{i}-old.hbx"),
                         _compile(model, api, target, new_cache, Path(tmp) / f"{i}-new.hbx"))
                c.old_ms, c.new_ms, c.rel_diff = _time_pair(paths, dev)
                if c.rel_diff > SAME_OUTPUTS:
                    c.error = f"outputs differ by {c.rel_diff:.1e}"
            except Exception as e:  # noqa: BLE001 - one model's failure drops its configurations only
                c.error = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            say(f"{label}: before {_ms(c.old_ms)}, tuned {_ms(c.new_ms)} ms whole -> {c.verdict}")
    return checks


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"
