"""JUnit XML for CI test reporting: one <testsuite> per kernel, one <testcase> per kernel × case.

The shape is the one Jenkins, GitLab and the GitHub JUnit actions read (Surefire's junit-10 schema).
A failed comparison is a <failure>; a crash, a time-out or a compile error is an <error>; a case that
never ran because its kernel did not build or an earlier case crashed is <skipped>.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from grader.report.hints import case_hints, kernel_hints
from grader.results import CaseResult, KernelResult, Result
from grader.status import CaseStatus, KernelStatus


def render(result: Result) -> str:
    suites = ET.Element("testsuites", name=f"{result.assignment}", tests=str(_count(result)),
                        time=_seconds(result.stages.get("total")))
    failures = errors = 0
    for kernel in result.kernels:
        suite = _suite(result, kernel)
        suites.append(suite)
        failures += int(suite.get("failures", "0"))
        errors += int(suite.get("errors", "0"))
    suites.set("failures", str(failures))
    suites.set("errors", str(errors))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def write(result: Result, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(result), encoding="utf-8")


def render_class(results: list[Result]) -> str:
    """A class's results (the list `grader batch --json` writes): one <testsuite> per student × kernel.

    A student with nothing graded (not submitted, or the grader failed) is one suite holding one
    <error> test case that says why, so CI counts them rather than losing them.
    """
    assignment = results[0].assignment if results else ""
    suites = ET.Element("testsuites", name=assignment)
    tests = failures = errors = 0
    for result in results:
        who = result.student or result.submission.path
        if not result.status.was_graded:
            suite = ET.SubElement(suites, "testsuite", name=f"{result.assignment}.{who}", tests="1", failures="0",
                                  errors="1", skipped="0", time="0.000", timestamp=result.graded_at[:19])
            case = ET.SubElement(suite, "testcase", name="submission", classname=f"{result.assignment}.{who}",
                                 time="0.000")
            ET.SubElement(case, "error", message=_first_line(result.message) or result.status.value,
                          type=result.status.value).text = result.message
            tests, errors = tests + 1, errors + 1
            continue
        for kernel in result.kernels:
            suite = _suite(result, kernel)
            suite.set("name", f"{result.assignment}.{who}.{kernel.name}")
            for case in suite.iter("testcase"):
                case.set("classname", f"{result.assignment}.{who}.{kernel.name}")
            suites.append(suite)
            tests += len(kernel.cases)
            failures += int(suite.get("failures", "0"))
            errors += int(suite.get("errors", "0"))
    suites.set("tests", str(tests))
    suites.set("failures", str(failures))
    suites.set("errors", str(errors))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


def _suite(result: Result, kernel: KernelResult) -> ET.Element:
    suite = ET.Element("testsuite", name=f"{result.assignment}.{kernel.name}", tests=str(len(kernel.cases)),
                       timestamp=result.graded_at[:19], hostname=result.environment.host or "localhost")
    properties = ET.SubElement(suite, "properties")
    for name, value in (("score", f"{kernel.score:g}"), ("max_score", f"{kernel.max_score:g}"),
                        ("status", kernel.status.value), ("student", result.student or "")):
        ET.SubElement(properties, "property", name=name, value=value)
    counts = {"failures": 0, "errors": 0, "skipped": 0}
    total = 0.0
    for case in kernel.cases:
        element, kind = _testcase(result, kernel, case)
        suite.append(element)
        if kind:
            counts[kind] += 1
        total += (case.wall_ms or 0.0) / 1000
    if kernel.status is KernelStatus.COMPILE_ERROR and not kernel.cases:
        counts["errors"] += 1
    for key, value in counts.items():
        suite.set(key, str(value))
    suite.set("time", _seconds(total))
    return suite


def _testcase(result: Result, kernel: KernelResult, case: CaseResult) -> tuple[ET.Element, str | None]:
    element = ET.Element("testcase", name=f"{kernel.name}[{case.name}]", classname=f"{result.assignment}.{kernel.name}",
                         time=_seconds((case.wall_ms or 0.0) / 1000))
    if case.passed:
        return element, None
    first_failed = next(c for c in kernel.cases if not c.passed)
    hints = case_hints(case) + (kernel_hints(kernel) if case is first_failed else [])
    detail = "\n".join([case.message, *(f"hint: {h}" for h in hints)])
    if kernel.status is KernelStatus.COMPILE_ERROR:
        error = ET.SubElement(element, "error", message="compile error", type=KernelStatus.COMPILE_ERROR.value)
        error.text = kernel.message
        return element, "errors"
    if kernel.status is KernelStatus.NOT_SUBMITTED:  # its variant's folder is missing: points lost, not skipped
        ET.SubElement(element, "failure", message=kernel.message, type=KernelStatus.NOT_SUBMITTED.value)
        return element, "failures"
    if case.status is CaseStatus.NOT_RUN:
        ET.SubElement(element, "skipped", message=case.message or "not run")
        return element, "skipped"
    if case.status.stopped_harness:
        ET.SubElement(element, "error", message=_first_line(case.message), type=case.status.value).text = detail
        return element, "errors"
    ET.SubElement(element, "failure", message=_first_line(case.message), type="mismatch").text = detail
    return element, "failures"


def _count(result: Result) -> int:
    return sum(len(k.cases) for k in result.kernels)


def _seconds(value: float | None) -> str:
    return f"{(value or 0.0):.3f}"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return (lines[0] if lines else "")[:500]
