"""Suite files: the shipped ones load, and every mistake is a one-line error naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from halbench.bench.suite import SUITES_DIR, load_suite
from halbench.drivers import resolve_devices
from halbench.errors import UserError


@pytest.mark.parametrize("name", ["smoke", "models", "device-peaks"])
def test_shipped_suites_load(name: str) -> None:
    s = load_suite(name)
    assert s.name == name
    assert s.benchmarks
    assert len({b.name for b in s.benchmarks}) == len(s.benchmarks)
    assert s.gate["threshold"] > 0


def test_device_peaks_covers_every_ceiling() -> None:
    kinds = {b.params["kind"] for b in load_suite("device-peaks").benchmarks}
    assert {"bandwidth-copy", "bandwidth-triad", "fma-f32", "fma-f16", "dot-int8", "matrix-f16",
            "latency-dispatch", "latency-replay", "transfer-h2d", "transfer-d2h"} <= kinds


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize("text, needle", [
    ("name: x\nmicro: [{name: a, kind: warp-drive}]\n", "unknown kind 'warp-drive'"),
    ("name: x\nmicro: [{name: a, kind: noop-ish}]\n", "unknown kind"),
    ("name: x\nmodels: [{name: a}]\n", "exactly one of zoo: or path:"),
    ("name: x\nsettings: {warmpu: 3}\nmicro: [{name: a, kind: latency-dispatch}]\n", "settings: unknown key 'warmpu'"),
    ("name: x\nsettings: {min_time_s: .nan}\nmicro: [{name: a, kind: latency-dispatch}]\n",
     "settings.min_time_s: must be a finite number"),
    ("name: x\nsettings: {repetitions: abc}\nmicro: [{name: a, kind: latency-dispatch}]\n",
     "settings.repetitions: Input should be a valid integer"),
    ("name: x\nmicro: [{name: a, kind: bandwidth-copy, params: {byts: 4}}]\n",
     "micro[0]: bandwidth-copy takes no parameter byts; it takes: bytes"),
    ("name: x\nmicro: [{name: null, kind: latency-dispatch}]\n", "micro[0].name: Input should be a valid string"),
    ("name: x\nmodels: [{name: a, zoo: tiny-cnn, batch: -1}]\n", "models[0].batch: Input should be greater"),
    ("name: x\ngate: {threshold: .inf}\nmicro: [{name: a, kind: latency-dispatch}]\n",
     "gate.threshold: must be a finite number"),
    ("name: x\nsettings: {min_samples: 9, max_samples: 3}\nmicro: [{name: a, kind: latency-dispatch}]\n",
     "max_samples 3 is below min_samples 9"),
    ("name: x\nmicro: [{name: a, kind: latency-dispatch}, {name: a, kind: latency-replay}]\n", "repeated: a"),
    ("name: x\n", "has no models and no micro"),
    ("name: [unclosed\n", "not valid YAML"),
    ("- just a list\n", "must be a YAML mapping"),
])
def test_bad_suites_are_refused_with_the_reason(tmp_path: Path, text: str, needle: str) -> None:
    with pytest.raises(UserError) as e:
        load_suite(_write(tmp_path, text))
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_suite_name_lists_the_shipped_ones() -> None:
    with pytest.raises(UserError, match="smoke"):
        load_suite("no-such-suite")


def test_per_benchmark_settings_override_the_suite(tmp_path: Path) -> None:
    s = load_suite(_write(tmp_path, "name: x\nsettings: {min_samples: 7}\nmicro:\n"
                                    "  - {name: a, kind: latency-dispatch}\n"
                                    "  - {name: b, kind: latency-dispatch, settings: {min_samples: 3}}\n"))
    assert [b.settings.min_samples for b in s.benchmarks] == [7, 3]


def _uris(patterns: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    infos, missing = resolve_devices(patterns)
    return [i.uri for i in infos], missing


def test_device_patterns_expand_to_available_devices() -> None:
    uris, missing = _uris(["local-sync://", "local-task://*", "hip://0", "local-sync://0"])
    assert uris == ["local-sync://0", "local-task://0"]  # each device once
    assert missing and missing[0][0] == "hip://0"
    quiet, missing_quietly = _uris(["hip://*", "cuda://*"])
    assert missing_quietly == [] and all(u.startswith("cuda") for u in quiet)
    star, _ = _uris(["*"])
    assert "local-sync://0" in star and "local-task://0" in star
    assert all("hip" not in u for u in star)  # no AMD GPU here: skipped quietly under '*'
    _, bad = _uris(["vulkan://²", "nosuch://"])
    assert [p for p, _ in bad] == ["vulkan://²", "nosuch://"] and all("\n" not in r for _, r in bad)


def test_suites_dir_is_the_repository_folder() -> None:
    assert (SUITES_DIR / "smoke.yaml").exists()


def test_a_yaml_alias_bomb_is_refused_in_one_line(tmp_path: Path) -> None:
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for prev, cur in zip("abcdefgh", "bcdefghi"):
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(lines) + "\n")
    assert p.stat().st_size < 600
    with pytest.raises(UserError, match="expands to more than 100000 values") as e:
        load_suite(str(p))
    assert "\n" not in str(e.value)
