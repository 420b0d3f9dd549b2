"""Every iree-compile / iree-run-module command line of the reference guides
(../shared/reference/, copied facts: the flags and names IREE documents) runs as written with
`halbench compile` / `halbench run-module` in their place.

The lines are read from the guides themselves, so a guide that gains a command gains a test.
Placeholders (`<...>`) get a concrete target; the model files the guides name are made here
as small real models with the guides' function names and input shapes. What this machine
cannot run (CUDA, ROCm) must fail with one line naming the missing driver or tool.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"

PLACEHOLDERS = {"--iree-vulkan-target": "rdna3", "--iree-cuda-target": "sm_80",
                "--iree-hal-cuda-llvm-target-arch": "sm_80", "--iree-rocm-target-chip": "gfx908",
                "--iree-rocm-bc-dir": "/opt/rocm/amdgcn/bitcode"}


def _commands() -> list[tuple[str, str]]:
    """(guide:line, command) for every iree-compile / iree-run-module line, continuations joined."""
    out = []
    if not REFERENCE.is_dir():
        return out
    for md in sorted(REFERENCE.glob("*.md")):
        lines = md.read_text().splitlines()
        for i, line in enumerate(lines):
            text = line.strip().removeprefix("$ ")
            if not text.startswith(("iree-compile", "iree-run-module")):
                continue
            parts, j = [text], i
            while parts[-1].endswith("\\"):
                parts[-1] = parts[-1][:-1]
                j += 1
                parts.append(lines[j].strip())
            out.append((f"{md.name}:{i + 1}", " ".join(p.strip() for p in parts)))
    return out


COMMANDS = _commands()


def _model(path: Path, function: str, shape: list[int]) -> None:
    """A small real CNN (conv, relu, global pool) with the guide's function name and input."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nchw = shape[1] == 3
    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4])
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [] if nchw else [helper.make_node("Transpose", ["input"], ["x"], perm=[0, 3, 1, 2])]
    nodes += [helper.make_node("Conv", ["input" if nchw else "x", "w"], ["c"], strides=[2, 2]),
              helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
              helper.make_node("Flatten", ["p"], ["logits"])]
    model = helper.make_model(helper.make_graph(nodes, function, [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx_path = path.with_suffix(".onnx")
    onnx.save(model, onnx_path)
    r = subprocess.run([sys.executable, "-m", "iree.compiler.tools.import_onnx", str(onnx_path), "-o", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    pytest.importorskip("onnx")
    pytest.importorskip("iree.compiler")
    d = tmp_path_factory.mktemp("iree")
    _model(d / "mobilenetv2.mlir", "torch-jit-export", [1, 3, 224, 224])  # the Vulkan guide
    _model(d / "mobilenet_iree_input.mlir", "predict", [1, 224, 224, 3])  # the CUDA / ROCm guides
    return d


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    args = shlex.split(command)
    tool = {"iree-compile": "compile", "iree-run-module": "run-module"}[args[0]]
    fixed = []
    for a in args[1:]:
        flag, eq, value = a.partition("=")
        fixed.append(f"{flag}={PLACEHOLDERS[flag]}" if eq and value == "<...>" else a)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "halbench", tool, *fixed], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_the_guides_have_command_lines() -> None:
    if not REFERENCE.is_dir():
        pytest.skip(f"the reference guides are not beside this checkout ({REFERENCE})")
    assert len(COMMANDS) >= 12, COMMANDS


def _unavailable(command: str) -> str | None:
    """Why this machine cannot run the command to completion (None: it must succeed)."""
    import halbench.drivers as d

    up = {s.name for s in d.query_available_drivers() if s.available}
    if "--device=cuda" in command and "cuda" not in up:
        return "driver 'cuda' is unavailable"
    if "--device=rocm" in command and "hip" not in up:
        return "driver 'hip' is unavailable"
    if "backends=rocm" in command:
        import ctypes

        try:
            ctypes.CDLL("libhiprtc.so")
        except OSError:
            return "hipRTC is not available"
    return None


@pytest.mark.parametrize("where,command", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_guide_command_runs_as_written(where: str, command: str, workdir: Path) -> None:
    # The guides compile before they run: a run-module line needs its guide's module.
    if "run-module" in command and "--module=" in command:
        module = re.search(r"--module=(\S+)", command).group(1)
        if not (workdir / module).exists():
            compile_line = next(c for _, c in COMMANDS if f"-o {module}" in c)
            _run(compile_line, workdir)
    r = _run(command, workdir)
    why = _unavailable(command)
    if why is None:
        assert r.returncode == 0, f"{where}: {command}\n{r.stderr}"
        if "run-module" in command and "--module=" in command:
            assert "EXEC @" in r.stdout and "result[0]: hal.buffer_view" in r.stdout
    else:
        assert r.returncode == 1 and why in r.stderr, f"{where}: {r.stderr}"
        assert len(r.stderr.strip().splitlines()) <= 2 and "Traceback" not in r.stderr, r.stderr
