"""The report's defects a newcomer found (issue 15), each checked gone by parsing the HTML.

Units from one formatter, device columns named by URI, dispatches named by their ONNX nodes, a
reconciliation line, a ceiling flag, one warning list with noisy badges only where noise changes a
conclusion, and a two-file comparison with each pair's verdict from compare's decision function.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from halbench.bench.results import read_results, write_results
from halbench.bench.run_warnings import entry_warnings
from halbench.cli import main
from halbench.reports import charts
from halbench.reports.report import render_report
from halbench.reports.trace import to_trace_events
from halbench.reports.units import dispatch_label, fmt_bytes, fmt_rate, fmt_tick, rate_prefix
from tests.reports.html_dom import following, parse, table_rows
from tests.reports.make_results import URIS, make_results


def _section_table(root, section_id: str):
    return following(root, root.find("h2", id=section_id), "table")


def _with_nodes(doc: dict[str, Any]) -> dict[str, Any]:
    """Give every dispatch the ONNX nodes a compiled bundle records."""
    for b in doc["benchmarks"]:
        for d in b.get("dispatches") or []:
            d["nodes"] = [f"/layer{d['index']}/Conv", f"/layer{d['index']}/Relu"]
    return doc


def _render(tmp_path: Path, *docs: dict[str, Any]) -> str:
    paths = [write_results(tmp_path / f"r{i}.json", d) for i, d in enumerate(docs)]
    return render_report(paths)


# -- units --------------------------------------------------------------------------------------
def test_unit_formatter() -> None:
    assert fmt_bytes(32768) == "32.0 KiB" and fmt_bytes(2 * 2**30) == "2.00 GiB"
    assert fmt_bytes(16 * 2**20) == "16.0 MiB" and fmt_bytes(512) == "512 B"
    assert rate_prefix([40.8, 49_000.0, 67_000.0, 990_000.0]) == ("T", 1e3)  # most read 1..1,000
    assert rate_prefix([40.8, 58.8, 6.03]) == ("G", 1.0)
    assert fmt_rate(40.8, ("T", 1e3)) == "0.0408 TFLOP/s" and fmt_rate(40.8) == "40.8 GFLOP/s"
    assert [fmt_tick(v) for v in (0.2, 0.5, 1, 2, 5, 10, 1000)] == \
        ["0.2", "0.5", "1", "2", "5", "10", "1,000"]


def _tick_labels(svg: str) -> list[tuple[float, str]]:
    """(x, text) of the x axis's tick labels in a matplotlib SVG (text stays text)."""
    axis = svg[svg.index('id="matplotlib.axis_1"'):svg.index('id="matplotlib.axis_2"')]
    return [(float(x), t) for x, t in re.findall(r'<text [^>]*x="([\d.]+)"[^>]*>([^<]*)</text>', axis)
            if not t.startswith("latency")]


@pytest.mark.parametrize("lo, hi", [(0.2, 6.0), (0.25, 0.6), (0.001, 900.0)])
def test_latency_axis_has_plain_labels_that_do_not_overlap(lo: float, hi: float) -> None:
    series = [charts.Series("a", [(lo * 1.2, lo, lo * 1.5), (hi / 1.5, hi / 2, hi)])]
    ticks = _tick_labels(charts.latency_chart(["m1", "m2"], series))
    assert len(ticks) >= 2
    for _, text in ticks:
        assert re.fullmatch(r"[\d,]+(\.\d+)?", text), f"not a plain decimal: {text!r}"
    # 10 px font: a character is at most ~6.5 px wide; neighbours' labels must not touch.
    ticks.sort()
    for (x1, t1), (x2, t2) in itertools.pairwise(ticks):
        assert x2 - x1 > 6.5 * (len(t1) + len(t2)) / 2 + 2, f"{t1!r} and {t2!r} overlap"


