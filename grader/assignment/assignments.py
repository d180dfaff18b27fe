"""Where assignments live, which there are, and importing an assignment's Python modules (inputs, NumPy reference).

An assignment is one folder, whole: `assignments/<name>/` holds its `assignment.toml`, `inputs.py`,
`numpy_reference.py`, `reference/`, `template/` and `samples/`. Adding one touches no other folder.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from grader.errors import SpecError

if TYPE_CHECKING:
    from grader.assignment.model import Assignment

# The folder that holds assignments/: beside the package in a clone (the README's editable install), or
# wherever $KERNEL_GRADER_HOME points for any other install (a wheel carries the grader, not the assignments).
PROJECT_ROOT = Path(os.environ.get("KERNEL_GRADER_HOME") or Path(__file__).resolve().parent.parent.parent)
ASSIGNMENTS_DIR = PROJECT_ROOT / "assignments"


def find_assignment(name: str, assignments_dir: Path | None = None) -> Path:
    """The folder of the assignment `name` in `assignments_dir` (default: the repository's assignments/)."""
    folder = assignments_dir or ASSIGNMENTS_DIR
    assignment = folder / name
    if not (assignment / "assignment.toml").is_file():
        if not folder.is_dir():
            raise SpecError(_no_assignments_folder(folder, assignments_dir is None))
        known = sorted(p.name for p in folder.iterdir() if (p / "assignment.toml").is_file())
        raise SpecError(f"no assignment named {name!r} in {folder} (known: {', '.join(known) or 'none'})")
    return assignment


@dataclass(frozen=True)
class BrokenAssignment:
    """An assignment that does not load: its name and the loader's error (file, key, what was expected)."""

    name: str
    error: str


def list_assignments(assignments_dir: Path | None = None) -> list[Assignment]:
    """Every assignment in `assignments_dir` (default: the repository's assignments/) that loads, by name; a broken
    one is left out (`survey_assignments` names it), so that one bad assignment never stops the commands that name none."""
    return survey_assignments(assignments_dir)[0]


def survey_assignments(assignments_dir: Path | None = None) -> tuple[list[Assignment], list[BrokenAssignment]]:
    """The assignments that load, and those that don't with their errors, each by name."""
    folder = assignments_dir or ASSIGNMENTS_DIR
    if not folder.is_dir():
        raise SpecError(_no_assignments_folder(folder, assignments_dir is None))
    from grader.assignment.loader import load_assignment

    loaded: list[Assignment] = []
    broken: list[BrokenAssignment] = []
    for spec_folder in sorted(p for p in folder.iterdir() if (p / "assignment.toml").is_file()):
        try:
            loaded.append(load_assignment(spec_folder.name, folder))
        except SpecError as error:
            broken.append(BrokenAssignment(spec_folder.name, str(error)))
    return loaded, broken


def _no_assignments_folder(folder: Path, default: bool) -> str:
    if not default:
        return f"no assignments folder at {folder}"
    if os.environ.get("KERNEL_GRADER_HOME"):
        return (f"no assignments folder at {folder}: KERNEL_GRADER_HOME={PROJECT_ROOT} holds no assignments/; "
                "set it to the grader's repository (the folder that holds assignments/)")
    return (f"no assignments folder at {folder}: an installed grader (not the repository's editable install) "
            "carries no assignments; set KERNEL_GRADER_HOME to the grader's repository (the folder that holds "
            "assignments/)")


def load_assignment_module(path: Path) -> ModuleType:
    """An assignment's Python file (inputs.py, numpy_reference.py) imported as a module of its own."""
    spec = importlib.util.spec_from_file_location(
        f"kernel_grader_assignment_{path.parent.name}_{path.stem}".replace("-", "_"), path)
    if spec is None or spec.loader is None:
        raise SpecError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # a broken assignment module: name the file and what it raised
        raise SpecError(f"{path}: importing it raised {type(error).__name__}: {error}") from error
    return module


def load_assignment_function(path: Path, name: str) -> Callable[..., Any]:
    module = load_assignment_module(path)
    function = getattr(module, name, None)
    if not callable(function):
        raise SpecError(f"{path}: expected a function named '{name}'")
    return function
