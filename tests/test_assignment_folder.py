"""One assignment, one folder: a new assignment is `assignments/<name>/` and nothing outside it.

The new assignment here is a renamed copy of flash-attention-cpu's folder, alone in a temporary
assignments/ folder: the grader loads it, lists its samples, composes a submission from its
reference, and grades that submission from the command line, with the repository's own
assignments/ out of sight (`KERNEL_GRADER_HOME`).
"""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

import pytest

from grader.cases import Seed, make_case_inputs
from grader.errors import SpecError
from grader.samples import VARIANT_FILE, compose, variants
from grader.assignment.trees import tree_files
from grader.assignment import ASSIGNMENTS_DIR, list_assignments, load_assignment

from test_cli import grader

NAME = "tiny-attention"


def new_assignment(home: Path) -> Path:
    """flash-attention-cpu's folder copied to home/assignments/tiny-attention, its name changed (the spec's and the
    template's marker): nothing else."""
    folder = Path(shutil.copytree(ASSIGNMENTS_DIR / "flash-attention-cpu", home / "assignments" / NAME,
                                  ignore=shutil.ignore_patterns("__pycache__")))
    spec = folder / "assignment.toml"
    spec.write_text(spec.read_text().replace('name = "flash-attention-cpu"', f'name = "{NAME}"', 1))
    marker = folder / "template" / ".kernel-grader.toml"  # the template names its assignment for `grader check`
    marker.write_text(marker.read_text().replace('"flash-attention-cpu"', f'"{NAME}"'))
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_new_assignment_is_loaded_from_its_folder_alone(tmp_path: Path) -> None:
    folder = new_assignment(tmp_path)
    assignment = load_assignment(NAME, folder.parent)
    assert [a.name for a in list_assignments(folder.parent)] == [NAME]
    assert assignment.root == folder.resolve()
    for path in (assignment.spec_file, assignment.inputs_file, assignment.numpy_reference_file,
                 assignment.template_dir, assignment.samples_dir):
        assert path.exists() and path.is_relative_to(folder.resolve()), path
    for kind in ("template", "reference"):  # the reference is the template with the solution laid over: both its
        laid_from = tree_files(assignment.lineage, kind).values()  # own folders, nothing of another assignment
        assert laid_from and all(p.is_relative_to(folder.resolve() / kind) or p.is_relative_to(folder.resolve() / "template")
                                 for p in laid_from), kind
    assert files_of(assignment.reference_dir) == {p.relative_to(layer).as_posix(): p.read_bytes()
                                                  for p in tree_files(assignment.lineage, "reference").values()
                                                  for layer in (folder.resolve() / "reference", folder.resolve() / "template")
                                                  if p.is_relative_to(layer)}
    flash = assignment.kernel("flash_attention")  # inputs.py imported from the new folder
    assert set(make_case_inputs(assignment, flash, flash.cases[0], Seed(assignment.public_seed))) == {"Q", "K", "V"}


def test_a_new_assignments_samples_are_listed_and_composed_from_its_folder(tmp_path: Path) -> None:
    folder = new_assignment(tmp_path)
    assignment = load_assignment(NAME, folder.parent)
    samples = variants(assignment)
    assert {s.name for s in samples} == {p.parent.name for p in (folder / "samples").glob(f"*/{VARIANT_FILE}")}
    assert len(samples) > 10 and all(s.folder.is_relative_to(folder.resolve() / "samples") for s in samples)

    reference = compose(assignment, None, tmp_path / "reference")
    assert files_of(reference) == files_of(assignment.reference_dir) == {**files_of(folder / "template"),
                                                                          **files_of(folder / "reference")}
    mutant = next(s for s in samples if s.name == "mutant-flash-no-rescale")
    composed = compose(assignment, mutant, tmp_path / "mutant")
    assert (composed / "src" / "flash_attention.cpp").read_bytes() == \
        (folder / "samples" / mutant.name / "src" / "flash_attention.cpp").read_bytes()
    assert filecmp.cmp(composed / "src" / "standard_attention.cpp",
                       folder / "reference" / "src" / "standard_attention.cpp", shallow=False)
    assert not (composed / VARIANT_FILE).exists()


def test_the_command_line_grades_a_new_assignment_given_only_its_folder(tmp_path: Path, cache_dir: Path) -> None:
    home = tmp_path / "home"
    folder = new_assignment(home)
    assert sorted(p.name for p in home.iterdir()) == ["assignments"]
    environment = {"KERNEL_GRADER_HOME": str(home)}
    listed = grader("list", cache_dir=cache_dir, env=environment)
    assert listed.returncode == 0, listed.stderr
    assert NAME in listed.stdout and "gpt2-m1" not in listed.stdout and "flash-attention-cpu" not in listed.stdout
    submission = shutil.copytree(folder / "template", tmp_path / "student")  # a fork of the template, solved
    shutil.copytree(folder / "reference", submission, dirs_exist_ok=True)
    checked = grader("check", str(submission), "--json", str(tmp_path / "result.json"), cache_dir=cache_dir,
                     env=environment)  # recognised from its files: the one assignment there is
    assert checked.returncode == 0, checked.stdout + checked.stderr
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["assignment"] == NAME and result["score"] == result["max_score"] > 0


def test_without_an_assignments_folder_the_error_says_to_set_kernel_grader_home(tmp_path: Path,
                                                                                cache_dir: Path) -> None:
    listed = grader("list", cache_dir=cache_dir, env={"KERNEL_GRADER_HOME": str(tmp_path)})
    assert listed.returncode == 2
    assert f"no assignments folder at {tmp_path / 'assignments'}" in listed.stderr
    assert "KERNEL_GRADER_HOME" in listed.stderr
    with pytest.raises(SpecError, match=f"no assignment named 'nothing-here' in {tmp_path}"):
        load_assignment("nothing-here", tmp_path)
