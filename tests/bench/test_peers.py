"""Peers in a suite, for real: onnxruntime (CPU), PyTorch through onnx2torch (CPU) and IREE
(llvm-cpu and vulkan-spirv on lavapipe) run the very same model file beside halbench, checked
against onnxruntime as the independent reference; a peer that cannot run here is skipped with
its reason; a compiler bug that local-sync shares is caught by the independent reference."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from halbench.errors import UserError
from halbench.peers import get_peer, parse_peer

SUITE = """
name: peers-tiny
devices: ["local-task://", "vulkan://"]
settings: {warmup: 1, min_time_s: 0.0, min_samples: 3, max_samples: 5, repetitions: 1, tolerance: 1.0e-4}
models:
  - {name: tiny-mlp/b1, zoo: tiny-mlp, batch: 1, weights: random}
peers: [onnxruntime/cpu]
"""


def _missing(*names: str) -> str | None:
    for n in names:
        why = get_peer(n).missing()
        if why:
            return why
    return None


def test_peer_names_are_checked_in_one_line() -> None:
    assert parse_peer("torch/cudagraph").text == "torch/cudagraph"
    assert parse_peer({"peer": "torch/compile", "precision": "tf32"}).options["precision"] == "tf32"
    with pytest.raises(UserError, match=r"unknown peer 'tensorflow'; known peers: iree, onnxruntime, torch"):
        parse_peer("tensorflow")
    with pytest.raises(UserError, match=r"peer torch has no mode 'graph'; its modes: torch/eager, torch/cudagraph"):
        parse_peer("torch/graph")
    with pytest.raises(UserError, match=r"precision 'fp8' is unknown"):
        parse_peer({"peer": "torch/eager", "precision": "fp8"})


def test_suite_names_its_peers(tmp_path: Path) -> None:
    from halbench.bench.suite import load_suite

    p = tmp_path / "s.yaml"
    p.write_text(SUITE)
    assert [x.text for x in load_suite(str(p)).peers] == ["onnxruntime/cpu"]
    p.write_text(SUITE.replace("[onnxruntime/cpu]", "[onnxruntime/gpu]"))
    with pytest.raises(UserError, match=r"peers\[0\]: peer onnxruntime has no mode 'gpu'"):
        load_suite(str(p))


def _cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "halbench", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, env=env)


@pytest.mark.slow
def test_run_suite_with_cpu_peers_on_the_same_model(tmp_path: Path) -> None:
    why = _missing("onnxruntime", "torch", "iree")
    if why:
        pytest.skip(why)
    (tmp_path / "s.yaml").write_text(SUITE)
    r = _cli("run-suite", "s.yaml", "--peer", "torch/eager", "--peer", "torch/cudagraph", "--peer", "iree",
             "-o", "r.json", "--report", "r.html", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["schema_version"] == 3
    by = {(b["runtime"], b["device"].split(":")[0]): b for b in doc["benchmarks"]}
    # halbench on both devices, checked against onnxruntime (independent of halbench's compiler)
    for dev in ("local-task", "vulkan"):
        b = by[("halbench", dev)]
        assert b["status"] == "ok" and b["correctness"]["reference"] == "onnxruntime-cpu"
        assert b["correctness"]["rel_error"] < 1e-5 and b["correctness"]["local_sync_rel_error"] < 1e-5
    # the peers: CPU ones once on the host CPU, IREE on the CPU and on lavapipe
    for key in (("onnxruntime-cpu", "local-task"), ("torch-eager", "local-task"), ("iree-cpu", "local-task"),
                ("iree-vulkan", "vulkan")):
        b = by[key]
        assert b["status"] == "ok", (key, b.get("error"))
        assert b["correctness"]["passed"] and b["correctness"]["reference"] == "onnxruntime-cpu"
        assert len(b["samples"]["device_ms"]) >= 3 and min(b["samples"]["host_ms"]) > 0
        assert b["runtime_info"]["version"]
    assert by[("torch-eager", "local-task")]["runtime_info"]["settings"]["tf32"] is False
    skipped = by[("torch-cudagraph", "local-task")]
    assert skipped["status"] == "skipped" and "runs on cuda devices" in skipped["error"]
    assert "peer torch-cudagraph skipped" in r.stderr
    html = (tmp_path / "r.html").read_text()
    for name in ("onnxruntime-cpu", "torch-eager", "iree-vulkan"):
        assert name in html


@pytest.mark.slow
def test_a_pass_bug_local_sync_shares_is_marked_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Break a compiler pass on purpose (test-only: a wrapped pass negates one weight). halbench
    on lavapipe and its local-sync oracle then agree with each other, and only the independent
    onnxruntime reference sees the model is wrong; the report says so."""
    if _missing("onnxruntime"):
        pytest.skip("onnxruntime is not installed")
    from halbench.bench import reference
    from halbench.bench.runner import run_suite
    from halbench.bench.suite import load_suite
    from halbench.compiler import pipeline

    real = pipeline.fold_constants

    def broken(g):
        g = real(g)
        used = [v for op in g.ops for v in op.inputs if v in g.weights]
        name = next(v for v in used if g.weights[v].data is not None and g.weights[v].data.size > 16)
        g.weights[name].data = -g.weights[name].data
        return g

    monkeypatch.setattr(pipeline, "fold_constants", broken)
    monkeypatch.setenv("HALBENCH_ISOLATE", "0")  # the broken pass is this process's: compile here
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no bundle of the healthy compiler
    monkeypatch.setattr(reference, "_contexts", {})
    (tmp_path / "s.yaml").write_text(SUITE.replace('"local-task://", ', "").replace("weights: random", "weights: file"))
    doc = run_suite(load_suite(str(tmp_path / "s.yaml")), tmp_path / "r.json", progress=False)
    hb = next(b for b in doc["benchmarks"] if b["runtime"] == "halbench")
    assert hb["status"] == "wrong" and "onnxruntime-cpu reference" in hb["error"]
    c = hb["correctness"]
    assert c["local_sync_rel_error"] > 1e-2  # local-sync is wrong the same way ...
    assert c["local_sync_vs_halbench_rel_error"] < 1e-5  # ... and agrees with halbench
    ort = next(b for b in doc["benchmarks"] if b["runtime"] == "onnxruntime-cpu")
    assert ort["status"] == "ok"  # the peer runs the healthy model file
    from halbench.reports.report import write_report

    write_report([tmp_path / "r.json"], tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    assert "local-sync agrees with halbench" in html


def test_list_peers_says_what_is_installed(tmp_path: Path) -> None:
    r = _cli("list-peers", "--format", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = {x["peer"]: x for x in json.loads(r.stdout)}
    assert set(rows) >= {"torch", "onnxruntime", "iree"}
    assert rows["torch"]["modes"]["cudagraph"]["devices"] == ["cuda"]
    for x in rows.values():  # installed with a version, or not with the reason
        assert (x["installed"] and x["version"]) or (not x["installed"] and "pip install" in x["reason"])


def test_run_suite_refuses_an_unknown_peer_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(SUITE)
    r = _cli("run-suite", "s.yaml", "--peer", "tensorrt", "-o", "r.json", cwd=tmp_path)
    assert r.returncode == 2 and not (tmp_path / "r.json").exists()
    assert r.stderr.strip().count("\n") == 0 and "unknown peer 'tensorrt'" in r.stderr


def test_without_onnx_the_reference_falls_back_to_local_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine that runs cached bundles only (no onnx package) keeps running halbench's own
    benchmarks, checked against local-sync, and says why."""
    from halbench.bench import reference

    monkeypatch.setattr(reference, "_contexts", {})
    monkeypatch.setitem(sys.modules, "onnx", None)  # importing onnx now fails
    ctx = reference.model_context({"zoo": "tiny-mlp", "batch": 1})
    assert ctx.path is None and ctx.reference is None
    assert ctx.reference_name == "local-sync" and "onnx" in (ctx.reference_note or "")


def test_a_worker_out_of_time_is_stopped_and_reported(tmp_path: Path) -> None:
    """The worker is killed with its process group at the deadline; the runner gets None (an
    error entry 'did not finish'), not a hang on a pipe some grandchild holds."""
    from halbench.bench.peer_runs import _run_worker

    (tmp_path / "request.json").write_text("{}")
    assert _run_worker(tmp_path, 0.01) is None
    assert not (tmp_path / "result.json").exists()
    # A worker that finishes gives its exit code: a bad request is reported in result.json.
    assert _run_worker(tmp_path, 300) == 0
    assert json.loads((tmp_path / "result.json").read_text())["status"] == "error"


@pytest.mark.parametrize("zoo_name,opset", [("zoo-squeezenet1.1", 6), ("zoo-googlenet", 8)])
def test_torch_peer_upgrades_a_classic_zoo_model_it_cannot_convert(tmp_path: Path, zoo_name: str, opset: int) -> None:
    """onnx2torch has no converter for SqueezeNet 1.1's MaxPool-1 (opset 6) nor GoogLeNet's
    Dropout-7 (opset 8): the torch peer upgrades such a model to UPGRADE_OPSET and converts that,
    says so in its settings, and its output matches onnxruntime on the original file."""
    why = _missing("torch", "onnxruntime")
    if why:
        pytest.skip(why)
    import numpy as np
    import onnx
    import onnx2torch
    import onnxruntime as ort

    from halbench.bench import zoo
    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx
    from halbench.peers.torch_peer import UPGRADE_OPSET, PeerUnsupported, convert_onnx

    m = zoo.build(zoo_name)
    randomize_onnx(m, RANDOM_SEED)
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    with pytest.raises(NotImplementedError):  # as it is: what the peer used to report
        onnx2torch.convert(str(path))
    net, upgraded = convert_onnx(path)
    assert upgraded == f"{opset} -> {UPGRADE_OPSET}"
    feeds = zoo.make_inputs(zoo_name)
    (ref,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    import torch

    with torch.inference_mode():
        out = net.eval()(*[torch.from_numpy(x) for x in feeds.values()]).numpy()
    assert np.abs(out - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1e-6)
    # a model that fails for another reason is not upgraded: one line naming onnx2torch's error
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(PeerUnsupported, match="^onnx2torch cannot convert the model: "):
        convert_onnx(bad)


#: zoo models whose onnx2torch conversion read device values on the host (a Dropout's ratio, an
#: Expand's or a Slice's constants, a Reshape by a Shape): their PyTorch CUDA graph failed to capture
CAPTURE_UNSAFE = ["deeplabv3", "zoo-alexnet", "zoo-squeezenet1.1", "tiny-mobilebert"]


@pytest.mark.parametrize("zoo_name", CAPTURE_UNSAFE)
def test_torch_peer_rewrites_keep_the_result_and_read_no_device_value(zoo_name: str) -> None:
    """The torch peer's graph rewrites (``_capture_safe``) give bit-identical outputs, and the
    rewritten model runs with its weights and inputs on the ``meta`` device, which has no data:
    every host read left (``tolist()``, ``item()``, ``torch.Size(t)``) reads a CPU tensor, so a
    CUDA graph capture meets no copy back and no synchronisation. Before the rewrites each of
    these failed on ``meta`` as its capture failed on the H200."""
    why = _missing("torch")
    if why:
        pytest.skip(why)
    import numpy as np
    import onnx
    import torch

    from halbench.bench import zoo
    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx
    from halbench.peers.torch_peer import _capture_safe, convert_onnx

    m = zoo.build(zoo_name)
    randomize_onnx(m, RANDOM_SEED)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "m.onnx"
        onnx.save(m, path)
        feeds = zoo.make_inputs(zoo_name)
        xs = [torch.from_numpy(np.ascontiguousarray(x)) for x in feeds.values()]
        net, _ = convert_onnx(path)
        net = net.eval()
        with torch.inference_mode():
            ref = net(*xs)
            with pytest.raises((RuntimeError, NotImplementedError, TypeError)):
                convert_onnx(path)[0].eval().to("meta")(*[x.to("meta") for x in xs])
            assert _capture_safe(net, list(feeds.values())) > 0
            out = net(*xs)
            ref, out = ([ref], [out]) if isinstance(ref, torch.Tensor) else (ref, out)
            assert all(torch.equal(a, b) for a, b in zip(ref, out))
            meta = net.to("meta")(*[x.to("meta") for x in xs])
    meta = [meta] if isinstance(meta, torch.Tensor) else meta
    assert [tuple(t.shape) for t in meta] == [tuple(t.shape) for t in ref]


@pytest.mark.gpu
def test_torch_cudagraph_peer_runs_models_onnx2torch_made_capture_unsafe(tmp_path: Path) -> None:
    """The torch/cudagraph peer, through the worker process run-suite starts for it, on cuda://0,
    on the zoo models whose capture failed on the H200 ('operation failed due to a previous error
    during capture', 'Cannot copy between CPU and CUDA tensors during CUDA graph capture'): each
    captures, matches onnxruntime and is timed."""
    why = _missing("onnxruntime", "torch")
    if why:
        pytest.skip(why)
    import numpy as np
    import onnx
    import onnxruntime as ort

    import halbench
    from halbench.bench import zoo
    from halbench.bench.suite import Settings
    from halbench.bundle.weights import RANDOM_SEED, randomize_onnx

    dev = halbench.create_device("cuda://0")
    info = dev.info.to_dict()
    dev.close()
    for name in CAPTURE_UNSAFE:
        folder = tmp_path / name
        folder.mkdir()
        m = zoo.build(name)
        randomize_onnx(m, RANDOM_SEED)
        onnx.save(m, folder / "m.onnx")
        feeds = zoo.make_inputs(name)
        ref = ort.InferenceSession(str(folder / "m.onnx"), providers=["CPUExecutionProvider"]).run(None, feeds)
        np.savez(folder / "inputs.npz", **{f"a{i}": x for i, x in enumerate(feeds.values())})
        np.savez(folder / "reference.npz", **{f"a{i}": x for i, x in enumerate(ref)})
        req = {"peer": "torch", "mode": "cudagraph", "options": {}, "model": str(folder / "m.onnx"),
               "names": list(feeds), "tolerance": 1e-3, "reference_name": "onnxruntime-cpu",
               "device": {"uri": "cuda://0", "driver": "cuda", "info": info},
               "settings": dict(Settings(warmup=2, min_time_s=0.0, min_samples=5, max_samples=10).__dict__)}
        (folder / "request.json").write_text(json.dumps(req))
        subprocess.run([sys.executable, "-m", "halbench.bench.peer_worker", str(folder)], timeout=600, check=True)
        out = json.loads((folder / "result.json").read_text())
        assert out["status"] == "ok", (name, out.get("error"), out.get("traceback", "")[-1500:])
        assert out["correctness"]["passed"], (name, out["correctness"])
        assert out["settings"]["capture_rewrites"] > 0 and len(out["device_ms"]) >= 5
