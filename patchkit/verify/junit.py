"""JUnit XML for CI systems: one testsuite per gate, one testcase per finding (or one passing case).

Error findings are ``<failure>``s, a crashed gate is an ``<error>`` carrying its traceback, and
warnings and info rows are passing cases whose text is kept in ``<system-out>`` so that a CI page
still shows them.
"""

from __future__ import annotations

import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from patchkit.errors import BadInput
from patchkit.verify.api import Finding, Severity
from patchkit.verify.outcome import GateRun, VerifyResult


def _where(finding: Finding) -> str:
    return f"{finding.file}:{finding.line}" if finding.line else finding.file


def _finding_case(suite: ET.Element, finding: Finding) -> None:
    case = ET.SubElement(suite, "testcase", classname=f"patchkit.verify.{finding.gate}",
                         name=f"{finding.severity.value} {_where(finding)}: {finding.message[:120]}", file=finding.file,
                         line=str(finding.line or 0), time="0")
    text = finding.message + (f"\nhint: {finding.hint}" if finding.hint else "")
    if finding.severity == Severity.ERROR:
        failure = ET.SubElement(case, "failure", message=f"{_where(finding)}: {finding.message}",
                                type=finding.severity.value)
        failure.text = text
    else:
        ET.SubElement(case, "system-out").text = text


def _plain_case(suite: ET.Element, run: GateRun, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=f"patchkit.verify.{run.gate}", name=name,
                         time=f"{run.seconds:.3f}")


def _gate_suite(parent: ET.Element, run: GateRun) -> None:
    errors = sum(1 for f in run.findings if f.severity == Severity.ERROR)
    crashed = run.traceback is not None
    suite = ET.SubElement(parent, "testsuite", name=f"patchkit.verify.{run.gate}", time=f"{run.seconds:.3f}",
                          tests=str(max(1, len(run.findings)) if not crashed else 1),
                          failures=str(errors), errors=str(int(crashed)), skipped="0")
    if crashed:
        ET.SubElement(_plain_case(suite, run, "gate crashed"), "error", message=f"gate {run.gate} crashed",
                      type="crash").text = run.traceback
        return
    for finding in run.findings:
        _finding_case(suite, finding)
    if not run.findings:
        _plain_case(suite, run, "no findings")


def junit_tree(result: VerifyResult) -> ET.ElementTree:
    """The report for a :class:`patchkit.verify.outcome.VerifyResult`."""
    root = ET.Element("testsuites", name="patchkit verify", time=f"{result.seconds:.3f}")
    for run in result.gates:
        _gate_suite(root, run)
    for total in ("tests", "failures", "errors"):
        root.set(total, str(sum(int(suite.get(total) or 0) for suite in root)))
    return ET.ElementTree(root)


def write_junit(result: VerifyResult, path: Path) -> None:
    """Write the report aside and rename it into place, so a reader never sees half a file."""
    tree = junit_tree(result)
    ET.indent(tree)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "wb") as handle:
            tree.write(handle, encoding="utf-8", xml_declaration=True)
        os.replace(tmp, path)
    except OSError as error:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise BadInput(f"--junit {path} cannot be written: {error.strerror or error}",
                       hint="pass a path in a writable directory") from None
