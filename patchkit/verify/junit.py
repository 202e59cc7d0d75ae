"""JUnit XML for CI systems: one testsuite per gate, one testcase per finding (or one passing case).

Error findings are ``<failure>``s, a crashed gate is an ``<error>`` carrying its traceback, and
warnings and info rows are passing cases whose text is kept in ``<system-out>`` so that a CI page
still shows them.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from patchkit.verify.api import Finding, Severity


def _where(finding: Finding) -> str:
    return f"{finding.file}:{finding.line}" if finding.line else finding.file


def _finding_case(suite: ET.Element, finding: Finding) -> None:
    case = ET.SubElement(suite, "testcase", classname=f"patchkit.verify.{finding.gate}",
                         name=f"{finding.severity.value} {_where(finding)}: {finding.message[:120]}", file=finding.file,
                         line=str(finding.line or 0), time="0")
    text = finding.message + (f"\nhint: {finding.hint}" if finding.hint else "")
    if finding.severity == Severity.ERROR:
        ET.SubElement(case, "failure", message=f"{_where(finding)}: {finding.message}", type=finding.severity.value).text = text
    else:
        ET.SubElement(case, "system-out").text = text


def _gate_suite(parent: ET.Element, run: Any) -> None:
    errors = sum(1 for f in run.findings if f.severity == Severity.ERROR)
    crashed = run.traceback is not None
    suite = ET.SubElement(parent, "testsuite", name=f"patchkit.verify.{run.gate}", time=f"{run.seconds:.3f}",
                          tests=str(max(1, len(run.findings)) if not crashed else 1),
                          failures=str(errors), errors=str(int(crashed)), skipped="0")
    if crashed:
        case = ET.SubElement(suite, "testcase", classname=f"patchkit.verify.{run.gate}", name="gate crashed", time=f"{run.seconds:.3f}")
        ET.SubElement(case, "error", message=f"gate {run.gate} crashed", type="crash").text = run.traceback
        return
    for finding in run.findings:
        _finding_case(suite, finding)
    if not run.findings:
        ET.SubElement(suite, "testcase", classname=f"patchkit.verify.{run.gate}", name="no findings", time=f"{run.seconds:.3f}")


def junit_tree(result: Any) -> ET.ElementTree:
    """The report for a :class:`patchkit.verify.VerifyResult`."""
    root = ET.Element("testsuites", name="patchkit verify", time=f"{result.seconds:.3f}")
    for run in result.gates:
        _gate_suite(root, run)
    root.set("tests", str(sum(int(s.get("tests")) for s in root)))
    root.set("failures", str(sum(int(s.get("failures")) for s in root)))
    root.set("errors", str(sum(int(s.get("errors")) for s in root)))
    return ET.ElementTree(root)


def write_junit(result: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = junit_tree(result)
    ET.indent(tree)
    tree.write(path, encoding="utf-8", xml_declaration=True)
