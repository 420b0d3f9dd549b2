"""``halbench gate``: three answers for CI -- PASS, REGRESSION or INCONCLUSIVE.

Each benchmark is judged by :func:`halbench.reports.decision.decide`, the rule ``compare`` uses:
REGRESSION when it is surely slower than its allowance (the threshold, or the noise floor where
that is larger) and the samples agree; PASS when no slowdown beyond the allowance can hide in the
noise; INCONCLUSIVE when the noise is too large to say either. A candidate that computes wrong
results is a REGRESSION too. Limits come from the baseline, a gate file or the command line, never
from the candidate (:mod:`halbench.reports.thresholds`).

Exit codes (``EXIT_*``): 0 pass, 1 regression, 2 unusable input (a benchmark missing on one side,
devices that differ, a benchmark that could not be timed, unreadable files, an internal error),
3 inconclusive. Unusable input outranks a regression, which outranks inconclusive. ``--inconclusive
pass|fail`` maps 3 to 0 or 1 for CI that wants two answers.

Entries meet by (name, device, runtime), or, with runtimes named (``--baseline-runtime
torch-cudagraph``), one runtime's entries meet another's by (name, device), in one file or two
(:mod:`halbench.reports.runtimes`): "halbench must stay within 1.1x of PyTorch". Then a baseline
entry that meets nothing is ``unmatched``, listed and not a problem.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

from halbench.bench.schema import HALBENCH
from halbench.reports.compare import (
    decide_entries,
    device_differences,
    fmt_bounds,
    fmt_change,
    fmt_ms,
)
from halbench.reports.decision import Decision, Limits
from halbench.reports.runtimes import Sides, match, where
from halbench.reports.thresholds import GateSettings, resolve_settings

__all__ = [
    "EXIT_INCONCLUSIVE",
    "EXIT_PASS",
    "EXIT_REGRESSION",
    "EXIT_UNUSABLE",
    "INCONCLUSIVE_MODES",
    "GateReport",
    "Outcome",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_text",
    "run_gate",
    "unusable_report",
]

EXIT_PASS, EXIT_REGRESSION, EXIT_UNUSABLE, EXIT_INCONCLUSIVE = 0, 1, 2, 3
#: What an inconclusive benchmark does to the exit code: report it (3), or count it as 0 or 1.
INCONCLUSIVE_MODES = {"report": EXIT_INCONCLUSIVE, "pass": EXIT_PASS, "fail": EXIT_REGRESSION}
# Decision verdict -> gate result.
_RESULT = {"faster": "pass", "same": "pass", "slower": "regression", "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class Outcome:
    name: str
    device: str
    result: str  # pass | regression | inconclusive | new | skipped | unusable | unmatched
    reason: str
    limits: Limits
    statistic: str = ""
    decision: Decision | None = None
    runtime: str = HALBENCH  # the candidate's (the same on both sides unless runtimes are compared)


@dataclass
class GateReport:
    outcomes: list[Outcome]
    problems: list[str] = field(default_factory=list)  # why the input is unusable
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    baseline: str = ""
    candidate: str = ""
    settings: GateSettings = field(default_factory=GateSettings)
    inconclusive_mode: str = "report"
    baseline_runtime: str | None = None  # set when one runtime is judged against another
    candidate_runtime: str | None = None

    def of(self, result: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.result == result]

    @property
    def regressions(self) -> list[Outcome]:
        return self.of("regression")

    @property
    def inconclusive(self) -> list[Outcome]:
        return self.of("inconclusive")

    @property
    def answer(self) -> str:
        """UNUSABLE, REGRESSION, INCONCLUSIVE or PASS, before --inconclusive maps anything."""
        if self.problems:
            return "UNUSABLE"
        if self.regressions:
            return "REGRESSION"
        return "INCONCLUSIVE" if self.inconclusive else "PASS"

    @property
    def exit_code(self) -> int:
        # Unusable input outranks a regression: CI must not read "1 failure" as the whole story.
        return {"UNUSABLE": EXIT_UNUSABLE, "REGRESSION": EXIT_REGRESSION, "PASS": EXIT_PASS,
                "INCONCLUSIVE": INCONCLUSIVE_MODES[self.inconclusive_mode]}[self.answer]

    @property
    def headline(self) -> str:
        n, s = len, lambda k: "s" * (k != 1)
        answer = self.answer
        if answer == "UNUSABLE":
            return f"UNUSABLE INPUT ({n(self.problems)} problem{s(n(self.problems))})"
        if answer == "REGRESSION":
            more = f", {n(self.inconclusive)} inconclusive" if self.inconclusive else ""
            return f"REGRESSION: {n(self.regressions)} benchmark{s(n(self.regressions))} surely slower{more}"
        if answer == "INCONCLUSIVE":
            mapped = (f" (counted as {'a pass' if self.exit_code == EXIT_PASS else 'a failure'} by "
                      f"--inconclusive={self.inconclusive_mode})"
                      if self.inconclusive_mode != "report" else "")
            return (f"INCONCLUSIVE: {n(self.inconclusive)} benchmark{s(n(self.inconclusive))} "
                    f"could hide a slowdown beyond the allowance, no regression{mapped}")
        judged = [o for o in self.outcomes if o.result != "unmatched"]
        return f"PASS: {n(judged)} benchmarks, no slowdown beyond their allowance"


def _statistic(key: str, d: Decision) -> str:
    if d.method == "none":
        return f"one sample a side on {key}"
    test = (f"Mann-Whitney U one-sided on {key} (n={d.samples[0]}/{d.samples[1]}), p={d.p_value:.2g}"
            if d.method == "mann-whitney" else
            f"{1 - 2 * d.limits.alpha:.0%} CI overlap on {key} (n={d.samples[0]}/{d.samples[1]} < 5)")
    reps = d.repetitions
    return test + (f"; {reps[0]}/{reps[1]} repetitions" if min(reps) >= 2 else "; no repetitions")


def _judge_status(name: str, device: str, runtime: str, b: dict[str, Any], c: dict[str, Any],
                  limits: Limits) -> Outcome | str | None:
    """An Outcome for a pair that is not timed on both sides, a string saying why it cannot be
    judged, or None when both sides are timed (the decision judges those together)."""
    bs, cs = b["status"], c["status"]
    if cs == "wrong":
        return Outcome(name, device, "regression", f"candidate computes wrong results: "
                       f"{c.get('error')}", limits, "correctness", runtime=runtime)
    if bs == cs == "skipped":
        return Outcome(name, device, "skipped", f"skipped on both sides: {c.get('error')}", limits,
                       runtime=runtime)
    if bs != "ok" and cs == "ok":
        # Nothing to regress from (the baseline failed or was wrong); said, not silently passed.
        return Outcome(name, device, "new", f"no baseline timing (baseline status {bs!r}); "
                       f"candidate runs", limits, runtime=runtime)
    if bs != "ok" or cs != "ok":
        return (f"{where(name, device, runtime)}: cannot judge: baseline status {bs!r}, candidate "
                f"status {cs!r} ({c.get('error') or b.get('error')})")
    return None


def _one_sided(report: GateReport, sides: Sides, settings: GateSettings) -> None:
    """Entries that meet nothing on the other side: problems between two runs of one runtime;
    between runtimes, a baseline entry on a device the candidate runtime has no entry on is
    listed as unmatched (a peer runs where halbench does not), and a candidate entry no
    baseline entry meets is counted in a note."""
    if not sides.across_runtimes:
        for key in sides.keys:
            if key not in sides.new:
                report.problems.append(f"{where(*key)}: in the baseline but missing from the candidate")
            elif key not in sides.base:
                report.problems.append(f"{where(*key)}: in the candidate but missing from the baseline")
        if not sides.base or not sides.new:
            report.problems.append("no benchmarks to judge")
        return
    base_rt, cand_rt = sides.base_runtime, sides.new_runtime
    for name, dev, rt in (k for k in sides.keys if k not in sides.new):
        report.outcomes.append(Outcome(name, dev, "unmatched", f"{base_rt} ran it on {dev}; {rt} "
                                       f"has no entry there", settings.limits_for(name, dev), runtime=rt))
    if sides.left_out:
        report.notes.append(f"{sides.left_out} {cand_rt} entries have no {base_rt} entry of their "
                            f"name and device: not judged")
    if not sides.common:
        report.problems.append(f"no benchmarks to judge: no {cand_rt} entry shares a name and device "
                               f"with a {base_rt} entry")


def run_gate(base: dict[str, Any], cand: dict[str, Any], *, threshold: float | None = None,
             noise_floor_ms: float | None = None, gate_file: str | None = None,
             allow_device_mismatch: bool = False, inconclusive: str = "report",
             baseline_runtime: str | None = None, candidate_runtime: str | None = None,
             labels: tuple[str, str] = ("the baseline", "the candidate")) -> GateReport:
    """Judge every (benchmark, device, runtime) of ``cand`` against ``base``; both are results
    dicts. With ``baseline_runtime`` (or ``candidate_runtime``), judge the candidate runtime's
    entries (halbench's by default) against the baseline runtime's of the same (name, device);
    ``base`` and ``cand`` may be the same dict.

    Raises UserError for an invalid gate section in the baseline or the gate file, BadOption
    for a runtime with no entries (``labels`` name the files in that message).
    """
    if inconclusive not in INCONCLUSIVE_MODES:
        raise ValueError(f"inconclusive must be one of {', '.join(INCONCLUSIVE_MODES)}")
    sides = match(base, cand, baseline_runtime, candidate_runtime, base_label=labels[0],
                  new_label=labels[1])
    settings, warnings = resolve_settings(base, cand, gate_file=gate_file, threshold=threshold,
                                          noise_floor_ms=noise_floor_ms)
    report = GateReport([], warnings=warnings, baseline=base["run"]["id"],
                        candidate=cand["run"]["id"], settings=settings,
                        inconclusive_mode=inconclusive, baseline_runtime=sides.base_runtime,
                        candidate_runtime=sides.new_runtime)
    _one_sided(report, sides, settings)
    b_idx, c_idx = sides.base, sides.new
    common = [k for k in c_idx if k in b_idx]  # in the candidate's order
    mismatch = device_differences(base, cand, {dev for _, dev, _ in common})
    if mismatch and allow_device_mismatch:
        report.notes += [f"allowed by --allow-device-mismatch: {m}" for m in mismatch]
    else:
        report.problems += [m + " (use --allow-device-mismatch to compare anyway)" for m in mismatch]
    timed, judged_by_status = {}, {}
    for key in common:
        limits = settings.limits_for(key[0], key[1])
        status = _judge_status(*key, b_idx[key], c_idx[key], limits)
        if status is None:
            timed[key] = (b_idx[key], c_idx[key], limits)
        else:
            judged_by_status[key] = status
    decided = decide_entries(timed, device_shift=not sides.across_runtimes)
    for key in common:
        name, dev, rt = key
        limits = settings.limits_for(name, dev)
        judged = judged_by_status.get(key)
        if key in decided:
            skey, d = decided[key]
            judged = Outcome(name, dev, _RESULT[d.verdict], d.reason, limits, _statistic(skey, d), d,
                             runtime=rt)
        elif judged is None:
            judged = f"{where(*key)}: cannot judge: no timing samples on one side"
        if isinstance(judged, str):
            report.problems.append(judged)
            report.outcomes.append(Outcome(name, dev, "unusable", judged, limits, runtime=rt))
        else:
            report.outcomes.append(judged)
    return report


def unusable_report(problem: str, *, baseline: str = "", candidate: str = "",
                    inconclusive: str = "report") -> GateReport:
    """The report for input that could not even be read: CI still gets a summary and exit 2."""
    return GateReport([], problems=[problem], baseline=baseline, candidate=candidate,
                      inconclusive_mode=inconclusive)


_HEADER = ["benchmark", "device", "base ms", "cand ms", "change", "bounds", "allowance", "result",
           "statistic", "why"]


def _with_runtime(r: GateReport) -> bool:
    """A runtime column only where a peer's entries are listed: halbench-only reports stay as they were."""
    return any(o.runtime != HALBENCH for o in r.outcomes)


def _header(r: GateReport) -> list[str]:
    return _HEADER[:2] + ["runtime"] * _with_runtime(r) + _HEADER[2:]


def _row(o: Outcome, runtime: bool = False) -> list[str]:
    d = o.decision
    allowance = f"+{d.allowance:.0%}" if d and d.low is not None else f"+{o.limits.threshold:.0%}"
    return [o.name, o.device] + [o.runtime] * runtime + [
        fmt_ms(d.base_ms) if d else "-", fmt_ms(d.new_ms) if d else "-",
        fmt_change(d.change) if d else "-", fmt_bounds(d) if d else "-", allowance,
        o.result.upper(), o.statistic or "-", o.reason]


def _settings_line(r: GateReport) -> str:
    s = r.settings
    base = r.baseline + (f" ({r.baseline_runtime})" if r.baseline_runtime else "")
    cand = r.candidate + (f" ({r.candidate_runtime})" if r.candidate_runtime else "")
    return (f"baseline {base} vs candidate {cand}; threshold +{s.threshold:.0%} "
            f"(per-benchmark overrides: {len(s.overrides)}), noise floor {s.noise_floor_ms:g} ms, "
            f"alpha {s.alpha:g} one-sided; limits from {', '.join(s.sources)}")


def render_text(r: GateReport) -> str:
    runtime = _with_runtime(r)
    rows = [_header(r)[:-2]] + [_row(o, runtime)[:-2] for o in r.outcomes]
    widths = [max(len(x[i]) for x in rows) for i in range(len(rows[0]))]
    out = [_settings_line(r)]
    for i, cells in enumerate(rows):
        line = "  ".join(c.ljust(w) for c, w in zip(cells, widths))
        if i:
            line += "  " + r.outcomes[i - 1].reason
        out.append(line.rstrip())
    out += [f"warning: {w}" for w in r.warnings]
    out += [f"note: {n}" for n in r.notes]
    out += [f"problem: {p}" for p in r.problems]
    out.append(f"gate: {r.headline}")
    return "\n".join(out)


def render_json(r: GateReport) -> str:
    """The whole report as strict JSON (null, never NaN): answer, exit code, every outcome with
    its decision, and the settings, warnings and problems, for CI scripts that parse it."""
    import json
    from dataclasses import asdict

    from halbench.reports.compare import strict_json

    doc = {"answer": r.answer, "exit_code": r.exit_code, "headline": r.headline,
           "baseline": r.baseline, "candidate": r.candidate,
           "baseline_runtime": r.baseline_runtime, "candidate_runtime": r.candidate_runtime,
           "inconclusive_mode": r.inconclusive_mode, "settings": r.settings.to_dict(),
           "outcomes": [{"name": o.name, "device": o.device, "runtime": o.runtime, "result": o.result,
                         "reason": o.reason, "statistic": o.statistic, "limits": asdict(o.limits),
                         "decision": o.decision.to_dict() if o.decision else None}
                        for o in r.outcomes],
           "warnings": list(r.warnings), "notes": list(r.notes), "problems": list(r.problems)}
    return json.dumps(strict_json(doc), indent=2, allow_nan=False)


_ICON = {"pass": "✅", "regression": "❌", "inconclusive": "❔", "new": "🆕", "skipped": "⏭️",
         "unusable": "⚠️", "unmatched": "➖"}
_ORDER = {"regression": 0, "unusable": 1, "inconclusive": 2, "new": 3, "pass": 4, "skipped": 5,
          "unmatched": 6}
_EXPLAIN = ("REGRESSION: surely slower than the allowance (the threshold, or the noise floor where "
            "larger; the change's 99% lower bound above it, and a one-sided Mann-Whitney U test on "
            "the samples agreeing). PASS: the change's 95% upper bound is within the allowance. "
            "INCONCLUSIVE: the noise, measured from the spread of the repetitions, could hide a "
            "slowdown beyond the allowance. Exit codes: 0 pass, 1 regression, 2 unusable input, "
            "3 inconclusive.")


def render_markdown(r: GateReport) -> str:
    """A summary for $GITHUB_STEP_SUMMARY: headline, settings, regressions first, then the rest."""
    icon = {"UNUSABLE": "⚠️", "REGRESSION": "❌", "INCONCLUSIVE": "❔", "PASS": "✅"}[r.answer]
    lines = [f"## {icon} halbench gate: {r.headline}", "", _settings_line(r), ""]
    if r.problems:
        lines += ["### Unusable input", ""] + [f"- {p}" for p in r.problems] + [""]
    if r.warnings or r.notes:
        lines += [f"> ⚠️ {w}" for w in r.warnings] + [f"> {n}" for n in r.notes] + [""]
    header, runtime = _header(r), _with_runtime(r)
    lines += ["| | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for o in sorted(r.outcomes, key=lambda o: _ORDER[o.result]):
        cells = [c.replace("|", "\\|") for c in _row(o, runtime)]
        lines.append(f"| {_ICON[o.result]} | " + " | ".join(cells) + " |")
    lines += ["", _EXPLAIN]
    return "\n".join(lines) + "\n"


def render_junit(r: GateReport) -> str:
    """JUnit XML: one testcase per (benchmark, device); a regression is a <failure>, unusable
    input an <error>, inconclusive a <failure> under --inconclusive=fail and else <skipped>."""
    suite = ET.Element("testsuite", name="halbench gate")
    props = ET.SubElement(suite, "properties")
    s = r.settings
    for k, v in (("threshold", s.threshold), ("noise_floor_ms", s.noise_floor_ms), ("alpha", s.alpha),
                 ("baseline", r.baseline), ("candidate", r.candidate), ("answer", r.answer),
                 ("inconclusive", r.inconclusive_mode)):
        ET.SubElement(props, "property", name=k, value=str(v))
    for o in r.outcomes:
        name = o.name if o.runtime == HALBENCH else f"{o.name} ({o.runtime})"
        case = ET.SubElement(suite, "testcase", classname=f"halbench.gate.{o.device}", name=name,
                             time=f"{(o.decision.new_ms / 1e3) if o.decision else 0:.6f}")
        if o.result == "regression":
            ET.SubElement(case, "failure", message=o.reason, type="regression").text = o.statistic
        elif o.result == "inconclusive" and r.inconclusive_mode == "fail":
            ET.SubElement(case, "failure", message=o.reason, type="inconclusive").text = o.statistic
        elif o.result == "unusable":
            ET.SubElement(case, "error", message=o.reason, type="unusable")
        elif o.result in ("skipped", "new", "inconclusive", "unmatched"):
            ET.SubElement(case, "skipped", message=f"{o.result}: {o.reason}")
        else:
            ET.SubElement(case, "system-out").text = f"{o.statistic}: {o.reason}"
    # Problems not tied to a common benchmark (missing ones, device mismatch) become errors too.
    for p in r.problems:
        if not any(o.reason == p for o in r.outcomes):
            case = ET.SubElement(suite, "testcase", classname="halbench.gate", name="input")
            ET.SubElement(case, "error", message=p, type="unusable")
    cases = suite.findall("testcase")
    for attr, tag in (("failures", "failure"), ("errors", "error"), ("skipped", "skipped")):
        suite.set(attr, str(sum(c.find(tag) is not None for c in cases)))
    suite.set("tests", str(len(cases)))
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