def test_tables_use_one_unit_per_quantity(tmp_path: Path) -> None:
    html = _render(tmp_path, make_results(seed=1))
    root = parse(html)
    rows = {r[0]: r[1:] for r in table_rows(_section_table(root, "devices"))}
    for cell in rows["memory"] + rows["shared memory / workgroup"]:
        assert cell == "–" or re.fullmatch(r"[\d.]+ (B|KiB|MiB|GiB)", cell), cell
    # Measured and published compute of every device: one FLOP-rate prefix in the table.
    flops = rows["measured compute"] + rows["published peaks"]
    assert len(set(re.findall(r"([GTP])FLOP/s", " ".join(flops)))) == 1
    micro = table_rows(_section_table(root, "micro"))
    prefixes = set(re.findall(r"([GTP])FLOP/s", " ".join(" ".join(r) for r in micro)))
    assert len(prefixes) == 1, prefixes  # H100's TFLOP/s beside lavapipe's: the same prefix


# -- device columns -----------------------------------------------------------------------------
def test_device_columns_are_named_by_uri_and_device(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("lavapipe", "h100-vulkan"))
    # Two CPU drivers of one host report the same name (local-sync and local-task: "AMD EPYC").
    for info in doc["devices"].values():
        info["identity"]["name"] = "AMD EPYC"
    root = parse(_render(tmp_path, doc))
    heads = table_rows(_section_table(root, "devices"))[0][1:]
    assert len(set(heads)) == len(heads) == 2
    for uri, head in zip(doc["devices"], heads):
        assert head.startswith(uri) and "AMD EPYC" in head


# -- dispatch names, reconciliation, ceiling ----------------------------------------------------
def test_dispatches_are_named_by_their_onnx_nodes(tmp_path: Path) -> None:
    doc = _with_nodes(make_results(seed=1, devices=("lavapipe",), micros=False))
    root = parse(_render(tmp_path, doc))
    table = _section_table(root, "dispatches")
    names = [r[0] for r in table_rows(table)[1:]]
    assert names and all(re.search(r"/layer\d+/Conv, /layer\d+/Relu", n) for n in names)
    trace = to_trace_events(doc)
    slices = [e for e in trace["traceEvents"] if e.get("cat") == "dispatch"]
    assert all("/Conv" in e["name"] and e["args"]["onnx_nodes"] for e in slices)
    assert dispatch_label("k", ["a", "b", "c", "d", "e"]) == "k · a, b, c … +2 more"
    assert dispatch_label("k", []) == "k"


def test_reconciliation_line_names_launch_gaps(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("lavapipe",), micros=False)
    root = parse(_render(tmp_path, doc))
    lines = root.find_all("p", cls="reconcile")
    assert lines
    for p, h3 in zip(lines, root.find_all("h3")):
        b = next(x for x in doc["benchmarks"] if x["name"] == h3.text.split()[0])
        summed = sum(d["device_ms"]["median"] for d in b["dispatches"])
        text = " ".join(p.text.split())
        assert f"{summed:.3g}"[:3] in text.replace(",", "")
        assert "launch gaps / idle" in text or "medians do not add up" in text or "timed whole" in text


