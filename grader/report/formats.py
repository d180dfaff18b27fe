"""Report formats: one result written as a file people or other tools read, one module each, registered by name.

Every command that offers a format reads this registry: `grade` and `check` write each one asked for
(`--NAME FILE`), `grader report NAME` renders a stored result (a class's list: one file a student, named by the
roster's id), `grader export NAME` a stored result or a class's list as one file.

    html      grader.report.html      one self-contained HTML file (inline CSS and SVG)    grader report html
    markdown  grader.report.markdown  GitHub-flavoured Markdown (CI job summaries)          grader report markdown
    junit     grader.report.junit     JUnit XML, one test case per kernel and case (CI)     grader export junit

A format's module holds `render(result) -> str` and `write(result, path)`; one under `export` also
`render_class(results) -> str`, a class's list in one file. A format from outside the grader (a course's own) is
registered by `register_format` before the command line is read. Exports that read more than one result
(Gradescope's results.json, the gradebook) have their own commands (`grader.cli.export`).

This module stays light: every command line reads it to build its options.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

REPORT, EXPORT = "report", "export"  # the command that renders a stored result in the format


@dataclass(frozen=True)
class ReportFormat:
    """A format: its name (the option `--NAME` of grade and check, its subcommand), the module that renders it, and
    its words for the command line."""

    name: str
    module: str  # holds render(result) -> str and write(result, path) (an export: render_class(results) -> str too)
    what: str  # what a written file is, in words: "HTML report" ("HTML report written to r.html")
    option_help: str  # grade's and check's --NAME
    command_help: str  # its subcommand of `command`
    command: str  # REPORT (a class's list: a folder, one file a student) or EXPORT (a class's list: one file)
    suffix: str  # a student's file in a class's folder

    def renderer(self) -> ModuleType:
        return importlib.import_module(self.module)


_FORMATS = {f.name: f for f in (
    ReportFormat("html", "grader.report.html", "HTML report", "write a self-contained HTML report",
                 "one result (a `--json` file) as one self-contained HTML file", REPORT, ".html"),
    ReportFormat("markdown", "grader.report.markdown", "Markdown report",
                 "write a Markdown report (e.g. $GITHUB_STEP_SUMMARY)",
                 "one result (a `--json` file) as Markdown (CI summaries)", REPORT, ".md"),
    ReportFormat("junit", "grader.report.junit", "JUnit XML", "write JUnit XML, one test case per kernel and case",
                 "one result as JUnit XML (one test case per kernel × case)", EXPORT, ".xml"),
)}


def report_formats(command: str | None = None) -> tuple[ReportFormat, ...]:
    """The registered formats (those `command` renders, where given), in the order they were registered."""
    return tuple(f for f in _FORMATS.values() if command is None or f.command == command)


def format_named(name: str) -> ReportFormat:
    if name not in _FORMATS:
        raise ValueError(f"unknown report format {name!r} (have {', '.join(_FORMATS)})")
    return _FORMATS[name]


def register_format(found: ReportFormat) -> None:
    """Make a format of `found`: its option in grade and check, its subcommand of report or export."""
    if found.command not in (REPORT, EXPORT):
        raise ValueError(f"report format {found.name!r}: command must be {REPORT!r} or {EXPORT!r}, "
                         f"found {found.command!r}")
    if found.name in _FORMATS and _FORMATS[found.name] != found:
        raise ValueError(f"report format {found.name!r} is registered already ({_FORMATS[found.name].module})")
    _FORMATS[found.name] = found
