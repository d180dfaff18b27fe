"""Where packs live, which there are, and importing a pack's Python modules (inputs, NumPy reference)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from grader.errors import SpecError

if TYPE_CHECKING:
    from grader.spec.model import Assignment

# Where assignments/, reference/ and student_template/ live: beside the package in a clone (the
# README's editable install), or wherever $KERNEL_GRADER_HOME points for any other install.
PROJECT_ROOT = Path(os.environ.get("KERNEL_GRADER_HOME") or Path(__file__).resolve().parent.parent.parent)


def find_pack(name: str, packs_dir: Path | None = None) -> Path:
    packs = packs_dir or PROJECT_ROOT / "assignments"
    pack = packs / name
    if not (pack / "assignment.toml").is_file():
        known = sorted(p.name for p in packs.iterdir() if (p / "assignment.toml").is_file()) if packs.is_dir() else []
        raise SpecError(f"no assignment named {name!r} in {packs} (known: {', '.join(known) or 'none'})")
    return pack


def list_assignments(packs_dir: Path | None = None) -> list[Assignment]:
    packs = packs_dir or PROJECT_ROOT / "assignments"
    if not packs.is_dir():
        raise SpecError(f"no assignments folder at {packs}: set KERNEL_GRADER_HOME to the grader's repository")
    from grader.spec.loader import load_assignment

    return [load_assignment(p.name, packs) for p in sorted(packs.iterdir()) if (p / "assignment.toml").is_file()]



def load_pack_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kernel_grader_pack_{path.parent.name}_{path.stem}".replace("-", "_"), path)
    if spec is None or spec.loader is None:
        raise SpecError(f"{path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # a broken pack module: name the file and what it raised
        raise SpecError(f"{path}: importing it raised {type(error).__name__}: {error}") from error
    return module


def load_pack_function(path: Path, name: str) -> Callable[..., Any]:
    module = load_pack_module(path)
    function = getattr(module, name, None)
    if not callable(function):
        raise SpecError(f"{path}: expected a function named '{name}'")
    return function
