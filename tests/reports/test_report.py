"""``halbench report``: one self-contained HTML file, rendered and looked at in headless Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from halbench.bench.results import write_results
from halbench.cli import main
from halbench.reports.report import render_report
from tests.reports.make_results import make_results

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> list[Path]:
    d = tmp_path_factory.mktemp("runs")
    base = write_results(d / "base.json", make_results(seed=1, wrong="resnet50/b1"))
    new = write_results(d / "new.json", make_results(seed=2, slowdown={"resnet50/b1": 1.3}, throttle=True))
    return [base, new]


@pytest.fixture(scope="module")
def html(two_runs) -> str:
    return render_report(two_runs)


def test_report_is_self_contained(html: str) -> None:
    # Namespace URIs inside SVG (xmlns="http://www.w3.org/2000/svg") name, they do not fetch.
    fetched = re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//|@import""",
                         html, re.IGNORECASE)
    assert fetched == []
    assert "<link" not in html and "<script src" not in html
    without_ns = re.sub(r'xmlns(:\w+)?="http://www\.w3\.org/[^"]*"', "", html)
    assert "http://" not in without_ns and "https://" not in without_ns


def test_report_has_the_sections_and_charts(html: str) -> None:
    assert html.count("<svg") == 1 + 3  # the latency chart and one roofline per device
    for section in ('id="devices"', 'id="models"', 'id="micro"', 'id="dispatches"', 'id="roofline"',
                    'id="environment"', 'id="warnings"'):
        assert section in html
    assert "NVIDIA H100 80GB HBM3" in html and "llvmpipe (LLVM 19.1.7, 256 bits)" in html
    assert "vulkan-1.3 ✓" in html
    assert "copy 2," in html  # measured bandwidth of the H100, in GB/s
    assert "max abs error 0.37" in html  # a wrong result shows as wrong, untimed
    assert "sw_thermal_slowdown" in html  # throttling seen
    assert "table class=\"sortable\"" in html and "addEventListener" in html
    assert "×1.3" in html  # resnet50 is 1.3x slower in the second file than in the first


def test_report_escapes_names(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("lavapipe",), models=("mobilenetv2/b1",), micros=False)
    doc["benchmarks"][0]["name"] = "<script>alert(1)</script>"
    html = render_report([write_results(tmp_path / "x.json", doc)])
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html


def test_report_without_micros_or_dispatches(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("lavapipe",), models=("mobilenetv2/b1",), micros=False)
    for b in doc["benchmarks"]:
        b["dispatches"] = []
    html = render_report([write_results(tmp_path / "x.json", doc)])
    assert "No micro-benchmarks" in html and "No per-dispatch timings" in html
    assert "no measured peaks" in html


def test_report_size_for_50_benchmarks(tmp_path: Path) -> None:
    doc = make_results(seed=1, extra_models=36)  # 40 models + 5 micros on 3 devices: 135 entries
    assert len({b["name"] for b in doc["benchmarks"]}) >= 45
    out = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["report", str(write_results(tmp_path / "r.json", doc)), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size < 3_000_000


@pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (Debian package chromium)")
def test_report_renders_in_headless_chromium(two_runs, tmp_path: Path) -> None:
    from PIL import Image  # a matplotlib dependency

    out = tmp_path / "report.html"
    assert CliRunner().invoke(main, ["report", *map(str, two_runs), "-o", str(out)]).exit_code == 0
    png = tmp_path / "report.png"
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                        "--no-first-run", "--disable-background-networking",
                        "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                        f"--screenshot={png}", "--window-size=1400,3000", out.as_uri()],
                       check=True, capture_output=True, timeout=120)
    image = Image.open(png).convert("RGB")
    assert image.size == (1400, 3000)
    pixels = np.asarray(image).astype(int).reshape(-1, 3)
    ink = (pixels.min(axis=1) < 200).mean()
    assert ink > 0.02, "the page rendered (almost) blank"
    # The latency chart's markers: the palette's orange (#efb118) is used by no CSS rule.
    orange = int((np.abs(pixels - [0xEF, 0xB1, 0x18]).max(axis=1) < 40).sum())
    assert orange > 100, "no chart markers in the screenshot"


