"""``halbench gate``: fail CI on a significant performance regression, and only then.

A benchmark fails when all three hold (each alone misfires on real machines):
1. relative: the candidate's median is slower than the threshold (suite default, per-benchmark
   override, else 5%) -- a tiny but real shift is not worth blocking a merge;
2. absolute: the slowdown is larger than the noise floor in ms -- a 20% change of a 3 us
   dispatch is timer jitter;
3. significant: a one-sided Mann-Whitney U test on the raw samples gives p < alpha (0.01), or,
   with fewer than 5 samples on a side, the confidence intervals of the medians do not overlap.

Exit codes: 0 pass, 1 a significant regression (or a candidate that computes wrong results),
2 unusable input (a benchmark missing on one side, devices that differ, a benchmark that could
not be timed). Unusable input is never a silent pass.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from halbench.bench.stats import Comparison, compare_samples
from halbench.reports.compare import fmt_ms, timing_samples

__all__ = [
    "ALPHA",
    "DEFAULT_THRESHOLD",
    "GateReport",
    "Outcome",
    "render_junit",
    "render_markdown",
    "render_text",
    "run_gate",
    "unusable_report",
]

ALPHA = 0.01
DEFAULT_THRESHOLD = 0.05
EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE = 0, 1, 2


@dataclass(frozen=True)
class Outcome:
    name: str
    device: str
    result: str  # pass | fail | new | skipped | unusable
    reason: str
    threshold: float
    noise_floor_ms: float
    statistic: str = ""
    comparison: Comparison | None = None


@dataclass
class GateReport:
    outcomes: list[Outcome]
    problems: list[str] = field(default_factory=list)  # why the input is unusable
    notes: list[str] = field(default_factory=list)
    baseline: str = ""
    candidate: str = ""
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result == "fail"]

    @property
    def exit_code(self) -> int:
        # Unusable input outranks a regression: CI must not read "1 failure" as the whole story.
        if self.problems:
            return EXIT_UNUSABLE
        return EXIT_REGRESSION if self.failures else EXIT_PASS

    @property
    def headline(self) -> str:
        if self.problems:
            return f"UNUSABLE INPUT ({len(self.problems)} problem{'s' * (len(self.problems) != 1)})"
        n = len(self.failures)
        if n:
            return f"FAILED: {n} significant regression{'s' * (n != 1)}"
        return f"PASSED: {len(self.outcomes)} benchmarks, no significant regression"


def _gate_settings(doc: dict[str, Any]) -> dict[str, Any]:
    suite = doc["run"].get("suite") or {}
    return suite.get("gate") or {}


def _device_problems(base: dict[str, Any], cand: dict[str, Any], uris: set[str]) -> list[str]:
    problems = []
    for uri in sorted(uris):
        b = base["devices"].get(uri, {}).get("identity", {})
        c = cand["devices"].get(uri, {}).get("identity", {})
        for key in ("uuid", "name", "driver_version"):
            if b.get(key) != c.get(key):
                problems.append(f"{uri}: device {key} differs: baseline {b.get(key)!r}, "
                                f"candidate {c.get(key)!r}")
    return problems


def _judge(name: str, device: str, b: dict[str, Any], c: dict[str, Any], threshold: float,
           floor: float, alpha: float) -> Outcome | str:
    """An Outcome, or a string saying why this pair cannot be judged."""
    bs, cs = b["status"], c["status"]
    if cs == "wrong":
        return Outcome(name, device, "fail", f"candidate computes wrong results: {c.get('error')}",
                       threshold, floor, "correctness")
    if bs == cs == "skipped":
        return Outcome(name, device, "skipped", f"skipped on both sides: {c.get('error')}",
                       threshold, floor)
    if bs != "ok" and cs == "ok":
        # Nothing to regress from (the baseline failed or was wrong); said, not silently passed.
        return Outcome(name, device, "new", f"no baseline timing (baseline status {bs!r}); "
                       f"candidate runs", threshold, floor)
    if bs != "ok" or cs != "ok":
        return (f"{name} on {device}: cannot judge: baseline status {bs!r}, candidate status "
                f"{cs!r} ({c.get('error') or b.get('error')})")
    bkey, bsamp = timing_samples(b)
    ckey, csamp = timing_samples(c)
    if bkey != ckey:
        return f"{name} on {device}: baseline has {bkey} samples, candidate {ckey}: not comparable"
    comp = compare_samples(bsamp, csamp, alpha=alpha, min_change=threshold, alternative="greater")
    if comp.method == "mann-whitney":
        stat = f"Mann-Whitney U one-sided on {bkey} (n={comp.base.count}/{comp.new.count}), p={comp.p_value:.2g}"
    else:
        stat = f"{1 - 2 * alpha:.0%} CI overlap on {bkey} (n={comp.base.count}/{comp.new.count} < 5)"
    change = f"{comp.change:+.1%}"
    bmed, cmed = _block_medians(b, bsamp), _block_medians(c, csamp)
    repeated = len(bmed) >= 2 and len(cmed) >= 2
    if repeated:
        stat += f"; repetition medians {_ms(bmed)} -> {_ms(cmed)}"
    spread = max(comp.base.rel_iqr, comp.new.rel_iqr)
    # Run-to-run noise seen within each run: how much its repetitions' medians differ.
    run_noise = max((max(m) - min(m)) / float(np.median(m)) for m in (bmed, cmed)) if repeated else 0.0
    if comp.change <= threshold:
        reason = f"{change} is within the threshold +{threshold:.0%}"
        result = "pass"
    elif comp.delta <= floor:
        reason = f"{change} but +{comp.delta:.4f} ms is below the noise floor {floor:g} ms"
        result = "pass"
    elif not comp.significant:
        reason = f"{change} but not significant ({comp.reason})"
        result = "pass"
    elif repeated and comp.change <= 2 * run_noise:
        reason = (f"{change} is within twice the run-to-run spread of the repetitions "
                  f"({run_noise:.0%}): run-to-run noise, not a regression")
        result = "pass"
    elif repeated and min(cmed) - max(bmed) <= max(max(bmed) - min(bmed), max(cmed) - min(cmed)):
        # Samples of one run are not independent of that run's machine state: it is the code
        # only when every candidate repetition is slower than every baseline one, by more than
        # the repetitions of either run differ among themselves.
        gap = min(cmed) - max(bmed)
        reason = (f"{change} but the repetitions overlap or differ by less than their own spread "
                  f"(gap {gap:+.4g} ms): run-to-run noise, not a regression")
        result = "pass"
    elif comp.change <= threshold + spread and (comp.base.noisy() or comp.new.noisy()):
        reason = (f"{change} is within the threshold +{threshold:.0%} plus the samples' spread "
                  f"(IQR/median {spread:.0%}): too noisy to call")
        result = "pass"
    else:
        reason = (f"slower {change} > +{threshold:.0%}, +{comp.delta:.4f} ms > {floor:g} ms, "
                  f"significant ({comp.reason})")
        result = "fail"
    if comp.verdict == "noisy" or comp.base.noisy() or comp.new.noisy():
        reason += f"; noisy (IQR/median {max(comp.base.rel_iqr, comp.new.rel_iqr):.0%})"
    return Outcome(name, device, result, reason, threshold, floor, stat, comp)


def _block_medians(entry: dict[str, Any], samples: list[float]) -> list[float]:
    """Median of each repetition's samples (``samples.blocks``), or [] without repetitions."""
    blocks = (entry.get("samples") or {}).get("blocks") or []
    if sum(blocks) != len(samples):
        return []
    out, start = [], 0
    for n in blocks:
        out.append(float(np.median(samples[start:start + n])))
        start += n
    return out


