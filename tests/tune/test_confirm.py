"""``halbench tune MODEL --confirm``: the run's configurations are merged only where the model,
compiled with them and timed whole against the cache as it was, ran faster (halbench.tune.confirm).

On lavapipe, for real: a zoo model tuned with --confirm, both bundles compiled and timed, and the
cache holding exactly what the verdict says; the merge rule for shared problems; and one-line
errors for what --confirm cannot do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from halbench.cli import main
from halbench.compiler.tuning_cache import configs_for, read_cache
from halbench.tune.confirm import ModelCheck, kept_keys
from tests.compiler.helpers import device_or_skip


def _run(*args: str):
    return CliRunner().invoke(main, list(args))


def test_a_model_tuned_with_confirm_merges_what_its_verdict_says(tmp_path: Path) -> None:
    uri = device_or_skip("vulkan://")
    cache = tmp_path / "cache"
    r = _run("tune", "tiny-mlp", "--device", uri, "--confirm", "--budget-s", "6", "--max-candidates", "3",
             "--samples", "3", "-o", str(cache), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output[r.output.index("{"):])
    (check,) = doc["confirm"]
    assert check["source"] == "tiny-mlp" and check["problems"] == 2
    files = list(cache.glob("vulkan-*.json"))
    if check["verdict"] == "unchanged":  # every problem's best was the rule's: nothing to time
        assert check["old_ms"] is None
        return
    # both bundles ran on the device and computed the same outputs
    assert check["old_ms"] > 0 and check["new_ms"] > 0 and check["rel_diff"] <= 1e-4
    tuned = {p["key"]: p["best"]["config"] for p in doc["problems"] if p.get("best")}
    if check["verdict"] == "kept":
        assert check["new_ms"] < check["old_ms"]
        (f,) = files
        merged = read_cache(f).entries
        assert check["changed"] >= 1 and check["changed"] <= len(merged)
        configs = configs_for("vulkan", f.stem.removeprefix("vulkan-"), f)
        assert {k: configs[k].to_dict() for k in merged} == {k: tuned[k] for k in merged}
    else:
        assert check["verdict"] == "dropped (slower whole)" and check["new_ms"] >= check["old_ms"]
        assert not files or not read_cache(files[0]).entries  # the cache did not exist before: still empty


def test_the_text_output_has_the_whole_model_table(tmp_path: Path) -> None:
    uri = device_or_skip("vulkan://")
    r = _run("tune", "tiny-mlp", "--device", uri, "--confirm", "--budget-s", "4", "--max-candidates", "2",
             "--samples", "2", "-o", str(tmp_path / "c.json"))
    assert r.exit_code == 0, r.output
    assert "whole models, each compiled with the cache before and with the run's configurations:" in r.output
    line = next(x for x in r.output.splitlines() if x.startswith("tiny-mlp "))
    assert line.split()[1] == "2" and line.rstrip().endswith(("kept", "unchanged", "(slower whole)"))


def test_confirm_refuses_what_has_no_model_in_one_line(tmp_path: Path) -> None:
    problems = tmp_path / "p.json"
    r = _run("tune", "tiny-mlp", "--save-problems", str(problems))
    assert r.exit_code == 0, r.output
    r = _run("tune", str(problems), "--device", "vulkan://", "--confirm")
    assert r.exit_code == 1
    assert "--confirm recompiles each model, and a bundle or problems file has no model to recompile" in r.output
    r = _run("tune", "tiny-mlp", "--confirm")
    assert r.exit_code == 1 and "--confirm times models on a device: give --device URI" in r.output


@pytest.mark.parametrize("checks,kept", [
    # a model that ran faster keeps its changes
    ([("a", ["k1", "k2"], 2.0, 1.0)], {"k1", "k2"}),
    # one that ran slower keeps none
    ([("a", ["k1"], 1.0, 1.5)], set()),
    # a problem two models share is kept only if neither got slower
    ([("a", ["k1", "k2"], 2.0, 1.0), ("b", ["k2", "k3"], 1.0, 1.2)], {"k1"}),
    ([("a", ["k1", "k2"], 2.0, 1.0), ("b", ["k2"], 1.0, 0.9)], {"k1", "k2"}),
    # a model that failed keeps none, and vetoes what it shares
    ([("a", ["k1", "k2"], 2.0, 1.0), ("b", ["k2"], None, None)], {"k1"}),
])
def test_kept_keys(checks, kept) -> None:
    cs = []
    for src, changed, old, new in checks:
        c = ModelCheck(src, changed, list(changed), old, new)
        if old is None:
            c.error = "CompileError: x"
        cs.append(c)
    assert kept_keys(cs) == kept
    for c in cs:
        assert c.verdict == ("kept" if c.faster else "dropped (CompileError: x)" if c.error
                             else "dropped (slower whole)")
