"""``import halbench`` and the probe package load no GPU API (DESIGN.md's layering rule)."""

from __future__ import annotations

import json
import subprocess
import sys

CODE = """
import json, sys
import halbench, halbench.probe, halbench.probe.vulkan, halbench.probe.cuda, halbench.probe.hip
import halbench.probe.cpu, halbench.probe.render, halbench.drivers, halbench.cli
print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('vulkan', 'cuda', 'hip', 'pynvml'))))
"""


def test_import_loads_no_gpu_binding() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