def test_points_above_the_measured_ceiling_are_flagged(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("lavapipe",))
    root = parse(_render(tmp_path, doc))
    assert not root.find_all(cls="ceiling-flag")  # all under the roofs: nothing flagged
    models = [b for b in doc["benchmarks"] if b["kind"] == "model"]
    model = max(models, key=lambda b: sorted(b["samples"]["device_ms"])[len(b["samples"]["device_ms"]) // 2])
    fast = max(model["dispatches"], key=lambda d: d["device_ms"]["median"])  # listed in the breakdown
    fast["bytes"] = fast["device_ms"]["median"] * 1e12  # 1 PB/s: far above the copy ceiling
    root = parse(_render(tmp_path, doc))
    flags = root.find_all(cls="ceiling-flag")
    assert any("above the measured ceiling" in f.text for f in flags)  # the roofline's note
    row = next(tr for tr in root.find_all("tr", cls="above-ceiling"))
    assert fast["name"] in row.text and "above measured ceiling" in row.text


# -- warnings -----------------------------------------------------------------------------------
def test_one_warning_list_as_the_cli_printed_it(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("lavapipe", "h100-cuda"), throttle=True)
    uri = URIS["lavapipe"]
    transfer = copy.deepcopy(next(b for b in doc["benchmarks"] if b["device"] == uri and b["kind"] == "micro"))
    transfer["name"] = "peak/transfer/h2d"
    transfer["timing"].update(calibrated=False, total_source="host")
    transfer["samples"] = {"device_ms": [1.0, 1.5, 0.6, 2.0, 1.1], "host_ms": [1.0, 1.5, 0.6, 2.0, 1.1]}
    device_timed = copy.deepcopy(transfer)  # the same, device-timed: that one is warned
    device_timed["name"] = "peak/bandwidth/uncalibrated"
    device_timed["timing"]["total_source"] = "timestamps"
    doc["benchmarks"] += [transfer, device_timed]
    expected = entry_warnings(doc["benchmarks"])
    assert len(expected) >= 4
    assert not any("peak/transfer/h2d" in w and "uncalibrated" in w for w in expected)
    root = parse(_render(tmp_path, doc))
    items = [" ".join(li.text.split()) for li in following(root, root.find("h2", id="warnings"), "ul")
             .find_all("li") if "noisy-summary" not in li.classes]
    assert len(items) == len(set(items)) == len(expected)  # each once, noisy ones in one group
    assert sum("noisy (" in w for w in items) == sum("noisy (" in w for w in expected)
    assert f"{len(expected)} warnings" in root.find("header").text
    assert not any("peak/transfer/h2d" in w and "uncalibrated" in w for w in items)
    assert any("peak/bandwidth/uncalibrated" in w and "uncalibrated" in w for w in items)
    env = table_rows(following(root, root.find("h2", id="environment"), "table").next_sibling(
        root.find("main"), "table"))
    row = " ".join(next(r for r in env if r[0] == uri))
    assert "1 uncalibrated" in row  # the device-timed entry only, not the host-timed transfer


def test_noisy_badge_only_where_noise_changes_a_conclusion(tmp_path: Path) -> None:
    doc = make_results(seed=1, devices=("h100-vulkan", "lavapipe"), models=("resnet50/b1", "minilm-l6/s128"),
                       micros=False)
    h100, lava = URIS["h100-vulkan"], URIS["lavapipe"]
    by = {(b["name"], b["device"]): b for b in doc["benchmarks"]}
    # resnet50: lavapipe is noisy but 100x slower than the H100: the noise changes nothing.
    by[("resnet50/b1", lava)]["samples"]["device_ms"] = [100.0, 140.0, 80.0, 120.0, 95.0, 150.0]
    by[("resnet50/b1", h100)]["samples"]["device_ms"] = [1.0, 1.01, 0.99, 1.0, 1.02, 1.0]
    # tiny-bert: lavapipe is noisy and its range covers the H100's median: which is faster is open.
    by[("minilm-l6/s128", h100)]["samples"]["device_ms"] = [1.0, 1.01, 0.99, 1.0, 1.02, 1.0]
    by[("minilm-l6/s128", lava)]["samples"]["device_ms"] = [0.7, 1.3, 0.8, 1.2, 1.0, 0.9]
    root = parse(_render(tmp_path, doc))
    rows = {tr.find("td").text.strip(): tr for tr in _section_table(root, "models").find_all("tr")[1:]}
    assert not rows["resnet50/b1"].find_all(cls="noisy-badge")
    assert rows["minilm-l6/s128"].find_all(cls="noisy-badge")


# -- two files ----------------------------------------------------------------------------------
def test_two_file_report_pairs_side_by_side_with_the_gate_verdicts(tmp_path: Path) -> None:
    base = make_results(seed=1, repetitions=3)
    new = make_results(seed=2, repetitions=3, slowdown={"resnet50/b1": 1.5})
    root = parse(_render(tmp_path, base, new))
    table = root.find("table", id="comparison-table")
    rows = table_rows(table)
    # What `halbench compare` says about the same two files (one decision function, same limits).
    out = CliRunner().invoke(main, ["compare", str(tmp_path / "r0.json"), str(tmp_path / "r1.json"),
                                    "--format", "json"])
    expected = {(r["name"], r["device"]): r["verdict"] for r in json.loads(out.stdout)["rows"]}
    seen = {}
    for tr in table.find_all("tr", cls="pair"):
        cells = [td.text.strip() for td in tr.find_all("td")]
        seen[(cells[0], cells[1])] = tr.attrs["data-verdict"]
        assert cells[4] == "–" or re.fullmatch(r"×\d+\.\d\d", cells[4])  # the ratio
        assert cells[6].startswith("p=") or cells[6] in ("intervals", "–")  # its significance
    assert seen == expected
    assert seen[("resnet50/b1", URIS["h100-vulkan"])] == "slower"
    assert rows[0][:2] == ["benchmark", "device"]
    # The models table: each device's two columns next to each other.
    heads = table_rows(_section_table(root, "models"))[0][1:]
    uris = [next(u for u in URIS.values() if u in h) for h in heads if "·" in h]
    assert uris == sorted(uris, key=uris.index) and all(uris[i] == uris[i + 1] for i in range(0, len(uris), 2))


def test_smoke_suite_report_end_to_end(tmp_path: Path) -> None:
    """A real run on local-sync (the compiler records the ONNX nodes), then the report."""
    out = tmp_path / "smoke.json"
    r = CliRunner().invoke(main, ["run-suite", "smoke", "-o", str(out), "--device", "local-sync://0",
                                  "--only", "tiny-cnn/b1", "--only", "peak/bandwidth/copy",
                                  "--no-progress"])
    assert r.exit_code == 0, r.output
    doc = read_results(out)
    model = next(b for b in doc["benchmarks"] if b["name"] == "tiny-cnn/b1")
    assert any({"conv_Conv", "relu_Relu"} <= set(d.get("nodes") or []) for d in model["dispatches"])
    root = parse(render_report([out]))
    names = [r[0] for r in table_rows(_section_table(root, "dispatches"))[1:]]
    assert any("conv_Conv, relu_Relu" in n for n in names)
    assert not any(n in ("conv+elementwise", "pooling") for n in names)
    line = root.find("p", cls="reconcile").text
    assert "launch gaps / idle" in line or "do not add up" in line or "timed whole" in line


def test_two_files_without_common_benchmarks_have_no_comparison(tmp_path: Path) -> None:
    """A peaks run beside a models run (the H100 examples): nothing to compare, no section."""
    peaks = make_results(seed=1, models=())
    models = make_results(seed=2, micros=False)
    root = parse(_render(tmp_path, peaks, models))
    assert not root.find_all("table", id="comparison-table")
    assert not root.find_all("h2", id="comparison")


def test_roofline_roof_labels_do_not_overlap() -> None:
    roofs = [charts.Ceiling("measured copy", gb_s=3000.0), charts.Ceiling("fma/f32", gflop_s=28_479.0),
             charts.Ceiling("fma/f16", gflop_s=61_239.0), charts.Ceiling("published f32", gflop_s=67_000.0,
                                                                         measured=False),
             charts.Ceiling("matrix/f16", gflop_s=665_818.0),
             charts.Ceiling("published bf16/f16", gflop_s=989_400.0, measured=False)]
    svg = charts.roofline_chart("t", {"m": [(10.0, 5000.0), (0.1, 50.0)]}, roofs, salt="t")
    labels = re.findall(r'<text [^>]*font-size: 7px[^>]*y="([\d.]+)"[^>]*>([^<]*GFLOP/s)</text>', svg)
    assert len(labels) == 5
    ys = sorted(float(y) for y, _ in labels)
    assert all(b - a >= 7 for a, b in itertools.pairwise(ys)), ys  # 7 px text: one line apart at least


def test_reconciliation_of_a_model_timed_whole_says_why_its_dispatches_sum_more(tmp_path: Path) -> None:
    """A model timed whole (timing.total_source "total") has its dispatches timed in runs of their
    own, with a timestamp pair each: their medians may sum to more than the model's."""
    doc = make_results(seed=1, devices=("lavapipe",), micros=False)
    for b in (x for x in doc["benchmarks"] if x["dispatches"]):
        b["timing"]["total_source"] = "total"
        model_ms = sorted(b["samples"]["device_ms"])[len(b["samples"]["device_ms"]) // 2]
        for d in b["dispatches"]:
            d["device_ms"]["median"] = 2 * model_ms / len(b["dispatches"])
    root = parse(_render(tmp_path, doc))
    texts = [" ".join(p.text.split()) for p in root.find_all("p", cls="reconcile")]
    assert any("timed whole" in t and "runs of their own" in t for t in texts), texts
