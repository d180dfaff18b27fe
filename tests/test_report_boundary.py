"""The reports' boundary: every module under grader/report/ reads the result model and nothing else.

What a report needs from elsewhere (a speed-up table, a kernel's evidence) is carried in the `Result`
or passed in as plain data by its caller; a report that imported the spec, the targets or the
pipeline could show what the stored result does not hold (and break on results stored long ago).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parent.parent / "grader" / "report"
# The result model, the other reports, and the libraries they render with.
ALLOWED = ("grader.results", "grader.status", "grader.report", "jinja2", "rich", "matplotlib")


def imports_of(path: Path) -> list[tuple[int, str]]:
    """Every module `path` imports (at any depth: inside functions too), with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: within grader/report/ unless it climbs out
                found.append((node.lineno, "grader.report" if node.level == 1 else "." * node.level
                              + (node.module or "")))
            else:
                found.append((node.lineno, node.module or ""))
    return found


def allowed(module: str) -> bool:
    top = module.split(".")[0]
    return top == "__future__" or top in sys.stdlib_module_names or \
        any(module == name or module.startswith(name + ".") for name in ALLOWED)


@pytest.mark.parametrize("path", sorted(REPORT.rglob("*.py")), ids=lambda p: p.relative_to(REPORT).as_posix())
def test_a_report_imports_only_the_result_model(path: Path) -> None:
    outside = [f"{path.name}:{line}: {module}" for line, module in imports_of(path) if not allowed(module)]
    assert not outside, "a report reads the Result and nothing else; carry what it needs in the Result:\n" + \
        "\n".join(outside)


def test_the_boundary_check_sees_what_crosses_it(tmp_path: Path) -> None:
    crossing = tmp_path / "crossing.py"
    crossing.write_text("import json\nfrom grader.results import Result\n\n\ndef f():\n"
                        "    from grader.assignment import PROJECT_ROOT\n    import grader.timing.table\n"
                        "    from .. import pipeline\n")
    assert [m for _, m in imports_of(crossing) if not allowed(m)] == ["grader.assignment", "grader.timing.table", ".."]
