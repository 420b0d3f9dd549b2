"""Dispatches scheduled by level (passes/schedule_levels.py): a torch.onnx-exported inception
block's four branches start between the same two barriers and the model costs as many barriers
as its longest chain; results are bit-identical to the exporter's order and match onnxruntime on
local-sync:// and vulkan:// (lavapipe); buffer reuse puts no hazard inside a level; GoogLeNet
and Inception-v2 from the zoo lose the barriers their branches cost, chains keep their order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from halbench.compiler import CompileOptions, compile_model
from halbench.compiler.passes import schedule_levels as sl
from tests.compiler.helpers import onnx_reference, same_bits_both_ways

pytest.importorskip("onnxruntime")
pytest.importorskip("iree.compiler")


def _compile(path: Path, on: bool, monkeypatch, **options):
    monkeypatch.setattr(sl, "ENABLED", on)
    return compile_model(path, CompileOptions(tuning_cache="off", **options))


def _segments(cm) -> list[list[str]]:
    """The function's dispatch names, split at its barriers."""
    out: list[list[str]] = [[]]
    for s in cm.manifest.functions[0].steps:
        if s.kind == "barrier":
            out.append([])
        elif s.kind == "dispatch":
            out[-1].append(s.name)
    return [seg for seg in out if seg]


def _graph(path: Path):
    from halbench.compiler.frontend import load
    from halbench.compiler.parse import parse_module
    from halbench.compiler.pipeline import run_pipeline

    imp = load(path, {}, {})
    return run_pipeline(parse_module(imp.module, input_names=imp.input_names, output_names=imp.output_names,
                                     blobs=imp.blobs, weight_names=imp.weight_names))


def _assert_no_hazard_inside_a_level(g) -> None:
    """No dispatch writes bytes that another dispatch of its level reads or writes."""
    def spans(vs):
        out = []
        for v in vs:
            key, off = g.storage[g.root(v)]
            out.append((key, off, off + max(g.types[v].nbytes, 4)))
        return out

    def overlap(a, b) -> bool:
        return any(x[0] == y[0] and x[1] < y[2] and y[1] < x[2] for x in a for y in b)

    level = sl.op_levels(g)
    assert level == sorted(level)  # the order is by level
    for i, a in enumerate(g.ops):
        for j in range(i + 1, len(g.ops)):
            if level[j] != level[i]:
                break
            b = g.ops[j]
            wa, wb = spans(a.outputs), spans(b.outputs)
            assert not overlap(wa, spans(b.inputs) + wb) and not overlap(wb, spans(a.inputs)), (i, j)


def _inception(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Inception(nn.Module):  # GoogLeNet's block: 1x1 | 1x1 -> 3x3 | 1x1 -> 3x3 -> 3x3 | pool -> 1x1
        def __init__(self) -> None:
            super().__init__()
            c = 8
            self.b1 = nn.Sequential(nn.Conv2d(c, 4, 1), nn.ReLU())
            self.b2 = nn.Sequential(nn.Conv2d(c, 6, 1), nn.ReLU(), nn.Conv2d(6, 8, 3, padding=1), nn.ReLU())
            self.b3 = nn.Sequential(nn.Conv2d(c, 2, 1), nn.ReLU(), nn.Conv2d(2, 4, 3, padding=1), nn.ReLU(),
                                    nn.Conv2d(4, 4, 3, padding=1), nn.ReLU())
            self.b4 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(c, 4, 1), nn.ReLU())

        def forward(self, x):
            return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(x)], 1)

    torch.manual_seed(0)
    x = torch.randn(2, 8, 10, 10)
    path = tmp / "inception.onnx"
    torch.onnx.export(Inception().eval(), (x,), str(path), input_names=["x"], output_names=["y"],
                      opset_version=17, dynamo=False)
    return path, {"x": x.numpy()}


def test_inception_branches_start_between_the_same_barriers(vk, tmp_path: Path, monkeypatch) -> None:
    path, feeds = _inception(tmp_path)
    ref = onnx_reference(path, feeds)[0]
    opts = {"target_devices": ("vulkan", "local"), "targets": {"vulkan": "lavapipe"}}
    on, off = _compile(path, True, monkeypatch, **opts), _compile(path, False, monkeypatch, **opts)
    seg_on, seg_off = _segments(on), _segments(off)
    # the exporter's order: branch after branch; by level: the four branches' first dispatches
    # (three 1x1 convolutions and the pool) together, then two 3x3s and the pool branch's 1x1,
    # then the third branch's second 3x3, then the concatenation
    assert sorted(n for s in seg_on for n in s) == sorted(n for s in seg_off for n in s)
    assert [sorted(s) for s in seg_on] == [["conv+elementwise"] * 3 + ["pooling"], ["conv+elementwise"] * 3,
                                           ["conv+elementwise"], ["concat"]], seg_on
    assert len(seg_off) > len(seg_on), seg_off
    same_bits_both_ways({"levels": on, "exporter order": off}, feeds, ref, tmp_path)


def test_buffer_reuse_puts_no_hazard_inside_a_level(tmp_path: Path, monkeypatch) -> None:
    zoo = pytest.importorskip("halbench.bench.zoo")
    monkeypatch.setattr(sl, "ENABLED", True)
    path, _ = _inception(tmp_path)
    _assert_no_hazard_inside_a_level(_graph(path))
    gpath = tmp_path / "googlenet.onnx"
    zoo.save("zoo-googlenet", str(gpath), batch=1)
    _assert_no_hazard_inside_a_level(_graph(gpath))


@pytest.mark.parametrize("model, before, after", [("zoo-googlenet", 100, 64), ("zoo-inception-v2", 114, 77),
                                                  ("resnet50", 73, 73), ("mobilenetv2", 53, 53)])
def test_zoo_models_cost_their_longest_chain_in_barriers(model: str, before: int, after: int,
                                                           tmp_path: Path, monkeypatch) -> None:
    """Branchy CNNs lose barriers; chains (ResNet-50 after hoist_branches, MobileNetV2) keep their
    schedule. The counts are the schedule's: a change in fusion moves them, and this test says so."""
    zoo = pytest.importorskip("halbench.bench.zoo")
    path = tmp_path / f"{model}.onnx"
    zoo.save(model, str(path), batch=1)
    counts = {}
    for on in (False, True):
        cm = _compile(path, on, monkeypatch, weights="random")
        counts[on] = sum(1 for s in cm.manifest.functions[0].steps if s.kind == "barrier")
    assert (counts[False], counts[True]) == (before, after)
    monkeypatch.setattr(sl, "ENABLED", True)
    g = _graph(path)
    assert max(sl.op_levels(g)) == after  # one barrier per level boundary, none inside a level


def test_inspect_shows_the_schedule(tmp_path: Path, monkeypatch) -> None:
    """``halbench inspect`` says how many dispatches and barriers each function has (text and JSON)."""
    import json

    from click.testing import CliRunner

    from halbench.cli import main

    path, _ = _inception(tmp_path)
    counts = {}
    for on in (True, False):
        out = tmp_path / f"{on}.hbx"
        _compile(path, on, monkeypatch).write(out)
        r = CliRunner().invoke(main, ["inspect", str(out), "--format", "json"])
        assert r.exit_code == 0, r.output
        (sched,) = json.loads(r.output)["schedule"].values()
        counts[on] = sched
        text = CliRunner().invoke(main, ["inspect", str(out)]).output
        assert f"{sched['dispatches']} dispatches, {sched['barriers']} barriers" in text, text
    assert counts[True]["dispatches"] == counts[False]["dispatches"]
    assert counts[True]["barriers"] == 3 < counts[False]["barriers"]
