"""The H100 tuning caches and problem files the checkout ships (docs/examples/h100-tuning,
scripts/tune_problems): valid for the schemas, and every problem of the shipped problem files
has a configuration in both APIs' caches, so compiling the zoo models for target h100 with
``--tuning-cache docs/examples/h100-tuning`` uses measured tiles (the Winograd batch GEMMs of
ResNet-50 included)."""

from __future__ import annotations

from pathlib import Path

import pytest

from halbench.compiler.codegen.tuning import GemmConfig
from halbench.compiler.tuning_cache import configs_for, read_cache
from halbench.tune.problems import load_problems

ROOT = Path(__file__).resolve().parents[2]
CACHES = ROOT / "docs" / "examples" / "h100-tuning"
PROBLEMS = sorted((ROOT / "scripts" / "tune_problems").glob("*.json"))


@pytest.mark.parametrize("api", ["cuda", "vulkan"])
def test_shipped_cache_is_valid_for_its_target(api: str) -> None:
    doc = read_cache(CACHES / f"{api}-h100.json")
    assert (doc.api, doc.target) == (api, "h100")
    configs = configs_for(api, "h100", CACHES)
    assert len(configs) == len(doc.entries) > 100
    assert all(isinstance(c, GemmConfig) for c in configs.values())


@pytest.mark.parametrize("path", PROBLEMS, ids=[p.stem for p in PROBLEMS])
def test_shipped_problems_are_tuned_for_both_apis(path: Path) -> None:
    problems = load_problems(path)
    assert problems, f"{path.name} holds no problem"
    for api in ("cuda", "vulkan"):
        configs = configs_for(api, "h100", CACHES)
        missing = [k for k in problems if k not in configs]
        assert not missing, f"{api}-h100.json has no configuration for {missing[:3]}"


def test_winograd_problems_are_batch_gemms_of_sixteen() -> None:
    problems = load_problems(ROOT / "scripts" / "tune_problems" / "resnet50-winograd.json")
    assert {p.kind for p in problems.values()} == {"batch_matmul"}
    assert all(p.a[0] == 16 and p.b[0] == 16 and p.a[1] == p.a[2] for p in problems.values())