def _tables(html: str) -> list[list[list[str]]]:
    """Every table of the page as rows of cell texts (th and td)."""
    from html.parser import HTMLParser

    class Tables(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tables: list[list[list[str]]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.tables.append([])
            elif tag == "tr" and self.tables:
                self.tables[-1].append([])
            elif tag in ("td", "th") and self.tables:
                self.cell = []

        def handle_endtag(self, tag):
            if tag in ("td", "th") and self.cell is not None:
                self.tables[-1][-1].append(" ".join(" ".join(self.cell).split()))
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    parser = Tables()
    parser.feed(html)
    return parser.tables


def test_report_compares_runtimes(tmp_path: Path) -> None:
    doc = make_results(seed=1, wrong="resnet50/b1", peers={
        "torch-cudagraph": 0.6, "onnxruntime-cuda": 0.9, "onnxruntime-cpu": 3.0})
    wrong = next(b for b in doc["benchmarks"] if b["status"] == "wrong")
    wrong["correctness"].update(reference="onnxruntime-cpu", local_sync_rel_error=0.3)
    html = render_report([write_results(tmp_path / "r.json", doc)])
    assert 'id="runtimes"' in html
    # One runtime chart per device where halbench and a peer both ran; roofline per halbench device.
    assert html.count("<svg") == 1 + 1 + 3
    tables = _tables(html)
    models = next(t for t in tables if t[0][0] == "model" and any("cuda://0" in c for c in t[0]))
    header = models[0]
    assert [h for h in header if "time / halbench" in h] == [
        "onnxruntime-cpu time / halbench's", "onnxruntime-cuda time / halbench's",
        "torch-cudagraph time / halbench's"]
    col = header.index("torch-cudagraph time / halbench's")
    for row in models[1:]:
        ratio = float(row[col].split("×")[0])
        assert abs(ratio - 0.6) < 0.03, row  # the peer's time / halbench's on cuda://0
        assert "on cuda://0" in row[col]
    assert "the peer is faster" in html
    assert 'title="2 nodes fell back to the CPU provider · version 1.23.2' in html  # runtime_info note
    # The chart's numbers as a table: every model, every runtime on cuda://0, ratio to the fastest.
    cuda = next(t for t in tables if t[0] == ["model", "halbench", "onnxruntime-cuda", "torch-cudagraph"])
    assert len(cuda) == 1 + 4 and all(row[3].endswith("1.00×") for row in cuda[1:])
    elsewhere = next(t for t in tables if "runtime@device" in t[0])
    assert {row[1] for row in elsewhere[1:]} == {"onnxruntime-cpu@local-task://"}
    assert all(row[4] == "cuda://0" for row in elsewhere[1:])  # halbench's fastest device
    # A wrong entry names its reference and whether local-sync shares the bug.
    assert "reference: onnxruntime-cpu; local-sync agrees with halbench (compiler bug shared by " \
           "local-sync)" in html
    wrong["correctness"]["local_sync_rel_error"] = 1e-7
    html = render_report([write_results(tmp_path / "r.json", doc)])
    assert "reference: onnxruntime-cpu; local-sync disagrees" in html


def test_report_escapes_runtime_names(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("h100-cuda",), micros=False, peers={"torch-cudagraph": 0.6})
    for b in doc["benchmarks"]:
        if b["runtime"] != "halbench":
            b["runtime"] = "<b>evil</b>"
            b["runtime_info"] = {"note": '"><script>x()</script>'}
    html = render_report([write_results(tmp_path / "x.json", doc)])
    assert "<b>evil" not in html and "&lt;b&gt;evil&lt;/b&gt;" in html
    assert "<script>x()" not in html
