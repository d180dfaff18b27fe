"""Whole-program checks as plug-ins (`grader.checks`): the registry, a table no check claims, and a core that
names none of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import grader
from grader.checks import CHECK_NAMES, check_named
from grader.errors import SpecError
from grader.assignment import load_assignment

from conftest import copy_assignment

GRADER = Path(grader.__file__).resolve().parent


def test_the_registry_lists_each_check_by_name() -> None:
    assert CHECK_NAMES == ("forward", "decode")
    assert [check_named(name).name for name in CHECK_NAMES] == ["forward", "decode"]
    with pytest.raises(ValueError, match="unknown check 'generation' \\(have forward, decode\\)"):
        check_named("generation")


def test_a_table_that_names_no_check_is_named_with_the_checks_there_are(tmp_path: Path) -> None:
    pack = copy_assignment("gpt2-m1", tmp_path)
    spec = pack / "assignment.toml"
    spec.write_text(spec.read_text() + "\n[generation]\nweight = 1\n")
    with pytest.raises(SpecError) as error:
        load_assignment(pack)
    assert str(error.value) == (f"{spec}: unknown table [generation]; expected [assignment], [[kernels]], "
                                "[[variants]], [timing], [competition] or a check's table ([forward], [decode])")


def test_a_pack_based_on_another_inherits_its_checks_table_and_may_replace_it(tmp_path: Path) -> None:
    m2 = copy_assignment("gpt2-m2", tmp_path)
    copy_assignment("gpt2-m1", tmp_path)
    assert load_assignment(m2).check("forward").T == 32
    spec = m2 / "assignment.toml"
    spec.write_text(spec.read_text() + "\n[forward]\nB = 1\nT = 16\n")
    assert load_assignment(m2).check("forward").T == 16


def test_the_core_names_no_check_but_in_its_registration() -> None:
    """Outside the checks' plug-in packages (which may build on each other: decode composes forward's pass), a check
    is named once: where it is registered (grader/checks/__init__.py). A method `.decode(` and `DecodeError` are
    Python's words, not the check's. The competition (grader/competition/) is the forward check's generation, timed:
    a client of that plug-in, which it names where it reads the [forward] table and composes its steps."""
    plugins = {("checks", name) for name in CHECK_NAMES}
    found = []
    for path in sorted(GRADER.rglob("*")):
        relative = path.relative_to(GRADER)
        if not path.is_file() or "__pycache__" in relative.parts or relative.parts[:2] in plugins \
                or relative.parts[0] == "competition":
            continue
        text = path.read_text(errors="replace")
        found += [(relative.as_posix(), name, line.strip()) for line in text.splitlines() for name in CHECK_NAMES
                  if re.search(rf"(?<!\.){name}(?!Error)", line, re.IGNORECASE)]
    registration = '_MODULES = {"forward": "grader.checks.forward.check", "decode": "grader.checks.decode.check"}'
    assert found == [("checks/__init__.py", name, registration) for name in CHECK_NAMES]