def _ms(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4g}" for v in values) + "]"


def run_gate(base: dict[str, Any], cand: dict[str, Any], *, threshold: float | None = None,
             noise_floor_ms: float | None = None, alpha: float = ALPHA,
             allow_device_mismatch: bool = False) -> GateReport:
    """Judge every (benchmark, device) of ``cand`` against ``base``; both are results dicts."""
    gate = _gate_settings(cand) or _gate_settings(base)
    default_t = threshold if threshold is not None else gate.get("threshold", DEFAULT_THRESHOLD)
    default_f = noise_floor_ms if noise_floor_ms is not None else gate.get("noise_floor_ms", 0.0) or 0.0
    overrides = gate.get("overrides") or {}
    report = GateReport([], baseline=base["run"]["id"], candidate=cand["run"]["id"],
                        settings={"threshold": default_t, "noise_floor_ms": default_f, "alpha": alpha,
                                  "overrides": overrides})
    b_idx = {(b["name"], b["device"]): b for b in base["benchmarks"]}
    c_idx = {(c["name"], c["device"]): c for c in cand["benchmarks"]}
    for name, dev in b_idx.keys() - c_idx.keys():
        report.problems.append(f"{name} on {dev}: in the baseline but missing from the candidate")
    for name, dev in c_idx.keys() - b_idx.keys():
        report.problems.append(f"{name} on {dev}: in the candidate but missing from the baseline")
    if not b_idx or not c_idx:
        report.problems.append("no benchmarks to judge")
    common = [k for k in c_idx if k in b_idx]
    mismatch = _device_problems(base, cand, {dev for _, dev in common})
    if mismatch and allow_device_mismatch:
        report.notes += [f"allowed by --allow-device-mismatch: {m}" for m in mismatch]
    else:
        report.problems += [m + " (use --allow-device-mismatch to compare anyway)" for m in mismatch]
    for name, dev in common:
        # Overrides are keyed by benchmark name, or "name@device" for one device only.
        o = overrides.get(f"{name}@{dev}") or overrides.get(name) or {}
        t = o.get("threshold", default_t)
        f = o.get("noise_floor_ms", default_f)
        judged = _judge(name, dev, b_idx[(name, dev)], c_idx[(name, dev)], t, f, alpha)
        if isinstance(judged, str):
            report.problems.append(judged)
            report.outcomes.append(Outcome(name, dev, "unusable", judged, t, f))
        else:
            report.outcomes.append(judged)
    return report


