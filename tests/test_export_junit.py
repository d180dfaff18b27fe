"""JUnit XML: one test case per kernel × case, valid against the junit-10 schema CI systems read."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from grader.cli import main
from grader.report import junit
from grader.results import Result

from report_fixtures import class_results  # noqa: F401  (a fixture)

etree = pytest.importorskip("lxml.etree", reason="lxml validates JUnit XML against its schema (pip install '.[test]')")
SCHEMA = etree.XMLSchema(etree.parse(str(Path(__file__).parent / "schemas" / "junit-10.xsd")))


def validate(text: str) -> None:
    document = etree.fromstring(text.encode())
    assert SCHEMA.validate(document), SCHEMA.error_log


def test_every_report_is_valid_junit(class_results: dict[str, Result]) -> None:
    for result in class_results.values():
        validate(junit.render(result))


def test_the_schema_has_teeth() -> None:
    with pytest.raises(AssertionError):
        validate('<testsuites><testsuite name="s" tests="1"><testcase name="a"><failure/><error/></testcase>'
                 '</testsuite></testsuites>')
    with pytest.raises(AssertionError):
        validate('<testsuites><testsuite tests="1"><testcase name="a" time="fast"/></testsuite></testsuites>')


def test_one_testcase_per_kernel_and_case(class_results: dict[str, Result]) -> None:
    result = class_results["brian"]
    root = ET.fromstring(junit.render(result))
    names = [c.get("name") for c in root.iter("testcase")]
    assert names == [f"{k.name}[{c.name}]" for k in result.kernels for c in k.cases]
    assert root.get("tests") == str(len(names)) == "15"
    flash = next(s for s in root.iter("testsuite") if s.get("name") == "flash-attention-cpu.flash_attention")
    assert (flash.get("tests"), flash.get("failures"), flash.get("errors")) == ("9", "7", "0")
    failure = flash.find("testcase[@name='flash_attention[odd-sizes]']/failure")
    assert failure is not None and "475 of 888 elements outside tolerance" in failure.get("message")


def test_crashes_and_compile_errors_are_errors(class_results: dict[str, Result]) -> None:
    dana = ET.fromstring(junit.render(class_results["dana"]))
    assert "SIGSEGV" in dana.find(".//testcase[@name='flash_attention[one-row]']/error").get("message")
    # A crash costs its own case: the next case ran in a fresh harness (and crashed too).
    assert "SIGSEGV" in dana.find(".//testcase[@name='flash_attention[odd-sizes]']/error").get("message")
    emil = ET.fromstring(junit.render(class_results["emil"]))
    error = emil.find(".//testcase[@name='standard_attention[one-row]']/error")
    assert error.get("type") == "compile_error" and "src/standard_attention.cpp:12:" in error.text
    assert ET.fromstring(junit.render(class_results["ada"])).get("failures") == "0"


def test_export_junit_command(class_results: dict[str, Result], tmp_path: Path) -> None:
    saved = tmp_path / "chen.json"
    class_results["chen"].write(saved)
    assert main(["export", "junit", str(saved), "--out", str(tmp_path / "j.xml")]) == 0
    validate((tmp_path / "j.xml").read_text())
