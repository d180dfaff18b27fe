"""The target registry: a spec names its target from it, and nothing outside `grader/targets/` asks
which target it has. (Its harness halves, in the sandbox boundary: tests/test_boundary.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.errors import SpecError
from grader.assignment import PROJECT_ROOT, load_assignment
from grader.targets import TARGET_NAMES, target_named

PACKAGE = PROJECT_ROOT / "grader"
# A target's name as a literal: in code that compares with it, or a template that tests it.
TARGET_LITERAL = re.compile(r"""["'](%s)["']""" % "|".join(TARGET_NAMES))
# Lines where such a literal names something else: Gradescope's metadata field for the interpreter's version.
NOT_A_TARGET = ('"python": result.environment.python',)


def test_every_registered_target_is_found_by_its_name() -> None:
    for name in TARGET_NAMES:
        target = target_named(name)
        assert target.name == name and target.device_module.startswith("grader.boundary.")
    with pytest.raises(ValueError, match="unknown target 'fortran'"):
        target_named("fortran")


def test_a_spec_with_an_unknown_target_names_file_key_and_the_registered_targets(tmp_path: Path) -> None:
    pack = tmp_path / "assignments" / "flash-attention-cpu"
    source = PROJECT_ROOT / "assignments" / "flash-attention-cpu"
    pack.mkdir(parents=True)
    for name in ("assignment.toml", "inputs.py", "numpy_reference.py"):
        (pack / name).write_text((source / name).read_text())
    spec = pack / "assignment.toml"
    spec.write_text(spec.read_text().replace('target = "cpp"', 'target = "fortran"'))
    with pytest.raises(SpecError) as raised:
        load_assignment(pack)
    message = str(raised.value)
    assert message.startswith(f"{spec} [assignment]: key 'target' must be one of ")
    assert all(name in message for name in TARGET_NAMES) and "found 'fortran'" in message


def test_no_module_outside_the_targets_asks_which_target_it_has() -> None:
    found = []
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.j2")]):
        if PACKAGE / "targets" in path.parents:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if TARGET_LITERAL.search(line) and not any(other in line for other in NOT_A_TARGET):
                found.append(f"{path.relative_to(PROJECT_ROOT)}:{number}: {line.strip()}")
    assert not found, "ask the target (grader.targets) instead:\n" + "\n".join(found)