def unusable_report(problem: str, *, baseline: str = "", candidate: str = "",
                    threshold: float | None = None, noise_floor_ms: float | None = None,
                    alpha: float = ALPHA) -> GateReport:
    """The report for files that could not even be read: CI still gets a summary and exit 2."""
    return GateReport([], problems=[problem], baseline=baseline, candidate=candidate,
                      settings={"threshold": DEFAULT_THRESHOLD if threshold is None else threshold,
                                "noise_floor_ms": noise_floor_ms or 0.0, "alpha": alpha,
                                "overrides": {}})


def _row(o: Outcome) -> list[str]:
    c = o.comparison
    base = fmt_ms(c.base.median) if c else "-"
    new = fmt_ms(c.new.median) if c else "-"
    change = f"{c.change:+.1%}" if c else "-"
    return [o.name, o.device, base, new, change, f"+{o.threshold:.0%}", o.result.upper(), o.statistic or "-",
            o.reason]


_HEADER = ["benchmark", "device", "base ms", "cand ms", "change", "threshold", "result", "statistic",
           "why"]


def _settings_line(r: GateReport) -> str:
    s = r.settings
    return (f"baseline {r.baseline} vs candidate {r.candidate}; threshold +{s['threshold']:.0%} "
            f"(per-benchmark overrides: {len(s['overrides'])}), noise floor {s['noise_floor_ms']:g} ms, "
            f"alpha {s['alpha']:g} one-sided")


def render_text(r: GateReport) -> str:
    rows = [_HEADER[:-1]] + [_row(o)[:-1] for o in r.outcomes]
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    out = [_settings_line(r)]
    for i, cells in enumerate(rows):
        line = "  ".join(c.ljust(w) for c, w in zip(cells, widths))
        if i:
            line += "  " + r.outcomes[i - 1].reason
        out.append(line.rstrip())
    out += [f"note: {n}" for n in r.notes]
    out += [f"problem: {p}" for p in r.problems]
    out.append(f"gate: {r.headline}")
    return "\n".join(out)


_ICON = {"pass": "✅", "fail": "❌", "new": "🆕", "skipped": "⏭️", "unusable": "⚠️"}


def render_markdown(r: GateReport) -> str:
    """A summary for $GITHUB_STEP_SUMMARY: headline, settings, failures first, then the rest."""
    icon = "⚠️" if r.problems else ("❌" if r.failures else "✅")
    lines = [f"## {icon} halbench gate: {r.headline}", "", _settings_line(r), ""]
    if r.problems:
        lines += ["### Unusable input", ""] + [f"- {p}" for p in r.problems] + [""]
    if r.notes:
        lines += [f"> {n}" for n in r.notes] + [""]
    order = {"fail": 0, "unusable": 1, "new": 2, "pass": 3, "skipped": 4}
    lines += ["| | " + " | ".join(_HEADER) + " |", "|---|" + "---|" * len(_HEADER)]
    for o in sorted(r.outcomes, key=lambda o: order[o.result]):
        cells = [c.replace("|", "\\|") for c in _row(o)]
        lines.append(f"| {_ICON[o.result]} | " + " | ".join(cells) + " |")
    lines += ["", ("A benchmark fails only when it is slower than its threshold, by more than the "
              "noise floor, and significantly so (Mann-Whitney U on raw samples, or non-overlapping "
              "confidence intervals below 5 samples).")]
    return "\n".join(lines) + "\n"


def render_junit(r: GateReport) -> str:
    """JUnit XML: one testcase per (benchmark, device); unusable input is an <error>."""
    suite = ET.Element("testsuite", name="halbench gate", tests=str(len(r.outcomes)),
                       failures=str(len(r.failures)),
                       errors=str(sum(o.result == "unusable" for o in r.outcomes)),
                       skipped=str(sum(o.result in ("skipped", "new") for o in r.outcomes)))
    props = ET.SubElement(suite, "properties")
    for k in ("threshold", "noise_floor_ms", "alpha"):
        ET.SubElement(props, "property", name=k, value=str(r.settings[k]))
    ET.SubElement(props, "property", name="baseline", value=r.baseline)
    ET.SubElement(props, "property", name="candidate", value=r.candidate)
    for o in r.outcomes:
        case = ET.SubElement(suite, "testcase", classname=f"halbench.gate.{o.device}", name=o.name,
                             time=f"{(o.comparison.new.median / 1e3) if o.comparison else 0:.6f}")
        if o.result == "fail":
            ET.SubElement(case, "failure", message=o.reason, type="regression").text = o.statistic
        elif o.result == "unusable":
            ET.SubElement(case, "error", message=o.reason, type="unusable")
        elif o.result in ("skipped", "new"):
            ET.SubElement(case, "skipped", message=o.reason)
        else:
            ET.SubElement(case, "system-out").text = f"{o.statistic}: {o.reason}"
    # Problems not tied to a common benchmark (missing ones, device mismatch) become errors too.
    for p in r.problems:
        if not any(o.reason == p for o in r.outcomes):
            case = ET.SubElement(suite, "testcase", classname="halbench.gate", name="input")
            ET.SubElement(case, "error", message=p, type="unusable")
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("errors", str(sum(c.find("error") is not None for c in cases)))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
